//! Scenario tests of the GridServer stages: libraries, tiers, conditions, black-
//! and greylisting, redundant rescheduling. Each builds a log by hand, lets the
//! projector decide, folds the batch back, and compares the orders with what a
//! person can read (`UPDATE_EXPECT=1` regenerates them). Engines in each test
//! differ only in the property at stake.

use expect_test::expect;

use super::tests::{check, decide_once};
use crate::core::event::{Event, JobSpec, LibraryInfo, LibraryRef, Policy, Preference, RedundancyPolicy, TaskConditions};
use crate::core::explain::explain;
use crate::core::fold::fold;
use crate::core::state::{JobStatus, State, TaskStatus};
use crate::core::testkit::*;

fn why(state: &State, job: &str, index: u32) -> String {
    explain(state, &task(job, index)).unwrap().to_string()
}

fn with_custom(props: crate::core::event::EngineProps, key: &str, value: &str) -> crate::core::event::EngineProps {
    let mut props = props;
    props.custom.insert(key.into(), value.into());
    props
}

fn library(name: &str, version: &str) -> LibraryRef {
    LibraryRef::new(name, version)
}

fn publish(log: &mut LogBuilder, lib: &LibraryRef) {
    log.push(Event::LibraryPublished(LibraryInfo { library: lib.clone(), size_bytes: 100, digest_hex: "ab".repeat(32) }));
}

fn conditions(pairs: Vec<(u32, TaskConditions)>) -> std::collections::BTreeMap<u32, TaskConditions> {
    pairs.into_iter().collect()
}

