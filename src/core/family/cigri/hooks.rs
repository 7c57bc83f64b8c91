//! What CiGri's fold hooks add to a campaign's figures (a test campaign's
//! clusters, the predictor's and the sink rule's counts), and the affinity
//! lookup built from the folded state (see `state.rs`).

use std::collections::{BTreeMap, BTreeSet};

use super::cluster::cluster_of;
use super::state::{AffinityIndex, ClusterAffinity, TESTED_CLUSTERS_MAX};
use crate::core::event::{Algorithm, CampaignType};
use crate::core::ids::{EngineIdx, JobIdx, TaskKey};
use crate::core::state::State;

impl AffinityIndex {
    pub(super) fn build(state: &State) -> AffinityIndex {
        let mut by_cluster: BTreeMap<String, ClusterAffinity> = BTreeMap::new();
        for row in &state.policy.cigri.affinity {
            by_cluster.entry(row.cluster.clone()).or_default().users.insert(row.user.clone());
        }
        for rank in state.runnable_jobs() {
            let job = state.job(rank.job);
            if job.options.campaign != CampaignType::Default {
                continue;
            }
            for cluster in by_cluster.values_mut().filter(|cluster| cluster.users.contains(&job.owner)) {
                cluster.categories.entry(job.category).or_default().push(rank.job);
            }
        }
        let users: BTreeSet<&String> = state.policy.cigri.affinity.iter().map(|row| &row.user).collect();
        let user_classes = users.into_iter().zip(1u64..).map(|(user, class)| (user.clone(), class)).collect();
        AffinityIndex { by_cluster, user_classes }
    }


    /// `None` when no affinity row names `cluster` or `owner` has affinity
    /// for it; else whether a runnable default campaign (other than `j`) of a
    /// user with affinity for it may take engine `e`.
    pub fn other_first(&self, state: &State, cluster: &str, owner: &str, j: JobIdx, e: EngineIdx) -> Option<bool> {
        let affinity = self.by_cluster.get(cluster).filter(|affinity| !affinity.users.contains(owner))?;
        Some(affinity.categories.iter().any(|(&category, jobs)| {
            jobs.iter().any(|&other| other != j) && state.category(category).is_eligible(e)
        }))
    }
}

/// The state's affinity index, built at the first call after a fold.
pub fn affinity_index(state: &State) -> &AffinityIndex {
    state.families.cigri_affinity.get_or_init(|| AffinityIndex::build(state))
}

/// A dispatch of `key` to engine `e` was folded: a test campaign records the cluster.
pub(crate) fn dispatched(state: &mut State, key: TaskKey, e: EngineIdx) {
    if state.job(key.job).options.campaign != CampaignType::Test {
        return;
    }
    let cluster = cluster_of(state.engine(e)).to_string();
    let campaign = &mut state.job_mut(key.job).families.cigri;
    if campaign.tested.contains_key(&cluster)
        || campaign.cluster_of_task(key.index).is_some()
        || campaign.tested.len() >= TESTED_CLUSTERS_MAX
    {
        return;
    }
    campaign.tested.insert(cluster, key.index);
}

/// The first result of task `key` was folded (a success, its attempt on
/// engine `e` started at `started_ms`): under `cigri`, the predictor and the
/// sink rule count it. O(1): a few map updates and medians over bounded
/// histograms.
pub(crate) fn completed(state: &mut State, key: TaskKey, e: EngineIdx, started_ms: u64) {
    if state.policy.algorithm != Algorithm::Cigri {
        return;
    }
    let now_ms = state.now_ms;
    let duration_ms = crate::core::window::elapsed_ms(now_ms, started_ms);
    let cluster = cluster_of(state.engine(e)).to_string();
    let keys = crate::core::family::cigri::sink::SinkKeys::of(&state.policy.cigri);
    let window_ms = state.policy.cigri.predictor_window_ms;
    let campaign = &mut state.job_mut(key.job).families.cigri;
    crate::core::family::cigri::predictor::add(campaign, &cluster, now_ms, duration_ms, window_ms);
    crate::core::family::cigri::sink::note_success(campaign, keys, e, &cluster, duration_ms);
}
