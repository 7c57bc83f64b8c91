//! Operator commands and jobs in parts in the fold and the scheduler: hold and
//! release, drain and resume, one task's cancel, parts held until the last;
//! and the adversarial cases (unknown, duplicated, stale, too many).

use crate::core::event::{Event, Order, TaskSet};
use crate::core::fold::fold;
use crate::core::reject::{OpsProblem, Rejection};
use crate::core::schedule::{decide, InFlight};
use crate::core::state::{JobStatus, State, TaskStatus};
use crate::core::testkit::*;

/// Folds the entry, checks the invariants, returns the rejections' kinds.
fn step(state: &mut State, entry: crate::core::event::Entry) -> Vec<&'static str> {
    let kinds = fold(state, &entry).iter().map(Rejection::kind_name).collect();
    state.check_invariants();
    kinds
}

/// Runs the scheduler and folds its batch back; returns the orders as text.
fn run(log: &mut LogBuilder, state: &mut State) -> Vec<String> {
    let Some(batch) = decide(state, &InFlight::default()) else { return Vec::new() };
    let said = batch.orders.iter().map(Order::to_string).collect();
    assert!(step(state, log.orders(batch)).is_empty());
    said
}

fn grid(engines: &[(&str, u32)]) -> (LogBuilder, State) {
    let mut log = LogBuilder::new();
    let mut state = State::new();
    for entry in log.entries.clone() {
        step(&mut state, entry);
    }
    for &(engine, slots) in engines {
        assert!(step(&mut state, log.login(engine, slots, linux_props("lyon", 8192))).is_empty());
    }
    (log, state)
}

fn hold(job: &str, held: bool) -> Event {
    Event::JobHoldChanged { job: job_id(job), held }
}
fn drain(engine: &str, drained: bool) -> Event {
    Event::EngineDrainChanged { engine: engine_id(engine), drained }
}
fn cancel(job: &str, index: u32) -> Event {
    Event::TaskCancelled { task: task(job, index) }
}

#[test]
fn a_held_job_gets_no_dispatch_until_released_and_why_says_held() {
    let (mut log, mut state) = grid(&[("e1", 2)]);
    assert!(step(&mut state, log.submit(job_spec("j", 2, ""))).is_empty());
    assert!(step(&mut state, log.push(hold("j", true))).is_empty());
    assert_eq!(run(&mut log, &mut state), Vec::<String>::new());
    let why = crate::core::explain::explain(&state, &task("j", 0)).unwrap().to_string();
    assert!(why.contains("held by an operator"), "{why}");
    assert_eq!(step(&mut state, log.push(hold("j", true))), ["already-held"]);
    assert!(step(&mut state, log.push(hold("j", false))).is_empty());
    assert_eq!(step(&mut state, log.push(hold("j", false))), ["not-held"]);
    assert_eq!(run(&mut log, &mut state).len(), 2);
}

#[test]
fn hold_of_an_unknown_or_ended_job_is_rejected() {
    let (mut log, mut state) = grid(&[("e1", 1)]);
    assert_eq!(step(&mut state, log.push(hold("nope", true))), ["unknown-job"]);
    assert!(step(&mut state, log.submit(job_spec("j", 1, ""))).is_empty());
    assert!(step(&mut state, log.push(Event::JobCancelled { job: job_id("j"), reason: String::new() })).is_empty());
    assert_eq!(step(&mut state, log.push(hold("j", true))), ["job-already-ended"]);
}

#[test]
fn a_drained_engine_gets_no_new_work_its_running_task_finishes_and_why_names_the_rule() {
    let (mut log, mut state) = grid(&[("e1", 1), ("e2", 1)]);
    assert!(step(&mut state, log.submit(job_spec("j", 3, ""))).is_empty());
    assert_eq!(run(&mut log, &mut state), ["dispatch j/0 #1 -> e1", "dispatch j/1 #1 -> e2"]);
    assert!(step(&mut state, log.push(drain("e1", true))).is_empty());
    assert_eq!(step(&mut state, log.push(drain("e1", true))), ["already-drained"]);
    assert!(step(&mut state, log.completed("j", 0, 1, "e1")).is_empty(), "its running task finishes");
    assert_eq!(run(&mut log, &mut state), Vec::<String>::new(), "e1 is free but drained");
    let why = crate::core::explain::explain(&state, &task("j", 2)).unwrap().to_string();
    assert!(why.contains("excluded by engine-drained: e1"), "{why}");
    assert!(step(&mut state, log.push(drain("e1", false))).is_empty());
    assert_eq!(step(&mut state, log.push(drain("e1", false))), ["not-drained"]);
    assert_eq!(run(&mut log, &mut state), ["dispatch j/2 #1 -> e1"]);
}

#[test]
fn a_drain_of_an_unknown_engine_is_rejected_and_a_drain_outlives_a_new_login() {
    let (mut log, mut state) = grid(&[("e1", 1)]);
    assert_eq!(step(&mut state, log.push(drain("ghost", true))), ["unknown-engine"]);
    assert!(step(&mut state, log.push(drain("e1", true))).is_empty());
    assert!(step(&mut state, log.login("e1", 1, linux_props("lyon", 8192))).is_empty());
    assert!(step(&mut state, log.submit(job_spec("j", 1, ""))).is_empty());
    assert_eq!(run(&mut log, &mut state), Vec::<String>::new());
}

