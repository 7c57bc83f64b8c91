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
//!   `TaskCompleted` on it, or the job's submission when that came later: the
//!   scheduler's reaction time once a task can run),
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
//! not the scheduler), and for each `Run` reports `TaskStarted` and
//! `TaskCompleted` with the agent's ids. The reports of the runs one delivery
//! message brought leave together as one `EngineReports` batch on that engine's
//! own subject (a real agent's reports join the same way when they pile up behind
//! an acknowledgement), through a pipeline that keeps up to `--window` acks in flight on a connection of
//! its own. A second task awaits the acks in order. Slots are per engine as logged
//! in; the projector never books more (the replay checks it).
//!
//! # Where things are
//!
//! This file runs the bench (`run`, `bench_on`) and the private broker;
//! `workload.rs` makes the jobs and messages, `pipeline.rs` publishes with many
//! acks in flight and measures the raw rate, `engines.rs` plays the engines,
//! `cpu.rs` measures CPU time, `analysis.rs` reads the latencies off the log,
//! `report.rs` holds the findings and prints them, and `soak.rs` runs the soak.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use tokio::sync::watch;

mod analysis;
mod cpu;
mod engines;
mod memory;
mod pipeline;
mod real;
mod report;
mod soak;
mod workload;

use crate::cli::client::{block_on, publish};
use crate::core::event::{Entry, Event, Origin};
use crate::core::ids::{EngineId, Seq};
use crate::core::replay::{ReplayOptions, replay};
use crate::core::state::State;
use crate::log::connect::BrokerAccess;
use crate::log::jetstream::{JetStreamLog, LogConfig, STREAM_EVENTS};
use crate::log::nats_server::NatsServer;
use crate::log::EventLog;
use crate::projector::service::lease::{KvLease, KvLeaseConfig};
use crate::projector::service::sink::JetStreamOrderSink;
use crate::projector::service::{Projector, ProjectorConfig};
use crate::wire;
use analysis::analyse;
use cpu::CpuSample;
use engines::{spawn_progress, spawn_simulator};
use pipeline::{measure_raw_publish, measure_raw_read};
use report::print_report;
use workload::{bench_jobs, sample_message_bytes};

pub use real::RealReport;
pub use report::{
    BenchConfigReport, BenchReport, BrokerInfo, CpuFigures, Latencies, MachineInfo, Percentiles, RawPublish,
    RunFigures, SimReport, Verification,
};

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
    pub auth: crate::cli::client::AuthArgs,
    /// Start the private nats-server with `jetstream { sync_interval: always }`:
    /// every message is written to disk (fsync) before the broker acknowledges it,
    /// instead of every 2 minutes. What it costs is what this measures.
    #[arg(long, conflicts_with = "nats")]
    pub sync_always: bool,
    /// Tasks in all, split evenly over the jobs [default: 200000; with --real, 2000].
    #[arg(long)]
    pub tasks: Option<u32>,
    /// Jobs the tasks are queued in.
    #[arg(long, default_value_t = 4)]
    pub jobs: u32,
    /// Engines: simulated ones, or engine processes with --real [default: 1000; with --real, 1].
    #[arg(long)]
    pub engines: Option<u32>,
    /// Slots per engine [default: 4; with --real, 8].
    #[arg(long)]
    pub slots: Option<u32>,
    /// Measure the path of real tasks instead: a private nats-server, a projector
    /// and --engines engine agents as processes of their own, one job of --tasks
    /// runs of --command; CPU per task of each process and the machine's spawn
    /// limit in the same run (see `bench/real.rs`).
    #[arg(long, conflicts_with_all = ["nats", "soak", "sync_always"])]
    pub real: bool,
    /// With --real: the command each task runs (split on spaces).
    #[arg(long, default_value = "/bin/true", requires = "real")]
    pub command: String,
    /// With --real: the engines' `--report-window-ms` (how long a lone report
    /// waits for company) [default: the engine's own].
    #[arg(long, requires = "real", value_parser = clap::value_parser!(u64).range(0..=crate::engine::REPORT_WINDOW_MAX_MS))]
    pub report_window_ms: Option<u64>,
    /// With --real: the engines' `--dirs-ahead` (attempts' directories made
    /// ahead of need; 0: none) [default: the engine's own, twice its slots].
    #[arg(long, requires = "real", value_parser = clap::value_parser!(u16).range(0..=crate::engine::DIRS_AHEAD_MAX as i64))]
    pub dirs_ahead: Option<u16>,
    /// With --real: where the engines' work directories go (a directory of the
    /// bench's own is made in it and removed after), for measuring on the
    /// filesystem the grid's engines would use, e.g. a tmpfs [default: the
    /// system's temporary directory].
    #[arg(long, requires = "real", value_name = "DIR")]
    pub work_dir: Option<std::path::PathBuf>,
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
    /// Measure instead what a held task costs: fold --jobs jobs of --tasks tasks
    /// in all [default: 10000000] into a state in this process, no broker, and
    /// read the resident memory before, after and with the state's snapshot
    /// (see `bench/memory.rs`).
    #[arg(long, conflicts_with_all = ["nats", "soak", "real", "sync_always"])]
    pub memory: bool,
    /// With --memory: list the tasks, one 8-byte parameter each, rather than count them.
    #[arg(long, requires = "memory")]
    pub memory_listed: bool,
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

