//! Core types to protobuf and back.
//!
//! Core to protobuf is total: every core value has exactly one protobuf form.
//! Protobuf to core validates what the core's types promise (UUIDs, ids per
//! `core::ids`, library names and versions per `LibraryRef::validate`, a set
//! oneof, known enum values, a known algorithm name, engine tiers written
//! `property=value`) and nothing more: what an event *means* (an attempt of 0,
//! a result over 64 KiB, a batch over 8192 orders, a bad discriminator, a
//! condition on a task the job does not have) is for the fold to judge and
//! record as a rejection.
//! For every core envelope `e`, `from_proto(to_proto(&e)) == Ok(e)`.
//!
//! Messages added after the first version whose every field is zero
//! (`JobOptions`, `RedundancyPolicy`) are written absent, so an event that does
//! not use them encodes, and digests, exactly as before they existed.

use uuid::Uuid;

use super::json::ProtoEnum;
use super::proto;
use std::collections::BTreeMap;

use crate::core::event::{
    Algorithm, CancelReason, EngineLoad, EngineProps, Envelope, Event, FailureKind, JobOptions,
    JobSpec, LibraryInfo, LibraryRef, LoadFormula, Order, OrderBatch, Policy, Preference,
    RedundancyPolicy, RequeueReason, RescheduleReason, TaskConditions, TaskSet, TaskTemplate,
    Unschedulable,
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
    #[error("{0}")]
    BadEngineTier(EngineTierError),
    /// Two fields of one message disagree.
    #[error("{0}")]
    Inconsistent(String),
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

const EVENT_KINDS: &str = "job_submitted, job_cancelled, job_priority_changed, tasks_added, \
    engine_logged_in, engine_logged_out, engine_heartbeat, library_synced, library_sync_failed, \
    task_started, task_completed, task_failed, policy_set, blacklists_cleared, tick, order_batch, \
    library_published";
const ORDER_KINDS: &str = "dispatch, cancel, engine_lost, requeue, mark_unschedulable, \
    sync_library, blacklist, reschedule, fail_dependent";
const TASK_SET_KINDS: &str = "count, list";

/// Every algorithm, for error messages. The match below fails to compile when
/// one is added and not listed here.
const ALGORITHMS: &[Algorithm] = &[Algorithm::SgePlain, Algorithm::Sgeee];
const _: fn(Algorithm) = |algorithm| match algorithm {
    Algorithm::SgePlain | Algorithm::Sgeee => {}
};

/// Why an engine tier is not `property=value`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineTierError {
    #[error("engine tier {0} is not written property=value")]
    NoEquals(String),
    #[error("engine tier {0} has an empty property name")]
    EmptyProperty(String),
    #[error(
        "engine tier {tier}: a property name is a letter or '_' and then letters, digits, '_', '.' or '-'; found {found:?} at byte {at}"
    )]
    BadProperty { tier: String, found: char, at: usize },
}

