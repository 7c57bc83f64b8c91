//! Task results and accounting: the queries behind `gridfold tasks`, `gridfold task`,
//! `gridfold output` and `gridfold wait` (request/reply, JSON), and their answers.
//!
//! `gridfold.q.tasks` and `gridfold.q.task` are pure functions of the folded state:
//! the per-task attempt records of [`crate::core::state::attempts`] (bounded:
//! the newest [`ATTEMPTS_KEPT_PER_TASK`] attempts of a task, and at most
//! [`JOB_ATTEMPT_BYTES_KEPT_MAX`] bytes of results and error tails per job; past
//! that an attempt keeps its figures and the sequence of its report, so the text
//! can still be read from the log).
//!
//! `gridfold.q.output` is answered by the projector's query responder from the
//! JetStream object store where engines put a task's whole stdout and stderr
//! ([`crate::log::output_store`]): a page of at most [`OUTPUT_PAGE_BYTES_MAX`] bytes
//! per reply, so a reply stays under the broker's 1 MiB payload.
//!
//! These types are a contract other tools (the web view) build on: fields are
//! only ever added, with `#[serde(default)]` on requests.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use crate::core::state::attempts::{ATTEMPTS_KEPT_PER_TASK, JOB_ATTEMPT_BYTES_KEPT_MAX};

/// `gridfold tasks`: a [`TasksRequest`] in, a [`TasksReply`] out.
pub const TASKS_SUBJECT: &str = "gridfold.q.tasks";
/// `gridfold task`: a [`TaskRequest`] in, a [`TaskReply`] out.
pub const TASK_SUBJECT: &str = "gridfold.q.task";
/// `gridfold output`: an [`OutputRequest`] in, an [`OutputReply`] out.
pub const OUTPUT_SUBJECT: &str = "gridfold.q.output";

