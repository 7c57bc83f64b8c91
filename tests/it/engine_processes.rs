//! An engine's task processes die with it (docs/operators.md, "Names and epochs": one login, one
//! epoch"): real `gridfold engine` processes killed with SIGKILL, real task
//! processes, real work directories, a real nats-server per test.
//!
//! The test plays the projector: it publishes `Run` deliveries on the engine's order
//! subject and reads what the engine published back. Processes the test itself
//! starts are killed by [`Reap`] guards, so a failing test leaves nothing behind.

use crate::support;

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::jetstream::message::PublishMessage;
use gridfold::core::event::{Entry, Event, Payload};
use gridfold::core::ids::{EngineId, JobId, Seq, TaskRef};
use gridfold::engine::groups::{self, GroupRecord};
use gridfold::engine::{EngineConfig, JetStreamOrderFeed, procfs, run_engine};
use gridfold::log::jetstream::{JetStreamLog, JetStreamReader, LogConfig};
use gridfold::log::nats_server::NatsServer;
use gridfold::log::{EventLog, LogReader};
use gridfold::wire;
use gridfold::wire::delivery::{Delivery, DeliveryKind, RunTask, order_subject};

/// How long to wait for something that should happen within a second or two.
const WAIT: Duration = Duration::from_secs(10);

/// A nats-server with the streams made, and what the engines published on it.
struct Broker {
    server: NatsServer,
    log: JetStreamLog,
    reader: JetStreamReader,
    seen: Vec<Entry>,
}

impl Broker {
    async fn start() -> Broker {
        // RUST_LOG=gridfold=debug shows what in-process engines do.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let server = support::nats::start();
        let log = JetStreamLog::connect(&server.url(), log_config())
            .await
            .unwrap();
        log.ensure_order_stream().await.unwrap();
        support::sealing::register(&log).await;
        let reader = log.reader(1).await.unwrap();
        Broker {
            server,
            log,
            reader,
            seen: Vec::new(),
        }
    }

    /// Reads on until `count` entries match `pred`; returns the last of them.
    async fn until_nth(
        &mut self,
        what: &str,
        count: usize,
        pred: impl Fn(&Event) -> bool,
    ) -> Entry {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(entry) = self
                .seen
                .iter()
                .filter(|e| event(e).is_some_and(&pred))
                .nth(count - 1)
            {
                return entry.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {WAIT:?}; the log holds {:#?}",
                self.seen
            );
            let batch = self
                .reader
                .next_batch(1_000, Duration::from_millis(100))
                .await
                .unwrap();
            self.seen.extend(batch.entries.iter().map(|raw| {
                wire::entry_from_log(Seq(raw.seq), raw.time_ms, &raw.subject, &raw.payload)
            }));
        }
    }

    /// The log sequence of `engine`'s `count`-th login.
    async fn login(&mut self, engine: &str, count: usize) -> u64 {
        let what = format!("login #{count} of {engine}");
        self.until_nth(
            &what,
            count,
            |e| matches!(e, Event::EngineLoggedIn { engine: id, .. } if id.as_str() == engine),
        )
        .await
        .seq
        .0
    }

    /// Publishes a `Run` of `sh -c script` after the login at `login_seq`, and waits
    /// for `TaskStarted`.
    async fn run_script(&mut self, engine: &str, login_seq: u64, t: &TaskRef, script: &str) {
        let delivery = Delivery {
            id: Delivery::id_for(Seq(login_seq + 1), 0),
            batch_seq: Seq(login_seq + 1),
            engine: EngineId::new(engine).unwrap(),
            epoch: login_seq,
            kind: DeliveryKind::Run(RunTask {
                task: t.clone(),
                attempt: 1,
                argv: ["sh", "-c", script].map(String::from).to_vec(),
                params: BTreeMap::new(),
                wall_time_limit_ms: 0,
                slots: 1,
                root_library: None,
                output_bytes_max: gridfold::core::event::OutputPolicy::default().task_bytes_max,
                work_dir_retention_ms: gridfold::core::event::OutputPolicy::default().work_dir_retention_ms,
                nodes: Vec::new(),
                companion: false,
                companion_argv: Vec::new(),
            }),
        };
        let message = PublishMessage::build()
            .payload(support::sealing::sealed(&delivery).into())
            .message_id(&delivery.id);
        let ack = self
            .log
            .context()
            .send_publish(order_subject(&delivery.engine), message)
            .await
            .unwrap();
        ack.await.unwrap();
        self.until_nth(
            "the task's start",
            1,
            |e| matches!(e, Event::TaskStarted { task, .. } if task == t),
        )
        .await;
    }
}

