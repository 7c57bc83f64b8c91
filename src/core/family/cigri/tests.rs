//! CiGri's rules one at a time, on clusters that differ only in the property
//! at stake (`cluster`); the metascheduler over time is in `sim::cigri_tests`.

use std::collections::BTreeMap;

use super::*;
use crate::core::event::{CigriAffinity, Event, JobSpec, OrderBatch, Policy};
use crate::core::fold::fold;
use crate::core::family::reasons::FamilyOrderProblem;
use crate::core::reject::{OrderProblem, Rejection};
use reasons::CigriOrderProblem;
use crate::core::schedule::decide;
use crate::core::state::TaskStatus;
use crate::core::testkit::{engine_id, job_id, job_spec, linux_props, LogBuilder};

fn policy(affinity: &[(&str, &str)], finalize_copies_max: u32) -> Policy {
    Policy {
        algorithm: Algorithm::Cigri,
        cigri: CigriPolicy {
            affinity: affinity.iter().map(|(user, cluster)| CigriAffinity { user: user.to_string(), cluster: cluster.to_string() }).collect(),
            finalize_copies_max,
            ..CigriPolicy::default()
        },
        ..Policy::default()
    }
}

fn in_cluster(cluster: &str) -> crate::core::event::EngineProps {
    let mut props = linux_props("site", 8192);
    props.custom.insert("cluster".into(), cluster.into());
    props
}

fn campaign(id: &str, owner: &str, n: u32, kind: CampaignType) -> JobSpec {
    let mut spec = JobSpec { owner: owner.into(), ..job_spec(id, n, "") };
    spec.options.campaign = kind;
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

/// Folds the log, decides, folds the batch back; the batch (empty when none).
fn decide_and_fold(log: &mut LogBuilder, state: &mut State) -> Vec<Order> {
    fold_all(log, state);
    let Some(batch) = decide(state, &InFlight::new()) else { return Vec::new() };
    let entry = log.orders(batch.clone());
    assert_eq!(fold(state, &entry), Vec::new(), "every order of the run applies");
    batch.orders
}

/// The dispatches of a batch as `job/index->engine`.
fn dispatches(orders: &[Order]) -> Vec<String> {
    orders
        .iter()
        .filter_map(|order| match order {
            Order::Dispatch { task, engine, .. } => Some(format!("{task}->{engine}")),
            _ => None,
        })
        .collect()
}

#[test]
fn policy_limits_refuse_too_many_duplicated_empty_long_and_out_of_range_settings() {
    let ok = policy(&[("alice", "lyon")], 1).cigri;
    assert_eq!(check_policy(&ok), Ok(()));
    let many = CigriPolicy {
        affinity: (0..=AFFINITIES_MAX).map(|n| CigriAffinity { user: format!("u{n}"), cluster: "c".into() }).collect(),
        ..ok.clone()
    };
    assert_eq!(check_policy(&many).unwrap_err().0, "affinity");
    let mut twice = ok.clone();
    twice.affinity.push(twice.affinity[0].clone());
    assert_eq!(
        check_policy(&twice).unwrap_err(),
        ("affinity[1]".to_string(), "user alice and cluster lyon are listed twice".to_string())
    );
    let empty = CigriPolicy { affinity: vec![CigriAffinity { user: String::new(), cluster: "c".into() }], ..ok.clone() };
    assert_eq!(check_policy(&empty).unwrap_err().0, "affinity[0].user");
    let long = CigriPolicy { affinity: vec![CigriAffinity { user: "u".into(), cluster: "c".repeat(NAME_BYTES_MAX + 1) }], ..ok.clone() };
    assert_eq!(check_policy(&long).unwrap_err().0, "affinity[0].cluster");
    let copies = CigriPolicy { finalize_copies_max: FINALIZE_COPIES_MAX_MAX + 1, ..ok.clone() };
    assert_eq!(check_policy(&copies).unwrap_err().0, "finalize_copies_max");
    let ratio = CigriPolicy { sink_ratio_milli: SINK_RATIO_MILLI_MAX + 1, ..ok.clone() };
    assert_eq!(check_policy(&ratio).unwrap_err().0, "sink_ratio_milli");
    let window = CigriPolicy { predictor_window_ms: 0, ..ok.clone() };
    assert_eq!(check_policy(&window).unwrap_err().0, "predictor_window_ms");
    let long_window = CigriPolicy { predictor_window_ms: PREDICTOR_WINDOW_MS_MAX + 1, ..ok };
    assert_eq!(check_policy(&long_window).unwrap_err().0, "predictor_window_ms");
}

/// Three clusters of two one-slot engines each, a default campaign submitted
/// before a test campaign: the test campaign's first task goes first, then
/// one task per cluster, one cluster per run, and never two on one cluster.
#[test]
fn a_test_campaign_jumps_a_default_one_and_runs_one_task_per_cluster_then_ends_dropping_the_rest() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(&[], 0)));
    for cluster in ["a", "b", "c"] {
        for n in 1..=2 {
            log.login(&format!("{cluster}{n}"), 1, in_cluster(cluster));
        }
    }
    log.submit(campaign("bulk", "alice", 20, CampaignType::Default));
    log.submit(campaign("probe", "bob", 10, CampaignType::Test));
    let mut state = State::new();
    let first = decide_and_fold(&mut log, &mut state);
    assert_eq!(dispatches(&first), vec!["probe/0->a1", "bulk/0->a2", "bulk/1->b1", "bulk/2->b2", "bulk/3->c1", "bulk/4->c2"]);
    // Engines free up one by one; the test campaign takes one per new cluster.
    log.completed("bulk", 1, 1, "b1");
    assert_eq!(dispatches(&decide_and_fold(&mut log, &mut state)), vec!["probe/1->b1"]);
    log.completed("bulk", 2, 1, "b2");
    assert_eq!(dispatches(&decide_and_fold(&mut log, &mut state)), vec!["bulk/5->b2"], "b is tested: bulk takes it");
    log.completed("bulk", 3, 1, "c1");
    assert_eq!(dispatches(&decide_and_fold(&mut log, &mut state)), vec!["probe/2->c1"]);
    let probe = state.job_idx(&job_id("probe")).expect("held");
    assert_eq!(state.job(probe).families.cigri.tested.len(), 3);
    // The three probe tasks finish: the campaign ends, the other seven dropped.
    let live: Vec<(u32, u32, String)> = state
        .live_attempts_of_job_sorted(probe)
        .into_iter()
        .map(|(key, live)| (key.index, live.attempt, state.engine(live.engine).id.to_string()))
        .collect();
    for (index, attempt, engine) in live {
        log.completed("probe", index, attempt, &engine);
    }
    let orders = decide_and_fold(&mut log, &mut state);
    assert!(orders.contains(&Order::EndTestCampaign { job: state.job(probe).id.clone(), clusters: 3 }), "{orders:?}");
    let job = state.job(probe);
    assert_eq!((job.status, job.counts.done, job.counts.cancelled), (JobStatus::Done, 3, 7));
}

