//! The job file: a TOML description of a job, turned into a `JobSpec`.
//!
//! Every error names the file, the line and what is wrong, including errors of
//! meaning (a bad requirements, affinity or discriminator expression points at
//! the byte inside the string; a task that depends on a later one names it), so
//! a user never has to guess. See docs/users.md, "The job file".
//!
//! The tasks are given one of three ways: `tasks = N` (counted), `tasks = [ {..},
//! .. ]` (one parameter table per task), or `[[task_list]]` entries (one per task,
//! each with its parameters and conditions). `[[condition]]` entries put
//! conditions on a range of tasks (`tasks = "0-9"`), whichever way they were given.
//!
//! Rules the file enforces beyond the types, so a job never waits on something
//! that cannot happen: a task's `task_affinity` and same-job `depends_on` name
//! only earlier tasks of the job (so dependencies cannot form a cycle); a task's
//! conditions come from one place; an option that only refines another
//! (`failures_before_blacklist`, `task_max_time_secs`,
//! `cancel_redundant_on_first_result`, `fail_on_dependency_failure`) needs that
//! other one on.

use std::collections::BTreeMap;
use std::ops::{Range, RangeInclusive};
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;
use toml::de::DeTable;

use crate::core::event::{
    JobOptions, JobSpec, LibraryRef, Preference, TASKS_PER_JOB_MAX, TaskConditions, TaskSet,
    TaskTemplate,
};
use crate::core::expr;
use crate::core::fold::MAX_ATTEMPTS_MAX;
use crate::core::ids::{JobId, TaskRef};

/// Most tasks of one job that may carry conditions: they travel in the
/// `JobSubmitted` event, which must stay well under the broker's 1 MiB payload.
pub const CONDITIONED_TASKS_MAX: usize = 10_000;
/// Most entries in one list of a job file (`affinity`, `depends_on`, `task_affinity`).
pub const LIST_ENTRIES_MAX: usize = 256;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    id: Option<Spanned<String>>,
    owner: Option<String>,
    #[serde(default)]
    project: String,
    #[serde(default = "default_queue")]
    queue: String,
    /// FBSNG's process type (`algorithm = "fbsng"`).
    process_type: Option<Spanned<String>>,
    /// CiGri's campaign type, `default` or `test` (`algorithm = "cigri"`).
    campaign: Option<Spanned<String>>,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    requirements: Option<Spanned<String>>,
    #[serde(default = "default_max_attempts")]
    max_attempts: Spanned<u32>,
    #[serde(default)]
    wall_time_limit_secs: u64,
    /// The slots one task needs; `slots` is its synonym (give one of them).
    slots_per_task: Option<Spanned<u32>>,
    slots: Option<Spanned<u32>>,
    /// Where those slots may be: "engine" (the default) or "site".
    span: Option<Spanned<String>>,
    /// Grid Engine's `qsub -R y`: reserve slots when a task cannot start.
    #[serde(default)]
    reserve: bool,
    /// With `span = "site"`: the command each engine but the first runs until
    /// the first engine's part ends (Grid Engine's slave tasks, `qrsh -inherit`).
    companion_command: Option<Spanned<Vec<String>>>,
    task: Spanned<TaskSection>,
    tasks: Option<Spanned<Tasks>>,
    task_list: Option<Spanned<Vec<Spanned<TaskTable>>>>,
    #[serde(default)]
    condition: Vec<Spanned<TaskTable>>,
    // GridServer's service options.
    root_library: Option<Spanned<LibraryTable>>,
    #[serde(default)]
    affinity: Vec<Spanned<PreferenceTable>>,
    #[serde(default)]
    depends_on: Vec<Spanned<String>>,
    fail_on_dependency_failure: Option<Spanned<bool>>,
    #[serde(default)]
    continue_on_task_failure: bool,
    #[serde(default)]
    engine_blacklisting: bool,
    failures_before_blacklist: Option<Spanned<u32>>,
    #[serde(default)]
    engine_greylisting: bool,
    #[serde(default)]
    redundant_rescheduling: bool,
    task_max_time_secs: Option<Spanned<u64>>,
    /// Techila's expected task time: a task running longer is expired and copied once.
    expected_task_time_secs: Option<Spanned<u64>>,
    cancel_redundant_on_first_result: Option<Spanned<bool>>,
    /// Grid Engine's initiation deadline (`qsub -dl`): a TOML date-time with its offset.
    deadline: Option<Spanned<toml::value::Datetime>>,
    /// Grid Engine's job share (`qsub -js`): functional shares in ticket mode.
    job_share: Option<Spanned<u32>>,
    /// Techila's project priority, 1 (Highest) to 7 (Lowest); 4 when absent.
    project_priority: Option<Spanned<u32>>,
    /// Grid Engine's soft requests (`qsub -soft -l`): engines meeting it rank first.
    soft: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskSection {
    argv: Vec<String>,
    #[serde(default)]
    params: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Tasks {
    Count(i64),
    List(Vec<BTreeMap<String, String>>),
}

/// A `[[task_list]]` entry (one task: `params` and conditions) or a
/// `[[condition]]` entry (`tasks`, a range, and conditions). One shape for
/// both, so both read and check their conditions alike; each refuses the key
/// that belongs to the other.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskTable {
    params: Option<Spanned<BTreeMap<String, String>>>,
    tasks: Option<Spanned<TaskRange>>,
    discriminator: Option<Spanned<String>>,
    #[serde(default)]
    affinity: Vec<Spanned<PreferenceTable>>,
    #[serde(default)]
    task_affinity: Vec<Spanned<u32>>,
    #[serde(default)]
    queue_jump: bool,
    #[serde(default)]
    depends_on: Vec<Spanned<String>>,
}

