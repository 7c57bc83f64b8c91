//! Suspend thresholds (`SuspendThresholds`, issue 10 item 5) to and from the
//! wire, with their limits: too many thresholds, a duplicated or unknown-shaped
//! name, a threshold beyond what a load value may be, an interval or nsuspend
//! out of range: the policy does not decode.

use super::{proto, FieldProblem, WireError};
use crate::core::event::{SuspendThresholds, NSUSPEND_MAX, SUSPEND_INTERVAL_MS_MAX, SUSPEND_THRESHOLDS_MAX};
use crate::core::load::{check_name, LOAD_VALUE_MILLI_MAX};

/// Nothing for the default (no threshold), so a policy without any encodes as before.
pub(super) fn thresholds_to_proto(thresholds: &SuspendThresholds) -> Option<proto::SuspendThresholds> {
    let defaults = SuspendThresholds::default();
    let message = proto::SuspendThresholds {
        thresholds: thresholds
            .thresholds
            .iter()
            .map(|(name, threshold_milli)| proto::SuspendThreshold { name: name.clone(), threshold_milli: *threshold_milli })
            .collect(),
        interval_ms: (thresholds.interval_ms != defaults.interval_ms).then_some(thresholds.interval_ms),
        nsuspend: (thresholds.nsuspend != defaults.nsuspend).then_some(thresholds.nsuspend),
    };
    (message != proto::SuspendThresholds::default()).then_some(message)
}

pub(super) fn thresholds(m: Option<proto::SuspendThresholds>) -> Result<SuspendThresholds, WireError> {
    let m = m.unwrap_or_default();
    let defaults = SuspendThresholds::default();
    let bad = |field: &'static str, problem: String| WireError::at(field, FieldProblem::Inconsistent(problem));
    if m.thresholds.len() > SUSPEND_THRESHOLDS_MAX {
        return Err(bad("thresholds", format!("{} thresholds, more than {SUSPEND_THRESHOLDS_MAX}", m.thresholds.len())));
    }
    let mut thresholds: Vec<(String, i64)> = Vec::with_capacity(m.thresholds.len());
    for threshold in m.thresholds {
        check_name(&threshold.name).map_err(|e| bad("thresholds", e.to_string()))?;
        if thresholds.iter().any(|(name, _)| *name == threshold.name) {
            return Err(bad("thresholds", format!("load value {} has two thresholds", threshold.name)));
        }
        if threshold.threshold_milli.unsigned_abs() > LOAD_VALUE_MILLI_MAX as u64 {
            return Err(bad(
                "thresholds",
                format!("threshold {} milli for {} is beyond {LOAD_VALUE_MILLI_MAX} in magnitude", threshold.threshold_milli, threshold.name),
            ));
        }
        thresholds.push((threshold.name, threshold.threshold_milli));
    }
    let interval_ms = m.interval_ms.unwrap_or(defaults.interval_ms);
    if !(1..=SUSPEND_INTERVAL_MS_MAX).contains(&interval_ms) {
        return Err(bad("interval_ms", format!("{interval_ms}, not within 1..={SUSPEND_INTERVAL_MS_MAX}")));
    }
    let nsuspend = m.nsuspend.unwrap_or(defaults.nsuspend);
    if !(1..=NSUSPEND_MAX).contains(&nsuspend) {
        return Err(bad("nsuspend", format!("{nsuspend}, not within 1..={NSUSPEND_MAX}")));
    }
    Ok(SuspendThresholds { thresholds, interval_ms, nsuspend })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threshold(name: &str, threshold_milli: i64) -> proto::SuspendThreshold {
        proto::SuspendThreshold { name: name.into(), threshold_milli }
    }

    #[test]
    fn a_policy_outside_the_limits_does_not_decode() {
        let decode = |m: proto::SuspendThresholds| thresholds(Some(m)).map_err(|e| e.to_string());
        let many = (0..17).map(|n| threshold(&format!("v{n}"), 1)).collect();
        let long_name = "n".repeat(300);
        for (m, wanted) in [
            (proto::SuspendThresholds { thresholds: many, ..Default::default() }, "more than 16"),
            (proto::SuspendThresholds { thresholds: vec![threshold("a", 1), threshold("a", 2)], ..Default::default() }, "two thresholds"),
            (proto::SuspendThresholds { thresholds: vec![threshold("bad name", 1)], ..Default::default() }, "thresholds"),
            (proto::SuspendThresholds { thresholds: vec![threshold(&long_name, 1)], ..Default::default() }, "thresholds"),
            (proto::SuspendThresholds { thresholds: vec![threshold("a", i64::MIN)], ..Default::default() }, "beyond"),
            (proto::SuspendThresholds { thresholds: vec![threshold("a", i64::MAX)], ..Default::default() }, "beyond"),
            (proto::SuspendThresholds { interval_ms: Some(0), ..Default::default() }, "interval_ms"),
            (proto::SuspendThresholds { interval_ms: Some(SUSPEND_INTERVAL_MS_MAX + 1), ..Default::default() }, "interval_ms"),
            (proto::SuspendThresholds { nsuspend: Some(0), ..Default::default() }, "nsuspend"),
            (proto::SuspendThresholds { nsuspend: Some(NSUSPEND_MAX + 1), ..Default::default() }, "nsuspend"),
        ] {
            let error = decode(m).expect_err("out of limits");
            assert!(error.contains(wanted), "{error}");
        }
        let fine = decode(proto::SuspendThresholds { thresholds: vec![threshold("np_load_avg", -5)], ..Default::default() }).unwrap();
        assert_eq!((fine.thresholds.len(), fine.interval_ms, fine.nsuspend), (1, 300_000, 1));
        assert_eq!(thresholds_to_proto(&SuspendThresholds::default()), None, "the default encodes as nothing");
    }
}
