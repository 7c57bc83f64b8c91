//! FBSNG's scheduler (`algorithm = "fbsng"`): job-first over queues of
//! dynamic priorities with gaps, sections of dynamic priorities, process
//! types with quotas (seed 001, issue 11).
//!
//! # Sections and queues
//! FBSNG starts *sections* (a group of processes started together); here a
//! section is one task, parallel or not (`slots`, `span`). Every job names a
//! queue of the policy (`queue`), and may name a process type (`process_type`).
//!
//! # Queue priorities (folded, [`crate::core::family::fbsng::state`])
//! Each queue has a priority within `qp_min..=qp_max`, starting at `qp_min`.
//! At every section start, read back by the fold, every queue's priority gains
//! its `qpi` and the queue the section came from loses its `qpd`; then all are
//! shifted down together until the queue furthest behind stands at its own
//! `qp_min`, and each is clamped to `qp_max`. Only the differences decide, so
//! with every `qpi` at 1 the queues' start shares are inversely proportional
//! to their `qpd` (the seed's formula), and a queue with a larger `qpi` (the
//! seed's high-priority project) gains on the others at every start, its own
//! included. Why the shift: with only the seed's sentence ("grows by qpi when
//! others start, drops by qpd when it starts"), two queues of `qpd` 3 and 7
//! drift down to `qp_min` together and alternate, 50/50; measured against each
//! other they keep the seed's 70/30 (see `docs/policies.md`).
//!
//! # One run ([`FbsngOrder`])
//! The run repeats, as the seed's two steps: take the queues by priority,
//! highest first (ties by their order in the policy); start the first section
//! the first queue can start; update the priorities as the fold will; again.
//! - **Queue gap**: a queue that cannot start any section (none fits a free
//!   engine) *holds* every queue whose priority is more than its `qpg` below
//!   its own, even though slots stay idle, until a section of it starts.
//! - **Sections within a queue**: offered the fewest slots first, then by
//!   submission (the seed: light sections "naturally" have the advantage,
//!   "simply because [they] require fewer resources"); the section priority
//!   decides through the section gap below. (Offered by priority instead, a
//!   large section passed once outranks every fresh small one, takes every
//!   node a large section frees, and the large ones take the farm: the seed's
//!   "one bulk section per N light ones" of example (d) does not hold.) A section's priority is how many sections of its queue
//!   submitted after it started before it ("passed" it); it never goes down.
//!   A job's sections are ready one after the other (the seed: "section
//!   priority remains unchanged until it reaches ready state"): its next
//!   section becomes ready when the one before starts, of priority 0, so the
//!   job's one figure (`Job::fbsng_section_priority`) is its ready section's.
//! - **Section gap**: a waiting section holds every section of its queue
//!   whose priority is `spg` or more below its own (guaranteed scheduling),
//!   until it starts: with `spg` N, a large section waits for at most N
//!   smaller ones to pass it, so one large section starts per N small ones.
//! - **Process types**: a job whose process type holds its `quota_slots` (with
//!   what the run booked) is passed over without holding anything (the grid is
//!   kept busy by the other types; quotas may over-book it). A process type's
//!   `requirements` are joined to each of its jobs' own at submission
//!   ([`admit_job`]): FBSNG's node attributes are engine properties.
//! - Not preemptive: nothing running is stopped.
//!
//! # When it runs
//! FBSNG runs on its events but not more often than once per
//! `min_run_interval` (default 5 s). Here the dispatch loop of this family
//! runs only when `min_run_interval` of log time has passed since the batch of
//! the last run that started a section was folded, and no dispatch is in
//! flight ([`due`]); other stages (engine loss, cancels, ...) run every time.
//! Log time makes replay and `--verify` agree.

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};

use crate::core::schedule::in_flight::InFlight;
use crate::core::event::{FbsngPolicy, FbsngQueue, JobSpec, Policy};
use crate::core::expr::Expr;
use crate::core::ids::Seq;
use super::reasons::FamilyJobProblem;
use crate::core::reject::JobProblem;
use reasons::FbsngJobProblem;
use crate::core::state::{JobIdx, State};

pub mod hooks;
pub mod reasons;
pub mod state;

#[cfg(test)]
mod tests;

