//! The pipelined publisher the simulated engines report through, and the raw
//! JetStream publish rate measured with it on a stream of its own.

use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, pull};
use async_nats::jetstream::context::PublishAckFuture;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{self, StorageType};
use async_nats::jetstream::{self as js};
use bytes::Bytes;
use futures::StreamExt as _;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::RawPublish;
use super::cpu::{cpu_ticks_of_pid, ticks_to_us};
use crate::log::connect::BrokerAccess;

/// Publishes with up to `window` acks in flight: the publisher queues each ack future,
/// a task of its own awaits them in order, so no publish ever waits for its own ack.
pub(super) struct Pipeline {
    pub(super) context: js::Context,
    pub(super) acks: mpsc::Sender<(PublishAckFuture, u32)>,
}

/// What the ack task saw.
#[derive(Debug, Default)]
pub(super) struct Acked {
    pub(super) messages: u64,
    pub(super) duplicates: u64,
}

impl Pipeline {
    pub(super) async fn connect(
        access: &BrokerAccess,
        window: usize,
        on_ack: impl FnMut(u64, u32) + Send + 'static,
    ) -> anyhow::Result<(Pipeline, JoinHandle<anyhow::Result<Acked>>)> {
        let client = connect_client(access, "gridfold-bench-engines").await?;
        let context = js::ContextBuilder::new()
            .timeout(Duration::from_secs(10))
            .max_ack_inflight(window + 1)
            .backpressure_on_inflight(true)
            .build(client);
        let (acks, mut rx) = mpsc::channel::<(PublishAckFuture, u32)>(window);
        let mut on_ack = on_ack;
        let task = tokio::spawn(async move {
            let mut acked = Acked::default();
            while let Some((ack, completions)) = rx.recv().await {
                let ack = ack
                    .await
                    .map_err(|err| anyhow!("a publish was not acknowledged: {err}"))?;
                acked.messages += 1;
                acked.duplicates += u64::from(ack.duplicate);
                on_ack(ack.sequence, completions);
            }
            Ok(acked)
        });
        Ok((Pipeline { context, acks }, task))
    }

    /// Sends one message; `completions` (how many task completions it carries)
    /// is handed back to the ack callback with its sequence.
    pub(super) async fn send(
        &self,
        subject: String,
        payload: Bytes,
        msg_id: &str,
        completions: u32,
    ) -> anyhow::Result<()> {
        let publish = PublishMessage::build().payload(payload).message_id(msg_id);
        let ack = self
            .context
            .send_publish(subject, publish)
            .await
            .map_err(|err| anyhow!("publishing: {err}"))?;
        self.acks
            .send((ack, completions))
            .await
            .map_err(|_| anyhow!("the ack task stopped (a publish failed)"))
    }
}

/// A connection of the bench's own, with the bench's credentials and TLS.
pub(super) async fn connect_client(access: &BrokerAccess, name: &str) -> anyhow::Result<async_nats::Client> {
    let (client, _refusals) = access
        .connect(name, Duration::from_secs(5))
        .await
        .with_context(|| format!("connecting to {}", access.url))?;
    Ok(client)
}

pub(super) async fn measure_raw_publish(
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
                0,
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

/// The machine's raw read rate of a stream: every message from sequence 1 to
/// `end_seq` through a bare pull consumer fetching batches of 10,000 without
/// acks (NATS.md's fastest way to read), counted and dropped. The log reader
/// replay uses does the same and more (ordering checks, metadata, copies); this
/// is the rate it is measured against.
pub(super) async fn measure_raw_read(access: &BrokerAccess, stream: &str, end_seq: u64) -> anyhow::Result<f64> {
    let client = connect_client(access, "gridfold-bench-raw-read").await?;
    let context = js::new(client);
    let stream = context
        .get_stream(stream)
        .await
        .map_err(|err| anyhow!("getting stream {stream}: {err}"))?;
    let consumer = stream
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::All,
            ack_policy: AckPolicy::None,
            replay_policy: ReplayPolicy::Instant,
            memory_storage: true,
            inactive_threshold: Duration::from_secs(60),
            description: Some("gridfold bench: the raw read rate".into()),
            ..Default::default()
        })
        .await
        .map_err(|err| anyhow!("creating the raw reader: {err}"))?;
    let started = Instant::now();
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(10_000)
        .expires(Duration::from_secs(10))
        .messages()
        .await
        .map_err(|err| anyhow!("reading raw: {err}"))?;
    let mut read = 0u64;
    while read < end_seq {
        let message = tokio::time::timeout(Duration::from_secs(30), messages.next())
            .await
            .map_err(|_| anyhow!("the raw read stalled at {read} of {end_seq} messages"))?
            .ok_or_else(|| anyhow!("the raw read ended at {read} of {end_seq} messages"))?
            .map_err(|err| anyhow!("reading raw: {err}"))?;
        std::hint::black_box(&message.payload);
        read += 1;
    }
    let msgs_per_s = read as f64 / started.elapsed().as_secs_f64().max(1e-9);
    drop(messages);
    let name = consumer.cached_info().name.clone();
    let _ = stream.delete_consumer(&name).await;
    Ok(msgs_per_s)
}
