//! The vocabulary of the log: facts (events, past tense) and decisions
//! (orders, imperative), wrapped in an [`Envelope`] and positioned by an [`Entry`].
//!
//! These types mirror `schemas/gridfold/v1/events.proto`; `wire/` converts
//! between the two and is the only place that knows protobuf. Everything here
//! is plain data: validation of what an event *means* happens in `fold`,
//! which records a [`Rejection`](super::reject::Rejection) instead of failing.

use std::collections::BTreeMap;

use super::ids::{Attempt, EngineId, JobId, Seq, TaskRef, UserName};

/// An engine's login epoch: the log sequence of the `EngineLoggedIn` entry that
/// opened it. Unique per login and rising, and the engine learns it from the
/// acknowledgement of its own login, so orders can name the login they are for.
pub type Epoch = u64;

/// Largest result a `TaskCompleted` may carry inline; larger results belong in
/// the object store. The fold rejects an oversized one.
pub const RESULT_BYTES_MAX: usize = 64 * 1024;
/// Largest error tail a `TaskFailed` may carry (the engine sends the last 4 KiB of stderr).
pub const ERROR_TAIL_BYTES_MAX: usize = 4 * 1024;
/// Most tasks one job may hold; a campaign larger than this is split by the submitter.
pub const TASKS_PER_JOB_MAX: u32 = 10_000_000;
/// Most orders in one published batch, so a batch stays well under the broker's 1 MiB payload.
pub const ORDERS_PER_BATCH_MAX: usize = 8_192;

/// One position of the log: what the fold consumes.
#[derive(Debug, Clone)]
pub struct Entry {
    pub seq: Seq,
    /// The time the log stored the entry (JetStream's timestamp), in ms since the Unix epoch.
    /// This is the only clock the core knows.
    pub time_ms: u64,
    /// Who could publish on the subject the entry arrived on. The subject is
    /// authoritative: an engine's event whose payload names another engine is forged.
    pub origin: Origin,
    /// The subject it was stored under, as the chain digest covers it.
    pub subject: String,
    pub payload: Payload,
    /// The payload's bytes exactly as the log stores them. The chain digest is
    /// over these, not over any re-encoding, so it is a function of the log
    /// alone and every later version of gridfold replays a log to the same chain.
    pub stored: Vec<u8>,
    /// The seal of a sealed envelope (order batches), checked by the fold.
    pub seal: Option<EntrySeal>,
}

/// An ed25519 signature found at the end of an entry's stored bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntrySeal {
    pub signer: [u8; 32],
    pub signature: [u8; 64],
    /// How many of the stored bytes it signs: all of them before the seal.
    /// `None` when the seal was not the last field, so nothing it could sign
    /// is well defined: the fold rejects such an entry.
    pub signed_len: Option<usize>,
    /// The process folding the entry published these very bytes, sealed with
    /// its own key (a projector reading its batch back): the signature is known
    /// to hold, and the fold does not check it again (an ed25519 verification
    /// is about 50 µs, once per batch). Set only by that process, after
    /// comparing every byte with what it published; decoding leaves it false,
    /// so a replay checks every seal and folds to the same state.
    pub sealed_here: bool,
}

impl Entry {
    /// The events the entry holds, in order: its event, or each report of an
    /// engine's batch (never the batch itself); none if it did not decode.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        let (single, batch): (Option<&Event>, &[Envelope]) = match self.payload_event() {
            Some(Event::EngineReports { reports, .. }) => (None, reports),
            other => (other, &[]),
        };
        single.into_iter().chain(batch.iter().map(|report| &report.event))
    }

    /// The event, if the payload decoded.
    pub fn payload_event(&self) -> Option<&Event> {
        match &self.payload {
            Payload::Event(envelope) => Some(&envelope.event),
            Payload::Undecodable { .. } => None,
        }
    }

    /// The bytes the seal signs, if it signs a well-defined prefix.
    pub fn signed_bytes(&self) -> Option<&[u8]> {
        let len = self.seal.as_ref()?.signed_len?;
        self.stored.get(..len)
    }
}

/// One stream of an attempt's output as its engine stored it in the object
/// store: its length and blake3, for readers to tell whether what the store
/// holds now is what the engine stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredOutput {
    pub bytes: u64,
    pub blake3: [u8; 32],
}

/// What an attempt's end report says its engine stored of each stream; `None`:
/// nothing (an empty stream, or one the store did not take).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StoredStreams {
    pub stdout: Option<StoredOutput>,
    pub stderr: Option<StoredOutput>,
}

/// Who published an entry, as its subject says (see [`super::subject`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// `gridfold.ev.engine.<id>.>`: only that engine may publish here.
    Engine(EngineId),
    /// `gridfold.ev.orders`: only the fenced projector writes here.
    Projector,
    /// `gridfold.ev.tick`: the tickers.
    Ticker,
    /// `gridfold.ev.op.>`: operators, who run the grid and may act on any job.
    Operator,
    /// `gridfold.ev.user.<name>.>`: a user (submitter), acting on its own jobs.
    User(UserName),
    /// Any other subject: no one may publish there, and the fold refuses
    /// whatever is found on it.
    Unknown,
}

impl std::fmt::Display for Origin {
    /// Who, for a person: `user alice`, `engine e1`, `an operator`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Engine(engine) => write!(f, "engine {engine}"),
            Origin::Projector => f.write_str("the projector"),
            Origin::Ticker => f.write_str("a ticker"),
            Origin::Operator => f.write_str("an operator"),
            Origin::User(user) => write!(f, "user {user}"),
            Origin::Unknown => f.write_str("an unknown publisher"),
        }
    }
}

// Nearly every payload is an event: boxing it would cost an allocation per entry
// for the sake of the rare undecodable one.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Payload {
    Event(Envelope),
    /// The bytes on the log did not decode into an envelope; the fold records a rejection.
    Undecodable { detail: String },
}

/// What every publisher sends: an id that deduplicates retries, who sent it, and the event.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// The event's UUID, also its `Nats-Msg-Id`, so a publisher's retry is stored once.
    pub id: [u8; 16],
    /// Free text naming the publisher ("gridfold-cli", "engine:e1"), for humans only.
    pub source: String,
    pub event: Event,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    JobSubmitted(JobSpec),
    JobCancelled { job: JobId, reason: String },
    JobPriorityChanged { job: JobId, priority: i32 },
    /// An operator gave a job override tickets (Grid Engine's `qalter -ot`).
    JobOverrideTicketsSet { job: JobId, tickets: u32 },
    EngineLoggedIn { engine: EngineId, slots: u32, props: EngineProps },
    EngineLoggedOut { engine: EngineId },
    EngineHeartbeat { engine: EngineId, load: EngineLoad },
    /// `remote_job`: a gateway engine's job id in the resource manager it
    /// submitted the attempt to (a Slurm job id); empty for an ordinary engine.
    /// At most [`REMOTE_JOB_BYTES_MAX`] bytes (refused at decode).
    TaskStarted { task: TaskRef, attempt: Attempt, engine: EngineId, remote_job: String },
    /// `stored`: what the engine stored of the attempt's output (see [`StoredStreams`]).
    TaskCompleted {
        task: TaskRef,
        attempt: Attempt,
        engine: EngineId,
        exit_code: i32,
        cpu_ms: u64,
        wall_ms: u64,
        result: Vec<u8>,
        stored: StoredStreams,
    },
    TaskFailed {
        task: TaskRef,
        attempt: Attempt,
        engine: EngineId,
        exit_code: Option<i32>,
        kind: FailureKind,
        error_tail: String,
        stored: StoredStreams,
    },
    PolicySet(Policy),
    /// Time passes: lets timers fire when nothing else happens. Carries nothing;
    /// the log time of its entry is the news.
    Tick,
    OrderBatch(OrderBatch),
    /// More tasks for an active job (GridServer's tasks added to an open session).
    /// Their indexes follow the job's last; `conditions` is keyed by the index
    /// within this addition (0 = the first task added).
    TasksAdded { job: JobId, tasks: Vec<BTreeMap<String, String>>, conditions: BTreeMap<u32, TaskConditions> },
    /// A grid library was stored in the object store (`gridfold library put`).
    LibraryPublished(LibraryInfo),
    /// An engine finished syncing a library: it may now run the jobs rooted on it.
    LibrarySynced { engine: EngineId, library: LibraryRef },
    /// An engine could not sync a library (fetch or unpack failed); it may be asked again.
    LibrarySyncFailed { engine: EngineId, library: LibraryRef, error: String },
    /// An operator cleared blacklists and greylists: for one engine, or for all when `None`.
    BlacklistsCleared { engine: Option<EngineId> },
    /// An operator registered a projector's ed25519 public key: batches sealed
    /// with it are accepted from now on.
    ProjectorKeyRegistered { key: [u8; 32], name: String },
    /// An operator revoked a projector's key.
    ProjectorKeyRevoked { key: [u8; 32] },
    /// Someone asked to suspend the live attempts of a job or of one task
    /// (Grid Engine's `qmod -sj`); the projector answers with `Suspend` orders.
    SuspendRequested(TaskSelector),
    /// Someone asked to resume suspended attempts (`qmod -usj`): `Resume` orders.
    ResumeRequested(TaskSelector),
    /// Someone asked to stop live attempts and queue their tasks again without
    /// using an attempt (`qmod -rj`): `Preempt` orders.
    RescheduleRequested(TaskSelector),
    /// A job was held (`held`: no new dispatches, live attempts run on) or
    /// released (Grid Engine's `qhold`/`qrls`, Slurm's `scontrol hold`/`release`).
    JobHoldChanged { job: JobId, held: bool },
    /// One task of an active job was cancelled: it waits no more, and its live
    /// attempts are told to stop (`scancel JOB_TASK`, `qdel -t`).
    TaskCancelled { task: TaskRef },
    /// An operator drained an engine (`drained`: no new work; its running
    /// attempts finish) or resumed it (`qmod -d`/`-e`, `scontrol update state=drain`).
    EngineDrainChanged { engine: EngineId, drained: bool },
    /// A Techila project's (a job's) priority changed, 1 (Highest) to 7
    /// (Lowest); another value is folded as a rejection.
    ProjectPriorityChanged { job: JobId, priority: u32 },
    /// Several reports of one engine in one log message (the engine batches
    /// what it would otherwise publish one by one, to pay one publish and one
    /// acknowledgement for all). Each keeps its own envelope and id; the fold
    /// applies them in order as if each were its own entry at this sequence.
    EngineReports { engine: EngineId, reports: Vec<Envelope> },
}

