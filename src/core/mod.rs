//! The deterministic core of gridfold: two pure functions over one state.
//!
//! - [`fold`](fold::fold) applies one log entry to the [`State`](state::State). It never
//!   fails and never decides: an entry that does not apply is recorded as rejected.
//! - [`schedule`](schedule::schedule) decides: from the state and the orders already
//!   published but not yet read back, it returns the next orders.
//!
//! Layers, bottom up (each names only those below it, but where said):
//! - the leaves: [`ids`], [`event`] (the schema), [`expr`], [`digest`],
//!   [`rng`], [`window`], [`load`], [`subject`], [`reject`];
//! - [`state`]: the data and the verbs that keep its invariants. It names
//!   neither `schedule` nor `fold`; it holds the families' figures in one
//!   field of the state and one of each job, whose types the seam defines
//!   ([`family::FamilyStates`], [`family::JobFamilies`]);
//! - [`family`]: each scheduling family a folder (its ordering, filters,
//!   lifecycle stages, folded figures, fold hooks and pieces of `why`), and
//!   `family/mod.rs`, the seam, the one file outside the folders that names
//!   a family;
//! - [`fold`]: the only writer of the state; it reaches a family only
//!   through the seam's hooks;
//! - [`schedule`]: decides from `&State`; it reaches a family only through
//!   the seam.
//!
//! `tidy_tests` fails the suite when `core` names an outer layer, when
//! `state` names `schedule` or `fold`, or when a file outside `family/`
//! names a family's module. Not yet layered (issue 39, item 2): the families'
//! schedule halves and `schedule`'s dispatch loop name each other (the seam's
//! orderings and filters and the loop's candidates and budget), and
//! `schedule::parallel` holds the fold's verb for a `DispatchParallel` read
//! back (`fold_dispatch`, which borrows two of the fold's checks).
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
