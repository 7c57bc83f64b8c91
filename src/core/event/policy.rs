//! The operator's policy: one `PolicySet` replaces it whole, so the log alone
//! says which policy every decision was made under.

use std::collections::BTreeMap;

/// Operator policy. A `PolicySet` event replaces the whole policy, so the log
/// alone says which policy every decision was made under.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Policy {
    pub algorithm: Algorithm,
    /// An engine with no event for this long (log time) is declared lost.
    pub engine_timeout_ms: u64,
    /// A dispatch not started within this long is requeued.
    pub dispatch_timeout_ms: u64,
    /// How the load index that ranks engines is computed.
    pub load_formula: LoadFormula,
    /// Most dispatches one scheduling run may decide (a batch stays bounded).
    pub dispatches_per_run_max: u32,
    /// Seed for any randomised decision, mixed with a log sequence.
    pub seed: u64,
    /// GridServer's engine tiers, highest first, each `property=value`: an engine
    /// of a higher tier is always chosen before one of a lower tier; an engine
    /// matching several takes the highest, one matching none comes after all.
    pub engine_tiers: Vec<String>,
    /// How much each task failure on an engine lowers its score for a greylisting job.
    pub greylist_affinity: u32,
    pub redundancy: RedundancyPolicy,
    /// How long (log time) an ended job stays in the state, whole, before it is
    /// retired: only its usage summary and a short record of its outcome stay.
    /// Measured in log time, so every replay retires it at the same entry.
    pub job_retention_ms: u64,
    /// Grid Engine's job ordering (`user_sort`, and the ticket policies of `sgeee`).
    pub sge: SgePolicy,
    /// Grid Engine's `queue_sort_method`: load index or `seq_no` first.
    pub queue_sort_method: QueueSort,
    /// Techila's license cap, simultaneous projects and user priorities (`techila`).
    pub techila: TechilaPolicy,
    /// How much of tasks' output engines keep, and for how long their work directories stay.
    pub output: OutputPolicy,
    /// Grid Engine's `suspend_thresholds`, `suspend_interval` and `nsuspend`
    /// (queue_conf(5)); see `schedule::thresholds`.
    pub suspend_thresholds: SuspendThresholds,
    /// Grid Engine's `max_reservation` and `default_duration` (sched_conf(5));
    /// see `schedule::reservation`.
    #[serde(default)]
    pub reservation: ReservationPolicy,
    /// FBSNG's queues, process types and run interval (`fbsng`, see `family::fbsng`).
    pub fbsng: FbsngPolicy,
    /// CiGri's cluster affinities, finalize and sink-effect settings (`cigri`,
    /// see `family::cigri`).
    #[serde(default)]
    pub cigri: CigriPolicy,
    /// Flood control of gateway engines (`[flood]`, see `schedule::flood`);
    /// `None`: off.
    #[serde(default)]
    pub flood: Option<FloodPolicy>,
    /// Caps on the active jobs and the tasks they hold, per user and over the
    /// grid (`[caps]`, see [`CapsPolicy`]).
    #[serde(default)]
    pub caps: CapsPolicy,
}

/// Caps on what the state holds (Grid Engine's `max_u_jobs` and `max_jobs`,
/// Slurm's `MaxSubmitJobs`): a submission, or a `TasksAdded`, that would take
/// a user (the job's `owner`) or the grid past one is refused naming it. Counted
/// over active jobs: an ended job no longer counts, though it stays in the
/// state until its retention has passed. The defaults keep the projector within
/// [`STATE_MEMORY_BUDGET_BYTES`] (see `docs/performance.md`, "Memory per held
/// task": a held task costs 16 bytes counted, about 150 listed with a short
/// parameter, 22 and about 185 at a snapshot's peak; a job about 2.2 KB; so
/// 8,000,000 listed tasks and 50,000 jobs stay under 1.6 GB; the test
/// `the_default_caps_keep_the_projectors_state_within_its_memory_budget`
/// measures it). Limits:
/// [`crate::core::policy_limits::check_policy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CapsPolicy {
    /// Most active jobs of one user.
    pub max_jobs_per_user: u32,
    /// Most active jobs over the grid.
    pub max_jobs: u32,
    /// Most tasks one user's active jobs hold, whatever their status.
    pub max_tasks_per_user: u64,
    /// Most tasks all active jobs hold.
    pub max_tasks: u64,
}

