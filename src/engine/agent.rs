//! The protocol of one engine: see the module docs of `engine` for the invariants.
//!
//! The decisions are the [`Machine`]'s (which deliveries to act on, what to
//! launch, stop, suspend and report, when a drain gives up); this is its IO
//! shell: the feed and the seals, the keys, the login and its watch,
//! heartbeats, processes and their directories, output and libraries.
//!
//! One loop owns all the state. It waits on a closed set of inputs (the
//! publisher failing, shutdown, a run finishing, a sync ending, the newest login
//! of its name, the heartbeat timer, the next delivery) and reacts to each; it
//! never blocks on a process, and only a `Lost` (stop everything, then log in
//! again) or a catch-up after a stall makes it wait for something in between.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument as _;

use super::feed::{FeedError, OrderAck as _, OrderFeed, OrderMessage};
use super::fresh_dirs::FreshDirs;
use super::groups::{self, WorkDirClaim};
use super::report::{self, Outbox, PublisherGone};
use super::machine::{Action, AttemptKey, Handled, Machine, MachineConfig, OutputKept, TaskReport};
use super::runner::{self, Killer, LaunchSpec, RunNews, RunOutcome};
use super::{EngineConfig, EngineError, EngineReport, FenceEvidence, library, probe};
use crate::core::event::{
    ERROR_TAIL_BYTES_MAX, EngineProps, Envelope, Event, LibraryInfo, LibraryRef,
    StoredStreams,
};
use crate::log::library_store::LibraryStore;
use crate::core::ids::{Attempt, EngineId, Seq, TaskRef};
use crate::core::trust::KeyRing;
use crate::log::{EventLog, LogError, RawEntry};
use crate::wire::delivery::{Delivery, RunTask, decode_sealed_deliveries, delivery_signed_message};

/// Beyond the kill grace, how long stopped processes get to be reaped before the
/// engine gives up waiting for them.
const STOP_SLACK: Duration = Duration::from_secs(5);

/// How many heartbeat intervals an engine whose feed was taken over waits for
/// the newer process's login on the log.
const FEED_TAKEN_LOGIN_WAIT_HEARTBEATS: u32 = 5;
/// How often it asks the log meanwhile.
const FEED_TAKEN_LOGIN_POLL: Duration = Duration::from_millis(100);

/// A sync that ended: the delivery that asked for it, the library, and the error if it failed.
type SyncDone = (String, LibraryRef, Result<(), String>);

/// A question to the key reader: the entries on the keys' subject after this sequence.
type KeysAsked = (u64, oneshot::Sender<Result<Vec<RawEntry>, LogError>>);
/// Most entries the keys' subject may hold for an engine to read them.
pub const KEY_ENTRIES_MAX: usize = 100_000;
/// How long one reading of the keys' subject may take.
const KEYS_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs one engine until `shutdown` completes (then drains, logs out and returns
/// what it did) or until it cannot go on (the log unreachable past the retry
/// budget, a broken order feed, a newer process logged in under its name:
/// [`EngineError::Fenced`]). `log` is where it publishes its events and reads
/// the newest login of its name; `feed` is where its orders come from.
///
/// Whatever it still runs when it returns with an error, or when its future is
/// dropped, is killed (the whole process group, SIGKILL).
pub async fn run_engine<L, F, S>(
    config: EngineConfig,
    log: L,
    mut feed: F,
    shutdown: S,
) -> Result<EngineReport, EngineError>
where
    L: EventLog + Clone + 'static,
    F: OrderFeed,
    S: Future<Output = ()> + Send,
{
    let span = tracing::info_span!("engine", engine = %config.engine);
    async move {
        config.validate()?;
        let work_dir = prepare_work_dir(&config.work_dir)?;
        // Before the login: no other engine uses the directory, and nothing its
        // previous engine's tasks left runs on.
        let claim = groups::claim(&work_dir).await?;
        let fresh_dirs = FreshDirs::start(&work_dir, config.dirs_ahead).map_err(|source| EngineError::WorkDir {
            path: work_dir.join(super::fresh_dirs::FRESH_DIR_NAME),
            source,
        })?;
        // Absolute, as tasks get it in GRIDFOLD_LIBRARY_DIR and run elsewhere.
        let library_dir = std::path::absolute(&config.library_dir).map_err(|source| {
            EngineError::WorkDir {
                path: config.library_dir.clone(),
                source,
            }
        })?;
        let measured = {
            let work_dir = work_dir.clone();
            tokio::task::spawn_blocking(move || probe::measure(&work_dir))
                .await
                .map_err(|err| {
                    EngineError::Internal(format!("the property probe panicked: {err}"))
                })?
        };
        let props = probe::apply_given(measured, &config.given_props)?;
        let (login_ask, login_newest) = spawn_login_watch(log.clone(), config.engine.clone(), config.heartbeat_interval);
        let keys_ask = spawn_key_reader(log.clone(), super::feed::keys_reader_name(&config.engine));
        let (outbox, mut publisher_failed, publisher) =
            report::spawn_publisher(log, config.publish_retry.clone(), config.report_window, config.engine.clone());
        let (run_news_tx, run_news_rx) = mpsc::unbounded_channel();
        let (sync_tx, sync_rx) = mpsc::unbounded_channel();
        let (gateway_tx, gateway_rx) = mpsc::unbounded_channel();
        let gateway = match &config.gateway {
            Some(gateway_config) => Some(super::gateway::start_for(&config.engine, gateway_config.clone(), gateway_tx)?),
            None => None,
        };
        let load_sensor = config.load_sensor.as_deref().map(|path| {
            super::load_sensor::LoadSensor::start(path, super::load_sensor::reply_timeout(config.heartbeat_interval))
        });
        let mut agent = Agent {
            load_sensor,
            machine: Machine::new(MachineConfig {
                engine: config.engine.clone(),
                slots: config.slots,
                seen_max: config.seen_max,
                drain_timeout_ms: u64::try_from(config.drain_timeout.as_millis()).unwrap_or(u64::MAX),
            }),
            origin: Instant::now(),
            killers: BTreeMap::new(),
            config,
            work_dir,
            claim,
            fresh_dirs,
            library_dir,
            props,
            cores_measured: probe::cores(),
            session: Session::default(),
            alive_at: Instant::now(),
            last_sweep: Instant::now(),
            catch_up_due: None,
            login_ask,
            login_newest,
            keys: KeyRing::new(),
            keys_read_to: 0,
            keys_read_at: None,
            keys_ask,
            outbox,
            run_news_tx,
            run_news_rx,
            syncs: BTreeMap::new(),
            sync_tx,
            sync_rx,
            gateway,
            gateway_rx,
        };
        let mut in_hand = None;
        let result = match agent
            .run(&mut feed, shutdown, &mut publisher_failed, &mut in_hand)
            .await
        {
            Err(EngineError::Feed(taken @ FeedError::TakenOver { .. })) => Err(agent.fenced_by_taken_feed(taken).await),
            result => result,
        };
        match result {
            Ok(()) => {
                if let Some(sensor) = agent.load_sensor.take() {
                    sensor.quit().await;
                }
                let report = std::mem::take(agent.machine.counts_mut());
                drop(agent); // closes the outbox: the publisher sends what it holds and ends
                let stored = publisher.await.map_err(|err| {
                    EngineError::Internal(format!("the publisher panicked: {err}"))
                })?;
                tracing::info!(stored, "logged out");
                Ok(report)
            }
            Err(err) => {
                agent.kill_all_now();
                if matches!(err, EngineError::Fenced { .. }) {
                    // What it took is the newer process's: hand it back now, rather
                    // than after the consumer's ack wait.
                    feed.release(in_hand).await;
                } else if let Some(ack) = in_hand
                    && let Err(err) = ack.nak().await
                {
                    tracing::warn!("{err}");
                }
                // The publisher may have failed meanwhile; its error says more.
                Err(match publisher_failed.try_recv() {
                    Ok(publish_err) => publish_err,
                    Err(_) => err,
                })
            }
        }
    }
    .instrument(span)
    .await
}

fn prepare_work_dir(dir: &Path) -> Result<PathBuf, EngineError> {
    let io = |source| EngineError::WorkDir {
        path: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let dir = dir.canonicalize().map_err(io)?;
    match super::work_root::mark_top_of_hierarchy(&dir) {
        Ok(super::work_root::TopDir::Marked) => {
            tracing::info!(work_dir = %dir.display(), "marked the work directory as a top of hierarchy (chattr +T): each job's directory goes to a block group of its own")
        }
        Ok(super::work_root::TopDir::AlreadyMarked) => {}
        Ok(super::work_root::TopDir::Unsupported) => {
            tracing::debug!(work_dir = %dir.display(), "the filesystem keeps no top-of-hierarchy flag")
        }
        Err(err) => tracing::warn!(
            work_dir = %dir.display(),
            "cannot mark the work directory as a top of hierarchy (chattr +T), so attempts' directories may be slow to make: {err}"
        ),
    }
    Ok(dir)
}

#[derive(Debug, Default)]
struct Session {
    id: [u8; 16],
    /// The log sequence of this session's `EngineLoggedIn`: the epoch it opened.
    epoch: u64,
    heartbeats: u64,
}

/// Asks the log, each time it is asked (at most one question waiting), for the
/// newest entry on this engine's login subject, and answers its sequence when
/// it is a login the fold accepts (`core::trust::check_login_entry`), else 0:
/// an entry the fold rejected (an undecodable one, a login with no slots) is
/// no newer login, and is said once. Ends when the agent drops its side. A
/// question the log cannot answer within `timeout` goes unanswered (said at
/// debug level: the publisher says more).
fn spawn_login_watch<L: EventLog + 'static>(
    log: L,
    engine: EngineId,
    timeout: Duration,
) -> (mpsc::Sender<()>, mpsc::Receiver<u64>) {
    let (ask_tx, mut ask_rx) = mpsc::channel::<()>(1);
    let (newest_tx, newest_rx) = mpsc::channel(1);
    let subject = crate::wire::engine_login_subject(&engine);
    tokio::spawn(async move {
        let mut said = 0;
        while ask_rx.recv().await.is_some() {
            let newest = match tokio::time::timeout(timeout, log.last_entry_for_subject(&subject)).await {
                Ok(Ok(None)) => 0,
                Ok(Ok(Some(raw))) => {
                    let entry = crate::wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload);
                    match crate::core::trust::check_login_entry(&entry, &engine) {
                        Ok(()) => raw.seq,
                        Err(rejection) => {
                            if said != raw.seq {
                                said = raw.seq;
                                tracing::warn!(seq = raw.seq, "the newest entry on this engine's login subject is no login the fold accepts ({rejection}): not a newer login of its name");
                            }
                            0
                        }
                    }
                }
                Ok(Err(err)) => {
                    tracing::debug!(subject, "cannot read the newest login: {err}");
                    continue;
                }
                Err(_) => {
                    tracing::debug!(subject, "the newest login was not read within {}", crate::human::duration(timeout));
                    continue;
                }
            };
            if newest_tx.send(newest).await.is_err() {
                break;
            }
        }
    });
    (ask_tx, newest_rx)
}

