//! **The one place a scheduling family is plugged in.** The policy's
//! `algorithm` (Grid Engine's sched_conf(5) `algorithm`) selects a family; each
//! function here matches on it once (an order read back, on its kind), so
//! adding a family is a folder beside the others and one arm in each match
//! below. A family is a folder: `family/<name>/` holds everything that is its
//! own, and this file is the only one outside the folders that names one
//! (`core::tidy_tests` checks it). Nothing else branches on the algorithm: the
//! fold, `State` and `Job`, the dispatch loop
//! ([`crate::core::schedule::dispatch`]), the category bitsets, the shared
//! filters ([`crate::core::schedule::filters`]) and `why` ask the hooks here.
//!
//! What a family supplies:
//! - its **ordering** ([`ordering`]): *job-first* ([`JobOrder`]: which job
//!   next, the engine found for it by the shared ranking) or *resource-first*
//!   ([`EngineOrder`]: which free engine next, and which jobs it would take,
//!   told of the orders the run gave before its dispatch loop,
//!   [`Ordering::orders_so_far`]);
//!   an ordering may move as the run books slots (Grid Engine's access tree
//!   for `user_sort`, its re-sort of pending jobs after each dispatch in
//!   ticket mode), and then the loop asks it again after every booking;
//! - its **filters** ([`filter`]), each an [`Unfit`] with its reason, asked by
//!   the dispatch loop and by `why` through [`crate::core::schedule::filters::TaskRules`];
//! - its **lifecycle stages** ([`lifecycle`]), each capped, drawing from the
//!   run's one order budget;
//! - the **state it folds**: its own figures, grid-wide in one field of the
//!   state ([`FamilyStates`]) and per job in one field of each job
//!   ([`JobFamilies`]), each part defined in its folder; the shared figures it
//!   reads are folded for every family (usage per user and project in
//!   [`crate::core::state::accounts`]), so a switch of `algorithm` is one
//!   policy event and replay reproduces it;
//! - its **fold hooks** ([`on_event`], [`on_submit`], [`on_dispatch`],
//!   [`on_complete`], [`may_preempt`] and [`on_preempt`],
//!   [`on_project_priority`], and its own orders
//!   read back: [`read_back_copy`], [`read_back_job_order`]): the fold calls
//!   them and names no family. A copy a family orders that races its task
//!   (Techila's expired task, CiGri's finalize copy) is one verb of the state,
//!   `State::add_racing_copy`: queued first, its task's first result cancels
//!   the other attempts;
//! - its **policy section's limits**, asked by the one policy check
//!   ([`crate::core::policy_limits::check_policy`]) that the wire decoder, the
//!   file readers and the fold's policy step all run ([`check_policy_sections`],
//!   [`policy_durations`]);
//! - its **reasons**: a rejection or a filter's reason only it gives is a
//!   `Family` variant of the shared enum (`Unfit::Family`,
//!   `OrderProblem::Family`, `JobProblem::Family`, `OpsProblem::Family`),
//!   nesting an enum defined in its folder ([`reasons`], data only, so the
//!   low layers may hold it);
//! - its pieces of **`why`** ([`why_resource_first`], [`why_held`],
//!   [`why_copied`], [`why_excluded`]), each an enum with one variant per
//!   family that has such a piece ([`ResourceFirstWhy`], [`HeldWhy`],
//!   [`CopiedWhy`], [`ExcludedWhy`]), which the answer flattens under the
//!   family's key, so `why` names no family;
//! - its pieces of **`stat`** ([`JobStat`], [`GridStat`]): its figures of a
//!   job and of the grid, their notes, lines and tables, which the projector's
//!   answers flatten under the family's keys, so the queries and the command
//!   line's renderers name no family.
//!
//! | family | module | shape |
//! |---|---|---|
//! | `sge-plain` | [`sge_plain`] | job-first: `-p`, then FCFS or `user_sort` |
//! | `sgeee` | [`sgeee`] | job-first: dispatch priority from `-p`, urgency and tickets |
//! | `techila` | [`techila`] | resource-first: fastest free core, one project per user in a seeded ticket draw, license cap |
//! | `fbsng` | [`fbsng`] | job-first: queues of dynamic priorities with gaps, sections of dynamic priorities, process-type quotas |
//! | `cigri` | [`cigri`] | job-first: test campaigns, then FIFO; a filter keeps each cluster for its affinity campaigns first; finalize copies |

