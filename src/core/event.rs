//! The vocabulary of the log: facts (events, past tense) and decisions
//! (orders, imperative), wrapped in an [`Envelope`] and positioned by an [`Entry`].
//!
//! These types mirror `schemas/gridfold/v1/events.proto`; `wire/` converts
//! between the two and is the only place that knows protobuf. Everything here
//! is plain data: validation of what an event *means* happens in `fold`,
//! which records a [`Rejection`](super::reject::Rejection) instead of failing.

use std::collections::BTreeMap;

use super::ids::{Attempt, EngineId, JobId, Seq, TaskRef};

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
    pub payload: Payload,
    /// The canonical bytes of the payload that the digest chains over,
    /// produced by `wire` (canonical protobuf of the decoded envelope, or the raw
    /// bytes when they could not be decoded). Two logs holding the same events
    /// digest alike however their publishers encoded them.
    pub canonical: Vec<u8>,
}

/// The publisher class a subject implies.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Origin {
    /// `gridfold.ev.engine.<id>.>`: only that engine may publish here.
    Engine(EngineId),
    /// `gridfold.ev.orders`: only the fenced projector writes here.
    Projector,
    /// `gridfold.ev.tick`: the tickers.
    Ticker,
    /// Any other subject under `gridfold.ev.>`: submitters and operators.
    Client,
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
    EngineLoggedIn { engine: EngineId, slots: u32, props: EngineProps },
    EngineLoggedOut { engine: EngineId },
    EngineHeartbeat { engine: EngineId, load: EngineLoad },
    TaskStarted { task: TaskRef, attempt: Attempt, engine: EngineId },
    TaskCompleted {
        task: TaskRef,
        attempt: Attempt,
        engine: EngineId,
        exit_code: i32,
        cpu_ms: u64,
        wall_ms: u64,
        result: Vec<u8>,
    },
    TaskFailed {
        task: TaskRef,
        attempt: Attempt,
        engine: EngineId,
        exit_code: Option<i32>,
        kind: FailureKind,
        error_tail: String,
    },
    PolicySet(Policy),
    /// Time passes: lets timers fire when nothing else happens. Carries nothing;
    /// the log time of its entry is the news.
    Tick,
    OrderBatch(OrderBatch),
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
            | Event::TaskFailed { engine, .. } => Some(engine),
            _ => None,
        }
    }

    /// A short stable name, used in histories, logs and statistics.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Event::JobSubmitted(_) => "JobSubmitted",
            Event::JobCancelled { .. } => "JobCancelled",
            Event::JobPriorityChanged { .. } => "JobPriorityChanged",
            Event::EngineLoggedIn { .. } => "EngineLoggedIn",
            Event::EngineLoggedOut { .. } => "EngineLoggedOut",
            Event::EngineHeartbeat { .. } => "EngineHeartbeat",
            Event::TaskStarted { .. } => "TaskStarted",
            Event::TaskCompleted { .. } => "TaskCompleted",
            Event::TaskFailed { .. } => "TaskFailed",
            Event::PolicySet(_) => "PolicySet",
            Event::Tick => "Tick",
            Event::OrderBatch(_) => "OrderBatch",
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
}

/// Load figures an engine reports with each heartbeat, as integers so that the
/// load formula is exact on every replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct EngineLoad {
    /// One-minute load average divided by cores, times 1000 (1000 = every core busy).
    pub load_per_core_milli: u32,
    pub memory_free_mb: u64,
}

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
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::NonZeroExit => "non-zero-exit",
            FailureKind::Signalled => "signalled",
            FailureKind::WallTimeExceeded => "wall-time-exceeded",
            FailureKind::LaunchFailed => "launch-failed",
            FailureKind::EngineShutdown => "engine-shutdown",
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
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            algorithm: Algorithm::SgePlain,
            engine_timeout_ms: 30_000,
            dispatch_timeout_ms: 60_000,
            load_formula: LoadFormula::default(),
            dispatches_per_run_max: 4_096,
            seed: 0,
        }
    }
}

