//! Parallel tasks' companion bookings, as the state holds them (see `parallel.rs`).

use crate::core::ids::{Attempt, EngineIdx, TaskKey};
use std::collections::{BTreeMap, BTreeSet};

/// One engine's part of a parallel attempt, as booked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BookedPart {
    pub engine: EngineIdx,
    /// The engine's login epoch when the part was booked.
    pub epoch: u64,
    pub slots: u32,
}

/// A parallel attempt of a job that names a companion command ended (however:
/// completed, failed, cancelled, requeued, preempted, its engine lost): each
/// companion engine is to stop that command. What the fold reports of the
/// entry that ended it; never stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompanionEnd {
    pub key: TaskKey,
    pub attempt: Attempt,
    /// The companion parts' engines, in part order.
    pub companions: Vec<EngineIdx>,
}

/// The parallel attempts live now, with their parts (the master first).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ParallelBookings {
    pub(crate) parts: BTreeMap<(TaskKey, Attempt), Vec<BookedPart>>,
    /// Attempts a companion of which lost its engine, awaiting their Requeue.
    pub(crate) broken: BTreeSet<(TaskKey, Attempt)>,
}

impl ParallelBookings {
    pub fn is_empty(&self) -> bool {
        self.parts.is_empty() && self.broken.is_empty()
    }

    /// The parts of a live parallel attempt, the master first.
    pub fn parts_of(&self, key: TaskKey, attempt: Attempt) -> Option<&[BookedPart]> {
        self.parts.get(&(key, attempt)).map(Vec::as_slice)
    }

    /// The attempts awaiting a Requeue because a companion's engine is gone.
    pub fn broken(&self) -> impl Iterator<Item = (TaskKey, Attempt)> + '_ {
        self.broken.iter().copied()
    }

    /// Every live parallel attempt with its parts.
    pub fn all(&self) -> impl Iterator<Item = (TaskKey, Attempt, &[BookedPart])> + '_ {
        self.parts.iter().map(|(&(key, attempt), parts)| (key, attempt, parts.as_slice()))
    }
}
