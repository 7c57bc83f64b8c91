//! `gridfold bench --soak`: a long life in one run.
//!
//! The real projector on JetStream and the simulated engines of the bench run
//! `--tasks` tasks (a million by default in a soak) as a stream of jobs of
//! `--soak-job-tasks` each, submitted as the grid works through them (a few jobs
//! ahead of the completions), under a policy that retires ended jobs after
//! `--soak-retention-ms` of log time. Every `--soak-sample-every` completed tasks
//! it samples this process's resident memory (`VmRSS`: the projector runs in
//! it, beside the simulated engines and the bench's own bookkeeping) and the
//! projector's count of held and retired jobs (a `stat` query). If the state is
//! bounded the samples level off after warm-up; without retirement the held
//! jobs would grow by one every `--soak-job-tasks` tasks.
//!
//! The soak does not read the log back nor replay it (the ordinary bench does):
//! that would hold the whole log in this process, which is not what is measured.

use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;
use tokio::sync::watch;

use super::{BenchArgs, BrokerInfo, spawn_simulator};
use crate::cli::client::publish;
use crate::core::event::{Event, Origin, Policy};
use crate::core::ids::{EngineId, JobId};
use crate::log::EventLog;
use crate::log::connect::BrokerAccess;
use crate::log::jetstream::{JetStreamLog, LogConfig};
use crate::projector::query::StatRequest;
use crate::projector::service::lease::{KvLease, KvLeaseConfig};
use crate::projector::service::sink::JetStreamOrderSink;
use crate::projector::service::{Projector, ProjectorConfig};

/// How many jobs are submitted ahead of the completions.
const JOBS_AHEAD: u64 = 4;
/// Runs the simulated engines remember for catching a duplicate (1 to 2 times this).
const SEEN_KEPT: usize = 100_000;

