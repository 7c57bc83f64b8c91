//! `sgeee`: Grid Engine's ticket mode (sge_priority(5), sched_conf(5),
//! share_tree(5); seed 002). Every runnable job gets a **dispatch priority**
//!
//! ```text
//! prio = weight_priority × npprio + weight_urgency × nurg + weight_ticket × ntckts
//! ```
//!
//! and jobs are examined highest first, then by submission, then job index.
//! - `npprio` is the job's `-p` (−1023..1024) on a fixed scale: `(p + 1024) / 2048`.
//! - `nurg` is its urgency normalised over the runnable jobs: `(u − min) / (max − min)`,
//!   ½ when all are equal. Urgency ([`urgency`]) is waiting time
//!   (`weight_waiting_time` per second), deadline (`weight_deadline / seconds
//!   left`, at least 1 s, so it grows as the deadline nears and holds at
//!   `weight_deadline` past it) and resources (`slot_urgency` per slot).
//! - `ntckts` is its tickets over the most any runnable job has (½ when none
//!   has any). Tickets are the sum of three policies:
//!   - *share tree* ([`share_tree`]): a leaf's entitlement (from shares, the
//!     active siblings, decayed usage and `compensation_factor`) times
//!     `weight_tickets_share`;
//!   - *functional*: `weight_tickets_functional`, split between users,
//!     projects, departments and jobs by `weight_user` … `weight_job`, and
//!     within each by static `fshare` among the entities with work; no history;
//!   - *override*: fixed tickets an operator gives a user or project.
//!
//!   A user's or project's tickets are divided among its tasks as Grid Engine
//!   divides them among pending jobs (`share_functional_shares`,
//!   `share_override_tickets`, and the share tree's pending-job scheme): the
//!   next task of an entity with `n` running tasks gets `1 / (n + 1)` of the
//!   entity's tickets. So the order moves as the run books tasks: after each
//!   booking the owner counts one more (Grid Engine re-sorts the array job it
//!   just dispatched from).
//!
//! Where gridfold differs, for cheapness and stated here: urgency and ticket
//! norms are over runnable jobs (Grid Engine also counts running ones); a
//! booking dilutes every job of its owner at once (Grid Engine's sequential
//! precomputation reaches the same per-user dilution across jobs); the
//! share-tree dilution counts running tasks, not also decayed finished jobs;
//! per-job functional shares (`qsub -js`) are not modelled, so `weight_job`
//! only takes part in the split.
//!
//! Everything is integer arithmetic: tickets in thousandths, normalised
//! values in millionths, weights in thousandths.

pub mod share_tree;
pub mod urgency;

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::families::{JobOrder, MovingOrder, MovingRule, OrderKey};
use super::InFlight;
use crate::core::event::SgePolicy;
use crate::core::state::{AccountIdx, Accounts, JobIdx, State};
use share_tree::{LeafOwner, ONE};

/// A normalised value's whole (millionths).
const NORM_ONE: i64 = 1_000_000;

pub fn job_order<'s>(state: &'s State, in_flight: &InFlight) -> JobOrder<'s> {
    JobOrder::Moving(MovingOrder::new(state, in_flight, MovingRule::Tickets(Box::new(Tickets::for_run(state)))))
}

/// One entity's tickets (thousandths) and the tasks it already runs.
#[derive(Clone, Copy, Default, Debug)]
struct Pool {
    tickets_milli: u128,
    running: u32,
}

impl Pool {
    /// What the entity's next task gets, `booked` tasks later in the run.
    fn next_task(&self, booked: u32) -> u128 {
        self.tickets_milli / u128::from(self.running + booked + 1)
    }
}

/// Everything a run needs to key a job: computed once per run, in O(users +
/// projects + share-tree nodes + runnable jobs).
pub struct Tickets {
    now_ms: u64,
    share_by_user: BTreeMap<AccountIdx, Pool>,
    share_by_project: BTreeMap<AccountIdx, Pool>,
    functional_by_user: BTreeMap<AccountIdx, Pool>,
    functional_by_project: BTreeMap<AccountIdx, Pool>,
    /// Per user in a department: the department's pool.
    functional_by_department: BTreeMap<AccountIdx, Pool>,
    override_by_user: BTreeMap<AccountIdx, Pool>,
    override_by_project: BTreeMap<AccountIdx, Pool>,
    urgency_min: i64,
    urgency_max: i64,
    tickets_max: u128,
}

/// A job's figures, as `why` and the tests read them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobTickets {
    pub share_milli: u128,
    pub functional_milli: u128,
    pub override_milli: u128,
}

impl JobTickets {
    pub fn total_milli(&self) -> u128 {
        self.share_milli + self.functional_milli + self.override_milli
    }
}

