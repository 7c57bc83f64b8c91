//! `gridfold submit`, `cancel`, `priority`, `policy apply`: publishing what
//! submitters and operators decide. Submitters bind to the log's stream; an
//! operator's `policy apply` creates it if it is missing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::client::{
    ask_within, await_verdict, block_on, connect_log, publish, report_verdict, NatsArgs, VerdictArgs,
};
use super::{bad_input, BadInput};
use crate::core::event::{Event, JobSpec, Origin};
use crate::core::expr::Expr;
use crate::core::ids::JobId;
use crate::core::reject::JobProblem;
use crate::files::jobfile::key_line;
use crate::projector::query::{PolicyReply, PolicyRequest, POLICY_SUBJECT};

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The job file (TOML; see docs/users.md, "The job file").
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
    /// `JOB` (the whole job) or `JOB/INDEX` (one task: it waits no more, its live attempts are stopped).
    pub job: String,
    /// Why, recorded on the log.
    #[arg(long, default_value = "cancelled from the command line")]
    pub reason: String,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
    /// Say what happened as one JSON object (`applied`, `verdict`, `rejections`).
    #[arg(long)]
    pub json: bool,
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
    /// Say what happened as one JSON object (`applied`, `verdict`, `rejections`).
    #[arg(long)]
    pub json: bool,
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
    /// Say what happened as one JSON object (`applied`, `verdict`, `rejections`).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(subcommand)]
    pub command: PolicyCommand,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Publish the policy in this file (TOML; see docs/operators.md, "The policy file").
    Apply {
        file: PathBuf,
        #[command(flatten)]
        nats: NatsArgs,
        #[command(flatten)]
        verdict: VerdictArgs,
        /// Say what happened as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Show the policy in force and the log sequence of the `policy apply` that set it.
    Show {
        #[command(flatten)]
        nats: NatsArgs,
        /// The policy as JSON (`seq`, `folded_to`, `policy`).
        #[arg(long)]
        json: bool,
    },
}

fn job_id(text: &str) -> Result<JobId, BadInput> {
    JobId::new(text).map_err(|e| BadInput(format!("job id {text:?}: {e}")))
}

pub fn submit(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    // A job file without an owner is the acting user's (an operator's: the
    // login name's, or --as).
    let owner = args.nats.acting.user().map(|user| user.to_string()).unwrap_or_default();
    let spec = match crate::files::jobfile::read_job_file(&args.job_file, &owner) {
        Ok(spec) => spec,
        Err(error) => return Ok(bad_input(BadInput(error.to_string()))),
    };
    let job = spec.id.clone();
    let tasks = spec.task_count();
    let wait = args.verdict.wait();
    if let Some(refused) = block_on(policy_refuses(&args.nats, &args.job_file, &spec, wait)) {
        return Ok(bad_input(refused));
    }
    let parts = match super::parts::split_job(spec, super::parts::PART_BYTES_MAX) {
        Ok(parts) => parts,
        Err(problem) => return Ok(bad_input(BadInput(format!("{}: {problem}", args.job_file.display())))),
    };
    let n_parts = parts.len();
    let (seq, settled) = block_on(super::parts::publish_parts(&args.nats, &job, parts, wait))?;
    let code = report_verdict(&format!("job {job}"), seq, &settled);
    if args.json {
        println!("{}", settled.json_with(seq, serde_json::json!({ "job": job.as_str(), "tasks": tasks, "parts": n_parts })));
    } else if code == ExitCode::SUCCESS {
        println!("{job}");
    }
    Ok(code)
}

/// Longest `submit` waits for the policy in force before it publishes anyway.
const POLICY_CHECK_WAIT_MAX: Duration = Duration::from_secs(2);

/// The family of the policy in force (asked of the projector) refuses a job
/// by its own rule (under `fbsng`, a queue or process type the policy does
/// not define): said at once, with the file, the line of the key and why (the
/// known names), and nothing published. When
/// the policy cannot be read (no projector answers within `wait`, at most
/// [`POLICY_CHECK_WAIT_MAX`]; nothing is asked with `--no-wait`), the job is
/// published and the fold refuses it with the same reason.
async fn policy_refuses(nats: &NatsArgs, path: &Path, spec: &JobSpec, wait: Duration) -> Option<BadInput> {
    if wait.is_zero() {
        return None;
    }
    let reply: PolicyReply = ask_within(nats, POLICY_SUBJECT, &PolicyRequest {}, wait.min(POLICY_CHECK_WAIT_MAX)).await.ok()?;
    let problem = crate::core::family::on_submit(&reply.policy, spec, Expr::Bool(true)).err()?;
    let JobProblem::Family(family_problem) = &problem else { return None };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let line = key_line(&text, family_problem.job_file_key());
    let at = line.map_or_else(|| path.display().to_string(), |line| format!("{}:{line}", path.display()));
    Some(BadInput(format!(
        "{at}: {problem} (under the policy in force, set at seq {}); job {} not published",
        reply.seq, spec.id
    )))
}

