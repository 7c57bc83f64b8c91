//! Orders published but not yet read back: `schedule` must see them as done,
//! or it would dispatch a task twice, book a slot twice, or repeat an order.

use std::collections::{BTreeMap, BTreeSet};

use crate::core::event::{Order, OrderBatch};
use crate::core::ids::Attempt;
use crate::core::state::{EngineIdx, JobIdx, State, TaskKey};
use crate::core::family::data::SinkTarget;

#[derive(Debug, Clone, Default)]
pub struct InFlight {
    dispatched: BTreeSet<TaskKey>,
    dispatched_per_job: BTreeMap<JobIdx, u32>,
    booked: BTreeMap<EngineIdx, u32>,
    lost: BTreeSet<EngineIdx>,
    /// Attempts a Requeue, Cancel or Preempt in flight will end.
    ending: BTreeSet<(TaskKey, Attempt)>,
    /// Attempts a Suspend, Resume or Preempt in flight answers a request of.
    controlled: BTreeSet<(TaskKey, Attempt)>,
    flagged: BTreeSet<JobIdx>,
    syncing: BTreeSet<EngineIdx>,
    blacklisted: BTreeSet<(JobIdx, EngineIdx)>,
    rescheduled: BTreeSet<TaskKey>,
    /// FailDependent orders: (job, task index or `None` for the whole job).
    failing: BTreeSet<(JobIdx, Option<u32>)>,
    /// Gateways a FloodRatio in flight sets the ratio of.
    flood_ratio: BTreeSet<EngineIdx>,
    /// CiGri FlagSink orders: (job, engine or cluster).
    sinks_flagged: BTreeSet<(JobIdx, SinkTarget)>,
}

impl InFlight {
    pub fn new() -> Self {
        Self::default()
    }

