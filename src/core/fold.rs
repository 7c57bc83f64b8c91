//! Applying one log entry to the state.
//!
//! `fold` never fails and never decides. It validates an entry against the state
//! (is the job known, is this the live attempt, did the right engine send it) and
//! either applies it or records a [`Rejection`] and changes nothing else. The same
//! log folds to the same state on every replay; an entry at or below the last
//! folded sequence is a no-op, so re-applying is harmless.

use std::collections::BTreeMap;

use super::event::{Entry, Envelope, Event, FailureKind, JobSpec, LibraryInfo, LibraryRef, Order, OrderBatch, Origin, Payload,
    Policy, TaskConditions, TaskSelector, ERROR_TAIL_BYTES_MAX, ORDERS_PER_BATCH_MAX, RESULT_BYTES_MAX, TASKS_PER_JOB_MAX};
use super::ids::{Attempt, EngineId, JobId, Seq, TaskRef};
use super::reject::{ControlProblem, JobProblem, OpsProblem, OrderProblem, Rejection, SealProblem};
use super::state::{
    CompanionEnd, CompiledPreference, Control, EngineIdx, EngineStatus, Job, JobIdx, JobStatus, State, TaskCondition, TaskKey,
    TaskStatus,
};
use super::state::checks::{check_engine_state, check_engine_takes};

/// Most preferences (affinity rules) one job or task may carry.
pub const PREFERENCES_MAX: usize = 64;
/// Most dependencies of one job or task.
pub const DEPENDENCIES_MAX: usize = 1_024;
/// Most tasks with conditions in one job.
pub const CONDITIONAL_TASKS_MAX: usize = 100_000;
/// Most attempts a task may be given: a task's failures are counted in 16 bits,
/// and no grid retries one task ten thousand times on purpose.
pub const MAX_ATTEMPTS_MAX: u32 = 10_000;

/// Applies one entry. Returns the rejections it caused (empty when it applied
/// cleanly); they are also recorded in the state.
pub fn fold(state: &mut State, entry: &Entry) -> Vec<Rejection> {
    fold_events(state, entry).rejections
}

/// What folding one entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folded {
    /// The rejections it caused, as [`fold`] returns them.
    pub rejections: Vec<Rejection>,
    /// For each of its events ([`Entry::events`]: an engine's batch gives one
    /// per report), whether it applied: a report of a batch is refused alone.
    /// Empty for an entry already folded (at or below the last sequence).
    pub applied: Vec<bool>,
    /// The parallel attempts with a companion command the entry ended: the
    /// projector tells each companion engine to stop it.
    pub companion_ends: Vec<CompanionEnd>,
}

/// [`fold`], saying also which of the entry's events applied: for tools that
/// audit a log event by event (an engine's batch refused in part).
pub fn fold_events(state: &mut State, entry: &Entry) -> Folded {
    if entry.seq <= state.last_seq {
        return Folded { rejections: Vec::new(), applied: Vec::new(), companion_ends: Vec::new() };
    }
    state.last_seq = entry.seq;
    state.families.clear_derived();
    state.now_ms = state.now_ms.max(entry.time_ms);
    state.first_ms.get_or_insert(entry.time_ms);
    state.chain = state.chain.chain(entry.seq.0, entry.time_ms, &entry.subject, &entry.stored);
    state.totals.entries += 1;
    // Like the clock, part of every entry: the ended jobs whose retention has
    // passed at this log time leave the state, whatever the entry says.
    state.retire_due_jobs();

    let mut rejections = Vec::new();
    let mut applied = Vec::new();
    match &entry.payload {
        Payload::Undecodable { detail } => rejections.push(Rejection::Undecodable { detail: detail.clone() }),
        Payload::Event(envelope) => match &envelope.event {
            Event::EngineReports { reports, .. } => {
                applied = apply_reports(state, entry, envelope, reports, &mut rejections);
            }
            event => {
                apply(state, entry, envelope, &mut rejections);
                // A batch of orders counts as applied when its seal held.
                let took = match event {
                    Event::OrderBatch(_) => !rejections.iter().any(|r| !matches!(r, Rejection::OrderNotApplicable { .. })),
                    _ => rejections.is_empty(),
                };
                super::family::on_event(state, entry.seq, entry.time_ms, event, took);
                applied = vec![rejections.is_empty()];
            }
        },
    }
    if !rejections.is_empty() {
        let source = match &entry.payload {
            Payload::Event(envelope) => envelope.source.as_str(),
            Payload::Undecodable { .. } => "",
        };
        for rejection in &rejections {
            state.record_rejection(entry, source, rejection.clone());
        }
    }
    Folded { rejections, applied, companion_ends: state.take_companion_ends() }
}

/// Applies an entry's own event, once its publisher, its subject and the
/// publisher's rights over what it aims at are checked.
fn apply(state: &mut State, entry: &Entry, envelope: &Envelope, out: &mut Vec<Rejection>) {
    let checked = check_entry_publisher(entry, &envelope.event)
        .and_then(|()| check_user_rights(state, &entry.origin, &envelope.event));
    match checked {
        Ok(()) => apply_event(state, entry, envelope, out),
        Err(rejection) => out.push(rejection),
    }
}