pub fn cancel(args: CancelArgs) -> anyhow::Result<ExitCode> {
    if args.job.contains('/') {
        return super::ops::cancel_task(&args.job, &args.nats, &args.verdict, args.json);
    }
    let reason = args.reason;
    publish_for_job(&args.job, &args.nats, &args.verdict, args.json, |job| Event::JobCancelled { job, reason }, |job, word, seq| {
        format!("cancel of {job} {word} at seq {seq}")
    })
}

pub fn priority(args: PriorityArgs) -> anyhow::Result<ExitCode> {
    let priority = args.priority;
    publish_for_job(&args.job, &args.nats, &args.verdict, args.json, |job| Event::JobPriorityChanged { job, priority }, |job, word, seq| {
        format!("priority {priority} of {job} {word} at seq {seq}")
    })
}

pub fn override_tickets(args: OverrideTicketsArgs) -> anyhow::Result<ExitCode> {
    let tickets = args.tickets;
    publish_for_job(&args.job, &args.nats, &args.verdict, args.json, |job| Event::JobOverrideTicketsSet { job, tickets }, |job, word, seq| {
        format!("override tickets {tickets} of {job} {word} at seq {seq}")
    })
}

/// Publishes an event about one job, named on the command line, and waits for
/// the projector's verdict on it.
pub(super) fn publish_for_job(
    job: &str,
    nats: &NatsArgs,
    verdict: &VerdictArgs,
    json: bool,
    event: impl FnOnce(JobId) -> Event,
    said: impl FnOnce(&JobId, &str, u64) -> String,
) -> anyhow::Result<ExitCode> {
    let job = match job_id(job) {
        Ok(job) => job,
        Err(bad) => return Ok(bad_input(bad)),
    };
    let event = event(job.clone());
    let what = match &event {
        Event::JobCancelled { .. } => format!("the cancel of {job}"),
        Event::JobPriorityChanged { .. } => format!("the priority change of {job}"),
        Event::ProjectPriorityChanged { .. } => format!("the project priority change of {job}"),
        Event::JobOverrideTicketsSet { .. } => format!("the override tickets of {job}"),
        Event::JobHoldChanged { held: true, .. } => format!("the hold of {job}"),
        Event::JobHoldChanged { held: false, .. } => format!("the release of {job}"),
        _ => format!("the event about {job}"),
    };
    let wait = verdict.wait();
    let (seq, settled) = block_on(async {
        let publisher = nats.acting.publisher_for(&event)?;
        let log = connect_log(nats).await?;
        let seq = publish(&log, &publisher, "gridfold-cli", event).await?;
        anyhow::Ok((seq, await_verdict(nats, seq, wait).await))
    })?;
    let code = report_verdict(&what, seq, &settled);
    if json {
        println!("{}", settled.json_with(seq, serde_json::json!({ "job": job.as_str() })));
    } else if code == ExitCode::SUCCESS {
        println!("{}", said(&job, settled.word(), seq));
    }
    Ok(code)
}

pub fn policy(args: PolicyArgs) -> anyhow::Result<ExitCode> {
    let (file, nats, verdict, json) = match args.command {
        PolicyCommand::Apply { file, nats, verdict, json } => (file, nats, verdict, json),
        PolicyCommand::Show { nats, json } => return super::ops::policy_show(&nats, json),
    };
    let policy = match crate::files::policyfile::read_policy_file(&file) {
        Ok(policy) => policy,
        Err(error) => return Ok(bad_input(BadInput(error.to_string()))),
    };
    let wait = verdict.wait();
    let (seq, settled) = block_on(async {
        let log = connect_log(&nats).await?;
        let seq = publish(&log, &Origin::Operator, "gridfold-cli", Event::PolicySet(policy)).await?;
        anyhow::Ok((seq, await_verdict(&nats, seq, wait).await))
    })?;
    let code = report_verdict(&format!("the policy from {}", file.display()), seq, &settled);
    if json {
        println!("{}", settled.json_with(seq, serde_json::json!({ "file": file.display().to_string() })));
    } else if code == ExitCode::SUCCESS {
        println!("policy from {} {} at seq {seq}", file.display(), settled.word());
    }
    Ok(code)
}
