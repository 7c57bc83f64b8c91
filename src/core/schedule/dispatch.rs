//! Matching waiting tasks to free engines.
//!
//! Ordering: jobs in `State::runnable` order (priority, then submission). Within a
//! job: its front (queue jumps, copies rescheduled first), retries, fresh tasks by
//! index, its back (other redundant copies). A task whose dependencies have not
//! ended is passed over, and so is one no free engine may take: the engine goes to
//! the first task it is eligible for (GridServer's discriminator rule).
//!
//! Ranking, best first (Nomad's rank stage, as one integer tuple so ties are exact):
//! 1. the engine tier (policy `engine_tiers`): a higher tier always wins,
//!    then the job's soft request ([`super::soft`], Grid Engine's
//!    `qsub -soft`): engines that meet it first;
//! 2. the score, highest first: the job's and task's affinity preferences, task
//!    affinity to the engines that ran the named tasks, minus the greylist
//!    penalty of each failure the engine had on the job;
//! 3. the queue sort key ([`super::queue_sort`]: Grid Engine's
//!    `queue_sort_method`, over the load formula's index and `seq_no`), lowest first;
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
//!
//! A family whose filter judges engines (CiGri's affinity, test campaigns and
//! sinks) says how widely its verdicts on a task are shared
//! ([`families::FilterScope`]). The tasks of one class get, per category, a
//! queue without the engines the filter refuses them, asked of the family once
//! per run and class: a campaign kept off a cluster never pops that cluster's
//! engines. A task refused by every free engine ends its job's walk, and closes
//! the category to its class for the run, when the refusal holds for those
//! tasks too ([`RefusalScope`]): a campaign that can go nowhere costs one pick,
//! not one per waiting task.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use crate::core::family::{self as families, EngineOrder, FilterScope, JobOrder, Ordering};
use super::filters::{self, RefusalScope, TaskRules};
use super::budget::Orders;
use super::candidate::Candidate;
use super::in_flight::InFlight;
use crate::core::event::Order;
use crate::core::state::{
    Category, CategoryIdx, CompiledPreference, EngineIdx, Job, JobIdx, RotatedCursor, State, TaskKey, WaitingCursor,
};

pub use super::queue_sort::load_index;
use super::parallel::Offer;
use super::reservation::{end_from, Reservations};
use super::queue_sort::{SortKey, sort_key};

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


