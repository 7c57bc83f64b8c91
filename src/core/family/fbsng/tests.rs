//! FBSNG's rules one at a time, on small states; the seed's examples measured
//! at scale are in `sim::fbsng_tests`.

use super::*;
use crate::core::event::{Algorithm, Event, FbsngProcessType, Policy};
use crate::core::fold::fold;
use crate::core::reject::Rejection;
use crate::core::schedule::schedule;
use crate::core::testkit::{job_spec, linux_props, LogBuilder};

fn queue(name: &str, qp_min: i64, qpi: i64, qpd: i64, qpg: i64) -> FbsngQueue {
    FbsngQueue { qp_min, qpi, qpd, qpg, ..default_queue(name) }
}

fn policy(queues: Vec<FbsngQueue>, process_types: Vec<FbsngProcessType>) -> Policy {
    Policy {
        algorithm: Algorithm::Fbsng,
        fbsng: FbsngPolicy { queues, process_types, min_run_interval_ms: 0 },
        ..Policy::default()
    }
}

fn state_of(log: &LogBuilder) -> State {
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    state
}

#[test]
fn queue_priorities_keep_the_seeds_qpd_ratio_and_stay_within_their_bounds() {
    let queues = vec![queue("a", 0, 1, 3, 100), queue("b", 0, 1, 7, 100)];
    let mut priorities = vec![0, 0];
    let mut starts = [0u32; 2];
    for _ in 0..10_000 {
        let q = if priorities[0] >= priorities[1] { 0 } else { 1 };
        starts[q] += 1;
        queue_started(&queues, &mut priorities, q);
        for (p, queue) in priorities.iter().zip(&queues) {
            assert!((queue.qp_min..=queue.qp_max).contains(p), "{priorities:?}");
        }
    }
    assert_eq!(starts, [7_000, 3_000], "70/30 from qpd 3 and 7");
}

#[test]
fn a_queue_of_larger_qpi_gains_at_every_start_and_is_clamped_at_qp_max() {
    let queues = vec![queue("high", 5, 3, 1, 7), queue("background", 0, 1, 1, 100)];
    let mut priorities = vec![5, 0];
    for _ in 0..100 {
        queue_started(&queues, &mut priorities, 1);
    }
    assert_eq!(priorities, vec![100, 0], "idle high rises to its qp_max while background starts");
    queue_started(&queues, &mut priorities, 0);
    assert_eq!(priorities, vec![100, 0], "high starting keeps its lead");
}

#[test]
fn policy_limits_refuse_too_many_duplicated_long_and_inconsistent_entries() {
    let ok = FbsngPolicy { queues: vec![default_queue("a")], process_types: vec![], min_run_interval_ms: 0 };
    assert_eq!(check_policy(&ok), Ok(()));
    let many = FbsngPolicy { queues: (0..=QUEUES_MAX).map(|n| default_queue(&format!("q{n}"))).collect(), ..ok.clone() };
    assert_eq!(check_policy(&many).unwrap_err().0, "queues");
    let twice = FbsngPolicy { queues: vec![default_queue("a"), default_queue("a")], ..ok.clone() };
    assert_eq!(check_policy(&twice).unwrap_err(), ("queues[1].name".to_string(), "queue a is defined twice".to_string()));
    let long = FbsngPolicy { queues: vec![default_queue(&"q".repeat(NAME_BYTES_MAX + 1))], ..ok.clone() };
    assert_eq!(check_policy(&long).unwrap_err().0, "queues[0].name");
    let empty = FbsngPolicy { queues: vec![default_queue("")], ..ok.clone() };
    assert_eq!(check_policy(&empty).unwrap_err().0, "queues[0].name");
    let inverted = FbsngPolicy { queues: vec![FbsngQueue { qp_min: 10, qp_max: 5, ..default_queue("a") }], ..ok.clone() };
    assert_eq!(check_policy(&inverted).unwrap_err().0, "queues[0].qp_max");
    let negative = FbsngPolicy { queues: vec![FbsngQueue { qpd: -1, ..default_queue("a") }], ..ok.clone() };
    assert_eq!(check_policy(&negative).unwrap_err().0, "queues[0].qpd");
    let huge = FbsngPolicy { queues: vec![FbsngQueue { qpg: VALUE_ABS_MAX + 1, ..default_queue("a") }], ..ok.clone() };
    assert_eq!(check_policy(&huge).unwrap_err().0, "queues[0].qpg");
    let bad_requirements = FbsngPolicy {
        process_types: vec![FbsngProcessType { name: "cms".into(), quota_slots: 0, requirements: "project ==".into() }],
        ..ok.clone()
    };
    assert_eq!(check_policy(&bad_requirements).unwrap_err().0, "process_types[0].requirements");
    let slow = FbsngPolicy { min_run_interval_ms: MIN_RUN_INTERVAL_MS_MAX + 1, ..ok };
    assert_eq!(check_policy(&slow).unwrap_err().0, "min_run_interval_ms");
}

