//! Techila's scheduler (algorithm `techila`), after Techila Distributed
//! Computing Engine's documentation: a Techila *project* is a gridfold job, a
//! Techila *job* is a task, a *Techila Worker CPU core* is an engine slot.
//!
//! # The scheduling cycle (resource-first)
//! Each cycle serves one free core: the free engines are listed fastest first
//! (their `mflops` benchmark, then free slots, then engine id); for the fastest,
//! the projects compatible with it (their category's requirements and slots)
//! enter a **ticket draw**, at most one per user (the user's most important:
//! lowest project priority number, then earliest created) unless the policy's
//! `simultaneous_projects`; each holds tickets in inverse proportion to its
//! ranking (below); one ticket is drawn with the run's seeded PRNG
//! ([`crate::core::rng::SplitMix64::for_sequence`] of the policy's seed and
//! the sequence the run is based on, advanced once per draw of two or more
//! entrants), so replay draws the same; one task of the winner goes to that
//! core. The cycle repeats while cores, tasks and the license allow. When a
//! Normal-or-higher project (1 to 4) that wants capacity is among a draw's
//! entrants, Lowest (7) projects are left out of it.
//!
//! # The ranking (lower ranking, more tickets)
//! With integers only (u128, no overflow for any u32/u64 input):
//!
//! ```text
//! ranking = user_priority × project_priority
//!         × (1000 + 1000 × running_tasks + benchmark_sum_mflops
//!            + 1000 × cpu_ms_completed / (wall_clock_ms + 60_000))
//!         × (1000 + creation_rank)
//! ```
//!
//! Why each input moves it:
//! - **user priority** (policy `user_priorities`, 1 to 7, default 4) and
//!   **project priority** (job file `project_priority`, 1 to 7, default 4)
//!   multiply it: a Highest (1) project against a Lowest (7) one of the same
//!   consumption gets seven times the tickets, as an administrator or user
//!   asking for it expects.
//! - **tasks running**: each adds one unit (1000), so a project that holds more
//!   cores gets fewer tickets and capacity flows to the one that holds fewer:
//!   two projects of equal inputs converge on an even split.
//! - **sum of the benchmarks of engines working on it** (mflops, 1 per mflop):
//!   a project on fast cores already gets more computing power per task, so its
//!   ranking rises with the speed of what it holds, not just the count.
//! - **CPU time used by its completed tasks**, per **project wall-clock time**
//!   (since submission, plus a minute so a new project does not divide by
//!   zero): the average number of cores' worth of work it has consumed over its
//!   life, in thousandths. A project that has used much recently ranks higher;
//!   an old project that used the same total slowly is not punished for its age.
//! - **creation order** (0 for the earliest created of the run's runnable
//!   projects, every user's counted): each later project ranks 0.1% higher, so
//!   between otherwise equal projects the older one is favoured a little, as
//!   Techila processes projects in creation order (a thousand projects apart,
//!   the older holds twice the tickets).
//! - the base 1000 keeps the ranking positive for a project that has run nothing.
//!
//! # The tickets
//! A project holds `2^96 / ranking` tickets (at least 1), [`TICKETS_NUMERATOR`]:
//! the seed's `sum of rankings / own ranking` gives every entrant the same odds
//! (both are proportional to `1 / own`), but a fixed numerator makes a
//! project's tickets depend on its own inputs only, so a booking changes one
//! project's tickets and a draw costs `O(log n)` ([`tickets`]: Fenwick trees of
//! tickets per class of projects). Why 2^96: the integer division rounds each
//! count down by less than one ticket, a relative error below
//! `ranking / 2^96`. The smallest ranking is 10^6 (1 × 1 × 1000 × 1000), so a
//! project holds at most 2^76 tickets and any number of entrants a u128 sum
//! holds (2^52) fits; the rankings the limits allow stay below 2^70 (49 ×
//! (1000 × 10^7 tasks running + 10^7 cores of 10^6 mflops + …) × (1000 +
//! 10^5 projects) ≈ 2^66), so the error stays below 2^-26 of a share, far below
//! the 3 points the draw is measured against. A ranking above 2^96 (absurd
//! inputs) holds 1 ticket. The ticket is drawn as `rng.below(total)` over the
//! entrants in the draw's order ([`tickets`]): 128-bit when the total exceeds 64 bits.
//!
//! # The license cap and preemption
//! Policy `max_running_tasks` caps the tasks dispatched or running at once
//! over the grid (0: no cap). Since cores are served fastest first, the running
//! tasks sit on the fastest cores; when a core in use goes (engine lost or
//! logged out), its tasks are requeued and the next cycle gives the freed
//! capacity to the fastest free core. [`preempt_lowest`] preempts tasks of
//! Lowest projects (the `Preempt` order: killed and queued again without using
//! an attempt) when a Normal-or-higher project wants capacity that no free core
//! (within the license) offers; the fold accepts such a preemption only of a
//! Lowest project's attempt under this algorithm ([`may_preempt`]).
//!
//! A project wants capacity only with a task that could be dispatched now
//! ([`want`]: tasks held by their dependencies do not count).
//!
//! # Expired tasks and cycles
//! A task running past its project's `expected_task_time` is expired and
//! copied once; waiting expired copies are served before any draw
//! ([`expiry`]). The dispatch loop runs only while a scheduling cycle is due:
//! on the seed's events and every `cycle_interval` of log time ([`cycle`]).

