//! Engines and their login epochs, with real `gridfold` processes, real task
//! processes and a real nats-server (one per test; a test FAILS, never skips,
//! without one). Each test reads the whole log back and folds it to check what
//! happened, and each task appends a line to a record file when it runs, so what
//! ran is known from the processes themselves, not only from what engines said.
//!
//! - [`a_frozen_engine_declared_lost_handles_the_loss_before_runs_decided_before_it`]
//! - [`a_second_process_under_one_name_fences_out_the_first`]
//! - [`an_engine_killed_and_restarted_has_its_held_attempt_requeued_with_its_reason`]
//!
//! The policy declares an engine silent for 3 s lost; engines heartbeat every second.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use gridfold::core::event::Order;
use gridfold::core::ids::{Attempt, EngineId, TaskRef};
use support::folded_log::Log;
use support::procs::Cluster;

const POLICY: &str = "\
engine_timeout_secs = 3
dispatch_timeout_secs = 30
";

/// The longest any one wait takes.
const WAIT: Duration = Duration::from_secs(40);

fn engine_id(name: &str) -> EngineId {
    EngineId::new(name).unwrap()
}

/// Every task of job `job` (`tasks` of them) has exactly one accepted completion.
fn job_done_once(log: &Log, job: &str, tasks: u32) -> Result<(), String> {
    let completions = log.completions();
    for index in 0..tasks {
        let task = TaskRef::new(gridfold::core::ids::JobId::new(job).unwrap(), index);
        match completions.get(&task).map(Vec::len) {
            Some(1) => {}
            Some(n) => return Err(format!("{task} completed {n} times")),
            None => return Err(format!("{task} not completed yet")),
        }
    }
    Ok(())
}

/// The lines the tasks appended to `path`, each split on whitespace.
fn records(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| line.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Alive and not a zombie, from `/proc`.
fn is_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().next() != Some("Z")))
        .unwrap_or(false)
}

// ---- tests ----------------------------------------------------------------------------

/// The report: an engine frozen (SIGSTOP) past `engine_timeout` and resumed started two
/// run orders that had meanwhile been given to other engines, before it handled its
/// `EngineLost`. Here e1 is frozen before a job is submitted, so the runs the projector
/// gives it wait in its feed, followed by the `Lost`; its tasks go to e2; then it resumes.
#[test]
fn a_frozen_engine_declared_lost_handles_the_loss_before_runs_decided_before_it() {
    const TASKS: u32 = 4;
    let started = Instant::now();
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    let e1 = cluster.engine("e1", "e1", 2, &cluster.path("work-e1"));
    cluster.engine("e2", "e2", 2, &cluster.path("work-e2"));
    cluster.wait_logged_in(&["e1", "e2"]);
    let record = cluster.path("executions");

    cluster.proc(e1).signal(libc::SIGSTOP);
    let script = format!(
        "echo \"$GRIDFOLD_ENGINE $GRIDFOLD_TASK_ID $GRIDFOLD_ATTEMPT\" >> '{}'; sleep 2",
        record.display()
    );
    cluster.submit_script("frozen", TASKS, &script);

    // The projector gives e1 some of the tasks while it is frozen, declares it lost
    // 3 s after its last heartbeat, and gives those tasks to e2.
    let (first_epoch, given_before_loss) = cluster.wait_for("e1's tasks to go to e2", WAIT, |cluster| {
        let log = Log::of(cluster);
        let epoch = *log.logins("e1").first().ok_or("no login of e1")?;
        let given = log.dispatched("e1", epoch);
        if given.is_empty() {
            return Err("nothing dispatched to e1 yet".into());
        }
        let lost = log.orders().any(|(_, o)| matches!(o, Order::EngineLost { engine, .. } if engine.as_str() == "e1"));
        let moved = given.iter().all(|(task, attempt)| log.dispatched_again(task, *attempt).contains(&engine_id("e2")));
        if lost && moved { Ok((epoch, given)) } else { Err(format!("lost {lost}, moved {moved}: {given:?}")) }
    });
    cluster.proc(e1).signal(libc::SIGCONT);

    cluster.wait_for("e1 to log in again and the job to be done", WAIT, |cluster| {
        let log = Log::of(cluster);
        if log.logins("e1").len() < 2 {
            return Err("e1 has not logged in again".into());
        }
        job_done_once(&log, "frozen", TASKS)
    });
    // e1 goes on reading after its new login: give it a moment to have read (and
    // skipped) everything its old epoch was sent.
    std::thread::sleep(Duration::from_secs(2));
    let log = Log::of(&cluster);

    let started_by_e1 = log.started_by("e1");
    for (task, attempt) in &given_before_loss {
        assert!(
            !started_by_e1.contains(&(task.clone(), *attempt)),
            "e1 reported starting {task} #{attempt}, given to it before its loss:\n{}",
            log.dump()
        );
        let ran_on_e1 = records(&record)
            .iter()
            .any(|r| r[0] == "e1" && r[1] == task.to_string() && r[2] == attempt.to_string());
        assert!(!ran_on_e1, "{task} #{attempt} ran on e1 after its loss: {:?}", records(&record));
    }
    let logins = log.logins("e1");
    assert!(logins[1] > first_epoch, "{logins:?}");
    let stderr = cluster.proc(e1).stderr();
    assert!(stderr.contains("reading its orders to the end before acting on any"), "{stderr}");
    assert!(
        stderr.contains("the projector declared this epoch lost while the engine stalled"),
        "{stderr}"
    );
    assert!(cluster.proc(e1).poll_exit().is_none(), "e1 runs on: {stderr}");
    eprintln!("took {:?}", started.elapsed());
}