/// Checks that `tier` is `property=value` (see `Policy::engine_tiers`): a
/// property name as requirements expressions write one, `=`, and any value
/// (empty included). The value is everything after the first `=`.
pub fn check_engine_tier(tier: &str) -> Result<(), EngineTierError> {
    let Some((property, _value)) = tier.split_once('=') else {
        return Err(EngineTierError::NoEquals(echo(tier)));
    };
    if property.is_empty() {
        return Err(EngineTierError::EmptyProperty(echo(tier)));
    }
    let bad = property.char_indices().find(|&(at, c)| {
        let allowed = c.is_ascii_alphabetic() || c == '_' || (at > 0 && (c.is_ascii_digit() || c == '.' || c == '-'));
        !allowed
    });
    match bad {
        Some((at, found)) => Err(EngineTierError::BadProperty { tier: echo(tier), found, at }),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// Core to protobuf

/// The protobuf form of a core envelope. Total and deterministic.
pub fn envelope_to_proto(envelope: &Envelope) -> proto::Envelope {
    proto::Envelope {
        id: Uuid::from_bytes(envelope.id).hyphenated().to_string(),
        source: envelope.source.clone(),
        event: Some(event_to_proto(&envelope.event)),
        seal: None,
    }
}

pub(super) fn task_ref_to_proto(task: &TaskRef) -> Option<proto::TaskRef> {
    Some(proto::TaskRef {
        job: task.job.to_string(),
        index: task.index,
    })
}

pub(super) fn library_to_proto(library: &LibraryRef) -> proto::LibraryRef {
    proto::LibraryRef {
        name: library.name.clone(),
        version: library.version.clone(),
    }
}

fn preferences_to_proto(preferences: &[Preference]) -> Vec<proto::Preference> {
    preferences
        .iter()
        .map(|preference| proto::Preference {
            when: preference.when.clone(),
            weight: preference.weight,
        })
        .collect()
}

fn task_params_to_proto(list: &[BTreeMap<String, String>]) -> Vec<proto::TaskParams> {
    list.iter()
        .map(|params| proto::TaskParams {
            params: params.clone(),
        })
        .collect()
}

fn conditions_to_proto(
    conditions: &BTreeMap<u32, TaskConditions>,
) -> BTreeMap<u32, proto::TaskConditions> {
    conditions
        .iter()
        .map(|(task_idx, task)| {
            let task = proto::TaskConditions {
                discriminator: task.discriminator.clone(),
                affinity: preferences_to_proto(&task.affinity),
                task_affinity: task.task_affinity.clone(),
                queue_jump: task.queue_jump,
                depends_on: task
                    .depends_on
                    .iter()
                    .filter_map(task_ref_to_proto)
                    .collect(),
            };
            (*task_idx, task)
        })
        .collect()
}

/// `None` when every option is off, so a job without options encodes as it did
/// before options existed (and digests alike).
fn job_options_to_proto(options: &JobOptions) -> Option<proto::JobOptions> {
    let message = proto::JobOptions {
        root_library: options.root_library.as_ref().map(library_to_proto),
        affinity: preferences_to_proto(&options.affinity),
        depends_on_jobs: options.depends_on_jobs.iter().map(JobId::to_string).collect(),
        fail_on_dependency_failure: options.fail_on_dependency_failure,
        continue_on_task_failure: options.continue_on_task_failure,
        engine_blacklisting: options.engine_blacklisting,
        failures_before_blacklist: options.failures_before_blacklist,
        engine_greylisting: options.engine_greylisting,
        redundant_rescheduling: options.redundant_rescheduling,
        task_max_time_ms: options.task_max_time_ms,
        cancel_redundant_on_first_result: options.cancel_redundant_on_first_result,
    };
    (message != proto::JobOptions::default()).then_some(message)
}

/// A `$ty` with every redundancy field of `$from`: the one field list both
/// directions share (`RedundancyPolicy` and its protobuf message have the same
/// fields, all plain numbers and flags). The literal names every field, so a field
/// added to either type and not here fails to compile.
macro_rules! redundancy_fields {
    ($ty:path, $from:expr) => {{
        let from = $from;
        $ty {
            strategy_effective_percent: from.strategy_effective_percent,
            poll_period_ms: from.poll_period_ms,
            percent_completed_strategy: from.percent_completed_strategy,
            remaining_task_percent: from.remaining_task_percent,
            average_strategy: from.average_strategy,
            average_limit_milli: from.average_limit_milli,
            std_dev_strategy: from.std_dev_strategy,
            std_dev_limit_milli: from.std_dev_limit_milli,
            reschedule_first: from.reschedule_first,
            copies_per_task_max: from.copies_per_task_max,
        }
    }};
}

/// `None` when every field is zero, which is how an absent one decodes (see
/// PolicySet in the schema): a policy from before redundancy encodes as it did.
fn redundancy_to_proto(redundancy: &RedundancyPolicy) -> Option<proto::RedundancyPolicy> {
    let message = redundancy_fields!(proto::RedundancyPolicy, redundancy);
    (message != proto::RedundancyPolicy::default()).then_some(message)
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
            options: job_options_to_proto(&spec.options),
            task_conditions: conditions_to_proto(&spec.task_conditions),
            tasks: Some(match &spec.tasks {
                TaskSet::Count(count) => proto::job_submitted::Tasks::Count(*count),
                TaskSet::List(list) => proto::job_submitted::Tasks::List(proto::TaskParamsList {
                    tasks: task_params_to_proto(list),
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
                libraries: props.libraries.iter().map(library_to_proto).collect(),
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
            engine_tiers: policy.engine_tiers.clone(),
            greylist_affinity: policy.greylist_affinity,
            redundancy: redundancy_to_proto(&policy.redundancy),
            job_retention_ms: (policy.job_retention_ms != crate::core::event::JOB_RETENTION_MS_DEFAULT)
                .then_some(policy.job_retention_ms),
        }),
        Event::Tick => P::Tick(proto::Tick {}),
        Event::OrderBatch(batch) => P::OrderBatch(proto::OrderBatch {
            based_on_seq: batch.based_on_seq.0,
            algorithm: batch.algorithm.clone(),
            algorithm_version: batch.algorithm_version,
            orders: batch.orders.iter().map(order_to_proto).collect(),
        }),
        Event::TasksAdded {
            job,
            tasks,
            conditions,
        } => P::TasksAdded(proto::TasksAdded {
            job: job.to_string(),
            tasks: task_params_to_proto(tasks),
            conditions: conditions_to_proto(conditions),
        }),
        Event::LibraryPublished(info) => P::LibraryPublished(library_info_to_proto(info)),
        Event::LibrarySynced { engine, library } => P::LibrarySynced(proto::LibrarySynced {
            engine: engine.to_string(),
            library: Some(library_to_proto(library)),
        }),
        Event::LibrarySyncFailed {
            engine,
            library,
            error,
        } => P::LibrarySyncFailed(proto::LibrarySyncFailed {
            engine: engine.to_string(),
            library: Some(library_to_proto(library)),
            error: error.clone(),
        }),
        Event::BlacklistsCleared { engine } => P::BlacklistsCleared(proto::BlacklistsCleared {
            engine: engine.as_ref().map(EngineId::to_string).unwrap_or_default(),
        }),
        Event::ProjectorKeyRegistered { key, name } => {
            P::ProjectorKeyRegistered(proto::ProjectorKeyRegistered { key: key.to_vec(), name: name.clone() })
        }
        Event::ProjectorKeyRevoked { key } => P::ProjectorKeyRevoked(proto::ProjectorKeyRevoked { key: key.to_vec() }),
    }
}

pub(super) fn order_to_proto(order: &Order) -> proto::Order {
    use proto::order::Kind as P;
    let kind = match order {
        Order::Dispatch {
            task,
            attempt,
            engine,
            epoch,
        } => P::Dispatch(proto::Dispatch {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            epoch: *epoch,
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
            reason: cancel_reason_to_proto(*reason) as i32,
        }),
        Order::EngineLost {
            engine,
            epoch,
            last_seen_ms,
        } => P::EngineLost(proto::EngineLost {
            engine: engine.to_string(),
            last_seen_ms: *last_seen_ms,
            epoch: *epoch,
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
            reason: requeue_reason_to_proto(*reason) as i32,
        }),
        Order::MarkUnschedulable { job, reason } => {
            P::MarkUnschedulable(proto::MarkUnschedulable {
                job: job.to_string(),
                reason: unschedulable_to_proto(*reason) as i32,
            })
        }
        Order::SyncLibrary { engine, library } => P::SyncLibrary(proto::SyncLibrary {
            engine: engine.to_string(),
            library: Some(library_to_proto(library)),
        }),
        Order::Blacklist {
            job,
            engine,
            failures,
        } => P::Blacklist(proto::Blacklist {
            job: job.to_string(),
            engine: engine.to_string(),
            failures: *failures,
        }),
        Order::Reschedule {
            task,
            reason,
            elapsed_ms,
            limit_ms,
        } => P::Reschedule(proto::Reschedule {
            task: task_ref_to_proto(task),
            reason: reschedule_reason_to_proto(*reason) as i32,
            elapsed_ms: *elapsed_ms,
            limit_ms: *limit_ms,
        }),
        Order::FailDependent {
            job,
            task,
            dependency,
        } => P::FailDependent(proto::FailDependent {
            job: job.to_string(),
            task: *task,
            dependency: dependency.clone(),
        }),
    };
    proto::Order { kind: Some(kind) }
}

/// Both directions of a core enum and the protobuf enum of the same variant names,
/// from one list: `$to` is total; `$from` refuses numbers this version does not know
/// and `Unspecified`. Both matches are exhaustive, so a variant added to either
/// enum and not listed here fails to compile.
macro_rules! enum_both_ways {
    ($to:ident, $from:ident: $core:ident <=> $proto:ident { $($variant:ident),+ $(,)? }) => {
        fn $to(value: $core) -> proto::$proto {
            match value {
                $($core::$variant => proto::$proto::$variant,)+
            }
        }

        fn $from(field: &str, value: i32) -> Result<$core, WireError> {
            match known_enum::<proto::$proto>(field, value)? {
                proto::$proto::Unspecified => Err(unspecified::<proto::$proto>(field)),
                $(proto::$proto::$variant => Ok($core::$variant),)+
            }
        }
    };
}

enum_both_ways!(failure_kind_to_proto, failure_kind: FailureKind <=> FailureKind {
    NonZeroExit,
    Signalled,
    WallTimeExceeded,
    LaunchFailed,
    EngineShutdown,
});
enum_both_ways!(cancel_reason_to_proto, cancel_reason: CancelReason <=> CancelReason {
    JobCancelled,
    RedundantCopy,
    Requeued,
});
enum_both_ways!(requeue_reason_to_proto, requeue_reason: RequeueReason <=> RequeueReason {
    DispatchTimeout,
    EngineRestarted,
});
enum_both_ways!(unschedulable_to_proto, unschedulable: Unschedulable <=> Unschedulable {
    NoEngineMatchesRequirements,
    NoEngineHasEnoughSlots,
    LibraryNotPublished,
});
enum_both_ways!(reschedule_reason_to_proto, reschedule_reason: RescheduleReason <=> RescheduleReason {
    TaskMaxTime,
    PercentCompleted,
    Average,
    StdDev,
});

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
    interned(&JOB_IDS, text, JobId::new).map_err(|e| WireError::at(field, FieldProblem::BadId(e)))
}

pub(super) fn engine_id(field: &str, text: &str) -> Result<EngineId, WireError> {
    interned(&ENGINE_IDS, text, EngineId::new).map_err(|e| WireError::at(field, FieldProblem::BadId(e)))
}

/// Most ids of one kind the decoder remembers; past it, it forgets them all and
/// starts again (a bound, not a cache policy: a grid has far fewer).
const INTERNED_IDS_MAX: usize = 65_536;

thread_local! {
    /// Ids already decoded on this thread, so every event about one engine or job
    /// shares one text: the fold then compares them by pointer and keeps one copy
    /// hot in cache, instead of chasing a fresh allocation per event. Equality is
    /// by value either way, so this changes no decision.
    static JOB_IDS: std::cell::RefCell<std::collections::HashMap<Box<str>, JobId>> = Default::default();
    static ENGINE_IDS: std::cell::RefCell<std::collections::HashMap<Box<str>, EngineId>> = Default::default();
}

fn interned<Id: Clone>(
    table: &'static std::thread::LocalKey<std::cell::RefCell<std::collections::HashMap<Box<str>, Id>>>,
    text: &str,
    make: impl Fn(&str) -> Result<Id, crate::core::ids::IdError>,
) -> Result<Id, crate::core::ids::IdError> {
    table.with(|table| {
        let mut table = table.borrow_mut();
        if let Some(id) = table.get(text) {
            return Ok(id.clone());
        }
        let id = make(text)?;
        if table.len() == INTERNED_IDS_MAX {
            table.clear();
        }
        table.insert(text.into(), id.clone());
        Ok(id)
    })
}

/// An absent `TaskRef` reads as an empty one, so the error names `task.job`.
pub(super) fn task_ref(task: Option<proto::TaskRef>) -> Result<TaskRef, WireError> {
    task_ref_of(task.unwrap_or_default()).map_err(|e| e.within("task"))
}

fn task_ref_of(task: proto::TaskRef) -> Result<TaskRef, WireError> {
    Ok(TaskRef::new(job_id("job", &task.job)?, task.index))
}

/// An absent `LibraryRef` reads as an empty one, so the error names
/// `<field>.name`. Names and versions are checked by `LibraryRef::validate`.
pub(super) fn library_ref(
    field: &str,
    library: Option<proto::LibraryRef>,
) -> Result<LibraryRef, WireError> {
    let library = library.unwrap_or_default();
    library_ref_of(library).map_err(|e| e.within(field))
}

fn library_ref_of(library: proto::LibraryRef) -> Result<LibraryRef, WireError> {
    let library = LibraryRef {
        name: library.name,
        version: library.version,
    };
    library.validate().map_err(|problem| {
        // `validate` checks the name, then the version: say which one is wrong.
        let part = if LibraryRef::new(&library.name, "v").validate().is_err() {
            "name"
        } else {
            "version"
        };
        WireError::at(part, FieldProblem::BadId(problem))
    })?;
    Ok(library)
}

/// Converts every item of a repeated field; an error names the item, `field[3]`.
fn each<T, U>(
    field: &str,
    items: Vec<T>,
    convert: impl Fn(T) -> Result<U, WireError>,
) -> Result<Vec<U>, WireError> {
    items
        .into_iter()
        .enumerate()
        .map(|(item_idx, item)| convert(item).map_err(|e| e.within(&format!("{field}[{item_idx}]"))))
        .collect()
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
        P::TasksAdded(m) => ("tasks_added", tasks_added(m)),
        P::LibraryPublished(m) => ("library_published", library_published(m)),
        P::LibrarySynced(m) => ("library_synced", library_synced(m)),
        P::LibrarySyncFailed(m) => ("library_sync_failed", library_sync_failed(m)),
        P::BlacklistsCleared(m) => ("blacklists_cleared", blacklists_cleared(m)),
        P::ProjectorKeyRegistered(m) => (
            "projector_key_registered",
            public_key("key", &m.key).map(|key| Event::ProjectorKeyRegistered { key, name: m.name }),
        ),
        P::ProjectorKeyRevoked(m) => {
            ("projector_key_revoked", public_key("key", &m.key).map(|key| Event::ProjectorKeyRevoked { key }))
        }
    };
    event.map_err(|e| e.within(kind).within("event"))
}

fn job_spec(m: proto::JobSubmitted) -> Result<JobSpec, WireError> {
    let id = job_id("id", &m.id)?;
    let template = m.template.unwrap_or_default();
    let tasks = match m.tasks {
        Some(proto::job_submitted::Tasks::Count(count)) => TaskSet::Count(count),
        Some(proto::job_submitted::Tasks::List(list)) => TaskSet::List(task_params(list.tasks)),
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
        options: job_options(m.options).map_err(|e| e.within("options"))?,
        task_conditions: conditions("task_conditions", m.task_conditions)?,
    })
}

