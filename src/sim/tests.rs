//! Whole-run tests of the simulator: determinism, each fault on its own, all of
//! them together over many seeds. Scenarios are small so the suite stays fast in
//! debug builds with invariants checked after every entry.

use super::*;
use crate::files::scenario::Scenario;
use crate::core::event::{Event, Order, Origin, Payload};

fn scenario(text: &str) -> Scenario {
    Scenario::from_toml(text, "test.toml").unwrap_or_else(|e| panic!("{e}"))
}

fn with_seed(scenario: &Scenario, seed: u64) -> Scenario {
    let mut scenario = scenario.clone();
    scenario.seed = seed;
    scenario.policy.seed = seed;
    scenario
}

fn run_ok(scenario: &Scenario) -> (SimReport, Vec<Entry>) {
    run(scenario, &RunOptions::default(), &mut |_| {}).unwrap_or_else(|e| panic!("{e}"))
}

/// Four engines of two slots, two jobs: a bag of 24 short tasks and a later,
/// more urgent job of 6 tasks needing two slots each.
const BASE: &str = r#"
seed = 1

[policy]
engine_timeout_secs = 6
dispatch_timeout_secs = 4

[[engines]]
count = 4
name_prefix = "e"
slots = 2
os = "linux"

[[jobs]]
id = "bag"
tasks = 24
duration_ms = 2000
duration_jitter_ms = 1500

[[jobs]]
id = "wide"
submit_at_ms = 3000
tasks = 6
priority = 5
slots_per_task = 2
duration_ms = 3000
"#;

fn base_with(faults: &str) -> Scenario {
    scenario(&format!("{BASE}\n[faults]\n{faults}\n"))
}

fn count_orders(entries: &[Entry], kind: &str) -> usize {
    entries
        .iter()
        .filter_map(|entry| match (&entry.origin, &entry.payload) {
            (Origin::Projector, Payload::Event(envelope)) => match &envelope.event {
                Event::OrderBatch(batch) => Some(batch.orders.iter().filter(|o| o.kind_name() == kind).count()),
                _ => None,
            },
            _ => None,
        })
        .sum()
}

fn rejections(report: &SimReport, kind: &str) -> u64 {
    report.rejections_by_kind.get(kind).copied().unwrap_or(0)
}

#[test]
fn a_fault_free_run_ends_every_job_cleanly() {
    let (report, entries) = run_ok(&scenario(BASE));
    assert_eq!(report.outcome, Outcome::AllJobsEnded);
    assert_eq!((report.jobs_done, report.tasks_done, report.tasks_failed), (2, 30, 0));
    assert_eq!((report.requeues, report.engines_lost, report.rejected_entries), (0, 0, 0), "{report}");
    assert_eq!(report.dispatches, 30);
    assert_eq!(report.entries, entries.len() as u64);
    assert!(report.utilisation_permille > 300 && report.utilisation_permille <= 1000, "{report}");
    assert!(report.makespan_ms > 0 && report.wait_ms_max >= report.wait_ms_mean);
    // Sequences are dense and log time never goes back.
    for (n, pair) in entries.windows(2).enumerate() {
        assert_eq!(pair[0].seq.0, n as u64 + 1);
        assert!(pair[0].time_ms <= pair[1].time_ms);
    }
}

#[test]
fn the_same_seed_gives_the_same_log_and_digests() {
    let faults = base_with(
        "engine_crash_per_million = 30000\nduplicate_delivery_per_million = 100000\n\
         late_start_per_million = 30000\nprojector_restarts = 2\nsnapshot_every_entries = 50",
    );
    let (first, first_log) = run_ok(&faults);
    let (second, second_log) = run_ok(&faults);
    assert_eq!(first, second);
    assert_eq!(first_log.len(), second_log.len());
    assert!(first_log.iter().zip(&second_log).all(|(a, b)| a.stored == b.stored && a.time_ms == b.time_ms));
}

#[test]
fn different_seeds_give_different_digests() {
    let faults = base_with("duplicate_delivery_per_million = 50000");
    let digests: std::collections::BTreeSet<String> =
        (1..=5).map(|seed| run_ok(&with_seed(&faults, seed)).0.chain_digest).collect();
    assert_eq!(digests.len(), 5);
}

#[test]
fn crashed_engines_are_declared_lost_and_their_work_runs_elsewhere() {
    let mut crashes = base_with("engine_crash_per_million = 50000");
    crashes.engines[0].count = 8;
    let mut lost = 0;
    for seed in 1..=4 {
        let (report, entries) = run_ok(&with_seed(&crashes, seed));
        assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
        assert_eq!(report.engines_lost, report.faults.engine_crashes, "{report}");
        assert_eq!(count_orders(&entries, "EngineLost") as u64, report.engines_lost);
        assert_eq!(report.tasks_done, 30, "no retries are charged for a lost engine: {report}");
        lost += report.engines_lost;
    }
    assert!(lost > 0, "a crash rate of 8% per run crashes something in 4 runs");
}

