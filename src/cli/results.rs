//! `gridfold tasks`, `gridfold task`, `gridfold output` and `gridfold wait`: task
//! results and accounting (Slurm's `sacct` and output files, Grid Engine's `qacct`,
//! `-o`/`-e` and `qsub -sync y`), all through the projector's queries
//! ([`crate::projector::results`]).
//!
//! Exit codes: 0 success; 1 an unknown job or task, no such output, output the
//! store holds altered (not what its engine stored: said on stderr, not
//! printed), or (for `wait`) a job that did not complete every task; 2 bad input.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use base64::Engine as _;
use clap::Args;

use super::client::{ask, block_on, NatsArgs};
use crate::human::printable;
use crate::projector::results::{
    AttemptView, OutputReply, OutputRequest, TaskReply, TaskRequest, TasksReply, TasksRequest, OUTPUT_SUBJECT,
    TASKS_SUBJECT, TASK_SUBJECT,
};

#[derive(Debug, Args)]
pub struct TasksArgs {
    /// The job.
    pub job: String,
    /// Only the tasks in this state.
    #[arg(long, value_parser = ["waiting", "dispatched", "running", "done", "failed", "cancelled"])]
    pub state: Option<String>,
    #[command(flatten)]
    pub nats: NatsArgs,
    /// One JSON object per page of tasks (see `gridfold.q.tasks` in docs/reference.md).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TaskArgs {
    /// The task, as JOB/INDEX.
    pub task: String,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// The task, as JOB/INDEX.
    pub task: String,
    /// The attempt (by default the newest one that ended).
    #[arg(long)]
    pub attempt: Option<u32>,
    /// Standard error instead of standard output.
    #[arg(long)]
    pub stderr: bool,
    #[command(flatten)]
    pub nats: NatsArgs,
}

#[derive(Debug, Args)]
pub struct WaitArgs {
    /// The job.
    pub job: String,
    /// Give up after this many seconds (exit 1); by default wait until the job ends.
    #[arg(long)]
    pub timeout_secs: Option<u64>,
    #[command(flatten)]
    pub nats: NatsArgs,
}

/// Most pages `tasks` asks for: 5,000 pages of 2,000 tasks are the 10,000,000 a job may hold.
const TASK_PAGES_MAX: u32 = 5_000;
/// Most pages `output` asks for: 2,048 of 512 KiB are 1 GiB, beyond any stored bound.
const OUTPUT_PAGES_MAX: u32 = 2_048;

pub fn tasks(args: TasksArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let mut from = 0;
        let mut out = std::io::stdout().lock();
        for page in 0..TASK_PAGES_MAX {
            let request = TasksRequest { job: args.job.clone(), state: args.state.clone(), from, limit: None };
            let reply: TasksReply = ask(&args.nats, TASKS_SUBJECT, &request).await?;
            if let Some(error) = &reply.error {
                eprintln!("{}", printable(error));
                return Ok(ExitCode::FAILURE);
            }
            if args.json {
                writeln!(out, "{}", serde_json::to_string(&reply)?)?;
            } else {
                if page == 0 {
                    writeln!(out, "{}", tasks_title(&reply))?;
                    write_task_header(&mut out)?;
                }
                write_task_lines(&mut out, &reply.tasks)?;
            }
            match reply.next_from {
                Some(next) => from = next,
                None => return Ok(ExitCode::SUCCESS),
            }
        }
        anyhow::bail!("more than {TASK_PAGES_MAX} pages of tasks: stopped")
    })
}

/// The header of the task table (`gridfold tasks`, `stat -f`).
pub(crate) fn write_task_header(out: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:>7}  {:<10}  {:>4}  {:<16}  {:<8}  {:<8}  {:>9}  {:>4}  FAILURE",
        "INDEX", "STATE", "ATT", "ENGINE", "START", "END", "WALL", "EXIT"
    )
}

