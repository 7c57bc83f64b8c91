//! Why an engine cannot take a task now: the reasons of the shared filters
//! and the families' (see `filters.rs`).

use crate::core::event::LibraryRef;
use crate::core::family::reasons::FamilyUnfit;

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