pub mod cigri;
pub mod data;
pub mod fbsng;
pub mod reasons;
pub mod sge_plain;
pub mod sgeee;
pub mod techila;
#[cfg(test)]
mod sge_tests;

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::core::schedule::budget::Orders;
use crate::core::schedule::candidate::Candidate;
use crate::core::schedule::in_flight::InFlight;
use crate::core::schedule::unfit::Unfit;
use crate::core::event::{Algorithm, Event, JobSpec, Order, Policy, RescheduleReason};
use crate::core::expr::Expr;
use crate::core::ids::Seq;
use crate::core::reject::{JobProblem, OpsProblem, OrderProblem, PrioritySetting};
use crate::core::state::{EngineIdx, JobIdx, JobRank, State, TaskKey};




// ---- fold hooks: what the fold asks of the family in force ---------------
//
// Each is one `match` on the algorithm (or, for an order, on its kind), and
// each family's arm calls into its folder; the fold names no family.


/// The event just applied at `seq` (log time `time_ms`; `applied`: not
/// rejected, a batch counts when its seal held; each report of an engine's
/// batch counts as an event of its own): the family notes what it folds.
pub(crate) fn on_event(state: &mut State, seq: Seq, time_ms: u64, event: &Event, applied: bool) {
    match state.policy.algorithm {
        Algorithm::Techila => techila::cycle::note_event(state, seq, event, applied),
        // FBSNG notes only policies and order batches, never in an engine's batch.
        Algorithm::Fbsng => fbsng::hooks::note_event(state, time_ms, event, applied),
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Cigri => {}
    }
}

/// A submitted job, its requirements parsed: the family admits it (or says
/// why not) and may join its own requirements to the job's.
pub(crate) fn on_submit(policy: &Policy, spec: &JobSpec, expr: Expr) -> Result<Expr, JobProblem> {
    match policy.algorithm {
        Algorithm::Fbsng => fbsng::admit_job(policy, spec, expr),
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Techila | Algorithm::Cigri => Ok(expr),
    }
}

/// A dispatch of `key` was read back: on engine `e`, or (`None`) as the
/// master part of a parallel booking.
pub(crate) fn on_dispatch(state: &mut State, key: TaskKey, e: Option<EngineIdx>) {
    match state.policy.algorithm {
        Algorithm::Fbsng => fbsng::hooks::section_started(state, key),
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Techila | Algorithm::Cigri => {}
    }
    // A test campaign is a job's own option (`campaign = "test"`): its
    // cluster is recorded under every algorithm, as it always was.
    if let Some(e) = e {
        cigri::hooks::dispatched(state, key, e);
    }
}

/// The first result of task `key` was folded: a success of its attempt on
/// engine `e`, started (or, with no start report, dispatched) at `started_ms`.
pub(crate) fn on_complete(state: &mut State, key: TaskKey, e: EngineIdx, started_ms: u64) {
    match state.policy.algorithm {
        Algorithm::Cigri => cigri::hooks::completed(state, key, e, started_ms),
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Techila | Algorithm::Fbsng => {}
    }
}

/// Whether the family's own rule preempts live task `key` (with no
/// operator's request): a `Preempt` order of it is the family's.
pub(crate) fn may_preempt(state: &State, key: TaskKey) -> bool {
    match state.policy.algorithm {
        Algorithm::Techila => techila::may_preempt(state, key),
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Fbsng | Algorithm::Cigri => false,
    }
}

/// A `Preempt` of task `key` under the family's own rule was read back
/// (before the attempt is preempted): the family records why.
pub(crate) fn on_preempt(state: &mut State, key: TaskKey) {
    match state.policy.algorithm {
        Algorithm::Techila => techila::preempted(state, key),
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Fbsng | Algorithm::Cigri => {}
    }
}

/// A user's project priority (a job's `project_priority` option, Techila's,
/// kept whatever family is in force): within what a user may set, or
/// (the setting, what was asked, the default) when above it.
pub(crate) fn user_project_priority(priority: u32) -> Result<(), (PrioritySetting, i64, i64)> {
    techila::user_project_priority(priority)
}

