//! The embedded log: the [`EventLog`] on a sled database in one directory, for a single
//! machine with no broker, offline audits, and tests of everything above the log.
//!
//! # Layout
//!
//! One sled tree, keys prefixed by one byte, so that each append is a single atomic
//! `apply_batch` whatever it touches:
//!
//! | key | value |
//! |---|---|
//! | `m` `format` | [`FORMAT`] |
//! | `e` seq (u64 BE) | time_ms (u64 BE), subject length (u16 BE), subject, payload |
//! | `s` subject | last seq on the subject (u64 BE) |
//! | `d` msg id | seq (u64 BE), time_ms (u64 BE) of the original |
//! | `x` time_ms (u64 BE) msg id | empty: the dedup entries by age, to expire them |
//!
//! # Invariants
//!
//! - One writer at a time: appends hold a mutex across check and write, so the
//!   duplicate and expected-sequence checks and the write are atomic with respect
//!   to each other. The directory is locked by sled against a second process.
//! - Sequences are 1, 2, 3, … with no gap; the time of an entry is the wall clock
//!   at append, raised if needed to the previous entry's time (never decreasing).
//! - Readers see an entry only once it is committed: after the flush, with
//!   [`Durability::FlushEachAppend`] (the default), so what a reader saw survives a crash.
//! - A message id is remembered for the duplicate window after its original's log
//!   time, then forgotten (lazily: at most [`DEDUP_PRUNE_MAX`] per append).
//!
//! - Subjects are those of the event log (`gridfold.ev.…`) unless
//!   [`EmbeddedConfig::subject_prefix`] names another prefix, under the same token
//!   rules: the projector keeps its deliveries to engines in a second embedded log
//!   whose subjects are `gridfold.order.<engine>`, as JetStream's `GRIDFOLD_ORDERS`.
//!
//! It does not replicate, compact or delete entries, and it serves one process.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::watch;

use super::{
    Append, Appended, DUPLICATE_WINDOW_DEFAULT, EventLog, LogError, LogReader,
    PAYLOAD_BYTES_MAX_DEFAULT, READ_BATCH_MAX, RawEntry, ReadBatch, SUBJECT_PREFIX,
};

/// The format marker stored in a new directory; another marker is refused.
pub const FORMAT: &[u8] = b"gridfold-embedded-log-1";
/// Most expired message ids one append forgets.
pub const DEDUP_PRUNE_MAX: usize = 1_024;

const KEY_META_FORMAT: &[u8] = b"mformat";
const PREFIX_ENTRY: u8 = b'e';
const PREFIX_SUBJECT: u8 = b's';
const PREFIX_DEDUP: u8 = b'd';
const PREFIX_DEDUP_BY_TIME: u8 = b'x';

/// When an append is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// Each `append` (and each `append_batch`, once) flushes to disk before it answers.
    FlushEachAppend,
    /// sled flushes in the background every 500 ms: faster, and a crash may lose the
    /// last half second of acknowledged appends (like nats-server's default fsync).
    Background,
}

/// The wall clock the log stamps entries with; replaceable in tests.
#[derive(Clone)]
pub struct WallClock(Arc<dyn Fn() -> u64 + Send + Sync>);

impl WallClock {
    pub fn system() -> WallClock {
        WallClock(Arc::new(|| {
            let since_epoch = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default();
            u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
        }))
    }

    /// A clock that answers `now_ms()` in ms since the Unix epoch.
    pub fn from_fn(now_ms: impl Fn() -> u64 + Send + Sync + 'static) -> WallClock {
        WallClock(Arc::new(now_ms))
    }

    fn now_ms(&self) -> u64 {
        (self.0)()
    }
}

impl Default for WallClock {
    fn default() -> Self {
        WallClock::system()
    }
}

impl fmt::Debug for WallClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WallClock")
    }
}

