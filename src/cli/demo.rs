//! `gridfold demo`: a whole grid in one process — a projector, four engines
//! running real commands, a sample job — with progress, a summary, and a
//! verified replay of the log it made.
//!
//! It runs on JetStream when it can (`--nats URL`, or a private nats-server it
//! starts from the PATH or `./.venv`), and on the embedded log otherwise, so it
//! needs nothing installed to show what gridfold does.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use tokio::sync::watch;

use super::client::{block_on, publish};
use crate::core::event::{Event, JobOptions, JobSpec, Origin, Policy, TaskSet, TaskTemplate};
use crate::core::ids::{EngineId, JobId, Seq};
use crate::core::replay::{replay, ReplayOptions};
use crate::core::state::State;
use crate::engine::{run_engine, EngineConfig, EngineReport, JetStreamOrderFeed, LogOrderFeed, OrderFeed};
use crate::log::connect::BrokerAccess;
use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
use crate::log::jetstream::{JetStreamLog, LogConfig};
use crate::log::nats_server::{find_executable, NatsServer};
use crate::log::EventLog;
use crate::projector::query::{StatRequest, StateSummary};
use crate::projector::service::lease::{KvLease, KvLeaseConfig, Lease, SoleWriter};
use crate::projector::service::sink::{EmbeddedOrderSink, JetStreamOrderSink, OrderSink};
use crate::projector::service::{Projector, ProjectorConfig, ProjectorReport};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Use this NATS broker instead of starting a private one.
    #[arg(long, env = "GRIDFOLD_DEMO_NATS")]
    pub nats: Option<String>,
    /// Credentials and TLS for the broker given with --nats. The demo runs the
    /// projector and its engines in one process: on a broker with gridfold's
    /// permissions it needs a user without restrictions.
    #[command(flatten)]
    pub auth: super::client::AuthArgs,
    /// Run on the embedded log even when a nats-server is available.
    #[arg(long)]
    pub embedded: bool,
    /// Tasks in the sample job.
    #[arg(long, default_value_t = 300)]
    pub tasks: u32,
    /// Engines to start (named e1, e2, ...).
    #[arg(long, default_value_t = 4)]
    pub engines: u32,
    /// Keep the demo's directory (logs, state, task work dirs) instead of removing it.
    #[arg(long)]
    pub keep: bool,
}

/// How long the demo may take before it gives up, as a promise to the user.
const DEMO_TIMEOUT: Duration = Duration::from_secs(120);

