//! `gridfold bench`: the end-to-end benchmark on NATS JetStream.
//!
//! The real projector ([`Projector`], the JetStream log, [`JetStreamOrderSink`], a KV
//! lease) schedules a few jobs of many tasks onto many simulated engines that
//! complete every task at once; the run ends when the projector has folded the last
//! `TaskCompleted`. It reports:
//!
//! - **task lifecycles per second**: tasks / (wall time from publishing the jobs to
//!   the projector having folded the last completion). A lifecycle is a Dispatch
//!   order durable on the log, its delivery durable on `GRIDFOLD_ORDERS` and read by
//!   the engine, and the engine's `TaskStarted` and `TaskCompleted` durable and folded.
//! - **latencies** from the log's own timestamps (the broker's clock, ms):
//!   *slot free → dispatch durable* (each Dispatch to an engine is matched, first in
//!   first out, with the event that freed one of its slots: its login or a
//!   `TaskCompleted` on it: the scheduler's reaction time once a task can run),
//!   *submit → dispatch durable* (the job's entry to its task's batch: with far more
//!   tasks than slots this is mostly queueing), and *dispatch → completed durable*
//!   (delivery, the engine, its reports).
//! - in the same run, before the grid starts, the **raw JetStream publish rate** of
//!   the broker for messages of the grid's mean size (a stream of its own, file
//!   storage, a `Nats-Msg-Id` on each as on every grid message, the same pipelined
//!   publisher with many acks in flight), and the ratio of lifecycles/s to it.
//!
//! Then it proves it measured real work: every task completed exactly once (one
//! applied dispatch, one completion, status done), no entry rejected, and the whole
//! log read back and replayed with every order batch re-derived (`verify`), its
//! digest at the projector's last entry equal to the projector's.
//!
//! # The simulated engines
//!
//! One tokio task stands for every engine: it logs them all in (pipelined), reads
//! the deliveries of all of them through **one** ephemeral pull consumer on
//! `gridfold.order.>` (no acks, batches of 10,000; the real agent has one durable
//! consumer per engine, which at 1,000 engines would measure consumer bookkeeping,
//! not the scheduler), and for each `Run` publishes `TaskStarted` and
//! `TaskCompleted` on that engine's own subject, with the agent's message ids,
//! through a pipeline that keeps up to `--window` acks in flight on a connection of
//! its own. A second task awaits the acks in order. Slots are per engine as logged
//! in; the projector never books more (the replay checks it).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, pull};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, StorageType};
use async_nats::jetstream::{self as js};
use bytes::Bytes;
use clap::Args;
use futures::StreamExt as _;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::client::{block_on, publish};

mod soak;
use crate::core::event::{
    EngineProps, Entry, Envelope, Event, JobOptions, JobSpec, Order, Origin, Payload, TaskSet,
    TaskTemplate,
};
use crate::core::ids::{EngineId, JobId, Seq, TaskRef};
use crate::core::replay::{ReplayOptions, replay};
use crate::core::state::{JobStatus, State, TaskStatus};
use crate::engine::{session_event_id, task_report_id};
use crate::log::connect::BrokerAccess;
use crate::log::jetstream::{JetStreamLog, LogConfig, STREAM_ORDERS};
use crate::log::nats_server::NatsServer;
use crate::log::{Append, EventLog, read_to_end};
use crate::projector::service::lease::{KvLease, KvLeaseConfig};
use crate::projector::service::sink::{JetStreamOrderSink, ORDER_SUBJECT_PREFIX};
use crate::projector::service::{Projector, ProjectorConfig, ProjectorHandle, ProjectorReport};
use crate::wire;
use crate::wire::delivery::{Delivery, DeliveryKind, RunTask, decode_delivery, encode_delivery};

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Use this NATS broker (its GRIDFOLD_EVENTS stream must be empty or missing)
    /// instead of starting a private nats-server.
    #[arg(long, env = "GRIDFOLD_BENCH_NATS")]
    pub nats: Option<String>,
    /// Credentials and TLS for the broker given with --nats. The bench plays the
    /// projector and every engine at once: on a broker with gridfold's permissions it
    /// needs a user without restrictions (or a broker of its own).
    #[command(flatten)]
    pub auth: super::client::AuthArgs,
    /// Start the private nats-server with `jetstream { sync_interval: always }`:
    /// every message is written to disk (fsync) before the broker acknowledges it,
    /// instead of every 2 minutes. What it costs is what this measures.
    #[arg(long, conflicts_with = "nats")]
    pub sync_always: bool,
    /// Tasks in all, split evenly over the jobs.
    #[arg(long, default_value_t = 200_000)]
    pub tasks: u32,
    /// Jobs the tasks are queued in.
    #[arg(long, default_value_t = 4)]
    pub jobs: u32,
    /// Simulated engines.
    #[arg(long, default_value_t = 1_000)]
    pub engines: u32,
    /// Slots per engine.
    #[arg(long, default_value_t = 4)]
    pub slots: u32,
    /// Messages of the raw publish measurement (0: skip it).
    #[arg(long, default_value_t = 200_000)]
    pub raw_messages: u32,
    /// Publish acks in flight, for the engines' reports and the raw measurement.
    #[arg(long, default_value_t = 8_192)]
    pub window: usize,
    /// The projector's read batch (`read_batch_max`).
    #[arg(long, default_value_t = crate::log::READ_BATCH_DEFAULT)]
    pub read_batch: usize,
    /// The projector decides at least every this many entries under load (`schedule_every_entries`).
    #[arg(long, default_value_t = 10_000)]
    pub schedule_every: u64,
    /// The projector snapshots every this many entries (`snapshot_every_entries`).
    #[arg(long, default_value_t = 50_000)]
    pub snapshot_every: u64,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// Print the report as JSON on stdout (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Soak instead: --tasks (say 1000000) as a stream of jobs that end and retire,
    /// sampling resident memory every --soak-sample-every tasks (see `bench/soak.rs`).
    #[arg(long)]
    pub soak: bool,
    /// Tasks per job in a soak.
    #[arg(long, default_value_t = 1_000)]
    pub soak_job_tasks: u32,
    /// The policy's job retention in a soak, in ms of log time.
    #[arg(long, default_value_t = 2_000)]
    pub soak_retention_ms: u64,
    /// Completed tasks between two samples of a soak.
    #[arg(long, default_value_t = 100_000)]
    pub soak_sample_every: u64,
}

/// The bench's findings; `--json` prints this.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    pub broker: BrokerInfo,
    pub machine: MachineInfo,
    pub config: BenchConfigReport,
    pub raw_publish: Option<RawPublish>,
    pub run: RunFigures,
    pub latency_ms: Latencies,
    /// CPU time spent during the run, per lifecycle.
    pub cpu: CpuFigures,
    pub projector: ProjectorReport,
    pub engines: SimReport,
    pub verify: Verification,
}

