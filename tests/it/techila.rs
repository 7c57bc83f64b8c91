//! Techila's scheduler on a real grid: a real nats-server, a real `gridfold
//! projector` and two real `gridfold engine` processes running real task
//! processes, under `algorithm = "techila"`.
//!
//! - The license cap holds: with `max_running_tasks = 2` on two engines of two
//!   slots each, never more than two tasks are dispatched or running at once at
//!   any point of the log, and `why` names the cap for a task kept waiting by it.
//! - A Lowest project's tasks give way to a Normal project's: each preempted
//!   task's process (its shell wrote its pid to a file) is really killed on its
//!   engine, and the task runs again later and completes on the attempt it had.

use crate::support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use gridfold::core::event::{Event, Order};
use gridfold::core::fold::fold;
use gridfold::core::state::State;
use support::procs::{Cluster, event};

const POLICY: &str = "algorithm = \"techila\"\nengine_timeout_secs = 5\ndispatch_timeout_secs = 10\nseed = 12\n\n\
                      [techila]\nmax_running_tasks = 2\n";

fn stat(cluster: &Cluster) -> serde_json::Value {
    let stdout = cluster.command(&["stat".as_ref(), "--json".as_ref()]);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("stat --json: {e}: {stdout}"))
}

fn job_field(cluster: &Cluster, id: &str, field: &str) -> Result<u64, String> {
    let stat = stat(cluster);
    let job = stat["jobs"].as_array().into_iter().flatten().find(|job| job["id"] == id).ok_or_else(|| format!("no job {id}: {stat}"))?;
    job[field].as_u64().ok_or_else(|| format!("no {field} in {job}"))
}

/// A job of `tasks` tasks of project priority `priority` owned by `owner`, each running `sh -c script`.
fn submit(cluster: &Cluster, id: &str, owner: &str, priority: u32, tasks: u32, script: &str) {
    let text = format!(
        "id = \"{id}\"\nowner = \"{owner}\"\ntasks = {tasks}\nproject_priority = {priority}\nmax_attempts = 1\n\n\
         [task]\nargv = [\"sh\", \"-c\", {script:?}]\n"
    );
    let file = cluster.write(&format!("{id}.toml"), &text);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
}

/// The pids a task's runs wrote, oldest first.
fn pids(dir: &Path, index: u32) -> Vec<i32> {
    std::fs::read_to_string(dir.join(format!("low-{index}.pids")))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}

fn alive(pid: i32) -> bool {
    // SAFETY: kill(2) with signal 0 sends nothing; it only asks whether the pid exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

#[test]
fn under_a_license_of_2_never_more_than_2_tasks_run_and_a_preempted_lowest_task_is_killed_and_completes_later() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    for name in ["e1", "e2"] {
        let work = cluster.path(&format!("{name}-work"));
        let url = cluster.url();
        let work = work.display().to_string();
        let args = [
            "engine", "--nats", &url, "--name", name, "--slots", "2", "--work-dir", &work, "--prop", "mflops=1000",
            "--heartbeat-secs", "1", "--drain-timeout-secs", "2",
        ];
        cluster.spawn(&format!("engine-{name}"), &args);
    }
    cluster.wait_logged_in(&["e1", "e2"]);

    // Ann's Lowest project: each run appends its shell's pid to a file, then
    // waits for the test's `go` file.
    let dir = cluster.path("pids");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let low = format!("echo $$ >> {d}/low-{{index}}.pids; while [ ! -e {d}/go ]; do sleep 0.1; done");
    submit(&cluster, "low", "ann", 7, 3, &low);
    cluster.wait_for("two of low's tasks to run", Duration::from_secs(20), |cluster| {
        match job_field(cluster, "low", "running")? {
            2 => Ok(()),
            n => Err(format!("{n} running")),
        }
    });
    cluster.wait_for("their pids", Duration::from_secs(10), |_| {
        let n = (0..3).map(|i| pids(&dir, i).len()).sum::<usize>();
        if n == 2 { Ok(()) } else { Err(format!("{n} pids")) }
    });
    // The third waits for the license, and why says so.
    let why = cluster.command(&["why".as_ref(), "low/2".as_ref()]);
    assert!(why.contains("license cap reached (2/2 tasks running)"), "{why}");

    // Bob's Normal project wants capacity: no core is free within the license,
    // so both running Lowest tasks are preempted, killed on their engines.
    submit(&cluster, "normal", "bob", 4, 2, "sleep 1");
    cluster.wait_for("normal to be done", Duration::from_secs(20), |cluster| match job_field(cluster, "normal", "done")? {
        2 => Ok(()),
        n => Err(format!("{n} done")),
    });
    let entries = cluster.entries();
    let preempted: BTreeSet<u32> = entries
        .iter()
        .filter_map(|entry| match event(entry) {
            Some(Event::OrderBatch(batch)) => Some(batch.orders.clone()),
            _ => None,
        })
        .flatten()
        .filter_map(|order| match order {
            Order::Preempt { task, .. } if task.job.as_str() == "low" => Some(task.index),
            _ => None,
        })
        .collect();
    assert_eq!(preempted.len(), 2, "both running Lowest tasks gave way: {preempted:?}");
    for &index in &preempted {
        let first = pids(&dir, index)[0];
        cluster.wait_for(&format!("low/{index}'s process {first} to be killed"), Duration::from_secs(10), |_| {
            if alive(first) { Err("alive".into()) } else { Ok(()) }
        });
    }

    // Let Ann's tasks finish: every one completes, the preempted ones on a
    // second run of the same attempt (max_attempts = 1: no attempt was used).
    std::fs::write(dir.join("go"), "").unwrap();
    cluster.wait_for("low to be done", Duration::from_secs(20), |cluster| match job_field(cluster, "low", "done")? {
        3 => Ok(()),
        n => Err(format!("{n} done")),
    });
    assert_eq!(job_field(&cluster, "low", "failed").unwrap(), 0);
    for &index in &preempted {
        assert_eq!(pids(&dir, index).len(), 2, "low/{index} ran twice: killed, then to its end");
    }

    // The license held at every point of the log: fold it and count the tasks
    // dispatched or running after each entry.
    let entries = cluster.stored_entries();
    let mut state = State::new();
    let mut most = 0;
    for entry in &entries {
        fold(&mut state, entry);
        most = most.max(state.engines().iter().map(|engine| engine.used).sum::<u32>());
    }
    assert_eq!(most, 2, "never more than the license's 2 tasks at once");
    // Event by event: an engine's start and end of a short task may share one message.
    let completed: Vec<u32> = cluster
        .entries()
        .iter()
        .filter_map(|entry| match event(entry) {
            Some(Event::TaskCompleted { task, attempt, .. }) if task.job.as_str() == "low" => Some(*attempt),
            _ => None,
        })
        .collect();
    assert_eq!(completed, [1, 1, 1], "each Lowest task completed on its first attempt");
}

