//! The attempt lifecycle (dispatch, start, completion, failure, requeue,
//! cancel), copies, blacklists, and tasks failed for a dependency.

use crate::core::event::{Entry, Event, FailureKind, Order, StoredStreams};
use crate::core::ids::{Attempt, EngineIdx, JobIdx, TaskKey};
use crate::core::reject::Rejection;
use std::collections::BTreeMap;
use super::attempts::{AttemptEnd, Dispatched, Reported};
use super::job::{JobStatus, MaybeEngine, TaskStatus};
use super::live::{FirstResult, LiveAttempt};
use super::store::State;

impl State {
    // ---- the attempt lifecycle ----------------------------------------------

    /// Books a waiting task, or a waiting redundant copy of a live one, onto an
    /// engine as the given attempt.
    pub(crate) fn dispatch(&mut self, key: TaskKey, attempt: Attempt, e: EngineIdx) {
        let now = self.now_ms;
        let engine_slots = self.attempt_slots(key, attempt);
        let job = &mut self.jobs[key.job.0 as usize];
        let was_runnable = job.is_runnable();
        let slots = job.slots_per_task;
        let is_copy = job.tasks[key.index as usize].is_live();
        if is_copy {
            job.take_copy(key.index, attempt);
        } else {
            job.take_waiting(key.index, attempt);
        }
        job.tasks[key.index as usize].last_engine = MaybeEngine::some(e);
        let engine = &mut self.engines[e.0 as usize];
        engine.used += engine_slots;
        assert!(engine.used <= engine.slots, "engine {} booked above its slots", engine.id);
        engine.live += 1;
        let live = LiveAttempt { attempt, engine: e, epoch: engine.epoch, dispatched_ms: now, started_ms: None };
        if is_copy {
            let previous = self.copies.insert((key, attempt), live);
            assert!(previous.is_none(), "an attempt number is used once");
        } else {
            let previous = self.live.insert(key, live);
            assert!(previous.is_none(), "a waiting task has no live attempt");
        }
        self.dispatched_since.insert((now, key, attempt));
        let job = &self.jobs[key.job.0 as usize];
        let (user, project) = (job.user_account, job.project_account);
        self.users.attempt_began(user, slots, now);
        self.projects.attempt_began(project, slots, now);
        self.totals.dispatches += 1;
        self.refresh_free(e);
        self.refresh_runnable(key.job, was_runnable);
    }

    pub(super) fn live_numbered_mut(&mut self, key: TaskKey, attempt: Attempt) -> &mut LiveAttempt {
        match self.live.get_mut(&key) {
            Some(live) if live.attempt == attempt => live,
            _ => self.copies.get_mut(&(key, attempt)).expect("fold checks the attempt is live"),
        }
    }

    pub(crate) fn start(&mut self, key: TaskKey, attempt: Attempt) {
        let now = self.now_ms;
        let live = self.live_numbered_mut(key, attempt);
        let dispatched_ms = live.dispatched_ms;
        live.started_ms = Some(now);
        self.dispatched_since.remove(&(dispatched_ms, key, attempt));
        let job = &mut self.jobs[key.job.0 as usize];
        if job.tasks[key.index as usize].status == TaskStatus::Dispatched {
            job.mark_running(key.index);
        }
        self.record_wait(key);
    }

