//! Who may write: the leader lease.
//!
//! Exactly one projector should publish orders; the others stand by (they fold,
//! answer queries and never publish). A [`Lease`] says which: the projector asks it
//! every [`Lease::renew_interval`] and is leader from the moment an answer is yes
//! until [`Lease::valid_for`] after it *sent* the request that got that yes (or until
//! an answer is no).
//!
//! - [`SoleWriter`]: the embedded log, which sled locks to one process: always held.
//! - [`KvLease`]: a JetStream key-value bucket (`GRIDFOLD_LEADER`, key `projector`)
//!   whose entries expire `ttl` after they were written (the bucket's `max_age`).
//!
//! # What the KV lease guarantees
//!
//! **Never two holders at once**, where a holder is a [`KvLease`] between a yes and
//! `valid_for = ttl - renew_interval` after it sent the request. This holds because:
//!
//! 1. *Every yes is a compare-and-set write that succeeded in that very call*: a
//!    `create` (an `update` expecting revision 0: the key is absent, or expecting the
//!    revision of a delete marker: released) or an `update` expecting the revision
//!    this lease last wrote (a renewal) or just read (a take-back, below). A lease
//!    never answers yes on what it read alone. Whoever writes in between makes the
//!    write fail, and the answer is no.
//! 2. *Two holders' writes cannot interleave*: a renewal expects our own last
//!    revision, so it fails once anyone else has written; a create succeeds only once
//!    the key has expired, `ttl` after the last write (server time), which is later
//!    than `ttl - renew_interval` after that write was sent. So a creator's term
//!    starts after the previous holder's has ended, with `renew_interval` to spare
//!    for the two clocks' rates (expiry is the server's clock, the holder's view its
//!    monotonic clock; a server wall clock stepped forward by more than that breaks it).
//! 3. *A take-back only from the dead.* The value is `<projector id> <incarnation>`,
//!    the incarnation a fresh UUID per [`KvLease`]. The current value lets a lease
//!    write over it (an `update` on the revision read, never a plain put) in two cases
//!    only: it is this very lease's (a write whose answer was lost), or it is a
//!    previous incarnation of a *claimed* projector id ([`ProjectorIdClaim`]: the
//!    state directory's lock, held by one live process at a time, so that incarnation
//!    is dead) and this lease has not held yet. So a projector restarted on its own
//!    state directory takes its lease back at once, instead of waiting up to `ttl`,
//!    and a standby that created the key after expiry in between makes that write
//!    fail: the restarted one stands by. A lease opened under a bare name
//!    ([`KvLease::open`]) never takes over another incarnation's value: two processes
//!    under one name wait for expiry like any two projectors.
//!
//! Before this, a restarted projector that found its id in the key treated that as
//! held without writing: the key still expired `ttl` after its dead predecessor's
//! last renewal, a standby created it then, and the two led together until the
//! restarted one's next renewal failed (0.35 s seen).
//!
//! # What it does not do
//!
//! The lease is what makes one projector *act* as leader; it is not what makes the log
//! safe. That is the fence on every publish (the expected last sequence of the orders
//! subject): a holder's publish sent just before its term ends, or a projector paused
//! past its term, is refused by the broker. The lease does not survive copying a state
//! directory to a second host (two live processes with one claimed id: the second may
//! take the first's lease over once, before its own first write, and both act as leader
//! until the first's next renewal fails), nor a server whose clock jumps.

use std::fs::{File, TryLockError};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation, UpdateErrorKind};
use async_nats::jetstream::stream::StorageType;
use async_nats::jetstream::{self as js};

/// The bucket of the leader lease.
pub use crate::log::jetstream::LEASE_BUCKET;
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
    crate::replace_file::replace_file(&path, format!("{id}\n").as_bytes(), crate::replace_file::Durability::Synced)?;
    Ok(id)
}

/// The file in a state directory that a running projector holds locked.
pub const PROJECTOR_LOCK_FILE: &str = "projector.lock";

