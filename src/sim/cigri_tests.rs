//! CiGri's campaign scheduler (algorithm `cigri`) measured in the simulator:
//! finalize's makespan with and without it on a grid with a slow cluster, and
//! the metascheduler keeping each cluster to its affinity campaign with a test
//! campaign run first. The scenarios are `scenarios/cigri-*.toml`;
//! `cargo test --release --lib sim::cigri_tests -- --nocapture` prints the
//! figures (`docs/policies.md` has them).

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::core::event::{Event, Order, RescheduleReason};
use crate::files::scenario::Scenario;

fn scenario(text: &str, name: &str) -> Scenario {
    let scenario = Scenario::from_toml(text, name).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(scenario.policy.algorithm, crate::core::event::Algorithm::Cigri);
    scenario
}

fn run_checked(scenario: &Scenario) -> (SimReport, Vec<Entry>) {
    let options = RunOptions { check_invariants: true, entries_max: 2_000_000 };
    let (report, entries) = run(scenario, &options, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
    assert_eq!(report.rejected_entries, 0, "{report}");
    (report, entries)
}

fn orders_of(entries: &[Entry]) -> Vec<Order> {
    entries
        .iter()
        .filter_map(|entry| match entry.payload_event() {
            Some(Event::OrderBatch(batch)) => Some(batch.orders.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn finalize_copies_the_slow_clusters_last_tasks_and_cuts_the_makespan_by_more_than_40_percent() {
    let text = include_str!("../../scenarios/cigri-finalize.toml");
    let with_scenario = scenario(text, "cigri-finalize.toml");
    let mut without_scenario = with_scenario.clone();
    without_scenario.policy.cigri.finalize_copies_max = 0;
    let (with, entries) = run_checked(&with_scenario);
    let (without, without_entries) = run_checked(&without_scenario);
    let finalized: BTreeSet<String> = orders_of(&entries)
        .iter()
        .filter_map(|order| match order {
            Order::Reschedule { task, reason: RescheduleReason::Finalize, .. } => Some(task.to_string()),
            _ => None,
        })
        .collect();
    let cancelled_on_slow = orders_of(&entries)
        .iter()
        .filter(|order| matches!(order, Order::Cancel { engine, .. } if engine.as_str().starts_with("slow")))
        .count();
    println!(
        "finalize: {} tasks copied {finalized:?}, {cancelled_on_slow} slow attempts cancelled; makespan {} ms with finalize_copies_max 1, {} ms with 0",
        finalized.len(),
        with.makespan_ms,
        without.makespan_ms
    );
    assert!(!orders_of(&without_entries).iter().any(|order| matches!(order, Order::Reschedule { .. })), "no copy when off");
    assert_eq!((with.tasks_done, without.tasks_done), (40, 40));
    assert!(!finalized.is_empty() && cancelled_on_slow >= 1, "the slow cluster's last tasks were copied and cancelled");
    assert!(without.makespan_ms >= 20_000, "a slow task takes 20 s: {without}");
    assert!(with.makespan_ms * 10 < without.makespan_ms * 6, "{} ms against {} ms", with.makespan_ms, without.makespan_ms);
}

#[test]
fn the_test_campaign_runs_one_task_per_cluster_first_and_affinity_keeps_each_users_cluster() {
    let text = include_str!("../../scenarios/cigri-metascheduler.toml");
    let (report, entries) = run_checked(&scenario(text, "cigri-metascheduler.toml"));
    // Dispatches per (job, cluster), and the probe's first start against the defaults' waiting.
    let mut per_cluster: BTreeMap<(String, String), u32> = BTreeMap::new();
    let mut probe_dispatch_ms = Vec::new();
    for entry in &entries {
        if let Some(Event::OrderBatch(batch)) = entry.payload_event() {
            for order in &batch.orders {
                if let Order::Dispatch { task, engine, .. } = order {
                    let cluster = engine.as_str().split('-').next().unwrap_or_default().to_string();
                    *per_cluster.entry((task.job.to_string(), cluster)).or_default() += 1;
                    if task.job.as_str() == "probe" {
                        probe_dispatch_ms.push(entry.time_ms - EPOCH_MS);
                    }
                }
            }
        }
    }
    let ended: Vec<u32> = orders_of(&entries)
        .iter()
        .filter_map(|order| match order {
            Order::EndTestCampaign { clusters, .. } => Some(*clusters),
            _ => None,
        })
        .collect();
    println!("dispatches per (campaign, cluster): {per_cluster:?}; probe dispatched at {probe_dispatch_ms:?} ms; {report}");
    for cluster in ["lyon", "grenoble", "nancy"] {
        assert_eq!(per_cluster.get(&("probe".to_string(), cluster.to_string())), Some(&1), "one probe task on {cluster}");
    }
    assert_eq!(ended, vec![3], "the test campaign ended after three clusters");
    // A test campaign books one task per run (its cluster is recorded when the
    // dispatch is read back): its three tasks take the first slots freed in
    // three successive waves of 2 s tasks, ahead of 350 waiting default tasks.
    assert_eq!(probe_dispatch_ms.len(), 3);
    assert!(probe_dispatch_ms.iter().all(|&ms| ms < 5_000 + 3 * 2_100), "{probe_dispatch_ms:?}");
    let on = |job: &str, cluster: &str| per_cluster.get(&(job.to_string(), cluster.to_string())).copied().unwrap_or(0);
    assert!(on("alices", "lyon") > on("bobs", "lyon") * 3, "lyon is alice's: {per_cluster:?}");
    assert!(on("bobs", "grenoble") > on("alices", "grenoble") * 3, "grenoble is bob's: {per_cluster:?}");
    assert!(on("bobs", "lyon") > 0 || on("alices", "grenoble") > 0, "one overflowed onto the other's cluster once its owner had nothing waiting");
}

/// The predictor's ETA error over a campaign: the simulator runs it; the
/// entries are folded again and the campaign's ETA read when 25, 50 and 75 %
/// of its tasks had succeeded, against the log time of its last success.
#[test]
fn the_predictors_eta_at_a_quarter_half_and_three_quarters_done_is_within_a_tenth_of_the_real_end() {
    let text = include_str!("../../scenarios/cigri-predictor.toml");
    let (report, entries) = run_checked(&scenario(text, "cigri-predictor.toml"));
    let mut state = crate::core::state::State::new();
    let mut etas: Vec<(u32, u64, u64)> = Vec::new();
    let mut end_ms = 0;
    for entry in &entries {
        crate::core::fold::fold(&mut state, entry);
        let Some(j) = state.job_idx(&crate::core::ids::JobId::new("campaign").expect("an id")) else { continue };
        let job = state.job(j);
        let n_tasks = job.n_tasks();
        let done = job.counts.done;
        if done == n_tasks && end_ms == 0 {
            end_ms = entry.time_ms;
        }
        if let Some(&quarter) = [1u32, 2, 3].get(etas.len()).filter(|&&quarter| done * 4 >= n_tasks * quarter) {
            let eta_ms = crate::core::family::cigri::predictor::predict(&state, j).0.eta_ms.expect("an ETA once tasks succeeded");
            etas.push((quarter * 25, entry.time_ms, eta_ms));
        }
    }
    let start_ms = entries.first().map_or(0, |entry| entry.time_ms);
    let figures: Vec<String> = etas
        .iter()
        .map(|&(percent, at_ms, eta_ms)| {
            let error_ms = eta_ms as i64 - end_ms as i64;
            format!(
                "{percent} % done at {:.1} s: ETA {:.1} s, error {:+.1} s ({:+.1} % of the makespan)",
                (at_ms - start_ms) as f64 / 1000.0,
                (eta_ms - start_ms) as f64 / 1000.0,
                error_ms as f64 / 1000.0,
                error_ms as f64 * 100.0 / (end_ms - start_ms) as f64
            )
        })
        .collect();
    println!("predictor: campaign ends at {:.1} s; {}; {report}", (end_ms - start_ms) as f64 / 1000.0, figures.join("; "));
    assert_eq!(etas.len(), 3);
    for &(_, _, eta_ms) in &etas {
        assert!(eta_ms.abs_diff(end_ms) * 10 <= end_ms - start_ms, "{figures:?}");
    }
}
