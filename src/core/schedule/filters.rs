//! Feasibility: may this engine take this task? Each rule is one function with
//! one reason, in the order a rejection is reported; the first that fails is the
//! reason `gridfold why` gives.
//!
//! The dispatch loop does not call these one by one: the requirement, slot,
//! discriminator and library rules are precomputed per category as a bitset, the
//! blacklist and copy rules are closures over the job. The rules here are the
//! definition those must agree with, and what `explain` evaluates.

use crate::core::event::LibraryRef;
use crate::core::state::{Engine, EngineIdx, EngineStatus, Job, JobIdx, State, TaskKey, TaskState, TaskStatus};

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
    /// The engine is full for now.
    NoFreeSlot { free: u32, needed: u32 },
    /// The engine could take it, but engines of a higher tier that can are free.
    TierHeld { tier: u32, best_tier: u32 },
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
            Unfit::NoFreeSlot { .. } => "no-free-slot",
            Unfit::TierHeld { .. } => "tier-held",
        }
    }
}

pub fn logged_in(engine: &Engine) -> Result<(), Unfit> {
    if engine.status == EngineStatus::LoggedIn { Ok(()) } else { Err(Unfit::NotLoggedIn) }
}

pub fn requirements(state: &State, job: &Job, engine: &Engine) -> Result<(), Unfit> {
    let category = state.category(job.category);
    let expr = category.expr.as_ref().expect("category expressions are always built");
    if expr.eval(&engine.props, engine.slots) { Ok(()) } else { Err(Unfit::RequirementsFalse) }
}

pub fn enough_slots(job: &Job, engine: &Engine) -> Result<(), Unfit> {
    if engine.slots >= job.slots_per_task {
        Ok(())
    } else {
        Err(Unfit::TooFewSlots { slots: engine.slots, needed: job.slots_per_task })
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

pub fn not_blacklisted(state: &State, j: JobIdx, e: EngineIdx) -> Result<(), Unfit> {
    let job = state.job(j);
    if job.blacklist.contains(&e) || state.is_blacklist_pending(j, e) {
        Err(Unfit::Blacklisted { failures: job.failures_by_engine.get(&e).copied().unwrap_or(0) })
    } else {
        Ok(())
    }
}

pub fn not_running_it(state: &State, key: TaskKey, e: EngineIdx) -> Result<(), Unfit> {
    if state.live_attempts_of(key).iter().any(|live| live.engine == e) { Err(Unfit::RunsThisTask) } else { Ok(()) }
}

pub fn free_slot(job: &Job, engine: &Engine, booked_in_flight: u32) -> Result<(), Unfit> {
    let free = engine.free_slots().saturating_sub(booked_in_flight);
    if free >= job.slots_per_task { Ok(()) } else { Err(Unfit::NoFreeSlot { free, needed: job.slots_per_task }) }
}

/// Every per-engine rule but the tier, in reporting order.
pub fn check(state: &State, key: TaskKey, e: EngineIdx, booked_in_flight: u32) -> Result<(), Unfit> {
    let job = state.job(key.job);
    let engine = state.engine(e);
    logged_in(engine)?;
    requirements(state, job, engine)?;
    enough_slots(job, engine)?;
    discriminator(state, job, key.index, engine)?;
    library(job, engine)?;
    not_blacklisted(state, key.job, e)?;
    not_running_it(state, key, e)?;
    free_slot(job, engine, booked_in_flight)
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

/// A task is not retried on the engine it last failed on while another logged-in
/// engine could run it; the dispatcher waits for that one rather than go back.
pub fn failed_here_last(task: &TaskState, engine: EngineIdx) -> bool {
    task.last_failed_on.get() == Some(engine) && task.status == TaskStatus::Waiting
}