/// A job's project priority changed (`ProjectPriorityChanged`: Techila's,
/// kept by the job whatever family is in force): taken, or refused with the
/// family's problem.
pub(crate) fn on_project_priority(state: &mut State, j: JobIdx, priority: u32) -> Result<(), OpsProblem> {
    techila::set_project_priority(state, j, priority)
}

/// A family's copy of live task `key` read back (a `Reschedule` of reason
/// `Expired` or `Finalize`): taken when the family wants it, refused otherwise.
pub(crate) fn read_back_copy(state: &mut State, key: TaskKey, order: &Order) -> Result<(), OrderProblem> {
    match order {
        Order::Reschedule { reason: RescheduleReason::Expired, elapsed_ms, limit_ms, .. } => {
            if !techila::expiry::copy_wanted(state, key) {
                return Err(OrderProblem::NoCopyWanted);
            }
            techila::expiry::mark_expired(state, key, *elapsed_ms, *limit_ms);
        }
        Order::Reschedule { reason: RescheduleReason::Finalize, .. } => {
            if !cigri::finalize_wanted(state, key) {
                return Err(OrderProblem::NoCopyWanted);
            }
            cigri::mark_finalized(state, key);
        }
        _ => return Err(OrderProblem::NoCopyWanted),
    }
    Ok(())
}

/// A family's own order about job `j` read back (`EndTestCampaign`,
/// `FlagSink`): applied when it holds, refused with its problem otherwise.
pub(crate) fn read_back_job_order(state: &mut State, j: JobIdx, order: &Order) -> Result<(), OrderProblem> {
    match order {
        Order::EndTestCampaign { .. } | Order::FlagSink { .. } => cigri::read_back_job_order(state, j, order),
        _ => Err(OrderProblem::UnknownJob),
    }
}

// ---- why: the families' pieces of an explanation -------------------------

/// The durations of the families' policy sections that are checked with the
/// policy's other durations (the part of
/// [`crate::core::policy_limits::check_policy`] the families own, beside
/// [`check_policy_sections`]): (field, value, least, most).
pub fn policy_durations(policy: &Policy) -> impl Iterator<Item = (&'static str, u64, u64, u64)> {
    techila::cycle::policy_durations(&policy.techila).into_iter()
}

/// Each family's own policy section within its limits (the part of
/// [`crate::core::policy_limits::check_policy`] the families own): the
/// section's name, the field within it and why, for the first one past a limit.
pub fn check_policy_sections(policy: &crate::core::event::Policy) -> Result<(), (&'static str, (String, String))> {
    fbsng::check_policy(&policy.fbsng).map_err(|p| ("fbsng", p))?;
    cigri::check_policy(&policy.cigri).map_err(|p| ("cigri", p))?;
    Ok(())
}

pub use cigri::sink::SinkWarning;
pub use data::{FamilyStates, FilterScope, JobFamilies, OrderKey, SinkTarget};
pub use fbsng::FbsngHold;
pub use techila::expiry::ExpiredWhy;
pub use techila::TechilaWhy;

/// The rule of a resource-first family that keeps a waiting task waiting:
/// one variant per such family, its answer's key (`techila`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceFirstWhy {
    Techila(Box<TechilaWhy>),
}

impl std::fmt::Display for ResourceFirstWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResourceFirstWhy::Techila(why) => write!(f, "{why}"),
        }
    }
}

/// The rule of the family's ordering that holds a runnable job: one
/// variant per family that has such rules, its answer's key (`fbsng`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldWhy {
    Fbsng(Box<FbsngHold>),
}

impl std::fmt::Display for HeldWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeldWhy::Fbsng(hold) => write!(f, "fbsng: {hold}"),
        }
    }
}

/// Why a live task was copied under a family's rule, its answer's key
/// (`techila_expired`: the task ran past its expected time).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CopiedWhy {
    TechilaExpired(ExpiredWhy),
}

impl std::fmt::Display for CopiedWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CopiedWhy::TechilaExpired(expired) => write!(f, "{expired}"),
        }
    }
}

