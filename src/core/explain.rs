//! Why a task waits, or where it went: Grid Engine's scheduling info, answerable
//! because every filter in `schedule::filters` carries its reason and every
//! ranking input of `schedule::dispatch` is a function of the state.
//!
//! For a waiting task, each engine is listed under the first rule that keeps it
//! from the task (in the order of `filters::check`, then the tier rule), and the
//! answer says whether any logged-in engine could ever take it. For a dispatched
//! or finished task, it says where it went and ranks that engine among the
//! engines the task's permanent rules allow, by the dispatcher's own terms (tier,
//! score and its parts, load index). Scores are as of the state asked about: the
//! load of an engine then may differ from its load at the dispatch (`gridfold why
//! --at SEQ` asks the state at the dispatch).

use std::collections::BTreeMap;

use super::ids::{Attempt, EngineId, TaskRef};
use super::schedule::dispatch::{job_score, load_index, task_score};
use super::schedule::queue_sort::{self, LOAD_UNKNOWN, SortKey, sort_key};
use super::family::{self as families, JobAhead};
use super::schedule::filters::{self, TaskRules, Unfit};
use super::state::{EngineIdx, EngineStatus, JobStatus, State, TaskKey, TaskStatus};

/// At most this many engines are ranked in an answer about a dispatched task.
pub const RANKED_ENGINES_MAX: usize = 10;

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Explanation {
    pub task: String,
    pub job_status: &'static str,
    pub task_status: &'static str,
    pub attempts: Attempt,
    pub failures: u16,
    #[serde(flatten)]
    pub detail: Detail,
    /// The task went (or would go) to an engine that does not meet its job's
    /// soft request (`schedule::soft`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soft_unmet: Option<super::schedule::soft::SoftUnmet>,
    /// The engines and clusters its job excludes under a family's rule
    /// (CiGri's sinks, rule `cigri-sink`), under the family's key.
    #[serde(flatten)]
    pub excluded_by_family: Option<families::ExcludedWhy>,
    /// Writes aimed at the task's job that the fold refused, among the
    /// rejections the state keeps: who sent each (as its subject names them)
    /// and why, so an owner sees who tried what on the job.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused_writes: Vec<RefusedWrite>,
}

/// One write aimed at a job that the fold refused.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RefusedWrite {
    pub seq: u64,
    /// Who, as the subject names them: `user alice`, `an operator`.
    pub by: String,
    pub kind: &'static str,
    pub reason: String,
}