#[test]
fn a_test_campaign_does_not_end_while_an_allowed_cluster_has_not_run_its_task_and_a_forged_end_is_refused() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(&[], 0)));
    log.login("a1", 1, in_cluster("a"));
    log.login("b1", 1, in_cluster("b"));
    log.submit(campaign("hog", "alice", 1, CampaignType::Default));
    log.submit(campaign("probe", "bob", 5, CampaignType::Test));
    let mut state = State::new();
    let orders = decide_and_fold(&mut log, &mut state);
    assert_eq!(dispatches(&orders), vec!["probe/0->a1", "hog/0->b1"]);
    log.completed("probe", 0, 1, "a1");
    let orders = decide_and_fold(&mut log, &mut state);
    assert_eq!(dispatches(&orders), Vec::<String>::new(), "cluster a is tested; b is busy");
    assert!(!orders.iter().any(|order| matches!(order, Order::EndTestCampaign { .. })), "b has not run its task");
    let forged = OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: "cigri".into(),
        algorithm_version: crate::core::schedule::ALGORITHM_VERSION,
        orders: vec![Order::EndTestCampaign { job: job_id("probe"), clusters: 1 }],
    };
    // `fold_checked` asserts a batch whose orders are refused folds as the
    // batch without them would: it changes nothing the orders would have.
    let rejections = crate::core::fold::tests::fold_checked(&mut state, &log.orders(forged));
    assert!(
        matches!(rejections.as_slice(), [Rejection::OrderNotApplicable { problem: OrderProblem::Family(FamilyOrderProblem::Cigri(CigriOrderProblem::TestCampaignNotDone)), .. }]),
        "{rejections:?}"
    );
    let probe = state.job_idx(&job_id("probe")).expect("held");
    assert_eq!(state.job(probe).status, JobStatus::Active);
}

