//! `gridfold project-priority JOB N`: change a Techila project's priority
//! (1 Highest to 7 Lowest) later, waiting for the projector's verdict.

use std::process::ExitCode;

use clap::Args;

use super::client::{NatsArgs, VerdictArgs};
use super::{bad_input, BadInput};
use crate::core::event::Event;
use crate::core::family::techila::{PRIORITY_HIGHEST, PRIORITY_LOWEST};

#[derive(Debug, Args)]
pub struct ProjectPriorityArgs {
    pub job: String,
    /// The project's new priority: 1 (Highest) to 7 (Lowest), 4 is Normal.
    pub priority: u32,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
    /// Say what happened as one JSON object (`applied`, `verdict`, `rejections`).
    #[arg(long)]
    pub json: bool,
}

pub fn project_priority(args: ProjectPriorityArgs) -> anyhow::Result<ExitCode> {
    let priority = args.priority;
    if !(PRIORITY_HIGHEST..=PRIORITY_LOWEST).contains(&priority) {
        return Ok(bad_input(BadInput(format!(
            "project priority {priority}: it must be {PRIORITY_HIGHEST} (Highest) to {PRIORITY_LOWEST} (Lowest)"
        ))));
    }
    super::jobs::publish_for_job(
        &args.job,
        &args.nats,
        &args.verdict,
        args.json,
        |job| Event::ProjectPriorityChanged { job, priority },
        |job, word, seq| format!("project priority {priority} of {job} {word} at seq {seq}"),
    )
}
