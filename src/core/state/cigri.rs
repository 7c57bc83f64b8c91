//! CiGri's folded campaign state (`algorithm = "cigri"`, see
//! [`crate::core::schedule::cigri`]): what a campaign's orders, read back,
//! leave behind. Only `fold` changes it; `schedule` only reads it.
//!
//! Bounded: a test campaign records at most
//! [`crate::core::schedule::cigri::TESTED_CLUSTERS_MAX`] clusters (the filter
//! refuses a new one past that), and the finalized tasks are a subset of the
//! job's tasks.

use std::collections::{BTreeMap, BTreeSet};

use super::{EngineIdx, State, TaskKey};
use crate::core::event::CampaignType;

/// A campaign's own figures, on its job (`Job::cigri`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Campaign {
    /// A test campaign: each cluster a task of it was dispatched to, with that
    /// task's index (its retries stay on that cluster).
    pub tested: BTreeMap<String, u32>,
    /// Tasks given a finalize copy: their first result cancels the other attempts.
    pub finalized: BTreeSet<u32>,
}

impl Campaign {
    /// The cluster the test task `index` is tied to, if it went to one.
    pub fn cluster_of_task(&self, index: u32) -> Option<&str> {
        self.tested.iter().find(|(_, task)| **task == index).map(|(cluster, _)| cluster.as_str())
    }
}

/// A dispatch of `key` to engine `e` was folded: a test campaign records the cluster.
pub(crate) fn dispatched(state: &mut State, key: TaskKey, e: EngineIdx) {
    if state.job(key.job).options.campaign != CampaignType::Test {
        return;
    }
    let cluster = crate::core::schedule::cigri::cluster_of(state.engine(e)).to_string();
    let campaign = &mut state.job_mut(key.job).cigri;
    if campaign.tested.contains_key(&cluster)
        || campaign.cluster_of_task(key.index).is_some()
        || campaign.tested.len() >= crate::core::schedule::cigri::TESTED_CLUSTERS_MAX
    {
        return;
    }
    campaign.tested.insert(cluster, key.index);
}
