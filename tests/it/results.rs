//! Task results and accounting with real `gridfold` processes (a projector, two
//! engines, real task processes) on a private nats-server: `gridfold tasks`,
//! `task`, `output` and `wait`, exit codes included.
//!
//! `why` of an ended task ranks engines from the state its dispatch was based on.
//!
//! - [`every_attempt_its_exit_code_error_tail_and_whole_output_are_shown_and_wait_tells_failure_from_success`]
//! - [`output_is_cut_at_the_policys_share_a_spent_job_budget_stores_nothing_and_work_dirs_go_after_the_policys_retention`]
//! - [`stat_at_20000_jobs_answers_a_page_says_how_many_more_and_its_pages_cover_every_job_and_a_usage_too_large_is_an_error`]
//! - [`a_task_rescheduled_onto_the_same_engine_runs_again_as_a_run_of_its_own_and_completes_once`]
//! - [`output_overwritten_in_the_store_is_said_altered_and_not_printed_and_the_untouched_prints`]

use crate::support;

use std::process::{Command, Stdio};
use std::time::Duration;

use gridfold::core::event::{Envelope, Event};
use gridfold::core::ids::JobId;
use gridfold::log::Append;
use gridfold::projector::query::StateSummary;
use gridfold::projector::results::{TaskReply, TasksReply};
use gridfold::wire;
use support::procs::Cluster;

const POLICY: &str = "\
engine_timeout_secs = 10
dispatch_timeout_secs = 30
";

/// What a `gridfold` command said and how it ended.
struct Ran {
    code: Option<i32>,
    stdout: Vec<u8>,
    stderr: String,
}