/// Reads the keys' subject for the agent, one question at a time, through a
/// reader named `reader` (see `EventLog::read_subject`). Ends when the agent
/// drops its side.
fn spawn_key_reader<L: EventLog + 'static>(log: L, reader: String) -> mpsc::Sender<KeysAsked> {
    let (ask_tx, mut ask_rx) = mpsc::channel::<KeysAsked>(1);
    tokio::spawn(async move {
        while let Some((after, answer)) = ask_rx.recv().await {
            let read = log.read_subject(crate::wire::KEYS_SUBJECT, after, &reader, KEY_ENTRIES_MAX).await;
            let _ = answer.send(read);
        }
    });
    ask_tx
}

/// What the engine makes of one message on its order subject.
enum Authenticated {
    /// Sealed by a registered key, for this engine: to act on.
    Deliveries(Vec<Delivery>),
    /// Not deliveries for this engine (it does not decode, or names another engine).
    Undecodable(String),
    /// Deliveries, but not sealed by a key registered on the log.
    Refused(String),
    /// The keys could not be read to tell: the message is left to come again.
    KeysUnread(String),
}

struct Agent {
    config: EngineConfig,
    work_dir: PathBuf,
    /// Held while the agent lives; released after `Drop` killed what still runs.
    claim: WorkDirClaim,
    /// Attempts' directories, made ahead of their starts.
    fresh_dirs: FreshDirs,
    /// `config.library_dir`, absolute.
    library_dir: PathBuf,
    props: EngineProps,
    /// The machine's cores, for the load per core (the login may declare others).
    cores_measured: u32,
    session: Session,
    /// With the last heartbeat the log stored ([`Outbox::heartbeat_stored_at`]),
    /// when the engine last knew the projector's view of it: its login stored, or
    /// a catch-up done. When the newest of these is more than two heartbeat
    /// intervals old, the engine stalled (frozen, starved, cut off from the broker,
    /// busy stopping processes) long enough that the projector may have declared
    /// it lost meanwhile.
    alive_at: Instant,
    /// When the work directory was last swept of attempts past their retention.
    last_sweep: Instant,
    /// A stall was seen (how long it had lasted then): the feed is to be read to
    /// its end before the next delivery is acted on.
    catch_up_due: Option<Duration>,
    /// Asks the login watch for the newest login of this engine's name.
    login_ask: mpsc::Sender<()>,
    login_newest: mpsc::Receiver<u64>,
    /// The projector keys registered on the log, as far as read: a delivery
    /// runs only when one of them sealed it.
    keys: KeyRing,
    /// The log sequence the keys' subject was read to.
    keys_read_to: u64,
    /// When the keys' subject was last read (its start).
    keys_read_at: Option<Instant>,
    keys_ask: mpsc::Sender<KeysAsked>,
    /// The engine's decisions: its epoch, its runs and their slots, what it
    /// has seen, the drain; this shell carries out what it asks.
    machine: Machine,
    /// When the agent started: the machine's time is the milliseconds since.
    origin: Instant,
    /// How to stop, suspend or resume each run the machine launched.
    killers: BTreeMap<AttemptKey, Killer>,
    outbox: Outbox,
    /// What the local runs' supervisors say: started, ended.
    run_news_tx: mpsc::UnboundedSender<(AttemptKey, RunNews)>,
    run_news_rx: mpsc::UnboundedReceiver<(AttemptKey, RunNews)>,
    /// Syncs under way, one per library.
    syncs: BTreeMap<LibraryRef, tokio::task::AbortHandle>,
    sync_tx: mpsc::UnboundedSender<SyncDone>,
    sync_rx: mpsc::UnboundedReceiver<SyncDone>,
    /// `--load-sensor`: asked before each heartbeat (see [`super::load_sensor`]).
    load_sensor: Option<super::load_sensor::LoadSensor>,
    /// `--gateway`: attempts run as remote batch jobs (see [`super::gateway`]).
    gateway: Option<std::sync::Arc<super::gateway::Gateway>>,
    /// The gateway's starts and ends, in order per job.
    gateway_rx: mpsc::UnboundedReceiver<super::gateway::GatewayNotice>,
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill_all_now();
        for (library, sync) in std::mem::take(&mut self.syncs) {
            tracing::info!(%library, "abandoning a library sync as the engine stops");
            sync.abort();
        }
    }
}