/// The refused writes the state keeps that aim at `job`, oldest first.
fn refused_writes(state: &State, job: &super::ids::JobId) -> Vec<RefusedWrite> {
    state
        .rejections
        .recent
        .iter()
        .filter(|rejected| rejected.rejection.job() == Some(job))
        .map(|rejected| RefusedWrite {
            seq: rejected.seq.0,
            by: super::subject::origin_of(&rejected.subject).to_string(),
            kind: rejected.rejection.kind_name(),
            reason: rejected.rejection.to_string(),
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Detail {
    /// The task waits: each engine under the first rule that keeps it from the task.
    Waiting {
        /// How many runnable jobs the scheduler examines before this one.
        jobs_ahead: usize,
        /// The rule of the policy's family that orders them (`priority-then-submission`,
        /// `user-sort`, `dispatch-priority`).
        order_rule: &'static str,
        /// The first job examined before this one, with the figures the rule compares.
        first_job_ahead: Option<JobAhead>,
        /// This job's own figures under the rule.
        job_figures: Vec<(&'static str, i64)>,
        /// Engines that could take it right now (it waits only for the next scheduling run).
        fit_now: Vec<String>,
        /// rule name -> engines it excluded, sorted by engine id.
        excluded: BTreeMap<&'static str, Vec<String>>,
        /// Whether any logged-in engine could ever run it: one that no permanent
        /// rule (requirements, slots, discriminator, blacklist) excludes.
        could_ever_fit: bool,
        unschedulable: Option<&'static str>,
        avoided_engine: Option<String>,
        /// Tasks it depends on that have not ended.
        waits_for_tasks: Vec<String>,
        /// Jobs its job depends on that have not ended (the job is held until they have).
        waits_for_jobs: Vec<String>,
        queue_jump: bool,
        /// Its job is held by an operator (`gridfold hold`): no task of it is dispatched.
        held: bool,
        /// Its job was submitted in parts and not all have arrived: (tasks so far, tasks declared).
        awaits_parts: Option<(u32, u32)>,
        /// Under a resource-first family: the rule of its scheduler that
        /// keeps it waiting, under the family's key.
        #[serde(flatten)]
        resource_first: Option<families::ResourceFirstWhy>,
        /// A parallel task (`span = "site"`): the slots it needs at once and
        /// the free slots of the engines that may take a part, by site.
        #[serde(skip_serializing_if = "Option::is_none")]
        parallel: Option<Box<super::schedule::parallel::ParallelWhy>>,
        /// Resource reservation (`max_reservation`): the reservation the task
        /// holds, or the one whose slots it may not use.
        #[serde(skip_serializing_if = "Option::is_none")]
        reservation: Option<Box<super::schedule::reservation_why::ReservationWhy>>,
        /// The rule of the family's ordering that holds its job, if one
        /// does, under the family's key.
        #[serde(flatten)]
        held_by_family: Option<families::HeldWhy>,
    },
    /// The task has live attempts (more than one when it has redundant copies).
    Live {
        attempts: Vec<LiveInfo>,
        /// A redundant copy waits in the job's queue.
        copy_waiting: bool,
        /// Copied under a family's rule (a task that expired), under the
        /// family's key.
        #[serde(flatten)]
        copied_by_family: Option<families::CopiedWhy>,
        /// The engine of the newest attempt among the engines its rules allow, best first.
        ranking: Vec<EngineRank>,
        /// A parallel task's parts (engine, slots), the master first.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        parts: Vec<(String, u32)>,
    },
    /// The task has ended.
    Ended {
        last_engine: Option<String>,
        last_failed_on: Option<String>,
        ranking: Vec<EngineRank>,
    },
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LiveInfo {
    pub engine: String,
    pub attempt: Attempt,
    pub started: bool,
    pub dispatched_ms: u64,
    /// Suspended by an operator (`gridfold suspend`): stopped, its slots kept.
    pub suspended: bool,
    /// Suspended by a suspend threshold (policy `suspend_thresholds`): which
    /// load value, its value and the threshold.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspended_by_threshold: Option<super::state::thresholds::ThresholdCause>,
}

/// One engine as the dispatcher ranks it for the task: lower tier, then higher
/// score, then the queue sort key (`queue_sort_method`: load index then
/// `seq_no`, or `seq_no` then load index, lower first), then engine id.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EngineRank {
    pub engine: String,
    pub chosen: bool,
    pub tier: u32,
    pub score: i64,
    /// The job's affinity plus its greylist penalty.
    pub job_score: i64,
    /// The task's own affinity and task affinity.
    pub task_score: i64,
    /// The load formula's index; [`LOAD_UNKNOWN`] when the engine has not
    /// reported a value the formula names.
    pub load_index: i64,
    /// The engine's queue sequence number (`seq_no`).
    pub seq_no: i64,
    /// Whether the engine meets the job's soft request; `None` when it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soft_met: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExplainError {
    #[error("no job {0}")]
    UnknownJob(String),
    #[error("job {job} has {n_tasks} tasks; there is no task {index}")]
    UnknownTask { job: String, index: u32, n_tasks: u32 },
    /// The job ended and left the state after the policy's retention.
    #[error("{0}")]
    RetiredJob(RetiredJobText),
}

/// How a person is told that a job was retired: what it ended as and when, in
/// log time before the state's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct RetiredJobText {
    pub job: String,
    pub status: &'static str,
    pub n_tasks: u32,
    pub ended_s_ago: u64,
    pub retired_s_ago: u64,
}

impl std::fmt::Display for RetiredJobText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "job {} ended {} ({} task(s)) {} s ago and was retired from the state {} s ago: only its outcome and its usage are kept",
            self.job, self.status, self.n_tasks, self.ended_s_ago, self.retired_s_ago
        )
    }
}

