//! Parallel tasks in the simulator (`scenarios/parallel-site.toml`): a task of
//! span `site` starts as one `DispatchParallel` per engine, holds all its slots
//! at once while it runs, and frees every part when it ends. The figures are
//! read from the simulator's log, folded again here.

use super::*;
use crate::core::event::{Event, Order, Origin, Payload};
use crate::core::fold::fold;
use crate::core::state::State;
use crate::files::scenario::Scenario;

pub(super) fn scenario_file(text: &str, name: &str) -> Scenario {
    Scenario::from_toml(text, name).unwrap_or_else(|e| panic!("{e}"))
}

pub(super) fn run_ok(scenario: &Scenario) -> (SimReport, Vec<Entry>) {
    run(scenario, &RunOptions::default(), &mut |_| {}).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_site_task_starts_holds_all_its_slots_at_once_and_completes() {
    let scenario = scenario_file(include_str!("../../scenarios/parallel-site.toml"), "parallel-site.toml");
    let (report, entries) = run_ok(&scenario);
    assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
    assert_eq!((report.jobs_done, report.tasks_done, report.tasks_failed), (2, 43, 0), "{report}");
    // Companions run nothing: no report of theirs is rejected.
    assert_eq!(report.rejected_entries, 0, "{report}");
    let mut state = State::new();
    let (mut starts, mut parts_ordered) = (0, 0);
    for entry in &entries {
        let rejections = fold(&mut state, entry);
        assert!(rejections.is_empty(), "entry {} rejected: {rejections:?}", entry.seq.0);
        let Payload::Event(envelope) = &entry.payload else { continue };
        match (&entry.origin, &envelope.event) {
            (Origin::Projector, Event::OrderBatch(batch)) => {
                parts_ordered += batch.orders.iter().filter(|o| matches!(o, Order::DispatchParallel { .. })).count();
            }
            (_, Event::TaskStarted { task, attempt, .. }) if task.job.as_str() == "mpi" => {
                starts += 1;
                let j = state.job_idx(&task.job).expect("submitted");
                let key = crate::core::state::TaskKey { job: j, index: task.index };
                let parts = state.parallel().parts_of(key, *attempt).expect("a started site task holds its parts");
                assert_eq!(parts.iter().map(|p| p.slots).sum::<u32>(), 16, "all 16 slots at once");
                assert!(parts.iter().all(|p| state.engine(p.engine).props.site == "lyon"), "one site");
                // Every lyon engine is full: the serial tasks wait or run at bern.
                for p in parts {
                    let engine = state.engine(p.engine);
                    assert_eq!(engine.used, engine.slots, "{} is held whole", engine.id);
                }
            }
            _ => {}
        }
    }
    assert_eq!(starts, 3, "each mpi task started once");
    assert_eq!(parts_ordered, 3 * 8, "8 engines of 2 slots a task");
    assert!(state.parallel().is_empty(), "every part freed in the end");
}

/// Starts of each job's tasks, in ms of virtual time.
fn starts(entries: &[Entry], job: &str) -> Vec<u64> {
    entries
        .iter()
        .filter_map(|entry| match entry.payload_event() {
            Some(Event::TaskStarted { task, .. }) if task.job.as_str() == job => Some(entry.time_ms - super::log::EPOCH_MS),
            _ => None,
        })
        .collect()
}

/// `scenarios/reservation-starvation.toml` with `max_reservation` as given:
/// (the wide job's starts, the stream's starts, the stream's starts between
/// the wide job's arrival and its first start).
fn starvation(max_reservation: u32) -> (Vec<u64>, usize, usize) {
    let mut scenario = scenario_file(include_str!("../../scenarios/reservation-starvation.toml"), "reservation-starvation.toml");
    scenario.policy.reservation.max_reservation = max_reservation;
    let (report, entries) = run_ok(&scenario);
    assert_eq!(report.outcome, Outcome::Horizon, "{report}");
    assert_eq!(report.rejected_entries, 0, "{report}");
    let wide = starts(&entries, "wide");
    let stream = starts(&entries, "stream");
    let arrival = scenario.jobs[1].submit_at_ms;
    let first = wide.first().copied().unwrap_or(u64::MAX);
    let through_gaps = stream.iter().filter(|&&t| t > arrival && t < first).count();
    (wide, stream.len(), through_gaps)
}

/// The wide job's first start at most this long after it arrives, with reservation.
const WIDE_START_WITHIN_MS: u64 = 10_000;
/// The stream's starts with reservation, at least this share of those without (per mille).
const STREAM_KEPT_PERMILLE: usize = 900;

#[test]
fn a_wide_job_starved_by_a_stream_without_reservation_starts_in_bounded_time_with_it() {
    let (wide_off, stream_off, _) = starvation(0);
    let (wide_on, stream_on, through_gaps) = starvation(1);
    eprintln!(
        "without reservation: wide starts {wide_off:?}, stream starts {stream_off}; \
         with: wide starts {wide_on:?}, stream starts {stream_on} ({} per mille), {through_gaps} of them while wide waited",
        stream_on * 1000 / stream_off.max(1)
    );
    assert!(stream_off > 9_000, "many thousands of starts: {stream_off}");
    assert!(wide_off.is_empty(), "without reservation the wide job never starts: {wide_off:?}");
    assert_eq!(wide_on.len(), 4, "with it every wide task starts: {wide_on:?}");
    assert!(wide_on[0] - 5_000 <= WIDE_START_WITHIN_MS, "first wide start {} ms after it arrived", wide_on[0] - 5_000);
    assert!(stream_on * 1000 >= stream_off * STREAM_KEPT_PERMILLE, "stream kept {stream_on} of {stream_off}");
    assert!(through_gaps > 0, "the stream keeps flowing while the wide job waits");
}
