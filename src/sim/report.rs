//! What a simulation run reports: serialisable for `--json`, printable for people.

use std::collections::BTreeMap;
use std::fmt;

/// Why the run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Every job of the scenario ended (done, failed, cancelled, or refused at submission).
    AllJobsEnded,
    /// Virtual time passed the scenario's horizon first.
    Horizon,
    /// The log reached `RunOptions::entries_max` first.
    EntryCap,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::AllJobsEnded => "all jobs ended",
            Outcome::Horizon => "horizon reached",
            Outcome::EntryCap => "entry cap reached",
        }
    }
}

/// What the simulator did to the system, counted as it happened.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FaultCounts {
    pub engine_crashes: u64,
    pub engine_returns: u64,
    /// Runs that started only after `late_start_delay_ms`.
    pub late_starts: u64,
    /// Runs that ended in an injected task failure.
    pub task_failures: u64,
    /// Reports sent twice with the same envelope id.
    pub duplicates_same_id: u64,
    /// Reports sent once more, late, with a new envelope id.
    pub duplicates_new_id: u64,
    /// Those of them stored before the run stopped: each must be rejected by the fold.
    pub duplicates_new_id_stored: u64,
    /// Appends the log dropped as duplicates (same envelope id within its window).
    pub log_deduplicated: u64,
    /// Projector batches stored already (a restarted projector decided the same
    /// batch on the same sequence as its predecessor, whose publish landed).
    pub publishes_deduplicated: u64,
    /// Projector batches the fence refused.
    pub publishes_fenced: u64,
    /// Projector batches lost with the process that published them.
    pub publishes_lost: u64,
    /// Batches of a previous projector incarnation that reached the log after it died.
    pub publishes_after_restart: u64,
    pub orders_delivered: u64,
    /// Orders an engine had already seen (redelivered by a restarted projector).
    pub orders_ignored_as_seen: u64,
    /// Orders that reached an engine that had crashed.
    pub orders_to_dead_engines: u64,
    /// Runs an engine stopped on a `Cancel`.
    pub runs_cancelled: u64,
    /// Of those, redundant copies stopped because another copy's result won.
    pub redundant_runs_stopped: u64,
    /// Runs an engine killed on a `Preempt` (Techila's Lowest projects).
    pub runs_preempted: u64,
    /// Runs that failed by an engine's `fails_jobs` rule (not counted in `task_failures`).
    pub rule_failures: u64,
    /// Library syncs engines carried out, and those that failed (`sync_failure_per_million`).
    pub library_syncs_run: u64,
    pub library_syncs_failed: u64,
    /// Runs an engine suspended on a `Suspend`, and resumed on a `Resume`.
    pub runs_suspended: u64,
    pub runs_resumed: u64,
}

/// GridServer's part of the run, as the fold took it: orders that applied and
/// reports it accepted, each sequence counted once.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GridServerCounts {
    pub libraries_published: u64,
    /// `MarkUnschedulable` orders, by reason (`library-not-published`, ...).
    pub unschedulable_by_reason: BTreeMap<String, u64>,
    /// `SyncLibrary` orders.
    pub library_syncs_ordered: u64,
    /// `LibrarySynced` and `LibrarySyncFailed` reports.
    pub library_syncs_reported: u64,
    pub library_sync_failures_reported: u64,
    /// `Blacklist` orders.
    pub blacklistings: u64,
    /// `Reschedule` orders (a redundant copy each), by reason: `task-max-time`,
    /// `percent-completed`, `average`, `std-dev`.
    pub reschedules_by_reason: BTreeMap<String, u64>,
    /// `Cancel` orders of copies whose task had its result (`cancel_redundant_on_first_result`).
    pub redundant_copies_cancelled: u64,
    /// Results of copies after their task already had one: ignored, the first won.
    pub redundant_results_ignored: u64,
    /// Copies rescheduled but dropped before dispatch, their task having had its
    /// result first: with the copies dispatched, they add up to the reschedules.
    pub redundant_copies_dropped: u64,
    /// `FailDependent` orders for one task, and for a whole job.
    pub tasks_failed_by_dependency: u64,
    pub jobs_failed_by_dependency: u64,
    /// `TaskCompleted` reports the fold accepted (first results and ignored ones).
    pub completions_accepted: u64,
}

