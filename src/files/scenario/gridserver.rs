//! The GridServer keys of a scenario: engine tiers, greylisting and redundancy in
//! `[policy]`, job options and `[[jobs.condition]]` ranges in `[[jobs]]`, grid
//! libraries in `[[libraries]]`. Names mirror the job file and the policy file
//! (`src/files/jobfile.rs`, `src/files/policyfile.rs`), with times in ms because the
//! simulator counts in ms: `task_max_time_ms`, `poll_period_ms`.
//!
//! Rules beyond the job file's, so a scenario never waits on something that cannot
//! happen: a job's `depends_on` and a task's `JOB/INDEX` dependency name a job of
//! the scenario submitted before it (the fold refuses a dependency it has not
//! seen); `fails_jobs` of an engine group names jobs of the scenario.
//!
//! Everything here reads the raw, spanned TOML of `scenario.rs` and returns the
//! problem at its span, which the caller turns into `file:line: message`.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::core::event::{JobOptions, LibraryRef, RedundancyPolicy, TaskConditions};
use crate::core::ids::{JobId, TaskRef};

use super::{JobPlan, LibraryPlan};
use crate::files::jobfile::{ConditionKeys, ConditionReader, ConditionsByTask, OptionKeys, ValueProblem, conditions_by_index};
pub(super) use crate::files::jobfile::{bounded as bounded_list, expression};
use crate::files::policyfile::limit_milli;

pub type Problem = (Range<usize>, String);

/// A problem found by the reader the job file shares, as the scenario reports it:
/// an expression's problem quotes it and names the byte.
impl From<ValueProblem> for Problem {
    fn from(problem: ValueProblem) -> Problem {
        match problem {
            ValueProblem::At(span, message) => (span, message),
            ValueProblem::Expression { what, source, error } => {
                (source.span(), format!("{what} {:?}, at byte {}: {}", source.get_ref(), error.position, error.message))
            }
        }
    }
}

/// `[policy.redundancy]`: every key optional, defaulting to `RedundancyPolicy::default()`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRedundancy {
    strategy_effective_percent: Option<Spanned<u32>>,
    poll_period_ms: Option<Spanned<u64>>,
    percent_completed_strategy: Option<bool>,
    remaining_task_percent: Option<Spanned<u32>>,
    average_strategy: Option<bool>,
    average_limit: Option<Spanned<toml::Value>>,
    std_dev_strategy: Option<bool>,
    std_dev_limit: Option<Spanned<toml::Value>>,
    reschedule_first: Option<bool>,
    copies_per_task_max: Option<u32>,
}

/// `"name@version"` or `{ name = "...", version = "..." }`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawLibraryRef {
    Text(String),
    Table { name: String, version: String },
}

/// `{ when = '...', weight = N }`, read as the job file reads it.
pub(super) use crate::files::jobfile::PreferenceTable as RawPreference;

/// `tasks = 3 | "3" | "0-9"`, read as the job file reads it.
pub(super) use crate::files::jobfile::TaskRange as RawTaskRange;

/// A `[[jobs.condition]]` entry: a range of tasks and their conditions.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCondition {
    tasks: Option<Spanned<RawTaskRange>>,
    discriminator: Option<Spanned<String>>,
    #[serde(default)]
    affinity: Vec<Spanned<RawPreference>>,
    #[serde(default)]
    task_affinity: Vec<Spanned<u32>>,
    #[serde(default)]
    queue_jump: bool,
    #[serde(default)]
    depends_on: Vec<Spanned<String>>,
}

impl RawCondition {
    fn keys(&self) -> ConditionKeys<'_> {
        ConditionKeys {
            discriminator: &self.discriminator,
            affinity: &self.affinity,
            task_affinity: &self.task_affinity,
            queue_jump: self.queue_jump,
            depends_on: &self.depends_on,
        }
    }
}

/// The GridServer keys of a `[[jobs]]` entry (the caller's `RawJob` holds them).
pub(super) struct RawJobOptions<'a> {
    pub root_library: &'a Option<Spanned<RawLibraryRef>>,
    /// The keys named as in the job file, but for `task_max_time_ms`.
    pub keys: OptionKeys<'a>,
    pub condition: &'a [Spanned<RawCondition>],
}

