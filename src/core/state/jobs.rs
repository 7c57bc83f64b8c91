//! Jobs' verbs: the policy, categories, submission and tasks, priorities,
//! dependencies, and a job's end.

use crate::core::event::LibraryRef;
use crate::core::expr::Expr;
use crate::core::ids::{Attempt, CategoryIdx, EngineIdx, JobId, JobIdx, TaskKey};
use std::collections::{BTreeMap, BTreeSet};
use super::category::Category;
use super::job::{Job, JobStatus, TaskCondition};
use super::store::State;

impl State {
    // ---- jobs and categories -------------------------------------------------

    /// The category for these requirements and library, created (and its
    /// eligibility computed over every known engine) if new.
    pub(crate) fn category_for(&mut self, expr: Expr, slots_per_task: u32, library: Option<LibraryRef>) -> CategoryIdx {
        let key = (expr.to_string(), slots_per_task, library);
        if let Some(&idx) = self.category_index.get(&key) {
            return idx;
        }
        let category = Category {
            requirements: key.0.clone(),
            slots_per_task,
            library: key.2.clone(),
            expr: Some(expr),
            eligible: Vec::new(),
            matching_logged_in: 0,
            fitting_logged_in: 0,
            eligible_logged_in: 0,
            jobs: BTreeSet::new(),
            // The job about to use it counts itself in (`add_job`, `add_tasks`).
            users: 0,
        };
        let idx = match self.categories_vacant.pop_front() {
            Some(idx) => {
                self.categories[idx.0 as usize] = category;
                idx
            }
            None => {
                self.categories.push(category);
                CategoryIdx(self.categories.len() as u32 - 1)
            }
        };
        self.category_index.insert(key, idx);
        for e in 0..self.engines.len() {
            self.refresh_eligibility(idx, EngineIdx(e as u32));
        }
        idx
    }

    /// Adds a submitted job. `depends_on` are the jobs it waits for (already resolved).
    /// `retired_dependencies` are the jobs it waits for that have left the state
    /// (they ended, with the status given).
    pub(crate) fn add_job(&mut self, mut job: Job, depends_on: &[JobIdx], retired_dependencies: &[(JobId, JobStatus)]) -> JobIdx {
        job.user_account = self.users.intern(&job.owner);
        job.project_account = self.projects.intern(&job.project);
        self.holdings.add(job.user_account, 1, u64::from(job.n_tasks()));
        let id = job.id.clone();
        let idx = self.jobs.insert(job);
        self.job_index.insert(id, idx);
        for c in self.job_categories(idx) {
            let category = &mut self.categories[c.0 as usize];
            category.jobs.insert(idx);
            category.users += 1;
        }
        self.pin_task_dependencies(idx, 0);
        for &dependency in depends_on {
            let status = self.jobs[dependency.0 as usize].status;
            if status == JobStatus::Active {
                self.jobs[idx.0 as usize].blocked_by += 1;
                self.dependents.entry(dependency).or_default().push(idx);
            } else {
                // Held as for a dependency that ends later: released at once, or,
                // when it did not succeed and the job fails with it, held until
                // its FailDependent order.
                self.jobs[idx.0 as usize].blocked_by += 1;
                let dependency_id = self.jobs[dependency.0 as usize].id.clone();
                self.release_dependent(idx, &dependency_id, status);
            }
        }
        for (dependency_id, status) in retired_dependencies {
            self.jobs[idx.0 as usize].blocked_by += 1;
            self.release_dependent(idx, dependency_id, *status);
        }
        self.index_job_rules(idx);
        self.refresh_runnable(idx, false);
        idx
    }

    /// Every category a job's tasks use: the job's own and its discriminators'.
    pub fn job_categories(&self, idx: JobIdx) -> BTreeSet<CategoryIdx> {
        let job = &self.jobs[idx.0 as usize];
        let mut categories: BTreeSet<CategoryIdx> = job.conditions.values().filter_map(|c| c.category).collect();
        categories.insert(job.category);
        categories
    }

