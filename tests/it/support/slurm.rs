//! A one-host Slurm per test: `support::slurm::start(dir)` writes a slurm.conf
//! under `dir` (its own state, spool, log and pid files, `jobcomp/filetxt`,
//! `Epilog=/bin/true`, `MinJobAge=2`, free ports), starts munged if none runs,
//! then slurmctld and slurmd with `-f <conf>`, waits until the node is idle, and
//! stops both daemons (by their pid files) when the returned value is dropped.
//!
//! Needs root (slurmd runs the jobs) and the Debian packages that
//! `.ci/install-slurm` installs. A test that cannot start Slurm FAILS (never
//! skips), saying what failed and how to install it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// CPUs the node declares (`SlurmdParameters=config_overrides` allows more than the hardware has).
pub const NODE_CPUS: u32 = 8;
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Slurm {
    pub dir: PathBuf,
    pub conf: PathBuf,
    pub jobcomp: PathBuf,
    pub partition: String,
    node: String,
}

fn free_port() -> u16 {
    super::nats::unused_port()
}

fn run(program: &str, args: &[&str], conf: &Path) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .env("SLURM_CONF", conf)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn hint() -> &'static str {
    "run ./.ci/install-slurm (as root) to install slurmctld, slurmd, slurm-client and munge"
}

fn ensure_munged() -> Result<(), String> {
    let check = || {
        Command::new("sh")
            .args(["-c", "munge -n | unmunge >/dev/null 2>&1"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if check() {
        return Ok(());
    }
    let status = Command::new("sh")
        .args([
            "-c",
            "install -d -o munge -g munge -m 0755 /run/munge && \
             install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge && \
             runuser -u munge -- /usr/sbin/munged",
        ])
        .status()
        .map_err(|e| format!("cannot start munged: {e}; {}", hint()))?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if check() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("munged does not answer (start exited {status}); {}", hint()))
}

/// Starts a private one-host Slurm under `dir`, or panics saying why.
pub fn start(dir: &Path) -> Slurm {
    try_start(dir).unwrap_or_else(|err| panic!("this test needs a one-host Slurm and none could be started: {err}"))
}

fn try_start(dir: &Path) -> Result<Slurm, String> {
    for exe in ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/bin/sbatch", "/usr/sbin/munged"] {
        if !Path::new(exe).exists() {
            return Err(format!("{exe} is missing; {}", hint()));
        }
    }
    ensure_munged()?;
    let dir = std::path::absolute(dir).map_err(|e| e.to_string())?.join("slurm");
    for sub in ["state", "spool", "log"] {
        std::fs::create_dir_all(dir.join(sub)).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let node = hostname()?;
    let partition = "gftest".to_string();
    let conf = dir.join("slurm.conf");
    let jobcomp = dir.join("jobcomp.txt");
    let text = format!(
        "ClusterName=gridfold{port_a}\n\
         SlurmctldHost={node}\n\
         SlurmUser=root\n\
         SlurmctldPort={port_a}\n\
         SlurmdPort={port_b}\n\
         StateSaveLocation={d}/state\n\
         SlurmdSpoolDir={d}/spool\n\
         SlurmctldPidFile={d}/slurmctld.pid\n\
         SlurmdPidFile={d}/slurmd.pid\n\
         SlurmctldLogFile={d}/log/slurmctld.log\n\
         SlurmdLogFile={d}/log/slurmd.log\n\
         ProctrackType=proctrack/linuxproc\n\
         TaskPlugin=task/none\n\
         SlurmdParameters=config_overrides\n\
         SelectType=select/cons_tres\n\
         SelectTypeParameters=CR_CPU\n\
         ReturnToService=2\n\
         JobCompType=jobcomp/filetxt\n\
         JobCompLoc={jobcomp}\n\
         Epilog=/bin/true\n\
         MinJobAge=2\n\
         SchedulerParameters=default_queue_depth=1000,batch_sched_delay=0\n\
         NodeName={node} CPUs={NODE_CPUS} State=UNKNOWN\n\
         PartitionName={partition} Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
        port_a = free_port(),
        port_b = free_port(),
        d = dir.display(),
        jobcomp = jobcomp.display(),
    );
    std::fs::write(&conf, text).map_err(|e| format!("cannot write {}: {e}", conf.display()))?;
    let slurm = Slurm { dir: dir.clone(), conf: conf.clone(), jobcomp, partition, node: node.clone() };
    let conf_s = conf.display().to_string();
    run("/usr/sbin/slurmctld", &["-f", &conf_s], &conf).map_err(|e| format!("{e}; {}", slurm.log_tails()))?;
    run("/usr/sbin/slurmd", &["-f", &conf_s], &conf).map_err(|e| format!("{e}; {}", slurm.log_tails()))?;
    let deadline = Instant::now() + START_TIMEOUT;
    let mut last = String::new();
    while Instant::now() < deadline {
        match run("sinfo", &["-h", "-n", &node, "-o", "%t"], &conf) {
            Ok(state) if state.trim() == "idle" => return Ok(slurm),
            Ok(state) if state.trim().starts_with("drain") => {
                let _ = run("scontrol", &["update", &format!("NodeName={node}"), "State=RESUME"], &conf);
                last = format!("node {}", state.trim());
            }
            Ok(state) => last = format!("node {}", state.trim()),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(format!("the node was not idle within {START_TIMEOUT:?} ({last}); {}", slurm.log_tails()))
}

fn hostname() -> Result<String, String> {
    let out = Command::new("hostname").output().map_err(|e| format!("cannot run hostname: {e}"))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl Slurm {
    /// Runs a Slurm client command against this Slurm, or panics.
    pub fn command(&self, program: &str, args: &[&str]) -> String {
        run(program, args, &self.conf).unwrap_or_else(|e| panic!("{e}"))
    }

    /// `(job id, state, name)` of every job `squeue` lists.
    pub fn queue(&self) -> Vec<(String, String, String)> {
        self.command("squeue", &["-h", "-o", "%i|%T|%j"])
            .lines()
            .filter_map(|line| {
                let mut it = line.split('|');
                Some((it.next()?.to_string(), it.next()?.to_string(), it.next()?.to_string()))
            })
            .collect()
    }

    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        for name in ["slurmctld.log", "slurmd.log"] {
            let text = std::fs::read_to_string(self.dir.join("log").join(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!("--- {name}\n{}\n", lines[lines.len().saturating_sub(15)..].join("\n")));
        }
        out
    }

    pub fn node(&self) -> &str {
        &self.node
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for pid_file in ["slurmd.pid", "slurmctld.pid"] {
            let Ok(text) = std::fs::read_to_string(self.dir.join(pid_file)) else { continue };
            let Ok(pid) = text.trim().parse::<i32>() else { continue };
            // SAFETY: kill only sends a signal to the daemon this Slurm started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            // SAFETY: signal 0 only probes.
            while Instant::now() < deadline && unsafe { libc::kill(pid, 0) } == 0 {
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}
