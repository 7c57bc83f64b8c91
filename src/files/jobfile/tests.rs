use expect_test::{Expect, expect};

use super::*;

fn check_error(text: &str, expect: Expect) {
    let error = parse_job(text, "job.toml", "alice").expect_err("the file is bad");
    expect.assert_eq(&error.to_string());
}

/// A job file with one counted task and `extra` on top, the way tests write one.
fn with_task(extra: &str) -> String {
    format!("tasks = 4\n{extra}\n[task]\nargv = [\"x\"]\n")
}

fn parse(text: &str) -> JobSpec {
    parse_job(text, "job.toml", "alice").unwrap_or_else(|e| panic!("{e}"))
}

/// The options and conditions of a job, one line each, for expectations.
fn show(spec: &JobSpec) -> String {
    let mut shown = format!("{:?}\n", spec.options);
    for (task_idx, conditions) in &spec.task_conditions {
        shown.push_str(&format!("task {task_idx}: {conditions:?}\n"));
    }
    shown
}

#[test]
fn a_complete_file_becomes_a_job() {
    let spec = parse(
        r#"
id = "render-1"
project = "film"
priority = 5
requirements = 'os == "linux" && memory_mb >= 4096'
max_attempts = 2
wall_time_limit_secs = 600
tasks = 100

[task]
argv = ["render", "--frame={index}", "--scene={scene}"]
params = { scene = "intro" }
"#,
    );
    assert_eq!(spec.id.as_str(), "render-1");
    assert_eq!(spec.owner, "alice");
    assert_eq!(spec.task_count(), 100);
    assert_eq!(spec.wall_time_limit_ms, 600_000);
    assert_eq!(spec.template.params["scene"], "intro");
    assert_eq!(spec.options, JobOptions::default(), "no option is on unless the file says so");
    assert!(spec.task_conditions.is_empty());
}

#[test]
fn a_task_list_gives_each_task_its_parameters() {
    let spec = parse_job("tasks = [{ x = \"1\" }, { x = \"2\" }]\n[task]\nargv = [\"echo\", \"{x}\"]\n", "job.toml", "bob").unwrap();
    assert_eq!(spec.task_count(), 2);
    assert!(spec.id.as_str().starts_with("job-"));
}