/// Most queues, and most process types, a policy may define.
pub const QUEUES_MAX: usize = 64;
pub const PROCESS_TYPES_MAX: usize = 64;
/// Longest queue or process type name, in bytes.
pub const NAME_BYTES_MAX: usize = 64;
/// Bounds of every queue parameter.
pub const VALUE_ABS_MAX: i64 = 1_000_000;
/// A section's priority stops growing here.
pub const SECTION_PRIORITY_MAX: u32 = 1_000_000;
/// `min_run_interval` when the policy says none (0), and its most.
pub const MIN_RUN_INTERVAL_MS_DEFAULT: u64 = 5_000;
pub const MIN_RUN_INTERVAL_MS_MAX: u64 = 3_600_000;
/// The queue of a policy that defines none.
pub const DEFAULT_QUEUE: &str = "default";

/// The value of each queue parameter a policy leaves out (`qp_min`: 0). The
/// seed's examples leave them out too: `qpg`, `spg` and `qp_max` far above
/// `qpd` (so no gap holds anything and no bound is reached unless asked),
/// `qpi` and `qpd` at 1 ("normally, QPI is set to 1").
#[derive(Debug, Clone, Copy)]
pub struct QueueDefaults {
    pub qp_max: i64,
    pub qpi: i64,
    pub qpd: i64,
    pub qpg: i64,
    pub spg: i64,
}

impl Default for QueueDefaults {
    fn default() -> Self {
        QueueDefaults { qp_max: 100, qpi: 1, qpd: 1, qpg: 100, spg: 100 }
    }
}

/// A queue named `name` with `qp_min` 0 and every other parameter at its default.
pub fn default_queue(name: &str) -> FbsngQueue {
    let d = QueueDefaults::default();
    FbsngQueue { name: name.to_string(), qp_min: 0, qp_max: d.qp_max, qpi: d.qpi, qpd: d.qpd, qpg: d.qpg, spg: d.spg }
}

/// The queues of the policy: its own, or the one `default` queue.
pub fn queues(policy: &Policy) -> Cow<'_, [FbsngQueue]> {
    if policy.fbsng.queues.is_empty() {
        Cow::Owned(vec![default_queue(DEFAULT_QUEUE)])
    } else {
        Cow::Borrowed(&policy.fbsng.queues)
    }
}

/// The limits of an FBSNG policy: (the field, the problem) of the first broken.
pub fn check_policy(policy: &FbsngPolicy) -> Result<(), (String, String)> {
    let fail = |field: String, problem: String| Err((field, problem));
    if policy.queues.len() > QUEUES_MAX {
        return fail("queues".into(), format!("{} queues, more than {QUEUES_MAX}", policy.queues.len()));
    }
    if policy.process_types.len() > PROCESS_TYPES_MAX {
        return fail("process_types".into(), format!("{} process types, more than {PROCESS_TYPES_MAX}", policy.process_types.len()));
    }
    if policy.min_run_interval_ms > MIN_RUN_INTERVAL_MS_MAX {
        return fail("min_run_interval_ms".into(), format!("{} ms, more than {MIN_RUN_INTERVAL_MS_MAX}", policy.min_run_interval_ms));
    }
    let names = policy.queues.iter().map(|q| q.name.as_str()).enumerate().map(|(i, n)| (format!("queues[{i}].name"), n));
    let kinds = policy.process_types.iter().map(|k| k.name.as_str()).enumerate().map(|(i, n)| (format!("process_types[{i}].name"), n));
    for (list, field_names) in [("queue", names.collect::<Vec<_>>()), ("process type", kinds.collect())] {
        let mut seen = BTreeSet::new();
        for (field, name) in field_names {
            if name.is_empty() || name.len() > NAME_BYTES_MAX {
                return fail(field, format!("a {list} name must be 1 to {NAME_BYTES_MAX} bytes"));
            }
            if !seen.insert(name) {
                return fail(field, format!("{list} {name} is defined twice"));
            }
        }
    }
    for (i, queue) in policy.queues.iter().enumerate() {
        for (name, value) in queue.parameters() {
            if !(-VALUE_ABS_MAX..=VALUE_ABS_MAX).contains(&value) {
                return fail(format!("queues[{i}].{name}"), format!("{value}, not within -{VALUE_ABS_MAX}..={VALUE_ABS_MAX}"));
            }
            if name != "qp_min" && name != "qp_max" && value < 0 {
                return fail(format!("queues[{i}].{name}"), format!("{value}, below 0"));
            }
        }
        if queue.qp_min > queue.qp_max {
            return fail(format!("queues[{i}].qp_max"), format!("{} is below qp_min {}", queue.qp_max, queue.qp_min));
        }
    }
    for (i, kind) in policy.process_types.iter().enumerate() {
        crate::core::expr::parse(&kind.requirements)
            .map_err(|e| (format!("process_types[{i}].requirements"), format!("at byte {}: {}", e.position, e.message)))?;
    }
    Ok(())
}

