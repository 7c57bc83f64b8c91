//! FBSNG's scheduler (algorithm `fbsng`) measured: the seed's four worked
//! examples (issue 11's acceptance), a quota and a fixed-nodes test, each in
//! the simulator with many thousands of section starts, each asserting the
//! figure its name states. The scenarios are `scenarios/fbsng-*.toml`; the
//! simulator's end-of-run checks (replay with `--verify`, digests) run as
//! always. `cargo test --release --lib sim::fbsng_tests -- --nocapture`
//! prints the figures (`docs/policies.md` has them).

use std::collections::BTreeMap;

use super::*;
use crate::core::event::{Event, FbsngProcessType, Order};
use crate::core::fold::fold;
use crate::core::state::State;
use crate::files::scenario::Scenario;

fn scenario(text: &str, name: &str, horizon_ms: u64) -> Scenario {
    let mut scenario = Scenario::from_toml(text, name).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(scenario.policy.algorithm, crate::core::event::Algorithm::Fbsng);
    scenario.horizon_ms = Some(horizon_ms);
    scenario
}

fn run_checked(scenario: &Scenario) -> (SimReport, Vec<Entry>) {
    let options = RunOptions { check_invariants: false, entries_max: 2_000_000 };
    let (report, entries) = run(scenario, &options, &mut |_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(report.outcome, Outcome::Horizon | Outcome::AllJobsEnded), "{report}");
    assert_eq!(report.rejected_entries, 0, "{report}");
    // FBSNG is not preemptive: no batch of any scenario stops or suspends a running section.
    for entry in &entries {
        if let Some(Event::OrderBatch(batch)) = entry.payload_event() {
            let stops = batch.orders.iter().find(|order| matches!(order, Order::Preempt { .. } | Order::Suspend { .. }));
            assert!(stops.is_none(), "seq {}: FBSNG stopped a running section: {}", entry.seq, stops.map(ToString::to_string).unwrap_or_default());
        }
    }
    (report, entries)
}

/// Each section start (a dispatch read back), in log order: (log time since
/// the start, job, engine).
fn starts(entries: &[Entry]) -> Vec<(u64, String, String)> {
    let mut out = Vec::new();
    for entry in entries {
        if let Some(Event::OrderBatch(batch)) = entry.payload_event() {
            for order in &batch.orders {
                if let Order::Dispatch { task, engine, .. } = order {
                    out.push((entry.time_ms - EPOCH_MS, task.job.to_string(), engine.to_string()));
                }
            }
        }
    }
    out
}

fn count_by_job(starts: &[(u64, String, String)]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for (_, job, _) in starts {
        *counts.entry(job.clone()).or_insert(0) += 1;
    }
    counts
}

#[test]
fn a_high_priority_queue_waiting_holds_every_background_start_until_its_sections_have_started() {
    let text = include_str!("../../scenarios/fbsng-a-high-priority.toml");
    let (report, entries) = run_checked(&scenario(text, "fbsng-a-high-priority.toml", 2_700_000));
    // Folded step by step: at each batch, the high-priority sections waiting
    // at the state the batch was decided on, against what the batch started.
    let mut state = State::new();
    let mut high_waiting_at: Vec<u32> = vec![0];
    let (mut background_starts, mut high_starts, mut violations) = (0usize, 0usize, 0usize);
    let mut first_wait: BTreeMap<String, (u64, Option<u64>, u64)> = BTreeMap::new();
    for entry in &entries {
        if let Some(Event::OrderBatch(batch)) = entry.payload_event() {
            let waiting = high_waiting_at[batch.based_on_seq.0 as usize];
            let mut high_in_batch = 0u32;
            let mut background_in_batch = 0usize;
            for order in &batch.orders {
                if let Order::Dispatch { task, .. } = order {
                    if task.job.as_str().starts_with("high") {
                        high_in_batch += 1;
                        let now = entry.time_ms - EPOCH_MS;
                        let slot = first_wait.entry(task.job.to_string()).or_insert((0, None, 0));
                        slot.1.get_or_insert(now);
                        slot.2 = now;
                    } else {
                        background_in_batch += 1;
                    }
                }
            }
            if waiting > high_in_batch && background_in_batch > 0 {
                violations += 1;
            }
            background_starts += background_in_batch;
            high_starts += high_in_batch as usize;
        }
        if let Some(Event::JobSubmitted(spec)) = entry.payload_event() {
            first_wait.insert(spec.id.to_string(), (entry.time_ms - EPOCH_MS, None, 0));
        }
        fold(&mut state, entry);
        let waiting: u32 = state
            .jobs()
            .filter(|job| job.queue == "high" && job.is_active())
            .map(|job| job.n_wanting_dispatch())
            .sum();
        assert_eq!(high_waiting_at.len() as u64, entry.seq.0, "sequences are dense");
        high_waiting_at.push(waiting);
    }
    println!("(a) {report}");
    println!("(a) {background_starts} background and {high_starts} high-priority section starts; {violations} batches started background sections while high-priority ones waited");
    for (job, (submitted, first, last)) in &first_wait {
        if job.starts_with("high") {
            let first = first.unwrap_or(0);
            println!("(a) {job}: submitted at {} s, first section started {} s later, last {} s later", submitted / 1000, (first - submitted) / 1000, (last - submitted) / 1000);
        }
    }
    assert!(background_starts >= 10_000, "many thousands of starts: {background_starts}");
    assert_eq!(high_starts, 4 * 60, "every high-priority section started");
    assert_eq!(violations, 0, "no background section starts while high-priority sections wait");
}

