//! The projector's checkpoints: the folded state at one sequence, kept in one file,
//! `<state dir>/snapshots/snapshot`, so a restart folds only what came after.
//!
//! A plain file replaced whole ([`crate::replace_file`], synced) rather than a
//! key-value store: there is one record, read once at start and written every
//! `snapshot_every_entries`, and the database that held it before (sled) grew the
//! process's memory with every record of a few megabytes written into it (see
//! docs/reliability.md, "Bounded state").
//!
//! # Record format (version [`SNAPSHOT_FORMAT_VERSION`])
//!
//! One file, replaced atomically by each snapshot:
//!
//! | bytes | what |
//! |---|---|
//! | 16 | [`MAGIC`] |
//! | 4 | format version, u32 big-endian |
//! | 32 | blake3 of the body |
//! | rest | the body, postcard: `Body` |
//!
//! The body holds the last applied sequence, the chain digest there, the sequence of
//! the last entry on the orders subject (the fence to publish after), a fingerprint
//! of the log entry at the last applied sequence (to tell this log from another),
//! the state ([`State::to_snapshot`], itself postcard) and the deliveries of the
//! recent order batches (so a projector that restarts, or takes over, delivers again
//! what its predecessor may not have).
//!
//! # Invariants
//!
//! - A snapshot that does not load as it was written — wrong magic, another format
//!   version, a checksum that does not match, a body or state that does not decode or
//!   breaks the state's invariants, a chain digest or sequence that disagrees with the
//!   state — is reported as [`Loaded::Unusable`] with the reason, never half-used.
//! - The format version must be bumped whenever `Body` or the serialised form of
//!   [`State`] changes; postcard carries no field names, so an old record would
//!   otherwise decode into the wrong fields.
//! - The store holds [`LOCK_FILE`] locked while it is open: one projector per state
//!   directory, a second store on it is refused at once.
//!
//! It does not keep older snapshots: the log is the backup, and a projector that
//! cannot use the newest snapshot rebuilds from sequence 1.

use std::fs::{File, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::ids::{EngineId, Seq};
use crate::core::state::State;
use crate::log::RawEntry;
use crate::replace_file::{Durability, replace_file};
use crate::wire::delivery::{Delivery, decode_delivery, encode_delivery};

/// The first bytes of every record.
pub const MAGIC: &[u8; 16] = b"gridfold-snapsht";
/// The record format this build writes and reads. 2: the state holds jobs in
/// slots, the retirement queue, retired jobs and usage summaries. 3: accounts
/// per user and project. 4: a job's options hold its `job_share`. 5: a kept
/// rejection holds its log time, subject and sender. 6: a job holds its
/// attempt records (`core::state::attempts`). 7: an engine's load holds its
/// named load values, the policy its load formula expression and
/// `queue_sort_method`. 8: a job may be held and declare its total tasks
/// (parts), an engine may be drained, a task awaits its cancel. 9: a job's
/// options hold its Techila `project_priority`; a job its completed CPU time
/// and the project a Techila preemption gave way to; the policy its Techila
/// settings. 10: an attempt record holds its output bound, a job the output
/// budget its attempts were given, the policy its `[output]` bounds. 11: a
/// job's options hold its `expected_task_time_ms`, a job its expired tasks; the
/// Techila policy its `cycle_interval_ms`; the state its Techila cycle
/// (`CycleState`). 12: a job's options hold its `soft` request and its `span`, a
/// job its compiled soft request; the policy its suspend thresholds, the
/// suspensions which attempts a threshold suspended and each engine's suspend
/// interval; the state its parallel tasks' companion bookings (`ParallelBookings`).
/// 13: the policy its reservation settings (`max_reservation`,
/// `default_duration`), a job's options its `reserve` (ge-reserve); FBSNG's
/// queues and process types in the policy, a job its process type and section
/// priority, the state its queue priorities (`family::fbsng::state`).
/// 14: a job's options its companion command (`companion_argv`); CiGri's
/// settings in the policy, a job's options its campaign type, a job its
/// campaign state (`family::cigri::state`).
/// 15: flood control's settings in the policy (`flood`), its ratios per
/// gateway in the state (`state::flood`); or (a sibling branch) CiGri's
/// campaign state its predictor figures (whole and per cluster), per-engine
/// durations and sink suspects and flags.
/// 16: both of 15's.
/// 17: an attempt's record its gateway job id (`remote_job`).
/// 18: an attempt's record what its end report says was stored of its output
/// (`stored`: length and blake3 per stream); a kept delivery names its engine
/// (`Delivery.engine`).
/// 19: the families' figures in one field of the state and one of each job
/// (`family::FamilyStates`, `family::JobFamilies`), at their ends.
/// 20: a kept rejection's family reasons nested in a `Family` variant of the
/// shared ones (`family::reasons`): `OrderProblem`, `JobProblem`, `OpsProblem`,
/// `PrioritySetting`.
pub const SNAPSHOT_FORMAT_VERSION: u32 = 20;
/// The store's directory inside the projector's state directory.
pub const SNAPSHOTS_DIR_NAME: &str = "snapshots";

/// The record's file inside the store's directory.
pub const RECORD_FILE: &str = "snapshot";
/// The file the open store holds locked.
pub const LOCK_FILE: &str = "lock";
const HEADER_BYTES: usize = 16 + 4 + 32;

#[derive(Debug, thiserror::Error)]
#[error("snapshot store at {path}: {detail}")]
pub struct SnapshotStoreError {
    pub path: PathBuf,
    pub detail: String,
}

/// A fingerprint of one raw log entry: its time, subject and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryFingerprint(pub [u8; 32]);

impl EntryFingerprint {
    pub fn of(entry: &RawEntry) -> EntryFingerprint {
        let mut hasher = blake3::Hasher::new();
        hasher.update(&entry.time_ms.to_le_bytes());
        hasher.update(&(entry.subject.len() as u64).to_le_bytes());
        hasher.update(entry.subject.as_bytes());
        hasher.update(&entry.payload);
        EntryFingerprint(*hasher.finalize().as_bytes())
    }
}

/// A delivery as the snapshot keeps it: the log time of its batch, its engine and
/// its wire bytes (`wire::delivery::encode_delivery`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredDelivery {
    time_ms: u64,
    engine: String,
    bytes: Vec<u8>,
}

