//! Techila's scheduling cycles: when the draw runs.
//!
//! Techila runs a cycle on its events (a project created, a task finished, an
//! engine added or back, tasks added, tasks expired) and also at a fixed
//! interval (`cycle_interval`, default 5 s), "so that all Jobs will be
//! assigned to Techila Workers, even if the Job would not meet any criteria
//! typically required to trigger a scheduling cycle" (the seed, Figure 1).
//!
//! Here a cycle is *due* or not, and that is a fact of the folded state, so
//! replay and `--verify` reproduce it from the log alone:
//! - the fold **opens** a cycle at an entry that is one of those events and
//!   applied (a `JobSubmitted`, `TasksAdded`, `TaskCompleted`, `TaskFailed`,
//!   `EngineLoggedIn`, `EngineLoggedOut`, an engine's drain lifted, a
//!   `PolicySet`), at a batch whose orders free a core or put a task back or
//!   expire one (`Preempt`, `Cancel`, `Requeue`, `EngineLost`, an expiry's `Reschedule`) or that used the whole
//!   dispatch budget (the cycle repeats while work remains), and at any entry
//!   whose log time is `cycle_interval` or more past the last opening (the
//!   projector's one-second `Tick`s bring such an entry when nothing else does);
//! - a folded order batch **closes** every cycle opened at or before the
//!   sequence it was based on: the run that decided it ran them;
//! - the dispatch loop of the `techila` family runs only while a cycle is due
//!   (the other stages, preemption and expiry included, run on every run).
//!
//! So a task made runnable by anything else (a hold released, a library
//! synced, a priority changed) is dispatched within `cycle_interval` of log
//! time, plus at most the gap to the next entry. A cycle that decides nothing
//! publishes no batch and so stays due until one is published: it can only
//! make a dispatch come sooner, never later.
//!
//! Not done here: the seed's several hundred cycles a second each serve one
//! core; a run here serves every free core it can (one draw per core), which
//! is the same sequence of draws without a log entry between them.

use crate::core::event::{Algorithm, Event, Order, Policy, TechilaPolicy};
use crate::core::ids::Seq;
use crate::core::state::State;

/// The interval when the policy says none (0).
pub const CYCLE_INTERVAL_MS_DEFAULT: u64 = 5_000;
/// The longest interval a policy may set: an hour.
pub const CYCLE_INTERVAL_MS_MAX: u64 = 3_600_000;

/// The durations of Techila's policy section, checked with the policy's
/// other durations ([`crate::core::policy_limits::check_policy`]): (field,
/// value, least, most).
pub fn policy_durations(policy: &TechilaPolicy) -> [(&'static str, u64, u64, u64); 1] {
    [("techila.cycle_interval_ms", policy.cycle_interval_ms, 0, CYCLE_INTERVAL_MS_MAX)]
}


/// The policy's interval in ms.
pub fn interval_ms(policy: &Policy) -> u64 {
    match policy.techila.cycle_interval_ms {
        0 => CYCLE_INTERVAL_MS_DEFAULT,
        ms => ms.min(CYCLE_INTERVAL_MS_MAX),
    }
}

/// Whether the `techila` dispatch loop runs now.
pub fn due(state: &State) -> bool {
    state.families.techila.opened_seq > state.families.techila.closed_seq
}

/// Folds the event just applied at `seq` into the cycle state (`applied`: it
/// was not rejected; a batch counts as applied when its seal held; each report
/// of an engine's batch counts as an event of its own). Only under `techila`.
pub fn note_event(state: &mut State, seq: Seq, event: &Event, applied: bool) {
    if state.policy.algorithm != Algorithm::Techila {
        return;
    }
    let mut opens = applied && opens_cycle(event, state.policy.dispatches_per_run_max);
    if let (Event::OrderBatch(batch), true) = (event, applied) {
        state.families.techila.closed_seq = state.families.techila.closed_seq.max(batch.based_on_seq);
    }
    let cycle = &state.families.techila;
    if state.now_ms >= cycle.opened_ms.saturating_add(interval_ms(&state.policy)) {
        opens = true;
    }
    if opens {
        state.families.techila.opened_seq = seq;
        state.families.techila.opened_ms = state.now_ms;
    }
}

/// Whether an applied event is one of the seed's cycle events.
fn opens_cycle(event: &Event, dispatches_per_run_max: u32) -> bool {
    match event {
        Event::JobSubmitted(_)
        | Event::TasksAdded { .. }
        | Event::TaskCompleted { .. }
        | Event::TaskFailed { .. }
        | Event::EngineLoggedIn { .. }
        | Event::EngineLoggedOut { .. }
        | Event::EngineDrainChanged { drained: false, .. }
        | Event::PolicySet(_) => true,
        Event::OrderBatch(batch) => {
            let n_dispatches = batch.orders.iter().filter(|order| matches!(order, Order::Dispatch { .. })).count();
            n_dispatches >= dispatches_per_run_max.max(1) as usize
                || batch.orders.iter().any(|order| {
                    matches!(
                        order,
                        Order::Preempt { .. }
                            | Order::Cancel { .. }
                            | Order::Requeue { .. }
                            | Order::EngineLost { .. }
                            | Order::Reschedule { reason: crate::core::event::RescheduleReason::Expired, .. }
                    )
                })
        }
        _ => false,
    }
}
