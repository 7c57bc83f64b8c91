//! Flood control of gateway engines (CiGri's job ratio and Nikita, seed 004).
//!
//! A gateway engine (one that logged in with the property `gateway`, see
//! `engine::gateway`) submits what it is given to a cluster's own resource
//! manager, whose free resources it cannot see exactly. So, under the policy's
//! `flood` settings, what it may hold dispatched and not yet started is capped:
//! at most `ratio_milli × slots / 1000` slots (and always one task), where
//! `slots` are its declared slots ("resources") and the ratio starts at
//! `ratio_start_milli` (one slot per task).
//!
//! - **The cap** ([`room`], [`filter`]): a capacity rule of dispatch. The run's
//!   candidates are cut to the room under the cap (`dispatch::Candidates`), and
//!   `why` names the rule (`flood-held`) through [`filter`], from the same
//!   [`held_slots`] count, so the two cannot disagree.
//! - **The ratio** ([`adjust_ratios`]): every `interval_ms` of log time per
//!   gateway, `waiting` = slots of its tasks unstarted for at least
//!   `waiting_grace_ms`; more than `waiting_allowed` is an excess, and the ratio
//!   goes down, otherwise up, as the algorithm says ([`next_ratio`]). Each change
//!   is a `FloodRatio` order on the log; the fold sets the ratio when it reads it
//!   back (`state::flood`), so replay re-derives it. A gateway's first ratio is a
//!   `FloodRatio` too (reason `start`).
//! - **Withdrawals** ([`withdraw_overdue`]): a gateway's task unstarted past
//!   `remote_queue_timeout_ms` is requeued (`Requeue`, reason `flood-withdrawn`):
//!   it waits again without using an attempt, and its gateway is told to stop
//!   it (it cancels the remote job).
//!
//! Integers throughout (thousandths); ties by engine index. Cost per run, with
//! flood control on: one walk of the unstarted attempts and one of the engines;
//! nothing at all with it off.

use std::collections::BTreeMap;

use super::unfit::Unfit;
use super::budget::Orders;
use super::in_flight::InFlight;
use crate::core::event::{FloodAlgorithm, FloodPolicy, FloodReason, Order, RequeueReason};
use crate::core::state::{Engine, EngineIdx, EngineStatus, State};

#[cfg(test)]
mod tests;

/// The custom property that makes an engine a gateway.
pub const GATEWAY_PROPERTY: &str = "gateway";
/// The highest `ratio_max_milli` a policy may set: a thousand tasks per slot.
pub const RATIO_MAX_MILLI_MAX: u32 = 1_000_000;
/// The longest `interval_ms`, `waiting_grace_ms` and `remote_queue_timeout_ms`: 7 days.
pub const DURATION_MS_MAX: u64 = 7 * 24 * 3_600_000;
/// Most `FloodRatio` and withdrawal orders one run decides, each.
pub const FLOOD_ORDERS_PER_RUN_MAX: usize = 256;

pub fn is_gateway(engine: &Engine) -> bool {
    engine.props.custom.contains_key(GATEWAY_PROPERTY)
}

/// The limits of a flood policy: `Err((field, problem))`.
pub fn check_policy(policy: &FloodPolicy) -> Result<(), (String, String)> {
    let duration = |field: &str, ms: u64, zero_ok: bool| {
        if (!zero_ok && ms == 0) || ms > DURATION_MS_MAX {
            let low = if zero_ok { 0 } else { 1 };
            Err((field.to_string(), format!("must be within {low}..={} s", DURATION_MS_MAX / 1000)))
        } else {
            Ok(())
        }
    };
    duration("interval_secs", policy.interval_ms, false)?;
    duration("waiting_grace_secs", policy.waiting_grace_ms, true)?;
    duration("remote_queue_timeout_secs", policy.remote_queue_timeout_ms, true)?;
    if !(1..=RATIO_MAX_MILLI_MAX).contains(&policy.ratio_max_milli) {
        return Err(("ratio_max".into(), format!("must be within 0.001..={}", RATIO_MAX_MILLI_MAX / 1000)));
    }
    if !(1..=policy.ratio_max_milli).contains(&policy.ratio_start_milli) {
        return Err(("ratio_start".into(), "must be above 0 and at most ratio_max".into()));
    }
    Ok(())
}