/// Applies one event whose publisher may send it.
fn apply_event(state: &mut State, entry: &Entry, envelope: &Envelope, out: &mut Vec<Rejection>) {
    let seq = entry.seq;
    let event = &envelope.event;
    let result = match event {
        // A batch inside a batch: the wire never decodes one, the core type could hold one.
        Event::EngineReports { .. } => Err(Rejection::InvalidReportBatch {
            report: 0,
            problem: super::reject::ReportBatchProblem::NotBatchable { kind: event.kind_name().to_string() },
        }),
        Event::JobSubmitted(spec) => {
            // A user's job is the user's, whatever (and whether) the spec names;
            // an operator's is the owner it names.
            let owner = match &entry.origin {
                Origin::User(user) => user.as_str(),
                _ => spec.owner.as_str(),
            };
            submit_job(state, seq, spec, owner)
        }
        Event::JobCancelled { job, .. } => cancel_job(state, job),
        Event::JobPriorityChanged { job, priority } => change_priority(state, job, *priority),
        Event::ProjectPriorityChanged { job, priority } => change_project_priority(state, job, *priority),
        Event::JobOverrideTicketsSet { job, tickets } => set_override_tickets(state, job, *tickets),
        Event::EngineLoggedIn { engine, slots, props } => super::trust::check_login(engine, *slots).map(|()| {
            // A login opens a new epoch, named by its sequence. Attempts an
            // earlier epoch still holds are requeued by explicit orders
            // (`EngineRestarted`), so the log says why each runs again.
            state.log_in_engine(engine, *slots, props.clone(), seq.0);
        }),
        Event::EngineLoggedOut { engine } => logged_in_engine(state, engine).map(|e| {
            state.set_engine_logged_out(e);
            state.requeue_engine_attempts(e);
        }),
        Event::EngineHeartbeat { engine, load } => logged_in_engine(state, engine).map(|e| {
            state.engine_mut(e).load = load.clone();
            state.touch_engine(e);
        }),
        Event::TaskStarted { task, attempt, engine, .. } => task_started(state, task, *attempt, engine),
        Event::TaskCompleted { task, attempt, engine, wall_ms, cpu_ms, result, .. } => {
            if result.len() > RESULT_BYTES_MAX {
                Err(Rejection::ResultTooLarge { task: task.clone(), bytes: result.len(), max: RESULT_BYTES_MAX })
            } else {
                live_attempt_of(state, task, *attempt, engine).map(|(key, e)| {
                    state.touch_engine(e);
                    if let Some(first) = state.complete(key, *attempt, *wall_ms) {
                        super::family::on_complete(state, key, first.engine, first.started_ms);
                    }
                    state.add_completed_cpu(key, *cpu_ms);
                })
            }
        }
        Event::TaskFailed { task, attempt, engine, error_tail, kind, .. } => {
            if error_tail.len() > ERROR_TAIL_BYTES_MAX {
                Err(Rejection::ErrorTailTooLarge { task: task.clone(), bytes: error_tail.len(), max: ERROR_TAIL_BYTES_MAX })
            } else {
                live_attempt_of(state, task, *attempt, engine).map(|(key, e)| {
                    state.touch_engine(e);
                    if *kind == FailureKind::Preempted && super::schedule::flood::is_gateway(state.engine(e)) {
                        // A gateway's resource manager ended it, not the task:
                        // it waits again without using an attempt. Another
                        // engine saying so is an ordinary failure, so a
                        // forged `PREEMPTED` cannot retry a task for ever.
                        state.requeue(key, *attempt);
                    } else {
                        state.fail(key, *attempt);
                    }
                })
            }
        }
        Event::PolicySet(policy) => set_policy(state, policy).map(|()| state.policy_seq = seq),
        Event::Tick => Ok(()),
        Event::OrderBatch(batch) => match check_seal(state, entry) {
            Ok(()) => {
                apply_orders(state, batch, out);
                Ok(())
            }
            Err(rejection) => Err(rejection),
        },
        Event::ProjectorKeyRegistered { key, name } => register_key(state, key, name),
        Event::ProjectorKeyRevoked { key } => {
            if state.revoke_projector_key(key) { Ok(()) } else { Err(Rejection::UnknownKey { key: hex::encode(key) }) }
        }
        Event::TasksAdded { job, tasks, conditions } => add_tasks(state, job, tasks, conditions),
        Event::LibraryPublished(info) => publish_library(state, info),
        Event::LibrarySynced { engine, library } => logged_in_engine(state, engine).and_then(|e| {
            if state.library(library).is_none() {
                return Err(Rejection::InvalidLibrary { library: library.to_string(), problem: "never published".into() });
            }
            state.touch_engine(e);
            state.library_synced(e, library);
            Ok(())
        }),
        Event::LibrarySyncFailed { engine, library, error } => {
            if error.len() > ERROR_TAIL_BYTES_MAX {
                Err(Rejection::InvalidLibrary { library: library.to_string(), problem: "error text too long".into() })
            } else {
                logged_in_engine(state, engine).map(|e| {
                    state.touch_engine(e);
                    state.sync_failed(e, library);
                })
            }
        }
        Event::SuspendRequested(target) => request_control(state, target, Control::Suspend),
        Event::ResumeRequested(target) => request_control(state, target, Control::Resume),
        Event::RescheduleRequested(target) => request_control(state, target, Control::Preempt),
        Event::JobHoldChanged { job, held } => hold_job(state, job, *held),
        Event::TaskCancelled { task } => cancel_task(state, task),
        Event::EngineDrainChanged { engine, drained } => drain_engine(state, engine, *drained),
        Event::BlacklistsCleared { engine: None } => {
            state.clear_blacklists(None);
            Ok(())
        }
        Event::BlacklistsCleared { engine: Some(engine) } => match state.engine_idx(engine) {
            Some(e) => {
                state.clear_blacklists(Some(e));
                Ok(())
            }
            None => Err(Rejection::UnknownEngine { engine: engine.clone() }),
        },
    };
    match result {
        Ok(()) => state.note_attempts(entry, event, out),
        Err(rejection) => out.push(rejection),
    }
}

/// An engine's batch: each report applied in order as if it were its own entry
/// at this sequence, so a batch folds to the state its reports published one by
/// one would (but for the sequences they would have had). The batch itself
/// must come from its engine's subject; then a report it may not carry is
/// refused alone, with its number in the batch, and the others apply.
/// Returns, per report, whether it applied.
fn apply_reports(state: &mut State, entry: &Entry, batch: &Envelope, reports: &[Envelope], out: &mut Vec<Rejection>) -> Vec<bool> {
    use super::reject::ReportBatchProblem;
    let note_event = |state: &mut State, seq: Seq, event: &Event, applied: bool| {
        super::family::on_event(state, seq, entry.time_ms, event, applied);
    };
    if let Err(rejection) = check_entry_publisher(entry, &batch.event) {
        out.push(rejection);
        note_event(state, entry.seq, &batch.event, false);
        return vec![false; reports.len()];
    }
    if reports.is_empty() {
        out.push(Rejection::InvalidReportBatch { report: 0, problem: ReportBatchProblem::Empty });
        note_event(state, entry.seq, &batch.event, false);
        return Vec::new();
    }
    let mut applied = Vec::with_capacity(reports.len());
    for (n, report) in reports.iter().enumerate() {
        let problem = if !report.event.is_batchable_report() {
            Some(ReportBatchProblem::NotBatchable { kind: report.event.kind_name().to_string() })
        } else if reports[..n].iter().any(|earlier| earlier.id == report.id) {
            Some(ReportBatchProblem::DuplicateId)
        } else {
            None
        };
        let mut own = Vec::new();
        match problem {
            // At most REPORTS_PER_BATCH_MAX (256) reports: the quadratic id check is bounded.
            Some(problem) => own.push(Rejection::InvalidReportBatch { report: n as u32, problem }),
            // The batch's subject is the engine's: each report is checked
            // against its publisher, not against a subject of its own.
            None => match check_publisher(&entry.origin, &report.event) {
                Ok(()) => apply_event(state, entry, report, &mut own),
                Err(rejection) => own.push(rejection),
            },
        }
        note_event(state, entry.seq, &report.event, own.is_empty());
        applied.push(own.is_empty());
        out.append(&mut own);
    }
    applied
}

/// The subject an entry arrived on bounds what it may say: engines speak only for
/// themselves, only the projector issues orders, only operators change the
/// grid, users act on jobs. A subject no one may publish on is refused whole.
fn check_publisher(origin: &Origin, event: &Event) -> Result<(), Rejection> {
    if let Some(payload_engine) = event.reporting_engine() {
        return match origin {
            Origin::Engine(subject_engine) if subject_engine == payload_engine => Ok(()),
            Origin::Engine(subject_engine) => Err(Rejection::ForgedEngine {
                subject_engine: Some(subject_engine.clone()),
                payload_engine: payload_engine.clone(),
            }),
            _ => Err(Rejection::ForgedEngine { subject_engine: None, payload_engine: payload_engine.clone() }),
        };
    }
    if super::subject::may_publish(origin, event) {
        Ok(())
    } else {
        Err(Rejection::WrongPublisher { event: event.kind_name().to_string() })
    }
}

