//! Benchmarks of the core's two pure functions on a grid of realistic size.
//!
//! - `fold/history_1m`: folding a recorded history of 1,000,000 mixed entries
//!   (logins, submissions, order batches, starts, completions, failures,
//!   heartbeats, ticks) into a fresh `State`. Replay speed is fold speed.
//! - `fold/digest_chain_1m`: only the digest chain over the same entries, the
//!   part of fold that depends on the canonical bytes and on nothing the state does.
//! - `schedule/fill_5000_freed_slots`: one `schedule` run on a saturated grid of
//!   5,000 engines after 5,000 completions, with 1,000,000 tasks queued in 1,000
//!   jobs over 50 requirement categories: 5,000 dispatch decisions (asserted).
//! - `schedule/fill_5000_tiers_and_affinity`: the same fill on the same grid with
//!   the policy's engine tiers (`tier=gold`, `silver`, `bronze`) and an affinity
//!   on every third job, so the GridServer ranking stages do their work.
//! - `schedule/steady_one_completion`: one run on the same saturated grid after a
//!   single completion (the case the projector meets most).
//! - `schedule/fill_5000_sgeee`: the fill of `fill_5000_freed_slots` under Grid
//!   Engine's ticket mode (`Algorithm::Sgeee`): the 1,000 jobs belong to 200
//!   users, leaves of a three-level share tree (4 divisions, 20 groups), with
//!   functional shares, departments and a usage history (50 earlier jobs that
//!   ran for hours and ended a day before), so every run computes the tickets
//!   (`Tickets::for_run`) and re-keys the owners' jobs after each booking.
//! - `schedule/fill_5000_techila`: the fill of `fill_5000_freed_slots` under
//!   Techila's scheduler (`Algorithm::Techila`): the 1,000 jobs of 1,000 tasks
//!   are projects of 200 users (5 each, project priorities 1 to 6 in turn, the
//!   same 50 categories), so every decision is a cycle: the fastest free core,
//!   at most one project per user in a seeded ticket draw over their rankings.
//! - `schedule/steady_one_completion_sgeee`, `_techila`, `_fbsng`, `_cigri`,
//!   `_parallel`: one run on each family's saturated grid below after a single
//!   completion: what a run costs when it decides one thing, whose figure should
//!   follow that one decision rather than the grid's size.
//! - `schedule/fill_5000_parallel`: Grid Engine's resource side at the same
//!   scale (`sge-plain`, `max_reservation = 8`): of the 1,000 jobs, every 10th
//!   has tasks of `slots = 4` on one engine and every 10th (offset 5) tasks of
//!   `slots = 8` spread over a site (`DispatchParallel`), a quarter of those
//!   `reserve = true`, most with a wall-time limit; the grid is filled, runs ten
//!   minutes, ~5,000 tasks complete, and one run fills what it can: parallel
//!   tasks where all their slots are free, reservations for the first 8
//!   reserving jobs that cannot start, backfilling around them. Its decisions
//!   (tasks started, one per parallel task) are printed, not asserted to 5,000.
//!
//! - `delivery/seal_1`, `delivery/check_1`, `delivery/seal_64`, `delivery/check_64`:
//!   sealing the message of one run order (the projector) and checking it (the
//!   engine: decode, find the seal, verify it under a registered key), alone
//!   and for 64 joined in one message; per delivery (throughput in elements).
//!
//! Every input is built before the timed section from fixed seeds
//! (`SplitMix64`), so two runs measure the same work; the builders print progress
//! and a fingerprint of what they built (digests of the history and of the orders
//! decided) to stderr, which also shows whether a change to the core altered a
//! decision. See `docs/performance.md` for the figures and how to read them.
//! `GRIDFOLD_BENCH_ENTRIES=100000` shrinks the history, for profiling under valgrind.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};

use gridfold::core::digest::Digest;
use gridfold::core::event::{
    Algorithm, Entry, EngineLoad, EngineProps, Event, FailureKind, Order, Origin, Payload, Policy, Preference,
    SgePolicy, ShareTreeLeaf, ShareTreeNode,
};
use gridfold::core::fold::fold;
use gridfold::core::ids::{EngineId, TaskRef};
use gridfold::core::rng::SplitMix64;
use gridfold::core::schedule::{decide, schedule, InFlight};
use gridfold::core::state::State;
use gridfold::core::testkit::{engine_id, job_spec, LogBuilder};
use gridfold::projector::machine::Machine;

const N_ENGINES: usize = 5_000;
const HISTORY_ENTRIES: usize = 1_000_000;

/// Entries in the fold bench's history: 1,000,000 unless `GRIDFOLD_BENCH_ENTRIES`
/// says otherwise (a smaller history makes profiling under valgrind bearable).
fn history_entries() -> usize {
    std::env::var("GRIDFOLD_BENCH_ENTRIES").ok().and_then(|n| n.parse().ok()).unwrap_or(HISTORY_ENTRIES)
}
const N_JOBS: usize = 1_000;
const TASKS_PER_JOB: u32 = 1_000;
const N_COMPLETIONS: usize = 5_000;

/// Makes the entry what a broker would hold: the protobuf `wire` encodes, on the
/// subject the event is published on, batches sealed (with the test projector key
/// the log builder registers), so the fold hashes and checks what it does in production.
fn as_stored(entry: &mut Entry) {
    let Payload::Event(envelope) = &entry.payload else { return };
    entry.subject = gridfold::wire::subject_for(&envelope.event, &entry.origin);
    if matches!(envelope.event, Event::OrderBatch(_)) {
        entry.stored = gridfold::wire::encode_sealed(envelope, &gridfold::core::testkit::test_projector_key());
        entry.seal = gridfold::wire::entry_from_log(entry.seq, entry.time_ms, &entry.subject, &entry.stored).seal;
    } else {
        entry.stored = gridfold::wire::encode(envelope);
    }
}


// ---- the grid --------------------------------------------------------------------

fn weighted<T: Copy>(rng: &mut SplitMix64, table: &[(T, u64)]) -> T {
    let total: u64 = table.iter().map(|(_, weight)| weight).sum();
    let mut draw = rng.below(total);
    for &(value, weight) in table {
        if draw < weight {
            return value;
        }
        draw -= weight;
    }
    unreachable!("the draw is below the total weight")
}

const SITES: [(&str, u64); 8] = [
    ("lyon", 30),
    ("grenoble", 20),
    ("paris", 15),
    ("nantes", 10),
    ("lille", 10),
    ("rennes", 7),
    ("nancy", 5),
    ("sophia", 3),
];

/// One engine's slots and properties: sites, memory, cores and custom properties
/// spread so that each category below is eligible on a realistic subset.
fn engine_props(rng: &mut SplitMix64) -> (u32, EngineProps) {
    let cores: u32 = weighted(rng, &[(2, 15), (4, 30), (8, 30), (16, 15), (32, 7), (64, 3)]);
    let slots = (cores / 2).clamp(1, 8);
    let memory_mb: u64 =
        weighted(rng, &[(2048, 10), (4096, 20), (8192, 25), (16384, 20), (32768, 12), (65536, 8), (131072, 5)]);
    let mut custom = BTreeMap::new();
    if rng.chance_per_million(100_000) {
        custom.insert("has_gpu".to_string(), "yes".to_string());
        custom.insert("gpus".to_string(), weighted(rng, &[("1", 50), ("2", 35), ("4", 15)]).to_string());
    }
    custom.insert("tier".to_string(), weighted(rng, &[("gold", 20), ("silver", 30), ("bronze", 50)]).to_string());
    custom.insert("rack".to_string(), format!("r{:02}", rng.below(50)));
    if rng.chance_per_million(200_000) {
        custom.insert("matlab".to_string(), "yes".to_string());
    }
    custom.insert("scratch_gb".to_string(), (100 + rng.below(1900)).to_string());
    let props = EngineProps {
        os: weighted(rng, &[("linux", 95), ("windows", 5)]).to_string(),
        arch: weighted(rng, &[("x86_64", 85), ("aarch64", 15)]).to_string(),
        cores,
        memory_mb,
        disk_mb: weighted(rng, &[(50_000, 30), (100_000, 40), (250_000, 20), (1_000_000, 10)]),
        mflops: 500 + rng.below(4_500),
        site: weighted(rng, &SITES).to_string(),
        custom,
        ..EngineProps::default()
    };
    (slots, props)
}

