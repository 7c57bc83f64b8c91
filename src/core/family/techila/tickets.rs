//! The run's projects and their tickets, kept so one draw costs `O(log n)`.
//!
//! A project's tickets are [`super::TICKETS_NUMERATOR`]` / its ranking` (at
//! least 1): they depend on the project alone (its fixed figures, the tasks
//! booked on it this run and the mflops of their cores), not on the other
//! entrants, so a booking changes one project's tickets and nothing else.
//!
//! The projects of a run are grouped per user (each group in the user's order
//! of preference: project priority, then creation order; with
//! `simultaneous_projects`, a group per project). A core's entrants are, per
//! group, the first project the core may take (its category eligible on the
//! core, its slots per task free) that still wants a dispatch. A *class* is a
//! pair (category, slots per task): a core either may take every project of a
//! class or none. A *simple* group has all its projects in one class; its
//! entrant for any core that may take the class is just its first project
//! still wanting a dispatch. Each class keeps, over its simple groups, two
//! Fenwick trees of their entrants' tickets (all entrants; Lowest ones left
//! out) and counts, built the first time a core of the class is served and
//! updated in `O(log groups)` per booking. Groups spanning classes (rare: a
//! user whose projects differ in category) are looked at one by one each draw.
//!
//! The draw's order, which fixes who holds which ticket: the classes by
//! category index, then slots per task; in each, the simple groups in group
//! order (creation order of their first project); then the other groups in
//! group order. The ticket drawn is `rng.below(total)` ([`below`](super::priority::below)).
//!
//! Invariants (asserted in tests against a plain recount, [`Projects::entrants`]):
//! every built class's trees hold exactly the current tickets of its simple
//! groups' entrants, and its counts their numbers. Nothing here changes the state.
//! Costs per draw: `O(classes + other groups + log groups)`; per booking
//! `O(log groups)` plus the group's length when its project runs out of tasks.

use super::priority::{below, project_priority, ranking, tickets_of, user_priority, RankingInputs, PRIORITY_LOWEST, PRIORITY_NORMAL};
use crate::core::ids::Seq;
use crate::core::rng::SplitMix64;
use crate::core::state::{CategoryIdx, EngineIdx, JobIdx, State};

/// The figures of a project that do not change within a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fixed {
    pub project_priority: u32,
    pub user_priority: u32,
    pub submit_seq: Seq,
    pub wall_clock_ms: u64,
    pub cpu_ms_completed: u64,
    /// Tasks dispatched or running before the run, orders in flight included.
    pub running_before: u32,
    /// Its tasks wanting a dispatch at the start of the run, less those in flight.
    pub wanting_before: u32,
    pub category: CategoryIdx,
    pub slots_per_task: u32,
    /// Its place among the run's projects by creation (0: the earliest).
    pub creation_rank: u32,
    /// Its group's index.
    pub group: u32,
}

/// Prefix sums over `u128` values with `O(log n)` update and search. Sums
/// wrap (a decrease is added as its two's complement); every true prefix sum
/// fits, so every one read is exact.
#[derive(Default)]
struct Fenwick {
    tree: Vec<u128>,
}

impl Fenwick {
    fn from_values(values: &[u128]) -> Fenwick {
        let mut tree = values.to_vec();
        for i in 0..tree.len() {
            let parent = i | (i + 1);
            if parent < tree.len() {
                tree[parent] = tree[parent].wrapping_add(tree[i]);
            }
        }
        Fenwick { tree }
    }

    fn add(&mut self, mut i: usize, delta: u128) {
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add(delta);
            i |= i + 1;
        }
    }

    /// The position holding ticket `t` (0-based, below the total): the
    /// first whose prefix sum exceeds `t`.
    fn find(&self, mut t: u128) -> usize {
        let mut at = 0usize;
        let mut step = self.tree.len().next_power_of_two();
        while step > 0 {
            let next = at + step;
            if next <= self.tree.len() && self.tree[next - 1] <= t {
                t -= self.tree[next - 1];
                at = next;
            }
            step /= 2;
        }
        assert!(at < self.tree.len(), "the ticket drawn is below the total");
        at
    }
}

/// One class's simple groups and their entrants' tickets.
struct Class {
    /// Its simple groups, in group order.
    groups: Vec<u32>,
    built: bool,
    /// Per position: the entrant's tickets (0: none), whether it is Lowest,
    /// whether it is Normal-or-higher and wants capacity.
    tickets: Vec<u128>,
    lowest: Vec<bool>,
    normal_wanting: Vec<bool>,
    all: Fenwick,
    not_lowest: Fenwick,
    total_all: u128,
    total_not_lowest: u128,
    n_all: u32,
    n_not_lowest: u32,
    n_normal_wanting: u32,
}

