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
