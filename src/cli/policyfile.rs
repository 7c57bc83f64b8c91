//! The policy file: TOML setting the whole scheduling policy. Applying it
//! publishes one `PolicySet` event; fields it leaves out take their defaults,
//! so the file alone says what the policy is. See the README's policy reference.

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::jobfile::{line_of, JobFileError as FileError};
use crate::core::event::{Algorithm, LoadFormula, Policy, ORDERS_PER_BATCH_MAX};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFile {
    algorithm: Option<Spanned<String>>,
    engine_timeout_secs: Option<Spanned<u64>>,
    dispatch_timeout_secs: Option<Spanned<u64>>,
    dispatches_per_run_max: Option<Spanned<u32>>,
    seed: Option<u64>,
    load_formula: Option<LoadFormulaSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadFormulaSection {
    #[serde(default = "one")]
    slots_weight: u32,
    #[serde(default)]
    load_weight: u32,
}

fn one() -> u32 {
    1
}

pub fn read_policy_file(path: &Path) -> Result<Policy, FileError> {
    let text = std::fs::read_to_string(path).map_err(|e| FileError {
        path: path.display().to_string(),
        line: 0,
        message: format!("cannot read it: {e}"),
    })?;
    parse_policy(&text, &path.display().to_string())
}

pub fn parse_policy(text: &str, path: &str) -> Result<Policy, FileError> {
    let error = |offset: usize, message: String| FileError { path: path.to_string(), line: line_of(text, offset), message };
    let file: PolicyFile = toml::from_str(text).map_err(|e| error(e.span().map(|s| s.start).unwrap_or(0), e.message().to_string()))?;
    let defaults = Policy::default();
    let algorithm = match &file.algorithm {
        Some(name) => Algorithm::from_name(name.get_ref())
            .ok_or_else(|| error(name.span().start, format!("unknown algorithm {:?}; known: sge-plain", name.get_ref())))?,
        None => defaults.algorithm,
    };
    let seconds = |value: &Option<Spanned<u64>>, default_ms: u64, name: &str| -> Result<u64, FileError> {
        match value {
            Some(secs) if *secs.get_ref() == 0 => Err(error(secs.span().start, format!("{name} must be at least 1 second"))),
            Some(secs) => Ok(secs.get_ref().saturating_mul(1000)),
            None => Ok(default_ms),
        }
    };
    let dispatches_per_run_max = match &file.dispatches_per_run_max {
        Some(n) if *n.get_ref() == 0 || *n.get_ref() as usize > ORDERS_PER_BATCH_MAX => {
            return Err(error(n.span().start, format!("dispatches_per_run_max must be within 1..={ORDERS_PER_BATCH_MAX}")));
        }
        Some(n) => *n.get_ref(),
        None => defaults.dispatches_per_run_max,
    };
    Ok(Policy {
        algorithm,
        engine_timeout_ms: seconds(&file.engine_timeout_secs, defaults.engine_timeout_ms, "engine_timeout_secs")?,
        dispatch_timeout_ms: seconds(&file.dispatch_timeout_secs, defaults.dispatch_timeout_ms, "dispatch_timeout_secs")?,
        load_formula: file
            .load_formula
            .map(|f| LoadFormula { slots_weight: f.slots_weight, load_weight: f.load_weight })
            .unwrap_or_default(),
        dispatches_per_run_max,
        seed: file.seed.unwrap_or(defaults.seed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_file_sets_every_field_and_defaults_the_rest() {
        let policy = parse_policy("engine_timeout_secs = 10\n[load_formula]\nload_weight = 2\n", "p.toml").unwrap();
        assert_eq!(policy.engine_timeout_ms, 10_000);
        assert_eq!(policy.dispatch_timeout_ms, Policy::default().dispatch_timeout_ms);
        assert_eq!(policy.load_formula, LoadFormula { slots_weight: 1, load_weight: 2 });
    }

    #[test]
    fn bad_policies_name_the_line() {
        let error = parse_policy("seed = 1\nalgorithm = \"magic\"\n", "p.toml").unwrap_err();
        assert_eq!(error.to_string(), "p.toml:2: unknown algorithm \"magic\"; known: sge-plain");
        let error = parse_policy("\n\ndispatch_timeout_secs = 0\n", "p.toml").unwrap_err();
        assert_eq!(error.to_string(), "p.toml:3: dispatch_timeout_secs must be at least 1 second");
        let error = parse_policy("colour = 1\n", "p.toml").unwrap_err();
        assert!(error.to_string().starts_with("p.toml:1: unknown field `colour`"), "{error}");
    }
}