impl Tickets {
    pub fn for_run(state: &State) -> Tickets {
        let sge = &state.policy.sge;
        let now_ms = state.now_ms;
        // Active entities: those with running tasks or runnable jobs.
        let mut users_active = vec![false; state.users().len()];
        let mut projects_active = vec![false; state.projects().len()];
        for (account, user) in state.users().iter() {
            users_active[account.0 as usize] = user.live_tasks > 0;
        }
        for (account, project) in state.projects().iter() {
            projects_active[account.0 as usize] = project.live_tasks > 0;
        }
        for rank in state.runnable_jobs() {
            let job = state.job(rank.job);
            users_active[job.user_account.0 as usize] = true;
            projects_active[job.project_account.0 as usize] = true;
        }
        let is_active = |owner: LeafOwner| match owner {
            LeafOwner::User(a) => users_active[a.0 as usize],
            LeafOwner::Project(a) => projects_active[a.0 as usize],
        };
        let halftime = sge.halftime_ms;
        let usage_of = |owner: LeafOwner| match owner {
            LeafOwner::User(a) => state.users().get(a).usage_at(now_ms, halftime),
            LeafOwner::Project(a) => state.projects().get(a).usage_at(now_ms, halftime),
        };
        let running_user = |a: AccountIdx| state.users().get(a).live_tasks;
        let running_project = |a: AccountIdx| state.projects().get(a).live_tasks;

        let mut share_by_user = BTreeMap::new();
        let mut share_by_project = BTreeMap::new();
        if sge.weight_tickets_share > 0 && !sge.share_tree.is_empty() {
            let entitlements = share_tree::entitlements(state, &sge.share_tree, &is_active, &usage_of);
            for (owner, entitlement) in entitlements {
                let tickets_milli = share_tree::mul_div(entitlement, u128::from(sge.weight_tickets_share) * 1000, ONE);
                match owner {
                    LeafOwner::User(a) => share_by_user.insert(a, Pool { tickets_milli, running: running_user(a) }),
                    LeafOwner::Project(a) => {
                        share_by_project.insert(a, Pool { tickets_milli, running: running_project(a) })
                    }
                };
            }
        }

        let (functional_by_user, functional_by_project, functional_by_department) =
            functional(state, sge, &users_active, &projects_active);
        let mut override_by_user = BTreeMap::new();
        let mut override_by_project = BTreeMap::new();
        for (name, &tickets) in &sge.override_users {
            if let Some(a) = state.users().find(name) {
                override_by_user.insert(a, Pool { tickets_milli: u128::from(tickets) * 1000, running: running_user(a) });
            }
        }
        for (name, &tickets) in &sge.override_projects {
            if let Some(a) = state.projects().find(name) {
                override_by_project
                    .insert(a, Pool { tickets_milli: u128::from(tickets) * 1000, running: running_project(a) });
            }
        }
        let mut tickets = Tickets {
            now_ms,
            share_by_user,
            share_by_project,
            functional_by_user,
            functional_by_project,
            functional_by_department,
            override_by_user,
            override_by_project,
            urgency_min: i64::MAX,
            urgency_max: i64::MIN,
            tickets_max: 0,
        };
        for rank in state.runnable_jobs() {
            let urgency = urgency::of_job(sge, state.job(rank.job), now_ms);
            tickets.urgency_min = tickets.urgency_min.min(urgency);
            tickets.urgency_max = tickets.urgency_max.max(urgency);
            tickets.tickets_max = tickets.tickets_max.max(tickets.of_job(state, rank.job, 0).total_milli());
        }
        tickets
    }

    /// The job's next task's tickets, `owner_booked` tasks of its owner later in the run.
    pub fn of_job(&self, state: &State, j: JobIdx, owner_booked: u32) -> JobTickets {
        let job = state.job(j);
        let (u, p) = (job.user_account, job.project_account);
        let next = |pools: &BTreeMap<AccountIdx, Pool>, a: AccountIdx| pools.get(&a).map_or(0, |pool| pool.next_task(owner_booked));
        // A job's share-tree leaf: its project's, if the tree has one, else its user's.
        let share_milli = match self.share_by_project.get(&p) {
            Some(pool) => pool.next_task(owner_booked),
            None => next(&self.share_by_user, u),
        };
        let functional_milli = next(&self.functional_by_user, u)
            + next(&self.functional_by_project, p)
            + next(&self.functional_by_department, u);
        let override_milli = next(&self.override_by_user, u) + next(&self.override_by_project, p);
        JobTickets { share_milli, functional_milli, override_milli }
    }

    /// The job's dispatch priority and its parts (normalised, millionths).
    pub fn priority(&self, state: &State, j: JobIdx, owner_booked: u32) -> Priority {
        let sge = &state.policy.sge;
        let job = state.job(j);
        let npprio = (i64::from(job.priority.clamp(-1023, 1024)) + 1024) * NORM_ONE / 2048;
        let urgency = urgency::of_job(sge, job, self.now_ms);
        let nurg = if self.urgency_max > self.urgency_min {
            ((i128::from(urgency - self.urgency_min) * i128::from(NORM_ONE))
                / i128::from(self.urgency_max - self.urgency_min)) as i64
        } else {
            NORM_ONE / 2
        };
        let tickets = self.of_job(state, j, owner_booked);
        let ntckts = (tickets.total_milli().min(self.tickets_max) * NORM_ONE as u128)
            .checked_div(self.tickets_max)
            .map_or(NORM_ONE / 2, |n| n as i64);
        let dispatch = i64::from(sge.weight_priority_milli) * npprio
            + i64::from(sge.weight_urgency_milli) * nurg
            + i64::from(sge.weight_ticket_milli) * ntckts;
        Priority { dispatch, npprio, urgency, nurg, tickets, ntckts }
    }

