//! Checks that read the state for both the fold and `schedule`: whether an
//! engine may take an order's slots now (the fold's check of a `Dispatch`
//! read back, which a `DispatchParallel`'s parts re-apply), and whether a
//! task's dependencies have ended. Below both, so neither names the other.

use crate::core::ids::{EngineIdx, TaskKey};
use crate::core::reject::OrderProblem;
use super::engine::EngineStatus;
use super::store::State;

/// The engine is logged in, in the epoch the order was decided for.
pub(crate) fn check_engine_state(state: &State, e: EngineIdx, epoch: u64) -> Result<(), OrderProblem> {
    let engine = state.engine(e);
    if engine.status != EngineStatus::LoggedIn {
        return Err(OrderProblem::EngineNotLoggedIn);
    }
    if engine.epoch != epoch {
        return Err(OrderProblem::EpochClosed { epoch, current: engine.epoch });
    }
    Ok(())
}

/// The engine may take `needed` slots of the task now: free slots, library,
/// eligibility for the task's category, blacklist.
pub(crate) fn check_engine_takes(state: &State, key: TaskKey, e: EngineIdx, needed: u32) -> Result<(), OrderProblem> {
    let engine = state.engine(e);
    let job = state.job(key.job);
    if engine.free_slots() < needed {
        return Err(OrderProblem::NotEnoughFreeSlots { free: engine.free_slots(), needed });
    }
    if job.options.root_library.as_ref().is_some_and(|library| !engine.holds(library)) {
        return Err(OrderProblem::LibraryNotSynced);
    }
    // The engine may have logged in again with other properties between
    // the decision and this fold: the task's category decides, as it did.
    let category = job.condition(key.index).and_then(|condition| condition.category).unwrap_or(job.category);
    if !state.category(category).is_eligible(e) {
        return Err(OrderProblem::EngineNotEligible);
    }
    if job.blacklist.contains(&e) {
        return Err(OrderProblem::EngineBlacklisted);
    }
    Ok(())
}

/// A task rule, not an engine rule: the tasks it depends on must have ended.
/// Returns the first that has not.
pub fn dependencies_ended(state: &State, key: TaskKey) -> Result<(), TaskKey> {
    let Some(condition) = state.job(key.job).condition(key.index) else { return Ok(()) };
    match condition.depends_on.iter().find(|&&dependency| !state.task_has_ended(dependency)) {
        Some(&pending) => Err(pending),
        None => Ok(()),
    }
}