impl TaskTable {
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

/// `tasks = 3`, `tasks = "3"` or `tasks = "0-9"` (both ends included).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TaskRange {
    One(u32),
    Text(String),
}

impl TaskRange {
    /// The indexes it names within a job of `n_tasks`, or what is wrong with it.
    fn resolve(&self, n_tasks: u32) -> Result<RangeInclusive<u32>, String> {
        let (first, last) = match self {
            TaskRange::One(task_idx) => (*task_idx, *task_idx),
            TaskRange::Text(text) => {
                let number = |part: &str| {
                    part.trim().parse::<u32>().map_err(|_| format!("{text:?} is not an index or a range such as \"0-9\""))
                };
                match text.split_once('-') {
                    Some((first, last)) => (number(first)?, number(last)?),
                    None => {
                        let task_idx = number(text)?;
                        (task_idx, task_idx)
                    }
                }
            }
        };
        if first > last {
            return Err(format!("{first}-{last} is empty: the range runs from the lower index to the higher"));
        }
        if last >= n_tasks {
            return Err(format!("{first}-{last} goes past the job's last task, {}", n_tasks - 1));
        }
        Ok(first..=last)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LibraryTable {
    name: Spanned<String>,
    version: Spanned<String>,
}

/// `{ when = '...', weight = N }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PreferenceTable {
    when: Spanned<String>,
    weight: i32,
}

fn default_queue() -> String {
    "default".into()
}
fn default_max_attempts() -> Spanned<u32> {
    Spanned::new(0..0, 3)
}
fn default_slots() -> Spanned<u32> {
    Spanned::new(0..0, 1)
}

/// A job file that cannot be used: `path:line: message`.
#[derive(Debug, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct JobFileError {
    pub path: String,
    pub line: usize,
    pub message: String,
}

/// The 1-based line of a byte offset.
pub fn line_of(text: &str, offset: usize) -> usize {
    // Counted over bytes: an offset may fall inside a multibyte character.
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// The text of a TOML file being read and its name, to turn offsets into `path:line: message` errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileText<'a> {
    pub text: &'a str,
    pub path: &'a str,
}

impl FileText<'_> {
    /// The error at a byte offset of the file.
    pub fn error(&self, offset: usize, message: impl Into<String>) -> JobFileError {
        JobFileError { path: self.path.to_string(), line: line_of(self.text, offset), message: message.into() }
    }

    /// The error at the start of a value.
    pub fn at<T>(&self, value: &Spanned<T>, message: impl Into<String>) -> JobFileError {
        self.error(value.span().start, message)
    }

    /// Parses `text` with serde, or says where the TOML (or its shape) is wrong.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, JobFileError> {
        toml::from_str(self.text).map_err(|e| self.error(e.span().map_or(0, |span| span.start), e.message()))
    }

    /// Deserialises one table of the file, parsed already with its spans (a
    /// scenario's `[policy]` and each of its `[[jobs]]`, read by the policy
    /// file's and the job file's own types), or says where its shape is wrong.
    pub fn parse_table<T: serde::de::DeserializeOwned>(&self, table: Spanned<DeTable<'_>>) -> Result<T, JobFileError> {
        let table_start = table.span().start;
        T::deserialize(toml::de::Deserializer::from(table))
            .map_err(|e| self.error(e.span().map_or(table_start, |span| span.start), e.message().trim()))
    }

    /// The error for a problem with one of the file's values: an expression
    /// error points a caret at the byte, on the line it is on.
    fn problem(&self, problem: ValueProblem) -> JobFileError {
        match problem {
            ValueProblem::At(span, message) => self.error(span.start, message),
            ValueProblem::Expression { what, source, error } => {
                let value = source.get_ref();
                // Counted over bytes: the error's position may fall inside a multibyte character.
                let line_in_string =
                    value.as_bytes()[..error.position.min(value.len())].iter().filter(|&&b| b == b'\n').count();
                let start = string_start(self.text, source.span().start);
                JobFileError {
                    path: self.path.to_string(),
                    line: line_of(self.text, start) + line_in_string,
                    message: format!("{what} {}", error.render(value).trim_end()),
                }
            }
        }
    }
}

/// What is wrong with a value of a TOML file, at its span, before it is turned
/// into `file:line: message` (an expression's problem points at the byte).
#[derive(Debug)]
pub(crate) enum ValueProblem {
    At(Range<usize>, String),
    /// A requirements-language expression that does not parse; `what` names it.
    Expression { what: String, source: Spanned<String>, error: expr::ExprError },
}

fn problem_at<T>(value: &Spanned<T>, message: impl Into<String>) -> ValueProblem {
    ValueProblem::At(value.span(), message.into())
}