#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// How long a message id is remembered after its original was stored.
    pub duplicate_window: Duration,
    /// Largest payload accepted.
    pub payload_bytes_max: usize,
    pub durability: Durability,
    pub clock: WallClock,
    /// The subjects the log accepts: this prefix, then one or more tokens (the rules
    /// of the event log's subjects (`validate_subject`) with this prefix in place of `gridfold.ev.`).
    /// The event log keeps the default, [`SUBJECT_PREFIX`]; a log of another kind
    /// of message (the projector's deliveries to engines, `gridfold.order.`) sets its own.
    pub subject_prefix: String,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        EmbeddedConfig {
            duplicate_window: DUPLICATE_WINDOW_DEFAULT,
            payload_bytes_max: PAYLOAD_BYTES_MAX_DEFAULT,
            durability: Durability::FlushEachAppend,
            clock: WallClock::system(),
            subject_prefix: SUBJECT_PREFIX.to_string(),
        }
    }
}

/// The log in a sled directory. Cheap to clone: clones share one database.
#[derive(Debug, Clone)]
pub struct EmbeddedLog {
    inner: Arc<Inner>,
}

struct Inner {
    db: sled::Db,
    location: String,
    config: EmbeddedConfig,
    writer: Mutex<Writer>,
    /// The last committed sequence: what readers may see.
    committed: watch::Sender<u64>,
}

impl fmt::Debug for Inner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Inner")
            .field("location", &self.location)
            .finish_non_exhaustive()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(err) = self.db.flush() {
            tracing::error!(location = %self.location, "flushing the embedded log on close failed: {err}");
        }
    }
}

#[derive(Debug)]
struct Writer {
    next_seq: u64,
    last_time_ms: u64,
}

impl EmbeddedLog {
    /// Opens the log in `dir`, creating it if missing, and continues its sequence.
    pub fn open(dir: impl AsRef<Path>, config: EmbeddedConfig) -> Result<EmbeddedLog, LogError> {
        let dir = dir.as_ref();
        let location = dir.display().to_string();
        let flush_every_ms = match config.durability {
            Durability::FlushEachAppend => None,
            Durability::Background => Some(500),
        };
        let db = open_waiting_for_lock(dir, flush_every_ms).map_err(|err| storage_error(&location, err))?;
        match db
            .get(KEY_META_FORMAT)
            .map_err(|err| storage_error(&location, err))?
        {
            Some(format) if format.as_ref() == FORMAT => {}
            Some(format) => {
                return Err(LogError::Misconfigured {
                    location,
                    detail: format!(
                        "holds format {:?}, not {:?}",
                        String::from_utf8_lossy(&format),
                        String::from_utf8_lossy(FORMAT)
                    ),
                });
            }
            None if db.is_empty() => {
                db.insert(KEY_META_FORMAT, FORMAT)
                    .map_err(|err| storage_error(&location, err))?;
                db.flush().map_err(|err| storage_error(&location, err))?;
            }
            None => {
                return Err(LogError::Misconfigured {
                    location,
                    detail: "holds a sled database that is not a gridfold log".to_string(),
                });
            }
        }
        let (last_seq, last_time_ms) = match db.scan_prefix([PREFIX_ENTRY]).next_back() {
            None => (0, 0),
            Some(item) => {
                let (key, value) = item.map_err(|err| storage_error(&location, err))?;
                let entry = decode_entry(&location, &key, &value)?;
                (entry.seq, entry.time_ms)
            }
        };
        if last_seq > 0 {
            // Cheap check that the sequence starts where it must; the reader checks the rest.
            let first = db.scan_prefix([PREFIX_ENTRY]).next().expect("not empty");
            let (key, _) = first.map_err(|err| storage_error(&location, err))?;
            if decode_seq_key(&location, &key)? != 1 {
                return Err(corrupt(&location, "the first entry is not sequence 1"));
            }
        }
        let (committed, _) = watch::channel(last_seq);
        Ok(EmbeddedLog {
            inner: Arc::new(Inner {
                db,
                location,
                config,
                writer: Mutex::new(Writer {
                    next_seq: last_seq + 1,
                    last_time_ms,
                }),
                committed,
            }),
        })
    }