impl Candidate {
    /// `slots`: the engine's, or fewer when flood control holds some back.
    fn new(state: &State, engine: EngineIdx, slots: u32, used: u32) -> Candidate {
        let mut candidate = Candidate { engine, slots, used, key: (0, 0) };
        candidate.key = candidate_key(state, &candidate);
        candidate
    }
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

/// (tier, soft request unmet, negated score, queue sort key, position in
/// `Candidates::by_id`): the rank of a candidate, least first; the position
/// stands for the engine id.
type Rank = (u32, bool, i64, SortKey, u32);

/// What a job's own queue ranks for: the job, the category, its filter class.
type JobQueueKey = (JobIdx, CategoryIdx, Option<u64>);

/// Candidates ranked, least rank first, in two parts.
#[derive(Default)]
struct RankQueue {
    heap: BinaryHeap<Reverse<Rank>>,
    /// Entries whose engine a reservation of the run holds, taken out of the
    /// heap when they come to its top and compared by a walk instead. A
    /// reservation refuses every task that would end past its start, and its
    /// engine, whose slots it keeps free, tends to rank first: left in the
    /// heap it would be popped and put back by every later pick. Reservations
    /// only grow within a run, so an entry never returns to the heap; there
    /// are at most `max_reservation` × [`PARALLEL_PARTS_MAX`] of them.
    reserved: Vec<Rank>,
}

impl RankQueue {
    fn from_ranks(ranks: Vec<Reverse<Rank>>) -> RankQueue {
        RankQueue { heap: BinaryHeap::from(ranks), reserved: Vec::new() }
    }
}

/// How one pick chooses: which engines it may not use, and the score of each
/// (absent parts score 0).
struct PickRules<'a> {
    excluded: &'a dyn Fn(EngineIdx) -> bool,
    /// The job's share of the score (affinity, greylisting): the same for every
    /// task of the job within a run, so a queue ranked by it serves them all.
    job_score: Option<(JobIdx, &'a dyn Fn(EngineIdx) -> i64)>,
    /// The task's own share (its preferences, task affinity): ranked by a walk.
    task_score: Option<&'a dyn Fn(EngineIdx) -> i64>,
    /// The job's soft request ([`super::soft`]), if any.
    soft: Option<&'a CompiledPreference>,
    /// Whether a reservation of the run holds the engine (see [`RankQueue::reserved`]).
    reserved: &'a dyn Fn(EngineIdx) -> bool,
    /// The class of the family's filter the task belongs to
    /// ([`families::FilterScope::Class`]) and the engines the filter refuses
    /// it: a queue per (category, class) leaves those out once, rather than
    /// every pick setting them aside again.
    class: Option<(u64, &'a dyn Fn(EngineIdx) -> bool)>,
}

impl PickRules<'_> {
    fn score(&self, e: EngineIdx) -> i64 {
        self.job_score.map_or(0, |(_, score)| score(e)) + self.task_score.map_or(0, |score| score(e))
    }
}

/// Whether the engine fails the soft request (false without one).
fn soft_unmet(state: &State, soft: Option<&CompiledPreference>, e: EngineIdx) -> bool {
    soft.is_some_and(|soft| !soft.holds(state.engine(e)))
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
    /// The same for the (job, category, filter class) being served when the
    /// job scores engines: ranked with its score, built when the job is
    /// reached, dropped when the run moves on.
    job_queue: Option<(JobQueueKey, RankQueue)>,
    /// The same per (category, soft request) for jobs with a soft request and
    /// no score: shared by every job of the category (and filter class) asking the same.
    soft_queues: BTreeMap<(CategoryIdx, Option<u64>), BTreeMap<String, RankQueue>>,
    /// The same per (category, class of the family's filter), without the
    /// engines the class's filter refuses.
    class_queues: BTreeMap<(CategoryIdx, u64), RankQueue>,
}

impl<'s> Candidates<'s> {
    fn gather(state: &'s State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>) -> Candidates<'s> {
        let mut by_id = Vec::new();
        // Flood control: gateways' unstarted slots (empty with it off).
        let flood_held = super::flood::held_slots(state);
        for e in state.free_engines() {
            if lost.contains(&e) || in_flight.is_lost(e) {
                continue;
            }
            let engine = state.engine(e);
            let used = engine.used + in_flight.booked_slots(e);
            let held = flood_held.get(&e).map_or(0, |&(held, _)| held) + in_flight.booked_slots(e);
            let slots = match super::flood::room(state, e, held) {
                Some(room) => engine.slots.min(used + room),
                None => engine.slots,
            };
            if used < slots {
                by_id.push(Candidate::new(state, e, slots, used));
            }
        }
        by_id.sort_unstable_by(|a, b| state.engine(a.engine).id.cmp(&state.engine(b.engine).id));
        let n_open = by_id.len();
        Candidates {
            state,
            by_id,
            n_open,
            queues: Vec::new(),
            job_queue: None,
            soft_queues: BTreeMap::new(),
            class_queues: BTreeMap::new(),
        }
    }

    fn load(&self, candidate: &Candidate) -> SortKey {
        candidate.key
    }

    fn tier(&self, candidate: &Candidate) -> u32 {
        self.state.engine(candidate.engine).tier
    }

    /// The best candidate (its position) of the category with room for one of its
    /// tasks, under the rules.
    fn pick(&mut self, c: CategoryIdx, category: &Category, rules: &PickRules) -> Option<u32> {
        if !self.picks_from_queues(rules.task_score.is_some()) {
            return self.pick_by_scan(category, rules);
        }
        let picked = self.pick_from_queue(c, category, rules);
        // Checked on every pick of the unit tests, in release too (a walk per
        // pick would undo what the queue saves in production).
        #[cfg(test)]
        assert_eq!(picked, self.pick_by_scan(category, rules), "the queue picks what the rule says");
        picked
    }

    /// Whether a pick draws from a ranked queue (else it walks every candidate).
    fn picks_from_queues(&self, task_scored: bool) -> bool {
        self.by_id.len() > SCAN_CANDIDATES_MAX && !task_scored
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
            let unmet = soft_unmet(self.state, rules.soft, candidate.engine);
            let rank = (self.tier(candidate), unmet, -rules.score(candidate.engine), self.load(candidate), at as u32);
            if best.is_none_or(|b| rank < b) {
                best = Some(rank);
            }
        }
        best.map(|(.., at)| at)
    }

    /// The eligible candidates with room, ranked with `score`, without those
    /// the family's filter refuses the class of `rules` (if any).
    fn ranked(
        &self,
        category: &Category,
        score: impl Fn(EngineIdx) -> i64,
        soft: Option<&CompiledPreference>,
        rules: &PickRules,
    ) -> RankQueue {
        let slots = category.slots_per_task;
        let refused = |e: EngineIdx| rules.class.is_some_and(|(_, refused)| refused(e));
        let mut eligible = Vec::with_capacity(self.n_open.min(category.eligible_logged_in as usize));
        for (at, candidate) in self.by_id.iter().enumerate() {
            if candidate.slots - candidate.used >= slots && category.is_eligible(candidate.engine) && !refused(candidate.engine) {
                let e = candidate.engine;
                let unmet = soft_unmet(self.state, soft, e);
                eligible.push(Reverse((self.tier(candidate), unmet, -score(e), self.load(candidate), at as u32)));
            }
        }
        RankQueue::from_ranks(eligible)
    }

