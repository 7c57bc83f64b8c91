//! The policy as the policy file writes it: what `gridfold policy show` and the
//! web view print, by the names `policy apply` reads (`engine_timeout_secs`,
//! `halftime` in hours, weights as decimals, the share tree as nested tables),
//! so that a person reads the keys docs/operators.md documents, and `policy show >
//! p.toml; policy apply p.toml` applies the same policy again.
//!
//! Every field is written, defaults included: the text alone says what is in
//! force. A value the file cannot say exactly (a duration published on the wire
//! in ms that is not whole seconds, a seed past TOML's integers) is written as
//! near as the file can, with a comment saying what it is.

use std::collections::BTreeMap;

use toml::{Table, Value};

use crate::core::event::{Policy, ShareTreeLeaf, ShareTreeNode};

/// The policy as policy-file TOML.
pub fn policy_file_text(policy: &Policy) -> String {
    let mut notes = Vec::new();
    let mut top = Table::new();
    top.insert("algorithm".into(), policy.algorithm.name().into());
    secs(&mut top, &mut notes, "engine_timeout_secs", policy.engine_timeout_ms);
    secs(&mut top, &mut notes, "dispatch_timeout_secs", policy.dispatch_timeout_ms);
    secs(&mut top, &mut notes, "job_retention_secs", policy.job_retention_ms);
    top.insert("dispatches_per_run_max".into(), int(u64::from(policy.dispatches_per_run_max)));
    match i64::try_from(policy.seed) {
        Ok(seed) => {
            top.insert("seed".into(), Value::Integer(seed));
        }
        Err(_) => notes.push(format!("seed is {}, past what a policy file can hold (2^63 - 1)", policy.seed)),
    }
    top.insert("queue_sort_method".into(), policy.queue_sort_method.name().into());
    top.insert("engine_tiers".into(), Value::Array(policy.engine_tiers.iter().map(|t| Value::from(t.as_str())).collect()));
    top.insert("greylist_affinity".into(), int(u64::from(policy.greylist_affinity)));
    let thresholds = &policy.suspend_thresholds;
    if !thresholds.thresholds.is_empty() {
        let list: Vec<String> = thresholds
            .thresholds
            .iter()
            .map(|(name, threshold)| format!("{name}={}", milli_decimal(*threshold)))
            .collect();
        top.insert("suspend_thresholds".into(), list.join(",").into());
    }
    secs(&mut top, &mut notes, "suspend_interval_secs", thresholds.interval_ms);
    top.insert("nsuspend".into(), int(u64::from(thresholds.nsuspend)));
    top.insert("max_reservation".into(), int(u64::from(policy.reservation.max_reservation)));
    secs(&mut top, &mut notes, "default_duration_secs", policy.reservation.default_duration_ms);

    let mut load_formula = Table::new();
    load_formula.insert("slots_weight".into(), int(u64::from(policy.load_formula.slots_weight)));
    load_formula.insert("load_weight".into(), int(u64::from(policy.load_formula.load_weight)));
    let expression = policy.load_formula.expression.to_string();
    if !expression.is_empty() {
        load_formula.insert("expression".into(), expression.into());
    }
    top.insert("load_formula".into(), Value::Table(load_formula));

    let r = &policy.redundancy;
    let mut redundancy = Table::new();
    redundancy.insert("strategy_effective_percent".into(), int(u64::from(r.strategy_effective_percent)));
    redundancy.insert("poll_period_secs".into(), decimal_secs(r.poll_period_ms));
    redundancy.insert("percent_completed_strategy".into(), r.percent_completed_strategy.into());
    redundancy.insert("remaining_task_percent".into(), int(u64::from(r.remaining_task_percent)));
    redundancy.insert("average_strategy".into(), r.average_strategy.into());
    redundancy.insert("average_limit".into(), milli(r.average_limit_milli));
    redundancy.insert("std_dev_strategy".into(), r.std_dev_strategy.into());
    redundancy.insert("std_dev_limit".into(), milli(r.std_dev_limit_milli));
    redundancy.insert("reschedule_first".into(), r.reschedule_first.into());
    redundancy.insert("copies_per_task_max".into(), int(u64::from(r.copies_per_task_max)));
    top.insert("redundancy".into(), Value::Table(redundancy));

    grid_engine_keys(policy, &mut top, &mut notes);

    let t = &policy.techila;
    let mut techila = Table::new();
    techila.insert("max_running_tasks".into(), int(u64::from(t.max_running_tasks)));
    techila.insert("simultaneous_projects".into(), t.simultaneous_projects.into());
    techila.insert("user_priorities".into(), Value::Table(amounts(&t.user_priorities)));
    top.insert("techila".into(), Value::Table(techila));

    let o = &policy.output;
    let mut output = Table::new();
    output.insert("task_bytes_max".into(), int(o.task_bytes_max));
    output.insert("job_bytes_max".into(), int(o.job_bytes_max));
    secs(&mut output, &mut notes, "work_dir_retention_secs", o.work_dir_retention_ms);
    top.insert("output".into(), Value::Table(output));

    let c = &policy.caps;
    let mut caps = Table::new();
    caps.insert("max_jobs_per_user".into(), int(u64::from(c.max_jobs_per_user)));
    caps.insert("max_jobs".into(), int(u64::from(c.max_jobs)));
    caps.insert("max_tasks_per_user".into(), int(c.max_tasks_per_user));
    caps.insert("max_tasks".into(), int(c.max_tasks));
    top.insert("caps".into(), Value::Table(caps));

    if policy.fbsng != crate::core::event::FbsngPolicy::default() {
        top.insert("fbsng".into(), Value::Table(super::fbsng::render(&policy.fbsng)));
    }
    if let Some(flood) = &policy.flood {
        top.insert("flood".into(), Value::Table(super::flood::render(flood)));
    }
    if policy.cigri != crate::core::event::CigriPolicy::default() {
        top.insert("cigri".into(), Value::Table(super::cigri::render(&policy.cigri)));
    }

    let mut text: String = notes.iter().map(|note| format!("# note: {note}\n")).collect();
    text += &toml::to_string(&top).unwrap_or_else(|e| format!("# the policy has no TOML form: {e}\n"));
    text += &share_tree_text(&policy.sge.share_tree);
    text
}