/// The 50 requirement categories jobs cycle through, from any engine to ~2% of them.
const CATEGORIES: [&str; 50] = [
    "",
    "memory_mb >= 4096",
    "memory_mb >= 8192",
    "memory_mb >= 16384",
    "memory_mb >= 32768",
    "memory_mb >= 65536",
    "memory_mb >= 131072",
    "cores >= 4",
    "cores >= 8",
    "cores >= 16",
    "cores >= 32",
    "site == \"lyon\"",
    "site == \"grenoble\"",
    "site == \"paris\"",
    "site == \"nancy\"",
    "site == \"sophia\"",
    "site in [\"nantes\", \"rennes\"]",
    "site != \"lyon\"",
    "os == \"linux\"",
    "os == \"windows\"",
    "arch == \"aarch64\"",
    "os == \"linux\" && arch == \"x86_64\"",
    "has_gpu",
    "has_gpu && gpus >= 2",
    "has_gpu && memory_mb >= 16384",
    "tier == \"gold\"",
    "tier in [\"gold\", \"silver\"]",
    "tier == \"bronze\" && cores >= 4",
    "matlab",
    "matlab && site == \"lyon\"",
    "scratch_gb >= 500",
    "scratch_gb >= 1500",
    "mflops >= 2000",
    "mflops >= 4000",
    "disk_mb >= 250000",
    "site == \"lyon\" && memory_mb >= 8192",
    "site == \"grenoble\" && cores >= 8",
    "(site == \"paris\" || site == \"lille\") && memory_mb >= 4096",
    "memory_mb >= 8192 && cores >= 8",
    "memory_mb >= 4096 && !has_gpu",
    "!has_gpu",
    "rack in [\"r00\", \"r01\", \"r02\", \"r03\", \"r04\"]",
    "rack == \"r07\"",
    "os == \"linux\" && memory_mb >= 16384 && tier != \"bronze\"",
    "arch == \"aarch64\" && memory_mb >= 8192",
    "slots >= 4",
    "slots >= 8",
    "cores >= 8 && mflops >= 3000",
    "site not in [\"lyon\", \"grenoble\"]",
    "tier == \"gold\" && has_gpu",
];

fn engine_name(e: usize) -> String {
    format!("e{e:05}")
}

fn job_name(j: usize) -> String {
    format!("job-{j:05}")
}

/// Appends to the log as its publisher would (source named, bytes as stored per
/// [`as_stored`]), and hands the entry back.
fn append(log: &mut LogBuilder, event: Event) -> Entry {
    log.push(event);
    let entry = log.entries.last_mut().expect("just pushed");
    if let Payload::Event(envelope) = &mut entry.payload {
        envelope.source = match &entry.origin {
            Origin::Engine(engine) => format!("engine:{engine}"),
            Origin::Projector => "projector".to_string(),
            Origin::Ticker => "ticker".to_string(),
            Origin::User(_) => "gridfold-cli".to_string(),
            Origin::Operator => "operator".to_string(),
            Origin::Unknown => "unknown".to_string(),
        };
    }
    as_stored(entry);
    entry.clone()
}

fn policy(dispatches_per_run_max: u32) -> Event {
    Event::PolicySet(Policy {
        engine_timeout_ms: 120_000,
        dispatches_per_run_max,
        seed: 2026,
        ..Policy::default()
    })
}

/// The policy, the 5,000 engine logins and the first jobs: where both inputs start.
fn grid_opening(log: &mut LogBuilder, dispatches_per_run_max: u32, rng: &mut SplitMix64) {
    append(log, policy(dispatches_per_run_max));
    for e in 0..N_ENGINES {
        let (slots, props) = engine_props(rng);
        append(log, Event::EngineLoggedIn { engine: engine_id(&engine_name(e)), slots, props });
    }
}

fn submit(log: &mut LogBuilder, j: usize, n_tasks: u32) -> Entry {
    let mut spec = job_spec(&job_name(j), n_tasks, CATEGORIES[j % CATEGORIES.len()]);
    spec.owner = format!("user{}", j % 17);
    // Every 7th job is urgent; 7 and 50 are coprime, so urgent jobs span every category.
    spec.priority = if j.is_multiple_of(7) { 5 } else { 0 };
    append(log, Event::JobSubmitted(spec))
}

fn completed(task: TaskRef, attempt: u32, engine: EngineId, wall_ms: u64) -> Event {
    Event::TaskCompleted {
        task,
        attempt,
        engine,
        exit_code: 0,
        cpu_ms: wall_ms * 9 / 10,
        wall_ms,
        result: Vec::new(),
        stored: Default::default(),
    }
}

fn orders_digest(orders: &[Order]) -> Digest {
    Digest::of_bytes(format!("{orders:?}").as_bytes())
}

fn n_dispatches(orders: &[Order]) -> usize {
    orders.iter().filter(|order| matches!(order, Order::Dispatch { .. })).count()
}

// ---- (a) a history of a million entries --------------------------------------

/// A running attempt as the simulated engines see it.
#[derive(Clone)]
struct Running {
    task: TaskRef,
    attempt: u32,
    engine: EngineId,
    wall_ms: u64,
    fails: bool,
}