impl Ran {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// Runs `gridfold <args> --nats <url>` to its end (at most 120 s: `wait` waits).
fn run(cluster: &Cluster, args: &[&str]) -> Ran {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gridfold")).env("GRIDFOLD_OPERATOR", "true")
        .args(args)
        .args(["--nats", &cluster.url()])
        .env_remove("NATS_URL")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gridfold");
    // Drained while it runs: an answer larger than a pipe's buffer (a task's 64 KiB
    // result, in JSON) would otherwise block the command on its own output.
    let drain = |mut pipe: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("stdout piped")));
    let stderr = drain(Box::new(child.stderr.take().expect("stderr piped")));
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            cluster.fail(&format!("gridfold {args:?} did not finish within 120 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = stdout.join().expect("stdout reader");
    let stderr = stderr.join().expect("stderr reader");
    Ran { code: status.code(), stdout, stderr: String::from_utf8_lossy(&stderr).into_owned() }
}

fn submit(cluster: &Cluster, id: &str, tasks: u32, max_attempts: u32, script: &str) {
    let job = format!(
        "id = \"{id}\"\nowner = \"tester\"\nmax_attempts = {max_attempts}\ntasks = {tasks}\n\n[task]\nargv = [\"sh\", \"-c\", {script:?}]\n"
    );
    let file = cluster.write(&format!("{id}.toml"), &job);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
}

/// Task 0 writes 100,000 bytes and a line to stdout (more than the log's 64 KiB
/// result), task 1 a line, task 2 a line to stderr and exits 3 on every attempt,
/// a second after it started (so the others are done before the job fails).
const MIXED: &str = "head -c 100000 /dev/zero | tr '\\0' x; echo out-{index}; echo err-{index} >&2; \
                     if [ {index} -eq 2 ]; then sleep 1; exit 3; fi";

#[test]
fn every_attempt_its_exit_code_error_tail_and_whole_output_are_shown_and_wait_tells_failure_from_success() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    let (w1, w2) = (cluster.path("w1"), cluster.path("w2"));
    cluster.engine("engine-1", "e1", 2, &w1);
    cluster.engine("engine-2", "e2", 2, &w2);
    cluster.wait_logged_in(&["e1", "e2"]);

    submit(&cluster, "mixed", 3, 2, MIXED);
    // wait: the job fails (task 2 failed twice), so exit 1; into a pipe, plain lines.
    let waited = run(&cluster, &["wait", "mixed", "--timeout-secs", "90"]);
    assert_eq!(waited.code, Some(1), "{}\n{}", waited.text(), waited.stderr);
    assert!(waited.text().contains("job mixed failed: 2 of 3 tasks done"), "{}", waited.text());
    assert!(!waited.text().contains('\x1b'), "no terminal codes into a pipe: {:?}", waited.text());

    // tasks --json: one line per task with its exit code and failure kind.
    let tasks = run(&cluster, &["tasks", "mixed", "--json"]);
    assert_eq!(tasks.code, Some(0), "{}", tasks.stderr);
    let reply: TasksReply = serde_json::from_slice(&tasks.stdout).expect("tasks --json decodes");
    assert_eq!((reply.status.as_str(), reply.n_tasks, reply.tasks.len()), ("failed", 3, 3));
    for line in &reply.tasks[..2] {
        assert_eq!((line.state.as_str(), line.exit_code, line.failure_kind.as_deref()), ("done", Some(0), None), "{line:?}");
        assert!(line.engine.is_some() && line.started_ms.is_some() && line.ended_ms.is_some(), "{line:?}");
    }
    let failed = &reply.tasks[2];
    assert_eq!(
        (failed.state.as_str(), failed.attempts, failed.exit_code, failed.failure_kind.as_deref()),
        ("failed", 2, Some(3), Some("non-zero-exit"))
    );
    // --state filters; the table is for people.
    let only_failed = run(&cluster, &["tasks", "mixed", "--state", "failed"]);
    assert_eq!(only_failed.code, Some(0), "{}", only_failed.stderr);
    let table = only_failed.text();
    let rows: Vec<&str> = table.lines().skip(2).collect();
    assert_eq!(rows.len(), 1, "{}", only_failed.text());
    assert!(rows[0].contains("failed") && rows[0].contains("non-zero-exit") && rows[0].trim_start().starts_with('2'), "{}", rows[0]);

    // task: both attempts, each with its engine, exit code, error tail and stored output.
    let task = run(&cluster, &["task", "mixed/2", "--json"]);
    assert_eq!(task.code, Some(0), "{}", task.stderr);
    let reply: TaskReply = serde_json::from_slice(&task.stdout).expect("task --json decodes");
    assert_eq!((reply.state.as_str(), reply.attempts_total, reply.attempts.len()), ("failed", 2, 2));
    for (n, attempt) in reply.attempts.iter().enumerate() {
        assert_eq!(attempt.attempt, n as u32 + 1);
        assert_eq!((attempt.outcome.as_str(), attempt.exit_code), ("failed", Some(3)), "{attempt:?}");
        assert_eq!(attempt.error_tail.as_deref(), Some("err-2\n"), "{attempt:?}");
        assert_eq!(attempt.stderr_stored_bytes, Some(6), "{attempt:?}");
        assert!(attempt.started_ms.is_some() && attempt.ended_ms >= attempt.started_ms, "{attempt:?}");
        assert!(attempt.dispatch_seq > attempt.based_on_seq && attempt.report_seq > Some(attempt.dispatch_seq), "{attempt:?}");
    }
    // A retry goes to the other engine while it fits.
    assert_ne!(reply.attempts[0].engine, reply.attempts[1].engine);
    let text = run(&cluster, &["task", "mixed/2"]).text();
    assert!(text.contains("attempt 1 on ") && text.contains("exit code 3, non-zero-exit") && text.contains("| err-2"), "{text}");

    // task of a completed one: the result on the log is the first 64 KiB of stdout.
    let done: TaskReply = serde_json::from_slice(&run(&cluster, &["task", "mixed/0", "--json"]).stdout).unwrap();
    let first = &done.attempts[0];
    assert_eq!((first.outcome.as_str(), first.exit_code, first.result_bytes), ("completed", Some(0), 64 * 1024));
    assert_eq!(first.stdout_stored_bytes, Some(100_006), "{first:?}");

    // output: the whole stdout, past the log's 64 KiB; stderr of a chosen attempt.
    let output = run(&cluster, &["output", "mixed/0"]);
    assert_eq!(output.code, Some(0), "{}", output.stderr);
    let mut expected = vec![b'x'; 100_000];
    expected.extend_from_slice(b"out-0\n");
    assert!(output.stdout == expected, "{} bytes, not the 100,006 written", output.stdout.len());
    let stderr = run(&cluster, &["output", "mixed/2", "--attempt", "1", "--stderr"]);
    assert_eq!((stderr.code, stderr.text().as_str()), (Some(0), "err-2\n"), "{}", stderr.stderr);

    // Unknown job, task, attempt: exit 1, said once.
    let no_job = run(&cluster, &["tasks", "nosuch"]);
    assert_eq!((no_job.code, no_job.stderr.trim()), (Some(1), "no job nosuch"));
    let no_task = run(&cluster, &["task", "mixed/9"]);
    assert_eq!(no_task.code, Some(1), "{}", no_task.stderr);
    assert!(no_task.stderr.contains("no task mixed/9"), "{}", no_task.stderr);
    let no_attempt = run(&cluster, &["output", "mixed/2", "--attempt", "7"]);
    assert_eq!(no_attempt.code, Some(1), "{}", no_attempt.stderr);
    assert_eq!(run(&cluster, &["wait", "nosuch"]).code, Some(1));

    // why of an ended task: from the state its dispatch was based on.
    let why = run(&cluster, &["why", "mixed/2"]);
    assert_eq!(why.code, Some(0), "{}", why.stderr);
    let seqs = format!(
        "its attempt 2 went to {} by the order batch at seq {}, decided on the state at seq {}; as of then:",
        reply.attempts[1].engine, reply.attempts[1].dispatch_seq, reply.attempts[1].based_on_seq
    );
    assert!(why.text().starts_with(&format!("mixed/2 failed: {seqs}")), "{}", why.text());

    // A job whose every task completes: wait exits 0.
    submit(&cluster, "fine", 4, 1, "echo fine-{index}");
    let waited = run(&cluster, &["wait", "fine", "--timeout-secs", "90"]);
    assert_eq!(waited.code, Some(0), "{}\n{}", waited.text(), waited.stderr);
    assert!(waited.text().contains("job fine done: 4 of 4 tasks done"), "{}", waited.text());
    assert_eq!(run(&cluster, &["output", "fine/3"]).text(), "fine-3\n");
}

