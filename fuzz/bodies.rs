//! The bodies of the fuzz targets under `fuzz/` (run with cargo-fuzz): each
//! target includes this file, and so does the integration test that replays
//! every corpus file (`tests/it/fuzz_corpora.rs`), so CI runs the very code
//! the fuzzer ran, and the library ships none of it. `docs/fuzzing.md` says
//! how to run them.
//!
//! Each body takes arbitrary bytes and returns normally on every input; a panic
//! is a finding. What each one holds the code to:
//!
//! - [`envelope_then_fold`]: the first byte picks a publisher ([`PUBLISHERS`]) and a
//!   log time; the rest is the message, decoded exactly as the projector decodes a
//!   log message ([`wire::entry_from_log`]). The entry is folded into the state of
//!   a small fixed history ([`BASE_HISTORY`]: engines logged in, two jobs, a batch
//!   of orders, a task running, a failure); then `schedule` runs and its batch is
//!   folded back, as the projector does. The fold must not panic on anything
//!   decodable (a poison pill must not stop the grid),
//!   `State::check_invariants` must hold after every entry, and the scheduler's
//!   own orders, folded straight back, must all apply; a snapshot of the
//!   final state must load back to the same state digest.
//! - [`history_file`]: the text of a history file (`wire::history`). A file that
//!   parses is folded entry by entry from an empty state under the same checks;
//!   each line, exported again with `write_history_line`, must read back to the
//!   same entry, and the final state's snapshot loads back. A file that does
//!   not parse names a line of the file.
//! - [`requirements`]: `core::expr::parse`. A parsed expression prints
//!   (`Display`) to a form that `expr::parse_printed` (how a snapshot reads a
//!   category back) parses to the same expression, and that prints the same; it evaluates on a few engines. A refused one is positioned inside the
//!   source and renders.
//! - [`job_file`]: the job-file reader (`files::jobfile::parse_job`). A refused file
//!   gets a `job.toml:LINE: message` error with LINE a line of the file; an
//!   accepted one is submitted as `gridfold submit` would (encoded, decoded from
//!   the log, folded into the fixed history's state, scheduled).
//!
//! Not here: the fuzzing engine and any IO. Everything runs in memory, with no
//! clock and no randomness of its own (a job file without an `id` gets a
//! generated one, as on the command line).

// Each fuzz target calls one body; the corpora's test calls them all.
#![allow(dead_code)]

use std::sync::OnceLock;

use gridfold::core::event::{EngineProps, Entry, Envelope, Event, Origin, Payload};
use gridfold::core::expr;
use gridfold::core::fold::fold;
use gridfold::core::ids::Seq;
use gridfold::core::schedule::{InFlight, decide};
use gridfold::core::reject::{Rejection, SealProblem};
use gridfold::core::state::State;
use gridfold::projector::record::recorder_key;
use gridfold::wire;
use gridfold::wire::history::{parse_history, write_history_line};

/// The publishers [`envelope_then_fold`] publishes as, picked by the first
/// input byte modulo their number: each publisher class (a user, an operator,
/// the projector, a ticker, an engine of the history, another, an engine new to
/// it, another user), each by its subject or the prefix of its subjects. An
/// event goes on its publisher's prefix with its own kind ([`subject_of`]), so
/// the fold judges what it says, not only where it was stored.
pub const PUBLISHERS: [&str; 8] = [
    "gridfold.ev.user.alice.",
    "gridfold.ev.op.",
    wire::ORDERS_SUBJECT,
    wire::TICK_SUBJECT,
    "gridfold.ev.engine.e1.",
    "gridfold.ev.engine.e2.",
    "gridfold.ev.engine.e3.",
    "gridfold.ev.user.bob.",
];

/// The log time of [`BASE_HISTORY`]'s first entry.
pub const BASE_TIME_MS: u64 = 1_700_000_000_000;

/// Log time between two [`envelope_then_fold`] time steps: the history's policy
/// loses an engine after 30 s and requeues a dispatch after 60 s, so later steps
/// fire those timers.
pub const TIME_STEP_MS: u64 = 60_000;

