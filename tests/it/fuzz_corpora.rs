//! The fuzz corpora under `fuzz/corpus/<target>/`, replayed as ordinary tests:
//! every file of a target's corpus goes through that target's body in
//! `crate::fuzzing`, the very code the fuzzer runs, so CI replays every seed
//! and every crash minimised into a corpus. A test fails naming each input that
//! panicked, with the panic's message and location. See `docs/fuzzing.md`.
//!
//! Some corpus files are built here: the known inputs (`known-*`, each with the
//! reason it is kept) and steps from the fuzz targets' base history (`base-*`),
//! which `the_known_inputs_are_in_the_corpora` requires in place, and seeds
//! taken from `replay/*.jsonl` and its expressions (`replay-*`).
//! `UPDATE_CORPUS=1 cargo test --release --test it fuzz_corpora` writes them all.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;

use gridfold::core::event::{Envelope, Event, Order, OrderBatch, Origin, Payload, TaskConditions};
use gridfold::core::expr;
use gridfold::core::ids::{EngineId, JobId, Seq, TaskRef};
use gridfold::core::testkit::job_spec;
use crate::fuzzing::{self, BASE_HISTORY, envelope_input};
use gridfold::projector::record::recorder_key;
use gridfold::wire;
use gridfold::wire::history::{parse_history, write_history_line};

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

thread_local! {
    /// Set while a corpus file runs: its panic is recorded, not printed.
    static CAPTURING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Where the last recorded panic on this thread happened, and what it said.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records the panics of corpus files with their locations (for the failure
/// list, which says it all); every other panic is printed as usual.
fn record_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default_hook = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !CAPTURING.with(|capturing| capturing.get()) {
                return default_hook(info);
            }
            let location = info
                .location()
                .map_or_else(|| "?".to_string(), |l| l.to_string());
            let message = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_string());
            LAST_PANIC.with(|last| {
                *last.borrow_mut() = Some(format!("panicked at {location}: {message}"))
            });
        }));
    });
}

/// Runs every file of `target`'s corpus through `body`; fails if any panicked
/// (naming each), or if fewer than `files_min` files were found.
fn replay_corpus(target: &str, body: fn(&[u8]), files_min: usize) {
    record_panics();
    let dir = corpus_dir(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    let mut failures = String::new();
    let mut n_failed = 0;
    for path in &paths {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        CAPTURING.with(|capturing| capturing.set(true));
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| body(&bytes)));
        CAPTURING.with(|capturing| capturing.set(false));
        if outcome.is_err() {
            n_failed += 1;
            let what = LAST_PANIC
                .with(|last| last.borrow_mut().take())
                .unwrap_or_default();
            let shown: String = what.chars().take(600).collect();
            writeln!(
                failures,
                "  {}: {shown}",
                path.file_name().unwrap().to_string_lossy()
            )
            .unwrap();
        }
    }
    assert!(
        paths.len() >= files_min,
        "{}: {} files, expected at least {files_min}: is the corpus there?",
        dir.display(),
        paths.len()
    );
    assert!(
        n_failed == 0,
        "{n_failed} of {} inputs of fuzz/corpus/{target} panicked:\n{failures}",
        paths.len()
    );
}

#[test]
fn the_envelope_then_fold_corpus_replays_without_a_panic() {
    replay_corpus("envelope_then_fold", fuzzing::envelope_then_fold, 100);
}

#[test]
fn the_history_file_corpus_replays_without_a_panic() {
    replay_corpus("history_file", fuzzing::history_file, 20);
}

#[test]
fn the_requirements_corpus_replays_without_a_panic() {
    replay_corpus("requirements", fuzzing::requirements, 25);
}

#[test]
fn the_job_file_corpus_replays_without_a_panic() {
    replay_corpus("job_file", fuzzing::job_file, 10);
}

// ---------------------------------------------------------------------------
// The known inputs: each reproduces a bug found, or pins a limit.

