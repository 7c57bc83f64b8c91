//! Simulated engines: the real engine's [`Machine`] decides, and the simulator
//! gives it virtual processes and virtual time.
//!
//! An engine logs in (with the grid libraries it holds), heartbeats, receives
//! deliveries and hands them to its machine, which decides what runs, stops,
//! is suspended and is reported, as in a real engine (the slots, the epochs,
//! the attempts already seen, a preempted attempt's number run again). The
//! world carries out its actions in virtual time: a launch becomes a process
//! that starts (`TaskStarted`) and exits after its duration, scaled by the
//! engine's speed, with the end it was drawn (a redundant copy is a run like
//! any other); a stop ends the process at once. A library sync runs beside the
//! tasks and reports
//! `LibrarySynced` or `LibrarySyncFailed` after the engine's `sync_ms`. A
//! library synced stays on the engine's disk: a crashed engine that comes back
//! holds it at login. An engine acts on each delivery once: it remembers every
//! delivery id it was given, across crashes, so a redelivered order (a restarted
//! projector re-reads its batches) is ignored.
//!
//! A crash is silent: the engine's runs stop, it sends nothing more, and
//! scheduled events of the dead incarnation are dropped (each carries the
//! incarnation it belongs to). It may come back later as a new incarnation that
//! logs in afresh, running nothing.
//!
//! Until its login is stored an engine knows no epoch, so deliveries that come
//! meanwhile wait for it, as they wait in a real engine's feed. What the world
//! still models by hand: the wall-time limit (a real engine's process runner
//! enforces it; scenarios' runs are not stopped at theirs), and library syncs
//! (one at a time, none of a library already held, answered after `sync_ms`).

use std::collections::{BTreeMap, BTreeSet};

use crate::core::event::{EngineProps, LibraryRef};
use crate::core::ids::{Attempt, EngineId, JobId, TaskRef};
use crate::engine::machine::{Machine, MachineConfig};
use crate::wire::delivery::Delivery;

/// The attempt a run carries out.
pub type RunKey = (TaskRef, Attempt);

/// A run that held its slots from `start_ms` to `end_ms`, for utilisation and
/// each owner's share of the busy slot-time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BusyRun {
    pub start_ms: u64,
    pub end_ms: u64,
    pub slots: u32,
    pub job: crate::core::ids::JobId,
}

/// How a run ends, drawn when the dispatch arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    Complete,
    /// The task fails (non-zero exit).
    Fail,
    /// The task fails because the engine fails every task of its job (`fails_jobs`).
    FailByRule,
    /// The whole engine dies, silently.
    Crash,
}

#[derive(Debug, Clone)]
pub struct Run {
    pub slots: u32,
    /// Virtual time the run started (it reported `TaskStarted`); `None` until then.
    pub started_ms: Option<u64>,
    /// Full duration of the task, used for its report.
    pub duration_ms: u64,
    pub end: RunEnd,
    /// When the end happens, counted from the start.
    pub end_after_ms: u64,
}

/// A run's time spent suspended: since when, if it is now, and in all before.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Suspension {
    pub since_ms: Option<u64>,
    pub total_ms: u64,
}

impl SimEngine {
    /// A `Suspend` of a run this engine holds (started or not): its end waits.
    /// Returns whether it was running (not already suspended).
    pub fn suspend(&mut self, key: &RunKey, now_ms: u64) -> bool {
        if !self.runs.contains_key(key) {
            return false;
        }
        let suspension = self.suspensions.entry(key.clone()).or_default();
        if suspension.since_ms.is_some() {
            return false;
        }
        suspension.since_ms = Some(now_ms);
        true
    }

    /// A `Resume`: the time suspended is added to the run's end. Returns the
    /// run's new end time, if it was suspended and has started.
    pub fn resume(&mut self, key: &RunKey, now_ms: u64) -> Option<u64> {
        let suspension = self.suspensions.get_mut(key)?;
        let since = suspension.since_ms.take()?;
        suspension.total_ms += now_ms - since;
        let run = self.runs.get(key)?;
        let Some(started) = run.started_ms else {
            // Resumed before it started: its start schedules its end as usual.
            self.suspensions.remove(key);
            return None;
        };
        Some(started + run.end_after_ms + suspension.total_ms)
    }

