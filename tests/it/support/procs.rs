//! Real `gridfold` processes around one private nats-server: [`Cluster::start`]
//! applies a policy, then a test starts projectors and engines
//! ([`Cluster::projector`], [`Cluster::engine`]), signals them, submits jobs and
//! reads the whole log back ([`Cluster::entries`]) to check what happened.
//!
//! Every process writes its stderr to a file in the cluster's directory; every one
//! still running is killed and reaped when the cluster is dropped, a failing test
//! included. [`Cluster::wait_for`] polls a condition with a deadline and fails
//! with the tail of every process's stderr. Set `GRIDFOLD_TEST_KEEP` to keep the
//! directory.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

use gridfold::core::event::{Entry, Envelope, Event, Payload};
use gridfold::core::ids::Seq;
use gridfold::log::jetstream::{JetStreamLog, LogConfig};
use gridfold::log::nats_server::NatsServer;
use gridfold::log::{Append, EventLog, LogError, read_to_end};
use gridfold::projector::key::ProjectorKey;
use gridfold::wire;

use super::cluster3::BrokerCluster;

/// How often [`Cluster::wait_for`] polls.
const POLL: Duration = Duration::from_millis(100);
const KEEP_ENV: &str = "GRIDFOLD_TEST_KEEP";
/// Lines of each stderr shown when a test fails.
const TAIL_LINES: usize = 30;

/// A `gridfold` child process, its stderr in a file. Killed (SIGKILL) and reaped on drop.
pub struct Proc {
    pub name: String,
    /// `None` once reaped: the pid is signalled only while the child is unreaped.
    child: Option<Child>,
    exit: Option<ExitStatus>,
    stderr: PathBuf,
    /// When [`Proc::kill9`] had reaped it: it was surely dead by then.
    pub killed_at: Option<SystemTime>,
}

/// What processes log unless a test asks otherwise.
/// Replaces [`RUST_LOG_DEFAULT`] for every long-running process when set.
const RUST_LOG_ENV: &str = "GRIDFOLD_TEST_RUST_LOG";
const RUST_LOG_DEFAULT: &str = "warn,gridfold::projector::service=info,gridfold::engine=info,gridfold::log=info";

impl Proc {
    /// Logs by [`RUST_LOG_DEFAULT`], or by `GRIDFOLD_TEST_RUST_LOG` when set (to trace a run).
    fn spawn(dir: &Path, name: &str, args: &[OsString]) -> Proc {
        let rust_log = std::env::var(RUST_LOG_ENV).unwrap_or_else(|_| RUST_LOG_DEFAULT.to_string());
        Proc::spawn_logging(dir, name, args, &rust_log)
    }

