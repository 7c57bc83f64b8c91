//! Big jobs: a job whose parameter list makes its `JobSubmitted` larger than
//! the broker's payload limit is split, by the command line, over a
//! `JobSubmitted` and `TasksAdded` events, each under [`PART_BYTES_MAX`]. The
//! first declares the whole job's size (`JobOptions::tasks_total`), and the fold
//! dispatches none of its tasks until the last part is folded: the job does not
//! start half-defined. Should a part fail to be stored, the command cancels the
//! job and says so.
//!
//! The limit that remains: [`crate::core::event::TASKS_PER_JOB_MAX`] tasks, and
//! [`PARTS_MAX`] parts (one parameter map cannot be split: a single task's
//! parameters must fit one part).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::core::event::{Envelope, Event, JobSpec, TaskConditions, TaskSet};
use crate::core::ids::JobId;

use super::client::{await_verdict, connect_log, publish, NatsArgs, Settled};

/// Largest encoded part: well under the broker's default 1 MiB `max_payload`,
/// leaving room for the envelope and the broker's headers.
pub const PART_BYTES_MAX: usize = 900 * 1024;
/// Most parts one job may be split into (about 900 MB of parameters).
pub const PARTS_MAX: usize = 1_000;

fn encoded_len(event: &Event) -> usize {
    crate::wire::encode(&Envelope { id: [0; 16], source: "gridfold-cli".into(), event: event.clone() }).len()
}

/// The events that submit `spec`: the `JobSubmitted` alone when it fits
/// `part_bytes_max`, else a `JobSubmitted` declaring `tasks_total` followed by
/// `TasksAdded` parts, each within the limit.
pub fn split_job(spec: JobSpec, part_bytes_max: usize) -> Result<Vec<Event>, String> {
    let whole = Event::JobSubmitted(spec);
    if encoded_len(&whole) <= part_bytes_max {
        return Ok(vec![whole]);
    }
    let Event::JobSubmitted(mut spec) = whole else { unreachable!("built just above") };
    let TaskSet::List(list) = std::mem::replace(&mut spec.tasks, TaskSet::Count(0)) else {
        return Err(format!("the job is larger than {part_bytes_max} bytes though its tasks are a count: shorten its conditions"));
    };
    let n_tasks = list.len();
    let mut conditions = std::mem::take(&mut spec.task_conditions);
    // Each task's share of a part: its parameters with the protobuf framing of a
    // map entry (tag, lengths) around each, and its conditions when it has some.
    let cost = |index: usize, params: &BTreeMap<String, String>| -> usize {
        let params_len: usize = params.iter().map(|(k, v)| k.len() + v.len() + 12).sum();
        let condition_len = conditions.get(&(index as u32)).map_or(0, condition_cost);
        params_len + condition_len + 8
    };
    let budget = part_bytes_max - encoded_len(&Event::JobSubmitted(spec.clone())) - 1024;
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    let mut used = 0;
    for (index, params) in list.iter().enumerate() {
        let task_cost = cost(index, params);
        if task_cost > budget {
            return Err(format!("task {index}'s parameters and conditions alone exceed one part of {part_bytes_max} bytes"));
        }
        if used + task_cost > budget && index > start {
            parts.push((start, index));
            start = index;
            used = 0;
        }
        used += task_cost;
    }
    parts.push((start, n_tasks));
    if parts.len() > PARTS_MAX {
        return Err(format!("the job needs {} parts of {part_bytes_max} bytes, more than {PARTS_MAX}", parts.len()));
    }
    let total = u32::try_from(n_tasks).map_err(|_| format!("{n_tasks} tasks are too many"))?;
    spec.options.tasks_total = Some(total);
    let job: JobId = spec.id.clone();
    let mut list = list;
    let mut events = Vec::with_capacity(parts.len());
    for (part_idx, &(from, to)) in parts.iter().enumerate().rev() {
        let tasks: Vec<BTreeMap<String, String>> = list.split_off(from);
        let mine: BTreeMap<u32, TaskConditions> = conditions.split_off(&(from as u32));
        assert_eq!(tasks.len(), to - from);
        let event = if part_idx == 0 {
            let mut first = spec.clone();
            first.tasks = TaskSet::List(tasks);
            first.task_conditions = mine;
            Event::JobSubmitted(first)
        } else {
            let conditions = mine.into_iter().map(|(index, condition)| (index - from as u32, condition)).collect();
            Event::TasksAdded { job: job.clone(), tasks, conditions }
        };
        events.push(event);
    }
    events.reverse();
    for (part_idx, event) in events.iter().enumerate() {
        let len = encoded_len(event);
        if len > part_bytes_max {
            return Err(format!("part {part_idx} came to {len} bytes, more than {part_bytes_max}"));
        }
    }
    Ok(events)
}

