//! Scenario tests of fold and schedule together: a hand-built log is folded, the
//! projector's decision is appended and folded back, and the orders are compared
//! with expectations a person can read (`UPDATE_EXPECT=1` regenerates them).

use expect_test::{expect, Expect};

use super::{decide, InFlight};
use crate::core::event::{Event, OrderBatch, Policy};
use crate::core::fold::fold;
use crate::core::state::{JobStatus, State, TaskStatus};
use crate::core::testkit::*;

/// Folds what the builder holds, then lets the projector decide once and folds
/// its batch back. Returns the orders, rendered one per line.
pub(crate) fn decide_once(log: &mut LogBuilder, state: &mut State) -> String {
    for entry in &log.entries[state.last_seq.0 as usize..] {
        fold(state, entry);
        state.check_invariants();
    }
    let Some(batch) = decide(state, &InFlight::new()) else { return "(no orders)\n".into() };
    let rendered = render(&batch);
    let entry = log.orders(batch);
    let rejections = fold(state, &entry);
    assert!(rejections.is_empty(), "a fresh decision applies cleanly: {rejections:?}");
    state.check_invariants();
    rendered
}

fn render(batch: &OrderBatch) -> String {
    batch.orders.iter().map(|order| format!("{order}\n")).collect()
}

pub(super) fn check(log: &mut LogBuilder, state: &mut State, expect: Expect) {
    expect.assert_eq(&decide_once(log, state));
}

