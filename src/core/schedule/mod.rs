//! Layer 2, decision making: `schedule(&State, &InFlight) -> Vec<Order>`.
//!
//! A run is a fixed sequence of small stages, each in its own module:
//! 1. [`lifecycle`]: engines silent past `engine_timeout` are declared lost;
//!    dispatches not started within `dispatch_timeout` are requeued; live attempts
//!    of ended jobs are cancelled.
//! 2. [`dispatch`]: waiting tasks are matched to engines. *Ordering* picks the job
//!    (priority, then submission order: Grid Engine's SGE mode); *filters*
//!    ([`filters`]) say whether an engine may take it, each with a reason;
//!    *scores* rank the engines that may (lowest load index first, ties by engine id).
//! 3. [`lifecycle::unschedulable`]: jobs no logged-in engine could ever run are
//!    flagged, so their submitters hear it now rather than never.
//!
//! `schedule` reads only the state (the policy is a folded fact, `state.policy`)
//! and the orders already published but not read back ([`InFlight`]), so it never
//! books a slot twice. It is deterministic: the same inputs give the same orders,
//! which is what `gridfold replay --verify` checks batch by batch.
//!
//! Cost: a run touches the engines with free slots and the jobs it examines, not
//! the whole world: requirements are precomputed per category (a bitset over
//! engines), and each category examined in a run keeps a queue of its eligible free
//! engines by load, so a decision is O(log n) however narrow the category
//! ([`dispatch`] has the details).

pub mod dispatch;
pub mod filters;
mod in_flight;

#[cfg(test)]
mod busy_grid_tests;
pub mod lifecycle;

pub use in_flight::InFlight;

use super::event::{Order, OrderBatch};
use super::state::State;

/// Bumped whenever a change alters decisions; recorded in every batch so an
/// auditor knows which code made it.
pub const ALGORITHM_VERSION: u32 = 1;

/// The next orders, given the state folded so far and the orders in flight.
pub fn schedule(state: &State, in_flight: &InFlight) -> Vec<Order> {
    let mut orders = Vec::new();
    let lost = lifecycle::lose_silent_engines(state, in_flight, &mut orders);
    lifecycle::requeue_unstarted(state, in_flight, &lost, &mut orders);
    lifecycle::cancel_ended_jobs(state, in_flight, &lost, &mut orders);
    dispatch::fill_free_slots(state, in_flight, &lost, &mut orders);
    lifecycle::unschedulable(state, in_flight, &mut orders);
    orders
}

/// `schedule`, wrapped as the batch the projector publishes (`None` when there is nothing to do).
pub fn decide(state: &State, in_flight: &InFlight) -> Option<OrderBatch> {
    let orders = schedule(state, in_flight);
    (!orders.is_empty()).then(|| OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: state.policy.algorithm.name().to_string(),
        algorithm_version: ALGORITHM_VERSION,
        orders,
    })
}

#[cfg(test)]
mod tests;