/// Most reports one `EngineReports` message carries: a batch is what piled up
/// while the engine's previous publish was acknowledged, and 256 reports of
/// the largest kind (64 KiB results) stay under the broker's payload limit
/// only because results that large are rare; the engine also caps its bytes.
pub const REPORTS_PER_BATCH_MAX: usize = 256;

/// A job, or one task of it, that an operator's request names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskSelector {
    pub job: JobId,
    /// A task index; `None` names every task of the job.
    pub task: Option<u32>,
}

impl std::fmt::Display for TaskSelector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.task {
            Some(index) => write!(f, "{}/{index}", self.job),
            None => write!(f, "{}", self.job),
        }
    }
}

impl Event {
    /// The engine an engine-published event speaks for, if it is one.
    pub fn reporting_engine(&self) -> Option<&EngineId> {
        match self {
            Event::EngineLoggedIn { engine, .. }
            | Event::EngineLoggedOut { engine }
            | Event::EngineHeartbeat { engine, .. }
            | Event::TaskStarted { engine, .. }
            | Event::TaskCompleted { engine, .. }
            | Event::TaskFailed { engine, .. }
            | Event::LibrarySynced { engine, .. }
            | Event::LibrarySyncFailed { engine, .. }
            | Event::EngineReports { engine, .. } => Some(engine),
            _ => None,
        }
    }

    /// A task or library report: what an engine may send in a batch
    /// (`EngineReports`); logins, logouts and heartbeats go alone.
    pub fn is_batchable_report(&self) -> bool {
        matches!(
            self,
            Event::TaskStarted { .. }
                | Event::TaskCompleted { .. }
                | Event::TaskFailed { .. }
                | Event::LibrarySynced { .. }
                | Event::LibrarySyncFailed { .. }
        )
    }

    /// A short stable name, used in histories, logs and statistics.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Event::JobSubmitted(_) => "JobSubmitted",
            Event::JobCancelled { .. } => "JobCancelled",
            Event::JobPriorityChanged { .. } => "JobPriorityChanged",
            Event::JobOverrideTicketsSet { .. } => "JobOverrideTicketsSet",
            Event::EngineLoggedIn { .. } => "EngineLoggedIn",
            Event::EngineLoggedOut { .. } => "EngineLoggedOut",
            Event::EngineHeartbeat { .. } => "EngineHeartbeat",
            Event::TaskStarted { .. } => "TaskStarted",
            Event::TaskCompleted { .. } => "TaskCompleted",
            Event::TaskFailed { .. } => "TaskFailed",
            Event::PolicySet(_) => "PolicySet",
            Event::Tick => "Tick",
            Event::OrderBatch(_) => "OrderBatch",
            Event::TasksAdded { .. } => "TasksAdded",
            Event::LibraryPublished(_) => "LibraryPublished",
            Event::LibrarySynced { .. } => "LibrarySynced",
            Event::LibrarySyncFailed { .. } => "LibrarySyncFailed",
            Event::BlacklistsCleared { .. } => "BlacklistsCleared",
            Event::ProjectorKeyRegistered { .. } => "ProjectorKeyRegistered",
            Event::ProjectorKeyRevoked { .. } => "ProjectorKeyRevoked",
            Event::SuspendRequested(_) => "SuspendRequested",
            Event::ResumeRequested(_) => "ResumeRequested",
            Event::RescheduleRequested(_) => "RescheduleRequested",
            Event::JobHoldChanged { .. } => "JobHoldChanged",
            Event::TaskCancelled { .. } => "TaskCancelled",
            Event::EngineDrainChanged { .. } => "EngineDrainChanged",
            Event::ProjectPriorityChanged { .. } => "ProjectPriorityChanged",
            Event::EngineReports { .. } => "EngineReports",
        }
    }
}

/// A job as submitted: many tasks sharing one template and one set of requirements.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub id: JobId,
    /// The user the job runs for.
    pub owner: String,
    pub project: String,
    pub queue: String,
    /// Grid Engine's `-p`: higher runs first; overrides submission order.
    pub priority: i32,
    /// A requirements expression over engine properties (see `core::expr`); empty means any engine.
    pub requirements: String,
    /// How many attempts a task gets before it, and so the job, fails. At least 1.
    pub max_attempts: u32,
    /// Wall-time limit per attempt in ms, enforced by the engine; 0 means none.
    pub wall_time_limit_ms: u64,
    /// Slots one task occupies on its engine. At least 1.
    pub slots_per_task: u32,
    pub template: TaskTemplate,
    pub tasks: TaskSet,
    /// GridServer's service options: library, conditions, black/greylisting, redundancy.
    pub options: JobOptions,
    /// Conditions of single tasks, by task index; most tasks have none.
    pub task_conditions: BTreeMap<u32, TaskConditions>,
}