/// What a draw's fast path sees of one eligible class.
#[derive(Clone, Copy)]
struct Eligible {
    class: u32,
    total: u128,
}

/// The run's runnable projects, grouped per user, and their tickets.
#[derive(Default)]
pub(crate) struct Projects {
    built: bool,
    /// Each group: its projects, most preferred first; groups in the creation
    /// order of their first project.
    groups: Vec<Vec<JobIdx>>,
    /// Per job index (dense, `JobIdx.0`): its fixed figures, if runnable.
    fixed: Vec<Option<Fixed>>,
    /// Per job index: the tasks this run booked.
    booked: Vec<u32>,
    /// Per job index: the sum of the mflops of the engines running it, this run's bookings included.
    benchmark_sums: Vec<u64>,
    /// Per job index, once asked: whether it wants capacity ([`super::want`]).
    wants: Vec<Option<bool>>,
    /// Per group: its class when simple, and its position there.
    group_class: Vec<Option<(u32, u32)>>,
    /// Per simple group: the position in it of its first project still wanting.
    cursor: Vec<u32>,
    classes: Vec<Class>,
    /// Per class, its (category, slots per task): what a draw scans.
    class_keys: Vec<(CategoryIdx, u32)>,
    /// The groups spanning classes, in group order.
    complex: Vec<u32>,
    /// Reused by every draw.
    eligible_buffer: Vec<Eligible>,
    complex_buffer: Vec<(JobIdx, bool, u128)>,
}

/// One entrant as [`Projects::entrants`] lists it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listed {
    pub job: JobIdx,
    pub inputs: RankingInputs,
    pub ranking: u128,
    pub tickets: u128,
}

impl Projects {
    fn build(&mut self, state: &State, in_flight_of: &dyn Fn(JobIdx) -> u32) {
        self.built = true;
        let simultaneous = state.policy.techila.simultaneous_projects;
        let mut jobs: Vec<(u32, u32, Seq, JobIdx)> = state
            .runnable_jobs()
            .map(|rank| {
                let job = state.job(rank.job);
                let group = if simultaneous { rank.job.0 } else { job.user_account.0 };
                (group, project_priority(job), job.submit_seq, rank.job)
            })
            .collect();
        let mut by_creation: Vec<(Seq, JobIdx)> = jobs.iter().map(|&(_, _, seq, j)| (seq, j)).collect();
        by_creation.sort_unstable();
        jobs.sort_unstable();
        let n = jobs.iter().map(|&(_, _, _, j)| j.0 as usize + 1).max().unwrap_or(0);
        self.fixed = vec![None; n];
        self.booked = vec![0; n];
        let mut mflops = state.mflops_running_per_job();
        mflops.resize(n, 0);
        self.benchmark_sums = mflops;
        self.wants = vec![None; n];
        let mut groups: Vec<Vec<JobIdx>> = Vec::new();
        for (at, &(group, _, _, j)) in jobs.iter().enumerate() {
            if at == 0 || jobs[at - 1].0 != group {
                groups.push(Vec::new());
            }
            groups.last_mut().expect("pushed").push(j);
            let job = state.job(j);
            let in_flight_of_job = in_flight_of(j);
            self.fixed[j.0 as usize] = Some(Fixed {
                project_priority: project_priority(job),
                user_priority: user_priority(state, job),
                submit_seq: job.submit_seq,
                wall_clock_ms: state.now_ms.saturating_sub(job.submitted_ms),
                cpu_ms_completed: job.cpu_ms_completed,
                running_before: job.counts.running + job.counts.dispatched + in_flight_of_job,
                wanting_before: job.n_wanting_dispatch().saturating_sub(in_flight_of_job),
                category: job.category,
                slots_per_task: job.slots_per_task,
                creation_rank: 0,
                group: 0,
            });
        }
        for (rank, &(_, j)) in by_creation.iter().enumerate() {
            self.fixed_mut(j).creation_rank = rank as u32;
        }
        groups.sort_by_key(|group| (self.fixed(group[0]).submit_seq, group[0]));
        let mut class_keys: Vec<(CategoryIdx, u32)> = Vec::new();
        for (g, group) in groups.iter().enumerate() {
            for &j in group {
                self.fixed_mut(j).group = g as u32;
            }
            let first = self.fixed(group[0]);
            let key = (first.category, first.slots_per_task);
            if group.iter().all(|&j| (self.fixed(j).category, self.fixed(j).slots_per_task) == key) {
                class_keys.push(key);
            }
        }
        class_keys.sort_unstable();
        class_keys.dedup();
        self.classes = class_keys
            .iter()
            .map(|_| Class {
                groups: Vec::new(),
                built: false,
                tickets: Vec::new(),
                lowest: Vec::new(),
                normal_wanting: Vec::new(),
                all: Fenwick::default(),
                not_lowest: Fenwick::default(),
                total_all: 0,
                total_not_lowest: 0,
                n_all: 0,
                n_not_lowest: 0,
                n_normal_wanting: 0,
            })
            .collect();
        self.class_keys = class_keys.clone();
        self.group_class = vec![None; groups.len()];
        self.cursor = vec![0; groups.len()];
        for (g, group) in groups.iter().enumerate() {
            let first = self.fixed(group[0]);
            let key = (first.category, first.slots_per_task);
            let simple = group.iter().all(|&j| (self.fixed(j).category, self.fixed(j).slots_per_task) == key);
            if simple {
                let class = class_keys.binary_search(&key).expect("every simple group's class is listed");
                let position = self.classes[class].groups.len() as u32;
                self.classes[class].groups.push(g as u32);
                self.group_class[g] = Some((class as u32, position));
            } else {
                self.complex.push(g as u32);
            }
        }
        self.groups = groups;
    }