fn task_params(list: Vec<proto::TaskParams>) -> Vec<BTreeMap<String, String>> {
    list.into_iter().map(|task| task.params).collect()
}

fn preferences(list: Vec<proto::Preference>) -> Vec<Preference> {
    list.into_iter()
        .map(|preference| Preference {
            when: preference.when,
            weight: preference.weight,
        })
        .collect()
}

/// An absent message is every option off.
fn job_options(m: Option<proto::JobOptions>) -> Result<JobOptions, WireError> {
    let m = m.unwrap_or_default();
    Ok(JobOptions {
        root_library: m
            .root_library
            .map(|library| library_ref("root_library", Some(library)))
            .transpose()?,
        affinity: preferences(m.affinity),
        depends_on_jobs: each("depends_on_jobs", m.depends_on_jobs, |id| job_id("", &id))?,
        fail_on_dependency_failure: m.fail_on_dependency_failure,
        continue_on_task_failure: m.continue_on_task_failure,
        engine_blacklisting: m.engine_blacklisting,
        failures_before_blacklist: m.failures_before_blacklist,
        engine_greylisting: m.engine_greylisting,
        redundant_rescheduling: m.redundant_rescheduling,
        task_max_time_ms: m.task_max_time_ms,
        cancel_redundant_on_first_result: m.cancel_redundant_on_first_result,
        deadline_ms: None,
    })
}