/// Checks a requirements-language expression given as a TOML string, named `what`.
fn expression(what: &str, source: &Spanned<String>) -> Result<String, ValueProblem> {
    match expr::parse(source.get_ref()) {
        Ok(_) => Ok(source.get_ref().clone()),
        Err(error) => Err(ValueProblem::Expression { what: what.to_string(), source: source.clone(), error }),
    }
}

/// Refuses a list longer than [`LIST_ENTRIES_MAX`], at its last entry.
pub(crate) fn bounded<T>(what: &str, list: &[Spanned<T>]) -> Result<(), ValueProblem> {
    match list.last() {
        Some(last) if list.len() > LIST_ENTRIES_MAX => {
            Err(problem_at(last, format!("{what}: {} entries, more than {LIST_ENTRIES_MAX}", list.len())))
        }
        _ => Ok(()),
    }
}

fn preferences(what: &str, list: &[Spanned<PreferenceTable>]) -> Result<Vec<Preference>, ValueProblem> {
    bounded(what, list)?;
    list.iter()
        .enumerate()
        .map(|(pref_idx, preference)| {
            let preference = preference.get_ref();
            let when = expression(&format!("{what}[{pref_idx}].when"), &preference.when)?;
            Ok(Preference { when, weight: preference.weight })
        })
        .collect()
}

/// Where the text of the TOML string whose value starts at `value_start` begins:
/// after its opening quote, or after `'''` or `"""` and the newline that may
/// follow them (TOML drops it), so lines counted into the string are the file's.
fn string_start(text: &str, value_start: usize) -> usize {
    let rest = &text[value_start.min(text.len())..];
    if rest.starts_with("'''") || rest.starts_with("\"\"\"") {
        let after = &rest[3..];
        let newline = if after.starts_with("\r\n") { 2 } else { usize::from(after.starts_with('\n')) };
        value_start + 3 + newline
    } else {
        value_start + 1
    }
}

/// The 1-based line of a job file's top-level `key` (`None` where the file
/// leaves the key out or cannot be read), for the problems found after the
/// file was parsed (`gridfold submit` checking the job against the policy in
/// force, whose family names the key it refuses).
pub fn key_line(text: &str, key: &str) -> Option<usize> {
    let keys: BTreeMap<String, Spanned<toml::Value>> = toml::from_str(text).ok()?;
    keys.get(key).map(|value| line_of(text, value.span().start))
}

/// Reads and checks a job file. `owner_default` fills `owner` when the file has none.
pub fn read_job_file(path: &Path, owner_default: &str) -> Result<JobSpec, JobFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| JobFileError {
        path: path.display().to_string(),
        line: 0,
        message: format!("cannot read it: {e}"),
    })?;
    parse_job(&text, &path.display().to_string(), owner_default)
}

pub fn parse_job(text: &str, path: &str, owner_default: &str) -> Result<JobSpec, JobFileError> {
    let file_text = FileText { text, path };
    job_spec(file_text, file_text.parse()?, owner_default, KnownJobs::Any)
}

/// A job written as one table of a larger file, with the job file's keys and
/// checks: a scenario's `[[jobs]]` entry. `known` says which jobs it may depend on.
pub(crate) fn job_from_table(
    file_text: FileText<'_>,
    table: Spanned<DeTable<'_>>,
    owner_default: &str,
    known: KnownJobs<'_>,
) -> Result<JobSpec, JobFileError> {
    job_spec(file_text, file_text.parse_table(table)?, owner_default, known)
}

/// The jobs a job may depend on (by `depends_on`, or a task's `JOB/INDEX`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum KnownJobs<'a> {
    /// Any job: a job file's dependencies are the fold's to check, on the grid it reaches.
    Any,
    /// Only these, with their numbers of tasks: a scenario's jobs listed before
    /// this one, which it submits first (the fold refuses a dependency it has not seen).
    Only(&'a BTreeMap<JobId, u32>),
}

impl KnownJobs<'_> {
    /// Checks a dependency on `job`, named by `what` at `at`: its number of tasks when known.
    fn check<T>(self, what: &str, at: &Spanned<T>, job: &JobId) -> Result<Option<u32>, ValueProblem> {
        match self {
            KnownJobs::Any => Ok(None),
            KnownJobs::Only(jobs) => jobs.get(job).map(|&n_tasks| Some(n_tasks)).ok_or_else(|| {
                let message = format!(
                    "{what}: job {job} is not a job listed before this one; the fold refuses a dependency it has not seen"
                );
                problem_at(at, message)
            }),
        }
    }
}

