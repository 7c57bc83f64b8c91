//! A gateway engine onto a real one-host Slurm (issue 13, items 7-9): a real
//! nats-server, the projector, `gridfold engine --gateway slurm` submitting to a
//! Slurm the test starts (tests/it/support/slurm.rs), and one ordinary engine.
//! A campaign runs; its gateway tasks ran as Slurm jobs (their ids on the log);
//! flood control's cap held Slurm's queue (sampled with squeue while it ran);
//! an `scancel` from outside is reported as PREEMPTED and the task runs again
//! without using an attempt; `gridfold suspend` and `resume` stop and continue
//! a Slurm job's processes; `gridfold cancel` of a campaign cancels its Slurm jobs.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use gridfold::core::event::{Event, FailureKind, Order};
use gridfold::core::ids::TaskRef;
use support::folded_log::Log;
use support::procs::Cluster;

/// Flood control at most 1/8 of a task per slot (start and `ratio_max`): the
/// gateway's 16 slots allow at most 2 slots of unstarted tasks (fewer when the
/// ratio falls, never fewer than one).
const POLICY: &str = "algorithm = \"cigri\"\nengine_timeout_secs = 20\ndispatch_timeout_secs = 60\n\
    [flood]\nalgorithm = \"slow-start\"\nratio_start = 0.125\nratio_max = 0.125\ninterval_secs = 2\nwaiting_grace_secs = 1\n";
const GATEWAY_SLOTS: u32 = 16;
const UNSTARTED_ALLOWED: usize = 2;

fn campaign(cluster: &Cluster, id: &str, tasks: u32, script: &str) {
    let job = format!(
        "id = \"{id}\"\nowner = \"tester\"\ntasks = {tasks}\nmax_attempts = 1\n\n[task]\nargv = [\"sh\", \"-c\", {script:?}]\n"
    );
    let file = cluster.write(&format!("{id}.toml"), &job);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
}

/// Slurm job id → task, from the gateway's TaskStarted reports.
fn remote_jobs(log: &Log) -> BTreeMap<String, TaskRef> {
    log.events()
        .filter_map(|(_, event)| match event {
            Event::TaskStarted { task, engine, remote_job, .. } if engine.as_str() == "lyon" && !remote_job.is_empty() => {
                Some((remote_job.clone(), task.clone()))
            }
            _ => None,
        })
        .collect()
}

fn completed(log: &Log, job: &str) -> BTreeMap<u32, String> {
    log.events()
        .filter_map(|(_, event)| match event {
            Event::TaskCompleted { task, engine, .. } if task.job.as_str() == job => Some((task.index, engine.to_string())),
            _ => None,
        })
        .collect()
}

/// The processes of Slurm job `id` on this host (its batch script, `slurm_script`,
/// and what that runs: `SLURM_JOB_ID=<id>` in their environment, `slurmstepd` left out)
/// with their states (`T`: stopped), zombies left out.
fn job_processes(id: &str) -> Vec<(i32, String)> {
    let needle = format!("SLURM_JOB_ID={id}");
    let mut processes = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else { continue };
        if !environ.split(|&byte| byte == 0).any(|var| var == needle.as_bytes()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some((name, rest)) = stat.split_once(" (").and_then(|(_, rest)| rest.rsplit_once(')')) else { continue };
        let state = rest.split_whitespace().next().unwrap_or_default().to_string();
        if name != "slurmstepd" && !matches!(state.as_str(), "Z" | "X") {
            processes.push((pid, state));
        }
    }
    processes
}

/// Jobs of the gateway Slurm has not ended: (id, state).
fn live_slurm_jobs(slurm: &support::slurm::Slurm) -> Vec<(String, String)> {
    slurm
        .queue()
        .into_iter()
        .filter(|(_, state, name)| name == "gf-lyon" && matches!(state.as_str(), "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING"))
        .map(|(id, state, _)| (id, state))
        .collect()
}

