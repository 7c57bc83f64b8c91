//! Jobs as submitted: the specification, its options, tasks and
//! requirements' parts (preferences, libraries, parallel parts).

use std::collections::BTreeMap;
use crate::core::ids::{EngineId, Epoch, JobId, TaskRef};

/// Most tasks one job may hold; a campaign larger than this is split by the submitter.
pub const TASKS_PER_JOB_MAX: u32 = 10_000_000;

/// A job as submitted: many tasks sharing one template and one set of requirements.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub id: JobId,
    /// The user the job runs for.
    pub owner: String,
    pub project: String,
    pub queue: String,
    /// Grid Engine's `-p`: higher runs first; overrides submission order.
    pub priority: i32,
    /// A requirements expression over engine properties (see `core::expr`); empty means any engine.
    pub requirements: String,
    /// How many attempts a task gets before it, and so the job, fails. At least 1.
    pub max_attempts: u32,
    /// Wall-time limit per attempt in ms, enforced by the engine; 0 means none.
    pub wall_time_limit_ms: u64,
    /// Slots one task occupies on its engine. At least 1.
    pub slots_per_task: u32,
    pub template: TaskTemplate,
    pub tasks: TaskSet,
    /// GridServer's service options: library, conditions, black/greylisting, redundancy.
    pub options: JobOptions,
    /// Conditions of single tasks, by task index; most tasks have none.
    pub task_conditions: BTreeMap<u32, TaskConditions>,
}

/// Options of a job beyond what it runs and where: each switches on one stage
/// or lifecycle rule of `schedule`. The default switches every one off.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct JobOptions {
    /// Grid Engine's initiation deadline (`qsub -dl`), in log time (ms since the
    /// epoch): in ticket mode the job's urgency grows as it nears.
    pub deadline_ms: Option<u64>,
    /// Grid Engine's job share (`qsub -js`): the job's functional shares, which
    /// divide the functional policy's job category (`weight_job`) among the
    /// runnable jobs that have some. 0 (the default) takes none.
    pub job_share: u32,
    /// No task is dispatched to an engine that has not reported this library synced.
    pub root_library: Option<LibraryRef>,
    /// Preferences that raise (or lower) an engine's score without excluding any.
    pub affinity: Vec<Preference>,
    /// The job waits until these jobs have ended.
    pub depends_on_jobs: Vec<JobId>,
    /// A job or task whose dependency failed (or was cancelled) fails too, instead
    /// of running once the dependency has ended.
    pub fail_on_dependency_failure: bool,
    /// A task that exhausts its attempts fails alone and the job carries on (it
    /// ends failed once every task has ended); by default the job fails at once.
    pub continue_on_task_failure: bool,
    /// Engines that fail tasks of this job get no more of its tasks.
    pub engine_blacklisting: bool,
    /// Task failures on one engine before it is blacklisted (0 is read as 1).
    pub failures_before_blacklist: u32,
    /// Each task failure on an engine lowers its score for this job by the policy's `greylist_affinity`.
    pub engine_greylisting: bool,
    /// Long-running tasks get redundant copies (see `RedundancyPolicy`).
    pub redundant_rescheduling: bool,
    /// A task running longer than this (log time since its newest copy was
    /// dispatched) gets a redundant copy, whatever the strategies say; 0 means no limit.
    pub task_max_time_ms: u64,
    /// The first result cancels the other copies at once, instead of letting them
    /// run until the job ends.
    pub cancel_redundant_on_first_result: bool,
    /// A job submitted in parts (its parameter list split over this event and
    /// `TasksAdded` events, each under the broker's payload limit): how many
    /// tasks it has once every part is folded. None of its tasks is dispatched
    /// before then, and a part beyond it is refused.
    pub tasks_total: Option<u32>,
    /// Techila's project priority, 1 (Highest) to 7 (Lowest); 0 means the
    /// default, 4 (Normal). Read by the `techila` family only.
    pub project_priority: u32,
    /// Techila's expected task time, in ms of log time: under `techila`, a
    /// task running longer is expired and gets one copy on another core; 0: none.
    pub expected_task_time_ms: u64,
    /// Grid Engine's soft requests (`qsub -soft -l`): a requirements expression
    /// that engines satisfying it rank first among those that may take a task,
    /// without excluding the others (empty: none). Same grammar and limits as
    /// `requirements`.
    #[serde(default)]
    pub soft: String,
    /// How a task's `slots_per_task` may be spread (Grid Engine's parallel
    /// environment `allocation_rule`): on one engine, or over the engines of one site.
    #[serde(default)]
    pub span: Span,
    /// Grid Engine's `qsub -R y`: with the policy's `max_reservation > 0`, a task
    /// of this job that cannot start reserves the slots it will need as they
    /// free (see [`crate::core::schedule::reservation`]).
    #[serde(default)]
    pub reserve: bool,
    /// FBSNG's process type (`fbsng`): the quota and default requirements of
    /// the policy's process type of this name apply to the job; empty: none.
    #[serde(default)]
    pub process_type: String,
    /// A parallel task's companion command (`span = "site"` only): each engine
    /// but the first runs it with the task's environment and
    /// `GRIDFOLD_NODEFILE` until the first engine's part ends (Grid Engine's
    /// slave tasks, started there by `qrsh -inherit`); empty: they run nothing.
    /// See [`check_companion_argv`] for its limits.
    #[serde(default)]
    pub companion_argv: Vec<String>,
    /// CiGri's campaign type (`cigri`): a test campaign runs one task on each
    /// cluster its requirements allow, ahead of every default campaign, and
    /// drops the rest (see [`crate::core::family::cigri`]).
    #[serde(default)]
    pub campaign: CampaignType,
}