/// Every task of every job, as the final state says it ended, checked against
/// the counters that saw each ending and against what the engines reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TaskCheck {
    pub tasks: u64,
    pub done: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Waiting, dispatched or running when the run stopped.
    pub unended: u64,
    /// What does not add up; empty when every task ended exactly once.
    pub problems: Vec<String>,
}

impl TaskCheck {
    pub fn holds(&self) -> bool {
        self.problems.is_empty()
    }
}

/// The result of one run. Times are virtual ms; time 0 is the start of the run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct SimReport {
    pub seed: u64,
    pub outcome: Outcome,
    /// Virtual time the run stopped at.
    pub stopped_at_ms: u64,
    pub jobs: u64,
    pub jobs_done: u64,
    pub jobs_failed: u64,
    pub jobs_cancelled: u64,
    /// Submissions the fold refused (the job never existed).
    pub jobs_refused: u64,
    /// Jobs still active, or not yet submitted, when the run stopped.
    pub jobs_unfinished: u64,
    /// First submission to the last job's end (to the stop, if a job had not ended).
    pub makespan_ms: u64,
    /// Busy slot-time over the slot-time of engines up during the makespan, in permille.
    /// Above 1000 when late runs kept going on slots the projector had freed.
    pub utilisation_permille: u64,
    /// Each job owner's share of the busy slot-time of the makespan, in
    /// permille: what Grid Engine's share tree and functional policy divide.
    pub busy_share_by_owner_permille: BTreeMap<String, u64>,
    pub tasks_done: u64,
    pub tasks_failed: u64,
    pub attempts_failed: u64,
    pub requeues: u64,
    pub engines_lost: u64,
    pub dispatches: u64,
    /// Over tasks done: submission to the start of the attempt that completed it.
    pub wait_ms_mean: u64,
    pub wait_ms_max: u64,
    pub entries: u64,
    pub order_batches: u64,
    /// Entries the fold rejected (in part, for a batch with an order that did not apply).
    pub rejected_entries: u64,
    pub rejections_by_kind: BTreeMap<String, u64>,
    /// Orders folded but not applied, by problem (the detail of `order-not-applicable`).
    pub order_problems: BTreeMap<String, u64>,
    pub projector_restarts: u32,
    pub projector_restarts_planned: u32,
    pub snapshots_taken: u64,
    pub faults: FaultCounts,
    pub gridserver: GridServerCounts,
    pub task_check: TaskCheck,
    /// The hash chain over the whole log, as live and replayed (they are checked equal).
    pub chain_digest: String,
    /// The digest of the final state, as live and replayed (they are checked equal).
    pub state_digest: String,
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03} s", ms / 1000, ms % 1000)
}

