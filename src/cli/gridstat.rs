//! CiGri's gridstat views of `gridfold stat` (seed 004, issue 13): the
//! campaign table, `stat -f JOB` (per cluster, then each task), `stat
//! --errors` (the failures to look at) and `stat --users` (per user).
//!
//! Everything here reads the projector's answers (`gridfold.q.stat`,
//! `gridfold.q.tasks`, `gridfold.q.task`); nothing is computed that the
//! projector did not fold. Output is bounded by `--limit` (default
//! [`LIMIT_DEFAULT`]): a view says how many lines it left out.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde::Serialize;

use super::client::{ask, NatsArgs};
use super::results::seconds;
use crate::core::family::cigri::predictor::{milli_text, Prediction};
use crate::human::printable;
use crate::core::family::cigri::summary::CampaignSummary;
use crate::projector::query::{JobSummary, StateSummary};
use crate::projector::results::{TaskReply, TaskRequest, TasksReply, TasksRequest, TASKS_SUBJECT, TASK_SUBJECT, TASKS_PER_PAGE_MAX};

/// Lines a view prints unless `--limit` says otherwise.
pub const LIMIT_DEFAULT: u32 = 200;
/// Highest `--limit`.
pub const LIMIT_MAX: u32 = 100_000;
/// Bytes of a failure's stderr tail shown in the plain view (JSON has it whole).
const TAIL_SHOWN_BYTES: usize = 200;

/// The campaign table under `cigri`: one line per campaign, then its sink warnings.
pub fn write_campaigns(out: &mut impl std::io::Write, summary: &StateSummary) -> std::io::Result<()> {
    let campaigns: Vec<(&JobSummary, &CampaignSummary)> =
        summary.jobs.iter().filter_map(|job| job.family.cigri.as_ref().map(|campaign| (job, campaign))).collect();
    if campaigns.is_empty() {
        return Ok(());
    }
    let now = summary.log_time_ms;
    writeln!(
        out,
        "{:<24} {:<12} {:<8} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9}",
        "CAMPAIGN", "USER", "TYPE", "STATUS", "WAITING", "RUNNING", "DONE", "FAILED", "TASKS/H", "MEAN", "ETA"
    )?;
    for (job, campaign) in &campaigns {
        let p = &campaign.prediction;
        writeln!(
            out,
            "{:<24} {:<12} {:<8} {:>9} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9} {:>9}",
            job.id,
            printable(&job.owner),
            campaign.campaign,
            job.status,
            job.waiting,
            job.running + job.dispatched,
            job.done,
            job.failed,
            milli_text(p.per_hour_milli),
            p.mean_duration_ms.map_or("-".into(), seconds),
            eta_text(p.eta_ms, now),
        )?;
        for sink in &campaign.sinks {
            writeln!(out, "  WARNING {}: {}", job.id, printable(&sink.to_string()))?;
        }
    }
    writeln!(out)?;
    Ok(())
}

fn eta_text(eta_ms: Option<u64>, now_ms: u64) -> String {
    match eta_ms {
        Some(eta) => format!("+{}", seconds(eta.saturating_sub(now_ms))),
        None => "-".into(),
    }
}

fn print_clusters(clusters: &[Prediction], now_ms: u64) {
    println!("{:<16} {:>7} {:>9} {:>9} {:>9} {:>11}", "CLUSTER", "DONE", "TASKS/H", "MEAN", "MEDIAN", "ETA ALONE");
    for cluster in clusters {
        println!(
            "{:<16} {:>7} {:>9} {:>9} {:>9} {:>11}",
            if cluster.cluster.is_empty() { "(unnamed)".into() } else { printable(&cluster.cluster) },
            cluster.done,
            milli_text(cluster.per_hour_milli),
            cluster.mean_duration_ms.map_or("-".into(), seconds),
            cluster.median_duration_ms.map_or("-".into(), seconds),
            eta_text(cluster.eta_ms, now_ms),
        );
    }
}

