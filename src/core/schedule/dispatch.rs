//! Matching waiting tasks to free engines.
//!
//! Ordering: jobs in `State::runnable` order (priority, then submission). Within a
//! job: its front (queue jumps, copies rescheduled first), retries, fresh tasks by
//! index, its back (other redundant copies). A task whose dependencies have not
//! ended is passed over, and so is one no free engine may take: the engine goes to
//! the first task it is eligible for (GridServer's discriminator rule).
//!
//! Ranking, best first (Nomad's rank stage, as one integer tuple so ties are exact):
//! 1. the engine tier (policy `engine_tiers`): a higher tier always wins;
//! 2. the score, highest first: the job's and task's affinity preferences, task
//!    affinity to the engines that ran the named tasks, minus the greylist
//!    penalty of each failure the engine had on the job;
//! 3. the load index (Grid Engine's load formula), lowest first;
//! 4. the engine id.
//!
//! Filters (each also a rule of [`super::filters`], which `why` reports): the
//! task's category (requirements, discriminator, slots, root library held) as a
//! precomputed bitset; the job's blacklist; for a redundant copy, the engines
//! already running the task; for a retry, the engine it last failed on, as long
//! as another logged-in engine could run it (busy or not).
//!
//! Cost: each category examined in a run gets its own queue of the candidates
//! eligible for it, ranked by (tier, load, id), so a pick never walks past engines
//! the category cannot use. Booking a slot raises an engine's load index; rather
//! than update every queue holding the engine, a queue re-files an entry whose load
//! has changed when it comes to the top (loads only rise during a run, so the first
//! up-to-date entry is the true minimum). A pick is O(log n) amortised, however
//! narrow the category. Jobs that score engines (affinity, greylisting, task
//! affinity) rank their candidates one by one instead: O(candidates) a pick, paid
//! only by the jobs that ask for it. With few candidates (a run after a completion
//! or two) every pick walks them; in debug builds every queued pick is checked
//! against that walk.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use super::filters::{self, failed_here_last};
use super::{InFlight, Orders};
use crate::core::event::{LoadFormula, Order};
use crate::core::state::{Category, CategoryIdx, Engine, EngineIdx, Job, JobIdx, State, TaskKey};

/// Grid Engine's load formula, in milli-units: lower is chosen first.
pub fn load_index(formula: &LoadFormula, engine: &Engine, used_slots: u32) -> u64 {
    let slots_part = u64::from(used_slots) * 1000 / u64::from(engine.slots.max(1));
    u64::from(formula.slots_weight) * slots_part
        + u64::from(formula.load_weight) * u64::from(engine.load.load_per_core_milli)
}

/// What one task adds to an engine's score, on top of its job's.
pub const TASK_AFFINITY_SCORE: i64 = 1_000;

/// The part of the score shared by every task of the job.
pub fn job_score(state: &State, job: &Job, e: EngineIdx) -> i64 {
    let engine = state.engine(e);
    let mut score = crate::core::state::preference_score(&job.affinity, engine);
    if job.options.engine_greylisting {
        let failures = job.failures_by_engine.get(&e).copied().unwrap_or(0);
        score -= i64::from(failures) * i64::from(state.policy.greylist_affinity);
    }
    score
}

