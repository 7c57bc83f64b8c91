//! Grid Engine's job-ordering policy (`SgePolicy`) to and from the wire, with
//! its limits: a policy over them does not decode, so the fold never meets a
//! share tree too large to walk in every scheduling run.

use std::collections::BTreeMap;

use super::{proto, FieldProblem, WireError};
use crate::core::event::{SgePolicy, ShareTreeLeaf, ShareTreeNode};
use crate::core::family::sgeee::share_tree::SHARES_MAX;

pub use crate::core::policy_limits::SHARE_TREE_NODES_MAX;
/// Most entries in each table of shares or tickets, and most users over all departments.
pub const NAMED_AMOUNTS_MAX: usize = 10_000;
/// Longest user, project, department or node name, in bytes.
pub const SGE_NAME_BYTES_MAX: usize = 256;

pub(super) fn sge_to_proto(sge: &SgePolicy) -> Option<proto::SgePolicy> {
    let named = |table: &BTreeMap<String, u32>| {
        table.iter().map(|(name, &amount)| proto::NamedAmount { name: name.clone(), amount }).collect()
    };
    let message = proto::SgePolicy {
        user_sort: sge.user_sort,
        halftime_ms: sge.halftime_ms,
        compensation_factor_milli: sge.compensation_factor_milli,
        weight_priority_milli: sge.weight_priority_milli,
        weight_urgency_milli: sge.weight_urgency_milli,
        weight_ticket_milli: sge.weight_ticket_milli,
        weight_tickets_share: sge.weight_tickets_share,
        weight_tickets_functional: sge.weight_tickets_functional,
        weight_waiting_time_milli: sge.weight_waiting_time_milli,
        weight_deadline: sge.weight_deadline,
        slot_urgency: sge.slot_urgency,
        weight_user_milli: sge.weight_user_milli,
        weight_project_milli: sge.weight_project_milli,
        weight_department_milli: sge.weight_department_milli,
        weight_job_milli: sge.weight_job_milli,
        share_tree: sge
            .share_tree
            .iter()
            .map(|node| proto::ShareTreeNode {
                name: node.name.clone(),
                parent: node.parent,
                shares: node.shares,
                leaf: node.leaf.as_ref().map(|leaf| match leaf {
                    ShareTreeLeaf::User(name) => proto::share_tree_node::Leaf::User(name.clone()),
                    ShareTreeLeaf::Project(name) => proto::share_tree_node::Leaf::Project(name.clone()),
                    ShareTreeLeaf::DefaultUser => proto::share_tree_node::Leaf::DefaultUser(true),
                }),
            })
            .collect(),
        functional_users: named(&sge.functional_users),
        functional_projects: named(&sge.functional_projects),
        functional_departments: named(&sge.functional_departments),
        departments: sge
            .departments
            .iter()
            .map(|(name, users)| proto::Department { name: name.clone(), users: users.clone() })
            .collect(),
        override_users: named(&sge.override_users),
        override_projects: named(&sge.override_projects),
    };
    (message != proto::SgePolicy::default()).then_some(message)
}

pub(super) fn sge(m: Option<proto::SgePolicy>) -> Result<SgePolicy, WireError> {
    let m = m.unwrap_or_default();
    Ok(SgePolicy {
        user_sort: m.user_sort,
        halftime_ms: m.halftime_ms,
        compensation_factor_milli: m.compensation_factor_milli,
        weight_priority_milli: m.weight_priority_milli,
        weight_urgency_milli: m.weight_urgency_milli,
        weight_ticket_milli: m.weight_ticket_milli,
        weight_tickets_share: m.weight_tickets_share,
        weight_tickets_functional: m.weight_tickets_functional,
        weight_waiting_time_milli: m.weight_waiting_time_milli,
        weight_deadline: m.weight_deadline,
        slot_urgency: m.slot_urgency,
        weight_user_milli: m.weight_user_milli,
        weight_project_milli: m.weight_project_milli,
        weight_department_milli: m.weight_department_milli,
        weight_job_milli: m.weight_job_milli,
        share_tree: share_tree(m.share_tree)?,
        functional_users: named_amounts("functional_users", m.functional_users)?,
        functional_projects: named_amounts("functional_projects", m.functional_projects)?,
        functional_departments: named_amounts("functional_departments", m.functional_departments)?,
        departments: departments(m.departments)?,
        override_users: named_amounts("override_users", m.override_users)?,
        override_projects: named_amounts("override_projects", m.override_projects)?,
    })
}

