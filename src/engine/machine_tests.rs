//! The engine's decisions with no broker and no process: deliveries, starts
//! and exits go in, the actions that come out are checked.

use super::*;
use crate::core::event::OutputPolicy;
use crate::core::ids::JobId;

fn engine() -> EngineId {
    EngineId::new("e1").unwrap()
}

fn task(index: u32) -> TaskRef {
    TaskRef::new(JobId::new("render").unwrap(), index)
}

/// A machine of `slots` slots, logged in at epoch 10.
fn machine(slots: u32) -> Machine {
    let mut machine = Machine::new(MachineConfig { engine: engine(), slots, seen_max: 100, drain_timeout_ms: 30_000 });
    machine.handle_logged_in(10);
    machine
}

fn run_task(index: u32, attempt: Attempt, slots: u32) -> RunTask {
    RunTask {
        task: task(index),
        attempt,
        argv: vec!["true".into()],
        params: BTreeMap::new(),
        wall_time_limit_ms: 0,
        slots,
        root_library: None,
        output_bytes_max: OutputPolicy::default().task_bytes_max,
        work_dir_retention_ms: OutputPolicy::default().work_dir_retention_ms,
        nodes: Vec::new(),
        companion: false,
        companion_argv: Vec::new(),
    }
}

/// A delivery of the batch at `batch_seq`, in epoch 10.
fn delivery(batch_seq: u64, kind: DeliveryKind) -> Delivery {
    Delivery { id: format!("{batch_seq}-0"), batch_seq: Seq(batch_seq), engine: engine(), epoch: 10, kind }
}

fn dispatch(batch_seq: u64, run: RunTask) -> Delivery {
    delivery(batch_seq, DeliveryKind::Run(run))
}

fn cancel(batch_seq: u64, index: u32, attempt: Attempt) -> Delivery {
    let order = Order::Cancel { task: task(index), attempt, engine: engine(), reason: CancelReason::JobCancelled };
    delivery(batch_seq, DeliveryKind::Cancel(order))
}

fn preempt(batch_seq: u64, index: u32, attempt: Attempt) -> Delivery {
    delivery(batch_seq, DeliveryKind::Control(Order::Preempt { task: task(index), attempt, engine: engine() }))
}

fn actions(machine: &mut Machine) -> Vec<Action> {
    std::iter::from_fn(|| machine.poll_action()).collect()
}

fn exit(end: RunEnd) -> RunOutcome {
    RunOutcome {
        end,
        cpu_ms: 5,
        wall_ms: 7,
        stdout_head: b"42".to_vec(),
        stdout_dropped_bytes: 0,
        stderr_tail: String::new(),
        stdout_truncated: false,
        stderr_truncated: false,
        stdout_kept_bytes: 2,
        stderr_kept_bytes: 0,
    }
}

/// The one report among `actions`: its event's kind and the dispatch it answers.
fn reports(actions: &[Action]) -> Vec<(&'static str, Seq)> {
    actions
        .iter()
        .filter_map(|action| match action {
            Action::Report(report) => Some((report.event.kind_name(), report.dispatch)),
            _ => None,
        })
        .collect()
}

/// The failures reported among `actions` (kind, exit code), when every action is one.
fn failures(actions: &[Action]) -> Vec<(FailureKind, Option<i32>)> {
    actions
        .iter()
        .map(|action| match action {
            Action::Report(report) => match &report.event {
                Event::TaskFailed { kind, exit_code, .. } => (*kind, *exit_code),
                other => panic!("not a failure: {other:?}"),
            },
            other => panic!("not a report: {other:?}"),
        })
        .collect()
}