/// Drives the projector machine with simulated engines, 100 ms of log time per
/// step, until the log holds `HISTORY_ENTRIES` entries: the machine decides, its
/// batch is appended, engines start what they were given on the next step and
/// complete it (1% fail) 5 to 60 s later; each engine heartbeats every 30 s; a
/// tick every second; a new job of 1,000 tasks whenever fewer than 50,000 wait.
fn build_history() -> Vec<Entry> {
    let started = Instant::now();
    let mut rng = SplitMix64::new(0x00C0_FFEE);
    let mut log = LogBuilder::new();
    let mut machine = Machine::new();
    grid_opening(&mut log, 4_096, &mut rng);
    let mut n_jobs = 0;
    for _ in 0..100 {
        submit(&mut log, n_jobs, TASKS_PER_JOB);
        n_jobs += 1;
    }
    for entry in &log.entries {
        machine.handle_entry(entry);
    }
    // Ids as the log's decoder hands them to the fold: one shared text per engine
    // (the orders' ids are the state's own), not a fresh allocation per event.
    let engine_ids: Vec<EngineId> = (0..N_ENGINES).map(|e| engine_id(&engine_name(e))).collect();
    let mut to_start: Vec<Running> = Vec::new();
    let mut finishing: BTreeMap<(u64, u64), Running> = BTreeMap::new();
    let mut serial = 0u64;
    let mut step = 0u64;
    let mut next_report = 100_000;
    while log.entries.len() < history_entries() {
        step += 1;
        let now = log.time_ms + 100;
        log.at(now);
        let mut step_entries = Vec::new();
        for run in std::mem::take(&mut to_start) {
            step_entries.push(append(&mut log, Event::TaskStarted {
                task: run.task.clone(),
                attempt: run.attempt,
                engine: run.engine.clone(),
                remote_job: String::new(),
            }));
            serial += 1;
            finishing.insert((now + run.wall_ms, serial), run);
        }
        while let Some(entry) = finishing.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let run = entry.remove();
            let event = if run.fails {
                Event::TaskFailed {
                    task: run.task,
                    attempt: run.attempt,
                    engine: run.engine,
                    exit_code: Some(1),
                    kind: FailureKind::NonZeroExit,
                    error_tail: "Traceback (most recent call last): ValueError: bad input".into(),
                    stored: Default::default(),
                }
            } else {
                completed(run.task, run.attempt, run.engine, run.wall_ms)
            };
            step_entries.push(append(&mut log, event));
        }
        // Each engine heartbeats once every 300 steps (30 s), staggered by its index.
        for engine in engine_ids.iter().skip((step % 300) as usize).step_by(300) {
            let load = EngineLoad { load_per_core_milli: rng.below(1_200) as u32, memory_free_mb: rng.below(65_536), ..EngineLoad::default() };
            step_entries.push(append(&mut log, Event::EngineHeartbeat { engine: engine.clone(), load }));
        }
        if step.is_multiple_of(10) {
            step_entries.push(append(&mut log, Event::Tick));
        }
        let waiting: u64 = machine
            .state()
            .runnable_jobs()
            .map(|rank| u64::from(machine.state().job(rank.job).counts.waiting))
            .sum();
        if waiting < 50_000 {
            step_entries.push(submit(&mut log, n_jobs, TASKS_PER_JOB));
            n_jobs += 1;
        }
        for entry in &step_entries {
            machine.handle_entry(entry);
        }
        if let Some(batch) = machine.poll_batch() {
            for order in &batch.orders {
                if let Order::Dispatch { task, attempt, engine, .. } = order {
                    to_start.push(Running {
                        task: task.clone(),
                        attempt: *attempt,
                        engine: engine.clone(),
                        wall_ms: 5_000 + rng.below(55_000),
                        fails: rng.chance_per_million(10_000),
                    });
                }
            }
            let entry = append(&mut log, Event::OrderBatch(batch));
            machine.handle_entry(&entry);
        }
        if log.entries.len() >= next_report {
            eprintln!(
                "  history: {} entries, {} s of log time, {} jobs ({:.1} s)",
                log.entries.len(),
                step / 10,
                n_jobs,
                started.elapsed().as_secs_f64()
            );
            next_report += 100_000;
        }
    }
    log.entries.truncate(history_entries());
    describe_history(&log.entries, started);
    log.entries
}

fn describe_history(entries: &[Entry], started: Instant) {
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut bytes_by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut n_orders = 0;
    for entry in entries {
        if let Payload::Event(envelope) = &entry.payload {
            *by_kind.entry(envelope.event.kind_name()).or_default() += 1;
            *bytes_by_kind.entry(envelope.event.kind_name()).or_default() += entry.stored.len();
            if let Event::OrderBatch(batch) = &envelope.event {
                n_orders += batch.orders.len();
            }
        }
    }
    let canonical_bytes: usize = entries.iter().map(|entry| entry.stored.len()).sum();
    let mut state = State::new();
    for entry in entries {
        fold(&mut state, entry);
    }
    let mix: Vec<String> = by_kind.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
    eprintln!("history built in {:.1} s: {}", started.elapsed().as_secs_f64(), mix.join(", "));
    let per_kind: Vec<String> =
        by_kind.iter().map(|(kind, n)| format!("{kind} {:.0}", bytes_by_kind[kind] as f64 / *n as f64)).collect();
    eprintln!(
        "  {n_orders} orders in the batches; stored bytes: {} in all, {:.1} per entry on average; by kind: {}",
        canonical_bytes,
        canonical_bytes as f64 / entries.len() as f64,
        per_kind.join(", ")
    );
    eprintln!(
        "  folded: {} dispatches, {} tasks done, {} attempts failed, {} rejections; chain {}, state {}",
        state.totals.dispatches,
        state.totals.tasks_done,
        state.totals.attempts_failed,
        state.rejections.total,
        state.chain.to_hex(),
        state.state_digest().to_hex()
    );
}

fn bench_fold(c: &mut Criterion) {
    // Built on first use, so that a filter excluding this bench skips the build.
    let mut entries: Option<Vec<Entry>> = None;
    let mut group = c.benchmark_group("fold");
    group.sample_size(10);
    group.measurement_time(std::time::Duration::from_secs(20));
    group.throughput(Throughput::Elements(history_entries() as u64));
    group.bench_function("history_1m", |b| {
        let entries = entries.get_or_insert_with(|| {
            eprintln!("building a history of {} entries", history_entries());
            build_history()
        });
        b.iter_batched(
            State::new,
            |mut state| {
                for entry in entries.iter() {
                    fold(&mut state, black_box(entry));
                }
                state
            },
            BatchSize::LargeInput,
        )
    });
    // The digest chain alone over the same entries: the part of fold no index can speed up.
    group.bench_function("digest_chain_1m", |b| {
        let entries = entries.get_or_insert_with(build_history);
        b.iter(|| {
            let mut chain = Digest::default();
            for entry in entries.iter() {
                chain = chain.chain(entry.seq.0, entry.time_ms, &entry.subject, black_box(&entry.stored));
            }
            chain
        })
    });
    group.finish();
}

// ---- (b) a saturated grid with a million queued tasks ------------------------------

/// The grid after saturation: every slot of the 5,000 engines runs a task (started),
/// the rest of the 1,000 × 1,000 tasks wait. Returns the state, the log that built
/// it and the running attempts (task, attempt, engine) in dispatch order.
/// With `gridserver`, the policy ranks engines by three tiers of their `tier`
/// property and every third job prefers fast engines (an affinity): the
/// dispatcher then ranks those jobs' candidates by score as well.
fn build_saturated_grid(gridserver: bool) -> (State, LogBuilder, Vec<(TaskRef, u32, String)>) {
    let started = Instant::now();
    let mut rng = SplitMix64::new(0x5EED_0B0B);
    let mut log = LogBuilder::new();
    grid_opening(&mut log, 8_192, &mut rng);
    if gridserver {
        append(&mut log, Event::PolicySet(Policy {
            engine_timeout_ms: 120_000,
            dispatches_per_run_max: 8_192,
            seed: 2026,
            engine_tiers: vec!["tier=gold".into(), "tier=silver".into(), "tier=bronze".into()],
            ..Policy::default()
        }));
    }
    for j in 0..N_JOBS {
        if gridserver && j % 3 == 0 {
            let mut spec = job_spec(&job_name(j), TASKS_PER_JOB, CATEGORIES[j % CATEGORIES.len()]);
            spec.owner = format!("user{}", j % 17);
            spec.priority = if j.is_multiple_of(7) { 5 } else { 0 };
            spec.options.affinity = vec![Preference { when: "mflops >= 3000".into(), weight: 10 }];
            append(&mut log, Event::JobSubmitted(spec));
        } else {
            submit(&mut log, j, TASKS_PER_JOB);
        }
    }
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    let breadth: Vec<u32> = state.categories().iter().map(|category| category.eligible_logged_in).collect();
    assert!(breadth.iter().all(|&n| n > 0), "every category has an engine: {breadth:?}");
    eprintln!(
        "  grid: {} engines, {} slots, {} jobs, {} tasks; engines eligible per category: {breadth:?}",
        state.engines().len(),
        state.engines().iter().map(|engine| u64::from(engine.slots)).sum::<u64>(),
        state.jobs().len(),
        state.jobs().map(|job| u64::from(job.n_tasks())).sum::<u64>(),
    );
    let running = saturate(&mut state, &mut log, started);
    assert!(state.free_engines().next().is_none(), "the grid is saturated");
    eprintln!("saturated grid built in {:.1} s: {} running", started.elapsed().as_secs_f64(), running.len());
    (state, log, running)
}

