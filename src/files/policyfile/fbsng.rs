//! `[fbsng]` of the policy file: FBSNG's queues and process types, by FBSNG's
//! names (`algorithm = "fbsng"`, see `core::family::fbsng`).
//!
//! ```toml
//! [fbsng]
//! min_run_interval_secs = 5
//! [[fbsng.queues]]
//! name = "high"
//! qp_min = 5
//! qpg = 7
//! qpi = 3
//! [[fbsng.process_types]]
//! name = "cms"
//! quota_slots = 200
//! requirements = 'project == "cms"'
//! ```

use serde::Deserialize;
use toml::Spanned;

use super::{FileError, FileText};
use crate::core::event::{FbsngPolicy, FbsngProcessType, FbsngQueue};
use crate::core::family::fbsng::{self as family, QueueDefaults};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FbsngSection {
    /// Seconds of log time between two runs that start sections; 5 when absent.
    min_run_interval_secs: Option<Spanned<u64>>,
    #[serde(default)]
    queues: Vec<Spanned<QueueTable>>,
    #[serde(default)]
    process_types: Vec<Spanned<ProcessTypeTable>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QueueTable {
    name: String,
    #[serde(default)]
    qp_min: i64,
    qp_max: Option<i64>,
    qpi: Option<i64>,
    qpd: Option<i64>,
    qpg: Option<i64>,
    spg: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessTypeTable {
    name: String,
    #[serde(default)]
    quota_slots: u32,
    #[serde(default)]
    requirements: String,
}

pub(crate) fn fbsng(file_text: FileText<'_>, section: &Option<FbsngSection>) -> Result<FbsngPolicy, FileError> {
    let Some(section) = section else { return Ok(FbsngPolicy::default()) };
    let most_secs = family::MIN_RUN_INTERVAL_MS_MAX / 1000;
    let min_run_interval_ms = match &section.min_run_interval_secs {
        Some(secs) if !(1..=most_secs).contains(secs.get_ref()) => {
            return Err(file_text.at(secs, format!("fbsng.min_run_interval_secs must be within 1..={most_secs}")));
        }
        Some(secs) => secs.get_ref() * 1000,
        None => 0,
    };
    let d = QueueDefaults::default();
    let policy = FbsngPolicy {
        queues: section
            .queues
            .iter()
            .map(|queue| {
                let queue = queue.get_ref();
                FbsngQueue {
                    name: queue.name.clone(),
                    qp_min: queue.qp_min,
                    qp_max: queue.qp_max.unwrap_or(d.qp_max.max(queue.qp_min)),
                    qpi: queue.qpi.unwrap_or(d.qpi),
                    qpd: queue.qpd.unwrap_or(d.qpd),
                    qpg: queue.qpg.unwrap_or(d.qpg),
                    spg: queue.spg.unwrap_or(d.spg),
                }
            })
            .collect(),
        process_types: section
            .process_types
            .iter()
            .map(|kind| {
                let kind = kind.get_ref();
                FbsngProcessType { name: kind.name.clone(), quota_slots: kind.quota_slots, requirements: kind.requirements.clone() }
            })
            .collect(),
        min_run_interval_ms,
    };
    family::check_policy(&policy).map_err(|(field, problem)| {
        // The table the field is in, for the line.
        let index = |field: &str| field.split(['[', ']']).nth(1).and_then(|n| n.parse::<usize>().ok());
        let offset = if field.starts_with("queues[") {
            index(&field).and_then(|i| section.queues.get(i)).map(|t| t.span().start)
        } else if field.starts_with("process_types[") {
            index(&field).and_then(|i| section.process_types.get(i)).map(|t| t.span().start)
        } else {
            None
        };
        file_text.error(offset.unwrap_or(0), format!("fbsng.{field}: {problem}"))
    })?;
    Ok(policy)
}

/// `[fbsng]` as a policy file writes it (for `policy show`).
pub(super) fn render(policy: &FbsngPolicy) -> toml::Table {
    use toml::Value;
    let mut section = toml::Table::new();
    if policy.min_run_interval_ms != 0 {
        section.insert("min_run_interval_secs".into(), Value::Integer((policy.min_run_interval_ms / 1000) as i64));
    }
    let queues = policy.queues.iter().map(|queue| {
        let mut table = toml::Table::new();
        table.insert("name".into(), Value::String(queue.name.clone()));
        for (key, value) in queue.parameters() {
            table.insert(key.into(), Value::Integer(value));
        }
        Value::Table(table)
    });
    section.insert("queues".into(), Value::Array(queues.collect()));
    let kinds = policy.process_types.iter().map(|kind| {
        let mut table = toml::Table::new();
        table.insert("name".into(), Value::String(kind.name.clone()));
        table.insert("quota_slots".into(), Value::Integer(i64::from(kind.quota_slots)));
        table.insert("requirements".into(), Value::String(kind.requirements.clone()));
        Value::Table(table)
    });
    section.insert("process_types".into(), Value::Array(kinds.collect()));
    section
}
