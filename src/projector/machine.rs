//! The projector loop without IO, in the shape of quinn-proto: entries go in
//! through [`Machine::handle_entry`], order batches come out of
//! [`Machine::poll_batch`]. The real projector and the simulator drive the same
//! machine, so what the simulator shows is what production does.
//!
//! The machine remembers the batches it handed out until it reads them back from
//! the log; until then they are "in flight" and `schedule` counts them as done.
//! With each it keeps, once told, the bytes it was published as: read back
//! exactly as published, its seal needs no check (the projector made it a
//! moment ago, over these bytes; an ed25519 verification was about a fifth of
//! the projector's CPU per real task). Only bytes equal to the published ones,
//! every one, are vouched for; replay, which has no such memory, checks every
//! seal and folds to the same state.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::core::event::{Entry, Event, Order, OrderBatch, Origin, Payload, ORDERS_PER_BATCH_MAX};
use crate::core::fold::{fold_events, Folded};
use crate::core::reject::Rejection;
use crate::core::schedule::{decide, InFlight, ALGORITHM_VERSION};
use crate::core::state::State;

/// Most batches published and not yet read back; past this the machine waits for
/// the log before deciding again.
pub const PENDING_BATCHES_MAX: usize = 64;

#[derive(Debug, Clone, Default)]
pub struct Machine {
    state: State,
    pending: VecDeque<InFlightBatch>,
    /// Deliveries the broker refused ([`Order::Undeliverable`]), to publish
    /// in a batch of their own before the next decision.
    undeliverable: VecDeque<Order>,
}

/// A batch handed out and not yet read back.
#[derive(Debug, Clone)]
struct InFlightBatch {
    batch: OrderBatch,
    /// Its stored bytes as published ([`Machine::published_as`]).
    published_as: Option<Bytes>,
}

impl Machine {
    pub fn new() -> Self {
        Self::default()
    }

    /// Resumes from a snapshot: nothing is pending, since everything this
    /// projector published before stopping will be read back from the log.
    pub fn from_state(state: State) -> Self {
        Machine { state, pending: VecDeque::new(), undeliverable: VecDeque::new() }
    }

    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn into_state(self) -> State {
        self.state
    }

    pub fn pending_batches(&self) -> usize {
        self.pending.len()
    }

    /// Folds one entry; if it is a batch this machine published, it is no longer in flight.
    pub fn handle_entry(&mut self, entry: &Entry) -> Vec<Rejection> {
        self.handle_entry_folded(entry).rejections
    }

    /// [`Machine::handle_entry`], with all the fold says of the entry
    /// ([`Folded`]: the companion runs it ended, too).
    pub fn handle_entry_folded(&mut self, entry: &Entry) -> Folded {
        let folded = fold_events(&mut self.state, entry);
        if let (Origin::Projector, Payload::Event(envelope)) = (&entry.origin, &entry.payload)
            && let Event::OrderBatch(batch) = &envelope.event
                && self.pending.front().map(|pending| &pending.batch) == Some(batch) {
                    self.pending.pop_front();
                }
        folded
    }

    /// The batch last handed out by [`Machine::poll_batch`] is published as
    /// `stored`, sealed by this projector's key.
    pub fn published_as(&mut self, stored: Bytes) {
        if let Some(last) = self.pending.back_mut() {
            last.published_as = Some(stored);
        }
    }

    /// Marks `entry`'s seal as this projector's own
    /// ([`crate::core::event::EntrySeal::sealed_here`]) when it is the next
    /// batch in flight, read back byte for byte as it was published. To call
    /// before the entry is handled.
    pub fn vouch_for_own_seal(&self, entry: &mut Entry) {
        let Some(seal) = entry.seal.as_mut().filter(|_| entry.origin == Origin::Projector) else { return };
        if self.pending.front().and_then(|pending| pending.published_as.as_deref()) == Some(&entry.stored[..]) {
            seal.sealed_here = true;
        }
    }

    /// Decides on the state folded so far; the batch returned is in flight until
    /// read back. `None` when there is nothing to do or too much is in flight.
    pub fn poll_batch(&mut self) -> Option<OrderBatch> {
        if self.pending.len() >= PENDING_BATCHES_MAX {
            return None;
        }
        if !self.undeliverable.is_empty() {
            let n = self.undeliverable.len().min(ORDERS_PER_BATCH_MAX);
            let batch = OrderBatch {
                based_on_seq: self.state.last_seq,
                algorithm: self.state.policy.algorithm.name().to_string(),
                algorithm_version: ALGORITHM_VERSION,
                orders: self.undeliverable.drain(..n).collect(),
            };
            self.pending.push_back(InFlightBatch { batch: batch.clone(), published_as: None });
            return Some(batch);
        }
        let in_flight = InFlight::from_batches(&self.state, self.pending.iter().map(|pending| &pending.batch));
        let batch = decide(&self.state, &in_flight)?;
        self.pending.push_back(InFlightBatch { batch: batch.clone(), published_as: None });
        Some(batch)
    }

    /// The broker refused a delivery of this attempt's run order as too large
    /// (an [`Order::Undeliverable`]): the next batch reports it, alone or with
    /// others of its kind, so that the fold fails the attempt.
    pub fn report_undeliverable(&mut self, order: Order) {
        self.undeliverable.push_back(order);
    }