/// What [`BodyRef`] serialises a delivery as: the same bytes as [`StoredDelivery`]
/// (postcard writes a `&str` as a `String`, a `&[u8]` as a `Vec<u8>`), without copies.
#[derive(Debug, Serialize)]
struct StoredDeliveryRef<'a> {
    time_ms: u64,
    engine: &'a str,
    /// In one piece: postcard writes bytes as a length and the bytes, exactly as it
    /// writes a sequence of `u8`s, which serde would hand it one by one.
    #[serde(serialize_with = "bytes_in_one_piece")]
    bytes: &'a [u8],
}

fn bytes_in_one_piece<S: serde::Serializer>(
    bytes: &&[u8],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_bytes(bytes)
}

/// A delivery encoded once for every snapshot that keeps it: the log time of its
/// batch, its engine and its wire bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedDelivery {
    pub time_ms: u64,
    pub engine: EngineId,
    pub bytes: Vec<u8>,
}

impl EncodedDelivery {
    pub fn new(time_ms: u64, delivery: &Delivery) -> EncodedDelivery {
        EncodedDelivery {
            time_ms,
            engine: delivery.engine.clone(),
            bytes: encode_delivery(delivery),
        }
    }
}

/// The body as written: the fields of [`Body`], in its order, borrowed.
#[derive(Debug, Serialize)]
struct BodyRef<'a> {
    last_seq: u64,
    chain: [u8; 32],
    last_orders_seq: u64,
    last_entry: EntryFingerprint,
    state: Vec<u8>,
    recent: Vec<StoredDeliveryRef<'a>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Body {
    last_seq: u64,
    chain: [u8; 32],
    last_orders_seq: u64,
    last_entry: EntryFingerprint,
    state: Vec<u8>,
    recent: Vec<StoredDelivery>,
}

/// What a snapshot holds, loaded.
#[derive(Debug)]
pub struct Snapshot {
    pub state: State,
    /// The sequence of the last entry on the orders subject at or before `state.last_seq` (0: none).
    pub last_orders_seq: u64,
    /// The entry at `state.last_seq`, as the log held it.
    pub last_entry: EntryFingerprint,
    /// Deliveries of recent batches with the log time of their batch, oldest first.
    pub recent: Vec<(u64, Delivery)>,
}

/// The outcome of looking for a snapshot.
#[derive(Debug)]
pub enum Loaded {
    Snapshot(Box<Snapshot>),
    /// No snapshot was ever written here.
    Missing,
    /// There is one, and it cannot be used: the reason.
    Unusable(String),
}