/// The scheduling algorithm, chosen by policy as in Grid Engine's `sched_conf(5)` `algorithm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Algorithm {
    /// Grid Engine's SGE mode: FCFS by submission, overridden by job priority;
    /// requirements filter engines; the least loaded engine wins, ties by engine id.
    SgePlain,
}

impl Algorithm {
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::SgePlain => "sge-plain",
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "sge-plain" => Some(Algorithm::SgePlain),
            _ => None,
        }
    }
}

/// Grid Engine's `load_formula`: the load index of an engine, in milli-units, is
/// `slots_weight * used/slots + load_weight * load_per_core`, both scaled to 1000.
/// The engine with the lowest index is chosen first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadFormula {
    pub slots_weight: u32,
    pub load_weight: u32,
}

impl Default for LoadFormula {
    fn default() -> Self {
        LoadFormula { slots_weight: 1, load_weight: 0 }
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
    /// Run this attempt of the task on the engine.
    Dispatch { task: TaskRef, attempt: Attempt, engine: EngineId },
    /// Stop this attempt (its job was cancelled, or it is a copy no longer needed).
    Cancel { task: TaskRef, attempt: Attempt, engine: EngineId, reason: CancelReason },
    /// The engine has been silent too long: its attempts are requeued, its slots forgotten.
    EngineLost { engine: EngineId, last_seen_ms: u64 },
    /// Put this attempt's task back in the queue; its engine is told to stop the attempt.
    Requeue { task: TaskRef, attempt: Attempt, engine: EngineId, reason: RequeueReason },
    /// No engine known to the grid can ever run this job as it stands; it waits
    /// for one that can, and tells its submitter now rather than never.
    MarkUnschedulable { job: JobId, reason: Unschedulable },
}

impl Order {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Order::Dispatch { .. } => "Dispatch",
            Order::Cancel { .. } => "Cancel",
            Order::EngineLost { .. } => "EngineLost",
            Order::Requeue { .. } => "Requeue",
            Order::MarkUnschedulable { .. } => "MarkUnschedulable",
        }
    }
    /// The engine that must hear of this order, if any.
    pub fn addressee(&self) -> Option<&EngineId> {
        match self {
            Order::Dispatch { engine, .. } | Order::Cancel { engine, .. } | Order::Requeue { engine, .. } => {
                Some(engine)
            }
            Order::EngineLost { engine, .. } => Some(engine),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum CancelReason {
    JobCancelled,
    /// Sent to the engine of a requeued attempt; never in an order on the log.
    Requeued,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum RequeueReason {
    /// Dispatched but not reported started within the policy's dispatch timeout.
    DispatchTimeout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Unschedulable {
    /// No logged-in engine satisfies the job's requirements expression.
    NoEngineMatchesRequirements,
    /// Engines match, but none has as many slots as one task needs.
    NoEngineHasEnoughSlots,
}

impl Unschedulable {
    pub fn as_str(self) -> &'static str {
        match self {
            Unschedulable::NoEngineMatchesRequirements => "no-engine-matches-requirements",
            Unschedulable::NoEngineHasEnoughSlots => "no-engine-has-enough-slots",
        }
    }
}

impl std::fmt::Display for Order {
    /// One line a person can read: `dispatch job/3 #2 -> e1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Order::Dispatch { task, attempt, engine } => write!(f, "dispatch {task} #{attempt} -> {engine}"),
            Order::Cancel { task, attempt, engine, reason } => {
                write!(f, "cancel {task} #{attempt} on {engine} ({reason:?})")
            }
            Order::EngineLost { engine, last_seen_ms } => write!(f, "lost {engine} (last seen {last_seen_ms})"),
            Order::Requeue { task, attempt, engine, reason } => {
                write!(f, "requeue {task} #{attempt} from {engine} ({reason:?})")
            }
            Order::MarkUnschedulable { job, reason } => write!(f, "unschedulable {job} ({})", reason.as_str()),
        }
    }
}