/// The memory the default caps keep the projector's state within: 2 GiB, a
/// twelfth of the 24 GiB machines gridfold is measured on.
pub const STATE_MEMORY_BUDGET_BYTES: u64 = 2 << 30;

impl Default for CapsPolicy {
    fn default() -> Self {
        CapsPolicy { max_jobs_per_user: 10_000, max_jobs: 50_000, max_tasks_per_user: 5_000_000, max_tasks: 8_000_000 }
    }
}

/// Flood control (CiGri's job ratio, seed 004): a gateway engine (property
/// `gateway`) may hold at most `ratio_milli × slots / 1000` slots of tasks
/// dispatched and not yet started; every `interval_ms` the ratio moves up when
/// nothing waited in excess, down when something did, as `algorithm` says.
/// Limits: [`crate::core::schedule::flood::check_policy`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FloodPolicy {
    pub algorithm: FloodAlgorithm,
    /// Log time between two adjustments of one gateway's ratio.
    pub interval_ms: u64,
    /// The highest ratio, thousandths of a task per slot.
    pub ratio_max_milli: u32,
    /// The ratio a gateway starts from (1,000: one slot per task).
    pub ratio_start_milli: u32,
    /// Slots of tasks a gateway may hold waiting without it counting as excess.
    pub waiting_allowed: u32,
    /// A task counts as waiting once dispatched and unstarted this long.
    pub waiting_grace_ms: u64,
    /// A task unstarted this long on a gateway is withdrawn (requeued, its
    /// remote job cancelled) and waits again without using an attempt; 0: never.
    pub remote_queue_timeout_ms: u64,
}

impl Default for FloodPolicy {
    fn default() -> Self {
        FloodPolicy {
            algorithm: FloodAlgorithm::SlowStart,
            interval_ms: 10_000,
            ratio_max_milli: 8_000,
            ratio_start_milli: 1_000,
            waiting_allowed: 0,
            waiting_grace_ms: 2_000,
            remote_queue_timeout_ms: 0,
        }
    }
}

/// The seed's three ways of moving the job ratio.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FloodAlgorithm {
    /// TCP's slow start: up, double; down, to one task.
    #[default]
    SlowStart,
    /// Up by the share of the gateway's idle slots; down by the share of the excess.
    TwoWayAdaptive,
    /// Up, double; down by the share of the excess.
    AdaptiveDownExponentialUp,
}

impl FloodAlgorithm {
    pub const NAMES: [&'static str; 3] = ["slow-start", "two-way-adaptive", "adaptive-down-exponential-up"];

    pub fn as_str(self) -> &'static str {
        match self {
            FloodAlgorithm::SlowStart => "slow-start",
            FloodAlgorithm::TwoWayAdaptive => "two-way-adaptive",
            FloodAlgorithm::AdaptiveDownExponentialUp => "adaptive-down-exponential-up",
        }
    }

    pub fn parse(name: &str) -> Option<FloodAlgorithm> {
        match name {
            "slow-start" => Some(FloodAlgorithm::SlowStart),
            "two-way-adaptive" => Some(FloodAlgorithm::TwoWayAdaptive),
            "adaptive-down-exponential-up" => Some(FloodAlgorithm::AdaptiveDownExponentialUp),
            _ => None,
        }
    }
}

/// Why flood control set a ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum FloodReason {
    /// The gateway's first ratio.
    Start,
    /// Nothing waited in excess over the interval.
    Up,
    /// More waited than allowed.
    Down,
}

impl FloodReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FloodReason::Start => "start",
            FloodReason::Up => "up",
            FloodReason::Down => "down",
        }
    }
}

/// CiGri's settings, read by the `cigri` family only. Limits:
/// the CiGri family's `check_policy`, asked through the family seam.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CigriPolicy {
    /// (user, cluster) couples: on that cluster, that user's default campaigns
    /// come before those of users without affinity for it.
    pub affinity: Vec<CigriAffinity>,
    /// Finalize: most copies of one running task once its campaign has no
    /// waiting task left and slots are free; 0: no finalize.
    pub finalize_copies_max: u32,
    /// Sink effect: a task "succeeding" in less than this fraction (in
    /// thousandths) of its campaign's median duration is suspicious.
    pub sink_ratio_milli: u32,
    /// Sink effect: tasks a campaign must have completed before the rule applies.
    pub sink_min_tasks: u32,
    /// The predictor's sliding window of log time.
    pub predictor_window_ms: u64,
}