/// Two live engines never share a name: B logs in under A's name while A runs tasks;
/// A stops (non-zero, saying why) within a few heartbeats and kills its tasks, its
/// attempts are requeued as `EngineRestarted`, and B runs the job.
#[test]
fn a_second_process_under_one_name_fences_out_the_first() {
    const TASKS: u32 = 2;
    let started = Instant::now();
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    let a = cluster.engine("e1-a", "e1", 2, &cluster.path("work-a"));
    cluster.wait_logged_in(&["e1"]);
    let record = cluster.path("executions");
    let script = format!("echo \"$GRIDFOLD_WORKDIR $GRIDFOLD_ATTEMPT $$\" >> '{}'; sleep 4", record.display());
    cluster.submit_script("fence", TASKS, &script);
    let held_by_a = cluster.wait_for("A to start both tasks", WAIT, |cluster| {
        let held = Log::of(cluster).started_by("e1");
        if held.len() == TASKS as usize { Ok(held) } else { Err(format!("{held:?}")) }
    });

    let b = cluster.engine("e1-b", "e1", 2, &cluster.path("work-b"));
    let (a_login, b_login) = cluster.wait_for("B's login", WAIT, |cluster| match Log::of(cluster).logins("e1")[..] {
        [a, b] => Ok((a, b)),
        ref logins => Err(format!("{logins:?}")),
    });
    let status = cluster.wait_for("A to stop", Duration::from_secs(10), |cluster| {
        cluster.proc(a).poll_exit().ok_or_else(|| "A runs on".to_string())
    });
    let stderr = cluster.proc(a).stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    let says = format!(
        "engine e1 is fenced out: another process logged in under its name at log sequence {b_login}, \
         after this one's login at {a_login}"
    );
    assert!(stderr.contains(&says), "A says why it stopped:\n{stderr}");

    // A's tasks died with it.
    let a_pids: Vec<i32> = records(&record)
        .iter()
        .filter(|r| r[0].contains("/work-a/"))
        .map(|r| r[2].parse().unwrap())
        .collect();
    assert_eq!(a_pids.len(), TASKS as usize, "{:?}", records(&record));
    cluster.wait_for("A's tasks to die", Duration::from_secs(5), |_| {
        let alive: Vec<&i32> = a_pids.iter().filter(|pid| is_alive(**pid)).collect();
        if alive.is_empty() { Ok(()) } else { Err(format!("alive: {alive:?}")) }
    });

    let log = cluster.wait_for("B to run the job", WAIT, |cluster| {
        let log = Log::of(cluster);
        job_done_once(&log, "fence", TASKS)?;
        Ok(log)
    });
    let requeued: BTreeSet<(TaskRef, Attempt)> = log
        .restarted_requeues()
        .into_iter()
        .filter(|(seq, _, _, engine)| *seq > b_login && engine.as_str() == "e1")
        .map(|(_, task, attempt, _)| (task, attempt))
        .collect();
    assert_eq!(requeued, held_by_a, "A's attempts are requeued as EngineRestarted:\n{}", log.dump());
    let by_b: Vec<String> = records(&record)
        .iter()
        .filter(|r| r[0].contains("/work-b/"))
        .map(|r| r[0].clone())
        .collect();
    // On a failure, what B said and the log: a run B started twice is told by both.
    assert_eq!(
        by_b.len(),
        TASKS as usize,
        "B ran each task once: {:?}\nB's stderr:\n{}\nthe log:\n{}",
        records(&record),
        cluster.proc(b).stderr(),
        log.dump()
    );
    let b_stderr = cluster.proc(b).stderr();
    assert!(cluster.proc(b).poll_exit().is_none() && !b_stderr.contains("fenced"), "{b_stderr}");
    eprintln!("took {:?}", started.elapsed());
}

