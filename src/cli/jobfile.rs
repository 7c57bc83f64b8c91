//! The job file: a TOML description of a job, turned into a `JobSpec`.
//!
//! Every error names the file, the line and what is wrong, including errors of
//! meaning (a bad requirements expression points at the byte inside the string),
//! so a user never has to guess. See the README's job file reference.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use crate::core::event::{JobSpec, TaskSet, TaskTemplate, TASKS_PER_JOB_MAX};
use crate::core::expr;
use crate::core::ids::JobId;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    id: Option<Spanned<String>>,
    owner: Option<String>,
    #[serde(default)]
    project: String,
    #[serde(default = "default_queue")]
    queue: String,
    #[serde(default)]
    priority: i32,
    #[serde(default)]
    requirements: Option<Spanned<String>>,
    #[serde(default = "default_max_attempts")]
    max_attempts: Spanned<u32>,
    #[serde(default)]
    wall_time_limit_secs: u64,
    #[serde(default = "default_slots")]
    slots_per_task: Spanned<u32>,
    task: Spanned<TaskSection>,
    tasks: Spanned<Tasks>,
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
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
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
    let error = |offset: usize, message: String| JobFileError { path: path.to_string(), line: line_of(text, offset), message };
    let file: JobFile = toml::from_str(text).map_err(|e| {
        let offset = e.span().map(|span| span.start).unwrap_or(0);
        error(offset, e.message().to_string())
    })?;
    let id = match &file.id {
        Some(id) => JobId::new(id.get_ref()).map_err(|e| error(id.span().start, format!("id: {e}")))?,
        None => generated_job_id(),
    };
    let requirements = match &file.requirements {
        Some(source) => {
            let value = source.get_ref();
            // The string starts after its opening quote; point into it.
            let start = source.span().start + 1;
            expr::parse(value).map_err(|e| {
                let line_in_string = value[..e.position.min(value.len())].matches('\n').count();
                JobFileError {
                    path: path.to_string(),
                    line: line_of(text, start) + line_in_string,
                    message: format!("requirements {}", e.render(value).trim_end()),
                }
            })?;
            value.clone()
        }
        None => String::new(),
    };
    if *file.max_attempts.get_ref() == 0 {
        return Err(error(file.max_attempts.span().start, "max_attempts must be at least 1".into()));
    }
    if *file.slots_per_task.get_ref() == 0 {
        return Err(error(file.slots_per_task.span().start, "slots_per_task must be at least 1".into()));
    }
    let task = file.task.get_ref();
    if task.argv.is_empty() {
        return Err(error(file.task.span().start, "[task] argv must name a program to run".into()));
    }
    let tasks = match file.tasks.get_ref() {
        Tasks::Count(n) if *n >= 1 && *n <= i64::from(TASKS_PER_JOB_MAX) => TaskSet::Count(*n as u32),
        Tasks::Count(n) => {
            return Err(error(file.tasks.span().start, format!("tasks must be between 1 and {TASKS_PER_JOB_MAX}, not {n}")));
        }
        Tasks::List(list) if list.is_empty() => return Err(error(file.tasks.span().start, "tasks: the list is empty".into())),
        Tasks::List(list) if list.len() > TASKS_PER_JOB_MAX as usize => {
            return Err(error(file.tasks.span().start, format!("tasks: {} tasks, more than {TASKS_PER_JOB_MAX}", list.len())));
        }
        Tasks::List(list) => TaskSet::List(list.clone()),
    };
    Ok(JobSpec {
        id,
        owner: file.owner.unwrap_or_else(|| owner_default.to_string()),
        project: file.project,
        queue: file.queue,
        priority: file.priority,
        requirements,
        max_attempts: *file.max_attempts.get_ref(),
        wall_time_limit_ms: file.wall_time_limit_secs.saturating_mul(1000),
        slots_per_task: *file.slots_per_task.get_ref(),
        template: TaskTemplate { argv: task.argv.clone(), params: task.params.clone() },
        tasks,
    })
}

/// `job-` and 12 hex digits of a random UUID: unique enough, short enough to type.
fn generated_job_id() -> JobId {
    let uuid = uuid::Uuid::new_v4().simple().to_string();
    JobId::new(&format!("job-{}", &uuid[..12])).expect("generated ids are valid")
}

#[cfg(test)]
mod tests {
    use super::*;
    use expect_test::expect;

    fn check_error(text: &str, expect: expect_test::Expect) {
        let error = parse_job(text, "job.toml", "alice").expect_err("the file is bad");
        expect.assert_eq(&error.to_string());
    }

    #[test]
    fn a_complete_file_becomes_a_job() {
        let spec = parse_job(
            r#"
id = "render-1"
project = "film"
priority = 5
requirements = 'os == "linux" && memory_mb >= 4096'
max_attempts = 2
wall_time_limit_secs = 600
tasks = 100

[task]
argv = ["render", "--frame={index}", "--scene={scene}"]
params = { scene = "intro" }
"#,
            "job.toml",
            "alice",
        )
        .unwrap();
        assert_eq!(spec.id.as_str(), "render-1");
        assert_eq!(spec.owner, "alice");
        assert_eq!(spec.task_count(), 100);
        assert_eq!(spec.wall_time_limit_ms, 600_000);
        assert_eq!(spec.template.params["scene"], "intro");
    }

    #[test]
    fn a_task_list_gives_each_task_its_parameters() {
        let spec = parse_job("tasks = [{ x = \"1\" }, { x = \"2\" }]\n[task]\nargv = [\"echo\", \"{x}\"]\n", "job.toml", "bob").unwrap();
        assert_eq!(spec.task_count(), 2);
        assert!(spec.id.as_str().starts_with("job-"));
    }

    #[test]
    fn errors_name_the_line_and_what_is_wrong() {
        check_error("tasks = 3\n[task]\nargv = [\"x\"]\ncolour = 1\n", expect!["job.toml:4: unknown field `colour`, expected `argv` or `params`"]);
        check_error("tasks = 0\n[task]\nargv = [\"x\"]\n", expect!["job.toml:1: tasks must be between 1 and 10000000, not 0"]);
        check_error("id = \"a b\"\ntasks = 1\n[task]\nargv = [\"x\"]\n", expect!["job.toml:1: id: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found ' ' at byte 1"]);
        check_error("tasks = 1\n[task]\nargv = []\n", expect!["job.toml:2: [task] argv must name a program to run"]);
        check_error("tasks = 1\nmax_attempts = 0\n[task]\nargv = [\"x\"]\n", expect!["job.toml:2: max_attempts must be at least 1"]);
        check_error("tasks = 1\n\nrequirements = 'memory_mb >= \"lots\"'\n[task]\nargv = [\"x\"]\n", expect![[r#"
            job.toml:3: requirements at byte 13: `memory_mb` is a number; compare it with a number, not a string
              memory_mb >= "lots"
                           ^"#]]);
        check_error("tasks = 1\n[task]\nargv = [\"x\"\n", expect!["job.toml:3: unclosed array, expected `]`"]);
    }
}