impl fmt::Display for SimReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "seed {}: {} at {} of virtual time", self.seed, self.outcome.as_str(), seconds(self.stopped_at_ms))?;
        writeln!(
            f,
            "  jobs         {} (done {}, failed {}, cancelled {}, refused {}, unfinished {})",
            self.jobs, self.jobs_done, self.jobs_failed, self.jobs_cancelled, self.jobs_refused, self.jobs_unfinished
        )?;
        writeln!(
            f,
            "  makespan     {}, utilisation {}.{:03}",
            seconds(self.makespan_ms),
            self.utilisation_permille / 1000,
            self.utilisation_permille % 1000
        )?;
        writeln!(
            f,
            "  tasks        {} done, {} failed; {} attempts failed, {} requeues, {} dispatches, {} engines lost",
            self.tasks_done, self.tasks_failed, self.attempts_failed, self.requeues, self.dispatches, self.engines_lost
        )?;
        if self.busy_share_by_owner_permille.len() > 1 {
            let shares: Vec<String> = self
                .busy_share_by_owner_permille
                .iter()
                .map(|(owner, permille)| format!("{owner} {}.{}%", permille / 10, permille % 10))
                .collect();
            writeln!(f, "  owners       busy slot-time {}", shares.join(", "))?;
        }
        writeln!(f, "  wait         mean {}, max {}", seconds(self.wait_ms_mean), seconds(self.wait_ms_max))?;
        let kinds: Vec<String> = self.rejections_by_kind.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
        writeln!(
            f,
            "  log          {} entries, {} order batches, {} rejected entries{}",
            self.entries,
            self.order_batches,
            self.rejected_entries,
            if kinds.is_empty() { String::new() } else { format!(" ({})", kinds.join(", ")) }
        )?;
        if !self.order_problems.is_empty() {
            let problems: Vec<String> = self.order_problems.iter().map(|(kind, n)| format!("{kind} {n}")).collect();
            writeln!(f, "  orders       not applied: {}", problems.join(", "))?;
        }
        let c = &self.faults;
        writeln!(
            f,
            "  engines      {} crashes, {} returns, {} late starts, {} task failures ({} more by fails_jobs), \
             {} runs cancelled ({} redundant copies), {} preempted, {} library syncs run ({} failed)",
            c.engine_crashes,
            c.engine_returns,
            c.late_starts,
            c.task_failures,
            c.rule_failures,
            c.runs_cancelled,
            c.redundant_runs_stopped,
            c.runs_preempted,
            c.library_syncs_run,
            c.library_syncs_failed
        )?;
        if c.runs_suspended > 0 || c.runs_resumed > 0 {
            writeln!(f, "  suspensions  {} runs suspended, {} resumed", c.runs_suspended, c.runs_resumed)?;
        }
        writeln!(
            f,
            "  delivery     {} reports sent twice (same id), {} late with a new id ({} stored), {} deduplicated by the log; \
             {} orders delivered, {} ignored as seen, {} to dead engines",
            c.duplicates_same_id,
            c.duplicates_new_id,
            c.duplicates_new_id_stored,
            c.log_deduplicated,
            c.orders_delivered,
            c.orders_ignored_as_seen,
            c.orders_to_dead_engines
        )?;
        writeln!(
            f,
            "  projector    {} of {} restarts, {} snapshots; publishes: {} fenced, {} deduplicated, {} lost, {} landed after a restart",
            self.projector_restarts,
            self.projector_restarts_planned,
            self.snapshots_taken,
            c.publishes_fenced,
            c.publishes_deduplicated,
            c.publishes_lost,
            c.publishes_after_restart
        )?;
        let g = &self.gridserver;
        let listed = |counts: &BTreeMap<String, u64>| {
            let listed: Vec<String> = counts.iter().map(|(reason, n)| format!("{reason} {n}")).collect();
            if listed.is_empty() { "none".to_string() } else { listed.join(", ") }
        };
        writeln!(
            f,
            "  gridserver   {} libraries published, {} syncs ordered ({} synced, {} failed); {} blacklistings; \
             {} tasks and {} jobs failed by dependency; jobs flagged unschedulable: {}",
            g.libraries_published,
            g.library_syncs_ordered,
            g.library_syncs_reported,
            g.library_sync_failures_reported,
            g.blacklistings,
            g.tasks_failed_by_dependency,
            g.jobs_failed_by_dependency,
            listed(&g.unschedulable_by_reason)
        )?;
        writeln!(
            f,
            "  redundancy   reschedules: {}; {} copies dropped before dispatch, {} cancelled on a first result, {} redundant results ignored",
            listed(&g.reschedules_by_reason),
            g.redundant_copies_dropped,
            g.redundant_copies_cancelled,
            g.redundant_results_ignored
        )?;
        let t = &self.task_check;
        writeln!(
            f,
            "  task check   {} tasks: {} done, {} failed, {} cancelled, {} unended; {}",
            t.tasks,
            t.done,
            t.failed,
            t.cancelled,
            t.unended,
            if t.holds() { "each ended once".to_string() } else { t.problems.join("; ") }
        )?;
        writeln!(f, "  chain        {}", self.chain_digest)?;
        write!(f, "  state        {}", self.state_digest)
    }
}