/// One subject per kind of event and publisher: an event stored on a subject
/// no one may publish on, or on one its publisher may use but not for its
/// kind, is refused; then [`check_publisher`] says whether the publisher the
/// subject names may send it.
fn check_entry_publisher(entry: &Entry, event: &Event) -> Result<(), Rejection> {
    let wrong_subject = || Rejection::WrongSubject {
        event: event.kind_name().to_string(),
        subject: super::reject::truncated(&entry.subject, super::reject::REJECTED_TEXT_BYTES_MAX),
    };
    if entry.origin == Origin::Unknown {
        return Err(wrong_subject());
    }
    check_publisher(&entry.origin, event)?;
    if super::subject::is_subject_for(&entry.subject, event, &entry.origin) { Ok(()) } else { Err(wrong_subject()) }
}

/// A user acts on its own jobs only (an operator on any), and may set a
/// priority up to the default but never above it (Grid Engine's rule for
/// `qalter -p`): only an operator raises a job above the others. A job that
/// is not held (unknown, retired) is left to the event's own check.
fn check_user_rights(state: &State, origin: &Origin, event: &Event) -> Result<(), Rejection> {
    use super::reject::PrioritySetting;
    let Origin::User(user) = origin else { return Ok(()) };
    let not_owner = |job: &JobId, owner: &str| Rejection::NotOwner { job: job.clone(), owner: owner.to_string(), user: user.to_string() };
    let owned = |job: &JobId| match state.job_idx(job) {
        Some(j) if state.job(j).owner != user.as_str() => Err(not_owner(job, &state.job(j).owner)),
        _ => Ok(()),
    };
    let priority = |job: &JobId, priority: i32| {
        if priority > DEFAULT_PRIORITY {
            let (asked, default) = (i64::from(priority), i64::from(DEFAULT_PRIORITY));
            return Err(Rejection::PriorityAboveDefault { job: job.clone(), setting: PrioritySetting::Priority, asked, default });
        }
        Ok(())
    };
    // A project priority is the family's to bound (Techila's counts down).
    let project_priority = |job: &JobId, priority: u32| {
        super::family::user_project_priority(priority)
            .map_err(|(setting, asked, default)| Rejection::PriorityAboveDefault { job: job.clone(), setting, asked, default })
    };
    match event {
        Event::JobSubmitted(spec) => {
            if !spec.owner.is_empty() && spec.owner != user.as_str() {
                return Err(not_owner(&spec.id, &super::reject::truncated(&spec.owner, super::ids::ID_LEN_MAX)));
            }
            priority(&spec.id, spec.priority)?;
            project_priority(&spec.id, spec.options.project_priority)
        }
        Event::JobPriorityChanged { job, priority: asked } => owned(job).and_then(|()| priority(job, *asked)),
        Event::ProjectPriorityChanged { job, priority: asked } => owned(job).and_then(|()| project_priority(job, *asked)),
        Event::JobCancelled { job, .. } | Event::JobHoldChanged { job, .. } | Event::TasksAdded { job, .. } => owned(job),
        Event::SuspendRequested(target) | Event::ResumeRequested(target) | Event::RescheduleRequested(target) => {
            owned(&target.job)
        }
        Event::TaskCancelled { task } => owned(&task.job),
        _ => Ok(()),
    }
}

/// A job's priority when its submitter gives none, and the most a user may give.
pub const DEFAULT_PRIORITY: i32 = 0;

/// Only the projector writes orders: the broker's permissions say so for anyone
/// who connects, and this says so on replay from the log alone. A batch must
/// carry a seal, last in its stored bytes, whose ed25519 signature over every
/// byte before it verifies (strictly: no malleable signatures) under a key an
/// operator registered on the log before the batch. A projector folding back
/// the bytes it sealed itself ([`crate::core::event::EntrySeal::sealed_here`]) skips only the
/// signature's arithmetic: the key must still be registered.
pub fn check_seal(state: &State, entry: &Entry) -> Result<(), Rejection> {
    let Some(seal) = &entry.seal else { return Err(Rejection::UnsealedBatch) };
    let refused = |problem| Rejection::BadSeal { signer: hex::encode(seal.signer), problem };
    let Some(signed) = entry.signed_bytes() else { return Err(refused(SealProblem::NotLast)) };
    // Registration checked the key is a point: an unregistered one is refused as such.
    let Some(key) = state.verifying_key(&seal.signer) else { return Err(refused(SealProblem::UnregisteredKey)) };
    if seal.sealed_here {
        return Ok(());
    }
    super::trust::verify_seal(key, seal, signed).map_err(refused)
}

pub use super::trust::PROJECTOR_KEYS_MAX;

/// By the rule an engine's key ring applies too ([`super::trust::admit_key`]).
fn register_key(state: &mut State, key: &[u8; 32], name: &str) -> Result<(), Rejection> {
    let verifying = super::trust::admit_key(&state.projector_keys, key, name)?;
    state.register_projector_key(*key, verifying, name.to_string());
    Ok(())
}

fn submit_job(state: &mut State, seq: Seq, spec: &JobSpec, owner: &str) -> Result<(), Rejection> {
    let invalid = |problem| Rejection::InvalidJob { job: spec.id.clone(), problem };
    if !owner.is_empty()
        && let Err(error) = super::ids::UserName::new(owner)
    {
        let owner = super::reject::truncated(owner, super::ids::ID_LEN_MAX);
        return Err(invalid(JobProblem::BadOwner { owner, detail: error.to_string() }));
    }
    if state.job_idx(&spec.id).is_some() || state.retired_job(&spec.id).is_some() {
        return Err(Rejection::DuplicateJob { job: spec.id.clone() });
    }
    let tasks = spec.task_count();
    if tasks == 0 {
        return Err(invalid(JobProblem::NoTasks));
    }
    if tasks > u64::from(TASKS_PER_JOB_MAX) {
        return Err(invalid(JobProblem::TooManyTasks { tasks, max: TASKS_PER_JOB_MAX }));
    }
    if spec.slots_per_task == 0 {
        return Err(invalid(JobProblem::ZeroSlotsPerTask));
    }
    if spec.slots_per_task > super::event::SLOTS_PER_TASK_MAX {
        let max = super::event::SLOTS_PER_TASK_MAX;
        return Err(invalid(JobProblem::TooManySlots { slots: spec.slots_per_task, max }));
    }
    if spec.max_attempts == 0 {
        return Err(invalid(JobProblem::ZeroMaxAttempts));
    }
    if spec.max_attempts > MAX_ATTEMPTS_MAX {
        return Err(invalid(JobProblem::TooManyAttempts { max_attempts: spec.max_attempts, max: MAX_ATTEMPTS_MAX }));
    }
    let expr = super::expr::parse(&spec.requirements).map_err(|e| {
        invalid(JobProblem::BadRequirements { position: e.position, message: e.message.clone() })
    })?;
    let expr = super::family::on_submit(&state.policy, spec, expr).map_err(invalid)?;
    let library = spec.options.root_library.clone();
    if let Some(library) = &library {
        library.validate().map_err(|e| invalid(JobProblem::BadLibrary { detail: e.to_string() }))?;
    }
    check_companion_command(spec).map_err(invalid)?;
    let affinity = compile_preferences(&spec.options.affinity, None).map_err(invalid)?;
    let soft = super::schedule::soft::compile(&spec.options.soft).map_err(invalid)?;
    if spec.options.depends_on_jobs.len() > DEPENDENCIES_MAX {
        return Err(invalid(JobProblem::TooManyTasks { tasks: spec.options.depends_on_jobs.len() as u64, max: DEPENDENCIES_MAX as u32 }));
    }
    let mut depends_on = Vec::with_capacity(spec.options.depends_on_jobs.len());
    let mut retired_dependencies = Vec::new();
    for dependency in &spec.options.depends_on_jobs {
        match (state.job_idx(dependency), state.retired_job(dependency)) {
            (Some(j), _) => {
                if !depends_on.contains(&j) {
                    depends_on.push(j);
                }
            }
            // A retired job has ended: the job resolves against its outcome.
            (None, Some(retired)) => {
                if !retired_dependencies.iter().any(|(id, _)| id == dependency) {
                    retired_dependencies.push((dependency.clone(), retired.status));
                }
            }
            (None, None) => return Err(invalid(JobProblem::UnknownDependency { dependency: dependency.to_string() })),
        }
    }
    if let Some(total) = spec.options.tasks_total
        && (u64::from(total) < tasks || total > TASKS_PER_JOB_MAX)
    {
        return Err(Rejection::OpsRefused {
            target: format!("job {}", spec.id),
            problem: OpsProblem::PartsInconsistent { tasks, total },
        });
    }
    check_bounds(state, spec)?;
    let n_tasks = tasks as u32;
    let job_idx = state.next_job_idx();
    let shape = JobShape::of_spec(spec);
    // Everything is checked before anything is made: a rejected job leaves no
    // category (nor anything else) behind.
    let conditions =
        resolve_conditions(state, &shape, &expr, job_idx, 0, n_tasks, &spec.task_conditions).map_err(invalid)?;
    let category = state.category_for(expr, shape.slots_per_task, library);
    let mut job = Job::new(spec, category, seq, state.now_ms);
    if job.owner != owner {
        job.owner = owner.to_string();
    }
    job.affinity = affinity;
    job.soft = soft;
    for (index, condition, queue_jump) in materialize(state, &shape, conditions) {
        job.set_condition(index, condition, queue_jump);
    }
    let added = state.add_job(job, &depends_on, &retired_dependencies);
    assert_eq!(added, job_idx);
    Ok(())
}

