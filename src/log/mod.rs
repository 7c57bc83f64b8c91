//! The log: an append-only, totally ordered sequence of opaque entries.
//!
//! Everything gridfold knows is an entry of one log, and this module is the only
//! place that stores or reads it. [`EventLog`] is the interface; it has two
//! backends that pass one conformance suite (`tests/it/log_conformance.rs`):
//!
//! - [`jetstream::JetStreamLog`]: a NATS JetStream stream (`GRIDFOLD_EVENTS`,
//!   subjects `gridfold.ev.>`), for production and for more than one machine;
//! - [`embedded::EmbeddedLog`]: a sled database in a directory, for one machine
//!   with no broker, offline audits and tests of everything above the log.
//!
//! [`nats_server::NatsServer`] starts a private nats-server for tests and the demo.
//!
//! # Invariants (both backends)
//!
//! - Sequence numbers start at 1 and grow by exactly 1 per stored entry; nothing
//!   is ever deleted or rewritten, so entry `n` is the same bytes for ever.
//! - Each entry carries the time the log stored it ([`RawEntry::time_ms`], ms since
//!   the Unix epoch). The embedded log never lets it go backwards. JetStream uses the
//!   server's wall clock and does not promise that across a clock step, so a reader
//!   that needs monotone time must take the running maximum itself (the fold does);
//!   the reader never adjusts it, so every reader sees the same bytes and times.
//! - A message with a `msg_id` seen within the duplicate window is not stored again:
//!   the append answers with the original sequence and `duplicate = true`. The
//!   embedded log forgets an id exactly one window after its original; JetStream
//!   purges ids on a timer, so somewhere between one and two windows after.
//! - An append with `expected_last_subject_seq` is stored only if the last entry on
//!   its subject has that sequence (`0`: the subject was never written). Otherwise it
//!   fails with [`LogError::WrongLastSequence`]: another writer got there first.
//! - The expected-sequence check comes *before* the duplicate check, as a single
//!   nats-server 2.15.1 does it (checked by the suite): retrying a fenced append whose
//!   ack was lost gets [`LogError::WrongLastSequence`] whose `actual` is the subject's
//!   last sequence (the first try's, if nobody wrote since), not `duplicate = true`.
//!   The server's source suggests a clustered stream checks the id first and answers
//!   `duplicate` (not verified here): a fenced writer must accept either answer.
//! - Readers see entries in sequence order, without gaps or repeats.
//!
//! # What this module does not do
//!
//! It knows nothing of what entries mean: payloads are opaque bytes and subjects
//! are routing keys. Decoding is `wire/`'s job, meaning is `core/`'s. It does not
//! retry: a [`LogError::Unavailable`] goes back to the caller, who decides
//! (entries with a `msg_id` are safe to send again). It keeps no consumer state on
//! the broker beyond a reader's lifetime: where to resume is the caller's to remember.

pub mod broker_config;
pub mod connect;
pub mod embedded;
pub mod jetstream;
pub mod library_store;
pub mod output_store;
pub mod nats_server;
pub mod stream_check;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

/// Every subject of the log starts with this, and the filter that covers it
/// all; their one home is [`crate::core::subject`].
pub use crate::core::subject::{STREAM_SUBJECTS as SUBJECTS_ALL, SUBJECT_PREFIX};
/// Longest subject accepted, in bytes.
pub const SUBJECT_BYTES_MAX: usize = 1024;
/// Longest message id accepted, in bytes.
pub const MSG_ID_BYTES_MAX: usize = 256;
/// Default duplicate window, as JetStream's.
pub const DUPLICATE_WINDOW_DEFAULT: Duration = Duration::from_secs(120);
/// Default largest payload, as nats-server's default `max_payload`.
pub const PAYLOAD_BYTES_MAX_DEFAULT: usize = 1024 * 1024;
/// The batch size a reader should ask for when catching up (NATS.md: batches of
/// 10,000 read about twice as fast as the client's default of 200-500).
pub const READ_BATCH_DEFAULT: usize = 10_000;
/// Most entries one [`LogReader::next_batch`] call returns.
pub const READ_BATCH_MAX: usize = 100_000;

/// One stored entry, as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEntry {
    /// Position in the log: 1, 2, 3, … without gaps.
    pub seq: u64,
    /// When the log stored the entry, in ms since the Unix epoch. The core's only clock.
    pub time_ms: u64,
    /// The subject it was published on, under [`SUBJECT_PREFIX`].
    pub subject: String,
    /// Opaque bytes.
    pub payload: Bytes,
}