/// Options of a job beyond what it runs and where: each switches on one stage
/// or lifecycle rule of `schedule`. The default switches every one off.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct JobOptions {
    /// Grid Engine's initiation deadline (`qsub -dl`), in log time (ms since the
    /// epoch): in ticket mode the job's urgency grows as it nears.
    pub deadline_ms: Option<u64>,
    /// Grid Engine's job share (`qsub -js`): the job's functional shares, which
    /// divide the functional policy's job category (`weight_job`) among the
    /// runnable jobs that have some. 0 (the default) takes none.
    pub job_share: u32,
    /// No task is dispatched to an engine that has not reported this library synced.
    pub root_library: Option<LibraryRef>,
    /// Preferences that raise (or lower) an engine's score without excluding any.
    pub affinity: Vec<Preference>,
    /// The job waits until these jobs have ended.
    pub depends_on_jobs: Vec<JobId>,
    /// A job or task whose dependency failed (or was cancelled) fails too, instead
    /// of running once the dependency has ended.
    pub fail_on_dependency_failure: bool,
    /// A task that exhausts its attempts fails alone and the job carries on (it
    /// ends failed once every task has ended); by default the job fails at once.
    pub continue_on_task_failure: bool,
    /// Engines that fail tasks of this job get no more of its tasks.
    pub engine_blacklisting: bool,
    /// Task failures on one engine before it is blacklisted (0 is read as 1).
    pub failures_before_blacklist: u32,
    /// Each task failure on an engine lowers its score for this job by the policy's `greylist_affinity`.
    pub engine_greylisting: bool,
    /// Long-running tasks get redundant copies (see `RedundancyPolicy`).
    pub redundant_rescheduling: bool,
    /// A task running longer than this (log time since its newest copy was
    /// dispatched) gets a redundant copy, whatever the strategies say; 0 means no limit.
    pub task_max_time_ms: u64,
    /// The first result cancels the other copies at once, instead of letting them
    /// run until the job ends.
    pub cancel_redundant_on_first_result: bool,
    /// A job submitted in parts (its parameter list split over this event and
    /// `TasksAdded` events, each under the broker's payload limit): how many
    /// tasks it has once every part is folded. None of its tasks is dispatched
    /// before then, and a part beyond it is refused.
    pub tasks_total: Option<u32>,
    /// Techila's project priority, 1 (Highest) to 7 (Lowest); 0 means the
    /// default, 4 (Normal). Read by the `techila` family only.
    pub project_priority: u32,
    /// Techila's expected task time, in ms of log time: under `techila`, a
    /// task running longer is expired and gets one copy on another core; 0: none.
    pub expected_task_time_ms: u64,
    /// Grid Engine's soft requests (`qsub -soft -l`): a requirements expression
    /// that engines satisfying it rank first among those that may take a task,
    /// without excluding the others (empty: none). Same grammar and limits as
    /// `requirements`.
    #[serde(default)]
    pub soft: String,
    /// How a task's `slots_per_task` may be spread (Grid Engine's parallel
    /// environment `allocation_rule`): on one engine, or over the engines of one site.
    #[serde(default)]
    pub span: Span,
    /// Grid Engine's `qsub -R y`: with the policy's `max_reservation > 0`, a task
    /// of this job that cannot start reserves the slots it will need as they
    /// free (see [`crate::core::schedule::reservation`]).
    #[serde(default)]
    pub reserve: bool,
    /// FBSNG's process type (`fbsng`): the quota and default requirements of
    /// the policy's process type of this name apply to the job; empty: none.
    #[serde(default)]
    pub process_type: String,
    /// A parallel task's companion command (`span = "site"` only): each engine
    /// but the first runs it with the task's environment and
    /// `GRIDFOLD_NODEFILE` until the first engine's part ends (Grid Engine's
    /// slave tasks, started there by `qrsh -inherit`); empty: they run nothing.
    /// See [`check_companion_argv`] for its limits.
    #[serde(default)]
    pub companion_argv: Vec<String>,
    /// CiGri's campaign type (`cigri`): a test campaign runs one task on each
    /// cluster its requirements allow, ahead of every default campaign, and
    /// drops the rest (see [`crate::core::family::cigri`]).
    #[serde(default)]
    pub campaign: CampaignType,
}

/// CiGri's campaign types (gridsub's `-t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
pub enum CampaignType {
    /// Tasks fill the clusters the metascheduler offers the campaign.
    #[default]
    Default,
    /// One task on each cluster the requirements allow, first; the rest dropped.
    Test,
}

impl CampaignType {
    /// Every campaign type, as job files name them.
    pub const NAMES: [&'static str; 2] = ["default", "test"];

    pub fn as_str(self) -> &'static str {
        match self {
            CampaignType::Default => "default",
            CampaignType::Test => "test",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "default" => Some(CampaignType::Default),
            "test" => Some(CampaignType::Test),
            _ => None,
        }
    }
}

/// Where a task's slots may be (see [`crate::core::schedule::parallel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
pub enum Span {
    /// All on one engine (Grid Engine's `$pe_slots`): the default.
    #[default]
    Engine,
    /// Over engines sharing the value of the `site` property, filled one after
    /// the other in ranking order (Grid Engine's `$fill_up`).
    Site,
}

impl Span {
    pub fn as_str(self) -> &'static str {
        match self {
            Span::Engine => "engine",
            Span::Site => "site",
        }
    }
}

/// Most slots one task may ask for (`slots`), whatever its span.
pub const SLOTS_PER_TASK_MAX: u32 = 4_096;
/// Most engines one parallel task may span: its orders (one per engine, each
/// naming every part) stay well within a batch.
pub const PARALLEL_PARTS_MAX: usize = 32;
/// Most arguments of a parallel task's companion command (`companion_argv`).
pub const COMPANION_ARGS_MAX: usize = 256;
/// Most bytes of one argument of a companion command.
pub const COMPANION_ARG_BYTES_MAX: usize = 4_096;

/// What is wrong with a companion command, if anything: more than
/// [`COMPANION_ARGS_MAX`] arguments, one longer than
/// [`COMPANION_ARG_BYTES_MAX`] bytes, or an empty program name. An empty
/// command is none and is fine.
pub fn check_companion_argv(argv: &[String]) -> Result<(), String> {
    if argv.len() > COMPANION_ARGS_MAX {
        return Err(format!("{} arguments, more than {COMPANION_ARGS_MAX}", argv.len()));
    }
    if let Some((n, arg)) = argv.iter().enumerate().find(|(_, arg)| arg.len() > COMPANION_ARG_BYTES_MAX) {
        return Err(format!("argument {n} has {} bytes, more than {COMPANION_ARG_BYTES_MAX}", arg.len()));
    }
    if argv.first().is_some_and(String::is_empty) {
        return Err("the program (argument 0) is empty".to_string());
    }
    Ok(())
}

/// One engine's share of a parallel task: the engine, the login epoch the
/// decision was made for, and the slots it holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct ParallelPart {
    pub engine: EngineId,
    pub epoch: Epoch,
    pub slots: u32,
}

impl JobOptions {
    /// Failures that blacklist an engine, when blacklisting is on.
    pub fn blacklist_threshold(&self) -> u32 {
        self.failures_before_blacklist.max(1)
    }
}

/// Conditions of one task, on top of its job's.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TaskConditions {
    /// A requirements expression that must also hold (GridServer's discriminator).
    pub discriminator: String,
    pub affinity: Vec<Preference>,
    /// Prefer the engines that ran these tasks of the same job (a dataset loaded once).
    pub task_affinity: Vec<u32>,
    /// The task goes to the front of its job's queue.
    pub queue_jump: bool,
    /// The task waits until these tasks have ended.
    pub depends_on: Vec<TaskRef>,
}

impl TaskConditions {
    pub fn is_empty(&self) -> bool {
        *self == TaskConditions::default()
    }
}

/// A soft rule: engines for which `when` holds get `weight` added to their score.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Preference {
    /// A requirements-language expression over engine properties.
    pub when: String,
    pub weight: i32,
}

/// A grid library by name and version, as a job roots on it and an engine holds it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct LibraryRef {
    pub name: String,
    pub version: String,
}

impl LibraryRef {
    pub fn new(name: &str, version: &str) -> Self {
        LibraryRef { name: name.to_string(), version: version.to_string() }
    }
    /// Names and versions follow the id rules (1..=64 of `[A-Za-z0-9_.-]`): they
    /// become object-store keys and directory names.
    pub fn validate(&self) -> Result<(), crate::core::ids::IdError> {
        crate::core::ids::JobId::new(&self.name)?;
        crate::core::ids::JobId::new(&self.version)?;
        Ok(())
    }
    /// The object-store key and the directory an engine unpacks it into.
    pub fn key(&self) -> String {
        format!("{}/{}", self.name, self.version)
    }
}

impl std::fmt::Display for LibraryRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// A stored library: where it is and what it weighs, so engines can check what they fetched.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LibraryInfo {
    pub library: LibraryRef,
    pub size_bytes: u64,
    /// blake3 of the stored bytes, in hex.
    pub digest_hex: String,
}

impl JobSpec {
    pub fn task_count(&self) -> u64 {
        match &self.tasks {
            TaskSet::Count(n) => u64::from(*n),
            TaskSet::List(list) => list.len() as u64,
        }
    }
}

/// The command every task runs. `{index}` and `{name}` in `argv` are replaced by
/// the task's index and parameters when the engine launches it.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct TaskTemplate {
    pub argv: Vec<String>,
    /// Named parameters shared by every task; a per-task parameter of the same name wins.
    pub params: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TaskSet {
    /// `n` tasks indexed `0..n`, differing only by `{index}`.
    Count(u32),
    /// One parameter map per task.
    List(Vec<BTreeMap<String, String>>),
}

/// What an engine says of itself at login. Every field is usable in requirements.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct EngineProps {
    pub os: String,
    pub arch: String,
    pub cores: u32,
    pub memory_mb: u64,
    pub disk_mb: u64,
    /// Measured by the engine's built-in benchmark at login.
    pub mflops: u64,
    pub site: String,
    /// Operator-given properties (`--prop type=blade`).
    pub custom: BTreeMap<String, String>,
    /// Grid libraries the engine already holds, synced by an earlier session.
    pub libraries: Vec<LibraryRef>,
}

