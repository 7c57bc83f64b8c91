//! A bounded state: ended jobs leave it after the policy's retention.
//!
//! An ended job stays in the state, whole, for `Policy::job_retention_ms` of log
//! time after it ended (so `stat` and `why` can still show it and late reports
//! about it are rejected with its name). Once an entry's log time is past its end
//! plus the retention, the fold *retires* it: the job and everything keyed by it
//! leave the state, its figures go into per-user and per-project [`Usage`]
//! summaries, and a small [`RetiredJob`] record stays behind (bounded by
//! [`RETIRED_JOBS_MAX`]) so that its id is still refused for a new job and jobs
//! that depend on it still resolve. Over a long life the state follows the work
//! in flight, not the history.
//!
//! Invariants (checked by `State::check_invariants`):
//! - `retiring` holds exactly the ended jobs, each once, keyed by the log time its
//!   retention counts from;
//! - a retired job's id is in `retired_jobs` (while kept) and not in `job_index`;
//!   `retired_order` lists `retired_jobs`' ids, oldest retirement first;
//! - no structure of the state refers to a vacant job slot;
//! - every job's `task_dependents` is the number of task dependencies of other
//!   jobs in the state that name one of its tasks.
//!
//! Retiring is O(retired) per entry: the due jobs are taken from the front of an
//! ordered queue, never found by a scan.


use crate::core::ids::{Attempt, JobId, JobIdx, TaskKey};
use super::job::JobStatus;
use super::job_slots::{RETIRED_JOBS_MAX, RetiredJob, Usage};
use super::store::State;

impl State {
    /// The retired record of a job no longer in the state, if still kept.
    pub fn retired_job(&self, id: &JobId) -> Option<&RetiredJob> {
        self.retired_jobs.get(id)
    }

