//! CiGri's sink-effect detection (the seed's "sink effect": jobs that "run"
//! in near 0 seconds on some cluster without exiting with an error).
//!
//! # The rule
//! Once a campaign has at least `sink_min_tasks` successes, an **engine**
//! with at least [`SINK_TASKS_MIN`] successes of it whose median duration is
//! below `sink_ratio_milli` thousandths of the campaign's median is a sink
//! for that campaign; so is a whole **cluster** whose median is.
//!
//! The campaign's median here is the **median over its engines of each
//! engine's median**: every engine counts once, however many tasks it ran, so
//! a sink that "finished" hundreds of tasks in the time a sound engine
//! finished one does not drag the reference down to its own speed (with a
//! median over tasks it would: the sink's tasks would be most of them). A
//! cluster made mostly of sink engines still would; the rule assumes most
//! engines are sound. Medians come from the bounded log-scale histograms of
//! the predictor ([`super::predictor::DurationHistogram`]: a median is the
//! lower edge of its bucket, up to 20 % below the exact one, the same
//! approximation on both sides of the comparison).
//!
//! # When it is evaluated, so that replay re-derives it
//! - **In the fold, O(1) per success**: a success re-evaluates only its own
//!   engine and its cluster (two medians over at most 252 buckets each) and
//!   records them as *suspects* (`Campaign::sink_suspects`), or drops them
//!   from the suspects when they no longer are. The fold decides nothing.
//! - **In a lifecycle stage** ([`flag_sinks`]): each suspect becomes a
//!   `FlagSink` order on the log (engine or cluster, its median and the
//!   campaign's), at most [`FLAGS_PER_RUN_MAX`] per run.
//! - **Read back**, the fold takes the order only if the rule still holds for
//!   that target now, and records the flag (`Campaign::sinks`). From then on
//!   the family's filter refuses the engine (or every engine of the cluster)
//!   to that campaign with the reason `cigri-sink`; `stat` shows the flag and
//!   `why` names it. A flag lasts as long as the campaign.
//!
//! Bounded: at most [`ENGINES_MAX`] engines tracked per campaign (a later one
//! is not judged), [`SUSPECTS_MAX`] suspects and as many flags.

use crate::core::schedule::budget::Orders;
use crate::core::schedule::in_flight::InFlight;
use crate::core::event::{CigriPolicy, Order};
use crate::core::family::cigri::state::Campaign;
pub use crate::core::family::cigri::state::{SinkFlag, SinkTarget};
use crate::core::state::{EngineIdx, Job, JobIdx, JobStatus, State};

/// Successes an engine (or a cluster) needs of a campaign before it is judged.
pub const SINK_TASKS_MIN: u64 = 3;
/// Most engines one campaign tracks durations of.
pub const ENGINES_MAX: usize = 4_096;
/// Most suspects, and most flags, of one campaign.
pub const SUSPECTS_MAX: usize = 256;
/// Most `FlagSink` orders in one run.
pub const FLAGS_PER_RUN_MAX: usize = 256;



/// The policy keys the rule reads.
#[derive(Debug, Clone, Copy)]
pub struct SinkKeys {
    pub ratio_milli: u32,
    pub min_tasks: u32,
}

impl SinkKeys {
    pub fn of(policy: &CigriPolicy) -> SinkKeys {
        SinkKeys { ratio_milli: policy.sink_ratio_milli, min_tasks: policy.sink_min_tasks }
    }
}

/// The target's median and the campaign's, when the rule holds for it now.
pub fn sink_medians(campaign: &Campaign, keys: SinkKeys, target: &SinkTarget) -> Option<(u64, u64)> {
    if keys.ratio_milli == 0 || campaign.predictor.done < u64::from(keys.min_tasks.max(1)) {
        return None;
    }
    let campaign_median_ms = campaign.engine_medians.median_ms()?;
    let histogram = match target {
        SinkTarget::Engine(e) => campaign.engines.get(e)?,
        SinkTarget::Cluster(name) => &campaign.clusters.get(name)?.durations,
    };
    if histogram.n < SINK_TASKS_MIN {
        return None;
    }
    let median_ms = histogram.median_ms()?;
    let threshold_ms = u128::from(campaign_median_ms) * u128::from(keys.ratio_milli) / 1_000;
    (u128::from(median_ms) < threshold_ms).then_some((median_ms, campaign_median_ms))
}

/// Folds one success of the campaign on engine `e` of `cluster` (after the
/// predictor counted it): the engine's durations, then both targets re-judged.
pub(crate) fn note_success(campaign: &mut Campaign, keys: SinkKeys, e: EngineIdx, cluster: &str, duration_ms: u64) {
    if let Some(histogram) = campaign.engines.get_mut(&e) {
        let before = histogram.median_bucket();
        histogram.add(duration_ms);
        let after = histogram.median_bucket();
        // A tracked engine has a median before and after (its histogram
        // counts at least one duration: `DurationHistogram::add_to_bucket`).
        if let (Some(before), Some(after)) = (before, after)
            && before != after
        {
            campaign.engine_medians.remove_from_bucket(before);
            campaign.engine_medians.add_to_bucket(after);
        }
    } else if campaign.engines.len() < ENGINES_MAX {
        let mut histogram = super::predictor::DurationHistogram::default();
        histogram.add(duration_ms);
        if let Some(median) = histogram.median_bucket() {
            campaign.engine_medians.add_to_bucket(median);
            campaign.engines.insert(e, histogram);
        }
    }
    assert!(campaign.engine_medians.n == campaign.engines.len() as u64, "one median per tracked engine");
    for target in [SinkTarget::Engine(e), SinkTarget::Cluster(cluster.to_string())] {
        if campaign.sinks.contains_key(&target) {
            continue;
        }
        match sink_medians(campaign, keys, &target) {
            Some(medians) if campaign.sink_suspects.len() < SUSPECTS_MAX || campaign.sink_suspects.contains_key(&target) => {
                campaign.sink_suspects.insert(target, medians);
            }
            Some(_) => {}
            None => {
                campaign.sink_suspects.remove(&target);
            }
        }
    }
}

