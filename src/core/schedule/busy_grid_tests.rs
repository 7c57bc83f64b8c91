//! A busy grid, pinned: a seeded workload of a few thousand steps is decided
//! step by step (one batch in flight, as the projector runs) and every order it
//! produced is summarised and digested. Any change to a decision, to the order
//! of decisions, or to what the fold accepts changes the expectation; a change
//! that only makes the core faster must leave it as it is.
//!
//! It reaches what the small scenario tests do not together: 12 requirement
//! categories (one no engine matches until late, one needing two slots),
//! priorities, retries after failures, engines that go silent and are lost,
//! that log out and back in, that never start what they are given (requeued
//! after the dispatch timeout), a cancelled job, a priority change, stale
//! reports, and `check_invariants` after every entry.

use std::collections::BTreeMap;

use expect_test::expect;

use super::{decide, InFlight};
use crate::core::digest::Digest;
use crate::core::event::{EngineLoad, EngineProps, Event, Order, OrderBatch, Policy};
use crate::core::fold::fold;
use crate::core::ids::TaskRef;
use crate::core::rng::SplitMix64;
use crate::core::state::{JobStatus, State};
use crate::core::testkit::{engine_id, job_id, job_spec, LogBuilder};

const N_ENGINES: usize = 80;
const N_STEPS: u64 = 3_000;
const STEP_MS: u64 = 100;

const CATEGORIES: [(&str, u32); 12] = [
    ("", 1),
    ("memory_mb >= 8192", 1),
    ("site == \"lyon\"", 1),
    ("site in [\"paris\", \"lille\"] && cores >= 4", 1),
    ("has_gpu", 1),
    ("memory_mb >= 16384 && !has_gpu", 1),
    ("site == \"mars\"", 1),
    ("", 2),
    ("tier == \"gold\"", 1),
    ("cores >= 8", 1),
    ("site != \"lyon\"", 1),
    ("rack == \"r3\"", 1),
];

fn engine_name(e: usize) -> String {
    format!("e{e:03}")
}

fn props(rng: &mut SplitMix64, site: &str) -> (u32, EngineProps) {
    let cores = [2, 4, 8, 16][rng.below(4) as usize];
    let mut custom = BTreeMap::new();
    if rng.below(8) == 0 {
        custom.insert("has_gpu".to_string(), "yes".to_string());
    }
    custom.insert("tier".to_string(), ["gold", "silver", "bronze"][rng.below(3) as usize].to_string());
    custom.insert("rack".to_string(), format!("r{}", rng.below(10)));
    let props = EngineProps {
        os: "linux".into(),
        arch: "x86_64".into(),
        cores,
        memory_mb: [2048, 4096, 8192, 16384, 32768][rng.below(5) as usize],
        disk_mb: 100_000,
        mflops: 1000,
        site: site.to_string(),
        custom,
        libraries: Vec::new(),
    };
    ((cores / 4).clamp(1, 4), props)
}

fn random_site(rng: &mut SplitMix64) -> &'static str {
    ["lyon", "lyon", "paris", "lille", "grenoble", "nantes"][rng.below(6) as usize]
}

fn submit(log: &mut LogBuilder, rng: &mut SplitMix64, j: usize) {
    let (requirements, slots_per_task) = CATEGORIES[j % CATEGORIES.len()];
    let mut spec = job_spec(&format!("j{j:03}"), 10 + rng.below(60) as u32, requirements);
    spec.slots_per_task = slots_per_task;
    spec.priority = [0, 0, 0, 3, -2][rng.below(5) as usize];
    spec.max_attempts = 1 + rng.below(3) as u32;
    log.submit(spec);
}

fn render(order: &Order) -> String {
    match order {
        Order::Dispatch { task, attempt, engine, .. } => format!("dispatch {task} #{attempt} -> {engine}"),
        Order::Cancel { task, attempt, engine, .. } => format!("cancel {task} #{attempt} on {engine}"),
        Order::EngineLost { engine, last_seen_ms, .. } => format!("lost {engine} (last seen {last_seen_ms})"),
        Order::Requeue { task, attempt, reason, .. } => format!("requeue {task} #{attempt} ({reason:?})"),
        Order::MarkUnschedulable { job, reason } => format!("unschedulable {job} ({})", reason.as_str()),
        other => other.to_string(),
    }
}

struct Running {
    task: TaskRef,
    attempt: u32,
    engine: usize,
    fails: bool,
}