    pub fn dir(&self) -> PathBuf {
        PathBuf::from(&self.inner.location)
    }

    /// Appends `msgs` under one hold of the writer lock, stopping at the first error.
    fn append_locked(&self, msgs: Vec<Append>) -> Result<Vec<Appended>, LogError> {
        let inner = &*self.inner;
        for msg in &msgs {
            inner.validate_append(msg)?;
        }
        let mut writer = inner
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut answers = Vec::with_capacity(msgs.len());
        for msg in msgs {
            answers.push(inner.append_one(&mut writer, msg)?);
        }
        Ok(answers)
    }

    async fn commit(&self) -> Result<(), LogError> {
        let inner = &*self.inner;
        // Everything written before the flush starts is durable after it, including
        // appends of other callers that they have not flushed yet.
        let written = inner
            .writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .next_seq
            - 1;
        if inner.config.durability == Durability::FlushEachAppend {
            inner
                .db
                .flush_async()
                .await
                .map_err(|err| storage_error(&inner.location, err))?;
        }
        inner.committed.send_if_modified(|committed| {
            let advanced = written > *committed;
            *committed = (*committed).max(written);
            advanced
        });
        Ok(())
    }
}

impl Inner {
    /// [`super::validate_append`], under this log's subject prefix.
    fn validate_append(&self, msg: &Append) -> Result<(), LogError> {
        if self.config.subject_prefix == SUBJECT_PREFIX {
            return super::validate_append(msg, self.config.payload_bytes_max);
        }
        self.validate_subject(&msg.subject)?;
        // The subject is valid; check the rest as the event log would, on the same
        // tokens under the event log's prefix.
        let tokens = &msg.subject[self.config.subject_prefix.len()..];
        let mut as_event_log = msg.clone();
        as_event_log.subject = format!("{SUBJECT_PREFIX}{tokens}");
        super::validate_append(&as_event_log, self.config.payload_bytes_max)
    }

    /// [`super::validate_subject`], under this log's subject prefix.
    fn validate_subject(&self, subject: &str) -> Result<(), LogError> {
        let prefix = &self.config.subject_prefix;
        if prefix == SUBJECT_PREFIX {
            return super::validate_subject(subject);
        }
        let rest = subject
            .strip_prefix(prefix.as_str())
            .filter(|rest| !rest.is_empty());
        match rest.map(|rest| super::validate_subject(&format!("{SUBJECT_PREFIX}{rest}"))) {
            Some(Ok(())) if subject.len() <= super::SUBJECT_BYTES_MAX => Ok(()),
            _ => Err(LogError::Rejected {
                detail: format!(
                    "subject {subject:?} is not a subject of this log: it must be {prefix}<token>[.<token>...] \
                     (at most {} bytes, no wildcards or whitespace)",
                    super::SUBJECT_BYTES_MAX
                ),
            }),
        }
    }

