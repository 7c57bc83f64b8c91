//! Resource reservation and backfilling: engines and jobs that differ only in
//! the property at stake (a lower-priority task's limit short enough or too
//! long; limits or `default_duration`; `max_reservation` 0 or 1), and the
//! adversarial ends (limits at `u64::MAX`, a reserved engine gone).

use expect_test::expect;

use super::dispatch::reservations_now;
use super::reservation::Reservation;
use super::tests::check;
use crate::core::event::{Event, JobSpec, Policy, ReservationPolicy, Span};
use crate::core::fold::fold;
use crate::core::state::State;
use crate::core::policy_limits::POLICY_DURATION_MS_MAX;
use crate::core::testkit::*;

const T0: u64 = 1_000_000;

fn policy(max_reservation: u32, default_duration_ms: u64) -> Event {
    Event::PolicySet(Policy {
        engine_timeout_ms: POLICY_DURATION_MS_MAX,
        dispatch_timeout_ms: POLICY_DURATION_MS_MAX,
        reservation: ReservationPolicy { max_reservation, default_duration_ms },
        ..Policy::default()
    })
}

fn limited(id: &str, tasks: u32, slots: u32, limit_ms: u64, priority: i32) -> JobSpec {
    let mut spec = job_spec(id, tasks, "");
    spec.slots_per_task = slots;
    spec.wall_time_limit_ms = limit_ms;
    spec.priority = priority;
    spec
}

fn reserving(id: &str, slots: u32, span: Span) -> JobSpec {
    let mut spec = limited(id, 1, slots, 60_000, 10);
    spec.options.reserve = true;
    spec.options.span = span;
    spec
}

fn fold_all(log: &LogBuilder, state: &mut State) {
    for entry in &log.entries[state.last_seq.0 as usize..] {
        fold(state, entry);
        state.check_invariants();
    }
}

/// (task, start after T0, [(engine, slots)]) per reservation.
type Rendered = Vec<(String, u64, Vec<(String, u32)>)>;

fn rendered(state: &State, reservations: &[Reservation]) -> Rendered {
    reservations
        .iter()
        .map(|r| {
            let parts = r.parts.iter().map(|&(e, slots)| (state.engine(e).id.to_string(), slots)).collect();
            (state.task_ref(r.key).to_string(), r.start_ms - T0, parts)
        })
        .collect()
}

/// One engine of 3 slots, two 1-slot fillers running with a 10 s limit from
/// T0; a 3-slot job asking for a reservation, then a 1-slot job of limit
/// `limit_ms`, both at T0 + 1 s. Returns the second decision's orders.
fn backfill_with(max_reservation: u32, limit_ms: u64) -> String {
    let mut log = LogBuilder::new();
    log.at(T0).push(policy(max_reservation, 3_600_000));
    log.login("e1", 3, linux_props("lyon", 8192));
    log.submit(limited("filler", 2, 1, 10_000, 0));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch filler/0 #1 -> e1
        dispatch filler/1 #1 -> e1
    "#]]);
    log.at(T0 + 1_000);
    log.submit(reserving("big", 3, Span::Engine));
    log.submit(limited("small", 1, 1, limit_ms, 0));
    super::tests::decide_once(&mut log, &mut state)
}

#[test]
fn a_lower_priority_task_whose_limit_ends_by_the_reservation_backfills() {
    // The reservation starts when the fillers' limits end, T0 + 10 s; small ends at T0 + 1 s + 9 s.
    assert_eq!(backfill_with(1, 9_000), "dispatch small/0 #1 -> e1\n");
    assert_eq!(backfill_with(1, 1), "dispatch small/0 #1 -> e1\n");
}

#[test]
fn a_lower_priority_task_whose_limit_ends_after_the_reservation_waits() {
    assert_eq!(backfill_with(1, 9_001), "(no orders)\n");
    // No limit counts default_duration (an hour here).
    assert_eq!(backfill_with(1, 0), "(no orders)\n");
}

