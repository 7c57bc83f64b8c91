//! Grid Engine's job ordering through fold and schedule: `user_sort` in
//! `sge-plain`, and the ticket policies of `sgeee`.

use std::collections::BTreeMap;

use crate::core::schedule::tests::decide_once;
use crate::core::event::{Algorithm, Event, JobSpec, Policy, SgePolicy, ShareTreeLeaf, ShareTreeNode};
use crate::core::explain::explain;
use crate::core::ids::TaskRef;
use crate::core::state::State;
use crate::core::testkit::*;

fn engines(log: &mut LogBuilder, n: u32) {
    for e in 0..n {
        log.login(&format!("e{e:02}"), 1, linux_props("lyon", 8192));
    }
}

fn job_of(id: &str, owner: &str, n: u32) -> JobSpec {
    JobSpec { owner: owner.into(), ..job_spec(id, n, "") }
}

/// How many dispatches each owner got, from rendered orders.
fn per_owner(orders: &str, owners: &BTreeMap<&str, &str>) -> BTreeMap<String, u32> {
    let mut counts = BTreeMap::new();
    for line in orders.lines() {
        let job = line.trim_start_matches("dispatch ").split('/').next().unwrap_or("");
        *counts.entry(owners.get(job).copied().unwrap_or("?").to_string()).or_insert(0) += 1;
    }
    counts
}

/// Starts and completes the first `n` live tasks of the job.
fn finish_live_tasks(log: &mut LogBuilder, state: &State, job: &str, n: usize) {
    let j = state.job_idx(&job_id(job)).expect("the job is held");
    let live: Vec<(u32, String)> = (0..state.job(j).n_tasks())
        .filter_map(|index| {
            let key = crate::core::state::TaskKey { job: j, index };
            state.live_attempts_of(key).first().map(|live| (index, state.engine(live.engine).id.to_string()))
        })
        .take(n)
        .collect();
    assert_eq!(live.len(), n, "the job has {n} live tasks");
    for (index, engine) in live {
        log.started(job, index, 1, &engine);
        log.completed(job, index, 1, &engine);
    }
}

fn policy(algorithm: Algorithm, sge: SgePolicy) -> Event {
    Event::PolicySet(Policy { algorithm, sge, ..Policy::default() })
}

fn tickets(sge: SgePolicy) -> Event {
    policy(Algorithm::Sgeee, sge)
}

#[test]
fn user_sort_alternates_users_by_running_tasks_where_fcfs_serves_the_first_job_first() {
    for (user_sort, expected) in [(false, [("alice", 4)].as_slice()), (true, [("alice", 2), ("bob", 2)].as_slice())] {
        let mut log = LogBuilder::new();
        log.push(policy(Algorithm::SgePlain, SgePolicy { user_sort, ..SgePolicy::default() }));
        engines(&mut log, 4);
        log.submit(job_of("a1", "alice", 10));
        log.submit(job_of("b1", "bob", 10));
        let mut state = State::new();
        let orders = decide_once(&mut log, &mut state);
        let owners = BTreeMap::from([("a1", "alice"), ("b1", "bob")]);
        let expected: BTreeMap<String, u32> = expected.iter().map(|&(u, n)| (u.to_string(), n)).collect();
        assert_eq!(per_owner(&orders, &owners), expected, "user_sort {user_sort}: {orders}");
    }
}

