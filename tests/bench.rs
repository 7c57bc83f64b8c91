//! `gridfold bench` at a tiny scale: it must measure real work and prove it
//! (every task completed once, a verified replay), so the command cannot rot.

mod support;

use std::process::Command;

#[test]
fn the_end_to_end_bench_completes_every_task_and_verifies_its_log() {
    let server = support::nats::start();
    let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
        .args(["bench", "--nats", &server.url(), "--tasks", "2000", "--engines", "20", "--raw-messages", "2000", "--json"])
        .output()
        .expect("gridfold runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "gridfold bench failed:\n{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(report["run"]["tasks_completed"], 2000, "{report}");
    assert!(report["run"]["lifecycles_per_s"].as_f64().unwrap() > 0.0, "{report}");
    assert!(report["raw_publish"]["msgs_per_s"].as_f64().unwrap() > 0.0, "{report}");
    let verify = &report["verify"];
    assert_eq!(verify["every_task_completed_once"], true, "{verify}");
    assert_eq!(verify["projector_digest_matches"], true, "{verify}");
    assert!(verify["divergence"].is_null(), "{verify}");
    assert_eq!(verify["ok"], true, "{verify}");
}
