//! `gridfold bench --real`: the path every real task takes, measured.
//!
//! The simulated bench (the rest of `bench`) plays every engine in one thread
//! and saturates the log: it measures the scheduler. This one measures what a
//! grid at ordinary load pays per real task: it starts a private nats-server,
//! `gridfold projector` and `gridfold engine` as processes of their own (this
//! very binary), submits one job of `--tasks` runs of `--command` (default
//! 2,000 × `/bin/true`), and waits for the job to end. It reports:
//!
//! - **tasks per second**, from the log's own clock: the job's submission
//!   durable to its last `TaskCompleted` durable;
//! - the **CPU per task** of each process, user + system from
//!   `/proc/<pid>/stat` between the engines' logins and the job's end, the
//!   children's own time excluded (a task's process pays for its own run; what
//!   the engine pays to fork and reap it is the engine's);
//! - the **spawn limit** of this machine, measured in the same run before the
//!   grid starts: the same number of the same command spawned and waited for at
//!   the same parallelism (the engines' slots) without gridfold, and the ratio
//!   of the grid's rate to it;
//! - the **latencies** read off the log as the simulated bench reads them,
//!   *slot free → dispatch durable* first: the scheduler's reaction time.
//!
//! Then it reads the log back and verifies it as the simulated bench does:
//! every task completed exactly once, nothing rejected, every order batch
//! re-derived, the digest at the projector's last entry the projector's own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;

use super::cpu::{cpu_ticks_of_pid, cpu_ticks_of_threads, machine_busy_ticks, ticks_to_us};
use super::{BenchArgs, BrokerInfo, Latencies, ReadBack, Verification, read_back_and_verify, tempdir_for, tempdir_in};
use crate::cli::client::publish;
use crate::core::event::{Event, JobOptions, JobSpec, Origin, TaskSet, TaskTemplate};
use crate::core::ids::{JobId, Seq};
use crate::log::connect::BrokerAccess;
use crate::log::jetstream::{JetStreamLog, LogConfig, STREAM_ORDERS};
use crate::log::nats_server::NatsServer;
use crate::projector::query::{STAT_SUBJECT, StatRequest, StateSummary};

/// The job the bench submits.
const JOB_ID: &str = "real-bench";
/// How often the bench asks the projector how far the job is: rarely enough to
/// cost the projector nothing it would notice, often enough to end promptly.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// How long the engines and the projector get to start and log in.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The findings of `gridfold bench --real`; `--json` prints this.
#[derive(Debug, Clone, Serialize)]
pub struct RealReport {
    pub broker: BrokerInfo,
    pub cores: usize,
    pub config: RealConfig,
    pub spawn_limit: SpawnLimit,
    /// The same runs by `xargs -P` (fork and exec from one process, each
    /// waited for): the measure the issue of this bench took, slower than
    /// `spawn_limit`'s threads spawning with `posix_spawn`.
    pub spawn_limit_xargs: SpawnLimit,
    pub run: RealRun,
    /// CPU time per task, µs, of each process (children excluded).
    pub cpu_us_per_task: RealCpu,
    pub latency_ms: Latencies,
    pub verify: Verification,
}

#[derive(Debug, Clone, Serialize)]
pub struct RealConfig {
    pub tasks: u32,
    /// The engines' report window (`--report-window-ms`).
    pub report_window_ms: u64,
    /// The engines' attempts' directories made ahead (`--dirs-ahead`).
    pub dirs_ahead: usize,
    /// Where the engines' work directories were, and on what filesystem.
    pub work_dir: String,
    pub work_dir_filesystem: String,
    pub engines: u32,
    pub slots_per_engine: u32,
    pub command: Vec<String>,
}

