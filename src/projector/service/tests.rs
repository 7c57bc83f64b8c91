//! The service on the embedded log: no broker needed. The NATS side (lease,
//! takeover, queries over NATS, a killed process) is in `tests/it/projector.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use tokio::sync::oneshot;

use super::*;
use crate::core::event::{Payload, Event, Order};
use crate::core::ids::TaskRef;
use crate::core::replay::{ReplayOptions, replay};
use crate::core::testkit::{engine_id, job_spec, linux_props};
use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
use crate::log::{LogReader, read_to_end};
use crate::projector::query::{StatRequest, StateSummary};
use crate::wire::ORDERS_SUBJECT;
use crate::wire::delivery::{DeliveryKind, decode_deliveries};

const DEADLINE: Duration = Duration::from_secs(30);

fn config(state_dir: &Path) -> ProjectorConfig {
    ProjectorConfig {
        snapshot_every_entries: 10,
        tick_interval: Some(Duration::from_millis(200)),
        read_wait: Duration::from_millis(100),
        check_invariants: true,
        register_key: true,
        ..ProjectorConfig::new(state_dir)
    }
}

async fn publish(log: &EmbeddedLog, event: Event) {
    let envelope = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: "test".into(),
        event,
    };
    let append = Append::new(wire::default_subject(&envelope.event), wire::encode(&envelope))
        .with_msg_id(hex::encode(envelope.id));
    log.append(append).await.expect("append");
}

/// Engines that answer every Run delivered to them at once, started then completed,
/// and record what they were asked to run.
fn spawn_engines(
    events: EmbeddedLog,
    orders: EmbeddedLog,
) -> (
    JoinHandle<()>,
    tokio::sync::watch::Receiver<Vec<(TaskRef, u32)>>,
) {
    let (runs_tx, runs_rx) = tokio::sync::watch::channel(Vec::new());
    let task = tokio::spawn(async move {
        let mut reader = orders.reader(1).await.unwrap();
        let mut seen = BTreeSet::new();
        loop {
            let batch = reader
                .next_batch(1000, Duration::from_millis(200))
                .await
                .unwrap();
            for entry in batch.entries {
                let engine = engine_id(
                    entry
                        .subject
                        .strip_prefix(sink::ORDER_SUBJECT_PREFIX)
                        .unwrap(),
                );
                for delivery in decode_deliveries(&engine, &entry.payload).unwrap() {
                    if !seen.insert(delivery.id.clone()) {
                        continue;
                    }
                    if let DeliveryKind::Run(run) = delivery.kind {
                        runs_tx.send_modify(|runs| runs.push((run.task.clone(), run.attempt)));
                        publish(
                            &events,
                            Event::TaskStarted {
                                task: run.task.clone(),
                                attempt: run.attempt,
                                engine: engine.clone(),
                                remote_job: String::new(),
                            },
                        )
                        .await;
                        publish(
                            &events,
                            Event::TaskCompleted {
                                task: run.task,
                                attempt: run.attempt,
                                engine: engine.clone(),
                                exit_code: 0,
                                cpu_ms: 1,
                                wall_ms: 1,
                                result: Vec::new(),
                                stored: Default::default(),
                            },
                        )
                        .await;
                    }
                }
            }
        }
    });
    (task, runs_rx)
}

