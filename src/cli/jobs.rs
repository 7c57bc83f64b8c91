//! `gridfold submit`, `cancel`, `priority`, `policy apply`: publishing what
//! submitters and operators decide. Submitters bind to the log's stream; an
//! operator's `policy apply` creates it if it is missing.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use std::time::Duration;

use super::client::{
    await_verdict, block_on, connect_log, publish, report_verdict, NatsArgs, VerdictArgs,
};
use super::{bad_input, BadInput};
use crate::core::event::Event;
use crate::core::ids::JobId;

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job file (TOML; see the README's job file reference).
    pub job_file: PathBuf,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    pub job: String,
    /// Why, recorded on the log.
    #[arg(long, default_value = "cancelled from the command line")]
    pub reason: String,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
}

#[derive(Debug, Args)]
pub struct PriorityArgs {
    pub job: String,
    /// The new priority: higher runs first.
    #[arg(allow_hyphen_values = true)]
    pub priority: i32,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
}

#[derive(Debug, Args)]
pub struct OverrideTicketsArgs {
    pub job: String,
    /// The job's override tickets (0 takes them away).
    pub tickets: u32,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Publish the policy in this file (TOML; see the README's policy reference).
    Apply {
        file: PathBuf,
        #[command(flatten)]
        nats: NatsArgs,
        #[command(flatten)]
        verdict: VerdictArgs,
    },
}

fn job_id(text: &str) -> Result<JobId, BadInput> {
    JobId::new(text).map_err(|e| BadInput(format!("job id {text:?}: {e}")))
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let owner = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let spec = match crate::files::jobfile::read_job_file(&args.job_file, &owner) {
        Ok(spec) => spec,
        Err(error) => return Ok(bad_input(BadInput(error.to_string()))),
    };
    let job = spec.id.clone();
    let tasks = spec.task_count();
    let wait = Duration::from_secs(args.verdict.wait_secs);
    let (seq, settled) = block_on(async {
        let log = connect_log(&args.nats).await?;
        let seq = publish(&log, "gridfold-cli", Event::JobSubmitted(spec)).await?;
        anyhow::Ok((seq, await_verdict(&args.nats, seq, wait).await))
    })?;
    let code = report_verdict(&format!("job {job}"), seq, &settled);
    if args.json {
        let (verdict, rejections) = settled.as_json();
        println!(
            "{}",
            serde_json::json!({ "job": job.as_str(), "tasks": tasks, "seq": seq, "verdict": verdict, "rejections": rejections })
        );
    } else if code == ExitCode::SUCCESS {
        println!("{job}");
    }
    Ok(code)
}

pub fn cancel(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let reason = args.reason;
    publish_for_job(&args.job, &args.nats, &args.verdict, |job| Event::JobCancelled { job, reason }, |job, seq| {
        format!("cancel of {job} recorded at seq {seq}")
    })
}

pub fn priority(args: PriorityArgs) -> anyhow::Result<ExitCode> {
    let priority = args.priority;
    publish_for_job(&args.job, &args.nats, &args.verdict, |job| Event::JobPriorityChanged { job, priority }, |job, seq| {
        format!("priority of {job} set to {priority} at seq {seq}")
    })
}

pub fn override_tickets(args: OverrideTicketsArgs) -> anyhow::Result<ExitCode> {
    let tickets = args.tickets;
    publish_for_job(&args.job, &args.nats, &args.verdict, |job| Event::JobOverrideTicketsSet { job, tickets }, |job, seq| {
        format!("override tickets of {job} set to {tickets} at seq {seq}")
    })
}

/// Publishes an event about one job, named on the command line, and waits for
/// the projector's verdict on it.
fn publish_for_job(
    job: &str,
    nats: &NatsArgs,
    verdict: &VerdictArgs,
    event: impl FnOnce(JobId) -> Event,
    said: impl FnOnce(&JobId, u64) -> String,
) -> anyhow::Result<ExitCode> {
    let job = match job_id(job) {
        Ok(job) => job,
        Err(bad) => return Ok(bad_input(bad)),
    };
    let event = event(job.clone());
    let what = match &event {
        Event::JobCancelled { .. } => format!("the cancel of {job}"),
        Event::JobPriorityChanged { .. } => format!("the priority change of {job}"),
        Event::JobOverrideTicketsSet { .. } => format!("the override tickets of {job}"),
        _ => format!("the event about {job}"),
    };
    let wait = Duration::from_secs(verdict.wait_secs);
    let (seq, settled) = block_on(async {
        let log = connect_log(nats).await?;
        let seq = publish(&log, "gridfold-cli", event).await?;
        anyhow::Ok((seq, await_verdict(nats, seq, wait).await))
    })?;
    let code = report_verdict(&what, seq, &settled);
    if code == ExitCode::SUCCESS {
        println!("{}", said(&job, seq));
    }
    Ok(code)
}

pub fn policy(args: PolicyArgs) -> anyhow::Result<ExitCode> {
    let PolicyCommand::Apply { file, nats, verdict } = args.command;
    let policy = match crate::files::policyfile::read_policy_file(&file) {
        Ok(policy) => policy,
        Err(error) => return Ok(bad_input(BadInput(error.to_string()))),
    };
    let wait = Duration::from_secs(verdict.wait_secs);
    let (seq, settled) = block_on(async {
        let log = connect_log(&nats).await?;
        let seq = publish(&log, "gridfold-cli", Event::PolicySet(policy)).await?;
        anyhow::Ok((seq, await_verdict(&nats, seq, wait).await))
    })?;
    let code = report_verdict(&format!("the policy from {}", file.display()), seq, &settled);
    if code == ExitCode::SUCCESS {
        println!("policy from {} applied at seq {seq}", file.display());
    }
    Ok(code)
}
