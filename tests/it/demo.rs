//! `gridfold demo`, as a user runs it: on a broker, and on the embedded log.

use crate::support;

use std::process::Command;

fn run_demo(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_gridfold"))
        .arg("demo")
        .args(args)
        .output()
        .expect("gridfold runs");
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "gridfold demo {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn assert_demo_ran(stdout: &str, tasks: u32) {
    assert!(stdout.contains(&format!("{tasks} done, 0 failed")), "{stdout}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("replay verified: ") && last.contains(" entries, digest "), "last line: {last}\n{stdout}");
}

#[test]
fn the_demo_runs_on_a_broker_and_ends_with_a_verified_replay() {
    let server = support::nats::start();
    let url = server.url();
    let stdout = run_demo(&["--nats", &url, "--tasks", "40"]);
    assert!(stdout.contains("log: JetStream"), "{stdout}");
    assert_demo_ran(&stdout, 40);
}

#[test]
fn the_demo_runs_on_the_embedded_log_without_a_broker() {
    let stdout = run_demo(&["--embedded", "--tasks", "40"]);
    assert!(stdout.contains("log: embedded"), "{stdout}");
    assert_demo_ran(&stdout, 40);
}