/// The directory of one projector's snapshots, locked while open.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    path: PathBuf,
    /// Held for its lock, released when the last clone is dropped; never read.
    _lock: Arc<File>,
}

impl SnapshotStore {
    /// The store's directory inside a projector's state directory.
    pub fn dir_in(state_dir: &Path) -> PathBuf {
        state_dir.join(SNAPSHOTS_DIR_NAME)
    }

    /// Opens (creating if missing) the store in `dir`. Fails if another process has it open.
    pub fn open(dir: &Path) -> Result<SnapshotStore, SnapshotStoreError> {
        let path = dir.to_path_buf();
        let error = |detail: String| SnapshotStoreError { path: path.clone(), detail };
        std::fs::create_dir_all(dir).map_err(|e| error(format!("cannot create it: {e}")))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| error(format!("cannot open {}: {e}", lock_path.display())))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(error(format!(
                    "it is in use by another projector (its {LOCK_FILE} is locked)"
                )));
            }
            Err(TryLockError::Error(e)) => {
                return Err(error(format!("cannot lock {}: {e}", lock_path.display())));
            }
        }
        Ok(SnapshotStore { path, _lock: Arc::new(lock) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, detail: impl std::fmt::Display) -> SnapshotStoreError {
        SnapshotStoreError {
            path: self.path.clone(),
            detail: detail.to_string(),
        }
    }

    /// The newest snapshot, if there is one and it can be used.
    pub fn load(&self) -> Result<Loaded, SnapshotStoreError> {
        match self.read_raw()? {
            None => Ok(Loaded::Missing),
            Some(bytes) => Ok(match decode_record(&bytes) {
                Ok(snapshot) => Loaded::Snapshot(Box::new(snapshot)),
                Err(reason) => Loaded::Unusable(reason),
            }),
        }
    }

    /// Writes a snapshot of `state` (replacing the previous one) and flushes it to disk.
    pub async fn save(
        &self,
        state: &State,
        last_orders_seq: u64,
        last_entry: EntryFingerprint,
        recent: impl Iterator<Item = (u64, &Delivery)>,
    ) -> Result<usize, SnapshotStoreError> {
        // `write_record` flushes to disk before it returns.
        self.write_record(&encode_record(state, last_orders_seq, last_entry, recent))
    }

    /// The record of a snapshot, from deliveries encoded beforehand: what [`save`]
    /// writes, made without encoding a delivery again. Cheap next to [`write_record`],
    /// which does the IO and can run on a blocking thread.
    ///
    /// [`save`]: SnapshotStore::save
    /// [`write_record`]: SnapshotStore::write_record
    pub fn encode_record<'a>(
        state: &State,
        last_orders_seq: u64,
        last_entry: EntryFingerprint,
        recent: impl Iterator<Item = &'a EncodedDelivery>,
    ) -> Vec<u8> {
        let body = BodyRef {
            last_seq: state.last_seq.0,
            chain: state.chain.0,
            last_orders_seq,
            last_entry,
            state: state.to_snapshot(),
            recent: recent
                .map(|encoded| StoredDeliveryRef {
                    time_ms: encoded.time_ms,
                    engine: encoded.engine.as_str(),
                    bytes: &encoded.bytes,
                })
                .collect(),
        };
        let body = postcard::to_stdvec(&body).expect("the snapshot body always serialises");
        let mut record = Vec::with_capacity(HEADER_BYTES + body.len());
        record.extend_from_slice(MAGIC);
        record.extend_from_slice(&SNAPSHOT_FORMAT_VERSION.to_be_bytes());
        record.extend_from_slice(blake3::hash(&body).as_bytes());
        record.extend_from_slice(&body);
        record
    }

    /// Replaces the stored record with `record` and flushes it to disk (blocking IO).
    pub fn write_record(&self, record: &[u8]) -> Result<usize, SnapshotStoreError> {
        self.write_raw(record)?;
        Ok(record.len())
    }

    /// The stored record as it is, for tools and tests.
    pub fn read_raw(&self) -> Result<Option<Vec<u8>>, SnapshotStoreError> {
        match std::fs::read(self.path.join(RECORD_FILE)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(self.error(format!("cannot read {RECORD_FILE}: {err}"))),
        }
    }

    /// Replaces the stored record with these bytes, for tools and tests (no checks).
    pub fn write_raw(&self, record: &[u8]) -> Result<(), SnapshotStoreError> {
        replace_file(&self.path.join(RECORD_FILE), record, Durability::Synced)
            .map_err(|e| self.error(format!("cannot write {RECORD_FILE}: {e}")))
    }
}