    fn append_one(&self, writer: &mut Writer, msg: Append) -> Result<Appended, LogError> {
        let location = &self.location;
        let now_ms = self.config.clock.now_ms().max(writer.last_time_ms);
        let window_ms = u64::try_from(self.config.duplicate_window.as_millis()).unwrap_or(u64::MAX);

        // The fence first, then the duplicate check: the order of a single nats-server.
        if let Some(expected) = msg.expected_last_subject_seq {
            let actual = self.last_seq_for_subject(&msg.subject)?;
            if actual != expected {
                return Err(LogError::WrongLastSequence {
                    subject: msg.subject,
                    expected,
                    actual: Some(actual),
                });
            }
        }
        if let Some(msg_id) = &msg.msg_id
            && let Some(value) = self
                .db
                .get(dedup_key(msg_id))
                .map_err(|err| storage_error(location, err))?
        {
            let (seq, time_ms) = decode_dedup(location, &value)?;
            if now_ms < time_ms.saturating_add(window_ms) {
                return Ok(Appended {
                    seq,
                    duplicate: true,
                });
            }
        }

        let seq = writer.next_seq;
        let mut batch = sled::Batch::default();
        // Forget expired ids first, so that re-remembering one below wins.
        if let Some(cutoff_ms) = now_ms.checked_sub(window_ms) {
            let start = [PREFIX_DEDUP_BY_TIME].to_vec();
            let end = dedup_by_time_key(cutoff_ms + 1, "");
            for item in self.db.range(start..end).take(DEDUP_PRUNE_MAX) {
                let (key, _) = item.map_err(|err| storage_error(location, err))?;
                batch.remove(key.as_ref());
                let (time_ms, msg_id) = decode_dedup_by_time_key(location, &key)?;
                let dedup_key = dedup_key(&msg_id);
                if let Some(value) = self
                    .db
                    .get(&dedup_key)
                    .map_err(|err| storage_error(location, err))?
                    && decode_dedup(location, &value)?.1 == time_ms
                {
                    batch.remove(dedup_key);
                }
            }
        }
        batch.insert(
            entry_key(seq).to_vec(),
            encode_entry(now_ms, &msg.subject, &msg.payload)?,
        );
        batch.insert(subject_key(&msg.subject), seq.to_be_bytes().to_vec());
        if let Some(msg_id) = &msg.msg_id {
            let mut value = seq.to_be_bytes().to_vec();
            value.extend_from_slice(&now_ms.to_be_bytes());
            batch.insert(dedup_key(msg_id), value);
            batch.insert(dedup_by_time_key(now_ms, msg_id), Vec::new());
        }
        self.db
            .apply_batch(batch)
            .map_err(|err| storage_error(location, err))?;
        writer.next_seq = seq + 1;
        writer.last_time_ms = now_ms;
        Ok(Appended {
            seq,
            duplicate: false,
        })
    }

    fn last_seq_for_subject(&self, subject: &str) -> Result<u64, LogError> {
        match self
            .db
            .get(subject_key(subject))
            .map_err(|err| storage_error(&self.location, err))?
        {
            None => Ok(0),
            Some(value) => {
                decode_u64(&value).ok_or_else(|| corrupt(&self.location, "bad subject index value"))
            }
        }
    }

    /// Committed entries from `from_seq`, at most `max`, checking they are consecutive.
    fn read(&self, from_seq: u64, max: usize, committed: u64) -> Result<Vec<RawEntry>, LogError> {
        if from_seq > committed {
            return Ok(Vec::new());
        }
        let count = usize::try_from(committed - from_seq + 1)
            .unwrap_or(usize::MAX)
            .min(max);
        let mut entries = Vec::with_capacity(count);
        for item in self.db.range(entry_key(from_seq)..).take(count) {
            let (key, value) = item.map_err(|err| storage_error(&self.location, err))?;
            if key.first() != Some(&PREFIX_ENTRY) {
                break;
            }
            let entry = decode_entry(&self.location, &key, &value)?;
            let expected = from_seq + entries.len() as u64;
            if entry.seq != expected {
                return Err(corrupt(
                    &self.location,
                    &format!("entry {expected} is missing (found {})", entry.seq),
                ));
            }
            entries.push(entry);
        }
        if entries.len() < count {
            return Err(corrupt(
                &self.location,
                &format!("entry {} is missing", from_seq + entries.len() as u64),
            ));
        }
        Ok(entries)
    }
}

impl EventLog for EmbeddedLog {
    type Reader = EmbeddedReader;

    fn location(&self) -> String {
        self.inner.location.clone()
    }

    async fn append(&self, msg: Append) -> Result<Appended, LogError> {
        let answer = self
            .append_locked(vec![msg])?
            .pop()
            .expect("one answer per message");
        if !answer.duplicate {
            self.commit().await?;
        }
        Ok(answer)
    }