use std::collections::BTreeSet;

use crate::core::schedule::candidate::Candidate;
use crate::core::schedule::budget::Orders;
use crate::core::schedule::in_flight::InFlight;
use crate::core::event::{Algorithm, Order};
use crate::core::ids::JobId;
use crate::core::reject::{OpsProblem, PrioritySetting};
use crate::core::rng::SplitMix64;
use super::reasons::{FamilyOpsProblem, FamilyPrioritySetting};
use reasons::{TechilaOpsProblem, TechilaPrioritySetting};
use crate::core::state::{EngineIdx, JobIdx, State, TaskKey};

pub mod cycle;
mod priority;
mod draw;
pub mod expiry;
pub mod reasons;
pub mod state;
mod tickets;
pub use priority::{draw, project_priority, ranking, tickets, user_priority, RankingInputs, PRIORITY_HIGHEST, PRIORITY_LOWEST, PRIORITY_NORMAL, TICKETS_NUMERATOR};
pub mod want;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod expiry_tests;


/// Most entrants of a draw listed (by `why`, and for the losers of a draw
/// whose winner had no task for the core); the draw itself takes every one.
pub const DRAW_ENTRANTS_MAX: usize = 4_096;
/// Most Preempt orders one run gives.
pub const PREEMPTS_PER_RUN_MAX: usize = 1_024;


/// One entrant of a draw, with its figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entrant {
    pub job: JobIdx,
    pub inputs: RankingInputs,
    pub ranking: u128,
    pub tickets: u128,
}

/// The Techila ordering of one run: its draws and bookings.
pub struct TechilaOrder {
    rng: SplitMix64,
    /// Tasks the license still allows this run (`u32::MAX`: no cap).
    license_left: u32,
    passed: BTreeSet<u32>,
    /// Per job index (dense): the task indexes this run booked, sorted.
    booked: Vec<Vec<u32>>,
    /// The engine served by the last `jobs_for`.
    serving: Option<EngineIdx>,
    /// Per job index (dense): its dispatches in flight.
    in_flight_per_job: Vec<u32>,
    cores: draw::CoreQueue,
    projects: tickets::Projects,
    /// The last draw's winner, until `more_jobs_for` names the others.
    last_winner: Option<JobIdx>,
    /// A scheduling cycle is due ([`cycle::due`]): else no engine is served.
    cycle_due: bool,
    /// Jobs with an expired task's copy waiting, served before any draw ([`expiry`]).
    expired_first: Vec<JobIdx>,
    /// Copies ordered but not yet folded, each to hold back a core ([`TechilaOrder::wait_for_copies`]).
    copies_pending: Vec<TaskKey>,
}

/// Tasks dispatched or running over the grid, counting the dispatches in flight.
pub fn running_tasks(state: &State, in_flight: &InFlight) -> u64 {
    let live: u64 = state.engines().iter().map(|engine| u64::from(engine.live)).sum();
    live + in_flight.dispatched_per_job().map(|(_, n)| u64::from(n)).sum::<u64>()
}

