//! CiGri's settings (`CigriPolicy`, a job's `campaign`) to and from the wire,
//! with their limits ([`crate::core::family::cigri::check_policy`]): a value
//! outside them does not decode.

use super::fields::known_enum;
use super::{proto, FieldProblem, WireError};
use crate::core::event::{CampaignType, CigriAffinity, CigriPolicy};
use crate::core::family::cigri as family;

pub(super) fn cigri_to_proto(cigri: &CigriPolicy) -> Option<proto::CigriPolicy> {
    if *cigri == CigriPolicy::default() {
        return None;
    }
    Some(proto::CigriPolicy {
        affinity: cigri
            .affinity
            .iter()
            .map(|row| proto::CigriAffinity { user: row.user.clone(), cluster: row.cluster.clone() })
            .collect(),
        finalize_copies_max: Some(cigri.finalize_copies_max),
        sink_ratio_milli: Some(cigri.sink_ratio_milli),
        sink_min_tasks: Some(cigri.sink_min_tasks),
        predictor_window_ms: cigri.predictor_window_ms,
    })
}

pub(super) fn cigri(m: Option<proto::CigriPolicy>) -> Result<CigriPolicy, WireError> {
    let m = m.unwrap_or_default();
    if m.affinity.len() > family::AFFINITIES_MAX {
        let problem = format!("{} affinities, more than {}", m.affinity.len(), family::AFFINITIES_MAX);
        return Err(WireError::at("affinity", FieldProblem::Inconsistent(problem)));
    }
    let defaults = CigriPolicy::default();
    let policy = CigriPolicy {
        affinity: m.affinity.into_iter().map(|row| CigriAffinity { user: row.user, cluster: row.cluster }).collect(),
        finalize_copies_max: m.finalize_copies_max.unwrap_or(defaults.finalize_copies_max),
        sink_ratio_milli: m.sink_ratio_milli.unwrap_or(defaults.sink_ratio_milli),
        sink_min_tasks: m.sink_min_tasks.unwrap_or(defaults.sink_min_tasks),
        predictor_window_ms: if m.predictor_window_ms == 0 { defaults.predictor_window_ms } else { m.predictor_window_ms },
    };
    family::check_policy(&policy).map_err(|(field, problem)| WireError::at(&field, FieldProblem::Inconsistent(problem)))?;
    Ok(policy)
}

pub(super) fn campaign_to_proto(campaign: CampaignType) -> i32 {
    match campaign {
        CampaignType::Default => proto::Campaign::Unspecified as i32,
        CampaignType::Test => proto::Campaign::Test as i32,
    }
}

/// An absent or known campaign type; another number does not decode.
pub(super) fn campaign(value: i32) -> Result<CampaignType, WireError> {
    Ok(match known_enum::<proto::Campaign>("campaign", value)? {
        proto::Campaign::Unspecified | proto::Campaign::Default => CampaignType::Default,
        proto::Campaign::Test => CampaignType::Test,
    })
}
