//! The whole system as users run it, under faults: a real nats-server (one per test),
//! real `gridfold projector` and `gridfold engine` processes, real job and policy
//! files, and the user's commands (`submit`, `policy apply`, `stat --json`, `export`,
//! `replay`). Each test then reads the whole log back and folds it itself to check
//! what happened, entry by entry.
//!
//! - [`three_engines_run_300_tasks_each_completed_exactly_once`]
//! - [`an_engine_killed_mid_task_is_declared_lost_and_its_tasks_run_elsewhere`]
//! - [`a_projector_killed_mid_run_restarts_and_every_replay_agrees`]
//! - [`a_nats_server_restart_mid_run_loses_nothing`]
//! - [`bad_input_on_the_live_system_is_stored_once_or_rejected_and_changes_nothing_else`]
//! - [`two_projectors_one_writer_and_the_standby_takes_over_from_a_killed_leader`]
//! - [`a_leader_paused_past_its_lease_publishes_nothing_when_it_resumes`]
//! - [`an_engine_killed_and_restarted_under_its_name_leaves_its_old_attempts_to_others`]
//! - [`a_bad_job_file_and_a_dead_broker_are_clear_errors`]
//!
//! The harness ([`Grid`]) owns the server, a temporary directory and every process it
//! started; each child's stdout and stderr go to files there, and every process is
//! killed and reaped when the grid is dropped (a failing test included). Waits poll a
//! condition ([`Grid::wait_for`]) with a deadline; a wait that times out, or a process
//! that exits while the test expects it to run, fails with what was last seen, the tail
//! of every process's stderr and of the server's log.
//!
//! Every test first applies a policy with short timeouts (an engine silent 3 s is lost,
//! a dispatch not started in 5 s is requeued) and runs engines heartbeating every
//! second, so faults are noticed within seconds.

use crate::support;

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use gridfold::core::event::{EngineLoad, Envelope, Event, Order, Payload};
use gridfold::core::fold::fold_events;
use gridfold::core::ids::{Attempt, EngineId, JobId, Seq, TaskRef};
use gridfold::core::reject::Rejection;
use gridfold::core::state::{EngineStatus, JobStatus, State, TaskStatus};
use gridfold::log::jetstream::{JetStreamLog, LogConfig};
use gridfold::log::nats_server::NatsServer;
use gridfold::log::{Append, Appended, EventLog, RawEntry, read_to_end};
use gridfold::projector::query::{JobSummary, StateSummary};
use gridfold::wire;

/// The longest any one wait may take; a hang is a failure with what was seen.
const WAIT: Duration = Duration::from_secs(40);
/// How often a condition is polled.
const POLL: Duration = Duration::from_millis(150);
/// Set to keep each test's directory (job files, every process's stdout and stderr).
const KEEP_ENV: &str = "GRIDFOLD_TEST_KEEP";
/// Lines of each stderr shown when a test fails.
const TAIL_LINES: usize = 25;

const POLICY: &str = "\
# Short timeouts, so that faults are noticed within seconds.
engine_timeout_secs = 3
dispatch_timeout_secs = 5
";

// ---- processes ----------------------------------------------------------------------

/// A `gridfold` child process with its output in files. Killed (SIGKILL) and reaped on drop.
struct Proc {
    name: String,
    /// `None` once reaped; the pid is signalled only while the child is unreaped.
    child: Option<Child>,
    exit: Option<ExitStatus>,
    stdout: PathBuf,
    stderr: PathBuf,
    /// The test stops this process itself; if it exits on its own, the next wait fails.
    expect_running: bool,
}

impl Proc {
    fn spawn(dir: &Path, name: &str, args: &[OsString]) -> Proc {
        let stdout = dir.join(format!("{name}.stdout"));
        let stderr = dir.join(format!("{name}.stderr"));
        let child = Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
            .args(args)
            .current_dir(dir)
            .env(
                "RUST_LOG",
                "warn,gridfold::projector::service=info,gridfold::engine=info",
            )
            .env("NO_COLOR", "1")
            .env_remove("NATS_URL")
            .stdin(Stdio::null())
            .stdout(File::create(&stdout).expect("create a stdout file"))
            .stderr(File::create(&stderr).expect("create a stderr file"))
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start gridfold {name}: {err}"));
        Proc {
            name: name.to_string(),
            child: Some(child),
            exit: None,
            stdout,
            stderr,
            expect_running: true,
        }
    }

    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends `signal` to this child, by its pid, while it is unreaped (so the pid is still ours).
    fn signal(&self, signal: libc::c_int) {
        let child = self
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("{} was already reaped", self.name));
        let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) on the pid of a child we have not reaped: it cannot be another process.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(
            sent,
            0,
            "kill({pid}, {signal}) of {}: {}",
            self.name,
            std::io::Error::last_os_error()
        );
    }

    /// Its exit status if it has exited (reaping it), `None` while it runs.
    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if let Some(child) = &mut self.child
            && let Some(status) = child.try_wait().expect("try_wait on a child")
        {
            self.exit = Some(status);
            self.child = None;
        }
        self.exit
    }

    /// Waits up to `timeout` for it to exit.
    fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// One of the grid's processes.
#[derive(Debug, Clone, Copy)]
struct P(usize);

/// What a finished command printed.
#[derive(Debug)]
struct Output {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

// ---- the grid -----------------------------------------------------------------------

/// A nats-server, a temporary directory and the processes of one test.
struct Grid {
    /// Declared first: dropped (killed) before the server.
    procs: Vec<Proc>,
    server: NatsServer,
    runtime: tokio::runtime::Runtime,
    commands_run: Cell<usize>,
    dir: tempfile::TempDir,
}

impl Grid {
    /// A fresh nats-server (the test fails, saying why, if none can start) with the
    /// short-timeout policy applied.
    fn start() -> Grid {
        let server = support::nats::start();
        let mut dir = tempfile::Builder::new()
            .prefix("gridfold-grid-")
            .tempdir()
            .expect("a temporary directory");
        if std::env::var_os(KEEP_ENV).is_some() {
            dir.disable_cleanup(true);
            eprintln!("{KEEP_ENV}: keeping {}", dir.path().display());
        }
        let grid = Grid {
            procs: Vec::new(),
            server,
            runtime: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a tokio runtime"),
            commands_run: Cell::new(0),
            dir,
        };
        // Only the projector or `gridfold setup` makes the streams: an operator's first step.
        grid.gridfold_ok(&["setup", "--nats", &grid.url()]);
        let policy = grid.write("policy.toml", POLICY);
        grid.gridfold_ok(&[
            "policy".as_ref(),
            "apply".as_ref(),
            policy.as_os_str(),
            "--nats".as_ref(),
            grid.url().as_ref(),
            // No projector runs yet to give a verdict: do not wait for one.
            "--wait-secs".as_ref(),
            "0".as_ref(),
        ]);
        grid
    }

    fn url(&self) -> String {
        self.server.url()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text)
            .unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
        path
    }

    fn proc(&mut self, p: P) -> &mut Proc {
        &mut self.procs[p.0]
    }

    fn spawn(&mut self, name: &str, args: &[&str]) -> P {
        assert!(
            self.procs.iter().all(|proc| proc.name != name),
            "two processes named {name}"
        );
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        self.procs.push(Proc::spawn(self.dir.path(), name, &args));
        P(self.procs.len() - 1)
    }

    /// `gridfold projector` with the state directory `<tmp>/<name>` (kept across restarts
    /// under the same name: the process is named `<name>`, `<name>-2`, …).
    fn projector(&mut self, name: &str, extra: &[&str]) -> P {
        let state = self.path(name).display().to_string();
        let url = self.url();
        let runs = self
            .procs
            .iter()
            .filter(|p| p.name == name || p.name.starts_with(&format!("{name}-")))
            .count();
        let proc_name = if runs == 0 {
            name.to_string()
        } else {
            format!("{name}-{}", runs + 1)
        };
        let mut args = vec![
            "projector",
            "--nats",
            &url,
            "--state",
            &state,
            "--check-invariants",
            "--register-key",
        ];
        args.extend_from_slice(extra);
        self.spawn(&proc_name, &args)
    }