/// CiGri's campaign types (gridsub's `-t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
pub enum CampaignType {
    /// Tasks fill the clusters the metascheduler offers the campaign.
    #[default]
    Default,
    /// One task on each cluster the requirements allow, first; the rest dropped.
    Test,
}

impl CampaignType {
    /// Every campaign type, as job files name them.
    pub const NAMES: [&'static str; 2] = ["default", "test"];

    pub fn as_str(self) -> &'static str {
        match self {
            CampaignType::Default => "default",
            CampaignType::Test => "test",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "default" => Some(CampaignType::Default),
            "test" => Some(CampaignType::Test),
            _ => None,
        }
    }
}

/// Where a task's slots may be (see [`crate::core::schedule::parallel`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
pub enum Span {
    /// All on one engine (Grid Engine's `$pe_slots`): the default.
    #[default]
    Engine,
    /// Over engines sharing the value of the `site` property, filled one after
    /// the other in ranking order (Grid Engine's `$fill_up`).
    Site,
}

impl Span {
    pub fn as_str(self) -> &'static str {
        match self {
            Span::Engine => "engine",
            Span::Site => "site",
        }
    }
}

/// The slots a task needs on one engine to be eligible there: all of them for
/// span `engine`, one for span `site` (the category's slot count).
pub fn slots_per_engine(slots_per_task: u32, span: Span) -> u32 {
    match span {
        Span::Engine => slots_per_task,
        Span::Site => 1,
    }
}

/// Most slots one task may ask for (`slots`), whatever its span.
pub const SLOTS_PER_TASK_MAX: u32 = 4_096;
/// Most engines one parallel task may span: its orders (one per engine, each
/// naming every part) stay well within a batch.
pub const PARALLEL_PARTS_MAX: usize = 32;
/// Most arguments of a parallel task's companion command (`companion_argv`).
pub const COMPANION_ARGS_MAX: usize = 256;
/// Most bytes of one argument of a companion command.
pub const COMPANION_ARG_BYTES_MAX: usize = 4_096;