/// The history every [`envelope_then_fold`] input is folded after. It folds
/// without a rejection (a unit test says so): two engines (`e1`, a blade in
/// lyon with 2 slots and the library; `e2` in bern), a library, job `j` (4
/// tasks, black- and greylisting, redundancy, a discriminator, a queue jump, a
/// task dependency, a task max time of an hour, past the last time step) and
/// job `k` (a task list that depends on `j` and roots on the
/// library), a batch dispatching three tasks, one of them started, one failed.
/// Its first entry registers the replay recorder's key
/// ([`recorder_key`]), which seals the batch, as in a recorded history;
/// [`schedule_and_fold_back`] seals with it too.
pub const BASE_HISTORY: &str = r#"# The fixed history of the envelope_then_fold fuzz target (src/fuzzing.rs).
{"seq":1,"time_ms":1700000000000,"subject":"gridfold.ev.op.keys","envelope":{"source":"operator","event":{"projector_key_registered":{"key":{"base64":"2JHnGg3PADzt0n3DQONiDMZyHf+sUm3pqOQ3PmSCY70="},"name":"replay recorder"}}}}
{"seq":2,"time_ms":1700000000000,"subject":"gridfold.ev.op.policy","envelope":{"event":{"policy_set":{"algorithm":"sge-plain","engine_timeout_ms":30000,"dispatch_timeout_ms":60000,"load_formula":{"slots_weight":1,"load_weight":0},"dispatches_per_run_max":4096,"seed":7,"engine_tiers":["type=blade"],"greylist_affinity":5,"redundancy":{"strategy_effective_percent":50,"poll_period_ms":1000,"percent_completed_strategy":true,"remaining_task_percent":10,"average_strategy":true,"average_limit_milli":2000,"std_dev_strategy":true,"std_dev_limit_milli":3000,"reschedule_first":false,"copies_per_task_max":2}}}}}
{"seq":3,"time_ms":1700000000000,"subject":"gridfold.ev.engine.e1.login","envelope":{"event":{"engine_logged_in":{"engine":"e1","slots":2,"props":{"os":"linux","arch":"x86_64","cores":4,"memory_mb":16384,"disk_mb":100000,"mflops":2000,"site":"lyon","custom":{"type":"blade","has_gpu":"yes"}}}}}}
{"seq":4,"time_ms":1700000000000,"subject":"gridfold.ev.engine.e2.login","envelope":{"event":{"engine_logged_in":{"engine":"e2","slots":1,"props":{"os":"linux","arch":"x86_64","cores":2,"memory_mb":8192,"disk_mb":50000,"mflops":1000,"site":"bern","custom":{}}}}}}
{"seq":5,"time_ms":1700000000000,"subject":"gridfold.ev.op.library_published","envelope":{"event":{"library_published":{"library":{"name":"render-lib","version":"2.1"},"size_bytes":4096,"digest_hex":"7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f"}}}}
{"seq":6,"time_ms":1700000000000,"subject":"gridfold.ev.user.alice.job.submitted","envelope":{"event":{"job_submitted":{"id":"j","owner":"alice","project":"physics","queue":"default","priority":0,"requirements":"os == \"linux\"","max_attempts":2,"wall_time_limit_ms":600000,"slots_per_task":1,"template":{"argv":["simulate","--event={index}"],"params":{}},"options":{"affinity":[{"when":"site == \"lyon\"","weight":3}],"engine_blacklisting":true,"failures_before_blacklist":1,"engine_greylisting":true,"redundant_rescheduling":true,"task_max_time_ms":3600000},"task_conditions":{"1":{"discriminator":"site == \"bern\""},"2":{"queue_jump":true},"3":{"task_affinity":[0],"depends_on":[{"job":"j","index":0}]}},"tasks":{"count":4}}}}}
{"seq":7,"time_ms":1700000000000,"subject":"gridfold.ev.op.job.submitted","envelope":{"event":{"job_submitted":{"id":"k","owner":"bob","project":"film","queue":"default","priority":5,"requirements":"","max_attempts":3,"wall_time_limit_ms":0,"slots_per_task":1,"template":{"argv":["render","{scene}"],"params":{}},"options":{"root_library":{"name":"render-lib","version":"2.1"},"depends_on_jobs":["j"],"fail_on_dependency_failure":true},"tasks":{"list":[{"scene":"intro"},{"scene":"outro"}]}}}}}
{"seq":8,"time_ms":1700000000100,"subject":"gridfold.ev.orders","envelope":{"id":"19691f6e-df76-841e-9424-c41e955154fb","source":"gridfold-projector","seal":{"signer":{"base64":"2JHnGg3PADzt0n3DQONiDMZyHf+sUm3pqOQ3PmSCY70="},"signature":{"base64":"afNYKfLXlxhJv9wIL+s4pkuS4h+wO9+cR8IQVYw9UuoT0dvty6EbxT7V2V8fO7m/zVE+x/EtDeBeNYkqE3byAQ=="}},"event":{"order_batch":{"based_on_seq":7,"algorithm":"sge-plain","algorithm_version":3,"orders":[{"dispatch":{"task":{"job":"j","index":2},"attempt":1,"engine":"e1","epoch":3}},{"dispatch":{"task":{"job":"j","index":1},"attempt":1,"engine":"e2","epoch":4}},{"dispatch":{"task":{"job":"j","index":0},"attempt":1,"engine":"e1","epoch":3}}]}}}}
{"seq":9,"time_ms":1700000000200,"subject":"gridfold.ev.engine.e1.started","envelope":{"event":{"task_started":{"task":{"job":"j","index":0},"attempt":1,"engine":"e1"}}}}
{"seq":10,"time_ms":1700000000300,"subject":"gridfold.ev.engine.e1.library_synced","envelope":{"event":{"library_synced":{"engine":"e1","library":{"name":"render-lib","version":"2.1"}}}}}
{"seq":11,"time_ms":1700000000400,"subject":"gridfold.ev.engine.e2.failed","envelope":{"event":{"task_failed":{"task":{"job":"j","index":1},"attempt":1,"engine":"e2","exit_code":3,"kind":"NON_ZERO_EXIT","error_tail":"segfault in stage 2"}}}}
{"seq":12,"time_ms":1700000000500,"subject":"gridfold.ev.tick","envelope":{"event":{"tick":{}}}}
"#;

