//! The recorded histories under `replay/` pin every decision the scheduler makes.
//!
//! For each `replay/NAME.jsonl` this test:
//! 1. takes its inputs (every entry but the projector's orders), re-records them
//!    through the projector machine, and requires the very same log: a change
//!    that alters a decision fails here;
//! 2. requires `replay/NAME.expected` (digests, every order, every rejection, the
//!    final summary) to match;
//! 3. replays the file with verification (every batch re-derived) and with the
//!    invariants checked after every entry;
//! 4. restarts a projector from a snapshot taken after every entry, and requires
//!    the resumed fold to reach the same chain and state digests.
//!
//! To record a new history, write its inputs as `replay/NAME.jsonl` (comment
//! lines at the top describe it) and run `UPDATE_EXPECT=1 cargo test --release
//! --test it replay_histories`; to accept a deliberate change of decisions, the same.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use gridfold::projector::query::StateSummary;
use gridfold::core::event::{Entry, Event, Origin, Payload};
use gridfold::core::fold::fold;
use gridfold::core::reject::Rejection;
use gridfold::core::replay::{replay, ReplayOptions};
use gridfold::core::state::State;
use gridfold::projector::record::{recorder_key, rerecord, RecordedEntry};
use gridfold::wire::history::{parse_history, HistoryPayload};
use gridfold::wire::ORDERS_SUBJECT;

fn histories() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("replay");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    paths.sort();
    paths
}

/// What a person reads to see what a history decided.
fn render_expected(recorded: &[RecordedEntry]) -> String {
    let entries: Vec<Entry> = recorded.iter().map(RecordedEntry::to_entry).collect();
    let mut state = State::new();
    let mut orders = String::new();
    let mut rejections = String::new();
    for entry in &entries {
        let folded = fold(&mut state, entry);
        for rejection in &folded {
            writeln!(rejections, "seq {}: {}: {rejection}", entry.seq, rejection.kind_name()).unwrap();
        }
        // A batch refused whole (not the projector's) decided nothing: its rejection says so.
        let refused = folded.iter().any(|r| !matches!(r, Rejection::OrderNotApplicable { .. }));
        if !refused && let (Origin::Projector, Payload::Event(envelope)) = (&entry.origin, &entry.payload)
            && let Event::OrderBatch(batch) = &envelope.event {
                for order in &batch.orders {
                    writeln!(orders, "seq {} (based on {}): {order}", entry.seq, batch.based_on_seq).unwrap();
                }
            }
    }
    format!(
        "# orders\n{orders}\n# rejections\n{}\n# final state\n{}\n",
        if rejections.is_empty() { "(none)\n" } else { &rejections },
        // As `gridfold replay` prints it: the state digest included.
        StateSummary::of(&state).with_state_digest(&state)
    )
}

fn header_comments(text: &str) -> String {
    text.lines().take_while(|line| line.starts_with('#')).map(|line| format!("{line}\n")).collect()
}

