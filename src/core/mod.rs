//! The deterministic core of gridfold: two pure functions over one state.
//!
//! - [`fold`](fold::fold) applies one log entry to the [`State`](state::State). It never
//!   fails and never decides: an entry that does not apply is recorded as rejected.
//! - [`schedule`](schedule::schedule) decides: from the state and the orders already
//!   published but not yet read back, it returns the next orders.
//!
//! Invariants of this module tree (checked by the before-stop hook and by review):
//! no IO, no async, no wall clock, no environment, no unseeded randomness, and no
//! iteration over `HashMap`/`HashSet`. Time is the log's time, carried by each entry.
//! `core` knows nothing of NATS, tokio, sled or protobuf; `wire/` translates.

pub mod digest;
pub mod event;
pub mod explain;
pub mod family;
pub mod expr;
pub mod fold;
pub mod ids;
pub mod load;
pub mod reject;
pub mod replay;
pub mod rng;
pub mod schedule;
pub mod state;
pub mod subject;
pub mod testkit;
pub mod window;
#[cfg(test)]
mod ops_tests;
#[cfg(test)]
mod ownership_tests;
