//! The limits of a policy, in one check that the wire decoder, the policy file
//! reader and the fold all run ([`check_policy`]): a policy past one does not
//! decode, does not read, and, should one reach the log by another way, is
//! refused by the fold with the field named.
//!
//! - every duration at most a year ([`POLICY_DURATION_MS_MAX`]; some sections
//!   hold theirs to less), so no timeout or retention is "never" by accident;
//! - a share tree of at most [`SHARE_TREE_NODES_MAX`] nodes, each parent
//!   listed before its children, at most [`SHARE_TREE_DEPTH_MAX`] levels deep
//!   (reading and rendering a tree cost its nodes times its depth);
//! - the caps ([`CapsPolicy`]) at least 1;
//! - the limits of the families' own sections (FBSNG, CiGri, flood control).

use std::fmt;

use super::event::{Policy, ORDERS_PER_BATCH_MAX, SUSPEND_INTERVAL_MS_MAX, WORK_DIR_RETENTION_MS_LIMIT};

/// The longest duration a policy may give anything: a year (365 days) of log time.
pub const POLICY_DURATION_MS_MAX: u64 = 365 * 24 * 3_600_000;
/// Most nodes a share tree may have (Grid Engine's trees have tens to hundreds).
pub const SHARE_TREE_NODES_MAX: usize = 10_000;
/// Most levels of a share tree below its root (Grid Engine's have two to four).
pub const SHARE_TREE_DEPTH_MAX: usize = 64;

/// The first limit a policy breaks: the field, by its path in the policy
/// (`engine_timeout_ms`, `sge.share_tree[12].parent`, `caps.max_jobs`), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyProblem {
    pub field: String,
    pub problem: String,
}

impl fmt::Display for PolicyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.problem)
    }
}

fn problem(field: impl Into<String>, problem: impl Into<String>) -> PolicyProblem {
    PolicyProblem { field: field.into(), problem: problem.into() }
}

/// Every duration of a policy outside its own section checks: (field, value,
/// least, most), the shared ones, then those of the families' sections that
/// are checked with them (`family::policy_durations`). Sections with checks
/// of their own (FBSNG, CiGri, flood control) hold theirs to less than a
/// year there.
fn durations(policy: &Policy) -> Vec<(&'static str, u64, u64, u64)> {
    let year = POLICY_DURATION_MS_MAX;
    let mut durations = vec![
        ("engine_timeout_ms", policy.engine_timeout_ms, 1, year),
        ("dispatch_timeout_ms", policy.dispatch_timeout_ms, 1, year),
        ("job_retention_ms", policy.job_retention_ms, 0, year),
        ("redundancy.poll_period_ms", policy.redundancy.poll_period_ms, 0, year),
        ("sge.halftime_ms", policy.sge.halftime_ms, 0, year),
        ("reservation.default_duration_ms", policy.reservation.default_duration_ms, 0, year),
        ("output.work_dir_retention_ms", policy.output.work_dir_retention_ms, 1, WORK_DIR_RETENTION_MS_LIMIT),
        ("suspend_thresholds.interval_ms", policy.suspend_thresholds.interval_ms, 1, SUSPEND_INTERVAL_MS_MAX),
    ];
    durations.extend(super::family::policy_durations(policy));
    durations
}

/// A duration in words for a limit: `a year`, `a day`, or its ms.
fn duration_words(ms: u64) -> String {
    match ms {
        POLICY_DURATION_MS_MAX => format!("a year ({ms} ms)"),
        86_400_000 => format!("a day ({ms} ms)"),
        3_600_000 => format!("an hour ({ms} ms)"),
        _ => format!("{ms} ms"),
    }
}

