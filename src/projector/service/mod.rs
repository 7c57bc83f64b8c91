//! The projector service: the single writer, a thin async shell around the
//! [`Machine`]. It reads the log in order and folds it, decides when it has caught up
//! (or every [`ProjectorConfig::schedule_every_entries`] entries under load), publishes
//! each order batch onto `gridfold.ev.orders` behind the fence, delivers each engine the
//! orders of every batch it reads back, snapshots its state, ticks, and answers
//! queries. The simulator (`sim::projector`) drives the same machine the same way with a
//! simulated log; what the simulator shows is what this does.
//!
//! # Shape
//!
//! One task owns the machine and the state. It waits on a closed set of inputs
//! (`Input`: a batch of entries from the reader task, a query from a
//! [`ProjectorHandle`], the lease timer, the tick timer, housekeeping, shutdown) and
//! handles one at a time to the end, so the state is never shared, cloned or locked
//! and a query is answered between two batches. Reading runs in a task of its own
//! feeding a channel of at most [`READ_AHEAD_BATCHES`] batches, so waiting for the log
//! never holds up a query. Deliveries are sent by a task of their own, one send at a
//! time (so they reach the sink in order), and the loop goes on folding while the sink
//! waits for its acks: the answer comes back as an input. Likewise each order batch
//! is published from a task, one at a time (each is fenced on the sequence of the one
//! before), and the loop folds while the log stores it. The service is generic over the log ([`EventLog`]: JetStream
//! or the embedded log), where deliveries go ([`OrderSink`]) and who may write
//! ([`Lease`]).
//!
//! # Invariants
//!
//! - **Order.** Entries are folded in sequence order, each once; every entry the
//!   machine sees follows the previous one (asserted).
//! - **One writer.** Every batch is published with `expected_last_subject_seq` = the
//!   sequence of the newest entry on the orders subject this projector has folded or
//!   had acknowledged. The broker refuses it if anyone else wrote there since: a
//!   refusal ([`LogError::WrongLastSequence`]) makes the projector forget what it had
//!   in flight (`abandon_pending`), hold its publishing until it has folded past the
//!   refusing entry, and re-check its lease. The lease (see [`lease`]) decides who
//!   should write; the fence guarantees that only one can.
//! - **Publish only from a complete view.** A projector publishes only while it holds
//!   the lease and only after it has folded everything the log held when it became
//!   leader (and, after any publish it cannot account for — refused, unanswered or
//!   answered "duplicate" — everything the log held then). So a new leader's first
//!   decision already counts every batch the old leader published: no order is
//!   decided twice. The fold is the final arbiter anyway: a dispatch of a task that is
//!   no longer waiting is rejected, and only applied orders are delivered.
//! - **Deliveries come from the log.** Deliveries are derived from batches as they
//!   are folded ([`deliveries_of_entry`]), never from what was published, and only the
//!   leader sends them. Every projector, leader or standby, remembers the deliveries
//!   of the batches of the last [`ProjectorConfig::redeliver_window`] of log time
//!   (at most [`RECENT_DELIVERIES_MAX`]) and keeps them in its snapshot; on becoming
//!   leader it sends them all again. So a batch the old leader published but did not
//!   deliver (it died in between) is delivered by its successor; what was delivered
//!   already is dropped by the broker (same `Nats-Msg-Id`) or by the engine (a
//!   delivery id it has seen).
//! - **Snapshots** ([`snapshot`]) are taken between batches, every
//!   [`ProjectorConfig::snapshot_every_entries`] entries or
//!   [`ProjectorConfig::snapshot_interval`], and at shutdown; each is encoded between
//!   two inputs (every recent delivery was encoded once, when its batch was folded) and
//!   written to disk by a blocking task, one at a time. A start loads the newest
//!   one, checks that the log's entry at its sequence is the one it was taken after,
//!   and resumes from the next sequence; otherwise (missing, corrupt, another format,
//!   another log) it folds from sequence 1, saying why. Either way the chain digest is
//!   the one a projector that never stopped would have.
//! - **Ticks.** Every projector, leader or standby, appends a `Tick` each
//!   [`ProjectorConfig::tick_interval`], with the message id `tick-<unix second>` and
//!   an envelope id derived from the second, so two tickers in the same second store
//!   one tick. A standby ticking keeps time moving while the leader is away; the
//!   ticks of two projectors whose clocks disagree by part of a second cost one extra
//!   entry now and then.
//! - **Limits.** Read-ahead [`READ_AHEAD_BATCHES`], queries queued
//!   [`QUERIES_QUEUED_MAX`], batches per decision [`BATCHES_PER_DECISION_MAX`] (the
//!   machine also stops at `PENDING_BATCHES_MAX` in flight), remembered deliveries
//!   [`RECENT_DELIVERIES_MAX`], one tick append in flight, one send of deliveries,
//!   one batch publish and one snapshot write under way at a time; past
//!   [`OUTBOX_WAIT_AT`] deliveries waiting, the loop waits for the sink.
//!
//! # The state directory
//!
//! [`ProjectorConfig::state_dir`] belongs to one projector: `projector-id` (its name
//! as lease holder, see [`lease::projector_id`]), `projector.lock` (locked while
//! `gridfold projector` runs, see [`lease::ProjectorIdClaim`]), `snapshots/` (one file,
//! locked while the projector runs) and, with the embedded sink, `orders/` (the delivery log engines
//! read, see [`sink`]). Two projectors need two directories.
//!
//! # What it does not do
//!
//! It does not retry a publish: a batch whose publish failed is forgotten and decided
//! again from the log. It does not know NATS beyond the log, the sink and the lease;
//! [`spawn_query_responder`] is a separate user of the handle. It does not install
//! signal handlers: the caller passes the shutdown future.
//!
//! # Where things are
//!
//! This file holds the configuration, the run loop and the shell's state, and
//! handles entries, ticks, queries and shutdown. The shell's other duties each
//! have a file: `start.rs` (where a run starts), `deliveries.rs` (the outbox and
//! the recent deliveries), `publishing.rs` (deciding, the fence, the key),
//! `leadership.rs` (the lease's answers), `snapshotting.rs` (taking snapshots)
//! and `tasks.rs` (the reader task, timers). The parts others use are modules of
//! their own: [`handle`](ProjectorHandle), [`lease`], [`sink`], [`snapshot`].

