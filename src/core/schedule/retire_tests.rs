//! Retirement: ended jobs leave the state after the policy's retention (log time),
//! leaving usage summaries and a record of their outcome behind.

use expect_test::expect;

use super::tests::{check, decide_once};
use crate::core::event::{Event, Policy, TaskConditions};
use crate::core::fold::fold;
use crate::core::reject::{JobProblem, Rejection};
use crate::core::state::{JobStatus, State, Usage};
use crate::core::testkit::*;

const RETENTION_MS: u64 = 600_000;

/// A log with a policy retaining ended jobs for [`RETENTION_MS`], and one engine.
fn log_with_retention() -> LogBuilder {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(Policy { job_retention_ms: RETENTION_MS, engine_timeout_ms: 100_000_000, ..Policy::default() }));
    log.login("e1", 2, linux_props("lyon", 8192));
    log
}

/// Folds what the builder holds that the state has not seen yet; the rejections.
fn fold_new(log: &LogBuilder, state: &mut State) -> Vec<Rejection> {
    let mut rejections = Vec::new();
    for entry in &log.entries[state.last_seq.0 as usize..] {
        rejections.extend(fold(state, entry));
        state.check_invariants();
    }
    rejections
}

/// A tick at log time `ms`, folded.
fn tick_at(log: &mut LogBuilder, state: &mut State, ms: u64) {
    log.at(ms).push(Event::Tick);
    assert!(fold_new(log, state).is_empty());
}