#[derive(Debug, Clone, Serialize)]
pub struct BrokerInfo {
    pub url: String,
    /// Started by the bench (a private nats-server on loopback with a temporary store).
    pub private: bool,
    pub nats_server_version: Option<String>,
    /// What the private server was started with; unknown for a broker given with --nats.
    pub sync: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct MachineInfo {
    pub cores: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BenchConfigReport {
    pub tasks: u32,
    pub jobs: u32,
    pub engines: u32,
    pub slots_per_engine: u32,
    pub window: usize,
    pub projector_read_batch_max: usize,
    pub projector_schedule_every_entries: u64,
    pub projector_snapshot_every_entries: u64,
    pub projector_tick_interval_ms: u64,
    pub dispatches_per_run_max: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct RawPublish {
    pub messages: u64,
    pub payload_bytes: usize,
    pub window: usize,
    pub seconds: f64,
    pub msgs_per_s: f64,
    /// CPU time of the (private) broker per message stored.
    pub broker_cpu_us_per_msg: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunFigures {
    pub tasks_completed: u64,
    /// From publishing the jobs to the projector having folded the last completion.
    pub seconds: f64,
    pub lifecycles_per_s: f64,
    /// Completions per second of log time between the 10th and the 90th percentile completion.
    pub steady_lifecycles_per_s: f64,
    /// Messages stored on the log (`GRIDFOLD_EVENTS`) during the run, and on `GRIDFOLD_ORDERS`.
    pub log_entries: u64,
    pub deliveries: u64,
    pub order_batches: u64,
    pub publishes_per_lifecycle: f64,
    pub mean_message_bytes: f64,
    /// lifecycles/s over the raw publish rate.
    pub ratio_to_raw_publish: Option<f64>,
    /// Publishes per second the run made (log entries + deliveries) over the raw rate.
    pub publish_share_of_raw: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    pub samples: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Latencies {
    pub slot_free_to_dispatch: Percentiles,
    pub submit_to_dispatch: Percentiles,
    pub dispatch_to_completed: Percentiles,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SimReport {
    pub runs_received: u64,
    pub other_deliveries: u64,
    pub duplicate_runs: u64,
    pub reports_published: u64,
    pub duplicate_acks: u64,
    pub delivery_bytes: u64,
    /// CPU time of the engines' thread (their connections included) from the first delivery awaited to the last ack.
    pub cpu_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    pub every_task_completed_once: bool,
    pub completed_events: u64,
    pub dispatches_applied: u64,
    pub rejected_entries: u64,
    pub read_entries: u64,
    pub read_seconds: f64,
    pub read_entries_per_s: f64,
    pub replay_seconds: f64,
    pub batches_verified: u64,
    pub divergence: Option<String>,
    pub digest: String,
    pub projector_digest_matches: bool,
    pub ok: bool,
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if args.tasks == 0 || args.jobs == 0 || args.engines == 0 || args.slots == 0 || args.window == 0
    {
        bail!("--tasks, --jobs, --engines, --slots and --window must be positive");
    }
    if args.jobs > args.tasks {
        bail!("--jobs must not exceed --tasks");
    }
    let timeout = Duration::from_secs(args.timeout_secs);
    if args.soak {
        let report = block_on(async {
            tokio::time::timeout(timeout, run_soak(&args))
                .await
                .map_err(|_| anyhow!("the soak did not finish within {} s", timeout.as_secs()))?
        })?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            soak::print_soak(&report);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report = block_on(async {
        tokio::time::timeout(timeout, run_bench(&args))
            .await
            .map_err(|_| anyhow!("the bench did not finish within {} s", timeout.as_secs()))?
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    Ok(if report.verify.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Runs a soak (`--soak`) on a private nats-server or the one given.
pub async fn run_soak(args: &BenchArgs) -> anyhow::Result<soak::SoakReport> {
    let say = |line: String| {
        if !args.quiet {
            eprintln!("{line}");
        }
    };
    let (access, server) = match &args.nats {
        Some(url) => (args.auth.access(url)?, None),
        None => {
            let server = NatsServer::start().context("starting a private nats-server (set --nats to use a broker)")?;
            (BrokerAccess::anonymous(server.url()), Some(server))
        }
    };
    let broker = BrokerInfo {
        url: access.url.clone(),
        private: server.is_some(),
        nats_server_version: server.as_ref().map(|s| s.version().to_string()),
        sync: match &server {
            Some(_) => "default (the server fsyncs every 2 minutes)".to_string(),
            None => "as the broker is configured".to_string(),
        },
    };
    let state_dir = tempdir_for("projector")?;
    let result = soak::soak_on(args, &access, &state_dir.0, broker, &say).await;
    drop(server);
    result
}

/// Runs the whole bench: broker, raw publish rate, grid, verification.
pub async fn run_bench(args: &BenchArgs) -> anyhow::Result<BenchReport> {
    let say = |line: String| {
        if !args.quiet {
            eprintln!("{line}");
        }
    };
    // Declared before the server, so dropped after it.
    let mut _broker_dir = None;
    let (access, server) = match &args.nats {
        Some(url) => (args.auth.access(url)?, None),
        None => {
            let (server, dir) = start_private_server(args.sync_always)
                .context("starting a private nats-server (set --nats to use a broker)")?;
            _broker_dir = dir;
            (BrokerAccess::anonymous(server.url()), Some(server))
        }
    };
    let sync = if args.sync_always { "sync_interval: always" } else { "default sync" };
    let url = access.url.clone();
    let broker = BrokerInfo {
        url: url.clone(),
        private: server.is_some(),
        nats_server_version: server.as_ref().map(|s| s.version().to_string()),
        sync: match &server {
            Some(_) if args.sync_always => "always (every message fsynced before its ack)".to_string(),
            Some(_) => "default (the server fsyncs every 2 minutes)".to_string(),
            None => "as the broker is configured".to_string(),
        },
    };
    say(format!(
        "broker: {} {}",
        url,
        match &server {
            Some(s) => format!(
                "(private nats-server {}, temporary store, {sync})",
                s.version()
            ),
            None => "(given)".to_string(),
        }
    ));
    let state_dir = tempdir_for("projector")?;
    let broker_pid = server.as_ref().and_then(NatsServer::pid);
    let result = bench_on(args, &access, &state_dir.0, broker, broker_pid, &say).await;
    drop(server);
    result
}

async fn bench_on(
    args: &BenchArgs,
    access: &BrokerAccess,
    state_dir: &std::path::Path,
    broker: BrokerInfo,
    broker_pid: Option<u32>,
    say: &dyn Fn(String),
) -> anyhow::Result<BenchReport> {
    let url = access.url.as_str();
    let log = JetStreamLog::open(access, LogConfig::default())
        .await
        .with_context(|| format!("cannot reach the NATS broker at {url}"))?;
    if log.last_seq().await? != 0 {
        bail!(
            "the log stream GRIDFOLD_EVENTS at {url} is not empty: the bench needs a broker of its own (or no --nats)"
        );
    }
    let engines: Vec<EngineId> = (1..=args.engines)
        .map(|i| EngineId::new(&format!("sim{i:04}")).expect("a valid engine id"))
        .collect();
    let jobs = bench_jobs(args.tasks, args.jobs);

    // ---- the raw publish rate, on a stream of its own --------------------------------
    let payload_bytes = sample_message_bytes(&jobs[0], &engines[0]);
    let raw_publish = if args.raw_messages > 0 {
        say(format!(
            "raw JetStream publish: {} messages of {payload_bytes} bytes, {} acks in flight…",
            args.raw_messages, args.window
        ));
        let raw = measure_raw_publish(
            access,
            args.raw_messages,
            payload_bytes,
            args.window,
            broker_pid,
        )
        .await?;
        say(format!(
            "raw JetStream publish: {:.0} msgs/s",
            raw.msgs_per_s
        ));
        Some(raw)
    } else {
        None
    };

    // ---- the projector ------------------------------------------------------------------
    let sink = JetStreamOrderSink::connect(&log).await?;
    let lease = KvLease::open(
        log.context(),
        url,
        KvLeaseConfig::default(),
        "bench-projector".into(),
    )
    .await?;
    let mut config = ProjectorConfig::new(state_dir);
    config.register_key = true;
    config.read_batch_max = args.read_batch;
    config.schedule_every_entries = args.schedule_every;
    config.snapshot_every_entries = args.snapshot_every;
    let config_report = BenchConfigReport {
        tasks: args.tasks,
        jobs: args.jobs,
        engines: args.engines,
        slots_per_engine: args.slots,
        window: args.window,
        projector_read_batch_max: config.read_batch_max,
        projector_schedule_every_entries: config.schedule_every_entries,
        projector_snapshot_every_entries: config.snapshot_every_entries,
        projector_tick_interval_ms: config.tick_interval.map_or(0, |t| t.as_millis() as u64),
        dispatches_per_run_max: crate::core::event::Policy::default().dispatches_per_run_max,
    };
    let projector = Projector::new(config, log.clone(), sink, lease);
    let handle = projector.handle();
    let (stop_projector, projector_stop) = watch::channel(false);
    let projector_task = tokio::spawn(projector.run(async move {
        let mut stop = projector_stop;
        let _ = stop.wait_for(|stop| *stop).await;
    }));

    // ---- the engines, on a thread (and a runtime) of their own --------------------------
    let sim = spawn_simulator(
        access,
        &engines,
        args.slots,
        args.window,
        u64::from(args.tasks),
        None,
    )
    .await?;
    handle
        .wait_for(|status| status.folded_seq >= sim.login_seq && status.leader)
        .await
        .map_err(|_| anyhow!("the projector stopped before the engines' logins were folded"))?;
    let progress = sim.progress.clone();
    say(format!(
        "grid: {} tasks in {} jobs on {} simulated engines x {} slots; projector on JetStream",
        args.tasks, args.jobs, args.engines, args.slots
    ));

    // ---- the jobs: the clock starts -----------------------------------------------------
    let cpu_before = CpuSample::take(broker_pid);
    let started = Instant::now();
    for job in &jobs {
        publish(&log, "gridfold-bench", Event::JobSubmitted(job.clone())).await?;
    }
    let reporter = spawn_progress(
        handle.clone(),
        progress.clone(),
        u64::from(args.tasks),
        started,
        args.quiet,
    );
    let sim_outcome = sim
        .done
        .await
        .map_err(|_| anyhow!("the simulated engines' thread ended without a word"))?;
    let sim_report = match sim_outcome {
        Ok(report) => report,
        Err(err) => {
            reporter.abort();
            let _ = stop_projector.send(true);
            return Err(err);
        }
    };
    let last_completion = progress.last_completion_seq();
    handle
        .wait_for(|status| status.folded_seq >= last_completion)
        .await
        .map_err(|_| anyhow!("the projector stopped before folding every completion"))?;
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = CpuSample::take(broker_pid);
    reporter.abort();
    say(format!(
        "done: {} tasks in {seconds:.2} s ({:.0} lifecycles/s); stopping the projector",
        args.tasks,
        f64::from(args.tasks) / seconds
    ));
    let _ = stop_projector.send(true);
    let projector_report = projector_task.await.context("the projector panicked")??;
    let cpu = cpu_after.since(
        &cpu_before,
        seconds,
        u64::from(args.tasks),
        sim_report.cpu_us,
    );

    // ---- read the log back, replay and verify ---------------------------------------------
    say("reading the whole log back and replaying it with every batch re-derived…".to_string());
    let read_started = Instant::now();
    let mut reading = read_to_end(&log, 1).await?;
    let mut raw_entries = Vec::with_capacity(reading.end_seq() as usize);
    while let Some(batch) = reading.next_batch(crate::log::READ_BATCH_DEFAULT).await? {
        raw_entries.extend(batch);
    }
    let read_seconds = read_started.elapsed().as_secs_f64();
    let log_bytes: u64 = raw_entries.iter().map(|e| e.payload.len() as u64).sum();
    let replay_started = Instant::now();
    let entries: Vec<Entry> = raw_entries
        .iter()
        .map(|e| wire::entry_from_log(Seq(e.seq), e.time_ms, &e.subject, &e.payload))
        .collect();
    drop(raw_entries);
    let options = ReplayOptions {
        verify: true,
        stop_at: None,
        check_invariants: false,
    };
    let (state, replay_report) = replay(State::new(), &entries, &options, &mut |_| {});
    let replay_seconds = replay_started.elapsed().as_secs_f64();
    state.check_invariants();
    let at_projector = ReplayOptions {
        stop_at: Some(Seq(projector_report.last_seq)),
        ..ReplayOptions::default()
    };
    let (projector_view, _) = replay(State::new(), &entries, &at_projector, &mut |_| {});
    let projector_digest_matches = projector_view.chain == projector_report.chain_digest;

    let analysis = analyse(&entries, &jobs, args.slots);
    let every_task_completed_once = analysis.completed_once(&state, &jobs)
        && sim_report.duplicate_runs == 0
        && sim_report.runs_received == u64::from(args.tasks);
    let divergence = replay_report.first_divergence.as_ref().map(|d| {
        format!(
            "batch at seq {} (based on {}), order {}: recorded {:?}, re-derived {:?}",
            d.batch_seq.0, d.based_on_seq.0, d.order_index, d.recorded, d.rederived
        )
    });
    let ok = every_task_completed_once
        && divergence.is_none()
        && projector_digest_matches
        && replay_report.rejected_entries == 0;
    let verify = Verification {
        every_task_completed_once,
        completed_events: analysis.completed_events,
        dispatches_applied: analysis.dispatches,
        rejected_entries: replay_report.rejected_entries,
        read_entries: entries.len() as u64,
        read_seconds,
        read_entries_per_s: entries.len() as f64 / read_seconds.max(1e-9),
        replay_seconds,
        batches_verified: replay_report.batches_verified,
        divergence,
        digest: state.chain.to_string(),
        projector_digest_matches,
        ok,
    };

    // ---- figures ---------------------------------------------------------------------------
    let tasks = u64::from(args.tasks);
    let lifecycles_per_s = tasks as f64 / seconds;
    let run_entries = entries.len() as u64 - analysis.entries_before_jobs;
    let publishes = run_entries + sim_report.runs_received + sim_report.other_deliveries;
    let messages = entries.len() as u64 + sim_report.runs_received + sim_report.other_deliveries;
    let run = RunFigures {
        tasks_completed: analysis.completed_events,
        seconds,
        lifecycles_per_s,
        steady_lifecycles_per_s: analysis.steady_rate(),
        log_entries: entries.len() as u64,
        deliveries: sim_report.runs_received + sim_report.other_deliveries,
        order_batches: analysis.batches,
        publishes_per_lifecycle: publishes as f64 / tasks as f64,
        mean_message_bytes: (log_bytes + sim_report.delivery_bytes) as f64 / messages.max(1) as f64,
        ratio_to_raw_publish: raw_publish
            .as_ref()
            .map(|raw| lifecycles_per_s / raw.msgs_per_s),
        publish_share_of_raw: raw_publish
            .as_ref()
            .map(|raw| publishes as f64 / seconds / raw.msgs_per_s),
    };
    Ok(BenchReport {
        broker,
        machine: MachineInfo {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        },
        config: config_report,
        raw_publish,
        run,
        latency_ms: analysis.latencies(),
        cpu,
        projector: projector_report,
        engines: sim_report,
        verify,
    })
}

// ---- jobs and message sizes -------------------------------------------------------------

fn bench_jobs(tasks: u32, jobs: u32) -> Vec<JobSpec> {
    (0..jobs)
        .map(|j| {
            let count = tasks / jobs + u32::from(j < tasks % jobs);
            JobSpec {
                id: JobId::new(&format!("bench-{j}")).expect("a valid job id"),
                owner: "bench".into(),
                project: "bench".into(),
                queue: "default".into(),
                priority: 0,
                requirements: r#"os == "linux""#.into(),
                max_attempts: 3,
                wall_time_limit_ms: 60_000,
                slots_per_task: 1,
                template: TaskTemplate {
                    argv: vec!["render".into(), "--frame={index}".into()],
                    params: [("scene".to_string(), "bench".to_string())].into(),
                },
                tasks: TaskSet::Count(count),
                options: JobOptions::default(),
                task_conditions: BTreeMap::new(),
            }
        })
        .collect()
}

fn engine_props() -> EngineProps {
    EngineProps {
        os: "linux".into(),
        arch: "x86_64".into(),
        cores: 4,
        memory_mb: 16_384,
        disk_mb: 100_000,
        mflops: 1_000,
        site: "bench".into(),
        custom: BTreeMap::new(),
        ..EngineProps::default()
    }
}

/// The mean size of the three messages of a lifecycle (delivery, started, completed).
fn sample_message_bytes(job: &JobSpec, engine: &EngineId) -> usize {
    let task = TaskRef::new(job.id.clone(), 12_345);
    let delivery = Delivery {
        id: Delivery::id_for(Seq(123_456), 1_234),
        batch_seq: Seq(123_456),
        engine: engine.clone(),
        epoch: 123,
        kind: DeliveryKind::Run(RunTask {
            task: task.clone(),
            attempt: 1,
            argv: vec!["render".into(), "--frame=12345".into()],
            params: job.template.params.clone(),
            wall_time_limit_ms: job.wall_time_limit_ms,
            slots: 1,
            root_library: job.options.root_library.clone(),
        }),
    };
    let (started, completed) = reports(engine, &task, 1);
    (encode_delivery(&delivery).len() + started.1.len() + completed.1.len()).div_ceil(3)
}

/// The two reports of an attempt done at once: (subject, payload, msg id) each.
fn reports(
    engine: &EngineId,
    task: &TaskRef,
    attempt: u32,
) -> ((String, Bytes, String), (String, Bytes, String)) {
    let started = Event::TaskStarted {
        task: task.clone(),
        attempt,
        engine: engine.clone(),
    };
    let completed = Event::TaskCompleted {
        task: task.clone(),
        attempt,
        engine: engine.clone(),
        exit_code: 0,
        cpu_ms: 0,
        wall_ms: 0,
        result: Vec::new(),
    };
    let source = format!("engine:{engine}");
    let message = |event: Event| {
        let id = task_report_id(engine, task, attempt, event.kind_name());
        let subject = wire::subject_for(&event);
        let envelope = Envelope {
            id,
            source: source.clone(),
            event,
        };
        (
            subject,
            Bytes::from(wire::encode(&envelope)),
            uuid::Uuid::from_bytes(id).hyphenated().to_string(),
        )
    };
    (message(started), message(completed))
}

// ---- the pipelined publisher ------------------------------------------------------------

/// Publishes with up to `window` acks in flight: the publisher queues each ack future,
/// a task of its own awaits them in order, so no publish ever waits for its own ack.
struct Pipeline {
    context: js::Context,
    acks: mpsc::Sender<(PublishAckFuture, bool)>,
}

/// What the ack task saw.
#[derive(Debug, Default)]
struct Acked {
    messages: u64,
    duplicates: u64,
}

impl Pipeline {
    async fn connect(
        access: &BrokerAccess,
        window: usize,
        on_ack: impl FnMut(u64, bool) + Send + 'static,
    ) -> anyhow::Result<(Pipeline, JoinHandle<anyhow::Result<Acked>>)> {
        let client = connect_client(access, "gridfold-bench-engines").await?;
        let context = js::ContextBuilder::new()
            .timeout(Duration::from_secs(10))
            .max_ack_inflight(window + 1)
            .backpressure_on_inflight(true)
            .build(client);
        let (acks, mut rx) = mpsc::channel::<(PublishAckFuture, bool)>(window);
        let mut on_ack = on_ack;
        let task = tokio::spawn(async move {
            let mut acked = Acked::default();
            while let Some((ack, marked)) = rx.recv().await {
                let ack = ack
                    .await
                    .map_err(|err| anyhow!("a publish was not acknowledged: {err}"))?;
                acked.messages += 1;
                acked.duplicates += u64::from(ack.duplicate);
                on_ack(ack.sequence, marked);
            }
            Ok(acked)
        });
        Ok((Pipeline { context, acks }, task))
    }

    /// Sends one message; `marked` is handed back to the ack callback with its sequence.
    async fn send(
        &self,
        subject: String,
        payload: Bytes,
        msg_id: &str,
        marked: bool,
    ) -> anyhow::Result<()> {
        let publish = PublishMessage::build().payload(payload).message_id(msg_id);
        let ack = self
            .context
            .send_publish(subject, publish)
            .await
            .map_err(|err| anyhow!("publishing: {err}"))?;
        self.acks
            .send((ack, marked))
            .await
            .map_err(|_| anyhow!("the ack task stopped (a publish failed)"))
    }
}

/// A connection of the bench's own, with the bench's credentials and TLS.
async fn connect_client(access: &BrokerAccess, name: &str) -> anyhow::Result<async_nats::Client> {
    let (client, _refusals) = access
        .connect(name, Duration::from_secs(5))
        .await
        .with_context(|| format!("connecting to {}", access.url))?;
    Ok(client)
}

async fn measure_raw_publish(
    access: &BrokerAccess,
    messages: u32,
    payload_bytes: usize,
    window: usize,
    broker_pid: Option<u32>,
) -> anyhow::Result<RawPublish> {
    const RAW_SUBJECT: &str = "gridfold-bench.raw";
    let name = format!("GRIDFOLD_BENCH_RAW_{}", std::process::id());
    let (pipeline, acks) = Pipeline::connect(access, window, |_, _| {}).await?;
    let stream = pipeline
        .context
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![RAW_SUBJECT.to_string()],
            storage: StorageType::File,
            duplicate_window: crate::log::DUPLICATE_WINDOW_DEFAULT,
            ..Default::default()
        })
        .await
        .map_err(|err| anyhow!("creating the stream {name}: {err}"))?;
    let payload = Bytes::from(vec![b'x'; payload_bytes]);
    let broker_before = broker_pid.and_then(cpu_ticks_of_pid);
    let started = Instant::now();
    for n in 0..messages {
        pipeline
            .send(
                RAW_SUBJECT.to_string(),
                payload.clone(),
                &format!("raw-{n}"),
                false,
            )
            .await?;
    }
    let context = pipeline.context.clone();
    drop(pipeline);
    let acked = acks.await.context("the ack task panicked")??;
    let seconds = started.elapsed().as_secs_f64();
    let broker_us_per_msg = match (broker_before, broker_pid.and_then(cpu_ticks_of_pid)) {
        (Some(before), Some(after)) => {
            Some(ticks_to_us(after.saturating_sub(before)) / f64::from(messages))
        }
        _ => None,
    };
    drop(stream);
    let _ = context.delete_stream(&name).await;
    if acked.messages != u64::from(messages) || acked.duplicates != 0 {
        bail!(
            "raw publish: {} acked, {} duplicates of {messages}",
            acked.messages,
            acked.duplicates
        );
    }
    Ok(RawPublish {
        messages: u64::from(messages),
        payload_bytes,
        window,
        seconds,
        msgs_per_s: f64::from(messages) / seconds,
        broker_cpu_us_per_msg: broker_us_per_msg,
    })
}

// ---- the simulated engines -----------------------------------------------------------------

/// Progress shared with the reporter: completions acknowledged, with their log sequences.
#[derive(Debug, Default)]
struct Progress {
    runs: AtomicU64,
    completion_seqs: Mutex<CompletionSeqs>,
}

/// The log sequences of the completions stored so far, kept only until a query
/// has counted them as folded: bounded by the projector's lag, not by the tasks
/// done (a soak of a million tasks must not measure the bench's own bookkeeping).
#[derive(Debug, Default)]
struct CompletionSeqs {
    stored: u64,
    /// Completions at or before the highest sequence asked about so far.
    counted: u64,
    /// The newer ones, in publish order (acks are awaited in publish order on one
    /// connection, so the sequences grow).
    pending: std::collections::VecDeque<u64>,
    last: u64,
}

impl CompletionSeqs {
    fn push(&mut self, seq: u64) {
        self.stored += 1;
        self.last = seq;
        self.pending.push_back(seq);
    }
}

impl Progress {
    fn completions(&self) -> u64 {
        self.completion_seqs.lock().expect("not poisoned").stored
    }
    /// Completions stored at or before `seq`; the sequences asked about only grow
    /// (a projector's folded sequence), a smaller one answers as the largest asked.
    fn completions_through(&self, seq: u64) -> u64 {
        let mut seqs = self.completion_seqs.lock().expect("not poisoned");
        while seqs.pending.front().is_some_and(|&s| s <= seq) {
            seqs.pending.pop_front();
            seqs.counted += 1;
        }
        seqs.counted
    }
    fn last_completion_seq(&self) -> u64 {
        self.completion_seqs.lock().expect("not poisoned").last
    }
}

struct Simulator {
    pipeline: Pipeline,
    acks: JoinHandle<anyhow::Result<Acked>>,
    messages: pull::Stream,
    engines: HashMap<String, (EngineId, u32)>,
    progress: Arc<Progress>,
}

impl Simulator {
    async fn connect(
        access: &BrokerAccess,
        engines: &[EngineId],
        slots: u32,
        window: usize,
    ) -> anyhow::Result<Simulator> {
        let progress = Arc::new(Progress::default());
        let on_ack = {
            let progress = progress.clone();
            move |seq: u64, completion: bool| {
                if completion {
                    progress.completion_seqs.lock().expect("not poisoned").push(seq);
                }
            }
        };
        let (pipeline, acks) = Pipeline::connect(access, window, on_ack).await?;
        // Deliveries are read on a connection of their own, through one consumer for all engines.
        let client = connect_client(access, "gridfold-bench-deliveries").await?;
        let context = js::new(client);
        let mut orders = context
            .get_stream(STREAM_ORDERS)
            .await
            .map_err(|err| anyhow!("getting stream {STREAM_ORDERS}: {err}"))?;
        let start = orders
            .info()
            .await
            .map_err(|err| anyhow!("reading stream {STREAM_ORDERS}: {err}"))?
            .state
            .last_sequence
            + 1;
        let consumer = orders
            .create_consumer(pull::Config {
                filter_subject: format!("{ORDER_SUBJECT_PREFIX}>"),
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                ack_policy: AckPolicy::None,
                replay_policy: ReplayPolicy::Instant,
                memory_storage: true,
                inactive_threshold: Duration::from_secs(60),
                description: Some("gridfold bench: every simulated engine's deliveries".into()),
                ..Default::default()
            })
            .await
            .map_err(|err| anyhow!("creating the engines' consumer: {err}"))?;
        let messages = consumer
            .stream()
            .max_messages_per_batch(10_000)
            .heartbeat(Duration::from_secs(2))
            .expires(Duration::from_secs(10))
            .messages()
            .await
            .map_err(|err| anyhow!("reading deliveries: {err}"))?;
        let engines = engines
            .iter()
            .map(|e| (e.as_str().to_string(), (e.clone(), slots)))
            .collect();
        Ok(Simulator {
            pipeline,
            acks,
            messages,
            engines,
            progress,
        })
    }

    /// Logs every engine in (pipelined); returns the sequence of the last login.
    async fn log_in(
        &self,
        access: &BrokerAccess,
        engines: &[EngineId],
        slots: u32,
    ) -> anyhow::Result<u64> {
        let log = JetStreamLog::open(access, LogConfig::default())
            .await
            .with_context(|| format!("cannot reach the NATS broker at {}", access.url))?;
        let session = *uuid::Uuid::new_v4().as_bytes();
        let appends = engines
            .iter()
            .map(|engine| {
                let id = session_event_id(engine, &session, "EngineLoggedIn", 0);
                let event = Event::EngineLoggedIn {
                    engine: engine.clone(),
                    slots,
                    props: engine_props(),
                };
                let subject = wire::subject_for(&event);
                let envelope = Envelope {
                    id,
                    source: format!("engine:{engine}"),
                    event,
                };
                Append::new(subject, wire::encode(&envelope))
                    .with_msg_id(uuid::Uuid::from_bytes(id).hyphenated().to_string())
            })
            .collect();
        let appended = log
            .append_batch(appends)
            .await
            .context("logging the engines in")?;
        Ok(appended.iter().map(|a| a.seq).max().unwrap_or(0))
    }

    /// Takes deliveries and reports each `Run` started and completed, until `tasks` runs came.
    /// Duplicate runs are caught among every run seen, or with `seen_kept`, among
    /// the last `seen_kept` to `2 × seen_kept` (a soak: the engines' own memory
    /// must not grow with the history either).
    async fn run(mut self, tasks: u64, seen_kept: Option<usize>) -> anyhow::Result<SimReport> {
        let cpu_started = thread_cpu_us();
        let mut report = SimReport::default();
        let capacity = seen_kept.map_or(tasks as usize, |kept| kept.min(tasks as usize));
        let mut seen: HashMap<(TaskRef, u32), ()> = HashMap::with_capacity(capacity);
        let mut seen_before: HashMap<(TaskRef, u32), ()> = HashMap::new();
        let mut consumer_seq = 0u64;
        while report.runs_received < tasks {
            let message = self
                .messages
                .next()
                .await
                .ok_or_else(|| anyhow!("the deliveries consumer ended"))?
                .map_err(|err| anyhow!("reading deliveries: {err}"))?;
            let info = message
                .info()
                .map_err(|err| anyhow!("bad delivery metadata: {err}"))?;
            if info.consumer_sequence != consumer_seq + 1 {
                bail!(
                    "the deliveries consumer skipped from {consumer_seq} to {}",
                    info.consumer_sequence
                );
            }
            consumer_seq = info.consumer_sequence;
            let subject = message.subject.as_str();
            let name = subject
                .strip_prefix(ORDER_SUBJECT_PREFIX)
                .unwrap_or(subject);
            let Some((engine, _slots)) = self.engines.get(name) else {
                report.other_deliveries += 1;
                continue;
            };
            report.delivery_bytes += message.payload.len() as u64;
            let delivery = decode_delivery(engine, &message.payload)
                .map_err(|err| anyhow!("a delivery on {subject} does not decode: {err}"))?;
            let DeliveryKind::Run(run) = delivery.kind else {
                report.other_deliveries += 1;
                continue;
            };
            let key = (run.task.clone(), run.attempt);
            if seen_before.contains_key(&key) || seen.insert(key, ()).is_some() {
                report.duplicate_runs += 1;
                continue;
            }
            if seen_kept.is_some_and(|kept| seen.len() >= kept) {
                seen_before = std::mem::replace(&mut seen, HashMap::with_capacity(capacity));
            }
            report.runs_received += 1;
            self.progress.runs.fetch_add(1, Ordering::Relaxed);
            let (started, completed) = reports(engine, &run.task, run.attempt);
            self.pipeline
                .send(started.0, started.1, &started.2, false)
                .await?;
            self.pipeline
                .send(completed.0, completed.1, &completed.2, true)
                .await?;
            report.reports_published += 2;
        }
        // Close the queue but keep the connection (the context) until every ack is in.
        let Pipeline { context, acks } = self.pipeline;
        drop(acks);
        let acked = self.acks.await.context("the ack task panicked")??;
        drop(context);
        report.duplicate_acks = acked.duplicates;
        report.cpu_us = thread_cpu_us() - cpu_started;
        Ok(report)
    }
}

/// The simulated engines, running on a thread of their own.
struct SimHandle {
    login_seq: u64,
    progress: Arc<Progress>,
    done: oneshot::Receiver<anyhow::Result<SimReport>>,
}

/// Starts the simulated engines on a thread with a current-thread runtime of its own
/// (so their CPU time, connections included, can be told apart from the projector's),
/// logs them in and returns once the logins are stored.
async fn spawn_simulator(
    access: &BrokerAccess,
    engines: &[EngineId],
    slots: u32,
    window: usize,
    tasks: u64,
    seen_kept: Option<usize>,
) -> anyhow::Result<SimHandle> {
    let (ready_tx, ready_rx) = oneshot::channel::<anyhow::Result<(u64, Arc<Progress>)>>();
    let (done_tx, done_rx) = oneshot::channel();
    let access = access.clone();
    let engines = engines.to_vec();
    std::thread::Builder::new()
        .name("bench-engines".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(err) => {
                    let _ = ready_tx.send(Err(anyhow!("starting the engines' runtime: {err}")));
                    return;
                }
            };
            runtime.block_on(async move {
                let started = async {
                    let sim = Simulator::connect(&access, &engines, slots, window).await?;
                    let login_seq = sim.log_in(&access, &engines, slots).await?;
                    anyhow::Ok((sim, login_seq))
                };
                let sim = match started.await {
                    Ok((sim, login_seq)) => {
                        let _ = ready_tx.send(Ok((login_seq, sim.progress.clone())));
                        sim
                    }
                    Err(err) => {
                        let _ = ready_tx.send(Err(err));
                        return;
                    }
                };
                let _ = done_tx.send(sim.run(tasks, seen_kept).await);
            });
        })
        .context("starting the engines' thread")?;
    let (login_seq, progress) = ready_rx
        .await
        .map_err(|_| anyhow!("the engines' thread ended before logging in"))??;
    Ok(SimHandle {
        login_seq,
        progress,
        done: done_rx,
    })
}

// ---- CPU time ----------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct CpuFigures {
    /// Cores kept busy on average by the bench process and the broker together.
    pub cores_busy: Option<f64>,
    /// The projector (its runtime, its connection) and the bench's own waiting.
    pub projector_us_per_lifecycle: f64,
    /// The simulated engines' thread (their two connections included).
    pub engines_us_per_lifecycle: f64,
    /// The broker, when the bench started it.
    pub broker_us_per_lifecycle: Option<f64>,
}

/// CPU time (user + system, µs) of the bench process and the broker at one moment.
#[derive(Debug, Clone, Copy)]
struct CpuSample {
    process: f64,
    broker: Option<f64>,
}

impl CpuSample {
    fn take(broker_pid: Option<u32>) -> CpuSample {
        CpuSample {
            process: process_cpu_us(),
            broker: broker_pid.and_then(cpu_ticks_of_pid).map(ticks_to_us),
        }
    }

    /// The figures since `before`; `engines_us` is the engines' thread's own measure.
    fn since(
        &self,
        before: &CpuSample,
        seconds: f64,
        lifecycles: u64,
        engines_us: f64,
    ) -> CpuFigures {
        let process = self.process - before.process;
        let broker = match (self.broker, before.broker) {
            (Some(after), Some(before)) => Some(after - before),
            _ => None,
        };
        let per = |us: f64| us / lifecycles.max(1) as f64;
        CpuFigures {
            cores_busy: broker.map(|broker| (process + broker) / 1e6 / seconds.max(1e-9)),
            projector_us_per_lifecycle: per(process - engines_us),
            engines_us_per_lifecycle: per(engines_us),
            broker_us_per_lifecycle: broker.map(per),
        }
    }
}

fn cpu_ticks_of_pid(pid: u32) -> Option<u64> {
    cpu_ticks_of(&format!("/proc/{pid}/stat"))
}

/// utime + stime of a `/proc/.../stat` file, in clock ticks.
fn cpu_ticks_of(path: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    // The command name is in parentheses and may hold spaces: count fields after it.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line (utime, stime) are the 12th and 13th after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn ticks_to_us(ticks: u64) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    ticks as f64 * 1e6 / per_second as f64
}

fn clock_us(clock: libc::clockid_t) -> f64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write to.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return 0.0;
    }
    now.tv_sec as f64 * 1e6 + now.tv_nsec as f64 / 1e3
}

/// CPU time of the whole process, threads that ended included.
fn process_cpu_us() -> f64 {
    clock_us(libc::CLOCK_PROCESS_CPUTIME_ID)
}

/// CPU time of the calling thread.
fn thread_cpu_us() -> f64 {
    clock_us(libc::CLOCK_THREAD_CPUTIME_ID)
}

fn spawn_progress(
    handle: ProjectorHandle,
    progress: Arc<Progress>,
    tasks: u64,
    started: Instant,
    quiet: bool,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if quiet {
            return;
        }
        let mut last = (0u64, Instant::now());
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let status = handle.status();
            let done = progress.completions_through(status.folded_seq);
            let now = Instant::now();
            let recent = (done - last.0) as f64 / now.duration_since(last.1).as_secs_f64();
            last = (done, now);
            eprintln!(
                "  {:>5.1} s  {done:>9}/{tasks} tasks done  {:>7.0}/s (last second {recent:>7.0}/s)  runs {}  reported {}  projector at seq {}",
                started.elapsed().as_secs_f64(),
                done as f64 / started.elapsed().as_secs_f64(),
                progress.runs.load(Ordering::Relaxed),
                progress.completions(),
                status.folded_seq,
            );
        }
    })
}

// ---- what the log says ------------------------------------------------------------------

#[derive(Debug, Default)]
struct Analysis {
    entries_before_jobs: u64,
    batches: u64,
    dispatches: u64,
    completed_events: u64,
    /// (job, index) -> completions seen.
    completions_per_task: HashMap<(JobId, u32), u32>,
    slot_free_to_dispatch: Vec<u64>,
    submit_to_dispatch: Vec<u64>,
    dispatch_to_completed: Vec<u64>,
    completion_times: Vec<u64>,
}

/// Walks the log: dispatches, completions and the latencies (see the module docs).
fn analyse(entries: &[Entry], jobs: &[JobSpec], slots: u32) -> Analysis {
    let mut analysis = Analysis::default();
    let mut submitted: HashMap<JobId, u64> = HashMap::new();
    let mut free_since: HashMap<EngineId, VecDeque<u64>> = HashMap::new();
    let mut dispatched_at: HashMap<(JobId, u32), u64> = HashMap::new();
    let first_job = jobs.first().map(|j| j.id.clone());
    for entry in entries {
        let Payload::Event(envelope) = &entry.payload else {
            continue;
        };
        let t = entry.time_ms;
        match &envelope.event {
            Event::JobSubmitted(spec) => {
                if Some(&spec.id) == first_job.as_ref() {
                    analysis.entries_before_jobs = entry.seq.0 - 1;
                }
                submitted.insert(spec.id.clone(), t);
            }
            Event::EngineLoggedIn {
                engine, slots: n, ..
            } => {
                debug_assert_eq!(*n, slots);
                free_since
                    .entry(engine.clone())
                    .or_default()
                    .extend(std::iter::repeat_n(t, *n as usize));
            }
            Event::OrderBatch(batch) if entry.origin == Origin::Projector => {
                analysis.batches += 1;
                for order in &batch.orders {
                    if let Order::Dispatch { task, engine, .. } = order {
                        analysis.dispatches += 1;
                        if let Some(&at) = submitted.get(&task.job) {
                            analysis.submit_to_dispatch.push(t.saturating_sub(at));
                        }
                        if let Some(free) = free_since.get_mut(engine).and_then(VecDeque::pop_front)
                        {
                            analysis.slot_free_to_dispatch.push(t.saturating_sub(free));
                        }
                        dispatched_at.insert((task.job.clone(), task.index), t);
                    }
                }
            }
            Event::TaskCompleted { task, engine, .. } => {
                analysis.completed_events += 1;
                analysis.completion_times.push(t);
                *analysis
                    .completions_per_task
                    .entry((task.job.clone(), task.index))
                    .or_default() += 1;
                free_since.entry(engine.clone()).or_default().push_back(t);
                if let Some(at) = dispatched_at.get(&(task.job.clone(), task.index)) {
                    analysis.dispatch_to_completed.push(t.saturating_sub(*at));
                }
            }
            _ => {}
        }
    }
    analysis
}

impl Analysis {
    /// Every task of every bench job: one completion event, status done, one attempt.
    fn completed_once(&self, state: &State, jobs: &[JobSpec]) -> bool {
        let total: u64 = jobs.iter().map(JobSpec::task_count).sum();
        if self.completed_events != total || self.dispatches != total {
            return false;
        }
        jobs.iter().all(|spec| {
            let Some(j) = state.job_idx(&spec.id) else {
                return false;
            };
            let job = state.job(j);
            job.status == JobStatus::Done
                && u64::from(job.counts.done) == spec.task_count()
                && job
                    .tasks
                    .iter()
                    .all(|t| t.status == TaskStatus::Done && t.attempts == 1)
                && (0..job.n_tasks())
                    .all(|i| self.completions_per_task.get(&(spec.id.clone(), i)) == Some(&1))
        })
    }

