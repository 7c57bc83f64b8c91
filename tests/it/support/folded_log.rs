//! The whole log of a test's broker, read back and folded by the test itself: what
//! each entry was, whether the fold took it, and the questions tests ask of it
//! (logins, dispatches, starts, completions, requeues).

use std::collections::{BTreeMap, BTreeSet};

use gridfold::core::event::{Entry, Event, Order, RequeueReason};
use gridfold::core::fold::{Folded, fold_events};
use gridfold::core::ids::{Attempt, EngineId, TaskRef};
use gridfold::core::state::State;
use gridfold::wire;

use super::procs::{Cluster, event};

/// The log folded by the test: what each entry was and whether the fold took it.
pub struct Log {
    pub entries: Vec<Entry>,
    /// Sequences of entries the fold rejected (wholly or in part).
    pub rejected: BTreeSet<u64>,
    /// Every event (an engine's batch split into its reports) with its entry's
    /// sequence and log time, and whether the fold took it.
    folded: Vec<FoldedEvent>,
}

/// One event of the log, as [`Log`] folded it.
pub struct FoldedEvent {
    pub seq: u64,
    pub time_ms: u64,
    pub event: Event,
    pub accepted: bool,
}

impl Log {
    pub fn of(cluster: &Cluster) -> Log {
        let entries = cluster.stored_entries();
        let mut state = State::new();
        let mut rejected = BTreeSet::new();
        let mut folded = Vec::new();
        for entry in &entries {
            let Folded { rejections, applied, .. } = fold_events(&mut state, entry);
            if !rejections.is_empty() {
                rejected.insert(entry.seq.0);
            }
            for (event, accepted) in entry.events().zip(applied) {
                folded.push(FoldedEvent { seq: entry.seq.0, time_ms: entry.time_ms, event: event.clone(), accepted });
            }
            state.check_invariants();
        }
        Log { entries, rejected, folded }
    }

    /// Every event with its entry's sequence, an engine's batch split into its reports.
    pub fn events(&self) -> impl Iterator<Item = (u64, &Event)> {
        self.folded.iter().map(|folded| (folded.seq, &folded.event))
    }

    /// Every event as folded: with its sequence, time and whether the fold took it.
    pub fn folded(&self) -> &[FoldedEvent] {
        &self.folded
    }

    /// Every order of every batch the projector published, with its batch's sequence.
    pub fn orders(&self) -> impl Iterator<Item = (u64, &Order)> {
        self.entries
            .iter()
            .filter(|e| e.subject == wire::ORDERS_SUBJECT)
            .filter_map(|e| match event(e) {
                Some(Event::OrderBatch(batch)) => Some((e.seq.0, batch)),
                _ => None,
            })
            .flat_map(|(seq, batch)| batch.orders.iter().map(move |order| (seq, order)))
    }

    /// The sequences of `engine`'s logins.
    pub fn logins(&self, engine: &str) -> Vec<u64> {
        self.events()
            .filter(|(_, ev)| matches!(ev, Event::EngineLoggedIn { engine: e, .. } if e.as_str() == engine))
            .map(|(seq, _)| seq)
            .collect()
    }

    /// The attempts dispatched to `engine` in `epoch`.
    pub fn dispatched(&self, engine: &str, epoch: u64) -> BTreeSet<(TaskRef, Attempt)> {
        self.orders()
            .filter_map(|(_, order)| match order {
                Order::Dispatch { task, attempt, engine: e, epoch: ep } if e.as_str() == engine && *ep == epoch => {
                    Some((task.clone(), *attempt))
                }
                _ => None,
            })
            .collect()
    }

    /// Engines `task` was dispatched to after attempt `after`.
    pub fn dispatched_again(&self, task: &TaskRef, after: Attempt) -> Vec<EngineId> {
        self.orders()
            .filter_map(|(_, order)| match order {
                Order::Dispatch { task: t, attempt, engine, .. } if t == task && *attempt > after => Some(engine.clone()),
                _ => None,
            })
            .collect()
    }

    /// `(task, attempt)` reported started by `engine`, accepted or not.
    pub fn started_by(&self, engine: &str) -> BTreeSet<(TaskRef, Attempt)> {
        self.events()
            .filter_map(|(_, ev)| match ev {
                Event::TaskStarted { task, attempt, engine: e, .. } if e.as_str() == engine => {
                    Some((task.clone(), *attempt))
                }
                _ => None,
            })
            .collect()
    }

    /// The completions the fold accepted: task -> attempts.
    pub fn completions(&self) -> BTreeMap<TaskRef, Vec<Attempt>> {
        let mut done: BTreeMap<TaskRef, Vec<Attempt>> = BTreeMap::new();
        for folded in &self.folded {
            if let Event::TaskCompleted { task, attempt, .. } = &folded.event
                && folded.accepted
            {
                done.entry(task.clone()).or_default().push(*attempt);
            }
        }
        done
    }

    /// `EngineRestarted` requeues: (batch sequence, task, attempt, engine).
    pub fn restarted_requeues(&self) -> Vec<(u64, TaskRef, Attempt, EngineId)> {
        self.orders()
            .filter_map(|(seq, order)| match order {
                Order::Requeue { task, attempt, engine, reason: RequeueReason::EngineRestarted } => {
                    Some((seq, task.clone(), *attempt, engine.clone()))
                }
                _ => None,
            })
            .collect()
    }

    pub fn dump(&self) -> String {
        let lines: Vec<String> = self
            .entries
            .iter()
            .map(|e| {
                let what = event(e).map_or("undecodable".to_string(), |ev| format!("{ev:?}"));
                let rejected = if self.rejected.contains(&e.seq.0) { " (rejected)" } else { "" };
                format!("  {} {what}{rejected}", e.seq.0)
            })
            .collect();
        lines.join("\n")
    }
}


/// The entry as the events it holds, each its own entry (same sequence, time,
/// origin and subject): an engine's batch of reports split, for tests that look
/// at events one by one.
pub fn split_reports(entry: gridfold::core::event::Entry) -> Vec<gridfold::core::event::Entry> {
    use gridfold::core::event::{Event, Payload};
    match &entry.payload {
        Payload::Event(envelope) => match &envelope.event {
            Event::EngineReports { reports, .. } => reports
                .iter()
                .map(|report| gridfold::core::event::Entry { payload: Payload::Event(report.clone()), ..entry.clone() })
                .collect(),
            _ => vec![entry],
        },
        Payload::Undecodable { .. } => vec![entry],
    }
}

