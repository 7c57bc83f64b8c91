//! The three-node cluster as the README tells it: three real nats-servers routed as
//! one cluster (`support::cluster3`), real `gridfold` processes given all three
//! servers. A test FAILS, never skips, when the servers cannot start.

mod support;

use std::time::Duration;

use support::procs::{Broker, Cluster};

/// An operator's command run before any projector makes the log with the one
/// replica a command asks for; the projector started with `--replicas 3` raises
/// it, and makes its orders stream and lease bucket with three, so that the log
/// survives the loss of a node whatever started first.
#[test]
fn a_projector_raises_a_log_made_with_one_replica_to_three_and_makes_the_rest_with_three() {
    let mut cluster = Cluster::start_three_bare("engine_timeout_secs = 10\n");
    let replicas = |cluster: &Cluster, stream: &str| match &cluster.broker {
        Broker::Three(brokers) => brokers.stream_replicas(&cluster.runtime, stream),
        Broker::One(_) => unreachable!("three nodes"),
    };
    assert_eq!(replicas(&cluster, "GRIDFOLD_EVENTS"), Ok(1), "`policy apply` made the log on one node");

    cluster.projector();
    let streams = ["GRIDFOLD_EVENTS", "GRIDFOLD_ORDERS", "KV_GRIDFOLD_LEADER"];
    cluster.wait_for("every stream on three replicas", Duration::from_secs(30), |cluster| {
        let seen: Vec<Result<usize, String>> = streams.iter().map(|stream| replicas(cluster, stream)).collect();
        if seen.iter().all(|replicas| *replicas == Ok(3)) { Ok(()) } else { Err(format!("{streams:?}: {seen:?}")) }
    });
    let said = cluster.proc(0).stderr();
    assert!(said.contains("raised the stream's replicas from 1 to 3"), "the projector says so:\n{said}");

    // And the grid runs on it.
    cluster.engine("e1", "e1", 2, &cluster.path("work-e1"));
    cluster.wait_logged_in(&["e1"]);
    cluster.submit_script("small", 4, "exit 0");
    cluster.wait_for("the job to be done", Duration::from_secs(30), |cluster| {
        let stdout = cluster.try_command(&["stat".as_ref(), "--json".as_ref(), "small".as_ref()])?;
        let stat: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| format!("{e}: {stdout}"))?;
        if stat["jobs"][0]["status"] == "done" { Ok(()) } else { Err(format!("{stat}")) }
    });
}
