//! The projector loop without IO, in the shape of quinn-proto: entries go in
//! through [`Machine::handle_entry`], order batches come out of
//! [`Machine::poll_batch`]. The real projector and the simulator drive the same
//! machine, so what the simulator shows is what production does.
//!
//! The machine remembers the batches it handed out until it reads them back from
//! the log; until then they are "in flight" and `schedule` counts them as done.

use std::collections::VecDeque;

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
    pending: VecDeque<OrderBatch>,
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
                && self.pending.front() == Some(batch) {
                    self.pending.pop_front();
                }
        folded
    }

    /// Decides on the state folded so far; the batch returned is in flight until
    /// read back. `None` when there is nothing to do or too much is in flight.
    pub fn poll_batch(&mut self) -> Option<OrderBatch> {
        if self.pending.len() >= PENDING_BATCHES_MAX {
            return None;
        }
        let in_flight = InFlight::from_batches(&self.state, &self.pending);
        let batch = decide(&self.state, &in_flight)?;
        self.pending.push_back(batch.clone());
        Some(batch)
    }

    /// The log refused a publish (another writer holds the fence): forget what
    /// was in flight; the log is the truth and will be read again.
    pub fn abandon_pending(&mut self) {
        self.pending.clear();
    }
}