pub fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    let dir = std::env::temp_dir().join(format!("gridfold-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let outcome = block_on(async { tokio::time::timeout(DEMO_TIMEOUT, run_demo(&args, &dir)).await });
    if args.keep {
        println!("demo files kept in {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    match outcome {
        Ok(result) => result,
        Err(_) => bail!("the demo did not finish within {} s", DEMO_TIMEOUT.as_secs()),
    }
}

async fn run_demo(args: &DemoArgs, dir: &Path) -> anyhow::Result<ExitCode> {
    let state_dir = dir.join("projector");
    let url = match (&args.nats, args.embedded) {
        (_, true) => None,
        (Some(url), false) => Some((args.auth.access(url)?, None)),
        (None, false) => match find_executable() {
            Ok((path, version)) => {
                let server = NatsServer::start().context("starting a private nats-server")?;
                println!("broker: private nats-server {version} ({}) at {}", path.display(), server.url());
                Some((BrokerAccess::anonymous(server.url()), Some(server)))
            }
            Err(why) => {
                println!("broker: none ({why}); running on the embedded log");
                None
            }
        },
    };
    match url {
        Some((access, _server)) => {
            let url = access.url.clone();
            let log = JetStreamLog::open(&access, LogConfig::default())
                .await
                .with_context(|| format!("cannot reach the NATS broker at {url}"))?;
            let sink = JetStreamOrderSink::connect(&log).await?;
            let lease = KvLease::open(log.context(), &url, KvLeaseConfig::default(), "demo-projector".into()).await?;
            let mut feeds = Vec::new();
            for engine in engine_ids(args.engines) {
                feeds.push(JetStreamOrderFeed::open(&log, &engine).await?);
            }
            println!("log: JetStream stream GRIDFOLD_EVENTS at {url}");
            drive(args, dir, state_dir, log, sink, lease, feeds).await
        }
        None => {
            let log = EmbeddedLog::open(dir.join("events"), EmbeddedConfig::default())?;
            let sink = EmbeddedOrderSink::open_in(&state_dir)?;
            let mut feeds = Vec::new();
            for engine in engine_ids(args.engines) {
                feeds.push(LogOrderFeed::open(sink.log(), &engine).await?);
            }
            println!("log: embedded (sled) at {}", dir.join("events").display());
            drive(args, dir, state_dir, log, sink, SoleWriter, feeds).await
        }
    }
}

fn engine_ids(n: u32) -> Vec<EngineId> {
    (1..=n).map(|i| EngineId::new(&format!("e{i}")).expect("demo engine ids are valid")).collect()
}

/// The sample job: each task sleeps a little and reports where it ran.
fn sample_job(tasks: u32) -> JobSpec {
    JobSpec {
        id: JobId::new("demo-render").expect("a valid id"),
        owner: std::env::var("USER").unwrap_or_else(|_| "demo".into()),
        project: "demo".into(),
        queue: "default".into(),
        priority: 0,
        requirements: r#"os == "linux" || os == "macos""#.into(),
        max_attempts: 3,
        wall_time_limit_ms: 60_000,
        slots_per_task: 1,
        template: TaskTemplate {
            argv: vec![
                "sh".into(),
                "-c".into(),
                "sleep 0.$(( GRIDFOLD_TASK_INDEX % 3 + 1 )); echo \"frame {index} of {scene} on $GRIDFOLD_ENGINE\"".into(),
            ],
            params: [("scene".to_string(), "intro".to_string())].into(),
        },
        tasks: TaskSet::Count(tasks),
        options: JobOptions::default(),
        task_conditions: BTreeMap::new(),
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive<L, S, A, F>(
    args: &DemoArgs,
    dir: &Path,
    state_dir: PathBuf,
    log: L,
    sink: S,
    lease: A,
    feeds: Vec<F>,
) -> anyhow::Result<ExitCode>
where
    L: EventLog + Clone + 'static,
    S: OrderSink,
    A: Lease,
    F: OrderFeed + 'static,
{
    let started = Instant::now();
    let (stop_projector, projector_stop) = watch::channel(false);
    let (stop_engines, engines_stop) = watch::channel(false);
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };

    let mut config = ProjectorConfig::new(state_dir);
    config.tick_interval = Some(Duration::from_millis(500));
    // One machine, one operator: the demo's projector registers its own key.
    config.register_key = true;
    let projector = Projector::new(config, log.clone(), sink, lease);
    let handle = projector.handle();
    let projector_task = tokio::spawn(projector.run(stopped(projector_stop)));

    publish(&log, &Origin::Operator, "gridfold-demo", Event::PolicySet(Policy { engine_timeout_ms: 15_000, dispatch_timeout_ms: 20_000, ..Policy::default() })).await?;
    let mut engine_tasks = Vec::new();
    for (n, (engine, feed)) in engine_ids(args.engines).into_iter().zip(feeds).enumerate() {
        let mut config = EngineConfig::new(engine.clone(), 2 + (n as u32 % 2), dir.join("engines").join(engine.as_str()));
        config.heartbeat_interval = Duration::from_secs(2);
        config.drain_timeout = Duration::from_secs(5);
        config.given_props.insert("site".into(), if n % 2 == 0 { "lyon".into() } else { "grenoble".into() });
        engine_tasks.push(tokio::spawn(run_engine(config, log.clone(), feed, stopped(engines_stop.clone()))));
    }
    let job = sample_job(args.tasks);
    let job_id = job.id.to_string();
    let publisher = crate::core::subject::default_publisher(&Event::JobSubmitted(job.clone()));
    publish(&log, &publisher, "gridfold-demo", Event::JobSubmitted(job)).await?;
    println!("submitted job {job_id}: {} tasks on {} engines", args.tasks, args.engines);

    let summary = follow_progress(&handle, &job_id, args.tasks).await?;
    let elapsed = started.elapsed();
    print_summary(&summary, &job_id, elapsed);

    // Engines log out, the projector folds that, then it stops.
    let _ = stop_engines.send(true);
    let mut engine_reports: Vec<EngineReport> = Vec::new();
    for task in engine_tasks {
        engine_reports.push(task.await.context("an engine task panicked")??);
    }
    let last = log.last_seq().await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), handle.wait_for(|s| s.folded_seq >= last)).await;
    let _ = stop_projector.send(true);
    let projector_report: ProjectorReport = projector_task.await.context("the projector panicked")??;
    let started_total: u64 = engine_reports.iter().map(|r| r.started).sum();
    println!(
        "projector: {} batches published, {} deliveries; engines: {} attempts started, {} completed, {} failed",
        projector_report.batches_published,
        projector_report.deliveries_sent,
        started_total,
        engine_reports.iter().map(|r| r.completed).sum::<u64>(),
        engine_reports.iter().map(|r| r.failed).sum::<u64>(),
    );
    verify_log(&log, &projector_report).await
}

/// Polls the projector until the job ends, drawing a progress bar (or, without a
/// terminal, a line every two seconds).
async fn follow_progress<H>(handle: &H, job: &str, tasks: u32) -> anyhow::Result<StateSummary>
where
    H: StatSource,
{
    let bar = super::progress_bar(u64::from(tasks), "tasks done");
    let mut last_line = Instant::now();
    loop {
        let summary = handle.stat(job).await?;
        if let Some(job) = summary.jobs.first() {
            bar.set_position(u64::from(job.done));
            if bar.is_hidden() && last_line.elapsed() >= Duration::from_secs(2) {
                println!("progress: {}/{} done, {} running, {} waiting", job.done, job.tasks, job.running + job.dispatched, job.waiting);
                last_line = Instant::now();
            }
            if job.status != "active" {
                bar.finish_and_clear();
                return Ok(summary);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Where the demo reads progress from: the in-process projector.
trait StatSource {
    fn stat(&self, job: &str) -> impl std::future::Future<Output = anyhow::Result<StateSummary>>;
}

impl StatSource for crate::projector::service::ProjectorHandle {
    async fn stat(&self, job: &str) -> anyhow::Result<StateSummary> {
        Ok(crate::projector::service::ProjectorHandle::stat(self, StatRequest { job: Some(job.to_string()), ..StatRequest::default() }).await?)
    }
}

fn print_summary(summary: &StateSummary, job_id: &str, elapsed: Duration) {
    let Some(job) = summary.jobs.iter().find(|j| j.id == job_id) else { return };
    println!("job {}: {} — {} done, {} failed, {} cancelled of {} tasks in {:.1} s ({:.0} tasks/s)",
        job.id, job.status, job.done, job.failed, job.cancelled, job.tasks, elapsed.as_secs_f64(),
        f64::from(job.done) / elapsed.as_secs_f64().max(0.001));
    println!("waits (submission to start): mean {} ms, max {} ms", summary.wait_ms_mean, summary.wait_ms_max);
    println!("{:<8} {:>6} {:>10} {:>8}", "ENGINE", "SLOTS", "COMPLETED", "FAILED");
    for engine in &summary.engines {
        println!("{:<8} {:>6} {:>10} {:>8}", engine.id, engine.slots, engine.completed, engine.failed);
    }
}

/// Reads the whole log back, replays it with every order batch re-derived, and
/// checks the projector's own digest at its last folded entry.
async fn verify_log<L: EventLog>(log: &L, projector: &ProjectorReport) -> anyhow::Result<ExitCode> {
    let raw = super::stat::read_whole_log(log).await?;
    let entries = super::stat::to_entries(&raw);
    let options = ReplayOptions { verify: true, stop_at: None, check_invariants: true };
    let (state, report) = replay(State::new(), &entries, &options, &mut |_| {});
    let problems = report.not_verified(&[]);
    if !problems.is_empty() {
        for problem in &problems {
            println!("replay NOT VERIFIED: {problem}");
        }
        return Ok(ExitCode::from(1));
    }
    let at_projector = ReplayOptions { stop_at: Some(Seq(projector.last_seq)), ..ReplayOptions::default() };
    let (projector_view, _) = replay(State::new(), &entries, &at_projector, &mut |_| {});
    if projector_view.chain != projector.chain_digest {
        println!("the projector's digest at seq {} differs from the replay's", projector.last_seq);
        return Ok(ExitCode::from(1));
    }
    println!("replay verified: {} entries, digest {}", report.entries_folded, state.chain);
    Ok(ExitCode::SUCCESS)
}
