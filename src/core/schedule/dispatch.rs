//! Matching waiting tasks to free engines.
//!
//! Ordering: jobs in `State::runnable` order (priority, then submission). Within a
//! job: retries, then fresh tasks by index. Candidates: the engines with a free
//! slot, kept for the run in a `BTreeSet` by (load index, engine id), so the least
//! loaded engine comes first and ties go to the smaller id. A category that finds
//! no candidate is exhausted for the run: every later job of it is skipped at once.

use std::collections::{BTreeMap, BTreeSet};

use super::filters::failed_here_last;
use super::InFlight;
use crate::core::event::{LoadFormula, Order};
use crate::core::ids::EngineId;
use crate::core::state::{Category, Engine, EngineIdx, State, TaskKey};

/// Grid Engine's load formula, in milli-units: lower is chosen first.
pub fn load_index(formula: &LoadFormula, engine: &Engine, used_slots: u32) -> u64 {
    let slots_part = u64::from(used_slots) * 1000 / u64::from(engine.slots.max(1));
    u64::from(formula.slots_weight) * slots_part
        + u64::from(formula.load_weight) * u64::from(engine.load.load_per_core_milli)
}

/// The free engines of one run, ranked; updated as the run books slots.
struct Candidates {
    ranked: BTreeSet<(u64, EngineId, EngineIdx)>,
    /// Slots in use per candidate, including what this run and the orders in flight booked.
    used: BTreeMap<EngineIdx, u32>,
}

impl Candidates {
    fn gather(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>) -> Candidates {
        let formula = &state.policy.load_formula;
        let mut candidates = Candidates { ranked: BTreeSet::new(), used: BTreeMap::new() };
        for e in state.free_engines() {
            if lost.contains(&e) || in_flight.is_lost(e) {
                continue;
            }
            let engine = state.engine(e);
            let used = engine.used + in_flight.booked_slots(e);
            if used < engine.slots {
                candidates.ranked.insert((load_index(formula, engine, used), engine.id.clone(), e));
                candidates.used.insert(e, used);
            }
        }
        candidates
    }

    /// The best engine of the category with room for `slots`, avoiding `avoid` while another fits.
    fn pick(&self, state: &State, category: &Category, slots: u32, avoid: impl Fn(EngineIdx) -> bool) -> Option<EngineIdx> {
        let mut fallback = None;
        for &(_, _, e) in &self.ranked {
            if !category.is_eligible(e) || state.engine(e).slots - self.used[&e] < slots {
                continue;
            }
            if avoid(e) {
                fallback.get_or_insert(e);
                continue;
            }
            return Some(e);
        }
        fallback
    }

    fn book(&mut self, state: &State, e: EngineIdx, slots: u32) {
        let engine = state.engine(e);
        let formula = &state.policy.load_formula;
        let used = self.used[&e];
        self.ranked.remove(&(load_index(formula, engine, used), engine.id.clone(), e));
        let used = used + slots;
        if used < engine.slots {
            self.ranked.insert((load_index(formula, engine, used), engine.id.clone(), e));
            self.used.insert(e, used);
        } else {
            self.used.remove(&e);
        }
    }

    fn is_empty(&self) -> bool {
        self.ranked.is_empty()
    }
}

pub fn fill_free_slots(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Vec<Order>) {
    let mut candidates = Candidates::gather(state, in_flight, lost);
    let budget = state.policy.dispatches_per_run_max as usize;
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
        for index in job.waiting_tasks() {
            let key = TaskKey { job: rank.job, index };
            if in_flight.is_dispatched(key) {
                continue;
            }
            let task = state.task(key);
            let Some(e) = candidates.pick(state, category, job.slots_per_task, |e| failed_here_last(&task, e)) else {
                exhausted[c] = true;
                break;
            };
            candidates.book(state, e, job.slots_per_task);
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
