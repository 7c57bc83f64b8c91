//! FBSNG's fold hooks: what a policy and a section's start, read back, do to
//! the figures of `state.rs`.

use crate::core::event::{Algorithm, Event, Order};
use super as family;

use crate::core::state::{State, TaskKey};

/// Folds the event just applied at log time `time_ms` (`applied`: not
/// rejected; a batch counts when its seal held).
pub fn note_event(state: &mut State, time_ms: u64, event: &Event, applied: bool) {
    if state.policy.algorithm != Algorithm::Fbsng || !applied {
        return;
    }
    match event {
        Event::PolicySet(_) => align_with_policy(state),
        Event::OrderBatch(batch) => {
            let starts = batch.orders.iter().any(|order| matches!(order, Order::Dispatch { .. } | Order::DispatchParallel { .. }));
            if starts {
                state.families.fbsng.last_run_ms = time_ms.max(state.families.fbsng.last_run_ms);
            }
        }
        _ => {}
    }
}

/// Aligns the priorities with the queues of the policy in force.
fn align_with_policy(state: &mut State) {
    let queues = family::queues(&state.policy);
    let aligned: Vec<(String, i64)> = queues
        .iter()
        .map(|queue| {
            let kept = state.families.fbsng.queue_priorities.iter().find(|(name, _)| *name == queue.name).map(|(_, p)| *p);
            (queue.name.clone(), kept.unwrap_or(queue.qp_min).clamp(queue.qp_min, queue.qp_max))
        })
        .collect();
    state.families.fbsng.queue_priorities = aligned;
}

/// A section of `key`'s job started (its dispatch was read back).
pub fn section_started(state: &mut State, key: TaskKey) {
    if state.policy.algorithm != Algorithm::Fbsng {
        return;
    }
    if state.families.fbsng.queue_priorities.is_empty() {
        align_with_policy(state);
    }
    let queues = family::queues(&state.policy).into_owned();
    let job = state.job(key.job);
    let Some(q) = queues.iter().position(|queue| queue.name == job.queue) else { return };
    let submitted = job.submit_seq;
    let queue = job.queue.clone();
    let mut priorities: Vec<i64> = state.families.fbsng.queue_priorities.iter().map(|(_, p)| *p).collect();
    family::queue_started(&queues, &mut priorities, q);
    for ((_, priority), new) in state.families.fbsng.queue_priorities.iter_mut().zip(priorities) {
        *priority = new;
    }
    state.families.fbsng.n_started += 1;
    // Every section of the queue submitted before this one and waiting was
    // passed: its priority grows (FBSNG's section priority).
    let passed: Vec<_> = state
        .runnable_jobs()
        .filter(|rank| rank.submit_seq < submitted && rank.job != key.job)
        .map(|rank| rank.job)
        .filter(|&j| state.job(j).queue == queue)
        .collect();
    for j in passed {
        let section = &mut state.job_mut(j).families.fbsng.section_priority;
        *section = section.saturating_add(1).min(family::SECTION_PRIORITY_MAX);
    }
    // The job's next section becomes ready now: its priority starts afresh.
    state.job_mut(key.job).families.fbsng.section_priority = 0;
}
