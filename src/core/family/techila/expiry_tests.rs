//! Techila's expired tasks, scheduling cycles, project priority changes and
//! the wanting-capacity rule, through fold and schedule.

use super::*;
use crate::core::event::{EngineProps, Event, JobSpec, Order, OrderBatch, Policy, RescheduleReason, TechilaPolicy};
use crate::core::explain::{explain, Detail};
use crate::core::fold::fold;
use crate::core::ids::TaskRef;
use crate::core::reject::{OpsProblem, OrderProblem, Rejection};
use crate::core::schedule::tests::decide_once;
use crate::core::state::State;
use crate::core::testkit::*;

fn props(mflops: u64) -> EngineProps {
    let mut props = linux_props("lyon", 8192);
    props.mflops = mflops;
    props
}

fn techila(techila: TechilaPolicy) -> Event {
    Event::PolicySet(Policy { algorithm: Algorithm::Techila, techila, seed: 3, ..Policy::default() })
}

fn project(id: &str, owner: &str, n: u32, expected_ms: u64) -> JobSpec {
    let mut spec = JobSpec { owner: owner.into(), ..job_spec(id, n, "") };
    spec.options.expected_task_time_ms = expected_ms;
    spec
}

fn fold_all(log: &LogBuilder, state: &mut State) -> Vec<Rejection> {
    let mut all = Vec::new();
    for entry in &log.entries[state.last_seq.0 as usize..] {
        all.extend(fold(state, entry));
        state.check_invariants();
    }
    all
}

fn live_why(state: &State, job: &str, index: u32) -> String {
    let why = explain(state, &TaskRef { job: job_id(job), index }).unwrap();
    let Detail::Live { copied_by_family, .. } = why.detail else { panic!("{job}/{index} is live") };
    copied_by_family.map(|copied| copied.to_string()).unwrap_or_default()
}

