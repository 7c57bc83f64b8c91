//! The GridServer keys of a scenario: engine tiers, greylisting and redundancy in
//! `[policy]`, job options and `[[jobs.condition]]` ranges in `[[jobs]]`, grid
//! libraries in `[[libraries]]`. Names mirror the job file and the policy file
//! (`src/cli/jobfile.rs`, `src/cli/policyfile.rs`), with times in ms because the
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
use std::ops::{Range, RangeInclusive};

use serde::Deserialize;
use toml::Spanned;

use crate::core::event::{JobOptions, LibraryRef, Preference, RedundancyPolicy, TaskConditions};
use crate::core::ids::{JobId, TaskRef};

use super::scenario::{JobPlan, LibraryPlan};
use crate::cli::policyfile::limit_milli;

pub type Problem = (Range<usize>, String);

/// Most entries in one list (`affinity`, `depends_on`, `task_affinity`, `libraries`,
/// `fails_jobs`, `engine_tiers`), as in the job file.
pub const LIST_ENTRIES_MAX: usize = 256;
/// Most tasks of one job that may carry conditions, as in the job file.
pub const CONDITIONED_TASKS_MAX: usize = 10_000;
/// Most decimals of a redundancy limit: it is kept in thousandths.

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPreference {
    when: Spanned<String>,
    weight: i32,
}

/// `tasks = 3 | "3" | "0-9"`, read as the job file reads it.
pub(super) use crate::cli::jobfile::TaskRange as RawTaskRange;

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

/// The GridServer keys of a `[[jobs]]` entry (the caller's `RawJob` holds them).
pub(super) struct RawJobOptions<'a> {
    pub root_library: &'a Option<Spanned<RawLibraryRef>>,
    pub affinity: &'a [Spanned<RawPreference>],
    pub depends_on: &'a [Spanned<String>],
    pub fail_on_dependency_failure: &'a Option<Spanned<bool>>,
    pub continue_on_task_failure: bool,
    pub engine_blacklisting: bool,
    pub failures_before_blacklist: &'a Option<Spanned<u32>>,
    pub engine_greylisting: bool,
    pub redundant_rescheduling: bool,
    pub task_max_time_ms: &'a Option<Spanned<u64>>,
    pub cancel_redundant_on_first_result: &'a Option<Spanned<bool>>,
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

pub(super) fn bounded_list<T>(what: &str, list: &[Spanned<T>]) -> Result<(), Problem> {
    match list.last() {
        Some(last) if list.len() > LIST_ENTRIES_MAX => {
            Err((last.span(), format!("{what}: {} entries, more than {LIST_ENTRIES_MAX}", list.len())))
        }
        _ => Ok(()),
    }
}

fn expression(what: &str, source: &Spanned<String>) -> Result<String, Problem> {
    crate::core::expr::parse(source.get_ref()).map_err(|e| {
        (source.span(), format!("{what} {:?}, at byte {}: {}", source.get_ref(), e.position, e.message))
    })?;
    Ok(source.get_ref().clone())
}