    fn ensure_built(&mut self, state: &State, in_flight_of: &dyn Fn(JobIdx) -> u32) {
        if !self.built {
            self.build(state, in_flight_of);
        }
    }

    /// The fixed figures of a runnable job of the run.
    pub(crate) fn fixed(&self, j: JobIdx) -> &Fixed {
        self.fixed[j.0 as usize].as_ref().expect("a job of the run's draws is runnable")
    }

    fn fixed_mut(&mut self, j: JobIdx) -> &mut Fixed {
        self.fixed[j.0 as usize].as_mut().expect("a job of the run's draws is runnable")
    }

    fn is_of_run(&self, j: JobIdx) -> bool {
        self.fixed.get(j.0 as usize).is_some_and(Option::is_some)
    }

    /// Tasks of job `j` the run may still book: its wanting dispatch less
    /// those in flight and booked.
    fn wanting(&self, j: JobIdx) -> u32 {
        self.fixed(j).wanting_before.saturating_sub(self.booked[j.0 as usize])
    }

    fn wants_capacity(&mut self, state: &State, j: JobIdx) -> bool {
        *self.wants[j.0 as usize].get_or_insert_with(|| super::want::wants_capacity(state, j))
    }

    fn benchmark_sum(&self, j: JobIdx) -> u64 {
        self.benchmark_sums[j.0 as usize]
    }

    fn inputs(&self, j: JobIdx) -> RankingInputs {
        let fixed = *self.fixed(j);
        RankingInputs {
            user_priority: fixed.user_priority,
            project_priority: fixed.project_priority,
            wall_clock_ms: fixed.wall_clock_ms,
            cpu_ms_completed: fixed.cpu_ms_completed,
            running_tasks: fixed.running_before.saturating_add(self.booked[j.0 as usize]),
            creation_rank: fixed.creation_rank,
            benchmark_sum_mflops: self.benchmark_sum(j),
        }
    }

    fn tickets(&self, j: JobIdx) -> u128 {
        tickets_of(ranking(&self.inputs(j)))
    }

    /// Whether an entrant `j` keeps Lowest projects out of the draw.
    fn is_normal_wanting(&mut self, state: &State, j: JobIdx) -> bool {
        self.fixed(j).project_priority <= PRIORITY_NORMAL && self.wants_capacity(state, j)
    }

    /// The entrant of simple group `g`: its first project still wanting.
    fn simple_entrant(&mut self, g: u32) -> Option<JobIdx> {
        let group = &self.groups[g as usize];
        let mut at = self.cursor[g as usize] as usize;
        while at < group.len() && self.wanting(group[at]) == 0 {
            at += 1;
        }
        self.cursor[g as usize] = at as u32;
        group.get(at).copied()
    }

    /// The entrant of any group for a core `e` with `free` slots.
    fn entrant(&self, state: &State, g: u32, (e, free): (EngineIdx, u32)) -> Option<JobIdx> {
        self.groups[g as usize].iter().copied().find(|&j| {
            let fixed = self.fixed(j);
            fixed.slots_per_task <= free && self.wanting(j) > 0 && state.category(fixed.category).is_eligible(e)
        })
    }

