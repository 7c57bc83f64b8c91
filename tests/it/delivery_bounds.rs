//! No delivery can stall another (issue 35): on a real nats-server that takes
//! messages of 64 KiB at most, a job whose run order is 120 KB (within the
//! fold's bound of 256 KiB, so it is accepted) cannot be delivered. The
//! broker's refusal fails that attempt, through the log, with its reason in
//! `gridfold task`; the run is never sent again and holds nothing back: another
//! job's tasks on another engine complete promptly, while the big one fails
//! each of its attempts in turn.

use crate::support;

use std::time::Duration;

use gridfold::core::event::{Event, Order};
use support::procs::{Cluster, event};

const BROKER: &str = "max_payload: 65536";
const POLICY: &str = "engine_timeout_secs = 10\ndispatch_timeout_secs = 30\n";

fn submit(cluster: &Cluster, name: &str, text: &str) {
    let file = cluster.write(&format!("{name}.toml"), text);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
}

fn job_status(cluster: &Cluster, id: &str) -> Result<String, String> {
    let stdout = cluster.try_command(&["stat".as_ref(), "--json".as_ref()])?;
    let stat: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| format!("stat --json: {e}: {stdout}"))?;
    let job = stat["jobs"].as_array().into_iter().flatten().find(|job| job["id"] == id).ok_or_else(|| format!("no job {id} in {stat}"))?;
    Ok(job["status"].as_str().unwrap_or_default().to_string())
}

#[test]
fn a_run_order_the_broker_refuses_fails_its_attempt_and_another_engines_tasks_complete_meanwhile() {
    let mut cluster = Cluster::start_configured(BROKER, POLICY);
    cluster.projector();
    for (name, pool) in [("big-engine", "big"), ("small-engine", "small")] {
        let (url, work) = (cluster.url(), cluster.path(&format!("{name}-work")).display().to_string());
        let prop = format!("pool={pool}");
        let args = ["engine", "--nats", &url, "--name", name, "--slots", "2", "--work-dir", &work, "--prop", &prop, "--heartbeat-secs", "1"];
        cluster.spawn(name, &args);
    }
    cluster.wait_logged_in(&["big-engine", "small-engine"]);

    // The job at a smaller scale: a 20,000-byte parameter used five
    // times, a submission of 20 KB whose run order is 120 KB: under the fold's
    // bound, over the broker's.
    let value = "x".repeat(20_000);
    submit(
        &cluster,
        "big",
        &format!("id = \"big\"\ntasks = 1\nmax_attempts = 2\nrequirements = 'pool == \"big\"'\n\n[task]\nargv = [\"echo\", \"{{p}}\", \"{{p}}\", \"{{p}}\", \"{{p}}\", \"{{p}}\"]\nparams = {{ p = \"{value}\" }}\n"),
    );
    submit(&cluster, "small", "id = \"small\"\ntasks = 4\nrequirements = 'pool == \"small\"'\n\n[task]\nargv = [\"true\"]\n");

    cluster.wait_for("small's four tasks to complete", Duration::from_secs(20), |cluster| match job_status(cluster, "small")? {
        status if status == "done" => Ok(()),
        status => Err(format!("small is {status}")),
    });
    cluster.wait_for("big to fail both attempts", Duration::from_secs(20), |cluster| match job_status(cluster, "big")? {
        status if status == "failed" => Ok(()),
        status => Err(format!("big is {status}")),
    });

    // The log says why: one Undeliverable order per attempt, naming the sizes.
    let entries = cluster.entries();
    let undeliverable: Vec<(u32, u64, u64)> = entries
        .iter()
        .filter_map(event)
        .filter_map(|event| match event {
            Event::OrderBatch(batch) => Some(batch.orders.iter()),
            _ => None,
        })
        .flatten()
        .filter_map(|order| match order {
            Order::Undeliverable { task, attempt, bytes, max, .. } if task.job.as_str() == "big" => Some((*attempt, *bytes, *max)),
            _ => None,
        })
        .collect();
    let attempts: Vec<u32> = undeliverable.iter().map(|(attempt, _, _)| *attempt).collect();
    assert_eq!(attempts, vec![1, 2], "{undeliverable:?}");
    assert!(undeliverable.iter().all(|&(_, bytes, max)| bytes > 120_000 && max == 65_536), "{undeliverable:?}");

    let shown = cluster.command(&["task".as_ref(), "big/0".as_ref()]);
    assert!(shown.contains("undeliverable"), "{shown}");
    assert!(shown.contains("the broker refused its run order as too large"), "{shown}");
}