/// Folds completions of `n` running attempts drawn without replacement.
fn complete_some(
    mut state: State,
    mut log: LogBuilder,
    mut running: Vec<(TaskRef, u32, String)>,
    n: usize,
    seed: u64,
) -> State {
    let mut rng = SplitMix64::new(seed);
    log.at(log.time_ms + 1_000);
    for i in 0..n {
        let pick = i + rng.below((running.len() - i) as u64) as usize;
        running.swap(i, pick);
        let (task, attempt, engine) = running[i].clone();
        let entry = append(&mut log, completed(task, attempt, engine_id(&engine), 30_000));
        let rejections = fold(&mut state, &entry);
        assert!(rejections.is_empty(), "{rejections:?}");
    }
    state
}

/// The grid after [`N_COMPLETIONS`] completions (drawn from `seed`) and,
/// from the same saturated grid, after a single one: what a family's fill and
/// steady benches run on.
fn freed_many_and_one(state: State, log: LogBuilder, running: Vec<(TaskRef, u32, String)>, seed: u64) -> (State, State) {
    let log_copy = LogBuilder { entries: log.entries.clone(), time_ms: log.time_ms, key_registered: log.key_registered };
    let one_freed = complete_some(state.clone(), log_copy, running.clone(), 1, 7);
    let many_freed = complete_some(state, log, running, N_COMPLETIONS, seed);
    (many_freed, one_freed)
}

/// Prints what the run after a single completion decides: the steady
/// bench's work, so a change that alters it shows.
fn describe_steady(family: &str, one_freed: &State) {
    let one = schedule(one_freed, &InFlight::new());
    eprintln!(
        "{family} steady after 1 completion: {} tasks started, {} orders, digest {}",
        n_started(&one),
        one.len(),
        orders_digest(&one).to_hex()
    );
}

/// The grids the schedule benches run on: ~5,000 slots freed, and one; and
/// ~5,000 freed on the grid with tiers and affinities.
struct Grids {
    many_freed: State,
    n_dispatches: usize,
    one_freed: State,
    many_freed_gridserver: State,
}

fn build_grids() -> Grids {
    eprintln!("building a saturated grid: {N_ENGINES} engines, {N_JOBS} jobs x {TASKS_PER_JOB} tasks, 50 categories");
    let (saturated, log, running) = build_saturated_grid(false);
    let (many_freed, one_freed) = freed_many_and_one(saturated, log, running, 11);

    let in_flight = InFlight::new();
    let orders = schedule(&many_freed, &in_flight);
    let n = n_dispatches(&orders);
    eprintln!(
        "fill after {N_COMPLETIONS} completions: {n} dispatches, {} orders, digest {}",
        orders.len(),
        orders_digest(&orders).to_hex()
    );
    assert!(n >= N_COMPLETIONS * 99 / 100, "the run must fill the freed slots, it made {n} dispatches");
    let mut per_job: BTreeMap<&str, usize> = BTreeMap::new();
    for order in &orders {
        if let Order::Dispatch { task, .. } = order {
            *per_job.entry(task.job.as_str()).or_default() += 1;
        }
    }
    let per_job: Vec<String> = per_job
        .iter()
        .map(|(job, n)| format!("{job} (category {}): {n}", job[4..].parse::<usize>().unwrap() % CATEGORIES.len()))
        .collect();
    eprintln!("  dispatches per job: {}", per_job.join(", "));
    let one = schedule(&one_freed, &in_flight);
    eprintln!("steady after 1 completion: {} dispatches, digest {}", n_dispatches(&one), orders_digest(&one).to_hex());
    assert_eq!(n_dispatches(&one), 1, "one freed slot, one dispatch");
    eprintln!("building the same grid with engine tiers and an affinity on every third job");
    let (saturated, log, running) = build_saturated_grid(true);
    let many_freed_gridserver = complete_some(saturated, log, running, N_COMPLETIONS, 11);
    let orders = schedule(&many_freed_gridserver, &in_flight);
    let n_gridserver = n_dispatches(&orders);
    eprintln!("fill with tiers and affinities: {n_gridserver} dispatches, digest {}", orders_digest(&orders).to_hex());
    assert!(n_gridserver >= N_COMPLETIONS * 99 / 100, "the run must fill the freed slots, it made {n_gridserver} dispatches");
    Grids { many_freed, n_dispatches: n, one_freed, many_freed_gridserver }
}

// ---- (c) the same grid under Grid Engine's ticket mode ------------------------------

const N_USERS: usize = 200;
const N_DIVISIONS: usize = 4;
const GROUPS_PER_DIVISION: usize = 5;
const USERS_PER_GROUP: usize = N_USERS / (N_DIVISIONS * GROUPS_PER_DIVISION);
const N_HISTORY_JOBS: usize = 50;
const HOUR_MS: u64 = 3_600_000;

fn user_name(u: usize) -> String {
    format!("user{u:03}")
}

/// Grid Engine's defaults, a million share-tree tickets over a three-level tree
/// (4 divisions → 20 groups → 200 user leaves, shares drawn from a fixed seed),
/// 200,000 functional tickets over a quarter of the users, the 8 projects and
/// the 4 divisions as departments, waiting time counted. Engines never time
/// out: the history spans a day of log time without heartbeats.
fn sgeee_policy() -> Policy {
    let mut rng = SplitMix64::new(0x5_6E_EE);
    let mut sge = SgePolicy {
        weight_tickets_share: 1_000_000,
        weight_tickets_functional: 200_000,
        weight_waiting_time_milli: 278,
        ..SgePolicy::grid_engine_defaults()
    };
    let division_shares = [40, 30, 20, 10];
    for (d, shares) in division_shares.into_iter().enumerate() {
        sge.share_tree.push(ShareTreeNode { name: format!("div{d}"), parent: None, shares, leaf: None });
    }
    for g in 0..N_DIVISIONS * GROUPS_PER_DIVISION {
        let parent = Some((g / GROUPS_PER_DIVISION) as u32);
        let shares = 10 + rng.below(90) as u32;
        sge.share_tree.push(ShareTreeNode { name: format!("group{g:02}"), parent, shares, leaf: None });
    }
    for u in 0..N_USERS {
        let parent = Some((N_DIVISIONS + u / USERS_PER_GROUP) as u32);
        let shares = weighted(&mut rng, &[(100, 60), (200, 25), (500, 10), (1_000, 5)]);
        let leaf = Some(ShareTreeLeaf::User(user_name(u)));
        sge.share_tree.push(ShareTreeNode { name: user_name(u), parent, shares, leaf });
    }
    for u in (0..N_USERS).step_by(4) {
        sge.functional_users.insert(user_name(u), 1 + rng.below(100) as u32);
    }
    for p in 0..8 {
        sge.functional_projects.insert(format!("proj{p}"), 10 * (p + 1));
    }
    for (d, shares) in division_shares.into_iter().enumerate() {
        let users_per_division = N_USERS / N_DIVISIONS;
        let members = (d * users_per_division..(d + 1) * users_per_division).map(user_name).collect();
        sge.departments.insert(format!("div{d}"), members);
        sge.functional_departments.insert(format!("div{d}"), shares);
    }
    Policy {
        algorithm: Algorithm::Sgeee,
        engine_timeout_ms: 30 * 24 * HOUR_MS,
        dispatches_per_run_max: 8_192,
        seed: 2026,
        sge,
        ..Policy::default()
    }
}

