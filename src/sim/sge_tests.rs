//! Grid Engine's ordering policies over long runs: the split of busy slot-time
//! between users that the share tree, the functional and override tickets and
//! `user_sort` should give, measured from the simulator's log.
//!
//! Each scenario keeps a grid of 40 single-slot engines saturated with short
//! tasks (2 to 4 s, seeded) for several minutes of virtual time — thousands of
//! task starts — and measures, per window of log time, each user's share of
//! the busy slot-time: every attempt from its `TaskStarted` to its
//! `TaskCompleted` or `TaskFailed` (or the end of the run), owned by its job's
//! owner. The simulator's end-of-run checks (full replay with verification,
//! digests) run as always. Invariants are not checked after every entry: the
//! runs are long, and the fault-free suite in `tests.rs` covers them.
//!
//! `cargo test --release --lib sim::sge_tests -- --nocapture` prints the figures.

use std::collections::BTreeMap;

use super::*;
use crate::core::event::{Algorithm, Event, SgePolicy, ShareTreeLeaf, ShareTreeNode};
use crate::core::ids::{Attempt, TaskRef};
use crate::files::scenario::Scenario;

/// Engines of the grid, one slot each.
const SLOTS: u64 = 40;

/// 40 single-slot engines; no jobs (each test adds its own).
const GRID: &str = r#"
seed = 7

[policy]
engine_timeout_secs = 6
dispatch_timeout_secs = 4

[[engines]]
count = 40
name_prefix = "e"
slots = 1
os = "linux"
"#;

/// One job per `(id, owner, submit_at_ms, tasks)`, tasks of 2 to 4 s.
fn grid(algorithm: Algorithm, sge: SgePolicy, jobs: &[(&str, &str, u64, u32)], horizon_s: u64) -> Scenario {
    let mut text = GRID.to_string();
    for (id, owner, at, tasks) in jobs {
        text.push_str(&format!(
            "\n[[jobs]]\nid = \"{id}\"\nowner = \"{owner}\"\nsubmit_at_ms = {at}\ntasks = {tasks}\n\
             duration_ms = 2000\nduration_jitter_ms = 2000\n"
        ));
    }
    let mut scenario = Scenario::from_toml(&text, "sge.toml").unwrap_or_else(|e| panic!("{e}"));
    scenario.policy.algorithm = algorithm;
    scenario.policy.sge = sge;
    scenario.horizon_ms = Some(horizon_s * 1000);
    scenario
}

/// Runs the scenario (end-of-run checks and all) and returns its busy slot-time.
fn run_busy(scenario: &Scenario) -> Busy {
    let options = RunOptions { check_invariants: false, ..RunOptions::default() };
    let (report, entries) = run(scenario, &options, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(report.outcome, Outcome::Horizon | Outcome::AllJobsEnded), "{report}");
    let owners: BTreeMap<_, _> = scenario.jobs.iter().map(|job| (job.id.clone(), job.owner.clone())).collect();
    Busy::from_log(&entries, &owners, report.stopped_at_ms)
}

/// Every attempt that ran: owner, start and end (ms of virtual time).
struct Busy {
    runs: Vec<(String, u64, u64)>,
    starts: usize,
}

impl Busy {
    fn from_log(entries: &[Entry], owners: &BTreeMap<crate::core::ids::JobId, String>, stopped_at_ms: u64) -> Busy {
        let mut open: BTreeMap<(TaskRef, Attempt), u64> = BTreeMap::new();
        let mut runs = Vec::new();
        let mut starts = 0;
        for entry in entries {
            let at = entry.time_ms - EPOCH_MS;
            let (task, attempt, started) = match entry.payload_event() {
                Some(Event::TaskStarted { task, attempt, .. }) => (task, *attempt, true),
                Some(Event::TaskCompleted { task, attempt, .. } | Event::TaskFailed { task, attempt, .. }) => {
                    (task, *attempt, false)
                }
                _ => continue,
            };
            if started {
                starts += 1;
                open.insert((task.clone(), attempt), at);
            } else if let Some(from) = open.remove(&(task.clone(), attempt)) {
                runs.push((owners[&task.job].clone(), from, at));
            }
        }
        for ((task, _), from) in open {
            runs.push((owners[&task.job].clone(), from, stopped_at_ms));
        }
        Busy { runs, starts }
    }

    /// Slot-ms each owner was busy within `[from_s, to_s)` seconds.
    fn slot_ms(&self, from_s: u64, to_s: u64) -> BTreeMap<&str, u64> {
        let (from, to) = (from_s * 1000, to_s * 1000);
        let mut by_owner = BTreeMap::new();
        for (owner, start, end) in &self.runs {
            let (start, end) = ((*start).max(from), (*end).min(to));
            if end > start {
                *by_owner.entry(owner.as_str()).or_insert(0) += end - start;
            }
        }
        by_owner
    }