/// A message to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    /// Must start with [`SUBJECT_PREFIX`] and contain no wildcard or whitespace.
    pub subject: String,
    pub payload: Bytes,
    /// Deduplication key (`Nats-Msg-Id`): a second append with the same id within the
    /// duplicate window stores nothing and answers with the first one's sequence.
    pub msg_id: Option<String>,
    /// Fence (`Nats-Expected-Last-Subject-Sequence`): store only if the last entry on
    /// `subject` has this sequence; `0` means the subject was never written.
    pub expected_last_subject_seq: Option<u64>,
}

impl Append {
    pub fn new(subject: impl Into<String>, payload: impl Into<Bytes>) -> Append {
        Append {
            subject: subject.into(),
            payload: payload.into(),
            msg_id: None,
            expected_last_subject_seq: None,
        }
    }

    pub fn with_msg_id(mut self, msg_id: impl Into<String>) -> Append {
        self.msg_id = Some(msg_id.into());
        self
    }

    pub fn with_expected_last_subject_seq(mut self, seq: u64) -> Append {
        self.expected_last_subject_seq = Some(seq);
        self
    }
}

/// The log's answer to one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Where the message is stored (for a duplicate: where the original is).
    pub seq: u64,
    /// The message id was seen within the window and nothing new was stored.
    pub duplicate: bool,
}

/// What one [`LogReader::next_batch`] call read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadBatch {
    /// Consecutive entries, in order, starting at the reader's position before the call.
    pub entries: Vec<RawEntry>,
    /// When the last of `entries` was read (or, for an empty batch, when the call
    /// returned), the log held nothing after it: the reader had caught up. New entries
    /// may have arrived since. A projector schedules when this is true.
    pub caught_up: bool,
}

/// Why a log operation failed. Match on the kind: [`LogError::WrongLastSequence`]
/// means another writer, [`LogError::Unavailable`] means the broker is away.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The fence of an append did not hold: the subject's last entry is not the one
    /// expected, so another writer appended first. Nothing was stored.
    #[error(
        "wrong last sequence on {subject}: expected {expected}, the log has {}",
        actual.map_or_else(|| "another".to_string(), |seq| seq.to_string())
    )]
    WrongLastSequence {
        subject: String,
        expected: u64,
        /// The subject's actual last sequence, when the log said.
        actual: Option<u64>,
    },
    /// The log cannot be reached (broker down, connection lost, ack timed out).
    /// Whether a message in flight was stored is unknown, and it may still be stored
    /// after this error: the NATS client holds what it could not send and sends it on
    /// reconnecting. Retry with the same `msg_id` (or fence) to settle it.
    #[error("the log at {url} is unavailable: {detail}")]
    Unavailable { url: String, detail: String },
    /// The message was refused as it is (bad subject or message id, payload too
    /// large); sending it again will not help.
    #[error("the log refused the message: {detail}")]
    Rejected { detail: String },
    /// The log exists but is not one gridfold can use as it is configured (a stream
    /// with other subjects, limits that would delete entries, another format).
    #[error("the log at {location} is misconfigured: {detail}")]
    Misconfigured { location: String, detail: String },
    /// Stored data does not decode, or breaks an invariant of the log.
    #[error("the log at {location} is corrupt: {detail}")]
    Corrupt { location: String, detail: String },
    /// Local storage failed.
    #[error("I/O error on the log at {location}: {source}")]
    Io {
        location: String,
        #[source]
        source: std::io::Error,
    },
    /// The broker refused this client: its credentials or TLS, or (known only by
    /// what the broker said aside, the request going unanswered) an operation its
    /// permissions do not allow.
    #[error("{detail} (broker at {url})")]
    Refused { url: String, detail: String },
    /// A stream this client binds to does not exist, and it is not this client's to
    /// create (see `jetstream::StreamSetup`).
    #[error("stream {stream} does not exist at {url}: {hint}")]
    StreamMissing {
        url: String,
        stream: String,
        hint: String,
    },
}

/// An append-only log of opaque entries. See the module docs for the invariants.
///
/// Used through generics (`impl EventLog`, `L: EventLog`), not `dyn`: the futures are
/// `Send` so a log can serve tasks on a multi-threaded runtime.
pub trait EventLog: Send + Sync {
    type Reader: LogReader + 'static;

    /// Where the log lives, for messages: a URL or a directory.
    fn location(&self) -> String;

    /// Appends one message and waits until the log has stored it.
    fn append(&self, msg: Append) -> impl Future<Output = Result<Appended, LogError>> + Send;