#[test]
fn a_dispatch_is_launched_started_and_reported_completed_with_its_output_to_store() {
    let mut machine = machine(2);
    let run = run_task(3, 1, 2);
    assert_eq!(machine.handle_delivery(dispatch(20, run.clone())), Ok(Handled::Acted));
    assert_eq!(actions(&mut machine), vec![Action::Launch { run, dispatch: Seq(20), slots: 2 }]);
    assert_eq!(machine.slots_used(), 2, "held from the launch");
    machine.handle_started((task(3), 1), String::new());
    assert_eq!(reports(&actions(&mut machine)), vec![("TaskStarted", Seq(20))]);
    machine.handle_exited((task(3), 1), &exit(RunEnd::Exited(0)));
    let ended = actions(&mut machine);
    let [Action::Report(report)] = &ended[..] else { panic!("one report: {ended:?}") };
    assert!(matches!(&report.event, Event::TaskCompleted { cpu_ms: 5, wall_ms: 7, result, .. } if result == b"42"), "{report:?}");
    assert_eq!(report.output.map(|kept| kept.stdout_kept_bytes), Some(2), "its output to store");
    assert!(machine.is_idle() && machine.slots_used() == 0);
    let counts = machine.counts();
    assert_eq!((counts.deliveries, counts.started, counts.completed), (1, 1, 1));
}

#[test]
fn a_repeated_delivery_and_a_repeated_attempt_are_ignored() {
    let mut machine = machine(4);
    machine.handle_delivery(dispatch(20, run_task(0, 1, 1))).unwrap();
    assert_eq!(machine.handle_delivery(dispatch(20, run_task(0, 1, 1))), Ok(Handled::Duplicate), "the same delivery id");
    assert_eq!(machine.handle_delivery(dispatch(21, run_task(0, 1, 1))), Ok(Handled::Duplicate), "the same attempt");
    assert_eq!(actions(&mut machine).len(), 1, "launched once");
    assert_eq!(machine.counts().duplicates_ignored, 2);
}

#[test]
fn a_run_beyond_the_free_slots_is_reported_failed_and_not_launched() {
    let mut machine = machine(2);
    machine.handle_delivery(dispatch(20, run_task(0, 1, 2))).unwrap();
    machine.handle_delivery(dispatch(21, run_task(1, 1, 1))).unwrap();
    let actions = actions(&mut machine);
    assert!(matches!(actions[0], Action::Launch { slots: 2, .. }));
    let Action::Report(report) = &actions[1] else { panic!("a failure report: {actions:?}") };
    let Event::TaskFailed { kind, error_tail, .. } = &report.event else { panic!("a failure report: {report:?}") };
    assert_eq!((*kind, report.dispatch), (FailureKind::LaunchFailed, Seq(21)));
    assert!(error_tail.contains("needs 1 slot(s) and 0 of the engine's 2 are free"), "{error_tail}");
    assert_eq!(machine.slots_used(), 2);
}

#[test]
fn a_cancel_of_a_running_attempt_stops_it_and_nothing_more_is_said() {
    let mut machine = machine(1);
    machine.handle_delivery(dispatch(20, run_task(0, 1, 1))).unwrap();
    machine.handle_started((task(0), 1), String::new());
    actions(&mut machine);
    assert_eq!(machine.handle_delivery(cancel(30, 0, 1)), Ok(Handled::Acted));
    assert_eq!(actions(&mut machine), vec![Action::Stop { key: (task(0), 1), reason: StopReason::Cancel }]);
    machine.handle_exited((task(0), 1), &exit(RunEnd::Killed));
    assert_eq!(actions(&mut machine), vec![], "the projector ended it: no report");
    assert_eq!((machine.counts().stopped_on_order, machine.slots_used()), (1, 0));
    assert_eq!(machine.handle_delivery(dispatch(31, run_task(0, 1, 1))), Ok(Handled::Duplicate), "never started again");
}

#[test]
fn an_attempt_cancelled_before_it_started_is_not_reported_started() {
    let mut machine = machine(1);
    machine.handle_delivery(dispatch(20, run_task(0, 1, 1))).unwrap();
    machine.handle_delivery(cancel(21, 0, 1)).unwrap();
    actions(&mut machine);
    machine.handle_started((task(0), 1), String::new());
    assert_eq!(actions(&mut machine), vec![], "started after it was stopped");
    assert_eq!(machine.counts().started, 0);
}