    /// Removes one live attempt and frees its slots. When it was the task's first
    /// live attempt and copies remain, the oldest copy takes its place. Returns
    /// the attempt and whether the task still has a live attempt; the caller sets
    /// the task's next status.
    pub(super) fn release(&mut self, key: TaskKey, attempt: Attempt) -> (LiveAttempt, bool) {
        // Without copies anywhere, the released attempt is the task's only one:
        // the common case skips the copy bookkeeping and a second lookup.
        let had_copies = !self.copies.is_empty();
        let engine_slots = self.attempt_slots(key, attempt);
        let live = match self.live.get(&key) {
            Some(first) if first.attempt == attempt => {
                let first = self.live.remove(&key).expect("just seen");
                let oldest_copy = if had_copies { self.copies.range((key, 0)..=(key, Attempt::MAX)).next() } else { None };
                if let Some((&(_, copy_attempt), _)) = oldest_copy {
                    let copy = self.copies.remove(&(key, copy_attempt)).expect("just seen");
                    self.live.insert(key, copy);
                }
                first
            }
            _ => self.copies.remove(&(key, attempt)).expect("only live attempts are released"),
        };
        if live.started_ms.is_none() {
            self.dispatched_since.remove(&(live.dispatched_ms, key, attempt));
        }
        self.to_cancel.remove(&(key, attempt));
        self.forget_controls(key, attempt);
        let job = &self.jobs[key.job.0 as usize];
        let (slots, user, project) = (job.slots_per_task, job.user_account, job.project_account);
        let (now, halftime_ms) = (self.now_ms, self.policy.sge.halftime_ms);
        self.users.attempt_ended(user, slots, live.dispatched_ms, now, halftime_ms);
        self.projects.attempt_ended(project, slots, live.dispatched_ms, now, halftime_ms);
        let engine = &mut self.engines[live.engine.0 as usize];
        engine.used -= engine_slots;
        engine.live -= 1;
        if live.epoch < engine.epoch {
            engine.closed_epoch_live -= 1;
            if engine.closed_epoch_live == 0 {
                self.restarted_engines.remove(&live.engine);
            }
        }
        self.refresh_free(live.engine);
        self.release_companions(key, attempt);
        (live, had_copies && self.live.contains_key(&key))
    }

    /// After one of several attempts ended: the task runs if any remaining attempt has started.
    pub(super) fn refresh_live_status(&mut self, key: TaskKey) {
        let job = &self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() {
            return;
        }
        let any_started = self.live_attempts_of(key).iter().any(|live| live.started_ms.is_some());
        let status = if any_started { TaskStatus::Running } else { TaskStatus::Dispatched };
        self.jobs[key.job.0 as usize].set_task_status(key.index, status);
    }

    /// Adds an accepted completion's reported CPU time to its job's figure.
    pub(crate) fn add_completed_cpu(&mut self, key: TaskKey, cpu_ms: u64) {
        let job = &mut self.jobs[key.job.0 as usize];
        job.cpu_ms_completed = job.cpu_ms_completed.saturating_add(cpu_ms);
    }

    /// A success reported by the engine. Returns, when it is the task's first
    /// result, the engine that ran it and when its attempt started (or, with
    /// no start report, was dispatched); `None` for a redundant copy's result.
    pub(crate) fn complete(&mut self, key: TaskKey, attempt: Attempt, wall_ms: u64) -> Option<FirstResult> {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        // The task's time is from its oldest live attempt (the first one), not from
        // the copy that won: a task that needed a copy took that long.
        let first_dispatched_ms =
            if self.copies.is_empty() { None } else { self.live.get(&key).map(|first| first.dispatched_ms) };
        let (live, others_live) = self.release(key, attempt);
        if live.started_ms.is_none() {
            self.record_wait(key);
        }
        self.engines[live.engine.0 as usize].completed += 1;
        self.totals.busy_ms_sum += wall_ms;
        let now = self.now_ms;
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() {
            // A redundant copy's result after the task already had one: the first wins.
            job.redundant_results += 1;
            self.refresh_runnable(key.job, was_runnable);
            return None;
        }
        self.totals.tasks_done += 1;
        job.completion_times.add(now.saturating_sub(first_dispatched_ms.unwrap_or(live.dispatched_ms)));
        job.drop_copy(key.index);
        job.mark_done(key.index);
        job.tasks[key.index as usize].last_engine = MaybeEngine::some(live.engine);
        let cancels = job.options.cancel_redundant_on_first_result || job.racing.contains(&key.index);
        if others_live && cancels {
            let others: Vec<Attempt> = self.live_attempts_of(key).iter().map(|live| live.attempt).collect();
            self.to_cancel.extend(others.into_iter().map(|attempt| (key, attempt)));
        }
        self.refresh_runnable(key.job, was_runnable);
        self.finish_job_if_ended(key.job);
        Some(FirstResult { engine: live.engine, started_ms: live.started_ms.unwrap_or(live.dispatched_ms) })
    }

