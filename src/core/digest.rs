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
}
