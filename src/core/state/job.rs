//! A job and its tasks.
//!
//! Tasks are kept compactly: a campaign of a million tasks is a `Vec` of small
//! `TaskState`s and a cursor over the never-dispatched ones, not a million queue
//! entries. Waiting tasks are served retries first (they have waited longest),
//! then fresh tasks in index order.

use std::collections::{BTreeMap, VecDeque};

use super::{CategoryIdx, EngineIdx, JobIdx, JobRank};
use crate::core::event::TaskTemplate;
use crate::core::ids::{Attempt, JobId, Seq};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum JobStatus {
    Active,
    Done,
    Failed,
    Cancelled,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Active => "active",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TaskStatus {
    Waiting,
    Dispatched,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Waiting => "waiting",
            TaskStatus::Dispatched => "dispatched",
            TaskStatus::Running => "running",
            TaskStatus::Done => "done",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
}

/// One task: 12 bytes, so a million-task job is 12 MB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskState {
    pub status: TaskStatus,
    /// Failures reported by engines; the task fails when this reaches `max_attempts`.
    pub failures: u16,
    /// Attempts dispatched so far (the live or last attempt's number).
    pub attempts: Attempt,
    /// The engine the last failure happened on, avoided while another fits.
    pub last_failed_on: Option<EngineIdx>,
}

impl TaskState {
    const FRESH: TaskState = TaskState { status: TaskStatus::Waiting, failures: 0, attempts: 0, last_failed_on: None };
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskCounts {
    pub waiting: u32,
    pub dispatched: u32,
    pub running: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
}

impl TaskCounts {
    fn slot(&mut self, status: TaskStatus) -> &mut u32 {
        match status {
            TaskStatus::Waiting => &mut self.waiting,
            TaskStatus::Dispatched => &mut self.dispatched,
            TaskStatus::Running => &mut self.running,
            TaskStatus::Done => &mut self.done,
            TaskStatus::Failed => &mut self.failed,
            TaskStatus::Cancelled => &mut self.cancelled,
        }
    }
    pub fn total(&self) -> u32 {
        self.waiting + self.dispatched + self.running + self.done + self.failed + self.cancelled
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pub id: JobId,
    pub owner: String,
    pub project: String,
    pub queue: String,
    pub priority: i32,
    pub submit_seq: Seq,
    pub submitted_ms: u64,
    pub ended_ms: Option<u64>,
    pub category: CategoryIdx,
    pub max_attempts: u32,
    pub wall_time_limit_ms: u64,
    pub slots_per_task: u32,
    pub template: TaskTemplate,
    /// Per-task parameters when the job gave a list; `None` for a counted job.
    pub task_params: Option<Vec<BTreeMap<String, String>>>,
    pub status: JobStatus,
    pub counts: TaskCounts,
    /// Set when the projector found no engine that could ever run this job.
    pub unschedulable: Option<crate::core::event::Unschedulable>,
    pub(crate) tasks: Vec<TaskState>,
    /// Tasks at or after this index may never have been dispatched.
    pub(crate) fresh_next: u32,
    /// Tasks sent back to the queue, in the order they came back.
    pub(crate) retries: VecDeque<u32>,
}

impl Job {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        spec: &crate::core::event::JobSpec,
        category: CategoryIdx,
        submit_seq: Seq,
        submitted_ms: u64,
    ) -> Job {
        let n_tasks = spec.task_count() as u32;
        let task_params = match &spec.tasks {
            crate::core::event::TaskSet::Count(_) => None,
            crate::core::event::TaskSet::List(list) => Some(list.clone()),
        };
        Job {
            id: spec.id.clone(),
            owner: spec.owner.clone(),
            project: spec.project.clone(),
            queue: spec.queue.clone(),
            priority: spec.priority,
            submit_seq,
            submitted_ms,
            ended_ms: None,
            category,
            max_attempts: spec.max_attempts,
            wall_time_limit_ms: spec.wall_time_limit_ms,
            slots_per_task: spec.slots_per_task,
            template: spec.template.clone(),
            task_params,
            status: JobStatus::Active,
            counts: TaskCounts { waiting: n_tasks, ..TaskCounts::default() },
            unschedulable: None,
            tasks: vec![TaskState::FRESH; n_tasks as usize],
            fresh_next: 0,
            retries: VecDeque::new(),
        }
    }

    pub fn n_tasks(&self) -> u32 {
        self.tasks.len() as u32
    }

    pub fn task(&self, index: u32) -> Option<&TaskState> {
        self.tasks.get(index as usize)
    }

    pub fn rank(&self, idx: JobIdx) -> JobRank {
        JobRank { priority: self.priority, submit_seq: self.submit_seq, job: idx }
    }

