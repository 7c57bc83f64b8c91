//! What `why` says of the reservation rule for a waiting task, from a
//! dispatch run over the state (see `reservation.rs`): above the dispatch
//! loop, which books reservations.

use super::reservation::end_from;
use crate::core::state::{State, TaskKey};

/// What `why` says about reservations for a waiting task.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "rule", rename_all = "snake_case")]
pub enum ReservationWhy {
    /// The task holds a reservation: its slots per engine, and when they are
    /// expected free (log time, ms).
    Holds { parts: Vec<(String, u32)>, start_ms: u64, now_ms: u64 },
    /// The task could take free slots an earlier task reserved, but its own
    /// end (its wall-time limit, or `default_duration`) comes after the
    /// reservation starts.
    HeldOff { by: String, engine: String, start_ms: u64, end_ms: u64, now_ms: u64 },
}

/// Seconds from `now` to `t`, as a person reads them.
fn after(now: u64, t: u64) -> String {
    match t.saturating_sub(now) {
        u64::MAX => "never".into(),
        ms => format!("in {}.{} s", ms / 1000, ms % 1000 / 100),
    }
}

impl std::fmt::Display for ReservationWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReservationWhy::Holds { parts, start_ms, now_ms } => {
                let slots: u32 = parts.iter().map(|(_, slots)| slots).fold(0, |a, b| a.saturating_add(*b));
                let named: Vec<String> = parts.iter().map(|(engine, slots)| format!("{engine}: {slots}")).collect();
                write!(f, "reserved {slots} slots on {}, expected start at log time {start_ms} ({})", named.join(", "), after(*now_ms, *start_ms))
            }
            ReservationWhy::HeldOff { by, engine, start_ms, end_ms, now_ms } => write!(
                f,
                "waiting for a reservation: {by} reserves {engine}'s slots from log time {start_ms} ({}); my limit ends at {end_ms} ({})",
                after(*now_ms, *start_ms),
                after(*now_ms, *end_ms)
            ),
        }
    }
}

/// The reservation rule's answer for a waiting task, from a dispatch run
/// over the state (the run itself, so `why` cannot disagree with it).
pub fn why(state: &State, key: TaskKey) -> Option<ReservationWhy> {
    let reservations = super::dispatch::reservations_now(state);
    let now_ms = state.now_ms;
    if let Some(mine) = reservations.iter().find(|r| r.key == key) {
        let parts = mine.parts.iter().map(|&(e, slots)| (state.engine(e).id.to_string(), slots)).collect();
        return Some(ReservationWhy::Holds { parts, start_ms: mine.start_ms, now_ms });
    }
    let job = state.job(key.job);
    let end_ms = end_from(state, job, now_ms);
    let category = state.category(job.condition(key.index).and_then(|c| c.category).unwrap_or(job.category));
    let rules = super::filters::TaskRules::new(state, key);
    let needs = super::parallel::slots_per_engine(job.slots_per_task, job.options.span);
    for r in &reservations {
        for &(e, _) in &r.parts {
            let engine = state.engine(e);
            let room = engine.free_slots() >= needs;
            if end_ms > r.start_ms && room && category.is_eligible(e) && rules.check(e).is_ok() {
                let by = state.task_ref(r.key).to_string();
                return Some(ReservationWhy::HeldOff { by, engine: engine.id.to_string(), start_ms: r.start_ms, end_ms, now_ms });
            }
        }
    }
    None
}