/// The entries of [`BASE_HISTORY`].
pub fn base_entries() -> Vec<Entry> {
    parse_history(BASE_HISTORY)
        .unwrap_or_else(|error| panic!("the fuzz targets' base history does not parse: {error}"))
        .iter()
        .map(|line| line.to_entry())
        .collect()
}

/// The state after [`BASE_HISTORY`], folded once per process.
pub fn base_state() -> &'static State {
    static BASE: OnceLock<State> = OnceLock::new();
    BASE.get_or_init(|| {
        let mut state = State::new();
        for entry in base_entries() {
            fold_checked(&mut state, &entry);
        }
        state
    })
}

/// An [`envelope_then_fold`] input: `message` published by `PUBLISHERS[subject_idx]`
/// at time step `time_step` (0..32) after the base history.
pub fn envelope_input(subject_idx: usize, time_step: u8, message: &[u8]) -> Vec<u8> {
    assert!(subject_idx < PUBLISHERS.len() && time_step < 32);
    let selector = (time_step << 3) | subject_idx as u8;
    let mut input = Vec::with_capacity(1 + message.len());
    input.push(selector);
    input.extend_from_slice(message);
    input
}

/// The subject `message` is stored on by the publisher of an input's selector
/// byte (`subject_idx` of [`envelope_input`]): the publisher's own subject, or
/// its prefix and the kind of the event the message holds.
pub fn subject_of(selector: u8, message: &[u8]) -> String {
    let publisher = PUBLISHERS[usize::from(selector) % PUBLISHERS.len()];
    if !publisher.ends_with('.') {
        return publisher.to_string();
    }
    let kind = wire::decode_sealed(message).map_or("undecodable", |(envelope, _)| gridfold::core::subject::kind_of(&envelope.event));
    format!("{publisher}{kind}")
}

