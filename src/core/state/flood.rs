//! Flood control's folded state (see [`crate::core::schedule::flood`]): each
//! gateway engine's job ratio and when it was last set. Only `fold` changes it,
//! from the `FloodRatio` orders it reads back; `schedule` only reads it.
//!
//! Bounded: one entry per engine id that a `FloodRatio` named, and the fold
//! applies one only to a known engine; an entry goes when its engine is
//! forgotten with the rest of it (engines are never removed today).



use crate::core::ids::EngineId;
use std::collections::BTreeMap;

/// One gateway's ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GatewayRatio {
    /// Thousandths of a task per slot: the gateway may hold `ratio_milli ×
    /// slots / 1000` slots of unstarted tasks (at least one task).
    pub ratio_milli: u32,
    /// Log time of the `FloodRatio` that set it.
    pub set_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FloodState {
    /// By engine id (ids, not indexes: the ratio outlives a logout).
    pub ratios: BTreeMap<EngineId, GatewayRatio>,
}

impl FloodState {
    pub fn ratio_of(&self, engine: &EngineId) -> Option<GatewayRatio> {
        self.ratios.get(engine).copied()
    }

    /// A `FloodRatio` order was read back.
    pub(crate) fn set(&mut self, engine: &EngineId, ratio_milli: u32, now_ms: u64) {
        assert!(ratio_milli > 0, "a flood ratio is positive");
        self.ratios.insert(engine.clone(), GatewayRatio { ratio_milli, set_ms: now_ms });
    }
}
