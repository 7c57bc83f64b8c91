//! Layer 2, decision making: `schedule(&State, &InFlight) -> Vec<Order>`.
//!
//! A run is a fixed sequence of small stages, each in its own module:
//! 1. [`lifecycle`]: engines silent past `engine_timeout` are declared lost;
//!    attempts of an engine's earlier login epoch are requeued (`EngineRestarted`);
//!    dispatches not started within `dispatch_timeout` are requeued; live attempts
//!    of ended jobs (and redundant copies a job cancels at once) are cancelled.
//!    [`suspension`]: operators' requests to suspend, resume or reschedule live
//!    attempts are answered with `Suspend`, `Resume` and `Preempt` orders;
//!    [`thresholds`]: Grid Engine's suspend thresholds suspend and resume
//!    tasks on engines whose load values cross them.
//! 2. [`dependencies`]: jobs and tasks whose dependency failed fail with it, when
//!    they asked to.
//! 3. [`blacklist`]: engines that reached a job's failure count are blacklisted for it.
//! 4. [`redundancy`]: long-running tasks of jobs that ask for it get a redundant copy.
//! 5. [`libraries`]: idle engines that could run a waiting job but lack its root
//!    library are ordered to sync it.
//! 6. [`dispatch`]: waiting tasks (and copies) are matched to engines. *Ordering*
//!    picks the job (priority, then submission order: Grid Engine's SGE mode) and
//!    the task (queue jumps first); *filters* ([`filters`]) say whether an engine
//!    may take it, each with a reason (requirements, discriminator, library,
//!    blacklist, ...); *ranking* orders the engines that may: tier, then the
//!    job's [`soft`] request (met first), then score
//!    (affinity, task affinity, greylisting), then [`queue_sort`] (Grid
//!    Engine's `queue_sort_method` over the load formula and `seq_no`), then
//!    engine id.
//!    [`parallel`]: a task of span `site` is booked over several engines of one
//!    site at once (Grid Engine's `$fill_up`), one `DispatchParallel` per engine;
//!    an attempt whose companion engine is gone is requeued (`part-lost`).
//! 7. [`lifecycle::unschedulable`]: jobs no logged-in engine could ever run are
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

pub mod blacklist;
pub mod budget;
pub mod candidate;
pub mod dependencies;
pub mod dispatch;
pub mod flood;
pub mod filters;
pub mod in_flight;
pub mod libraries;
pub mod parallel;
pub mod queue_sort;
pub mod redundancy;
pub mod reservation;
pub mod reservation_why;
pub mod soft;
pub mod suspension;
pub mod thresholds;
pub mod unfit;

#[cfg(test)]
mod busy_grid_tests;
#[cfg(test)]
mod gridserver_tests;
#[cfg(test)]
mod parallel_tests;
#[cfg(test)]
mod queue_sort_tests;
#[cfg(test)]
mod reservation_tests;
#[cfg(test)]
mod retire_tests;
#[cfg(test)]
mod soft_tests;
#[cfg(test)]
mod thresholds_tests;
pub mod lifecycle;

pub use budget::Orders;
pub use in_flight::InFlight;

use super::event::{Order, OrderBatch};
use super::family as families;
use super::state::State;

/// Bumped whenever a change alters decisions; recorded in every batch so an
/// auditor knows which code made it (`replay --verify` re-derives only batches of
/// this version). 3: the chain digest over stored bytes, epochs, one order budget.
/// 4: ended jobs retire; a job's walk past 10,000 held tasks goes on over its
/// fresh ones; an attempt is ended by one order per run.
/// 5: Techila's tickets are a fixed numerator over a project's own ranking
/// (not the sum of the entrants' rankings), its creation rank counts the run's
/// projects, and the draw takes the entrants in class order (Techila's tickets module).
/// 6: a `span = "site"` task no site's logged-in engines could hold is flagged
/// unschedulable (`no-site-has-enough-slots`, `lifecycle::unschedulable`).
pub const ALGORITHM_VERSION: u32 = 6;

/// The next orders, given the state folded so far and the orders in flight.
/// Every stage is capped, and all draw from one [`Orders`] budget, so the batch
/// fits the broker whatever the ids' lengths.
pub fn schedule(state: &State, in_flight: &InFlight) -> Vec<Order> {
    let mut orders = Orders::new();
    let lost = lifecycle::lose_silent_engines(state, in_flight, &mut orders);
    lifecycle::requeue_closed_epochs(state, in_flight, &lost, &mut orders);
    parallel::requeue_broken(state, in_flight, &lost, &mut orders);
    lifecycle::requeue_unstarted(state, in_flight, &lost, &mut orders);
    lifecycle::cancel_ended_jobs(state, in_flight, &lost, &mut orders);
    suspension::answer_control_requests(state, in_flight, &lost, &mut orders);
    thresholds::apply_suspend_thresholds(state, in_flight, &lost, &mut orders);
    dependencies::fail_dependents(state, in_flight, &mut orders);
    blacklist::blacklist_failing_engines(state, in_flight, &mut orders);
    redundancy::reschedule_long_tasks(state, in_flight, &lost, &mut orders);
    libraries::sync_missing_libraries(state, in_flight, &lost, &mut orders);
    families::lifecycle(state, in_flight, &mut orders);
    flood::control(state, in_flight, &mut orders);
    dispatch::fill_free_slots(state, in_flight, &lost, &mut orders);
    lifecycle::unschedulable(state, in_flight, &mut orders);
    orders.into_vec()
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
pub(crate) mod tests;
