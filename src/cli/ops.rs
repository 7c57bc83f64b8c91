//! Operator commands, each an event on the log so replay reproduces it:
//! `gridfold hold` / `release` (Grid Engine's `qhold`/`qrls`), `gridfold cancel
//! JOB/INDEX` (one task), `gridfold engine drain` / `resume` (`qmod -d`/`-e`,
//! Slurm's `scontrol update state=drain`), and `gridfold policy show`. Every
//! write waits for the projector's verdict like `submit` (`--no-wait` skips it)
//! and exits 1 when the projector refuses it.

use std::process::ExitCode;

use clap::{Args, Subcommand};

use super::client::{ask, await_verdict, block_on, connect_log, publish, report_verdict, NatsArgs, VerdictArgs};
use super::{bad_input, BadInput};
use crate::core::event::Event;
use crate::core::ids::{EngineId, TaskRef};
use crate::projector::query::{PolicyReply, PolicyRequest, POLICY_SUBJECT};

#[derive(Debug, Args)]
pub struct HoldArgs {
    /// The job: a held job gets no new dispatches; its running tasks finish.
    pub job: String,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
    /// Say what happened as one JSON object (`applied`, `verdict`, `rejections`).
    #[arg(long)]
    pub json: bool,
}

/// `gridfold engine drain NAME` / `gridfold engine resume NAME`.
#[derive(Debug, Subcommand)]
pub enum EngineAdmin {
    /// No new work for the engine; its running tasks finish (qmod -d, scontrol update state=drain).
    Drain(EngineAdminArgs),
    /// Give a drained engine work again (qmod -e, scontrol update state=resume).
    Resume(EngineAdminArgs),
}

#[derive(Debug, Args)]
pub struct EngineAdminArgs {
    /// The engine's id.
    pub name: String,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
    /// Say what happened as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn hold(args: HoldArgs, held: bool) -> anyhow::Result<ExitCode> {
    let word = if held { "hold" } else { "release" };
    super::jobs::publish_for_job(&args.job, &args.nats, &args.verdict, args.json, |job| Event::JobHoldChanged { job, held }, |job, verdict, seq| {
        format!("{word} of {job} {verdict} at seq {seq}")
    })
}

/// Publishes `event` (its subject says what it is: `what`), waits for the
/// verdict and prints it; `fields` go into `--json`.
fn publish_write(
    nats: &NatsArgs,
    verdict: &VerdictArgs,
    json: bool,
    what: &str,
    event: Event,
    fields: serde_json::Value,
) -> anyhow::Result<ExitCode> {
    let wait = verdict.wait();
    let (seq, settled) = block_on(async {
        let publisher = nats.acting.publisher_for(&event)?;
        let log = connect_log(nats).await?;
        let seq = publish(&log, &publisher, "gridfold-cli", event).await?;
        anyhow::Ok((seq, await_verdict(nats, seq, wait).await))
    })?;
    let code = report_verdict(&format!("the {what}"), seq, &settled);
    if json {
        println!("{}", settled.json_with(seq, fields));
    } else if code == ExitCode::SUCCESS {
        println!("{what} {} at seq {seq}", settled.word());
    }
    Ok(code)
}

/// `gridfold cancel JOB/INDEX`.
pub fn cancel_task(target: &str, nats: &NatsArgs, verdict: &VerdictArgs, json: bool) -> anyhow::Result<ExitCode> {
    let task = match super::control::parse_target(target) {
        Ok(selector) => match selector.task {
            Some(index) => TaskRef::new(selector.job, index),
            None => return Ok(bad_input(BadInput(format!("{target:?}: the task is JOB/INDEX")))),
        },
        Err(bad) => return Ok(bad_input(bad)),
    };
    let fields = serde_json::json!({ "task": task.to_string() });
    publish_write(nats, verdict, json, &format!("cancel of {task}"), Event::TaskCancelled { task: task.clone() }, fields)
}

pub fn engine_admin(admin: EngineAdmin) -> anyhow::Result<ExitCode> {
    let (args, drained) = match admin {
        EngineAdmin::Drain(args) => (args, true),
        EngineAdmin::Resume(args) => (args, false),
    };
    let engine = match EngineId::new(&args.name) {
        Ok(engine) => engine,
        Err(e) => return Ok(bad_input(BadInput(format!("engine id {:?}: {e}", args.name)))),
    };
    let word = if drained { "drain" } else { "resume" };
    let fields = serde_json::json!({ "engine": engine.as_str(), "drained": drained });
    let event = Event::EngineDrainChanged { engine: engine.clone(), drained };
    publish_write(&args.nats, &args.verdict, args.json, &format!("{word} of engine {engine}"), event, fields)
}

/// `gridfold policy show [--json]`: the policy in force, as the policy file
/// writes it (so `policy show > p.toml` then `policy apply p.toml` applies it
/// again), and the sequence of the `policy apply` that set it. `--json` gives
/// the policy as the program holds it (durations in ms, weights in thousandths).
pub fn policy_show(nats: &NatsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let reply: PolicyReply = block_on(ask(nats, POLICY_SUBJECT, &PolicyRequest {}))?;
    if json {
        println!("{}", serde_json::to_string(&reply)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("# {}", reply.provenance());
    print!("{}", reply.policy_text());
    Ok(ExitCode::SUCCESS)
}
