//! The run-order bound against the deliveries the projector really encodes
//! (the wire's, which only a test of the core may borrow).

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
