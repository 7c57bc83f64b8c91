//! The projector service against a real nats-server (each test starts its own; a
//! test FAILS if none can be started). Engines are simulated here: each reads its
//! deliveries from `GRIDFOLD_ORDERS` with a durable consumer on
//! `gridfold.order.<engine>`, acks them, ignores an id it has seen, and answers a Run
//! with TaskStarted then TaskCompleted on its own subjects.
//!
//! - [`a_projector_runs_a_job_to_completion_each_task_once`] (a)
//! - [`a_killed_projector_process_restarts_from_its_snapshot_and_agrees_with_a_replay`] (b, SIGKILL and SIGTERM)
//! - [`a_corrupt_snapshot_is_ignored_and_the_state_rebuilt`] (c)
//! - [`a_standby_takes_over_when_the_leader_stops_or_dies`] (d)
//! - [`a_new_leader_delivers_what_the_old_one_published_but_did_not_deliver`] (d, takeover)
//! - [`stat_and_why_answer_over_nats`] (e)

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{AckPolicy, pull};
use futures::StreamExt;
use gridfold::core::digest::Digest;
use gridfold::core::event::{Envelope, Event, Order};
use gridfold::core::ids::{Seq, TaskRef};
use gridfold::core::replay::{ReplayOptions, replay};
use gridfold::core::state::State;
use gridfold::core::testkit::{engine_id, job_spec, linux_props};
use gridfold::log::jetstream::{JetStreamLog, LogConfig, STREAM_ORDERS};
use gridfold::log::nats_server::NatsServer;
use gridfold::log::{Append, EventLog, read_to_end};
use gridfold::projector::machine::Machine;
use gridfold::projector::query::{STAT_SUBJECT, StatRequest, StateSummary, WHY_SUBJECT};
use gridfold::projector::record::batch_envelope;
use gridfold::projector::service::{
    JetStreamOrderSink, KvLease, KvLeaseConfig, Lease, Projector, ProjectorConfig, ProjectorHandle,
    ProjectorReport, ProjectorStatus, SnapshotStore, StartPoint, spawn_query_responder,
};
use gridfold::wire::delivery::{DeliveryKind, decode_deliveries, order_subject};
use gridfold::wire::{self, ORDERS_SUBJECT};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Any wait in these tests; a hang is a failure with what was seen.
const DEADLINE: Duration = Duration::from_secs(25);

// ---- helpers --------------------------------------------------------------------

async fn connect(server: &NatsServer) -> JetStreamLog {
    JetStreamLog::connect(&server.url(), LogConfig::default())
        .await
        .expect("connect to the test nats-server")
}

async fn publish(log: &JetStreamLog, event: Event) {
    let envelope = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: "test".into(),
        event,
    };
    let append = Append::new(wire::default_subject(&envelope.event), wire::encode(&envelope))
        .with_msg_id(hex::encode(envelope.id));
    log.append(append).await.expect("append an event");
}

/// Logs in `engines` (2 slots each) and submits job `job` of `tasks` tasks.
async fn grid(log: &JetStreamLog, engines: &[&str], job: &str, tasks: u32) {
    for engine in engines {
        publish(
            log,
            Event::EngineLoggedIn {
                engine: engine_id(engine),
                slots: 2,
                props: linux_props("lyon", 8192),
            },
        )
        .await;
    }
    publish(log, Event::JobSubmitted(job_spec(job, tasks, ""))).await;
}

/// What the simulated engines were asked to run, in the order they ran it.
type Runs = Arc<Mutex<Vec<(TaskRef, u32)>>>;

/// Engines "e1" then "e2" of [`spawn_engine`], each running every task for `work`.
async fn spawn_e1_and_e2(log: &JetStreamLog, work: Duration, runs: &Runs) -> [JoinHandle<()>; 2] {
    [
        spawn_engine(log, "e1", work, runs.clone()).await,
        spawn_engine(log, "e2", work, runs.clone()).await,
    ]
}

