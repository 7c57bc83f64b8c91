//! The history file: the log as text, one entry per line (JSON Lines), for
//! people to read and write by hand, for `gridfold export` to write and for
//! `gridfold replay` and the golden logs under `replay/` to read.
//!
//! ```text
//! # a comment; blank lines are comments too
//! {"seq": 1, "time_ms": 1700000000000, "envelope": {"event": {"engine_logged_in": {"engine": "e1", "slots": 4}}}}
//! {"seq": 2, "time_ms": 1700000000100, "subject": "gridfold.ev.user.ann.job.submitted", "envelope": {"id": "0b0f2a5e-3c1d-4e8f-9a6b-2d4c6e8f0a1b", "source": "gridfold-cli", "event": {"job_submitted": {...}}}}
//! {"seq": 3, "time_ms": 1700000000200, "subject": "gridfold.ev.user.ann.job.submitted", "raw_base64": "CgR0ZXN0"}
//! ```
//!
//! Each line is an object with:
//! - `seq` (required): the log sequence, at least 1, strictly increasing down the file
//!   (gaps are fine: a stream may have deleted messages).
//! - `time_ms` (required): the log time, ms since the Unix epoch.
//! - `subject` (optional with `envelope`): the subject the message arrived on;
//!   derived with [`subject_for`] when absent. It decides the entry's origin,
//!   so a history can record a forged event by giving the subject it came on.
//!   It must lie under `gridfold.ev.`.
//! - exactly one of:
//!   - `envelope`: the envelope in the JSON of the generated protobuf types
//!     (field names as in `events.proto`; oneofs as `{"task_completed": {...}}`;
//!     enums by name without their prefix, `"NON_ZERO_EXIT"`; an order as its
//!     oneof alone, `{"dispatch": {...}}`; a task list as an array of parameter
//!     maps; a result as a string when UTF-8, else `{"base64": "..."}`).
//!     Omitted fields take protobuf's zero; unknown fields are errors.
//!     `envelope.id` may be omitted (or empty): it is then derived from `seq` by
//!     [`history_event_id`]. `envelope.source` may be omitted (empty).
//!   - `raw_base64`: the message's bytes, for a payload that did not decode on
//!     the log, so an export loses nothing. `subject` is then required. Export
//!     also writes `undecodable`, the reason, which reading ignores.
//!
//! A line becomes an [`Entry`] through the very function the log's messages go
//! through, [`entry_from_log`], so a history file and the broker log of the same
//! events give identical entries, `canonical` bytes included.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::{
    SUBJECT_PREFIX, encode, entry_from_log, envelope_from_proto, envelope_to_proto, proto,
    default_publisher, subject_for,
};
use crate::core::event::{Entry, Envelope};
use crate::core::ids::Seq;

/// One line of a history file, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryLine {
    /// Where it was in the text, 1-based.
    pub line: usize,
    pub seq: Seq,
    pub time_ms: u64,
    /// As written, or derived from the event.
    pub subject: String,
    pub payload: HistoryPayload,
}

#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // as `core::event::Payload`: one per line, not worth a box
pub enum HistoryPayload {
    /// An `envelope` line, its id filled in when the line had none, with its
    /// `seal` (signer, signature) when it has one (an order batch).
    Envelope(Envelope, Option<([u8; 32], [u8; 64])>),
    /// A `raw_base64` line: the bytes exactly as the log held them.
    Raw(Vec<u8>),
}

impl HistoryLine {
    /// The bytes the log would hold for this line.
    pub fn bytes(&self) -> Vec<u8> {
        match &self.payload {
            HistoryPayload::Envelope(envelope, None) => encode(envelope),
            HistoryPayload::Envelope(envelope, Some((signer, signature))) => {
                super::append_seal(encode(envelope), signer, signature)
            }
            HistoryPayload::Raw(bytes) => bytes.clone(),
        }
    }

    /// The entry the fold consumes, exactly as if read from the log.
    pub fn to_entry(&self) -> Entry {
        entry_from_log(self.seq, self.time_ms, &self.subject, &self.bytes())
    }
}

