//! Layer 1, the data model: engines, jobs, tasks, requirement categories, and the
//! indexes that make `schedule` cheap.
//!
//! Invariants (checked by [`State::check_invariants`], run after every entry in
//! tests and the simulator):
//! - no engine has more slots in use than it has;
//! - every live attempt (dispatched or running) is booked on exactly one engine,
//!   and an engine's used slots are the sum over its live attempts;
//! - a job's task counts add up to its number of tasks;
//! - `runnable` holds exactly the active jobs with waiting tasks;
//! - `free_engines` holds exactly the logged-in engines with a free slot;
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
mod index;
mod job;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use indexmap::IndexMap;

pub use engine::{Engine, EngineStatus};
use index::{EngineSet, LiveAttempts, SilenceOrder, SortedDeque};
pub use job::{Job, JobStatus, TaskCounts, TaskState, TaskStatus};

use super::digest::Digest;
use super::event::{EngineProps, Policy};
use super::expr::Expr;
use super::ids::{Attempt, EngineId, JobId, Seq, TaskRef};
use super::reject::{Rejected, Rejection};

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
    /// Rebuilt from `requirements` after a snapshot is loaded.
    #[serde(skip)]
    pub expr: Option<Expr>,
    /// Bit `e` set: engine `e`'s properties satisfy the requirements and it has enough slots.
    pub eligible: Vec<u64>,
    /// Logged-in engines whose properties satisfy the requirements.
    pub matching_logged_in: u32,
    /// Logged-in engines that are eligible (matching, with enough slots).
    pub eligible_logged_in: u32,
    /// Active jobs of this category.
    pub jobs: BTreeSet<JobIdx>,
}

impl Category {
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
    fn expr(&self) -> &Expr {
        self.expr.as_ref().expect("category expressions are rebuilt after every load")
    }
}

/// A dispatched or running attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LiveAttempt {
    pub attempt: Attempt,
    pub engine: EngineIdx,
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
    pub(crate) jobs: Vec<Job>,
    pub(crate) job_index: IndexMap<JobId, JobIdx>,
    pub(crate) engines: Vec<Engine>,
    pub(crate) engine_index: IndexMap<EngineId, EngineIdx>,
    pub(crate) categories: Vec<Category>,
    pub(crate) category_index: IndexMap<(String, u32), CategoryIdx>,
    /// Active jobs with waiting tasks, in the order `schedule` examines them.
    pub(crate) runnable: BTreeSet<JobRank>,
    /// Logged-in engines with at least one free slot.
    pub(crate) free_engines: EngineSet,
    pub(crate) live: LiveAttempts,
    /// Dispatched, not yet started attempts by the log time they were dispatched.
    pub(crate) dispatched_since: SortedDeque<(u64, TaskKey)>,
    /// Logged-in engines by the log time of their last accepted event (then index).
    pub(crate) engine_silence: SilenceOrder,
    /// Live attempts of jobs that have ended (cancelled or failed): they await a Cancel.
    pub(crate) to_cancel: BTreeSet<TaskKey>,
    pub rejections: Rejections,
    pub totals: Totals,
}

impl State {
    pub fn new() -> Self {
        Self::default()
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
    pub fn engine(&self, idx: EngineIdx) -> &Engine {
        &self.engines[idx.0 as usize]
    }
    pub fn category(&self, idx: CategoryIdx) -> &Category {
        &self.categories[idx.0 as usize]
    }
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
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
    pub fn live_attempt(&self, key: TaskKey) -> Option<&LiveAttempt> {
        self.live.get(&key)
    }
    /// Every live attempt, in task order.
    pub fn live_attempts(&self) -> Vec<(TaskKey, &LiveAttempt)> {
        self.live.sorted()
    }
    pub fn runnable_jobs(&self) -> impl Iterator<Item = &JobRank> {
        self.runnable.iter()
    }
    pub fn free_engines(&self) -> impl Iterator<Item = EngineIdx> + '_ {
        self.free_engines.iter()
    }
    pub fn dispatched_by_age(&self) -> impl Iterator<Item = &(u64, TaskKey)> {
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
    pub fn attempts_to_cancel(&self) -> impl Iterator<Item = TaskKey> + '_ {
        self.to_cancel.iter().copied()
    }

    // ---- engines -------------------------------------------------------------

