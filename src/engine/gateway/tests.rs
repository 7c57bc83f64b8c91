//! The gateway on recorded Slurm outputs and a scripted resource manager.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::slurm::{parse_sbatch, parse_show_job, parse_squeue, sbatch_args, state_of};
use super::*;
use crate::core::ids::{JobId, TaskRef};

#[test]
fn sbatch_parsable_output_gives_the_job_id_with_or_without_a_cluster() {
    assert_eq!(parse_sbatch("4242\n").unwrap(), "4242");
    assert_eq!(parse_sbatch("4243;lyon\n").unwrap(), "4243");
    assert!(parse_sbatch("").is_err());
    assert!(parse_sbatch("sbatch: error: Batch job submission failed\n").is_err());
    assert!(parse_sbatch(&"9".repeat(65)).is_err(), "an id beyond 64 bytes is refused");
}

#[test]
fn squeue_lines_map_slurm_states_and_skip_what_they_cannot_read() {
    // Recorded: squeue -h -t all -n gf-lyon -o '%i|%T' on Slurm 22.05.8.
    let out = "12|PENDING\n13|RUNNING\n14|COMPLETING\n15|COMPLETED\n16|CANCELLED\n17|TIMEOUT\n18|FAILED\n19|PREEMPTED\n20|NODE_FAIL\ngarbage\n21|SOMETHING_NEW\n";
    let listed: BTreeMap<String, RemoteState> = parse_squeue(out).into_iter().collect();
    assert_eq!(listed.len(), 9);
    assert_eq!(listed["12"], RemoteState::Pending);
    assert_eq!(listed["13"], RemoteState::Running);
    assert_eq!(listed["14"], RemoteState::Running);
    assert_eq!(listed["15"], RemoteState::Ended(RemoteEnd::Finished(None)));
    assert_eq!(listed["16"], RemoteState::Ended(RemoteEnd::Killed));
    assert_eq!(listed["17"], RemoteState::Ended(RemoteEnd::TimedOut));
    assert_eq!(listed["18"], RemoteState::Ended(RemoteEnd::Finished(None)));
    assert_eq!(listed["19"], RemoteState::Ended(RemoteEnd::Killed));
    assert_eq!(listed["20"], RemoteState::Ended(RemoteEnd::Killed));
    assert_eq!(state_of("CANCELLED+"), Some(RemoteState::Ended(RemoteEnd::Killed)));
}

#[test]
fn scontrol_show_job_gives_the_end_and_the_exit_code() {
    // Recorded: scontrol show job -o 1 on Slurm 22.05.8 (cut).
    let failed = "JobId=1 JobName=wrap UserId=root(0) JobState=FAILED Reason=NonZeroExitCode Dependency=(null) ExitCode=3:0 RunTime=00:00:00";
    assert_eq!(parse_show_job(failed), Some(RemoteEnd::Finished(Some(3))));
    let cancelled = "JobId=2 JobName=gf-x JobState=CANCELLED Reason=None ExitCode=0:15";
    assert_eq!(parse_show_job(cancelled), Some(RemoteEnd::Killed));
    let running = "JobId=3 JobName=gf-x JobState=RUNNING Reason=None ExitCode=0:0";
    assert_eq!(parse_show_job(running), None);
    assert_eq!(parse_show_job(""), None);
}

#[test]
fn sbatch_arguments_name_the_gateway_and_the_files_and_round_the_time_up() {
    let job = SubmitSpec {
        name: "gf-lyon".into(),
        comment: "c/3 #1".into(),
        work_dir: "/w/c/3-1".into(),
        stdout: "/w/c/3-1/slurm.stdout".into(),
        stderr: "/w/c/3-1/slurm.stderr".into(),
        cpus: 2,
        time_limit_minutes: Some(2),
        partition: Some("main".into()),
        account: None,
    };
    let args = sbatch_args(Path::new("/w/c/3-1/job.sh"), &job);
    let text = args.join(" ");
    assert_eq!(
        text,
        "--parsable -J gf-lyon --comment=c/3 #1 -D /w/c/3-1 -o /w/c/3-1/slurm.stdout -e /w/c/3-1/slurm.stderr -c 2 --export=ALL --time=2 --partition=main /w/c/3-1/job.sh"
    );
}

