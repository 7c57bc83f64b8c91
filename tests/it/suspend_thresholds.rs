//! Suspend thresholds end to end (issue 10, item 5) on a real nats-server with
//! a real engine process: the engine's load sensor (`--load-sensor`) reports
//! `np_load_avg` read from a file the test writes; the policy's
//! `suspend_thresholds = "np_load_avg=1.0"` makes the projector order
//! `Suspend` of the running task when the value is raised above 1.0, and the
//! task's process really stops (its CPU time does not advance); lowered again,
//! the projector orders `Resume` and the CPU time advances again.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use gridfold::core::event::{Event, Order};
use support::procs::{Cluster, event};

const POLICY: &str = "algorithm = \"sge-plain\"\nengine_timeout_secs = 10\ndispatch_timeout_secs = 20\n\
                      suspend_thresholds = \"np_load_avg=1.0\"\nsuspend_interval_secs = 1\n";

/// utime + stime of a process, in clock ticks, and its state letter.
fn cpu_ticks_and_state(pid: u32) -> Option<(u64, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    // Fields 14 and 15 (utime, stime) are the 12th and 13th after the name.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime, state))
}

/// How many clock ticks of CPU the process used over about a second.
fn cpu_advance_over_a_second(pid: u32) -> u64 {
    let (before, _) = cpu_ticks_and_state(pid).expect("the task runs");
    std::thread::sleep(Duration::from_millis(1_200));
    let (after, _) = cpu_ticks_and_state(pid).expect("the task runs");
    after - before
}

fn wait_state(pid: u32, what: &str, want_stopped: bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = cpu_ticks_and_state(pid).map(|(_, state)| state);
        if state.is_some_and(|state| (state == 'T') == want_stopped) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: the task's state stayed {state:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn orders_named(cluster: &Cluster, pick: fn(&Order) -> bool) -> usize {
    cluster
        .entries()
        .iter()
        .filter_map(|entry| match event(entry) {
            Some(Event::OrderBatch(batch)) => Some(batch.orders.iter().filter(|order| pick(order)).count()),
            _ => None,
        })
        .sum()
}

/// Waits until the log holds an order `pick` chooses.
fn wait_for_order(cluster: &mut Cluster, kind: &str, pick: fn(&Order) -> bool) {
    cluster.wait_for(&format!("a {kind} order"), Duration::from_secs(30), |cluster| match orders_named(cluster, pick) {
        0 => Err(format!("no {kind} yet")),
        _ => Ok(()),
    });
}

fn write_load(path: &Path, value: &str) {
    std::fs::write(path, value).unwrap();
}

#[test]
fn a_load_sensor_value_above_the_threshold_stops_the_task_and_below_resumes_it() {
    let mut cluster = Cluster::start(POLICY);
    cluster.projector();
    let load_file = cluster.path("np_load_avg");
    write_load(&load_file, "0.10");
    let sensor = cluster.write(
        "sensor.sh",
        &format!(
            "#!/bin/sh\nwhile read line; do\n  [ \"$line\" = quit ] && exit 0\n  v=$(cat '{}')\n  \
             printf 'begin\\nhost:np_load_avg:%s\\nend\\n' \"$v\"\ndone\n",
            load_file.display()
        ),
    );
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&sensor, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (url, work, sensor_path) =
        (cluster.url(), cluster.path("e1-work").display().to_string(), sensor.display().to_string());
    let args = [
        "engine", "--nats", &url, "--name", "e1", "--slots", "1", "--work-dir", &work, "--heartbeat-secs", "1",
        "--drain-timeout-secs", "2", "--load-sensor", &sensor_path,
    ];
    cluster.spawn("engine-e1", &args);
    cluster.wait_logged_in(&["e1"]);

    // A task that burns CPU and says its pid; the wall-time limit is a safety net.
    let pid_file = cluster.path("burn.pid");
    let job = format!(
        "id = \"burn\"\nowner = \"tester\"\ntasks = 1\nwall_time_limit_secs = 120\n\n[task]\n\
         argv = [\"sh\", \"-c\", \"echo $$ > '{}'; while :; do :; done\"]\n",
        pid_file.display()
    );
    let file = cluster.write("burn.toml", &job);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
    let pid: u32 = cluster.wait_for("the task's pid", Duration::from_secs(30), |_| {
        std::fs::read_to_string(&pid_file)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .ok_or_else(|| "no pid yet".to_string())
    });
    let running_advance = cpu_advance_over_a_second(pid);
    assert!(running_advance > 0, "a running task uses CPU");
    assert_eq!(orders_named(&cluster, |order| matches!(order, Order::Suspend { .. })), 0, "below the threshold: no Suspend");

    // Above the threshold: Suspend, and the process stops.
    write_load(&load_file, "2.5");
    wait_for_order(&mut cluster, "Suspend", |order| matches!(order, Order::Suspend { task, .. } if task.job.as_str() == "burn"));
    wait_state(pid, "after the Suspend", true);
    assert_eq!(cpu_advance_over_a_second(pid), 0, "a suspended task's CPU time does not advance");
    let why = cluster.command(&["why".as_ref(), "burn/0".as_ref()]);
    assert!(why.contains("suspended by a threshold: np_load_avg is 2.50, threshold 1.00"), "{why}");
    let task = cluster.command(&["task".as_ref(), "burn/0".as_ref()]);
    assert!(task.contains("suspended by a threshold"), "{task}");

    // Below again: Resume, and the CPU time advances.
    write_load(&load_file, "0.2");
    wait_for_order(&mut cluster, "Resume", |order| matches!(order, Order::Resume { task, .. } if task.job.as_str() == "burn"));
    wait_state(pid, "after the Resume", false);
    assert!(cpu_advance_over_a_second(pid) > 0, "a resumed task uses CPU again");
    assert_eq!(orders_named(&cluster, |order| matches!(order, Order::Suspend { .. })), 1, "suspended once");

    // Cancelled: the process ends.
    cluster.command(&["cancel".as_ref(), "burn".as_ref()]);
    cluster.wait_for("the task's process to end", Duration::from_secs(30), |_| {
        match cpu_ticks_and_state(pid) {
            None | Some((_, 'Z')) => Ok(()),
            Some((_, state)) => Err(format!("state {state}")),
        }
    });
}