/// `stat -f JOB --json`: the job, then its tasks (at most `limit`).
#[derive(Debug, Serialize)]
struct FullView<'a> {
    job: &'a JobSummary,
    tasks: Vec<crate::projector::results::TaskLine>,
    /// Tasks not shown (past `--limit`).
    left_out: u32,
}

/// `stat -f JOB`: the campaign, per cluster, then each task (state, engine, attempts).
pub async fn full(nats: &NatsArgs, summary: &StateSummary, job: &str, limit: u32, json: bool) -> anyhow::Result<ExitCode> {
    let Some(job_summary) = summary.jobs.iter().find(|j| j.id == job) else {
        eprintln!("no job {job}");
        return Ok(ExitCode::FAILURE);
    };
    let (tasks, left_out) = task_lines(nats, job, None, limit).await?;
    if json {
        println!("{}", serde_json::to_string(&FullView { job: job_summary, tasks, left_out })?);
        return Ok(ExitCode::SUCCESS);
    }
    let single = StateSummary { jobs: vec![job_summary.clone()], ..summary.clone() };
    write_campaigns(&mut std::io::stdout().lock(), &single)?;
    if let Some(campaign) = &job_summary.family.cigri {
        print_clusters(&campaign.clusters, summary.log_time_ms);
        println!();
    }
    let mut out = std::io::stdout().lock();
    super::results::write_task_header(&mut out)?;
    super::results::write_task_lines(&mut out, &tasks)?;
    drop(out);
    if left_out > 0 {
        println!("... {left_out} more task(s) not shown (--limit {limit}; gridfold tasks {job} lists them all)");
    }
    Ok(ExitCode::SUCCESS)
}

/// At most `limit` task lines of a job (in index order), and how many more matched.
async fn task_lines(
    nats: &NatsArgs,
    job: &str,
    state: Option<&str>,
    limit: u32,
) -> anyhow::Result<(Vec<crate::projector::results::TaskLine>, u32)> {
    let mut lines = Vec::new();
    let mut from = 0;
    loop {
        let want = (limit as usize - lines.len()).min(TASKS_PER_PAGE_MAX as usize) as u32;
        let request = TasksRequest { job: job.to_string(), state: state.map(str::to_string), from, limit: Some(want.max(1)) };
        let reply: TasksReply = ask(nats, TASKS_SUBJECT, &request).await?;
        if let Some(error) = reply.error {
            anyhow::bail!("{}", printable(&error));
        }
        let matching = match state {
            Some(state) => reply.counts.get(state).copied().unwrap_or(0),
            None => reply.n_tasks,
        };
        lines.extend(reply.tasks.into_iter().take(limit as usize - lines.len()));
        match reply.next_from {
            Some(next) if lines.len() < limit as usize => from = next,
            _ => {
                let left_out = matching.saturating_sub(lines.len() as u32);
                return Ok((lines, left_out));
            }
        }
    }
}

/// One failure to look at.
#[derive(Debug, Serialize)]
struct ErrorLine {
    /// `JOB/INDEX`.
    task: String,
    engine: Option<String>,
    attempts: u32,
    /// `non-zero-exit`, `signalled`, …
    kind: Option<String>,
    exit_code: Option<i32>,
    /// The newest attempt's stderr tail, when the state keeps it.
    stderr_tail: Option<String>,
}

#[derive(Debug, Serialize)]
struct ErrorsView {
    errors: Vec<ErrorLine>,
    /// Failed tasks not shown (past `--limit`).
    left_out: u32,
}