fn condition_cost(condition: &TaskConditions) -> usize {
    let preferences: usize = condition.affinity.iter().map(|p| p.when.len() + 16).sum();
    let depends: usize = condition.depends_on.iter().map(|t| t.job.as_str().len() + 16).sum();
    condition.discriminator.len() + preferences + depends + condition.task_affinity.len() * 6 + 32
}

/// Publishes the parts in order and waits for the projector's verdict on every
/// one (each within `wait`). Returns the first part's sequence and the verdict
/// that tells: the first rejection, else the last part's. A part that cannot be
/// stored cancels the job (best effort) before the error is returned.
pub async fn publish_parts(
    nats: &NatsArgs,
    job: &JobId,
    parts: Vec<Event>,
    wait: Duration,
) -> anyhow::Result<(u64, Settled)> {
    // Every part is the same job's: the publisher of the first is that of all.
    let publisher = match parts.first() {
        Some(first) => nats.acting.publisher_for(first)?,
        None => return Err(anyhow::anyhow!("job {job} has no parts to publish")),
    };
    let log = connect_log(nats).await?;
    let n_parts = parts.len();
    let mut seqs = Vec::with_capacity(n_parts);
    for (part_idx, part) in parts.into_iter().enumerate() {
        match publish(&log, &publisher, "gridfold-cli", part).await {
            Ok(seq) => seqs.push(seq),
            Err(error) if part_idx > 0 => {
                let reason = format!("part {part_idx} of {n_parts} could not be stored");
                let cancelled = publish(&log, &publisher, "gridfold-cli", Event::JobCancelled { job: job.clone(), reason }).await;
                let said = if cancelled.is_ok() { "the job is cancelled" } else { "cancel it with gridfold cancel" };
                return Err(error.context(format!("storing part {part_idx} of {n_parts} of job {job}; {said}")));
            }
            Err(error) => return Err(error),
        }
    }
    let first = seqs[0];
    let mut settled = Settled::NotKnown("not waited for".into());
    for seq in seqs {
        settled = await_verdict(nats, seq, wait).await;
        if !matches!(settled, Settled::Accepted) {
            break;
        }
    }
    Ok((first, settled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::testkit;

    #[test]
    fn a_large_parameter_list_is_split_into_parts_under_the_limit_that_add_up() {
        let list: Vec<BTreeMap<String, String>> =
            (0..20_000).map(|i| [("scene".to_string(), format!("scene-{i:08}"))].into()).collect();
        let mut spec = testkit::job_spec("big", 1, "");
        spec.tasks = TaskSet::List(list);
        spec.task_conditions = [(15_000, TaskConditions { queue_jump: true, ..TaskConditions::default() })].into();
        let parts = split_job(spec, 64 * 1024).unwrap();
        assert!(parts.len() > 5, "{} parts", parts.len());
        let mut n = 0;
        let mut jumps = Vec::new();
        for (part_idx, part) in parts.iter().enumerate() {
            assert!(encoded_len(part) <= 64 * 1024);
            match part {
                Event::JobSubmitted(first) => {
                    assert_eq!(part_idx, 0);
                    assert_eq!(first.options.tasks_total, Some(20_000));
                    n += first.task_count();
                }
                Event::TasksAdded { tasks, conditions, .. } => {
                    jumps.extend(conditions.keys().map(|&k| u64::from(k) + n));
                    n += tasks.len() as u64;
                }
                _ => unreachable!(),
            }
        }
        assert_eq!(n, 20_000);
        assert_eq!(jumps, vec![15_000], "a condition keeps its task");
    }

    #[test]
    fn a_job_that_fits_is_one_event_without_a_declared_total() {
        let parts = split_job(testkit::job_spec("small", 3, ""), PART_BYTES_MAX).unwrap();
        assert!(matches!(&parts[..], [Event::JobSubmitted(spec)] if spec.options.tasks_total.is_none()));
    }
}