/// The caps of the policy and the bound on a run order's size (`core::bounds`).
fn check_bounds(state: &State, spec: &JobSpec) -> Result<(), Rejection> {
    let task_params = match &spec.tasks {
        super::event::TaskSet::List(list) => list.as_slice(),
        super::event::TaskSet::Count(_) => &[],
    };
    super::bounds::check_run_order(&spec.id, &spec.template, &spec.options, task_params)?;
    super::bounds::check_caps(state, &spec.id, &spec.owner, 1, spec.task_count())
}

/// A companion command within its limits, on a job whose tasks have companions.
fn check_companion_command(spec: &JobSpec) -> Result<(), JobProblem> {
    let argv = &spec.options.companion_argv;
    super::event::check_companion_argv(argv).map_err(|detail| JobProblem::BadCompanionCommand { detail })?;
    if !argv.is_empty() && spec.options.span != super::event::Span::Site {
        let detail = "only a task of span \"site\" has companion engines to run it".to_string();
        return Err(JobProblem::BadCompanionCommand { detail });
    }
    Ok(())
}

fn compile_preferences(
    preferences: &[super::event::Preference],
    task: Option<u32>,
) -> Result<Vec<CompiledPreference>, JobProblem> {
    if preferences.len() > PREFERENCES_MAX {
        return Err(JobProblem::BadCondition {
            task,
            field: "affinity".into(),
            position: 0,
            message: format!("{} preferences, more than {PREFERENCES_MAX}", preferences.len()),
        });
    }
    preferences
        .iter()
        .map(|preference| {
            CompiledPreference::compile(preference).map_err(|e| JobProblem::BadCondition {
                task,
                field: "affinity".into(),
                position: e.position,
                message: e.message.clone(),
            })
        })
        .collect()
}

/// A task's conditions, checked but not yet part of the state: its category is
/// still an expression (the job's requirements and its discriminator together).
struct ResolvedCondition {
    index: u32,
    category: Option<super::expr::Expr>,
    condition: TaskCondition,
    queue_jump: bool,
}

/// Resolves the conditions of tasks `first..first + count` of a job (`conditions`
/// keyed from 0 at `first`): discriminators become expressions joined with the
/// job's requirements, dependencies task keys. Refuses what could never be met:
/// an unknown or out-of-range task, a task affinity to a task that is not earlier,
/// a dependency cycle in the job, a discriminator that joined with the job's
/// requirements is over the expression limits. Changes nothing: the caller turns
/// the result into categories with [`materialize`] once every check has passed.
fn resolve_conditions(
    state: &State,
    shape: &JobShape,
    job_expr: &super::expr::Expr,
    job_idx: JobIdx,
    first: u32,
    count: u32,
    conditions: &BTreeMap<u32, TaskConditions>,
) -> Result<Vec<ResolvedCondition>, JobProblem> {
    if conditions.len() > CONDITIONAL_TASKS_MAX {
        return Err(JobProblem::TooManyTasks { tasks: conditions.len() as u64, max: CONDITIONAL_TASKS_MAX as u32 });
    }
    let job_id = &shape.id;
    let mut resolved = Vec::with_capacity(conditions.len());
    for (&relative, written) in conditions {
        if relative >= count {
            return Err(JobProblem::ConditionsForUnknownTask { task: first + relative });
        }
        let index = first + relative;
        if written.is_empty() {
            continue;
        }
        let category = if written.discriminator.trim().is_empty() {
            None
        } else {
            let discriminator = super::expr::parse(&written.discriminator).map_err(|e| JobProblem::BadCondition {
                task: Some(index),
                field: "discriminator".into(),
                position: e.position,
                message: e.message.clone(),
            })?;
            Some(match job_expr {
                super::expr::Expr::Bool(true) => discriminator,
                // Each part is within the limits alone; together they may not be
                // (a poison pill once crashed the fold here): parsed again, so the
                // joined expression is held to the same limits as any other.
                _ => super::expr::parse(&format!("({job_expr}) && ({discriminator})")).map_err(|e| {
                    JobProblem::BadCondition {
                        task: Some(index),
                        field: "discriminator".into(),
                        position: 0,
                        message: format!("joined with the job's requirements: {}", e.message),
                    }
                })?,
            })
        };
        let affinity = compile_preferences(&written.affinity, Some(index))?;
        for &target in &written.task_affinity {
            if target >= index {
                return Err(JobProblem::BadTaskAffinity { task: index, target });
            }
        }
        if written.depends_on.len() > DEPENDENCIES_MAX {
            return Err(JobProblem::TooManyTasks { tasks: written.depends_on.len() as u64, max: DEPENDENCIES_MAX as u32 });
        }
        let mut depends_on = Vec::with_capacity(written.depends_on.len());
        for dependency in &written.depends_on {
            let unknown = || JobProblem::UnknownDependency { dependency: dependency.to_string() };
            let key = if dependency.job == *job_id {
                if dependency.index >= first + count || dependency.index == index {
                    return Err(unknown());
                }
                TaskKey { job: job_idx, index: dependency.index }
            } else if let Some(retired) = state.retired_job(&dependency.job) {
                // A retired job keeps only its outcome: a job that was done had
                // every task done, so the dependency has been met; of any other
                // the task's own outcome is no longer known.
                if dependency.index >= retired.n_tasks {
                    return Err(unknown());
                }
                if retired.status == JobStatus::Done {
                    continue;
                }
                return Err(JobProblem::RetiredDependency { dependency: dependency.to_string(), status: retired.status.as_str().to_string() });
            } else {
                state.task_key(dependency).ok_or_else(unknown)?
            };
            depends_on.push(key);
        }
        let condition = TaskCondition {
            discriminator: written.discriminator.clone(),
            category: None,
            affinity,
            task_affinity: written.task_affinity.clone(),
            depends_on,
        };
        resolved.push(ResolvedCondition { index, category, condition, queue_jump: written.queue_jump });
    }
    check_no_cycle(job_idx, &resolved)?;
    Ok(resolved)
}

