//! The example scenarios under `scenarios/` read, run to the end, and replay;
//! each GridServer scenario shows its feature's effect, checked on the log.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use gridfold::core::event::{CancelReason, Entry, Event, LibraryRef, Order, OrderBatch, Origin, Payload};
use gridfold::core::fold::fold;
use gridfold::core::ids::{EngineId, Seq, TaskRef};
use gridfold::core::replay::{replay, ReplayOptions};
use gridfold::core::state::State;
use gridfold::files::scenario::Scenario;
use gridfold::sim::{run, Outcome, RunOptions, SimReport};

fn scenario_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios").join(name)
}

/// Runs a scenario file, then does what a caller of `sim::run` may do with the
/// log it returns: replay it with verification and compare digests.
fn run_file(name: &str) -> SimReport {
    run_file_with_log(name).0
}

fn run_file_with_log(name: &str) -> (SimReport, Vec<Entry>) {
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
    assert!(report.task_check.holds(), "{report}");
    assert_eq!(report.task_check.unended, 0, "{report}");
    (report, entries)
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

// ---- the GridServer scenarios ------------------------------------------------

/// Every event of the log with its sequence, in order.
fn events(entries: &[Entry]) -> impl Iterator<Item = (Seq, &Event)> {
    entries.iter().filter_map(|entry| match &entry.payload {
        Payload::Event(envelope) => Some((entry.seq, &envelope.event)),
        Payload::Undecodable { .. } => None,
    })
}

/// Every order published, with the sequence of its batch, in log order.
fn orders(entries: &[Entry]) -> impl Iterator<Item = (Seq, &Order)> {
    events(entries).flat_map(|(seq, event)| match event {
        Event::OrderBatch(batch) => batch.orders.iter().map(move |order| (seq, order)).collect::<Vec<_>>(),
        _ => Vec::new(),
    })
}

/// Every dispatch: (batch sequence, task, attempt, engine), in log order.
fn dispatches(entries: &[Entry]) -> Vec<(Seq, TaskRef, u32, EngineId)> {
    orders(entries)
        .filter_map(|(seq, order)| match order {
            Order::Dispatch { task, attempt, engine, .. } => Some((seq, task.clone(), *attempt, engine.clone())),
            _ => None,
        })
        .collect()
}

/// Folds the log and hands `check` every batch with the state it was decided on
/// (folded through its `based_on_seq`). Exact for runs without projector
/// restarts: the simulated projector decides only when caught up with nothing in flight.
fn at_each_batch(entries: &[Entry], mut check: impl FnMut(&State, &OrderBatch)) {
    let mut state = State::new();
    let mut folded = 0usize;
    for entry in entries {
        let Payload::Event(envelope) = &entry.payload else { continue };
        let Event::OrderBatch(batch) = &envelope.event else { continue };
        assert_eq!(entry.origin, Origin::Projector);
        let based_on = batch.based_on_seq.0 as usize;
        assert!(based_on >= folded, "a batch decided on a state folded before the previous batch");
        for earlier in &entries[folded..based_on] {
            fold(&mut state, earlier);
        }
        folded = based_on;
        check(&state, batch);
    }
}

/// For each dispatch of a batch that `is_checked`, whether every engine `preferred`
/// over its engine was full (in the state decided on, with the batch's own
/// dispatches before it booked). Returns how many dispatches were checked.
fn preferred_were_full(
    entries: &[Entry],
    is_checked: impl Fn(&State, &TaskRef, &EngineId) -> bool,
    preferred: impl Fn(&State, &TaskRef, &EngineId, &EngineId) -> bool,
) -> usize {
    let mut checked = 0;
    at_each_batch(entries, |state, batch| {
        let mut booked: BTreeMap<EngineId, u32> = BTreeMap::new();
        for order in &batch.orders {
            let Order::Dispatch { task, engine, .. } = order else { continue };
            let slots = state.job(state.job_idx(&task.job).expect("dispatched jobs exist")).slots_per_task;
            if is_checked(state, task, engine) {
                checked += 1;
                for other in state.engines() {
                    if other.id != *engine && preferred(state, task, &other.id, engine) {
                        let used = other.used + booked.get(&other.id).copied().unwrap_or(0);
                        assert!(
                            used + slots > other.slots,
                            "batch on {:?}: {task} went to {engine} while {} had a free slot",
                            batch.based_on_seq,
                            other.id
                        );
                    }
                }
            }
            *booked.entry(engine.clone()).or_default() += slots;
        }
    });
    checked
}

fn prefix(engine: &EngineId) -> &str {
    engine.as_str().rsplit_once('-').map_or(engine.as_str(), |(prefix, _)| prefix)
}

#[test]
fn libraries_no_rooted_task_runs_before_its_engine_holds_the_library() {
    let (report, entries) = run_file_with_log("libraries.toml");
    let g = &report.gridserver;
    assert_eq!((report.jobs_done, report.rejected_entries), (3, 0), "{report}");
    assert_eq!(g.libraries_published, 2);
    assert!(g.library_syncs_ordered > 0 && g.library_syncs_reported > 0, "{report}");
    assert!(g.library_sync_failures_reported > 0, "a 20% failure rate fails some sync: {report}");
    assert_eq!(g.unschedulable_by_reason.get("library-not-published"), Some(&1), "{report}");

    let roots: BTreeMap<&str, LibraryRef> =
        [("render", LibraryRef::new("render-lib", "2.1.0")), ("late-lib", LibraryRef::new("sim-lib", "1.0"))].into();
    let mut held: BTreeMap<EngineId, BTreeSet<LibraryRef>> = BTreeMap::new();
    let mut syncing: BTreeSet<EngineId> = BTreeSet::new();
    let (mut rooted, mut plain_while_syncing) = (0, 0);
    let mut sim_lib_published = false;
    for (_, event) in events(&entries) {
        match event {
            Event::EngineLoggedIn { engine, props, .. } => {
                held.insert(engine.clone(), props.libraries.iter().cloned().collect());
            }
            Event::LibraryPublished(info) if info.library.name == "sim-lib" => sim_lib_published = true,
            Event::LibrarySynced { engine, library } => {
                held.get_mut(engine).expect("logged in").insert(library.clone());
                syncing.remove(engine);
            }
            Event::LibrarySyncFailed { engine, .. } => {
                syncing.remove(engine);
            }
            Event::OrderBatch(batch) => {
                for order in &batch.orders {
                    match order {
                        Order::SyncLibrary { engine, .. } => {
                            syncing.insert(engine.clone());
                        }
                        Order::Dispatch { task, engine, .. } => match roots.get(task.job.as_str()) {
                            Some(root) => {
                                assert!(held[engine].contains(root), "{task} went to {engine} before it held {root}");
                                assert!(task.job.as_str() != "late-lib" || sim_lib_published);
                                rooted += 1;
                            }
                            None => plain_while_syncing += usize::from(syncing.contains(engine)),
                        },
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    assert_eq!(rooted, 52, "every task of the rooted jobs was checked");
    assert!(plain_while_syncing > 0, "an engine keeps taking other work while it syncs");
}

#[test]
fn tiers_fill_every_blade_before_a_server_and_every_server_before_a_desktop() {
    let (report, entries) = run_file_with_log("tiers-and-affinity.toml");
    assert_eq!((report.jobs_done, report.tasks_done), (2, 80), "{report}");
    let tier = |engine: &EngineId| match prefix(engine) {
        "blade-hel" | "blade-ams" => 0,
        "server" => 1,
        "desktop" => 2,
        _ => 3,
    };
    let below_the_top = preferred_were_full(&entries, |_, _, engine| tier(engine) > 0, |_, _, other, engine| {
        tier(other) < tier(engine)
    });
    assert!(below_the_top > 10, "servers, desktops and the untiered engine got work: {below_the_top}");
    let desktops = dispatches(&entries).iter().filter(|(.., engine)| tier(engine) >= 2).count();
    assert!(desktops > 0);

    // Within the blades, near-data's affinity puts hel first.
    let ams = preferred_were_full(
        &entries,
        |_, task, engine| task.job.as_str() == "near-data" && prefix(engine) == "blade-ams",
        |_, _, other, _| prefix(other) == "blade-hel",
    );
    assert!(ams > 0, "near-data reached the ams blades once the hel ones were full");
}

#[test]
fn conditions_discriminate_jump_the_queue_follow_their_data_and_wait_for_dependencies() {
    let (report, entries) = run_file_with_log("conditions.toml");
    let g = &report.gridserver;
    // broken fails; needs-broken fails with it as a job; partly-broken's tasks 0-4 with broken/0.
    assert_eq!((report.jobs_done, report.jobs_failed), (4, 3), "{report}");
    assert_eq!((g.jobs_failed_by_dependency, g.tasks_failed_by_dependency), (1, 5), "{report}");

    let all = dispatches(&entries);
    let first_dispatch = |job: &str, index: u32| {
        all.iter().position(|(_, task, ..)| task.job.as_str() == job && task.index == index).expect("dispatched")
    };
    // Discriminator: tasks 0-3 of sweep on big engines only.
    let discriminated: Vec<_> = all.iter().filter(|(_, task, ..)| task.job.as_str() == "sweep" && task.index < 4).collect();
    assert_eq!(discriminated.len(), 4);
    assert!(discriminated.iter().all(|(.., engine)| prefix(engine) == "big"), "{discriminated:?}");
    // Queue jump: tasks 30-39 before every other fresh task of sweep but those the
    // discriminator held for the big engines.
    let last_jumper = (30..40).map(|index| first_dispatch("sweep", index)).max().unwrap();
    let first_plain = (4..20).map(|index| first_dispatch("sweep", index)).min().unwrap();
    assert!(last_jumper < first_plain, "queue jumpers at {last_jumper}, first plain task at {first_plain}");

    let completed = |job: &str, index: u32| {
        events(&entries)
            .find_map(|(seq, event)| match event {
                Event::TaskCompleted { task, engine, .. } if task.job.as_str() == job && task.index == index => {
                    Some((seq, engine.clone()))
                }
                _ => None,
            })
            .expect("completed")
    };
    // Dependencies: post after the whole of prep, sweep 20-29 after prep/3.
    let prep_ended = (0..4).map(|index| completed("prep", index).0).max().unwrap();
    assert!(all.iter().filter(|(_, task, ..)| task.job.as_str() == "post").all(|(seq, ..)| *seq > prep_ended));
    let prep_3 = completed("prep", 3).0;
    let waited: Vec<_> = all.iter().filter(|(_, task, ..)| task.job.as_str() == "sweep" && (20..30).contains(&task.index)).collect();
    assert_eq!(waited.len(), 10);
    assert!(waited.iter().all(|(seq, ..)| *seq > prep_3));
    // Task affinity: once dataset/0 is done, its engine gets the first of tasks 1-9.
    let (data_done, data_engine) = completed("dataset", 0);
    let followers: Vec<_> = all.iter().filter(|(_, task, ..)| task.job.as_str() == "dataset" && task.index > 0).collect();
    assert!(followers.iter().all(|(seq, ..)| *seq > data_done));
    assert_eq!(followers[0].3, data_engine, "{followers:?}");
    let on_data_engine = followers.iter().filter(|(.., engine)| *engine == data_engine).count();
    assert!(on_data_engine >= 2, "the data engine's two slots go to followers first: {followers:?}");
}

#[test]
fn blacklisted_engines_get_no_more_of_the_job_and_greylisted_ones_only_when_the_rest_are_full() {
    let (report, entries) = run_file_with_log("blacklisting.toml");
    assert_eq!(report.gridserver.blacklistings, 3, "{report}");
    let blacklists: Vec<(Seq, String, EngineId)> = orders(&entries)
        .filter_map(|(seq, order)| match order {
            Order::Blacklist { job, engine, failures } => {
                let threshold = 2;
                assert_eq!(*failures, threshold, "{order}");
                Some((seq, job.to_string(), engine.clone()))
            }
            _ => None,
        })
        .collect();
    let mut pairs: Vec<(String, String)> = blacklists.iter().map(|(_, job, engine)| (job.clone(), engine.to_string())).collect();
    pairs.sort();
    assert_eq!(pairs, [("both", "flaky-1"), ("strict", "bad-1"), ("strict", "bad-2")].map(|(j, e)| (j.to_string(), e.to_string())));
    let all = dispatches(&entries);
    for (blacklisted_at, job, engine) in &blacklists {
        let before = all.iter().filter(|(seq, task, _, to)| task.job.as_str() == job && to == engine && seq < blacklisted_at).count();
        let after = all.iter().filter(|(seq, task, _, to)| task.job.as_str() == job && to == engine && seq >= blacklisted_at).count();
        assert!(before > 0 && after == 0, "{job} on {engine}: {before} dispatches before the blacklist, {after} after");
    }
    // Other jobs keep using the engines.
    assert!(all.iter().any(|(_, task, _, engine)| task.job.as_str() == "other" && prefix(engine) == "bad"));

    // Greylisting: grey goes to an engine with failures only when every engine without was full.
    let failures = |state: &State, task: &TaskRef, engine: &EngineId| {
        let job = state.job(state.job_idx(&task.job).unwrap());
        state.engine_idx(engine).and_then(|e| job.failures_by_engine.get(&e).copied()).unwrap_or(0)
    };
    let greylisted = preferred_were_full(
        &entries,
        |state, task, engine| task.job.as_str() == "grey" && failures(state, task, engine) > 0,
        |state, task, other, _| failures(state, task, other) == 0,
    );
    assert!(greylisted > 0, "greylisted engines still took some of grey's tasks");
    // A retry never goes back to the engine its previous attempt failed on: here
    // another engine could always run it, so it waits for one.
    let mut failed_on: BTreeMap<(TaskRef, u32), EngineId> = BTreeMap::new();
    for (_, event) in events(&entries) {
        if let Event::TaskFailed { task, attempt, engine, .. } = event {
            failed_on.insert((task.clone(), *attempt), engine.clone());
        }
    }
    let mut retries = 0;
    for (_, task, attempt, engine) in &all {
        if let Some(failed_engine) = failed_on.get(&(task.clone(), attempt - 1)) {
            retries += 1;
            assert_ne!(failed_engine, engine, "{task} attempt {attempt} went back to {engine}");
        }
    }
    assert!(retries > 0, "{report}");
}

#[test]
fn redundancy_copies_slow_tasks_for_every_reason_and_the_first_result_wins() {
    let (report, entries) = run_file_with_log("redundancy.toml");
    let g = &report.gridserver;
    assert_eq!((report.jobs_done, report.tasks_done), (2, 90), "{report}");
    for reason in ["task-max-time", "average", "std-dev", "percent-completed"] {
        assert!(g.reschedules_by_reason.get(reason).copied().unwrap_or(0) > 0, "no {reason} copy: {report}");
    }
    // steady cancels the losing copies at once; ragged lets them finish and ignores their results.
    assert!(g.redundant_copies_cancelled > 0 && report.faults.redundant_runs_stopped > 0, "{report}");
    assert!(g.redundant_results_ignored > 0, "{report}");
    assert_eq!(g.completions_accepted, report.tasks_done + g.redundant_results_ignored);
    for (_, order) in orders(&entries) {
        if let Order::Cancel { task, reason: CancelReason::RedundantCopy, .. } = order {
            assert_eq!(task.job.as_str(), "steady", "{order}");
        }
    }
    // A copy never runs where its task already runs (nothing fails here, so every
    // attempt after the first is a copy), and copies run on fast and slow engines alike.
    let mut first_engine: BTreeMap<TaskRef, EngineId> = BTreeMap::new();
    let mut copies = 0;
    for (_, task, attempt, engine) in dispatches(&entries) {
        if attempt == 1 {
            first_engine.insert(task, engine);
        } else {
            assert_ne!(first_engine[&task], engine, "{task} #{attempt}");
            copies += 1;
        }
    }
    // A copy still waiting when its task completes is dropped, never dispatched.
    let reschedules: u64 = g.reschedules_by_reason.values().sum();
    assert!(copies > 0, "{report}");
    assert_eq!(copies as u64 + g.redundant_copies_dropped, reschedules, "every reschedule is a copy dispatched or dropped: {report}");

    // The same seed gives the same run.
    let (again, _) = run_file_with_log("redundancy.toml");
    assert_eq!(again.chain_digest, report.chain_digest);
    assert_eq!(again, report);
}

/// Every GridServer scenario again with every fault at once, over a few seeds:
/// each run must end every job, pass the task check, and replay exactly.
#[test]
fn every_gridserver_scenario_survives_every_fault() {
    let mut crashes = 0;
    for name in ["libraries.toml", "tiers-and-affinity.toml", "conditions.toml", "blacklisting.toml", "redundancy.toml"] {
        let mut scenario = Scenario::from_file(&scenario_file(name)).unwrap_or_else(|e| panic!("{e}"));
        let faults = &mut scenario.faults;
        faults.engine_crash_per_million = 60_000;
        faults.crashed_engines_return_after_ms = Some(8_000);
        faults.duplicate_delivery_per_million = 50_000;
        faults.late_start_per_million = 20_000;
        faults.late_start_delay_ms = scenario.policy.dispatch_timeout_ms + 5_000;
        faults.projector_restarts = 3;
        faults.restart_downtime_ms = 300;
        faults.snapshot_every_entries = 40;
        for seed in 1..=3 {
            scenario.seed = seed;
            scenario.policy.seed = seed;
            let (report, _) = run(&scenario, &RunOptions::default(), &mut |_| {}).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(report.outcome, Outcome::AllJobsEnded, "{name}: {report}");
            assert!(report.task_check.holds() && report.task_check.unended == 0, "{name}: {report}");
            assert!(report.projector_restarts >= 1, "{name}: {report}");
            crashes += report.faults.engine_crashes;
        }
    }
    assert!(crashes > 0);
}

/// Runs one of Grid Engine's ordering scenarios to its horizon (each keeps the
/// grid saturated, so no job ends), replays its log with verification, and
/// returns each owner's share of the busy slot-time in permille.
fn grid_engine_split(name: &str) -> (SimReport, BTreeMap<String, u64>) {
    let scenario = Scenario::from_file(&scenario_file(name)).unwrap_or_else(|e| panic!("{e}"));
    // Thousands of starts: the invariants are checked once, by the replay below.
    let options = RunOptions { check_invariants: false, ..RunOptions::default() };
    let (report, entries) = run(&scenario, &options, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    println!("{name}:\n{report}");
    assert_eq!(report.outcome, Outcome::Horizon, "{report}");
    assert!(report.task_check.holds(), "{report}");
    assert_eq!(report.rejected_entries, 0, "{report}");
    assert!(report.utilisation_permille > 950, "the grid stays saturated: {report}");
    let options = ReplayOptions { verify: true, stop_at: None, check_invariants: false };
    let (state, replayed) = replay(State::new(), &entries, &options, &mut |_| {});
    assert_eq!(replayed.first_divergence, None);
    assert_eq!(state.state_digest().to_hex(), report.state_digest);
    state.check_invariants();
    let split = report.busy_share_by_owner_permille.clone();
    (report, split)
}

/// Asserts `owner` had `target` permille of the busy slot-time, within `tolerance`.
fn assert_share(split: &BTreeMap<String, u64>, owner: &str, target: u64, tolerance: u64) {
    let share = split.get(owner).copied().unwrap_or(0);
    assert!(share.abs_diff(target) <= tolerance, "{owner} had {share}‰ of the busy slot-time, not {target} ± {tolerance}: {split:?}");
}

#[test]
fn share_tree_scenario_splits_the_grid_40_20_40() {
    let (report, split) = grid_engine_split("share-tree.toml");
    assert!(report.dispatches > 2_500, "{report}");
    assert_share(&split, "alice", 400, 40);
    assert_share(&split, "bob", 200, 40);
    assert_share(&split, "carol", 400, 40);
}

#[test]
fn functional_and_override_scenario_splits_the_grid_12_37_50() {
    let (report, split) = grid_engine_split("functional-and-override.toml");
    assert!(report.dispatches > 2_500, "{report}");
    // Targets 125/375/500; each user's next task gets 1/(n + 1) of its
    // tickets with n running, which on 20 slots takes most from the smallest.
    assert_share(&split, "alice", 125, 35);
    assert_share(&split, "bob", 375, 35);
    assert_share(&split, "carol", 500, 35);
}

#[test]
fn user_sort_scenario_shares_the_grid_half_and_half_where_fcfs_gives_it_all_to_the_first() {
    let (report, split) = grid_engine_split("user-sort.toml");
    assert!(report.dispatches > 1_000, "{report}");
    assert_share(&split, "alice", 500, 30);
    assert_share(&split, "bob", 500, 30);

    let mut fcfs = Scenario::from_file(&scenario_file("user-sort.toml")).unwrap_or_else(|e| panic!("{e}"));
    fcfs.policy.sge.user_sort = false;
    let options = RunOptions { check_invariants: false, ..RunOptions::default() };
    let (report, _) = run(&fcfs, &options, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    let alice = report.busy_share_by_owner_permille.get("alice").copied().unwrap_or(0);
    assert!(alice > 990, "without user_sort alice's earlier job takes every slot: {report}");
}

/// Grid Engine's queue selection over engines that differ only in the memory
/// they report in use and their `seq_no`: under `seqno` no task goes to a light
/// engine while a heavy one (seq_no 1) has a free slot; under `load` (the same
/// file, the method switched) no task goes to a heavy one while a light one
/// (lower load formula) has.
#[test]
fn queue_sort_seqno_fills_the_lowest_seq_no_first_and_load_the_least_loaded() {
    let (report, entries) = run_file_with_log("queue-sort.toml");
    assert_eq!((report.jobs_done, report.tasks_done), (2, 90), "{report}");
    let light_while_heavy_free = preferred_were_full(&entries, |_, _, engine| prefix(engine) == "light", |_, _, other, _| {
        prefix(other) == "heavy"
    });
    assert!(light_while_heavy_free > 10, "the light engines got work once the heavy ones were full");

    let mut scenario = Scenario::from_file(&scenario_file("queue-sort.toml")).unwrap();
    scenario.policy.queue_sort_method = gridfold::core::event::QueueSort::Load;
    let (report, entries) = run(&scenario, &RunOptions::default(), &mut |_| {}).unwrap();
    assert_eq!((report.outcome, report.tasks_done), (Outcome::AllJobsEnded, 90), "{report}");
    let heavy_while_light_free = preferred_were_full(&entries, |_, _, engine| prefix(engine) == "heavy", |_, _, other, _| {
        prefix(other) == "light"
    });
    assert!(heavy_while_light_free > 10, "the heavy engines got work once the light ones were full");
}

/// `scenarios/soft-requests.toml`: a task of the job with a soft request goes
/// to an engine that does not meet it only while every engine that does is
/// full, and some do go there (the request excludes none).
#[test]
fn soft_requests_fill_the_engines_meeting_them_first_without_excluding_the_others() {
    let (report, entries) = run_file_with_log("soft-requests.toml");
    assert_eq!((report.jobs_done, report.tasks_done), (2, 90), "{report}");
    let wants_gpu = |_: &State, task: &TaskRef| task.job.as_str() == "wants-gpu";
    let on_cpu = preferred_were_full(
        &entries,
        |state, task, engine| wants_gpu(state, task) && prefix(engine) == "cpu",
        |_, _, other, _| prefix(other) == "gpu",
    );
    let on_gpu = preferred_were_full(&entries, |state, task, engine| wants_gpu(state, task) && prefix(engine) == "gpu", |_, _, _, _| false);
    assert!(on_cpu > 0 && on_gpu > 0, "{on_gpu} task(s) on gpu engines, {on_cpu} on the others: {report}");
}

// ---- Techila ---------------------------------------------------------------------

/// `scenarios/techila.toml`: the license of 10 holds at every point of the log,
/// the Lowest project's tasks give way to bob's (Preempt orders) and still all
/// complete, and the 5 fastest engines are lost at 20 s with nothing left undone.
#[test]
fn the_techila_scenario_keeps_its_license_of_10_preempts_the_lowest_project_and_ends_every_job() {
    let (report, entries) = run_file_with_log("techila.toml");
    let mut state = State::new();
    let mut most = 0;
    let mut preempts = 0;
    for entry in &entries {
        fold(&mut state, entry);
        most = most.max(state.engines().iter().map(|engine| engine.used).sum::<u32>());
        if let Payload::Event(envelope) = &entry.payload
            && let Event::OrderBatch(batch) = &envelope.event
        {
            preempts += batch.orders.iter().filter(|order| matches!(order, Order::Preempt { .. })).count();
        }
    }
    assert_eq!(most, 10, "{report}");
    assert!(preempts > 0, "{report}");
    assert_eq!(report.engines_lost, 5, "{report}");
}
