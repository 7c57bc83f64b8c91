//! What became of each attempt of a job's tasks: the record behind `gridfold task`
//! and `gridfold tasks` (the `sacct`/`qacct` of gridfold).
//!
//! Kept in the folded state rather than found by scanning the log, because the
//! projector answers queries from its state alone (a scan from a job's submission
//! would cost as much as the log since then, and the projector holds no reader
//! for it between batches); and because replay then rebuilds it like everything
//! else. It is bounded, so the state still follows the work in flight:
//!
//! - a record lives in its [`super::Job`] and leaves the state with it when the
//!   job is retired (`Policy::job_retention_ms` after it ended);
//! - a task keeps its newest [`ATTEMPTS_KEPT_PER_TASK`] attempts; older ones are
//!   only counted (`forgotten`);
//! - the text of reports (a completed attempt's result, at most 64 KiB; a failed
//!   one's error tail, at most 4 KiB) is kept while the job's kept text stays
//!   within [`JOB_ATTEMPT_BYTES_KEPT_MAX`]; past that, and for attempts forgotten,
//!   an attempt keeps its figures and the sequence of its report (`report_seq`), so
//!   the text can still be read from the log.
//!
//! Invariant (asserted on every change): `bytes_kept` is the sum of the text kept
//! by every record, and at most [`JOB_ATTEMPT_BYTES_KEPT_MAX`]; a task holds at
//! most [`ATTEMPTS_KEPT_PER_TASK`] records, in dispatch order.
//!
//! # Output bounds
//! An attempt's whole stdout and stderr go to the object store, never the log,
//! each at most the attempt's `output_bytes_max`, decided here when the fold
//! applies its `Dispatch` and carried to the engine in the order (so replay and
//! every reader agree on it): the smaller of the policy's `task_bytes_max` and
//! the job's budget not yet committed (`job_bytes_max` less what earlier
//! attempts were given) shared among its waiting tasks, halved for the two
//! streams. What an attempt is given stays committed whatever it stores, so a
//! job's attempts together never store more than `job_bytes_max`, however many
//! attempts, copies and requeues it takes: the first tasks of a wide job get a
//! fair share, not the whole budget, and the last waiting one gets what is left.
//!
//! Only the fold writes it, from entries it applied: a `Dispatch` order, a
//! `TaskStarted`, `TaskCompleted` or `TaskFailed` report. An attempt ended any
//! other way (cancelled, requeued, preempted, its engine lost) keeps no end here:
//! readers tell it by the attempt no longer being live.



use crate::core::event::{FailureKind, OutputPolicy, StoredStreams};
use crate::core::ids::{Attempt, EngineIdx};
use std::collections::{BTreeMap, VecDeque};

/// Attempts kept per task, newest last.
pub const ATTEMPTS_KEPT_PER_TASK: usize = 8;
/// Most bytes of report text (results and error tails) kept per job.
pub const JOB_ATTEMPT_BYTES_KEPT_MAX: u64 = 4 * 1024 * 1024;

/// How an attempt ended, as far as its reports say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum AttemptEnd {
    /// No report of its end (still live, or ended by an order).
    None,
    Completed,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttemptRecord {
    pub attempt: Attempt,
    pub engine: EngineIdx,
    /// The sequence of the batch that dispatched it, and the one its decisions were based on.
    pub dispatch_seq: u64,
    pub based_on_seq: u64,
    pub dispatched_ms: u64,
    pub started_ms: Option<u64>,
    pub ended_ms: Option<u64>,
    pub report_seq: Option<u64>,
    pub end: AttemptEnd,
    pub exit_code: Option<i32>,
    pub failure_kind: Option<FailureKind>,
    pub cpu_ms: Option<u64>,
    pub wall_ms: Option<u64>,
    /// The result (completed) or error tail (failed), when kept.
    pub text: Option<Vec<u8>>,
    /// The size of the report's text on the log.
    pub text_bytes: u32,
    /// Most bytes of stdout, and as many of stderr, the engine stores for it.
    pub output_bytes_max: u64,
    /// A gateway engine's job id in its resource manager (`TaskStarted.remote_job`,
    /// at most `REMOTE_JOB_BYTES_MAX` bytes); empty for a local process.
    #[serde(default)]
    pub remote_job: String,
    /// What its end report says its engine stored of stdout and stderr
    /// (length and blake3 of each; fixed size).
    #[serde(default)]
    pub stored: StoredStreams,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskAttempts {
    /// Older attempts no longer kept.
    pub forgotten: u32,
    pub records: VecDeque<AttemptRecord>,
}

/// A job's attempt records, by task index (only tasks dispatched at least once).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AttemptLog {
    tasks: BTreeMap<u32, TaskAttempts>,
    /// Bytes of report text kept, over every record.
    bytes_kept: u64,
    /// Bytes of stored output given to the job's attempts so far, both streams.
    output_committed: u64,
}