    async fn append_batch(&self, msgs: Vec<Append>) -> Result<Vec<Appended>, LogError> {
        let result = self.append_locked(msgs);
        // Commit what was written even when a later message failed.
        self.commit().await?;
        result
    }

    async fn last_seq(&self) -> Result<u64, LogError> {
        Ok(*self.inner.committed.borrow())
    }

    async fn last_seq_for_subject(&self, subject: &str) -> Result<u64, LogError> {
        self.inner.validate_subject(subject)?;
        self.inner.last_seq_for_subject(subject)
    }

    async fn last_entry_for_subject(&self, subject: &str) -> Result<Option<RawEntry>, LogError> {
        self.inner.validate_subject(subject)?;
        let seq = self.inner.last_seq_for_subject(subject)?;
        let committed = *self.inner.committed.borrow();
        if seq == 0 || seq > committed {
            return Ok(None);
        }
        Ok(self.inner.read(seq, 1, committed)?.pop())
    }

    /// Scans the entries after `after` up to the subject's last (none when the
    /// subject's index says nothing is new); `reader` names nothing here.
    async fn read_subject(&self, subject: &str, after: u64, _reader: &str, max: usize) -> Result<Vec<RawEntry>, LogError> {
        self.inner.validate_subject(subject)?;
        let last = self.inner.last_seq_for_subject(subject)?.min(*self.inner.committed.borrow());
        let mut found = Vec::new();
        let mut position = after + 1;
        while position <= last {
            let entries = self.inner.read(position, READ_BATCH_MAX, last)?;
            let Some(end) = entries.last().map(|entry| entry.seq) else { break };
            found.extend(entries.into_iter().filter(|entry| entry.subject == subject));
            if found.len() > max {
                return Err(LogError::Rejected { detail: format!("more than {max} entries on {subject}") });
            }
            position = end + 1;
        }
        Ok(found)
    }

    async fn reader(&self, from_seq: u64) -> Result<EmbeddedReader, LogError> {
        Ok(EmbeddedReader {
            inner: self.inner.clone(),
            committed: self.inner.committed.subscribe(),
            position: super::first_seq(from_seq),
        })
    }
}

/// A cursor over an [`EmbeddedLog`]; waits for new entries on a watch of the committed sequence.
#[derive(Debug)]
pub struct EmbeddedReader {
    inner: Arc<Inner>,
    committed: watch::Receiver<u64>,
    position: u64,
}

impl LogReader for EmbeddedReader {
    fn position(&self) -> u64 {
        self.position
    }

    fn location(&self) -> String {
        self.inner.location.clone()
    }

    async fn next_batch(&mut self, max: usize, wait: Duration) -> Result<ReadBatch, LogError> {
        let max = max.clamp(1, READ_BATCH_MAX);
        let position = self.position;
        let mut committed = *self.committed.borrow_and_update();
        if committed < position && !wait.is_zero() {
            // The sender lives as long as `inner`, which this reader holds: no close.
            let _ =
                tokio::time::timeout(wait, self.committed.wait_for(|&last| last >= position)).await;
            committed = *self.committed.borrow_and_update();
        }
        let entries = self.inner.read(position, max, committed)?;
        self.position += entries.len() as u64;
        Ok(ReadBatch {
            caught_up: self.position > committed,
            entries,
        })
    }
}

fn entry_key(seq: u64) -> [u8; 9] {
    let mut key = [PREFIX_ENTRY; 9];
    key[1..].copy_from_slice(&seq.to_be_bytes());
    key
}

fn subject_key(subject: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + subject.len());
    key.push(PREFIX_SUBJECT);
    key.extend_from_slice(subject.as_bytes());
    key
}

fn dedup_key(msg_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(1 + msg_id.len());
    key.push(PREFIX_DEDUP);
    key.extend_from_slice(msg_id.as_bytes());
    key
}