/// `stat --errors`: the failed tasks of the jobs shown, newest attempt's engine, kind, exit code and stderr tail.
pub async fn errors(nats: &NatsArgs, summary: &StateSummary, limit: u32, json: bool) -> anyhow::Result<ExitCode> {
    let mut view = ErrorsView { errors: Vec::new(), left_out: 0 };
    for job in summary.jobs.iter().filter(|job| job.failed > 0) {
        let room = limit.saturating_sub(view.errors.len() as u32);
        if room == 0 {
            view.left_out += job.failed;
            continue;
        }
        let (lines, left_out) = task_lines(nats, &job.id, Some("failed"), room).await?;
        view.left_out += left_out;
        for line in lines {
            let task = format!("{}/{}", job.id, line.index);
            let reply: TaskReply = ask(nats, TASK_SUBJECT, &TaskRequest { task: task.clone() }).await?;
            let stderr_tail = reply.attempts.last().and_then(|attempt| attempt.error_tail.clone());
            view.errors.push(ErrorLine {
                task,
                engine: line.engine,
                attempts: line.attempts,
                kind: line.failure_kind,
                exit_code: line.exit_code,
                stderr_tail,
            });
        }
    }
    if json {
        println!("{}", serde_json::to_string(&view)?);
        return Ok(ExitCode::SUCCESS);
    }
    if view.errors.is_empty() && view.left_out == 0 {
        println!("no failed tasks");
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<28} {:<16} {:>4} {:<18} {:>5}  STDERR (tail)", "TASK", "ENGINE", "ATT", "KIND", "EXIT");
    for error in &view.errors {
        let tail = error.stderr_tail.as_deref().map(|tail| printable(&last_line(tail)).into_owned()).unwrap_or_default();
        println!(
            "{:<28} {:<16} {:>4} {:<18} {:>5}  {tail}",
            error.task,
            error.engine.as_deref().unwrap_or("-"),
            error.attempts,
            error.kind.as_deref().unwrap_or("-"),
            error.exit_code.map_or("-".into(), |c| c.to_string()),
        );
    }
    if view.left_out > 0 {
        println!("... {} more failed task(s) not shown (--limit {limit})", view.left_out);
    }
    Ok(ExitCode::SUCCESS)
}

/// The last non-empty line of a tail, at most [`TAIL_SHOWN_BYTES`] (cut on a character boundary).
fn last_line(tail: &str) -> String {
    let line = tail.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("").trim();
    if line.len() <= TAIL_SHOWN_BYTES {
        return line.to_string();
    }
    let mut end = TAIL_SHOWN_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &line[..end])
}

/// One user's campaigns, added up.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct UserLine {
    pub user: String,
    pub campaigns: u32,
    pub active: u32,
    pub waiting: u64,
    pub running: u64,
    pub done: u64,
    pub failed: u64,
    /// The sum of their campaigns' throughputs, thousandths of a task per hour.
    pub per_hour_milli: u64,
}

/// Per user, by name, from the jobs shown.
pub fn users(jobs: &[JobSummary]) -> Vec<UserLine> {
    let mut by_user: BTreeMap<&str, UserLine> = BTreeMap::new();
    for job in jobs {
        let line = by_user.entry(job.owner.as_str()).or_insert_with(|| UserLine { user: job.owner.clone(), ..UserLine::default() });
        line.campaigns += 1;
        line.active += u32::from(job.status == "active");
        line.waiting += u64::from(job.waiting);
        line.running += u64::from(job.running + job.dispatched);
        line.done += u64::from(job.done);
        line.failed += u64::from(job.failed);
        line.per_hour_milli += job.family.cigri.as_ref().map_or(0, |campaign| campaign.prediction.per_hour_milli);
    }
    by_user.into_values().collect()
}

/// `stat --users`.
pub fn print_users(jobs: &[JobSummary], json: bool) -> anyhow::Result<ExitCode> {
    let lines = users(jobs);
    if json {
        println!("{}", serde_json::to_string(&serde_json::json!({ "users": lines }))?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<16} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>9}", "USER", "CAMPAIGNS", "ACTIVE", "WAITING", "RUNNING", "DONE", "FAILED", "TASKS/H");
    for line in &lines {
        println!(
            "{:<16} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>9}",
            if line.user.is_empty() { "-".into() } else { printable(&line.user) },
            line.campaigns,
            line.active,
            line.waiting,
            line.running,
            line.done,
            line.failed,
            milli_text(line.per_hour_milli)
        );
    }
    Ok(ExitCode::SUCCESS)
}
