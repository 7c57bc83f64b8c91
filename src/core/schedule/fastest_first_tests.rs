//! The resource-first shape of the dispatch loop, shown by its test family
//! ([`super::fastest_first`]).

use std::collections::BTreeSet;

use super::dispatch::fill_in_order;
use super::families::{EngineOrder, Ordering};
use super::fastest_first::FastestFirst;
use super::{InFlight, Orders};
use crate::core::event::OrderBatch;
use crate::core::fold::fold;
use crate::core::state::State;
use crate::core::testkit::*;

/// Folds the log, runs the resource-first loop once, folds its batch back and
/// renders the orders.
fn decide_fastest_first(log: &mut LogBuilder, state: &mut State) -> String {
    for entry in &log.entries[state.last_seq.0 as usize..] {
        fold(state, entry);
        state.check_invariants();
    }
    let mut orders = Orders::new();
    let ordering = Ordering::ResourceFirst(EngineOrder::FastestFirst(FastestFirst::new()));
    fill_in_order(state, &InFlight::new(), &BTreeSet::new(), &mut orders, ordering);
    let orders = orders.into_vec();
    let rendered: String = orders.iter().map(|order| format!("{order}\n")).collect();
    let batch = OrderBatch {
        based_on_seq: state.last_seq,
        algorithm: state.policy.algorithm.name().to_string(),
        algorithm_version: super::ALGORITHM_VERSION,
        orders,
    };
    let entry = log.orders(batch);
    assert!(fold(state, &entry).is_empty(), "the test family's batch applies cleanly");
    state.check_invariants();
    rendered
}

fn engine_props(mflops: u64, site: &str) -> crate::core::event::EngineProps {
    let mut props = linux_props(site, 8192);
    props.mflops = mflops;
    props
}

#[test]
fn free_engines_are_served_fastest_first_each_taking_the_first_task_it_may() {
    let mut log = LogBuilder::new();
    log.login("slow", 1, engine_props(100, "lyon"));
    log.login("fast", 1, engine_props(900, "lyon"));
    log.login("mid", 2, engine_props(500, "hel"));
    let mut lyon_only = job_spec("lyon-only", 2, "site == \"lyon\"");
    lyon_only.priority = 10;
    log.submit(lyon_only);
    log.submit(job_spec("anywhere", 3, ""));
    let mut state = State::new();
    // fast (900) takes the first job's first task; mid (500) may not run it
    // and takes the next job's, twice (two slots); slow (100) gets what is left
    // of the first job.
    expect_test::expect![[r#"
        dispatch lyon-only/0 #1 -> fast
        dispatch anywhere/0 #1 -> mid
        dispatch anywhere/1 #1 -> mid
        dispatch lyon-only/1 #1 -> slow
    "#]]
    .assert_eq(&decide_fastest_first(&mut log, &mut state));
}

#[test]
fn a_retry_in_the_resource_first_loop_does_not_go_back_to_the_engine_it_failed_on() {
    let mut log = LogBuilder::new();
    log.login("fast", 1, engine_props(900, "lyon"));
    log.login("slow", 1, engine_props(100, "lyon"));
    log.submit(job_spec("job", 1, ""));
    let mut state = State::new();
    assert_eq!(decide_fastest_first(&mut log, &mut state), "dispatch job/0 #1 -> fast\n");
    log.started("job", 0, 1, "fast");
    log.failed("job", 0, 1, "fast");
    // The retry skips the fastest engine, where it failed, while another could run it.
    assert_eq!(decide_fastest_first(&mut log, &mut state), "dispatch job/0 #2 -> slow\n");
}
