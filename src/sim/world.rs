//! The event loop: a virtual clock, a queue of timed events, and the actors
//! (submitter, ticker, engines, projector) acting on the simulated log.
//!
//! The queue is a min-heap keyed by (virtual time, insertion counter), so events
//! at the same instant run in the order they were scheduled. The loop runs in
//! rounds: every event due at the earliest instant is handled, then the
//! projector catches up with the log and may decide once. Deciding once per
//! instant, not once per entry, is what a projector reading a busy stream does.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use crate::core::event::{
    Envelope, Event, JobSpec, LibraryInfo, LibraryRef, OrderBatch, Origin, TaskSet, TaskTemplate,
};
use crate::core::ids::{EngineId, JobId, Seq, TaskRef};
use crate::core::replay::{replay, ReplayOptions};
use crate::core::rng::SplitMix64;
use crate::core::state::{JobStatus, State, TaskStatus};
use crate::files::scenario::{JobPlan, Scenario, PER_MILLION};
use crate::engine::machine::{Action, StopReason};
use crate::engine::runner::{RunEnd as ProcessEnd, RunOutcome};
use crate::core::event::Order;
use crate::wire::delivery::{Delivery, DeliveryKind};

use super::engine::{BusyRun, Run, RunEnd, RunKey, SimEngine};
use super::log::{Appended, SimLog, EPOCH_MS};
use super::projector::SimProjector;
use super::report::{FaultCounts, Outcome, SimReport, TaskCheck};
use super::{RunOptions, SimError, SimProgress};

/// Virtual time between two `Tick` entries.
pub const TICK_MS: u64 = 1_000;
/// Most events handled per entry of the entry cap: bounds the loop whatever happens.
const EVENTS_PER_ENTRY_MAX: u64 = 64;
/// How often progress is reported.
const PROGRESS_EVERY_ENTRIES: u64 = 4_096;
/// A late duplicate with a new id arrives up to this long after the original.
const LATE_DUPLICATE_WITHIN_MS: u64 = 30_000;

/// Independent random streams, so that (say) the ids drawn do not shift when a
/// fault probability changes the number of fault draws. All derive from the seed.
struct Streams {
    /// Envelope ids of reports and submissions.
    ids: SplitMix64,
    /// Durations, task failures, heartbeat phases.
    work: SplitMix64,
    /// Engine crashes, late starts, duplicates.
    faults: SplitMix64,
    /// Publish jitter.
    projector: SplitMix64,
    /// Projector restarts: when, how, and whether the publish in flight is lost.
    restarts: SplitMix64,
    /// Library sync failures.
    libraries: SplitMix64,
}

impl Streams {
    fn new(seed: u64) -> Self {
        Streams {
            ids: SplitMix64::for_sequence(seed, 1),
            work: SplitMix64::for_sequence(seed, 2),
            faults: SplitMix64::for_sequence(seed, 3),
            projector: SplitMix64::for_sequence(seed, 4),
            restarts: SplitMix64::for_sequence(seed, 5),
            libraries: SplitMix64::for_sequence(seed, 6),
        }
    }
}

fn id_from(rng: &mut SplitMix64) -> [u8; 16] {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&rng.next_u64().to_le_bytes());
    id[8..].copy_from_slice(&rng.next_u64().to_le_bytes());
    id
}

/// Ids that are functions of what they name, as their publishers derive them, so
/// two publishers of the same thing are deduplicated by the log.
fn derived_id(seed: u64, salt: u64, value: u64) -> [u8; 16] {
    id_from(&mut SplitMix64::for_sequence(seed ^ salt, value))
}
const TICK_ID_SALT: u64 = 0x7469_636b; // "tick"
const BATCH_ID_SALT: u64 = 0x62_6174_6368; // "batch"

#[derive(Debug)]
enum SimEvent {
    SetPolicy,
    Submit { job: usize },
    Login { engine: usize },
    Tick,
    Heartbeat { engine: usize, incarnation: u32 },
    /// A network hop to the log (an engine's report, or a duplicate of one).
    /// `late_copy`: a duplicate sent with a new id, which the fold must reject.
    /// Boxed: an envelope is several times larger than every other variant.
    Append { origin: Origin, envelope: Box<Envelope>, late_copy: bool },
    Publish { token: u64, incarnation: u32, batch: OrderBatch, expected_last_orders_seq: Seq },
    /// Boxed: a run carries its command.
    Deliver { engine: usize, delivery: Box<Delivery> },
    PublishLibrary { library: usize },
    SyncEnd { engine: usize, incarnation: u32, library: LibraryRef },
    RunStart { engine: usize, incarnation: u32, run: RunKey },
    RunEnd { engine: usize, incarnation: u32, run: RunKey },
    EngineReturn { engine: usize },
    /// A scenario's planned crash of one engine (`crash_at_ms` of its group).
    PlannedCrash { engine: usize },
    ProjectorRestart,
    ProjectorUp,
    /// A scenario's `[[load_changes]]` entry (its index).
    LoadChange { change: usize },
}

#[derive(Debug)]
struct Scheduled {
    time_ms: u64,
    counter: u64,
    event: SimEvent,
}
impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.time_ms, self.counter) == (other.time_ms, other.counter)
    }
}
impl Eq for Scheduled {}
impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.time_ms, self.counter).cmp(&(other.time_ms, other.counter))
    }
}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