fn preferences(what: &str, list: &[Spanned<RawPreference>]) -> Result<Vec<Preference>, Problem> {
    bounded_list(what, list)?;
    list.iter()
        .enumerate()
        .map(|(pref_idx, preference)| {
            let preference = preference.get_ref();
            let when = expression(&format!("{what}[{pref_idx}].when"), &preference.when)?;
            Ok(Preference { when, weight: preference.weight })
        })
        .collect()
}

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
    let affinity = preferences("affinity", raw.affinity)?;
    bounded_list("depends_on", raw.depends_on)?;
    let depends_on_jobs = raw
        .depends_on
        .iter()
        .enumerate()
        .map(|(entry_idx, job)| earlier_job(&format!("depends_on[{entry_idx}]"), job, job.get_ref(), id, earlier))
        .collect::<Result<Vec<JobId>, Problem>>()?;
    let reader = ConditionReader { job: id, n_tasks, earlier };
    let task_conditions = reader.task_conditions(raw.condition)?;

    // An option that refines another is refused without it, rather than ignored.
    let needs = |span: Range<usize>, option: &str, other_on: bool, other: &str| -> Result<(), Problem> {
        if other_on { Ok(()) } else { Err((span, format!("{option} needs {other}"))) }
    };
    let is_on = |option: &Option<Spanned<bool>>| option.as_ref().is_some_and(|o| *o.get_ref());
    let any_dependency = !depends_on_jobs.is_empty() || task_conditions.values().any(|c| !c.depends_on.is_empty());
    if let Some(option) = raw.fail_on_dependency_failure.as_ref().filter(|o| *o.get_ref()) {
        let other = "something to depend on: `depends_on` of the job or of a task";
        needs(option.span(), "fail_on_dependency_failure", any_dependency, other)?;
    }
    if let Some(option) = raw.cancel_redundant_on_first_result.as_ref().filter(|o| *o.get_ref()) {
        let other = "redundant_rescheduling = true";
        needs(option.span(), "cancel_redundant_on_first_result", raw.redundant_rescheduling, other)?;
    }
    if let Some(n) = raw.failures_before_blacklist {
        needs(n.span(), "failures_before_blacklist", raw.engine_blacklisting, "engine_blacklisting = true")?;
    }
    if let Some(ms) = raw.task_max_time_ms {
        needs(ms.span(), "task_max_time_ms", raw.redundant_rescheduling, "redundant_rescheduling = true")?;
    }
    let failures_before_blacklist = match raw.failures_before_blacklist {
        Some(n) if *n.get_ref() == 0 => return Err((n.span(), "failures_before_blacklist must be at least 1".into())),
        Some(n) => *n.get_ref(),
        None if raw.engine_blacklisting => 1,
        None => 0,
    };
    let task_max_time_ms = match raw.task_max_time_ms {
        Some(ms) if *ms.get_ref() == 0 => {
            return Err((ms.span(), "task_max_time_ms must be at least 1 (leave it out for no limit)".into()));
        }
        Some(ms) => *ms.get_ref(),
        None => 0,
    };
    let options = JobOptions {
        root_library,
        affinity,
        depends_on_jobs,
        fail_on_dependency_failure: is_on(raw.fail_on_dependency_failure),
        continue_on_task_failure: raw.continue_on_task_failure,
        engine_blacklisting: raw.engine_blacklisting,
        failures_before_blacklist,
        engine_greylisting: raw.engine_greylisting,
        redundant_rescheduling: raw.redundant_rescheduling,
        task_max_time_ms,
        cancel_redundant_on_first_result: is_on(raw.cancel_redundant_on_first_result),
    };
    Ok((options, task_conditions))
}

/// A job named as a dependency: one of the scenario's, read (so submitted) before `id`.
fn earlier_job<T>(what: &str, at: &Spanned<T>, name: &str, id: &JobId, earlier: &EarlierJobs) -> Result<JobId, Problem> {
    let job = JobId::new(name).map_err(|problem| (at.span(), format!("{what}: job id {name:?}: {problem}")))?;
    if job == *id {
        return Err((at.span(), format!("{what}: a job cannot depend on itself")));
    }
    if !earlier.contains_key(&job) {
        return Err((
            at.span(),
            format!("{what}: job {job} is not a job listed before this one; the fold refuses a dependency it has not seen"),
        ));
    }
    Ok(job)
}

struct ConditionReader<'a> {
    job: &'a JobId,
    n_tasks: u32,
    earlier: &'a EarlierJobs,
}