/// kill -9 mid-task and a restart under the same name and work directory: the attempt
/// the killed process held is requeued by an `EngineRestarted` order on the log, so
/// its re-execution has its reason there, and the task completes once.
#[test]
fn an_engine_killed_and_restarted_has_its_held_attempt_requeued_with_its_reason() {
    let started = Instant::now();
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    let work = cluster.path("work-e1");
    let first = cluster.engine("e1", "e1", 1, &work);
    cluster.wait_logged_in(&["e1"]);
    let record = cluster.path("executions");
    let script = format!("echo \"$GRIDFOLD_ATTEMPT $$\" >> '{}'; sleep 2", record.display());
    cluster.submit_script("restart", 1, &script);
    let held = cluster.wait_for("e1 to start the task", WAIT, |cluster| {
        Log::of(cluster).started_by("e1").into_iter().next().ok_or_else(|| "not yet".to_string())
    });

    cluster.proc(first).kill9();
    cluster.engine("e1-again", "e1", 1, &work);
    let log = cluster.wait_for("the task to complete", WAIT, |cluster| {
        let log = Log::of(cluster);
        job_done_once(&log, "restart", 1)?;
        Ok(log)
    });

    let logins = log.logins("e1");
    assert_eq!(logins.len(), 2, "{logins:?}");
    let requeues: Vec<_> = log
        .restarted_requeues()
        .into_iter()
        .filter(|(_, task, attempt, engine)| (task, *attempt) == (&held.0, held.1) && engine.as_str() == "e1")
        .collect();
    let [(requeue_seq, ..)] = requeues[..] else {
        panic!("one EngineRestarted requeue of {held:?}, not {requeues:?}:\n{}", log.dump())
    };
    assert!(requeue_seq > logins[1], "the requeue follows the new login:\n{}", log.dump());
    let again: Vec<(u64, Attempt)> = log
        .orders()
        .filter_map(|(seq, order)| match order {
            Order::Dispatch { task, attempt, .. } if *task == held.0 && *attempt > held.1 => Some((seq, *attempt)),
            _ => None,
        })
        .collect();
    let [(dispatch_seq, next_attempt)] = again[..] else { panic!("one re-dispatch, not {again:?}:\n{}", log.dump()) };
    assert!(requeue_seq <= dispatch_seq, "the requeue comes before the re-execution:\n{}", log.dump());
    assert_eq!(log.completions()[&held.0], vec![next_attempt], "{}", log.dump());
    let runs: Vec<String> = records(&record).iter().map(|r| r[0].clone()).collect();
    assert_eq!(
        runs.iter().filter(|attempt| **attempt == next_attempt.to_string()).count(),
        1,
        "the re-execution ran once: {runs:?}"
    );
    eprintln!("took {:?}", started.elapsed());
}