    /// `owner`'s share of the busy slot-time of `owners` within the window, in percent.
    fn share(&self, owner: &str, owners: &[&str], from_s: u64, to_s: u64) -> f64 {
        let busy = self.slot_ms(from_s, to_s);
        let of = |o: &str| busy.get(o).copied().unwrap_or(0) as f64;
        let total: f64 = owners.iter().map(|o| of(o)).sum();
        assert!(total > 0.0, "nobody ran within {from_s}..{to_s} s");
        100.0 * of(owner) / total
    }

    /// Busy slots over the window, as a fraction of the grid.
    fn utilisation(&self, from_s: u64, to_s: u64) -> f64 {
        let busy: u64 = self.slot_ms(from_s, to_s).values().sum();
        busy as f64 / (SLOTS * (to_s - from_s) * 1000) as f64
    }
}

fn ticket_mode() -> SgePolicy {
    SgePolicy::grid_engine_defaults()
}

fn leaf(name: &str, shares: u32) -> ShareTreeNode {
    ShareTreeNode { name: name.into(), parent: None, shares, leaf: Some(ShareTreeLeaf::User(name.into())) }
}

/// Enough tasks to keep the whole grid busy for `seconds` (tasks average 3 s).
fn saturating(seconds: u64) -> u32 {
    (SLOTS * seconds / 2) as u32
}

#[test]
fn the_share_tree_splits_a_saturated_grid_by_shares() {
    const RUN_S: u64 = 600;
    let mut sge = ticket_mode();
    sge.weight_tickets_share = 10_000;
    sge.share_tree = vec![leaf("u1", 30), leaf("u2", 60), leaf("u3", 10)];
    let jobs = [("a", "u1", 0, saturating(RUN_S)), ("b", "u2", 0, saturating(RUN_S))];
    let busy = run_busy(&grid(Algorithm::Sgeee, sge, &jobs, RUN_S));
    let late = busy.share("u1", &["u1", "u2"], RUN_S / 2, RUN_S);
    let early = busy.share("u1", &["u1", "u2"], 0, RUN_S / 2);
    let utilisation = busy.utilisation(RUN_S / 2, RUN_S);
    println!(
        "share tree 30/60/10 (u3 idle), {} task starts over {RUN_S} s on {SLOTS} slots: \
         u1 {early:.1}% of u1+u2 in the first half, {late:.1}% in the second (target 33.3%); \
         utilisation {utilisation:.3} in the second half",
        busy.starts
    );
    print_windows("share tree 30/60/10: u1's share of u1+u2", &windows(&busy, "u1", &["u1", "u2"], 0, RUN_S, 60), 60);
    assert!(busy.starts > 5_000, "{}", busy.starts);
    assert!(utilisation > 0.95, "the grid stays saturated: {utilisation:.3}");
    assert!((late - 100.0 / 3.0).abs() <= 3.0, "u1 has {late:.1}% of the busy slot-time, not 33.3 ± 3");
}

/// B's share of the busy slot-time per window, from `from_s` to `to_s` in steps of `step_s`.
fn windows(busy: &Busy, owner: &str, owners: &[&str], from_s: u64, to_s: u64, step_s: u64) -> Vec<(u64, f64)> {
    (from_s..to_s).step_by(step_s as usize).map(|at| (at, busy.share(owner, owners, at, (at + step_s).min(to_s)))).collect()
}

fn print_windows(label: &str, figures: &[(u64, f64)], step_s: u64) {
    let text: Vec<String> = figures.iter().map(|(at, share)| format!("{at}-{}s {share:.1}%", at + step_s)).collect();
    println!("{label}: {}", text.join(", "));
}

/// Equal shares; A alone for the first third, then B with plenty of work.
fn compensation(halftime_ms: u64) -> (Busy, Vec<(u64, f64)>) {
    const RUN_S: u64 = 900;
    const STEP_S: u64 = 75;
    let mut sge = ticket_mode();
    sge.weight_tickets_share = 10_000;
    sge.halftime_ms = halftime_ms;
    sge.share_tree = vec![leaf("a", 50), leaf("b", 50)];
    let jobs = [("a", "a", 0, saturating(RUN_S)), ("b", "b", RUN_S * 1000 / 3, saturating(RUN_S))];
    let busy = run_busy(&grid(Algorithm::Sgeee, sge, &jobs, RUN_S));
    let figures = windows(&busy, "b", &["a", "b"], RUN_S / 3, RUN_S, STEP_S);
    print_windows(
        &format!("compensation, halftime {} s, {} task starts: B's share after arriving at {} s", halftime_ms / 1000, busy.starts, RUN_S / 3),
        &figures,
        STEP_S,
    );
    (busy, figures)
}