/// The shared reason for a job FBSNG refuses.
fn refused(problem: FbsngJobProblem) -> JobProblem {
    JobProblem::Family(FamilyJobProblem::Fbsng(problem))
}

/// Under `fbsng`, refuses a job whose queue or process type the policy does
/// not define, and joins its process type's requirements to its own.
pub fn admit_job(policy: &Policy, spec: &JobSpec, expr: Expr) -> Result<Expr, JobProblem> {
    if policy.algorithm != crate::core::event::Algorithm::Fbsng {
        return Ok(expr);
    }
    let queues = queues(policy);
    if !queues.iter().any(|queue| queue.name == spec.queue) {
        let known = queues.iter().map(|queue| queue.name.clone()).collect();
        return Err(refused(FbsngJobProblem::UnknownQueue { queue: clipped_name(&spec.queue), known }));
    }
    let wanted = &spec.options.process_type;
    if wanted.is_empty() {
        return Ok(expr);
    }
    let Some(kind) = policy.fbsng.process_types.iter().find(|kind| kind.name == *wanted) else {
        let known = policy.fbsng.process_types.iter().map(|kind| kind.name.clone()).collect();
        return Err(refused(FbsngJobProblem::UnknownProcessType { process_type: clipped_name(wanted), known }));
    };
    let required = crate::core::expr::parse(&kind.requirements).unwrap_or(Expr::Bool(true));
    Ok(match (required, expr) {
        (Expr::Bool(true), own) => own,
        (required, Expr::Bool(true)) => required,
        // Each part is within the limits alone; joined, they are held to them again.
        (required, own) => crate::core::expr::parse(&format!("({required}) && ({own})")).map_err(|e| {
            JobProblem::BadRequirements { position: 0, message: format!("joined with process type {wanted}'s: {}", e.message) }
        })?,
    })
}

/// A name a client sent, as a refusal repeats it: no defined name is longer
/// than [`NAME_BYTES_MAX`], so a longer one is cut there (marked `...`) and
/// the kept rejection stays small whatever the client sent.
fn clipped_name(name: &str) -> String {
    if name.len() <= NAME_BYTES_MAX {
        return name.to_string();
    }
    format!("{}...", crate::core::reject::truncated(name, NAME_BYTES_MAX))
}

/// Moves the queue priorities for a section started from queue `q` (see the module docs).
pub fn queue_started(queues: &[FbsngQueue], priorities: &mut [i64], q: usize) {
    assert_eq!(queues.len(), priorities.len(), "one priority per queue");
    for (priority, queue) in priorities.iter_mut().zip(queues) {
        *priority += queue.qpi;
    }
    priorities[q] -= queues[q].qpd;
    let shift = priorities.iter().zip(queues).map(|(p, queue)| p - queue.qp_min).min().unwrap_or(0);
    for (priority, queue) in priorities.iter_mut().zip(queues) {
        *priority = (*priority - shift).clamp(queue.qp_min, queue.qp_max);
    }
}

/// The policy's `min_run_interval` in ms.
pub fn interval_ms(policy: &Policy) -> u64 {
    match policy.fbsng.min_run_interval_ms {
        0 => MIN_RUN_INTERVAL_MS_DEFAULT,
        ms => ms.min(MIN_RUN_INTERVAL_MS_MAX),
    }
}

/// Whether the family's dispatch loop runs now: `min_run_interval` of log
/// time since the last run that started a section, and none in flight.
pub fn due(state: &State, in_flight: &InFlight) -> bool {
    let last = state.families.fbsng.last_run_ms;
    (last == 0 || state.now_ms >= last.saturating_add(interval_ms(&state.policy)))
        && in_flight.dispatched_per_job().next().is_none()
}

/// Why a queue can start nothing more this run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stuck {
    /// Its next section fits no free engine.
    NoFit { job: JobIdx },
    /// Its next section is held by a section of its queue that could not start.
    SectionGap { job: JobIdx, by: JobIdx },
}