#[test]
fn a_job_of_an_unknown_queue_or_process_type_is_refused_naming_the_known_ones_and_changes_nothing() {
    let mut log = LogBuilder::new();
    let kinds = vec![FbsngProcessType { name: "cms".into(), quota_slots: 4, requirements: String::new() }];
    log.push(Event::PolicySet(policy(vec![default_queue("high"), default_queue("low")], kinds)));
    let before = state_of(&log);
    let rejections_before = before.rejections.total;
    log.submit(JobSpec { queue: "nowhere".into(), ..job_spec("j1", 1, "") });
    let mut spec = JobSpec { queue: "high".into(), ..job_spec("j2", 1, "") };
    spec.options.process_type = "atlas".into();
    log.submit(spec);
    let mut state = State::new();
    let mut refused = Vec::new();
    for entry in &log.entries {
        refused.extend(fold(&mut state, entry));
    }
    let problems: Vec<String> = refused
        .iter()
        .map(|rejection| match rejection {
            Rejection::InvalidJob { problem, .. } => problem.to_string(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        problems,
        vec![
            "unknown queue \"nowhere\"; known: high, low".to_string(),
            "unknown process type \"atlas\"; known: cms".to_string()
        ]
    );
    assert!(state.jobs().next().is_none(), "neither job is held");
    assert_eq!(state.rejections.total, rejections_before + 2);
    let as_if_refused = crate::core::fold::tests::as_if_rejected(&before, &state);
    assert_eq!(as_if_refused.state_digest(), state.state_digest(), "the refusals changed nothing but the rejection record");
}

#[test]
fn a_process_types_requirements_join_the_jobs_own() {
    let kinds = vec![FbsngProcessType { name: "cms".into(), quota_slots: 0, requirements: "project == \"cms\"".into() }];
    let policy = policy(vec![], kinds);
    let mut spec = job_spec("j", 1, "memory_mb >= 1024");
    spec.options.process_type = "cms".into();
    let joined = admit_job(&policy, &spec, crate::core::expr::parse(&spec.requirements).expect("parses")).expect("admitted");
    assert_eq!(joined.to_string(), crate::core::expr::parse("project == \"cms\" && memory_mb >= 1024").expect("parses").to_string());
    let other = Policy { algorithm: Algorithm::SgePlain, ..policy };
    let own = admit_job(&other, &spec, Expr::Bool(true)).expect("no check outside fbsng");
    assert_eq!(own, Expr::Bool(true));
}

/// A grid of one engine of 4 slots, a policy, and jobs submitted in order.
fn grid(policy: Policy, jobs: Vec<JobSpec>) -> LogBuilder {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy));
    log.login("e1", 4, linux_props("lyon", 8192));
    for spec in jobs {
        log.submit(spec);
    }
    log
}

