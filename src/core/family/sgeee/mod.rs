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
//!     within each by static `fshare` among the entities with work (for jobs,
//!     each runnable job's `job_share`, Grid Engine's `qsub -js`); no history;
//!   - *override*: fixed tickets an operator gives a user or project (by
//!     policy) or a job (`gridfold override-tickets`, Grid Engine's `qalter -ot`).
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
//! a job's functional tickets from its `job_share` are counted over runnable
//! jobs only and, like its own override tickets, never divided among its tasks.
//!
//! Everything is integer arithmetic: tickets in thousandths, normalised
//! values in millionths, weights in thousandths.

pub mod share_tree;
pub mod urgency;

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::data::OrderKey;
use crate::core::event::SgePolicy;
use crate::core::ids::Seq;
use crate::core::state::{AccountIdx, Accounts, JobIdx, State};
use share_tree::{LeafOwner, ONE};

/// A normalised value's whole (millionths).
const NORM_ONE: i64 = 1_000_000;

/// One entity's tickets (thousandths) and the tasks it already runs. Tickets
/// fit 64 bits: every pool is at most a `u32` weight times 1000.
#[derive(Clone, Copy, Default, Debug)]
struct Pool {
    tickets_milli: u64,
    running: u32,
}

impl Pool {
    fn new(tickets_milli: u128, running: u32) -> Pool {
        let tickets_milli = u64::try_from(tickets_milli).expect("a pool is at most a u32 weight × 1000 tickets");
        Pool { tickets_milli, running }
    }

    /// What the entity's next task gets, `booked` tasks later in the run.
    fn next_task(&self, booked: u32) -> u64 {
        self.tickets_milli / u64::from(self.running + booked + 1)
    }
}

/// What `pool` gives the next task, nothing without a pool.
fn next_task(pool: Option<Pool>, booked: u32) -> u64 {
    pool.map_or(0, |pool| pool.next_task(booked))
}

/// A user's pools: its share-tree leaf, functional share, its department's
/// functional pool (the first department naming it) and override tickets.
#[derive(Clone, Copy, Default, Debug)]
struct UserPools {
    share: Option<Pool>,
    functional: Option<Pool>,
    department: Option<Pool>,
    overrides: Option<Pool>,
}

/// A project's pools. A project's share-tree leaf, when the tree has one,
/// stands for its jobs instead of their users' leaves.
#[derive(Clone, Copy, Default, Debug)]
struct ProjectPools {
    share: Option<Pool>,
    functional: Option<Pool>,
    overrides: Option<Pool>,
}

/// What a run keeps of each runnable job, so that re-keying it after a
/// booking reads one small record instead of the job: its accounts, its
/// submission, and the part of its dispatch priority that does not move
/// within a run (`weight_priority × npprio + weight_urgency × nurg`).
#[derive(Clone, Copy, Debug)]
struct JobFixed {
    user: AccountIdx,
    project: AccountIdx,
    own: OwnTickets,
    submitted: Seq,
    dispatch_fixed: i64,
}

/// What a job holds by itself, never divided with its owner's other jobs nor
/// among its own tasks (as in Grid Engine): override tickets an operator gave
/// it (`qalter -ot`) and its functional shares (`qsub -js`).
#[derive(Clone, Copy, Debug, Default)]
struct OwnTickets {
    override_tickets: u32,
    functional_share: u32,
}

impl OwnTickets {
    fn of(job: &crate::core::state::Job) -> OwnTickets {
        OwnTickets { override_tickets: job.override_tickets, functional_share: job.job_share() }
    }
}

