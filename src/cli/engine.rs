//! `gridfold engine`: one engine agent on a NATS JetStream broker, until SIGTERM or SIGINT.
//! It binds to the streams the projector made (waiting for them a while at start)
//! and never creates one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::core::ids::EngineId;
use crate::engine::{EngineConfig, JetStreamOrderFeed, probe, run_engine};
use crate::log::library_store::LibraryStore;
use crate::log::jetstream::{JetStreamLog, LogConfig, StreamSetup};

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct EngineArgs {
    /// An operator's command about an engine, instead of running one.
    #[command(subcommand)]
    pub admin: Option<super::ops::EngineAdmin>,
    #[command(flatten)]
    pub nats: super::client::NatsArgs,
    /// This engine's id: 1 to 64 of [A-Za-z0-9_-], not starting with '-'; it names its subjects and its durable consumer.
    #[arg(long, required = true, value_parser = parse_engine_id)]
    pub name: Option<EngineId>,
    /// How many slots to offer: the most task slots running at once.
    /// For a gateway: the most remote jobs it holds at once [default: 64].
    #[arg(long, required_unless_present = "gateway", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::engine::SLOTS_MAX)))]
    pub slots: Option<u32>,
    /// A property to log in with, KEY=VALUE (repeatable): custom (`type=blade`), or one of
    /// os, arch, cores, memory_mb, disk_mb, mflops, site to replace the measured value.
    #[arg(long = "prop", value_name = "KEY=VALUE", value_parser = probe::parse_prop)]
    pub props: Vec<(String, String)>,
    /// Where attempts run, each in <work-dir>/<job>/<index>-<attempt> [default: <temp dir>/gridfold-engine-<name>].
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Grid libraries this engine holds, one <library-dir>/<name>/<version>/ directory each,
    /// counted once it holds a `.synced` file; reported at login. Libraries the projector
    /// asks for are fetched from the broker's object store into it [default: <work-dir>/libraries].
    #[arg(long)]
    pub library_dir: Option<PathBuf>,
    /// How long the first task report of a message waits for company (ms):
    /// what comes meanwhile leaves in the same message. 0 sends each at once;
    /// at most 1,000.
    #[arg(long, default_value_t = crate::engine::REPORT_WINDOW_DEFAULT_MS, value_parser = clap::value_parser!(u64).range(0..=crate::engine::REPORT_WINDOW_MAX_MS))]
    pub report_window_ms: u64,
    /// Attempts' directories made ahead of need by a thread of low priority,
    /// so that a start renames one instead of waiting for a `mkdir`; at most
    /// 256. 0: no thread, each start makes its own [default: twice the slots].
    #[arg(long, value_parser = clap::value_parser!(u16).range(0..=crate::engine::DIRS_AHEAD_MAX as i64))]
    pub dirs_ahead: Option<u16>,
    /// Seconds between heartbeats.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_secs: u64,
    /// On SIGTERM or SIGINT, how long running tasks may finish before they are killed.
    #[arg(long, default_value_t = 30)]
    pub drain_timeout_secs: u64,
    /// This engine's ceiling on what it stores of each task's stdout and stderr (at most
    /// 1 GiB); each attempt stores up to the smaller of this and the policy's share
    /// its order carries (`[output]` in the policy file); the rest is dropped.
    #[arg(long, default_value_t = crate::engine::OUTPUT_BYTES_MAX_DEFAULT,
        value_parser = clap::value_parser!(u64).range(1..=crate::engine::OUTPUT_BYTES_MAX_MAX))]
    pub output_bytes_max: u64,
    /// A load sensor program (Grid Engine's `load_sensor`): started once; before each heartbeat
    /// it is sent an empty line and answers `begin`, lines `host:name:value` (or `name:value`),
    /// `end`; its values join the heartbeat's named load values, replacing measured ones.
    #[arg(long, value_name = "PATH")]
    pub load_sensor: Option<PathBuf>,
    #[command(flatten)]
    pub gateway: GatewayArgs,
}

