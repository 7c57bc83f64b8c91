//! Queries the projector answers on `gridfold.q.>` (request/reply, JSON), and
//! the summaries they return: the same views `replay` and `sim` print. Every
//! answer is a pure function of the folded state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::explain::{explain, Explanation};
use crate::core::family::{GridStat, JobStat};
use crate::core::ids::TaskRef;
use crate::core::state::{EngineIdx, EngineStatus, JobIdx, JobStatus, State, Usage};

/// `gridfold stat`: a [`StatRequest`] in, a [`StateSummary`] out.
pub const STAT_SUBJECT: &str = "gridfold.q.stat";
/// `gridfold why`: a [`WhyRequest`] in, a [`WhyReply`] out.
pub const WHY_SUBJECT: &str = "gridfold.q.why";
/// `gridfold blacklist ls`: a [`BlacklistsRequest`] in, a [`BlacklistsReply`] out.
pub const BLACKLISTS_SUBJECT: &str = "gridfold.q.blacklists";
/// `gridfold library ls`: a [`LibrariesRequest`] in, a [`LibrariesReply`] out.
pub const LIBRARIES_SUBJECT: &str = "gridfold.q.libraries";
/// The commands that publish (`submit`, `cancel`, ...): a [`VerdictRequest`] in,
/// a [`Verdict`] out: did the projector accept the entry at that sequence?
pub const VERDICT_SUBJECT: &str = "gridfold.q.verdict";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct VerdictRequest {
    /// The log sequence the command's event was stored at.
    pub seq: u64,
}

/// What the fold made of one entry, as far as the projector knows now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerdictKind {
    /// Not folded yet: the projector is behind that sequence.
    Pending,
    Accepted,
    Rejected,
    /// Folded, but so long ago that its rejection record, if any, is no longer
    /// among the recent ones the state keeps ([`crate::core::state::RECENT_REJECTIONS_MAX`]).
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verdict {
    pub seq: u64,
    /// The last sequence the projector has folded.
    pub folded_to: u64,
    pub verdict: VerdictKind,
    /// Why it was rejected, as the rejection record says.
    pub rejections: Vec<String>,
}

/// `gridfold usage`: a [`UsageRequest`] in, a [`UsageReply`] out.
pub const USAGE_SUBJECT: &str = "gridfold.q.usage";
/// `gridfold rejections`: a [`RejectionsRequest`] in, a [`RejectionsReply`] out.
pub const REJECTIONS_SUBJECT: &str = "gridfold.q.rejections";
/// Every subject a projector answers on.
pub const QUERY_SUBJECTS: [&str; 11] = [
    STAT_SUBJECT,
    WHY_SUBJECT,
    BLACKLISTS_SUBJECT,
    LIBRARIES_SUBJECT,
    VERDICT_SUBJECT,
    USAGE_SUBJECT,
    REJECTIONS_SUBJECT,
    crate::projector::results::TASKS_SUBJECT,
    crate::projector::results::TASK_SUBJECT,
    crate::projector::results::OUTPUT_SUBJECT,
    POLICY_SUBJECT,
];

/// `gridfold policy show`: a [`PolicyRequest`] in, a [`PolicyReply`] out.
pub const POLICY_SUBJECT: &str = "gridfold.q.policy";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PolicyRequest {}

/// The policy in force and the entry that set it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PolicyReply {
    /// The sequence of the `PolicySet` that set it; 0: no policy was ever
    /// applied, the defaults hold.
    pub seq: u64,
    /// The projector's last folded sequence.
    pub folded_to: u64,
    pub policy: crate::core::event::Policy,
}

impl PolicyReply {
    /// The first line `policy show` and the web view print: where the policy came from.
    pub fn provenance(&self) -> String {
        if self.seq == 0 {
            format!("no policy was applied on this log: the defaults are in force (folded to seq {})", self.folded_to)
        } else {
            format!("the policy in force, set at seq {} (folded to seq {})", self.seq, self.folded_to)
        }
    }

    /// The policy as the policy file writes it (the names `policy apply` reads).
    pub fn policy_text(&self) -> String {
        crate::files::policyfile::policy_file_text(&self.policy)
    }
}

