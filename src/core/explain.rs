//! Why a task waits, or where it went: Grid Engine's scheduling info, answerable
//! because every filter in `schedule::filters` carries its reason.

use std::collections::BTreeMap;

use super::ids::{Attempt, EngineId, TaskRef};
use super::schedule::dispatch::load_index;
use super::schedule::filters::{self, Unfit};
use super::state::{EngineIdx, JobStatus, State, TaskStatus};

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Explanation {
    pub task: String,
    pub job_status: &'static str,
    pub task_status: &'static str,
    pub attempts: Attempt,
    pub failures: u16,
    #[serde(flatten)]
    pub detail: Detail,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Detail {
    /// The task waits: each engine under the first rule that keeps it from the task.
    Waiting {
        /// How many runnable jobs the scheduler examines before this one.
        jobs_ahead: usize,
        /// Engines that could take it right now (it waits only for the next scheduling run).
        fit_now: Vec<String>,
        /// rule name -> engines it excluded, sorted by engine id.
        excluded: BTreeMap<&'static str, Vec<String>>,
        /// Whether any logged-in engine could ever run it (requirements and slot count).
        could_ever_fit: bool,
        unschedulable: Option<&'static str>,
        avoided_engine: Option<String>,
    },
    /// The task has an attempt on an engine.
    Live { engine: String, attempt: Attempt, started: bool, dispatched_ms: u64, load_index: u64 },
    /// The task has ended.
    Ended { last_failed_on: Option<String> },
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExplainError {
    #[error("no job {0}")]
    UnknownJob(String),
    #[error("job {job} has {n_tasks} tasks; there is no task {index}")]
    UnknownTask { job: String, index: u32, n_tasks: u32 },
}

pub fn explain(state: &State, task: &TaskRef) -> Result<Explanation, ExplainError> {
    let j = state.job_idx(&task.job).ok_or_else(|| ExplainError::UnknownJob(task.job.to_string()))?;
    let job = state.job(j);
    let key = state.task_key(task).ok_or(ExplainError::UnknownTask {
        job: task.job.to_string(),
        index: task.index,
        n_tasks: job.n_tasks(),
    })?;
    let task_state = state.task(key);
    let engine_name = |e: EngineIdx| state.engine(e).id.to_string();
    let detail = match task_state.status {
        TaskStatus::Waiting if job.status == JobStatus::Active => {
            let mut fit_now = Vec::new();
            let mut excluded: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
            let mut could_ever_fit = false;
            let mut engines: Vec<(&EngineId, EngineIdx)> =
                state.engines().iter().enumerate().map(|(e, engine)| (&engine.id, EngineIdx(e as u32))).collect();
            engines.sort();
            for (id, e) in engines {
                match filters::check(state, job, e, 0) {
                    Ok(()) => {
                        could_ever_fit = true;
                        fit_now.push(id.to_string());
                    }
                    Err(unfit) => {
                        if !unfit.is_permanent() && unfit != Unfit::NotLoggedIn {
                            could_ever_fit = true;
                        }
                        excluded.entry(unfit.rule_name()).or_default().push(id.to_string());
                    }
                }
            }
            Detail::Waiting {
                jobs_ahead: state.runnable_jobs().take_while(|rank| rank.job != j).count(),
                fit_now,
                excluded,
                could_ever_fit,
                unschedulable: job.unschedulable.map(|u| u.as_str()),
                avoided_engine: task_state.last_failed_on.map(engine_name),
            }
        }
        TaskStatus::Dispatched | TaskStatus::Running => {
            let live = state.live_attempt(key).expect("dispatched and running tasks are live");
            let engine = state.engine(live.engine);
            Detail::Live {
                engine: engine.id.to_string(),
                attempt: live.attempt,
                started: live.started_ms.is_some(),
                dispatched_ms: live.dispatched_ms,
                load_index: load_index(&state.policy.load_formula, engine, engine.used),
            }
        }
        _ => Detail::Ended { last_failed_on: task_state.last_failed_on.map(engine_name) },
    };
    Ok(Explanation {
        task: task.to_string(),
        job_status: job.status.as_str(),
        task_status: task_state.status.as_str(),
        attempts: task_state.attempts,
        failures: task_state.failures,
        detail,
    })
}

impl std::fmt::Display for Explanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "task {}: {} (job {}), attempts {}, failures {}", self.task, self.task_status, self.job_status, self.attempts, self.failures)?;
        match &self.detail {
            Detail::Waiting { jobs_ahead, fit_now, excluded, could_ever_fit, unschedulable, avoided_engine } => {
                writeln!(f, "  {jobs_ahead} runnable job(s) are examined before this one")?;
                if !fit_now.is_empty() {
                    writeln!(f, "  could run now on: {}", fit_now.join(", "))?;
                }
                for (rule, engines) in excluded {
                    writeln!(f, "  excluded by {rule}: {}", engines.join(", "))?;
                }
                if let Some(engine) = avoided_engine {
                    writeln!(f, "  avoids {engine}, where its last attempt failed, while another engine fits")?;
                }
                if let Some(reason) = unschedulable {
                    writeln!(f, "  flagged unschedulable: {reason}")?;
                }
                if !could_ever_fit {
                    writeln!(f, "  no logged-in engine could ever run it; it waits for one that can")?;
                }
            }
            Detail::Live { engine, attempt, started, load_index, .. } => {
                let state = if *started { "running" } else { "dispatched, not yet started" };
                writeln!(f, "  attempt {attempt} {state} on {engine} (load index {load_index})")?;
            }
            Detail::Ended { last_failed_on } => {
                if let Some(engine) = last_failed_on {
                    writeln!(f, "  its last failure was on {engine}")?;
                }
            }
        }
        Ok(())
    }
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
              1 runnable job(s) are examined before this one
              excluded by too-few-slots: full, tiny
              no logged-in engine could ever run it; it waits for one that can
        "#]]
        .assert_eq(&why.to_string());
        assert!(matches!(explain(&state, &task("nope", 0)), Err(ExplainError::UnknownJob(_))));
        assert!(matches!(explain(&state, &task("wide", 3)), Err(ExplainError::UnknownTask { .. })));
    }
}