/// Where and when an attempt was dispatched.
#[derive(Debug, Clone, Copy)]
pub struct Dispatched {
    pub attempt: Attempt,
    pub engine: EngineIdx,
    pub dispatch_seq: u64,
    pub based_on_seq: u64,
    pub dispatched_ms: u64,
    /// What it may store of each stream (see [`AttemptLog::commit_output`]).
    pub output_bytes_max: u64,
}

/// What an attempt's final report said.
#[derive(Debug, Clone, Copy)]
pub struct Reported<'a> {
    pub seq: u64,
    pub time_ms: u64,
    pub end: AttemptEnd,
    pub exit_code: Option<i32>,
    pub failure_kind: Option<FailureKind>,
    pub cpu_ms: Option<u64>,
    pub wall_ms: Option<u64>,
    pub text: &'a [u8],
    pub stored: StoredStreams,
}

impl AttemptLog {
    pub fn task(&self, index: u32) -> Option<&TaskAttempts> {
        self.tasks.get(&index)
    }

    /// The newest kept attempt of a task.
    pub fn newest(&self, index: u32) -> Option<&AttemptRecord> {
        self.tasks.get(&index).and_then(|t| t.records.back())
    }

    pub fn bytes_kept(&self) -> u64 {
        self.bytes_kept
    }

    pub fn output_committed(&self) -> u64 {
        self.output_committed
    }

    /// The output bound of an attempt dispatched now, while `waiting` of the
    /// job's tasks (this one included) wait for theirs; commits it (both
    /// streams) against the job's budget. See the module doc.
    pub fn commit_output(&mut self, policy: &OutputPolicy, waiting: u32) -> u64 {
        let before = self.output_committed;
        let free = policy.job_bytes_max.saturating_sub(before);
        let bound = (free / 2 / u64::from(waiting.max(1))).min(policy.task_bytes_max);
        self.output_committed = before + 2 * bound;
        assert!(
            self.output_committed <= before.max(policy.job_bytes_max),
            "a job's attempts are given at most its output budget"
        );
        bound
    }

    pub fn dispatched(&mut self, index: u32, dispatched: Dispatched) {
        let task = self.tasks.entry(index).or_default();
        if task.records.len() == ATTEMPTS_KEPT_PER_TASK {
            let oldest = task.records.pop_front().expect("a full task has records");
            self.bytes_kept -= oldest.text.map_or(0, |t| t.len() as u64);
            task.forgotten = task.forgotten.saturating_add(1);
        }
        task.records.push_back(AttemptRecord {
            attempt: dispatched.attempt,
            engine: dispatched.engine,
            dispatch_seq: dispatched.dispatch_seq,
            based_on_seq: dispatched.based_on_seq,
            dispatched_ms: dispatched.dispatched_ms,
            started_ms: None,
            ended_ms: None,
            report_seq: None,
            end: AttemptEnd::None,
            exit_code: None,
            failure_kind: None,
            cpu_ms: None,
            wall_ms: None,
            text: None,
            text_bytes: 0,
            output_bytes_max: dispatched.output_bytes_max,
            remote_job: String::new(),
            stored: StoredStreams::default(),
        });
        assert!(task.records.len() <= ATTEMPTS_KEPT_PER_TASK, "a task keeps at most {ATTEMPTS_KEPT_PER_TASK} attempts");
    }

    pub fn started(&mut self, index: u32, attempt: Attempt, time_ms: u64, remote_job: &str) {
        if let Some(record) = self.record_mut(index, attempt)
            && record.started_ms.is_none()
        {
            record.started_ms = Some(time_ms);
            record.remote_job = remote_job.to_string();
        }
    }

    pub fn reported(&mut self, index: u32, attempt: Attempt, report: Reported<'_>) {
        let room = JOB_ATTEMPT_BYTES_KEPT_MAX - self.bytes_kept;
        let Some(record) = self.tasks.get_mut(&index).and_then(|t| t.records.iter_mut().rev().find(|r| r.attempt == attempt))
        else {
            return;
        };
        let keep = !report.text.is_empty() && (report.text.len() as u64) <= room;
        let freed = record.text.take().map_or(0, |t| t.len() as u64);
        record.report_seq = Some(report.seq);
        record.ended_ms = Some(report.time_ms);
        record.end = report.end;
        record.exit_code = report.exit_code;
        record.failure_kind = report.failure_kind;
        record.cpu_ms = report.cpu_ms;
        record.wall_ms = report.wall_ms;
        record.text_bytes = report.text.len() as u32;
        record.text = keep.then(|| report.text.to_vec());
        record.stored = report.stored;
        self.bytes_kept = self.bytes_kept - freed + if keep { report.text.len() as u64 } else { 0 };
        assert!(self.bytes_kept <= JOB_ATTEMPT_BYTES_KEPT_MAX, "a job keeps at most {JOB_ATTEMPT_BYTES_KEPT_MAX} bytes of text");
    }

    /// The kept record of one attempt of a task.
    pub fn record(&self, index: u32, attempt: Attempt) -> Option<&AttemptRecord> {
        self.tasks.get(&index).and_then(|t| t.records.iter().rev().find(|r| r.attempt == attempt))
    }

