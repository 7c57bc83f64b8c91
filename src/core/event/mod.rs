//! The vocabulary of the log: facts (events, past tense) and decisions
//! (orders, imperative), wrapped in an [`Envelope`] and positioned by an [`Entry`].
//!
//! These types mirror `schemas/gridfold/v1/events.proto`; `wire/` converts
//! between the two and is the only place that knows protobuf. Everything here
//! is plain data: validation of what an event *means* happens in `fold`,
//! which records a [`Rejection`](super::reject::Rejection) instead of failing.
//!
//! One file per part of the vocabulary, each re-exported here so every type is
//! named `event::X`: [`entry`] (entries, envelopes, the facts), [`job`] (jobs
//! as submitted), [`engine`] (what engines say of themselves), [`policy`] (the
//! operator's policy) and [`order`] (the projector's decisions). The files
//! name each other directly, never through this one.

pub mod engine;
pub mod entry;
pub mod job;
pub mod order;
pub mod policy;

pub use engine::*;
pub use entry::*;
pub use job::*;
pub use order::*;
pub use policy::*;
/// The login epoch is an id of the log's, named here too as it always was.
pub use crate::core::ids::Epoch;
