//! Operators' controls and the suspend thresholds' suspensions, as the state
//! holds them (see `suspension.rs` and `thresholds.rs`).

use crate::core::event::Control;
use crate::core::ids::{Attempt, EngineIdx, TaskKey};
use std::collections::BTreeMap;

/// The state of operators' controls. See the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Suspensions {
    /// Live attempts whose request awaits its order.
    pub(crate) requested: BTreeMap<(TaskKey, Attempt), Control>,
    /// Suspended live attempts, with the log time their Suspend was folded.
    pub(crate) suspended: BTreeMap<(TaskKey, Attempt), u64>,
    /// Attempts preempted over the whole history.
    pub preempted: u64,
    /// Suspended attempts the suspend-threshold rule suspended, with why (see `state/thresholds.rs`).
    pub(crate) by_threshold: BTreeMap<(TaskKey, Attempt), ThresholdCause>,
    /// Each engine's current suspend interval.
    pub(crate) threshold_windows: BTreeMap<EngineIdx, ThresholdWindow>,
}

impl Suspensions {
    pub(super) fn is_empty(&self) -> bool {
        *self == Suspensions::default()
    }
}

/// Why the threshold rule suspended an attempt: the load value, its value
/// then and its threshold, in milli-units.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ThresholdCause {
    pub name: String,
    pub value_milli: i64,
    pub threshold_milli: i64,
}

impl std::fmt::Display for ThresholdCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} is {}, threshold {}", self.name, milli_text(self.value_milli), milli_text(self.threshold_milli))
    }
}

/// A milli-unit value as a person reads it: 2100 -> "2.10", -50 -> "-0.05".
pub fn milli_text(milli: i64) -> String {
    let sign = if milli < 0 { "-" } else { "" };
    let magnitude = milli.unsigned_abs();
    format!("{sign}{}.{:02}", magnitude / 1000, (magnitude % 1000) / 10)
}

/// An engine's current interval: when it began and how many threshold orders
/// took effect in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ThresholdWindow {
    pub start_ms: u64,
    pub n_actions: u32,
}
