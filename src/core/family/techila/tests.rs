//! Techila's scheduler through fold and schedule: the license cap on the
//! fastest cores, project priorities and preemption of Lowest projects, the
//! seeded ticket draw, and `why`.

use std::collections::BTreeMap;

use super::*;
use crate::core::event::{Algorithm, EngineProps, Event, JobSpec, Policy, TechilaPolicy};
use crate::core::explain::{explain, Detail};
use crate::core::fold::fold;
use crate::core::ids::TaskRef;
use crate::core::schedule::tests::decide_once;
use crate::core::state::State;
use crate::core::testkit::*;

fn props(mflops: u64) -> EngineProps {
    let mut props = linux_props("lyon", 8192);
    props.mflops = mflops;
    props
}

fn techila_policy(techila: TechilaPolicy, seed: u64) -> Event {
    Event::PolicySet(Policy { algorithm: Algorithm::Techila, techila, seed, ..Policy::default() })
}

fn project(id: &str, owner: &str, n: u32, priority: u32) -> JobSpec {
    let mut spec = JobSpec { owner: owner.into(), ..job_spec(id, n, "") };
    spec.options.project_priority = priority;
    spec
}

/// Dispatches per job, from rendered orders.
fn per_job(orders: &str) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for line in orders.lines().filter(|line| line.starts_with("dispatch ")) {
        let job = line.trim_start_matches("dispatch ").split('/').next().unwrap_or("");
        *counts.entry(job.to_string()).or_insert(0) += 1;
    }
    counts
}

/// The engines dispatched to, from rendered orders.
fn engines_of(orders: &str) -> Vec<String> {
    orders.lines().filter(|line| line.starts_with("dispatch ")).map(|line| line.rsplit(' ').next().unwrap_or("").to_string()).collect()
}

fn fold_all(log: &LogBuilder, state: &mut State) {
    for entry in &log.entries[state.last_seq.0 as usize..] {
        fold(state, entry);
        state.check_invariants();
    }
}

#[test]
fn a_license_of_500_on_600_dual_core_engines_runs_500_tasks_on_the_fastest_cores_and_moves_to_the_next_fastest_when_50_go() {
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy { max_running_tasks: 500, ..TechilaPolicy::default() }, 1));
    // Engine w000 is the slowest, w599 the fastest.
    for e in 0..600u64 {
        log.login(&format!("w{e:03}"), 2, props(1_000 + e));
    }
    log.submit(project("big", "john", 2_000, 0));
    let mut state = State::new();
    let orders = decide_once(&mut log, &mut state);
    let engines = engines_of(&orders);
    assert_eq!(engines.len(), 500, "exactly the license's 500 tasks run");
    let used: std::collections::BTreeSet<String> = engines.iter().cloned().collect();
    let fastest: std::collections::BTreeSet<String> = (350..600).map(|e| format!("w{e:03}")).collect();
    assert_eq!(used, fastest, "on the 500 fastest cores: both cores of the 250 fastest engines");
    assert_eq!(decide_once(&mut log, &mut state), "(no orders)\n", "the cap holds in the next cycle");
    // The 50 fastest engines go; their 100 tasks are requeued and the freed
    // capacity goes to the next fastest free cores.
    for e in 550..600 {
        log.push(Event::EngineLoggedOut { engine: engine_id(&format!("w{e:03}")) });
    }
    let mut moved = Vec::new();
    for _ in 0..4 {
        let orders = decide_once(&mut log, &mut state);
        moved.extend(engines_of(&orders));
    }
    let moved: std::collections::BTreeSet<String> = moved.into_iter().collect();
    let next: std::collections::BTreeSet<String> = (300..350).map(|e| format!("w{e:03}")).collect();
    assert_eq!(moved, next, "the next 50 fastest engines take the 100 freed tasks");
    assert_eq!(running_tasks(&state, &InFlight::new()), 500);
}