    /// Whether a run's scheduled end at `now_ms` is void: it is suspended, or
    /// a resume moved its end later (a new end event is scheduled then).
    pub fn end_postponed(&self, key: &RunKey, now_ms: u64) -> bool {
        let (Some(suspension), Some(run)) = (self.suspensions.get(key), self.runs.get(key)) else { return false };
        let Some(started) = run.started_ms else { return false };
        suspension.since_ms.is_some() || started + run.end_after_ms + suspension.total_ms > now_ms
    }
}

#[derive(Debug, Clone)]
pub struct SimEngine {
    pub id: EngineId,
    pub slots: u32,
    /// Properties, and the libraries held (reported at each login).
    pub props: EngineProps,
    /// Durations are scaled by `100 / speed_percent`.
    pub speed_percent: u32,
    /// Named load values its heartbeats report besides the load of its runs
    /// (the scenario's `load_values`), in milli-units.
    pub load_values: BTreeMap<String, i64>,
    /// Every run of these jobs' tasks fails here.
    pub fails_jobs: BTreeSet<JobId>,
    pub sync_ms: u64,
    /// The library being synced, if any.
    pub syncing: Option<LibraryRef>,
    pub alive: bool,
    /// Bumped at every crash and return; events of an older incarnation are void.
    pub incarnation: u32,
    /// Delivery ids (`<batch seq>-<order index>`) acted on.
    seen: BTreeSet<String>,
    pub runs: BTreeMap<RunKey, Run>,
    alive_since_ms: Option<u64>,
    /// Runs suspended (`Suspend` orders): their remaining time does not advance.
    pub suspensions: BTreeMap<RunKey, Suspension>,
    /// Closed intervals of virtual time the engine was up, for utilisation.
    alive_intervals: Vec<(u64, u64)>,
    /// A gateway's remote resource manager: at most this many of its slots run
    /// at once (the scenario's `remote_slots`); `None`: runs start at once.
    pub remote_slots: Option<u32>,
    /// A gateway's runs waiting in the remote queue, first come first served.
    pub remote_queue: std::collections::VecDeque<RunKey>,
    /// The engine's decisions; a new one at each incarnation, as a new process.
    pub machine: Machine,
    /// Deliveries that came before this incarnation's login was stored.
    pub awaiting_login: Vec<Delivery>,
}

impl SimEngine {
    pub fn new(id: EngineId, slots: u32, props: EngineProps) -> Self {
        let id_for_machine = id.clone();
        SimEngine {
            id,
            slots,
            props,
            speed_percent: 100,
            load_values: BTreeMap::new(),
            fails_jobs: BTreeSet::new(),
            sync_ms: crate::files::scenario::DEFAULT_SYNC_MS,
            syncing: None,
            alive: false,
            incarnation: 0,
            seen: BTreeSet::new(),
            runs: BTreeMap::new(),
            alive_since_ms: None,
            suspensions: BTreeMap::new(),
            alive_intervals: Vec::new(),
            remote_slots: None,
            remote_queue: std::collections::VecDeque::new(),
            machine: Self::new_machine(id_for_machine, slots),
            awaiting_login: Vec::new(),
        }
    }

    fn new_machine(engine: EngineId, slots: u32) -> Machine {
        Machine::new(MachineConfig {
            engine,
            slots,
            seen_max: crate::engine::SEEN_MAX_DEFAULT,
            drain_timeout_ms: u64::try_from(crate::engine::DRAIN_TIMEOUT_DEFAULT.as_millis()).unwrap_or(u64::MAX),
        })
    }

    pub fn come_up(&mut self, now_ms: u64) {
        assert!(!self.alive, "engine {} comes up twice", self.id);
        assert!(self.runs.is_empty(), "engine {} comes up with runs", self.id);
        self.alive = true;
        self.incarnation += 1;
        self.alive_since_ms = Some(now_ms);
        self.machine = Self::new_machine(self.id.clone(), self.slots);
        self.awaiting_login.clear();
    }

    /// A login of this engine is stored at `seq`: if it is this incarnation's
    /// (the newest), its machine opens that epoch, and takes the deliveries
    /// that waited for it.
    pub fn login_stored(&mut self, seq: u64) -> Vec<Delivery> {
        if !self.alive || seq <= self.machine.epoch() {
            return Vec::new();
        }
        self.machine.handle_logged_in(seq);
        std::mem::take(&mut self.awaiting_login)
    }

