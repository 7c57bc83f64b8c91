//! Techila's settings (`TechilaPolicy`, a job's `project_priority`) to and
//! from the wire, with their limits: a value outside them does not decode.

use super::{proto, FieldProblem, WireError};
use crate::core::event::TechilaPolicy;
use crate::core::family::techila::cycle::CYCLE_INTERVAL_MS_MAX;
use crate::core::family::techila::{PRIORITY_LOWEST, PRIORITY_HIGHEST};

pub(super) fn techila_to_proto(techila: &TechilaPolicy) -> Option<proto::TechilaPolicy> {
    let message = proto::TechilaPolicy {
        max_running_tasks: techila.max_running_tasks,
        simultaneous_projects: techila.simultaneous_projects,
        user_priorities: techila
            .user_priorities
            .iter()
            .map(|(name, &amount)| proto::NamedAmount { name: name.clone(), amount })
            .collect(),
        cycle_interval_ms: techila.cycle_interval_ms,
    };
    (message != proto::TechilaPolicy::default()).then_some(message)
}

pub(super) fn techila(m: Option<proto::TechilaPolicy>) -> Result<TechilaPolicy, WireError> {
    let m = m.unwrap_or_default();
    let user_priorities = super::sge::named_amounts("user_priorities", m.user_priorities)?;
    for (name, &priority) in &user_priorities {
        if !(PRIORITY_HIGHEST..=PRIORITY_LOWEST).contains(&priority) {
            return Err(WireError::at(
                "user_priorities",
                FieldProblem::Inconsistent(format!(
                    "user {name}: priority {priority}, not within {PRIORITY_HIGHEST}..={PRIORITY_LOWEST}"
                )),
            ));
        }
    }
    if m.cycle_interval_ms > CYCLE_INTERVAL_MS_MAX {
        return Err(WireError::at(
            "cycle_interval_ms",
            FieldProblem::Inconsistent(format!("{} ms, more than {CYCLE_INTERVAL_MS_MAX}", m.cycle_interval_ms)),
        ));
    }
    Ok(TechilaPolicy {
        cycle_interval_ms: m.cycle_interval_ms,
        max_running_tasks: m.max_running_tasks,
        simultaneous_projects: m.simultaneous_projects,
        user_priorities,
    })
}

/// 0 (absent) or 1 to 7.
pub(super) fn project_priority(priority: u32) -> Result<u32, WireError> {
    if priority != 0 && !(PRIORITY_HIGHEST..=PRIORITY_LOWEST).contains(&priority) {
        return Err(WireError::at(
            "project_priority",
            FieldProblem::Inconsistent(format!("{priority}, not within {PRIORITY_HIGHEST}..={PRIORITY_LOWEST}")),
        ));
    }
    Ok(priority)
}