/// One of CiGri's (user, cluster) affinities.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct CigriAffinity {
    pub user: String,
    pub cluster: String,
}

impl Default for CigriPolicy {
    fn default() -> Self {
        CigriPolicy {
            affinity: Vec::new(),
            finalize_copies_max: 1,
            sink_ratio_milli: 50,
            sink_min_tasks: 10,
            predictor_window_ms: 3_600_000,
        }
    }
}

/// Resource reservation and backfilling (Grid Engine's sched_conf(5)
/// `max_reservation` and `default_duration`): off unless `max_reservation > 0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReservationPolicy {
    /// Most jobs that reserve slots in one scheduling run (Grid Engine's
    /// `max_reservation`, default 0: no reservation); at most [`MAX_RESERVATION_MAX`].
    pub max_reservation: u32,
    /// How long a task with no wall-time limit is counted to run, in ms of log
    /// time (Grid Engine's `default_duration`, whose default is INFINITY;
    /// gridfold's is an hour, [`DEFAULT_DURATION_MS_DEFAULT`]). Only
    /// reservations read it.
    pub default_duration_ms: u64,
}

/// The highest `max_reservation` a policy may set.
pub const MAX_RESERVATION_MAX: u32 = 1_024;
/// gridfold's `default_duration`: an hour.
pub const DEFAULT_DURATION_MS_DEFAULT: u64 = 3_600_000;

impl Default for ReservationPolicy {
    fn default() -> Self {
        ReservationPolicy { max_reservation: 0, default_duration_ms: DEFAULT_DURATION_MS_DEFAULT }
    }
}

/// FBSNG's scheduler settings (the seed's queue parameters and process
/// types), read by the `fbsng` family only. Limits: [`crate::core::family::fbsng`].
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct FbsngPolicy {
    /// The queues, in the order given (which breaks ties between equal
    /// priorities); none: one queue `default` with the default parameters.
    pub queues: Vec<FbsngQueue>,
    /// The process types; a job naming none has no quota and no default requirements.
    pub process_types: Vec<FbsngProcessType>,
    /// The family decides at most once per this much log time; 0: 5,000 ms.
    pub min_run_interval_ms: u64,
}

/// One FBSNG queue, by FBSNG's names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FbsngQueue {
    pub name: String,
    /// `QPmin`, `QPmax`: the bounds of the queue's priority.
    pub qp_min: i64,
    pub qp_max: i64,
    /// `QPI`: what the queue's priority gains at every section start.
    pub qpi: i64,
    /// `QPD`: what it loses when the section started is its own.
    pub qpd: i64,
    /// `QPG`: a queue that cannot start a section and leads another by more
    /// than this holds that other queue.
    pub qpg: i64,
    /// `SPG`: a waiting section whose priority leads a later one's by this much
    /// or more holds it.
    pub spg: i64,
}

impl FbsngQueue {
    /// Its parameters by FBSNG's names (as policy files write them), for the
    /// checks and the rendering that go through them all alike.
    pub fn parameters(&self) -> [(&'static str, i64); 6] {
        [
            ("qp_min", self.qp_min),
            ("qp_max", self.qp_max),
            ("qpi", self.qpi),
            ("qpd", self.qpd),
            ("qpg", self.qpg),
            ("spg", self.spg),
        ]
    }
}

/// One FBSNG process type: a quota on the slots its jobs hold at once, and
/// requirements its jobs' tasks must meet besides their own.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct FbsngProcessType {
    pub name: String,
    /// Most slots held (dispatched or running) by its jobs at once; 0: no quota.
    pub quota_slots: u32,
    /// Requirements over engine properties (FBSNG's node attributes); empty: none.
    pub requirements: String,
}

/// Grid Engine's suspend thresholds (queue_conf(5)), for every engine: while
/// one of an engine's reported load values is above its threshold, every
/// `interval_ms` of log time its `nsuspend` lowest-priority running tasks are
/// suspended; once none is, as many threshold-suspended tasks are resumed per
/// interval. No threshold (the default): the rule is off.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SuspendThresholds {
    /// (load value name, threshold in milli-units), in the order given; at most
    /// [`SUSPEND_THRESHOLDS_MAX`], names unique.
    pub thresholds: Vec<(String, i64)>,
    /// Grid Engine's `suspend_interval` (default 5 minutes), log time.
    pub interval_ms: u64,
    /// Grid Engine's `nsuspend` (default 1): tasks suspended (or resumed) per interval.
    pub nsuspend: u32,
}