/// Makes (or finds) the category of each resolved condition: the only part of
/// condition resolution that changes the state, run once the job is accepted.
fn materialize(state: &mut State, shape: &JobShape, resolved: Vec<ResolvedCondition>) -> Vec<(u32, TaskCondition, bool)> {
    resolved
        .into_iter()
        .map(|ResolvedCondition { index, category, mut condition, queue_jump }| {
            condition.category =
                category.map(|expr| state.category_for(expr, shape.slots_per_task, shape.root_library.clone()));
            (index, condition, queue_jump)
        })
        .collect()
}

/// What condition resolution needs of a job, submitted or already in the state.
struct JobShape {
    id: JobId,
    slots_per_task: u32,
    root_library: Option<LibraryRef>,
}

impl JobShape {
    fn of_spec(spec: &JobSpec) -> Self {
        let slots_per_task = super::schedule::parallel::slots_per_engine(spec.slots_per_task, spec.options.span);
        JobShape { id: spec.id.clone(), slots_per_task, root_library: spec.options.root_library.clone() }
    }
    fn of_job(job: &Job) -> Self {
        let slots_per_task = super::schedule::parallel::slots_per_engine(job.slots_per_task, job.options.span);
        JobShape { id: job.id.clone(), slots_per_task, root_library: job.options.root_library.clone() }
    }
}

/// Dependencies among the job's own tasks must not loop (depth-first search,
/// iterative so a long chain cannot overflow the stack). Tasks added later only
/// depend on tasks that exist, so the new ones are all that need checking.
fn check_no_cycle(job: JobIdx, resolved: &[ResolvedCondition]) -> Result<(), JobProblem> {
    let edges: BTreeMap<u32, Vec<u32>> = resolved
        .iter()
        .map(|resolved| {
            let inside: Vec<u32> =
                resolved.condition.depends_on.iter().filter(|key| key.job == job).map(|key| key.index).collect();
            (resolved.index, inside)
        })
        .collect();
    // 0 unvisited, 1 on the current path, 2 done.
    let mut mark: BTreeMap<u32, u8> = BTreeMap::new();
    for &start in edges.keys() {
        if mark.get(&start).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut stack: Vec<(u32, usize)> = vec![(start, 0)];
        mark.insert(start, 1);
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            let targets = edges.get(&node).map(Vec::as_slice).unwrap_or(&[]);
            if *next < targets.len() {
                let target = targets[*next];
                *next += 1;
                match mark.get(&target).copied().unwrap_or(0) {
                    1 => return Err(JobProblem::DependencyCycle { task: target }),
                    0 => {
                        mark.insert(target, 1);
                        stack.push((target, 0));
                    }
                    _ => {}
                }
            } else {
                mark.insert(node, 2);
                stack.pop();
            }
        }
    }
    Ok(())
}

fn add_tasks(
    state: &mut State,
    id: &JobId,
    params: &[BTreeMap<String, String>],
    conditions: &BTreeMap<u32, TaskConditions>,
) -> Result<(), Rejection> {
    let j = state.job_idx(id).ok_or_else(|| Rejection::UnknownJob { job: id.clone() })?;
    if !state.job(j).is_active() {
        return Err(Rejection::JobAlreadyEnded { job: id.clone() });
    }
    let invalid = |problem| Rejection::InvalidJob { job: id.clone(), problem };
    let first = state.job(j).n_tasks();
    let total = u64::from(first) + params.len() as u64;
    if params.is_empty() {
        return Err(invalid(JobProblem::NoTasks));
    }
    if total > u64::from(TASKS_PER_JOB_MAX) {
        return Err(invalid(JobProblem::TooManyTasks { tasks: total, max: TASKS_PER_JOB_MAX }));
    }
    if let Some(declared) = state.job(j).options.tasks_total
        && total > u64::from(declared)
    {
        return Err(Rejection::OpsRefused {
            target: format!("job {id}"),
            problem: OpsProblem::PartsInconsistent { tasks: total, total: declared },
        });
    }
    check_added_bounds(state, j, params)?;
    let shape = JobShape::of_job(state.job(j));
    let job_expr = state.category(state.job(j).category).expr.clone().expect("category expressions are always built");
    let resolved =
        resolve_conditions(state, &shape, &job_expr, j, first, params.len() as u32, conditions).map_err(invalid)?;
    let resolved = materialize(state, &shape, resolved);
    state.add_tasks(j, params, resolved);
    Ok(())
}

/// [`check_bounds`] for tasks added to job `j`: their run orders, and the
/// tasks they add to its owner's and the grid's.
fn check_added_bounds(state: &State, j: JobIdx, params: &[BTreeMap<String, String>]) -> Result<(), Rejection> {
    let job = state.job(j);
    super::bounds::check_run_order(&job.id, &job.template, &job.options, params)?;
    super::bounds::check_caps(state, &job.id, &job.owner, 0, params.len() as u64)
}

/// `gridfold hold` / `release`: a held job gets no new dispatches; its live
/// attempts run on. Holding a held job, or releasing one not held, is refused.
fn hold_job(state: &mut State, id: &JobId, held: bool) -> Result<(), Rejection> {
    let j = active_job(state, id)?;
    if state.job(j).held == held {
        let problem = if held { OpsProblem::AlreadyHeld } else { OpsProblem::NotHeld };
        return Err(Rejection::OpsRefused { target: format!("job {id}"), problem });
    }
    state.set_job_held(j, held);
    Ok(())
}

/// `gridfold cancel JOB/INDEX`: one task of an active job, not yet ended.
fn cancel_task(state: &mut State, task: &TaskRef) -> Result<(), Rejection> {
    active_job(state, &task.job)?;
    let key = resolve_task(state, task)?;
    let current = state.task(key);
    let refuse = |problem| Rejection::OpsRefused { target: format!("task {task}"), problem };
    if matches!(current.status, TaskStatus::Done | TaskStatus::Failed | TaskStatus::Cancelled) {
        return Err(refuse(OpsProblem::TaskAlreadyEnded));
    }
    if current.is_cancel_requested() {
        return Err(refuse(OpsProblem::CancelAlreadyRequested));
    }
    state.cancel_task(key);
    Ok(())
}

/// `gridfold engine drain` / `resume`: any engine the grid knows, logged in or
/// not (a drain outlives its logins until resumed).
fn drain_engine(state: &mut State, engine: &EngineId, drained: bool) -> Result<(), Rejection> {
    let e = state.engine_idx(engine).ok_or_else(|| Rejection::UnknownEngine { engine: engine.clone() })?;
    if state.engine(e).drained == drained {
        let problem = if drained { OpsProblem::AlreadyDrained } else { OpsProblem::NotDrained };
        return Err(Rejection::OpsRefused { target: format!("engine {engine}"), problem });
    }
    state.set_engine_drained(e, drained);
    Ok(())
}