    fn pick_from_queue(&mut self, c: CategoryIdx, category: &Category, rules: &PickRules) -> Option<u32> {
        let slots = category.slots_per_task;
        let (queue, by_id) = self.queue_for(c, category, rules)?;
        pop_best(queue, by_id, slots, rules)
    }

    /// The queue a pick under these rules draws from, built on first use, and
    /// the candidates it ranks.
    fn queue_for(&mut self, c: CategoryIdx, category: &Category, rules: &PickRules) -> Option<(&mut RankQueue, &[Candidate])> {
        let class = rules.class.map(|(class, _)| class);
        let queue = match (rules.job_score, rules.soft, class) {
            (None, Some(soft), _) => {
                let built = self.soft_queues.get(&(c, class)).is_some_and(|queues| queues.contains_key(&soft.when));
                // Built once per (category, class, soft request) and run: the key is cloned only then.
                let fresh = (!built).then(|| self.ranked(category, |_| 0, Some(soft), rules));
                let queues = self.soft_queues.entry((c, class)).or_default();
                match fresh {
                    Some(queue) => queues.entry(soft.when.clone()).or_insert(queue),
                    // Present, as `built` said: no engine is offered rather than a panic.
                    None => queues.get_mut(&soft.when)?,
                }
            }
            (None, None, Some(class)) => {
                let fresh = (!self.class_queues.contains_key(&(c, class))).then(|| self.ranked(category, |_| 0, None, rules));
                let queues = &mut self.class_queues;
                match fresh {
                    Some(queue) => queues.entry((c, class)).or_insert(queue),
                    None => queues.get_mut(&(c, class))?,
                }
            }
            (None, None, None) => {
                if self.queues.is_empty() {
                    self.queues.resize_with(self.state.categories().len(), || None);
                }
                if self.queues[c.0 as usize].is_none() {
                    self.queues[c.0 as usize] = Some(self.ranked(category, |_| 0, None, rules));
                }
                self.queues[c.0 as usize].get_or_insert_with(RankQueue::default)
            }
            (Some((j, score)), _, _) => {
                if self.job_queue.as_ref().is_none_or(|(key, _)| *key != (j, c, class)) {
                    self.job_queue = Some(((j, c, class), self.ranked(category, score, rules.soft, rules)));
                }
                &mut self.job_queue.get_or_insert_with(|| ((j, c, class), RankQueue::default())).1
            }
        };
        Some((queue, &self.by_id))
    }