fn check_history(path: &Path, update: bool) -> Result<(), String> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{name}: {e}"))?;
    let lines = parse_history(&text).map_err(|e| format!("{name}:{e}"))?;

    // 1 and 2: the recorder, run again on the inputs, must write the same log and expectations.
    // The recorder's own batches are its output; anything else on the orders
    // subject (a forged batch) is an input, to be refused again on every replay.
    let recorder = recorder_key().public();
    let recorded_batch = |line: &&gridfold::wire::history::HistoryLine| {
        line.subject == ORDERS_SUBJECT
            && matches!(&line.payload, HistoryPayload::Envelope(_, Some((signer, _))) if *signer == recorder)
    };
    let inputs = lines.iter().filter(|line| !recorded_batch(line)).map(|line| (line.time_ms, line.subject.as_str(), line.bytes()));
    let recorded = rerecord(inputs);
    let rerecorded_text: String = header_comments(&text)
        + &recorded.iter().map(|entry| entry.to_history_line() + "\n").collect::<String>();
    let expected_path = path.with_extension("expected");
    let expected = render_expected(&recorded);
    if update {
        std::fs::write(path, &rerecorded_text).unwrap();
        std::fs::write(&expected_path, &expected).unwrap();
        return Ok(());
    }
    if rerecorded_text != text {
        return Err(format!("{name}: re-recording its inputs gives another log: a decision changed. If that is on purpose, run UPDATE_EXPECT=1 cargo test --test it replay_histories and commit the new history."));
    }
    let on_file = std::fs::read_to_string(&expected_path).unwrap_or_default();
    if on_file != expected {
        return Err(format!("{}: does not match what the history gives:\n{}", expected_path.display(), first_difference(&on_file, &expected)));
    }

    // 3: verified replay with invariants checked after every entry.
    let entries: Vec<Entry> = lines.iter().map(|line| line.to_entry()).collect();
    let options = ReplayOptions { verify: true, stop_at: None, check_invariants: true };
    let (whole, report) = replay(State::new(), &entries, &options, &mut |_| {});
    if let Some(problem) = report.not_verified(&[]).first() {
        return Err(format!("{name}: replay --verify does not verify: {problem}"));
    }
    let n_batches = lines.iter().filter(|line| recorded_batch(line)).count() as u64;
    let n_forged = lines.iter().filter(|line| line.subject == ORDERS_SUBJECT).count() as u64 - n_batches;
    if report.batches_refused != n_forged {
        return Err(format!("{name}: {} batches refused, {n_forged} forged in the history", report.batches_refused));
    }
    if report.batches_verified != n_batches {
        return Err(format!("{name}: verified {} of {n_batches} batches", report.batches_verified));
    }

    // 4: a projector restarted from a snapshot after any entry reaches the same state.
    let plain = ReplayOptions::default();
    for cut in 0..=entries.len() {
        let (before, _) = replay(State::new(), &entries[..cut], &plain, &mut |_| {});
        let restored = State::from_snapshot(&before.to_snapshot()).map_err(|e| format!("{name}: snapshot at {cut}: {e}"))?;
        let (resumed, _) = replay(restored, &entries[cut..], &plain, &mut |_| {});
        if resumed.chain != whole.chain || resumed.state_digest() != whole.state_digest() {
            return Err(format!("{name}: restarting from a snapshot after entry {cut} reaches another state"));
        }
    }
    Ok(())
}

fn first_difference(on_file: &str, actual: &str) -> String {
    for (n, (a, b)) in on_file.lines().zip(actual.lines()).enumerate() {
        if a != b {
            return format!("line {}:\n  on file: {a}\n  now:     {b}", n + 1);
        }
    }
    format!("one is a prefix of the other ({} vs {} lines)", on_file.lines().count(), actual.lines().count())
}

#[test]
fn every_recorded_history_replays_to_its_digest_and_orders() {
    let update = std::env::var_os("UPDATE_EXPECT").is_some();
    let paths = histories();
    assert!(paths.len() >= 10, "replay/ should hold at least ten histories, found {}", paths.len());
    let failures: Vec<String> = paths.iter().filter_map(|path| check_history(path, update).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `replay --at` and `why --at` past the end of a history are errors (exit 2,
/// naming the last sequence), not the final state shown as if it were then.
#[test]
fn replay_and_why_at_a_sequence_past_the_end_are_refused_with_the_last_sequence() {
    let history = Path::new(env!("CARGO_MANIFEST_DIR")).join("replay").join("01-bag-of-tasks.jsonl");
    let entries = std::fs::read_to_string(&history).unwrap().lines().filter(|line| !line.starts_with('#')).count();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_gridfold"))
            .args(args)
            .arg("--file")
            .arg(&history)
            .env_remove("NATS_URL")
            .output()
            .expect("run gridfold")
    };
    let last = entries.to_string();
    let fine = run(&["replay", "--at", &last]);
    assert!(fine.status.success(), "{}", String::from_utf8_lossy(&fine.stderr));
    for args in [["replay", "--at", "99999"].as_slice(), ["why", "job-1/0", "--at", "99999"].as_slice()] {
        let past = run(args);
        let stderr = String::from_utf8_lossy(&past.stderr);
        assert_eq!(past.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(&format!("--at 99999 is past the end of {}, which ends at seq {entries}", history.display())), "{stderr}");
    }
}
