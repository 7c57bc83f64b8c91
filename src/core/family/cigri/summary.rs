//! A CiGri campaign as `gridfold stat` shows it (the seed's gridstat): its
//! type, the predictor's figures (whole and per cluster) and its sink flags,
//! and the lines the summary's text gives it under its job.

use super::predictor::{milli_text, predict, Prediction};
use super::sink::{warnings, SinkWarning};
use crate::core::event::Algorithm;
use crate::core::state::{JobIdx, State};
use crate::core::window::secs;

/// A CiGri campaign as `gridfold stat` shows it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct CampaignSummary {
    /// `default` or `test`.
    pub campaign: String,
    /// The predictor over the whole campaign (`cluster` empty).
    pub prediction: Prediction,
    /// The predictor per cluster, by name.
    pub clusters: Vec<Prediction>,
    /// Engines and clusters flagged sinks and excluded.
    pub sinks: Vec<SinkWarning>,
}

impl CampaignSummary {
    /// The campaign's summary, under `cigri` only.
    pub fn of(state: &State, j: JobIdx) -> Option<CampaignSummary> {
        if state.policy.algorithm != Algorithm::Cigri {
            return None;
        }
        let (prediction, clusters) = predict(state, j);
        Some(CampaignSummary {
            campaign: state.job(j).options.campaign.as_str().to_string(),
            prediction,
            clusters,
            sinks: warnings(state, j),
        })
    }

    /// The campaign's predictor and sink lines under its job in the
    /// summary's text, as of log time `now_ms`, each without its line break
    /// (names as given: the front end escapes what a terminal must not see).
    pub fn lines(&self, now_ms: u64) -> Vec<String> {
        let ms = |value: Option<u64>| value.map_or("-".to_string(), secs);
        let mut lines = Vec::with_capacity(1 + self.clusters.len() + self.sinks.len());
        for p in std::iter::once(&self.prediction).chain(&self.clusters) {
            let name =
                if p.cluster.is_empty() { format!("{} campaign", self.campaign) } else { format!("cluster {}", p.cluster) };
            lines.push(format!(
                "  {name}: done {}, {} tasks/h, mean {}, median {}, eta {}",
                p.done,
                milli_text(p.per_hour_milli),
                ms(p.mean_duration_ms),
                ms(p.median_duration_ms),
                p.eta_ms.map_or("-".to_string(), |eta| format!("+{}", secs(eta.saturating_sub(now_ms)))),
            ));
        }
        lines.extend(self.sinks.iter().map(|sink| format!("  WARNING {sink}")));
        lines
    }
}
