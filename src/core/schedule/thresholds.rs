//! Grid Engine's suspend thresholds (queue_conf(5) `suspend_thresholds`,
//! `suspend_interval`, `nsuspend`), for every engine: while one of an engine's
//! reported load values is above its threshold, each interval of log time its
//! `nsuspend` lowest-priority running tasks are suspended (`Suspend`); once no
//! threshold is exceeded, as many tasks the rule suspended are resumed
//! (`Resume`) per interval, highest priority first, as Grid Engine enables
//! them "in the corresponding way". Suspended tasks keep their slots.
//!
//! The orders are the operators' `Suspend` and `Resume`; the fold accepts one
//! no operator requested only when this rule, re-checked on the folded state,
//! justifies it (`State::threshold_justifies`): the engine's interval allows
//! one more, its load (as last folded) is above (or, to resume, below) a
//! threshold, and the attempt is the one the rule picks next. An operator's
//! suspension is never resumed by the rule, and the rule never suspends what an
//! operator has a request pending for.
//!
//! The thresholds apply to every engine (gridfold has no queues); a load value
//! an engine never reports never exceeds its threshold. Cost: a run with
//! thresholds set looks at every logged-in engine's last load (O(engines)),
//! and at the attempts of those over or with suspended tasks; without
//! thresholds it costs nothing.

use std::collections::BTreeSet;

use super::budget::Orders;
use super::in_flight::InFlight;
use crate::core::event::Order;
use crate::core::ids::Attempt;
use crate::core::state::{EngineIdx, EngineStatus, State, TaskKey};

/// Most threshold orders one run may give; the rest wait for the next run.
pub const THRESHOLD_ORDERS_PER_RUN_MAX: usize = 1_024;

/// Suspends and resumes by the thresholds, engine by engine in index order.
pub fn apply_suspend_thresholds(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    if state.policy.suspend_thresholds.thresholds.is_empty() {
        return;
    }
    let mut n_ordered = 0;
    for (at, engine) in state.engines().iter().enumerate() {
        let e = EngineIdx(at as u32);
        if engine.status != EngineStatus::LoggedIn || engine.live == 0 || lost.contains(&e) || in_flight.is_lost(e) {
            continue;
        }
        let allowance = state.threshold_allowance(e) as usize;
        if allowance == 0 {
            continue;
        }
        let (candidates, suspend) = match state.threshold_exceeded(e) {
            Some(_) => (state.threshold_suspend_candidates(e), true),
            None => (state.threshold_resume_candidates(e), false),
        };
        // The fold accepts them only in the order the rule picks them: stop
        // at the first one something else is already acting on.
        for (key, attempt) in candidates.into_iter().take(allowance) {
            if n_ordered == THRESHOLD_ORDERS_PER_RUN_MAX || is_busy(state, in_flight, orders, key, attempt) {
                break;
            }
            let task = state.task_ref(key);
            let engine = engine.id.clone();
            let order = if suspend { Order::Suspend { task, attempt, engine } } else { Order::Resume { task, attempt, engine } };
            if !orders.push(order) {
                return;
            }
            n_ordered += 1;
        }
    }
}

/// Whether an order in flight or of this run already controls or ends the attempt.
fn is_busy(state: &State, in_flight: &InFlight, orders: &Orders, key: TaskKey, attempt: Attempt) -> bool {
    in_flight.is_controlled(key, attempt) || in_flight.is_ending(key, attempt) || orders.ends(&state.task_ref(key), attempt)
}
