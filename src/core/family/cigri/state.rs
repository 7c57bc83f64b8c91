//! CiGri's folded campaign state (`algorithm = "cigri"`, see
//! [`crate::core::family::cigri`]): what a campaign's orders, read back,
//! leave behind. Only `fold` changes it; `schedule` only reads it.
//!
//! Bounded: a test campaign records at most
//! [`crate::core::family::cigri::TESTED_CLUSTERS_MAX`] clusters (the filter
//! refuses a new one past that). The predictor's and the sink rule's figures
//! are bounded as their modules say (`family::cigri::predictor`,
//! `family::cigri::sink`). A finalized task is the state's racing copy
//! (`State::add_racing_copy`), not a figure of the campaign's.

use std::collections::{BTreeMap, BTreeSet};

use crate::core::state::{EngineIdx, State, TaskKey};
use crate::core::event::{Algorithm, CampaignType};
use crate::core::family::cigri::predictor::{DurationHistogram, Figures};
pub use crate::core::family::cigri::sink::{SinkFlag, SinkTarget};

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
    by_cluster: BTreeMap<String, ClusterAffinity>,
    /// The users the affinity rows name, numbered from 1 in name order: a
    /// campaign's class for the filter (0: its owner has no affinity).
    user_classes: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default)]
struct ClusterAffinity {
    users: BTreeSet<String>,
    categories: BTreeMap<crate::core::state::CategoryIdx, Vec<crate::core::state::JobIdx>>,
}

impl AffinityIndex {
    fn build(state: &State) -> AffinityIndex {
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

    /// The affinity filter's class of the campaigns of `owner`: every
    /// campaign of one owner gets the same verdict on each engine.
    pub fn owner_class(&self, owner: &str) -> u64 {
        self.user_classes.get(owner).copied().unwrap_or(0)
    }

    /// `None` when no affinity row names `cluster` or `owner` has affinity
    /// for it; else whether a runnable default campaign (other than `j`) of a
    /// user with affinity for it may take engine `e`.
    pub fn other_first(&self, state: &State, cluster: &str, owner: &str, j: crate::core::state::JobIdx, e: EngineIdx) -> Option<bool> {
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
    let cluster = crate::core::family::cigri::cluster_of(state.engine(e)).to_string();
    let campaign = &mut state.job_mut(key.job).families.cigri;
    if campaign.tested.contains_key(&cluster)
        || campaign.cluster_of_task(key.index).is_some()
        || campaign.tested.len() >= crate::core::family::cigri::TESTED_CLUSTERS_MAX
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
    let cluster = crate::core::family::cigri::cluster_of(state.engine(e)).to_string();
    let keys = crate::core::family::cigri::sink::SinkKeys::of(&state.policy.cigri);
    let window_ms = state.policy.cigri.predictor_window_ms;
    let campaign = &mut state.job_mut(key.job).families.cigri;
    crate::core::family::cigri::predictor::add(campaign, &cluster, now_ms, duration_ms, window_ms);
    crate::core::family::cigri::sink::note_success(campaign, keys, e, &cluster, duration_ms);
}
