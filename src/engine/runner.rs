//! Running one attempt as a child process, and nothing else: no protocol, no log.
//!
//! [`start`] creates the attempt's working directory, has `argv` started there (the
//! program looked up on `PATH`) with the given environment added to the engine's,
//! stdin from `/dev/null`, in a process group of its own, and hands back a
//! [`Killer`] at once, before the process runs. With [`LaunchSpec::group_records`]
//! the group is recorded in the engine's work directory until its leader is reaped
//! (see `groups`). A supervising task says when the process runs, then waits for
//! it, keeps the first [`RESULT_BYTES_MAX`] bytes of its stdout and the last
//! [`ERROR_TAIL_BYTES_MAX`] of its stderr, enforces the wall-time limit, and sends
//! its [`RunOutcome`] on the channel given to `start` (see [`RunNews`]).
//!
//! # Invariants
//!
//! - Every run `start` accepts yields exactly one outcome on the channel, after
//!   its one `Started` if it ran (unless the runtime itself shuts down, in which
//!   case the leader is killed on drop).
//! - Stopping (a [`Killer::stop`], the wall-time limit, or the [`Killer`] being
//!   dropped) sends SIGTERM to the whole group, then SIGKILL after the grace
//!   period, so a task's own children die with it.
//! - The group is signalled only while its leader is not yet reaped: the leader's
//!   pid, and so the group id, cannot have been reused. The supervisor waits for the
//!   leader's exit without reaping it (a pidfd the runtime polls, then `waitid(WNOWAIT)`; no thread per task), kills
//!   whatever is left of the group, and only then reaps it.
//! - **The leader dies with the engine.** Every process is started from one thread,
//!   `gridfold-spawner`, started on first use and never ending while the process
//!   lives, and asks (`PR_SET_PDEATHSIG`) for SIGKILL when that thread ends. The
//!   kernel sends the signal when the *thread* that forked the child ends, not the
//!   process: forked from a tokio blocking-pool thread, which ends after 10 s idle,
//!   or from a worker a runtime may retire, a healthy task would be killed. The child
//!   checks, after the `prctl`, that its parent is still the engine, so an engine
//!   that died during the start leaves nothing running. The signal covers the leader
//!   only (the kernel clears it in the leader's children); the group records cover
//!   the rest. The start is not a `fork` but a `clone(CLONE_VM | CLONE_VFORK)` that
//!   copies nothing of the engine (see `spawn` for why and how).
//! - A stop or a suspension asked before the spawner thread has started the
//!   process acts as soon as it runs: the supervisor reads the [`Killer`]'s
//!   wishes first thing. A started process the supervisor cannot take on (its
//!   runtime gone) is killed and reaped by the spawner thread.
//! - The leader is reaped by the supervisor (`wait4`, which also gives its CPU
//!   time), or, if the supervisor is dropped with the runtime, killed and reaped
//!   at a later start.
//! - Suspending ([`Killer::suspend`]) sends SIGSTOP to the whole group, resuming
//!   ([`Killer::resume`]) SIGCONT; the wall-time limit does not run while the
//!   group is suspended. Stopping a suspended group sends SIGCONT after SIGTERM,
//!   so the signal is not left pending.
//! - An outcome of [`RunEnd::WallTimeExceeded`] or [`RunEnd::Killed`] is final
//!   whatever the process did after being told to stop (it may trap SIGTERM and
//!   exit 0): it was stopped, not finished.
//!
//! Not here: deciding what to run, reporting, counting slots. The processes run
//! with the engine's own user and limits; there is no sandbox.

use std::io;
use std::os::unix::process::ExitStatusExt as _;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt as _};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, oneshot, watch};

use super::groups::{self, GroupRecords};
use super::spawn::{self, Prepared, SpawnSpec, Spawned};
#[cfg(test)]
use super::procfs;
use crate::core::event::{ERROR_TAIL_BYTES_MAX, RESULT_BYTES_MAX};

/// How long, after the leader exited and its group was killed, the supervisor waits
/// for stdout and stderr to close (a process that left the group may hold them open).
pub const PIPE_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// What to start.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// The program (looked up on `PATH` unless it holds a `/`) and its arguments.
    pub argv: Vec<String>,
    /// Created if missing (with its parents), unless `work_dir_made`; the
    /// process starts there.
    pub work_dir: PathBuf,
    /// The caller has just made `work_dir` (the engine's fresh directories):
    /// not looked at again, which saves a `mkdir` and a `stat` per start.
    pub work_dir_made: bool,
    /// Added to the engine's own environment; later entries win.
    pub env: Vec<(String, String)>,
    /// Stop the process this long after it started; `None`: no limit.
    pub wall_time_limit: Option<Duration>,
    /// Between SIGTERM and SIGKILL when stopping.
    pub kill_grace: Duration,
    /// Where the process group is recorded while it runs, so that the next engine on
    /// the work directory can kill what it leaves if the engine dies; the processes
    /// then carry the record's token in their environment. `None`: not recorded.
    pub group_records: Option<GroupRecords>,
    /// Where to keep the whole stdout and stderr (files `stdout` and `stderr` in
    /// this directory), each cut at `bytes_max`; `None`: not kept. The directory
    /// and a stream's file are made when its first byte comes: most tasks of a
    /// grid write nothing worth a file, and every file made is an inode the
    /// filesystem pays for twice (made now, removed at the sweep).
    pub capture: Option<Capture>,
}

/// Keeping a run's whole output in files, each at most `bytes_max` bytes.
#[derive(Debug, Clone)]
pub struct Capture {
    pub dir: PathBuf,
    pub bytes_max: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("the command is empty")]
    EmptyCommand,
    #[error("cannot create the working directory {path}: {source}")]
    WorkDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot run {program:?}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: io::Error,
    },
    #[error("cannot record the process group of {program:?} in {}: {source}", dir.display())]
    Record {
        program: String,
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The process exited by itself with this code.
    Exited(i32),
    /// The process was killed by a signal nobody in the engine sent.
    Signalled(i32),
    /// The engine stopped it at its wall-time limit.
    WallTimeExceeded,
    /// The engine stopped it on request ([`Killer::stop`], or the killer was dropped).
    Killed,
    /// A gateway's resource manager killed or preempted it, or someone cancelled
    /// it there (see [`super::gateway`]).
    Preempted,
    /// The process could not be started (the spawner thread found the program
    /// missing or not executable, or its group could not be recorded); the
    /// outcome's `stderr_tail` says why.
    NotStarted,
}