#[test]
fn a_wall_time_limit_passed_is_reported_as_such() {
    let mut machine = machine(1);
    let mut run = run_task(0, 1, 1);
    run.wall_time_limit_ms = 500;
    machine.handle_delivery(dispatch(20, run)).unwrap();
    machine.handle_started((task(0), 1), String::new());
    actions(&mut machine);
    // The runner stopped it at its limit, even if it then exited 0 on SIGTERM.
    machine.handle_exited((task(0), 1), &exit(RunEnd::WallTimeExceeded));
    let ended = actions(&mut machine);
    assert!(
        failures(&ended) == [(FailureKind::WallTimeExceeded, None)],
        "{ended:?}"
    );
    assert_eq!(machine.counts().failed, 1);
}

#[test]
fn a_drain_stops_companions_at_once_and_the_rest_at_the_deadline_reported_as_a_shutdown() {
    let mut machine = machine(2);
    machine.handle_delivery(dispatch(20, run_task(0, 1, 1))).unwrap();
    let mut companion = run_task(1, 1, 3);
    companion.companion = true;
    companion.companion_argv = vec!["helper".into()];
    machine.handle_delivery(dispatch(21, companion)).unwrap();
    assert!(matches!(actions(&mut machine)[..], [Action::Launch { slots: 1, .. }, Action::Launch { slots: 0, .. }]));
    machine.handle_started((task(0), 1), String::new());
    machine.handle_started((task(1), 1), String::new());
    assert_eq!(reports(&actions(&mut machine)), vec![("TaskStarted", Seq(20))], "a companion reports nothing");

    machine.handle_shutdown(1_000);
    assert_eq!(actions(&mut machine), vec![Action::Stop { key: (task(1), 1), reason: StopReason::Shutdown }]);
    assert_eq!(machine.next_timer_ms(), Some(31_000));
    assert!(!machine.handle_tick(30_999), "before the deadline nothing happens");
    assert_eq!(actions(&mut machine), vec![]);
    machine.handle_exited((task(1), 1), &exit(RunEnd::Killed));
    assert!(machine.handle_tick(31_000));
    assert_eq!(actions(&mut machine), vec![Action::Stop { key: (task(0), 1), reason: StopReason::Shutdown }]);
    assert_eq!(machine.next_timer_ms(), None);
    machine.handle_exited((task(0), 1), &exit(RunEnd::Killed));
    let ended = actions(&mut machine);
    assert!(
        failures(&ended) == [(FailureKind::EngineShutdown, None)],
        "{ended:?}"
    );
    assert!(machine.is_idle());
    assert_eq!(machine.counts().stopped_at_shutdown, 1);
}

#[test]
fn a_drain_lets_what_ends_in_time_report_its_own_end() {
    let mut machine = machine(1);
    machine.handle_delivery(dispatch(20, run_task(0, 1, 1))).unwrap();
    machine.handle_started((task(0), 1), String::new());
    machine.handle_shutdown(0);
    actions(&mut machine);
    machine.handle_exited((task(0), 1), &exit(RunEnd::Exited(3)));
    let ended = actions(&mut machine);
    assert!(
        failures(&ended) == [(FailureKind::NonZeroExit, Some(3))],
        "{ended:?}"
    );
}

