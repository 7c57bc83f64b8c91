//! A free engine of a run, as the dispatch loop and a resource-first
//! family's ordering see it (see `dispatch.rs`).

use crate::core::ids::EngineIdx;
use super::queue_sort::SortKey;

/// A free engine of the run.
pub(crate) struct Candidate {
    pub(crate) engine: EngineIdx,
    pub(crate) slots: u32,
    /// Slots in use, including what this run and the orders in flight booked.
    pub(crate) used: u32,
    /// Its queue sort key with `used` slots in use: computed when the run
    /// gathers it and again when a booking changes `used`, since evaluating the
    /// load formula and reading `seq_no` per comparison dominated large runs.
    pub(crate) key: SortKey,
}