impl std::fmt::Display for RunEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunEnd::Exited(code) => write!(f, "exited with code {code}"),
            RunEnd::Signalled(signal) => write!(f, "killed by signal {signal}"),
            RunEnd::WallTimeExceeded => f.write_str("stopped at its wall-time limit"),
            RunEnd::Killed => f.write_str("stopped by the engine"),
            RunEnd::Preempted => f.write_str("killed or preempted by the resource manager"),
            RunEnd::NotStarted => f.write_str("could not start"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub end: RunEnd,
    /// User and system CPU time of the process and the children it waited for.
    /// 0 when it could not be read.
    pub cpu_ms: u64,
    /// From start to the leader's exit.
    pub wall_ms: u64,
    /// The first [`RESULT_BYTES_MAX`] bytes of stdout.
    pub stdout_head: Vec<u8>,
    /// How many bytes of stdout were dropped after the head.
    pub stdout_dropped_bytes: u64,
    /// The last [`ERROR_TAIL_BYTES_MAX`] bytes of stderr (or fewer: invalid UTF-8 is
    /// replaced, and the tail starts on a character boundary).
    pub stderr_tail: String,
    /// With a [`Capture`]: whether stdout or stderr went past its bound (the files hold the first `bytes_max`).
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// With a [`Capture`]: the bytes its files hold (no file when 0).
    pub stdout_kept_bytes: u64,
    pub stderr_kept_bytes: u64,
}

/// The group a run's process leads, as far as signals may reach it.
#[derive(Debug)]
struct Group {
    /// Changed, under the lock, when the leader has started and just before it
    /// is reaped; signals are sent only while holding the lock and seeing
    /// [`GroupState::Live`].
    state: Mutex<GroupState>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GroupState {
    /// The spawner thread has not started the leader yet; `killed`: an
    /// engine on its way out asked for SIGKILL, sent as soon as it runs.
    Starting { killed: bool },
    /// The leader runs or is a zombie: its pid, the group's id, is still ours.
    Live(i32),
    /// The leader is reaped (or never ran, or runs elsewhere): nothing to signal.
    Gone,
}

impl Group {
    fn new(state: GroupState) -> Group {
        Group { state: Mutex::new(state) }
    }

    fn state(&self) -> GroupState {
        *self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, state: GroupState) {
        *self.state.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    fn signal(&self, signal: i32) {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let GroupState::Live(pgid) = *state {
            signal_group(pgid, signal);
        }
    }

    /// SIGKILL to the group now, or as soon as its leader runs.
    fn kill(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match *state {
            GroupState::Starting { .. } => *state = GroupState::Starting { killed: true },
            GroupState::Live(pgid) => signal_group(pgid, libc::SIGKILL),
            GroupState::Gone => {}
        }
    }

    /// The leader runs as `pid`; killed at once if that was asked before.
    fn started(&self, pid: i32) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let killed = matches!(*state, GroupState::Starting { killed: true });
        *state = GroupState::Live(pid);
        if killed {
            signal_group(pid, libc::SIGKILL);
        }
    }
}

/// Sends `signal` to the group `pgid`, whose leader the caller has not reaped.
fn signal_group(pgid: i32, signal: i32) {
    // SAFETY: killpg only sends a signal; the group is ours and its leader unreaped.
    let rc = unsafe { libc::killpg(pgid, signal) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::ESRCH) {
            tracing::warn!(pgid, "cannot signal process group: {err}");
        }
    }
}

/// Stops a run. Dropping it stops the run too.
#[derive(Debug)]
pub struct Killer {
    group: Arc<Group>,
    stop: watch::Sender<bool>,
    /// `true` while the run is to be suspended.
    pause: watch::Sender<bool>,
}

impl Killer {
    /// Asks the supervisor to stop the run: SIGTERM to the group now, SIGKILL after
    /// the grace period. Returns at once; the outcome comes on the channel.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// SIGSTOP to the group (by the supervisor, which also stops the wall-time
    /// clock). Returns at once.
    pub fn suspend(&self) {
        self.pause.send_replace(true);
    }

    /// SIGCONT to a suspended group; the wall-time clock runs again.
    pub fn resume(&self) {
        self.pause.send_replace(false);
    }

    /// SIGKILL to the group now, without waiting for anything (for an engine on its
    /// way out); a run not started yet is stopped as soon as it starts. The
    /// outcome still comes on the channel if anyone reads it.
    pub fn kill_now(&self) {
        // The supervisor then reports the run stopped, and kills what is left of
        // the group as for any stop.
        self.stop();
        self.group.kill();
    }

    /// The process group (the leader's pid), once started; `None` before, after
    /// the leader is reaped, and for a remote job.
    pub fn pgid(&self) -> Option<i32> {
        match self.group.state() {
            GroupState::Live(pgid) => Some(pgid),
            GroupState::Starting { .. } | GroupState::Gone => None,
        }
    }

    /// A killer of a job that runs elsewhere (a gateway's remote job): it
    /// signals no process; whoever follows the job watches the returned
    /// receivers (stop, pause) and acts on them.
    pub fn remote() -> (Killer, watch::Receiver<bool>, watch::Receiver<bool>) {
        let (stop, stop_rx) = watch::channel(false);
        let (pause, pause_rx) = watch::channel(false);
        // Gone: `Group::signal` never sends anything.
        let group = Arc::new(Group::new(GroupState::Gone));
        (Killer { group, stop, pause }, stop_rx, pause_rx)
    }
}

/// What a run's supervisor says of it, in this order: [`RunNews::Started`]
/// once the process runs (never, if it could not start), then
/// [`RunNews::Ended`], always, once.
#[derive(Debug)]
pub enum RunNews {
    /// The spawner thread has started the leader; `pgid` is its pid.
    Started { pgid: i32 },
    /// The run is over ([`RunEnd::NotStarted`] if it never ran).
    Ended(RunOutcome),
}