#[test]
fn a_job_rooted_on_a_library_runs_only_where_it_is_synced_and_idle_engines_sync_it() {
    let lib = library("pricing", "2.1");
    let mut log = LogBuilder::new();
    publish(&mut log, &lib);
    let mut holder = linux_props("lyon", 8192);
    holder.libraries = vec![lib.clone()];
    log.login("has-it", 1, holder);
    log.login("lacks-it", 1, linux_props("lyon", 8192));
    let mut spec = job_spec("priced", 3, "");
    spec.options.root_library = Some(lib.clone());
    log.submit(spec);
    log.submit(job_spec("plain", 1, ""));
    let mut state = State::new();
    // The engine without the library is told to sync it and meanwhile takes the plain job.
    check(&mut log, &mut state, expect![[r#"
        sync pricing@2.1 on lacks-it
        dispatch priced/0 #1 -> has-it
        dispatch plain/0 #1 -> lacks-it
    "#]]);
    expect![[r#"
        task priced/1: waiting (job active), attempts 0, failures 0
          no runnable job is examined before this one
          excluded by library-missing: lacks-it
          excluded by no-free-slot: has-it
    "#]]
    .assert_eq(&why(&state, "priced", 1));
    log.push(Event::LibrarySynced { engine: engine_id("lacks-it"), library: lib.clone() });
    log.started("plain", 0, 1, "lacks-it");
    log.completed("plain", 0, 1, "lacks-it");
    check(&mut log, &mut state, expect![[r#"
        dispatch priced/1 #1 -> lacks-it
    "#]]);
}

#[test]
fn a_drained_engine_is_not_asked_to_sync_a_library_until_it_is_resumed() {
    let lib = library("pricing", "2.1");
    let mut log = LogBuilder::new();
    publish(&mut log, &lib);
    log.login("lacks-it", 1, linux_props("lyon", 8192));
    log.push(Event::EngineDrainChanged { engine: engine_id("lacks-it"), drained: true });
    let mut spec = job_spec("priced", 1, "");
    spec.options.root_library = Some(lib.clone());
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        (no orders)
    "#]]);
    log.push(Event::EngineDrainChanged { engine: engine_id("lacks-it"), drained: false });
    check(&mut log, &mut state, expect![[r#"
        sync pricing@2.1 on lacks-it
    "#]]);
}

#[test]
fn a_library_never_published_makes_the_job_unschedulable_until_it_is() {
    let lib = library("missing", "1");
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    let mut spec = job_spec("orphan", 1, "");
    spec.options.root_library = Some(lib.clone());
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        unschedulable orphan (library-not-published)
    "#]]);
    publish(&mut log, &lib);
    check(&mut log, &mut state, expect![[r#"
        sync missing@1 on e1
    "#]]);
}

#[test]
fn a_higher_tier_is_always_chosen_first_and_an_untiered_engine_last() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(Policy {
        engine_tiers: vec!["type=blade".into(), "type=server".into(), "type=desktop".into()],
        ..Policy::default()
    }));
    // Ids in reverse tier order, so neither id nor login order explains the choice.
    log.login("a-none", 2, linux_props("lyon", 8192));
    log.login("b-desktop", 2, with_custom(linux_props("lyon", 8192), "type", "desktop"));
    log.login("c-server", 2, with_custom(linux_props("lyon", 8192), "type", "server"));
    log.login("d-blade", 2, with_custom(linux_props("lyon", 8192), "type", "blade"));
    log.submit(job_spec("tiered", 7, ""));
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    // Before the run: every engine is free, only the blade may take the first task.
    expect![[r#"
        task tiered/0: waiting (job active), attempts 0, failures 0
          no runnable job is examined before this one
          could run now on: d-blade
          excluded by tier-held: a-none, b-desktop, c-server
    "#]]
    .assert_eq(&why(&state, "tiered", 0));
    check(&mut log, &mut state, expect![[r#"
        dispatch tiered/0 #1 -> d-blade
        dispatch tiered/1 #1 -> d-blade
        dispatch tiered/2 #1 -> c-server
        dispatch tiered/3 #1 -> c-server
        dispatch tiered/4 #1 -> b-desktop
        dispatch tiered/5 #1 -> b-desktop
        dispatch tiered/6 #1 -> a-none
    "#]]);
    expect![[r#"
        task tiered/6: dispatched (job active), attempts 1, failures 0
          attempt 1 dispatched, not yet started on a-none
          ranking (tier, then score, then queue_sort_method over load index and seq_no, then id):
             d-blade: tier 0, score 0 (job 0, task 0), load index 1000, seq_no 0
             c-server: tier 1, score 0 (job 0, task 0), load index 1000, seq_no 0
             b-desktop: tier 2, score 0 (job 0, task 0), load index 1000, seq_no 0
          -> a-none: tier 3, score 0 (job 0, task 0), load index 500, seq_no 0
    "#]]
    .assert_eq(&why(&state, "tiered", 6));
}

#[test]
fn an_engine_not_eligible_for_the_next_task_takes_the_first_it_is_eligible_for() {
    let mut log = LogBuilder::new();
    log.login("lyon-1", 1, linux_props("lyon", 8192));
    let mut spec = job_spec("picky", 3, "");
    spec.task_conditions = conditions(vec![
        (0, TaskConditions { discriminator: "site == \"bern\"".into(), ..Default::default() }),
        (1, TaskConditions { discriminator: "site == \"bern\"".into(), ..Default::default() }),
    ]);
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch picky/2 #1 -> lyon-1
    "#]]);
    expect![[r#"
        task picky/0: waiting (job active), attempts 0, failures 0
          no runnable job is examined before this one
          excluded by discriminator-false: lyon-1
          no logged-in engine could ever run it; it waits for one that can
    "#]]
    .assert_eq(&why(&state, "picky", 0));
    log.login("bern-1", 1, linux_props("bern", 8192));
    check(&mut log, &mut state, expect![[r#"
        dispatch picky/0 #1 -> bern-1
    "#]]);
}

#[test]
fn affinity_prefers_without_excluding() {
    let mut log = LogBuilder::new();
    let mut fast = linux_props("lyon", 8192);
    fast.mflops = 5000;
    log.login("a-slow", 1, linux_props("lyon", 8192));
    log.login("b-fast", 1, fast);
    let mut spec = job_spec("keen", 2, "");
    spec.options.affinity = vec![Preference { when: "mflops > 2000".into(), weight: 10 }];
    log.submit(spec);
    let mut state = State::new();
    // The fast engine first, though its id is larger; the slow one still gets the second task.
    check(&mut log, &mut state, expect![[r#"
        dispatch keen/0 #1 -> b-fast
        dispatch keen/1 #1 -> a-slow
    "#]]);
    expect![[r#"
        task keen/0: dispatched (job active), attempts 1, failures 0
          attempt 1 dispatched, not yet started on b-fast
          ranking (tier, then score, then queue_sort_method over load index and seq_no, then id):
          -> b-fast: tier 0, score 10 (job 10, task 0), load index 1000, seq_no 0
             a-slow: tier 0, score 0 (job 0, task 0), load index 1000, seq_no 0
    "#]]
    .assert_eq(&why(&state, "keen", 0));
}

#[test]
fn task_affinity_follows_the_engine_that_ran_the_named_task() {
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    log.login("e2", 1, linux_props("lyon", 8192));
    let mut spec = job_spec("dataset", 3, "");
    spec.task_conditions = conditions(vec![(2, TaskConditions { task_affinity: vec![1], ..Default::default() })]);
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch dataset/0 #1 -> e1
        dispatch dataset/1 #1 -> e2
    "#]]);
    // Both free again: task 2 goes where task 1 ran, not to the smaller id.
    log.started("dataset", 0, 1, "e1");
    log.completed("dataset", 0, 1, "e1");
    log.started("dataset", 1, 1, "e2");
    log.completed("dataset", 1, 1, "e2");
    check(&mut log, &mut state, expect![[r#"
        dispatch dataset/2 #1 -> e2
    "#]]);
    expect![[r#"
        task dataset/2: dispatched (job active), attempts 1, failures 0
          attempt 1 dispatched, not yet started on e2
          ranking (tier, then score, then queue_sort_method over load index and seq_no, then id):
          -> e2: tier 0, score 1000 (job 0, task 1000), load index 1000, seq_no 0
             e1: tier 0, score 0 (job 0, task 0), load index 0, seq_no 0
    "#]]
    .assert_eq(&why(&state, "dataset", 2));
}

#[test]
fn a_queue_jump_task_is_served_first_and_added_tasks_can_jump_too() {
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    let mut spec = job_spec("line", 4, "");
    spec.task_conditions = conditions(vec![(3, TaskConditions { queue_jump: true, ..Default::default() })]);
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch line/3 #1 -> e1
    "#]]);
    log.push(Event::TasksAdded {
        job: job_id("line"),
        tasks: vec![Default::default(), Default::default()],
        conditions: conditions(vec![(1, TaskConditions { queue_jump: true, ..Default::default() })]),
    });
    log.started("line", 3, 1, "e1");
    log.completed("line", 3, 1, "e1");
    check(&mut log, &mut state, expect![[r#"
        dispatch line/5 #1 -> e1
    "#]]);
}

#[test]
fn a_job_waits_for_the_jobs_it_depends_on() {
    let mut log = LogBuilder::new();
    log.login("e1", 2, linux_props("lyon", 8192));
    log.submit(job_spec("prepare", 1, ""));
    let mut after = job_spec("analyse", 1, "");
    after.options.depends_on_jobs = vec![job_id("prepare")];
    log.submit(after);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch prepare/0 #1 -> e1
    "#]]);
    expect![[r#"
        task analyse/0: waiting (job active), attempts 0, failures 0
          its job waits for job(s) to end: prepare
          no runnable job is examined before this one
          once they have ended, could run on: e1
    "#]]
    .assert_eq(&why(&state, "analyse", 0));
    log.started("prepare", 0, 1, "e1");
    log.completed("prepare", 0, 1, "e1");
    check(&mut log, &mut state, expect![[r#"
        dispatch analyse/0 #1 -> e1
    "#]]);
}

#[test]
fn a_dependency_failure_fails_the_dependents_that_ask_and_releases_the_others() {
    let mut log = LogBuilder::new();
    log.login("e1", 1, linux_props("lyon", 8192));
    let mut first = job_spec("fragile", 1, "");
    first.max_attempts = 1;
    log.submit(first);
    let mut strict = job_spec("strict", 1, "");
    strict.options.depends_on_jobs = vec![job_id("fragile")];
    strict.options.fail_on_dependency_failure = true;
    log.submit(strict);
    let mut lenient = job_spec("lenient", 1, "");
    lenient.options.depends_on_jobs = vec![job_id("fragile")];
    log.submit(lenient);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch fragile/0 #1 -> e1
    "#]]);
    log.started("fragile", 0, 1, "e1");
    log.failed("fragile", 0, 1, "e1");
    check(&mut log, &mut state, expect![[r#"
        fail strict (dependency fragile failed)
        dispatch lenient/0 #1 -> e1
    "#]]);
    let strict = state.job(state.job_idx(&job_id("strict")).unwrap());
    assert_eq!(strict.status, JobStatus::Failed);
}

#[test]
fn tasks_wait_for_their_tasks_and_fail_with_them_when_asked() {
    let mut log = LogBuilder::new();
    log.login("e1", 4, linux_props("lyon", 8192));
    let mut spec = job_spec("flow", 4, "");
    spec.max_attempts = 1;
    spec.options.continue_on_task_failure = true;
    spec.options.fail_on_dependency_failure = true;
    spec.task_conditions = conditions(vec![
        (1, TaskConditions { depends_on: vec![task("flow", 0)], ..Default::default() }),
        (3, TaskConditions { depends_on: vec![task("flow", 2)], ..Default::default() }),
    ]);
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch flow/0 #1 -> e1
        dispatch flow/2 #1 -> e1
    "#]]);
    expect![[r#"
        task flow/1: waiting (job active), attempts 0, failures 0
          waits for task(s) to end: flow/0
          no runnable job is examined before this one
          once they have ended, could run on: e1
    "#]]
    .assert_eq(&why(&state, "flow", 1));
    log.started("flow", 0, 1, "e1");
    log.completed("flow", 0, 1, "e1");
    log.started("flow", 2, 1, "e1");
    log.failed("flow", 2, 1, "e1");
    check(&mut log, &mut state, expect![[r#"
        fail flow/3 (dependency flow/2 failed)
        dispatch flow/1 #1 -> e1
    "#]]);
    let key = state.task_key(&task("flow", 3)).unwrap();
    assert_eq!(state.task(key).status, TaskStatus::Failed);
}

#[test]
fn a_dependency_cycle_is_refused_with_the_task_named() {
    let mut log = LogBuilder::new();
    let mut spec = job_spec("loop", 3, "");
    spec.task_conditions = conditions(vec![
        (0, TaskConditions { depends_on: vec![task("loop", 2)], ..Default::default() }),
        (2, TaskConditions { depends_on: vec![task("loop", 0)], ..Default::default() }),
    ]);
    let entry = log.submit(spec);
    let mut state = State::new();
    let rejections = fold(&mut state, &entry);
    expect![[r#"
        job loop refused: the dependencies of task 0 form a cycle
    "#]]
    .assert_eq(&rejections.iter().map(|r| format!("{r}\n")).collect::<String>());
}

#[test]
fn an_engine_that_fails_a_job_often_enough_is_blacklisted_for_that_job_only() {
    let mut log = LogBuilder::new();
    log.login("a-bad", 1, linux_props("lyon", 8192));
    log.login("b-good", 1, linux_props("lyon", 8192));
    let mut spec = job_spec("careful", 4, "");
    spec.max_attempts = 5;
    spec.options.engine_blacklisting = true;
    spec.options.failures_before_blacklist = 2;
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch careful/0 #1 -> a-bad
        dispatch careful/1 #1 -> b-good
    "#]]);
    log.started("careful", 0, 1, "a-bad");
    log.failed("careful", 0, 1, "a-bad");
    // One failure, below the count. The retry waits for b-good rather than go back
    // to a-bad, which takes the next fresh task meanwhile.
    check(&mut log, &mut state, expect![[r#"
        dispatch careful/2 #1 -> a-bad
    "#]]);
    log.started("careful", 2, 1, "a-bad");
    log.failed("careful", 2, 1, "a-bad");
    log.submit(job_spec("other", 1, ""));
    // The second failure blacklists a-bad for `careful`; `other` still uses it.
    check(&mut log, &mut state, expect![[r#"
        blacklist a-bad for careful (2 failures)
        dispatch other/0 #1 -> a-bad
    "#]]);
    expect![[r#"
        task careful/0: waiting (job active), attempts 1, failures 1
          no runnable job is examined before this one
          excluded by blacklisted: a-bad
          excluded by no-free-slot: b-good
          avoids a-bad, where its last attempt failed, while another engine could run it
    "#]]
    .assert_eq(&why(&state, "careful", 0));
    log.push(Event::BlacklistsCleared { engine: Some(engine_id("a-bad")) });
    log.started("other", 0, 1, "a-bad");
    log.completed("other", 0, 1, "a-bad");
    check(&mut log, &mut state, expect![[r#"
        dispatch careful/3 #1 -> a-bad
    "#]]);
}

#[test]
fn greylisting_lowers_an_engines_score_for_the_job_without_excluding_it() {
    let mut log = LogBuilder::new();
    log.login("a-flaky", 1, linux_props("lyon", 8192));
    log.login("b-steady", 1, linux_props("lyon", 8192));
    let mut spec = job_spec("grey", 4, "");
    spec.options.engine_greylisting = true;
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch grey/0 #1 -> a-flaky
        dispatch grey/1 #1 -> b-steady
    "#]]);
    log.started("grey", 0, 1, "a-flaky");
    log.failed("grey", 0, 1, "a-flaky");
    log.started("grey", 1, 1, "b-steady");
    log.completed("grey", 1, 1, "b-steady");
    // Both free: the retry and the next task go to b-steady first, then a-flaky.
    check(&mut log, &mut state, expect![[r#"
        dispatch grey/0 #2 -> b-steady
        dispatch grey/2 #1 -> a-flaky
    "#]]);
    expect![[r#"
        task grey/2: dispatched (job active), attempts 1, failures 0
          attempt 1 dispatched, not yet started on a-flaky
          ranking (tier, then score, then queue_sort_method over load index and seq_no, then id):
             b-steady: tier 0, score 0 (job 0, task 0), load index 1000, seq_no 0
          -> a-flaky: tier 0, score -5 (job -5, task 0), load index 1000, seq_no 0
    "#]]
    .assert_eq(&why(&state, "grey", 2));
}

/// A job of `n` tasks that reschedules redundantly, on the given policy.
fn redundant_job(id: &str, n: u32) -> JobSpec {
    let mut spec = job_spec(id, n, "");
    spec.options.redundant_rescheduling = true;
    spec
}

#[test]
fn task_max_time_makes_a_copy_and_the_first_result_wins() {
    let mut log = LogBuilder::new();
    log.at(0);
    log.push(Event::PolicySet(Policy {
        redundancy: RedundancyPolicy { poll_period_ms: 1_000, ..RedundancyPolicy::default() },
        ..Policy::default()
    }));
    log.login("a-slow", 1, linux_props("lyon", 8192));
    let mut spec = redundant_job("long", 2);
    spec.options.task_max_time_ms = 10_000;
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch long/0 #1 -> a-slow
    "#]]);
    log.started("long", 0, 1, "a-slow");
    log.login("b-fast", 1, linux_props("lyon", 8192));
    log.at(10_500);
    log.push(Event::Tick);
    check(&mut log, &mut state, expect![[r#"
        dispatch long/1 #1 -> b-fast
    "#]]);
    log.at(11_000);
    log.push(Event::Tick);
    // Past the limit at the poll instant 11 s: a copy, dispatched in the next run.
    check(&mut log, &mut state, expect![[r#"
        reschedule long/0 (task-max-time: 11000 ms > 10000 ms)
    "#]]);
    check(&mut log, &mut state, expect![[r#"
        (no orders)
    "#]]);
    log.started("long", 1, 1, "b-fast");
    log.completed("long", 1, 1, "b-fast");
    check(&mut log, &mut state, expect![[r#"
        dispatch long/0 #2 -> b-fast
    "#]]);
    // The copy's result first: the task is done, the first attempt runs on until the job ends.
    log.started("long", 0, 2, "b-fast");
    log.completed("long", 0, 2, "b-fast");
    check(&mut log, &mut state, expect![[r#"
        cancel long/0 #1 on a-slow (job-cancelled)
    "#]]);
    let job = state.job(state.job_idx(&job_id("long")).unwrap());
    assert_eq!(job.status, JobStatus::Done);
}

#[test]
fn with_cancel_on_first_result_the_other_copies_stop_at_once() {
    let mut log = LogBuilder::new();
    log.at(0);
    log.push(Event::PolicySet(Policy {
        redundancy: RedundancyPolicy { poll_period_ms: 1_000, reschedule_first: true, ..RedundancyPolicy::default() },
        ..Policy::default()
    }));
    log.login("a-slow", 1, linux_props("lyon", 8192));
    log.login("b-fast", 1, linux_props("lyon", 8192));
    log.login("c-busy", 1, linux_props("lyon", 8192));
    let mut spec = redundant_job("eager", 4);
    spec.options.task_max_time_ms = 5_000;
    spec.options.cancel_redundant_on_first_result = true;
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch eager/0 #1 -> a-slow
        dispatch eager/1 #1 -> b-fast
        dispatch eager/2 #1 -> c-busy
    "#]]);
    log.started("eager", 0, 1, "a-slow");
    log.started("eager", 1, 1, "b-fast");
    log.started("eager", 2, 1, "c-busy");
    log.at(6_000);
    log.completed("eager", 1, 1, "b-fast");
    // Past the limit: a copy of each long task; the freed engine takes the last
    // task first, as copies wait at the front only once they are queued.
    check(&mut log, &mut state, expect![[r#"
        reschedule eager/0 (task-max-time: 6000 ms > 5000 ms)
        reschedule eager/2 (task-max-time: 6000 ms > 5000 ms)
        dispatch eager/3 #1 -> b-fast
    "#]]);
    log.started("eager", 3, 1, "b-fast");
    log.completed("eager", 3, 1, "b-fast");
    // reschedule_first: each copy goes to the very front, so the newer copy first.
    check(&mut log, &mut state, expect![[r#"
        dispatch eager/2 #2 -> b-fast
    "#]]);
    log.started("eager", 2, 2, "b-fast");
    log.completed("eager", 2, 2, "b-fast");
    // The copy won while the job still runs: the first attempt is cancelled at once,
    // and the freed engine takes the other waiting copy.
    check(&mut log, &mut state, expect![[r#"
        cancel eager/2 #1 on c-busy (redundant-copy)
        dispatch eager/0 #2 -> b-fast
    "#]]);
    expect![[r#"
        task eager/2: done (job active), attempts 2, failures 0
          its last attempt went to b-fast
          ranking (tier, then score, then queue_sort_method over load index and seq_no, then id):
             c-busy: tier 0, score 0 (job 0, task 0), load index 0, seq_no 0
             a-slow: tier 0, score 0 (job 0, task 0), load index 1000, seq_no 0
          -> b-fast: tier 0, score 0 (job 0, task 0), load index 1000, seq_no 0
    "#]]
    .assert_eq(&why(&state, "eager", 2));
    expect![[r#"
        task eager/0: running (job active), attempts 2, failures 0
          attempt 1 running on a-slow
          attempt 2 dispatched, not yet started on b-fast
          ranking (tier, then score, then queue_sort_method over load index and seq_no, then id):
             c-busy: tier 0, score 0 (job 0, task 0), load index 0, seq_no 0
             a-slow: tier 0, score 0 (job 0, task 0), load index 1000, seq_no 0
          -> b-fast: tier 0, score 0 (job 0, task 0), load index 1000, seq_no 0
    "#]]
    .assert_eq(&why(&state, "eager", 0));
}

/// Ten tasks on ten engines; nine complete at the given times (ms after dispatch
/// at 0), the tenth runs on. Returns the orders of the run at `poll_at_ms`.
fn strategy_run(policy: RedundancyPolicy, completion_ms: [u64; 9], poll_at_ms: u64) -> String {
    let mut log = LogBuilder::new();
    log.at(0);
    log.push(Event::PolicySet(Policy { redundancy: policy, ..Policy::default() }));
    for e in 0..11 {
        log.login(&format!("e{e:02}"), 1, linux_props("lyon", 8192));
    }
    log.submit(redundant_job("spread", 10));
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    for index in 0..10 {
        log.started("spread", index, 1, &format!("e{index:02}"));
    }
    let mut done: Vec<(u64, u32)> = completion_ms.iter().enumerate().map(|(i, &ms)| (ms, i as u32)).collect();
    done.sort();
    for (ms, index) in done {
        log.at(ms);
        log.completed("spread", index, 1, &format!("e{index:02}"));
    }
    log.at(poll_at_ms);
    log.push(Event::Tick);
    decide_once(&mut log, &mut state)
}

#[test]
fn each_strategy_fires_on_its_own_limit() {
    let only = |percent: bool, average: bool, std_dev: bool| RedundancyPolicy {
        poll_period_ms: 1_000,
        strategy_effective_percent: 50,
        percent_completed_strategy: percent,
        remaining_task_percent: 10,
        average_strategy: average,
        average_limit_milli: 2_000,
        std_dev_strategy: std_dev,
        std_dev_limit_milli: 3_000,
        ..RedundancyPolicy::default()
    };
    // Nine done in 10 s each: mean 10 s, sd 0. At 12 s the tenth has run 12 s.
    let even = [10_000; 9];
    expect![[r#"
        reschedule spread/9 (percent-completed: 12000 ms > 10000 ms)
    "#]]
    .assert_eq(&strategy_run(only(true, false, false), even, 12_000));
    expect![[r#"
        (no orders)
    "#]]
    .assert_eq(&strategy_run(only(false, true, false), even, 12_000));
    expect![[r#"
        reschedule spread/9 (average: 21000 ms > 20000 ms)
    "#]]
    .assert_eq(&strategy_run(only(false, true, false), even, 21_000));
    expect![[r#"
        reschedule spread/9 (std-dev: 12000 ms > 10000 ms)
    "#]]
    .assert_eq(&strategy_run(only(false, false, true), even, 12_000));
    // Spread times: mean 10 s, sd ~5.2 s: the sd limit is 10 + 3 × 5.2 = 25.5 s.
    let spread = [2_000, 4_000, 6_000, 8_000, 10_000, 12_000, 14_000, 16_000, 18_000];
    expect![[r#"
        reschedule spread/9 (std-dev: 26000 ms > 25489 ms)
    "#]]
    .assert_eq(&strategy_run(only(false, false, true), spread, 26_000));
    // Before the effective percentage only task_max_time applies: no strategy fires.
    let mut late = only(true, true, true);
    late.strategy_effective_percent = 95;
    expect![[r#"
        (no orders)
    "#]]
    .assert_eq(&strategy_run(late, even, 30_000));
}

#[test]
fn exact_statistics_of_completion_times() {
    let mut times = crate::core::state::CompletionTimes::default();
    for ms in [2_000, 4_000, 4_000, 4_000, 5_000, 5_000, 7_000, 9_000] {
        times.add(ms);
    }
    assert_eq!(times.mean_ms(), Some(5_000));
    assert_eq!(times.std_dev_ms(), Some(2_000));
    assert_eq!(crate::core::state::isqrt(u128::from(u64::MAX) * u128::from(u64::MAX)), u128::from(u64::MAX));
    for value in [0u128, 1, 2, 3, 4, 15, 16, 17, 1 << 70] {
        let root = crate::core::state::isqrt(value);
        assert!(root * root <= value && (root + 1) * (root + 1) > value, "isqrt({value})");
    }
}

/// On a grid large enough for ranked queues (more than 16 free engines), a job
/// that scores engines is served from a queue of its own; in debug builds every
/// pick is checked against a walk of all candidates. Tiers, affinity and
/// greylisting all differ between engines here, and loads change as slots fill.
#[test]
fn scored_jobs_on_a_large_grid_pick_what_a_walk_would() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(Policy { engine_tiers: vec!["tier=gold".into(), "tier=silver".into()], ..Policy::default() }));
    for e in 0..60u32 {
        let mut props = with_custom(linux_props("lyon", 8192), "tier", ["gold", "silver", "bronze"][(e % 3) as usize]);
        props.mflops = 1000 + u64::from(e % 7) * 700;
        log.login(&format!("e{e:02}"), 1 + e % 3, props);
    }
    let mut grey = job_spec("grey", 40, "");
    grey.max_attempts = 5;
    grey.options.engine_greylisting = true;
    grey.options.affinity = vec![Preference { when: "mflops >= 3000".into(), weight: 7 }];
    log.submit(grey);
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    // Failures on a few engines give them a greylist penalty for the job.
    for index in [0, 1, 2, 3] {
        let key = state.task_key(&task("grey", index)).unwrap();
        let engine = state.engine(state.live_attempt(key).unwrap().engine).id.to_string();
        log.started("grey", index, 1, &engine);
        log.failed("grey", index, 1, &engine);
    }
    let mut keen = job_spec("keen", 200, "");
    keen.options.affinity = vec![Preference { when: "mflops < 2000".into(), weight: 3 }];
    log.submit(keen);
    decide_once(&mut log, &mut state);
    let keen_idx = state.job_idx(&job_id("keen")).unwrap();
    let dispatched = state.job(keen_idx).counts.dispatched;
    assert!(dispatched > 0, "keen got the free slots");
}

/// A retry waits for another engine rather than go back to the one it failed
/// on, but only for an engine that could run it: one the job has blacklisted does
/// not count, so with no other the retry goes back.
#[test]
fn a_retry_goes_back_when_the_only_other_engine_is_blacklisted() {
    let mut log = LogBuilder::new();
    log.login("a-once", 1, linux_props("lyon", 8192));
    log.login("b-bad", 2, linux_props("lyon", 8192));
    let mut spec = job_spec("picky", 3, "");
    spec.max_attempts = 5;
    spec.options.engine_blacklisting = true;
    spec.options.failures_before_blacklist = 2;
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch picky/0 #1 -> a-once
        dispatch picky/1 #1 -> b-bad
        dispatch picky/2 #1 -> b-bad
    "#]]);
    log.started("picky", 0, 1, "a-once");
    log.failed("picky", 0, 1, "a-once");
    // b-bad could run it, busy or not: the retry waits for it.
    check(&mut log, &mut state, expect![[r#"
        (no orders)
    "#]]);
    log.started("picky", 1, 1, "b-bad");
    log.failed("picky", 1, 1, "b-bad");
    log.started("picky", 2, 1, "b-bad");
    log.failed("picky", 2, 1, "b-bad");
    // b-bad is blacklisted: no other engine could run task 0, so it goes back to
    // a-once, first in the retry queue.
    check(&mut log, &mut state, expect![[r#"
        blacklist b-bad for picky (2 failures)
        dispatch picky/0 #2 -> a-once
    "#]]);
}

/// A job walks at most `PASSED_OVER_PER_JOB_MAX` held tasks from its front; the
/// runnable ones behind 19,000 held tasks are reached by its second walk.
#[test]
fn runnable_tasks_behind_19000_held_ones_are_dispatched_in_the_first_run() {
    use crate::core::schedule::dispatch::PASSED_OVER_PER_JOB_MAX;
    const HELD: u32 = 19_000;
    const { assert!(HELD > PASSED_OVER_PER_JOB_MAX && HELD < 2 * PASSED_OVER_PER_JOB_MAX) };
    let mut log = LogBuilder::new();
    log.login("e1", 4, linux_props("lyon", 8192));
    // Never runs: nothing has a GPU. Every held task waits for it.
    log.submit(job_spec("gate", 1, "has_gpu"));
    let mut deep = job_spec("deep", HELD + 8, "");
    deep.task_conditions = (0..HELD)
        .map(|index| (index, TaskConditions { depends_on: vec![task("gate", 0)], ..Default::default() }))
        .collect();
    log.submit(deep);
    let mut state = State::new();
    let orders = decide_once(&mut log, &mut state);
    let dispatched: Vec<&str> = orders.lines().filter(|line| line.starts_with("dispatch deep/")).collect();
    assert_eq!(dispatched.len(), 4, "every free slot gets a runnable task:\n{orders}");
    for line in &dispatched {
        let index: u32 = line["dispatch deep/".len()..].split(' ').next().unwrap().parse().unwrap();
        assert!(index >= HELD, "only runnable tasks are dispatched: {line}");
    }
    // The slots freed, the next run dispatches the rest, none twice.
    let mut seen: std::collections::BTreeSet<String> = dispatched.iter().map(|line| line.to_string()).collect();
    for line in &dispatched {
        let task_index: u32 = line["dispatch deep/".len()..].split(' ').next().unwrap().parse().unwrap();
        log.started("deep", task_index, 1, "e1");
        log.completed("deep", task_index, 1, "e1");
    }
    let orders = decide_once(&mut log, &mut state);
    let again: Vec<&str> = orders.lines().filter(|line| line.starts_with("dispatch deep/")).collect();
    assert_eq!(again.len(), 4, "the other four runnable tasks:\n{orders}");
    for line in again {
        assert!(seen.insert(line.to_string()), "dispatched twice: {line}");
    }
}
