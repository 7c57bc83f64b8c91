//! Feasibility: may this engine take this task? Each rule is one function with
//! one reason, in the order a rejection is reported; the first that fails is the
//! reason `gridfold why` gives.
//!
//! Two kinds of rule. The *category rules* (requirements, slots,
//! discriminator, library) depend only on the task's category and the engine:
//! the dispatch loop reads them from a bitset precomputed per category (an
//! invariant of the state checks the bitset against these functions). The
//! *task rules* (blacklist, a copy not beside its task, a retry not back where
//! it failed, and the filters a scheduling family adds) depend on the task:
//! [`TaskRules`] is their one definition, built once per task and asked per
//! engine, by the dispatch loop and by `why` alike, so `why` cannot list under
//! "fit now" an engine dispatch would not use.

use crate::core::event::LibraryRef;
use crate::core::family::reasons::FamilyUnfit;
use crate::core::state::{Category, Engine, EngineIdx, EngineStatus, Job, JobIdx, State, TaskKey, TaskStatus};

/// Why an engine cannot take a task now.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unfit {
    /// The engine is logged out or lost.
    NotLoggedIn,
    /// The job's requirements expression is false for this engine.
    RequirementsFalse,
    /// The engine has fewer slots in all than one task needs.
    TooFewSlots { slots: u32, needed: u32 },
    /// The task's own discriminator is false for this engine.
    DiscriminatorFalse,
    /// The engine has not reported the job's root library synced.
    LibraryMissing { library: LibraryRef, syncing: bool },
    /// The job blacklisted the engine after its failures (or is about to).
    Blacklisted { failures: u32 },
    /// A redundant copy does not go where the task already runs.
    RunsThisTask,
    /// A retry does not go back to the engine it last failed on while another
    /// logged-in engine could run it: it waits for that one.
    RetryAvoids,
    /// The engine is full for now.
    NoFreeSlot { free: u32, needed: u32 },
    /// The engine could take it, but engines of a higher tier that can are free.
    TierHeld { tier: u32, best_tier: u32 },
    /// An operator drained the engine (`gridfold engine drain`): no new work.
    Drained,
    /// Flood control: the gateway engine holds `held` slots of tasks not yet
    /// started in its cluster's queue, and its job ratio allows `allowed`.
    FloodHeld { held: u32, allowed: u32 },
    /// A rule of the family in force's own filter (its reasons are defined
    /// in the family's folder).
    Family(FamilyUnfit),
}

impl Unfit {
    /// Whether this reason holds until the engine, the job or an operator
    /// changes it, rather than passing by itself (a slot frees, a sync ends).
    pub fn is_permanent(&self) -> bool {
        matches!(
            self,
            Unfit::RequirementsFalse | Unfit::TooFewSlots { .. } | Unfit::DiscriminatorFalse | Unfit::Blacklisted { .. }
        )
    }

    pub fn rule_name(&self) -> &'static str {
        match self {
            Unfit::NotLoggedIn => "engine-not-logged-in",
            Unfit::RequirementsFalse => "requirements-false",
            Unfit::TooFewSlots { .. } => "too-few-slots",
            Unfit::DiscriminatorFalse => "discriminator-false",
            Unfit::LibraryMissing { .. } => "library-missing",
            Unfit::Blacklisted { .. } => "blacklisted",
            Unfit::RunsThisTask => "runs-this-task",
            Unfit::RetryAvoids => "retry-avoids-engine",
            Unfit::NoFreeSlot { .. } => "no-free-slot",
            Unfit::TierHeld { .. } => "tier-held",
            Unfit::Drained => "engine-drained",
            Unfit::FloodHeld { .. } => "flood-held",
            Unfit::Family(unfit) => unfit.rule_name(),
        }
    }
}

pub fn logged_in(engine: &Engine) -> Result<(), Unfit> {
    if engine.status == EngineStatus::LoggedIn { Ok(()) } else { Err(Unfit::NotLoggedIn) }
}