    fn steady_rate(&self) -> f64 {
        let mut times = self.completion_times.clone();
        times.sort_unstable();
        let n = times.len();
        if n < 10 {
            return 0.0;
        }
        let (lo, hi) = (n / 10, n * 9 / 10);
        let span_ms = times[hi] - times[lo];
        if span_ms == 0 {
            return 0.0;
        }
        (hi - lo) as f64 * 1000.0 / span_ms as f64
    }

    fn latencies(&self) -> Latencies {
        Latencies {
            slot_free_to_dispatch: percentiles(&self.slot_free_to_dispatch),
            submit_to_dispatch: percentiles(&self.submit_to_dispatch),
            dispatch_to_completed: percentiles(&self.dispatch_to_completed),
        }
    }
}

fn percentiles(samples: &[u64]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = |p: usize| {
        sorted[((sorted.len() * p).div_ceil(100))
            .saturating_sub(1)
            .min(sorted.len() - 1)]
    };
    Percentiles {
        samples: sorted.len() as u64,
        p50: rank(50),
        p99: rank(99),
        max: *sorted.last().expect("not empty"),
    }
}

// ---- output ----------------------------------------------------------------------------

fn print_report(report: &BenchReport) {
    let run = &report.run;
    let lat = &report.latency_ms;
    let c = &report.config;
    println!();
    println!(
        "gridfold bench: {} tasks in {} jobs, {} engines x {} slots, on {}",
        c.tasks, c.jobs, c.engines, c.slots_per_engine, report.broker.url
    );
    println!(
        "  broker: {} (sync: {}), {} cores",
        report
            .broker
            .nats_server_version
            .as_deref()
            .map_or("nats-server (given)".to_string(), |v| format!(
                "nats-server {v}"
            )),
        report.broker.sync,
        report.machine.cores
    );
    println!(
        "  projector: read batch {}, decide every {} entries or when caught up, snapshot every {} entries, tick {} ms, at most {} dispatches per run",
        c.projector_read_batch_max,
        c.projector_schedule_every_entries,
        c.projector_snapshot_every_entries,
        c.projector_tick_interval_ms,
        c.dispatches_per_run_max
    );
    println!();
    println!(
        "  task lifecycles:        {:>10.0} /s  ({} tasks in {:.2} s; steady middle 80%: {:.0} /s)",
        run.lifecycles_per_s, run.tasks_completed, run.seconds, run.steady_lifecycles_per_s
    );
    if let Some(raw) = &report.raw_publish {
        println!(
            "  raw JetStream publish:  {:>10.0} /s  ({} msgs of {} bytes, {} acks in flight)",
            raw.msgs_per_s, raw.messages, raw.payload_bytes, raw.window
        );
        println!(
            "  ratio lifecycles/raw:   {:>10.3}     (the run published {:.2} messages per lifecycle: {:.0}% of the raw rate)",
            run.ratio_to_raw_publish.unwrap_or(0.0),
            run.publishes_per_lifecycle,
            100.0 * run.publish_share_of_raw.unwrap_or(0.0)
        );
    }
    println!(
        "  slot free -> dispatch:  p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  (a completion or login durable -> the dispatch filling that slot durable)",
        lat.slot_free_to_dispatch.p50, lat.slot_free_to_dispatch.p99, lat.slot_free_to_dispatch.max
    );
    println!(
        "  submit -> dispatch:     p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  (job durable -> dispatch durable; mostly queueing: {} tasks, {} slots)",
        lat.submit_to_dispatch.p50,
        lat.submit_to_dispatch.p99,
        lat.submit_to_dispatch.max,
        c.tasks,
        c.engines * c.slots_per_engine
    );
    println!(
        "  dispatch -> completed:  p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  (delivery, engine, both reports durable)",
        lat.dispatch_to_completed.p50, lat.dispatch_to_completed.p99, lat.dispatch_to_completed.max
    );
    let cpu = &report.cpu;
    println!(
        "  CPU per lifecycle:      projector {:.1} us, engines {:.1} us, broker {} us  (cores busy: {} of {})",
        cpu.projector_us_per_lifecycle,
        cpu.engines_us_per_lifecycle,
        cpu.broker_us_per_lifecycle
            .map_or("?".to_string(), |v| format!("{v:.1}")),
        cpu.cores_busy
            .map_or("?".to_string(), |c| format!("{c:.2}")),
        report.machine.cores
    );
    if let Some(us) = report
        .raw_publish
        .as_ref()
        .and_then(|raw| raw.broker_cpu_us_per_msg)
    {
        println!("  broker CPU per raw publish: {us:.1} us");
    }
    println!(
        "  log: {} entries ({} order batches), {} deliveries, mean message {:.0} bytes",
        run.log_entries, run.order_batches, run.deliveries, run.mean_message_bytes
    );
    let p = &report.projector;
    println!(
        "  projector: {} entries folded, {} batches published, {} deliveries sent, {} snapshots",
        p.entries_folded, p.batches_published, p.deliveries_sent, p.snapshots_written
    );
    let v = &report.verify;
    println!(
        "  read back: {} entries in {:.2} s ({:.0} entries/s); replay with verify: {:.2} s, {} batches re-derived",
        v.read_entries, v.read_seconds, v.read_entries_per_s, v.replay_seconds, v.batches_verified
    );
    println!(
        "  every task completed exactly once: {}; rejected entries: {}; divergence: {}; projector digest matches: {}",
        yes(v.every_task_completed_once),
        v.rejected_entries,
        v.divergence.as_deref().unwrap_or("none"),
        yes(v.projector_digest_matches)
    );
    println!(
        "{}",
        if v.ok {
            format!("bench verified: digest {}", v.digest)
        } else {
            "bench NOT verified".to_string()
        }
    );
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "NO" }
}

/// A temporary directory removed on drop.
struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The bench's own nats-server; with `sync_always`, from a configuration file
/// asking JetStream to fsync every write (the store where `store_dir` says).
/// The directory it returns holds that store: drop it after the server.
fn start_private_server(sync_always: bool) -> anyhow::Result<(NatsServer, Option<TempDir>)> {
    if !sync_always {
        return Ok((NatsServer::start()?, None));
    }
    let dir = tempdir_for("broker")?;
    let store = dir.0.join("store");
    let config_file = dir.0.join("nats-server.conf");
    let config = format!("jetstream {{\n  store_dir: \"{}\"\n  sync_interval: always\n}}\n", store.display());
    std::fs::write(&config_file, config).with_context(|| format!("writing {}", config_file.display()))?;
    let server = NatsServer::start_with(crate::log::nats_server::NatsServerConfig {
        dir: Some(dir.0.clone()),
        config_file: Some(config_file),
        ..Default::default()
    })?;
    Ok((server, Some(dir)))
}

fn tempdir_for(what: &str) -> anyhow::Result<TempDir> {
    let dir = std::env::temp_dir().join(format!("gridfold-bench-{}-{what}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(TempDir(dir))
}