impl ConditionReader<'_> {
    fn task_conditions(&self, entries: &[Spanned<RawCondition>]) -> Result<BTreeMap<u32, TaskConditions>, Problem> {
        let mut by_task: BTreeMap<u32, (TaskConditions, String)> = BTreeMap::new();
        for (cond_idx, entry) in entries.iter().enumerate() {
            let what = format!("condition[{cond_idx}]");
            let table = entry.get_ref();
            let Some(range_value) = &table.tasks else {
                return Err((entry.span(), format!("{what}: say which tasks, e.g. tasks = \"0-9\"")));
            };
            let range = self.task_range(&what, range_value)?;
            let conditions = self.conditions(&what, table, *range.start())?;
            if conditions.is_empty() {
                return Err((entry.span(), format!("{what} sets no condition")));
            }
            if let Some((task_idx, (_, earlier))) = by_task.range(range.clone()).next() {
                return Err((
                    range_value.span(),
                    format!("{what}: task {task_idx} already has conditions from {earlier}; give a task's conditions in one place"),
                ));
            }
            let n_conditioned = by_task.len() + (range.end() - range.start()) as usize + 1;
            if n_conditioned > CONDITIONED_TASKS_MAX {
                return Err((
                    range_value.span(),
                    format!("{what}: {n_conditioned} tasks with conditions, more than {CONDITIONED_TASKS_MAX}"),
                ));
            }
            for task_idx in range {
                by_task.insert(task_idx, (conditions.clone(), what.clone()));
            }
        }
        Ok(by_task.into_iter().map(|(task_idx, (conditions, _))| (task_idx, conditions)).collect())
    }

    fn task_range(&self, what: &str, value: &Spanned<RawTaskRange>) -> Result<RangeInclusive<u32>, Problem> {
        value.get_ref().resolve(self.n_tasks).map_err(|detail| (value.span(), format!("{what}: tasks {detail}")))
    }

    /// The conditions of one entry, applied from task `first_task_idx` on:
    /// `task_affinity` and same-job `depends_on` must name tasks before it.
    fn conditions(&self, what: &str, table: &RawCondition, first_task_idx: u32) -> Result<TaskConditions, Problem> {
        let discriminator = match &table.discriminator {
            Some(source) => expression(&format!("{what}.discriminator"), source)?,
            None => String::new(),
        };
        let affinity = preferences(&format!("{what}.affinity"), &table.affinity)?;
        bounded_list(&format!("{what}.task_affinity"), &table.task_affinity)?;
        let task_affinity = table
            .task_affinity
            .iter()
            .enumerate()
            .map(|(entry_idx, earlier)| {
                let task_idx = *earlier.get_ref();
                if task_idx >= first_task_idx {
                    let message = format!(
                        "{what}.task_affinity[{entry_idx}]: task {task_idx} is not before task {first_task_idx}; \
                         task affinity names earlier tasks of the job"
                    );
                    return Err((earlier.span(), message));
                }
                Ok(task_idx)
            })
            .collect::<Result<Vec<u32>, Problem>>()?;
        bounded_list(&format!("{what}.depends_on"), &table.depends_on)?;
        let depends_on = table
            .depends_on
            .iter()
            .enumerate()
            .map(|(entry_idx, dependency)| {
                self.task_dependency(&format!("{what}.depends_on[{entry_idx}]"), dependency, first_task_idx)
            })
            .collect::<Result<Vec<TaskRef>, Problem>>()?;
        Ok(TaskConditions { discriminator, affinity, task_affinity, queue_jump: table.queue_jump, depends_on })
    }

    /// `"3"` is task 3 of this job, before `first_task_idx`; `"JOB/3"` is task 3 of
    /// an earlier job of the scenario.
    fn task_dependency(&self, what: &str, dependency: &Spanned<String>, first_task_idx: u32) -> Result<TaskRef, Problem> {
        let text = dependency.get_ref();
        let task = match text.parse::<u32>() {
            Ok(task_idx) => TaskRef::new(self.job.clone(), task_idx),
            Err(_) => text.parse::<TaskRef>().map_err(|problem| {
                (dependency.span(), format!("{what}: {problem} (or a bare index for a task of this job)"))
            })?,
        };
        if task.job == *self.job {
            if task.index >= first_task_idx {
                let message = format!(
                    "{what}: task {} is not before task {first_task_idx}; a task depends only on earlier tasks of its job",
                    task.index
                );
                return Err((dependency.span(), message));
            }
            return Ok(task);
        }
        earlier_job(what, dependency, task.job.as_str(), self.job, self.earlier)?;
        let n_tasks = self.earlier[&task.job];
        if task.index >= n_tasks {
            return Err((dependency.span(), format!("{what}: job {} has {n_tasks} tasks, no task {}", task.job, task.index)));
        }
        Ok(task)
    }
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