#[test]
fn user_sort_serves_the_user_with_fewer_running_tasks_first_and_priority_overrides_it() {
    let mut log = LogBuilder::new();
    log.push(policy(Algorithm::SgePlain, SgePolicy { user_sort: true, ..SgePolicy::default() }));
    engines(&mut log, 3);
    log.submit(job_of("a1", "alice", 10));
    let mut state = State::new();
    assert_eq!(decide_once(&mut log, &mut state).lines().count(), 3, "alice fills the grid");
    for index in 0..2 {
        log.started("a1", index, 1, &format!("e{index:02}"));
        log.completed("a1", index, 1, &format!("e{index:02}"));
    }
    log.submit(job_of("b1", "bob", 10));
    log.submit(JobSpec { priority: 5, ..job_of("a2", "alice", 1) });
    // Two slots free: alice's -p 5 job first, whatever she runs; then bob, who runs nothing.
    expect_test::expect![[r#"
        dispatch a2/0 #1 -> e00
        dispatch b1/0 #1 -> e01
    "#]]
    .assert_eq(&decide_once(&mut log, &mut state));
    let why = explain(&state, &TaskRef::new(job_id("a1"), 3)).unwrap().to_string();
    assert!(why.contains("(user_sort); the first is b1 (priority 0, running tasks 1); this job: priority 0, running tasks 2"), "{why}");
}

fn share_tree(leaves: &[(&str, u32)]) -> Vec<ShareTreeNode> {
    leaves
        .iter()
        .map(|&(user, shares)| ShareTreeNode {
            name: user.into(),
            parent: None,
            shares,
            leaf: Some(ShareTreeLeaf::User(user.into())),
        })
        .collect()
}

fn share_policy(leaves: &[(&str, u32)]) -> SgePolicy {
    SgePolicy { weight_tickets_share: 10_000, share_tree: share_tree(leaves), ..SgePolicy::grid_engine_defaults() }
}

#[test]
fn the_share_tree_splits_slots_by_shares_and_an_idle_users_share_goes_to_the_others() {
    let mut log = LogBuilder::new();
    log.push(tickets(share_policy(&[("a", 30), ("b", 60), ("c", 10)])));
    engines(&mut log, 30);
    log.submit(job_of("ja", "a", 100));
    log.submit(job_of("jb", "b", 100));
    let mut state = State::new();
    let orders = decide_once(&mut log, &mut state);
    let owners = BTreeMap::from([("ja", "a"), ("jb", "b")]);
    // c has no work: its 10 goes to a and b as 30:60, so 10 and 20 of 30 slots.
    assert_eq!(per_owner(&orders, &owners), BTreeMap::from([("a".into(), 10), ("b".into(), 20)]), "{orders}");
}

#[test]
fn a_user_that_used_the_grid_alone_waits_while_the_other_catches_up() {
    let mut log = LogBuilder::new();
    log.push(tickets(share_policy(&[("a", 50), ("b", 50)])));
    engines(&mut log, 4);
    log.submit(job_of("ja", "a", 100));
    let mut state = State::new();
    assert_eq!(decide_once(&mut log, &mut state).lines().count(), 4);
    // a runs alone for an hour.
    log.at(1_000_000 + 3_600_000);
    for index in 0..4 {
        log.started("ja", index, 1, &format!("e{index:02}"));
        log.completed("ja", index, 1, &format!("e{index:02}"));
    }
    log.submit(job_of("jb", "b", 100));
    // Equal shares, but a has an hour of four slots behind it: b gets all four
    // (compensation_factor 5 bounds b at 5 × its half, which is not reached).
    let orders = decide_once(&mut log, &mut state);
    let owners = BTreeMap::from([("ja", "a"), ("jb", "b")]);
    assert_eq!(per_owner(&orders, &owners), BTreeMap::from([("b".into(), 4)]), "{orders}");
    let why = explain(&state, &TaskRef::new(job_id("ja"), 4)).unwrap().to_string();
    assert!(why.contains("with a higher dispatch priority; the first is jb"), "{why}");
}

#[test]
fn override_tickets_put_a_users_jobs_first_and_functional_shares_split_the_rest() {
    let mut sge = SgePolicy { weight_tickets_functional: 10_000, ..SgePolicy::grid_engine_defaults() };
    sge.functional_users = BTreeMap::from([("a".into(), 1), ("b".into(), 3)]);
    let mut log = LogBuilder::new();
    log.push(tickets(sge.clone()));
    engines(&mut log, 8);
    log.submit(job_of("ja", "a", 100));
    log.submit(job_of("jb", "b", 100));
    let mut state = State::new();
    let owners = BTreeMap::from([("ja", "a"), ("jb", "b"), ("jc", "c")]);
    let orders = decide_once(&mut log, &mut state);
    assert_eq!(per_owner(&orders, &owners), BTreeMap::from([("a".into(), 2), ("b".into(), 6)]), "{orders}");

    // c, with override tickets, goes before both as slots free.
    sge.override_users = BTreeMap::from([("c".into(), 100_000)]);
    log.push(tickets(sge));
    log.submit(job_of("jc", "c", 100));
    finish_live_tasks(&mut log, &state, "ja", 2);
    let orders = decide_once(&mut log, &mut state);
    assert_eq!(per_owner(&orders, &owners), BTreeMap::from([("c".into(), 2)]), "{orders}");
}

#[test]
fn a_nearing_deadline_raises_a_jobs_urgency_above_the_others() {
    let mut log = LogBuilder::new();
    log.push(tickets(SgePolicy::grid_engine_defaults()));
    engines(&mut log, 1);
    log.submit(job_of("early", "a", 1));
    let mut late = job_of("late", "b", 1);
    late.options.deadline_ms = Some(1_000_000 + 60_000);
    log.submit(late);
    let mut state = State::new();
    assert_eq!(decide_once(&mut log, &mut state), "dispatch late/0 #1 -> e00\n");
}

#[test]
fn a_jobs_own_override_tickets_put_it_before_earlier_jobs_and_an_unknown_job_is_rejected() {
    let mut log = LogBuilder::new();
    log.push(tickets(SgePolicy::grid_engine_defaults()));
    engines(&mut log, 1);
    log.submit(job_of("first", "a", 1));
    log.submit(job_of("boosted", "b", 1));
    log.push(Event::JobOverrideTicketsSet { job: job_id("boosted"), tickets: 100 });
    log.push(Event::JobOverrideTicketsSet { job: job_id("nosuch"), tickets: 100 });
    let mut state = State::new();
    assert_eq!(decide_once(&mut log, &mut state), "dispatch boosted/0 #1 -> e00\n");
    assert_eq!(state.rejections.total, 1, "the unknown job's tickets are rejected");
}

#[test]
fn a_jobs_functional_shares_put_it_before_an_earlier_job_of_the_same_user_and_none_keeps_fcfs() {
    // Functional tickets for jobs only: weight_job takes the whole pool.
    let sge = SgePolicy {
        weight_tickets_functional: 10_000,
        weight_user_milli: 0,
        weight_project_milli: 0,
        weight_department_milli: 0,
        weight_job_milli: 1_000,
        ..SgePolicy::grid_engine_defaults()
    };
    let run = |shares: [u32; 2]| {
        let mut log = LogBuilder::new();
        log.push(tickets(sge.clone()));
        engines(&mut log, 3);
        for (id, share) in ["first", "second"].into_iter().zip(shares) {
            let mut job = job_of(id, "a", 3);
            job.options.job_share = share;
            log.submit(job);
        }
        let mut state = State::new();
        let orders = decide_once(&mut log, &mut state);
        let second = state.job_idx(&job_id("second")).expect("held");
        (orders, state.job(second).job_share())
    };
    let (orders, share) = run([1, 3]);
    assert_eq!(share, 3);
    // Its own tickets are not divided among its tasks: all three slots go to it.
    assert_eq!(
        orders,
        "dispatch second/0 #1 -> e00\ndispatch second/1 #1 -> e01\ndispatch second/2 #1 -> e02\n",
        "the job with 3 shares (7,500 tickets) goes before the one with 1 (2,500)"
    );
    let (orders, _) = run([0, 0]);
    assert!(orders.starts_with("dispatch first/0 #1 -> e00\n"), "without shares the earlier job goes first: {orders}");
}

#[test]
fn a_huge_job_share_on_a_job_not_runnable_is_capped_at_the_pool_and_why_answers() {
    // The largest functional pool, all of it for jobs; a job waiting on
    // another holds the largest share a client may set and is asked about.
    let sge = SgePolicy {
        weight_tickets_functional: u32::MAX,
        weight_user_milli: 0,
        weight_project_milli: 0,
        weight_department_milli: 0,
        weight_job_milli: 1_000,
        ..SgePolicy::grid_engine_defaults()
    };
    let mut log = LogBuilder::new();
    log.push(tickets(sge));
    engines(&mut log, 1);
    let mut first = job_of("first", "a", 2);
    first.options.job_share = 1;
    log.submit(first);
    let mut waiting = job_of("waiting", "b", 1);
    waiting.options.job_share = 1_000_000;
    waiting.options.depends_on_jobs = vec![job_id("first")];
    log.submit(waiting);
    let mut state = State::new();
    assert_eq!(decide_once(&mut log, &mut state), "dispatch first/0 #1 -> e00\n");
    let explanation = explain(&state, &TaskRef { job: job_id("waiting"), index: 0 }).expect("why answers");
    assert!(!explanation.to_string().is_empty());
    let tickets = crate::core::family::sgeee::Tickets::for_run(&state);
    let j = state.job_idx(&job_id("waiting")).expect("the job is held");
    let figures = tickets.of_job(&state, j, 0);
    assert_eq!(figures.functional_milli, u128::from(u32::MAX) * 1000, "capped at the whole job category");
}
