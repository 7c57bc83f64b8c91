//! Operators' suspensions and preemptions (Grid Engine's `qmod -sj`, `-usj`,
//! `-rj`): each request the fold recorded against a live attempt is answered
//! with its order (`Suspend`, `Resume` or `Preempt`), which takes effect when
//! the fold reads it back (see `state/suspension.rs`).
//!
//! Skipped, to be answered by a later run or not at all: attempts an order in
//! flight already controls or ends, attempts an earlier stage of this run ends
//! (a requeue or cancel wins over a preemption), attempts on engines being
//! lost, and attempts of ended jobs (their Cancel comes instead).

use std::collections::BTreeSet;

use super::budget::Orders;
use super::in_flight::InFlight;
use crate::core::event::Order;
use crate::core::state::{Control, EngineIdx, State};

/// Most suspend, resume and preempt orders in one run; the rest wait for the next.
pub const CONTROL_ORDERS_PER_RUN_MAX: usize = 1_024;

/// One order per requested attempt, at most [`CONTROL_ORDERS_PER_RUN_MAX`], in
/// (task, attempt) order.
pub fn answer_control_requests(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    let mut n_ordered = 0;
    for (key, attempt, control) in state.control_requests() {
        if n_ordered == CONTROL_ORDERS_PER_RUN_MAX {
            break;
        }
        let live = state.live_attempt_numbered(key, attempt).expect("controls are requested of live attempts");
        if !state.job(key.job).is_active()
            || in_flight.is_controlled(key, attempt)
            || in_flight.is_ending(key, attempt)
            || in_flight.is_lost(live.engine)
            || lost.contains(&live.engine)
        {
            continue;
        }
        let task = state.task_ref(key);
        if orders.ends(&task, attempt) {
            continue;
        }
        let engine = state.engine(live.engine).id.clone();
        let order = match control {
            Control::Suspend => Order::Suspend { task, attempt, engine },
            Control::Resume => Order::Resume { task, attempt, engine },
            Control::Preempt => Order::Preempt { task, attempt, engine },
        };
        if !orders.push(order) {
            break;
        }
        n_ordered += 1;
    }
}
