//! The engine's decisions without IO, in the shape of the projector's
//! `projector::machine`: inputs go in through `handle_*` methods (a delivery
//! already authenticated, a process that started or exited, a launch that
//! failed, a login stored, a shutdown, the time), and what the shell must do
//! comes out of [`Machine::poll_action`] ([`Action`]: launch this run, stop,
//! suspend or resume that one, publish this report and store its output,
//! sync this library). The agent (`agent.rs`) feeds it from NATS, its
//! processes and the clock; the simulator (`sim`) feeds it virtual processes
//! and virtual time, so a simulated engine decides as a real one does.
//!
//! # Invariants
//!
//! - **No IO, no clock.** Time comes in as milliseconds from an origin the
//!   driver chooses; nothing here reads a clock, a file or the network, and
//!   nothing iterates a hash set. It says what it decides through `tracing`,
//!   which decides nothing.
//! - **Slots.** The slots of the runs it launched and has not seen end never
//!   exceed the engine's; a run that would is reported `TaskFailed`
//!   (`LaunchFailed`) and not launched. Slots are held from the launch, not the
//!   start, as a spawner or a resource manager may take a while.
//! - **At most once.** A delivery id is acted on once, and an attempt launched
//!   at most once (the number given back by a preemption may run again); both
//!   memories are bounded.
//! - **Epochs.** A delivery of an older epoch than the current login is stale
//!   and ignored; one of a newer epoch means another process took the name
//!   ([`NewerLogin`]); until the first login is stored nothing is accepted.
//! - **One end per start.** Every run reported started is reported ended once,
//!   unless the projector ended it first (a cancel, a preemption, a loss): then
//!   it is stopped and nothing more is said.
//!
//! # Not here
//!
//! Authentication of deliveries (seals, keys), the order feed and its
//! catch-up, the login watch, heartbeats and their load, the work directory
//! and each run's environment, whether a library is held, the wall-time limit
//! (the process runner enforces it, stopping the clock while a run is
//! suspended, and says so in the run's end), and how long stopped processes
//! are waited for: the shell's.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::Hash;

use crate::core::event::{CancelReason, FailureKind, LibraryInfo, LibraryRef, Order, StoredStreams, ERROR_TAIL_BYTES_MAX};
use crate::core::event::Event;
use crate::core::ids::{Attempt, EngineId, Seq, TaskRef};
use crate::wire::delivery::{Delivery, DeliveryKind, RunTask};

use super::runner::{tail_text, RunEnd, RunOutcome};
use super::{EngineReport, FenceEvidence};

/// An attempt of a task: what a run carries out.
pub type AttemptKey = (TaskRef, Attempt);

/// What a machine needs to know of its engine.
#[derive(Debug, Clone)]
pub struct MachineConfig {
    pub engine: EngineId,
    /// The slots declared at login.
    pub slots: u32,
    /// Delivery ids and attempts remembered to ignore repeats, each.
    pub seen_max: usize,
    /// How long a shutdown lets running attempts finish before stopping them.
    pub drain_timeout_ms: u64,
}

/// Why the engine stopped an attempt it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The projector cancelled (or requeued) the attempt: say nothing.
    Cancel,
    /// This engine was declared lost: say nothing, log in again.
    Lost,
    /// The drain timeout ran out: report `EngineShutdown`.
    Shutdown,
    /// The projector preempted the attempt (an operator's reschedule): say
    /// nothing, and let the attempt's number run again when it is dispatched again.
    Preempt,
}

/// What the shell is to do, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Start this run (a process, or a resource manager's job) answering the
    /// dispatch at `dispatch`; its `slots` are held already. If it cannot
    /// start, the shell says why with [`Machine::handle_launch_failed`].
    Launch { run: RunTask, dispatch: Seq, slots: u32 },
    /// A companion part of a parallel run with no command of its own: nothing
    /// runs, the shell notes it for the master's node file.
    NoteCompanion { run: RunTask },
    /// Stop the attempt's processes (SIGTERM, then SIGKILL after the grace);
    /// its exit comes back through [`Machine::handle_exited`].
    Stop { key: AttemptKey, reason: StopReason },
    Suspend { key: AttemptKey },
    Resume { key: AttemptKey },
    /// Publish this report of one run (boxed: an event is the largest of these).
    Report(Box<TaskReport>),
    /// Answer a `SyncLibrary` delivery (the shell knows what the library
    /// directory holds and fetches what it lacks).
    SyncLibrary { delivery_id: String, library: LibraryRef, published: Option<LibraryInfo> },
}