impl std::fmt::Display for EngineProps {
    /// The properties as requirements expressions name them, those set only:
    /// `os=linux arch=x86_64 site=lyon cores=8 memory_mb=16384 … rack=r12`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        for (name, value) in [("os", &self.os), ("arch", &self.arch), ("site", &self.site)] {
            if !value.is_empty() {
                parts.push(format!("{name}={value}"));
            }
        }
        let numbers = [("cores", u64::from(self.cores)), ("memory_mb", self.memory_mb), ("disk_mb", self.disk_mb), ("mflops", self.mflops)];
        parts.extend(numbers.iter().filter(|(_, value)| *value > 0).map(|(name, value)| format!("{name}={value}")));
        parts.extend(self.custom.iter().map(|(name, value)| format!("{name}={value}")));
        f.write_str(&parts.join(" "))
    }
}

/// Load figures an engine reports with each heartbeat, as integers so that the
/// load formula is exact on every replay.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct EngineLoad {
    /// One-minute load average divided by cores, times 1000 (1000 = every core busy).
    pub load_per_core_milli: u32,
    pub memory_free_mb: u64,
    /// Named load values (Grid Engine's load parameters: `np_load_avg`,
    /// `mem_used`, ...), in milli-units, for the load formula and suspend
    /// thresholds; see [`crate::core::load`].
    pub values_milli: BTreeMap<String, i64>,
}

/// Most bytes of a gateway's remote job id ([`Event::TaskStarted`]).
pub const REMOTE_JOB_BYTES_MAX: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum FailureKind {
    /// The process exited with a non-zero code.
    NonZeroExit,
    /// The process was killed by a signal it did not ask for.
    Signalled,
    /// The engine killed it at the job's wall-time limit.
    WallTimeExceeded,
    /// The engine could not start it (no such program, bad working directory).
    LaunchFailed,
    /// The engine was shutting down and its drain timeout ran out.
    EngineShutdown,
    /// A gateway's resource manager killed or preempted it, or someone cancelled
    /// it there: the task waits again without using an attempt (CiGri's
    /// best-effort jobs).
    Preempted,
    /// The projector could not deliver its run order: the broker refused it
    /// as too large ([`Order::Undeliverable`]). The engine never had it.
    Undeliverable,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::NonZeroExit => "non-zero-exit",
            FailureKind::Signalled => "signalled",
            FailureKind::WallTimeExceeded => "wall-time-exceeded",
            FailureKind::LaunchFailed => "launch-failed",
            FailureKind::EngineShutdown => "engine-shutdown",
            FailureKind::Preempted => "preempted",
            FailureKind::Undeliverable => "undeliverable",
        }
    }
}

/// Operator policy. A `PolicySet` event replaces the whole policy, so the log
/// alone says which policy every decision was made under.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    pub algorithm: Algorithm,
    /// An engine with no event for this long (log time) is declared lost.
    pub engine_timeout_ms: u64,
    /// A dispatch not started within this long is requeued.
    pub dispatch_timeout_ms: u64,
    /// How the load index that ranks engines is computed.
    pub load_formula: LoadFormula,
    /// Most dispatches one scheduling run may decide (a batch stays bounded).
    pub dispatches_per_run_max: u32,
    /// Seed for any randomised decision, mixed with a log sequence.
    pub seed: u64,
    /// GridServer's engine tiers, highest first, each `property=value`: an engine
    /// of a higher tier is always chosen before one of a lower tier; an engine
    /// matching several takes the highest, one matching none comes after all.
    pub engine_tiers: Vec<String>,
    /// How much each task failure on an engine lowers its score for a greylisting job.
    pub greylist_affinity: u32,
    pub redundancy: RedundancyPolicy,
    /// How long (log time) an ended job stays in the state, whole, before it is
    /// retired: only its usage summary and a short record of its outcome stay.
    /// Measured in log time, so every replay retires it at the same entry.
    pub job_retention_ms: u64,
    /// Grid Engine's job ordering (`user_sort`, and the ticket policies of `sgeee`).
    pub sge: SgePolicy,
    /// Grid Engine's `queue_sort_method`: load index or `seq_no` first.
    pub queue_sort_method: QueueSort,
    /// Techila's license cap, simultaneous projects and user priorities (`techila`).
    pub techila: TechilaPolicy,
    /// How much of tasks' output engines keep, and for how long their work directories stay.
    pub output: OutputPolicy,
    /// Grid Engine's `suspend_thresholds`, `suspend_interval` and `nsuspend`
    /// (queue_conf(5)); see `schedule::thresholds`.
    pub suspend_thresholds: SuspendThresholds,
    /// Grid Engine's `max_reservation` and `default_duration` (sched_conf(5));
    /// see `schedule::reservation`.
    #[serde(default)]
    pub reservation: ReservationPolicy,
    /// FBSNG's queues, process types and run interval (`fbsng`, see `family::fbsng`).
    pub fbsng: FbsngPolicy,
    /// CiGri's cluster affinities, finalize and sink-effect settings (`cigri`,
    /// see `family::cigri`).
    #[serde(default)]
    pub cigri: CigriPolicy,
    /// Flood control of gateway engines (`[flood]`, see `schedule::flood`);
    /// `None`: off.
    #[serde(default)]
    pub flood: Option<FloodPolicy>,
    /// Caps on the active jobs and the tasks they hold, per user and over the
    /// grid (`[caps]`, see [`CapsPolicy`]).
    #[serde(default)]
    pub caps: CapsPolicy,
}

/// Caps on what the state holds (Grid Engine's `max_u_jobs` and `max_jobs`,
/// Slurm's `MaxSubmitJobs`): a submission, or a `TasksAdded`, that would take
/// a user (the job's `owner`) or the grid past one is refused naming it. Counted
/// over active jobs: an ended job no longer counts, though it stays in the
/// state until its retention has passed. The defaults keep the projector within
/// [`STATE_MEMORY_BUDGET_BYTES`] (see `docs/performance.md`, "Memory per held
/// task": a held task costs 16 bytes counted, about 150 listed with a short
/// parameter, 22 and about 185 at a snapshot's peak; a job about 2.2 KB; so
/// 8,000,000 listed tasks and 50,000 jobs stay under 1.6 GB; the test
/// `the_default_caps_keep_the_projectors_state_within_its_memory_budget`
/// measures it). Limits:
/// [`crate::core::policy_limits::check_policy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CapsPolicy {
    /// Most active jobs of one user.
    pub max_jobs_per_user: u32,
    /// Most active jobs over the grid.
    pub max_jobs: u32,
    /// Most tasks one user's active jobs hold, whatever their status.
    pub max_tasks_per_user: u64,
    /// Most tasks all active jobs hold.
    pub max_tasks: u64,
}

/// The memory the default caps keep the projector's state within: 2 GiB, a
/// twelfth of the 24 GiB machines gridfold is measured on.
pub const STATE_MEMORY_BUDGET_BYTES: u64 = 2 << 30;

impl Default for CapsPolicy {
    fn default() -> Self {
        CapsPolicy { max_jobs_per_user: 10_000, max_jobs: 50_000, max_tasks_per_user: 5_000_000, max_tasks: 8_000_000 }
    }
}

/// Flood control (CiGri's job ratio, seed 004): a gateway engine (property
/// `gateway`) may hold at most `ratio_milli × slots / 1000` slots of tasks
/// dispatched and not yet started; every `interval_ms` the ratio moves up when
/// nothing waited in excess, down when something did, as `algorithm` says.
/// Limits: [`crate::core::schedule::flood::check_policy`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FloodPolicy {
    pub algorithm: FloodAlgorithm,
    /// Log time between two adjustments of one gateway's ratio.
    pub interval_ms: u64,
    /// The highest ratio, thousandths of a task per slot.
    pub ratio_max_milli: u32,
    /// The ratio a gateway starts from (1,000: one slot per task).
    pub ratio_start_milli: u32,
    /// Slots of tasks a gateway may hold waiting without it counting as excess.
    pub waiting_allowed: u32,
    /// A task counts as waiting once dispatched and unstarted this long.
    pub waiting_grace_ms: u64,
    /// A task unstarted this long on a gateway is withdrawn (requeued, its
    /// remote job cancelled) and waits again without using an attempt; 0: never.
    pub remote_queue_timeout_ms: u64,
}

impl Default for FloodPolicy {
    fn default() -> Self {
        FloodPolicy {
            algorithm: FloodAlgorithm::SlowStart,
            interval_ms: 10_000,
            ratio_max_milli: 8_000,
            ratio_start_milli: 1_000,
            waiting_allowed: 0,
            waiting_grace_ms: 2_000,
            remote_queue_timeout_ms: 0,
        }
    }
}

/// The seed's three ways of moving the job ratio.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FloodAlgorithm {
    /// TCP's slow start: up, double; down, to one task.
    #[default]
    SlowStart,
    /// Up by the share of the gateway's idle slots; down by the share of the excess.
    TwoWayAdaptive,
    /// Up, double; down by the share of the excess.
    AdaptiveDownExponentialUp,
}

