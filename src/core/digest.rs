//! The running digest auditors compare: a hash chain over every entry.
//!
//! `chain[n] = blake3(chain[n-1] || seq || time_ms || canonical bytes of entry n)`,
//! with `chain[0]` all zeros. Two replays of the same log reach the same chain,
//! whatever decided the orders in it; any change to any entry changes every later link.
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
    pub fn chain(&self, seq: u64, time_ms: u64, canonical: &[u8]) -> Digest {
        // Most entries are a few hundred bytes: hashed in one call from one buffer
        // on the stack, which blake3 compresses block by block without copying
        // into its own buffer. Larger ones (order batches) go through the Hasher.
        // Either way the bytes hashed are the same.
        const PREFIX: usize = 32 + 8 + 8;
        const INLINE_MAX: usize = 512 - PREFIX;
        if canonical.len() <= INLINE_MAX {
            let mut input = [0u8; PREFIX + INLINE_MAX];
            input[..32].copy_from_slice(&self.0);
            input[32..40].copy_from_slice(&seq.to_le_bytes());
            input[40..48].copy_from_slice(&time_ms.to_le_bytes());
            input[PREFIX..PREFIX + canonical.len()].copy_from_slice(canonical);
            return Digest(*blake3::hash(&input[..PREFIX + canonical.len()]).as_bytes());
        }
        let mut hasher = blake3::Hasher::new();
        hasher.update(&self.0);
        hasher.update(&seq.to_le_bytes());
        hasher.update(&time_ms.to_le_bytes());
        hasher.update(canonical);
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
        let link = start.chain(1, 1000, b"event");
        assert_ne!(link, start.chain(2, 1000, b"event"));
        assert_ne!(link, start.chain(1, 1001, b"event"));
        assert_ne!(link, start.chain(1, 1000, b"evenT"));
        assert_ne!(link, link.chain(1, 1000, b"event"));
        assert_eq!(Digest::from_hex(&link.to_hex()), Some(link));
    }

    /// The one-call path for small entries hashes exactly what the Hasher path does.
    #[test]
    fn a_link_is_the_hash_of_previous_seq_time_and_bytes_whatever_the_length() {
        let previous = Digest::of_bytes(b"previous");
        for len in [0, 1, 15, 16, 63, 64, 200, 463, 464, 465, 1023, 1024, 1025, 5000] {
            let canonical: Vec<u8> = (0..len).map(|n| (n * 7 % 251) as u8).collect();
            let mut hasher = blake3::Hasher::new();
            hasher.update(&previous.0);
            hasher.update(&9u64.to_le_bytes());
            hasher.update(&1234u64.to_le_bytes());
            hasher.update(&canonical);
            assert_eq!(previous.chain(9, 1234, &canonical).0, *hasher.finalize().as_bytes(), "length {len}");
        }
    }
}