/// The engines and clusters a job excludes under a family's rule, its
/// answer's key (`cigri_sinks`: the sinks its campaign flagged).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ExcludedWhy {
    CigriSinks(Vec<SinkWarning>),
}

impl std::fmt::Display for ExcludedWhy {
    /// One line each, indented as the lines of `why` are.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExcludedWhy::CigriSinks(sinks) => sinks.iter().try_for_each(|sink| writeln!(f, "  {sink}")),
        }
    }
}

/// Why waiting task `key` waits under a resource-first family's own rule.
pub fn why_resource_first(state: &State, key: TaskKey) -> Option<ResourceFirstWhy> {
    match state.policy.algorithm {
        Algorithm::Techila => Some(ResourceFirstWhy::Techila(Box::new(techila::why(state, key)))),
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Fbsng | Algorithm::Cigri => None,
    }
}

/// The rule of the family's ordering that holds runnable job `j`, if one does.
pub fn why_held(state: &State, j: JobIdx) -> Option<HeldWhy> {
    match state.policy.algorithm {
        Algorithm::Fbsng => fbsng::hold_of(state, j).map(|hold| HeldWhy::Fbsng(Box::new(hold))),
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Techila | Algorithm::Cigri => None,
    }
}

/// Why live task `key` was copied under a family's rule (an expired task),
/// whatever family is in force now.
pub fn why_copied(state: &State, key: TaskKey) -> Option<CopiedWhy> {
    techila::expiry::why(state, key).map(CopiedWhy::TechilaExpired)
}

/// The engines and clusters job `j` excludes under a family's rule (the
/// sinks its campaign flagged), whatever family is in force now.
pub fn why_excluded(state: &State, j: JobIdx) -> Option<ExcludedWhy> {
    let sinks = cigri::sink::warnings(state, j);
    (!sinks.is_empty()).then_some(ExcludedWhy::CigriSinks(sinks))
}

// ---- stat: the families' pieces of `gridfold stat` -------------------------

/// The families' figures of one job in `gridfold stat`: a part of the job's
/// summary (flattened into it), each under its family's key.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct JobStat {
    /// Techila's: its tasks still running that expired (ran past
    /// `expected_task_time`) and were copied.
    #[serde(default)]
    pub expired: u32,
    /// Under `cigri`: the campaign's type, the predictor's figures and its sink flags.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cigri: Option<cigri::summary::CampaignSummary>,
}

impl JobStat {
    pub fn of(state: &State, j: JobIdx) -> JobStat {
        JobStat { expired: techila::expiry::n_expired_live(state.job(j)), cigri: cigri::summary::CampaignSummary::of(state, j) }
    }

    /// What a person should know of the job under its families, as notes
    /// after its columns.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if self.expired > 0 {
            notes.push(format!("{} EXPIRED (running past expected_task_time; copied)", self.expired));
        }
        notes
    }

    /// The lines under the job in the summary's text, as of log time
    /// `now_ms`, each without its line break (names as given: the front end
    /// escapes what a terminal must not see).
    pub fn lines(&self, now_ms: u64) -> Vec<String> {
        self.cigri.as_ref().map(|campaign| campaign.lines(now_ms)).unwrap_or_default()
    }
}

/// The families' figures of the grid in `gridfold stat`: a part of the
/// summary (flattened into it), each under its family's key.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct GridStat {
    /// Under `fbsng`: each queue's priority and waiting sections.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fbsng_queues: Vec<fbsng::QueueStatus>,
}

impl GridStat {
    pub fn of(state: &State) -> GridStat {
        GridStat { fbsng_queues: fbsng::queue_statuses(state) }
    }

    /// Whether the families have nothing to show of the grid.
    pub fn is_empty(&self) -> bool {
        self.fbsng_queues.is_empty()
    }
}

impl std::fmt::Display for GridStat {
    /// The families' tables, each line ending in a line break; nothing when
    /// they have none.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", fbsng::QueueTable(&self.fbsng_queues))
    }
}

/// How the run's dispatch loop is driven.
pub enum Ordering<'s> {
    JobFirst(JobOrder<'s>),
    ResourceFirst(EngineOrder),
}