#[test]
fn a_waiting_task_is_cancelled_at_once_and_a_running_one_by_a_cancel_order() {
    let (mut log, mut state) = grid(&[("e1", 1)]);
    assert!(step(&mut state, log.submit(job_spec("j", 3, ""))).is_empty());
    assert_eq!(run(&mut log, &mut state), ["dispatch j/0 #1 -> e1"]);
    assert!(step(&mut state, log.push(cancel("j", 2))).is_empty());
    assert_eq!(state.task(state.task_key(&task("j", 2)).unwrap()).status, TaskStatus::Cancelled);
    assert_eq!(step(&mut state, log.push(cancel("j", 2))), ["task-already-ended"]);
    assert!(step(&mut state, log.started("j", 0, 1, "e1")).is_empty());
    assert!(step(&mut state, log.push(cancel("j", 0))).is_empty());
    assert_eq!(step(&mut state, log.push(cancel("j", 0))), ["cancel-already-requested"]);
    assert_eq!(run(&mut log, &mut state), ["cancel j/0 #1 on e1 (task-cancelled)"]);
    let key = state.task_key(&task("j", 0)).unwrap();
    assert_eq!(state.task(key).status, TaskStatus::Cancelled);
    // The slot freed by the cancel goes to the last task; it completes and the
    // job, with no failure, is done.
    assert_eq!(run(&mut log, &mut state), ["dispatch j/1 #1 -> e1"]);
    assert!(step(&mut state, log.completed("j", 1, 1, "e1")).is_empty());
    assert_eq!(state.job(state.job_idx(&job_id("j")).unwrap()).status, JobStatus::Done);
}

#[test]
fn a_cancelled_task_whose_attempt_fails_first_is_not_retried() {
    let (mut log, mut state) = grid(&[("e1", 1)]);
    assert!(step(&mut state, log.submit(job_spec("j", 1, ""))).is_empty());
    run(&mut log, &mut state);
    assert!(step(&mut state, log.push(cancel("j", 0))).is_empty());
    assert!(step(&mut state, log.failed("j", 0, 1, "e1")).is_empty());
    assert_eq!(state.job(state.job_idx(&job_id("j")).unwrap()).status, JobStatus::Cancelled);
    assert_eq!(run(&mut log, &mut state), Vec::<String>::new());
}

#[test]
fn a_cancel_of_an_unknown_task_or_job_is_rejected() {
    let (mut log, mut state) = grid(&[("e1", 1)]);
    assert_eq!(step(&mut state, log.push(cancel("nope", 0))), ["unknown-job"]);
    assert!(step(&mut state, log.submit(job_spec("j", 2, ""))).is_empty());
    assert_eq!(step(&mut state, log.push(cancel("j", 2))), ["unknown-task"]);
    assert_eq!(step(&mut state, log.push(cancel("j", u32::MAX))), ["unknown-task"]);
}

fn listed(n: u32) -> Vec<std::collections::BTreeMap<String, String>> {
    (0..n).map(|i| [("x".to_string(), i.to_string())].into()).collect()
}

#[test]
fn a_job_in_parts_waits_for_its_last_part_and_a_part_too_many_is_refused() {
    let (mut log, mut state) = grid(&[("e1", 4)]);
    let mut spec = job_spec("big", 1, "");
    spec.tasks = TaskSet::List(listed(2));
    spec.options.tasks_total = Some(5);
    assert!(step(&mut state, log.submit(spec)).is_empty());
    assert_eq!(run(&mut log, &mut state), Vec::<String>::new(), "2 of 5 tasks: not started");
    let why = crate::core::explain::explain(&state, &task("big", 0)).unwrap().to_string();
    assert!(why.contains("awaits its parts: 2 of 5"), "{why}");
    let part = |n| Event::TasksAdded { job: job_id("big"), tasks: listed(n), conditions: Default::default() };
    assert!(step(&mut state, log.push(part(2))).is_empty());
    assert_eq!(run(&mut log, &mut state), Vec::<String>::new(), "4 of 5");
    assert_eq!(step(&mut state, log.push(part(2))), ["parts-inconsistent"], "6 would exceed 5");
    assert!(step(&mut state, log.push(part(1))).is_empty());
    assert_eq!(run(&mut log, &mut state).len(), 4, "complete: dispatched");
    assert_eq!(step(&mut state, log.push(part(1))), ["parts-inconsistent"]);
}

#[test]
fn a_declared_total_below_the_first_part_or_above_the_limit_is_refused() {
    let (mut log, mut state) = grid(&[("e1", 1)]);
    let mut spec = job_spec("small", 1, "");
    spec.tasks = TaskSet::List(listed(3));
    spec.options.tasks_total = Some(2);
    assert_eq!(step(&mut state, log.submit(spec.clone())), ["parts-inconsistent"]);
    spec.options.tasks_total = Some(u32::MAX);
    assert_eq!(step(&mut state, log.submit(spec)), ["parts-inconsistent"]);
    assert!(state.job_idx(&job_id("small")).is_none());
    let refused = &state.rejections.recent.back().unwrap().rejection;
    assert!(matches!(refused, Rejection::OpsRefused { problem: OpsProblem::PartsInconsistent { .. }, .. }));
}