/// The gateway's ratio in force: the folded one, or the policy's start.
pub fn ratio_milli(state: &State, policy: &FloodPolicy, engine: &Engine) -> u32 {
    state.flood.ratio_of(&engine.id).map_or(policy.ratio_start_milli, |ratio| ratio.ratio_milli)
}

/// Slots a gateway may hold unstarted at `ratio_milli`: at least one.
pub fn allowed_slots(ratio_milli: u32, slots: u32) -> u32 {
    let allowed = u64::from(ratio_milli) * u64::from(slots) / 1000;
    allowed.clamp(1, u64::from(u32::MAX)) as u32
}

/// Per gateway engine with unstarted attempts: (slots held unstarted, of which
/// slots waiting past the grace). Empty with flood control off.
pub fn held_slots(state: &State) -> BTreeMap<EngineIdx, (u32, u32)> {
    let mut held = BTreeMap::new();
    let Some(policy) = &state.policy.flood else { return held };
    for &(dispatched_ms, key, attempt) in state.dispatched_by_age() {
        let Some(live) = state.live_attempt_numbered(key, attempt) else { continue };
        if !is_gateway(state.engine(live.engine)) {
            continue;
        }
        let slots = state.attempt_slots(key, attempt);
        let entry: &mut (u32, u32) = held.entry(live.engine).or_default();
        entry.0 += slots;
        if dispatched_ms.saturating_add(policy.waiting_grace_ms) <= state.now_ms {
            entry.1 += slots;
        }
    }
    held
}

/// The room a gateway has under its cap, in slots, with `held` slots unstarted
/// (in the state and in flight); `None` when flood control does not apply to it.
pub fn room(state: &State, e: EngineIdx, held: u32) -> Option<u32> {
    let policy = state.policy.flood.as_ref()?;
    let engine = state.engine(e);
    if !is_gateway(engine) {
        return None;
    }
    let allowed = allowed_slots(ratio_milli(state, policy, engine), engine.slots);
    Some(allowed.saturating_sub(held))
}

/// The rule `why` reports: a gateway whose unstarted tasks and this one would
/// pass its cap takes no more (the cap is at least one slot).
pub fn filter(state: &State, e: EngineIdx, needed: u32, booked_in_flight: u32) -> Result<(), Unfit> {
    let Some(policy) = &state.policy.flood else { return Ok(()) };
    let engine = state.engine(e);
    if !is_gateway(engine) {
        return Ok(());
    }
    let held = held_slots(state).get(&e).map_or(0, |&(held, _)| held) + booked_in_flight;
    let allowed = allowed_slots(ratio_milli(state, policy, engine), engine.slots);
    if held + needed > allowed { Err(Unfit::FloodHeld { held, allowed }) } else { Ok(()) }
}

/// What one adjustment sees of a gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// Its declared slots.
    pub slots: u32,
    /// Slots of its tasks running (started).
    pub running: u32,
    /// Slots of its tasks unstarted.
    pub held: u32,
    /// Of those, slots unstarted past the grace.
    pub waiting: u32,
}