/// Dispatches until a run decides nothing, folds each batch and, half a second
/// later, every start. Returns the attempts started.
fn saturate(state: &mut State, log: &mut LogBuilder, started: Instant) -> Vec<(TaskRef, u32, String)> {
    let mut running = Vec::new();
    while let Some(batch) = decide(state, &InFlight::new()) {
        let dispatches: Vec<(TaskRef, u32, String)> = batch
            .orders
            .iter()
            .filter_map(|order| match order {
                Order::Dispatch { task, attempt, engine, .. } => Some((task.clone(), *attempt, engine.as_str().to_string())),
                _ => None,
            })
            .collect();
        assert_eq!(dispatches.len(), batch.orders.len(), "saturating only dispatches");
        let entry = append(log, Event::OrderBatch(batch));
        fold(state, &entry);
        eprintln!("  saturating: {} dispatched ({:.1} s)", dispatches.len(), started.elapsed().as_secs_f64());
        running.extend(dispatches);
    }
    log.at(log.time_ms + 500);
    for (task, attempt, engine) in &running {
        let entry = append(log, Event::TaskStarted { task: task.clone(), attempt: *attempt, engine: engine_id(engine), remote_job: String::new() });
        fold(state, &entry);
    }
    running
}

/// The grid of [`build_saturated_grid`] under [`sgeee_policy`], after a usage
/// history: 50 jobs of users spread over the tree (every fourth user, 100 to 400
/// tasks each) ran on it for 1 to 6 hours and ended; a day later the 1,000 jobs
/// of the 200 users (5 each, the same 50 categories, every 7th with `-p 5`,
/// every 50th with a deadline) saturate it and run for ten minutes.
fn build_sgeee_grid() -> (State, LogBuilder, Vec<(TaskRef, u32, String)>) {
    let started = Instant::now();
    let mut rng = SplitMix64::new(0x5EED_0B0B);
    let mut log = LogBuilder::new();
    grid_opening(&mut log, 8_192, &mut rng);
    append(&mut log, Event::PolicySet(sgeee_policy()));
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    // The history: every fourth user's job runs for (1 + h % 6) hours.
    for h in 0..N_HISTORY_JOBS {
        let mut spec = job_spec(&format!("hist-{h:02}"), 100 * (1 + (h % 4) as u32), "");
        spec.owner = user_name(h * 4);
        spec.project = format!("proj{}", h % 8);
        let entry = append(&mut log, Event::JobSubmitted(spec));
        fold(&mut state, &entry);
    }
    let history_start = log.time_ms;
    let history = saturate(&mut state, &mut log, started);
    let mut by_end: Vec<(u64, TaskRef, u32, String)> = history
        .into_iter()
        .map(|(task, attempt, engine)| {
            let h: u64 = task.job.as_str()[5..].parse().expect("hist-NN");
            (history_start + (1 + h % 6) * HOUR_MS, task, attempt, engine)
        })
        .collect();
    by_end.sort_by_key(|(end, ..)| *end);
    for (end, task, attempt, engine) in by_end {
        log.at(end);
        let wall_ms = end - history_start;
        let entry = append(&mut log, completed(task, attempt, engine_id(&engine), wall_ms));
        let rejections = fold(&mut state, &entry);
        assert!(rejections.is_empty(), "{rejections:?}");
    }
    assert!(state.runnable_jobs().next().is_none(), "the history ran to its end");
    log.at(history_start + 24 * HOUR_MS);
    let main_start = log.time_ms;
    for j in 0..N_JOBS {
        let mut spec = job_spec(&job_name(j), TASKS_PER_JOB, CATEGORIES[j % CATEGORIES.len()]);
        spec.owner = user_name(j % N_USERS);
        spec.project = format!("proj{}", j % 8);
        spec.priority = if j.is_multiple_of(7) { 5 } else { 0 };
        if j % 50 == 3 {
            spec.options.deadline_ms = Some(main_start + 2 * HOUR_MS);
        }
        let entry = append(&mut log, Event::JobSubmitted(spec));
        fold(&mut state, &entry);
    }
    eprintln!(
        "  grid: {} engines, {} slots, {} jobs ({} runnable), {} users, {} share-tree nodes",
        state.engines().len(),
        state.engines().iter().map(|engine| u64::from(engine.slots)).sum::<u64>(),
        state.jobs().len(),
        state.runnable_jobs().count(),
        state.users().len(),
        state.policy.sge.share_tree.len(),
    );
    let running = saturate(&mut state, &mut log, started);
    assert!(state.free_engines().next().is_none(), "the grid is saturated");
    log.at(log.time_ms + 10 * 60_000);
    eprintln!("saturated sgeee grid built in {:.1} s: {} running", started.elapsed().as_secs_f64(), running.len());
    (state, log, running)
}

/// A family's grid with ~5,000 slots freed, and the run's dispatch count;
/// and the same grid with one slot freed (the steady bench's).
struct SgeeeGrid {
    many_freed: State,
    n_dispatches: usize,
    one_freed: State,
}

fn build_sgeee() -> SgeeeGrid {
    eprintln!(
        "building a saturated sgeee grid: {N_ENGINES} engines, {N_JOBS} jobs x {TASKS_PER_JOB} tasks of {N_USERS} users, \
         share tree of {N_DIVISIONS} divisions and {} groups",
        N_DIVISIONS * GROUPS_PER_DIVISION
    );
    let (state, log, running) = build_sgeee_grid();
    let with_history = state.users().iter().filter(|(_, account)| account.decayed_usage > 0).count();
    let (many_freed, one_freed) = freed_many_and_one(state, log, running, 11);
    describe_steady("sgeee", &one_freed);
    let orders = schedule(&many_freed, &InFlight::new());
    let n = n_dispatches(&orders);
    eprintln!(
        "sgeee fill after {N_COMPLETIONS} completions: {n} dispatches, {} orders, {with_history} users with a usage history, digest {}",
        orders.len(),
        orders_digest(&orders).to_hex()
    );
    assert!(n >= N_COMPLETIONS * 99 / 100, "the run must fill the freed slots, it made {n} dispatches");
    SgeeeGrid { many_freed, n_dispatches: n, one_freed }
}

// ---- (d) the same grid under Techila's scheduler --------------------------------------

