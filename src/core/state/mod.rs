//! Layer 1, the data model: engines, jobs, tasks, requirement categories, and the
//! indexes that make `schedule` cheap. It names neither `schedule` nor `fold`
//! (`core::tidy_tests` checks it); each family's figures are held in one field
//! of the state and one of each job (`families`), whose parts the families'
//! folders define.
//!
//! Invariants (checked by [`State::check_invariants`], run after every entry in
//! tests and the simulator):
//! - no engine has more slots in use than it has;
//! - every live attempt (dispatched or running) is booked on exactly one engine,
//!   and an engine's used slots are the sum over its live attempts;
//! - a job's task counts add up to its number of tasks;
//! - `runnable` holds exactly the active jobs with waiting tasks;
//! - `free_engines` holds exactly the logged-in, undrained engines with a free slot;
//! - `engine_silence` holds exactly the logged-in engines, at their last-seen time;
//! - `dispatched_since` holds exactly the live attempts not yet started.
//!
//! Mutations go through methods here so the indexes cannot drift from the data;
//! `fold` decides *whether* an entry applies, these methods apply it.
//! Iteration is over `Vec`, `BTreeMap`, `BTreeSet` and the ordered structures of
//! `state/index.rs` (each iterates as the `BTreeSet` it replaced did). The `IndexMap`s are
//! lookup tables; the live attempts' table is read in an order only after sorting
//! by task (its own order depends on the history of removals).
//!
//! # Files
//!
//! The data, bottom up: [`engine`], [`category`], [`job`] (a job and its
//! tasks), [`attempts`] (what became of each attempt), [`live`] (live
//! attempts), [`accounts`], [`holdings`], [`index`] (the ordered structures),
//! [`job_slots`], [`bookings`], [`controls`] and [`flood`]; then [`store`], the
//! [`State`] itself and the queries that read it. Above it, the verbs, each an
//! `impl State` for what it does: [`engines`], [`jobs`], [`tasks`] (the
//! attempt lifecycle), [`retire`], [`suspension`], [`thresholds`], [`parallel`]
//! and [`ops`]; [`checks`], the checks of an order read back that the fold
//! and `schedule` both apply; [`snapshot`] and [`invariants`] last. A file
//! names the files below it directly, never through this one, so no two files
//! name each other.

pub mod accounts;
pub mod attempts;
pub mod bookings;
pub mod category;
pub mod checks;
pub mod controls;
mod engine;
pub mod engines;
pub mod flood;
pub mod holdings;
mod index;
pub mod invariants;
mod job;
pub mod job_slots;
pub mod jobs;
pub mod live;
mod ops;
pub mod parallel;
mod retire;
pub mod snapshot;
pub mod store;
mod suspension;
pub mod tasks;
pub mod thresholds;

pub use crate::core::event::Control;
pub use crate::core::ids::{CategoryIdx, EngineIdx, JobIdx, TaskKey};
pub use accounts::{Account, AccountIdx, Accounts};
pub use bookings::{BookedPart, CompanionEnd, ParallelBookings};
pub use category::Category;
pub use controls::Suspensions;
pub use engine::{Engine, EngineStatus};
pub use engines::{compile_tiers, tier_expression};
pub use job::{CompiledPreference, CompletionTimes, Job, JobRank, JobStatus, MaybeEngine, OwnParams, RotatedCursor, TaskCondition, TaskCounts, TaskState, TaskStatus, WaitingCursor, isqrt, preference_score};
pub use job_slots::{JobSlots, Jobs, RetiredJob, Usage, RETIRED_JOBS_MAX};
pub use live::{FirstResult, LiveAttempt};
pub use snapshot::SnapshotError;
pub use store::{Rejections, State, Totals, RECENT_REJECTIONS_MAX};