#[test]
fn a_campaign_runs_through_slurm_under_flood_control_an_outside_scancel_reruns_and_a_cancel_empties_the_queue() {
    let started = Instant::now();
    let mut cluster = Cluster::start(POLICY);
    let slurm = support::slurm::start(&cluster.path("slurm-root"));
    cluster.projector();
    let (url, conf) = (cluster.url(), slurm.conf.display().to_string());
    let work = cluster.path("lyon-work").display().to_string();
    let slots = GATEWAY_SLOTS.to_string();
    let args = [
        "engine", "--nats", &url, "--name", "lyon", "--gateway", "slurm", "--cluster", "lyon", "--partition", &slurm.partition,
        "--slurm-conf", &conf, "--slots", &slots, "--work-dir", &work, "--heartbeat-secs", "1", "--drain-timeout-secs", "2",
        "--poll-interval-ms", "200",
    ];
    cluster.spawn("engine-lyon", &args);
    let local_work = cluster.path("local-work");
    cluster.engine("engine-local", "local", 1, &local_work);
    cluster.wait_logged_in(&["lyon", "local"]);

    // A campaign of 24 tasks of 1 s (every sixth 20 s on its first attempt, to
    // be cancelled from outside while it surely runs); the Slurm node has 8 CPUs.
    let script = "echo \"$CIGRI_CAMPAIGNID $GRIDFOLD_TASK_INDEX\"; \
                  if [ \"$GRIDFOLD_ATTEMPT\" = 1 ] && [ $((GRIDFOLD_TASK_INDEX % 6)) = 0 ]; then sleep 20; else sleep 1; fi";
    campaign(&cluster, "camp", 24, script);
    let mut pending_max = 0;
    let mut preempted_job: Option<(String, TaskRef)> = None;
    cluster.wait_for("the campaign to complete", Duration::from_secs(300), |cluster| {
        let pending = live_slurm_jobs(&slurm).iter().filter(|(_, state)| state == "PENDING").count();
        pending_max = pending_max.max(pending);
        let log = Log::of(cluster);
        // Once a gateway task runs, cancel its Slurm job from outside, once.
        if preempted_job.is_none() {
            let running: BTreeSet<String> = live_slurm_jobs(&slurm).into_iter().filter(|(_, s)| s == "RUNNING").map(|(id, _)| id).collect();
            let long = |task: &TaskRef| task.job.as_str() == "camp" && task.index.is_multiple_of(6);
            if let Some((id, task)) = remote_jobs(&log).into_iter().find(|(id, task)| running.contains(id) && long(task)) {
                slurm.command("scancel", &[&id]);
                preempted_job = Some((id, task));
            }
        }
        let done = completed(&log, "camp");
        if done.len() == 24 { Ok(log) } else { Err(format!("{} of 24 completed; Slurm {:?}", done.len(), live_slurm_jobs(&slurm))) }
    });
    let log = Log::of(&cluster);
    let done = completed(&log, "camp");
    let on_lyon = done.values().filter(|engine| *engine == "lyon").count();
    assert!(on_lyon > 0 && done.values().any(|engine| engine == "local"), "both engines ran tasks: {done:?}");

    // Every gateway task that started names its Slurm job, each a distinct id.
    let remote = remote_jobs(&log);
    let lyon_starts = log
        .events()
        .filter(|(_, event)| matches!(event, Event::TaskStarted { engine, .. } if engine.as_str() == "lyon"))
        .count();
    assert_eq!(remote.len(), lyon_starts, "one Slurm job id per gateway start: {remote:?}");
    assert!(remote.keys().all(|id| id.parse::<u64>().is_ok()), "{remote:?}");

    // Flood control: its ratios on the log, and Slurm never held more pending than the highest allows.
    let ratios: Vec<u32> = log
        .events()
        .filter_map(|(_, event)| match event {
            Event::OrderBatch(batch) => Some(batch.orders.iter().filter_map(|order| match order {
                Order::FloodRatio { engine, ratio_milli, .. } if engine.as_str() == "lyon" => Some(*ratio_milli),
                _ => None,
            })),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(ratios.first(), Some(&125), "the gateway starts at the policy's ratio: {ratios:?}");
    assert!(ratios.iter().all(|&ratio| (1..=125).contains(&ratio)), "never above ratio_max: {ratios:?}");
    assert!(pending_max <= UNSTARTED_ALLOWED, "Slurm held {pending_max} pending jobs, more than the {UNSTARTED_ALLOWED} flood control allows");

    // The outside scancel: reported PREEMPTED, then the task ran again and completed (max_attempts = 1).
    let (id, task) = preempted_job.expect("a gateway task ran in Slurm to cancel");
    let preempted = log.events().any(|(_, event)| {
        matches!(event, Event::TaskFailed { task: t, kind: FailureKind::Preempted, engine, .. } if *t == task && engine.as_str() == "lyon")
    });
    assert!(preempted, "Slurm job {id} of {task}, cancelled from outside, is reported preempted");
    assert!(done.contains_key(&task.index), "{task} ran again and completed");

    // Suspend and resume reach the Slurm job: a task ticking into a file stops, then ticks again.
    let ticks = cluster.path("ticks");
    let ticker = format!(
        "id = \"tick\"\nowner = \"tester\"\ntasks = 1\nrequirements = 'cluster == \"lyon\"'\n\n[task]\nargv = [\"sh\", \"-c\", \"while true; do echo x >> {}; sleep 0.1; done\"]\n",
        ticks.display()
    );
    let file = cluster.write("tick.toml", &ticker);
    cluster.command(&["submit".as_ref(), file.as_os_str()]);
    let n_ticks = || std::fs::read_to_string(&ticks).map_or(0, |text| text.lines().count());
    let tick_job = cluster.wait_for("the ticker to run in Slurm, reported started", Duration::from_secs(120), |cluster| {
        let started = remote_jobs(&Log::of(cluster)).into_iter().find(|(_, task)| task.job.as_str() == "tick");
        match started {
            Some((id, _)) if n_ticks() >= 3 => Ok(id),
            _ => Err(format!("{} ticks, started: {started:?}", n_ticks())),
        }
    });
    cluster.command(&["suspend".as_ref(), "tick".as_ref()]);
    // Suspended: every process of its Slurm job is stopped (SIGSTOP), and so stays
    // while the engine goes on (its next heartbeat on the log): no tick meanwhile.
    let stopped_at = cluster.wait_for("the suspended ticker's processes to be stopped", Duration::from_secs(120), |_| {
        let processes = job_processes(&tick_job);
        let stopped = !processes.is_empty() && processes.iter().all(|(_, state)| state == "T");
        if stopped { Ok(n_ticks()) } else { Err(format!("Slurm job {tick_job}'s processes: {processes:?}")) }
    });
    let stopped_seen = Log::of(&cluster).entries.last().map_or(0, |entry| entry.seq.0);
    cluster.wait_for("a heartbeat of the gateway after the ticker stopped", Duration::from_secs(120), |cluster| {
        let log = Log::of(cluster);
        let heartbeat = log.events().any(|(seq, event)| {
            seq > stopped_seen && matches!(event, Event::EngineHeartbeat { engine, .. } if engine.as_str() == "lyon")
        });
        if heartbeat { Ok(()) } else { Err(format!("the log is at {:?}", log.entries.last().map(|entry| entry.seq.0))) }
    });
    let processes = job_processes(&tick_job);
    assert!(
        n_ticks() == stopped_at && processes.iter().all(|(_, state)| state == "T"),
        "the suspended ticker stopped ticking: {stopped_at} then {} ticks; Slurm job {tick_job}'s processes: {processes:?}",
        n_ticks()
    );
    cluster.command(&["resume".as_ref(), "tick".as_ref()]);
    let resumed_at = cluster.wait_for("the resumed ticker to tick again", Duration::from_secs(120), |_| {
        let processes = job_processes(&tick_job);
        let running = processes.iter().all(|(_, state)| state != "T");
        let n = n_ticks();
        if running && n > stopped_at { Ok(n) } else { Err(format!("{n} ticks; Slurm job {tick_job}'s processes: {processes:?}")) }
    });
    assert!(resumed_at > stopped_at, "ticks after the resume: {stopped_at} then {resumed_at}");
    cluster.command(&["cancel".as_ref(), "tick".as_ref()]);

    // A second campaign of long tasks; once some run in Slurm, cancel it: Slurm's queue empties of them.
    campaign(&cluster, "long", 6, "sleep 120");
    cluster.wait_for("long tasks to run in Slurm", Duration::from_secs(120), |_| {
        let running = live_slurm_jobs(&slurm).iter().filter(|(_, state)| state == "RUNNING").count();
        if running >= 2 { Ok(()) } else { Err(format!("{:?}", live_slurm_jobs(&slurm))) }
    });
    cluster.command(&["cancel".as_ref(), "long".as_ref()]);
    cluster.wait_for("Slurm's queue to hold none of the gateway's jobs", Duration::from_secs(120), |_| {
        let live = live_slurm_jobs(&slurm);
        if live.is_empty() { Ok(()) } else { Err(format!("{live:?}")) }
    });
    eprintln!(
        "slurm gateway: {on_lyon} of 24 tasks through Slurm, ratios {ratios:?}, Slurm pending at most {pending_max}, all in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
