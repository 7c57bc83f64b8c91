//! Replay and the audit of decisions.
//!
//! Plain replay folds every entry and never runs `schedule`, so it stays valid
//! whatever version of the scheduling code replays it. Verification rebuilds the
//! state each batch was based on, runs `schedule` with the same orders in flight
//! (the batches the projector had published but not read back: exactly those on
//! the log between `based_on_seq` and the batch itself) and compares.

use std::collections::BTreeMap;

use super::event::{Entry, Event, Order, OrderBatch, Origin, Payload};
use super::fold::{check_seal, fold};
use super::ids::Seq;
use super::schedule::{schedule, InFlight, ALGORITHM_VERSION};
use super::state::State;

#[derive(Debug, Clone, Default)]
pub struct ReplayOptions {
    /// Re-derive every order batch and compare.
    pub verify: bool,
    /// Stop after folding this sequence (`--at`).
    pub stop_at: Option<Seq>,
    /// Run `State::check_invariants` after every entry (tests, the simulator).
    pub check_invariants: bool,
}

#[derive(Debug, Clone, Default)]
pub struct ReplayReport {
    pub entries_folded: u64,
    pub rejected_entries: u64,
    pub batches_verified: u64,
    /// Batches made by another algorithm or version than this build runs: not re-derivable here.
    pub batches_not_verifiable: u64,
    /// Batches on the orders subject that are not the projector's (no valid seal
    /// from a registered key): the fold refuses them, so there is nothing to re-derive.
    pub batches_refused: u64,
    /// Batches of the projector's reports of deliveries the broker refused
    /// (`Order::Undeliverable` alone): not decisions, so not re-derived.
    pub batches_of_delivery_reports: u64,
    pub first_divergence: Option<Divergence>,
}

/// The first batch whose orders this build does not re-derive.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    pub batch_seq: Seq,
    pub based_on_seq: Seq,
    /// Index of the first differing order (or the shorter length).
    pub order_index: usize,
    pub recorded: Option<Order>,
    pub rederived: Option<Order>,
}

impl std::fmt::Display for Divergence {
    /// `batch at seq 12 (based on seq 11) differs at order 0: recorded dispatch j/0 #1 -> e1, re-derived none`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let order = |order: &Option<Order>| order.as_ref().map_or_else(|| "none".to_string(), Order::to_string);
        write!(
            f,
            "batch at seq {} (based on seq {}) differs at order {}: recorded {}, re-derived {}",
            self.batch_seq.0,
            self.based_on_seq.0,
            self.order_index,
            order(&self.recorded),
            order(&self.rederived)
        )
    }
}

fn projector_batch(entry: &Entry) -> Option<&OrderBatch> {
    match (&entry.origin, &entry.payload) {
        (Origin::Projector, Payload::Event(envelope)) => match &envelope.event {
            Event::OrderBatch(batch) => Some(batch),
            _ => None,
        },
        _ => None,
    }
}

/// A batch of the projector's reports of refused deliveries, not of decisions
/// (see [`Order::Undeliverable`]).
pub fn is_delivery_report(batch: &OrderBatch) -> bool {
    !batch.orders.is_empty() && batch.orders.iter().all(|order| matches!(order, Order::Undeliverable { .. }))
}

/// Folds `entries` in order into a fresh state (or `start`), verifying if asked.
/// `progress` is called with the number of entries folded so far, every 65,536 entries.
pub fn replay(
    start: State,
    entries: &[Entry],
    options: &ReplayOptions,
    progress: &mut dyn FnMut(u64),
) -> (State, ReplayReport) {
    let mut state = start;
    let mut report = ReplayReport::default();
    // based_on_seq -> positions of the batches decided on it.
    let mut decided_on: BTreeMap<Seq, Vec<usize>> = BTreeMap::new();
    if options.verify {
        for (at, entry) in entries.iter().enumerate() {
            if let Some(batch) = projector_batch(entry) {
                decided_on.entry(batch.based_on_seq).or_default().push(at);
            }
        }
    }
    let verify_here = |state: &State, folded_up_to: usize, report: &mut ReplayReport| {
        let Some(batches) = decided_on.get(&state.last_seq) else { return };
        for &at in batches {
            let batch = projector_batch(&entries[at]).expect("indexed as a batch");
            // A batch nobody registered sealed was never the projector's decision.
            if check_seal(state, &entries[at]).is_err() {
                report.batches_refused += 1;
                continue;
            }
            if is_delivery_report(batch) {
                report.batches_of_delivery_reports += 1;
                continue;
            }
            if batch.algorithm != state.policy.algorithm.name() || batch.algorithm_version != ALGORITHM_VERSION {
                report.batches_not_verifiable += 1;
                continue;
            }
            let in_flight = InFlight::from_batches(
                state,
                entries[folded_up_to..at]
                    .iter()
                    .filter(|entry| check_seal(state, entry).is_ok())
                    .filter_map(projector_batch),
            );
            let rederived = schedule(state, &in_flight);
            report.batches_verified += 1;
            if report.first_divergence.is_none() && rederived != batch.orders {
                let order_index = rederived.iter().zip(&batch.orders).take_while(|(a, b)| a == b).count();
                report.first_divergence = Some(Divergence {
                    batch_seq: entries[at].seq,
                    based_on_seq: batch.based_on_seq,
                    order_index,
                    recorded: batch.orders.get(order_index).cloned(),
                    rederived: rederived.get(order_index).cloned(),
                });
            }
        }
    };
    if options.verify {
        verify_here(&state, 0, &mut report);
    }
    for (at, entry) in entries.iter().enumerate() {
        if options.stop_at.is_some_and(|stop| entry.seq > stop) {
            break;
        }
        if entry.seq <= state.last_seq {
            continue;
        }
        let rejections = fold(&mut state, entry);
        report.entries_folded += 1;
        report.rejected_entries += u64::from(!rejections.is_empty());
        if options.check_invariants {
            state.check_invariants();
        }
        if options.verify {
            verify_here(&state, at + 1, &mut report);
        }
        if report.entries_folded % 65_536 == 0 {
            progress(report.entries_folded);
        }
    }
    progress(report.entries_folded);
    (state, report)
}