/// Conditions by task index; an error names the entry, `task_conditions[3]`.
fn conditions(
    field: &str,
    map: BTreeMap<u32, proto::TaskConditions>,
) -> Result<BTreeMap<u32, TaskConditions>, WireError> {
    map.into_iter()
        .map(|(task_idx, m)| {
            let depends_on = each("depends_on", m.depends_on, task_ref_of)
                .map_err(|e| e.within(&format!("{field}[{task_idx}]")))?;
            let conditions = TaskConditions {
                discriminator: m.discriminator,
                affinity: preferences(m.affinity),
                task_affinity: m.task_affinity,
                queue_jump: m.queue_jump,
                depends_on,
            };
            Ok((task_idx, conditions))
        })
        .collect()
}

fn engine_logged_in(m: proto::EngineLoggedIn) -> Result<Event, WireError> {
    let engine = engine_id("engine", &m.engine)?;
    let props = m.props.unwrap_or_default();
    let libraries = each("libraries", props.libraries, library_ref_of).map_err(|e| e.within("props"))?;
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
            libraries,
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
    let kind = failure_kind("kind", m.kind)?;
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
    // formula weighs nothing, whatever `LoadFormula::default()` says today, and
    // an absent redundancy is all zero, whatever `RedundancyPolicy::default()` says.
    let formula = m.load_formula.unwrap_or_default();
    let engine_tiers = each("engine_tiers", m.engine_tiers, |tier| {
        check_engine_tier(&tier).map_err(|problem| WireError::at("", FieldProblem::BadEngineTier(problem)))?;
        Ok(tier)
    })?;
    let redundancy = m.redundancy.unwrap_or_default();
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
        engine_tiers,
        greylist_affinity: m.greylist_affinity,
        redundancy: redundancy_fields!(RedundancyPolicy, redundancy),
        job_retention_ms: m.job_retention_ms.unwrap_or(crate::core::event::JOB_RETENTION_MS_DEFAULT),
        sge: crate::core::event::SgePolicy::default(),
    })
}