/// Starts `spec` and a task supervising it, which sends `(tag, news)` on
/// `news` (see [`RunNews`]). Returns at once: the process is started by the
/// `gridfold-spawner` thread while the caller goes on (an engine handling a
/// delivery of eight runs does not wait for each to `execve` before it
/// handles the next, or the ends of runs already done). The [`Killer`] works
/// from now on: a stop or suspension asked before the start acts as soon as
/// the process runs. Fails, starting nothing, when the command cannot be
/// prepared (empty, a NUL byte, the work directory); a program that cannot
/// be run ends as [`RunEnd::NotStarted`]. Must be called within a tokio
/// runtime.
pub fn start<T: Clone + Send + 'static>(
    mut spec: LaunchSpec,
    tag: T,
    news: mpsc::UnboundedSender<(T, RunNews)>,
) -> Result<Killer, LaunchError> {
    let mut argv = std::mem::take(&mut spec.argv);
    let (program, args) = argv.split_first().ok_or(LaunchError::EmptyCommand)?;
    if !spec.work_dir_made {
        std::fs::create_dir_all(&spec.work_dir).map_err(|source| LaunchError::WorkDir {
            path: spec.work_dir.clone(),
            source,
        })?;
    }
    let token = spec.group_records.as_ref().map(|_| groups::new_token());
    if let Some(token) = &token {
        spec.env.push((groups::TOKEN_ENV.to_string(), token.clone()));
    }
    let spawn_error = |program: &str, source: io::Error| LaunchError::Spawn { program: program.to_string(), source };
    // SAFETY: getpid has no preconditions.
    let engine_pid = unsafe { libc::getpid() };
    let prepared = Prepared::new(&SpawnSpec {
        program,
        args,
        env: &spec.env,
        work_dir: &spec.work_dir,
    })
    .map_err(|source| spawn_error(program, source))?;
    // The supervisor keeps the program's name for its messages; the rest of argv is in `prepared`.
    let program = argv.swap_remove(0);
    let (reply, spawned) = oneshot::channel();
    spawner()
        .map_err(|source| spawn_error(&program, source))?
        .send(SpawnRequest { prepared, engine_pid, reply })
        .map_err(|_| spawn_error(&program, io::Error::other("the gridfold-spawner thread has ended")))?;
    let group = Arc::new(Group::new(GroupState::Starting { killed: false }));
    let (stop_tx, stop_rx) = watch::channel(false);
    let (pause_tx, pause_rx) = watch::channel(false);
    let starting = Starting {
        program,
        token,
        group: Arc::clone(&group),
        records: spec.group_records,
        stop: stop_rx,
        pause: pause_rx,
        wall_time_limit: spec.wall_time_limit,
        kill_grace: spec.kill_grace,
        capture: spec.capture,
    };
    tokio::spawn(async move {
        let spawned = spawned
            .await
            .unwrap_or_else(|_| (Instant::now(), Err(io::Error::other("the gridfold-spawner thread ended without an answer"))));
        let outcome = match starting.started(spawned) {
            Ok((supervisor, stdout, stderr)) => {
                // The receiver may be gone if the engine stopped; the news then has no reader.
                let _ = news.send((tag.clone(), RunNews::Started { pgid: supervisor.leader.pid }));
                supervisor.run(stdout, stderr).await
            }
            Err(err) => RunOutcome::not_started(&err),
        };
        let _ = news.send((tag, RunNews::Ended(outcome)));
    });
    Ok(Killer {
        group,
        stop: stop_tx,
        pause: pause_tx,
    })
}

/// A run handed to the spawner thread: what its supervisor needs once the
/// process runs.
struct Starting {
    program: String,
    token: Option<String>,
    group: Arc<Group>,
    records: Option<GroupRecords>,
    stop: watch::Receiver<bool>,
    pause: watch::Receiver<bool>,
    wall_time_limit: Option<Duration>,
    kill_grace: Duration,
    capture: Option<Capture>,
}

impl Starting {
    /// The spawner thread's answer: the supervisor of the started process and
    /// its pipes, or why it did not start (a started process that cannot be
    /// recorded or watched is killed).
    fn started(
        self,
        (started, spawned): (Instant, io::Result<Spawned>),
    ) -> Result<(Supervisor, pipe::Receiver, pipe::Receiver), LaunchError> {
        let program = self.program;
        let spawn_error = |source: io::Error| LaunchError::Spawn { program: program.clone(), source };
        let Spawned { pid, stdout, stderr, start_ticks } = spawned.map_err(spawn_error)?;
        // From here, dropping the leader kills it (and reaps it later).
        let leader = Leader { pid, reaped: false };
        self.group.started(pid);
        if let (Some(records), Some(token)) = (&self.records, &self.token)
            && let Err(source) = records.record(pid, token, start_ticks)
        {
            // Unrecorded, it could outlive a dead engine: not run. Dropping the
            // leader kills it.
            self.group.set(GroupState::Gone);
            return Err(LaunchError::Record {
                program: program.clone(),
                dir: records.dir().to_path_buf(),
                source,
            });
        }
        let pipes = pipe::Receiver::from_owned_fd_unchecked(stdout)
            .and_then(|stdout| Ok((stdout, pipe::Receiver::from_owned_fd_unchecked(stderr)?)));
        let (stdout, stderr) = match pipes {
            Ok(pipes) => pipes,
            Err(source) => {
                if let Some(records) = &self.records {
                    records.remove(pid);
                }
                self.group.set(GroupState::Gone);
                return Err(spawn_error(source));
            }
        };
        let capture = self.capture.as_ref().map(|capture| {
            (CaptureFile::new(capture, "stdout"), CaptureFile::new(capture, "stderr"))
        });
        let supervisor = Supervisor {
            leader,
            group: self.group,
            records: self.records,
            stop: self.stop,
            pause: self.pause,
            started,
            wall_time_limit: self.wall_time_limit,
            kill_grace: self.kill_grace,
            capture,
        };
        Ok((supervisor, stdout, stderr))
    }
}

impl RunOutcome {
    /// The outcome of a run that never ran, saying why.
    fn not_started(err: &LaunchError) -> RunOutcome {
        RunOutcome {
            end: RunEnd::NotStarted,
            cpu_ms: 0,
            wall_ms: 0,
            stdout_head: Vec::new(),
            stdout_dropped_bytes: 0,
            stderr_tail: tail_text(err.to_string().as_bytes(), ERROR_TAIL_BYTES_MAX),
            stdout_truncated: false,
            stderr_truncated: false,
            stdout_kept_bytes: 0,
            stderr_kept_bytes: 0,
        }
    }
}

/// The leader's pid while unreaped: dropped unreaped, it is killed (and reaped
/// at a later start).
struct Leader {
    pid: i32,
    reaped: bool,
}

impl Leader {
    /// Reaps the exited leader: its wait status and CPU time in µs.
    fn reap(&mut self) -> io::Result<(i32, u64)> {
        // Reaped or not, the pid is not ours to signal after this.
        self.reaped = true;
        spawn::reap_with_usage(self.pid)
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if !self.reaped {
            spawn::kill_and_forget(self.pid);
        }
    }
}

struct Supervisor {
    leader: Leader,
    group: Arc<Group>,
    records: Option<GroupRecords>,
    stop: watch::Receiver<bool>,
    pause: watch::Receiver<bool>,
    started: Instant,
    wall_time_limit: Option<Duration>,
    kill_grace: Duration,
    capture: Option<(CaptureFile, CaptureFile)>,
}

