//! Orders: the projector's decisions (imperative), published in sealed
//! batches and folded when read back, and the reasons they carry.

use crate::core::ids::{Attempt, EngineId, Epoch, JobId, Seq, TaskRef};
use super::job::{LibraryRef, ParallelPart};
use super::policy::FloodReason;

/// Most orders in one published batch, so a batch stays well under the broker's 1 MiB payload.
pub const ORDERS_PER_BATCH_MAX: usize = 8_192;

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
    /// The engine that must hear of this order, if any: the one place that
    /// says so, which the projector's deliveries follow. Every kind is listed,
    /// so a new one must say whom it goes to.
    pub fn addressee(&self) -> Option<&EngineId> {
        match self {
            Order::Dispatch { engine, .. }
            | Order::DispatchParallel { engine, .. }
            | Order::Cancel { engine, .. }
            | Order::Requeue { engine, .. }
            | Order::Suspend { engine, .. }
            | Order::Resume { engine, .. }
            | Order::Preempt { engine, .. }
            | Order::EngineLost { engine, .. }
            | Order::SyncLibrary { engine, .. } => Some(engine),
            // Decisions about jobs and tasks that only the fold acts on.
            Order::MarkUnschedulable { .. }
            | Order::Reschedule { .. }
            | Order::FailDependent { .. }
            | Order::EndTestCampaign { .. } => None,
            // They name an engine, but as the subject of the decision, not
            // as one that acts: the fold bars it for a job, caps its share,
            // or flags it a sink; the engine of an `Undeliverable` is the one
            // its delivery could not reach.
            Order::Blacklist { .. } | Order::FloodRatio { .. } | Order::FlagSink { .. } | Order::Undeliverable { .. } => None,
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
