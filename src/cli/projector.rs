//! `gridfold projector`: the single writer, on NATS JetStream. A thin shell over
//! [`crate::projector::service`]: connect, make the streams and the lease bucket,
//! answer queries, run until SIGINT or SIGTERM, print what it did.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::log::jetstream::LogConfig;
use crate::projector::key::ProjectorKey;
use crate::projector::service::{
    JetStreamOrderSink, KvLease, KvLeaseConfig, Projector, ProjectorConfig, ProjectorIdClaim,
    spawn_query_responder,
};

#[derive(Debug, Args)]
pub struct ProjectorArgs {
    #[command(flatten)]
    pub nats: super::client::NatsArgs,
    /// Replicas of the streams and the lease bucket this projector creates: 1 on a
    /// single server, 3 on a three-node cluster (the log then survives losing a node).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=5))]
    pub replicas: u64,
    /// The projector's own directory: snapshots and its projector id. One projector per directory.
    #[arg(long)]
    pub state: PathBuf,
    /// Decide at least every this many entries folded, even while catching up.
    #[arg(long, default_value_t = 10_000)]
    pub schedule_every: u64,
    /// The coalescing window, in milliseconds: once it has read the log to its
    /// end, the projector waits this long after the first entry it has not yet
    /// decided on (or until 64 wait) before deciding, so that tasks ending
    /// together are decided on, published and delivered at once. 0 (the
    /// default) decides at once; at most 1,000.
    #[arg(long, default_value_t = crate::projector::service::DECIDE_WINDOW_DEFAULT_MS, value_parser = clap::value_parser!(u64).range(0..=1_000))]
    pub decide_window_ms: u64,
    /// Snapshot after this many entries folded since the last snapshot.
    #[arg(long, default_value_t = 50_000)]
    pub snapshot_every: u64,
    /// Snapshot this many seconds after the last one, if entries were folded since.
    #[arg(long, default_value_t = 30)]
    pub snapshot_secs: u64,
    /// How long the leader lease outlives a leader that stopped renewing it, in seconds
    /// (the lease bucket's max age, set by whoever creates it).
    #[arg(long, default_value_t = 5)]
    pub lease_secs: u64,
    /// Do not append a Tick every second (another ticker keeps time).
    #[arg(long)]
    pub no_tick: bool,
    /// Check the state's invariants after every entry (slow; for tests).
    #[arg(long, hide = true)]
    pub check_invariants: bool,
    /// Register this projector's key on the log itself when the log does not hold
    /// it (for a one-machine grid; where the broker enforces roles an operator
    /// registers it with `gridfold key register`).
    #[arg(long)]
    pub register_key: bool,
    /// The file holding this projector's key seed (64 hex digits); default
    /// `<state>/projector-key`, made on first start.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
    /// How long the broker keeps tasks' stored output, in seconds (applied when
    /// this projector makes the output bucket; engines never make it).
    #[arg(long, default_value_t = crate::log::output_store::RETENTION_DEFAULT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub output_retention_secs: u64,
}

pub fn run(args: ProjectorArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.lease_secs >= 2,
        "--lease-secs must be at least 2 (the lease is renewed every second)"
    );
    anyhow::ensure!(
        args.schedule_every > 0 && args.snapshot_every > 0,
        "--schedule-every and --snapshot-every must be positive"
    );
    // One thread: the projector is one loop, and its reader, publishing and
    // delivery tasks only wait on the broker. On a multi-threaded runtime they
    // woke each other across threads at every entry (a quarter of its CPU in
    // futex and scheduler time); on one thread its CPU per real task fell from
    // about 150 to 70-95 µs, the broker's from about 250 to 125-175 µs (fewer,
    // fuller writes), in `gridfold bench --real` (docs/performance.md).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: ProjectorArgs) -> anyhow::Result<ExitCode> {
    // Installed first: a signal during start-up stops the projector cleanly once it runs.
    let shutdown = shutdown_signal().context("installing the SIGINT and SIGTERM handlers")?;
    let log_config = LogConfig { replicas: args.replicas as usize, ..LogConfig::default() };
    let lease_config = KvLeaseConfig {
        ttl: Duration::from_secs(args.lease_secs),
        replicas: args.replicas as usize,
        ..KvLeaseConfig::default()
    };
    // The projector makes the streams and the lease bucket (StreamSetup::CreateOrCheck),
    // raising the replicas of any made with fewer; a broker that does not answer yet
    // (starting, electing its leaders) is tried again until it does.
    let patience = super::client::Patience::service(&args.nats);
    let (log, sink, lease) = super::client::open_patiently(&args.nats, patience, || async {
        let log = super::client::connect_log_with(&args.nats, log_config.clone())
            .await
            .context("opening the event log")?;
        let sink = JetStreamOrderSink::connect(&log)
            .await
            .context("opening the orders stream")?;
        // A bucket of another's making stops the projector; one the broker cannot
        // make (a disk too small for its 10 GiB reservation) only stores no output.
        match crate::log::output_store::OutputStore::new(log.context().clone())
            .ensure_bucket(Duration::from_secs(args.output_retention_secs))
            .await
        {
            Err(unfit @ crate::log::output_store::OutputError::Unfit(_)) => return Err(anyhow::Error::new(unfit)),
            Err(error) => tracing::warn!("tasks' output will not be stored: {error}"),
            Ok(()) => {}
        }
        // Held until the process ends: proof that a lease left under this id is a dead run's.
        let claim = ProjectorIdClaim::claim(&args.state).context("claiming the state directory")?;
        let lease = KvLease::open_claimed(log.context(), log.url(), lease_config.clone(), claim).await?;
        anyhow::Ok((log, sink, lease))
    })
    .await?;
    let holder = lease.holder().to_string();
    let config = ProjectorConfig {
        schedule_every_entries: args.schedule_every,
        decide_window: Duration::from_millis(args.decide_window_ms),
        snapshot_every_entries: args.snapshot_every,
        snapshot_interval: Duration::from_secs(args.snapshot_secs.max(1)),
        tick_interval: (!args.no_tick).then_some(Duration::from_secs(1)),
        check_invariants: args.check_invariants,
        register_key: args.register_key,
        key: match &args.key_file {
            Some(path) => Some(ProjectorKey::read(path)?),
            None => Some(ProjectorKey::load_or_create(&args.state)?),
        },
        ..ProjectorConfig::new(&args.state)
    };
    let key = config.key.as_ref().map(ProjectorKey::public_hex).unwrap_or_default();
    let projector = Projector::new(config, log.clone(), sink, lease);
    let responder = spawn_query_responder(log.context().client(), projector.handle())
        .await
        .context("subscribing to the query subjects")?;
    tracing::info!(nats = %args.nats.url, projector_id = %holder, key = %key, "gridfold projector");
    let result = projector.run(shutdown).await;
    responder.abort();
    let report = result.context("the projector stopped")?;
    println!(
        "projector stopped: folded through sequence {} (digest {}), {} entries folded, {} batches published, {} deliveries sent, {} snapshots",
        report.last_seq,
        report.chain_digest,
        report.entries_folded,
        report.batches_published,
        report.deliveries_sent,
        report.snapshots_written
    );
    Ok(ExitCode::SUCCESS)
}

/// Installs the handlers now; the future completes on the first SIGINT or SIGTERM.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT: stopping"),
            _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
        }
    })
}