impl Agent {
    fn engine(&self) -> &EngineId {
        &self.config.engine
    }

    /// The loop. A delivery taken and not handled when it fails is left in `in_hand`.
    async fn run<F: OrderFeed, S: Future<Output = ()>>(
        &mut self,
        feed: &mut F,
        shutdown: S,
        publisher_failed: &mut oneshot::Receiver<EngineError>,
        in_hand: &mut Option<F::Ack>,
    ) -> Result<(), EngineError> {
        if let Err(err) = self.read_keys().await {
            tracing::warn!("cannot read the projector keys registered on the log yet: {err}; trying again when a delivery comes");
        }
        self.log_in().await?;
        tokio::pin!(shutdown);
        let period = self.config.heartbeat_interval;
        let mut heartbeat = tokio::time::interval_at(Instant::now() + period, period);
        heartbeat.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                failed = &mut *publisher_failed => return Err(publisher_error(failed)),
                () = &mut shutdown => break,
                Some((key, news)) = self.run_news_rx.recv() => self.run_news(key, news).await?,
                Some(notice) = self.gateway_rx.recv() => self.gateway_notice(notice).await?,
                Some(sync) = self.sync_rx.recv() => self.sync_finished(sync).await?,
                Some(newest) = self.login_newest.recv() => self.check_newest_login(newest)?,
                _ = heartbeat.tick() => {
                    // Seen before this heartbeat is stored, and kept until a
                    // delivery comes: the catch-up is for what the feed gives.
                    self.note_stall();
                    self.heartbeat().await;
                    // Not waiting if a question is still open: it answers soon enough.
                    let _ = self.login_ask.try_send(());
                }
                message = feed.next() => {
                    let OrderMessage { subject, payload, ack } = message?;
                    // The heartbeat timer may not have fired yet after a stall:
                    // look again before acting on what the feed gave.
                    self.note_stall();
                    let handled = match self.catch_up_due.take() {
                        Some(stalled) => match self.catch_up(feed, Some(&payload), stalled).await {
                            Ok(()) => self.handle(&subject, &payload).await,
                            Err(err) => Err(err),
                        },
                        None => self.handle(&subject, &payload).await,
                    };
                    match handled {
                        Ok(true) => {
                            if let Err(err) = ack.ack().await {
                                tracing::warn!("{err}; the delivery will come again and be ignored");
                            }
                        }
                        // Left unacknowledged: the broker gives it again after its ack wait.
                        Ok(false) => drop(ack),
                        Err(err) => {
                            // Not handled: the caller hands it back.
                            *in_hand = Some(ack);
                            return Err(err);
                        }
                    }
                }
            }
        }
        self.drain(&mut heartbeat, publisher_failed).await?;
        let logout = self.session_event(
            "EngineLoggedOut",
            Event::EngineLoggedOut {
                engine: self.engine().clone(),
            },
            0,
        );
        self.outbox.send_and_wait(logout).await.map_err(gone)?;
        Ok(())
    }

    async fn log_in(&mut self) -> Result<(), EngineError> {
        self.session = Session {
            id: uuid::Uuid::new_v4().into_bytes(),
            epoch: 0,
            heartbeats: 0,
        };
        // What the library directory holds now: a sync may have completed since the last login.
        self.props.libraries = library::held_libraries(&self.library_dir);
        let login = self.session_event(
            "EngineLoggedIn",
            Event::EngineLoggedIn {
                engine: self.engine().clone(),
                slots: self.config.slots,
                props: self.props.clone(),
            },
            0,
        );
        let stored = self.outbox.send_and_wait(login).await.map_err(gone)?;
        self.session.epoch = stored.seq;
        self.machine.handle_logged_in(stored.seq);
        self.alive_at = Instant::now();
        self.machine.counts_mut().props = self.props.clone();
        tracing::info!(seq = stored.seq, epoch = stored.seq, slots = self.config.slots, props = %self.props, "logged in");
        Ok(())
    }

    /// Marks a catch-up due if the engine stalled: its last sign of life on the log
    /// (see [`Agent::alive_at`]) is late by more than one heartbeat interval.
    fn note_stall(&mut self) {
        let last = match self.outbox.heartbeat_stored_at() {
            Some(stored) => stored.max(self.alive_at),
            None => self.alive_at,
        };
        let since = last.elapsed();
        if since > self.config.heartbeat_interval * 2 && self.catch_up_due.is_none() {
            self.catch_up_due = Some(since);
        }
    }

    /// The engine stalled: the projector may have declared it lost meanwhile, and
    /// its feed may hold, in order, runs decided before the loss and then the
    /// `Lost`. So before acting on any of it, read the feed to its end (for at most
    /// a heartbeat interval) and look at everything it holds (with `in_hand`, the
    /// message just taken from it): a delivery of a newer epoch means another process
    /// took this engine's name ([`EngineError::Fenced`]); a `Lost` of the current
    /// epoch is handled first (stop everything, log in again), so that the runs ahead
    /// of it are then skipped as orders of a closed epoch.
    async fn catch_up<F: OrderFeed>(
        &mut self,
        feed: &mut F,
        in_hand: Option<&[u8]>,
        stalled: Duration,
    ) -> Result<(), EngineError> {
        self.machine.counts_mut().stalls += 1;
        tracing::warn!(
            stalled_ms = stalled.as_millis() as u64,
            heartbeat_ms = self.config.heartbeat_interval.as_millis() as u64,
            "the engine stalled (no heartbeat of it reached the log for {}): \
             reading its orders to the end before acting on any",
            crate::human::duration(stalled)
        );
        let wait = self.config.heartbeat_interval;
        let caught_up = feed.catch_up(wait, usize::from(in_hand.is_some())).await?;
        let held = feed.held();
        if !caught_up {
            tracing::warn!(
                held = held.len(),
                "the order feed was not read to its end within {}; going on with what was read",
                crate::human::duration(wait)
            );
        }
        let mut lost = None;
        for payload in in_hand.into_iter().chain(held.iter().map(|bytes| &bytes[..])) {
            // What is not authentic is refused when it is handled: here it says nothing.
            let Authenticated::Deliveries(deliveries) = self.authenticate(payload, Instant::now()).await else {
                continue;
            };
            for delivery in deliveries {
                self.check_epoch_not_newer(&delivery)?;
                if lost.is_none() && self.machine.is_lost_of_this_epoch(&delivery) {
                    lost = Some(delivery);
                }
            }
        }
        self.alive_at = Instant::now();
        match lost {
            Some(delivery) => {
                tracing::warn!(
                    id = delivery.id,
                    epoch = self.session.epoch,
                    ahead = held.len() + usize::from(in_hand.is_some()),
                    "the projector declared this epoch lost while the engine stalled: handling that before the orders held"
                );
                // Handled now, and so seen: when the feed gives it, it is a repeat.
                self.handle_delivery(delivery).await
            }
            None => {
                tracing::info!(held = held.len(), "caught up: the projector did not declare this epoch lost");
                Ok(())
            }
        }
    }

    /// A delivery of an epoch newer than this process's login was folded after
    /// another process's login under this engine's name.
    fn check_epoch_not_newer(&self, delivery: &Delivery) -> Result<(), EngineError> {
        self.machine.check_epoch_not_newer(delivery).map_err(|newer| self.fenced(newer.epoch, newer.evidence))
    }

    /// The login watch answered: the newest login of this engine's name is at `newest`.
    fn check_newest_login(&self, newest: u64) -> Result<(), EngineError> {
        // Every login of this process is at or before its current one.
        if newest <= self.session.epoch {
            return Ok(());
        }
        Err(self.fenced(newest, FenceEvidence::NewestLogin))
    }

    /// A newer process took this engine's order feed over: it logs in next, if it
    /// has not already. Stops what runs, then waits (at most
    /// [`FEED_TAKEN_LOGIN_WAIT_HEARTBEATS`] heartbeat intervals) for that login to
    /// be on the log, to say where; if none comes, the taken feed is the reason.
    async fn fenced_by_taken_feed(&mut self, taken: FeedError) -> EngineError {
        self.kill_all_now();
        let wait = self.config.heartbeat_interval * FEED_TAKEN_LOGIN_WAIT_HEARTBEATS;
        let deadline = Instant::now() + wait;
        tracing::warn!(
            "{taken}; waiting up to {} for the newer process's login",
            crate::human::duration(wait)
        );
        loop {
            let _ = self.login_ask.try_send(());
            let answered = tokio::time::timeout_at(deadline, self.login_newest.recv()).await;
            match answered {
                Ok(Some(newest)) if newest > self.session.epoch => {
                    return self.fenced(newest, FenceEvidence::FeedTakenOver);
                }
                Ok(Some(_)) => tokio::time::sleep_until(deadline.min(Instant::now() + FEED_TAKEN_LOGIN_POLL)).await,
                // The watch has ended (it answers no more), or the wait ran out.
                Ok(None) | Err(_) => return EngineError::Feed(taken),
            }
            if Instant::now() >= deadline {
                return EngineError::Feed(taken);
            }
        }
    }

    /// Another process logged in under this engine's name at `newer`: the newer
    /// login fences out the older. Says so; the caller stops (killing what runs).
    fn fenced(&self, newer: u64, evidence: FenceEvidence) -> EngineError {
        let err = EngineError::Fenced {
            engine: self.engine().clone(),
            newer_login: newer,
            own_login: self.session.epoch,
            evidence,
        };
        tracing::error!(
            newer_login = newer,
            own_login = self.session.epoch,
            running = self.machine.running_len(),
            "{err}"
        );
        err
    }

    async fn heartbeat(&mut self) {
        self.session.heartbeats += 1;
        if self.last_sweep.elapsed() >= super::WORK_DIR_SWEEP_INTERVAL.min(self.config.work_dir_retention) {
            self.last_sweep = Instant::now();
            self.sweep_work_dir();
        }
        let mut load = probe::load(self.cores_measured);
        if let Some(sensor) = self.load_sensor.as_mut()
            && let Some(sensed) = sensor.poll().await
        {
            super::load_sensor::merge(&mut load.values_milli, sensed);
        }
        let n = self.session.heartbeats;
        let event = self.session_event(
            "EngineHeartbeat",
            Event::EngineHeartbeat {
                engine: self.engine().clone(),
                load,
            },
            n,
        );
        if !self.outbox.offer_heartbeat(event) {
            tracing::warn!("heartbeat dropped: the publisher is behind");
        }
    }

    /// Acts on one message of the order feed: one delivery, or several joined,
    /// when a key registered on the log sealed it for this engine; refuses
    /// anything else (said, acknowledged, not acted on). False: it could not be
    /// told (the keys could not be read), and is to come again.
    async fn handle(&mut self, subject: &str, payload: &[u8]) -> Result<bool, EngineError> {
        let deliveries = match self.authenticate(payload, Instant::now()).await {
            Authenticated::Deliveries(deliveries) => deliveries,
            Authenticated::Undecodable(err) => {
                self.machine.counts_mut().undecodable += 1;
                tracing::warn!(subject, "ignoring a message that is not a delivery for this engine: {err}");
                return Ok(true);
            }
            Authenticated::Refused(why) => {
                self.machine.counts_mut().refused += 1;
                tracing::warn!(subject, "refusing a message on this engine's order subject: {why}");
                return Ok(true);
            }
            Authenticated::KeysUnread(err) => {
                tracing::warn!(subject, "cannot tell whether a registered key sealed a message ({err}): it comes again after the ack wait");
                return Ok(false);
            }
        };
        for delivery in deliveries {
            self.handle_delivery(delivery).await?;
        }
        Ok(true)
    }

    /// The deliveries of one message if a key registered on the log sealed it
    /// for this engine (see [`Authenticated`]). A seal by a key the engine does
    /// not know makes it read the keys' subject again, unless it did since the
    /// message was `received` (the projector seals only with a key the log
    /// registered before the batch it delivers).
    async fn authenticate(&mut self, payload: &[u8], received: Instant) -> Authenticated {
        let (deliveries, seal) = match decode_sealed_deliveries(self.engine(), payload) {
            Ok(decoded) => decoded,
            Err(err) => return Authenticated::Undecodable(err.to_string()),
        };
        let Some(seal) = seal else {
            return Authenticated::Refused("it is not sealed".into());
        };
        let Some(message) = delivery_signed_message(payload, &seal) else {
            return Authenticated::Refused("its seal is not its last field".into());
        };
        if !self.keys.is_registered(&seal.signer)
            && self.keys_read_at.is_none_or(|read| read < received)
            && let Err(err) = self.read_keys().await
        {
            return Authenticated::KeysUnread(err);
        }
        match self.keys.check(&seal, &message) {
            Ok(()) => Authenticated::Deliveries(deliveries),
            Err(problem) => Authenticated::Refused(format!(
                "its seal by key {}: {} (on the log: {} key(s) registered)",
                hex::encode(seal.signer),
                problem.as_str(),
                self.keys.len()
            )),
        }
    }

    /// Reads what is new on the keys' subject and applies it with the fold's rules.
    async fn read_keys(&mut self) -> Result<(), String> {
        self.keys_read_at = Some(Instant::now());
        let (answer, answered) = oneshot::channel();
        self.keys_ask.send((self.keys_read_to, answer)).await.map_err(|_| "the key reader stopped".to_string())?;
        let entries = match tokio::time::timeout(KEYS_READ_TIMEOUT, answered).await {
            Ok(Ok(Ok(entries))) => entries,
            Ok(Ok(Err(err))) => return Err(err.to_string()),
            Ok(Err(_)) => return Err("the key reader stopped".to_string()),
            Err(_) => return Err(format!("no answer within {}", crate::human::duration(KEYS_READ_TIMEOUT))),
        };
        for raw in entries {
            let entry = crate::wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload);
            match self.keys.apply(&entry) {
                Ok(()) => tracing::info!(seq = raw.seq, keys = self.keys.len(), "{} on the log", entry.payload_event().map_or("", Event::kind_name)),
                Err(rejection) => tracing::debug!(seq = raw.seq, "an entry on the keys' subject the fold rejects: {rejection}"),
            }
            self.keys_read_to = self.keys_read_to.max(raw.seq);
        }
        Ok(())
    }

    /// Acts on one delivery, unless it was seen before or is of a closed epoch:
    /// the machine decides, this carries it out.
    async fn handle_delivery(&mut self, delivery: Delivery) -> Result<(), EngineError> {
        let handled = self.machine.handle_delivery(delivery).map_err(|newer| self.fenced(newer.epoch, newer.evidence))?;
        self.carry_out().await?;
        if handled == Handled::Lost {
            self.wait_for_stopped().await?;
            self.log_in().await?;
        }
        Ok(())
    }

    /// Does what the machine asks, in order, until it asks nothing more.
    async fn carry_out(&mut self) -> Result<(), EngineError> {
        while let Some(action) = self.machine.poll_action() {
            match action {
                Action::Launch { run, dispatch, slots } => self.launch(run, dispatch, slots).await,
                Action::NoteCompanion { run } => super::nodefile::note_companion(self.engine(), &run),
                Action::Stop { key, .. } => {
                    if let Some(killer) = self.killers.get(&key) {
                        killer.stop();
                    }
                }
                Action::Suspend { key } => {
                    if let Some(killer) = self.killers.get(&key) {
                        tracing::info!(task = %key.0, attempt = key.1, pgid = killer.pgid().unwrap_or(0), "suspending the attempt's group");
                        killer.suspend();
                    }
                }
                Action::Resume { key } => {
                    if let Some(killer) = self.killers.get(&key) {
                        tracing::info!(task = %key.0, attempt = key.1, pgid = killer.pgid().unwrap_or(0), "resuming the attempt's group");
                        killer.resume();
                    }
                }
                Action::Report(report) => self.publish_task_report(*report).await?,
                Action::SyncLibrary { delivery_id, library, published } => {
                    self.sync_library(&delivery_id, library, published).await?
                }
            }
        }
        Ok(())
    }

    /// Starts a run the machine launched (its slots held), or tells the
    /// machine why it cannot.
    async fn launch(&mut self, run: RunTask, dispatch: Seq, slots: u32) {
        let key = (run.task.clone(), run.attempt);
        match self.spawn(&run, dispatch, &key, slots).await {
            Ok(killer) => {
                self.killers.insert(key, killer);
            }
            Err(message) => self.machine.handle_launch_failed(&run, dispatch, &message),
        }
    }

    /// Prepares a run's directory and environment and starts it: a child
    /// process, or a gateway's remote job.
    async fn spawn(&mut self, run: &RunTask, dispatch: Seq, key: &AttemptKey, slots: u32) -> Result<Killer, String> {
        if let Some(root) = &run.root_library
            && !library::is_held(&self.library_dir, root)
        {
            return Err(format!(
                "engine {} cannot start {} #{}: its job's root library {root} is not synced here (no {} in {})",
                self.engine(),
                run.task,
                run.attempt,
                library::SYNCED_MARKER,
                library::library_path(&self.library_dir, root).display()
            ));
        }
        // The policy in force when the projector dispatched this rules the sweeps from now on.
        self.config.work_dir_retention = Duration::from_millis(run.work_dir_retention_ms.max(1));
        let work_dir = attempt_work_dir(&self.work_dir, &run.task, run.attempt)?;
        if let Err(err) = self.fresh_dirs.make(&work_dir) {
            return Err(format!("engine {} cannot make the work directory {}: {err}", self.engine(), work_dir.display()));
        }
        let mut env = task_env(self.engine(), run, &work_dir, &self.library_dir);
        match super::nodefile::write(&work_dir, run) {
            Ok(Some(path)) => env.push(("GRIDFOLD_NODEFILE".to_string(), path.display().to_string())),
            Ok(None) => {}
            Err(e) => return Err(format!("cannot write the node file: {e}")),
        }
        let spec = LaunchSpec {
            argv: if run.companion { run.companion_argv.clone() } else { run.argv.clone() },
            env,
            work_dir: work_dir.clone(),
            work_dir_made: true,
            wall_time_limit: (run.wall_time_limit_ms > 0)
                .then(|| Duration::from_millis(run.wall_time_limit_ms)),
            kill_grace: self.config.kill_grace,
            group_records: Some(self.claim.records().clone()),
            capture: self.config.output_store.as_ref().filter(|_| !run.companion).map(|_| runner::Capture {
                dir: output_dir(&work_dir),
                bytes_max: run.output_bytes_max.min(self.config.output_bytes_max),
            }),
        };
        if self.gateway.is_some() && !run.companion {
            return self.submit_remote(run, dispatch, key, spec, slots).await;
        }
        // Started by the spawner thread while this loop goes on: its start is
        // reported when it runs (`started`), a program that cannot run as its end.
        let killer = runner::start(spec, key.clone(), self.run_news_tx.clone()).map_err(|err| err.to_string())?;
        if run.companion {
            tracing::debug!(task = %run.task, attempt = run.attempt, argv = %run.companion_argv.join(" "), "starting a companion command");
        } else {
            tracing::debug!(task = %run.task, attempt = run.attempt, argv = %run.argv.join(" "), "starting");
        }
        Ok(killer)
    }

    async fn run_news(&mut self, key: AttemptKey, news: RunNews) -> Result<(), EngineError> {
        match news {
            RunNews::Started { pgid } => self.started(key, pgid).await,
            RunNews::Ended(outcome) => self.finished(key, outcome).await,
        }
    }

    /// A local run's process runs: its start is reported now, so that the
    /// log time of the start (when the attempt begins to count as busy, for
    /// the fair share and CiGri's durations) is the process's.
    async fn started(&mut self, key: AttemptKey, pgid: i32) -> Result<(), EngineError> {
        if self.machine.is_companion(&key) {
            super::nodefile::companion_started(self.engine(), &key.0, key.1, pgid);
            return Ok(());
        }
        tracing::info!(task = %key.0, attempt = key.1, pgid, "started");
        self.machine.handle_started(key, String::new());
        self.carry_out().await
    }

    /// A gateway's run: submitted as a remote batch job (off the loop, as the
    /// command blocks); `TaskStarted` comes when the resource manager starts it.
    async fn submit_remote(&mut self, run: &RunTask, dispatch: Seq, key: &AttemptKey, spec: LaunchSpec, slots: u32) -> Result<Killer, String> {
        let gateway = self.gateway.as_ref().expect("a gateway engine").clone();
        let submitted = {
            let key = key.clone();
            tokio::task::spawn_blocking(move || gateway.submit(key, &spec, slots))
                .await
                .unwrap_or_else(|err| Err(format!("the submission panicked: {err}")))
        };
        match submitted {
            Ok((killer, remote_job)) => {
                tracing::info!(task = %run.task, attempt = run.attempt, remote_job, dispatch = dispatch.0, argv = %run.argv.join(" "), "submitted");
                Ok(killer)
            }
            Err(message) => Err(format!("engine {} cannot submit {} #{}: {message}", self.engine(), run.task, run.attempt)),
        }
    }

    /// A gateway's news of a remote job: its start is reported (with its remote
    /// id), its end handled as a local run's.
    async fn gateway_notice(&mut self, notice: super::gateway::GatewayNotice) -> Result<(), EngineError> {
        match notice {
            super::gateway::GatewayNotice::Started { key, remote_job } => {
                self.machine.handle_started(key, remote_job);
                self.carry_out().await
            }
            super::gateway::GatewayNotice::Ended { key, outcome } => self.finished(key, outcome).await,
        }
    }

    /// Answers a `SyncLibrary`: `LibrarySynced` at once when the library directory
    /// already holds the library; otherwise starts fetching it from the object store
    /// in a task of its own, answered when it ends ([`Agent::sync_finished`]). Without
    /// an object store (embedded mode), or while another sync of it runs, says so.
    async fn sync_library(
        &mut self,
        delivery_id: &str,
        library: LibraryRef,
        published: Option<LibraryInfo>,
    ) -> Result<(), EngineError> {
        if library::is_held(&self.library_dir, &library) {
            tracing::info!(%library, "asked to sync a library already held");
            return self.report_sync(delivery_id, library, Ok(())).await;
        }
        if self.syncs.contains_key(&library) {
            tracing::info!(%library, "asked to sync a library whose sync is under way; its end answers");
            return Ok(());
        }
        let Some(store) = self.config.library_store.clone() else {
            let path = library::library_path(&self.library_dir, &library);
            let error = format!(
                "engine {} has no object store to fetch {library} from (it runs without a broker); \
                 unpack it into {} and create {} there",
                self.engine(),
                path.display(),
                library::SYNCED_MARKER
            );
            return self.report_sync(delivery_id, library, Err(error)).await;
        };
        match &published {
            Some(info) => tracing::info!(%library, size_bytes = info.size_bytes, blake3 = %info.digest_hex, "syncing a library from the object store"),
            None => tracing::info!(%library, "syncing a library from the object store"),
        }
        let library_dir = self.library_dir.clone();
        let done = self.sync_tx.clone();
        let (id, for_task) = (delivery_id.to_string(), library.clone());
        let task = tokio::spawn(async move {
            let result = fetch_and_install(&store, &library_dir, &for_task, published.as_ref()).await;
            let _ = done.send((id, for_task, result));
        });
        self.syncs.insert(library, task.abort_handle());
        Ok(())
    }

    async fn sync_finished(&mut self, (delivery_id, library, result): SyncDone) -> Result<(), EngineError> {
        self.syncs.remove(&library);
        match &result {
            Ok(()) => tracing::info!(%library, "library synced"),
            Err(error) => tracing::warn!(%library, "library sync failed: {error}"),
        }
        self.report_sync(&delivery_id, library, result).await
    }

    /// Publishes `LibrarySynced`, or `LibrarySyncFailed` with the error, for one delivery.
    async fn report_sync(
        &self,
        delivery_id: &str,
        library: LibraryRef,
        result: Result<(), String>,
    ) -> Result<(), EngineError> {
        let engine = self.engine().clone();
        let event = match result {
            Ok(()) => Event::LibrarySynced { engine, library },
            Err(error) => Event::LibrarySyncFailed {
                engine,
                library,
                error: runner::tail_text(error.as_bytes(), ERROR_TAIL_BYTES_MAX),
            },
        };
        let envelope = Envelope {
            id: report::library_report_id(self.engine(), delivery_id, event.kind_name()),
            source: report::source(self.engine()),
            event,
        };
        self.outbox.send(envelope).await.map_err(gone)
    }

    /// A run ended: the machine frees its slots and reports it, unless the
    /// projector ended it first.
    async fn finished(&mut self, key: AttemptKey, outcome: RunOutcome) -> Result<(), EngineError> {
        self.killers.remove(&key);
        if self.machine.is_companion(&key) {
            super::nodefile::companion_ended(&key.0, key.1, self.machine.is_stopping(&key), &outcome);
        }
        self.machine.handle_exited(key, &outcome);
        self.carry_out().await
    }

    /// Stops taking work; waits for running attempts up to the drain timeout, then stops them.
    async fn drain(
        &mut self,
        heartbeat: &mut tokio::time::Interval,
        publisher_failed: &mut oneshot::Receiver<EngineError>,
    ) -> Result<(), EngineError> {
        if self.machine.is_idle() {
            return Ok(());
        }
        tracing::info!(running = self.machine.running_len(), timeout = %crate::human::duration(self.config.drain_timeout), "draining");
        self.machine.handle_shutdown(self.now_ms());
        self.carry_out().await?;
        let mut give_up: Option<Instant> = None;
        while !self.machine.is_idle() {
            let tick_at = self.machine.next_timer_ms().map(|at_ms| self.origin + Duration::from_millis(at_ms));
            tokio::select! {
                biased;
                failed = &mut *publisher_failed => return Err(publisher_error(failed)),
                Some((key, news)) = self.run_news_rx.recv() => self.run_news(key, news).await?,
                Some(notice) = self.gateway_rx.recv() => self.gateway_notice(notice).await?,
                _ = heartbeat.tick() => self.heartbeat().await,
                () = sleep_until_opt(tick_at) => {
                    if self.machine.handle_tick(self.now_ms()) {
                        give_up = Some(Instant::now() + self.config.kill_grace + runner::PIPE_DRAIN_TIMEOUT + STOP_SLACK);
                    }
                    self.carry_out().await?;
                }
                () = sleep_until_opt(give_up) => {
                    tracing::error!(running = self.machine.running_len(), "processes did not end after SIGKILL; not waiting for them");
                    break;
                }
            }
        }
        Ok(())
    }

    /// The machine's time: milliseconds since the agent started.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Waits until every stopped run has ended, bounded.
    async fn wait_for_stopped(&mut self) -> Result<(), EngineError> {
        let give_up =
            Instant::now() + self.config.kill_grace + runner::PIPE_DRAIN_TIMEOUT + STOP_SLACK;
        while !self.machine.is_idle() {
            tokio::select! {
                Some((key, news)) = self.run_news_rx.recv() => self.run_news(key, news).await?,
                Some(notice) = self.gateway_rx.recv() => self.gateway_notice(notice).await?,
                () = tokio::time::sleep_until(give_up) => {
                    tracing::error!(running = self.machine.running_len(), "processes did not end after SIGKILL; forgetting them");
                    self.killers.clear();
                    self.machine.forget_running();
                }
            }
        }
        Ok(())
    }

    /// SIGKILL to every group still running, at once (on the way out after an error).
    fn kill_all_now(&mut self) {
        for (key, killer) in std::mem::take(&mut self.killers) {
            tracing::warn!(task = %key.0, attempt = key.1, "killing an attempt as the engine stops");
            killer.kill_now();
        }
        self.machine.forget_running();
    }

    /// Publishes a report of one run; an end's output is stored first, and
    /// what was stored goes in the report.
    async fn publish_task_report(&mut self, report: TaskReport) -> Result<(), EngineError> {
        let TaskReport { mut event, dispatch, output } = report;
        let (task, attempt) = match &event {
            Event::TaskStarted { task, attempt, .. }
            | Event::TaskCompleted { task, attempt, .. }
            | Event::TaskFailed { task, attempt, .. } => (task.clone(), *attempt),
            _ => unreachable!("only task events are published here"),
        };
        if let Some(kept) = output {
            let output = self.store_output(&task, attempt, dispatch, &kept).await;
            if let Event::TaskCompleted { stored, .. } | Event::TaskFailed { stored, .. } = &mut event {
                *stored = output;
            }
        }
        let id = report::task_report_id(self.engine(), &task, attempt, dispatch, event.kind_name());
        let envelope = Envelope {
            id,
            source: report::source(self.engine()),
            event,
        };
        self.outbox.send(envelope).await.map_err(gone)
    }

    fn session_event(&self, kind: &str, event: Event, n: u64) -> Envelope {
        let id = report::session_event_id(self.engine(), &self.session.id, kind, n);
        Envelope {
            id,
            source: report::source(self.engine()),
            event,
        }
    }
}

