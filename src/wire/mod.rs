//! The wire: protobuf envelopes on the log, and their text form, the history file.
//!
//! This module is the only place that knows protobuf. It turns log messages
//! (subject + bytes) into core [`Entry`]s and core [`Envelope`]s into bytes;
//! the schema is `schemas/gridfold/v1/events.proto`, compiled by `build.rs`
//! into [`proto`].
//!
//! Invariants:
//! - [`encode`] is canonical: one core envelope, one byte string (fields in
//!   number order, maps sorted by key, no unknown fields). The chain digest,
//!   though, covers `Entry::stored`, the bytes exactly as the log holds them: a
//!   re-encoding by this build would make the chain depend on the schema version
//!   that replays.
//! - A sealed envelope (an order batch) is its encoding followed by its seal
//!   field ([`encode_sealed`]); the seal signs every byte before it, so checking
//!   it needs no re-encoding either.
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
    EngineTierError, FieldProblem, NAMED_AMOUNTS_MAX, SGE_NAME_BYTES_MAX, SHARE_TREE_NODES_MAX, WireError,
    check_engine_tier, envelope_from_proto, envelope_to_proto,
};
pub use subject::{
    DRAIN_SUBJECT, ENGINE_SUBJECT_PREFIX, KEYS_SUBJECT, OPERATOR_SUBJECT_PREFIX, ORDERS_SUBJECT, POLICY_SUBJECT,
    STREAM_SUBJECTS, SUBJECT_PREFIX, TICK_SUBJECT, USER_SUBJECT_PREFIX, default_publisher, default_subject, engine_login_subject,
    origin_of, subject_for, user_subject_prefix,
};

use crate::core::event::{Entry, EntrySeal, Envelope, Origin, Payload};

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
/// decoded, its seal found, and its bytes kept exactly as stored (the chain
/// digest covers those). Never fails and never panics.
pub fn entry_from_log(seq: Seq, time_ms: u64, subject: &str, bytes: &[u8]) -> Entry {
    let (origin, payload, seal) = match decode_sealed(bytes) {
        Ok((envelope, seal)) => {
            // The subject's engine and the payload's, when they are the same name,
            // become one shared id (the fold compares them by pointer): the payload's,
            // so that the subject's need not be made at all.
            let origin = match envelope.event.reporting_engine() {
                Some(engine) if engine_token(subject) == Some(engine.as_str()) => {
                    Origin::Engine(engine.clone())
                }
                _ => origin_of(subject),
            };
            (origin, Payload::Event(envelope), seal)
        }
        Err(error) => (
            origin_of(subject),
            Payload::Undecodable {
                detail: error.to_string(),
            },
            None,
        ),
    };
    Entry {
        seq,
        time_ms,
        origin,
        subject: subject.to_string(),
        payload,
        stored: bytes.to_vec(),
        seal,
    }
}

/// The envelope and the seal stored bytes hold. The seal's `signed_len` is set
/// only when the seal is the last field, encoded as this schema encodes it:
/// then it signs every byte before it, exactly as stored.
pub fn decode_sealed(bytes: &[u8]) -> Result<(Envelope, Option<EntrySeal>), WireError> {
    let mut message = proto::Envelope::decode(bytes).map_err(|e| WireError::NotProtobuf(e.to_string()))?;
    let seal = message.seal.take().map(|seal| found_seal(bytes, &seal, &seal_field(&seal))).transpose()?;
    Ok((envelope_from_proto(message)?, seal))
}

/// The seal a message's `bytes` hold, whose field alone encodes as `trailer`:
/// signing every byte before it when it ends them (`signed_len`).
fn found_seal(bytes: &[u8], seal: &proto::Seal, trailer: &[u8]) -> Result<EntrySeal, WireError> {
    let signer: [u8; 32] = seal.signer.as_slice().try_into().map_err(|_| WireError::Field {
        field: "seal.signer".into(),
        problem: FieldProblem::Inconsistent(format!("a key is 32 bytes, not {}", seal.signer.len())),
    })?;
    let signature: [u8; 64] = seal.signature.as_slice().try_into().map_err(|_| WireError::Field {
        field: "seal.signature".into(),
        problem: FieldProblem::Inconsistent(format!("a signature is 64 bytes, not {}", seal.signature.len())),
    })?;
    let signed_len = bytes.ends_with(trailer).then(|| bytes.len() - trailer.len());
    Ok(EntrySeal { signer, signature, signed_len, sealed_here: false })
}

/// The seal of `signature` by `key`, as the field that ends a sealed message.
fn seal_of(key: &ed25519_dalek::SigningKey, signature: ed25519_dalek::Signature) -> proto::Seal {
    proto::Seal { signer: key.verifying_key().to_bytes().to_vec(), signature: signature.to_bytes().to_vec() }
}

/// The bytes of an envelope's seal field alone, as it ends a sealed envelope.
fn seal_field(seal: &proto::Seal) -> Vec<u8> {
    proto::Envelope { seal: Some(seal.clone()), ..Default::default() }.encode_to_vec()
}

/// An envelope encoded and sealed: its bytes, then a seal whose signature
/// covers exactly those bytes. Decoding with [`decode_sealed`] finds the seal
/// and the signed length again.
pub fn encode_sealed(envelope: &Envelope, key: &ed25519_dalek::SigningKey) -> Vec<u8> {
    use ed25519_dalek::Signer as _;
    let mut bytes = encode(envelope);
    let signature = key.sign(&bytes);
    bytes.extend_from_slice(&seal_field(&seal_of(key, signature)));
    bytes
}

/// Appends a seal already made (signer, signature) to an envelope's bytes: how
/// a history file's sealed line becomes the bytes the log held.
pub fn append_seal(mut bytes: Vec<u8>, signer: &[u8; 32], signature: &[u8; 64]) -> Vec<u8> {
    bytes.extend_from_slice(&seal_field(&proto::Seal { signer: signer.to_vec(), signature: signature.to_vec() }));
    bytes
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