/// The text for a retired job, if `job` names one the state still remembers.
pub fn retired_job_text(state: &State, job: &crate::core::ids::JobId) -> Option<RetiredJobText> {
    let retired = state.retired_job(job)?;
    Some(RetiredJobText {
        job: job.to_string(),
        status: retired.status.as_str(),
        n_tasks: retired.n_tasks,
        ended_s_ago: state.now_ms.saturating_sub(retired.ended_ms) / 1000,
        retired_s_ago: state.now_ms.saturating_sub(retired.retired_ms) / 1000,
    })
}

pub fn explain(state: &State, task: &TaskRef) -> Result<Explanation, ExplainError> {
    if let Some(text) = retired_job_text(state, &task.job) {
        return Err(ExplainError::RetiredJob(text));
    }
    let j = state.job_idx(&task.job).ok_or_else(|| ExplainError::UnknownJob(task.job.to_string()))?;
    let job = state.job(j);
    let key = state.task_key(task).ok_or(ExplainError::UnknownTask {
        job: task.job.to_string(),
        index: task.index,
        n_tasks: job.n_tasks(),
    })?;
    let task_state = state.task(key);
    let engine_name = |e: EngineIdx| state.engine(e).id.to_string();
    let mut went_to = None;
    let detail = match task_state.status {
        TaskStatus::Waiting if job.status == JobStatus::Active => waiting(state, key),
        TaskStatus::Dispatched | TaskStatus::Running => {
            let live = state.live_attempts_of(key);
            let newest = live.iter().max_by_key(|live| live.attempt).expect("live tasks have attempts").engine;
            went_to = Some(newest);
            Detail::Live {
                attempts: live
                    .iter()
                    .map(|live| LiveInfo {
                        engine: engine_name(live.engine),
                        attempt: live.attempt,
                        started: live.started_ms.is_some(),
                        dispatched_ms: live.dispatched_ms,
                        suspended: state.suspended_since(key, live.attempt).is_some(),
                        suspended_by_threshold: state.suspended_by_threshold(key, live.attempt).cloned(),
                    })
                    .collect(),
                copy_waiting: job.copy_waits(key.index),
                copied_by_family: families::why_copied(state, key),
                ranking: ranking(state, key, Some(newest)),
                parts: super::schedule::parallel::parts_of_task(state, key),
            }
        }
        _ => {
            let last = task_state.last_engine.get();
            went_to = last;
            Detail::Ended {
                last_engine: last.map(engine_name),
                last_failed_on: task_state.last_failed_on.get().map(engine_name),
                ranking: if last.is_some() { ranking(state, key, last) } else { Vec::new() },
            }
        }
    };
    let soft_unmet = match &detail {
        Detail::Waiting { fit_now, .. } => {
            let could_take: Vec<EngineIdx> =
                fit_now.iter().filter_map(|id| EngineId::new(id).ok().and_then(|id| state.engine_idx(&id))).collect();
            super::schedule::soft::SoftUnmet::of(state, job, None, &could_take)
        }
        _ => went_to.and_then(|e| super::schedule::soft::SoftUnmet::of(state, job, Some(e), &[])),
    };
    Ok(Explanation {
        task: task.to_string(),
        job_status: job.status.as_str(),
        task_status: task_state.status.as_str(),
        attempts: task_state.attempts,
        failures: task_state.failures,
        detail,
        soft_unmet,
        excluded_by_family: families::why_excluded(state, key.job),
        refused_writes: refused_writes(state, &task.job),
    })
}

/// Engines sorted by id, so every list in an answer is.
fn engines_by_id(state: &State) -> Vec<(&EngineId, EngineIdx)> {
    let mut engines: Vec<(&EngineId, EngineIdx)> =
        state.engines().iter().enumerate().map(|(e, engine)| (&engine.id, EngineIdx(e as u32))).collect();
    engines.sort();
    engines
}