/// Three cores, p1's three tasks on them, p2 waiting: the set-up of Figure 3.
fn figure_3() -> (LogBuilder, State) {
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy::default()));
    log.login("c0", 1, props(3_000));
    log.login("c1", 1, props(2_000));
    log.login("c2", 1, props(1_000));
    log.submit(project("p1", "ann", 3, 10_000));
    let mut state = State::new();
    expect_test::expect![[r#"
        dispatch p1/0 #1 -> c0
        dispatch p1/1 #1 -> c1
        dispatch p1/2 #1 -> c2
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    for (index, engine) in [(0, "c0"), (1, "c1"), (2, "c2")] {
        log.started("p1", index, 1, engine);
    }
    log.at(1_000_500).submit(project("p2", "bob", 2, 0));
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n", "no core is free for p2");
    (log, state)
}

#[test]
fn an_expired_task_is_copied_on_the_next_free_core_before_the_next_projects_task_and_the_first_result_cancels_the_other() {
    let (mut log, mut state) = figure_3();
    // At 10 s nothing has expired yet (longer than expected, not as long).
    log.at(1_010_000).push(Event::Tick);
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n");
    // p1/2 completes on c2 at 11 s, as p1/0 and p1/1 pass their expected 10 s:
    // both are expired; the free c2 is held back for a copy until the copies are queued.
    log.at(1_011_000).completed("p1", 2, 1, "c2");
    expect_test::expect![[r#"
        reschedule p1/0 (expired: 11000 ms > 10000 ms)
        reschedule p1/1 (expired: 11000 ms > 10000 ms)
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    // An expired task's copy takes the free core, before p2 (the copies wait
    // at the front of p1's queue, the latest expired first).
    expect_test::expect![[r#"
        dispatch p1/1 #2 -> c2
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    let p1 = state.job(state.job_idx(&job_id("p1")).unwrap());
    assert_eq!(expiry::n_expired_live(p1), 2, "stat counts both expired tasks");
    assert_eq!(live_why(&state, "p1", 1), "techila: expired after 11s (expected 10s), copy on c2 (original on c1)");
    assert_eq!(live_why(&state, "p1", 0), "techila: expired after 11s (expected 10s), its copy waits for a free core");
    // The copy wins: the slow original is cancelled at once, and the other
    // expired task's copy takes the core the winner freed, still before p2.
    log.started("p1", 1, 2, "c2");
    log.at(1_012_000).completed("p1", 1, 2, "c2");
    expect_test::expect![[r#"
        cancel p1/1 #1 on c1 (redundant-copy)
        dispatch p1/0 #2 -> c2
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    let p1 = state.job(state.job_idx(&job_id("p1")).unwrap());
    assert_eq!(p1.counts.done, 2);
    // c1, freed by the cancel, goes to p2.
    expect_test::expect![[r#"
        dispatch p2/0 #1 -> c1
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
}

#[test]
fn a_task_expires_once_only_after_it_started_and_only_under_techila() {
    let (mut log, mut state) = figure_3();
    log.at(1_011_000).completed("p1", 2, 1, "c2");
    decide_once(&mut log, &mut state);
    decide_once(&mut log, &mut state);
    // An hour later neither expired task is expired again: one copy per task.
    log.at(4_600_000).push(Event::Tick);
    let orders = decide_once(&mut log, &mut state);
    assert!(!orders.contains("reschedule"), "{orders}");
    // A dispatched task that has not started does not expire.
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy::default()));
    log.login("c0", 1, props(3_000));
    log.submit(project("p", "ann", 1, 1_000));
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    log.at(1_050_000).push(Event::Tick);
    assert!(!decide_once(&mut log, &mut state).contains("reschedule"));
    // Under another algorithm the key is read by no one.
    let mut log = LogBuilder::new();
    log.login("c0", 1, props(3_000));
    log.login("c1", 1, props(3_000));
    log.submit(project("p", "ann", 1, 1_000));
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    log.started("p", 0, 1, "c0");
    log.at(1_050_000).push(Event::Tick);
    assert!(!decide_once(&mut log, &mut state).contains("reschedule"));
}

#[test]
fn forged_stale_and_duplicated_expiry_orders_are_rejected_and_change_nothing() {
    let (mut log, mut state) = figure_3();
    let reschedule = |job: &str, index: u32| Order::Reschedule {
        task: task(job, index),
        reason: RescheduleReason::Expired,
        elapsed_ms: 1,
        limit_ms: 1,
    };
    let batch = |orders: Vec<Order>, state: &State| OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: "techila".into(),
        algorithm_version: crate::core::schedule::ALGORITHM_VERSION,
        orders,
    };
    // p2's tasks wait (not live), p1 is fine; a duplicate of a real expiry is refused.
    log.orders(batch(vec![reschedule("p2", 0), reschedule("p1", 0), reschedule("p1", 0), reschedule("p1", 99)], &state));
    let rejections = fold_all(&log, &mut state);
    let problems: Vec<String> = rejections.iter().map(|r| r.to_string()).collect();
    assert_eq!(rejections.len(), 3, "{problems:?}");
    assert!(matches!(rejections[0], Rejection::OrderNotApplicable { order: 0, problem: OrderProblem::NoCopyWanted }));
    assert!(matches!(rejections[1], Rejection::OrderNotApplicable { order: 2, problem: OrderProblem::NoCopyWanted }));
    let p1 = state.job(state.job_idx(&job_id("p1")).unwrap());
    assert_eq!(p1.families.techila.expired.len(), 1, "the projector's one accepted expiry is recorded");
    // A job with no expected time takes no expiry.
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy::default()));
    log.login("c0", 1, props(3_000));
    log.submit(project("p", "ann", 1, 0));
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    log.started("p", 0, 1, "c0");
    log.orders(batch(vec![reschedule("p", 0)], &state));
    let rejections = fold_all(&log, &mut state);
    assert!(matches!(rejections[..], [Rejection::OrderNotApplicable { problem: OrderProblem::NoCopyWanted, .. }]));
}

#[test]
fn a_task_released_from_hold_is_dispatched_at_the_next_cycle_interval_not_at_once() {
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy { cycle_interval_ms: 5_000, ..TechilaPolicy::default() }));
    log.login("c0", 1, props(3_000));
    log.login("c1", 1, props(2_000));
    log.submit(project("a", "ann", 1, 0));
    let mut held = project("h", "bob", 1, 0);
    held.options.project_priority = 2;
    log.submit(held);
    log.push(Event::JobHoldChanged { job: job_id("h"), held: true });
    let mut state = State::new();
    expect_test::expect![[r#"
        dispatch a/0 #1 -> c0
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    // Released at +1 s: no cycle event, so it waits for the interval.
    log.at(1_001_000).push(Event::JobHoldChanged { job: job_id("h"), held: false });
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n");
    assert!(!cycle::due(&state));
    log.at(1_004_000).push(Event::Tick);
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n", "4 s after the last cycle: not yet");
    log.at(1_005_000).push(Event::Tick);
    expect_test::expect![[r#"
        dispatch h/0 #1 -> c1
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
}

#[test]
fn the_seeds_cycle_events_run_a_cycle_at_once() {
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy::default()));
    log.login("c0", 1, props(3_000));
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    log.submit(project("a", "ann", 2, 0));
    assert!(decide_once(&mut log, &mut state).contains("dispatch a/0"), "a project created");
    log.started("a", 0, 1, "c0");
    log.completed("a", 0, 1, "c0");
    assert!(decide_once(&mut log, &mut state).contains("dispatch a/1"), "a task finished");
    log.submit(project("b", "bob", 1, 0));
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n");
    log.login("c1", 1, props(3_000));
    assert!(decide_once(&mut log, &mut state).contains("dispatch b/0"), "an engine added");
}

#[test]
fn a_project_priority_change_is_folded_and_bad_ones_are_rejected() {
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy::default()));
    log.login("c0", 1, props(3_000));
    log.submit(project("a", "ann", 2, 0));
    log.submit(project("b", "ann", 2, 0));
    log.submit(project("done", "ann", 1, 0));
    log.push(Event::JobCancelled { job: job_id("done"), reason: String::new() });
    let change = |job: &str, priority: u32| Event::ProjectPriorityChanged { job: job_id(job), priority };
    for (job, priority) in [("a", 0), ("a", 8), ("a", u32::MAX), ("nobody", 2), ("done", 2), ("b", 2)] {
        log.push(change(job, priority));
    }
    let mut state = State::new();
    let rejections = fold_all(&log, &mut state);
    let kinds: Vec<String> = rejections.iter().map(|r| r.to_string()).collect();
    assert_eq!(rejections.len(), 5, "{kinds:?}");
    for (at, priority) in [(0, 0), (1, 8), (2, u32::MAX)] {
        assert!(
            matches!(&rejections[at], Rejection::OpsRefused { problem: OpsProblem::Family(FamilyOpsProblem::Techila(TechilaOpsProblem::ProjectPriorityOutOfRange { priority: p })), .. } if *p == priority),
            "{kinds:?}"
        );
    }
    assert!(matches!(rejections[3], Rejection::UnknownJob { .. }));
    assert!(matches!(rejections[4], Rejection::JobAlreadyEnded { .. }));
    assert_eq!(project_priority(state.job(state.job_idx(&job_id("a")).unwrap())), PRIORITY_NORMAL);
    // b, now High, goes before ann's earlier a.
    expect_test::expect![[r#"
        dispatch b/0 #1 -> c0
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
}

#[test]
fn a_normal_project_whose_tasks_all_wait_for_dependencies_preempts_no_lowest_project() {
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy::default()));
    log.login("c0", 1, props(3_000));
    let mut low = project("low", "ann", 1, 0);
    low.options.project_priority = PRIORITY_LOWEST;
    log.submit(low);
    let mut state = State::new();
    assert!(decide_once(&mut log, &mut state).contains("dispatch low/0"));
    log.started("low", 0, 1, "c0");
    // "normal" waits for "other"'s task, which is itself waiting.
    log.submit(project("other", "carl", 1, 0));
    let mut normal = project("normal", "bob", 1, 0);
    normal.task_conditions.insert(
        0,
        crate::core::event::TaskConditions { depends_on: vec![task("other", 0)], ..Default::default() },
    );
    log.submit(normal);
    let orders = decide_once(&mut log, &mut state);
    // "other" (Normal, runnable) does want capacity: one Lowest task gives way
    // to it, not two (normal's held task wants none).
    assert_eq!(orders.matches("preempt").count(), 1, "{orders}");
    // Without "other" wanting (held by an operator), nothing is preempted.
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy::default()));
    log.login("c0", 1, props(3_000));
    let mut low = project("low", "ann", 1, 0);
    low.options.project_priority = PRIORITY_LOWEST;
    log.submit(low);
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    log.started("low", 0, 1, "c0");
    log.submit(project("other", "carl", 1, 0));
    log.push(Event::JobHoldChanged { job: job_id("other"), held: true });
    let mut normal = project("normal", "bob", 1, 0);
    normal.task_conditions.insert(
        0,
        crate::core::event::TaskConditions { depends_on: vec![task("other", 0)], ..Default::default() },
    );
    log.submit(normal);
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n", "a held Normal project preempts no Lowest one");
    assert!(!want::wants_capacity(&state, state.job_idx(&job_id("normal")).unwrap()));
}

