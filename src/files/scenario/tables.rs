//! A scenario's `[policy]` and `[[jobs]]`, read by the policy file's and the
//! job file's readers: the same keys, the same units (seconds) and the same
//! checks, so a key means one thing wherever it is written and is declared once.
//!
//! What is the scenario's own: the policy's `seed` is the scenario's; a job
//! says when it arrives and how its runs behave (`submit_at_ms`,
//! `duration_ms`, `duration_jitter_ms`, `failure_per_million`, in ms of
//! virtual time); a job needs an `id` (a job file may leave it to gridfold, a
//! run must not draw one); its `[task]` may be left out (the simulator runs no
//! program); its owner and project are `sim` unless it names them; and it may
//! depend only on jobs listed before it, which the scenario submits first.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::{JOBS_MAX, JobPlan, Problem, ScenarioError, per_million, require};
use crate::core::event::{Policy, TaskSet};
use crate::files::jobfile::{FileText, JobFileError, KnownJobs, job_from_table};
use crate::files::policyfile::policy_from_table;

/// The keys of a `[[jobs]]` entry that are the scenario's, not the job file's.
const RUN_KEYS: [&str; 4] = ["submit_at_ms", "duration_ms", "duration_jitter_ms", "failure_per_million"];

/// The argv a job's task runs when the scenario leaves `[task]` out: what the
/// simulated engines are said to run.
const SIM_ARGV: [&str; 2] = ["sim-task", "{index}"];

/// How a scenario's job behaves when run: its own keys of a `[[jobs]]` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRun {
    #[serde(default)]
    submit_at_ms: u64,
    duration_ms: Spanned<u64>,
    #[serde(default)]
    duration_jitter_ms: u64,
    failure_per_million: Option<Spanned<u32>>,
}

/// A job file's error, as a scenario's: the file, the line, the message.
fn invalid(error: JobFileError) -> ScenarioError {
    ScenarioError::Invalid { file: error.path, line: error.line, message: error.message }
}

fn invalid_at(file_text: FileText<'_>, span: Range<usize>, message: impl Into<String>) -> ScenarioError {
    invalid(file_text.error(span.start, message))
}

/// `[policy]`, read as a policy file; the scenario's defaults when it is absent.
pub(super) fn policy(file_text: FileText<'_>, raw: Option<Spanned<DeValue<'_>>>, seed: u64) -> Result<Policy, ScenarioError> {
    let Some(raw) = raw else { return Ok(Policy { seed, ..Policy::default() }) };
    let span = raw.span();
    let DeValue::Table(table) = raw.into_inner() else {
        return Err(invalid_at(file_text, span, "policy must be a table: [policy]"));
    };
    if let Some((key, _)) = table.get_key_value("seed") {
        return Err(invalid_at(file_text, key.span(), "policy.seed: the policy's seed is the scenario's; set `seed` at the top"));
    }
    let policy = policy_from_table(file_text, Spanned::new(span, table)).map_err(invalid)?;
    Ok(Policy { seed, ..policy })
}

/// The `[[jobs]]` entries, each read as a job file, in order: a job may depend
/// only on those before it.
pub(super) fn jobs(file_text: FileText<'_>, raw: Option<Spanned<DeValue<'_>>>) -> Result<Vec<JobPlan>, ScenarioError> {
    let Some(raw) = raw else { return Ok(Vec::new()) };
    let span = raw.span();
    let DeValue::Array(entries) = raw.into_inner() else {
        return Err(invalid_at(file_text, span, "jobs must be [[jobs]] entries"));
    };
    if let Some(extra) = entries.get(JOBS_MAX) {
        return Err(invalid_at(file_text, extra.span(), format!("more than {JOBS_MAX} jobs")));
    }
    let mut plans: Vec<JobPlan> = Vec::with_capacity(entries.len());
    let mut earlier: BTreeMap<_, u32> = BTreeMap::new();
    for entry in entries {
        let span = entry.span();
        let DeValue::Table(table) = entry.into_inner() else {
            return Err(invalid_at(file_text, span, "a job is a table: [[jobs]]"));
        };
        let plan = job(file_text, Spanned::new(span, table), &earlier)?;
        earlier.insert(plan.id.clone(), plan.tasks);
        plans.push(plan);
    }
    Ok(plans)
}