pub(super) struct World<'a> {
    scenario: &'a Scenario,
    options: &'a RunOptions,
    now_ms: u64,
    queue: BinaryHeap<Reverse<Scheduled>>,
    counter: u64,
    log: SimLog,
    projector: SimProjector,
    engines: Vec<SimEngine>,
    engine_by_id: BTreeMap<EngineId, usize>,
    job_by_id: BTreeMap<JobId, usize>,
    /// The sequence of each job's submission, once stored.
    submit_seq: Vec<Option<Seq>>,
    /// Jobs before this index are known to have ended.
    jobs_ended_below: usize,
    rng: Streams,
    counts: FaultCounts,
    /// Runs that ended: (start, end, slots), for utilisation.
    busy: Vec<BusyRun>,
    /// Tasks some engine reported completed (whether or not the fold took it).
    completions_reported: BTreeSet<TaskRef>,
    lost_publishes: BTreeSet<u64>,
    next_publish_token: u64,
    /// Restarts waiting for the projector's next publish, to crash with it in flight.
    crashes_armed: u32,
    heartbeat_every_ms: u64,
    next_progress_at: u64,
    /// Companion parts of parallel runs (`DispatchParallel`), by the master's
    /// run: (engine, since, slots). They hold their slots, run nothing, and
    /// are freed when the master's run ends, however it ends.
    holds: BTreeMap<RunKey, Vec<(usize, u64, u32)>>,
}

impl<'a> World<'a> {
    pub(super) fn new(scenario: &'a Scenario, options: &'a RunOptions) -> Self {
        let engines: Vec<SimEngine> = scenario
            .engine_ids()
            .into_iter()
            .map(|(g, id)| {
                let group = &scenario.engines[g];
                let mut engine = SimEngine::new(id, group.slots, group.props.clone());
                engine.speed_percent = group.speed_percent;
                engine.load_values = group.load_values_milli.clone();
                engine.fails_jobs = group.fails_jobs.iter().cloned().collect();
                engine.sync_ms = group.sync_ms;
                engine.remote_slots = group.remote_slots;
                engine
            })
            .collect();
        let engine_by_id = engines.iter().enumerate().map(|(n, e)| (e.id.clone(), n)).collect();
        let job_by_id = scenario.jobs.iter().enumerate().map(|(n, j)| (j.id.clone(), n)).collect();
        let faults = &scenario.faults;
        World {
            scenario,
            options,
            now_ms: 0,
            queue: BinaryHeap::new(),
            counter: 0,
            log: SimLog::new(),
            projector: SimProjector::new(faults.projector_restarts > 0, faults.snapshot_every_entries),
            engines,
            engine_by_id,
            job_by_id,
            submit_seq: vec![None; scenario.jobs.len()],
            jobs_ended_below: 0,
            rng: Streams::new(scenario.seed),
            counts: FaultCounts::default(),
            busy: Vec::new(),
            completions_reported: BTreeSet::new(),
            lost_publishes: BTreeSet::new(),
            next_publish_token: 0,
            crashes_armed: 0,
            heartbeat_every_ms: (scenario.policy.engine_timeout_ms / 3).max(1),
            next_progress_at: PROGRESS_EVERY_ENTRIES,
            holds: BTreeMap::new(),
        }
    }

    fn schedule(&mut self, time_ms: u64, event: SimEvent) {
        assert!(time_ms >= self.now_ms, "an event is scheduled in the past: {event:?}");
        self.counter += 1;
        self.queue.push(Reverse(Scheduled { time_ms, counter: self.counter, event }));
    }

    fn seed_events(&mut self) {
        let scenario = self.scenario;
        self.schedule(0, SimEvent::SetPolicy);
        let mut engine = 0;
        for group in &scenario.engines {
            for _ in 0..group.count {
                self.schedule(group.login_at_ms, SimEvent::Login { engine });
                if let Some(at) = group.crash_at_ms {
                    self.schedule(at.max(group.login_at_ms), SimEvent::PlannedCrash { engine });
                }
                engine += 1;
            }
        }
        for (library, plan) in scenario.libraries.iter().enumerate() {
            self.schedule(plan.publish_at_ms, SimEvent::PublishLibrary { library });
        }
        for (job, plan) in scenario.jobs.iter().enumerate() {
            self.schedule(plan.submit_at_ms, SimEvent::Submit { job });
        }
        for (change, plan) in scenario.load_changes.iter().enumerate() {
            self.schedule(plan.at_ms, SimEvent::LoadChange { change });
        }
        self.schedule(TICK_MS, SimEvent::Tick);
        let faults = &scenario.faults;
        let window_ms = faults
            .restart_window_ms
            .or(scenario.horizon_ms)
            .unwrap_or_else(|| estimated_makespan_ms(scenario))
            .max(1);
        for _ in 0..faults.projector_restarts {
            let at = 1 + self.rng.restarts.below(window_ms);
            self.schedule(at, SimEvent::ProjectorRestart);
        }
    }

    /// Runs to an outcome, then checks the run against a replay of its log.
    pub(super) fn run(mut self, progress: &mut dyn FnMut(SimProgress)) -> Result<(SimReport, SimLog), SimError> {
        let seed = self.scenario.seed;
        self.seed_events();
        let events_max = self.options.entries_max.saturating_mul(EVENTS_PER_ENTRY_MAX).max(1_000);
        let mut events_handled: u64 = 0;
        let outcome = loop {
            let Some(Reverse(next)) = self.queue.peek() else {
                return Err(SimError::Stalled { seed, at_ms: self.now_ms });
            };
            let time_ms = next.time_ms;
            if self.scenario.horizon_ms.is_some_and(|horizon| time_ms > horizon) {
                self.now_ms = self.scenario.horizon_ms.expect("checked");
                break Outcome::Horizon;
            }
            self.now_ms = time_ms;
            while self.queue.peek().is_some_and(|Reverse(next)| next.time_ms == time_ms) {
                let Reverse(scheduled) = self.queue.pop().expect("peeked");
                events_handled += 1;
                if events_handled > events_max {
                    return Err(SimError::EventCap { seed, events: events_handled, at_ms: self.now_ms });
                }
                self.handle(scheduled.event);
            }
            self.projector_round();
            if self.log.len() >= self.next_progress_at {
                self.next_progress_at = self.log.len() + PROGRESS_EVERY_ENTRIES;
                progress(self.progress());
            }
            if self.all_jobs_ended() {
                break Outcome::AllJobsEnded;
            }
            if self.log.len() >= self.options.entries_max {
                break Outcome::EntryCap;
            }
        };
        progress(self.progress());
        self.finish(outcome)
    }

