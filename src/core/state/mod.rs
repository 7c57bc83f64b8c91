//! Layer 1, the data model: engines, jobs, tasks, requirement categories, and the
//! indexes that make `schedule` cheap. It names neither `schedule` nor `fold`
//! (`core::tidy_tests` checks it); each family's figures are held in one field
//! of the state and one of each job (`families`), whose parts the families'
//! folders define.
//!
//! Invariants (checked by [`State::check_invariants`], run after every entry in
//! tests and the simulator):
//! - no engine has more slots in use than it has;
//! - every live attempt (dispatched or running) is booked on exactly one engine,
//!   and an engine's used slots are the sum over its live attempts;
//! - a job's task counts add up to its number of tasks;
//! - `runnable` holds exactly the active jobs with waiting tasks;
//! - `free_engines` holds exactly the logged-in, undrained engines with a free slot;
//! - `engine_silence` holds exactly the logged-in engines, at their last-seen time;
//! - `dispatched_since` holds exactly the live attempts not yet started.
//!
//! Mutations go through methods here so the indexes cannot drift from the data;
//! `fold` decides *whether* an entry applies, these methods apply it.
//! Iteration is over `Vec`, `BTreeMap`, `BTreeSet` and the ordered structures of
//! `state/index.rs` (each iterates as the `BTreeSet` it replaced did). The `IndexMap`s are
//! lookup tables; the live attempts' table is read in an order only after sorting
//! by task (its own order depends on the history of removals).

mod engine;
pub mod holdings;
mod index;
mod job;
pub mod accounts;
pub mod attempts;
mod retire;
mod suspension;
pub mod thresholds;
mod ops;
pub mod parallel;
pub mod flood;

use std::collections::{BTreeMap, BTreeSet, VecDeque};


pub use accounts::{Account, AccountIdx, Accounts};
pub use engine::{Engine, EngineStatus};
use index::{EngineSet, LiveAttempts, NameMap, SilenceOrder, SortedDeque};
pub use job::{
    isqrt, preference_score, CompiledPreference, CompletionTimes, Job, JobStatus, MaybeEngine, OwnParams, RotatedCursor,
    TaskCondition, TaskCounts, TaskState, TaskStatus, WaitingCursor,
};
pub use retire::{JobSlots, Jobs, RetiredJob, Usage, RETIRED_JOBS_MAX};
pub use suspension::{Control, Suspensions};
pub use parallel::{BookedPart, CompanionEnd, ParallelBookings};

use super::digest::Digest;
use super::event::{EngineProps, LibraryInfo, LibraryRef, Policy};
use super::expr::Expr;
use super::ids::{Attempt, EngineId, JobId, Seq, TaskRef};
use super::reject::{truncated, Rejected, Rejection, REJECTED_TEXT_BYTES_MAX};

/// Dense index of a job in `State::jobs` (submission order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct JobIdx(pub u32);

/// Dense index of an engine in `State::engines` (first-login order).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct EngineIdx(pub u32);

/// Dense index of a requirement category in `State::categories`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct CategoryIdx(pub u32);

/// A task inside the state: job index and task index.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct TaskKey {
    pub job: JobIdx,
    pub index: u32,
}

/// The order in which jobs are examined: higher priority first, then first come,
/// first served (Grid Engine's SGE mode with `-p` overriding FCFS).
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub struct JobRank {
    pub priority: i32,
    pub submit_seq: Seq,
    pub job: JobIdx,
}

impl Ord for JobRank {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .priority
            .cmp(&self.priority)
            .then(self.submit_seq.cmp(&other.submit_seq))
            .then(self.job.cmp(&other.job))
    }
}
impl PartialOrd for JobRank {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Jobs with the same requirements and slots per task form one category, as in
/// Grid Engine: which engines may run them is computed once per category, kept
/// as a bitset over engine indexes, and updated when an engine logs in.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Category {
    /// The requirements in canonical form (the parsed expression, printed).
    pub requirements: String,
    pub slots_per_task: u32,
    /// The root library its jobs need: an engine is eligible only once it holds it.
    pub library: Option<LibraryRef>,
    /// Rebuilt from `requirements` after a snapshot is loaded.
    #[serde(skip)]
    pub expr: Option<Expr>,
    /// Bit `e` set: engine `e`'s properties satisfy the requirements, it has
    /// enough slots, and it holds the library.
    pub eligible: Vec<u64>,
    /// Logged-in engines whose properties satisfy the requirements.
    pub matching_logged_in: u32,
    /// Logged-in engines that match and have enough slots, library or not: the
    /// ones that could run the category once synced.
    pub fitting_logged_in: u32,
    /// Logged-in engines that are eligible (matching, with enough slots, holding the library).
    pub eligible_logged_in: u32,
    /// Active jobs of this category.
    pub jobs: BTreeSet<JobIdx>,
    /// Jobs held in the state (active or ended, not retired) whose tasks use it.
    /// When the last of them retires the category is dropped: its slot is left
    /// vacant (see [`Category::is_vacant`]) for the next new category.
    pub users: u32,
}

impl Category {
    /// A dropped category's slot, waiting for the next new category: no job
    /// refers to it, no engine is eligible for it, and it is skipped wherever
    /// categories are walked.
    fn vacant() -> Category {
        Category {
            requirements: String::new(),
            slots_per_task: 0,
            library: None,
            expr: None,
            eligible: Vec::new(),
            matching_logged_in: 0,
            fitting_logged_in: 0,
            eligible_logged_in: 0,
            jobs: BTreeSet::new(),
            users: 0,
        }
    }
    /// The slot of a dropped category (no job uses it).
    pub fn is_vacant(&self) -> bool {
        self.users == 0
    }
    pub fn is_eligible(&self, engine: EngineIdx) -> bool {
        let e = engine.0 as usize;
        self.eligible.get(e / 64).is_some_and(|word| word & (1 << (e % 64)) != 0)
    }
    fn set_eligible(&mut self, engine: EngineIdx, eligible: bool) {
        let e = engine.0 as usize;
        if self.eligible.len() <= e / 64 {
            self.eligible.resize(e / 64 + 1, 0);
        }
        if eligible {
            self.eligible[e / 64] |= 1 << (e % 64);
        } else {
            self.eligible[e / 64] &= !(1 << (e % 64));
        }
    }
    /// Whether the engine's properties satisfy the requirements and it has the
    /// category's slots (a root library it lacks it can sync).
    pub fn fits(&self, engine: &Engine) -> bool {
        self.admits(engine).fits
    }
    fn expr(&self) -> &Expr {
        self.expr.as_ref().expect("category expressions are rebuilt after every load")
    }
    /// How far the category admits an engine: the one definition the bitset,
    /// the logged-in counts and the invariants share.
    fn admits(&self, engine: &Engine) -> Admission {
        let matches = self.expr().eval(&engine.props, engine.slots);
        let fits = matches && engine.slots >= self.slots_per_task;
        let eligible = fits && self.library.as_ref().is_none_or(|library| engine.holds(library));
        Admission { matches, fits, eligible }
    }
}