/// Two users, two clusters of two one-slot engines; alice has affinity for
/// lyon, bob for grenoble. Bob's campaign was submitted first, yet each
/// user's campaign runs on its own cluster; once alice's waiting tasks are
/// gone, bob overflows onto lyon's free slots.
#[test]
fn affinity_keeps_each_user_on_their_cluster_and_the_other_takes_what_is_left() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(&[("alice", "lyon"), ("bob", "grenoble")], 0)));
    for (engine, cluster) in [("g1", "grenoble"), ("g2", "grenoble"), ("l1", "lyon"), ("l2", "lyon")] {
        log.login(engine, 1, in_cluster(cluster));
    }
    log.submit(campaign("bobs", "bob", 6, CampaignType::Default));
    log.submit(campaign("alices", "alice", 1, CampaignType::Default));
    let mut state = State::new();
    let orders = decide_and_fold(&mut log, &mut state);
    assert_eq!(dispatches(&orders), vec!["bobs/0->g1", "bobs/1->g2", "alices/0->l1"], "l2 is held for alice this run");
    let bobs = state.job_idx(&job_id("bobs")).expect("held");
    let key = TaskKey { job: bobs, index: 2 };
    let l2 = state.engine_idx(&engine_id("l2")).expect("known");
    assert_eq!(filter(&state, key, l2), Ok(()), "alice has nothing waiting any more");
    let orders = decide_and_fold(&mut log, &mut state);
    assert_eq!(dispatches(&orders), vec!["bobs/2->l2"], "bob overflows onto lyon's free slot");
}

#[test]
fn without_a_waiting_affinity_campaign_the_cluster_is_free_for_all_and_the_rule_is_named() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(&[("alice", "lyon")], 0)));
    log.login("l1", 1, in_cluster("lyon"));
    log.submit(campaign("alices", "alice", 2, CampaignType::Default));
    log.submit(campaign("bobs", "bob", 2, CampaignType::Default));
    let mut state = State::new();
    fold_all(&log, &mut state);
    let bobs = state.job_idx(&job_id("bobs")).expect("held");
    let l1 = state.engine_idx(&engine_id("l1")).expect("known");
    let refused = filter(&state, TaskKey { job: bobs, index: 0 }, l1).unwrap_err();
    assert_eq!(refused.rule_name(), "cigri-affinity-first");
    assert_eq!(dispatches(&decide_and_fold(&mut log, &mut state)), vec!["alices/0->l1"]);
}

/// One campaign of three tasks on a fast and a slow cluster: once nothing
/// waits, the task still running gets a finalize copy on a free engine; the
/// copy's success cancels the original.
#[test]
fn finalize_copies_a_running_task_once_nothing_waits_and_the_first_result_cancels_the_other() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(&[], 1)));
    log.login("slow", 1, in_cluster("slow"));
    log.login("fast", 1, in_cluster("fast"));
    log.submit(campaign("c", "alice", 2, CampaignType::Default));
    let mut state = State::new();
    let orders = decide_and_fold(&mut log, &mut state);
    assert_eq!(dispatches(&orders), vec!["c/0->fast", "c/1->slow"]);
    log.at(1_010_000).completed("c", 0, 1, "fast");
    let orders = decide_and_fold(&mut log, &mut state);
    let reschedules: Vec<String> = orders
        .iter()
        .filter_map(|order| match order {
            Order::Reschedule { task, reason: RescheduleReason::Finalize, .. } => Some(task.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(reschedules, vec!["c/1"]);
    let orders = decide_and_fold(&mut log, &mut state);
    assert_eq!(dispatches(&orders), vec!["c/1->fast"], "the copy goes where the task is not");
    let again = decide_and_fold(&mut log, &mut state);
    assert!(again.is_empty(), "one copy at most (finalize_copies_max 1), and no slot free: {again:?}");
    log.completed("c", 1, 2, "fast");
    let orders = decide_and_fold(&mut log, &mut state);
    assert!(
        orders.iter().any(|order| matches!(order, Order::Cancel { engine, .. } if engine.as_str() == "slow")),
        "the slow original is cancelled: {orders:?}"
    );
    let c = state.job_idx(&job_id("c")).expect("held");
    assert_eq!(state.job(c).status, JobStatus::Done);
    assert_eq!(state.task(TaskKey { job: c, index: 1 }).status, TaskStatus::Done);
}

#[test]
fn finalize_is_off_at_zero_copies_and_a_forged_finalize_is_refused() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(&[], 0)));
    log.login("slow", 1, in_cluster("slow"));
    log.login("fast", 1, in_cluster("fast"));
    log.submit(campaign("c", "alice", 1, CampaignType::Default));
    let mut state = State::new();
    decide_and_fold(&mut log, &mut state);
    assert!(decide_and_fold(&mut log, &mut state).is_empty(), "no copy with finalize off");
    let forged = OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: "cigri".into(),
        algorithm_version: crate::core::schedule::ALGORITHM_VERSION,
        orders: vec![Order::Reschedule {
            task: crate::core::testkit::task("c", 0),
            reason: RescheduleReason::Finalize,
            elapsed_ms: 1,
            limit_ms: 0,
        }],
    };
    let rejections = fold(&mut state, &log.orders(forged));
    assert!(
        matches!(rejections.as_slice(), [Rejection::OrderNotApplicable { problem: OrderProblem::NoCopyWanted, .. }]),
        "{rejections:?}"
    );
}
mod predictor_sink;