pub fn not_drained(engine: &Engine) -> Result<(), Unfit> {
    if engine.drained { Err(Unfit::Drained) } else { Ok(()) }
}

pub fn requirements(state: &State, job: &Job, engine: &Engine) -> Result<(), Unfit> {
    let category = state.category(job.category);
    let expr = category.expr.as_ref().expect("category expressions are always built");
    if expr.eval(&engine.props, engine.slots) { Ok(()) } else { Err(Unfit::RequirementsFalse) }
}

pub fn enough_slots(job: &Job, engine: &Engine) -> Result<(), Unfit> {
    // A task of span `site` needs one slot of an engine to take a part there.
    let needed = super::parallel::slots_per_engine(job.slots_per_task, job.options.span);
    if engine.slots >= needed {
        Ok(())
    } else {
        Err(Unfit::TooFewSlots { slots: engine.slots, needed })
    }
}

/// The task's discriminator (its category joins it to the job's requirements).
pub fn discriminator(state: &State, job: &Job, task_index: u32, engine: &Engine) -> Result<(), Unfit> {
    let Some(c) = job.condition(task_index).and_then(|condition| condition.category) else { return Ok(()) };
    let expr = state.category(c).expr.as_ref().expect("category expressions are always built");
    if expr.eval(&engine.props, engine.slots) { Ok(()) } else { Err(Unfit::DiscriminatorFalse) }
}

pub fn library(job: &Job, engine: &Engine) -> Result<(), Unfit> {
    match &job.options.root_library {
        Some(library) if !engine.holds(library) => Err(Unfit::LibraryMissing {
            library: library.clone(),
            syncing: engine.syncing.as_ref() == Some(library),
        }),
        _ => Ok(()),
    }
}

/// The rules that depend on the task, not only on its category: built once per
/// task, asked per engine. The dispatch loop excludes exactly the engines
/// [`TaskRules::check`] refuses, and `why` reports the same refusals.
pub struct TaskRules<'s> {
    state: &'s State,
    key: TaskKey,
    /// A redundant copy's task: the engines already running it.
    running_here: Vec<crate::core::state::LiveAttempt>,
    /// A retry's last failed engine, avoided while another could run it.
    avoided: Option<EngineIdx>,
    /// How widely the family's filter verdicts on this task are shared.
    family: crate::core::family::FilterScope,
}

/// Which other tasks share a task's refusal by every free engine of its
/// category: what the dispatch loop may conclude from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalScope {
    /// Every task of the category: nothing free may take any this run.
    Category,
    /// Every task of the jobs of one class of the family's filter (and of
    /// the category).
    Class(u64),
    /// Every task of the job of the same category and without conditions
    /// (its blacklist refuses for all of them).
    Job,
    /// This task alone (a copy beside its task, a retry avoiding an engine,
    /// a family filter judging task by task).
    Task,
}

