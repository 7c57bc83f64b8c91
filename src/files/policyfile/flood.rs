//! `[flood]` of the policy file: flood control of gateway engines (CiGri's job
//! ratio, see `core::schedule::flood`). Absent: off.
//!
//! ```toml
//! [flood]
//! algorithm = "slow-start"          # or "two-way-adaptive", "adaptive-down-exponential-up"
//! interval_secs = 10                # between two adjustments of a gateway's ratio
//! ratio_start = 1.0                 # tasks per slot at first (one slot per task)
//! ratio_max = 8.0
//! waiting_allowed = 0               # slots that may wait in a gateway's queue without excess
//! waiting_grace_secs = 2            # unstarted this long, a task counts as waiting
//! remote_queue_timeout_secs = 0     # unstarted this long, a task is withdrawn; 0: never
//! ```

use serde::Deserialize;
use toml::Spanned;

use super::{FileError, FileText};
use crate::core::event::{FloodAlgorithm, FloodPolicy};
use crate::core::schedule::flood as family;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FloodSection {
    algorithm: Option<Spanned<String>>,
    interval_secs: Option<Spanned<u64>>,
    /// Tasks per slot, read to thousandths.
    ratio_start: Option<Spanned<f64>>,
    ratio_max: Option<Spanned<f64>>,
    waiting_allowed: Option<Spanned<u32>>,
    waiting_grace_secs: Option<Spanned<u64>>,
    remote_queue_timeout_secs: Option<Spanned<u64>>,
}

fn milli(file_text: FileText<'_>, name: &str, value: &Option<Spanned<f64>>, default: u32) -> Result<u32, FileError> {
    let Some(value) = value else { return Ok(default) };
    let most = f64::from(family::RATIO_MAX_MILLI_MAX / 1000);
    if !(0.001..=most).contains(value.get_ref()) {
        return Err(file_text.at(value, format!("flood.{name} must be within 0.001..={most}")));
    }
    Ok((value.get_ref() * 1000.0).round() as u32)
}

fn secs(file_text: FileText<'_>, name: &str, value: &Option<Spanned<u64>>, default_ms: u64) -> Result<u64, FileError> {
    let Some(value) = value else { return Ok(default_ms) };
    let most = family::DURATION_MS_MAX / 1000;
    if *value.get_ref() > most {
        return Err(file_text.at(value, format!("flood.{name} must be at most {most}")));
    }
    Ok(value.get_ref() * 1000)
}

pub(crate) fn flood(file_text: FileText<'_>, section: &Option<FloodSection>) -> Result<Option<FloodPolicy>, FileError> {
    let Some(section) = section else { return Ok(None) };
    let defaults = FloodPolicy::default();
    let algorithm = match &section.algorithm {
        None => defaults.algorithm,
        Some(name) => FloodAlgorithm::parse(name.get_ref()).ok_or_else(|| {
            file_text.at(
                name,
                format!("unknown flood.algorithm \"{}\"; known: {}", name.get_ref(), FloodAlgorithm::NAMES.join(", ")),
            )
        })?,
    };
    let policy = FloodPolicy {
        algorithm,
        interval_ms: secs(file_text, "interval_secs", &section.interval_secs, defaults.interval_ms)?,
        ratio_start_milli: milli(file_text, "ratio_start", &section.ratio_start, defaults.ratio_start_milli)?,
        ratio_max_milli: milli(file_text, "ratio_max", &section.ratio_max, defaults.ratio_max_milli)?,
        waiting_allowed: section.waiting_allowed.as_ref().map_or(defaults.waiting_allowed, |n| *n.get_ref()),
        waiting_grace_ms: secs(file_text, "waiting_grace_secs", &section.waiting_grace_secs, defaults.waiting_grace_ms)?,
        remote_queue_timeout_ms: secs(
            file_text,
            "remote_queue_timeout_secs",
            &section.remote_queue_timeout_secs,
            defaults.remote_queue_timeout_ms,
        )?,
    };
    family::check_policy(&policy).map_err(|(field, problem)| {
        let offset = match field.as_str() {
            "interval_secs" => section.interval_secs.as_ref().map(|n| n.span().start),
            "ratio_start" => section.ratio_start.as_ref().map(|n| n.span().start),
            _ => None,
        };
        file_text.error(offset.unwrap_or(0), format!("flood.{field} {problem}"))
    })?;
    Ok(Some(policy))
}

/// `[flood]` as a policy file writes it (for `policy show`).
pub(super) fn render(policy: &FloodPolicy) -> toml::Table {
    use toml::Value;
    let mut section = toml::Table::new();
    section.insert("algorithm".into(), Value::String(policy.algorithm.as_str().into()));
    section.insert("interval_secs".into(), Value::Integer((policy.interval_ms / 1000) as i64));
    section.insert("ratio_start".into(), Value::Float(f64::from(policy.ratio_start_milli) / 1000.0));
    section.insert("ratio_max".into(), Value::Float(f64::from(policy.ratio_max_milli) / 1000.0));
    section.insert("waiting_allowed".into(), Value::Integer(i64::from(policy.waiting_allowed)));
    section.insert("waiting_grace_secs".into(), Value::Integer((policy.waiting_grace_ms / 1000) as i64));
    section.insert("remote_queue_timeout_secs".into(), Value::Integer((policy.remote_queue_timeout_ms / 1000) as i64));
    section
}

#[cfg(test)]
mod tests {
    use crate::files::policyfile::parse_policy;

    #[test]
    fn a_flood_section_is_read_with_defaults_and_bad_values_name_the_line() {
        let policy = parse_policy("[flood]\nalgorithm = \"two-way-adaptive\"\nratio_max = 4\nremote_queue_timeout_secs = 60\n", "p.toml").unwrap();
        let flood = policy.flood.expect("flood control on");
        assert_eq!(flood.algorithm.as_str(), "two-way-adaptive");
        assert_eq!((flood.ratio_max_milli, flood.ratio_start_milli, flood.interval_ms), (4_000, 1_000, 10_000));
        assert_eq!(flood.remote_queue_timeout_ms, 60_000);
        assert!(parse_policy("seed = 1\n", "p.toml").unwrap().flood.is_none(), "absent: off");
        let error = parse_policy("[flood]\nalgorithm = \"fast\"\n", "p.toml").unwrap_err().to_string();
        assert!(error.starts_with("p.toml:2: unknown flood.algorithm \"fast\""), "{error}");
        let error = parse_policy("[flood]\nratio_max = 0\n", "p.toml").unwrap_err().to_string();
        assert!(error.starts_with("p.toml:2: flood.ratio_max must be within"), "{error}");
        let error = parse_policy("[flood]\ninterval_secs = 0\n", "p.toml").unwrap_err().to_string();
        assert!(error.starts_with("p.toml:2: flood.interval_secs must be within"), "{error}");
        let error = parse_policy("[flood]\nratio_start = 9\nratio_max = 2\n", "p.toml").unwrap_err().to_string();
        assert!(error.starts_with("p.toml:2: flood.ratio_start must be"), "{error}");
    }
}
