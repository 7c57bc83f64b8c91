//! Feasibility: may this engine take this task? Each rule is one function with
//! one reason, in the order a rejection is reported; the first that fails is the
//! reason `gridfold why` gives.
//!
//! The dispatch loop does not call these one by one: the requirement and slot
//! rules are precomputed per category as a bitset. The rules here are the
//! definition that bitset must agree with, and what `explain` evaluates.

use crate::core::state::{Engine, EngineIdx, EngineStatus, Job, State, TaskState};

/// Why an engine cannot take a task now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Unfit {
    /// The engine is logged out or lost.
    NotLoggedIn,
    /// The job's requirements expression is false for this engine.
    RequirementsFalse,
    /// The engine has fewer slots in all than one task needs.
    TooFewSlots { slots: u32, needed: u32 },
    /// The engine is full for now.
    NoFreeSlot { free: u32, needed: u32 },
}

impl Unfit {
    /// Whether this reason can pass by itself (a slot frees up) or holds until the
    /// engine or the job changes.
    pub fn is_permanent(self) -> bool {
        matches!(self, Unfit::RequirementsFalse | Unfit::TooFewSlots { .. })
    }

    pub fn rule_name(self) -> &'static str {
        match self {
            Unfit::NotLoggedIn => "engine-not-logged-in",
            Unfit::RequirementsFalse => "requirements-false",
            Unfit::TooFewSlots { .. } => "too-few-slots",
            Unfit::NoFreeSlot { .. } => "no-free-slot",
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

pub fn free_slot(job: &Job, engine: &Engine, booked_in_flight: u32) -> Result<(), Unfit> {
    let free = engine.free_slots().saturating_sub(booked_in_flight);
    if free >= job.slots_per_task { Ok(()) } else { Err(Unfit::NoFreeSlot { free, needed: job.slots_per_task }) }
}

/// Every rule in reporting order.
pub fn check(state: &State, job: &Job, engine_idx: EngineIdx, booked_in_flight: u32) -> Result<(), Unfit> {
    let engine = state.engine(engine_idx);
    logged_in(engine)?;
    requirements(state, job, engine)?;
    enough_slots(job, engine)?;
    free_slot(job, engine, booked_in_flight)
}

/// A soft rule, not a filter: a task is not retried on the engine it last failed
/// on while another engine fits.
pub fn failed_here_last(task: &TaskState, engine: EngineIdx) -> bool {
    task.last_failed_on == Some(engine)
}