#[test]
fn max_reservation_zero_is_todays_behaviour() {
    assert_eq!(backfill_with(0, 9_001), "dispatch small/0 #1 -> e1\n");
    assert_eq!(backfill_with(0, 0), "dispatch small/0 #1 -> e1\n");
}

#[test]
fn a_job_that_does_not_ask_reserves_nothing() {
    let mut log = LogBuilder::new();
    log.at(T0).push(policy(1, 3_600_000));
    log.login("e1", 3, linux_props("lyon", 8192));
    log.submit(limited("filler", 2, 1, 10_000, 0));
    let mut state = State::new();
    super::tests::decide_once(&mut log, &mut state);
    let mut big = reserving("big", 3, Span::Engine);
    big.options.reserve = false;
    log.submit(big);
    log.submit(limited("small", 1, 1, 0, 0));
    fold_all(&log, &mut state);
    assert!(reservations_now(&state).is_empty());
    check(&mut log, &mut state, expect![[r#"
        dispatch small/0 #1 -> e1
    "#]]);
}

/// Two engines alike of 2 slots; e1 runs a filler dispatched at T0 with
/// `limit_a`, e2 one dispatched at T0 + 2 s with `limit_b` (0: no limit).
fn reservation_start(limit_a: u64, limit_b: u64, default_duration_ms: u64, span: Span) -> Rendered {
    let mut log = LogBuilder::new();
    log.at(T0).push(policy(1, default_duration_ms));
    log.login("e1", 2, linux_props("lyon", 8192));
    log.login("e2", 2, linux_props("lyon", 8192));
    log.submit(limited("a", 1, 2, limit_a, 0));
    let mut state = State::new();
    super::tests::decide_once(&mut log, &mut state);
    log.at(T0 + 2_000);
    log.submit(limited("b", 1, 2, limit_b, 0));
    super::tests::decide_once(&mut log, &mut state);
    log.at(T0 + 3_000);
    log.submit(reserving("big", if span == Span::Site { 4 } else { 2 }, span));
    fold_all(&log, &mut state);
    rendered(&state, &reservations_now(&state))
}

#[test]
fn the_reservation_starts_when_the_limits_free_the_slots() {
    // One engine's worth: the soonest engine, e2's 12 s before e1's 20 s.
    assert_eq!(reservation_start(20_000, 10_000, 3_600_000, Span::Engine), vec![("big/0".into(), 12_000, vec![("e2".into(), 2)])]);
    // Ties by engine id.
    assert_eq!(reservation_start(12_000, 10_000, 3_600_000, Span::Engine), vec![("big/0".into(), 12_000, vec![("e1".into(), 2)])]);
    // A site's worth: both engines, from the later end.
    assert_eq!(
        reservation_start(20_000, 10_000, 3_600_000, Span::Site),
        vec![("big/0".into(), 20_000, vec![("e1".into(), 2), ("e2".into(), 2)])]
    );
}

#[test]
fn a_task_with_no_limit_counts_default_duration() {
    assert_eq!(reservation_start(0, 0, 30_000, Span::Engine), vec![("big/0".into(), 30_000, vec![("e1".into(), 2)])]);
    assert_eq!(reservation_start(0, 50_000, 30_000, Span::Engine), vec![("big/0".into(), 30_000, vec![("e1".into(), 2)])]);
    assert_eq!(reservation_start(0, 20_000, 30_000, Span::Engine), vec![("big/0".into(), 22_000, vec![("e2".into(), 2)])]);
}

#[test]
fn limits_at_their_maximum_saturate_and_a_default_duration_of_a_year_counts_a_year() {
    let end = u64::MAX - T0;
    let year = POLICY_DURATION_MS_MAX;
    assert_eq!(reservation_start(u64::MAX, u64::MAX, year, Span::Engine), vec![("big/0".into(), end, vec![("e1".into(), 2)])]);
    // The tasks holding the slots were dispatched 2 s after T0.
    assert_eq!(reservation_start(0, 0, year, Span::Site), vec![("big/0".into(), year + 2_000, vec![("e1".into(), 2), ("e2".into(), 2)])]);
}

#[test]
fn a_reservation_moves_when_its_engine_vanishes() {
    let mut log = LogBuilder::new();
    log.at(T0).push(policy(1, 3_600_000));
    log.login("e1", 2, linux_props("lyon", 8192));
    log.login("e2", 2, linux_props("lyon", 8192));
    log.submit(limited("a", 1, 1, 10_000, 0));
    log.submit(limited("b", 1, 1, 20_000, 0));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch a/0 #1 -> e1
        dispatch b/0 #1 -> e2
    "#]]);
    log.at(T0 + 1_000).submit(reserving("big", 2, Span::Engine));
    log.submit(limited("long", 2, 1, 0, 0));
    check(&mut log, &mut state, expect![[r#"
        dispatch long/0 #1 -> e2
    "#]]);
    assert_eq!(rendered(&state, &reservations_now(&state)), vec![("big/0".into(), 10_000, vec![("e1".into(), 2)])]);
    // e1 logs out: its attempt is requeued, and the reservation goes to e2, the
    // only engine left, which is full for ever (long has no limit: an hour).
    log.push(Event::EngineLoggedOut { engine: engine_id("e1") });
    fold_all(&log, &mut state);
    let now = rendered(&state, &reservations_now(&state));
    assert_eq!(now, vec![("big/0".into(), 3_601_000, vec![("e2".into(), 2)])]);
    // Every engine gone: nothing to reserve, nothing decided, nothing panics.
    log.push(Event::EngineLoggedOut { engine: engine_id("e2") });
    fold_all(&log, &mut state);
    assert!(reservations_now(&state).is_empty());
    check(&mut log, &mut state, expect![[r#"
        (no orders)
    "#]]);
}

#[test]
fn max_reservation_caps_the_jobs_that_reserve() {
    let mut log = LogBuilder::new();
    log.at(T0).push(policy(1, 3_600_000));
    for e in ["e1", "e2"] {
        log.login(e, 2, linux_props("lyon", 8192));
    }
    log.submit(limited("a", 1, 1, 10_000, 0));
    log.submit(limited("b", 1, 1, 20_000, 0));
    let mut state = State::new();
    super::tests::decide_once(&mut log, &mut state);
    log.submit(reserving("big1", 2, Span::Engine));
    log.submit(reserving("big2", 2, Span::Engine));
    fold_all(&log, &mut state);
    let one = rendered(&state, &reservations_now(&state));
    assert_eq!(one, vec![("big1/0".into(), 10_000, vec![("e1".into(), 2)])]);
    log.push(policy(2, 3_600_000));
    fold_all(&log, &mut state);
    let two = rendered(&state, &reservations_now(&state));
    assert_eq!(two, vec![("big1/0".into(), 10_000, vec![("e1".into(), 2)]), ("big2/0".into(), 20_000, vec![("e2".into(), 2)])]);
}

#[test]
fn why_names_the_reservation_a_task_holds_and_the_one_that_holds_a_task_off() {
    let mut log = LogBuilder::new();
    log.at(T0).push(policy(1, 3_600_000));
    log.login("e1", 3, linux_props("lyon", 8192));
    log.submit(limited("filler", 2, 1, 10_000, 0));
    let mut state = State::new();
    super::tests::decide_once(&mut log, &mut state);
    log.at(T0 + 1_000);
    log.submit(reserving("big", 3, Span::Engine));
    log.submit(limited("long", 1, 1, 9_500, 0));
    fold_all(&log, &mut state);
    let why = |job: &str| {
        let text = crate::core::explain::explain(&state, &task(job, 0)).unwrap().to_string();
        text.lines().filter(|line| line.contains("reserv")).map(str::trim).collect::<Vec<_>>().join("\n")
    };
    expect!["reserved 3 slots on e1: 3, expected start at log time 1010000 (in 9.0 s)"].assert_eq(&why("big"));
    expect!["waiting for a reservation: big/0 reserves e1's slots from log time 1010000 (in 9.0 s); my limit ends at 1010500 (in 9.5 s)"]
        .assert_eq(&why("long"));
}
