//! The share tree's entitlements (share_tree(5), sge_priority(5), and
//! `sge_calc_node_targets` in Grid Engine's sgeee.c): how much of the grid
//! each leaf should have now, given its shares, which of its siblings have
//! work, and how much each has used.
//!
//! Walking down from the root, each node's entitlement is divided among its
//! *active* children (a child is active when a user or project under it has
//! running or waiting tasks): an idle node drops out of its siblings' sums, so
//! its share goes to them in proportion to theirs. For the active children `c`
//! of a node with overall targets `oltt` (long term) and `ostt` (short term):
//! - long term: `ltt_c = shares_c / Σ shares`, `oltt_c = oltt × ltt_c`;
//! - short term: `shr_c = shares_c² / max(usage_c, oltt_c)`, `stt_c = shr_c / Σ shr`,
//!   `ostt_c = ostt × stt_c`: a node that used more than its siblings in
//!   proportion to its shares gets less now, one that used less gets more,
//!   and without usage anywhere the long-term targets stand;
//! - compensation: a child whose `ostt_c` exceeds `compensation_factor × oltt_c`
//!   has its `shr_c` scaled down by that excess, and the `stt` are computed
//!   again (once, as Grid Engine does).
//!
//! A leaf's entitlement is its `ostt`. Usage is in slot-milliseconds; the
//! floor `oltt_c` is taken in slot-seconds (Grid Engine's usage unit), so it
//! matters only when usage is negligible. All in integers: proportions in
//! parts per [`ONE`].

use std::collections::BTreeMap;

use crate::core::event::{ShareTreeLeaf, ShareTreeNode};
use crate::core::state::{AccountIdx, State};

/// A whole, for proportions.
pub const ONE: u128 = 1_000_000_000_000;

/// Most shares one node may have (a policy with more does not decode), so
/// `shares² × ONE²` stays within 128 bits.
pub const SHARES_MAX: u32 = 1_000_000;

/// Whom a leaf stands for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum LeafOwner {
    User(AccountIdx),
    Project(AccountIdx),
}

/// A node of the tree as a run sees it: the policy's nodes, plus one node per
/// user a `default` leaf stands for.
struct Node {
    parent: Option<usize>,
    shares: u128,
    owner: Option<LeafOwner>,
    active: bool,
    usage: u128,
    children: Vec<usize>,
}

