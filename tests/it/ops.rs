//! Operator commands on a real grid (a real nats-server, real `gridfold
//! projector` and `gridfold engine` processes, the user's commands with their
//! exit codes): hold and release, engine drain and resume, one task's cancel,
//! `policy show`, verdicts (`--no-wait`, `--json` `applied`), unknown names
//! exiting 1, unknown placeholders refused at submission, and a job of a
//! million tasks submitted in parts.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::procs::Cluster;

const POLICY: &str = "algorithm = \"sge-plain\"\nengine_timeout_secs = 5\ndispatch_timeout_secs = 10\n";

/// Runs `gridfold <args> --nats <url>`: (exit code, stdout, stderr).
fn gridfold(cluster: &Cluster, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
        .args(args)
        .args(["--nats", &cluster.url()])
        .current_dir(cluster.path(""))
        .env_remove("NATS_URL")
        .env_remove("RUST_LOG")
        .output()
        .expect("run gridfold");
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(output.stdout), text(output.stderr))
}

fn json(cluster: &Cluster, args: &[&str]) -> serde_json::Value {
    let (code, stdout, stderr) = gridfold(cluster, args);
    assert_eq!(code, 0, "gridfold {args:?}: {stdout}\n{stderr}");
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("gridfold {args:?}: {e}: {stdout}"))
}

fn job<'a>(stat: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    stat["jobs"].as_array().unwrap().iter().find(|job| job["id"] == id).unwrap_or_else(|| panic!("no {id} in {stat}"))
}