    /// Keeps the job in the indexes of the rules it uses (task dependencies, redundancy).
    pub(super) fn index_job_rules(&mut self, idx: JobIdx) {
        let job = &self.jobs[idx.0 as usize];
        let active = job.status == JobStatus::Active;
        let has_task_deps = job.conditions.values().any(|c| !c.depends_on.is_empty());
        if active && has_task_deps {
            self.jobs_with_task_dependencies.insert(idx);
        } else {
            self.jobs_with_task_dependencies.remove(&idx);
        }
        if active && job.options.redundant_rescheduling {
            self.redundancy_jobs.insert(idx);
        } else {
            self.redundancy_jobs.remove(&idx);
        }
        if active && job.options.span == crate::core::event::Span::Site {
            self.site_jobs.insert(idx);
        } else {
            self.site_jobs.remove(&idx);
        }
        if !active {
            self.failing_dependents.remove(&idx);
            self.pending_blacklists.retain(|&(j, _)| j != idx);
        }
    }

    /// More tasks for an active job; `conditions` are already resolved, keyed by
    /// absolute task index.
    pub(crate) fn add_tasks(
        &mut self,
        idx: JobIdx,
        params: &[BTreeMap<String, String>],
        conditions: Vec<(u32, TaskCondition, bool)>,
    ) {
        let was_runnable = self.jobs[idx.0 as usize].is_runnable();
        let new_categories = conditions.iter().any(|(_, condition, _)| condition.category.is_some());
        let categories_before = if new_categories { self.job_categories(idx) } else { BTreeSet::new() };
        self.jobs[idx.0 as usize].append_tasks(params);
        let user = self.jobs[idx.0 as usize].user_account;
        self.holdings.add(user, 0, params.len() as u64);
        let first = self.jobs[idx.0 as usize].n_tasks() - params.len() as u32;
        for (index, condition, queue_jump) in conditions {
            if let Some(c) = condition.category {
                self.categories[c.0 as usize].jobs.insert(idx);
            }
            self.jobs[idx.0 as usize].set_condition(index, condition, queue_jump);
        }
        if new_categories {
            for c in self.job_categories(idx).difference(&categories_before) {
                self.categories[c.0 as usize].users += 1;
            }
        }
        self.pin_task_dependencies(idx, first);
        self.index_job_rules(idx);
        self.refresh_runnable(idx, was_runnable);
    }

    /// Counts, on each other job, the task dependencies of this job's tasks from
    /// `first` on that name one of its tasks: a job is not retired while another
    /// job's task may still ask how its tasks ended.
    pub(super) fn pin_task_dependencies(&mut self, idx: JobIdx, first: u32) {
        let job = &self.jobs[idx.0 as usize];
        if job.conditions.is_empty() {
            return;
        }
        let targets: Vec<JobIdx> = job
            .conditions
            .range(first..)
            .flat_map(|(_, condition)| condition.depends_on.iter().map(|dependency| dependency.job))
            .filter(|&j| j != idx)
            .collect();
        for j in targets {
            self.jobs[j.0 as usize].task_dependents += 1;
        }
    }

    /// A job that used the category retired: the category is dropped when no
    /// held job uses it any more (its slot left vacant, its name forgotten).
    pub(crate) fn release_category(&mut self, c: CategoryIdx) {
        let category = &mut self.categories[c.0 as usize];
        assert!(category.users > 0, "a category in use counts its users");
        category.users -= 1;
        if category.users > 0 {
            return;
        }
        assert!(category.jobs.is_empty(), "a category no job uses has no active job");
        let key = (std::mem::take(&mut category.requirements), category.slots_per_task, category.library.take());
        let removed = self.category_index.swap_remove(&key);
        assert_eq!(removed, Some(c), "the category index names the dropped category");
        self.categories[c.0 as usize] = Category::vacant();
        self.categories_vacant.push_back(c);
    }

    pub(crate) fn job_mut(&mut self, idx: JobIdx) -> &mut Job {
        &mut self.jobs[idx.0 as usize]
    }

    /// Changes a job's priority, moving it in the examination order.
    pub(crate) fn set_override_tickets(&mut self, idx: JobIdx, tickets: u32) {
        self.jobs[idx.0 as usize].override_tickets = tickets;
    }

    pub(crate) fn set_priority(&mut self, idx: JobIdx, priority: i32) {
        let job = &self.jobs[idx.0 as usize];
        self.runnable.remove(&job.rank(idx));
        self.jobs[idx.0 as usize].priority = priority;
        self.refresh_runnable(idx, false);
    }

