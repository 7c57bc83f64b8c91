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
mod tests {
    use super::*;
    use crate::core::ids::TaskRef;
    use crate::wire::delivery::{encode_delivery, Delivery, DeliveryKind, RunTask};

    fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(name, value)| (name.to_string(), value.to_string())).collect()
    }

    /// The delivery the projector would send for one task, as
    /// `projector::delivery::run_task` builds it, encoded.
    fn encoded_run(job: &str, template: &TaskTemplate, options: &JobOptions, own: &BTreeMap<String, String>, index: u32) -> u64 {
        let mut merged = template.params.clone();
        merged.extend(own.clone());
        let expand = |argv: &[String]| -> Vec<String> {
            argv.iter()
                .map(|arg| {
                    let mut out = arg.replace("{index}", &index.to_string());
                    for (name, value) in &merged {
                        out = out.replace(&format!("{{{name}}}"), value);
                    }
                    out
                })
                .collect()
        };
        let run = RunTask {
            task: TaskRef::new(JobId::new(job).unwrap(), index),
            attempt: u32::MAX,
            argv: expand(&template.argv),
            params: merged.clone(),
            wall_time_limit_ms: u64::MAX,
            slots: u32::MAX,
            root_library: options.root_library.clone(),
            output_bytes_max: u64::MAX,
            work_dir_retention_ms: u64::MAX,
            nodes: Vec::new(),
            companion: true,
            companion_argv: expand(&options.companion_argv),
        };
        let delivery = Delivery {
            id: format!("{}-{}", u64::MAX, u32::MAX),
            batch_seq: crate::core::ids::Seq(u64::MAX),
            engine: crate::core::ids::EngineId::new(&"e".repeat(ID_LEN_MAX)).unwrap(),
            epoch: u64::MAX,
            kind: DeliveryKind::Run(run),
        };
        encode_delivery(&delivery).len() as u64
    }

    #[test]
    fn the_bound_is_never_below_the_encoded_order_of_any_task() {
        let template = TaskTemplate {
            argv: vec!["render".into(), "--scene={scene}".into(), "{scene}-{index}.png".into(), "{missing}".into(), "{open".into()],
            params: params(&[("scene", "intro"), ("quality", "high")]),
        };
        let options = JobOptions { companion_argv: vec!["hold".into(), "{quality}".into()], ..JobOptions::default() };
        let tasks = vec![params(&[("scene", &"s".repeat(900))]), params(&[("quality", &"q".repeat(300)), ("extra", "1")]), params(&[])];
        let bound = run_order_bytes(&JobId::new("job").unwrap(), &template, &options, &tasks);
        let mut largest = 0;
        for (index, own) in tasks.iter().enumerate() {
            let encoded = encoded_run("job", &template, &options, own, index as u32 + 4_000_000_000);
            assert!(encoded <= bound, "task {index}: {encoded} bytes encoded, bound {bound}");
            largest = largest.max(encoded);
        }
        assert!(bound <= largest + 1_024, "the bound stays near the largest order, {largest} bytes: {bound}");
    }

    /// The job: a 250 KB parameter used five times would make a
    /// 1.25 MB order; one use of it fits.
    #[test]
    fn a_250_kb_parameter_used_five_times_is_over_the_bound_and_used_once_is_not() {
        let value = "v".repeat(250_000);
        let job = JobId::new("big").unwrap();
        let five = TaskTemplate { argv: vec!["{p}".into(); 5], params: params(&[("p", &value)]) };
        let refused = check_run_order(&job, &five, &JobOptions::default(), &[]).unwrap_err();
        let Rejection::RunOrderTooLarge { bytes, max, .. } = refused else { panic!("{refused:?}") };
        assert!(bytes > 5 * 250_000 && max == RUN_ORDER_BYTES_MAX, "{bytes}");
        // Given per task, in a list: the same.
        let per_task = TaskTemplate { argv: vec!["{p}".into(); 5], params: BTreeMap::new() };
        assert!(check_run_order(&job, &per_task, &JobOptions::default(), &[params(&[]), params(&[("p", &value)])]).is_err());
        let once = TaskTemplate { argv: vec!["run".into()], params: params(&[("p", &value)]) };
        assert!(check_run_order(&job, &once, &JobOptions::default(), &[]).is_ok());
    }

    use crate::core::event::{CapsPolicy, Event, Policy, TaskSet};
    use crate::core::fold::tests::fold_checked;
    use crate::core::testkit::*;

    fn with_caps(caps: CapsPolicy) -> (LogBuilder, State) {
        let mut log = LogBuilder::new();
        log.push(Event::PolicySet(Policy { caps, ..Policy::default() }));
        let mut state = State::new();
        for entry in &log.entries {
            assert!(fold_checked(&mut state, entry).is_empty());
        }
        (log, state)
    }

    fn owned(id: &str, owner: &str, tasks: u32) -> crate::core::event::JobSpec {
        crate::core::event::JobSpec { owner: owner.into(), ..job_spec(id, tasks, "") }
    }

    /// Folds a submission (through the checks every rejection must pass:
    /// nothing but the record changes) and gives its rejection, if any.
    fn submit(log: &mut LogBuilder, state: &mut State, spec: crate::core::event::JobSpec) -> Option<Rejection> {
        let entry = log.submit(spec);
        fold_checked(state, &entry).pop()
    }

    #[test]
    fn a_submission_past_each_cap_is_refused_naming_the_cap_the_count_and_the_limit() {
        let caps = CapsPolicy { max_jobs_per_user: 2, max_jobs: 3, max_tasks_per_user: 100, max_tasks: 150 };
        let (mut log, mut state) = with_caps(caps);
        assert_eq!(submit(&mut log, &mut state, owned("a1", "alice", 10)), None);
        assert_eq!(submit(&mut log, &mut state, owned("a2", "alice", 10)), None);
        let refused = submit(&mut log, &mut state, owned("a3", "alice", 10)).expect("alice holds 2 jobs");
        assert_eq!(refused, Rejection::OverCap { job: job_id("a3"), cap: Cap::MaxJobsPerUser, user: "alice".into(), held: 2, adding: 1, limit: 2 });
        assert_eq!(refused.kind_name(), "over-cap");
        assert_eq!(
            refused.to_string(),
            "job a3 refused: user \"alice\" holds 2 active jobs, and 1 more would pass max_jobs_per_user = 2"
        );
        assert_eq!(submit(&mut log, &mut state, owned("b1", "bob", 91)), None);
        let refused = submit(&mut log, &mut state, owned("c1", "carol", 1)).expect("the grid holds 3 jobs");
        assert!(matches!(refused, Rejection::OverCap { cap: Cap::MaxJobs, held: 3, adding: 1, limit: 3, .. }), "{refused:?}");
        assert_eq!(state.holdings().grid, crate::core::state::holdings::Held { jobs: 3, tasks: 111 });

        // A job that ends no longer counts: alice may submit again, and the
        // task caps refuse what would pass them.
        let cancelled = log.push(Event::JobCancelled { job: job_id("a1"), reason: String::new() });
        assert!(fold_checked(&mut state, &cancelled).is_empty());
        let refused = submit(&mut log, &mut state, owned("a4", "alice", 91)).expect("alice holds 10 tasks");
        assert!(matches!(refused, Rejection::OverCap { cap: Cap::MaxTasksPerUser, held: 10, adding: 91, limit: 100, .. }), "{refused:?}");
        let refused = submit(&mut log, &mut state, owned("a4", "alice", 90)).expect("the grid holds 101 tasks");
        assert!(matches!(refused, Rejection::OverCap { cap: Cap::MaxTasks, held: 101, adding: 90, limit: 150, .. }), "{refused:?}");
        assert_eq!(submit(&mut log, &mut state, owned("a4", "alice", 49)), None);
        assert_eq!(state.holdings().grid, crate::core::state::holdings::Held { jobs: 3, tasks: 150 });
    }

    #[test]
    fn tasks_added_past_a_task_cap_are_refused_and_within_it_are_taken() {
        let (mut log, mut state) = with_caps(CapsPolicy { max_tasks_per_user: 5, ..CapsPolicy::default() });
        let spec = crate::core::event::JobSpec { tasks: TaskSet::List(vec![BTreeMap::new(); 3]), ..job_spec("parts", 3, "") };
        assert_eq!(submit(&mut log, &mut state, spec), None);
        let add = |n: usize| Event::TasksAdded { job: job_id("parts"), tasks: vec![BTreeMap::new(); n], conditions: BTreeMap::new() };
        let entry = log.push(add(3));
        let refused = fold_checked(&mut state, &entry);
        assert!(matches!(refused.as_slice(), [Rejection::OverCap { cap: Cap::MaxTasksPerUser, held: 3, adding: 3, limit: 5, .. }]), "{refused:?}");
        let entry = log.push(add(2));
        assert!(fold_checked(&mut state, &entry).is_empty());
        assert_eq!(state.holdings().of_user(state.users().find("alice")).tasks, 5);
    }

    /// The job, in the fold: refused at submission, so no engine is
    /// ever sent its 1.25 MB order; tasks added with such a value likewise.
    #[test]
    fn the_fold_refuses_a_job_whose_250_kb_parameter_is_used_five_times() {
        let (mut log, mut state) = with_caps(CapsPolicy::default());
        let value = "v".repeat(250_000);
        let big = crate::core::event::JobSpec {
            template: TaskTemplate { argv: vec!["{p}".into(); 5], params: params(&[("p", &value)]) },
            ..job_spec("big", 1, "")
        };
        let refused = submit(&mut log, &mut state, big).expect("refused");
        assert_eq!(refused.kind_name(), "run-order-too-large");
        assert!(refused.to_string().contains("more than 262144"), "{refused}");
        assert!(state.job_idx(&job_id("big")).is_none());

        let spec = crate::core::event::JobSpec {
            template: TaskTemplate { argv: vec!["{p}".into(); 5], params: params(&[("p", "small")]) },
            tasks: TaskSet::List(vec![BTreeMap::new()]),
            ..job_spec("parts", 1, "")
        };
        assert_eq!(submit(&mut log, &mut state, spec), None);
        let entry = log.push(Event::TasksAdded { job: job_id("parts"), tasks: vec![params(&[("p", &value)])], conditions: BTreeMap::new() });
        let refused = fold_checked(&mut state, &entry);
        assert!(matches!(refused.as_slice(), [Rejection::RunOrderTooLarge { .. }]), "{refused:?}");
    }
}