fn tasks_added(m: proto::TasksAdded) -> Result<Event, WireError> {
    Ok(Event::TasksAdded {
        job: job_id("job", &m.job)?,
        tasks: task_params(m.tasks),
        conditions: conditions("conditions", m.conditions)?,
    })
}

fn library_published(m: proto::LibraryPublished) -> Result<Event, WireError> {
    Ok(Event::LibraryPublished(library_info(m)?))
}

pub(super) fn library_info(m: proto::LibraryPublished) -> Result<LibraryInfo, WireError> {
    Ok(LibraryInfo { library: library_ref("library", m.library)?, size_bytes: m.size_bytes, digest_hex: m.digest_hex })
}

pub(super) fn library_info_to_proto(info: &LibraryInfo) -> proto::LibraryPublished {
    proto::LibraryPublished {
        library: Some(library_to_proto(&info.library)),
        size_bytes: info.size_bytes,
        digest_hex: info.digest_hex.clone(),
    }
}

fn library_synced(m: proto::LibrarySynced) -> Result<Event, WireError> {
    Ok(Event::LibrarySynced {
        engine: engine_id("engine", &m.engine)?,
        library: library_ref("library", m.library)?,
    })
}

fn library_sync_failed(m: proto::LibrarySyncFailed) -> Result<Event, WireError> {
    Ok(Event::LibrarySyncFailed {
        engine: engine_id("engine", &m.engine)?,
        library: library_ref("library", m.library)?,
        error: m.error,
    })
}