fn encode_record<'a>(
    state: &State,
    last_orders_seq: u64,
    last_entry: EntryFingerprint,
    recent: impl Iterator<Item = (u64, &'a Delivery)>,
) -> Vec<u8> {
    let encoded: Vec<EncodedDelivery> = recent
        .map(|(time_ms, delivery)| EncodedDelivery::new(time_ms, delivery))
        .collect();
    SnapshotStore::encode_record(state, last_orders_seq, last_entry, encoded.iter())
}

/// The snapshot a record holds, or why it cannot be used.
fn decode_record(record: &[u8]) -> Result<Snapshot, String> {
    if record.len() < HEADER_BYTES || &record[..16] != MAGIC {
        return Err("it is not a gridfold snapshot record (bad header)".to_string());
    }
    let version = u32::from_be_bytes(record[16..20].try_into().expect("4 bytes"));
    if version != SNAPSHOT_FORMAT_VERSION {
        return Err(format!(
            "it has format version {version}; this build reads version {SNAPSHOT_FORMAT_VERSION}"
        ));
    }
    let body = &record[HEADER_BYTES..];
    if blake3::hash(body).as_bytes() != &record[20..52] {
        return Err("its checksum does not match its contents (corrupt)".to_string());
    }
    let body: Body =
        postcard::from_bytes(body).map_err(|e| format!("its body does not decode: {e}"))?;
    // `State::from_snapshot` asserts the state's invariants; a record that passed the
    // checksum and still breaks them was written by a buggy build: refuse it, do not die.
    let state = std::panic::catch_unwind(|| State::from_snapshot(&body.state))
        .map_err(|_| "its state breaks the state's invariants".to_string())?
        .map_err(|e| format!("its state does not load: {e}"))?;
    if state.last_seq != Seq(body.last_seq) || state.chain != Digest(body.chain) {
        return Err(format!(
            "its header (seq {}, digest {}) disagrees with its state (seq {}, digest {})",
            body.last_seq,
            Digest(body.chain),
            state.last_seq,
            state.chain
        ));
    }
    if body.last_orders_seq > body.last_seq {
        return Err(format!(
            "its orders sequence {} is past its last sequence {}",
            body.last_orders_seq, body.last_seq
        ));
    }
    let mut recent = Vec::with_capacity(body.recent.len());
    for stored in body.recent {
        let engine = EngineId::new(&stored.engine)
            .map_err(|e| format!("a delivery names a bad engine {:?}: {e}", stored.engine))?;
        let delivery = decode_delivery(&engine, &stored.bytes)
            .map_err(|e| format!("a delivery does not decode: {e}"))?;
        recent.push((stored.time_ms, delivery));
    }
    Ok(Snapshot {
        state,
        last_orders_seq: body.last_orders_seq,
        last_entry: body.last_entry,
        recent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fold::fold;
    use crate::core::testkit::*;
    use crate::wire::delivery::{DeliveryKind, RunTask};

    fn folded_state() -> State {
        let mut log = LogBuilder::new();
        log.login("e1", 2, linux_props("lyon", 8192));
        log.submit(job_spec("j", 3, ""));
        let mut state = State::new();
        for entry in &log.entries {
            fold(&mut state, entry);
        }
        state
    }

    fn delivery() -> Delivery {
        Delivery {
            id: "2-0".into(),
            batch_seq: Seq(2),
            engine: engine_id("e1"),
            epoch: 1,
            kind: DeliveryKind::Run(RunTask {
                task: task("j", 0),
                attempt: 1,
                argv: vec!["run".into(), "0".into()],
                params: Default::default(),
                wall_time_limit_ms: 0,
                slots: 1,
                root_library: None,
                output_bytes_max: crate::core::event::OutputPolicy::default().task_bytes_max,
                work_dir_retention_ms: crate::core::event::OutputPolicy::default().work_dir_retention_ms,
                nodes: Vec::new(),
                companion: false,
                companion_argv: Vec::new(),
            }),
        }
    }

    fn record() -> Vec<u8> {
        let delivery = delivery();
        encode_record(
            &folded_state(),
            0,
            EntryFingerprint([7; 32]),
            [(1_000_000, &delivery)].into_iter(),
        )
    }

    #[test]
    fn a_record_round_trips() {
        let state = folded_state();
        let snapshot = decode_record(&record()).unwrap();
        assert_eq!(snapshot.state.last_seq, state.last_seq);
        assert_eq!(snapshot.state.chain, state.chain);
        assert_eq!(snapshot.state.state_digest(), state.state_digest());
        assert_eq!(snapshot.last_entry, EntryFingerprint([7; 32]));
        assert_eq!(snapshot.recent, vec![(1_000_000, delivery())]);
    }

    #[test]
    fn the_borrowed_body_is_written_as_the_body_is_read() {
        let delivery = delivery();
        let owned = Body {
            last_seq: 5,
            chain: [3; 32],
            last_orders_seq: 4,
            last_entry: EntryFingerprint([7; 32]),
            state: vec![1, 2, 3],
            recent: vec![StoredDelivery {
                time_ms: 1_000_000,
                engine: "e1".into(),
                bytes: encode_delivery(&delivery),
            }],
        };
        let encoded = EncodedDelivery::new(1_000_000, &delivery);
        let borrowed = BodyRef {
            last_seq: 5,
            chain: [3; 32],
            last_orders_seq: 4,
            last_entry: EntryFingerprint([7; 32]),
            state: vec![1, 2, 3],
            recent: vec![StoredDeliveryRef {
                time_ms: encoded.time_ms,
                engine: encoded.engine.as_str(),
                bytes: &encoded.bytes,
            }],
        };
        assert_eq!(
            postcard::to_stdvec(&borrowed).unwrap(),
            postcard::to_stdvec(&owned).unwrap()
        );
    }

    #[test]
    fn damaged_or_foreign_records_are_refused_with_the_reason() {
        let good = record();
        let check = |record: &[u8], expected: &str| {
            let reason = decode_record(record).map(|_| ()).unwrap_err();
            assert!(
                reason.contains(expected),
                "{reason:?} should mention {expected:?}"
            );
        };
        check(b"", "bad header");
        check(&good[..10], "bad header");
        let mut other_version = good.clone();
        other_version[16..20].copy_from_slice(&(SNAPSHOT_FORMAT_VERSION + 1).to_be_bytes());
        check(&other_version, &format!("format version {}", SNAPSHOT_FORMAT_VERSION + 1));
        let mut flipped = good.clone();
        let middle = HEADER_BYTES + (good.len() - HEADER_BYTES) / 2;
        flipped[middle] ^= 0x40;
        check(&flipped, "checksum");
        check(&good[..good.len() - 1], "checksum");
        // A body that passes the checksum but is not a body.
        let mut garbage = good[..HEADER_BYTES].to_vec();
        garbage[20..52].copy_from_slice(blake3::hash(b"\xff\xff\xff").as_bytes());
        garbage.extend_from_slice(b"\xff\xff\xff");
        check(&garbage, "does not decode");
    }

    #[tokio::test]
    async fn the_store_keeps_the_newest_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let store = SnapshotStore::open(dir.path()).unwrap();
        assert!(matches!(store.load().unwrap(), Loaded::Missing));
        let state = folded_state();
        store
            .save(&state, 0, EntryFingerprint([1; 32]), std::iter::empty())
            .await
            .unwrap();
        drop(store);
        let store = SnapshotStore::open(dir.path()).unwrap();
        let Loaded::Snapshot(snapshot) = store.load().unwrap() else {
            panic!("a snapshot")
        };
        assert_eq!(snapshot.state.chain, state.chain);
        let mut raw = store.read_raw().unwrap().unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 1;
        store.write_raw(&raw).unwrap();
        assert!(
            matches!(store.load().unwrap(), Loaded::Unusable(reason) if reason.contains("checksum"))
        );
    }

    #[test]
    fn a_second_store_on_one_directory_is_refused_until_the_first_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let first = SnapshotStore::open(dir.path()).unwrap();
        let clone = first.clone();
        let refused = SnapshotStore::open(dir.path()).unwrap_err();
        assert!(refused.to_string().contains("in use by another projector"), "{refused}");
        drop(first);
        assert!(SnapshotStore::open(dir.path()).is_err(), "a clone still holds it");
        drop(clone);
        SnapshotStore::open(dir.path()).unwrap();
    }
}