/// The dispatch loop ranks each class's engines once per run, without those
/// the filter refuses it (`refused_engines`), and ends a campaign's walk at
/// its first task refused everywhere: both rest on every task of one class
/// getting the same verdict on every engine, which this checks on a grid with
/// affinities, a test campaign with a task tied to its cluster, and campaigns
/// of users with and without affinity.
#[test]
fn tasks_of_one_filter_class_get_the_same_verdict_on_every_engine_as_the_refusals_the_loop_asks() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(&[("alice", "c0"), ("bob", "c1")], 0)));
    for c in 0..3 {
        for n in 0..8 {
            log.login(&format!("c{c}-{n}"), 1, in_cluster(&format!("c{c}")));
        }
    }
    for (id, owner, kind) in [
        ("a1", "alice", CampaignType::Default),
        ("a2", "alice", CampaignType::Default),
        ("b1", "bob", CampaignType::Default),
        ("x1", "carol", CampaignType::Default),
        ("x2", "carol", CampaignType::Default),
        ("probe", "carol", CampaignType::Test),
    ] {
        log.submit(campaign(id, owner, 40, kind));
    }
    let mut state = State::new();
    // One run: the probe ties a task to a cluster; alice and bob hold their clusters.
    assert!(!dispatches(&decide_and_fold(&mut log, &mut state)).is_empty());
    let keys: Vec<TaskKey> = state
        .jobs_indexed()
        .flat_map(|(j, _)| (0..40).map(move |index| TaskKey { job: j, index }))
        .filter(|&key| state.task(key).status == TaskStatus::Waiting || state.task(key).is_live())
        .collect();
    let engines: Vec<EngineIdx> = (0..state.engines().len() as u32).map(EngineIdx).collect();
    let verdicts = |key: TaskKey| engines.iter().map(|&e| filter(&state, key, e).is_err()).collect::<Vec<bool>>();
    let mut by_class: BTreeMap<u64, (TaskKey, Vec<bool>)> = BTreeMap::new();
    let mut n_task_scoped = 0;
    for &key in &keys {
        match filter_scope(&state, key) {
            FilterScope::Class(class) => {
                let refused = verdicts(key);
                assert_eq!(refused_engines(&state, key), refused, "the refusals asked once per class are the filter's");
                let (first, first_refused) = by_class.entry(class).or_insert_with(|| (key, refused.clone()));
                assert_eq!(*first_refused, refused, "{first:?} and {key:?} share class {class} but not their verdicts");
            }
            FilterScope::Task => n_task_scoped += 1,
            FilterScope::Category => panic!("cigri's filter is never the category's alone"),
        }
    }
    let class_of = |job: &str| {
        let j = state.job_idx(&job_id(job)).expect("submitted");
        filter_scope(&state, TaskKey { job: j, index: 39 })
    };
    assert_eq!(class_of("a1"), class_of("a2"), "one owner, one class");
    assert_eq!(class_of("x1"), class_of("x2"));
    assert_ne!(class_of("a1"), class_of("x1"));
    assert_ne!(class_of("b1"), class_of("x1"));
    assert!(n_task_scoped >= 1, "the probe's task tied to its cluster is judged on its own");
    // Carol has no affinity: refused on c0 and c1 while alice and bob wait there, free on c2.
    let FilterScope::Class(carol) = class_of("x1") else { panic!("a default campaign has a class") };
    let refused = &by_class[&carol].1;
    let name = |at: usize| state.engines()[at].id.to_string();
    assert!((0..refused.len()).all(|at| refused[at] != name(at).starts_with("c2")), "{refused:?}");
}
