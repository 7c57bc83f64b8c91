//! Taking snapshots: encoded between two inputs, written to disk by a blocking
//! task, one at a time. The store and its format are in `snapshot.rs`.

use std::time::Instant;

use tokio::task::JoinError;

use super::tasks::task_done;
use super::{Lease, OrderSink, Shell, SnapshotStore, SnapshotStoreError};
use crate::core::digest::Digest;
use crate::log::EventLog;

/// A snapshot written (sequence, chain digest there, why), and what the store answered.
pub(super) type SnapshotOutcome = (u64, Digest, &'static str, Result<usize, SnapshotStoreError>);

impl<L, S, A> Shell<L, S, A>
where
    L: EventLog + Clone + 'static,
    S: OrderSink,
    A: Lease,
{
    /// Takes a snapshot: encodes it here, between two inputs, and writes it from a
    /// blocking task, so the loop does not wait for the disk. At most one is written at
    /// a time: while one is, this does nothing (the next input tries again).
    pub(super) fn snapshot(&mut self, why: &'static str) {
        if self.snapshot_writing.is_some() {
            return;
        }
        let state = self.machine.state();
        let seq = state.last_seq.0;
        self.entries_since_snapshot = 0;
        self.last_snapshot_at = Instant::now();
        if seq == 0 || seq == self.snapshot_taken_seq {
            return;
        }
        let last_entry = self
            .last_entry
            .expect("an entry was folded, so its fingerprint is known");
        let record = SnapshotStore::encode_record(
            state,
            self.folded_orders_seq,
            last_entry,
            self.recent.encoded(),
        );
        let chain = state.chain;
        let store = self.snapshots.clone();
        self.snapshot_taken_seq = seq;
        self.snapshot_writing = Some(tokio::task::spawn_blocking(move || {
            (seq, chain, why, store.write_record(&record))
        }));
    }

    fn snapshot_written(&mut self, (seq, chain, why, result): SnapshotOutcome) {
        match result {
            Ok(bytes) => {
                self.status.snapshot_seq = seq;
                self.status.snapshots_written += 1;
                tracing::info!(seq, bytes, why, digest = %chain, "snapshot written");
            }
            Err(err) => {
                tracing::warn!("writing a snapshot at sequence {seq}: {err}");
                self.snapshot_taken_seq = self.status.snapshot_seq;
            }
        }
    }

    /// Takes the answer of the task that wrote a snapshot, or that it ended without one.
    pub(super) fn snapshot_ended(&mut self, outcome: Result<SnapshotOutcome, JoinError>) {
        match outcome {
            Ok(outcome) => self.snapshot_written(outcome),
            Err(err) => {
                tracing::warn!("writing a snapshot: the task ended: {err}");
                self.snapshot_taken_seq = self.status.snapshot_seq;
            }
        }
    }

    /// Waits for the snapshot being written, if any.
    pub(super) async fn snapshot_settled(&mut self) {
        if self.snapshot_writing.is_some() {
            let outcome = task_done(&mut self.snapshot_writing).await;
            self.snapshot_ended(outcome);
        }
    }
}