impl TechilaOrder {
    pub fn new(state: &State, in_flight: &InFlight) -> TechilaOrder {
        let cap = state.policy.techila.max_running_tasks;
        let license_left = if cap == 0 {
            u32::MAX
        } else {
            u32::try_from(u64::from(cap).saturating_sub(running_tasks(state, in_flight))).unwrap_or(0)
        };
        TechilaOrder {
            rng: SplitMix64::for_sequence(state.policy.seed, state.last_seq.0),
            license_left,
            passed: BTreeSet::new(),
            booked: Vec::new(),
            serving: None,
            in_flight_per_job: {
                let mut per_job = Vec::new();
                for (j, n) in in_flight.dispatched_per_job() {
                    if per_job.len() <= j.0 as usize {
                        per_job.resize(j.0 as usize + 1, 0);
                    }
                    per_job[j.0 as usize] = n;
                }
                per_job
            },
            cores: draw::CoreQueue::default(),
            projects: tickets::Projects::default(),
            last_winner: None,
            cycle_due: cycle::due(state),
            expired_first: expiry::jobs_with_copies_waiting(state),
            copies_pending: Vec::new(),
        }
    }

    /// The fastest free core not yet passed over, while the license allows.
    pub(crate) fn next_engine(&mut self, state: &State, candidates: &[Candidate]) -> Option<u32> {
        if self.license_left == 0 || !self.cycle_due {
            return None;
        }
        loop {
            let at = self.cores.next(state, candidates, &self.passed)?;
            if self.copies_pending.is_empty() || !self.holds_back(state, candidates[at as usize].engine) {
                return Some(at);
            }
            self.license_left = self.license_left.saturating_sub(1);
            self.engine_served(state, at, None);
            if self.license_left == 0 {
                return None;
            }
        }
    }

    /// The project the draw names for engine `e`: its winner. Should the
    /// winner have no task the shared rules let this engine take,
    /// [`TechilaOrder::more_jobs_for`] names the other entrants.
    pub(crate) fn jobs_for(&mut self, state: &State, e: EngineIdx) -> Vec<JobIdx> {
        self.serving = Some(e);
        self.last_winner = None;
        let mut order: Vec<JobIdx> = self
            .expired_first
            .iter()
            .copied()
            .filter(|&j| self.wanting_now(state, j) > 0 && expiry::copy_fits(state, j, e))
            .collect();
        let in_flight_per_job = &self.in_flight_per_job;
        let in_flight_of = |j: JobIdx| in_flight_per_job.get(j.0 as usize).copied().unwrap_or(0);
        let winner = self.projects.draw(state, &in_flight_of, (e, state.engine(e).free_slots()), &mut self.rng);
        if let Some(j) = winner {
            order.push(j);
        }
        self.last_winner = winner;
        order
    }

    /// Tasks of job `j` this run may still book: its waiting tasks and copies
    /// less its dispatches in flight and those booked this run.
    fn wanting_now(&self, state: &State, j: JobIdx) -> u32 {
        let in_flight = self.in_flight_per_job.get(j.0 as usize).copied().unwrap_or(0);
        let booked = self.booked.get(j.0 as usize).map_or(0, |indexes| indexes.len() as u32);
        state.job(j).n_wanting_dispatch().saturating_sub(in_flight + booked)
    }

    /// The other entrants of the last draw, by tickets (most first, then
    /// creation order), should its winner have no task for the engine.
    pub(crate) fn more_jobs_for(&mut self, state: &State) -> Vec<JobIdx> {
        let (Some(winner), Some(e)) = (self.last_winner.take(), self.serving) else { return Vec::new() };
        let mut rest: Vec<Entrant> = self.entrants(state, e);
        rest.retain(|entrant| entrant.job != winner);
        rest.sort_by_key(|entrant| (std::cmp::Reverse(entrant.tickets), state.job(entrant.job).submit_seq, entrant.job));
        rest.iter().map(|entrant| entrant.job).collect()
    }

    /// The entrants of a draw for engine `e` now, in the draw's order, with
    /// their tickets (at most [`DRAW_ENTRANTS_MAX`]).
    pub fn entrants(&mut self, state: &State, e: EngineIdx) -> Vec<Entrant> {
        let in_flight_per_job = &self.in_flight_per_job;
        let in_flight_of = |j: JobIdx| in_flight_per_job.get(j.0 as usize).copied().unwrap_or(0);
        self.projects
            .entrants(state, &in_flight_of, (e, state.engine(e).free_slots()), DRAW_ENTRANTS_MAX)
            .into_iter()
            .map(|listed| Entrant { job: listed.job, inputs: listed.inputs, ranking: listed.ranking, tickets: listed.tickets })
            .collect()
    }