fn job_spec(file_text: FileText<'_>, file: JobFile, owner_default: &str, known: KnownJobs<'_>) -> Result<JobSpec, JobFileError> {
    let id = match &file.id {
        Some(id) => JobId::new(id.get_ref()).map_err(|e| file_text.at(id, format!("id: {e}")))?,
        None => generated_job_id(),
    };
    let requirements = match &file.requirements {
        Some(source) => expression("requirements", source).map_err(|p| file_text.problem(p))?,
        None => String::new(),
    };
    if *file.max_attempts.get_ref() == 0 {
        return Err(file_text.at(&file.max_attempts, "max_attempts must be at least 1"));
    }
    if *file.max_attempts.get_ref() > MAX_ATTEMPTS_MAX {
        return Err(file_text.at(&file.max_attempts, format!("max_attempts may be at most {MAX_ATTEMPTS_MAX}")));
    }
    let slots_per_task = match (&file.slots_per_task, &file.slots) {
        (Some(_), Some(slots)) => return Err(file_text.at(slots, "give slots or slots_per_task (its synonym), not both")),
        (Some(n), None) | (None, Some(n)) => n,
        (None, None) => &default_slots(),
    };
    let key = if file.slots.is_some() { "slots" } else { "slots_per_task" };
    if *slots_per_task.get_ref() == 0 {
        return Err(file_text.at(slots_per_task, format!("{key} must be at least 1")));
    }
    let slots_max = crate::core::event::SLOTS_PER_TASK_MAX;
    if *slots_per_task.get_ref() > slots_max {
        return Err(file_text.at(slots_per_task, format!("{key} may be at most {slots_max}")));
    }
    let span = match &file.span {
        None => crate::core::event::Span::Engine,
        Some(span) => match span.get_ref().as_str() {
            "engine" => crate::core::event::Span::Engine,
            "site" => crate::core::event::Span::Site,
            other => return Err(file_text.at(span, format!("span must be \"engine\" or \"site\", not {other:?}"))),
        },
    };
    let slots_per_task = *slots_per_task.get_ref();
    let task = file.task.get_ref();
    if task.argv.is_empty() {
        return Err(file_text.at(&file.task, "[task] argv must name a program to run"));
    }
    let tasks = task_set(file_text, &file)?;
    if let Some(problem) = unknown_placeholder(&task.argv, &task.params, &tasks) {
        return Err(file_text.at(&file.task, problem));
    }
    let n_tasks = match &tasks {
        TaskSet::Count(n) => *n,
        TaskSet::List(list) => list.len() as u32,
    };
    let task_conditions = task_conditions(file_text, &file, &id, n_tasks, known)?;
    let (mut options, task_conditions) = job_options(file_text, &file, &id, task_conditions, known)?;
    options.span = span;
    options.reserve = file.reserve;
    if let Some(command) = &file.companion_command {
        if span != crate::core::event::Span::Site {
            return Err(file_text.at(command, "companion_command needs span = \"site\" (only such a task has companion engines)"));
        }
        if command.get_ref().is_empty() {
            return Err(file_text.at(command, "companion_command must name a program to run"));
        }
        crate::core::event::check_companion_argv(command.get_ref())
            .map_err(|problem| file_text.at(command, format!("companion_command: {problem}")))?;
        if let Some(problem) = unknown_placeholder(command.get_ref(), &task.params, &tasks) {
            return Err(file_text.at(command, format!("companion_command: {problem}")));
        }
        options.companion_argv = command.get_ref().clone();
    }
    if let Some(kind) = &file.process_type {
        let most = crate::core::family::fbsng::NAME_BYTES_MAX;
        if kind.get_ref().is_empty() || kind.get_ref().len() > most {
            return Err(file_text.at(kind, format!("process_type must be 1 to {most} bytes")));
        }
        options.process_type = kind.get_ref().clone();
    }
    if let Some(campaign) = &file.campaign {
        options.campaign = campaign_type(file_text, campaign)?;
    }
    if let Some(deadline) = &file.deadline {
        options.deadline_ms = Some(epoch_ms(deadline.get_ref()).map_err(|problem| file_text.at(deadline, format!("deadline: {problem}")))?);
    }
    Ok(JobSpec {
        id,
        owner: file.owner.unwrap_or_else(|| owner_default.to_string()),
        project: file.project,
        queue: file.queue,
        priority: file.priority,
        requirements,
        max_attempts: *file.max_attempts.get_ref(),
        wall_time_limit_ms: file.wall_time_limit_secs.saturating_mul(1000),
        slots_per_task,
        template: TaskTemplate { argv: task.argv.clone(), params: task.params.clone() },
        tasks,
        options,
        task_conditions,
    })
}

/// The first `{name}` in `argv` that some task has no value for: `name` is
/// neither `index`, nor a `[task.params]` key, nor a parameter of every task of
/// the list. Such a placeholder would reach the program literally. Only
/// identifier-like names count (`{scene}`, `{frame_2}`), so braces that are the
/// program's own (`awk '{print $1}'`, `${HOME}`) pass unchanged.
fn unknown_placeholder(argv: &[String], shared: &BTreeMap<String, String>, tasks: &TaskSet) -> Option<String> {
    for (arg_idx, arg) in argv.iter().enumerate() {
        for name in placeholder_names(arg) {
            if name == "index" || shared.contains_key(name) {
                continue;
            }
            let missing = match tasks {
                TaskSet::Count(_) => Some(0),
                TaskSet::List(list) => list.iter().position(|params| !params.contains_key(name)),
            };
            if let Some(task_idx) = missing {
                let whom = match tasks {
                    TaskSet::Count(_) => "no task has a parameter of that name".to_string(),
                    TaskSet::List(_) => format!("task {task_idx} has no parameter of that name"),
                };
                return Some(format!(
                    "[task] argv[{arg_idx}] uses {{{name}}}, but it is not {{index}}, not in [task.params], and {whom}"
                ));
            }
        }
    }
    None
}

