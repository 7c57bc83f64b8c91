//! The seam's data: what the families fold, held in one field of the state
//! ([`FamilyStates`]) and one of each job ([`JobFamilies`]), each part defined
//! in its family's folder (`<family>/state.rs`, data only), and the seam's
//! plain types (the scope of a family's filter, a moving order's key).
//! Below `state`: this file and the parts it holds name no file that names
//! the state.

use crate::core::family::cigri::state::{AffinityIndex, Campaign};
use crate::core::family::fbsng::state::{FbsngJob, FbsngState};
use crate::core::family::techila::state::{CycleState, TechilaJob};
pub use crate::core::family::cigri::state::SinkTarget;
use crate::core::ids::Seq;
use std::cmp::Reverse;

/// What the families fold grid-wide: one field of the state
/// (`State::families`), each family's part defined in its folder. Only the
/// fold changes it; `schedule` only reads it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct FamilyStates {
    /// Techila's scheduling cycles: when one is due (see `techila/cycle.rs`).
    pub techila: CycleState,
    /// FBSNG's queue priorities and last run (see `fbsng/state.rs`).
    pub fbsng: FbsngState,
    /// CiGri's affinity lookup, derived from the rest (`cigri/hooks.rs`);
    /// every fold clears it, so it is never older than the state it serves.
    #[serde(skip)]
    pub(crate) cigri_affinity: std::sync::OnceLock<AffinityIndex>,
}

/// What the families fold per job: one field of each job (`Job::families`),
/// each family's part defined in its folder.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct JobFamilies {
    /// FBSNG's section priority (see `fbsng/state.rs`).
    pub fbsng: FbsngJob,
    /// CiGri's campaign state (see `cigri/state.rs`).
    pub cigri: Campaign,
    /// Techila's preemption and expired tasks (see `techila/state.rs`).
    pub techila: TechilaJob,
}

impl FamilyStates {
    /// Forgets what is derived from the rest of the state (CiGri's affinity
    /// lookup): every fold calls it first, so a lookup is never older than the
    /// state it serves.
    pub(crate) fn clear_derived(&mut self) {
        self.cigri_affinity.take();
    }
}

/// How widely the verdicts of the family's filter on one task are shared:
/// what the dispatch loop may conclude when every free engine refuses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FilterScope {
    /// The family has no filter of its own: the category alone decides.
    Category,
    /// For the whole run, every task of the job gets the same verdict on
    /// each engine, and so does every job of the same class: the loop ranks
    /// the class's engines once per category, and a refusal by every free
    /// engine ends the job's walk and closes the category to the class.
    Class(u64),
    /// The verdicts may differ between the job's tasks.
    Task,
}

/// How a job ranks in a moving order, greatest first: two figures, each
/// greater first, then submission (earlier first), then the job index.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct OrderKey {
    pub primary: i64,
    pub secondary: i64,
    pub submitted: Reverse<Seq>,
}