    /// Retired jobs' ids, oldest retirement first.
    pub fn retired_jobs(&self) -> impl Iterator<Item = (&JobId, &RetiredJob)> + '_ {
        self.retired_order.iter().map(move |id| (id, &self.retired_jobs[id]))
    }

    /// Usage of retired jobs by owner.
    pub fn usage_by_user(&self) -> &std::collections::BTreeMap<String, Usage> {
        &self.usage_by_user
    }

    /// Usage of retired jobs by project.
    pub fn usage_by_project(&self) -> &std::collections::BTreeMap<String, Usage> {
        &self.usage_by_project
    }

    /// How many ended jobs are waiting out their retention.
    pub fn jobs_awaiting_retirement(&self) -> usize {
        self.retiring.len()
    }

    /// A job ended now: its retention starts.
    pub(super) fn queue_retirement(&mut self, idx: JobIdx) {
        let added = self.retiring.insert((self.now_ms, idx));
        assert!(added, "a job ends once");
    }

    /// Retires every ended job whose retention has passed at the current log time.
    /// Part of every entry's bookkeeping, like the clock: it depends on the log
    /// time alone, never on what the entry says. A job due that still has live
    /// attempts (awaiting their Cancel) or a task another job depends on is looked
    /// at again a retention later.
    pub(crate) fn retire_due_jobs(&mut self) {
        let retention = self.policy.job_retention_ms;
        while let Some(&(since_ms, idx)) = self.retiring.first() {
            if self.now_ms <= since_ms.saturating_add(retention) {
                return;
            }
            self.retiring.pop_first();
            let job = &self.jobs[idx.0 as usize];
            let busy = job.task_dependents > 0 || self.has_attempts_to_cancel(idx);
            if busy {
                let added = self.retiring.insert((self.now_ms, idx));
                assert!(added, "a job is queued once");
                continue;
            }
            self.retire(idx);
        }
    }

    /// Whether an ended job still has live attempts: once a job has ended, each
    /// of its live attempts awaits a Cancel, so they are exactly its entries in
    /// `to_cancel` (a range of it, as that set is ordered by task).
    fn has_attempts_to_cancel(&self, idx: JobIdx) -> bool {
        let first = (TaskKey { job: idx, index: 0 }, 0);
        let last = (TaskKey { job: idx, index: u32::MAX }, Attempt::MAX);
        self.to_cancel.range(first..=last).next().is_some()
    }

    /// Takes an ended job, with no live attempt, out of the state.
    fn retire(&mut self, idx: JobIdx) {
        let job = self.jobs.remove(idx);
        assert!(job.status != JobStatus::Active, "only ended jobs retire");
        let ended_ms = job.ended_ms.expect("an ended job has its end time");
        // Task dependencies of this job on other jobs' tasks no longer pin them.
        for condition in job.conditions.values() {
            for dependency in &condition.depends_on {
                if dependency.job != idx {
                    let target = &mut self.jobs[dependency.job.0 as usize];
                    target.task_dependents -= 1;
                }
            }
        }
        // It may still be listed as waiting for an active job (it was cancelled while waiting).
        for dependency in &job.options.depends_on_jobs {
            if let Some(d) = self.job_idx(dependency)
                && let Some(dependents) = self.dependents.get_mut(&d)
            {
                dependents.retain(|&dependent| dependent != idx);
                if dependents.is_empty() {
                    self.dependents.remove(&d);
                }
            }
        }
        let mut categories: std::collections::BTreeSet<_> = job.conditions.values().filter_map(|c| c.category).collect();
        categories.insert(job.category);
        for c in categories {
            self.release_category(c);
        }
        let removed = self.job_index.swap_remove(&job.id);
        assert_eq!(removed, Some(idx), "the index names the retired job");
        let usage = Usage::of_job(&job);
        self.usage_by_user.entry(job.owner.clone()).or_default().add(&usage);
        self.usage_by_project.entry(job.project.clone()).or_default().add(&usage);
        self.totals.jobs_retired += 1;
        let record = RetiredJob {
            owner: job.owner,
            project: job.project,
            status: job.status,
            n_tasks: job.tasks.len() as u32,
            submitted_ms: job.submitted_ms,
            ended_ms,
            retired_ms: self.now_ms,
        };
        if self.retired_order.len() == RETIRED_JOBS_MAX
            && let Some(forgotten) = self.retired_order.pop_front()
        {
            self.retired_jobs.remove(&forgotten);
        }
        self.retired_order.push_back(job.id.clone());
        self.retired_jobs.insert(job.id, record);
    }

    /// Asserts the invariants of retirement (see the module docs).
    pub(super) fn check_retirement_invariants(&self) {
        let mut dependents = vec![0u32; self.jobs.slots.len()];
        for (idx, job) in self.jobs.iter() {
            assert!(!self.retired_jobs.contains_key(&job.id), "job {} is held and retired", job.id);
            assert_eq!(self.job_index.get(&job.id), Some(&idx), "index of job {}", job.id);
            let queued = self.retiring.iter().filter(|&&(_, j)| j == idx).count();
            assert_eq!(queued, usize::from(!job.is_active()), "retirement queue of {}", job.id);
            for condition in job.conditions.values() {
                for dependency in &condition.depends_on {
                    assert!(self.jobs.get(dependency.job).is_some(), "a dependency of {} was retired", job.id);
                    if dependency.job != idx {
                        dependents[dependency.job.0 as usize] += 1;
                    }
                }
            }
            if let Some(failed) = &job.failed_dependency {
                assert!(job.options.depends_on_jobs.contains(failed), "failed dependency of {}", job.id);
            }
        }
        for (idx, job) in self.jobs.iter() {
            assert_eq!(job.task_dependents, dependents[idx.0 as usize], "task dependents of {}", job.id);
        }
        assert_eq!(self.job_index.len(), self.jobs.len(), "the job index holds the held jobs");
        assert_eq!(self.retiring.len(), self.jobs.iter().filter(|(_, job)| !job.is_active()).count());
        assert_eq!(self.retired_order.len(), self.retired_jobs.len(), "retired ids");
        assert!(self.retired_order.len() <= RETIRED_JOBS_MAX);
        for id in &self.retired_order {
            let record = &self.retired_jobs[id];
            assert!(record.status != JobStatus::Active && record.ended_ms <= record.retired_ms);
        }
        // Each category counts the held jobs that use it; a vacant one is used by none.
        let mut users = vec![0u32; self.categories.len()];
        for (idx, _) in self.jobs.iter() {
            for c in self.job_categories(idx) {
                users[c.0 as usize] += 1;
            }
        }
        for (c, category) in self.categories.iter().enumerate() {
            assert_eq!(category.users, users[c], "users of category {c}");
            let vacant_listed = self.categories_vacant.contains(&crate::core::ids::CategoryIdx(c as u32));
            assert_eq!(category.is_vacant(), vacant_listed, "vacancy of category {c}");
            if category.is_vacant() {
                assert!(category.jobs.is_empty() && category.eligible.iter().all(|&word| word == 0));
            } else {
                let key = (category.requirements.clone(), category.slots_per_task, category.library.clone());
                assert_eq!(self.category_index.get(&key), Some(&crate::core::ids::CategoryIdx(c as u32)), "index of category {c}");
            }
        }
        assert_eq!(self.category_index.len() + self.categories_vacant.len(), self.categories.len());
        // No reference to a vacant slot.
        for vacant in self.jobs.vacant() {
            assert!(self.jobs.get(vacant).is_none());
            let held = |j: JobIdx| j == vacant;
            assert!(!self.runnable.iter().any(|rank| held(rank.job)), "runnable names a vacant slot");
            assert!(!self.dependents.iter().any(|(&d, list)| held(d) || list.iter().any(|&j| held(j))));
            assert!(!self.failing_dependents.iter().any(|&j| held(j)));
            assert!(!self.jobs_with_task_dependencies.iter().any(|&j| held(j)));
            assert!(!self.redundancy_jobs.iter().any(|&j| held(j)));
            assert!(!self.pending_blacklists.iter().any(|&(j, _)| held(j)));
            assert!(!self.to_cancel.iter().any(|(key, _)| held(key.job)));
            assert!(!self.live.sorted().iter().any(|(key, _)| held(key.job)));
            assert!(!self.copies.keys().any(|(key, _)| held(key.job)));
            assert!(!self.dispatched_since.iter().any(|(_, key, _)| held(key.job)));
            assert!(!self.categories.iter().any(|category| category.jobs.iter().any(|&j| held(j))));
        }
    }
}