/// Most thresholds one policy may give.
pub const SUSPEND_THRESHOLDS_MAX: usize = 16;
/// Most tasks suspended or resumed per engine and interval.
pub const NSUSPEND_MAX: u32 = 1_024;
/// The longest `suspend_interval`: a day.
pub const SUSPEND_INTERVAL_MS_MAX: u64 = 86_400_000;

impl Default for SuspendThresholds {
    fn default() -> Self {
        SuspendThresholds { thresholds: Vec::new(), interval_ms: 300_000, nsuspend: 1 }
    }
}

/// The bounds on tasks' whole output (stored by engines in the object store,
/// never on the log) and on engines' work directories.
///
/// Each attempt's bound is decided by the fold when it applies the attempt's
/// `Dispatch` (see [`crate::core::state::attempts`]) and carried to the engine
/// in the order, so the projector, replay and every engine agree on it: the
/// smaller of `task_bytes_max` and the job's uncommitted budget shared among
/// its waiting tasks. A job's attempts together never store more than
/// `job_bytes_max`, whatever their number.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OutputPolicy {
    /// Most bytes one attempt stores of its stdout, and as many of its stderr.
    pub task_bytes_max: u64,
    /// Most bytes all attempts of one job store, both streams together.
    pub job_bytes_max: u64,
    /// How long an engine keeps an ended attempt's work directory (wall time on the engine).
    pub work_dir_retention_ms: u64,
}

/// The most [`OutputPolicy::task_bytes_max`] may be: 1 GiB.
pub const OUTPUT_TASK_BYTES_MAX_LIMIT: u64 = 1 << 30;
/// The most [`OutputPolicy::job_bytes_max`] may be: 1 TiB.
pub const OUTPUT_JOB_BYTES_MAX_LIMIT: u64 = 1 << 40;
/// The longest [`OutputPolicy::work_dir_retention_ms`]: a year.
pub const WORK_DIR_RETENTION_MS_LIMIT: u64 = 365 * 24 * 3_600_000;

impl Default for OutputPolicy {
    fn default() -> Self {
        OutputPolicy { task_bytes_max: 16 << 20, job_bytes_max: 1 << 30, work_dir_retention_ms: 24 * 3_600_000 }
    }
}

/// Techila's scheduler settings, read by the `techila` family only.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct TechilaPolicy {
    /// The Techila License: most tasks running (dispatched or started) at once
    /// across the grid, whatever the number of engines; 0 means no cap.
    pub max_running_tasks: u32,
    /// A user's projects share capacity through the ticket draw, instead of
    /// the user's most important project taking it all.
    pub simultaneous_projects: bool,
    /// End-user priorities, 1 (most important) to 7; a user not named is 4.
    pub user_priorities: BTreeMap<String, u32>,
    /// Log time after which a scheduling cycle runs even when none of the
    /// cycle's events came; 0 means the default, 5,000 ms.
    pub cycle_interval_ms: u64,
}

/// Grid Engine's scheduler configuration (sched_conf(5)) for job ordering, by
/// its own names. Weights Grid Engine writes as fractions are held in
/// thousandths (`_milli`), so every decision is integer arithmetic.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SgePolicy {
    /// `sge-plain`: the user with the fewest running tasks first, FCFS between equals.
    pub user_sort: bool,
    /// Usage loses half its weight every `halftime` (0: never decays).
    pub halftime_ms: u64,
    /// How far short-term entitlements may stray from long-term ones, in
    /// thousandths (Grid Engine's `compensation_factor`; 0: no limit).
    pub compensation_factor_milli: u32,
    /// `weight_priority`, `weight_urgency`, `weight_ticket`: the dispatch priority.
    pub weight_priority_milli: u32,
    pub weight_urgency_milli: u32,
    pub weight_ticket_milli: u32,
    /// Tickets handed out by the share tree and the functional policy.
    pub weight_tickets_share: u32,
    pub weight_tickets_functional: u32,
    /// Urgency per second waited (thousandths).
    pub weight_waiting_time_milli: u32,
    /// Urgency of a job at its deadline (Grid Engine's `weight_deadline`).
    pub weight_deadline: u32,
    /// Urgency per slot a task asks for (the `slots` complex's urgency).
    pub slot_urgency: u32,
    /// Split of the functional tickets between the four categories (thousandths).
    pub weight_user_milli: u32,
    pub weight_project_milli: u32,
    pub weight_department_milli: u32,
    pub weight_job_milli: u32,
    /// The share tree; empty: no share-tree tickets.
    pub share_tree: Vec<ShareTreeNode>,
    /// Functional shares (`fshare`) by user, project and department.
    pub functional_users: BTreeMap<String, u32>,
    pub functional_projects: BTreeMap<String, u32>,
    pub functional_departments: BTreeMap<String, u32>,
    /// Which users belong to which department (Grid Engine's department access lists).
    pub departments: BTreeMap<String, Vec<String>>,
    /// Override tickets (`oticket`) by user and project.
    pub override_users: BTreeMap<String, u32>,
    pub override_projects: BTreeMap<String, u32>,
}