#[test]
fn the_job_script_exports_the_environment_with_cigri_names_and_wall_time_and_leaves_the_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let env = vec![
        ("GRIDFOLD_JOB_ID".to_string(), "camp".to_string()),
        ("GRIDFOLD_TASK_ID".to_string(), "camp/4".to_string()),
        ("GRIDFOLD_PARAM_X".to_string(), "it's, a \"value\" $HOME".to_string()),
    ];
    let mut all = env.clone();
    all.extend(cigri_aliases(&env, Some(Duration::from_secs(2 * 3600 + 5 * 60 + 7))));
    let argv = vec![
        "sh".to_string(),
        "-c".to_string(),
        "echo \"$CIGRI_CAMPAIGNID $CIGRI_JOB_ID $GRIDFOLD_PARAM_X $CIGRI_WALLTIME $CIGRI_WALLTIME_SECONDS\"; exit 7".to_string(),
    ];
    let script = job_script(&argv, &all, dir.path());
    let path = dir.path().join(SCRIPT_FILE);
    std::fs::write(&path, script).unwrap();
    let out = std::process::Command::new("sh").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "camp camp/4 it's, a \"value\" $HOME 2:05:07 7507\n");
    assert_eq!(read_exit_code(dir.path()), Some(7));
}

/// A resource manager played from a script: each job's states, one per poll.
#[derive(Default)]
struct Scripted {
    next_id: Mutex<u32>,
    /// id → states still to come; the last one stays.
    states: Mutex<BTreeMap<String, Vec<RemoteState>>>,
    cancelled: Mutex<Vec<String>>,
    plan: Mutex<Vec<Vec<RemoteState>>>,
    /// Every signal sent, in order: (job id, signal).
    signalled: Mutex<Vec<(String, RemoteSignal)>>,
}

impl RemoteCommands for Scripted {
    fn submit(&self, _script: &Path, _job: &SubmitSpec) -> Result<String, String> {
        let mut next = self.next_id.lock().unwrap();
        *next += 1;
        let id = next.to_string();
        let plan = self.plan.lock().unwrap().remove(0);
        self.states.lock().unwrap().insert(id.clone(), plan);
        Ok(id)
    }
    fn list(&self, _name: &str) -> Result<Vec<(String, RemoteState)>, String> {
        let mut states = self.states.lock().unwrap();
        let cancelled = self.cancelled.lock().unwrap();
        let mut out = Vec::new();
        for (id, plan) in states.iter_mut() {
            if cancelled.contains(id) {
                out.push((id.clone(), RemoteState::Ended(RemoteEnd::Killed)));
                continue;
            }
            let state = if plan.len() > 1 { plan.remove(0) } else { plan[0] };
            out.push((id.clone(), state));
        }
        Ok(out)
    }
    fn ended(&self, _id: &str) -> Result<Option<RemoteEnd>, String> {
        Ok(None)
    }
    fn cancel(&self, ids: &[String]) -> Result<(), String> {
        self.cancelled.lock().unwrap().extend(ids.iter().cloned());
        Ok(())
    }
    fn signal(&self, ids: &[String], signal: RemoteSignal) -> Result<(), String> {
        self.signalled.lock().unwrap().extend(ids.iter().map(|id| (id.clone(), signal)));
        Ok(())
    }
}

fn scripted_gateway(commands: Arc<Scripted>) -> (Gateway, mpsc::UnboundedReceiver<GatewayNotice>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let config = GatewayConfig {
        kind: GatewayKind::Slurm,
        partition: None,
        account: None,
        slurm_conf: None,
        poll_interval: Duration::from_millis(20),
    };
    (Gateway::start("lyon", config, commands, tx).unwrap(), rx)
}