/// Fuzz target: one log message folded after [`BASE_HISTORY`], then scheduled.
pub fn envelope_then_fold(data: &[u8]) {
    let Some((&selector, message)) = data.split_first() else {
        return;
    };
    let subject = subject_of(selector, message);
    let time_ms = BASE_TIME_MS + 1_000 + u64::from(selector >> 3) * TIME_STEP_MS;
    let mut state = base_state().clone();
    let entry = wire::entry_from_log(Seq(state.last_seq.0 + 1), time_ms, &subject, message);
    fold_checked(&mut state, &entry);
    schedule_and_fold_back(&mut state);
    snapshot_round_trips(&state);
}

/// Fuzz target: a history file's text, folded line by line from an empty state.
pub fn history_file(data: &[u8]) {
    // `read_history_file` reads the file as UTF-8 and refuses anything else.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let lines = match parse_history(text) {
        Ok(lines) => lines,
        Err(error) => {
            let n_lines = text.lines().count();
            assert!(
                (1..=n_lines).contains(&error.line),
                "a history error names line {} of a file of {n_lines} lines: {error}",
                error.line
            );
            return;
        }
    };
    let mut state = State::new();
    for line in &lines {
        let entry = line.to_entry();
        let exported = write_history_line(line.seq, line.time_ms, &line.subject, &line.bytes());
        let read_back = parse_history(&exported).unwrap_or_else(|error| {
            panic!("an exported history line does not read back: {error}\n{exported}")
        });
        assert_eq!(
            read_back.len(),
            1,
            "one exported line is one line: {exported}"
        );
        let again = read_back[0].to_entry();
        assert_eq!(
            (again.seq, again.time_ms, &again.origin, &again.subject, &again.stored, &again.seal),
            (entry.seq, entry.time_ms, &entry.origin, &entry.subject, &entry.stored, &entry.seal),
            "line {}, exported and read back, is another entry: {exported}",
            line.line
        );
        fold_checked(&mut state, &entry);
    }
    schedule_and_fold_back(&mut state);
    snapshot_round_trips(&state);
}

/// Fuzz target: a requirements expression, parsed, printed and parsed again.
pub fn requirements(data: &[u8]) {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    match expr::parse(source) {
        Ok(parsed) => {
            let printed = parsed.to_string();
            let again = expr::parse_printed(&printed).unwrap_or_else(|error| {
                panic!(
                    "the printed form of a parsed expression does not parse: {error}\nsource:  {source:?}\nprinted: {printed:?}"
                )
            });
            assert_eq!(
                again, parsed,
                "the printed form parses to another expression: {printed:?}"
            );
            assert_eq!(
                again.to_string(),
                printed,
                "the printed form prints otherwise"
            );
            for (props, slots) in sample_engines() {
                let _ = parsed.eval(props, *slots);
            }
        }
        Err(error) => {
            assert!(
                error.position <= source.len(),
                "error position {} past the end of a {}-byte source",
                error.position,
                source.len()
            );
            let _ = error.render(source);
        }
    }
}

/// Fuzz target: a job file's text, read as `gridfold submit` reads it, and
/// submitted when it is accepted.
pub fn job_file(data: &[u8]) {
    // `read_job_file` reads the file as UTF-8 and refuses anything else.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match gridfold::files::jobfile::parse_job(text, "job.toml", "fuzz") {
        Err(error) => {
            let n_lines = text.split('\n').count();
            assert_eq!(error.path, "job.toml");
            assert!(
                (1..=n_lines).contains(&error.line),
                "a job-file error names line {} of a file of {n_lines} lines: {error}",
                error.line
            );
        }
        Ok(spec) => {
            let envelope = Envelope {
                id: [7; 16],
                source: "gridfold-cli".into(),
                event: Event::JobSubmitted(spec),
            };
            let bytes = wire::encode(&envelope);
            assert_eq!(
                wire::decode(&bytes).as_ref(),
                Ok(&envelope),
                "an accepted job file does not survive the wire"
            );
            let mut state = base_state().clone();
            let subject = wire::default_subject(&envelope.event);
            let entry = wire::entry_from_log(
                Seq(state.last_seq.0 + 1),
                BASE_TIME_MS + 1_000,
                &subject,
                &bytes,
            );
            fold_checked(&mut state, &entry);
            schedule_and_fold_back(&mut state);
            snapshot_round_trips(&state);
        }
    }
}