/// Grid Engine's keys, at the top level as sched_conf(5) and share_tree(5) name them.
fn grid_engine_keys(policy: &Policy, top: &mut Table, notes: &mut Vec<String>) {
    let sge = &policy.sge;
    top.insert("user_sort".into(), sge.user_sort.into());
    if !sge.halftime_ms.is_multiple_of(3_600) {
        notes.push(format!("halftime is {} ms, shown to the thousandth of an hour", sge.halftime_ms));
    }
    top.insert("halftime".into(), milli(u32::try_from(sge.halftime_ms / 3_600).unwrap_or(u32::MAX)));
    let weights = [
        ("compensation_factor", sge.compensation_factor_milli),
        ("weight_priority", sge.weight_priority_milli),
        ("weight_urgency", sge.weight_urgency_milli),
        ("weight_ticket", sge.weight_ticket_milli),
        ("weight_waiting_time", sge.weight_waiting_time_milli),
        ("weight_user", sge.weight_user_milli),
        ("weight_project", sge.weight_project_milli),
        ("weight_department", sge.weight_department_milli),
        ("weight_job", sge.weight_job_milli),
    ];
    for (name, value) in weights {
        top.insert(name.into(), milli(value));
    }
    for (name, value) in [
        ("weight_tickets_share", sge.weight_tickets_share),
        ("weight_tickets_functional", sge.weight_tickets_functional),
        ("weight_deadline", sge.weight_deadline),
        ("slot_urgency", sge.slot_urgency),
    ] {
        top.insert(name.into(), int(u64::from(value)));
    }
    let mut fshare = Table::new();
    for (name, table) in [
        ("users", &sge.functional_users),
        ("projects", &sge.functional_projects),
        ("departments", &sge.functional_departments),
    ] {
        if !table.is_empty() {
            fshare.insert(name.into(), Value::Table(amounts(table)));
        }
    }
    if !fshare.is_empty() {
        top.insert("fshare".into(), Value::Table(fshare));
    }
    let mut oticket = Table::new();
    for (name, table) in [("users", &sge.override_users), ("projects", &sge.override_projects)] {
        if !table.is_empty() {
            oticket.insert(name.into(), Value::Table(amounts(table)));
        }
    }
    if !oticket.is_empty() {
        top.insert("oticket".into(), Value::Table(oticket));
    }
    if !sge.departments.is_empty() {
        let departments = sge
            .departments
            .iter()
            .map(|(name, users)| (name.clone(), Value::Array(users.iter().map(|u| Value::from(u.as_str())).collect())))
            .collect();
        top.insert("departments".into(), Value::Table(departments));
    }
}

