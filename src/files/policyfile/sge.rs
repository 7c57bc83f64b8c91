//! The policy file's Grid Engine keys (sched_conf(5), share_tree(5)), by Grid
//! Engine's own names: `user_sort`, `halftime` (hours), `compensation_factor`,
//! the `weight_*` of the dispatch priority and of the ticket policies, the
//! share tree as nested tables, functional shares (`[fshare]`), override
//! tickets (`[oticket]`) and departments. Every key is optional; absent ones
//! take Grid Engine's installer defaults ([`SgePolicy::grid_engine_defaults`]).

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::limit_milli;
use crate::core::event::{Algorithm, ShareTreeLeaf, ShareTreeNode};
use crate::core::family::sgeee::share_tree::SHARES_MAX;
use crate::files::jobfile::{FileText, JobFileError as FileError};
use crate::wire::{NAMED_AMOUNTS_MAX, SGE_NAME_BYTES_MAX, SHARE_TREE_NODES_MAX};

/// `[fshare]` and `[oticket]`: amounts by user, project (and department).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NamedTables {
    users: Option<Spanned<BTreeMap<String, u32>>>,
    projects: Option<Spanned<BTreeMap<String, u32>>>,
    departments: Option<Spanned<BTreeMap<String, u32>>>,
}

/// Declares a struct read from a TOML table that holds `algorithm` and Grid
/// Engine's keys beside its own: the policy file's top level (which a
/// scenario's `[policy]` is too). The keys are listed here, by Grid Engine's
/// names, and read by the one method it adds, `grid_engine`. (serde's
/// `flatten` would say this in one line, but it drops the spans every error
/// needs, and it cannot refuse unknown keys.)
macro_rules! with_grid_engine_keys {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($(#[$field_meta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        $vis struct $name {
            $($(#[$field_meta])* $field: $ty,)*
            algorithm: Option<toml::Spanned<String>>,
            user_sort: Option<bool>,
            halftime: Option<toml::Spanned<toml::Value>>,
            compensation_factor: Option<toml::Spanned<toml::Value>>,
            weight_priority: Option<toml::Spanned<toml::Value>>,
            weight_urgency: Option<toml::Spanned<toml::Value>>,
            weight_ticket: Option<toml::Spanned<toml::Value>>,
            weight_waiting_time: Option<toml::Spanned<toml::Value>>,
            weight_user: Option<toml::Spanned<toml::Value>>,
            weight_project: Option<toml::Spanned<toml::Value>>,
            weight_department: Option<toml::Spanned<toml::Value>>,
            weight_job: Option<toml::Spanned<toml::Value>>,
            weight_tickets_share: Option<u32>,
            weight_tickets_functional: Option<u32>,
            weight_deadline: Option<u32>,
            slot_urgency: Option<u32>,
            share_tree: Option<toml::Spanned<toml::Table>>,
            fshare: Option<$crate::files::policyfile::sge::NamedTables>,
            oticket: Option<$crate::files::policyfile::sge::NamedTables>,
            departments: Option<toml::Spanned<std::collections::BTreeMap<String, Vec<String>>>>,
        }

        impl $name {
            /// The algorithm and the Grid Engine keys, with Grid Engine's
            /// defaults for those left out.
            pub(crate) fn grid_engine(
                &self,
                file_text: $crate::files::jobfile::FileText<'_>,
            ) -> Result<($crate::core::event::Algorithm, $crate::core::event::SgePolicy), $crate::files::jobfile::JobFileError> {
                use $crate::files::policyfile::sge;
                let algorithm = sge::algorithm(file_text, &self.algorithm)?;
                let defaults = $crate::core::event::SgePolicy::grid_engine_defaults();
                let milli = |name: &str, value: &Option<toml::Spanned<toml::Value>>, default: u32| sge::milli(file_text, name, value, default);
                let fshare = self.fshare.as_ref();
                let oticket = self.oticket.as_ref();
                let sge = $crate::core::event::SgePolicy {
                    user_sort: self.user_sort.unwrap_or(defaults.user_sort),
                    halftime_ms: sge::halftime_ms(file_text, &self.halftime, defaults.halftime_ms)?,
                    compensation_factor_milli: milli("compensation_factor", &self.compensation_factor, defaults.compensation_factor_milli)?,
                    weight_priority_milli: milli("weight_priority", &self.weight_priority, defaults.weight_priority_milli)?,
                    weight_urgency_milli: milli("weight_urgency", &self.weight_urgency, defaults.weight_urgency_milli)?,
                    weight_ticket_milli: milli("weight_ticket", &self.weight_ticket, defaults.weight_ticket_milli)?,
                    weight_tickets_share: self.weight_tickets_share.unwrap_or(defaults.weight_tickets_share),
                    weight_tickets_functional: self.weight_tickets_functional.unwrap_or(defaults.weight_tickets_functional),
                    weight_waiting_time_milli: milli("weight_waiting_time", &self.weight_waiting_time, defaults.weight_waiting_time_milli)?,
                    weight_deadline: self.weight_deadline.unwrap_or(defaults.weight_deadline),
                    slot_urgency: self.slot_urgency.unwrap_or(defaults.slot_urgency),
                    weight_user_milli: milli("weight_user", &self.weight_user, defaults.weight_user_milli)?,
                    weight_project_milli: milli("weight_project", &self.weight_project, defaults.weight_project_milli)?,
                    weight_department_milli: milli("weight_department", &self.weight_department, defaults.weight_department_milli)?,
                    weight_job_milli: milli("weight_job", &self.weight_job, defaults.weight_job_milli)?,
                    share_tree: match &self.share_tree {
                        Some(tree) => sge::share_tree(file_text, tree)?,
                        None => Vec::new(),
                    },
                    functional_users: sge::named_table(file_text, "fshare.users", fshare.and_then(|f| f.users()))?,
                    functional_projects: sge::named_table(file_text, "fshare.projects", fshare.and_then(|f| f.projects()))?,
                    functional_departments: sge::named_table(file_text, "fshare.departments", fshare.and_then(|f| f.departments()))?,
                    departments: sge::departments(file_text, &self.departments)?,
                    override_users: sge::named_table(file_text, "oticket.users", oticket.and_then(|o| o.users()))?,
                    override_projects: sge::override_projects(file_text, oticket)?,
                };
                Ok((algorithm, sge))
            }
        }
    };
}
pub(crate) use with_grid_engine_keys;

type NamedTable = Spanned<BTreeMap<String, u32>>;

impl NamedTables {
    pub(crate) fn users(&self) -> Option<&NamedTable> {
        self.users.as_ref()
    }
    pub(crate) fn projects(&self) -> Option<&NamedTable> {
        self.projects.as_ref()
    }
    pub(crate) fn departments(&self) -> Option<&NamedTable> {
        self.departments.as_ref()
    }
}

/// `algorithm`, by the names [`Algorithm::from_name`] knows.
pub(crate) fn algorithm(file_text: FileText<'_>, name: &Option<Spanned<String>>) -> Result<Algorithm, FileError> {
    match name {
        Some(name) => Algorithm::from_name(name.get_ref()).ok_or_else(|| {
            file_text.at(name, format!("unknown algorithm {:?}; known: {}", name.get_ref(), Algorithm::NAMES.join(", ")))
        }),
        None => Ok(Algorithm::default()),
    }
}

pub(crate) fn milli(file_text: FileText<'_>, name: &str, value: &Option<Spanned<toml::Value>>, default: u32) -> Result<u32, FileError> {
    match value {
        Some(value) => limit_milli(file_text.text, value).map_err(|problem| file_text.at(value, format!("{name}: {problem}"))),
        None => Ok(default),
    }
}

/// `halftime`, in hours as in sched_conf(5), to ms.
pub(crate) fn halftime_ms(file_text: FileText<'_>, hours: &Option<Spanned<toml::Value>>, default_ms: u64) -> Result<u64, FileError> {
    match hours {
        Some(hours) => {
            let milli_hours = limit_milli(file_text.text, hours)
                .map_err(|problem| file_text.at(hours, format!("halftime (hours): {problem}")))?;
            Ok(u64::from(milli_hours) * 3_600)
        }
        None => Ok(default_ms),
    }
}

pub(crate) fn named_table(file_text: FileText<'_>, name: &str, table: Option<&NamedTable>) -> Result<BTreeMap<String, u32>, FileError> {
    let Some(table) = table else { return Ok(BTreeMap::new()) };
    check_names(file_text, name, table, table.get_ref().keys())?;
    Ok(table.get_ref().clone())
}

/// `[oticket.projects]`; `[oticket.departments]` is refused, as Grid Engine
/// gives override tickets to users, projects and jobs only.
pub(crate) fn override_projects(file_text: FileText<'_>, oticket: Option<&NamedTables>) -> Result<BTreeMap<String, u32>, FileError> {
    if let Some(departments) = oticket.and_then(NamedTables::departments) {
        return Err(file_text.at(departments, "oticket.departments: override tickets go to users and projects"));
    }
    named_table(file_text, "oticket.projects", oticket.and_then(NamedTables::projects))
}

/// `[departments]`: each department's users.
pub(crate) fn departments(
    file_text: FileText<'_>,
    departments: &Option<Spanned<BTreeMap<String, Vec<String>>>>,
) -> Result<BTreeMap<String, Vec<String>>, FileError> {
    let Some(departments) = departments else { return Ok(BTreeMap::new()) };
    let n_users: usize = departments.get_ref().values().map(|users| users.len().max(1)).sum();
    if n_users > NAMED_AMOUNTS_MAX {
        return Err(file_text.at(departments, format!("departments: {n_users} users, more than {NAMED_AMOUNTS_MAX}")));
    }
    check_names(file_text, "departments", departments, departments.get_ref().keys().chain(departments.get_ref().values().flatten()))?;
    Ok(departments.get_ref().clone())
}

fn check_names<'a, T>(
    file_text: FileText<'_>,
    table_name: &str,
    at: &Spanned<T>,
    names: impl Iterator<Item = &'a String>,
) -> Result<(), FileError> {
    let mut n = 0;
    for name in names {
        n += 1;
        if name.is_empty() || name.len() > SGE_NAME_BYTES_MAX {
            return Err(file_text.at(at, format!("{table_name}: {name:?} is not a name of 1 to {SGE_NAME_BYTES_MAX} bytes")));
        }
    }
    if n > NAMED_AMOUNTS_MAX {
        return Err(file_text.at(at, format!("{table_name}: {n} entries, more than {NAMED_AMOUNTS_MAX}")));
    }
    Ok(())
}

/// `[share_tree]`: each key a node, each node a table with its `shares` and
/// its children as sub-tables; a node without children is a leaf standing for
/// the user of its name (`project = true`: the project of its name; named
/// `default`: every user the tree does not name). Listed parents first.
pub(crate) fn share_tree(file_text: FileText<'_>, tree: &Spanned<toml::Table>) -> Result<Vec<ShareTreeNode>, FileError> {
    let mut nodes = Vec::new();
    let mut leaves = std::collections::BTreeSet::new();
    let mut pending: Vec<(Option<u32>, String, &toml::Table)> = Vec::new();
    for (name, value) in tree.get_ref().iter().rev() {
        let Some(table) = value.as_table() else {
            return Err(node_error(file_text, tree, name, "a node is a table with its shares".into()));
        };
        pending.push((None, name.clone(), table));
    }
    while let Some((parent, path, table)) = pending.pop() {
        if nodes.len() == SHARE_TREE_NODES_MAX {
            return Err(file_text.at(tree, format!("share_tree: more than {SHARE_TREE_NODES_MAX} nodes")));
        }
        let name = path.rsplit('.').next().unwrap_or(&path).to_string();
        let where_ = |message: String| node_error(file_text, tree, &path, message);
        let shares = match table.get("shares") {
            Some(toml::Value::Integer(n)) if (0..=i64::from(SHARES_MAX)).contains(n) => *n as u32,
            Some(other) => return Err(where_(format!("shares must be a whole number from 0 to {SHARES_MAX}, not {other}"))),
            None => return Err(where_("every node needs its shares".into())),
        };
        let project = match table.get("project") {
            Some(toml::Value::Boolean(project)) => *project,
            Some(other) => return Err(where_(format!("project must be true or false, not {other}"))),
            None => false,
        };
        let children: Vec<(&String, &toml::Value)> =
            table.iter().filter(|(key, _)| key.as_str() != "shares" && key.as_str() != "project").collect();
        let leaf = if !children.is_empty() {
            if project {
                return Err(where_("a node with children stands for no project; only a leaf may say project = true".into()));
            }
            None
        } else if project {
            Some(ShareTreeLeaf::Project(name.clone()))
        } else if name == "default" {
            Some(ShareTreeLeaf::DefaultUser)
        } else {
            Some(ShareTreeLeaf::User(name.clone()))
        };
        if let Some(leaf) = &leaf {
            if name.len() > SGE_NAME_BYTES_MAX {
                return Err(where_(format!("a name is at most {SGE_NAME_BYTES_MAX} bytes")));
            }
            if !leaves.insert(leaf.clone()) {
                return Err(where_("another leaf already stands for it".into()));
            }
        }
        let at = nodes.len() as u32;
        nodes.push(ShareTreeNode { name, parent, shares, leaf });
        for (child, value) in children.into_iter().rev() {
            let child_path = format!("{path}.{child}");
            let Some(table) = value.as_table() else {
                return Err(node_error(file_text, tree, &child_path, format!("{child} is neither shares, project nor a child node table")));
            };
            pending.push((Some(at), child_path, table));
        }
    }
    Ok(nodes)
}

/// An error about a node, at the line of its table if the file has one.
fn node_error(file_text: FileText<'_>, tree: &Spanned<toml::Table>, path: &str, message: String) -> FileError {
    let header = format!("share_tree.{path}]");
    match file_text.text.find(&header) {
        Some(offset) => file_text.error(offset, format!("share_tree.{path}: {message}")),
        None => file_text.at(tree, format!("share_tree.{path}: {message}")),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use expect_test::expect;

    use super::super::parse_policy;
    use crate::core::event::{Algorithm, ShareTreeLeaf};

    pub(in crate::files::policyfile) const TICKET_MODE: &str = r#"
algorithm = "sgeee"
halftime = 24
compensation_factor = 2.5
weight_tickets_share = 10000
weight_tickets_functional = 5000
weight_urgency = 0.2
weight_waiting_time = 0.278

[share_tree.physics]
shares = 60
[share_tree.physics.alice]
shares = 30
[share_tree.physics.default]
shares = 10
[share_tree.render]
shares = 40
project = true

[fshare.users]
bob = 3
[fshare.departments]
staff = 1
[departments]
staff = ["bob", "carol"]
[oticket.users]
carol = 1000
"#;

    #[test]
    fn a_ticket_mode_policy_reads_grid_engine_keys_and_defaults_the_rest() {
        let policy = parse_policy(TICKET_MODE, "p.toml").unwrap();
        assert_eq!(policy.algorithm, Algorithm::Sgeee);
        let sge = &policy.sge;
        assert_eq!(sge.halftime_ms, 24 * 3_600_000);
        assert_eq!(sge.compensation_factor_milli, 2_500);
        assert_eq!((sge.weight_urgency_milli, sge.weight_waiting_time_milli), (200, 278));
        assert_eq!((sge.weight_priority_milli, sge.weight_ticket_milli, sge.weight_deadline), (1_000, 10, 3_600_000));
        let tree: Vec<String> = sge
            .share_tree
            .iter()
            .map(|node| format!("{} parent {:?} shares {} leaf {:?}", node.name, node.parent, node.shares, node.leaf))
            .collect();
        expect![[r#"
            physics parent None shares 60 leaf None
            alice parent Some(0) shares 30 leaf Some(User("alice"))
            default parent Some(0) shares 10 leaf Some(DefaultUser)
            render parent None shares 40 leaf Some(Project("render"))"#]]
        .assert_eq(&tree.join("\n"));
        assert_eq!(sge.functional_users.get("bob"), Some(&3));
        assert_eq!(sge.departments.get("staff").map(Vec::len), Some(2));
        assert_eq!(sge.override_users.get("carol"), Some(&1000));
        assert!(sge.share_tree.iter().all(|node| node.leaf != Some(ShareTreeLeaf::Project("physics".into()))));
    }

    #[test]
    fn a_bad_share_tree_is_refused_at_its_line() {
        let check = |text: &str, expected: expect_test::Expect| {
            expected.assert_eq(&parse_policy(text, "p.toml").unwrap_err().to_string());
        };
        check(
            "algorithm = \"sgeee\"\n[share_tree.a]\nshares = 1\n[share_tree.a.b]\nshares = 2000000\n",
            expect!["p.toml:4: share_tree.a.b: shares must be a whole number from 0 to 1000000, not 2000000"],
        );
        check(
            "[share_tree.a]\nshares = 1\nproject = true\n[share_tree.a.b]\nshares = 1\n",
            expect!["p.toml:1: share_tree.a: a node with children stands for no project; only a leaf may say project = true"],
        );
        check(
            "[share_tree.a]\nshare = 1\n",
            expect!["p.toml:1: share_tree.a: every node needs its shares"],
        );
        check("weight_ticket = -1\n", expect!["p.toml:1: weight_ticket: -1 is negative; it must be 0 or more"]);
        check(
            "[oticket.departments]\nstaff = 1\n",
            expect!["p.toml:1: oticket.departments: override tickets go to users and projects"],
        );
    }
}
