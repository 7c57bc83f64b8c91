//! Scenario files: the workload, the grid and the faults of one simulation, in TOML.
//!
//! A scenario is read in two steps. The TOML is first parsed with its source
//! spans; its `[policy]` goes to the policy file's reader and each of its
//! `[[jobs]]` to the job file's (`scenario/tables.rs`), so they are written as
//! those files are, with the same keys, units and checks, declared once. The
//! rest is deserialised into private `Raw*` mirrors whose fields carry their
//! spans (`toml::Spanned`). Everything is then validated into the public
//! [`Scenario`] types, so every error — a syntax error, a wrong type, an
//! unknown key or a value out of range — names the file and the line it is on.
//! The public types are plain data: a test or the command line may build or
//! adjust one directly (`scenario.seed = …`) and the simulator
//! (`crate::sim::run`) validates it again.
//!
//! The whole format, with every default, is documented in `scenarios/faults.toml`;
//! GridServer's keys in the scenario of each feature.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use toml::de::DeTable;

use crate::core::event::{EngineProps, JobOptions, LibraryRef, Policy, TaskConditions, TASKS_PER_JOB_MAX};
use crate::core::ids::{EngineId, JobId};

mod gridserver;
mod load_changes;
mod resource;
mod tables;
pub use load_changes::{LoadChange, LOAD_CHANGES_MAX};

use super::jobfile::{line_of, FileText, JobFileError};
use gridserver::RawLibrary;

/// One million: probabilities are written as integers per million.
pub const PER_MILLION: u32 = 1_000_000;
/// Most engines one scenario may define, so a typo (`count = 1000000`) fails loudly.
pub const ENGINES_MAX: u32 = 100_000;
/// Most jobs one scenario may define.
pub const JOBS_MAX: usize = 100_000;

/// A whole simulation: seed, grid, workload, faults.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// Every random draw of the run derives from this seed.
    pub seed: u64,
    /// Stop when virtual time passes this many ms, even if jobs remain.
    pub horizon_ms: Option<u64>,
    /// The policy published at time 0 (its `seed` is the scenario's seed).
    pub policy: Policy,
    pub latency: Latency,
    pub engines: Vec<EngineGroup>,
    pub jobs: Vec<JobPlan>,
    /// Grid libraries published during the run.
    pub libraries: Vec<LibraryPlan>,
    pub faults: Faults,
    /// Load values set on engine groups during the run (`[[load_changes]]`).
    pub load_changes: Vec<LoadChange>,
}

/// A grid library stored at a time (a `LibraryPublished` event from a client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LibraryPlan {
    pub library: LibraryRef,
    pub publish_at_ms: u64,
    pub size_bytes: u64,
}

/// Virtual network delays, in ms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Latency {
    /// Projector to log: from `poll_batch` to the batch being stored.
    pub publish_ms: u64,
    /// Uniform extra on each publish, drawn from the seed. It lets a publish left
    /// in flight by a restarted projector race its successor's.
    pub publish_jitter_ms: u64,
    /// Log to engine: from the projector folding an order to the engine receiving it.
    pub delivery_ms: u64,
    /// Engine to log: from an engine reporting to the report being stored.
    pub report_ms: u64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency { publish_ms: 2, publish_jitter_ms: 3, delivery_ms: 5, report_ms: 2 }
    }
}

/// `count` identical engines named `<name_prefix>-<n>`, n = 1..=count, zero-padded.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineGroup {
    pub count: u32,
    pub name_prefix: String,
    pub slots: u32,
    /// Properties, and in `props.libraries` the grid libraries held at login.
    pub props: EngineProps,
    pub login_at_ms: u64,
    /// Every engine of the group crashes silently at this time (the projector
    /// declares it lost after the engine timeout); never if `None`.
    pub crash_at_ms: Option<u64>,
    /// How fast the engines run: a run takes `duration × 100 / speed_percent`.
    pub speed_percent: u32,
    /// Every run of a task of these jobs fails on these engines.
    pub fails_jobs: Vec<JobId>,
    /// How long syncing a library takes, once ordered.
    pub sync_ms: u64,
    /// Named load values its heartbeats report (milli-units), besides the load of its runs.
    pub load_values_milli: BTreeMap<String, i64>,
    /// A gateway onto a cluster it does not own (give it the property
    /// `gateway` too, for flood control): its remote resource manager runs at
    /// most this many of its slots at once, and the runs beyond wait in the
    /// remote queue, started first come first served as slots free. `None`:
    /// every run starts at once.
    pub remote_slots: Option<u32>,
}

/// Slowest and fastest engine speed, in percent of the scenario's durations.
pub const SPEED_PERCENT_RANGE: std::ops::RangeInclusive<u32> = 1..=10_000;

impl EngineGroup {
    /// The id of the `n`th engine of the group (0-based `n`).
    pub fn engine_name(&self, n: u32) -> String {
        let width = self.count.to_string().len();
        format!("{}-{:0width$}", self.name_prefix, n + 1)
    }
}

/// One job of the workload and how its tasks behave when run.
#[derive(Debug, Clone, PartialEq)]
pub struct JobPlan {
    pub id: JobId,
    /// The user and project the job runs for (`sim` unless the scenario says):
    /// what Grid Engine's ordering policies count usage and tickets by.
    pub owner: String,
    pub project: String,
    /// The job's queue (`default` unless the scenario says): FBSNG's queue under `fbsng`.
    pub queue: String,
    pub submit_at_ms: u64,
    pub tasks: u32,
    pub priority: i32,
    pub requirements: String,
    pub max_attempts: u32,
    pub slots_per_task: u32,
    /// How long one run of a task takes once started.
    pub duration_ms: u64,
    /// A uniform extra in `0..=duration_jitter_ms`, drawn per run.
    pub duration_jitter_ms: u64,
    /// Probability that a run fails (at a uniform point of its duration).
    pub failure_per_million: u32,
    /// GridServer's service options (root library, dependencies, black- and
    /// greylisting, redundancy...), as the job file gives them.
    pub options: JobOptions,
    /// Conditions of single tasks, by task index.
    pub task_conditions: BTreeMap<u32, TaskConditions>,
    /// The job's wall-time limit (the job file's `wall_time_limit_secs`, in
    /// ms; 0: none): what a reservation counts a run's end from.
    pub wall_time_limit_ms: u64,
}