/// Everything a run needs to key a job: computed once per run, in O(users +
/// projects + share-tree nodes + runnable jobs). Pools are dense tables by
/// account, so keying a job is a few array reads and divisions.
pub struct Tickets {
    now_ms: u64,
    by_user: Vec<UserPools>,
    by_project: Vec<ProjectPools>,
    /// By job index, for the jobs runnable when the run began.
    fixed: Vec<Option<JobFixed>>,
    weight_ticket_milli: i64,
    /// The functional policy's job category: its tickets, and the functional
    /// shares of the runnable jobs, which divide it.
    job_pool_milli: u128,
    job_shares_sum: u128,
    urgency_min: i64,
    urgency_max: i64,
    tickets_max: u64,
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

        let mut by_user = vec![UserPools::default(); state.users().len()];
        let mut by_project = vec![ProjectPools::default(); state.projects().len()];
        if sge.weight_tickets_share > 0 && !sge.share_tree.is_empty() {
            let entitlements = share_tree::entitlements(state, &sge.share_tree, &is_active, &usage_of);
            for (owner, entitlement) in entitlements {
                let tickets_milli = share_tree::mul_div(entitlement, u128::from(sge.weight_tickets_share) * 1000, ONE);
                match owner {
                    LeafOwner::User(a) => by_user[a.0 as usize].share = Some(Pool::new(tickets_milli, running_user(a))),
                    LeafOwner::Project(a) => {
                        by_project[a.0 as usize].share = Some(Pool::new(tickets_milli, running_project(a)))
                    }
                }
            }
        }

