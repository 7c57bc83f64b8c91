//! Flood control: each algorithm's ratio rising and falling, the cap on a
//! gateway's unstarted tasks (and `why` naming it), withdrawals, and a
//! preempted failure that uses no attempt.

use super::*;
use crate::core::event::{Event, FailureKind, FloodPolicy, OrderBatch, Policy};
use crate::core::fold::fold;
use crate::core::schedule::decide;
use crate::core::state::TaskStatus;
use crate::core::testkit::{engine_id, job_spec, linux_props, task, LogBuilder};

fn policy(algorithm: FloodAlgorithm, remote_queue_timeout_ms: u64) -> Policy {
    Policy {
        flood: Some(FloodPolicy { algorithm, remote_queue_timeout_ms, ..FloodPolicy::default() }),
        dispatch_timeout_ms: 3_600_000,
        engine_timeout_ms: 3_600_000,
        ..Policy::default()
    }
}

fn gateway_props() -> crate::core::event::EngineProps {
    let mut props = linux_props("site", 8192);
    props.custom.insert("gateway".into(), "slurm".into());
    props.custom.insert("cluster".into(), "lyon".into());
    props
}

fn seen(slots: u32, running: u32, held: u32, waiting: u32) -> Observed {
    Observed { slots, running, held, waiting }
}

#[test]
fn slow_start_doubles_without_excess_and_falls_to_one_task_with_it() {
    let policy = FloodPolicy { algorithm: FloodAlgorithm::SlowStart, ..FloodPolicy::default() };
    assert_eq!(next_ratio(&policy, 1_000, seen(8, 8, 2, 0)), Some((2_000, FloodReason::Up)));
    assert_eq!(next_ratio(&policy, 8_000, seen(8, 8, 2, 0)), None, "at ratio_max it stays");
    // Down to one task of 8 slots: 125 thousandths (ceil of 1000 / 8).
    assert_eq!(next_ratio(&policy, 4_000, seen(8, 8, 20, 5)), Some((125, FloodReason::Down)));
    assert_eq!(allowed_slots(125, 8), 1);
}

#[test]
fn two_way_adaptive_rises_by_the_idle_share_and_falls_by_the_excess_share() {
    let policy = FloodPolicy { algorithm: FloodAlgorithm::TwoWayAdaptive, ..FloodPolicy::default() };
    // 8 slots, 2 running, 2 held: 4 idle, so up by half.
    assert_eq!(next_ratio(&policy, 1_000, seen(8, 2, 2, 0)), Some((1_500, FloodReason::Up)));
    // Nothing idle: it stays.
    assert_eq!(next_ratio(&policy, 1_000, seen(8, 6, 2, 0)), None);
    // 8 held, 6 waiting past the grace: down by 6/8.
    assert_eq!(next_ratio(&policy, 2_000, seen(8, 0, 8, 6)), Some((500, FloodReason::Down)));
    // Never below one task.
    assert_eq!(next_ratio(&policy, 200, seen(8, 0, 8, 8)), Some((125, FloodReason::Down)));
}

#[test]
fn adaptive_down_exponential_up_doubles_up_and_falls_by_the_excess_share() {
    let policy = FloodPolicy { algorithm: FloodAlgorithm::AdaptiveDownExponentialUp, waiting_allowed: 1, ..FloodPolicy::default() };
    assert_eq!(next_ratio(&policy, 1_000, seen(4, 4, 1, 1)), Some((2_000, FloodReason::Up)), "one waiting is allowed");
    assert_eq!(next_ratio(&policy, 2_000, seen(4, 0, 8, 5)), Some((1_000, FloodReason::Down)), "excess 4 of 8");
}

/// Folds the log, decides, folds the batch back; the batch's orders.
fn step(log: &mut LogBuilder, state: &mut State) -> Vec<Order> {
    for entry in &log.entries[state.last_seq.0 as usize..] {
        fold(state, entry);
        state.check_invariants();
    }
    let Some(batch) = decide(state, &InFlight::new()) else { return Vec::new() };
    let entry = log.orders(batch.clone());
    assert_eq!(fold(state, &entry), Vec::new(), "every order of the run applies");
    state.check_invariants();
    batch.orders
}

fn count(orders: &[Order], kind: &str) -> usize {
    orders.iter().filter(|order| order.kind_name() == kind).count()
}

