//! The policy file's suspend-threshold keys, named as queue_conf(5) names
//! them: `suspend_thresholds = "np_load_avg=1.75,mem_used=8000"` (a load value
//! name and its threshold, comma-separated; "NONE" or absent: none),
//! `suspend_interval_secs` (Grid Engine's `suspend_interval`, default 300) and
//! `nsuspend` (default 1). Thresholds are decimals, kept in milli-units.

use toml::Spanned;

use super::{FileError, FileText};
use crate::core::event::{SuspendThresholds, NSUSPEND_MAX, SUSPEND_INTERVAL_MS_MAX, SUSPEND_THRESHOLDS_MAX};
use crate::core::load::{check_name, LOAD_VALUE_MILLI_MAX};

pub(crate) fn suspend_thresholds(
    file_text: FileText<'_>,
    list: &Option<Spanned<String>>,
    interval_secs: &Option<Spanned<u64>>,
    nsuspend: &Option<Spanned<u32>>,
) -> Result<SuspendThresholds, FileError> {
    let defaults = SuspendThresholds::default();
    let mut thresholds: Vec<(String, i64)> = Vec::new();
    if let Some(list) = list.as_ref().filter(|list| !list.get_ref().trim().eq_ignore_ascii_case("none")) {
        for item in list.get_ref().split(',') {
            let Some((name, value)) = item.split_once('=') else {
                return Err(file_text.at(list, format!("suspend_thresholds: \"{}\" is not name=value", item.trim())));
            };
            let name = name.trim();
            check_name(name).map_err(|e| file_text.at(list, format!("suspend_thresholds: {e}")))?;
            if thresholds.iter().any(|(known, _)| known == name) {
                return Err(file_text.at(list, format!("suspend_thresholds: {name} has two thresholds")));
            }
            let milli = decimal_milli(value.trim())
                .filter(|milli| milli.unsigned_abs() <= LOAD_VALUE_MILLI_MAX as u64)
                .ok_or_else(|| {
                    file_text.at(list, format!("suspend_thresholds: {name}'s threshold \"{}\" is not a decimal number within range", value.trim()))
                })?;
            thresholds.push((name.to_string(), milli));
        }
        if thresholds.len() > SUSPEND_THRESHOLDS_MAX {
            return Err(file_text.at(list, format!("suspend_thresholds: {} thresholds, more than {SUSPEND_THRESHOLDS_MAX}", thresholds.len())));
        }
    }
    let interval_ms = match interval_secs {
        Some(secs) if *secs.get_ref() == 0 || secs.get_ref().saturating_mul(1000) > SUSPEND_INTERVAL_MS_MAX => {
            return Err(file_text.at(secs, format!("suspend_interval_secs must be within 1..={}", SUSPEND_INTERVAL_MS_MAX / 1000)));
        }
        Some(secs) => secs.get_ref() * 1000,
        None => defaults.interval_ms,
    };
    let nsuspend = match nsuspend {
        Some(n) if !(1..=NSUSPEND_MAX).contains(n.get_ref()) => {
            return Err(file_text.at(n, format!("nsuspend must be within 1..={NSUSPEND_MAX}")));
        }
        Some(n) => *n.get_ref(),
        None => defaults.nsuspend,
    };
    Ok(SuspendThresholds { thresholds, interval_ms, nsuspend })
}

/// "1.75" -> 1750, "-2" -> -2000; at most three decimals and 18 digits.
pub(crate) fn decimal_milli(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || whole.len() > 18 || fraction.len() > 3 || !all_digits(whole) || !all_digits(fraction) {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let fraction: i64 = format!("{fraction:0<3}").parse().ok()?;
    let milli = whole.checked_mul(1000)?.checked_add(fraction)?;
    Some(if negative { -milli } else { milli })
}

#[cfg(test)]
mod tests {
    use super::super::parse_policy;

    fn error(text: &str) -> String {
        parse_policy(text, "p.toml").expect_err("the policy is bad").to_string()
    }

    #[test]
    fn grid_engine_keys_read_into_milli_units_and_defaults_are_five_minutes_and_one() {
        let policy = parse_policy("suspend_thresholds = \"np_load_avg=1.75, mem_used=8000\"\n", "p.toml").unwrap();
        let t = &policy.suspend_thresholds;
        assert_eq!(t.thresholds, vec![("np_load_avg".to_string(), 1_750), ("mem_used".to_string(), 8_000_000)]);
        assert_eq!((t.interval_ms, t.nsuspend), (300_000, 1));
        let policy = parse_policy("suspend_thresholds = \"NONE\"\nsuspend_interval_secs = 60\nnsuspend = 3\n", "p.toml").unwrap();
        assert_eq!((policy.suspend_thresholds.thresholds.len(), policy.suspend_thresholds.interval_ms, policy.suspend_thresholds.nsuspend), (0, 60_000, 3));
        // What `policy show` prints reads back the same.
        let policy = parse_policy("suspend_thresholds = \"np_load_avg=1.75,x=-0.5\"\nnsuspend = 2\n", "p.toml").unwrap();
        let text = super::super::policy_file_text(&policy);
        assert_eq!(parse_policy(&text, "shown.toml").unwrap(), policy, "{text}");
    }

    #[test]
    fn bad_thresholds_name_the_line_and_what_is_wrong() {
        let many: Vec<String> = (0..17).map(|n| format!("v{n}=1")).collect();
        for (text, wanted) in [
            ("suspend_thresholds = \"np_load_avg\"".to_string(), "is not name=value"),
            ("suspend_thresholds = \"1bad=2\"".to_string(), "suspend_thresholds:"),
            ("suspend_thresholds = \"a=1,a=2\"".to_string(), "a has two thresholds"),
            ("suspend_thresholds = \"a=1.2345\"".to_string(), "is not a decimal number"),
            ("suspend_thresholds = \"a=99999999999999999999\"".to_string(), "is not a decimal number"),
            ("suspend_thresholds = \"a=2e3\"".to_string(), "is not a decimal number"),
            (format!("suspend_thresholds = \"{}\"", many.join(",")), "17 thresholds, more than 16"),
            ("suspend_interval_secs = 0".to_string(), "suspend_interval_secs must be within"),
            ("suspend_interval_secs = 86401".to_string(), "suspend_interval_secs must be within"),
            ("nsuspend = 0".to_string(), "nsuspend must be within"),
            ("nsuspend = 1025".to_string(), "nsuspend must be within"),
        ] {
            let message = error(&format!("\n{text}\n"));
            assert!(message.starts_with("p.toml:2: ") && message.contains(wanted), "{text}: {message}");
        }
    }
}
