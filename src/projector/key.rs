//! The projector's signing key: what makes an order batch the projector's.
//!
//! Every batch the projector publishes is sealed with an ed25519 key (see
//! `wire::encode_sealed`), and the fold accepts a batch only when its seal
//! verifies under a key an operator registered on the log
//! (`ProjectorKeyRegistered`). So a client that can publish on the orders
//! subject anyway (a broker left open, a leaked projector password) still cannot
//! make the grid act: replay from the log alone tells a forged batch from a real one.
//!
//! Every message of deliveries to an engine is sealed with the same key
//! (`wire::delivery::delivery_messages`), and an engine runs only what a key
//! registered on the log sealed: it reads the registrations itself.
//!
//! The key's 32-byte seed is kept in the state directory ([`KEY_FILE`], hex,
//! readable by its owner only), made on first start, or given by the operator
//! (`--key-file`). A standby has its own directory, so its own key: register each.

use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;

use crate::core::event::Envelope;
use crate::wire::delivery::{Delivery, DeliveryMessage};
use crate::replace_file::{Durability, replace_file_with};

/// The file in a state directory that holds the projector's key seed.
pub const KEY_FILE: &str = "projector-key";

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: not a projector key: {problem} (expected 64 hex digits, the key's seed)", path.display())]
    Malformed { path: PathBuf, problem: String },
    #[error("no random source for a new key: {0}")]
    Random(String),
}

/// The projector's ed25519 key.
#[derive(Clone)]
pub struct ProjectorKey {
    signing: SigningKey,
}

impl std::fmt::Debug for ProjectorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProjectorKey({})", self.public_hex())
    }
}

impl ProjectorKey {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        ProjectorKey { signing: SigningKey::from_bytes(&seed) }
    }

    /// The key in `path` (64 hex digits of seed).
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io { path: path.to_path_buf(), source })?;
        let malformed = |problem: String| KeyError::Malformed { path: path.to_path_buf(), problem };
        let bytes = hex::decode(text.trim()).map_err(|e| malformed(e.to_string()))?;
        let seed: [u8; 32] = bytes.try_into().map_err(|bytes: Vec<u8>| malformed(format!("{} bytes", bytes.len())))?;
        Ok(Self::from_seed(seed))
    }

    /// The key of a state directory: read from [`KEY_FILE`], or made and written
    /// there (whole, then renamed into place, owner-only) on first use.
    pub fn load_or_create(state_dir: &Path) -> Result<Self, KeyError> {
        let path = state_dir.join(KEY_FILE);
        match Self::read(&path) {
            Ok(key) => return Ok(key),
            Err(KeyError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(other) => return Err(other),
        }
        let io = |source| KeyError::Io { path: path.clone(), source };
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
        std::fs::create_dir_all(state_dir).map_err(io)?;
        let text = format!("{}\n", hex::encode(seed));
        replace_file_with(&path, text.as_bytes(), Durability::Synced, owner_only_file).map_err(io)?;
        Ok(Self::from_seed(seed))
    }

    pub fn public(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    pub fn public_hex(&self) -> String {
        hex::encode(self.public())
    }

    /// The envelope's bytes, sealed: what the projector publishes.
    pub fn seal(&self, envelope: &Envelope) -> Vec<u8> {
        crate::wire::encode_sealed(envelope, &self.signing)
    }

    /// The messages that carry `deliveries` to their engines, each sealed.
    pub fn delivery_messages(&self, deliveries: &[Delivery]) -> Vec<DeliveryMessage> {
        crate::wire::delivery::delivery_messages(deliveries, &self.signing)
    }

    /// [`ProjectorKey::delivery_messages`], joining at most `joined_bytes_max`
    /// bytes of deliveries into one message (a broker that takes less).
    pub fn delivery_messages_within(&self, deliveries: &[Delivery], joined_bytes_max: usize) -> Vec<DeliveryMessage> {
        crate::wire::delivery::delivery_messages_within(deliveries, joined_bytes_max, &self.signing)
    }
}

fn owner_only_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)
}

/// The text form of a public key on the command line: 64 hex digits.
pub fn parse_public_key(text: &str) -> Result<[u8; 32], String> {
    let bytes = hex::decode(text.trim()).map_err(|e| format!("{text:?} is not hex: {e}"))?;
    let key: [u8; 32] = bytes.try_into().map_err(|bytes: Vec<u8>| format!("a public key is 32 bytes, this is {}", bytes.len()))?;
    ed25519_dalek::VerifyingKey::from_bytes(&key).map_err(|_| format!("{text} is not an ed25519 public key"))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_directory_keeps_its_key_and_only_its_owner_reads_it() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let first = ProjectorKey::load_or_create(dir.path()).unwrap();
        let again = ProjectorKey::load_or_create(dir.path()).unwrap();
        assert_eq!(first.public(), again.public());
        let mode = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let other = tempfile::tempdir().unwrap();
        assert_ne!(ProjectorKey::load_or_create(other.path()).unwrap().public(), first.public());
    }

    #[test]
    fn a_malformed_key_file_is_refused_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(KEY_FILE), "not hex\n").unwrap();
        let error = ProjectorKey::load_or_create(dir.path()).unwrap_err().to_string();
        assert!(error.contains(KEY_FILE) && error.contains("not a projector key"), "{error}");
        assert!(parse_public_key("abcd").is_err());
        let key = ProjectorKey::from_seed([1; 32]);
        assert_eq!(parse_public_key(&key.public_hex()), Ok(key.public()));
    }
}