/// The task table's lines, one per task.
pub(crate) fn write_task_lines(out: &mut impl Write, tasks: &[crate::projector::results::TaskLine]) -> std::io::Result<()> {
    for line in tasks {
        writeln!(
            out,
            "{:>7}  {:<10}  {:>4}  {:<16}  {:<8}  {:<8}  {:>9}  {:>4}  {}",
            line.index,
            line.state,
            line.attempts,
            engine_text(line),
            line.started_ms.map_or("-".into(), clock),
            line.ended_ms.map_or("-".into(), clock),
            line.wall_ms.map_or("-".into(), seconds),
            line.exit_code.map_or("-".into(), |c| c.to_string()),
            line.failure_kind.as_deref().unwrap_or("-"),
        )?;
    }
    Ok(())
}

/// The engine of a task line, with a gateway's remote job id after a colon (`lyon:4211`).
fn engine_text(line: &crate::projector::results::TaskLine) -> String {
    match (&line.engine, &line.remote_job) {
        (Some(engine), Some(remote_job)) => format!("{engine}:{}", printable(remote_job)),
        (Some(engine), None) => engine.clone(),
        (None, _) => "-".into(),
    }
}

fn tasks_title(reply: &TasksReply) -> String {
    let counts: Vec<String> =
        reply.counts.iter().filter(|(_, n)| **n > 0).map(|(state, n)| format!("{n} {state}")).collect();
    format!("job {} {} · {} tasks: {}", reply.job, reply.status, reply.n_tasks, counts.join(", "))
}

pub fn task(args: TaskArgs) -> anyhow::Result<ExitCode> {
    let reply: TaskReply = block_on(ask(&args.nats, TASK_SUBJECT, &TaskRequest { task: args.task.clone() }))?;
    if let Some(error) = &reply.error {
        eprintln!("{}", printable(error));
        return Ok(ExitCode::FAILURE);
    }
    if args.json {
        println!("{}", serde_json::to_string(&reply)?);
    } else {
        print!("{}", task_text(&reply));
    }
    Ok(ExitCode::SUCCESS)
}

/// `gridfold task` as a person reads it.
pub fn task_text(reply: &TaskReply) -> String {
    let mut text = format!("task {}: {}, {} attempt(s)", reply.task, reply.state, reply.attempts_total);
    if reply.attempts_forgotten > 0 {
        text += &format!(" ({} oldest no longer kept)", reply.attempts_forgotten);
    }
    text += &format!("\n  command: {}\n", printable(&reply.argv.join(" ")));
    for attempt in &reply.attempts {
        text += &attempt_text(&reply.task, attempt);
    }
    text
}

fn attempt_text(task: &str, a: &AttemptView) -> String {
    let mut text = format!("attempt {} on {}: {}", a.attempt, a.engine, a.outcome);
    if let Some(code) = a.exit_code {
        text += &format!(", exit code {code}");
    }
    if let Some(kind) = &a.failure_kind {
        text += &format!(", {kind}");
    }
    text += "\n";
    text += &format!("  dispatched {} (seq {}, decided on the state at seq {})\n", timestamp(a.dispatched_ms), a.dispatch_seq, a.based_on_seq);
    if let Some(started) = a.started_ms {
        text += &format!("  started    {}\n", timestamp(started));
    }
    if let Some(remote_job) = &a.remote_job {
        text += &format!("  remote job {} (its id in the gateway's resource manager)\n", printable(remote_job));
    }
    if let Some(cause) = &a.suspended_by_threshold {
        text += &format!("  suspended by a threshold: {}\n", printable(&cause.to_string()));
    }
    if let Some(ended) = a.ended_ms {
        text += &format!("  ended      {}", timestamp(ended));
        if let Some(seq) = a.report_seq {
            text += &format!(" (seq {seq})");
        }
        text += "\n";
    }
    if let (Some(wall), Some(cpu)) = (a.wall_ms, a.cpu_ms) {
        text += &format!("  wall {}, cpu {}\n", seconds(wall), seconds(cpu));
    }
    text += &format!("  output bound: {} of stdout and as much of stderr\n", byte_size(a.output_bytes_max));
    for altered in &a.output_altered {
        text += &format!("  ALTERED: {altered}\n");
    }
    for (stream, bytes) in [("stdout", a.stdout_stored_bytes), ("stderr", a.stderr_stored_bytes)] {
        if let Some(bytes) = bytes {
            let cut = if a.output_truncated { " (cut at its bound)" } else { "" };
            let flag = if stream == "stderr" { " --stderr" } else { "" };
            text += &format!("  {stream}: {bytes} bytes stored{cut}: gridfold output {task} --attempt {}{flag}\n", a.attempt);
        }
    }
    let block = |title: &str, body: &str| {
        let mut out = format!("  {title}:\n");
        for line in body.lines() {
            out += &format!("    | {}\n", printable(line));
        }
        out
    };
    if let Some(tail) = a.error_tail.as_deref().filter(|t| !t.is_empty()) {
        text += &block("error tail", tail);
    }
    if let Some(result) = a.result.as_deref().filter(|t| !t.is_empty()) {
        text += &block(&format!("result ({} bytes)", a.result_bytes), result);
    }
    if !a.text_kept {
        text += &format!("  (its text is no longer kept by the projector: it is on the log at seq {})\n", a.report_seq.unwrap_or(0));
    }
    text
}

