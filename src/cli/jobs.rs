//! `gridfold submit`, `cancel`, `priority`, `policy apply`: publishing what
//! submitters and operators decide. Submitters bind to the log's stream; an
//! operator's `policy apply` creates it if it is missing.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::client::{block_on, connect_log, connect_log_creating, publish, NatsArgs};
use super::{bad_input, BadInput};
use crate::core::event::Event;
use crate::core::ids::JobId;

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job file (TOML; see the README's job file reference).
    pub job_file: PathBuf,
    #[command(flatten)]
    pub nats: NatsArgs,
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
}

#[derive(Debug, Args)]
pub struct PriorityArgs {
    pub job: String,
    /// The new priority: higher runs first.
    #[arg(allow_hyphen_values = true)]
    pub priority: i32,
    #[command(flatten)]
    pub nats: NatsArgs,
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
    },
}

fn job_id(text: &str) -> Result<JobId, BadInput> {
    JobId::new(text).map_err(|e| BadInput(format!("job id {text:?}: {e}")))
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let owner = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let spec = match super::jobfile::read_job_file(&args.job_file, &owner) {
        Ok(spec) => spec,
        Err(error) => return Ok(bad_input(BadInput(error.to_string()))),
    };
    let job = spec.id.clone();
    let tasks = spec.task_count();
    let seq = block_on(async {
        let log = connect_log(&args.nats).await?;
        publish(&log, "gridfold-cli", Event::JobSubmitted(spec)).await
    })?;
    if args.json {
        println!("{}", serde_json::json!({ "job": job.as_str(), "tasks": tasks, "seq": seq }));
    } else {
        println!("{job}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn cancel(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let reason = args.reason;
    publish_for_job(&args.job, &args.nats, |job| Event::JobCancelled { job, reason }, |job, seq| {
        format!("cancel of {job} recorded at seq {seq}")
    })
}

pub fn priority(args: PriorityArgs) -> anyhow::Result<ExitCode> {
    let priority = args.priority;
    publish_for_job(&args.job, &args.nats, |job| Event::JobPriorityChanged { job, priority }, |job, seq| {
        format!("priority of {job} set to {priority} at seq {seq}")
    })
}

/// Publishes an event about one job, named on the command line.
fn publish_for_job(
    job: &str,
    nats: &NatsArgs,
    event: impl FnOnce(JobId) -> Event,
    said: impl FnOnce(&JobId, u64) -> String,
) -> anyhow::Result<ExitCode> {
    let job = match job_id(job) {
        Ok(job) => job,
        Err(bad) => return Ok(bad_input(bad)),
    };
    let seq = block_on(async {
        let log = connect_log(nats).await?;
        publish(&log, "gridfold-cli", event(job.clone())).await
    })?;
    println!("{}", said(&job, seq));
    Ok(ExitCode::SUCCESS)
}

pub fn policy(args: PolicyArgs) -> anyhow::Result<ExitCode> {
    let PolicyCommand::Apply { file, nats } = args.command;
    let policy = match super::policyfile::read_policy_file(&file) {
        Ok(policy) => policy,
        Err(error) => return Ok(bad_input(BadInput(error.to_string()))),
    };
    let seq = block_on(async {
        let log = connect_log_creating(&nats).await?;
        publish(&log, "gridfold-cli", Event::PolicySet(policy)).await
    })?;
    println!("policy from {} applied at seq {seq}", file.display());
    Ok(ExitCode::SUCCESS)
}
