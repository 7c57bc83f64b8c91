//! One order budget for a whole run (issue: hardening, item 4), on a grid built
//! so that every stage of `schedule` has more than its cap to do at the same
//! instant, with every id 64 bytes long: engines lost, attempts of closed epochs
//! and of unstarted dispatches requeued, a cancelled job's attempts stopped,
//! jobs and tasks failed with a dependency, engines blacklisted, long tasks
//! rescheduled, a library synced, free slots filled and jobs marked
//! unschedulable. Each batch goes through the real wire (sealed, encoded, read
//! back as the log would store it) and is folded back.
//!
//! The first batch must stop at the budget (its orders within
//! `ORDERS_PER_BATCH_MAX`, its encoded size within the broker's 1 MiB payload
//! limit) and apply whole; later runs must carry out the rest, every batch
//! applying whole, until every stage has done all of its work.

use std::collections::BTreeMap;

use gridfold::core::event::{
    EngineLoad, EngineProps, Envelope, Event, LibraryInfo, LibraryRef, ORDERS_PER_BATCH_MAX, Order, Policy,
    RequeueReason, TaskConditions,
};
use gridfold::core::fold::fold;
use gridfold::core::ids::Seq;
use gridfold::core::schedule::{decide, InFlight};
use gridfold::core::schedule::budget::ORDER_BATCH_BYTES_MAX;
use gridfold::core::schedule::lifecycle::TIMER_ORDERS_PER_RUN_MAX;
use gridfold::core::state::State;
use gridfold::core::testkit::{engine_id, job_id, job_spec, linux_props, task, test_projector_key, LogBuilder};
use gridfold::wire;

/// Engines (and tasks, and jobs) per stage: more than any stage's cap.
const N: usize = 1_100;
/// The broker's default payload limit.
const BROKER_PAYLOAD_MAX: usize = 1024 * 1024;

const T0: u64 = 1_000_000;
/// Two minutes later: past the engine and dispatch timeouts and every task max time.
const T1: u64 = T0 + 120_000;

/// `prefix-i-` padded with `x` to the longest id there may be.
fn id64(prefix: &str, i: usize) -> String {
    let head = format!("{prefix}-{i}-");
    format!("{head}{}", "x".repeat(64 - head.len()))
}

fn in_group(group: &str) -> EngineProps {
    let mut props = linux_props("lyon", 8192);
    props.custom.insert("group".into(), group.into());
    props
}

fn requirement(group: &str) -> String {
    format!("group == \"{group}\"")
}

/// Decides, seals and folds batches until the scheduler has nothing more to
/// say; every batch must fit the broker and apply whole. Each `Dispatch` is
/// started by its engine unless `started` says no. Returns the batches' orders.
fn settle(log: &mut LogBuilder, state: &mut State, started: impl Fn(&str) -> bool) -> Vec<Vec<Order>> {
    let mut batches = Vec::new();
    loop {
        for entry in &log.entries[state.last_seq.0 as usize..] {
            let rejections = fold(state, entry);
            assert!(rejections.is_empty(), "seq {}: {rejections:?}", entry.seq);
        }
        let Some(batch) = decide(state, &InFlight::new()) else { return batches };
        assert!(batches.len() < 64, "the scheduler keeps deciding");
        let orders = batch.orders.clone();
        let envelope = Envelope { id: [batches.len() as u8; 16], source: "test".into(), event: Event::OrderBatch(batch) };
        let bytes = wire::encode_sealed(&envelope, &test_projector_key());
        assert!(
            bytes.len() <= BROKER_PAYLOAD_MAX,
            "a batch of {} orders is {} bytes, over the broker's {BROKER_PAYLOAD_MAX}",
            orders.len(),
            bytes.len()
        );
        assert!(orders.len() <= ORDERS_PER_BATCH_MAX);
        let estimated: usize = orders.iter().map(Order::encoded_len_max).sum();
        assert!(estimated <= ORDER_BATCH_BYTES_MAX);
        let entry = wire::entry_from_log(Seq(log.entries.len() as u64 + 1), log.time_ms, wire::ORDERS_SUBJECT, &bytes);
        log.entries.push(entry.clone());
        let rejections = fold(state, &entry);
        assert!(rejections.is_empty(), "the scheduler's own batch is refused: {rejections:?}");
        for order in &orders {
            if let Order::Dispatch { task, attempt, engine, .. } = order
                && started(engine.as_str())
            {
                log.started(task.job.as_str(), task.index, *attempt, engine.as_str());
            }
        }
        batches.push(orders);
    }
}

/// The orders of `batches` by kind (and reason, where it tells stages apart).
fn count_by_kind(batches: &[Vec<Order>]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for order in batches.iter().flatten() {
        let kind = match order {
            Order::Requeue { reason: RequeueReason::EngineRestarted, .. } => "Requeue engine-restarted".into(),
            Order::Requeue { reason: RequeueReason::DispatchTimeout, .. } => "Requeue dispatch-timeout".into(),
            Order::FailDependent { task: None, .. } => "FailDependent job".into(),
            Order::FailDependent { task: Some(_), .. } => "FailDependent task".into(),
            other => other.kind_name().to_string(),
        };
        *counts.entry(kind).or_default() += 1;
    }
    counts
}

