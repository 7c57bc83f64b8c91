//! Load values that change over a run: `[[load_changes]]` entries, each
//! setting named load values on every engine of one group at a time of
//! virtual time (the values their heartbeats report from then on), so a
//! scenario can cross a suspend threshold and fall below it again:
//!
//! ```toml
//! [[load_changes]]
//! at_ms = 60000
//! group = "e"                          # an engine group's name_prefix
//! values_milli = { np_load_avg = 2500 }
//! ```
//!
//! A change replaces the named values and keeps the group's others. At most
//! [`LOAD_CHANGES_MAX`] changes; values within the heartbeat's limits.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::{EngineGroup, Problem};
use crate::core::load;

/// Most `[[load_changes]]` entries in one scenario.
pub const LOAD_CHANGES_MAX: usize = 10_000;

/// Named load values set on the engines of group `group` (an index into
/// [`super::Scenario::engines`]) at `at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadChange {
    pub at_ms: u64,
    pub group: usize,
    pub values_milli: BTreeMap<String, i64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLoadChange {
    at_ms: u64,
    group: Spanned<String>,
    values_milli: Spanned<BTreeMap<String, i64>>,
}

pub(super) fn load_changes(raw: &[Spanned<RawLoadChange>], groups: &[EngineGroup]) -> Result<Vec<LoadChange>, Problem> {
    if let Some(extra) = raw.get(LOAD_CHANGES_MAX) {
        return Err((extra.span(), format!("more than {LOAD_CHANGES_MAX} load_changes")));
    }
    raw.iter()
        .map(|change| {
            let change = change.get_ref();
            let name = change.group.get_ref();
            let group = groups
                .iter()
                .position(|group| &group.name_prefix == name)
                .ok_or_else(|| (change.group.span(), format!("load_changes: no engine group has name_prefix \"{name}\"")))?;
            let values = change.values_milli.get_ref();
            load::check_values(values).map_err(|e| (change.values_milli.span(), format!("load_changes: {e}")))?;
            Ok(LoadChange { at_ms: change.at_ms, group, values_milli: values.clone() })
        })
        .collect()
}

/// Checks changes made in code: known groups, values within limits.
pub(super) fn check(changes: &[LoadChange], groups: &[EngineGroup]) -> Result<(), String> {
    if changes.len() > LOAD_CHANGES_MAX {
        return Err(format!("{} load_changes, more than {LOAD_CHANGES_MAX}", changes.len()));
    }
    for (n, change) in changes.iter().enumerate() {
        if change.group >= groups.len() {
            return Err(format!("load_changes[{n}]: group {} of {}", change.group, groups.len()));
        }
        load::check_values(&change.values_milli).map_err(|e| format!("load_changes[{n}]: {e}"))?;
    }
    Ok(())
}
