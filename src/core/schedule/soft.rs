//! Grid Engine's soft requests (`qsub -soft -l`): a job's `soft` expression,
//! in the requirements language, that engines satisfying it rank first among
//! those that may take one of its tasks, without excluding the others.
//!
//! Where it ranks: after the engine tier and before the score (affinity, task
//! affinity, greylisting), the queue sort key and the engine id. The tier is
//! the operator's policy, which a user's wish does not override. Before the
//! score, because a soft request is what Grid Engine gives users to override
//! the queue selection (its queue sort), and gridfold's score is a finer,
//! weighted preference: an engine meeting the request beats any that does not,
//! and the score orders engines that meet it (or, when none is free, those
//! that do not). Grid Engine counts each unmet soft request of a job; here the
//! request is one expression, so an engine meets it or does not (a bit in the
//! rank, not a count).
//!
//! Cost: the bit depends on the job's expression and the engine's properties
//! only, which a run does not change, so the dispatcher keeps one ranked queue
//! per (category, soft expression) examined in a run, built once like a
//! category's and picked from in O(log n) (see [`super::dispatch`]).
//!
//! What it does not do: under a resource-first family (`techila`), the free
//! engine is chosen first and takes the first job it may, so a soft request
//! changes nothing there. A task that only an engine not meeting its request
//! could take is dispatched there at once (it does not wait for one that meets
//! it): `gridfold why` says so ("soft request unmet").

use crate::core::ids::EngineId;
use crate::core::reject::JobProblem;
use crate::core::state::{CompiledPreference, Engine, EngineIdx, EngineStatus, Job, State};

/// Most engines `why` names as meeting a soft request.
pub const ENGINES_NAMED_MAX: usize = 8;

/// The soft request of a job as submitted (empty: none), compiled; an
/// expression that does not parse is the job's problem, named `soft`.
pub(crate) fn compile(source: &str) -> Result<Option<CompiledPreference>, JobProblem> {
    if source.is_empty() {
        return Ok(None);
    }
    let preference = crate::core::event::Preference { when: source.to_string(), weight: 0 };
    CompiledPreference::compile(&preference).map(Some).map_err(|e| JobProblem::BadCondition {
        task: None,
        field: "soft".into(),
        position: e.position,
        message: e.message.clone(),
    })
}

/// Whether the engine fails the job's soft request (false without one): the
/// bit of the rank, least first.
pub fn unmet(job: &Job, engine: &Engine) -> bool {
    job.soft.as_ref().is_some_and(|soft| !soft.holds(engine))
}

/// The job's soft request as written, if it has one.
pub fn request(job: &Job) -> Option<&str> {
    job.soft.as_ref().map(|soft| soft.when.as_str())
}

/// The logged-in engines that meet the job's soft request (by id, at most
/// [`ENGINES_NAMED_MAX`]) and how many do in all.
pub fn engines_meeting(state: &State, job: &Job) -> (Vec<EngineId>, usize) {
    let mut named = Vec::new();
    let mut n_meeting = 0;
    let Some(soft) = job.soft.as_ref() else { return (named, 0) };
    let mut meeting: Vec<&Engine> =
        state.engines().iter().filter(|engine| engine.status == EngineStatus::LoggedIn && soft.holds(engine)).collect();
    meeting.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    for engine in meeting {
        n_meeting += 1;
        if named.len() < ENGINES_NAMED_MAX {
            named.push(engine.id.clone());
        }
    }
    (named, n_meeting)
}

/// `why`'s answer when a task went, or would go, to an engine that does not
/// meet its job's soft request.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SoftUnmet {
    /// The request as written.
    pub request: String,
    /// The engine of its newest attempt; `None` for a waiting task, none of
    /// whose engines free now meets the request.
    pub engine: Option<String>,
    /// Logged-in engines that meet it (at most [`ENGINES_NAMED_MAX`], by id).
    pub meeting: Vec<String>,
    /// How many logged-in engines meet it in all.
    pub n_meeting: usize,
}

impl SoftUnmet {
    /// The answer for a task that went to `went_to`, or (`None`) would go to
    /// one of `could_take`: `None` when that engine meets the request, or some
    /// engine that could take it now does.
    pub fn of(state: &State, job: &Job, went_to: Option<EngineIdx>, could_take: &[EngineIdx]) -> Option<SoftUnmet> {
        let request = request(job)?.to_string();
        let engine = match went_to {
            Some(e) if unmet(job, state.engine(e)) => Some(state.engine(e).id.to_string()),
            Some(_) => return None,
            None if !could_take.is_empty() && could_take.iter().all(|&e| unmet(job, state.engine(e))) => None,
            None => return None,
        };
        let (meeting, n_meeting) = engines_meeting(state, job);
        Some(SoftUnmet { request, engine, meeting: meeting.iter().map(EngineId::to_string).collect(), n_meeting })
    }
}

impl std::fmt::Display for SoftUnmet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.engine {
            Some(engine) => write!(f, "soft request unmet: {engine} does not meet `{}`", self.request)?,
            None => write!(f, "soft request unmet: no engine that could take it now meets `{}`", self.request)?,
        }
        if self.meeting.is_empty() {
            write!(f, "; no logged-in engine meets it")
        } else if self.n_meeting > self.meeting.len() {
            write!(f, "; engines that would: {} ({} in all)", self.meeting.join(", "), self.n_meeting)
        } else {
            write!(f, "; engines that would: {}", self.meeting.join(", "))
        }
    }
}