fn waiting(state: &State, key: TaskKey) -> Detail {
    let job = state.job(key.job);
    let task_state = state.task(key);
    let mut excluded: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    let mut could_ever_fit = false;
    let mut passing: Vec<(&EngineId, EngineIdx)> = Vec::new();
    let rules = TaskRules::new(state, key);
    for (id, e) in engines_by_id(state) {
        match filters::check(state, &rules, e, 0) {
            Ok(()) => {
                could_ever_fit = true;
                passing.push((id, e));
            }
            Err(unfit) => {
                if !unfit.is_permanent() && unfit != Unfit::NotLoggedIn {
                    could_ever_fit = true;
                }
                excluded.entry(unfit.rule_name()).or_default().push(id.to_string());
            }
        }
    }
    let best_tier = passing.iter().map(|&(_, e)| state.engine(e).tier).min().unwrap_or(0);
    let mut fit_now = Vec::new();
    for (id, e) in passing {
        match filters::tier(state.engine(e), best_tier) {
            Ok(()) => fit_now.push(id.to_string()),
            Err(unfit) => excluded.entry(unfit.rule_name()).or_default().push(id.to_string()),
        }
    }
    let waits_for_tasks = match job.condition(key.index) {
        Some(condition) => condition
            .depends_on
            .iter()
            .filter(|&&dependency| !state.task_has_ended(dependency))
            .map(|&dependency| state.task_ref(dependency).to_string())
            .collect(),
        None => Vec::new(),
    };
    let waits_for_jobs = state.unended_dependencies_of(key.job).into_iter().map(|j| state.job(j).id.to_string()).collect();
    let position = families::position(state, key.job);
    Detail::Waiting {
        jobs_ahead: position.jobs_ahead,
        order_rule: position.rule,
        first_job_ahead: position.first_ahead,
        job_figures: position.figures,
        fit_now,
        excluded,
        could_ever_fit,
        unschedulable: job.unschedulable.map(|u| u.as_str()),
        avoided_engine: rules.avoided().map(|e| state.engine(e).id.to_string()),
        waits_for_tasks,
        waits_for_jobs,
        queue_jump: task_state.is_queue_jump(),
        held: job.held,
        awaits_parts: job.options.tasks_total.filter(|_| job.awaits_parts()).map(|total| (job.n_tasks(), total)),
        resource_first: families::why_resource_first(state, key),
        parallel: super::schedule::parallel::why(state, key).map(Box::new),
        reservation: super::schedule::reservation_why::why(state, key).map(Box::new),
        held_by_family: job.is_runnable().then(|| families::why_held(state, key.job)).flatten(),
    }
}