    /// Books `slots` on the candidate at `at`; returns its engine.
    fn book(&mut self, at: u32, slots: u32) -> EngineIdx {
        let candidate = &mut self.by_id[at as usize];
        assert!(candidate.used < candidate.slots && candidate.slots - candidate.used >= slots, "booked a full engine");
        candidate.used += slots;
        candidate.key = candidate_key(self.state, candidate);
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
/// the true best); entries of reserved engines move to the queue's walked part;
/// excluded ones are put back afterwards, for other picks. The best of the
/// heap is then compared with the best of the walked part.
fn pop_best(queue: &mut RankQueue, by_id: &[Candidate], slots: u32, rules: &PickRules) -> Option<u32> {
    let mut set_aside: Vec<Reverse<Rank>> = Vec::new();
    let from_heap = loop {
        let Some(&Reverse((tier, unmet, neg_score, load, at))) = queue.heap.peek() else { break None };
        let candidate = &by_id[at as usize];
        if candidate.slots - candidate.used < slots {
            queue.heap.pop();
            continue;
        }
        let now = candidate.key;
        if now != load {
            queue.heap.pop();
            queue.heap.push(Reverse((tier, unmet, neg_score, now, at)));
            continue;
        }
        if (rules.reserved)(candidate.engine) {
            queue.heap.pop();
            queue.reserved.push((tier, unmet, neg_score, now, at));
            continue;
        }
        if (rules.excluded)(candidate.engine) {
            set_aside.extend(queue.heap.pop());
            continue;
        }
        break Some((tier, unmet, neg_score, now, at));
    };
    queue.heap.extend(set_aside);
    queue.reserved.retain(|&(.., at)| {
        let candidate = &by_id[at as usize];
        candidate.slots - candidate.used >= slots
    });
    let from_reserved = queue
        .reserved
        .iter()
        .map(|&(tier, unmet, neg_score, _, at)| (tier, unmet, neg_score, by_id[at as usize].key, at))
        .filter(|&(.., at)| !(rules.excluded)(by_id[at as usize].engine))
        .min();
    match (from_heap, from_reserved) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
    .map(|(.., at)| at)
}

/// A candidate's queue sort key now ([`super::queue_sort`]).
fn candidate_key(state: &State, candidate: &Candidate) -> SortKey {
    let policy = &state.policy;
    sort_key(policy.queue_sort_method, &policy.load_formula, state.engine(candidate.engine), candidate.used)
}

/// Fills free slots in the order the policy's family gives (see [`crate::core::family`]).
/// A run with no free slot to fill stops before the family's ordering is
/// built: an ordering walks the runnable jobs (and some compute figures over
/// every job and user), a cost a run that can place nothing need not pay.
pub fn fill_free_slots(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    let candidates = Candidates::gather(state, in_flight, lost);
    if candidates.is_empty() {
        return;
    }
    let mut ordering = families::ordering(state, in_flight);
    ordering.orders_so_far(state, in_flight, orders.as_slice());
    fill_in_order(state, in_flight, candidates, orders, ordering, false);
}

/// The reservations a dispatch run over this state would make (for `why`):
/// the run itself, its orders dropped.
pub fn reservations_now(state: &State) -> Vec<super::reservation::Reservation> {
    if state.policy.reservation.max_reservation == 0 {
        return Vec::new();
    }
    let in_flight = InFlight::default();
    let mut scratch = Orders::new();
    let ordering = families::ordering(state, &in_flight);
    let candidates = Candidates::gather(state, &in_flight, &BTreeSet::new());
    fill_in_order(state, &in_flight, candidates, &mut scratch, ordering, true)
}

/// The dispatch loop, in either shape a family's ordering asks for.
fn fill_in_order<'s>(
    state: &'s State,
    in_flight: &'s InFlight,
    candidates: Candidates<'s>,
    orders: &mut Orders,
    ordering: Ordering,
    explaining: bool,
) -> Vec<super::reservation::Reservation> {
    let mut run = Run {
        state,
        in_flight,
        candidates,
        budget: state.policy.dispatches_per_run_max as usize,
        n_dispatched: 0,
        exhausted: vec![false; state.categories().len()],
        exhausted_classes: BTreeSet::new(),
        class_refused: BTreeMap::new(),
        reservations: Reservations::default(),
        positions: Vec::new(),
        sites: None,
        explaining,
    };
    match ordering {
        Ordering::JobFirst(order) => run.job_first(order, orders),
        Ordering::ResourceFirst(order) => run.resource_first(order, orders),
    }
    run.reservations.made()
}

/// One run of the dispatch loop: the free engines and what the run has booked.
struct Run<'s> {
    state: &'s State,
    in_flight: &'s InFlight,
    candidates: Candidates<'s>,
    budget: usize,
    n_dispatched: usize,
    /// Categories no free engine may take a task of, this run.
    exhausted: Vec<bool>,
    /// (category, class of the family's filter) pairs no free engine may
    /// take a task of, this run.
    exhausted_classes: BTreeSet<(CategoryIdx, u64)>,
    /// Per class of the family's filter, the engines it refuses (by engine
    /// index), asked of the family once per run and class.
    class_refused: BTreeMap<u64, Vec<bool>>,
    /// The run's reservations ([`super::reservation`]).
    reservations: Reservations,
    /// Per engine index, its position among the candidates plus one (0: none);
    /// built on the run's first reservation.
    positions: Vec<u32>,
    /// The sites of the logged-in engines, numbered on the run's first site
    /// task or reservation.
    sites: Option<super::parallel::SiteIndex>,
    /// A run for `why` ([`reservations_now`]): it goes on without a free slot,
    /// to find the reservations waiting jobs hold.
    explaining: bool,
}

/// How serving a job ended.
enum Served {
    /// It booked as many tasks as its ordering allowed before asking again.
    Quota,
    /// It has nothing more it can dispatch this run.
    Done,
    /// The run is over: no free slot, no budget or no room in the batch.
    RunOver,
}

/// What one waiting task came to.
enum TaskOutcome {
    Booked,
    /// Passed over (held, or nothing free may take it); the walk goes on.
    PassedOver,
    /// Nothing free may take any task of the job: its walk ends.
    JobDone,
    RunOver,
}

/// A job's walk through its waiting tasks within one run, resumable: in queue
/// order from its front, then, if that walk was cut short by
/// [`PASSED_OVER_PER_JOB_MAX`], over its fresh tasks beyond it from a point
/// that moves with the log ([`resume_point`]).
struct JobWalk {
    first: WaitingCursor,
    second: Option<RotatedCursor>,
    cut_short: bool,
    /// The fresh task of highest index the first walk saw (the second starts
    /// past it, so no task is looked at twice).
    first_walk_fresh_max: Option<u32>,
    n_passed_over: u32,
}

impl JobWalk {
    fn new() -> JobWalk {
        JobWalk { first: WaitingCursor::default(), second: None, cut_short: false, first_walk_fresh_max: None, n_passed_over: 0 }
    }

