//! Why an entry did not apply. The fold records one of these and changes nothing
//! else, identically on every replay. Reasons are an enum, never free text, so
//! tools can count and match them; `detail` strings only carry what a person needs.

use std::fmt;

use super::event::TaskSelector;
use super::family::reasons::{FamilyJobProblem, FamilyOpsProblem, FamilyOrderProblem, FamilyPrioritySetting};
use super::ids::{Attempt, EngineId, JobId, Seq, TaskRef};
use super::event::Control;

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Rejection {
    /// The payload did not decode as an envelope.
    Undecodable { detail: String },
    /// An engine's event whose payload names another engine than its subject does,
    /// or an engine event published on a non-engine subject.
    ForgedEngine { subject_engine: Option<EngineId>, payload_engine: EngineId },
    /// An event published on a subject its kind may not use (orders not from the
    /// projector, a job event on an engine's subject).
    WrongPublisher { event: String },
    DuplicateJob { job: JobId },
    InvalidJob { job: JobId, problem: JobProblem },
    UnknownJob { job: JobId },
    JobAlreadyEnded { job: JobId },
    UnknownEngine { engine: EngineId },
    EngineNotLoggedIn { engine: EngineId },
    InvalidEngine { engine: EngineId, problem: String },
    UnknownTask { task: TaskRef },
    /// A report for an attempt that is not the task's live attempt (an old attempt,
    /// or one never dispatched).
    StaleAttempt { task: TaskRef, attempt: Attempt },
    /// A report from an engine that was not given this attempt.
    WrongEngine { task: TaskRef, attempt: Attempt, engine: EngineId },
    /// A report of an attempt the engine was given in an earlier login epoch:
    /// that login has ended, and the attempt awaits its requeue.
    EpochClosed { task: TaskRef, attempt: Attempt, engine: EngineId },
    /// A second report of the same thing (a start already recorded).
    DuplicateReport { task: TaskRef, attempt: Attempt },
    ResultTooLarge { task: TaskRef, bytes: usize, max: usize },
    ErrorTailTooLarge { task: TaskRef, bytes: usize, max: usize },
    /// One order of a batch did not apply; the rest of the batch did.
    OrderNotApplicable { order: u32, problem: OrderProblem },
    /// An order batch carried more orders than a batch may.
    BatchTooLarge { orders: usize, max: usize },
    InvalidPolicy { problem: String },
    /// An order batch without a seal: only the projector writes orders, and it seals every batch.
    UnsealedBatch,
    /// An order batch whose seal does not prove the projector wrote it.
    BadSeal { signer: String, problem: SealProblem },
    /// A projector key registration that cannot be taken.
    InvalidKey { key: String, problem: String },
    /// A revocation of a key that is not registered.
    UnknownKey { key: String },
    /// A library synced or published that the state cannot take (unknown, or
    /// published again with other contents).
    InvalidLibrary { library: String, problem: String },
    /// An operator's request to suspend, resume or reschedule that names nothing
    /// it can act on. Added last, so earlier rejections keep their encoding.
    ControlRefused { target: TaskSelector, action: Control, problem: ControlProblem },
    /// An operator's hold, release, drain, resume or task cancel, or a part of
    /// a job submitted in parts, that cannot apply as things stand. Added last.
    OpsRefused { target: String, problem: OpsProblem },
    /// A report an engine's batch (`EngineReports`) may not carry, numbered
    /// from 0 in the batch (or the batch itself, empty); the batch's other
    /// reports apply. Added last.
    InvalidReportBatch { report: u32, problem: ReportBatchProblem },
    /// An event stored on a subject that is not its own: one its kind and its
    /// publisher never use (the old shared `gridfold.ev.job.*`, another
    /// kind's subject, or a subject no one may publish on). Added last.
    WrongSubject { event: String, subject: String },
    /// A user's write aimed at a job another user owns, or a submission
    /// naming another owner than the user publishing it. Added last.
    NotOwner { job: JobId, owner: String, user: String },
    /// A user's priority above the default: only an operator may raise a
    /// job's priority (Grid Engine's `qalter -p` for users). Added last.
    PriorityAboveDefault { job: JobId, setting: PrioritySetting, asked: i64, default: i64 },
    /// A submission, or tasks added to a job, that would take its owner or
    /// the grid past a cap of the policy (`[caps]`): `held` is what the
    /// user (or the grid) holds in active jobs, `adding` what this would add,
    /// `limit` the cap. Added last.
    OverCap { job: JobId, cap: Cap, user: String, held: u64, adding: u64, limit: u64 },
    /// A job (or tasks added to it) whose largest run order, expanded with its
    /// longest parameter values, could be more than `max` bytes
    /// (`core::bounds::RUN_ORDER_BYTES_MAX`): no engine could be sent it
    /// whole. Added last.
    RunOrderTooLarge { job: JobId, bytes: u64, max: u64 },
}

