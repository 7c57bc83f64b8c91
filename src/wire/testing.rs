//! Test fixtures for the wire: one envelope of every event and order variant,
//! and proptest strategies for arbitrary core envelopes.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::core::event::{
    Algorithm, CancelReason, EngineLoad, EngineProps, Envelope, Event, FailureKind, JobOptions,
    JobSpec, LibraryInfo, LibraryRef, LoadFormula, Order, OrderBatch, Policy, Preference,
    RedundancyPolicy, RequeueReason, RescheduleReason, TaskConditions, TaskSelector, TaskSet, TaskTemplate,
    Unschedulable,
};
use crate::core::ids::{EngineId, JobId, Seq, TaskRef};

pub fn job(id: &str) -> JobId {
    JobId::new(id).unwrap()
}

pub fn engine(id: &str) -> EngineId {
    EngineId::new(id).unwrap()
}

pub fn task(job_id: &str, index: u32) -> TaskRef {
    TaskRef::new(job(job_id), index)
}

pub fn envelope(id_byte: u8, event: Event) -> Envelope {
    Envelope {
        id: [id_byte; 16],
        source: "test".to_string(),
        event,
    }
}

/// Which variant an event is; the match fails to compile when a variant is
/// added, which is the reminder to add it to [`every_event`].
pub fn event_variant_idx(event: &Event) -> usize {
    match event {
        Event::JobSubmitted(_) => 0,
        Event::JobCancelled { .. } => 1,
        Event::JobPriorityChanged { .. } => 2,
        Event::EngineLoggedIn { .. } => 3,
        Event::EngineLoggedOut { .. } => 4,
        Event::EngineHeartbeat { .. } => 5,
        Event::TaskStarted { .. } => 6,
        Event::TaskCompleted { .. } => 7,
        Event::TaskFailed { .. } => 8,
        Event::PolicySet(_) => 9,
        Event::Tick => 10,
        Event::OrderBatch(_) => 11,
        Event::TasksAdded { .. } => 12,
        Event::LibraryPublished(_) => 13,
        Event::LibrarySynced { .. } => 14,
        Event::LibrarySyncFailed { .. } => 15,
        Event::BlacklistsCleared { .. } => 16,
        Event::ProjectorKeyRegistered { .. } => 17,
        Event::ProjectorKeyRevoked { .. } => 18,
        Event::SuspendRequested(_) => 19,
        Event::ResumeRequested(_) => 20,
        Event::RescheduleRequested(_) => 21,
        Event::JobOverrideTicketsSet { .. } => 22,
        Event::JobHoldChanged { .. } => 23,
        Event::TaskCancelled { .. } => 24,
        Event::EngineDrainChanged { .. } => 25,
        Event::ProjectPriorityChanged { .. } => 26,
        Event::EngineReports { .. } => 27,
    }
}
pub const EVENT_VARIANTS: usize = 28;

/// As [`event_variant_idx`], for orders.
pub fn order_variant_idx(order: &Order) -> usize {
    match order {
        Order::Dispatch { .. } => 0,
        Order::Cancel { .. } => 1,
        Order::EngineLost { .. } => 2,
        Order::Requeue { .. } => 3,
        Order::MarkUnschedulable { .. } => 4,
        Order::SyncLibrary { .. } => 5,
        Order::Blacklist { .. } => 6,
        Order::Reschedule { .. } => 7,
        Order::FailDependent { .. } => 8,
        Order::Suspend { .. } => 9,
        Order::Resume { .. } => 10,
        Order::Preempt { .. } => 11,
        Order::DispatchParallel { .. } => 12,
        Order::EndTestCampaign { .. } => 13,
        Order::FloodRatio { .. } => 14,
        Order::FlagSink { .. } => 15,
        Order::Undeliverable { .. } => 16,
    }
}
pub const ORDER_VARIANTS: usize = 17;

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub fn library(name: &str, version: &str) -> LibraryRef {
    LibraryRef::new(name, version)
}

/// Conditions with every field set to something other than its zero.
fn busy_conditions() -> TaskConditions {
    TaskConditions {
        discriminator: "mflops >= 1000".to_string(),
        affinity: vec![Preference {
            when: "site == \"hel\"".to_string(),
            weight: -3,
        }],
        task_affinity: vec![0, 2],
        queue_jump: true,
        depends_on: vec![task("render-1", 1), task("prep", 0)],
    }
}