#[tokio::test]
async fn a_suspended_job_is_stopped_once_when_it_runs_and_continued_once_when_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let commands = Arc::new(Scripted::default());
    *commands.plan.lock().unwrap() = vec![vec![RemoteState::Pending, RemoteState::Pending, RemoteState::Running]];
    let (gateway, mut rx) = scripted_gateway(commands.clone());
    let (killer, id) = gateway.submit(key(0), &spec(dir.path()), 1).unwrap();
    // Suspended while still pending: nothing is sent until the job runs.
    killer.suspend();
    assert!(matches!(next(&mut rx).await, GatewayNotice::Started { .. }));
    let wait_for = |n: usize| {
        let commands = commands.clone();
        async move {
            for _ in 0..500 {
                if commands.signalled.lock().unwrap().len() >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    wait_for(1).await;
    killer.resume();
    wait_for(2).await;
    // A few more polls: nothing more is sent.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        *commands.signalled.lock().unwrap(),
        vec![(id.clone(), RemoteSignal::Stop), (id, RemoteSignal::Continue)]
    );
}

fn spec(dir: &Path) -> LaunchSpec {
    LaunchSpec {
        argv: vec!["true".into()],
        work_dir: dir.to_path_buf(),
        work_dir_made: false,
        env: vec![],
        wall_time_limit: None,
        kill_grace: Duration::from_secs(1),
        group_records: None,
        capture: None,
    }
}

fn key(index: u32) -> AttemptKey {
    (TaskRef { job: JobId::new("camp").unwrap(), index }, 1)
}

async fn next(rx: &mut mpsc::UnboundedReceiver<GatewayNotice>) -> GatewayNotice {
    tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a notice in time").expect("open")
}

#[tokio::test]
async fn a_job_reports_its_start_then_its_exit_code_an_outside_cancel_is_preempted_and_an_engine_cancel_killed() {
    let dir = tempfile::tempdir().unwrap();
    let commands = Arc::new(Scripted::default());
    *commands.plan.lock().unwrap() = vec![
        // Waits, runs, ends having written its exit code.
        vec![RemoteState::Pending, RemoteState::Running, RemoteState::Ended(RemoteEnd::Finished(None))],
        // Waits, then cancelled from outside (no exit code).
        vec![RemoteState::Pending, RemoteState::Ended(RemoteEnd::Killed)],
        // Waits until the engine cancels it.
        vec![RemoteState::Pending],
    ];
    let (gateway, mut rx) = scripted_gateway(commands.clone());
    let dirs: Vec<_> = (0..3).map(|i| dir.path().join(i.to_string())).collect();
    let (_k0, id0) = gateway.submit(key(0), &spec(&dirs[0]), 1).unwrap();
    std::fs::write(dirs[0].join(EXIT_CODE_FILE), "5\n").unwrap();
    let (_k1, _) = gateway.submit(key(1), &spec(&dirs[1]), 1).unwrap();
    let (k2, id2) = gateway.submit(key(2), &spec(&dirs[2]), 1).unwrap();
    k2.stop();
    let mut seen = Vec::new();
    while seen.len() < 4 {
        seen.push(match next(&mut rx).await {
            GatewayNotice::Started { key, remote_job } => format!("started {} {remote_job}", key.0.index),
            GatewayNotice::Ended { key, outcome } => format!("ended {} {}", key.0.index, outcome.end),
        });
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![
            "ended 0 exited with code 5".to_string(),
            "ended 1 killed or preempted by the resource manager".to_string(),
            "ended 2 stopped by the engine".to_string(),
            format!("started 0 {id0}"),
        ]
    );
    assert_eq!(*commands.cancelled.lock().unwrap(), vec![id2]);
}