    /// Logs an engine in (or back in), computing its eligibility for every category.
    pub(crate) fn log_in_engine(&mut self, id: &EngineId, slots: u32, props: EngineProps) -> EngineIdx {
        let idx = match self.engine_idx(id) {
            Some(idx) => {
                self.set_engine_logged_out(idx);
                let engine = &mut self.engines[idx.0 as usize];
                engine.slots = slots;
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
        engine.status = EngineStatus::LoggedIn;
        engine.last_seen_ms = now;
        engine.logins += 1;
        self.engine_silence.insert(now, idx);
        for c in 0..self.categories.len() {
            self.refresh_eligibility(CategoryIdx(c as u32), idx);
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
        for category in &mut self.categories {
            if category.is_eligible(idx) {
                category.eligible_logged_in -= 1;
            }
            if category.expr().eval(&engine.props, engine.slots) {
                category.matching_logged_in -= 1;
            }
        }
        self.engines[idx.0 as usize].status = EngineStatus::LoggedOut;
        self.free_engines.remove(idx);
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

    fn refresh_free(&mut self, idx: EngineIdx) {
        let engine = &self.engines[idx.0 as usize];
        if engine.status == EngineStatus::LoggedIn && engine.used < engine.slots {
            self.free_engines.insert(idx);
        } else {
            self.free_engines.remove(idx);
        }
    }

    /// Recomputes one (category, engine) cell and keeps the logged-in counts and
    /// the unschedulable flags of the category's jobs in step with it.
    fn refresh_eligibility(&mut self, c: CategoryIdx, e: EngineIdx) {
        let engine = &self.engines[e.0 as usize];
        let category = &mut self.categories[c.0 as usize];
        let matches = category.expr().eval(&engine.props, engine.slots);
        let eligible = matches && engine.slots >= category.slots_per_task;
        category.set_eligible(e, eligible);
        if engine.status == EngineStatus::LoggedIn {
            category.matching_logged_in += u32::from(matches);
            category.eligible_logged_in += u32::from(eligible);
        }
        if category.eligible_logged_in > 0 {
            let jobs: Vec<JobIdx> = category.jobs.iter().copied().collect();
            for job in jobs {
                self.jobs[job.0 as usize].unschedulable = None;
            }
        }
    }

    // ---- jobs and categories -------------------------------------------------

    /// The category for these requirements, created (and its eligibility computed
    /// over every known engine) if new.
    pub(crate) fn category_for(&mut self, expr: Expr, slots_per_task: u32) -> CategoryIdx {
        let key = (expr.to_string(), slots_per_task);
        if let Some(&idx) = self.category_index.get(&key) {
            return idx;
        }
        let idx = CategoryIdx(self.categories.len() as u32);
        self.categories.push(Category {
            requirements: key.0.clone(),
            slots_per_task,
            expr: Some(expr),
            eligible: Vec::new(),
            matching_logged_in: 0,
            eligible_logged_in: 0,
            jobs: BTreeSet::new(),
        });
        self.category_index.insert(key, idx);
        for e in 0..self.engines.len() {
            self.refresh_eligibility(idx, EngineIdx(e as u32));
        }
        idx
    }

    pub(crate) fn add_job(&mut self, job: Job) -> JobIdx {
        let idx = JobIdx(self.jobs.len() as u32);
        self.job_index.insert(job.id.clone(), idx);
        self.categories[job.category.0 as usize].jobs.insert(idx);
        self.jobs.push(job);
        self.refresh_runnable(idx, false);
        idx
    }

    pub(crate) fn job_mut(&mut self, idx: JobIdx) -> &mut Job {
        &mut self.jobs[idx.0 as usize]
    }

    /// Changes a job's priority, moving it in the examination order.
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

    /// Ends a job: its waiting tasks are cancelled, its live attempts await a Cancel order.
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
        let category = job.category;
        let has_live = job.counts.dispatched + job.counts.running > 0;
        self.categories[category.0 as usize].jobs.remove(&idx);
        let live = if has_live { self.live.tasks_of_job(idx) } else { Vec::new() };
        self.to_cancel.extend(live);
        self.refresh_runnable(idx, was_runnable);
    }

    // ---- the attempt lifecycle ----------------------------------------------

    /// Books a waiting task onto an engine as the given attempt.
    pub(crate) fn dispatch(&mut self, key: TaskKey, attempt: Attempt, e: EngineIdx) {
        let now = self.now_ms;
        let job = &mut self.jobs[key.job.0 as usize];
        let was_runnable = job.is_runnable();
        let slots = job.slots_per_task;
        job.take_waiting(key.index, attempt);
        let engine = &mut self.engines[e.0 as usize];
        engine.used += slots;
        assert!(engine.used <= engine.slots, "engine {} booked above its slots", engine.id);
        engine.live += 1;
        let previous = self.live.insert(key, LiveAttempt { attempt, engine: e, dispatched_ms: now, started_ms: None });
        assert!(previous.is_none(), "a task has at most one live attempt");
        self.dispatched_since.insert((now, key));
        self.totals.dispatches += 1;
        self.refresh_free(e);
        self.refresh_runnable(key.job, was_runnable);
    }

    pub(crate) fn start(&mut self, key: TaskKey) {
        let now = self.now_ms;
        let live = self.live.get_mut(&key).expect("fold checks the attempt is live");
        self.dispatched_since.remove(&(live.dispatched_ms, key));
        live.started_ms = Some(now);
        self.jobs[key.job.0 as usize].mark_running(key.index);
        self.record_wait(key);
    }

    /// Removes the live attempt and frees its slots; the caller sets the task's next status.
    fn release(&mut self, key: TaskKey) -> LiveAttempt {
        let live = self.live.remove(&key).expect("only live attempts are released");
        if live.started_ms.is_none() {
            self.dispatched_since.remove(&(live.dispatched_ms, key));
        }
        self.to_cancel.remove(&key);
        let slots = self.jobs[key.job.0 as usize].slots_per_task;
        let engine = &mut self.engines[live.engine.0 as usize];
        engine.used -= slots;
        engine.live -= 1;
        self.refresh_free(live.engine);
        live
    }

    pub(crate) fn complete(&mut self, key: TaskKey, wall_ms: u64) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let live = self.release(key);
        if live.started_ms.is_none() {
            self.record_wait(key);
        }
        self.engines[live.engine.0 as usize].completed += 1;
        self.totals.tasks_done += 1;
        self.totals.busy_ms_sum += wall_ms;
        let job = &mut self.jobs[key.job.0 as usize];
        job.mark_done(key.index);
        if job.status == JobStatus::Active && job.counts.done == job.n_tasks() {
            let now = self.now_ms;
            job.status = JobStatus::Done;
            job.ended_ms = Some(now);
            let category = job.category;
            self.categories[category.0 as usize].jobs.remove(&key.job);
        }
        self.refresh_runnable(key.job, was_runnable);
    }

    /// Counts the wait of an attempt starting now (or completing with no start report).
    fn record_wait(&mut self, key: TaskKey) {
        let wait = self.now_ms.saturating_sub(self.jobs[key.job.0 as usize].submitted_ms);
        self.totals.wait_ms_sum += wait;
        self.totals.wait_ms_max = self.totals.wait_ms_max.max(wait);
        self.totals.waits_counted += 1;
    }

    /// A failure reported by the engine: counts against the task's attempts; the
    /// task is retried (not on this engine while another fits) or, when its
    /// attempts are exhausted, fails and so ends its job failed.
    pub(crate) fn fail(&mut self, key: TaskKey) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let live = self.release(key);
        self.engines[live.engine.0 as usize].failed += 1;
        self.totals.attempts_failed += 1;
        let job = &mut self.jobs[key.job.0 as usize];
        let exhausted = job.record_failure(key.index, live.engine);
        if exhausted {
            self.totals.tasks_failed += 1;
            self.end_job(key.job, JobStatus::Failed);
        }
        self.refresh_runnable(key.job, was_runnable);
    }

    /// An attempt ended through no fault of the task (engine lost or logged out,
    /// dispatch timeout): back to the queue without counting a failure.
    pub(crate) fn requeue(&mut self, key: TaskKey) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        self.release(key);
        self.totals.requeues += 1;
        let job = &mut self.jobs[key.job.0 as usize];
        if job.status == JobStatus::Active {
            job.requeue(key.index);
        } else {
            job.mark_cancelled(key.index);
        }
        self.refresh_runnable(key.job, was_runnable);
    }

