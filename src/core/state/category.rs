//! Requirement categories: tasks with identical requirements and slots per
//! task share one, so which engines may run them is computed once.

use crate::core::event::LibraryRef;
use crate::core::expr::Expr;
use crate::core::ids::{EngineIdx, JobIdx};
use std::collections::BTreeSet;
use super::engine::Engine;

/// Jobs with the same requirements and slots per task form one category, as in
/// Grid Engine: which engines may run them is computed once per category, kept
/// as a bitset over engine indexes, and updated when an engine logs in.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Category {
    /// The requirements in canonical form (the parsed expression, printed).
    pub requirements: String,
    pub slots_per_task: u32,
    /// The root library its jobs need: an engine is eligible only once it holds it.
    pub library: Option<LibraryRef>,
    /// Rebuilt from `requirements` after a snapshot is loaded.
    #[serde(skip)]
    pub expr: Option<Expr>,
    /// Bit `e` set: engine `e`'s properties satisfy the requirements, it has
    /// enough slots, and it holds the library.
    pub eligible: Vec<u64>,
    /// Logged-in engines whose properties satisfy the requirements.
    pub matching_logged_in: u32,
    /// Logged-in engines that match and have enough slots, library or not: the
    /// ones that could run the category once synced.
    pub fitting_logged_in: u32,
    /// Logged-in engines that are eligible (matching, with enough slots, holding the library).
    pub eligible_logged_in: u32,
    /// Active jobs of this category.
    pub jobs: BTreeSet<JobIdx>,
    /// Jobs held in the state (active or ended, not retired) whose tasks use it.
    /// When the last of them retires the category is dropped: its slot is left
    /// vacant (see [`Category::is_vacant`]) for the next new category.
    pub users: u32,
}

impl Category {
    /// A dropped category's slot, waiting for the next new category: no job
    /// refers to it, no engine is eligible for it, and it is skipped wherever
    /// categories are walked.
    pub(super) fn vacant() -> Category {
        Category {
            requirements: String::new(),
            slots_per_task: 0,
            library: None,
            expr: None,
            eligible: Vec::new(),
            matching_logged_in: 0,
            fitting_logged_in: 0,
            eligible_logged_in: 0,
            jobs: BTreeSet::new(),
            users: 0,
        }
    }
    /// The slot of a dropped category (no job uses it).
    pub fn is_vacant(&self) -> bool {
        self.users == 0
    }
    pub fn is_eligible(&self, engine: EngineIdx) -> bool {
        let e = engine.0 as usize;
        self.eligible.get(e / 64).is_some_and(|word| word & (1 << (e % 64)) != 0)
    }
    pub(super) fn set_eligible(&mut self, engine: EngineIdx, eligible: bool) {
        let e = engine.0 as usize;
        if self.eligible.len() <= e / 64 {
            self.eligible.resize(e / 64 + 1, 0);
        }
        if eligible {
            self.eligible[e / 64] |= 1 << (e % 64);
        } else {
            self.eligible[e / 64] &= !(1 << (e % 64));
        }
    }
    /// Whether the engine's properties satisfy the requirements and it has the
    /// category's slots (a root library it lacks it can sync).
    pub fn fits(&self, engine: &Engine) -> bool {
        self.admits(engine).fits
    }
    pub(super) fn expr(&self) -> &Expr {
        self.expr.as_ref().expect("category expressions are rebuilt after every load")
    }
    /// How far the category admits an engine: the one definition the bitset,
    /// the logged-in counts and the invariants share.
    pub(super) fn admits(&self, engine: &Engine) -> Admission {
        let matches = self.expr().eval(&engine.props, engine.slots);
        let fits = matches && engine.slots >= self.slots_per_task;
        let eligible = fits && self.library.as_ref().is_none_or(|library| engine.holds(library));
        Admission { matches, fits, eligible }
    }
}

/// What a category makes of an engine: its requirements hold (`matches`); and it
/// has the slots (`fits`); and it holds the root library (`eligible`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Admission {
    pub(super) matches: bool,
    pub(super) fits: bool,
    pub(super) eligible: bool,
}