fn publish_library(state: &mut State, info: &LibraryInfo) -> Result<(), Rejection> {
    let refuse = |problem: String| Rejection::InvalidLibrary { library: info.library.to_string(), problem };
    info.library.validate().map_err(|e| refuse(e.to_string()))?;
    match state.library(&info.library) {
        Some(known) if known == info => Ok(()),
        Some(_) => Err(refuse("already published with other contents; publish a new version".into())),
        None => {
            state.publish_library(info.clone());
            Ok(())
        }
    }
}

fn cancel_job(state: &mut State, id: &super::ids::JobId) -> Result<(), Rejection> {
    let job = state.job_idx(id).ok_or_else(|| Rejection::UnknownJob { job: id.clone() })?;
    if !state.job(job).is_active() {
        return Err(Rejection::JobAlreadyEnded { job: id.clone() });
    }
    state.end_job(job, JobStatus::Cancelled);
    Ok(())
}

/// The held job of that id, if it is still active.
fn active_job(state: &State, id: &super::ids::JobId) -> Result<JobIdx, Rejection> {
    let job = state.job_idx(id).ok_or_else(|| Rejection::UnknownJob { job: id.clone() })?;
    if !state.job(job).is_active() {
        return Err(Rejection::JobAlreadyEnded { job: id.clone() });
    }
    Ok(job)
}

fn change_priority(state: &mut State, id: &super::ids::JobId, priority: i32) -> Result<(), Rejection> {
    let job = active_job(state, id)?;
    state.set_priority(job, priority);
    Ok(())
}

/// A project priority of an active job, as its family takes it.
fn change_project_priority(state: &mut State, id: &super::ids::JobId, priority: u32) -> Result<(), Rejection> {
    let job = active_job(state, id)?;
    super::family::on_project_priority(state, job, priority).map_err(|problem| Rejection::OpsRefused { target: id.to_string(), problem })
}

fn set_override_tickets(state: &mut State, id: &super::ids::JobId, tickets: u32) -> Result<(), Rejection> {
    let job = active_job(state, id)?;
    state.set_override_tickets(job, tickets);
    Ok(())
}

fn set_policy(state: &mut State, policy: &Policy) -> Result<(), Rejection> {
    super::policy_limits::check_policy(policy).map_err(|problem| Rejection::InvalidPolicy { problem: problem.to_string() })?;
    for tier in &policy.engine_tiers {
        let Some((property, value)) = tier.split_once('=') else {
            return Err(Rejection::InvalidPolicy { problem: format!("engine tier {tier:?} is not property=value") });
        };
        if property.trim().is_empty() || value.trim().is_empty() {
            return Err(Rejection::InvalidPolicy { problem: format!("engine tier {tier:?} is not property=value") });
        }
    }
    let tiers = super::state::compile_tiers(&policy.engine_tiers)
        .map_err(|e| Rejection::InvalidPolicy { problem: format!("engine tiers: {e}") })?;
    state.set_policy(policy.clone(), tiers);
    Ok(())
}

/// An operator's request to suspend, resume or reschedule (preempt): recorded
/// against each live attempt of the task, or of every task of the job, that it
/// applies to, for `schedule` to answer with an order. Refused, with the reason
/// of the first attempt in task order, when it applies to none.
fn request_control(state: &mut State, target: &TaskSelector, action: Control) -> Result<(), Rejection> {
    let j = state.job_idx(&target.job).ok_or_else(|| Rejection::UnknownJob { job: target.job.clone() })?;
    if !state.job(j).is_active() {
        return Err(Rejection::JobAlreadyEnded { job: target.job.clone() });
    }
    let attempts: Vec<(TaskKey, Attempt)> = match target.task {
        Some(index) => {
            let key = resolve_task(state, &TaskRef::new(target.job.clone(), index))?;
            state.live_attempts_of(key).into_iter().map(|live| (key, live.attempt)).collect()
        }
        None => state.live_attempts_of_job_sorted(j).into_iter().map(|(key, live)| (key, live.attempt)).collect(),
    };
    let mut first_problem = None;
    let mut granted = Vec::new();
    for (key, attempt) in attempts {
        match control_problem(state, key, attempt, action) {
            None => granted.push((key, attempt)),
            Some(problem) => {
                first_problem.get_or_insert(problem);
            }
        }
    }
    if granted.is_empty() {
        let problem = first_problem.unwrap_or(ControlProblem::TaskNotLive);
        return Err(Rejection::ControlRefused { target: target.clone(), action, problem });
    }
    for (key, attempt) in granted {
        state.request_control(key, attempt, action);
    }
    Ok(())
}

/// Why `action` cannot be asked of this live attempt, if it cannot. A
/// reschedule takes the place of a suspend or resume still awaiting its order.
fn control_problem(state: &State, key: TaskKey, attempt: Attempt, action: Control) -> Option<ControlProblem> {
    let suspended = state.suspended_since(key, attempt).is_some();
    let requested = state.control_requested(key, attempt);
    match action {
        Control::Suspend if suspended => Some(ControlProblem::AlreadySuspended),
        Control::Resume if !suspended => Some(ControlProblem::NotSuspended),
        Control::Preempt if requested == Some(Control::Preempt) => Some(ControlProblem::AlreadyRequested),
        Control::Suspend | Control::Resume if requested.is_some() => Some(ControlProblem::AlreadyRequested),
        _ => None,
    }
}

fn logged_in_engine(state: &State, engine: &EngineId) -> Result<EngineIdx, Rejection> {
    let e = state.engine_idx(engine).ok_or_else(|| Rejection::UnknownEngine { engine: engine.clone() })?;
    if state.engine(e).status != EngineStatus::LoggedIn {
        return Err(Rejection::EngineNotLoggedIn { engine: engine.clone() });
    }
    Ok(e)
}

/// Resolves a report to the live attempt it speaks of, or says why it does not.
fn live_attempt_of(
    state: &State,
    task: &TaskRef,
    attempt: Attempt,
    engine: &EngineId,
) -> Result<(TaskKey, EngineIdx), Rejection> {
    let key = resolve_task(state, task)?;
    // The usual case, without looking the engine up by name: the report is about
    // the live attempt and comes from the engine it is booked on.
    if let Some(live) = state.live_attempt(key)
        && live.attempt == attempt
        && state.engine(live.engine).id == *engine
        && live.epoch == state.engine(live.engine).epoch
    {
        return Ok((key, live.engine));
    }
    // Otherwise the checks in order, for the reason to reject.
    let e = state.engine_idx(engine).ok_or_else(|| Rejection::UnknownEngine { engine: engine.clone() })?;
    let live = state
        .live_attempt_numbered(key, attempt)
        .ok_or_else(|| Rejection::StaleAttempt { task: task.clone(), attempt })?;
    if live.engine != e {
        return Err(Rejection::WrongEngine { task: task.clone(), attempt, engine: engine.clone() });
    }
    if live.epoch < state.engine(e).epoch {
        return Err(Rejection::EpochClosed { task: task.clone(), attempt, engine: engine.clone() });
    }
    Ok((key, e))
}