fn dedup_by_time_key(time_ms: u64, msg_id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(9 + msg_id.len());
    key.push(PREFIX_DEDUP_BY_TIME);
    key.extend_from_slice(&time_ms.to_be_bytes());
    key.extend_from_slice(msg_id.as_bytes());
    key
}

fn decode_u64(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(..8)?.try_into().ok()?))
}

fn decode_seq_key(location: &str, key: &[u8]) -> Result<u64, LogError> {
    match key {
        [PREFIX_ENTRY, rest @ ..] if rest.len() == 8 => Ok(decode_u64(rest).expect("8 bytes")),
        _ => Err(corrupt(location, &format!("bad entry key {key:?}"))),
    }
}

fn decode_dedup(location: &str, value: &[u8]) -> Result<(u64, u64), LogError> {
    match (
        value.len(),
        decode_u64(value),
        value.get(8..).and_then(decode_u64),
    ) {
        (16, Some(seq), Some(time_ms)) => Ok((seq, time_ms)),
        _ => Err(corrupt(location, "bad message id record")),
    }
}

fn decode_dedup_by_time_key(location: &str, key: &[u8]) -> Result<(u64, String), LogError> {
    let time_ms = key.get(1..).and_then(decode_u64);
    let msg_id = key.get(9..).and_then(|id| std::str::from_utf8(id).ok());
    match (time_ms, msg_id) {
        (Some(time_ms), Some(msg_id)) => Ok((time_ms, msg_id.to_string())),
        _ => Err(corrupt(location, "bad message id expiry key")),
    }
}

fn encode_entry(time_ms: u64, subject: &str, payload: &[u8]) -> Result<Vec<u8>, LogError> {
    let subject_len = u16::try_from(subject.len()).map_err(|_| LogError::Rejected {
        detail: format!("subject of {} bytes is too long", subject.len()),
    })?;
    let mut value = Vec::with_capacity(10 + subject.len() + payload.len());
    value.extend_from_slice(&time_ms.to_be_bytes());
    value.extend_from_slice(&subject_len.to_be_bytes());
    value.extend_from_slice(subject.as_bytes());
    value.extend_from_slice(payload);
    Ok(value)
}

fn decode_entry(location: &str, key: &[u8], value: &[u8]) -> Result<RawEntry, LogError> {
    let seq = decode_seq_key(location, key)?;
    let bad = || corrupt(location, &format!("entry {seq} does not decode"));
    let time_ms = decode_u64(value).ok_or_else(bad)?;
    let subject_len = usize::from(u16::from_be_bytes(
        value
            .get(8..10)
            .ok_or_else(bad)?
            .try_into()
            .expect("2 bytes"),
    ));
    let subject = value.get(10..10 + subject_len).ok_or_else(bad)?;
    let subject = std::str::from_utf8(subject).map_err(|_| bad())?.to_string();
    let payload = Bytes::copy_from_slice(&value[10 + subject_len..]);
    Ok(RawEntry {
        seq,
        time_ms,
        subject,
        payload,
    })
}

fn corrupt(location: &str, detail: &str) -> LogError {
    LogError::Corrupt {
        location: location.to_string(),
        detail: detail.to_string(),
    }
}

/// How long [`EmbeddedLog::open`] waits for the directory's lock. sled lets go
/// of it a moment after the last handle in this process is dropped (its
/// background threads hold the file a while), so a log closed and opened again
/// at once would otherwise fail; another process holding it fails after the wait.
pub const OPEN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);
const OPEN_LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(20);

