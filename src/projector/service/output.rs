//! The projector's answers about tasks' stored output: a task's attempts with
//! what the store holds of each, and pages of one stream for `gridfold
//! output`, each checked against what the attempt's engine reported storing.
//! The store itself is the log's adapter ([`crate::log::output_store`]).

use base64::Engine as _;

use crate::core::ids::{Seq, TaskRef};
use crate::log::output_store::{OutputStore, Run, Stream, altered};
use crate::projector::results::{OutputReply, OutputRequest, ReportedOutput, TaskReply, OUTPUT_PAGE_BYTES_MAX};
use crate::projector::service::{ProjectorGone, ProjectorHandle};

/// A task reply with what the store holds of each attempt's output (at most
/// `ATTEMPTS_KEPT_PER_TASK` attempts, each stream read whole when its length
/// is the one its engine reported), and how any of it is not what the engine
/// stored ([`altered`]).
pub async fn with_stored_output(store: &OutputStore, mut reply: TaskReply) -> TaskReply {
    let Ok(task) = reply.task.parse::<TaskRef>() else { return reply };
    if reply.error.is_some() {
        return reply;
    }
    for attempt in &mut reply.attempts {
        if matches!(attempt.outcome.as_str(), "dispatched" | "running") {
            continue;
        }
        let run = Run { task: &task, attempt: attempt.attempt, dispatch: Seq(attempt.dispatch_seq) };
        let mut truncated = false;
        for stream in [Stream::Stdout, Stream::Stderr] {
            let reported = match stream {
                Stream::Stdout => attempt.stdout_reported.as_ref(),
                Stream::Stderr => attempt.stderr_reported.as_ref(),
            }
            .and_then(ReportedOutput::stored);
            let Ok(Some(found)) = store.check(run, stream, reported).await else { continue };
            truncated |= found.stored.truncated;
            match stream {
                Stream::Stdout => attempt.stdout_stored_bytes = Some(found.stored.bytes),
                Stream::Stderr => attempt.stderr_stored_bytes = Some(found.stored.bytes),
            }
            attempt.output_altered.extend(altered(run, stream, reported, found.stored.bytes, found.blake3));
        }
        attempt.output_truncated = truncated;
    }
    reply
}

/// Answers `gridfold.q.output`: the attempt asked for (by default the task's
/// newest kept attempt that ended), one page of its stream, with what its
/// engine reported storing; none of it when the object is not that
/// ([`altered`]: its length differs, or, on a page that reaches its end, its
/// blake3).
pub async fn answer_output(
    store: &OutputStore,
    handle: &ProjectorHandle,
    request: OutputRequest,
) -> Result<OutputReply, ProjectorGone> {
    let stream_name = request.stream.clone().unwrap_or_else(|| "stdout".into());
    let mut reply = OutputReply { task: request.task.clone(), stream: stream_name.clone(), offset: request.offset, ..Default::default() };
    let Some(stream) = Stream::named(&stream_name) else {
        reply.error = Some(format!("no stream {stream_name}: stdout or stderr"));
        return Ok(reply);
    };
    let task_reply = handle.task(crate::projector::results::TaskRequest { task: request.task.clone() }).await?;
    if let Some(error) = task_reply.error {
        reply.error = Some(error);
        return Ok(reply);
    }
    let task: TaskRef = request.task.parse().expect("the projector parsed it");
    // The newest run of the attempt asked for (a preempted one may have run
    // before it under the same number), or the newest ended run.
    let chosen = match request.attempt {
        Some(n) => task_reply.attempts.iter().rev().find(|a| a.attempt == n),
        None => task_reply.attempts.iter().rev().find(|a| !matches!(a.outcome.as_str(), "dispatched" | "running")),
    };
    let Some(chosen) = chosen else {
        reply.error = Some(match request.attempt {
            Some(n) => format!("{task} has no attempt {n} kept"),
            None => format!("{task} has no ended attempt yet"),
        });
        return Ok(reply);
    };
    let run = Run { task: &task, attempt: chosen.attempt, dispatch: Seq(chosen.dispatch_seq) };
    reply.attempt = run.attempt;
    reply.reported = match stream {
        Stream::Stdout => chosen.stdout_reported.clone(),
        Stream::Stderr => chosen.stderr_reported.clone(),
    };
    let reported = reply.reported.as_ref().and_then(ReportedOutput::stored);
    let max = u64::from(request.max_bytes.unwrap_or(OUTPUT_PAGE_BYTES_MAX).clamp(1, OUTPUT_PAGE_BYTES_MAX));
    match store.read(run, stream, request.offset, max).await {
        Ok(page) => {
            reply.total_bytes = page.stored.bytes;
            reply.truncated = page.stored.truncated;
            let whole = page.whole.map(|whole| whole.blake3);
            reply.altered = altered(run, stream, reported, page.stored.bytes, whole);
            reply.eof = reply.altered.is_some() || request.offset + page.data.len() as u64 >= page.stored.bytes;
            if reply.altered.is_none() {
                reply.data_base64 = base64::engine::general_purpose::STANDARD.encode(&page.data);
            }
        }
        Err(error) => reply.error = Some(error.to_string()),
    }
    Ok(reply)
}