/// Each active leaf's entitlement, in parts per [`ONE`] of the grid.
pub fn entitlements(
    state: &State,
    nodes: &[ShareTreeNode],
    is_active: &dyn Fn(LeafOwner) -> bool,
    usage_of: &dyn Fn(LeafOwner) -> u128,
) -> BTreeMap<LeafOwner, u128> {
    let mut tree: Vec<Node> = Vec::with_capacity(nodes.len());
    let mut named_users = std::collections::BTreeSet::new();
    for node in nodes {
        if let Some(ShareTreeLeaf::User(name)) = &node.leaf {
            named_users.insert(name.as_str());
        }
    }
    let mut defaults = Vec::new();
    for (at, node) in nodes.iter().enumerate() {
        let owner = match &node.leaf {
            Some(ShareTreeLeaf::User(name)) => state.users().find(name).map(LeafOwner::User),
            Some(ShareTreeLeaf::Project(name)) => state.projects().find(name).map(LeafOwner::Project),
            Some(ShareTreeLeaf::DefaultUser) => {
                defaults.push(at);
                None
            }
            None => None,
        };
        let parent = node.parent.map(|p| p as usize).filter(|&p| p < at);
        tree.push(Node { parent, shares: u128::from(node.shares.min(SHARES_MAX)), owner, active: false, usage: 0, children: Vec::new() });
    }
    // A `default` leaf stands for every active user the tree does not name,
    // each with a node of its own.
    for &at in &defaults {
        for (account, user) in state.users().iter() {
            let owner = LeafOwner::User(account);
            if named_users.contains(user.name.as_str()) || !is_active(owner) {
                continue;
            }
            tree.push(Node { parent: tree[at].parent, shares: tree[at].shares, owner: Some(owner), active: false, usage: 0, children: Vec::new() });
        }
    }
    for at in 0..tree.len() {
        if let Some(parent) = tree[at].parent {
            tree[parent].children.push(at);
        }
    }
    // Leaves up: a node is active if a leaf under it is, and its usage is theirs.
    for at in (0..tree.len()).rev() {
        if let (Some(owner), true) = (tree[at].owner, tree[at].children.is_empty()) {
            tree[at].active = is_active(owner);
            tree[at].usage = usage_of(owner);
        }
        if let Some(parent) = tree[at].parent {
            let (active, usage) = (tree[at].active, tree[at].usage);
            tree[parent].active |= active;
            tree[parent].usage += usage;
        }
    }
    let roots: Vec<usize> = (0..tree.len()).filter(|&at| tree[at].parent.is_none()).collect();
    // (oltt, ostt) of each node, overall proportions of the grid.
    let mut targets = vec![(0u128, 0u128); tree.len()];
    let compensation_milli = u128::from(state.policy.sge.compensation_factor_milli);
    let mut level = vec![(roots, (ONE, ONE))];
    while let Some((siblings, (parent_oltt, parent_ostt))) = level.pop() {
        let active: Vec<usize> = siblings.into_iter().filter(|&at| tree[at].active).collect();
        let shares_sum: u128 = active.iter().map(|&at| tree[at].shares).sum();
        if shares_sum == 0 {
            continue;
        }
        let oltt: Vec<u128> = active.iter().map(|&at| mul_div(parent_oltt, tree[at].shares, shares_sum)).collect();
        // shares² / max(usage, oltt), with usage scaled by ONE and the floor in slot-seconds.
        let mut shr: Vec<u128> = active
            .iter()
            .zip(&oltt)
            .map(|(&at, &oltt)| {
                let floor = (tree[at].usage.saturating_mul(ONE)).max(oltt.saturating_mul(1000)).max(1);
                mul_div(tree[at].shares * tree[at].shares, ONE * ONE, floor)
            })
            .collect();
        let mut ostt = short_term(&shr, parent_ostt);
        if compensation_milli > 0 {
            let mut adjusted = false;
            for at in 0..active.len() {
                let bound = mul_div(oltt[at], compensation_milli, 1000);
                if ostt[at] > bound {
                    shr[at] = mul_div(shr[at], bound, ostt[at]);
                    adjusted = true;
                }
            }
            if adjusted {
                ostt = short_term(&shr, parent_ostt);
            }
        }
        for (k, &at) in active.iter().enumerate() {
            targets[at] = (oltt[k], ostt[k]);
            if !tree[at].children.is_empty() {
                level.push((tree[at].children.clone(), targets[at]));
            }
        }
    }
    let entitlement: Vec<u128> = targets.iter().map(|&(_, ostt)| ostt).collect();
    let mut leaves = BTreeMap::new();
    for (at, node) in tree.iter().enumerate() {
        if let (Some(owner), true) = (node.owner, node.children.is_empty() && node.active) {
            *leaves.entry(owner).or_insert(0) += entitlement[at];
        }
    }
    leaves
}

/// Each `shr` as a share of their sum, times the parent's short-term target.
fn short_term(shr: &[u128], parent_ostt: u128) -> Vec<u128> {
    let sum: u128 = shr.iter().fold(0u128, |sum, &x| sum.saturating_add(x));
    if sum == 0 {
        return vec![0; shr.len()];
    }
    shr.iter().map(|&x| mul_div(parent_ostt, x, sum)).collect()
}

/// `a × b / c`, rounding down, without overflowing where `a × b` would:
/// then computed as `(a / c) × b + (a % c) × b / c` with saturation (exact
/// while the result fits).
pub fn mul_div(a: u128, b: u128, c: u128) -> u128 {
    assert!(c > 0, "a divisor is never zero");
    match a.checked_mul(b) {
        Some(product) => product / c,
        None => (a / c).saturating_mul(b).saturating_add(((a % c).saturating_mul(b)) / c),
    }
}