    fn progress(&self) -> SimProgress {
        let jobs_ended = match self.projector.state() {
            Some(state) => (0..self.scenario.jobs.len()).filter(|&j| self.job_has_ended(state, j)).count(),
            None => self.jobs_ended_below,
        };
        SimProgress {
            virtual_ms: self.now_ms,
            entries: self.log.len(),
            jobs_ended: jobs_ended as u64,
            jobs_total: self.scenario.jobs.len() as u64,
        }
    }

    // ---- events --------------------------------------------------------------

    fn handle(&mut self, event: SimEvent) {
        match event {
            SimEvent::SetPolicy => {
                let key = crate::sim::projector::sim_projector_key().verifying_key().to_bytes();
                let registration = Event::ProjectorKeyRegistered { key, name: "simulated projector".into() };
                self.append_now(Origin::Operator, "gridfold-sim", registration);
                let event = Event::PolicySet(self.scenario.policy.clone());
                self.append_now(Origin::Operator, "gridfold-sim", event);
            }
            SimEvent::Submit { job } => {
                let spec = job_spec(&self.scenario.jobs[job]);
                if let Appended::Stored(seq) = self.append_now(Origin::Operator, "gridfold-sim", Event::JobSubmitted(spec)) {
                    self.submit_seq[job] = Some(seq);
                }
            }
            SimEvent::Login { engine } => self.log_in(engine),
            SimEvent::EngineReturn { engine } => {
                self.counts.engine_returns += 1;
                self.log_in(engine);
            }
            SimEvent::PlannedCrash { engine } => {
                if self.engines[engine].alive {
                    self.crash_parts(engine);
                    let intervals = self.engines[engine].crash(self.now_ms);
                    self.busy.extend(intervals);
                    self.counts.engine_crashes += 1;
                }
            }
            SimEvent::Tick => {
                let id = derived_id(self.scenario.seed, TICK_ID_SALT, self.now_ms);
                let envelope = Envelope { id, source: "gridfold-ticker".into(), event: Event::Tick };
                self.append(Origin::Ticker, envelope);
                self.schedule(self.now_ms + TICK_MS, SimEvent::Tick);
            }
            SimEvent::Heartbeat { engine, incarnation } => {
                if self.engines[engine].is_current(incarnation) {
                    let sim = &self.engines[engine];
                    let busy: u32 = sim.runs.values().filter(|r| r.started_ms.is_some()).map(|r| r.slots).sum();
                    let load = crate::core::event::EngineLoad {
                        load_per_core_milli: busy.saturating_mul(1000) / sim.props.cores.max(1),
                        memory_free_mb: sim.props.memory_mb,
                        values_milli: sim.load_values.clone(),
                    };
                    let event = Event::EngineHeartbeat { engine: sim.id.clone(), load };
                    self.report(engine, event, false);
                    self.schedule(self.now_ms + self.heartbeat_every_ms, SimEvent::Heartbeat { engine, incarnation });
                }
            }
            SimEvent::Append { origin, envelope, late_copy } => {
                let login_of = match (&origin, &envelope.event) {
                    (Origin::Engine(id), Event::EngineLoggedIn { .. }) => self.engine_by_id.get(id).copied(),
                    _ => None,
                };
                let appended = self.append(origin, *envelope);
                if late_copy && matches!(appended, Appended::Stored(_)) {
                    self.counts.duplicates_new_id_stored += 1;
                }
                if let (Some(engine), Appended::Stored(seq)) = (login_of, appended) {
                    for delivery in self.engines[engine].login_stored(seq.0) {
                        self.hand_over(engine, delivery);
                    }
                }
            }
            SimEvent::Publish { token, incarnation, batch, expected_last_orders_seq } => {
                self.publish_lands(token, incarnation, batch, expected_last_orders_seq)
            }
            SimEvent::Deliver { engine, delivery } => self.deliver(engine, *delivery),
            SimEvent::PublishLibrary { library } => {
                let plan = &self.scenario.libraries[library];
                let info = LibraryInfo {
                    library: plan.library.clone(),
                    size_bytes: plan.size_bytes,
                    digest_hex: blake3::hash(plan.library.key().as_bytes()).to_hex().to_string(),
                };
                self.append_now(Origin::Operator, "gridfold-sim", Event::LibraryPublished(info));
            }
            SimEvent::SyncEnd { engine, incarnation, library } => self.sync_end(engine, incarnation, library),
            SimEvent::RunStart { engine, incarnation, run } => self.run_start(engine, incarnation, run),
            SimEvent::RunEnd { engine, incarnation, run } => self.run_end(engine, incarnation, run),
            SimEvent::ProjectorRestart => self.projector_restart(),
            SimEvent::ProjectorUp => self.projector.start(&self.log),
            SimEvent::LoadChange { change } => {
                let plan = &self.scenario.load_changes[change];
                let first: usize = self.scenario.engines[..plan.group].iter().map(|group| group.count as usize).sum();
                let count = self.scenario.engines[plan.group].count as usize;
                for sim in &mut self.engines[first..first + count] {
                    sim.load_values.extend(plan.values_milli.iter().map(|(name, &milli)| (name.clone(), milli)));
                }
            }
        }
    }

    fn append(&mut self, origin: Origin, envelope: Envelope) -> Appended {
        let appended = self.log.append(self.now_ms, origin, envelope);
        if matches!(appended, Appended::Duplicate(_)) {
            self.counts.log_deduplicated += 1;
        }
        appended
    }

    fn append_now(&mut self, origin: Origin, source: &str, event: Event) -> Appended {
        let envelope = Envelope { id: id_from(&mut self.rng.ids), source: source.into(), event };
        self.append(origin, envelope)
    }

