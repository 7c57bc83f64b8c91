//! `gridfold suspend`, `resume` and `reschedule`: an operator's hand on live
//! attempts, as Grid Engine's `qmod -sj`, `qmod -usj` and `qmod -rj`. Each
//! publishes a request (a fact: `SuspendRequested`, ...) and waits for the
//! projector's verdict on it; the projector answers an accepted request with
//! `Suspend`, `Resume` or `Preempt` orders to the engines holding the attempts.

use std::process::ExitCode;

use clap::Args;

use super::client::{await_verdict, block_on, connect_log, publish, report_verdict, NatsArgs, VerdictArgs};
use super::{bad_input, BadInput};
use crate::core::event::{Event, TaskSelector};
use crate::core::ids::JobId;
use crate::core::state::Control;

#[derive(Debug, Args)]
pub struct ControlArgs {
    /// `JOB` (every live task of the job) or `JOB/INDEX` (one task).
    pub target: String,
    #[command(flatten)]
    pub nats: NatsArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
    /// Say what happened as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `JOB` or `JOB/INDEX`.
pub fn parse_target(text: &str) -> Result<TaskSelector, BadInput> {
    let (job, task) = match text.rsplit_once('/') {
        Some((job, index)) => {
            let index = index.parse::<u32>().map_err(|_| BadInput(format!("{text:?}: the task is JOB/INDEX, INDEX a number")))?;
            (job, Some(index))
        }
        None => (text, None),
    };
    let job = JobId::new(job).map_err(|e| BadInput(format!("job id {job:?}: {e}")))?;
    Ok(TaskSelector { job, task })
}

/// Publishes the request `action` of `args.target` and reports the projector's verdict.
pub fn run(action: Control, args: ControlArgs) -> anyhow::Result<ExitCode> {
    let target = match parse_target(&args.target) {
        Ok(target) => target,
        Err(bad) => return Ok(bad_input(bad)),
    };
    let event = match action {
        Control::Suspend => Event::SuspendRequested(target.clone()),
        Control::Resume => Event::ResumeRequested(target.clone()),
        Control::Preempt => Event::RescheduleRequested(target.clone()),
    };
    let wait = args.verdict.wait();
    let (seq, settled) = block_on(async {
        let publisher = args.nats.acting.publisher_for(&event)?;
        let log = connect_log(&args.nats).await?;
        let seq = publish(&log, &publisher, "gridfold-cli", event).await?;
        anyhow::Ok((seq, await_verdict(&args.nats, seq, wait).await))
    })?;
    let code = report_verdict(&format!("the {} of {target}", action.as_str()), seq, &settled);
    if args.json {
        let (verdict, rejections) = settled.as_json();
        println!(
            "{}",
            serde_json::json!({
                "target": target.to_string(), "action": action.as_str(), "seq": seq,
                "verdict": verdict, "rejections": rejections,
            })
        );
    } else if code == ExitCode::SUCCESS {
        println!("{} of {target} {} at seq {seq}", action.as_str(), settled.word());
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_a_job_or_one_task() {
        let job = parse_target("render-1").unwrap();
        assert_eq!((job.job.as_str(), job.task), ("render-1", None));
        let task = parse_target("render.2/17").unwrap();
        assert_eq!((task.job.as_str(), task.task), ("render.2", Some(17)));
        assert!(parse_target("render/x").is_err());
        assert!(parse_target("bad id/1").is_err());
    }
}