/// One event of every variant (both task-set forms, every order variant, job
/// options both absent and set), with every field set to something other than its zero.
pub fn every_event() -> Vec<Event> {
    let spec = JobSpec {
        id: job("render-1"),
        owner: "ann".to_string(),
        project: "film".to_string(),
        queue: "batch".to_string(),
        priority: -5,
        requirements: "os == \"linux\" && cores >= 4".to_string(),
        max_attempts: 3,
        wall_time_limit_ms: 3_600_000,
        slots_per_task: 2,
        template: TaskTemplate {
            argv: vec!["render".to_string(), "--frame={index}".to_string()],
            params: params(&[("scene", "intro")]),
        },
        tasks: TaskSet::Count(100),
        options: JobOptions::default(),
        task_conditions: BTreeMap::new(),
    };
    vec![
        Event::JobSubmitted(spec.clone()),
        Event::JobSubmitted(JobSpec {
            id: job("sweep.2"),
            tasks: TaskSet::List(vec![
                params(&[("x", "1")]),
                BTreeMap::new(),
                params(&[("x", "3"), ("y", "é")]),
            ]),
            options: JobOptions {
                root_library: Some(library("render-lib", "2.1.0")),
                affinity: vec![Preference {
                    when: "type == \"blade\"".to_string(),
                    weight: 10,
                }],
                depends_on_jobs: vec![job("prep"), job("render-1")],
                fail_on_dependency_failure: true,
                continue_on_task_failure: true,
                engine_blacklisting: true,
                failures_before_blacklist: 2,
                engine_greylisting: true,
                redundant_rescheduling: true,
                task_max_time_ms: 600_000,
                expected_task_time_ms: 90_000,
                cancel_redundant_on_first_result: true,
                deadline_ms: None,
                job_share: 250,
                tasks_total: Some(4),
                project_priority: 2,
                soft: "site == \"lyon\"".into(),
                span: crate::core::event::Span::Site,
                reserve: false,
                process_type: "cms".into(),
                companion_argv: Vec::new(),
                campaign: crate::core::event::CampaignType::Test,
            },
            task_conditions: [(2, busy_conditions()), (0, TaskConditions::default())].into(),
            ..spec
        }),
        Event::JobCancelled {
            job: job("render-1"),
            reason: "wrong scene".to_string(),
        },
        Event::JobPriorityChanged {
            job: job("render-1"),
            priority: 10,
        },
        Event::JobOverrideTicketsSet { job: job("render-1"), tickets: 500 },
        Event::EngineLoggedIn {
            engine: engine("e1"),
            slots: 8,
            props: EngineProps {
                os: "linux".to_string(),
                arch: "x86_64".to_string(),
                cores: 16,
                memory_mb: 65_536,
                disk_mb: 1_000_000,
                mflops: 12_345,
                site: "hel".to_string(),
                custom: params(&[("type", "blade"), ("gpu", "none")]),
                libraries: vec![library("render-lib", "2.1.0"), library("ffmpeg", "7")],
            },
        },
        Event::EngineLoggedOut {
            engine: engine("e1"),
        },
        Event::EngineHeartbeat {
            engine: engine("e1"),
            load: EngineLoad {
                load_per_core_milli: 750,
                memory_free_mb: 1024,
                values_milli: Default::default(),
            },
        },
        Event::TaskStarted {
            task: task("render-1", 7),
            attempt: 1,
            engine: engine("e1"),
            remote_job: String::new(),
        },
        Event::TaskCompleted {
            task: task("render-1", 7),
            attempt: 1,
            engine: engine("e1"),
            exit_code: 0,
            cpu_ms: 5_000,
            wall_ms: 6_000,
            result: b"frame 7 done\n".to_vec(),
            stored: Default::default(),
        },
        Event::TaskCompleted {
            task: task("render-1", 8),
            attempt: 2,
            engine: engine("e_2"),
            exit_code: 3,
            cpu_ms: 1,
            wall_ms: 2,
            result: vec![0xff, 0xfe, 0x00],
            stored: crate::core::event::StoredStreams {
                stdout: Some(crate::core::event::StoredOutput { bytes: 70_000, blake3: [0xb3; 32] }),
                stderr: None,
            },
        },
        Event::TaskFailed {
            task: task("render-1", 9),
            attempt: 1,
            engine: engine("e1"),
            exit_code: Some(139),
            kind: FailureKind::Signalled,
            error_tail: "segmentation fault".to_string(),
            stored: crate::core::event::StoredStreams {
                stdout: Some(crate::core::event::StoredOutput { bytes: 1, blake3: [1; 32] }),
                stderr: Some(crate::core::event::StoredOutput { bytes: 18, blake3: [2; 32] }),
            },
        },
        Event::TaskFailed {
            task: task("render-1", 9),
            attempt: 2,
            engine: engine("e1"),
            exit_code: None,
            kind: FailureKind::LaunchFailed,
            error_tail: String::new(),
            stored: Default::default(),
        },
        Event::PolicySet(Policy {
            reservation: crate::core::event::ReservationPolicy::default(),
            suspend_thresholds: crate::core::event::SuspendThresholds {
                thresholds: vec![("np_load_avg".into(), 1_750), ("mem_used".into(), 8_000_000)],
                interval_ms: 60_000,
                nsuspend: 2,
            },
            algorithm: Algorithm::SgePlain,
            engine_timeout_ms: 30_000,
            dispatch_timeout_ms: 60_000,
            load_formula: LoadFormula {
                slots_weight: 1,
                load_weight: 2,
                expression: Default::default(),
            },
            dispatches_per_run_max: 4_096,
            seed: 42,
            engine_tiers: vec!["type=blade".to_string(), "type=server".to_string()],
            greylist_affinity: 5,
            redundancy: RedundancyPolicy {
                strategy_effective_percent: 50,
                poll_period_ms: 5_000,
                percent_completed_strategy: true,
                remaining_task_percent: 10,
                average_strategy: true,
                average_limit_milli: 3_000,
                std_dev_strategy: true,
                std_dev_limit_milli: 2_500,
                reschedule_first: true,
                copies_per_task_max: 2,
            },
            job_retention_ms: crate::core::event::JOB_RETENTION_MS_DEFAULT,
            sge: crate::core::event::SgePolicy::default(),
            queue_sort_method: crate::core::event::QueueSort::Load,
            techila: crate::core::event::TechilaPolicy {
                max_running_tasks: 500,
                simultaneous_projects: true,
                user_priorities: [("alice".to_string(), 2)].into(),
                cycle_interval_ms: 2_000,
            },
            output: crate::core::event::OutputPolicy {
                task_bytes_max: 1 << 20,
                job_bytes_max: 64 << 20,
                work_dir_retention_ms: 600_000,
            },
            fbsng: sample_fbsng_policy(),
            cigri: sample_cigri_policy(),
            flood: Some(crate::core::event::FloodPolicy {
                algorithm: crate::core::event::FloodAlgorithm::TwoWayAdaptive,
                interval_ms: 5_000,
                ratio_max_milli: 4_000,
                ratio_start_milli: 500,
                waiting_allowed: 2,
                waiting_grace_ms: 1_000,
                remote_queue_timeout_ms: 60_000,
            }),
            caps: crate::core::event::CapsPolicy { max_jobs_per_user: 50, max_tasks: 1_000_000, ..Default::default() },
        }),
        Event::Tick,
        Event::OrderBatch(OrderBatch {
            based_on_seq: Seq(41),
            algorithm: "sge-plain".to_string(),
            algorithm_version: 1,
            orders: vec![
                Order::Dispatch {
                    task: task("render-1", 0),
                    attempt: 1,
                    engine: engine("e1"),
                    epoch: 3,
                },
                Order::Cancel {
                    task: task("render-1", 1),
                    attempt: 2,
                    engine: engine("e1"),
                    reason: CancelReason::JobCancelled,
                },
                Order::EngineLost {
                    engine: engine("e9"),
                    epoch: 12,
                    last_seen_ms: 1_700_000_000_000,
                },
                Order::Requeue {
                    task: task("render-1", 2),
                    attempt: 1,
                    engine: engine("e3"),
                    reason: RequeueReason::DispatchTimeout,
                },
                Order::MarkUnschedulable {
                    job: job("render-1"),
                    reason: Unschedulable::NoEngineHasEnoughSlots,
                },
                Order::MarkUnschedulable {
                    job: job("render-1"),
                    reason: Unschedulable::NoEngineMatchesRequirements,
                },
                Order::MarkUnschedulable {
                    job: job("sweep.2"),
                    reason: Unschedulable::LibraryNotPublished,
                },
                Order::Cancel {
                    task: task("render-1", 3),
                    attempt: 1,
                    engine: engine("e2"),
                    reason: CancelReason::RedundantCopy,
                },
                Order::SyncLibrary {
                    engine: engine("e2"),
                    library: library("render-lib", "2.1.0"),
                },
                Order::Blacklist {
                    job: job("render-1"),
                    engine: engine("e3"),
                    failures: 2,
                },
                Order::Reschedule {
                    task: task("render-1", 4),
                    reason: RescheduleReason::StdDev,
                    elapsed_ms: 90_000,
                    limit_ms: 75_000,
                },
                Order::FailDependent {
                    job: job("sweep.2"),
                    task: Some(1),
                    dependency: "prep/0".to_string(),
                },
                Order::FailDependent {
                    job: job("sweep.2"),
                    task: None,
                    dependency: "prep".to_string(),
                },
            ],
        }),
        Event::OrderBatch(OrderBatch {
            based_on_seq: Seq(0),
            algorithm: String::new(),
            algorithm_version: 0,
            orders: Vec::new(),
        }),
        Event::TasksAdded {
            job: job("sweep.2"),
            tasks: vec![params(&[("x", "4")]), BTreeMap::new()],
            conditions: [(1, busy_conditions())].into(),
        },
        Event::LibraryPublished(LibraryInfo {
            library: library("render-lib", "2.1.0"),
            size_bytes: 12_345_678,
            digest_hex: "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262".to_string(),
        }),
        Event::LibrarySynced {
            engine: engine("e1"),
            library: library("render-lib", "2.1.0"),
        },
        Event::LibrarySyncFailed {
            engine: engine("e1"),
            library: library("ffmpeg", "7"),
            error: "digest mismatch".to_string(),
        },
        Event::BlacklistsCleared {
            engine: Some(engine("e3")),
        },
        Event::BlacklistsCleared { engine: None },
        Event::ProjectorKeyRegistered { key: [3; 32], name: "projector on node-a".to_string() },
        Event::ProjectorKeyRevoked { key: [3; 32] },
        Event::SuspendRequested(TaskSelector { job: job("render-1"), task: Some(7) }),
        Event::ResumeRequested(TaskSelector { job: job("render-1"), task: None }),
        Event::RescheduleRequested(TaskSelector { job: job("render-1"), task: Some(0) }),
        Event::JobHoldChanged { job: job("render-1"), held: true },
        Event::JobHoldChanged { job: job("render-1"), held: false },
        Event::TaskCancelled { task: task("render-1", 3) },
        Event::EngineDrainChanged { engine: engine("e1"), drained: true },
        Event::EngineDrainChanged { engine: engine("e1"), drained: false },
        Event::ProjectPriorityChanged { job: job("render-1"), priority: 2 },
        Event::ProjectPriorityChanged { job: job("render-1"), priority: 9 },
        Event::OrderBatch(OrderBatch {
            based_on_seq: Seq(44),
            algorithm: "sge-plain".to_string(),
            algorithm_version: 4,
            orders: vec![
                Order::Suspend { task: task("render-1", 7), attempt: 1, engine: engine("e1") },
                Order::Resume { task: task("render-1", 7), attempt: 1, engine: engine("e1") },
                Order::Preempt { task: task("render-1", 0), attempt: 2, engine: engine("e3") },
                Order::DispatchParallel {
                    task: task("render-1", 1),
                    attempt: 1,
                    engine: engine("e2"),
                    epoch: 7,
                    parts: vec![
                        crate::core::event::ParallelPart { engine: engine("e1"), epoch: 5, slots: 2 },
                        crate::core::event::ParallelPart { engine: engine("e2"), epoch: 7, slots: 3 },
                    ],
                },
                Order::EndTestCampaign { job: job("render-1"), clusters: 3 },
                Order::FloodRatio { engine: engine("lyon"), ratio_milli: 2_000, waiting: 3, reason: crate::core::event::FloodReason::Down },
                Order::Requeue { task: task("render-1", 3), attempt: 1, engine: engine("lyon"), reason: crate::core::event::RequeueReason::FloodWithdrawn },
                Order::FlagSink { job: job("render-1"), engine: Some(engine("e2")), cluster: "lyon".into(), median_ms: 40, campaign_median_ms: 60_000 },
                Order::FlagSink { job: job("render-1"), engine: None, cluster: "nancy".into(), median_ms: 8, campaign_median_ms: 60_000 },
                Order::Undeliverable { task: task("render-1", 5), attempt: 1, engine: engine("e1"), bytes: 120_071, max: 65_536 },
                Order::Reschedule { task: task("render-1", 2), reason: RescheduleReason::Finalize, elapsed_ms: 9_000, limit_ms: 0 },
            ],
        }),
        Event::EngineReports {
            engine: engine("e1"),
            reports: vec![
                Envelope {
                    id: [21; 16],
                    source: "engine:e1".to_string(),
                    event: Event::TaskStarted { task: task("render-1", 4), attempt: 1, engine: engine("e1"), remote_job: String::new() },
                },
                Envelope {
                    id: [22; 16],
                    source: "engine:e1".to_string(),
                    event: Event::TaskCompleted {
                        task: task("render-1", 4),
                        attempt: 1,
                        engine: engine("e1"),
                        exit_code: 0,
                        cpu_ms: 3,
                        wall_ms: 4,
                        result: b"ok".to_vec(),
                        stored: Default::default(),
                    },
                },
            ],
        },
    ]
}