#[test]
fn a_job_retires_once_log_time_is_past_its_end_plus_the_retention_and_leaves_its_usage() {
    let mut log = log_with_retention();
    log.submit(job_spec("j", 2, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> e1
        dispatch j/1 #1 -> e1
    "#]]);
    log.failed("j", 0, 1, "e1");
    log.completed("j", 1, 1, "e1");
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #2 -> e1
    "#]]);
    let end_ms = 2_000_000;
    log.at(end_ms).completed("j", 0, 2, "e1");
    fold_new(&log, &mut state);
    let j = state.job_idx(&job_id("j")).expect("held");
    assert_eq!(state.job(j).status, JobStatus::Done);
    assert_eq!(state.job(j).ended_ms, Some(end_ms));

    tick_at(&mut log, &mut state, end_ms + RETENTION_MS);
    assert!(state.job_idx(&job_id("j")).is_some(), "not before its retention has passed");
    assert!(state.usage_by_user().is_empty());

    tick_at(&mut log, &mut state, end_ms + RETENTION_MS + 1);
    assert_eq!(state.job_idx(&job_id("j")), None, "retired once log time is past it");
    assert_eq!(state.jobs().len(), 0);
    let retired = state.retired_job(&job_id("j")).expect("its record stays");
    assert_eq!((retired.status, retired.ended_ms, retired.retired_ms), (JobStatus::Done, end_ms, end_ms + RETENTION_MS + 1));
    let usage = Usage { jobs_done: 1, tasks_done: 2, attempts: 3, ..Usage::default() };
    assert_eq!(state.usage_by_user().get("alice"), Some(&usage));
    assert_eq!(state.usage_by_project().get("physics"), Some(&usage));
    assert_eq!(state.totals.jobs_retired, 1);

    // Its slot is taken by the next job.
    log.submit(job_spec("k", 1, ""));
    fold_new(&log, &mut state);
    assert_eq!(state.job_idx(&job_id("k")), Some(j));
    check(&mut log, &mut state, expect![[r#"
        dispatch k/0 #1 -> e1
    "#]]);
}

#[test]
fn usage_adds_up_jobs_by_outcome_per_user_and_project() {
    let mut log = log_with_retention();
    let mut cancelled = job_spec("cancelled", 3, "");
    cancelled.owner = "bob".into();
    log.submit(cancelled);
    let mut failing = job_spec("failing", 1, "");
    failing.max_attempts = 1;
    log.submit(failing);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch cancelled/0 #1 -> e1
        dispatch cancelled/1 #1 -> e1
    "#]]);
    log.push(Event::JobCancelled { job: job_id("cancelled"), reason: "test".into() });
    check(&mut log, &mut state, expect![[r#"
        cancel cancelled/0 #1 on e1 (job-cancelled)
        cancel cancelled/1 #1 on e1 (job-cancelled)
    "#]]);
    check(&mut log, &mut state, expect![[r#"
        dispatch failing/0 #1 -> e1
    "#]]);
    log.failed("failing", 0, 1, "e1");
    fold_new(&log, &mut state);
    tick_at(&mut log, &mut state, 1_000_000 + RETENTION_MS + 1);
    assert_eq!(state.jobs().len(), 0);
    assert_eq!(state.usage_by_user().get("bob"), Some(&Usage { jobs_cancelled: 1, tasks_cancelled: 3, attempts: 2, ..Usage::default() }));
    assert_eq!(state.usage_by_user().get("alice"), Some(&Usage { jobs_failed: 1, tasks_failed: 1, attempts: 1, ..Usage::default() }));
    let physics = state.usage_by_project().get("physics").expect("both are physics");
    assert_eq!((physics.jobs(), physics.tasks_cancelled, physics.tasks_failed, physics.attempts), (2, 3, 1, 3));
}

#[test]
fn a_retired_id_is_refused_for_a_new_job_and_the_refusal_changes_nothing_else() {
    let mut log = log_with_retention();
    log.submit(job_spec("j", 1, ""));
    log.push(Event::JobCancelled { job: job_id("j"), reason: "test".into() });
    let mut state = State::new();
    fold_new(&log, &mut state);
    tick_at(&mut log, &mut state, 1_000_000 + RETENTION_MS + 1);
    assert!(state.retired_job(&job_id("j")).is_some());
    let before = state.clone();
    log.submit(job_spec("j", 5, ""));
    let rejections = fold_new(&log, &mut state);
    assert!(matches!(rejections.as_slice(), [Rejection::DuplicateJob { .. }]), "{rejections:?}");
    assert_eq!(state.jobs().len(), 0);
    assert_eq!(state.usage_by_user(), before.usage_by_user());
    assert_eq!(state.rejections.total, before.rejections.total + 1);
}

#[test]
fn a_job_depending_on_a_retired_job_resolves_from_its_outcome() {
    let mut log = log_with_retention();
    log.submit(job_spec("good", 1, ""));
    let mut bad = job_spec("bad", 1, "");
    bad.max_attempts = 1;
    log.submit(bad);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch good/0 #1 -> e1
        dispatch bad/0 #1 -> e1
    "#]]);
    log.completed("good", 0, 1, "e1");
    log.failed("bad", 0, 1, "e1");
    fold_new(&log, &mut state);
    tick_at(&mut log, &mut state, 1_000_000 + RETENTION_MS + 1);
    assert_eq!(state.jobs().len(), 0, "both retired");

    let mut after_good = job_spec("after-good", 1, "");
    after_good.options.depends_on_jobs = vec![job_id("good")];
    after_good.options.fail_on_dependency_failure = true;
    log.submit(after_good);
    let mut after_bad = job_spec("after-bad", 1, "");
    after_bad.options.depends_on_jobs = vec![job_id("bad")];
    after_bad.options.fail_on_dependency_failure = true;
    log.submit(after_bad);
    let mut lenient = job_spec("lenient", 1, "");
    lenient.options.depends_on_jobs = vec![job_id("bad")];
    log.submit(lenient);
    check(&mut log, &mut state, expect![[r#"
        fail after-bad (dependency bad failed)
        dispatch after-good/0 #1 -> e1
        dispatch lenient/0 #1 -> e1
    "#]]);
    assert_eq!(state.job(state.job_idx(&job_id("after-bad")).unwrap()).status, JobStatus::Failed);

    // A task dependency on a retired job: met when the job was done; refused
    // otherwise, since how each of its tasks ended is no longer kept.
    let mut on_good = job_spec("on-good", 1, "");
    on_good.task_conditions.insert(0, TaskConditions { depends_on: vec![task("good", 0)], ..Default::default() });
    log.submit(on_good);
    let mut on_bad = job_spec("on-bad", 1, "");
    on_bad.task_conditions.insert(0, TaskConditions { depends_on: vec![task("bad", 0)], ..Default::default() });
    log.submit(on_bad);
    let rejections = fold_new(&log, &mut state);
    assert!(
        matches!(rejections.as_slice(), [Rejection::InvalidJob { problem: JobProblem::RetiredDependency { .. }, .. }]),
        "{rejections:?}"
    );
    expect!["job on-bad refused: it depends on task bad/0, whose job ended failed and was retired from the state: how its tasks ended is no longer kept"]
        .assert_eq(&rejections[0].to_string());
    assert!(state.job_idx(&job_id("on-good")).is_some());
}

#[test]
fn a_job_is_not_retired_while_it_has_live_attempts_or_a_task_another_job_waits_for() {
    let mut log = log_with_retention();
    log.submit(job_spec("first", 2, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch first/0 #1 -> e1
        dispatch first/1 #1 -> e1
    "#]]);
    log.completed("first", 0, 1, "e1");
    log.started("first", 1, 1, "e1");
    let mut second = job_spec("second", 1, "");
    second.task_conditions.insert(0, TaskConditions { depends_on: vec![task("first", 0)], ..Default::default() });
    log.submit(second);
    // Cancelled with first/1 still running: its Cancel is not read back yet.
    log.push(Event::JobCancelled { job: job_id("first"), reason: "test".into() });
    fold_new(&log, &mut state);
    tick_at(&mut log, &mut state, 1_000_000 + RETENTION_MS + 1);
    assert!(state.job_idx(&job_id("first")).is_some(), "a live attempt awaits its Cancel");

    check(&mut log, &mut state, expect![[r#"
        cancel first/1 #1 on e1 (job-cancelled)
        dispatch second/0 #1 -> e1
    "#]]);
    log.completed("second", 0, 1, "e1");
    fold_new(&log, &mut state);
    let second_end = log.time_ms;
    // Looked at again a retention after it was put off; still held by second's task.
    tick_at(&mut log, &mut state, second_end + 2 * RETENTION_MS + 2);
    assert_eq!(state.job_idx(&job_id("second")), None, "second retired");
    assert!(state.job_idx(&job_id("first")).is_some(), "first was put off again while second held it");
    tick_at(&mut log, &mut state, second_end + 3 * RETENTION_MS + 3);
    assert_eq!(state.jobs().len(), 0, "then first retires too");
    assert_eq!(state.retired_job(&job_id("first")).map(|r| r.status), Some(JobStatus::Cancelled));
}

#[test]
fn retirement_survives_a_snapshot_and_digests_alike() {
    let mut log = log_with_retention();
    log.submit(job_spec("j", 1, ""));
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    log.completed("j", 0, 1, "e1");
    fold_new(&log, &mut state);
    tick_at(&mut log, &mut state, 1_000_000 + RETENTION_MS + 1);
    log.submit(job_spec("k", 1, ""));
    fold_new(&log, &mut state);
    let restored = State::from_snapshot(&state.to_snapshot()).expect("loads");
    assert_eq!(restored.state_digest(), state.state_digest());
    assert!(restored.retired_job(&job_id("j")).is_some());
    assert_eq!(restored.usage_by_user(), state.usage_by_user());
}

#[test]
fn a_category_no_held_job_uses_is_dropped_and_its_slot_reused() {
    let mut log = log_with_retention();
    let mut linux = job_spec("linux", 2, "os == \"linux\"");
    linux.task_conditions.insert(1, TaskConditions { discriminator: "memory_mb >= 4096".into(), ..Default::default() });
    log.submit(linux);
    log.submit(job_spec("shared", 1, "os == \"linux\""));
    log.push(Event::JobCancelled { job: job_id("linux"), reason: "test".into() });
    let mut state = State::new();
    fold_new(&log, &mut state);
    let in_use = |state: &State| state.categories().iter().filter(|category| !category.is_vacant()).count();
    assert_eq!(in_use(&state), 2, "the job's category and its discriminator's");
    tick_at(&mut log, &mut state, 1_000_000 + RETENTION_MS + 1);
    assert_eq!(state.job_idx(&job_id("linux")), None);
    assert_eq!(in_use(&state), 1, "the discriminator's category is dropped; the shared one stays");
    assert_eq!(state.categories().len(), 2, "as a vacant slot");

    log.push(Event::JobCancelled { job: job_id("shared"), reason: "test".into() });
    fold_new(&log, &mut state);
    tick_at(&mut log, &mut state, 1_000_000 + 2 * RETENTION_MS + 2);
    assert_eq!(in_use(&state), 0);
    log.submit(job_spec("windows", 1, "os == \"windows\""));
    log.submit(job_spec("again", 1, "os == \"linux\""));
    fold_new(&log, &mut state);
    assert_eq!((in_use(&state), state.categories().len()), (2, 2), "new categories take the vacant slots");
    let windows = state.job(state.job_idx(&job_id("windows")).unwrap());
    assert_eq!(state.category(windows.category).requirements, "os == \"windows\"");
}
