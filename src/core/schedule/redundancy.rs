//! Redundant rescheduling (GridServer): long-running tasks of a job that asks for
//! it get a redundant copy in the job's waiting list; the first result of any copy
//! is the task's result. The rules, all in integer milliseconds:
//!
//! - The rescheduler looks at running tasks at *poll instants*, the multiples of
//!   the policy's `poll_period_ms` of log time; between two instants it sees
//!   nothing new, so a decision does not depend on when the projector ran.
//! - A task's elapsed time is from the dispatch of its newest copy to the poll
//!   instant (handing out a copy resets it, as the seed says).
//! - `task_max_time_ms` of the job always applies.
//! - Once `strategy_effective_percent` of the job's tasks have completed, the
//!   three strategies apply too, over the mean and the population standard
//!   deviation of the completed tasks' times (dispatch to result):
//!   *percent completed*: when at most `remaining_task_percent` of the tasks
//!   remain, a task running longer than the mean; *average*: longer than
//!   mean × `average_limit_milli` / 1000; *standard deviation*: longer than
//!   mean + sd × `std_dev_limit_milli` / 1000.
//! - A task gets a copy when its elapsed time exceeds any limit; the order names
//!   the smallest limit exceeded (the rule that fired first). It gets none while a
//!   copy of it waits, or while it has `copies_per_task_max` copies alive.
//!
//! What becomes of copies is the state's: the copy waits at the front of the queue
//! with `reschedule_first`, at the back otherwise; the first result wins; the other
//! copies run on until the job ends, or are cancelled at once when the job says
//! `cancel_redundant_on_first_result`.
//!
//! Cost: each run walks the live attempts of each job that reschedules.

use std::collections::BTreeSet;

use super::budget::Orders;
use super::in_flight::InFlight;
use crate::core::event::{Order, RescheduleReason};
use crate::core::ids::{Attempt, JobId, TaskRef};
use crate::core::state::{EngineIdx, Job, LiveAttempt, State, TaskKey};

/// Most Reschedule orders in one run.
pub const RESCHEDULES_PER_RUN_MAX: usize = 1_024;

/// The limits in force for a job now, as (reason, limit in ms).
pub fn limits(state: &State, job: &Job) -> Vec<(RescheduleReason, u64)> {
    let policy = &state.policy.redundancy;
    let mut limits = Vec::new();
    if job.options.task_max_time_ms > 0 {
        limits.push((RescheduleReason::TaskMaxTime, job.options.task_max_time_ms));
    }
    let n_tasks = u64::from(job.n_tasks());
    let done = u64::from(job.counts.done);
    let effective = done * 100 >= n_tasks * u64::from(policy.strategy_effective_percent);
    let (Some(mean), Some(std_dev)) = (job.completion_times.mean_ms(), job.completion_times.std_dev_ms()) else {
        return limits;
    };
    if !effective {
        return limits;
    }
    let remaining = n_tasks - done;
    if policy.percent_completed_strategy && remaining * 100 <= n_tasks * u64::from(policy.remaining_task_percent) {
        limits.push((RescheduleReason::PercentCompleted, mean));
    }
    if policy.average_strategy {
        let limit = u128::from(mean) * u128::from(policy.average_limit_milli) / 1000;
        limits.push((RescheduleReason::Average, u64::try_from(limit).unwrap_or(u64::MAX)));
    }
    if policy.std_dev_strategy {
        let limit = u128::from(mean) + u128::from(std_dev) * u128::from(policy.std_dev_limit_milli) / 1000;
        limits.push((RescheduleReason::StdDev, u64::try_from(limit).unwrap_or(u64::MAX)));
    }
    limits
}

/// The latest poll instant at or before the state's time.
pub fn poll_instant(state: &State) -> u64 {
    let period = state.policy.redundancy.poll_period_ms.max(1);
    state.now_ms - state.now_ms % period
}