// ---------------------------------------------------------------------------
// Strategies

fn arb_id_text() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._][A-Za-z0-9._-]{0,63}".prop_filter("ids are not made only of dots", |text| !text.bytes().all(|b| b == b'.'))
}

fn arb_job() -> impl Strategy<Value = JobId> {
    arb_id_text().prop_map(|text| job(&text))
}

/// Engine ids hold no dots: they are NATS subject tokens. No id starts with `-`.
fn arb_engine() -> impl Strategy<Value = EngineId> {
    "[A-Za-z0-9_][A-Za-z0-9_-]{0,63}".prop_map(|text| engine(&text))
}

fn arb_task() -> impl Strategy<Value = TaskRef> {
    (arb_job(), any::<u32>()).prop_map(|(job, index)| TaskRef::new(job, index))
}

fn arb_text() -> impl Strategy<Value = String> {
    ".{0,12}"
}

fn arb_params() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(".{0,6}", ".{0,6}", 0..4)
}

fn arb_library() -> impl Strategy<Value = LibraryRef> {
    (arb_id_text(), arb_id_text()).prop_map(|(name, version)| LibraryRef { name, version })
}

fn arb_preferences() -> impl Strategy<Value = Vec<Preference>> {
    prop::collection::vec(
        (arb_text(), any::<i32>()).prop_map(|(when, weight)| Preference { when, weight }),
        0..3,
    )
}

