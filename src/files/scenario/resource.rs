//! Grid Engine's resource side in a scenario: `queue_sort_method` and
//! `load_formula` in `[policy]`, `load_values_milli` per engine group (the
//! named load values its heartbeats report, besides the load of its runs).

use std::collections::BTreeMap;

use toml::Spanned;

use super::Problem;
use crate::core::event::{LoadFormula, QueueSort};
use crate::core::load;

/// `queue_sort_method = "load" | "seqno"` (default `load`).
pub(super) fn queue_sort(raw: &Option<Spanned<String>>) -> Result<QueueSort, Problem> {
    match raw {
        None => Ok(QueueSort::Load),
        Some(method) => match method.get_ref().as_str() {
            "load" => Ok(QueueSort::Load),
            "seqno" => Ok(QueueSort::Seqno),
            other => Err((method.span(), format!("queue_sort_method must be \"load\" or \"seqno\", not \"{other}\""))),
        },
    }
}

/// `load_formula = "np_load_avg + 0.5*mem_used"`: Grid Engine's formula added
/// to the default weights (slots in use 1, load per core 0).
pub(super) fn load_formula(raw: &Option<Spanned<String>>) -> Result<LoadFormula, Problem> {
    let mut formula = LoadFormula::default();
    if let Some(source) = raw {
        formula.expression = load::parse(source.get_ref()).map_err(|e| (source.span(), format!("load_formula: {e}")))?;
    }
    Ok(formula)
}

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