    /// True the first time this delivery reaches the engine, false for a repeat.
    pub fn first_sight(&mut self, delivery_id: &str) -> bool {
        self.seen.insert(delivery_id.to_string())
    }

    /// How long a run of `duration_ms` takes on this engine (at least 1 ms).
    pub fn scaled_ms(&self, duration_ms: u64) -> u64 {
        (u128::from(duration_ms) * 100 / u128::from(self.speed_percent.max(1))).clamp(1, u128::from(u64::MAX)) as u64
    }

    /// The engine dies: its runs stop. Returns the busy intervals of the runs
    /// that had started.
    pub fn crash(&mut self, now_ms: u64) -> Vec<BusyRun> {
        assert!(self.alive, "only a live engine crashes");
        self.alive = false;
        self.incarnation += 1;
        self.syncing = None;
        let since = self.alive_since_ms.take().expect("a live engine has come up");
        self.alive_intervals.push((since, now_ms));
        self.suspensions.clear();
        self.remote_queue.clear();
        self.awaiting_login.clear();
        let runs = std::mem::take(&mut self.runs);
        runs.iter()
            .filter_map(|((task, _), run)| {
                run.started_ms.map(|start| BusyRun { start_ms: start, end_ms: now_ms, slots: run.slots, job: task.job.clone() })
            })
            .collect()
    }

    /// The intervals the engine was up, with the current one closed at `now_ms`.
    pub fn alive_intervals(&self, now_ms: u64) -> Vec<(u64, u64)> {
        let mut out = self.alive_intervals.clone();
        if let Some(since) = self.alive_since_ms {
            out.push((since, now_ms));
        }
        out
    }

    /// The run at the front of a gateway's remote queue, taken off it when the
    /// remote slots have room for it (one run always fits an idle cluster);
    /// runs no longer held (cancelled while waiting) are dropped on the way.
    pub fn next_remote_start(&mut self) -> Option<RunKey> {
        let remote_slots = self.remote_slots?;
        let running: u32 = self.runs.values().filter(|run| run.started_ms.is_some()).map(|run| run.slots).sum();
        while let Some(key) = self.remote_queue.front() {
            match self.runs.get(key) {
                Some(run) if run.started_ms.is_none() => {
                    if running > 0 && running + run.slots > remote_slots {
                        return None;
                    }
                    return self.remote_queue.pop_front();
                }
                _ => {
                    self.remote_queue.pop_front();
                }
            }
        }
        None
    }

    pub fn is_current(&self, incarnation: u32) -> bool {
        self.alive && self.incarnation == incarnation
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testkit::{engine_id, linux_props, task};

    #[test]
    fn speed_scales_durations() {
        let mut engine = SimEngine::new(engine_id("e1"), 1, linux_props("lyon", 1024));
        assert_eq!(engine.scaled_ms(1000), 1000);
        engine.speed_percent = 25;
        assert_eq!(engine.scaled_ms(1000), 4000);
        engine.speed_percent = 400;
        assert_eq!((engine.scaled_ms(1000), engine.scaled_ms(1)), (250, 1));
    }

    #[test]
    fn an_engine_acts_on_each_order_once_and_forgets_nothing_when_it_crashes() {
        let mut engine = SimEngine::new(engine_id("e1"), 2, linux_props("lyon", 1024));
        engine.come_up(0);
        assert!(engine.first_sight("5-0"));
        assert!(!engine.first_sight("5-0"));
        assert!(engine.first_sight("5-1"));
        assert!(engine.first_sight("9-0"));
        engine.runs.insert(
            (task("j", 0), 2),
            Run { slots: 1, started_ms: Some(10), duration_ms: 50, end: RunEnd::Complete, end_after_ms: 50 },
        );
        let before = engine.incarnation;
        assert_eq!(engine.crash(30), vec![BusyRun { start_ms: 10, end_ms: 30, slots: 1, job: task("j", 0).job }]);
        assert!(!engine.is_current(before));
        engine.come_up(100);
        assert!(!engine.first_sight("9-0"));
        assert_eq!(engine.alive_intervals(150), vec![(0, 30), (100, 150)]);
    }
}