fn log_config() -> LogConfig {
    LogConfig {
        request_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(2),
        ..LogConfig::default()
    }
}

fn event(entry: &Entry) -> Option<&Event> {
    match &entry.payload {
        Payload::Event(envelope) => Some(&envelope.event),
        Payload::Undecodable { .. } => None,
    }
}

fn task(job: &str) -> TaskRef {
    TaskRef::new(JobId::new(job).unwrap(), 0)
}

/// A `gridfold engine` process logging at info level into a file.
struct EngineProcess {
    child: Reap,
    stderr_path: PathBuf,
}

impl EngineProcess {
    fn start(broker: &Broker, name: &str, work_dir: &Path) -> EngineProcess {
        let stderr_path = work_dir.with_extension(format!("{name}.{}.stderr", unique()));
        let child = engine_command(broker, name, work_dir)
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        EngineProcess {
            child: Reap::Child(child),
            stderr_path,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The log so far, once it holds `text` (the engine may publish before it logs).
    async fn stderr_once_it_holds(&self, text: &str) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let stderr = self.stderr();
            if stderr.contains(text) {
                return stderr;
            }
            assert!(
                Instant::now() < deadline,
                "no {text:?} in the engine's log:\n{stderr}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, and reaped.
    fn kill_9(mut self) {
        let Reap::Child(child) = &mut self.child else {
            unreachable!()
        };
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

fn engine_command(broker: &Broker, name: &str, work_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gridfold"));
    command.env("GRIDFOLD_OPERATOR", "true");
    command
        .args([
            "engine",
            "--nats",
            &broker.server.url(),
            "--name",
            name,
            "--slots",
            "2",
        ])
        .args(["--heartbeat-secs", "1", "--drain-timeout-secs", "1"])
        .arg("--work-dir")
        .arg(work_dir)
        .env("RUST_LOG", "gridfold=info")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

/// A number that tells apart files made by one test.
fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Kills, on drop, a process the test started (and reaps it) or a pid it learnt of.
enum Reap {
    Child(Child),
    Pid(i32),
}

impl Drop for Reap {
    fn drop(&mut self) {
        match self {
            Reap::Child(child) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            // SAFETY: kill only signals; the pid is one of this test's processes,
            // alive (checked) so not reused.
            Reap::Pid(pid) if is_alive(*pid) => unsafe {
                libc::kill(*pid, libc::SIGKILL);
            },
            Reap::Pid(_) => {}
        }
    }
}

/// Alive and not a zombie.
fn is_alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    stat.rsplit_once(')')
        .is_some_and(|(_, rest)| !matches!(rest.split_whitespace().next(), Some("Z" | "X")))
}

/// The pid a task wrote to `path` (a whole line), once it is there.
async fn read_pid(path: &Path) -> i32 {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().parse().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `pid` is dead within `within`.
async fn dies_within(pid: i32, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while is_alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

/// A broker, a temporary work directory, and a `gridfold engine` on it, logged in.
struct Started {
    broker: Broker,
    _dir: tempfile::TempDir,
    work_dir: PathBuf,
    engine: EngineProcess,
    /// The log sequence of the login.
    login: u64,
}

async fn start_engine_process(name: &str) -> Started {
    let mut broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let work_dir = dir.path().join("work");
    let engine = EngineProcess::start(&broker, name, &work_dir);
    let login = broker.login(name, 1).await;
    Started {
        broker,
        _dir: dir,
        work_dir,
        engine,
        login,
    }
}

/// The groups recorded live in the work directory (the journal's and any
/// record files), by pgid.
fn records_in(work_dir: &Path) -> Vec<String> {
    groups::read_records(&work_dir.join(groups::RECORDS_DIR_NAME))
        .unwrap()
        .records
        .iter()
        .map(|record| record.pgid.to_string())
        .collect()
}

/// The log of an engine that logged in, after checking that its claim of the work
/// directory cleared every group record.
async fn log_after_the_claim(engine: &EngineProcess, work_dir: &Path) -> String {
    assert_eq!(
        records_in(work_dir),
        Vec::<String>::new(),
        "the records were cleared"
    );
    engine.stderr_once_it_holds("logged in").await
}

// ---- tests ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_dies_with_its_engine_killed_by_sigkill() {
    let mut setup = start_engine_process("e-kill").await;
    let (broker, work_dir) = (&mut setup.broker, setup.work_dir.clone());
    let t = task("pdeath");
    broker
        .run_script(
            "e-kill",
            setup.login,
            &t,
            "echo $$ > pid.tmp; mv pid.tmp ../pid; exec sleep 300",
        )
        .await;
    let pid = read_pid(&work_dir.join("pdeath").join("pid")).await;
    let _reap = Reap::Pid(pid);
    assert!(is_alive(pid));
    assert_eq!(
        records_in(&work_dir),
        [pid.to_string()],
        "the running task's group is recorded"
    );

    setup.engine.kill_9();
    assert!(
        dies_within(pid, Duration::from_secs(3)).await,
        "the task outlived its engine by 3 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_engine_kills_what_escaped_the_death_signal_before_it_logs_in() {
    let mut setup = start_engine_process("e-restart").await;
    let (broker, work_dir) = (&mut setup.broker, setup.work_dir.clone());
    let t = task("escape");
    // The leader gets the parent-death signal; its background child, in the same
    // group, does not (the kernel clears it across fork).
    let script = "sleep 300 & echo $! > ../escaped; echo $$ > ../leader; wait";
    broker
        .run_script("e-restart", setup.login, &t, script)
        .await;
    let leader = read_pid(&work_dir.join("escape").join("leader")).await;
    let escaped = read_pid(&work_dir.join("escape").join("escaped")).await;
    let _reap = (Reap::Pid(leader), Reap::Pid(escaped));

    setup.engine.kill_9();
    assert!(
        dies_within(leader, Duration::from_secs(3)).await,
        "the leader died with its engine"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        is_alive(escaped),
        "the background child escaped the death signal"
    );
    assert_eq!(
        records_in(&work_dir),
        [leader.to_string()],
        "its group is still recorded"
    );

    let restarted = EngineProcess::start(broker, "e-restart", &work_dir);
    broker.login("e-restart", 2).await;
    assert!(
        !is_alive(escaped),
        "dead by the time the login is on the log"
    );
    let stderr = log_after_the_claim(&restarted, &work_dir).await;
    let killed_at = stderr.find("killed a task process group left by the previous engine");
    let login_at = stderr.find("logged in");
    assert!(
        matches!((killed_at, login_at), (Some(killed), Some(login)) if killed < login),
        "the kill is logged before the login:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("pgid={leader}")) && stderr.contains(&format!("{escaped} sleep")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorded_groups_now_held_by_other_processes_are_not_killed() {
    let mut broker = Broker::start().await;
    let dir = tempfile::tempdir().unwrap();
    let work_dir = dir.path().join("work");
    let records = work_dir.join(groups::RECORDS_DIR_NAME);
    std::fs::create_dir_all(&records).unwrap();
    let boot_id = procfs::boot_id().unwrap();

    // A recorded pid now leads an unrelated group: its start time is not the record's.
    let reused = Command::new("sleep")
        .arg("30")
        .process_group(0)
        .spawn()
        .unwrap();
    let reused_pid = reused.id() as i32;
    let _reap_reused = Reap::Child(reused);
    let started = procfs::read_stat(reused_pid).unwrap().start_ticks;
    let record = |pgid: i32, start_ticks: u64| GroupRecord {
        pgid,
        start_ticks,
        boot_id: boot_id.clone(),
        token: groups::new_token(),
    };
    std::fs::write(
        records.join(reused_pid.to_string()),
        record(reused_pid, started.saturating_sub(1)).to_line(),
    )
    .unwrap();

    // A recorded group whose leader is gone, left with a member without the token.
    let mut leader = Command::new("sh")
        .args(["-c", "sleep 30 > /dev/null & echo $!"])
        .process_group(0)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let leaderless_pgid = leader.id() as i32;
    let output = std::mem::take(&mut leader.stdout).unwrap();
    let member: i32 = std::io::read_to_string(output)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let _reap_member = Reap::Pid(member);
    leader.wait().unwrap();
    assert!(is_alive(member) && !is_alive(leaderless_pgid));
    std::fs::write(
        records.join(leaderless_pgid.to_string()),
        record(leaderless_pgid, started).to_line(),
    )
    .unwrap();

    let engine = EngineProcess::start(&broker, "e-spare", &work_dir);
    broker.login("e-spare", 1).await;
    assert!(
        is_alive(reused_pid),
        "the process that reuses a recorded pid lives"
    );
    assert!(
        is_alive(member),
        "the member of a group it cannot show is its own lives"
    );
    let stderr = log_after_the_claim(&engine, &work_dir).await;
    assert!(
        stderr.contains(&format!(
            "pid {reused_pid} now belongs to another process (sleep"
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "process {member} (sleep) in the group does not carry the task's GRIDFOLD_GROUP_TOKEN"
        )),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_engine_on_the_same_work_dir_is_refused() {
    let mut setup = start_engine_process("e-first").await;
    let (broker, work_dir) = (&setup.broker, &setup.work_dir);

    let second = tokio::process::Command::from(engine_command(broker, "e-second", work_dir))
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(WAIT, second).await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let Reap::Child(first_child) = &mut setup.engine.child else {
        unreachable!()
    };
    let expected = format!(
        "the work directory {} is in use by another engine (process {}): two engines cannot share a work directory",
        work_dir.canonicalize().unwrap().display(),
        first_child.id()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!stderr.contains("logged in"), "{stderr}");
    assert_eq!(
        first_child.try_wait().unwrap(),
        None,
        "the first engine runs on"
    );
}

/// A task must not die of its parent-death signal while its engine is healthy: the
/// signal follows the *thread* that forked it, and a tokio blocking-pool thread ends
/// after idling for its keep-alive. The engine runs here in a runtime whose
/// keep-alive is 100 ms, with a task that idles ten times as long.
#[test]
fn a_task_outlives_the_runtimes_idle_threads_under_a_healthy_engine() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_keep_alive(Duration::from_millis(100))
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut broker = Broker::start().await;
        let dir = tempfile::tempdir().unwrap();
        let config = EngineConfig {
            // No heartbeat meanwhile to keep a blocking thread busy.
            heartbeat_interval: Duration::from_secs(60),
            ..EngineConfig::new(EngineId::new("e-idle").unwrap(), 1, dir.path().join("work"))
        };
        let log = JetStreamLog::connect(&broker.server.url(), log_config()).await.unwrap();
        let feed = JetStreamOrderFeed::open(&log, &config.engine).await.unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let engine = tokio::spawn(run_engine(config, log, feed, async move {
            let _ = stopped.await;
        }));
        let login = broker.login("e-idle", 1).await;
        let t = task("idle");
        broker.run_script("e-idle", login, &t, "sleep 1; echo still here").await;
        let end = broker
            .until_nth("the task's end", 1, |e| {
                matches!(e, Event::TaskCompleted { task, .. } | Event::TaskFailed { task, .. } if *task == t)
            })
            .await;
        assert!(
            matches!(event(&end), Some(Event::TaskCompleted { result, .. }) if result == b"still here\n"),
            "{end:?}"
        );
        stop.send(()).unwrap();
        let report = tokio::time::timeout(WAIT, engine).await.unwrap().unwrap().unwrap();
        assert_eq!((report.completed, report.failed), (1, 0));
    });
}