    /// Counts the wait of an attempt starting now (or completing with no start report).
    pub(super) fn record_wait(&mut self, key: TaskKey) {
        let wait = self.now_ms.saturating_sub(self.jobs[key.job.0 as usize].submitted_ms);
        self.totals.wait_ms_sum += wait;
        self.totals.wait_ms_max = self.totals.wait_ms_max.max(wait);
        self.totals.waits_counted += 1;
    }

    /// A failure reported by the engine. It counts against the engine for black-
    /// and greylisting. When it was the task's only live attempt it counts against
    /// the task: retried (not on this engine while another fits) or, its attempts
    /// exhausted, failed, which fails the job unless the job carries on.
    pub(crate) fn fail(&mut self, key: TaskKey, attempt: Attempt) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let (live, others_live) = self.release(key, attempt);
        self.engines[live.engine.0 as usize].failed += 1;
        self.totals.attempts_failed += 1;
        let job = &mut self.jobs[key.job.0 as usize];
        job.count_engine_failure(live.engine);
        let failures = job.failures_by_engine[&live.engine];
        if job.options.engine_blacklisting
            && failures >= job.options.blacklist_threshold()
            && !job.blacklist.contains(&live.engine)
            && job.status == JobStatus::Active
        {
            self.pending_blacklists.insert((key.job, live.engine));
        }
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() || others_live {
            self.refresh_live_status(key);
            self.refresh_runnable(key.job, was_runnable);
            return;
        }
        job.drop_copy(key.index);
        if job.tasks[key.index as usize].is_cancel_requested() {
            // Cancelled by an operator while it ran: it is not retried.
            job.mark_cancelled(key.index);
            self.refresh_runnable(key.job, was_runnable);
            self.finish_job_if_ended(key.job);
            return;
        }
        let exhausted = job.record_failure(key.index, live.engine);
        if exhausted {
            self.totals.tasks_failed += 1;
            if self.jobs[key.job.0 as usize].options.continue_on_task_failure {
                self.refresh_runnable(key.job, was_runnable);
                self.finish_job_if_ended(key.job);
                return;
            }
            self.end_job(key.job, JobStatus::Failed);
        }
        self.refresh_runnable(key.job, was_runnable);
    }

    /// An attempt ended through no fault of the task (engine lost or logged out,
    /// dispatch timeout): back to the queue without counting a failure, unless
    /// another attempt of the task lives on.
    pub(crate) fn requeue(&mut self, key: TaskKey, attempt: Attempt) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let (_, others_live) = self.release(key, attempt);
        self.totals.requeues += 1;
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() || others_live {
            self.refresh_live_status(key);
        } else if job.status == JobStatus::Active && !job.tasks[key.index as usize].is_cancel_requested() {
            job.drop_copy(key.index);
            job.requeue(key.index);
        } else {
            job.mark_cancelled(key.index);
        }
        self.refresh_runnable(key.job, was_runnable);
        self.finish_job_if_ended(key.job);
    }

    /// A Cancel order took effect: of an ended job's attempt, or of a redundant copy.
    pub(crate) fn cancel_attempt(&mut self, key: TaskKey, attempt: Attempt) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let (_, others_live) = self.release(key, attempt);
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() || others_live {
            self.refresh_live_status(key);
        } else {
            job.mark_cancelled(key.index);
        }
        self.refresh_runnable(key.job, was_runnable);
        self.finish_job_if_ended(key.job);
    }

    /// Requeues every live attempt on an engine (it was lost or logged out).
    pub(crate) fn requeue_engine_attempts(&mut self, e: EngineIdx) {
        for (key, attempt) in self.attempts_on_engine(e) {
            self.requeue(key, attempt);
        }
    }

    /// The live attempts of closed login epochs, each awaiting a Requeue
    /// (`EngineRestarted`), by engine index, then task and attempt.
    pub fn closed_epoch_attempts(&self) -> impl Iterator<Item = (TaskKey, Attempt)> + '_ {
        self.restarted_engines.iter().flat_map(move |&e| {
            let epoch = self.engines[e.0 as usize].epoch;
            self.attempts_on_engine(e).into_iter().filter(move |&(key, attempt)| {
                self.live_attempt_numbered(key, attempt).is_some_and(|live| live.epoch < epoch)
            })
        })
    }

    /// Every live attempt booked on an engine, sorted by task and attempt.
    pub(super) fn attempts_on_engine(&self, e: EngineIdx) -> Vec<(TaskKey, Attempt)> {
        if self.engines[e.0 as usize].live == 0 {
            return Vec::new();
        }
        let mut attempts: Vec<(TaskKey, Attempt)> = self
            .live
            .tasks_on_engine(e)
            .into_iter()
            .map(|key| (key, self.live.get(&key).expect("listed").attempt))
            .collect();
        attempts.extend(self.copies.iter().filter(|(_, live)| live.engine == e).map(|(&key, _)| key));
        attempts.sort_unstable();
        attempts
    }

    // ---- blacklists, copies and dependencies -----------------------------------

    /// A Reschedule order took effect: a copy of the running task waits in its job's queue.
    pub(crate) fn add_copy(&mut self, key: TaskKey, first: bool) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        self.jobs[key.job.0 as usize].add_copy(key.index, first);
        self.refresh_runnable(key.job, was_runnable);
    }

    /// A copy of the running task that races it: it waits first in its job's
    /// queue, and the task's first result, from whichever attempt, cancels
    /// the others (Techila's expired task, CiGri's finalize copy).
    pub(crate) fn add_racing_copy(&mut self, key: TaskKey) {
        self.jobs[key.job.0 as usize].racing.insert(key.index);
        self.add_copy(key, true);
    }

    pub(crate) fn blacklist(&mut self, j: JobIdx, e: EngineIdx) {
        self.pending_blacklists.remove(&(j, e));
        self.jobs[j.0 as usize].blacklist.insert(e);
    }

    /// Clears the blacklists and greylists of every job, for one engine or all.
    pub(crate) fn clear_blacklists(&mut self, engine: Option<EngineIdx>) {
        for job in self.jobs.iter_mut() {
            match engine {
                Some(e) => {
                    job.blacklist.remove(&e);
                    job.failures_by_engine.remove(&e);
                }
                None => {
                    job.blacklist.clear();
                    job.failures_by_engine.clear();
                }
            }
        }
        self.pending_blacklists.retain(|&(_, e)| engine.is_some_and(|cleared| cleared != e));
    }

    /// A FailDependent order for a whole job took effect.
    pub(crate) fn fail_for_dependency(&mut self, j: JobIdx) {
        self.failing_dependents.remove(&j);
        self.end_job(j, JobStatus::Failed);
    }

    /// A FailDependent order for one waiting task took effect: it fails without
    /// running, and its job fails with it unless the job carries on.
    pub(crate) fn fail_task_for_dependency(&mut self, key: TaskKey) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let job = &mut self.jobs[key.job.0 as usize];
        job.fail_waiting(key.index);
        self.totals.tasks_failed += 1;
        if job.options.continue_on_task_failure {
            self.refresh_runnable(key.job, was_runnable);
            self.finish_job_if_ended(key.job);
        } else {
            self.end_job(key.job, JobStatus::Failed);
            self.refresh_runnable(key.job, was_runnable);
        }
    }
}