/// Slots of a gateway engine without `--slots`: the most remote jobs it holds at once.
pub const GATEWAY_SLOTS_DEFAULT: u32 = 64;

/// `--gateway`: an engine that runs each task as a batch job of a cluster's own
/// resource manager (CiGri's runner), see docs/operators.md, "Gateway engines (Slurm) and flood control".
#[derive(Debug, Args)]
pub struct GatewayArgs {
    /// Run each task as a batch job of this resource manager instead of as a local process: slurm.
    #[arg(long, value_name = "KIND", value_parser = crate::engine::gateway::GatewayKind::parse)]
    pub gateway: Option<crate::engine::gateway::GatewayKind>,
    /// The cluster this gateway submits to: logged in as the property `cluster=<NAME>`
    /// (CiGri's cluster: the engines sharing it) [default: the engine's name].
    #[arg(long, value_name = "NAME", requires = "gateway")]
    pub cluster: Option<String>,
    /// The Slurm partition of every job [default: the cluster's default].
    #[arg(long, requires = "gateway")]
    pub partition: Option<String>,
    /// The Slurm account of every job [default: the user's default].
    #[arg(long, requires = "gateway")]
    pub account: Option<String>,
    /// The slurm.conf the Slurm commands use (SLURM_CONF) [default: Slurm's own].
    #[arg(long, value_name = "PATH", requires = "gateway")]
    pub slurm_conf: Option<PathBuf>,
    /// Milliseconds between two polls of the resource manager (one squeue for all jobs).
    #[arg(long, default_value_t = crate::engine::gateway::POLL_INTERVAL_DEFAULT.as_millis() as u64,
        value_parser = clap::value_parser!(u64).range(50..=600_000))]
    pub poll_interval_ms: u64,
}

impl GatewayArgs {
    /// The gateway's configuration, and the properties it logs in with
    /// (`cluster`, `gateway`), or `None` for an ordinary engine.
    fn config(&self, name: &EngineId) -> Option<(crate::engine::gateway::GatewayConfig, [(String, String); 2])> {
        let kind = self.gateway?;
        let cluster = self.cluster.clone().unwrap_or_else(|| name.to_string());
        let config = crate::engine::gateway::GatewayConfig {
            kind,
            partition: self.partition.clone(),
            account: self.account.clone(),
            slurm_conf: self.slurm_conf.clone(),
            poll_interval: Duration::from_millis(self.poll_interval_ms),
        };
        Some((config, [("cluster".to_string(), cluster), ("gateway".to_string(), kind.as_str().to_string())]))
    }
}

/// Binds to the log and opens this engine's order feed. An engine never creates a
/// stream (on a broker with permissions it may not): while the projector (or
/// `gridfold setup`) has not made them yet, it waits, up to `--wait-streams-secs`,
/// saying so once. A broker that does not answer (not started yet, restarting,
/// electing its leaders) is tried again for as long as it takes, with a bounded
/// back-off and a line each time ([`super::client::open_patiently`]); one that
/// refuses the engine's credentials is not.
async fn open_log_and_feed(
    nats: &super::client::NatsArgs,
    name: &EngineId,
) -> anyhow::Result<(JetStreamLog, JetStreamOrderFeed)> {
    let patience = super::client::Patience::service(nats);
    super::client::open_patiently(nats, patience, || async {
        let log = super::client::connect_log_with(nats, LogConfig { streams: StreamSetup::Bind, ..LogConfig::default() })
            .await?;
        let feed = JetStreamOrderFeed::open(&log, name)
            .await
            .with_context(|| format!("cannot open the order feed of engine {name} at {}", nats.url))?;
        anyhow::Ok((log, feed))
    })
    .await
}

fn stopped_before_login(name: &EngineId, signal: &str) -> anyhow::Result<ExitCode> {
    eprintln!("gridfold engine {name}: {signal} before reaching the broker: stopped, nothing was running");
    Ok(ExitCode::SUCCESS)
}

fn parse_engine_id(text: &str) -> Result<EngineId, String> {
    EngineId::new(text).map_err(|err| err.to_string())
}