    /// What simple group `g`'s entrant holds now: (tickets, Lowest, Normal-or-higher wanting).
    fn simple_figures(&mut self, state: &State, g: u32) -> (u128, bool, bool) {
        match self.simple_entrant(g) {
            None => (0, false, false),
            Some(j) => (
                self.tickets(j),
                self.fixed(j).project_priority == PRIORITY_LOWEST,
                self.is_normal_wanting(state, j),
            ),
        }
    }

    fn build_class(&mut self, state: &State, k: usize) {
        let groups = std::mem::take(&mut self.classes[k].groups);
        let figures: Vec<(u128, bool, bool)> = groups.iter().map(|&g| self.simple_figures(state, g)).collect();
        let class = &mut self.classes[k];
        class.groups = groups;
        class.built = true;
        class.tickets = figures.iter().map(|f| f.0).collect();
        class.lowest = figures.iter().map(|f| f.1).collect();
        class.normal_wanting = figures.iter().map(|f| f.2).collect();
        let not_lowest: Vec<u128> = figures.iter().map(|&(t, lowest, _)| if lowest { 0 } else { t }).collect();
        class.all = Fenwick::from_values(&class.tickets);
        class.not_lowest = Fenwick::from_values(&not_lowest);
        class.total_all = class.tickets.iter().sum();
        class.total_not_lowest = not_lowest.iter().sum();
        class.n_all = figures.iter().filter(|f| f.0 > 0).count() as u32;
        class.n_not_lowest = figures.iter().filter(|f| f.0 > 0 && !f.1).count() as u32;
        class.n_normal_wanting = figures.iter().filter(|f| f.2).count() as u32;
    }

    /// Re-reads simple group `g`'s entrant into its built class.
    fn refresh(&mut self, state: &State, g: u32) {
        let Some((k, at)) = self.group_class[g as usize] else { return };
        let (k, at) = (k as usize, at as usize);
        if !self.classes[k].built {
            return;
        }
        let (tickets, lowest, normal_wanting) = self.simple_figures(state, g);
        let class = &mut self.classes[k];
        let (old, old_lowest) = (class.tickets[at], class.lowest[at]);
        class.all.add(at, tickets.wrapping_sub(old));
        class.total_all = class.total_all - old + tickets;
        let old_not_lowest = if old_lowest { 0 } else { old };
        let not_lowest = if lowest { 0 } else { tickets };
        class.not_lowest.add(at, not_lowest.wrapping_sub(old_not_lowest));
        class.total_not_lowest = class.total_not_lowest - old_not_lowest + not_lowest;
        class.n_all = class.n_all - u32::from(old > 0) + u32::from(tickets > 0);
        class.n_not_lowest = class.n_not_lowest - u32::from(old > 0 && !old_lowest) + u32::from(tickets > 0 && !lowest);
        class.n_normal_wanting = class.n_normal_wanting - u32::from(class.normal_wanting[at]) + u32::from(normal_wanting);
        class.tickets[at] = tickets;
        class.lowest[at] = lowest;
        class.normal_wanting[at] = normal_wanting;
    }

    /// A task of `j` was booked on a core of `mflops`.
    pub(crate) fn booked(&mut self, state: &State, j: JobIdx, mflops: u64) {
        if !self.built || !self.is_of_run(j) {
            return;
        }
        let sum = &mut self.benchmark_sums[j.0 as usize];
        *sum = sum.saturating_add(mflops);
        self.booked[j.0 as usize] += 1;
        let g = self.fixed(j).group;
        self.refresh(state, g);
    }

