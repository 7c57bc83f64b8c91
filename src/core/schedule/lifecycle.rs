//! Lifecycle rules: timers that fire on log time, cancels of ended jobs, and the
//! flag for jobs no engine could ever run. Each returns orders; none mutates.

use std::collections::BTreeSet;

use super::budget::Orders;
use super::in_flight::InFlight;
use crate::core::event::{CancelReason, Order, RequeueReason, Unschedulable};
use crate::core::ids::{Attempt, EngineId, TaskRef};
use crate::core::state::{Category, CategoryIdx, EngineIdx, JobIdx, State, TaskKey};

/// Most timer-driven orders of each kind in one run, so a long silence cannot
/// produce an unbounded batch; the rest fire on the next run.
pub const TIMER_ORDERS_PER_RUN_MAX: usize = 1_024;
/// Most jobs flagged unschedulable in one run.
pub const UNSCHEDULABLE_PER_RUN_MAX: usize = 1_024;

/// Engines with no accepted event for longer than `engine_timeout_ms` of log time.
/// Returns them, so later stages neither dispatch to them nor requeue their attempts twice.
pub fn lose_silent_engines(state: &State, in_flight: &InFlight, orders: &mut Orders) -> BTreeSet<EngineIdx> {
    let timeout = state.policy.engine_timeout_ms;
    let mut lost = BTreeSet::new();
    let silent_too_long = |last_seen_ms: u64| last_seen_ms.saturating_add(timeout) < state.now_ms;
    for (last_seen_ms, e) in state.engines_by_silence_while(silent_too_long) {
        if lost.len() == TIMER_ORDERS_PER_RUN_MAX {
            break;
        }
        if in_flight.is_lost(e) {
            continue;
        }
        let engine = state.engine(e);
        if !orders.push(Order::EngineLost { engine: engine.id.clone(), epoch: engine.epoch, last_seen_ms }) {
            break;
        }
        lost.insert(e);
    }
    lost
}

/// Attempts an engine held in an earlier login epoch go back to the queue, each
/// by an order on the log with its reason: the login that had them has ended.
pub fn requeue_closed_epochs(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    end_live_attempts(state, in_flight, lost, state.closed_epoch_attempts(), orders, |task, attempt, engine| {
        Order::Requeue { task, attempt, engine, reason: RequeueReason::EngineRestarted }
    });
}

/// Dispatches not reported started within `dispatch_timeout_ms` go back to the
/// queue, and their engine is told to drop them. A suspended attempt is not
/// timed out: an operator stopped it on purpose.
pub fn requeue_unstarted(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    let timeout = state.policy.dispatch_timeout_ms;
    let overdue = state
        .dispatched_by_age()
        .take_while(|&&(dispatched_ms, ..)| dispatched_ms.saturating_add(timeout) < state.now_ms)
        .map(|&(_, key, attempt)| (key, attempt))
        .filter(|&(key, attempt)| state.suspended_since(key, attempt).is_none());
    end_live_attempts(state, in_flight, lost, overdue, orders, |task, attempt, engine| Order::Requeue {
        task,
        attempt,
        engine,
        reason: RequeueReason::DispatchTimeout,
    });
}

/// Live attempts of ended jobs are told to stop, and so are redundant copies of
/// tasks that have their result when the job cancels copies at once.
pub fn cancel_ended_jobs(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    let reason_of = |task: &TaskRef| match state.job_idx(&task.job) {
        Some(j) if state.task_key(task).is_some_and(|key| state.task(key).is_cancel_requested()) && state.job(j).is_active() => {
            CancelReason::TaskCancelled
        }
        Some(j) if state.job(j).is_active() => CancelReason::RedundantCopy,
        _ => CancelReason::JobCancelled,
    };
    end_live_attempts(state, in_flight, lost, state.attempts_to_cancel(), orders, |task, attempt, engine| {
        let reason = reason_of(&task);
        Order::Cancel { task, attempt, engine, reason }
    });
}

/// One order per live attempt, at most [`TIMER_ORDERS_PER_RUN_MAX`], skipping
/// attempts an order in flight or an earlier stage of this run already ends (an
/// attempt overdue and of a cancelled job is requeued, not also cancelled) and
/// attempts on engines being lost (their loss requeues them).
fn end_live_attempts(
    state: &State,
    in_flight: &InFlight,
    lost: &BTreeSet<EngineIdx>,
    keys: impl Iterator<Item = (TaskKey, Attempt)>,
    orders: &mut Orders,
    order_for: impl Fn(TaskRef, Attempt, EngineId) -> Order,
) {
    let mut n_ended = 0;
    for (key, attempt) in keys {
        if n_ended == TIMER_ORDERS_PER_RUN_MAX {
            break;
        }
        let live = state.live_attempt_numbered(key, attempt).expect("attempts to end are live");
        if in_flight.is_ending(key, attempt) || in_flight.is_lost(live.engine) || lost.contains(&live.engine) {
            continue;
        }
        let task = state.task_ref(key);
        if orders.ends(&task, live.attempt) {
            continue;
        }
        if !orders.push(order_for(task, live.attempt, state.engine(live.engine).id.clone())) {
            break;
        }
        n_ended += 1;
    }
}

