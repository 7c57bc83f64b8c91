//! Test fixtures for the wire: one envelope of every event and order variant,
//! and proptest strategies for arbitrary core envelopes.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::core::event::{
    Algorithm, CancelReason, EngineLoad, EngineProps, Envelope, Event, FailureKind, JobSpec,
    LoadFormula, Order, OrderBatch, Policy, RequeueReason, TaskSet, TaskTemplate, Unschedulable,
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
    }
}
pub const EVENT_VARIANTS: usize = 12;

/// As [`event_variant_idx`], for orders.
pub fn order_variant_idx(order: &Order) -> usize {
    match order {
        Order::Dispatch { .. } => 0,
        Order::Cancel { .. } => 1,
        Order::EngineLost { .. } => 2,
        Order::Requeue { .. } => 3,
        Order::MarkUnschedulable { .. } => 4,
    }
}
pub const ORDER_VARIANTS: usize = 5;

fn params(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One event of every variant (both task-set forms, every order variant),
/// with every field set to something other than its zero.
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
            },
        },
        Event::TaskStarted {
            task: task("render-1", 7),
            attempt: 1,
            engine: engine("e1"),
        },
        Event::TaskCompleted {
            task: task("render-1", 7),
            attempt: 1,
            engine: engine("e1"),
            exit_code: 0,
            cpu_ms: 5_000,
            wall_ms: 6_000,
            result: b"frame 7 done\n".to_vec(),
        },
        Event::TaskCompleted {
            task: task("render-1", 8),
            attempt: 2,
            engine: engine("e_2"),
            exit_code: 3,
            cpu_ms: 1,
            wall_ms: 2,
            result: vec![0xff, 0xfe, 0x00],
        },
        Event::TaskFailed {
            task: task("render-1", 9),
            attempt: 1,
            engine: engine("e1"),
            exit_code: Some(139),
            kind: FailureKind::Signalled,
            error_tail: "segmentation fault".to_string(),
        },
        Event::TaskFailed {
            task: task("render-1", 9),
            attempt: 2,
            engine: engine("e1"),
            exit_code: None,
            kind: FailureKind::LaunchFailed,
            error_tail: String::new(),
        },
        Event::PolicySet(Policy {
            algorithm: Algorithm::SgePlain,
            engine_timeout_ms: 30_000,
            dispatch_timeout_ms: 60_000,
            load_formula: LoadFormula {
                slots_weight: 1,
                load_weight: 2,
            },
            dispatches_per_run_max: 4_096,
            seed: 42,
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
                },
                Order::Cancel {
                    task: task("render-1", 1),
                    attempt: 2,
                    engine: engine("e1"),
                    reason: CancelReason::JobCancelled,
                },
                Order::EngineLost {
                    engine: engine("e9"),
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
            ],
        }),
        Event::OrderBatch(OrderBatch {
            based_on_seq: Seq(0),
            algorithm: String::new(),
            algorithm_version: 0,
            orders: Vec::new(),
        }),
    ]
}

// ---------------------------------------------------------------------------
// Strategies

fn arb_id_text() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._-]{1,64}".prop_filter("ids are not made only of dots", |text| !text.bytes().all(|b| b == b'.'))
}

fn arb_job() -> impl Strategy<Value = JobId> {
    arb_id_text().prop_map(|text| job(&text))
}

/// Engine ids hold no dots: they are NATS subject tokens.
fn arb_engine() -> impl Strategy<Value = EngineId> {
    "[A-Za-z0-9_-]{1,64}".prop_map(|text| engine(&text))
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

fn arb_failure_kind() -> impl Strategy<Value = FailureKind> {
    prop_oneof![
        Just(FailureKind::NonZeroExit),
        Just(FailureKind::Signalled),
        Just(FailureKind::WallTimeExceeded),
        Just(FailureKind::LaunchFailed),
        Just(FailureKind::EngineShutdown),
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
    )
        .prop_map(
            |(
                (id, owner, project, queue, priority, requirements),
                (max_attempts, wall_time_limit_ms, slots_per_task),
                (argv, params, tasks),
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
            },
        )
}

fn arb_props() -> impl Strategy<Value = EngineProps> {
    (
        (arb_text(), arb_text(), any::<u32>(), any::<u64>()),
        (any::<u64>(), any::<u64>(), arb_text(), arb_params()),
    )
        .prop_map(
            |((os, arch, cores, memory_mb), (disk_mb, mflops, site, custom))| EngineProps {
                os,
                arch,
                cores,
                memory_mb,
                disk_mb,
                mflops,
                site,
                custom,
            },
        )
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(
            |(engine_timeout_ms, dispatch_timeout_ms, slots_weight, load_weight, per_run, seed)| {
                Policy {
                    algorithm: Algorithm::SgePlain,
                    engine_timeout_ms,
                    dispatch_timeout_ms,
                    load_formula: LoadFormula {
                        slots_weight,
                        load_weight,
                    },
                    dispatches_per_run_max: per_run,
                    seed,
                }
            },
        )
}

fn arb_order() -> impl Strategy<Value = Order> {
    prop_oneof![
        (arb_task(), any::<u32>(), arb_engine()).prop_map(|(task, attempt, engine)| {
            Order::Dispatch {
                task,
                attempt,
                engine,
            }
        }),
        (arb_task(), any::<u32>(), arb_engine()).prop_map(|(task, attempt, engine)| {
            Order::Cancel {
                task,
                attempt,
                engine,
                reason: CancelReason::JobCancelled,
            }
        }),
        (arb_engine(), any::<u64>()).prop_map(|(engine, last_seen_ms)| Order::EngineLost {
            engine,
            last_seen_ms
        }),
        (arb_task(), any::<u32>(), arb_engine()).prop_map(|(task, attempt, engine)| Order::Requeue {
            task,
            attempt,
            engine,
            reason: RequeueReason::DispatchTimeout
        }),
        (arb_job(), any::<bool>()).prop_map(|(job, matches)| Order::MarkUnschedulable {
            job,
            reason: if matches {
                Unschedulable::NoEngineHasEnoughSlots
            } else {
                Unschedulable::NoEngineMatchesRequirements
            },
        }),
    ]
}

pub fn arb_event() -> impl Strategy<Value = Event> {
    prop_oneof![
        arb_job_spec().prop_map(Event::JobSubmitted),
        (arb_job(), arb_text()).prop_map(|(job, reason)| Event::JobCancelled { job, reason }),
        (arb_job(), any::<i32>())
            .prop_map(|(job, priority)| Event::JobPriorityChanged { job, priority }),
        (arb_engine(), any::<u32>(), arb_props()).prop_map(|(engine, slots, props)| {
            Event::EngineLoggedIn {
                engine,
                slots,
                props,
            }
        }),
        arb_engine().prop_map(|engine| Event::EngineLoggedOut { engine }),
        (arb_engine(), any::<u32>(), any::<u64>()).prop_map(|(engine, load, free)| {
            Event::EngineHeartbeat {
                engine,
                load: EngineLoad {
                    load_per_core_milli: load,
                    memory_free_mb: free,
                },
            }
        }),
        (arb_task(), any::<u32>(), arb_engine()).prop_map(|(task, attempt, engine)| {
            Event::TaskStarted {
                task,
                attempt,
                engine,
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
    ]
}

pub fn arb_envelope() -> impl Strategy<Value = Envelope> {
    (any::<[u8; 16]>(), arb_text(), arb_event()).prop_map(|(id, source, event)| Envelope {
        id,
        source,
        event,
    })
}