/// Opens sled in `dir`, trying again while its lock is held, for at most [`OPEN_LOCK_WAIT`].
fn open_waiting_for_lock(dir: &Path, flush_every_ms: Option<u64>) -> sled::Result<sled::Db> {
    let deadline = std::time::Instant::now() + OPEN_LOCK_WAIT;
    loop {
        match sled::Config::new().path(dir).flush_every_ms(flush_every_ms).open() {
            Err(sled::Error::Io(err)) if is_lock_held(&err) => {
                if std::time::Instant::now() >= deadline {
                    return Err(sled::Error::Io(std::io::Error::new(
                        std::io::ErrorKind::WouldBlock,
                        format!(
                            "another process (or another log in this one) has it open: its lock was still held after {} ({err})",
                            crate::human::duration(OPEN_LOCK_WAIT)
                        ),
                    )));
                }
                std::thread::sleep(OPEN_LOCK_POLL);
            }
            opened => return opened,
        }
    }
}

/// sled's error for a directory whose lock file another handle holds.
fn is_lock_held(err: &std::io::Error) -> bool {
    err.to_string().starts_with("could not acquire lock")
}

fn storage_error(location: &str, err: sled::Error) -> LogError {
    match err {
        sled::Error::Io(source) => LogError::Io {
            location: location.to_string(),
            source,
        },
        sled::Error::Corruption { .. } => corrupt(location, &err.to_string()),
        other => LogError::Io {
            location: location.to_string(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

/// The message ids the log remembers, oldest first: for tests of expiry.
#[cfg(test)]
fn remembered_ids(log: &EmbeddedLog) -> std::collections::BTreeMap<String, (u64, u64)> {
    log.inner
        .db
        .scan_prefix([PREFIX_DEDUP])
        .map(|item| {
            let (key, value) = item.unwrap();
            let id = String::from_utf8(key[1..].to_vec()).unwrap();
            (id, decode_dedup("test", &value).unwrap())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn clock() -> (Arc<AtomicU64>, WallClock) {
        let now = Arc::new(AtomicU64::new(1_000_000));
        let handle = now.clone();
        (
            now,
            WallClock::from_fn(move || handle.load(Ordering::SeqCst)),
        )
    }

    fn open(dir: &Path, clock: WallClock, window: Duration) -> EmbeddedLog {
        let config = EmbeddedConfig {
            duplicate_window: window,
            clock,
            ..EmbeddedConfig::default()
        };
        EmbeddedLog::open(dir, config).unwrap()
    }

    #[tokio::test]
    async fn time_never_goes_back_even_across_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (now, clock) = clock();
        let log = open(dir.path(), clock.clone(), DUPLICATE_WINDOW_DEFAULT);
        log.append(Append::new("gridfold.ev.a", "1")).await.unwrap();
        now.store(500, Ordering::SeqCst); // the wall clock steps back
        log.append(Append::new("gridfold.ev.a", "2")).await.unwrap();
        drop(log);
        let log = open(dir.path(), clock, DUPLICATE_WINDOW_DEFAULT);
        log.append(Append::new("gridfold.ev.a", "3")).await.unwrap();
        now.store(2_000_000, Ordering::SeqCst);
        log.append(Append::new("gridfold.ev.a", "4")).await.unwrap();
        let times: Vec<u64> = super::super::read_to_end(&log, 1)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap()
            .iter()
            .map(|entry| entry.time_ms)
            .collect();
        assert_eq!(times, [1_000_000, 1_000_000, 1_000_000, 2_000_000]);
    }

    #[tokio::test]
    async fn message_ids_expire_after_the_window_and_are_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let (now, clock) = clock();
        let log = open(dir.path(), clock, Duration::from_millis(100));
        let first = log
            .append(Append::new("gridfold.ev.a", "x").with_msg_id("id"))
            .await
            .unwrap();
        now.fetch_add(99, Ordering::SeqCst);
        let again = log
            .append(Append::new("gridfold.ev.a", "x").with_msg_id("id"))
            .await
            .unwrap();
        assert_eq!(
            again,
            Appended {
                seq: first.seq,
                duplicate: true
            }
        );
        now.fetch_add(1, Ordering::SeqCst);
        let later = log
            .append(Append::new("gridfold.ev.a", "x").with_msg_id("id"))
            .await
            .unwrap();
        assert_eq!(
            later,
            Appended {
                seq: first.seq + 1,
                duplicate: false
            }
        );
        assert_eq!(
            remembered_ids(&log).get("id"),
            Some(&(later.seq, 1_000_100))
        );
        now.fetch_add(100, Ordering::SeqCst);
        log.append(Append::new("gridfold.ev.a", "y").with_msg_id("other"))
            .await
            .unwrap();
        let ids: Vec<String> = remembered_ids(&log).into_keys().collect();
        assert_eq!(
            ids,
            ["other"],
            "the expired id is pruned by the next append"
        );
    }

    #[tokio::test]
    async fn refuses_a_directory_of_another_format() {
        let dir = tempfile::tempdir().unwrap();
        {
            // No flusher thread: it would hold the directory's lock for a while
            // after the drop, and the open below would fail on the lock instead.
            let db = sled::Config::new().path(dir.path()).flush_every_ms(None).open().unwrap();
            db.insert("something", "else").unwrap();
            db.flush().unwrap();
        }
        let err = EmbeddedLog::open(dir.path(), EmbeddedConfig::default()).unwrap_err();
        assert!(matches!(err, LogError::Misconfigured { .. }), "{err}");
    }

    #[tokio::test]
    async fn a_directory_another_log_holds_open_is_refused_after_the_lock_wait_saying_so() {
        let dir = tempfile::tempdir().unwrap();
        let held = EmbeddedLog::open(dir.path(), EmbeddedConfig::default()).unwrap();
        let started = std::time::Instant::now();
        let err = EmbeddedLog::open(dir.path(), EmbeddedConfig::default()).unwrap_err();
        assert!(started.elapsed() >= OPEN_LOCK_WAIT, "waited {:?}", started.elapsed());
        assert!(matches!(err, LogError::Io { .. }), "{err}");
        assert!(err.to_string().contains("its lock was still held after 3"), "{err}");
        drop(held);
        // Let go of, it opens (after sled's threads let go of the lock).
        EmbeddedLog::open(dir.path(), EmbeddedConfig::default()).unwrap();
    }

    #[tokio::test]
    async fn a_log_with_another_subject_prefix_takes_only_its_subjects() {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbeddedConfig {
            subject_prefix: "gridfold.order.".to_string(),
            ..EmbeddedConfig::default()
        };
        let log = EmbeddedLog::open(dir.path(), config).unwrap();
        let stored = log
            .append(Append::new("gridfold.order.e1", "run").with_msg_id("7-0"))
            .await
            .unwrap();
        assert_eq!(
            stored,
            Appended {
                seq: 1,
                duplicate: false
            }
        );
        assert_eq!(
            log.last_seq_for_subject("gridfold.order.e1").await.unwrap(),
            1
        );
        for bad in [
            "gridfold.ev.a",
            "gridfold.order.",
            "gridfold.order.*",
            "gridfold.order.a b",
        ] {
            let err = log.append(Append::new(bad, "x")).await.unwrap_err();
            assert!(matches!(err, LogError::Rejected { .. }), "{bad:?}: {err}");
        }
        let err = log
            .append(Append::new("gridfold.order.e1", "x").with_msg_id(""))
            .await
            .unwrap_err();
        assert!(matches!(err, LogError::Rejected { .. }), "{err}");
    }

    #[test]
    fn entries_round_trip() {
        let value = encode_entry(42, "gridfold.ev.x", b"payload").unwrap();
        let entry = decode_entry("test", &entry_key(7), &value).unwrap();
        assert_eq!(
            entry,
            RawEntry {
                seq: 7,
                time_ms: 42,
                subject: "gridfold.ev.x".into(),
                payload: Bytes::from_static(b"payload")
            }
        );
        assert!(decode_entry("test", &entry_key(7), &value[..9]).is_err());
    }
}
