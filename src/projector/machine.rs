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

use crate::core::event::{Entry, Event, OrderBatch, Origin, Payload};
use crate::core::fold::{fold_events, Folded};
use crate::core::reject::Rejection;
use crate::core::schedule::{decide, InFlight};
use crate::core::state::State;

/// Most batches published and not yet read back; past this the machine waits for
/// the log before deciding again.
pub const PENDING_BATCHES_MAX: usize = 64;

#[derive(Debug, Clone, Default)]
pub struct Machine {
    state: State,
    pending: VecDeque<InFlightBatch>,
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
        Machine { state, pending: VecDeque::new() }
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
        let in_flight = InFlight::from_batches(&self.state, self.pending.iter().map(|pending| &pending.batch));
        let batch = decide(&self.state, &in_flight)?;
        self.pending.push_back(InFlightBatch { batch: batch.clone(), published_as: None });
        Some(batch)
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
}