    /// Appends many messages in order, with up to the backend's window of them in
    /// flight at once instead of one round trip each. Answers in the order given.
    ///
    /// On error, the messages before the failed one may have been stored, and (on
    /// JetStream) so may those already in flight behind it; nothing after the window
    /// is sent. Give every message a `msg_id` and a retry of the whole batch is safe.
    fn append_batch(
        &self,
        msgs: Vec<Append>,
    ) -> impl Future<Output = Result<Vec<Appended>, LogError>> + Send;

    /// The sequence of the last entry (0 if the log is empty).
    fn last_seq(&self) -> impl Future<Output = Result<u64, LogError>> + Send;

    /// The sequence of the last entry on `subject` (0 if the subject was never written):
    /// the value to put in `expected_last_subject_seq` to append after it.
    fn last_seq_for_subject(
        &self,
        subject: &str,
    ) -> impl Future<Output = Result<u64, LogError>> + Send;

    /// The newest entry on `subject`, if the subject was ever written. JetStream
    /// asks with the subject in the request's own subject, as
    /// [`EventLog::last_seq_for_subject`] does.
    fn last_entry_for_subject(
        &self,
        subject: &str,
    ) -> impl Future<Output = Result<Option<RawEntry>, LogError>> + Send;

    /// The entries on exactly `subject` after sequence `after`, in order, up to
    /// the end of the log as it is when called: at most `max` (more is an error,
    /// [`LogError::Rejected`]). `reader` names what reads them, so that a broker's
    /// permissions can allow this one read: on JetStream a pull consumer of that
    /// name filtered to `subject`, made for the call and deleted after it (a
    /// consumer left by a process that died is replaced). Cheap when nothing is
    /// new: one question to the log.
    fn read_subject(
        &self,
        subject: &str,
        after: u64,
        reader: &str,
        max: usize,
    ) -> impl Future<Output = Result<Vec<RawEntry>, LogError>> + Send;

    /// A reader positioned at `from_seq` (0 and 1 both mean the first entry). It does not
    /// borrow the log, so it can move into a task. Reading past the end waits for new
    /// entries; [`read_to_end`] stops at the end instead.
    fn reader(&self, from_seq: u64) -> impl Future<Output = Result<Self::Reader, LogError>> + Send;
}

/// A cursor over the log that reads in batches and follows new entries.
pub trait LogReader: Send {
    /// The sequence of the next entry this reader will return.
    fn position(&self) -> u64;

    /// Where the log lives, for messages.
    fn location(&self) -> String;

    /// Returns the entries available now from [`position`](LogReader::position), up to
    /// `max` (at most [`READ_BATCH_MAX`]) and advances past them. If none is available
    /// it waits up to `wait` for the first one; an empty batch means none came.
    ///
    /// On error the position is unchanged and the next call tries again.
    fn next_batch(
        &mut self,
        max: usize,
        wait: Duration,
    ) -> impl Future<Output = Result<ReadBatch, LogError>> + Send;
}

/// Reads from `from_seq` to the end of the log as it is when called, then stops: what
/// a replay or an export needs. Entries appended meanwhile are not returned.
pub async fn read_to_end<L: EventLog>(
    log: &L,
    from_seq: u64,
) -> Result<ReadToEnd<L::Reader>, LogError> {
    let end_seq = log.last_seq().await?;
    let reader = log.reader(from_seq).await?;
    Ok(ReadToEnd {
        reader,
        end_seq,
        stall_timeout: READ_TO_END_STALL_TIMEOUT,
    })
}

/// How long [`ReadToEnd`] waits for an entry it knows exists before giving up.
pub const READ_TO_END_STALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A bounded read, made by [`read_to_end`].
#[derive(Debug)]
pub struct ReadToEnd<R> {
    reader: R,
    end_seq: u64,
    stall_timeout: Duration,
}

impl<R: LogReader> ReadToEnd<R> {
    /// The last sequence this read will return.
    pub fn end_seq(&self) -> u64 {
        self.end_seq
    }

    /// The next batch of up to `max` entries, or `None` once the end was returned.
    pub async fn next_batch(&mut self, max: usize) -> Result<Option<Vec<RawEntry>>, LogError> {
        if self.reader.position() > self.end_seq {
            return Ok(None);
        }
        let want = usize::try_from(self.end_seq - self.reader.position() + 1)
            .unwrap_or(usize::MAX)
            .min(max);
        let batch = self.reader.next_batch(want, self.stall_timeout).await?;
        if batch.entries.is_empty() {
            return Err(LogError::Unavailable {
                url: self.reader.location(),
                detail: format!(
                    "no entry arrived for {} s while reading up to sequence {} (at {})",
                    self.stall_timeout.as_secs(),
                    self.end_seq,
                    self.reader.position()
                ),
            });
        }
        Ok(Some(batch.entries))
    }