mod deliveries;
mod handle;
mod leadership;
pub mod output;
pub mod lease;
mod publishing;
pub mod sink;
pub mod snapshot;
mod snapshotting;
mod start;
mod tasks;
mod window;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::{mpsc, watch};
use tokio::task::{JoinError, JoinHandle};

pub use handle::{
    ProjectorGone, ProjectorHandle, ProjectorStatus, QUERIES_QUEUED_MAX, Query, StartPoint,
    spawn_query_responder,
};
pub use lease::{
    ClaimError, KvLease, KvLeaseConfig, Lease, LeaseError, ProjectorIdClaim, SoleWriter,
    projector_id,
};
pub use sink::{EmbeddedOrderSink, JetStreamOrderSink, OrderSink};
pub use snapshot::{EncodedDelivery, EntryFingerprint, Loaded, SnapshotStore, SnapshotStoreError};

use crate::core::digest::Digest;
use crate::core::event::{Envelope, Event, Origin};
use crate::core::ids::Seq;
use crate::log::{Append, EventLog, LogError, READ_BATCH_DEFAULT, ReadBatch};
use crate::projector::delivery::deliveries_of_entry;
use crate::projector::key::{KeyError, ProjectorKey};
use crate::projector::machine::Machine;
use crate::projector::query::{
    StateDigests, answer_blacklists, answer_libraries, answer_policy, answer_rejections, answer_stat, answer_usage,
    answer_verdict, answer_why,
};
use crate::wire::delivery::Delivery;
use crate::wire::{self, TICK_SUBJECT};
use deliveries::{DeliveryOutcome, RecentDeliveries};
use leadership::Leadership;
use publishing::{Hold, PublishOutcome};
use snapshotting::SnapshotOutcome;
use start::{Start, describe_start, load_start};
use tasks::{AbortOnDrop, interval, next_tick, read_log, sleep_until_some, task_done};

