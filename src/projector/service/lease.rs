//! Who may write: the leader lease.
//!
//! Exactly one projector should publish orders; the others stand by (they fold,
//! answer queries and never publish). A [`Lease`] says which: the projector asks it
//! every [`Lease::renew_interval`] and is leader while the answer is yes and the last
//! yes is younger than [`Lease::valid_for`].
//!
//! - [`SoleWriter`]: the embedded log, which sled locks to one process: always held.
//! - [`KvLease`]: a JetStream key-value bucket (`GRIDFOLD_LEADER`, key `projector`)
//!   whose entries expire `ttl` after they were written (the bucket's `max_age`).
//!   The holder's value is its projector id. A standby `create`s the key, which
//!   succeeds only when it is absent (expired or released); the leader renews with a
//!   compare-and-set `update` on the revision it last wrote, which fails once anyone
//!   else has written. Expiry is the server's clock; the holder's own view of its
//!   lease ends earlier, `ttl - renew_interval` after it *sent* its last successful
//!   renewal, so it stops publishing before a standby can take over.
//!
//! The lease is liveness, not safety: it keeps two projectors from competing. What
//! guarantees one writer is the fence on every publish (the expected last sequence of
//! the orders subject): a stale leader that has not noticed yet is refused by the
//! broker. The projector id is kept in the state directory, so a projector restarted
//! on its own directory (sled allows one process there) takes its lease back at once
//! instead of waiting for it to expire.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::kv::{self, CreateErrorKind, Operation, UpdateErrorKind};
use async_nats::jetstream::stream::StorageType;
use async_nats::jetstream::{self as js};

/// The bucket of the leader lease.
pub const LEASE_BUCKET: &str = "GRIDFOLD_LEADER";
/// The key of the projector's lease in it.
pub const LEASE_KEY: &str = "projector";

/// The file in a state directory that holds its projector id.
pub const PROJECTOR_ID_FILE: &str = "projector-id";

/// The projector id of a state directory: a UUID made the first time and kept in
/// [`PROJECTOR_ID_FILE`] (written whole, then renamed into place).
pub fn projector_id(state_dir: &Path) -> std::io::Result<String> {
    let path = state_dir.join(PROJECTOR_ID_FILE);
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(err),
    }
    std::fs::create_dir_all(state_dir)?;
    let id = uuid::Uuid::new_v4().to_string();
    let partial = state_dir.join(format!("{PROJECTOR_ID_FILE}.partial"));
    std::fs::write(&partial, format!("{id}\n"))?;
    std::fs::rename(&partial, &path)?;
    Ok(id)
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease store cannot be reached or answered with an error.
    #[error("the leader lease at {location} is unavailable: {detail}")]
    Unavailable { location: String, detail: String },
    /// The lease store exists but cannot serve (bad configuration).
    #[error("the leader lease at {location} is misconfigured: {detail}")]
    Misconfigured { location: String, detail: String },
}

/// The right to publish orders. See the module docs.
pub trait Lease: Send + 'static {
    /// Where the lease lives, for messages.
    fn location(&self) -> String;

    /// Takes the lease if it is free, renews it if it is ours. `Ok(true)`: this
    /// projector holds it now; `Ok(false)`: another does.
    fn acquire_or_renew(&mut self) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Gives the lease up, if held, so that a standby takes over at once (clean shutdown).
    fn release(&mut self) -> impl Future<Output = ()> + Send;

    /// How often to call [`Lease::acquire_or_renew`].
    fn renew_interval(&self) -> Duration;

    /// How long after sending a successful renewal the lease is surely still ours;
    /// `None`: until released.
    fn valid_for(&self) -> Option<Duration>;
}

/// The lease of a log that only one process can open (the embedded log): always held.
#[derive(Debug, Clone, Copy, Default)]
pub struct SoleWriter;

impl Lease for SoleWriter {
    fn location(&self) -> String {
        "sole writer".to_string()
    }
    async fn acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        Ok(true)
    }
    async fn release(&mut self) {}
    fn renew_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn valid_for(&self) -> Option<Duration> {
        None
    }
}

#[derive(Debug, Clone)]
pub struct KvLeaseConfig {
    pub bucket: String,
    pub key: String,
    /// How long the lease outlives its holder's last renewal: the bucket's `max_age`
    /// when this creates the bucket; an existing bucket's own `max_age` wins.
    pub ttl: Duration,
    /// How often the holder renews and a standby tries to take it; well under `ttl`.
    pub renew_interval: Duration,
    /// Replicas of the bucket's stream.
    pub replicas: usize,
}

impl Default for KvLeaseConfig {
    fn default() -> Self {
        KvLeaseConfig {
            bucket: LEASE_BUCKET.to_string(),
            key: LEASE_KEY.to_string(),
            ttl: Duration::from_secs(5),
            renew_interval: Duration::from_secs(1),
            replicas: 1,
        }
    }
}

/// The leader lease in a JetStream key-value bucket (see the module docs).
pub struct KvLease {
    store: kv::Store,
    location: String,
    config: KvLeaseConfig,
    holder: String,
    /// The revision of our last write, while we believe we hold the lease.
    revision: Option<u64>,
}