    /// The Cancel order of an ended job's attempt took effect.
    pub(crate) fn cancel_attempt(&mut self, key: TaskKey) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        self.release(key);
        self.jobs[key.job.0 as usize].mark_cancelled(key.index);
        self.refresh_runnable(key.job, was_runnable);
    }

    /// Requeues every live attempt on an engine (it was lost or logged out).
    pub(crate) fn requeue_engine_attempts(&mut self, e: EngineIdx) {
        let keys = if self.engines[e.0 as usize].live > 0 { self.live.tasks_on_engine(e) } else { Vec::new() };
        for key in keys {
            self.requeue(key);
        }
    }

    pub(crate) fn record_rejection(&mut self, seq: Seq, rejection: Rejection) {
        let rejections = &mut self.rejections;
        rejections.total += 1;
        *rejections.by_kind.entry(rejection.kind_name().to_string()).or_default() += 1;
        if rejections.recent.len() == RECENT_REJECTIONS_MAX {
            rejections.recent.pop_front();
        }
        rejections.recent.push_back(Rejected { seq, rejection });
    }

    // ---- snapshots and digests -----------------------------------------------

    /// A snapshot of the whole state (postcard). Category expressions are not
    /// stored; [`State::from_snapshot`] re-parses them.
    pub fn to_snapshot(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("the state always serialises")
    }

    pub fn from_snapshot(bytes: &[u8]) -> Result<State, SnapshotError> {
        let mut state: State = postcard::from_bytes(bytes).map_err(|e| SnapshotError::Decode(e.to_string()))?;
        for category in &mut state.categories {
            let expr = super::expr::parse(&category.requirements).map_err(|e| {
                SnapshotError::Decode(format!("category {:?}: {e}", category.requirements))
            })?;
            category.expr = Some(expr);
        }
        state.check_invariants();
        Ok(state)
    }

    /// A digest of the whole folded state, for comparing two states on demand.
    pub fn state_digest(&self) -> Digest {
        Digest::of_bytes(&self.to_snapshot())
    }

    /// Asserts every invariant in the module docs. Cheap enough for tests and the
    /// simulator to run after every entry; a failure is a bug in the core.
    pub fn check_invariants(&self) {
        let mut used = vec![0u32; self.engines.len()];
        let mut live_per_engine = vec![0u32; self.engines.len()];
        let mut n_unstarted = 0;
        for (key, live) in self.live.sorted() {
            if live.started_ms.is_none() {
                n_unstarted += 1;
                assert!(self.dispatched_since.contains(&(live.dispatched_ms, key)), "dispatch index of {key:?}");
            }
            let job = self.job(key.job);
            used[live.engine.0 as usize] += job.slots_per_task;
            live_per_engine[live.engine.0 as usize] += 1;
            let task = job.tasks[key.index as usize];
            assert!(
                matches!(task.status, TaskStatus::Dispatched | TaskStatus::Running),
                "live attempt of {key:?} has task status {:?}",
                task.status
            );
            assert_eq!(task.attempts, live.attempt, "live attempt number of {key:?}");
        }
        for (e, engine) in self.engines.iter().enumerate() {
            assert!(engine.used <= engine.slots, "engine {} above its slots", engine.id);
            assert_eq!(engine.used, used[e], "used slots of engine {}", engine.id);
            assert_eq!(engine.live, live_per_engine[e], "live attempts of engine {}", engine.id);
            let logged_in = engine.status == EngineStatus::LoggedIn;
            assert_eq!(
                logged_in,
                self.engine_silence.contains(engine.last_seen_ms, EngineIdx(e as u32)),
                "silence order of {}",
                engine.id
            );
            let free = engine.status == EngineStatus::LoggedIn && engine.used < engine.slots;
            assert_eq!(free, self.free_engines.contains(EngineIdx(e as u32)), "free index of {}", engine.id);
        }
        for (j, job) in self.jobs.iter().enumerate() {
            job.check_counts();
            let runnable = job.is_runnable();
            assert_eq!(runnable, self.runnable.contains(&job.rank(JobIdx(j as u32))), "runnable index of {}", job.id);
        }
        assert_eq!(self.dispatched_since.len(), n_unstarted, "the dispatch index holds only unstarted attempts");
        assert_eq!(
            self.engine_silence.len(),
            self.engines.iter().filter(|engine| engine.status == EngineStatus::LoggedIn).count()
        );
        assert_eq!(self.runnable.len(), self.jobs.iter().filter(|j| j.is_runnable()).count());
        assert_eq!(
            self.free_engines.len(),
            self.engines.iter().filter(|e| e.status == EngineStatus::LoggedIn && e.used < e.slots).count()
        );
        for key in &self.to_cancel {
            assert!(self.live.contains_key(key), "an attempt awaiting cancel is live");
            assert!(self.job(key.job).status != JobStatus::Active);
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot does not decode: {0}")]
    Decode(String),
}