#[test]
fn two_queues_of_qpd_3_and_7_share_the_starts_70_30_within_3_points() {
    let text = include_str!("../../scenarios/fbsng-b-shares.toml");
    let (report, entries) = run_checked(&scenario(text, "fbsng-b-shares.toml", 3_000_000));
    let counts = count_by_job(&starts(&entries));
    let (a, b) = (counts["project-a"], counts["project-b"]);
    let share_a = 100.0 * a as f64 / (a + b) as f64;
    println!("(b) {report}");
    println!("(b) starts: A {a}, B {b}: A {share_a:.2}%, B {:.2}%", 100.0 - share_a);
    assert!(a + b >= 10_000, "many thousands of starts: {}", a + b);
    assert!((share_a - 70.0).abs() <= 3.0, "A's share {share_a:.2}%, the seed's 70%");
}

#[test]
fn a_bulk_queue_of_qpg_1_starts_as_often_as_a_light_queue_within_10_percent_with_some_slots_idle() {
    let text = include_str!("../../scenarios/fbsng-c-bulk-light.toml");
    let (report, entries) = run_checked(&scenario(text, "fbsng-c-bulk-light.toml", 3_000_000));
    let counts = count_by_job(&starts(&entries));
    let (bulk, light) = (counts["bulk"], counts["light"]);
    let ratio = bulk as f64 / light as f64;
    let idle = idle_slot_percent(&entries, 160, 60_000);
    println!("(c) {report}");
    println!("(c) starts: bulk {bulk}, light {light}: bulk/light {ratio:.3}; {idle:.1}% of slot-time idle after the first minute");
    assert!(bulk + light >= 5_000, "thousands of starts: {}", bulk + light);
    assert!((ratio - 1.0).abs() <= 0.10, "bulk starts {bulk} against light {light}");
    assert!(idle > 1.0, "some slots sit idle while light is held: {idle:.1}%");
}

#[test]
fn one_queue_of_spg_5_starts_one_bulk_section_per_5_light_ones_within_10_percent() {
    let text = include_str!("../../scenarios/fbsng-d-section-gap.toml");
    let (report, entries) = run_checked(&scenario(text, "fbsng-d-section-gap.toml", 3_000_000));
    let counts = count_by_job(&starts(&entries));
    let (bulk, light) = (counts["bulk"], counts["light"]);
    let per_bulk = light as f64 / bulk as f64;
    println!("(d) {report}");
    println!("(d) starts: bulk {bulk}, light {light}: {per_bulk:.3} light per bulk (spg 5)");
    assert!(bulk + light >= 5_000, "thousands of starts: {}", bulk + light);
    assert!((per_bulk - 5.0).abs() <= 0.5, "{per_bulk:.3} light sections per bulk one, spg 5");
}

/// The share of slot-time no task held after `from_ms`, in percent, from the
/// states folded at each entry (slots held: dispatched or running).
fn idle_slot_percent(entries: &[Entry], slots: u64, from_ms: u64) -> f64 {
    let mut state = State::new();
    let (mut idle, mut total) = (0u128, 0u128);
    let mut last: Option<(u64, u64)> = None;
    for entry in entries {
        fold(&mut state, entry);
        let now = entry.time_ms - EPOCH_MS;
        let used: u64 = state.engines().iter().map(|e| u64::from(e.used)).sum();
        if let Some((then, used_then)) = last
            && then >= from_ms
        {
            let span = u128::from(now - then);
            idle += span * u128::from(slots - used_then.min(slots));
            total += span * u128::from(slots);
        }
        last = Some((now, used));
    }
    100.0 * idle as f64 / total.max(1) as f64
}