#[test]
fn a_busy_grid_decides_as_it_always_has() {
    let mut rng = SplitMix64::new(42);
    let mut log = LogBuilder::new();
    log.push(Event::PolicySet(Policy {
        engine_timeout_ms: 5_000,
        dispatch_timeout_ms: 3_000,
        dispatches_per_run_max: 16,
        ..Policy::default()
    }));
    let mut sites = Vec::new();
    for e in 0..N_ENGINES {
        let site = random_site(&mut rng);
        sites.push(site);
        let (slots, props) = props(&mut rng, site);
        log.login(&engine_name(e), slots, props);
    }
    let mut n_jobs = 0;
    for _ in 0..20 {
        submit(&mut log, &mut rng, n_jobs);
        n_jobs += 1;
    }

    let mut state = State::new();
    let fold_new = |log: &LogBuilder, state: &mut State| {
        for entry in &log.entries[state.last_seq.0 as usize..] {
            fold(state, entry);
            state.check_invariants();
        }
    };

    // Engines that stop talking (lost), that never start what they get, and that leave for a while.
    let silent_from_step = |e: usize| if e == 3 || e == 41 { Some(300 + 400 * (e as u64 % 2)) } else { None };
    let mute = |e: usize| e == 11;
    let away = |e: usize, step: u64| e == 7 && (900..1_100).contains(&step);

    let mut pending: Vec<OrderBatch> = Vec::new();
    let mut to_start: Vec<Running> = Vec::new();
    let mut finishing: BTreeMap<(u64, u64), Running> = BTreeMap::new();
    let mut serial = 0;
    let mut orders_text = String::new();
    let mut order_kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for step in 1..=N_STEPS {
        let now = log.time_ms + STEP_MS;
        log.at(now);
        let talks = |e: usize| silent_from_step(e).is_none_or(|from| step < from) && !away(e, step);
        for run in std::mem::take(&mut to_start) {
            if !talks(run.engine) || mute(run.engine) {
                continue;
            }
            log.started(run.task.job.as_str(), run.task.index, run.attempt, &engine_name(run.engine));
            serial += 1;
            finishing.insert((now + 1_000 + rng.below(19_000), serial), run);
        }
        while let Some(entry) = finishing.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let run = entry.remove();
            if !talks(run.engine) {
                continue;
            }
            let (job, engine) = (run.task.job.as_str().to_string(), engine_name(run.engine));
            if run.fails {
                log.failed(&job, run.task.index, run.attempt, &engine);
            } else {
                log.completed(&job, run.task.index, run.attempt, &engine);
            }
        }
        for e in 0..N_ENGINES {
            if (step + e as u64).is_multiple_of(20) && talks(e) {
                let load = EngineLoad { load_per_core_milli: rng.below(1_500) as u32, memory_free_mb: 1_000, ..EngineLoad::default() };
                log.push(Event::EngineHeartbeat { engine: engine_id(&engine_name(e)), load });
            }
        }
        match step {
            500 => {
                log.push(Event::JobCancelled { job: job_id("j005"), reason: "user asked".into() });
            }
            700 => {
                log.push(Event::JobPriorityChanged { job: job_id("j012"), priority: 9 });
            }
            900 => {
                log.push(Event::EngineLoggedOut { engine: engine_id(&engine_name(7)) });
            }
            1_100 => {
                let (slots, props) = props(&mut rng, "lyon");
                log.login(&engine_name(7), slots, props);
            }
            1_500 => {
                let (slots, props) = props(&mut rng, "mars");
                log.login("e-mars", slots, props);
            }
            _ => {}
        }
        if step % 40 == 0 {
            submit(&mut log, &mut rng, n_jobs);
            n_jobs += 1;
        }
        if step % 10 == 0 {
            log.push(Event::Tick);
        }
        fold_new(&log, &mut state);

        // Decide with the previous batch still in flight, then publish that one.
        let in_flight = InFlight::from_batches(&state, &pending);
        if let Some(batch) = decide(&state, &in_flight) {
            pending.push(batch);
        }
        if pending.len() > 1 || (step % 7 == 0 && !pending.is_empty()) {
            let batch = pending.remove(0);
            for order in &batch.orders {
                orders_text.push_str(&render(order));
                orders_text.push('\n');
                *order_kinds.entry(order.kind_name()).or_default() += 1;
                if let Order::Dispatch { task, attempt, engine, .. } = order {
                    let e = if engine.as_str() == "e-mars" { N_ENGINES } else { engine.as_str()[1..].parse().unwrap() };
                    if e < N_ENGINES {
                        to_start.push(Running { task: task.clone(), attempt: *attempt, engine: e, fails: rng.below(12) == 0 });
                    }
                }
            }
            log.orders(batch);
            fold_new(&log, &mut state);
        }
    }

    let mut jobs: BTreeMap<&str, u32> = BTreeMap::new();
    for job in state.jobs() {
        *jobs.entry(job.status.as_str()).or_default() += 1;
    }
    let flagged = state.jobs().filter(|job| job.unschedulable.is_some() && job.status == JobStatus::Active).count();
    let t = &state.totals;
    let summary = format!(
        "entries {}, batches {}\norders {:?}\ndispatches {}, done {}, attempts failed {}, tasks failed {}, requeues {}, engines lost {}\n\
         wait ms sum {} max {}, busy ms {}\nrejections {} {:?}\njobs {:?}, flagged now {flagged}\norders digest {}\n",
        log.entries.len(),
        t.order_batches,
        order_kinds,
        t.dispatches,
        t.tasks_done,
        t.attempts_failed,
        t.tasks_failed,
        t.requeues,
        t.engines_lost,
        t.wait_ms_sum,
        t.wait_ms_max,
        t.busy_ms_sum,
        state.rejections.total,
        state.rejections.by_kind,
        jobs,
        Digest::of_bytes(orders_text.as_bytes()).to_hex(),
    );
    expect![[r#"
        entries 19898, batches 1253
        orders {"Cancel": 674, "Dispatch": 3343, "EngineLost": 3, "MarkUnschedulable": 13, "Requeue": 83}
        dispatches 3336, done 2286, attempts failed 203, tasks failed 36, requeues 86, engines lost 3
        wait ms sum 26315600 max 75700, busy ms 22860
        rejections 684 {"job-already-ended": 1, "order-not-applicable": 13, "stale-attempt": 670}
        jobs {"active": 15, "cancelled": 1, "done": 43, "failed": 36}, flagged now 8
        orders digest 5df2bb46c61efade9149283d8447c03cce395e85c6a678facd1ae277e31236eb
    "#]].assert_eq(&summary);
}