/// A report of one run: `TaskStarted`, `TaskCompleted` or `TaskFailed`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskReport {
    pub event: Event,
    /// The log sequence of the batch whose dispatch the run answers: with the
    /// engine and the attempt, the run's identity, so that a run of the same
    /// attempt number again (after a preemption) publishes new reports.
    pub dispatch: Seq,
    /// For an end: the run's kept stdout and stderr, to store before the
    /// report leaves (and fill in its `stored`).
    pub output: Option<OutputKept>,
}

/// What a run's capture kept of its output, for the shell to store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputKept {
    pub stdout_kept_bytes: u64,
    pub stdout_truncated: bool,
    pub stderr_kept_bytes: u64,
    pub stderr_truncated: bool,
}

/// A delivery shows that another process logged in under this engine's name
/// after this one: the newer login fences out the older.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewerLogin {
    pub epoch: u64,
    pub evidence: FenceEvidence,
}

/// What became of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Acted on (its actions are queued).
    Acted,
    /// Its id, or its attempt, was seen before.
    Duplicate,
    /// Of an epoch closed by a later login.
    Stale,
    /// This epoch was declared lost: every run is being stopped; once none
    /// runs ([`Machine::is_idle`]) the engine logs in again.
    Lost,
    /// Not for this engine, or news that needs nothing done.
    Ignored,
}

#[derive(Debug, Clone)]
struct Running {
    slots: u32,
    stop: Option<StopReason>,
    /// A parallel task's companion command: it holds no slots of the engine's
    /// own count (the projector's booking holds them), reports nothing, and
    /// stops when the master's part ends.
    companion: bool,
    dispatch: Seq,
}

/// One engine's protocol state: its epoch, its runs and their slots, what it
/// has seen, a drain under way, and the counts it reports when it stops.
#[derive(Debug, Clone)]
pub struct Machine {
    config: MachineConfig,
    /// The log sequence of the current login's `EngineLoggedIn`; 0 before the first.
    epoch: u64,
    running: BTreeMap<AttemptKey, Running>,
    /// Runs of an attempt number whose preempted run is still being stopped
    /// (with the dispatch each answers): launched when it has stopped.
    runs_after_preemption: BTreeMap<AttemptKey, (RunTask, Seq)>,
    slots_used: u32,
    seen_deliveries: Seen<String>,
    seen_attempts: Seen<AttemptKey>,
    /// When a drain stops what still runs, once a shutdown began.
    drain_deadline_ms: Option<u64>,
    actions: VecDeque<Action>,
    counts: EngineReport,
}

impl Machine {
    pub fn new(config: MachineConfig) -> Self {
        assert!(config.slots > 0 && config.seen_max > 0, "an engine has slots and remembers something");
        Machine {
            seen_deliveries: Seen::new(config.seen_max),
            seen_attempts: Seen::new(config.seen_max),
            config,
            epoch: 0,
            running: BTreeMap::new(),
            runs_after_preemption: BTreeMap::new(),
            slots_used: 0,
            drain_deadline_ms: None,
            actions: VecDeque::new(),
            counts: EngineReport::default(),
        }
    }

    pub fn engine(&self) -> &EngineId {
        &self.config.engine
    }

    /// The current login's epoch; 0 before the first login is stored.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// What it counted (deliveries, starts, ends, stops); the shell adds its own.
    pub fn counts(&self) -> &EngineReport {
        &self.counts
    }

    pub fn counts_mut(&mut self) -> &mut EngineReport {
        &mut self.counts
    }

