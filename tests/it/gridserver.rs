//! GridServer scheduling as users run it: a real nats-server, real `gridfold
//! projector` and `gridfold engine` processes, and the user's commands.
//!
//! One grid, two engines in two tiers (`type=blade` before `type=desktop`), each
//! with its own library directory, then two jobs in turn:
//!
//! 1. **Grid libraries.** `gridfold library put` stores a small script; the blade
//!    already holds the library on disk (reported at login), the desktop does not.
//!    A job rooted on it fills the blade's one slot, so the desktop is ordered to
//!    sync: it fetches the library from the object store, reports it synced and
//!    runs tasks, which read it through `$GRIDFOLD_LIBRARY_DIR`.
//! 2. **Blacklisting.** A job whose command fails on the blade only, with
//!    `engine_blacklisting` and one failure before blacklisting: the blade is
//!    blacklisted (`gridfold why` names it as the rule keeping a retry away from
//!    it, and as where the task failed), the job completes on the desktop,
//!    `gridfold blacklist ls --json` shows the blade, and `gridfold blacklist
//!    clear` clears it.
//!
//! Every wait polls a condition with a deadline; a timeout fails with what was
//! last seen and the tail of every process's stderr.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The longest any one wait may take.
const WAIT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

const POLICY: &str = r#"engine_tiers = ["type=blade", "type=desktop"]
"#;

/// The script stored as the library; tasks print it.
const LIBRARY_SCRIPT: &str = "#!/bin/sh\necho library-v1\n";

struct Grid {
    url: String,
    dir: tempfile::TempDir,
    /// (name, child, stderr file): killed and reaped on drop.
    children: Vec<(String, Child, PathBuf)>,
    _server: support::nats::NatsServer,
}

