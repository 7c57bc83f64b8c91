//! Matching waiting tasks to free engines.
//!
//! Ordering: jobs in `State::runnable` order (priority, then submission). Within a
//! job: retries, then fresh tasks by index. Candidates: the engines with a free
//! slot, ranked for the run by (load index, engine id), so the least loaded engine
//! comes first and ties go to the smaller id. A category that finds no candidate
//! is exhausted for the run: every later job of it is skipped at once.
//!
//! Cost: each category examined in a run gets its own queue of the candidates
//! eligible for it (its requirements bitset, computed at login, says which), so a
//! pick never walks past engines the category cannot use. Booking a slot raises
//! an engine's load index; rather than update every queue holding the engine, a
//! queue re-files an entry whose load has changed when it comes to the top (loads
//! only rise during a run, so the first up-to-date entry is the true minimum).
//! A pick is O(log n) amortised, however narrow the category. With few candidates
//! (a run after a completion or two) a pick walks them instead; in debug builds
//! every queued pick is checked against that walk.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use super::filters::failed_here_last;
use super::InFlight;
use crate::core::event::{LoadFormula, Order};
use crate::core::state::{Category, CategoryIdx, Engine, EngineIdx, State, TaskKey};

/// Grid Engine's load formula, in milli-units: lower is chosen first.
pub fn load_index(formula: &LoadFormula, engine: &Engine, used_slots: u32) -> u64 {
    let slots_part = u64::from(used_slots) * 1000 / u64::from(engine.slots.max(1));
    u64::from(formula.slots_weight) * slots_part
        + u64::from(formula.load_weight) * u64::from(engine.load.load_per_core_milli)
}

/// A free engine of the run.
struct Candidate {
    engine: EngineIdx,
    slots: u32,
    /// Slots in use, including what this run and the orders in flight booked.
    used: u32,
}

/// Up to this many candidates in a run, a pick walks them all (cheaper than
/// building queues when a run has a slot or two to fill, the common case).
const SCAN_CANDIDATES_MAX: usize = 16;

/// (load index, position in `Candidates::by_id`): the rank of a candidate, the
/// position standing for the engine id (positions follow id order).
type Rank = (u64, u32);

/// The free engines of one run, ranked; updated as the run books slots.
struct Candidates<'s> {
    state: &'s State,
    /// Sorted by engine id.
    by_id: Vec<Candidate>,
    /// Candidates with a slot still free.
    n_open: usize,
    /// Per category, the candidates eligible for it with room for one of its
    /// tasks, least rank first; built when the category is first examined. An
    /// entry's load may be out of date (lower than the engine's now).
    queues: Vec<Option<BinaryHeap<Reverse<Rank>>>>,
}