    /// An engine publishes: the report reaches the log after the report latency.
    /// A run's reports may be stored twice (the duplicate-delivery fault).
    fn report(&mut self, engine: usize, event: Event, duplicable: bool) {
        let sim = &self.engines[engine];
        let origin = Origin::Engine(sim.id.clone());
        let envelope = Box::new(Envelope { id: id_from(&mut self.rng.ids), source: format!("engine:{}", sim.id), event });
        let arrives = self.now_ms + self.scenario.latency.report_ms;
        let faults = &self.scenario.faults;
        if duplicable && self.rng.faults.chance_per_million(faults.duplicate_delivery_per_million) {
            // The publisher's retry: same id, within the log's window, so it is dropped.
            self.counts.duplicates_same_id += 1;
            let again = arrives + 1 + self.rng.faults.below(1_000);
            self.schedule(again, SimEvent::Append { origin: origin.clone(), envelope: envelope.clone(), late_copy: false });
            // Sometimes a copy outside any window, with a new id: the fold must reject it.
            if self.rng.faults.chance_per_million(PER_MILLION / 2) {
                self.counts.duplicates_new_id += 1;
                let late = arrives + 1_000 + self.rng.faults.below(LATE_DUPLICATE_WITHIN_MS);
                let copy = Box::new(Envelope { id: id_from(&mut self.rng.ids), ..(*envelope).clone() });
                self.schedule(late, SimEvent::Append { origin: origin.clone(), envelope: copy, late_copy: true });
            }
        }
        self.schedule(arrives, SimEvent::Append { origin, envelope, late_copy: false });
    }

    fn log_in(&mut self, engine: usize) {
        let now = self.now_ms;
        let sim = &mut self.engines[engine];
        sim.come_up(now);
        let incarnation = sim.incarnation;
        let event = Event::EngineLoggedIn { engine: sim.id.clone(), slots: sim.slots, props: sim.props.clone() };
        self.report(engine, event, false);
        let phase = 1 + self.rng.work.below(self.heartbeat_every_ms);
        self.schedule(now + phase, SimEvent::Heartbeat { engine, incarnation });
    }

    fn deliver(&mut self, engine: usize, delivery: Delivery) {
        let sim = &mut self.engines[engine];
        if !sim.alive {
            self.counts.orders_to_dead_engines += 1;
            return;
        }
        if !sim.first_sight(&delivery.id) {
            self.counts.orders_ignored_as_seen += 1;
            return;
        }
        self.counts.orders_delivered += 1;
        if sim.machine.epoch() == 0 {
            // Its login is not stored yet: the delivery waits in its feed.
            sim.awaiting_login.push(delivery);
            return;
        }
        self.hand_over(engine, delivery);
    }

    /// The engine's machine decides on one delivery; the world carries out
    /// what it asks.
    fn hand_over(&mut self, engine: usize, delivery: Delivery) {
        let redundant_copy = matches!(
            delivery.kind,
            DeliveryKind::Cancel(Order::Cancel { reason: crate::core::event::CancelReason::RedundantCopy, .. })
        );
        assert!(!matches!(delivery.kind, DeliveryKind::Lost(_)), "the news of a loss is not delivered to simulated engines");
        let sim = &mut self.engines[engine];
        // The simulated engines are one process per name: no one to fence them out.
        if let Err(newer) = sim.machine.handle_delivery(delivery) {
            unreachable!("engine {} saw a newer login at {}, but it is alone with its name", sim.id, newer.epoch);
        }
        self.carry_out(engine, redundant_copy);
    }

    /// Carries out what an engine's machine asks: launches become virtual
    /// processes, stops end them at once, reports go to the log.
    /// `redundant_copy`: the actions answer a cancel of a redundant copy.
    fn carry_out(&mut self, engine: usize, redundant_copy: bool) {
        while let Some(action) = self.engines[engine].machine.poll_action() {
            match action {
                Action::Launch { run, .. } if run.companion => {
                    // A companion command: it holds its slots until the master's run ends.
                    self.holds.entry((run.task.clone(), run.attempt)).or_default().push((engine, self.now_ms, run.slots));
                    // Its command is not simulated: it has ended, as far as the machine knows.
                    let outcome = virtual_exit(ProcessEnd::Exited(0), 0, "");
                    self.engines[engine].machine.handle_exited((run.task, run.attempt), &outcome);
                }
                Action::Launch { run, .. } => self.launch(engine, run.task, run.attempt, run.slots),
                Action::NoteCompanion { run } => {
                    // A companion part of a parallel run: it holds its slots until the master's run ends.
                    self.holds.entry((run.task, run.attempt)).or_default().push((engine, self.now_ms, run.slots));
                }
                Action::Stop { key, reason } => self.stop(engine, key, reason, redundant_copy),
                // A suspended run's remaining time does not advance until its resume.
                Action::Suspend { key } => {
                    if self.engines[engine].suspend(&key, self.now_ms) {
                        self.counts.runs_suspended += 1;
                    }
                }
                Action::Resume { key } => {
                    let sim = &mut self.engines[engine];
                    let incarnation = sim.incarnation;
                    if let Some(end_at) = sim.resume(&key, self.now_ms) {
                        self.counts.runs_resumed += 1;
                        self.schedule(end_at, SimEvent::RunEnd { engine, incarnation, run: key });
                    }
                }
                Action::Report(report) => self.report(engine, report.event, true),
                Action::SyncLibrary { library, .. } => self.sync_library(engine, library),
            }
        }
    }

    /// A launch: how the run will go is drawn now, and its process starts,
    /// now or late (the late-start fault).
    fn launch(&mut self, engine: usize, task: TaskRef, attempt: u32, slots: u32) {
        let key: RunKey = (task, attempt);
        let job = self.job_by_id[&key.0.job];
        let mut run = self.plan_run(job, engine);
        run.slots = slots;
        let late = self.rng.faults.chance_per_million(self.scenario.faults.late_start_per_million);
        let delay = if late {
            self.counts.late_starts += 1;
            self.scenario.faults.late_start_delay_ms
        } else {
            0
        };
        let sim = &mut self.engines[engine];
        let incarnation = sim.incarnation;
        let previous = sim.runs.insert(key.clone(), run);
        assert!(previous.is_none(), "an engine runs an attempt once at a time");
        self.schedule(self.now_ms + delay, SimEvent::RunStart { engine, incarnation, run: key });
    }

