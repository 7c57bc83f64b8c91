//! What one Techila run prepares once so each cycle (one decision) is cheap,
//! with the very same results as reading the state afresh each cycle:
//!
//! - [`CoreQueue`]: the free cores ordered fastest first (mflops, then free
//!   slots, then the candidate's position, as [`super::TechilaOrder::next_engine`]
//!   defines it), re-keyed only for the core just served, so picking the next
//!   core is `O(log engines)`, not a scan of every candidate;
//! - [`Projects`]: the run's runnable projects grouped per user, each group in
//!   the user's order of preference (project priority, then creation order),
//!   with the figures of each that do not change within a run (priorities, wall
//!   clock, CPU time, tasks running before the run) in a vector indexed by job.
//!   A cycle's entrants are the first project of each group the core may take
//!   (one per user; with `simultaneous_projects`, each project is a group of
//!   one), so a cycle costs a pass over the users, not over every project.
//!
//! Invariants: nothing here changes the state; a group's order is the order
//! the per-user minimum of the draw's entrants uses, so the first compatible
//! project of a group is that minimum. Bounded by the run: one entry per
//! candidate engine and per runnable project.

use std::collections::BTreeSet;

use super::{project_priority, user_priority, PRIORITY_NORMAL};
use crate::core::ids::Seq;
use crate::core::schedule::dispatch::Candidate;
use crate::core::state::{CategoryIdx, EngineIdx, JobIdx, State};

/// A core's place in the queue: the largest key is served first.
type CoreKey = (u64, u32, std::cmp::Reverse<u32>);

/// The free cores of a run, fastest first.
#[derive(Default)]
pub(crate) struct CoreQueue {
    built: bool,
    queue: BTreeSet<CoreKey>,
    /// Per candidate, its key in `queue` (if it is there).
    keys: Vec<Option<CoreKey>>,
    /// The candidate served last, to re-key before the next pick.
    served: Option<u32>,
}

impl CoreQueue {
    fn key(state: &State, candidates: &[Candidate], at: u32) -> Option<CoreKey> {
        let candidate = &candidates[at as usize];
        (candidate.used < candidate.slots).then(|| {
            (state.engine(candidate.engine).props.mflops, candidate.slots - candidate.used, std::cmp::Reverse(at))
        })
    }

    /// The fastest free core not passed over (`passed` says which were).
    pub(crate) fn next(&mut self, state: &State, candidates: &[Candidate], passed: &BTreeSet<u32>) -> Option<u32> {
        if !self.built {
            self.built = true;
            self.keys = (0..candidates.len() as u32)
                .map(|at| if passed.contains(&at) { None } else { CoreQueue::key(state, candidates, at) })
                .collect();
            self.queue = self.keys.iter().flatten().copied().collect();
        } else if let Some(at) = self.served.take() {
            if let Some(old) = self.keys[at as usize].take() {
                self.queue.remove(&old);
            }
            if !passed.contains(&at) {
                let key = CoreQueue::key(state, candidates, at);
                if let Some(key) = key {
                    self.queue.insert(key);
                }
                self.keys[at as usize] = key;
            }
        }
        assert!(self.keys.len() == candidates.len(), "the candidates of a run do not change in number");
        self.queue.last().map(|&(_, _, std::cmp::Reverse(at))| at)
    }

    /// The candidate at `at` was served (booked or passed over): re-key it.
    pub(crate) fn served(&mut self, at: u32) {
        self.served = Some(at);
    }
}

/// The figures of a project that do not change within a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fixed {
    pub project_priority: u32,
    pub user_priority: u32,
    pub submit_seq: Seq,
    pub wall_clock_ms: u64,
    pub cpu_ms_completed: u64,
    /// Tasks dispatched or running before the run, orders in flight included.
    pub running_before: u32,
    /// Its tasks wanting a dispatch at the start of the run, less those in flight.
    pub wanting_before: u32,
    pub category: CategoryIdx,
    pub slots_per_task: u32,
}