/// The same commands spawned without gridfold.
#[derive(Debug, Clone, Serialize)]
pub struct SpawnLimit {
    pub spawns: u32,
    pub parallel: u32,
    pub seconds: f64,
    pub per_s: f64,
    /// The whole machine's busy CPU per spawn meanwhile (every core, every
    /// process: the runs, their parent, the kernel), µs.
    pub machine_cpu_us_per_spawn: Option<f64>,
    /// Cores busy on average meanwhile: at [`RealReport::cores`], the
    /// measurement was bound by the CPU.
    pub cores_busy: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RealRun {
    pub tasks_completed: u64,
    /// Log time from the job durable to its last completion durable.
    pub seconds: f64,
    pub tasks_per_s: f64,
    /// `tasks_per_s` over the spawn limit's rate.
    pub ratio_to_spawn_limit: f64,
    /// `tasks_per_s` over `xargs -P`'s rate.
    pub ratio_to_spawn_limit_xargs: f64,
    /// The best `ratio_to_spawn_limit` the machine's CPU allows: the spawn
    /// limit's machine CPU per spawn over the run's machine CPU per task. When
    /// both keep every core busy the run can do no better; the difference of
    /// the two CPU figures is what gridfold's processes add per task.
    pub ratio_the_cpu_allows: Option<f64>,
    /// The same against `xargs -P`.
    pub ratio_the_cpu_allows_xargs: Option<f64>,
    /// Entries the run added to the log (the job's submission onwards).
    pub log_entries: u64,
    pub log_entries_per_task: f64,
    pub order_batches: u64,
    /// Messages on the engines' delivery subjects (stream `GRIDFOLD_ORDERS`,
    /// logins' news included): several deliveries to one engine sent at once
    /// travel in one.
    pub delivery_messages: u64,
    pub delivery_messages_per_task: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RealCpu {
    /// Every engine agent together.
    pub engines: f64,
    /// The whole machine, every core, every process (the tasks' own, gridfold's,
    /// the broker's, the kernel's and whatever else ran), from the job's
    /// submission to the bench seeing it end.
    pub machine: Option<f64>,
    /// Of `engines`: their threads that make attempts' directories ahead
    /// (`gridfold-fresh-dirs`, with `--dirs-ahead`), that is the filesystem's
    /// inode allocation, whose cost depends on the filesystem's state (see
    /// `engine::work_root`). 0 with `--dirs-ahead 0`: each start's `mkdir`
    /// is then in `engines`, not apart.
    pub engines_making_work_dirs: f64,
    pub projector: f64,
    pub broker: Option<f64>,
}

/// A process this bench started, stopped (SIGTERM, then SIGKILL) when dropped.
struct Process {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Process {
    fn start(name: &str, args: &[String], dir: &Path) -> anyhow::Result<Process> {
        let exe = std::env::current_exe().context("finding this program to start its projector and engines")?;
        let log = dir.join(format!("{name}.log"));
        let output = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let child = Command::new(&exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(output.try_clone()?)
            .stderr(output)
            .spawn()
            .with_context(|| format!("starting {} {}", exe.display(), args.join(" ")))?;
        Ok(Process { name: name.to_string(), child, log })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last lines it wrote, for an error message.
    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(12)..].join("\n    ");
        format!("{} (its log, {}):\n    {tail}", self.name, self.log.display())
    }

    /// Fails when it has exited already: nothing it was started for can happen now.
    fn check_running(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(anyhow!("{} exited early ({status})\n  {}", self.name, self.tail())),
            Err(e) => Err(anyhow!("cannot tell whether {} runs: {e}", self.name)),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill has no memory preconditions; the child is ours and not reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time (µs, children excluded) of a process now; 0 when it cannot be read.
fn cpu_us(pid: u32) -> f64 {
    cpu_ticks_of_pid(pid).map_or(0.0, ticks_to_us)
}

/// CPU time (µs) of an engine's thread that makes attempts' directories ahead.
fn work_dirs_cpu_us(pid: u32) -> f64 {
    ticks_to_us(cpu_ticks_of_threads(pid, FRESH_DIRS_THREAD))
}

/// The name of the engine's `gridfold-fresh-dirs` thread as `/proc` shows it (15 bytes).
const FRESH_DIRS_THREAD: &str = "gridfold-fresh-";

/// Times `spawning` and the whole machine's CPU while it runs.
fn spawn_limit_of(spawns: u32, parallel: u32, spawning: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<SpawnLimit> {
    let busy_before = machine_busy_ticks();
    let started = Instant::now();
    spawning()?;
    let seconds = started.elapsed().as_secs_f64();
    let busy_us = busy_before.zip(machine_busy_ticks()).map(|(before, after)| ticks_to_us(after.saturating_sub(before)));
    Ok(SpawnLimit {
        spawns,
        parallel,
        seconds,
        per_s: f64::from(spawns) / seconds.max(1e-9),
        machine_cpu_us_per_spawn: busy_us.map(|us| us / f64::from(spawns.max(1))),
        cores_busy: busy_us.map(|us| us / 1e6 / seconds.max(1e-9)),
    })
}

/// The machine's own rate: `spawns` runs of `command`, `parallel` at a time,
/// each spawned and waited for, without gridfold.
fn measure_spawn_limit(command: &[String], spawns: u32, parallel: u32) -> anyhow::Result<SpawnLimit> {
    let next = AtomicU32::new(0);
    spawn_limit_of(spawns, parallel, || std::thread::scope(|scope| -> anyhow::Result<()> {
        let workers: Vec<_> = (0..parallel.max(1))
            .map(|_| {
                scope.spawn(|| -> anyhow::Result<()> {
                    while next.fetch_add(1, Ordering::Relaxed) < spawns {
                        Command::new(&command[0])
                            .args(&command[1..])
                            .stdin(Stdio::null())
                            .stdout(Stdio::null())
                            .stderr(Stdio::null())
                            .status()
                            .with_context(|| format!("running {}", command.join(" ")))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for worker in workers {
            worker.join().map_err(|_| anyhow!("a spawning thread panicked"))??;
        }
        Ok(())
    }))
}

/// The machine's rate by `xargs -P parallel`, as a person would measure it:
/// `seq spawns | xargs -P parallel -I … command`, each run without an argument
/// added.
fn measure_spawn_limit_xargs(command: &[String], spawns: u32, parallel: u32) -> anyhow::Result<SpawnLimit> {
    let mut xargs = Command::new("xargs")
        .args(["-P", &parallel.max(1).to_string(), "-I", "{gridfold-run}"])
        .args(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting xargs (findutils) to measure the spawn limit as `xargs -P` gives it")?;
    let lines: String = (0..spawns).map(|n| format!("{n}\n")).collect();
    spawn_limit_of(spawns, parallel, || {
        {
            use std::io::Write as _;
            let mut stdin = xargs.stdin.take().ok_or_else(|| anyhow!("xargs has no standard input"))?;
            stdin.write_all(lines.as_bytes()).context("feeding xargs")?;
        }
        let status = xargs.wait().context("waiting for xargs")?;
        if !status.success() {
            bail!("`xargs -P {parallel} {}` failed ({status}): does the command run?", command.join(" "));
        }
        Ok(())
    })
}

fn real_job(tasks: u32, command: &[String]) -> JobSpec {
    JobSpec {
        id: JobId::new(JOB_ID).expect("a valid job id"),
        owner: "bench".into(),
        project: "bench".into(),
        queue: "default".into(),
        priority: 0,
        requirements: String::new(),
        max_attempts: 3,
        wall_time_limit_ms: 600_000,
        slots_per_task: 1,
        template: TaskTemplate { argv: command.to_vec(), params: BTreeMap::new() },
        tasks: TaskSet::Count(tasks),
        options: JobOptions::default(),
        task_conditions: BTreeMap::new(),
    }
}

/// The type of the filesystem `path` is on (`ext4`, `tmpfs`, ...), from
/// `/proc/self/mounts`: the longest mount point that holds it.
fn filesystem_of(path: &std::path::Path) -> String {
    let Ok(path) = path.canonicalize() else { return "unknown".to_string() };
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else { return "unknown".to_string() };
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_device, mount_point, kind) = (fields.next()?, fields.next()?, fields.next()?);
            // Mount points escape spaces as \040.
            let mount_point = mount_point.replace("\\040", " ");
            path.starts_with(&mount_point).then(|| (mount_point.len(), kind.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".to_string(), |(_, kind)| kind)
}

/// Asks the projector for its summary of the bench's job.
async fn stat(client: &async_nats::Client) -> anyhow::Result<StateSummary> {
    let question = serde_json::to_vec(&StatRequest { job: Some(JOB_ID.to_string()), ..StatRequest::default() })?;
    let reply = tokio::time::timeout(Duration::from_secs(10), client.request(STAT_SUBJECT, question.into()))
        .await
        .map_err(|_| anyhow!("the projector did not answer on {STAT_SUBJECT} within 10 s"))?
        .map_err(|e| anyhow!("asking the projector on {STAT_SUBJECT}: {e}"))?;
    serde_json::from_slice(&reply.payload).context("the projector's answer does not decode")
}

/// Runs the real bench on `server`, which the caller stops once the runtime
/// (and with it every connection to the server) is gone: a client outliving its
/// server retries, and says so.
pub async fn run_real(args: &BenchArgs, server: &NatsServer) -> anyhow::Result<RealReport> {
    let say = |line: String| {
        if !args.quiet {
            eprintln!("{line}");
        }
    };
    let tasks = args.tasks_or(2_000);
    let engines = args.engines_or(1);
    let slots = args.slots_or(8);
    let command = shell_words(&args.command)?;

    let spawn_limit = {
        say(format!("spawn limit: {tasks} x {} at {} in parallel, without gridfold…", command.join(" "), engines * slots));
        let limit = measure_spawn_limit(&command, tasks, engines * slots)?;
        say(format!("spawn limit: {:.0} /s", limit.per_s));
        limit
    };
    let spawn_limit_xargs = {
        let limit = measure_spawn_limit_xargs(&command, tasks, engines * slots)?;
        say(format!("spawn limit by xargs -P {}: {:.0} /s", engines * slots, limit.per_s));
        limit
    };

    let url = server.url();
    let broker = BrokerInfo {
        url: url.clone(),
        private: true,
        nats_server_version: Some(server.version().to_string()),
        sync: "default (the server fsyncs every 2 minutes)".to_string(),
    };
    let dir = tempdir_for("real")?;
    let work_parent = args.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    let work_root = tempdir_in(&work_parent, "work").with_context(|| format!("the engines' work directory in {}", work_parent.display()))?;
    let projector = Process::start(
        "projector",
        &["projector", "--nats", &url, "--state", &dir.0.join("projector").display().to_string(), "--register-key"]
            .map(String::from),
        &dir.0,
    )?;
    let mut agents = Vec::new();
    for i in 1..=engines {
        let name = format!("real-{i:02}");
        let work_dir = work_root.0.join(&name).display().to_string();
        let slots = slots.to_string();
        agents.push(Process::start(
            &name,
            &["engine", "--nats", &url, "--name", &name, "--slots", &slots, "--work-dir", &work_dir]
                .into_iter()
                .map(String::from)
                .chain(args.report_window_ms.iter().flat_map(|ms| ["--report-window-ms".to_string(), ms.to_string()]))
                .chain(args.dirs_ahead.iter().flat_map(|n| ["--dirs-ahead".to_string(), n.to_string()]))
                .collect::<Vec<_>>(),
            &dir.0,
        )?);
    }
    let mut processes: Vec<Process> = std::iter::once(projector).chain(agents).collect();

    let access = BrokerAccess::anonymous(url.clone());
    let (client, _) = access
        .connect("gridfold-bench", Duration::from_secs(10))
        .await
        .map_err(|e| anyhow!("connecting to the private nats-server at {url}: {e}"))?;
    say(format!("grid: a projector and {engines} engine(s) x {slots} slots, as processes, on {url}"));
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        for process in &mut processes {
            process.check_running()?;
        }
        if let Ok(summary) = stat(&client).await {
            let logged_in = summary.engines.iter().filter(|e| e.status == "logged-in").count();
            if logged_in == engines as usize {
                break;
            }
        }
        if Instant::now() > deadline {
            let tails: Vec<String> = processes.iter().map(Process::tail).collect();
            bail!("the engines did not log in within {} s\n  {}", START_TIMEOUT.as_secs(), tails.join("\n  "));
        }
        tokio::time::sleep(POLL_EVERY).await;
    }

    let log = JetStreamLog::open(&access, LogConfig::default()).await.context("opening the log")?;
    let job = real_job(tasks, &command);
    let cpu = |processes: &[Process]| processes.iter().map(|p| cpu_us(p.pid())).collect::<Vec<f64>>();
    let broker_pid = server.pid();
    let broker_before = broker_pid.map(cpu_us);
    let before = cpu(&processes);
    let work_dirs = |processes: &[Process]| processes.iter().skip(1).map(|p| work_dirs_cpu_us(p.pid())).sum::<f64>();
    let work_dirs_before = work_dirs(&processes);
    let machine_before = machine_busy_ticks();
    let started = Instant::now();
    publish(&log, &Origin::Operator, "gridfold-bench", Event::JobSubmitted(job.clone())).await?;
    let mut last_said = Instant::now();
    let summary = loop {
        tokio::time::sleep(POLL_EVERY).await;
        for process in &mut processes {
            process.check_running()?;
        }
        let summary = stat(&client).await?;
        let Some(progress) = summary.jobs.first() else { continue };
        if progress.status != "active" {
            break summary;
        }
        if last_said.elapsed() >= Duration::from_secs(1) {
            last_said = Instant::now();
            let rate = f64::from(progress.done) / started.elapsed().as_secs_f64();
            say(format!("  {}/{tasks} tasks done ({rate:.0} /s)", progress.done));
        }
        if started.elapsed() > Duration::from_secs(args.timeout_secs) {
            bail!("the job did not end within {} s ({} of {tasks} done)", args.timeout_secs, progress.done);
        }
    };
    let after = cpu(&processes);
    let machine_us = machine_before.zip(machine_busy_ticks()).map(|(before, after)| ticks_to_us(after.saturating_sub(before)));
    let work_dirs_us = work_dirs(&processes) - work_dirs_before;
    let broker_after = broker_pid.map(cpu_us);
    let ended = summary.jobs.first().map(|j| j.status.clone()).unwrap_or_default();
    if ended != "done" {
        bail!("the bench's job ended {ended}, not done: is `{}` a command that succeeds here?", command.join(" "));
    }
    say(format!("done in {:.2} s; stopping the engines and the projector", started.elapsed().as_secs_f64()));
    // The projector's own word on where it stands, for the replay to match.
    let at = (Seq(summary.last_seq), summary.chain_digest.clone());
    drop(processes);
    let delivery_messages = delivery_messages(&log).await?;

    say("reading the whole log back and replaying it with every batch re-derived…".to_string());
    let ReadBack { entries, analysis, verify, .. } = read_back_and_verify(&access, &log, std::slice::from_ref(&job), slots, at, true).await?;
    let submitted_ms = entries.get(analysis.entries_before_jobs as usize).map_or(0, |e| e.time_ms);
    let last_completion_ms = analysis.completion_times.iter().copied().max().unwrap_or(submitted_ms);
    let seconds = (last_completion_ms.saturating_sub(submitted_ms)) as f64 / 1000.0;
    let per_task = |us: f64| us / f64::from(tasks);
    let engines_us: f64 = (1..after.len()).map(|i| after[i] - before[i]).sum();
    let tasks_per_s = f64::from(tasks) / seconds.max(1e-3);
    let run_entries = entries.len() as u64 - analysis.entries_before_jobs;
    let machine_per_task = machine_us.map(per_task);
    let ratio_the_cpu_allows =
        |limit: &SpawnLimit| limit.machine_cpu_us_per_spawn.zip(machine_per_task).map(|(spawn, task)| spawn / task.max(1e-9));
    Ok(RealReport {
        broker,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        config: RealConfig {
            tasks,
            report_window_ms: args.report_window_ms.unwrap_or(crate::engine::REPORT_WINDOW_DEFAULT_MS),
            dirs_ahead: args.dirs_ahead.map_or(2 * slots as usize, usize::from).min(crate::engine::DIRS_AHEAD_MAX),
            work_dir: work_root.0.display().to_string(),
            work_dir_filesystem: filesystem_of(&work_root.0),
            engines,
            slots_per_engine: slots,
            command,
        },
        run: RealRun {
            tasks_completed: analysis.completed_events,
            seconds,
            tasks_per_s,
            ratio_to_spawn_limit: tasks_per_s / spawn_limit.per_s.max(1e-9),
            ratio_to_spawn_limit_xargs: tasks_per_s / spawn_limit_xargs.per_s.max(1e-9),
            ratio_the_cpu_allows: ratio_the_cpu_allows(&spawn_limit),
            ratio_the_cpu_allows_xargs: ratio_the_cpu_allows(&spawn_limit_xargs),
            log_entries: run_entries,
            log_entries_per_task: run_entries as f64 / f64::from(tasks),
            order_batches: analysis.batches,
            delivery_messages,
            delivery_messages_per_task: delivery_messages as f64 / f64::from(tasks),
        },
        spawn_limit,
        spawn_limit_xargs,
        cpu_us_per_task: RealCpu {
            machine: machine_per_task,
            engines: per_task(engines_us),
            engines_making_work_dirs: per_task(work_dirs_us),
            projector: per_task(after[0] - before[0]),
            broker: broker_before.zip(broker_after).map(|(b, a)| per_task(a - b)),
        },
        latency_ms: analysis.latencies(),
        verify,
    })
}

/// Messages the orders stream holds: this bench's broker is its own, so all are the run's.
async fn delivery_messages(log: &JetStreamLog) -> anyhow::Result<u64> {
    let mut stream = log.context().get_stream(STREAM_ORDERS).await.context("looking up the orders stream")?;
    Ok(stream.info().await.context("asking for the orders stream's state")?.state.messages)
}

/// `--command` split on spaces (no quoting: a bench command, not a shell).
fn shell_words(command: &str) -> anyhow::Result<Vec<String>> {
    let words: Vec<String> = command.split_whitespace().map(String::from).collect();
    if words.is_empty() {
        bail!("--command is empty: give the program to run, e.g. /bin/true");
    }
    Ok(words)
}

pub(super) fn print_real(report: &RealReport) {
    let c = &report.config;
    let run = &report.run;
    let lat = &report.latency_ms;
    let cpu = &report.cpu_us_per_task;
    let spawn = &report.spawn_limit;
    println!();
    println!(
        "gridfold bench --real: {} x `{}` on {} engine process(es) x {} slots, a projector process, nats-server {} ({} cores)",
        c.tasks,
        c.command.join(" "),
        c.engines,
        c.slots_per_engine,
        report.broker.nats_server_version.as_deref().unwrap_or("?"),
        report.cores
    );
    println!("engines' work directories in {} ({})", c.work_dir, c.work_dir_filesystem);
    println!();
    println!(
        "  real tasks:             {:>8.0} /s  ({} tasks in {:.2} s of log time, submission to last completion)",
        run.tasks_per_s, run.tasks_completed, run.seconds
    );
    println!(
        "  spawn limit:            {:>8.0} /s  ({} spawned at {} in parallel without gridfold, {:.2} s)",
        spawn.per_s, spawn.spawns, spawn.parallel, spawn.seconds
    );
    println!(
        "  {:<22}{:>8.0} /s  (fork and exec from one process, {:.2} s)",
        format!("by xargs -P {}:", report.spawn_limit_xargs.parallel),
        report.spawn_limit_xargs.per_s,
        report.spawn_limit_xargs.seconds
    );
    println!(
        "  ratio to spawn limit:   {:>8.2}  (to xargs -P: {:.2})",
        run.ratio_to_spawn_limit, run.ratio_to_spawn_limit_xargs
    );
    if let (Some(task), Some(spawn_us), Some(xargs_us)) =
        (cpu.machine, spawn.machine_cpu_us_per_spawn, report.spawn_limit_xargs.machine_cpu_us_per_spawn)
    {
        let busy = |limit: &SpawnLimit| limit.cores_busy.map_or("?".to_string(), |busy| format!("{busy:.1}"));
        println!(
            "  machine CPU per run:    {task:.0} us per task through gridfold; {spawn_us:.0} us per spawn without it ({} of {} cores busy), {xargs_us:.0} by xargs ({} busy)",
            busy(spawn),
            report.cores,
            busy(&report.spawn_limit_xargs)
        );
        println!(
            "  ratio the CPU allows:   {:>8.2}  (to xargs -P: {:.2}; gridfold adds {:.0} us of CPU per task to the spawn's own)",
            run.ratio_the_cpu_allows.unwrap_or(0.0),
            run.ratio_the_cpu_allows_xargs.unwrap_or(0.0),
            task - spawn_us
        );
    }
    println!(
        "  CPU per task:           engine(s) {:.0} us (of which making work directories {:.0} us), projector {:.0} us, broker {} us  (children excluded)",
        cpu.engines,
        cpu.engines_making_work_dirs,
        cpu.projector,
        cpu.broker.map_or("?".to_string(), |us| format!("{us:.0}"))
    );
    println!(
        "  slot free -> dispatch:  p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms",
        lat.slot_free_to_dispatch.p50, lat.slot_free_to_dispatch.p99, lat.slot_free_to_dispatch.max
    );
    println!(
        "  dispatch -> completed:  p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  (delivery, spawn, run, reports durable)",
        lat.dispatch_to_completed.p50, lat.dispatch_to_completed.p99, lat.dispatch_to_completed.max
    );
    println!(
        "  log: {} entries for the run ({:.2} per task), {} order batches; {} delivery messages ({:.2} per task)",
        run.log_entries, run.log_entries_per_task, run.order_batches, run.delivery_messages, run.delivery_messages_per_task
    );
    let v = &report.verify;
    println!(
        "  every task completed exactly once: {}; rejected entries: {}; batches re-derived: {}; divergence: {}; projector digest matches: {}",
        if v.every_task_completed_once { "yes" } else { "NO" },
        v.rejected_entries,
        v.batches_verified,
        v.divergence.as_deref().unwrap_or("none"),
        if v.projector_digest_matches { "yes" } else { "NO" }
    );
    println!("{}", if v.ok { format!("bench verified: digest {}", v.digest) } else { "bench NOT verified".to_string() });
}
