//! FBSNG's scheduler on a real grid: a real nats-server, a real `gridfold
//! projector` and a real `gridfold engine`, under `algorithm = "fbsng"` set by
//! `gridfold policy apply` (through `Cluster::start`).
//!
//! - Jobs submitted to the policy's two queues both run to the end, and
//!   `gridfold stat --json` shows each queue's priority, moved by the starts.
//! - A job naming a queue the policy does not define is refused before it is
//!   published: `gridfold submit` reads the policy in force from the projector,
//!   names the file, the line of its `queue` key and the known queues, and
//!   exits 2; likewise an unknown process type. Published while no projector
//!   answers (the policy cannot be read), it is refused by the fold instead.
//! - `gridfold stat` (plain and `--json`) shows each queue's priority and each
//!   waiting section's priority.

use crate::support;

use std::time::Duration;

use support::procs::Cluster;

const POLICY: &str = "algorithm = \"fbsng\"\nengine_timeout_secs = 5\ndispatch_timeout_secs = 10\n\n\
                      [fbsng]\nmin_run_interval_secs = 1\n\n\
                      [[fbsng.queues]]\nname = \"high\"\nqp_min = 5\nqpg = 7\nqpi = 3\n\n\
                      [[fbsng.queues]]\nname = \"background\"\nqpg = 100\n";

fn stat(cluster: &Cluster) -> Result<serde_json::Value, String> {
    let stdout = cluster.try_command(&["stat".as_ref(), "--json".as_ref()])?;
    serde_json::from_str(stdout.trim()).map_err(|e| format!("stat --json: {e}: {stdout}"))
}

fn job_file(id: &str, queue: &str, tasks: u32) -> String {
    format!("id = \"{id}\"\nowner = \"tester\"\nqueue = \"{queue}\"\ntasks = {tasks}\n\n[task]\nargv = [\"sh\", \"-c\", \"sleep 0.2\"]\n")
}

#[test]
fn jobs_of_two_queues_run_moving_the_queue_priorities_and_an_unknown_queue_is_refused_with_exit_2_naming_the_known_ones() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    let work = cluster.path("e1-work");
    cluster.engine("engine-e1", "e1", 2, &work);
    cluster.wait_logged_in(&["e1"]);
    let priorities = |stat: &serde_json::Value| -> Vec<(String, i64)> {
        let queues = stat["fbsng_queues"].as_array().cloned().unwrap_or_default();
        queues.iter().map(|queue| (queue["name"].as_str().unwrap_or("?").to_string(), queue["priority"].as_i64().unwrap_or(-1))).collect()
    };
    let at_start = priorities(&stat(&cluster).expect("stat answers"));
    assert_eq!(at_start, [("high".to_string(), 5), ("background".to_string(), 0)], "each queue starts at its qp_min");

    for (id, queue, tasks) in [("bg", "background", 6), ("hi", "high", 4)] {
        let file = cluster.write(&format!("{id}.toml"), &job_file(id, queue, tasks));
        cluster.command(&["submit".as_ref(), file.as_os_str()]);
    }
    let bad = cluster.write("nowhere.toml", &job_file("lost", "nowhere", 1));
    let refused = cluster.try_command(&["submit".as_ref(), bad.as_os_str()]).expect_err("an unknown queue is refused");
    assert!(refused.contains("exit status: 2"), "{refused}");
    let at_line = format!("{}:3: unknown queue \"nowhere\"; known: high, background", bad.display());
    assert!(refused.contains(&at_line), "{refused}");
    assert!(refused.contains("not published"), "{refused}");
    let kind = cluster.write("kind.toml", &format!("process_type = \"cmss\"\n{}", job_file("typo", "high", 1)));
    let refused = cluster.try_command(&["submit".as_ref(), kind.as_os_str()]).expect_err("an unknown process type is refused");
    assert!(refused.contains("exit status: 2"), "{refused}");
    assert!(refused.contains("unknown process type \"cmss\"; known: none"), "{refused}");

    let done = cluster.wait_for("both jobs done", Duration::from_secs(60), |cluster| {
        let stat = stat(cluster)?;
        let jobs = stat["jobs"].as_array().cloned().unwrap_or_default();
        let done = |id: &str| jobs.iter().any(|job| job["id"] == id && job["status"] == "done");
        if jobs.iter().any(|job| job["id"] == "lost" || job["id"] == "typo") {
            return Err(format!("the refused job is held: {stat}"));
        }
        if done("bg") && done("hi") { Ok(stat) } else { Err(stat.to_string()) }
    });
    // Each start: every queue gains its qpi, the starting queue loses its qpd,
    // and all shift down until the one furthest behind stands at its qp_min.
    // High's 4 starts put it 2 - 1 = 1 further ahead each, background's 6
    // put it 3 - 0 = 3 further ahead each, whatever their order: 5 + 4 + 18.
    assert_eq!(priorities(&done), [("high".to_string(), 27), ("background".to_string(), 0)], "{done}");
    for queue in done["fbsng_queues"].as_array().cloned().unwrap_or_default() {
        assert_eq!(queue["waiting_sections"], 0, "{queue}");
    }
    assert_eq!(done["dispatches"], 10, "{done}");
    let plain = cluster.command(&["stat".as_ref()]);
    assert!(plain.contains("FBSNG QUEUE") && plain.contains("high") && plain.contains("background"), "{plain}");
}

#[test]
fn a_job_of_an_unknown_queue_submitted_while_no_projector_answers_is_published_and_refused_by_the_fold() {
    let mut cluster = Cluster::start(POLICY);
    let early = cluster.write("early.toml", &job_file("early", "nowhere", 1));
    // No projector: the policy cannot be read, so the job is published as it is.
    cluster.command(&["submit".as_ref(), early.as_os_str(), "--wait-secs".as_ref(), "1".as_ref()]);
    cluster.projector();
    let reason = "unknown queue \"nowhere\"; known: high, background";
    cluster.wait_for("the fold's refusal", Duration::from_secs(30), |cluster| {
        let said = cluster.try_command(&["rejections".as_ref(), "--json".as_ref()])?;
        let reply: serde_json::Value = serde_json::from_str(said.trim()).map_err(|e| format!("rejections --json: {e}: {said}"))?;
        let reasons = reply["rejections"].as_array().cloned().unwrap_or_default();
        let refused = reasons.iter().any(|r| r["reason"].as_str().is_some_and(|said| said.contains(reason)));
        if refused { Ok(()) } else { Err(said) }
    });
    let stat = stat(&cluster).unwrap_or_else(|e| cluster.fail(&e));
    let jobs = stat["jobs"].as_array().cloned().unwrap_or_default();
    assert!(jobs.iter().all(|job| job["id"] != "early"), "{stat}");
}