/// The part of the score a task's own conditions add.
pub fn task_score(state: &State, job: &Job, task_index: u32, e: EngineIdx) -> i64 {
    let Some(condition) = job.condition(task_index) else { return 0 };
    let mut score = crate::core::state::preference_score(&condition.affinity, state.engine(e));
    for &target in &condition.task_affinity {
        if job.task(target).and_then(|task| task.last_engine.get()) == Some(e) {
            score += TASK_AFFINITY_SCORE;
        }
    }
    score
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

/// Most waiting tasks one job may pass over in a walk (tasks whose dependencies
/// have not ended, or that no free engine may take), so a job of a million held
/// tasks costs a bounded walk. A job walks twice at most per run: in queue
/// order from its front, then, if that walk was cut short, over its fresh tasks
/// beyond it from a point that moves with the log ([`resume_point`]), so tasks
/// behind any number of held ones are reached in some run, not never.
pub const PASSED_OVER_PER_JOB_MAX: u32 = 10_000;

/// Where a job's second walk starts among its fresh tasks: drawn from the
/// policy's seed and the sequence the run is based on, so replay agrees.
fn resume_point(state: &State, j: JobIdx) -> u64 {
    crate::core::rng::SplitMix64::for_sequence(state.policy.seed ^ u64::from(j.0), state.last_seq.0).next_u64()
}

/// (tier, negated score, load index, position in `Candidates::by_id`): the rank
/// of a candidate, least first; the position stands for the engine id.
type Rank = (u32, i64, u64, u32);

/// Candidates ranked, least rank first.
type RankQueue = BinaryHeap<Reverse<Rank>>;

/// How one pick chooses: which engines it may not use, and the score of each
/// (absent parts score 0).
struct PickRules<'a> {
    excluded: &'a dyn Fn(EngineIdx) -> bool,
    /// The job's share of the score (affinity, greylisting): the same for every
    /// task of the job within a run, so a queue ranked by it serves them all.
    job_score: Option<(JobIdx, &'a dyn Fn(EngineIdx) -> i64)>,
    /// The task's own share (its preferences, task affinity): ranked by a walk.
    task_score: Option<&'a dyn Fn(EngineIdx) -> i64>,
}

impl PickRules<'_> {
    fn score(&self, e: EngineIdx) -> i64 {
        self.job_score.map_or(0, |(_, score)| score(e)) + self.task_score.map_or(0, |score| score(e))
    }
}

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
    queues: Vec<Option<RankQueue>>,
    /// The same for the (job, category) being served when the job scores
    /// engines: ranked with its score, built when the job is reached, dropped
    /// when the run moves on.
    job_queue: Option<((JobIdx, CategoryIdx), RankQueue)>,
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
        Candidates { state, by_id, n_open, queues: Vec::new(), job_queue: None }
    }

    fn load(&self, candidate: &Candidate) -> u64 {
        load_index(&self.state.policy.load_formula, self.state.engine(candidate.engine), candidate.used)
    }

    fn tier(&self, candidate: &Candidate) -> u32 {
        self.state.engine(candidate.engine).tier
    }

    /// The best candidate (its position) of the category with room for one of its
    /// tasks, under the rules.
    fn pick(&mut self, c: CategoryIdx, category: &Category, rules: &PickRules) -> Option<u32> {
        if self.by_id.len() <= SCAN_CANDIDATES_MAX || rules.task_score.is_some() {
            return self.pick_by_scan(category, rules);
        }
        let picked = self.pick_from_queue(c, category, rules);
        debug_assert_eq!(picked, self.pick_by_scan(category, rules), "the queue picks what the rule says");
        picked
    }

    /// The rule itself, by a walk over every candidate: the least rank among
    /// those eligible with room and not excluded.
    fn pick_by_scan(&self, category: &Category, rules: &PickRules) -> Option<u32> {
        let slots = category.slots_per_task;
        let mut best: Option<Rank> = None;
        for (at, candidate) in self.by_id.iter().enumerate() {
            if candidate.slots - candidate.used < slots
                || !category.is_eligible(candidate.engine)
                || (rules.excluded)(candidate.engine)
            {
                continue;
            }
            let rank = (self.tier(candidate), -rules.score(candidate.engine), self.load(candidate), at as u32);
            if best.is_none_or(|b| rank < b) {
                best = Some(rank);
            }
        }
        best.map(|(.., at)| at)
    }

    /// The eligible candidates with room, ranked with `score`.
    fn ranked(&self, category: &Category, score: impl Fn(EngineIdx) -> i64) -> RankQueue {
        let slots = category.slots_per_task;
        let mut eligible = Vec::with_capacity(self.n_open.min(category.eligible_logged_in as usize));
        for (at, candidate) in self.by_id.iter().enumerate() {
            if candidate.slots - candidate.used >= slots && category.is_eligible(candidate.engine) {
                eligible.push(Reverse((self.tier(candidate), -score(candidate.engine), self.load(candidate), at as u32)));
            }
        }
        BinaryHeap::from(eligible)
    }

    fn pick_from_queue(&mut self, c: CategoryIdx, category: &Category, rules: &PickRules) -> Option<u32> {
        let queue = match rules.job_score {
            None => {
                if self.queues.is_empty() {
                    self.queues.resize_with(self.state.categories().len(), || None);
                }
                if self.queues[c.0 as usize].is_none() {
                    self.queues[c.0 as usize] = Some(self.ranked(category, |_| 0));
                }
                self.queues[c.0 as usize].as_mut().expect("just built")
            }
            Some((j, score)) => {
                if self.job_queue.as_ref().is_none_or(|(key, _)| *key != (j, c)) {
                    self.job_queue = Some(((j, c), self.ranked(category, score)));
                }
                &mut self.job_queue.as_mut().expect("just built").1
            }
        };
        pop_best(queue, &self.by_id, self.state, category.slots_per_task, rules)
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

}