impl SgePolicy {
    /// What Grid Engine's installer writes into a new cell's scheduler
    /// configuration (most sites run with these): `weight_priority 1.0`,
    /// `weight_urgency 0.1`, `weight_ticket 0.01`, `weight_waiting_time 0`,
    /// `weight_deadline 3600000`, `halftime 168` hours, `compensation_factor 5`,
    /// `weight_user`…`weight_job` 0.25 each, and the `slots` complex's urgency
    /// 1000; no tickets until an operator gives some.
    pub fn grid_engine_defaults() -> SgePolicy {
        SgePolicy {
            halftime_ms: 168 * 3_600_000,
            compensation_factor_milli: 5_000,
            weight_priority_milli: 1_000,
            weight_urgency_milli: 100,
            weight_ticket_milli: 10,
            weight_deadline: 3_600_000,
            slot_urgency: 1_000,
            weight_user_milli: 250,
            weight_project_milli: 250,
            weight_department_milli: 250,
            weight_job_milli: 250,
            ..SgePolicy::default()
        }
    }
}

/// One node of the share tree: its parent (an index into the list, which
/// lists parents before children; `None` for the root's children), its shares
/// among its siblings, and for a leaf whom it stands for.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShareTreeNode {
    pub name: String,
    pub parent: Option<u32>,
    pub shares: u32,
    pub leaf: Option<ShareTreeLeaf>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum ShareTreeLeaf {
    User(String),
    Project(String),
    /// Grid Engine's `default` leaf: every user the tree does not name gets a
    /// node of its own with these shares.
    DefaultUser,
}

/// The default [`Policy::job_retention_ms`]: an hour. Long enough for a person
/// or a workflow to look at a job that just ended (`stat`, `why`, its failures
/// and blacklists) and for late reports about it (a redundant copy's result, an
/// engine coming back) to be recognised by its name; short enough that a grid
/// ending thousands of jobs an hour holds at most an hour's worth of ended jobs.
pub const JOB_RETENTION_MS_DEFAULT: u64 = 3_600_000;

/// GridServer's redundant rescheduling, for jobs that switch it on. All
/// arithmetic is on integers (ms, percent, thousandths), so replay is exact.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RedundancyPolicy {
    /// The strategies stay off until this share of a job's tasks has completed;
    /// before that only the job's `task_max_time` makes copies.
    pub strategy_effective_percent: u32,
    /// The rescheduler looks at running tasks at multiples of this much log time
    /// (0 is read as 1 ms: every run).
    pub poll_period_ms: u64,
    /// Percent-completed strategy: once no more than this share of tasks remains,
    /// tasks running longer than the mean get a copy.
    pub percent_completed_strategy: bool,
    pub remaining_task_percent: u32,
    /// Average strategy: tasks running longer than mean × `average_limit_milli` / 1000.
    pub average_strategy: bool,
    pub average_limit_milli: u32,
    /// Standard-deviation strategy: longer than mean + sd × `std_dev_limit_milli` / 1000.
    pub std_dev_strategy: bool,
    pub std_dev_limit_milli: u32,
    /// A copy goes to the front of its job's queue rather than the back.
    pub reschedule_first: bool,
    /// Most copies alive at once beside a task's first attempt.
    pub copies_per_task_max: u32,
}

