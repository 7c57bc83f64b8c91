//! What `gridfold replay --verify` and `--expect-digest` catch, on a history file
//! and on a live broker's log: tests that fail if the verifier said "verified"
//! whatever it read.
//!
//! - A validly sealed batch (a registered key's seal) whose orders were altered:
//!   a divergence at its sequence, exit 1.
//! - A batch marked with another algorithm version: not re-derived, so exit 1,
//!   naming the version; exit 0 with `--accept-version` of it.
//! - An engine report edited or dropped: the fold goes on, self-consistently (the
//!   re-derived decisions match the recorded ones), and only the chain digest an
//!   auditor kept catches it (`--expect-digest`, exit 1).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use gridfold::core::event::{Envelope, Event, Origin, Payload};
use gridfold::core::ids::Seq;
use gridfold::core::schedule::ALGORITHM_VERSION;
use gridfold::log::Append;
use gridfold::projector::key::{ProjectorKey, KEY_FILE};
use gridfold::projector::record::recorder_key;
use gridfold::wire::history::{parse_history, write_history_line, HistoryLine, HistoryPayload};
use serde_json::Value;
use support::procs::Cluster;

/// What a `gridfold` command said and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {}\n{}", self.stdout, self.stderr))
    }
}

/// Runs `gridfold <args>` to its end.
fn gridfold(args: &[&str]) -> Ran {
    let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
        .args(args)
        .env_remove("NATS_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("run gridfold");
    Ran {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A recorded history: six tasks on three engines, every one completed.
fn recorded() -> Vec<HistoryLine> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("replay").join("01-bag-of-tasks.jsonl");
    parse_history(&std::fs::read_to_string(&path).expect("the recorded history")).expect("a valid history")
}

/// The line's envelope.
fn envelope(line: &HistoryLine) -> &Envelope {
    match &line.payload {
        HistoryPayload::Envelope(envelope, _) => envelope,
        HistoryPayload::Raw(_) => panic!("seq {}: not an envelope", line.seq),
    }
}

/// Writes `lines` as a history file (each line's bytes as they are) under `dir`.
fn write_history(dir: &Path, name: &str, lines: &[(Seq, u64, String, Vec<u8>)]) -> PathBuf {
    let text: String = lines.iter().map(|(seq, time_ms, subject, bytes)| write_history_line(*seq, *time_ms, subject, bytes) + "\n").collect();
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a history");
    path
}

/// The history's lines as (seq, time, subject, bytes), the batch at `batch_seq`
/// changed by `change` and sealed again with the recorder's registered key.
fn with_batch_resealed(lines: &[HistoryLine], batch_seq: Seq, change: impl Fn(&mut gridfold::core::event::OrderBatch)) -> Vec<(Seq, u64, String, Vec<u8>)> {
    lines
        .iter()
        .map(|line| {
            let bytes = if line.seq == batch_seq {
                let mut envelope = envelope(line).clone();
                let Event::OrderBatch(batch) = &mut envelope.event else { panic!("seq {batch_seq} is not a batch") };
                change(batch);
                recorder_key().seal(&envelope)
            } else {
                line.bytes()
            };
            (line.seq, line.time_ms, line.subject.clone(), bytes)
        })
        .collect()
}

fn as_written(lines: &[HistoryLine]) -> Vec<(Seq, u64, String, Vec<u8>)> {
    lines.iter().map(|line| (line.seq, line.time_ms, line.subject.clone(), line.bytes())).collect()
}

/// The first order batch of the history: its sequence.
fn first_batch(lines: &[HistoryLine]) -> Seq {
    lines.iter().find(|line| matches!(envelope(line).event, Event::OrderBatch(_))).expect("a batch").seq
}

fn verify_file(path: &Path, more: &[&str]) -> Ran {
    let file = path.display().to_string();
    gridfold(&[&["replay", "--file", &file, "--verify", "--json"][..], more].concat())
}

#[test]
fn a_validly_sealed_batch_whose_orders_were_altered_fails_verify_at_its_sequence_on_a_history_file() {
    let dir = tempfile::tempdir().unwrap();
    let lines = recorded();
    let batch_seq = first_batch(&lines);
    let true_file = write_history(dir.path(), "true.jsonl", &as_written(&lines));
    let ran = verify_file(&true_file, &[]);
    assert_eq!((ran.code, &ran.json()["verified"]), (Some(0), &Value::Bool(true)), "{}", ran.stderr);

    // The first dispatch sent elsewhere, sealed again with the registered key: the fold obeys it.
    let altered = with_batch_resealed(&lines, batch_seq, |batch| {
        let gridfold::core::event::Order::Dispatch { engine, .. } = &mut batch.orders[0] else { panic!("a dispatch first") };
        *engine = gridfold::core::ids::EngineId::new(if engine.as_str() == "e3" { "e2" } else { "e3" }).unwrap();
    });
    let altered = write_history(dir.path(), "altered.jsonl", &altered);
    let ran = verify_file(&altered, &[]);
    assert_eq!(ran.code, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    let json = ran.json();
    assert_eq!(json["verified"], false);
    assert_eq!(json["batches_refused"], 0, "the seal holds: the batch was applied");
    let divergence = json["divergence"].as_str().expect("a divergence").to_string();
    assert!(divergence.starts_with(&format!("batch at seq {} ", batch_seq.0)) && divergence.contains("differs at order 0"), "{divergence}");
    let text = gridfold(&["replay", "--file", &altered.display().to_string(), "--verify"]);
    assert_eq!(text.code, Some(1));
    assert!(text.stdout.contains(&format!("DIVERGENCE: batch at seq {}", batch_seq.0)) && !text.stdout.contains("replay verified"), "{}", text.stdout);
}

#[test]
fn a_batch_of_another_algorithm_version_fails_verify_naming_it_unless_accepted_on_a_history_file() {
    let dir = tempfile::tempdir().unwrap();
    let lines = recorded();
    let older = ALGORITHM_VERSION - 1;
    let changed = with_batch_resealed(&lines, first_batch(&lines), |batch| batch.algorithm_version = older);
    let file = write_history(dir.path(), "older.jsonl", &changed);

    let ran = verify_file(&file, &[]);
    assert_eq!(ran.code, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    let json = ran.json();
    assert_eq!((&json["verified"], &json["batches_not_verifiable"], &json["divergence"]), (&Value::Bool(false), &Value::from(1), &Value::Null));
    assert_eq!(json["other_versions"], serde_json::json!([{"algorithm": "sge-plain", "version": older, "batches": 1, "accepted": false}]));
    let said = json["not_verified"][0].as_str().unwrap_or_default();
    assert!(said.contains(&format!("sge-plain version {older}: 1")) && said.contains(&format!("--accept-version {older}")), "{said}");
    let text = gridfold(&["replay", "--file", &file.display().to_string(), "--verify"]);
    assert_eq!(text.code, Some(1));
    assert!(text.stdout.contains("NOT VERIFIED: 1 applied batch(es) were made by another algorithm version") && !text.stdout.contains("replay verified"), "{}", text.stdout);

    let accepted = verify_file(&file, &["--accept-version", &older.to_string()]);
    assert_eq!(accepted.code, Some(0), "{}\n{}", accepted.stdout, accepted.stderr);
    let json = accepted.json();
    assert_eq!((&json["verified"], &json["other_versions"][0]["accepted"], &json["accepted_versions"]), (&Value::Bool(true), &Value::Bool(true), &serde_json::json!([older])));
    let other = verify_file(&file, &["--accept-version", &(older + 100).to_string()]);
    assert_eq!(other.code, Some(1), "accepting another version accepts nothing here");
}

#[test]
fn an_edited_or_dropped_engine_report_replays_self_consistently_and_only_the_kept_chain_digest_catches_it() {
    let dir = tempfile::tempdir().unwrap();
    let lines = recorded();
    let true_file = write_history(dir.path(), "true.jsonl", &as_written(&lines));
    let kept = verify_file(&true_file, &[]).json()["chain_digest"].as_str().expect("a chain digest").to_string();
    let last_report = lines.iter().rposition(|line| matches!(envelope(line).event, Event::TaskCompleted { .. })).expect("a report");

    let mut edited = as_written(&lines);
    let mut envelope = envelope(&lines[last_report]).clone();
    let Event::TaskCompleted { result, .. } = &mut envelope.event else { unreachable!() };
    *result = b"not what the engine said".to_vec();
    edited[last_report].3 = gridfold::wire::encode(&envelope);
    let mut dropped = as_written(&lines);
    dropped.remove(last_report);

    for (name, tampered) in [("edited.jsonl", edited), ("dropped.jsonl", dropped)] {
        let file = write_history(dir.path(), name, &tampered);
        // Every batch re-derives: the decisions are consistent with the tampered log.
        let ran = verify_file(&file, &[]);
        assert_eq!((ran.code, &ran.json()["verified"]), (Some(0), &Value::Bool(true)), "{name}: {}", ran.stderr);
        assert_ne!(ran.json()["chain_digest"].as_str(), Some(kept.as_str()), "{name}");
        // The digest the auditor kept does not match.
        let checked = verify_file(&file, &["--expect-digest", &kept]);
        assert_eq!(checked.code, Some(1), "{name}: {}", checked.stdout);
        assert!(checked.stderr.contains(&format!("does not match the expected {kept}")), "{name}: {}", checked.stderr);
    }
    let intact = verify_file(&true_file, &["--expect-digest", &kept]);
    assert_eq!(intact.code, Some(0), "the true history matches its digest: {}", intact.stderr);
}

const POLICY: &str = "\
engine_timeout_secs = 3600
";

/// A real projector and engine run a job on a broker and stop; then batches are
/// added to its log sealed with the projector's own registered key (one of an
/// older algorithm version, one whose orders are not what the state calls for),
/// and the log is rebuilt by whoever administers the broker with an engine
/// report edited or left out (the stream denies deleting one entry, and the
/// reader refuses a log with one missing). Each is caught, on the broker's log itself.
#[test]
fn on_a_brokers_log_another_version_an_altered_batch_and_an_edited_or_dropped_report_each_fail_the_audit() {
    let mut cluster = Cluster::start(POLICY);
    let projector = cluster.projector();
    let engine = cluster.engine("e1", "e1", 2, &cluster.path("work-e1"));
    cluster.wait_logged_in(&["e1"]);
    cluster.submit_script("audited", 3, "echo {index}");
    cluster.command(&["wait".as_ref(), "audited".as_ref(), "--timeout-secs".as_ref(), "60".as_ref()]);
    cluster.proc(engine).kill9();
    cluster.proc(projector).kill9();
    let url = cluster.url();
    let replay = |more: &[&str]| gridfold(&[&["replay", "--nats", &url, "--json"][..], more].concat());

    let genuine = replay(&["--verify"]);
    assert_eq!((genuine.code, &genuine.json()["verified"]), (Some(0), &Value::Bool(true)), "{}", genuine.stderr);
    let kept_digest = genuine.json()["chain_digest"].as_str().expect("a digest").to_string();
    let kept_seq = genuine.json()["last_seq"].as_u64().expect("a sequence");

    // The projector's key, as its state directory holds it, and its last batch.
    let key = ProjectorKey::read(&cluster.path("projector").join(KEY_FILE)).expect("the projector's key");
    let entries = cluster.stored_entries();
    let mut batch_envelope = entries
        .iter()
        .rev()
        .find_map(|entry| match (&entry.origin, &entry.payload) {
            (Origin::Projector, Payload::Event(envelope)) if matches!(envelope.event, Event::OrderBatch(_)) => Some(envelope.clone()),
            _ => None,
        })
        .expect("the projector published batches");
    let sealed = |envelope: &Envelope| Append::new(gridfold::wire::default_subject(&envelope.event), key.seal(envelope));

    // (b) A batch marked with an older algorithm version, decided on the last entry.
    let older = ALGORITHM_VERSION - 1;
    let Event::OrderBatch(batch) = &mut batch_envelope.event else { unreachable!() };
    batch.based_on_seq = Seq(kept_seq);
    batch.algorithm_version = older;
    let [older_seq] = cluster.append_batch(vec![sealed(&batch_envelope)])[..] else { panic!("one append") };
    let ran = replay(&["--verify"]);
    assert_eq!(ran.code, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    assert_eq!(ran.json()["other_versions"], serde_json::json!([{"algorithm": "sge-plain", "version": older, "batches": 1, "accepted": false}]));
    let accepted = replay(&["--verify", "--accept-version", &older.to_string()]);
    assert_eq!((accepted.code, &accepted.json()["verified"]), (Some(0), &Value::Bool(true)), "{}", accepted.stderr);

    // (a) The same orders at this build's version, decided on the entry before: not what the state calls for.
    let Event::OrderBatch(batch) = &mut batch_envelope.event else { unreachable!() };
    batch.based_on_seq = Seq(older_seq);
    batch.algorithm_version = ALGORITHM_VERSION;
    let [altered_seq] = cluster.append_batch(vec![sealed(&batch_envelope)])[..] else { panic!("one append") };
    let ran = replay(&["--verify", "--accept-version", &older.to_string()]);
    assert_eq!(ran.code, Some(1), "{}\n{}", ran.stdout, ran.stderr);
    let json = ran.json();
    assert_eq!((&json["verified"], &json["batches_refused"]), (&Value::Bool(false), &Value::from(0)));
    let divergence = json["divergence"].as_str().unwrap_or_default();
    assert!(divergence.starts_with(&format!("batch at seq {altered_seq} (based on seq {older_seq}) differs at order 0")), "{divergence}");

    // (c) The log rebuilt by whoever administers the broker, with the last report
    // of a completed task edited, or left out: the digest kept at kept_seq no
    // longer matches.
    let at = kept_seq.to_string();
    let intact = replay(&["--at", &at, "--expect-digest", &kept_digest]);
    assert_eq!(intact.code, Some(0), "{}", intact.stderr);
    let report = entries
        .iter()
        .rposition(|entry| entry.events().any(|event| matches!(event, Event::TaskCompleted { .. })))
        .expect("an engine's report of a completed task");
    let Payload::Event(mut edited) = entries[report].payload.clone() else { panic!("a decoded report") };
    let completion = match &mut edited.event {
        Event::EngineReports { reports, .. } => reports.iter_mut().rev().find_map(|report| match &mut report.event {
            Event::TaskCompleted { result, .. } => Some(result),
            _ => None,
        }),
        Event::TaskCompleted { result, .. } => Some(result),
        _ => None,
    };
    *completion.expect("the completion") = b"not what the engine said".to_vec();
    // The whole log as it is now, the batches added above included: it goes on past kept_seq.
    let genuine: Vec<(String, Vec<u8>)> = cluster.stored_entries().iter().map(|entry| (entry.subject.clone(), entry.stored.clone())).collect();
    let mut with_edit = genuine.clone();
    with_edit[report].1 = gridfold::wire::encode(&edited);
    let mut without = genuine;
    without.remove(report);
    for (what, rebuilt) in [("an edited report", with_edit), ("a report left out", without)] {
        rebuild_log(&cluster, rebuilt);
        let ran = replay(&["--at", &at, "--expect-digest", &kept_digest]);
        assert_eq!(ran.code, Some(1), "{what}: {}\n{}", ran.stdout, ran.stderr);
        assert!(ran.stderr.contains(&format!("does not match the expected {kept_digest}")), "{what}: {}", ran.stderr);
        assert_ne!(ran.json()["chain_digest"].as_str(), Some(kept_digest.as_str()), "{what}");
    }
}

/// What a broker's administrator can do to the log: delete the stream and make
/// it again (same configuration), then publish `entries` (subject, stored
/// bytes) into it, in order: a log of the same sequences, rebuilt.
fn rebuild_log(cluster: &Cluster, entries: Vec<(String, Vec<u8>)>) {
    cluster.runtime.block_on(async {
        let client = async_nats::connect(cluster.url()).await.expect("connect");
        let context = async_nats::jetstream::new(client);
        let mut stream = context.get_stream(gridfold::log::jetstream::STREAM_EVENTS).await.expect("the events stream");
        let config = stream.info().await.expect("stream info").config.clone();
        context.delete_stream(&config.name).await.expect("the stream deleted");
        context.create_stream(config).await.expect("the stream made again");
    });
    cluster.append_batch(entries.into_iter().map(|(subject, bytes)| Append::new(subject, bytes)).collect());
}
