//! The Slurm commands of a gateway engine, and the parsing of what they print.
//!
//! - submit: `sbatch --parsable -J <name> --comment <task #attempt> -D <dir>
//!   -o <file> -e <file> -c <cpus> --export=ALL [--time M] [-p P] [-A A] <script>`
//!   (the script exports the task's `GRIDFOLD_*` and `CIGRI_*` variables itself:
//!   values may hold commas, which `--export=NAME=value,...` cannot carry);
//!   prints `<id>` or `<id>;<cluster>`.
//! - list: `squeue -h -t all -n <name> -o %i|%T`: every job of the gateway, its
//!   state, including those ended within `MinJobAge`.
//! - ended: `scontrol show job -o <id>`: `JobState=` and `ExitCode=<code>:<signal>`
//!   of a job that left the listing, while Slurm still knows it.
//! - cancel: `scancel <id>...`.
//! - suspend and resume: `scancel --full --signal=STOP|CONT <id>...`: the
//!   batch script and its children are stopped and continued, their CPUs kept
//!   (gridfold's suspend, not `scontrol suspend`, which only Slurm's
//!   operators may use).
//!
//! Every command runs with `SLURM_CONF` when the gateway was given one, and is
//! bounded in time ([`COMMAND_TIMEOUT`]) and in what it prints ([`OUTPUT_BYTES_MAX`]).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{RemoteCommands, RemoteEnd, RemoteSignal, RemoteState, SubmitSpec};

/// A Slurm command that has not ended after this long is killed.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// Most bytes read of one command's output.
pub const OUTPUT_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most bytes of a Slurm job id.
pub const JOB_ID_BYTES_MAX: usize = crate::core::event::REMOTE_JOB_BYTES_MAX;

/// Runs Slurm's client commands.
#[derive(Debug, Clone)]
pub struct SlurmCommands {
    slurm_conf: Option<PathBuf>,
}

impl SlurmCommands {
    pub fn new(slurm_conf: Option<PathBuf>) -> SlurmCommands {
        SlurmCommands { slurm_conf }
    }

    fn run(&self, program: &str, args: &[String]) -> Result<String, String> {
        let mut command = Command::new(program);
        command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
        if let Some(conf) = &self.slurm_conf {
            command.env("SLURM_CONF", conf);
        }
        let mut child = command.spawn().map_err(|e| format!("cannot run {program}: {e}"))?;
        let mut stdout = child.stdout.take().expect("piped");
        let mut stderr = child.stderr.take().expect("piped");
        let err_reader = std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = (&mut stderr).take(64 * 1024).read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        });
        let deadline = Instant::now() + COMMAND_TIMEOUT;
        let mut out = Vec::new();
        let _ = (&mut stdout).take(OUTPUT_BYTES_MAX as u64).read_to_end(&mut out);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) | Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("{program} did not end within {COMMAND_TIMEOUT:?}"));
                }
            }
        };
        let err_text = err_reader.join().unwrap_or_default();
        if status.success() {
            Ok(String::from_utf8_lossy(&out).into_owned())
        } else {
            Err(format!("{program} failed ({status}): {}", err_text.trim()))
        }
    }
}

/// `sbatch`'s arguments for one submission.
pub fn sbatch_args(script: &Path, job: &SubmitSpec) -> Vec<String> {
    let mut args = vec![
        "--parsable".to_string(),
        "-J".to_string(),
        job.name.clone(),
        format!("--comment={}", job.comment),
        "-D".to_string(),
        job.work_dir.display().to_string(),
        "-o".to_string(),
        job.stdout.display().to_string(),
        "-e".to_string(),
        job.stderr.display().to_string(),
        "-c".to_string(),
        job.cpus.to_string(),
        "--export=ALL".to_string(),
    ];
    if let Some(minutes) = job.time_limit_minutes {
        args.push(format!("--time={minutes}"));
    }
    if let Some(partition) = &job.partition {
        args.push(format!("--partition={partition}"));
    }
    if let Some(account) = &job.account {
        args.push(format!("--account={account}"));
    }
    args.push(script.display().to_string());
    args
}

/// The job id `sbatch --parsable` printed (`<id>` or `<id>;<cluster>`).
pub fn parse_sbatch(out: &str) -> Result<String, String> {
    let line = out.lines().map(str::trim).find(|line| !line.is_empty()).unwrap_or("");
    let id = line.split(';').next().unwrap_or("");
    if id.is_empty() || id.len() > JOB_ID_BYTES_MAX || !id.chars().all(|c| c.is_ascii_digit() || c == '_') {
        let shown: String = out.trim().chars().take(200).collect();
        return Err(format!("sbatch printed no job id: \"{shown}\""));
    }
    Ok(id.to_string())
}