fn arb_task_conditions() -> impl Strategy<Value = TaskConditions> {
    (
        arb_text(),
        arb_preferences(),
        prop::collection::vec(any::<u32>(), 0..3),
        any::<bool>(),
        prop::collection::vec(arb_task(), 0..3),
    )
        .prop_map(|(discriminator, affinity, task_affinity, queue_jump, depends_on)| {
            TaskConditions {
                discriminator,
                affinity,
                task_affinity,
                queue_jump,
                depends_on,
            }
        })
}

fn arb_conditions() -> impl Strategy<Value = BTreeMap<u32, TaskConditions>> {
    prop::collection::btree_map(any::<u32>(), arb_task_conditions(), 0..3)
}

fn arb_job_options() -> impl Strategy<Value = JobOptions> {
    let options = (
        (
            prop::option::of(arb_library()),
            arb_preferences(),
            prop::collection::vec(arb_job(), 0..3),
            any::<[bool; 6]>(),
            prop::option::of("[a-z_ =\"<>0-9]{0,20}"),
        ),
        (any::<u32>(), any::<u64>(), prop::option::of(any::<u64>()), 0..=1_000_000u32, 0..=7u32, any::<u64>()),
    )
        .prop_map(
            |(
                (root_library, affinity, depends_on_jobs, flags, soft),
                (failures_before_blacklist, task_max_time_ms, deadline_ms, job_share, project_priority, expected_task_time_ms),
            )| {
                let [
                    fail_on_dependency_failure,
                    continue_on_task_failure,
                    engine_blacklisting,
                    engine_greylisting,
                    redundant_rescheduling,
                    cancel_redundant_on_first_result,
                ] = flags;
                JobOptions {
                    root_library,
                    affinity,
                    depends_on_jobs,
                    fail_on_dependency_failure,
                    continue_on_task_failure,
                    engine_blacklisting,
                    failures_before_blacklist,
                    engine_greylisting,
                    redundant_rescheduling,
                    task_max_time_ms,
                    expected_task_time_ms,
                    cancel_redundant_on_first_result,
                    deadline_ms,
                    job_share,
                    tasks_total: None,
                    project_priority,
                    soft: soft.unwrap_or_default(),
                    span: if flags[0] { crate::core::event::Span::Site } else { crate::core::event::Span::Engine },
                    reserve: flags[1],
                    process_type: if flags[1] { "cms".into() } else { String::new() },
                    companion_argv: if flags[0] { vec!["hold".into(), "{index}".into()] } else { Vec::new() },
                    campaign: if flags[0] { crate::core::event::CampaignType::Test } else { Default::default() },
                }
            },
        );
    // Most jobs have none: the absent message must round-trip too.
    prop_oneof![Just(JobOptions::default()), options]
}