    /// The next thing the shell is to do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// No run is held: nothing launched waits for its end.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty()
    }

    pub fn running_len(&self) -> usize {
        self.running.len()
    }

    pub fn running_keys(&self) -> impl Iterator<Item = &AttemptKey> {
        self.running.keys()
    }

    pub fn slots_used(&self) -> u32 {
        self.slots_used
    }

    /// Whether this attempt is held as a companion part of a parallel run.
    pub fn is_companion(&self, key: &AttemptKey) -> bool {
        self.running.get(key).is_some_and(|running| running.companion)
    }

    /// Whether this attempt is held and the engine asked it to stop.
    pub fn is_stopping(&self, key: &AttemptKey) -> bool {
        self.running.get(key).is_some_and(|running| running.stop.is_some())
    }

    /// The engine's login is stored at `epoch`: deliveries of earlier epochs are stale from now on.
    pub fn handle_logged_in(&mut self, epoch: u64) {
        assert!(epoch > self.epoch, "a login opens a newer epoch ({epoch} after {})", self.epoch);
        self.epoch = epoch;
        self.counts.logins += 1;
    }

    /// Whether `delivery` is the news that this epoch was declared lost.
    pub fn is_lost_of_this_epoch(&self, delivery: &Delivery) -> bool {
        matches!(&delivery.kind, DeliveryKind::Lost(Order::EngineLost { engine, epoch, .. })
            if engine == self.engine() && *epoch == self.epoch)
    }

    /// A delivery of an epoch newer than this process's login was folded after
    /// another process's login under this engine's name.
    pub fn check_epoch_not_newer(&self, delivery: &Delivery) -> Result<(), NewerLogin> {
        if delivery.epoch <= self.epoch {
            return Ok(());
        }
        let evidence = match delivery.kind {
            DeliveryKind::LoggedIn => FenceEvidence::LoggedInDelivery,
            _ => FenceEvidence::Delivery { id: delivery.id.clone() },
        };
        Err(NewerLogin { epoch: delivery.epoch, evidence })
    }

    /// Acts on one delivery, unless it was seen before or is of a closed epoch.
    pub fn handle_delivery(&mut self, delivery: Delivery) -> Result<Handled, NewerLogin> {
        assert!(self.epoch > 0, "engine {} handles a delivery before its login is stored", self.engine());
        if !self.seen_deliveries.insert(delivery.id.clone()) {
            self.counts.duplicates_ignored += 1;
            tracing::debug!(id = %delivery.id, "ignoring a delivery already seen");
            return Ok(Handled::Duplicate);
        }
        self.check_epoch_not_newer(&delivery)?;
        if delivery.epoch < self.epoch {
            // Of a closed epoch: a run the grid has requeued (and maybe given to
            // another engine), a loss already handled, an older process's news.
            self.counts.stale_ignored += 1;
            tracing::info!(
                id = %delivery.id,
                batch_seq = delivery.batch_seq.0,
                delivery_epoch = delivery.epoch,
                epoch = self.epoch,
                "ignoring a delivery of a closed epoch"
            );
            return Ok(Handled::Stale);
        }
        Ok(match delivery.kind {
            DeliveryKind::Run(run) => self.start(run, delivery.batch_seq),
            DeliveryKind::Cancel(Order::Cancel { task, attempt, engine, reason }) if engine == *self.engine() => {
                self.counts.deliveries += 1;
                self.cancel((task, attempt), reason);
                Handled::Acted
            }
            DeliveryKind::Lost(Order::EngineLost { ref engine, epoch, .. }) if *engine == *self.engine() && epoch == self.epoch => {
                self.counts.deliveries += 1;
                self.handle_lost();
                Handled::Lost
            }
            DeliveryKind::LoggedIn => {
                tracing::debug!(epoch = delivery.epoch, "the projector folded this login");
                Handled::Ignored
            }
            DeliveryKind::SyncLibrary { library, published } => {
                self.counts.deliveries += 1;
                self.actions.push_back(Action::SyncLibrary { delivery_id: delivery.id, library, published });
                Handled::Acted
            }
            DeliveryKind::Control(order) if order.addressee() == Some(self.engine()) => {
                self.counts.deliveries += 1;
                self.control(&order);
                Handled::Acted
            }
            other => {
                tracing::warn!(id = %delivery.id, "ignoring a delivery for another engine: {other}");
                Handled::Ignored
            }
        })
    }

    fn cancel(&mut self, key: AttemptKey, reason: CancelReason) {
        if reason == CancelReason::ParallelEnded {
            // A companion's stop: the attempt's number may run again (after a
            // preemption), as a master's does.
            self.seen_attempts.forget(&key);
        } else {
            // An attempt cancelled before it came is never started.
            self.seen_attempts.insert(key.clone());
        }
        self.runs_after_preemption.remove(&key);
        if let Some(running) = self.running.get_mut(&key) {
            tracing::info!(task = %key.0, attempt = key.1, reason = reason.as_str(), "stopping a cancelled attempt");
            let reason = *running.stop.get_or_insert(StopReason::Cancel);
            self.actions.push_back(Action::Stop { key, reason });
        }
    }

    /// Suspends, resumes or preempts (stops, reporting nothing) an attempt this
    /// engine runs; an order for any other is ignored.
    fn control(&mut self, order: &Order) {
        let (Order::Suspend { task, attempt, .. } | Order::Resume { task, attempt, .. } | Order::Preempt { task, attempt, .. }) =
            order
        else {
            return;
        };
        let key = (task.clone(), *attempt);
        let Some(running) = self.running.get_mut(&key).filter(|running| running.stop.is_none()) else {
            tracing::info!(%task, attempt, %order, "ignoring an order for an attempt this engine does not run");
            return;
        };
        tracing::info!(%task, attempt, "{}", order.kind_name());
        self.actions.push_back(match order {
            Order::Suspend { .. } => Action::Suspend { key },
            Order::Resume { .. } => Action::Resume { key },
            _ => {
                running.stop = Some(StopReason::Preempt);
                Action::Stop { key, reason: StopReason::Preempt }
            }
        });
    }

    /// Launches a `Run` dispatched by the batch at `dispatch`, or reports why it cannot.
    fn start(&mut self, run: RunTask, dispatch: Seq) -> Handled {
        let key = (run.task.clone(), run.attempt);
        if self.running.get(&key).is_some_and(|running| {
            running.stop == Some(StopReason::Preempt) || (running.companion && running.stop.is_some())
        }) {
            // The attempt's number runs again after a preemption, while the
            // preempted run is still stopping: it starts once that has stopped.
            tracing::info!(task = %run.task, attempt = run.attempt, "waiting for the preempted run to stop");
            self.runs_after_preemption.insert(key, (run, dispatch));
            return Handled::Acted;
        }
        if !self.seen_attempts.insert(key.clone()) {
            self.counts.duplicates_ignored += 1;
            tracing::debug!(task = %run.task, attempt = run.attempt, "ignoring an attempt already started");
            return Handled::Duplicate;
        }
        self.counts.deliveries += 1;
        if run.companion && run.companion_argv.is_empty() {
            self.actions.push_back(Action::NoteCompanion { run });
            return Handled::Acted;
        }
        // A companion's slots are the projector's booking, not this engine's count.
        let slots = if run.companion { 0 } else { run.slots.max(1) };
        let free = self.config.slots - self.slots_used;
        if slots > free {
            let message = format!(
                "engine {} cannot start {} #{}: it needs {slots} slot(s) and {free} of the engine's {} are free",
                self.engine(),
                run.task,
                run.attempt,
                self.config.slots
            );
            self.cannot_start(&run, dispatch, &message);
            return Handled::Acted;
        }
        self.slots_used += slots;
        assert!(self.slots_used <= self.config.slots, "slots used beyond the engine's slots");
        self.running.insert(key, Running { slots, stop: None, companion: run.companion, dispatch });
        self.actions.push_back(Action::Launch { run, dispatch, slots });
        Handled::Acted
    }

    /// A launched run could not start (no directory, no library, no program,
    /// the resource manager refused it): its slots are free again, and a master
    /// or plain run is reported failed; a companion's command only says so
    /// (its task is its master's to end).
    pub fn handle_launch_failed(&mut self, run: &RunTask, dispatch: Seq, message: &str) {
        let key = (run.task.clone(), run.attempt);
        if let Some(running) = self.running.remove(&key) {
            self.slots_used -= running.slots;
        }
        self.cannot_start(run, dispatch, message);
    }

    fn cannot_start(&mut self, run: &RunTask, dispatch: Seq, message: &str) {
        if run.companion {
            tracing::warn!(task = %run.task, attempt = run.attempt, "the companion command cannot start: {message}");
            return;
        }
        tracing::warn!(task = %run.task, attempt = run.attempt, "{message}");
        self.counts.failed += 1;
        let event = Event::TaskFailed {
            task: run.task.clone(),
            attempt: run.attempt,
            engine: self.engine().clone(),
            exit_code: None,
            kind: FailureKind::LaunchFailed,
            error_tail: tail_text(message.as_bytes(), ERROR_TAIL_BYTES_MAX),
            stored: StoredStreams::default(),
        };
        self.actions.push_back(Action::Report(Box::new(TaskReport { event, dispatch, output: None })));
    }

    /// A run's process (or remote job) runs: its start is reported, unless the
    /// engine was told to stop it before it ran (the projector that ended it
    /// expects no news of it, and a stop of the engine's own reports how it
    /// ended). `remote_job`: a resource manager's id for it, or empty.
    pub fn handle_started(&mut self, (task, attempt): AttemptKey, remote_job: String) {
        let Some(running) = self.running.get(&(task.clone(), attempt)) else {
            tracing::debug!(%task, attempt, "started after it ended: not reported");
            return;
        };
        if running.companion {
            return;
        }
        if running.stop.is_some() {
            tracing::debug!(%task, attempt, "started after it was stopped: not reported");
            return;
        }
        let dispatch = running.dispatch;
        self.counts.started += 1;
        let event = Event::TaskStarted { task, attempt, engine: self.engine().clone(), remote_job };
        self.actions.push_back(Action::Report(Box::new(TaskReport { event, dispatch, output: None })));
    }

    /// A run ended: its slots are free, and it is reported, unless the
    /// projector ended it first. A run of the same number that came while a
    /// preempted one stopped is launched now.
    pub fn handle_exited(&mut self, key: AttemptKey, outcome: &RunOutcome) {
        let Some(running) = self.running.remove(&key) else {
            tracing::error!(task = %key.0, attempt = key.1, "an attempt the engine does not run ended");
            return;
        };
        self.slots_used -= running.slots;
        if running.companion {
            self.launch_waiting_run(&key);
            return;
        }
        let (task, attempt) = key;
        let engine = self.engine().clone();
        let failed = |kind, exit_code| Event::TaskFailed {
            task: task.clone(),
            attempt,
            engine: engine.clone(),
            exit_code,
            kind,
            error_tail: outcome.stderr_tail.clone(),
            stored: StoredStreams::default(),
        };
        let event = match (running.stop, outcome.end) {
            (Some(StopReason::Preempt), end) => {
                tracing::info!(%task, attempt, %end, "preempted on the projector's order");
                self.counts.stopped_on_order += 1;
                // The number was given back: its next run is a run, not a duplicate.
                let key = (task, attempt);
                self.seen_attempts.forget(&key);
                self.launch_waiting_run(&key);
                return;
            }
            (Some(StopReason::Cancel | StopReason::Lost), end) => {
                tracing::info!(%task, attempt, %end, "stopped on the projector's order");
                self.counts.stopped_on_order += 1;
                return;
            }
            (Some(StopReason::Shutdown), RunEnd::Killed) => {
                self.counts.stopped_at_shutdown += 1;
                failed(FailureKind::EngineShutdown, None)
            }
            (_, RunEnd::Exited(0)) => {
                if outcome.stdout_dropped_bytes > 0 {
                    tracing::info!(%task, attempt, dropped = outcome.stdout_dropped_bytes, "result cut to its first 64 KiB");
                }
                Event::TaskCompleted {
                    task: task.clone(),
                    attempt,
                    engine: engine.clone(),
                    exit_code: 0,
                    cpu_ms: outcome.cpu_ms,
                    wall_ms: outcome.wall_ms,
                    result: outcome.stdout_head.clone(),
                    stored: StoredStreams::default(),
                }
            }
            (_, RunEnd::Exited(code)) => failed(FailureKind::NonZeroExit, Some(code)),
            (_, RunEnd::Signalled(_)) => failed(FailureKind::Signalled, None),
            (_, RunEnd::WallTimeExceeded) => failed(FailureKind::WallTimeExceeded, None),
            (_, RunEnd::Preempted) => failed(FailureKind::Preempted, None),
            (_, RunEnd::NotStarted) => {
                tracing::warn!(%task, attempt, "cannot start: {}", outcome.stderr_tail);
                failed(FailureKind::LaunchFailed, None)
            }
            (None, RunEnd::Killed) => {
                unreachable!("a run is only killed on the engine's request, which records why")
            }
        };
        match &event {
            Event::TaskCompleted { .. } => self.counts.completed += 1,
            _ => self.counts.failed += 1,
        }
        tracing::info!(%task, attempt, end = %outcome.end, wall_ms = outcome.wall_ms, cpu_ms = outcome.cpu_ms, "{}", event.kind_name());
        let output = OutputKept {
            stdout_kept_bytes: outcome.stdout_kept_bytes,
            stdout_truncated: outcome.stdout_truncated,
            stderr_kept_bytes: outcome.stderr_kept_bytes,
            stderr_truncated: outcome.stderr_truncated,
        };
        self.actions.push_back(Action::Report(Box::new(TaskReport { event, dispatch: running.dispatch, output: Some(output) })));
    }

    fn launch_waiting_run(&mut self, key: &AttemptKey) {
        if let Some((run, dispatch)) = self.runs_after_preemption.remove(key) {
            self.start(run, dispatch);
        }
    }

    /// This engine was declared lost (seen on a delivery, or while catching up
    /// after a stall): stop everything; once nothing runs it logs in again.
    pub fn handle_lost(&mut self) {
        tracing::warn!(running = self.running.len(), "declared lost by the projector: stopping everything and logging in again");
        self.runs_after_preemption.clear();
        self.stop_all(StopReason::Lost);
    }

    /// The engine stops taking work: companion commands stop at once (the
    /// logout breaks their attempts anyway); the others may run until
    /// `now_ms` plus the drain timeout ([`Machine::next_timer_ms`]), when
    /// [`Machine::handle_tick`] stops them.
    pub fn handle_shutdown(&mut self, now_ms: u64) {
        for (key, running) in self.running.iter_mut().filter(|(_, running)| running.companion) {
            let reason = *running.stop.get_or_insert(StopReason::Shutdown);
            self.actions.push_back(Action::Stop { key: key.clone(), reason });
        }
        self.drain_deadline_ms = Some(now_ms.saturating_add(self.config.drain_timeout_ms));
    }

    /// When the machine next wants [`Machine::handle_tick`]: the drain's deadline.
    pub fn next_timer_ms(&self) -> Option<u64> {
        self.drain_deadline_ms
    }

    /// The time is `now_ms`. True when the drain's deadline passed now: what
    /// still ran is being stopped (to be reported `EngineShutdown`).
    pub fn handle_tick(&mut self, now_ms: u64) -> bool {
        match self.drain_deadline_ms {
            Some(deadline) if now_ms >= deadline => {
                self.drain_deadline_ms = None;
                tracing::warn!(running = self.running.len(), "drain timeout: stopping what still runs");
                self.stop_all(StopReason::Shutdown);
                true
            }
            _ => false,
        }
    }

    fn stop_all(&mut self, reason: StopReason) {
        for (key, running) in &mut self.running {
            let reason = *running.stop.get_or_insert(reason);
            self.actions.push_back(Action::Stop { key: key.clone(), reason });
        }
    }

    /// The shell gave up on the runs it holds (their processes did not end
    /// after SIGKILL, or the engine stops at once): forgets them and their slots.
    pub fn forget_running(&mut self) {
        self.running.clear();
        self.runs_after_preemption.clear();
        self.slots_used = 0;
    }
}

/// A set that remembers its last `max` insertions.
#[derive(Debug, Clone)]
struct Seen<T> {
    set: HashSet<T>,
    order: VecDeque<T>,
    max: usize,
}

impl<T: Hash + Eq + Clone> Seen<T> {
    fn new(max: usize) -> Self {
        assert!(max > 0);
        Seen { set: HashSet::new(), order: VecDeque::new(), max }
    }

    /// True if `value` was not remembered (it is now).
    fn insert(&mut self, value: T) -> bool {
        if self.set.contains(&value) {
            return false;
        }
        if self.order.len() == self.max {
            let oldest = self.order.pop_front().expect("max > 0");
            self.set.remove(&oldest);
        }
        self.set.insert(value.clone());
        self.order.push_back(value);
        assert_eq!(self.set.len(), self.order.len());
        true
    }

    /// Forgets `value`, if remembered.
    fn forget(&mut self, value: &T) {
        if self.set.remove(value) {
            self.order.retain(|remembered| remembered != value);
        }
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
