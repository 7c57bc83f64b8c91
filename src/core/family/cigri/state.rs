//! CiGri's folded campaign state (`algorithm = "cigri"`, see
//! [`crate::core::family::cigri`]): what a campaign's orders, read back,
//! leave behind. Only `fold` changes it; `schedule` only reads it.
//!
//! Bounded: a test campaign records at most
//! [`TESTED_CLUSTERS_MAX`] clusters (the filter
//! refuses a new one past that). The predictor's and the sink rule's figures
//! are bounded as their modules say (`family::cigri::predictor`,
//! `family::cigri::sink`). A finalized task is the state's racing copy
//! (`State::add_racing_copy`), not a figure of the campaign's.

use std::collections::{BTreeMap, BTreeSet};

use crate::core::ids::{CategoryIdx, EngineId, EngineIdx, JobIdx};
use super::figures::{DurationHistogram, Figures};

/// Most clusters one test campaign records (the filter refuses a new one past it).
pub const TESTED_CLUSTERS_MAX: usize = 1_024;

/// A campaign's own figures, on its job (`Job::cigri`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Campaign {
    /// A test campaign: each cluster a task of it was dispatched to, with that
    /// task's index (its retries stay on that cluster).
    pub tested: BTreeMap<String, u32>,
    /// The predictor's figures of the whole campaign (`family::cigri::predictor`).
    #[serde(default)]
    pub predictor: Figures,
    /// The predictor's figures per cluster, by name (at most `predictor::CLUSTERS_MAX`).
    #[serde(default)]
    pub clusters: BTreeMap<String, Figures>,
    /// Durations of the campaign's successes per engine, for the sink rule
    /// (at most `sink::ENGINES_MAX`).
    #[serde(default)]
    pub engines: BTreeMap<EngineIdx, DurationHistogram>,
    /// Each tracked engine's median bucket, counted once per engine: the
    /// sink rule's reference (the median over engines of their medians).
    #[serde(default)]
    pub engine_medians: DurationHistogram,
    /// Engines or clusters the sink rule holds suspect, not yet flagged by an
    /// order: their median and the campaign's then (at most `sink::SUSPECTS_MAX`).
    #[serde(default)]
    pub sink_suspects: BTreeMap<SinkTarget, (u64, u64)>,
    /// Engines or clusters flagged by a `FlagSink` order: excluded for this campaign.
    #[serde(default)]
    pub sinks: BTreeMap<SinkTarget, SinkFlag>,
}

impl Campaign {
    /// The cluster the test task `index` is tied to, if it went to one.
    pub fn cluster_of_task(&self, index: u32) -> Option<&str> {
        self.tested.iter().find(|(_, task)| **task == index).map(|(cluster, _)| cluster.as_str())
    }
}

/// The affinity filter's lookup, built once per folded state (at its first
/// use after a fold, which clears it: `State::cigri_affinity`): for each
/// cluster an affinity row names, the users with affinity for it, and the
/// categories of the runnable default campaigns of those users, each with its
/// campaigns. So the filter asks at most one bitset per category of those
/// campaigns, instead of walking every runnable campaign per engine.
#[derive(Debug, Clone, Default)]
pub struct AffinityIndex {
    pub(super) by_cluster: BTreeMap<String, ClusterAffinity>,
    /// The users the affinity rows name, numbered from 1 in name order: a
    /// campaign's class for the filter (0: its owner has no affinity).
    pub(super) user_classes: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default)]
pub(super) struct ClusterAffinity {
    pub(super) users: BTreeSet<String>,
    pub(super) categories: BTreeMap<CategoryIdx, Vec<JobIdx>>,
}

impl AffinityIndex {
    /// The affinity filter's class of the campaigns of `owner`: every
    /// campaign of one owner gets the same verdict on each engine.
    pub fn owner_class(&self, owner: &str) -> u64 {
        self.user_classes.get(owner).copied().unwrap_or(0)
    }
}

/// What the sink rule is judged on: one engine, or every engine of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum SinkTarget {
    Engine(EngineIdx),
    Cluster(String),
}

impl SinkTarget {
    /// The target a `FlagSink` order names: its engine, by the index
    /// `engine_idx` finds for it (none when the state does not know it), or,
    /// when it names no engine, its cluster.
    pub fn named(
        engine: Option<&EngineId>,
        cluster: &str,
        engine_idx: impl FnOnce(&EngineId) -> Option<EngineIdx>,
    ) -> Option<SinkTarget> {
        match engine {
            Some(engine) => engine_idx(engine).map(SinkTarget::Engine),
            None => Some(SinkTarget::Cluster(cluster.to_string())),
        }
    }
}

/// A flagged sink: its median and the campaign's when the order was folded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SinkFlag {
    pub median_ms: u64,
    pub campaign_median_ms: u64,
    /// Log time of the flag.
    pub at_ms: u64,
}