/// One waiting job of a queue in a run: its ready section.
#[derive(Clone, Copy)]
struct Section {
    seq: Seq,
    slots: u32,
    priority: u32,
}

/// One queue in a run.
#[derive(Default)]
struct QueueRun {
    /// Sections that may still start, in the order they are offered:
    /// (slots fewest first, submission, job).
    candidates: BTreeSet<(u32, Seq, JobIdx)>,
    /// Sections that could not start this run, by submission.
    failed: BTreeMap<Seq, JobIdx>,
    /// Every candidate and failed section, with its priority...
    sections: BTreeMap<JobIdx, Section>,
    /// ...and by priority, greatest first: the section gap measures from the first.
    by_priority: BTreeSet<(Reverse<u32>, JobIdx)>,
    stuck: Option<Stuck>,
}

impl QueueRun {
    fn insert(&mut self, j: JobIdx, section: Section) {
        self.candidates.insert((section.slots, section.seq, j));
        self.by_priority.insert((Reverse(section.priority), j));
        self.sections.insert(j, section);
    }

    /// Takes the job out of the run altogether.
    fn remove(&mut self, j: JobIdx) {
        if let Some(section) = self.sections.remove(&j) {
            self.candidates.remove(&(section.slots, section.seq, j));
            self.failed.remove(&section.seq);
            self.by_priority.remove(&(Reverse(section.priority), j));
        }
    }

    fn set_priority(&mut self, j: JobIdx, priority: u32) {
        let Some(section) = self.sections.get_mut(&j) else { return };
        self.by_priority.remove(&(Reverse(section.priority), j));
        section.priority = priority.min(SECTION_PRIORITY_MAX);
        self.by_priority.insert((Reverse(section.priority), j));
    }

    /// The section of greatest priority (then the lowest job index).
    fn top(&self) -> Option<(JobIdx, u32)> {
        self.by_priority.first().map(|&(Reverse(priority), j)| (j, priority))
    }

    /// The first candidate no section holds by the gap, or why there is none.
    fn offer(&self, spg: i64) -> Result<JobIdx, Option<Stuck>> {
        let (top, top_priority) = self.top().ok_or(None)?;
        let mut first_held = None;
        for &(_, _, j) in &self.candidates {
            let priority = self.sections[&j].priority;
            if i64::from(top_priority) - i64::from(priority) < spg {
                return Ok(j);
            }
            first_held.get_or_insert(j);
        }
        Err(match first_held {
            Some(job) => Some(Stuck::SectionGap { job, by: top }),
            None => self.failed.values().next().map(|&job| Stuck::NoFit { job }),
        })
    }
}

/// FBSNG's ordering for one run: moves as the run books (see the module docs).
pub struct FbsngOrder {
    due: bool,
    queues: Vec<FbsngQueue>,
    priorities: Vec<i64>,
    runs: Vec<QueueRun>,
    /// Each candidate job's queue and process type (index into the policy's).
    of_job: BTreeMap<JobIdx, (usize, Option<usize>)>,
    /// Per process type: (quota, slots held now plus booked by the run).
    quotas: Vec<(u32, u32)>,
    /// The job the run was last given; not booked by the next ask: it could not start.
    pending: Option<JobIdx>,
    /// Sections booked per job this run.
    booked_of_job: BTreeMap<JobIdx, u32>,
}

impl FbsngOrder {
    pub fn new(state: &State, in_flight: &InFlight) -> FbsngOrder {
        let queues = queues(&state.policy).into_owned();
        let mut priorities: Vec<i64> = (0..queues.len()).map(|q| state.families.fbsng.priority(q)).collect();
        if state.families.fbsng.queue_priorities.len() != queues.len() {
            priorities = queues.iter().map(|queue| queue.qp_min).collect();
        }
        let kinds = &state.policy.fbsng.process_types;
        let mut quotas: Vec<(u32, u32)> = kinds.iter().map(|kind| (kind.quota_slots, 0)).collect();
        let kind_of = |name: &str| (!name.is_empty()).then(|| kinds.iter().position(|kind| kind.name == name)).flatten();
        if quotas.iter().any(|&(quota, _)| quota > 0) {
            for job in state.jobs().filter(|job| job.is_active()) {
                if let Some(k) = kind_of(&job.options.process_type) {
                    let held = job.counts.dispatched + job.counts.running;
                    quotas[k].1 = quotas[k].1.saturating_add(held.saturating_mul(job.slots_per_task));
                }
            }
        }
        let mut runs: Vec<QueueRun> = queues.iter().map(|_| QueueRun::default()).collect();
        let mut of_job = BTreeMap::new();
        for rank in state.runnable_jobs() {
            let job = state.job(rank.job);
            let Some(q) = queues.iter().position(|queue| queue.name == job.queue) else { continue };
            let section = Section { seq: job.submit_seq, slots: job.slots_per_task, priority: job.families.fbsng.section_priority };
            runs[q].insert(rank.job, section);
            of_job.insert(rank.job, (q, kind_of(&job.options.process_type)));
        }
        FbsngOrder {
            due: due(state, in_flight),
            queues,
            priorities,
            runs,
            of_job,
            quotas,
            pending: None,
            booked_of_job: BTreeMap::new(),
        }
    }