    fn record_mut(&mut self, index: u32, attempt: Attempt) -> Option<&mut AttemptRecord> {
        self.tasks.get_mut(&index).and_then(|t| t.records.iter_mut().rev().find(|r| r.attempt == attempt))
    }

    /// Asserts the module's invariants.
    pub fn check_invariants(&self) {
        let mut bytes = 0u64;
        for task in self.tasks.values() {
            assert!(task.records.len() <= ATTEMPTS_KEPT_PER_TASK, "a task keeps at most {ATTEMPTS_KEPT_PER_TASK} attempts");
            bytes += task.records.iter().map(|r| r.text.as_ref().map_or(0, |t| t.len() as u64)).sum::<u64>();
        }
        assert_eq!(bytes, self.bytes_kept, "bytes_kept is the text kept");
        assert!(self.bytes_kept <= JOB_ATTEMPT_BYTES_KEPT_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dispatched(attempt: Attempt) -> Dispatched {
        Dispatched { attempt, engine: EngineIdx(0), dispatch_seq: 10, based_on_seq: 9, dispatched_ms: 1_000, output_bytes_max: 0 }
    }

    fn failed(text: &[u8]) -> Reported<'_> {
        Reported {
            seq: 20,
            time_ms: 2_000,
            end: AttemptEnd::Failed,
            exit_code: Some(3),
            failure_kind: Some(FailureKind::NonZeroExit),
            cpu_ms: None,
            wall_ms: None,
            text,
            stored: StoredStreams::default(),
        }
    }

    #[test]
    fn a_task_keeps_its_newest_attempts_and_counts_the_forgotten() {
        let mut log = AttemptLog::default();
        for attempt in 1..=(ATTEMPTS_KEPT_PER_TASK as u32 + 3) {
            log.dispatched(0, dispatched(attempt));
            log.reported(0, attempt, failed(b"boom"));
            log.check_invariants();
        }
        let task = log.task(0).unwrap();
        assert_eq!(task.forgotten, 3);
        assert_eq!(task.records.len(), ATTEMPTS_KEPT_PER_TASK);
        assert_eq!(task.records.front().unwrap().attempt, 4);
        assert_eq!(log.bytes_kept(), 4 * ATTEMPTS_KEPT_PER_TASK as u64);
    }

    #[test]
    fn text_past_the_job_budget_is_not_kept_but_its_size_and_sequence_are() {
        let mut log = AttemptLog::default();
        let big = vec![b'x'; 64 * 1024];
        let n = (JOB_ATTEMPT_BYTES_KEPT_MAX / big.len() as u64) as u32;
        for index in 0..=n {
            log.dispatched(index, dispatched(1));
            log.reported(index, 1, failed(&big));
        }
        log.check_invariants();
        assert_eq!(log.bytes_kept(), JOB_ATTEMPT_BYTES_KEPT_MAX);
        let last = log.newest(n).unwrap();
        assert_eq!((last.text.is_none(), last.text_bytes, last.report_seq), (true, 64 * 1024, Some(20)));
    }

    #[test]
    fn a_jobs_attempts_are_given_fair_shares_and_never_more_than_its_output_budget() {
        let policy = OutputPolicy { task_bytes_max: 16 << 20, job_bytes_max: 1_000_000, work_dir_retention_ms: 1 };
        let mut log = AttemptLog::default();
        // Ten waiting tasks: the first gets a tenth of the budget, halved for two streams.
        assert_eq!(log.commit_output(&policy, 10), 50_000);
        assert_eq!(log.output_committed(), 100_000);
        // Retries, copies and requeues draw on what is left, never past the budget.
        let mut given = 100_000;
        for waiting in (1..=9).rev().chain(std::iter::repeat_n(1, 50)) {
            given += 2 * log.commit_output(&policy, waiting);
            assert!(log.output_committed() <= policy.job_bytes_max);
        }
        assert_eq!(given, log.output_committed());
        assert!(log.output_committed() >= policy.job_bytes_max - 1, "the last waiting task takes what is left");
        assert_eq!(log.commit_output(&policy, 1), 0, "an exhausted budget gives nothing");
        // The per-task bound caps a share larger than it.
        let mut small = AttemptLog::default();
        let capped = OutputPolicy { task_bytes_max: 1_000, ..policy.clone() };
        assert_eq!(small.commit_output(&capped, 1), 1_000);
        // A budget lowered below what was committed gives nothing more and breaks nothing.
        let lowered = OutputPolicy { job_bytes_max: 10, ..policy };
        assert_eq!(log.commit_output(&lowered, 0), 0);
    }

    #[test]
    fn a_report_of_an_unknown_or_forgotten_attempt_changes_nothing() {
        let mut log = AttemptLog::default();
        log.reported(5, 1, failed(b"stale"));
        log.started(5, 1, 1, "");
        assert_eq!(log, AttemptLog::default());
    }
}