/// Flags waiting jobs that no logged-in engine could ever run (Kubernetes'
/// `Unresolvable`): the submitter is told now. The flag clears by itself when an
/// engine that fits logs in. Nothing is flagged while no engine is logged in at all.
pub fn unschedulable(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    if !state.any_engine_logged_in() {
        return;
    }
    let mut n_flagged = 0;
    for (c, category) in state.categories().iter().enumerate() {
        let Some(reason) = why_unschedulable(state, category) else { continue };
        for &j in &category.jobs {
            let job = state.job(j);
            if job.category.0 as usize == c && unflagged_and_waiting(state, in_flight, j) {
                if n_flagged == UNSCHEDULABLE_PER_RUN_MAX || !orders.push(Order::MarkUnschedulable { job: job.id.clone(), reason }) {
                    return;
                }
                n_flagged += 1;
            }
        }
    }
    // Site tasks whose category engines fit one by one, but no site holds all
    // their slots (`parallel::site_unschedulable`): the active site jobs, by
    // category (then job), not a walk over every job of every category.
    let site_jobs = site_jobs_to_check(state, in_flight);
    #[cfg(test)]
    assert_eq!(site_jobs, site_jobs_to_check_by_walk(state, in_flight), "the site jobs' index finds what a walk finds");
    let mut sites = None;
    for group in site_jobs.chunk_by(|a, b| a.0 == b.0) {
        let category = state.category(group[0].0);
        if category.is_vacant() || why_unschedulable(state, category).is_some() {
            continue;
        }
        let sites = sites.get_or_insert_with(|| super::parallel::SiteIndex::new(state));
        // The category's best site, counted once for all its site jobs.
        let most = super::parallel::category_site_slots_max(state, sites, category);
        for &(_, j) in group {
            let job = state.job(j);
            if most < job.slots_per_task {
                let reason = Unschedulable::NoSiteHasEnoughSlots;
                if n_flagged == UNSCHEDULABLE_PER_RUN_MAX || !orders.push(Order::MarkUnschedulable { job: job.id.clone(), reason }) {
                    return;
                }
                n_flagged += 1;
            }
        }
    }
}

/// Whether the unschedulable check looks at waiting job `j` (of its own
/// category) this run: not flagged, nor about to be.
fn unflagged_and_waiting(state: &State, in_flight: &InFlight, j: JobIdx) -> bool {
    let job = state.job(j);
    job.unschedulable.is_none() && job.counts.waiting > 0 && !in_flight.is_flagged(j)
}

/// The site jobs the unschedulable check looks at, as (category, job), in
/// category order then job order.
fn site_jobs_to_check(state: &State, in_flight: &InFlight) -> Vec<(CategoryIdx, JobIdx)> {
    let mut jobs: Vec<(CategoryIdx, JobIdx)> = state
        .site_jobs()
        .filter(|&j| unflagged_and_waiting(state, in_flight, j))
        .map(|j| (state.job(j).category, j))
        .collect();
    jobs.sort_unstable();
    jobs
}

/// [`site_jobs_to_check`] by the walk it replaces: every job of every
/// category; the tests compare the two on every run.
#[cfg(test)]
fn site_jobs_to_check_by_walk(state: &State, in_flight: &InFlight) -> Vec<(CategoryIdx, JobIdx)> {
    let mut jobs = Vec::new();
    for (c, category) in state.categories().iter().enumerate() {
        for &j in &category.jobs {
            let job = state.job(j);
            if job.category.0 as usize == c
                && job.options.span == crate::core::event::Span::Site
                && unflagged_and_waiting(state, in_flight, j)
            {
                jobs.push((CategoryIdx(c as u32), j));
            }
        }
    }
    jobs
}

/// Why job `j` could never run on the engines logged in: its category's
/// reason ([`why_unschedulable`]), or a site task's
/// ([`super::parallel::site_unschedulable`]). What the fold re-checks.
pub fn why_job_unschedulable(state: &State, j: JobIdx) -> Option<Unschedulable> {
    why_unschedulable(state, state.category(state.job(j).category)).or_else(|| super::parallel::site_unschedulable(state, j))
}

/// Why no logged-in engine could ever run a category's tasks, if none could. An
/// engine that fits but lacks a published library is not a reason: it can sync.
pub fn why_unschedulable(state: &State, category: &Category) -> Option<Unschedulable> {
    if category.fitting_logged_in == 0 {
        return Some(if category.matching_logged_in == 0 {
            Unschedulable::NoEngineMatchesRequirements
        } else {
            Unschedulable::NoEngineHasEnoughSlots
        });
    }
    match &category.library {
        Some(library) if category.eligible_logged_in == 0 && state.library(library).is_none() => {
            Some(Unschedulable::LibraryNotPublished)
        }
        _ => None,
    }
}