        functional(state, sge, &users_active, &projects_active, &mut by_user, &mut by_project);
        for (name, &tickets) in &sge.override_users {
            if let Some(a) = state.users().find(name) {
                by_user[a.0 as usize].overrides = Some(Pool::new(u128::from(tickets) * 1000, running_user(a)));
            }
        }
        for (name, &tickets) in &sge.override_projects {
            if let Some(a) = state.projects().find(name) {
                by_project[a.0 as usize].overrides = Some(Pool::new(u128::from(tickets) * 1000, running_project(a)));
            }
        }
        let mut tickets = Tickets {
            now_ms,
            by_user,
            by_project,
            fixed: Vec::new(),
            weight_ticket_milli: i64::from(sge.weight_ticket_milli),
            job_pool_milli: functional_category_milli(sge, sge.weight_job_milli),
            job_shares_sum: state.runnable_jobs().map(|rank| u128::from(state.job(rank.job).job_share())).sum(),
            urgency_min: i64::MAX,
            urgency_max: i64::MIN,
            tickets_max: 0,
        };
        let mut runnable: Vec<(JobIdx, i64)> = Vec::new();
        for rank in state.runnable_jobs() {
            let job = state.job(rank.job);
            let urgency = urgency::of_job(sge, job, now_ms);
            tickets.urgency_min = tickets.urgency_min.min(urgency);
            tickets.urgency_max = tickets.urgency_max.max(urgency);
            let total = tickets.tickets_of(job.user_account, job.project_account, OwnTickets::of(job), 0).total();
            tickets.tickets_max = tickets.tickets_max.max(total);
            runnable.push((rank.job, urgency));
        }
        let len = runnable.iter().map(|&(j, _)| j.0 as usize + 1).max().unwrap_or(0);
        tickets.fixed = vec![None; len];
        for (j, urgency) in runnable {
            let job = state.job(j);
            let dispatch_fixed = i64::from(sge.weight_priority_milli) * npprio(job.priority)
                + i64::from(sge.weight_urgency_milli) * tickets.nurg(urgency);
            tickets.fixed[j.0 as usize] = Some(JobFixed {
                user: job.user_account,
                project: job.project_account,
                own: OwnTickets::of(job),
                submitted: job.submit_seq,
                dispatch_fixed,
            });
        }
        tickets
    }

    /// The tickets of the next task of a job of user `u` in project `p` with
    /// its own tickets, `owner_booked` tasks of its owner later in the run.
    fn tickets_of(&self, u: AccountIdx, p: AccountIdx, own: OwnTickets, owner_booked: u32) -> TicketParts {
        let user = &self.by_user[u.0 as usize];
        let project = &self.by_project[p.0 as usize];
        // A job's share-tree leaf: its project's, if the tree has one, else its user's.
        let share = next_task(project.share.or(user.share), owner_booked);
        let functional = next_task(user.functional, owner_booked)
            + next_task(project.functional, owner_booked)
            + next_task(user.department, owner_booked)
            + self.job_functional_milli(own.functional_share);
        let overrides = next_task(user.overrides, owner_booked)
            + next_task(project.overrides, owner_booked)
            + u64::from(own.override_tickets) * 1000;
        TicketParts { share, functional, overrides }
    }

    /// A job's part of the functional job category by its `job_share`. A job
    /// not runnable at the start of the run (asked about by `why`) is not in
    /// the shares' sum: its part is capped at the whole category, so no share
    /// a client sets can take it past what the pool holds.
    fn job_functional_milli(&self, share: u32) -> u64 {
        let part = (self.job_pool_milli * u128::from(share)).checked_div(self.job_shares_sum).unwrap_or(0);
        u64::try_from(part.min(self.job_pool_milli)).unwrap_or(u64::MAX)
    }

    /// The job's next task's tickets, `owner_booked` tasks of its owner later in the run.
    pub fn of_job(&self, state: &State, j: JobIdx, owner_booked: u32) -> JobTickets {
        let job = state.job(j);
        let parts = self.tickets_of(job.user_account, job.project_account, OwnTickets::of(job), owner_booked);
        JobTickets {
            share_milli: u128::from(parts.share),
            functional_milli: u128::from(parts.functional),
            override_milli: u128::from(parts.overrides),
        }
    }

    /// Urgency normalised over the runnable jobs (millionths).
    fn nurg(&self, urgency: i64) -> i64 {
        if self.urgency_max > self.urgency_min {
            ((i128::from(urgency - self.urgency_min) * i128::from(NORM_ONE)) / i128::from(self.urgency_max - self.urgency_min))
                as i64
        } else {
            NORM_ONE / 2
        }
    }

    /// Tickets normalised by the most any runnable job has (millionths).
    fn ntckts(&self, total_milli: u64) -> i64 {
        if self.tickets_max == 0 {
            return NORM_ONE / 2;
        }
        (u128::from(total_milli.min(self.tickets_max)) * NORM_ONE as u128 / u128::from(self.tickets_max)) as i64
    }

    /// The job's dispatch priority and its parts (normalised, millionths).
    pub fn priority(&self, state: &State, j: JobIdx, owner_booked: u32) -> Priority {
        let sge = &state.policy.sge;
        let job = state.job(j);
        let npprio = npprio(job.priority);
        let urgency = urgency::of_job(sge, job, self.now_ms);
        let nurg = self.nurg(urgency);
        let tickets = self.of_job(state, j, owner_booked);
        let ntckts = self.ntckts(u64::try_from(tickets.total_milli()).expect("pools fit 64 bits"));
        let dispatch = i64::from(sge.weight_priority_milli) * npprio
            + i64::from(sge.weight_urgency_milli) * nurg
            + i64::from(sge.weight_ticket_milli) * ntckts;
        Priority { dispatch, npprio, urgency, nurg, tickets, ntckts }
    }

    /// The job's key in the run's order: from its [`JobFixed`] record when it
    /// was runnable at the start of the run (every job the order holds), the
    /// same figure [`Tickets::priority`] computes from the job.
    pub fn key(&self, state: &State, j: JobIdx, owner_booked: u32) -> OrderKey {
        let Some(Some(fixed)) = self.fixed.get(j.0 as usize) else {
            let priority = self.priority(state, j, owner_booked);
            return OrderKey { primary: priority.dispatch, secondary: 0, submitted: Reverse(state.job(j).submit_seq) };
        };
        let total = self.tickets_of(fixed.user, fixed.project, fixed.own, owner_booked).total();
        let dispatch = fixed.dispatch_fixed + self.weight_ticket_milli * self.ntckts(total);
        // Checked on every key of the unit tests, in release too.
        #[cfg(test)]
        assert_eq!(dispatch, self.priority(state, j, owner_booked).dispatch, "the fixed part is the job's");
        OrderKey { primary: dispatch, secondary: 0, submitted: Reverse(fixed.submitted) }
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

/// A job's tickets by policy (thousandths).
#[derive(Clone, Copy, Debug)]
struct TicketParts {
    share: u64,
    functional: u64,
    overrides: u64,
}

impl TicketParts {
    fn total(&self) -> u64 {
        self.share + self.functional + self.overrides
    }
}

/// `-p` (−1023..1024) on a fixed scale, millionths: `(p + 1024) / 2048`.
fn npprio(priority: i32) -> i64 {
    (i64::from(priority.clamp(-1023, 1024)) + 1024) * NORM_ONE / 2048
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

/// The functional policy's pools: `weight_tickets_functional` split between
/// the four categories by their weights (over the sum of all four, as Grid
/// Engine does for pending jobs), and within a category among the active
/// entities by `fshare`.
fn functional(
    state: &State,
    sge: &SgePolicy,
    users_active: &[bool],
    projects_active: &[bool],
    by_user: &mut [UserPools],
    by_project: &mut [ProjectPools],
) {
    if sge.weight_tickets_functional == 0 || functional_weights_sum(sge) == 0 {
        return;
    }
    let category_milli = |weight: u32| functional_category_milli(sge, weight);

    for (a, pool) in split(state.users(), &sge.functional_users, users_active, category_milli(sge.weight_user_milli)) {
        by_user[a.0 as usize].functional = Some(pool);
    }
    let projects_milli = category_milli(sge.weight_project_milli);
    for (a, pool) in split(state.projects(), &sge.functional_projects, projects_active, projects_milli) {
        by_project[a.0 as usize].functional = Some(pool);
    }

    // Departments: each is active when one of its users is; its pool is shared
    // by its users' tasks (keyed by user, counting the department's running
    // tasks); a user named by several departments takes the first's.
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
            by_user[a.0 as usize].department.get_or_insert(Pool::new(tickets_milli, running));
        }
    }
}

