//! FBSNG's settings (`FbsngPolicy`, a job's `process_type`) to and from the
//! wire, with their limits ([`crate::core::family::fbsng::check_policy`]):
//! a value outside them does not decode.

use super::{proto, FieldProblem, WireError};
use crate::core::event::{FbsngPolicy, FbsngProcessType, FbsngQueue};
use crate::core::family::fbsng::{self as family, QueueDefaults};

pub(super) fn fbsng_to_proto(fbsng: &FbsngPolicy) -> Option<proto::FbsngPolicy> {
    let message = proto::FbsngPolicy {
        queues: fbsng
            .queues
            .iter()
            .map(|queue| proto::FbsngQueue {
                name: queue.name.clone(),
                qp_min: queue.qp_min,
                qp_max: Some(queue.qp_max),
                qpi: Some(queue.qpi),
                qpd: Some(queue.qpd),
                qpg: Some(queue.qpg),
                spg: Some(queue.spg),
            })
            .collect(),
        process_types: fbsng
            .process_types
            .iter()
            .map(|kind| proto::FbsngProcessType {
                name: kind.name.clone(),
                quota_slots: kind.quota_slots,
                requirements: kind.requirements.clone(),
            })
            .collect(),
        min_run_interval_ms: fbsng.min_run_interval_ms,
    };
    (message != proto::FbsngPolicy::default()).then_some(message)
}

pub(super) fn fbsng(m: Option<proto::FbsngPolicy>) -> Result<FbsngPolicy, WireError> {
    let m = m.unwrap_or_default();
    if m.queues.len() > family::QUEUES_MAX {
        return Err(WireError::at("queues", FieldProblem::Inconsistent(format!("{} queues, more than {}", m.queues.len(), family::QUEUES_MAX))));
    }
    if m.process_types.len() > family::PROCESS_TYPES_MAX {
        let n = m.process_types.len();
        return Err(WireError::at("process_types", FieldProblem::Inconsistent(format!("{n} process types, more than {}", family::PROCESS_TYPES_MAX))));
    }
    let defaults = QueueDefaults::default();
    let policy = FbsngPolicy {
        queues: m
            .queues
            .into_iter()
            .map(|queue| FbsngQueue {
                name: queue.name,
                qp_min: queue.qp_min,
                qp_max: queue.qp_max.unwrap_or(defaults.qp_max),
                qpi: queue.qpi.unwrap_or(defaults.qpi),
                qpd: queue.qpd.unwrap_or(defaults.qpd),
                qpg: queue.qpg.unwrap_or(defaults.qpg),
                spg: queue.spg.unwrap_or(defaults.spg),
            })
            .collect(),
        process_types: m
            .process_types
            .into_iter()
            .map(|kind| FbsngProcessType { name: kind.name, quota_slots: kind.quota_slots, requirements: kind.requirements })
            .collect(),
        min_run_interval_ms: m.min_run_interval_ms,
    };
    family::check_policy(&policy).map_err(|(field, problem)| WireError::at(&field, FieldProblem::Inconsistent(problem)))?;
    Ok(policy)
}

/// Empty, or a name of at most [`family::NAME_BYTES_MAX`] bytes.
pub(super) fn process_type(name: String) -> Result<String, WireError> {
    if name.len() > family::NAME_BYTES_MAX {
        let problem = format!("{} bytes, more than {}", name.len(), family::NAME_BYTES_MAX);
        return Err(WireError::at("process_type", FieldProblem::Inconsistent(problem)));
    }
    Ok(name)
}
