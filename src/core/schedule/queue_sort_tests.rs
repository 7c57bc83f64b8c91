//! Grid Engine's queue selection: engines that differ only in the property at
//! stake (a named load value, or `seq_no`), under each `queue_sort_method`.

use expect_test::expect;

use super::tests::check;
use crate::core::event::{EngineLoad, Event, LoadFormula, Policy, QueueSort};
use crate::core::load;
use crate::core::state::State;
use crate::core::testkit::*;

fn policy(method: QueueSort, expression: &str) -> Policy {
    Policy {
        load_formula: LoadFormula { slots_weight: 0, load_weight: 0, expression: load::parse(expression).unwrap() },
        queue_sort_method: method,
        ..Policy::default()
    }
}

/// Three one-slot engines, ids in one order, `mem_used` in another, `seq_no` in a third.
fn three_engines(log: &mut LogBuilder, policy: Policy) {
    log.push(Event::PolicySet(policy));
    for (id, mem_used, seq_no) in [("a", 3_000, "1"), ("b", 1_000, "3"), ("c", 2_000, "2")] {
        let mut props = linux_props("lyon", 8192);
        props.custom.insert("seq_no".into(), seq_no.into());
        log.login(id, 1, props);
        let load = EngineLoad { values_milli: [("mem_used".to_string(), mem_used * 1000)].into(), ..EngineLoad::default() };
        log.push(Event::EngineHeartbeat { engine: engine_id(id), load });
    }
}

#[test]
fn queue_sort_load_takes_the_lowest_load_formula_first() {
    let mut log = LogBuilder::new();
    three_engines(&mut log, policy(QueueSort::Load, "0.5*mem_used"));
    log.submit(job_spec("one", 1, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch one/0 #1 -> b
    "#]]);
    log.submit(job_spec("two", 2, ""));
    check(&mut log, &mut state, expect![[r#"
        dispatch two/0 #1 -> c
        dispatch two/1 #1 -> a
    "#]]);
}

#[test]
fn queue_sort_seqno_takes_the_lowest_seq_no_first_whatever_the_load() {
    let mut log = LogBuilder::new();
    three_engines(&mut log, policy(QueueSort::Seqno, "0.5*mem_used"));
    log.submit(job_spec("three", 3, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch three/0 #1 -> a
        dispatch three/1 #1 -> c
        dispatch three/2 #1 -> b
    "#]]);
}

#[test]
fn each_method_breaks_its_ties_with_the_other_then_the_engine_id() {
    // Equal load: seq_no decides under `load`; equal seq_no: the load decides
    // under `seqno`; equal both: the id.
    for (method, seq_nos, mem_used, expected) in [
        (QueueSort::Load, ["2", "1", "1"], [5, 5, 5], ["y", "z", "x"]),
        (QueueSort::Seqno, ["1", "1", "1"], [9, 4, 4], ["y", "z", "x"]),
        (QueueSort::Load, ["1", "1", "1"], [1, 1, 1], ["x", "y", "z"]),
    ] {
        let mut log = LogBuilder::new();
        log.push(Event::PolicySet(policy(method, "mem_used")));
        for ((id, seq_no), used) in ["x", "y", "z"].into_iter().zip(seq_nos).zip(mem_used) {
            let mut props = linux_props("lyon", 8192);
            props.custom.insert("seq_no".into(), seq_no.into());
            log.login(id, 1, props);
            let load = EngineLoad { values_milli: [("mem_used".to_string(), used)].into(), ..EngineLoad::default() };
            log.push(Event::EngineHeartbeat { engine: engine_id(id), load });
        }
        log.submit(job_spec("j", 3, ""));
        let mut state = State::new();
        let orders = super::tests::decide_once(&mut log, &mut state);
        let engines: Vec<&str> = orders.lines().map(|line| line.rsplit(' ').next().unwrap()).collect();
        assert_eq!(engines, expected, "{method:?} {seq_nos:?} {mem_used:?}");
    }
}

#[test]
fn an_engine_that_has_not_reported_a_value_the_formula_names_comes_last() {
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(QueueSort::Load, "mem_used")));
    log.login("a-silent", 1, linux_props("lyon", 8192));
    log.login("b-heavy", 1, linux_props("lyon", 8192));
    let load = EngineLoad { values_milli: [("mem_used".to_string(), 1_000_000_000)].into(), ..EngineLoad::default() };
    log.push(Event::EngineHeartbeat { engine: engine_id("b-heavy"), load });
    log.submit(job_spec("j", 2, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> b-heavy
        dispatch j/1 #1 -> a-silent
    "#]]);
}

#[test]
fn the_formula_adds_to_the_slots_weight_so_booking_still_spreads_the_load() {
    // Two-slot engines, `b` with 400 MB more memory used: with the slots part
    // weighing 1000 per full engine and the formula 0.001 per MB (400 for
    // b), `a` takes the first task, then `b` (a's half-full slots weigh 500 >
    // 400), then `a` again (500 < 400 + 500).
    let mut log = LogBuilder::new();
    let mut p = policy(QueueSort::Load, "0.001*mem_used");
    p.load_formula.slots_weight = 1;
    log.push(Event::PolicySet(p));
    for (id, mem_used) in [("a", 0), ("b", 400_000)] {
        log.login(id, 2, linux_props("lyon", 8192));
        let load = EngineLoad { values_milli: [("mem_used".to_string(), mem_used)].into(), ..EngineLoad::default() };
        log.push(Event::EngineHeartbeat { engine: engine_id(id), load });
    }
    log.submit(job_spec("j", 3, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> a
        dispatch j/1 #1 -> b
        dispatch j/2 #1 -> a
    "#]]);
}

#[test]
fn the_queued_pick_over_many_engines_agrees_with_the_rule_under_seqno() {
    // More candidates than a pick walks, so the ranked queues serve: seq_no
    // descending with the id, every engine two slots.
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(policy(QueueSort::Seqno, "")));
    for n in 0..20u32 {
        let mut props = linux_props("lyon", 8192);
        props.custom.insert("seq_no".into(), (100 - n).to_string());
        log.login(&format!("e{n:02}"), 2, props);
    }
    log.submit(job_spec("j", 5, ""));
    let mut state = State::new();
    check(&mut log, &mut state, expect![[r#"
        dispatch j/0 #1 -> e19
        dispatch j/1 #1 -> e19
        dispatch j/2 #1 -> e18
        dispatch j/3 #1 -> e18
        dispatch j/4 #1 -> e17
    "#]]);
}