impl State {
    /// Records what an applied entry says of attempts: called by the fold after
    /// `event` applied (for a batch, with the rejections of its orders, which did not).
    pub(crate) fn note_attempts(&mut self, entry: &Entry, event: &Event, rejections: &[Rejection]) {
        match event {
            Event::OrderBatch(batch) => {
                let Some(rejected) = crate::core::reject::orders_not_applied(rejections) else { return };
                let applied: Vec<(TaskKey, EngineIdx, Attempt)> = batch
                    .orders
                    .iter()
                    .enumerate()
                    .filter(|(n, _)| rejected.binary_search(&(*n as u32)).is_err())
                    .filter_map(|(_, order)| match order {
                        Order::Dispatch { task, attempt, engine, .. } => {
                            Some((self.task_key(task)?, self.engine_idx(engine)?, *attempt))
                        }
                        _ => None,
                    })
                    .collect();
                // The job's tasks this batch dispatches and the fold has already taken
                // out of waiting: each counts as waiting until its turn here.
                let mut dispatched_later: BTreeMap<JobIdx, u32> = BTreeMap::new();
                for (key, _, _) in &applied {
                    *dispatched_later.entry(key.job).or_default() += 1;
                }
                for (key, e, attempt) in applied {
                    let later = dispatched_later.get_mut(&key.job).expect("counted above");
                    let waiting = self.job(key.job).counts.waiting.saturating_add(*later);
                    *later -= 1;
                    let policy = self.policy.output.clone();
                    let job = self.job_mut(key.job);
                    let output_bytes_max = job.attempt_log.commit_output(&policy, waiting);
                    let dispatched = Dispatched {
                        attempt,
                        engine: e,
                        dispatch_seq: entry.seq.0,
                        based_on_seq: batch.based_on_seq.0,
                        dispatched_ms: entry.time_ms,
                        output_bytes_max,
                    };
                    job.attempt_log.dispatched(key.index, dispatched);
                }
                for (n, order) in batch.orders.iter().enumerate() {
                    let Order::Undeliverable { task, attempt, bytes, max, .. } = order else { continue };
                    let Some(key) = self.task_key(task).filter(|_| rejected.binary_search(&(n as u32)).is_err()) else { continue };
                    let reason = format!("the broker refused its run order as too large: {bytes} bytes, more than its {max}");
                    let report = Reported {
                        seq: entry.seq.0,
                        time_ms: entry.time_ms,
                        end: AttemptEnd::Failed,
                        exit_code: None,
                        failure_kind: Some(FailureKind::Undeliverable),
                        cpu_ms: None,
                        wall_ms: None,
                        text: reason.as_bytes(),
                        stored: StoredStreams::default(),
                    };
                    self.job_mut(key.job).attempt_log.reported(key.index, *attempt, report);
                }
            }
            Event::TaskStarted { task, attempt, remote_job, .. } => {
                if let Some(key) = self.task_key(task) {
                    self.job_mut(key.job).attempt_log.started(key.index, *attempt, entry.time_ms, remote_job);
                }
            }
            Event::TaskCompleted { task, attempt, exit_code, cpu_ms, wall_ms, result, stored, .. } => {
                let report = Reported {
                    seq: entry.seq.0,
                    time_ms: entry.time_ms,
                    end: AttemptEnd::Completed,
                    exit_code: Some(*exit_code),
                    failure_kind: None,
                    cpu_ms: Some(*cpu_ms),
                    wall_ms: Some(*wall_ms),
                    text: result,
                    stored: *stored,
                };
                if let Some(key) = self.task_key(task) {
                    self.job_mut(key.job).attempt_log.reported(key.index, *attempt, report);
                }
            }
            Event::TaskFailed { task, attempt, exit_code, kind, error_tail, stored, .. } => {
                let report = Reported {
                    seq: entry.seq.0,
                    time_ms: entry.time_ms,
                    end: AttemptEnd::Failed,
                    exit_code: *exit_code,
                    failure_kind: Some(*kind),
                    cpu_ms: None,
                    wall_ms: None,
                    text: error_tail.as_bytes(),
                    stored: *stored,
                };
                if let Some(key) = self.task_key(task) {
                    self.job_mut(key.job).attempt_log.reported(key.index, *attempt, report);
                }
            }
            _ => {}
        }
    }
}
