//! The [`State`] itself: its tables and counters, and the queries that read
//! them. The verbs that change it are in the files beside this one, each an
//! `impl State` for what it does (`engines.rs`, `jobs.rs`, `tasks.rs`, ...).

use crate::core::digest::Digest;
use crate::core::event::{LibraryInfo, LibraryRef, Policy};
use crate::core::expr::Expr;
use crate::core::ids::{Attempt, CategoryIdx, EngineId, EngineIdx, JobId, JobIdx, Seq, TaskKey, TaskRef};
use crate::core::reject::{REJECTED_TEXT_BYTES_MAX, Rejected, Rejection, truncated};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use super::accounts::Accounts;
use super::bookings::{CompanionEnd, ParallelBookings};
use super::category::Category;
use super::controls::Suspensions;
use super::engine::Engine;
use super::index::{EngineSet, LiveAttempts, NameMap, SilenceOrder, SortedDeque};
use super::job::{Job, JobRank, TaskState, TaskStatus};
use super::job_slots::{JobSlots, Jobs, RetiredJob, Usage};
use super::live::LiveAttempt;

/// Bounded memory of rejections: the log keeps them all, the state the newest.
pub const RECENT_REJECTIONS_MAX: usize = 256;

#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Rejections {
    pub total: u64,
    pub by_kind: BTreeMap<String, u64>,
    pub recent: VecDeque<Rejected>,
}

/// Counters over the whole history, for `stat` and the simulator's report.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Totals {
    pub entries: u64,
    pub order_batches: u64,
    pub dispatches: u64,
    pub tasks_done: u64,
    pub tasks_failed: u64,
    pub attempts_failed: u64,
    pub requeues: u64,
    pub engines_lost: u64,
    /// Ended jobs that left the state after their retention.
    pub jobs_retired: u64,
    /// Sum over every attempt's start (retries included) of (start - job submission)
    /// in ms; an attempt completed with no start report counts as of its completion.
    pub wait_ms_sum: u64,
    pub wait_ms_max: u64,
    /// How many waits `wait_ms_sum` adds up.
    pub waits_counted: u64,
    /// Sum over completed attempts of their wall time in ms.
    pub busy_ms_sum: u64,
}