/// The next ratio and why, or `None` when it stays.
pub fn next_ratio(policy: &FloodPolicy, ratio_milli: u32, seen: Observed) -> Option<(u32, FloodReason)> {
    let slots = u64::from(seen.slots.max(1));
    // One task: the lowest ratio that still allows one slot.
    let lowest = 1000u64.div_ceil(slots).max(1);
    let highest = u64::from(policy.ratio_max_milli).max(lowest);
    let ratio = u64::from(ratio_milli);
    let excess = seen.waiting.saturating_sub(policy.waiting_allowed);
    let (next, reason) = if excess > 0 {
        let held = u64::from(seen.held.max(seen.waiting).max(1));
        let next = match policy.algorithm {
            FloodAlgorithm::SlowStart => lowest,
            // The seed's (submitted - excess) / submitted.
            FloodAlgorithm::TwoWayAdaptive | FloodAlgorithm::AdaptiveDownExponentialUp => {
                ratio * (held - u64::from(excess).min(held)) / held
            }
        };
        (next, FloodReason::Down)
    } else {
        let next = match policy.algorithm {
            FloodAlgorithm::SlowStart | FloodAlgorithm::AdaptiveDownExponentialUp => ratio * 2,
            FloodAlgorithm::TwoWayAdaptive => {
                let idle = slots.saturating_sub(u64::from(seen.running) + u64::from(seen.held));
                ratio + ratio * idle / slots
            }
        };
        (next, FloodReason::Up)
    };
    let next = next.clamp(lowest, highest) as u32;
    (next != ratio_milli).then_some((next, reason))
}

/// Sets each gateway's first ratio, and moves the ratio of each whose interval
/// has passed since its last `FloodRatio`.
pub fn adjust_ratios(state: &State, in_flight: &InFlight, held: &BTreeMap<EngineIdx, (u32, u32)>, orders: &mut Orders) {
    let Some(policy) = &state.policy.flood else { return };
    let mut n = 0;
    for (i, engine) in state.engines().iter().enumerate() {
        if n == FLOOD_ORDERS_PER_RUN_MAX {
            break;
        }
        let e = EngineIdx(i as u32);
        if engine.status != EngineStatus::LoggedIn || !is_gateway(engine) || in_flight.is_lost(e) || in_flight.sets_flood_ratio(e) {
            continue;
        }
        let order = match state.flood.ratio_of(&engine.id) {
            None => Order::FloodRatio {
                engine: engine.id.clone(),
                ratio_milli: policy.ratio_start_milli,
                waiting: 0,
                reason: FloodReason::Start,
            },
            Some(ratio) if ratio.set_ms.saturating_add(policy.interval_ms) > state.now_ms => continue,
            Some(ratio) => {
                let (held, waiting) = held.get(&e).copied().unwrap_or((0, 0));
                let seen = Observed { slots: engine.slots, running: engine.used.saturating_sub(held), held, waiting };
                let Some((ratio_milli, reason)) = next_ratio(policy, ratio.ratio_milli, seen) else { continue };
                Order::FloodRatio { engine: engine.id.clone(), ratio_milli, waiting, reason }
            }
        };
        if !orders.push(order) {
            return;
        }
        n += 1;
    }
}

/// Requeues gateways' tasks unstarted past `remote_queue_timeout_ms`, oldest first.
pub fn withdraw_overdue(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    let Some(policy) = &state.policy.flood else { return };
    if policy.remote_queue_timeout_ms == 0 {
        return;
    }
    let mut n = 0;
    for &(dispatched_ms, key, attempt) in state.dispatched_by_age() {
        if dispatched_ms.saturating_add(policy.remote_queue_timeout_ms) >= state.now_ms || n == FLOOD_ORDERS_PER_RUN_MAX {
            break;
        }
        let Some(live) = state.live_attempt_numbered(key, attempt) else { continue };
        let engine = state.engine(live.engine);
        if !is_gateway(engine) || in_flight.is_ending(key, attempt) || in_flight.is_lost(live.engine) {
            continue;
        }
        let order = Order::Requeue {
            task: state.task_ref(key),
            attempt,
            engine: engine.id.clone(),
            reason: RequeueReason::FloodWithdrawn,
        };
        if !orders.push(order) {
            return;
        }
        n += 1;
    }
}

/// The stage: ratios first (so a withdrawal's room is not refilled at the old
/// ratio), then withdrawals. Returns what dispatch needs: the slots each
/// gateway holds unstarted in the state.
pub fn control(state: &State, in_flight: &InFlight, orders: &mut Orders) -> BTreeMap<EngineIdx, (u32, u32)> {
    if state.policy.flood.is_none() {
        return BTreeMap::new();
    }
    let held = held_slots(state);
    adjust_ratios(state, in_flight, &held, orders);
    withdraw_overdue(state, in_flight, orders);
    held
}