    /// The queues, highest priority first (ties by their order in the policy).
    fn queue_order(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.queues.len()).collect();
        order.sort_by_key(|&q| (Reverse(self.priorities[q]), q));
        order
    }

    /// The next job to serve (one booking), or `None`: the run is over.
    pub fn next(&mut self, state: &State) -> Option<JobIdx> {
        if !self.due {
            return None;
        }
        if let Some(j) = self.pending.take() {
            self.could_not_start(state, j);
        }
        'queues: loop {
            let mut hold_line = i64::MIN;
            for q in self.queue_order() {
                if self.priorities[q] < hold_line {
                    continue; // held by a queue gap
                }
                if self.runs[q].stuck.is_none() {
                    match self.runs[q].offer(self.queues[q].spg) {
                        Ok(j) if self.over_quota(state, j) => {
                            self.runs[q].remove(j);
                            continue 'queues;
                        }
                        Ok(j) => {
                            self.pending = Some(j);
                            return Some(j);
                        }
                        Err(stuck) => self.runs[q].stuck = stuck,
                    }
                }
                if self.runs[q].stuck.is_some() {
                    hold_line = hold_line.max(self.priorities[q].saturating_sub(self.queues[q].qpg));
                }
            }
            return None;
        }
    }

    fn over_quota(&self, state: &State, j: JobIdx) -> bool {
        let Some(&(_, Some(k))) = self.of_job.get(&j) else { return false };
        let (quota, held) = self.quotas[k];
        quota > 0 && held.saturating_add(state.job(j).slots_per_task) > quota
    }

    /// Job `j`, just given, booked nothing: its section cannot start this run.
    fn could_not_start(&mut self, state: &State, j: JobIdx) {
        let Some(&(q, _)) = self.of_job.get(&j) else { return };
        let run = &mut self.runs[q];
        if self.booked_of_job.get(&j).copied().unwrap_or(0) >= state.job(j).n_wanting_dispatch() {
            run.remove(j); // it has no section left to start: not a failure
            return;
        }
        let Some(section) = run.sections.get(&j).copied() else { return };
        run.candidates.remove(&(section.slots, section.seq, j));
        run.failed.insert(section.seq, j);
    }

    /// The run booked one section of `j`: priorities move as the fold will move them.
    pub fn booked(&mut self, state: &State, j: JobIdx) {
        self.pending = None;
        let Some(&(q, kind)) = self.of_job.get(&j) else { return };
        let job = state.job(j);
        if let Some(k) = kind {
            self.quotas[k].1 = self.quotas[k].1.saturating_add(job.slots_per_task);
        }
        queue_started(&self.queues, &mut self.priorities, q);
        let submitted = job.submit_seq;
        let run = &mut self.runs[q];
        let passed: Vec<(JobIdx, u32)> = run
            .sections
            .iter()
            .filter(|(_, section)| section.seq < submitted)
            .map(|(&k, section)| (k, section.priority.saturating_add(1)))
            .collect();
        for (k, priority) in passed {
            run.set_priority(k, priority);
        }
        // Its next section becomes ready now, of priority 0; after its last
        // waiting one the job leaves the run.
        run.remove(j);
        let booked = self.booked_of_job.entry(j).or_insert(0);
        *booked += 1;
        if *booked < job.n_wanting_dispatch() {
            run.insert(j, Section { seq: submitted, slots: job.slots_per_task, priority: 0 });
        }
    }

    /// The figures `why` shows for job `j`.
    pub fn figures(&self, state: &State, j: JobIdx) -> Vec<(&'static str, i64)> {
        let job = state.job(j);
        let q = self.queues.iter().position(|queue| queue.name == job.queue);
        vec![
            ("queue_priority", q.map_or(0, |q| self.priorities[q])),
            ("section_priority", i64::from(job.families.fbsng.section_priority)),
            ("submitted_seq", job.submit_seq.0 as i64),
        ]
    }
}