    /// A stop (a cancel, whatever its reason, or a preemption): the process
    /// ends at once, and the machine hears that it was killed.
    fn stop(&mut self, engine: usize, key: RunKey, reason: StopReason, redundant_copy: bool) {
        if let Some(run) = self.engines[engine].runs.remove(&key) {
            self.end_parts(&key);
            if reason == StopReason::Preempt {
                self.counts.runs_preempted += 1;
            } else {
                self.counts.runs_cancelled += 1;
                if redundant_copy {
                    self.counts.redundant_runs_stopped += 1;
                }
            }
            if let Some(start) = run.started_ms {
                self.busy.push(BusyRun { start_ms: start, end_ms: self.now_ms, slots: run.slots, job: key.0.job.clone() });
            }
            self.start_remote_runs(engine);
        }
        let outcome = virtual_exit(ProcessEnd::Killed, 0, "");
        self.engines[engine].machine.handle_exited(key, &outcome);
    }

    /// A `SyncLibrary`: one sync at a time, and none of a library already held.
    fn sync_library(&mut self, engine: usize, library: LibraryRef) {
        let sim = &mut self.engines[engine];
        if sim.syncing.is_some() || sim.props.libraries.contains(&library) {
            return;
        }
        sim.syncing = Some(library.clone());
        let (incarnation, done_at) = (sim.incarnation, self.now_ms + sim.sync_ms);
        self.counts.library_syncs_run += 1;
        self.schedule(done_at, SimEvent::SyncEnd { engine, incarnation, library });
    }

    /// A sync ends: the library is on the engine's disk, or the fetch failed.
    fn sync_end(&mut self, engine: usize, incarnation: u32, library: LibraryRef) {
        let fails = self.rng.libraries.chance_per_million(self.scenario.faults.sync_failure_per_million);
        let sim = &mut self.engines[engine];
        if !sim.is_current(incarnation) {
            return;
        }
        sim.syncing = None;
        let event = if fails {
            self.counts.library_syncs_failed += 1;
            Event::LibrarySyncFailed { engine: sim.id.clone(), library, error: "simulated fetch failure".into() }
        } else {
            sim.props.libraries.push(library.clone());
            Event::LibrarySynced { engine: sim.id.clone(), library }
        };
        self.report(engine, event, false);
    }

    /// Draws how a run of this job will go.
    fn plan_run(&mut self, job: usize, engine: usize) -> Run {
        let plan: &JobPlan = &self.scenario.jobs[job];
        let jitter = if plan.duration_jitter_ms > 0 { self.rng.work.below(plan.duration_jitter_ms + 1) } else { 0 };
        let sim = &self.engines[engine];
        let duration_ms = sim.scaled_ms(plan.duration_ms + jitter);
        let fails_here = sim.fails_jobs.contains(&plan.id);
        let crash = self.rng.faults.chance_per_million(self.scenario.faults.engine_crash_per_million);
        let (end, end_after_ms) = if crash {
            (RunEnd::Crash, self.rng.faults.below(duration_ms))
        } else if fails_here {
            (RunEnd::FailByRule, 1 + self.rng.work.below(duration_ms))
        } else if self.rng.work.chance_per_million(plan.failure_per_million) {
            (RunEnd::Fail, 1 + self.rng.work.below(duration_ms))
        } else {
            (RunEnd::Complete, duration_ms)
        };
        Run { slots: plan.slots_per_task, started_ms: None, duration_ms, end, end_after_ms }
    }

    /// A run reaches its engine's start; a gateway's waits in its remote
    /// queue for the remote slots first.
    fn run_start(&mut self, engine: usize, incarnation: u32, key: RunKey) {
        let sim = &mut self.engines[engine];
        if !sim.is_current(incarnation) || !sim.runs.contains_key(&key) {
            return;
        }
        if sim.remote_slots.is_none() {
            self.begin_run(engine, key);
            return;
        }
        sim.remote_queue.push_back(key);
        self.start_remote_runs(engine);
    }

    /// Starts what a gateway's remote queue has room for.
    fn start_remote_runs(&mut self, engine: usize) {
        while let Some(key) = self.engines[engine].next_remote_start() {
            self.begin_run(engine, key);
        }
    }

    fn begin_run(&mut self, engine: usize, key: RunKey) {
        let now = self.now_ms;
        let sim = &mut self.engines[engine];
        let incarnation = sim.incarnation;
        let Some(run) = sim.runs.get_mut(&key) else { return };
        run.started_ms = Some(now);
        // Suspended before it started: it ends after its resume.
        let suspended = sim.suspensions.get(&key).is_some_and(|suspension| suspension.since_ms.is_some());
        let end_at = now + run.end_after_ms;
        sim.machine.handle_started(key.clone(), String::new());
        self.carry_out(engine, false);
        if !suspended {
            self.schedule(end_at, SimEvent::RunEnd { engine, incarnation, run: key });
        }
    }

    fn run_end(&mut self, engine: usize, incarnation: u32, key: RunKey) {
        let now = self.now_ms;
        let sim = &mut self.engines[engine];
        if !sim.is_current(incarnation) || sim.end_postponed(&key, now) {
            return;
        }
        sim.suspensions.remove(&key);
        let Some(run) = sim.runs.remove(&key) else { return };
        self.end_parts(&key);
        let start = run.started_ms.expect("a run ends after it starts");
        let exited = match run.end {
            RunEnd::Complete => {
                self.completions_reported.insert(key.0.clone());
                virtual_exit(ProcessEnd::Exited(0), run.duration_ms, "")
            }
            RunEnd::Fail | RunEnd::FailByRule => {
                if run.end == RunEnd::Fail {
                    self.counts.task_failures += 1;
                } else {
                    self.counts.rule_failures += 1;
                }
                virtual_exit(ProcessEnd::Exited(1), run.duration_ms, "simulated failure")
            }
            RunEnd::Crash => {
                self.engines[engine].runs.insert(key, run);
                self.crash_parts(engine);
                let intervals = self.engines[engine].crash(now);
                self.busy.extend(intervals);
                self.counts.engine_crashes += 1;
                if let Some(after) = self.scenario.faults.crashed_engines_return_after_ms {
                    self.schedule(now + after, SimEvent::EngineReturn { engine });
                }
                return;
            }
        };
        self.busy.push(BusyRun { start_ms: start, end_ms: now, slots: run.slots, job: key.0.job.clone() });
        self.engines[engine].machine.handle_exited(key, &exited);
        self.carry_out(engine, false);
        if self.engines[engine].alive {
            self.start_remote_runs(engine);
        }
    }

