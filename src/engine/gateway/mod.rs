//! Gateway engines: an engine that runs each attempt it is given as a batch job
//! of a resource manager it does not own (CiGri's runner over OAR; here Slurm),
//! instead of as a child process.
//!
//! The agent (`engine::agent`) keeps the protocol (login, heartbeats, epochs,
//! orders, reports); a gateway only replaces [`super::runner::start`]:
//! [`Gateway::submit`] submits the attempt (`sbatch`) and hands back a
//! [`Killer`] whose `stop` cancels the remote job (`scancel`). One poller thread
//! per gateway asks the resource manager once per interval about every job it
//! holds (one `squeue` for all, not one process per job) and sends, in order,
//! [`GatewayNotice::Started`] when the job starts (with its remote id) and
//! [`GatewayNotice::Ended`] with its outcome when it ends.
//!
//! # Invariants
//!
//! - Every submitted job yields at most one `Started` and exactly one `Ended`,
//!   `Started` first when the job ran, unless the engine stops first (then the
//!   poller cancels every job it still holds as it ends).
//! - A job the resource manager killed, preempted or timed out without being
//!   asked by this engine, or that someone cancelled from outside, ends as
//!   [`RunEnd::Preempted`] (the agent reports `FailureKind::Preempted`, which the
//!   fold requeues without using an attempt); a job this engine cancelled ends as
//!   [`RunEnd::Killed`].
//! - At most [`JOBS_MAX`] jobs are held; a submission beyond is refused.
//!
//! Not here: how many jobs to hold (the projector's flood control decides what
//! it dispatches), accounting, file staging: the job runs in the attempt's
//! directory, which the cluster's nodes must see (a shared file system).

pub mod slurm;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::runner::{Killer, LaunchSpec, RunEnd, RunOutcome};
use crate::core::event::{ERROR_TAIL_BYTES_MAX, RESULT_BYTES_MAX};
use crate::core::ids::{Attempt, TaskRef};

/// Most jobs one gateway holds submitted at once.
pub const JOBS_MAX: usize = 100_000;
/// How often the poller asks the resource manager, by default.
pub const POLL_INTERVAL_DEFAULT: Duration = Duration::from_millis(500);
/// Most job ids one cancel command names.
const CANCEL_IDS_PER_COMMAND_MAX: usize = 500;

pub type AttemptKey = (TaskRef, Attempt);

/// Which resource manager a gateway submits to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GatewayKind {
    Slurm,
}

impl GatewayKind {
    pub fn parse(text: &str) -> Result<GatewayKind, String> {
        match text {
            "slurm" => Ok(GatewayKind::Slurm),
            other => Err(format!("unknown gateway {other:?}; known: slurm")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            GatewayKind::Slurm => "slurm",
        }
    }
}

/// How a gateway engine submits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    pub kind: GatewayKind,
    /// `--partition` of every job; `None`: the cluster's default.
    pub partition: Option<String>,
    /// `--account` of every job; `None`: the user's default.
    pub account: Option<String>,
    /// The `slurm.conf` the commands use (`SLURM_CONF`); `None`: Slurm's default.
    pub slurm_conf: Option<PathBuf>,
    pub poll_interval: Duration,
}

/// What the poller tells the agent, in order for each job.
#[derive(Debug)]
pub enum GatewayNotice {
    /// The resource manager started the job.
    Started { key: AttemptKey, remote_job: String },
    /// The job ended.
    Ended { key: AttemptKey, outcome: RunOutcome },
}

/// A remote job's state as the resource manager reports it, reduced to what a
/// gateway acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteState {
    /// Waiting in the remote queue (or held, or configuring).
    Pending,
    /// Started (running, completing, suspended).
    Running,
    /// Ended; how it ended is read from the exit-code file and the end state.
    Ended(RemoteEnd),
}

/// How the resource manager says a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteEnd {
    /// Ran to its end; the exit code, when the resource manager gave it (the
    /// job's exit-code file is read first).
    Finished(Option<i32>),
    /// Killed at its time limit.
    TimedOut,
    /// Cancelled, preempted, its node failed, out of memory, or another end the
    /// job's command did not choose.
    Killed,
}