    /// The command and parameters of one task: the template's parameters, then
    /// the task's own (which win); `{index}` and `{name}` in each argument are
    /// replaced by the task index and the parameter `name`. A placeholder that
    /// names no parameter is left as written, so a mistake shows in the command.
    pub fn task_command(&self, index: u32) -> (Vec<String>, BTreeMap<String, String>) {
        let mut params = self.template.params.clone();
        if let Some(own) = self.task_params.as_ref().and_then(|list| list.get(index as usize)) {
            params.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        let argv = self.template.argv.iter().map(|arg| expand_placeholders(arg, index, &params)).collect();
        (argv, params)
    }

    pub fn is_active(&self) -> bool {
        self.status == JobStatus::Active
    }

    /// Active with tasks waiting: a member of `State::runnable`.
    pub fn is_runnable(&self) -> bool {
        self.status == JobStatus::Active && self.counts.waiting > 0
    }

    /// The waiting tasks in the order they are to be served: retries, then fresh ones.
    pub fn waiting_tasks(&self) -> impl Iterator<Item = u32> + '_ {
        let fresh = (self.fresh_next..self.n_tasks())
            .filter(|&index| self.tasks[index as usize].status == TaskStatus::Waiting && self.tasks[index as usize].attempts == 0);
        self.retries.iter().copied().chain(fresh)
    }

    fn set_status(&mut self, index: u32, status: TaskStatus) {
        let task = &mut self.tasks[index as usize];
        *self.counts.slot(task.status) -= 1;
        *self.counts.slot(status) += 1;
        task.status = status;
    }

    pub(super) fn take_waiting(&mut self, index: u32, attempt: Attempt) {
        let task = self.tasks[index as usize];
        assert_eq!(task.status, TaskStatus::Waiting);
        if task.attempts == 0 {
            if index == self.fresh_next {
                self.fresh_next += 1;
                while self.fresh_next < self.n_tasks() && self.tasks[self.fresh_next as usize].attempts > 0 {
                    self.fresh_next += 1;
                }
            }
        } else if self.retries.front() == Some(&index) {
            self.retries.pop_front();
        } else {
            self.retries.retain(|&waiting| waiting != index);
        }
        self.tasks[index as usize].attempts = attempt;
        self.set_status(index, TaskStatus::Dispatched);
    }

    pub(super) fn mark_running(&mut self, index: u32) {
        self.set_status(index, TaskStatus::Running);
    }

    pub(super) fn mark_done(&mut self, index: u32) {
        self.set_status(index, TaskStatus::Done);
    }

    pub(super) fn mark_cancelled(&mut self, index: u32) {
        self.set_status(index, TaskStatus::Cancelled);
    }

    /// Returns true when the task has exhausted its attempts (and is now failed).
    pub(super) fn record_failure(&mut self, index: u32, engine: EngineIdx) -> bool {
        let task = &mut self.tasks[index as usize];
        task.failures = task.failures.saturating_add(1);
        task.last_failed_on = Some(engine);
        if u32::from(task.failures) >= self.max_attempts {
            self.set_status(index, TaskStatus::Failed);
            true
        } else {
            self.requeue(index);
            false
        }
    }

    pub(super) fn requeue(&mut self, index: u32) {
        self.set_status(index, TaskStatus::Waiting);
        self.retries.push_back(index);
    }

    /// Every waiting task becomes cancelled (the job ended).
    pub(super) fn cancel_waiting_tasks(&mut self) {
        for index in 0..self.n_tasks() {
            if self.tasks[index as usize].status == TaskStatus::Waiting {
                self.set_status(index, TaskStatus::Cancelled);
            }
        }
        self.retries.clear();
        self.fresh_next = self.n_tasks();
    }

    pub(super) fn check_counts(&self) {
        let mut counts = TaskCounts::default();
        for task in &self.tasks {
            *counts.slot(task.status) += 1;
        }
        assert_eq!(counts, self.counts, "task counts of job {}", self.id);
        assert_eq!(counts.total(), self.n_tasks());
        for &index in &self.retries {
            assert_eq!(self.tasks[index as usize].status, TaskStatus::Waiting, "retry queue of {}", self.id);
        }
    }
}

fn expand_placeholders(arg: &str, index: u32, params: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) => {
                let name = &after[..close];
                match (name, params.get(name)) {
                    ("index", _) => out.push_str(&index.to_string()),
                    (_, Some(value)) => out.push_str(value),
                    (_, None) => out.push_str(&rest[open..open + close + 2]),
                }
                rest = &after[close + 1..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_from_the_index_and_parameters() {
        let params: BTreeMap<String, String> = [("scene".to_string(), "intro".to_string())].into();
        assert_eq!(expand_placeholders("--frame={index}", 7, &params), "--frame=7");
        assert_eq!(expand_placeholders("{scene}-{index}.png", 2, &params), "intro-2.png");
        assert_eq!(expand_placeholders("{missing} {", 0, &params), "{missing} {");
        assert_eq!(expand_placeholders("plain", 0, &params), "plain");
    }
}
