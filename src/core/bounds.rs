//! What a submission may make the projector hold and send, checked by the
//! fold when a job is submitted and when tasks are added to it, so every
//! replay refuses the same entries:
//!
//! - **caps** ([`check_caps`]): the policy's `[caps]` on active jobs and the
//!   tasks they hold, per user (the job's `owner`) and over the grid,
//!   counted in `State::holdings`;
//! - **the run order bound** ([`check_run_order`]): an over-estimate of the
//!   encoded size of the largest run order any of the job's tasks can give
//!   ([`run_order_bytes`]) must be at most [`RUN_ORDER_BYTES_MAX`], well under
//!   the broker's payload limit (1 MiB by default), so no delivery is ever
//!   too large to send whole. Cheap whatever the job's size: the command is
//!   read once, then each task parameter's value once.

use std::collections::BTreeMap;

use super::event::{JobOptions, Span, TaskTemplate, PARALLEL_PARTS_MAX};
use super::ids::{JobId, ID_LEN_MAX};
use super::reject::{Cap, Rejection};
use super::state::State;

/// The largest run order (a `RunTask` delivery, encoded) a job may be able to
/// give: a quarter of the broker's default payload limit, so that one, joined
/// with others for the same engine (`wire::delivery::DELIVERY_MESSAGE_BYTES_MAX`,
/// as large), still travels in one message.
pub const RUN_ORDER_BYTES_MAX: u64 = 256 * 1024;

/// What every run order carries besides its command and parameters, at most:
/// the delivery's id, engine and epoch, the task's index and attempt, the
/// wall-time limit, slots, output bound and retention, and their framing.
const RUN_ORDER_FIXED_BYTES: u64 = 256;
/// The most a string of a repeated field adds besides its bytes (tag, length).
const STRING_FRAMING_BYTES: u64 = 6;
/// The most a parameter adds besides its name and value (entry, key and value framing).
const PARAM_FRAMING_BYTES: u64 = 12;
/// The longest `{index}` expands to (`u32::MAX` has 10 digits).
const INDEX_DIGITS_MAX: u64 = 10;

/// Refuses what would take the job's owner or the grid past a cap: `jobs`
/// more active jobs (1 for a submission, 0 for added tasks) holding `tasks`
/// more tasks.
pub fn check_caps(state: &State, job: &JobId, owner: &str, jobs: u64, tasks: u64) -> Result<(), Rejection> {
    let caps = state.policy.caps;
    let user = state.holdings().of_user(state.users().find(owner));
    let grid = state.holdings().grid;
    let checks = [
        (Cap::MaxJobsPerUser, user.jobs, jobs, u64::from(caps.max_jobs_per_user)),
        (Cap::MaxJobs, grid.jobs, jobs, u64::from(caps.max_jobs)),
        (Cap::MaxTasksPerUser, user.tasks, tasks, caps.max_tasks_per_user),
        (Cap::MaxTasks, grid.tasks, tasks, caps.max_tasks),
    ];
    for (cap, held, adding, limit) in checks {
        if adding > 0 && held.saturating_add(adding) > limit {
            return Err(Rejection::OverCap { job: job.clone(), cap, user: owner.to_string(), held, adding, limit });
        }
    }
    Ok(())
}

/// Refuses a job whose largest run order could pass [`RUN_ORDER_BYTES_MAX`]:
/// its command and options with these tasks' own parameters (none for a job
/// of counted tasks). For tasks added to a job, `task_params` are the new
/// ones only: each task's order depends on the template and its own
/// parameters alone, and the earlier tasks passed when they came.
pub fn check_run_order(
    job: &JobId,
    template: &TaskTemplate,
    options: &JobOptions,
    task_params: &[BTreeMap<String, String>],
) -> Result<(), Rejection> {
    let bytes = run_order_bytes(job, template, options, task_params);
    if bytes > RUN_ORDER_BYTES_MAX {
        return Err(Rejection::RunOrderTooLarge { job: job.clone(), bytes, max: RUN_ORDER_BYTES_MAX });
    }
    Ok(())
}

/// An over-estimate of the encoded size of the largest run order any of
/// these tasks can give (`projector::delivery`, `wire::delivery`): every
/// `{name}` in the command (and the companion command) counted at the
/// longest value `name` has in the template or any task (or as written, when
/// a task has none), `{index}` at 10 digits, the template's parameters and
/// the largest set of one task's own, the root library, a site job's node
/// list at its most parts, and the fixed fields.
pub fn run_order_bytes(
    job: &JobId,
    template: &TaskTemplate,
    options: &JobOptions,
    task_params: &[BTreeMap<String, String>],
) -> u64 {
    let mut longest: BTreeMap<&str, u64> = template.params.iter().map(|(name, value)| (name.as_str(), len(value))).collect();
    let mut own_params_max = 0;
    for params in task_params {
        let mut own = 0;
        for (name, value) in params {
            let at_most = longest.entry(name.as_str()).or_default();
            *at_most = (*at_most).max(len(value));
            own += len(name) + len(value) + PARAM_FRAMING_BYTES;
        }
        own_params_max = own_params_max.max(own);
    }
    let template_params: u64 = template.params.iter().map(|(name, value)| len(name) + len(value) + PARAM_FRAMING_BYTES).sum();
    let command = |argv: &[String]| -> u64 { argv.iter().map(|arg| expanded_at_most(arg, &longest) + STRING_FRAMING_BYTES).sum() };
    let library = options.root_library.as_ref().map_or(0, |library| len(&library.name) + len(&library.version) + 16);
    let nodes = if options.span == Span::Site { PARALLEL_PARTS_MAX as u64 * (ID_LEN_MAX as u64 + 16) } else { 0 };
    RUN_ORDER_FIXED_BYTES
        + len(job.as_str())
        + command(&template.argv)
        + command(&options.companion_argv)
        + template_params
        + own_params_max
        + library
        + nodes
}

fn len(text: &str) -> u64 {
    text.len() as u64
}

/// The most bytes `arg` expands to (as `Job::task_command` expands it): a
/// `{name}` replaced by a value at most `longest[name]` long, or left as
/// written when a task has no such parameter.
fn expanded_at_most(arg: &str, longest: &BTreeMap<&str, u64>) -> u64 {
    let mut bytes = 0;
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        bytes += open as u64;
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return bytes + len(&rest[open..]);
        };
        let name = &after[..close];
        let written = len(name) + 2;
        bytes += match name {
            "index" => INDEX_DIGITS_MAX,
            _ => longest.get(name).map_or(written, |&value| value.max(written)),
        };
        rest = &after[close + 1..];
    }
    bytes + len(rest)
}

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod tests;