impl<'s> TaskRules<'s> {
    pub fn new(state: &'s State, key: TaskKey) -> TaskRules<'s> {
        let job = state.job(key.job);
        let task = state.task(key);
        let running_here = if task.is_live() { state.live_attempts_of(key) } else { Vec::new() };
        let category = state.category(job.condition(key.index).and_then(|condition| condition.category).unwrap_or(job.category));
        let avoided = task
            .last_failed_on
            .get()
            .filter(|_| task.status == TaskStatus::Waiting)
            .filter(|&failed| another_engine_could_run(state, key.job, category, failed));
        let family = crate::core::family::filter_scope(state, key);
        TaskRules { state, key, running_here, avoided, family }
    }

    /// Every task rule, in reporting order.
    pub fn check(&self, e: EngineIdx) -> Result<(), Unfit> {
        not_blacklisted(self.state, self.key.job, e)?;
        if self.running_here.iter().any(|live| live.engine == e) {
            return Err(Unfit::RunsThisTask);
        }
        if self.avoided == Some(e) {
            return Err(Unfit::RetryAvoids);
        }
        crate::core::family::filter(self.state, self.key, e)
    }

    /// Which other tasks every refusal of this task holds for (see [`RefusalScope`]).
    pub fn refusal_scope(&self) -> RefusalScope {
        use crate::core::family::FilterScope;
        let job = self.state.job(self.key.job);
        if !self.running_here.is_empty()
            || self.avoided.is_some()
            || !job.copies_waiting_is_empty()
            || self.family == FilterScope::Task
        {
            return RefusalScope::Task;
        }
        if !job.blacklist.is_empty() || self.state.has_pending_blacklist(self.key.job) {
            return RefusalScope::Job;
        }
        match self.family {
            FilterScope::Class(class) => RefusalScope::Class(class),
            _ => RefusalScope::Category,
        }
    }

    /// The scope of the family's filter on this task.
    pub fn family_scope(&self) -> crate::core::family::FilterScope {
        self.family
    }

    /// The engine a retry keeps away from, if any.
    pub fn avoided(&self) -> Option<EngineIdx> {
        self.avoided
    }
}

pub fn not_blacklisted(state: &State, j: JobIdx, e: EngineIdx) -> Result<(), Unfit> {
    let job = state.job(j);
    if job.blacklist.contains(&e) || state.is_blacklist_pending(j, e) {
        Err(Unfit::Blacklisted { failures: job.failures_by_engine.get(&e).copied().unwrap_or(0) })
    } else {
        Ok(())
    }
}

pub fn free_slot(job: &Job, engine: &Engine, booked_in_flight: u32) -> Result<(), Unfit> {
    let free = engine.free_slots().saturating_sub(booked_in_flight);
    let needed = super::parallel::slots_per_engine(job.slots_per_task, job.options.span);
    if free >= needed { Ok(()) } else { Err(Unfit::NoFreeSlot { free, needed }) }
}

/// Every per-engine rule but the tier, in reporting order.
pub fn check(state: &State, rules: &TaskRules, e: EngineIdx, booked_in_flight: u32) -> Result<(), Unfit> {
    let key = rules.key;
    let job = state.job(key.job);
    let engine = state.engine(e);
    logged_in(engine)?;
    not_drained(engine)?;
    requirements(state, job, engine)?;
    enough_slots(job, engine)?;
    discriminator(state, job, key.index, engine)?;
    library(job, engine)?;
    rules.check(e)?;
    free_slot(job, engine, booked_in_flight)?;
    super::flood::filter(state, e, job.slots_per_task, booked_in_flight)
}

/// Whether a logged-in engine other than `failed`, eligible for the category and
/// not blacklisted by the job (nor about to be), could run the job's task.
fn another_engine_could_run(state: &State, j: JobIdx, category: &Category, failed: EngineIdx) -> bool {
    let counted = |e: EngineIdx| category.is_eligible(e) && state.engine(e).status == EngineStatus::LoggedIn;
    // A pair is pending or blacklisted, never both (an invariant of the state).
    let barred = state.job(j).blacklist.iter().copied().chain(state.pending_blacklists_of(j));
    let n_barred = barred.filter(|&e| e != failed && counted(e)).count() as u32;
    category.eligible_logged_in - u32::from(counted(failed)) > n_barred
}

/// The tier rule over the engines that pass every other rule: all but those of
/// the best tier among them are held.
pub fn tier(engine: &Engine, best_tier: u32) -> Result<(), Unfit> {
    if engine.tier <= best_tier { Ok(()) } else { Err(Unfit::TierHeld { tier: engine.tier, best_tier }) }
}

/// A task rule, not an engine rule: the tasks it depends on must have ended.
/// Returns the first that has not.
pub fn dependencies_ended(state: &State, key: TaskKey) -> Result<(), TaskKey> {
    let Some(condition) = state.job(key.job).condition(key.index) else { return Ok(()) };
    match condition.depends_on.iter().find(|&&dependency| !state.task_has_ended(dependency)) {
        Some(&pending) => Err(pending),
        None => Ok(()),
    }
}