#[test]
fn every_stage_over_its_cap_with_64_byte_ids_fits_the_broker_and_applies_batch_by_batch() {
    let mut log = LogBuilder::new();
    log.at(T0);
    log.push(Event::PolicySet(Policy {
        engine_timeout_ms: 30_000,
        dispatch_timeout_ms: 60_000,
        dispatches_per_run_max: ORDERS_PER_BATCH_MAX as u32,
        ..Policy::default()
    }));
    let library = LibraryRef::new(&id64("lib", 0), "1.0");
    log.push(Event::LibraryPublished(LibraryInfo {
        library: library.clone(),
        size_bytes: 1,
        digest_hex: "ab".repeat(32),
    }));
    // Busy groups: one engine of one slot per task of the group's job.
    let busy = ["lost", "restart", "unstarted", "cancel", "resched", "blacklist"];
    for group in busy.iter().chain(&["sync", "idle"]) {
        for i in 0..N {
            log.login(&id64(group, i), 1, in_group(group));
        }
    }
    log.login(&id64("gate", 0), 1, in_group("gate"));
    for group in busy {
        let mut spec = job_spec(&id64(group, 0), N as u32, &requirement(group));
        spec.max_attempts = 3;
        if group == "resched" {
            spec.options.redundant_rescheduling = true;
            spec.options.task_max_time_ms = 10_000;
        }
        if group == "blacklist" {
            spec.options.engine_blacklisting = true;
            spec.options.failures_before_blacklist = 1;
        }
        log.submit(spec);
    }
    let mut gate = job_spec(&id64("gate", 0), 1, &requirement("gate"));
    gate.max_attempts = 1;
    log.submit(gate);
    let gate_task = task(&id64("gate", 0), 0);
    for i in 0..N {
        let mut dependent = job_spec(&id64("dependent", i), 1, &requirement("idle"));
        dependent.options.depends_on_jobs = vec![job_id(&id64("gate", 0))];
        dependent.options.fail_on_dependency_failure = true;
        log.submit(dependent);
    }
    let mut dependent_tasks = job_spec(&id64("dependent-tasks", 0), N as u32, &requirement("idle"));
    dependent_tasks.options.fail_on_dependency_failure = true;
    dependent_tasks.options.continue_on_task_failure = true;
    dependent_tasks.task_conditions = (0..N as u32)
        .map(|index| (index, TaskConditions { depends_on: vec![gate_task.clone()], ..Default::default() }))
        .collect();
    log.submit(dependent_tasks);
    let mut state = State::new();
    let unstarted_group = id64("unstarted", 0);
    let unstarted_prefix = &unstarted_group[.."unstarted-".len()];
    settle(&mut log, &mut state, |engine| !engine.starts_with(unstarted_prefix));
    assert_eq!(state.live_attempts().len(), busy.len() * N + 1, "every busy engine and the gate run a task");

    // Two minutes on, everything happens at once.
    log.at(T1);
    for group in busy.iter().chain(&["sync", "idle", "gate"]).filter(|group| **group != "lost" && **group != "restart") {
        for i in 0..if *group == "gate" { 1 } else { N } {
            log.push(Event::EngineHeartbeat { engine: engine_id(&id64(group, i)), load: EngineLoad::default() });
        }
    }
    for i in 0..N {
        log.login(&id64("restart", i), 1, in_group("restart"));
    }
    let blacklist_job = id64("blacklist", 0);
    for (key, live) in state.live_attempts() {
        let task = state.task_ref(key);
        if task.job.as_str() == blacklist_job {
            log.failed(&blacklist_job, task.index, live.attempt, state.engine(live.engine).id.as_str());
        }
    }
    log.push(Event::JobCancelled { job: job_id(&id64("cancel", 0)), reason: "test".into() });
    log.failed(&id64("gate", 0), 0, 1, &id64("gate", 0));
    for i in 0..N {
        log.submit(job_spec(&id64("nowhere", i), 1, &requirement("nowhere")));
    }
    let mut rooted = job_spec(&id64("rooted", 0), N as u32, &requirement("sync"));
    rooted.options.root_library = Some(library);
    log.submit(rooted);
    log.submit(job_spec(&id64("fill", 0), N as u32, &requirement("idle")));

    let batches = settle(&mut log, &mut state, |_| false);
    let first = &batches[0];
    let first_bytes: usize = first.iter().map(Order::encoded_len_max).sum();
    assert!(
        first.len() == ORDERS_PER_BATCH_MAX || first_bytes + Order::ENCODED_LEN_MAX > ORDER_BATCH_BYTES_MAX,
        "the first batch stops at the budget: {} orders, {first_bytes} bytes at most",
        first.len()
    );
    assert_eq!(
        first.iter().filter(|order| matches!(order, Order::EngineLost { .. })).count(),
        TIMER_ORDERS_PER_RUN_MAX,
        "the first stage stops at its own cap"
    );
    let counts = count_by_kind(&batches);
    eprintln!(
        "{} batches of {:?} orders; the first at most {first_bytes} bytes; by kind: {counts:?}",
        batches.len(),
        batches.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let expected = [
        ("EngineLost", N),
        ("Requeue engine-restarted", N),
        ("Requeue dispatch-timeout", N),
        ("Cancel", N),
        ("FailDependent job", N),
        ("FailDependent task", N),
        ("Blacklist", N),
        ("Reschedule", N),
        ("SyncLibrary", N),
        // The `nowhere` jobs, and the lost group's job: its engines all gone.
        ("MarkUnschedulable", N + 1),
    ];
    for (kind, n) in expected {
        assert_eq!(counts.get(kind).copied().unwrap_or(0), n, "{kind} orders over all batches: {counts:?}");
    }
    assert!(
        counts["Dispatch"] >= N,
        "the free idle engines are filled (and the requeued tasks dispatched again): {counts:?}"
    );
    assert!(batches.len() >= 2, "one batch could not hold it all");
}
