//! The policy file: TOML setting the whole scheduling policy. Applying it
//! publishes one `PolicySet` event; fields it leaves out take their defaults,
//! so the file alone says what the policy is. See docs/operators.md, "The policy file".

use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

pub(crate) mod cigri;
pub(crate) mod flood;
pub(crate) mod fbsng;
mod render;
pub(crate) mod sge;
mod thresholds;
pub(crate) use thresholds::decimal_milli;

pub use render::policy_file_text;

use super::jobfile::{FileText, JobFileError as FileError};
use crate::core::event::{
    CapsPolicy, LoadFormula, OutputPolicy, Policy, QueueSort, RedundancyPolicy, TechilaPolicy, ORDERS_PER_BATCH_MAX,
    OUTPUT_JOB_BYTES_MAX_LIMIT, OUTPUT_TASK_BYTES_MAX_LIMIT, WORK_DIR_RETENTION_MS_LIMIT,
};
use crate::wire::check_engine_tier;

sge::with_grid_engine_keys! {
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct PolicyFile {
        engine_timeout_secs: Option<Spanned<u64>>,
        dispatch_timeout_secs: Option<Spanned<u64>>,
        dispatches_per_run_max: Option<Spanned<u32>>,
        seed: Option<u64>,
        load_formula: Option<LoadFormulaSection>,
        engine_tiers: Option<Vec<Spanned<String>>>,
        greylist_affinity: Option<u32>,
        redundancy: Option<RedundancySection>,
        /// How long an ended job stays in the state before it is retired.
        job_retention_secs: Option<Spanned<u64>>,
        /// Grid Engine's `queue_sort_method`: "load" or "seqno".
        queue_sort_method: Option<Spanned<String>>,
        /// Techila's settings (`algorithm = "techila"`).
        techila: Option<TechilaSection>,
        /// Bounds on tasks' stored output and engines' work directories.
        output: Option<OutputSection>,
        /// Grid Engine's `suspend_thresholds` (queue_conf(5)): "name=value,...".
        suspend_thresholds: Option<Spanned<String>>,
        /// Grid Engine's `suspend_interval`, in seconds.
        suspend_interval_secs: Option<Spanned<u64>>,
        /// Grid Engine's `nsuspend`.
        nsuspend: Option<Spanned<u32>>,
        /// Grid Engine's `max_reservation` (sched_conf(5)): jobs that reserve per run.
        max_reservation: Option<Spanned<u32>>,
        /// Grid Engine's `default_duration`, in seconds.
        default_duration_secs: Option<Spanned<u64>>,
        /// FBSNG's queues and process types (`algorithm = "fbsng"`).
        fbsng: Option<fbsng::FbsngSection>,
        /// CiGri's affinities, finalize and sink settings (`algorithm = "cigri"`).
        cigri: Option<cigri::CigriSection>,
        /// Flood control of gateway engines.
        flood: Option<flood::FloodSection>,
        /// Caps on active jobs and the tasks they hold, per user and over the grid.
        caps: Option<CapsSection>,
    }
}

/// `[caps]`: every key optional, defaulting to `CapsPolicy::default()`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CapsSection {
    max_jobs_per_user: Option<u32>,
    max_jobs: Option<u32>,
    max_tasks_per_user: Option<u64>,
    max_tasks: Option<u64>,
}

fn caps(section: &Option<CapsSection>) -> CapsPolicy {
    let defaults = CapsPolicy::default();
    let Some(section) = section else { return defaults };
    CapsPolicy {
        max_jobs_per_user: section.max_jobs_per_user.unwrap_or(defaults.max_jobs_per_user),
        max_jobs: section.max_jobs.unwrap_or(defaults.max_jobs),
        max_tasks_per_user: section.max_tasks_per_user.unwrap_or(defaults.max_tasks_per_user),
        max_tasks: section.max_tasks.unwrap_or(defaults.max_tasks),
    }
}

/// The key a policy file writes for a field of the policy as
/// [`check_policy`](crate::core::policy_limits::check_policy) names it:
/// durations in seconds, Grid Engine's and the suspend and reservation keys
/// at the top level, as sched_conf(5) has them.
fn file_key(field: &str) -> String {
    let field = match field {
        "sge.halftime_ms" => return "halftime".into(),
        "suspend_thresholds.interval_ms" => return "suspend_interval_secs".into(),
        "reservation.default_duration_ms" => return "default_duration_secs".into(),
        other => other.strip_prefix("sge.").unwrap_or(other),
    };
    match field.strip_suffix("_ms") {
        Some(stem) => format!("{stem}_secs"),
        None => field.to_string(),
    }
}