/// Most task lines in one [`TasksReply`] (a line is under 300 bytes of JSON, so a
/// page stays well under the broker's 1 MiB); ask again from `next_from`.
pub const TASKS_PER_PAGE_MAX: u32 = 2_000;
/// Most bytes of output in one [`OutputReply`] (base64 makes them a third larger).
pub const OUTPUT_PAGE_BYTES_MAX: u32 = 512 * 1024;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TasksRequest {
    /// The job's id.
    pub job: String,
    /// Only tasks in this state: `waiting`, `dispatched`, `running`, `done`,
    /// `failed`, `cancelled`.
    #[serde(default)]
    pub state: Option<String>,
    /// The first task index to look at (0 by default).
    #[serde(default)]
    pub from: u32,
    /// Most lines in the reply; at most (and by default) [`TASKS_PER_PAGE_MAX`].
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One page of a job's tasks, or `error` (`no job X`, an unknown state).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TasksReply {
    pub job: String,
    /// The job's state: `active`, `done`, `failed`, `cancelled`.
    pub status: String,
    /// The projector's log time, which every time here is on.
    pub log_time_ms: u64,
    pub submitted_ms: u64,
    /// When the job ended, if it has.
    pub ended_ms: Option<u64>,
    /// How many tasks the job has.
    pub n_tasks: u32,
    /// Tasks per state, over the whole job.
    pub counts: BTreeMap<String, u32>,
    pub tasks: Vec<TaskLine>,
    /// More tasks may match from this index on: ask again with `from` set to it.
    pub next_from: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One task, as `gridfold tasks` prints it: its state and its newest attempt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskLine {
    pub index: u32,
    /// `waiting`, `dispatched`, `running`, `done`, `failed`, `cancelled`.
    pub state: String,
    /// Attempts dispatched so far (redundant copies included).
    pub attempts: u32,
    /// The engine of the newest attempt.
    pub engine: Option<String>,
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    /// Wall time of the newest attempt: as the engine measured it when it
    /// ended, else log time from its start to now.
    pub wall_ms: Option<u64>,
    pub exit_code: Option<i32>,
    /// `non-zero-exit`, `signalled`, `wall-time-exceeded`, `launch-failed`, `engine-shutdown`.
    pub failure_kind: Option<String>,
    /// A gateway engine's job id in its resource manager (a Slurm job id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_job: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TaskRequest {
    /// `JOB/INDEX`.
    pub task: String,
}

/// Every kept attempt of one task, oldest first, or `error` (`no job X`, `no task X/N`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskReply {
    /// `JOB/INDEX`.
    pub task: String,
    pub job: String,
    pub index: u32,
    pub state: String,
    pub log_time_ms: u64,
    /// Attempts dispatched so far (redundant copies included).
    pub attempts_total: u32,
    /// Older attempts the state no longer keeps (only the newest
    /// [`ATTEMPTS_KEPT_PER_TASK`] are kept).
    pub attempts_forgotten: u32,
    /// The task's command (argv with its parameters filled in).
    pub argv: Vec<String>,
    pub params: BTreeMap<String, String>,
    pub attempts: Vec<AttemptView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One attempt of a task.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptView {
    /// The attempt's number (the first is 1).
    pub attempt: u32,
    pub engine: String,
    /// `dispatched`, `running`, `completed`, `failed`, or `ended` (cancelled,
    /// requeued, preempted or its engine lost: no report will come).
    pub outcome: String,
    /// The log sequence of the order batch that dispatched it, and the sequence
    /// that batch's decisions were based on (`gridfold why --at`).
    pub dispatch_seq: u64,
    pub based_on_seq: u64,
    pub dispatched_ms: u64,
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    /// The sequence of its `TaskCompleted` or `TaskFailed` report.
    pub report_seq: Option<u64>,
    pub exit_code: Option<i32>,
    pub failure_kind: Option<String>,
    pub cpu_ms: Option<u64>,
    pub wall_ms: Option<u64>,
    /// The last 4 KiB of stderr of a failed attempt (when kept).
    pub error_tail: Option<String>,
    /// The first 64 KiB of stdout of a completed attempt, as UTF-8 (invalid bytes
    /// replaced) when kept.
    pub result: Option<String>,
    /// The size of the result on the log, kept or not.
    pub result_bytes: u32,
    /// False when the job's byte budget for kept text was spent: read the text
    /// from the log at `report_seq`.
    pub text_kept: bool,
    /// What the engine stored in the object store (absent: nothing stored).
    pub stdout_stored_bytes: Option<u64>,
    pub stderr_stored_bytes: Option<u64>,
    /// The output was longer than the bound and was cut at it.
    pub output_truncated: bool,
    /// Most bytes of each stream the attempt could store (its share of the policy's `[output]` bounds).
    #[serde(default)]
    pub output_bytes_max: u64,
    /// Suspended by the suspend-threshold rule: the load value, its value and
    /// the threshold when it was suspended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended_by_threshold: Option<crate::core::state::thresholds::ThresholdCause>,
    /// A gateway engine's job id in its resource manager (a Slurm job id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_job: Option<String>,
    /// What its end report says its engine stored of stdout, and of stderr
    /// (absent: nothing, or no end report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_reported: Option<ReportedOutput>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_reported: Option<ReportedOutput>,
    /// The streams whose object in the store is not what its engine stored,
    /// one line each saying how: its output is not to be shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub output_altered: Vec<String>,
}

/// One stream of an attempt's output as its end report says its engine stored
/// it: what a reader checks the object it reads against.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportedOutput {
    pub bytes: u64,
    /// Its blake3, 64 hex digits.
    pub blake3: String,
}

impl From<StoredOutput> for ReportedOutput {
    fn from(stored: StoredOutput) -> Self {
        ReportedOutput { bytes: stored.bytes, blake3: hex::encode(stored.blake3) }
    }
}