/// Fetches `library` into the staging directory, checks it against what was
/// published (the delivery's size and blake3, else the store's own record), and
/// installs it under `library_dir`.
async fn fetch_and_install(
    store: &LibraryStore,
    library_dir: &Path,
    library: &LibraryRef,
    published: Option<&LibraryInfo>,
) -> Result<(), String> {
    let download = library::staging_path(library_dir, ".download")
        .map_err(|e| format!("cannot create the staging directory under {}: {e}", library_dir.display()))?;
    let fetched = match store.fetch(library, &download).await {
        Ok(fetched) => fetched,
        Err(err) => {
            let _ = std::fs::remove_file(&download);
            return Err(format!("fetching {library}: {err}"));
        }
    };
    let (want_size, want_digest, whose) = match published {
        Some(info) => (info.size_bytes, Some(info.digest_hex.clone()), "published"),
        None => (fetched.stored.size_bytes, fetched.stored.digest_hex.clone(), "stored"),
    };
    let wrong_size = fetched.size_bytes != want_size;
    let wrong_digest = want_digest.as_ref().is_some_and(|digest| *digest != fetched.digest_hex);
    if wrong_size || wrong_digest {
        let _ = std::fs::remove_file(&download);
        return Err(format!(
            "{library} fetched from the object store is {} bytes with blake3 {}, but it was {whose} as {want_size} bytes with blake3 {}",
            fetched.size_bytes,
            fetched.digest_hex,
            want_digest.as_deref().unwrap_or("unknown")
        ));
    }
    let (library_dir, library, layout) = (library_dir.to_path_buf(), library.clone(), fetched.stored.layout);
    tokio::task::spawn_blocking(move || library::install(&library_dir, &library, &download, &layout))
        .await
        .map_err(|err| format!("unpacking panicked: {err}"))?
        .map(|_| ())
}