    fn next(&mut self, state: &State, j: JobIdx) -> Option<u32> {
        let job = state.job(j);
        if self.second.is_none() {
            if !self.cut_short {
                let index = job.next_waiting(&mut self.first)?;
                let task = &job.tasks[index as usize];
                if task.is_fresh() {
                    self.first_walk_fresh_max = Some(self.first_walk_fresh_max.map_or(index, |max| max.max(index)));
                }
                return Some(index);
            }
            let from = self.first_walk_fresh_max.map_or(job.fresh_next, |max| max + 1);
            self.second = Some(job.fresh_rotated_cursor(from, resume_point(state, j)));
        }
        job.next_fresh_rotated(self.second.as_mut().expect("just set"))
    }

    /// Counts a task passed over; false when the walk must end.
    fn pass_over(&mut self) -> bool {
        self.n_passed_over += 1;
        if self.n_passed_over == PASSED_OVER_PER_JOB_MAX {
            if std::mem::replace(&mut self.cut_short, true) {
                return false;
            }
            self.n_passed_over = 0;
        }
        true
    }
}

impl Run<'_> {
    fn is_over(&self, orders: &Orders) -> bool {
        (self.candidates.is_empty() && !self.explaining) || self.n_dispatched == self.budget || !orders.has_room()
    }

    /// Job-first: the ordering names the next job; the job is served until it
    /// has nothing more or, for an ordering that moves as slots are booked, for
    /// one booking before the ordering is asked again.
    fn job_first(&mut self, mut order: JobOrder, orders: &mut Orders) {
        let state = self.state;
        let mut walks: BTreeMap<JobIdx, JobWalk> = BTreeMap::new();
        let quota = if order.moves_on_booking() { 1 } else { u32::MAX };
        while let Some(j) = order.next(state) {
            if self.is_over(orders) {
                break;
            }
            let job = state.job(j);
            if self.exhausted[job.category.0 as usize] && job.conditions_are_empty() && !self.reservations.may_reserve(state, j) {
                continue;
            }
            if job.n_wanting_dispatch() <= self.in_flight.dispatched_of_job(j) {
                continue;
            }
            let mut walk = walks.remove(&j).unwrap_or_else(JobWalk::new);
            match self.serve_job(j, &mut walk, quota, orders) {
                Served::Quota => {
                    order.booked(state, j);
                    walks.insert(j, walk);
                }
                Served::Done => {}
                Served::RunOver => break,
            }
        }
    }

