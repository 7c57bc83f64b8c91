//! The running digest auditors compare: a hash chain over every entry.
//!
//! `chain[n] = blake3_keyed(key = chain[n-1], seq || time_ms || len(subject) || subject || stored bytes of entry n)`,
//! integers little-endian (seq and time 8 bytes, the subject's length 4), with
//! `chain[0]` all zeros. The bytes are the payload exactly as the log stores it,
//! never a re-encoding, so the chain is a function of the log alone: any version
//! of gridfold replays a log to the same chain, whatever decided the orders in
//! it and whatever schema it decodes with. Any change to any entry changes
//! every later link.
//! Keying each link with the previous one (blake3's keyed mode, a PRF) instead of
//! hashing it as 32 more bytes of input keeps a typical entry (~100 bytes) to two
//! compressions instead of three: the chain is most of the fold's cost, and replay
//! speed is fold speed.
//! The state digest ([`crate::core::state::State::state_digest`]) is a separate,
//! on-demand hash of the whole folded state.

use std::fmt;

#[derive(Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
    pub fn from_hex(text: &str) -> Option<Self> {
        let bytes = hex::decode(text.trim()).ok()?;
        Some(Digest(bytes.try_into().ok()?))
    }

    /// The next link of the chain.
    pub fn chain(&self, seq: u64, time_ms: u64, subject: &str, stored: &[u8]) -> Digest {
        // Most entries are about a hundred bytes: hashed in one call from one buffer
        // on the stack, which blake3 compresses block by block without copying
        // into its own buffer. Larger ones (order batches) go through the Hasher.
        // Either way the bytes hashed are the same.
        const BUFFER: usize = 320;
        let prefix = 8 + 8 + 4 + subject.len();
        if prefix + stored.len() <= BUFFER {
            let mut input = [0u8; BUFFER];
            input[..8].copy_from_slice(&seq.to_le_bytes());
            input[8..16].copy_from_slice(&time_ms.to_le_bytes());
            input[16..20].copy_from_slice(&(subject.len() as u32).to_le_bytes());
            input[20..prefix].copy_from_slice(subject.as_bytes());
            input[prefix..prefix + stored.len()].copy_from_slice(stored);
            return Digest(*blake3::keyed_hash(&self.0, &input[..prefix + stored.len()]).as_bytes());
        }
        let mut hasher = blake3::Hasher::new_keyed(&self.0);
        hasher.update(&seq.to_le_bytes());
        hasher.update(&time_ms.to_le_bytes());
        hasher.update(&(subject.len() as u32).to_le_bytes());
        hasher.update(subject.as_bytes());
        hasher.update(stored);
        Digest(*hasher.finalize().as_bytes())
    }

    pub fn of_bytes(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}
impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", &self.to_hex()[..16])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_input_of_a_link_changes_it() {
        let start = Digest::default();
        let link = start.chain(1, 1000, "gridfold.ev.tick", b"event");
        assert_ne!(link, start.chain(2, 1000, "gridfold.ev.tick", b"event"));
        assert_ne!(link, start.chain(1, 1001, "gridfold.ev.tick", b"event"));
        assert_ne!(link, start.chain(1, 1000, "gridfold.ev.tick", b"evenT"));
        assert_ne!(link, start.chain(1, 1000, "gridfold.ev.ticks", b"event"));
        // The subject's length is hashed too: moving a byte between the subject
        // and the payload changes the link.
        assert_ne!(link, start.chain(1, 1000, "gridfold.ev.tic", b"kevent"));
        assert_ne!(link, link.chain(1, 1000, "gridfold.ev.tick", b"event"));
        assert_eq!(Digest::from_hex(&link.to_hex()), Some(link));
    }

    /// The one-call path for small entries hashes exactly what the keyed Hasher path does.
    #[test]
    fn a_link_is_the_hash_of_previous_seq_time_subject_and_bytes_whatever_the_length() {
        let previous = Digest::of_bytes(b"previous");
        let subject = "gridfold.ev.engine.e1.completed";
        for len in [0, 1, 15, 16, 63, 64, 200, 239, 240, 241, 269, 270, 271, 463, 464, 465, 1023, 1024, 1025, 5000] {
            let stored: Vec<u8> = (0..len).map(|n| (n * 7 % 251) as u8).collect();
            let mut hasher = blake3::Hasher::new_keyed(&previous.0);
            hasher.update(&9u64.to_le_bytes());
            hasher.update(&1234u64.to_le_bytes());
            hasher.update(&(subject.len() as u32).to_le_bytes());
            hasher.update(subject.as_bytes());
            hasher.update(&stored);
            assert_eq!(previous.chain(9, 1234, subject, &stored).0, *hasher.finalize().as_bytes(), "length {len}");
        }
    }
}