/// Batches the reader may have read ahead of the fold.
pub const READ_AHEAD_BATCHES: usize = 2;
/// The default coalescing window ([`ProjectorConfig::decide_window`]), in ms:
/// none, decide as soon as caught up. Measured on one 8-slot engine running
/// `/bin/true` (docs/performance.md): with a 2 ms window 903-1,014 tasks/s,
/// with none 1,575-1,653 tasks/s, while the projector's and the broker's CPU
/// per task stayed within 55-65 and 105-115 µs (reports still join while a
/// publish waits, and a decision's deliveries to one engine still travel
/// together). A grid whose many engines end tasks at ordinary load may set one.
pub const DECIDE_WINDOW_DEFAULT_MS: u64 = 0;
pub const DECIDE_WINDOW_DEFAULT: Duration = Duration::from_millis(DECIDE_WINDOW_DEFAULT_MS);
/// Entries waiting that end the coalescing window early.
pub const DECIDE_WINDOW_ENTRIES_DEFAULT: u64 = 64;
/// Most batches one decision publishes before the projector reads the log again.
pub const BATCHES_PER_DECISION_MAX: usize = 16;
/// Most deliveries remembered for sending again (and waiting to be sent).
pub const RECENT_DELIVERIES_MAX: usize = 65_536;
/// Deliveries waiting in the outbox past which the loop waits for the send under way.
pub const OUTBOX_WAIT_AT: usize = 16_384;
/// The envelope source of the projector's ticks.
pub const TICK_SOURCE: &str = "gridfold-ticker";

const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);
const WARN_EVERY: Duration = Duration::from_secs(10);
const READ_RETRY_MIN: Duration = Duration::from_millis(100);
/// At most this long between two tries to read a log that is away: a cluster that lost
/// a node elects new stream leaders within seconds, and the reader should be there then.
const READ_RETRY_MAX: Duration = Duration::from_secs(1);
/// How long a start waits for the entry its snapshot was taken after.
const SNAPSHOT_CHECK_WAIT: Duration = Duration::from_secs(10);
/// How long shutdown waits for a last tick or delivery.
const SHUTDOWN_STEP_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct ProjectorConfig {
    /// Where the snapshots live (`<dir>/snapshots`; the embedded sink uses `<dir>/orders`).
    pub state_dir: PathBuf,
    /// Decide at least every this many entries folded, even when not caught up.
    pub schedule_every_entries: u64,
    /// The coalescing window: once caught up, wait this long after the first
    /// entry not yet decided on before deciding, so that the completions of
    /// tasks ending together are decided on (and their dispatches published
    /// and delivered) at once, not one by one. Zero: decide as soon as caught up.
    pub decide_window: Duration,
    /// …unless this many entries are already waiting: then decide at once.
    pub decide_window_entries: u64,
    /// Snapshot after this many entries folded since the last snapshot…
    pub snapshot_every_entries: u64,
    /// …or this long after it, if anything was folded since.
    pub snapshot_interval: Duration,
    /// Append a `Tick` this often; `None`: no ticker.
    pub tick_interval: Option<Duration>,
    /// Most entries read at once.
    pub read_batch_max: usize,
    /// How long one read waits for a first entry before reporting itself caught up.
    pub read_wait: Duration,
    /// How far back in log time a new leader delivers again.
    pub redeliver_window: Duration,
    /// Check the state's invariants after every entry (tests; costly on large states).
    pub check_invariants: bool,
    /// The key that seals its batches; `None`: the state directory's
    /// ([`ProjectorKey::load_or_create`]).
    pub key: Option<ProjectorKey>,
    /// Register its own key on the log (as an operator would) when the log does
    /// not hold it yet. For one-machine grids and the demo; where the broker
    /// enforces roles, an operator registers it (`gridfold key register`).
    pub register_key: bool,
}

