//! The projector process around the real [`Machine`]: what `gridfold projector`
//! does with JetStream, done with the simulated log.
//!
//! - It folds every entry the log holds, in order, and after each one (in tests)
//!   checks the state's invariants.
//! - When caught up, with no publish of its own in flight, it polls the machine;
//!   a batch goes to the log with the fence (`expected last orders sequence` =
//!   the newest projector entry it has folded). One publish at a time: the fence
//!   needs the previous batch's sequence before the next can be sent.
//! - Orders take effect, and are delivered to engines, when their batch is folded
//!   back — only the orders the fold applied, resolved by the production
//!   projector's own [`deliveries_of`]. A restarted projector re-reads the batches
//!   after its snapshot and delivers them again; engines ignore repeats.
//! - It snapshots its state every `snapshot_every_entries` entries. A crash drops
//!   the machine; a start rebuilds it from the newest snapshot (or from nothing)
//!   and resumes folding after the snapshot's sequence.
//!
//! Statistics gathered while folding (waits, order problems, the GridServer
//! orders and reports that took effect) count each sequence once, so the entries
//! a restarted projector folds again are not counted twice.

use std::collections::BTreeMap;

use crate::core::event::{CancelReason, Entry, Event, Order, Origin, Payload};
use crate::core::ids::Seq;
use crate::core::reject::{OrderProblem, Rejection};
use crate::core::state::State;
use crate::projector::delivery::deliveries_of;
use crate::projector::machine::Machine;
use crate::wire::delivery::{Delivery, DeliveryKind};

use super::report::GridServerCounts;

use super::log::SimLog;

/// The simulated projector's signing key: fixed, so a seed reproduces a run's
/// log byte for byte. The world registers it (as an operator) before anything else.
pub fn sim_projector_key() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(blake3::hash(b"gridfold-sim-projector").as_bytes())
}

/// Waits from submission to the start of the attempt that completed the task.
#[derive(Debug, Clone, Copy, Default)]
pub struct WaitStats {
    pub tasks: u64,
    pub sum_ms: u64,
    pub max_ms: u64,
}

#[derive(Debug)]
pub struct SimProjector {
    machine: Option<Machine>,
    /// Bumped at every crash: a publish of an older incarnation is no longer this process's.
    pub incarnation: u32,
    /// The token of this incarnation's publish in flight, if any.
    pub publishing: Option<u64>,
    /// Something changed since the last poll (entries folded, pending abandoned).
    dirty: bool,
    /// A publish of ours was answered "duplicate": once caught up, forget what is still pending.
    resync: bool,
    /// The newest projector entry folded: what the fence must expect.
    last_orders_seq: Seq,
    snapshots_on: bool,
    snapshot_every: u64,
    snapshot: Option<Vec<u8>>,
    folded_since_snapshot: u64,
    pub snapshots_taken: u64,
    /// Entries up to here have been counted in the statistics below.
    stats_through: Seq,
    pub wait: WaitStats,
    pub order_problems: BTreeMap<String, u64>,
    /// GridServer orders applied and engine reports accepted.
    pub gridserver: GridServerCounts,
    pub restarts_done: u32,
}

impl SimProjector {
    pub fn new(snapshots_on: bool, snapshot_every: u64) -> Self {
        assert!(snapshot_every > 0);
        SimProjector {
            machine: Some(Machine::new()),
            incarnation: 0,
            publishing: None,
            dirty: true,
            resync: false,
            last_orders_seq: Seq(0),
            snapshots_on,
            snapshot_every,
            snapshot: None,
            folded_since_snapshot: 0,
            snapshots_taken: 0,
            stats_through: Seq(0),
            wait: WaitStats::default(),
            order_problems: BTreeMap::new(),
            gridserver: GridServerCounts::default(),
            restarts_done: 0,
        }
    }

    pub fn is_up(&self) -> bool {
        self.machine.is_some()
    }

    pub fn state(&self) -> Option<&State> {
        self.machine.as_ref().map(Machine::state)
    }

    pub fn last_orders_seq(&self) -> Seq {
        self.last_orders_seq
    }

    /// The process dies. Returns the token of the publish it had in flight.
    pub fn crash(&mut self) -> Option<u64> {
        assert!(self.is_up(), "only a running projector crashes");
        self.machine = None;
        self.incarnation += 1;
        self.resync = false;
        self.publishing.take()
    }

    /// The process starts again: from the newest snapshot, or from nothing.
    pub fn start(&mut self, log: &SimLog) {
        assert!(!self.is_up(), "the projector is already running");
        let state = match &self.snapshot {
            Some(bytes) => State::from_snapshot(bytes)
                .unwrap_or_else(|e| panic!("a snapshot the projector took does not load: {e}")),
            None => State::new(),
        };
        self.last_orders_seq = log.last_orders_seq_through(state.last_seq);
        self.machine = Some(Machine::from_state(state));
        self.folded_since_snapshot = 0;
        self.dirty = true;
        self.restarts_done += 1;
    }

    /// A publish of this incarnation was refused by the fence: the log is the truth.
    pub fn publish_refused(&mut self) {
        self.publishing = None;
        if let Some(machine) = &mut self.machine {
            machine.abandon_pending();
        }
        self.dirty = true;
    }

    /// A publish of this incarnation was stored, or answered as a duplicate of an entry
    /// already stored (`duplicate`), which the catch-up will fold.
    pub fn publish_acked(&mut self, duplicate: bool) {
        self.publishing = None;
        self.resync |= duplicate;
    }