/// `gridfold reschedule` of a running task whose re-run lands on the same
/// engine (the only one): the re-run answers another dispatch, so the broker
/// takes its reports for new messages (its start is not dropped as the first
/// run's), the task completes once, with no dispatch timeout (4 s here; the
/// re-run lasts 6) and no attempt spent, and its stored output is the re-run's.
#[test]
fn a_task_rescheduled_onto_the_same_engine_runs_again_as_a_run_of_its_own_and_completes_once() {
    let mut cluster = Cluster::start("engine_timeout_secs = 10\ndispatch_timeout_secs = 4\n");
    cluster.projector();
    let work = cluster.path("w1");
    cluster.engine("engine-1", "e1", 1, &work);
    cluster.wait_logged_in(&["e1"]);
    let runs = cluster.path("runs");
    let runs = runs.display();
    let script = format!(
        "n=$(( $(cat {runs} 2>/dev/null || echo 0) + 1 )); echo $n > {runs}; echo run-$n; echo err-$n >&2; \
         if [ $n -eq 1 ]; then exec sleep 60; fi; sleep 6"
    );
    // One attempt only: one spent on a dispatch timeout would fail the job.
    submit(&cluster, "again", 1, 1, &script);
    cluster.wait_for("the first run to run", Duration::from_secs(30), |cluster| {
        let reply: TaskReply = serde_json::from_slice(&run(cluster, &["task", "again/0", "--json"]).stdout).map_err(|e| e.to_string())?;
        if reply.state == "running" { Ok(()) } else { Err(reply.state) }
    });
    cluster.command(&["reschedule".as_ref(), "again/0".as_ref()]);

    let waited = run(&cluster, &["wait", "again", "--timeout-secs", "60"]);
    assert_eq!(waited.code, Some(0), "{}\n{}", waited.text(), waited.stderr);
    let reply: TaskReply = serde_json::from_slice(&run(&cluster, &["task", "again/0", "--json"]).stdout).unwrap();
    let outcomes: Vec<(u32, &str)> = reply.attempts.iter().map(|a| (a.attempt, a.outcome.as_str())).collect();
    assert_eq!(outcomes, [(1, "ended"), (1, "completed")], "the preempted run, then its re-run: {reply:?}");
    assert_eq!((reply.state.as_str(), reply.attempts_total), ("done", 1), "{reply:?}");
    assert!(reply.attempts[1].dispatch_seq > reply.attempts[0].dispatch_seq);
    let stat: serde_json::Value = serde_json::from_str(cluster.command(&["stat".as_ref(), "--json".as_ref()]).trim()).unwrap();
    assert_eq!(stat["requeues"], 0, "no dispatch timeout: {stat}");
    use gridfold::core::event::Event;
    let is_ours = |entry: &gridfold::core::event::Entry, kind: &str| match support::procs::event(entry) {
        Some(event @ (Event::TaskStarted { task, .. } | Event::TaskCompleted { task, .. } | Event::TaskFailed { task, .. })) => {
            event.kind_name() == kind && task.to_string() == "again/0"
        }
        _ => false,
    };
    let entries = cluster.entries();
    let count = |kind: &str| entries.iter().filter(|entry| is_ours(entry, kind)).count();
    assert_eq!((count("TaskStarted"), count("TaskCompleted"), count("TaskFailed")), (2, 1, 0), "both runs' starts stored, one end");
    // The stored output is the re-run's, apart from the first run's.
    let stdout = run(&cluster, &["output", "again/0"]);
    assert_eq!((stdout.code, stdout.text().as_str()), (Some(0), "run-2\n"), "{}", stdout.stderr);
    let stderr = run(&cluster, &["output", "again/0", "--attempt", "1", "--stderr"]);
    assert_eq!((stderr.code, stderr.text().as_str()), (Some(0), "err-2\n"), "{}", stderr.stderr);
}