#[test]
fn errors_name_the_line_and_what_is_wrong() {
    check_error("tasks = 3\n[task]\nargv = [\"x\"]\ncolour = 1\n", expect!["job.toml:4: unknown field `colour`, expected `argv` or `params`"]);
    check_error("tasks = 0\n[task]\nargv = [\"x\"]\n", expect!["job.toml:1: tasks must be between 1 and 10000000, not 0"]);
    check_error("id = \"a b\"\ntasks = 1\n[task]\nargv = [\"x\"]\n", expect!["job.toml:1: id: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found ' ' at byte 1"]);
    check_error("tasks = 1\n[task]\nargv = []\n", expect!["job.toml:2: [task] argv must name a program to run"]);
    check_error("tasks = 1\nmax_attempts = 0\n[task]\nargv = [\"x\"]\n", expect!["job.toml:2: max_attempts must be at least 1"]);
    check_error("tasks = 1\n\nrequirements = 'memory_mb >= \"lots\"'\n[task]\nargv = [\"x\"]\n", expect![[r#"
        job.toml:3: requirements at byte 13: `memory_mb` is a number; compare it with a number, not a string
          memory_mb >= "lots"
                       ^"#]]);
    check_error("tasks = 1\n[task]\nargv = [\"x\"\n", expect!["job.toml:3: unclosed array, expected `]`"]);
}

#[test]
fn job_options_are_read_with_their_defaults() {
    let spec = parse(&with_task(
        r#"
root_library = { name = "render-lib", version = "2.1.0" }
affinity = [{ when = 'type == "blade"', weight = 10 }, { when = 'site == "hel"', weight = -5 }]
depends_on = ["prep", "fetch.2"]
fail_on_dependency_failure = true
continue_on_task_failure = true
engine_blacklisting = true
engine_greylisting = true
redundant_rescheduling = true
task_max_time_secs = 600
cancel_redundant_on_first_result = true
"#,
    ));
    expect![[r#"
        JobOptions { deadline_ms: None, job_share: 0, root_library: Some(LibraryRef { name: "render-lib", version: "2.1.0" }), affinity: [Preference { when: "type == \"blade\"", weight: 10 }, Preference { when: "site == \"hel\"", weight: -5 }], depends_on_jobs: [JobId("prep"), JobId("fetch.2")], fail_on_dependency_failure: true, continue_on_task_failure: true, engine_blacklisting: true, failures_before_blacklist: 1, engine_greylisting: true, redundant_rescheduling: true, task_max_time_ms: 600000, cancel_redundant_on_first_result: true, tasks_total: None, project_priority: 0, expected_task_time_ms: 0, soft: "", span: Engine, reserve: false, process_type: "", companion_argv: [], campaign: Default }
    "#]].assert_eq(&show(&spec));
    // failures_before_blacklist is 1 when blacklisting is on and it is not given.
    assert_eq!(spec.options.failures_before_blacklist, 1);
    let spec = parse(&with_task("engine_blacklisting = true\nfailures_before_blacklist = 3"));
    assert_eq!(spec.options.failures_before_blacklist, 3);
    assert_eq!(parse(&with_task("")).options.failures_before_blacklist, 0, "off: no threshold");
}

#[test]
fn job_option_errors_name_the_line() {
    check_error(&with_task("root_library = { name = \"render lib\", version = \"1\" }"), expect!["job.toml:2: root_library.name: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found ' ' at byte 6"]);
    check_error(&with_task("root_library = { name = \"lib\", version = \"\" }"), expect!["job.toml:2: root_library.version: an id may not be empty"]);
    check_error(&with_task("root_library = { name = \"lib\" }"), expect!["job.toml:2: missing field `version`"]);
    check_error(&with_task("affinity = [\n  { when = 'type == \"blade\"', weight = 1 },\n  { when = 'type = \"blade\"', weight = 1 },\n]"), expect![[r#"
        job.toml:4: affinity[1].when at byte 5: `=` alone is not an operator; compare with `==`
          type = "blade"
               ^"#]]);
    check_error(&with_task("affinity = [{ when = 'has_gpu' }]"), expect!["job.toml:2: missing field `weight`"]);
    check_error(&with_task("id = \"me\"\ndepends_on = [\"prep\", \"me\"]"), expect!["job.toml:3: depends_on[1]: a job cannot depend on itself"]);
    check_error(&with_task("depends_on = [\"prep/0\"]"), expect!["job.toml:2: depends_on[0]: an id may hold only letters, digits, '_' and '-' (and '.' in job ids); found '/' at byte 4"]);
    check_error(&with_task("fail_on_dependency_failure = true"), expect!["job.toml:2: fail_on_dependency_failure needs something to depend on: `depends_on` of the job or of a task"]);
    check_error(&with_task("failures_before_blacklist = 2"), expect!["job.toml:2: failures_before_blacklist needs engine_blacklisting = true"]);
    check_error(&with_task("engine_blacklisting = true\nfailures_before_blacklist = 0"), expect!["job.toml:3: failures_before_blacklist must be at least 1"]);
    check_error(&with_task("task_max_time_secs = 60"), expect!["job.toml:2: task_max_time_secs needs redundant_rescheduling = true"]);
    check_error(&with_task("redundant_rescheduling = true\ntask_max_time_secs = 0"), expect!["job.toml:3: task_max_time_secs must be at least 1 (leave it out for no limit)"]);
    check_error(&with_task("cancel_redundant_on_first_result = true"), expect!["job.toml:2: cancel_redundant_on_first_result needs redundant_rescheduling = true"]);
    check_error(&with_task("engine_blacklisting = \"yes\""), expect![[r#"job.toml:2: invalid type: string "yes", expected a boolean"#]]);
}

#[test]
fn a_task_list_gives_each_task_its_parameters_and_conditions() {
    let spec = parse(
        r#"
id = "sweep"
depends_on = ["prep"]
fail_on_dependency_failure = true

[task]
argv = ["sweep", "--x={x}"]
params = { x = "none" }   # the last task has none of its own: {x} must have a value

[[task_list]]
params = { x = "0" }

[[task_list]]
params = { x = "1" }
discriminator = 'memory_mb >= 8192'
affinity = [{ when = 'site == "hel"', weight = 3 }]
queue_jump = true

[[task_list]]
params = { x = "2" }
task_affinity = [0, 1]
depends_on = ["1", "prep/4"]

[[task_list]]
"#,
    );
    assert_eq!(
        spec.tasks,
        TaskSet::List(vec![
            [("x".to_string(), "0".to_string())].into(),
            [("x".to_string(), "1".to_string())].into(),
            [("x".to_string(), "2".to_string())].into(),
            BTreeMap::new(),
        ])
    );
    expect![[r#"
        JobOptions { deadline_ms: None, job_share: 0, root_library: None, affinity: [], depends_on_jobs: [JobId("prep")], fail_on_dependency_failure: true, continue_on_task_failure: false, engine_blacklisting: false, failures_before_blacklist: 0, engine_greylisting: false, redundant_rescheduling: false, task_max_time_ms: 0, cancel_redundant_on_first_result: false, tasks_total: None, project_priority: 0, expected_task_time_ms: 0, soft: "", span: Engine, reserve: false, process_type: "", companion_argv: [], campaign: Default }
        task 1: TaskConditions { discriminator: "memory_mb >= 8192", affinity: [Preference { when: "site == \"hel\"", weight: 3 }], task_affinity: [], queue_jump: true, depends_on: [] }
        task 2: TaskConditions { discriminator: "", affinity: [], task_affinity: [0, 1], queue_jump: false, depends_on: [sweep/1, prep/4] }
    "#]].assert_eq(&show(&spec));
}

#[test]
fn conditions_apply_to_ranges_of_counted_tasks() {
    let spec = parse(
        r#"
id = "render"
tasks = 20

[task]
argv = ["render", "{index}"]

[[condition]]
tasks = "0-2"
queue_jump = true

[[condition]]
tasks = 5
discriminator = 'has_gpu'
task_affinity = [4]

[[condition]]
tasks = "10-11"
depends_on = ["9", "other/0"]
"#,
    );
    expect![[r#"
        JobOptions { deadline_ms: None, job_share: 0, root_library: None, affinity: [], depends_on_jobs: [], fail_on_dependency_failure: false, continue_on_task_failure: false, engine_blacklisting: false, failures_before_blacklist: 0, engine_greylisting: false, redundant_rescheduling: false, task_max_time_ms: 0, cancel_redundant_on_first_result: false, tasks_total: None, project_priority: 0, expected_task_time_ms: 0, soft: "", span: Engine, reserve: false, process_type: "", companion_argv: [], campaign: Default }
        task 0: TaskConditions { discriminator: "", affinity: [], task_affinity: [], queue_jump: true, depends_on: [] }
        task 1: TaskConditions { discriminator: "", affinity: [], task_affinity: [], queue_jump: true, depends_on: [] }
        task 2: TaskConditions { discriminator: "", affinity: [], task_affinity: [], queue_jump: true, depends_on: [] }
        task 5: TaskConditions { discriminator: "has_gpu", affinity: [], task_affinity: [4], queue_jump: false, depends_on: [] }
        task 10: TaskConditions { discriminator: "", affinity: [], task_affinity: [], queue_jump: false, depends_on: [render/9, other/0] }
        task 11: TaskConditions { discriminator: "", affinity: [], task_affinity: [], queue_jump: false, depends_on: [render/9, other/0] }
    "#]].assert_eq(&show(&spec));
}

#[test]
fn task_condition_errors_name_the_line() {
    let list = |entries: &str| format!("[task]\nargv = [\"x\"]\n{entries}");
    check_error(&list("[[task_list]]\n[[task_list]]\ntask_affinity = [1]\n"), expect!["job.toml:5: task_list[1].task_affinity[0]: task 1 is not before task 1; task affinity names earlier tasks of the job"]);
    check_error(&list("[[task_list]]\n[[task_list]]\ntask_affinity = [5]\n"), expect!["job.toml:5: task_list[1].task_affinity[0]: task 5 is not before task 1; task affinity names earlier tasks of the job"]);
    check_error(&list("[[task_list]]\n[[task_list]]\ndepends_on = [\"0\", \"2\"]\n"), expect!["job.toml:5: task_list[1].depends_on[1]: task 2 is not before task 1; a task depends only on earlier tasks of its job"]);
    check_error(&list("[[task_list]]\ndepends_on = [\"j\"]\n"), expect![[r#"job.toml:4: task_list[0].depends_on[0]: a task is written JOB/INDEX, got "j" (or a bare index for a task of this job)"#]]);
    check_error(&list("[[task_list]]\ndiscriminator = '''\nos == \"linux\" &&\n  mem >'''\n"), expect![[r#"
        job.toml:6: task_list[0].discriminator at byte 24 (line 2, column 8): expected a value (a number or a "quoted string") after `>`, found the end of the expression
            mem >
                 ^"#]]);
    check_error(&list("[[task_list]]\ntasks = \"0-1\"\n"), expect!["job.toml:4: task_list[0]: `tasks` belongs in [[condition]]; a [[task_list]] entry is one task"]);
    check_error(&list("[[task_list]]\ncolour = \"red\"\n"), expect!["job.toml:4: unknown field `colour`, expected one of `params`, `tasks`, `discriminator`, `affinity`, `task_affinity`, `queue_jump`, `depends_on`"]);
    check_error(&format!("tasks = 2\n{}", list("[[task_list]]\n")), expect!["job.toml:4: give the tasks once: `tasks` or [[task_list]], not both"]);
    check_error("[task]\nargv = [\"x\"]\n", expect!["job.toml:1: the job has no tasks: give `tasks = N`, `tasks = [ {...}, ... ]` or [[task_list]] entries"]);

    let counted = |entries: &str| format!("tasks = 10\n[task]\nargv = [\"x\"]\n{entries}");
    check_error(&counted("[[condition]]\nqueue_jump = true\n"), expect![[r#"job.toml:4: condition[0]: say which tasks, e.g. tasks = "0-9""#]]);
    check_error(&counted("[[condition]]\ntasks = \"3-12\"\nqueue_jump = true\n"), expect!["job.toml:5: condition[0]: tasks 3-12 goes past the job's last task, 9"]);
    check_error(&counted("[[condition]]\ntasks = \"5-3\"\nqueue_jump = true\n"), expect!["job.toml:5: condition[0]: tasks 5-3 is empty: the range runs from the lower index to the higher"]);
    check_error(&counted("[[condition]]\ntasks = \"a-b\"\nqueue_jump = true\n"), expect![[r#"job.toml:5: condition[0]: tasks "a-b" is not an index or a range such as "0-9""#]]);
    check_error(&counted("[[condition]]\ntasks = \"0-4\"\n"), expect!["job.toml:4: condition[0] sets no condition"]);
    check_error(&counted("[[condition]]\ntasks = \"2-4\"\ntask_affinity = [3]\n"), expect!["job.toml:6: condition[0].task_affinity[0]: task 3 is not before task 2; task affinity names earlier tasks of the job"]);
    check_error(
        &counted("[[condition]]\ntasks = \"0-4\"\nqueue_jump = true\n\n[[condition]]\ntasks = \"4-6\"\nqueue_jump = true\n"),
        expect!["job.toml:9: condition[1]: task 4 already has conditions from condition[0]; give a task's conditions in one place"],
    );
    check_error(&counted("[[condition]]\ntasks = 1\nparams = { x = \"1\" }\n"), expect!["job.toml:6: condition[0]: `params` belongs in [[task_list]]; a [[condition]] gives conditions only"]);
    check_error(
        &format!("tasks = {}\n[task]\nargv = [\"x\"]\n[[condition]]\ntasks = \"0-{}\"\nqueue_jump = true\n", CONDITIONED_TASKS_MAX + 1, CONDITIONED_TASKS_MAX),
        expect!["job.toml:5: condition[0]: 10001 tasks with conditions, more than 10000"],
    );
}

#[test]
fn a_deadline_is_a_date_time_with_its_offset_in_log_time() {
    let spec = parse(&with_task("deadline = 2026-11-24T18:30:00+01:00"));
    // 2026-11-24T17:30:00Z.
    assert_eq!(spec.options.deadline_ms, Some(1_795_541_400_000));
    let spec = parse(&with_task("deadline = 1970-01-02T00:00:00.250Z"));
    assert_eq!(spec.options.deadline_ms, Some(86_400_250));
    check_error(
        &with_task("deadline = 2026-11-24T18:30:00"),
        expect!["job.toml:2: deadline: 2026-11-24T18:30:00 needs a date, a time and its offset, such as 2026-11-24T18:00:00Z"],
    );
}

#[test]
fn a_job_share_is_read_and_bounded() {
    assert_eq!(parse(&with_task("job_share = 3")).options.job_share, 3);
    assert_eq!(parse(&with_task("")).options.job_share, 0);
    check_error(&with_task("job_share = 1000001"), expect!["job.toml:2: job_share must be within 0..=1000000"]);
    check_error(&with_task("job_share = -1"), expect!["job.toml:2: invalid value: integer `-1`, expected u32"]);
}

#[test]
fn a_project_priority_is_read_and_bounded_to_1_through_7() {
    assert_eq!(parse(&with_task("project_priority = 7")).options.project_priority, 7);
    assert_eq!(parse(&with_task("")).options.project_priority, 0);
    check_error(&with_task("project_priority = 0"), expect!["job.toml:2: project_priority must be within 1 (Highest)..=7 (Lowest)"]);
    check_error(&with_task("project_priority = 8"), expect!["job.toml:2: project_priority must be within 1 (Highest)..=7 (Lowest)"]);
}

#[test]
fn a_soft_request_is_read_and_a_bad_one_names_its_line_and_byte() {
    let spec = parse_job(&with_task("soft = 'gpu == \"yes\"'"), "job.toml", "alice").unwrap();
    assert_eq!(spec.options.soft, "gpu == \"yes\"");
    check_error(&with_task("\nsoft = 'gpu == '"), expect![[r#"
        job.toml:3: soft at byte 7: expected a value (a number or a "quoted string") after `==`, found the end of the expression
          gpu == 
                 ^"#]]);
    let deep = format!("soft = '{}true{}'", "(".repeat(80), ")".repeat(80));
    check_error(&with_task(&deep), expect![[r#"
        job.toml:2: soft at byte 64: nested too deeply: at most 64 levels of `(` and `!`
          ((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((true))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))))
                                                                          ^"#]]);
}

#[test]
fn a_campaign_type_is_read_and_an_unknown_one_is_refused_naming_the_known_ones() {
    let spec = parse(&with_task("campaign = \"test\"\n"));
    assert_eq!(spec.options.campaign, crate::core::event::CampaignType::Test);
    assert_eq!(parse(&with_task("")).options.campaign, crate::core::event::CampaignType::Default);
    check_error(&with_task("campaign = \"trial\"\n"), expect![[r#"job.toml:2: unknown campaign "trial"; known: default, test"#]]);
}