/// Which of a job's priorities a [`Rejection::PriorityAboveDefault`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PrioritySetting {
    /// The job's priority (`-p`): higher runs first.
    Priority,
    /// A priority of the family's own (Techila's project priority), defined
    /// in the family's folder.
    Family(FamilyPrioritySetting),
}

/// A cap of the policy (`[caps]`), by its name there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Cap {
    MaxJobsPerUser,
    MaxJobs,
    MaxTasksPerUser,
    MaxTasks,
}

impl Cap {
    pub fn as_str(self) -> &'static str {
        match self {
            Cap::MaxJobsPerUser => "max_jobs_per_user",
            Cap::MaxJobs => "max_jobs",
            Cap::MaxTasksPerUser => "max_tasks_per_user",
            Cap::MaxTasks => "max_tasks",
        }
    }

    /// Jobs or tasks, as the cap counts.
    fn counts(self) -> &'static str {
        match self {
            Cap::MaxJobsPerUser | Cap::MaxJobs => "active jobs",
            Cap::MaxTasksPerUser | Cap::MaxTasks => "tasks in active jobs",
        }
    }

    fn per_user(self) -> bool {
        matches!(self, Cap::MaxJobsPerUser | Cap::MaxTasksPerUser)
    }
}

/// Why a report of an engine's batch was refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ReportBatchProblem {
    /// A batch of no reports.
    Empty,
    /// A login, logout or heartbeat (they are published alone), or an event no
    /// engine publishes.
    NotBatchable { kind: String },
    /// A second report with an id an earlier report of the batch has.
    DuplicateId,
}

impl fmt::Display for ReportBatchProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReportBatchProblem::Empty => f.write_str("the batch holds no report"),
            ReportBatchProblem::NotBatchable { kind } => write!(f, "{kind} is published alone, never in a batch"),
            ReportBatchProblem::DuplicateId => f.write_str("an earlier report of the batch has the same id"),
        }
    }
}

/// Why an operator command (or a job's part) was refused; its name is the
/// rejection's kind (`gridfold rejections --kind already-held`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OpsProblem {
    AlreadyHeld,
    NotHeld,
    AlreadyDrained,
    NotDrained,
    /// A cancel of a task that has ended (done, failed or cancelled).
    TaskAlreadyEnded,
    /// A cancel of a task whose cancel already awaits its orders.
    CancelAlreadyRequested,
    /// More tasks added to a job submitted in parts than it declared
    /// (`tasks_total`), or a declared total below the first part's tasks.
    PartsInconsistent { tasks: u64, total: u32 },
    /// A family's own rule refuses it (its problems are defined in the
    /// family's folder).
    Family(FamilyOpsProblem),
}

impl OpsProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            OpsProblem::AlreadyHeld => "already-held",
            OpsProblem::NotHeld => "not-held",
            OpsProblem::AlreadyDrained => "already-drained",
            OpsProblem::NotDrained => "not-drained",
            OpsProblem::TaskAlreadyEnded => "task-already-ended",
            OpsProblem::CancelAlreadyRequested => "cancel-already-requested",
            OpsProblem::PartsInconsistent { .. } => "parts-inconsistent",
            OpsProblem::Family(problem) => problem.as_str(),
        }
    }
}