/// Reads every page before it writes any: what it prints is checked whole
/// against the attempt's end report (length and blake3). When the store holds
/// something else (the projector says so, or the pages read do not match), it
/// prints none of it and says "altered" on stderr: exit 1.
pub fn output(args: OutputArgs) -> anyhow::Result<ExitCode> {
    let stream = if args.stderr { "stderr" } else { "stdout" };
    block_on(async {
        let mut read: Vec<u8> = Vec::new();
        for _ in 0..OUTPUT_PAGES_MAX {
            let request = OutputRequest {
                task: args.task.clone(),
                attempt: args.attempt,
                stream: Some(stream.to_string()),
                offset: read.len() as u64,
                max_bytes: None,
            };
            let reply: OutputReply = ask(&args.nats, OUTPUT_SUBJECT, &request).await?;
            if let Some(error) = &reply.error {
                eprintln!("{}", printable(error));
                return Ok(ExitCode::FAILURE);
            }
            if let Some(altered) = &reply.altered {
                eprintln!("altered: {altered}; not printed");
                return Ok(ExitCode::FAILURE);
            }
            let data = base64::engine::general_purpose::STANDARD
                .decode(&reply.data_base64)
                .map_err(|e| anyhow::anyhow!("the projector's output page does not decode: {e}"))?;
            read.extend_from_slice(&data);
            if reply.eof || data.is_empty() {
                if let Some(altered) = altered_read(&reply, &read) {
                    eprintln!("altered: {altered}; not printed");
                    return Ok(ExitCode::FAILURE);
                }
                let mut out = std::io::stdout().lock();
                out.write_all(&read)?;
                out.flush()?;
                if reply.truncated {
                    eprintln!("(the {stream} of {} attempt {} was cut at its bound: {} bytes stored)", reply.task, reply.attempt, reply.total_bytes);
                }
                return Ok(ExitCode::SUCCESS);
            }
        }
        anyhow::bail!("more than {OUTPUT_PAGES_MAX} pages of output: stopped")
    })
}

/// Why the whole of what was read (`read`, every page to the last, `reply`) is
/// not what the attempt's engine reported storing; `None` when it is.
fn altered_read(reply: &OutputReply, read: &[u8]) -> Option<String> {
    let found = blake3::hash(read);
    let (task, attempt, stream) = (&reply.task, reply.attempt, &reply.stream);
    let reported = reply.reported.as_ref().and_then(crate::projector::results::ReportedOutput::stored);
    match reported {
        Some(reported) if reported.bytes == read.len() as u64 && reported.blake3 == *found.as_bytes() => None,
        Some(reported) => Some(format!(
            "the {stream} of {task} attempt {attempt} read is not what its engine stored: it stored {} bytes (blake3 {}), {} bytes (blake3 {found}) were read",
            reported.bytes,
            hex::encode(reported.blake3),
            read.len()
        )),
        None => Some(format!(
            "the {stream} of {task} attempt {attempt} read is not what its engine stored: it reported storing none, {} bytes (blake3 {found}) were read",
            read.len()
        )),
    }
}