/// The share tree as the file writes it: a table `[share_tree.NAME]` for each
/// node under the root, with its `shares`, `project = true` for a project
/// leaf, and each child as an inline table (`alice = { shares = 1 }`), nested
/// as deep as the tree. Each node's name is written once, so the text grows
/// with the tree's size, not with its size times its depth, as a table
/// header for every node would (`[share_tree.a.b.c]` repeats every ancestor).
fn share_tree_text(nodes: &[ShareTreeNode]) -> String {
    let mut children: BTreeMap<Option<u32>, Vec<usize>> = BTreeMap::new();
    for (n, node) in nodes.iter().enumerate() {
        children.entry(node.parent).or_default().push(n);
    }
    let kids = |n: Option<usize>| children.get(&n.map(|n| n as u32)).map(Vec::as_slice).unwrap_or_default();
    let mut text = String::new();
    for &n in kids(None) {
        text += &format!("\n[share_tree.{}]\nshares = {}\n", key(&nodes[n].name), nodes[n].shares);
        if matches!(nodes[n].leaf, Some(ShareTreeLeaf::Project(_))) {
            text += "project = true\n";
        }
        for &child in kids(Some(n)) {
            text += &format!("{} = ", key(&nodes[child].name));
            inline_node(nodes, child, &kids, &mut text);
            text.push('\n');
        }
    }
    text
}

/// `{ shares = N, project = true, child = { ... } }`: one node and everything
/// under it. The tree is at most `SHARE_TREE_DEPTH_MAX` levels deep, so the
/// recursion is too.
fn inline_node<'a>(nodes: &[ShareTreeNode], n: usize, kids: &impl Fn(Option<usize>) -> &'a [usize], text: &mut String) {
    text.push_str(&format!("{{ shares = {}", nodes[n].shares));
    if matches!(nodes[n].leaf, Some(ShareTreeLeaf::Project(_))) {
        text.push_str(", project = true");
    }
    for &child in kids(Some(n)) {
        text.push_str(&format!(", {} = ", key(&nodes[child].name)));
        inline_node(nodes, child, kids, text);
    }
    text.push_str(" }");
}

/// A name as a TOML key: bare when it may be, quoted otherwise.
fn key(name: &str) -> String {
    let bare = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare { name.to_string() } else { Value::String(name.to_string()).to_string() }
}

fn amounts(table: &BTreeMap<String, u32>) -> Table {
    table.iter().map(|(name, &amount)| (name.clone(), int(u64::from(amount)))).collect()
}

fn int(value: u64) -> Value {
    Value::Integer(i64::try_from(value).unwrap_or(i64::MAX))
}

/// Thousandths as the decimal the file writes (`2500` → `2.5`).
fn milli(value: u32) -> Value {
    Value::Float(f64::from(value) / 1000.0)
}

/// A duration in ms as whole seconds, with a note when it is not whole.
fn secs(table: &mut Table, notes: &mut Vec<String>, name: &str, ms: u64) {
    if !ms.is_multiple_of(1000) {
        notes.push(format!("{} is {ms} ms, shown rounded to whole seconds", name.trim_end_matches("_secs")));
    }
    table.insert(name.into(), int(ms.div_ceil(1000)));
}

/// A duration in ms as seconds with up to three decimals, exactly (`poll_period_secs`
/// takes them): whole seconds as an integer, else a decimal (`500` → `0.5`).
fn decimal_secs(ms: u64) -> Value {
    if ms.is_multiple_of(1000) { int(ms / 1000) } else { Value::Float(ms as f64 / 1000.0) }
}

/// A milli-unit threshold as the policy file writes it, exactly: 1750 -> "1.75".
fn milli_decimal(milli: i64) -> String {
    let sign = if milli < 0 { "-" } else { "" };
    let magnitude = milli.unsigned_abs();
    let fraction = format!("{:03}", magnitude % 1000);
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() { format!("{sign}{}", magnitude / 1000) } else { format!("{sign}{}.{fraction}", magnitude / 1000) }
}

#[cfg(test)]
mod tests {
    use super::super::parse_policy;
    use super::*;

    /// Files that set every part of the policy: what `policy show` prints of
    /// each reads back as the same policy.
    const FILES: [&str; 7] = [
        "",
        super::super::sge::tests::TICKET_MODE,
        r#"
engine_timeout_secs = 12
seed = 42
[oticket.projects]
urgent = 500
"#,
        r#"
algorithm = "techila"
queue_sort_method = "seqno"
engine_tiers = ["type=blade", "site=hel"]
greylist_affinity = 8
[load_formula]
slots_weight = 2
load_weight = 3
expression = "np_load_avg + 0.5 * mem_used"
[redundancy]
average_limit = 2.5
std_dev_limit = 1.25
poll_period_secs = 10
[techila]
max_running_tasks = 500
simultaneous_projects = true
user_priorities = { alice = 2, bob = 6 }
[output]
task_bytes_max = 1000
job_bytes_max = 0
work_dir_retention_secs = 60
[caps]
max_jobs_per_user = 3
max_tasks = 1000000
"#,
        "job_retention_secs = 600\ndispatches_per_run_max = 7\n",
        r#"
algorithm = "fbsng"
[fbsng]
min_run_interval_secs = 2
[[fbsng.queues]]
name = "high"
qp_min = 5
qpg = 7
qpi = 3
[[fbsng.queues]]
name = "background"
[[fbsng.process_types]]
name = "cms"
quota_slots = 200
requirements = 'project == "cms"'
"#,
        r#"
algorithm = "cigri"
[cigri]
finalize_copies_max = 2
sink_ratio = 0.1
sink_min_tasks = 5
predictor_window_secs = 600
[[cigri.affinity]]
user = "alice"
cluster = "lyon"
"#,
    ];