impl Supervisor {
    async fn run(
        mut self,
        stdout: impl AsyncRead + Unpin + Send + 'static,
        stderr: impl AsyncRead + Unpin + Send + 'static,
    ) -> RunOutcome {
        let (stdout_file, stderr_file) = match self.capture.take() {
            Some((out, err)) => (Some(out), Some(err)),
            None => (None, None),
        };
        let head = Arc::new(Mutex::new(Head { capture: stdout_file, ..Head::default() }));
        let tail = Arc::new(Mutex::new(Tail { capture: stderr_file, ..Tail::default() }));
        let readers = [
            tokio::spawn(read_into(stdout, Arc::clone(&head), Head::push)),
            tokio::spawn(read_into(stderr, Arc::clone(&tail), Tail::push)),
        ];
        let pid = self.leader.pid;
        let exited = wait_for_exit_without_reaping(pid);
        tokio::pin!(exited);
        let mut deadline = self.wall_time_limit.map(|limit| self.started + limit);
        // While suspended: the wall time the limit still allows (the clock stops).
        let mut suspended_with: Option<Option<Duration>> = None;
        let mut stopping: Option<RunEnd> = None;
        let mut kill_at: Option<Instant> = None;
        let exit_seen = loop {
            tokio::select! {
                exit = &mut exited => break exit,
                () = sleep_until(deadline), if stopping.is_none() => {
                    tracing::debug!(pgid = pid, "wall-time limit reached");
                    stopping = Some(RunEnd::WallTimeExceeded);
                    self.group.signal(libc::SIGTERM);
                    kill_at = Some(Instant::now() + self.kill_grace);
                }
                // A value change or the killer dropped: either way, stop.
                _ = self.stop.changed(), if stopping.is_none() => {
                    stopping = Some(RunEnd::Killed);
                    self.group.signal(libc::SIGTERM);
                    if suspended_with.take().is_some() {
                        self.group.signal(libc::SIGCONT);
                    }
                    kill_at = Some(Instant::now() + self.kill_grace);
                }
                Ok(()) = self.pause.changed(), if stopping.is_none() => {
                    let pause = *self.pause.borrow_and_update();
                    if pause && suspended_with.is_none() {
                        self.group.signal(libc::SIGSTOP);
                        suspended_with = Some(deadline.map(|at| at.saturating_duration_since(Instant::now())));
                        deadline = None;
                    } else if !pause && let Some(left) = suspended_with.take() {
                        self.group.signal(libc::SIGCONT);
                        deadline = left.map(|left| Instant::now() + left);
                    }
                }
                () = sleep_until(kill_at), if kill_at.is_some() => {
                    self.group.signal(libc::SIGKILL);
                    kill_at = None;
                }
            }
        };
        let wall_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if exit_seen {
            // The leader is a zombie: its group id is still ours. Whatever it left
            // running in the group goes with it.
            self.group.signal(libc::SIGKILL);
        }
        // Before the reaping frees the pid: a record never names a pid reused since.
        if let Some(records) = &self.records {
            records.remove(pid);
        }
        self.group.set(GroupState::Gone);
        let reaped = if exit_seen {
            self.leader.reap()
        } else {
            // The wait failed: the leader may still run, so reaping blocks.
            self.leader.reaped = true;
            tokio::task::spawn_blocking(move || spawn::reap_with_usage(pid))
                .await
                .unwrap_or_else(|err| Err(io::Error::other(err.to_string())))
        };
        let (status, cpu_ms) = match reaped {
            Ok((status, cpu_us)) => (Some(std::process::ExitStatus::from_raw(status)), cpu_us / 1000),
            Err(err) => {
                tracing::warn!(pid, "cannot reap the task's process: {err}");
                (None, 0)
            }
        };
        let end = match (stopping, status) {
            (Some(end), _) => end,
            (None, Some(status)) => match (status.code(), status.signal()) {
                (Some(code), _) => RunEnd::Exited(code),
                (None, Some(signal)) => RunEnd::Signalled(signal),
                (None, None) => RunEnd::Exited(-1),
            },
            (None, None) => RunEnd::Exited(-1),
        };
        for reader in readers {
            let abort = reader.abort_handle();
            if tokio::time::timeout(PIPE_DRAIN_TIMEOUT, reader)
                .await
                .is_err()
            {
                tracing::warn!(
                    pid,
                    "a process that left the task's group still holds its output open; not waiting for it"
                );
                abort.abort();
            }
        }
        let head = std::mem::take(&mut *head.lock().unwrap_or_else(|e| e.into_inner()));
        let tail = std::mem::take(&mut *tail.lock().unwrap_or_else(|e| e.into_inner()));
        RunOutcome {
            end,
            cpu_ms,
            wall_ms,
            stdout_head: head.bytes,
            stdout_dropped_bytes: head.dropped,
            stderr_tail: tail_text(&tail.bytes, ERROR_TAIL_BYTES_MAX),
            stdout_truncated: head.capture.as_ref().is_some_and(|c| c.truncated),
            stderr_truncated: tail.capture.as_ref().is_some_and(|c| c.truncated),
            stdout_kept_bytes: head.capture.as_ref().map_or(0, |c| c.written),
            stderr_kept_bytes: tail.capture.as_ref().map_or(0, |c| c.written),
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Waits until process `pid` (our child) has exited, without reaping it;
/// `false` if the wait itself failed.
///
/// The kernel says when through a pidfd (Linux 5.3 and later) the runtime polls
/// like a socket: no thread per task. Where pidfds are missing, a helper thread
/// blocks in `waitid` instead. Either way the pid stays ours (not reaped) until
/// the supervisor has killed what is left of the group.
async fn wait_for_exit_without_reaping(pid: i32) -> bool {
    match open_pidfd(pid) {
        Ok(pidfd) => {
            // SAFETY: an OwnedFd is a valid open descriptor, owned by the AsyncFd
            // until it drops, and always answers the same descriptor.
            let registered =
                unsafe { tokio::io::unix::AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) };
            let pidfd = match registered.map_err(io::Error::from) {
                Ok(fd) => fd,
                Err(err) => {
                    tracing::debug!(pid, "cannot poll the task's pidfd ({err}); waiting on a thread");
                    return wait_on_thread(pid).await.is_ok();
                }
            };
            loop {
                let mut ready = match pidfd.readable().await {
                    Ok(ready) => ready,
                    Err(err) => {
                        tracing::warn!(pid, "cannot wait for the task's process: {err}");
                        return false;
                    }
                };
                match has_exited(pid) {
                    Ok(true) => return true,
                    Ok(false) => ready.clear_ready(),
                    Err(err) => {
                        tracing::warn!(pid, "cannot wait for the task's process: {err}");
                        return false;
                    }
                }
            }
        }
        Err(err) => {
            tracing::debug!(pid, "no pidfd for the task's process ({err}); waiting on a thread");
            wait_on_thread(pid).await.is_ok()
        }
    }
}

/// A pidfd of process `pid`: readable once it has exited.
fn open_pidfd(pid: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("pidfd_open returned an impossible descriptor"))?;
    // SAFETY: the descriptor was just opened and is owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Whether our child `pid` has exited, leaving it unreaped.
fn has_exited(pid: i32) -> io::Result<bool> {
    loop {
        // SAFETY: waitid writes only into the zeroed siginfo we own.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let rc = unsafe {
            libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, libc::WEXITED | libc::WNOWAIT | libc::WNOHANG)
        };
        if rc == 0 {
            // SAFETY: after a successful waitid the pid field is set (0: not exited yet).
            return Ok(unsafe { info.si_pid() } == pid);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// [`wait_for_exit_without_reaping`] on a helper thread blocked in `waitid`.
fn wait_on_thread(pid: i32) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name(format!("gridfold-wait-{pid}"))
        .spawn(move || {
            loop {
                // SAFETY: waitid writes only into the zeroed siginfo we own.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                let rc = unsafe {
                    libc::waitid(
                        libc::P_PID,
                        pid as libc::id_t,
                        &mut info,
                        libc::WEXITED | libc::WNOWAIT,
                    )
                };
                if rc == 0 {
                    let _ = tx.send(());
                    return;
                }
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    tracing::warn!(pid, "cannot wait for the task's process: {err}");
                    return;
                }
            }
        });
    if let Err(err) = spawned {
        tracing::error!(
            pid,
            "cannot start a thread to wait for the task's process: {err}"
        );
    }
    rx
}