/// A 32-byte public key (whether it is a valid ed25519 point is the fold's to say).
fn public_key(field: &str, bytes: &[u8]) -> Result<[u8; 32], WireError> {
    bytes
        .try_into()
        .map_err(|_| WireError::at(field, FieldProblem::Inconsistent(format!("a key is 32 bytes, not {}", bytes.len()))))
}

/// An empty engine clears every engine's entries.
fn blacklists_cleared(m: proto::BlacklistsCleared) -> Result<Event, WireError> {
    let engine = match m.engine.as_str() {
        "" => None,
        text => Some(engine_id("engine", text)?),
    };
    Ok(Event::BlacklistsCleared { engine })
}

fn order_batch(m: proto::OrderBatch) -> Result<OrderBatch, WireError> {
    let orders = each("orders", m.orders, order_from_proto)?;
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
                epoch: m.epoch,
                last_seen_ms: m.last_seen_ms,
            }),
        ),
        P::Requeue(m) => ("requeue", requeue(m)),
        P::MarkUnschedulable(m) => ("mark_unschedulable", mark_unschedulable(m)),
        P::SyncLibrary(m) => (
            "sync_library",
            sync_library(m).map(|(engine, library)| Order::SyncLibrary { engine, library }),
        ),
        P::Blacklist(m) => ("blacklist", blacklist(m)),
        P::Reschedule(m) => ("reschedule", reschedule(m)),
        P::FailDependent(m) => (
            "fail_dependent",
            job_id("job", &m.job).map(|job| Order::FailDependent {
                job,
                task: m.task,
                dependency: m.dependency,
            }),
        ),
    };
    order.map_err(|e| e.within(name))
}

