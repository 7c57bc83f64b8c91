//! Grid Engine's suspend thresholds: one engine whose reported `np_load_avg`
//! crosses the threshold and falls back, with tasks of different priority.

use expect_test::expect;

use super::tests::{check, decide_once};
use crate::core::event::{EngineLoad, Event, Order, OrderBatch, Policy, SuspendThresholds, TaskSelector};
use crate::core::explain::explain;
use crate::core::fold::fold;
use crate::core::reject::{OrderProblem, Rejection};
use crate::core::state::State;
use crate::core::testkit::*;

const INTERVAL_MS: u64 = 60_000;

fn heartbeat(log: &mut LogBuilder, np_load_avg_milli: i64) {
    let load = EngineLoad { values_milli: [("np_load_avg".to_string(), np_load_avg_milli)].into(), ..EngineLoad::default() };
    log.push(Event::EngineHeartbeat { engine: engine_id("a"), load });
}

/// Engine `a` (3 slots) runs hi/0 (priority 5), lo/0 and lo/1 (priority 0);
/// the threshold is np_load_avg 1.75, one task per minute.
fn running_grid(nsuspend: u32) -> (LogBuilder, State) {
    let mut log = LogBuilder::new();
    let thresholds = SuspendThresholds { thresholds: vec![("np_load_avg".into(), 1_750)], interval_ms: INTERVAL_MS, nsuspend };
    log.push(Event::PolicySet(Policy { suspend_thresholds: thresholds, engine_timeout_ms: 3_600_000, ..Policy::default() }));
    log.login("a", 3, linux_props("lyon", 8192));
    let mut hi = job_spec("hi", 1, "");
    hi.priority = 5;
    log.submit(hi);
    log.submit(job_spec("lo", 2, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch hi/0 #1 -> a
        dispatch lo/0 #1 -> a
        dispatch lo/1 #1 -> a
    "#]]);
    for (job, index) in [("hi", 0), ("lo", 0), ("lo", 1)] {
        log.started(job, index, 1, "a");
    }
    heartbeat(&mut log, 500);
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n");
    (log, state)
}

#[test]
fn above_the_threshold_the_lowest_priority_task_is_suspended_one_per_interval_then_resumed_one_per_interval() {
    let (mut log, mut state) = running_grid(1);
    log.at(1_700_000_010_000);
    heartbeat(&mut log, 2_100);
    check(&mut log, &mut state, expect![[r#"
        suspend lo/1 #1 on a
    "#]]);
    let why = explain(&state, &task("lo", 1)).unwrap().to_string();
    assert!(why.contains("suspended by a threshold: np_load_avg is 2.10, threshold 1.75"), "{why}");
    // Still above, within the interval: nothing more.
    heartbeat(&mut log, 2_200);
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n");
    // The next interval: the next lowest.
    log.at(1_700_000_010_000 + INTERVAL_MS);
    heartbeat(&mut log, 2_200);
    check(&mut log, &mut state, expect![[r#"
        suspend lo/0 #1 on a
    "#]]);
    // Below, within that interval: nothing yet; then one resumed per interval,
    // the highest priority first; hi/0 was never touched.
    log.at(1_700_000_020_000 + INTERVAL_MS);
    heartbeat(&mut log, 1_000);
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n");
    log.at(1_700_000_010_000 + 2 * INTERVAL_MS);
    heartbeat(&mut log, 1_000);
    check(&mut log, &mut state, expect![[r#"
        resume lo/0 #1 on a
    "#]]);
    log.at(1_700_000_010_000 + 3 * INTERVAL_MS);
    heartbeat(&mut log, 1_000);
    check(&mut log, &mut state, expect![[r#"
        resume lo/1 #1 on a
    "#]]);
    assert_eq!(state.n_suspended(), 0);
    assert_eq!(state.engine(state.engine_idx(&engine_id("a")).unwrap()).used, 3, "suspended tasks kept their slots");
}

#[test]
fn nsuspend_suspends_that_many_at_once() {
    let (mut log, mut state) = running_grid(2);
    log.at(1_700_000_010_000);
    heartbeat(&mut log, 1_751);
    check(&mut log, &mut state, expect![[r#"
        suspend lo/1 #1 on a
        suspend lo/0 #1 on a
    "#]]);
}

#[test]
fn an_operator_suspension_is_not_resumed_by_the_threshold_rule() {
    let (mut log, mut state) = running_grid(1);
    log.push(Event::SuspendRequested(TaskSelector { job: job_id("hi"), task: Some(0) }));
    check(&mut log, &mut state, expect![[r#"
        suspend hi/0 #1 on a
    "#]]);
    log.at(1_700_000_010_000);
    heartbeat(&mut log, 2_000);
    check(&mut log, &mut state, expect![[r#"
        suspend lo/1 #1 on a
    "#]]);
    log.at(1_700_000_010_000 + INTERVAL_MS);
    heartbeat(&mut log, 100);
    check(&mut log, &mut state, expect![[r#"
        resume lo/1 #1 on a
    "#]]);
    log.at(1_700_000_010_000 + 3 * INTERVAL_MS);
    heartbeat(&mut log, 100);
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n");
    let why = explain(&state, &task("hi", 0)).unwrap().to_string();
    assert!(why.contains("attempt 1 suspended on a\n"), "{why}");
}

#[test]
fn a_suspend_the_rule_does_not_justify_is_refused_even_signed_and_a_client_batch_whole() {
    let (mut log, mut state) = running_grid(1);
    let suspend = |job: &str, index| Order::Suspend { task: task(job, index), attempt: 1, engine: engine_id("a") };
    let based_on = state.last_seq;
    let batch = |orders| OrderBatch { based_on_seq: based_on, algorithm: "sge-plain".into(), algorithm_version: 4, orders };
    // Below the threshold: a signed Suspend no operator asked for is refused.
    let entry = log.orders(batch(vec![suspend("lo", 1)]));
    let rejections = fold(&mut state, &entry);
    assert!(matches!(&rejections[..], [Rejection::OrderNotApplicable { problem: OrderProblem::NotRequested, .. }]), "{rejections:?}");
    // Above it, but not the lowest-priority task: refused too.
    log.at(1_700_000_010_000);
    heartbeat(&mut log, 2_100);
    fold(&mut state, log.entries.last().unwrap());
    let entry = log.orders(batch(vec![suspend("hi", 0)]));
    let rejections = fold(&mut state, &entry);
    assert!(matches!(&rejections[..], [Rejection::OrderNotApplicable { problem: OrderProblem::NotRequested, .. }]), "{rejections:?}");
    // The right one, but from a client (unsigned): the batch is refused whole.
    let entry = log.push_from(crate::core::event::Origin::User(crate::core::ids::UserName::new("mallory").unwrap()), Event::OrderBatch(batch(vec![suspend("lo", 1)])));
    let rejections = fold(&mut state, &entry);
    assert!(!rejections.is_empty() && !matches!(rejections[0], Rejection::OrderNotApplicable { .. }), "{rejections:?}");
    assert_eq!(state.n_suspended(), 0);
}

#[test]
fn the_threshold_state_survives_a_snapshot() {
    let (mut log, mut state) = running_grid(1);
    log.at(1_700_000_010_000);
    heartbeat(&mut log, 2_100);
    check(&mut log, &mut state, expect![[r#"
        suspend lo/1 #1 on a
    "#]]);
    let loaded = State::from_snapshot(&state.to_snapshot()).unwrap();
    assert_eq!(loaded.state_digest(), state.state_digest());
    assert!(loaded.suspended_by_threshold(state.task_key(&task("lo", 1)).unwrap(), 1).is_some());
}