    /// Resource-first: the ordering names the next free engine and the jobs
    /// it would take, best first; the engine takes the first task it may.
    fn resource_first(&mut self, mut order: EngineOrder, orders: &mut Orders) {
        let state = self.state;
        while let Some(at) = order.next_engine(state, &self.candidates.by_id) {
            if self.is_over(orders) {
                break;
            }
            let e = self.candidates.by_id[at as usize].engine;
            let mut booked = None;
            let mut jobs = order.jobs_for(state, e);
            let mut asked_more = false;
            'jobs: loop {
                for j in jobs {
                    let mut walk = JobWalk::new();
                    while let Some(index) = walk.next(state, j) {
                        let key = TaskKey { job: j, index };
                        if self.in_flight.is_dispatched(key) || order.has_booked(key) {
                            continue;
                        }
                        match self.book_on(key, at, orders) {
                            TaskOutcome::Booked => {
                                booked = Some(key);
                                break 'jobs;
                            }
                            TaskOutcome::RunOver => return,
                            TaskOutcome::PassedOver | TaskOutcome::JobDone => {
                                if !walk.pass_over() {
                                    break;
                                }
                            }
                        }
                    }
                }
                if asked_more {
                    break;
                }
                asked_more = true;
                jobs = order.more_jobs_for(state);
            }
            order.engine_served(state, at, booked);
        }
    }

    /// Books the task on the candidate at `at` if every rule allows it there.
    fn book_on(&mut self, key: TaskKey, at: u32, orders: &mut Orders) -> TaskOutcome {
        let state = self.state;
        let job = state.job(key.job);
        let candidate = &self.candidates.by_id[at as usize];
        if self.is_held(key)
            || job.options.span == crate::core::event::Span::Site
            || candidate.slots - candidate.used < job.slots_per_task
            || !state.category(task_category(job, key.index)).is_eligible(candidate.engine)
            || TaskRules::new(state, key).check(candidate.engine).is_err()
        {
            return TaskOutcome::PassedOver;
        }
        self.dispatch(key, at, orders)
    }

    /// A task whose dependencies have not ended (or one of which failed) waits.
    fn is_held(&self, key: TaskKey) -> bool {
        self.state.job(key.job).condition(key.index).is_some_and(|_| {
            filters::dependencies_ended(self.state, key).is_err() || self.state.failed_dependency_of(key).is_some()
        })
    }

    /// Serves the job's waiting tasks in its walk order, for at most `quota` bookings.
    fn serve_job(&mut self, j: JobIdx, walk: &mut JobWalk, quota: u32, orders: &mut Orders) -> Served {
        let mut n_booked = 0;
        while let Some(index) = walk.next(self.state, j) {
            let key = TaskKey { job: j, index };
            if self.in_flight.is_dispatched(key) {
                continue;
            }
            match self.serve_task(key, orders) {
                TaskOutcome::Booked => {
                    n_booked += 1;
                    if self.is_over(orders) {
                        return Served::RunOver;
                    }
                    if n_booked == quota {
                        return Served::Quota;
                    }
                }
                TaskOutcome::PassedOver => {
                    if !walk.pass_over() {
                        return Served::Done;
                    }
                }
                TaskOutcome::JobDone => return Served::Done,
                TaskOutcome::RunOver => return Served::RunOver,
            }
        }
        Served::Done
    }

    /// Finds the task the best free engine its rules allow, and books it there.
    fn serve_task(&mut self, key: TaskKey, orders: &mut Orders) -> TaskOutcome {
        let state = self.state;
        let j = key.job;
        let job = state.job(j);
        let c = task_category(job, key.index);
        if self.is_held(key) {
            return TaskOutcome::PassedOver;
        }
        if job.options.span != crate::core::event::Span::Site && self.no_candidate_fits(c) {
            self.exhausted[c.0 as usize] = true;
        }
        let task_rules = TaskRules::new(state, key);
        let family = task_rules.family_scope();
        if self.is_exhausted(c, family) {
            let outcome = refused_everywhere(job, c, task_rules.refusal_scope());
            return self.reserve_or(key, c, outcome);
        }
        if job.options.span == crate::core::event::Span::Site {
            return self.serve_parallel(key, c, orders);
        }
        let category = state.category(c);
        assert_eq!(category.slots_per_task, job.slots_per_task, "a category is one requirement and one slot count");
        let reservations = &self.reservations;
        let end_ms = if reservations.is_empty() { 0 } else { end_from(state, job, state.now_ms) };
        let excluded = |e: EngineIdx| {
            task_rules.check(e).is_err() || (!reservations.is_empty() && !reservations.allows(e, job.slots_per_task, end_ms))
        };
        let task_scored = job
            .condition(key.index)
            .is_some_and(|condition| !condition.affinity.is_empty() || !condition.task_affinity.is_empty());
        let job_part = |e: EngineIdx| job_score(state, job, e);
        let task_part = |e: EngineIdx| task_score(state, job, key.index, e);
        let reserved = |e: EngineIdx| reservations.holds(e);
        // A class's refusals, asked of the family once per run, and only when
        // picks draw from ranked queues (a walk asks the filter itself).
        let class_refused = match family {
            FilterScope::Class(class) if self.candidates.picks_from_queues(task_scored) => {
                let refused: &Vec<bool> = self.class_refused.entry(class).or_insert_with(|| families::refused_engines(state, key));
                Some((class, refused))
            }
            _ => None,
        };
        let class_part = |e: EngineIdx| class_refused.is_some_and(|(_, refused)| refused.get(e.0 as usize).copied().unwrap_or(true));
        let rules = PickRules {
            excluded: &excluded,
            job_score: job.has_scores().then_some((j, &job_part as &dyn Fn(EngineIdx) -> i64)),
            task_score: task_scored.then_some(&task_part as &dyn Fn(EngineIdx) -> i64),
            soft: job.soft.as_ref(),
            reserved: &reserved,
            class: class_refused.map(|(class, _)| (class, &class_part as &dyn Fn(EngineIdx) -> bool)),
        };
        let Some(at) = self.candidates.pick(c, category, &rules) else {
            // Nothing free may take it. A refusal holds for every task its
            // rules share (see `RefusalScope`): the category, or its tasks of
            // the family filter's class, is closed for the run, unless a
            // reservation refused (it refuses by the task's end and slots,
            // which only a job's tasks share).
            let scope = task_rules.refusal_scope();
            if !self.reservations.take_refused() {
                match scope {
                    RefusalScope::Category => self.exhausted[c.0 as usize] = true,
                    RefusalScope::Class(class) => {
                        self.exhausted_classes.insert((c, class));
                    }
                    RefusalScope::Job | RefusalScope::Task => {}
                }
            }
            return self.reserve_or(key, c, refused_everywhere(job, c, scope));
        };
        self.reservations.take_refused();
        self.dispatch(key, at, orders)
    }

    /// Whether no candidate is eligible for category `c` with room for one of
    /// its tasks, found by a walk when the run has few candidates (a run
    /// after a completion or two): such a category is closed at once, as a
    /// refusal by every free engine would close it, rather than each of its
    /// jobs met before a fitting one building its task's rules to be refused.
    /// Room only shrinks within a run, so the answer holds for the rest of it.
    fn no_candidate_fits(&self, c: CategoryIdx) -> bool {
        if self.exhausted[c.0 as usize] || self.candidates.by_id.len() > SCAN_CANDIDATES_MAX {
            return false;
        }
        let category = self.state.category(c);
        !self.candidates.by_id.iter().any(|candidate| {
            candidate.slots - candidate.used >= category.slots_per_task && category.is_eligible(candidate.engine)
        })
    }

    /// Whether no free engine may take a task of category `c` under a family
    /// filter of this scope, this run.
    fn is_exhausted(&self, c: CategoryIdx, family: FilterScope) -> bool {
        self.exhausted[c.0 as usize]
            || matches!(family, FilterScope::Class(class) if self.exhausted_classes.contains(&(c, class)))
    }

    /// A task that cannot start now: if its job may reserve, it reserves the
    /// slots it will need ([`super::reservation`]) and the job's walk ends;
    /// otherwise `outcome`.
    fn reserve_or(&mut self, key: TaskKey, c: CategoryIdx, outcome: TaskOutcome) -> TaskOutcome {
        let state = self.state;
        if !self.reservations.may_reserve(state, key.job) || state.task(key).is_live() {
            return outcome;
        }
        if self.positions.is_empty() {
            self.positions = vec![0; state.engines().len()];
            for (at, candidate) in self.candidates.by_id.iter().enumerate() {
                self.positions[candidate.engine.0 as usize] = at as u32 + 1;
            }
        }
        let rules = TaskRules::new(state, key);
        let eligible =
            super::reservation::eligible_engines(&state.category(c).eligible).filter(|&e| rules.check(e).is_ok());
        let sites = self.sites.get_or_insert_with(|| super::parallel::SiteIndex::new(state));
        let (candidates, positions, in_flight) = (&self.candidates.by_id, &self.positions, self.in_flight);
        let used = |e: EngineIdx| match positions.get(e.0 as usize).copied().unwrap_or(0) {
            0 => state.engine(e).used.saturating_add(in_flight.booked_slots(e)),
            at => candidates[at as usize - 1].used,
        };
        self.reservations.reserve(state, sites, key, eligible, used);
        TaskOutcome::JobDone
    }

    /// A task of span `site`: all its slots at once over engines of one site
    /// (see [`super::parallel`]), or nothing.
    fn serve_parallel(&mut self, key: TaskKey, c: CategoryIdx, orders: &mut Orders) -> TaskOutcome {
        let state = self.state;
        let job = state.job(key.job);
        if state.task(key).is_live() {
            return TaskOutcome::PassedOver; // a parallel task takes no redundant copy
        }
        let end_ms = end_from(state, job, state.now_ms);
        let Some(parts) = self.site_parts(key, c, end_ms) else {
            let outcome = if job.conditions_are_empty() { TaskOutcome::JobDone } else { TaskOutcome::PassedOver };
            return self.reserve_or(key, c, outcome);
        };
        let attempt = state.task(key).attempts + 1;
        let named: Vec<(EngineIdx, u32)> = parts.iter().map(|(offer, slots)| (offer.engine, *slots)).collect();
        if !orders.push_all(super::parallel::orders_for(state, key, attempt, &named)) {
            return TaskOutcome::RunOver;
        }
        for (offer, slots) in parts {
            self.candidates.book(offer.at, slots);
            self.reservations.booked(offer.engine, slots, end_ms);
        }
        self.n_dispatched += 1;
        TaskOutcome::Booked
    }

    /// The parts a site task would take now ([`super::parallel::FillUp`]
    /// over the candidates it may use, best ranked first), or `None`. A task
    /// whose job and conditions score no engine walks its category's ranked
    /// queue only as far as a site fills; others rank every candidate.
    fn site_parts(&mut self, key: TaskKey, c: CategoryIdx, end_ms: u64) -> Option<Vec<(Offer, u32)>> {
        let state = self.state;
        let job = state.job(key.job);
        let task_rules = TaskRules::new(state, key);
        let task_scored = job.condition(key.index).is_some_and(|condition| !condition.affinity.is_empty() || !condition.task_affinity.is_empty());
        if job.has_scores() || task_scored || self.candidates.by_id.len() <= SCAN_CANDIDATES_MAX {
            let sites = self.sites.get_or_insert_with(|| super::parallel::SiteIndex::new(state));
            return site_parts_by_scan(state, &self.candidates, &self.reservations, sites, key, c, &task_rules, end_ms);
        }
        let category = state.category(c);
        let reservations = &self.reservations;
        let reserved = |e: EngineIdx| reservations.holds(e);
        let excluded = |e: EngineIdx| task_rules.check(e).is_err();
        let rules =
            PickRules { excluded: &excluded, job_score: None, task_score: None, soft: job.soft.as_ref(), reserved: &reserved, class: None };
        let sites = self.sites.get_or_insert_with(|| super::parallel::SiteIndex::new(state));
        let (queue, by_id) = self.candidates.queue_for(c, category, &rules)?;
        let has_room = |at: u32| by_id[at as usize].used < by_id[at as usize].slots;
        // The walked part (reserved engines) in rank order, merged with the heap's pops.
        let mut side: Vec<Rank> = queue
            .reserved
            .iter()
            .filter(|&&(.., at)| has_room(at))
            .map(|&(tier, unmet, neg_score, _, at)| (tier, unmet, neg_score, by_id[at as usize].key, at))
            .collect();
        side.sort_unstable();
        let mut side = side.into_iter().peekable();
        let mut popped: Vec<Reverse<Rank>> = Vec::new();
        let mut fill = super::parallel::FillUp::new(job.slots_per_task, sites);
        let found = loop {
            let from_heap = loop {
                let Some(&Reverse((tier, unmet, neg_score, load, at))) = queue.heap.peek() else { break None };
                if !has_room(at) {
                    queue.heap.pop();
                    continue;
                }
                let now = by_id[at as usize].key;
                if now != load {
                    queue.heap.pop();
                    queue.heap.push(Reverse((tier, unmet, neg_score, now, at)));
                    continue;
                }
                break Some((tier, unmet, neg_score, now, at));
            };
            let next = match (from_heap, side.peek()) {
                (None, None) => break None,
                (Some(heap), Some(&walked)) if walked < heap => side.next(),
                (Some(heap), _) => {
                    let entry = queue.heap.pop();
                    if reservations.holds(by_id[heap.4 as usize].engine) {
                        queue.reserved.push(heap);
                    } else {
                        popped.extend(entry);
                    }
                    Some(heap)
                }
                (None, Some(_)) => side.next(),
            };
            let Some((.., at)) = next else { break None };
            let candidate = &by_id[at as usize];
            if excluded(candidate.engine) {
                continue;
            }
            let free = reservations.usable(candidate.engine, candidate.slots - candidate.used, end_ms);
            if let Some(parts) = fill.offer(Offer { engine: candidate.engine, at, free }) {
                break Some(parts);
            }
        };
        queue.heap.extend(popped);
        found
    }

    fn dispatch(&mut self, key: TaskKey, at: u32, orders: &mut Orders) -> TaskOutcome {
        let state = self.state;
        let job = state.job(key.job);
        let e = self.candidates.book(at, job.slots_per_task);
        if !self.reservations.is_empty() {
            self.reservations.booked(e, job.slots_per_task, end_from(state, job, state.now_ms));
        }
        let engine = state.engine(e);
        let task = state.task(key);
        let dispatch = Order::Dispatch {
            task: state.task_ref(key),
            attempt: task.attempts + 1,
            engine: engine.id.clone(),
            epoch: engine.epoch,
        };
        if !orders.push(dispatch) {
            return TaskOutcome::RunOver;
        }
        self.n_dispatched += 1;
        TaskOutcome::Booked
    }
}

