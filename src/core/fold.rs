//! Applying one log entry to the state.
//!
//! `fold` never fails and never decides. It validates an entry against the state
//! (is the job known, is this the live attempt, did the right engine send it) and
//! either applies it or records a [`Rejection`] and changes nothing else. The same
//! log folds to the same state on every replay; an entry at or below the last
//! folded sequence is a no-op, so re-applying is harmless.

use super::event::{Entry, Envelope, Event, JobSpec, Order, OrderBatch, Origin, Payload, Policy,
    ERROR_TAIL_BYTES_MAX, ORDERS_PER_BATCH_MAX, RESULT_BYTES_MAX, TASKS_PER_JOB_MAX};
use super::ids::{Attempt, EngineId, JobId, Seq, TaskRef};
use super::reject::{JobProblem, OrderProblem, Rejection};
use super::state::{EngineIdx, EngineStatus, Job, JobIdx, JobStatus, State, TaskKey, TaskStatus};

/// Applies one entry. Returns the rejections it caused (empty when it applied
/// cleanly); they are also recorded in the state.
pub fn fold(state: &mut State, entry: &Entry) -> Vec<Rejection> {
    if entry.seq <= state.last_seq {
        return Vec::new();
    }
    state.last_seq = entry.seq;
    state.now_ms = state.now_ms.max(entry.time_ms);
    state.first_ms.get_or_insert(entry.time_ms);
    state.chain = state.chain.chain(entry.seq.0, entry.time_ms, &entry.canonical);
    state.totals.entries += 1;

    let mut rejections = Vec::new();
    match &entry.payload {
        Payload::Undecodable { detail } => rejections.push(Rejection::Undecodable { detail: detail.clone() }),
        Payload::Event(envelope) => apply(state, entry.seq, &entry.origin, envelope, &mut rejections),
    }
    for rejection in &rejections {
        state.record_rejection(entry.seq, rejection.clone());
    }
    rejections
}

fn apply(state: &mut State, seq: Seq, origin: &Origin, envelope: &Envelope, out: &mut Vec<Rejection>) {
    let event = &envelope.event;
    if let Err(rejection) = check_publisher(origin, event) {
        out.push(rejection);
        return;
    }
    let result = match event {
        Event::JobSubmitted(spec) => submit_job(state, seq, spec),
        Event::JobCancelled { job, .. } => cancel_job(state, job),
        Event::JobPriorityChanged { job, priority } => change_priority(state, job, *priority),
        Event::EngineLoggedIn { engine, slots, props } => {
            if *slots == 0 {
                Err(Rejection::InvalidEngine { engine: engine.clone(), problem: "an engine needs at least one slot".into() })
            } else {
                // A login opens a new session of the engine agent, which runs nothing
                // yet: attempts an earlier session still held go back to the queue, as
                // at a logout. (A lost or logged-out engine holds none already.)
                if let Some(e) = state.engine_idx(engine) {
                    state.requeue_engine_attempts(e);
                }
                state.log_in_engine(engine, *slots, props.clone());
                Ok(())
            }
        }
        Event::EngineLoggedOut { engine } => logged_in_engine(state, engine).map(|e| {
            state.set_engine_logged_out(e);
            state.requeue_engine_attempts(e);
        }),
        Event::EngineHeartbeat { engine, load } => logged_in_engine(state, engine).map(|e| {
            state.engine_mut(e).load = *load;
            state.touch_engine(e);
        }),
        Event::TaskStarted { task, attempt, engine } => task_started(state, task, *attempt, engine),
        Event::TaskCompleted { task, attempt, engine, wall_ms, result, .. } => {
            if result.len() > RESULT_BYTES_MAX {
                Err(Rejection::ResultTooLarge { task: task.clone(), bytes: result.len(), max: RESULT_BYTES_MAX })
            } else {
                live_attempt_of(state, task, *attempt, engine).map(|(key, e)| {
                    state.touch_engine(e);
                    state.complete(key, *wall_ms);
                })
            }
        }
        Event::TaskFailed { task, attempt, engine, error_tail, .. } => {
            if error_tail.len() > ERROR_TAIL_BYTES_MAX {
                Err(Rejection::ErrorTailTooLarge { task: task.clone(), bytes: error_tail.len(), max: ERROR_TAIL_BYTES_MAX })
            } else {
                live_attempt_of(state, task, *attempt, engine).map(|(key, e)| {
                    state.touch_engine(e);
                    state.fail(key);
                })
            }
        }
        Event::PolicySet(policy) => set_policy(state, policy),
        Event::Tick => Ok(()),
        Event::OrderBatch(batch) => {
            apply_orders(state, batch, out);
            Ok(())
        }
    };
    if let Err(rejection) = result {
        out.push(rejection);
    }
}

/// The subject an entry arrived on bounds what it may say: engines speak only for
/// themselves, only the projector issues orders, engines do not submit jobs.
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
    let allowed = match event {
        Event::OrderBatch(_) => *origin == Origin::Projector,
        Event::Tick => matches!(origin, Origin::Ticker | Origin::Client),
        _ => *origin == Origin::Client,
    };
    if allowed { Ok(()) } else { Err(Rejection::WrongPublisher { event: event.kind_name().to_string() }) }
}