impl FloodAlgorithm {
    pub const NAMES: [&'static str; 3] = ["slow-start", "two-way-adaptive", "adaptive-down-exponential-up"];

    pub fn as_str(self) -> &'static str {
        match self {
            FloodAlgorithm::SlowStart => "slow-start",
            FloodAlgorithm::TwoWayAdaptive => "two-way-adaptive",
            FloodAlgorithm::AdaptiveDownExponentialUp => "adaptive-down-exponential-up",
        }
    }

    pub fn parse(name: &str) -> Option<FloodAlgorithm> {
        match name {
            "slow-start" => Some(FloodAlgorithm::SlowStart),
            "two-way-adaptive" => Some(FloodAlgorithm::TwoWayAdaptive),
            "adaptive-down-exponential-up" => Some(FloodAlgorithm::AdaptiveDownExponentialUp),
            _ => None,
        }
    }
}

/// Why flood control set a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum FloodReason {
    /// The gateway's first ratio.
    Start,
    /// Nothing waited in excess over the interval.
    Up,
    /// More waited than allowed.
    Down,
}

impl FloodReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FloodReason::Start => "start",
            FloodReason::Up => "up",
            FloodReason::Down => "down",
        }
    }
}

/// CiGri's settings, read by the `cigri` family only. Limits:
/// the CiGri family's `check_policy`, asked through the family seam.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CigriPolicy {
    /// (user, cluster) couples: on that cluster, that user's default campaigns
    /// come before those of users without affinity for it.
    pub affinity: Vec<CigriAffinity>,
    /// Finalize: most copies of one running task once its campaign has no
    /// waiting task left and slots are free; 0: no finalize.
    pub finalize_copies_max: u32,
    /// Sink effect: a task "succeeding" in less than this fraction (in
    /// thousandths) of its campaign's median duration is suspicious.
    pub sink_ratio_milli: u32,
    /// Sink effect: tasks a campaign must have completed before the rule applies.
    pub sink_min_tasks: u32,
    /// The predictor's sliding window of log time.
    pub predictor_window_ms: u64,
}

/// One of CiGri's (user, cluster) affinities.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct CigriAffinity {
    pub user: String,
    pub cluster: String,
}

impl Default for CigriPolicy {
    fn default() -> Self {
        CigriPolicy {
            affinity: Vec::new(),
            finalize_copies_max: 1,
            sink_ratio_milli: 50,
            sink_min_tasks: 10,
            predictor_window_ms: 3_600_000,
        }
    }
}

/// Resource reservation and backfilling (Grid Engine's sched_conf(5)
/// `max_reservation` and `default_duration`): off unless `max_reservation > 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReservationPolicy {
    /// Most jobs that reserve slots in one scheduling run (Grid Engine's
    /// `max_reservation`, default 0: no reservation); at most [`MAX_RESERVATION_MAX`].
    pub max_reservation: u32,
    /// How long a task with no wall-time limit is counted to run, in ms of log
    /// time (Grid Engine's `default_duration`, whose default is INFINITY;
    /// gridfold's is an hour, [`DEFAULT_DURATION_MS_DEFAULT`]). Only
    /// reservations read it.
    pub default_duration_ms: u64,
}

/// The highest `max_reservation` a policy may set.
pub const MAX_RESERVATION_MAX: u32 = 1_024;
/// gridfold's `default_duration`: an hour.
pub const DEFAULT_DURATION_MS_DEFAULT: u64 = 3_600_000;

impl Default for ReservationPolicy {
    fn default() -> Self {
        ReservationPolicy { max_reservation: 0, default_duration_ms: DEFAULT_DURATION_MS_DEFAULT }
    }
}

/// FBSNG's scheduler settings (the seed's queue parameters and process
/// types), read by the `fbsng` family only. Limits: [`crate::core::family::fbsng`].
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct FbsngPolicy {
    /// The queues, in the order given (which breaks ties between equal
    /// priorities); none: one queue `default` with the default parameters.
    pub queues: Vec<FbsngQueue>,
    /// The process types; a job naming none has no quota and no default requirements.
    pub process_types: Vec<FbsngProcessType>,
    /// The family decides at most once per this much log time; 0: 5,000 ms.
    pub min_run_interval_ms: u64,
}

/// One FBSNG queue, by FBSNG's names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FbsngQueue {
    pub name: String,
    /// `QPmin`, `QPmax`: the bounds of the queue's priority.
    pub qp_min: i64,
    pub qp_max: i64,
    /// `QPI`: what the queue's priority gains at every section start.
    pub qpi: i64,
    /// `QPD`: what it loses when the section started is its own.
    pub qpd: i64,
    /// `QPG`: a queue that cannot start a section and leads another by more
    /// than this holds that other queue.
    pub qpg: i64,
    /// `SPG`: a waiting section whose priority leads a later one's by this much
    /// or more holds it.
    pub spg: i64,
}

impl FbsngQueue {
    /// Its parameters by FBSNG's names (as policy files write them), for the
    /// checks and the rendering that go through them all alike.
    pub fn parameters(&self) -> [(&'static str, i64); 6] {
        [
            ("qp_min", self.qp_min),
            ("qp_max", self.qp_max),
            ("qpi", self.qpi),
            ("qpd", self.qpd),
            ("qpg", self.qpg),
            ("spg", self.spg),
        ]
    }
}

/// One FBSNG process type: a quota on the slots its jobs hold at once, and
/// requirements its jobs' tasks must meet besides their own.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct FbsngProcessType {
    pub name: String,
    /// Most slots held (dispatched or running) by its jobs at once; 0: no quota.
    pub quota_slots: u32,
    /// Requirements over engine properties (FBSNG's node attributes); empty: none.
    pub requirements: String,
}

/// Grid Engine's suspend thresholds (queue_conf(5)), for every engine: while
/// one of an engine's reported load values is above its threshold, every
/// `interval_ms` of log time its `nsuspend` lowest-priority running tasks are
/// suspended; once none is, as many threshold-suspended tasks are resumed per
/// interval. No threshold (the default): the rule is off.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SuspendThresholds {
    /// (load value name, threshold in milli-units), in the order given; at most
    /// [`SUSPEND_THRESHOLDS_MAX`], names unique.
    pub thresholds: Vec<(String, i64)>,
    /// Grid Engine's `suspend_interval` (default 5 minutes), log time.
    pub interval_ms: u64,
    /// Grid Engine's `nsuspend` (default 1): tasks suspended (or resumed) per interval.
    pub nsuspend: u32,
}

/// Most thresholds one policy may give.
pub const SUSPEND_THRESHOLDS_MAX: usize = 16;
/// Most tasks suspended or resumed per engine and interval.
pub const NSUSPEND_MAX: u32 = 1_024;
/// The longest `suspend_interval`: a day.
pub const SUSPEND_INTERVAL_MS_MAX: u64 = 86_400_000;

impl Default for SuspendThresholds {
    fn default() -> Self {
        SuspendThresholds { thresholds: Vec::new(), interval_ms: 300_000, nsuspend: 1 }
    }
}

/// The bounds on tasks' whole output (stored by engines in the object store,
/// never on the log) and on engines' work directories.
///
/// Each attempt's bound is decided by the fold when it applies the attempt's
/// `Dispatch` (see [`crate::core::state::attempts`]) and carried to the engine
/// in the order, so the projector, replay and every engine agree on it: the
/// smaller of `task_bytes_max` and the job's uncommitted budget shared among
/// its waiting tasks. A job's attempts together never store more than
/// `job_bytes_max`, whatever their number.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputPolicy {
    /// Most bytes one attempt stores of its stdout, and as many of its stderr.
    pub task_bytes_max: u64,
    /// Most bytes all attempts of one job store, both streams together.
    pub job_bytes_max: u64,
    /// How long an engine keeps an ended attempt's work directory (wall time on the engine).
    pub work_dir_retention_ms: u64,
}

/// The most [`OutputPolicy::task_bytes_max`] may be: 1 GiB.
pub const OUTPUT_TASK_BYTES_MAX_LIMIT: u64 = 1 << 30;
/// The most [`OutputPolicy::job_bytes_max`] may be: 1 TiB.
pub const OUTPUT_JOB_BYTES_MAX_LIMIT: u64 = 1 << 40;
/// The longest [`OutputPolicy::work_dir_retention_ms`]: a year.
pub const WORK_DIR_RETENTION_MS_LIMIT: u64 = 365 * 24 * 3_600_000;

impl Default for OutputPolicy {
    fn default() -> Self {
        OutputPolicy { task_bytes_max: 16 << 20, job_bytes_max: 1 << 30, work_dir_retention_ms: 24 * 3_600_000 }
    }
}

