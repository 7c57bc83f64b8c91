//! The engine agent: log in with measured properties, read this engine's orders,
//! run each dispatched attempt as a child process, report, heartbeat, and drain on
//! shutdown. `gridfold engine` runs one; `gridfold demo` runs several in one process
//! through [`run_engine`].
//!
//! Layout: [`run_engine`] (in `agent.rs`) is the protocol: a loop over deliveries,
//! finished runs, heartbeats and shutdown. [`runner`] runs processes and knows
//! nothing of the protocol; [`probe`] measures the machine; [`feed`] is where orders
//! come from ([`OrderFeed`]: a durable JetStream consumer, or a reader over an
//! embedded orders log); `report.rs` publishes, in order, with retries;
//! [`groups`] claims the work directory and kills what a dead predecessor's tasks
//! left; [`procfs`] reads `/proc`.
//!
//! # Invariants
//!
//! - **Slots.** The slots of the running attempts (each counts its delivery's
//!   `slots`, at least 1) never exceed the engine's `slots`. A `Run` that would
//!   exceed them (the projector never sends one) is not started and is reported
//!   `TaskFailed` (`LaunchFailed`) saying so.
//! - **At most once.** A delivery id is acted on once, and an attempt (task,
//!   attempt) is started at most once, per engine process. Both memories are
//!   bounded ([`EngineConfig::seen_max`] entries each, oldest forgotten first).
//! - **Sessions.** Each login opens a session, and the fold requeues whatever an
//!   earlier session of this engine held. So a delivery decided before this
//!   session's login (`batch_seq` < the login's log sequence) is stale: the engine
//!   acknowledges and skips it. This keeps an engine that restarts, or logs in again
//!   after being declared lost, from running attempts the grid has already given
//!   to someone else, and from filling slots the projector believes free.
//! - **One end per start.** Every attempt reported `TaskStarted` is reported
//!   `TaskCompleted` or `TaskFailed` exactly once, unless the projector ended it
//!   first (a `Cancel`, or `Lost`), in which case it is killed and nothing more is
//!   said. Reports of one attempt reach the log in order.
//! - **Idempotent reports.** Every event carries a UUID derived from what it is
//!   about (see `report.rs`), used as its `Nats-Msg-Id`, so retries are stored once.
//! - **Acks after handling.** A delivery is acknowledged once it has been acted on
//!   (a `Run`'s process started and its `TaskStarted` queued, a `Cancel` signalled).
//!   A crash before that brings it back, to a new session that skips it as stale.
//! - **Task processes die with the engine.** Each task's leader gets SIGKILL when
//!   the engine dies (a parent-death signal, see [`runner`]), and each task's process
//!   group is recorded in the work directory while it runs. An engine locks its work
//!   directory (a second engine on it is refused) and, before its first login, kills
//!   the groups its predecessor recorded, once shown to be those groups and not
//!   processes that reuse their ids (see [`groups`]).
//! - **Shutdown.** When the `shutdown` future completes the engine reads no more
//!   deliveries, lets running attempts finish for up to the drain timeout, stops the
//!   rest (reported `EngineShutdown`), publishes `EngineLoggedOut`, and returns.
//! - **Libraries.** At each login the engine reports the grid libraries its
//!   library directory holds ([`library`]: `<dir>/<name>/<version>/` with a
//!   `.synced` marker). A task of a job rooted on a library runs with
//!   `GRIDFOLD_LIBRARY_DIR` set to that library's directory; if the engine does
//!   not hold it, the attempt is reported `TaskFailed` (`LaunchFailed`). A
//!   `SyncLibrary` is answered `LibrarySynced` at once when the library is
//!   already held; otherwise a spawned task fetches it from the object store
//!   ([`EngineConfig::library_store`]), checks its size and blake3 against what
//!   the delivery says was published, unpacks it and marks it, and the loop
//!   reports `LibrarySynced`, or `LibrarySyncFailed` with the error. Tasks of
//!   other jobs keep starting meanwhile (GridServer's rule); one sync per library
//!   runs at a time, and syncs still running at shutdown are abandoned (their
//!   staging files stay under `<library-dir>/.staging`).
//!
//! # Not here
//!
//! No object store for results (results are stdout, at most 64 KiB), no
//! sandboxing (tasks run as the engine's user), no clean-up of work directories
//! (`<work-dir>/<job>/<index>-<attempt>` stays for inspection).

mod agent;
pub mod feed;
pub mod groups;
pub mod library;
pub mod probe;
pub mod procfs;
mod report;
pub mod runner;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use agent::run_engine;
pub use feed::{
    EmbeddedOrderFeed, FeedError, JetStreamOrderFeed, LogOrderFeed, OrderAck, OrderFeed,
    OrderMessage,
};
pub use probe::PropError;
pub use report::{RetryPolicy, library_report_id, session_event_id, task_report_id};

use crate::core::event::EngineProps;
use crate::core::ids::EngineId;
use crate::library_store::LibraryStore;
use crate::log::LogError;