fn resolve_task(state: &State, task: &TaskRef) -> Result<TaskKey, Rejection> {
    let job = state.job_idx(&task.job).ok_or_else(|| Rejection::UnknownJob { job: task.job.clone() })?;
    if task.index >= state.job(job).n_tasks() {
        return Err(Rejection::UnknownTask { task: task.clone() });
    }
    Ok(TaskKey { job, index: task.index })
}

fn task_started(state: &mut State, task: &TaskRef, attempt: Attempt, engine: &EngineId) -> Result<(), Rejection> {
    let (key, e) = live_attempt_of(state, task, attempt, engine)?;
    if state.live_attempt_numbered(key, attempt).is_some_and(|live| live.started_ms.is_some()) {
        return Err(Rejection::DuplicateReport { task: task.clone(), attempt });
    }
    state.touch_engine(e);
    state.start(key, attempt);
    Ok(())
}

/// Orders take effect as they are read back. Each order stands alone: one that no
/// longer applies (its engine left between decision and fold) is rejected and the
/// rest of the batch still applies.
fn apply_orders(state: &mut State, batch: &OrderBatch, out: &mut Vec<Rejection>) {
    if batch.orders.len() > ORDERS_PER_BATCH_MAX {
        out.push(Rejection::BatchTooLarge { orders: batch.orders.len(), max: ORDERS_PER_BATCH_MAX });
        return;
    }
    state.totals.order_batches += 1;
    let mut last_job = None;
    for (n, order) in batch.orders.iter().enumerate() {
        if let Err(problem) = apply_order(state, order, &mut last_job) {
            out.push(Rejection::OrderNotApplicable { order: n as u32, problem });
        }
    }
}

/// The job of the previous order of the batch, as looked up: a batch's orders come
/// in runs of one job (the scheduler fills slots job by job), so most need no lookup.
type LastJob<'a> = Option<(&'a JobId, JobIdx)>;

/// One order read back: each kind is read back by its own function below,
/// which checks that it still applies and applies it, or says why not.
fn apply_order<'a>(state: &mut State, order: &'a Order, last_job: &mut LastJob<'a>) -> Result<(), OrderProblem> {
    match order {
        Order::Dispatch { task, attempt, engine, epoch } => {
            let key = order_task(state, task, last_job)?;
            read_back_dispatch(state, key, *attempt, engine, *epoch)
        }
        Order::Cancel { task, attempt, .. } => {
            let key = order_task(state, task, last_job)?;
            read_back_cancel(state, key, *attempt)
        }
        Order::Requeue { task, attempt, .. } => {
            let key = order_task(state, task, last_job)?;
            live_order_attempt(state, key, *attempt)?;
            state.requeue(key, *attempt);
            Ok(())
        }
        Order::SyncLibrary { engine, library } => read_back_sync(state, engine, library),
        Order::Blacklist { job, engine, .. } => read_back_blacklist(state, job, engine),
        Order::Reschedule { task, reason: super::event::RescheduleReason::Expired | super::event::RescheduleReason::Finalize, .. } => {
            let key = order_task(state, task, last_job)?;
            super::family::read_back_copy(state, key, order)
        }
        Order::FloodRatio { engine, ratio_milli, .. } => read_back_flood_ratio(state, engine, *ratio_milli),
        Order::EndTestCampaign { job, .. } | Order::FlagSink { job, .. } => {
            let j = state.job_idx(job).ok_or(OrderProblem::UnknownJob)?;
            super::family::read_back_job_order(state, j, order)
        }
        Order::Undeliverable { task, attempt, engine, .. } => {
            let key = order_task(state, task, last_job)?;
            read_back_undeliverable(state, key, *attempt, engine)
        }
        Order::Reschedule { task, .. } => {
            let key = order_task(state, task, last_job)?;
            read_back_copy(state, key)
        }
        Order::FailDependent { job, task, .. } => read_back_fail_dependent(state, job, *task),
        Order::EngineLost { engine, epoch, .. } => read_back_engine_lost(state, engine, *epoch),
        Order::Suspend { task, attempt, engine } | Order::Resume { task, attempt, engine } | Order::Preempt { task, attempt, engine } => {
            let key = order_task(state, task, last_job)?;
            let action = match order {
                Order::Suspend { .. } => Control::Suspend,
                Order::Resume { .. } => Control::Resume,
                _ => Control::Preempt,
            };
            read_back_control(state, key, *attempt, engine, action)
        }
        Order::DispatchParallel { task, attempt, engine, epoch, parts } => {
            let key = order_task(state, task, last_job)?;
            super::state::parallel::fold_dispatch(state, key, *attempt, engine, *epoch, parts)?;
            if parts.first().is_some_and(|master| master.engine == *engine) {
                super::family::on_dispatch(state, key, None);
            }
            Ok(())
        }
        Order::MarkUnschedulable { job, reason } => {
            let j = state.job_idx(job).ok_or(OrderProblem::UnknownJob)?;
            if super::schedule::lifecycle::why_job_unschedulable(state, j).is_none() || !state.job(j).is_active() {
                return Err(OrderProblem::JobIsSchedulable);
            }
            state.job_mut(j).unschedulable = Some(*reason);
            Ok(())
        }
    }
}

/// A `Dispatch` of task `key` (a waiting task, or a copy waiting beside its
/// live task) to engine `engine` in its login epoch `epoch`.
fn read_back_dispatch(state: &mut State, key: TaskKey, attempt: Attempt, engine: &EngineId, epoch: u64) -> Result<(), OrderProblem> {
    let e = state.engine_idx(engine).ok_or(OrderProblem::UnknownEngine)?;
    check_engine_state(state, e, epoch)?;
    let current = state.task(key);
    let job = state.job(key.job);
    if job.options.span == super::event::Span::Site {
        return Err(OrderProblem::BadParts { problem: super::reject::PartsProblem::SpanMismatch });
    }
    let copy_waits = current.is_live() && job.copies_waiting.contains(&key.index);
    if !(current.status == TaskStatus::Waiting || copy_waits) || !job.is_active() {
        return Err(OrderProblem::TaskNotWaiting);
    }
    if attempt != current.attempts + 1 {
        return Err(OrderProblem::WrongAttemptNumber { expected: current.attempts + 1 });
    }
    check_engine_takes(state, key, e, job.slots_per_task)?;
    if copy_waits && state.live_attempts_of(key).iter().any(|live| live.engine == e) {
        return Err(OrderProblem::EngineRunsTask);
    }
    state.dispatch(key, attempt, e);
    super::family::on_dispatch(state, key, Some(e));
    Ok(())
}

/// A `Cancel` of a live attempt: of an ended job, a task done by another
/// attempt, or a task whose cancel was asked.
fn read_back_cancel(state: &mut State, key: TaskKey, attempt: Attempt) -> Result<(), OrderProblem> {
    live_order_attempt(state, key, attempt)?;
    let task_state = state.task(key);
    if state.job(key.job).is_active() && task_state.status != TaskStatus::Done && !task_state.is_cancel_requested() {
        return Err(OrderProblem::JobNotEnded);
    }
    state.cancel_attempt(key, attempt);
    Ok(())
}