fn ratio_orders(orders: &[Order]) -> Vec<String> {
    orders
        .iter()
        .filter_map(|order| match order {
            Order::FloodRatio { engine, ratio_milli, reason, .. } => Some(format!("{engine} {ratio_milli} {}", reason.as_str())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_gateway_holds_at_most_its_ratio_unstarted_why_names_it_and_the_ratio_falls_then_rises() {
    let mut log = LogBuilder::new();
    let mut state = State::new();
    log.at(1_000_000).push(Event::PolicySet(policy(FloodAlgorithm::SlowStart, 0)));
    log.login("lyon", 4, gateway_props());
    log.login("plain", 2, linux_props("site", 8192));
    log.submit(job_spec("camp", 20, ""));
    let first = step(&mut log, &mut state);
    assert_eq!(ratio_orders(&first), vec!["lyon 1000 start"]);
    // The start ratio allows 4 on the gateway; the plain engine takes 2 as ever.
    assert_eq!(count(&first, "Dispatch"), 6, "{first:?}");
    assert_eq!(state.engine(state.engine_idx(&engine_id("lyon")).unwrap()).used, 4);

    // Nothing starts on the gateway: past the grace and the interval, the ratio falls to one task.
    log.at(1_011_000).push(Event::Tick);
    let second = step(&mut log, &mut state);
    assert_eq!(ratio_orders(&second), vec!["lyon 250 down"]);
    assert_eq!(count(&second, "Dispatch"), 0);
    let key = state.task_key(&task("camp", 10)).unwrap();
    let lyon = state.engine_idx(&engine_id("lyon")).unwrap();
    let rules = crate::core::schedule::filters::TaskRules::new(&state, key);
    // `why`'s rule: the gateway's free slots pass, its flood cap does not.
    let lyon_fits = crate::core::schedule::filters::check(&state, &rules, lyon, 0);
    assert!(matches!(lyon_fits, Err(Unfit::NoFreeSlot { .. })), "the gateway is full: {lyon_fits:?}");

    // The gateway's four start and two finish: two slots free, but the ratio
    // allows one unstarted task, so one is dispatched and the next is held.
    let on_lyon: Vec<u32> = first
        .iter()
        .filter_map(|order| match order {
            Order::Dispatch { task, engine, .. } if engine.as_str() == "lyon" => Some(task.index),
            _ => None,
        })
        .collect();
    assert_eq!(on_lyon.len(), 4);
    for &index in &on_lyon {
        log.at(1_012_000).started("camp", index, 1, "lyon");
    }
    log.completed("camp", on_lyon[0], 1, "lyon");
    log.completed("camp", on_lyon[1], 1, "lyon");
    let third = step(&mut log, &mut state);
    let to_lyon = third.iter().filter(|order| matches!(order, Order::Dispatch { engine, .. } if engine.as_str() == "lyon")).count();
    assert_eq!(to_lyon, 1, "{third:?}");
    let waiting = (0..20).find(|&index| state.task(state.task_key(&task("camp", index)).unwrap()).status == TaskStatus::Waiting);
    let key = state.task_key(&task("camp", waiting.expect("a task waits"))).unwrap();
    let rules = crate::core::schedule::filters::TaskRules::new(&state, key);
    assert_eq!(crate::core::schedule::filters::check(&state, &rules, lyon, 0), Err(Unfit::FloodHeld { held: 1, allowed: 1 }));
    assert_eq!(Unfit::FloodHeld { held: 1, allowed: 1 }.rule_name(), "flood-held");

    // It starts at once: no excess over the next interval, the ratio doubles.
    let dispatched = third.iter().find_map(|order| match order {
        Order::Dispatch { task, engine, .. } if engine.as_str() == "lyon" => Some(task.index),
        _ => None,
    });
    log.at(1_012_500).started("camp", dispatched.unwrap(), 1, "lyon");
    log.at(1_022_000).push(Event::Tick);
    let fourth = step(&mut log, &mut state);
    assert_eq!(ratio_orders(&fourth), vec!["lyon 500 up"]);
    assert_eq!(state.flood.ratio_of(&engine_id("lyon")).unwrap().ratio_milli, 500);
}

#[test]
fn a_task_waiting_past_the_remote_queue_timeout_is_withdrawn_without_using_an_attempt() {
    let mut log = LogBuilder::new();
    let mut state = State::new();
    log.at(1_000_000).push(Event::PolicySet(policy(FloodAlgorithm::TwoWayAdaptive, 30_000)));
    log.login("lyon", 2, gateway_props());
    log.submit(job_spec("camp", 2, ""));
    let first = step(&mut log, &mut state);
    assert_eq!(count(&first, "Dispatch"), 2);
    log.at(1_000_500).started("camp", 0, 1, "lyon");
    log.at(1_031_000).push(Event::Tick);
    let second = step(&mut log, &mut state);
    let withdrawn: Vec<String> = second
        .iter()
        .filter_map(|order| match order {
            Order::Requeue { task, attempt, reason: RequeueReason::FloodWithdrawn, .. } => Some(format!("{task} #{attempt}")),
            _ => None,
        })
        .collect();
    assert_eq!(withdrawn, vec!["camp/1 #1"], "only the unstarted task: {second:?}");
    let key = state.task_key(&task("camp", 1)).unwrap();
    assert_eq!(state.task(key).failures, 0, "no attempt used");
    // It went back and was dispatched again in the same batch, or waits.
    assert!(matches!(state.task(key).status, TaskStatus::Waiting | TaskStatus::Dispatched), "{:?}", state.task(key).status);
}

/// A job of one task and one attempt dispatched to and started on `engine`
/// (logged in with `props`), which then reports it `PREEMPTED`: the log,
/// the state and the orders of the run after the report.
fn preempted_on(engine: &str, props: crate::core::event::EngineProps) -> (LogBuilder, State, Vec<Order>) {
    let mut log = LogBuilder::new();
    let mut state = State::new();
    log.at(1_000_000).push(Event::PolicySet(policy(FloodAlgorithm::SlowStart, 0)));
    log.login(engine, 2, props);
    let mut spec = job_spec("camp", 1, "");
    spec.max_attempts = 1;
    log.submit(spec);
    step(&mut log, &mut state);
    log.started("camp", 0, 1, engine);
    log.push(Event::TaskFailed {
        task: task("camp", 0),
        attempt: 1,
        engine: engine_id(engine),
        exit_code: None,
        kind: FailureKind::Preempted,
        error_tail: String::new(),
        stored: Default::default(),
    });
    let orders = step(&mut log, &mut state);
    (log, state, orders)
}

#[test]
fn a_preempted_failure_requeues_the_task_without_counting_a_failure() {
    let (mut log, mut state, orders) = preempted_on("lyon", gateway_props());
    let key = state.task_key(&task("camp", 0)).unwrap();
    assert_eq!(state.task(key).failures, 0);
    assert_eq!(count(&orders, "Dispatch"), 1, "run again though max_attempts is 1: {orders:?}");
    // An ordinary failure of that run fails the task (its one attempt).
    log.started("camp", 0, 2, "lyon");
    log.failed("camp", 0, 2, "lyon");
    step(&mut log, &mut state);
    assert_eq!(state.task(key).status, TaskStatus::Failed);
}

#[test]
fn a_preempted_failure_from_a_plain_engine_uses_the_attempt_and_fails_the_task() {
    let (_, state, orders) = preempted_on("plain", linux_props("site", 8192));
    let key = state.task_key(&task("camp", 0)).unwrap();
    assert_eq!(state.task(key).failures, 1, "a forged PREEMPTED is an ordinary failure");
    assert_eq!(state.task(key).status, TaskStatus::Failed, "its one attempt used: {orders:?}");
    assert_eq!(count(&orders, "Dispatch"), 0);
}

#[test]
fn a_flood_ratio_of_a_plain_engine_or_out_of_range_is_refused_and_changes_nothing() {
    let mut log = LogBuilder::new();
    let mut state = State::new();
    log.at(1_000_000).push(Event::PolicySet(policy(FloodAlgorithm::SlowStart, 0)));
    log.login("plain", 2, linux_props("site", 8192));
    log.login("lyon", 2, gateway_props());
    for entry in &log.entries.clone() {
        fold(&mut state, entry);
    }
    let bad = |engine: &str, ratio_milli| Order::FloodRatio { engine: engine_id(engine), ratio_milli, waiting: 0, reason: FloodReason::Up };
    let batch = OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: "sge-plain".into(),
        algorithm_version: crate::core::schedule::ALGORITHM_VERSION,
        orders: vec![bad("plain", 1_000), bad("lyon", 0), bad("lyon", RATIO_MAX_MILLI_MAX + 1), bad("ghost", 1_000)],
    };
    let entry = log.orders(batch);
    let rejections = fold(&mut state, &entry);
    assert_eq!(rejections.len(), 4, "{rejections:?}");
    assert!(state.flood.ratios.is_empty());
}
