//! Resource reservation through the command line on a real nats-server
//! (issue 10, item 4): a policy applied with `gridfold policy apply` sets
//! `max_reservation = 1`; two real engines of 2 slots on one site run a
//! stream of 1-slot tasks; a higher-priority `reserve = true` task needing
//! all 4 slots at once (`span = "site"`) reserves them as they free, so the
//! small tasks stop taking the freed slots, and it starts and completes while
//! the small ones are still queued; `gridfold why` on it while it waits names
//! its reservation (the slots and engines, and when it is expected to start).
//! No timing is asserted beyond generous bounds.

use crate::support;

use std::time::{Duration, Instant};

use gridfold::core::event::Event;
use support::procs::{event, Cluster};

const POLICY: &str = "algorithm = \"sge-plain\"\nengine_timeout_secs = 10\ndispatch_timeout_secs = 20\n\
                      max_reservation = 1\ndefault_duration_secs = 60\n";

fn started(cluster: &Cluster, job: &str) -> usize {
    cluster.entries().iter().filter(|e| matches!(event(e), Some(Event::TaskStarted { task, .. }) if task.job.as_str() == job)).count()
}

#[test]
fn a_reserving_site_task_starts_through_a_stream_of_small_tasks_and_why_names_its_reservation() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    cluster.site_engines("lyon", &["e1", "e2"], 2);

    // The stream: 40 small tasks of 2 s each (limit 6 s), four at a time.
    let small = "id = \"small\"\nowner = \"tester\"\ntasks = 40\nwall_time_limit_secs = 6\n\n[task]\nargv = [\"sleep\", \"2\"]\n";
    let file = cluster.write("small.toml", small);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
    cluster.wait_for("four small tasks to run", Duration::from_secs(30), |cluster| {
        let n = started(cluster, "small");
        if n >= 4 { Ok(()) } else { Err(format!("{n} started")) }
    });

    let wide = "id = \"wide\"\nowner = \"tester\"\npriority = 10\ntasks = 1\nslots = 4\nspan = \"site\"\nreserve = true\n\
                wall_time_limit_secs = 30\n\n[task]\nargv = [\"sleep\", \"1\"]\n";
    let file = cluster.write("wide.toml", wide);
    let submitted = Instant::now();
    cluster.command(&["submit".as_ref(), file.as_os_str()]);

    // While it waits, `why` names its reservation.
    let why = cluster.wait_for("why to name the reservation", Duration::from_secs(30), |cluster| {
        let why = cluster.try_command(&["why".as_ref(), "wide/0".as_ref()])?;
        if why.contains("reserved 4 slots on") {
            return Ok(why);
        }
        if started(cluster, "wide") > 0 {
            cluster.fail(&format!("wide/0 started before why named its reservation; last why:\n{why}"));
        }
        Err(why)
    });
    assert!(why.contains("e1: 2") && why.contains("e2: 2"), "the reservation's engines and slots: {why}");
    assert!(why.contains("expected start at log time"), "when it starts: {why}");

    let completed_seq = cluster.wait_for("the reserving task to complete", Duration::from_secs(60), |cluster| {
        cluster
            .entries()
            .iter()
            .find_map(|e| match event(e) {
                Some(Event::TaskCompleted { task, .. }) if task.job.as_str() == "wide" => Some(e.seq),
                _ => None,
            })
            .ok_or_else(|| format!("not completed; {} small tasks started", started(cluster, "small")))
    });
    let waited = submitted.elapsed();
    // Generous: one small task's limit (6 s) and the wide task's 1 s, many times over.
    assert!(waited < Duration::from_secs(45), "the reserving task completed {waited:?} after its submission");
    let small_started = started(&cluster, "small");
    assert!(small_started < 40, "it started before the stream ran dry ({small_started} of 40 small tasks started)");

    // The small tasks flow again afterwards.
    cluster.wait_for("a small task to start after the wide one ended", Duration::from_secs(30), |cluster| {
        let later = cluster
            .entries()
            .iter()
            .filter(|e| e.seq > completed_seq && matches!(event(e), Some(Event::TaskStarted { task, .. }) if task.job.as_str() == "small"))
            .count();
        if later > 0 { Ok(()) } else { Err("none yet".into()) }
    });
}
