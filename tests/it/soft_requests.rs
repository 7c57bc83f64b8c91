//! Grid Engine's soft requests (`qsub -soft -l`) through the command line on a
//! real nats-server (issue 10, item 2): two real one-slot engines that differ
//! only in a `gpu` property; a job whose `soft = 'gpu == "yes"'` sends its
//! first task to the engine that meets it (though the other's id sorts first)
//! and its second to the other one (a soft request excludes nothing), and
//! `gridfold why` on the second says the request went unmet and which engine
//! would meet it.

use crate::support;

use std::time::Duration;

use gridfold::core::event::{Event, Order};
use support::procs::{event, Cluster};

const POLICY: &str = "algorithm = \"sge-plain\"\nengine_timeout_secs = 10\ndispatch_timeout_secs = 20\n";

#[test]
fn a_soft_request_ranks_the_engine_meeting_it_first_without_excluding_the_other() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    for (name, gpu) in [("e1", "no"), ("e2", "yes")] {
        let (url, work) = (cluster.url(), cluster.path(&format!("{name}-work")).display().to_string());
        let prop = format!("gpu={gpu}");
        let args = [
            "engine", "--nats", &url, "--name", name, "--slots", "1", "--work-dir", &work, "--prop", &prop,
            "--heartbeat-secs", "1", "--drain-timeout-secs", "2",
        ];
        cluster.spawn(&format!("engine-{name}"), &args);
    }
    cluster.wait_logged_in(&["e1", "e2"]);

    let job = "id = \"soft\"\nowner = \"tester\"\ntasks = 2\nsoft = 'gpu == \"yes\"'\n\n[task]\nargv = [\"sleep\", \"2\"]\n";
    let file = cluster.write("soft.toml", job);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
    let placed = cluster.wait_for("both tasks to be dispatched", Duration::from_secs(30), |cluster| {
        let placed: Vec<(u32, String)> = cluster
            .entries()
            .iter()
            .filter_map(|e| match event(e) {
                Some(Event::OrderBatch(batch)) => Some(batch.orders.clone()),
                _ => None,
            })
            .flatten()
            .filter_map(|order| match order {
                Order::Dispatch { task, engine, .. } if task.job.as_str() == "soft" => Some((task.index, engine.to_string())),
                _ => None,
            })
            .collect();
        if placed.len() == 2 { Ok(placed) } else { Err(format!("{placed:?}")) }
    });
    assert_eq!(placed, vec![(0, "e2".to_string()), (1, "e1".to_string())], "the engine meeting the soft request first");

    let why = cluster.command(&["why".as_ref(), "soft/1".as_ref()]);
    assert!(why.contains("soft request unmet"), "{why}");
    assert!(why.contains("e2"), "names the engine that would meet it: {why}");
}