/// What a Slurm job state (`%T` of squeue, `JobState=` of scontrol) means to a
/// gateway; `None` for one it does not know.
pub fn state_of(slurm_state: &str) -> Option<RemoteState> {
    let state = slurm_state.trim().trim_end_matches('+');
    Some(match state {
        "PENDING" | "CONFIGURING" | "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "RESV_DEL_HOLD" => {
            RemoteState::Pending
        }
        "RUNNING" | "COMPLETING" | "SUSPENDED" | "STAGE_OUT" | "SIGNALING" | "RESIZING" | "STOPPED" => {
            RemoteState::Running
        }
        "COMPLETED" | "FAILED" => RemoteState::Ended(RemoteEnd::Finished(None)),
        "TIMEOUT" | "DEADLINE" => RemoteState::Ended(RemoteEnd::TimedOut),
        "CANCELLED" | "PREEMPTED" | "NODE_FAIL" | "BOOT_FAIL" | "OUT_OF_MEMORY" | "REVOKED" | "SPECIAL_EXIT" => {
            RemoteState::Ended(RemoteEnd::Killed)
        }
        _ => return None,
    })
}

/// `squeue -h -o %i|%T` lines: (id, state); lines it cannot read are skipped
/// (and said so).
pub fn parse_squeue(out: &str) -> Vec<(String, RemoteState)> {
    out.lines()
        .filter(|line| !line.trim().is_empty())
        .filter_map(|line| {
            let (id, state) = line.trim().split_once('|')?;
            match state_of(state) {
                Some(state) if !id.is_empty() && id.len() <= JOB_ID_BYTES_MAX => Some((id.to_string(), state)),
                _ => {
                    tracing::warn!(line, "skipping a squeue line it cannot read");
                    None
                }
            }
        })
        .collect()
}

/// How `scontrol show job -o <id>` says the job ended: `None` while it has
/// not ended (or its state is unknown). A finished job's `ExitCode=<code>:<signal>`
/// gives its code.
pub fn parse_show_job(out: &str) -> Option<RemoteEnd> {
    let field = |name: &str| {
        out.split_whitespace()
            .find_map(|word| word.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')))
    };
    match state_of(field("JobState")?)? {
        RemoteState::Ended(RemoteEnd::Finished(_)) => {
            let code = field("ExitCode").and_then(|text| text.split(':').next()?.parse().ok());
            Some(RemoteEnd::Finished(code))
        }
        RemoteState::Ended(end) => Some(end),
        RemoteState::Pending | RemoteState::Running => None,
    }
}

impl RemoteCommands for SlurmCommands {
    fn submit(&self, script: &Path, job: &SubmitSpec) -> Result<String, String> {
        parse_sbatch(&self.run("sbatch", &sbatch_args(script, job))?)
    }

    fn list(&self, name: &str) -> Result<Vec<(String, RemoteState)>, String> {
        let args = ["-h", "-t", "all", "-n", name, "-o", "%i|%T"].map(String::from);
        Ok(parse_squeue(&self.run("squeue", &args)?))
    }

    fn ended(&self, id: &str) -> Result<Option<RemoteEnd>, String> {
        match self.run("scontrol", &["show".into(), "job".into(), "-o".into(), id.into()]) {
            Ok(out) => Ok(parse_show_job(&out)),
            // Slurm forgot it (past MinJobAge): nobody can say how it ended.
            Err(err) if err.contains("Invalid job id") => Ok(None),
            Err(err) => Err(err),
        }
    }

    fn cancel(&self, ids: &[String]) -> Result<(), String> {
        if ids.is_empty() {
            return Ok(());
        }
        self.run("scancel", ids).map(|_| ())
    }

    fn signal(&self, ids: &[String], signal: RemoteSignal) -> Result<(), String> {
        if ids.is_empty() {
            return Ok(());
        }
        let name = match signal {
            RemoteSignal::Stop => "STOP",
            RemoteSignal::Continue => "CONT",
        };
        let mut args = vec!["--full".to_string(), format!("--signal={name}")];
        args.extend(ids.iter().cloned());
        self.run("scancel", &args).map(|_| ())
    }
}
