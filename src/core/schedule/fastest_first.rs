//! The resource-first shape's test family: free engines are served fastest
//! first (by their benchmark, `mflops`; then engine id), each taking the first
//! task, in `-p`-then-FCFS job order, that every shared rule allows it
//! (requirements, slots, blacklist, the retry rule). No policy selects it: it
//! exists so the loop's second shape is built and tested before a family
//! needs it; Techila's family fills the shape in with its own engine order
//! and ticket draw.

use std::collections::{BTreeMap, BTreeSet};

use super::dispatch::Candidate;
use crate::core::state::{EngineIdx, JobIdx, State, TaskKey};

/// Fastest free engine first, then engine id.
pub struct FastestFirst {
    /// Engines served that took nothing: not offered again this run.
    passed: BTreeSet<u32>,
    booked: BTreeSet<TaskKey>,
    booked_per_job: BTreeMap<JobIdx, u32>,
}

impl FastestFirst {
    pub fn new() -> FastestFirst {
        FastestFirst { passed: BTreeSet::new(), booked: BTreeSet::new(), booked_per_job: BTreeMap::new() }
    }

    pub(crate) fn next_engine(&mut self, state: &State, candidates: &[Candidate]) -> Option<u32> {
        (0..candidates.len() as u32)
            .filter(|at| !self.passed.contains(at) && candidates[*at as usize].used < candidates[*at as usize].slots)
            .max_by_key(|&at| (state.engine(candidates[at as usize].engine).props.mflops, std::cmp::Reverse(at)))
    }

    pub fn jobs_for(&self, state: &State, _e: EngineIdx) -> Vec<JobIdx> {
        state.runnable_jobs().map(|rank| rank.job).collect()
    }

    pub fn has_booked(&self, key: TaskKey) -> bool {
        self.booked.contains(&key)
    }

    pub fn engine_served(&mut self, at: u32, booked: Option<TaskKey>) {
        match booked {
            Some(key) => {
                self.booked.insert(key);
                *self.booked_per_job.entry(key.job).or_default() += 1;
            }
            None => {
                self.passed.insert(at);
            }
        }
    }
}


impl Default for FastestFirst {
    fn default() -> Self {
        FastestFirst::new()
    }
}
