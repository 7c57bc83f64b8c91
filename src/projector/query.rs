//! Queries the projector answers on `gridfold.q.>` (request/reply, JSON), and
//! the summaries they return: the same views `replay` and `sim` print. Every
//! answer is a pure function of the folded state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::core::explain::{explain, Explanation};
use crate::core::ids::TaskRef;
use crate::core::state::{EngineStatus, JobStatus, State};

/// `gridfold stat`: a [`StatRequest`] in, a [`StateSummary`] out.
pub const STAT_SUBJECT: &str = "gridfold.q.stat";
/// `gridfold why`: a [`WhyRequest`] in, a [`WhyReply`] out.
pub const WHY_SUBJECT: &str = "gridfold.q.why";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StatRequest {
    /// Only this job (all jobs when absent).
    pub job: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WhyRequest {
    /// `JOB/INDEX`.
    pub task: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WhyReply {
    Explanation(Explanation),
    Error(String),
}

pub fn answer_stat(state: &State, request: &StatRequest) -> StateSummary {
    let mut summary = StateSummary::of(state);
    if let Some(job) = &request.job {
        summary.jobs.retain(|j| &j.id == job);
    }
    summary
}

pub fn answer_why(state: &State, request: &WhyRequest) -> WhyReply {
    let task: TaskRef = match request.task.parse() {
        Ok(task) => task,
        Err(error) => return WhyReply::Error(error),
    };
    match explain(state, &task) {
        Ok(explanation) => WhyReply::Explanation(explanation),
        Err(error) => WhyReply::Error(error.to_string()),
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateSummary {
    pub last_seq: u64,
    pub log_time_ms: u64,
    pub chain_digest: String,
    pub state_digest: String,
    pub entries: u64,
    pub order_batches: u64,
    pub rejections: u64,
    pub rejections_by_kind: BTreeMap<String, u64>,
    pub jobs: Vec<JobSummary>,
    pub engines: Vec<EngineSummary>,
    pub dispatches: u64,
    pub tasks_done: u64,
    pub tasks_failed: u64,
    pub attempts_failed: u64,
    pub requeues: u64,
    pub engines_lost: u64,
    /// Mean and longest wait from a job's submission to an attempt's start, in ms of log time.
    pub wait_ms_mean: u64,
    pub wait_ms_max: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobSummary {
    pub id: String,
    pub status: String,
    pub priority: i32,
    pub tasks: u32,
    pub waiting: u32,
    pub dispatched: u32,
    pub running: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub unschedulable: Option<String>,
    /// Tasks completed per second since the job was submitted (log time).
    pub throughput_per_s: f64,
    /// Log time at which the job should end at that rate; absent when unknown or ended.
    pub estimated_end_ms: Option<u64>,
    pub submitted_ms: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EngineSummary {
    pub id: String,
    pub status: String,
    pub slots: u32,
    pub used: u32,
    pub completed: u64,
    pub failed: u64,
}

impl StateSummary {
    pub fn of(state: &State) -> StateSummary {
        let jobs = state
            .jobs()
            .iter()
            .map(|job| JobSummary {
                id: job.id.to_string(),
                status: job.status.as_str().to_string(),
                priority: job.priority,
                tasks: job.n_tasks(),
                waiting: job.counts.waiting,
                dispatched: job.counts.dispatched,
                running: job.counts.running,
                done: job.counts.done,
                failed: job.counts.failed,
                cancelled: job.counts.cancelled,
                unschedulable: job.unschedulable.map(|u| u.as_str().to_string()),
                throughput_per_s: throughput_per_s(job.counts.done, job.submitted_ms, job.ended_ms.unwrap_or(state.now_ms)),
                estimated_end_ms: estimated_end_ms(state.now_ms, job),
                submitted_ms: job.submitted_ms,
            })
            .collect();
        let mut engines: Vec<EngineSummary> = state
            .engines()
            .iter()
            .map(|engine| EngineSummary {
                id: engine.id.to_string(),
                status: match engine.status {
                    EngineStatus::LoggedIn => "logged-in",
                    EngineStatus::LoggedOut => "logged-out",
                    EngineStatus::Lost => "lost",
                }
                .to_string(),
                slots: engine.slots,
                used: engine.used,
                completed: engine.completed,
                failed: engine.failed,
            })
            .collect();
        engines.sort_by(|a, b| a.id.cmp(&b.id));
        let totals = &state.totals;
        StateSummary {
            last_seq: state.last_seq.0,
            log_time_ms: state.now_ms,
            chain_digest: state.chain.to_hex(),
            state_digest: state.state_digest().to_hex(),
            entries: totals.entries,
            order_batches: totals.order_batches,
            rejections: state.rejections.total,
            rejections_by_kind: state.rejections.by_kind.clone(),
            jobs,
            engines,
            dispatches: totals.dispatches,
            tasks_done: totals.tasks_done,
            tasks_failed: totals.tasks_failed,
            attempts_failed: totals.attempts_failed,
            requeues: totals.requeues,
            engines_lost: totals.engines_lost,
            wait_ms_mean: totals.wait_ms_sum.checked_div(totals.waits_counted).unwrap_or(0),
            wait_ms_max: totals.wait_ms_max,
        }
    }
}

impl std::fmt::Display for StateSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "entries {} (up to seq {}), order batches {}, rejected {}", self.entries, self.last_seq, self.order_batches, self.rejections)?;
        for (kind, n) in &self.rejections_by_kind {
            writeln!(f, "  rejected {kind}: {n}")?;
        }
        writeln!(
            f,
            "dispatches {}, tasks done {}, tasks failed {}, attempts failed {}, requeues {}, engines lost {}",
            self.dispatches, self.tasks_done, self.tasks_failed, self.attempts_failed, self.requeues, self.engines_lost
        )?;
        if !self.jobs.is_empty() {
            writeln!(f, "{:<24} {:>9} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}", "JOB", "STATUS", "PRIO", "TASKS", "WAITING", "DISPATCH", "RUNNING", "DONE", "FAILED", "CANCELLED")?;
            for job in &self.jobs {
                writeln!(
                    f,
                    "{:<24} {:>9} {:>4} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9}{}",
                    job.id, job.status, job.priority, job.tasks, job.waiting, job.dispatched, job.running, job.done, job.failed, job.cancelled,
                    job.unschedulable.as_ref().map(|u| format!("  unschedulable: {u}")).unwrap_or_default()
                )?;
            }
        }
        if !self.engines.is_empty() {
            writeln!(f, "{:<24} {:>10} {:>6} {:>6} {:>10} {:>8}", "ENGINE", "STATUS", "SLOTS", "USED", "COMPLETED", "FAILED")?;
            for engine in &self.engines {
                writeln!(f, "{:<24} {:>10} {:>6} {:>6} {:>10} {:>8}", engine.id, engine.status, engine.slots, engine.used, engine.completed, engine.failed)?;
            }
        }
        writeln!(f, "state digest {}", self.state_digest)?;
        write!(f, "digest {}", self.chain_digest)
    }
}

fn throughput_per_s(done: u32, from_ms: u64, to_ms: u64) -> f64 {
    let elapsed_ms = to_ms.saturating_sub(from_ms);
    if elapsed_ms == 0 { 0.0 } else { f64::from(done) * 1000.0 / elapsed_ms as f64 }
}

fn estimated_end_ms(now_ms: u64, job: &crate::core::state::Job) -> Option<u64> {
    if job.status != JobStatus::Active || job.counts.done == 0 {
        return None;
    }
    let elapsed_ms = now_ms.saturating_sub(job.submitted_ms);
    let remaining = u64::from(job.n_tasks() - job.counts.done - job.counts.failed - job.counts.cancelled);
    Some(now_ms + elapsed_ms * remaining / u64::from(job.counts.done))
}