/// Checks every limit of `policy` (see the module docs); the first broken.
pub fn check_policy(policy: &Policy) -> Result<(), PolicyProblem> {
    if policy.dispatches_per_run_max == 0 || policy.dispatches_per_run_max as usize > ORDERS_PER_BATCH_MAX {
        return Err(problem(
            "dispatches_per_run_max",
            format!("{}, not within 1..={ORDERS_PER_BATCH_MAX}", policy.dispatches_per_run_max),
        ));
    }
    for (field, ms, least, most) in durations(policy) {
        if ms < least {
            return Err(problem(field, format!("{ms} ms; it must be at least {least} ms")));
        }
        if ms > most {
            return Err(problem(field, format!("{ms} ms, longer than {}", duration_words(most))));
        }
    }
    let redundancy = &policy.redundancy;
    for (field, percent) in [
        ("redundancy.strategy_effective_percent", redundancy.strategy_effective_percent),
        ("redundancy.remaining_task_percent", redundancy.remaining_task_percent),
    ] {
        if percent > 100 {
            return Err(problem(field, format!("{percent}, not a percentage within 0..=100")));
        }
    }
    check_share_tree(&policy.sge.share_tree)?;
    let caps = &policy.caps;
    for (field, cap) in [
        ("caps.max_jobs_per_user", u64::from(caps.max_jobs_per_user)),
        ("caps.max_jobs", u64::from(caps.max_jobs)),
        ("caps.max_tasks_per_user", caps.max_tasks_per_user),
        ("caps.max_tasks", caps.max_tasks),
    ] {
        if cap == 0 {
            return Err(problem(field, "0; a cap is at least 1"));
        }
    }
    let within = |section: &str, (field, why): (String, String)| problem(format!("{section}.{field}"), why);
    super::family::check_policy_sections(policy).map_err(|(section, p)| within(section, p))?;
    if let Some(flood) = &policy.flood {
        super::schedule::flood::check_policy(flood).map_err(|p| within("flood", p))?;
    }
    Ok(())
}

