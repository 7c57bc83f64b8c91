//! Techila's folded figures of one job (`Job::families`): the project its
//! latest preempted task gave way to, and its expired tasks. Only the fold
//! changes them (a `Preempt` under Techila's own rule, an expiry's
//! `Reschedule`, read back); `schedule` and `why` only read them.

use std::collections::BTreeMap;

use crate::core::ids::Seq;

/// Techila's figures of one job.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TechilaJob {
    /// The project the job's latest preempted task gave way to.
    pub preempted_by: Option<crate::core::ids::JobId>,
    /// The tasks that ran past `expected_task_time_ms` and were given their
    /// one copy, by index (see [`super::expiry`]).
    pub expired: BTreeMap<u32, ExpiredTask>,
}

/// A Techila task marked expired: how long it had run, against what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ExpiredTask {
    pub elapsed_ms: u64,
    pub expected_ms: u64,
    /// The log time the copy was ordered.
    pub at_ms: u64,
}

/// Where the cycles stand, as folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct CycleState {
    /// The entry that opened the latest cycle.
    pub opened_seq: Seq,
    /// Its log time: the next interval counts from it.
    pub opened_ms: u64,
    /// The newest `based_on_seq` of a folded batch: cycles opened at or before it ran.
    pub closed_seq: Seq,
}
