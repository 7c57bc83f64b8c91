//! Engine blacklisting, the lifecycle half: once an engine has failed a job's
//! tasks as often as the job's `failures_before_blacklist`, it is blacklisted for
//! that job — for that job only; other jobs keep using it. The fold counts the
//! failures (any task failure the engine reports; a logout or loss is not one) and
//! marks the pair pending; this stage turns each pending pair into an order, so
//! the log says when and why. Dispatch already treats a pending pair as
//! blacklisted, so no task slips through between the failure and the order.
//!
//! Greylisting needs no order: it is a score (see `dispatch::job_score`).

use super::budget::Orders;
use super::in_flight::InFlight;

/// Most Blacklist orders in one run.
pub const BLACKLISTS_PER_RUN_MAX: usize = 1_024;
use crate::core::event::Order;
use crate::core::state::State;

pub fn blacklist_failing_engines(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    let mut n_ordered = 0;
    for (j, e) in state.pending_blacklists() {
        if in_flight.is_blacklisted(j, e) {
            continue;
        }
        let job = state.job(j);
        let order = Order::Blacklist {
            job: job.id.clone(),
            engine: state.engine(e).id.clone(),
            failures: job.failures_by_engine.get(&e).copied().unwrap_or(0),
        };
        if n_ordered == BLACKLISTS_PER_RUN_MAX || !orders.push(order) {
            return;
        }
        n_ordered += 1;
    }
}