impl ReportedOutput {
    /// Back to its length and hash; `None` when the hash is not 64 hex digits.
    pub fn stored(&self) -> Option<StoredOutput> {
        let blake3 = hex::decode(&self.blake3).ok()?.try_into().ok()?;
        Some(StoredOutput { bytes: self.bytes, blake3 })
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OutputRequest {
    /// `JOB/INDEX`.
    pub task: String,
    /// The attempt (by default the newest one that stored output).
    #[serde(default)]
    pub attempt: Option<u32>,
    /// `stdout` (the default) or `stderr`.
    #[serde(default)]
    pub stream: Option<String>,
    /// Where to start reading, in bytes.
    #[serde(default)]
    pub offset: u64,
    /// Most bytes in the reply; at most (and by default) [`OUTPUT_PAGE_BYTES_MAX`].
    #[serde(default)]
    pub max_bytes: Option<u32>,
}

/// One page of an attempt's stored output, or `error`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OutputReply {
    pub task: String,
    pub attempt: u32,
    pub stream: String,
    /// The whole stored size.
    pub total_bytes: u64,
    pub offset: u64,
    /// The bytes from `offset`, base64 (standard alphabet, padded).
    pub data_base64: String,
    /// The page reaches the end of what was stored.
    pub eof: bool,
    /// The engine cut the output at its bound.
    pub truncated: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the attempt's end report says its engine stored of this stream:
    /// a reader checks the whole of what it read against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported: Option<ReportedOutput>,
    /// The object the store holds is not what the engine stored: how (then the
    /// reply carries none of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub altered: Option<String>,
}

use crate::core::event::StoredOutput;
use crate::core::ids::{JobId, TaskRef};
use crate::core::state::attempts::{AttemptEnd, AttemptRecord};
use crate::core::state::{Job, JobIdx, State, TaskKey, TaskStatus};

const TASK_STATES: [TaskStatus; 6] = [
    TaskStatus::Waiting,
    TaskStatus::Dispatched,
    TaskStatus::Running,
    TaskStatus::Done,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

/// A task state by the name `gridfold tasks --state` takes.
pub fn task_status_named(name: &str) -> Option<TaskStatus> {
    TASK_STATES.into_iter().find(|status| status.as_str() == name)
}

/// The job a query names, or the error it answers with: `no job X`, or what
/// became of a retired one.
fn find_job(state: &State, id: &str) -> Result<JobIdx, String> {
    let no_job = || format!("no job {id}");
    let job_id = JobId::new(id).map_err(|_| no_job())?;
    match state.job_idx(&job_id) {
        Some(j) => Ok(j),
        None => Err(match crate::core::explain::retired_job_text(state, &job_id) {
            Some(text) => format!("{text} (its tasks are no longer kept)"),
            None => no_job(),
        }),
    }
}

/// A page of a job's tasks whose JSON is at most `bytes_max` bytes (the
/// broker's payload limit): at least one task when any matches from `from`.
pub fn answer_tasks(state: &State, request: &TasksRequest, bytes_max: usize) -> TasksReply {
    let error = |error: String| TasksReply { job: request.job.clone(), error: Some(error), ..TasksReply::default() };
    let j = match find_job(state, &request.job) {
        Ok(j) => j,
        Err(e) => return error(e),
    };
    let wanted = match request.state.as_deref() {
        None => None,
        Some(name) => match task_status_named(name) {
            Some(status) => Some(status),
            None => {
                let known: Vec<&str> = TASK_STATES.iter().map(|s| s.as_str()).collect();
                return error(format!("no task state {name}: one of {}", known.join(", ")));
            }
        },
    };
    let job = state.job(j);
    let limit = request.limit.unwrap_or(TASKS_PER_PAGE_MAX).clamp(1, TASKS_PER_PAGE_MAX);
    let mut reply = TasksReply {
        job: job.id.to_string(),
        status: job.status.as_str().to_string(),
        log_time_ms: state.now_ms,
        submitted_ms: job.submitted_ms,
        ended_ms: job.ended_ms,
        n_tasks: job.n_tasks(),
        counts: task_counts(job),
        tasks: Vec::new(),
        next_from: None,
        error: None,
    };
    let mut room = crate::projector::query::AnswerRoom::new(bytes_max, &reply);
    // Bounded: a page looks at most at `limit` matching tasks plus the ones skipped,
    // and skipping costs a comparison per task (the job's `Vec` of 16-byte states).
    for index in request.from..job.n_tasks() {
        let key = TaskKey { job: j, index };
        let task = state.task(key);
        if wanted.is_some_and(|w| w != task.status) {
            continue;
        }
        if reply.tasks.len() as u32 == limit {
            reply.next_from = Some(index);
            break;
        }
        let line = task_line(state, job, key);
        if !room.take(&line, room.bytes_max()) && !reply.tasks.is_empty() {
            reply.next_from = Some(index);
            break;
        }
        reply.tasks.push(line);
    }
    reply
}

/// Tasks per state, over the whole job.
fn task_counts(job: &Job) -> BTreeMap<String, u32> {
    let c = job.counts;
    [
        ("waiting", c.waiting),
        ("dispatched", c.dispatched),
        ("running", c.running),
        ("done", c.done),
        ("failed", c.failed),
        ("cancelled", c.cancelled),
    ]
    .into_iter()
    .map(|(name, n)| (name.to_string(), n))
    .collect()
}

fn task_line(state: &State, job: &Job, key: TaskKey) -> TaskLine {
    let task = state.task(key);
    let newest = job.attempt_log.newest(key.index);
    let mut line = TaskLine {
        index: key.index,
        state: task.status.as_str().to_string(),
        attempts: task.attempts,
        engine: task.last_engine.get().map(|e| state.engine(e).id.to_string()),
        ..TaskLine::default()
    };
    if let Some(record) = newest {
        line.engine = Some(state.engine(record.engine).id.to_string());
        line.started_ms = record.started_ms;
        line.ended_ms = record.ended_ms;
        line.wall_ms = record.wall_ms.or_else(|| match (record.started_ms, record.ended_ms) {
            (Some(start), Some(end)) => Some(end.saturating_sub(start)),
            (Some(start), None) if task.is_live() => Some(state.now_ms.saturating_sub(start)),
            _ => None,
        });
        line.exit_code = record.exit_code;
        line.failure_kind = record.failure_kind.map(|k| k.as_str().to_string());
        line.remote_job = remote_job(record);
    }
    line
}

pub fn answer_task(state: &State, request: &TaskRequest) -> TaskReply {
    let error = |error: String| TaskReply { task: request.task.clone(), error: Some(error), ..TaskReply::default() };
    let task: TaskRef = match request.task.parse() {
        Ok(task) => task,
        Err(e) => return error(e),
    };
    let j = match find_job(state, task.job.as_str()) {
        Ok(j) => j,
        Err(e) => return error(e),
    };
    let job = state.job(j);
    if task.index >= job.n_tasks() {
        return error(format!("no task {task}: job {} has {} tasks", job.id, job.n_tasks()));
    }
    let key = TaskKey { job: j, index: task.index };
    let status = state.task(key);
    let (argv, params) = job.task_command(task.index);
    let argv = argv.iter().map(|arg| shown(arg)).collect();
    let params = params.iter().map(|(name, value)| (shown(name), shown(value))).collect();
    let kept = job.attempt_log.task(task.index);
    let attempts = kept.map_or_else(Vec::new, |kept| kept.records.iter().map(|r| attempt_view(state, key, r)).collect());
    TaskReply {
        task: task.to_string(),
        job: job.id.to_string(),
        index: task.index,
        state: status.status.as_str().to_string(),
        log_time_ms: state.now_ms,
        attempts_total: status.attempts,
        attempts_forgotten: kept.map_or(0, |k| k.forgotten),
        argv,
        params,
        attempts,
        error: None,
    }
}

/// Most bytes of one argument or parameter a task answer shows: a command's
/// expanded arguments may run to 256 KiB in all, more than a broker may take
/// in one answer.
pub const SHOWN_TEXT_BYTES_MAX: usize = 1024;

/// `text`, cut at [`SHOWN_TEXT_BYTES_MAX`] bytes with its whole size said.
fn shown(text: &str) -> String {
    if text.len() <= SHOWN_TEXT_BYTES_MAX {
        return text.to_string();
    }
    format!("{}… ({} bytes in all)", crate::core::reject::truncated(text, SHOWN_TEXT_BYTES_MAX), text.len())
}

fn remote_job(record: &AttemptRecord) -> Option<String> {
    (!record.remote_job.is_empty()).then(|| record.remote_job.clone())
}

fn attempt_view(state: &State, key: TaskKey, record: &AttemptRecord) -> AttemptView {
    let live = state.live_attempt_numbered(key, record.attempt);
    let outcome = match (record.end, live) {
        (AttemptEnd::Completed, _) => "completed",
        (AttemptEnd::Failed, _) => "failed",
        (AttemptEnd::None, Some(live)) if live.started_ms.is_some() => "running",
        (AttemptEnd::None, Some(_)) => "dispatched",
        (AttemptEnd::None, None) => "ended",
    };
    let text = record.text.as_deref().map(|t| String::from_utf8_lossy(t).into_owned());
    AttemptView {
        attempt: record.attempt,
        engine: state.engine(record.engine).id.to_string(),
        outcome: outcome.to_string(),
        dispatch_seq: record.dispatch_seq,
        based_on_seq: record.based_on_seq,
        dispatched_ms: record.dispatched_ms,
        started_ms: record.started_ms,
        ended_ms: record.ended_ms,
        report_seq: record.report_seq,
        exit_code: record.exit_code,
        failure_kind: record.failure_kind.map(|k| k.as_str().to_string()),
        cpu_ms: record.cpu_ms,
        wall_ms: record.wall_ms,
        error_tail: if record.end == AttemptEnd::Failed { text.clone() } else { None },
        result: if record.end == AttemptEnd::Completed { text } else { None },
        result_bytes: if record.end == AttemptEnd::Completed { record.text_bytes } else { 0 },
        text_kept: record.text.is_some() || record.text_bytes == 0,
        stdout_stored_bytes: None,
        stderr_stored_bytes: None,
        output_truncated: false,
        output_bytes_max: record.output_bytes_max,
        suspended_by_threshold: state.suspended_by_threshold(key, record.attempt).cloned(),
        remote_job: remote_job(record),
        stdout_reported: record.stored.stdout.map(ReportedOutput::from),
        stderr_reported: record.stored.stderr.map(ReportedOutput::from),
        output_altered: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projector::query::ANSWER_BYTES_MAX_DEFAULT;
    use crate::core::testkit::fold_and_decide as run;
    use crate::core::testkit::*;

    #[test]
    fn a_gateways_remote_job_id_is_shown_on_its_attempt_and_task_line_and_a_later_start_does_not_replace_it() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.login("gw", 1, linux_props("lyon", 8192));
        log.submit(job_spec("j", 1, ""));
        let seen = run(&mut log, &mut state, 0);
        let start = |remote_job: &str| crate::core::event::Event::TaskStarted { task: task("j", 0), attempt: 1, engine: engine_id("gw"), remote_job: remote_job.into() };
        log.push(start("4211"));
        log.push(start("9999"));
        run(&mut log, &mut state, seen);
        let reply = answer_task(&state, &TaskRequest { task: "j/0".into() });
        assert_eq!(reply.attempts[0].remote_job.as_deref(), Some("4211"));
        let lines = answer_tasks(&state, &TasksRequest { job: "j".into(), ..TasksRequest::default() }, ANSWER_BYTES_MAX_DEFAULT);
        assert_eq!(lines.tasks[0].remote_job.as_deref(), Some("4211"));
        let json = serde_json::to_value(&lines.tasks[0]).unwrap();
        assert_eq!(json["remote_job"], "4211");
    }

    #[test]
    fn what_an_end_report_says_was_stored_is_kept_with_its_attempt() {
        use crate::core::event::{Event, StoredStreams};
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.login("e1", 1, linux_props("lyon", 8192));
        log.submit(job_spec("j", 1, ""));
        let seen = run(&mut log, &mut state, 0);
        log.started("j", 0, 1, "e1");
        let stdout = StoredOutput { bytes: 70_000, blake3: [0xb3; 32] };
        let mut completed = completed_event("j", 0, 1, "e1");
        if let Event::TaskCompleted { stored, .. } = &mut completed {
            *stored = StoredStreams { stdout: Some(stdout), stderr: None };
        }
        log.push(completed);
        run(&mut log, &mut state, seen);
        let reply = answer_task(&state, &TaskRequest { task: "j/0".into() });
        let attempt = &reply.attempts[0];
        assert_eq!(attempt.outcome, "completed");
        assert_eq!(attempt.stdout_reported, Some(ReportedOutput { bytes: 70_000, blake3: "b3".repeat(32) }));
        assert_eq!(attempt.stdout_reported.as_ref().and_then(ReportedOutput::stored), Some(stdout));
        assert_eq!(attempt.stderr_reported, None);
        // Survives a snapshot, as every part of the state.
        let again = State::from_snapshot(&state.to_snapshot()).unwrap();
        assert_eq!(answer_task(&again, &TaskRequest { task: "j/0".into() }).attempts[0].stdout_reported, attempt.stdout_reported);
    }

    #[test]
    fn attempts_are_recorded_from_dispatch_to_report_and_forged_or_stale_reports_change_nothing() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.login("e1", 4, linux_props("lyon", 8192));
        log.login("e2", 4, linux_props("lyon", 8192));
        log.submit(job_spec("j", 3, ""));
        let mut seen = run(&mut log, &mut state, 0);
        let first = answer_task(&state, &TaskRequest { task: "j/0".into() });
        assert_eq!(first.attempts.len(), 1);
        let engine0 = first.attempts[0].engine.clone();
        let other = if engine0 == "e1" { "e2" } else { "e1" };
        assert_eq!(first.attempts[0].outcome, "dispatched");
        log.started("j", 0, 1, &engine0);
        // Forged: a report of j/0 from the engine that does not hold it; stale: attempt 7.
        log.failed("j", 0, 1, other);
        log.failed("j", 0, 7, &engine0);
        log.failed("j", 0, 1, &engine0);
        seen = run(&mut log, &mut state, seen);
        let reply = answer_task(&state, &TaskRequest { task: "j/0".into() });
        let a1 = &reply.attempts[0];
        assert_eq!((a1.outcome.as_str(), a1.exit_code, a1.error_tail.as_deref()), ("failed", Some(1), Some("boom")));
        assert!(a1.started_ms.is_some() && a1.report_seq.is_some() && a1.text_kept);
        assert_eq!(a1.engine, engine0);
        // The retry is a second attempt record.
        assert_eq!(reply.attempts.len(), 2, "{reply:?}");
        assert_eq!(reply.attempts[1].attempt, 2);
        let engine1 = reply.attempts[1].engine.clone();
        log.completed("j", 0, 2, &engine1);
        run(&mut log, &mut state, seen);
        let done = answer_task(&state, &TaskRequest { task: "j/0".into() });
        assert_eq!((done.state.as_str(), done.attempts[1].outcome.as_str(), done.attempts[1].exit_code), ("done", "completed", Some(0)));

        let tasks = answer_tasks(&state, &TasksRequest { job: "j".into(), ..Default::default() }, ANSWER_BYTES_MAX_DEFAULT);
        assert_eq!((tasks.n_tasks, tasks.tasks.len(), tasks.next_from), (3, 3, None));
        assert_eq!(tasks.tasks[0].exit_code, Some(0));
        assert_eq!(tasks.counts["done"], 1);
    }

    #[test]
    fn queries_page_and_refuse_unknown_jobs_tasks_states_and_malformed_names() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.submit(job_spec("big", 5_000, ""));
        run(&mut log, &mut state, 0);
        // A limit above the page's maximum is cut to it; the next page starts where it stopped.
        let page = answer_tasks(&state, &TasksRequest { job: "big".into(), limit: Some(u32::MAX), ..Default::default() }, ANSWER_BYTES_MAX_DEFAULT);
        assert_eq!((page.tasks.len() as u32, page.next_from), (TASKS_PER_PAGE_MAX, Some(TASKS_PER_PAGE_MAX)));
        let last = answer_tasks(&state, &TasksRequest { job: "big".into(), from: 4_990, limit: Some(0), ..Default::default() }, ANSWER_BYTES_MAX_DEFAULT);
        assert_eq!((last.tasks.len(), last.tasks[0].index, last.next_from), (1, 4_990, Some(4_991)));
        let past = answer_tasks(&state, &TasksRequest { job: "big".into(), from: u32::MAX, ..Default::default() }, ANSWER_BYTES_MAX_DEFAULT);
        // A smaller payload limit cuts a page by its bytes: the next one starts where it stopped.
        let cut = answer_tasks(&state, &TasksRequest { job: "big".into(), ..Default::default() }, 16 * 1024);
        assert!(crate::projector::query::json_len(&cut) <= 16 * 1024 && !cut.tasks.is_empty(), "{} bytes", crate::projector::query::json_len(&cut));
        assert_eq!(cut.next_from, Some(cut.tasks.len() as u32));
        assert_eq!((past.tasks.len(), past.next_from, past.error), (0, None, None));
        let waiting = answer_tasks(&state, &TasksRequest { job: "big".into(), state: Some("done".into()), ..Default::default() }, ANSWER_BYTES_MAX_DEFAULT);
        assert_eq!((waiting.tasks.len(), waiting.next_from), (0, None));

        let error = |reply: TasksReply| reply.error.unwrap_or_default();
        assert_eq!(error(answer_tasks(&state, &TasksRequest { job: "nosuch".into(), ..Default::default() }, ANSWER_BYTES_MAX_DEFAULT)), "no job nosuch");
        let long = "x".repeat(10_000);
        assert_eq!(error(answer_tasks(&state, &TasksRequest { job: long.clone(), ..Default::default() }, ANSWER_BYTES_MAX_DEFAULT)), format!("no job {long}"));
        let bad_state = error(answer_tasks(&state, &TasksRequest { job: "big".into(), state: Some("lost".into()), ..Default::default() }, ANSWER_BYTES_MAX_DEFAULT));
        assert!(bad_state.starts_with("no task state lost"), "{bad_state}");

        let task_error = |task: &str| answer_task(&state, &TaskRequest { task: task.into() }).error.unwrap_or_default();
        assert_eq!(task_error("big/5000"), "no task big/5000: job big has 5000 tasks");
        assert_eq!(task_error("nosuch/0"), "no job nosuch");
        assert!(task_error("big").contains("JOB/INDEX"));
        assert!(task_error("big/-1").contains("whole number"));
        // A task never dispatched has no attempt, and no error.
        let fresh = answer_task(&state, &TaskRequest { task: "big/7".into() });
        assert_eq!((fresh.error, fresh.attempts.len(), fresh.state.as_str()), (None, 0, "waiting"));
    }