    #[test]
    fn what_policy_show_prints_reads_back_as_the_same_policy() {
        for file in FILES {
            let policy = parse_policy(file, "p.toml").expect("the sample parses");
            let shown = policy_file_text(&policy);
            assert!(!shown.contains("# note"), "every sample is exact:\n{shown}");
            let again = parse_policy(&shown, "shown.toml").unwrap_or_else(|e| panic!("{e}\n{shown}"));
            assert_eq!(again, policy, "{shown}");
        }
    }

    #[test]
    fn it_uses_the_files_names_not_the_programs() {
        let shown = policy_file_text(&Policy::default());
        for name in ["engine_timeout_secs = 30", "halftime = ", "[output]", "task_bytes_max = 16777216", "algorithm = \"sge-plain\""] {
            assert!(shown.contains(name), "{name} in:\n{shown}");
        }
        assert!(!shown.contains("_ms"), "{shown}");
    }

    /// The issue's 290 MB `policy show`: a tree as deep as a policy may be (64
    /// levels of the longest names) with as many nodes as it may have renders
    /// in a text linear in the names applied, and reads back as the same tree.
    #[test]
    fn a_share_tree_of_64_levels_and_10000_nodes_renders_linear_in_its_names_and_reads_back() {
        use crate::core::policy_limits::{SHARE_TREE_DEPTH_MAX, SHARE_TREE_NODES_MAX};
        let long = |n: usize| format!("{n:0>256}");
        let mut nodes: Vec<ShareTreeNode> = (0..SHARE_TREE_DEPTH_MAX - 1)
            .map(|n| ShareTreeNode { name: long(n), parent: n.checked_sub(1).map(|p| p as u32), shares: 1, leaf: None })
            .collect();
        let deepest = (nodes.len() - 1) as u32;
        for n in nodes.len()..SHARE_TREE_NODES_MAX {
            nodes.push(ShareTreeNode { name: long(n), parent: Some(deepest), shares: 2, leaf: Some(ShareTreeLeaf::User(long(n))) });
        }
        let mut policy = Policy { algorithm: crate::core::event::Algorithm::Sgeee, ..Policy::default() };
        policy.sge.share_tree = nodes;
        assert_eq!(crate::core::policy_limits::check_policy(&policy), Ok(()), "as deep and as large as a policy may be");
        let names: usize = policy.sge.share_tree.iter().map(|node| node.name.len()).sum();
        let shown = policy_file_text(&policy);
        let tree_text = shown.len() - policy_file_text(&Policy { sge: Default::default(), ..policy.clone() }).len();
        assert!(tree_text <= names + 32 * SHARE_TREE_NODES_MAX, "{tree_text} bytes for {names} bytes of names");
        let again = parse_policy(&shown, "shown.toml").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again.sge.share_tree.len(), SHARE_TREE_NODES_MAX);
        assert_eq!(again, policy);
    }

    #[test]
    fn a_poll_period_of_part_of_a_second_is_shown_exactly_and_reads_back() {
        let mut policy = Policy::default();
        policy.redundancy.poll_period_ms = 1_250;
        let shown = policy_file_text(&policy);
        assert!(shown.contains("poll_period_secs = 1.25\n") && !shown.contains("# note"), "{shown}");
        assert_eq!(parse_policy(&shown, "shown.toml").unwrap(), policy);
    }

    #[test]
    fn what_the_file_cannot_say_exactly_is_noted() {
        let policy = Policy { engine_timeout_ms: 1_500, seed: u64::MAX, ..Policy::default() };
        let shown = policy_file_text(&policy);
        assert!(shown.contains("# note: engine_timeout is 1500 ms, shown rounded to whole seconds"), "{shown}");
        assert!(shown.contains("engine_timeout_secs = 2"), "{shown}");
        assert!(shown.contains("# note: seed is 18446744073709551615"), "{shown}");
    }
}

