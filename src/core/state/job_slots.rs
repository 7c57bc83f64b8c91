//! The jobs' slots (a retired job's slot is reused), and what is remembered
//! of retired jobs and of their owners' and projects' usage (see `retire.rs`).

use crate::core::ids::JobIdx;
use std::collections::VecDeque;
use std::ops::{Index, IndexMut};
use super::job::{Job, JobStatus};

/// How many retired jobs' ids the state remembers, oldest forgotten first. Within
/// this many retirements a retired id is refused for a new job, and a job that
/// depends on a retired job resolves from its outcome; after that the id is
/// unknown again. A record is about a hundred bytes, so this bounds the record at
/// about 10 MB whatever the history.
pub const RETIRED_JOBS_MAX: usize = 100_000;

/// The jobs of the state in slots addressed by [`JobIdx`].
///
/// Retiring a job vacates its slot; a new job takes the slot vacated longest
/// ago, or a new one at the end. So indexes held anywhere in the state stay
/// valid without a remap of every structure (jobs are referred to by index from
/// a dozen indexes, task keys and the live-attempt tables), and the vector's
/// length follows the most jobs held at once, not every job ever submitted.
/// A job's index is reused only after retirement has removed every reference to
/// it from the state (asserted by `check_invariants`), and the oldest vacated
/// slot is reused first so an index is out of use as long as possible. Order
/// among jobs never comes from their indexes alone: the examination order breaks
/// ties by submission sequence first.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct JobSlots {
    pub(super) slots: Vec<Option<Job>>,
    /// Vacant slots, vacated longest ago first.
    vacant: VecDeque<JobIdx>,
}

impl JobSlots {
    /// The index the next job will take.
    pub fn next_idx(&self) -> JobIdx {
        self.vacant.front().copied().unwrap_or(JobIdx(self.slots.len() as u32))
    }

    pub(super) fn insert(&mut self, job: Job) -> JobIdx {
        match self.vacant.pop_front() {
            Some(idx) => {
                let slot = &mut self.slots[idx.0 as usize];
                assert!(slot.is_none(), "a vacant slot is empty");
                *slot = Some(job);
                idx
            }
            None => {
                self.slots.push(Some(job));
                JobIdx(self.slots.len() as u32 - 1)
            }
        }
    }

    pub(super) fn remove(&mut self, idx: JobIdx) -> Job {
        let job = self.slots[idx.0 as usize].take().expect("only a held job is removed");
        self.vacant.push_back(idx);
        job
    }

    pub fn get(&self, idx: JobIdx) -> Option<&Job> {
        self.slots.get(idx.0 as usize).and_then(Option::as_ref)
    }

    /// How many jobs are held.
    pub fn len(&self) -> usize {
        self.slots.len() - self.vacant.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Held jobs with their indexes, in index order.
    pub fn iter(&self) -> Jobs<'_> {
        Jobs { slots: self.slots.iter().enumerate(), remaining: self.len() }
    }

    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut Job> {
        self.slots.iter_mut().flatten()
    }

    pub(super) fn vacant(&self) -> impl Iterator<Item = JobIdx> + '_ {
        self.vacant.iter().copied()
    }
}

impl Index<usize> for JobSlots {
    type Output = Job;
    fn index(&self, at: usize) -> &Job {
        self.slots[at].as_ref().expect("no reference to a retired job's slot is kept")
    }
}

impl IndexMut<usize> for JobSlots {
    fn index_mut(&mut self, at: usize) -> &mut Job {
        self.slots[at].as_mut().expect("no reference to a retired job's slot is kept")
    }
}

/// The held jobs with their indexes, in index order (an exact-size iterator).
pub struct Jobs<'a> {
    slots: std::iter::Enumerate<std::slice::Iter<'a, Option<Job>>>,
    remaining: usize,
}

impl<'a> Iterator for Jobs<'a> {
    type Item = (JobIdx, &'a Job);
    fn next(&mut self) -> Option<Self::Item> {
        for (at, slot) in self.slots.by_ref() {
            if let Some(job) = slot {
                self.remaining -= 1;
                return Some((JobIdx(at as u32), job));
            }
        }
        None
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for Jobs<'_> {}

/// What the state remembers of a retired job.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RetiredJob {
    pub owner: String,
    pub project: String,
    /// Done, failed or cancelled.
    pub status: JobStatus,
    pub n_tasks: u32,
    pub submitted_ms: u64,
    pub ended_ms: u64,
    /// Log time of the entry that retired it.
    pub retired_ms: u64,
}

/// What the retired jobs of one user or one project added up to. Integers only.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub jobs_done: u64,
    pub jobs_failed: u64,
    pub jobs_cancelled: u64,
    pub tasks_done: u64,
    pub tasks_failed: u64,
    pub tasks_cancelled: u64,
    /// Attempts dispatched, retries and redundant copies included.
    pub attempts: u64,
}

impl Usage {
    /// The figures of one ended job.
    pub fn of_job(job: &Job) -> Usage {
        let mut usage = Usage {
            tasks_done: u64::from(job.counts.done),
            tasks_failed: u64::from(job.counts.failed),
            tasks_cancelled: u64::from(job.counts.cancelled),
            attempts: job.tasks.iter().map(|task| u64::from(task.attempts)).sum(),
            ..Usage::default()
        };
        match job.status {
            JobStatus::Done => usage.jobs_done = 1,
            JobStatus::Failed => usage.jobs_failed = 1,
            JobStatus::Cancelled => usage.jobs_cancelled = 1,
            JobStatus::Active => {}
        }
        usage
    }

    pub fn add(&mut self, other: &Usage) {
        self.jobs_done += other.jobs_done;
        self.jobs_failed += other.jobs_failed;
        self.jobs_cancelled += other.jobs_cancelled;
        self.tasks_done += other.tasks_done;
        self.tasks_failed += other.tasks_failed;
        self.tasks_cancelled += other.tasks_cancelled;
        self.attempts += other.attempts;
    }

    pub fn jobs(&self) -> u64 {
        self.jobs_done + self.jobs_failed + self.jobs_cancelled
    }
}