pub fn wait(args: WaitArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal as _;
    let terminal = std::io::stderr().is_terminal();
    let deadline = args.timeout_secs.map(|secs| Instant::now() + Duration::from_secs(secs));
    block_on(async {
        let bar = terminal.then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} {msg}")
                    .expect("the template is valid")
                    .progress_chars("=> "),
            );
            bar
        });
        let mut last_line = String::new();
        loop {
            let request = TasksRequest { job: args.job.clone(), state: None, from: 0, limit: Some(1) };
            let reply: TasksReply = ask(&args.nats, TASKS_SUBJECT, &request).await?;
            if let Some(error) = &reply.error {
                if let Some(bar) = &bar {
                    bar.abandon();
                }
                eprintln!("{}", printable(error));
                return Ok(ExitCode::FAILURE);
            }
            let progress = Progress::of(&reply);
            let line = progress.line(&reply);
            match &bar {
                Some(bar) => {
                    bar.set_length(u64::from(reply.n_tasks));
                    bar.set_position(u64::from(progress.ended));
                    bar.set_prefix(reply.job.clone());
                    bar.set_message(progress.message(&reply));
                }
                None if line != last_line => println!("{line}"),
                None => {}
            }
            last_line = line;
            if reply.status != "active" {
                if let Some(bar) = &bar {
                    bar.finish();
                }
                let complete = reply.status == "done" && progress.done == reply.n_tasks;
                println!("job {} {}: {} of {} tasks done", reply.job, reply.status, progress.done, reply.n_tasks);
                return Ok(if complete { ExitCode::SUCCESS } else { ExitCode::FAILURE });
            }
            if deadline.is_some_and(|at| Instant::now() >= at) {
                if let Some(bar) = &bar {
                    bar.abandon();
                }
                eprintln!("job {} has not ended after {} s", reply.job, args.timeout_secs.unwrap_or(0));
                return Ok(ExitCode::FAILURE);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// A job's progress, from one tasks reply (rate and ETA on log time).
struct Progress {
    done: u32,
    failed: u32,
    cancelled: u32,
    running: u32,
    ended: u32,
}

impl Progress {
    fn of(reply: &TasksReply) -> Progress {
        let count = |state: &str| reply.counts.get(state).copied().unwrap_or(0);
        let (done, failed, cancelled) = (count("done"), count("failed"), count("cancelled"));
        Progress { done, failed, cancelled, running: count("running") + count("dispatched"), ended: done + failed + cancelled }
    }

    /// Tasks ended per minute since submission, and the log time left at that rate.
    fn rate_and_eta(&self, reply: &TasksReply) -> (Option<u64>, Option<u64>) {
        let elapsed_ms = reply.log_time_ms.saturating_sub(reply.submitted_ms);
        if self.ended == 0 || elapsed_ms == 0 {
            return (None, None);
        }
        let per_min = u64::from(self.ended) * 60_000 / elapsed_ms;
        let left = u64::from(reply.n_tasks.saturating_sub(self.ended));
        let eta_ms = left * elapsed_ms / u64::from(self.ended);
        (Some(per_min), Some(eta_ms))
    }

    fn message(&self, reply: &TasksReply) -> String {
        let (rate, eta) = self.rate_and_eta(reply);
        let mut text = format!("{} done, {} failed, {} running", self.done, self.failed, self.running);
        if self.cancelled > 0 {
            text += &format!(", {} cancelled", self.cancelled);
        }
        if let Some(rate) = rate {
            text += &format!(", {rate}/min");
        }
        if let Some(eta) = eta.filter(|_| reply.status == "active") {
            text += &format!(", eta {}", seconds(eta));
        }
        text
    }

    fn line(&self, reply: &TasksReply) -> String {
        format!("{} {}/{}: {}", reply.job, self.ended, reply.n_tasks, self.message(reply))
    }
}

/// Seconds with one decimal: `12.3 s`.
pub(super) fn seconds(ms: u64) -> String {
    format!("{}.{} s", ms / 1000, (ms % 1000) / 100)
}

/// A log time (ms since 1970, UTC) as `HH:MM:SS`.
pub(super) fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    format!("{:02}:{:02}:{:02}", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

/// A log time (ms since 1970, UTC) as `2026-11-25 21:30:10.123 UTC`.
pub fn timestamp(ms: u64) -> String {
    let days = (ms / 86_400_000) as i64;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {}.{:03} UTC", clock(ms), ms % 1000)
}

#[cfg(test)]
mod tests {
    #[test]
    fn timestamps_are_utc_calendar_dates() {
        assert_eq!(super::timestamp(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(super::timestamp(1_795_642_210_123), "2026-11-25 21:30:10.123 UTC");
        assert_eq!(super::timestamp(951_782_400_000), "2000-02-29 00:00:00.000 UTC");
    }

    #[test]
    fn a_tasks_command_and_output_are_shown_with_their_escape_codes_written_out() {
        use crate::projector::results::{AttemptView, TaskReply};
        let attempt = AttemptView {
            attempt: 1,
            engine: "e1".into(),
            outcome: "failed".into(),
            error_tail: Some("boom\x1b[2J\nfake line\r\n".into()),
            remote_job: Some("42\x1b[H".into()),
            ..AttemptView::default()
        };
        let reply = TaskReply {
            task: "j/0".into(),
            argv: vec!["sh".into(), "-c".into(), "echo\x1b]0;title\x07".into()],
            attempts: vec![attempt],
            ..TaskReply::default()
        };
        let text = super::task_text(&reply);
        assert!(!text.contains('\x1b') && !text.contains('\x07') && !text.contains('\r'), "{text}");
        assert!(text.contains(r"command: sh -c echo\x1b]0;title\x07"), "{text}");
        assert!(text.contains(r"remote job 42\x1b[H"), "{text}");
        // The tail keeps its lines, each one marked as the tail's.
        assert!(text.contains("    | boom\\x1b[2J\n    | fake line\n"), "{text}");
    }

    #[test]
    fn what_output_read_is_printed_only_when_it_is_what_the_engine_reported() {
        use crate::core::event::StoredOutput;
        use crate::projector::results::{OutputReply, ReportedOutput};
        let stored = |bytes: &[u8]| StoredOutput { bytes: bytes.len() as u64, blake3: *blake3::hash(bytes).as_bytes() };
        let reply = |reported: Option<StoredOutput>| OutputReply {
            task: "j/0".into(),
            attempt: 1,
            stream: "stdout".into(),
            reported: reported.map(ReportedOutput::from),
            ..Default::default()
        };
        let reported = reply(Some(stored(b"out-0\n")));
        assert_eq!(super::altered_read(&reported, b"out-0\n"), None);
        let swapped = super::altered_read(&reported, b"OUT-0\n").unwrap();
        assert!(swapped.starts_with("the stdout of j/0 attempt 1 read is not what its engine stored: it stored 6 bytes"), "{swapped}");
        assert!(swapped.contains(&blake3::hash(b"OUT-0\n").to_hex().to_string()), "{swapped}");
        assert!(super::altered_read(&reported, b"out-0\nmore").is_some());
        assert!(super::altered_read(&reply(None), b"planted").unwrap().contains("it reported storing none"));
    }
}

/// `0 bytes`, `512 bytes`, `64 KiB`, `16 MiB`, `1.5 GiB`: exact below a KiB, else one decimal at most.
fn byte_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut unit = 0;
    let mut scaled = bytes * 10 / 1024;
    while scaled >= 10 * 1024 && unit + 1 < UNITS.len() {
        scaled /= 1024;
        unit += 1;
    }
    match scaled % 10 {
        0 => format!("{} {}", scaled / 10, UNITS[unit]),
        tenth => format!("{}.{tenth} {}", scaled / 10, UNITS[unit]),
    }
}

#[cfg(test)]
mod byte_size_tests {
    #[test]
    fn byte_sizes_read_as_a_person_writes_them() {
        let cases = [(0, "0 bytes"), (1023, "1023 bytes"), (1024, "1 KiB"), (1536, "1.5 KiB"), (16 << 20, "16 MiB"), (3 << 29, "1.5 GiB"), (1 << 40, "1 TiB")];
        for (bytes, text) in cases {
            assert_eq!(super::byte_size(bytes), text, "{bytes}");
        }
    }
}