/// What holds job `j` under FBSNG now, for `why` (see [`crate::core::explain`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "rule", rename_all = "kebab-case")]
pub enum FbsngHold {
    /// Its queue is not in the policy: it never starts until it is.
    QueueNotInPolicy { queue: String },
    /// Its process type holds its quota.
    OverQuota { process_type: String, used: u32, quota: u32 },
    /// A queue that cannot start a section leads its queue by more than its `qpg`.
    QueueGap { queue: String, waits_for: String, gap: i64, qpg: i64 },
    /// A section of its queue that cannot start leads it by `spg` or more.
    SectionGap { waits_for: String, gap: i64, spg: i64 },
    /// Its queue's priority is below another's that starts sections first.
    QueuePriorityBelow { queue: String, priority: i64, other: String, other_priority: i64 },
}

impl std::fmt::Display for FbsngHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FbsngHold::QueueNotInPolicy { queue } => write!(f, "its queue {queue} is not in the FBSNG policy"),
            FbsngHold::OverQuota { process_type, used, quota } => {
                write!(f, "process type {process_type} holds {used} of its {quota} slots (quota)")
            }
            FbsngHold::QueueGap { queue, waits_for, gap, qpg } => write!(
                f,
                "queue {queue} is held by the queue gap: queue {waits_for} cannot start a section and leads by {gap}, more than its qpg {qpg}"
            ),
            FbsngHold::SectionGap { waits_for, gap, spg } => write!(
                f,
                "held by the section gap: job {waits_for}'s section cannot start and its priority leads by {gap}, spg is {spg}"
            ),
            FbsngHold::QueuePriorityBelow { queue, priority, other, other_priority } => write!(
                f,
                "queue {queue} (priority {priority}) comes after queue {other} (priority {other_priority})"
            ),
        }
    }
}

/// What holds runnable job `j` in a run starting now (every section the run
/// would be offered taken to fail, as a run sees a grid with nothing free).
pub fn hold_of(state: &State, j: JobIdx) -> Option<FbsngHold> {
    let job = state.job(j);
    let queues = queues(&state.policy);
    let Some(q) = queues.iter().position(|queue| queue.name == job.queue) else {
        return Some(FbsngHold::QueueNotInPolicy { queue: job.queue.clone() });
    };
    let mut order = FbsngOrder::new(state, &InFlight::new());
    order.due = true;
    if order.over_quota(state, j) {
        let k = order.of_job.get(&j).and_then(|&(_, k)| k).expect("over quota: it has a process type");
        let (quota, used) = order.quotas[k];
        return Some(FbsngHold::OverQuota { process_type: job.options.process_type.clone(), used, quota });
    }
    let mut first_other: Option<usize> = None;
    while let Some(next) = order.next(state) {
        if next == j {
            return first_other.map(|other| FbsngHold::QueuePriorityBelow {
                queue: job.queue.clone(),
                priority: order.priorities[q],
                other: queues[other].name.clone(),
                other_priority: order.priorities[other],
            });
        }
        let other_q = order.of_job.get(&next).map(|&(q, _)| q);
        if other_q != Some(q) {
            first_other = first_other.or(other_q);
        }
    }
    if let Some(Stuck::SectionGap { by, .. }) = order.runs[q].stuck {
        let ahead = order.runs[q].sections.get(&by).map_or(0, |section| section.priority);
        return Some(FbsngHold::SectionGap {
            waits_for: state.job(by).id.to_string(),
            gap: i64::from(ahead) - i64::from(job.families.fbsng.section_priority),
            spg: queues[q].spg,
        });
    }
    let mine = order.priorities[q];
    let holder = order
        .queue_order()
        .into_iter()
        .find(|&other| order.runs[other].stuck.is_some() && order.priorities[other] - mine > queues[other].qpg);
    holder.map(|other| FbsngHold::QueueGap {
        queue: job.queue.clone(),
        waits_for: queues[other].name.clone(),
        gap: order.priorities[other] - mine,
        qpg: queues[other].qpg,
    })
}