/// The functional tickets of a category of weight `weight` (one of
/// `weight_user`, `weight_project`, `weight_department`, `weight_job`): its
/// part of `weight_tickets_functional`, over the sum of the four weights.
fn functional_category_milli(sge: &SgePolicy, weight: u32) -> u128 {
    (u128::from(sge.weight_tickets_functional) * 1000 * u128::from(weight)).checked_div(functional_weights_sum(sge)).unwrap_or(0)
}

fn functional_weights_sum(sge: &SgePolicy) -> u128 {
    u128::from(sge.weight_user_milli)
        + u128::from(sge.weight_project_milli)
        + u128::from(sge.weight_department_milli)
        + u128::from(sge.weight_job_milli)
}

/// Divides `pool_milli` among the active accounts with a share, by share.
fn split(
    accounts: &Accounts,
    shares: &BTreeMap<String, u32>,
    active: &[bool],
    pool_milli: u128,
) -> Vec<(AccountIdx, Pool)> {
    let entities: Vec<(AccountIdx, u128)> = shares
        .iter()
        .filter_map(|(name, &share)| accounts.find(name).map(|a| (a, u128::from(share))))
        .filter(|&(a, share)| share > 0 && active[a.0 as usize])
        .collect();
    let shares_sum: u128 = entities.iter().map(|&(_, share)| share).sum();
    entities
        .into_iter()
        .map(|(a, share)| {
            let tickets_milli = (pool_milli * share).checked_div(shares_sum).unwrap_or(0);
            (a, Pool::new(tickets_milli, accounts.get(a).live_tasks))
        })
        .collect()
}