/// The identifier-like `{name}`s of one argument, in order.
fn placeholder_names(arg: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else { break };
        let name = &after[..close];
        let identifier = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if identifier {
            names.push(name);
        }
        rest = &after[close + 1..];
    }
    names
}

/// A TOML date-time with its offset, in ms since the Unix epoch (the log's time).
fn epoch_ms(datetime: &toml::value::Datetime) -> Result<u64, String> {
    let (Some(date), Some(time), Some(offset)) = (datetime.date, datetime.time, datetime.offset) else {
        return Err(format!("{datetime} needs a date, a time and its offset, such as 2026-11-24T18:00:00Z"));
    };
    // Days from 1970-01-01 to the civil date (the proleptic Gregorian calendar).
    let (year, month, day) = (i64::from(date.year), i64::from(date.month), i64::from(date.day));
    let shifted_year = if month <= 2 { year - 1 } else { year };
    let era = shifted_year.div_euclid(400);
    let year_of_era = shifted_year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    let offset_minutes = match offset {
        toml::value::Offset::Z => 0,
        toml::value::Offset::Custom { minutes } => i64::from(minutes),
    };
    let seconds = days * 86_400 + i64::from(time.hour) * 3_600 + i64::from(time.minute) * 60 + i64::from(time.second)
        - offset_minutes * 60;
    let ms = seconds * 1_000 + i64::from(time.nanosecond / 1_000_000);
    u64::try_from(ms).map_err(|_| format!("{datetime} is before 1970"))
}

/// The tasks, from `tasks` or from `[[task_list]]`.
fn task_set(file_text: FileText<'_>, file: &JobFile) -> Result<TaskSet, JobFileError> {
    let too_many = |n: usize| format!("{n} tasks, more than {TASKS_PER_JOB_MAX}");
    match (&file.tasks, &file.task_list) {
        (Some(_), Some(list)) => Err(file_text.at(list, "give the tasks once: `tasks` or [[task_list]], not both")),
        (None, None) => Err(file_text.error(
            file.task.span().start,
            "the job has no tasks: give `tasks = N`, `tasks = [ {...}, ... ]` or [[task_list]] entries",
        )),
        (Some(tasks), None) => match tasks.get_ref() {
            Tasks::Count(n) if *n >= 1 && *n <= i64::from(TASKS_PER_JOB_MAX) => Ok(TaskSet::Count(*n as u32)),
            Tasks::Count(n) => {
                Err(file_text.at(tasks, format!("tasks must be between 1 and {TASKS_PER_JOB_MAX}, not {n}")))
            }
            Tasks::List(list) if list.is_empty() => Err(file_text.at(tasks, "tasks: the list is empty")),
            Tasks::List(list) if list.len() > TASKS_PER_JOB_MAX as usize => {
                Err(file_text.at(tasks, format!("tasks: {}", too_many(list.len()))))
            }
            Tasks::List(list) => Ok(TaskSet::List(list.clone())),
        },
        (None, Some(list)) => {
            if list.get_ref().len() > TASKS_PER_JOB_MAX as usize {
                return Err(file_text.at(list, format!("task_list: {}", too_many(list.get_ref().len()))));
            }
            let mut params = Vec::with_capacity(list.get_ref().len());
            for (task_idx, entry) in list.get_ref().iter().enumerate() {
                if let Some(range) = &entry.get_ref().tasks {
                    return Err(file_text.at(
                        range,
                        format!("task_list[{task_idx}]: `tasks` belongs in [[condition]]; a [[task_list]] entry is one task"),
                    ));
                }
                params.push(entry.get_ref().params.as_ref().map(|p| p.get_ref().clone()).unwrap_or_default());
            }
            Ok(TaskSet::List(params))
        }
    }
}

/// Conditions by task index, from `[[task_list]]` and `[[condition]]` entries;
/// a task's come from one.
fn task_conditions(
    file_text: FileText<'_>,
    file: &JobFile,
    job: &JobId,
    n_tasks: u32,
    known: KnownJobs<'_>,
) -> Result<BTreeMap<u32, TaskConditions>, JobFileError> {
    let other_job_task = |what: &str, dependency: &Spanned<String>, task: &TaskRef| match known.check(what, dependency, &task.job)? {
        Some(n_tasks) if task.index >= n_tasks => {
            Err(problem_at(dependency, format!("{what}: job {} has {n_tasks} tasks, no task {}", task.job, task.index)))
        }
        _ => Ok(()),
    };
    let reader = ConditionReader { job, n_tasks, other_job_task: &other_job_task };
    let problem = |problem| file_text.problem(problem);
    let mut by_task = ConditionsByTask::new();
    let entries = file.task_list.as_ref().map(|list| list.get_ref().as_slice()).unwrap_or_default();
    for (task_idx, entry) in entries.iter().enumerate() {
        let what = format!("task_list[{task_idx}]");
        let task_idx = task_idx as u32;
        let conditions = reader.conditions(&what, &entry.get_ref().keys(), task_idx).map_err(problem)?;
        if !conditions.is_empty() {
            by_task.insert(task_idx, (conditions, what));
        }
    }
    for (cond_idx, entry) in file.condition.iter().enumerate() {
        let what = format!("condition[{cond_idx}]");
        let table = entry.get_ref();
        if let Some(params) = &table.params {
            return Err(file_text.at(
                params,
                format!("{what}: `params` belongs in [[task_list]]; a [[condition]] gives conditions only"),
            ));
        }
        reader.range_entry(&mut by_task, what, entry.span(), &table.tasks, &table.keys()).map_err(problem)?;
    }
    if by_task.len() > CONDITIONED_TASKS_MAX {
        let message = format!("{} tasks with conditions, more than {CONDITIONED_TASKS_MAX}", by_task.len());
        return Err(file_text.error(file.task_list.as_ref().map_or(0, |list| list.span().start), message));
    }
    Ok(conditions_by_index(by_task))
}

