//! The simulated engines (see the module doc of `bench`): one task for all of
//! them on a thread of its own, and the progress they share with the reporter.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use async_nats::jetstream::consumer::{AckPolicy, DeliverPolicy, ReplayPolicy, pull};
use async_nats::jetstream::{self as js};
use futures::StreamExt as _;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::SimReport;
use super::cpu::thread_cpu_us;
use super::pipeline::{Acked, Pipeline, connect_client};
use super::workload::{engine_props, reports};
use crate::core::event::{Envelope, Event, REPORTS_PER_BATCH_MAX};
use crate::core::ids::{EngineId, TaskRef};
use crate::engine::{msg_id, report_batch, session_event_id};
use crate::log::connect::BrokerAccess;
use crate::log::jetstream::{JetStreamLog, LogConfig, STREAM_ORDERS};
use crate::log::{Append, EventLog};
use crate::projector::service::ProjectorHandle;
use crate::projector::service::sink::ORDER_SUBJECT_PREFIX;
use crate::wire;
use crate::wire::delivery::{DeliveryKind, decode_deliveries};

/// Progress shared with the reporter: completions acknowledged, with their log sequences.
#[derive(Debug, Default)]
pub(super) struct Progress {
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
    pub(super) fn completions(&self) -> u64 {
        self.completion_seqs.lock().expect("not poisoned").stored
    }
    /// Completions stored at or before `seq`; the sequences asked about only grow
    /// (a projector's folded sequence), a smaller one answers as the largest asked.
    pub(super) fn completions_through(&self, seq: u64) -> u64 {
        let mut seqs = self.completion_seqs.lock().expect("not poisoned");
        while seqs.pending.front().is_some_and(|&s| s <= seq) {
            seqs.pending.pop_front();
            seqs.counted += 1;
        }
        seqs.counted
    }
    pub(super) fn last_completion_seq(&self) -> u64 {
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
            move |seq: u64, completions: u32| {
                let mut seqs = progress.completion_seqs.lock().expect("not poisoned");
                for _ in 0..completions {
                    seqs.push(seq);
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
                let subject = wire::default_subject(&event);
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
            report.delivery_messages += 1;
            let Some((engine, _slots)) = self.engines.get(name) else {
                report.other_deliveries += 1;
                continue;
            };
            report.delivery_bytes += message.payload.len() as u64;
            let deliveries = decode_deliveries(engine, &message.payload)
                .map_err(|err| anyhow!("a delivery on {subject} does not decode: {err}"))?;
            // What one message brought leaves as one message, as with a real engine
            // whose reports pile up while its previous publish is acknowledged.
            let mut batch = Vec::new();
            for delivery in deliveries {
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
                if batch.len() + 2 > REPORTS_PER_BATCH_MAX {
                    self.publish_reports(engine, std::mem::take(&mut batch), &mut report).await?;
                }
                batch.extend(reports(engine, &run.task, run.attempt, delivery.batch_seq));
            }
            self.publish_reports(engine, batch, &mut report).await?;
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

impl Simulator {
    /// Publishes one engine's reports: alone, or as one batch of them.
    async fn publish_reports(
        &self,
        engine: &EngineId,
        mut reports: Vec<Envelope>,
        report: &mut SimReport,
    ) -> anyhow::Result<()> {
        let completions = reports
            .iter()
            .filter(|r| matches!(r.event, Event::TaskCompleted { .. }))
            .count() as u32;
        report.reports_published += reports.len() as u64;
        let envelope = match reports.len() {
            0 => return Ok(()),
            1 => reports.pop().expect("one report"),
            _ => report_batch(engine, reports),
        };
        report.report_messages += 1;
        let subject = wire::default_subject(&envelope.event);
        let payload = Bytes::from(wire::encode(&envelope));
        self.pipeline.send(subject, payload, &msg_id(&envelope), completions).await
    }
}

/// The simulated engines, running on a thread of their own.
pub(super) struct SimHandle {
    pub(super) login_seq: u64,
    pub(super) progress: Arc<Progress>,
    pub(super) done: oneshot::Receiver<anyhow::Result<SimReport>>,
}

/// Starts the simulated engines on a thread with a current-thread runtime of its own
/// (so their CPU time, connections included, can be told apart from the projector's),
/// logs them in and returns once the logins are stored.
pub(super) async fn spawn_simulator(
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

/// Prints a progress line a second on stderr (unless `quiet`) until aborted.
pub(super) fn spawn_progress(
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
