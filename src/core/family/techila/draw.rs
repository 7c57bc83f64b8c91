//! What one Techila run prepares once so each cycle (one decision) is cheap,
//! with the very same results as reading the state afresh each cycle:
//!
//! - [`CoreQueue`]: the free cores ordered fastest first (mflops, then free
//!   slots, then the candidate's position, as [`super::TechilaOrder::next_engine`]
//!   defines it), re-keyed only for the core just served, so picking the next
//!   core is `O(log engines)`, not a scan of every candidate;
//! - the projects and their tickets: [`super::tickets`].
//!
//! Invariants: nothing here changes the state. Bounded by the run: one entry
//! per candidate engine.

use std::collections::BTreeSet;

use crate::core::schedule::candidate::Candidate;
use crate::core::state::State;

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
