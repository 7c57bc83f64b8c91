//! Protobuf to core: validates what the core's types promise, and nothing more.

use std::collections::BTreeMap;

use super::enums::failure_kind;
use super::fields::{each, engine_id, job_id, library_ref, task_ref, task_ref_of, library_ref_of, uuid_from_text};
use crate::core::ids::TaskRef;
use super::orders::order_batch;
use super::tier::check_engine_tier;
use super::{echo, proto, FieldProblem, WireError, ALGORITHMS, EVENT_KINDS, TASK_SET_KINDS};
use crate::core::event::{Algorithm, EngineLoad, EngineProps, Envelope, Event, JobOptions, JobSpec, LibraryInfo, LoadFormula, Policy, QueueSort, Preference, RedundancyPolicy, TaskConditions, TaskSelector, TaskSet, TaskTemplate};

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
        P::ProjectPriorityChanged(m) => (
            "project_priority_changed",
            job_id("job", &m.job).map(|job| Event::ProjectPriorityChanged { job, priority: m.priority }),
        ),
        P::JobOverrideTicketsSet(m) => (
            "job_override_tickets_set",
            job_id("job", &m.job).map(|job| Event::JobOverrideTicketsSet { job, tickets: m.tickets }),
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
        P::SuspendRequested(m) => ("suspend_requested", selection(m).map(Event::SuspendRequested)),
        P::ResumeRequested(m) => ("resume_requested", selection(m).map(Event::ResumeRequested)),
        P::RescheduleRequested(m) => ("reschedule_requested", selection(m).map(Event::RescheduleRequested)),
        P::JobHoldChanged(m) => {
            ("job_hold_changed", job_id("job", &m.job).map(|job| Event::JobHoldChanged { job, held: m.held }))
        }
        P::TaskCancelled(m) => ("task_cancelled", task_cancelled(m)),
        P::EngineDrainChanged(m) => (
            "engine_drain_changed",
            engine_id("engine", &m.engine).map(|engine| Event::EngineDrainChanged { engine, drained: m.drained }),
        ),
        P::EngineReports(m) => ("engine_reports", engine_reports(m)),
    };
    event.map_err(|e| e.within(kind).within("event"))
}