/// [`Run::site_parts`] by ranking every candidate the task may use.
#[allow(clippy::too_many_arguments)]
fn site_parts_by_scan(
    state: &State,
    candidates: &Candidates,
    reservations: &Reservations,
    sites: &super::parallel::SiteIndex,
    key: TaskKey,
    c: CategoryIdx,
    task_rules: &TaskRules,
    end_ms: u64,
) -> Option<Vec<(Offer, u32)>> {
    let job = state.job(key.job);
    let category = state.category(c);
    let mut ranked: Vec<(Rank, Offer)> = Vec::new();
    for (at, candidate) in candidates.by_id.iter().enumerate() {
        let e = candidate.engine;
        if candidate.used >= candidate.slots || !category.is_eligible(e) || task_rules.check(e).is_err() {
            continue;
        }
        let free = reservations.usable(e, candidate.slots - candidate.used, end_ms);
        if free == 0 {
            continue;
        }
        let score = job_score(state, job, e) + task_score(state, job, key.index, e);
        let unmet = soft_unmet(state, job.soft.as_ref(), e);
        let rank = (candidates.tier(candidate), unmet, -score, candidates.load(candidate), at as u32);
        ranked.push((rank, Offer { engine: e, at: at as u32, free }));
    }
    ranked.sort_unstable_by_key(|&(rank, _)| rank);
    super::parallel::fill_up(sites, job.slots_per_task, ranked.into_iter().map(|(_, offer)| offer))
}

/// What a task refused by every free engine means for its job's walk: it
/// ends when the refusal holds for every task left in it (those of the job's
/// category, with no conditions of their own: a walk meets the tasks with
/// rules of their own, copies and retries, first).
fn refused_everywhere(job: &Job, c: CategoryIdx, scope: RefusalScope) -> TaskOutcome {
    if c == job.category && job.conditions_are_empty() && scope != RefusalScope::Task {
        TaskOutcome::JobDone
    } else {
        TaskOutcome::PassedOver
    }
}

/// The category of one task: its discriminator's, or its job's.
fn task_category(job: &Job, index: u32) -> CategoryIdx {
    job.condition(index).and_then(|condition| condition.category).unwrap_or(job.category)
}