    /// Core `e`'s entrants as the trees count them: fills the buffers with
    /// the eligible classes and the other groups' entrants, each with its
    /// tickets in this draw; returns (entrants, total tickets, Lowest left out).
    fn gather(&mut self, state: &State, core: (EngineIdx, u32)) -> (u32, u128, bool) {
        let (e, free) = core;
        let mut eligible = std::mem::take(&mut self.eligible_buffer);
        let mut complex = std::mem::take(&mut self.complex_buffer);
        eligible.clear();
        complex.clear();
        let (mut n_all, mut n_not_lowest, mut n_normal_wanting) = (0u32, 0u32, 0u32);
        for k in 0..self.class_keys.len() {
            let (category, slots_per_task) = self.class_keys[k];
            if slots_per_task > free || !state.category(category).is_eligible(e) {
                continue;
            }
            if !self.classes[k].built {
                self.build_class(state, k);
            }
            let class = &self.classes[k];
            if class.n_all > 0 {
                n_all += class.n_all;
                n_not_lowest += class.n_not_lowest;
                n_normal_wanting += class.n_normal_wanting;
                eligible.push(Eligible { class: k as u32, total: 0 });
            }
        }
        for at in 0..self.complex.len() {
            let g = self.complex[at];
            if let Some(j) = self.entrant(state, g, core) {
                let lowest = self.fixed(j).project_priority == PRIORITY_LOWEST;
                n_all += 1;
                n_not_lowest += u32::from(!lowest);
                n_normal_wanting += u32::from(self.is_normal_wanting(state, j));
                complex.push((j, lowest, 0));
            }
        }
        let leave_out_lowest = n_normal_wanting > 0;
        for entry in &mut eligible {
            let class = &self.classes[entry.class as usize];
            entry.total = if leave_out_lowest { class.total_not_lowest } else { class.total_all };
        }
        for entry in &mut complex {
            entry.2 = if entry.1 && leave_out_lowest { 0 } else { self.tickets(entry.0) };
        }
        let total: u128 =
            eligible.iter().map(|entry| entry.total).sum::<u128>() + complex.iter().map(|&(_, _, t)| t).sum::<u128>();
        self.eligible_buffer = eligible;
        self.complex_buffer = complex;
        (if leave_out_lowest { n_not_lowest } else { n_all }, total, leave_out_lowest)
    }

    /// Draws the winner among core `e`'s entrants (`None`: no entrant). With
    /// one entrant, no ticket is drawn (the generator does not advance).
    pub(crate) fn draw(
        &mut self,
        state: &State,
        in_flight_of: &dyn Fn(JobIdx) -> u32,
        core: (EngineIdx, u32),
        rng: &mut SplitMix64,
    ) -> Option<JobIdx> {
        self.ensure_built(state, in_flight_of);
        let (n, total, leave_out_lowest) = self.gather(state, core);
        if n == 0 {
            return None;
        }
        let mut ticket = if n == 1 { 0 } else { below(rng, total) };
        let mut winner = None;
        for at in 0..self.eligible_buffer.len() {
            let entry = self.eligible_buffer[at];
            if ticket < entry.total {
                let class = &self.classes[entry.class as usize];
                let tree = if leave_out_lowest { &class.not_lowest } else { &class.all };
                let g = class.groups[tree.find(ticket)];
                winner = self.simple_entrant(g);
                assert!(winner.is_some(), "a group holding tickets has an entrant");
                return winner;
            }
            ticket -= entry.total;
        }
        for &(j, _, t) in &self.complex_buffer {
            if ticket < t {
                winner = Some(j);
                break;
            }
            ticket -= t;
        }
        assert!(winner.is_some(), "a draw with entrants names a winner");
        winner
    }

    /// The number of core `e`'s entrants and their total tickets as the trees
    /// count them, for tests against [`Projects::entrants`].
    #[cfg(test)]
    pub(crate) fn counted(&mut self, state: &State, in_flight_of: &dyn Fn(JobIdx) -> u32, core: (EngineIdx, u32)) -> (u32, u128) {
        self.ensure_built(state, in_flight_of);
        let (n, total, _) = self.gather(state, core);
        (n, total)
    }

    /// Core `e`'s entrants, recounted from the groups (not from the trees), in
    /// the draw's order, at most `up_to`: for `why`, tests and the losers of a draw.
    pub(crate) fn entrants(
        &mut self,
        state: &State,
        in_flight_of: &dyn Fn(JobIdx) -> u32,
        core: (EngineIdx, u32),
        up_to: usize,
    ) -> Vec<Listed> {
        self.ensure_built(state, in_flight_of);
        let mut keyed: Vec<((u32, u32, u32), JobIdx)> = Vec::new();
        for g in 0..self.groups.len() as u32 {
            if let Some(j) = self.entrant(state, g, core) {
                let key = match self.group_class[g as usize] {
                    Some((k, at)) => (0, k, at),
                    None => (1, 0, g),
                };
                keyed.push((key, j));
            }
        }
        keyed.sort_unstable();
        let mut leave_out_lowest = false;
        for &(_, j) in &keyed {
            leave_out_lowest |= self.is_normal_wanting(state, j);
        }
        let mut listed = Vec::new();
        for &(_, j) in &keyed {
            if listed.len() == up_to {
                break;
            }
            if leave_out_lowest && self.fixed(j).project_priority == PRIORITY_LOWEST {
                continue;
            }
            let inputs = self.inputs(j);
            let ranking = ranking(&inputs);
            listed.push(Listed { job: j, inputs, ranking, tickets: tickets_of(ranking) });
        }
        listed
    }
}