/// A prepared process to start from the spawner thread, and where to answer:
/// when it started (just before the clone), and the process or why not.
struct SpawnRequest {
    prepared: Prepared,
    engine_pid: libc::pid_t,
    reply: oneshot::Sender<(Instant, io::Result<Spawned>)>,
}

/// The spawner thread's queue, starting the thread on first use. The queue's sender
/// stays in a static, so the thread never sees it close and never ends.
fn spawner() -> io::Result<std::sync::mpsc::Sender<SpawnRequest>> {
    static SPAWNER: Mutex<Option<std::sync::mpsc::Sender<SpawnRequest>>> = Mutex::new(None);
    let mut spawner = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(requests) = &*spawner {
        return Ok(requests.clone());
    }
    let mut stack = spawn::ChildStack::new()?;
    let (requests, incoming) = std::sync::mpsc::channel::<SpawnRequest>();
    std::thread::Builder::new()
        .name("gridfold-spawner".to_string())
        .spawn(move || {
            for SpawnRequest { prepared, engine_pid, reply } in incoming {
                let started = Instant::now();
                let spawned = spawn::spawn(&prepared, engine_pid, &mut stack);
                // The supervisor may be gone (its runtime dropped); the child is
                // then killed and reaped.
                if let Err((_, Ok(spawned))) = reply.send((started, spawned)) {
                    spawn::kill_and_forget(spawned.pid);
                }
            }
        })?;
    *spawner = Some(requests.clone());
    Ok(requests)
}

async fn read_into<S, B>(mut source: S, sink: Arc<Mutex<B>>, push: fn(&mut B, &[u8]))
where
    S: AsyncRead + Unpin,
{
    let mut chunk = vec![0u8; READ_CHUNK_BYTES];
    loop {
        match source.read(&mut chunk).await {
            Ok(0) => return,
            Ok(n) => push(
                &mut sink.lock().unwrap_or_else(|e| e.into_inner()),
                &chunk[..n],
            ),
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => {
                tracing::debug!("reading a task's output: {err}");
                return;
            }
        }
    }
}

/// The first [`RESULT_BYTES_MAX`] bytes of a stream, and a count of the rest.
#[derive(Debug, Default)]
struct Head {
    bytes: Vec<u8>,
    dropped: u64,
    capture: Option<CaptureFile>,
}

impl Head {
    fn push(&mut self, data: &[u8]) {
        if let Some(capture) = &mut self.capture {
            capture.write(data);
        }
        let room = RESULT_BYTES_MAX - self.bytes.len();
        let taken = room.min(data.len());
        self.bytes.extend_from_slice(&data[..taken]);
        self.dropped += (data.len() - taken) as u64;
    }
}

/// The last [`ERROR_TAIL_BYTES_MAX`] bytes of a stream.
#[derive(Debug, Default)]
struct Tail {
    bytes: Vec<u8>,
    capture: Option<CaptureFile>,
}

impl Tail {
    fn push(&mut self, data: &[u8]) {
        if let Some(capture) = &mut self.capture {
            capture.write(data);
        }
        self.bytes.extend_from_slice(data);
        // Trim only once the buffer is twice the limit, so each byte moves at most twice.
        if self.bytes.len() > 2 * ERROR_TAIL_BYTES_MAX {
            let excess = self.bytes.len() - ERROR_TAIL_BYTES_MAX;
            self.bytes.drain(..excess);
        }
    }
}

/// A stream's file, written up to its bound; what comes after is counted, not
/// kept. Made (with its directory) on the first byte to keep.
#[derive(Debug)]
struct CaptureFile {
    path: PathBuf,
    file: CaptureState,
    written: u64,
    bytes_max: u64,
    truncated: bool,
}

#[derive(Debug)]
enum CaptureState {
    NotYet,
    Open(std::fs::File),
    /// It could not be made or written (a full disk): nothing more is kept.
    Failed,
}

impl CaptureFile {
    fn new(capture: &Capture, name: &str) -> Self {
        CaptureFile {
            path: capture.dir.join(name),
            file: CaptureState::NotYet,
            written: 0,
            bytes_max: capture.bytes_max,
            truncated: false,
        }
    }

    fn write(&mut self, data: &[u8]) {
        use std::io::Write as _;
        let room = self.bytes_max.saturating_sub(self.written);
        let taken = (data.len() as u64).min(room) as usize;
        self.truncated |= taken < data.len();
        if taken == 0 {
            return;
        }
        if let CaptureState::NotYet = self.file {
            let made = self
                .path
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|()| std::fs::File::create(&self.path));
            self.file = match made {
                Ok(file) => CaptureState::Open(file),
                Err(err) => {
                    tracing::warn!("keeping a task's output in {}: {err}", self.path.display());
                    CaptureState::Failed
                }
            };
        }
        let CaptureState::Open(file) = &mut self.file else {
            self.truncated = true;
            return;
        };
        match file.write_all(&data[..taken]) {
            Ok(()) => self.written += taken as u64,
            Err(err) => {
                // A full disk must not stop the task: the output is kept no further.
                tracing::warn!("keeping a task's output: {err}");
                self.file = CaptureState::Failed;
                self.truncated = true;
            }
        }
    }
}