pub fn answer_policy(state: &State, _request: &PolicyRequest) -> PolicyReply {
    PolicyReply { seq: state.policy_seq.0, folded_to: state.last_seq.0, policy: state.policy.clone() }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RejectionsRequest {
    /// Only rejections of this kind (`duplicate-job`, `unknown-job`, ...).
    #[serde(default)]
    pub kind: Option<String>,
}

/// Every rejection over the whole log counted, by kind; the most recent ones
/// ([`crate::core::state::RECENT_REJECTIONS_MAX`]) in detail, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RejectionsReply {
    /// The projector's log time, which the records' times are on.
    pub log_time_ms: u64,
    pub total: u64,
    pub by_kind: BTreeMap<String, u64>,
    /// How many the state keeps in detail.
    pub kept_max: usize,
    pub rejections: Vec<RejectionRecord>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RejectionRecord {
    pub seq: u64,
    pub time_ms: u64,
    pub kind: String,
    /// Why, as a person reads it.
    pub reason: String,
    /// The subject it came on, which says who could publish it.
    pub subject: String,
    /// Who was refused, as the subject names them: `user alice`, `an
    /// operator`, `engine e1`, `an unknown publisher`.
    #[serde(default)]
    pub by: String,
    /// The sender the envelope names (declared, not authenticated).
    pub source: String,
}

pub fn answer_rejections(state: &State, request: &RejectionsRequest) -> RejectionsReply {
    let rejections = state
        .rejections
        .recent
        .iter()
        .filter(|rejected| request.kind.as_deref().is_none_or(|kind| rejected.rejection.kind_name() == kind))
        .map(|rejected| RejectionRecord {
            seq: rejected.seq.0,
            time_ms: rejected.time_ms,
            kind: rejected.rejection.kind_name().to_string(),
            reason: rejected.rejection.to_string(),
            subject: rejected.subject.clone(),
            by: crate::core::subject::origin_of(&rejected.subject).to_string(),
            source: rejected.source.clone(),
        })
        .collect();
    RejectionsReply {
        log_time_ms: state.now_ms,
        total: state.rejections.total,
        by_kind: state.rejections.by_kind.clone(),
        kept_max: crate::core::state::RECENT_REJECTIONS_MAX,
        rejections,
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UsageRequest {}

/// What ended jobs added up to, per user and per project: the retired jobs'
/// summaries plus the ended jobs still in the state, so a job counts from the
/// moment it ends, whether or not it has been retired yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageReply {
    pub log_time_ms: u64,
    /// How long an ended job stays in the state before it is retired (the policy's).
    pub job_retention_ms: u64,
    /// Ended jobs retired so far, over the whole history.
    pub jobs_retired: u64,
    /// Ended jobs still in the state, waiting out their retention.
    pub jobs_awaiting_retirement: u64,
    pub by_user: BTreeMap<String, Usage>,
    pub by_project: BTreeMap<String, Usage>,
}

pub fn answer_usage(state: &State, _request: &UsageRequest) -> UsageReply {
    let mut by_user = state.usage_by_user().clone();
    let mut by_project = state.usage_by_project().clone();
    for job in state.jobs().filter(|job| !job.is_active()) {
        let usage = Usage::of_job(job);
        by_user.entry(job.owner.clone()).or_default().add(&usage);
        by_project.entry(job.project.clone()).or_default().add(&usage);
    }
    UsageReply {
        log_time_ms: state.now_ms,
        job_retention_ms: state.policy.job_retention_ms,
        jobs_retired: state.totals.jobs_retired,
        jobs_awaiting_retirement: state.jobs_awaiting_retirement() as u64,
        by_user,
        by_project,
    }
}

impl std::fmt::Display for UsageReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "ended jobs: {} retired, {} awaiting retirement (retention {} s)",
            self.jobs_retired,
            self.jobs_awaiting_retirement,
            self.job_retention_ms / 1000
        )?;
        for (title, table) in [("USER", &self.by_user), ("PROJECT", &self.by_project)] {
            writeln!(
                f,
                "{title:<24} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10} {:>10}",
                "DONE", "FAILED", "CANCELLED", "TASKS DONE", "TASKS FAIL", "TASKS CANC", "ATTEMPTS"
            )?;
            for (name, usage) in table {
                writeln!(
                    f,
                    "{:<24} {:>8} {:>8} {:>9} {:>10} {:>10} {:>10} {:>10}",
                    crate::human::printable(name),
                    usage.jobs_done,
                    usage.jobs_failed,
                    usage.jobs_cancelled,
                    usage.tasks_done,
                    usage.tasks_failed,
                    usage.tasks_cancelled,
                    usage.attempts
                )?;
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatRequest {
    /// Only this job (all jobs when absent).
    pub job: Option<String>,
    /// Also the digest of the whole state ([`State::state_digest`]). It costs
    /// a serialisation of the whole state on the projector's loop (about
    /// 150 ms once 400,000 tasks have run: `cargo bench --bench core --
    /// state/digest`), so a summary carries it only when asked: for an
    /// audit, not for polling. The projector remembers the last one with its
    /// sequence, so asking again before another entry is folded costs nothing.
    #[serde(default)]
    pub state_digest: bool,
    /// Only the jobs of this owner (unless a job is named).
    #[serde(default)]
    pub owner: Option<String>,
    /// Only the jobs in this state, `active`, `done`, `failed` or `cancelled` (unless a job is named).
    #[serde(default)]
    pub status: Option<String>,
    /// The first matching job to list: its place among them, in the state's order (0 by default).
    #[serde(default)]
    pub from: u32,
    /// Most jobs listed; at most (and by default) [`STAT_JOBS_PER_PAGE_MAX`]; 0
    /// lists none (the figures and counts only).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// Most jobs one `stat` answer lists (a job is under 1 KiB of JSON); ask again
/// from `next_from`. The broker's payload limit may cut a page shorter.
pub const STAT_JOBS_PER_PAGE_MAX: u32 = 1_000;

/// The answer to a request that could not be read, or whose answer could not
/// be sent (too large for the broker): `{"error": "..."}`, on any subject.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueryError {
    pub error: String,
}

/// The broker's payload limit when a connection does not say (NATS's default):
/// no answer is larger.
pub const ANSWER_BYTES_MAX_DEFAULT: usize = 1024 * 1024;

/// Room an answer keeps for the counts set after its lists are measured.
const ANSWER_SLACK_BYTES: usize = 512;

/// The bytes an answer's JSON still has room for, as its lists are filled:
/// what keeps a page within the broker's payload limit.
#[derive(Debug)]
pub struct AnswerRoom {
    used: usize,
    bytes_max: usize,
}

impl AnswerRoom {
    /// An answer of at most `bytes_max` bytes, whose JSON with its lists empty
    /// is `empty`'s (some room is kept for counts set afterwards).
    pub fn new<T: Serialize>(bytes_max: usize, empty: &T) -> AnswerRoom {
        AnswerRoom { used: json_len(empty).saturating_add(ANSWER_SLACK_BYTES), bytes_max }
    }

    /// Takes room for `item` as one more element of a list if the answer stays
    /// within `up_to` bytes (and its maximum): false, taking none, if not.
    pub fn take<T: Serialize>(&mut self, item: &T, up_to: usize) -> bool {
        let used = self.used.saturating_add(json_len(item)).saturating_add(1);
        if used > up_to.min(self.bytes_max) {
            return false;
        }
        self.used = used;
        true
    }

    pub fn bytes_max(&self) -> usize {
        self.bytes_max
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WhyRequest {
    /// `JOB/INDEX`.
    pub task: String,
}

/// `{"explanation": {..}, "text": ".."}`, or `{"error": ".."}`.
#[derive(Debug, Clone, Serialize)]
pub struct WhyReply {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explanation: Option<Explanation>,
    /// The explanation as `gridfold why` prints it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl WhyReply {
    fn error(error: String) -> WhyReply {
        WhyReply { explanation: None, text: None, error: Some(error) }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct BlacklistsRequest {
    /// Only this job, whatever its status.
    #[serde(default)]
    pub job: Option<String>,
    /// Ended jobs too (by default only active ones).
    #[serde(default)]
    pub all: bool,
}

/// The black- and greylisting of jobs: active jobs with either switched on or
/// with failures recorded (ended ones too with `all`), or the one job asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlacklistsReply {
    pub jobs: Vec<JobBlacklist>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobBlacklist {
    pub job: String,
    pub status: String,
    pub engine_blacklisting: bool,
    /// Failures on one engine that blacklist it (when blacklisting is on).
    pub failures_before_blacklist: u32,
    pub engine_greylisting: bool,
    /// Engines that get no more of the job's tasks, by id.
    pub blacklist: Vec<String>,
    /// Engines that reached the threshold; their Blacklist order is not folded yet.
    pub blacklist_pending: Vec<String>,
    /// Task failures per engine since the blacklists were last cleared (greylisting lowers these engines' scores).
    pub failures_by_engine: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LibrariesRequest {}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibrariesReply {
    pub libraries: Vec<LibrarySummary>,
}

/// A published library, as the log says it was stored and which engines hold it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibrarySummary {
    pub name: String,
    pub version: String,
    pub size_bytes: u64,
    pub digest_hex: String,
    /// Logged-in engines that reported it synced, by id.
    pub held_by: Vec<String>,
    /// Logged-in engines ordered to sync it that have not answered yet.
    pub syncing: Vec<String>,
    /// Active jobs rooted on it.
    pub jobs: Vec<String>,
}

/// The state digests `stat` was asked for, the last one remembered with the
/// sequence of the state it is the digest of. For one state as it folds on (the
/// projector's): the state at a sequence is a function of the log, so asking
/// again before another entry is folded costs a clone, where computing it
/// serialises the whole state.
#[derive(Debug, Default)]
pub struct StateDigests {
    last: Option<(u64, String)>,
}

impl StateDigests {
    /// The state's digest, in hex, computed at most once per sequence.
    pub fn of(&mut self, state: &State) -> String {
        match &self.last {
            Some((seq, digest)) if *seq == state.last_seq.0 => digest.clone(),
            _ => {
                let digest = state.state_digest().to_hex();
                self.last = Some((state.last_seq.0, digest.clone()));
                digest
            }
        }
    }
}

/// `stat`'s answer: the figures, the engines, and one page of the jobs the
/// request matches, cut so the whole answer's JSON is at most `bytes_max` (the
/// broker's payload limit): the engines take at most half of it (the rest are
/// counted in `engines_more`), the jobs what is left (the rest are counted in
/// `jobs_more`, from `next_from`). A page lists at least one job when it may
/// list any, so a walk always moves on.
pub fn answer_stat(state: &State, request: &StatRequest, digests: &mut StateDigests, bytes_max: usize) -> StateSummary {
    let mut summary = StateSummary::without_jobs(state);
    if request.state_digest {
        summary.state_digest = Some(digests.of(state));
    }
    let matching: Vec<JobIdx> = match &request.job {
        Some(job) => {
            let id = crate::core::ids::JobId::new(job).ok();
            let found = id.as_ref().and_then(|id| state.job_idx(id));
            if found.is_none() {
                summary.retired = id.and_then(|id| crate::core::explain::retired_job_text(state, &id)).map(|text| text.to_string());
            }
            found.into_iter().collect()
        }
        None => state
            .jobs_indexed()
            .filter(|(_, job)| {
                request.owner.as_ref().is_none_or(|owner| &job.owner == owner)
                    && request.status.as_deref().is_none_or(|status| job.status.as_str() == status)
            })
            .map(|(j, _)| j)
            .collect(),
    };
    summary.jobs_total = matching.len() as u64;
    summary.jobs_active = matching.iter().filter(|&&j| state.job(j).is_active()).count() as u64;

    let engines = std::mem::take(&mut summary.engines);
    let mut room = AnswerRoom::new(bytes_max, &summary);
    for engine in engines {
        if summary.engines_more == 0 && room.take(&engine, bytes_max / 2) {
            summary.engines.push(engine);
        } else {
            summary.engines_more += 1;
        }
    }
    let limit = request.limit.unwrap_or(STAT_JOBS_PER_PAGE_MAX).min(STAT_JOBS_PER_PAGE_MAX) as usize;
    let from = (request.from as usize).min(matching.len());
    for &j in matching[from..].iter().take(limit) {
        let job = JobSummary::of(state, j);
        // The first is listed whatever its size: a walk moves on (and an answer too large becomes an error).
        if !room.take(&job, bytes_max) && !summary.jobs.is_empty() {
            break;
        }
        summary.jobs.push(job);
    }
    let listed_to = from + summary.jobs.len();
    summary.jobs_more = (matching.len() - listed_to) as u64;
    summary.next_from = (summary.jobs_more > 0).then_some(listed_to as u32);
    summary
}

/// The length of `value`'s JSON, as the responder will send it.
pub fn json_len<T: Serialize>(value: &T) -> usize {
    struct Counted(usize);
    impl std::io::Write for Counted {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counted = Counted(0);
    // Serialising an answer fails only on a map with non-string keys, which no answer has.
    match serde_json::to_writer(&mut counted, value) {
        Ok(()) => counted.0,
        Err(_) => usize::MAX,
    }
}

pub fn answer_verdict(state: &State, request: &VerdictRequest) -> Verdict {
    let recent = &state.rejections.recent;
    let rejections: Vec<String> =
        recent.iter().filter(|rejected| rejected.seq.0 == request.seq).map(|rejected| rejected.rejection.to_string()).collect();
    let forgotten = recent.len() == crate::core::state::RECENT_REJECTIONS_MAX
        && recent.front().is_some_and(|oldest| oldest.seq.0 > request.seq);
    let verdict = if state.last_seq.0 < request.seq {
        VerdictKind::Pending
    } else if !rejections.is_empty() {
        VerdictKind::Rejected
    } else if forgotten {
        VerdictKind::Unknown
    } else {
        VerdictKind::Accepted
    };
    Verdict { seq: request.seq, folded_to: state.last_seq.0, verdict, rejections }
}

pub fn answer_why(state: &State, request: &WhyRequest) -> WhyReply {
    let task: TaskRef = match request.task.parse() {
        Ok(task) => task,
        Err(error) => return WhyReply::error(error),
    };
    match explain(state, &task) {
        Ok(explanation) => WhyReply { text: Some(explanation.to_string()), explanation: Some(explanation), error: None },
        Err(error) => WhyReply::error(error.to_string()),
    }
}

pub fn answer_blacklists(state: &State, request: &BlacklistsRequest) -> BlacklistsReply {
    let engine_name = |e: EngineIdx| state.engine(e).id.to_string();
    let jobs = state
        .jobs_indexed()
        .filter(|(_, job)| match &request.job {
            Some(id) => job.id.as_str() == id,
            None => {
                let listed = job.options.engine_blacklisting
                    || job.options.engine_greylisting
                    || !job.blacklist.is_empty()
                    || !job.failures_by_engine.is_empty();
                listed && (request.all || job.is_active())
            }
        })
        .map(|(j, job)| {
            JobBlacklist {
                job: job.id.to_string(),
                status: job.status.as_str().to_string(),
                engine_blacklisting: job.options.engine_blacklisting,
                failures_before_blacklist: job.options.blacklist_threshold(),
                engine_greylisting: job.options.engine_greylisting,
                blacklist: sorted(job.blacklist.iter().map(|&e| engine_name(e)).collect()),
                blacklist_pending: if state.has_pending_blacklist(j) {
                    sorted(
                        state.pending_blacklists().filter(|&(pending, _)| pending == j).map(|(_, e)| engine_name(e)).collect(),
                    )
                } else {
                    Vec::new()
                },
                failures_by_engine: job.failures_by_engine.iter().map(|(&e, &n)| (engine_name(e), n)).collect(),
            }
        })
        .collect();
    BlacklistsReply { jobs }
}

pub fn answer_libraries(state: &State, _request: &LibrariesRequest) -> LibrariesReply {
    let logged_in = || state.engines().iter().filter(|engine| engine.status == EngineStatus::LoggedIn);
    let libraries = state
        .libraries
        .values()
        .map(|info| LibrarySummary {
            name: info.library.name.clone(),
            version: info.library.version.clone(),
            size_bytes: info.size_bytes,
            digest_hex: info.digest_hex.clone(),
            held_by: sorted(logged_in().filter(|e| e.holds(&info.library)).map(|e| e.id.to_string()).collect()),
            syncing: sorted(
                logged_in().filter(|e| e.syncing.as_ref() == Some(&info.library)).map(|e| e.id.to_string()).collect(),
            ),
            jobs: state
                .jobs()
                .filter(|job| job.is_active() && job.options.root_library.as_ref() == Some(&info.library))
                .map(|job| job.id.to_string())
                .collect(),
        })
        .collect();
    LibrariesReply { libraries }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateSummary {
    pub last_seq: u64,
    pub log_time_ms: u64,
    pub chain_digest: String,
    /// Only when asked for ([`StatRequest::state_digest`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_digest: Option<String>,
    pub entries: u64,
    pub order_batches: u64,
    pub rejections: u64,
    pub rejections_by_kind: BTreeMap<String, u64>,
    /// The jobs of this page: from the request's `from`, at most its `limit`
    /// ([`STAT_JOBS_PER_PAGE_MAX`]), and as many as fit the broker's payload limit.
    pub jobs: Vec<JobSummary>,
    /// The jobs the request matched (every job held when it named no filter).
    #[serde(default)]
    pub jobs_total: u64,
    /// Of those, the ones still active.
    #[serde(default)]
    pub jobs_active: u64,
    /// Matching jobs after this page, not listed in it.
    #[serde(default)]
    pub jobs_more: u64,
    /// Ask again with `from` set to this for the next page (null on the last).
    #[serde(default)]
    pub next_from: Option<u32>,
    pub engines: Vec<EngineSummary>,
    /// Engines (the last by id) left out so the answer fits the broker's payload limit.
    #[serde(default)]
    pub engines_more: u64,
    pub dispatches: u64,
    pub tasks_done: u64,
    pub tasks_failed: u64,
    pub attempts_failed: u64,
    pub requeues: u64,
    pub engines_lost: u64,
    /// Mean and longest wait from a job's submission to an attempt's start, in ms of log time.
    pub wait_ms_mean: u64,
    pub wait_ms_max: u64,
    /// Ended jobs that left the state after the policy's retention.
    #[serde(default)]
    pub jobs_retired: u64,
    /// When the one job asked for was retired: what became of it, as a person reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired: Option<String>,
    /// The families' figures of the grid, each under its family's key.
    #[serde(flatten)]
    pub family: GridStat,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSummary {
    pub id: String,
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub project: String,
    pub status: String,
    pub priority: i32,
    pub tasks: u32,
    pub waiting: u32,
    pub dispatched: u32,
    pub running: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub unschedulable: Option<String>,
    /// Tasks completed per second since the job was submitted (log time).
    pub throughput_per_s: f64,
    /// Log time at which the job should end at that rate; absent when unknown or ended.
    pub estimated_end_ms: Option<u64>,
    pub submitted_ms: u64,
    /// Log time the job ended, once it has.
    #[serde(default)]
    pub ended_ms: Option<u64>,
    /// Redundant copies alive beside their tasks' first attempts.
    #[serde(default)]
    pub redundant_copies: u32,
    /// Results that came after their task already had one, and were ignored.
    #[serde(default)]
    pub redundant_results_ignored: u64,
    /// Copies rescheduled but dropped before dispatch: their task got its result first.
    #[serde(default)]
    pub redundant_copies_dropped: u64,
    /// Engines that get no more of this job's tasks.
    #[serde(default)]
    pub blacklisted_engines: u32,
    /// Live attempts an operator suspended (`gridfold suspend`).
    #[serde(default)]
    pub suspended: u32,
    /// While active: its root library, when no logged-in engine that could run it holds it yet.
    #[serde(default)]
    pub waits_for_library: Option<String>,
    /// While active: the jobs it depends on that have not ended.
    #[serde(default)]
    pub waits_for_jobs: Vec<String>,
    /// Held by an operator (`gridfold hold`): no new dispatches.
    #[serde(default)]
    pub held: bool,
    /// Submitted in parts and not all have arrived: the tasks it declared.
    #[serde(default)]
    pub awaits_parts_of: Option<u32>,
    /// The families' figures of the job, each under its family's key.
    #[serde(flatten)]
    pub family: JobStat,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngineSummary {
    pub id: String,
    pub status: String,
    pub slots: u32,
    pub used: u32,
    pub completed: u64,
    pub failed: u64,
    /// Log time of the engine's last report (login, heartbeat, task report).
    #[serde(default)]
    pub last_seen_ms: u64,
    /// Its last reported one-minute load per core, in thousandths.
    #[serde(default)]
    pub load_per_core_milli: u32,
    /// Its properties as requirements name them: `os=linux arch=x86_64 cores=8 …`.
    #[serde(default)]
    pub properties: String,
    /// Drained by an operator (`gridfold engine drain`): no new work.
    #[serde(default)]
    pub drained: bool,
    /// The first suspend threshold (policy `suspend_thresholds`) its last
    /// reported load values are above: the value's name, value and threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold_crossed: Option<crate::core::state::thresholds::ThresholdCause>,
    /// Its tasks the threshold rule holds suspended (`JOB/INDEX`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspended_by_threshold: Vec<String>,
}

impl JobSummary {
    /// Job `j` as `stat` lists it.
    pub fn of(state: &State, j: JobIdx) -> JobSummary {
        let job = state.job(j);
        JobSummary {
            id: job.id.to_string(),
            owner: job.owner.clone(),
            project: job.project.clone(),
            status: job.status.as_str().to_string(),
            priority: job.priority,
            tasks: job.n_tasks(),
            waiting: job.counts.waiting,
            dispatched: job.counts.dispatched,
            running: job.counts.running,
            done: job.counts.done,
            failed: job.counts.failed,
            cancelled: job.counts.cancelled,
            unschedulable: job.unschedulable.map(|u| u.as_str().to_string()),
            throughput_per_s: throughput_per_s(job.counts.done, job.submitted_ms, job.ended_ms.unwrap_or(state.now_ms)),
            estimated_end_ms: estimated_end_ms(state.now_ms, job),
            submitted_ms: job.submitted_ms,
            ended_ms: job.ended_ms,
            redundant_copies: redundant_copies(state, j),
            redundant_results_ignored: job.redundant_results,
            redundant_copies_dropped: job.copies_dropped,
            blacklisted_engines: job.blacklist.len() as u32,
            suspended: state.n_suspended_of_job(j),
            waits_for_library: job
                .options
                .root_library
                .as_ref()
                .filter(|_| job.is_active() && state.category(job.category).eligible_logged_in == 0)
                .map(|library| library.to_string()),
            waits_for_jobs: if job.is_active() && !job.options.depends_on_jobs.is_empty() {
                state.unended_dependencies_of(j).into_iter().map(|d| state.job(d).id.to_string()).collect()
            } else {
                Vec::new()
            },
            held: job.held,
            awaits_parts_of: job.options.tasks_total.filter(|_| job.awaits_parts()),
            family: JobStat::of(state, j),
        }
    }
}

impl StateSummary {
    /// The summary without the state digest, which costs a serialisation of
    /// the whole state: see [`StateSummary::with_state_digest`].
    /// Every job held is listed: for a replay or the simulator, which print it
    /// themselves; the projector's answers are pages ([`answer_stat`]).
    pub fn of(state: &State) -> StateSummary {
        let mut summary = StateSummary::without_jobs(state);
        summary.jobs = state.jobs_indexed().map(|(j, _)| JobSummary::of(state, j)).collect();
        summary.jobs_total = summary.jobs.len() as u64;
        summary.jobs_active = summary.jobs.iter().filter(|job| job.status == "active").count() as u64;
        summary
    }

    /// The summary's figures and every engine (by id): no job listed.
    fn without_jobs(state: &State) -> StateSummary {
        let mut engines: Vec<EngineSummary> = state
            .engines()
            .iter()
            .enumerate()
            .map(|(e, engine)| EngineSummary {
                id: engine.id.to_string(),
                status: match engine.status {
                    EngineStatus::LoggedIn => "logged-in",
                    EngineStatus::LoggedOut => "logged-out",
                    EngineStatus::Lost => "lost",
                }
                .to_string(),
                slots: engine.slots,
                used: engine.used,
                completed: engine.completed,
                failed: engine.failed,
                last_seen_ms: engine.last_seen_ms,
                load_per_core_milli: engine.load.load_per_core_milli,
                properties: engine.props.to_string(),
                drained: engine.drained,
                threshold_crossed: state.threshold_exceeded(EngineIdx(e as u32)),
                suspended_by_threshold: state
                    .threshold_suspended_on(EngineIdx(e as u32))
                    .into_iter()
                    .map(|(key, _, _)| format!("{}/{}", state.job(key.job).id, key.index))
                    .collect(),
            })
            .collect();
        engines.sort_by(|a, b| a.id.cmp(&b.id));
        let totals = &state.totals;
        StateSummary {
            last_seq: state.last_seq.0,
            log_time_ms: state.now_ms,
            chain_digest: state.chain.to_hex(),
            state_digest: None,
            entries: totals.entries,
            order_batches: totals.order_batches,
            rejections: state.rejections.total,
            rejections_by_kind: state.rejections.by_kind.clone(),
            jobs: Vec::new(),
            jobs_total: 0,
            jobs_active: 0,
            jobs_more: 0,
            next_from: None,
            engines,
            engines_more: 0,
            dispatches: totals.dispatches,
            tasks_done: totals.tasks_done,
            tasks_failed: totals.tasks_failed,
            attempts_failed: totals.attempts_failed,
            requeues: totals.requeues,
            engines_lost: totals.engines_lost,
            wait_ms_mean: totals.wait_ms_sum.checked_div(totals.waits_counted).unwrap_or(0),
            wait_ms_max: totals.wait_ms_max,
            jobs_retired: totals.jobs_retired,
            retired: None,
            family: GridStat::of(state),
        }
    }

    /// The summary with the digest of the whole state, for comparing it with
    /// a replay's ([`State::state_digest`]).
    pub fn with_state_digest(self, state: &State) -> StateSummary {
        StateSummary { state_digest: Some(state.state_digest().to_hex()), ..self }
    }
}

impl std::fmt::Display for StateSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "entries {} (up to seq {}), order batches {}, rejected {}", self.entries, self.last_seq, self.order_batches, self.rejections)?;
        for (kind, n) in &self.rejections_by_kind {
            writeln!(f, "  rejected {kind}: {n}")?;
        }
        writeln!(
            f,
            "dispatches {}, tasks done {}, tasks failed {}, attempts failed {}, requeues {}, engines lost {}",
            self.dispatches, self.tasks_done, self.tasks_failed, self.attempts_failed, self.requeues, self.engines_lost
        )?;
        if self.jobs_retired > 0 {
            writeln!(f, "jobs retired {}", self.jobs_retired)?;
        }
        if let Some(retired) = &self.retired {
            writeln!(f, "{retired}")?;
        }
        write!(f, "{}", self.family)?;
        if !self.jobs.is_empty() {
            writeln!(f, "{:<24} {:>9} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}", "JOB", "STATUS", "PRIO", "TASKS", "WAITING", "DISPATCH", "RUNNING", "DONE", "FAILED", "CANCELLED")?;
            for job in &self.jobs {
                writeln!(
                    f,
                    "{:<24} {:>9} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}{}",
                    job.id, job.status, job.priority, job.tasks, job.waiting, job.dispatched, job.running, job.done, job.failed, job.cancelled,
                    job.unschedulable.as_ref().map(|u| format!("  unschedulable: {u}")).unwrap_or_default()
                )?;
                if job.held {
                    writeln!(f, "  {} is held", job.id)?;
                }
                for line in job.family.lines(self.log_time_ms) {
                    writeln!(f, "{}", crate::human::printable(&line))?;
                }
            }
        }
        if !self.engines.is_empty() {
            writeln!(f, "{:<24} {:>10} {:>6} {:>6} {:>10} {:>8}", "ENGINE", "STATUS", "SLOTS", "USED", "COMPLETED", "FAILED")?;
            for engine in &self.engines {
                writeln!(f, "{:<24} {:>10} {:>6} {:>6} {:>10} {:>8}", engine.id, engine.status, engine.slots, engine.used, engine.completed, engine.failed)?;
            }
        }
        if let Some(state_digest) = &self.state_digest {
            writeln!(f, "state digest {state_digest}")?;
        }
        write!(f, "digest {}", self.chain_digest)
    }
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// Live attempts of a job beyond one per live task: its redundant copies.
fn redundant_copies(state: &State, j: JobIdx) -> u32 {
    let job = state.job(j);
    if !job.options.redundant_rescheduling || !job.is_active() {
        return 0;
    }
    let live_tasks = job.counts.dispatched + job.counts.running;
    (state.live_attempts_of_job_sorted(j).len() as u32).saturating_sub(live_tasks)
}

fn throughput_per_s(done: u32, from_ms: u64, to_ms: u64) -> f64 {
    let elapsed_ms = to_ms.saturating_sub(from_ms);
    if elapsed_ms == 0 { 0.0 } else { f64::from(done) * 1000.0 / elapsed_ms as f64 }
}

fn estimated_end_ms(now_ms: u64, job: &crate::core::state::Job) -> Option<u64> {
    if job.status != JobStatus::Active || job.counts.done == 0 {
        return None;
    }
    let elapsed_ms = now_ms.saturating_sub(job.submitted_ms);
    let remaining = u64::from(job.n_tasks() - job.counts.done - job.counts.failed - job.counts.cancelled);
    Some(now_ms + elapsed_ms * remaining / u64::from(job.counts.done))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::{Event, LibraryInfo, LibraryRef, Origin};
    use crate::core::testkit::fold_and_decide as run;
    use crate::core::testkit::*;

    #[test]
    fn rejections_name_subject_and_sender_bounded_and_filter_by_kind() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.push(Event::JobCancelled { job: job_id("nosuch"), reason: String::new() });
        log.submit(job_spec("j", 1, ""));
        log.submit(job_spec("j", 1, ""));
        // A subject far longer than any kept, which is no event's: cut at 256 bytes.
        let long_subject = format!("gridfold.ev.op.{}", "s".repeat(1_000));
        log.push_on(&long_subject, Origin::Operator, Event::JobCancelled { job: job_id("j"), reason: String::new() });
        // A sender's name far longer than any kept: cut at a character boundary.
        let long_source = format!("x{}", "é".repeat(5_000));
        for entry in &mut log.entries {
            if let crate::core::event::Payload::Event(envelope) = &mut entry.payload {
                envelope.source = long_source.clone();
            }
        }
        let duplicate_seq = log.entries[log.entries.len() - 2].seq.0;
        run(&mut log, &mut state, 0);
        let all = answer_rejections(&state, &RejectionsRequest::default());
        assert_eq!(all.total, 3);
        let kinds: Vec<&str> = all.rejections.iter().map(|r| r.kind.as_str()).collect();
        assert_eq!(kinds, ["unknown-job", "duplicate-job", "wrong-subject"]);
        let duplicate = &all.rejections[1];
        assert_eq!(duplicate.seq, duplicate_seq);
        assert_eq!(duplicate.subject, "gridfold.ev.op.job.submitted");
        assert!(duplicate.reason.contains('j'), "{}", duplicate.reason);
        assert_eq!(duplicate.source.len(), 255, "one byte, then 127 two-byte characters: at most 256 bytes");
        assert!(long_source.starts_with(&duplicate.source));
        assert_eq!(all.rejections[2].subject, long_subject[..256]);
        let only = answer_rejections(&state, &RejectionsRequest { kind: Some("duplicate-job".into()) });
        assert_eq!((only.total, only.rejections.len()), (3, 1));
    }

    #[test]
    fn a_stat_carries_the_state_digest_only_when_asked_and_then_the_states_own() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.login("e1", 2, linux_props("lyon", 8192));
        log.submit(job_spec("j", 3, ""));
        run(&mut log, &mut state, 0);

        // A request from a client that predates the field asks for no digest.
        let old_client: StatRequest = serde_json::from_str(r#"{"job":null}"#).expect("a request without the field");
        let plain = answer_stat(&state, &old_client, &mut StateDigests::default(), ANSWER_BYTES_MAX_DEFAULT);
        assert_eq!(plain.state_digest, None);
        let plain_json = serde_json::to_value(&plain).expect("json");
        assert!(plain_json.get("state_digest").is_none(), "{plain_json}");
        assert!(!plain.to_string().contains("state digest"), "{plain}");

        let asked = answer_stat(&state, &StatRequest { state_digest: true, ..StatRequest::default() }, &mut StateDigests::default(), ANSWER_BYTES_MAX_DEFAULT);
        assert_eq!(asked.state_digest, Some(state.state_digest().to_hex()));
        assert!(asked.to_string().contains(&format!("state digest {}", state.state_digest().to_hex())), "{asked}");
        let back: StateSummary = serde_json::from_value(serde_json::to_value(&asked).expect("json")).expect("parses back");
        assert_eq!(back.state_digest, asked.state_digest);
        assert_eq!(
            serde_json::from_value::<StateSummary>(plain_json).expect("a summary without the digest parses").state_digest,
            None
        );
    }

    #[test]
    fn a_stat_answer_is_a_page_within_its_byte_bound_and_the_pages_list_every_matching_job_once() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        for e in 0..40 {
            log.login(&format!("engine-{e:02}"), 1, linux_props("lyon", 8192));
        }
        for j in 0..3_000 {
            let mut spec = job_spec(&format!("job-{j:04}"), 1, "memory_mb > 1000000");
            spec.owner = if j % 3 == 0 { "carol".into() } else { "dave".into() };
            log.submit(spec);
        }
        run(&mut log, &mut state, 0);
        let digests = &mut StateDigests::default();
        let ask = |request: &StatRequest, bytes_max: usize, digests: &mut StateDigests| {
            let page = answer_stat(&state, request, digests, bytes_max);
            assert!(json_len(&page) <= bytes_max, "{} bytes over {bytes_max}", json_len(&page));
            page
        };

        // The whole default page fits the default bound; what is left is counted.
        let first = ask(&StatRequest::default(), ANSWER_BYTES_MAX_DEFAULT, digests);
        assert_eq!((first.jobs.len() as u32, first.jobs_total, first.jobs_active), (STAT_JOBS_PER_PAGE_MAX, 3_000, 3_000));
        assert_eq!((first.jobs_more, first.next_from, first.engines.len(), first.engines_more), (2_000, Some(1_000), 40, 0));

        // A small bound cuts the engines to half of it and the jobs to the rest; the walk covers every job once.
        let bytes_max = 20 * 1024;
        let mut seen = Vec::new();
        let mut request = StatRequest { owner: Some("dave".into()), ..StatRequest::default() };
        loop {
            let page = ask(&request, bytes_max, digests);
            assert!(page.engines_more > 0 && json_len(&page.engines) <= bytes_max / 2, "{} engines", page.engines.len());
            assert!(!page.jobs.is_empty() && page.jobs.len() < 1_000, "a page cut by its bytes: {}", page.jobs.len());
            assert_eq!(page.jobs_total, 2_000);
            seen.extend(page.jobs.iter().map(|job| job.id.clone()));
            assert_eq!(page.jobs_more, 2_000 - seen.len() as u64);
            match page.next_from {
                Some(from) => request.from = from,
                None => break,
            }
        }
        let dave: Vec<String> = (0..3_000).filter(|j| j % 3 != 0).map(|j| format!("job-{j:04}")).collect();
        assert_eq!(seen, dave, "every one of dave's jobs, once, in order");

        // No jobs asked for: the counts alone; past the end: none, nothing more; a named job: that one.
        let counts = ask(&StatRequest { limit: Some(0), status: Some("active".into()), ..StatRequest::default() }, bytes_max, digests);
        assert_eq!((counts.jobs.len(), counts.jobs_total, counts.jobs_more, counts.next_from), (0, 3_000, 3_000, Some(0)));
        let past = ask(&StatRequest { from: 5_000, ..StatRequest::default() }, bytes_max, digests);
        assert_eq!((past.jobs.len(), past.jobs_more, past.next_from), (0, 0, None));
        let done = ask(&StatRequest { status: Some("done".into()), ..StatRequest::default() }, bytes_max, digests);
        assert_eq!((done.jobs_total, done.jobs_more), (0, 0));
        let one = ask(&StatRequest { job: Some("job-2999".into()), owner: Some("nobody".into()), ..StatRequest::default() }, bytes_max, digests);
        assert_eq!((one.jobs.len(), one.jobs_total, one.jobs_more), (1, 1, 0), "a named job is answered whatever the filters");
    }

    #[test]
    fn stat_why_and_usage_speak_of_retired_jobs() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.push(Event::PolicySet(crate::core::event::Policy { job_retention_ms: 60_000, ..Default::default() }));
        log.login("e1", 2, linux_props("lyon", 8192));
        log.submit(job_spec("old", 2, ""));
        let mut other = job_spec("other", 1, "");
        other.owner = "bob".into();
        log.submit(other);
        run(&mut log, &mut state, 0);
        let n = log.entries.len();
        log.completed("old", 0, 1, "e1");
        log.completed("old", 1, 1, "e1");
        log.push(Event::JobCancelled { job: job_id("other"), reason: "test".into() });
        run(&mut log, &mut state, n);
        let n = log.entries.len();
        log.at(1_000_000 + 90_000).push(Event::Tick);
        run(&mut log, &mut state, n);
        assert_eq!(state.job_idx(&job_id("old")), None, "retired");

        let stat = answer_stat(&state, &StatRequest { job: Some("old".into()), ..StatRequest::default() }, &mut StateDigests::default(), ANSWER_BYTES_MAX_DEFAULT);
        expect_test::expect!["job old ended done (2 task(s)) 90 s ago and was retired from the state 0 s ago: only its outcome and its usage are kept"]
            .assert_eq(stat.retired.as_deref().unwrap_or("(none)"));
        let why = answer_why(&state, &WhyRequest { task: "old/1".into() });
        assert_eq!(why.error, stat.retired);
        let usage = answer_usage(&state, &UsageRequest {});
        expect_test::expect![[r#"
            ended jobs: 2 retired, 0 awaiting retirement (retention 60 s)
            USER                         DONE   FAILED CANCELLED TASKS DONE TASKS FAIL TASKS CANC   ATTEMPTS
            alice                           1        0         0          2          0          0          2
            bob                             0        0         1          0          0          1          0
            PROJECT                      DONE   FAILED CANCELLED TASKS DONE TASKS FAIL TASKS CANC   ATTEMPTS
            physics                         1        0         1          2          0          1          2
        "#]]
        .assert_eq(&usage.to_string());
        expect_test::expect![[r#"{"log_time_ms":1090000,"job_retention_ms":60000,"jobs_retired":2,"jobs_awaiting_retirement":0,"by_user":{"alice":{"jobs_done":1,"jobs_failed":0,"jobs_cancelled":0,"tasks_done":2,"tasks_failed":0,"tasks_cancelled":0,"attempts":2},"bob":{"jobs_done":0,"jobs_failed":0,"jobs_cancelled":1,"tasks_done":0,"tasks_failed":0,"tasks_cancelled":1,"attempts":0}},"by_project":{"physics":{"jobs_done":1,"jobs_failed":0,"jobs_cancelled":1,"tasks_done":2,"tasks_failed":0,"tasks_cancelled":1,"attempts":2}}}"#]]
        .assert_eq(&serde_json::to_string(&usage).unwrap());
    }

    #[test]
    fn blacklists_and_libraries_answer_from_the_state() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        let library = LibraryRef::new("tools", "1");
        log.push(Event::LibraryPublished(LibraryInfo { library: library.clone(), size_bytes: 3, digest_hex: "ab".into() }));
        let mut props = linux_props("lyon", 8192);
        props.libraries = vec![library.clone()];
        log.login("e1", 1, props);
        let mut flaky = job_spec("flaky", 1, "");
        flaky.options.engine_blacklisting = true;
        flaky.options.root_library = Some(library.clone());
        log.submit(flaky);
        log.submit(job_spec("plain", 1, ""));
        run(&mut log, &mut state, 0);
        let n = log.entries.len();
        log.failed("flaky", 0, 1, "e1");
        run(&mut log, &mut state, n);

        let reply = answer_blacklists(&state, &BlacklistsRequest::default());
        let jobs: Vec<(&str, &[String], Option<&u32>)> =
            reply.jobs.iter().map(|j| (j.job.as_str(), j.blacklist.as_slice(), j.failures_by_engine.get("e1"))).collect();
        assert_eq!(jobs, [("flaky", &["e1".to_string()][..], Some(&1))], "plain has nothing to list: {reply:?}");
        let plain = answer_blacklists(&state, &BlacklistsRequest { job: Some("plain".into()), all: false });
        assert_eq!(plain.jobs.len(), 1, "a named job is listed whatever it holds");
        assert!(answer_blacklists(&state, &BlacklistsRequest { job: Some("nope".into()), all: true }).jobs.is_empty());

        let libraries = answer_libraries(&state, &LibrariesRequest::default());
        assert_eq!(libraries.libraries.len(), 1);
        assert_eq!((libraries.libraries[0].held_by.as_slice(), libraries.libraries[0].jobs.as_slice()), (&["e1".to_string()][..], &["flaky".to_string()][..]));

        let summary = StateSummary::of(&state);
        let flaky = summary.jobs.iter().find(|j| j.id == "flaky").unwrap();
        assert_eq!((flaky.blacklisted_engines, flaky.waits_for_library.as_deref()), (1, None), "{flaky:?}");
    }
}