    /// `gridfold engine` named `name` with `slots` slots, 1 s heartbeats and a 2 s drain.
    /// Projector "a", which leads, then "b", which stands by, both with `extra` arguments.
    fn leader_and_standby(&mut self, extra: &[&str]) -> (P, P) {
        let a = self.projector("a", extra);
        self.wait_stderr(a, "leader: ");
        let b = self.projector("b", extra);
        self.wait_stderr(b, "standby: another projector holds the lease");
        (a, b)
    }

    /// Starts the engines `names` with `slots` slots each, and waits for all to log in.
    fn engines_logged_in<const N: usize>(&mut self, names: &[&str; N], slots: u32) -> [P; N] {
        let engines = names.map(|name| self.engine(name, slots));
        self.wait_logged_in(names);
        engines
    }

    fn engine(&mut self, name: &str, slots: u32) -> P {
        self.engine_named(name, name, slots)
    }

    /// An engine process called `process` running engine `name` (to start one name again).
    fn engine_named(&mut self, process: &str, name: &str, slots: u32) -> P {
        let url = self.url();
        let work_dir = self.path(&format!("work-{name}")).display().to_string();
        let slots = slots.to_string();
        self.spawn(
            process,
            &[
                "engine",
                "--nats",
                &url,
                "--name",
                name,
                "--slots",
                &slots,
                "--work-dir",
                &work_dir,
                "--heartbeat-secs",
                "1",
                "--drain-timeout-secs",
                "2",
            ],
        )
    }

    /// SIGKILL, then reap.
    fn kill9(&mut self, p: P) {
        let proc = self.proc(p);
        proc.expect_running = false;
        proc.signal(libc::SIGKILL);
        let status = proc.wait_exit(Duration::from_secs(10));
        assert!(status.is_some(), "{} did not die of SIGKILL", proc.name);
    }

    /// SIGTERM; waits for a clean exit (status 0) and returns its standard output.
    fn terminate(&mut self, p: P) -> String {
        let proc = self.proc(p);
        proc.expect_running = false;
        proc.signal(libc::SIGTERM);
        match proc.wait_exit(Duration::from_secs(20)) {
            Some(status) if status.success() => self.proc(p).stdout(),
            Some(status) => self.fail(&format!(
                "{} exited with {status} on SIGTERM",
                self.procs[p.0].name
            )),
            None => self.fail(&format!(
                "{} did not stop within 20 s of SIGTERM",
                self.procs[p.0].name
            )),
        }
    }

