//! Where a run starts: the newest snapshot, if the log holds the entry it was
//! taken after, else sequence 1 (saying why).

use super::snapshot::{self, EntryFingerprint, Loaded, SnapshotStore};
use super::{ProjectorError, SNAPSHOT_CHECK_WAIT, StartPoint};
use crate::log::{EventLog, LogError, LogReader};
use crate::projector::machine::Machine;
use crate::wire::delivery::Delivery;

/// Where a run starts: a snapshot's contents, or nothing.
pub(super) struct Start {
    pub(super) machine: Machine,
    pub(super) last_orders_seq: u64,
    pub(super) last_entry: Option<EntryFingerprint>,
    pub(super) recent: Vec<(u64, Delivery)>,
    pub(super) started_from: StartPoint,
}

impl Start {
    pub(super) fn state_seq(&self) -> u64 {
        self.machine.state().last_seq.0
    }
}

pub(super) async fn load_start<L: EventLog>(log: &L, store: &SnapshotStore) -> Result<Start, ProjectorError> {
    let reason = match store.load()? {
        Loaded::Missing => None,
        Loaded::Unusable(reason) => Some(format!(
            "the snapshot in {} cannot be used: {reason}",
            store.path().display()
        )),
        Loaded::Snapshot(snapshot) => match check_against_log(log, &snapshot).await? {
            Ok(()) => {
                let seq = snapshot.state.last_seq.0;
                return Ok(Start {
                    machine: Machine::from_state(snapshot.state),
                    last_orders_seq: snapshot.last_orders_seq,
                    last_entry: Some(snapshot.last_entry),
                    recent: snapshot.recent,
                    started_from: StartPoint::Snapshot { seq },
                });
            }
            Err(reason) => Some(reason),
        },
    };
    match &reason {
        Some(reason) => tracing::warn!("rebuilding the state from sequence 1: {reason}"),
        None => tracing::info!("no snapshot yet: folding the log from sequence 1"),
    }
    Ok(Start {
        machine: Machine::new(),
        last_orders_seq: 0,
        last_entry: None,
        recent: Vec::new(),
        started_from: StartPoint::Scratch { reason },
    })
}

/// Whether the log holds, at the snapshot's sequence, the entry it was taken after.
async fn check_against_log<L: EventLog>(
    log: &L,
    snapshot: &snapshot::Snapshot,
) -> Result<Result<(), String>, LogError> {
    let seq = snapshot.state.last_seq.0;
    let end = log.last_seq().await?;
    if end < seq {
        return Ok(Err(format!(
            "the snapshot was taken after sequence {seq} and the log ends at {end}: it is of another log"
        )));
    }
    let mut reader = log.reader(seq).await?;
    let batch = reader.next_batch(1, SNAPSHOT_CHECK_WAIT).await?;
    match batch.entries.first() {
        Some(entry) if entry.seq == seq && EntryFingerprint::of(entry) == snapshot.last_entry => {
            Ok(Ok(()))
        }
        Some(_) => Ok(Err(format!(
            "entry {seq} of the log is not the entry the snapshot was taken after: it is of another log"
        ))),
        None => Err(LogError::Unavailable {
            url: log.location(),
            detail: format!("entry {seq} did not arrive within {SNAPSHOT_CHECK_WAIT:?}"),
        }),
    }
}

pub(super) fn describe_start(start: &StartPoint) -> String {
    match start {
        StartPoint::Starting => "starting".to_string(),
        StartPoint::Snapshot { seq } => format!("from the snapshot after sequence {seq}"),
        StartPoint::Scratch { reason: None } => "no snapshot".to_string(),
        StartPoint::Scratch {
            reason: Some(reason),
        } => format!("rebuilding: {reason}"),
    }
}