/// What a category makes of an engine: its requirements hold (`matches`); and it
/// has the slots (`fits`); and it holds the root library (`eligible`).
#[derive(Debug, Clone, Copy)]
struct Admission {
    matches: bool,
    fits: bool,
    eligible: bool,
}

/// A task's first result, as [`State::complete`] returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstResult {
    /// The engine whose attempt succeeded.
    pub engine: EngineIdx,
    /// When that attempt started (or, with no start report, was dispatched).
    pub started_ms: u64,
}

/// A dispatched or running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LiveAttempt {
    pub attempt: Attempt,
    pub engine: EngineIdx,
    /// The engine's login epoch it was dispatched in.
    pub epoch: u64,
    pub dispatched_ms: u64,
    pub started_ms: Option<u64>,
}

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
    pub flood: flood::FloodState,
    /// Active jobs and their tasks per user and over the grid, for the caps;
    /// derived from the jobs (see `holdings.rs`), so not in a snapshot.
    #[serde(skip)]
    pub(crate) holdings: holdings::Holdings,
    /// What the policy's families fold grid-wide, each its own part (see
    /// [`crate::core::family::FamilyStates`]).
    pub families: crate::core::family::FamilyStates,
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

    // ---- engines -------------------------------------------------------------

    /// Logs an engine in (or back in), computing its eligibility for every category.
    /// A login opens epoch `epoch` (its log sequence). The attempts an earlier
    /// epoch still holds stay booked, now of a closed epoch, until a Requeue
    /// (`EngineRestarted`) puts each back on the log: the fold does not requeue
    /// them silently.
    pub(crate) fn log_in_engine(&mut self, id: &EngineId, slots: u32, props: EngineProps, epoch: u64) -> EngineIdx {
        let idx = match self.engine_idx(id) {
            Some(idx) => {
                self.set_engine_logged_out(idx);
                let engine = &mut self.engines[idx.0 as usize];
                assert!(epoch > engine.epoch, "epochs rise: they are log sequences");
                engine.closed_epoch_live = engine.live;
                if engine.live > 0 {
                    self.restarted_engines.insert(idx);
                }
                engine.slots = slots;
                engine.libraries = props.libraries.iter().cloned().collect();
                engine.syncing = None;
                engine.seq_no = super::load::seq_no(&props.custom);
                engine.props = props;
                idx
            }
            None => {
                let idx = EngineIdx(self.engines.len() as u32);
                self.engines.push(Engine::new(id.clone(), slots, props));
                self.engine_index.insert(id.clone(), idx);
                idx
            }
        };
        let now = self.now_ms;
        let engine = &mut self.engines[idx.0 as usize];
        engine.epoch = epoch;
        engine.status = EngineStatus::LoggedIn;
        engine.last_seen_ms = now;
        engine.logins += 1;
        engine.tier = tier_of(&self.tier_exprs, engine);
        self.engine_silence.insert(now, idx);
        for c in 0..self.categories.len() {
            if !self.categories[c].is_vacant() {
                self.refresh_eligibility(CategoryIdx(c as u32), idx);
            }
        }
        self.refresh_free(idx);
        idx
    }

    /// Marks an engine logged out (or lost): it leaves the free and silence indexes
    /// and the categories' logged-in counts. Its live attempts are handled by the caller.
    pub(crate) fn set_engine_logged_out(&mut self, idx: EngineIdx) {
        let engine = &self.engines[idx.0 as usize];
        if engine.status != EngineStatus::LoggedIn {
            return;
        }
        let removed = self.engine_silence.remove(engine.last_seen_ms, idx);
        assert!(removed, "a logged-in engine is in the silence order at its last-seen time");
        for category in self.categories.iter_mut().filter(|category| !category.is_vacant()) {
            if category.is_eligible(idx) {
                category.eligible_logged_in -= 1;
            }
            let admission = category.admits(engine);
            category.matching_logged_in -= u32::from(admission.matches);
            category.fitting_logged_in -= u32::from(admission.fits);
        }
        self.engines[idx.0 as usize].status = EngineStatus::LoggedOut;
        self.free_engines.remove(idx);
        self.break_companions_on(idx);
    }

    pub(crate) fn mark_engine_lost(&mut self, idx: EngineIdx) {
        self.set_engine_logged_out(idx);
        self.engines[idx.0 as usize].status = EngineStatus::Lost;
        self.totals.engines_lost += 1;
    }

    /// Records that an engine was heard from at the current log time.
    pub(crate) fn touch_engine(&mut self, idx: EngineIdx) {
        let now = self.now_ms;
        let engine = &mut self.engines[idx.0 as usize];
        if engine.status == EngineStatus::LoggedIn && engine.last_seen_ms != now {
            let removed = self.engine_silence.remove(engine.last_seen_ms, idx);
            assert!(removed, "a logged-in engine is in the silence order at its last-seen time");
            engine.last_seen_ms = now;
            self.engine_silence.insert(now, idx);
        }
    }

    pub(crate) fn engine_mut(&mut self, idx: EngineIdx) -> &mut Engine {
        &mut self.engines[idx.0 as usize]
    }

    pub(crate) fn refresh_free(&mut self, idx: EngineIdx) {
        let engine = &self.engines[idx.0 as usize];
        if engine.takes_work() {
            self.free_engines.insert(idx);
        } else {
            self.free_engines.remove(idx);
        }
    }

    /// Recomputes one (category, engine) cell and keeps the logged-in counts and
    /// the unschedulable flags of the category's jobs in step with it.
    /// Only for an engine not yet counted in the category (just logged in, or a new category).
    fn refresh_eligibility(&mut self, c: CategoryIdx, e: EngineIdx) {
        let engine = &self.engines[e.0 as usize];
        let category = &mut self.categories[c.0 as usize];
        let Admission { matches, fits, eligible } = category.admits(engine);
        category.set_eligible(e, eligible);
        if engine.status == EngineStatus::LoggedIn {
            category.matching_logged_in += u32::from(matches);
            category.fitting_logged_in += u32::from(fits);
            category.eligible_logged_in += u32::from(eligible);
        }
        if fits && engine.status == EngineStatus::LoggedIn {
            // An engine that fits logged in: no job of the category is unschedulable.
            for &job in &category.jobs {
                self.jobs[job.0 as usize].unschedulable = None;
            }
        }
    }

    // ---- libraries and tiers -------------------------------------------------

    /// A library is published: jobs flagged unschedulable for the want of it can now sync it.
    pub(crate) fn publish_library(&mut self, info: LibraryInfo) {
        for category in &self.categories {
            if category.library.as_ref() == Some(&info.library) {
                for &j in &category.jobs {
                    self.jobs[j.0 as usize].unschedulable = None;
                }
            }
        }
        self.libraries.insert(info.library.clone(), info);
    }

    /// The engine now holds the library: categories rooted on it may use it.
    pub(crate) fn library_synced(&mut self, e: EngineIdx, library: &LibraryRef) {
        let engine = &mut self.engines[e.0 as usize];
        if engine.syncing.as_ref() == Some(library) {
            engine.syncing = None;
        }
        if !engine.libraries.insert(library.clone()) {
            return;
        }
        let logged_in = engine.status == EngineStatus::LoggedIn;
        for c in 0..self.categories.len() {
            let category = &self.categories[c];
            if category.is_vacant() || category.library.as_ref() != Some(library) || category.is_eligible(e) {
                continue;
            }
            if category.admits(&self.engines[e.0 as usize]).eligible {
                let category = &mut self.categories[c];
                category.set_eligible(e, true);
                if logged_in {
                    category.eligible_logged_in += 1;
                }
            }
        }
    }

    pub(crate) fn sync_ordered(&mut self, e: EngineIdx, library: &LibraryRef) {
        self.engines[e.0 as usize].syncing = Some(library.clone());
    }

    pub(crate) fn sync_failed(&mut self, e: EngineIdx, library: &LibraryRef) {
        let now = self.now_ms;
        let engine = &mut self.engines[e.0 as usize];
        if engine.syncing.as_ref() == Some(library) {
            engine.syncing = None;
        }
        engine.last_sync_failure = Some((library.clone(), now));
    }

    /// A new policy: its tiers are compiled and every engine's tier recomputed.
    pub(crate) fn set_policy(&mut self, policy: Policy, tier_exprs: Vec<Expr>) {
        self.policy = policy;
        self.tier_exprs = tier_exprs;
        for engine in &mut self.engines {
            engine.tier = tier_of(&self.tier_exprs, engine);
        }
    }

    // ---- jobs and categories -------------------------------------------------

    /// The category for these requirements and library, created (and its
    /// eligibility computed over every known engine) if new.
    pub(crate) fn category_for(&mut self, expr: Expr, slots_per_task: u32, library: Option<LibraryRef>) -> CategoryIdx {
        let key = (expr.to_string(), slots_per_task, library);
        if let Some(&idx) = self.category_index.get(&key) {
            return idx;
        }
        let category = Category {
            requirements: key.0.clone(),
            slots_per_task,
            library: key.2.clone(),
            expr: Some(expr),
            eligible: Vec::new(),
            matching_logged_in: 0,
            fitting_logged_in: 0,
            eligible_logged_in: 0,
            jobs: BTreeSet::new(),
            // The job about to use it counts itself in (`add_job`, `add_tasks`).
            users: 0,
        };
        let idx = match self.categories_vacant.pop_front() {
            Some(idx) => {
                self.categories[idx.0 as usize] = category;
                idx
            }
            None => {
                self.categories.push(category);
                CategoryIdx(self.categories.len() as u32 - 1)
            }
        };
        self.category_index.insert(key, idx);
        for e in 0..self.engines.len() {
            self.refresh_eligibility(idx, EngineIdx(e as u32));
        }
        idx
    }

    /// Adds a submitted job. `depends_on` are the jobs it waits for (already resolved).
    /// `retired_dependencies` are the jobs it waits for that have left the state
    /// (they ended, with the status given).
    pub(crate) fn add_job(&mut self, mut job: Job, depends_on: &[JobIdx], retired_dependencies: &[(JobId, JobStatus)]) -> JobIdx {
        job.user_account = self.users.intern(&job.owner);
        job.project_account = self.projects.intern(&job.project);
        self.holdings.add(job.user_account, 1, u64::from(job.n_tasks()));
        let id = job.id.clone();
        let idx = self.jobs.insert(job);
        self.job_index.insert(id, idx);
        for c in self.job_categories(idx) {
            let category = &mut self.categories[c.0 as usize];
            category.jobs.insert(idx);
            category.users += 1;
        }
        self.pin_task_dependencies(idx, 0);
        for &dependency in depends_on {
            let status = self.jobs[dependency.0 as usize].status;
            if status == JobStatus::Active {
                self.jobs[idx.0 as usize].blocked_by += 1;
                self.dependents.entry(dependency).or_default().push(idx);
            } else {
                // Held as for a dependency that ends later: released at once, or,
                // when it did not succeed and the job fails with it, held until
                // its FailDependent order.
                self.jobs[idx.0 as usize].blocked_by += 1;
                let dependency_id = self.jobs[dependency.0 as usize].id.clone();
                self.release_dependent(idx, &dependency_id, status);
            }
        }
        for (dependency_id, status) in retired_dependencies {
            self.jobs[idx.0 as usize].blocked_by += 1;
            self.release_dependent(idx, dependency_id, *status);
        }
        self.index_job_rules(idx);
        self.refresh_runnable(idx, false);
        idx
    }

    /// Every category a job's tasks use: the job's own and its discriminators'.
    pub fn job_categories(&self, idx: JobIdx) -> BTreeSet<CategoryIdx> {
        let job = &self.jobs[idx.0 as usize];
        let mut categories: BTreeSet<CategoryIdx> = job.conditions.values().filter_map(|c| c.category).collect();
        categories.insert(job.category);
        categories
    }

    /// Keeps the job in the indexes of the rules it uses (task dependencies, redundancy).
    fn index_job_rules(&mut self, idx: JobIdx) {
        let job = &self.jobs[idx.0 as usize];
        let active = job.status == JobStatus::Active;
        let has_task_deps = job.conditions.values().any(|c| !c.depends_on.is_empty());
        if active && has_task_deps {
            self.jobs_with_task_dependencies.insert(idx);
        } else {
            self.jobs_with_task_dependencies.remove(&idx);
        }
        if active && job.options.redundant_rescheduling {
            self.redundancy_jobs.insert(idx);
        } else {
            self.redundancy_jobs.remove(&idx);
        }
        if active && job.options.span == crate::core::event::Span::Site {
            self.site_jobs.insert(idx);
        } else {
            self.site_jobs.remove(&idx);
        }
        if !active {
            self.failing_dependents.remove(&idx);
            self.pending_blacklists.retain(|&(j, _)| j != idx);
        }
    }

    /// More tasks for an active job; `conditions` are already resolved, keyed by
    /// absolute task index.
    pub(crate) fn add_tasks(
        &mut self,
        idx: JobIdx,
        params: &[BTreeMap<String, String>],
        conditions: Vec<(u32, TaskCondition, bool)>,
    ) {
        let was_runnable = self.jobs[idx.0 as usize].is_runnable();
        let new_categories = conditions.iter().any(|(_, condition, _)| condition.category.is_some());
        let categories_before = if new_categories { self.job_categories(idx) } else { BTreeSet::new() };
        self.jobs[idx.0 as usize].append_tasks(params);
        let user = self.jobs[idx.0 as usize].user_account;
        self.holdings.add(user, 0, params.len() as u64);
        let first = self.jobs[idx.0 as usize].n_tasks() - params.len() as u32;
        for (index, condition, queue_jump) in conditions {
            if let Some(c) = condition.category {
                self.categories[c.0 as usize].jobs.insert(idx);
            }
            self.jobs[idx.0 as usize].set_condition(index, condition, queue_jump);
        }
        if new_categories {
            for c in self.job_categories(idx).difference(&categories_before) {
                self.categories[c.0 as usize].users += 1;
            }
        }
        self.pin_task_dependencies(idx, first);
        self.index_job_rules(idx);
        self.refresh_runnable(idx, was_runnable);
    }

    /// Counts, on each other job, the task dependencies of this job's tasks from
    /// `first` on that name one of its tasks: a job is not retired while another
    /// job's task may still ask how its tasks ended.
    fn pin_task_dependencies(&mut self, idx: JobIdx, first: u32) {
        let job = &self.jobs[idx.0 as usize];
        if job.conditions.is_empty() {
            return;
        }
        let targets: Vec<JobIdx> = job
            .conditions
            .range(first..)
            .flat_map(|(_, condition)| condition.depends_on.iter().map(|dependency| dependency.job))
            .filter(|&j| j != idx)
            .collect();
        for j in targets {
            self.jobs[j.0 as usize].task_dependents += 1;
        }
    }

    /// A job that used the category retired: the category is dropped when no
    /// held job uses it any more (its slot left vacant, its name forgotten).
    pub(crate) fn release_category(&mut self, c: CategoryIdx) {
        let category = &mut self.categories[c.0 as usize];
        assert!(category.users > 0, "a category in use counts its users");
        category.users -= 1;
        if category.users > 0 {
            return;
        }
        assert!(category.jobs.is_empty(), "a category no job uses has no active job");
        let key = (std::mem::take(&mut category.requirements), category.slots_per_task, category.library.take());
        let removed = self.category_index.swap_remove(&key);
        assert_eq!(removed, Some(c), "the category index names the dropped category");
        self.categories[c.0 as usize] = Category::vacant();
        self.categories_vacant.push_back(c);
    }

    pub(crate) fn job_mut(&mut self, idx: JobIdx) -> &mut Job {
        &mut self.jobs[idx.0 as usize]
    }

    /// Changes a job's priority, moving it in the examination order.
    pub(crate) fn set_override_tickets(&mut self, idx: JobIdx, tickets: u32) {
        self.jobs[idx.0 as usize].override_tickets = tickets;
    }

    pub(crate) fn set_priority(&mut self, idx: JobIdx, priority: i32) {
        let job = &self.jobs[idx.0 as usize];
        self.runnable.remove(&job.rank(idx));
        self.jobs[idx.0 as usize].priority = priority;
        self.refresh_runnable(idx, false);
    }

    /// Puts a job in or takes it out of `runnable` after a change to it.
    /// `was_runnable` is [`Job::is_runnable`] before the change (with the same
    /// rank): the set is touched only when the answer changed, which on most
    /// dispatches and completions it does not.
    fn refresh_runnable(&mut self, idx: JobIdx, was_runnable: bool) {
        let job = &self.jobs[idx.0 as usize];
        let runnable = job.is_runnable();
        if runnable != was_runnable {
            let rank = job.rank(idx);
            if runnable {
                self.runnable.insert(rank);
            } else {
                self.runnable.remove(&rank);
            }
        }
    }

    /// Ends a job: its waiting tasks are cancelled, its live attempts await a
    /// Cancel, and the jobs that depend on it hear of it.
    pub(crate) fn end_job(&mut self, idx: JobIdx, status: JobStatus) {
        assert!(status != JobStatus::Active);
        let now = self.now_ms;
        let job = &mut self.jobs[idx.0 as usize];
        if job.status != JobStatus::Active {
            return;
        }
        let was_runnable = job.is_runnable();
        job.status = status;
        job.ended_ms = Some(now);
        job.cancel_waiting_tasks();
        self.leave_job(idx, was_runnable);
        self.queue_retirement(idx);
    }

    /// What every ending does once the job's status is set: out of the categories
    /// and rule indexes, its live attempts to cancel, its dependents released.
    fn leave_job(&mut self, idx: JobIdx, was_runnable: bool) {
        let job = &self.jobs[idx.0 as usize];
        self.holdings.remove(job.user_account, 1, u64::from(job.n_tasks()));
        for c in self.job_categories(idx) {
            self.categories[c.0 as usize].jobs.remove(&idx);
        }
        let status = self.jobs[idx.0 as usize].status;
        // Live attempts may outlast their task (redundant copies of a task that has
        // its result), so the table is searched whatever the counts say.
        let live = self.live_attempts_of_job(idx);
        self.to_cancel.extend(live);
        self.index_job_rules(idx);
        self.refresh_runnable(idx, was_runnable);
        let id = self.jobs[idx.0 as usize].id.clone();
        for dependent in self.dependents.remove(&idx).unwrap_or_default() {
            self.release_dependent(dependent, &id, status);
        }
    }

    /// A job `dependent` waited for has ended with `status`: it is released, or,
    /// when it fails with its dependencies and this one did not succeed, it awaits
    /// a FailDependent order (and stays held until then).
    fn release_dependent(&mut self, dependent: JobIdx, dependency: &JobId, status: JobStatus) {
        let job = &mut self.jobs[dependent.0 as usize];
        if job.status != JobStatus::Active {
            return;
        }
        let was_runnable = job.is_runnable();
        if status != JobStatus::Done && job.options.fail_on_dependency_failure {
            if job.failed_dependency.is_none() {
                job.failed_dependency = Some(dependency.clone());
                self.failing_dependents.insert(dependent);
            }
            return;
        }
        if job.blocked_by > 0 {
            job.blocked_by -= 1;
        }
        self.refresh_runnable(dependent, was_runnable);
    }

    /// Every live attempt of a job, first attempts and copies.
    fn live_attempts_of_job(&self, idx: JobIdx) -> Vec<(TaskKey, Attempt)> {
        let mut all: Vec<(TaskKey, Attempt)> =
            self.live.tasks_of_job(idx).into_iter().map(|key| (key, self.live.get(&key).expect("listed").attempt)).collect();
        all.extend(self.copies.keys().filter(|(key, _)| key.job == idx).copied());
        all
    }

    /// Ends an active job whose tasks have all ended: done when every task is, failed otherwise.
    fn finish_job_if_ended(&mut self, idx: JobIdx) {
        let now = self.now_ms;
        let job = &mut self.jobs[idx.0 as usize];
        if job.status != JobStatus::Active || !job.all_tasks_ended() {
            return;
        }
        let was_runnable = job.is_runnable();
        // Tasks cancelled alone (`TaskCancelled`) do not fail their job: it is
        // done when no task failed and one is done, cancelled when all were cancelled.
        job.status = match (job.counts.failed, job.counts.done) {
            (0, 0) => JobStatus::Cancelled,
            (0, _) => JobStatus::Done,
            _ => JobStatus::Failed,
        };
        job.ended_ms = Some(now);
        self.leave_job(idx, was_runnable);
        self.queue_retirement(idx);
    }

    // ---- the attempt lifecycle ----------------------------------------------

    /// Books a waiting task, or a waiting redundant copy of a live one, onto an
    /// engine as the given attempt.
    pub(crate) fn dispatch(&mut self, key: TaskKey, attempt: Attempt, e: EngineIdx) {
        let now = self.now_ms;
        let engine_slots = self.attempt_slots(key, attempt);
        let job = &mut self.jobs[key.job.0 as usize];
        let was_runnable = job.is_runnable();
        let slots = job.slots_per_task;
        let is_copy = job.tasks[key.index as usize].is_live();
        if is_copy {
            job.take_copy(key.index, attempt);
        } else {
            job.take_waiting(key.index, attempt);
        }
        job.tasks[key.index as usize].last_engine = MaybeEngine::some(e);
        let engine = &mut self.engines[e.0 as usize];
        engine.used += engine_slots;
        assert!(engine.used <= engine.slots, "engine {} booked above its slots", engine.id);
        engine.live += 1;
        let live = LiveAttempt { attempt, engine: e, epoch: engine.epoch, dispatched_ms: now, started_ms: None };
        if is_copy {
            let previous = self.copies.insert((key, attempt), live);
            assert!(previous.is_none(), "an attempt number is used once");
        } else {
            let previous = self.live.insert(key, live);
            assert!(previous.is_none(), "a waiting task has no live attempt");
        }
        self.dispatched_since.insert((now, key, attempt));
        let job = &self.jobs[key.job.0 as usize];
        let (user, project) = (job.user_account, job.project_account);
        self.users.attempt_began(user, slots, now);
        self.projects.attempt_began(project, slots, now);
        self.totals.dispatches += 1;
        self.refresh_free(e);
        self.refresh_runnable(key.job, was_runnable);
    }

    fn live_numbered_mut(&mut self, key: TaskKey, attempt: Attempt) -> &mut LiveAttempt {
        match self.live.get_mut(&key) {
            Some(live) if live.attempt == attempt => live,
            _ => self.copies.get_mut(&(key, attempt)).expect("fold checks the attempt is live"),
        }
    }

    pub(crate) fn start(&mut self, key: TaskKey, attempt: Attempt) {
        let now = self.now_ms;
        let live = self.live_numbered_mut(key, attempt);
        let dispatched_ms = live.dispatched_ms;
        live.started_ms = Some(now);
        self.dispatched_since.remove(&(dispatched_ms, key, attempt));
        let job = &mut self.jobs[key.job.0 as usize];
        if job.tasks[key.index as usize].status == TaskStatus::Dispatched {
            job.mark_running(key.index);
        }
        self.record_wait(key);
    }

    /// Removes one live attempt and frees its slots. When it was the task's first
    /// live attempt and copies remain, the oldest copy takes its place. Returns
    /// the attempt and whether the task still has a live attempt; the caller sets
    /// the task's next status.
    fn release(&mut self, key: TaskKey, attempt: Attempt) -> (LiveAttempt, bool) {
        // Without copies anywhere, the released attempt is the task's only one:
        // the common case skips the copy bookkeeping and a second lookup.
        let had_copies = !self.copies.is_empty();
        let engine_slots = self.attempt_slots(key, attempt);
        let live = match self.live.get(&key) {
            Some(first) if first.attempt == attempt => {
                let first = self.live.remove(&key).expect("just seen");
                let oldest_copy = if had_copies { self.copies.range((key, 0)..=(key, Attempt::MAX)).next() } else { None };
                if let Some((&(_, copy_attempt), _)) = oldest_copy {
                    let copy = self.copies.remove(&(key, copy_attempt)).expect("just seen");
                    self.live.insert(key, copy);
                }
                first
            }
            _ => self.copies.remove(&(key, attempt)).expect("only live attempts are released"),
        };
        if live.started_ms.is_none() {
            self.dispatched_since.remove(&(live.dispatched_ms, key, attempt));
        }
        self.to_cancel.remove(&(key, attempt));
        self.forget_controls(key, attempt);
        let job = &self.jobs[key.job.0 as usize];
        let (slots, user, project) = (job.slots_per_task, job.user_account, job.project_account);
        let (now, halftime_ms) = (self.now_ms, self.policy.sge.halftime_ms);
        self.users.attempt_ended(user, slots, live.dispatched_ms, now, halftime_ms);
        self.projects.attempt_ended(project, slots, live.dispatched_ms, now, halftime_ms);
        let engine = &mut self.engines[live.engine.0 as usize];
        engine.used -= engine_slots;
        engine.live -= 1;
        if live.epoch < engine.epoch {
            engine.closed_epoch_live -= 1;
            if engine.closed_epoch_live == 0 {
                self.restarted_engines.remove(&live.engine);
            }
        }
        self.refresh_free(live.engine);
        self.release_companions(key, attempt);
        (live, had_copies && self.live.contains_key(&key))
    }

    /// After one of several attempts ended: the task runs if any remaining attempt has started.
    fn refresh_live_status(&mut self, key: TaskKey) {
        let job = &self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() {
            return;
        }
        let any_started = self.live_attempts_of(key).iter().any(|live| live.started_ms.is_some());
        let status = if any_started { TaskStatus::Running } else { TaskStatus::Dispatched };
        self.jobs[key.job.0 as usize].set_task_status(key.index, status);
    }

    /// Adds an accepted completion's reported CPU time to its job's figure.
    pub(crate) fn add_completed_cpu(&mut self, key: TaskKey, cpu_ms: u64) {
        let job = &mut self.jobs[key.job.0 as usize];
        job.cpu_ms_completed = job.cpu_ms_completed.saturating_add(cpu_ms);
    }

    /// A success reported by the engine. Returns, when it is the task's first
    /// result, the engine that ran it and when its attempt started (or, with
    /// no start report, was dispatched); `None` for a redundant copy's result.
    pub(crate) fn complete(&mut self, key: TaskKey, attempt: Attempt, wall_ms: u64) -> Option<FirstResult> {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        // The task's time is from its oldest live attempt (the first one), not from
        // the copy that won: a task that needed a copy took that long.
        let first_dispatched_ms =
            if self.copies.is_empty() { None } else { self.live.get(&key).map(|first| first.dispatched_ms) };
        let (live, others_live) = self.release(key, attempt);
        if live.started_ms.is_none() {
            self.record_wait(key);
        }
        self.engines[live.engine.0 as usize].completed += 1;
        self.totals.busy_ms_sum += wall_ms;
        let now = self.now_ms;
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() {
            // A redundant copy's result after the task already had one: the first wins.
            job.redundant_results += 1;
            self.refresh_runnable(key.job, was_runnable);
            return None;
        }
        self.totals.tasks_done += 1;
        job.completion_times.add(now.saturating_sub(first_dispatched_ms.unwrap_or(live.dispatched_ms)));
        job.drop_copy(key.index);
        job.mark_done(key.index);
        job.tasks[key.index as usize].last_engine = MaybeEngine::some(live.engine);
        let cancels = job.options.cancel_redundant_on_first_result || job.racing.contains(&key.index);
        if others_live && cancels {
            let others: Vec<Attempt> = self.live_attempts_of(key).iter().map(|live| live.attempt).collect();
            self.to_cancel.extend(others.into_iter().map(|attempt| (key, attempt)));
        }
        self.refresh_runnable(key.job, was_runnable);
        self.finish_job_if_ended(key.job);
        Some(FirstResult { engine: live.engine, started_ms: live.started_ms.unwrap_or(live.dispatched_ms) })
    }

    /// Counts the wait of an attempt starting now (or completing with no start report).
    fn record_wait(&mut self, key: TaskKey) {
        let wait = self.now_ms.saturating_sub(self.jobs[key.job.0 as usize].submitted_ms);
        self.totals.wait_ms_sum += wait;
        self.totals.wait_ms_max = self.totals.wait_ms_max.max(wait);
        self.totals.waits_counted += 1;
    }

    /// A failure reported by the engine. It counts against the engine for black-
    /// and greylisting. When it was the task's only live attempt it counts against
    /// the task: retried (not on this engine while another fits) or, its attempts
    /// exhausted, failed, which fails the job unless the job carries on.
    pub(crate) fn fail(&mut self, key: TaskKey, attempt: Attempt) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let (live, others_live) = self.release(key, attempt);
        self.engines[live.engine.0 as usize].failed += 1;
        self.totals.attempts_failed += 1;
        let job = &mut self.jobs[key.job.0 as usize];
        job.count_engine_failure(live.engine);
        let failures = job.failures_by_engine[&live.engine];
        if job.options.engine_blacklisting
            && failures >= job.options.blacklist_threshold()
            && !job.blacklist.contains(&live.engine)
            && job.status == JobStatus::Active
        {
            self.pending_blacklists.insert((key.job, live.engine));
        }
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() || others_live {
            self.refresh_live_status(key);
            self.refresh_runnable(key.job, was_runnable);
            return;
        }
        job.drop_copy(key.index);
        if job.tasks[key.index as usize].is_cancel_requested() {
            // Cancelled by an operator while it ran: it is not retried.
            job.mark_cancelled(key.index);
            self.refresh_runnable(key.job, was_runnable);
            self.finish_job_if_ended(key.job);
            return;
        }
        let exhausted = job.record_failure(key.index, live.engine);
        if exhausted {
            self.totals.tasks_failed += 1;
            if self.jobs[key.job.0 as usize].options.continue_on_task_failure {
                self.refresh_runnable(key.job, was_runnable);
                self.finish_job_if_ended(key.job);
                return;
            }
            self.end_job(key.job, JobStatus::Failed);
        }
        self.refresh_runnable(key.job, was_runnable);
    }

    /// An attempt ended through no fault of the task (engine lost or logged out,
    /// dispatch timeout): back to the queue without counting a failure, unless
    /// another attempt of the task lives on.
    pub(crate) fn requeue(&mut self, key: TaskKey, attempt: Attempt) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let (_, others_live) = self.release(key, attempt);
        self.totals.requeues += 1;
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() || others_live {
            self.refresh_live_status(key);
        } else if job.status == JobStatus::Active && !job.tasks[key.index as usize].is_cancel_requested() {
            job.drop_copy(key.index);
            job.requeue(key.index);
        } else {
            job.mark_cancelled(key.index);
        }
        self.refresh_runnable(key.job, was_runnable);
        self.finish_job_if_ended(key.job);
    }

    /// A Cancel order took effect: of an ended job's attempt, or of a redundant copy.
    pub(crate) fn cancel_attempt(&mut self, key: TaskKey, attempt: Attempt) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let (_, others_live) = self.release(key, attempt);
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() || others_live {
            self.refresh_live_status(key);
        } else {
            job.mark_cancelled(key.index);
        }
        self.refresh_runnable(key.job, was_runnable);
        self.finish_job_if_ended(key.job);
    }

    /// Requeues every live attempt on an engine (it was lost or logged out).
    pub(crate) fn requeue_engine_attempts(&mut self, e: EngineIdx) {
        for (key, attempt) in self.attempts_on_engine(e) {
            self.requeue(key, attempt);
        }
    }

    /// The live attempts of closed login epochs, each awaiting a Requeue
    /// (`EngineRestarted`), by engine index, then task and attempt.
    pub fn closed_epoch_attempts(&self) -> impl Iterator<Item = (TaskKey, Attempt)> + '_ {
        self.restarted_engines.iter().flat_map(move |&e| {
            let epoch = self.engines[e.0 as usize].epoch;
            self.attempts_on_engine(e).into_iter().filter(move |&(key, attempt)| {
                self.live_attempt_numbered(key, attempt).is_some_and(|live| live.epoch < epoch)
            })
        })
    }

    /// Every live attempt booked on an engine, sorted by task and attempt.
    fn attempts_on_engine(&self, e: EngineIdx) -> Vec<(TaskKey, Attempt)> {
        if self.engines[e.0 as usize].live == 0 {
            return Vec::new();
        }
        let mut attempts: Vec<(TaskKey, Attempt)> = self
            .live
            .tasks_on_engine(e)
            .into_iter()
            .map(|key| (key, self.live.get(&key).expect("listed").attempt))
            .collect();
        attempts.extend(self.copies.iter().filter(|(_, live)| live.engine == e).map(|(&key, _)| key));
        attempts.sort_unstable();
        attempts
    }

    // ---- blacklists, copies and dependencies -----------------------------------

    /// A Reschedule order took effect: a copy of the running task waits in its job's queue.
    pub(crate) fn add_copy(&mut self, key: TaskKey, first: bool) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        self.jobs[key.job.0 as usize].add_copy(key.index, first);
        self.refresh_runnable(key.job, was_runnable);
    }

    /// A copy of the running task that races it: it waits first in its job's
    /// queue, and the task's first result, from whichever attempt, cancels
    /// the others (Techila's expired task, CiGri's finalize copy).
    pub(crate) fn add_racing_copy(&mut self, key: TaskKey) {
        self.jobs[key.job.0 as usize].racing.insert(key.index);
        self.add_copy(key, true);
    }

    pub(crate) fn blacklist(&mut self, j: JobIdx, e: EngineIdx) {
        self.pending_blacklists.remove(&(j, e));
        self.jobs[j.0 as usize].blacklist.insert(e);
    }

    /// Clears the blacklists and greylists of every job, for one engine or all.
    pub(crate) fn clear_blacklists(&mut self, engine: Option<EngineIdx>) {
        for job in self.jobs.iter_mut() {
            match engine {
                Some(e) => {
                    job.blacklist.remove(&e);
                    job.failures_by_engine.remove(&e);
                }
                None => {
                    job.blacklist.clear();
                    job.failures_by_engine.clear();
                }
            }
        }
        self.pending_blacklists.retain(|&(_, e)| engine.is_some_and(|cleared| cleared != e));
    }

    /// A FailDependent order for a whole job took effect.
    pub(crate) fn fail_for_dependency(&mut self, j: JobIdx) {
        self.failing_dependents.remove(&j);
        self.end_job(j, JobStatus::Failed);
    }

    /// A FailDependent order for one waiting task took effect: it fails without
    /// running, and its job fails with it unless the job carries on.
    pub(crate) fn fail_task_for_dependency(&mut self, key: TaskKey) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let job = &mut self.jobs[key.job.0 as usize];
        job.fail_waiting(key.index);
        self.totals.tasks_failed += 1;
        if job.options.continue_on_task_failure {
            self.refresh_runnable(key.job, was_runnable);
            self.finish_job_if_ended(key.job);
        } else {
            self.end_job(key.job, JobStatus::Failed);
            self.refresh_runnable(key.job, was_runnable);
        }
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

    // ---- snapshots and digests -----------------------------------------------

    /// A snapshot of the whole state (postcard). Category expressions are not
    /// stored; [`State::from_snapshot`] re-parses them.
    pub fn to_snapshot(&self) -> Vec<u8> {
        let mut bytes = postcard::to_stdvec(self).expect("the state always serialises");
        bytes.extend(self.suspension_trailer());
        bytes
    }

    pub fn from_snapshot(bytes: &[u8]) -> Result<State, SnapshotError> {
        let (mut state, trailer): (State, _) =
            postcard::take_from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        state.read_suspension_trailer(trailer).map_err(|e| SnapshotError::Decode(format!("suspensions: {e}")))?;
        for category in state.categories.iter_mut().filter(|category| !category.is_vacant()) {
            let expr = super::expr::parse_printed(&category.requirements).map_err(|e| {
                SnapshotError::Decode(format!("category {:?}: {e}", category.requirements))
            })?;
            category.expr = Some(expr);
        }
        let broken = |what: &str, e: super::expr::ExprError| SnapshotError::Decode(format!("{what}: {e}"));
        for job in state.jobs.iter_mut() {
            let preferences = job.affinity.iter_mut().chain(job.conditions.values_mut().flat_map(|c| c.affinity.iter_mut()));
            for preference in preferences {
                preference.rebuild().map_err(|e| broken(&format!("affinity of job {}", job.id), e))?;
            }
            if let Some(soft) = job.soft.as_mut() {
                soft.rebuild().map_err(|e| broken(&format!("soft requests of job {}", job.id), e))?;
            }
        }
        state.tier_exprs = compile_tiers(&state.policy.engine_tiers).map_err(|e| broken("engine tiers", e))?;
        for engine in state.engines.iter_mut() {
            engine.seq_no = super::load::seq_no(&engine.props.custom);
        }
        state.users.rebuild_index();
        state.projects.rebuild_index();
        state.holdings = state.recount_holdings();
        state.site_jobs = state.recount_site_jobs();
        for key in state.projector_keys.keys() {
            let verifying = ed25519_dalek::VerifyingKey::from_bytes(key)
                .map_err(|_| SnapshotError::Decode(format!("projector key {} is not an ed25519 key", hex::encode(key))))?;
            state.verifying_keys.insert(*key, verifying);
        }
        state.check_invariants();
        Ok(state)
    }

    /// What the active jobs hold, counted from the jobs themselves.
    fn recount_holdings(&self) -> holdings::Holdings {
        let mut holdings = holdings::Holdings::default();
        for (_, job) in self.jobs.iter().filter(|(_, job)| job.is_active()) {
            holdings.add(job.user_account, 1, u64::from(job.n_tasks()));
        }
        holdings
    }

    /// The active jobs whose tasks span a site, found by a walk over the jobs.
    fn recount_site_jobs(&self) -> BTreeSet<JobIdx> {
        self.jobs
            .iter()
            .filter(|(_, job)| job.is_active() && job.options.span == crate::core::event::Span::Site)
            .map(|(j, _)| j)
            .collect()
    }

    /// What active jobs hold per user and over the grid (the caps' counts).
    pub fn holdings(&self) -> &holdings::Holdings {
        &self.holdings
    }

    /// A digest of the whole folded state, for comparing two states on demand.
    pub fn state_digest(&self) -> Digest {
        Digest::of_bytes(&self.to_snapshot())
    }

    /// Asserts every invariant in the module docs. Cheap enough for tests and the
    /// simulator to run after every entry; a failure is a bug in the core.
    pub fn check_invariants(&self) {
        let recounted = self.recount_holdings();
        assert_eq!(
            (self.holdings.grid, self.holdings.held_by_users()),
            (recounted.grid, recounted.held_by_users()),
            "the caps' counts are what the active jobs hold"
        );
        assert_eq!(self.site_jobs, self.recount_site_jobs(), "the site jobs' index holds the active jobs of span site");
        assert!(
            self.projector_keys.keys().eq(self.verifying_keys.keys()),
            "every registered projector key is held decompressed, and only those"
        );
        let mut used = vec![0u32; self.engines.len()];
        let mut live_per_engine = vec![0u32; self.engines.len()];
        let mut closed_per_engine = vec![0u32; self.engines.len()];
        let mut n_unstarted = 0;
        let mut user_live = vec![(0u32, 0u64, 0u128); self.users.len()];
        let mut project_live = vec![(0u32, 0u64, 0u128); self.projects.len()];
        for (key, live) in self.live_attempts() {
            let engine_epoch = self.engines[live.engine.0 as usize].epoch;
            assert!(live.epoch <= engine_epoch, "an attempt's epoch is its engine's, or an earlier one");
            closed_per_engine[live.engine.0 as usize] += u32::from(live.epoch < engine_epoch);
            if live.started_ms.is_none() {
                n_unstarted += 1;
                assert!(
                    self.dispatched_since.contains(&(live.dispatched_ms, key, live.attempt)),
                    "dispatch index of {key:?}"
                );
            }
            let job = self.job(key.job);
            used[live.engine.0 as usize] += self.attempt_slots(key, live.attempt);
            live_per_engine[live.engine.0 as usize] += 1;
            for (figures, account) in [(&mut user_live, job.user_account), (&mut project_live, job.project_account)] {
                let entry = &mut figures[account.0 as usize];
                entry.0 += 1;
                entry.1 += u64::from(job.slots_per_task);
                entry.2 += u128::from(job.slots_per_task) * u128::from(live.dispatched_ms);
            }
            let task = job.tasks[key.index as usize];
            let redundant_leftover = task.status == TaskStatus::Done || job.status != JobStatus::Active;
            assert!(
                task.is_live() || redundant_leftover,
                "live attempt of {key:?} has task status {:?}",
                task.status
            );
            assert!(live.attempt <= task.attempts, "live attempt number of {key:?}");
            assert!(self.live.contains_key(&key), "a task with copies has a first live attempt");
        }
        assert_eq!(self.users.live_figures(), user_live, "each user's live attempts are counted in its account");
        assert_eq!(self.projects.live_figures(), project_live, "each project's live attempts are counted in its account");
        for (key, live) in self.live.sorted() {
            let task = self.task(key);
            if task.is_live() {
                let all = self.live_attempts_of(key);
                let any_started = all.iter().any(|live| live.started_ms.is_some());
                let expected = if any_started { TaskStatus::Running } else { TaskStatus::Dispatched };
                assert_eq!(task.status, expected, "status of {key:?} follows its attempts");
                assert!(all.iter().all(|other| other.attempt >= live.attempt), "the first live attempt is the oldest");
            }
        }
        let companions = self.companion_slots();
        for (&e, &(slots, _)) in &companions {
            used[e.0 as usize] += slots;
        }
        for (e, engine) in self.engines.iter().enumerate() {
            let broken_part = companions.get(&EngineIdx(e as u32)).is_some_and(|&(_, broken)| broken);
            assert_eq!(engine.closed_epoch_live, closed_per_engine[e], "closed-epoch attempts of engine {}", engine.id);
            assert_eq!(
                engine.closed_epoch_live > 0,
                self.restarted_engines.contains(&EngineIdx(e as u32)),
                "restarted index of {}",
                engine.id
            );
            assert!(
                engine.used <= engine.slots || engine.closed_epoch_live > 0 || broken_part,
                "engine {} above its slots with no attempts of a closed epoch",
                engine.id
            );
            assert_eq!(engine.used, used[e], "used slots of engine {}", engine.id);
            assert_eq!(engine.live, live_per_engine[e], "live attempts of engine {}", engine.id);
            let logged_in = engine.status == EngineStatus::LoggedIn;
            assert_eq!(
                logged_in,
                self.engine_silence.contains(engine.last_seen_ms, EngineIdx(e as u32)),
                "silence order of {}",
                engine.id
            );
            assert_eq!(engine.takes_work(), self.free_engines.contains(EngineIdx(e as u32)), "free index of {}", engine.id);
        }
        for (j, job) in self.jobs.iter() {
            job.check_counts();
            let runnable = job.is_runnable();
            assert_eq!(runnable, self.runnable.contains(&job.rank(j)), "runnable index of {}", job.id);
        }
        assert_eq!(self.dispatched_since.len(), n_unstarted, "the dispatch index holds only unstarted attempts");
        assert_eq!(
            self.engine_silence.len(),
            self.engines.iter().filter(|engine| engine.status == EngineStatus::LoggedIn).count()
        );
        assert_eq!(self.runnable.len(), self.jobs().filter(|j| j.is_runnable()).count());
        assert_eq!(
            self.free_engines.len(),
            self.engines.iter().filter(|e| e.takes_work()).count()
        );
        for &(key, attempt) in &self.to_cancel {
            assert!(self.live_attempt_numbered(key, attempt).is_some(), "an attempt awaiting cancel is live");
            assert!(
                self.job(key.job).status != JobStatus::Active
                    || self.task(key).status == TaskStatus::Done
                    || self.task(key).is_cancel_requested(),
                "an attempt awaits a cancel only when its job ended, its task is done, or its task was cancelled"
            );
        }
        for (e, engine) in self.engines.iter().enumerate() {
            assert_eq!(engine.tier, tier_of(&self.tier_exprs, engine), "tier of {}", engine.id);
            for category in self.categories.iter().filter(|category| !category.is_vacant()) {
                let eligible = category.admits(engine).eligible;
                assert_eq!(category.is_eligible(EngineIdx(e as u32)), eligible, "eligibility of {}", engine.id);
            }
        }
        for &(j, e) in &self.pending_blacklists {
            let job = self.job(j);
            assert!(job.is_active() && job.options.engine_blacklisting && !job.blacklist.contains(&e));
        }
        self.check_retirement_invariants();
        self.check_suspension_invariants();
        self.check_parallel_invariants();
    }
}

/// Compiles the policy's engine tiers, each `property=value`, into `property == value`.
pub fn compile_tiers(tiers: &[String]) -> Result<Vec<Expr>, super::expr::ExprError> {
    tiers.iter().map(|tier| super::expr::parse(&tier_expression(tier))).collect()
}

/// A tier as a requirements expression: a value that is a whole number compares
/// as a number (`cores=8`), any other as a string (`type=blade`).
pub fn tier_expression(tier: &str) -> String {
    let (property, value) = tier.split_once('=').unwrap_or((tier, ""));
    let (property, value) = (property.trim(), value.trim());
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        format!("{property} == {value}")
    } else {
        format!("{property} == \"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The first tier the engine matches (0 = highest), or the number of tiers.
fn tier_of(tiers: &[Expr], engine: &Engine) -> u32 {
    tiers.iter().position(|tier| tier.eval(&engine.props, engine.slots)).unwrap_or(tiers.len()) as u32
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot does not decode: {0}")]
    Decode(String),
}