#[test]
fn a_users_projects_are_served_by_priority_then_creation_order_figures_2_and_5() {
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy::default(), 7));
    for e in 0..4 {
        log.login(&format!("c{e}"), 1, props(1_000));
    }
    // Figure 2: John's project 1 goes before his project 2.
    log.submit(project("john-1", "john", 6, 0));
    log.submit(project("john-2", "john", 6, 0));
    let mut state = State::new();
    assert_eq!(per_job(&decide_once(&mut log, &mut state)), BTreeMap::from([("john-1".to_string(), 4)]));
    let Detail::Waiting { resource_first: techila, .. } = explain(&state, &TaskRef { job: job_id("john-2"), index: 0 }).unwrap().detail else {
        panic!("john-2/0 waits")
    };
    assert_eq!(
        techila.map(|why| why.to_string()).as_deref(),
        Some("techila: waiting behind the user's higher-priority project john-1 (project priority 4)")
    );
    // Figure 5: John's High project goes before his earlier Normal one; Alice's
    // earlier project before her later one of the same priority.
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy::default(), 7));
    log.login("c0", 1, props(1_000));
    log.submit(project("p1", "john", 6, 4));
    log.submit(project("p2", "john", 6, 2));
    log.submit(project("p3", "alice", 6, 4));
    log.submit(project("p4", "alice", 6, 4));
    let mut state = State::new();
    fold_all(&log, &mut state);
    let mut order = TechilaOrder::new(&state, &InFlight::new());
    let e = state.engine_idx(&engine_id("c0")).unwrap();
    let entrants: Vec<String> = order.entrants(&state, e).iter().map(|en| state.job(en.job).id.to_string()).collect();
    assert_eq!(entrants, ["p2", "p3"]);
}

#[test]
fn draws_over_100000_cycles_follow_the_tickets_within_3_points() {
    let tickets_each = [1u128, 2, 3, 4];
    let mut rng = SplitMix64::for_sequence(42, 1);
    let mut wins = [0u64; 4];
    let n = 100_000u64;
    for _ in 0..n {
        wins[draw(&tickets_each, &mut rng)] += 1;
    }
    for (at, &t) in tickets_each.iter().enumerate() {
        let expected_percent = t as u64 * 100 / 10;
        let got_percent = wins[at] * 100 / n;
        assert!(got_percent.abs_diff(expected_percent) <= 3, "entrant {at}: {got_percent}% for {expected_percent}% of the tickets");
    }
    // Lower rankings get more tickets: a fixed numerator over one's own.
    let t = tickets(&[100, 300]);
    assert_eq!(t[0] / t[1], 3);
    assert_eq!(t[0], super::TICKETS_NUMERATOR / 100);
}

#[test]
fn two_users_of_equal_ranking_inputs_split_a_grid_evenly_within_3_points() {
    // 20 runs (seeds) of 200 equal cores for two users' equal projects: each
    // run's split wanders a little (its draws are random), the total is even.
    let (mut ann_total, mut all) = (0u32, 0u32);
    for seed in 0..20 {
        let mut log = LogBuilder::new();
        log.push(techila_policy(TechilaPolicy::default(), seed));
        for e in 0..200 {
            log.login(&format!("c{e:03}"), 1, props(1_000));
        }
        log.submit(project("ann-1", "ann", 1_000, 0));
        log.submit(project("bob-1", "bob", 1_000, 0));
        let mut state = State::new();
        let counts = per_job(&decide_once(&mut log, &mut state));
        let ann = counts["ann-1"];
        assert_eq!(ann + counts["bob-1"], 200);
        assert!(ann.abs_diff(100) <= 20, "seed {seed}: ann got {ann} of 200 cores");
        ann_total += ann;
        all += 200;
    }
    assert!((ann_total * 1000 / all).abs_diff(500) <= 30, "ann got {ann_total} of {all} cores");
}