#[test]
fn a_bag_of_tasks_fills_the_least_loaded_engines_first() {
    let mut log = LogBuilder::new();
    log.login("e2", 2, linux_props("lyon", 8192));
    log.login("e1", 2, linux_props("lyon", 8192));
    log.submit(job_spec("bag", 5, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch bag/0 #1 -> e1
        dispatch bag/1 #1 -> e2
        dispatch bag/2 #1 -> e1
        dispatch bag/3 #1 -> e2
    "#]]);
    assert_eq!(state.job(state.job_idx(&job_id("bag")).unwrap()).counts.waiting, 1);
    log.started("bag", 0, 1, "e1");
    log.completed("bag", 0, 1, "e1");
    check(&mut log, &mut state, expect![[r#"
        dispatch bag/4 #1 -> e1
    "#]]);
}

#[test]
fn priority_overrides_submission_order() {
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    log.submit(job_spec("first", 2, ""));
    let mut urgent = job_spec("urgent", 1, "");
    urgent.priority = 10;
    log.submit(urgent);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch urgent/0 #1 -> e1
    "#]]);
}

#[test]
fn requirements_exclude_engines_and_impossible_jobs_are_flagged() {
    let mut log = LogBuilder::new();
    log.login("small", 4, linux_props("lyon", 1024));
    let mut big = job_spec("big", 1, "");
    big.slots_per_task = 8;
    log.submit(big);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        unschedulable big (no-engine-has-enough-slots)
    "#]]);
    let job = state.job_idx(&job_id("big")).unwrap();
    assert!(state.job(job).unschedulable.is_some());
    log.login("huge", 16, linux_props("lyon", 1024));
    check(&mut log, &mut state, expect![[r#"
        dispatch big/0 #1 -> huge
    "#]]);
    assert!(state.job(job).unschedulable.is_none(), "an engine that fits clears the flag");
}

#[test]
fn a_failed_attempt_is_retried_elsewhere_and_exhaustion_fails_the_job() {
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    log.login("e2", 1, linux_props("lyon", 8192));
    let mut spec = job_spec("flaky", 1, "");
    spec.max_attempts = 2;
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch flaky/0 #1 -> e1
    "#]]);
    log.failed("flaky", 0, 1, "e1");
    check(&mut log, &mut state, expect![[r#"
        dispatch flaky/0 #2 -> e2
    "#]]);
    log.failed("flaky", 0, 2, "e2");
    check(&mut log, &mut state, expect![[r#"
        (no orders)
    "#]]);
    let job = state.job(state.job_idx(&job_id("flaky")).unwrap());
    assert_eq!(job.status, JobStatus::Failed);
    assert_eq!(job.task(0).unwrap().status, TaskStatus::Failed);
}

#[test]
fn a_silent_engine_is_lost_and_its_tasks_run_elsewhere() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(Policy { engine_timeout_ms: 5_000, ..Policy::default() }));
    log.login("e1", 1, linux_props("lyon", 8192));
    log.submit(job_spec("j", 1, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> e1
    "#]]);
    log.started("j", 0, 1, "e1");
    let now = log.time_ms;
    log.at(now + 1_000).login("e2", 1, linux_props("lyon", 8192));
    log.at(now + 6_000).push(Event::Tick);
    check(&mut log, &mut state, expect![[r#"
        lost e1 (last seen 1000000)
    "#]]);
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #2 -> e2
    "#]]);
    // The lost engine's late report is stale.
    let entry = log.completed("j", 0, 1, "e1");
    let rejections = fold(&mut state, &entry);
    assert_eq!(rejections.len(), 1, "{rejections:?}");
}

/// A login opens a new epoch of the engine agent, which runs nothing: the
/// attempts the previous epoch held go back to the queue, each by a Requeue
/// order whose reason is on the log (`engine-restarted`), before anything new
/// is dispatched there. (Found by the simulator: an engine that crashed and came
/// back before being declared lost heartbeated on while its old attempts stayed
/// live for ever; and on a real grid: a task ran twice with nothing on the log
/// to say why, when the fold requeued them silently.)
#[test]
fn an_engine_that_logs_in_again_holds_none_of_its_old_attempts() {
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    log.submit(job_spec("j", 1, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> e1
    "#]]);
    log.started("j", 0, 1, "e1");
    log.login("e1", 1, linux_props("lyon", 8192));
    check(&mut log, &mut state, expect![[r#"
        requeue j/0 #1 from e1 (engine-restarted)
    "#]]);
    assert_eq!(state.totals.requeues, 1);
    // The old epoch's report is refused.
    let entry = log.completed("j", 0, 1, "e1");
    assert_eq!(fold(&mut state, &entry).len(), 1);
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #2 -> e1
    "#]]);
}

/// The same, with fewer slots than the old epoch had in use: its attempts stay
/// booked until their requeues fold, and nothing new lands there meanwhile;
/// then the engine fills only the slots it has now.
#[test]
fn an_engine_that_logs_in_again_with_fewer_slots_stays_within_them() {
    let mut log = LogBuilder::new();
    log.login("e1", 2, linux_props("lyon", 8192));
    log.submit(job_spec("j", 2, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> e1
        dispatch j/1 #1 -> e1
    "#]]);
    log.login("e1", 1, linux_props("lyon", 8192));
    check(&mut log, &mut state, expect![[r#"
        requeue j/0 #1 from e1 (engine-restarted)
        requeue j/1 #1 from e1 (engine-restarted)
    "#]]);
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #2 -> e1
    "#]]);
    assert_eq!(state.engine(state.engine_idx(&engine_id("e1")).unwrap()).used, 1);
}

/// One task dispatched to e1 under a 2 s dispatch timeout, not reported started.
fn one_dispatch_with_a_two_second_timeout() -> (LogBuilder, State) {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(Policy { dispatch_timeout_ms: 2_000, engine_timeout_ms: 60_000, ..Policy::default() }));
    log.login("e1", 1, linux_props("lyon", 8192));
    log.submit(job_spec("j", 1, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> e1
    "#]]);
    (log, state)
}

#[test]
fn a_dispatch_not_started_in_time_is_requeued() {
    let (mut log, mut state) = one_dispatch_with_a_two_second_timeout();
    let now = log.time_ms;
    log.at(now + 2_500).push(Event::Tick);
    check(&mut log, &mut state, expect![[r#"
        requeue j/0 #1 from e1 (dispatch-timeout)
    "#]]);
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #2 -> e1
    "#]]);
}

#[test]
fn cancelling_a_job_cancels_its_running_attempts() {
    let mut log = LogBuilder::new();
    log.login("e1", 2, linux_props("lyon", 8192));
    log.submit(job_spec("j", 3, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> e1
        dispatch j/1 #1 -> e1
    "#]]);
    log.started("j", 0, 1, "e1");
    log.push(Event::JobCancelled { job: job_id("j"), reason: "user asked".into() });
    check(&mut log, &mut state, expect![[r#"
        cancel j/0 #1 on e1 (job-cancelled)
        cancel j/1 #1 on e1 (job-cancelled)
    "#]]);
    let job = state.job(state.job_idx(&job_id("j")).unwrap());
    assert_eq!(job.status, JobStatus::Cancelled);
    assert_eq!(job.counts.cancelled, 3);
    assert_eq!(state.engine(state.engine_idx(&engine_id("e1")).unwrap()).used, 0);
}

/// A job cancelled when one of its dispatches is past the dispatch timeout: the
/// attempt is ended by one order only (the requeue, the first stage's), never by
/// a requeue and a cancel in one batch, which the fold would refuse in part.
/// (Seen in the bounded-state soak.)
#[test]
fn an_attempt_both_overdue_and_of_a_cancelled_job_is_ended_once() {
    let (mut log, mut state) = one_dispatch_with_a_two_second_timeout();
    let now = log.time_ms;
    log.at(now + 2_500).push(Event::JobCancelled { job: job_id("j"), reason: "user asked".into() });
    check(&mut log, &mut state, expect![[r#"
        requeue j/0 #1 from e1 (dispatch-timeout)
    "#]]);
    let job = state.job(state.job_idx(&job_id("j")).unwrap());
    assert_eq!(job.status, JobStatus::Cancelled);
    assert_eq!(state.engine(state.engine_idx(&engine_id("e1")).unwrap()).used, 0);
    check(&mut log, &mut state, expect![[r#"
        (no orders)
    "#]]);
}

#[test]
fn orders_in_flight_are_not_decided_twice() {
    let mut log = LogBuilder::new();
    log.login("e1", 2, linux_props("lyon", 8192));
    log.submit(job_spec("j", 3, ""));
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    let first = decide(&state, &InFlight::new()).unwrap();
    let in_flight = InFlight::from_batches(&state, [&first]);
    assert!(decide(&state, &in_flight).is_none(), "both slots are booked by the batch in flight");
    assert_eq!(render(&first), "dispatch j/0 #1 -> e1\ndispatch j/1 #1 -> e1\n");
}

#[test]
fn bad_input_is_rejected_and_changes_nothing_else() {
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    log.submit(job_spec("j", 1, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> e1
    "#]]);
    let before = state.totals.clone();
    let cases = [
        log.push_undecodable(b"\xff\x00garbage"),
        log.submit(job_spec("j", 1, "")),
        log.completed("nope", 0, 1, "e1"),
        log.completed("j", 7, 1, "e1"),
        log.completed("j", 0, 9, "e1"),
        log.push_from(
            crate::core::event::Origin::Engine(engine_id("e2")),
            Event::TaskCompleted { task: task("j", 0), attempt: 1, engine: engine_id("e1"), exit_code: 0, cpu_ms: 0, wall_ms: 0, result: vec![], stored: Default::default() },
        ),
        log.push(Event::TaskCompleted { task: task("j", 0), attempt: 1, engine: engine_id("e1"), exit_code: 0, cpu_ms: 0, wall_ms: 0, result: vec![0; 70_000], stored: Default::default() }),
    ];
    let mut reasons = String::new();
    for entry in &cases {
        for rejection in fold(&mut state, entry) {
            reasons.push_str(&format!("{}: {rejection}\n", rejection.kind_name()));
        }
        state.check_invariants();
    }
    expect![[r#"
        undecodable: payload does not decode: test garbage
        duplicate-job: job j was already submitted
        unknown-job: no job nope
        unknown-task: no task j/7
        stale-attempt: attempt 9 of j/0 is not live
        forged-engine: engine e2 published an event naming engine e1
        result-too-large: result of j/0 has 70000 bytes, more than 65536
    "#]]
    .assert_eq(&reasons);
    assert_eq!(state.totals.dispatches, before.dispatches);
    assert_eq!(state.totals.tasks_done, 0);
    assert_eq!(state.rejections.total, 7);
    // Re-folding an entry already applied is a no-op.
    let digest = state.chain;
    assert!(fold(&mut state, &cases[2]).is_empty());
    assert_eq!(state.chain, digest);
}

#[test]
fn snapshots_round_trip_and_digest_alike() {
    let mut log = LogBuilder::new();
    log.login("e1", 2, linux_props("lyon", 8192));
    log.submit(job_spec("j", 3, ""));
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    let restored = State::from_snapshot(&state.to_snapshot()).unwrap();
    assert_eq!(restored.state_digest(), state.state_digest());
    assert_eq!(restored.chain, state.chain);
}

#[test]
fn why_lists_the_engine_a_retry_avoids_under_its_rule_not_as_a_fit_and_dispatch_agrees() {
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    log.login("e2", 1, linux_props("lyon", 8192));
    log.submit(job_spec("job", 1, ""));
    let mut state = State::new();
    assert_eq!(decide_once(&mut log, &mut state), "dispatch job/0 #1 -> e1\n");
    log.started("job", 0, 1, "e1");
    log.failed("job", 0, 1, "e1");
    for entry in &log.entries[state.last_seq.0 as usize..] {
        fold(&mut state, entry);
    }
    let task = crate::core::ids::TaskRef::new(job_id("job"), 0);
    let crate::core::explain::Detail::Waiting { fit_now, excluded, .. } =
        crate::core::explain::explain(&state, &task).unwrap().detail
    else {
        panic!("the task waits")
    };
    assert_eq!(fit_now, vec!["e2".to_string()]);
    assert_eq!(excluded.get("retry-avoids-engine"), Some(&vec!["e1".to_string()]));
    assert_eq!(decide_once(&mut log, &mut state), "dispatch job/0 #2 -> e2\n");
}