impl From<&HistoryLine> for Entry {
    fn from(line: &HistoryLine) -> Entry {
        line.to_entry()
    }
}

/// A line of a history file that is wrong, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct HistoryError {
    /// 1-based.
    pub line: usize,
    pub message: String,
}

/// A history file that could not be read, naming the file (and line).
#[derive(Debug, thiserror::Error)]
pub enum HistoryFileError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{}: {}", path.display(), error.line, error.message)]
    Parse { path: PathBuf, error: HistoryError },
}

/// What a history line holds, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LineIn {
    seq: u64,
    time_ms: u64,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    envelope: Option<proto::Envelope>,
    #[serde(default)]
    raw_base64: Option<String>,
    /// Written by export beside `raw_base64` for the reader; ignored.
    #[serde(default, rename = "undecodable")]
    _undecodable: Option<String>,
}

#[derive(Serialize)]
struct LineOut<'a> {
    seq: u64,
    time_ms: u64,
    subject: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    envelope: Option<proto::Envelope>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw_base64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    undecodable: Option<String>,
}

/// The id of an envelope written without one: the first 16 bytes of
/// `blake3("gridfold-history" ‖ seq as 8 bytes big-endian)`, made a version-8
/// (custom) RFC 9562 UUID by setting its version and variant bits. The same
/// seq always gives the same id, so a hand-written history replays alike
/// every time; renumbering a line changes its id.
pub fn history_event_id(seq: Seq) -> [u8; 16] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"gridfold-history");
    hasher.update(&seq.0.to_be_bytes());
    let hash = hasher.finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&hash.as_bytes()[..16]);
    id[6] = (id[6] & 0x0f) | 0x80; // version 8
    id[8] = (id[8] & 0x3f) | 0x80; // variant RFC 9562
    id
}

/// Parses a whole history file's text. Stops at the first wrong line.
pub fn parse_history(text: &str) -> Result<Vec<HistoryLine>, HistoryError> {
    let mut lines = Vec::new();
    let mut previous_seq: Option<Seq> = None;
    // Editors on some systems start a UTF-8 file with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (line_idx, text) in text.lines().enumerate() {
        let line = line_idx + 1;
        let trimmed = text.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let parsed = parse_line(line, trimmed).map_err(|message| HistoryError { line, message })?;
        if let Some(previous) = previous_seq
            && parsed.seq <= previous
        {
            return Err(HistoryError {
                line,
                message: format!(
                    "seq {} does not follow seq {previous}: seqs must strictly increase",
                    parsed.seq
                ),
            });
        }
        previous_seq = Some(parsed.seq);
        lines.push(parsed);
    }
    Ok(lines)
}

fn parse_line(line: usize, text: &str) -> Result<HistoryLine, String> {
    if !text.starts_with('{') {
        return Err("a line is a JSON object, {\"seq\": ..., ...}, or a # comment".to_string());
    }
    let raw: LineIn = serde_json::from_str(text).map_err(json_error)?;
    if raw.seq == 0 {
        return Err("seq 0: log sequences start at 1".to_string());
    }
    let seq = Seq(raw.seq);
    if let Some(subject) = &raw.subject {
        check_subject(subject)?;
    }
    let (subject, payload) = match (raw.envelope, raw.raw_base64) {
        (Some(mut envelope), None) => {
            if envelope.id.is_empty() {
                envelope.id = uuid::Uuid::from_bytes(history_event_id(seq))
                    .hyphenated()
                    .to_string();
            }
            let seal = match envelope.seal.take() {
                None => None,
                Some(seal) => {
                    let signer = seal.signer.as_slice().try_into().map_err(|_| "envelope.seal.signer: a key is 32 bytes")?;
                    let signature =
                        seal.signature.as_slice().try_into().map_err(|_| "envelope.seal.signature: a signature is 64 bytes")?;
                    Some((signer, signature))
                }
            };
            let envelope = envelope_from_proto(envelope).map_err(|e| format!("envelope.{e}"))?;
            let subject = raw.subject.unwrap_or_else(|| subject_for(&envelope.event, &default_publisher(&envelope.event)));
            (subject, HistoryPayload::Envelope(envelope, seal))
        }
        (None, Some(encoded)) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded.as_bytes())
                .map_err(|e| format!("raw_base64: bad base64: {e}"))?;
            let subject = raw.subject.ok_or(
                "subject is required with raw_base64: it cannot be derived from raw bytes",
            )?;
            (subject, HistoryPayload::Raw(bytes))
        }
        (Some(_), Some(_)) => return Err("give envelope or raw_base64, not both".to_string()),
        (None, None) => return Err("a line needs an envelope or raw_base64".to_string()),
    };
    Ok(HistoryLine {
        line,
        seq,
        time_ms: raw.time_ms,
        subject,
        payload,
    })
}