/// `lost`: the engines this run declares lost. Their attempts, and the attempts
/// earlier stages of this run requeue, end when the batch is folded, before any
/// `Reschedule` of it: a task left with none is pending again and wants no copy,
/// and a job or task failed by a dependency wants none either (the fold would
/// refuse them all as `no-copy-wanted`).
pub fn reschedule_long_tasks(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    let copies_max = state.policy.redundancy.copies_per_task_max;
    let poll_ms = poll_instant(state);
    let ending = EndingInBatch::of(orders.as_slice());
    let mut n_ordered = 0;
    for j in state.redundancy_jobs() {
        let job = state.job(j);
        if ending.failed_jobs.contains(&job.id) {
            continue;
        }
        let limits = limits(state, job);
        let Some(&(_, shortest)) = limits.iter().min_by_key(|(_, limit)| *limit) else { continue };
        let stays = |key: TaskKey, live: &LiveAttempt| {
            !lost.contains(&live.engine) && !ending.requeued(state, key, live.attempt)
        };
        for (key, newest_dispatch_ms, n_live) in live_tasks_of(state, j, stays) {
            if n_live == 0 || ending.failed_tasks.contains(&(job.id.clone(), key.index)) {
                continue;
            }
            if n_ordered == RESCHEDULES_PER_RUN_MAX {
                return;
            }
            let elapsed_ms = poll_ms.saturating_sub(newest_dispatch_ms);
            if elapsed_ms <= shortest || n_live > copies_max || !state.task(key).is_live() {
                continue;
            }
            if job.copy_waits(key.index) || in_flight.is_rescheduled(key) {
                continue;
            }
            let (reason, limit_ms) = limits
                .iter()
                .copied()
                .filter(|&(_, limit)| elapsed_ms > limit)
                .min_by_key(|&(reason, limit)| (limit, reason))
                .expect("the shortest limit is exceeded");
            if !orders.push(Order::Reschedule { task: state.task_ref(key), reason, elapsed_ms, limit_ms }) {
                return;
            }
            n_ordered += 1;
        }
    }
}

/// Each task of the job with live attempts: (task, newest dispatch time, live
/// attempts that `stays`), in task order. The newest dispatch is over every copy.
fn live_tasks_of(
    state: &State,
    j: crate::core::state::JobIdx,
    stays: impl Fn(TaskKey, &LiveAttempt) -> bool,
) -> Vec<(TaskKey, u64, u32)> {
    let mut tasks: Vec<(TaskKey, u64, u32)> = Vec::new();
    for (key, live) in state.live_attempts_of_job_sorted(j) {
        let staying = u32::from(stays(key, &live));
        match tasks.last_mut() {
            Some((last, newest, n)) if *last == key => {
                *newest = (*newest).max(live.dispatched_ms);
                *n += staying;
            }
            _ => tasks.push((key, live.dispatched_ms, staying)),
        }
    }
    tasks
}

/// What the orders already in the batch end, when folded before the stage's own.
#[derive(Default)]
struct EndingInBatch {
    requeued: BTreeSet<(TaskRef, Attempt)>,
    failed_jobs: BTreeSet<JobId>,
    failed_tasks: BTreeSet<(JobId, u32)>,
}

impl EndingInBatch {
    fn of(orders: &[Order]) -> Self {
        let mut ending = EndingInBatch::default();
        for order in orders {
            match order {
                Order::Requeue { task, attempt, .. } => {
                    ending.requeued.insert((task.clone(), *attempt));
                }
                Order::FailDependent { job, task: None, .. } => {
                    ending.failed_jobs.insert(job.clone());
                }
                Order::FailDependent { job, task: Some(index), .. } => {
                    ending.failed_tasks.insert((job.clone(), *index));
                }
                _ => {}
            }
        }
        ending
    }

    fn requeued(&self, state: &State, key: TaskKey, attempt: Attempt) -> bool {
        !self.requeued.is_empty() && self.requeued.contains(&(state.task_ref(key), attempt))
    }
}