/// The condition keys of one entry, a `[[task_list]]` or a `[[condition]]`.
struct ConditionKeys<'a> {
    pub discriminator: &'a Option<Spanned<String>>,
    pub affinity: &'a [Spanned<PreferenceTable>],
    pub task_affinity: &'a [Spanned<u32>],
    pub queue_jump: bool,
    pub depends_on: &'a [Spanned<String>],
}

/// Conditions by task index, each with the entry that gave them.
type ConditionsByTask = BTreeMap<u32, (TaskConditions, String)>;

fn conditions_by_index(by_task: ConditionsByTask) -> BTreeMap<u32, TaskConditions> {
    by_task.into_iter().map(|(task_idx, (conditions, _))| (task_idx, conditions)).collect()
}

/// Reads the conditions of the entries of one job.
struct ConditionReader<'a> {
    pub job: &'a JobId,
    pub n_tasks: u32,
    pub other_job_task: &'a OtherJobTask<'a>,
}

/// Checks a dependency (written at the value, named `what`) on a task of
/// another job: any, or only those a scenario lists before it ([`KnownJobs`]).
type OtherJobTask<'a> = dyn Fn(&str, &Spanned<String>, &TaskRef) -> Result<(), ValueProblem> + 'a;

impl ConditionReader<'_> {
    /// A `[[condition]]` entry, named `what`, spanning `entry_span`: its
    /// conditions go to the tasks of its range, which have none yet.
    fn range_entry(
        &self,
        by_task: &mut ConditionsByTask,
        what: String,
        entry_span: Range<usize>,
        tasks: &Option<Spanned<TaskRange>>,
        keys: &ConditionKeys<'_>,
    ) -> Result<(), ValueProblem> {
        let Some(range_value) = tasks else {
            return Err(ValueProblem::At(entry_span, format!("{what}: say which tasks, e.g. tasks = \"0-9\"")));
        };
        let range = self.task_range(&what, range_value)?;
        let conditions = self.conditions(&what, keys, *range.start())?;
        if conditions.is_empty() {
            return Err(ValueProblem::At(entry_span, format!("{what} sets no condition")));
        }
        if let Some((task_idx, (_, earlier))) = by_task.range(range.clone()).next() {
            return Err(problem_at(
                range_value,
                format!("{what}: task {task_idx} already has conditions from {earlier}; give a task's conditions in one place"),
            ));
        }
        let n_conditioned = by_task.len() + (range.end() - range.start()) as usize + 1;
        if n_conditioned > CONDITIONED_TASKS_MAX {
            return Err(problem_at(
                range_value,
                format!("{what}: {n_conditioned} tasks with conditions, more than {CONDITIONED_TASKS_MAX}"),
            ));
        }
        for task_idx in range {
            by_task.insert(task_idx, (conditions.clone(), what.clone()));
        }
        Ok(())
    }

    /// `3`, `"3"` or `"0-9"`, within the job's tasks.
    fn task_range(&self, what: &str, value: &Spanned<TaskRange>) -> Result<RangeInclusive<u32>, ValueProblem> {
        value.get_ref().resolve(self.n_tasks).map_err(|detail| problem_at(value, format!("{what}: tasks {detail}")))
    }

    /// The conditions of one entry, applied from task `first_task_idx` on:
    /// `task_affinity` and same-job `depends_on` must name tasks before it.
    fn conditions(
        &self,
        what: &str,
        keys: &ConditionKeys<'_>,
        first_task_idx: u32,
    ) -> Result<TaskConditions, ValueProblem> {
        let discriminator = match keys.discriminator {
            Some(source) => expression(&format!("{what}.discriminator"), source)?,
            None => String::new(),
        };
        let affinity = preferences(&format!("{what}.affinity"), keys.affinity)?;
        bounded(&format!("{what}.task_affinity"), keys.task_affinity)?;
        let task_affinity = keys
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
                    return Err(problem_at(earlier, message));
                }
                Ok(task_idx)
            })
            .collect::<Result<Vec<u32>, ValueProblem>>()?;
        bounded(&format!("{what}.depends_on"), keys.depends_on)?;
        let depends_on = keys
            .depends_on
            .iter()
            .enumerate()
            .map(|(entry_idx, dependency)| self.task_dependency(&format!("{what}.depends_on[{entry_idx}]"), dependency, first_task_idx))
            .collect::<Result<Vec<TaskRef>, ValueProblem>>()?;
        Ok(TaskConditions { discriminator, affinity, task_affinity, queue_jump: keys.queue_jump, depends_on })
    }

    /// `"3"` is task 3 of this job, which must come before `first_task_idx`;
    /// `"JOB/3"` is task 3 of job JOB (this one's own id counts as a bare index).
    fn task_dependency(&self, what: &str, dependency: &Spanned<String>, first_task_idx: u32) -> Result<TaskRef, ValueProblem> {
        let text = dependency.get_ref();
        let task = match text.parse::<u32>() {
            Ok(task_idx) => TaskRef::new(self.job.clone(), task_idx),
            Err(_) => text.parse::<TaskRef>().map_err(|problem| {
                problem_at(dependency, format!("{what}: {problem} (or a bare index for a task of this job)"))
            })?,
        };
        if task.job != *self.job {
            (self.other_job_task)(what, dependency, &task)?;
        } else if task.index >= first_task_idx {
            let message = format!(
                "{what}: task {} is not before task {first_task_idx}; a task depends only on earlier tasks of its job",
                task.index
            );
            return Err(problem_at(dependency, message));
        }
        Ok(task)
    }
}