/// 200 conditions `||`-joined, 3,886 bytes: within `SOURCE_BYTES_MAX` and `NODES_MAX` alone.
fn poison_requirements() -> String {
    (0..200)
        .map(|i| format!("memory_mb >= {i}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// 100 conditions `||`-joined, 1,486 bytes: within the limits alone; joined to
/// [`poison_requirements`] by the fold as `(req) && (disc)`, past both.
fn poison_discriminator() -> String {
    (0..100)
        .map(|i| format!("cores >= {i}"))
        .collect::<Vec<_>>()
        .join(" || ")
}

/// A requirement nested `levels` parentheses deep.
fn nested(levels: usize) -> String {
    format!(
        "{}os == \"linux\"{}",
        "(".repeat(levels),
        ")".repeat(levels)
    )
}

/// A requirement negated `levels` times: at the depth limit when `levels` is `DEPTH_MAX`.
fn negated(levels: usize) -> String {
    format!("{}has_gpu", "!".repeat(levels))
}

#[test]
fn the_poison_pill_is_sized_against_the_parser_limits() {
    let (requirements, discriminator) = (poison_requirements(), poison_discriminator());
    assert_eq!((requirements.len(), discriminator.len()), (3_886, 1_486));
    assert!(expr::parse(&requirements).is_ok() && expr::parse(&discriminator).is_ok());
    let joined = format!("({requirements}) && ({discriminator})");
    assert!(joined.len() > expr::SOURCE_BYTES_MAX);
    let nodes = expr::parse(&requirements).unwrap().node_count()
        + expr::parse(&discriminator).unwrap().node_count()
        + 1;
    assert!(nodes > expr::NODES_MAX);
    assert!(expr::parse(&joined).is_err());

    assert!(expr::parse(&nested(expr::DEPTH_MAX)).is_ok());
    assert!(expr::parse(&nested(expr::DEPTH_MAX + 1)).is_err());
    assert!(expr::parse(&negated(expr::DEPTH_MAX)).is_ok());
    assert!(
        expr::parse(&format!(
            "({}) && (site == \"lyon\")",
            negated(expr::DEPTH_MAX)
        ))
        .is_err()
    );
}

fn envelope(event: Event) -> Envelope {
    Envelope {
        id: [0x5a; 16],
        source: "fuzz".into(),
        event,
    }
}

fn job(id: &str) -> JobId {
    JobId::new(id).unwrap()
}

fn engine(id: &str) -> EngineId {
    EngineId::new(id).unwrap()
}

fn task(job_id: &str, index: u32) -> TaskRef {
    TaskRef::new(job(job_id), index)
}

/// A job with a discriminator on its task 0.
fn job_with_discriminator(id: &str, requirements: &str, discriminator: &str) -> Event {
    let mut spec = job_spec(id, 2, requirements);
    spec.task_conditions.insert(
        0,
        TaskConditions {
            discriminator: discriminator.into(),
            ..Default::default()
        },
    );
    Event::JobSubmitted(spec)
}

/// The publisher indexes of `fuzzing::PUBLISHERS` used below.
const CLIENT: usize = 0;
const OPERATOR: usize = 1;
const PROJECTOR: usize = 2;
const TICKER: usize = 3;
const ENGINE_E1: usize = 4;
const ENGINE_E2: usize = 5;
const ENGINE_E3: usize = 6;
const OTHER_USER: usize = 7;

/// The known log messages: (file stem, subject index, event). Each becomes an
/// `envelope_then_fold` input and a `history_file` input (the base history and
/// then the message).
fn known_messages() -> Vec<(&'static str, usize, Event)> {
    let mut max_attempts = job_spec("many-attempts", 1, "");
    max_attempts.max_attempts = 70_000;
    let orders = OrderBatch {
        based_on_seq: Seq(12),
        algorithm: "sge-plain".into(),
        algorithm_version: 3,
        orders: vec![Order::Dispatch {
            task: task("j", 3),
            attempt: 1,
            engine: engine("e2"),
            epoch: 4,
        }],
    };
    vec![
        // Panics in the fold: `(req) && (disc)` is refused by the parser.
        (
            "known-poison-pill-joined-expression-too-long",
            CLIENT,
            job_with_discriminator("poison", &poison_requirements(), &poison_discriminator()),
        ),
        // The same, by depth: 64 `!` alone is at the limit; `(` around it is past it.
        (
            "known-poison-pill-joined-expression-too-deep",
            CLIENT,
            job_with_discriminator("deep", &negated(expr::DEPTH_MAX), "site == \"lyon\""),
        ),
        // A task's failure count is a u16: 70,000 attempts cannot all be counted.
        (
            "known-max-attempts-70000",
            CLIENT,
            Event::JobSubmitted(max_attempts),
        ),
        // Only the projector's subject may carry orders.
        (
            "known-order-batch-on-client-subject",
            CLIENT,
            Event::OrderBatch(orders.clone()),
        ),
        (
            "known-order-batch-on-engine-subject",
            ENGINE_E2,
            Event::OrderBatch(orders.clone()),
        ),
        // On the projector's subject but not sealed: a forgery, refused whole.
        (
            "known-order-batch-forged-unsealed",
            PROJECTOR,
            Event::OrderBatch(orders.clone()),
        ),
        // Sealed by the registered key: the dispatch applies.
        ("known-order-batch-sealed", PROJECTOR, Event::OrderBatch(orders)),
        // An operator revokes the only registered key, then registers another.
        (
            "known-projector-key-revoked",
            OPERATOR,
            Event::ProjectorKeyRevoked {
                key: recorder_key().public(),
            },
        ),
        (
            "known-projector-key-registered",
            OPERATOR,
            Event::ProjectorKeyRegistered {
                key: [0x42; 32],
                name: "standby".into(),
            },
        ),
        // Accepted by the fold, but the category keeps the printed form, which is
        // past the parser's limits: the state's snapshot no longer loads.
        (
            "known-requirement-printed-too-deep",
            CLIENT,
            Event::JobSubmitted(job_spec(
                "printed-deep",
                1,
                &format!("{}a > 0", "!".repeat(expr::DEPTH_MAX)),
            )),
        ),
        (
            "known-requirement-printed-too-long",
            CLIENT,
            Event::JobSubmitted(job_spec(
                "printed-long",
                1,
                &vec!["aaaaaaaaaaaa>1"; 250].join("||"),
            )),
        ),
        // At the depth limit, with a discriminator to join it to.
        (
            "known-deeply-nested-requirement",
            CLIENT,
            job_with_discriminator("nested", &nested(expr::DEPTH_MAX), "site == \"lyon\""),
        ),
    ]
}

/// Messages that take the base history further, one step each: reports of its
/// live attempts, logins and logouts, policy and job changes.
fn base_messages() -> Vec<(&'static str, usize, Event)> {
    use gridfold::core::event::{EngineLoad, FailureKind, LibraryRef, Policy};
    let library = LibraryRef::new("render-lib", "2.1");
    let policy = Policy {
        engine_tiers: vec!["type=blade".into(), "site=bern".into()],
        ..Default::default()
    };
    let mut added = BTreeMap::new();
    added.insert(
        0,
        TaskConditions {
            discriminator: "site == \"bern\"".into(),
            queue_jump: true,
            ..Default::default()
        },
    );
    vec![
        (
            "base-j0-completed",
            ENGINE_E1,
            Event::TaskCompleted {
                task: task("j", 0),
                attempt: 1,
                engine: engine("e1"),
                exit_code: 0,
                cpu_ms: 900,
                wall_ms: 1_000,
                result: b"ok".to_vec(),
                stored: Default::default(),
            },
        ),
        (
            "base-j0-failed",
            ENGINE_E1,
            Event::TaskFailed {
                task: task("j", 0),
                attempt: 1,
                engine: engine("e1"),
                exit_code: None,
                kind: FailureKind::Signalled,
                error_tail: "killed".into(),
                stored: Default::default(),
            },
        ),
        (
            "base-j2-started",
            ENGINE_E1,
            Event::TaskStarted {
                task: task("j", 2),
                attempt: 1,
                engine: engine("e1"),
                remote_job: String::new(),
            },
        ),
        (
            "base-e1-heartbeat",
            ENGINE_E1,
            Event::EngineHeartbeat {
                engine: engine("e1"),
                load: EngineLoad {
                    load_per_core_milli: 1_500,
                    memory_free_mb: 100,
                    values_milli: Default::default(),
                },
            },
        ),
        (
            "base-e1-logged-out",
            ENGINE_E1,
            Event::EngineLoggedOut {
                engine: engine("e1"),
            },
        ),
        (
            "base-e1-logged-in-again",
            ENGINE_E1,
            Event::EngineLoggedIn {
                engine: engine("e1"),
                slots: 1,
                props: Default::default(),
            },
        ),
        (
            "base-e2-sync-failed",
            ENGINE_E2,
            Event::LibrarySyncFailed {
                engine: engine("e2"),
                library: library.clone(),
                error: "disk full".into(),
            },
        ),
        (
            "base-e3-logged-in",
            ENGINE_E3,
            Event::EngineLoggedIn {
                engine: engine("e3"),
                slots: 4,
                props: gridfold::core::testkit::linux_props("bern", 65_536),
            },
        ),
        (
            "base-e3-synced-forged",
            ENGINE_E1,
            Event::LibrarySynced {
                engine: engine("e3"),
                library,
            },
        ),
        (
            "base-j-cancelled",
            CLIENT,
            Event::JobCancelled {
                job: job("j"),
                reason: "fuzz".into(),
            },
        ),
        (
            "base-k-priority",
            OTHER_USER,
            Event::JobPriorityChanged {
                job: job("k"),
                priority: -3,
            },
        ),
        (
            "base-j-tasks-added",
            CLIENT,
            Event::TasksAdded {
                job: job("j"),
                tasks: vec![BTreeMap::new(), BTreeMap::new()],
                conditions: added,
            },
        ),
        ("base-policy", OPERATOR, Event::PolicySet(policy)),
        (
            "base-blacklists-cleared",
            OPERATOR,
            Event::BlacklistsCleared {
                engine: Some(engine("e2")),
            },
        ),
        ("base-tick", TICKER, Event::Tick),
        (
            "base-orders-requeue",
            PROJECTOR,
            Event::OrderBatch(OrderBatch {
                based_on_seq: Seq(12),
                algorithm: "sge-plain".into(),
                algorithm_version: 3,
                orders: vec![Order::Requeue {
                    task: task("j", 2),
                    attempt: 1,
                    engine: engine("e1"),
                    reason: gridfold::core::event::RequeueReason::DispatchTimeout,
                }],
            }),
        ),
    ]
}

/// One `envelope_then_fold` input per line of `replay/*.jsonl` (not the
/// longest), on the subject of its publisher class.
fn replay_messages() -> Vec<(String, Vec<u8>)> {
    let mut inputs = Vec::new();
    for path in replay_histories() {
        let text = std::fs::read_to_string(&path).unwrap();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        for line in parse_history(&text).unwrap() {
            let entry = line.to_entry();
            let subject_idx = match &entry.origin {
                Origin::User(user) if user.as_str() == "alice" => CLIENT,
                Origin::User(_) | Origin::Unknown => OTHER_USER,
                Origin::Projector => PROJECTOR,
                Origin::Ticker => TICKER,
                Origin::Operator => OPERATOR,
                Origin::Engine(id) if id.as_str() == "e2" => ENGINE_E2,
                Origin::Engine(_) => ENGINE_E1,
            };
            inputs.push((
                format!("replay-{stem}-{}", line.seq),
                envelope_input(subject_idx, 0, &line.bytes()),
            ));
        }
    }
    inputs
}

/// The recorded histories small enough to seed the fuzzers (a long seed slows
/// every mutation of the corpus).
fn replay_histories() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("replay");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .filter(|path| std::fs::metadata(path).unwrap().len() <= 16 * 1024)
        .collect();
    paths.sort();
    paths
}

/// The requirements expressions of the recorded histories' jobs.
fn replay_requirements() -> Vec<String> {
    let mut found = std::collections::BTreeSet::new();
    for path in replay_histories() {
        let text = std::fs::read_to_string(&path).unwrap();
        for line in parse_history(&text).unwrap() {
            let Payload::Event(envelope) = line.to_entry().payload else {
                continue;
            };
            if let Event::JobSubmitted(spec) = envelope.event {
                found.insert(spec.requirements.clone());
                for conditions in spec.task_conditions.values() {
                    found.insert(conditions.discriminator.clone());
                    found.extend(conditions.affinity.iter().map(|p| p.when.clone()));
                }
                found.extend(spec.options.affinity.iter().map(|p| p.when.clone()));
            }
        }
    }
    found
        .into_iter()
        .filter(|source| !source.is_empty())
        .collect()
}

/// A job file of one counted task with `extra` on top.
fn job_file_with(extra: &str) -> String {
    format!("id = \"fuzz\"\ntasks = 2\n{extra}\n[task]\nargv = [\"x\", \"{{index}}\"]\n")
}

/// Every generated file: (target, file name, bytes).
fn generated_seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut seeds = Vec::new();
    for (stem, subject_idx, event) in known_messages().into_iter().chain(base_messages()) {
        // The projector's batches sealed by the base history's registered key, so
        // the fold goes past the seal; the `forged` ones are the exceptions.
        let message = if subject_idx == PROJECTOR && !stem.contains("forged") {
            recorder_key().seal(&envelope(event))
        } else {
            wire::encode(&envelope(event))
        };
        seeds.push((
            "envelope_then_fold",
            stem.to_string(),
            envelope_input(subject_idx, 0, &message),
        ));
        let subject = fuzzing::subject_of(envelope_input(subject_idx, 0, b"")[0], &message);
        let line = write_history_line(Seq(13), fuzzing::BASE_TIME_MS + 1_000, &subject, &message);
        seeds.push((
            "history_file",
            format!("{stem}.jsonl"),
            format!("{BASE_HISTORY}{line}\n").into_bytes(),
        ));
    }
    // Late steps fire the base history's timers: e1 and e2 lost, j/2's dispatch requeued.
    let tick = wire::encode(&envelope(Event::Tick));
    seeds.push((
        "envelope_then_fold",
        "base-tick-an-hour-later".into(),
        envelope_input(TICKER, 31, &tick),
    ));
    seeds.push((
        "envelope_then_fold",
        "base-tick-a-minute-later".into(),
        envelope_input(TICKER, 1, &tick),
    ));
    for (name, input) in replay_messages() {
        seeds.push(("envelope_then_fold", name, input));
    }
    seeds.push((
        "history_file",
        "base-history.jsonl".into(),
        BASE_HISTORY.as_bytes().to_vec(),
    ));
    // The scheduler declares e1 lost and, in the same batch, orders redundant
    // copies of the tasks e1 held (past their task max time), which the fold
    // then refuses (NoCopyWanted): the redundancy stage does not skip lost engines.
    let short_max_time =
        BASE_HISTORY.replace("\"task_max_time_ms\":3600000", "\"task_max_time_ms\":60000");
    assert_ne!(short_max_time, BASE_HISTORY);
    let late_tick = write_history_line(
        Seq(13),
        fuzzing::BASE_TIME_MS + 61_000,
        wire::TICK_SUBJECT,
        &tick,
    );
    seeds.push((
        "history_file",
        "known-reschedule-of-a-lost-engines-tasks.jsonl".into(),
        format!("{short_max_time}{late_tick}\n").into_bytes(),
    ));
    for path in replay_histories() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        seeds.push((
            "history_file",
            format!("replay-{name}"),
            std::fs::read(&path).unwrap(),
        ));
    }

    let known_requirements = [
        ("known-poison-requirements", poison_requirements()),
        ("known-poison-discriminator", poison_discriminator()),
        (
            "known-poison-joined",
            format!(
                "({}) && ({})",
                poison_requirements(),
                poison_discriminator()
            ),
        ),
        ("known-nested-64", nested(expr::DEPTH_MAX)),
        ("known-nested-65", nested(expr::DEPTH_MAX + 1)),
        ("known-open-parens-4096", "(".repeat(expr::SOURCE_BYTES_MAX)),
        ("known-negated-64", negated(expr::DEPTH_MAX)),
        (
            "known-multibyte-at-length-limit",
            format!("{}é", "a".repeat(expr::SOURCE_BYTES_MAX - 1)),
        ),
    ];
    for (name, source) in known_requirements {
        seeds.push(("requirements", name.to_string(), source.into_bytes()));
    }
    for (requirement_idx, source) in replay_requirements().into_iter().enumerate() {
        seeds.push((
            "requirements",
            format!("replay-{requirement_idx:02}"),
            source.into_bytes(),
        ));
    }

    let known_job_files = [
        (
            "known-multibyte-at-error-position.toml",
            job_file_with(&format!(
                "requirements = '{}é'",
                "a".repeat(expr::SOURCE_BYTES_MAX - 1)
            )),
        ),
        (
            "known-max-attempts-70000.toml",
            job_file_with("max_attempts = 70000"),
        ),
        (
            "known-poison-pill.toml",
            format!(
                "id = \"poison\"\nrequirements = '{}'\n\n[task]\nargv = [\"x\"]\n\n[[task_list]]\ndiscriminator = '{}'\n\n[[task_list]]\n",
                poison_requirements(),
                poison_discriminator()
            ),
        ),
        (
            "known-deeply-nested-requirement.toml",
            job_file_with(&format!("requirements = '{}'", nested(expr::DEPTH_MAX))),
        ),
        (
            "known-too-deeply-nested-requirement.toml",
            job_file_with(&format!("requirements = '{}'", nested(expr::DEPTH_MAX + 1))),
        ),
    ];
    for (name, text) in known_job_files {
        seeds.push(("job_file", name.to_string(), text.into_bytes()));
    }
    seeds
}

#[test]
fn the_known_inputs_are_in_the_corpora() {
    let update = std::env::var_os("UPDATE_CORPUS").is_some();
    let mut missing = Vec::new();
    let seeds = generated_seeds();
    // The replay-* seeds follow replay/, which changes on its own; they are written, not compared.
    let known = |name: &str| name.starts_with("known-") || name.starts_with("base-");
    for (target, name, bytes) in &seeds {
        let path = corpus_dir(target).join(name);
        if update {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        } else if known(name) && std::fs::read(&path).ok().as_ref() != Some(bytes) {
            missing.push(format!("{target}/{name}"));
        }
    }
    let n_known = seeds.iter().filter(|(_, name, _)| known(name)).count();
    assert!(n_known >= 40, "only {n_known} known inputs");
    assert!(
        missing.is_empty(),
        "{} of {n_known} known corpus files are missing or differ (UPDATE_CORPUS=1 writes them):\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}
