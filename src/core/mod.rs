//! The deterministic core of gridfold: two pure functions over one state.
//!
//! - [`fold`](fold::fold) applies one log entry to the [`State`](state::State). It never
//!   fails and never decides: an entry that does not apply is recorded as rejected.
//! - [`schedule`](schedule::schedule) decides: from the state and the orders already
//!   published but not yet read back, it returns the next orders.
//!
//! Layers, bottom up (each file names only files below it):
//! - the leaves: [`ids`] (with the state's dense indexes), [`event`] (the
//!   schema, one file per part), [`expr`], [`load`], [`digest`], [`rng`],
//!   [`window`], [`subject`], [`reject`];
//! - the families' folded data: `family/data.rs` (the seam's holders
//!   [`family::FamilyStates`] and [`family::JobFamilies`], and the seam's
//!   plain types) and each family's data-only files (`<family>/state.rs`),
//!   which name the leaves and nothing of the state;
//! - [`state`]: the data and the verbs that keep its invariants (its data
//!   files, then [`state::store`], the `State` itself, then its verbs). It
//!   names neither `schedule` nor `fold` nor the families' hooks;
//! - `schedule`'s shared pieces a family uses ([`schedule::in_flight`],
//!   [`schedule::budget`], [`schedule::candidate`], [`schedule::unfit`]);
//! - [`family`]: each scheduling family a folder (its ordering, filters,
//!   lifecycle stages, fold hooks and pieces of `why`), and `family/mod.rs`,
//!   the seam, the one file outside the folders that names a family;
//! - [`schedule`]: decides from `&State`, reaching a family only through the
//!   seam. It never names the fold: the checks both apply to an order read
//!   back are the state's ([`state::checks`]);
//! - [`fold`]: the only writer of the state; it reaches a family only
//!   through the seam's hooks, and uses what `schedule` defines of its rules
//!   (a job's lifecycle, a parallel task's booking, soft requests);
//! - [`explain`], [`replay`], [`testkit`] on top.
//!
//! At the level of folders `family` is both below `schedule` (its data and
//! orderings, which the dispatch loop asks for) and above it (its stages use
//! the loop's shared pieces); at the level of files there is no circle.
//!
//! `tidy_tests` fails the suite when `core` names an outer layer, when
//! `state` names `schedule` or `fold`, when a file outside `family/` names a
//! family's module, or when the files of `core` (but for tests) name each
//! other in a circle.
//!
//! Invariants of this module tree (checked by the before-stop hook and by review):
//! no IO, no async, no wall clock, no environment, no unseeded randomness, and no
//! iteration over `HashMap`/`HashSet`. Time is the log's time, carried by each entry.
//! `core` knows nothing of NATS, tokio, sled or protobuf; `wire/` translates.

pub mod bounds;
pub mod digest;
pub mod event;
pub mod explain;
pub mod family;
pub mod expr;
pub mod fold;
pub mod ids;
pub mod load;
pub mod policy_limits;
pub mod reject;
pub mod replay;
pub mod rng;
pub mod schedule;
pub mod state;
pub mod subject;
pub mod testkit;
pub mod trust;
pub mod window;
#[cfg(test)]
mod ops_tests;
#[cfg(test)]
mod ownership_tests;
#[cfg(test)]
mod tidy_tests;
