//! Flood control's policy (`FloodPolicy`) and order (`FloodRatio`) to and
//! from the wire, with their limits ([`crate::core::schedule::flood::check_policy`]):
//! a value outside them does not decode.

use super::fields::{engine_id, known_enum};
use super::{proto, FieldProblem, WireError};
use crate::core::event::{FloodAlgorithm, FloodPolicy, FloodReason, Order};
use crate::core::schedule::flood as family;

pub(super) fn flood_to_proto(flood: &Option<FloodPolicy>) -> Option<proto::FloodPolicy> {
    let flood = flood.as_ref()?;
    Some(proto::FloodPolicy {
        algorithm: algorithm_to_proto(flood.algorithm) as i32,
        interval_ms: flood.interval_ms,
        ratio_max_milli: flood.ratio_max_milli,
        waiting_allowed: flood.waiting_allowed,
        waiting_grace_ms: flood.waiting_grace_ms,
        remote_queue_timeout_ms: flood.remote_queue_timeout_ms,
        ratio_start_milli: flood.ratio_start_milli,
    })
}

/// Absent: off. Zeros take the defaults (`remote_queue_timeout_ms` 0 is "never",
/// `waiting_allowed` 0 is none, both the defaults).
pub(super) fn flood(m: Option<proto::FloodPolicy>) -> Result<Option<FloodPolicy>, WireError> {
    let Some(m) = m else { return Ok(None) };
    let defaults = FloodPolicy::default();
    let or = |value: u64, default: u64| if value == 0 { default } else { value };
    let algorithm = match known_enum::<proto::FloodAlgorithm>("algorithm", m.algorithm)? {
        proto::FloodAlgorithm::Unspecified => return Err(super::fields::unspecified::<proto::FloodAlgorithm>("algorithm")),
        proto::FloodAlgorithm::SlowStart => FloodAlgorithm::SlowStart,
        proto::FloodAlgorithm::TwoWayAdaptive => FloodAlgorithm::TwoWayAdaptive,
        proto::FloodAlgorithm::AdaptiveDownExponentialUp => FloodAlgorithm::AdaptiveDownExponentialUp,
    };
    let policy = FloodPolicy {
        algorithm,
        interval_ms: or(m.interval_ms, defaults.interval_ms),
        ratio_max_milli: or(u64::from(m.ratio_max_milli), u64::from(defaults.ratio_max_milli)).min(u64::from(u32::MAX)) as u32,
        ratio_start_milli: or(u64::from(m.ratio_start_milli), u64::from(defaults.ratio_start_milli)).min(u64::from(u32::MAX)) as u32,
        waiting_allowed: m.waiting_allowed,
        waiting_grace_ms: or(m.waiting_grace_ms, defaults.waiting_grace_ms),
        remote_queue_timeout_ms: m.remote_queue_timeout_ms,
    };
    family::check_policy(&policy).map_err(|(field, problem)| WireError::at(&field, FieldProblem::Inconsistent(problem)))?;
    Ok(Some(policy))
}

fn algorithm_to_proto(algorithm: FloodAlgorithm) -> proto::FloodAlgorithm {
    match algorithm {
        FloodAlgorithm::SlowStart => proto::FloodAlgorithm::SlowStart,
        FloodAlgorithm::TwoWayAdaptive => proto::FloodAlgorithm::TwoWayAdaptive,
        FloodAlgorithm::AdaptiveDownExponentialUp => proto::FloodAlgorithm::AdaptiveDownExponentialUp,
    }
}

pub(super) fn flood_ratio_to_proto(engine: &str, ratio_milli: u32, waiting: u32, reason: FloodReason) -> proto::FloodRatio {
    let reason = match reason {
        FloodReason::Start => proto::FloodReason::Start,
        FloodReason::Up => proto::FloodReason::Up,
        FloodReason::Down => proto::FloodReason::Down,
    };
    proto::FloodRatio { engine: engine.to_string(), ratio_milli, waiting, reason: reason as i32 }
}

pub(super) fn flood_ratio(m: proto::FloodRatio) -> Result<Order, WireError> {
    let reason = match known_enum::<proto::FloodReason>("reason", m.reason)? {
        proto::FloodReason::Unspecified => return Err(super::fields::unspecified::<proto::FloodReason>("reason")),
        proto::FloodReason::Start => FloodReason::Start,
        proto::FloodReason::Up => FloodReason::Up,
        proto::FloodReason::Down => FloodReason::Down,
    };
    Ok(Order::FloodRatio { engine: engine_id("engine", &m.engine)?, ratio_milli: m.ratio_milli, waiting: m.waiting, reason })
}