    /// The log refused a publish (another writer holds the fence): forget what
    /// was in flight; the log is the truth and will be read again.
    pub fn abandon_pending(&mut self) {
        self.pending.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::Seq;

    fn batch(n: u8) -> OrderBatch {
        OrderBatch { based_on_seq: Seq(u64::from(n)), algorithm: "sge-plain".into(), algorithm_version: 1, orders: vec![] }
    }

    fn sealed(batch: &OrderBatch) -> Vec<u8> {
        let key = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
        crate::wire::encode_sealed(&crate::projector::record::batch_envelope(batch.clone()), &key)
    }

    fn entry_of(stored: &[u8]) -> Entry {
        crate::wire::entry_from_log(Seq(1), 0, crate::wire::ORDERS_SUBJECT, stored)
    }

    /// A machine with `batches` in flight, each published as `sealed`.
    fn in_flight(batches: &[OrderBatch]) -> Machine {
        let mut machine = Machine::new();
        for batch in batches {
            machine.pending.push_back(InFlightBatch { batch: batch.clone(), published_as: None });
            machine.published_as(Bytes::from(sealed(batch)));
        }
        machine
    }

    fn vouched(machine: &Machine, stored: &[u8]) -> bool {
        let mut entry = entry_of(stored);
        machine.vouch_for_own_seal(&mut entry);
        entry.seal.expect("a seal").sealed_here
    }

    #[test]
    fn only_the_exact_bytes_published_are_vouched_for_and_each_once() {
        let (first, second) = (batch(1), batch(2));
        let mut machine = in_flight(&[first.clone(), second.clone()]);
        let (first_bytes, second_bytes) = (sealed(&first), sealed(&second));

        // The first batch's seal kept on other bytes (its algorithm's name
        // changed): a forgery, not vouched for.
        let mut forged = first_bytes.clone();
        let name_at = forged.windows(9).position(|window| window == b"sge-plain").expect("the algorithm's name");
        forged[name_at + 8] = b'N';
        assert!(!vouched(&machine, &forged), "a copied signature on other bytes is checked");

        assert!(vouched(&machine, &first_bytes), "the very bytes published");
        machine.handle_entry(&entry_of(&first_bytes));
        assert_eq!(machine.pending_batches(), 1, "read back, no longer in flight");
        assert!(!vouched(&machine, &first_bytes), "vouched for once");
        assert!(vouched(&machine, &second_bytes), "the next in flight");
    }

    #[test]
    fn a_batch_whose_bytes_were_not_given_is_not_vouched_for() {
        let mut machine = Machine::new();
        machine.pending.push_back(InFlightBatch { batch: batch(3), published_as: None });
        assert!(!vouched(&machine, &sealed(&batch(3))), "its seal is checked");
        machine.abandon_pending();
        machine.published_as(Bytes::from(sealed(&batch(3))));
        assert!(!vouched(&machine, &sealed(&batch(3))), "nothing in flight: nothing vouched for");
    }

    /// A delivery the broker refused goes through the log: a batch of its own
    /// reports it, the fold fails the attempt (its record says why), and
    /// `replay --verify` counts the batch as a report, not a decision.
    #[test]
    fn a_refused_delivery_is_reported_in_a_batch_of_its_own_that_fails_the_attempt_and_replay_does_not_rederive() {
        use crate::core::event::FailureKind;
        use crate::core::replay::{is_delivery_report, replay, ReplayOptions};
        use crate::core::testkit::*;
        let mut log = LogBuilder::new();
        log.login("e1", 1, linux_props("lyon", 8192));
        log.submit(job_spec("j", 1, ""));
        let mut machine = Machine::new();
        for entry in log.entries.clone() {
            machine.handle_entry(&entry);
        }
        let dispatch = machine.poll_batch().expect("a dispatch");
        let entry = log.orders(dispatch);
        assert!(machine.handle_entry(&entry).is_empty());
        machine.report_undeliverable(Order::Undeliverable { task: task("j", 0), attempt: 1, engine: engine_id("e1"), bytes: 100_000, max: 65_536 });
        let report = machine.poll_batch().expect("the report comes first");
        assert!(is_delivery_report(&report), "{report:?}");
        let entry = log.orders(report);
        assert!(machine.handle_entry(&entry).is_empty());
        let state = machine.state();
        let job = state.job(state.job_idx(&job_id("j")).expect("held"));
        let record = job.attempt_log.newest(0).expect("attempt 1");
        assert_eq!((record.attempt, record.failure_kind), (1, Some(FailureKind::Undeliverable)));
        let text = String::from_utf8_lossy(record.text.as_deref().unwrap_or_default()).to_string();
        assert!(text.contains("100000 bytes, more than its 65536"), "{text}");
        assert_eq!(state.task(crate::core::state::TaskKey { job: state.job_idx(&job_id("j")).unwrap(), index: 0 }).failures, 1);
        let options = ReplayOptions { verify: true, check_invariants: true, ..ReplayOptions::default() };
        let (_, replayed) = replay(State::new(), &log.entries, &options, &mut |_| {});
        assert_eq!(replayed.first_divergence, None);
        assert_eq!((replayed.batches_verified, replayed.batches_of_delivery_reports), (1, 1));
    }
}