/// The grid of [`build_saturated_grid`] under `algorithm = "techila"` (no
/// license cap): the 1,000 jobs of 1,000 tasks belong to 200 users, 5 each,
/// with project priorities 1 to 6 in turn (no Lowest: no preemption), saturate
/// it through the ticket draws and run for ten minutes; then ~5,000 slots free.
fn build_techila() -> SgeeeGrid {
    eprintln!(
        "building a saturated techila grid: {N_ENGINES} engines, {N_JOBS} projects x {TASKS_PER_JOB} tasks of {N_USERS} users"
    );
    let started = Instant::now();
    let mut rng = SplitMix64::new(0x7EC_171A);
    let mut log = LogBuilder::new();
    grid_opening(&mut log, 8_192, &mut rng);
    append(
        &mut log,
        Event::PolicySet(Policy {
            algorithm: Algorithm::Techila,
            // No heartbeats in the bench: engines never time out.
            engine_timeout_ms: 7 * 24 * HOUR_MS,
            dispatches_per_run_max: 8_192,
            seed: 2026,
            ..Policy::default()
        }),
    );
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    for j in 0..N_JOBS {
        let mut spec = job_spec(&job_name(j), TASKS_PER_JOB, CATEGORIES[j % CATEGORIES.len()]);
        spec.owner = user_name(j % N_USERS);
        spec.options.project_priority = 1 + (j / N_USERS) as u32 % 6;
        let entry = append(&mut log, Event::JobSubmitted(spec));
        fold(&mut state, &entry);
    }
    let running = saturate(&mut state, &mut log, started);
    assert!(state.free_engines().next().is_none(), "the grid is saturated");
    log.at(log.time_ms + 10 * 60_000);
    eprintln!("saturated techila grid built in {:.1} s: {} running", started.elapsed().as_secs_f64(), running.len());
    let (many_freed, one_freed) = freed_many_and_one(state, log, running, 11);
    describe_steady("techila", &one_freed);
    let orders = schedule(&many_freed, &InFlight::new());
    let n = n_dispatches(&orders);
    let mut per_user: BTreeMap<&str, usize> = BTreeMap::new();
    for order in &orders {
        if let Order::Dispatch { task, .. } = order {
            let j: usize = task.job.as_str()[4..].parse().expect("job-NNNN");
            *per_user.entry(if j % N_USERS < 100 { "users 0-99" } else { "users 100-199" }).or_default() += 1;
        }
    }
    eprintln!(
        "techila fill after {N_COMPLETIONS} completions: {n} dispatches ({per_user:?}), {} orders, digest {}",
        orders.len(),
        orders_digest(&orders).to_hex()
    );
    assert!(n >= N_COMPLETIONS * 99 / 100, "the run must fill the freed slots, it made {n} dispatches");
    SgeeeGrid { many_freed, n_dispatches: n, one_freed }
}

// ---- (e) the same grid under FBSNG's scheduler ------------------------------------------

/// The grid of [`build_saturated_grid`] under `algorithm = "fbsng"`: the 1,000
/// jobs of 1,000 tasks are spread over 4 queues (qpd 1 to 4) and 2 process
/// types (one with a quota it never reaches), saturate it and run for ten
/// minutes; then ~5,000 slots free and one run fills them, moving the queue
/// and section priorities after every booking.
fn build_fbsng() -> SgeeeGrid {
    use gridfold::core::event::{FbsngPolicy, FbsngProcessType, FbsngQueue};
    eprintln!("building a saturated fbsng grid: {N_ENGINES} engines, {N_JOBS} jobs x {TASKS_PER_JOB} tasks in 4 queues");
    let started = Instant::now();
    let mut rng = SplitMix64::new(0xFB5_2026);
    let mut log = LogBuilder::new();
    grid_opening(&mut log, 8_192, &mut rng);
    let queues = (0..4)
        // No gap holds anything (the bench measures decisions, not idle slots).
        .map(|q| FbsngQueue {
            qpd: 1 + q,
            qpg: 1_000_000,
            spg: 1_000_000,
            ..gridfold::core::family::fbsng::default_queue(&format!("q{q}"))
        })
        .collect();
    let process_types = vec![
        FbsngProcessType { name: "cms".into(), quota_slots: 1_000_000, requirements: String::new() },
        FbsngProcessType { name: "atlas".into(), quota_slots: 0, requirements: String::new() },
    ];
    append(
        &mut log,
        Event::PolicySet(Policy {
            algorithm: Algorithm::Fbsng,
            engine_timeout_ms: 7 * 24 * HOUR_MS,
            dispatches_per_run_max: 8_192,
            seed: 2026,
            fbsng: FbsngPolicy { queues, process_types, min_run_interval_ms: 0 },
            ..Policy::default()
        }),
    );
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    for j in 0..N_JOBS {
        let mut spec = job_spec(&job_name(j), TASKS_PER_JOB, CATEGORIES[j % CATEGORIES.len()]);
        spec.owner = user_name(j % N_USERS);
        spec.queue = format!("q{}", j % 4);
        spec.options.process_type = if j % 2 == 0 { "cms" } else { "atlas" }.into();
        let entry = append(&mut log, Event::JobSubmitted(spec));
        fold(&mut state, &entry);
    }
    // FBSNG dispatches at most once per `min_run_interval` of log time: a
    // tick past it before each run of the saturation.
    let mut running = Vec::new();
    while state.free_engines().next().is_some() {
        log.at(log.time_ms + 5_000);
        let tick = append(&mut log, Event::Tick);
        fold(&mut state, &tick);
        let before = running.len();
        running.extend(saturate(&mut state, &mut log, started));
        assert!(running.len() > before, "every run dispatches until the grid is full");
    }
    log.at(log.time_ms + 10 * 60_000);
    eprintln!("saturated fbsng grid built in {:.1} s: {} running", started.elapsed().as_secs_f64(), running.len());
    let (many_freed, one_freed) = freed_many_and_one(state, log, running, 13);
    describe_steady("fbsng", &one_freed);
    let orders = schedule(&many_freed, &InFlight::new());
    let n = n_dispatches(&orders);
    eprintln!("fbsng fill after {N_COMPLETIONS} completions: {n} dispatches, {} orders, digest {}", orders.len(), orders_digest(&orders).to_hex());
    assert!(n >= N_COMPLETIONS * 99 / 100, "the run must fill the freed slots, it made {n} dispatches");
    SgeeeGrid { many_freed, n_dispatches: n, one_freed }
}

// ---- (e2) CiGri: campaigns over clusters, affinity, a test campaign ------------------------

const N_CLUSTERS: usize = 10;
const N_AFFINITY_CLUSTERS: usize = 3;