/// An operator's reschedule preempts a run and the projector dispatches the
/// same attempt number to this engine again: the new run waits for the old to
/// stop, then runs, and its reports answer its own dispatch (new report ids).
#[test]
fn a_reschedule_on_the_same_engine_runs_again_with_its_own_reports() {
    let mut machine = machine(1);
    machine.handle_delivery(dispatch(20, run_task(0, 1, 1))).unwrap();
    machine.handle_started((task(0), 1), String::new());
    assert_eq!(reports(&actions(&mut machine)), vec![("TaskStarted", Seq(20))]);

    assert_eq!(machine.handle_delivery(preempt(30, 0, 1)), Ok(Handled::Acted));
    assert_eq!(actions(&mut machine), vec![Action::Stop { key: (task(0), 1), reason: StopReason::Preempt }]);
    // Dispatched again before the preempted run has stopped: it waits.
    assert_eq!(machine.handle_delivery(dispatch(40, run_task(0, 1, 1))), Ok(Handled::Acted));
    assert_eq!(actions(&mut machine), vec![]);
    machine.handle_exited((task(0), 1), &exit(RunEnd::Killed));
    assert_eq!(
        actions(&mut machine),
        vec![Action::Launch { run: run_task(0, 1, 1), dispatch: Seq(40), slots: 1 }],
        "the preempted run said nothing; the new one is launched"
    );
    machine.handle_started((task(0), 1), String::new());
    machine.handle_exited((task(0), 1), &exit(RunEnd::Exited(0)));
    assert_eq!(reports(&actions(&mut machine)), vec![("TaskStarted", Seq(40)), ("TaskCompleted", Seq(40))]);
    let ids: Vec<[u8; 16]> = [Seq(20), Seq(40)]
        .into_iter()
        .map(|dispatch| super::super::task_report_id(&engine(), &task(0), 1, dispatch, "TaskStarted"))
        .collect();
    assert_ne!(ids[0], ids[1], "each run's reports are new messages to the broker");
    assert_eq!(machine.counts().stopped_on_order, 1);
}

#[test]
fn stale_deliveries_are_skipped_and_a_newer_epoch_fences() {
    let mut machine = machine(1);
    let mut stale = dispatch(20, run_task(0, 1, 1));
    stale.epoch = 9;
    assert_eq!(machine.handle_delivery(stale), Ok(Handled::Stale));
    let mut newer = dispatch(21, run_task(0, 1, 1));
    newer.epoch = 11;
    assert_eq!(
        machine.handle_delivery(newer),
        Err(NewerLogin { epoch: 11, evidence: FenceEvidence::Delivery { id: "21-0".into() } })
    );
    assert_eq!(actions(&mut machine), vec![]);
    assert_eq!(machine.counts().stale_ignored, 1);
}

#[test]
fn a_loss_of_this_epoch_stops_everything_silently() {
    let mut machine = machine(2);
    machine.handle_delivery(dispatch(20, run_task(0, 1, 1))).unwrap();
    machine.handle_delivery(dispatch(21, run_task(1, 1, 1))).unwrap();
    actions(&mut machine);
    let lost = delivery(22, DeliveryKind::Lost(Order::EngineLost { engine: engine(), epoch: 10, last_seen_ms: 0 }));
    assert!(machine.is_lost_of_this_epoch(&lost));
    assert_eq!(machine.handle_delivery(lost), Ok(Handled::Lost));
    let stops = actions(&mut machine);
    assert!(stops.iter().all(|action| matches!(action, Action::Stop { reason: StopReason::Lost, .. })) && stops.len() == 2);
    machine.handle_exited((task(0), 1), &exit(RunEnd::Killed));
    machine.handle_exited((task(1), 1), &exit(RunEnd::Killed));
    assert!(machine.is_idle() && actions(&mut machine).is_empty());
    machine.handle_logged_in(23);
    let mut old = dispatch(24, run_task(2, 1, 1));
    old.epoch = 10;
    assert_eq!(machine.handle_delivery(old), Ok(Handled::Stale), "the orders ahead of the loss are of a closed epoch");
}

#[test]
fn a_launch_that_fails_frees_its_slots_and_is_reported() {
    let mut machine = machine(1);
    let run = run_task(0, 1, 1);
    machine.handle_delivery(dispatch(20, run.clone())).unwrap();
    actions(&mut machine);
    machine.handle_launch_failed(&run, Seq(20), "no such program");
    assert_eq!(reports(&actions(&mut machine)), vec![("TaskFailed", Seq(20))]);
    assert!(machine.is_idle() && machine.slots_used() == 0);
}

#[test]
fn seen_forgets_the_oldest_beyond_its_bound() {
    let mut seen = Seen::new(2);
    assert!(seen.insert("a"));
    assert!(!seen.insert("a"));
    assert!(seen.insert("b"));
    assert!(seen.insert("c"));
    assert!(seen.insert("a"), "a was forgotten when c came");
    assert!(!seen.insert("c"));
    assert_eq!(seen.set.len(), 2);
}
