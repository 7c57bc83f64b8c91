//! The engine agent: log in with measured properties, read this engine's orders,
//! run each dispatched attempt as a child process, report, heartbeat, and drain on
//! shutdown. `gridfold engine` runs one; `gridfold demo` runs several in one process
//! through [`run_engine`].
//!
//! Layout: [`machine`] holds the engine's decisions without IO (which delivery
//! to act on, what to launch, stop, suspend or report, when a drain gives up),
//! fed by inputs and giving actions; the simulator drives it too.
//! [`run_engine`] (in `agent.rs`) is the shell around it: a loop over
//! deliveries (authenticated here), finished runs, heartbeats and shutdown,
//! that hands each to the machine and carries out what it asks. [`runner`] runs processes and knows
//! nothing of the protocol; [`probe`] measures the machine; [`feed`] is where orders
//! come from ([`OrderFeed`]: a durable JetStream consumer, or a reader over an
//! embedded orders log); `report.rs` publishes, in order, with retries;
//! [`groups`] claims the work directory and kills what a dead predecessor's tasks
//! left; [`fresh_dirs`] makes attempts' directories ahead of their starts and
//! [`work_root`] marks the work directory so that the filesystem spreads them;
//! [`procfs`] reads `/proc`.
//!
//! # Invariants
//!
//! - **Only sealed deliveries run.** A message on the engine's order subject is
//!   acted on only when it names this engine and ends with a seal, made by a
//!   projector key registered on the log, over the rest of its bytes (see
//!   `wire::delivery`). The engine learns the keys from the log itself: the
//!   entries on `gridfold.ev.op.keys`, applied with the fold's rules
//!   (`core::trust::KeyRing`), read at start and again when a message is
//!   sealed by a key it does not know. Anything else (unsealed, badly sealed,
//!   sealed by a key never registered or revoked, or for another engine) is
//!   said (`warn!`), acknowledged and not acted on (counted in
//!   [`EngineReport::refused`] or [`EngineReport::undecodable`]); a message
//!   that cannot be told because the keys cannot be read is left
//!   unacknowledged, to come again after the consumer's ack wait.
//! - **Slots.** The slots of the running attempts (each counts its delivery's
//!   `slots`, at least 1) never exceed the engine's `slots`. A `Run` that would
//!   exceed them (the projector never sends one) is not started and is reported
//!   `TaskFailed` (`LaunchFailed`) saying so.
//! - **At most once.** A delivery id is acted on once, and an attempt (task,
//!   attempt) is started at most once, per engine process. Both memories are
//!   bounded ([`EngineConfig::seen_max`] entries each, oldest forgotten first).
//! - **Epochs.** Each login opens an epoch, named by the log sequence of its
//!   `EngineLoggedIn` (the engine learns it from the ack of its own publish). The
//!   fold ties every attempt to the epoch it was dispatched in; a new login closes
//!   the earlier epoch, and the projector requeues each attempt it still held by an
//!   explicit `Requeue` (`EngineRestarted`) on the log, delivered as a `Cancel`.
//!   Every delivery carries the engine's epoch when the projector folded it, so:
//!   - a delivery of an **older** epoch is stale: acknowledged and skipped (counted
//!     in [`EngineReport::stale_ignored`], logged at info). An engine never starts
//!     a run order from before its current login: not after a restart, not after
//!     logging in again when declared lost.
//!   - a delivery of a **newer** epoch means another process logged in under this
//!     name: see *One name, one process*.
//! - **Lost comes first.** An engine that stalls may have been declared lost
//!   meanwhile, and its feed then holds, in order, runs decided before the loss and
//!   then the `Lost`. It has stalled when its last sign of life on the log (its
//!   login, the last heartbeat the log stored, its last catch-up) is more than two
//!   heartbeat intervals old on the monotonic clock: frozen (SIGSTOP), starved, cut
//!   off from the broker, or busy stopping processes. Seen at a heartbeat or when a
//!   delivery comes, a stall makes the engine read its feed to the end before
//!   acting on that delivery ([`OrderFeed::catch_up`], for at most a heartbeat
//!   interval); if a `Lost` of its current epoch is among what it holds it handles
//!   that first: stops everything, logs in again (a new epoch), and the runs ahead
//!   of the `Lost` are then stale. (The log has no subject of `EngineLost`s per
//!   engine to ask instead: the delivery route is the one. A loss decided after the
//!   catch-up, before the engine's next heartbeat lands, still arrives behind runs
//!   it then starts; the `Lost` stops them.)
//! - **One name, one process: the newer login fences out the older.** With every
//!   heartbeat the engine reads the newest entry on its login subject
//!   (`gridfold.ev.engine.<id>.login`); one newer than its own login that the
//!   fold accepts as a login (`core::trust::check_login_entry`: an entry the fold
//!   rejects, undecodable or a login with no slots, is no login), a delivery of
//!   a newer epoch, or the projector's `LoggedIn` news of a newer login means
//!   another process took its name. It says so (`error!`, both sequences), hands
//!   back unhandled what its feed holds, kills its tasks and stops with
//!   [`EngineError::Fenced`] (`gridfold engine` exits 1). The newer one wins
//!   because it is the one the grid now books work on: its login closed the older
//!   epoch, whose attempts are requeued. Both processes read one durable consumer
//!   meanwhile, so a delivery may reach either: the older hands back what it took.
//! - **One end per start.** Every attempt reported `TaskStarted` is reported
//!   `TaskCompleted` or `TaskFailed` exactly once, unless the projector ended it
//!   first (a `Cancel`, or `Lost`), in which case it is killed and nothing more is
//!   said. Reports of one attempt reach the log in order.
//! - **Idempotent reports.** Every event carries a UUID derived from what it is
//!   about (see `report.rs`), used as its `Nats-Msg-Id`, so retries are stored once.
//! - **Acks after handling.** A delivery is acknowledged once it has been acted on
//!   (a `Run`'s process started and its `TaskStarted` queued, a `Cancel` signalled).
//!   A crash before that brings it back, to a new epoch that skips it as stale; an
//!   error while handling it hands it back at once (a negative acknowledgement).
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
pub mod machine;
pub mod feed;
pub mod gateway;
pub mod groups;
pub mod library;
pub mod nodefile;
pub mod load_sensor;
pub mod probe;
pub mod procfs;
mod report;
pub mod runner;
mod spawn;
pub mod fresh_dirs;
pub mod work_root;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