    /// The in-flight view of these batches, resolved against the state.
    pub fn from_batches<'a>(state: &State, batches: impl IntoIterator<Item = &'a OrderBatch>) -> Self {
        let mut in_flight = InFlight::new();
        for batch in batches {
            in_flight.add(state, batch);
        }
        in_flight
    }

    pub fn add(&mut self, state: &State, batch: &OrderBatch) {
        for order in &batch.orders {
            match order {
                Order::Dispatch { task, engine, .. } => {
                    let (Some(key), Some(e)) = (state.task_key(task), state.engine_idx(engine)) else { continue };
                    if self.dispatched.insert(key) {
                        *self.dispatched_per_job.entry(key.job).or_default() += 1;
                        *self.booked.entry(e).or_default() += state.job(key.job).slots_per_task;
                    }
                }
                Order::DispatchParallel { task, engine, parts, .. } => {
                    // The master's order stands for every part.
                    if parts.first().is_none_or(|master| master.engine != *engine) {
                        continue;
                    }
                    let Some(key) = state.task_key(task) else { continue };
                    if self.dispatched.insert(key) {
                        *self.dispatched_per_job.entry(key.job).or_default() += 1;
                        for part in parts {
                            if let Some(e) = state.engine_idx(&part.engine) {
                                *self.booked.entry(e).or_default() += part.slots;
                            }
                        }
                    }
                }
                Order::Cancel { task, attempt, .. } | Order::Requeue { task, attempt, .. } => {
                    if let Some(key) = state.task_key(task) {
                        self.ending.insert((key, *attempt));
                    }
                }
                Order::Suspend { task, attempt, .. } | Order::Resume { task, attempt, .. } => {
                    if let Some(key) = state.task_key(task) {
                        self.controlled.insert((key, *attempt));
                    }
                }
                Order::Preempt { task, attempt, .. } => {
                    if let Some(key) = state.task_key(task) {
                        self.ending.insert((key, *attempt));
                        self.controlled.insert((key, *attempt));
                    }
                }
                Order::EngineLost { engine, .. } => {
                    if let Some(e) = state.engine_idx(engine) {
                        self.lost.insert(e);
                    }
                }
                Order::MarkUnschedulable { job, .. } => {
                    if let Some(j) = state.job_idx(job) {
                        self.flagged.insert(j);
                    }
                }
                Order::SyncLibrary { engine, .. } => {
                    if let Some(e) = state.engine_idx(engine) {
                        self.syncing.insert(e);
                    }
                }
                Order::Blacklist { job, engine, .. } => {
                    if let (Some(j), Some(e)) = (state.job_idx(job), state.engine_idx(engine)) {
                        self.blacklisted.insert((j, e));
                    }
                }
                Order::Reschedule { task, .. } => {
                    if let Some(key) = state.task_key(task) {
                        self.rescheduled.insert(key);
                    }
                }
                Order::FailDependent { job, task, .. } => {
                    if let Some(j) = state.job_idx(job) {
                        self.failing.insert((j, *task));
                    }
                }
                Order::FloodRatio { engine, .. } => {
                    if let Some(e) = state.engine_idx(engine) {
                        self.flood_ratio.insert(e);
                    }
                }
                // A test campaign ending ends the whole job, as a failing one does.
                Order::EndTestCampaign { job, .. } => {
                    if let Some(j) = state.job_idx(job) {
                        self.failing.insert((j, None));
                    }
                }
                // The projector's report of a delivery: the attempt stays
                // booked until the fold fails it.
                Order::Undeliverable { .. } => {}
                Order::FlagSink { job, engine, cluster, .. } => {
                    let target = SinkTarget::named(engine.as_ref(), cluster, |id| state.engine_idx(id));
                    if let (Some(j), Some(target)) = (state.job_idx(job), target) {
                        self.sinks_flagged.insert((j, target));
                    }
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.dispatched.is_empty()
            && self.lost.is_empty()
            && self.ending.is_empty()
            && self.controlled.is_empty()
            && self.flagged.is_empty()
            && self.syncing.is_empty()
            && self.blacklisted.is_empty()
            && self.rescheduled.is_empty()
            && self.failing.is_empty()
    }
    pub fn is_dispatched(&self, key: TaskKey) -> bool {
        self.dispatched.contains(&key)
    }
    pub fn dispatched_of_job(&self, job: JobIdx) -> u32 {
        self.dispatched_per_job.get(&job).copied().unwrap_or(0)
    }
    /// Dispatches in flight, by job.
    pub fn dispatched_per_job(&self) -> impl Iterator<Item = (JobIdx, u32)> + '_ {
        self.dispatched_per_job.iter().map(|(&j, &n)| (j, n))
    }
    pub fn booked_slots(&self, engine: EngineIdx) -> u32 {
        self.booked.get(&engine).copied().unwrap_or(0)
    }
    pub fn is_lost(&self, engine: EngineIdx) -> bool {
        self.lost.contains(&engine)
    }
    pub fn sets_flood_ratio(&self, engine: EngineIdx) -> bool {
        self.flood_ratio.contains(&engine)
    }
    pub fn is_ending(&self, key: TaskKey, attempt: Attempt) -> bool {
        self.ending.contains(&(key, attempt))
    }
    pub fn is_controlled(&self, key: TaskKey, attempt: Attempt) -> bool {
        self.controlled.contains(&(key, attempt))
    }
    pub fn is_flagged(&self, job: JobIdx) -> bool {
        self.flagged.contains(&job)
    }
    pub fn is_syncing(&self, engine: EngineIdx) -> bool {
        self.syncing.contains(&engine)
    }
    pub fn is_blacklisted(&self, job: JobIdx, engine: EngineIdx) -> bool {
        self.blacklisted.contains(&(job, engine))
    }
    /// Whether any published `Reschedule` awaits its fold.
    pub fn has_rescheduled(&self) -> bool {
        !self.rescheduled.is_empty()
    }
    /// The tasks whose published `Reschedule` awaits its fold, in key order.
    pub fn rescheduled(&self) -> impl Iterator<Item = TaskKey> + '_ {
        self.rescheduled.iter().copied()
    }
    pub fn is_rescheduled(&self, key: TaskKey) -> bool {
        self.rescheduled.contains(&key)
    }
    pub fn is_failing(&self, job: JobIdx, task: Option<u32>) -> bool {
        self.failing.contains(&(job, task))
    }

    /// Whether a `FlagSink` of this campaign and target is in flight.
    pub fn is_sink_flagged(&self, job: JobIdx, target: &SinkTarget) -> bool {
        self.sinks_flagged.contains(&(job, target.clone()))
    }
}