impl Default for RedundancyPolicy {
    fn default() -> Self {
        RedundancyPolicy {
            strategy_effective_percent: 50,
            poll_period_ms: 5_000,
            percent_completed_strategy: true,
            remaining_task_percent: 10,
            average_strategy: true,
            average_limit_milli: 3_000,
            std_dev_strategy: true,
            std_dev_limit_milli: 2_000,
            reschedule_first: false,
            copies_per_task_max: 2,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            algorithm: Algorithm::default(),
            engine_timeout_ms: 30_000,
            dispatch_timeout_ms: 60_000,
            load_formula: LoadFormula::default(),
            dispatches_per_run_max: 4_096,
            seed: 0,
            engine_tiers: Vec::new(),
            greylist_affinity: 5,
            redundancy: RedundancyPolicy::default(),
            job_retention_ms: JOB_RETENTION_MS_DEFAULT,
            sge: SgePolicy::default(),
            queue_sort_method: QueueSort::default(),
            techila: TechilaPolicy::default(),
            output: OutputPolicy::default(),
            suspend_thresholds: SuspendThresholds::default(),
            reservation: ReservationPolicy::default(),
            fbsng: FbsngPolicy::default(),
            cigri: CigriPolicy::default(),
            flood: None,
            caps: CapsPolicy::default(),
        }
    }
}

/// The scheduling algorithm, chosen by policy as in Grid Engine's `sched_conf(5)` `algorithm`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")] // as policy files name them (`policy show` prints this)
pub enum Algorithm {
    /// Grid Engine's SGE mode: FCFS by submission (or `user_sort`), overridden
    /// by job priority; requirements filter engines; the least loaded engine
    /// wins, ties by engine id.
    #[default]
    SgePlain,
    /// Grid Engine's ticket mode (SGEEE): jobs ordered by dispatch priority,
    /// from `-p`, urgency and the tickets of the share tree, functional and
    /// override policies.
    Sgeee,
    /// Techila's scheduler: resource-first, fastest free core, one project per
    /// user in a seeded ticket draw, under a license cap (`family::techila`).
    Techila,
    /// FBSNG's scheduler: job-first over queues of dynamic priorities with
    /// gaps, sections of dynamic priorities, process-type quotas (`family::fbsng`).
    Fbsng,
    /// CiGri's metascheduler: per cluster, test campaigns first, then default
    /// campaigns of users with affinity for the cluster, then the rest, FIFO;
    /// finalize copies at a campaign's end (`family::cigri`).
    Cigri,
}

impl Algorithm {
    /// Every algorithm, as policy files name them.
    pub const NAMES: [&'static str; 5] = ["sge-plain", "sgeee", "techila", "fbsng", "cigri"];

    pub fn name(self) -> &'static str {
        match self {
            Algorithm::SgePlain => "sge-plain",
            Algorithm::Sgeee => "sgeee",
            Algorithm::Techila => "techila",
            Algorithm::Fbsng => "fbsng",
            Algorithm::Cigri => "cigri",
        }
    }
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "sge-plain" => Some(Algorithm::SgePlain),
            "sgeee" => Some(Algorithm::Sgeee),
            "techila" => Some(Algorithm::Techila),
            "fbsng" => Some(Algorithm::Fbsng),
            "cigri" => Some(Algorithm::Cigri),
            _ => None,
        }
    }
}

/// Grid Engine's `load_formula`: the load index of an engine, in milli-units, is
/// `slots_weight * used/slots + load_weight * load_per_core`, both scaled to 1000,
/// plus `expression` over the engine's named load values (sched_conf(5)'s own
/// form, see [`crate::core::load`]). The engine with the lowest index is chosen
/// first under `queue_sort_method = load`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LoadFormula {
    pub slots_weight: u32,
    pub load_weight: u32,
    pub expression: crate::core::load::LoadExpr,
}

impl Default for LoadFormula {
    fn default() -> Self {
        LoadFormula { slots_weight: 1, load_weight: 0, expression: Default::default() }
    }
}

/// Grid Engine's `queue_sort_method` (sched_conf(5)): which engine a task goes
/// to among those that may take it, after tiers and scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")] // as policy files name them (`policy show` prints this)
pub enum QueueSort {
    /// The lowest load index first; the lower `seq_no` breaks ties, then the engine id.
    #[default]
    Load,
    /// The lowest `seq_no` first; the lower load index breaks ties, then the engine id.
    Seqno,
}

impl QueueSort {
    pub fn name(self) -> &'static str {
        match self {
            QueueSort::Load => "load",
            QueueSort::Seqno => "seqno",
        }
    }
}