impl<'s> Candidates<'s> {
    fn gather(state: &'s State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>) -> Candidates<'s> {
        let mut by_id = Vec::new();
        for e in state.free_engines() {
            if lost.contains(&e) || in_flight.is_lost(e) {
                continue;
            }
            let engine = state.engine(e);
            let used = engine.used + in_flight.booked_slots(e);
            if used < engine.slots {
                by_id.push(Candidate { engine: e, slots: engine.slots, used });
            }
        }
        by_id.sort_unstable_by(|a, b| state.engine(a.engine).id.cmp(&state.engine(b.engine).id));
        let n_open = by_id.len();
        Candidates { state, by_id, n_open, queues: Vec::new() }
    }

    fn load(&self, candidate: &Candidate) -> u64 {
        load_index(&self.state.policy.load_formula, self.state.engine(candidate.engine), candidate.used)
    }

    /// The best candidate (its position) of the category with room for one of its
    /// tasks, avoiding `avoid` while another fits.
    fn pick(&mut self, c: CategoryIdx, category: &Category, avoid: impl Fn(EngineIdx) -> bool) -> Option<u32> {
        if self.by_id.len() <= SCAN_CANDIDATES_MAX {
            return self.pick_by_scan(category, avoid);
        }
        let picked = self.pick_from_queue(c, category, &avoid);
        debug_assert_eq!(picked, self.pick_by_scan(category, &avoid), "the queue picks what the rule says");
        picked
    }

    /// The rule itself, by a walk over every candidate: the least (load, id) among
    /// those eligible with room, not avoided if any such is left.
    fn pick_by_scan(&self, category: &Category, avoid: impl Fn(EngineIdx) -> bool) -> Option<u32> {
        let slots = category.slots_per_task;
        let (mut best, mut best_avoided): (Option<Rank>, Option<Rank>) = (None, None);
        for (at, candidate) in self.by_id.iter().enumerate() {
            if candidate.slots - candidate.used < slots || !category.is_eligible(candidate.engine) {
                continue;
            }
            let rank = (self.load(candidate), at as u32);
            let best = if avoid(candidate.engine) { &mut best_avoided } else { &mut best };
            if best.is_none_or(|b| rank < b) {
                *best = Some(rank);
            }
        }
        best.or(best_avoided).map(|(_, at)| at)
    }

    fn pick_from_queue(&mut self, c: CategoryIdx, category: &Category, avoid: impl Fn(EngineIdx) -> bool) -> Option<u32> {
        let slots = category.slots_per_task;
        if self.queues.is_empty() {
            self.queues.resize_with(self.state.categories().len(), || None);
        }
        if self.queues[c.0 as usize].is_none() {
            let mut eligible = Vec::with_capacity(self.n_open.min(category.eligible_logged_in as usize));
            for (at, candidate) in self.by_id.iter().enumerate() {
                if candidate.slots - candidate.used >= slots && category.is_eligible(candidate.engine) {
                    eligible.push(Reverse((self.load(candidate), at as u32)));
                }
            }
            self.queues[c.0 as usize] = Some(BinaryHeap::from(eligible));
        }
        let queue = self.queues[c.0 as usize].as_mut().expect("just built");
        // The avoided engine, when it came up first: the fallback if nothing else fits.
        let mut avoided: Option<Reverse<Rank>> = None;
        let found = loop {
            let Some(&Reverse((load, at))) = queue.peek() else { break None };
            let candidate = &self.by_id[at as usize];
            if candidate.slots - candidate.used < slots {
                // Free slots only shrink during a run: no room for this category again.
                queue.pop();
                continue;
            }
            let now = load_index(&self.state.policy.load_formula, self.state.engine(candidate.engine), candidate.used);
            if now != load {
                queue.pop();
                queue.push(Reverse((now, at)));
                continue;
            }
            if avoided.is_none() && avoid(candidate.engine) {
                avoided = queue.pop();
                continue;
            }
            break Some(at);
        };
        let fallback = avoided.map(|Reverse((_, at))| at);
        if let Some(entry) = avoided {
            queue.push(entry);
        }
        found.or(fallback)
    }

    /// Books `slots` on the candidate at `at`; returns its engine.
    fn book(&mut self, at: u32, slots: u32) -> EngineIdx {
        let candidate = &mut self.by_id[at as usize];
        assert!(candidate.used < candidate.slots && candidate.slots - candidate.used >= slots, "booked a full engine");
        candidate.used += slots;
        if candidate.used == candidate.slots {
            self.n_open -= 1;
        }
        candidate.engine
    }

    fn is_empty(&self) -> bool {
        self.n_open == 0
    }

    /// Free slots over all candidates: at most this many dispatches fit.
    fn free_slots(&self) -> usize {
        self.by_id.iter().map(|candidate| (candidate.slots - candidate.used) as usize).sum()
    }
}

pub fn fill_free_slots(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Vec<Order>) {
    let mut candidates = Candidates::gather(state, in_flight, lost);
    let budget = state.policy.dispatches_per_run_max as usize;
    orders.reserve(budget.min(candidates.free_slots()));
    let mut n_dispatched = 0;
    let mut exhausted = vec![false; state.categories().len()];
    for rank in state.runnable_jobs() {
        if candidates.is_empty() || n_dispatched == budget {
            break;
        }
        let job = state.job(rank.job);
        let c = job.category.0 as usize;
        if exhausted[c] || job.counts.waiting <= in_flight.dispatched_of_job(rank.job) {
            continue;
        }
        let category = state.category(job.category);
        assert_eq!(category.slots_per_task, job.slots_per_task, "a category is one requirement and one slot count");
        for index in job.waiting_tasks() {
            let key = TaskKey { job: rank.job, index };
            if in_flight.is_dispatched(key) {
                continue;
            }
            let task = state.task(key);
            let Some(at) = candidates.pick(job.category, category, |e| failed_here_last(&task, e)) else {
                exhausted[c] = true;
                break;
            };
            let e = candidates.book(at, job.slots_per_task);
            orders.push(Order::Dispatch {
                task: state.task_ref(key),
                attempt: task.attempts + 1,
                engine: state.engine(e).id.clone(),
            });
            n_dispatched += 1;
            if candidates.is_empty() || n_dispatched == budget {
                break;
            }
        }
    }
}