/// Folds one entry and checks every invariant of the state.
fn fold_checked(state: &mut State, entry: &Entry) {
    fold(state, entry);
    state.check_invariants();
}

/// Runs `schedule` with nothing in flight and folds its batch straight back,
/// through the wire, as the projector publishes and reads it. Nothing happened
/// in between, so every order must apply.
fn schedule_and_fold_back(state: &mut State) {
    let Some(batch) = decide(state, &InFlight::new()) else {
        return;
    };
    let envelope = Envelope {
        id: [9; 16],
        source: "gridfold-projector".into(),
        event: Event::OrderBatch(batch),
    };
    let entry = wire::entry_from_log(
        Seq(state.last_seq.0 + 1),
        state.now_ms,
        wire::ORDERS_SUBJECT,
        &recorder_key().seal(&envelope),
    );
    assert!(
        matches!((&entry.origin, &entry.payload), (Origin::Projector, Payload::Event(read)) if *read == envelope),
        "an order batch does not survive the wire"
    );
    let registered = state.projector_keys.contains_key(&recorder_key().public());
    let rejections = fold(state, &entry);
    state.check_invariants();
    if !registered {
        // An operator revoked the key: the batch is a forgery now, refused whole.
        assert!(
            matches!(
                rejections.as_slice(),
                [Rejection::BadSeal { problem: SealProblem::UnregisteredKey, .. }]
            ),
            "a batch sealed by a revoked key is not refused as such: {rejections:?}"
        );
        return;
    }
    assert!(
        rejections.is_empty(),
        "the scheduler's own orders, folded straight back, are rejected: {rejections:?}"
    );
}

/// A snapshot of the state loads back to the same state, as a restarting
/// projector needs (a restarted projector loads it).
fn snapshot_round_trips(state: &State) {
    let loaded = State::from_snapshot(&state.to_snapshot())
        .unwrap_or_else(|error| panic!("a snapshot of the folded state does not load: {error}"));
    assert_eq!(
        loaded.state_digest(),
        state.state_digest(),
        "a snapshot loads to another state"
    );
}

/// Engines the requirements target evaluates on: one with every property, one
/// with none.
fn sample_engines() -> &'static [(EngineProps, u32)] {
    static ENGINES: OnceLock<Vec<(EngineProps, u32)>> = OnceLock::new();
    ENGINES.get_or_init(|| {
        let full = EngineProps {
            os: "linux".into(),
            arch: "x86_64".into(),
            cores: 4,
            memory_mb: u64::MAX,
            disk_mb: 100_000,
            mflops: 2_000,
            site: "lyon".into(),
            custom: [
                ("has_gpu", "yes"),
                ("gpus", "-2"),
                ("type", "blade"),
                ("a", "0"),
            ]
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect(),
            libraries: Vec::new(),
        };
        vec![(full, 8), (EngineProps::default(), 0)]
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_history_folds_without_a_rejection() {
        let mut state = State::new();
        for entry in base_entries() {
            let rejections = fold(&mut state, &entry);
            assert!(rejections.is_empty(), "seq {}: {rejections:?}", entry.seq);
        }
        assert_eq!(state.jobs().len(), 2);
        assert_eq!(state.engines().len(), 2);
    }

    #[test]
    fn inputs_pick_their_subject_and_time() {
        let tick = wire::encode(&Envelope { id: [1; 16], source: String::new(), event: Event::Tick });
        for (subject_idx, publisher) in PUBLISHERS.iter().enumerate() {
            let input = envelope_input(subject_idx, 31, &tick);
            let subject = subject_of(input[0], &tick);
            assert!(subject == *publisher || subject == format!("{publisher}tick"), "{subject}");
            assert_eq!(input[0] >> 3, 31);
        }
    }

    #[test]
    fn the_bodies_take_empty_input() {
        envelope_then_fold(b"");
        envelope_then_fold(&[0]);
        history_file(b"");
        requirements(b"");
        job_file(b"");
    }
}
