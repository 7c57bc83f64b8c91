//! What the log says: dispatches, completions and the latencies, read from the
//! log's own timestamps once the run is over (see the module doc of `bench`).

use std::collections::{HashMap, VecDeque};

use super::{Latencies, Percentiles};
use crate::core::event::{Entry, Event, JobSpec, Order, Origin};
use crate::core::ids::{EngineId, JobId};
use crate::core::state::{JobStatus, State, TaskStatus};

#[derive(Debug, Default)]
pub(super) struct Analysis {
    pub(super) entries_before_jobs: u64,
    pub(super) batches: u64,
    pub(super) dispatches: u64,
    pub(super) completed_events: u64,
    /// (job, index) -> completions seen.
    pub(super) completions_per_task: HashMap<(JobId, u32), u32>,
    pub(super) slot_free_to_dispatch: Vec<u64>,
    pub(super) submit_to_dispatch: Vec<u64>,
    pub(super) dispatch_to_completed: Vec<u64>,
    pub(super) completion_times: Vec<u64>,
}

/// Walks the log: dispatches, completions and the latencies (see the module docs).
pub(super) fn analyse(entries: &[Entry], jobs: &[JobSpec], slots: u32) -> Analysis {
    let mut analysis = Analysis::default();
    let mut submitted: HashMap<JobId, u64> = HashMap::new();
    let mut free_since: HashMap<EngineId, VecDeque<u64>> = HashMap::new();
    let mut dispatched_at: HashMap<(JobId, u32), u64> = HashMap::new();
    let first_job = jobs.first().map(|j| j.id.clone());
    for entry in entries {
        let t = entry.time_ms;
        for event in entry.events() {
            match event {
                Event::JobSubmitted(spec) => {
                    if Some(&spec.id) == first_job.as_ref() {
                        analysis.entries_before_jobs = entry.seq.0 - 1;
                    }
                    submitted.insert(spec.id.clone(), t);
                }
                Event::EngineLoggedIn {
                    engine, slots: n, ..
                } => {
                    debug_assert_eq!(*n, slots);
                    free_since
                        .entry(engine.clone())
                        .or_default()
                        .extend(std::iter::repeat_n(t, *n as usize));
                }
                Event::OrderBatch(batch) if entry.origin == Origin::Projector => {
                    analysis.batches += 1;
                    for order in &batch.orders {
                        if let Order::Dispatch { task, engine, .. } = order {
                            analysis.dispatches += 1;
                            if let Some(&at) = submitted.get(&task.job) {
                                analysis.submit_to_dispatch.push(t.saturating_sub(at));
                            }
                            if let Some(free) =
                                free_since.get_mut(engine).and_then(VecDeque::pop_front)
                            {
                                // A slot free before its job existed waited for work, not for the scheduler.
                                let since = free.max(submitted.get(&task.job).copied().unwrap_or(free));
                                analysis.slot_free_to_dispatch.push(t.saturating_sub(since));
                            }
                            dispatched_at.insert((task.job.clone(), task.index), t);
                        }
                    }
                }
                Event::TaskCompleted { task, engine, .. } => {
                    analysis.completed_events += 1;
                    analysis.completion_times.push(t);
                    *analysis
                        .completions_per_task
                        .entry((task.job.clone(), task.index))
                        .or_default() += 1;
                    free_since.entry(engine.clone()).or_default().push_back(t);
                    if let Some(at) = dispatched_at.get(&(task.job.clone(), task.index)) {
                        analysis.dispatch_to_completed.push(t.saturating_sub(*at));
                    }
                }
                _ => {}
            }
        }
    }
    analysis
}

impl Analysis {
    /// Every task of every bench job: one completion event, status done, one attempt.
    pub(super) fn completed_once(&self, state: &State, jobs: &[JobSpec]) -> bool {
        let total: u64 = jobs.iter().map(JobSpec::task_count).sum();
        if self.completed_events != total || self.dispatches != total {
            return false;
        }
        jobs.iter().all(|spec| {
            let Some(j) = state.job_idx(&spec.id) else {
                return false;
            };
            let job = state.job(j);
            job.status == JobStatus::Done
                && u64::from(job.counts.done) == spec.task_count()
                && job
                    .tasks
                    .iter()
                    .all(|t| t.status == TaskStatus::Done && t.attempts == 1)
                && (0..job.n_tasks())
                    .all(|i| self.completions_per_task.get(&(spec.id.clone(), i)) == Some(&1))
        })
    }

    pub(super) fn steady_rate(&self) -> f64 {
        let mut times = self.completion_times.clone();
        times.sort_unstable();
        let n = times.len();
        if n < 10 {
            return 0.0;
        }
        let (lo, hi) = (n / 10, n * 9 / 10);
        let span_ms = times[hi] - times[lo];
        if span_ms == 0 {
            return 0.0;
        }
        (hi - lo) as f64 * 1000.0 / span_ms as f64
    }

    pub(super) fn latencies(&self) -> Latencies {
        Latencies {
            slot_free_to_dispatch: percentiles(&self.slot_free_to_dispatch),
            submit_to_dispatch: percentiles(&self.submit_to_dispatch),
            dispatch_to_completed: percentiles(&self.dispatch_to_completed),
        }
    }
}

fn percentiles(samples: &[u64]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = |p: usize| {
        sorted[((sorted.len() * p).div_ceil(100))
            .saturating_sub(1)
            .min(sorted.len() - 1)]
    };
    Percentiles {
        samples: sorted.len() as u64,
        p50: rank(50),
        p99: rank(99),
        max: *sorted.last().expect("not empty"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testkit::*;

    #[test]
    fn a_slot_free_before_its_job_is_counted_from_the_submission_and_a_freed_one_from_the_completion() {
        let mut log = LogBuilder::new();
        let mut state = State::new();
        log.at(1_000);
        log.login("e1", 1, linux_props("lyon", 8192));
        log.at(5_000);
        let spec = job_spec("j", 2, "");
        log.submit(spec.clone());
        // Each batch is logged at the time set just before it.
        let from = log.entries.len();
        log.at(5_007);
        let seen = fold_and_decide(&mut log, &mut state, 0);
        log.at(6_000);
        log.completed("j", 0, 1, "e1");
        log.at(6_003);
        fold_and_decide(&mut log, &mut state, seen);
        assert_eq!(log.entries.len(), from + 3, "two batches and a completion");
        let analysis = analyse(&log.entries, &[spec], 1);
        // From the submission (5,000), not the login (1,000); then from the completion.
        assert_eq!(analysis.slot_free_to_dispatch, vec![7, 3]);
    }
}