/// 5,000 engines in 10 clusters (property `cluster`), the usual 1,000 jobs as
/// default campaigns of 200 users, the first [`N_AFFINITY_CLUSTERS`] users
/// each with affinity for one cluster, and one test campaign; saturated, then
/// 5,000 completions.
fn build_cigri() -> SgeeeGrid {
    use gridfold::core::event::{CampaignType, CigriAffinity, CigriPolicy};
    eprintln!("building a saturated cigri grid: {N_ENGINES} engines in {N_CLUSTERS} clusters, {N_JOBS} campaigns x {TASKS_PER_JOB} tasks");
    let started = Instant::now();
    let mut rng = SplitMix64::new(0xC161_2026);
    let mut log = LogBuilder::new();
    append(
        &mut log,
        Event::PolicySet(Policy {
            algorithm: Algorithm::Cigri,
            engine_timeout_ms: 7 * 24 * HOUR_MS,
            dispatches_per_run_max: 8_192,
            seed: 2026,
            cigri: CigriPolicy {
                affinity: (0..N_AFFINITY_CLUSTERS)
                    .map(|c| CigriAffinity { user: user_name(c), cluster: format!("c{c}") })
                    .collect(),
                finalize_copies_max: 0,
                ..CigriPolicy::default()
            },
            ..Policy::default()
        }),
    );
    for e in 0..N_ENGINES {
        let (slots, mut props) = engine_props(&mut rng);
        props.custom.insert("cluster".to_string(), format!("c{}", e % N_CLUSTERS));
        append(&mut log, Event::EngineLoggedIn { engine: engine_id(&engine_name(e)), slots, props });
    }
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    for j in 0..N_JOBS {
        let mut spec = job_spec(&job_name(j), TASKS_PER_JOB, CATEGORIES[j % CATEGORIES.len()]);
        spec.owner = user_name(j % N_USERS);
        if j == N_JOBS / 2 {
            spec.options.campaign = CampaignType::Test;
        }
        let entry = append(&mut log, Event::JobSubmitted(spec));
        fold(&mut state, &entry);
    }
    let running = saturate(&mut state, &mut log, started);
    log.at(log.time_ms + 10 * 60_000);
    eprintln!("saturated cigri grid built in {:.1} s: {} running", started.elapsed().as_secs_f64(), running.len());
    let (many_freed, one_freed) = freed_many_and_one(state, log, running, 17);
    describe_steady("cigri", &one_freed);
    let timed = Instant::now();
    let orders = schedule(&many_freed, &InFlight::new());
    let n = n_dispatches(&orders);
    eprintln!(
        "cigri fill after {N_COMPLETIONS} completions: {n} dispatches, {} orders in {:.3} s (one run, untimed by criterion), digest {}",
        orders.len(),
        timed.elapsed().as_secs_f64(),
        orders_digest(&orders).to_hex()
    );
    assert!(n >= N_COMPLETIONS * 99 / 100, "the run must fill the freed slots, it made {n} dispatches");
    SgeeeGrid { many_freed, n_dispatches: n, one_freed }
}

// ---- (f) parallel tasks and reservations (Grid Engine's resource side) -------------------

/// Tasks started by `orders`: plain dispatches and the masters of parallel ones.
fn n_started(orders: &[Order]) -> usize {
    orders
        .iter()
        .filter(|order| match order {
            Order::Dispatch { .. } => true,
            Order::DispatchParallel { engine, parts, .. } => parts.first().is_some_and(|master| master.engine == *engine),
            _ => false,
        })
        .count()
}

/// Dispatches until a run starts nothing, folds each batch and, half a second
/// later, every start (the master's, for a parallel task). Returns the attempts started.
fn saturate_parallel(state: &mut State, log: &mut LogBuilder, started: Instant) -> Vec<(TaskRef, u32, String)> {
    let mut running = Vec::new();
    while let Some(batch) = decide(state, &InFlight::new()) {
        let starts: Vec<(TaskRef, u32, String)> = batch
            .orders
            .iter()
            .filter_map(|order| match order {
                Order::Dispatch { task, attempt, engine, .. } => Some((task.clone(), *attempt, engine.as_str().to_string())),
                Order::DispatchParallel { task, attempt, engine, parts, .. } if parts[0].engine == *engine => {
                    Some((task.clone(), *attempt, engine.as_str().to_string()))
                }
                _ => None,
            })
            .collect();
        let entry = append(log, Event::OrderBatch(batch));
        let rejections = fold(state, &entry);
        assert!(rejections.is_empty(), "{rejections:?}");
        eprintln!("  saturating: {} started ({:.1} s)", starts.len(), started.elapsed().as_secs_f64());
        if starts.is_empty() {
            break;
        }
        running.extend(starts);
    }
    log.at(log.time_ms + 500);
    for (task, attempt, engine) in &running {
        let entry = append(log, Event::TaskStarted { task: task.clone(), attempt: *attempt, engine: engine_id(engine), remote_job: String::new() });
        fold(state, &entry);
    }
    running
}

/// The grid of [`build_saturated_grid`] under `sge-plain` with
/// `max_reservation = 8`, parallel jobs among the 1,000 (see the module docs),
/// filled, ten minutes on, with ~5,000 tasks completed.
fn build_parallel() -> SgeeeGrid {
    use gridfold::core::event::{ReservationPolicy, Span};
    eprintln!("building a saturated grid with parallel tasks and reservations: {N_ENGINES} engines, {N_JOBS} jobs x {TASKS_PER_JOB} tasks");
    let started = Instant::now();
    let mut rng = SplitMix64::new(0x9A2A_11E1);
    let mut log = LogBuilder::new();
    grid_opening(&mut log, 8_192, &mut rng);
    append(
        &mut log,
        Event::PolicySet(Policy {
            engine_timeout_ms: 7 * 24 * HOUR_MS,
            dispatches_per_run_max: 8_192,
            seed: 2026,
            reservation: ReservationPolicy { max_reservation: 8, default_duration_ms: HOUR_MS },
            ..Policy::default()
        }),
    );
    let mut state = State::new();
    for entry in &log.entries {
        fold(&mut state, entry);
    }
    for j in 0..N_JOBS {
        let mut spec = job_spec(&job_name(j), TASKS_PER_JOB, CATEGORIES[j % CATEGORIES.len()]);
        spec.owner = format!("user{}", j % 17);
        spec.priority = if j.is_multiple_of(7) { 5 } else { 0 };
        // Most jobs state a limit (reservations read it); every third does not (`default_duration`).
        spec.wall_time_limit_ms = if j % 3 == 0 { 0 } else { (1 + j as u64 % 4) * 15 * 60_000 };
        match j % 10 {
            0 => spec.slots_per_task = 4,
            5 => {
                spec.slots_per_task = 8;
                spec.options.span = Span::Site;
            }
            _ => {}
        }
        spec.options.reserve = j % 20 == 0 || j % 20 == 5;
        let entry = append(&mut log, Event::JobSubmitted(spec));
        fold(&mut state, &entry);
    }
    let running = saturate_parallel(&mut state, &mut log, started);
    log.at(log.time_ms + 10 * 60_000);
    let parallel_running = state.parallel().all().count();
    eprintln!(
        "saturated parallel grid built in {:.1} s: {} running ({parallel_running} over several engines)",
        started.elapsed().as_secs_f64(),
        running.len()
    );
    let (many_freed, one_freed) = freed_many_and_one(state, log, running, 17);
    describe_steady("parallel", &one_freed);
    let orders = schedule(&many_freed, &InFlight::new());
    let n = n_started(&orders);
    let parallel = orders.iter().filter(|order| matches!(order, Order::DispatchParallel { .. })).count();
    let wide = orders
        .iter()
        .filter(|order| matches!(order, Order::Dispatch { task, .. } if task.job.as_str()[4..].parse::<usize>().is_ok_and(|j| j % 10 == 0)))
        .count();
    eprintln!(
        "parallel fill after {N_COMPLETIONS} completions: {n} tasks started ({wide} of 4 slots on one engine, \
         {parallel} DispatchParallel orders), {} orders, digest {}",
        orders.len(),
        orders_digest(&orders).to_hex()
    );
    assert!(n >= N_COMPLETIONS / 4, "the run must start tasks in the freed slots, it started {n}");
    SgeeeGrid { many_freed, n_dispatches: n, one_freed }
}

