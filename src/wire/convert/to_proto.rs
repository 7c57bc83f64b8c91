//! Core to protobuf: total and deterministic, one protobuf form per core value.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::enums::failure_kind_to_proto;
use super::orders::order_to_proto;
use super::proto;
use crate::core::event::{Envelope, Event, JobOptions, LibraryInfo, LibraryRef, Preference, RedundancyPolicy, TaskConditions, TaskSelector, TaskSet};
use crate::core::ids::{EngineId, JobId, TaskRef};

/// The protobuf form of a core envelope. Total and deterministic.
pub fn envelope_to_proto(envelope: &Envelope) -> proto::Envelope {
    proto::Envelope {
        id: Uuid::from_bytes(envelope.id).hyphenated().to_string(),
        source: envelope.source.clone(),
        event: Some(event_to_proto(&envelope.event)),
        seal: None,
    }
}

pub(in crate::wire) fn task_ref_to_proto(task: &TaskRef) -> Option<proto::TaskRef> {
    Some(proto::TaskRef {
        job: task.job.to_string(),
        index: task.index,
    })
}

pub(in crate::wire) fn library_to_proto(library: &LibraryRef) -> proto::LibraryRef {
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
        expected_task_time_ms: options.expected_task_time_ms,
        // Engine (the default) is written as absent, as before spans existed.
        span: match options.span {
            crate::core::event::Span::Engine => proto::Span::Unspecified as i32,
            crate::core::event::Span::Site => proto::Span::Site as i32,
        },
        cancel_redundant_on_first_result: options.cancel_redundant_on_first_result,
        reserve: options.reserve,
        deadline_ms: options.deadline_ms,
        job_share: (options.job_share != 0).then_some(options.job_share),
        tasks_total: options.tasks_total,
        project_priority: options.project_priority,
        soft: options.soft.clone(),
        process_type: options.process_type.clone(),
        companion_argv: options.companion_argv.clone(),
        campaign: super::cigri::campaign_to_proto(options.campaign),
    };
    (message != proto::JobOptions::default()).then_some(message)
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
        Event::ProjectPriorityChanged { job, priority } => {
            P::ProjectPriorityChanged(proto::ProjectPriorityChanged { job: job.to_string(), priority: *priority })
        }
        Event::JobOverrideTicketsSet { job, tickets } => {
            P::JobOverrideTicketsSet(proto::JobOverrideTicketsSet { job: job.to_string(), tickets: *tickets })
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
                values_milli: load.values_milli.clone(),
            }),
        }),
        Event::TaskStarted {
            task,
            attempt,
            engine,
            remote_job,
        } => P::TaskStarted(proto::TaskStarted {
            task: task_ref_to_proto(task),
            attempt: *attempt,
            engine: engine.to_string(),
            remote_job: remote_job.clone(),
        }),
        Event::TaskCompleted {
            task,
            attempt,
            engine,
            exit_code,
            cpu_ms,
            wall_ms,
            result,
            stored,
        } => {
            let (stdout_stored, stderr_stored) = super::output::stored_to_proto(stored);
            P::TaskCompleted(proto::TaskCompleted {
                task: task_ref_to_proto(task),
                attempt: *attempt,
                engine: engine.to_string(),
                exit_code: *exit_code,
                cpu_ms: *cpu_ms,
                wall_ms: *wall_ms,
                result: result.clone(),
                stdout_stored,
                stderr_stored,
            })
        }
        Event::TaskFailed {
            task,
            attempt,
            engine,
            exit_code,
            kind,
            error_tail,
            stored,
        } => {
            let (stdout_stored, stderr_stored) = super::output::stored_to_proto(stored);
            P::TaskFailed(proto::TaskFailed {
                task: task_ref_to_proto(task),
                attempt: *attempt,
                engine: engine.to_string(),
                exit_code: *exit_code,
                kind: failure_kind_to_proto(*kind) as i32,
                error_tail: error_tail.clone(),
                stdout_stored,
                stderr_stored,
            })
        }
        Event::PolicySet(policy) => P::PolicySet(proto::PolicySet {
            algorithm: policy.algorithm.name().to_string(),
            engine_timeout_ms: policy.engine_timeout_ms,
            dispatch_timeout_ms: policy.dispatch_timeout_ms,
            load_formula: Some(proto::LoadFormula {
                slots_weight: policy.load_formula.slots_weight,
                load_weight: policy.load_formula.load_weight,
                expression: policy.load_formula.expression.to_string(),
            }),
            dispatches_per_run_max: policy.dispatches_per_run_max,
            seed: policy.seed,
            engine_tiers: policy.engine_tiers.clone(),
            greylist_affinity: policy.greylist_affinity,
            redundancy: redundancy_to_proto(&policy.redundancy),
            job_retention_ms: (policy.job_retention_ms != crate::core::event::JOB_RETENTION_MS_DEFAULT)
                .then_some(policy.job_retention_ms),
            sge: super::sge::sge_to_proto(&policy.sge),
            // The default is written as nothing, so a policy that does not use it encodes as before.
            queue_sort_method: match policy.queue_sort_method {
                crate::core::event::QueueSort::Load => String::new(),
                method => method.name().to_string(),
            },
            techila: super::techila::techila_to_proto(&policy.techila),
            output: super::output::output_to_proto(&policy.output),
            suspend_thresholds: super::thresholds::thresholds_to_proto(&policy.suspend_thresholds),
            reservation: super::reservation::reservation_to_proto(&policy.reservation),
            fbsng: super::fbsng::fbsng_to_proto(&policy.fbsng),
            cigri: super::cigri::cigri_to_proto(&policy.cigri),
            flood: super::flood::flood_to_proto(&policy.flood),
            caps: super::caps::caps_to_proto(&policy.caps),
        }),
        Event::EngineReports { engine, reports } => P::EngineReports(proto::EngineReports {
            engine: engine.to_string(),
            reports: reports.iter().map(envelope_to_proto).collect(),
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
        Event::SuspendRequested(target) => P::SuspendRequested(selection_to_proto(target)),
        Event::ResumeRequested(target) => P::ResumeRequested(selection_to_proto(target)),
        Event::RescheduleRequested(target) => P::RescheduleRequested(selection_to_proto(target)),
        Event::JobHoldChanged { job, held } => {
            P::JobHoldChanged(proto::JobHoldChanged { job: job.to_string(), held: *held })
        }
        Event::TaskCancelled { task } => {
            P::TaskCancelled(proto::TaskSelection { job: task.job.to_string(), task: Some(task.index) })
        }
        Event::EngineDrainChanged { engine, drained } => {
            P::EngineDrainChanged(proto::EngineDrainChanged { engine: engine.to_string(), drained: *drained })
        }
    }
}

fn selection_to_proto(target: &TaskSelector) -> proto::TaskSelection {
    proto::TaskSelection { job: target.job.to_string(), task: target.task }
}

pub(in crate::wire) fn library_info_to_proto(info: &LibraryInfo) -> proto::LibraryPublished {
    proto::LibraryPublished {
        library: Some(library_to_proto(&info.library)),
        size_bytes: info.size_bytes,
        digest_hex: info.digest_hex.clone(),
    }
}
