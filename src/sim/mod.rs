//! The simulator behind `gridfold sim SCENARIO.toml`: TigerBeetle's VOPR, for gridfold.
//!
//! It drives the **real** projector — [`Machine`](crate::projector::machine::Machine),
//! so the real `fold` and `schedule` — against a log in memory, simulated engines
//! and injected faults, all in virtual time and all decided by one seed. The same
//! scenario and seed give the same log, entry for entry, and so the same digests.
//! The scenario is read, and checked, by [`crate::files::scenario`], which the
//! command line shares; this module only runs one.
//!
//! # What it models
//! - **The log** (`log.rs`): sequence numbers, log time = virtual time at append,
//!   deduplication by envelope id within JetStream's window, and the projector's
//!   fence (expected last sequence of the orders subject).
//! - **The projector** (`projector.rs`): folds every entry in order, decides when
//!   caught up (at most once per virtual instant, one publish in flight), publishes
//!   through the fence, delivers the orders the fold applied, snapshots, crashes and
//!   restarts from its newest snapshot.
//! - **Engines** (`engine.rs`): each decides with the **real** engine's
//!   [`Machine`](crate::engine::machine::Machine) (slots, epochs, orders seen,
//!   cancels, preemptions, suspensions, reports); the world gives it virtual
//!   processes that start and exit after their drawn duration. They log in,
//!   heartbeat every third of the engine timeout, and ignore orders they have
//!   already seen, across crashes too.
//! - **Submitters and tickers**: jobs submitted at their time; a `Tick` every
//!   second of virtual time so the core's timers fire.
//! - **Faults** (per million, from the seed): task failures; engines crashing
//!   silently mid-task (and maybe coming back as a fresh process); engine reports
//!   stored twice — once with the same id (the log drops it), sometimes late with a
//!   new id (the fold must reject it); late starts past the dispatch timeout (the
//!   attempt is requeued, the late reports rejected); projector restarts at seeded
//!   times, whose publish in flight is lost or lands after its successor started.
//!
//! # What it does not model
//! No real network, broker, disk or clock: no partitions, no partial broker failures,
//! no lost or reordered messages within one publisher's stream, no corrupt snapshots,
//! no engine logouts or second projector running concurrently (a restarted projector's
//! predecessor only exists as the publish it left in flight). No wall-time limits
//! (a real engine's process runner enforces them). Requirements are whatever `core::expr` accepts.
//!
//! # What it checks
//! After every entry, `State::check_invariants` (when [`RunOptions::check_invariants`]).
//! At the end, always: the whole log is replayed from nothing with verification — the
//! chain digest must equal the live projector's and every order batch must be
//! re-derived exactly — and the live projector's final state (restarts and all) must
//! have the same `state_digest` as the replay's. A core panic is caught. Every failure
//! is a [`SimError`] whose message begins with the seed.
//!
//! Projector restarts are faults like the others: they may change the log (a
//! restarted projector decides at other moments than its predecessor would have,
//! and a lost publish is decided again later), so a run with restarts does not in
//! general digest like the same run without them. What must hold is the above: the
//! restored projector agrees with a full replay, and every decision replays.
//!
//! # Reproducing a failure
//! A failure names its seed. Running the same scenario with that seed (`seed = SEED`
//! in the file, or `scenario.seed = SEED` in code, with `policy.seed` to match)
//! replays exactly the same run: nothing else is random, and nothing reads a clock.
//! The log it returns can be exported and replayed on its own.

mod engine;
mod log;
mod projector;
mod report;
mod world;

pub use log::{DEDUP_WINDOW_MS, EPOCH_MS};
pub use report::{FaultCounts, GridServerCounts, Outcome, SimReport, TaskCheck};
pub use world::TICK_MS;

use crate::core::event::Entry;
use crate::files::scenario::Scenario;

/// How to run a scenario (what the scenario itself does not say).
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Run `State::check_invariants` after every entry folded. Its cost grows with
    /// the state, so a large scenario runs much faster without it.
    pub check_invariants: bool,
    /// Stop when the log holds this many entries (outcome [`Outcome::EntryCap`]).
    pub entries_max: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions { check_invariants: true, entries_max: 1_000_000 }
    }
}

/// Reported every few thousand entries and once at the end, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimProgress {
    pub virtual_ms: u64,
    pub entries: u64,
    pub jobs_ended: u64,
    pub jobs_total: u64,
}

/// A run that did not hold. Every message starts with the seed that reproduces it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("seed {seed}: invalid scenario: {message}")]
    InvalidScenario { seed: u64, message: String },
    #[error("seed {seed}: the core panicked: {message}")]
    Panic { seed: u64, message: String },
    #[error("seed {seed}: replaying the log gives chain {replayed}, the live projector has {live}")]
    ChainMismatch { seed: u64, live: String, replayed: String },
    #[error("seed {seed}: replay --verify does not verify: {detail}")]
    Divergence { seed: u64, detail: String },
    #[error("seed {seed}: the live projector's state digest {live} differs from a full replay's {replayed}")]
    StateMismatch { seed: u64, live: String, replayed: String },
    #[error("seed {seed}: a task did not end exactly once: {problems}")]
    TaskCheck { seed: u64, problems: String },
    #[error("seed {seed}: nothing left to happen at {at_ms} ms of virtual time")]
    Stalled { seed: u64, at_ms: u64 },
    #[error("seed {seed}: {events} events handled by {at_ms} ms of virtual time, past the loop's bound")]
    EventCap { seed: u64, events: u64, at_ms: u64 },
}

impl SimError {
    pub fn seed(&self) -> u64 {
        match self {
            SimError::InvalidScenario { seed, .. }
            | SimError::Panic { seed, .. }
            | SimError::ChainMismatch { seed, .. }
            | SimError::Divergence { seed, .. }
            | SimError::StateMismatch { seed, .. }
            | SimError::TaskCheck { seed, .. }
            | SimError::Stalled { seed, .. }
            | SimError::EventCap { seed, .. } => *seed,
        }
    }
}

/// Runs a scenario to its end and checks it (see the module docs). Returns the
/// report and the whole log, for `--export` or for the caller to replay itself.
pub fn run(
    scenario: &Scenario,
    options: &RunOptions,
    progress: &mut dyn FnMut(SimProgress),
) -> Result<(SimReport, Vec<Entry>), SimError> {
    let seed = scenario.seed;
    scenario.validate().map_err(|e| SimError::InvalidScenario { seed, message: e.0 })?;
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        world::World::new(scenario, options).run(progress)
    }));
    match outcome {
        Ok(result) => result.map(|(report, log)| (report, log.into_entries())),
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            Err(SimError::Panic { seed, message })
        }
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod sge_tests;
#[cfg(test)]
mod techila_tests;
#[cfg(test)]
mod thresholds_tests;
#[cfg(test)]
mod reservation_tests;
#[cfg(test)]
mod fbsng_tests;
#[cfg(test)]
mod cigri_tests;
#[cfg(test)]
mod flood_tests;