    /// Folds everything the log holds beyond the machine's state. Returns the
    /// deliveries of the batches folded: the orders that applied and have an engine to tell.
    pub fn catch_up(&mut self, log: &SimLog, check_invariants: bool) -> Vec<Delivery> {
        let Some(machine) = &mut self.machine else { return Vec::new() };
        let mut deliveries = Vec::new();
        while machine.state().last_seq < log.last_seq() {
            let seq = Seq(machine.state().last_seq.0 + 1);
            let entry = log.entry(seq);
            let fresh = seq > self.stats_through;
            let before = if fresh { completion_wait_basis(machine.state(), entry) } else { None };
            let rejections = machine.handle_entry(entry);
            if check_invariants {
                machine.state().check_invariants();
            }
            self.dirty = true;
            if fresh {
                self.stats_through = seq;
                if let (Some((started_ms, submitted_ms)), true) = (before, rejections.is_empty()) {
                    let wait = started_ms.unwrap_or(machine.state().now_ms).saturating_sub(submitted_ms);
                    self.wait.tasks += 1;
                    self.wait.sum_ms += wait;
                    self.wait.max_ms = self.wait.max_ms.max(wait);
                }
                for rejection in &rejections {
                    if let Rejection::OrderNotApplicable { problem, .. } = rejection {
                        *self.order_problems.entry(order_problem_name(problem).to_string()).or_default() += 1;
                    }
                }
                count_gridserver(&mut self.gridserver, entry, &rejections);
            }
            if entry.origin == Origin::Projector
                && let Payload::Event(envelope) = &entry.payload
                && let Event::OrderBatch(batch) = &envelope.event
            {
                self.last_orders_seq = seq;
                // A simulated engine declared lost is either dead or logs in again by
                // itself when it returns, so the news of its loss needs no delivery.
                let delivered = deliveries_of(machine.state(), seq, batch, &rejections);
                deliveries.extend(delivered.into_iter().filter(|d| !matches!(d.kind, DeliveryKind::Lost(_))));
            }
            if self.snapshots_on {
                self.folded_since_snapshot += 1;
                if self.folded_since_snapshot >= self.snapshot_every {
                    self.snapshot = Some(machine.state().to_snapshot());
                    self.snapshots_taken += 1;
                    self.folded_since_snapshot = 0;
                }
            }
        }
        if self.resync {
            self.resync = false;
            if machine.pending_batches() > 0 {
                machine.abandon_pending();
            }
        }
        deliveries
    }

    /// Decides, if anything changed since the last decision and nothing of ours is in flight.
    pub fn poll(&mut self) -> Option<crate::core::event::OrderBatch> {
        let machine = self.machine.as_mut()?;
        if self.publishing.is_some() || !self.dirty {
            return None;
        }
        self.dirty = false;
        machine.poll_batch()
    }
}

/// For a completion about to be folded: (start time of its live attempt, submission time), in log time.
fn completion_wait_basis(state: &State, entry: &Entry) -> Option<(Option<u64>, u64)> {
    let Payload::Event(envelope) = &entry.payload else { return None };
    let Event::TaskCompleted { task, attempt, .. } = &envelope.event else { return None };
    let key = state.task_key(task)?;
    let live = state.live_attempt(key).filter(|live| live.attempt == *attempt)?;
    let submitted = state.job(key.job).submitted_ms;
    Some((live.started_ms, submitted))
}

/// Counts what a fresh entry did of GridServer's: the orders of a batch that
/// applied, and the engine reports the fold accepted.
fn count_gridserver(counts: &mut GridServerCounts, entry: &Entry, rejections: &[Rejection]) {
    let Payload::Event(envelope) = &entry.payload else { return };
    match &envelope.event {
        Event::OrderBatch(batch) => {
            if rejections.iter().any(|r| !matches!(r, Rejection::OrderNotApplicable { .. })) {
                return; // the whole batch was refused
            }
            let applied = batch.orders.iter().enumerate().filter(|(n, _)| {
                !rejections.iter().any(|r| matches!(r, Rejection::OrderNotApplicable { order, .. } if *order as usize == *n))
            });
            for (_, order) in applied {
                match order {
                    Order::SyncLibrary { .. } => counts.library_syncs_ordered += 1,
                    Order::MarkUnschedulable { reason, .. } => {
                        *counts.unschedulable_by_reason.entry(reason.as_str().to_string()).or_default() += 1;
                    }
                    Order::Blacklist { .. } => counts.blacklistings += 1,
                    Order::Reschedule { reason, .. } => {
                        *counts.reschedules_by_reason.entry(reason.as_str().to_string()).or_default() += 1;
                    }
                    Order::Cancel { reason: CancelReason::RedundantCopy, .. } => counts.redundant_copies_cancelled += 1,
                    Order::FailDependent { task: Some(_), .. } => counts.tasks_failed_by_dependency += 1,
                    Order::FailDependent { task: None, .. } => counts.jobs_failed_by_dependency += 1,
                    _ => {}
                }
            }
        }
        _ if !rejections.is_empty() => {}
        Event::LibrarySynced { .. } => counts.library_syncs_reported += 1,
        Event::LibrarySyncFailed { .. } => counts.library_sync_failures_reported += 1,
        Event::LibraryPublished(_) => counts.libraries_published += 1,
        Event::TaskCompleted { .. } => counts.completions_accepted += 1,
        _ => {}
    }
}

pub fn order_problem_name(problem: &OrderProblem) -> &'static str {
    problem.kind_name()
}