/// At most [`SHARE_TREE_NODES_MAX`] nodes, parents listed first, no leaf a
/// parent, and at most [`SHARE_TREE_DEPTH_MAX`] levels. One pass.
fn check_share_tree(nodes: &[super::event::ShareTreeNode]) -> Result<(), PolicyProblem> {
    if nodes.len() > SHARE_TREE_NODES_MAX {
        return Err(problem("sge.share_tree", format!("{} nodes, more than {SHARE_TREE_NODES_MAX}", nodes.len())));
    }
    let mut depths: Vec<usize> = Vec::with_capacity(nodes.len());
    for (at, node) in nodes.iter().enumerate() {
        let depth = match node.parent {
            None => 1,
            Some(parent) => {
                let field = format!("sge.share_tree[{at}].parent");
                let Some(&above) = depths.get(parent as usize) else {
                    return Err(problem(field, format!("parent {parent} is not an earlier node")));
                };
                if nodes[parent as usize].leaf.is_some() {
                    return Err(problem(field, format!("parent {parent} is a leaf")));
                }
                above + 1
            }
        };
        if depth > SHARE_TREE_DEPTH_MAX {
            return Err(problem(
                format!("sge.share_tree[{at}]"),
                format!("node {} is {depth} levels deep, more than {SHARE_TREE_DEPTH_MAX}", node.name),
            ));
        }
        depths.push(depth);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::event::{CapsPolicy, ShareTreeLeaf, ShareTreeNode};

    #[test]
    fn the_default_policy_is_within_every_limit() {
        assert_eq!(check_policy(&Policy::default()), Ok(()));
    }

    #[test]
    fn a_duration_of_u64_max_is_refused_with_its_field_named() {
        let mut with_max: Vec<(&str, Policy)> = Vec::new();
        let mut policy = Policy { engine_timeout_ms: u64::MAX, ..Policy::default() };
        with_max.push(("engine_timeout_ms", policy.clone()));
        policy = Policy { dispatch_timeout_ms: u64::MAX, ..Policy::default() };
        with_max.push(("dispatch_timeout_ms", policy.clone()));
        policy = Policy { job_retention_ms: u64::MAX, ..Policy::default() };
        with_max.push(("job_retention_ms", policy.clone()));
        policy = Policy::default();
        policy.redundancy.poll_period_ms = u64::MAX;
        with_max.push(("redundancy.poll_period_ms", policy.clone()));
        policy = Policy::default();
        policy.sge.halftime_ms = u64::MAX;
        with_max.push(("sge.halftime_ms", policy.clone()));
        policy = Policy::default();
        policy.reservation.default_duration_ms = u64::MAX;
        with_max.push(("reservation.default_duration_ms", policy.clone()));
        policy = Policy::default();
        policy.output.work_dir_retention_ms = u64::MAX;
        with_max.push(("output.work_dir_retention_ms", policy.clone()));
        policy = Policy::default();
        policy.suspend_thresholds.interval_ms = u64::MAX;
        with_max.push(("suspend_thresholds.interval_ms", policy.clone()));
        policy = Policy::default();
        policy.techila.cycle_interval_ms = u64::MAX;
        with_max.push(("techila.cycle_interval_ms", policy.clone()));
        policy = Policy::default();
        policy.cigri.predictor_window_ms = u64::MAX;
        with_max.push(("cigri.predictor_window_ms", policy.clone()));
        policy = Policy::default();
        policy.fbsng.min_run_interval_ms = u64::MAX;
        with_max.push(("fbsng.min_run_interval_ms", policy.clone()));
        policy = Policy { flood: Some(crate::core::event::FloodPolicy { interval_ms: u64::MAX, ..Default::default() }), ..Policy::default() };
        with_max.push(("flood.interval_secs", policy));
        assert_eq!(with_max.len(), durations(&Policy::default()).len() + 3, "every duration is tried");
        for (field, policy) in with_max {
            let refused = check_policy(&policy).expect_err(field);
            assert_eq!(refused.field, field, "{refused}");
        }
        let year = Policy { engine_timeout_ms: POLICY_DURATION_MS_MAX, job_retention_ms: POLICY_DURATION_MS_MAX, ..Policy::default() };
        assert_eq!(check_policy(&year), Ok(()), "a year itself is allowed");
        let refused = check_policy(&Policy { job_retention_ms: POLICY_DURATION_MS_MAX + 1, ..Policy::default() }).unwrap_err();
        assert_eq!(refused.to_string(), "job_retention_ms: 31536000001 ms, longer than a year (31536000000 ms)");
    }

    fn chain(levels: usize) -> Vec<ShareTreeNode> {
        (0..levels)
            .map(|n| ShareTreeNode {
                name: format!("n{n}"),
                parent: n.checked_sub(1).map(|p| p as u32),
                shares: 1,
                leaf: (n + 1 == levels).then(|| ShareTreeLeaf::User("alice".into())),
            })
            .collect()
    }

    #[test]
    fn a_share_tree_deeper_than_64_levels_is_refused_and_one_of_64_is_not() {
        let mut policy = Policy::default();
        policy.sge.share_tree = chain(SHARE_TREE_DEPTH_MAX);
        assert_eq!(check_policy(&policy), Ok(()));
        policy.sge.share_tree = chain(SHARE_TREE_DEPTH_MAX + 1);
        let refused = check_policy(&policy).unwrap_err();
        assert_eq!(refused.field, "sge.share_tree[64]");
        assert!(refused.problem.contains("65 levels deep, more than 64"), "{refused}");
        policy.sge.share_tree = chain(10_000);
        assert_eq!(check_policy(&policy).unwrap_err().field, "sge.share_tree[64]", "the issue's 10,000 levels");
        let mut later_parent = chain(3);
        later_parent[1].parent = Some(2);
        policy.sge.share_tree = later_parent;
        assert_eq!(check_policy(&policy).unwrap_err().field, "sge.share_tree[1].parent");
    }

    #[test]
    fn a_cap_of_0_is_refused() {
        for caps in [
            CapsPolicy { max_jobs_per_user: 0, ..CapsPolicy::default() },
            CapsPolicy { max_jobs: 0, ..CapsPolicy::default() },
            CapsPolicy { max_tasks_per_user: 0, ..CapsPolicy::default() },
            CapsPolicy { max_tasks: 0, ..CapsPolicy::default() },
        ] {
            let refused = check_policy(&Policy { caps, ..Policy::default() }).unwrap_err();
            assert!(refused.field.starts_with("caps.") && refused.problem.contains("at least 1"), "{refused}");
        }
    }
}