fn gone(_: PublisherGone) -> EngineError {
    EngineError::Internal("the publisher stopped (its error follows, if it had one)".to_string())
}

fn publisher_error(failed: Result<EngineError, oneshot::error::RecvError>) -> EngineError {
    failed.unwrap_or_else(|_| {
        EngineError::Internal("the publisher stopped without saying why".to_string())
    })
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where an attempt's whole output is kept until it is stored and swept:
/// `<work_dir>/<job>/<index>-<attempt>.output`, beside the attempt's directory.
fn output_dir(attempt_dir: &Path) -> PathBuf {
    let mut name = attempt_dir.file_name().unwrap_or_default().to_os_string();
    name.push(".output");
    attempt_dir.with_file_name(name)
}

impl Agent {
    /// Puts an ended attempt's kept stdout and stderr in the object store: what
    /// was stored of each (length, blake3), for its end report. A failure to
    /// store is logged and the report goes on, saying that stream was not
    /// stored: the log's head of stdout and tail of stderr remain.
    async fn store_output(&mut self, task: &TaskRef, attempt: Attempt, dispatch: Seq, outcome: &OutputKept) -> StoredStreams {
        let mut stored = StoredStreams::default();
        let Some(store) = self.config.output_store.clone() else { return stored };
        let Ok(dir) = attempt_work_dir(&self.work_dir, task, attempt).map(|d| output_dir(&d)) else { return stored };
        let streams = [
            (crate::log::output_store::Stream::Stdout, outcome.stdout_truncated, outcome.stdout_kept_bytes),
            (crate::log::output_store::Stream::Stderr, outcome.stderr_truncated, outcome.stderr_kept_bytes),
        ];
        // A stream that kept nothing has no file: nothing to open or store.
        for (stream, truncated, _) in streams.into_iter().filter(|(_, _, kept)| *kept > 0) {
            let path = dir.join(stream.as_str());
            let run = crate::log::output_store::Run { task, attempt, dispatch };
            match store.put(run, stream, &path, truncated).await {
                Ok(Some(put)) => {
                    tracing::debug!(%task, attempt, stream = stream.as_str(), bytes = put.bytes, "output stored");
                    match stream {
                        crate::log::output_store::Stream::Stdout => stored.stdout = Some(put),
                        crate::log::output_store::Stream::Stderr => stored.stderr = Some(put),
                    }
                }
                Ok(None) => {}
                Err(err) => tracing::warn!(%task, attempt, "{err}"),
            }
        }
        stored
    }

    /// Removes the directories of attempts not running here whose last change is
    /// older than the retention, at most [`super::WORK_DIR_SWEEP_MAX`] per sweep.
    /// Only `<job>/<index>-<attempt>` and `<job>/<index>-<attempt>.output` entries
    /// are touched, and job directories left empty; nothing else of the work directory.
    fn sweep_work_dir(&mut self) {
        let now = std::time::SystemTime::now();
        let Some(cutoff) = now.checked_sub(self.config.work_dir_retention) else { return };
        let running: std::collections::BTreeSet<PathBuf> =
            self.machine.running_keys().filter_map(|(task, attempt)| attempt_work_dir(&self.work_dir, task, *attempt).ok()).collect();
        let Ok(jobs) = std::fs::read_dir(&self.work_dir) else { return };
        let mut removed = 0;
        for job in jobs.flatten() {
            let job_path = job.path();
            let name = job.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('@')
                || name.starts_with('.')
                || name == super::LIBRARY_DIR_NAME
                || job_path == self.library_dir
                || !job_path.is_dir()
            {
                continue;
            }
            let Ok(entries) = std::fs::read_dir(&job_path) else { continue };
            for entry in entries.flatten() {
                if removed >= super::WORK_DIR_SWEEP_MAX {
                    return;
                }
                let entry_name = entry.file_name();
                let entry_name = entry_name.to_string_lossy();
                let base = entry_name.strip_suffix(".output").unwrap_or(&entry_name);
                let is_attempt = base
                    .split_once('-')
                    .is_some_and(|(i, a)| i.parse::<u32>().is_ok() && a.parse::<u32>().is_ok());
                let path = entry.path();
                if !is_attempt || running.contains(&job_path.join(base)) {
                    continue;
                }
                let old = entry.metadata().and_then(|m| m.modified()).is_ok_and(|at| at < cutoff);
                if old {
                    match std::fs::remove_dir_all(&path) {
                        Ok(()) => removed += 1,
                        Err(err) => tracing::warn!("removing {}: {err}", path.display()),
                    }
                }
            }
            // Only an empty directory goes; a job's other files stay.
            let _ = std::fs::remove_dir(&job_path);
        }
        if removed > 0 {
            tracing::info!(removed, "attempt directories past their retention removed");
        }
    }
}

/// `<work_dir>/<job>/<index>-<attempt>`. Job ids may hold `.`, so one made of dots
/// only (`.`, `..`) would leave the work directory: refused.
fn attempt_work_dir(work_dir: &Path, task: &TaskRef, attempt: Attempt) -> Result<PathBuf, String> {
    let job = task.job.as_str();
    if job.chars().all(|c| c == '.') {
        return Err(format!(
            "job id {job:?} cannot name a directory under the work directory"
        ));
    }
    Ok(work_dir.join(job).join(format!("{}-{attempt}", task.index)))
}

/// The environment a task runs with, added to the engine's own.
fn task_env(
    engine: &EngineId,
    run: &RunTask,
    work_dir: &Path,
    library_dir: &Path,
) -> Vec<(String, String)> {
    let mut env = vec![
        ("GRIDFOLD_JOB_ID".to_string(), run.task.job.to_string()),
        ("GRIDFOLD_TASK_ID".to_string(), run.task.to_string()),
        (
            "GRIDFOLD_TASK_INDEX".to_string(),
            run.task.index.to_string(),
        ),
        ("GRIDFOLD_ATTEMPT".to_string(), run.attempt.to_string()),
        ("GRIDFOLD_ENGINE".to_string(), engine.to_string()),
        ("GRIDFOLD_SLOTS".to_string(), run.slots.max(1).to_string()),
        (
            "GRIDFOLD_WORKDIR".to_string(),
            work_dir.display().to_string(),
        ),
    ];
    if let Some(root) = &run.root_library {
        let dir = library::library_path(library_dir, root);
        env.push(("GRIDFOLD_LIBRARY_DIR".to_string(), dir.display().to_string()));
    }
    // In name order; two names that map to one variable: the later name wins.
    for (name, value) in &run.params {
        env.push((param_env_name(name), value.clone()));
    }
    env
}

/// `GRIDFOLD_PARAM_` and the name upper-cased, every character but ASCII letters
/// and digits turned into `_`: `frame-rate` → `GRIDFOLD_PARAM_FRAME_RATE`.
pub fn param_env_name(name: &str) -> String {
    let mangled: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("GRIDFOLD_PARAM_{mangled}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ids::JobId;

    #[test]
    fn parameters_become_environment_variables() {
        assert_eq!(param_env_name("frame-rate"), "GRIDFOLD_PARAM_FRAME_RATE");
        assert_eq!(param_env_name("scene"), "GRIDFOLD_PARAM_SCENE");
        assert_eq!(param_env_name("a.b c/é"), "GRIDFOLD_PARAM_A_B_C__");
        let run = RunTask {
            task: TaskRef::new(JobId::new("render").unwrap(), 3),
            attempt: 2,
            argv: vec!["true".into()],
            params: [("scene".to_string(), "intro".to_string())].into(),
            wall_time_limit_ms: 0,
            slots: 0,
            root_library: None,
            output_bytes_max: crate::core::event::OutputPolicy::default().task_bytes_max,
            work_dir_retention_ms: crate::core::event::OutputPolicy::default().work_dir_retention_ms,
            nodes: Vec::new(),
            companion: false,
            companion_argv: Vec::new(),
        };
        let env_of = |run: &RunTask| -> BTreeMap<String, String> {
            let engine = EngineId::new("e1").unwrap();
            task_env(&engine, run, Path::new("/w/render/3-2"), Path::new("/w/libraries"))
                .into_iter()
                .collect()
        };
        let env = env_of(&run);
        assert_eq!(env["GRIDFOLD_TASK_ID"], "render/3");
        assert_eq!(env["GRIDFOLD_TASK_INDEX"], "3");
        assert_eq!(env["GRIDFOLD_ATTEMPT"], "2");
        assert_eq!(
            env["GRIDFOLD_SLOTS"], "1",
            "a run occupies at least one slot"
        );
        assert_eq!(env["GRIDFOLD_PARAM_SCENE"], "intro");
        assert_eq!(env["GRIDFOLD_WORKDIR"], "/w/render/3-2");
        assert!(!env.contains_key("GRIDFOLD_LIBRARY_DIR"), "the job has no root library");
        let rooted = RunTask {
            root_library: Some(LibraryRef::new("render-lib", "2.1.0")),
            ..run
        };
        assert_eq!(env_of(&rooted)["GRIDFOLD_LIBRARY_DIR"], "/w/libraries/render-lib/2.1.0");
    }

    #[test]
    fn work_dirs_stay_under_the_work_dir() {
        let task = |job: &str| TaskRef::new(JobId::new(job).unwrap(), 4);
        assert_eq!(
            attempt_work_dir(Path::new("/w"), &task("j.1"), 2).unwrap(),
            Path::new("/w/j.1/4-2")
        );
        // Ids made only of dots never exist: `JobId` refuses them.
        assert!(JobId::new("..").is_err() && JobId::new(".").is_err());
    }
}