/// Everything the log has said, folded. See the module docs for its invariants.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct State {
    pub last_seq: Seq,
    /// Log time of the newest entry folded: the core's only clock.
    pub now_ms: u64,
    pub first_ms: Option<u64>,
    pub chain: Digest,
    pub policy: Policy,
    /// The sequence of the `PolicySet` that set the policy in force; 0 while the default holds.
    pub policy_seq: Seq,
    /// The jobs held, in slots a retired job vacates (see [`JobSlots`]).
    pub(crate) jobs: JobSlots,
    /// Held jobs by id (retired ones are not in it).
    pub(crate) job_index: NameMap<JobId, JobIdx>,
    /// Ended jobs by the log time their retention counts from (their end, or
    /// the time a due retirement was put off), then index: the retirement queue.
    pub(crate) retiring: BTreeSet<(u64, JobIdx)>,
    /// What is remembered of retired jobs (the newest [`RETIRED_JOBS_MAX`]).
    pub(crate) retired_jobs: BTreeMap<JobId, RetiredJob>,
    /// The ids of `retired_jobs`, oldest retirement first (the next forgotten).
    pub(crate) retired_order: VecDeque<JobId>,
    /// Retired jobs' figures by owner.
    pub(crate) usage_by_user: BTreeMap<String, Usage>,
    /// Retired jobs' figures by project.
    pub(crate) usage_by_project: BTreeMap<String, Usage>,
    pub(crate) engines: Vec<Engine>,
    pub(crate) engine_index: NameMap<EngineId, EngineIdx>,
    /// Requirement categories in slots: a category no held job uses is dropped
    /// and its slot reused, as job slots are (see [`JobSlots`]).
    pub(crate) categories: Vec<Category>,
    pub(crate) category_index: NameMap<(String, u32, Option<LibraryRef>), CategoryIdx>,
    /// Vacant category slots, vacated longest ago first.
    pub(crate) categories_vacant: VecDeque<CategoryIdx>,
    /// Active jobs with waiting tasks, in the order `schedule` examines them.
    pub(crate) runnable: BTreeSet<JobRank>,
    /// Logged-in engines with at least one free slot.
    pub(crate) free_engines: EngineSet,
    /// Each live task's first live attempt (the one a task without copies has).
    pub(crate) live: LiveAttempts,
    /// Redundant copies: live attempts beside the one in `live`.
    pub(crate) copies: BTreeMap<(TaskKey, Attempt), LiveAttempt>,
    /// Companion runs ended by the entry being folded: emptied by the fold
    /// into what it returns, so never more than one entry's worth, never stored.
    #[serde(skip)]
    pub(crate) companion_ends: Vec<CompanionEnd>,
    /// Dispatched, not yet started attempts by the log time they were dispatched.
    pub(crate) dispatched_since: SortedDeque<(u64, TaskKey, Attempt)>,
    /// Logged-in engines by the log time of their last accepted event (then index).
    pub(crate) engine_silence: SilenceOrder,
    /// Live attempts that await a Cancel: of jobs that have ended, and redundant
    /// copies of tasks that have their result when the job cancels them at once.
    pub(crate) to_cancel: BTreeSet<(TaskKey, Attempt)>,
    /// Published grid libraries.
    pub libraries: BTreeMap<LibraryRef, LibraryInfo>,
    /// The engine tiers of the policy, compiled (rebuilt after a snapshot loads).
    #[serde(skip)]
    pub(crate) tier_exprs: Vec<Expr>,
    /// Jobs that wait for each job to end.
    pub(crate) dependents: BTreeMap<JobIdx, Vec<JobIdx>>,
    /// Active jobs whose failed dependency awaits a FailDependent order.
    pub(crate) failing_dependents: BTreeSet<JobIdx>,
    /// Active jobs with tasks that depend on other tasks.
    pub(crate) jobs_with_task_dependencies: BTreeSet<JobIdx>,
    /// Active jobs that reschedule long tasks redundantly.
    pub(crate) redundancy_jobs: BTreeSet<JobIdx>,
    /// Active jobs whose tasks span a site (`span = "site"`), so that a run's
    /// check for site tasks no site could hold looks at these rather than at
    /// every job of every category. Derived from the jobs, so not in a
    /// snapshot: rebuilt when one loads, recounted by `check_invariants`.
    #[serde(skip)]
    pub(crate) site_jobs: BTreeSet<JobIdx>,
    /// (job, engine) that reached the job's blacklisting threshold, awaiting a Blacklist order.
    pub(crate) pending_blacklists: BTreeSet<(JobIdx, EngineIdx)>,
    /// Engines holding live attempts of a closed login epoch, each awaiting a Requeue.
    pub(crate) restarted_engines: BTreeSet<EngineIdx>,
    /// Projector keys registered by operators, with their names: a batch must be
    /// sealed by one of them. Changed only through [`State::register_projector_key`]
    /// and [`State::revoke_projector_key`], which keep `verifying_keys` beside it.
    pub projector_keys: BTreeMap<[u8; 32], String>,
    /// The same keys, each decompressed once (rebuilt after a snapshot loads): a
    /// seal is checked against these, not against a point decompressed anew for
    /// every batch (a third of the cost of checking one).
    #[serde(skip)]
    pub(crate) verifying_keys: BTreeMap<[u8; 32], ed25519_dalek::VerifyingKey>,
    /// What each owner and each project holds and has used (see [`accounts`]).
    pub(crate) users: Accounts,
    pub(crate) projects: Accounts,
    pub rejections: Rejections,
    pub totals: Totals,
    /// Operators' suspensions and preemptions: in the snapshot after the rest,
    /// and only when not empty (see `suspension.rs`).
    #[serde(skip)]
    pub(crate) suspension: Suspensions,
    /// Parallel tasks' companion bookings on other engines (see `parallel.rs`).
    pub(crate) parallel: ParallelBookings,
    /// Flood control's job ratio per gateway engine (see `flood.rs`).
    pub flood: super::flood::FloodState,
    /// Active jobs and their tasks per user and over the grid, for the caps;
    /// derived from the jobs (see `holdings.rs`), so not in a snapshot.
    #[serde(skip)]
    pub(crate) holdings: super::holdings::Holdings,
    /// What the policy's families fold grid-wide, each its own part (see
    /// [`crate::core::family::data::FamilyStates`]).
    pub families: crate::core::family::data::FamilyStates,
}