fn dispatched_jobs(state: &State) -> Vec<String> {
    schedule(state, &InFlight::new())
        .iter()
        .filter_map(|order| match order {
            crate::core::event::Order::Dispatch { task, .. } => Some(task.job.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_queue_that_cannot_start_holds_a_queue_more_than_its_qpg_below_and_slots_stay_idle() {
    // high leads background by 5, more than its qpg of 2: its 8-slot section
    // fits nowhere, and background waits although 4 slots are free.
    let queues = vec![queue("high", 5, 1, 1, 2), queue("background", 0, 1, 1, 100)];
    let mut big = JobSpec { queue: "high".into(), ..job_spec("big", 1, "") };
    big.slots_per_task = 8;
    let small = JobSpec { queue: "background".into(), ..job_spec("small", 4, "") };
    let state = state_of(&grid(policy(queues.clone(), vec![]), vec![big.clone(), small.clone()]));
    assert_eq!(dispatched_jobs(&state), Vec::<String>::new());
    let j = state.job_idx(&small.id).expect("held");
    assert_eq!(
        hold_of(&state, j).map(|hold| hold.to_string()),
        Some("queue background is held by the queue gap: queue high cannot start a section and leads by 5, more than its qpg 2".into())
    );
    // With a qpg of 5 (not more than the lead), background starts one
    // section; that start raises high's priority (qpi) and background's by
    // as much less its qpd: high now leads by 6, and background is held.
    let wider = vec![queue("high", 5, 1, 1, 5), queue("background", 0, 1, 1, 100)];
    let state = state_of(&grid(policy(wider, vec![]), vec![big, small]));
    assert_eq!(dispatched_jobs(&state), vec!["small"]);
}

#[test]
fn a_process_type_at_its_quota_is_passed_over_and_the_other_takes_the_slots() {
    let kinds = vec![FbsngProcessType { name: "cms".into(), quota_slots: 1, requirements: String::new() }];
    let mut capped = job_spec("capped", 4, "");
    capped.options.process_type = "cms".into();
    let other = job_spec("other", 4, "");
    let state = state_of(&grid(policy(vec![], kinds), vec![capped.clone(), other]));
    assert_eq!(dispatched_jobs(&state), vec!["capped", "other", "other", "other"]);
}

#[test]
fn a_section_passed_spg_times_holds_the_later_ones_of_its_queue() {
    let queues = vec![FbsngQueue { spg: 2, ..default_queue("mixed") }];
    let mut bulk = JobSpec { queue: "mixed".into(), ..job_spec("bulk", 1, "") };
    bulk.slots_per_task = 8;
    let light = JobSpec { queue: "mixed".into(), ..job_spec("light", 10, "") };
    let log = grid(policy(queues, vec![]), vec![bulk, light.clone()]);
    let state = state_of(&log);
    assert_eq!(dispatched_jobs(&state), vec!["light", "light"], "two pass the bulk section, then it holds the rest");
    // Those two starts read back, `why` names the section that holds the rest.
    let state = run_and_read_back(log);
    let j = state.job_idx(&light.id).expect("held");
    assert_eq!(
        hold_of(&state, j).map(|hold| hold.to_string()),
        Some("held by the section gap: job bulk's section cannot start and its priority leads by 2, spg is 2".into())
    );
}

/// A state folded from the log with `schedule`'s orders of each run read back.
fn run_and_read_back(mut log: LogBuilder) -> State {
    let mut state = state_of(&log);
    let orders = schedule(&state, &InFlight::new());
    log.orders(crate::core::event::OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: "fbsng".into(),
        algorithm_version: crate::core::schedule::ALGORITHM_VERSION,
        orders,
    });
    state = state_of(&log);
    state
}

#[test]
fn stat_lists_each_waiting_sections_priority_and_the_ones_the_section_gap_holds() {
    let queues = vec![FbsngQueue { spg: 2, ..default_queue("mixed") }, default_queue("other")];
    let mut bulk = JobSpec { queue: "mixed".into(), ..job_spec("bulk", 1, "") };
    bulk.slots_per_task = 8;
    let light = JobSpec { queue: "mixed".into(), ..job_spec("light", 10, "") };
    let state = run_and_read_back(grid(policy(queues, vec![]), vec![bulk, light]));
    let statuses = queue_statuses(&state);
    let names: Vec<&str> = statuses.iter().map(|status| status.name.as_str()).collect();
    assert_eq!(names, ["mixed", "other"]);
    let shown: Vec<(&str, u32, bool)> =
        statuses[0].sections.iter().map(|s| (s.job.as_str(), s.priority, s.held_by_section_gap)).collect();
    assert_eq!(shown, [("bulk", 2, false), ("light", 0, true)], "greatest priority first; light held by the gap");
    assert_eq!(statuses[0].jobs_held_by_section_gap, 1);
    assert!(statuses[1].sections.is_empty());
    let table = QueueTable(&statuses).to_string();
    assert!(table.contains("  section bulk priority 2\n  section light priority 0, held by the section gap\n"), "{table}");
}

#[test]
fn why_names_the_quota_with_used_and_quota_and_the_queue_of_higher_priority() {
    let kinds = vec![FbsngProcessType { name: "cms".into(), quota_slots: 2, requirements: String::new() }];
    let mut capped = job_spec("capped", 4, "");
    capped.options.process_type = "cms".into();
    let state = run_and_read_back(grid(policy(vec![], kinds), vec![capped.clone()]));
    let j = state.job_idx(&capped.id).expect("waiting");
    assert_eq!(
        hold_of(&state, j).map(|hold| hold.to_string()),
        Some("process type cms holds 2 of its 2 slots (quota)".into())
    );
    // Two queues, nothing free: the one of lower priority comes after the other.
    let queues = vec![queue("high", 5, 1, 1, 100), queue("low", 0, 1, 1, 100)];
    let high = JobSpec { queue: "high".into(), ..job_spec("hi", 8, "") };
    let low = JobSpec { queue: "low".into(), ..job_spec("lo", 8, "") };
    let state = run_and_read_back(grid(policy(queues, vec![]), vec![high, low.clone()]));
    let j = state.job_idx(&low.id).expect("waiting");
    // Four starts from high (qpi 1, qpd 1): high stays at 5, low gains 4.
    assert_eq!(
        hold_of(&state, j).map(|hold| hold.to_string()),
        Some("queue low (priority 4) comes after queue high (priority 5)".into())
    );
}

#[test]
fn a_job_naming_a_queue_or_process_type_of_a_megabyte_is_refused_repeating_at_most_64_bytes_of_it() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(vec![default_queue("high")], vec![])));
    log.submit(JobSpec { queue: "q".repeat(1 << 20), ..job_spec("j1", 1, "") });
    let mut spec = JobSpec { queue: "high".into(), ..job_spec("j2", 1, "") };
    spec.options.process_type = "\u{e9}".repeat(1 << 19);
    log.submit(spec);
    let mut state = State::new();
    let mut refused = Vec::new();
    for entry in &log.entries {
        refused.extend(fold(&mut state, entry));
    }
    assert_eq!(refused.len(), 2, "{refused:?}");
    for rejection in &refused {
        let said = rejection.to_string();
        assert!(said.len() < 200, "{} bytes: {}", said.len(), &said[..200]);
        assert!(said.contains("...\"; known: "), "{said}");
    }
    assert!(state.jobs().next().is_none(), "neither job is held");
}