#[test]
fn a_copy_in_flight_holds_back_one_core_and_the_other_free_cores_are_served() {
    let mut log = LogBuilder::new();
    log.push(techila(TechilaPolicy::default()));
    log.login("c0", 1, props(3_000));
    log.submit(project("p1", "ann", 1, 10_000));
    let mut state = State::new();
    assert_eq!(decide_once(&mut log, &mut state), "dispatch p1/0 #1 -> c0\n");
    log.started("p1", 0, 1, "c0");
    // At 11 s p1/0 has run past its expected 10 s as two cores log in and bob submits.
    log.at(1_011_000);
    log.login("c1", 1, props(2_000));
    log.login("c2", 1, props(1_000));
    log.submit(project("p2", "bob", 5, 0));
    // The run orders the copy and holds back the fastest free core it may take
    // (c1); the other free core (c2) is served at once, not paused.
    expect_test::expect![[r#"
        reschedule p1/0 (expired: 11000 ms > 10000 ms)
        dispatch p2/0 #1 -> c2
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    // Folded, the copy takes the held core before any task of p2.
    assert_eq!(decide_once(&mut log, &mut state), "dispatch p1/0 #2 -> c1\n");
}

#[test]
fn a_copy_running_alone_past_the_expected_time_is_not_copied_again() {
    let (mut log, mut state) = figure_3();
    log.at(1_011_000).completed("p1", 2, 1, "c2");
    decide_once(&mut log, &mut state);
    assert_eq!(decide_once(&mut log, &mut state), "dispatch p1/1 #2 -> c2\n");
    log.started("p1", 1, 2, "c2");
    // The original's engine leaves: the copy runs on alone, and long past the
    // expected time it is still not expired a second time (no third attempt).
    log.push(Event::EngineLoggedOut { engine: engine_id("c1") });
    decide_once(&mut log, &mut state);
    // At 25 s the copy has run 14 s (expected 10 s), its engine still in time.
    log.at(1_025_000).push(Event::Tick);
    let orders = decide_once(&mut log, &mut state);
    assert!(!orders.contains("reschedule p1/1"), "{orders}");
    let p1 = state.job(state.job_idx(&job_id("p1")).unwrap());
    let key = TaskKey { job: state.job_idx(&job_id("p1")).unwrap(), index: 1 };
    assert_eq!(state.live_attempts_of(key).len(), 1, "the copy alone runs");
    assert!(p1.tasks[1].is_live());
}
