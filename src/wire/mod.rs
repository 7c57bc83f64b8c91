//! The wire: protobuf envelopes on the log, and their text form, the history file.
//!
//! This module is the only place that knows protobuf. It turns log messages
//! (subject + bytes) into core [`Entry`]s and core [`Envelope`]s into bytes;
//! the schema is `schemas/gridfold/v1/events.proto`, compiled by `build.rs`
//! into [`proto`].
//!
//! Invariants:
//! - [`encode`] is canonical: one core envelope, one byte string (fields in
//!   number order, maps sorted by key, no unknown fields). [`entry_from_log`]
//!   digests re-encoded bytes, so two publishers that encode the same event
//!   differently produce the same `Entry::canonical`.
//! - `decode(&encode(e)) == Ok(e)` for every core envelope `e`.
//! - Nothing here panics on any input: bytes that are not an envelope become
//!   `Payload::Undecodable` with the reason, naming the field when one is wrong.
//! - A history line and the log message it records give identical entries
//!   (both go through [`entry_from_log`]).
//!
//! Not here: what an event means (the fold judges that and records rejections),
//! IO other than [`history::read_history_file`], and anything about NATS beyond
//! subject names.

mod convert;
pub mod delivery;
pub mod history;
pub mod json;
mod subject;

use prost::Message as _;

pub use convert::{
    EngineTierError, FieldProblem, WireError, check_engine_tier, envelope_from_proto,
    envelope_to_proto,
};
pub use subject::{
    ORDERS_SUBJECT, POLICY_SUBJECT, STREAM_SUBJECTS, SUBJECT_PREFIX, TICK_SUBJECT, origin_of,
    subject_for,
};

use crate::core::event::{Entry, Envelope, Origin, Payload};
use crate::core::ids::Seq;
use subject::engine_token;

/// The types generated from `schemas/gridfold/v1/events.proto` (package `gridfold.v1`).
/// Their serde derives give the JSON of history files; see [`json`].
#[allow(clippy::all, clippy::pedantic, missing_docs, rustdoc::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/gridfold.v1.rs"));
    include!(concat!(env!("OUT_DIR"), "/gridfold.v1.json.rs"));
}

/// The canonical protobuf bytes of an envelope, as published and as digested.
pub fn encode(envelope: &Envelope) -> Vec<u8> {
    envelope_to_proto(envelope).encode_to_vec()
}

/// The envelope protobuf bytes hold, or what is wrong with them.
pub fn decode(bytes: &[u8]) -> Result<Envelope, WireError> {
    let envelope =
        proto::Envelope::decode(bytes).map_err(|e| WireError::NotProtobuf(e.to_string()))?;
    envelope_from_proto(envelope)
}

/// The entry a log message makes: its origin from the subject, its payload
/// decoded, and the canonical bytes to digest (the re-encoded envelope, or the
/// raw bytes when they do not decode). Never fails and never panics.
pub fn entry_from_log(seq: Seq, time_ms: u64, subject: &str, bytes: &[u8]) -> Entry {
    let (origin, payload, canonical) = match decode(bytes) {
        Ok(envelope) => {
            let canonical = encode(&envelope);
            // The subject's engine and the payload's, when they are the same name,
            // become one shared id (the fold compares them by pointer): the payload's,
            // so that the subject's need not be made at all.
            let origin = match envelope.event.reporting_engine() {
                Some(engine) if engine_token(subject) == Some(engine.as_str()) => {
                    Origin::Engine(engine.clone())
                }
                _ => origin_of(subject),
            };
            (origin, Payload::Event(envelope), canonical)
        }
        Err(error) => (
            origin_of(subject),
            Payload::Undecodable {
                detail: error.to_string(),
            },
            bytes.to_vec(),
        ),
    };
    Entry {
        seq,
        time_ms,
        origin,
        payload,
        canonical,
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