fn arb_redundancy() -> impl Strategy<Value = RedundancyPolicy> {
    let redundancy = (
        (0..=100u32, 0..=crate::core::policy_limits::POLICY_DURATION_MS_MAX, 0..=100u32, any::<u32>()),
        (any::<u32>(), any::<u32>(), any::<[bool; 4]>()),
    )
        .prop_map(
            |(
                (strategy_effective_percent, poll_period_ms, remaining_task_percent, average_limit_milli),
                (std_dev_limit_milli, copies_per_task_max, flags),
            )| {
                let [percent_completed_strategy, average_strategy, std_dev_strategy, reschedule_first] = flags;
                RedundancyPolicy {
                    strategy_effective_percent,
                    poll_period_ms,
                    percent_completed_strategy,
                    remaining_task_percent,
                    average_strategy,
                    average_limit_milli,
                    std_dev_strategy,
                    std_dev_limit_milli,
                    reschedule_first,
                    copies_per_task_max,
                }
            },
        );
    prop_oneof![Just(zero_redundancy()), Just(RedundancyPolicy::default()), redundancy]
}

/// What an absent `PolicySet.redundancy` decodes as.
pub fn zero_redundancy() -> RedundancyPolicy {
    RedundancyPolicy {
        strategy_effective_percent: 0,
        poll_period_ms: 0,
        percent_completed_strategy: false,
        remaining_task_percent: 0,
        average_strategy: false,
        average_limit_milli: 0,
        std_dev_strategy: false,
        std_dev_limit_milli: 0,
        reschedule_first: false,
        copies_per_task_max: 0,
    }
}

/// Tiers of the form the wire accepts: `property=value`.
fn arb_engine_tiers() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec("[A-Za-z_][A-Za-z0-9_.-]{0,8}=.{0,8}", 0..3)
}

fn arb_failure_kind() -> impl Strategy<Value = FailureKind> {
    prop_oneof![
        Just(FailureKind::NonZeroExit),
        Just(FailureKind::Signalled),
        Just(FailureKind::WallTimeExceeded),
        Just(FailureKind::LaunchFailed),
        Just(FailureKind::EngineShutdown),
        Just(FailureKind::Preempted),
    ]
}

fn arb_job_spec() -> impl Strategy<Value = JobSpec> {
    let tasks = prop_oneof![
        any::<u32>().prop_map(TaskSet::Count),
        prop::collection::vec(arb_params(), 0..4).prop_map(TaskSet::List),
    ];
    (
        (
            arb_job(),
            arb_text(),
            arb_text(),
            arb_text(),
            any::<i32>(),
            arb_text(),
        ),
        (any::<u32>(), any::<u64>(), any::<u32>()),
        (prop::collection::vec(arb_text(), 0..4), arb_params(), tasks),
        (arb_job_options(), arb_conditions()),
    )
        .prop_map(
            |(
                (id, owner, project, queue, priority, requirements),
                (max_attempts, wall_time_limit_ms, slots_per_task),
                (argv, params, tasks),
                (options, task_conditions),
            )| JobSpec {
                id,
                owner,
                project,
                queue,
                priority,
                requirements,
                max_attempts,
                wall_time_limit_ms,
                slots_per_task,
                template: TaskTemplate { argv, params },
                tasks,
                options,
                task_conditions,
            },
        )
}

fn arb_props() -> impl Strategy<Value = EngineProps> {
    (
        (arb_text(), arb_text(), any::<u32>(), any::<u64>()),
        (any::<u64>(), any::<u64>(), arb_text(), arb_params()),
        prop::collection::vec(arb_library(), 0..3),
    )
        .prop_map(
            |((os, arch, cores, memory_mb), (disk_mb, mflops, site, custom), libraries)| {
                EngineProps {
                    os,
                    arch,
                    cores,
                    memory_mb,
                    disk_mb,
                    mflops,
                    site,
                    custom,
                    libraries,
                }
            },
        )
}

/// Grid Engine's ordering policy within its wire limits: a share tree whose
/// parents come first and whose leaves are distinct, and small tables.
fn arb_sge_policy() -> impl Strategy<Value = crate::core::event::SgePolicy> {
    use crate::core::event::{SgePolicy, ShareTreeLeaf, ShareTreeNode};
    let name = "[a-z]{1,8}";
    let table = || prop::collection::btree_map(name, any::<u32>(), 0..3);
    let nodes = prop::collection::vec((name, any::<u32>(), 0..1_000_001u32, 0..4u8), 0..6);
    (
        (any::<bool>(), 0..=crate::core::policy_limits::POLICY_DURATION_MS_MAX, any::<[u32; 13]>()),
        nodes,
        (table(), table(), table(), table(), table()),
        prop::collection::btree_map(name, prop::collection::vec(name, 0..3), 0..3),
    )
        .prop_map(|((user_sort, halftime_ms, w), nodes, (fu, fp, fd, ou, op), departments)| {
            let mut share_tree: Vec<ShareTreeNode> = Vec::new();
            let mut leaves = std::collections::BTreeSet::new();
            for (at, (name, parent, shares, kind)) in nodes.into_iter().enumerate() {
                // Only an inner node (no leaf) may be a parent.
                let parent = (at > 0).then(|| parent % at as u32).filter(|&p| share_tree[p as usize].leaf.is_none());
                let leaf = match kind {
                    0 => None,
                    1 => Some(ShareTreeLeaf::User(format!("u{name}"))),
                    2 => Some(ShareTreeLeaf::Project(format!("p{name}"))),
                    _ => Some(ShareTreeLeaf::DefaultUser),
                }
                .filter(|leaf| leaves.insert(leaf.clone()));
                share_tree.push(ShareTreeNode { name, parent, shares, leaf });
            }
            SgePolicy {
                user_sort,
                halftime_ms,
                compensation_factor_milli: w[0],
                weight_priority_milli: w[1],
                weight_urgency_milli: w[2],
                weight_ticket_milli: w[3],
                weight_tickets_share: w[4],
                weight_tickets_functional: w[5],
                weight_waiting_time_milli: w[6],
                weight_deadline: w[7],
                slot_urgency: w[8],
                weight_user_milli: w[9],
                weight_project_milli: w[10],
                weight_department_milli: w[11],
                weight_job_milli: w[12],
                share_tree,
                functional_users: fu,
                functional_projects: fp,
                functional_departments: fd,
                departments,
                override_users: ou,
                override_projects: op,
            }
        })
}

