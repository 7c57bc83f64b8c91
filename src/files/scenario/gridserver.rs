//! The GridServer keys of a scenario that are its own: grid libraries
//! published during the run (`[[libraries]]`) and held by engine groups at
//! login (`libraries`), and the checks of a scenario built in code that the
//! job file's reader makes of a file (dependencies, conditions, libraries).
//!
//! Everything here reads the raw, spanned TOML of `scenario.rs` and returns the
//! problem at its span, which the caller turns into `file:line: message`.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;

use crate::core::event::LibraryRef;
use crate::core::ids::JobId;

use super::{JobPlan, LibraryPlan};
use crate::files::jobfile::ValueProblem;
pub(super) use crate::files::jobfile::bounded as bounded_list;

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

/// Libraries held at login: a list of `name@version`.
pub(super) fn held_libraries(list: &[Spanned<String>]) -> Result<Vec<LibraryRef>, Problem> {
    bounded_list("libraries", list)?;
    list.iter()
        .enumerate()
        .map(|(n, text)| parse_library(text.get_ref()).map_err(|p| (text.span(), format!("libraries[{n}]: {p}"))))
        .collect()
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