/// A `[[libraries]]` entry: a grid library published at a time.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLibrary {
    name: Spanned<String>,
    version: Spanned<String>,
    #[serde(default)]
    publish_at_ms: u64,
    #[serde(default)]
    size_bytes: u64,
}

/// The jobs read so far: what a later job may depend on.
pub(super) type EarlierJobs = BTreeMap<JobId, u32>;

/// `name@version`, checked as the fold checks it.
pub(super) fn parse_library(text: &str) -> Result<LibraryRef, String> {
    let (name, version) =
        text.split_once('@').ok_or_else(|| format!("library {text:?} is not written name@version"))?;
    let library = LibraryRef::new(name, version);
    library.validate().map_err(|e| format!("library {text:?}: {e}"))?;
    Ok(library)
}

pub(super) fn library_ref(what: &str, raw: &Spanned<RawLibraryRef>) -> Result<LibraryRef, Problem> {
    let library = match raw.get_ref() {
        RawLibraryRef::Text(text) => parse_library(text),
        RawLibraryRef::Table { name, version } => {
            let library = LibraryRef::new(name, version);
            library.validate().map(|()| library).map_err(|e| format!("library {name}@{version}: {e}"))
        }
    };
    library.map_err(|problem| (raw.span(), format!("{what}: {problem}")))
}

/// Libraries held at login: a list of `name@version`.
pub(super) fn held_libraries(list: &[Spanned<String>]) -> Result<Vec<LibraryRef>, Problem> {
    bounded_list("libraries", list)?;
    list.iter()
        .enumerate()
        .map(|(n, text)| parse_library(text.get_ref()).map_err(|p| (text.span(), format!("libraries[{n}]: {p}"))))
        .collect()
}

pub(super) fn engine_tiers(list: &[Spanned<String>]) -> Result<Vec<String>, Problem> {
    bounded_list("engine_tiers", list)?;
    list.iter()
        .enumerate()
        .map(|(tier_idx, tier)| {
            crate::wire::check_engine_tier(tier.get_ref())
                .map_err(|problem| (tier.span(), format!("engine_tiers[{tier_idx}]: {problem}")))?;
            Ok(tier.get_ref().clone())
        })
        .collect()
}

pub(super) fn redundancy(text: &str, raw: &RawRedundancy) -> Result<RedundancyPolicy, Problem> {
    let defaults = RedundancyPolicy::default();
    let percent = |name: &str, value: &Option<Spanned<u32>>, default: u32| match value {
        Some(n) if *n.get_ref() > 100 => {
            Err((n.span(), format!("redundancy.{name} is a percentage: 0 to 100, not {}", n.get_ref())))
        }
        Some(n) => Ok(*n.get_ref()),
        None => Ok(default),
    };
    let limit = |name: &str, value: &Option<Spanned<toml::Value>>, default_milli: u32| match value {
        Some(value) => limit_milli(text, value).map_err(|problem| (value.span(), format!("redundancy.{name}: {problem}"))),
        None => Ok(default_milli),
    };
    let poll_period_ms = match &raw.poll_period_ms {
        Some(ms) if *ms.get_ref() == 0 => return Err((ms.span(), "redundancy.poll_period_ms must be at least 1".into())),
        Some(ms) => *ms.get_ref(),
        None => defaults.poll_period_ms,
    };
    Ok(RedundancyPolicy {
        strategy_effective_percent: percent("strategy_effective_percent", &raw.strategy_effective_percent, defaults.strategy_effective_percent)?,
        poll_period_ms,
        percent_completed_strategy: raw.percent_completed_strategy.unwrap_or(defaults.percent_completed_strategy),
        remaining_task_percent: percent("remaining_task_percent", &raw.remaining_task_percent, defaults.remaining_task_percent)?,
        average_strategy: raw.average_strategy.unwrap_or(defaults.average_strategy),
        average_limit_milli: limit("average_limit", &raw.average_limit, defaults.average_limit_milli)?,
        std_dev_strategy: raw.std_dev_strategy.unwrap_or(defaults.std_dev_strategy),
        std_dev_limit_milli: limit("std_dev_limit", &raw.std_dev_limit, defaults.std_dev_limit_milli)?,
        reschedule_first: raw.reschedule_first.unwrap_or(defaults.reschedule_first),
        copies_per_task_max: raw.copies_per_task_max.unwrap_or(defaults.copies_per_task_max),
    })
}


