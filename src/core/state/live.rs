//! Live attempts (dispatched or running), as the state books them, and a
//! task's first result.

use crate::core::ids::{Attempt, EngineIdx};

/// A task's first result, as [`State::complete`] returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstResult {
    /// The engine whose attempt succeeded.
    pub engine: EngineIdx,
    /// When that attempt started (or, with no start report, was dispatched).
    pub started_ms: u64,
}

/// A dispatched or running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LiveAttempt {
    pub attempt: Attempt,
    pub engine: EngineIdx,
    /// The engine's login epoch it was dispatched in.
    pub epoch: u64,
    pub dispatched_ms: u64,
    pub started_ms: Option<u64>,
}
