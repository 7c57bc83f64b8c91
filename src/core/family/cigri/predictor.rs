//! CiGri's predictor (the seed's Spritz): per campaign and per cluster, the
//! throughput, the mean task duration and the estimated end time.
//!
//! Folded state (`family::cigri::state::Campaign::predictor` and `clusters`), so a
//! replay agrees; `stat` shows it and its query returns it. Each successful
//! task (its first result; a finalize copy's later result does not count)
//! adds, under `algorithm = "cigri"`:
//! - one to a [`WindowCounts`] ring over the policy's `predictor_window_ms`
//!   of log time: the **throughput** is the tasks in the window per hour of
//!   log time the window covers (no more than the campaign has lived);
//! - its **duration**, log time from the start of the attempt that won (its
//!   dispatch when it never reported a start) to its result, to a sum (the
//!   exact mean) and to a [`DurationHistogram`] (the approximate median the
//!   sink rule reads, see [`super::sink`]).
//!
//! The **estimated end** (ETA) is log time now plus the tasks not ended
//! (waiting, dispatched, running) at the window's rate:
//! `now + remaining × covered_ms / in_window`. Unknown (`None`) before the
//! first success or when the window holds none.
//!
//! Bounded: one ring of [`crate::core::window::SLOTS`] counts and a sparse
//! histogram of at most [`BUCKETS`] buckets per campaign and per cluster; at
//! most [`CLUSTERS_MAX`] clusters per campaign (a later one goes untracked).
//! Integers throughout: milli-tasks per hour, ms.

use crate::core::state::{JobIdx, State};
use crate::core::window::elapsed_ms;
pub use super::figures::{DurationHistogram, Figures, BUCKETS};

/// Most clusters one campaign keeps figures for.
pub const CLUSTERS_MAX: usize = 1_024;

/// The predictor's view of a campaign or a cluster of it, as `stat` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Prediction {
    /// `""` for the whole campaign; else the cluster.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    pub done: u64,
    /// Tasks per hour over the window, in thousandths.
    pub per_hour_milli: u64,
    pub mean_duration_ms: Option<u64>,
    /// Approximate median (see [`DurationHistogram`]).
    pub median_duration_ms: Option<u64>,
    /// Estimated end (log time); for a cluster, when it would end the
    /// campaign's remaining tasks alone.
    pub eta_ms: Option<u64>,
}

fn prediction(figures: &Figures, cluster: &str, now_ms: u64, lived_ms: u64, remaining: u64, active: bool) -> Prediction {
    Prediction {
        cluster: cluster.to_string(),
        done: figures.done,
        per_hour_milli: figures.per_hour_milli(now_ms, lived_ms),
        mean_duration_ms: figures.mean_ms(),
        median_duration_ms: figures.durations.median_ms(),
        eta_ms: if active { figures.eta_ms(now_ms, lived_ms, remaining) } else { None },
    }
}

/// The campaign's prediction, then one per cluster (by name).
pub fn predict(state: &State, j: JobIdx) -> (Prediction, Vec<Prediction>) {
    let job = state.job(j);
    let now_ms = state.now_ms;
    let lived_ms = elapsed_ms(job.ended_ms.unwrap_or(now_ms), job.submitted_ms).max(1);
    let counts = &job.counts;
    let remaining = u64::from(counts.waiting) + u64::from(counts.dispatched) + u64::from(counts.running);
    let active = job.is_active();
    let campaign = &job.families.cigri;
    let whole = prediction(&campaign.predictor, "", now_ms, lived_ms, remaining, active);
    let clusters =
        campaign.clusters.iter().map(|(name, figures)| prediction(figures, name, now_ms, lived_ms, remaining, active)).collect();
    (whole, clusters)
}

/// Folds one success of task `key` on a cluster (`family::cigri::state::completed` calls it).
pub(crate) fn add(campaign: &mut crate::core::family::cigri::state::Campaign, cluster: &str, now_ms: u64, duration_ms: u64, window_ms: u64) {
    campaign.predictor.add(now_ms, duration_ms, window_ms);
    if let Some(figures) = campaign.clusters.get_mut(cluster) {
        figures.add(now_ms, duration_ms, window_ms);
    } else if campaign.clusters.len() < CLUSTERS_MAX {
        let mut figures = Figures::default();
        figures.add(now_ms, duration_ms, window_ms);
        campaign.clusters.insert(cluster.to_string(), figures);
    }
}

/// Thousandths as a person reads them: `12`, `12.5`, `0.25`.
pub fn milli_text(milli: u64) -> String {
    let (whole, frac) = (milli / 1000, milli % 1000);
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:03}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_contiguous_and_the_median_is_a_lower_edge() {
        let mut previous = 0u8;
        for ms in 0..100_000u64 {
            let bucket = DurationHistogram::bucket_of(ms);
            assert!(bucket == previous || bucket == previous + 1, "{ms}");
            assert!(DurationHistogram::lower_edge_ms(bucket) <= ms);
            assert!(ms * 4 < DurationHistogram::lower_edge_ms(bucket) * 5 + 4, "{ms}: a bucket is at most 25 % wide");
            previous = bucket;
        }
        assert_eq!(usize::from(DurationHistogram::bucket_of(u64::MAX)) + 1, BUCKETS);
        let mut histogram = DurationHistogram::default();
        assert_eq!(histogram.median_ms(), None);
        for ms in [100, 1_000, 1_000, 1_000, 50_000] {
            histogram.add(ms);
        }
        assert_eq!(histogram.median_ms(), Some(896), "1,000 ms lies in the bucket from 896 ms");
    }

    #[test]
    fn a_full_bucket_counts_no_more_and_the_median_stays_defined() {
        let mut histogram = DurationHistogram::default();
        histogram.add(u64::MAX);
        histogram.add(0);
        assert_eq!(histogram.n, 2);
        assert_eq!(histogram.median_bucket(), Some(0));
        // A bucket at u32::MAX: one more duration there changes nothing.
        histogram.buckets.insert(5, u32::MAX);
        histogram.n = u64::from(u32::MAX) + 2;
        histogram.add(5);
        assert_eq!(histogram.n, u64::from(u32::MAX) + 2, "n stays the buckets' sum");
        assert_eq!(histogram.median_bucket(), Some(5));
        // Removing from an empty bucket changes nothing.
        histogram.remove_from_bucket(100);
        assert_eq!(histogram.n, u64::from(u32::MAX) + 2);
    }

    #[test]
    fn figures_give_rate_mean_and_eta_in_integers() {
        let mut figures = Figures::default();
        assert_eq!(figures.eta_ms(1_000, 1_000, 10), None);
        // An hour's window; 6 tasks of 10 s in the first 10 minutes.
        for at in 1..=6u64 {
            figures.add(at * 100_000, 10_000, 3_600_000);
        }
        assert_eq!(figures.mean_ms(), Some(10_000));
        // Lived 600 s: 6 tasks in 600 s is 36 per hour.
        assert_eq!(figures.per_hour_milli(600_000, 600_000), 36_000);
        // 12 more at 100 s each: 1,200 s from now.
        assert_eq!(figures.eta_ms(600_000, 600_000, 12), Some(1_800_000));
        assert_eq!(milli_text(36_000), "36");
        assert_eq!(milli_text(2_500), "2.5");
    }
}