    /// A master's run ended: its companion parts free their slots.
    fn end_parts(&mut self, key: &RunKey) {
        let Some(parts) = self.holds.remove(key) else { return };
        for (_, since, slots) in parts {
            self.busy.push(BusyRun { start_ms: since, end_ms: self.now_ms, slots, job: key.0.job.clone() });
        }
    }

    /// An engine dies: the parallel runs it was master of free their parts,
    /// and the parts it held for others are gone with it.
    fn crash_parts(&mut self, engine: usize) {
        if self.holds.is_empty() {
            return;
        }
        let masters: Vec<RunKey> = self.engines[engine].runs.keys().cloned().collect();
        for key in &masters {
            self.end_parts(key);
        }
        let now = self.now_ms;
        for (key, parts) in &mut self.holds {
            parts.retain(|&(e, since, slots)| {
                if e == engine {
                    self.busy.push(BusyRun { start_ms: since, end_ms: now, slots, job: key.0.job.clone() });
                }
                e != engine
            });
        }
    }

    // ---- the projector -------------------------------------------------------

    /// The projector catches up, delivers, and may decide. A projector that dies
    /// just after publishing and restarts at once gets a second round at the same
    /// instant, so its successor decides while the batch is still in flight.
    fn projector_round(&mut self) {
        for _ in 0..2 {
            let deliveries = self.projector.catch_up(&self.log, self.options.check_invariants);
            let delivered_at = self.now_ms + self.scenario.latency.delivery_ms;
            for delivery in deliveries {
                let engine = self.engine_by_id[&delivery.engine];
                self.schedule(delivered_at, SimEvent::Deliver { engine, delivery: Box::new(delivery) });
            }
            let Some(batch) = self.projector.poll() else { return };
            let token = self.next_publish_token;
            self.next_publish_token += 1;
            self.projector.publishing = Some(token);
            let latency = &self.scenario.latency;
            let jitter = if latency.publish_jitter_ms > 0 { self.rng.projector.below(latency.publish_jitter_ms + 1) } else { 0 };
            let event = SimEvent::Publish {
                token,
                incarnation: self.projector.incarnation,
                batch,
                expected_last_orders_seq: self.projector.last_orders_seq(),
            };
            self.schedule(self.now_ms + latency.publish_ms + jitter, event);
            if self.crashes_armed == 0 {
                return;
            }
            self.crashes_armed -= 1;
            self.projector_crash();
            if !self.projector.is_up() {
                return;
            }
        }
    }

    fn publish_lands(&mut self, token: u64, incarnation: u32, batch: OrderBatch, expected: Seq) {
        if self.lost_publishes.remove(&token) {
            return;
        }
        let ours = incarnation == self.projector.incarnation;
        let id = derived_id(self.scenario.seed, BATCH_ID_SALT, batch.based_on_seq.0);
        let envelope = Envelope { id, source: "gridfold-projector".into(), event: Event::OrderBatch(batch) };
        match self.log.append_fenced(self.now_ms, Origin::Projector, envelope, Some(expected)) {
            Appended::Stored(_) => {
                if ours {
                    self.projector.publish_acked(false);
                } else {
                    self.counts.publishes_after_restart += 1;
                }
            }
            Appended::Duplicate(_) => {
                self.counts.log_deduplicated += 1;
                self.counts.publishes_deduplicated += 1;
                if ours {
                    self.projector.publish_acked(true);
                }
            }
            Appended::Fenced { .. } => {
                self.counts.publishes_fenced += 1;
                if ours {
                    self.projector.publish_refused();
                }
            }
        }
    }

    /// A restart due: half the time the projector dies at once, whatever it is doing;
    /// otherwise just after it next sends a batch, so that batch is in flight when it dies.
    fn projector_restart(&mut self) {
        if !self.projector.is_up() {
            return; // already down: this restart folds into the one under way
        }
        if self.projector.publishing.is_none() && self.rng.restarts.chance_per_million(PER_MILLION / 2) {
            self.crashes_armed += 1;
        } else {
            self.projector_crash();
        }
    }

    fn projector_crash(&mut self) {
        if let Some(token) = self.projector.crash() {
            let faults = &self.scenario.faults;
            if self.rng.restarts.chance_per_million(faults.lost_publish_on_restart_per_million) {
                self.counts.publishes_lost += 1;
                self.lost_publishes.insert(token);
            }
        }
        let downtime = self.scenario.faults.restart_downtime_ms;
        if downtime == 0 {
            self.projector.start(&self.log);
        } else {
            self.schedule(self.now_ms + downtime, SimEvent::ProjectorUp);
        }
    }

    // ---- the end -------------------------------------------------------------

    fn job_has_ended(&self, state: &State, job: usize) -> bool {
        let Some(seq) = self.submit_seq[job] else { return false };
        match state.job_idx(&self.scenario.jobs[job].id) {
            Some(idx) => state.job(idx).status != JobStatus::Active,
            None => state.last_seq >= seq, // refused at submission
        }
    }

    /// Whether every job has ended, as the projector (up and caught up) sees it.
    fn all_jobs_ended(&mut self) -> bool {
        let Some(state) = self.projector.state() else { return false };
        if state.last_seq != self.log.last_seq() {
            return false;
        }
        while self.jobs_ended_below < self.scenario.jobs.len() && self.job_has_ended(state, self.jobs_ended_below) {
            self.jobs_ended_below += 1;
        }
        // Ended jobs' attempts still running end too: the run stops once their cancels are folded.
        self.jobs_ended_below == self.scenario.jobs.len() && state.live_attempts().is_empty()
    }