/// The resource manager's commands, behind a trait so the gateway's logic is
/// tested on recorded outputs without a cluster.
pub trait RemoteCommands: Send + Sync + 'static {
    /// Submits `script` (its directives are its arguments); returns the job id.
    fn submit(&self, script: &Path, job: &SubmitSpec) -> Result<String, String>;
    /// The state of every live job named `name` of this gateway: (id, state).
    fn list(&self, name: &str) -> Result<Vec<(String, RemoteState)>, String>;
    /// How a job that left the list ended, if the resource manager still knows it.
    fn ended(&self, id: &str) -> Result<Option<RemoteEnd>, String>;
    /// Cancels jobs (gone ones are no error).
    fn cancel(&self, ids: &[String]) -> Result<(), String>;
    /// Sends a signal to the processes of running jobs (gridfold's suspend and resume).
    fn signal(&self, ids: &[String], signal: RemoteSignal) -> Result<(), String>;
}

/// What a gateway's suspend and resume send to a remote job's processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteSignal {
    Stop,
    Continue,
}

/// What one submission asks of the resource manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubmitSpec {
    /// The job name every job of this gateway shares (so one listing finds them all).
    pub name: String,
    /// A label people read (`<task> #<attempt>`).
    pub comment: String,
    pub work_dir: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// Slots (CPUs) of the job.
    pub cpus: u32,
    /// Minutes, rounded up; `None`: the partition's limit.
    pub time_limit_minutes: Option<u64>,
    pub partition: Option<String>,
    pub account: Option<String>,
}

/// The exit-code file the job script writes when the command ends by itself.
pub const EXIT_CODE_FILE: &str = ".gridfold-exit-code";
/// The job script, written into the attempt's directory.
pub const SCRIPT_FILE: &str = ".gridfold-job.sh";

/// `GRIDFOLD_*` and, beside them, the names CiGri exports to its jobs (its
/// seed's list): `CIGRI_CAMPAIGNID` is gridfold's job, `CIGRI_JOB_ID` its task;
/// `CIGRI_WALLTIME` (`H:MM:SS`, as OAR writes it) and
/// `CIGRI_WALLTIME_SECONDS` the attempt's wall-time limit, absent without one.
pub fn cigri_aliases(env: &[(String, String)], wall_time_limit: Option<Duration>) -> Vec<(String, String)> {
    let get = |name: &str| env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut out = Vec::new();
    let mut alias = |names: &[&str], value: Option<String>| {
        if let Some(value) = value {
            for name in names {
                out.push(((*name).to_string(), value.clone()));
            }
        }
    };
    alias(&["CIGRI_CAMPAIGNID", "CIGRI_CAMPAIGN_ID"], get("GRIDFOLD_JOB_ID"));
    alias(&["CIGRI_JOB_ID", "CIGRI_JOBID", "CIGRI_JOB_NAME", "CIGRI_JOBNAME"], get("GRIDFOLD_TASK_ID"));
    alias(&["CIGRI_WORKDIR", "CIGRI_WORKING_DIRECTORY"], get("GRIDFOLD_WORKDIR"));
    alias(&["CIGRI_RESOURCES"], get("GRIDFOLD_SLOTS"));
    alias(&["CIGRI_NODE_FILE", "CIGRI_NODEFILE"], get("GRIDFOLD_NODEFILE"));
    alias(&["CIGRI_USER"], std::env::var("USER").ok());
    if let Some(limit) = wall_time_limit {
        let seconds = limit.as_secs();
        alias(&["CIGRI_WALLTIME"], Some(format!("{}:{:02}:{:02}", seconds / 3600, seconds / 60 % 60, seconds % 60)));
        alias(&["CIGRI_WALLTIME_SECONDS"], Some(seconds.to_string()));
    }
    out
}

/// `'text'` for `sh`, any `'` in it closed, escaped and reopened.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The job script: exports the environment, runs the command in the attempt's
/// directory, and writes its exit code to [`EXIT_CODE_FILE`] (so a job killed
/// before its command ended leaves none).
pub fn job_script(argv: &[String], env: &[(String, String)], work_dir: &Path) -> String {
    let mut script = String::from("#!/bin/sh\n# Written by a gridfold gateway engine.\n");
    for (name, value) in env {
        // Names come from gridfold (GRIDFOLD_PARAM_ is mangled to [A-Z0-9_]).
        if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !name.is_empty() {
            script.push_str(&format!("export {name}={}\n", shell_quote(value)));
        }
    }
    let dir = shell_quote(&work_dir.display().to_string());
    script.push_str(&format!("cd {dir} || exit 111\n"));
    let command: Vec<String> = argv.iter().map(|arg| shell_quote(arg)).collect();
    script.push_str(&command.join(" "));
    script.push_str(&format!(
        "\ncode=$?\necho \"$code\" > {}.tmp && mv {}.tmp {}\nexit \"$code\"\n",
        shell_quote(EXIT_CODE_FILE),
        shell_quote(EXIT_CODE_FILE),
        shell_quote(EXIT_CODE_FILE)
    ));
    script
}