impl Ordering<'_> {
    /// The orders the run has given before its dispatch loop (the
    /// lifecycle stages'), for an ordering that serves some first (Techila:
    /// each expired task's copy holds back the core it will take).
    pub fn orders_so_far(&mut self, state: &State, in_flight: &InFlight, orders: &[Order]) {
        match self {
            Ordering::ResourceFirst(EngineOrder::Techila(order)) => order.wait_for_copies(state, in_flight, orders),
            Ordering::JobFirst(_) => {}
        }
    }
}

/// The ordering of the policy's family for one run.
pub fn ordering<'s>(state: &'s State, in_flight: &InFlight) -> Ordering<'s> {
    match state.policy.algorithm {
        // Grid Engine's plain mode: FCFS within `-p`, or with `user_sort` an
        // order that moves as users book.
        Algorithm::SgePlain if state.policy.sge.user_sort => {
            Ordering::JobFirst(JobOrder::Moving(MovingOrder::new(state, in_flight, MovingRule::UserSort)))
        }
        Algorithm::SgePlain => Ordering::JobFirst(JobOrder::Fcfs(state.runnable_jobs())),
        Algorithm::Sgeee => Ordering::JobFirst(JobOrder::Moving(MovingOrder::new(
            state,
            in_flight,
            MovingRule::Tickets(Box::new(sgeee::Tickets::for_run(state))),
        ))),
        Algorithm::Techila => {
            Ordering::ResourceFirst(EngineOrder::Techila(Box::new(techila::TechilaOrder::new(state, in_flight))))
        }
        Algorithm::Fbsng => Ordering::JobFirst(JobOrder::Fbsng(Box::new(fbsng::FbsngOrder::new(state, in_flight)))),
        Algorithm::Cigri => Ordering::JobFirst(JobOrder::Cigri(cigri::CigriOrder::new(state, in_flight))),
    }
}

/// The family's own filters for the task on engine `e`, after the shared ones.
pub fn filter(state: &State, key: TaskKey, e: EngineIdx) -> Result<(), Unfit> {
    match state.policy.algorithm {
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Techila | Algorithm::Fbsng => Ok(()),
        Algorithm::Cigri => cigri::filter(state, key, e),
    }
}


/// The scope of the family's filter on task `key` (see [`FilterScope`]).
pub fn filter_scope(state: &State, key: TaskKey) -> FilterScope {
    match state.policy.algorithm {
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Techila | Algorithm::Fbsng => FilterScope::Category,
        Algorithm::Cigri => cigri::filter_scope(state, key),
    }
}

/// Per engine index, whether the family's filter refuses task `key` there:
/// asked once per run and class of [`FilterScope::Class`], whose tasks share
/// every verdict.
pub fn refused_engines(state: &State, key: TaskKey) -> Vec<bool> {
    match state.policy.algorithm {
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Techila | Algorithm::Fbsng => vec![false; state.engines().len()],
        Algorithm::Cigri => cigri::refused_engines(state, key),
    }
}

/// The family's own lifecycle stages, run after the shared ones and before dispatch.
pub fn lifecycle(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    match state.policy.algorithm {
        Algorithm::SgePlain | Algorithm::Sgeee | Algorithm::Fbsng => {}
        Algorithm::Techila => {
            techila::expiry::copy_expired_tasks(state, in_flight, orders);
            techila::preempt_lowest(state, in_flight, orders);
        }
        Algorithm::Cigri => {
            cigri::end_test_campaigns(state, in_flight, orders);
            cigri::finalize(state, in_flight, orders);
            cigri::sink::flag_sinks(state, in_flight, orders);
        }
    }
}