    pub fn key(&self, state: &State, j: JobIdx, owner_booked: u32) -> OrderKey {
        let priority = self.priority(state, j, owner_booked);
        OrderKey { primary: priority.dispatch, secondary: 0, submitted: Reverse(state.job(j).submit_seq) }
    }

    pub fn figures(&self, state: &State, j: JobIdx, owner_booked: u32) -> Vec<(&'static str, i64)> {
        let p = self.priority(state, j, owner_booked);
        let milli = |x: u128| i64::try_from(x / 1000).unwrap_or(i64::MAX);
        vec![
            ("dispatch_priority", p.dispatch),
            ("priority", i64::from(state.job(j).priority)),
            ("tickets", milli(p.tickets.total_milli())),
            ("share_tickets", milli(p.tickets.share_milli)),
            ("functional_tickets", milli(p.tickets.functional_milli)),
            ("override_tickets", milli(p.tickets.override_milli)),
            ("urgency", p.urgency / 1000),
        ]
    }
}

/// A job's dispatch priority and what it is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    /// Σ weight (thousandths) × normalised value (millionths).
    pub dispatch: i64,
    pub npprio: i64,
    /// Urgency in thousandths.
    pub urgency: i64,
    pub nurg: i64,
    pub tickets: JobTickets,
    pub ntckts: i64,
}

type Pools = BTreeMap<AccountIdx, Pool>;

/// The functional policy's pools: `weight_tickets_functional` split between
/// the four categories by their weights (over the sum of all four, as Grid
/// Engine does for pending jobs), and within a category among the active
/// entities by `fshare`.
fn functional(state: &State, sge: &SgePolicy, users_active: &[bool], projects_active: &[bool]) -> (Pools, Pools, Pools) {
    let mut by_user = Pools::new();
    let mut by_project = Pools::new();
    let mut by_department = Pools::new();
    let weights_sum = u128::from(sge.weight_user_milli)
        + u128::from(sge.weight_project_milli)
        + u128::from(sge.weight_department_milli)
        + u128::from(sge.weight_job_milli);
    if sge.weight_tickets_functional == 0 || weights_sum == 0 {
        return (by_user, by_project, by_department);
    }
    let total_milli = u128::from(sge.weight_tickets_functional) * 1000;
    let category_milli = |weight: u32| total_milli * u128::from(weight) / weights_sum;

    split(&mut by_user, state.users(), &sge.functional_users, users_active, category_milli(sge.weight_user_milli));
    split(
        &mut by_project,
        state.projects(),
        &sge.functional_projects,
        projects_active,
        category_milli(sge.weight_project_milli),
    );

    // Departments: each is active when one of its users is; its pool is shared
    // by its users' tasks (keyed by user, counting the department's running tasks).
    let mut departments: Vec<(u128, Vec<AccountIdx>)> = Vec::new();
    for (name, &share) in &sge.functional_departments {
        let members: Vec<AccountIdx> = sge
            .departments
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(|user| state.users().find(user))
            .collect();
        if share > 0 && members.iter().any(|a| users_active[a.0 as usize]) {
            departments.push((u128::from(share), members));
        }
    }
    let shares_sum: u128 = departments.iter().map(|(share, _)| share).sum();
    let pool_milli = category_milli(sge.weight_department_milli);
    for (share, members) in &departments {
        let running = members.iter().map(|&a| state.users().get(a).live_tasks).sum();
        let tickets_milli = (pool_milli * share).checked_div(shares_sum).unwrap_or(0);
        for &a in members {
            by_department.entry(a).or_insert(Pool { tickets_milli, running });
        }
    }
    (by_user, by_project, by_department)
}

/// Divides `pool_milli` among the active accounts with a share, by share.
fn split(pools: &mut Pools, accounts: &Accounts, shares: &BTreeMap<String, u32>, active: &[bool], pool_milli: u128) {
    let entities: Vec<(AccountIdx, u128)> = shares
        .iter()
        .filter_map(|(name, &share)| accounts.find(name).map(|a| (a, u128::from(share))))
        .filter(|&(a, share)| share > 0 && active[a.0 as usize])
        .collect();
    let shares_sum: u128 = entities.iter().map(|&(_, share)| share).sum();
    for (a, share) in entities {
        let tickets_milli = (pool_milli * share).checked_div(shares_sum).unwrap_or(0);
        pools.insert(a, Pool { tickets_milli, running: accounts.get(a).live_tasks });
    }
}
