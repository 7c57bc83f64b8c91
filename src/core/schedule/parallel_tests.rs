//! Parallel tasks over several engines (`span = "site"`): engines that differ
//! only in `site`, the parts booked at once, freed at once, broken at once;
//! and forged or stale `DispatchParallel` orders refused without effect.

use expect_test::expect;

use super::tests::check;
use super::{decide, InFlight};
use crate::core::event::{Event, Order, OrderBatch, ParallelPart, Span};
use crate::core::fold::fold;
use crate::core::ids::Seq;
use crate::core::reject::{JobProblem, OrderProblem, PartsProblem, Rejection};
use crate::core::state::{State, TaskStatus};
use crate::core::testkit::*;

fn site_job(id: &str, tasks: u32, slots: u32) -> crate::core::event::JobSpec {
    let mut spec = job_spec(id, tasks, "");
    spec.slots_per_task = slots;
    spec.options.span = Span::Site;
    spec
}

fn fold_all(log: &LogBuilder, state: &mut State) -> Vec<Rejection> {
    let mut rejections = Vec::new();
    for entry in &log.entries[state.last_seq.0 as usize..] {
        rejections.extend(fold(state, entry));
        state.check_invariants();
    }
    rejections
}

fn used(state: &State, engine: &str) -> u32 {
    state.engine(state.engine_idx(&engine_id(engine)).unwrap()).used
}

fn status(state: &State, job: &str, index: u32) -> TaskStatus {
    state.task(state.task_key(&task(job, index)).unwrap()).status
}