/// The job's options, each checked against the others.
fn job_options(
    file_text: FileText<'_>,
    file: &JobFile,
    id: &JobId,
    task_conditions: BTreeMap<u32, TaskConditions>,
    known: KnownJobs<'_>,
) -> Result<(JobOptions, BTreeMap<u32, TaskConditions>), JobFileError> {
    let root_library = match &file.root_library {
        Some(table) => {
            let LibraryTable { name, version } = table.get_ref();
            let library = LibraryRef::new(name.get_ref(), version.get_ref());
            if let Err(problem) = library.validate() {
                // `validate` checks the name, then the version: point at the wrong one.
                let (part, value) = match JobId::new(name.get_ref()) {
                    Err(_) => ("name", name),
                    Ok(_) => ("version", version),
                };
                return Err(file_text.at(value, format!("root_library.{part}: {problem}")));
            }
            Some(library)
        }
        None => None,
    };
    let keys = OptionKeys {
        affinity: &file.affinity,
        depends_on: &file.depends_on,
        fail_on_dependency_failure: &file.fail_on_dependency_failure,
        continue_on_task_failure: file.continue_on_task_failure,
        engine_blacklisting: file.engine_blacklisting,
        failures_before_blacklist: &file.failures_before_blacklist,
        engine_greylisting: file.engine_greylisting,
        redundant_rescheduling: file.redundant_rescheduling,
        task_max_time_secs: &file.task_max_time_secs,
        expected_task_time_secs: &file.expected_task_time_secs,
        cancel_redundant_on_first_result: &file.cancel_redundant_on_first_result,
        job_share: &file.job_share,
        project_priority: &file.project_priority,
        soft: &file.soft,
    };
    let depends_on_job = |what: &str, job: &Spanned<String>| {
        let job_id = JobId::new(job.get_ref()).map_err(|problem| problem_at(job, format!("{what}: {problem}")))?;
        if job_id == *id {
            return Err(problem_at(job, format!("{what}: a job cannot depend on itself")));
        }
        known.check(what, job, &job_id)?;
        Ok(job_id)
    };
    keys.read(root_library, depends_on_job, || Ok(task_conditions)).map_err(|p| file_text.problem(p))
}

/// The keys of a job's options, but for `root_library`, which is read first.
struct OptionKeys<'a> {
    pub affinity: &'a [Spanned<PreferenceTable>],
    pub depends_on: &'a [Spanned<String>],
    pub fail_on_dependency_failure: &'a Option<Spanned<bool>>,
    pub continue_on_task_failure: bool,
    pub engine_blacklisting: bool,
    pub failures_before_blacklist: &'a Option<Spanned<u32>>,
    pub engine_greylisting: bool,
    pub redundant_rescheduling: bool,
    pub task_max_time_secs: &'a Option<Spanned<u64>>,
    pub expected_task_time_secs: &'a Option<Spanned<u64>>,
    pub cancel_redundant_on_first_result: &'a Option<Spanned<bool>>,
    /// Grid Engine's `qsub -js`: the job's functional shares in ticket mode.
    pub job_share: &'a Option<Spanned<u32>>,
    pub project_priority: &'a Option<Spanned<u32>>,
    /// Grid Engine's soft requests (`qsub -soft -l`): a requirements expression.
    pub soft: &'a Option<Spanned<String>>,
}