    /// Puts a job in or takes it out of `runnable` after a change to it.
    /// `was_runnable` is [`Job::is_runnable`] before the change (with the same
    /// rank): the set is touched only when the answer changed, which on most
    /// dispatches and completions it does not.
    pub(super) fn refresh_runnable(&mut self, idx: JobIdx, was_runnable: bool) {
        let job = &self.jobs[idx.0 as usize];
        let runnable = job.is_runnable();
        if runnable != was_runnable {
            let rank = job.rank(idx);
            if runnable {
                self.runnable.insert(rank);
            } else {
                self.runnable.remove(&rank);
            }
        }
    }

    /// Ends a job: its waiting tasks are cancelled, its live attempts await a
    /// Cancel, and the jobs that depend on it hear of it.
    pub(crate) fn end_job(&mut self, idx: JobIdx, status: JobStatus) {
        assert!(status != JobStatus::Active);
        let now = self.now_ms;
        let job = &mut self.jobs[idx.0 as usize];
        if job.status != JobStatus::Active {
            return;
        }
        let was_runnable = job.is_runnable();
        job.status = status;
        job.ended_ms = Some(now);
        job.cancel_waiting_tasks();
        self.leave_job(idx, was_runnable);
        self.queue_retirement(idx);
    }

    /// What every ending does once the job's status is set: out of the categories
    /// and rule indexes, its live attempts to cancel, its dependents released.
    pub(super) fn leave_job(&mut self, idx: JobIdx, was_runnable: bool) {
        let job = &self.jobs[idx.0 as usize];
        self.holdings.remove(job.user_account, 1, u64::from(job.n_tasks()));
        for c in self.job_categories(idx) {
            self.categories[c.0 as usize].jobs.remove(&idx);
        }
        let status = self.jobs[idx.0 as usize].status;
        // Live attempts may outlast their task (redundant copies of a task that has
        // its result), so the table is searched whatever the counts say.
        let live = self.live_attempts_of_job(idx);
        self.to_cancel.extend(live);
        self.index_job_rules(idx);
        self.refresh_runnable(idx, was_runnable);
        let id = self.jobs[idx.0 as usize].id.clone();
        for dependent in self.dependents.remove(&idx).unwrap_or_default() {
            self.release_dependent(dependent, &id, status);
        }
    }

    /// A job `dependent` waited for has ended with `status`: it is released, or,
    /// when it fails with its dependencies and this one did not succeed, it awaits
    /// a FailDependent order (and stays held until then).
    pub(super) fn release_dependent(&mut self, dependent: JobIdx, dependency: &JobId, status: JobStatus) {
        let job = &mut self.jobs[dependent.0 as usize];
        if job.status != JobStatus::Active {
            return;
        }
        let was_runnable = job.is_runnable();
        if status != JobStatus::Done && job.options.fail_on_dependency_failure {
            if job.failed_dependency.is_none() {
                job.failed_dependency = Some(dependency.clone());
                self.failing_dependents.insert(dependent);
            }
            return;
        }
        if job.blocked_by > 0 {
            job.blocked_by -= 1;
        }
        self.refresh_runnable(dependent, was_runnable);
    }

    /// Every live attempt of a job, first attempts and copies.
    pub(super) fn live_attempts_of_job(&self, idx: JobIdx) -> Vec<(TaskKey, Attempt)> {
        let mut all: Vec<(TaskKey, Attempt)> =
            self.live.tasks_of_job(idx).into_iter().map(|key| (key, self.live.get(&key).expect("listed").attempt)).collect();
        all.extend(self.copies.keys().filter(|(key, _)| key.job == idx).copied());
        all
    }

    /// Ends an active job whose tasks have all ended: done when every task is, failed otherwise.
    pub(super) fn finish_job_if_ended(&mut self, idx: JobIdx) {
        let now = self.now_ms;
        let job = &mut self.jobs[idx.0 as usize];
        if job.status != JobStatus::Active || !job.all_tasks_ended() {
            return;
        }
        let was_runnable = job.is_runnable();
        // Tasks cancelled alone (`TaskCancelled`) do not fail their job: it is
        // done when no task failed and one is done, cancelled when all were cancelled.
        job.status = match (job.counts.failed, job.counts.done) {
            (0, 0) => JobStatus::Cancelled,
            (0, _) => JobStatus::Done,
            _ => JobStatus::Failed,
        };
        job.ended_ms = Some(now);
        self.leave_job(idx, was_runnable);
        self.queue_retirement(idx);
    }
}