    /// The entrants of the last draw (the engine last served), as they stand now.
    pub fn last_draw(&mut self, state: &State) -> Vec<Entrant> {
        match self.serving {
            Some(e) => self.entrants(state, e),
            None => Vec::new(),
        }
    }

    /// The entrants for engine `e` and their total tickets as the run's trees
    /// count them (tests check them against [`TechilaOrder::entrants`]).
    #[cfg(test)]
    pub(crate) fn counted(&mut self, state: &State, e: EngineIdx) -> (u32, u128) {
        let in_flight_per_job = &self.in_flight_per_job;
        let in_flight_of = |j: JobIdx| in_flight_per_job.get(j.0 as usize).copied().unwrap_or(0);
        self.projects.counted(state, &in_flight_of, (e, state.engine(e).free_slots()))
    }

    /// Books a task of `j` on engine `e` as the dispatch loop would (tests).
    #[cfg(test)]
    pub(crate) fn book_for_test(&mut self, state: &State, e: EngineIdx, j: JobIdx) {
        self.projects.booked(state, j, state.engine(e).props.mflops);
    }

    /// Notes the copies ordered but not yet folded (an expiry's `Reschedule`
    /// in this run's `orders`, or any `Reschedule` in flight): each holds back
    /// the fastest free core it could take ([`TechilaOrder::next_engine`]), so
    /// the copy, queued by the fold, gets that core at the next cycle before
    /// any task of another project; the other free cores are served as usual.
    pub(crate) fn wait_for_copies(&mut self, state: &State, in_flight: &InFlight, orders: &[Order]) {
        let ordered = orders.iter().filter_map(|order| match order {
            Order::Reschedule { task, reason: crate::core::event::RescheduleReason::Expired, .. } => state.task_key(task),
            _ => None,
        });
        let mut pending: Vec<TaskKey> = ordered.chain(in_flight.rescheduled()).collect();
        pending.sort_unstable();
        pending.dedup();
        pending.truncate(expiry::EXPIRIES_PER_RUN_MAX);
        self.copies_pending = pending;
    }

    /// Whether a pending copy may take engine `e` (then it holds it back):
    /// the job's category, its slots, and not the engine running the task.
    fn holds_back(&mut self, state: &State, e: EngineIdx) -> bool {
        let engine = state.engine(e);
        let at = self.copies_pending.iter().position(|&key| {
            let job = state.job(key.job);
            job.slots_per_task <= engine.free_slots()
                && state.category(job.category).is_eligible(e)
                && !state.live_attempts_of(key).iter().any(|live| live.engine == e)
        });
        at.map(|at| self.copies_pending.remove(at)).is_some()
    }

    pub fn has_booked(&self, key: TaskKey) -> bool {
        self.booked.get(key.job.0 as usize).is_some_and(|indexes| indexes.binary_search(&key.index).is_ok())
    }

    pub(crate) fn engine_served(&mut self, state: &State, at: u32, booked: Option<TaskKey>) {
        self.cores.served(at);
        match booked {
            Some(key) => {
                let j = key.job.0 as usize;
                if self.booked.len() <= j {
                    self.booked.resize_with(j + 1, Vec::new);
                }
                if let Err(at) = self.booked[j].binary_search(&key.index) {
                    self.booked[j].insert(at, key.index);
                }
                self.license_left = self.license_left.saturating_sub(1);
                let mflops = self.serving.map_or(0, |e| state.engine(e).props.mflops);
                self.projects.booked(state, key.job, mflops);
            }
            None => {
                self.passed.insert(at);
            }
        }
    }
}

/// Whether the fold may take a `Preempt` no operator asked for: under this
/// algorithm, of an attempt of a Lowest project.
pub fn may_preempt(state: &State, key: TaskKey) -> bool {
    state.policy.algorithm == Algorithm::Techila && project_priority(state.job(key.job)) == PRIORITY_LOWEST
}

/// The project a Lowest project's task gives way to: the most important
/// Normal-or-higher project wanting capacity (priority, then creation order).
pub fn preemptor(state: &State) -> Option<JobIdx> {
    state
        .runnable_jobs()
        .map(|rank| rank.job)
        .filter(|&j| project_priority(state.job(j)) <= PRIORITY_NORMAL && want::wants_capacity(state, j))
        .min_by_key(|&j| (project_priority(state.job(j)), state.job(j).submit_seq, j))
}