/// Techila's scheduler settings, read by the `techila` family only.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TechilaPolicy {
    /// The Techila License: most tasks running (dispatched or started) at once
    /// across the grid, whatever the number of engines; 0 means no cap.
    pub max_running_tasks: u32,
    /// A user's projects share capacity through the ticket draw, instead of
    /// the user's most important project taking it all.
    pub simultaneous_projects: bool,
    /// End-user priorities, 1 (most important) to 7; a user not named is 4.
    pub user_priorities: BTreeMap<String, u32>,
    /// Log time after which a scheduling cycle runs even when none of the
    /// cycle's events came; 0 means the default, 5,000 ms.
    pub cycle_interval_ms: u64,
}

/// Grid Engine's scheduler configuration (sched_conf(5)) for job ordering, by
/// its own names. Weights Grid Engine writes as fractions are held in
/// thousandths (`_milli`), so every decision is integer arithmetic.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SgePolicy {
    /// `sge-plain`: the user with the fewest running tasks first, FCFS between equals.
    pub user_sort: bool,
    /// Usage loses half its weight every `halftime` (0: never decays).
    pub halftime_ms: u64,
    /// How far short-term entitlements may stray from long-term ones, in
    /// thousandths (Grid Engine's `compensation_factor`; 0: no limit).
    pub compensation_factor_milli: u32,
    /// `weight_priority`, `weight_urgency`, `weight_ticket`: the dispatch priority.
    pub weight_priority_milli: u32,
    pub weight_urgency_milli: u32,
    pub weight_ticket_milli: u32,
    /// Tickets handed out by the share tree and the functional policy.
    pub weight_tickets_share: u32,
    pub weight_tickets_functional: u32,
    /// Urgency per second waited (thousandths).
    pub weight_waiting_time_milli: u32,
    /// Urgency of a job at its deadline (Grid Engine's `weight_deadline`).
    pub weight_deadline: u32,
    /// Urgency per slot a task asks for (the `slots` complex's urgency).
    pub slot_urgency: u32,
    /// Split of the functional tickets between the four categories (thousandths).
    pub weight_user_milli: u32,
    pub weight_project_milli: u32,
    pub weight_department_milli: u32,
    pub weight_job_milli: u32,
    /// The share tree; empty: no share-tree tickets.
    pub share_tree: Vec<ShareTreeNode>,
    /// Functional shares (`fshare`) by user, project and department.
    pub functional_users: BTreeMap<String, u32>,
    pub functional_projects: BTreeMap<String, u32>,
    pub functional_departments: BTreeMap<String, u32>,
    /// Which users belong to which department (Grid Engine's department access lists).
    pub departments: BTreeMap<String, Vec<String>>,
    /// Override tickets (`oticket`) by user and project.
    pub override_users: BTreeMap<String, u32>,
    pub override_projects: BTreeMap<String, u32>,
}

impl SgePolicy {
    /// What Grid Engine's installer writes into a new cell's scheduler
    /// configuration (most sites run with these): `weight_priority 1.0`,
    /// `weight_urgency 0.1`, `weight_ticket 0.01`, `weight_waiting_time 0`,
    /// `weight_deadline 3600000`, `halftime 168` hours, `compensation_factor 5`,
    /// `weight_user`…`weight_job` 0.25 each, and the `slots` complex's urgency
    /// 1000; no tickets until an operator gives some.
    pub fn grid_engine_defaults() -> SgePolicy {
        SgePolicy {
            halftime_ms: 168 * 3_600_000,
            compensation_factor_milli: 5_000,
            weight_priority_milli: 1_000,
            weight_urgency_milli: 100,
            weight_ticket_milli: 10,
            weight_deadline: 3_600_000,
            slot_urgency: 1_000,
            weight_user_milli: 250,
            weight_project_milli: 250,
            weight_department_milli: 250,
            weight_job_milli: 250,
            ..SgePolicy::default()
        }
    }
}

/// One node of the share tree: its parent (an index into the list, which
/// lists parents before children; `None` for the root's children), its shares
/// among its siblings, and for a leaf whom it stands for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShareTreeNode {
    pub name: String,
    pub parent: Option<u32>,
    pub shares: u32,
    pub leaf: Option<ShareTreeLeaf>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum ShareTreeLeaf {
    User(String),
    Project(String),
    /// Grid Engine's `default` leaf: every user the tree does not name gets a
    /// node of its own with these shares.
    DefaultUser,
}

/// The default [`Policy::job_retention_ms`]: an hour. Long enough for a person
/// or a workflow to look at a job that just ended (`stat`, `why`, its failures
/// and blacklists) and for late reports about it (a redundant copy's result, an
/// engine coming back) to be recognised by its name; short enough that a grid
/// ending thousands of jobs an hour holds at most an hour's worth of ended jobs.
pub const JOB_RETENTION_MS_DEFAULT: u64 = 3_600_000;

/// GridServer's redundant rescheduling, for jobs that switch it on. All
/// arithmetic is on integers (ms, percent, thousandths), so replay is exact.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RedundancyPolicy {
    /// The strategies stay off until this share of a job's tasks has completed;
    /// before that only the job's `task_max_time` makes copies.
    pub strategy_effective_percent: u32,
    /// The rescheduler looks at running tasks at multiples of this much log time
    /// (0 is read as 1 ms: every run).
    pub poll_period_ms: u64,
    /// Percent-completed strategy: once no more than this share of tasks remains,
    /// tasks running longer than the mean get a copy.
    pub percent_completed_strategy: bool,
    pub remaining_task_percent: u32,
    /// Average strategy: tasks running longer than mean × `average_limit_milli` / 1000.
    pub average_strategy: bool,
    pub average_limit_milli: u32,
    /// Standard-deviation strategy: longer than mean + sd × `std_dev_limit_milli` / 1000.
    pub std_dev_strategy: bool,
    pub std_dev_limit_milli: u32,
    /// A copy goes to the front of its job's queue rather than the back.
    pub reschedule_first: bool,
    /// Most copies alive at once beside a task's first attempt.
    pub copies_per_task_max: u32,
}

impl Default for RedundancyPolicy {
    fn default() -> Self {
        RedundancyPolicy {
            strategy_effective_percent: 50,
            poll_period_ms: 5_000,
            percent_completed_strategy: true,
            remaining_task_percent: 10,
            average_strategy: true,
            average_limit_milli: 3_000,
            std_dev_strategy: true,
            std_dev_limit_milli: 2_000,
            reschedule_first: false,
            copies_per_task_max: 2,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            algorithm: Algorithm::default(),
            engine_timeout_ms: 30_000,
            dispatch_timeout_ms: 60_000,
            load_formula: LoadFormula::default(),
            dispatches_per_run_max: 4_096,
            seed: 0,
            engine_tiers: Vec::new(),
            greylist_affinity: 5,
            redundancy: RedundancyPolicy::default(),
            job_retention_ms: JOB_RETENTION_MS_DEFAULT,
            sge: SgePolicy::default(),
            queue_sort_method: QueueSort::default(),
            techila: TechilaPolicy::default(),
            output: OutputPolicy::default(),
            suspend_thresholds: SuspendThresholds::default(),
            reservation: ReservationPolicy::default(),
            fbsng: FbsngPolicy::default(),
            cigri: CigriPolicy::default(),
            flood: None,
            caps: CapsPolicy::default(),
        }
    }
}

/// The scheduling algorithm, chosen by policy as in Grid Engine's `sched_conf(5)` `algorithm`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")] // as policy files name them (`policy show` prints this)
pub enum Algorithm {
    /// Grid Engine's SGE mode: FCFS by submission (or `user_sort`), overridden
    /// by job priority; requirements filter engines; the least loaded engine
    /// wins, ties by engine id.
    #[default]
    SgePlain,
    /// Grid Engine's ticket mode (SGEEE): jobs ordered by dispatch priority,
    /// from `-p`, urgency and the tickets of the share tree, functional and
    /// override policies.
    Sgeee,
    /// Techila's scheduler: resource-first, fastest free core, one project per
    /// user in a seeded ticket draw, under a license cap (`family::techila`).
    Techila,
    /// FBSNG's scheduler: job-first over queues of dynamic priorities with
    /// gaps, sections of dynamic priorities, process-type quotas (`family::fbsng`).
    Fbsng,
    /// CiGri's metascheduler: per cluster, test campaigns first, then default
    /// campaigns of users with affinity for the cluster, then the rest, FIFO;
    /// finalize copies at a campaign's end (`family::cigri`).
    Cigri,
}

