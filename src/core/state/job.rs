//! A job and its tasks.
//!
//! Tasks are kept compactly: a campaign of a million tasks is a `Vec` of small
//! `TaskState`s and a cursor over the never-dispatched ones, not a million queue
//! entries. Waiting tasks are served retries first (they have waited longest),
//! then fresh tasks in index order.




use crate::core::event::{JobOptions, Preference, TaskTemplate};
use crate::core::expr::{Expr, ExprError};
use crate::core::ids::{Attempt, CategoryIdx, EngineIdx, JobId, JobIdx, Seq, TaskKey};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum JobStatus {
    Active,
    Done,
    Failed,
    Cancelled,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Active => "active",
            JobStatus::Done => "done",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum TaskStatus {
    Waiting,
    Dispatched,
    Running,
    Done,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Waiting => "waiting",
            TaskStatus::Dispatched => "dispatched",
            TaskStatus::Running => "running",
            TaskStatus::Done => "done",
            TaskStatus::Failed => "failed",
            TaskStatus::Cancelled => "cancelled",
        }
    }
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

/// One task's own parameters, sorted by name: a boxed slice rather than the
/// `BTreeMap` a submission carries, whose every non-empty map allocates a
/// node of eleven entries (over 500 bytes) for a task's one or two
/// parameters. Encoded exactly as the map is (a sequence of name and value),
/// so a snapshot and a state digest are the same either way.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OwnParams(pub Box<[(Box<str>, Box<str>)]>);

impl OwnParams {
    pub fn of(params: &BTreeMap<String, String>) -> Self {
        OwnParams(params.iter().map(|(name, value)| (name.as_str().into(), value.as_str().into())).collect())
    }
}

/// An optional engine in 4 bytes (0 = none, else index + 1), so a task stays 16 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct MaybeEngine(u32);

impl MaybeEngine {
    pub const NONE: MaybeEngine = MaybeEngine(0);
    pub fn some(e: EngineIdx) -> Self {
        MaybeEngine(e.0 + 1)
    }
    pub fn get(self) -> Option<EngineIdx> {
        self.0.checked_sub(1).map(EngineIdx)
    }
}

/// One task: 16 bytes, so a million-task job is 16 MB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskState {
    pub status: TaskStatus,
    /// [`TaskState::QUEUE_JUMP`], [`TaskState::CONDITIONAL`].
    pub flags: u8,
    /// Failures reported by engines; the task fails when this reaches `max_attempts`.
    pub failures: u16,
    /// Attempts dispatched so far, copies included (the newest attempt's number).
    pub attempts: Attempt,
    /// The engine the last failure happened on, avoided while another fits.
    pub last_failed_on: MaybeEngine,
    /// The engine of the newest attempt, whatever became of it: where the task
    /// went, for `why` and for task affinity.
    pub last_engine: MaybeEngine,
}

impl TaskState {
    const FRESH: TaskState = TaskState {
        status: TaskStatus::Waiting,
        flags: 0,
        failures: 0,
        attempts: 0,
        last_failed_on: MaybeEngine::NONE,
        last_engine: MaybeEngine::NONE,
    };
    /// Served from the front of the job's queue, not in index order.
    pub const QUEUE_JUMP: u8 = 1;
    /// Has an entry in `Job::conditions`.
    pub const CONDITIONAL: u8 = 2;
    /// Waiting in the retry queue after a Preempt, its attempt number given
    /// back (so `attempts` may be 0 though it ran): not a fresh task.
    pub const PREEMPTED: u8 = 4;
    /// An operator cancelled the task while it was live: its attempts await a
    /// Cancel, and when the last ends the task is cancelled, not retried.
    pub const CANCEL_REQUESTED: u8 = 8;