impl fmt::Display for OpsProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpsProblem::AlreadyHeld => f.write_str("is held already"),
            OpsProblem::NotHeld => f.write_str("is not held"),
            OpsProblem::AlreadyDrained => f.write_str("is drained already"),
            OpsProblem::NotDrained => f.write_str("is not drained"),
            OpsProblem::TaskAlreadyEnded => f.write_str("has already ended"),
            OpsProblem::CancelAlreadyRequested => f.write_str("is being cancelled already"),
            OpsProblem::PartsInconsistent { tasks, total } => {
                write!(f, "its parts would give it {tasks} tasks, but it declared {total}")
            }
            OpsProblem::Family(problem) => problem.fmt(f),
        }
    }
}

/// Why a request to suspend, resume or reschedule (preempt) was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ControlProblem {
    /// The task (or every task of the job) has no live attempt.
    TaskNotLive,
    /// A resume of attempts none of which is suspended.
    NotSuspended,
    /// A suspend of attempts that are all suspended already.
    AlreadySuspended,
    /// Every attempt named already awaits the order such a request asks for.
    AlreadyRequested,
}

impl ControlProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            ControlProblem::TaskNotLive => "task-not-live",
            ControlProblem::NotSuspended => "not-suspended",
            ControlProblem::AlreadySuspended => "already-suspended",
            ControlProblem::AlreadyRequested => "already-requested",
        }
    }
}

/// Why a batch's seal was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum SealProblem {
    /// The seal was not the last field of the stored bytes, so what it signs is not defined.
    NotLast,
    /// No operator registered the signer's key (or it was revoked).
    UnregisteredKey,
    /// The signer is not a valid ed25519 public key.
    NotAKey,
    /// The signature does not verify over the stored bytes.
    BadSignature,
}

impl SealProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            SealProblem::NotLast => "the seal is not the last field",
            SealProblem::UnregisteredKey => "the key is not registered",
            SealProblem::NotAKey => "not an ed25519 public key",
            SealProblem::BadSignature => "the signature does not verify",
        }
    }
}

/// Why a submitted job was refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum JobProblem {
    BadRequirements { position: usize, message: String },
    NoTasks,
    TooManyTasks { tasks: u64, max: u32 },
    ZeroSlotsPerTask,
    ZeroMaxAttempts,
    /// More attempts per task than a task may be given.
    TooManyAttempts { max_attempts: u32, max: u32 },
    /// An expression of a condition (discriminator or affinity), of the job or of one task.
    BadCondition { task: Option<u32>, field: String, position: usize, message: String },
    /// A dependency names a job or task the grid does not know.
    UnknownDependency { dependency: String },
    /// Task dependencies inside the job form a cycle through this task.
    DependencyCycle { task: u32 },
    /// Task affinity names a task that is not an earlier task of the same job.
    BadTaskAffinity { task: u32, target: u32 },
    BadLibrary { detail: String },
    /// Conditions given for a task index the job does not have.
    ConditionsForUnknownTask { task: u32 },
    /// A task dependency on a task of a retired job that did not end done: the
    /// state keeps only the job's outcome, not how each of its tasks ended.
    RetiredDependency { dependency: String, status: String },
    /// More slots per task than a task may ask for.
    TooManySlots { slots: u32, max: u32 },
    /// The family in force refuses it (its problems are defined in the
    /// family's folder).
    Family(FamilyJobProblem),
    /// A companion command beyond its limits, or given to a job whose span is
    /// not `site` (it would have no companion engine to run on).
    BadCompanionCommand { detail: String },
    /// An owner that is not a user name (1 to 64 of `[A-Za-z0-9_-]`, as the
    /// user's subject token is): at most 64 bytes of it are kept. Added last.
    BadOwner { owner: String, detail: String },
}

