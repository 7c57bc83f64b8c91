//! The simulated log: what JetStream is to the real projector, in memory.
//!
//! It keeps the behaviours the core relies on and nothing more:
//! - sequence numbers 1, 2, 3… with no gaps, and the log time of each entry
//!   (virtual time at append, offset by [`EPOCH_MS`] so exported histories carry
//!   plausible timestamps);
//! - deduplication by envelope id within a window of log time, as `Nats-Msg-Id`;
//! - the projector's fence, as `Nats-Expected-Last-Subject-Sequence` on the
//!   orders subject: a batch is stored only if the newest projector entry is the
//!   one its publisher expects.

use std::collections::{BTreeMap, VecDeque};

use crate::core::event::{Entry, Envelope, Origin, Payload};
use crate::core::ids::Seq;

/// Log time of virtual time 0: 2026-01-01T00:00:00Z in ms since the Unix epoch.
pub const EPOCH_MS: u64 = 1_767_225_600_000;

/// JetStream's default duplicate window.
pub const DEDUP_WINDOW_MS: u64 = 120_000;

/// The bytes a broker would hold for an envelope: its protobuf, sealed with
/// the simulated projector's key when the projector publishes it. The simulated
/// log seals on the projector's behalf, so a batch is sealed exactly when it is
/// stored (a fenced or duplicate publish is never sealed at all).
pub(crate) fn stored_bytes(origin: &Origin, envelope: &Envelope) -> Vec<u8> {
    match origin {
        Origin::Projector => crate::wire::encode_sealed(envelope, &crate::sim::projector::sim_projector_key()),
        _ => crate::wire::encode(envelope),
    }
}

/// What became of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    Stored(Seq),
    /// An entry with the same envelope id is within the window: nothing stored.
    Duplicate(Seq),
    /// The fence refused a projector batch: another batch was stored since the
    /// one its publisher expected.
    Fenced { expected: Seq, actual: Seq },
}

#[derive(Debug, Default)]
pub struct SimLog {
    entries: Vec<Entry>,
    /// Envelope ids stored within the window, with their sequence.
    recent_ids: BTreeMap<[u8; 16], Seq>,
    /// The same ids by the virtual time they were stored, oldest first, for expiry.
    recent_by_time: VecDeque<(u64, [u8; 16])>,
    /// The newest entry published by the projector (`Seq(0)`: none yet).
    last_orders_seq: Seq,
}

impl SimLog {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }

    pub fn last_seq(&self) -> Seq {
        Seq(self.len())
    }

    pub fn entry(&self, seq: Seq) -> &Entry {
        assert!(seq.0 >= 1, "sequences start at 1");
        &self.entries[(seq.0 - 1) as usize]
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    pub fn into_entries(self) -> Vec<Entry> {
        self.entries
    }

    /// The newest projector entry at or below `seq`, as a restarted projector reads
    /// the last message of the orders subject.
    pub fn last_orders_seq_through(&self, seq: Seq) -> Seq {
        let through = (seq.0 as usize).min(self.entries.len());
        self.entries[..through]
            .iter()
            .rev()
            .find(|entry| entry.origin == Origin::Projector)
            .map_or(Seq(0), |entry| entry.seq)
    }

    /// Appends an envelope at virtual time `now_ms`, unless its id is a duplicate.
    pub fn append(&mut self, now_ms: u64, origin: Origin, envelope: Envelope) -> Appended {
        self.append_fenced(now_ms, origin, envelope, None)
    }

    /// Appends, refusing a projector batch whose `expected_last_orders_seq` is stale.
    /// Duplicates are detected before the fence, as JetStream does.
    pub fn append_fenced(
        &mut self,
        now_ms: u64,
        origin: Origin,
        envelope: Envelope,
        expected_last_orders_seq: Option<Seq>,
    ) -> Appended {
        let last_time = self.entries.last().map_or(0, |e| e.time_ms - EPOCH_MS);
        assert!(now_ms >= last_time, "virtual time runs forward: {now_ms} after {last_time}");
        self.expire(now_ms);
        if let Some(&seq) = self.recent_ids.get(&envelope.id) {
            return Appended::Duplicate(seq);
        }
        if let Some(expected) = expected_last_orders_seq
            && expected != self.last_orders_seq
        {
            return Appended::Fenced { expected, actual: self.last_orders_seq };
        }
        let seq = Seq(self.len() + 1);
        if origin == Origin::Projector {
            self.last_orders_seq = seq;
        }
        self.recent_ids.insert(envelope.id, seq);
        self.recent_by_time.push_back((now_ms, envelope.id));
        let stored = stored_bytes(&origin, &envelope);
        let subject = crate::wire::subject_for(&envelope.event, &origin);
        let seal = (origin == Origin::Projector)
            .then(|| crate::wire::entry_from_log(seq, EPOCH_MS + now_ms, &subject, &stored).seal)
            .flatten();
        self.entries.push(Entry {
            seq,
            time_ms: EPOCH_MS + now_ms,
            origin,
            subject,
            payload: Payload::Event(envelope),
            stored,
            seal,
        });
        Appended::Stored(seq)
    }

    fn expire(&mut self, now_ms: u64) {
        while let Some(&(stored_ms, id)) = self.recent_by_time.front() {
            if stored_ms + DEDUP_WINDOW_MS > now_ms {
                break;
            }
            self.recent_by_time.pop_front();
            self.recent_ids.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::{Event, OrderBatch};

    fn envelope(id: u8, event: Event) -> Envelope {
        Envelope { id: [id; 16], source: "test".into(), event }
    }

    fn batch() -> Event {
        Event::OrderBatch(OrderBatch { based_on_seq: Seq(0), algorithm: "sge-plain".into(), algorithm_version: 1, orders: vec![] })
    }

    #[test]
    fn sequences_times_and_dedup_within_the_window() {
        let mut log = SimLog::new();
        assert_eq!(log.append(10, Origin::Ticker, envelope(1, Event::Tick)), Appended::Stored(Seq(1)));
        assert_eq!(log.append(20, Origin::Ticker, envelope(1, Event::Tick)), Appended::Duplicate(Seq(1)));
        assert_eq!(log.append(20, Origin::Ticker, envelope(2, Event::Tick)), Appended::Stored(Seq(2)));
        assert_eq!(log.entry(Seq(2)).time_ms, EPOCH_MS + 20);
        // Past the window the same id is news again, as with JetStream.
        assert_eq!(log.append(10 + DEDUP_WINDOW_MS, Origin::Ticker, envelope(1, Event::Tick)), Appended::Stored(Seq(3)));
    }

    #[test]
    fn the_fence_admits_only_the_expected_successor() {
        let mut log = SimLog::new();
        log.append(0, Origin::Ticker, envelope(1, Event::Tick));
        assert_eq!(log.append_fenced(1, Origin::Projector, envelope(2, batch()), Some(Seq(0))), Appended::Stored(Seq(2)));
        assert_eq!(
            log.append_fenced(2, Origin::Projector, envelope(3, batch()), Some(Seq(0))),
            Appended::Fenced { expected: Seq(0), actual: Seq(2) }
        );
        assert_eq!(log.append_fenced(2, Origin::Projector, envelope(3, batch()), Some(Seq(2))), Appended::Stored(Seq(3)));
        assert_eq!(log.last_orders_seq_through(Seq(2)), Seq(2));
        assert_eq!(log.last_orders_seq_through(Seq(1)), Seq(0));
    }
}
