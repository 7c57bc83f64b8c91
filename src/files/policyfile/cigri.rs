//! `[cigri]` of the policy file: CiGri's cluster affinities, finalize, sink
//! effect and predictor settings (`algorithm = "cigri"`, see
//! `core::family::cigri`).
//!
//! ```toml
//! [cigri]
//! finalize_copies_max = 1
//! sink_ratio = 0.05
//! sink_min_tasks = 10
//! predictor_window_secs = 3600
//! [[cigri.affinity]]
//! user = "alice"
//! cluster = "lyon"
//! ```

use serde::Deserialize;
use toml::Spanned;

use super::{FileError, FileText};
use crate::core::event::{CigriAffinity, CigriPolicy};
use crate::core::family::cigri as family;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CigriSection {
    finalize_copies_max: Option<Spanned<u32>>,
    /// A fraction of the median duration, 0 to 1, read to thousandths.
    sink_ratio: Option<Spanned<f64>>,
    sink_min_tasks: Option<Spanned<u32>>,
    predictor_window_secs: Option<Spanned<u64>>,
    #[serde(default)]
    affinity: Vec<Spanned<AffinityTable>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AffinityTable {
    user: String,
    cluster: String,
}

pub(crate) fn cigri(file_text: FileText<'_>, section: &Option<CigriSection>) -> Result<CigriPolicy, FileError> {
    let Some(section) = section else { return Ok(CigriPolicy::default()) };
    let defaults = CigriPolicy::default();
    if section.affinity.len() > family::AFFINITIES_MAX {
        let extra = &section.affinity[family::AFFINITIES_MAX];
        return Err(file_text.at(extra, format!("cigri.affinity: more than {} rows", family::AFFINITIES_MAX)));
    }
    let sink_ratio_milli = match &section.sink_ratio {
        Some(ratio) if !(0.0..=1.0).contains(ratio.get_ref()) => {
            return Err(file_text.at(ratio, "cigri.sink_ratio must be within 0..=1".to_string()));
        }
        Some(ratio) => (ratio.get_ref() * 1000.0).round() as u32,
        None => defaults.sink_ratio_milli,
    };
    let most_secs = family::PREDICTOR_WINDOW_MS_MAX / 1000;
    let predictor_window_ms = match &section.predictor_window_secs {
        Some(secs) if !(1..=most_secs).contains(secs.get_ref()) => {
            return Err(file_text.at(secs, format!("cigri.predictor_window_secs must be within 1..={most_secs}")));
        }
        Some(secs) => secs.get_ref() * 1000,
        None => defaults.predictor_window_ms,
    };
    let policy = CigriPolicy {
        affinity: section
            .affinity
            .iter()
            .map(|row| CigriAffinity { user: row.get_ref().user.clone(), cluster: row.get_ref().cluster.clone() })
            .collect(),
        finalize_copies_max: section.finalize_copies_max.as_ref().map_or(defaults.finalize_copies_max, |n| *n.get_ref()),
        sink_ratio_milli,
        sink_min_tasks: section.sink_min_tasks.as_ref().map_or(defaults.sink_min_tasks, |n| *n.get_ref()),
        predictor_window_ms,
    };
    family::check_policy(&policy).map_err(|(field, problem)| {
        let index = field.split(['[', ']']).nth(1).and_then(|n| n.parse::<usize>().ok());
        let offset = match field.as_str() {
            "finalize_copies_max" => section.finalize_copies_max.as_ref().map(|n| n.span().start),
            "sink_min_tasks" => section.sink_min_tasks.as_ref().map(|n| n.span().start),
            _ => index.and_then(|i| section.affinity.get(i)).map(|row| row.span().start),
        };
        file_text.error(offset.unwrap_or(0), format!("cigri.{field}: {problem}"))
    })?;
    Ok(policy)
}

/// `[cigri]` as a policy file writes it (for `policy show`).
pub(super) fn render(policy: &CigriPolicy) -> toml::Table {
    use toml::Value;
    let mut section = toml::Table::new();
    section.insert("finalize_copies_max".into(), Value::Integer(i64::from(policy.finalize_copies_max)));
    section.insert("sink_ratio".into(), Value::Float(f64::from(policy.sink_ratio_milli) / 1000.0));
    section.insert("sink_min_tasks".into(), Value::Integer(i64::from(policy.sink_min_tasks)));
    section.insert("predictor_window_secs".into(), Value::Integer((policy.predictor_window_ms / 1000) as i64));
    let rows = policy.affinity.iter().map(|row| {
        let mut table = toml::Table::new();
        table.insert("user".into(), Value::String(row.user.clone()));
        table.insert("cluster".into(), Value::String(row.cluster.clone()));
        Value::Table(table)
    });
    section.insert("affinity".into(), Value::Array(rows.collect()));
    section
}