/// An engine's batch: at most `REPORTS_PER_BATCH_MAX` reports, none of them a
/// batch (so decoding recurses one level only, whatever the bytes nest). What
/// the reports say is the fold's to judge.
fn engine_reports(m: proto::EngineReports) -> Result<Event, WireError> {
    use crate::core::event::REPORTS_PER_BATCH_MAX;
    let engine = engine_id("engine", &m.engine)?;
    if m.reports.len() > REPORTS_PER_BATCH_MAX {
        return Err(WireError::at(
            "reports",
            FieldProblem::Inconsistent(format!("{} reports, more than {REPORTS_PER_BATCH_MAX}", m.reports.len())),
        ));
    }
    let reports = each("reports", m.reports, |report| match report.event {
        Some(proto::envelope::Event::EngineReports(_)) => {
            Err(WireError::at("event", FieldProblem::Inconsistent("a batch inside a batch".into())))
        }
        _ => envelope_from_proto(report),
    })?;
    Ok(Event::EngineReports { engine, reports })
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
        owner: super::job_label("owner", m.owner)?,
        project: super::job_label("project", m.project)?,
        queue: super::job_label("queue", m.queue)?,
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
    let shares_max = crate::core::family::sgeee::share_tree::SHARES_MAX;
    let job_share = m.job_share.unwrap_or(0);
    if job_share > shares_max {
        return Err(WireError::at("job_share", FieldProblem::Inconsistent(format!("{job_share} shares, more than {shares_max}"))));
    }
    let project_priority = super::techila::project_priority(m.project_priority)?;
    let span = match super::fields::known_enum::<proto::Span>("span", m.span)? {
        proto::Span::Unspecified | proto::Span::Engine => crate::core::event::Span::Engine,
        proto::Span::Site => crate::core::event::Span::Site,
    };
    crate::core::event::check_companion_argv(&m.companion_argv)
        .map_err(|problem| WireError::at("companion_argv", FieldProblem::Inconsistent(problem)))?;
    Ok(JobOptions {
        companion_argv: m.companion_argv,
        span,
        reserve: m.reserve,
        project_priority,
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
        expected_task_time_ms: m.expected_task_time_ms,
        cancel_redundant_on_first_result: m.cancel_redundant_on_first_result,
        deadline_ms: m.deadline_ms,
        job_share,
        tasks_total: m.tasks_total,
        soft: m.soft,
        process_type: super::fbsng::process_type(m.process_type)?,
        campaign: super::cigri::campaign(m.campaign)?,
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
    crate::core::load::check_seq_no(&props.custom)
        .map_err(|e| WireError::at("props.custom.seq_no", FieldProblem::BadLoad(e)))?;
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
    crate::core::load::check_values(&load.values_milli)
        .map_err(|e| WireError::at("load.values_milli", FieldProblem::BadLoad(e)))?;
    Ok(Event::EngineHeartbeat {
        engine,
        load: EngineLoad {
            load_per_core_milli: load.load_per_core_milli,
            memory_free_mb: load.memory_free_mb,
            values_milli: load.values_milli,
        },
    })
}

fn task_started(m: proto::TaskStarted) -> Result<Event, WireError> {
    let max = crate::core::event::REMOTE_JOB_BYTES_MAX;
    if m.remote_job.len() > max {
        return Err(WireError::at("remote_job", FieldProblem::TooLong { bytes: m.remote_job.len(), max }));
    }
    Ok(Event::TaskStarted {
        task: task_ref(m.task)?,
        attempt: m.attempt,
        engine: engine_id("engine", &m.engine)?,
        remote_job: m.remote_job,
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
        stored: super::output::stored(m.stdout_stored, m.stderr_stored)?,
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
        stored: super::output::stored(m.stdout_stored, m.stderr_stored)?,
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
    let policy = Policy {
        algorithm,
        engine_timeout_ms: m.engine_timeout_ms,
        dispatch_timeout_ms: m.dispatch_timeout_ms,
        load_formula: LoadFormula {
            slots_weight: formula.slots_weight,
            load_weight: formula.load_weight,
            expression: crate::core::load::parse(&formula.expression)
                .map_err(|e| WireError::at("load_formula.expression", FieldProblem::BadLoad(e)))?,
        },
        dispatches_per_run_max: m.dispatches_per_run_max,
        seed: m.seed,
        engine_tiers,
        greylist_affinity: m.greylist_affinity,
        redundancy: redundancy_fields!(RedundancyPolicy, redundancy),
        job_retention_ms: m.job_retention_ms.unwrap_or(crate::core::event::JOB_RETENTION_MS_DEFAULT),
        sge: super::sge::sge(m.sge).map_err(|e| e.within("sge"))?,
        queue_sort_method: match m.queue_sort_method.as_str() {
            "" | "load" => QueueSort::Load,
            "seqno" => QueueSort::Seqno,
            _ => {
                return Err(WireError::at(
                    "queue_sort_method",
                    FieldProblem::Inconsistent(format!(
                        "unknown queue_sort_method {}; known: load, seqno",
                        super::echo(&m.queue_sort_method)
                    )),
                ));
            }
        },
        techila: super::techila::techila(m.techila).map_err(|e| e.within("techila"))?,
        output: super::output::output(m.output).map_err(|e| e.within("output"))?,
        suspend_thresholds: super::thresholds::thresholds(m.suspend_thresholds)
            .map_err(|e| e.within("suspend_thresholds"))?,
        reservation: super::reservation::reservation(m.reservation).map_err(|e| e.within("reservation"))?,
        fbsng: super::fbsng::fbsng(m.fbsng).map_err(|e| e.within("fbsng"))?,
        cigri: super::cigri::cigri(m.cigri).map_err(|e| e.within("cigri"))?,
        flood: super::flood::flood(m.flood).map_err(|e| e.within("flood"))?,
        caps: super::caps::caps(m.caps),
    };
    crate::core::policy_limits::check_policy(&policy)
        .map_err(|limit| WireError::at(&limit.field, FieldProblem::Inconsistent(limit.problem)))?;
    Ok(policy)
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

pub(in crate::wire) fn library_info(m: proto::LibraryPublished) -> Result<LibraryInfo, WireError> {
    Ok(LibraryInfo { library: library_ref("library", m.library)?, size_bytes: m.size_bytes, digest_hex: m.digest_hex })
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

/// The job (and task) an operator's request names.
fn selection(m: proto::TaskSelection) -> Result<TaskSelector, WireError> {
    Ok(TaskSelector { job: job_id("job", &m.job)?, task: m.task })
}

/// A task cancel names one task: a selection without one is refused.
fn task_cancelled(m: proto::TaskSelection) -> Result<Event, WireError> {
    let job = job_id("job", &m.job)?;
    let Some(index) = m.task else {
        return Err(WireError::at("task", FieldProblem::Inconsistent("a task cancel names one task".into())));
    };
    Ok(Event::TaskCancelled { task: TaskRef::new(job, index) })
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