/// A `Preempt` of `key` under the rule above was read back: its job records
/// the project it gives way to.
pub(crate) fn preempted(state: &mut State, key: TaskKey) {
    let by = preemptor(state).map(|p| state.job(p).id.clone());
    state.job_mut(key.job).families.techila.preempted_by = by;
}

/// A user's project priority (in a submission or a change): a user may
/// lower its project below the default (Normal) but not raise it above; 0
/// is the default. Refused with (the setting, what was asked, the default).
pub(crate) fn user_project_priority(priority: u32) -> Result<(), (PrioritySetting, i64, i64)> {
    if priority != 0 && priority < PRIORITY_NORMAL {
        let setting = PrioritySetting::Family(FamilyPrioritySetting::Techila(TechilaPrioritySetting::ProjectPriority));
        return Err((setting, i64::from(priority), i64::from(PRIORITY_NORMAL)));
    }
    Ok(())
}

/// A job's project priority changed: taken when it is one of Techila's
/// (1, Highest, to 7, Lowest), whatever family is in force now (a job keeps
/// its project priority across a switch of algorithm).
pub(crate) fn set_project_priority(state: &mut State, j: JobIdx, priority: u32) -> Result<(), OpsProblem> {
    if !(PRIORITY_HIGHEST..=PRIORITY_LOWEST).contains(&priority) {
        let problem = TechilaOpsProblem::ProjectPriorityOutOfRange { priority };
        return Err(OpsProblem::Family(FamilyOpsProblem::Techila(problem)));
    }
    state.job_mut(j).options.project_priority = priority;
    Ok(())
}

/// Preempts tasks of Lowest projects when Normal-or-higher projects want more
/// capacity than the free cores (within the license) offer: for each such
/// project, most important first, its unmet want beyond the free slots its
/// engines have is met by preempting Lowest attempts on engines it may use,
/// the newest Lowest project's first. Preemptions in flight count as met.
pub fn preempt_lowest(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    let lowest: Vec<JobIdx> = {
        let mut jobs: Vec<JobIdx> = state
            .jobs_indexed()
            .filter(|(_, job)| job.is_active() && project_priority(job) == PRIORITY_LOWEST && job.counts.running + job.counts.dispatched > 0)
            .map(|(j, _)| j)
            .collect();
        jobs.sort_by_key(|&j| (std::cmp::Reverse(state.job(j).submit_seq), j));
        jobs
    };
    if lowest.is_empty() {
        return;
    }
    let mut wanting: Vec<JobIdx> = state
        .runnable_jobs()
        .map(|rank| rank.job)
        .filter(|&j| project_priority(state.job(j)) <= PRIORITY_NORMAL && want::wants_capacity(state, j))
        .collect();
    if wanting.is_empty() {
        return;
    }
    wanting.sort_by_key(|&j| (project_priority(state.job(j)), state.job(j).submit_seq, j));
    // Attempts of Lowest projects already ending (a preemption in flight).
    let mut attempts: Vec<(TaskKey, crate::core::ids::Attempt, EngineIdx)> = Vec::new();
    let mut n_ending = 0u64;
    for &j in &lowest {
        for (key, live) in state.live_attempts_of_job_sorted(j) {
            if in_flight.is_ending(key, live.attempt) || in_flight.is_controlled(key, live.attempt) {
                n_ending += 1;
            } else if !in_flight.is_lost(live.engine) {
                attempts.push((key, live.attempt, live.engine));
            }
        }
    }
    let cap = state.policy.techila.max_running_tasks;
    let mut license_free = if cap == 0 { u64::MAX } else { u64::from(cap).saturating_sub(running_tasks(state, in_flight)) };
    let mut taken: BTreeSet<usize> = BTreeSet::new();
    let mut n_ordered = 0usize;
    for &j in &wanting {
        let job = state.job(j);
        let category = state.category(job.category);
        let want = u64::from(want::n_wanting(state, j, u32::MAX).saturating_sub(in_flight.dispatched_of_job(j)));
        let free_slots: u64 = state
            .free_engines()
            .filter(|&e| category.is_eligible(e) && !in_flight.is_lost(e))
            .map(|e| u64::from(state.engine(e).free_slots().saturating_sub(in_flight.booked_slots(e)) / job.slots_per_task.max(1)))
            .sum();
        let free = free_slots.min(license_free);
        license_free = license_free.saturating_sub(want.min(free));
        let mut unmet = want.saturating_sub(free);
        let covered = unmet.min(n_ending);
        n_ending -= covered;
        unmet -= covered;
        for (at, &(key, attempt, e)) in attempts.iter().enumerate() {
            if unmet == 0 || n_ordered == PREEMPTS_PER_RUN_MAX {
                break;
            }
            if taken.contains(&at) || !category.is_eligible(e) || state.engine(e).slots < job.slots_per_task {
                continue;
            }
            let task = state.task_ref(key);
            if orders.ends(&task, attempt) {
                continue;
            }
            let engine = state.engine(e).id.clone();
            if !orders.push(Order::Preempt { task, attempt, engine }) {
                return;
            }
            taken.insert(at);
            n_ordered += 1;
            unmet -= 1;
        }
    }
}

