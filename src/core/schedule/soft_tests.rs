//! Grid Engine's soft requests: engines that differ only in the property a
//! job's `soft` expression asks for.

use expect_test::expect;

use super::tests::check;
use crate::core::event::Preference;
use crate::core::explain::explain;
use crate::core::fold::fold;
use crate::core::reject::{JobProblem, Rejection};
use crate::core::state::State;
use crate::core::testkit::*;

/// One-slot engines, identical but for `gpu`, which those named in `with_gpu` have.
fn engines(log: &mut LogBuilder, ids: &[&str], with_gpu: &[&str]) {
    for id in ids {
        let mut props = linux_props("lyon", 8192);
        props.custom.insert("gpu".into(), if with_gpu.contains(id) { "yes" } else { "no" }.into());
        log.login(id, 1, props);
    }
}

fn soft_job(id: &str, n: u32, soft: &str) -> crate::core::event::JobSpec {
    let mut spec = job_spec(id, n, "");
    spec.options.soft = soft.into();
    spec
}

#[test]
fn an_engine_meeting_the_soft_request_ranks_first_and_the_others_still_take_tasks() {
    let mut log = LogBuilder::new();
    engines(&mut log, &["a", "b", "c"], &["c"]);
    log.submit(soft_job("want-gpu", 3, r#"gpu == "yes""#));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch want-gpu/0 #1 -> c
        dispatch want-gpu/1 #1 -> a
        dispatch want-gpu/2 #1 -> b
    "#]]);
}

#[test]
fn without_a_soft_request_the_same_engines_go_by_id() {
    let mut log = LogBuilder::new();
    engines(&mut log, &["a", "b", "c"], &["c"]);
    log.submit(job_spec("plain", 1, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch plain/0 #1 -> a
    "#]]);
}

#[test]
fn many_candidates_rank_soft_first_through_the_queues_too() {
    // Past `SCAN_CANDIDATES_MAX` the dispatcher picks from ranked queues: two
    // jobs with the same request share one, a third without any uses the
    // category's.
    let ids: Vec<String> = (0..24).map(|n| format!("e{n:02}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut log = LogBuilder::new();
    engines(&mut log, &ids, &["e07", "e19"]);
    let mut first = soft_job("first", 1, r#"gpu == "yes""#);
    first.priority = 3;
    let mut second = soft_job("second", 2, r#"gpu == "yes""#);
    second.priority = 2;
    log.submit(first);
    log.submit(second);
    log.submit(job_spec("third", 1, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch first/0 #1 -> e07
        dispatch second/0 #1 -> e19
        dispatch second/1 #1 -> e00
        dispatch third/0 #1 -> e01
    "#]]);
}

#[test]
fn the_soft_request_outranks_affinity_and_affinity_orders_engines_meeting_it() {
    // c and d meet the request; affinity prefers a and d (rack r1).
    let mut log = LogBuilder::new();
    for (id, gpu, rack) in [("a", "no", "r1"), ("b", "no", "r2"), ("c", "yes", "r2"), ("d", "yes", "r1")] {
        let mut props = linux_props("lyon", 8192);
        props.custom.insert("gpu".into(), gpu.into());
        props.custom.insert("rack".into(), rack.into());
        log.login(id, 1, props);
    }
    let mut spec = soft_job("both", 4, r#"gpu == "yes""#);
    spec.options.affinity = vec![Preference { when: r#"rack == "r1""#.into(), weight: 5 }];
    log.submit(spec);
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch both/0 #1 -> d
        dispatch both/1 #1 -> c
        dispatch both/2 #1 -> a
        dispatch both/3 #1 -> b
    "#]]);
}

#[test]
fn a_soft_request_that_does_not_parse_is_refused_and_changes_nothing() {
    let mut log = LogBuilder::new();
    engines(&mut log, &["a"], &[]);
    let too_deep = format!("{}true{}", "(".repeat(100), ")".repeat(100));
    let too_long = format!("gpu == \"{}\"", "x".repeat(5000));
    for (n, soft) in ["gpu ==", "gpu == 3 &&", too_deep.as_str(), too_long.as_str(), "memory_mb >= \"lots\""].iter().enumerate() {
        let entry = log.submit(soft_job(&format!("bad{n}"), 1, soft));
        let mut state = State::new();
        for entry in &log.entries[..entry.seq.0 as usize - 1] {
            fold(&mut state, entry);
        }
        // `fold_checked` asserts the rejection changed nothing but the record.
        let rejections = crate::core::fold::tests::fold_checked(&mut state, &entry);
        assert!(
            matches!(&rejections[..], [Rejection::InvalidJob { problem: JobProblem::BadCondition { field, .. }, .. }] if field == "soft"),
            "{soft}: {rejections:?}"
        );
        assert!(state.job_idx(&job_id(&format!("bad{n}"))).is_none());
    }
}

#[test]
fn why_says_soft_request_unmet_and_names_the_engines_that_would_meet_it() {
    let mut log = LogBuilder::new();
    engines(&mut log, &["a", "b", "g1", "g2"], &["g1", "g2"]);
    log.submit(soft_job("blocker", 2, r#"gpu == "yes""#));
    log.submit(soft_job("late", 1, r#"gpu == "yes""#));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch blocker/0 #1 -> g1
        dispatch blocker/1 #1 -> g2
        dispatch late/0 #1 -> a
    "#]]);
    let why = explain(&state, &task("late", 0)).unwrap().to_string();
    assert!(
        why.contains("soft request unmet: a does not meet `gpu == \"yes\"`; engines that would: g1, g2"),
        "{why}"
    );
    assert!(why.contains("ranking (tier, then the soft request met, then score"), "the header names the soft request: {why}");
    assert!(why.contains("-> a: tier 0, soft request unmet"), "{why}");
    let why = explain(&state, &task("blocker", 0)).unwrap().to_string();
    assert!(!why.contains("soft request unmet:"), "{why}");
    assert!(why.contains("-> g1: tier 0, soft request met"), "{why}");
    // A snapshot keeps the request, compiled again on load.
    let loaded = State::from_snapshot(&state.to_snapshot()).unwrap();
    assert_eq!(explain(&loaded, &task("late", 0)).unwrap().to_string(), explain(&state, &task("late", 0)).unwrap().to_string());
}