    /// Reads everything that is left into one vector: for tests and small logs.
    pub async fn collect(mut self) -> Result<Vec<RawEntry>, LogError> {
        let mut all = Vec::new();
        while let Some(batch) = self.next_batch(READ_BATCH_DEFAULT).await? {
            all.extend(batch);
        }
        Ok(all)
    }
}

/// Checks what both backends require of an append before storing it, so they refuse
/// the same messages with the same error.
pub(crate) fn validate_append(msg: &Append, payload_bytes_max: usize) -> Result<(), LogError> {
    validate_subject(&msg.subject)?;
    if let Some(msg_id) = &msg.msg_id
        && (msg_id.is_empty()
            || msg_id.len() > MSG_ID_BYTES_MAX
            || msg_id.chars().any(|c| c.is_control()))
    {
        return Err(LogError::Rejected {
            detail: format!(
                "message id {msg_id:?} must be 1 to {MSG_ID_BYTES_MAX} bytes with no control characters"
            ),
        });
    }
    if msg.payload.len() > payload_bytes_max {
        return Err(LogError::Rejected {
            detail: format!(
                "payload of {} bytes is larger than the log's maximum of {payload_bytes_max}",
                msg.payload.len()
            ),
        });
    }
    Ok(())
}

/// A subject of the log: `gridfold.ev.` then one or more non-empty tokens, with no
/// wildcard (`*`, `>`), whitespace or control character.
pub(crate) fn validate_subject(subject: &str) -> Result<(), LogError> {
    let rest = subject.strip_prefix(SUBJECT_PREFIX);
    let valid = subject.len() <= SUBJECT_BYTES_MAX
        && rest.is_some_and(|rest| {
            !rest.is_empty()
                && rest.split('.').all(|token| {
                    !token.is_empty()
                        && token
                            .chars()
                            .all(|c| c != '*' && c != '>' && !c.is_whitespace() && !c.is_control())
                })
        });
    if valid {
        Ok(())
    } else {
        Err(LogError::Rejected {
            detail: format!(
                "subject {subject:?} is not a log subject: it must be {SUBJECT_PREFIX}<token>[.<token>...] \
                 (at most {SUBJECT_BYTES_MAX} bytes, no wildcards or whitespace)"
            ),
        })
    }
}

/// The first sequence a reader created with `from_seq` returns.
pub(crate) fn first_seq(from_seq: u64) -> u64 {
    from_seq.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects() {
        for ok in [
            "gridfold.ev.a",
            "gridfold.ev.engine.e-1.report",
            "gridfold.ev.orders",
        ] {
            assert!(validate_subject(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "gridfold.ev",
            "gridfold.ev.",
            "gridfold.ev.a..b",
            "gridfold.ev.a.",
            "gridfold.ev.*",
            "gridfold.ev.>",
            "gridfold.ev.a b",
            "gridfold.order.e1",
            "other.ev.a",
        ] {
            assert!(
                matches!(validate_subject(bad), Err(LogError::Rejected { .. })),
                "{bad:?} accepted"
            );
        }
        let long = format!("{SUBJECT_PREFIX}{}", "a".repeat(SUBJECT_BYTES_MAX));
        assert!(validate_subject(&long).is_err());
    }

    #[test]
    fn appends() {
        let ok = Append::new("gridfold.ev.a", &b"x"[..]).with_msg_id("id-1");
        assert!(validate_append(&ok, 1).is_ok());
        assert!(validate_append(&ok, 0).is_err(), "payload over the maximum");
        for bad_id in ["", "a\nb", &"i".repeat(MSG_ID_BYTES_MAX + 1)] {
            let msg = Append::new("gridfold.ev.a", Bytes::new()).with_msg_id(bad_id);
            assert!(validate_append(&msg, 10).is_err(), "{bad_id:?}");
        }
    }

    #[test]
    fn error_messages_name_the_kind() {
        let err = LogError::WrongLastSequence {
            subject: "gridfold.ev.orders".into(),
            expected: 3,
            actual: Some(7),
        };
        assert_eq!(
            err.to_string(),
            "wrong last sequence on gridfold.ev.orders: expected 3, the log has 7"
        );
        let err = LogError::Unavailable {
            url: "nats://127.0.0.1:4222".into(),
            detail: "connection refused".into(),
        };
        assert_eq!(
            err.to_string(),
            "the log at nats://127.0.0.1:4222 is unavailable: connection refused"
        );
    }
}