/// A policy past a limit of [`check_policy`](crate::core::policy_limits::check_policy),
/// named by the file's key, at the line that sets it when one does.
fn limit_error(file_text: FileText<'_>, limit: crate::core::policy_limits::PolicyProblem) -> FileError {
    let key = file_key(&limit.field);
    let last = key.rsplit('.').next().unwrap_or(&key).split('[').next().unwrap_or(&key);
    let mut offset = 0;
    let mut line_at = None;
    for line in file_text.text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if trimmed.strip_prefix(last).is_some_and(|rest| rest.trim_start().starts_with('=')) {
            line_at = Some(offset + (line.len() - trimmed.len()));
            break;
        }
        offset += line.len();
    }
    let message = format!("{key}: {}", limit.problem);
    match line_at {
        Some(at) => file_text.error(at, message),
        None => FileError { path: file_text.path.to_string(), line: 0, message },
    }
}

/// `[output]`: every key optional, defaulting to `OutputPolicy::default()`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputSection {
    task_bytes_max: Option<Spanned<u64>>,
    job_bytes_max: Option<Spanned<u64>>,
    work_dir_retention_secs: Option<Spanned<u64>>,
}

fn output(file_text: FileText<'_>, section: &Option<OutputSection>) -> Result<OutputPolicy, FileError> {
    let defaults = OutputPolicy::default();
    let Some(section) = section else { return Ok(defaults) };
    let at_most = |name: &str, value: &Option<Spanned<u64>>, most: u64, default: u64| match value {
        Some(v) if *v.get_ref() > most => Err(file_text.at(v, format!("output.{name} must be at most {most}"))),
        Some(v) => Ok(*v.get_ref()),
        None => Ok(default),
    };
    let retention_ms = match &section.work_dir_retention_secs {
        Some(secs) if secs.get_ref().saturating_mul(1000) > WORK_DIR_RETENTION_MS_LIMIT => {
            return Err(file_text.at(
                secs,
                format!("output.work_dir_retention_secs must be at most {}", WORK_DIR_RETENTION_MS_LIMIT / 1000),
            ));
        }
        given => seconds(file_text, "output.work_dir_retention_secs", given, defaults.work_dir_retention_ms)?,
    };
    Ok(OutputPolicy {
        task_bytes_max: at_most("task_bytes_max", &section.task_bytes_max, OUTPUT_TASK_BYTES_MAX_LIMIT, defaults.task_bytes_max)?,
        job_bytes_max: at_most("job_bytes_max", &section.job_bytes_max, OUTPUT_JOB_BYTES_MAX_LIMIT, defaults.job_bytes_max)?,
        work_dir_retention_ms: retention_ms,
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadFormulaSection {
    #[serde(default = "one")]
    slots_weight: u32,
    #[serde(default)]
    load_weight: u32,
    /// Grid Engine's `load_formula` over named load values (see `core::load`).
    expression: Option<Spanned<String>>,
}

/// `[redundancy]`: every key optional, defaulting to `RedundancyPolicy::default()`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RedundancySection {
    strategy_effective_percent: Option<Spanned<u32>>,
    /// Seconds, with up to three decimals (`0.5`): the rescheduler may look
    /// at running tasks more often than once a second.
    poll_period_secs: Option<Spanned<toml::Value>>,
    percent_completed_strategy: Option<bool>,
    remaining_task_percent: Option<Spanned<u32>>,
    average_strategy: Option<bool>,
    average_limit: Option<Spanned<toml::Value>>,
    std_dev_strategy: Option<bool>,
    std_dev_limit: Option<Spanned<toml::Value>>,
    reschedule_first: Option<bool>,
    copies_per_task_max: Option<u32>,
}

/// `[techila]`: the license cap, simultaneous projects, user priorities.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TechilaSection {
    #[serde(default)]
    max_running_tasks: u32,
    #[serde(default)]
    simultaneous_projects: bool,
    #[serde(default)]
    user_priorities: std::collections::BTreeMap<String, Spanned<u32>>,
    /// Seconds of log time after which a scheduling cycle runs anyway; 5 when absent.
    cycle_interval_secs: Option<Spanned<u64>>,
}

pub(crate) fn techila(file_text: FileText<'_>, section: &Option<TechilaSection>) -> Result<TechilaPolicy, FileError> {
    use crate::core::family::techila::{PRIORITY_HIGHEST, PRIORITY_LOWEST};
    let Some(section) = section else { return Ok(TechilaPolicy::default()) };
    if section.user_priorities.len() > crate::wire::NAMED_AMOUNTS_MAX {
        return Err(FileError {
            path: file_text.path.to_string(),
            line: 0,
            message: format!("techila.user_priorities: more than {} users", crate::wire::NAMED_AMOUNTS_MAX),
        });
    }
    let mut user_priorities = std::collections::BTreeMap::new();
    for (user, priority) in &section.user_priorities {
        if !(PRIORITY_HIGHEST..=PRIORITY_LOWEST).contains(priority.get_ref()) {
            return Err(file_text.at(
                priority,
                format!("techila.user_priorities.{user} must be within {PRIORITY_HIGHEST}..={PRIORITY_LOWEST}"),
            ));
        }
        user_priorities.insert(user.clone(), *priority.get_ref());
    }
    let interval_max_secs = crate::core::family::techila::cycle::CYCLE_INTERVAL_MS_MAX / 1000;
    let cycle_interval_ms = match &section.cycle_interval_secs {
        Some(secs) if !(1..=interval_max_secs).contains(secs.get_ref()) => {
            return Err(file_text.at(secs, format!("techila.cycle_interval_secs must be within 1..={interval_max_secs}")));
        }
        Some(secs) => secs.get_ref() * 1000,
        None => 0,
    };
    Ok(TechilaPolicy {
        cycle_interval_ms,
        max_running_tasks: section.max_running_tasks,
        simultaneous_projects: section.simultaneous_projects,
        user_priorities,
    })
}

fn one() -> u32 {
    1
}

/// Most decimals of a limit: it is kept in thousandths.
const LIMIT_DECIMALS_MAX: usize = 3;

pub fn read_policy_file(path: &Path) -> Result<Policy, FileError> {
    let text = std::fs::read_to_string(path).map_err(|e| FileError {
        path: path.display().to_string(),
        line: 0,
        message: format!("cannot read it: {e}"),
    })?;
    parse_policy(&text, &path.display().to_string())
}

pub fn parse_policy(text: &str, path: &str) -> Result<Policy, FileError> {
    let file_text = FileText { text, path };
    policy(file_text, file_text.parse()?)
}

/// A policy written as one table of a larger file, with the policy file's keys
/// and checks: a scenario's `[policy]`.
pub(crate) fn policy_from_table(file_text: FileText<'_>, table: Spanned<toml::de::DeTable<'_>>) -> Result<Policy, FileError> {
    policy(file_text, file_text.parse_table(table)?)
}

fn policy(file_text: FileText<'_>, file: PolicyFile) -> Result<Policy, FileError> {
    let defaults = Policy::default();
    let (algorithm, sge) = file.grid_engine(file_text)?;
    let dispatches_per_run_max = match &file.dispatches_per_run_max {
        Some(n) if *n.get_ref() == 0 || *n.get_ref() as usize > ORDERS_PER_BATCH_MAX => {
            return Err(file_text.at(n, format!("dispatches_per_run_max must be within 1..={ORDERS_PER_BATCH_MAX}")));
        }
        Some(n) => *n.get_ref(),
        None => defaults.dispatches_per_run_max,
    };
    let engine_tiers = match &file.engine_tiers {
        Some(tiers) => tiers
            .iter()
            .enumerate()
            .map(|(tier_idx, tier)| {
                check_engine_tier(tier.get_ref())
                    .map_err(|problem| file_text.at(tier, format!("engine_tiers[{tier_idx}]: {problem}")))?;
                Ok(tier.get_ref().clone())
            })
            .collect::<Result<Vec<String>, FileError>>()?,
        None => defaults.engine_tiers,
    };
    let redundancy = match &file.redundancy {
        Some(section) => redundancy(file_text, section)?,
        None => defaults.redundancy,
    };
    let policy = Policy {
        algorithm,
        engine_timeout_ms: seconds(file_text, "engine_timeout_secs", &file.engine_timeout_secs, defaults.engine_timeout_ms)?,
        dispatch_timeout_ms: seconds(file_text, "dispatch_timeout_secs", &file.dispatch_timeout_secs, defaults.dispatch_timeout_ms)?,
        load_formula: match &file.load_formula {
            Some(f) => LoadFormula {
                slots_weight: f.slots_weight,
                load_weight: f.load_weight,
                expression: match &f.expression {
                    Some(source) => crate::core::load::parse(source.get_ref())
                        .map_err(|e| file_text.at(source, format!("load_formula.expression: {e}")))?,
                    None => Default::default(),
                },
            },
            None => LoadFormula::default(),
        },
        dispatches_per_run_max,
        seed: file.seed.unwrap_or(defaults.seed),
        engine_tiers,
        greylist_affinity: file.greylist_affinity.unwrap_or(defaults.greylist_affinity),
        redundancy,
        job_retention_ms: seconds(file_text, "job_retention_secs", &file.job_retention_secs, defaults.job_retention_ms)?,
        sge,
        queue_sort_method: match &file.queue_sort_method {
            None => QueueSort::Load,
            Some(method) => match method.get_ref().as_str() {
                "load" => QueueSort::Load,
                "seqno" => QueueSort::Seqno,
                other => {
                    return Err(file_text.at(method, format!("queue_sort_method must be \"load\" or \"seqno\", not \"{other}\"")));
                }
            },
        },
        techila: techila(file_text, &file.techila)?,
        output: output(file_text, &file.output)?,
        suspend_thresholds: thresholds::suspend_thresholds(
            file_text,
            &file.suspend_thresholds,
            &file.suspend_interval_secs,
            &file.nsuspend,
        )?,
        reservation: reservation(file_text, &file.max_reservation, &file.default_duration_secs)?,
        fbsng: fbsng::fbsng(file_text, &file.fbsng)?,
        cigri: cigri::cigri(file_text, &file.cigri)?,
        flood: flood::flood(file_text, &file.flood)?,
        caps: caps(&file.caps),
    };
    crate::core::policy_limits::check_policy(&policy).map_err(|limit| limit_error(file_text, limit))?;
    Ok(policy)
}

/// `max_reservation` (at most [`MAX_RESERVATION_MAX`]) and `default_duration_secs`.
fn reservation(
    file_text: FileText<'_>,
    max_reservation: &Option<Spanned<u32>>,
    default_duration_secs: &Option<Spanned<u64>>,
) -> Result<crate::core::event::ReservationPolicy, FileError> {
    use crate::core::event::{ReservationPolicy, MAX_RESERVATION_MAX};
    let defaults = ReservationPolicy::default();
    let max_reservation = match max_reservation {
        Some(n) if *n.get_ref() > MAX_RESERVATION_MAX => {
            return Err(file_text.at(n, format!("max_reservation may be at most {MAX_RESERVATION_MAX}, not {}", n.get_ref())));
        }
        Some(n) => *n.get_ref(),
        None => defaults.max_reservation,
    };
    let default_duration_ms = seconds(file_text, "default_duration_secs", default_duration_secs, defaults.default_duration_ms)?;
    Ok(ReservationPolicy { max_reservation, default_duration_ms })
}

/// A duration given in seconds, at least 1, in ms; `default_ms` when absent.
fn seconds(file_text: FileText<'_>, name: &str, value: &Option<Spanned<u64>>, default_ms: u64) -> Result<u64, FileError> {
    match value {
        Some(secs) if *secs.get_ref() == 0 => Err(file_text.at(secs, format!("{name} must be at least 1 second"))),
        Some(secs) => Ok(secs.get_ref().saturating_mul(1000)),
        None => Ok(default_ms),
    }
}

/// A duration given in seconds with up to three decimals (`5`, `0.5`), more
/// than 0, in ms, read from its text so nothing is lost to binary floating
/// point; `default_ms` when absent.
fn decimal_seconds(
    file_text: FileText<'_>,
    name: &str,
    value: &Option<Spanned<toml::Value>>,
    default_ms: u64,
) -> Result<u64, FileError> {
    let Some(value) = value else { return Ok(default_ms) };
    let literal = file_text.text[value.span()].replace('_', "");
    let ms = match value.get_ref() {
        toml::Value::Integer(secs) => u64::try_from(*secs).ok().map(|secs| secs.saturating_mul(1000)),
        toml::Value::Float(_) => decimal_milli(literal.trim_start_matches('+')).and_then(|ms| u64::try_from(ms).ok()),
        _ => None,
    };
    match ms {
        None => Err(file_text.at(value, format!("{name}: {literal} is not seconds with at most three decimals, such as 5 or 0.5"))),
        Some(0) => Err(file_text.at(value, format!("{name} must be more than 0 seconds"))),
        Some(ms) => Ok(ms),
    }
}

fn redundancy(file_text: FileText<'_>, section: &RedundancySection) -> Result<RedundancyPolicy, FileError> {
    let defaults = RedundancyPolicy::default();
    let percent = |name: &str, value: &Option<Spanned<u32>>, default: u32| match value {
        Some(n) if *n.get_ref() > 100 => {
            Err(file_text.at(n, format!("redundancy.{name} is a percentage: 0 to 100, not {}", n.get_ref())))
        }
        Some(n) => Ok(*n.get_ref()),
        None => Ok(default),
    };
    let limit = |name: &str, value: &Option<Spanned<toml::Value>>, default_milli: u32| match value {
        Some(value) => limit_milli(file_text.text, value).map_err(|problem| file_text.at(value, format!("redundancy.{name}: {problem}"))),
        None => Ok(default_milli),
    };
    let poll_period_name = "redundancy.poll_period_secs";
    Ok(RedundancyPolicy {
        strategy_effective_percent: percent("strategy_effective_percent", &section.strategy_effective_percent, defaults.strategy_effective_percent)?,
        poll_period_ms: decimal_seconds(file_text, poll_period_name, &section.poll_period_secs, defaults.poll_period_ms)?,
        percent_completed_strategy: section.percent_completed_strategy.unwrap_or(defaults.percent_completed_strategy),
        remaining_task_percent: percent("remaining_task_percent", &section.remaining_task_percent, defaults.remaining_task_percent)?,
        average_strategy: section.average_strategy.unwrap_or(defaults.average_strategy),
        average_limit_milli: limit("average_limit", &section.average_limit, defaults.average_limit_milli)?,
        std_dev_strategy: section.std_dev_strategy.unwrap_or(defaults.std_dev_strategy),
        std_dev_limit_milli: limit("std_dev_limit", &section.std_dev_limit, defaults.std_dev_limit_milli)?,
        reschedule_first: section.reschedule_first.unwrap_or(defaults.reschedule_first),
        copies_per_task_max: section.copies_per_task_max.unwrap_or(defaults.copies_per_task_max),
    })
}

/// A non-negative decimal with at most three decimals, in thousandths, read
/// from its text so nothing is lost to binary floating point: `3`, `2.5`,
/// `1.125`, or the same as a string (`"2.5"`).
pub(crate) fn limit_milli(text: &str, value: &Spanned<toml::Value>) -> Result<u32, String> {
    let literal = match value.get_ref() {
        toml::Value::String(decimal) => decimal.clone(),
        toml::Value::Integer(_) | toml::Value::Float(_) => text[value.span()].replace('_', ""),
        other => return Err(format!("expected a decimal such as 3.0, found a {}", other.type_str())),
    };
    let bad = || format!("{literal:?} is not a decimal such as 3.0 or 2.5");
    let digits = literal.strip_prefix('+').unwrap_or(&literal);
    if digits.starts_with('-') {
        return Err(format!("{literal} is negative; it must be 0 or more"));
    }
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |part: &str| part.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || (digits.contains('.') && fraction.is_empty()) {
        return Err(bad());
    }
    if fraction.len() > LIMIT_DECIMALS_MAX {
        return Err(format!("{literal} has {} decimals; at most {LIMIT_DECIMALS_MAX} are kept", fraction.len()));
    }
    let too_large = || format!("{literal} is too large");
    let whole: u32 = whole.parse().map_err(|_| too_large())?;
    let fraction_milli: u32 = format!("{fraction:0<3}").parse().map_err(|_| bad())?;
    whole.checked_mul(1000).and_then(|milli| milli.checked_add(fraction_milli)).ok_or_else(too_large)
}

#[cfg(test)]
mod tests {
    use expect_test::{Expect, expect};

    use super::*;

    fn check_error(text: &str, expect: Expect) {
        let error = parse_policy(text, "p.toml").expect_err("the policy is bad");
        expect.assert_eq(&error.to_string());
    }

    #[test]
    fn a_policy_file_sets_every_field_and_defaults_the_rest() {
        let policy = parse_policy("engine_timeout_secs = 10\n[load_formula]\nload_weight = 2\n", "p.toml").unwrap();
        assert_eq!(policy.engine_timeout_ms, 10_000);
        assert_eq!(policy.dispatch_timeout_ms, Policy::default().dispatch_timeout_ms);
        assert_eq!(policy.load_formula, LoadFormula { slots_weight: 1, load_weight: 2, expression: Default::default() });
        assert_eq!(policy.engine_tiers, Vec::<String>::new());
        assert_eq!(policy.greylist_affinity, Policy::default().greylist_affinity);
        assert_eq!(policy.redundancy, RedundancyPolicy::default());
        assert_eq!(policy.job_retention_ms, crate::core::event::JOB_RETENTION_MS_DEFAULT);
        let policy = parse_policy("job_retention_secs = 600\n", "p.toml").unwrap();
        assert_eq!(policy.job_retention_ms, 600_000);
    }

    #[test]
    fn output_bounds_are_read_defaulted_and_checked() {
        assert_eq!(parse_policy("", "p.toml").unwrap().output, OutputPolicy::default());
        let policy = parse_policy(
            "[output]\ntask_bytes_max = 1048576\njob_bytes_max = 0\nwork_dir_retention_secs = 60\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(
            policy.output,
            OutputPolicy { task_bytes_max: 1 << 20, job_bytes_max: 0, work_dir_retention_ms: 60_000 }
        );
        check_error(
            "[output]\ntask_bytes_max = 1073741825\n",
            expect!["p.toml:2: output.task_bytes_max must be at most 1073741824"],
        );
        check_error(
            "[output]\nwork_dir_retention_secs = 0\n",
            expect!["p.toml:2: output.work_dir_retention_secs must be at least 1 second"],
        );
        check_error(
            "[output]\nwork_dir_retention_secs = 99999999999\n",
            expect!["p.toml:2: output.work_dir_retention_secs must be at most 31536000"],
        );
    }

    #[test]
    fn tiers_greylisting_and_redundancy_are_read() {
        let policy = parse_policy(
            r#"
engine_tiers = ["type=blade", "type=server", "site=hel"]
greylist_affinity = 8

[redundancy]
strategy_effective_percent = 40
poll_period_secs = 10
percent_completed_strategy = false
remaining_task_percent = 5
average_strategy = true
average_limit = 2.5
std_dev_strategy = true
std_dev_limit = 1.125
reschedule_first = true
copies_per_task_max = 3
"#,
            "p.toml",
        )
        .unwrap();
        expect![[r#"
            ["type=blade", "type=server", "site=hel"]
            8
            RedundancyPolicy { strategy_effective_percent: 40, poll_period_ms: 10000, percent_completed_strategy: false, remaining_task_percent: 5, average_strategy: true, average_limit_milli: 2500, std_dev_strategy: true, std_dev_limit_milli: 1125, reschedule_first: true, copies_per_task_max: 3 }"#]].assert_eq(&format!("{:?}\n{}\n{:?}", policy.engine_tiers, policy.greylist_affinity, policy.redundancy));
        // A section with one key keeps the defaults of the others.
        let policy = parse_policy("[redundancy]\naverage_limit = 4\n", "p.toml").unwrap();
        assert_eq!(policy.redundancy, RedundancyPolicy { average_limit_milli: 4_000, ..RedundancyPolicy::default() });
    }

    #[test]
    fn limits_are_decimals_kept_in_thousandths_exactly() {
        let milli = |literal: &str| {
            parse_policy(&format!("[redundancy]\nstd_dev_limit = {literal}\n"), "p.toml")
                .map(|policy| policy.redundancy.std_dev_limit_milli.to_string())
                .unwrap_or_else(|error| error.to_string())
        };
        let shown: Vec<String> = ["3.0", "2", "0.001", "1.1", "+2.25", "1_000.5", "\"2.5\"", "0.1234", "-1.0", "1e3", "\"2.\"", "true", "5000000.0"]
            .iter()
            .map(|literal| format!("{literal:<10} {}", milli(literal)))
            .collect();
        expect![[r#"
            3.0        3000
            2          2000
            0.001      1
            1.1        1100
            +2.25      2250
            1_000.5    1000500
            "2.5"      2500
            0.1234     p.toml:2: redundancy.std_dev_limit: 0.1234 has 4 decimals; at most 3 are kept
            -1.0       p.toml:2: redundancy.std_dev_limit: -1.0 is negative; it must be 0 or more
            1e3        p.toml:2: redundancy.std_dev_limit: "1e3" is not a decimal such as 3.0 or 2.5
            "2."       p.toml:2: redundancy.std_dev_limit: "2." is not a decimal such as 3.0 or 2.5
            true       p.toml:2: redundancy.std_dev_limit: expected a decimal such as 3.0, found a boolean
            5000000.0  p.toml:2: redundancy.std_dev_limit: 5000000.0 is too large"#]].assert_eq(&shown.join("\n"));
    }

    #[test]
    fn bad_policies_name_the_line() {
        check_error("seed = 1\nalgorithm = \"magic\"\n", expect![[r#"p.toml:2: unknown algorithm "magic"; known: sge-plain, sgeee, techila, fbsng, cigri"#]]);
        check_error("\n\ndispatch_timeout_secs = 0\n", expect!["p.toml:3: dispatch_timeout_secs must be at least 1 second"]);
        check_error("colour = 1\n", expect!["p.toml:1: unknown field `colour`, expected one of `engine_timeout_secs`, `dispatch_timeout_secs`, `dispatches_per_run_max`, `seed`, `load_formula`, `engine_tiers`, `greylist_affinity`, `redundancy`, `job_retention_secs`, `queue_sort_method`, `techila`, `output`, `suspend_thresholds`, `suspend_interval_secs`, `nsuspend`, `max_reservation`, `default_duration_secs`, `fbsng`, `cigri`, `flood`, `caps`, `algorithm`, `user_sort`, `halftime`, `compensation_factor`, `weight_priority`, `weight_urgency`, `weight_ticket`, `weight_waiting_time`, `weight_user`, `weight_project`, `weight_department`, `weight_job`, `weight_tickets_share`, `weight_tickets_functional`, `weight_deadline`, `slot_urgency`, `share_tree`, `fshare`, `oticket`, `departments`"]);
        check_error("engine_tiers = [\n  \"type=blade\",\n  \"blade\",\n]\n", expect![[r#"p.toml:3: engine_tiers[1]: engine tier "blade" is not written property=value"#]]);
        check_error("engine_tiers = [\"=blade\"]\n", expect![[r#"p.toml:1: engine_tiers[0]: engine tier "=blade" has an empty property name"#]]);
        check_error("greylist_affinity = -5\n", expect!["p.toml:1: invalid value: integer `-5`, expected u32"]);
        check_error("[redundancy]\nstrategy_effective_percent = 101\n", expect!["p.toml:2: redundancy.strategy_effective_percent is a percentage: 0 to 100, not 101"]);
        check_error("[redundancy]\n\nremaining_task_percent = 150\n", expect!["p.toml:3: redundancy.remaining_task_percent is a percentage: 0 to 100, not 150"]);
        check_error("[redundancy]\npoll_period_secs = 0\n", expect!["p.toml:2: redundancy.poll_period_secs must be more than 0 seconds"]);
        check_error("[redundancy]\npoll_period_secs = 0.0001\n", expect!["p.toml:2: redundancy.poll_period_secs: 0.0001 is not seconds with at most three decimals, such as 5 or 0.5"]);
        check_error("[redundancy]\npoll_period_secs = -1\n", expect!["p.toml:2: redundancy.poll_period_secs: -1 is not seconds with at most three decimals, such as 5 or 0.5"]);
        check_error("[redundancy]\npoll_period_secs = \"1\"\n", expect![[r#"p.toml:2: redundancy.poll_period_secs: "1" is not seconds with at most three decimals, such as 5 or 0.5"#]]);
        assert_eq!(parse_policy("[redundancy]\npoll_period_secs = 0.25\n", "p.toml").unwrap().redundancy.poll_period_ms, 250);
        check_error("[redundancy]\naverage_limit = 2.0001\n", expect!["p.toml:2: redundancy.average_limit: 2.0001 has 4 decimals; at most 3 are kept"]);
        check_error("[redundancy]\nstd_dev_limit = -2.0\n", expect!["p.toml:2: redundancy.std_dev_limit: -2.0 is negative; it must be 0 or more"]);
        check_error("[redundancy]\ncopies = 2\n", expect!["p.toml:2: unknown field `copies`, expected one of `strategy_effective_percent`, `poll_period_secs`, `percent_completed_strategy`, `remaining_task_percent`, `average_strategy`, `average_limit`, `std_dev_strategy`, `std_dev_limit`, `reschedule_first`, `copies_per_task_max`"]);
    }

    #[test]
    fn a_duration_past_a_year_is_refused_naming_the_key_and_its_line() {
        let max = u64::MAX / 1000;
        check_error(
            &format!("seed = 1\nengine_timeout_secs = {max}\n"),
            expect!["p.toml:2: engine_timeout_secs: 18446744073709551000 ms, longer than a year (31536000000 ms)"],
        );
        check_error(
            "job_retention_secs = 31536001\n",
            expect!["p.toml:1: job_retention_secs: 31536001000 ms, longer than a year (31536000000 ms)"],
        );
        check_error(
            "halftime = 9000\n",
            expect!["p.toml:1: halftime: 32400000000 ms, longer than a year (31536000000 ms)"],
        );
        check_error(
            "[redundancy]\npoll_period_secs = 99999999999\n",
            expect!["p.toml:2: redundancy.poll_period_secs: 99999999999000 ms, longer than a year (31536000000 ms)"],
        );
        check_error(
            "default_duration_secs = 99999999999\n",
            expect!["p.toml:1: default_duration_secs: 99999999999000 ms, longer than a year (31536000000 ms)"],
        );
        assert_eq!(parse_policy("job_retention_secs = 31536000\n", "p.toml").unwrap().job_retention_ms, 31_536_000_000);
    }

    #[test]
    fn caps_are_read_defaulted_shown_and_a_cap_of_0_is_refused() {
        assert_eq!(parse_policy("", "p.toml").unwrap().caps, CapsPolicy::default());
        let policy = parse_policy("[caps]\nmax_jobs_per_user = 5\nmax_tasks = 100\n", "p.toml").unwrap();
        assert_eq!(policy.caps, CapsPolicy { max_jobs_per_user: 5, max_tasks: 100, ..CapsPolicy::default() });
        assert_eq!(parse_policy(&policy_file_text(&policy), "shown.toml").unwrap().caps, policy.caps, "policy show gives them back");
        check_error("[caps]\n\nmax_jobs = 0\n", expect!["p.toml:3: caps.max_jobs: 0; a cap is at least 1"]);
        check_error("[caps]\nmax_job = 1\n", expect!["p.toml:2: unknown field `max_job`, expected one of `max_jobs_per_user`, `max_jobs`, `max_tasks_per_user`, `max_tasks`"]);
    }

    #[test]
    fn a_techila_section_is_read_and_bad_priorities_name_the_line() {
        let policy = parse_policy(
            "algorithm = \"techila\"\n[techila]\nmax_running_tasks = 500\nsimultaneous_projects = true\nuser_priorities = { alice = 2 }\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(policy.algorithm, crate::core::event::Algorithm::Techila);
        assert_eq!(policy.techila.max_running_tasks, 500);
        assert!(policy.techila.simultaneous_projects);
        assert_eq!(policy.techila.user_priorities.get("alice"), Some(&2));
        check_error("[techila]\nuser_priorities = { bob = 8 }\n", expect!["p.toml:2: techila.user_priorities.bob must be within 1..=7"]);
        check_error("[techila]\nuser_priorities = { bob = 0 }\n", expect!["p.toml:2: techila.user_priorities.bob must be within 1..=7"]);
        check_error("[techila]\nlicense = 5\n", expect!["p.toml:2: unknown field `license`, expected one of `max_running_tasks`, `simultaneous_projects`, `user_priorities`, `cycle_interval_secs`"]);
    }

    #[test]
    fn reservation_keys_are_read_and_a_max_reservation_beyond_1024_is_refused() {
        let policy = parse_policy("max_reservation = 4\ndefault_duration_secs = 600\n", "p.toml").unwrap();
        assert_eq!((policy.reservation.max_reservation, policy.reservation.default_duration_ms), (4, 600_000));
        let text = policy_file_text(&policy);
        assert_eq!(parse_policy(&text, "p.toml").unwrap().reservation, policy.reservation, "policy show gives it back");
        assert_eq!(parse_policy("", "p.toml").unwrap().reservation, crate::core::event::ReservationPolicy::default());
        check_error("max_reservation = 1025\n", expect!["p.toml:1: max_reservation may be at most 1024, not 1025"]);
        check_error("default_duration_secs = 0\n", expect!["p.toml:1: default_duration_secs must be at least 1 second"]);
    }

    #[test]
    fn an_fbsng_section_is_read_with_defaults_and_bad_queues_name_the_line() {
        let policy = parse_policy(
            "algorithm = \"fbsng\"\n[fbsng]\n[[fbsng.queues]]\nname = \"high\"\nqp_min = 5\nqpg = 7\nqpi = 3\n",
            "p.toml",
        )
        .expect("parses");
        let high = &policy.fbsng.queues[0];
        assert_eq!((high.qp_min, high.qp_max, high.qpi, high.qpd, high.qpg, high.spg), (5, 100, 3, 1, 7, 100));
        check_error(
            "[fbsng]\n[[fbsng.queues]]\nname = \"a\"\n[[fbsng.queues]]\nname = \"a\"\n",
            expect!["p.toml:4: fbsng.queues[1].name: queue a is defined twice"],
        );
        check_error("[fbsng]\nmin_run_interval_secs = 0\n", expect!["p.toml:2: fbsng.min_run_interval_secs must be within 1..=3600"]);
        check_error(
            "[fbsng]\n[[fbsng.queues]]\nname = \"a\"\nqp_min = 60\nqp_max = 50\n",
            expect!["p.toml:2: fbsng.queues[0].qp_max: 50 is below qp_min 60"],
        );
        check_error("[fbsng]\n[[fbsng.queues]]\nname = \"a\"\nqpx = 1\n", expect!["p.toml:4: unknown field `qpx`, expected one of `name`, `qp_min`, `qp_max`, `qpi`, `qpd`, `qpg`, `spg`"]);
    }

    #[test]
    fn a_cigri_section_is_read_with_defaults_and_bad_rows_name_the_line() {
        let policy = parse_policy(
            "algorithm = \"cigri\"\n[cigri]\nsink_ratio = 0.1\n[[cigri.affinity]]\nuser = \"alice\"\ncluster = \"lyon\"\n",
            "p.toml",
        )
        .expect("parses");
        assert_eq!(policy.algorithm, crate::core::event::Algorithm::Cigri);
        let cigri = &policy.cigri;
        assert_eq!((cigri.finalize_copies_max, cigri.sink_ratio_milli, cigri.sink_min_tasks, cigri.predictor_window_ms), (1, 100, 10, 3_600_000));
        assert_eq!((cigri.affinity[0].user.as_str(), cigri.affinity[0].cluster.as_str()), ("alice", "lyon"));
        check_error(
            "[cigri]\n[[cigri.affinity]]\nuser = \"a\"\ncluster = \"c\"\n[[cigri.affinity]]\nuser = \"a\"\ncluster = \"c\"\n",
            expect!["p.toml:5: cigri.affinity[1]: user a and cluster c are listed twice"],
        );
        check_error("[cigri]\nsink_ratio = 2.0\n", expect!["p.toml:2: cigri.sink_ratio must be within 0..=1"]);
        check_error("[cigri]\nfinalize_copies_max = 9\n", expect!["p.toml:2: cigri.finalize_copies_max: 9, more than 8"]);
        check_error("[cigri]\npredictor_window_secs = 0\n", expect!["p.toml:2: cigri.predictor_window_secs must be within 1..=604800"]);
        let many: String = (0..=crate::core::family::cigri::AFFINITIES_MAX)
            .map(|n| format!("[[cigri.affinity]]\nuser = \"u{n}\"\ncluster = \"c\"\n"))
            .collect();
        let error = parse_policy(&format!("[cigri]\n{many}"), "p.toml").expect_err("too many rows");
        assert!(error.to_string().ends_with("cigri.affinity: more than 256 rows"), "{error}");
        check_error("[cigri]\naffinities = 1\n", expect!["p.toml:2: unknown field `affinities`, expected one of `finalize_copies_max`, `sink_ratio`, `sink_min_tasks`, `predictor_window_secs`, `affinity`"]);
    }
}