/// Where a job stands in its family's ordering, for `why`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobPosition {
    /// How many runnable jobs come before it.
    pub jobs_ahead: usize,
    /// The rule that puts them first.
    pub rule: &'static str,
    /// The first job ahead, with what ranks it there.
    pub first_ahead: Option<JobAhead>,
    /// The job's own figures under the rule.
    pub figures: Vec<(&'static str, i64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobAhead {
    pub job: String,
    /// The figures the rule compares, by name (`priority`, `running_tasks`,
    /// `tickets`, `urgency`, `dispatch_priority`), as the family computes them.
    pub figures: Vec<(&'static str, i64)>,
}

/// Where runnable job `j` stands in the ordering of a run starting now.
pub fn position(state: &State, j: JobIdx) -> JobPosition {
    let in_flight = InFlight::new();
    let Ordering::JobFirst(mut order) = ordering(state, &in_flight) else {
        return JobPosition { jobs_ahead: 0, rule: "resource-first", first_ahead: None, figures: Vec::new() };
    };
    let mut jobs_ahead = 0;
    let mut first = None;
    while let Some(next) = order.next(state) {
        if next == j {
            break;
        }
        first.get_or_insert(next);
        jobs_ahead += 1;
    }
    let first_ahead = first.map(|ahead| JobAhead { job: state.job(ahead).id.to_string(), figures: order.figures(state, ahead) });
    let figures = order.figures(state, j);
    JobPosition { jobs_ahead, rule: order.rule_name(), first_ahead, figures }
}

/// A job-first ordering.
pub enum JobOrder<'s> {
    /// A fixed order for the whole run: `-p`, then first come first served.
    Fcfs(std::collections::btree_set::Iter<'s, JobRank>),
    /// An order that moves as the run books tasks.
    Moving(MovingOrder),
    /// FBSNG's queues and sections ([`fbsng`]), moving as the run books.
    Fbsng(Box<fbsng::FbsngOrder>),
    /// CiGri's metascheduler ([`cigri`]): test campaigns, then the rest.
    Cigri(cigri::CigriOrder),
}

impl JobOrder<'_> {
    pub fn next(&mut self, state: &State) -> Option<JobIdx> {
        match self {
            JobOrder::Fcfs(ranks) => ranks.next().map(|rank| rank.job),
            JobOrder::Moving(order) => order.next(state),
            JobOrder::Fbsng(order) => order.next(state),
            JobOrder::Cigri(order) => order.next(state),
        }
    }

    pub fn moves_on_booking(&self) -> bool {
        matches!(self, JobOrder::Moving(_) | JobOrder::Fbsng(_) | JobOrder::Cigri(_))
    }

    /// The run booked one task of `j` (only asked of an order that moves).
    pub fn booked(&mut self, state: &State, j: JobIdx) {
        match self {
            JobOrder::Moving(order) => order.booked(state, j),
            JobOrder::Fbsng(order) => order.booked(state, j),
            JobOrder::Cigri(order) => order.booked(state, j),
            JobOrder::Fcfs(_) => {}
        }
    }

    fn rule_name(&self) -> &'static str {
        match self {
            JobOrder::Fcfs(_) => "priority-then-submission",
            JobOrder::Moving(order) => order.rule.name(),
            JobOrder::Fbsng(_) => "fbsng-queue-and-section-priority",
            JobOrder::Cigri(_) => "cigri-test-campaigns-then-submission",
        }
    }

    fn figures(&self, state: &State, j: JobIdx) -> Vec<(&'static str, i64)> {
        match self {
            JobOrder::Fcfs(_) => {
                let job = state.job(j);
                vec![("priority", i64::from(job.priority)), ("submitted_seq", job.submit_seq.0 as i64)]
            }
            JobOrder::Moving(order) => order.figures(state, j),
            JobOrder::Fbsng(order) => order.figures(state, j),
            JobOrder::Cigri(_) => cigri::figures(state, j),
        }
    }
}

/// What decides a moving order: each family's key.
pub enum MovingRule {
    /// `sge-plain` with `user_sort`.
    UserSort,
    /// `sgeee`: dispatch priorities.
    Tickets(Box<sgeee::Tickets>),
}

impl MovingRule {
    fn name(&self) -> &'static str {
        match self {
            MovingRule::UserSort => "user-sort",
            MovingRule::Tickets(_) => "dispatch-priority",
        }
    }
}


#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct MovingEntry {
    key: OrderKey,
    job: Reverse<JobIdx>,
    /// The owner's bookings when the key was computed: a key is stale once
    /// they change (bookings only lower a user's keys, so the first fresh
    /// entry at the top is the true greatest).
    owner_booked_then: u32,
}