    pub fn is_queue_jump(&self) -> bool {
        self.flags & Self::QUEUE_JUMP != 0
    }
    pub fn is_conditional(&self) -> bool {
        self.flags & Self::CONDITIONAL != 0
    }
    pub fn is_preempted(&self) -> bool {
        self.flags & Self::PREEMPTED != 0
    }
    /// Never dispatched and served in index order: not a queue jump, not back from a preemption.
    pub fn is_fresh(&self) -> bool {
        self.attempts == 0 && self.flags & (Self::QUEUE_JUMP | Self::PREEMPTED) == 0
    }
    pub fn is_cancel_requested(&self) -> bool {
        self.flags & Self::CANCEL_REQUESTED != 0
    }
    pub fn is_live(&self) -> bool {
        matches!(self.status, TaskStatus::Dispatched | TaskStatus::Running)
    }
}

/// A preference compiled: its expression is rebuilt from `when` after a snapshot loads.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CompiledPreference {
    pub when: String,
    pub weight: i32,
    #[serde(skip)]
    pub expr: Option<Expr>,
}

impl CompiledPreference {
    pub(crate) fn compile(preference: &Preference) -> Result<Self, ExprError> {
        let expr = crate::core::expr::parse(&preference.when)?;
        Ok(CompiledPreference { when: preference.when.clone(), weight: preference.weight, expr: Some(expr) })
    }
    pub(crate) fn rebuild(&mut self) -> Result<(), ExprError> {
        self.expr = Some(crate::core::expr::parse(&self.when)?);
        Ok(())
    }
    pub fn holds(&self, engine: &super::engine::Engine) -> bool {
        self.expr.as_ref().expect("preferences are rebuilt after every load").eval(&engine.props, engine.slots)
    }
}

/// The score a list of preferences gives an engine.
pub fn preference_score(preferences: &[CompiledPreference], engine: &super::engine::Engine) -> i64 {
    preferences.iter().filter(|p| p.holds(engine)).map(|p| i64::from(p.weight)).sum()
}

/// The conditions of one task, resolved against the state at submission.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct TaskCondition {
    /// The discriminator as written (empty: none).
    pub discriminator: String,
    /// The category of the job's requirements and this discriminator together.
    pub category: Option<CategoryIdx>,
    pub affinity: Vec<CompiledPreference>,
    /// Earlier tasks of the job whose engines this task prefers.
    pub task_affinity: Vec<u32>,
    /// Tasks (of this job or earlier ones) that must end first.
    pub depends_on: Vec<TaskKey>,
}

/// Completion times of a job's tasks (log time from the dispatch of the oldest
/// live attempt to the first result), kept as exact integer sums for redundant
/// rescheduling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompletionTimes {
    pub count: u64,
    pub sum_ms: u128,
    pub sum_sq_ms: u128,
}

impl CompletionTimes {
    pub fn add(&mut self, ms: u64) {
        self.count += 1;
        self.sum_ms += u128::from(ms);
        self.sum_sq_ms += u128::from(ms) * u128::from(ms);
    }
    /// Mean, rounded down.
    pub fn mean_ms(&self) -> Option<u64> {
        (self.count > 0).then(|| (self.sum_ms / u128::from(self.count)) as u64)
    }
    /// Population standard deviation, rounded down: isqrt((n·Σx² − (Σx)²) / n²).
    pub fn std_dev_ms(&self) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let n = u128::from(self.count);
        let spread = (n * self.sum_sq_ms).saturating_sub(self.sum_ms * self.sum_ms);
        Some(isqrt(spread / (n * n)) as u64)
    }
}

