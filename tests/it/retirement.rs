//! Ended jobs retire, as a user sees it through the commands: real `gridfold`
//! processes (a projector, an engine) on a real nats-server (a test FAILS, never
//! skips, without one), a policy that retires ended jobs after one second of log
//! time, and `gridfold stat`, `why` and `usage` asked afterwards.

use crate::support;

use std::time::Duration;

use support::procs::Cluster;

const POLICY: &str = "\
engine_timeout_secs = 10
job_retention_secs = 1
";

#[test]
fn a_retired_job_is_named_by_stat_and_why_and_counted_by_usage() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    cluster.engine("e1", "e1", 2, &cluster.path("work-e1"));
    cluster.wait_logged_in(&["e1"]);
    cluster.submit_script("done-job", 3, "exit 0");
    cluster.submit_script("failing-job", 1, "exit 3");

    // The projector ticks every second: both end, then leave the state.
    let stat = cluster.wait_for("both jobs to be retired", Duration::from_secs(60), |cluster| {
        let stdout = cluster.try_command(&["stat".as_ref(), "--json".as_ref()])?;
        let stat: serde_json::Value = serde_json::from_str(stdout.trim()).map_err(|e| format!("{e}: {stdout}"))?;
        if stat["jobs_retired"] == 2 { Ok(stat) } else { Err(format!("{stat}")) }
    });
    assert_eq!(stat["jobs"].as_array().map(Vec::len), Some(0), "no job held: {stat}");

    let said = cluster.command(&["stat".as_ref(), "done-job".as_ref()]);
    assert!(said.contains("job done-job ended done (3 task(s))") && said.contains("was retired"), "{said}");
    let why = cluster.try_command(&["why".as_ref(), "failing-job/0".as_ref()]).unwrap_err();
    assert!(why.contains("job failing-job ended failed") && why.contains("was retired"), "{why}");

    let usage = cluster.command(&["usage".as_ref(), "--json".as_ref()]);
    let usage: serde_json::Value = serde_json::from_str(usage.trim()).expect("usage --json");
    assert_eq!(usage["jobs_retired"], 2, "{usage}");
    assert_eq!(usage["job_retention_ms"], 1000, "{usage}");
    let tester = &usage["by_user"]["tester"];
    assert_eq!((tester["jobs_done"].as_u64(), tester["jobs_failed"].as_u64()), (Some(1), Some(1)), "{usage}");
    assert_eq!(tester["tasks_done"], 3, "{usage}");
    let table = cluster.command(&["usage".as_ref()]);
    assert!(table.contains("ended jobs: 2 retired, 0 awaiting retirement (retention 1 s)"), "{table}");
}