impl OptionKeys<'_> {
    /// The job's options, each checked against the others, and its tasks'
    /// conditions. `root_library` is read already; `depends_on_job` checks one
    /// entry of `depends_on` (named `what`); `task_conditions` reads the
    /// conditions, after the job's own dependencies, before the options that
    /// need a dependency.
    fn read(
        &self,
        root_library: Option<LibraryRef>,
        depends_on_job: impl Fn(&str, &Spanned<String>) -> Result<JobId, ValueProblem>,
        task_conditions: impl FnOnce() -> Result<BTreeMap<u32, TaskConditions>, ValueProblem>,
    ) -> Result<(JobOptions, BTreeMap<u32, TaskConditions>), ValueProblem> {
        let affinity = preferences("affinity", self.affinity)?;
        let soft = match self.soft {
            Some(source) => expression("soft", source)?,
            None => String::new(),
        };
        bounded("depends_on", self.depends_on)?;
        let depends_on_jobs = self
            .depends_on
            .iter()
            .enumerate()
            .map(|(entry_idx, job)| depends_on_job(&format!("depends_on[{entry_idx}]"), job))
            .collect::<Result<Vec<JobId>, ValueProblem>>()?;
        let task_conditions = task_conditions()?;
        // An option that refines another is refused without it, rather than ignored.
        let needs = |span: Range<usize>, option: &str, other_on: bool, other: &str| -> Result<(), ValueProblem> {
            if other_on { Ok(()) } else { Err(ValueProblem::At(span, format!("{option} needs {other}"))) }
        };
        let any_dependency = !depends_on_jobs.is_empty() || task_conditions.values().any(|c| !c.depends_on.is_empty());
        let is_on = |option: &Option<Spanned<bool>>| option.as_ref().is_some_and(|o| *o.get_ref());
        if let Some(option) = self.fail_on_dependency_failure.as_ref().filter(|o| *o.get_ref()) {
            let other = "something to depend on: `depends_on` of the job or of a task";
            needs(option.span(), "fail_on_dependency_failure", any_dependency, other)?;
        }
        if let Some(option) = self.cancel_redundant_on_first_result.as_ref().filter(|o| *o.get_ref()) {
            let other = "redundant_rescheduling = true";
            needs(option.span(), "cancel_redundant_on_first_result", self.redundant_rescheduling, other)?;
        }
        if let Some(n) = self.failures_before_blacklist {
            needs(n.span(), "failures_before_blacklist", self.engine_blacklisting, "engine_blacklisting = true")?;
        }
        if let Some(time) = self.task_max_time_secs {
            needs(time.span(), "task_max_time_secs", self.redundant_rescheduling, "redundant_rescheduling = true")?;
        }
        let failures_before_blacklist = match self.failures_before_blacklist {
            Some(n) if *n.get_ref() == 0 => return Err(problem_at(n, "failures_before_blacklist must be at least 1")),
            Some(n) => *n.get_ref(),
            None if self.engine_blacklisting => 1,
            None => 0,
        };
        let task_max_time_ms = match self.task_max_time_secs {
            Some(time) if *time.get_ref() == 0 => {
                return Err(problem_at(time, "task_max_time_secs must be at least 1 (leave it out for no limit)"));
            }
            Some(time) => time.get_ref().saturating_mul(1000),
            None => 0,
        };
        let expected_task_time_ms = match self.expected_task_time_secs {
            Some(time) if *time.get_ref() == 0 => {
                return Err(problem_at(time, "expected_task_time_secs must be at least 1 (leave it out for none)"));
            }
            Some(time) => time.get_ref().saturating_mul(1000),
            None => 0,
        };
        let shares_max = crate::core::family::sgeee::share_tree::SHARES_MAX;
        let job_share = match self.job_share {
            Some(n) if *n.get_ref() > shares_max => {
                return Err(problem_at(n, format!("job_share must be within 0..={shares_max}")));
            }
            Some(n) => *n.get_ref(),
            None => 0,
        };
        use crate::core::family::techila::{PRIORITY_HIGHEST, PRIORITY_LOWEST};
        let project_priority = match self.project_priority {
            Some(n) if !(PRIORITY_HIGHEST..=PRIORITY_LOWEST).contains(n.get_ref()) => {
                return Err(problem_at(
                    n,
                    format!("project_priority must be within {PRIORITY_HIGHEST} (Highest)..={PRIORITY_LOWEST} (Lowest)"),
                ));
            }
            Some(n) => *n.get_ref(),
            None => 0,
        };
        let options = JobOptions {
            job_share,
            project_priority,
            root_library,
            affinity,
            depends_on_jobs,
            fail_on_dependency_failure: is_on(self.fail_on_dependency_failure),
            continue_on_task_failure: self.continue_on_task_failure,
            engine_blacklisting: self.engine_blacklisting,
            failures_before_blacklist,
            engine_greylisting: self.engine_greylisting,
            redundant_rescheduling: self.redundant_rescheduling,
            task_max_time_ms,
            expected_task_time_ms,
            cancel_redundant_on_first_result: is_on(self.cancel_redundant_on_first_result),
            deadline_ms: None,
            tasks_total: None,
            soft,
            span: crate::core::event::Span::Engine,
            reserve: false,
            process_type: String::new(),
            companion_argv: Vec::new(),
            campaign: Default::default(),
        };
        Ok((options, task_conditions))
    }
}

/// `job-` and 12 hex digits of a random UUID: unique enough, short enough to type.
fn generated_job_id() -> JobId {
    let uuid = uuid::Uuid::new_v4().simple().to_string();
    JobId::new(&format!("job-{}", &uuid[..12])).expect("generated ids are valid")
}

#[cfg(test)]
mod tests;

/// A campaign type by name; an unknown one names the known ones.
pub(crate) fn campaign_type(
    file_text: FileText<'_>,
    name: &Spanned<String>,
) -> Result<crate::core::event::CampaignType, JobFileError> {
    use crate::core::event::CampaignType;
    CampaignType::from_name(name.get_ref()).ok_or_else(|| {
        file_text.at(name, format!("unknown campaign \"{}\"; known: {}", name.get_ref(), CampaignType::NAMES.join(", ")))
    })
}