impl State {
    pub fn new() -> Self {
        Self::default()
    }

    // ---- projector keys ------------------------------------------------------

    /// Registers `key`, already decompressed into `verifying`.
    pub(crate) fn register_projector_key(&mut self, key: [u8; 32], verifying: ed25519_dalek::VerifyingKey, name: String) {
        self.projector_keys.insert(key, name);
        self.verifying_keys.insert(key, verifying);
    }

    /// Whether the key was registered (and now is not).
    pub(crate) fn revoke_projector_key(&mut self, key: &[u8; 32]) -> bool {
        self.verifying_keys.remove(key);
        self.projector_keys.remove(key).is_some()
    }

    /// The registered key `key`, decompressed.
    pub fn verifying_key(&self, key: &[u8; 32]) -> Option<&ed25519_dalek::VerifyingKey> {
        self.verifying_keys.get(key)
    }

    // ---- lookups -------------------------------------------------------------

    pub fn job_idx(&self, id: &JobId) -> Option<JobIdx> {
        self.job_index.get(id).copied()
    }
    pub fn engine_idx(&self, id: &EngineId) -> Option<EngineIdx> {
        self.engine_index.get(id).copied()
    }
    pub fn job(&self, idx: JobIdx) -> &Job {
        &self.jobs[idx.0 as usize]
    }
    /// The job at `idx`, unless its slot is vacant (it retired).
    pub fn job_if_held(&self, idx: JobIdx) -> Option<&Job> {
        self.jobs.get(idx)
    }
    /// Users' accounts: their live tasks and usage.
    pub fn users(&self) -> &Accounts {
        &self.users
    }
    /// Projects' accounts.
    pub fn projects(&self) -> &Accounts {
        &self.projects
    }
    pub fn engine(&self, idx: EngineIdx) -> &Engine {
        &self.engines[idx.0 as usize]
    }
    pub fn category(&self, idx: CategoryIdx) -> &Category {
        &self.categories[idx.0 as usize]
    }
    /// The jobs held (active, and ended within their retention), in index order.
    pub fn jobs(&self) -> impl ExactSizeIterator<Item = &Job> + '_ {
        self.jobs.iter().map(|(_, job)| job)
    }
    /// The jobs held with their indexes, in index order.
    pub fn jobs_indexed(&self) -> Jobs<'_> {
        self.jobs.iter()
    }
    /// The index the next submitted job will take.
    pub fn next_job_idx(&self) -> JobIdx {
        self.jobs.next_idx()
    }
    pub fn engines(&self) -> &[Engine] {
        &self.engines
    }
    pub fn categories(&self) -> &[Category] {
        &self.categories
    }
    pub fn task_key(&self, task: &TaskRef) -> Option<TaskKey> {
        let job = self.job_idx(&task.job)?;
        (task.index < self.job(job).n_tasks()).then_some(TaskKey { job, index: task.index })
    }
    pub fn task_ref(&self, key: TaskKey) -> TaskRef {
        TaskRef::new(self.job(key.job).id.clone(), key.index)
    }
    pub fn task(&self, key: TaskKey) -> TaskState {
        self.job(key.job).tasks[key.index as usize]
    }
    /// The task's first live attempt (its only one unless it has redundant copies).
    pub fn live_attempt(&self, key: TaskKey) -> Option<&LiveAttempt> {
        self.live.get(&key)
    }
    /// One live attempt of a task by number, first or copy.
    pub fn live_attempt_numbered(&self, key: TaskKey, attempt: Attempt) -> Option<&LiveAttempt> {
        match self.live.get(&key) {
            Some(live) if live.attempt == attempt => Some(live),
            Some(_) => self.copies.get(&(key, attempt)),
            None => None,
        }
    }
    /// Every live attempt of a task, first one first, then copies by number.
    pub fn live_attempts_of(&self, key: TaskKey) -> Vec<LiveAttempt> {
        let mut all: Vec<LiveAttempt> = self.live.get(&key).copied().into_iter().collect();
        if !self.copies.is_empty() {
            all.extend(self.copies.range((key, 0)..=(key, Attempt::MAX)).map(|(_, live)| *live));
        }
        all
    }
    /// Every live attempt, in (task, attempt) order.
    pub fn live_attempts(&self) -> Vec<(TaskKey, LiveAttempt)> {
        let mut all: Vec<(TaskKey, LiveAttempt)> = self.live.sorted().into_iter().map(|(key, live)| (key, *live)).collect();
        all.extend(self.copies.iter().map(|(&(key, _), live)| (key, *live)));
        all.sort_unstable_by_key(|(key, live)| (*key, live.attempt));
        all
    }
    /// The jobs a job depends on that have not ended.
    pub fn unended_dependencies_of(&self, j: JobIdx) -> Vec<JobIdx> {
        self.dependents.iter().filter(|(_, dependents)| dependents.contains(&j)).map(|(&dependency, _)| dependency).collect()
    }

    /// Per job index (dense): the sum of the mflops of the engines running its
    /// live attempts (copies included), in one pass over the live attempts.
    pub fn mflops_running_per_job(&self) -> Vec<u64> {
        let mut per_job = Vec::new();
        self.live.add_per_job(&mut per_job, |live| self.engine(live.engine).props.mflops);
        for (&(key, _), live) in &self.copies {
            let j = key.job.0 as usize;
            if per_job.len() <= j {
                per_job.resize(j + 1, 0);
            }
            per_job[j] = per_job[j].saturating_add(self.engine(live.engine).props.mflops);
        }
        per_job
    }
    /// Every live attempt of one job, in (task, attempt) order.
    pub fn live_attempts_of_job_sorted(&self, j: JobIdx) -> Vec<(TaskKey, LiveAttempt)> {
        let mut all: Vec<(TaskKey, LiveAttempt)> =
            self.live.tasks_of_job(j).into_iter().map(|key| (key, *self.live.get(&key).expect("listed"))).collect();
        if !self.copies.is_empty() {
            all.extend(self.copies.iter().filter(|((key, _), _)| key.job == j).map(|(&(key, _), live)| (key, *live)));
            all.sort_unstable_by_key(|(key, live)| (*key, live.attempt));
        }
        all
    }
    pub fn n_redundant_copies(&self) -> usize {
        self.copies.len()
    }
    pub fn runnable_jobs(&self) -> std::collections::btree_set::Iter<'_, JobRank> {
        self.runnable.iter()
    }
    pub fn free_engines(&self) -> impl Iterator<Item = EngineIdx> + '_ {
        self.free_engines.iter()
    }
    pub fn dispatched_by_age(&self) -> impl Iterator<Item = &(u64, TaskKey, Attempt)> {
        self.dispatched_since.iter()
    }
    /// Logged-in engines as (log time last heard from, engine), the longest silent
    /// first, ties by engine index.
    pub fn engines_by_silence(&self) -> impl Iterator<Item = (u64, EngineIdx)> + '_ {
        self.engine_silence.iter()
    }
    /// [`State::engines_by_silence`] for as long as `time_holds(last_seen_ms)`, which
    /// must hold up to some time and not after it (e.g. "silent past a timeout").
    pub fn engines_by_silence_while<'a>(
        &'a self,
        time_holds: impl Fn(u64) -> bool + 'a,
    ) -> impl Iterator<Item = (u64, EngineIdx)> + 'a {
        self.engine_silence.iter_while(time_holds)
    }
    pub fn any_engine_logged_in(&self) -> bool {
        !self.engine_silence.is_empty()
    }
    pub fn attempts_to_cancel(&self) -> impl Iterator<Item = (TaskKey, Attempt)> + '_ {
        self.to_cancel.iter().copied()
    }
    pub fn library(&self, library: &LibraryRef) -> Option<&LibraryInfo> {
        self.libraries.get(library)
    }
    pub fn jobs_failing_with_a_dependency(&self) -> impl Iterator<Item = JobIdx> + '_ {
        self.failing_dependents.iter().copied()
    }
    pub fn jobs_with_task_dependencies(&self) -> impl Iterator<Item = JobIdx> + '_ {
        self.jobs_with_task_dependencies.iter().copied()
    }
    pub fn redundancy_jobs(&self) -> impl Iterator<Item = JobIdx> + '_ {
        self.redundancy_jobs.iter().copied()
    }
    /// Active jobs whose tasks span a site, by index.
    pub fn site_jobs(&self) -> impl Iterator<Item = JobIdx> + '_ {
        self.site_jobs.iter().copied()
    }
    pub fn pending_blacklists(&self) -> impl Iterator<Item = (JobIdx, EngineIdx)> + '_ {
        self.pending_blacklists.iter().copied()
    }
    /// The engine reached the job's blacklisting threshold; its Blacklist order is yet to be folded.
    pub fn is_blacklist_pending(&self, j: JobIdx, e: EngineIdx) -> bool {
        !self.pending_blacklists.is_empty() && self.pending_blacklists.contains(&(j, e))
    }
    /// The engines about to be blacklisted by one job.
    pub fn pending_blacklists_of(&self, j: JobIdx) -> impl Iterator<Item = EngineIdx> + '_ {
        self.pending_blacklists.range((j, EngineIdx(0))..=(j, EngineIdx(u32::MAX))).map(|&(_, e)| e)
    }
    pub fn has_pending_blacklist(&self, j: JobIdx) -> bool {
        !self.pending_blacklists.is_empty()
            && self.pending_blacklists.range((j, EngineIdx(0))..=(j, EngineIdx(u32::MAX))).next().is_some()
    }
    /// The first dependency of a waiting task that failed or was cancelled, when the
    /// task's job fails with its dependencies: the task must fail too.
    pub fn failed_dependency_of(&self, key: TaskKey) -> Option<TaskKey> {
        let job = self.job(key.job);
        if !job.options.fail_on_dependency_failure || self.task(key).status != TaskStatus::Waiting {
            return None;
        }
        let condition = job.condition(key.index)?;
        condition
            .depends_on
            .iter()
            .copied()
            .find(|&dependency| matches!(self.task(dependency).status, TaskStatus::Failed | TaskStatus::Cancelled))
    }
    /// Whether a task has ended in a way that releases its dependents: done, or
    /// failed or cancelled (which fails dependents that ask to fail with it).
    pub fn task_has_ended(&self, key: TaskKey) -> bool {
        matches!(self.task(key).status, TaskStatus::Done | TaskStatus::Failed | TaskStatus::Cancelled)
    }

    pub(crate) fn record_rejection(&mut self, entry: &crate::core::event::Entry, source: &str, rejection: Rejection) {
        let rejections = &mut self.rejections;
        rejections.total += 1;
        *rejections.by_kind.entry(rejection.kind_name().to_string()).or_default() += 1;
        if rejections.recent.len() == RECENT_REJECTIONS_MAX {
            rejections.recent.pop_front();
        }
        rejections.recent.push_back(Rejected {
            seq: entry.seq,
            time_ms: entry.time_ms,
            subject: truncated(&entry.subject, REJECTED_TEXT_BYTES_MAX),
            source: truncated(source, REJECTED_TEXT_BYTES_MAX),
            rejection,
        });
    }
}
