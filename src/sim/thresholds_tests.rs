//! Suspend thresholds in the simulator (`scenarios/suspend-thresholds.toml`):
//! while the "hot" engines report a load value above the threshold their
//! tasks are suspended (their remaining run time does not advance), and
//! resumed once it falls below; the run's makespan grows by about the time
//! spent above the threshold. The "cool" engines' tasks are never suspended.

use super::*;
use crate::core::event::{Entry, Event, Order};
use crate::files::scenario::Scenario;

fn scenario() -> Scenario {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/suspend-thresholds.toml");
    Scenario::from_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// Each `Suspend` and `Resume` ordered: (log time, engine, is a suspend).
fn controls(entries: &[Entry]) -> Vec<(u64, String, bool)> {
    entries
        .iter()
        .filter_map(|entry| match entry.payload_event() {
            Some(Event::OrderBatch(batch)) => Some((entry.time_ms - EPOCH_MS, &batch.orders)),
            _ => None,
        })
        .flat_map(|(time, orders)| {
            orders.iter().filter_map(move |order| match order {
                Order::Suspend { engine, .. } => Some((time, engine.to_string(), true)),
                Order::Resume { engine, .. } => Some((time, engine.to_string(), false)),
                _ => None,
            })
        })
        .collect()
}

#[test]
fn tasks_on_hot_engines_are_suspended_while_above_and_the_makespan_grows_by_the_time_above() {
    let options = RunOptions::default();
    let (report, entries) = run(&scenario(), &options, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((report.outcome, report.tasks_done), (Outcome::AllJobsEnded, 4), "{report}");
    let ordered = controls(&entries);
    let suspends: Vec<&(u64, String, bool)> = ordered.iter().filter(|c| c.2).collect();
    let resumes: Vec<&(u64, String, bool)> = ordered.iter().filter(|c| !c.2).collect();
    assert_eq!(suspends.len(), 2, "one task on each hot engine: {ordered:?}");
    assert_eq!(resumes.len(), 2, "{ordered:?}");
    assert!(ordered.iter().all(|(_, engine, _)| engine.starts_with("hot-")), "only hot engines: {ordered:?}");
    // Suspended after the value rose (20 s), within a heartbeat and a round;
    // resumed after it fell (40 s), as soon.
    assert!(suspends.iter().all(|(t, _, _)| (20_000..23_000).contains(t)), "{ordered:?}");
    assert!(resumes.iter().all(|(t, _, _)| (40_000..43_000).contains(t)), "{ordered:?}");
    assert_eq!((report.faults.runs_suspended, report.faults.runs_resumed), (2, 2), "{report}");

    let mut calm = scenario();
    calm.load_changes.clear();
    let (calm_report, calm_entries) = run(&calm, &options, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(controls(&calm_entries).is_empty(), "never above: never suspended");
    let grown = report.makespan_ms as i64 - calm_report.makespan_ms as i64;
    println!("makespan {} ms with the load change, {} ms without: {grown} ms longer", report.makespan_ms, calm_report.makespan_ms);
    assert!((17_000..=23_000).contains(&grown), "about the 20 s above the threshold: {grown} ms");
}