/// Why an order read back from the log did not apply: the world moved between the
/// decision and its fold (an engine left, the job was cancelled), or the order is wrong.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum OrderProblem {
    UnknownJob,
    UnknownTask,
    UnknownEngine,
    EngineNotLoggedIn,
    TaskNotWaiting,
    WrongAttemptNumber { expected: Attempt },
    NotEnoughFreeSlots { free: u32, needed: u32 },
    AttemptNotLive,
    JobNotEnded,
    /// A job flagged unschedulable that an engine could run by the time the flag was read back.
    JobIsSchedulable,
    /// A dispatch to an engine that does not hold the job's root library.
    LibraryNotSynced,
    /// An order decided for a login epoch of the engine that has since ended
    /// (it logged in again between the decision and this fold).
    EpochClosed { epoch: u64, current: u64 },
    /// A dispatch to an engine whose properties (as of its latest login) do not
    /// satisfy the task's requirements and discriminator.
    EngineNotEligible,
    /// A dispatch to an engine blacklisted for the job.
    EngineBlacklisted,
    /// A blacklisting the job did not ask for (blacklisting off, too few failures, already on the list).
    NotBlacklistable,
    /// A reschedule of a task that is not running, whose job does not reschedule,
    /// or that already has a copy waiting or its most copies alive.
    NoCopyWanted,
    /// A copy dispatched to an engine already running the task.
    EngineRunsTask,
    /// A dependent failed whose dependency had not failed, or that is not waiting.
    DependencyNotFailed,
    /// A library sync ordered of an engine that holds it or is syncing something.
    SyncNotNeeded,
    /// A Suspend, Resume or Preempt that no operator's request awaits (nor Techila's preemption rule, nor the suspend-threshold rule re-checked at fold time).
    NotRequested,
    /// A `DispatchParallel` whose parts do not describe a parallel task the
    /// job may run (see [`PartsProblem`]), or a `Dispatch` of a site-spanning job.
    BadParts { problem: PartsProblem },
    /// A family's own order that does not apply (its problems are defined in
    /// the family's folder).
    Family(FamilyOrderProblem),
    /// A `FloodRatio` with flood control off, of an engine that is not a
    /// gateway, or of a ratio outside 1..=`flood::RATIO_MAX_MILLI_MAX`.
    FloodRatioRefused,
}

/// What is wrong with the parts of a `DispatchParallel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PartsProblem {
    /// The job's span is `engine`, or a plain `Dispatch` names a `site` job.
    SpanMismatch,
    /// No parts, or more than `PARALLEL_PARTS_MAX`.
    PartCount,
    /// A part of 0 slots.
    ZeroSlots,
    /// Two parts name one engine.
    DuplicateEngine,
    /// The parts' slots do not add up to the task's.
    SlotsDoNotAddUp,
    /// The parts' engines do not share one `site` (or have none).
    DifferentSites,
    /// The order's engine is not one of its parts, or its epoch is not its part's.
    NotAPart,
    /// A companion's order whose attempt was not booked with these parts.
    NotBooked,
}

impl PartsProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            PartsProblem::SpanMismatch => "span-mismatch",
            PartsProblem::PartCount => "part-count",
            PartsProblem::ZeroSlots => "zero-slots",
            PartsProblem::DuplicateEngine => "duplicate-engine",
            PartsProblem::SlotsDoNotAddUp => "slots-do-not-add-up",
            PartsProblem::DifferentSites => "different-sites",
            PartsProblem::NotAPart => "not-a-part",
            PartsProblem::NotBooked => "not-booked",
        }
    }
}

impl fmt::Display for OrderProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OrderProblem::WrongAttemptNumber { expected } => write!(f, "wrong-attempt-number (expected {expected})"),
            OrderProblem::NotEnoughFreeSlots { free, needed } => {
                write!(f, "not-enough-free-slots ({free} free, {needed} needed)")
            }
            OrderProblem::EpochClosed { epoch, current } => write!(f, "epoch-closed (epoch {epoch}, now {current})"),
            OrderProblem::BadParts { problem } => write!(f, "bad-parts ({})", problem.as_str()),
            other => f.write_str(other.kind_name()),
        }
    }
}

