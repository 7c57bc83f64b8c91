//! The example scenarios under `scenarios/` read, run to the end, and replay.

use std::path::PathBuf;

use gridfold::core::replay::{replay, ReplayOptions};
use gridfold::core::state::State;
use gridfold::sim::{run, Outcome, RunOptions, Scenario};

fn scenario_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name)
}

/// Runs a scenario file, then does what a caller of `sim::run` may do with the
/// log it returns: replay it with verification and compare digests.
fn run_file(name: &str) -> gridfold::sim::SimReport {
    let scenario = Scenario::from_file(&scenario_file(name)).unwrap_or_else(|e| panic!("{e}"));
    let (report, entries) = run(&scenario, &RunOptions::default(), &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.outcome, Outcome::AllJobsEnded, "{report}");
    assert_eq!(report.entries, entries.len() as u64);
    let options = ReplayOptions { verify: true, stop_at: None, check_invariants: true };
    let (state, replayed) = replay(State::new(), &entries, &options, &mut |_| {});
    assert_eq!(replayed.first_divergence, None);
    assert_eq!(replayed.batches_verified, report.order_batches);
    assert_eq!(state.chain.to_hex(), report.chain_digest);
    assert_eq!(state.state_digest().to_hex(), report.state_digest);
    report
}

#[test]
fn bag_of_tasks_runs_clean() {
    let report = run_file("bag-of-tasks.toml");
    assert_eq!((report.tasks_done, report.jobs_done), (412, 2));
    assert_eq!((report.requeues, report.rejected_entries), (0, 0), "{report}");
}

#[test]
fn faults_survives_every_fault() {
    let report = run_file("faults.toml");
    println!("{report}");
    assert!(report.faults.engine_crashes + report.faults.late_starts + report.faults.duplicates_same_id > 0);
    assert!(report.projector_restarts >= 1, "{report}");
}

#[test]
fn restarts_agree_with_a_full_replay() {
    let report = run_file("restarts.toml");
    // A restart due while the projector is still down folds into that one.
    assert!((5..=10).contains(&report.projector_restarts), "{report}");
    assert_eq!(report.tasks_done, 150);
}

#[test]
fn a_broken_scenario_file_names_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    std::fs::write(&path, "seed = 1\n\n[[jobs]]\nid = \"x\"\ntasks = 0\nduration_ms = 10\n").unwrap();
    let error = Scenario::from_file(&path).unwrap_err();
    assert_eq!(error.line(), 5);
    assert!(error.to_string().starts_with(&format!("{}:5: tasks must be", path.display())), "{error}");
}
