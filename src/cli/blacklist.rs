//! `gridfold blacklist ls` (asks the projector which engines each job has
//! black- or greylisted) and `gridfold blacklist clear` (publishes
//! `BlacklistsCleared`, GridServer's "Clear from Blacklists", greylists included).

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::client::{ask, await_verdict, block_on, connect_log, publish, report_verdict, NatsArgs, VerdictArgs};
use super::{bad_input, BadInput};
use crate::core::event::{Event, Origin};
use crate::core::ids::EngineId;
use crate::projector::query::{BlacklistsReply, BlacklistsRequest, BLACKLISTS_SUBJECT};

#[derive(Debug, Args)]
pub struct BlacklistArgs {
    #[command(subcommand)]
    pub command: BlacklistCommand,
}

#[derive(Debug, Subcommand)]
pub enum BlacklistCommand {
    /// Each job's blacklisted engines and task failures per engine: the active jobs
    /// with black- or greylisting on or with failures recorded, or one JOB whatever its status.
    Ls {
        job: Option<String>,
        /// Ended jobs too.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        nats: NatsArgs,
        #[arg(long)]
        json: bool,
    },
    /// Clear the blacklists and greylists of every job: for ENGINE only, or for all engines.
    Clear {
        engine: Option<String>,
        #[command(flatten)]
        nats: NatsArgs,
        #[command(flatten)]
        verdict: VerdictArgs,
    },
}

pub fn run(args: BlacklistArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        BlacklistCommand::Ls { job, all, nats, json } => ls(job, all, &nats, json),
        BlacklistCommand::Clear { engine, nats, verdict } => clear(engine, &nats, &verdict),
    }
}

fn ls(job: Option<String>, all: bool, nats: &NatsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let request = BlacklistsRequest { job: job.clone(), all };
    let reply: BlacklistsReply = block_on(ask(nats, BLACKLISTS_SUBJECT, &request))?;
    if let Some(job) = job.filter(|_| reply.jobs.is_empty()) {
        anyhow::bail!("the projector knows no job {job}");
    }
    if json {
        println!("{}", serde_json::to_string(&reply)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{:<24} {:>9} {:<22} {:<24} FAILURES BY ENGINE", "JOB", "STATUS", "LISTING", "BLACKLISTED");
    for job in &reply.jobs {
        let listing = match (job.engine_blacklisting, job.engine_greylisting) {
            (true, true) => format!("black({}) + grey", job.failures_before_blacklist),
            (true, false) => format!("black({})", job.failures_before_blacklist),
            (false, true) => "grey".to_string(),
            (false, false) => "off".to_string(),
        };
        let mut blacklisted = job.blacklist.join(",");
        if !job.blacklist_pending.is_empty() {
            blacklisted = format!("{blacklisted} (pending: {})", job.blacklist_pending.join(",")).trim_start().to_string();
        }
        let failures: Vec<String> = job.failures_by_engine.iter().map(|(engine, n)| format!("{engine}={n}")).collect();
        println!(
            "{:<24} {:>9} {:<22} {:<24} {}",
            job.job,
            job.status,
            listing,
            if blacklisted.is_empty() { "-" } else { &blacklisted },
            if failures.is_empty() { "-".to_string() } else { failures.join(" ") }
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn clear(engine: Option<String>, nats: &NatsArgs, verdict: &VerdictArgs) -> anyhow::Result<ExitCode> {
    let engine = match engine.map(|text| EngineId::new(&text).map_err(|e| BadInput(format!("engine id {text:?}: {e}")))) {
        Some(Err(bad)) => return Ok(bad_input(bad)),
        Some(Ok(engine)) => Some(engine),
        None => None,
    };
    let whom = engine.as_ref().map(|e| format!("engine {e}")).unwrap_or_else(|| "every engine".to_string());
    let wait = verdict.wait();
    let (seq, settled) = block_on(async {
        let log = connect_log(nats).await?;
        let seq = publish(&log, &Origin::Operator, "gridfold-cli", Event::BlacklistsCleared { engine }).await?;
        anyhow::Ok((seq, await_verdict(nats, seq, wait).await))
    })?;
    let code = report_verdict(&format!("the clearing of {whom}'s blacklists"), seq, &settled);
    if code == ExitCode::SUCCESS {
        println!("blacklists and greylists of {whom} cleared at seq {seq}");
    }
    Ok(code)
}