fn wait_for(what: &str, seconds: u64, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while !check() {
        assert!(Instant::now() < deadline, "waited {seconds} s for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn submit(cluster: &Cluster, id: &str, tasks: u32, script: &str) {
    let text = format!("id = \"{id}\"\ntasks = {tasks}\n\n[task]\nargv = [\"sh\", \"-c\", {script:?}]\n");
    let file = cluster.write(&format!("{id}.toml"), &text);
    let (code, stdout, stderr) = gridfold(cluster, &["submit", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
}

#[test]
fn hold_drain_and_task_cancel_are_obeyed_verdicts_are_told_and_unknown_names_exit_1() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    let work = cluster.path("e1-work");
    cluster.engine("engine-e1", "e1", 2, &work);
    wait_for("e1 to log in", 60, || {
        cluster.engine_statuses().is_ok_and(|engines| engines.iter().any(|(id, status)| id == "e1" && status == "logged-in"))
    });

    // The policy in force and the sequence that set it.
    let policy = json(&cluster, &["policy", "show", "--json"]);
    assert!(policy["seq"].as_u64().unwrap() >= 1, "{policy}");
    assert_eq!(policy["policy"]["engine_timeout_ms"], 5000, "{policy}");
    let (code, shown, _) = gridfold(&cluster, &["policy", "show"]);
    assert_eq!(code, 0);
    assert!(shown.contains("set at seq") && shown.contains("\nengine_timeout_secs = 5\n"), "{shown}");
    assert!(shown.contains("algorithm = \"sge-plain\""), "the algorithm as policy files name it: {shown}");

    // Drained: no new work. Held: no dispatch. why names both.
    let drained = json(&cluster, &["engine", "drain", "e1", "--json"]);
    assert_eq!(drained["applied"], true, "{drained}");
    let (code, _, stderr) = gridfold(&cluster, &["engine", "drain", "e1"]);
    assert_eq!(code, 1, "a second drain is refused");
    assert!(stderr.contains("is drained already"), "{stderr}");
    submit(&cluster, "j", 4, "true");
    let (code, stdout, stderr) = gridfold(&cluster, &["hold", "j"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("hold of j applied at seq"), "{stdout}");
    let (code, why, _) = gridfold(&cluster, &["why", "j/0"]);
    assert_eq!(code, 0);
    assert!(why.contains("held by an operator") && why.contains("excluded by engine-drained: e1"), "{why}");
    let stat = json(&cluster, &["stat", "--json"]);
    assert_eq!(job(&stat, "j")["held"], true, "{stat}");
    assert!(stat["engines"][0]["drained"] == true, "{stat}");
    let resumed = json(&cluster, &["engine", "resume", "e1", "--json"]);
    assert_eq!(resumed["applied"], true);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(job(&json(&cluster, &["stat", "--json"]), "j")["done"], 0, "held: nothing ran");
    let released = json(&cluster, &["release", "j", "--json"]);
    assert_eq!((released["applied"].clone(), released["verdict"].clone()), (true.into(), "accepted".into()));
    wait_for("j to be done", 60, || job(&json(&cluster, &["stat", "--json"]), "j")["status"] == "done");

    // The state digest only when asked for (it serialises the whole state on the
    // projector's loop), and then the one a replay to the same entry reaches.
    let plain = json(&cluster, &["stat", "--json"]);
    assert!(plain.get("state_digest").is_none(), "not asked for, not computed: {plain}");
    let audited = json(&cluster, &["stat", "--json", "--state-digest"]);
    let at = audited["last_seq"].as_u64().expect("last_seq").to_string();
    let replayed = json(&cluster, &["replay", "--at", &at, "--json"]);
    assert_eq!(replayed["last_seq"], audited["last_seq"], "{replayed}");
    assert!(audited["state_digest"].as_str().is_some_and(|d| d.len() == 64), "{audited}");
    assert_eq!(audited["state_digest"], replayed["state_digest"], "the live state digest is the replay's at seq {at}");
    let (code, text, _) = gridfold(&cluster, &["stat", "--state-digest"]);
    assert_eq!(code, 0);
    assert!(text.contains("\nstate digest ") && text.contains("(compare: gridfold replay --at "), "{text}");

    // One task's cancel: the running one stops, the job carries on.
    submit(&cluster, "long", 2, "sleep 60");
    wait_for("long to run", 60, || job(&json(&cluster, &["stat", "--json"]), "long")["running"] == 2);
    let (code, stdout, stderr) = gridfold(&cluster, &["cancel", "long/1", "--wait-secs", "60"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("cancel of long/1 applied"), "{stdout}\n{stderr}");
    wait_for("long/1 to be cancelled", 60, || job(&json(&cluster, &["stat", "--json"]), "long")["cancelled"] == 1);
    assert_eq!(job(&json(&cluster, &["stat", "--json"]), "long")["running"], 1);
    let (code, _, stderr) = gridfold(&cluster, &["cancel", "long/1"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("task long/1 has already ended"), "{stderr}");
    let (code, _, stderr) = gridfold(&cluster, &["cancel", "long/7", "--json"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("no task long/7"), "{stderr}");

    // --no-wait: stored, exit 0, no verdict awaited.
    let (code, stdout, stderr) = gridfold(&cluster, &["hold", "long", "--no-wait"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("hold of long stored at seq"), "{stdout}");
    let no_wait = json(&cluster, &["priority", "long", "5", "--no-wait", "--json"]);
    assert_eq!(no_wait["applied"], serde_json::Value::Null, "{no_wait}");
    let rejected = gridfold(&cluster, &["release", "j", "--json"]);
    assert_eq!(rejected.0, 1, "j has ended");
    let rejected: serde_json::Value = serde_json::from_str(rejected.1.trim()).unwrap();
    assert_eq!(rejected["applied"], false, "{rejected}");
    assert!(rejected["rejections"][0].as_str().unwrap().contains("has already ended"), "{rejected}");

    // Unknown names: exit 1, `no job X` / `no engine X`.
    for (args, said) in [
        (&["hold", "nosuch"][..], "no job nosuch"),
        (&["release", "nosuch"], "no job nosuch"),
        (&["cancel", "nosuch/0"], "no job nosuch"),
        (&["why", "nosuch/0"], "no job nosuch"),
        (&["stat", "nosuch"], "no job nosuch"),
        (&["engine", "drain", "ghost"], "no engine ghost"),
        (&["engine", "resume", "ghost"], "no engine ghost"),
    ] {
        let (code, stdout, stderr) = gridfold(&cluster, args);
        assert_eq!(code, 1, "gridfold {args:?}: {stdout}\n{stderr}");
        assert!(stderr.contains(said), "gridfold {args:?}: {stderr}");
    }
}

#[test]
fn an_unknown_placeholder_is_refused_at_submission_with_the_file_and_line() {
    let cluster = Cluster::start(POLICY);
    let file = cluster.write("scene.toml", "id = \"s\"\ntasks = 2\n\n[task]\nargv = [\"render\", \"{scene}\", \"{index}\"]\n");
    let (code, _, stderr) = gridfold(&cluster, &["submit", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("scene.toml:4") && stderr.contains("{scene}"), "{stderr}");
    let fine = cluster.write(
        "fine.toml",
        "id = \"f\"\ntasks = 1\n\n[task]\nargv = [\"awk\", \"{print $1}\", \"{scene}\"]\n[task.params]\nscene = \"intro\"\n",
    );
    let (code, _, stderr) = gridfold(&cluster, &["submit", fine.to_str().unwrap(), "--no-wait"]);
    assert_eq!(code, 0, "a program's own braces and a known parameter pass: {stderr}");
}

#[test]
fn a_job_of_a_million_tasks_is_submitted_in_parts_and_folded_whole() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    const N: u32 = 1_000_000;
    let mut text = String::from("id = \"million\"\ntasks = [\n");
    for index in 0..N {
        text.push_str(&format!("  {{ scene = \"scene-{index:07}\" }},\n"));
    }
    text.push_str("]\n\n[task]\nargv = [\"render\", \"--scene={scene}\"]\n");
    let file = cluster.write("million.toml", &text);
    let answer = json(&cluster, &["submit", file.to_str().unwrap(), "--json", "--wait-secs", "120"]);
    assert_eq!(answer["applied"], true, "{answer}");
    assert_eq!(answer["tasks"], N, "{answer}");
    assert!(answer["parts"].as_u64().unwrap() > 10, "split under the payload limit: {answer}");
    let stat = json(&cluster, &["stat", "million", "--json"]);
    let million = job(&stat, "million");
    assert_eq!((million["tasks"].as_u64(), million["waiting"].as_u64()), (Some(u64::from(N)), Some(u64::from(N))), "{million}");
    assert_eq!(million["awaits_parts_of"], serde_json::Value::Null, "every part folded: {million}");
}
