//! What every networked command shares: finding the broker, publishing an
//! event the way outside publishers must (its UUID as `Nats-Msg-Id`), and
//! asking the projector a question.

use std::time::Duration;

use anyhow::{anyhow, Context as _};
use bytes::Bytes;
use clap::Args;

use crate::core::event::{Envelope, Event};
use crate::log::jetstream::{JetStreamLog, LogConfig};
use crate::log::{Append, EventLog};
use crate::wire;

/// Where the broker is: `--nats`, else `NATS_URL`, else the local default.
#[derive(Debug, Clone, Args)]
pub struct NatsArgs {
    /// The NATS broker, with JetStream enabled.
    #[arg(long = "nats", env = "NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub url: String,
}

fn unreachable_hint(url: &str) -> String {
    format!("cannot reach the NATS broker at {url}: is nats-server (2.11 or later, with -js) running there? Set --nats or NATS_URL")
}

pub async fn connect_log(nats: &NatsArgs) -> anyhow::Result<JetStreamLog> {
    JetStreamLog::connect(&nats.url, LogConfig::default()).await.with_context(|| unreachable_hint(&nats.url))
}

/// Publishes one event as an outside client would; returns its log sequence.
pub async fn publish<L: EventLog>(log: &L, source: &str, event: Event) -> anyhow::Result<u64> {
    let id = uuid::Uuid::new_v4();
    let subject = wire::subject_for(&event);
    let envelope = Envelope { id: *id.as_bytes(), source: source.to_string(), event };
    let append = Append::new(subject, Bytes::from(wire::encode(&envelope))).with_msg_id(id.to_string());
    let appended = log.append(append).await.context("publishing the event")?;
    Ok(appended.seq)
}

/// Asks the projector (request/reply on `gridfold.q.*`) and decodes its JSON answer.
pub async fn ask<Q: serde::Serialize, A: serde::de::DeserializeOwned>(
    nats: &NatsArgs,
    subject: &str,
    question: &Q,
) -> anyhow::Result<A> {
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(&nats.url)
        .await
        .with_context(|| unreachable_hint(&nats.url))?;
    let payload = serde_json::to_vec(question)?;
    let reply = tokio::time::timeout(Duration::from_secs(10), client.request(subject.to_string(), payload.into()))
        .await
        .map_err(|_| anyhow!("no projector answered on {subject} within 10 s: is `gridfold projector` running against {}?", nats.url))?
        .map_err(|e| anyhow!("no projector answered on {subject}: {e}; is `gridfold projector` running against {}?", nats.url))?;
    serde_json::from_slice(&reply.payload).with_context(|| format!("the projector's answer on {subject} does not decode"))
}

/// One current-thread runtime per command: the CLI does one thing at a time.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime starts")
        .block_on(future)
}