#[test]
fn a_late_user_is_compensated_for_the_usage_it_did_not_have() {
    // Grid Engine's default halftime, a week: no decay within the run.
    let (busy, figures) = compensation(SgePolicy::grid_engine_defaults().halftime_ms);
    assert!(busy.starts > 10_000, "{}", busy.starts);
    let (first, last) = (figures[0].1, figures[figures.len() - 1].1);
    assert!(first > 80.0, "B goes first on arriving: {first:.1}%");
    assert!(first > last, "the compensation fades: {first:.1}% then {last:.1}%");
    for pair in figures.windows(2) {
        assert!(pair[1].1 <= pair[0].1 + 2.0, "B's share only falls: {figures:?}");
    }
    // Without decay B is owed A's head start until its usage has caught up,
    // which it approaches only gradually (its entitlement is A's usage over
    // both): at the end B is still a little ahead, but near half.
    assert!(last > 50.0 && last < 60.0, "usage has nearly evened out by the end: {last:.1}%");

    // A one-minute halftime forgets A's head start within minutes: B's lead
    // fades faster and the split ends nearer half.
    let (_, short) = compensation(60_000);
    let short_last = short[short.len() - 1].1;
    assert!(short[1].1 < figures[1].1, "the lead fades faster: {:.1}% against {:.1}%", short[1].1, figures[1].1);
    assert!((short_last - 50.0).abs() < (last - 50.0).abs(), "{short_last:.1}% against {last:.1}%");
}

/// u1 and u2 each keep the grid saturated; u1's share of the busy slot-time
/// over the second half of the run.
fn functional_split(sge: SgePolicy, label: &str) -> f64 {
    const RUN_S: u64 = 600;
    let jobs = [("a", "u1", 0, saturating(RUN_S)), ("b", "u2", 0, saturating(RUN_S))];
    let busy = run_busy(&grid(Algorithm::Sgeee, sge, &jobs, RUN_S));
    let late = busy.share("u1", &["u1", "u2"], RUN_S / 2, RUN_S);
    println!("{label}, {} task starts over {RUN_S} s: u1 {late:.1}% of the busy slot-time in the second half", busy.starts);
    late
}

fn functional_1_3() -> SgePolicy {
    let mut sge = ticket_mode();
    sge.weight_tickets_functional = 10_000;
    sge.functional_users = [("u1".to_string(), 1), ("u2".to_string(), 3)].into();
    sge
}

#[test]
fn functional_and_override_tickets_split_the_grid_as_configured() {
    let functional = functional_split(functional_1_3(), "functional shares u1:u2 = 1:3");
    assert!((functional - 25.0).abs() <= 3.0, "u1 has {functional:.1}%, not 25 ± 3");

    let mut with_override = functional_1_3();
    with_override.override_users = [("u1".to_string(), 2_500)].into();
    let overridden = functional_split(with_override, "the same plus 2,500 override tickets for u1");
    // The users' functional pool is weight_user (0.25) of the 10,000 tickets:
    // u1 625, u2 1,875. With 2,500 override tickets u1 has 3,125 of 5,000.
    assert!(overridden > functional + 5.0, "override tickets move the split toward u1: {functional:.1}% -> {overridden:.1}%");
    assert!((overridden - 62.5).abs() <= 3.0, "u1 has {overridden:.1}%, not 62.5 ± 3");
}

/// A submits a big job first, B one just after: A's share while both have work.
fn plain_split(user_sort: bool) -> f64 {
    const RUN_S: u64 = 300;
    let mut sge = SgePolicy::grid_engine_defaults();
    sge.user_sort = user_sort;
    let jobs = [("a", "a", 0, 3_000), ("b", "b", 1_000, 3_000)];
    let busy = run_busy(&grid(Algorithm::SgePlain, sge, &jobs, RUN_S));
    let (from, to) = (10, 200);
    let share = busy.share("a", &["a", "b"], from, to);
    println!(
        "sge-plain, user_sort {user_sort}, {} task starts: A {share:.1}% of the busy slot-time over {from}-{to} s, utilisation {:.3}",
        busy.starts,
        busy.utilisation(from, to)
    );
    share
}

#[test]
fn user_sort_shares_the_grid_between_users_and_fcfs_does_not() {
    let fcfs = plain_split(false);
    assert!(fcfs > 99.0, "without user_sort the first job takes every slot: {fcfs:.1}%");
    let sorted = plain_split(true);
    assert!((sorted - 50.0).abs() <= 3.0, "with user_sort the users share the grid: {sorted:.1}%");
}