#[derive(Debug, Clone, Serialize)]
pub struct SoakReport {
    pub broker: BrokerInfo,
    pub tasks: u64,
    pub jobs: u64,
    pub tasks_per_job: u32,
    pub engines: u32,
    pub slots_per_engine: u32,
    pub job_retention_ms: u64,
    pub seconds: f64,
    pub lifecycles_per_s: f64,
    /// The load average (1, 5, 15 minutes) when the soak started and ended.
    pub load_before: String,
    pub load_after: String,
    pub samples: Vec<SoakSample>,
    /// Resident memory growth from the first sample after warm-up (the second) to the last, in KiB.
    pub rss_growth_after_warmup_kib: i64,
    /// Most jobs the projector held at a sample.
    pub jobs_held_max: u64,
    /// Most jobs not yet ended at a sample.
    pub jobs_active_max: u64,
    /// Longest log time an ended job was still held at a sample, in ms: at most
    /// `job_retention_ms` when every ended job retires on time.
    pub oldest_ended_age_ms_max: u64,
    pub jobs_retired: u64,
    /// Runs delivered twice, among the last 100,000 to 200,000 (must be 0).
    pub duplicate_runs: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SoakSample {
    pub tasks_done: u64,
    pub seconds: f64,
    /// This process's `VmRSS` (projector, simulated engines, bench), KiB.
    pub rss_kib: u64,
    /// Jobs in the projector's state (active, and ended within their retention).
    pub jobs_held: u64,
    /// Of those, the jobs not yet ended (submitted ahead, or running).
    pub jobs_active: u64,
    /// Log time since the held job that ended first ended, in ms: at most the
    /// retention when retirement works. Absent when no ended job is held.
    pub oldest_ended_age_ms: Option<u64>,
    pub jobs_retired: u64,
}

/// `VmRSS` of this process in KiB, from `/proc/self/status` (0 where there is none).
pub(super) fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

pub async fn soak_on(
    args: &BenchArgs,
    access: &BrokerAccess,
    state_dir: &std::path::Path,
    broker: BrokerInfo,
    say: &dyn Fn(String),
) -> anyhow::Result<SoakReport> {
    let url = access.url.as_str();
    let log = JetStreamLog::open(access, LogConfig::default())
        .await
        .with_context(|| format!("cannot reach the NATS broker at {url}"))?;
    if log.last_seq().await? != 0 {
        bail!("the log stream GRIDFOLD_EVENTS at {url} is not empty: the soak needs a broker of its own (or no --nats)");
    }
    let tasks = u64::from(args.tasks_sim());
    let per_job = args.soak_job_tasks.max(1);
    let n_jobs = tasks.div_ceil(u64::from(per_job));
    let engines: Vec<EngineId> =
        (1..=args.engines_sim()).map(|i| EngineId::new(&format!("sim{i:04}")).expect("a valid engine id")).collect();

    let sink = JetStreamOrderSink::connect(&log).await?;
    let lease = KvLease::open(log.context(), url, KvLeaseConfig::default(), "soak-projector".into()).await?;
    let mut config = ProjectorConfig::new(state_dir);
    config.register_key = true;
    config.read_batch_max = args.read_batch;
    config.schedule_every_entries = args.schedule_every;
    config.snapshot_every_entries = args.snapshot_every;
    let projector = Projector::new(config, log.clone(), sink, lease);
    let handle = projector.handle();
    let (stop_projector, projector_stop) = watch::channel(false);
    let projector_task = tokio::spawn(projector.run(async move {
        let mut stop = projector_stop;
        let _ = stop.wait_for(|stop| *stop).await;
    }));
    let policy = Policy { job_retention_ms: args.soak_retention_ms, ..Policy::default() };
    publish(&log, &Origin::Operator, "gridfold-soak", Event::PolicySet(policy)).await?;

    let sim = spawn_simulator(access, &engines, args.slots_sim(), args.window, tasks, Some(SEEN_KEPT)).await?;
    handle
        .wait_for(|status| status.folded_seq >= sim.login_seq && status.leader)
        .await
        .map_err(|_| anyhow!("the projector stopped before the engines' logins were folded"))?;
    let progress = sim.progress.clone();
    say(format!(
        "soak: {tasks} tasks in {n_jobs} jobs of {per_job} on {} simulated engines x {} slots; ended jobs retire after {} ms of log time",
        args.engines_sim(), args.slots_sim(), args.soak_retention_ms
    ));

    let load_before = load_average();
    let started = Instant::now();
    let mut done_sim = sim.done;
    let mut submitted = 0u64;
    let mut samples = Vec::new();
    let mut next_sample = args.soak_sample_every.max(1);
    let sample = |tasks_done: u64, stat: &crate::projector::query::StateSummary| SoakSample {
        tasks_done,
        seconds: started.elapsed().as_secs_f64(),
        rss_kib: rss_kib(),
        jobs_held: stat.jobs_total,
        jobs_active: stat.jobs.iter().filter(|job| job.ended_ms.is_none()).count() as u64,
        oldest_ended_age_ms: stat.jobs.iter().filter_map(|job| job.ended_ms).min().map(|ended| stat.log_time_ms.saturating_sub(ended)),
        jobs_retired: stat.jobs_retired,
    };
    let sim_report = loop {
        // Keep a few jobs ahead of what the engines have completed.
        let completed = progress.completions();
        while submitted < n_jobs && submitted * u64::from(per_job) < completed + JOBS_AHEAD * u64::from(per_job) {
            let count = (tasks - submitted * u64::from(per_job)).min(u64::from(per_job)) as u32;
            let mut job = super::bench_jobs(count, 1).remove(0);
            job.id = JobId::new(&format!("soak-{submitted}")).expect("a valid job id");
            job.owner = format!("user-{}", submitted % 7);
            job.project = format!("project-{}", submitted % 3);
            publish(&log, &Origin::Operator, "gridfold-soak", Event::JobSubmitted(job)).await?;
            submitted += 1;
        }
        let folded = progress.completions_through(handle.status().folded_seq);
        if folded >= next_sample {
            let stat = handle.stat(StatRequest::default()).await.map_err(|_| anyhow!("the projector stopped"))?;
            let point = sample(folded, &stat);
            say(format!(
                "  {:>7.1} s  {:>9}/{tasks} tasks done  RSS {:>8} KiB  jobs held {:>4}  retired {:>6}",
                point.seconds, point.tasks_done, point.rss_kib, point.jobs_held, point.jobs_retired
            ));
            samples.push(point);
            next_sample += args.soak_sample_every.max(1);
        }
        match tokio::time::timeout(Duration::from_millis(20), &mut done_sim).await {
            Ok(outcome) => break outcome.map_err(|_| anyhow!("the simulated engines' thread ended without a word"))??,
            Err(_) => continue,
        }
    };
    let last_completion = progress.last_completion_seq();
    handle
        .wait_for(|status| status.folded_seq >= last_completion)
        .await
        .map_err(|_| anyhow!("the projector stopped before folding every completion"))?;
    let seconds = started.elapsed().as_secs_f64();
    let stat = handle.stat(StatRequest::default()).await.map_err(|_| anyhow!("the projector stopped"))?;
    if samples.last().is_none_or(|last| last.tasks_done < tasks) {
        samples.push(sample(tasks, &stat));
    }
    let load_after = load_average();
    let _ = stop_projector.send(true);
    projector_task.await.context("the projector panicked")??;
    let warm = samples.get(1).or(samples.first()).map_or(0, |s| s.rss_kib as i64);
    let last = samples.last().map_or(0, |s| s.rss_kib as i64);
    Ok(SoakReport {
        broker,
        tasks,
        jobs: n_jobs,
        tasks_per_job: per_job,
        engines: args.engines_sim(),
        slots_per_engine: args.slots_sim(),
        job_retention_ms: args.soak_retention_ms,
        seconds,
        lifecycles_per_s: tasks as f64 / seconds,
        load_before,
        load_after,
        rss_growth_after_warmup_kib: last - warm,
        jobs_held_max: samples.iter().map(|s| s.jobs_held).max().unwrap_or(0),
        jobs_active_max: samples.iter().map(|s| s.jobs_active).max().unwrap_or(0),
        oldest_ended_age_ms_max: samples.iter().filter_map(|s| s.oldest_ended_age_ms).max().unwrap_or(0),
        jobs_retired: stat.jobs_retired,
        duplicate_runs: sim_report.duplicate_runs,
        samples,
    })
}

pub fn print_soak(report: &SoakReport) {
    println!(
        "soak: {} tasks in {} jobs of {} on {} engines x {} slots, retention {} ms: {:.1} s, {:.0} lifecycles/s",
        report.tasks,
        report.jobs,
        report.tasks_per_job,
        report.engines,
        report.slots_per_engine,
        report.job_retention_ms,
        report.seconds,
        report.lifecycles_per_s
    );
    println!("load average before {}, after {}", report.load_before, report.load_after);
    println!(
        "{:>10} {:>9} {:>12} {:>10} {:>10} {:>16} {:>10}",
        "TASKS", "SECONDS", "RSS KIB", "JOBS HELD", "ACTIVE", "OLDEST ENDED MS", "RETIRED"
    );
    for s in &report.samples {
        let oldest = s.oldest_ended_age_ms.map_or_else(|| "-".to_string(), |ms| ms.to_string());
        println!(
            "{:>10} {:>9.1} {:>12} {:>10} {:>10} {:>16} {:>10}",
            s.tasks_done, s.seconds, s.rss_kib, s.jobs_held, s.jobs_active, oldest, s.jobs_retired
        );
    }
    println!(
        "RSS growth after warm-up: {} KiB; most jobs held {} ({} active at most); an ended job held {} ms at most (retention {} ms); jobs retired {}; duplicate runs {}",
        report.rss_growth_after_warmup_kib,
        report.jobs_held_max,
        report.jobs_active_max,
        report.oldest_ended_age_ms_max,
        report.job_retention_ms,
        report.jobs_retired,
        report.duplicate_runs
    );
}