/// The runnable jobs in a heap by key, re-keyed lazily as their owners book.
pub struct MovingOrder {
    rule: MovingRule,
    heap: BinaryHeap<MovingEntry>,
    /// Per user account: tasks booked this run plus dispatches in flight.
    booked_by_owner: Vec<u32>,
}

impl MovingOrder {
    pub fn new(state: &State, in_flight: &InFlight, rule: MovingRule) -> MovingOrder {
        let mut booked_by_owner = vec![0u32; state.users.len()];
        for (j, n) in in_flight.dispatched_per_job() {
            if let Some(job) = state.job_if_held(j) {
                booked_by_owner[job.user_account.0 as usize] += n;
            }
        }
        let mut order = MovingOrder { rule, heap: BinaryHeap::new(), booked_by_owner };
        let entries: Vec<MovingEntry> = state.runnable_jobs().map(|rank| order.entry(state, rank.job)).collect();
        order.heap = BinaryHeap::from(entries);
        order
    }

    fn entry(&self, state: &State, j: JobIdx) -> MovingEntry {
        let owner = state.job(j).user_account;
        let owner_booked_then = self.booked_by_owner[owner.0 as usize];
        MovingEntry { key: self.key(state, j, owner_booked_then), job: Reverse(j), owner_booked_then }
    }

    fn key(&self, state: &State, j: JobIdx, owner_booked: u32) -> OrderKey {
        match &self.rule {
            MovingRule::UserSort => sge_plain::user_sort_key(state, j, owner_booked),
            MovingRule::Tickets(tickets) => tickets.key(state, j, owner_booked),
        }
    }

    fn next(&mut self, state: &State) -> Option<JobIdx> {
        loop {
            let top = self.heap.pop()?;
            let Reverse(j) = top.job;
            let owner = state.job(j).user_account;
            if top.owner_booked_then == self.booked_by_owner[owner.0 as usize] {
                return Some(j);
            }
            self.heap.push(self.entry(state, j));
        }
    }

    fn booked(&mut self, state: &State, j: JobIdx) {
        let owner = state.job(j).user_account;
        self.booked_by_owner[owner.0 as usize] += 1;
        self.heap.push(self.entry(state, j));
    }

    fn figures(&self, state: &State, j: JobIdx) -> Vec<(&'static str, i64)> {
        let owner_booked = self.booked_by_owner[state.job(j).user_account.0 as usize];
        match &self.rule {
            MovingRule::UserSort => {
                let key = sge_plain::user_sort_key(state, j, owner_booked);
                vec![("priority", key.primary), ("running_tasks", -key.secondary)]
            }
            MovingRule::Tickets(tickets) => tickets.figures(state, j, owner_booked),
        }
    }
}

/// A resource-first ordering: which free engine next, and the jobs it would
/// take, best first (Techila's, [`techila`]).
pub enum EngineOrder {
    Techila(Box<techila::TechilaOrder>),
}

impl EngineOrder {
    /// The next free engine to serve (its position among the run's candidates).
    pub(crate) fn next_engine(&mut self, state: &State, candidates: &[Candidate]) -> Option<u32> {
        match self {
            EngineOrder::Techila(order) => order.next_engine(state, candidates),
        }
    }

    /// The jobs engine `e` would take, best first.
    pub(crate) fn jobs_for(&mut self, state: &State, e: EngineIdx) -> Vec<JobIdx> {
        match self {
            EngineOrder::Techila(order) => order.jobs_for(state, e),
        }
    }

    /// The jobs engine `e` would take after those `jobs_for` named, should
    /// none of those have had a task for it, best first (computed only then).
    pub(crate) fn more_jobs_for(&mut self, state: &State) -> Vec<JobIdx> {
        match self {
            EngineOrder::Techila(order) => order.more_jobs_for(state),
        }
    }

    /// Whether the run already booked this task.
    pub(crate) fn has_booked(&self, key: TaskKey) -> bool {
        match self {
            EngineOrder::Techila(order) => order.has_booked(key),
        }
    }

    /// The engine at `at` was served (and booked `task`, or nothing).
    pub(crate) fn engine_served(&mut self, state: &State, at: u32, booked: Option<TaskKey>) {
        match self {
            EngineOrder::Techila(order) => order.engine_served(state, at, booked),
        }
    }
}