#[test]
fn a_site_task_takes_all_its_slots_at_once_on_engines_of_one_site() {
    let mut log = LogBuilder::new();
    // Three engines alike but for their site: only "lyon" has 4 slots in all.
    log.login("a1", 2, linux_props("lyon", 8192));
    log.login("b1", 2, linux_props("bern", 8192));
    log.login("a2", 2, linux_props("lyon", 8192));
    log.submit(site_job("mpi", 1, 4));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch mpi/0 #1 -> a1 (master of a1:2 a2:2)
        dispatch mpi/0 #1 -> a2 (part of a1:2 a2:2)
    "#]]);
    assert_eq!((used(&state, "a1"), used(&state, "a2"), used(&state, "b1")), (2, 2, 0));
    // The companion's slots are held: a 1-slot job goes to the other site only.
    log.submit(job_spec("small", 3, ""));
    check(&mut log, &mut state, expect![[r#"
        dispatch small/0 #1 -> b1
        dispatch small/1 #1 -> b1
    "#]]);
    // The master's end frees every part.
    log.started("mpi", 0, 1, "a1");
    log.completed("mpi", 0, 1, "a1");
    fold_all(&log, &mut state);
    assert_eq!((used(&state, "a1"), used(&state, "a2")), (0, 0));
    assert!(state.parallel().is_empty(), "no booking outlives its attempt");
    check(&mut log, &mut state, expect![[r#"
        dispatch small/2 #1 -> a1
    "#]]);
}

#[test]
fn a_site_task_waits_while_no_site_has_all_its_slots_free() {
    let mut log = LogBuilder::new();
    log.login("a1", 2, linux_props("lyon", 8192));
    log.login("b1", 2, linux_props("bern", 8192));
    log.submit(site_job("mpi", 1, 4));
    let mut state = State::new();
    // No site holds 4 slots: flagged unschedulable once (it still waits).
    check(&mut log, &mut state, expect![[r#"
        unschedulable mpi (no-site-has-enough-slots)
    "#]]);
    assert_eq!(status(&state, "mpi", 0), TaskStatus::Waiting);
    let flag = |state: &State| state.job(state.job_idx(&crate::core::ids::JobId::new("mpi").unwrap()).unwrap()).unschedulable;
    assert_eq!(flag(&state), Some(crate::core::event::Unschedulable::NoSiteHasEnoughSlots));
    assert_eq!(super::tests::decide_once(&mut log, &mut state), "(no orders)\n");
    // A second engine in bern makes 4 there: the flag goes and the task starts.
    log.login("b2", 2, linux_props("bern", 8192));
    check(&mut log, &mut state, expect![[r#"
        dispatch mpi/0 #1 -> b1 (master of b1:2 b2:2)
        dispatch mpi/0 #1 -> b2 (part of b1:2 b2:2)
    "#]]);
    assert_eq!(flag(&state), None);
}

#[test]
fn fill_up_takes_every_free_slot_of_the_best_engine_before_the_next() {
    let mut log = LogBuilder::new();
    log.login("a1", 4, linux_props("lyon", 8192));
    log.login("a2", 4, linux_props("lyon", 8192));
    log.login("a3", 4, linux_props("lyon", 8192));
    log.submit(site_job("mpi", 1, 6));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch mpi/0 #1 -> a1 (master of a1:4 a2:2)
        dispatch mpi/0 #1 -> a2 (part of a1:4 a2:2)
    "#]]);
    // A site task that fits one engine takes that engine alone.
    log.submit(site_job("small-mpi", 1, 3));
    check(&mut log, &mut state, expect![[r#"
        dispatch small-mpi/0 #1 -> a3 (master of a3:3)
    "#]]);
}

#[test]
fn a_companion_engine_gone_requeues_the_whole_attempt() {
    let mut log = LogBuilder::new();
    log.login("a1", 2, linux_props("lyon", 8192));
    log.login("a2", 2, linux_props("lyon", 8192));
    log.submit(site_job("mpi", 1, 4));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch mpi/0 #1 -> a1 (master of a1:2 a2:2)
        dispatch mpi/0 #1 -> a2 (part of a1:2 a2:2)
    "#]]);
    log.started("mpi", 0, 1, "a1");
    log.push(Event::EngineLoggedOut { engine: engine_id("a2") });
    fold_all(&log, &mut state);
    assert_eq!(used(&state, "a2"), 2, "a broken part holds its slots until the requeue");
    check(&mut log, &mut state, expect![[r#"
        requeue mpi/0 #1 from a1 (part-lost)
    "#]]);
    assert_eq!((used(&state, "a1"), used(&state, "a2")), (0, 0));
    assert_eq!(status(&state, "mpi", 0), TaskStatus::Waiting);
    log.login("a2", 2, linux_props("lyon", 8192));
    check(&mut log, &mut state, expect![[r#"
        dispatch mpi/0 #2 -> a1 (master of a1:2 a2:2)
        dispatch mpi/0 #2 -> a2 (part of a1:2 a2:2)
    "#]]);
}

#[test]
fn the_master_engine_lost_frees_every_part() {
    let mut log = LogBuilder::new();
    log.login("a1", 2, linux_props("lyon", 8192));
    log.login("a2", 2, linux_props("lyon", 8192));
    log.submit(site_job("mpi", 1, 4));
    let mut state = State::new();
    decide_and_fold(&mut log, &mut state);
    log.push(Event::EngineLoggedOut { engine: engine_id("a1") });
    fold_all(&log, &mut state);
    assert_eq!((used(&state, "a1"), used(&state, "a2")), (0, 0));
    assert_eq!(status(&state, "mpi", 0), TaskStatus::Waiting);
    assert!(state.parallel().is_empty());
}

fn decide_and_fold(log: &mut LogBuilder, state: &mut State) -> OrderBatch {
    fold_all(log, state);
    let batch = decide(state, &InFlight::new()).expect("orders");
    let entry = log.orders(batch.clone());
    assert!(fold(state, &entry).is_empty());
    batch
}

/// A state with `a1`, `a2` (lyon) and `b1` (bern), 2 slots each, and a 4-slot
/// site job waiting; then a batch of the given orders, folded: its rejections.
fn fold_forged(orders: impl FnOnce(&State) -> Vec<Order>) -> (State, Vec<Rejection>) {
    let mut log = LogBuilder::new();
    log.login("a1", 2, linux_props("lyon", 8192));
    log.login("a2", 2, linux_props("lyon", 8192));
    log.login("b1", 2, linux_props("bern", 8192));
    log.submit(site_job("mpi", 1, 4));
    log.submit(job_spec("plain", 1, ""));
    let mut state = State::new();
    fold_all(&log, &mut state);
    let orders = orders(&state);
    let batch = OrderBatch { based_on_seq: Seq(state.last_seq.0), algorithm: "sge-plain".into(), algorithm_version: 4, orders };
    let entry = log.orders(batch);
    let rejections = fold(&mut state, &entry);
    state.check_invariants();
    (state, rejections)
}

fn part(state: &State, engine: &str, slots: u32) -> ParallelPart {
    let epoch = state.engine(state.engine_idx(&engine_id(engine)).unwrap()).epoch;
    ParallelPart { engine: engine_id(engine), epoch, slots }
}

fn orders_of(task_ref: crate::core::ids::TaskRef, parts: Vec<ParallelPart>) -> Vec<Order> {
    parts
        .iter()
        .map(|p| Order::DispatchParallel {
            task: task_ref.clone(),
            attempt: 1,
            engine: p.engine.clone(),
            epoch: p.epoch,
            parts: parts.clone(),
        })
        .collect()
}

fn problems(rejections: &[Rejection]) -> Vec<OrderProblem> {
    rejections
        .iter()
        .map(|r| match r {
            Rejection::OrderNotApplicable { problem, .. } => problem.clone(),
            other => panic!("an order rejection, not {other}"),
        })
        .collect()
}

fn bad(problem: PartsProblem) -> OrderProblem {
    OrderProblem::BadParts { problem }
}

fn assert_untouched(state: &State) {
    assert_eq!((used(state, "a1"), used(state, "a2"), used(state, "b1")), (0, 0, 0), "no slot booked");
    assert_eq!(status(state, "mpi", 0), TaskStatus::Waiting);
    assert!(state.parallel().is_empty());
}

#[test]
fn forged_parallel_dispatches_are_refused_and_change_nothing() {
    // An engine named twice (both orders read as the master's).
    let (state, rejections) = fold_forged(|s| orders_of(task("mpi", 0), vec![part(s, "a1", 2), part(s, "a1", 2)]));
    assert_eq!(problems(&rejections), vec![bad(PartsProblem::DuplicateEngine), bad(PartsProblem::DuplicateEngine)]);
    assert_untouched(&state);
    // Parts whose slots do not add up to the task's.
    let (state, rejections) = fold_forged(|s| orders_of(task("mpi", 0), vec![part(s, "a1", 2), part(s, "a2", 1)]));
    assert_eq!(problems(&rejections), vec![bad(PartsProblem::SlotsDoNotAddUp), bad(PartsProblem::NotBooked)]);
    assert_untouched(&state);
    // Slots that overflow when added.
    let (state, rejections) =
        fold_forged(|s| orders_of(task("mpi", 0), vec![part(s, "a1", u32::MAX), part(s, "a2", 5)]));
    assert_eq!(problems(&rejections)[0], bad(PartsProblem::SlotsDoNotAddUp));
    assert_untouched(&state);
    // A part of 0 slots.
    let (state, rejections) =
        fold_forged(|s| orders_of(task("mpi", 0), vec![part(s, "a1", 2), part(s, "a2", 2), part(s, "b1", 0)]));
    assert_eq!(problems(&rejections)[0], bad(PartsProblem::ZeroSlots));
    assert_untouched(&state);
    // An engine no one logged in.
    let (state, rejections) = fold_forged(|s| {
        orders_of(task("mpi", 0), vec![part(s, "a1", 2), ParallelPart { engine: engine_id("ghost"), epoch: 1, slots: 2 }])
    });
    assert_eq!(problems(&rejections), vec![OrderProblem::UnknownEngine, bad(PartsProblem::NotBooked)]);
    assert_untouched(&state);
    // A stale epoch of a companion.
    let (state, rejections) = fold_forged(|s| {
        let mut stale = part(s, "a2", 2);
        stale.epoch -= 1;
        orders_of(task("mpi", 0), vec![part(s, "a1", 2), stale])
    });
    assert!(matches!(problems(&rejections)[0], OrderProblem::EpochClosed { .. }));
    assert_untouched(&state);
    // Engines of two sites.
    let (state, rejections) = fold_forged(|s| orders_of(task("mpi", 0), vec![part(s, "a1", 2), part(s, "b1", 2)]));
    assert_eq!(problems(&rejections)[0], bad(PartsProblem::DifferentSites));
    assert_untouched(&state);
    // More parts than allowed.
    let (state, rejections) = fold_forged(|s| {
        let parts = vec![part(s, "a1", 1); crate::core::event::PARALLEL_PARTS_MAX + 1];
        vec![Order::DispatchParallel { task: task("mpi", 0), attempt: 1, engine: engine_id("a1"), epoch: parts[0].epoch, parts }]
    });
    assert_eq!(problems(&rejections), vec![bad(PartsProblem::PartCount)]);
    assert_untouched(&state);
    // An order whose engine is not among its parts.
    let (state, rejections) = fold_forged(|s| {
        let parts = vec![part(s, "a1", 2), part(s, "a2", 2)];
        vec![Order::DispatchParallel { task: task("mpi", 0), attempt: 1, engine: engine_id("b1"), epoch: 1, parts }]
    });
    assert_eq!(problems(&rejections), vec![bad(PartsProblem::NotAPart)]);
    assert_untouched(&state);
    // A companion's order alone, with no master booking.
    let (state, rejections) = fold_forged(|s| orders_of(task("mpi", 0), vec![part(s, "a1", 2), part(s, "a2", 2)]).split_off(1));
    assert_eq!(problems(&rejections), vec![bad(PartsProblem::NotBooked)]);
    assert_untouched(&state);
    // A plain Dispatch of a site job, and a DispatchParallel of an engine job.
    let (state, rejections) = fold_forged(|s| {
        let mut orders = vec![Order::Dispatch { task: task("mpi", 0), attempt: 1, engine: engine_id("a1"), epoch: part(s, "a1", 2).epoch }];
        orders.extend(orders_of(task("plain", 0), vec![part(s, "a1", 1)]));
        orders
    });
    assert_eq!(problems(&rejections), vec![bad(PartsProblem::SpanMismatch), bad(PartsProblem::SpanMismatch)]);
    assert_untouched(&state);
    // The genuine parts apply.
    let (state, rejections) = fold_forged(|s| orders_of(task("mpi", 0), vec![part(s, "a1", 2), part(s, "a2", 2)]));
    assert!(rejections.is_empty(), "{rejections:?}");
    assert_eq!((used(&state, "a1"), used(&state, "a2")), (2, 2));
}

#[test]
fn a_parallel_dispatch_read_back_twice_applies_once() {
    let mut log = LogBuilder::new();
    log.login("a1", 2, linux_props("lyon", 8192));
    log.login("a2", 2, linux_props("lyon", 8192));
    log.submit(site_job("mpi", 1, 4));
    let mut state = State::new();
    let batch = decide_and_fold(&mut log, &mut state);
    let again = log.orders(batch);
    let rejections = fold(&mut state, &again);
    // The master's order is refused; the companion's confirms its booked part again and changes nothing.
    assert_eq!(problems(&rejections), vec![OrderProblem::TaskNotWaiting]);
    state.check_invariants();
    assert_eq!((used(&state, "a1"), used(&state, "a2")), (2, 2));
}

#[test]
fn slots_of_zero_or_beyond_the_cap_refuse_the_job() {
    let mut log = LogBuilder::new();
    log.submit(site_job("none", 1, 0));
    log.submit(site_job("huge", 1, crate::core::event::SLOTS_PER_TASK_MAX + 1));
    log.submit(site_job("most", 1, crate::core::event::SLOTS_PER_TASK_MAX));
    let mut state = State::new();
    let rejections = fold_all(&log, &mut state);
    let max = crate::core::event::SLOTS_PER_TASK_MAX;
    assert_eq!(
        rejections,
        vec![
            Rejection::InvalidJob { job: job_id("none"), problem: JobProblem::ZeroSlotsPerTask },
            Rejection::InvalidJob { job: job_id("huge"), problem: JobProblem::TooManySlots { slots: max + 1, max } },
        ]
    );
    assert!(state.job_idx(&job_id("most")).is_some());
}

#[test]
fn a_forged_site_unschedulable_flag_for_a_task_a_site_could_hold_is_refused() {
    let (state, rejections) = fold_forged(|_| {
        vec![Order::MarkUnschedulable {
            job: crate::core::ids::JobId::new("mpi").unwrap(),
            reason: crate::core::event::Unschedulable::NoSiteHasEnoughSlots,
        }]
    });
    assert_eq!(problems(&rejections), vec![OrderProblem::JobIsSchedulable]);
    let mpi = state.job(state.job_idx(&crate::core::ids::JobId::new("mpi").unwrap()).unwrap());
    assert_eq!(mpi.unschedulable, None);
}

#[test]
fn a_companion_command_beyond_its_limits_or_without_companions_is_refused_and_changes_nothing() {
    use crate::core::event::{COMPANION_ARGS_MAX, COMPANION_ARG_BYTES_MAX};
    let too_many = vec!["x".to_string(); COMPANION_ARGS_MAX + 1];
    let too_long = vec!["sh".to_string(), "y".repeat(COMPANION_ARG_BYTES_MAX + 1)];
    let empty_program = vec![String::new(), "-c".to_string()];
    let mut log = LogBuilder::new();
    log.login("a1", 2, linux_props("lyon", 8192));
    for (n, argv) in [too_many, too_long, empty_program].into_iter().enumerate() {
        let mut spec = site_job(&format!("bad{n}"), 1, 2);
        spec.options.companion_argv = argv;
        log.submit(spec);
    }
    // A companion command on a task of span "engine": it has no companions.
    let mut spec = job_spec("plain", 1, "");
    spec.options.companion_argv = vec!["hold".to_string()];
    log.submit(spec);
    // The most arguments, each of the most bytes, on a site task: within the
    // companion's limits, but a run order of 1 MiB, past the bound of one.
    let mut spec = site_job("huge", 1, 2);
    spec.options.companion_argv = vec!["z".repeat(COMPANION_ARG_BYTES_MAX); COMPANION_ARGS_MAX];
    log.submit(spec);
    // A 128 KiB companion command: taken.
    let mut spec = site_job("fine", 1, 2);
    spec.options.companion_argv = vec!["z".repeat(COMPANION_ARG_BYTES_MAX); 32];
    log.submit(spec);
    let mut state = State::new();
    let rejections = fold_all(&log, &mut state);
    let refused: Vec<String> = rejections
        .iter()
        .map(|rejection| match rejection {
            Rejection::InvalidJob { job, problem: problem @ JobProblem::BadCompanionCommand { .. } } => format!("{job}: {problem}"),
            Rejection::RunOrderTooLarge { job, .. } => format!("{job}: {}", rejection.kind_name()),
            other => panic!("unexpected {other}"),
        })
        .collect();
    assert_eq!(
        refused,
        vec![
            "bad0: companion command: 257 arguments, more than 256".to_string(),
            "bad1: companion command: argument 1 has 4097 bytes, more than 4096".to_string(),
            "bad2: companion command: the program (argument 0) is empty".to_string(),
            "plain: companion command: only a task of span \"site\" has companion engines to run it".to_string(),
            "huge: run-order-too-large".to_string(),
        ]
    );
    let held: Vec<String> = state.jobs().map(|job| job.id.to_string()).collect();
    assert_eq!(held, vec!["fine".to_string()], "a refused job leaves nothing behind");
}

/// The index of site jobs (`State::site_jobs`) finds what the walk over every
/// job of every category found: on a seeded random grid of three sites with
/// engines logging in and out, site and plain jobs of several shapes and
/// completions, every run's unschedulable check compares the two (a test-only
/// `assert!` in `lifecycle::unschedulable`), every pick compares its queue
/// with a walk, and `check_invariants` recounts the index after every entry.
#[test]
fn the_site_jobs_index_finds_what_a_walk_finds_on_a_random_grid() {
    let mut rng = crate::core::rng::SplitMix64::new(0x517E_0039);
    let sites = ["lyon", "bern", "oslo"];
    let mut log = LogBuilder::new();
    let mut state = State::new();
    let (mut n_engines, mut n_jobs, mut n_site_dispatches, mut n_flagged) = (0u32, 0u32, 0usize, 0usize);
    for _ in 0..400 {
        match rng.below(8) {
            0 | 1 => {
                let site = sites[rng.below(3) as usize];
                log.login(&format!("e{n_engines}"), 1 + rng.below(4) as u32, linux_props(site, 1024 << rng.below(4)));
                n_engines += 1;
            }
            2 | 3 => {
                let (n_tasks, slots) = (1 + rng.below(5) as u32, 1 + rng.below(12) as u32);
                let requirements = if rng.below(2) == 0 { "" } else { "memory_mb >= 4096" };
                let id = format!("j{n_jobs}");
                let spec = if rng.below(2) == 0 {
                    let mut spec = site_job(&id, n_tasks, slots);
                    spec.requirements = requirements.into();
                    spec
                } else {
                    let mut spec = job_spec(&id, n_tasks, requirements);
                    spec.slots_per_task = slots.min(4);
                    spec
                };
                log.submit(spec);
                n_jobs += 1;
            }
            4 if n_engines > 0 => {
                let engine = format!("e{}", rng.below(u64::from(n_engines)));
                log.push(Event::EngineLoggedOut { engine: engine_id(&engine) });
            }
            _ => {
                let live = state.live_attempts();
                if !live.is_empty() {
                    let (key, attempt) = live[rng.below(live.len() as u64) as usize];
                    let (task, engine) = (state.task_ref(key), state.engine(attempt.engine).id.clone());
                    log.started(task.job.as_str(), task.index, attempt.attempt, engine.as_str());
                    log.completed(task.job.as_str(), task.index, attempt.attempt, engine.as_str());
                }
            }
        }
        let orders = super::tests::decide_once(&mut log, &mut state);
        n_site_dispatches += orders.matches("(master of").count();
        n_flagged += orders.matches("no-site-has-enough-slots").count();
    }
    assert!(state.site_jobs().next().is_some() || n_site_dispatches > 0, "the grid had site jobs");
    assert!(n_site_dispatches > 0 && n_flagged > 0, "site tasks were dispatched ({n_site_dispatches}) and flagged ({n_flagged})");
}