/// An engine's stored output overwritten in the object store by someone else:
/// `gridfold output` prints none of it and says "altered" (exit 1), whether the
/// forgery's length differs from what the engine stored or only its bytes; the
/// untouched output of another task prints as ever; `gridfold task` says which
/// streams were altered.
#[test]
fn output_overwritten_in_the_store_is_said_altered_and_not_printed_and_the_untouched_prints() {
    use gridfold::log::output_store::{BUCKET, Run, Stream, object_name};
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    let work = cluster.path("w1");
    cluster.engine("engine-1", "e1", 1, &work);
    cluster.wait_logged_in(&["e1"]);
    submit(&cluster, "kept", 2, 1, "echo out-{index}; echo err-{index} >&2");
    let waited = run(&cluster, &["wait", "kept", "--timeout-secs", "60"]);
    assert_eq!(waited.code, Some(0), "{}\n{}", waited.text(), waited.stderr);
    let reply: TaskReply = serde_json::from_slice(&run(&cluster, &["task", "kept/0", "--json"]).stdout).unwrap();
    let attempt = &reply.attempts[0];
    let reported = attempt.stdout_reported.as_ref().expect("the end report says what was stored");
    assert_eq!((reported.bytes, reported.blake3.as_str()), (6, blake3::hash(b"out-0\n").to_hex().as_str()));
    assert!(attempt.output_altered.is_empty(), "{attempt:?}");

    // Another principal writes over both streams: stdout with another length, stderr with as many bytes.
    let task: gridfold::core::ids::TaskRef = "kept/0".parse().unwrap();
    let run_of = Run { task: &task, attempt: 1, dispatch: gridfold::core::ids::Seq(attempt.dispatch_seq) };
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = async_nats::connect(cluster.url()).await.unwrap();
        let store = async_nats::jetstream::new(client).get_object_store(BUCKET).await.unwrap();
        for (stream, forged) in [(Stream::Stdout, &b"forged output\n"[..]), (Stream::Stderr, &b"ERR-0\n"[..])] {
            store.put(object_name(run_of, stream).as_str(), &mut &forged[..]).await.unwrap();
        }
    });

    let stdout = run(&cluster, &["output", "kept/0"]);
    assert_eq!(stdout.code, Some(1), "{}", stdout.stderr);
    assert!(stdout.stdout.is_empty(), "nothing of the forgery printed: {:?}", stdout.text());
    assert!(stdout.stderr.starts_with("altered: the stdout of kept/0 attempt 1 was altered"), "{}", stdout.stderr);
    assert!(stdout.stderr.contains("its engine stored 6 bytes") && stdout.stderr.contains("the store holds 14 bytes"), "{}", stdout.stderr);
    let stderr = run(&cluster, &["output", "kept/0", "--stderr"]);
    assert_eq!(stderr.code, Some(1), "{}", stderr.stderr);
    assert!(stderr.stdout.is_empty(), "{:?}", stderr.text());
    assert!(stderr.stderr.contains("the stderr of kept/0 attempt 1 was altered"), "{}", stderr.stderr);
    assert!(stderr.stderr.contains(&blake3::hash(b"ERR-0\n").to_hex().to_string()), "the forgery's hash: {}", stderr.stderr);

    let untouched = run(&cluster, &["output", "kept/1"]);
    assert_eq!((untouched.code, untouched.text().as_str()), (Some(0), "out-1\n"), "{}", untouched.stderr);
    let reply: TaskReply = serde_json::from_slice(&run(&cluster, &["task", "kept/0", "--json"]).stdout).unwrap();
    assert_eq!(reply.attempts[0].output_altered.len(), 2, "{reply:?}");
    let text = run(&cluster, &["task", "kept/0"]).text();
    assert!(text.contains("ALTERED: the stdout of kept/0 attempt 1 was altered"), "{text}");
    let fine: TaskReply = serde_json::from_slice(&run(&cluster, &["task", "kept/1", "--json"]).stdout).unwrap();
    assert!(fine.attempts[0].output_altered.is_empty(), "{fine:?}");
}