impl Drop for Grid {
    fn drop(&mut self) {
        for (_, child, _) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Grid {
    fn start() -> Grid {
        let server = support::nats::start();
        let grid = Grid { url: server.url(), dir: tempfile::tempdir().unwrap(), children: Vec::new(), _server: server };
        std::fs::create_dir_all(grid.dir.path().join("out")).unwrap();
        grid
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gridfold"));
        command.env("GRIDFOLD_OPERATOR", "true");
        command
            .env("NATS_URL", &self.url)
            .env("RUST_LOG", "warn,gridfold::projector::service=info,gridfold::engine=info")
            .env("NO_COLOR", "1")
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        command
    }

    /// Starts a long-running `gridfold` process, its output in `<name>.stderr`.
    fn spawn(&mut self, name: &str, args: &[&str]) {
        let stderr = self.path(&format!("{name}.stderr"));
        let child = self
            .command()
            .args(args)
            .stdout(std::fs::File::create(self.path(&format!("{name}.stdout"))).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start gridfold {name}: {err}"));
        self.children.push((name.to_string(), child, stderr));
    }

    fn engine(&mut self, name: &str, kind: &str) {
        let work = self.path(&format!("work-{name}"));
        let libraries = self.library_dir(name);
        let prop = format!("type={kind}");
        let args = ["engine", "--name", name, "--slots", "1", "--prop", &prop, "--heartbeat-secs", "1", "--drain-timeout-secs", "2"];
        let mut all: Vec<&str> = args.to_vec();
        let (work, libraries) = (work.to_str().unwrap().to_string(), libraries.to_str().unwrap().to_string());
        all.extend(["--work-dir", &work, "--library-dir", &libraries]);
        self.spawn(name, &all);
    }

    fn library_dir(&self, engine: &str) -> PathBuf {
        self.path(&format!("libraries-{engine}"))
    }

    /// Runs a `gridfold` command to its end.
    fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    /// Runs a `gridfold` command that must succeed; its standard output.
    fn ok(&self, args: &[&str]) -> String {
        let output = self.run(args);
        assert!(output.status.success(), "gridfold {args:?}: {}\n{}", output.status, self.report(&output));
        String::from_utf8(output.stdout).unwrap()
    }

    /// Runs a `gridfold` command with `--json`; its answer, or `None` if it failed.
    fn json(&self, args: &[&str]) -> Option<Value> {
        let mut args = args.to_vec();
        args.push("--json");
        let output = self.run(&args);
        if !output.status.success() {
            return None;
        }
        serde_json::from_slice(&output.stdout).ok()
    }

    fn write(&self, name: &str, text: &str) -> String {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    }

    fn report(&self, output: &Output) -> String {
        format!("stdout: {}\nstderr: {}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    }

    /// The last lines of every process's stderr, for a failure message.
    fn tails(&self) -> String {
        let mut all = String::new();
        for (name, _, stderr) in &self.children {
            let text = std::fs::read_to_string(stderr).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            all.push_str(&format!("--- {name} ---\n{}\n", lines[lines.len().saturating_sub(20)..].join("\n")));
        }
        all
    }

    /// Polls `check` until it returns `Some`, or fails after [`WAIT`] with `last`.
    fn wait_for<T>(&self, what: &str, mut check: impl FnMut() -> Result<T, String>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            match check() {
                Ok(value) => return value,
                Err(last) if Instant::now() >= deadline => {
                    panic!("timed out waiting for {what}; last seen: {last}\n{}", self.tails())
                }
                Err(_) => std::thread::sleep(POLL),
            }
        }
    }

    /// Waits until `stat --json` shows the job ended, and returns its summary.
    fn wait_job_ended(&self, job: &str) -> Value {
        self.wait_for(&format!("job {job} to end"), || {
            let stat = self.json(&["stat", job]).ok_or("no stat answer")?;
            let summary = stat["jobs"].get(0).cloned().ok_or(format!("no job yet: {stat}"))?;
            if summary["status"] == "active" { Err(summary.to_string()) } else { Ok(summary) }
        })
    }
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|list| list.iter().filter_map(|v| v.as_str().map(String::from)).collect()).unwrap_or_default()
}

/// Holds the library as a synced engine directory would, as if an earlier session had synced it.
fn hold_library(library_dir: &Path) {
    let dir = library_dir.join("tools").join("1");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.sh"), LIBRARY_SCRIPT).unwrap();
    std::fs::write(dir.join(".synced"), b"").unwrap();
}

#[test]
fn libraries_sync_from_the_object_store_and_a_failing_engine_is_blacklisted() {
    let mut grid = Grid::start();
    let state = grid.path("projector");
    grid.spawn("projector", &["projector", "--register-key", "--state", state.to_str().unwrap()]);
    let policy = grid.write("policy.toml", POLICY);
    grid.wait_for("the broker to take a policy", || {
        let output = grid.run(&["policy", "apply", &policy]);
        if output.status.success() { Ok(()) } else { Err(grid.report(&output)) }
    });

    // ---- the library, and what `library put` refuses -----------------------------------
    let script = grid.write("run.sh", LIBRARY_SCRIPT);
    let put = grid.json(&["library", "put", "tools", "1", &script]).expect("library put");
    assert_eq!(put["size_bytes"], LIBRARY_SCRIPT.len());
    assert_eq!(put["digest_hex"], blake3::hash(LIBRARY_SCRIPT.as_bytes()).to_hex().as_str());
    assert_eq!(put["format"], "file");
    grid.ok(&["library", "put", "tools", "1", &script]); // the same bytes again: accepted
    let other = grid.write("other.sh", "#!/bin/sh\necho other\n");
    let refused = grid.run(&["library", "put", "tools", "1", &other]);
    assert_eq!(refused.status.code(), Some(1), "{}", grid.report(&refused));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("new version"), "{}", grid.report(&refused));
    let missing = grid.run(&["library", "put", "tools", "2", "no-such-file"]);
    assert_eq!(missing.status.code(), Some(2), "{}", grid.report(&missing));
    let bad_name = grid.run(&["library", "put", "tools", "1/2", &script]);
    assert_eq!(bad_name.status.code(), Some(2), "{}", grid.report(&bad_name));

    // ---- engines: the blade holds the library already, the desktop does not ------------
    hold_library(&grid.library_dir("blade"));
    grid.engine("blade", "blade");
    grid.engine("desktop", "desktop");
    grid.wait_for("both engines to log in", || {
        let stat = grid.json(&["stat"]).ok_or("no stat answer")?;
        let logged_in = stat["engines"].as_array().map_or(0, |engines| engines.iter().filter(|e| e["status"] == "logged-in").count());
        if logged_in == 2 { Ok(()) } else { Err(stat["engines"].to_string()) }
    });
    let libraries = grid.json(&["library", "ls"]).expect("library ls");
    assert_eq!(strings(&libraries["libraries"][0]["held_by"]), ["blade"], "reported at login: {libraries}");

    // ---- a job rooted on the library ----------------------------------------------------
    let out = grid.path("out");
    let job = format!(
        r#"id = "rooted"
tasks = 4
root_library = {{ name = "tools", version = "1" }}

[task]
argv = ["sh", "-c", "sh \"$GRIDFOLD_LIBRARY_DIR/run.sh\" > {}/$GRIDFOLD_ENGINE-$GRIDFOLD_TASK_INDEX && sleep 1"]
"#,
        out.display()
    );
    let job = grid.write("rooted.toml", &job);
    grid.ok(&["submit", &job]);
    let summary = grid.wait_job_ended("rooted");
    assert_eq!((summary["status"].as_str(), summary["done"].as_u64()), (Some("done"), Some(4)), "{summary}");
    let synced = grid.library_dir("desktop").join("tools/1");
    assert_eq!(std::fs::read_to_string(synced.join("run.sh")).unwrap(), LIBRARY_SCRIPT, "fetched as stored");
    assert!(synced.join(".synced").is_file());
    let desktop_log = std::fs::read_to_string(grid.path("desktop.stderr")).unwrap();
    assert!(desktop_log.contains("syncing a library from the object store") && desktop_log.contains("library synced"), "{desktop_log}");
    let libraries = grid.json(&["library", "ls"]).expect("library ls");
    assert_eq!(strings(&libraries["libraries"][0]["held_by"]), ["blade", "desktop"], "{libraries}");
    let mut ran: Vec<String> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    ran.sort();
    assert!(ran.iter().any(|name| name.starts_with("desktop-")), "the desktop ran tasks once synced: {ran:?}");
    for name in &ran {
        assert_eq!(std::fs::read_to_string(out.join(name)).unwrap(), "library-v1\n", "{name}");
    }

    // ---- blacklisting -------------------------------------------------------------------
    let job = grid.write(
        "flaky.toml",
        r#"id = "flaky"
tasks = 2
max_attempts = 3
engine_blacklisting = true
failures_before_blacklist = 1

[task]
argv = ["sh", "-c", "test \"$GRIDFOLD_ENGINE\" != blade && sleep 3"]
"#,
    );
    grid.ok(&["submit", &job]);
    // The blade (first tier) fails one task and is blacklisted; the other task runs on
    // the desktop, so the retry waits, and `why` names the blacklist as what keeps it
    // off the blade.
    let waiting = grid.wait_for("a retry kept off the blacklisted blade", || {
        for index in 0..2 {
            let Some(why) = grid.json(&["why", &format!("flaky/{index}")]) else { continue };
            if why["kind"] == "waiting" && strings(&why["excluded"]["blacklisted"]) == ["blade"] {
                return Ok(why);
            }
        }
        Err("no task waiting with the blade blacklisted yet".to_string())
    });
    assert_eq!(strings(&waiting["excluded"]["no-free-slot"]), ["desktop"], "{waiting}");
    let text = grid.ok(&["why", waiting["task"].as_str().unwrap()]);
    assert!(text.contains("excluded by blacklisted: blade"), "{text}");

    let summary = grid.wait_job_ended("flaky");
    assert_eq!((summary["status"].as_str(), summary["done"].as_u64()), (Some("done"), Some(2)), "{summary}");
    assert_eq!(summary["blacklisted_engines"], 1, "{summary}");
    // Of an ended task, why explains its last dispatch from the state that dispatch
    // was decided on: the retry went to the desktop, the blade blacklisted then.
    let why = grid.json(&["why", waiting["task"].as_str().unwrap()]).expect("why");
    assert_eq!((why["state"].as_str(), why["attempt"].as_u64(), why["engine"].as_str()), (Some("done"), Some(2), Some("desktop")), "{why}");
    let then = &why["explanation_at_based_on_seq"];
    assert!(why["based_on_seq"].as_u64().unwrap() < why["dispatch_seq"].as_u64().unwrap(), "{why}");
    assert_eq!(strings(&then["excluded"]["blacklisted"]), ["blade"], "the blade was blacklisted when the retry was decided: {why}");
    assert_eq!(strings(&then["fit_now"]), ["desktop"], "only the desktop could take it then: {why}");

    let listed = grid.json(&["blacklist", "ls", "flaky"]).expect("blacklist ls");
    let flaky = &listed["jobs"][0];
    assert_eq!(strings(&flaky["blacklist"]), ["blade"], "{listed}");
    assert_eq!(flaky["failures_by_engine"]["blade"], 1, "{listed}");
    assert_eq!((flaky["engine_blacklisting"].as_bool(), flaky["failures_before_blacklist"].as_u64()), (Some(true), Some(1)));
    let unknown = grid.run(&["blacklist", "ls", "nope"]);
    assert_eq!(unknown.status.code(), Some(1), "{}", grid.report(&unknown));

    grid.ok(&["blacklist", "clear"]);
    grid.wait_for("the blacklists to be cleared", || {
        let listed = grid.json(&["blacklist", "ls", "flaky"]).ok_or("no answer")?;
        let flaky = &listed["jobs"][0];
        if strings(&flaky["blacklist"]).is_empty() && flaky["failures_by_engine"] == serde_json::json!({}) {
            Ok(())
        } else {
            Err(listed.to_string())
        }
    });
}