/// What is wrong with a companion command, if anything: more than
/// [`COMPANION_ARGS_MAX`] arguments, one longer than
/// [`COMPANION_ARG_BYTES_MAX`] bytes, or an empty program name. An empty
/// command is none and is fine.
pub fn check_companion_argv(argv: &[String]) -> Result<(), String> {
    if argv.len() > COMPANION_ARGS_MAX {
        return Err(format!("{} arguments, more than {COMPANION_ARGS_MAX}", argv.len()));
    }
    if let Some((n, arg)) = argv.iter().enumerate().find(|(_, arg)| arg.len() > COMPANION_ARG_BYTES_MAX) {
        return Err(format!("argument {n} has {} bytes, more than {COMPANION_ARG_BYTES_MAX}", arg.len()));
    }
    if argv.first().is_some_and(String::is_empty) {
        return Err("the program (argument 0) is empty".to_string());
    }
    Ok(())
}

/// One engine's share of a parallel task: the engine, the login epoch the
/// decision was made for, and the slots it holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct ParallelPart {
    pub engine: EngineId,
    pub epoch: Epoch,
    pub slots: u32,
}

impl JobOptions {
    /// Failures that blacklist an engine, when blacklisting is on.
    pub fn blacklist_threshold(&self) -> u32 {
        self.failures_before_blacklist.max(1)
    }
}

/// Conditions of one task, on top of its job's.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TaskConditions {
    /// A requirements expression that must also hold (GridServer's discriminator).
    pub discriminator: String,
    pub affinity: Vec<Preference>,
    /// Prefer the engines that ran these tasks of the same job (a dataset loaded once).
    pub task_affinity: Vec<u32>,
    /// The task goes to the front of its job's queue.
    pub queue_jump: bool,
    /// The task waits until these tasks have ended.
    pub depends_on: Vec<TaskRef>,
}

impl TaskConditions {
    pub fn is_empty(&self) -> bool {
        *self == TaskConditions::default()
    }
}

/// A soft rule: engines for which `when` holds get `weight` added to their score.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Preference {
    /// A requirements-language expression over engine properties.
    pub when: String,
    pub weight: i32,
}

/// A grid library by name and version, as a job roots on it and an engine holds it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
pub struct LibraryRef {
    pub name: String,
    pub version: String,
}

impl LibraryRef {
    pub fn new(name: &str, version: &str) -> Self {
        LibraryRef { name: name.to_string(), version: version.to_string() }
    }
    /// Names and versions follow the id rules (1..=64 of `[A-Za-z0-9_.-]`): they
    /// become object-store keys and directory names.
    pub fn validate(&self) -> Result<(), crate::core::ids::IdError> {
        crate::core::ids::JobId::new(&self.name)?;
        crate::core::ids::JobId::new(&self.version)?;
        Ok(())
    }
    /// The object-store key and the directory an engine unpacks it into.
    pub fn key(&self) -> String {
        format!("{}/{}", self.name, self.version)
    }
}

impl std::fmt::Display for LibraryRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

/// A stored library: where it is and what it weighs, so engines can check what they fetched.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LibraryInfo {
    pub library: LibraryRef,
    pub size_bytes: u64,
    /// blake3 of the stored bytes, in hex.
    pub digest_hex: String,
}

impl JobSpec {
    pub fn task_count(&self) -> u64 {
        match &self.tasks {
            TaskSet::Count(n) => u64::from(*n),
            TaskSet::List(list) => list.len() as u64,
        }
    }
}

/// The command every task runs. `{index}` and `{name}` in `argv` are replaced by
/// the task's index and parameters when the engine launches it.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct TaskTemplate {
    pub argv: Vec<String>,
    /// Named parameters shared by every task; a per-task parameter of the same name wins.
    pub params: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum TaskSet {
    /// `n` tasks indexed `0..n`, differing only by `{index}`.
    Count(u32),
    /// One parameter map per task.
    List(Vec<BTreeMap<String, String>>),
}
