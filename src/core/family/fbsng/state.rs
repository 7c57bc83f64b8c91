//! FBSNG's folded state (see [`crate::core::family::fbsng`]): each queue's
//! current priority and when the family last dispatched. A section's priority
//! is its job's [`FbsngJob::section_priority`].
//!
//! Data only. Changed only by the fold, through the hooks of `hooks.rs`, from
//! entries it reads: a `PolicySet` aligns
//! the priorities with the policy's queues (a queue kept by name keeps its
//! priority, clamped to its new bounds; a new one starts at its `qp_min`); a
//! section start read back (a `Dispatch`, or the master part of a
//! `DispatchParallel`) moves the queue priorities and raises the section
//! priority of every waiting job of the queue submitted before the one
//! started; a batch with a start records the log time of the run. So replay
//! reproduces every figure, and `schedule` only reads them.
//!
//! Only under `algorithm = "fbsng"`: under another family nothing here changes.


/// Where FBSNG's figures stand, as folded.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FbsngState {
    /// Each queue of the policy in force (its name, then its priority), in the
    /// policy's order; empty until an `fbsng` policy is folded.
    pub queue_priorities: Vec<(String, i64)>,
    /// Log time of the newest folded batch that started a section: the next
    /// run that dispatches waits `min_run_interval` from it.
    pub last_run_ms: u64,
    /// Sections started since the policy was set, for `stat`.
    pub n_started: u64,
}

impl FbsngState {
    /// The priority of queue `q` (its position in the policy's queues).
    pub fn priority(&self, q: usize) -> i64 {
        self.queue_priorities.get(q).map_or(0, |(_, priority)| *priority)
    }
}

/// FBSNG's figure of one job (`Job::families`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FbsngJob {
    /// The section priority of the job's waiting tasks: how many sections
    /// of its queue submitted after it started before it.
    pub section_priority: u32,
}