/// The integer square root, rounded down (Newton's method on integers).
pub fn isqrt(value: u128) -> u128 {
    if value < 2 {
        return value;
    }
    let mut x = 1u128 << (value.ilog2() / 2 + 1);
    loop {
        let y = (x + value / x) / 2;
        if y >= x {
            return x;
        }
        x = y;
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskCounts {
    pub waiting: u32,
    pub dispatched: u32,
    pub running: u32,
    pub done: u32,
    pub failed: u32,
    pub cancelled: u32,
}

impl TaskCounts {
    fn slot(&mut self, status: TaskStatus) -> &mut u32 {
        match status {
            TaskStatus::Waiting => &mut self.waiting,
            TaskStatus::Dispatched => &mut self.dispatched,
            TaskStatus::Running => &mut self.running,
            TaskStatus::Done => &mut self.done,
            TaskStatus::Failed => &mut self.failed,
            TaskStatus::Cancelled => &mut self.cancelled,
        }
    }
    pub fn total(&self) -> u32 {
        self.waiting + self.dispatched + self.running + self.done + self.failed + self.cancelled
    }
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pub id: JobId,
    pub owner: String,
    pub project: String,
    pub queue: String,
    pub priority: i32,
    pub submit_seq: Seq,
    pub submitted_ms: u64,
    pub ended_ms: Option<u64>,
    pub category: CategoryIdx,
    pub max_attempts: u32,
    pub wall_time_limit_ms: u64,
    pub slots_per_task: u32,
    pub template: TaskTemplate,
    /// Per-task parameters when the job gave a list; `None` for a counted job.
    pub task_params: Option<Vec<OwnParams>>,
    pub status: JobStatus,
    pub counts: TaskCounts,
    /// Set when the projector found no engine that could ever run this job.
    pub unschedulable: Option<crate::core::event::Unschedulable>,
    pub(crate) tasks: Vec<TaskState>,
    /// Tasks at or after this index may never have been dispatched.
    pub(crate) fresh_next: u32,
    /// Tasks sent back to the queue, in the order they came back.
    pub(crate) retries: VecDeque<u32>,
    pub options: JobOptions,
    /// Job-level affinity.
    pub(crate) affinity: Vec<CompiledPreference>,
    /// Conditions of the tasks flagged [`TaskState::CONDITIONAL`].
    pub(crate) conditions: BTreeMap<u32, TaskCondition>,
    /// Served before anything else: queue-jumping tasks, and redundant copies
    /// when the policy says `reschedule_first`.
    pub(crate) front: VecDeque<u32>,
    /// Served after the fresh tasks: redundant copies otherwise.
    pub(crate) back: VecDeque<u32>,
    /// Running tasks with a redundant copy waiting in `front` or `back`.
    pub(crate) copies_waiting: BTreeSet<u32>,
    /// Tasks given a racing copy ([`super::State::add_racing_copy`]): their
    /// first result cancels their other attempts.
    pub(crate) racing: BTreeSet<u32>,
    /// Engines that get no more of this job's tasks.
    pub blacklist: BTreeSet<EngineIdx>,
    /// Task failures per engine, for black- and greylisting; cleared with the blacklists.
    pub failures_by_engine: BTreeMap<EngineIdx, u32>,
    pub completion_times: CompletionTimes,
    /// Jobs this one depends on that have not ended yet (or failed, when it fails with them).
    pub(crate) blocked_by: u32,
    /// The owner's account and the project's (see [`super::accounts`]).
    /// Override tickets an operator gave the job (Grid Engine's `qalter -ot`).
    pub override_tickets: u32,
    pub(crate) user_account: super::accounts::AccountIdx,
    pub(crate) project_account: super::accounts::AccountIdx,
    /// The dependency that failed, when the job fails with it: it waits for a FailDependent order.
    pub failed_dependency: Option<JobId>,
    /// Task dependencies of other jobs' tasks on this job's tasks: while any
    /// remain the job is not retired, so they can still read how its tasks ended.
    pub(crate) task_dependents: u32,
    /// Results that arrived after the task already had one (redundant copies).
    pub redundant_results: u64,
    /// Redundant copies that were still waiting when their task got its result
    /// (or failed, or went back to the queue): rescheduled, never dispatched.
    pub copies_dropped: u64,
    /// What became of each attempt of its tasks (bounded: see [`super::attempts`]).
    pub attempt_log: super::attempts::AttemptLog,
    /// Held by an operator (`gridfold hold`): no new dispatches until released.
    pub held: bool,
    /// CPU time its engines reported for its completed attempts, in ms
    /// (Techila's "CPU time used in completed Jobs of the Project").
    pub cpu_ms_completed: u64,
    /// Grid Engine's soft requests (`qsub -soft -l`), compiled from
    /// `options.soft` (weight unused); `None` without any. See `schedule::soft`.
    pub(crate) soft: Option<CompiledPreference>,
    /// What the policy's families fold per job, each its own part (see
    /// [`crate::core::family::data::JobFamilies`]).
    pub families: crate::core::family::data::JobFamilies,
}

/// Where a walk of a job's waiting tasks stands (see [`Job::next_waiting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WaitingCursor {
    segment: WaitingSegment,
    /// Position within the segment: an index into `front`, `retries` or
    /// `back`, or for fresh tasks the next task index to look at.
    at: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum WaitingSegment {
    #[default]
    Front,
    Retries,
    Fresh,
    Back,
    Done,
}

impl WaitingSegment {
    fn following(self) -> WaitingSegment {
        match self {
            WaitingSegment::Front => WaitingSegment::Retries,
            WaitingSegment::Retries => WaitingSegment::Fresh,
            WaitingSegment::Fresh => WaitingSegment::Back,
            WaitingSegment::Back | WaitingSegment::Done => WaitingSegment::Done,
        }
    }
}

/// Where a rotated walk of a job's fresh tasks stands (see [`Job::next_fresh_rotated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RotatedCursor {
    first: u32,
    next: u32,
    remaining: u32,
}

impl Job {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        spec: &crate::core::event::JobSpec,
        category: CategoryIdx,
        submit_seq: Seq,
        submitted_ms: u64,
    ) -> Job {
        let n_tasks = spec.task_count() as u32;
        let task_params = match &spec.tasks {
            crate::core::event::TaskSet::Count(_) => None,
            crate::core::event::TaskSet::List(list) => Some(list.iter().map(OwnParams::of).collect()),
        };
        Job {
            id: spec.id.clone(),
            owner: spec.owner.clone(),
            project: spec.project.clone(),
            queue: spec.queue.clone(),
            priority: spec.priority,
            submit_seq,
            submitted_ms,
            ended_ms: None,
            category,
            max_attempts: spec.max_attempts,
            wall_time_limit_ms: spec.wall_time_limit_ms,
            slots_per_task: spec.slots_per_task,
            template: spec.template.clone(),
            task_params,
            status: JobStatus::Active,
            counts: TaskCounts { waiting: n_tasks, ..TaskCounts::default() },
            unschedulable: None,
            tasks: vec![TaskState::FRESH; n_tasks as usize],
            fresh_next: 0,
            retries: VecDeque::new(),
            options: spec.options.clone(),
            affinity: Vec::new(),
            conditions: BTreeMap::new(),
            front: VecDeque::new(),
            back: VecDeque::new(),
            copies_waiting: BTreeSet::new(),
            racing: BTreeSet::new(),
            blacklist: BTreeSet::new(),
            failures_by_engine: BTreeMap::new(),
            completion_times: CompletionTimes::default(),
            blocked_by: 0,
            override_tickets: 0,
            user_account: super::accounts::AccountIdx(0),
            project_account: super::accounts::AccountIdx(0),
            failed_dependency: None,
            task_dependents: 0,
            redundant_results: 0,
            copies_dropped: 0,
            attempt_log: super::attempts::AttemptLog::default(),
            held: false,
            cpu_ms_completed: 0,
            soft: None,
            families: Default::default(),
        }
    }

    pub fn n_tasks(&self) -> u32 {
        self.tasks.len() as u32
    }

    pub fn task(&self, index: u32) -> Option<&TaskState> {
        self.tasks.get(index as usize)
    }

    pub fn rank(&self, idx: JobIdx) -> JobRank {
        JobRank { priority: self.priority, submit_seq: self.submit_seq, job: idx }
    }

    /// The command and parameters of one task: the template's parameters, then
    /// the task's own (which win); `{index}` and `{name}` in each argument are
    /// replaced by the task index and the parameter `name`. A placeholder that
    /// names no parameter is left as written, so a mistake shows in the command.
    pub fn task_command(&self, index: u32) -> (Vec<String>, BTreeMap<String, String>) {
        let mut params = self.template.params.clone();
        if let Some(own) = self.task_params.as_ref().and_then(|list| list.get(index as usize)) {
            params.extend(own.0.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        }
        let argv = self.template.argv.iter().map(|arg| expand_placeholders(arg, index, &params)).collect();
        (argv, params)
    }

    /// A parallel task's companion command (`companion_argv`), with `{index}`
    /// and `{name}` replaced as in [`Job::task_command`] (`params` is what that returned).
    pub fn companion_command(&self, index: u32, params: &BTreeMap<String, String>) -> Vec<String> {
        self.options.companion_argv.iter().map(|arg| expand_placeholders(arg, index, params)).collect()
    }

    pub fn is_active(&self) -> bool {
        self.status == JobStatus::Active
    }

    /// Active, not held by a dependency, with tasks or copies waiting: a member of `State::runnable`.
    pub fn is_runnable(&self) -> bool {
        self.status == JobStatus::Active
            && self.blocked_by == 0
            && !self.held
            && !self.awaits_parts()
            && (self.counts.waiting > 0 || !self.copies_waiting.is_empty())
    }

    /// A job submitted in parts whose last part has not been folded yet: its
    /// tasks wait, whatever else would let them run.
    pub fn awaits_parts(&self) -> bool {
        self.options.tasks_total.is_some_and(|total| self.n_tasks() < total)
    }

    /// Waiting tasks plus waiting redundant copies: how many dispatches the job can take.
    pub fn n_wanting_dispatch(&self) -> u32 {
        self.counts.waiting + self.copies_waiting.len() as u32
    }

    /// The waiting tasks (and copies) in the order they are served: the front
    /// (queue jumps, copies rescheduled first), retries, fresh tasks by index, the
    /// back (other copies). A task listed with its status `Dispatched` or `Running`
    /// stands for a redundant copy of it.
    pub fn waiting_tasks(&self) -> impl Iterator<Item = u32> + '_ {
        let mut cursor = WaitingCursor::default();
        std::iter::from_fn(move || self.next_waiting(&mut cursor))
    }

    /// The fresh waiting tasks (never tried, not queue jumps) with an index from
    /// `from` on, starting at `from + rotation % span` and wrapping round, so
    /// that a walk cut short by a run's limit goes on somewhere else next run.
    pub fn fresh_waiting_rotated(&self, from: u32, rotation: u64) -> impl Iterator<Item = u32> + '_ {
        let mut cursor = self.fresh_rotated_cursor(from, rotation);
        std::iter::from_fn(move || self.next_fresh_rotated(&mut cursor))
    }

    /// The next task [`Job::waiting_tasks`] would yield after the ones the
    /// cursor has passed: the same walk, resumable, so a scheduling run can
    /// leave a job when its ordering moves on and come back to it later in the
    /// run without walking its tasks again.
    pub fn next_waiting(&self, cursor: &mut WaitingCursor) -> Option<u32> {
        loop {
            let at = cursor.at as usize;
            let found = match cursor.segment {
                WaitingSegment::Front => self.front.get(at).copied(),
                WaitingSegment::Retries => self.retries.get(at).copied(),
                WaitingSegment::Fresh => {
                    let from = cursor.at.max(self.fresh_next);
                    let next = (from..self.n_tasks()).find(|&index| self.is_fresh_waiting(index));
                    cursor.at = next.map_or(self.n_tasks(), |index| index + 1);
                    if next.is_some() {
                        return next;
                    }
                    None
                }
                WaitingSegment::Back => self.back.get(at).copied(),
                WaitingSegment::Done => return None,
            };
            match found {
                Some(index) => {
                    cursor.at += 1;
                    return Some(index);
                }
                None => {
                    cursor.segment = cursor.segment.following();
                    cursor.at = 0;
                }
            }
        }
    }

    /// The next task [`Job::fresh_waiting_rotated`] would yield: the same walk, resumable.
    pub fn next_fresh_rotated(&self, cursor: &mut RotatedCursor) -> Option<u32> {
        while cursor.remaining > 0 {
            let index = cursor.next;
            cursor.remaining -= 1;
            cursor.next = if index + 1 == self.n_tasks() { cursor.first } else { index + 1 };
            if self.is_fresh_waiting(index) {
                return Some(index);
            }
        }
        None
    }

    /// A cursor for [`Job::next_fresh_rotated`] over the fresh waiting tasks
    /// from `from` on, starting at `from + rotation % span` and wrapping round.
    pub fn fresh_rotated_cursor(&self, from: u32, rotation: u64) -> RotatedCursor {
        let first = from.max(self.fresh_next).min(self.n_tasks());
        let span = self.n_tasks() - first;
        let start = first + if span == 0 { 0 } else { (rotation % u64::from(span)) as u32 };
        RotatedCursor { first, next: start, remaining: span }
    }

    fn is_fresh_waiting(&self, index: u32) -> bool {
        let task = &self.tasks[index as usize];
        task.status == TaskStatus::Waiting && task.is_fresh()
    }

    /// Grid Engine's initiation deadline (`qsub -dl`), in log time.
    pub fn deadline_ms(&self) -> Option<u64> {
        self.options.deadline_ms
    }

    /// The job's functional shares (Grid Engine's `qsub -js`), in ticket mode.
    pub fn job_share(&self) -> u32 {
        self.options.job_share
    }

    /// No task of the job has conditions: every task is of the job's category.
    pub fn conditions_are_empty(&self) -> bool {
        self.conditions.is_empty()
    }

    /// A redundant copy of this task waits in the queue.
    pub fn copy_waits(&self, index: u32) -> bool {
        self.copies_waiting.contains(&index)
    }

    pub fn conditions_iter(&self) -> impl Iterator<Item = (&u32, &TaskCondition)> {
        self.conditions.iter()
    }

    pub fn copies_waiting_is_empty(&self) -> bool {
        self.copies_waiting.is_empty()
    }

    /// The conditions of a task, if it has any.
    pub fn condition(&self, index: u32) -> Option<&TaskCondition> {
        if self.tasks[index as usize].is_conditional() { self.conditions.get(&index) } else { None }
    }

    /// Whether the job scores engines by anything but tier and load (so the
    /// dispatcher ranks its candidates one by one).
    pub fn has_scores(&self) -> bool {
        !self.affinity.is_empty() || (self.options.engine_greylisting && !self.failures_by_engine.is_empty())
    }

    fn set_status(&mut self, index: u32, status: TaskStatus) {
        let task = &mut self.tasks[index as usize];
        *self.counts.slot(task.status) -= 1;
        *self.counts.slot(status) += 1;
        task.status = status;
    }

    pub(super) fn take_waiting(&mut self, index: u32, attempt: Attempt) {
        let task = self.tasks[index as usize];
        assert_eq!(task.status, TaskStatus::Waiting);
        if task.is_preempted() {
            let removed = remove_first(&mut self.retries, index);
            assert!(removed, "a preempted task waits in the retry queue");
            self.tasks[index as usize].flags &= !TaskState::PREEMPTED;
        } else if task.is_queue_jump() && task.attempts == 0 {
            remove_first(&mut self.front, index);
        } else if task.attempts == 0 {
            if index == self.fresh_next {
                self.fresh_next += 1;
                while self.fresh_next < self.n_tasks() && self.tasks[self.fresh_next as usize].attempts > 0 {
                    self.fresh_next += 1;
                }
            }
        } else if self.retries.front() == Some(&index) {
            self.retries.pop_front();
        } else {
            self.retries.retain(|&waiting| waiting != index);
        }
        self.tasks[index as usize].attempts = attempt;
        self.set_status(index, TaskStatus::Dispatched);
    }

    /// A waiting redundant copy of a running task is being dispatched.
    pub(super) fn take_copy(&mut self, index: u32, attempt: Attempt) {
        let removed = self.copies_waiting.remove(&index);
        assert!(removed, "a copy is taken only when one waits");
        if !remove_first(&mut self.front, index) {
            let in_back = remove_first(&mut self.back, index);
            assert!(in_back, "a waiting copy is in the front or the back");
        }
        self.tasks[index as usize].attempts = attempt;
    }

    /// Queues a redundant copy of a running task.
    pub(super) fn add_copy(&mut self, index: u32, first: bool) {
        let added = self.copies_waiting.insert(index);
        assert!(added, "one waiting copy per task");
        if first { self.front.push_front(index) } else { self.back.push_back(index) }
    }

    /// Drops a task's waiting copy, if any (the task got its result or ended).
    pub(super) fn drop_copy(&mut self, index: u32) {
        if self.copies_waiting.remove(&index) {
            self.copies_dropped += 1;
            if !remove_first(&mut self.front, index) {
                remove_first(&mut self.back, index);
            }
        }
    }

    pub(super) fn set_task_status(&mut self, index: u32, status: TaskStatus) {
        if self.tasks[index as usize].status != status {
            self.set_status(index, status);
        }
    }

    pub(super) fn mark_running(&mut self, index: u32) {
        self.set_status(index, TaskStatus::Running);
    }

    pub(super) fn mark_done(&mut self, index: u32) {
        self.set_status(index, TaskStatus::Done);
    }

    pub(super) fn mark_cancelled(&mut self, index: u32) {
        self.set_status(index, TaskStatus::Cancelled);
    }

    /// Counts a failure of the task's only live attempt. Returns true when the
    /// task has exhausted its attempts (and is now failed); otherwise it waits again.
    pub(super) fn record_failure(&mut self, index: u32, engine: EngineIdx) -> bool {
        let task = &mut self.tasks[index as usize];
        task.failures = task.failures.saturating_add(1);
        task.last_failed_on = MaybeEngine::some(engine);
        if u32::from(task.failures) >= self.max_attempts {
            self.set_status(index, TaskStatus::Failed);
            true
        } else {
            self.requeue(index);
            false
        }
    }

    /// Counts a task failure reported by an engine, for black- and greylisting.
    pub(super) fn count_engine_failure(&mut self, engine: EngineIdx) {
        *self.failures_by_engine.entry(engine).or_default() += 1;
    }

    pub(super) fn requeue(&mut self, index: u32) {
        self.set_status(index, TaskStatus::Waiting);
        self.retries.push_back(index);
    }

    /// A Preempt ended the task's last live attempt: it waits at the front of
    /// the retry queue, and when the attempt was its newest, the attempt's
    /// number is given back, so the next dispatch takes it again (an older
    /// number is not: a newer one was used since).
    pub(super) fn requeue_preempted(&mut self, index: u32, attempt: Attempt) {
        self.set_status(index, TaskStatus::Waiting);
        self.retries.push_front(index);
        let task = &mut self.tasks[index as usize];
        if task.attempts == attempt {
            task.attempts = attempt - 1;
        }
        task.flags |= TaskState::PREEMPTED;
    }

    /// A waiting task fails without running (a dependency of it failed).
    pub(super) fn fail_waiting(&mut self, index: u32) {
        assert_eq!(self.tasks[index as usize].status, TaskStatus::Waiting);
        remove_first(&mut self.front, index);
        remove_first(&mut self.retries, index);
        self.tasks[index as usize].flags &= !TaskState::PREEMPTED;
        self.set_status(index, TaskStatus::Failed);
    }

    /// A waiting task is cancelled alone (`TaskCancelled`).
    pub(super) fn cancel_waiting(&mut self, index: u32) {
        assert_eq!(self.tasks[index as usize].status, TaskStatus::Waiting);
        remove_first(&mut self.front, index);
        remove_first(&mut self.retries, index);
        self.tasks[index as usize].flags &= !TaskState::PREEMPTED;
        self.set_status(index, TaskStatus::Cancelled);
    }

    /// Every task has ended (none waits, none is live).
    pub fn all_tasks_ended(&self) -> bool {
        self.counts.waiting + self.counts.dispatched + self.counts.running == 0
    }

    /// Adds tasks at the end of the job (`TasksAdded`).
    pub(super) fn append_tasks(&mut self, params: &[BTreeMap<String, String>]) {
        let list = self.task_params.get_or_insert_with(|| vec![OwnParams::default(); self.tasks.len()]);
        list.extend(params.iter().map(OwnParams::of));
        self.tasks.extend(std::iter::repeat_n(TaskState::FRESH, params.len()));
        self.counts.waiting += params.len() as u32;
    }

    /// Marks a task conditional (and queue-jumping if it asks), with its resolved conditions.
    pub(crate) fn set_condition(&mut self, index: u32, condition: TaskCondition, queue_jump: bool) {
        let task = &mut self.tasks[index as usize];
        task.flags |= TaskState::CONDITIONAL;
        if queue_jump {
            task.flags |= TaskState::QUEUE_JUMP;
            self.front.push_back(index);
        }
        self.conditions.insert(index, condition);
    }

    /// Every waiting task becomes cancelled (the job ended).
    pub(super) fn cancel_waiting_tasks(&mut self) {
        for index in 0..self.n_tasks() {
            if self.tasks[index as usize].status == TaskStatus::Waiting {
                self.tasks[index as usize].flags &= !TaskState::PREEMPTED;
                self.set_status(index, TaskStatus::Cancelled);
            }
        }
        self.retries.clear();
        self.front.clear();
        self.back.clear();
        self.copies_waiting.clear();
        self.fresh_next = self.n_tasks();
    }

    pub(super) fn check_counts(&self) {
        let mut counts = TaskCounts::default();
        for task in &self.tasks {
            *counts.slot(task.status) += 1;
        }
        assert_eq!(counts, self.counts, "task counts of job {}", self.id);
        assert_eq!(counts.total(), self.n_tasks());
        for &index in &self.retries {
            assert_eq!(self.tasks[index as usize].status, TaskStatus::Waiting, "retry queue of {}", self.id);
        }
        for (index, task) in self.tasks.iter().enumerate().filter(|(_, task)| task.is_preempted()) {
            assert!(
                task.status == TaskStatus::Waiting && self.retries.contains(&(index as u32)),
                "a preempted task of {} waits in the retry queue",
                self.id
            );
        }
        let mut copies_queued = 0;
        for &index in self.front.iter().chain(&self.back) {
            let task = &self.tasks[index as usize];
            if task.is_live() {
                copies_queued += 1;
                assert!(self.copies_waiting.contains(&index), "a queued copy of {} is counted", self.id);
            } else {
                assert!(task.status == TaskStatus::Waiting && task.is_queue_jump(), "front of {} holds waiting jumps", self.id);
            }
        }
        assert_eq!(copies_queued, self.copies_waiting.len(), "waiting copies of {}", self.id);
    }
}

/// Removes the first `index` from a queue; whether it was there.
fn remove_first(queue: &mut VecDeque<u32>, index: u32) -> bool {
    match queue.iter().position(|&queued| queued == index) {
        Some(at) => {
            queue.remove(at);
            true
        }
        None => false,
    }
}

fn expand_placeholders(arg: &str, index: u32, params: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) => {
                let name = &after[..close];
                match (name, params.get(name)) {
                    ("index", _) => out.push_str(&index.to_string()),
                    (_, Some(value)) => out.push_str(value),
                    (_, None) => out.push_str(&rest[open..open + close + 2]),
                }
                rest = &after[close + 1..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_expand_from_the_index_and_parameters() {
        let params: BTreeMap<String, String> = [("scene".to_string(), "intro".to_string())].into();
        assert_eq!(expand_placeholders("--frame={index}", 7, &params), "--frame=7");
        assert_eq!(expand_placeholders("{scene}-{index}.png", 2, &params), "intro-2.png");
        assert_eq!(expand_placeholders("{missing} {", 0, &params), "{missing} {");
        assert_eq!(expand_placeholders("plain", 0, &params), "plain");
    }
}