/// One `[[jobs]]` entry: its run keys apart, the rest read as a job file.
fn job(file_text: FileText<'_>, entry: Spanned<DeTable<'_>>, earlier: &BTreeMap<crate::core::ids::JobId, u32>) -> Result<JobPlan, ScenarioError> {
    let span = entry.span();
    let mut table = entry.into_inner();
    let mut run_table = DeTable::new();
    for key in RUN_KEYS {
        if let Some((key, value)) = table.remove_entry(key) {
            run_table.insert(key, value);
        }
    }
    let run: RawRun = file_text.parse_table(Spanned::new(span.clone(), run_table)).map_err(invalid)?;
    let Some(id_span) = table.get("id").map(Spanned::span) else {
        return Err(invalid_at(file_text, span, "a job needs an id: a simulated run draws none"));
    };
    let owner_span = table.get("owner").map(Spanned::span);
    let project_span = table.get("project").map(Spanned::span);
    if !table.contains_key("task") {
        let argv: DeArray<'_> = SIM_ARGV.iter().map(|arg| Spanned::new(span.clone(), DeValue::String(Cow::Borrowed(*arg)))).collect();
        let mut task = DeTable::new();
        task.insert(Spanned::new(span.clone(), Cow::Borrowed("argv")), Spanned::new(span.clone(), DeValue::Array(argv)));
        table.insert(Spanned::new(span.clone(), Cow::Borrowed("task")), Spanned::new(span.clone(), DeValue::Table(task)));
    }
    let spec = job_from_table(file_text, Spanned::new(span, table), "sim", KnownJobs::Only(earlier)).map_err(|mut error| {
        if error.message.starts_with("unknown field") {
            error.message.push_str(&format!(", or a scenario's own: {}", RUN_KEYS.map(|key| format!("`{key}`")).join(", ")));
        }
        invalid(error)
    })?;
    if earlier.contains_key(&spec.id) {
        return Err(invalid_at(file_text, id_span, format!("job id {} is used twice", spec.id)));
    }
    let account = |key: &str, value: String, at: Option<Range<usize>>| match at {
        None if value.is_empty() => Ok("sim".to_string()),
        Some(at) if value.is_empty() || value.len() > 255 => {
            Err(invalid_at(file_text, at, format!("{key} must be a non-empty name of at most 255 bytes")))
        }
        _ => Ok(value),
    };
    let owner = account("owner", spec.owner, owner_span)?;
    let project = account("project", spec.project, project_span)?;
    let problem = |problem| problem_error(file_text, problem);
    let duration_ms = require(&run.duration_ms, |d| d >= 1, || "duration_ms must be at least 1".into()).map_err(problem)?;
    let failure_per_million = per_million("failure_per_million", &run.failure_per_million, 0).map_err(problem)?;
    let tasks = match &spec.tasks {
        TaskSet::Count(n) => *n,
        TaskSet::List(list) => list.len() as u32,
    };
    Ok(JobPlan {
        id: spec.id,
        owner,
        project,
        queue: spec.queue,
        submit_at_ms: run.submit_at_ms,
        tasks,
        priority: spec.priority,
        requirements: spec.requirements,
        max_attempts: spec.max_attempts,
        slots_per_task: spec.slots_per_task,
        duration_ms,
        duration_jitter_ms: run.duration_jitter_ms,
        failure_per_million,
        options: spec.options,
        task_conditions: spec.task_conditions,
        wall_time_limit_ms: spec.wall_time_limit_ms,
    })
}

/// A problem found in the scenario's own tables, as the error it is.
pub(super) fn problem_error(file_text: FileText<'_>, (span, message): Problem) -> ScenarioError {
    invalid_at(file_text, span, message)
}