/// The policy's `[output]` bounds: a third of a 3,000-byte job budget per task
/// (500 bytes of each stream), the 1,000-byte task bound, and a budget spent.
const BOUNDED_POLICY: &str = "\
engine_timeout_secs = 10
dispatch_timeout_secs = 30

[output]
task_bytes_max = 1000
job_bytes_max = 3000
work_dir_retention_secs = 1
";

#[test]
fn output_is_cut_at_the_policys_share_a_spent_job_budget_stores_nothing_and_work_dirs_go_after_the_policys_retention() {
    let mut cluster = Cluster::start(BOUNDED_POLICY);
    cluster.projector();
    let (w1, w2) = (cluster.path("w1"), cluster.path("w2"));
    cluster.engine("engine-1", "e1", 2, &w1);
    cluster.engine("engine-2", "e2", 2, &w2);
    cluster.wait_logged_in(&["e1", "e2"]);

    // Three tasks share the job's 3,000 bytes: 500 of each stream each, whatever the batch.
    submit(&cluster, "cut", 3, 1, "head -c 5000 /dev/zero | tr '\\0' x");
    let waited = run(&cluster, &["wait", "cut", "--timeout-secs", "90"]);
    assert_eq!(waited.code, Some(0), "{}\n{}", waited.text(), waited.stderr);
    for index in 0..3 {
        let output = run(&cluster, &["output", &format!("cut/{index}")]);
        assert_eq!(output.code, Some(0), "{}", output.stderr);
        assert_eq!(output.stdout, vec![b'x'; 500], "cut/{index}: {} bytes", output.stdout.len());
        assert!(output.stderr.contains("was cut at its bound: 500 bytes stored"), "{}", output.stderr);
    }

    // One task failing three times: the task bound (1,000), then what the job has
    // left (500), then nothing: the job never stores more than its budget.
    submit(&cluster, "spent", 1, 3, "head -c 5000 /dev/zero | tr '\\0' y; exit 4");
    let waited = run(&cluster, &["wait", "spent", "--timeout-secs", "90"]);
    assert_eq!(waited.code, Some(1), "{}\n{}", waited.text(), waited.stderr);
    let task = run(&cluster, &["task", "spent/0", "--json"]);
    assert_eq!(task.code, Some(0), "{}", task.stderr);
    let reply: TaskReply = serde_json::from_slice(&task.stdout).expect("task --json decodes");
    let bounds: Vec<u64> = reply.attempts.iter().map(|a| a.output_bytes_max).collect();
    let stored: Vec<Option<u64>> = reply.attempts.iter().map(|a| a.stdout_stored_bytes).collect();
    assert_eq!(bounds, [1000, 500, 0]);
    assert_eq!(stored, [Some(1000), Some(500), None]);
    let text = run(&cluster, &["task", "spent/0"]).text();
    assert!(text.contains("output bound: 1000 bytes of stdout") && text.contains("output bound: 0 bytes"), "{text}");
    let none = run(&cluster, &["output", "spent/0", "--attempt", "3"]);
    assert_eq!(none.code, Some(1), "{}", none.stderr);
    assert!(none.stderr.contains("output bound was 0"), "{}", none.stderr);

    // Every ended attempt's directory goes after the policy's one second.
    cluster.wait_for("the engines remove the ended attempts' directories", Duration::from_secs(30), |_| {
        let left: Vec<String> = [&w1, &w2]
            .iter()
            .flat_map(|w| std::fs::read_dir(w).into_iter().flatten().flatten())
            .map(|entry| entry.file_name().to_string_lossy().into_owned())
            .filter(|name| name == "cut" || name == "spent")
            .collect();
        if left.is_empty() { Ok(()) } else { Err(format!("still there: {left:?}")) }
    });
}

