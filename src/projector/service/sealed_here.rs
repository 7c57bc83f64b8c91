//! The batches this projector sealed and has not read back yet, byte for byte.
//!
//! Reading its own batch back, a projector need not check the batch's ed25519
//! signature: it made it, over these bytes, a moment ago. At ordinary load
//! that check was about a tenth of the projector's CPU per real task (one
//! verification per batch, about 50 µs on the development machine). Only
//! bytes equal to what was published, every one of them, are vouched for: a
//! forged entry that copies a signature onto other bytes is checked, and
//! refused, as before. Replay, which has no such memory, checks every seal
//! and folds to the same state.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::core::event::Entry;
use crate::projector::machine::PENDING_BATCHES_MAX;

/// Most sealed batches remembered; past this the oldest is forgotten (its
/// seal is then checked when it is read back, which costs only time).
pub(super) const SEALED_HERE_MAX: usize = PENDING_BATCHES_MAX;

#[derive(Debug, Default)]
pub(super) struct SealedHere {
    published: VecDeque<Bytes>,
}

impl SealedHere {
    /// Remembers the stored bytes of a batch about to be published.
    pub(super) fn remember(&mut self, stored: Bytes) {
        if self.published.len() == SEALED_HERE_MAX {
            self.published.pop_front();
        }
        self.published.push_back(stored);
    }

    /// Marks `entry`'s seal as this projector's own when its stored bytes are
    /// exactly a batch it published, which is then forgotten, with every
    /// batch published before it (read back in order, or never stored).
    pub(super) fn vouch(&mut self, entry: &mut Entry) {
        let Some(seal) = entry.seal.as_mut() else { return };
        let Some(at) = self.published.iter().position(|stored| stored[..] == entry.stored[..]) else { return };
        self.published.drain(..=at);
        seal.sealed_here = true;
    }

}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::Seq;

    fn sealed(bytes: &[u8]) -> Vec<u8> {
        let key = ed25519_dalek::SigningKey::from_bytes(&[9; 32]);
        let envelope = crate::projector::record::batch_envelope(crate::core::event::OrderBatch {
            based_on_seq: Seq(u64::from(bytes[0])),
            algorithm: "sge-plain".into(),
            algorithm_version: 1,
            orders: vec![],
        });
        crate::wire::encode_sealed(&envelope, &key)
    }

    fn entry_of(stored: &[u8]) -> Entry {
        crate::wire::entry_from_log(Seq(1), 0, crate::wire::ORDERS_SUBJECT, stored)
    }

    #[test]
    fn only_the_exact_bytes_published_are_vouched_for_and_each_once() {
        let (first, second) = (sealed(&[1]), sealed(&[2]));
        let mut here = SealedHere::default();
        here.remember(Bytes::from(first.clone()));
        here.remember(Bytes::from(second.clone()));

        // The second batch's seal kept on other bytes (its algorithm's name
        // changed): a forgery, not vouched for.
        let mut forged = second.clone();
        let name_at = forged.windows(9).position(|window| window == b"sge-plain").expect("the algorithm's name");
        forged[name_at + 8] = b'N';
        let mut entry = entry_of(&forged);
        here.vouch(&mut entry);
        assert!(!entry.seal.expect("a seal").sealed_here, "a copied signature on other bytes is checked");

        let mut entry = entry_of(&second);
        here.vouch(&mut entry);
        assert!(entry.seal.expect("a seal").sealed_here, "the very bytes published");
        // Read back after the second, the first was never stored: forgotten.
        let mut entry = entry_of(&first);
        here.vouch(&mut entry);
        assert!(!entry.seal.expect("a seal").sealed_here, "forgotten once a later batch was read back");
        let mut entry = entry_of(&second);
        here.vouch(&mut entry);
        assert!(!entry.seal.expect("a seal").sealed_here, "vouched for once");
    }

    #[test]
    fn at_most_sealed_here_max_are_remembered() {
        let mut here = SealedHere::default();
        let batches: Vec<Vec<u8>> = (0..=SEALED_HERE_MAX as u8).map(|n| sealed(&[n])).collect();
        for batch in &batches {
            here.remember(Bytes::from(batch.clone()));
        }
        assert_eq!(here.published.len(), SEALED_HERE_MAX);
        let mut oldest = entry_of(&batches[0]);
        here.vouch(&mut oldest);
        assert!(!oldest.seal.expect("a seal").sealed_here, "the oldest was forgotten");
        let mut newest = entry_of(batches.last().expect("batches"));
        here.vouch(&mut newest);
        assert!(newest.seal.expect("a seal").sealed_here, "the newest is remembered");
    }
}