/// Reads the exit code a job's script left, if it left one.
fn read_exit_code(work_dir: &Path) -> Option<i32> {
    std::fs::read_to_string(work_dir.join(EXIT_CODE_FILE)).ok()?.trim().parse().ok()
}

/// Starts the gateway `config` names for `engine`, after cancelling the jobs a
/// previous run of this engine left in the resource manager (their attempts
/// were requeued when this login opened a new epoch).
pub fn start_for(
    engine: &crate::core::ids::EngineId,
    config: GatewayConfig,
    notices: mpsc::UnboundedSender<GatewayNotice>,
) -> Result<Arc<Gateway>, super::EngineError> {
    let commands: Arc<dyn RemoteCommands> = match config.kind {
        GatewayKind::Slurm => Arc::new(slurm::SlurmCommands::new(config.slurm_conf.clone())),
    };
    let name = job_name(engine.as_str());
    let leftovers: Vec<String> = commands
        .list(&name)
        .map_err(|err| super::EngineError::Config(format!("the {} gateway cannot reach its resource manager: {err}", config.kind.as_str())))?
        .into_iter()
        .filter(|(_, state)| !matches!(state, RemoteState::Ended(_)))
        .map(|(id, _)| id)
        .collect();
    if !leftovers.is_empty() {
        tracing::warn!(jobs = %leftovers.join(","), "cancelling the jobs a previous run of this engine left");
        for ids in leftovers.chunks(CANCEL_IDS_PER_COMMAND_MAX) {
            commands.cancel(ids).map_err(super::EngineError::Config)?;
        }
    }
    Gateway::start(engine.as_str(), config, commands, notices)
        .map(Arc::new)
        .map_err(|err| super::EngineError::Internal(format!("cannot start the gateway's poller: {err}")))
}

/// The name every job of one gateway engine carries.
pub fn job_name(engine: &str) -> String {
    format!("gf-{engine}")
}

/// One gateway: submits, and owns the poller thread.
pub struct Gateway {
    config: GatewayConfig,
    commands: Arc<dyn RemoteCommands>,
    /// Every job of this gateway carries this name.
    name: String,
    submit_tx: std::sync::mpsc::Sender<Held>,
}

/// A job the poller follows.
struct Held {
    key: AttemptKey,
    remote_job: String,
    work_dir: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
    stop: watch::Receiver<bool>,
    /// The engine's suspend (true) or resume (false) of the attempt.
    pause: watch::Receiver<bool>,
    /// What the poller last sent the job: stopped (true) or not.
    paused: bool,
    submitted_at: Instant,
    started_at: Option<Instant>,
    /// The engine asked to cancel it (scancel sent).
    cancelling: bool,
}

impl Gateway {
    /// Starts the poller thread; it ends when the gateway is dropped (cancelling
    /// what it still holds).
    pub fn start(
        engine: &str,
        config: GatewayConfig,
        commands: Arc<dyn RemoteCommands>,
        notices: mpsc::UnboundedSender<GatewayNotice>,
    ) -> std::io::Result<Gateway> {
        let name = job_name(engine);
        let (submit_tx, submit_rx) = std::sync::mpsc::channel();
        let poller = Poller {
            commands: commands.clone(),
            name: name.clone(),
            interval: config.poll_interval,
            held: BTreeMap::new(),
            notices,
        };
        std::thread::Builder::new()
            .name(format!("gridfold-gateway-{engine}"))
            .spawn(move || poller.run(submit_rx))?;
        Ok(Gateway { config, commands, name, submit_tx })
    }

    pub fn kind(&self) -> GatewayKind {
        self.config.kind
    }