/// An engine: durable consumer on its order subject, acks, ignores seen ids, runs each task for `work`.
async fn spawn_engine(
    log: &JetStreamLog,
    engine: &str,
    work: Duration,
    runs: Runs,
) -> JoinHandle<()> {
    log.ensure_order_stream().await.expect("the orders stream");
    let stream = log
        .context()
        .get_stream(STREAM_ORDERS)
        .await
        .expect("the orders stream");
    let consumer = stream
        .create_consumer(pull::Config {
            durable_name: Some(format!("engine-{engine}")),
            filter_subject: order_subject(&engine_id(engine)),
            ack_policy: AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .expect("an engine's consumer");
    let log = log.clone();
    let engine = engine_id(engine);
    tokio::spawn(async move {
        let mut messages = consumer.messages().await.expect("an engine's messages");
        let mut seen = BTreeSet::new();
        while let Some(message) = messages.next().await {
            let message = message.expect("an engine's message");
            let deliveries = decode_deliveries(&engine, &message.payload).expect("deliveries");
            message.ack().await.expect("ack");
            for delivery in deliveries {
                if !seen.insert(delivery.id.clone()) {
                    continue;
                }
                let DeliveryKind::Run(run) = delivery.kind else {
                    continue;
                };
                runs.lock().unwrap().push((run.task.clone(), run.attempt));
                publish(
                    &log,
                    Event::TaskStarted {
                        task: run.task.clone(),
                        attempt: run.attempt,
                        engine: engine.clone(),
                        remote_job: String::new(),
                    },
                )
                .await;
                tokio::time::sleep(work).await;
                let completed = Event::TaskCompleted {
                    task: run.task,
                    attempt: run.attempt,
                    engine: engine.clone(),
                    exit_code: 0,
                    cpu_ms: 1,
                    wall_ms: 1,
                    result: Vec::new(),
                    stored: Default::default(),
                };
                publish(&log, completed).await;
            }
        }
    })
}

fn projector_config(state_dir: &Path) -> ProjectorConfig {
    ProjectorConfig {
        snapshot_every_entries: 20,
        read_wait: Duration::from_millis(200),
        check_invariants: true,
        register_key: true,
        ..ProjectorConfig::new(state_dir)
    }
}

fn lease_config() -> KvLeaseConfig {
    KvLeaseConfig {
        ttl: Duration::from_secs(2),
        renew_interval: Duration::from_millis(400),
        ..KvLeaseConfig::default()
    }
}

/// An in-process projector with its own connection, lease and state directory.
struct Running {
    handle: ProjectorHandle,
    stop: oneshot::Sender<()>,
    task: JoinHandle<Result<ProjectorReport, gridfold::projector::service::ProjectorError>>,
    responder: JoinHandle<()>,
}

impl Running {
    async fn start(server: &NatsServer, config: ProjectorConfig) -> Running {
        let log = connect(server).await;
        let sink = JetStreamOrderSink::connect(&log)
            .await
            .expect("the orders stream");
        let holder = gridfold::projector::service::projector_id(&config.state_dir).unwrap();
        let lease = KvLease::open(log.context(), log.url(), lease_config(), holder)
            .await
            .expect("the lease bucket");
        let projector = Projector::new(config, log.clone(), sink, lease);
        let handle = projector.handle();
        let responder = spawn_query_responder(log.context().client(), handle.clone())
            .await
            .expect("query subjects");
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(projector.run(async move {
            let _ = stopped.await;
        }));
        Running {
            handle,
            stop,
            task,
            responder,
        }
    }

    /// Clean shutdown: snapshot, release the lease, report.
    async fn stop(self) -> ProjectorReport {
        self.stop.send(()).expect("the projector is running");
        let report = self
            .task
            .await
            .expect("the projector task")
            .expect("the projector run");
        self.responder.abort();
        report
    }

    /// A crash: the task is dropped where it stands; the lease is not released.
    async fn kill(self) -> ProjectorStatus {
        self.task.abort();
        self.responder.abort();
        let _ = self.task.await;
        self.handle.status()
    }

    async fn wait_for(
        &self,
        what: &str,
        condition: impl FnMut(&ProjectorStatus) -> bool,
    ) -> ProjectorStatus {
        match tokio::time::timeout(DEADLINE, self.handle.wait_for(condition)).await {
            Ok(Ok(status)) => status,
            Ok(Err(gone)) => panic!("waiting for {what}: {gone}"),
            Err(_) => panic!(
                "waiting for {what}: timed out; status {:?}",
                self.handle.status()
            ),
        }
    }

    async fn wait_done_at_least(&self, tasks: u64) {
        let started = Instant::now();
        while started.elapsed() < DEADLINE {
            if self
                .handle
                .stat(StatRequest::default())
                .await
                .expect("running")
                .tasks_done
                >= tasks
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "waiting for {tasks} tasks done: timed out; status {:?}",
            self.handle.status()
        );
    }

    async fn wait_done(&self, tasks: u64) -> StateSummary {
        wait_stat(&format!("{tasks} tasks done"), tasks, || {
            self.handle.stat(StatRequest::default())
        })
        .await
    }
}

/// Polls a stat until `tasks` are done; fails if more than that are (a task completed twice).
async fn wait_stat<F, E>(what: &str, tasks: u64, mut stat: impl FnMut() -> F) -> StateSummary
where
    F: std::future::Future<Output = Result<StateSummary, E>>,
    E: std::fmt::Debug,
{
    let started = Instant::now();
    let mut last = None;
    while started.elapsed() < DEADLINE {
        if let Ok(summary) = stat().await {
            assert!(
                summary.tasks_done <= tasks,
                "more tasks done than submitted: {summary}"
            );
            if summary.tasks_done == tasks {
                return summary;
            }
            last = Some(summary);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "waiting for {what}: timed out; last stat:\n{}",
        last.map(|s| s.to_string()).unwrap_or_default()
    );
}

/// The chain digest of a clean replay of the log's entries 1..=through.
async fn replayed_digest(log: &JetStreamLog, through: u64) -> Digest {
    let raw = read_to_end(log, 1).await.unwrap().collect().await.unwrap();
    let entries: Vec<_> = raw
        .iter()
        .take_while(|entry| entry.seq <= through)
        .map(|entry| {
            wire::entry_from_log(
                Seq(entry.seq),
                entry.time_ms,
                &entry.subject,
                &entry.payload,
            )
        })
        .collect();
    assert_eq!(
        entries.len() as u64,
        through,
        "the log holds every entry up to {through}"
    );
    let options = ReplayOptions {
        check_invariants: true,
        verify: true,
        ..ReplayOptions::default()
    };
    let (state, report) = replay(State::new(), &entries, &options, &mut |_| {});
    assert_eq!(report.first_divergence, None, "every batch re-derives");
    state.chain
}

/// How often each (task, attempt) was dispatched in the log's order batches, and how many batches there are.
async fn dispatches(log: &JetStreamLog) -> (BTreeMap<(TaskRef, u32), u32>, u64) {
    let raw = read_to_end(log, 1).await.unwrap().collect().await.unwrap();
    let mut counts = BTreeMap::new();
    let mut batches = 0;
    for entry in raw.iter().filter(|entry| entry.subject == ORDERS_SUBJECT) {
        batches += 1;
        let Ok(Envelope {
            event: Event::OrderBatch(batch),
            ..
        }) = wire::decode(&entry.payload)
        else {
            panic!("entry {} on the orders subject is not a batch", entry.seq)
        };
        for order in batch.orders {
            if let Order::Dispatch { task, attempt, .. } = order {
                *counts.entry((task, attempt)).or_default() += 1;
            }
        }
    }
    (counts, batches)
}

/// Each dispatch once, each attempt run once, `tasks` tasks run.
async fn assert_each_task_ran_once(log: &JetStreamLog, runs: &Runs, tasks: usize) {
    let (counts, _) = dispatches(log).await;
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "dispatched more than once: {twice:?}");
    let runs = runs.lock().unwrap().clone();
    let distinct: BTreeSet<_> = runs.iter().collect();
    assert_eq!(distinct.len(), runs.len(), "an attempt ran twice: {runs:?}");
    let distinct_tasks: BTreeSet<_> = runs.iter().map(|(task, _)| task).collect();
    assert_eq!(distinct_tasks.len(), tasks, "{runs:?}");
}

// ---- (a) ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_runs_a_job_to_completion_each_task_once() {
    let server = support::nats::start();
    let log = connect(&server).await;
    let state = tempfile::tempdir().unwrap();
    let runs = Runs::default();
    let engines = spawn_e1_and_e2(&log, Duration::from_millis(5), &runs).await;
    let projector = Running::start(&server, projector_config(state.path())).await;
    grid(&log, &["e1", "e2"], "j", 16).await;
    let summary = projector.wait_done(16).await;
    assert_eq!(summary.jobs[0].status, "done", "{summary}");
    let status = projector.handle.status();
    assert!(status.leader && status.leader_terms >= 1, "{status:?}");
    let report = projector.stop().await;
    assert_eq!(report.started_from, StartPoint::Scratch { reason: None });
    assert!(report.deliveries_sent >= 16, "{report:?}");
    let (_, batches) = dispatches(&log).await;
    assert_eq!(
        report.batches_published, batches,
        "every batch on the log is this projector's"
    );
    assert_each_task_ran_once(&log, &runs, 16).await;
    assert_eq!(
        report.chain_digest,
        replayed_digest(&log, report.last_seq).await
    );
    engines.iter().for_each(JoinHandle::abort);
}

// ---- (b) ------------------------------------------------------------------------

/// A `gridfold projector` child process, its stderr in a file.
struct ProjectorProcess {
    /// `None` once it has been waited for.
    child: Option<Child>,
    stderr_path: std::path::PathBuf,
}

impl ProjectorProcess {
    fn start(server: &NatsServer, state_dir: &Path, name: &str) -> ProjectorProcess {
        let stderr_path = state_dir.with_extension(format!("{name}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
            .args(["projector", "--nats", &server.url(), "--state"])
            .arg(state_dir)
            .args(["--snapshot-every", "15", "--check-invariants", "--register-key"])
            .env("RUST_LOG", "warn,gridfold::projector::service=info")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start gridfold projector");
        ProjectorProcess {
            child: Some(child),
            stderr_path,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGTERM, by its process id, then its exit status and standard output.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let child = self.child.take().expect("running");
        let pid = child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid}");
        let output = child.wait_with_output().unwrap();
        (
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }
}

impl Drop for ProjectorProcess {
    /// SIGKILL (std's `Child::kill`), by its process id.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn stat_over_nats(client: &async_nats::Client) -> Result<StateSummary, String> {
    let reply = tokio::time::timeout(
        Duration::from_secs(2),
        client.request(STAT_SUBJECT, "{}".into()),
    )
    .await
    .map_err(|_| "no answer".to_string())?
    .map_err(|e| e.to_string())?;
    serde_json::from_slice(&reply.payload).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_projector_process_restarts_from_its_snapshot_and_agrees_with_a_replay() {
    let server = support::nats::start();
    let log = connect(&server).await;
    let client = async_nats::connect(server.url()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let runs = Runs::default();
    let engines = spawn_e1_and_e2(&log, Duration::from_millis(30), &runs).await;
    grid(&log, &["e1", "e2"], "j", 30).await;

    let first = ProjectorProcess::start(&server, &state_dir, "first");
    let mut killed_at = None;
    let started = Instant::now();
    while started.elapsed() < DEADLINE {
        if let Ok(summary) = stat_over_nats(&client).await
            && summary.tasks_done >= 8
        {
            killed_at = Some(summary.tasks_done);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed_at = killed_at
        .unwrap_or_else(|| panic!("the first projector made no progress:\n{}", first.stderr()));
    assert!(killed_at < 30, "killed mid-run");
    let first_log = first.stderr();
    drop(first); // SIGKILL
    assert!(
        first_log.contains("snapshot written"),
        "a snapshot before the kill:\n{first_log}"
    );

    let second = ProjectorProcess::start(&server, &state_dir, "second");
    let summary = wait_stat("the run to complete after the restart", 30, || {
        stat_over_nats(&client)
    })
    .await;
    assert!(
        second.stderr().contains("from the snapshot after sequence"),
        "resumed from its snapshot:\n{}",
        second.stderr()
    );
    assert_eq!(
        summary.chain_digest,
        replayed_digest(&log, summary.last_seq).await.to_hex()
    );
    assert_each_task_ran_once(&log, &runs, 30).await;

    let (status, stdout) = second.terminate();
    assert!(status.success(), "SIGTERM is a clean exit: {status}");
    assert!(
        stdout.contains("projector stopped: folded through sequence"),
        "{stdout}"
    );
    engines.iter().for_each(JoinHandle::abort);
}

// ---- (c) ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_snapshot_is_ignored_and_the_state_rebuilt() {
    let server = support::nats::start();
    let log = connect(&server).await;
    let state = tempfile::tempdir().unwrap();
    let runs = Runs::default();
    let engine = spawn_engine(&log, "e1", Duration::ZERO, runs.clone()).await;
    grid(&log, &["e1"], "j", 6).await;
    let projector = Running::start(&server, projector_config(state.path())).await;
    projector.wait_done(6).await;
    let first = projector.stop().await;
    assert!(first.snapshots_written > 0);

    let store = SnapshotStore::open(&SnapshotStore::dir_in(state.path())).unwrap();
    let mut record = store.read_raw().unwrap().expect("the shutdown snapshot");
    let middle = record.len() / 2;
    record[middle] ^= 0x5a;
    store.write_raw(&record).unwrap();
    drop(store);

    let projector = Running::start(&server, projector_config(state.path())).await;
    let end = log.last_seq().await.unwrap();
    projector
        .wait_for("the rebuild to reach the end of the log", |status| {
            status.folded_seq >= end
        })
        .await;
    let rebuilt = projector.stop().await;
    let StartPoint::Scratch {
        reason: Some(reason),
    } = &rebuilt.started_from
    else {
        panic!("rebuilt from the start: {rebuilt:?}")
    };
    assert!(reason.contains("checksum"), "{reason}");
    assert!(rebuilt.entries_folded >= first.last_seq, "{rebuilt:?}");
    assert_eq!(
        rebuilt.chain_digest,
        replayed_digest(&log, rebuilt.last_seq).await
    );
    assert_each_task_ran_once(&log, &runs, 6).await;
    engine.abort();
}

// ---- (d) ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_when_the_leader_stops_or_dies() {
    let server = support::nats::start();
    let log = connect(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let runs = Runs::default();
    let engines = spawn_e1_and_e2(&log, Duration::from_millis(15), &runs).await;
    const TASKS: u64 = 60;
    grid(&log, &["e1", "e2"], "j", TASKS as u32).await;

    // A leads, B stands by.
    let a = Running::start(&server, projector_config(&dir.path().join("a"))).await;
    a.wait_for("A to lead", |s| s.leader).await;
    let b = Running::start(&server, projector_config(&dir.path().join("b"))).await;
    a.wait_for("progress under A", |s| s.batches_published >= 3)
        .await;
    a.wait_done_at_least(10).await;
    let b_status = b.handle.status();
    assert!(
        !b_status.leader && b_status.batches_published == 0 && b_status.deliveries_sent == 0,
        "B stands by: {b_status:?}"
    );
    assert!(b_status.folded_seq > 0, "B folds while it stands by");
    let b_answer = b.handle.stat(StatRequest::default()).await.unwrap();
    assert_eq!(b_answer.jobs.len(), 1, "B answers queries");

    // A stops cleanly: it releases the lease and B takes over at once.
    let a_report = a.stop().await;
    b.wait_for("B to lead", |s| s.leader).await;
    let c = Running::start(&server, projector_config(&dir.path().join("c"))).await;
    b.wait_for("progress under B", |s| s.batches_published >= 3)
        .await;
    let c_status = c.handle.status();
    assert!(
        !c_status.leader && c_status.batches_published == 0,
        "C stands by: {c_status:?}"
    );

    // B dies holding the lease: C takes over once it expires.
    let b_status = b.kill().await;
    let c_status = c.wait_for("C to lead", |s| s.leader).await;
    assert!(c_status.leader_terms >= 1);
    c.wait_done(TASKS).await;
    let c_report = c.stop().await;
    assert!(
        c_report.batches_published > 0,
        "C published after taking over: {c_report:?}"
    );

    let (_, batches) = dispatches(&log).await;
    let published =
        a_report.batches_published + b_status.batches_published + c_report.batches_published;
    // B's status may miss its very last publish if it died between publishing and reporting.
    assert!(
        published == batches || published + 1 == batches,
        "{published} published, {batches} on the log"
    );
    assert_each_task_ran_once(&log, &runs, TASKS as usize).await;
    assert_eq!(
        c_report.chain_digest,
        replayed_digest(&log, c_report.last_seq).await
    );
    engines.iter().for_each(JoinHandle::abort);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_delivers_what_the_old_one_published_but_did_not_deliver() {
    let server = support::nats::start();
    let log = connect(&server).await;
    let state = tempfile::tempdir().unwrap();
    grid(&log, &["e1"], "j", 2).await;

    // The old leader: holds the lease, decides, publishes its batch, and dies before delivering.
    log.ensure_order_stream().await.unwrap();
    // A long ttl: the old lease must not expire before the test releases it.
    let long_lease = KvLeaseConfig {
        ttl: Duration::from_secs(30),
        ..lease_config()
    };
    let mut old_lease = KvLease::open(log.context(), log.url(), long_lease, "old-leader".into())
        .await
        .unwrap();
    assert!(old_lease.acquire_or_renew().await.unwrap());
    // The old leader's key is the state directory's, registered by an operator.
    let key = gridfold::projector::key::ProjectorKey::load_or_create(state.path()).unwrap();
    let registration = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: "operator".into(),
        event: Event::ProjectorKeyRegistered { key: key.public(), name: "old leader".into() },
    };
    log.append(Append::new(wire::KEYS_SUBJECT, wire::encode(&registration))).await.unwrap();
    let mut machine = Machine::new();
    for raw in read_to_end(&log, 1).await.unwrap().collect().await.unwrap() {
        machine.handle_entry(&wire::entry_from_log(
            Seq(raw.seq),
            raw.time_ms,
            &raw.subject,
            &raw.payload,
        ));
    }
    let batch = machine.poll_batch().expect("two dispatches");
    assert_eq!(batch.orders.len(), 2);
    let envelope = batch_envelope(batch);
    let append = Append::new(ORDERS_SUBJECT, key.seal(&envelope))
        .with_msg_id(hex::encode(envelope.id))
        .with_expected_last_subject_seq(0);
    let batch_seq = log.append(append).await.unwrap().seq;

    // The projector stands by and folds the batch, without delivering it.
    let projector = Running::start(&server, projector_config(state.path())).await;
    projector
        .wait_for("the standby to fold the batch", |s| {
            s.folded_seq >= batch_seq
        })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = projector.handle.status();
    assert!(!status.leader && status.deliveries_sent == 0, "{status:?}");

    // The old leader's lease goes; the projector takes over and delivers the batch.
    let runs = Runs::default();
    let engine = spawn_engine(&log, "e1", Duration::ZERO, runs.clone()).await;
    old_lease.release().await;
    projector.wait_for("the takeover", |s| s.leader).await;
    projector.wait_done(2).await;
    let report = projector.stop().await;
    assert_eq!(
        report.batches_published, 0,
        "the tasks ran on the old leader's orders: {report:?}"
    );
    assert!(report.deliveries_sent >= 2, "{report:?}");
    assert_each_task_ran_once(&log, &runs, 2).await;
    engine.abort();
}

// ---- (e) ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stat_and_why_answer_over_nats() {
    let server = support::nats::start();
    let log = connect(&server).await;
    let client = async_nats::connect(server.url()).await.unwrap();
    let state = tempfile::tempdir().unwrap();
    publish(
        &log,
        Event::EngineLoggedIn {
            engine: engine_id("e1"),
            slots: 1,
            props: linux_props("lyon", 8192),
        },
    )
    .await;
    publish(
        &log,
        Event::JobSubmitted(job_spec("win", 1, "os == \"windows\"")),
    )
    .await;
    publish(&log, Event::JobSubmitted(job_spec("other", 1, ""))).await;
    let projector = Running::start(&server, projector_config(state.path())).await;
    projector
        .wait_for("the jobs to be folded", |s| s.folded_seq >= 3)
        .await;

    let request = |subject: &'static str, body: &str| {
        let client = client.clone();
        let body = body.to_owned();
        async move {
            let reply =
                tokio::time::timeout(Duration::from_secs(5), client.request(subject, body.into()))
                    .await
                    .expect("an answer in time")
                    .expect("an answer");
            serde_json::from_slice::<serde_json::Value>(&reply.payload).expect("JSON")
        }
    };
    let all: StateSummary = serde_json::from_value(request(STAT_SUBJECT, "").await).unwrap();
    assert_eq!(all.jobs.len(), 2, "{all}");
    assert!(all.last_seq >= 3);
    let one: StateSummary =
        serde_json::from_value(request(STAT_SUBJECT, r#"{"job": "win"}"#).await).unwrap();
    assert_eq!(
        one.jobs.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(),
        ["win"]
    );

    let why = request(WHY_SUBJECT, r#"{"task": "win/0"}"#).await;
    let text = why.to_string();
    assert!(why.get("explanation").is_some(), "{text}");
    assert!(
        text.contains("e1"),
        "the explanation names the engine it excluded: {text}"
    );
    let unknown = request(WHY_SUBJECT, r#"{"task": "nope/0"}"#).await;
    assert!(unknown.get("error").is_some(), "{unknown}");
    let malformed = request(STAT_SUBJECT, "not json").await;
    assert!(
        malformed["error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{malformed}"
    );
    // The state digest: left out unless asked for; a request whose flag is
    // not a boolean is refused with the reason, and the projector answers on.
    assert_eq!(all.state_digest, None, "not asked for");
    let deep = format!(r#"{{"state_digest": {}{}}}"#, "[".repeat(100_000), "]".repeat(100_000));
    for not_a_flag in [r#"{"state_digest": "yes"}"#, r#"{"state_digest": 1}"#, r#"{"state_digest": {"deep": [[[]]]}}"#, &deep] {
        let refused = request(STAT_SUBJECT, not_a_flag).await;
        let error = refused["error"].as_str().unwrap_or_default();
        assert!(
            error.starts_with("the request is not valid JSON for this query: state_digest: "),
            "{}: {refused}",
            &not_a_flag[..not_a_flag.len().min(40)]
        );
    }
    let trailing = request(STAT_SUBJECT, r#"{"state_digest": false} {}"#).await;
    assert!(trailing["error"].as_str().is_some_and(|error| error.contains("trailing characters")), "{trailing}");
    let asked: StateSummary = serde_json::from_value(request(STAT_SUBJECT, r#"{"state_digest": true}"#).await).unwrap();
    assert!(asked.state_digest.as_ref().is_some_and(|digest| digest.len() == 64), "{asked}");
    projector.stop().await;
}
