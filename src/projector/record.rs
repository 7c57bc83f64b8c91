//! Re-recording a history: feed its inputs (every entry but the projector's
//! orders) through the projector machine again, as a projector that is never
//! late would, and write down the log that results.
//!
//! This is how the histories under `replay/` are made and kept honest: a person
//! writes the inputs, the recorder adds the orders, and the golden test fails
//! when a change to the scheduling code would record different orders.

use crate::core::event::{Entry, Envelope, Event, OrderBatch};
use crate::core::ids::Seq;
use crate::projector::machine::Machine;
use crate::wire::{self, ORDERS_SUBJECT};

/// One entry of a recorded log, as the broker would hold it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedEntry {
    pub seq: Seq,
    pub time_ms: u64,
    pub subject: String,
    pub bytes: Vec<u8>,
}

impl RecordedEntry {
    pub fn to_entry(&self) -> Entry {
        wire::entry_from_log(self.seq, self.time_ms, &self.subject, &self.bytes)
    }
    pub fn to_history_line(&self) -> String {
        wire::history::write_history_line(self.seq, self.time_ms, &self.subject, &self.bytes)
    }
}

/// The envelope a batch is published in. Its id is derived from its content, so a
/// projector that retries a publish after a restart is deduplicated by the broker.
pub fn batch_envelope(batch: OrderBatch) -> Envelope {
    let mut envelope = Envelope { id: [0; 16], source: "gridfold-projector".into(), event: Event::OrderBatch(batch) };
    let digest = blake3::hash(&wire::encode(&envelope));
    envelope.id.copy_from_slice(&digest.as_bytes()[..16]);
    envelope
}

/// The key the recorder seals batches with: fixed, so a history re-records to the
/// same bytes. Recorded histories register it (an operator's entry) first.
pub fn recorder_key() -> crate::projector::key::ProjectorKey {
    crate::projector::key::ProjectorKey::from_seed(*blake3::hash(b"gridfold-replay-recorder").as_bytes())
}

/// Most batches the recorder lets the machine issue after one input before it
/// concludes something loops; a real run needs a handful.
const BATCHES_PER_INPUT_MAX: usize = 64;

/// Re-records `inputs` (time, subject, payload bytes), renumbering from 1: after
/// each input the machine decides until it has nothing more to say, and each
/// batch is appended at the input's log time and read back at once.
pub fn rerecord<'a>(inputs: impl IntoIterator<Item = (u64, &'a str, Vec<u8>)>) -> Vec<RecordedEntry> {
    let mut machine = Machine::new();
    let key = recorder_key();
    let mut log: Vec<RecordedEntry> = Vec::new();
    for (time_ms, subject, bytes) in inputs {
        let input = RecordedEntry { seq: Seq(log.len() as u64 + 1), time_ms, subject: subject.to_string(), bytes };
        machine.handle_entry(&input.to_entry());
        log.push(input);
        for round in 0.. {
            assert!(round < BATCHES_PER_INPUT_MAX, "the projector kept deciding after one input");
            let Some(batch) = machine.poll_batch() else { break };
            let bytes = key.seal(&batch_envelope(batch));
            let recorded = RecordedEntry { seq: Seq(log.len() as u64 + 1), time_ms, subject: ORDERS_SUBJECT.to_string(), bytes };
            machine.handle_entry(&recorded.to_entry());
            log.push(recorded);
        }
    }
    log
}