fn dispatch(m: proto::Dispatch) -> Result<Order, WireError> {
    Ok(Order::Dispatch {
        task: task_ref(m.task)?,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        epoch: m.epoch,
    })
}

fn cancel(m: proto::Cancel) -> Result<Order, WireError> {
    let task = task_ref(m.task)?;
    let engine = engine_id("engine", &m.engine)?;
    let reason = cancel_reason("reason", m.reason)?;
    Ok(Order::Cancel {
        task,
        attempt: m.attempt,
        engine,
        reason,
    })
}

fn requeue(m: proto::Requeue) -> Result<Order, WireError> {
    let task = task_ref(m.task)?;
    let reason = requeue_reason("reason", m.reason)?;
    Ok(Order::Requeue {
        task,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        reason,
    })
}

fn mark_unschedulable(m: proto::MarkUnschedulable) -> Result<Order, WireError> {
    let job = job_id("job", &m.job)?;
    let reason = unschedulable("reason", m.reason)?;
    Ok(Order::MarkUnschedulable { job, reason })
}

/// The engine and library of a `SyncLibrary`, as an order or a delivery.
pub(super) fn sync_library(m: proto::SyncLibrary) -> Result<(EngineId, LibraryRef), WireError> {
    Ok((engine_id("engine", &m.engine)?, library_ref("library", m.library)?))
}

fn blacklist(m: proto::Blacklist) -> Result<Order, WireError> {
    Ok(Order::Blacklist {
        job: job_id("job", &m.job)?,
        engine: engine_id("engine", &m.engine)?,
        failures: m.failures,
    })
}

fn reschedule(m: proto::Reschedule) -> Result<Order, WireError> {
    let task = task_ref(m.task)?;
    let reason = reschedule_reason("reason", m.reason)?;
    Ok(Order::Reschedule {
        task,
        reason,
        elapsed_ms: m.elapsed_ms,
        limit_ms: m.limit_ms,
    })
}