/// Injected faults. Every probability is per million and drawn from the seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Faults {
    /// Per task run: the engine dies silently at a uniform point of the run.
    pub engine_crash_per_million: u32,
    /// A crashed engine logs in again this long after its crash; never if `None`.
    pub crashed_engines_return_after_ms: Option<u64>,
    /// Per engine report (started, completed, failed): it is stored twice.
    pub duplicate_delivery_per_million: u32,
    /// Per task run: the engine starts it only after `late_start_delay_ms`.
    pub late_start_per_million: u32,
    /// Longer than the policy's dispatch timeout, so the dispatch is requeued first.
    pub late_start_delay_ms: u64,
    /// Projector restarts, at seeded times within `restart_window_ms`. Half of them
    /// strike at that time; the other half (when no publish is in flight then) wait
    /// for the projector's next publish and strike just after it, with the batch in
    /// flight. A restart due while the projector is down folds into that restart.
    pub projector_restarts: u32,
    /// Restarts happen in `0..restart_window_ms` of virtual time. Defaults to the
    /// horizon, else to an estimate of the makespan from the workload.
    pub restart_window_ms: Option<u64>,
    /// How long the projector stays down; 0 restarts it at the same instant.
    pub restart_downtime_ms: u64,
    /// Per restart with a publish in flight: the publish dies with the process
    /// (otherwise it reaches the log after the restart, and races the successor).
    pub lost_publish_on_restart_per_million: u32,
    /// The projector snapshots its state every this many entries folded.
    pub snapshot_every_entries: u64,
    /// Per library sync: it fails (the engine reports `LibrarySyncFailed`).
    pub sync_failure_per_million: u32,
}

impl Faults {
    /// No faults at all: the defaults of a scenario without a `[faults]` table.
    pub fn none(policy: &Policy) -> Faults {
        Faults {
            engine_crash_per_million: 0,
            crashed_engines_return_after_ms: None,
            duplicate_delivery_per_million: 0,
            late_start_per_million: 0,
            late_start_delay_ms: default_late_start_delay_ms(policy),
            projector_restarts: 0,
            restart_window_ms: None,
            restart_downtime_ms: 0,
            lost_publish_on_restart_per_million: PER_MILLION / 2,
            snapshot_every_entries: 1000,
            sync_failure_per_million: 0,
        }
    }
}

/// How long an engine takes to sync a library, unless its group says `sync_ms`.
pub const DEFAULT_SYNC_MS: u64 = 2_000;

fn default_late_start_delay_ms(policy: &Policy) -> u64 {
    // Past the timeout, plus two ticks so the requeue has surely been decided.
    policy.dispatch_timeout_ms + 5_000
}

/// Why a scenario could not be read. The `Display` form is `file:line: message`.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{file}: cannot read: {source}")]
    Read { file: String, source: std::io::Error },
    /// Not TOML, a value of the wrong type, an unknown or missing key.
    #[error("{file}:{line}: {message}")]
    Parse { file: String, line: usize, message: String },
    /// Well-formed TOML whose values do not make a scenario.
    #[error("{file}:{line}: {message}")]
    Invalid { file: String, line: usize, message: String },
}

impl ScenarioError {
    /// The 1-based line the error is on (0 when there is none, as for a read error).
    pub fn line(&self) -> usize {
        match self {
            ScenarioError::Read { .. } => 0,
            ScenarioError::Parse { line, .. } | ScenarioError::Invalid { line, .. } => *line,
        }
    }
}

/// A scenario that does not hold together, found by [`Scenario::validate`]
/// (no file or line: the scenario may have been built in code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ScenarioInvalid(pub String);