async fn wait_done(handle: &ProjectorHandle, tasks: u64) {
    tokio::time::timeout(DEADLINE, async {
        loop {
            let summary = handle.stat(StatRequest::default()).await.unwrap();
            if summary.tasks_done >= tasks {
                assert_eq!(summary.tasks_done, tasks, "no task completes twice");
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the tasks did not complete: {:?}", handle.status()));
}

/// The chain digest of a clean replay of the log's first `through` entries.
async fn replayed_digest(log: &EmbeddedLog, through: u64) -> Digest {
    replayed_state(log, through).await.chain
}

/// The state a clean replay of the log's first `through` entries folds to.
async fn replayed_state(log: &EmbeddedLog, through: u64) -> crate::core::state::State {
    let raw = read_to_end(log, 1).await.unwrap().collect().await.unwrap();
    let entries: Vec<_> = raw
        .iter()
        .filter(|entry| entry.seq <= through)
        .map(|entry| {
            wire::entry_from_log(
                Seq(entry.seq),
                entry.time_ms,
                &entry.subject,
                &entry.payload,
            )
        })
        .collect();
    assert_eq!(entries.len() as u64, through);
    let (state, _) = replay(
        crate::core::state::State::new(),
        &entries,
        &ReplayOptions {
            check_invariants: true,
            ..Default::default()
        },
        &mut |_| {},
    );
    state
}

/// Every (task, attempt) dispatched in the log's order batches, with how often.
async fn dispatches(log: &EmbeddedLog) -> BTreeMap<(TaskRef, u32), u32> {
    let raw = read_to_end(log, 1).await.unwrap().collect().await.unwrap();
    let mut counts = BTreeMap::new();
    for entry in raw.iter().filter(|entry| entry.subject == ORDERS_SUBJECT) {
        let Ok(Envelope {
            event: Event::OrderBatch(batch),
            ..
        }) = wire::decode(&entry.payload)
        else {
            panic!("a batch")
        };
        for order in batch.orders {
            if let Order::Dispatch { task, attempt, .. } = order {
                *counts.entry((task, attempt)).or_default() += 1;
            }
        }
    }
    counts
}

struct Grid {
    _dir: tempfile::TempDir,
    events: EmbeddedLog,
    sink: EmbeddedOrderSink,
    state_dir: PathBuf,
}

async fn grid(tasks: u32) -> Grid {
    let dir = tempfile::tempdir().unwrap();
    let events = EmbeddedLog::open(dir.path().join("log"), EmbeddedConfig::default()).unwrap();
    let state_dir = dir.path().join("state");
    let sink = EmbeddedOrderSink::open_in(&state_dir).unwrap();
    publish(
        &events,
        Event::EngineLoggedIn {
            engine: engine_id("e1"),
            slots: 2,
            props: linux_props("lyon", 8192),
        },
    )
    .await;
    publish(
        &events,
        Event::EngineLoggedIn {
            engine: engine_id("e2"),
            slots: 1,
            props: linux_props("lyon", 8192),
        },
    )
    .await;
    publish(&events, Event::JobSubmitted(job_spec("j", tasks, ""))).await;
    Grid {
        _dir: dir,
        events,
        sink,
        state_dir,
    }
}

fn start(
    grid: &Grid,
    config: ProjectorConfig,
) -> (
    ProjectorHandle,
    oneshot::Sender<()>,
    JoinHandle<Result<ProjectorReport, ProjectorError>>,
) {
    let projector = Projector::new(config, grid.events.clone(), grid.sink.clone(), SoleWriter);
    let handle = projector.handle();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(projector.run(async move {
        let _ = stopped.await;
    }));
    (handle, stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folds_decides_and_delivers_on_the_embedded_log_and_resumes_from_its_snapshot() {
    let grid = grid(12).await;
    let (engines, runs) = spawn_engines(grid.events.clone(), grid.sink.log().clone());
    let (handle, stop, task) = start(&grid, config(&grid.state_dir));
    wait_done(&handle, 12).await;
    assert!(handle.status().leader, "the sole writer leads");
    stop.send(()).unwrap();
    let report = task.await.unwrap().unwrap();
    assert_eq!(report.started_from, StartPoint::Scratch { reason: None });
    assert!(
        report.batches_published > 0 && report.deliveries_sent >= 12,
        "{report:?}"
    );
    assert!(report.snapshots_written > 0, "{report:?}");
    assert_eq!(
        report.chain_digest,
        replayed_digest(&grid.events, report.last_seq).await
    );
    let runs = runs.borrow().clone();
    assert_eq!(runs.len(), 12, "each task ran once: {runs:?}");
    assert!(dispatches(&grid.events).await.values().all(|&n| n == 1));

    // A restart resumes from the shutdown snapshot and reaches the digest of a clean replay.
    publish(&grid.events, Event::JobSubmitted(job_spec("k", 3, ""))).await;
    let (handle, stop, task) = start(&grid, config(&grid.state_dir));
    wait_done(&handle, 15).await;
    stop.send(()).unwrap();
    let again = task.await.unwrap().unwrap();
    assert_eq!(
        again.started_from,
        StartPoint::Snapshot {
            seq: report.last_seq
        }
    );
    assert_eq!(
        again.chain_digest,
        replayed_digest(&grid.events, again.last_seq).await
    );
    engines.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_snapshot_is_ignored_and_the_state_rebuilt_from_the_start() {
    let grid = grid(4).await;
    let (engines, _runs) = spawn_engines(grid.events.clone(), grid.sink.log().clone());
    let (handle, stop, task) = start(&grid, config(&grid.state_dir));
    wait_done(&handle, 4).await;
    stop.send(()).unwrap();
    let first = task.await.unwrap().unwrap();

    let store = SnapshotStore::open(&SnapshotStore::dir_in(&grid.state_dir)).unwrap();
    let mut record = store.read_raw().unwrap().expect("a snapshot at shutdown");
    let middle = record.len() / 2;
    record[middle] ^= 0xff;
    store.write_raw(&record).unwrap();
    drop(store);

    let config = ProjectorConfig {
        tick_interval: None,
        ..config(&grid.state_dir)
    };
    let (handle, stop, task) = start(&grid, config);
    let end = grid.events.last_seq().await.unwrap();
    tokio::time::timeout(DEADLINE, handle.wait_for(|status| status.folded_seq >= end))
        .await
        .unwrap()
        .unwrap();
    stop.send(()).unwrap();
    let rebuilt = task.await.unwrap().unwrap();
    let StartPoint::Scratch {
        reason: Some(reason),
    } = &rebuilt.started_from
    else {
        panic!("rebuilt: {rebuilt:?}")
    };
    assert!(reason.contains("checksum"), "{reason}");
    assert!(rebuilt.last_seq >= first.last_seq);
    assert_eq!(
        rebuilt.chain_digest,
        replayed_digest(&grid.events, rebuilt.last_seq).await
    );
    engines.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_another_log_is_refused() {
    let grid = grid(1).await;
    let config = ProjectorConfig {
        tick_interval: None,
        ..config(&grid.state_dir)
    };
    let (handle, stop, task) = start(&grid, config.clone());
    tokio::time::timeout(DEADLINE, handle.wait_for(|status| status.folded_seq >= 3))
        .await
        .unwrap()
        .unwrap();
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();

    // Same state directory, another log of the same length.
    let other_dir = tempfile::tempdir().unwrap();
    let other = EmbeddedLog::open(other_dir.path(), EmbeddedConfig::default()).unwrap();
    for n in 0..5 {
        publish(
            &other,
            Event::JobSubmitted(job_spec(&format!("x{n}"), 1, "")),
        )
        .await;
    }
    let projector = Projector::new(config, other.clone(), grid.sink.clone(), SoleWriter);
    let handle = projector.handle();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(projector.run(async move {
        let _ = stopped.await;
    }));
    tokio::time::timeout(DEADLINE, handle.wait_for(|status| status.folded_seq >= 5))
        .await
        .unwrap()
        .unwrap();
    stop.send(()).unwrap();
    let report = task.await.unwrap().unwrap();
    let StartPoint::Scratch {
        reason: Some(reason),
    } = &report.started_from
    else {
        panic!("{report:?}")
    };
    assert!(reason.contains("another log"), "{reason}");
    assert_eq!(
        report.chain_digest,
        replayed_digest(&other, report.last_seq).await
    );
}

/// Two projectors that both believe they lead (a stale leader): the fence lets only
/// one write each time, and no task is dispatched twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_keeps_two_writers_from_dispatching_twice() {
    let grid = grid(20).await;
    let second_state = grid.state_dir.with_file_name("state-2");
    let second_sink = EmbeddedOrderSink::open_in(&second_state).unwrap();
    let (engines, runs) = spawn_engines(grid.events.clone(), grid.sink.log().clone());
    let (handle, stop, task) = start(&grid, config(&grid.state_dir));
    let other = Projector::new(
        config(&second_state),
        grid.events.clone(),
        second_sink,
        SoleWriter,
    );
    let (stop_other, other_stopped) = oneshot::channel::<()>();
    let other_task = tokio::spawn(other.run(async move {
        let _ = other_stopped.await;
    }));
    wait_done(&handle, 20).await;
    stop.send(()).unwrap();
    stop_other.send(()).unwrap();
    let first = task.await.unwrap().unwrap();
    let second = other_task.await.unwrap().unwrap();
    let counts = dispatches(&grid.events).await;
    assert!(
        counts.values().all(|&n| n == 1),
        "a (task, attempt) dispatched twice: {counts:?}"
    );
    let runs = runs.borrow().clone();
    assert_eq!(
        runs.iter().collect::<BTreeSet<_>>().len(),
        runs.len(),
        "an attempt ran twice: {runs:?}"
    );
    let raw = read_to_end(&grid.events, 1)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    let batches_on_log = raw
        .iter()
        .filter(|entry| entry.subject == ORDERS_SUBJECT)
        .count() as u64;
    assert_eq!(
        first.batches_published + second.batches_published,
        batches_on_log,
        "{first:?}\n{second:?}"
    );
    engines.abort();
}

#[test]
fn ticks_of_one_second_are_the_same_message() {
    let a = tick_append(1_700_000_000);
    assert_eq!(a, tick_append(1_700_000_000));
    assert_eq!(a.msg_id.as_deref(), Some("tick-1700000000"));
    assert_eq!(a.subject, TICK_SUBJECT);
    assert_ne!(
        tick_envelope(1_700_000_000).id,
        tick_envelope(1_700_000_001).id
    );
    let entry = wire::entry_from_log(Seq(1), 0, &a.subject, &a.payload);
    assert_eq!(entry.origin, Origin::Ticker);
    assert!(matches!(
        entry.payload,
        Payload::Event(Envelope {
            event: Event::Tick,
            ..
        })
    ));
}

#[test]
fn recent_deliveries_keep_the_window_of_log_time() {
    let delivery = |n: usize| Delivery {
        id: Delivery::id_for(Seq(n as u64), 0),
        batch_seq: Seq(n as u64),
        engine: engine_id("e1"),
        epoch: 1,
        kind: DeliveryKind::Lost(Order::EngineLost {
            engine: engine_id("e1"),
            epoch: 1,
            last_seen_ms: 0,
        }),
    };
    let mut recent = RecentDeliveries::new(
        Duration::from_secs(10),
        vec![(1_000, delivery(1)), (5_000, delivery(2))],
    );
    recent.push(12_000, delivery(3));
    recent.prune(12_000);
    let kept: Vec<u64> = recent.iter().map(|(_, d)| d.batch_seq.0).collect();
    assert_eq!(
        kept,
        [2, 3],
        "the batch of log time 1000 is more than 10 s before 12000"
    );
}

/// `stat --state-digest` remembers the digest of the state at the sequence it
/// was computed at (computing it holds the loop for the whole state's
/// serialisation): asked again at the same sequence it is the same, and once
/// more entries are folded it is the new state's, never the remembered one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_digest_asked_again_is_the_states_own_at_each_sequence_never_a_stale_one() {
    let grid = grid(3).await;
    // No ticks: nothing is appended once the projector has decided on the grid.
    let config = ProjectorConfig { tick_interval: None, ..config(&grid.state_dir) };
    let (handle, stop, task) = start(&grid, config);
    let ask = || handle.stat(StatRequest { state_digest: true, ..StatRequest::default() });
    let digest_at = |summary: &StateSummary| summary.state_digest.clone().expect("asked for the digest");
    // Ask until two answers in a row are of the same sequence (the grid is quiet).
    let (first, second) = tokio::time::timeout(DEADLINE, async {
        let mut last = ask().await.unwrap();
        loop {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let next = ask().await.unwrap();
            if next.last_seq == last.last_seq && next.jobs.iter().all(|job| job.dispatched == job.tasks) {
                return (last, next);
            }
            last = next;
        }
    })
    .await
    .expect("the grid goes quiet");
    let replayed = replayed_state(&grid.events, first.last_seq).await;
    assert_eq!(digest_at(&first), replayed.state_digest().to_hex(), "the state's own digest");
    assert_eq!(digest_at(&second), digest_at(&first), "the same sequence, the same digest");

    publish(&grid.events, Event::JobSubmitted(job_spec("k", 2, ""))).await;
    let after = tokio::time::timeout(DEADLINE, async {
        loop {
            let summary = ask().await.unwrap();
            if summary.last_seq > first.last_seq {
                return summary;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the new job is folded");
    let replayed = replayed_state(&grid.events, after.last_seq).await;
    assert_eq!(digest_at(&after), replayed.state_digest().to_hex(), "the new state's digest");
    assert_ne!(digest_at(&after), digest_at(&first), "not the one remembered");
    // A plain stat still carries none.
    assert_eq!(handle.stat(StatRequest::default()).await.unwrap().state_digest, None);
    stop.send(()).unwrap();
    task.await.unwrap().unwrap();
}