    /// Submits one attempt (blocking: call off the async loop); the returned
    /// [`Killer`]'s `stop` (or its drop) cancels the job.
    pub fn submit(&self, key: AttemptKey, spec: &LaunchSpec, cpus: u32) -> Result<(Killer, String), String> {
        std::fs::create_dir_all(&spec.work_dir)
            .map_err(|e| format!("cannot create {}: {e}", spec.work_dir.display()))?;
        let mut env = spec.env.clone();
        env.extend(cigri_aliases(&spec.env, spec.wall_time_limit));
        let script_path = spec.work_dir.join(SCRIPT_FILE);
        let _ = std::fs::remove_file(spec.work_dir.join(EXIT_CODE_FILE));
        std::fs::write(&script_path, job_script(&spec.argv, &env, &spec.work_dir))
            .map_err(|e| format!("cannot write {}: {e}", script_path.display()))?;
        let submit = SubmitSpec {
            name: self.name.clone(),
            comment: format!("{} #{}", key.0, key.1),
            work_dir: spec.work_dir.clone(),
            stdout: spec.work_dir.join("slurm.stdout"),
            stderr: spec.work_dir.join("slurm.stderr"),
            cpus: cpus.max(1),
            time_limit_minutes: spec.wall_time_limit.map(|limit| limit.as_secs().div_ceil(60).max(1)),
            partition: self.config.partition.clone(),
            account: self.config.account.clone(),
        };
        let remote_job = self.commands.submit(&script_path, &submit)?;
        let (killer, stop, pause) = Killer::remote();
        let held = Held {
            key,
            remote_job: remote_job.clone(),
            work_dir: spec.work_dir.clone(),
            stdout: submit.stdout,
            stderr: submit.stderr,
            stop,
            pause,
            paused: false,
            submitted_at: Instant::now(),
            started_at: None,
            cancelling: false,
        };
        if self.submit_tx.send(held).is_err() {
            let _ = self.commands.cancel(std::slice::from_ref(&remote_job));
            return Err("the gateway's poller has stopped".to_string());
        }
        Ok((killer, remote_job))
    }
}

struct Poller {
    commands: Arc<dyn RemoteCommands>,
    name: String,
    interval: Duration,
    /// By remote job id.
    held: BTreeMap<String, Held>,
    notices: mpsc::UnboundedSender<GatewayNotice>,
}