/// The target an order names, in the state's terms.
pub fn target_of(state: &State, engine: Option<&crate::core::ids::EngineId>, cluster: &str) -> Option<SinkTarget> {
    SinkTarget::named(engine, cluster, |id| state.engine_idx(id))
}

/// Whether the fold takes a `FlagSink` of `target` for job `j`: an active
/// campaign under `cigri`, the target not flagged yet, and the rule holds now.
pub fn flag_wanted(state: &State, j: JobIdx, target: &SinkTarget) -> Option<(u64, u64)> {
    let job = state.job(j);
    if state.policy.algorithm != crate::core::event::Algorithm::Cigri
        || job.status != JobStatus::Active
        || job.families.cigri.sinks.contains_key(target)
        || job.families.cigri.sinks.len() >= SUSPECTS_MAX
    {
        return None;
    }
    sink_medians(&job.families.cigri, SinkKeys::of(&state.policy.cigri), target)
}

/// Folds an accepted `FlagSink`: the target is excluded for the campaign.
pub(crate) fn flag(state: &mut State, j: JobIdx, target: SinkTarget, medians: (u64, u64)) {
    let at_ms = state.now_ms;
    let campaign = &mut state.job_mut(j).families.cigri;
    campaign.sink_suspects.remove(&target);
    campaign.sinks.insert(target, SinkFlag { median_ms: medians.0, campaign_median_ms: medians.1, at_ms });
}

/// The stage: a `FlagSink` order for each suspect the rule still holds for.
pub fn flag_sinks(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    let mut n_ordered = 0usize;
    for (j, job) in state.jobs_indexed() {
        if job.families.cigri.sink_suspects.is_empty() {
            continue;
        }
        for target in job.families.cigri.sink_suspects.keys() {
            let Some((median_ms, campaign_median_ms)) = flag_wanted(state, j, target) else { continue };
            if in_flight.is_sink_flagged(j, target) {
                continue;
            }
            let (engine, cluster) = match target {
                SinkTarget::Engine(e) => {
                    let engine = state.engine(*e);
                    (Some(engine.id.clone()), super::cluster::cluster_of(engine).to_string())
                }
                SinkTarget::Cluster(name) => (None, name.clone()),
            };
            let order = Order::FlagSink { job: job.id.clone(), engine, cluster, median_ms, campaign_median_ms };
            if n_ordered == FLAGS_PER_RUN_MAX || !orders.push(order) {
                return;
            }
            n_ordered += 1;
        }
    }
}

/// Whether the campaign excludes engine `e` of `cluster` as a sink.
pub fn excluded(job: &Job, e: EngineIdx, cluster: &str) -> bool {
    let sinks = &job.families.cigri.sinks;
    !sinks.is_empty()
        && (sinks.contains_key(&SinkTarget::Engine(e))
            // Clusters sort after engines; at most SUSPECTS_MAX flags, and no name copied per engine asked.
            || sinks
                .range(SinkTarget::Cluster(String::new())..)
                .any(|(target, _)| matches!(target, SinkTarget::Cluster(name) if name == cluster)))
}

/// A flag as a person reads it (`stat`, `why`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SinkWarning {
    /// The engine, or absent for a whole cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    pub cluster: String,
    pub median_ms: u64,
    pub campaign_median_ms: u64,
    pub at_ms: u64,
}

impl std::fmt::Display for SinkWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::core::window::secs;
        match &self.engine {
            Some(engine) => write!(f, "cigri-sink: engine {engine} (cluster {})", display_cluster(&self.cluster))?,
            None => write!(f, "cigri-sink: cluster {}", display_cluster(&self.cluster))?,
        }
        write!(
            f,
            " excluded: its tasks succeed in {} (median) against the campaign's {}",
            secs(self.median_ms),
            secs(self.campaign_median_ms)
        )
    }
}

fn display_cluster(name: &str) -> &str {
    if name.is_empty() { "(unnamed)" } else { name }
}

/// The campaign's flags, engines by id then clusters by name.
pub fn warnings(state: &State, j: JobIdx) -> Vec<SinkWarning> {
    let mut out: Vec<SinkWarning> = state
        .job(j)
        .families
        .cigri
        .sinks
        .iter()
        .map(|(target, flag)| {
            let (engine, cluster) = match target {
                SinkTarget::Engine(e) => {
                    let engine = state.engine(*e);
                    (Some(engine.id.to_string()), super::cluster::cluster_of(engine).to_string())
                }
                SinkTarget::Cluster(name) => (None, name.clone()),
            };
            SinkWarning { engine, cluster, median_ms: flag.median_ms, campaign_median_ms: flag.campaign_median_ms, at_ms: flag.at_ms }
        })
        .collect();
    out.sort_by(|a, b| (a.engine.is_none(), &a.engine, &a.cluster).cmp(&(b.engine.is_none(), &b.engine, &b.cluster)));
    out
}
