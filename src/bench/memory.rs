//! `gridfold bench --memory`: what a held task costs the projector.
//!
//! Folds `--jobs` jobs of `--tasks` tasks in all into a fresh state in this
//! process (the fold the projector runs, no broker: nothing else allocates
//! meanwhile), reading this process's resident memory (`VmRSS`) before and
//! after, then once more while holding the state's snapshot (the projector
//! writes one every `snapshot_every_entries`, and a state digest serialises
//! the state the same way). Each job's tasks are counted (`tasks = N`, the
//! issue's 113-byte event) or, with `--memory-listed`, listed with one
//! parameter of 8 bytes each (what a job file's `[[task]]` tables give).
//! Entries are made and dropped one at a time, and the allocator gives back
//! what they held before each reading (`malloc_trim`), so only what the state
//! holds is measured.
//! The policy's caps are lifted for the run: it measures what they bound.

use serde::Serialize;

use super::soak::rss_kib;
use crate::core::event::{CapsPolicy, Entry, Envelope, Event, JobSpec, Payload, Policy, TaskSet, TaskTemplate};
use crate::core::fold::fold;
use crate::core::ids::{JobId, Seq};
use crate::core::state::State;

#[derive(Debug, Clone, Serialize)]
pub struct MemoryReport {
    pub jobs: u32,
    pub tasks: u64,
    /// Tasks listed with one parameter each, rather than counted.
    pub listed: bool,
    pub rss_before_kib: u64,
    pub rss_held_kib: u64,
    /// While the snapshot of the state is held besides it.
    pub rss_with_snapshot_kib: u64,
    pub snapshot_bytes: u64,
    /// (held − before) / tasks.
    pub bytes_per_task: f64,
    /// (with snapshot − before) / tasks: the projector's peak per held task.
    pub peak_bytes_per_task: f64,
    pub rejected: u64,
}

/// This process's resident memory, once the allocator has given back what
/// it holds free (the decoded events, the job specs), in KiB.
fn resident_kib() -> u64 {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free heap memory to the system.
    unsafe {
        libc::malloc_trim(0);
    }
    rss_kib()
}

fn entry(seq: u64, event: Event) -> Entry {
    // As their publisher would: a submission on its owner's own subject.
    let origin = crate::core::subject::default_publisher(&event);
    let subject = crate::wire::subject_for(&event, &origin);
    Entry {
        seq: Seq(seq),
        time_ms: 1_000 + seq,
        origin,
        subject,
        payload: Payload::Event(Envelope { id: [0; 16], source: "bench".into(), event }),
        stored: Vec::new(),
        seal: None,
    }
}

fn job(n: u32, tasks: u32, listed: bool) -> JobSpec {
    let tasks = if listed {
        TaskSet::List((0..tasks).map(|index| [("frame".to_string(), format!("{index:08}"))].into()).collect())
    } else {
        TaskSet::Count(tasks)
    };
    JobSpec {
        id: JobId::new(&format!("held-{n}")).expect("a valid id"),
        owner: format!("user{}", n % 16),
        project: "bench".into(),
        queue: "default".into(),
        priority: 0,
        // No engine has these: the tasks wait, held, as in the issue.
        requirements: "os == \"none\"".into(),
        max_attempts: 1,
        wall_time_limit_ms: 0,
        slots_per_task: 1,
        template: TaskTemplate { argv: vec!["run".into(), "{frame}".into()], params: Default::default() },
        tasks,
        options: Default::default(),
        task_conditions: Default::default(),
    }
}

/// Folds the jobs and measures (see the module docs).
pub fn measure(jobs: u32, tasks: u64, listed: bool) -> MemoryReport {
    let per_job = u32::try_from(tasks / u64::from(jobs)).unwrap_or(u32::MAX);
    let tasks = u64::from(per_job) * u64::from(jobs);
    let lifted = CapsPolicy { max_jobs_per_user: u32::MAX, max_jobs: u32::MAX, max_tasks_per_user: u64::MAX, max_tasks: u64::MAX };
    let mut state = State::new();
    let rss_before_kib = resident_kib();
    let mut rejected = 0;
    fold(&mut state, &entry(1, Event::PolicySet(Policy { caps: lifted, ..Policy::default() })));
    for n in 0..jobs {
        let submitted = entry(u64::from(n) + 2, Event::JobSubmitted(job(n, per_job, listed)));
        rejected += u64::from(!fold(&mut state, &submitted).is_empty());
    }
    let rss_held_kib = resident_kib();
    let snapshot = state.to_snapshot();
    let rss_with_snapshot_kib = resident_kib();
    let per_task = |kib: u64| (kib.saturating_sub(rss_before_kib) * 1024) as f64 / tasks.max(1) as f64;
    let report = MemoryReport {
        jobs,
        tasks,
        listed,
        rss_before_kib,
        rss_held_kib,
        rss_with_snapshot_kib,
        snapshot_bytes: snapshot.len() as u64,
        bytes_per_task: per_task(rss_held_kib),
        peak_bytes_per_task: per_task(rss_with_snapshot_kib),
        rejected,
    };
    drop(snapshot);
    drop(state);
    report
}

pub fn print_memory(report: &MemoryReport) {
    let form = if report.listed { "listed, one 8-byte parameter each" } else { "counted" };
    println!("held tasks: {} jobs, {} tasks ({form}), {} rejected", report.jobs, report.tasks, report.rejected);
    println!(
        "  RSS {} KiB before, {} KiB held, {} KiB with the snapshot ({} bytes) held too",
        report.rss_before_kib, report.rss_held_kib, report.rss_with_snapshot_kib, report.snapshot_bytes
    );
    println!(
        "  per held task: {:.1} bytes in the state, {:.1} bytes at the snapshot's peak",
        report.bytes_per_task, report.peak_bytes_per_task
    );
}