/// A policy within its limits (`core::policy_limits`): past them it does not decode.
fn arb_policy() -> impl Strategy<Value = Policy> {
    (
        1..=crate::core::policy_limits::POLICY_DURATION_MS_MAX,
        1..=crate::core::policy_limits::POLICY_DURATION_MS_MAX,
        any::<u32>(),
        any::<u32>(),
        1..=crate::core::event::ORDERS_PER_BATCH_MAX as u32,
        any::<u64>(),
        (
            arb_engine_tiers(),
            any::<u32>(),
            arb_redundancy(),
            prop_oneof![Just(crate::core::event::JOB_RETENTION_MS_DEFAULT), 0..=crate::core::policy_limits::POLICY_DURATION_MS_MAX],
        ),
        (
            prop_oneof![Just(Algorithm::SgePlain), Just(Algorithm::Sgeee), Just(Algorithm::Techila), Just(Algorithm::Fbsng), Just(Algorithm::Cigri)],
            arb_sge_policy(),
            arb_queue_sort(),
            (
                any::<u32>(),
                any::<bool>(),
                prop::collection::btree_map("[a-z]{1,8}", 1..=7u32, 0..4),
                0..=crate::core::family::techila::cycle::CYCLE_INTERVAL_MS_MAX,
            ),
            (
                0..=crate::core::event::OUTPUT_TASK_BYTES_MAX_LIMIT,
                0..=crate::core::event::OUTPUT_JOB_BYTES_MAX_LIMIT,
                1..=crate::core::event::WORK_DIR_RETENTION_MS_LIMIT,
            ),
        ),
    )
        .prop_map(
            |(
                engine_timeout_ms,
                dispatch_timeout_ms,
                slots_weight,
                load_weight,
                per_run,
                seed,
                (engine_tiers, greylist_affinity, redundancy, job_retention_ms),
                (
                    algorithm,
                    sge,
                    (queue_sort_method, expression),
                    (max_running_tasks, simultaneous_projects, user_priorities, cycle_interval_ms),
                    (task_bytes_max, job_bytes_max, work_dir_retention_ms),
                ),
            )| {
                Policy {
                    reservation: crate::core::event::ReservationPolicy {
                        max_reservation: max_running_tasks % (crate::core::event::MAX_RESERVATION_MAX + 1),
                        default_duration_ms: 1 + seed % crate::core::policy_limits::POLICY_DURATION_MS_MAX,
                    },
                    suspend_thresholds: crate::core::event::SuspendThresholds {
                        thresholds: vec![("np_load_avg".into(), (work_dir_retention_ms % 5_000) as i64)],
                        interval_ms: 1 + cycle_interval_ms % 1_000_000,
                        nsuspend: 1 + (max_running_tasks % 1_024),
                    },
                    output: crate::core::event::OutputPolicy { task_bytes_max, job_bytes_max, work_dir_retention_ms },
                    techila: crate::core::event::TechilaPolicy {
                        max_running_tasks,
                        simultaneous_projects,
                        user_priorities,
                        cycle_interval_ms,
                    },
                    algorithm,
                    engine_timeout_ms,
                    dispatch_timeout_ms,
                    load_formula: LoadFormula {
                        slots_weight,
                        load_weight,
                        expression,
                    },
                    dispatches_per_run_max: per_run,
                    seed,
                    engine_tiers,
                    greylist_affinity,
                    redundancy,
                    job_retention_ms,
                    sge,
                    queue_sort_method,
                    fbsng: if simultaneous_projects { sample_fbsng_policy() } else { Default::default() },
                    cigri: if simultaneous_projects { sample_cigri_policy() } else { Default::default() },
                    flood: simultaneous_projects.then(crate::core::event::FloodPolicy::default),
                    caps: if simultaneous_projects {
                        crate::core::event::CapsPolicy {
                            max_jobs_per_user: slots_weight.max(1),
                            max_jobs: load_weight.max(1),
                            max_tasks_per_user: seed.max(1),
                            max_tasks: 1 + seed % 1_000_000,
                        }
                    } else {
                        Default::default()
                    },
                }
            },
        )
}

/// A CiGri policy using every field.
fn sample_cigri_policy() -> crate::core::event::CigriPolicy {
    crate::core::event::CigriPolicy {
        affinity: vec![
            crate::core::event::CigriAffinity { user: "alice".into(), cluster: "lyon".into() },
            crate::core::event::CigriAffinity { user: "bob".into(), cluster: "grenoble".into() },
        ],
        finalize_copies_max: 2,
        sink_ratio_milli: 100,
        sink_min_tasks: 5,
        predictor_window_ms: 600_000,
    }
}

