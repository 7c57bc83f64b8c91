//! `gridfold setup`: an operator makes the streams, the lease bucket and the
//! output and library buckets before anything else runs, with the replicas the
//! broker should keep (3 on a three-node cluster), as the projector would at
//! its start. Nothing else makes them: engines and commands wait for them, and
//! refuse any stream of another's making (`crate::log::stream_check`). Run
//! again, it raises the replicas of any made with fewer and changes nothing else.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use super::client::{NatsArgs, Patience, block_on, connect_log_with, open_patiently};
use crate::log::jetstream::{LogConfig, STREAM_EVENTS, STREAM_ORDERS};
use crate::projector::service::lease::LEASE_BUCKET;
use crate::projector::service::{KvLease, KvLeaseConfig};

#[derive(Debug, Args)]
pub struct SetupArgs {
    #[command(flatten)]
    pub nats: NatsArgs,
    /// Replicas of the streams and the lease bucket: 1 on a single server, 3 on a
    /// three-node cluster (the log then survives losing a node). Give the projector the same.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=5))]
    pub replicas: u64,
    /// How long the leader lease outlives a projector that stopped renewing it, in
    /// seconds (the lease bucket's max age; only used when this makes the bucket).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(2..=3600))]
    pub lease_secs: u64,
    /// Seconds to keep trying a broker that does not answer yet (a cluster starting,
    /// electing its leaders) before giving up.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub wait_broker_secs: u64,
    /// How long the broker keeps tasks' stored output, in seconds (applied when
    /// this makes the output bucket).
    #[arg(long, default_value_t = crate::log::output_store::RETENTION_DEFAULT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub output_retention_secs: u64,
    /// Print what was made as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A stream or bucket as `setup` left it.
#[derive(Debug, serde::Serialize)]
struct Made {
    stream: String,
    replicas: usize,
}

pub fn run(args: SetupArgs) -> anyhow::Result<ExitCode> {
    block_on(async move {
        let replicas = usize::try_from(args.replicas).context("--replicas")?;
        let log_config = LogConfig { replicas, ..LogConfig::default() };
        let lease_config = KvLeaseConfig {
            ttl: Duration::from_secs(args.lease_secs),
            replicas,
            ..KvLeaseConfig::default()
        };
        let patience = Patience {
            streams_wait: Duration::ZERO,
            broker_wait: Duration::from_secs(args.wait_broker_secs),
            unanswered_wait: Duration::from_secs(args.wait_broker_secs).max(super::client::COMMAND_UNANSWERED_WAIT),
        };
        let log = open_patiently(&args.nats, patience, || async {
            let log = connect_log_with(&args.nats, log_config.clone()).await?;
            log.ensure_order_stream().await?;
            KvLease::open(log.context(), log.url(), lease_config.clone(), "gridfold-setup".to_string()).await?;
            // The buckets too, so that no engine ever needs to make one. One of
            // another's making stops setup; an output bucket the broker cannot
            // make (a disk too small for its reservation) only stores no output.
            match crate::log::output_store::OutputStore::new(log.context().clone())
                .ensure_bucket(Duration::from_secs(args.output_retention_secs))
                .await
            {
                Err(unfit @ crate::log::output_store::OutputError::Unfit(_)) => return Err(anyhow::Error::new(unfit)),
                Err(error) => tracing::warn!("tasks' output will not be stored: {error}"),
                Ok(()) => {}
            }
            crate::log::library_store::LibraryStore::new(log.context().clone()).ensure_bucket().await?;
            anyhow::Ok(log)
        })
        .await
        .context("setting up the streams and the lease bucket")?;
        let mut made = Vec::new();
        let output = format!("OBJ_{}", crate::log::output_store::BUCKET);
        let buckets = [format!("KV_{LEASE_BUCKET}"), output.clone(), format!("OBJ_{}", crate::log::library_store::BUCKET)];
        for stream in [STREAM_EVENTS.to_string(), STREAM_ORDERS.to_string()].into_iter().chain(buckets) {
            let handle = log.context().get_stream(&stream).await;
            // The output bucket may not have been made (said above).
            if handle.is_err() && stream == output {
                continue;
            }
            let mut handle = handle.with_context(|| format!("reading stream {stream}"))?;
            let info = handle.info().await.with_context(|| format!("reading stream {stream}"))?;
            made.push(Made { stream, replicas: info.config.num_replicas });
        }
        if args.json {
            println!("{}", serde_json::json!({ "nats": args.nats.url, "streams": made }));
        } else {
            for Made { stream, replicas } in &made {
                println!("{stream}: {replicas} replica(s)");
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