/// serde_json's message, with the column first and without "at line 1" (the
/// line is ours to say).
fn json_error(error: serde_json::Error) -> String {
    let message = error.to_string();
    let suffix = format!(" at line {} column {}", error.line(), error.column());
    let message = message.strip_suffix(&suffix).unwrap_or(&message);
    format!("column {}: {message}", error.column())
}

/// A subject the log stream could hold: under `gridfold.ev.`, tokens not
/// empty, no wildcards, no whitespace.
fn check_subject(subject: &str) -> Result<(), String> {
    if !subject.starts_with(SUBJECT_PREFIX) {
        return Err(format!("subject {subject:?} is not under {SUBJECT_PREFIX}"));
    }
    for token in subject.split('.') {
        if token.is_empty() {
            return Err(format!("subject {subject:?} has an empty token"));
        }
        if token.contains(|c: char| c.is_whitespace() || c == '*' || c == '>') {
            return Err(format!(
                "subject {subject:?} holds a wildcard or whitespace"
            ));
        }
    }
    Ok(())
}

/// One history line (without its newline) for a message of the log: the
/// envelope (with its seal) when the bytes decode and encode back to exactly
/// themselves, else `raw_base64` (and the reason, if they do not decode).
/// Reading the line back gives the same entry as the message, stored bytes
/// included, so an exported log replays to the same chain.
pub fn write_history_line(seq: Seq, time_ms: u64, subject: &str, bytes: &[u8]) -> String {
    let raw = |undecodable: Option<String>| LineOut {
        seq: seq.0,
        time_ms,
        subject,
        envelope: None,
        raw_base64: Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
        undecodable,
    };
    let line = match super::decode_sealed(bytes) {
        Ok((envelope, seal)) => {
            let mut message = envelope_to_proto(&envelope);
            let seal = seal.map(|seal| (seal.signer, seal.signature));
            let rewritten = match &seal {
                None => encode(&envelope),
                Some((signer, signature)) => super::append_seal(encode(&envelope), signer, signature),
            };
            if rewritten == bytes {
                message.seal = seal.map(|(signer, signature)| proto::Seal { signer: signer.to_vec(), signature: signature.to_vec() });
                LineOut { seq: seq.0, time_ms, subject, envelope: Some(message), raw_base64: None, undecodable: None }
            } else {
                // Not this build's encoding (another publisher's field order, unknown
                // fields): kept byte for byte, since the chain digest covers the bytes.
                raw(None)
            }
        }
        Err(error) => raw(Some(error.to_string())),
    };
    serde_json::to_string(&line).expect("a history line has only string map keys")
}

/// Reads and parses a history file into the entries the fold consumes.
/// Errors name the file and line: `replay/foo.jsonl:12: …`.
pub fn read_history_file(path: impl AsRef<Path>) -> Result<Vec<Entry>, HistoryFileError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| HistoryFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let lines = parse_history(&text).map_err(|error| HistoryFileError::Parse {
        path: path.to_path_buf(),
        error,
    })?;
    Ok(lines.iter().map(HistoryLine::to_entry).collect())
}

#[cfg(test)]
mod tests;