#[test]
fn crashed_engines_that_come_back_run_again() {
    // Back well after being declared lost (timeout 6 s).
    let returns = base_with("engine_crash_per_million = 80000\ncrashed_engines_return_after_ms = 10000");
    let mut returned = 0;
    for seed in 1..=4 {
        let (report, _) = run_ok(&with_seed(&returns, seed));
        assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
        returned += report.faults.engine_returns;
    }
    assert!(returned > 0);
}

#[test]
fn late_starts_are_requeued_and_stopped_on_their_engine() {
    let late = base_with("late_start_per_million = 100000");
    let (mut requeue_orders, mut stale, mut stopped) = (0, 0, 0);
    for seed in 1..=3 {
        let (report, entries) = run_ok(&with_seed(&late, seed));
        assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
        assert_eq!(report.tasks_done, 30);
        requeue_orders += count_orders(&entries, "Requeue");
        stale += rejections(&report, "stale-attempt");
        stopped += report.faults.runs_cancelled;
        if report.faults.late_starts > 0 {
            assert!(report.requeues > 0, "{report}");
        }
    }
    assert!(requeue_orders > 0, "late starts past the dispatch timeout are requeued");
    // The engine hears of the requeue and drops the attempt before it starts,
    // so no late report reaches the log.
    assert!(stopped > 0 && stale == 0, "requeues {requeue_orders}, stopped {stopped}, stale reports {stale}");
}

#[test]
fn duplicate_reports_are_deduplicated_by_the_log_or_rejected_by_the_fold() {
    let duplicates = base_with("duplicate_delivery_per_million = 300000");
    let (report, _) = run_ok(&duplicates);
    assert_eq!(report.outcome, Outcome::AllJobsEnded);
    assert_eq!(report.tasks_done, 30);
    assert!(report.faults.duplicates_same_id > 0 && report.faults.duplicates_new_id > 0, "{report}");
    assert!(report.faults.log_deduplicated >= report.faults.duplicates_same_id, "{report}");
    // Every late copy is refused, one way or another.
    let refused = rejections(&report, "stale-attempt") + rejections(&report, "duplicate-report");
    assert!(report.faults.duplicates_new_id_stored > 0, "{report}");
    assert_eq!(refused, report.faults.duplicates_new_id_stored, "{report}");
}

#[test]
fn a_restarted_projector_agrees_with_a_full_replay() {
    // Snapshots every 40 entries so restarts resume from a snapshot, not from nothing.
    let restarts = base_with("projector_restarts = 4\nrestart_window_ms = 10000\nsnapshot_every_entries = 40");
    let (mut seen_again, mut fenced_or_lost_or_late) = (0, 0);
    for seed in 1..=5 {
        let (report, _) = run_ok(&with_seed(&restarts, seed));
        assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
        assert_eq!(report.projector_restarts, 4, "{report}");
        assert_eq!(report.tasks_done, 30);
        assert!(report.snapshots_taken > 0);
        seen_again += report.faults.orders_ignored_as_seen;
        let f = &report.faults;
        fenced_or_lost_or_late += f.publishes_fenced + f.publishes_lost + f.publishes_after_restart;
    }
    assert!(seen_again > 0, "restarted projectors deliver again what engines already had");
    assert!(fenced_or_lost_or_late > 0, "some restart left a publish in flight");
}

/// Restarts are not free in general (see the module docs), but one that strikes
/// when nothing is in flight, with no downtime, must leave the log exactly as it
/// was: the restored projector reaches the state its predecessor had, and decides
/// as it would have.
#[test]
fn an_instant_restart_with_nothing_in_flight_changes_nothing() {
    let plain = scenario(BASE);
    let mut checked = 0;
    for seed in 1..=8 {
        let without = run_ok(&with_seed(&plain, seed)).0;
        // One restart 1 ms in: jobs submitted, engines not yet logged in, nothing decided.
        let mut restarted = with_seed(&base_with("projector_restarts = 1\nrestart_window_ms = 1"), seed);
        restarted.faults.snapshot_every_entries = 1;
        let with = run_ok(&restarted).0;
        assert_eq!(with.projector_restarts, 1);
        let f = &with.faults;
        if f.publishes_lost + f.publishes_after_restart + f.publishes_deduplicated > 0 {
            continue; // this restart waited for a publish and struck with it in flight
        }
        checked += 1;
        assert_eq!(with.chain_digest, without.chain_digest, "seed {seed}");
        assert_eq!(with.state_digest, without.state_digest, "seed {seed}");
    }
    assert!(checked > 0, "some seed restarts at once");
}

#[test]
fn a_projector_down_for_a_while_catches_up() {
    let downtime = base_with("projector_restarts = 2\nrestart_downtime_ms = 9000\nsnapshot_every_entries = 30");
    for seed in 1..=3 {
        let (report, _) = run_ok(&with_seed(&downtime, seed));
        assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
    }
}

