//! Dependency conditions, the lifecycle half. A job waits for the jobs it depends
//! on, a task for the tasks it depends on (the waiting is in the state's
//! `runnable` set and the dispatcher's dependency rule). When a dependency fails or
//! is cancelled and the job asked `fail_on_dependency_failure`, this stage orders
//! the dependent to fail; without it the dependent runs once its dependencies
//! have ended, whatever became of them.

use super::budget::Orders;
use super::in_flight::InFlight;
use crate::core::event::Order;
use crate::core::state::{State, TaskKey, TaskStatus};

/// Most FailDependent orders for single tasks in one run.
pub const FAILED_TASKS_PER_RUN_MAX: usize = 1_024;
/// Most FailDependent orders for whole jobs in one run.
pub const FAILED_JOBS_PER_RUN_MAX: usize = 1_024;

pub fn fail_dependents(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    let mut n_jobs_failed = 0;
    for j in state.jobs_failing_with_a_dependency() {
        if in_flight.is_failing(j, None) {
            continue;
        }
        let job = state.job(j);
        let dependency = job.failed_dependency.as_ref().expect("listed jobs have a failed dependency");
        let order = Order::FailDependent { job: job.id.clone(), task: None, dependency: dependency.to_string() };
        if n_jobs_failed == FAILED_JOBS_PER_RUN_MAX || !orders.push(order) {
            return;
        }
        n_jobs_failed += 1;
    }
    let mut n_failed = 0;
    for j in state.jobs_with_task_dependencies() {
        let job = state.job(j);
        if !job.options.fail_on_dependency_failure {
            continue;
        }
        for (&index, condition) in job.conditions_iter() {
            if n_failed == FAILED_TASKS_PER_RUN_MAX {
                return;
            }
            if condition.depends_on.is_empty() || job.task(index).is_none_or(|task| task.status != TaskStatus::Waiting) {
                continue;
            }
            let key = TaskKey { job: j, index };
            let Some(failed) = state.failed_dependency_of(key) else { continue };
            if in_flight.is_failing(j, Some(index)) {
                continue;
            }
            let order = Order::FailDependent { job: job.id.clone(), task: Some(index), dependency: state.task_ref(failed).to_string() };
            if !orders.push(order) {
                return;
            }
            n_failed += 1;
        }
    }
}