impl Scenario {
    /// Reads and validates a scenario file.
    pub fn from_file(path: &Path) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read { file: file.clone(), source })?;
        Scenario::from_toml(&text, &file)
    }

    /// Parses and validates scenario text; `file` names it in errors.
    pub fn from_toml(text: &str, file: &str) -> Result<Scenario, ScenarioError> {
        let file_text = FileText { text, path: file };
        let parse_error = |error: JobFileError| ScenarioError::Parse { file: error.path, line: error.line, message: error.message };
        let mut root = DeTable::parse(text).map_err(|e| ScenarioError::Parse {
            file: file.to_string(),
            line: e.span().map_or(1, |span| line_of(text, span.start)),
            message: e.message().trim().to_string(),
        })?;
        // The policy and the jobs go to the policy file's and the job file's readers.
        let policy = root.get_mut().remove("policy");
        let jobs = root.get_mut().remove("jobs");
        let raw: RawScenario = file_text.parse_table(root).map_err(parse_error)?;
        let policy = tables::policy(file_text, policy, raw.seed)?;
        let jobs = tables::jobs(file_text, jobs)?;
        raw.into_scenario(policy, jobs).map_err(|problem| tables::problem_error(file_text, problem))
    }

    /// Checks what the file reader checks, for a scenario built or changed in code.
    pub fn validate(&self) -> Result<(), ScenarioInvalid> {
        let fail = |message: String| Err(ScenarioInvalid(message));
        if let Err(message) = check_policy(&self.policy) {
            return fail(message);
        }
        let mut prefixes = BTreeMap::new();
        let mut n_engines: u64 = 0;
        for (n, group) in self.engines.iter().enumerate() {
            if let Err(message) = check_group(group) {
                return fail(format!("engines[{n}]: {message}"));
            }
            if prefixes.insert(group.name_prefix.clone(), n).is_some() {
                return fail(format!("engines[{n}]: name_prefix {:?} is used twice", group.name_prefix));
            }
            n_engines += u64::from(group.count);
        }
        if n_engines > u64::from(ENGINES_MAX) {
            return fail(format!("{n_engines} engines in all, more than {ENGINES_MAX}"));
        }
        if self.jobs.len() > JOBS_MAX {
            return fail(format!("{} jobs, more than {JOBS_MAX}", self.jobs.len()));
        }
        let mut ids: gridserver::EarlierJobs = BTreeMap::new();
        for (n, job) in self.jobs.iter().enumerate() {
            if let Err(message) = check_job(job).and_then(|()| gridserver::check_job_options(job, &ids)) {
                return fail(format!("jobs[{n}] ({}): {message}", job.id));
            }
            if ids.insert(job.id.clone(), job.tasks).is_some() {
                return fail(format!("jobs[{n}]: job id {} is used twice", job.id));
            }
        }
        for (n, group) in self.engines.iter().enumerate() {
            if let Some(job) = group.fails_jobs.iter().find(|job| !ids.contains_key(job)) {
                return fail(format!("engines[{n}]: fails_jobs names {job}, not a job of the scenario"));
            }
        }
        for (n, plan) in self.libraries.iter().enumerate() {
            if let Err(e) = plan.library.validate() {
                return fail(format!("libraries[{n}]: {}: {e}", plan.library));
            }
        }
        if let Err(message) = check_faults(&self.faults, &self.policy) {
            return fail(format!("faults: {message}"));
        }
        if let Err(message) = load_changes::check(&self.load_changes, &self.engines) {
            return fail(message);
        }
        Ok(())
    }

    /// Every engine of the scenario, in group order: (group index, engine id).
    pub fn engine_ids(&self) -> Vec<(usize, EngineId)> {
        let mut out = Vec::new();
        for (g, group) in self.engines.iter().enumerate() {
            for n in 0..group.count {
                let id = EngineId::new(&group.engine_name(n)).expect("validated engine names");
                out.push((g, id));
            }
        }
        out
    }
}

fn check_policy(policy: &Policy) -> Result<(), String> {
    crate::core::policy_limits::check_policy(policy).map_err(|limit| format!("policy: {limit}"))?;
    for tier in &policy.engine_tiers {
        crate::wire::check_engine_tier(tier).map_err(|problem| format!("policy: engine_tiers: {problem}"))?;
    }
    let reservation = &policy.reservation;
    if reservation.max_reservation > crate::core::event::MAX_RESERVATION_MAX || reservation.default_duration_ms == 0 {
        return Err(format!(
            "policy: max_reservation must be within 0..={} and default_duration_ms at least 1",
            crate::core::event::MAX_RESERVATION_MAX
        ));
    }
    Ok(())
}

fn check_group(group: &EngineGroup) -> Result<(), String> {
    if group.count == 0 {
        return Err("count must be at least 1".into());
    }
    if group.count > ENGINES_MAX {
        return Err(format!("count must be at most {ENGINES_MAX}"));
    }
    if group.slots == 0 {
        return Err("slots must be at least 1".into());
    }
    if !SPEED_PERCENT_RANGE.contains(&group.speed_percent) {
        return Err(format!("speed_percent must be within {SPEED_PERCENT_RANGE:?}"));
    }
    if group.remote_slots == Some(0) {
        return Err("remote_slots must be at least 1".into());
    }
    for library in &group.props.libraries {
        library.validate().map_err(|e| format!("libraries: {library}: {e}"))?;
    }
    let longest = group.engine_name(group.count - 1);
    EngineId::new(&longest).map_err(|e| format!("name_prefix {:?} makes engine id {longest:?}: {e}", group.name_prefix))?;
    Ok(())
}

fn check_job(job: &JobPlan) -> Result<(), String> {
    if job.tasks == 0 || job.tasks > TASKS_PER_JOB_MAX {
        return Err(format!("tasks must be within 1..={TASKS_PER_JOB_MAX}"));
    }
    if job.max_attempts == 0 {
        return Err("max_attempts must be at least 1".into());
    }
    if job.slots_per_task == 0 {
        return Err("slots_per_task must be at least 1".into());
    }
    if job.duration_ms == 0 {
        return Err("duration_ms must be at least 1".into());
    }
    check_per_million("failure_per_million", job.failure_per_million)?;
    crate::core::expr::parse(&job.requirements)
        .map_err(|e| format!("requirements {:?}, at byte {}: {}", job.requirements, e.position, e.message))?;
    Ok(())
}

fn check_faults(faults: &Faults, policy: &Policy) -> Result<(), String> {
    check_per_million("engine_crash_per_million", faults.engine_crash_per_million)?;
    check_per_million("duplicate_delivery_per_million", faults.duplicate_delivery_per_million)?;
    check_per_million("late_start_per_million", faults.late_start_per_million)?;
    check_per_million("lost_publish_on_restart_per_million", faults.lost_publish_on_restart_per_million)?;
    check_per_million("sync_failure_per_million", faults.sync_failure_per_million)?;
    if faults.late_start_delay_ms <= policy.dispatch_timeout_ms {
        return Err(format!(
            "late_start_delay_ms ({}) must exceed the policy's dispatch_timeout_ms ({}): a late start is one the projector gives up on",
            faults.late_start_delay_ms, policy.dispatch_timeout_ms
        ));
    }
    if faults.snapshot_every_entries == 0 {
        return Err("snapshot_every_entries must be at least 1".into());
    }
    if faults.restart_window_ms == Some(0) {
        return Err("restart_window_ms must be positive".into());
    }
    Ok(())
}