/// A state directory's projector id, claimed: an exclusive lock on its
/// [`PROJECTOR_LOCK_FILE`] is held for as long as this value lives (the operating
/// system drops it when the process dies, `kill -9` included). So no other live
/// process, nor another claim in this one, has the same id, and a lease value under
/// this id from another incarnation is a dead one's: [`KvLease::open_claimed`] may take
/// it back at once (see the module docs).
#[derive(Debug)]
pub struct ProjectorIdClaim {
    id: String,
    /// Held for the lock; never read.
    _lock: File,
}

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("the state directory {} is in use by another projector (its {PROJECTOR_LOCK_FILE} is locked)", dir.display())]
    InUse { dir: PathBuf },
    #[error("cannot claim the state directory {}: {source}", dir.display())]
    Io {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ProjectorIdClaim {
    /// Locks `state_dir` (creating it if missing) and reads or makes its projector id
    /// ([`projector_id`]). Fails at once, without waiting, if it is locked already.
    pub fn claim(state_dir: &Path) -> Result<ProjectorIdClaim, ClaimError> {
        let io = |source| ClaimError::Io {
            dir: state_dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(state_dir).map_err(io)?;
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(state_dir.join(PROJECTOR_LOCK_FILE))
            .map_err(io)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(ClaimError::InUse {
                    dir: state_dir.to_path_buf(),
                });
            }
            Err(TryLockError::Error(err)) => return Err(io(err)),
        }
        let id = projector_id(state_dir).map_err(io)?;
        Ok(ProjectorIdClaim { id, _lock: lock })
    }

    /// The projector id.
    pub fn id(&self) -> &str {
        &self.id
    }
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
    /// projector holds it now (from this answer on); `Ok(false)`: another does.
    fn acquire_or_renew(&mut self) -> impl Future<Output = Result<bool, LeaseError>> + Send;

    /// Gives the lease up, if held, so that a standby takes over at once (clean shutdown).
    fn release(&mut self) -> impl Future<Output = ()> + Send;

    /// How often to call [`Lease::acquire_or_renew`].
    fn renew_interval(&self) -> Duration;

    /// How long after the start of a call of [`Lease::acquire_or_renew`] that answered
    /// yes the lease is surely still ours (the call's write was sent no earlier);
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
    /// This lease's value: `<holder> <incarnation>`.
    value: bytes::Bytes,
    /// Present when `holder` is a claimed projector id: then a value under it from
    /// another incarnation is a dead predecessor's.
    claim: Option<ProjectorIdClaim>,
    /// The revision of our last write, while we believe we hold the lease.
    revision: Option<u64>,
    /// This lease has held at least once (after which a predecessor's value cannot
    /// appear any more: it is never taken over then).
    held_once: bool,
}

impl std::fmt::Debug for KvLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvLease")
            .field("location", &self.location)
            .field("value", &self.value)
            .field("claimed", &self.claim.is_some())
            .field("revision", &self.revision)
            .finish_non_exhaustive()
    }
}

/// Whose a value of the lease key is, to this lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    /// Written by this very lease (its answer lost, or we have not seen it yet).
    Ours,
    /// Written by an earlier incarnation of this lease's claimed projector id: a dead one.
    DeadPredecessor,
    /// Anyone else's, or our name's under a bare (unclaimed) name.
    Theirs,
}

/// Whose `value` is to the lease whose own value is `ours` under `holder`;
/// `predecessors_dead`: another incarnation under `holder` is surely dead.
fn whose(value: &[u8], ours: &[u8], holder: &str, predecessors_dead: bool) -> Whose {
    if value == ours {
        return Whose::Ours;
    }
    // `<holder> <incarnation>`; a value without an incarnation is an older version's,
    // all holder.
    let value_holder = match value.iter().rposition(|&byte| byte == b' ') {
        Some(space) => &value[..space],
        None => value,
    };
    if predecessors_dead && value_holder == holder.as_bytes() {
        Whose::DeadPredecessor
    } else {
        Whose::Theirs
    }
}

impl KvLease {
    /// Opens the lease bucket (creating it if missing) for a projector named `holder`.
    /// A bare name proves nothing about who else uses it, so this lease never takes
    /// over a value it did not write itself: see [`KvLease::open_claimed`].
    /// An existing bucket is used as it is, whatever its `max_age`.
    pub async fn open(
        context: &js::Context,
        url: &str,
        config: KvLeaseConfig,
        holder: String,
    ) -> Result<KvLease, LeaseError> {
        Self::open_as(context, url, config, holder, None).await
    }

    /// Opens the lease for the projector whose state directory `claim` holds: it takes
    /// back at once, by a compare-and-set, a lease its dead predecessor left.
    pub async fn open_claimed(
        context: &js::Context,
        url: &str,
        config: KvLeaseConfig,
        claim: ProjectorIdClaim,
    ) -> Result<KvLease, LeaseError> {
        let holder = claim.id().to_string();
        Self::open_as(context, url, config, holder, Some(claim)).await
    }