/// An FBSNG policy using every field.
fn sample_fbsng_policy() -> crate::core::event::FbsngPolicy {
    crate::core::event::FbsngPolicy {
        queues: vec![
            crate::core::event::FbsngQueue { name: "high".into(), qp_min: 5, qp_max: 100, qpi: 3, qpd: 1, qpg: 7, spg: 100 },
            crate::core::family::fbsng::default_queue("background"),
        ],
        process_types: vec![crate::core::event::FbsngProcessType {
            name: "cms".into(),
            quota_slots: 200,
            requirements: "project == \"cms\"".into(),
        }],
        min_run_interval_ms: 2_000,
    }
}

/// A queue sort method and a load formula (Grid Engine's), as canonical forms.
fn arb_queue_sort() -> impl Strategy<Value = (crate::core::event::QueueSort, crate::core::load::LoadExpr)> {
    use crate::core::event::QueueSort;
    let formulas = ["", "np_load_avg", "np_load_avg + 0.5*mem_used", "-3 + mem_free*0.001 - swap_used*1000000"];
    (prop_oneof![Just(QueueSort::Load), Just(QueueSort::Seqno)], prop::sample::select(formulas.to_vec()))
        .prop_map(|(method, formula)| (method, crate::core::load::parse(formula).expect("a valid formula")))
}

/// Named load values within the wire's limits.
fn arb_load_values() -> impl Strategy<Value = std::collections::BTreeMap<String, i64>> {
    let bound = crate::core::load::LOAD_VALUE_MILLI_MAX;
    prop::collection::btree_map("[a-z_][a-z0-9_]{0,12}", -bound..=bound, 0..4)
}

fn arb_order() -> impl Strategy<Value = Order> {
    prop_oneof![
        (arb_task(), any::<u32>(), arb_engine(), any::<u64>()).prop_map(|(task, attempt, engine, epoch)| {
            Order::Dispatch {
                task,
                attempt,
                engine,
                epoch,
            }
        }),
        (arb_task(), any::<u32>(), arb_engine(), any::<bool>()).prop_map(
            |(task, attempt, engine, redundant)| Order::Cancel {
                task,
                attempt,
                engine,
                reason: if redundant {
                    CancelReason::RedundantCopy
                } else {
                    CancelReason::JobCancelled
                },
            }
        ),
        (arb_engine(), any::<u64>(), any::<u64>()).prop_map(|(engine, epoch, last_seen_ms)| Order::EngineLost {
            engine,
            epoch,
            last_seen_ms
        }),
        (arb_task(), any::<u32>(), arb_engine()).prop_map(|(task, attempt, engine)| Order::Requeue {
            task,
            attempt,
            engine,
            reason: RequeueReason::DispatchTimeout
        }),
        (
            arb_job(),
            prop_oneof![
                Just(Unschedulable::NoEngineHasEnoughSlots),
                Just(Unschedulable::NoEngineMatchesRequirements),
                Just(Unschedulable::LibraryNotPublished),
                Just(Unschedulable::NoSiteHasEnoughSlots),
            ]
        )
            .prop_map(|(job, reason)| Order::MarkUnschedulable { job, reason }),
        (arb_engine(), arb_library())
            .prop_map(|(engine, library)| Order::SyncLibrary { engine, library }),
        (arb_job(), arb_engine(), any::<u32>()).prop_map(|(job, engine, failures)| {
            Order::Blacklist {
                job,
                engine,
                failures,
            }
        }),
        (
            arb_task(),
            prop_oneof![
                Just(RescheduleReason::TaskMaxTime),
                Just(RescheduleReason::PercentCompleted),
                Just(RescheduleReason::Average),
                Just(RescheduleReason::StdDev),
                Just(RescheduleReason::Expired),
                Just(RescheduleReason::Finalize),
            ],
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(task, reason, elapsed_ms, limit_ms)| Order::Reschedule {
                task,
                reason,
                elapsed_ms,
                limit_ms,
            }),
        (arb_job(), any::<Option<u32>>(), arb_text()).prop_map(|(job, task, dependency)| {
            Order::FailDependent {
                job,
                task,
                dependency,
            }
        }),
        (arb_task(), any::<u32>(), arb_engine(), 0..3u8).prop_map(|(task, attempt, engine, kind)| match kind {
            0 => Order::Suspend { task, attempt, engine },
            1 => Order::Resume { task, attempt, engine },
            _ => Order::Preempt { task, attempt, engine },
        }),
        (arb_task(), any::<u32>(), arb_engine(), any::<u64>(), prop::collection::vec((arb_engine(), any::<u64>(), any::<u32>()), 0..4))
            .prop_map(|(task, attempt, engine, epoch, parts)| Order::DispatchParallel {
                task,
                attempt,
                engine,
                epoch,
                parts: parts
                    .into_iter()
                    .map(|(engine, epoch, slots)| crate::core::event::ParallelPart { engine, epoch, slots })
                    .collect(),
            }),
        (arb_job(), any::<u32>()).prop_map(|(job, clusters)| Order::EndTestCampaign { job, clusters }),
        (arb_engine(), any::<u32>(), any::<u32>(), 0..3u8).prop_map(|(engine, ratio_milli, waiting, reason)| Order::FloodRatio {
            engine,
            ratio_milli,
            waiting,
            reason: [crate::core::event::FloodReason::Start, crate::core::event::FloodReason::Up, crate::core::event::FloodReason::Down]
                [usize::from(reason)],
        }),
        (arb_job(), proptest::option::of(arb_engine()), "[a-z]{0,64}", any::<u64>(), any::<u64>()).prop_map(
            |(job, engine, cluster, median_ms, campaign_median_ms)| Order::FlagSink { job, engine, cluster, median_ms, campaign_median_ms }
        ),
        (arb_task(), any::<u32>(), arb_engine(), any::<u64>(), any::<u64>())
            .prop_map(|(task, attempt, engine, bytes, max)| Order::Undeliverable { task, attempt, engine, bytes, max }),
    ]
}