pub fn run(mut args: EngineArgs) -> anyhow::Result<ExitCode> {
    if let Some(admin) = args.admin.take() {
        return super::ops::engine_admin(admin);
    }
    // One thread, as the projector's (see `cli/projector.rs`): the agent's loop,
    // its publisher and the runs' supervisors only wait; processes start from
    // the spawner thread and, with --dirs-ahead, attempts' directories are made
    // by their own thread (`engine::fresh_dirs`), neither of them a runtime thread.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: EngineArgs) -> anyhow::Result<ExitCode> {
    use tokio::signal::unix::{SignalKind, signal};
    // Take the signals first, so a SIGTERM while connecting drains instead of killing.
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let name = args.name.clone().context("--name is required to run an engine")?;
    let gateway = args.gateway.config(&name);
    let slots = match (args.slots, &gateway) {
        (Some(slots), _) => slots,
        (None, Some(_)) => GATEWAY_SLOTS_DEFAULT,
        (None, None) => anyhow::bail!("--slots is required to run an engine"),
    };

    let work_dir = args
        .work_dir
        .unwrap_or_else(|| std::env::temp_dir().join(format!("gridfold-engine-{}", name)));
    let mut given_props: BTreeMap<String, String> = args.props.into_iter().collect();
    let gateway = gateway.map(|(config, props)| {
        given_props.extend(props);
        config
    });
    let defaults = EngineConfig::new(name.clone(), slots, work_dir);
    let config = EngineConfig {
        given_props,
        heartbeat_interval: Duration::from_secs(args.heartbeat_secs),
        drain_timeout: Duration::from_secs(args.drain_timeout_secs),
        report_window: Duration::from_millis(args.report_window_ms),
        dirs_ahead: args.dirs_ahead.map_or(defaults.dirs_ahead, usize::from),
        library_dir: args.library_dir.unwrap_or_else(|| defaults.library_dir.clone()),
        output_bytes_max: args.output_bytes_max,
        work_dir_retention: crate::engine::WORK_DIR_RETENTION_DEFAULT,
        load_sensor: args.load_sensor,
        gateway,
        ..defaults
    };
    // Waiting for the broker may take long: a signal meanwhile ends the engine at once
    // (it holds no task yet).
    let (log, feed) = tokio::select! {
        opened = open_log_and_feed(&args.nats, &name) => opened?,
        _ = sigterm.recv() => return stopped_before_login(&name, "SIGTERM"),
        _ = sigint.recv() => return stopped_before_login(&name, "SIGINT"),
    };
    let config = EngineConfig {
        library_store: Some(LibraryStore::new(log.context().clone())),
        output_store: Some(crate::log::output_store::OutputStore::new(log.context().clone())),
        ..config
    };
    if let Some(gateway) = &config.gateway {
        eprintln!(
            "gridfold engine {}: a {} gateway for cluster {}",
            name,
            gateway.kind.as_str(),
            config.given_props.get("cluster").map_or("", String::as_str)
        );
    }
    eprintln!(
        "gridfold engine {}: {} slot(s), broker {}, work dir {}, library dir {}",
        name,
        config.slots,
        args.nats.url,
        config.work_dir.display(),
        config.library_dir.display()
    );
    let shutdown = async move {
        let name = tokio::select! {
            _ = sigterm.recv() => "SIGTERM",
            _ = sigint.recv() => "SIGINT",
        };
        eprintln!(
            "gridfold engine: {name}: taking no more work, draining for up to {} s",
            args.drain_timeout_secs
        );
    };
    let report = run_engine(config, log, feed, shutdown)
        .await
        .with_context(|| format!("engine {}", name))?;
    eprintln!(
        "gridfold engine {}: logged out; {} started, {} completed, {} failed, {} stopped on order, {} stopped at shutdown",
        name,
        report.started,
        report.completed,
        report.failed,
        report.stopped_on_order,
        report.stopped_at_shutdown
    );
    Ok(ExitCode::SUCCESS)
}