/// A `SyncLibrary` to a logged-in engine that neither holds the library nor
/// syncs another.
fn read_back_sync(state: &mut State, engine: &EngineId, library: &LibraryRef) -> Result<(), OrderProblem> {
    let e = state.engine_idx(engine).ok_or(OrderProblem::UnknownEngine)?;
    let engine = state.engine(e);
    if engine.status != EngineStatus::LoggedIn {
        return Err(OrderProblem::EngineNotLoggedIn);
    }
    if engine.holds(library) || engine.syncing.is_some() || state.library(library).is_none() {
        return Err(OrderProblem::SyncNotNeeded);
    }
    state.sync_ordered(e, library);
    Ok(())
}

/// A `Blacklist` of an engine the job's failures put on its pending list.
fn read_back_blacklist(state: &mut State, job: &JobId, engine: &EngineId) -> Result<(), OrderProblem> {
    let j = state.job_idx(job).ok_or(OrderProblem::UnknownJob)?;
    let e = state.engine_idx(engine).ok_or(OrderProblem::UnknownEngine)?;
    if !state.pending_blacklists().any(|pending| pending == (j, e)) {
        return Err(OrderProblem::NotBlacklistable);
    }
    state.blacklist(j, e);
    Ok(())
}

/// A `FloodRatio` of a gateway engine, with flood control on, within its range.
fn read_back_flood_ratio(state: &mut State, engine: &EngineId, ratio_milli: u32) -> Result<(), OrderProblem> {
    let e = state.engine_idx(engine).ok_or(OrderProblem::UnknownEngine)?;
    let refused = state.policy.flood.is_none()
        || !super::schedule::flood::is_gateway(state.engine(e))
        || !(1..=super::schedule::flood::RATIO_MAX_MILLI_MAX).contains(&ratio_milli);
    if refused {
        return Err(OrderProblem::FloodRatioRefused);
    }
    let now_ms = state.now_ms;
    state.flood.set(engine, ratio_milli, now_ms);
    Ok(())
}

/// An `Undeliverable` of a live attempt on the engine it names: the attempt fails.
fn read_back_undeliverable(state: &mut State, key: TaskKey, attempt: Attempt, engine: &EngineId) -> Result<(), OrderProblem> {
    let live = state.live_attempt_numbered(key, attempt).ok_or(OrderProblem::AttemptNotLive)?;
    if state.engine_idx(engine) != Some(live.engine) {
        return Err(OrderProblem::AttemptNotLive);
    }
    state.fail(key, attempt);
    Ok(())
}

/// A `Reschedule` (redundant rescheduling) of a live task: a copy queued,
/// when its job reschedules and the task has room for one more.
fn read_back_copy(state: &mut State, key: TaskKey) -> Result<(), OrderProblem> {
    let job = state.job(key.job);
    let live_attempts = state.live_attempts_of(key).len() as u32;
    let wanted = job.is_active()
        && job.options.redundant_rescheduling
        && state.task(key).is_live()
        && !job.copies_waiting.contains(&key.index)
        && live_attempts <= state.policy.redundancy.copies_per_task_max;
    if !wanted {
        return Err(OrderProblem::NoCopyWanted);
    }
    let first = state.policy.redundancy.reschedule_first;
    state.add_copy(key, first);
    Ok(())
}

/// A `FailDependent` of a job (`index` none) or of one of its tasks whose
/// dependency failed.
fn read_back_fail_dependent(state: &mut State, job: &JobId, index: Option<u32>) -> Result<(), OrderProblem> {
    let j = state.job_idx(job).ok_or(OrderProblem::UnknownJob)?;
    let Some(index) = index else {
        if state.job(j).failed_dependency.is_none() || !state.job(j).is_active() {
            return Err(OrderProblem::DependencyNotFailed);
        }
        state.fail_for_dependency(j);
        return Ok(());
    };
    if index >= state.job(j).n_tasks() {
        return Err(OrderProblem::UnknownTask);
    }
    let key = TaskKey { job: j, index };
    if !state.job(j).is_active() || state.failed_dependency_of(key).is_none() {
        return Err(OrderProblem::DependencyNotFailed);
    }
    state.fail_task_for_dependency(key);
    Ok(())
}

/// An `EngineLost` of a logged-in engine in the epoch it was decided for:
/// its attempts are requeued.
fn read_back_engine_lost(state: &mut State, engine: &EngineId, epoch: u64) -> Result<(), OrderProblem> {
    let e = state.engine_idx(engine).ok_or(OrderProblem::UnknownEngine)?;
    if state.engine(e).status != EngineStatus::LoggedIn {
        return Err(OrderProblem::EngineNotLoggedIn);
    }
    if state.engine(e).epoch != epoch {
        return Err(OrderProblem::EpochClosed { epoch, current: state.engine(e).epoch });
    }
    state.mark_engine_lost(e);
    state.requeue_engine_attempts(e);
    Ok(())
}

/// A `Suspend`, `Resume` or `Preempt` (`action`) of a live attempt on the
/// engine it names: an operator asked for it, the family's own rule preempts
/// it, or a suspend threshold (re-checked here) justifies it.
fn read_back_control(state: &mut State, key: TaskKey, attempt: Attempt, engine: &EngineId, action: Control) -> Result<(), OrderProblem> {
    live_order_attempt(state, key, attempt)?;
    let on_engine = state.live_attempt_numbered(key, attempt).is_some_and(|live| state.engine(live.engine).id == *engine);
    let requested = state.control_requested(key, attempt) == Some(action);
    // A family may preempt on its own rule (Techila: a Lowest project's task).
    let by_family = !requested && action == Control::Preempt && super::family::may_preempt(state, key);
    // Grid Engine's suspend thresholds suspend and resume on theirs, re-checked here.
    let threshold = match state.live_attempt_numbered(key, attempt) {
        Some(live) if !requested && !by_family && on_engine => {
            state.threshold_justifies(key, attempt, live.engine, action).map(|cause| (live.engine, cause))
        }
        _ => None,
    };
    if let Some((e, cause)) = threshold {
        state.threshold_acted(key, attempt, e, action, cause);
        return Ok(());
    }
    if !(requested || by_family) || !on_engine {
        return Err(OrderProblem::NotRequested);
    }
    if by_family {
        super::family::on_preempt(state, key);
    }
    match action {
        Control::Suspend => state.suspend_attempt(key, attempt),
        Control::Resume => state.resume_attempt(key, attempt),
        Control::Preempt => state.preempt(key, attempt),
    }
    Ok(())
}


fn order_task<'a>(state: &State, task: &'a TaskRef, last_job: &mut LastJob<'a>) -> Result<TaskKey, OrderProblem> {
    let job = match *last_job {
        Some((id, job)) if *id == task.job => job,
        _ => {
            let job = state.job_idx(&task.job).ok_or(OrderProblem::UnknownJob)?;
            *last_job = Some((&task.job, job));
            job
        }
    };
    if task.index >= state.job(job).n_tasks() {
        return Err(OrderProblem::UnknownTask);
    }
    Ok(TaskKey { job, index: task.index })
}

fn live_order_attempt(state: &State, key: TaskKey, attempt: Attempt) -> Result<(), OrderProblem> {
    match state.live_attempt_numbered(key, attempt) {
        Some(_) => Ok(()),
        None => Err(OrderProblem::AttemptNotLive),
    }
}


#[cfg(test)]
#[path = "fold_tests.rs"]
pub(crate) mod tests;