/// The engines the task's permanent rules allow (plus `chosen`, whatever it is
/// now), ranked as the dispatcher ranks them, best first, at most
/// [`RANKED_ENGINES_MAX`] (the chosen engine always among them).
fn ranking(state: &State, key: TaskKey, chosen: Option<EngineIdx>) -> Vec<EngineRank> {
    let job = state.job(key.job);
    type RankKey = (u32, bool, i64, SortKey, EngineId);
    let mut ranks: Vec<(EngineRank, RankKey)> = Vec::new();
    let rules = TaskRules::new(state, key);
    for (id, e) in engines_by_id(state) {
        let engine = state.engine(e);
        let allowed = engine.status == EngineStatus::LoggedIn
            && match filters::check(state, &rules, e, 0) {
                Ok(()) => true,
                Err(unfit) => !unfit.is_permanent() && unfit != Unfit::NotLoggedIn,
            };
        if !allowed && chosen != Some(e) {
            continue;
        }
        let (job_part, task_part) = (job_score(state, job, e), task_score(state, job, key.index, e));
        let load = load_index(&state.policy.load_formula, engine, engine.used);
        let key = sort_key(state.policy.queue_sort_method, &state.policy.load_formula, engine, engine.used);
        let rank = EngineRank {
            engine: id.to_string(),
            chosen: chosen == Some(e),
            tier: engine.tier,
            score: job_part + task_part,
            job_score: job_part,
            task_score: task_part,
            load_index: load,
            seq_no: queue_sort::seq_no(engine),
            soft_met: job.soft.as_ref().map(|_| !super::schedule::soft::unmet(job, engine)),
        };
        let soft_unmet = super::schedule::soft::unmet(job, engine);
        ranks.push((rank, (engine.tier, soft_unmet, -(job_part + task_part), key, id.clone())));
    }
    ranks.sort_by(|a, b| a.1.cmp(&b.1));
    let chosen_at = ranks.iter().position(|(rank, _)| rank.chosen);
    let mut shown: Vec<EngineRank> = ranks.iter().take(RANKED_ENGINES_MAX).map(|(rank, _)| rank.clone()).collect();
    if let Some(at) = chosen_at.filter(|&at| at >= RANKED_ENGINES_MAX) {
        shown[RANKED_ENGINES_MAX - 1] = ranks[at].0.clone();
    }
    shown
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "task {}: {} (job {}), attempts {}, failures {}", self.task, self.task_status, self.job_status, self.attempts, self.failures)?;
        match &self.detail {
            Detail::Waiting {
                jobs_ahead,
                order_rule,
                first_job_ahead,
                job_figures,
                fit_now,
                excluded,
                could_ever_fit,
                unschedulable,
                avoided_engine,
                waits_for_tasks,
                waits_for_jobs,
                queue_jump,
                held: job_held,
                awaits_parts,
                resource_first,
                parallel,
                reservation,
                held_by_family,
            } => {
                if *job_held {
                    writeln!(f, "  its job is held by an operator (gridfold release to let it run)")?;
                }
                if let Some((so_far, total)) = awaits_parts {
                    writeln!(f, "  its job awaits its parts: {so_far} of {total} tasks have arrived")?;
                }
                if let Some(resource_first) = resource_first {
                    writeln!(f, "  {resource_first}")?;
                }
                if let Some(parallel) = parallel {
                    writeln!(f, "  {parallel}")?;
                }
                if let Some(reservation) = reservation {
                    writeln!(f, "  {reservation}")?;
                }
                if let Some(held) = held_by_family {
                    writeln!(f, "  {held}")?;
                }
                if !waits_for_jobs.is_empty() {
                    writeln!(f, "  its job waits for job(s) to end: {}", waits_for_jobs.join(", "))?;
                }
                if !waits_for_tasks.is_empty() {
                    writeln!(f, "  waits for task(s) to end: {}", waits_for_tasks.join(", "))?;
                }
                write_position(f, *jobs_ahead, order_rule, first_job_ahead.as_ref(), job_figures)?;
                if *queue_jump {
                    writeln!(f, "  it jumps its job's queue")?;
                }
                let held = !waits_for_jobs.is_empty() || !waits_for_tasks.is_empty() || *job_held || awaits_parts.is_some();
                if !fit_now.is_empty() && held {
                    writeln!(f, "  once they have ended, could run on: {}", fit_now.join(", "))?;
                } else if !fit_now.is_empty() {
                    writeln!(f, "  could run now on: {}", fit_now.join(", "))?;
                }
                for (rule, engines) in excluded {
                    writeln!(f, "  excluded by {rule}: {}", engines.join(", "))?;
                }
                if let Some(engine) = avoided_engine {
                    writeln!(f, "  avoids {engine}, where its last attempt failed, while another engine could run it")?;
                }
                if let Some(reason) = unschedulable {
                    writeln!(f, "  flagged unschedulable: {reason}")?;
                }
                if !could_ever_fit {
                    writeln!(f, "  no logged-in engine could ever run it; it waits for one that can")?;
                }
            }
            Detail::Live { attempts, copy_waiting, copied_by_family, ranking, parts } => {
                if let Some(copied) = copied_by_family {
                    writeln!(f, "  {copied}")?;
                }
                for live in attempts {
                    let state = if live.suspended { "suspended" } else if live.started { "running" } else { "dispatched, not yet started" };
                    match &live.suspended_by_threshold {
                        Some(cause) => writeln!(f, "  attempt {} {state} on {}: suspended by a threshold: {cause}", live.attempt, live.engine)?,
                        None => writeln!(f, "  attempt {} {state} on {}", live.attempt, live.engine)?,
                    }
                }
                if *copy_waiting {
                    writeln!(f, "  a redundant copy waits in the queue")?;
                }
                if !parts.is_empty() {
                    let named: Vec<String> = parts.iter().map(|(engine, slots)| format!("{engine} ({slots})")).collect();
                    writeln!(f, "  a parallel task on {} (the first runs the command)", named.join(", "))?;
                }
                write_ranking(f, ranking)?;
            }
            Detail::Ended { last_engine, last_failed_on, ranking } => {
                if let Some(engine) = last_engine {
                    writeln!(f, "  its last attempt went to {engine}")?;
                }
                if let Some(engine) = last_failed_on {
                    writeln!(f, "  its last failure was on {engine}")?;
                }
                write_ranking(f, ranking)?;
            }
        }
        if let Some(soft_unmet) = &self.soft_unmet {
            writeln!(f, "  {soft_unmet}")?;
        }
        if let Some(excluded) = &self.excluded_by_family {
            write!(f, "{excluded}")?;
        }
        for refused in &self.refused_writes {
            writeln!(f, "  refused at seq {}: {} ({}): {}", refused.seq, refused.by, refused.kind, refused.reason)?;
        }
        Ok(())
    }
}

