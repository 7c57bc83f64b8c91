//! Flood control of a gateway engine measured in the simulator: a gateway of
//! 32 slots onto a cluster whose resource manager runs only 8 of them at once
//! (the scenario's `remote_slots`), so what it is given beyond waits in the
//! remote queue. Per algorithm, and without flood control: the remote queue
//! (the gateway's attempts dispatched and not yet started) over the campaign,
//! against the job ratio the `FloodRatio` orders set. The scenario is
//! `scenarios/cigri-flood.toml`; `cargo test --release --lib sim::flood_tests
//! -- --nocapture` prints the figures (`docs/policies.md` has them).

use std::collections::BTreeSet;

use super::*;
use crate::core::event::{Event, FloodAlgorithm, Order};
use crate::core::ids::TaskRef;
use crate::files::scenario::Scenario;

const GATEWAY: &str = "lyon-1";
const TASKS: u64 = 240;

/// The remote queue of one run, from its log.
#[derive(Debug)]
struct QueueFigures {
    /// Time-weighted mean length over the campaign, in thousandths of a task.
    mean_milli: u64,
    max: usize,
    /// The gateway's ratios in the order the log set them, thousandths.
    ratios: Vec<u32>,
    makespan_ms: u64,
}

fn queue_figures(entries: &[Entry], report: &SimReport) -> QueueFigures {
    let mut unstarted: BTreeSet<(TaskRef, u32)> = BTreeSet::new();
    let (mut area, mut max, mut ratios) = (0u128, 0usize, Vec::new());
    let (first_ms, mut last_ms) = (entries.first().map_or(0, |entry| entry.time_ms), None::<u64>);
    for entry in entries {
        if let Some(at) = last_ms {
            area += unstarted.len() as u128 * u128::from(entry.time_ms - at);
        }
        last_ms = Some(entry.time_ms);
        for event in entry.events() {
            match event {
                Event::OrderBatch(batch) => {
                    for order in &batch.orders {
                        match order {
                            Order::Dispatch { task, attempt, engine, .. } if engine.as_str() == GATEWAY => {
                                unstarted.insert((task.clone(), *attempt));
                            }
                            Order::Requeue { task, attempt, .. } | Order::Cancel { task, attempt, .. } => {
                                unstarted.remove(&(task.clone(), *attempt));
                            }
                            Order::FloodRatio { engine, ratio_milli, .. } if engine.as_str() == GATEWAY => ratios.push(*ratio_milli),
                            _ => {}
                        }
                    }
                }
                Event::TaskStarted { task, attempt, .. } | Event::TaskCompleted { task, attempt, .. } => {
                    unstarted.remove(&(task.clone(), *attempt));
                }
                _ => {}
            }
        }
        max = max.max(unstarted.len());
    }
    let span_ms = last_ms.unwrap_or(first_ms).saturating_sub(first_ms).max(1);
    QueueFigures { mean_milli: (area * 1000 / u128::from(span_ms)) as u64, max, ratios, makespan_ms: report.makespan_ms }
}

fn run_flood(scenario: &Scenario) -> QueueFigures {
    let options = RunOptions { check_invariants: true, entries_max: 2_000_000 };
    let (report, entries) = run(scenario, &options, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
    assert_eq!(report.tasks_done, TASKS, "{report}");
    assert_eq!(report.rejected_entries, 0, "{report}");
    queue_figures(&entries, &report)
}

fn milli(value: u64) -> String {
    format!("{}.{:03}", value / 1000, value % 1000)
}

#[test]
fn each_algorithm_keeps_the_remote_queue_under_half_the_unthrottled_one_at_most_5_percent_later() {
    let text = include_str!("../../scenarios/cigri-flood.toml");
    let base = Scenario::from_toml(text, "cigri-flood.toml").unwrap_or_else(|e| panic!("{e}"));
    assert!(base.policy.flood.is_some() && base.engines[0].remote_slots == Some(8));
    let mut off = base.clone();
    off.policy.flood = None;
    let unthrottled = run_flood(&off);
    println!(
        "flood control off: remote queue mean {} max {}, makespan {} ms",
        milli(unthrottled.mean_milli),
        unthrottled.max,
        unthrottled.makespan_ms
    );
    assert!(unthrottled.ratios.is_empty(), "no ratio without flood control");
    // 32 slots, 8 running: 24 wait in the remote queue most of the campaign.
    assert!(unthrottled.mean_milli >= 20_000 && unthrottled.max >= 24, "{unthrottled:?}");
    for algorithm in [FloodAlgorithm::SlowStart, FloodAlgorithm::TwoWayAdaptive, FloodAlgorithm::AdaptiveDownExponentialUp] {
        let mut scenario = base.clone();
        scenario.policy.flood.as_mut().expect("flood control on").algorithm = algorithm;
        let figures = run_flood(&scenario);
        let (low, high) = (figures.ratios.iter().min().copied().unwrap_or(0), figures.ratios.iter().max().copied().unwrap_or(0));
        println!(
            "flood control {}: remote queue mean {} max {}, ratio from {} down to {} (highest {}), {} ratio orders, makespan {} ms",
            algorithm.as_str(),
            milli(figures.mean_milli),
            figures.max,
            milli(u64::from(figures.ratios.first().copied().unwrap_or(0))),
            milli(u64::from(low)),
            milli(u64::from(high)),
            figures.ratios.len(),
            figures.makespan_ms
        );
        assert_eq!(figures.ratios.first(), Some(&1_000), "the ratio starts at ratio_start: {figures:?}");
        assert!(low < 1_000, "the excess brought the ratio down: {figures:?}");
        assert!(figures.ratios.windows(2).any(|pair| pair[1] > pair[0]), "the ratio rose again: {figures:?}");
        assert!(figures.mean_milli * 2 < unthrottled.mean_milli, "{algorithm:?}: {figures:?} against {unthrottled:?}");
        assert!(figures.makespan_ms * 100 <= unthrottled.makespan_ms * 105, "{algorithm:?}: {figures:?} against {unthrottled:?}");
    }
}