pub fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        arb_job_spec().prop_map(Event::JobSubmitted),
        (arb_job(), arb_text()).prop_map(|(job, reason)| Event::JobCancelled { job, reason }),
        (arb_job(), any::<i32>())
            .prop_map(|(job, priority)| Event::JobPriorityChanged { job, priority }),
        (arb_job(), any::<u32>()).prop_map(|(job, tickets)| Event::JobOverrideTicketsSet { job, tickets }),
        (arb_engine(), any::<u32>(), arb_props()).prop_map(|(engine, slots, props)| {
            Event::EngineLoggedIn {
                engine,
                slots,
                props,
            }
        }),
        arb_engine().prop_map(|engine| Event::EngineLoggedOut { engine }),
        (arb_engine(), any::<u32>(), any::<u64>(), arb_load_values()).prop_map(|(engine, load, free, values_milli)| {
            Event::EngineHeartbeat {
                engine,
                load: EngineLoad {
                    load_per_core_milli: load,
                    memory_free_mb: free,
                    values_milli,
                },
            }
        }),
        (arb_task(), any::<u32>(), arb_engine()).prop_map(|(task, attempt, engine)| {
            Event::TaskStarted {
                task,
                attempt,
                engine,
                remote_job: String::new(),
            }
        }),
        (
            (arb_task(), any::<u32>(), arb_engine(), any::<i32>()),
            (
                any::<u64>(),
                any::<u64>(),
                prop::collection::vec(any::<u8>(), 0..32)
            ),
        )
            .prop_map(
                |((task, attempt, engine, exit_code), (cpu_ms, wall_ms, result))| {
                    Event::TaskCompleted {
                        task,
                        attempt,
                        engine,
                        exit_code,
                        cpu_ms,
                        wall_ms,
                        result,
                        stored: Default::default(),
                    }
                }
            ),
        (
            (arb_task(), any::<u32>(), arb_engine()),
            (any::<Option<i32>>(), arb_failure_kind(), arb_text()),
        )
            .prop_map(|((task, attempt, engine), (exit_code, kind, error_tail))| {
                Event::TaskFailed {
                    task,
                    attempt,
                    engine,
                    exit_code,
                    kind,
                    error_tail,
                    stored: Default::default(),
                }
            }),
        arb_policy().prop_map(Event::PolicySet),
        Just(Event::Tick),
        (
            any::<u64>(),
            arb_text(),
            any::<u32>(),
            prop::collection::vec(arb_order(), 0..6)
        )
            .prop_map(|(seq, algorithm, algorithm_version, orders)| {
                Event::OrderBatch(OrderBatch {
                    based_on_seq: Seq(seq),
                    algorithm,
                    algorithm_version,
                    orders,
                })
            }),
        (
            arb_job(),
            prop::collection::vec(arb_params(), 0..4),
            arb_conditions()
        )
            .prop_map(|(job, tasks, conditions)| Event::TasksAdded {
                job,
                tasks,
                conditions
            }),
        (arb_library(), any::<u64>(), arb_text()).prop_map(|(library, size_bytes, digest_hex)| {
            Event::LibraryPublished(LibraryInfo {
                library,
                size_bytes,
                digest_hex,
            })
        }),
        (arb_engine(), arb_library())
            .prop_map(|(engine, library)| Event::LibrarySynced { engine, library }),
        (arb_engine(), arb_library(), arb_text()).prop_map(|(engine, library, error)| {
            Event::LibrarySyncFailed {
                engine,
                library,
                error,
            }
        }),
        prop::option::of(arb_engine()).prop_map(|engine| Event::BlacklistsCleared { engine }),
        (any::<[u8; 32]>(), arb_text()).prop_map(|(key, name)| Event::ProjectorKeyRegistered { key, name }),
        any::<[u8; 32]>().prop_map(|key| Event::ProjectorKeyRevoked { key }),
        (arb_job(), any::<Option<u32>>(), 0..3u8).prop_map(|(job, task, kind)| {
            let target = TaskSelector { job, task };
            match kind {
                0 => Event::SuspendRequested(target),
                1 => Event::ResumeRequested(target),
                _ => Event::RescheduleRequested(target),
            }
        }),
        (arb_job(), any::<bool>()).prop_map(|(job, held)| Event::JobHoldChanged { job, held }),
        (arb_job(), any::<u32>()).prop_map(|(job, index)| Event::TaskCancelled { task: TaskRef::new(job, index) }),
        (arb_engine(), any::<bool>()).prop_map(|(engine, drained)| Event::EngineDrainChanged { engine, drained }),
        (arb_job(), any::<u32>()).prop_map(|(job, priority)| Event::ProjectPriorityChanged { job, priority }),
    ]
}

pub fn arb_envelope() -> impl Strategy<Value = Envelope> {
    let single = || {
        (any::<[u8; 16]>(), arb_text(), arb_event()).prop_map(|(id, source, event)| Envelope {
            id,
            source,
            event,
        })
    };
    prop_oneof![
        9 => single(),
        1 => (any::<[u8; 16]>(), arb_text(), arb_engine(), prop::collection::vec(single(), 0..4)).prop_map(
            |(id, source, engine, reports)| Envelope { id, source, event: Event::EngineReports { engine, reports } }
        ),
    ]
}