/// The answers a person gets from `stat` with 20,000 jobs held (over 1 MiB of
/// them, the broker's payload limit): a page and how many more, in the text and
/// in `--json`, and pages that list every job once; and an answer with no pages
/// that is too large comes back as an error, never silence.
#[test]
fn stat_at_20000_jobs_answers_a_page_says_how_many_more_and_its_pages_cover_every_job_and_a_usage_too_large_is_an_error() {
    const JOBS: u32 = 20_000;
    let mut cluster = Cluster::start(POLICY);
    let state_dir = cluster.path("projector");
    cluster.register_projector_key(&state_dir);
    let (url, state) = (cluster.url(), state_dir.display().to_string());
    // Without --check-invariants: checking 20,000 jobs after every entry is not what this test is about.
    let projector = cluster.spawn("projector", &["projector", "--nats", &url, "--state", &state]);

    // Submitted as outside publishers do, many in flight at once; no engine: they wait.
    let ids: Vec<String> = (0..JOBS).map(|n| format!("bulk-{n:05}")).collect();
    let appends = ids
        .iter()
        .map(|id| {
            let mut spec = gridfold::core::testkit::job_spec(id, 1, "");
            spec.owner = format!("owner-of-{id}-with-a-long-name");
            let id = uuid::Uuid::new_v4();
            let envelope = Envelope { id: *id.as_bytes(), source: "results-test".into(), event: Event::JobSubmitted(spec) };
            Append::new(wire::default_subject(&envelope.event), wire::encode(&envelope)).with_msg_id(id.to_string())
        })
        .collect();
    cluster.append_batch(appends);
    let stat_json = |cluster: &Cluster, args: &[&str]| -> StateSummary {
        let ran = run(cluster, &[&["stat", "--json"][..], args].concat());
        assert_eq!(ran.code, Some(0), "stat {args:?}: {}", ran.stderr);
        serde_json::from_slice(&ran.stdout).unwrap_or_else(|err| panic!("stat {args:?} --json: {err}"))
    };
    cluster.wait_for("the projector to hold every job", Duration::from_secs(120), |cluster| {
        let counts = stat_json(cluster, &["--limit", "0"]);
        if counts.jobs_total == u64::from(JOBS) { Ok(()) } else { Err(format!("{} jobs held", counts.jobs_total)) }
    });

    // The text: the first 200 (stat's --limit) and how many more, and how to see them.
    let ran = run(&cluster, &["stat"]);
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let text = ran.text();
    assert_eq!(text.lines().filter(|line| line.starts_with("bulk-")).count(), 200, "{text}");
    assert!(text.contains("... 19800 more job(s) not shown (20000 in all): gridfold stat --from 200, or --all"), "{text}");

    // The same in --json.
    let first = stat_json(&cluster, &[]);
    assert_eq!((first.jobs.len(), first.jobs_total, first.jobs_more, first.next_from), (200, 20_000, 19_800, Some(200)));

    // A walk of pages of 5,000 (each several answers of the projector's) lists every job once, in order.
    let mut walked = Vec::new();
    let mut from = 0;
    loop {
        let page = stat_json(&cluster, &["--from", &from.to_string(), "--limit", "5000"]);
        walked.extend(page.jobs.into_iter().map(|job| job.id));
        assert_eq!(page.jobs_more, u64::from(JOBS) - walked.len() as u64);
        match page.next_from {
            Some(next) => from = next,
            None => break,
        }
    }
    assert_eq!(walked, ids, "every job once, in the order held");
    let all = stat_json(&cluster, &["--all"]);
    assert_eq!((all.jobs.len(), all.jobs_more, all.next_from), (20_000, 0, None));
    assert!(all.jobs.iter().map(|job| job.id.as_str()).eq(ids.iter().map(String::as_str)));

    // An answer that has no pages and is too large for one message: every job
    // cancelled, `usage` adds up 20,000 owners (over 3 MiB). It is an error, said
    // by the command (exit 1) and in the projector's log, not silence.
    let cancels = ids
        .iter()
        .map(|id| {
            let event = Event::JobCancelled { job: JobId::new(id).expect("a job id"), reason: "test".into() };
            let id = uuid::Uuid::new_v4();
            let envelope = Envelope { id: *id.as_bytes(), source: "results-test".into(), event };
            Append::new(wire::default_subject(&envelope.event), wire::encode(&envelope)).with_msg_id(id.to_string())
        })
        .collect();
    cluster.append_batch(cancels);
    cluster.wait_for("every job cancelled", Duration::from_secs(120), |cluster| {
        let counts = stat_json(cluster, &["--limit", "0"]);
        if counts.jobs_active == 0 { Ok(()) } else { Err(format!("{} jobs active", counts.jobs_active)) }
    });
    let usage = run(&cluster, &["usage"]);
    assert_eq!(usage.code, Some(1), "{}\n{}", usage.text(), usage.stderr);
    assert!(
        usage.stderr.contains("the projector answered on gridfold.q.usage with an error: the projector's answer on gridfold.q.usage is ")
            && usage.stderr.contains("more than the broker takes in one message (1048576 bytes)")
            && !usage.stderr.contains("no projector answered"),
        "{}",
        usage.stderr
    );
    let warned = cluster.proc(projector).stderr();
    assert!(warned.contains("an answer is larger than the broker takes in one message"), "{warned}");
}