/// What `why` says of a waiting task under this algorithm.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum TechilaWhy {
    /// The license is used up: `running` tasks of `cap`.
    LicenseCapReached { running: u64, cap: u32 },
    /// The user's more important project goes first.
    BehindUsersProject { project: JobId, project_priority: u32 },
    /// The job takes part in the draws; the tickets of each entrant of a
    /// cycle now on the fastest free core that may take it.
    InTheDraw { engine: String, tickets: Vec<(JobId, u128)> },
    /// No free core may take it now.
    NoFreeCore,
    /// Its task was preempted (a Lowest project) in favour of project `by`.
    Preempted { by: Option<JobId> },
}

impl std::fmt::Display for TechilaWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TechilaWhy::LicenseCapReached { running, cap } => {
                write!(f, "techila: license cap reached ({running}/{cap} tasks running)")
            }
            TechilaWhy::BehindUsersProject { project, project_priority } => write!(
                f,
                "techila: waiting behind the user's higher-priority project {project} (project priority {project_priority})"
            ),
            TechilaWhy::InTheDraw { engine, tickets } => {
                write!(f, "techila: lost the draw for {engine}; tickets:")?;
                for (job, t) in tickets {
                    write!(f, " {job}={t}")?;
                }
                Ok(())
            }
            TechilaWhy::NoFreeCore => write!(f, "techila: no free core may take it"),
            TechilaWhy::Preempted { by: Some(by) } => write!(f, "techila: preempted by project {by} (a Lowest project gives way)"),
            TechilaWhy::Preempted { by: None } => write!(f, "techila: preempted (a Lowest project gives way)"),
        }
    }
}

/// Why the waiting task `key` waits under this algorithm.
pub fn why(state: &State, key: TaskKey) -> TechilaWhy {
    let in_flight = InFlight::new();
    let j = key.job;
    let job = state.job(j);
    let cap = state.policy.techila.max_running_tasks;
    let running = running_tasks(state, &in_flight);
    if cap != 0 && running >= u64::from(cap) {
        return TechilaWhy::LicenseCapReached { running, cap };
    }
    if job.tasks[key.index as usize].is_preempted() {
        return TechilaWhy::Preempted { by: job.families.techila.preempted_by.clone() };
    }
    if !state.policy.techila.simultaneous_projects {
        let ahead = state
            .runnable_jobs()
            .map(|rank| rank.job)
            .filter(|&other| other != j && state.job(other).user_account == job.user_account)
            .map(|other| (project_priority(state.job(other)), state.job(other).submit_seq, other))
            .min();
        if let Some((priority, seq, other)) = ahead
            && (priority, seq, other) < (project_priority(job), job.submit_seq, j)
        {
            return TechilaWhy::BehindUsersProject { project: state.job(other).id.clone(), project_priority: priority };
        }
    }
    let mut order = TechilaOrder::new(state, &in_flight);
    let fastest = state
        .free_engines()
        .filter(|&e| state.category(job.category).is_eligible(e) && state.engine(e).free_slots() >= job.slots_per_task)
        .max_by_key(|&e| (state.engine(e).props.mflops, state.engine(e).free_slots(), std::cmp::Reverse(&state.engine(e).id)));
    let Some(e) = fastest else { return TechilaWhy::NoFreeCore };
    let tickets = order.entrants(state, e).iter().map(|entrant| (state.job(entrant.job).id.clone(), entrant.tickets)).collect();
    TechilaWhy::InTheDraw { engine: state.engine(e).id.to_string(), tickets }
}