impl OrderProblem {
    /// A short stable name for counting problems by kind.
    pub fn kind_name(&self) -> &'static str {
        match self {
            OrderProblem::UnknownJob => "unknown-job",
            OrderProblem::UnknownTask => "unknown-task",
            OrderProblem::UnknownEngine => "unknown-engine",
            OrderProblem::EngineNotLoggedIn => "engine-not-logged-in",
            OrderProblem::TaskNotWaiting => "task-not-waiting",
            OrderProblem::WrongAttemptNumber { .. } => "wrong-attempt-number",
            OrderProblem::NotEnoughFreeSlots { .. } => "not-enough-free-slots",
            OrderProblem::AttemptNotLive => "attempt-not-live",
            OrderProblem::JobNotEnded => "job-not-ended",
            OrderProblem::JobIsSchedulable => "job-is-schedulable",
            OrderProblem::LibraryNotSynced => "library-not-synced",
            OrderProblem::EpochClosed { .. } => "epoch-closed",
            OrderProblem::EngineNotEligible => "engine-not-eligible",
            OrderProblem::EngineBlacklisted => "engine-blacklisted",
            OrderProblem::NotBlacklistable => "not-blacklistable",
            OrderProblem::NoCopyWanted => "no-copy-wanted",
            OrderProblem::EngineRunsTask => "engine-runs-task",
            OrderProblem::DependencyNotFailed => "dependency-not-failed",
            OrderProblem::SyncNotNeeded => "sync-not-needed",
            OrderProblem::NotRequested => "not-requested",
            OrderProblem::BadParts { .. } => "bad-parts",
            OrderProblem::Family(problem) => problem.kind_name(),
            OrderProblem::FloodRatioRefused => "flood-ratio-refused",
        }
    }
}

impl Rejection {
    /// The job a refused write aimed at, when the rejection is about one
    /// (someone's act on a job, not an engine's report or an order).
    pub fn job(&self) -> Option<&JobId> {
        match self {
            Rejection::NotOwner { job, .. }
            | Rejection::PriorityAboveDefault { job, .. }
            | Rejection::JobAlreadyEnded { job } => Some(job),
            Rejection::ControlRefused { target, .. } => Some(&target.job),
            _ => None,
        }
    }

    /// A short stable name for counting rejections by kind.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Rejection::Undecodable { .. } => "undecodable",
            Rejection::ForgedEngine { .. } => "forged-engine",
            Rejection::WrongPublisher { .. } => "wrong-publisher",
            Rejection::DuplicateJob { .. } => "duplicate-job",
            Rejection::InvalidJob { .. } => "invalid-job",
            Rejection::UnknownJob { .. } => "unknown-job",
            Rejection::JobAlreadyEnded { .. } => "job-already-ended",
            Rejection::UnknownEngine { .. } => "unknown-engine",
            Rejection::EngineNotLoggedIn { .. } => "engine-not-logged-in",
            Rejection::InvalidEngine { .. } => "invalid-engine",
            Rejection::UnknownTask { .. } => "unknown-task",
            Rejection::StaleAttempt { .. } => "stale-attempt",
            Rejection::WrongEngine { .. } => "wrong-engine",
            Rejection::DuplicateReport { .. } => "duplicate-report",
            Rejection::ResultTooLarge { .. } => "result-too-large",
            Rejection::ErrorTailTooLarge { .. } => "error-tail-too-large",
            Rejection::OrderNotApplicable { .. } => "order-not-applicable",
            Rejection::BatchTooLarge { .. } => "batch-too-large",
            Rejection::InvalidPolicy { .. } => "invalid-policy",
            Rejection::UnsealedBatch => "unsealed-batch",
            Rejection::BadSeal { .. } => "bad-seal",
            Rejection::InvalidKey { .. } => "invalid-key",
            Rejection::UnknownKey { .. } => "unknown-key",
            Rejection::EpochClosed { .. } => "epoch-closed",
            Rejection::InvalidLibrary { .. } => "invalid-library",
            Rejection::ControlRefused { .. } => "control-refused",
            Rejection::OpsRefused { problem, .. } => problem.as_str(),
            Rejection::InvalidReportBatch { .. } => "invalid-report-batch",
            Rejection::WrongSubject { .. } => "wrong-subject",
            Rejection::NotOwner { .. } => "not-owner",
            Rejection::PriorityAboveDefault { .. } => "priority-above-default",
            Rejection::OverCap { .. } => "over-cap",
            Rejection::RunOrderTooLarge { .. } => "run-order-too-large",
        }
    }
}