impl BenchArgs {
    pub fn tasks_or(&self, default: u32) -> u32 {
        self.tasks.unwrap_or(default)
    }

    pub fn engines_or(&self, default: u32) -> u32 {
        self.engines.unwrap_or(default)
    }

    pub fn slots_or(&self, default: u32) -> u32 {
        self.slots.unwrap_or(default)
    }

    /// The simulated bench's figures, its defaults filled in.
    pub(super) fn tasks_sim(&self) -> u32 {
        self.tasks_or(200_000)
    }

    pub(super) fn engines_sim(&self) -> u32 {
        self.engines_or(1_000)
    }

    pub(super) fn slots_sim(&self) -> u32 {
        self.slots_or(4)
    }
}

pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    if [args.tasks, args.engines, args.slots].contains(&Some(0)) || args.jobs == 0 || args.window == 0 {
        bail!("--tasks, --jobs, --engines, --slots and --window must be positive");
    }
    if args.jobs > args.tasks_sim() && !args.real {
        bail!("--jobs must not exceed --tasks");
    }
    let timeout = Duration::from_secs(args.timeout_secs);
    if args.memory {
        let report = memory::measure(args.jobs, u64::from(args.tasks_or(10_000_000)), args.memory_listed);
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            memory::print_memory(&report);
        }
        return Ok(if report.rejected == 0 { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
    if args.real {
        let server = NatsServer::start().context("starting a private nats-server")?;
        let report = block_on(async {
            tokio::time::timeout(timeout, real::run_real(&args, &server))
                .await
                .map_err(|_| anyhow!("the real bench did not finish within {} s", timeout.as_secs()))?
        })?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            real::print_real(&report);
        }
        return Ok(if report.verify.ok { ExitCode::SUCCESS } else { ExitCode::from(1) });
    }
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
    let engines: Vec<EngineId> = (1..=args.engines_sim())
        .map(|i| EngineId::new(&format!("sim{i:04}")).expect("a valid engine id"))
        .collect();
    let jobs = bench_jobs(args.tasks_sim(), args.jobs);

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
        tasks: args.tasks_sim(),
        jobs: args.jobs,
        engines: args.engines_sim(),
        slots_per_engine: args.slots_sim(),
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
        args.slots_sim(),
        args.window,
        u64::from(args.tasks_sim()),
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
        args.tasks_sim(), args.jobs, args.engines_sim(), args.slots_sim()
    ));

    // ---- the jobs: the clock starts -----------------------------------------------------
    let cpu_before = CpuSample::take(broker_pid);
    let started = Instant::now();
    for job in &jobs {
        publish(&log, &Origin::Operator, "gridfold-bench", Event::JobSubmitted(job.clone())).await?;
    }
    let reporter = spawn_progress(
        handle.clone(),
        progress.clone(),
        u64::from(args.tasks_sim()),
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
        args.tasks_sim(),
        f64::from(args.tasks_sim()) / seconds
    ));
    let _ = stop_projector.send(true);
    let projector_report = projector_task.await.context("the projector panicked")??;
    let cpu = cpu_after.since(
        &cpu_before,
        seconds,
        u64::from(args.tasks_sim()),
        sim_report.cpu_us,
    );

    // ---- read the log back, replay and verify ---------------------------------------------
    say("reading the whole log back and replaying it with every batch re-derived…".to_string());
    let engines_ran_each_once = sim_report.duplicate_runs == 0 && sim_report.runs_received == u64::from(args.tasks_sim());
    let ReadBack { entries, log_bytes, analysis, verify } = read_back_and_verify(
        access,
        &log,
        &jobs,
        args.slots_sim(),
        (Seq(projector_report.last_seq), projector_report.chain_digest.to_string()),
        engines_ran_each_once,
    )
    .await?;

    // ---- figures ---------------------------------------------------------------------------
    let tasks = u64::from(args.tasks_sim());
    let lifecycles_per_s = tasks as f64 / seconds;
    let run_entries = entries.len() as u64 - analysis.entries_before_jobs;
    let publishes = run_entries + sim_report.delivery_messages;
    let messages = entries.len() as u64 + sim_report.delivery_messages;
    let run = RunFigures {
        tasks_completed: analysis.completed_events,
        seconds,
        lifecycles_per_s,
        steady_lifecycles_per_s: analysis.steady_rate(),
        log_entries: entries.len() as u64,
        deliveries: sim_report.runs_received + sim_report.other_deliveries,
        delivery_messages: sim_report.delivery_messages,
        report_messages: sim_report.report_messages,
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

/// What reading the whole log back found: its entries, their bytes, the figures
/// `analyse` reads off them, and the verdict.
struct ReadBack {
    entries: Vec<Entry>,
    log_bytes: u64,
    analysis: analysis::Analysis,
    verify: Verification,
}

/// Rounds of the read-back measurement (a raw read, then replay's read).
const READ_ROUNDS: usize = 3;

/// Reads the whole log back, replays it with every order batch re-derived, and
/// checks that every task of `jobs` completed exactly once, nothing was rejected,
/// and the digest at the projector's last entry is the projector's own
/// (`projector_at`: that entry and the digest it reported). `engines_ok` is what
/// the engines' side says of it (no run received twice, none missing).
async fn read_back_and_verify<L: EventLog>(
    access: &BrokerAccess,
    log: &L,
    jobs: &[crate::core::event::JobSpec],
    slots: u32,
    projector_at: (Seq, String),
    engines_ok: bool,
) -> anyhow::Result<ReadBack> {
    // Replay's own read (`gridfold replay` from the broker) and a raw read of the
    // same stream, alternating, [`READ_ROUNDS`] of each: the best of each is
    // compared, so that neither side is judged on one sample against the
    // other's best.
    let end_seq = log.last_seq().await?;
    let mut raw_read_msgs_per_s: f64 = 0.0;
    let mut read_seconds = f64::INFINITY;
    let mut raw_entries = Vec::new();
    for _ in 0..READ_ROUNDS {
        raw_read_msgs_per_s = raw_read_msgs_per_s.max(measure_raw_read(access, STREAM_EVENTS, end_seq).await?);
        let read_started = Instant::now();
        raw_entries = crate::cli::stat::read_whole_log(log).await?;
        read_seconds = read_seconds.min(read_started.elapsed().as_secs_f64());
    }
    let log_bytes: u64 = raw_entries.iter().map(|e| e.payload.len() as u64).sum();
    let replay_started = Instant::now();
    let entries: Vec<Entry> = raw_entries
        .iter()
        .map(|e| wire::entry_from_log(Seq(e.seq), e.time_ms, &e.subject, &e.payload))
        .collect();
    drop(raw_entries);
    let options = ReplayOptions { verify: true, stop_at: None, check_invariants: false };
    let (state, replay_report) = replay(State::new(), &entries, &options, &mut |_| {});
    let replay_seconds = replay_started.elapsed().as_secs_f64();
    state.check_invariants();
    let (projector_seq, projector_digest) = projector_at;
    let at_projector = ReplayOptions { stop_at: Some(projector_seq), ..ReplayOptions::default() };
    let (projector_view, _) = replay(State::new(), &entries, &at_projector, &mut |_| {});
    let projector_digest_matches = projector_view.chain.to_string() == projector_digest;

    let analysis = analyse(&entries, jobs, slots);
    let every_task_completed_once = analysis.completed_once(&state, jobs) && engines_ok;
    let divergence = replay_report.not_verified(&[]).first().map(ToString::to_string);
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
        raw_read_msgs_per_s,
        read_share_of_raw: entries.len() as f64 / read_seconds.max(1e-9) / raw_read_msgs_per_s.max(1e-9),
        replay_seconds,
        batches_verified: replay_report.batches_verified,
        divergence,
        digest: state.chain.to_string(),
        projector_digest_matches,
        ok,
    };
    Ok(ReadBack { entries, log_bytes, analysis, verify })
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
    tempdir_in(&std::env::temp_dir(), what)
}

/// A directory of the bench's own in `parent`, removed when dropped.
fn tempdir_in(parent: &std::path::Path, what: &str) -> anyhow::Result<TempDir> {
    let dir = parent.join(format!("gridfold-bench-{}-{what}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(TempDir(dir))
}