pub use agent::run_engine;
pub use feed::{
    EmbeddedOrderFeed, FeedError, JetStreamOrderFeed, LogOrderFeed, OrderAck, OrderFeed,
    OrderMessage,
};
pub use probe::PropError;
pub use report::{RetryPolicy, library_report_id, msg_id, report_batch, session_event_id, source, task_report_id};

use crate::core::event::EngineProps;
use crate::core::ids::EngineId;
use crate::log::library_store::LibraryStore;
use crate::log::LogError;

pub const HEARTBEAT_INTERVAL_DEFAULT: Duration = Duration::from_secs(5);
pub const DRAIN_TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// The default [`EngineConfig::report_window`], in ms (`--report-window-ms`).
pub const REPORT_WINDOW_DEFAULT_MS: u64 = 1;
/// The longest [`EngineConfig::report_window`] allowed, in ms.
pub const REPORT_WINDOW_MAX_MS: u64 = 1_000;
/// Most [`EngineConfig::dirs_ahead`].
pub const DIRS_AHEAD_MAX: usize = fresh_dirs::AHEAD_MAX;
/// Between SIGTERM and SIGKILL when the engine stops an attempt.
pub const KILL_GRACE_DEFAULT: Duration = Duration::from_secs(2);
/// Delivery ids (and attempts) remembered, each.
pub const SEEN_MAX_DEFAULT: usize = 100_000;
/// Most slots one engine may declare.
pub const SLOTS_MAX: u32 = 4_096;
/// The library directory's name under the work directory, by default.
pub const LIBRARY_DIR_NAME: &str = "libraries";
/// The default [`EngineConfig::output_bytes_max`]: 16 MiB per stream and attempt.
pub const OUTPUT_BYTES_MAX_DEFAULT: u64 = 16 * 1024 * 1024;
/// The largest [`EngineConfig::output_bytes_max`]: 1 GiB.
pub const OUTPUT_BYTES_MAX_MAX: u64 = 1024 * 1024 * 1024;
/// The default [`EngineConfig::work_dir_retention`]: a day, as the policy's default.
pub const WORK_DIR_RETENTION_DEFAULT: Duration = Duration::from_secs(24 * 3600);
/// Most attempt directories one sweep of the work directory removes.
pub const WORK_DIR_SWEEP_MAX: usize = 1_000;
/// How often the work directory is swept.
pub const WORK_DIR_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

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
    /// process groups are recorded in it (`@groups/`, see [`groups`]); with
    /// `dirs_ahead`, attempts' directories wait in `@fresh/` until a start
    /// takes one (see [`fresh_dirs`]).
    /// Marked `chattr +T` where the filesystem keeps the flag (see [`work_root`]).
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
    /// How long the first task report of a message waits for company before
    /// it is published: the reports that come meanwhile (a short task's start
    /// and end, the ends of tasks finishing together) leave in the same
    /// message, which the broker and the projector take at the cost of one.
    /// A start and an end each wait this long at most (beyond the publish
    /// before them), so an attempt's times in the log move by no more. Zero:
    /// each report leaves as soon as the last publish is stored.
    pub report_window: Duration,
    /// Attempts' directories made ahead of need by a thread of low priority
    /// (see [`fresh_dirs`]), at most [`DIRS_AHEAD_MAX`]; by default twice the
    /// slots. 0: no thread, each start makes its own (a `mkdir` on the way to
    /// the start).
    pub dirs_ahead: usize,
    /// Delivery ids and attempts remembered to ignore repeats, each.
    pub seen_max: usize,
    /// Where an attempt's whole stdout and stderr go when it ends: the broker's
    /// object store (see [`crate::log::output_store`]). `None`: kept nowhere.
    pub output_store: Option<crate::log::output_store::OutputStore>,
    /// This engine's own ceiling on what it stores of each stream of an attempt
    /// (1..=[`OUTPUT_BYTES_MAX_MAX`]): each attempt keeps the smaller of this and
    /// the bound its order carries (the policy's `[output]` share, decided by
    /// the fold); what comes after is dropped and the object marked cut.
    pub output_bytes_max: u64,
    /// An ended attempt's directory (`<work_dir>/<job>/<index>-<attempt>`, and its
    /// kept output `<index>-<attempt>.output`) is removed this long after it was
    /// last written: until the first task's order brings the policy's
    /// `output.work_dir_retention_secs`, which then rules.
    pub work_dir_retention: Duration,
    /// A load sensor program (Grid Engine's `load_sensor`), started once and asked
    /// before each heartbeat; its values join the heartbeat's (see [`load_sensor`]).
    pub load_sensor: Option<PathBuf>,
    /// `--gateway`: run each attempt as a batch job of this resource manager
    /// instead of as a child process (see [`gateway`]).
    pub gateway: Option<gateway::GatewayConfig>,
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
            report_window: Duration::from_millis(REPORT_WINDOW_DEFAULT_MS),
            dirs_ahead: (2 * slots as usize).min(DIRS_AHEAD_MAX),
            seen_max: SEEN_MAX_DEFAULT,
            output_store: None,
            output_bytes_max: OUTPUT_BYTES_MAX_DEFAULT,
            work_dir_retention: WORK_DIR_RETENTION_DEFAULT,
            load_sensor: None,
            gateway: None,
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
        } else if self.report_window > Duration::from_millis(REPORT_WINDOW_MAX_MS) {
            Some(format!("the report window must be at most {REPORT_WINDOW_MAX_MS} ms"))
        } else if self.dirs_ahead > DIRS_AHEAD_MAX {
            Some(format!("at most {DIRS_AHEAD_MAX} directories are made ahead, not {}", self.dirs_ahead))
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
    /// Deliveries ignored because they are of a closed epoch (an earlier login).
    pub stale_ignored: u64,
    /// Times the engine found it had stalled (no sign of life on the log for more
    /// than two heartbeat intervals) and read its order feed to the end before
    /// acting on it.
    pub stalls: u64,
    /// Messages on the order subject that were not deliveries for this engine.
    pub undecodable: u64,
    /// Messages of deliveries refused: not sealed, or not by a key registered on the log.
    pub refused: u64,
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
    #[error("could not publish {what} after {attempts} tries over {}: {source}", crate::human::duration(*elapsed))]
    Publish {
        what: String,
        attempts: u32,
        elapsed: Duration,
        #[source]
        source: LogError,
    },
    #[error(transparent)]
    Feed(#[from] FeedError),
    /// Another process logged in under this engine's name after this one did: the
    /// newer login fences out the older, which stops at once, killing its tasks.
    #[error(
        "engine {engine} is fenced out: another process logged in under its name at log sequence {newer_login}, \
         after this one's login at {own_login} ({evidence}); this process stops and kills its tasks \
         (two live engines never share a name: give each its own --name)"
    )]
    Fenced {
        engine: EngineId,
        newer_login: u64,
        own_login: u64,
        evidence: FenceEvidence,
    },
    #[error("internal error in the engine: {0}")]
    Internal(String),
}

/// How an engine learned that a newer login took its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceEvidence {
    /// The newest entry on its login subject, read with a heartbeat.
    NewestLogin,
    /// The projector's news of that login, on the order feed.
    LoggedInDelivery,
    /// A delivery (this id) folded in the newer login's epoch.
    Delivery { id: String },
    /// The newer process took the order feed over (then its login was on the log).
    FeedTakenOver,
}

impl std::fmt::Display for FenceEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FenceEvidence::NewestLogin => f.write_str("the newest login on the log"),
            FenceEvidence::LoggedInDelivery => f.write_str("the projector's news of that login"),
            FenceEvidence::Delivery { id } => write!(f, "delivery {id}, of the newer login's epoch"),
            FenceEvidence::FeedTakenOver => f.write_str("its order feed taken over, then the newest login on the log"),
        }
    }
}