impl Algorithm {
    /// Every algorithm, as policy files name them.
    pub const NAMES: [&'static str; 5] = ["sge-plain", "sgeee", "techila", "fbsng", "cigri"];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::SgePlain => "sge-plain",
            Algorithm::Sgeee => "sgeee",
            Algorithm::Techila => "techila",
            Algorithm::Fbsng => "fbsng",
            Algorithm::Cigri => "cigri",
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "sge-plain" => Some(Algorithm::SgePlain),
            "sgeee" => Some(Algorithm::Sgeee),
            "techila" => Some(Algorithm::Techila),
            "fbsng" => Some(Algorithm::Fbsng),
            "cigri" => Some(Algorithm::Cigri),
            _ => None,
        }
    }
}

/// Grid Engine's `load_formula`: the load index of an engine, in milli-units, is
/// `slots_weight * used/slots + load_weight * load_per_core`, both scaled to 1000,
/// plus `expression` over the engine's named load values (sched_conf(5)'s own
/// form, see [`crate::core::load`]). The engine with the lowest index is chosen
/// first under `queue_sort_method = load`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadFormula {
    pub slots_weight: u32,
    pub load_weight: u32,
    pub expression: crate::core::load::LoadExpr,
}

impl Default for LoadFormula {
    fn default() -> Self {
        LoadFormula { slots_weight: 1, load_weight: 0, expression: Default::default() }
    }
}

/// Grid Engine's `queue_sort_method` (sched_conf(5)): which engine a task goes
/// to among those that may take it, after tiers and scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")] // as policy files name them (`policy show` prints this)
pub enum QueueSort {
    /// The lowest load index first; the lower `seq_no` breaks ties, then the engine id.
    #[default]
    Load,
    /// The lowest `seq_no` first; the lower load index breaks ties, then the engine id.
    Seqno,
}

impl QueueSort {
    pub fn name(self) -> &'static str {
        match self {
            QueueSort::Load => "load",
            QueueSort::Seqno => "seqno",
        }
    }
}

/// The projector's decisions, made from the state folded through `based_on_seq`
/// (plus the orders it had published but not yet read back).
#[derive(Debug, Clone, PartialEq)]
pub struct OrderBatch {
    pub based_on_seq: Seq,
    pub algorithm: String,
    pub algorithm_version: u32,
    pub orders: Vec<Order>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Order {
    /// Run this attempt of the task on the engine, in the engine's login `epoch`
    /// the decision was made for: after another login of the engine it no longer applies.
    Dispatch { task: TaskRef, attempt: Attempt, engine: EngineId, epoch: Epoch },
    /// Stop this attempt (its job was cancelled, or it is a copy no longer needed).
    Cancel { task: TaskRef, attempt: Attempt, engine: EngineId, reason: CancelReason },
    /// The engine has been silent too long: its attempts are requeued, its slots
    /// forgotten. It applies to the login `epoch` that fell silent only.
    EngineLost { engine: EngineId, epoch: Epoch, last_seen_ms: u64 },
    /// Put this attempt's task back in the queue; its engine is told to stop the attempt.
    Requeue { task: TaskRef, attempt: Attempt, engine: EngineId, reason: RequeueReason },
    /// No engine known to the grid can ever run this job as it stands; it waits
    /// for one that can, and tells its submitter now rather than never.
    MarkUnschedulable { job: JobId, reason: Unschedulable },
    /// Fetch and unpack this grid library; the engine keeps running other tasks meanwhile.
    SyncLibrary { engine: EngineId, library: LibraryRef },
    /// The engine failed `failures` tasks of the job: it gets no more of them.
    Blacklist { job: JobId, engine: EngineId, failures: u32 },
    /// Put a redundant copy of this running task in its job's waiting list.
    Reschedule { task: TaskRef, reason: RescheduleReason, elapsed_ms: u64, limit_ms: u64 },
    /// A dependency of the job (or of one task, `task` = its index) failed and the
    /// job asked to fail with it.
    FailDependent { job: JobId, task: Option<u32>, dependency: String },
    /// Stop (SIGSTOP) this live attempt, as an operator asked: it stays booked
    /// on its engine and is not timed out while suspended.
    Suspend { task: TaskRef, attempt: Attempt, engine: EngineId },
    /// Continue (SIGCONT) this suspended attempt, as an operator asked.
    Resume { task: TaskRef, attempt: Attempt, engine: EngineId },
    /// Kill this live attempt and put its task back at the front of its job's
    /// queue, as an operator asked: not a failure, and the attempt is not used
    /// (its number goes to the next dispatch).
    Preempt { task: TaskRef, attempt: Attempt, engine: EngineId },
    /// One engine's part of an attempt of a parallel task (`span = "site"`):
    /// one such order per part, in one batch, each naming every part; the
    /// first part is the master, which runs the command. `engine` and `epoch`
    /// are this order's part.
    DispatchParallel { task: TaskRef, attempt: Attempt, engine: EngineId, epoch: Epoch, parts: Vec<ParallelPart> },
    /// CiGri: a test campaign ran one task on each of the `clusters` clusters
    /// its requirements allow; it ends, its other tasks dropped (cancelled).
    EndTestCampaign { job: JobId, clusters: u32 },
    /// Flood control set a gateway engine's job ratio (thousandths of a task
    /// per slot); `waiting`: slots of its tasks waiting when decided.
    FloodRatio { engine: EngineId, ratio_milli: u32, waiting: u32, reason: FloodReason },
    /// CiGri: the sink rule found an engine (or, `engine` absent, every engine
    /// of `cluster`) whose tasks of the campaign succeed in less than
    /// `sink_ratio` of the campaign's median: it gets no more of them.
    /// `cluster` is the engine's cluster when an engine is named.
    FlagSink { job: JobId, engine: Option<EngineId>, cluster: String, median_ms: u64, campaign_median_ms: u64 },
    /// The projector could not deliver this attempt's run order to `engine`:
    /// the broker refused the message as too large (`bytes`, more than its
    /// `max`). Not a decision made from the state but the projector's report
    /// of a delivery, in a batch of its own (which `replay --verify` does not
    /// re-derive); the fold fails the attempt ([`FailureKind::Undeliverable`]),
    /// so the task is retried or fails as after any failure.
    Undeliverable { task: TaskRef, attempt: Attempt, engine: EngineId, bytes: u64, max: u64 },
}

impl Order {
    /// An upper bound on [`Order::encoded_len_max`] over every order whose ids
    /// and strings are within their limits (64 bytes each; a dependency, a
    /// task reference, 96).
    pub const ENCODED_LEN_MAX: usize = ORDER_OVERHEAD_BYTES_MAX + 2 * (64 + 3) + (96 + 3);

    /// An upper bound on the size of this order encoded on the wire, computed
    /// from its strings alone so that `core` need not know protobuf: every
    /// string costs its length plus a tag and a length prefix, everything else
    /// fits a fixed allowance. `wire`'s tests hold every kind of order to it.
    pub fn encoded_len_max(&self) -> usize {
        let text = |s: &str| s.len() + 3;
        let strings = match self {
            Order::Dispatch { task, engine, .. }
            | Order::Undeliverable { task, engine, .. }
            | Order::Cancel { task, engine, .. }
            | Order::Requeue { task, engine, .. }
            | Order::Suspend { task, engine, .. }
            | Order::Resume { task, engine, .. }
            | Order::Preempt { task, engine, .. } => text(task.job.as_str()) + text(engine.as_str()),
            Order::EngineLost { engine, .. } => text(engine.as_str()),
            Order::MarkUnschedulable { job, .. } => text(job.as_str()),
            Order::SyncLibrary { engine, library } => {
                text(engine.as_str()) + text(&library.name) + text(&library.version)
            }
            Order::Blacklist { job, engine, .. } => text(job.as_str()) + text(engine.as_str()),
            Order::Reschedule { task, .. } => text(task.job.as_str()),
            Order::FailDependent { job, dependency, .. } => text(job.as_str()) + text(dependency),
            Order::EndTestCampaign { job, .. } => text(job.as_str()),
            Order::FloodRatio { engine, .. } => text(engine.as_str()),
            Order::FlagSink { job, engine, cluster, .. } => {
                text(job.as_str()) + engine.as_ref().map_or(0, |engine| text(engine.as_str())) + text(cluster)
            }
            Order::DispatchParallel { task, engine, parts, .. } => {
                text(task.job.as_str())
                    + text(engine.as_str())
                    + parts.iter().map(|part| text(part.engine.as_str()) + PARALLEL_PART_OVERHEAD_BYTES_MAX).sum::<usize>()
            }
        };
        ORDER_OVERHEAD_BYTES_MAX + strings
    }