    #[test]
    fn a_task_suspended_by_a_threshold_says_so_in_task_and_stat_and_no_longer_once_resumed() {
        use crate::core::event::{EngineLoad, Event, Policy, SuspendThresholds};
        let heartbeat = |milli: i64| Event::EngineHeartbeat {
            engine: engine_id("a"),
            load: EngineLoad { values_milli: [("np_load_avg".to_string(), milli)].into(), ..EngineLoad::default() },
        };
        let mut log = LogBuilder::new();
        let mut state = State::new();
        let thresholds = SuspendThresholds { thresholds: vec![("np_load_avg".into(), 1_000)], interval_ms: 60_000, nsuspend: 1 };
        log.push(Event::PolicySet(Policy { suspend_thresholds: thresholds, engine_timeout_ms: 3_600_000, ..Policy::default() }));
        log.login("a", 1, linux_props("lyon", 8192));
        log.submit(job_spec("j", 1, ""));
        let mut seen = run(&mut log, &mut state, 0);
        log.started("j", 0, 1, "a");
        log.at(1_700_000_010_000);
        log.push(heartbeat(2_500));
        seen = run(&mut log, &mut state, seen);

        let reply = answer_task(&state, &TaskRequest { task: "j/0".into() });
        let cause = reply.attempts[0].suspended_by_threshold.as_ref().map(ToString::to_string);
        assert_eq!(cause.as_deref(), Some("np_load_avg is 2.50, threshold 1.00"));
        assert!(crate::cli::results::task_text(&reply).contains("suspended by a threshold: np_load_avg is 2.50, threshold 1.00"));
        let summary = crate::projector::query::StateSummary::of(&state);
        let engine = &summary.engines[0];
        assert_eq!(engine.threshold_crossed.as_ref().map(ToString::to_string).as_deref(), Some("np_load_avg is 2.50, threshold 1.00"));
        assert_eq!(engine.suspended_by_threshold, vec!["j/0".to_string()]);
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["engines"][0]["threshold_crossed"]["threshold_milli"], 1_000);
        assert_eq!(json["engines"][0]["suspended_by_threshold"][0], "j/0");

        // Below in the next interval: resumed, and neither says it any more.
        log.at(1_700_000_010_000 + 60_000);
        log.push(heartbeat(500));
        run(&mut log, &mut state, seen);
        let reply = answer_task(&state, &TaskRequest { task: "j/0".into() });
        assert_eq!(reply.attempts[0].suspended_by_threshold, None);
        let summary = crate::projector::query::StateSummary::of(&state);
        assert_eq!((summary.engines[0].threshold_crossed.as_ref(), summary.engines[0].suspended_by_threshold.len()), (None, 0));
        let json = serde_json::to_value(&summary).unwrap();
        assert!(json["engines"][0].get("threshold_crossed").is_none(), "left out when none: {json}");
    }
}