/// The heaviest test: every fault at once, over 20 seeds, invariants checked after
/// every entry, replay verified at the end of each run.
#[test]
fn every_fault_at_once_over_twenty_seeds() {
    let everything = scenario(&format!(
        "{BASE}\n[[jobs]]\nid = \"flaky\"\ntasks = 10\nmax_attempts = 2\nduration_ms = 1500\nfailure_per_million = 300000\n\
         [faults]\nengine_crash_per_million = 20000\ncrashed_engines_return_after_ms = 15000\n\
         duplicate_delivery_per_million = 50000\nlate_start_per_million = 30000\n\
         projector_restarts = 3\nrestart_downtime_ms = 500\nsnapshot_every_entries = 60\n"
    ));
    let mut totals = FaultCounts::default();
    let mut jobs_failed = 0;
    for seed in 1..=20 {
        let (report, _) = run_ok(&with_seed(&everything, seed));
        assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
        assert_eq!(report.jobs_unfinished, 0);
        assert_eq!(report.jobs_done + report.jobs_failed, 3, "{report}");
        jobs_failed += report.jobs_failed;
        let f = &report.faults;
        totals.engine_crashes += f.engine_crashes;
        totals.late_starts += f.late_starts;
        totals.duplicates_new_id += f.duplicates_new_id;
        totals.task_failures += f.task_failures;
        totals.publishes_lost += f.publishes_lost;
        totals.orders_ignored_as_seen += f.orders_ignored_as_seen;
    }
    assert!(jobs_failed > 0, "a 30% failure rate with 2 attempts fails some job in 20 runs");
    assert!(totals.engine_crashes > 0 && totals.late_starts > 0 && totals.duplicates_new_id > 0, "{totals:?}");
    assert!(totals.task_failures > 0 && totals.orders_ignored_as_seen > 0, "{totals:?}");
}

#[test]
fn the_horizon_and_the_entry_cap_stop_a_run() {
    let mut long = scenario(BASE);
    long.horizon_ms = Some(4_000);
    let (report, entries) = run_ok(&long);
    assert_eq!(report.outcome, Outcome::Horizon);
    assert_eq!(report.stopped_at_ms, 4_000);
    assert!(report.jobs_unfinished > 0);
    assert!(entries.last().unwrap().time_ms <= EPOCH_MS + 4_000);

    let options = RunOptions { entries_max: 50, ..RunOptions::default() };
    let (report, entries) = run(&scenario(BASE), &options, &mut |_| {}).unwrap();
    assert_eq!(report.outcome, Outcome::EntryCap);
    assert!(entries.len() >= 50 && entries.len() < 100);
}

#[test]
fn a_job_no_engine_can_run_waits_until_the_horizon() {
    let mut impossible = scenario(BASE);
    impossible.jobs[1].slots_per_task = 3;
    impossible.horizon_ms = Some(30_000);
    let (report, entries) = run_ok(&impossible);
    assert_eq!(report.outcome, Outcome::Horizon);
    assert_eq!((report.jobs_done, report.jobs_unfinished), (1, 1));
    assert_eq!(count_orders(&entries, "MarkUnschedulable"), 1);
}

#[test]
fn progress_is_reported_and_the_report_prints() {
    let mut calls = Vec::new();
    let (report, _) = run(&scenario(BASE), &RunOptions::default(), &mut |p| calls.push(p)).unwrap();
    let last = calls.last().expect("progress is reported at the end");
    assert_eq!((last.entries, last.jobs_ended, last.jobs_total), (report.entries, 2, 2));
    let text = report.to_string();
    assert!(text.starts_with("seed 1: all jobs ended at "), "{text}");
    assert!(text.contains(&report.chain_digest));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["outcome"], "all-jobs-ended");
}

#[test]
fn an_invalid_scenario_built_in_code_is_an_error_naming_the_seed() {
    let mut broken = scenario(BASE);
    broken.jobs[0].tasks = 0;
    let error = run(&broken, &RunOptions::default(), &mut |_| {}).unwrap_err();
    assert!(error.to_string().starts_with("seed 1: invalid scenario: jobs[0]"), "{error}");
}

#[test]
fn every_dispatch_delivered_is_one_the_fold_applied() {
    // Orders are delivered when read back, and only those that applied: with no
    // faults, every dispatch reaches its engine exactly once.
    let (report, entries) = run_ok(&scenario(BASE));
    assert_eq!(report.faults.orders_delivered as usize, count_orders(&entries, "Dispatch"));
    let first_dispatch = entries.iter().find_map(|entry| match &entry.payload {
        Payload::Event(envelope) => match &envelope.event {
            Event::OrderBatch(batch) => batch.orders.iter().find(|o| matches!(o, Order::Dispatch { .. })).cloned(),
            _ => None,
        },
        _ => None,
    });
    assert!(first_dispatch.is_some());
}

#[test]
fn an_engine_back_before_it_is_declared_lost_gets_its_old_attempts_requeued() {
    // Back after 2 s, well within the 6 s engine timeout: the new session's login
    // requeues what the crashed one held (the core fix this simulator led to).
    let quick = base_with("engine_crash_per_million = 80000\ncrashed_engines_return_after_ms = 2000");
    let mut returned = 0;
    for seed in 1..=4 {
        let (report, _) = run_ok(&with_seed(&quick, seed));
        assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
        assert_eq!(report.engines_lost, 0, "{report}");
        assert!(report.requeues >= report.faults.engine_crashes, "{report}");
        returned += report.faults.engine_returns;
    }
    assert!(returned > 0);
}