fn problem(field: &str, text: String) -> WireError {
    WireError::at(field, FieldProblem::Inconsistent(text))
}

fn check_name(field: &str, name: &str) -> Result<(), WireError> {
    if name.is_empty() || name.len() > SGE_NAME_BYTES_MAX {
        return Err(problem(field, format!("a name of 1 to {SGE_NAME_BYTES_MAX} bytes, not {}", name.len())));
    }
    Ok(())
}

fn check_count(field: &str, n: usize, max: usize) -> Result<(), WireError> {
    if n > max {
        return Err(problem(field, format!("{n} entries, more than {max}")));
    }
    Ok(())
}

fn share_tree(nodes: Vec<proto::ShareTreeNode>) -> Result<Vec<ShareTreeNode>, WireError> {
    check_count("share_tree", nodes.len(), SHARE_TREE_NODES_MAX)?;
    let mut out = Vec::with_capacity(nodes.len());
    let mut leaves = std::collections::BTreeSet::new();
    for (at, node) in nodes.into_iter().enumerate() {
        let field = format!("share_tree[{at}]");
        check_name(&format!("{field}.name"), &node.name)?;
        if node.shares > SHARES_MAX {
            return Err(problem(&format!("{field}.shares"), format!("{} shares, more than {SHARES_MAX}", node.shares)));
        }
        if let Some(parent) = node.parent {
            if parent as usize >= at {
                return Err(problem(&format!("{field}.parent"), format!("parent {parent} is not an earlier node")));
            }
            if out.get(parent as usize).is_some_and(|p: &ShareTreeNode| p.leaf.is_some()) {
                return Err(problem(&format!("{field}.parent"), format!("parent {parent} is a leaf")));
            }
        }
        let leaf = match node.leaf {
            None => None,
            Some(proto::share_tree_node::Leaf::User(name)) => Some(ShareTreeLeaf::User(name)),
            Some(proto::share_tree_node::Leaf::Project(name)) => Some(ShareTreeLeaf::Project(name)),
            Some(proto::share_tree_node::Leaf::DefaultUser(_)) => Some(ShareTreeLeaf::DefaultUser),
        };
        if let Some(ShareTreeLeaf::User(name) | ShareTreeLeaf::Project(name)) = &leaf {
            check_name(&format!("{field}.leaf"), name)?;
        }
        if leaf.as_ref().is_some_and(|leaf| !leaves.insert(leaf.clone())) {
            return Err(problem(&format!("{field}.leaf"), "names a user or project another leaf names".into()));
        }
        out.push(ShareTreeNode { name: node.name, parent: node.parent, shares: node.shares, leaf });
    }
    Ok(out)
}

pub(super) fn named_amounts(field: &str, entries: Vec<proto::NamedAmount>) -> Result<BTreeMap<String, u32>, WireError> {
    check_count(field, entries.len(), NAMED_AMOUNTS_MAX)?;
    let mut table = BTreeMap::new();
    for (at, entry) in entries.into_iter().enumerate() {
        check_name(&format!("{field}[{at}].name"), &entry.name)?;
        if table.insert(entry.name, entry.amount).is_some() {
            return Err(problem(&format!("{field}[{at}].name"), "a name listed twice".into()));
        }
    }
    Ok(table)
}

fn departments(entries: Vec<proto::Department>) -> Result<BTreeMap<String, Vec<String>>, WireError> {
    check_count("departments", entries.iter().map(|d| d.users.len().max(1)).sum(), NAMED_AMOUNTS_MAX)?;
    let mut table = BTreeMap::new();
    for (at, department) in entries.into_iter().enumerate() {
        check_name(&format!("departments[{at}].name"), &department.name)?;
        for (u, user) in department.users.iter().enumerate() {
            check_name(&format!("departments[{at}].users[{u}]"), user)?;
        }
        if table.insert(department.name, department.users).is_some() {
            return Err(problem(&format!("departments[{at}].name"), "a department listed twice".into()));
        }
    }
    Ok(table)
}