    /// Runs one `gridfold` command to its end (at most 60 s) and returns what it printed.
    fn gridfold<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        let n = self.commands_run.get() + 1;
        self.commands_run.set(n);
        let out_path = self.path(&format!("command-{n}.stdout"));
        let err_path = self.path(&format!("command-{n}.stderr"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
            .args(args)
            .current_dir(self.dir.path())
            .env_remove("NATS_URL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(File::create(&out_path).unwrap())
            .stderr(File::create(&err_path).unwrap())
            .spawn()
            .expect("run gridfold");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                let shown: Vec<_> = args
                    .iter()
                    .map(|a| a.as_ref().to_string_lossy().into_owned())
                    .collect();
                self.fail(&format!("gridfold {shown:?} did not finish within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let output = Output {
            status,
            stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
            stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        };
        let _ = std::fs::remove_file(out_path);
        let _ = std::fs::remove_file(err_path);
        output
    }

    /// Runs a command that must succeed; its standard output.
    fn gridfold_ok<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> String {
        let output = self.gridfold(args);
        if !output.status.success() {
            let shown: Vec<_> = args
                .iter()
                .map(|a| a.as_ref().to_string_lossy().into_owned())
                .collect();
            self.fail(&format!(
                "gridfold {shown:?} failed ({}):\n{}\n{}",
                output.status, output.stdout, output.stderr
            ));
        }
        output.stdout
    }

    /// A job file: `tasks` tasks running `argv`.
    fn job_file(&self, id: &str, tasks: u32, argv: &[&str]) -> PathBuf {
        let argv: Vec<String> = argv.iter().map(|arg| format!("{arg:?}")).collect();
        self.write(
            &format!("{id}.toml"),
            &format!(
                "id = \"{id}\"\nowner = \"tester\"\ntasks = {tasks}\n\n[task]\nargv = [{}]\n",
                argv.join(", ")
            ),
        )
    }

    /// `gridfold submit JOB.toml --json`; the sequence it was stored at.
    fn submit(&self, id: &str, tasks: u32, argv: &[&str]) -> u64 {
        let file = self.job_file(id, tasks, argv);
        let stdout = self.gridfold_ok(&[
            "submit".as_ref(),
            file.as_os_str(),
            "--json".as_ref(),
            "--nats".as_ref(),
            self.url().as_ref(),
        ]);
        let answer: serde_json::Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|err| panic!("submit --json: {err}: {stdout}"));
        assert_eq!(answer["job"], id, "{answer}");
        assert_eq!(answer["tasks"], tasks, "{answer}");
        answer["seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("no seq in {answer}"))
    }

    /// `gridfold stat --json`, or why not.
    fn stat(&self) -> Result<StateSummary, String> {
        let output = self.gridfold(&["stat", "--json", "--nats", &self.url()]);
        if !output.status.success() {
            return Err(format!(
                "gridfold stat failed ({}): {}",
                output.status,
                output.stderr.trim()
            ));
        }
        serde_json::from_str(output.stdout.trim())
            .map_err(|err| format!("gridfold stat --json: {err}: {}", output.stdout))
    }

    /// `gridfold replay --json ARGS...` (exit 0 required), parsed.
    fn replay_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["replay", "--json"];
        all.extend_from_slice(args);
        let stdout = self.gridfold_ok(&all);
        serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("replay --json: {err}: {stdout}"))
    }

    /// Every entry of the log as it is now, read through the library as a projector does.
    fn raw_log(&self) -> Vec<RawEntry> {
        let config = LogConfig {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            ..LogConfig::default()
        };
        self.runtime
            .block_on(async {
                let log = JetStreamLog::connect(&self.url(), config).await?;
                read_to_end(&log, 1).await?.collect().await
            })
            .unwrap_or_else(|err| self.fail(&format!("reading the whole log: {err}")))
    }

    /// A connection to the log for publishing as an outside client.
    fn log(&self) -> JetStreamLog {
        self.runtime
            .block_on(JetStreamLog::connect(&self.url(), LogConfig::default()))
            .unwrap_or_else(|err| self.fail(&format!("connecting to the log: {err}")))
    }

    fn append(&self, log: &JetStreamLog, append: Append) -> Appended {
        self.runtime
            .block_on(log.append(append))
            .unwrap_or_else(|err| self.fail(&format!("appending to the log: {err}")))
    }

    /// Polls `check` until it answers `Ok`, failing after [`WAIT`] with its last `Err`
    /// (what it saw), or at once when a process the test did not stop has exited.
    fn wait_for<T>(&mut self, what: &str, mut check: impl FnMut(&Grid) -> Result<T, String>) -> T {
        let started = Instant::now();
        loop {
            let seen = match check(self) {
                Ok(done) => return done,
                Err(seen) => seen,
            };
            let exited: Vec<String> = self
                .procs
                .iter_mut()
                .filter(|proc| proc.expect_running)
                .filter_map(|proc| {
                    proc.poll_exit()
                        .map(|status| format!("{} ({status})", proc.name))
                })
                .collect();
            if !exited.is_empty() {
                self.fail(&format!(
                    "waiting for {what}: {} exited on its own; last seen: {seen}",
                    exited.join(", ")
                ));
            }
            if started.elapsed() >= WAIT {
                self.fail(&format!(
                    "waiting for {what}: not within {WAIT:?}; last seen: {seen}"
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits until `gridfold stat` shows every engine in `names` logged in.
    fn wait_logged_in(&mut self, names: &[&str]) {
        self.wait_for(&format!("engines {names:?} to log in"), |grid| {
            let stat = grid.stat()?;
            let logged_in: BTreeSet<&str> = stat
                .engines
                .iter()
                .filter(|e| e.status == "logged-in")
                .map(|e| e.id.as_str())
                .collect();
            if names.iter().all(|name| logged_in.contains(name)) {
                Ok(())
            } else {
                Err(format!("logged in: {logged_in:?}"))
            }
        });
    }

    /// Waits until `gridfold stat` shows job `id` done, never with more tasks done than it has.
    fn wait_job_done(&mut self, id: &str, tasks: u32) -> StateSummary {
        self.wait_for(&format!("job {id} to be done"), |grid| {
            let stat = grid.stat()?;
            let job = job_in(&stat, id).ok_or_else(|| format!("no job {id} in {stat}"))?;
            if job.done > tasks || job.tasks != tasks {
                grid.fail(&format!("job {id} should have {tasks} tasks: {job:?}"));
            }
            match job.status.as_str() {
                "done" => Ok(stat.clone()),
                "active" => Err(format!("{job:?}")),
                other => grid.fail(&format!("job {id} ended {other}:\n{stat}")),
            }
        })
    }

    /// Waits until `gridfold stat` shows at least `done` tasks of job `id` done.
    fn wait_tasks_done(&mut self, id: &str, done: u32) -> StateSummary {
        self.wait_for(&format!("{done} tasks of {id} done"), |grid| {
            let stat = grid.stat()?;
            let job = job_in(&stat, id).ok_or_else(|| format!("no job {id} yet"))?;
            if job.done >= done {
                Ok(stat.clone())
            } else {
                Err(format!("{job:?}"))
            }
        })
    }

    /// Waits until the given process has written `text` on its stderr.
    fn wait_stderr(&mut self, p: P, text: &str) {
        let name = self.procs[p.0].name.clone();
        self.wait_for(&format!("{name} to say {text:?}"), |grid| {
            if grid.procs[p.0].stderr().contains(text) {
                Ok(())
            } else {
                Err("not yet".into())
            }
        });
    }

    /// Panics with `message`, every process's stderr tail and the server's log tail.
    fn fail(&self, message: &str) -> ! {
        let mut report = format!("{message}\n");
        for proc in &self.procs {
            let state = match (&proc.exit, &proc.child) {
                (Some(status), _) => format!("exited: {status}"),
                (None, Some(child)) => format!("pid {}", child.id()),
                (None, None) => "gone".to_string(),
            };
            report.push_str(&format!(
                "--- {} ({state}); last lines of stderr:\n{}\n",
                proc.name,
                tail(&proc.stderr(), TAIL_LINES)
            ));
        }
        report.push_str(&format!(
            "--- nats-server log:\n{}\n",
            self.server.log_tail(10)
        ));
        report.push_str(&format!(
            "(set {KEEP_ENV}=1 to keep this test's directory, {}, with every process's output)\n",
            self.dir.path().display()
        ));
        panic!("{report}");
    }
}

fn job_in<'a>(stat: &'a StateSummary, id: &str) -> Option<&'a JobSummary> {
    stat.jobs.iter().find(|job| job.id == id)
}

fn task(job: &str, index: u32) -> TaskRef {
    TaskRef::new(JobId::new(job).unwrap(), index)
}

fn engine_id(name: &str) -> EngineId {
    EngineId::new(name).unwrap()
}

// ---- reading the log back -------------------------------------------------------------

/// The log folded by the test itself, with what each entry did.
struct Audit {
    state: State,
    entries: Vec<gridfold::core::event::Entry>,
    /// Rejections, by the sequence of the entry that was rejected.
    rejected: BTreeMap<u64, Vec<Rejection>>,
    /// Accepted `TaskCompleted`s (the fold rejected nothing): task -> (seq, attempt, engine).
    completions: BTreeMap<TaskRef, Vec<(u64, Attempt, EngineId)>>,
    /// Every `Dispatch` order in every batch on the log, applied or not.
    dispatches: BTreeMap<(TaskRef, Attempt), Vec<EngineId>>,
    /// `TaskStarted` reports, and the attempts reported ended (completed or failed), by engine.
    started: BTreeSet<(EngineId, TaskRef, Attempt)>,
    ended: BTreeSet<(EngineId, TaskRef, Attempt)>,
    /// `EngineLost` orders, with the sequence of their batch.
    lost: Vec<(u64, EngineId)>,
    order_batches: u64,
}

/// Waits for `engine` (process `p`) to report an attempt started and not ended, kills
/// it with SIGKILL, and returns the attempts it held running then.
fn kill9_mid_attempt(grid: &mut Grid, p: P, engine: &str) -> BTreeSet<(TaskRef, Attempt)> {
    let id = engine_id(engine);
    grid.wait_for(&format!("{engine} to start an attempt"), |grid| {
        let audit = Audit::of(&grid.raw_log());
        if !audit.running_on(&id).is_empty() {
            Ok(())
        } else {
            Err(format!("{} starts on the log", audit.started.len()))
        }
    });
    grid.kill9(p);
    let held = Audit::of(&grid.raw_log()).running_on(&id);
    assert!(
        !held.is_empty(),
        "{engine} held running attempts when it was killed"
    );
    held
}

impl Audit {
    /// The attempts `engine` reported started and not (yet) ended.
    fn running_on(&self, engine: &EngineId) -> BTreeSet<(TaskRef, Attempt)> {
        self.started
            .iter()
            .filter(|s| s.0 == *engine && !self.ended.contains(s))
            .map(|(_, task, attempt)| (task.clone(), *attempt))
            .collect()
    }

    fn of(raw: &[RawEntry]) -> Audit {
        for (at, entry) in raw.iter().enumerate() {
            assert_eq!(
                entry.seq,
                at as u64 + 1,
                "the log has a gap or repeats before entry {}",
                entry.seq
            );
        }
        let mut audit = Audit {
            state: State::new(),
            entries: Vec::with_capacity(raw.len()),
            rejected: BTreeMap::new(),
            completions: BTreeMap::new(),
            dispatches: BTreeMap::new(),
            started: BTreeSet::new(),
            ended: BTreeSet::new(),
            lost: Vec::new(),
            order_batches: 0,
        };
        for raw in raw {
            let entry = wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload);
            let gridfold::core::fold::Folded { rejections, applied, .. } = fold_events(&mut audit.state, &entry);
            audit.state.check_invariants();
            for (event, accepted) in entry.events().zip(applied) {
                match event {
                    Event::TaskStarted {
                        task,
                        attempt,
                        engine,
                        ..
                    } => {
                        audit
                            .started
                            .insert((engine.clone(), task.clone(), *attempt));
                    }
                    Event::TaskCompleted {
                        task,
                        attempt,
                        engine,
                        ..
                    } => {
                        audit.ended.insert((engine.clone(), task.clone(), *attempt));
                        if accepted {
                            audit.completions.entry(task.clone()).or_default().push((
                                raw.seq,
                                *attempt,
                                engine.clone(),
                            ));
                        }
                    }
                    Event::TaskFailed {
                        task,
                        attempt,
                        engine,
                        ..
                    } => {
                        audit.ended.insert((engine.clone(), task.clone(), *attempt));
                    }
                    Event::OrderBatch(batch) if raw.subject == wire::ORDERS_SUBJECT => {
                        audit.order_batches += 1;
                        for order in &batch.orders {
                            match order {
                                Order::Dispatch {
                                    task,
                                    attempt,
                                    engine, ..
                                } => {
                                    audit
                                        .dispatches
                                        .entry((task.clone(), *attempt))
                                        .or_default()
                                        .push(engine.clone());
                                }
                                Order::EngineLost { engine, .. } => {
                                    audit.lost.push((raw.seq, engine.clone()))
                                }
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
            }
            if !rejections.is_empty() {
                audit.rejected.insert(raw.seq, rejections);
            }
            audit.entries.push(entry);
        }
        audit
    }

    fn rejections_of_kind(&self, kind: &str) -> Vec<(u64, &Rejection)> {
        self.rejected
            .iter()
            .flat_map(|(seq, rejections)| rejections.iter().map(move |r| (*seq, r)))
            .filter(|(_, r)| r.kind_name() == kind)
            .collect()
    }

    /// Job `job` is done, each of its `tasks` tasks with exactly one accepted completion.
    fn assert_done_exactly_once(&self, job: &str, tasks: u32) {
        let idx = self
            .state
            .job_idx(&JobId::new(job).unwrap())
            .unwrap_or_else(|| panic!("no job {job} on the log"));
        let folded = self.state.job(idx);
        assert_eq!(
            folded.status,
            JobStatus::Done,
            "job {job}: {:?}",
            folded.counts
        );
        assert_eq!(
            folded.n_tasks(),
            tasks,
            "job {job} has {} tasks",
            folded.n_tasks()
        );
        assert_eq!(folded.counts.done, tasks, "job {job}: {:?}", folded.counts);
        for index in 0..tasks {
            let task = task(job, index);
            let key = self.state.task_key(&task).unwrap();
            assert_eq!(self.state.task(key).status, TaskStatus::Done, "{task}");
            match self.completions.get(&task).map(Vec::as_slice) {
                Some([_]) => {}
                other => panic!("task {task} has {other:?} accepted completions, not exactly one"),
            }
        }
        let extra: Vec<_> = self
            .completions
            .keys()
            .filter(|t| t.job.as_str() == job && t.index >= tasks)
            .collect();
        assert!(
            extra.is_empty(),
            "completions of tasks job {job} does not have: {extra:?}"
        );
    }

    /// No (task, attempt) appears in two `Dispatch` orders.
    fn assert_no_attempt_dispatched_twice(&self) {
        let twice: Vec<_> = self
            .dispatches
            .iter()
            .filter(|(_, engines)| engines.len() > 1)
            .collect();
        assert!(twice.is_empty(), "dispatched more than once: {twice:?}");
    }
}

/// `gridfold replay --json` output fields.
fn digest_at(replay: &serde_json::Value) -> (u64, String) {
    (
        replay["last_seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("no last_seq in {replay}")),
        replay["chain_digest"]
            .as_str()
            .unwrap_or_else(|| panic!("no chain_digest in {replay}"))
            .to_string(),
    )
}

fn assert_verified(replay: &serde_json::Value) {
    assert_eq!(replay["verified"], true, "{replay:#}");
    assert!(replay["divergence"].is_null(), "{replay:#}");
    assert!(
        replay["batches_verified"].as_u64().unwrap() > 0,
        "{replay:#}"
    );
}

/// `projector stopped: folded through sequence N (digest D), …` from its stdout.
fn projector_report(stdout: &str) -> (u64, String) {
    let line = stdout
        .lines()
        .find(|line| line.starts_with("projector stopped: "))
        .unwrap_or_else(|| panic!("no report line in the projector's stdout:\n{stdout}"));
    let seq = line
        .split("folded through sequence ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next());
    let digest = line
        .split("(digest ")
        .nth(1)
        .and_then(|rest| rest.split(')').next());
    match (seq.and_then(|s| s.parse().ok()), digest) {
        (Some(seq), Some(digest)) => (seq, digest.to_string()),
        _ => panic!("cannot read the projector's report: {line}"),
    }
}

fn batches_published(stdout: &str) -> u64 {
    stdout
        .split(" batches published")
        .next()
        .and_then(|before| before.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no batch count in the projector's report:\n{stdout}"))
}

// ---- 1 --------------------------------------------------------------------------------

#[test]
fn three_engines_run_300_tasks_each_completed_exactly_once() {
    const TASKS: u32 = 300;
    let mut grid = Grid::start();
    grid.projector("projector", &[]);
    grid.engines_logged_in(&["e1", "e2", "e3"], 4);
    grid.submit("many", TASKS, &["true"]);
    let stat = grid.wait_job_done("many", TASKS);
    assert_eq!(stat.tasks_done, u64::from(TASKS), "{stat}");

    let audit = Audit::of(&grid.raw_log());
    audit.assert_done_exactly_once("many", TASKS);
    audit.assert_no_attempt_dispatched_twice();
    let by_engine: BTreeMap<&str, usize> =
        audit
            .completions
            .values()
            .flatten()
            .fold(BTreeMap::new(), |mut n, (_, _, e)| {
                *n.entry(e.as_str()).or_default() += 1;
                n
            });
    assert_eq!(by_engine.len(), 3, "every engine ran tasks: {by_engine:?}");

    let replay = grid.replay_json(&["--verify", "--nats", &grid.url()]);
    assert_verified(&replay);
    assert!(replay["tasks_done"] == TASKS, "{replay:#}");
}

// ---- 2 --------------------------------------------------------------------------------

#[test]
fn an_engine_killed_mid_task_is_declared_lost_and_its_tasks_run_elsewhere() {
    const TASKS: u32 = 12;
    let mut grid = Grid::start();
    grid.projector("projector", &[]);
    let [e1, _, _] = grid.engines_logged_in(&["e1", "e2", "e3"], 2);
    grid.submit("slow", TASKS, &["sleep", "2"]);

    // Kill e1 as soon as the log shows it running an attempt it has not finished.
    let e1_id = engine_id("e1");
    let held = kill9_mid_attempt(&mut grid, e1, "e1");

    grid.wait_job_done("slow", TASKS);
    let audit = Audit::of(&grid.raw_log());
    audit.assert_done_exactly_once("slow", TASKS);
    audit.assert_no_attempt_dispatched_twice();
    assert!(
        audit.lost.iter().any(|(_, engine)| *engine == e1_id),
        "an EngineLost order for e1 is on the log: {:?}",
        audit.lost
    );
    let e1_idx = audit.state.engine_idx(&e1_id).unwrap();
    assert_eq!(audit.state.engine(e1_idx).status, EngineStatus::Lost);
    for (task, attempt) in &held {
        let completions = &audit.completions[task];
        let (_, done_attempt, done_by) = &completions[0];
        assert!(
            *done_by != e1_id && done_attempt > attempt,
            "{task} (attempt {attempt} held by the killed e1) ran again elsewhere: {completions:?}"
        );
    }
    let replay = grid.replay_json(&["--verify", "--nats", &grid.url()]);
    assert_verified(&replay);
}

// ---- 3 --------------------------------------------------------------------------------

#[test]
fn a_projector_killed_mid_run_restarts_and_every_replay_agrees() {
    const TASKS: u32 = 40;
    let mut grid = Grid::start();
    let first = grid.projector("projector", &["--snapshot-every", "20"]);
    let engines = grid.engines_logged_in(&["e1", "e2"], 2);
    grid.submit("job", TASKS, &["sleep", "0.2"]);

    let stat = grid.wait_tasks_done("job", 10);
    assert!(job_in(&stat, "job").unwrap().done < TASKS, "killed mid-run");
    grid.wait_stderr(first, "snapshot written");
    grid.kill9(first);

    let second = grid.projector("projector", &["--snapshot-every", "20"]);
    grid.wait_job_done("job", TASKS);
    let second_log = grid.proc(second).stderr();
    assert!(
        second_log.contains("from the snapshot after sequence"),
        "resumed from its snapshot:\n{second_log}"
    );

    // Quiesce: engines log out, then the projector stops and reports where it folded to.
    for engine in engines {
        let stdout = grid.terminate(engine);
        assert!(stdout.is_empty(), "{stdout}");
    }
    let end = grid.raw_log().len() as u64;
    grid.wait_for(
        &format!("the projector to fold the engines' last entries (to seq {end})"),
        |grid| {
            let stat = grid.stat()?;
            if stat.last_seq >= end {
                Ok(())
            } else {
                Err(format!("folded to seq {}", stat.last_seq))
            }
        },
    );
    let (projector_seq, projector_digest) = projector_report(&grid.terminate(second));

    let url = grid.url();
    let from_broker = grid.replay_json(&["--verify", "--nats", &url]);
    assert_verified(&from_broker);
    let export = grid.path("history.jsonl");
    let said = grid.gridfold_ok(&[
        "export".as_ref(),
        "--out".as_ref(),
        export.as_os_str(),
        "--nats".as_ref(),
        url.as_ref(),
    ]);
    assert!(said.starts_with("exported "), "{said}");
    let export = export.display().to_string();
    let from_file = grid.replay_json(&["--verify", "--file", &export]);
    assert_verified(&from_file);
    assert_eq!(
        digest_at(&from_broker),
        digest_at(&from_file),
        "the broker and the exported file replay alike"
    );

    let at = projector_seq.to_string();
    let at_projector = grid.replay_json(&["--file", &export, "--at", &at]);
    assert_eq!(
        digest_at(&at_projector),
        (projector_seq, projector_digest),
        "the projector's view is the replay's"
    );

    let audit = Audit::of(&grid.raw_log());
    audit.assert_done_exactly_once("job", TASKS);
    audit.assert_no_attempt_dispatched_twice();
    assert_eq!(
        (audit.state.last_seq.0, audit.state.chain.to_hex()),
        digest_at(&from_file)
    );
    // What the projector had not folded when it stopped can only be its own last ticks.
    let after: Vec<_> = audit.entries[projector_seq as usize..]
        .iter()
        .filter(|e| {
            !matches!(
                &e.payload,
                Payload::Event(Envelope {
                    event: Event::Tick,
                    ..
                })
            )
        })
        .map(|e| e.seq.0)
        .collect();
    assert!(
        after.is_empty(),
        "entries after the projector's last ({projector_seq}) that are not ticks: {after:?}"
    );
}

// ---- 4 --------------------------------------------------------------------------------

#[test]
fn a_nats_server_restart_mid_run_loses_nothing() {
    const TASKS: u32 = 40;
    let mut grid = Grid::start();
    grid.projector("projector", &[]);
    grid.engines_logged_in(&["e1", "e2"], 2);
    grid.submit("job", TASKS, &["sleep", "0.2"]);
    let before = grid.wait_tasks_done("job", 8);
    assert!(
        job_in(&before, "job").unwrap().done < TASKS,
        "restarted mid-run"
    );
    let entries_before = grid.raw_log().len() as u64;

    support::nats::restart(&mut grid.server);
    let after = grid.wait_job_done("job", TASKS);

    let raw = grid.raw_log();
    assert!(
        raw.len() as u64 >= after.last_seq && after.last_seq > entries_before,
        "{} entries, stat at {}",
        raw.len(),
        after.last_seq
    );
    let audit = Audit::of(&raw); // also checks that the sequences have no gap
    audit.assert_done_exactly_once("job", TASKS);
    audit.assert_no_attempt_dispatched_twice();
    // Both engines came back by themselves: each completed tasks after the restart.
    for engine in ["e1", "e2"] {
        let after_restart = audit
            .completions
            .values()
            .flatten()
            .filter(|(seq, _, by)| *seq > entries_before && by.as_str() == engine)
            .count();
        assert!(
            after_restart > 0,
            "{engine} completed nothing after the restart"
        );
    }
    // The projector's view (stat) is the fold of the log up to the same sequence.
    let upto = Audit::of(&raw[..after.last_seq as usize]);
    assert_eq!(
        upto.state.chain.to_hex(),
        after.chain_digest,
        "stat agrees with a fold of the log to seq {}",
        after.last_seq
    );
    let replay = grid.replay_json(&["--verify", "--nats", &grid.url()]);
    assert_verified(&replay);
}

// ---- 5 --------------------------------------------------------------------------------

#[test]
fn bad_input_on_the_live_system_is_stored_once_or_rejected_and_changes_nothing_else() {
    let mut grid = Grid::start();
    grid.projector("projector", &[]);
    grid.engines_logged_in(&["e1", "e2"], 2);
    grid.submit("main", 8, &["sleep", "0.3"]);
    let log = grid.log();

    // A submission published twice with the same Nats-Msg-Id: the broker stores it once.
    let spec = gridfold::files::jobfile::parse_job(
        "id = \"dup\"\ntasks = 4\n[task]\nargv = [\"true\"]\n",
        "dup.toml",
        "tester",
    )
    .unwrap();
    let dup = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: "test".into(),
        event: Event::JobSubmitted(spec),
    };
    let subject = wire::default_subject(&dup.event);
    let msg_id = uuid::Uuid::from_bytes(dup.id).to_string();
    let submit =
        |msg_id: &str| Append::new(subject.clone(), wire::encode(&dup)).with_msg_id(msg_id);
    let first = grid.append(&log, submit(&msg_id));
    let again = grid.append(&log, submit(&msg_id));
    assert!(
        !first.duplicate && again.duplicate && again.seq == first.seq,
        "{first:?} {again:?}"
    );
    // The same event again under another id (a retry beyond the duplicate window): stored, and rejected.
    let late = grid.append(&log, submit(&format!("{msg_id}-late")));
    assert!(!late.duplicate && late.seq > first.seq, "{late:?}");

    // A priority change published twice with one id: stored once, applied once.
    let priority = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: "test".into(),
        event: Event::JobPriorityChanged {
            job: JobId::new("main").unwrap(),
            priority: 7,
        },
    };
    let priority_append = || {
        Append::new(wire::default_subject(&priority.event), wire::encode(&priority))
            .with_msg_id(uuid::Uuid::from_bytes(priority.id).to_string())
    };
    let p1 = grid.append(&log, priority_append());
    let p2 = grid.append(&log, priority_append());
    assert!(
        !p1.duplicate && p2.duplicate && p2.seq == p1.seq,
        "{p1:?} {p2:?}"
    );

    // Bytes that are no envelope, on the submission subject.
    let garbage: &[u8] = &[0x0a, 0xff, 0xff, 0x03, b'x'];
    assert!(matches!(
        wire::entry_from_log(Seq(1), 0, "gridfold.ev.user.tester.job.submitted", garbage).payload,
        Payload::Undecodable { .. }
    ));
    let undecodable = grid.append(
        &log,
        Append::new("gridfold.ev.user.tester.job.submitted", garbage.to_vec()).with_msg_id("garbage-1"),
    );

    // e1's subject carrying a heartbeat that names e2.
    let forged = Envelope {
        id: *uuid::Uuid::new_v4().as_bytes(),
        source: "engine:e1".into(),
        event: Event::EngineHeartbeat {
            engine: engine_id("e2"),
            load: EngineLoad {
                load_per_core_milli: 0,
                memory_free_mb: 1,
                values_milli: Default::default(),
            },
        },
    };
    let forged_at = grid.append(
        &log,
        Append::new("gridfold.ev.engine.e1.heartbeat", wire::encode(&forged))
            .with_msg_id(uuid::Uuid::from_bytes(forged.id).to_string()),
    );

    grid.wait_job_done("dup", 4);
    let stat = grid.wait_job_done("main", 8);
    let kinds = &stat.rejections_by_kind;
    for kind in ["duplicate-job", "undecodable", "forged-engine"] {
        assert_eq!(kinds.get(kind), Some(&1), "one {kind} rejection: {kinds:?}");
    }
    assert_eq!(job_in(&stat, "main").unwrap().priority, 7, "{stat}");
    assert_eq!(stat.jobs.len(), 2, "{stat}");

    // `gridfold rejections` lists them: sequence, kind, subject, declared sender, reason.
    let url = grid.url();
    let listed: serde_json::Value =
        serde_json::from_str(&grid.gridfold_ok(&["rejections", "--json", "--nats", &url])).unwrap();
    assert_eq!(listed["total"], 3, "{listed}");
    let records = listed["rejections"].as_array().unwrap();
    let record = |kind: &str| records.iter().find(|r| r["kind"] == kind).unwrap_or_else(|| panic!("no {kind}: {listed}"));
    assert_eq!(record("duplicate-job")["seq"], late.seq);
    assert_eq!(record("duplicate-job")["subject"], "gridfold.ev.user.tester.job.submitted");
    assert_eq!(record("duplicate-job")["by"], "user tester");
    assert_eq!(record("duplicate-job")["source"], "test");
    assert_eq!(record("forged-engine")["seq"], forged_at.seq);
    assert_eq!(record("forged-engine")["source"], "engine:e1");
    assert_eq!(record("undecodable")["source"], "");
    let table = grid.gridfold_ok(&["rejections", "--kind", "forged-engine", "--nats", &url]);
    let rows: Vec<&str> = table.lines().filter(|line| line.contains("gridfold.ev.engine.e1.heartbeat")).collect();
    assert_eq!(rows.len(), 1, "one forged-engine row:\n{table}");
    assert!(rows[0].contains("engine:e1") && rows[0].contains(&forged_at.seq.to_string()), "{table}");
    assert_eq!(table.lines().filter(|line| line.contains(" gridfold.ev.")).count(), 1, "only the kind asked for:\n{table}");
    let none = grid.gridfold(&["rejections", "--kind", "unknown-job", "--nats", &url]);
    assert_eq!(none.status.code(), Some(1), "{}{}", none.stdout, none.stderr);
    assert!(none.stderr.contains("kinds seen: duplicate-job, forged-engine, undecodable"), "{}", none.stderr);

    let audit = Audit::of(&grid.raw_log());
    let with_id = |id: [u8; 16]| {
        audit
            .entries
            .iter()
            .filter(|e| matches!(&e.payload, Payload::Event(envelope) if envelope.id == id))
            .map(|e| e.seq.0)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        with_id(dup.id),
        [first.seq, late.seq],
        "the submission is stored once per message id"
    );
    assert_eq!(
        with_id(priority.id),
        [p1.seq],
        "the priority change is stored once"
    );
    let at = |kind: &str| {
        audit
            .rejections_of_kind(kind)
            .into_iter()
            .map(|(seq, _)| seq)
            .collect::<Vec<_>>()
    };
    assert_eq!(at("duplicate-job"), [late.seq]);
    assert_eq!(at("undecodable"), [undecodable.seq]);
    assert_eq!(at("forged-engine"), [forged_at.seq]);
    for (seq, rejections) in &audit.rejected {
        assert!(
            [late.seq, undecodable.seq, forged_at.seq].contains(seq),
            "nothing else is rejected on this run: entry {seq}: {rejections:?}"
        );
    }
    audit.assert_done_exactly_once("main", 8);
    audit.assert_done_exactly_once("dup", 4);
    assert_eq!(audit.state.jobs().len(), 2);
    for engine in audit.state.engines() {
        assert_eq!(engine.status, EngineStatus::LoggedIn, "{}", engine.id);
    }
    assert_verified(&grid.replay_json(&["--verify", "--nats", &grid.url()]));
}

// ---- 6 --------------------------------------------------------------------------------

#[test]
fn two_projectors_one_writer_and_the_standby_takes_over_from_a_killed_leader() {
    const TASKS: u32 = 24;
    // The lease outlives a silent leader by 4 s: no takeover while the leader lives, even slowed down.
    let lease = ["--lease-secs", "4"];
    let mut grid = Grid::start();
    let (a, b) = grid.leader_and_standby(&lease);
    grid.engines_logged_in(&["e1", "e2"], 2);
    grid.submit("job", TASKS, &["sleep", "0.5"]);
    let stat = grid.wait_tasks_done("job", 6);
    assert!(
        job_in(&stat, "job").unwrap().done < TASKS,
        "the leader is killed mid-run"
    );

    // Until now only A has led: everything on the orders subject is A's.
    assert!(
        !grid.proc(b).stderr().contains("leader: "),
        "B stood by:\n{}",
        grid.proc(b).stderr()
    );
    grid.kill9(a);
    let by_a = Audit::of(&grid.raw_log()).order_batches;
    assert!(
        !grid.proc(b).stderr().contains("leader: "),
        "B took over only after the lease expired"
    );
    assert!(by_a > 0);

    grid.wait_stderr(b, "leader: ");
    grid.wait_job_done("job", TASKS);
    let b_stdout = grid.terminate(b);
    let by_b = batches_published(&b_stdout);
    assert!(by_b > 0, "B published after taking over: {b_stdout}");
    assert_eq!(
        grid.proc(b).stderr().matches("leader: ").count(),
        1,
        "B led once"
    );

    let audit = Audit::of(&grid.raw_log());
    assert_eq!(
        audit.order_batches,
        by_a + by_b,
        "every batch on the log is A's (before the kill) or B's (after)"
    );
    audit.assert_done_exactly_once("job", TASKS);
    audit.assert_no_attempt_dispatched_twice();
    assert_verified(&grid.replay_json(&["--verify", "--nats", &grid.url()]));
}

// ---- 6b -------------------------------------------------------------------------------

#[test]
fn a_leader_paused_past_its_lease_publishes_nothing_when_it_resumes() {
    const TASKS: u32 = 30;
    let lease = ["--lease-secs", "3"];
    let mut grid = Grid::start();
    let (a, b) = grid.leader_and_standby(&lease);
    grid.engines_logged_in(&["e1", "e2"], 2);
    grid.submit("job", TASKS, &["sleep", "0.3"]);
    grid.wait_tasks_done("job", 6);

    // A freezes (SIGSTOP) holding the lease; B takes over once it expires; A wakes up
    // believing it leads, with decisions to make from a stale view.
    grid.proc(a).signal(libc::SIGSTOP);
    let by_a = Audit::of(&grid.raw_log()).order_batches;
    // A frozen projector is still subscribed to the queries: `gridfold stat` must not
    // depend on its answer (it did while the projectors shared a queue group, and half
    // the requests timed out after 10 s).
    for _ in 0..6 {
        let asked = Instant::now();
        if let Err(err) = grid.stat() {
            grid.fail(&format!("stat while A is frozen: {err}"));
        }
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "stat answered in {:?}",
            asked.elapsed()
        );
    }
    grid.wait_stderr(b, "leader: ");
    grid.wait_tasks_done("job", 10);
    grid.proc(a).signal(libc::SIGCONT);
    grid.wait_stderr(a, "standby: ");
    grid.wait_job_done("job", TASKS);

    let a_report = grid.terminate(a);
    let b_report = grid.terminate(b);
    assert_eq!(
        batches_published(&a_report),
        by_a,
        "A published nothing after it woke up: {a_report}"
    );
    let audit = Audit::of(&grid.raw_log());
    assert_eq!(
        audit.order_batches,
        by_a + batches_published(&b_report),
        "every batch is A's before the pause or B's after"
    );
    audit.assert_done_exactly_once("job", TASKS);
    audit.assert_no_attempt_dispatched_twice();
    assert_verified(&grid.replay_json(&["--verify", "--nats", &grid.url()]));
}

// ---- 2b -------------------------------------------------------------------------------

#[test]
fn an_engine_killed_and_restarted_under_its_name_leaves_its_old_attempts_to_others() {
    const TASKS: u32 = 16;
    let mut grid = Grid::start();
    grid.projector("projector", &[]);
    let [e1, _] = grid.engines_logged_in(&["e1", "e2"], 2);
    grid.submit("slow", TASKS, &["sleep", "1"]);
    let e1_id = engine_id("e1");
    let held = kill9_mid_attempt(&mut grid, e1, "e1");
    // The same engine comes straight back (as a supervisor would restart it), with the
    // same durable order feed holding deliveries of its old session.
    let e1_again = grid.engine_named("e1-again", "e1", 2);
    grid.wait_job_done("slow", TASKS);

    let audit = Audit::of(&grid.raw_log());
    audit.assert_done_exactly_once("slow", TASKS);
    audit.assert_no_attempt_dispatched_twice();
    for (task, attempt) in &held {
        let (_, done_attempt, _) = &audit.completions[task][0];
        assert!(
            done_attempt > attempt,
            "{task}: attempt {attempt} of e1's old session was run again, not resumed"
        );
    }
    let logins = audit
        .entries
        .iter()
        .filter(|e| matches!(&e.payload, Payload::Event(Envelope { event: Event::EngineLoggedIn { engine, .. }, .. }) if *engine == e1_id))
        .count();
    assert_eq!(logins, 2, "e1 logged in again");
    let stdout = grid.terminate(e1_again);
    assert!(stdout.is_empty(), "{stdout}");
    assert_verified(&grid.replay_json(&["--verify", "--nats", &grid.url()]));
}

// ---- 7 --------------------------------------------------------------------------------

#[test]
fn a_bad_job_file_and_a_dead_broker_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("bad.toml");
    std::fs::write(
        &job,
        "id = \"bad\"\ntasks = 3\nrequirements = 'os == linux'\n[task]\nargv = [\"true\"]\n",
    )
    .unwrap();
    let port = support::nats::unused_port();
    let dead = format!("nats://127.0.0.1:{port}");
    let run = |args: &[&std::ffi::OsStr]| {
        let started = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
            .args(args)
            .env_remove("NATS_URL")
            .output()
            .unwrap();
        (
            output.status,
            String::from_utf8_lossy(&output.stderr).into_owned(),
            started.elapsed(),
        )
    };

    let (status, stderr, _) = run(&[
        "submit".as_ref(),
        job.as_os_str(),
        "--nats".as_ref(),
        dead.as_ref(),
    ]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    let expected = format!("gridfold: {}:3: requirements at byte", job.display());
    assert!(stderr.starts_with(&expected), "{stderr}");
    assert!(stderr.contains("did you mean \"linux\"?"), "{stderr}");

    let (status, stderr, took) = run(&["stat".as_ref(), "--nats".as_ref(), dead.as_ref()]);
    assert!(
        !status.success() && status.code().is_some(),
        "{status}: {stderr}"
    );
    assert!(
        stderr.contains(&format!("cannot reach the NATS broker at {dead}")),
        "{stderr}"
    );
    assert!(
        took < Duration::from_secs(10),
        "a dead broker is reported promptly: {took:?}"
    );
}

/// A command whose event the projector rejects says so and exits 1; without a
/// projector to ask, the event is stored and the command warns, exit 0.
#[test]
fn a_submission_the_projector_rejects_fails_the_command_and_one_it_accepts_does_not() {
    let mut grid = Grid::start();
    let url = grid.url();
    let file = grid.job_file("twice", 2, &["true"]);
    let submit = |grid: &Grid, extra: &[&str]| {
        let mut args: Vec<&std::ffi::OsStr> = vec!["submit".as_ref(), file.as_os_str(), "--nats".as_ref(), url.as_ref()];
        args.extend(extra.iter().map(|arg| std::ffi::OsStr::new(*arg)));
        grid.gridfold(&args)
    };

    // No projector yet: stored, and not known to be accepted.
    let alone = submit(&grid, &["--wait-secs", "1"]);
    assert!(alone.status.success(), "{}", alone.stderr);
    assert!(alone.stderr.contains("job twice is stored at seq"), "{}", alone.stderr);
    assert!(alone.stderr.contains("not known yet"), "{}", alone.stderr);

    grid.projector("projector", &[]);
    // The same id again, now that a projector folds it: a duplicate, rejected.
    let again = submit(&grid, &["--json"]);
    assert_eq!(again.status.code(), Some(1), "{}\n{}", again.stdout, again.stderr);
    assert!(again.stderr.contains("the projector rejected job twice"), "{}", again.stderr);
    assert!(again.stderr.contains("twice"), "{}", again.stderr);
    let answer: serde_json::Value = serde_json::from_str(again.stdout.trim()).unwrap();
    assert_eq!(answer["verdict"], "rejected", "{answer}");

    let cancel = grid.gridfold(&["cancel", "nosuchjob", "--nats", &url]);
    assert_eq!(cancel.status.code(), Some(1), "{}", cancel.stderr);
    assert!(cancel.stderr.contains("the projector rejected the cancel of nosuchjob"), "{}", cancel.stderr);

    let fine = grid.gridfold(&["cancel", "twice", "--nats", &url]);
    assert!(fine.status.success(), "{}", fine.stderr);
    assert!(fine.stdout.contains("cancel of twice applied at seq"), "{}", fine.stdout);
    assert!(fine.stderr.is_empty(), "an accepted event warns of nothing: {}", fine.stderr);
}

/// The task processes of `pids` (lines `ATTEMPT PID`, one per run, written by the
/// task itself before it `exec`s into `sleep`).
fn runs_recorded(pids: &Path) -> Vec<(u32, i32)> {
    let text = std::fs::read_to_string(pids).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let (attempt, pid) = line.split_once(' ')?;
            Some((attempt.parse().ok()?, pid.parse().ok()?))
        })
        .collect()
}

/// The state letter of a process (`'T'` stopped, `'S'` sleeping), or `'-'` when gone.
fn process_state(pid: i32) -> char {
    gridfold::engine::procfs::read_stat(pid).map_or('-', |stat| stat.state)
}

/// An operator's hand on a real task of a real engine: `gridfold suspend` stops
/// it (SIGSTOP: state `T`), `resume` continues it, `reschedule` kills it and runs
/// it again as the same attempt, no failure counted; refused requests exit 1.
#[test]
fn a_running_task_is_suspended_resumed_and_rescheduled_without_using_an_attempt() {
    let mut grid = Grid::start();
    let url = grid.url();
    grid.projector("projector", &[]);
    grid.engines_logged_in(&["e1"], 1);
    let pids = grid.path("pids");
    let script = format!("echo \"$GRIDFOLD_ATTEMPT $$\" >> {}; exec sleep 60", pids.display());
    grid.submit("sleepy", 1, &["sh", "-c", &script]);
    let first = grid.wait_for("the task to run", |_| match runs_recorded(&pids).as_slice() {
        [run] if process_state(run.1) == 'S' => Ok(*run),
        runs => Err(format!("runs {runs:?}")),
    });
    assert_eq!(first.0, 1, "the first attempt");

    let suspend = grid.gridfold(&["suspend", "sleepy/0", "--json", "--nats", &url]);
    assert!(suspend.status.success(), "{}\n{}", suspend.stdout, suspend.stderr);
    let answer: serde_json::Value = serde_json::from_str(suspend.stdout.trim()).unwrap();
    assert_eq!((answer["action"].as_str(), answer["verdict"].as_str()), (Some("suspend"), Some("accepted")), "{answer}");
    grid.wait_for("the task stopped", |_| match process_state(first.1) {
        'T' => Ok(()),
        state => Err(format!("state {state}")),
    });
    grid.wait_for("stat to count it suspended", |grid| {
        let stat = grid.stat()?;
        let job = job_in(&stat, "sleepy").ok_or("no job")?;
        if job.suspended == 1 { Ok(()) } else { Err(format!("{} suspended", job.suspended)) }
    });
    let again = grid.gridfold(&["suspend", "sleepy", "--nats", &url]);
    assert_eq!(again.status.code(), Some(1), "{}", again.stderr);
    assert!(again.stderr.contains("already-suspended"), "{}", again.stderr);
    // Suspended past the dispatch timeout and the engine timeout: nothing requeues it.
    std::thread::sleep(Duration::from_secs(6));
    assert_eq!(process_state(first.1), 'T', "still stopped, not requeued");

    grid.gridfold_ok(&["resume", "sleepy/0", "--nats", &url]);
    grid.wait_for("the task continued", |_| match process_state(first.1) {
        'S' => Ok(()),
        state => Err(format!("state {state}")),
    });
    let not_suspended = grid.gridfold(&["resume", "sleepy/0", "--nats", &url]);
    assert_eq!(not_suspended.status.code(), Some(1), "{}", not_suspended.stderr);
    assert!(not_suspended.stderr.contains("not-suspended"), "{}", not_suspended.stderr);

    grid.gridfold_ok(&["reschedule", "sleepy", "--nats", &url]);
    let second = grid.wait_for("the task to run again", |_| match runs_recorded(&pids).as_slice() {
        [_, run] if process_state(run.1) == 'S' => Ok(*run),
        runs => Err(format!("runs {runs:?}")),
    });
    assert_eq!(second.0, 1, "the same attempt number: no attempt used");
    assert_ne!(second.1, first.1);
    grid.wait_for("the preempted run gone", |_| match process_state(first.1) {
        '-' | 'Z' => Ok(()),
        state => Err(format!("state {state}")),
    });
    let failures = grid
        .raw_log()
        .iter()
        .filter(|raw| raw.subject.ends_with(".failed"))
        .count();
    assert_eq!(failures, 0, "a preemption is not a failure");
    grid.gridfold_ok(&["cancel", "sleepy", "--nats", &url]);
}

#[test]
fn grid_engines_ticket_mode_splits_a_real_engines_slots_by_the_share_tree() {
    let mut grid = Grid::start();
    let url = grid.url();
    grid.projector("projector", &[]);
    let policy = grid.write(
        "sgeee.toml",
        "algorithm = \"sgeee\"\nweight_tickets_share = 10000\n\
         [share_tree.ann]\nshares = 1\n[share_tree.bob]\nshares = 3\n[share_tree.cy]\nshares = 4\n",
    );
    let applied = grid.gridfold(&["policy".as_ref(), "apply".as_ref(), policy.as_os_str(), "--nats".as_ref(), url.as_ref()]);
    assert!(applied.status.success(), "{}", applied.stderr);
    for owner in ["ann", "bob"] {
        let file = grid.write(
            &format!("{owner}.toml"),
            &format!("id = \"{owner}-job\"\nowner = \"{owner}\"\ntasks = 8\n\n[task]\nargv = [\"sleep\", \"60\"]\n"),
        );
        grid.gridfold_ok(&["submit".as_ref(), file.as_os_str(), "--nats".as_ref(), url.as_ref()]);
    }
    // One engine of four slots: cy is idle, so ann and bob split its slots 1:3.
    grid.engines_logged_in(&["e1"], 4);
    let live = grid.wait_for("four tasks dispatched", |grid| {
        let stat = grid.stat()?;
        let live = |id: &str| job_in(&stat, id).map_or(0, |job| job.dispatched + job.running);
        let (ann, bob) = (live("ann-job"), live("bob-job"));
        if ann + bob == 4 { Ok((ann, bob)) } else { Err(format!("ann {ann}, bob {bob} live")) }
    });
    assert_eq!(live, (1, 3), "ann and bob's live tasks");
    let why = grid.gridfold_ok(&["why", "ann-job/1", "--nats", &url]);
    assert!(why.contains("with a higher dispatch priority; the first is bob-job"), "{why}");
    // Override tickets for ann's job (qalter -ot): accepted; for no such job: refused, exit 1.
    let boosted = grid.gridfold(&["override-tickets", "ann-job", "100000", "--nats", &url]);
    assert!(boosted.status.success(), "{}", boosted.stderr);
    assert!(boosted.stdout.contains("override tickets 100000 of ann-job applied"), "{}", boosted.stdout);
    let refused = grid.gridfold(&["override-tickets", "nosuchjob", "5", "--nats", &url]);
    assert_eq!(refused.status.code(), Some(1), "{}", refused.stderr);
    assert!(refused.stderr.contains("the projector rejected the override tickets of nosuchjob"), "{}", refused.stderr);
}

/// `gridfold stat` adds up: every state column (cancelled included), owner,
/// priority and age; engines with load, last seen and properties; filters by
/// owner and state; an unknown job exits 1; `--until-done` stops when the jobs
/// shown have ended, writing plain reports (no screen codes) into a pipe.
#[test]
fn stat_adds_up_filters_exits_1_for_an_unknown_job_and_stops_when_the_jobs_shown_end() {
    let mut grid = Grid::start();
    let url = grid.url();
    grid.projector("projector", &[]);
    grid.engines_logged_in(&["e1"], 2);
    grid.submit("parked", 3, &["sleep", "60"]);
    grid.wait_for("parked to run on both slots", |grid| {
        let stat = grid.stat()?;
        let job = job_in(&stat, "parked").ok_or("no job")?;
        if job.running == 2 { Ok(()) } else { Err(format!("{job:?}")) }
    });
    grid.gridfold_ok(&["cancel", "parked", "--nats", &url]);
    let other = grid.write("other.toml", "id = \"other\"\nowner = \"someone\"\ntasks = 2\n[task]\nargv = [\"sleep\", \"1\"]\n");
    grid.gridfold_ok(&["submit".as_ref(), other.as_os_str(), "--nats".as_ref(), url.as_ref()]);

    // Into a pipe: plain reports, one after another, until `other` has ended.
    let watched = grid.gridfold_ok(&["stat", "other", "--until-done", "--nats", &url]);
    assert!(!watched.contains('\x1b'), "no screen codes into a pipe:\n{watched}");
    let last = watched.rsplit("---").next().unwrap_or_default();
    let row = last.lines().find(|line| line.starts_with("other ")).unwrap_or_else(|| panic!("{watched}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // JOB OWNER STATUS PRIO TASKS WAITING RUNNING DONE FAILED CANCELLED AGE(2) TASKS/S ETA
    assert_eq!(&cells[..10], ["other", "someone", "done", "0", "2", "0", "0", "2", "0", "0"], "{row}");

    let cancelled = grid.gridfold_ok(&["stat", "--state", "cancelled", "--long", "--nats", &url]);
    let rows: Vec<&str> = cancelled.lines().filter(|line| line.starts_with("parked ") || line.starts_with("other ")).collect();
    assert_eq!(rows.len(), 1, "only the cancelled job:\n{cancelled}");
    let cells: Vec<&str> = rows[0].split_whitespace().collect();
    assert_eq!(&cells[..10], ["parked", "tester", "cancelled", "0", "3", "0", "0", "0", "0", "3"], "{cancelled}");
    let engine = cancelled.lines().find(|line| line.starts_with("e1 ")).unwrap_or_else(|| panic!("{cancelled}"));
    assert!(engine.contains("logged-in") && engine.contains(" ago") && engine.contains("cores="), "{engine}");

    let by_owner = grid.gridfold_ok(&["stat", "--owner", "someone", "--nats", &url]);
    assert!(by_owner.lines().any(|l| l.starts_with("other ")) && !by_owner.lines().any(|l| l.starts_with("parked ")), "{by_owner}");

    let unknown = grid.gridfold(&["stat", "no-such-job", "--nats", &url]);
    assert_eq!(unknown.status.code(), Some(1), "{}{}", unknown.stdout, unknown.stderr);
    assert_eq!(unknown.stderr.trim(), "no job no-such-job");
}