/// The best entry of a ranked queue under the rules. Entries without room for
/// the category are dropped (free slots only shrink during a run); entries whose
/// load has risen are re-filed (loads only rise, so the first up-to-date entry is
/// the true best); excluded ones are put back afterwards, for other picks.
fn pop_best(
    queue: &mut RankQueue,
    by_id: &[Candidate],
    state: &State,
    slots: u32,
    rules: &PickRules,
) -> Option<u32> {
    let mut set_aside: Vec<Reverse<Rank>> = Vec::new();
    let found = loop {
        let Some(&Reverse((tier, neg_score, load, at))) = queue.peek() else { break None };
        let candidate = &by_id[at as usize];
        if candidate.slots - candidate.used < slots {
            queue.pop();
            continue;
        }
        let now = load_index(&state.policy.load_formula, state.engine(candidate.engine), candidate.used);
        if now != load {
            queue.pop();
            queue.push(Reverse((tier, neg_score, now, at)));
            continue;
        }
        if (rules.excluded)(candidate.engine) {
            set_aside.extend(queue.pop());
            continue;
        }
        break Some(at);
    };
    queue.extend(set_aside);
    found
}

pub fn fill_free_slots(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    let mut candidates = Candidates::gather(state, in_flight, lost);
    let budget = state.policy.dispatches_per_run_max as usize;
    let mut n_dispatched = 0;
    let mut exhausted = vec![false; state.categories().len()];
    for rank in state.runnable_jobs() {
        if candidates.is_empty() || n_dispatched == budget || !orders.has_room() {
            break;
        }
        let j = rank.job;
        let job = state.job(j);
        if exhausted[job.category.0 as usize] && job.conditions_are_empty() {
            continue;
        }
        if job.n_wanting_dispatch() <= in_flight.dispatched_of_job(j) {
            continue;
        }
        let job_has_exclusions = !job.blacklist.is_empty() || !job.copies_waiting_is_empty();
        let scored_job = job.has_scores();
        let mut n_passed_over = 0;
        // The first walk, and the fresh task of highest index it saw (the
        // second walk starts past it, so no task is looked at twice).
        let cut_short = std::cell::Cell::new(false);
        let first_walk_fresh_max = std::cell::Cell::new(None::<u32>);
        let first_walk = job.waiting_tasks().take_while(|_| !cut_short.get()).inspect(|&index| {
            let task = &job.tasks[index as usize];
            if task.is_fresh() {
                first_walk_fresh_max.set(Some(first_walk_fresh_max.get().map_or(index, |max| max.max(index))));
            }
        });
        let second_walk = std::iter::once(()).filter(|_| cut_short.get()).flat_map(|()| {
            let from = first_walk_fresh_max.get().map_or(job.fresh_next, |max| max + 1);
            job.fresh_waiting_rotated(from, resume_point(state, j))
        });
        for index in first_walk.chain(second_walk) {
            let key = TaskKey { job: j, index };
            if in_flight.is_dispatched(key) {
                continue;
            }
            let task = state.task(key);
            let condition = job.condition(index);
            let c = condition.and_then(|condition| condition.category).unwrap_or(job.category);
            let is_copy = task.is_live();
            let held = condition.is_some_and(|_| {
                filters::dependencies_ended(state, key).is_err() || state.failed_dependency_of(key).is_some()
            });
            if held || exhausted[c.0 as usize] {
                n_passed_over += 1;
                if n_passed_over == PASSED_OVER_PER_JOB_MAX {
                    if cut_short.replace(true) {
                        break;
                    }
                    n_passed_over = 0;
                }
                continue;
            }
            let category = state.category(c);
            assert_eq!(category.slots_per_task, job.slots_per_task, "a category is one requirement and one slot count");
            // A retry does not go back to the engine it just failed on while any
            // other logged-in engine could run it, even a busy one: it waits for
            // that one. Only when no other engine could ever take it does it go back.
            let avoid_strictly = task
                .last_failed_on
                .get()
                .filter(|_| task.status == crate::core::state::TaskStatus::Waiting)
                .is_some_and(|failed| another_engine_could_run(state, j, category, failed));
            let running_here = if is_copy { state.live_attempts_of(key) } else { Vec::new() };
            let excluded = |e: EngineIdx| {
                job.blacklist.contains(&e)
                    || state.is_blacklist_pending(j, e)
                    || running_here.iter().any(|live| live.engine == e)
                    || (avoid_strictly && failed_here_last(&task, e))
            };
            let task_scored = condition.is_some_and(|condition| !condition.affinity.is_empty() || !condition.task_affinity.is_empty());
            let job_part = |e: EngineIdx| job_score(state, job, e);
            let task_part = |e: EngineIdx| task_score(state, job, index, e);
            let rules = PickRules {
                excluded: &excluded,
                job_score: scored_job.then_some((j, &job_part as &dyn Fn(EngineIdx) -> i64)),
                task_score: task_scored.then_some(&task_part as &dyn Fn(EngineIdx) -> i64),
            };
            let Some(at) = candidates.pick(c, category, &rules) else {
                // Nothing free may take it. Unless the job's own exclusions were in
                // the way, nothing free may take any task of the category this run.
                let job_specific = job_has_exclusions || is_copy || avoid_strictly || state.has_pending_blacklist(j);
                if !job_specific {
                    exhausted[c.0 as usize] = true;
                }
                if c == job.category && !job_specific && job.conditions_are_empty() {
                    break;
                }
                n_passed_over += 1;
                if n_passed_over == PASSED_OVER_PER_JOB_MAX {
                    if cut_short.replace(true) {
                        break;
                    }
                    n_passed_over = 0;
                }
                continue;
            };
            let e = candidates.book(at, job.slots_per_task);
            let engine = state.engine(e);
            let dispatch =
                Order::Dispatch { task: state.task_ref(key), attempt: task.attempts + 1, engine: engine.id.clone(), epoch: engine.epoch };
            if !orders.push(dispatch) {
                break;
            }
            n_dispatched += 1;
            if candidates.is_empty() || n_dispatched == budget || !orders.has_room() {
                break;
            }
        }
    }
}

/// Whether a logged-in engine other than `failed`, eligible for the category and
/// not blacklisted by the job (nor about to be), could run the job's task.
fn another_engine_could_run(state: &State, j: JobIdx, category: &Category, failed: EngineIdx) -> bool {
    let counted = |e: EngineIdx| {
        category.is_eligible(e) && state.engine(e).status == crate::core::state::EngineStatus::LoggedIn
    };
    // A pair is pending or blacklisted, never both (an invariant of the state).
    let barred = state.job(j).blacklist.iter().copied().chain(state.pending_blacklists_of(j));
    let n_barred = barred.filter(|&e| e != failed && counted(e)).count() as u32;
    category.eligible_logged_in - u32::from(counted(failed)) > n_barred
}

/// The job's rank among runnable jobs, for `why`: how many are examined before it.
pub fn jobs_ahead(state: &State, j: JobIdx) -> usize {
    state.runnable_jobs().take_while(|rank| rank.job != j).count()
}
