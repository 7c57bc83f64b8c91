//! Grid Engine's resource side as users run it: a real nats-server, real
//! `gridfold projector` and `gridfold engine` processes, and the user's commands.
//!
//! Queue selection: two one-slot engines that differ only in their `seq_no`
//! property; under `queue_sort_method = "seqno"` a one-task job goes to the
//! lower `seq_no`, and `gridfold why` ranks both with their load index (from
//! the `mem_used` the engines measure and report in their heartbeats) and
//! their `seq_no`. A policy with a load formula that does not parse, and an
//! engine given a `seq_no` that is not a number, are refused with a message
//! and a non-zero exit.

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);

struct Grid {
    url: String,
    dir: tempfile::TempDir,
    children: Vec<Child>,
    _server: support::nats::NatsServer,
}

impl Drop for Grid {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Grid {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gridfold"));
        command.args(args).env("NATS_URL", &self.url).env("NO_COLOR", "1").current_dir(self.dir.path()).stdin(Stdio::null());
        command
    }

    fn spawn(&mut self, name: &str, args: &[&str]) {
        let stderr = std::fs::File::create(self.path(&format!("{name}.stderr"))).unwrap();
        let child = self.command(args).stdout(Stdio::null()).stderr(stderr).spawn().unwrap();
        self.children.push(child);
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn json(&self, args: &[&str]) -> Option<Value> {
        let output = self.run(&[args, &["--json"]].concat());
        output.status.success().then(|| serde_json::from_slice(&output.stdout).ok()).flatten()
    }

    fn wait_for<T>(&self, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            match check() {
                Ok(value) => return value,
                Err(last) if Instant::now() >= deadline => panic!("timed out waiting for {what}; last seen: {last}"),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

#[test]
fn queue_sort_seqno_sends_the_task_to_the_lower_seq_no_and_bad_keys_are_refused() {
    let server = support::nats::start();
    let mut grid = Grid { url: server.url(), dir: tempfile::tempdir().unwrap(), children: Vec::new(), _server: server };
    let state = grid.path("projector");
    grid.spawn("projector", &["projector", "--register-key", "--state", state.to_str().unwrap()]);

    let bad = grid.path("bad.toml");
    std::fs::write(&bad, "queue_sort_method = \"seqno\"\n[load_formula]\nexpression = \"mem_used +\"\n").unwrap();
    let refused = grid.run(&["policy", "apply", bad.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("bad.toml:3") && stderr.contains("load_formula.expression"), "{stderr}");

    let policy = grid.path("policy.toml");
    std::fs::write(&policy, "queue_sort_method = \"seqno\"\n[load_formula]\nexpression = \"np_load_avg + 0.001*mem_used\"\n").unwrap();
    grid.wait_for("the broker to take a policy", || {
        let output = grid.run(&["policy", "apply", policy.to_str().unwrap()]);
        if output.status.success() { Ok(()) } else { Err(String::from_utf8_lossy(&output.stderr).into_owned()) }
    });

    let engine = |name: &str, seq_no: &str| -> Vec<String> {
        ["engine", "--name", name, "--slots", "1", "--prop", &format!("seq_no={seq_no}"), "--heartbeat-secs", "1"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let refused = grid.run(&engine("typo", "first").iter().map(String::as_str).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("seq_no"), "{stderr}");

    let a_second = engine("a-second", "2");
    grid.spawn("a-second", &a_second.iter().map(String::as_str).collect::<Vec<_>>());
    let b_first = engine("b-first", "1");
    grid.spawn("b-first", &b_first.iter().map(String::as_str).collect::<Vec<_>>());
    // A job's ranking shows the load index once each engine has reported its load
    // values (`mem_used` among them) in a heartbeat: the projector has folded one
    // when an engine's last report is later than the first it showed logged in.
    let mut first_seen = std::collections::BTreeMap::new();
    grid.wait_for("both engines to log in and report mem_used in a heartbeat", || {
        let stat = grid.json(&["stat"]).ok_or("no stat answer")?;
        let engines = stat["engines"].as_array().cloned().unwrap_or_default();
        let heartbeat_folded = engines
            .iter()
            .filter(|engine| engine["status"] == "logged-in")
            .filter(|engine| {
                let last_seen = engine["last_seen_ms"].as_u64().unwrap_or_default();
                let first = *first_seen.entry(engine["id"].to_string()).or_insert(last_seen);
                last_seen > first
            })
            .count();
        if heartbeat_folded == 2 { Ok(()) } else { Err(stat["engines"].to_string()) }
    });
    let job = grid.path("job.toml");
    std::fs::write(&job, "id = \"one\"\ntasks = 1\n\n[task]\nargv = [\"sleep\", \"1\"]\n").unwrap();
    let submitted = grid.run(&["submit", job.to_str().unwrap()]);
    assert!(submitted.status.success(), "{}", String::from_utf8_lossy(&submitted.stderr));
    // The JSON names b-first among the candidates while the task still waits:
    // wait for the text's dispatch line itself.
    let text = grid.wait_for("the task to be dispatched", || {
        let text = String::from_utf8_lossy(&grid.run(&["why", "one/0"]).stdout).into_owned();
        if text.contains("-> b-first") { Ok(text) } else { Err(text) }
    });
    assert!(text.contains("seq_no 1") && text.contains("seq_no 2"), "{text}");
    assert!(!text.contains("load index unknown"), "both engines reported mem_used: {text}");
}