/// The orders of a batch folded with `rejections` that did not apply, sorted
/// (so that each order's check is a binary search: a batch holds up to
/// `ORDERS_PER_BATCH_MAX` orders, and may have as many rejected); `None` when
/// the batch was refused whole (unsealed, badly sealed, too large, not the
/// projector's) and applied nothing.
pub fn orders_not_applied(rejections: &[Rejection]) -> Option<Vec<u32>> {
    let mut rejected = Vec::new();
    for rejection in rejections {
        match rejection {
            Rejection::OrderNotApplicable { order, .. } => rejected.push(*order),
            _ => return None,
        }
    }
    rejected.sort_unstable();
    Some(rejected)
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::Undecodable { detail } => write!(f, "payload does not decode: {detail}"),
            Rejection::ForgedEngine { subject_engine: Some(s), payload_engine } => {
                write!(f, "engine {s} published an event naming engine {payload_engine}")
            }
            Rejection::ForgedEngine { subject_engine: None, payload_engine } => {
                write!(f, "an event naming engine {payload_engine} arrived on a non-engine subject")
            }
            Rejection::WrongPublisher { event } => write!(f, "{event} arrived on a subject it may not use"),
            Rejection::DuplicateJob { job } => write!(f, "job {job} was already submitted"),
            Rejection::InvalidJob { job, problem } => write!(f, "job {job} refused: {problem}"),
            Rejection::UnknownJob { job } => write!(f, "no job {job}"),
            Rejection::JobAlreadyEnded { job } => write!(f, "job {job} has already ended"),
            Rejection::UnknownEngine { engine } => write!(f, "no engine {engine}"),
            Rejection::EngineNotLoggedIn { engine } => write!(f, "engine {engine} is not logged in"),
            Rejection::InvalidEngine { engine, problem } => write!(f, "engine {engine} refused: {problem}"),
            Rejection::UnknownTask { task } => write!(f, "no task {task}"),
            Rejection::StaleAttempt { task, attempt } => {
                write!(f, "attempt {attempt} of {task} is not live")
            }
            Rejection::WrongEngine { task, attempt, engine } => {
                write!(f, "attempt {attempt} of {task} was not given to engine {engine}")
            }
            Rejection::DuplicateReport { task, attempt } => {
                write!(f, "attempt {attempt} of {task} was already reported so")
            }
            Rejection::ResultTooLarge { task, bytes, max } => {
                write!(f, "result of {task} has {bytes} bytes, more than {max}")
            }
            Rejection::ErrorTailTooLarge { task, bytes, max } => {
                write!(f, "error tail of {task} has {bytes} bytes, more than {max}")
            }
            Rejection::OrderNotApplicable { order, problem } => {
                write!(f, "order {order} of the batch does not apply: {problem}")
            }
            Rejection::BatchTooLarge { orders, max } => {
                write!(f, "batch of {orders} orders, more than {max}")
            }
            Rejection::InvalidPolicy { problem } => write!(f, "policy refused: {problem}"),
            Rejection::UnsealedBatch => f.write_str("order batch without the projector's seal"),
            Rejection::BadSeal { signer, problem } => {
                write!(f, "order batch sealed by key {signer} refused: {}", problem.as_str())
            }
            Rejection::InvalidKey { key, problem } => write!(f, "projector key {key} refused: {problem}"),
            Rejection::UnknownKey { key } => write!(f, "projector key {key} is not registered"),
            Rejection::EpochClosed { task, attempt, engine } => {
                write!(f, "attempt {attempt} of {task} belongs to an earlier login of engine {engine}")
            }
            Rejection::InvalidLibrary { library, problem } => write!(f, "library {library}: {problem}"),
            Rejection::ControlRefused { target, action, problem } => {
                write!(f, "{} {target} refused: {}", action.as_str(), problem.as_str())
            }
            Rejection::OpsRefused { target, problem } => write!(f, "{target} {problem}"),
            Rejection::InvalidReportBatch { report, problem } => write!(f, "report {report} of the batch refused: {problem}"),
            Rejection::WrongSubject { event, subject } => write!(f, "{event} stored on {subject}, which is not its subject"),
            Rejection::NotOwner { job, owner, user } if owner.is_empty() => {
                write!(f, "user {user} may not act on job {job}: it has no owner, so only an operator may")
            }
            Rejection::NotOwner { job, owner, user } => {
                write!(f, "user {user} may not act on job {job}, which user {owner} owns: only its owner or an operator may")
            }
            Rejection::PriorityAboveDefault { job, setting: PrioritySetting::Priority, asked, default } => write!(
                f,
                "job {job}: a user may set a priority up to the default {default}, not {asked}; only an operator may raise it above"
            ),
            Rejection::PriorityAboveDefault { job, setting: PrioritySetting::Family(setting), asked, default } => write!(
                f,
                "job {job}: a user may set {}, not {asked}; only an operator may raise it above",
                setting.allowed_words(*default)
            ),
            Rejection::OverCap { job, cap, user, held, adding, limit } => {
                let who = if cap.per_user() { format!("user {user:?}") } else { "the grid".to_string() };
                write!(
                    f,
                    "job {job} refused: {who} holds {held} {}, and {adding} more would pass {} = {limit}",
                    cap.counts(),
                    cap.as_str()
                )
            }
            Rejection::RunOrderTooLarge { job, bytes, max } => write!(
                f,
                "job {job} refused: its largest run order could be {bytes} bytes, more than {max}: no engine could be sent it"
            ),
        }
    }
}