    pub fn kind_name(&self) -> &'static str {
        match self {
            Order::Dispatch { .. } => "Dispatch",
            Order::Cancel { .. } => "Cancel",
            Order::EngineLost { .. } => "EngineLost",
            Order::Requeue { .. } => "Requeue",
            Order::MarkUnschedulable { .. } => "MarkUnschedulable",
            Order::SyncLibrary { .. } => "SyncLibrary",
            Order::Blacklist { .. } => "Blacklist",
            Order::Reschedule { .. } => "Reschedule",
            Order::FailDependent { .. } => "FailDependent",
            Order::Suspend { .. } => "Suspend",
            Order::Resume { .. } => "Resume",
            Order::Preempt { .. } => "Preempt",
            Order::DispatchParallel { .. } => "DispatchParallel",
            Order::EndTestCampaign { .. } => "EndTestCampaign",
            Order::FloodRatio { .. } => "FloodRatio",
            Order::FlagSink { .. } => "FlagSink",
            Order::Undeliverable { .. } => "Undeliverable",
        }
    }
    /// The engine that must hear of this order, if any.
    pub fn addressee(&self) -> Option<&EngineId> {
        match self {
            Order::Dispatch { engine, .. }
            | Order::Cancel { engine, .. }
            | Order::Requeue { engine, .. }
            | Order::Suspend { engine, .. }
            | Order::Resume { engine, .. }
            | Order::Preempt { engine, .. }
            | Order::DispatchParallel { engine, .. } => Some(engine),
            Order::EngineLost { engine, .. } | Order::SyncLibrary { engine, .. } => Some(engine),
            _ => None,
        }
    }
}

/// What an order may take on the wire beyond its strings: the order's own tag
/// and length, nested messages' tags and lengths, and every integer and enum
/// at its longest varint.
pub const ORDER_OVERHEAD_BYTES_MAX: usize = 64;
/// What one part of a `DispatchParallel` takes beyond its engine id: its
/// message's tag and length, the epoch and the slots at their longest varints.
pub const PARALLEL_PART_OVERHEAD_BYTES_MAX: usize = 24;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum CancelReason {
    JobCancelled,
    /// Another copy of the task returned its result first.
    RedundantCopy,
    /// Sent to the engine of a requeued attempt; never in an order on the log.
    Requeued,
    /// An operator cancelled the task alone (`TaskCancelled`).
    TaskCancelled,
    /// Sent to a companion engine of a parallel attempt whose master part
    /// ended, to stop its companion command; never in an order on the log.
    ParallelEnded,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum RequeueReason {
    /// Dispatched but not reported started within the policy's dispatch timeout.
    DispatchTimeout,
    /// Its engine logged in again: the attempt belongs to a login epoch that has
    /// ended (the engine restarted, or another engine took its name), and nothing
    /// runs it any more.
    EngineRestarted,
    /// Another part of the parallel task's attempt lost its engine (lost,
    /// logged out or logged in again): the whole attempt is given up.
    PartLost,
    /// Flood control withdrew it from a gateway's remote queue, where it waited
    /// past the policy's `remote_queue_timeout` (CiGri's Nikita).
    FloodWithdrawn,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Unschedulable {
    /// No logged-in engine satisfies the job's requirements expression.
    NoEngineMatchesRequirements,
    /// Engines match, but none has as many slots as one task needs.
    NoEngineHasEnoughSlots,
    /// The job's root library was never published, so no engine can sync it.
    LibraryNotPublished,
    /// A `span = "site"` task needs more slots than any site's logged-in
    /// engines that fit it have in all (in its 32 largest).
    NoSiteHasEnoughSlots,
}

/// Which rule of redundant rescheduling asked for a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum RescheduleReason {
    TaskMaxTime,
    PercentCompleted,
    Average,
    StdDev,
    /// Techila: the task ran past its job's `expected_task_time_ms`.
    Expired,
    /// CiGri's finalize: the campaign has no waiting task left and slots are free.
    Finalize,
}

impl CancelReason {
    pub fn as_str(self) -> &'static str {
        match self {
            CancelReason::JobCancelled => "job-cancelled",
            CancelReason::RedundantCopy => "redundant-copy",
            CancelReason::Requeued => "requeued",
            CancelReason::TaskCancelled => "task-cancelled",
            CancelReason::ParallelEnded => "parallel-ended",
        }
    }
}

impl RequeueReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RequeueReason::DispatchTimeout => "dispatch-timeout",
            RequeueReason::EngineRestarted => "engine-restarted",
            RequeueReason::PartLost => "part-lost",
            RequeueReason::FloodWithdrawn => "flood-withdrawn",
        }
    }
}

impl RescheduleReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RescheduleReason::TaskMaxTime => "task-max-time",
            RescheduleReason::PercentCompleted => "percent-completed",
            RescheduleReason::Average => "average",
            RescheduleReason::StdDev => "std-dev",
            RescheduleReason::Expired => "expired",
            RescheduleReason::Finalize => "finalize",
        }
    }
}

impl Unschedulable {
    pub fn as_str(self) -> &'static str {
        match self {
            Unschedulable::NoEngineMatchesRequirements => "no-engine-matches-requirements",
            Unschedulable::NoEngineHasEnoughSlots => "no-engine-has-enough-slots",
            Unschedulable::NoSiteHasEnoughSlots => "no-site-has-enough-slots",
            Unschedulable::LibraryNotPublished => "library-not-published",
        }
    }
}

impl std::fmt::Display for Order {
    /// One line a person can read: `dispatch job/3 #2 -> e1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Order::Dispatch { task, attempt, engine, .. } => write!(f, "dispatch {task} #{attempt} -> {engine}"),
            Order::Cancel { task, attempt, engine, reason } => {
                write!(f, "cancel {task} #{attempt} on {engine} ({})", reason.as_str())
            }
            Order::EngineLost { engine, last_seen_ms, .. } => write!(f, "lost {engine} (last seen {last_seen_ms})"),
            Order::Requeue { task, attempt, engine, reason } => {
                write!(f, "requeue {task} #{attempt} from {engine} ({})", reason.as_str())
            }
            Order::MarkUnschedulable { job, reason } => write!(f, "unschedulable {job} ({})", reason.as_str()),
            Order::SyncLibrary { engine, library } => write!(f, "sync {library} on {engine}"),
            Order::Blacklist { job, engine, failures } => write!(f, "blacklist {engine} for {job} ({failures} failures)"),
            Order::Reschedule { task, reason, elapsed_ms, limit_ms } => {
                write!(f, "reschedule {task} ({}: {elapsed_ms} ms > {limit_ms} ms)", reason.as_str())
            }
            Order::FailDependent { job, task: Some(index), dependency } => {
                write!(f, "fail {job}/{index} (dependency {dependency} failed)")
            }
            Order::FailDependent { job, task: None, dependency } => write!(f, "fail {job} (dependency {dependency} failed)"),
            Order::Suspend { task, attempt, engine } => write!(f, "suspend {task} #{attempt} on {engine}"),
            Order::Resume { task, attempt, engine } => write!(f, "resume {task} #{attempt} on {engine}"),
            Order::Preempt { task, attempt, engine } => write!(f, "preempt {task} #{attempt} on {engine}"),
            Order::EndTestCampaign { job, clusters } => write!(f, "end test campaign {job} (tested on {clusters} clusters)"),
            Order::FloodRatio { engine, ratio_milli, waiting, reason } => {
                write!(f, "flood ratio of {engine} {ratio_milli}/1000 ({}, {waiting} waiting)", reason.as_str())
            }
            Order::FlagSink { job, engine: Some(engine), cluster, median_ms, campaign_median_ms } => write!(
                f,
                "flag engine {engine} (cluster {cluster}) a sink for {job} (median {median_ms} ms, campaign's {campaign_median_ms} ms)"
            ),
            Order::FlagSink { job, engine: None, cluster, median_ms, campaign_median_ms } => write!(
                f,
                "flag cluster {cluster} a sink for {job} (median {median_ms} ms, campaign's {campaign_median_ms} ms)"
            ),
            Order::Undeliverable { task, attempt, engine, bytes, max } => {
                write!(f, "undeliverable {task} #{attempt} -> {engine} (its run order of {bytes} bytes, more than the broker's {max})")
            }
            Order::DispatchParallel { task, attempt, engine, parts, .. } => {
                let role = if parts.first().is_some_and(|master| master.engine == *engine) { "master" } else { "part" };
                write!(f, "dispatch {task} #{attempt} -> {engine} ({role} of")?;
                for part in parts {
                    write!(f, " {}:{}", part.engine, part.slots)?;
                }
                f.write_str(")")
            }
        }
    }
}