fn check_per_million(name: &str, value: u32) -> Result<(), String> {
    if value > PER_MILLION {
        return Err(format!("{name} is a probability per million: at most {PER_MILLION}, not {value}"));
    }
    Ok(())
}

// ---- the raw, spanned form ---------------------------------------------------

use gridserver::Problem;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    seed: u64,
    horizon_ms: Option<u64>,
    /// `[policy]` and `[[jobs]]` are read apart (`scenario/tables.rs`); they
    /// are named here so that the message for an unknown key lists them.
    #[serde(rename = "policy")]
    _policy: Option<serde::de::IgnoredAny>,
    latency: Option<RawLatency>,
    #[serde(default)]
    engines: Vec<Spanned<RawEngineGroup>>,
    #[serde(rename = "jobs")]
    _jobs: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    libraries: Vec<Spanned<RawLibrary>>,
    faults: Option<Spanned<RawFaults>>,
    #[serde(default)]
    load_changes: Vec<Spanned<load_changes::RawLoadChange>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLatency {
    publish_ms: Option<u64>,
    publish_jitter_ms: Option<u64>,
    delivery_ms: Option<u64>,
    report_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEngineGroup {
    count: Spanned<u32>,
    name_prefix: Spanned<String>,
    slots: Spanned<u32>,
    #[serde(default)]
    os: String,
    #[serde(default)]
    arch: String,
    #[serde(default)]
    cores: Option<u32>,
    #[serde(default)]
    memory_mb: u64,
    #[serde(default)]
    disk_mb: u64,
    #[serde(default)]
    mflops: u64,
    #[serde(default)]
    site: String,
    #[serde(default)]
    custom: BTreeMap<String, String>,
    #[serde(default)]
    login_at_ms: u64,
    crash_at_ms: Option<u64>,
    #[serde(default)]
    libraries: Vec<Spanned<String>>,
    speed_percent: Option<Spanned<u32>>,
    #[serde(default)]
    fails_jobs: Vec<Spanned<String>>,
    sync_ms: Option<u64>,
    load_values_milli: Option<Spanned<BTreeMap<String, i64>>>,
    remote_slots: Option<Spanned<u32>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFaults {
    engine_crash_per_million: Option<Spanned<u32>>,
    crashed_engines_return_after_ms: Option<u64>,
    duplicate_delivery_per_million: Option<Spanned<u32>>,
    late_start_per_million: Option<Spanned<u32>>,
    late_start_delay_ms: Option<Spanned<u64>>,
    projector_restarts: Option<u32>,
    restart_window_ms: Option<Spanned<u64>>,
    restart_downtime_ms: Option<u64>,
    lost_publish_on_restart_per_million: Option<Spanned<u32>>,
    snapshot_every_entries: Option<Spanned<u64>>,
    sync_failure_per_million: Option<Spanned<u32>>,
}

/// A `Spanned` value that must satisfy `ok`, or the problem at its span.
fn require<T: Copy>(value: &Spanned<T>, ok: impl FnOnce(T) -> bool, message: impl FnOnce() -> String) -> Result<T, Problem> {
    if ok(*value.get_ref()) { Ok(*value.get_ref()) } else { Err((value.span(), message())) }
}

fn per_million(name: &str, value: &Option<Spanned<u32>>, default: u32) -> Result<u32, Problem> {
    match value {
        None => Ok(default),
        Some(value) => require(value, |v| v <= PER_MILLION, || {
            format!("{name} is a probability per million: at most {PER_MILLION}, not {}", value.get_ref())
        }),
    }
}

impl RawScenario {
    /// The rest of the scenario, around its policy and jobs read already.
    fn into_scenario(self, policy: Policy, jobs: Vec<JobPlan>) -> Result<Scenario, Problem> {
        let latency = match self.latency {
            None => Latency::default(),
            Some(raw) => {
                let d = Latency::default();
                Latency {
                    publish_ms: raw.publish_ms.unwrap_or(d.publish_ms),
                    publish_jitter_ms: raw.publish_jitter_ms.unwrap_or(d.publish_jitter_ms),
                    delivery_ms: raw.delivery_ms.unwrap_or(d.delivery_ms),
                    report_ms: raw.report_ms.unwrap_or(d.report_ms),
                }
            }
        };

        let mut engines = Vec::with_capacity(self.engines.len());
        let mut prefixes: BTreeMap<String, ()> = BTreeMap::new();
        let mut n_engines: u64 = 0;
        for raw in &self.engines {
            let group_span = raw.span();
            let raw = raw.get_ref();
            let count = require(&raw.count, |c| (1..=ENGINES_MAX).contains(&c), || {
                format!("count must be within 1..={ENGINES_MAX}")
            })?;
            let slots = require(&raw.slots, |s| s >= 1, || "slots must be at least 1".into())?;
            let name_prefix = raw.name_prefix.get_ref().clone();
            if prefixes.insert(name_prefix.clone(), ()).is_some() {
                return Err((raw.name_prefix.span(), format!("name_prefix {name_prefix:?} is used by another group")));
            }
            n_engines += u64::from(count);
            if n_engines > u64::from(ENGINES_MAX) {
                return Err((group_span, format!("more than {ENGINES_MAX} engines in all")));
            }
            let speed_percent = match &raw.speed_percent {
                None => 100,
                Some(v) => require(v, |s| SPEED_PERCENT_RANGE.contains(&s), || {
                    format!("speed_percent must be within {SPEED_PERCENT_RANGE:?}")
                })?,
            };
            let group = EngineGroup {
                count,
                name_prefix,
                slots,
                speed_percent,
                fails_jobs: Vec::new(), // read once the jobs are known
                sync_ms: raw.sync_ms.unwrap_or(DEFAULT_SYNC_MS),
                load_values_milli: resource::load_values(&raw.load_values_milli)?,
                remote_slots: match &raw.remote_slots {
                    None => None,
                    Some(v) => Some(require(v, |n| n >= 1, || "remote_slots must be at least 1".into())?),
                },
                props: EngineProps {
                    os: raw.os.clone(),
                    arch: raw.arch.clone(),
                    cores: raw.cores.unwrap_or(slots),
                    memory_mb: raw.memory_mb,
                    disk_mb: raw.disk_mb,
                    mflops: raw.mflops,
                    site: raw.site.clone(),
                    custom: raw.custom.clone(),
                    libraries: gridserver::held_libraries(&raw.libraries)?,
                },
                login_at_ms: raw.login_at_ms,
                crash_at_ms: raw.crash_at_ms,
            };
            check_group(&group).map_err(|message| (raw.name_prefix.span(), message))?;
            engines.push(group);
        }

        let ids: BTreeMap<&JobId, ()> = jobs.iter().map(|job| (&job.id, ())).collect();
        for (group, raw) in engines.iter_mut().zip(&self.engines) {
            let raw = raw.get_ref();
            gridserver::bounded_list("fails_jobs", &raw.fails_jobs)?;
            for (n, name) in raw.fails_jobs.iter().enumerate() {
                let job = JobId::new(name.get_ref())
                    .ok()
                    .filter(|job| ids.contains_key(job))
                    .ok_or_else(|| (name.span(), format!("fails_jobs[{n}]: {:?} is not a job of the scenario", name.get_ref())))?;
                group.fails_jobs.push(job);
            }
        }
        let libraries =
            self.libraries.iter().map(|raw| gridserver::library(raw.get_ref())).collect::<Result<Vec<_>, Problem>>()?;

        let faults = match &self.faults {
            None => Faults::none(&policy),
            Some(raw) => {
                let span = raw.span();
                let raw = raw.get_ref();
                let defaults = Faults::none(&policy);
                let late_start_delay_ms = match &raw.late_start_delay_ms {
                    None => defaults.late_start_delay_ms,
                    Some(v) => require(v, |d| d > policy.dispatch_timeout_ms, || {
                        format!(
                            "late_start_delay_ms must exceed the policy's dispatch_timeout_ms ({}): a late start is one the projector gives up on",
                            policy.dispatch_timeout_ms
                        )
                    })?,
                };
                let snapshot_every_entries = match &raw.snapshot_every_entries {
                    None => defaults.snapshot_every_entries,
                    Some(v) => require(v, |n| n >= 1, || "snapshot_every_entries must be at least 1".into())?,
                };
                let restart_window_ms = match &raw.restart_window_ms {
                    None => None,
                    Some(v) => Some(require(v, |w| w >= 1, || "restart_window_ms must be positive".into())?),
                };
                let faults = Faults {
                    engine_crash_per_million: per_million("engine_crash_per_million", &raw.engine_crash_per_million, 0)?,
                    crashed_engines_return_after_ms: raw.crashed_engines_return_after_ms,
                    duplicate_delivery_per_million: per_million(
                        "duplicate_delivery_per_million",
                        &raw.duplicate_delivery_per_million,
                        0,
                    )?,
                    late_start_per_million: per_million("late_start_per_million", &raw.late_start_per_million, 0)?,
                    late_start_delay_ms,
                    projector_restarts: raw.projector_restarts.unwrap_or(0),
                    restart_window_ms,
                    restart_downtime_ms: raw.restart_downtime_ms.unwrap_or(0),
                    lost_publish_on_restart_per_million: per_million(
                        "lost_publish_on_restart_per_million",
                        &raw.lost_publish_on_restart_per_million,
                        defaults.lost_publish_on_restart_per_million,
                    )?,
                    snapshot_every_entries,
                    sync_failure_per_million: per_million("sync_failure_per_million", &raw.sync_failure_per_million, 0)?,
                };
                check_faults(&faults, &policy).map_err(|message| (span, message))?;
                faults
            }
        };

        let load_changes = load_changes::load_changes(&self.load_changes, &engines)?;
        let scenario = Scenario {
            seed: self.seed,
            horizon_ms: self.horizon_ms,
            policy,
            latency,
            engines,
            jobs,
            libraries,
            faults,
            load_changes,
        };
        debug_assert_eq!(scenario.validate(), Ok(()));
        Ok(scenario)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"
seed = 7
horizon_ms = 600000

[policy]
engine_timeout_secs = 9

[[engines]]
count = 12
name_prefix = "lyon"
slots = 2
os = "linux"
site = "lyon"
custom = { rack = "r1" }

[[jobs]]
id = "bag"
tasks = 10
duration_ms = 1000
duration_jitter_ms = 500

[faults]
engine_crash_per_million = 1000
projector_restarts = 2
"#;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::from_toml(text, "test.toml")
    }

    #[test]
    fn a_small_scenario_reads_with_its_defaults() {
        let scenario = parse(SMALL).unwrap();
        assert_eq!(scenario.seed, 7);
        assert_eq!(scenario.horizon_ms, Some(600_000));
        assert_eq!(scenario.policy.engine_timeout_ms, 9_000);
        assert_eq!(scenario.policy.dispatch_timeout_ms, Policy::default().dispatch_timeout_ms);
        assert_eq!(scenario.policy.seed, 7);
        assert_eq!(scenario.engines[0].props.cores, 2, "cores default to slots");
        assert_eq!(scenario.engines[0].props.custom["rack"], "r1");
        assert_eq!(scenario.engines[0].engine_name(0), "lyon-01");
        assert_eq!(scenario.engines[0].engine_name(11), "lyon-12");
        let job = &scenario.jobs[0];
        assert_eq!((job.max_attempts, job.slots_per_task, job.failure_per_million), (3, 1, 0));
        assert_eq!((job.owner.as_str(), job.project.as_str()), ("sim", "sim"));
        assert_eq!(scenario.faults.snapshot_every_entries, 1000);
        assert_eq!(scenario.faults.late_start_delay_ms, 65_000);
        assert_eq!(scenario.faults.projector_restarts, 2);
        assert_eq!(scenario.validate(), Ok(()));
    }

    fn error_of(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn a_job_names_its_owner_and_project() {
        let job = "seed = 1\n[[jobs]]\nid = \"a\"\ntasks = 1\nduration_ms = 1\n";
        let scenario = parse(&format!("{job}owner = \"alice\"\nproject = \"p1\"\n")).unwrap();
        assert_eq!((scenario.jobs[0].owner.as_str(), scenario.jobs[0].project.as_str()), ("alice", "p1"));
        let empty = error_of(&format!("{job}owner = \"\"\n"));
        assert!(empty.starts_with("test.toml:6: owner must be a non-empty name"), "{empty}");
    }

    #[test]
    fn the_policy_takes_the_algorithm_and_grid_engines_keys_as_a_policy_file_does() {
        let base = "seed = 1\n[policy]\nalgorithm = \"sgeee\"\nuser_sort = true\nhalftime = 0.5\n";
        let scenario = parse(&format!("{base}[policy.share_tree.physics]\nshares = 60\n[policy.share_tree.physics.alice]\nshares = 2\n")).unwrap();
        assert_eq!(scenario.policy.algorithm, crate::core::event::Algorithm::Sgeee);
        assert!(scenario.policy.sge.user_sort);
        assert_eq!(scenario.policy.sge.halftime_ms, 1_800_000);
        assert_eq!(scenario.policy.sge.share_tree.len(), 2);
        assert_eq!(
            error_of("seed = 1\n[policy]\nalgorithm = \"fifo\"\n"),
            "test.toml:3: unknown algorithm \"fifo\"; known: sge-plain, sgeee, techila, fbsng, cigri"
        );
        assert_eq!(
            error_of(&format!("{base}\n[policy.share_tree.a]\nshares = -1\n")),
            "test.toml:7: share_tree.a: shares must be a whole number from 0 to 1000000, not -1"
        );
        assert_eq!(
            error_of(&format!("{base}\n\n[policy.oticket.departments]\nstaff = 1\n")),
            "test.toml:8: oticket.departments: override tickets go to users and projects"
        );
        let unknown = error_of("seed = 1\n[policy]\nweight_tickets_shares = 1\n");
        assert!(unknown.starts_with("test.toml:3: unknown field `weight_tickets_shares`"), "{unknown}");
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_problem() {
        let syntax = error_of("seed = 7\n[[jobs]\nid = 1\n");
        assert!(syntax.starts_with("test.toml:2: "), "{syntax}");

        let wrong_type = error_of("seed = 7\n\n[[jobs]]\nid = \"a\"\ntasks = \"ten\"\nduration_ms = 5\n");
        assert!(wrong_type.starts_with("test.toml:5: "), "{wrong_type}");

        let unknown = error_of("seed = 7\n[faults]\nengine_crash_per_milion = 5\n");
        assert!(unknown.starts_with("test.toml:3: ") && unknown.contains("engine_crash_per_milion"), "{unknown}");

        let missing = error_of("horizon_ms = 5\n");
        assert!(missing.contains("seed"), "{missing}");

        let zero_tasks = error_of("seed = 7\n[[jobs]]\nid = \"a\"\n\ntasks = 0\nduration_ms = 5\n");
        assert_eq!(zero_tasks, format!("test.toml:5: tasks must be between 1 and {TASKS_PER_JOB_MAX}, not 0"));

        let bad_id = error_of("seed = 7\n[[jobs]]\nid = \"a b\"\ntasks = 1\nduration_ms = 5\n");
        assert!(bad_id.starts_with("test.toml:3: id: "), "{bad_id}");

        let twice = error_of(
            "seed = 7\n[[jobs]]\nid = \"a\"\ntasks = 1\nduration_ms = 5\n[[jobs]]\nid = \"a\"\ntasks = 1\nduration_ms = 5\n",
        );
        assert_eq!(twice, "test.toml:7: job id a is used twice");

        let probability = error_of("seed = 7\n[faults]\nlate_start_per_million = 2000000\n");
        assert!(probability.starts_with("test.toml:3: late_start_per_million"), "{probability}");

        let early = error_of("seed = 7\n[policy]\ndispatch_timeout_secs = 1\n[faults]\nlate_start_delay_ms = 500\n");
        assert!(early.starts_with("test.toml:5: late_start_delay_ms must exceed"), "{early}");

        let prefix = error_of("seed = 7\n[[engines]]\ncount = 1\nname_prefix = \"a/b\"\nslots = 1\n");
        assert!(prefix.starts_with("test.toml:4: "), "{prefix}");
    }

    const GRIDSERVER: &str = r#"
seed = 7

[policy]
engine_tiers = ["type=blade", "type=desktop"]
greylist_affinity = 8

[policy.redundancy]
poll_period_secs = 0.25
average_limit = 2.5
std_dev_limit = "1.125"
copies_per_task_max = 1

[[libraries]]
name = "lib"
version = "1.0"
publish_at_ms = 500

[[engines]]
count = 2
name_prefix = "slow"
slots = 1
libraries = ["lib@1.0"]
speed_percent = 25
fails_jobs = ["b"]
sync_ms = 900

[[jobs]]
id = "a"
tasks = 10
duration_ms = 100
root_library = { name = "lib", version = "1.0" }
engine_blacklisting = true
failures_before_blacklist = 2
redundant_rescheduling = true
task_max_time_secs = 4

[[jobs]]
id = "b"
tasks = 5
duration_ms = 100
depends_on = ["a"]
fail_on_dependency_failure = true

[[jobs.condition]]
tasks = "1-3"
discriminator = 'memory_mb >= 0'
task_affinity = [0]
depends_on = ["0", "a/9"]
queue_jump = true

[faults]
sync_failure_per_million = 1000
"#;

    #[test]
    fn gridserver_keys_read_into_the_policy_the_engines_and_the_jobs() {
        let scenario = parse(GRIDSERVER).unwrap();
        let policy = &scenario.policy;
        assert_eq!(policy.engine_tiers, ["type=blade", "type=desktop"]);
        assert_eq!(policy.greylist_affinity, 8);
        let r = &policy.redundancy;
        assert_eq!((r.poll_period_ms, r.average_limit_milli, r.std_dev_limit_milli, r.copies_per_task_max), (250, 2500, 1125, 1));
        assert_eq!(r.strategy_effective_percent, crate::core::event::RedundancyPolicy::default().strategy_effective_percent);
        assert_eq!(scenario.libraries, [LibraryPlan { library: LibraryRef::new("lib", "1.0"), publish_at_ms: 500, size_bytes: 0 }]);
        let group = &scenario.engines[0];
        assert_eq!((group.speed_percent, group.sync_ms, group.fails_jobs.len()), (25, 900, 1));
        assert_eq!(group.props.libraries, [LibraryRef::new("lib", "1.0")]);
        let a = &scenario.jobs[0].options;
        assert_eq!(a.root_library, Some(LibraryRef::new("lib", "1.0")));
        assert_eq!((a.failures_before_blacklist, a.task_max_time_ms, a.redundant_rescheduling), (2, 4_000, true));
        let b = &scenario.jobs[1];
        assert_eq!(b.options.depends_on_jobs, [JobId::new("a").unwrap()]);
        assert_eq!(b.task_conditions.keys().copied().collect::<Vec<_>>(), [1, 2, 3]);
        let condition = &b.task_conditions[&2];
        assert!(condition.queue_jump && condition.task_affinity == [0] && condition.depends_on.len() == 2);
        assert_eq!(scenario.faults.sync_failure_per_million, 1000);
        assert_eq!(scenario.validate(), Ok(()));
        // Defaults: no tiers, full speed, the default sync time.
        let plain = parse(SMALL).unwrap();
        assert_eq!((plain.engines[0].speed_percent, plain.engines[0].sync_ms), (100, DEFAULT_SYNC_MS));
        assert!(plain.policy.engine_tiers.is_empty() && plain.libraries.is_empty());
    }

    #[test]
    fn bad_gridserver_keys_name_their_line() {
        let with = |from: &str, to: &str| {
            assert!(GRIDSERVER.contains(from), "{from}");
            error_of(&GRIDSERVER.replacen(from, to, 1))
        };
        let line_of = |needle: &str| GRIDSERVER.lines().position(|l| l.contains(needle)).unwrap() + 1;
        let cases = [
            ("\"type=desktop\"", "\"desktop\"", "engine_tiers[1]: engine tier"),
            ("average_limit = 2.5", "average_limit = 2.5001", "redundancy.average_limit: 2.5001 has 4 decimals"),
            ("poll_period_secs = 0.25", "poll_period_secs = 0", "redundancy.poll_period_secs must be more than 0 seconds"),
            ("copies_per_task_max = 1", "copies = 1", "unknown field `copies`"),
            ("libraries = [\"lib@1.0\"]", "libraries = [\"lib\"]", "libraries[0]: library \"lib\" is not written name@version"),
            ("speed_percent = 25", "speed_percent = 0", "speed_percent must be within"),
            ("speed_percent = 25", "remote_slots = 0\nspeed_percent = 25", "remote_slots must be at least 1"),
            ("fails_jobs = [\"b\"]", "fails_jobs = [\"c\"]", "fails_jobs[0]: \"c\" is not a job of the scenario"),
            ("failures_before_blacklist = 2", "failures_before_blacklist = 0", "failures_before_blacklist must be at least 1"),
            ("task_max_time_secs = 4", "task_max_time_secs = 0", "task_max_time_secs must be at least 1"),
            ("depends_on = [\"a\"]", "depends_on = [\"b\"]", "depends_on[0]: a job cannot depend on itself"),
            ("tasks = \"1-3\"", "tasks = \"1-5\"", "condition[0]: tasks 1-5 goes past the job's last task, 4"),
            ("task_affinity = [0]", "task_affinity = [2]", "condition[0].task_affinity[0]: task 2 is not before task 1"),
            ("\"a/9\"", "\"a/10\"", "condition[0].depends_on[1]: job a has 10 tasks, no task 10"),
            ("discriminator = 'memory_mb >= 0'", "discriminator = 'memory_mb >='", "condition[0].discriminator"),
            ("sync_failure_per_million = 1000", "sync_failure_per_million = 1000001", "sync_failure_per_million is a probability"),
            ("name = \"lib\"", "name = \"a lib\"", "library name"),
        ];
        for (from, to, message) in cases {
            let error = with(from, to);
            let line = line_of(from);
            assert!(error.starts_with(&format!("test.toml:{line}: ")) && error.contains(message), "{from} -> {to}: {error}");
        }
        let rooted = error_of(&GRIDSERVER.replacen("version = \"1.0\" }", "version = \"\" }", 1));
        assert!(rooted.starts_with(&format!("test.toml:{}: root_library.version: ", line_of("root_library"))), "{rooted}");
        let refined = error_of(&GRIDSERVER.replacen("redundant_rescheduling = true\n", "", 1));
        assert!(refined.contains("task_max_time_secs needs redundant_rescheduling = true"), "{refined}");
        let later = error_of(&GRIDSERVER.replacen("depends_on = [\"a\"]", "depends_on = [\"zz\"]", 1));
        assert!(later.contains("depends_on[0]: job zz is not a job listed before this one"), "{later}");
    }

    #[test]
    fn a_bad_job_key_inside_a_scenario_names_the_file_the_line_and_what_is_wrong() {
        let job = "seed = 1\n\n[[jobs]]\nid = \"a\"\ntasks = 2\nduration_ms = 5\n";
        let unknown = error_of(&format!("{job}max_atempts = 2\n"));
        assert!(unknown.starts_with("test.toml:7: unknown field `max_atempts`, expected one of `id`,"), "{unknown}");
        assert!(unknown.ends_with(", or a scenario's own: `submit_at_ms`, `duration_ms`, `duration_jitter_ms`, `failure_per_million`"), "{unknown}");
        // The job file's keys, its units (seconds) and its checks, on the scenario's lines.
        assert_eq!(error_of(&format!("{job}max_attempts = 0\n")), "test.toml:7: max_attempts must be at least 1");
        assert_eq!(error_of(&format!("{job}\nslots = 1\nslots_per_task = 1\n")), "test.toml:8: give slots or slots_per_task (its synonym), not both");
        assert_eq!(
            error_of(&format!("{job}task_max_time_ms = 400\n")).split(", expected").next().unwrap(),
            "test.toml:7: unknown field `task_max_time_ms`"
        );
        let requirements = error_of(&format!("{job}requirements = 'os =='\n"));
        assert!(requirements.starts_with("test.toml:7: requirements "), "{requirements}");
        assert_eq!(error_of(&format!("{job}duration_jitter_ms = -1\n")), "test.toml:7: invalid value: integer `-1`, expected u64");
        assert_eq!(error_of(&format!("{job}failure_per_million = 1000001\n")).lines().next().unwrap(), "test.toml:7: failure_per_million is a probability per million: at most 1000000, not 1000001");
        let missing = error_of("seed = 1\n[[jobs]]\nid = \"a\"\ntasks = 2\n");
        assert_eq!(missing, "test.toml:2: missing field `duration_ms`");
        assert_eq!(error_of("seed = 1\n[[jobs]]\ntasks = 2\nduration_ms = 5\n"), "test.toml:2: a job needs an id: a simulated run draws none");
        assert_eq!(error_of("seed = 1\njobs = 3\n"), "test.toml:2: jobs must be [[jobs]] entries");
        // What a job file says, a scenario's job says alike: wall time and times in seconds, [task] optional.
        let scenario = parse(&format!("{job}wall_time_limit_secs = 3\nspan = \"site\"\n[jobs.task]\nargv = [\"render\", \"{{index}}\"]\n")).unwrap();
        assert_eq!((scenario.jobs[0].wall_time_limit_ms, scenario.jobs[0].options.span), (3_000, crate::core::event::Span::Site));
    }

    #[test]
    fn a_bad_policy_key_inside_a_scenario_names_the_file_the_line_and_what_is_wrong() {
        let unknown = error_of("seed = 1\n\n[policy]\nengine_timeout_ms = 9000\n");
        assert!(unknown.starts_with("test.toml:4: unknown field `engine_timeout_ms`, expected one of `engine_timeout_secs`,"), "{unknown}");
        assert_eq!(error_of("seed = 1\n[policy]\n\ndispatch_timeout_secs = 0\n"), "test.toml:4: dispatch_timeout_secs must be at least 1 second");
        assert_eq!(
            error_of("seed = 1\n[policy]\nqueue_sort_method = \"random\"\n"),
            "test.toml:3: queue_sort_method must be \"load\" or \"seqno\", not \"random\""
        );
        assert_eq!(
            error_of("seed = 1\n[policy]\nseed = 2\n"),
            "test.toml:3: policy.seed: the policy's seed is the scenario's; set `seed` at the top"
        );
        assert_eq!(error_of("seed = 1\npolicy = 3\n"), "test.toml:2: policy must be a table: [policy]");
        let formula = error_of("seed = 1\n[policy]\nload_formula = { expression = \"np_load_avg +\" }\n");
        assert!(formula.starts_with("test.toml:3: load_formula.expression: "), "{formula}");
        // The policy file's keys and units read into the scenario's policy, its seed the scenario's.
        let scenario = parse("seed = 5\n[policy]\nengine_timeout_secs = 7\ndefault_duration_secs = 60\nload_formula = { expression = \"mem_used\" }\n").unwrap();
        let policy = &scenario.policy;
        assert_eq!((policy.engine_timeout_ms, policy.reservation.default_duration_ms, policy.seed), (7_000, 60_000, 5));
        assert_eq!((policy.load_formula.slots_weight, policy.load_formula.expression.to_string()), (1, "mem_used".to_string()));
    }

    #[test]
    fn validate_catches_what_code_changes_break() {
        let mut scenario = parse(SMALL).unwrap();
        scenario.jobs[0].max_attempts = 0;
        assert!(scenario.validate().unwrap_err().0.contains("max_attempts"));
    }
}