    async fn open_as(
        context: &js::Context,
        url: &str,
        config: KvLeaseConfig,
        holder: String,
        claim: Option<ProjectorIdClaim>,
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
        // A bucket made with fewer replicas than configured gets them (its stream is `KV_<bucket>`).
        crate::log::jetstream::raise_replicas(context, &format!("KV_{}", config.bucket), config.replicas)
            .await
            .map_err(|detail| LeaseError::Misconfigured { location: location.clone(), detail })?;
        let status = store.status().await.map_err(|err| unavailable(format!("cannot read the lease bucket: {err}")))?;
        // A lease stream of another's making could copy the lease elsewhere or
        // take leases from elsewhere: refused (`crate::log::stream_check`).
        crate::log::stream_check::check_fit(&status.info.config, &[&format!("$KV.{}.>", config.bucket)])
            .map_err(|unfit| LeaseError::Misconfigured { location: location.clone(), detail: unfit.to_string() })?;
        // The bucket's max age is the lease's real ttl, whoever created the bucket.
        let bucket_ttl = status.max_age();
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
        let value = format!("{holder} {}", uuid::Uuid::new_v4()).into_bytes().into();
        Ok(KvLease {
            store,
            location,
            config,
            holder,
            value,
            claim,
            revision: None,
            held_once: false,
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

    fn whose(&self, value: &[u8]) -> Whose {
        // Only a claimed id's other incarnations are dead ones, and only until our
        // first write: after it, a value under our id that is not ours is a live twin's.
        whose(
            value,
            &self.value,
            &self.holder,
            self.claim.is_some() && !self.held_once,
        )
    }

    /// The compare-and-set write of our value on `expected` (0: the key is absent).
    /// `Ok(true)`: written, we hold the lease; `Ok(false)`: someone wrote first.
    async fn write_expecting(&mut self, expected: u64) -> Result<bool, LeaseError> {
        match self
            .store
            .update(&self.config.key, self.value.clone(), expected)
            .await
        {
            Ok(revision) => {
                self.revision = Some(revision);
                self.held_once = true;
                Ok(true)
            }
            Err(err) if err.kind() == UpdateErrorKind::WrongLastRevision => {
                self.revision = None;
                Ok(false)
            }
            Err(err) => Err(self.unavailable(format!(
                "cannot write the lease (expecting revision {expected}): {err}"
            ))),
        }
    }
}

impl Lease for KvLease {
    fn location(&self) -> String {
        self.location.clone()
    }

    /// A renewal on our last revision; failing that, read the key and write by
    /// compare-and-set on what was read, if it is free or ours to take (see the module
    /// docs). Never yes without a write that succeeded in this call.
    async fn acquire_or_renew(&mut self) -> Result<bool, LeaseError> {
        if let Some(revision) = self.revision
            && self.write_expecting(revision).await?
        {
            return Ok(true);
        }
        let entry = self
            .store
            .entry(&self.config.key)
            .await
            .map_err(|err| self.unavailable(format!("cannot read the lease: {err}")))?;
        let expected = match entry {
            None => 0,
            // Released (deleted or purged): free, and the marker's revision is the one to expect.
            Some(entry) if entry.operation != Operation::Put => entry.revision,
            Some(entry) => match self.whose(&entry.value) {
                Whose::Ours => entry.revision,
                Whose::DeadPredecessor => {
                    tracing::info!(
                        lease = %self.location,
                        revision = entry.revision,
                        "taking back the lease this state directory's previous run held, by a compare-and-set on its revision"
                    );
                    entry.revision
                }
                Whose::Theirs => return Ok(false),
            },
        };
        self.write_expecting(expected).await
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

    #[test]
    fn a_state_directory_is_claimed_by_one_holder_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = ProjectorIdClaim::claim(dir.path()).unwrap();
        assert_eq!(first.id(), projector_id(dir.path()).unwrap());
        let second = ProjectorIdClaim::claim(dir.path());
        assert!(
            matches!(&second, Err(ClaimError::InUse { .. })),
            "{second:?}"
        );
        drop(first);
        let again = ProjectorIdClaim::claim(dir.path()).unwrap();
        assert_eq!(again.id(), projector_id(dir.path()).unwrap(), "the same id");
    }

    #[test]
    fn a_value_is_taken_over_only_if_it_is_ours_or_a_dead_predecessors() {
        let ours = b"p 1111";
        for (value, predecessors_dead, expected) in [
            (&b"p 1111"[..], false, Whose::Ours),
            (b"p 1111", true, Whose::Ours),
            (b"p 2222", true, Whose::DeadPredecessor),
            (b"p", true, Whose::DeadPredecessor),
            (b"p 2222", false, Whose::Theirs),
            (b"q 1111", true, Whose::Theirs),
            (b"p q 1111", true, Whose::Theirs),
            (b"", true, Whose::Theirs),
        ] {
            assert_eq!(
                whose(value, ours, "p", predecessors_dead),
                expected,
                "{:?} (predecessors dead: {predecessors_dead})",
                String::from_utf8_lossy(value)
            );
        }
    }
}
