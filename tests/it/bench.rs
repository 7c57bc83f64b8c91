//! `gridfold bench` at a tiny scale, as a user runs it: it must report completed work
//! and a verified replay, so the command cannot rot.

use crate::support;

use std::process::Command;

#[test]
fn the_bench_runs_a_small_grid_and_proves_it_with_a_verified_replay() {
    let server = support::nats::start();
    let url = server.url();
    let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
        .args(["bench", "--nats", &url, "--tasks", "2000", "--engines", "20"])
        .args(["--raw-messages", "5000", "--timeout-secs", "60", "--json"])
        .output()
        .expect("gridfold runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "gridfold bench failed:\n{stdout}\n{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"));
    let number = |path: &str| {
        report
            .pointer(path)
            .and_then(serde_json::Value::as_f64)
            .unwrap_or_else(|| panic!("{path} is not a number in {report:#}"))
    };
    let verify = &report["verify"];
    assert_eq!(verify["ok"], true, "{report:#}");
    assert_eq!(verify["every_task_completed_once"], true, "{report:#}");
    assert_eq!(verify["projector_digest_matches"], true, "{report:#}");
    assert!(verify["divergence"].is_null(), "{report:#}");
    assert_eq!(number("/verify/rejected_entries"), 0.0);
    assert!(number("/verify/batches_verified") >= 1.0, "{report:#}");
    // The whole log was read back: what the run counted stored, and the
    // replay's read measured against the raw read of the same stream.
    assert_eq!(number("/verify/read_entries"), number("/run/log_entries"), "{report:#}");
    assert!(number("/verify/raw_read_msgs_per_s") > 0.0, "{report:#}");
    assert!(number("/verify/read_share_of_raw") > 0.0, "{report:#}");
    // The engines report the runs one delivery message brought in one message:
    // never more report messages than delivery messages, each a start and an end.
    assert!(number("/run/report_messages") >= 1.0, "{report:#}");
    assert!(number("/run/report_messages") <= number("/run/delivery_messages"), "{report:#}");
    assert!(number("/run/log_entries") >= number("/run/report_messages") + 24.0, "jobs, logins, batches: {report:#}");
    assert_eq!(number("/run/tasks_completed"), 2000.0);
    assert_eq!(number("/engines/runs_received"), 2000.0);
    assert_eq!(number("/engines/reports_published"), 4000.0);
    assert!(number("/run/lifecycles_per_s") > 0.0, "{report:#}");
    assert!(number("/raw_publish/msgs_per_s") > 0.0, "{report:#}");
    assert!(number("/run/ratio_to_raw_publish") > 0.0, "{report:#}");
    assert_eq!(number("/latency_ms/slot_free_to_dispatch/samples"), 2000.0);
    assert_eq!(number("/latency_ms/submit_to_dispatch/samples"), 2000.0);
    assert_eq!(number("/latency_ms/dispatch_to_completed/samples"), 2000.0);
    // One run per task, and the news of each engine's login (20 engines).
    assert_eq!(number("/projector/deliveries_sent"), 2020.0);
}

/// `--real` runs real commands through real processes (a projector and two
/// engine agents this binary starts, making directories ahead, in the work
/// directory given): every task completes once, the replay verifies, and the
/// report gives each process's CPU per task and the machine's spawn limit
/// measured in the same run, by threads and by `xargs -P`, with the machine's
/// whole CPU per spawn and per task and the ratio it allows.
#[test]
fn the_real_bench_runs_real_tasks_on_engine_processes_and_reports_cpu_per_process_and_the_spawn_limit() {
    let work_parent = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
        .args(["bench", "--real", "--tasks", "200", "--engines", "2", "--slots", "4"])
        .args(["--dirs-ahead", "8", "--timeout-secs", "120", "--json", "--quiet"])
        .arg("--work-dir")
        .arg(work_parent.path())
        .output()
        .expect("gridfold runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "gridfold bench --real failed:\n{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"));
    let number = |path: &str| {
        report.pointer(path).and_then(serde_json::Value::as_f64).unwrap_or_else(|| panic!("{path} is not a number in {report:#}"))
    };
    assert_eq!(report["verify"]["ok"], true, "{report:#}");
    assert_eq!(report["verify"]["every_task_completed_once"], true, "{report:#}");
    assert_eq!(number("/run/tasks_completed"), 200.0);
    // The engines made attempts' directories ahead, as asked, and still ran every task once.
    assert_eq!(number("/config/dirs_ahead"), 8.0, "{report:#}");
    // In the work directory given, on the filesystem named, and nothing left there after.
    let work_dir = report["config"]["work_dir"].as_str().unwrap_or_default();
    let parent = work_parent.path().canonicalize().unwrap();
    assert!(std::path::Path::new(work_dir).starts_with(work_parent.path()) || std::path::Path::new(work_dir).starts_with(&parent), "{report:#}");
    let filesystem = report["config"]["work_dir_filesystem"].as_str().unwrap_or_default();
    assert!(!filesystem.is_empty() && filesystem != "unknown", "{report:#}");
    assert_eq!(std::fs::read_dir(work_parent.path()).unwrap().count(), 0, "the bench removed its work directories");
    assert_eq!(number("/spawn_limit/spawns"), 200.0);
    assert_eq!(number("/spawn_limit/parallel"), 8.0, "the spawn limit runs at the grid's parallelism");
    assert!(number("/spawn_limit/per_s") > 0.0, "{report:#}");
    assert!(number("/run/tasks_per_s") > 0.0 && number("/run/ratio_to_spawn_limit") > 0.0, "{report:#}");
    // The issue's own measure too: `xargs -P` at the same parallelism.
    assert_eq!(number("/spawn_limit_xargs/spawns"), 200.0);
    assert_eq!(number("/spawn_limit_xargs/parallel"), 8.0);
    assert!(number("/spawn_limit_xargs/per_s") > 0.0 && number("/run/ratio_to_spawn_limit_xargs") > 0.0, "{report:#}");
    // Every process did work for the tasks: CPU per task is measured, not assumed.
    assert!(number("/cpu_us_per_task/engines") > 0.0, "{report:#}");
    assert!(number("/cpu_us_per_task/projector") > 0.0, "{report:#}");
    assert!(number("/cpu_us_per_task/broker") > 0.0, "{report:#}");
    // The whole machine's CPU is measured too, per spawn without gridfold and
    // per task through it: it holds every process's (each figure is counted in
    // clock ticks, so the sum may exceed it by a tick per process).
    let tick_per_task = 10_000.0 / 200.0;
    let processes = number("/cpu_us_per_task/engines") + number("/cpu_us_per_task/projector") + number("/cpu_us_per_task/broker");
    assert!(number("/cpu_us_per_task/machine") + 3.0 * tick_per_task >= processes, "{report:#}");
    assert!(number("/spawn_limit/machine_cpu_us_per_spawn") > 0.0 && number("/spawn_limit/cores_busy") > 0.0, "{report:#}");
    assert!(number("/spawn_limit_xargs/machine_cpu_us_per_spawn") > 0.0, "{report:#}");
    let allows = number("/run/ratio_the_cpu_allows");
    let expected = number("/spawn_limit/machine_cpu_us_per_spawn") / number("/cpu_us_per_task/machine");
    assert!((allows - expected).abs() < 1e-9 && allows > 0.0, "{report:#}");
    assert_eq!(number("/latency_ms/slot_free_to_dispatch/samples"), 200.0);
    assert_eq!(number("/latency_ms/dispatch_to_completed/samples"), 200.0);
}

/// `--sync-always` starts the bench's own nats-server fsyncing every message:
/// the grid still completes and verifies, and the report says how it synced.
#[test]
fn the_bench_with_sync_always_runs_on_a_broker_that_fsyncs_every_message_and_says_so() {
    // The bench finds nats-server as the tests do (`$GRIDFOLD_NATS_SERVER`, the
    // PATH, `.venv/bin/nats-server`) and starts it itself.
    let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
        .args(["bench", "--sync-always", "--tasks", "500", "--engines", "10"])
        .args(["--raw-messages", "500", "--timeout-secs", "60", "--json", "--quiet"])
        .output()
        .expect("gridfold runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "gridfold bench --sync-always failed:\n{stdout}\n{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"));
    assert_eq!(report["verify"]["ok"], true, "{report:#}");
    assert_eq!(report["run"]["tasks_completed"], 500, "{report:#}");
    let sync = report["broker"]["sync"].as_str().unwrap_or_default();
    assert!(sync.starts_with("always"), "the report says how the broker synced: {sync}");
}

/// `--soak` streams jobs that end and retire: with a short retention the projector
/// holds, at every sample, only the jobs not yet ended and those that ended within
/// the retention (in log time), and retires the rest; with a retention longer than
/// the run it holds every one. How many ended within the retention depends on the
/// run's rate, so the test checks each held job's age, not a count derived from a
/// mean rate. (Memory is measured by the long soak in docs/reliability.md, not here.)
#[test]
fn the_soak_holds_only_active_jobs_and_those_ended_within_the_retention_and_retires_the_rest() {
    let soak = |retention_ms: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
            .args(["bench", "--soak", "--tasks", "40000", "--engines", "50", "--soak-sample-every", "10000"])
            .args(["--soak-retention-ms", retention_ms, "--timeout-secs", "120", "--json", "--quiet"])
            .output()
            .expect("gridfold runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "gridfold bench --soak failed:\n{stdout}\n{stderr}");
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"))
    };
    let retiring = soak("200");
    assert_eq!(retiring["jobs"], 40, "{retiring:#}");
    assert_eq!(retiring["duplicate_runs"], 0, "{retiring:#}");
    let samples = retiring["samples"].as_array().unwrap();
    for sample in samples {
        let number = |key: &str| sample[key].as_u64().unwrap_or_else(|| panic!("{key} in {sample}"));
        // An ended job leaves the state once its retention has passed in log
        // time: none held is older than 200 ms.
        if let Some(age) = sample["oldest_ended_age_ms"].as_u64() {
            assert!(age <= 200, "an ended job held {age} ms after it ended, past the 200 ms retention: {retiring:#}");
        }
        // The soak submits 4 jobs ahead of the engines' completions; besides
        // those, the job running, the one ending and a job's worth of completions
        // the projector has not folded yet keep a few more active, never dozens.
        assert!(number("jobs_active") <= 8, "at most 8 active jobs: {retiring:#}");
        assert!(number("jobs_held") >= number("jobs_active"), "{retiring:#}");
    }
    assert!(retiring["oldest_ended_age_ms_max"].as_u64().unwrap() <= 200, "{retiring:#}");
    // By the end, every job the state no longer holds was retired: none lost, and
    // some gone (the run ends with its last task, not 200 ms later).
    let last = samples.last().unwrap();
    let (held, retired) = (last["jobs_held"].as_u64().unwrap(), last["jobs_retired"].as_u64().unwrap());
    assert_eq!(held + retired, 40, "every job is held or retired: {retiring:#}");
    assert!(retired > 0 && retiring["jobs_held_max"].as_u64().unwrap() < 40, "jobs retired during the run: {retiring:#}");
    assert_eq!(samples.len(), 4, "a sample every 10,000 tasks: {retiring:#}");
    assert_eq!(samples.last().unwrap()["tasks_done"], 40000);

    let keeping = soak("100000000");
    assert_eq!(keeping["jobs_retired"], 0, "{keeping:#}");
    assert_eq!(keeping["samples"].as_array().unwrap().last().unwrap()["jobs_held"], 40, "{keeping:#}");
}

/// `gridfold bench --memory`, run as the operator runs it, in a process of its
/// own: the state's peak bytes per held task, for the costliest form (tasks
/// listed with a parameter each) and per job (jobs of one task), times the
/// default caps, stay within the memory budget the caps are set for (issue 35).
#[test]
fn the_default_caps_keep_the_projectors_state_within_its_memory_budget() {
    use gridfold::core::event::{CapsPolicy, STATE_MEMORY_BUDGET_BYTES};
    let measure = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
            .args(["bench", "--memory", "--json"])
            .args(args)
            .output()
            .expect("gridfold runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "gridfold bench --memory failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
        let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|err| panic!("{err}: {stdout}"));
        assert_eq!(report["rejected"], 0, "{report:#}");
        report["peak_bytes_per_task"].as_f64().unwrap_or_else(|| panic!("no peak_bytes_per_task in {report:#}"))
    };
    let per_listed_task = measure(&["--jobs", "4", "--tasks", "400000", "--memory-listed"]);
    let per_counted_task = measure(&["--jobs", "2", "--tasks", "2000000"]);
    let per_job = measure(&["--jobs", "20000", "--tasks", "20000"]);
    let caps = CapsPolicy::default();
    let worst = per_listed_task * caps.max_tasks as f64 + per_job * f64::from(caps.max_jobs);
    eprintln!(
        "per listed task {per_listed_task:.1} B, per counted task {per_counted_task:.1} B, per job {per_job:.0} B: \
         {:.0} MB at the default caps, budget {} MB",
        worst / 1e6,
        STATE_MEMORY_BUDGET_BYTES / 1_000_000
    );
    assert!(per_counted_task < per_listed_task, "a counted task costs less than a listed one");
    assert!(worst <= STATE_MEMORY_BUDGET_BYTES as f64, "{worst} bytes at the default caps, more than the budget");
}