impl std::fmt::Debug for KvLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvLease")
            .field("location", &self.location)
            .field("holder", &self.holder)
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

impl KvLease {
    /// Opens the lease bucket (creating it if missing) for the projector named `holder`.
    /// An existing bucket is used as it is, whatever its `max_age`.
    pub async fn open(
        context: &js::Context,
        url: &str,
        config: KvLeaseConfig,
        holder: String,
    ) -> Result<KvLease, LeaseError> {
        assert!(
            config.renew_interval < config.ttl,
            "the lease must be renewed well within its ttl"
        );
        let location = format!("{url} bucket {} key {}", config.bucket, config.key);
        let unavailable = |detail: String| LeaseError::Unavailable {
            location: location.clone(),
            detail,
        };
        let store = match context.get_key_value(&config.bucket).await {
            Ok(store) => store,
            Err(_) => {
                let bucket = kv::Config {
                    bucket: config.bucket.clone(),
                    description: "gridfold: which projector may publish orders".to_string(),
                    history: 1,
                    max_age: config.ttl,
                    storage: StorageType::File,
                    num_replicas: config.replicas,
                    ..Default::default()
                };
                match context.create_key_value(bucket).await {
                    Ok(store) => store,
                    // Another projector may have created it meanwhile.
                    Err(create_err) => {
                        context.get_key_value(&config.bucket).await.map_err(|_| {
                            unavailable(format!("cannot create the lease bucket: {create_err}"))
                        })?
                    }
                }
            }
        };
        // The bucket's max age is the lease's real ttl, whoever created the bucket.
        let bucket_ttl = store
            .status()
            .await
            .map_err(|err| unavailable(format!("cannot read the lease bucket: {err}")))?
            .max_age();
        if bucket_ttl <= config.renew_interval {
            return Err(LeaseError::Misconfigured {
                location,
                detail: format!(
                    "the bucket's entries expire after {bucket_ttl:?} (0: never), which must be longer than \
                     the renewal interval {:?}: a stopped leader's lease would never (or always) expire",
                    config.renew_interval
                ),
            });
        }
        if bucket_ttl != config.ttl {
            tracing::warn!(
                lease = %location,
                "the lease bucket's max age is {bucket_ttl:?}, not the configured {:?}: using the bucket's",
                config.ttl
            );
        }
        let config = KvLeaseConfig {
            ttl: bucket_ttl,
            ..config
        };
        Ok(KvLease {
            store,
            location,
            config,
            holder,
            revision: None,
        })
    }

    /// The projector id this lease is held under.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    fn unavailable(&self, detail: String) -> LeaseError {
        LeaseError::Unavailable {
            location: self.location.clone(),
            detail,
        }
    }

    /// After a refused write: is the lease ours all the same (our earlier write whose
    /// answer was lost, or our predecessor's on this state directory)? Adopts it if so.
    async fn adopt_if_ours(&mut self) -> Result<bool, LeaseError> {
        let entry = self
            .store
            .entry(&self.config.key)
            .await
            .map_err(|err| self.unavailable(format!("cannot read the lease: {err}")))?;
        match entry {
            Some(entry)
                if entry.operation == Operation::Put
                    && entry.value.as_ref() == self.holder.as_bytes() =>
            {
                self.revision = Some(entry.revision);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

impl Lease for KvLease {
    fn location(&self) -> String {
        self.location.clone()
    }

    async fn acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        let value = bytes::Bytes::from(self.holder.clone().into_bytes());
        match self.revision {
            Some(revision) => match self.store.update(&self.config.key, value, revision).await {
                Ok(revision) => {
                    self.revision = Some(revision);
                    Ok(true)
                }
                Err(err) if err.kind() == UpdateErrorKind::WrongLastRevision => {
                    self.revision = None;
                    self.adopt_if_ours().await
                }
                Err(err) => Err(self.unavailable(format!("cannot renew: {err}"))),
            },
            None => match self.store.create(&self.config.key, value).await {
                Ok(revision) => {
                    self.revision = Some(revision);
                    Ok(true)
                }
                Err(err) if err.kind() == CreateErrorKind::AlreadyExists => {
                    self.adopt_if_ours().await
                }
                Err(err) => Err(self.unavailable(format!("cannot take the lease: {err}"))),
            },
        }
    }

    async fn release(&mut self) {
        if let Some(revision) = self.revision.take()
            && let Err(err) = self
                .store
                .delete_expect_revision(&self.config.key, Some(revision))
                .await
        {
            tracing::warn!(lease = %self.location, "releasing the lease failed (it expires by itself): {err}");
        }
    }

    fn renew_interval(&self) -> Duration {
        self.config.renew_interval
    }

    fn valid_for(&self) -> Option<Duration> {
        Some(self.config.ttl.saturating_sub(self.config.renew_interval))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_directory_keeps_its_projector_id() {
        let dir = tempfile::tempdir().unwrap();
        let state_dir = dir.path().join("state");
        let id = projector_id(&state_dir).unwrap();
        assert_eq!(projector_id(&state_dir).unwrap(), id);
        assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
        assert_ne!(projector_id(&dir.path().join("other")).unwrap(), id);
    }
}