#[test]
fn simultaneous_projects_of_one_user_share_4_cores_evenly_on_average_with_random_deviation_per_cycle_figure_4() {
    let mut splits = BTreeMap::new();
    let mut project_1_total = 0;
    let n_cycles = 400;
    for seed in 0..n_cycles {
        let mut log = LogBuilder::new();
        log.push(techila_policy(TechilaPolicy { simultaneous_projects: true, ..TechilaPolicy::default() }, seed));
        for e in 0..4 {
            log.login(&format!("c{e}"), 1, props(1_000));
        }
        log.submit(project("p1", "john", 6, 0));
        log.submit(project("p2", "john", 6, 0));
        let mut state = State::new();
        let counts = per_job(&decide_once(&mut log, &mut state));
        let p1 = counts.get("p1").copied().unwrap_or(0);
        project_1_total += p1;
        *splits.entry(p1).or_insert(0) += 1;
    }
    let share_percent = project_1_total * 100 / (4 * n_cycles as u32);
    assert!(share_percent.abs_diff(50) <= 3, "project 1 had {share_percent}% of the cores");
    assert!(splits.len() > 1, "the draw deviates from 2/2 in some cycles: {splits:?}");
    assert!(splits.get(&2).copied().unwrap_or(0) > n_cycles / 3, "2/2 is the most common split: {splits:?}");
}