/// The order in which the log dispatched tasks (`job/index`), first attempts and retries alike.
fn dispatched(cluster: &Cluster) -> Vec<String> {
    cluster
        .entries()
        .iter()
        .filter_map(|entry| match event(entry) {
            Some(Event::OrderBatch(batch)) => Some(batch.orders.clone()),
            _ => None,
        })
        .flatten()
        .filter_map(|order| match order {
            Order::Dispatch { task, .. } => Some(task.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn project_priority_raises_a_running_projects_priority_so_its_tasks_go_next_and_refuses_0_8_and_an_unknown_job() {
    let mut cluster = Cluster::start("algorithm = \"techila\"\nengine_timeout_secs = 5\ndispatch_timeout_secs = 10\nseed = 5\n");
    cluster.projector();
    let work = cluster.path("e1-work");
    cluster.engine("engine-e1", "e1", 1, &work);
    cluster.wait_logged_in(&["e1"]);
    // Ann's two projects of equal priority on one core: `first` (created
    // first) goes first; its tasks wait for the test's `go` file.
    let dir = cluster.path("gate");
    std::fs::create_dir_all(&dir).unwrap();
    let gate = format!("while [ ! -e {}/go ]; do sleep 0.1; done", dir.display());
    submit(&cluster, "first", "ann", 4, 2, &gate);
    submit(&cluster, "second", "ann", 4, 2, "true");
    cluster.wait_for("first/0 to run", Duration::from_secs(20), |cluster| match job_field(cluster, "first", "running")? {
        1 => Ok(()),
        n => Err(format!("{n} running")),
    });
    let why = cluster.command(&["why".as_ref(), "second/0".as_ref()]);
    assert!(why.contains("waiting behind the user's higher-priority project first (project priority 4)"), "{why}");

    // Raise `second` to Highest: applied, and `why` of first's waiting task now names it.
    let said = cluster.command(&["project-priority".as_ref(), "second".as_ref(), "1".as_ref()]);
    assert!(said.contains("project priority 1 of second applied at seq"), "{said}");
    let why = cluster.command(&["why".as_ref(), "first/1".as_ref()]);
    assert!(why.contains("waiting behind the user's higher-priority project second (project priority 1)"), "{why}");
    let changed = cluster.entries().iter().any(|entry| {
        matches!(event(entry), Some(Event::ProjectPriorityChanged { job, priority: 1 }) if job.as_str() == "second")
    });
    assert!(changed, "the change is on the log");

    // Bad values are refused with a clear message and a non-zero exit; nothing is published.
    for bad in ["0", "8"] {
        let err = cluster.try_command(&["project-priority".as_ref(), "second".as_ref(), bad.as_ref()]).unwrap_err();
        assert!(err.contains(&format!("project priority {bad}: it must be 1 (Highest) to 7 (Lowest)")), "{err}");
        assert!(err.contains("exit status: 2"), "{err}");
    }
    let err = cluster.try_command(&["project-priority".as_ref(), "nope".as_ref(), "2".as_ref()]).unwrap_err();
    assert!(err.contains("exit status: 1") && err.contains("nope"), "{err}");
    let n_changes = cluster
        .entries()
        .iter()
        .filter(|entry| matches!(event(entry), Some(Event::ProjectPriorityChanged { .. })))
        .count();
    assert_eq!(n_changes, 2, "0 and 8 were never published; the unknown job's change was, and refused");

    // The core freed by first/0 goes to `second`'s tasks before first/1.
    std::fs::write(dir.join("go"), "").unwrap();
    cluster.wait_for("both projects to be done", Duration::from_secs(30), |cluster| {
        match (job_field(cluster, "first", "done")?, job_field(cluster, "second", "done")?) {
            (2, 2) => Ok(()),
            (a, b) => Err(format!("first {a} done, second {b} done")),
        }
    });
    assert_eq!(dispatched(&cluster), ["first/0", "second/0", "second/1", "first/1"]);
}