impl ProjectorConfig {
    pub fn new(state_dir: impl Into<PathBuf>) -> ProjectorConfig {
        ProjectorConfig {
            state_dir: state_dir.into(),
            schedule_every_entries: 10_000,
            decide_window: DECIDE_WINDOW_DEFAULT,
            decide_window_entries: DECIDE_WINDOW_ENTRIES_DEFAULT,
            snapshot_every_entries: 50_000,
            snapshot_interval: Duration::from_secs(30),
            tick_interval: Some(Duration::from_secs(1)),
            read_batch_max: READ_BATCH_DEFAULT,
            read_wait: Duration::from_millis(500),
            redeliver_window: crate::log::DUPLICATE_WINDOW_DEFAULT,
            check_invariants: false,
            key: None,
            register_key: false,
        }
    }
}

/// What a projector did, returned when it stops.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProjectorReport {
    pub started_from: StartPoint,
    /// The last sequence folded, and the chain digest there.
    pub last_seq: u64,
    pub chain_digest: Digest,
    /// Entries folded by this run (not counting those restored from the snapshot).
    pub entries_folded: u64,
    pub batches_published: u64,
    pub deliveries_sent: u64,
    pub publishes_fenced: u64,
    pub leader_terms: u64,
    pub snapshots_written: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ProjectorError {
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Snapshots(#[from] SnapshotStoreError),
    #[error("cannot create the state directory {path}: {source}")]
    StateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the log reader stopped")]
    ReaderStopped,
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// One thing for the loop to handle; see the module docs.
#[derive(Debug)]
enum Input {
    Entries(Result<ReadBatch, LogError>),
    /// The deliveries being sent have all been answered (or the send failed).
    Delivered(Result<DeliveryOutcome, JoinError>),
    /// The log answered the publish of an order batch.
    Published(Result<PublishOutcome, JoinError>),
    /// The snapshot being written is on disk (or could not be written).
    SnapshotWritten(Result<SnapshotOutcome, JoinError>),
    Query(Query),
    LeaseDue,
    Tick,
    Housekeeping,
    /// The coalescing window of the entries waiting to be decided on has passed.
    DecideDue,
    Shutdown,
}

/// A projector ready to run: make it, take [`Projector::handle`]s, then [`Projector::run`].
pub struct Projector<L, S, A> {
    config: ProjectorConfig,
    log: L,
    sink: S,
    lease: A,
    queries: mpsc::Receiver<Query>,
    status: watch::Sender<ProjectorStatus>,
    handle: ProjectorHandle,
}

impl<L, S, A> Projector<L, S, A>
where
    L: EventLog + Clone + 'static,
    S: OrderSink,
    A: Lease,
{
    /// Panics on a configuration outside its limits (a zero interval or count, a read
    /// batch above [`crate::log::READ_BATCH_MAX`]).
    pub fn new(config: ProjectorConfig, log: L, sink: S, lease: A) -> Self {
        assert!(
            config.schedule_every_entries > 0,
            "schedule_every_entries must be positive"
        );
        assert!(
            config.snapshot_every_entries > 0,
            "snapshot_every_entries must be positive"
        );
        assert!(
            !config.snapshot_interval.is_zero(),
            "snapshot_interval must be positive"
        );
        assert!(
            config.tick_interval.is_none_or(|tick| !tick.is_zero()),
            "tick_interval must be positive"
        );
        assert!(
            (1..=crate::log::READ_BATCH_MAX).contains(&config.read_batch_max),
            "read_batch_max must be 1 to {}",
            crate::log::READ_BATCH_MAX
        );
        let (queries_tx, queries) = mpsc::channel(QUERIES_QUEUED_MAX);
        let (status, status_rx) = watch::channel(ProjectorStatus::default());
        let handle = ProjectorHandle {
            queries: queries_tx,
            status: status_rx,
        };
        Projector {
            config,
            log,
            sink,
            lease,
            queries,
            status,
            handle,
        }
    }

    /// A handle for queries and status; it works until the run ends.
    pub fn handle(&self) -> ProjectorHandle {
        self.handle.clone()
    }

    /// Runs until `shutdown` completes (then snapshots, releases the lease and returns
    /// the report) or a fatal error: a corrupt or misconfigured log, a snapshot store
    /// that cannot be opened. A log that is away is waited for, not fatal.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<ProjectorReport, ProjectorError> {
        let Projector {
            config,
            log,
            sink,
            lease,
            mut queries,
            status: status_tx,
            handle,
        } = self;
        drop(handle);
        std::fs::create_dir_all(&config.state_dir).map_err(|source| ProjectorError::StateDir {
            path: config.state_dir.clone(),
            source,
        })?;
        let key = match &config.key {
            Some(key) => key.clone(),
            None => ProjectorKey::load_or_create(&config.state_dir)?,
        };
        tracing::info!(key = %key.public_hex(), "projector key");
        let snapshots = SnapshotStore::open(&SnapshotStore::dir_in(&config.state_dir))?;
        let start = load_start(&log, &snapshots).await?;
        let from_seq = start.state_seq() + 1;
        let reader = log.reader(from_seq).await?;
        let (entries_tx, mut entries) = mpsc::channel(READ_AHEAD_BATCHES);
        let _reader = AbortOnDrop(tokio::spawn(read_log(
            reader,
            entries_tx,
            config.read_batch_max,
            config.read_wait,
        )));
        tracing::info!(
            log = %log.location(),
            deliveries = %sink.location(),
            lease = %lease.location(),
            state_dir = %config.state_dir.display(),
            "projector starting at sequence {from_seq} ({})",
            describe_start(&start.started_from)
        );

        let mut lease_timer = interval(lease.renew_interval());
        let mut tick_timer = config.tick_interval.map(interval);
        let mut housekeeping = interval(HOUSEKEEPING_INTERVAL);
        let mut shell = Shell::new(config, log, sink, lease, snapshots, start, key);
        shell.publish_status(&status_tx);
        tokio::pin!(shutdown);
        loop {
            let input = tokio::select! {
                biased;
                () = &mut shutdown => Input::Shutdown,
                Some(query) = queries.recv() => Input::Query(query),
                _ = lease_timer.tick() => Input::LeaseDue,
                () = next_tick(&mut tick_timer) => Input::Tick,
                _ = housekeeping.tick() => Input::Housekeeping,
                () = sleep_until_some(shell.decide_at()) => Input::DecideDue,
                outcome = task_done(&mut shell.sending), if shell.sending.is_some() => Input::Delivered(outcome),
                outcome = task_done(&mut shell.publishing), if shell.publishing.is_some() => Input::Published(outcome),
                outcome = task_done(&mut shell.snapshot_writing), if shell.snapshot_writing.is_some() => Input::SnapshotWritten(outcome),
                read = entries.recv() => match read {
                    Some(read) => Input::Entries(read),
                    None => return Err(ProjectorError::ReaderStopped),
                },
            };
            let stop = matches!(input, Input::Shutdown);
            shell.handle(input).await?;
            shell.publish_status(&status_tx);
            if stop {
                break;
            }
        }
        Ok(shell.report())
    }
}

/// Makes a projector and runs it until `shutdown`; see [`Projector`] for a handle.
pub async fn run_projector<L, S, A>(
    config: ProjectorConfig,
    log: L,
    sink: S,
    lease: A,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<ProjectorReport, ProjectorError>
where
    L: EventLog + Clone + 'static,
    S: OrderSink,
    A: Lease,
{
    Projector::new(config, log, sink, lease).run(shutdown).await
}

/// The envelope of the tick of one Unix second: the same bytes from every ticker.
pub fn tick_envelope(unix_second: u64) -> Envelope {
    let digest = blake3::hash(format!("gridfold-tick:{unix_second}").as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest.as_bytes()[..16]);
    Envelope {
        id,
        source: TICK_SOURCE.to_string(),
        event: Event::Tick,
    }
}

/// The append of the tick of one Unix second, deduplicated by `tick-<second>`.
pub fn tick_append(unix_second: u64) -> Append {
    Append::new(TICK_SUBJECT, wire::encode(&tick_envelope(unix_second)))
        .with_msg_id(format!("tick-{unix_second}"))
}

/// Says "now" at most once per period: for warnings that would repeat every second.
#[derive(Debug, Default)]
struct Throttle(Option<Instant>);

impl Throttle {
    fn ready(&mut self) -> bool {
        let now = Instant::now();
        if self
            .0
            .is_some_and(|last| now.duration_since(last) < WARN_EVERY)
        {
            return false;
        }
        self.0 = Some(now);
        true
    }
}

struct Shell<L, S, A> {
    config: ProjectorConfig,
    log: L,
    /// Shared with the task that sends deliveries.
    sink: Arc<S>,
    lease: A,
    snapshots: SnapshotStore,
    machine: Machine,
    /// The fence: the newest entry on the orders subject folded or acknowledged to us.
    last_orders_seq: u64,
    /// The newest entry on the orders subject folded (what a snapshot keeps).
    folded_orders_seq: u64,
    /// The newest sequence one of our publishes was stored at.
    published_through: u64,
    /// The fingerprint of the entry at the state's last sequence.
    last_entry: Option<EntryFingerprint>,
    caught_up: bool,
    /// Entries were folded (or the in-flight view changed) since the last decision.
    dirty: bool,
    /// The publish of the last batch decided, under way in a task of its own. One at a
    /// time: each batch is fenced on the sequence of the one before.
    publishing: Option<JoinHandle<PublishOutcome>>,
    /// Batches published by the decision under way; it goes on (decides again) when
    /// each publish is answered, up to [`BATCHES_PER_DECISION_MAX`]; 0: none under way.
    decision_batches: usize,
    /// The coalescing window over the entries folded since the last decision.
    window: window::DecideWindow,
    entries_since_snapshot: u64,
    last_snapshot_at: Instant,
    /// The snapshot being written to disk, by a blocking task; at most one at a time.
    snapshot_writing: Option<JoinHandle<SnapshotOutcome>>,
    /// The sequence of the newest snapshot taken (written, or being written).
    snapshot_taken_seq: u64,
    leadership: Leadership,
    /// The lease has answered at least once (to say "standby" once at start).
    lease_answered: bool,
    hold: Hold,
    /// Deliveries to send (leader only), oldest first.
    outbox: VecDeque<Delivery>,
    /// The task sending the deliveries taken from the outbox, at most one at a time so
    /// that they reach the sink in order; the loop goes on folding meanwhile.
    sending: Option<JoinHandle<DeliveryOutcome>>,
    recent: RecentDeliveries,
    tick_task: Option<JoinHandle<()>>,
    status: ProjectorStatus,
    entries_folded: u64,
    warn_log: Throttle,
    warn_lease: Throttle,
    warn_sink: Throttle,
    /// Seals every batch; the fold accepts them once it is registered on the log.
    key: ProjectorKey,
    /// Its registration was tried by this process (`register_key`): once, so
    /// it is not published again while the log catches up to it, nor retried
    /// when refused.
    registration_sent: bool,
    warn_key: Throttle,
    /// The state digests a `stat` asked for: computing one serialises the
    /// whole state on this loop (about 150 ms on a grid that has run a while),
    /// so the last one is remembered until another entry is folded.
    state_digests: StateDigests,
}

impl<L, S, A> Shell<L, S, A>
where
    L: EventLog + Clone + 'static,
    S: OrderSink,
    A: Lease,
{
    fn new(
        config: ProjectorConfig,
        log: L,
        sink: S,
        lease: A,
        snapshots: SnapshotStore,
        start: Start,
        key: ProjectorKey,
    ) -> Self {
        let recent = RecentDeliveries::new(config.redeliver_window, start.recent);
        let window = window::DecideWindow::new(config.decide_window, config.decide_window_entries);
        let status = ProjectorStatus {
            started_from: start.started_from,
            folded_seq: start.machine.state().last_seq.0,
            snapshot_seq: match start.last_entry {
                Some(_) => start.machine.state().last_seq.0,
                None => 0,
            },
            ..ProjectorStatus::default()
        };
        Shell {
            config,
            log,
            sink: Arc::new(sink),
            lease,
            snapshots,
            machine: start.machine,
            last_orders_seq: start.last_orders_seq,
            folded_orders_seq: start.last_orders_seq,
            published_through: 0,
            last_entry: start.last_entry,
            caught_up: false,
            dirty: true,
            publishing: None,
            decision_batches: 0,
            window,
            entries_since_snapshot: 0,
            last_snapshot_at: Instant::now(),
            snapshot_writing: None,
            snapshot_taken_seq: status.snapshot_seq,
            leadership: Leadership::Standby,
            lease_answered: false,
            hold: Hold::Open,
            outbox: VecDeque::new(),
            sending: None,
            recent,
            tick_task: None,
            status,
            entries_folded: 0,
            warn_log: Throttle::default(),
            warn_lease: Throttle::default(),
            warn_sink: Throttle::default(),
            key,
            registration_sent: false,
            warn_key: Throttle::default(),
            state_digests: StateDigests::default(),
        }
    }

    async fn handle(&mut self, input: Input) -> Result<(), ProjectorError> {
        match input {
            Input::Entries(read) => self.handle_entries(read).await?,
            Input::Delivered(outcome) => {
                self.delivery_ended(outcome);
                self.deliver().await;
            }
            Input::SnapshotWritten(outcome) => self.snapshot_ended(outcome),
            Input::Published(outcome) => {
                let outcome = outcome.unwrap_or_else(|err| {
                    (
                        0,
                        Err(self.task_ended(self.log.location(), "publishing", err)),
                    )
                });
                self.published(outcome).await?;
                self.decide_and_publish().await?;
            }
            Input::Query(query) => self.handle_query(query),
            Input::LeaseDue => {
                self.renew_lease().await;
                self.deliver().await;
                self.decide_and_publish().await?;
            }
            Input::Tick => self.tick(),
            Input::DecideDue => self.decide_and_publish().await?,
            Input::Housekeeping => {
                if self.entries_since_snapshot > 0
                    && self.last_snapshot_at.elapsed() >= self.config.snapshot_interval
                {
                    self.snapshot("interval");
                }
                self.deliver().await;
                self.decide_and_publish().await?;
            }
            Input::Shutdown => self.shut_down().await,
        }
        Ok(())
    }

    fn is_leader(&self) -> bool {
        matches!(self.leadership, Leadership::Leader { .. })
    }

    fn publish_status(&mut self, status_tx: &watch::Sender<ProjectorStatus>) {
        self.status.folded_seq = self.machine.state().last_seq.0;
        self.status.caught_up = self.caught_up;
        self.status.leader = self.is_leader();
        status_tx.send_if_modified(|shown| {
            let changed = *shown != self.status;
            if changed {
                *shown = self.status.clone();
            }
            changed
        });
    }

    fn report(&self) -> ProjectorReport {
        let state = self.machine.state();
        ProjectorReport {
            started_from: self.status.started_from.clone(),
            last_seq: state.last_seq.0,
            chain_digest: state.chain,
            entries_folded: self.entries_folded,
            batches_published: self.status.batches_published,
            deliveries_sent: self.status.deliveries_sent,
            publishes_fenced: self.status.publishes_fenced,
            leader_terms: self.status.leader_terms,
            snapshots_written: self.status.snapshots_written,
        }
    }

    async fn handle_entries(
        &mut self,
        read: Result<ReadBatch, LogError>,
    ) -> Result<(), ProjectorError> {
        let batch = match read {
            Ok(batch) => batch,
            Err(err @ LogError::Unavailable { .. }) => {
                if self.warn_log.ready() {
                    tracing::warn!("reading the log: {err}; retrying");
                }
                return Ok(());
            }
            Err(err) => return Err(err.into()),
        };
        let count = batch.entries.len() as u64;
        for raw in &batch.entries {
            let expected = self.machine.state().last_seq.0 + 1;
            assert_eq!(
                raw.seq, expected,
                "the reader returns every entry once, in order"
            );
            let mut entry = wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload);
            self.machine.vouch_for_own_seal(&mut entry);
            let folded = self.machine.handle_entry_folded(&entry);
            let rejections = folded.rejections;
            if self.config.check_invariants {
                self.machine.state().check_invariants();
            }
            if entry.origin == Origin::Projector {
                self.folded_orders_seq = raw.seq;
                self.last_orders_seq = self.last_orders_seq.max(raw.seq);
            }
            let mut deliveries = deliveries_of_entry(self.machine.state(), &entry, &rejections);
            deliveries.extend(crate::projector::delivery::companion_stops(&folded.companion_ends, self.machine.state(), entry.seq));
            for delivery in deliveries {
                if self.is_leader() {
                    self.outbox.push_back(delivery.clone());
                }
                self.recent.push(raw.time_ms, delivery);
            }
        }
        if let Some(last) = batch.entries.last() {
            self.last_entry = Some(EntryFingerprint::of(last));
            tracing::debug!(
                entries = count,
                last_seq = last.seq,
                caught_up = batch.caught_up,
                pending_batches = self.machine.pending_batches(),
                "folded"
            );
        }
        self.recent.prune(self.machine.state().now_ms);
        self.trim_outbox();
        self.caught_up = batch.caught_up;
        if count > 0 {
            self.dirty = true;
            self.entries_folded += count;
            self.window.folded(count, Instant::now());
            self.entries_since_snapshot += count;
        }
        self.deliver().await;
        self.decide_and_publish().await?;
        if self.entries_since_snapshot >= self.config.snapshot_every_entries {
            self.snapshot("entries");
        }
        Ok(())
    }

    // ---- ticks, queries, shutdown ------------------------------------------------

    fn tick(&mut self) {
        if self
            .tick_task
            .as_ref()
            .is_some_and(|task| !task.is_finished())
        {
            return;
        }
        let unix_second = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let log = self.log.clone();
        self.tick_task = Some(tokio::spawn(async move {
            if let Err(err) = log.append(tick_append(unix_second)).await {
                tracing::debug!("tick {unix_second}: {err}");
            }
        }));
    }

    fn handle_query(&mut self, query: Query) {
        let state = self.machine.state();
        // A requester that gave up has dropped its receiver: nothing to do.
        match query {
            Query::Stat(request, bytes_max, reply) => {
                let _ = reply.send(answer_stat(state, &request, &mut self.state_digests, bytes_max));
            }
            Query::Why(request, reply) => {
                let _ = reply.send(answer_why(state, &request));
            }
            Query::Blacklists(request, reply) => {
                let _ = reply.send(answer_blacklists(state, &request));
            }
            Query::Libraries(request, reply) => {
                let _ = reply.send(answer_libraries(state, &request));
            }
            Query::Verdict(request, reply) => {
                let _ = reply.send(answer_verdict(state, &request));
            }
            Query::Usage(request, reply) => {
                let _ = reply.send(answer_usage(state, &request));
            }
            Query::Rejections(request, reply) => {
                let _ = reply.send(answer_rejections(state, &request));
            }
            Query::Tasks(request, bytes_max, reply) => {
                let _ = reply.send(crate::projector::results::answer_tasks(state, &request, bytes_max));
            }
            Query::Task(request, reply) => {
                let _ = reply.send(crate::projector::results::answer_task(state, &request));
            }
            Query::Policy(request, reply) => {
                let _ = reply.send(answer_policy(state, &request));
            }
        }
    }

    async fn shut_down(&mut self) {
        tracing::info!(
            folded_seq = self.machine.state().last_seq.0,
            "shutting down"
        );
        if self.publishing.is_some() {
            match tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, task_done(&mut self.publishing)).await
            {
                // The batch is on the log or not; a fatal answer changes nothing now.
                Ok(Ok(outcome)) => {
                    let _ = self.published(outcome).await;
                }
                Ok(Err(_)) => {}
                Err(_) => {
                    if let Some(task) = self.publishing.take() {
                        task.abort();
                    }
                }
            }
        }
        self.flush_deliveries().await;
        self.snapshot_settled().await;
        self.snapshot("shutdown");
        self.snapshot_settled().await;
        if self.is_leader() {
            let _ = tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, self.lease.release()).await;
            self.leadership = Leadership::Standby;
            tracing::info!("lease released");
        }
        if let Some(task) = self.tick_task.take() {
            let _ = tokio::time::timeout(SHUTDOWN_STEP_TIMEOUT, task).await;
        }
    }
}