#[test]
fn a_lowest_project_is_preempted_by_a_normal_one_and_its_tasks_run_later_without_losing_attempts() {
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy::default(), 5));
    log.login("c0", 1, props(2_000));
    log.login("c1", 1, props(1_000));
    log.submit(project("low", "ann", 2, PRIORITY_LOWEST));
    let mut state = State::new();
    expect_test::expect![[r#"
        dispatch low/0 #1 -> c0
        dispatch low/1 #1 -> c1
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    log.started("low", 0, 1, "c0");
    log.started("low", 1, 1, "c1");
    log.submit(project("normal", "bob", 1, 0));
    // One core is wanted: one Lowest task gives way (the newest project's first task).
    expect_test::expect![[r#"
        preempt low/0 #1 on c0
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    let why = explain(&state, &TaskRef { job: job_id("low"), index: 0 }).unwrap();
    let Detail::Waiting { resource_first: techila, .. } = why.detail else { panic!("low/0 waits") };
    assert_eq!(
        techila.map(|why| why.to_string()).as_deref(),
        Some("techila: preempted by project normal (a Lowest project gives way)")
    );
    // The freed core goes to the Normal project, not back to the Lowest one.
    expect_test::expect![[r#"
        dispatch normal/0 #1 -> c0
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    log.started("normal", 0, 1, "c0");
    log.completed("normal", 0, 1, "c0");
    // The preempted task runs again under the same attempt number.
    expect_test::expect![[r#"
        dispatch low/0 #1 -> c0
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    log.started("low", 0, 1, "c0");
    log.completed("low", 0, 1, "c0");
    log.completed("low", 1, 1, "c1");
    fold_all(&log, &mut state);
    let low = state.job(state.job_idx(&job_id("low")).unwrap());
    assert_eq!((low.counts.done, low.counts.failed), (2, 0));
    assert_eq!(state.task(crate::core::state::TaskKey { job: state.job_idx(&job_id("low")).unwrap(), index: 0 }).attempts, 1);
}

#[test]
fn a_preempt_of_a_normal_projects_task_that_no_operator_asked_for_is_rejected() {
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy::default(), 5));
    log.login("c0", 1, props(2_000));
    log.submit(project("normal", "bob", 1, 0));
    let mut state = State::new();
    decide_once(&mut log, &mut state);
    log.started("normal", 0, 1, "c0");
    fold_all(&log, &mut state);
    let digest = state.state_digest();
    let forged = crate::core::event::OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: "techila".into(),
        algorithm_version: crate::core::schedule::ALGORITHM_VERSION,
        orders: vec![crate::core::event::Order::Preempt { task: task("normal", 0), attempt: 1, engine: engine_id("c0") }],
    };
    let entry = log.orders(forged);
    let rejections = fold(&mut state, &entry);
    assert_eq!(rejections.len(), 1, "the preemption is rejected: {rejections:?}");
    assert_eq!(state.job(state.job_idx(&job_id("normal")).unwrap()).counts.running, 1, "the attempt still runs");
    assert_ne!(digest, state.state_digest(), "only the rejection is recorded");
}

#[test]
fn why_names_the_license_cap_and_the_tickets_of_a_lost_draw() {
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy { max_running_tasks: 1, ..TechilaPolicy::default() }, 9));
    log.login("c0", 1, props(1_000));
    log.login("c1", 1, props(500));
    log.submit(project("ann-1", "ann", 3, 0));
    log.submit(project("bob-1", "bob", 3, 0));
    let mut state = State::new();
    let orders = decide_once(&mut log, &mut state);
    assert_eq!(engines_of(&orders), ["c0"], "one task, on the fastest core");
    let waiting = TaskRef { job: job_id("bob-1"), index: 2 };
    let Detail::Waiting { resource_first: techila, .. } = explain(&state, &waiting).unwrap().detail else { panic!("waits") };
    assert_eq!(techila.map(|why| why.to_string()).as_deref(), Some("techila: license cap reached (1/1 tasks running)"));
    log.push(techila_policy(TechilaPolicy::default(), 9));
    fold_all(&log, &mut state);
    let Detail::Waiting { resource_first: techila, .. } = explain(&state, &waiting).unwrap().detail else { panic!("waits") };
    let text = techila.map(|why| why.to_string()).unwrap_or_default();
    assert!(text.starts_with("techila: lost the draw for c1; tickets: ann-1="), "{text}");
    assert!(text.contains(" bob-1="), "{text}");
}

#[test]
fn the_ranking_rises_with_running_tasks_benchmarks_cpu_rate_priorities_and_creation_order() {
    let base = RankingInputs {
        user_priority: 4,
        project_priority: 4,
        wall_clock_ms: 3_600_000,
        cpu_ms_completed: 0,
        running_tasks: 0,
        creation_rank: 0,
        benchmark_sum_mflops: 0,
    };
    let r = ranking(&base);
    assert!(ranking(&RankingInputs { running_tasks: 1, ..base }) > r);
    assert!(ranking(&RankingInputs { benchmark_sum_mflops: 5_000, ..base }) > r);
    assert!(ranking(&RankingInputs { cpu_ms_completed: 3_600_000, ..base }) > r);
    assert!(ranking(&RankingInputs { cpu_ms_completed: 3_600_000, wall_clock_ms: 36_000_000, ..base })
        < ranking(&RankingInputs { cpu_ms_completed: 3_600_000, ..base }));
    assert!(ranking(&RankingInputs { project_priority: 7, ..base }) > r);
    assert!(ranking(&RankingInputs { user_priority: 1, ..base }) < r);
    assert!(ranking(&RankingInputs { creation_rank: 1, ..base }) > r);
    let huge = RankingInputs {
        user_priority: 7,
        project_priority: 7,
        wall_clock_ms: 0,
        cpu_ms_completed: u64::MAX,
        running_tasks: u32::MAX,
        creation_rank: u32::MAX,
        benchmark_sum_mflops: u64::MAX,
    };
    assert!(ranking(&huge) > 0, "no overflow on the largest inputs");
    assert!(tickets(&[ranking(&huge), 1]).iter().all(|&t| t >= 1));
}

#[test]
fn the_ticket_trees_match_a_recount_of_the_entrants_through_bookings_categories_spanning_users_and_lowest_projects() {
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy::default(), 5));
    let mut big = props(3_000);
    big.memory_mb = 65_536;
    log.login("big", 4, big);
    log.login("small", 4, props(1_000));
    // ann: all in one category; bob: two categories (his group spans
    // classes); cid: Lowest only; dee: the big category only; eve: two tasks.
    for (id, owner, n, priority, requirements) in [
        ("ann-1", "ann", 3, 4, ""),
        ("ann-2", "ann", 5, 2, ""),
        ("bob-1", "bob", 2, 3, "memory_mb >= 32768"),
        ("bob-2", "bob", 4, 4, ""),
        ("cid-1", "cid", 6, 7, ""),
        ("dee-1", "dee", 3, 5, "memory_mb >= 32768"),
        ("eve-1", "eve", 2, 4, ""),
    ] {
        let mut spec = project(id, owner, n, priority);
        spec.requirements = requirements.into();
        log.submit(spec);
    }
    let mut state = State::new();
    fold_all(&log, &mut state);
    let big = state.engine_idx(&engine_id("big")).unwrap();
    let small = state.engine_idx(&engine_id("small")).unwrap();
    let mut order = TechilaOrder::new(&state, &InFlight::new());
    let mut rng = SplitMix64::new(9);
    for step in 0..30 {
        for e in [big, small] {
            let listed = order.entrants(&state, e);
            let recount = (listed.len() as u32, listed.iter().map(|entrant| entrant.tickets).sum::<u128>());
            assert_eq!(order.counted(&state, e), recount, "step {step}: the trees and the recount differ");
        }
        // Book one task of an entrant of either engine, chosen at random.
        let mut choices: Vec<(EngineIdx, JobIdx)> = Vec::new();
        for e in [big, small] {
            choices.extend(order.entrants(&state, e).iter().map(|entrant| (e, entrant.job)));
        }
        if choices.is_empty() {
            break;
        }
        let (e, j) = choices[rng.below(choices.len() as u64) as usize];
        order.book_for_test(&state, e, j);
    }
    // Every project's tasks were booked in the end: no entrant is left.
    assert!(order.entrants(&state, big).is_empty() && order.entrants(&state, small).is_empty());
    assert_eq!(order.counted(&state, big), (0, 0));
}