/// One queue as `gridfold stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueStatus {
    pub name: String,
    /// Its priority now (folded).
    pub priority: i64,
    /// Sections waiting (tasks wanting a dispatch) in its runnable jobs.
    pub waiting_sections: u64,
    /// The greatest section priority among its runnable jobs (0 when none).
    pub section_priority_max: u32,
    /// Runnable jobs of the queue whose ready section is `spg` or more below
    /// that greatest one: held by the section gap while it cannot start.
    pub jobs_held_by_section_gap: u32,
    /// Its waiting sections (each runnable job's ready one), greatest priority
    /// first, then by submission; at most [`SECTIONS_SHOWN_MAX`].
    #[serde(default)]
    pub sections: Vec<SectionStatus>,
}

/// Most waiting sections `gridfold stat` lists per queue.
pub const SECTIONS_SHOWN_MAX: usize = 32;

/// One waiting section as `gridfold stat` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SectionStatus {
    /// The job whose ready section it is.
    pub job: String,
    /// Its section priority (folded).
    pub priority: u32,
    /// Its priority is `spg` or more below the queue's greatest: held by the
    /// section gap while that section cannot start.
    pub held_by_section_gap: bool,
}

/// The queues as `stat` prints them (nothing when there are none): a row
/// each, then a line per waiting section, `  section JOB priority P` (with
/// `, held by the section gap`).
pub struct QueueTable<'a>(pub &'a [QueueStatus]);

impl std::fmt::Display for QueueTable<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            return Ok(());
        }
        writeln!(f, "{:<24} {:>9} {:>8} {:>12} {:>12}", "FBSNG QUEUE", "PRIORITY", "WAITING", "SECTION MAX", "GAP-HELD")?;
        for queue in self.0 {
            writeln!(
                f,
                "{:<24} {:>9} {:>8} {:>12} {:>12}",
                queue.name, queue.priority, queue.waiting_sections, queue.section_priority_max, queue.jobs_held_by_section_gap
            )?;
            for section in &queue.sections {
                let held = if section.held_by_section_gap { ", held by the section gap" } else { "" };
                writeln!(f, "  section {} priority {}{held}", section.job, section.priority)?;
            }
        }
        Ok(())
    }
}

/// Each queue of the policy in force, in its order (empty unless `fbsng`).
pub fn queue_statuses(state: &State) -> Vec<QueueStatus> {
    if state.policy.algorithm != crate::core::event::Algorithm::Fbsng {
        return Vec::new();
    }
    let queues = queues(&state.policy);
    let mut statuses: Vec<QueueStatus> = queues
        .iter()
        .enumerate()
        .map(|(q, queue)| QueueStatus {
            name: queue.name.clone(),
            priority: if state.families.fbsng.queue_priorities.len() == queues.len() { state.families.fbsng.priority(q) } else { queue.qp_min },
            waiting_sections: 0,
            section_priority_max: 0,
            jobs_held_by_section_gap: 0,
            sections: Vec::new(),
        })
        .collect();
    // Per queue: (priority, greatest first; submission; job) of each ready section.
    let mut members: Vec<Vec<(Reverse<u32>, Seq, JobIdx)>> = vec![Vec::new(); queues.len()];
    for rank in state.runnable_jobs() {
        let job = state.job(rank.job);
        let Some(q) = queues.iter().position(|queue| queue.name == job.queue) else { continue };
        statuses[q].waiting_sections += u64::from(job.n_wanting_dispatch());
        statuses[q].section_priority_max = statuses[q].section_priority_max.max(job.families.fbsng.section_priority);
        members[q].push((Reverse(job.families.fbsng.section_priority), job.submit_seq, rank.job));
    }
    for ((status, queue), members) in statuses.iter_mut().zip(queues.iter()).zip(&mut members) {
        let top = i64::from(status.section_priority_max);
        let held = |priority: u32| top - i64::from(priority) >= queue.spg;
        status.jobs_held_by_section_gap = members.iter().filter(|(Reverse(p), _, _)| held(*p)).count() as u32;
        members.sort_unstable();
        status.sections = members
            .iter()
            .take(SECTIONS_SHOWN_MAX)
            .map(|&(Reverse(priority), _, j)| SectionStatus {
                job: state.job(j).id.to_string(),
                priority,
                held_by_section_gap: held(priority),
            })
            .collect();
    }
    statuses
}
