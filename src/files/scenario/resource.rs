//! Grid Engine's resource side in a scenario's engine groups:
//! `load_values_milli`, the named load values their heartbeats report besides
//! the load of their runs. (`queue_sort_method` and `load_formula` are the
//! policy file's keys, read with the rest of `[policy]`.)

use std::collections::BTreeMap;

use toml::Spanned;

use super::Problem;
use crate::core::load;

/// An engine group's `load_values_milli`, within the wire's limits.
pub(super) fn load_values(raw: &Option<Spanned<BTreeMap<String, i64>>>) -> Result<BTreeMap<String, i64>, Problem> {
    match raw {
        None => Ok(BTreeMap::new()),
        Some(values) => {
            load::check_values(values.get_ref()).map_err(|e| (values.span(), format!("load_values_milli: {e}")))?;
            Ok(values.get_ref().clone())
        }
    }
}