/// The run's runnable projects, grouped per user in order of preference.
#[derive(Default)]
pub(crate) struct Projects {
    built: bool,
    /// Each group: its projects, most preferred first. Groups in the creation
    /// order of their first project, so the entrants come nearly sorted.
    groups: Vec<Vec<JobIdx>>,
    /// Per job index (dense, `JobIdx.0`): its fixed figures, if runnable.
    fixed: Vec<Option<Fixed>>,
}

impl Projects {
    fn build(&mut self, state: &State, in_flight_of: impl Fn(JobIdx) -> u32) {
        self.built = true;
        let simultaneous = state.policy.techila.simultaneous_projects;
        let mut jobs: Vec<(u32, u32, Seq, JobIdx)> = state
            .runnable_jobs()
            .map(|rank| {
                let job = state.job(rank.job);
                let group = if simultaneous { rank.job.0 } else { job.user_account.0 };
                (group, project_priority(job), job.submit_seq, rank.job)
            })
            .collect();
        jobs.sort_unstable();
        let n = jobs.iter().map(|&(_, _, _, j)| j.0 as usize + 1).max().unwrap_or(0);
        self.fixed = vec![None; n];
        let mut groups: Vec<Vec<JobIdx>> = Vec::new();
        for (at, &(group, _, _, j)) in jobs.iter().enumerate() {
            if at == 0 || jobs[at - 1].0 != group {
                groups.push(Vec::new());
            }
            groups.last_mut().expect("pushed").push(j);
            let job = state.job(j);
            let in_flight_of_job = in_flight_of(j);
            self.fixed[j.0 as usize] = Some(Fixed {
                project_priority: project_priority(job),
                user_priority: user_priority(state, job),
                submit_seq: job.submit_seq,
                wall_clock_ms: state.now_ms.saturating_sub(job.submitted_ms),
                cpu_ms_completed: job.cpu_ms_completed,
                running_before: job.counts.running + job.counts.dispatched + in_flight_of_job,
                wanting_before: job.n_wanting_dispatch().saturating_sub(in_flight_of_job),
                category: job.category,
                slots_per_task: job.slots_per_task,
            });
        }
        groups.sort_by_key(|group| (self.fixed[group[0].0 as usize].expect("runnable").submit_seq, group[0]));
        self.groups = groups;
    }

    /// The fixed figures of a runnable job of the run.
    pub(crate) fn fixed(&self, j: JobIdx) -> &Fixed {
        self.fixed[j.0 as usize].as_ref().expect("a job of the run's draws is runnable")
    }

    /// Tasks of job `j` the run may still book, given `booked` (per job index)
    /// this run: its wanting dispatch less those in flight and booked.
    pub(crate) fn wanting(&self, j: JobIdx, booked: &[u32]) -> u32 {
        self.fixed(j).wanting_before.saturating_sub(booked.get(j.0 as usize).copied().unwrap_or(0))
    }

    /// Appends to `out` the first project of each group that engine `e` with
    /// `free` slots may take (its category and slots) and that still wants a
    /// dispatch, then keeps the rule of Lowest projects (left out when a
    /// Normal-or-higher project that wants capacity, [`super::want`], is among them).
    pub(crate) fn entrants(
        &mut self,
        state: &State,
        in_flight_of: impl Fn(JobIdx) -> u32,
        (e, free): (EngineIdx, u32),
        booked: &[u32],
        out: &mut Vec<JobIdx>,
    ) {
        if !self.built {
            self.build(state, in_flight_of);
        }
        out.clear();
        let mut normal_or_higher = false;
        let fits = |j: JobIdx| {
            let fixed = self.fixed(j);
            fixed.slots_per_task <= free
                && state.category(fixed.category).is_eligible(e)
                && self.wanting(j, booked) > 0
        };
        for group in &self.groups {
            if let Some(&j) = group.iter().find(|&&j| fits(j)) {
                normal_or_higher |= self.fixed(j).project_priority <= PRIORITY_NORMAL && super::want::wants_capacity(state, j);
                out.push(j);
            }
        }
        if normal_or_higher {
            out.retain(|&j| self.fixed(j).project_priority != super::PRIORITY_LOWEST);
        }
    }
}