impl Poller {
    fn run(mut self, submissions: std::sync::mpsc::Receiver<Held>) {
        loop {
            let deadline = Instant::now() + self.interval;
            let mut gateway_gone = false;
            // Take submissions until the next poll is due.
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                match submissions.recv_timeout(left) {
                    Ok(held) => {
                        assert!(self.held.len() < JOBS_MAX, "a gateway holds at most {JOBS_MAX} jobs");
                        self.held.insert(held.remote_job.clone(), held);
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => break,
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                        gateway_gone = true;
                        break;
                    }
                }
            }
            if gateway_gone && self.held.is_empty() {
                return;
            }
            self.poll_once(gateway_gone);
            if gateway_gone {
                // The engine is gone: whatever is left was cancelled above.
                return;
            }
        }
    }

    /// Cancels what the engine asked to stop, lists the jobs once, and reports
    /// starts and ends.
    fn poll_once(&mut self, cancel_all: bool) {
        let to_cancel: Vec<String> = self
            .held
            .values_mut()
            .filter(|held| !held.cancelling)
            .filter(|held| cancel_all || held.stop.has_changed().is_err() || *held.stop.borrow())
            .map(|held| {
                held.cancelling = true;
                held.remote_job.clone()
            })
            .collect();
        for ids in to_cancel.chunks(CANCEL_IDS_PER_COMMAND_MAX) {
            if let Err(err) = self.commands.cancel(ids) {
                tracing::warn!("cannot cancel jobs {}: {err}", ids.join(","));
            }
        }
        if cancel_all {
            return;
        }
        self.send_pauses();
        let listed = match self.commands.list(&self.name) {
            Ok(listed) => listed,
            Err(err) => {
                tracing::warn!("cannot list the gateway's jobs (trying again next poll): {err}");
                return;
            }
        };
        let listed: BTreeMap<String, RemoteState> = listed.into_iter().collect();
        let ids: Vec<String> = self.held.keys().cloned().collect();
        for id in ids {
            let state = listed.get(&id).copied();
            let ended = match state {
                Some(RemoteState::Pending) => continue,
                Some(RemoteState::Running) => {
                    self.note_started(&id);
                    continue;
                }
                Some(RemoteState::Ended(end)) => end,
                None => {
                    // Gone from the listing: ask once how it ended.
                    match self.commands.ended(&id) {
                        Ok(Some(end)) => end,
                        Ok(None) => RemoteEnd::Killed,
                        Err(err) => {
                            tracing::warn!(job = %id, "cannot ask how the job ended: {err}");
                            RemoteEnd::Finished(None)
                        }
                    }
                }
            };
            self.note_ended(&id, ended);
        }
    }

    /// Stops or continues the jobs whose suspension the engine changed since
    /// the last poll (a job not yet started is left alone until it has).
    fn send_pauses(&mut self) {
        for (signal, wanted) in [(RemoteSignal::Stop, true), (RemoteSignal::Continue, false)] {
            let ids: Vec<String> = self
                .held
                .values_mut()
                .filter(|held| !held.cancelling && held.started_at.is_some())
                .filter(|held| *held.pause.borrow() == wanted && held.paused != wanted)
                .map(|held| {
                    held.paused = wanted;
                    held.remote_job.clone()
                })
                .collect();
            for ids in ids.chunks(CANCEL_IDS_PER_COMMAND_MAX) {
                if let Err(err) = self.commands.signal(ids, signal) {
                    tracing::warn!("cannot signal jobs {}: {err}", ids.join(","));
                }
            }
        }
    }

    fn note_started(&mut self, id: &str) {
        let Some(held) = self.held.get_mut(id) else { return };
        if held.started_at.is_some() {
            return;
        }
        held.started_at = Some(Instant::now());
        tracing::info!(task = %held.key.0, attempt = held.key.1, job = id, waited_ms = held.submitted_at.elapsed().as_millis() as u64, "the remote job started");
        let _ = self.notices.send(GatewayNotice::Started { key: held.key.clone(), remote_job: id.to_string() });
    }

    fn note_ended(&mut self, id: &str, end: RemoteEnd) {
        let exit_code = self.held.get(id).and_then(|held| read_exit_code(&held.work_dir));
        let ran = exit_code.is_some();
        if ran {
            // It ran, even if no poll saw it running.
            self.note_started(id);
        }
        let Some(held) = self.held.remove(id) else { return };
        let end = match (held.cancelling, exit_code, end) {
            (true, _, _) => RunEnd::Killed,
            (false, _, RemoteEnd::TimedOut) => RunEnd::WallTimeExceeded,
            (false, Some(code), RemoteEnd::Finished(_)) => RunEnd::Exited(code),
            (false, None, RemoteEnd::Finished(Some(code))) => RunEnd::Exited(code),
            // Ended without its command's exit code (killed before it ended, or
            // forgotten by the resource manager without one): not the task's fault.
            (false, _, _) => RunEnd::Preempted,
        };
        let outcome = RunOutcome {
            end,
            cpu_ms: 0,
            wall_ms: held.started_at.map_or(0, |at| at.elapsed().as_millis() as u64),
            stdout_head: read_head(&held.stdout, RESULT_BYTES_MAX),
            stdout_dropped_bytes: 0,
            stderr_tail: read_tail(&held.stderr, ERROR_TAIL_BYTES_MAX),
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_kept_bytes: 0,
            stderr_kept_bytes: 0,
        };
        tracing::info!(task = %held.key.0, attempt = held.key.1, job = id, %end, "the remote job ended");
        let _ = self.notices.send(GatewayNotice::Ended { key: held.key, outcome });
    }
}

fn read_head(path: &Path, max: usize) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    if let Ok(file) = std::fs::File::open(path) {
        let _ = file.take(max as u64).read_to_end(&mut out);
    }
    out
}

/// The last `max` bytes of a file (reading no more than twice that).
fn read_tail(path: &Path, max: usize) -> String {
    use std::io::{Read as _, Seek as _, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else { return String::new() };
    let len = file.metadata().map_or(0, |m| m.len());
    let from = len.saturating_sub(2 * max as u64);
    let mut bytes = Vec::new();
    if file.seek(SeekFrom::Start(from)).is_ok() {
        let _ = file.take(2 * max as u64).read_to_end(&mut bytes);
    }
    super::runner::tail_text(&bytes, max)
}

#[cfg(test)]
mod tests;