    fn finish(mut self, outcome: Outcome) -> Result<(SimReport, SimLog), SimError> {
        let seed = self.scenario.seed;
        if !self.projector.is_up() {
            self.projector.start(&self.log);
        }
        // Whatever the projector had not folded yet; the orders would be delivered after the stop.
        let _ = self.projector.catch_up(&self.log, self.options.check_invariants);
        let live = self.projector.state().expect("the projector is up");

        // (a) A replay from nothing reaches the same chain, and re-derives every batch.
        let options = ReplayOptions { verify: true, stop_at: None, check_invariants: false };
        let (replayed, replay_report) = replay(State::new(), self.log.entries(), &options, &mut |_| {});
        if replayed.chain != live.chain {
            return Err(SimError::ChainMismatch { seed, live: live.chain.to_hex(), replayed: replayed.chain.to_hex() });
        }
        if let Some(problem) = replay_report.not_verified(&[]).first() {
            return Err(SimError::Divergence { seed, detail: problem.to_string() });
        }
        // (b) The live projector, restarts and all, holds exactly the replayed state.
        let live_state_digest = live.state_digest();
        let state_digest = replayed.state_digest();
        if live_state_digest != state_digest {
            return Err(SimError::StateMismatch {
                seed,
                live: live_state_digest.to_hex(),
                replayed: state_digest.to_hex(),
            });
        }

        let report = self.report_on(&replayed, outcome, replay_report.rejected_entries);
        if !report.task_check.holds() {
            return Err(SimError::TaskCheck { seed, problems: report.task_check.problems.join("; ") });
        }
        Ok((report, self.log))
    }

    fn report_on(&self, state: &State, outcome: Outcome, rejected_entries: u64) -> SimReport {
        let scenario = self.scenario;
        let stop = self.now_ms;
        let (mut done, mut failed, mut cancelled, mut refused, mut unfinished) = (0, 0, 0, 0, 0);
        let mut first_submit: Option<u64> = None;
        let mut last_end: u64 = 0;
        for (j, plan) in scenario.jobs.iter().enumerate() {
            match state.job_idx(&plan.id) {
                Some(idx) => {
                    let job = state.job(idx);
                    let submitted = job.submitted_ms - EPOCH_MS;
                    first_submit = Some(first_submit.map_or(submitted, |f| f.min(submitted)));
                    match job.status {
                        JobStatus::Active => {
                            unfinished += 1;
                            last_end = stop;
                        }
                        JobStatus::Done => done += 1,
                        JobStatus::Failed => failed += 1,
                        JobStatus::Cancelled => cancelled += 1,
                    }
                    if let Some(ended) = job.ended_ms {
                        last_end = last_end.max(ended - EPOCH_MS);
                    }
                }
                None if self.submit_seq[j].is_some() => refused += 1,
                None => unfinished += 1,
            }
        }
        let window = first_submit.map(|start| (start, last_end.max(start)));
        let makespan_ms = window.map_or(0, |(start, end)| end - start);
        let overlap = |(a, b): (u64, u64)| window.map_or(0, |(start, end)| b.min(end).saturating_sub(a.max(start)));
        let owners: BTreeMap<&JobId, &str> = scenario.jobs.iter().map(|plan| (&plan.id, plan.owner.as_str())).collect();
        let mut busy: u128 = 0;
        let mut busy_by_owner: BTreeMap<String, u128> = BTreeMap::new();
        let mut count_busy = |job: &JobId, start: u64, end: u64, slots: u32| {
            let slot_ms = overlap((start, end)) as u128 * u128::from(slots);
            busy += slot_ms;
            let owner = owners.get(job).copied().unwrap_or("sim");
            *busy_by_owner.entry(owner.to_string()).or_default() += slot_ms;
        };
        for run in &self.busy {
            count_busy(&run.job, run.start_ms, run.end_ms, run.slots);
        }
        let mut capacity: u128 = 0;
        for engine in &self.engines {
            for interval in engine.alive_intervals(stop) {
                capacity += overlap(interval) as u128 * u128::from(engine.slots);
            }
            for ((task, _), run) in &engine.runs {
                if let Some(start) = run.started_ms {
                    count_busy(&task.job, start, stop, run.slots);
                }
            }
        }
        let utilisation_permille = (busy * 1000).checked_div(capacity).map_or(0, |permille| permille as u64);
        let busy_share_by_owner_permille = busy_by_owner
            .into_iter()
            .map(|(owner, slot_ms)| (owner, (slot_ms * 1000).checked_div(busy).map_or(0, |permille| permille as u64)))
            .collect();
        let totals = &state.totals;
        let wait = self.projector.wait;
        let mut gridserver = self.projector.gridserver.clone();
        gridserver.redundant_results_ignored = state.jobs().map(|job| job.redundant_results).sum();
        gridserver.redundant_copies_dropped = state.jobs().map(|job| job.copies_dropped).sum();
        let task_check = self.check_tasks(state, outcome, &gridserver);
        SimReport {
            seed: scenario.seed,
            outcome,
            stopped_at_ms: stop,
            jobs: scenario.jobs.len() as u64,
            jobs_done: done,
            jobs_failed: failed,
            jobs_cancelled: cancelled,
            jobs_refused: refused,
            jobs_unfinished: unfinished,
            makespan_ms,
            utilisation_permille,
            busy_share_by_owner_permille,
            tasks_done: totals.tasks_done,
            tasks_failed: totals.tasks_failed,
            attempts_failed: totals.attempts_failed,
            requeues: totals.requeues,
            engines_lost: totals.engines_lost,
            dispatches: totals.dispatches,
            wait_ms_mean: wait.sum_ms.checked_div(wait.tasks).unwrap_or(0),
            wait_ms_max: wait.max_ms,
            entries: self.log.len(),
            order_batches: totals.order_batches,
            rejected_entries,
            rejections_by_kind: state.rejections.by_kind.clone(),
            order_problems: self.projector.order_problems.clone(),
            // The first start is the process starting, not a restart.
            projector_restarts: self.projector.restarts_done,
            projector_restarts_planned: scenario.faults.projector_restarts,
            snapshots_taken: self.projector.snapshots_taken,
            faults: self.counts.clone(),
            gridserver,
            task_check,
            chain_digest: state.chain.to_hex(),
            state_digest: state.state_digest().to_hex(),
        }
    }
}

