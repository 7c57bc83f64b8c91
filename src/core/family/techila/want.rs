//! Whether a project *wants capacity*: it has a task that could be dispatched
//! now, not merely tasks waiting. A task held by its dependencies (tasks of
//! the same or another job not yet ended) does not want a core; a project
//! whose waiting tasks are all so held must neither make a Lowest project
//! give way ([`super::preempt_lowest`]) nor keep Lowest projects out of a draw.
//! (Jobs held as a whole, by an operator or by job dependencies, are not
//! runnable and so never counted.)
//!
//! Cost: a job without task conditions is answered from its counts; one with
//! them is walked in its serving order, at most [`WANT_WALK_MAX`] waiting tasks
//! (beyond that the rest are counted as wanting, as the dispatch loop would try them).

use crate::core::state::checks::dependencies_ended;
use crate::core::state::{JobIdx, State, TaskKey};

/// Most waiting tasks of one job looked at to count its unheld ones.
pub const WANT_WALK_MAX: u32 = 10_000;

/// How many of the job's waiting tasks (and copies) could be dispatched now,
/// counting at most `up_to`.
pub fn n_wanting(state: &State, j: JobIdx, up_to: u32) -> u32 {
    let job = state.job(j);
    let all = job.n_wanting_dispatch();
    if job.conditions_are_empty() || up_to == 0 {
        return all.min(up_to);
    }
    let mut n = 0u32;
    for (n_seen, index) in job.waiting_tasks().enumerate() {
        if n == up_to {
            return n;
        }
        if n_seen as u32 == WANT_WALK_MAX {
            return up_to.min(n.saturating_add(all.saturating_sub(n_seen as u32)));
        }
        if !is_held(state, TaskKey { job: j, index }) {
            n += 1;
        }
    }
    n
}

/// Whether the job has at least one task that could be dispatched now.
pub fn wants_capacity(state: &State, j: JobIdx) -> bool {
    n_wanting(state, j, 1) > 0
}

/// A task whose dependencies have not ended (or one of which failed) waits,
/// as the dispatch loop's own rule says.
fn is_held(state: &State, key: TaskKey) -> bool {
    state.job(key.job).condition(key.index).is_some_and(|_| {
        dependencies_ended(state, key).is_err() || state.failed_dependency_of(key).is_some()
    })
}