/// Where the job stands in its family's order, in the family's own terms.
fn write_position(
    f: &mut std::fmt::Formatter<'_>,
    jobs_ahead: usize,
    rule: &str,
    first: Option<&JobAhead>,
    own: &[(&'static str, i64)],
) -> std::fmt::Result {
    let figures = |figures: &[(&'static str, i64)]| {
        figures.iter().map(|(name, value)| format!("{} {value}", name.replace('_', " "))).collect::<Vec<_>>().join(", ")
    };
    let Some(first) = first else {
        return match rule {
            "user-sort" | "dispatch-priority" => {
                writeln!(f, "  no runnable job is examined before this one ({})", figures(own))
            }
            _ => writeln!(f, "  no runnable job is examined before this one"),
        };
    };
    match rule {
        "user-sort" => writeln!(
            f,
            "  behind {jobs_ahead} runnable job(s) by priority, then the user with the fewest running tasks (user_sort); the first is {} ({}); this job: {}",
            first.job,
            figures(&first.figures),
            figures(own)
        ),
        "dispatch-priority" => writeln!(
            f,
            "  behind {jobs_ahead} runnable job(s) with a higher dispatch priority; the first is {} ({}); this job: {}",
            first.job,
            figures(&first.figures),
            figures(own)
        ),
        _ => writeln!(
            f,
            "  behind {jobs_ahead} runnable job(s) by priority, then submission; the first is {} ({})",
            first.job,
            figures(&first.figures)
        ),
    }
}

fn write_ranking(f: &mut std::fmt::Formatter<'_>, ranking: &[EngineRank]) -> std::fmt::Result {
    if ranking.is_empty() {
        return Ok(());
    }
    if ranking.iter().any(|rank| rank.soft_met.is_some()) {
        writeln!(f, "  ranking (tier, then the soft request met, then score, then queue_sort_method over load index and seq_no, then id):")?;
    } else {
        writeln!(f, "  ranking (tier, then score, then queue_sort_method over load index and seq_no, then id):")?;
    }
    for rank in ranking {
        let mark = if rank.chosen { "->" } else { "  " };
        let load = if rank.load_index == LOAD_UNKNOWN { "unknown".to_string() } else { rank.load_index.to_string() };
        let soft = match rank.soft_met {
            Some(true) => ", soft request met",
            Some(false) => ", soft request unmet",
            None => "",
        };
        writeln!(
            f,
            "  {mark} {}: tier {}{soft}, score {} (job {}, task {}), load index {load}, seq_no {}",
            rank.engine, rank.tier, rank.score, rank.job_score, rank.task_score, rank.seq_no
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::fold::fold;
    use crate::core::testkit::*;

    #[test]
    fn a_waiting_task_names_the_rule_that_excludes_each_engine() {
        let mut log = LogBuilder::new();
        log.login("full", 1, linux_props("lyon", 8192));
        log.login("tiny", 1, linux_props("lyon", 8192));
        let mut spec = job_spec("blocker", 1, "");
        spec.priority = 5;
        log.submit(spec);
        let mut wide = job_spec("wide", 1, "");
        wide.slots_per_task = 2;
        log.submit(wide);
        let mut state = crate::core::state::State::new();
        for entry in &log.entries {
            fold(&mut state, entry);
        }
        let why = explain(&state, &task("wide", 0)).unwrap();
        expect_test::expect![[r#"
            task wide/0: waiting (job active), attempts 0, failures 0
              behind 1 runnable job(s) by priority, then submission; the first is blocker (priority 5, submitted seq 4)
              excluded by too-few-slots: full, tiny
              no logged-in engine could ever run it; it waits for one that can
        "#]]
        .assert_eq(&why.to_string());
        assert!(matches!(explain(&state, &task("nope", 0)), Err(ExplainError::UnknownJob(_))));
        assert!(matches!(explain(&state, &task("wide", 3)), Err(ExplainError::UnknownTask { .. })));
    }
}
