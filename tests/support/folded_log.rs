//! The whole log of a test's broker, read back and folded by the test itself: what
//! each entry was, whether the fold took it, and the questions tests ask of it
//! (logins, dispatches, starts, completions, requeues).

use std::collections::{BTreeMap, BTreeSet};

use gridfold::core::event::{Entry, Event, Order, RequeueReason};
use gridfold::core::fold::fold;
use gridfold::core::ids::{Attempt, EngineId, TaskRef};
use gridfold::core::state::State;
use gridfold::wire;

use super::procs::{Cluster, event};

/// The log folded by the test: what each entry was and whether the fold took it.
pub struct Log {
    pub entries: Vec<Entry>,
    /// Sequences of entries the fold rejected (wholly or in part).
    pub rejected: BTreeSet<u64>,
}

impl Log {
    pub fn of(cluster: &Cluster) -> Log {
        let entries = cluster.entries();
        let mut state = State::new();
        let mut rejected = BTreeSet::new();
        for entry in &entries {
            if !fold(&mut state, entry).is_empty() {
                rejected.insert(entry.seq.0);
            }
            state.check_invariants();
        }
        Log { entries, rejected }
    }

    pub fn events(&self) -> impl Iterator<Item = (u64, &Event)> {
        self.entries.iter().filter_map(|e| event(e).map(|ev| (e.seq.0, ev)))
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
                Event::TaskStarted { task, attempt, engine: e } if e.as_str() == engine => {
                    Some((task.clone(), *attempt))
                }
                _ => None,
            })
            .collect()
    }

    /// The completions the fold accepted: task -> attempts.
    pub fn completions(&self) -> BTreeMap<TaskRef, Vec<Attempt>> {
        let mut done: BTreeMap<TaskRef, Vec<Attempt>> = BTreeMap::new();
        for (seq, ev) in self.events() {
            if let Event::TaskCompleted { task, attempt, .. } = ev
                && !self.rejected.contains(&seq)
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