// From the retired test family `fastest_first`, which showed the resource-first
// loop's shape before Techila: the same rules, now under Techila.

#[test]
fn free_engines_are_served_fastest_first_each_taking_a_task_it_may_and_a_slower_one_the_rest() {
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy::default(), 1));
    log.login("slow", 1, props(100));
    log.login("fast", 1, props(900));
    let mut mid = props(500);
    mid.site = "hel".into();
    log.login("mid", 2, mid);
    // One user's two projects: the earlier may run only in lyon.
    log.submit(job_spec("lyon-only", 2, "site == \"lyon\""));
    log.submit(job_spec("anywhere", 3, ""));
    let mut state = State::new();
    // fast (900) takes the first project's first task; mid (500) may not run
    // it and takes the next project's, twice (two slots); slow (100) gets what
    // is left of the first.
    expect_test::expect![[r#"
        dispatch lyon-only/0 #1 -> fast
        dispatch anywhere/0 #1 -> mid
        dispatch anywhere/1 #1 -> mid
        dispatch lyon-only/1 #1 -> slow
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
}

#[test]
fn a_retry_does_not_go_back_to_the_fastest_core_it_failed_on_but_to_the_next() {
    let mut log = LogBuilder::new();
    log.push(techila_policy(TechilaPolicy::default(), 1));
    log.login("fast", 1, props(900));
    log.login("slow", 1, props(100));
    log.submit(job_spec("job", 1, ""));
    let mut state = State::new();
    assert_eq!(decide_once(&mut log, &mut state), "dispatch job/0 #1 -> fast\n");
    log.started("job", 0, 1, "fast");
    log.failed("job", 0, 1, "fast");
    // The retry skips the fastest engine, where it failed, while another could run it.
    assert_eq!(decide_once(&mut log, &mut state), "dispatch job/0 #2 -> slow\n");
}