#[test]
fn a_process_type_never_holds_more_than_its_quota_and_the_others_keep_the_grid_busy() {
    let text = r#"
seed = 15

[policy]
algorithm = "fbsng"
engine_timeout_secs = 60
dispatch_timeout_secs = 60

[policy.fbsng]
min_run_interval_secs = 1

[[policy.fbsng.queues]]
name = "shared"

[[policy.fbsng.process_types]]
name = "cms"
quota_slots = 40

[[policy.fbsng.process_types]]
name = "atlas"
quota_slots = 150

[[engines]]
count = 40
name_prefix = "node"
slots = 4
os = "linux"

[[jobs]]
id = "cms"
queue = "shared"
process_type = "cms"
tasks = 20000
duration_ms = 20000
duration_jitter_ms = 10000

[[jobs]]
id = "atlas"
queue = "shared"
process_type = "atlas"
submit_at_ms = 1
tasks = 20000
duration_ms = 20000
duration_jitter_ms = 10000
"#;
    let scenario = scenario(text, "quota.toml", 1_500_000);
    assert_eq!(
        scenario.policy.fbsng.process_types[0],
        FbsngProcessType { name: "cms".into(), quota_slots: 40, requirements: String::new() }
    );
    let (report, entries) = run_checked(&scenario);
    let mut state = State::new();
    let (mut cms_max, mut busy_sum, mut n_states) = (0u32, 0u128, 0u128);
    for entry in &entries {
        fold(&mut state, entry);
        let held = |id: &str| {
            state.jobs().filter(|job| job.id.as_str() == id).map(|job| job.counts.dispatched + job.counts.running).sum::<u32>()
        };
        let cms = held("cms");
        cms_max = cms_max.max(cms);
        assert!(cms <= 40, "cms holds {cms} slots, its quota is 40");
        if entry.time_ms - EPOCH_MS >= 60_000 {
            busy_sum += u128::from(cms + held("atlas"));
            n_states += 1;
        }
    }
    let counts = count_by_job(&starts(&entries));
    let busy = busy_sum as f64 / n_states as f64 / 160.0 * 100.0;
    println!("quota: {report}");
    println!("quota: cms at most {cms_max} slots of its 40; starts {counts:?}; the grid {busy:.1}% busy on average after the first minute");
    assert_eq!(cms_max, 40, "cms reaches its quota");
    assert!(counts["cms"] + counts["atlas"] >= 5_000, "thousands of starts");
    assert!(busy >= 95.0, "the other process type keeps the grid busy: {busy:.1}%");
}

#[test]
fn projects_of_process_types_with_node_attributes_run_only_on_their_attributed_engines() {
    let text = r#"
seed = 16

[policy]
algorithm = "fbsng"
engine_timeout_secs = 60
dispatch_timeout_secs = 60

[[policy.fbsng.process_types]]
name = "cms"
requirements = 'project == "cms"'

[[policy.fbsng.process_types]]
name = "atlas"
requirements = 'project == "atlas"'

[[engines]]
count = 10
name_prefix = "cms"
slots = 4
os = "linux"
custom = { project = "cms" }

[[engines]]
count = 30
name_prefix = "atlas"
slots = 4
os = "linux"
custom = { project = "atlas" }

[[jobs]]
id = "cms-work"
process_type = "cms"
tasks = 5000
duration_ms = 20000
duration_jitter_ms = 10000

[[jobs]]
id = "atlas-work"
process_type = "atlas"
tasks = 20000
duration_ms = 20000
duration_jitter_ms = 10000
"#;
    let (report, entries) = run_checked(&scenario(text, "fixed-nodes.toml", 1_200_000));
    let starts = starts(&entries);
    let mut by_project: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (_, job, engine) in &starts {
        let project = job.split('-').next().expect("named project-work").to_string();
        let node = engine.split('-').next().expect("named prefix-n").to_string();
        *by_project.entry((project, node)).or_insert(0) += 1;
    }
    println!("fixed nodes: {report}");
    println!("fixed nodes: starts by (project, engines) {by_project:?}");
    assert!(starts.len() >= 5_000, "thousands of starts: {}", starts.len());
    for ((project, node), n) in &by_project {
        assert_eq!(project, node, "{n} sections of {project} started on {node} engines");
    }
}