fn submit_job(state: &mut State, seq: Seq, spec: &JobSpec) -> Result<(), Rejection> {
    let invalid = |problem| Rejection::InvalidJob { job: spec.id.clone(), problem };
    if state.job_idx(&spec.id).is_some() {
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
    if spec.max_attempts == 0 {
        return Err(invalid(JobProblem::ZeroMaxAttempts));
    }
    let expr = super::expr::parse(&spec.requirements).map_err(|e| {
        invalid(JobProblem::BadRequirements { position: e.position, message: e.message.clone() })
    })?;
    let category = state.category_for(expr, spec.slots_per_task);
    let job = Job::new(spec, category, seq, state.now_ms);
    state.add_job(job);
    Ok(())
}

fn cancel_job(state: &mut State, id: &super::ids::JobId) -> Result<(), Rejection> {
    let job = state.job_idx(id).ok_or_else(|| Rejection::UnknownJob { job: id.clone() })?;
    if !state.job(job).is_active() {
        return Err(Rejection::JobAlreadyEnded { job: id.clone() });
    }
    state.end_job(job, JobStatus::Cancelled);
    Ok(())
}

fn change_priority(state: &mut State, id: &super::ids::JobId, priority: i32) -> Result<(), Rejection> {
    let job = state.job_idx(id).ok_or_else(|| Rejection::UnknownJob { job: id.clone() })?;
    if !state.job(job).is_active() {
        return Err(Rejection::JobAlreadyEnded { job: id.clone() });
    }
    state.set_priority(job, priority);
    Ok(())
}

fn set_policy(state: &mut State, policy: &Policy) -> Result<(), Rejection> {
    if policy.dispatches_per_run_max == 0 || policy.dispatches_per_run_max as usize > ORDERS_PER_BATCH_MAX {
        return Err(Rejection::InvalidPolicy {
            problem: format!("dispatches_per_run_max must be within 1..={ORDERS_PER_BATCH_MAX}"),
        });
    }
    if policy.engine_timeout_ms == 0 || policy.dispatch_timeout_ms == 0 {
        return Err(Rejection::InvalidPolicy { problem: "timeouts must be positive".into() });
    }
    state.policy = policy.clone();
    Ok(())
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
    {
        return Ok((key, live.engine));
    }
    // Otherwise the checks in order, for the reason to reject.
    let e = state.engine_idx(engine).ok_or_else(|| Rejection::UnknownEngine { engine: engine.clone() })?;
    let live = state
        .live_attempt(key)
        .filter(|live| live.attempt == attempt)
        .ok_or_else(|| Rejection::StaleAttempt { task: task.clone(), attempt })?;
    if live.engine != e {
        return Err(Rejection::WrongEngine { task: task.clone(), attempt, engine: engine.clone() });
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
    if state.task(key).status != TaskStatus::Dispatched {
        return Err(Rejection::DuplicateReport { task: task.clone(), attempt });
    }
    state.touch_engine(e);
    state.start(key);
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

fn apply_order<'a>(state: &mut State, order: &'a Order, last_job: &mut LastJob<'a>) -> Result<(), OrderProblem> {
    match order {
        Order::Dispatch { task, attempt, engine } => {
            let key = order_task(state, task, last_job)?;
            let e = state.engine_idx(engine).ok_or(OrderProblem::UnknownEngine)?;
            let engine = state.engine(e);
            if engine.status != EngineStatus::LoggedIn {
                return Err(OrderProblem::EngineNotLoggedIn);
            }
            let current = state.task(key);
            if current.status != TaskStatus::Waiting || !state.job(key.job).is_active() {
                return Err(OrderProblem::TaskNotWaiting);
            }
            if *attempt != current.attempts + 1 {
                return Err(OrderProblem::WrongAttemptNumber { expected: current.attempts + 1 });
            }
            let needed = state.job(key.job).slots_per_task;
            if engine.free_slots() < needed {
                return Err(OrderProblem::NotEnoughFreeSlots { free: engine.free_slots(), needed });
            }
            state.dispatch(key, *attempt, e);
        }
        Order::Cancel { task, attempt, .. } => {
            let key = order_task(state, task, last_job)?;
            live_order_attempt(state, key, *attempt)?;
            if state.job(key.job).is_active() {
                return Err(OrderProblem::JobNotEnded);
            }
            state.cancel_attempt(key);
        }
        Order::Requeue { task, attempt, .. } => {
            let key = order_task(state, task, last_job)?;
            live_order_attempt(state, key, *attempt)?;
            state.requeue(key);
        }
        Order::EngineLost { engine, .. } => {
            let e = state.engine_idx(engine).ok_or(OrderProblem::UnknownEngine)?;
            if state.engine(e).status != EngineStatus::LoggedIn {
                return Err(OrderProblem::EngineNotLoggedIn);
            }
            state.mark_engine_lost(e);
            state.requeue_engine_attempts(e);
        }
        Order::MarkUnschedulable { job, reason } => {
            let j = state.job_idx(job).ok_or(OrderProblem::UnknownJob)?;
            let category = state.category(state.job(j).category);
            if category.eligible_logged_in > 0 || !state.job(j).is_active() {
                return Err(OrderProblem::JobIsSchedulable);
            }
            state.job_mut(j).unschedulable = Some(*reason);
        }
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
    match state.live_attempt(key) {
        Some(live) if live.attempt == attempt => Ok(()),
        _ => Err(OrderProblem::AttemptNotLive),
    }
}