/// Most problems a task check lists.
const TASK_PROBLEMS_MAX: usize = 10;

impl World<'_> {
    /// Every task of every job ended exactly once, as the state says: the tasks'
    /// statuses add up to their jobs' counts and to the counters that saw each
    /// ending, every completion the fold accepted is a first result or an ignored
    /// one, every task done was reported completed by an engine, a job done has
    /// every task done, and when every job has ended so has every task.
    fn check_tasks(&self, state: &State, outcome: Outcome, gridserver: &super::report::GridServerCounts) -> TaskCheck {
        let mut check = TaskCheck::default();
        let mut problems = Vec::new();
        for job in state.jobs() {
            let (mut done, mut failed, mut cancelled, mut unended) = (0u32, 0u32, 0u32, 0u32);
            for index in 0..job.n_tasks() {
                match job.task(index).expect("in range").status {
                    TaskStatus::Done => {
                        done += 1;
                        let task = TaskRef::new(job.id.clone(), index);
                        if !self.completions_reported.contains(&task) {
                            problems.push(format!("{task} is done, but no engine reported it completed"));
                        }
                    }
                    TaskStatus::Failed => failed += 1,
                    TaskStatus::Cancelled => cancelled += 1,
                    TaskStatus::Waiting | TaskStatus::Dispatched | TaskStatus::Running => unended += 1,
                }
            }
            let counts = &job.counts;
            let counted_unended = counts.waiting + counts.dispatched + counts.running;
            if (done, failed, cancelled, unended) != (counts.done, counts.failed, counts.cancelled, counted_unended) {
                problems.push(format!(
                    "job {}: its tasks are {done} done, {failed} failed, {cancelled} cancelled, {unended} unended; \
                     its counts say {}, {}, {}, {counted_unended}",
                    job.id, counts.done, counts.failed, counts.cancelled
                ));
            }
            // A CiGri test campaign ends done with its untried tasks dropped (cancelled).
            let dropped = if job.options.campaign == crate::core::event::CampaignType::Test { cancelled } else { 0 };
            if job.status == JobStatus::Done && done + dropped != job.n_tasks() {
                problems.push(format!("job {} is done with {done} of {} tasks done", job.id, job.n_tasks()));
            }
            if outcome == Outcome::AllJobsEnded && unended > 0 {
                problems.push(format!("job {} ({}) has {unended} tasks not ended", job.id, job.status.as_str()));
            }
            check.tasks += u64::from(job.n_tasks());
            check.done += u64::from(done);
            check.failed += u64::from(failed);
            check.cancelled += u64::from(cancelled);
            check.unended += u64::from(unended);
        }
        let totals = &state.totals;
        if (check.done, check.failed) != (totals.tasks_done, totals.tasks_failed) {
            problems.push(format!(
                "{} tasks done and {} failed, but {} and {} endings were counted: some task ended twice",
                check.done, check.failed, totals.tasks_done, totals.tasks_failed
            ));
        }
        let results = totals.tasks_done + gridserver.redundant_results_ignored;
        if gridserver.completions_accepted != results {
            problems.push(format!(
                "{} completions accepted, but {} first results and {} ignored ones",
                gridserver.completions_accepted, totals.tasks_done, gridserver.redundant_results_ignored
            ));
        }
        problems.truncate(TASK_PROBLEMS_MAX);
        check.problems = problems;
        check
    }
}

/// A rough makespan: the last submission, plus the slot-time of all work spread
/// over every slot, plus the longest run. Only used to place projector restarts.
fn estimated_makespan_ms(scenario: &Scenario) -> u64 {
    let slots: u64 = scenario.engines.iter().map(|g| u64::from(g.count) * u64::from(g.slots)).sum();
    let work: u64 = scenario
        .jobs
        .iter()
        .map(|j| u64::from(j.tasks) * u64::from(j.slots_per_task) * (j.duration_ms + j.duration_jitter_ms / 2))
        .sum();
    let last_submit = scenario.jobs.iter().map(|j| j.submit_at_ms).max().unwrap_or(0);
    let longest = scenario.jobs.iter().map(|j| j.duration_ms + j.duration_jitter_ms).max().unwrap_or(0);
    last_submit + work / slots.max(1) + longest
}

/// The job a scenario's plan submits.
fn job_spec(plan: &JobPlan) -> JobSpec {
    JobSpec {
        id: plan.id.clone(),
        owner: plan.owner.clone(),
        project: plan.project.clone(),
        queue: plan.queue.clone(),
        priority: plan.priority,
        requirements: plan.requirements.clone(),
        max_attempts: plan.max_attempts,
        wall_time_limit_ms: plan.wall_time_limit_ms,
        slots_per_task: plan.slots_per_task,
        template: TaskTemplate { argv: vec!["sim-task".into(), "{index}".into()], params: BTreeMap::new() },
        tasks: TaskSet::Count(plan.tasks),
        options: plan.options.clone(),
        task_conditions: plan.task_conditions.clone(),
    }
}

/// What a virtual process's exit tells the engine's machine.
fn virtual_exit(end: ProcessEnd, duration_ms: u64, stderr_tail: &str) -> RunOutcome {
    RunOutcome {
        end,
        cpu_ms: duration_ms,
        wall_ms: duration_ms,
        stdout_head: Vec::new(),
        stdout_dropped_bytes: 0,
        stderr_tail: stderr_tail.to_string(),
        stdout_truncated: false,
        stderr_truncated: false,
        stdout_kept_bytes: 0,
        stderr_kept_bytes: 0,
    }
}
