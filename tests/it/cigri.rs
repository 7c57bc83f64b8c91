//! CiGri's campaigns on a real grid: a real nats-server, a real `gridfold
//! projector` and real `gridfold engine` processes in two clusters (engines
//! logged in with `--prop cluster=...`), under `algorithm = "cigri"` set by
//! `gridfold policy apply` (through `Cluster::start`).
//!
//! - A test campaign runs one task per cluster, then ends, its other tasks
//!   dropped; a default campaign runs to its end.
//! - `gridfold stat --json` shows each campaign's predictor figures (done,
//!   throughput, per cluster); `stat` the campaign table; `stat --users` one
//!   line per user; `stat -f JOB --limit N` the full view, saying how many
//!   tasks it left out; `stat --errors` the failed task with its stderr tail.

use crate::support;

use std::time::Duration;

use support::procs::Cluster;

const POLICY: &str = "algorithm = \"cigri\"\nengine_timeout_secs = 5\ndispatch_timeout_secs = 10\n\n\
                      [cigri]\nfinalize_copies_max = 0\npredictor_window_secs = 600\n";

fn stat_json(cluster: &Cluster, extra: &[&str]) -> Result<serde_json::Value, String> {
    let mut args: Vec<&std::ffi::OsStr> = vec!["stat".as_ref(), "--json".as_ref()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    let stdout = cluster.try_command(&args)?;
    serde_json::from_str(stdout.trim()).map_err(|e| format!("stat --json: {e}: {stdout}"))
}

fn campaign_file(id: &str, owner: &str, kind: &str, tasks: u32, script: &str) -> String {
    format!(
        "id = \"{id}\"\nowner = \"{owner}\"\ncampaign = \"{kind}\"\ntasks = {tasks}\nmax_attempts = 1\n\n[task]\nargv = [\"sh\", \"-c\", \"{script}\"]\n"
    )
}

/// Engines called `engine-<name>`, one slot each, in the given clusters.
fn cluster_engines(cluster: &mut Cluster, engines: &[(&str, &str)]) {
    for (name, in_cluster) in engines {
        let (url, work) = (cluster.url(), cluster.path(&format!("{name}-work")).display().to_string());
        let prop = format!("cluster={in_cluster}");
        let args = [
            "engine", "--nats", &url, "--name", name, "--slots", "1", "--work-dir", &work, "--prop", &prop,
            "--heartbeat-secs", "1", "--drain-timeout-secs", "2",
        ];
        cluster.spawn(&format!("engine-{name}"), &args);
    }
    let names: Vec<&str> = engines.iter().map(|(name, _)| *name).collect();
    cluster.wait_logged_in(&names);
}

#[test]
fn a_test_campaign_runs_one_task_per_cluster_then_ends_and_stat_shows_the_campaigns_throughput() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    cluster_engines(&mut cluster, &[("l1", "lyon"), ("g1", "grenoble")]);

    let bulk = cluster.write("bulk.toml", &campaign_file("bulk", "alice", "default", 8, "sleep 0.3"));
    let probe = cluster.write("probe.toml", &campaign_file("probe", "bob", "test", 5, "sleep 0.1"));
    let broken = cluster.write("broken.toml", &campaign_file("broken", "bob", "default", 1, "echo no input file >&2; exit 3"));
    for file in [&bulk, &probe, &broken] {
        cluster.command(&["submit".as_ref(), file.as_os_str()]);
    }

    let done = cluster.wait_for("every campaign ended", Duration::from_secs(90), |cluster| {
        let stat = stat_json(cluster, &[])?;
        let jobs = stat["jobs"].as_array().cloned().unwrap_or_default();
        let ended = jobs.len() == 3 && jobs.iter().all(|job| job["status"] != "active");
        if ended { Ok(stat) } else { Err(stat.to_string()) }
    });
    let jobs = done["jobs"].as_array().cloned().unwrap_or_default();
    let job = |id: &str| jobs.iter().find(|job| job["id"] == id).cloned().unwrap_or_else(|| cluster.fail(&format!("no {id}: {done}")));

    // The test campaign: one task on each of the two clusters, the other three dropped.
    let probe = job("probe");
    assert_eq!((probe["status"].as_str(), probe["done"].as_u64(), probe["cancelled"].as_u64()), (Some("done"), Some(2), Some(3)), "{probe}");
    assert_eq!(probe["cigri"]["campaign"], "test", "{probe}");
    let probe_clusters: Vec<&str> =
        probe["cigri"]["clusters"].as_array().into_iter().flatten().filter_map(|c| c["cluster"].as_str()).collect();
    assert_eq!(probe_clusters, ["grenoble", "lyon"], "{probe}");

    // The default campaign: every task done, with the predictor's figures.
    let bulk = job("bulk");
    assert_eq!((bulk["status"].as_str(), bulk["done"].as_u64()), (Some("done"), Some(8)), "{bulk}");
    let prediction = &bulk["cigri"]["prediction"];
    assert_eq!(prediction["done"], 8, "{bulk}");
    assert!(prediction["per_hour_milli"].as_u64().is_some_and(|rate| rate > 0), "{bulk}");
    assert!(prediction["mean_duration_ms"].as_u64().is_some_and(|ms| ms >= 300), "{bulk}");
    let per_cluster: u64 =
        bulk["cigri"]["clusters"].as_array().into_iter().flatten().filter_map(|c| c["done"].as_u64()).sum();
    assert_eq!(per_cluster, 8, "{bulk}");

    // The views.
    let plain = cluster.command(&["stat".as_ref()]);
    assert!(plain.contains("CAMPAIGN") && plain.contains("TASKS/H") && plain.contains("bulk"), "{plain}");
    let users = stat_json(&cluster, &["--users"]).unwrap_or_else(|e| cluster.fail(&e));
    let user_names: Vec<&str> = users["users"].as_array().into_iter().flatten().filter_map(|u| u["user"].as_str()).collect();
    assert_eq!(user_names, ["alice", "bob"], "{users}");
    let full = cluster.command(&["stat".as_ref(), "-f".as_ref(), "bulk".as_ref(), "--limit".as_ref(), "3".as_ref()]);
    assert!(full.contains("CLUSTER") && full.contains("lyon") && full.contains("grenoble"), "{full}");
    assert!(full.contains("... 5 more task(s) not shown (--limit 3"), "{full}");
    let full_json = stat_json(&cluster, &["-f", "bulk", "--limit", "3"]).unwrap_or_else(|e| cluster.fail(&e));
    assert_eq!((full_json["tasks"].as_array().map(Vec::len), full_json["left_out"].as_u64()), (Some(3), Some(5)), "{full_json}");
    let errors = stat_json(&cluster, &["--errors"]).unwrap_or_else(|e| cluster.fail(&e));
    let first = &errors["errors"][0];
    assert_eq!((first["task"].as_str(), first["exit_code"].as_i64()), (Some("broken/0"), Some(3)), "{errors}");
    assert!(first["stderr_tail"].as_str().is_some_and(|tail| tail.contains("no input file")), "{errors}");
    let plain_errors = cluster.command(&["stat".as_ref(), "--errors".as_ref()]);
    assert!(plain_errors.contains("broken/0") && plain_errors.contains("no input file"), "{plain_errors}");
}