/// The job's options and its tasks' conditions, each checked against the others.
pub(super) fn job_options(
    raw: &RawJobOptions<'_>,
    id: &JobId,
    n_tasks: u32,
    earlier: &EarlierJobs,
) -> Result<(JobOptions, BTreeMap<u32, TaskConditions>), Problem> {
    let root_library = raw.root_library.as_ref().map(|library| library_ref("root_library", library)).transpose()?;
    let depends_on_job = |what: &str, job: &Spanned<String>| earlier_job(what, job, job.get_ref(), id, earlier);
    // `"JOB/3"` is task 3 of an earlier job of the scenario.
    let other_job_task = |what: &str, dependency: &Spanned<String>, task: &TaskRef| {
        earlier_job(what, dependency, task.job.as_str(), id, earlier)?;
        let n_tasks = earlier[&task.job];
        if task.index >= n_tasks {
            let message = format!("{what}: job {} has {n_tasks} tasks, no task {}", task.job, task.index);
            return Err(ValueProblem::At(dependency.span(), message));
        }
        Ok(())
    };
    let task_conditions = || {
        let reader = ConditionReader { job: id, n_tasks, other_job_task: &other_job_task };
        let mut by_task = ConditionsByTask::new();
        for (cond_idx, entry) in raw.condition.iter().enumerate() {
            let table = entry.get_ref();
            reader.range_entry(&mut by_task, format!("condition[{cond_idx}]"), entry.span(), &table.tasks, &table.keys())?;
        }
        Ok(conditions_by_index(by_task))
    };
    Ok(raw.keys.read(root_library, depends_on_job, task_conditions)?)
}

/// A job named as a dependency: one of the scenario's, read (so submitted) before `id`.
fn earlier_job<T>(what: &str, at: &Spanned<T>, name: &str, id: &JobId, earlier: &EarlierJobs) -> Result<JobId, ValueProblem> {
    let problem = |message: String| ValueProblem::At(at.span(), message);
    let job = JobId::new(name).map_err(|e| problem(format!("{what}: job id {name:?}: {e}")))?;
    if job == *id {
        return Err(problem(format!("{what}: a job cannot depend on itself")));
    }
    if !earlier.contains_key(&job) {
        return Err(problem(format!(
            "{what}: job {job} is not a job listed before this one; the fold refuses a dependency it has not seen"
        )));
    }
    Ok(job)
}

pub(super) fn library(raw: &RawLibrary) -> Result<LibraryPlan, Problem> {
    let library = LibraryRef::new(raw.name.get_ref(), raw.version.get_ref());
    if let Err(problem) = library.validate() {
        // `validate` checks the name, then the version: point at the wrong one.
        let (part, value) = match JobId::new(raw.name.get_ref()) {
            Err(_) => ("name", &raw.name),
            Ok(_) => ("version", &raw.version),
        };
        return Err((value.span(), format!("library {part}: {problem}")));
    }
    Ok(LibraryPlan { library, publish_at_ms: raw.publish_at_ms, size_bytes: raw.size_bytes })
}

/// What the file reader checks of the GridServer keys, for a scenario built or
/// changed in code: the dependencies name earlier jobs, conditions name tasks
/// that exist, libraries and engine tiers are well formed.
pub(super) fn check_job_options(job: &JobPlan, earlier: &EarlierJobs) -> Result<(), String> {
    if let Some(library) = &job.options.root_library {
        library.validate().map_err(|e| format!("root_library {library}: {e}"))?;
    }
    let earlier_job = |dependency: &JobId| {
        if dependency == &job.id || !earlier.contains_key(dependency) {
            Err(format!("depends on {dependency}, which is not a job listed before it"))
        } else {
            Ok(())
        }
    };
    for dependency in &job.options.depends_on_jobs {
        earlier_job(dependency)?;
    }
    for (&index, conditions) in &job.task_conditions {
        if index >= job.tasks {
            return Err(format!("conditions for task {index}, past its last task"));
        }
        for dependency in &conditions.depends_on {
            if dependency.job == job.id {
                if dependency.index >= index {
                    return Err(format!("task {index} depends on task {}, not an earlier one", dependency.index));
                }
            } else {
                earlier_job(&dependency.job)?;
            }
        }
        if let Some(&later) = conditions.task_affinity.iter().find(|&&t| t >= index) {
            return Err(format!("task {index} has affinity to task {later}, not an earlier one"));
        }
    }
    Ok(())
}