impl fmt::Display for JobProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobProblem::BadRequirements { position, message } => {
                write!(f, "requirements, at byte {position}: {message}")
            }
            JobProblem::NoTasks => f.write_str("it has no tasks"),
            JobProblem::TooManyTasks { tasks, max } => write!(f, "{tasks} tasks, more than {max}"),
            JobProblem::ZeroSlotsPerTask => f.write_str("slots_per_task must be at least 1"),
            JobProblem::TooManySlots { slots, max } => write!(f, "{slots} slots per task, more than {max}"),
            JobProblem::Family(problem) => problem.fmt(f),
            JobProblem::ZeroMaxAttempts => f.write_str("max_attempts must be at least 1"),
            JobProblem::TooManyAttempts { max_attempts, max } => {
                write!(f, "max_attempts is {max_attempts}; at most {max} are allowed")
            }
            JobProblem::BadCondition { task: Some(task), field, position, message } => {
                write!(f, "task {task}'s {field}, at byte {position}: {message}")
            }
            JobProblem::BadCondition { task: None, field, position, message } => {
                write!(f, "{field}, at byte {position}: {message}")
            }
            JobProblem::UnknownDependency { dependency } => write!(f, "it depends on {dependency}, which the grid does not know"),
            JobProblem::DependencyCycle { task } => write!(f, "the dependencies of task {task} form a cycle"),
            JobProblem::BadTaskAffinity { task, target } => {
                write!(f, "task {task} has affinity to task {target}, which is not an earlier task of the job")
            }
            JobProblem::BadLibrary { detail } => write!(f, "root library: {detail}"),
            JobProblem::BadCompanionCommand { detail } => write!(f, "companion command: {detail}"),
            JobProblem::ConditionsForUnknownTask { task } => write!(f, "conditions for task {task}, which the job does not have"),
            JobProblem::BadOwner { owner, detail } => write!(f, "owner {owner:?} is not a user name: {detail}"),
            JobProblem::RetiredDependency { dependency, status } => write!(
                f,
                "it depends on task {dependency}, whose job ended {status} and was retired from the state: how its tasks ended is no longer kept"
            ),
        }
    }
}

/// A rejection as the state keeps it: where it happened, who sent it and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rejected {
    pub seq: Seq,
    /// The log time of the rejected entry.
    pub time_ms: u64,
    /// The subject it was published on, which says who could publish it; at
    /// most [`REJECTED_TEXT_BYTES_MAX`] bytes.
    pub subject: String,
    /// The sender the envelope names (its `source`), as declared, not
    /// authenticated; empty when the entry did not decode. At most
    /// [`REJECTED_TEXT_BYTES_MAX`] bytes.
    pub source: String,
    pub rejection: Rejection,
}

/// The most bytes of a subject or a source a kept rejection holds, so the
/// recent rejections stay bounded whatever a client publishes.
pub const REJECTED_TEXT_BYTES_MAX: usize = 256;

/// `text` cut to at most `max` bytes, at a character boundary.
pub fn truncated(text: &str, max: usize) -> String {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}
