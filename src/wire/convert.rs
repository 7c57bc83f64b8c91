//! Core types to protobuf and back.
//!
//! Core to protobuf is total: every core value has exactly one protobuf form.
//! Protobuf to core validates what the core's types promise (UUIDs, ids per
//! `core::ids`, a set oneof, known enum values, a known algorithm name) and
//! nothing more: what an event *means* (an attempt of 0, a result over 64 KiB,
//! a batch over 8192 orders) is for the fold to judge and record as a rejection.
//! For every core envelope `e`, `from_proto(to_proto(&e)) == Ok(e)`.

use uuid::Uuid;

use super::json::ProtoEnum;
use super::proto;
use crate::core::event::{
    Algorithm, CancelReason, EngineLoad, EngineProps, Envelope, Event, FailureKind, JobSpec,
    LoadFormula, Order, OrderBatch, Policy, RequeueReason, TaskSet, TaskTemplate, Unschedulable,
};
use crate::core::ids::{EngineId, IdError, JobId, Seq, TaskRef};

/// Why bytes or a protobuf message are not a valid envelope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes are not protobuf of an `Envelope` at all.
    #[error("not a gridfold.v1.Envelope: {0}")]
    NotProtobuf(String),
    /// The message parsed, but one field is wrong. `field` is the path from the
    /// envelope, as in the JSON of history files: `event.task_started.task.job`,
    /// `event.order_batch.orders[3].dispatch.engine`.
    #[error("{field}: {problem}")]
    Field {
        field: String,
        problem: FieldProblem,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    #[error("not a UUID in its 36-character hyphenated form: {0}")]
    BadUuid(String),
    #[error("{0}")]
    BadId(IdError),
    /// A oneof holds nothing, or a kind this version of the schema does not know.
    #[error("missing, or a kind this version does not know; expected one of {expected}")]
    MissingOneof { expected: &'static str },
    #[error("{enum_name} value {value} is unknown to this version")]
    UnknownEnumValue { enum_name: &'static str, value: i32 },
    #[error("must be set: {enum_name} 0 (UNSPECIFIED) is not a value")]
    Unspecified { enum_name: &'static str },
    #[error("unknown algorithm {name}; known: {known}")]
    UnknownAlgorithm { name: String, known: String },
}

impl WireError {
    fn at(field: &str, problem: FieldProblem) -> Self {
        WireError::Field {
            field: field.to_string(),
            problem,
        }
    }

    /// Prefixes the field path with the name of the message that holds it.
    fn within(self, outer: &str) -> Self {
        match self {
            WireError::Field { field, problem } if field.is_empty() => WireError::Field {
                field: outer.to_string(),
                problem,
            },
            WireError::Field { field, problem } => WireError::Field {
                field: format!("{outer}.{field}"),
                problem,
            },
            other => other,
        }
    }

    /// The path of the wrong field, if the error is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            WireError::Field { field, .. } => Some(field),
            WireError::NotProtobuf(_) => None,
        }
    }
}

/// Echoes at most this many characters of bad input in an error, so that a
/// hostile megabyte-long "id" does not become a megabyte-long rejection.
const ECHO_CHARS_MAX: usize = 40;

fn echo(text: &str) -> String {
    if text.chars().count() <= ECHO_CHARS_MAX {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(ECHO_CHARS_MAX).collect();
        format!("{head:?}…")
    }
}

const EVENT_KINDS: &str = "job_submitted, job_cancelled, job_priority_changed, engine_logged_in, \
    engine_logged_out, engine_heartbeat, task_started, task_completed, task_failed, policy_set, \
    tick, order_batch";
const ORDER_KINDS: &str = "dispatch, cancel, engine_lost, requeue, mark_unschedulable";
const TASK_SET_KINDS: &str = "count, list";

/// Every algorithm, for error messages. The match below fails to compile when
/// one is added and not listed here.
const ALGORITHMS: &[Algorithm] = &[Algorithm::SgePlain];
const _: fn(Algorithm) = |algorithm| match algorithm {
    Algorithm::SgePlain => {}
};

// ---------------------------------------------------------------------------
// Core to protobuf

/// The protobuf form of a core envelope. Total and deterministic.
pub fn envelope_to_proto(envelope: &Envelope) -> proto::Envelope {
    proto::Envelope {
        id: Uuid::from_bytes(envelope.id).hyphenated().to_string(),
        source: envelope.source.clone(),
        event: Some(event_to_proto(&envelope.event)),
    }
}

pub(super) fn task_ref_to_proto(task: &TaskRef) -> Option<proto::TaskRef> {
    Some(proto::TaskRef {
        job: task.job.to_string(),
        index: task.index,
    })
}

fn event_to_proto(event: &Event) -> proto::envelope::Event {
    use proto::envelope::Event as P;
    match event {
        Event::JobSubmitted(spec) => P::JobSubmitted(proto::JobSubmitted {
            id: spec.id.to_string(),
            owner: spec.owner.clone(),
            project: spec.project.clone(),
            queue: spec.queue.clone(),
            priority: spec.priority,
            requirements: spec.requirements.clone(),
            max_attempts: spec.max_attempts,
            wall_time_limit_ms: spec.wall_time_limit_ms,
            slots_per_task: spec.slots_per_task,
            template: Some(proto::TaskTemplate {
                argv: spec.template.argv.clone(),
                params: spec.template.params.clone(),
            }),
            tasks: Some(match &spec.tasks {
                TaskSet::Count(count) => proto::job_submitted::Tasks::Count(*count),
                TaskSet::List(list) => proto::job_submitted::Tasks::List(proto::TaskParamsList {
                    tasks: list
                        .iter()
                        .map(|params| proto::TaskParams {
                            params: params.clone(),
                        })
                        .collect(),
                }),
            }),
        }),
        Event::JobCancelled { job, reason } => P::JobCancelled(proto::JobCancelled {
            job: job.to_string(),
            reason: reason.clone(),
        }),
        Event::JobPriorityChanged { job, priority } => {
            P::JobPriorityChanged(proto::JobPriorityChanged {
                job: job.to_string(),
                priority: *priority,
            })
        }
        Event::EngineLoggedIn {
            engine,
            slots,
            props,
        } => P::EngineLoggedIn(proto::EngineLoggedIn {
            engine: engine.to_string(),
            slots: *slots,
            props: Some(proto::EngineProperties {
                os: props.os.clone(),
                arch: props.arch.clone(),
                cores: props.cores,
                memory_mb: props.memory_mb,
                disk_mb: props.disk_mb,
                mflops: props.mflops,
                site: props.site.clone(),
                custom: props.custom.clone(),
            }),
        }),
        Event::EngineLoggedOut { engine } => P::EngineLoggedOut(proto::EngineLoggedOut {
            engine: engine.to_string(),
        }),
        Event::EngineHeartbeat { engine, load } => P::EngineHeartbeat(proto::EngineHeartbeat {
            engine: engine.to_string(),
            load: Some(proto::EngineLoad {
                load_per_core_milli: load.load_per_core_milli,
                memory_free_mb: load.memory_free_mb,
            }),
        }),
        Event::TaskStarted {
            task,
            attempt,
            engine,
        } => P::TaskStarted(proto::TaskStarted {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
        }),
        Event::TaskCompleted {
            task,
            attempt,
            engine,
            exit_code,
            cpu_ms,
            wall_ms,
            result,
        } => P::TaskCompleted(proto::TaskCompleted {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            exit_code: *exit_code,
            cpu_ms: *cpu_ms,
            wall_ms: *wall_ms,
            result: result.clone(),
        }),
        Event::TaskFailed {
            task,
            attempt,
            engine,
            exit_code,
            kind,
            error_tail,
        } => P::TaskFailed(proto::TaskFailed {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            exit_code: *exit_code,
            kind: failure_kind_to_proto(*kind) as i32,
            error_tail: error_tail.clone(),
        }),
        Event::PolicySet(policy) => P::PolicySet(proto::PolicySet {
            algorithm: policy.algorithm.name().to_string(),
            engine_timeout_ms: policy.engine_timeout_ms,
            dispatch_timeout_ms: policy.dispatch_timeout_ms,
            load_formula: Some(proto::LoadFormula {
                slots_weight: policy.load_formula.slots_weight,
                load_weight: policy.load_formula.load_weight,
            }),
            dispatches_per_run_max: policy.dispatches_per_run_max,
            seed: policy.seed,
        }),
        Event::Tick => P::Tick(proto::Tick {}),
        Event::OrderBatch(batch) => P::OrderBatch(proto::OrderBatch {
            based_on_seq: batch.based_on_seq.0,
            algorithm: batch.algorithm.clone(),
            algorithm_version: batch.algorithm_version,
            orders: batch.orders.iter().map(order_to_proto).collect(),
        }),
    }
}

pub(super) fn order_to_proto(order: &Order) -> proto::Order {
    use proto::order::Kind as P;
    let kind = match order {
        Order::Dispatch {
            task,
            attempt,
            engine,
        } => P::Dispatch(proto::Dispatch {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
        }),
        Order::Cancel {
            task,
            attempt,
            engine,
            reason,
        } => P::Cancel(proto::Cancel {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            reason: match reason {
                CancelReason::JobCancelled => proto::CancelReason::JobCancelled,
                CancelReason::Requeued => proto::CancelReason::Requeued,
            } as i32,
        }),
        Order::EngineLost {
            engine,
            last_seen_ms,
        } => P::EngineLost(proto::EngineLost {
            engine: engine.to_string(),
            last_seen_ms: *last_seen_ms,
        }),
        Order::Requeue {
            task,
            attempt,
            engine,
            reason,
        } => P::Requeue(proto::Requeue {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            reason: match reason {
                RequeueReason::DispatchTimeout => proto::RequeueReason::DispatchTimeout,
            } as i32,
        }),
        Order::MarkUnschedulable { job, reason } => {
            P::MarkUnschedulable(proto::MarkUnschedulable {
                job: job.to_string(),
                reason: match reason {
                    Unschedulable::NoEngineMatchesRequirements => {
                        proto::Unschedulable::NoEngineMatchesRequirements
                    }
                    Unschedulable::NoEngineHasEnoughSlots => {
                        proto::Unschedulable::NoEngineHasEnoughSlots
                    }
                } as i32,
            })
        }
    };
    proto::Order { kind: Some(kind) }
}

fn failure_kind_to_proto(kind: FailureKind) -> proto::FailureKind {
    match kind {
        FailureKind::NonZeroExit => proto::FailureKind::NonZeroExit,
        FailureKind::Signalled => proto::FailureKind::Signalled,
        FailureKind::WallTimeExceeded => proto::FailureKind::WallTimeExceeded,
        FailureKind::LaunchFailed => proto::FailureKind::LaunchFailed,
        FailureKind::EngineShutdown => proto::FailureKind::EngineShutdown,
    }
}

// ---------------------------------------------------------------------------
// Protobuf to core

/// The core envelope a protobuf envelope stands for, or the first field that is wrong.
pub fn envelope_from_proto(envelope: proto::Envelope) -> Result<Envelope, WireError> {
    let id = uuid_from_text(&envelope.id).map_err(|problem| WireError::at("id", problem))?;
    let event = envelope.event.ok_or_else(|| {
        WireError::at(
            "event",
            FieldProblem::MissingOneof {
                expected: EVENT_KINDS,
            },
        )
    })?;
    let event = event_from_proto(event)?;
    Ok(Envelope {
        id,
        source: envelope.source,
        event,
    })
}

/// Accepts the 36-character hyphenated form, in either case; the nil UUID is
/// accepted (it is a poor dedup key, but a valid one).
fn uuid_from_text(text: &str) -> Result<[u8; 16], FieldProblem> {
    if text.len() != 36 {
        return Err(FieldProblem::BadUuid(format!(
            "{} has {} bytes",
            echo(text),
            text.len()
        )));
    }
    Uuid::parse_str(text)
        .map(|uuid| uuid.into_bytes())
        .map_err(|e| FieldProblem::BadUuid(format!("{}: {e}", echo(text))))
}

fn job_id(field: &str, text: &str) -> Result<JobId, WireError> {
    JobId::new(text).map_err(|e| WireError::at(field, FieldProblem::BadId(e)))
}

pub(super) fn engine_id(field: &str, text: &str) -> Result<EngineId, WireError> {
    EngineId::new(text).map_err(|e| WireError::at(field, FieldProblem::BadId(e)))
}

/// An absent `TaskRef` reads as an empty one, so the error names `task.job`.
pub(super) fn task_ref(task: Option<proto::TaskRef>) -> Result<TaskRef, WireError> {
    let task = task.unwrap_or_default();
    let job = job_id("job", &task.job).map_err(|e| e.within("task"))?;
    Ok(TaskRef::new(job, task.index))
}

/// The proto enum value of `value`, refusing numbers this version does not know.
fn known_enum<E: ProtoEnum>(field: &str, value: i32) -> Result<E, WireError> {
    E::try_from(value).map_err(|_| {
        WireError::at(
            field,
            FieldProblem::UnknownEnumValue {
                enum_name: E::NAME,
                value,
            },
        )
    })
}

/// The error for an enum left at `*_UNSPECIFIED`.
fn unspecified<E: ProtoEnum>(field: &str) -> WireError {
    WireError::at(field, FieldProblem::Unspecified { enum_name: E::NAME })
}

fn event_from_proto(event: proto::envelope::Event) -> Result<Event, WireError> {
    use proto::envelope::Event as P;
    let (kind, event) = match event {
        P::JobSubmitted(m) => ("job_submitted", job_spec(m).map(Event::JobSubmitted)),
        P::JobCancelled(m) => (
            "job_cancelled",
            job_id("job", &m.job).map(|job| Event::JobCancelled {
                job,
                reason: m.reason,
            }),
        ),
        P::JobPriorityChanged(m) => (
            "job_priority_changed",
            job_id("job", &m.job).map(|job| Event::JobPriorityChanged {
                job,
                priority: m.priority,
            }),
        ),
        P::EngineLoggedIn(m) => ("engine_logged_in", engine_logged_in(m)),
        P::EngineLoggedOut(m) => (
            "engine_logged_out",
            engine_id("engine", &m.engine).map(|engine| Event::EngineLoggedOut { engine }),
        ),
        P::EngineHeartbeat(m) => ("engine_heartbeat", engine_heartbeat(m)),
        P::TaskStarted(m) => ("task_started", task_started(m)),
        P::TaskCompleted(m) => ("task_completed", task_completed(m)),
        P::TaskFailed(m) => ("task_failed", task_failed(m)),
        P::PolicySet(m) => ("policy_set", policy(m).map(Event::PolicySet)),
        P::Tick(proto::Tick {}) => ("tick", Ok(Event::Tick)),
        P::OrderBatch(m) => ("order_batch", order_batch(m).map(Event::OrderBatch)),
    };
    event.map_err(|e| e.within(kind).within("event"))
}

fn job_spec(m: proto::JobSubmitted) -> Result<JobSpec, WireError> {
    let id = job_id("id", &m.id)?;
    let template = m.template.unwrap_or_default();
    let tasks = match m.tasks {
        Some(proto::job_submitted::Tasks::Count(count)) => TaskSet::Count(count),
        Some(proto::job_submitted::Tasks::List(list)) => {
            TaskSet::List(list.tasks.into_iter().map(|task| task.params).collect())
        }
        None => {
            return Err(WireError::at(
                "tasks",
                FieldProblem::MissingOneof {
                    expected: TASK_SET_KINDS,
                },
            ));
        }
    };
    Ok(JobSpec {
        id,
        owner: m.owner,
        project: m.project,
        queue: m.queue,
        priority: m.priority,
        requirements: m.requirements,
        max_attempts: m.max_attempts,
        wall_time_limit_ms: m.wall_time_limit_ms,
        slots_per_task: m.slots_per_task,
        template: TaskTemplate {
            argv: template.argv,
            params: template.params,
        },
        tasks,
    })
}

fn engine_logged_in(m: proto::EngineLoggedIn) -> Result<Event, WireError> {
    let engine = engine_id("engine", &m.engine)?;
    let props = m.props.unwrap_or_default();
    Ok(Event::EngineLoggedIn {
        engine,
        slots: m.slots,
        props: EngineProps {
            os: props.os,
            arch: props.arch,
            cores: props.cores,
            memory_mb: props.memory_mb,
            disk_mb: props.disk_mb,
            mflops: props.mflops,
            site: props.site,
            custom: props.custom,
        },
    })
}

fn engine_heartbeat(m: proto::EngineHeartbeat) -> Result<Event, WireError> {
    let engine = engine_id("engine", &m.engine)?;
    let load = m.load.unwrap_or_default();
    Ok(Event::EngineHeartbeat {
        engine,
        load: EngineLoad {
            load_per_core_milli: load.load_per_core_milli,
            memory_free_mb: load.memory_free_mb,
        },
    })
}

fn task_started(m: proto::TaskStarted) -> Result<Event, WireError> {
    Ok(Event::TaskStarted {
        task: task_ref(m.task)?,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
    })
}

fn task_completed(m: proto::TaskCompleted) -> Result<Event, WireError> {
    Ok(Event::TaskCompleted {
        task: task_ref(m.task)?,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        exit_code: m.exit_code,
        cpu_ms: m.cpu_ms,
        wall_ms: m.wall_ms,
        result: m.result,
    })
}

fn task_failed(m: proto::TaskFailed) -> Result<Event, WireError> {
    let task = task_ref(m.task)?;
    let engine = engine_id("engine", &m.engine)?;
    let kind = match known_enum::<proto::FailureKind>("kind", m.kind)? {
        proto::FailureKind::Unspecified => return Err(unspecified::<proto::FailureKind>("kind")),
        proto::FailureKind::NonZeroExit => FailureKind::NonZeroExit,
        proto::FailureKind::Signalled => FailureKind::Signalled,
        proto::FailureKind::WallTimeExceeded => FailureKind::WallTimeExceeded,
        proto::FailureKind::LaunchFailed => FailureKind::LaunchFailed,
        proto::FailureKind::EngineShutdown => FailureKind::EngineShutdown,
    };
    Ok(Event::TaskFailed {
        task,
        attempt: m.attempt,
        engine,
        exit_code: m.exit_code,
        kind,
        error_tail: m.error_tail,
    })
}

fn policy(m: proto::PolicySet) -> Result<Policy, WireError> {
    let algorithm = Algorithm::from_name(&m.algorithm).ok_or_else(|| {
        let known: Vec<&str> = ALGORITHMS.iter().map(|a| a.name()).collect();
        WireError::at(
            "algorithm",
            FieldProblem::UnknownAlgorithm {
                name: echo(&m.algorithm),
                known: known.join(", "),
            },
        )
    })?;
    // No defaults but protobuf's zeros (see PolicySet in the schema): an absent
    // formula weighs nothing, whatever `LoadFormula::default()` says today.
    let formula = m.load_formula.unwrap_or_default();
    Ok(Policy {
        algorithm,
        engine_timeout_ms: m.engine_timeout_ms,
        dispatch_timeout_ms: m.dispatch_timeout_ms,
        load_formula: LoadFormula {
            slots_weight: formula.slots_weight,
            load_weight: formula.load_weight,
        },
        dispatches_per_run_max: m.dispatches_per_run_max,
        seed: m.seed,
    })
}

fn order_batch(m: proto::OrderBatch) -> Result<OrderBatch, WireError> {
    let orders = m
        .orders
        .into_iter()
        .enumerate()
        .map(|(order_idx, order)| {
            order_from_proto(order).map_err(|e| e.within(&format!("orders[{order_idx}]")))
        })
        .collect::<Result<Vec<Order>, WireError>>()?;
    Ok(OrderBatch {
        based_on_seq: Seq(m.based_on_seq),
        algorithm: m.algorithm,
        algorithm_version: m.algorithm_version,
        orders,
    })
}

/// Errors name the field from the order's oneof (`dispatch.engine`); the
/// order itself is transparent in JSON, so `orders[3].dispatch.engine` is
/// exactly where a person finds it.
pub(super) fn order_from_proto(order: proto::Order) -> Result<Order, WireError> {
    use proto::order::Kind as P;
    let Some(kind) = order.kind else {
        // The order is transparent in JSON: say "missing" of the order itself.
        return Err(WireError::Field {
            field: String::new(),
            problem: FieldProblem::MissingOneof {
                expected: ORDER_KINDS,
            },
        });
    };
    let (name, order) = match kind {
        P::Dispatch(m) => ("dispatch", dispatch(m)),
        P::Cancel(m) => ("cancel", cancel(m)),
        P::EngineLost(m) => (
            "engine_lost",
            engine_id("engine", &m.engine).map(|engine| Order::EngineLost {
                engine,
                last_seen_ms: m.last_seen_ms,
            }),
        ),
        P::Requeue(m) => ("requeue", requeue(m)),
        P::MarkUnschedulable(m) => ("mark_unschedulable", mark_unschedulable(m)),
    };
    order.map_err(|e| e.within(name))
}

fn dispatch(m: proto::Dispatch) -> Result<Order, WireError> {
    Ok(Order::Dispatch {
        task: task_ref(m.task)?,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
    })
}

fn cancel(m: proto::Cancel) -> Result<Order, WireError> {
    let task = task_ref(m.task)?;
    let engine = engine_id("engine", &m.engine)?;
    let reason = match known_enum::<proto::CancelReason>("reason", m.reason)? {
        proto::CancelReason::Unspecified => {
            return Err(unspecified::<proto::CancelReason>("reason"));
        }
        proto::CancelReason::JobCancelled => CancelReason::JobCancelled,
        proto::CancelReason::Requeued => CancelReason::Requeued,
    };
    Ok(Order::Cancel {
        task,
        attempt: m.attempt,
        engine,
        reason,
    })
}

fn requeue(m: proto::Requeue) -> Result<Order, WireError> {
    let task = task_ref(m.task)?;
    let reason = match known_enum::<proto::RequeueReason>("reason", m.reason)? {
        proto::RequeueReason::Unspecified => {
            return Err(unspecified::<proto::RequeueReason>("reason"));
        }
        proto::RequeueReason::DispatchTimeout => RequeueReason::DispatchTimeout,
    };
    Ok(Order::Requeue {
        task,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        reason,
    })
}

fn mark_unschedulable(m: proto::MarkUnschedulable) -> Result<Order, WireError> {
    let job = job_id("job", &m.job)?;
    let reason = match known_enum::<proto::Unschedulable>("reason", m.reason)? {
        proto::Unschedulable::Unspecified => {
            return Err(unspecified::<proto::Unschedulable>("reason"));
        }
        proto::Unschedulable::NoEngineMatchesRequirements => {
            Unschedulable::NoEngineMatchesRequirements
        }
        proto::Unschedulable::NoEngineHasEnoughSlots => Unschedulable::NoEngineHasEnoughSlots,
    };
    Ok(Order::MarkUnschedulable { job, reason })
}