/// The end of `bytes` as text of at most `max` bytes, starting on a character
/// boundary: a character cut by the start of the window is dropped, invalid
/// UTF-8 is replaced (U+FFFD), and the text is cut from the front to fit.
pub fn tail_text(bytes: &[u8], max: usize) -> String {
    let window = &bytes[bytes.len().saturating_sub(max)..];
    // Skip the continuation bytes of a character whose start fell outside the window.
    let skip = window
        .iter()
        .take(3)
        .take_while(|&&b| b & 0b1100_0000 == 0b1000_0000)
        .count();
    let text = String::from_utf8_lossy(&window[skip..]);
    if text.len() <= max {
        return text.into_owned();
    }
    let mut cut = text.len() - max;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    text[cut..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_start_on_a_character_boundary_and_fit() {
        assert_eq!(tail_text(b"hello", 10), "hello");
        assert_eq!(tail_text(b"hello", 3), "llo");
        // "é" is C3 A9: a window starting at A9 drops it.
        assert_eq!(tail_text("aé!".as_bytes(), 2), "!");
        assert_eq!(tail_text("aé!".as_bytes(), 3), "é!");
        // Invalid bytes become U+FFFD (3 bytes each), and the text is cut to fit.
        let text = tail_text(&[0xff; 10], 10);
        assert!(
            text.len() <= 10 && text.chars().all(|c| c == '\u{FFFD}'),
            "{text:?}"
        );
        assert_eq!(text.chars().count(), 3);
    }

    #[test]
    fn heads_and_tails_keep_their_limits() {
        let mut head = Head::default();
        head.push(&vec![b'a'; RESULT_BYTES_MAX - 1]);
        head.push(b"bcd");
        assert_eq!(head.bytes.len(), RESULT_BYTES_MAX);
        assert_eq!(head.bytes.last(), Some(&b'b'));
        assert_eq!(head.dropped, 2);
        let mut tail = Tail::default();
        for n in 0..10_000u32 {
            tail.push(format!("{n}\n").as_bytes());
        }
        assert!(tail.bytes.len() <= 2 * ERROR_TAIL_BYTES_MAX);
        assert!(tail_text(&tail.bytes, ERROR_TAIL_BYTES_MAX).ends_with("9998\n9999\n"));
    }

    /// The pgid of the next news, which must say the run started.
    async fn started<T>(rx: &mut mpsc::UnboundedReceiver<(T, RunNews)>) -> i32 {
        match rx.recv().await.expect("news of the run") {
            (_, RunNews::Started { pgid }) => pgid,
            (_, RunNews::Ended(outcome)) => panic!("ended without starting: {outcome:?}"),
        }
    }

    /// The run's outcome, after its start.
    async fn ended<T>(rx: &mut mpsc::UnboundedReceiver<(T, RunNews)>) -> (T, RunOutcome) {
        loop {
            match rx.recv().await.expect("news of the run") {
                (_, RunNews::Started { .. }) => continue,
                (tag, RunNews::Ended(outcome)) => return (tag, outcome),
            }
        }
    }

    /// The outcome of a run that must not have started: no `Started` before it.
    async fn ended_unstarted<T>(rx: &mut mpsc::UnboundedReceiver<(T, RunNews)>) -> RunOutcome {
        match rx.recv().await.expect("news of the run") {
            (_, RunNews::Ended(outcome)) => {
                assert_eq!(outcome.end, RunEnd::NotStarted, "{outcome:?}");
                outcome
            }
            (_, RunNews::Started { pgid }) => panic!("started as group {pgid}"),
        }
    }

    async fn run(argv: &[&str], limit: Option<Duration>) -> (RunOutcome, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let spec = LaunchSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            work_dir: dir.path().join("w"),
            work_dir_made: false,
            env: vec![("GRIDFOLD_TEST".into(), "yes".into())],
            wall_time_limit: limit,
            kill_grace: Duration::from_millis(200),
            group_records: None,
            capture: None,
        };
        let _killer = start(spec, 7u32, tx).unwrap();
        let (tag, outcome) = ended(&mut rx).await;
        assert_eq!(tag, 7);
        (outcome, dir)
    }

    /// The state letter of process `pid` once it is `wanted`, within five seconds.
    async fn state_becomes(pid: i32, wanted: char) -> char {
        let mut state = '?';
        for _ in 0..500 {
            state = procfs::read_stat(pid).map_or('?', |stat| stat.state);
            if state == wanted {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        state
    }

    #[tokio::test]
    async fn a_suspended_run_is_stopped_and_its_wall_time_clock_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let spec = LaunchSpec {
            argv: vec!["sleep".into(), "0.6".into()],
            work_dir: dir.path().join("w"),
            work_dir_made: false,
            env: Vec::new(),
            wall_time_limit: Some(Duration::from_millis(900)),
            kill_grace: Duration::from_millis(200),
            group_records: None,
            capture: None,
        };
        let killer = start(spec, 1u32, tx).unwrap();
        // Asked before the spawner thread has started it, most likely: it acts once it runs.
        killer.suspend();
        let pgid = started(&mut rx).await;
        assert_eq!(state_becomes(pgid, 'T').await, 'T', "SIGSTOP reached the group");
        // Suspended past the wall-time limit: the clock does not run meanwhile.
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        killer.resume();
        // Sleeping again, or already done: its sleep's timer ran on while it was stopped.
        let mut state = 'T';
        for _ in 0..500 {
            state = procfs::read_stat(pgid).map_or('-', |stat| stat.state);
            if state != 'T' {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_ne!(state, 'T', "SIGCONT reached the group");
        let (_, outcome) = ended(&mut rx).await;
        assert_eq!(outcome.end, RunEnd::Exited(0), "finished within its limit of running time");
        assert!(outcome.wall_ms >= 1_000, "suspended a second, past its 900 ms limit: {} ms", outcome.wall_ms);
    }

    /// An engine may be told to stop a run before the spawner thread has
    /// started it: the run is stopped as soon as it runs, not left running.
    #[test]
    fn a_kill_asked_before_the_process_runs_is_a_sigkill_as_soon_as_it_runs() {
        use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
        let group = Group::new(GroupState::Starting { killed: false });
        // An engine on its way out, before the spawner has started the leader.
        group.kill();
        assert_eq!(group.state(), GroupState::Starting { killed: true });
        let mut leader = std::process::Command::new("sleep").arg("30").process_group(0).spawn().unwrap();
        let pid = i32::try_from(leader.id()).unwrap();
        group.started(pid);
        assert_eq!(group.state(), GroupState::Live(pid));
        let status = leader.wait().unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "killed, not asked to stop: {status}");
    }

    #[tokio::test]
    async fn a_stop_asked_before_the_process_runs_stops_it_once_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let killer = start(spec_of(&["sleep", "30"], dir.path().join("w"), vec![]), 1u32, tx).unwrap();
        killer.stop();
        let asked = Instant::now();
        let (_, outcome) = ended(&mut rx).await;
        assert_eq!(outcome.end, RunEnd::Killed);
        assert!(asked.elapsed() < Duration::from_secs(10), "stopped, not left to sleep its 30 s");
    }

    #[tokio::test]
    async fn a_suspended_run_can_be_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let spec = LaunchSpec {
            argv: vec!["sh".into(), "-c".into(), "trap 'exit 0' TERM; sleep 30 & wait".into()],
            work_dir: dir.path().join("w"),
            work_dir_made: false,
            env: Vec::new(),
            wall_time_limit: None,
            kill_grace: Duration::from_secs(20),
            group_records: None,
            capture: None,
        };
        let killer = start(spec, 1u32, tx).unwrap();
        let pgid = started(&mut rx).await;
        killer.suspend();
        assert_eq!(state_becomes(pgid, 'T').await, 'T');
        let stopped_at = Instant::now();
        killer.stop();
        let (_, outcome) = ended(&mut rx).await;
        assert_eq!(outcome.end, RunEnd::Killed);
        assert!(stopped_at.elapsed() < Duration::from_secs(10), "SIGTERM was not left pending: the grace did not run out");
    }

    #[tokio::test]
    async fn a_captured_run_keeps_its_whole_output_up_to_its_bound_and_says_what_it_cut() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let capture = Capture { dir: dir.path().join("w.output"), bytes_max: 100_000 };
        let spec = LaunchSpec {
            argv: ["sh", "-c", "head -c 150000 /dev/zero | tr '\\0' x; echo err >&2"].iter().map(|s| s.to_string()).collect(),
            work_dir: dir.path().join("w"),
            work_dir_made: false,
            env: vec![],
            wall_time_limit: None,
            kill_grace: Duration::from_millis(200),
            group_records: None,
            capture: Some(capture.clone()),
        };
        let _killer = start(spec, 1u32, tx).unwrap();
        let (_, outcome) = ended(&mut rx).await;
        assert_eq!(outcome.end, RunEnd::Exited(0));
        // The log's head is 64 KiB; the kept file the whole bound.
        assert_eq!(outcome.stdout_head.len(), RESULT_BYTES_MAX);
        let stdout = std::fs::read(capture.dir.join("stdout")).unwrap();
        assert!(stdout.len() == 100_000 && stdout.iter().all(|b| *b == b'x'), "{} bytes", stdout.len());
        assert_eq!(std::fs::read(capture.dir.join("stderr")).unwrap(), b"err\n");
        assert_eq!((outcome.stdout_truncated, outcome.stderr_truncated), (true, false));
    }

    /// Most tasks print nothing: they cost no directory and no file, and say
    /// they kept nothing; a stream that prints gets its file, and only it.
    #[tokio::test]
    async fn a_captured_run_that_prints_nothing_makes_no_file_and_one_that_prints_only_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let run_capturing = |argv: &[&str], name: &str| {
            let (tx, rx) = mpsc::unbounded_channel();
            let capture = Capture { dir: dir.path().join(format!("{name}.output")), bytes_max: 1_000 };
            let spec = LaunchSpec {
                argv: argv.iter().map(|s| s.to_string()).collect(),
                work_dir: dir.path().join(name),
                work_dir_made: false,
                env: vec![],
                wall_time_limit: None,
                kill_grace: Duration::from_millis(200),
                group_records: None,
                capture: Some(capture.clone()),
            };
            let killer = start(spec, 1u32, tx).unwrap();
            (killer, rx, capture)
        };
        let (_silent_killer, mut silent, silent_capture) = run_capturing(&["true"], "silent");
        let (_, outcome) = ended(&mut silent).await;
        assert_eq!(outcome.end, RunEnd::Exited(0));
        assert_eq!((outcome.stdout_kept_bytes, outcome.stderr_kept_bytes), (0, 0));
        assert!(!silent_capture.dir.exists(), "no output directory for a task that printed nothing");
        let (_loud_killer, mut loud, loud_capture) = run_capturing(&["sh", "-c", "echo err >&2"], "loud");
        let (_, outcome) = ended(&mut loud).await;
        assert_eq!((outcome.stdout_kept_bytes, outcome.stderr_kept_bytes), (0, 4));
        assert_eq!(std::fs::read(loud_capture.dir.join("stderr")).unwrap(), b"err\n");
        assert!(!loud_capture.dir.join("stdout").exists(), "no file for the stream that printed nothing");
    }

    #[tokio::test]
    async fn runs_a_process_and_captures_its_output() {
        let (outcome, dir) = run(
            &[
                "sh",
                "-c",
                "echo out $GRIDFOLD_TEST; echo err >&2; pwd > where; exit 3",
            ],
            None,
        )
        .await;
        assert_eq!(outcome.end, RunEnd::Exited(3));
        assert_eq!(outcome.stdout_head, b"out yes\n");
        assert_eq!(outcome.stderr_tail, "err\n");
        let cwd = std::fs::read_to_string(dir.path().join("w/where")).unwrap();
        assert_eq!(
            cwd.trim(),
            dir.path()
                .join("w")
                .canonicalize()
                .unwrap()
                .to_str()
                .unwrap()
        );
    }

    #[tokio::test]
    async fn measures_cpu_time() {
        let (outcome, _dir) = run(
            &[
                "sh",
                "-c",
                "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done",
            ],
            None,
        )
        .await;
        assert_eq!(outcome.end, RunEnd::Exited(0));
        assert!(outcome.cpu_ms > 0, "{outcome:?}");
        assert!(outcome.cpu_ms <= outcome.wall_ms + 20, "{outcome:?}");
    }

    /// The exit of a task's process is awaited through a pidfd the runtime
    /// polls: no thread is started per task (where pidfds exist, as here).
    #[tokio::test]
    async fn a_running_task_is_awaited_without_a_thread_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let spec = LaunchSpec {
            argv: ["sleep", "1"].iter().map(|s| s.to_string()).collect(),
            work_dir: dir.path().join("w"),
            work_dir_made: false,
            env: vec![],
            wall_time_limit: None,
            kill_grace: Duration::from_millis(200),
            group_records: None,
            capture: None,
        };
        assert!(open_pidfd(std::process::id() as i32).is_ok(), "this kernel has pidfds");
        let _killer = start(spec, 1u32, tx).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let waiting_threads = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
            .filter(|name| name.starts_with("gridfold-wait"))
            .count();
        assert_eq!(waiting_threads, 0, "a thread waits for the task");
        let (_, outcome) = ended(&mut rx).await;
        assert_eq!(outcome.end, RunEnd::Exited(0));
        assert!(outcome.wall_ms >= 900, "the exit was seen when it happened: {} ms", outcome.wall_ms);
    }

    #[tokio::test]
    async fn the_wall_time_limit_stops_the_group() {
        let started = Instant::now();
        let (outcome, _dir) = run(
            &["sh", "-c", "trap '' TERM; sleep 30 & wait"],
            Some(Duration::from_millis(300)),
        )
        .await;
        assert_eq!(outcome.end, RunEnd::WallTimeExceeded);
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "SIGKILL followed the ignored SIGTERM"
        );
    }

    #[tokio::test]
    async fn a_group_is_recorded_while_it_runs_with_its_token_and_forgotten_when_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let (claim, _) = groups::claim_work_dir(dir.path()).unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let spec = LaunchSpec {
            argv: [
                "sh",
                "-c",
                "echo \"$GRIDFOLD_GROUP_TOKEN\"; read line < fifo",
            ]
            .map(String::from)
            .to_vec(),
            work_dir: dir.path().join("w"),
            work_dir_made: false,
            env: vec![],
            wall_time_limit: None,
            kill_grace: Duration::from_millis(10),
            group_records: Some(claim.records().clone()),
            capture: None,
        };
        std::fs::create_dir_all(&spec.work_dir).unwrap();
        let fifo = std::ffi::CString::new(spec.work_dir.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the path only.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let _killer = start(spec, (), tx).unwrap();
        let pgid = started(&mut rx).await;
        let recorded = || groups::read_records(claim.records().dir()).unwrap().records;
        let [record] = &recorded()[..] else { panic!("one group recorded: {:?}", recorded()) };
        let record = record.clone();
        assert_eq!(record.pgid, pgid);
        assert_eq!(
            Some(record.start_ticks),
            procfs::read_stat(pgid).map(|s| s.start_ticks)
        );
        std::fs::write(dir.path().join("w/fifo"), "go\n").unwrap();
        let ((), outcome) = ended(&mut rx).await;
        assert_eq!(outcome.end, RunEnd::Exited(0));
        assert_eq!(
            outcome.stdout_head,
            format!("{}\n", record.token).into_bytes()
        );
        assert_eq!(recorded(), [], "the record went with the group");
    }

    #[tokio::test]
    async fn a_missing_program_does_not_start() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let spec = LaunchSpec {
            argv: vec!["gridfold-no-such-program".into()],
            work_dir: dir.path().into(),
            work_dir_made: false,
            env: vec![],
            wall_time_limit: None,
            kill_grace: Duration::from_millis(10),
            group_records: None,
            capture: None,
        };
        let _killer = start(spec, (), tx).unwrap();
        let outcome = ended_unstarted(&mut rx).await;
        assert!(outcome.stderr_tail.contains("gridfold-no-such-program"), "{}", outcome.stderr_tail);
    }

    fn spec_of(argv: &[&str], work_dir: PathBuf, env: Vec<(String, String)>) -> LaunchSpec {
        LaunchSpec {
            argv: argv.iter().map(|s| s.to_string()).collect(),
            work_dir,
            work_dir_made: false,
            env,
            wall_time_limit: None,
            kill_grace: Duration::from_millis(200),
            group_records: None,
            capture: None,
        }
    }

    async fn run_spec(spec: LaunchSpec) -> RunOutcome {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let _killer = start(spec, (), tx).unwrap();
        ended(&mut rx).await.1
    }

    /// The task sees the engine's environment with its own entries over it
    /// (the last of a name wins), and its own `PATH` finds its program.
    #[tokio::test]
    async fn a_task_gets_the_engines_environment_with_its_own_over_it_and_its_path_finds_its_program() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("gridfold-test-prog"), "#!/bin/sh\nenv\n").unwrap();
        std::fs::set_permissions(bin.join("gridfold-test-prog"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let path = format!("/usr/bin:/bin:{}", bin.display());
        let env = vec![
            ("GRIDFOLD_TEST".to_string(), "first".to_string()),
            ("GRIDFOLD_TEST".to_string(), "second".to_string()),
            ("PATH".to_string(), path.clone()),
        ];
        let outcome = run_spec(spec_of(&["gridfold-test-prog"], dir.path().join("w"), env)).await;
        assert_eq!(outcome.end, RunEnd::Exited(0), "{outcome:?}");
        let text = String::from_utf8(outcome.stdout_head).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.contains(&"GRIDFOLD_TEST=second") && !lines.contains(&"GRIDFOLD_TEST=first"), "{text}");
        assert!(lines.contains(&format!("PATH={path}").as_str()), "{text}");
        let home = std::env::var("HOME").unwrap_or_default();
        assert!(home.is_empty() || lines.contains(&format!("HOME={home}").as_str()), "the engine's own entries: {text}");
    }

    /// Started as std's children are: stdin is `/dev/null`, the leader leads a
    /// group of its own, no signal blocked and SIGPIPE at its default (Rust
    /// ignores it in the engine).
    #[tokio::test]
    async fn a_task_reads_dev_null_leads_its_own_group_and_blocks_no_signal() {
        let dir = tempfile::tempdir().unwrap();
        let script = "cat; read -r pid comm state ppid pgid rest < /proc/$$/stat; echo \"$$ $pgid\"; \
                      exec grep -E '^Sig(Blk|Ign):' /proc/self/status";
        let outcome = run_spec(spec_of(&["sh", "-c", script], dir.path().join("w"), vec![])).await;
        assert_eq!(outcome.end, RunEnd::Exited(0), "{outcome:?}");
        let text = String::from_utf8(outcome.stdout_head).unwrap();
        let mut lines = text.lines();
        let ids: Vec<&str> = lines.next().unwrap().split(' ').collect();
        assert_eq!(ids[0], ids[1], "the leader's pid is its group: {text}");
        let mask = |name: &str| {
            let line = text.lines().find(|l| l.starts_with(name)).unwrap();
            u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
        };
        assert_eq!(mask("SigBlk:"), 0, "{text}");
        assert_eq!(mask("SigIgn:") & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE not ignored: {text}");
    }

    /// A program found but not executable is refused with the reason, and the
    /// child that tried it is reaped (no zombie left behind).
    #[tokio::test]
    async fn a_program_that_is_not_executable_does_not_start_and_leaves_no_zombie() {
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("not-executable");
        std::fs::write(&program, "#!/bin/sh\n").unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let spec = spec_of(&[program.to_str().unwrap()], dir.path().join("w"), vec![]);
        let _killer = start(spec, (), tx).unwrap();
        let err = ended_unstarted(&mut rx).await.stderr_tail;
        assert!(err.contains("not-executable") && err.contains("ermission denied"), "{err}");
        let zombies = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
            .flat_map(|children| children.split_whitespace().map(str::to_string).collect::<Vec<_>>())
            .filter_map(|pid| procfs::read_stat(pid.parse().ok()?))
            .filter(|stat| stat.state == 'Z')
            .count();
        assert_eq!(zombies, 0);
    }

    /// A leader whose supervisor goes with the runtime is killed, and reaped
    /// at the next start.
    #[test]
    fn a_leader_left_by_a_dropped_runtime_is_killed_and_reaped_at_the_next_start() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (killer, pid) = runtime.block_on(async {
            let killer = start(spec_of(&["sleep", "30"], dir.path().join("a"), vec![]), (), tx.clone()).unwrap();
            (killer, started(&mut rx).await)
        });
        std::mem::forget(killer);
        drop(runtime);
        let live = |pid: i32| procfs::read_stat(pid).is_some_and(|stat| stat.is_live());
        let deadline = Instant::now() + Duration::from_secs(5);
        while live(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!live(pid), "the leader was killed with its runtime");
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outcome = runtime.block_on(run_spec(spec_of(&["true"], dir.path().join("b"), vec![])));
        assert_eq!(outcome.end, RunEnd::Exited(0));
        assert!(procfs::read_stat(pid).is_none(), "the killed leader was reaped");
    }
}