pub const HEARTBEAT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
pub const DRAIN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// Between SIGTERM and SIGKILL when the engine stops an attempt.
pub const KILL_GRACE_DEFAULT: Duration = Duration::from_secs(2);
/// Delivery ids (and attempts) remembered, each.
pub const SEEN_MAX_DEFAULT: usize = 100_000;
/// Most slots one engine may declare.
pub const SLOTS_MAX: u32 = 4_096;
/// The library directory's name under the work directory, by default.
pub const LIBRARY_DIR_NAME: &str = "libraries";

/// How to run one engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub engine: EngineId,
    /// Slots declared at login; 1..=[`SLOTS_MAX`].
    pub slots: u32,
    /// Given properties (`--prop key=value`): custom ones, or intrinsic ones
    /// (`os`, `arch`, `cores`, `memory_mb`, `disk_mb`, `mflops`, `site`) that
    /// replace the measurement.
    pub given_props: BTreeMap<String, String>,
    /// Attempts run in `<work_dir>/<job>/<index>-<attempt>`; created if missing.
    /// One engine at a time: it is locked (`@engine.lock`), and its running tasks'
    /// process groups are recorded in it (`@groups/`, see [`groups`]).
    pub work_dir: PathBuf,
    /// Grid libraries, `<library_dir>/<name>/<version>/` (see [`library`]); by
    /// default `<work_dir>/libraries`. Not created: a missing one holds none.
    pub library_dir: PathBuf,
    /// Where a `SyncLibrary` fetches from: the broker's object store. `None` (an
    /// engine over the embedded log) syncs only what the library directory holds.
    pub library_store: Option<LibraryStore>,
    pub heartbeat_interval: Duration,
    pub drain_timeout: Duration,
    pub kill_grace: Duration,
    pub publish_retry: RetryPolicy,
    /// Delivery ids and attempts remembered to ignore repeats, each.
    pub seen_max: usize,
}

impl EngineConfig {
    /// A configuration with every default: 5 s heartbeats, 30 s drain, 2 s kill grace.
    pub fn new(engine: EngineId, slots: u32, work_dir: impl Into<PathBuf>) -> EngineConfig {
        let work_dir = work_dir.into();
        EngineConfig {
            engine,
            slots,
            given_props: BTreeMap::new(),
            library_dir: work_dir.join(LIBRARY_DIR_NAME),
            library_store: None,
            work_dir,
            heartbeat_interval: HEARTBEAT_INTERVAL_DEFAULT,
            drain_timeout: DRAIN_TIMEOUT_DEFAULT,
            kill_grace: KILL_GRACE_DEFAULT,
            publish_retry: RetryPolicy::default(),
            seen_max: SEEN_MAX_DEFAULT,
        }
    }

    fn validate(&self) -> Result<(), EngineError> {
        let problem = if !(1..=SLOTS_MAX).contains(&self.slots) {
            Some(format!(
                "slots must be 1 to {SLOTS_MAX}, not {}",
                self.slots
            ))
        } else if self.heartbeat_interval.is_zero() {
            Some("the heartbeat interval must be above zero".to_string())
        } else if self.seen_max == 0 {
            Some("seen_max must be at least 1".to_string())
        } else if self.publish_retry.attempts_max == 0 {
            Some("publish_retry.attempts_max must be at least 1".to_string())
        } else {
            None
        };
        match problem {
            Some(problem) => Err(EngineError::Config(problem)),
            None => Ok(()),
        }
    }
}

/// What one engine did, returned when it stops.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EngineReport {
    /// The properties of its last login.
    pub props: EngineProps,
    pub logins: u32,
    /// Deliveries acted on (not counting those ignored below).
    pub deliveries: u64,
    /// Deliveries ignored because their id, or their attempt, had been seen.
    pub duplicates_ignored: u64,
    /// Deliveries ignored because they were decided before the current login.
    pub stale_ignored: u64,
    /// Messages on the order subject that were not deliveries.
    pub undecodable: u64,
    pub started: u64,
    pub completed: u64,
    /// `TaskFailed` reports, every kind (launch failures included).
    pub failed: u64,
    /// Attempts stopped on a `Cancel` or a `Lost`, without a report.
    pub stopped_on_order: u64,
    /// Attempts stopped when the drain timeout ran out (reported `EngineShutdown`).
    pub stopped_at_shutdown: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("invalid engine configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Prop(#[from] PropError),
    #[error("cannot use the work directory {path}: {source}")]
    WorkDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Claim(#[from] groups::ClaimError),
    #[error("could not publish {what} after {attempts} tries over {elapsed:?}: {source}")]
    Publish {
        what: String,
        attempts: u32,
        elapsed: Duration,
        #[source]
        source: LogError,
    },
    #[error(transparent)]
    Feed(#[from] FeedError),
    #[error("internal error in the engine: {0}")]
    Internal(String),
}