fn bench_schedule(c: &mut Criterion) {
    let mut grids: Option<Grids> = None;
    let in_flight = InFlight::new();
    let mut group = c.benchmark_group("schedule");
    group.sample_size(30);
    // Throughput needs the count before the inputs exist; the build asserts it is ~5,000.
    group.throughput(Throughput::Elements(N_COMPLETIONS as u64));
    group.bench_function("fill_5000_freed_slots", |b| {
        let grids = grids.get_or_insert_with(build_grids);
        assert_eq!(grids.n_dispatches, N_COMPLETIONS, "throughput counts one decision per freed slot");
        b.iter(|| schedule(black_box(&grids.many_freed), &in_flight))
    });
    group.bench_function("fill_5000_tiers_and_affinity", |b| {
        let grids = grids.get_or_insert_with(build_grids);
        b.iter(|| schedule(black_box(&grids.many_freed_gridserver), &in_flight))
    });
    let mut sgeee: Option<SgeeeGrid> = None;
    group.bench_function("fill_5000_sgeee", |b| {
        let grid = sgeee.get_or_insert_with(build_sgeee);
        assert_eq!(grid.n_dispatches, N_COMPLETIONS, "throughput counts one decision per freed slot");
        b.iter(|| schedule(black_box(&grid.many_freed), &in_flight))
    });
    let mut techila: Option<SgeeeGrid> = None;
    group.bench_function("fill_5000_techila", |b| {
        let grid = techila.get_or_insert_with(build_techila);
        assert_eq!(grid.n_dispatches, N_COMPLETIONS, "throughput counts one decision per freed slot");
        b.iter(|| schedule(black_box(&grid.many_freed), &in_flight))
    });
    let mut fbsng: Option<SgeeeGrid> = None;
    group.bench_function("fill_5000_fbsng", |b| {
        let grid = fbsng.get_or_insert_with(build_fbsng);
        assert_eq!(grid.n_dispatches, N_COMPLETIONS, "throughput counts one decision per freed slot");
        b.iter(|| schedule(black_box(&grid.many_freed), &in_flight))
    });
    let mut cigri: Option<SgeeeGrid> = None;
    group.bench_function("fill_5000_cigri", |b| {
        let grid = cigri.get_or_insert_with(build_cigri);
        assert_eq!(grid.n_dispatches, N_COMPLETIONS, "throughput counts one decision per freed slot");
        b.iter(|| schedule(black_box(&grid.many_freed), &in_flight))
    });
    let mut parallel: Option<SgeeeGrid> = None;
    group.bench_function("fill_5000_parallel", |b| {
        // Its decisions are fewer than the freed slots (a parallel task takes
        // several): the builder prints them; docs/performance.md divides.
        let grid = parallel.get_or_insert_with(build_parallel);
        b.iter(|| schedule(black_box(&grid.many_freed), &in_flight))
    });
    group.throughput(Throughput::Elements(1));
    group.bench_function("steady_one_completion", |b| {
        let grids = grids.get_or_insert_with(build_grids);
        b.iter(|| schedule(black_box(&grids.one_freed), &in_flight))
    });
    let steady = [
        ("sgeee", &mut sgeee, build_sgeee as fn() -> SgeeeGrid),
        ("techila", &mut techila, build_techila),
        ("fbsng", &mut fbsng, build_fbsng),
        ("cigri", &mut cigri, build_cigri),
        ("parallel", &mut parallel, build_parallel),
    ];
    for (family, grid, build) in steady {
        group.bench_function(format!("steady_one_completion_{family}"), |b| {
            let grid = grid.get_or_insert_with(build);
            b.iter(|| schedule(black_box(&grid.one_freed), &in_flight))
        });
    }
    group.finish();
}

/// The digest of a whole state (`gridfold stat --state-digest`, a replay's
/// summary): a serialisation of the state, paid on the projector's loop when
/// asked for, which is why `stat` computes it only then.
fn bench_state(c: &mut Criterion) {
    let mut saturated: Option<State> = None;
    let mut group = c.benchmark_group("state");
    group.sample_size(10);
    group.throughput(Throughput::Elements(1));
    group.bench_function("digest_1m_tasks", |b| {
        let state = saturated.get_or_insert_with(|| build_saturated_grid(false).0);
        assert_eq!(state.jobs().map(|job| u64::from(job.n_tasks())).sum::<u64>(), N_JOBS as u64 * u64::from(TASKS_PER_JOB), "a million tasks");
        b.iter(|| black_box(&*state).state_digest())
    });
    // The state a long history leaves: what a grid that has run for a while holds.
    let mut folded: Option<State> = None;
    group.bench_function("digest_after_history_1m", |b| {
        let state = folded.get_or_insert_with(|| {
            let mut state = State::new();
            for entry in &build_history() {
                fold(&mut state, entry);
            }
            eprintln!("  after the history: {} jobs, {} dispatches, {} tasks done", state.jobs().len(), state.totals.dispatches, state.totals.tasks_done);
            state
        });
        b.iter(|| black_box(&*state).state_digest())
    });
    group.finish();
}

/// One run order as the projector delivers it: a task of `render` with a
/// realistic command line and parameters.
fn run_delivery(engine: &EngineId, n: usize) -> gridfold::wire::delivery::Delivery {
    use gridfold::core::ids::{JobId, Seq};
    use gridfold::wire::delivery::{Delivery, DeliveryKind, RunTask};
    Delivery {
        id: Delivery::id_for(Seq(1_000_000), n),
        batch_seq: Seq(1_000_000),
        engine: engine.clone(),
        epoch: 999_000,
        kind: DeliveryKind::Run(RunTask {
            task: TaskRef::new(JobId::new("render-2024-q3").unwrap(), n as u32),
            attempt: 1,
            argv: vec!["render".into(), format!("--frame={n}"), "--scene=intro".into()],
            params: [("scene".to_string(), "intro".to_string()), ("quality".to_string(), "high".to_string())].into(),
            wall_time_limit_ms: 3_600_000,
            slots: 1,
            root_library: None,
            output_bytes_max: 16 << 20,
            work_dir_retention_ms: 86_400_000,
            nodes: Vec::new(),
            companion: false,
            companion_argv: Vec::new(),
        }),
    }
}

/// Sealing deliveries (the projector, per message) and checking them (the
/// engine: decode, find the seal, verify it under a registered key), for one
/// delivery alone and for 64 joined in one message, per delivery: the cost
/// sealed deliveries add to each task.
fn bench_delivery_seal(c: &mut Criterion) {
    use gridfold::core::trust::KeyRing;
    use gridfold::projector::key::ProjectorKey;
    use gridfold::wire::delivery::{decode_sealed_deliveries, delivery_signed_message};
    let key = ProjectorKey::from_seed([0x5e; 32]);
    let mut ring = KeyRing::new();
    ring.register(&key.public(), "bench").unwrap();
    let engine = engine_id("node-0001");
    let check = |ring: &KeyRing, bytes: &[u8]| {
        let (deliveries, seal) = decode_sealed_deliveries(&engine, bytes).unwrap();
        let seal = seal.expect("sealed");
        let message = delivery_signed_message(bytes, &seal).expect("the seal is last");
        ring.check(&seal, &message).unwrap();
        deliveries.len()
    };
    let mut group = c.benchmark_group("delivery");
    for n in [1usize, 64] {
        let deliveries: Vec<_> = (0..n).map(|i| run_delivery(&engine, i)).collect();
        let messages = key.delivery_messages(&deliveries);
        assert_eq!(messages.len(), 1);
        let bytes = messages[0].payload.clone();
        assert_eq!(check(&ring, &bytes), n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("seal_{n}"), |b| b.iter(|| black_box(key.delivery_messages(black_box(&deliveries)))));
        group.bench_function(format!("check_{n}"), |b| b.iter(|| black_box(check(&ring, black_box(&bytes)))));
    }
    group.finish();
}

criterion_group!(benches, bench_fold, bench_schedule, bench_state, bench_delivery_seal);
criterion_main!(benches);
