//! Techila's expired tasks (the seed's "Expired Job Management", Figure 3).
//!
//! A job may say `expected_task_time_ms`. Under `techila`, a task whose only
//! live attempt has been running (log time since its engine reported it
//! started) longer than that is **expired**: the projector orders a
//! `Reschedule` with the reason `expired`, the existing redundant-copy order,
//! and the fold records the task as expired (`Job::techila_expired`, shown by
//! `stat` and `why`) and queues one copy of it at the front of its job. The
//! cycle serves waiting expired copies before any draw, on the fastest free
//! core that may take them (never the engine running the task), so the copy
//! starts "before processing Jobs from the next Project". The first result
//! wins; the other attempt is cancelled at once (the `Cancel` order with the
//! reason `redundant-copy`), whatever the job's `cancel_redundant_on_first_result`.
//!
//! Rules, all in integer ms of log time:
//! - at most one copy per task, ever: a task already expired is not expired
//!   again (should its original attempt be lost, its copy runs on alone);
//! - a task that has not started, or has a copy already, is not expired;
//! - at most [`EXPIRIES_PER_RUN_MAX`] expiries per run, jobs in index order,
//!   tasks in index order.
//!
//! Not done here: the GridServer strategies (mean, standard deviation): a
//! Techila project states its expected time itself.

use crate::core::schedule::budget::Orders;
use crate::core::schedule::in_flight::InFlight;
use crate::core::event::{Algorithm, Order, RescheduleReason};
use super::state::ExpiredTask;
use crate::core::state::{EngineIdx, Job, JobIdx, State, TaskKey};

/// Most expiry `Reschedule` orders in one run.
pub const EXPIRIES_PER_RUN_MAX: usize = 1_024;

/// Whether the job's tasks can expire: under `techila`, with an expected time.
pub fn expires(state: &State, job: &Job) -> bool {
    state.policy.algorithm == Algorithm::Techila && job.is_active() && job.options.expected_task_time_ms > 0
}

/// Orders a copy of every task that ran past its job's expected time.
pub fn copy_expired_tasks(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    let lost_in_run: Vec<EngineIdx> = orders
        .as_slice()
        .iter()
        .filter_map(|order| match order {
            Order::EngineLost { engine, .. } => state.engine_idx(engine),
            _ => None,
        })
        .collect();
    let mut n_ordered = 0usize;
    let jobs: Vec<JobIdx> = state
        .jobs_indexed()
        .filter(|(_, job)| expires(state, job) && job.counts.running > 0)
        .map(|(j, _)| j)
        .collect();
    for j in jobs {
        let job = state.job(j);
        let expected_ms = job.options.expected_task_time_ms;
        let live = state.live_attempts_of_job_sorted(j);
        for (at, &(key, attempt)) in live.iter().enumerate() {
            let only_attempt = live.get(at + 1).is_none_or(|(next, _)| *next != key)
                && (at == 0 || live[at - 1].0 != key);
            let Some(started_ms) = attempt.started_ms else { continue };
            let elapsed_ms = crate::core::window::elapsed_ms(state.now_ms, started_ms);
            if !only_attempt
                || elapsed_ms <= expected_ms
                || job.families.techila.expired.contains_key(&key.index)
                || job.copy_waits(key.index)
                || in_flight.is_rescheduled(key)
                || in_flight.is_ending(key, attempt.attempt)
                || in_flight.is_lost(attempt.engine)
                || lost_in_run.contains(&attempt.engine)
            {
                continue;
            }
            let task = state.task_ref(key);
            if orders.ends(&task, attempt.attempt) {
                continue;
            }
            if n_ordered == EXPIRIES_PER_RUN_MAX
                || !orders.push(Order::Reschedule { task, reason: RescheduleReason::Expired, elapsed_ms, limit_ms: expected_ms })
            {
                return;
            }
            n_ordered += 1;
        }
    }
}

/// Whether the fold takes an expiry's `Reschedule` of `key`: the task can
/// expire, is live on one attempt, has no copy and was never expired.
pub fn copy_wanted(state: &State, key: TaskKey) -> bool {
    let job = state.job(key.job);
    expires(state, job)
        && state.task(key).is_live()
        && !job.copy_waits(key.index)
        && !job.families.techila.expired.contains_key(&key.index)
        && state.live_attempts_of(key).len() == 1
}

/// Folds an accepted expiry: the task is marked expired and its copy queued first.
pub(crate) fn mark_expired(state: &mut State, key: TaskKey, elapsed_ms: u64, expected_ms: u64) {
    let at_ms = state.now_ms;
    state.job_mut(key.job).families.techila.expired.insert(key.index, ExpiredTask { elapsed_ms, expected_ms, at_ms });
    state.add_racing_copy(key);
}

/// The job's expired tasks still running (for `stat`).
pub fn n_expired_live(job: &Job) -> u32 {
    job.families.techila.expired.keys().filter(|&&index| job.tasks[index as usize].is_live()).count() as u32
}

/// The runnable jobs with an expired task's copy waiting, most important first
/// (project priority, then creation): the cycle serves them before any draw.
pub fn jobs_with_copies_waiting(state: &State) -> Vec<JobIdx> {
    let mut jobs: Vec<JobIdx> = state
        .runnable_jobs()
        .map(|rank| rank.job)
        .filter(|&j| {
            let job = state.job(j);
            !job.families.techila.expired.is_empty() && job.families.techila.expired.keys().any(|&index| job.copy_waits(index))
        })
        .collect();
    jobs.sort_by_key(|&j| (super::priority::project_priority(state.job(j)), state.job(j).submit_seq, j));
    jobs
}

/// Whether engine `e` may take a waiting expired copy of the job: it does not
/// run that task already.
pub fn copy_fits(state: &State, j: JobIdx, e: EngineIdx) -> bool {
    let job = state.job(j);
    job.families.techila.expired.keys().any(|&index| {
        job.copy_waits(index) && !state.live_attempts_of(TaskKey { job: j, index }).iter().any(|live| live.engine == e)
    })
}

/// What `why` says of an expired task: how long it ran, against what, and
/// the engines its attempts are on now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ExpiredWhy {
    pub elapsed_ms: u64,
    pub expected_ms: u64,
    /// The engines running the task now (the original and its copy), oldest attempt first.
    pub engines: Vec<String>,
    /// The copy waits for a free core.
    pub copy_waiting: bool,
}

impl std::fmt::Display for ExpiredWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "techila: expired after {} (expected {})",
            secs(self.elapsed_ms),
            secs(self.expected_ms)
        )?;
        if self.copy_waiting {
            write!(f, ", its copy waits for a free core")?;
        } else if self.engines.len() >= 2 {
            write!(f, ", copy on {} (original on {})", self.engines[self.engines.len() - 1], self.engines[0])?;
        } else if let Some(engine) = self.engines.first() {
            write!(f, ", running on {engine}")?;
        }
        Ok(())
    }
}

/// `why` of task `key`, when it was expired.
pub fn why(state: &State, key: TaskKey) -> Option<ExpiredWhy> {
    let job = state.job(key.job);
    let expired = job.families.techila.expired.get(&key.index)?;
    let mut live = state.live_attempts_of(key);
    live.sort_by_key(|attempt| attempt.attempt);
    Some(ExpiredWhy {
        elapsed_ms: expired.elapsed_ms,
        expected_ms: expired.expected_ms,
        engines: live.iter().map(|attempt| state.engine(attempt.engine).id.to_string()).collect(),
        copy_waiting: job.copy_waits(key.index),
    })
}

pub use crate::core::window::secs;