    /// Starts `gridfold <args>` in `dir` as `name`, logging by `rust_log`, its stderr
    /// in `<dir>/<name>.stderr`. Its commands act as an operator
    /// (`GRIDFOLD_OPERATOR`), as every test's harness does on its own broker:
    /// the tests' job files name their owner (`tester`) and some a priority
    /// above the default, which only an operator may submit for another user.
    pub fn spawn_logging(dir: &Path, name: &str, args: &[impl AsRef<std::ffi::OsStr>], rust_log: &str) -> Proc {
        let stderr = dir.join(format!("{name}.stderr"));
        let child = Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
            .args(args)
            .current_dir(dir)
            .env("RUST_LOG", rust_log)
            .env("NO_COLOR", "1")
            .env_remove("NATS_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&stderr).expect("create a stderr file"))
            .spawn()
            .unwrap_or_else(|err| panic!("cannot start gridfold {name}: {err}"));
        Proc {
            name: name.to_string(),
            child: Some(child),
            exit: None,
            stderr,
            killed_at: None,
        }
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends `signal` by pid, while the child is unreaped (so the pid is still ours).
    pub fn signal(&self, signal: libc::c_int) {
        let child = self
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("{} was already reaped", self.name));
        let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) on the pid of a child we have not reaped: it cannot be another process.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "kill({pid}, {signal}) of {}: {}", self.name, std::io::Error::last_os_error());
    }

    /// Its exit status if it has exited (reaping it), `None` while it runs.
    pub fn poll_exit(&mut self) -> Option<ExitStatus> {
        if let Some(child) = &mut self.child
            && let Some(status) = child.try_wait().expect("try_wait on a child")
        {
            self.exit = Some(status);
            self.child = None;
        }
        self.exit
    }

    /// SIGKILL, then reap: when it was surely dead.
    pub fn kill9(&mut self) -> SystemTime {
        self.signal(libc::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.poll_exit().is_none() {
            assert!(Instant::now() < deadline, "{} did not die of SIGKILL", self.name);
            std::thread::sleep(Duration::from_millis(10));
        }
        let now = SystemTime::now();
        self.killed_at = Some(now);
        now
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

/// The broker of a test: one nats-server, or three in a cluster.
pub enum Broker {
    One(NatsServer),
    Three(BrokerCluster),
}

impl Broker {
    /// The URL `--nats` takes: the server's, or the three nodes' comma-separated.
    pub fn url(&self) -> String {
        match self {
            Broker::One(server) => server.url(),
            Broker::Three(cluster) => cluster.url(),
        }
    }

    /// Replicas of the streams a projector makes on it.
    pub fn replicas(&self) -> u32 {
        match self {
            Broker::One(_) => 1,
            Broker::Three(_) => 3,
        }
    }
}

/// A broker, a directory and the `gridfold` processes of one test.
pub struct Cluster {
    /// Declared first: dropped (killed) before the broker.
    pub procs: Vec<Proc>,
    pub broker: Broker,
    pub runtime: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// A fresh nats-server with `policy` (a policy file's text) applied.
    pub fn start(policy: &str) -> Cluster {
        let dir = test_dir();
        Cluster::start_on(Broker::One(super::nats::start()), dir, policy)
    }

    /// A fresh nats-server configured by `config` (a configuration file's text,
    /// say `max_payload: 65536`; JetStream is added, with a store of its own),
    /// with `policy` applied.
    pub fn start_configured(config: &str, policy: &str) -> Cluster {
        let dir = test_dir();
        let server_dir = dir.path().join("broker");
        std::fs::create_dir_all(&server_dir).expect("the broker's directory");
        let file = dir.path().join("nats-server.conf");
        let store = server_dir.join("store");
        std::fs::write(&file, format!("{config}\njetstream {{ store_dir: {:?} }}\n", store.display().to_string()))
            .expect("the broker's configuration");
        let config = gridfold::log::nats_server::NatsServerConfig {
            config_file: Some(file),
            dir: Some(server_dir),
            ..gridfold::log::nats_server::NatsServerConfig::default()
        };
        let server = gridfold::log::nats_server::NatsServer::start_with(config)
            .unwrap_or_else(|err| panic!("this test needs a nats-server started with its own configuration: {err}"));
        Cluster::start_on(Broker::One(server), dir, policy)
    }

    /// A fresh cluster of three nats-servers (the log stream made R3 before anything
    /// else touches it) with `policy` applied.
    pub fn start_three(policy: &str) -> Cluster {
        let dir = test_dir();
        let brokers = BrokerCluster::start(&dir.path().join("brokers"));
        let runtime = test_runtime();
        brokers.wait_for_jetstream(&runtime);
        Cluster::start_on(Broker::Three(brokers), dir, policy)
    }

    /// Three nats-servers and nothing else: no stream, no policy, no process.
    pub fn start_three_bare() -> Cluster {
        let dir = test_dir();
        let brokers = BrokerCluster::start(&dir.path().join("brokers"));
        Cluster { procs: Vec::new(), broker: Broker::Three(brokers), runtime: test_runtime(), dir }
    }

    /// The operator's first steps: `gridfold setup` makes the streams with as many
    /// replicas as the broker has nodes (nothing but it and the projector makes
    /// them), then `policy` (a policy file's text) is applied.
    fn start_on(broker: Broker, dir: tempfile::TempDir, policy: &str) -> Cluster {
        let cluster = Cluster { procs: Vec::new(), broker, runtime: test_runtime(), dir };
        if let Broker::Three(brokers) = &cluster.broker {
            brokers.wait_for_meta_leader(&cluster.runtime);
        }
        let replicas = cluster.broker.replicas().to_string();
        cluster.command(&["setup".as_ref(), "--replicas".as_ref(), replicas.as_ref()]);
        let policy = cluster.write("policy.toml", policy);
        // No projector runs yet to give a verdict: do not wait for one.
        cluster.command(&["policy".as_ref(), "apply".as_ref(), policy.as_os_str(), "--wait-secs".as_ref(), "0".as_ref()]);
        cluster
    }

    pub fn url(&self) -> String {
        self.broker.url()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, text).unwrap_or_else(|err| panic!("writing {}: {err}", path.display()));
        path
    }

    pub fn proc(&mut self, p: usize) -> &mut Proc {
        &mut self.procs[p]
    }

    /// Starts `gridfold <args>` as a process called `name` (unique in the test): its index.
    pub fn spawn(&mut self, name: &str, args: &[&str]) -> usize {
        assert!(self.procs.iter().all(|proc| proc.name != name), "two processes named {name}");
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        self.procs.push(Proc::spawn(self.dir.path(), name, &args));
        self.procs.len() - 1
    }

    /// `gridfold projector` with its state in `<dir>/projector`, its key registered
    /// on the log first, as an operator would.
    pub fn projector(&mut self) -> usize {
        self.projector_in("projector", "projector")
    }

    /// A process called `process` running `gridfold projector` with its state in
    /// `<dir>/<state>` (its key registered on the log first, if it is new), making
    /// its streams with as many replicas as the broker has nodes.
    pub fn projector_in(&mut self, process: &str, state: &str) -> usize {
        let state_dir = self.path(state);
        if !state_dir.join(gridfold::projector::key::KEY_FILE).exists() {
            self.register_projector_key(&state_dir);
        }
        let state = state_dir.display().to_string();
        let (url, replicas) = (self.url(), self.broker.replicas().to_string());
        let args = ["projector", "--nats", &url, "--state", &state, "--check-invariants", "--replicas", &replicas];
        self.spawn(process, &args)
    }

    /// Makes the key of a projector with state directory `state_dir` (if it has
    /// none) and registers it on the log, so the fold accepts its batches.
    pub fn register_projector_key(&self, state_dir: &Path) {
        std::fs::create_dir_all(state_dir).expect("create the projector's state directory");
        let key = ProjectorKey::load_or_create(state_dir)
            .unwrap_or_else(|err| self.fail(&format!("the projector's key: {err}")));
        let event = Event::ProjectorKeyRegistered { key: key.public(), name: "test projector".into() };
        let id = uuid::Uuid::new_v4();
        let envelope = Envelope { id: *id.as_bytes(), source: "operator:test".into(), event };
        let append =
            Append::new(wire::default_subject(&envelope.event), wire::encode(&envelope)).with_msg_id(id.to_string());
        self.runtime
            .block_on(async { self.connect().await?.append(append).await })
            .unwrap_or_else(|err| self.fail(&format!("registering the projector's key: {err}")));
    }

    /// Appends messages to the log as they are, in order (a test forging entries,
    /// or submitting many at once): their sequences.
    pub fn append_batch(&self, appends: Vec<Append>) -> Vec<u64> {
        self.runtime
            .block_on(async { self.connect().await?.append_batch(appends).await })
            .unwrap_or_else(|err| self.fail(&format!("appending to the log: {err}")))
            .iter()
            .map(|appended| appended.seq)
            .collect()
    }

    async fn connect(&self) -> Result<JetStreamLog, LogError> {
        let config = LogConfig {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(5),
            ..LogConfig::default()
        };
        JetStreamLog::connect(&self.url(), config).await
    }

    /// A process called `process` running `gridfold engine --name name` with
    /// `slots` slots in `work_dir`, heartbeating every second, draining for 2 s.
    pub fn engine(&mut self, process: &str, name: &str, slots: u32, work_dir: &Path) -> usize {
        let url = self.url();
        let (slots, work_dir) = (slots.to_string(), work_dir.display().to_string());
        let args = ["engine", "--nats", &url, "--name", name, "--slots", &slots, "--work-dir", &work_dir];
        let timing = ["--heartbeat-secs", "1", "--drain-timeout-secs", "2"];
        self.spawn(process, &[&args[..], &timing[..]].concat())
    }

    /// Runs a `gridfold` command with `--nats <url>` that must succeed; its standard output.
    pub fn command(&self, args: &[&std::ffi::OsStr]) -> String {
        self.try_command(args).unwrap_or_else(|err| self.fail(&err))
    }

    /// Runs a `gridfold` command with `--nats <url>` to its end (at most 60 s): its
    /// standard output, or what it said when it failed.
    pub fn try_command(&self, args: &[&std::ffi::OsStr]) -> Result<String, String> {
        self.try_command_said(args).map(|(stdout, _)| stdout)
    }

    /// [`Cluster::try_command`], with what the command said on its stderr too.
    pub fn try_command_said(&self, args: &[&std::ffi::OsStr]) -> Result<(String, String), String> {
        let url = self.url();
        let (out_path, err_path) = (self.path("command.stdout"), self.path("command.stderr"));
        let file = |path: &Path| File::create(path).expect("create an output file");
        let mut child = Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
            .args(args)
            .args(["--nats", &url])
            .current_dir(self.dir.path())
            .env_remove("NATS_URL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(file(&out_path))
            .stderr(file(&err_path))
            .spawn()
            .expect("run gridfold");
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.fail(&format!("gridfold {args:?} did not finish within 60 s"));
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
        let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
        if !status.success() {
            return Err(format!("gridfold {args:?} failed ({status}):\n{stdout}\n{stderr}"));
        }
        Ok((stdout, stderr))
    }

    /// Submits job `id` of `tasks` tasks, each running `sh -c script`.
    pub fn submit_script(&self, id: &str, tasks: u32, script: &str) {
        let job = format!(
            "id = \"{id}\"\nowner = \"tester\"\ntasks = {tasks}\n\n[task]\nargv = [\"sh\", \"-c\", {script:?}]\n"
        );
        let file = self.write(&format!("{id}.toml"), &job);
        self.command(&["submit".as_ref(), file.as_os_str()]);
    }

    /// The status the projector gives each engine (`gridfold stat --json`), or why not.
    pub fn engine_statuses(&self) -> Result<Vec<(String, String)>, String> {
        let stdout = self.try_command(&["stat".as_ref(), "--json".as_ref()])?;
        let stat: serde_json::Value =
            serde_json::from_str(stdout.trim()).map_err(|err| format!("stat --json: {err}: {stdout}"))?;
        let engines = stat["engines"].as_array().ok_or_else(|| format!("no engines in {stat}"))?;
        Ok(engines
            .iter()
            .map(|engine| {
                let field = |name: &str| engine[name].as_str().unwrap_or_default().to_string();
                (field("id"), field("status"))
            })
            .collect())
    }

    /// Engine processes called `engine-<name>`, one for each of `names`, of
    /// `slots` slots each on the site `site` (a heartbeat a second, a 2 s drain),
    /// once the projector shows them all logged in.
    pub fn site_engines(&mut self, site: &str, names: &[&str], slots: u32) {
        let (slots, site) = (slots.to_string(), format!("site={site}"));
        for name in names {
            let (url, work) = (self.url(), self.path(&format!("{name}-work")).display().to_string());
            let args = [
                "engine", "--nats", &url, "--name", name, "--slots", &slots, "--work-dir", &work, "--prop", &site,
                "--heartbeat-secs", "1", "--drain-timeout-secs", "2",
            ];
            self.spawn(&format!("engine-{name}"), &args);
        }
        self.wait_logged_in(names);
    }

    /// Waits until the projector shows every engine of `names` logged in.
    pub fn wait_logged_in(&mut self, names: &[&str]) {
        self.wait_for(&format!("engines {names:?} to log in"), Duration::from_secs(30), |cluster| {
            let statuses = cluster.engine_statuses()?;
            let logged_in = |name: &&str| statuses.iter().any(|(id, status)| id == name && status == "logged-in");
            if names.iter().all(logged_in) { Ok(()) } else { Err(format!("{statuses:?}")) }
        });
    }

    /// Every entry of the log as it is now, decoded, an engine's batch of
    /// reports split into one entry per report (same sequence): the tests look
    /// at events one by one, and whether an engine's reports travelled joined
    /// depends on timing. Right after a node comes back the stream may have no
    /// leader for a few seconds (`no responders`): the read is tried again for
    /// up to 30 s before the test fails.
    pub fn entries(&self) -> Vec<Entry> {
        self.stored_entries().into_iter().flat_map(super::folded_log::split_reports).collect()
    }

    /// Every entry of the log as it is now, decoded, as stored: what a fold reads.
    pub fn stored_entries(&self) -> Vec<Entry> {
        let started = Instant::now();
        let raw = loop {
            match self.runtime.block_on(async { read_to_end(&self.connect().await?, 1).await?.collect().await }) {
                Ok(raw) => break raw,
                Err(err) if started.elapsed() >= Duration::from_secs(30) => {
                    self.fail(&format!("reading the whole log: {err} (tried for {:?})", started.elapsed()))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(500)),
            }
        };
        raw.iter()
            .map(|raw| wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload))
            .collect()
    }

    /// Polls `check` until it answers `Ok`, failing after `timeout` with its last `Err`.
    pub fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&mut Cluster) -> Result<T, String>,
    ) -> T {
        let started = Instant::now();
        loop {
            let seen = match check(self) {
                Ok(done) => return done,
                Err(seen) => seen,
            };
            if started.elapsed() >= timeout {
                self.fail(&format!("waiting for {what}: not within {timeout:?}; last seen: {seen}"));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Panics with `message` and the tail of every process's stderr.
    pub fn fail(&self, message: &str) -> ! {
        let mut report = format!("{message}\n");
        for proc in &self.procs {
            let lines: Vec<String> = proc.stderr().lines().map(str::to_string).collect();
            let tail = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
            report.push_str(&format!("--- {} ({:?}); last lines of stderr:\n{tail}\n", proc.name, proc.exit));
        }
        if let Broker::Three(brokers) = &self.broker {
            report.push_str(&brokers.log_tails(TAIL_LINES));
        }
        report.push_str(&format!("(set {KEEP_ENV}=1 to keep {})\n", self.dir.path().display()));
        panic!("{report}");
    }
}

fn test_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("a tokio runtime")
}

/// The test's directory, kept if [`KEEP_ENV`] is set.
fn test_dir() -> tempfile::TempDir {
    let mut dir = tempfile::Builder::new()
        .prefix("gridfold-cluster-")
        .tempdir()
        .expect("a temporary directory");
    if std::env::var_os(KEEP_ENV).is_some() {
        dir.disable_cleanup(true);
        eprintln!("{KEEP_ENV}: keeping {}", dir.path().display());
    }
    dir
}

/// The event of an entry, if it decoded.
pub fn event(entry: &Entry) -> Option<&Event> {
    match &entry.payload {
        Payload::Event(envelope) => Some(&envelope.event),
        Payload::Undecodable { .. } => None,
    }
}
