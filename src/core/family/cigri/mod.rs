//! CiGri's campaign scheduler (`algorithm = "cigri"`, seed 004, issue 13).
//!
//! A CiGri *campaign* is a gridfold job whose tasks are its jobs; a *cluster*
//! is the set of engines sharing the value of the custom property `cluster`
//! (engines without it form the unnamed cluster `""`). A later Slurm gateway
//! engine logs in with its cluster's name, so it fits here unchanged.
//!
//! # The metascheduler (the seed's note of 20 May 2009)
//! On each cluster: test campaigns first (FIFO), then the default campaigns of
//! users with **affinity** for that cluster, then the rest (FIFO). Here:
//! - **Ordering** ([`CigriOrder`]): test campaigns by submission, then every
//!   other runnable campaign in gridfold's usual order (`-p`, then
//!   submission). Test campaigns are served one booking each per run.
//! - **Affinity** (filter [`filter`], rule `cigri-affinity-first`): on a
//!   cluster that some user has affinity for, a campaign of a user without
//!   affinity for it may take an engine only when no default campaign of a
//!   user with affinity for it has a waiting task that engine may take: "the
//!   others use what is left". The filter reads the folded state, so an
//!   affinity campaign whose last waiting tasks this run books still holds
//!   its cluster for this run; the overflow starts at the next run (after
//!   the batch is read back). So with the seed's example (campaign1 has
//!   affinity for cluster1, campaign2 for both), campaign1 runs on cluster1,
//!   campaign2 on cluster2 and on what campaign1 leaves of cluster1, and
//!   campaign3 only on what both leave.
//! - **Test campaigns** (filter rule `cigri-test-cluster-done`): a test task
//!   goes only to a cluster no other task of its campaign went to (and a
//!   retried test task back to its own cluster). The fold records each
//!   cluster with its task (`family::cigri::state`). Once every cluster whose
//!   logged-in engines the campaign's requirements allow has had its test
//!   task and each of those tasks has ended, the stage
//!   [`end_test_campaigns`] orders `EndTestCampaign`: the job ends (done, or
//!   failed when a tested task failed) and its other tasks are dropped: they
//!   end cancelled, as the seed's test scheduling "drops all the other
//!   defined jobs".
//!
//! # Finalize (the seed's "finalize scheduling")
//! When a default campaign has no waiting task left and the grid has free
//! slots its tasks may use, its running tasks get copies (the existing
//! redundant-copy machinery: `Reschedule` with the reason `finalize`, the copy
//! queued first), up to `finalize_copies_max` copies per task, oldest
//! dispatch first, one per task per run and no more per run than there are
//! free slots. The first result wins and cancels the other attempts (as a
//! Techila expired task's does). `finalize_copies_max = 0` turns it off.
//!
//! # The predictor and the sink effect
//! [`predictor`] (the seed's Spritz) folds each campaign's throughput, mean
//! duration and estimated end, per campaign and per cluster; [`sink`] flags
//! engines and clusters whose tasks "succeed" in a tiny fraction of the
//! campaign's median (order `FlagSink`, filter rule `cigri-sink`).
//!
//! # Not here
//! The job ratio and flood control of gateway engines: [`super::flood`],
//! for every family (a gateway is an engine property, not a campaign's).
//!
//! Cost: the ordering is built once per run over the runnable jobs; the
//! affinity filter is free when the policy has no affinity, and otherwise
//! asks a lookup built once per folded state (`family::cigri::state::AffinityIndex`):
//! one category bitset per category of the cluster's affinity campaigns. The
//! dispatch loop asks the filter once per engine per run and class
//! ([`filter_scope`]: a default campaign's class is its owner's affinities, or
//! its own once it flagged a sink; a test campaign's untried tasks share their
//! campaign's), so a campaign kept off a cluster costs one pass a run, not one
//! per task and engine.

use std::collections::BTreeSet;

use super::data::FilterScope;
use super::reasons::{FamilyOrderProblem, FamilyUnfit};
use crate::core::reject::OrderProblem;
use reasons::{CigriOrderProblem, CigriUnfit};
use crate::core::schedule::unfit::Unfit;
use crate::core::schedule::budget::Orders;
use crate::core::schedule::in_flight::InFlight;
use crate::core::event::{Algorithm, CampaignType, CigriPolicy, Order, RescheduleReason};
use crate::core::state::{Engine, EngineIdx, EngineStatus, JobIdx, JobStatus, State, TaskKey};

/// Most (user, cluster) affinities a policy may list.
pub const AFFINITIES_MAX: usize = 256;
/// Longest user or cluster name in an affinity, in bytes.
pub const NAME_BYTES_MAX: usize = 64;
/// Highest `finalize_copies_max` a policy may set.
pub const FINALIZE_COPIES_MAX_MAX: u32 = 8;
/// Highest `sink_ratio_milli` (1,000: the whole median).
pub const SINK_RATIO_MILLI_MAX: u32 = 1_000;
/// Highest `sink_min_tasks`.
pub const SINK_MIN_TASKS_MAX: u32 = 1_000_000;
/// Longest predictor window: seven days of log time.
pub const PREDICTOR_WINDOW_MS_MAX: u64 = 7 * 24 * 3_600_000;
/// Most finalize `Reschedule` orders in one run.
pub const FINALIZE_PER_RUN_MAX: usize = 1_024;
/// Most `EndTestCampaign` orders in one run.
pub const END_TESTS_PER_RUN_MAX: usize = 256;

/// Checks a policy's CiGri settings against their limits: the failing field and why.
pub fn check_policy(policy: &CigriPolicy) -> Result<(), (String, String)> {
    if policy.affinity.len() > AFFINITIES_MAX {
        return Err(("affinity".into(), format!("{} affinities, more than {AFFINITIES_MAX}", policy.affinity.len())));
    }
    let mut seen = BTreeSet::new();
    for (i, row) in policy.affinity.iter().enumerate() {
        for (name, value) in [("user", &row.user), ("cluster", &row.cluster)] {
            if value.is_empty() || value.len() > NAME_BYTES_MAX {
                return Err((format!("affinity[{i}].{name}"), format!("must be 1 to {NAME_BYTES_MAX} bytes")));
            }
        }
        if !seen.insert(row) {
            return Err((format!("affinity[{i}]"), format!("user {} and cluster {} are listed twice", row.user, row.cluster)));
        }
    }
    let bounds: [(&str, u64, u64); 4] = [
        ("finalize_copies_max", u64::from(policy.finalize_copies_max), u64::from(FINALIZE_COPIES_MAX_MAX)),
        ("sink_ratio_milli", u64::from(policy.sink_ratio_milli), u64::from(SINK_RATIO_MILLI_MAX)),
        ("sink_min_tasks", u64::from(policy.sink_min_tasks), u64::from(SINK_MIN_TASKS_MAX)),
        ("predictor_window_ms", policy.predictor_window_ms, PREDICTOR_WINDOW_MS_MAX),
    ];
    for (field, value, max) in bounds {
        if value > max {
            return Err((field.into(), format!("{value}, more than {max}")));
        }
    }
    if policy.predictor_window_ms == 0 {
        return Err(("predictor_window_ms".into(), "must be at least 1".into()));
    }
    Ok(())
}


fn engines_indexed(state: &State) -> impl Iterator<Item = (EngineIdx, &Engine)> {
    state.engines().iter().enumerate().map(|(at, engine)| (EngineIdx(at as u32), engine))
}

fn is_test(state: &State, j: JobIdx) -> bool {
    state.job(j).options.campaign == CampaignType::Test
}

/// The clusters whose logged-in engines job `j`'s requirements allow, by name.
pub fn allowed_clusters(state: &State, j: JobIdx) -> BTreeSet<&str> {
    let category = state.category(state.job(j).category);
    engines_indexed(state)
        .filter(|(e, engine)| engine.status == EngineStatus::LoggedIn && category.is_eligible(*e))
        .map(|(_, engine)| cluster_of(engine))
        .collect()
}

/// Whether job `j`'s requirements allow more than `n` clusters (of logged-in
/// engines): `allowed_clusters(state, j).len() > n`, asked of every runnable
/// test campaign each run, so the engines are walked only until it is known
/// rather than all of them collected and sorted by name.
fn allows_more_clusters_than(state: &State, j: JobIdx, n: usize) -> bool {
    let category = state.category(state.job(j).category);
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    engines_indexed(state)
        .filter(|(e, engine)| engine.status == EngineStatus::LoggedIn && category.is_eligible(*e))
        .any(|(_, engine)| {
            seen.insert(cluster_of(engine));
            seen.len() > n
        })
}

/// The metascheduler's job order for one run: test campaigns by submission
/// (each served for one booking, then not again this run), then the other
/// runnable campaigns in `-p`-then-submission order, each served until it
/// has nothing more it can dispatch.
pub struct CigriOrder {
    jobs: std::vec::IntoIter<JobIdx>,
    /// A default campaign that just booked: it is asked again first.
    again: Option<JobIdx>,
}

impl CigriOrder {
    pub fn new(state: &State, in_flight: &InFlight) -> CigriOrder {
        let mut tests: Vec<JobIdx> = Vec::new();
        let mut rest: Vec<JobIdx> = Vec::new();
        for rank in state.runnable_jobs() {
            let j = rank.job;
            if !is_test(state, j) {
                rest.push(j);
                continue;
            }
            // A test campaign with a dispatch in flight waits for it to be read
            // back (its cluster is recorded then), and one that tested every
            // cluster it may use has nothing more to run.
            let tested = state.job(j).families.cigri.tested.len();
            if in_flight.dispatched_of_job(j) == 0 && allows_more_clusters_than(state, j, tested) {
                tests.push(j);
            }
        }
        tests.sort_by_key(|&j| (state.job(j).submit_seq, j));
        tests.extend(rest);
        CigriOrder { jobs: tests.into_iter(), again: None }
    }

    pub fn next(&mut self, _state: &State) -> Option<JobIdx> {
        self.again.take().or_else(|| self.jobs.next())
    }

    /// The run booked a task of `j`: a default campaign goes on, a test campaign waits for the next run.
    pub fn booked(&mut self, state: &State, j: JobIdx) {
        if !is_test(state, j) {
            self.again = Some(j);
        }
    }
}

/// What `why` shows of a campaign's place in the order.
pub fn figures(state: &State, j: JobIdx) -> Vec<(&'static str, i64)> {
    let job = state.job(j);
    vec![
        ("test_campaign", i64::from(is_test(state, j))),
        ("priority", i64::from(job.priority)),
        ("submitted_seq", job.submit_seq.0 as i64),
    ]
}

/// The family's filter: test campaigns' one task per cluster, and affinity.
pub fn filter(state: &State, key: TaskKey, e: EngineIdx) -> Result<(), Unfit> {
    let job = state.job(key.job);
    let cluster = cluster_of(state.engine(e));
    if sink::excluded(job, e, cluster) {
        return Err(refused(CigriUnfit::Sink));
    }
    if job.options.campaign == CampaignType::Test {
        let campaign = &job.families.cigri;
        return match campaign.tested.get(cluster) {
            Some(&task) if task == key.index => Ok(()),
            Some(_) => Err(refused(CigriUnfit::TestClusterDone)),
            None if campaign.cluster_of_task(key.index).is_some() || campaign.tested.len() >= TESTED_CLUSTERS_MAX => {
                Err(refused(CigriUnfit::TestClusterDone))
            }
            None => Ok(()),
        };
    }
    if state.policy.cigri.affinity.is_empty() {
        return Ok(());
    }
    let first = crate::core::family::cigri::hooks::affinity_index(state).other_first(state, cluster, &job.owner, key.job, e);
    if first == Some(true) { Err(refused(CigriUnfit::AffinityFirst)) } else { Ok(()) }
}

/// The shared reason for a refusal by one of CiGri's rules.
fn refused(rule: CigriUnfit) -> Unfit {
    Unfit::Family(FamilyUnfit::Cigri(rule))
}

/// CiGri's own order about job `j` read back (`EndTestCampaign`,
/// `FlagSink`): applied when it holds, refused with its problem otherwise.
pub(crate) fn read_back_job_order(state: &mut State, j: JobIdx, order: &Order) -> Result<(), OrderProblem> {
    let problem = |problem| OrderProblem::Family(FamilyOrderProblem::Cigri(problem));
    match order {
        Order::EndTestCampaign { .. } => {
            if !test_campaign_done(state, j) {
                return Err(problem(CigriOrderProblem::TestCampaignNotDone));
            }
            end_test_campaign(state, j);
        }
        Order::FlagSink { engine, cluster, .. } => {
            let target = sink::target_of(state, engine.as_ref(), cluster).ok_or(OrderProblem::UnknownEngine)?;
            let medians = sink::flag_wanted(state, j, &target).ok_or(problem(CigriOrderProblem::NotASink))?;
            sink::flag(state, j, target, medians);
        }
        _ => return Err(OrderProblem::UnknownJob),
    }
    Ok(())
}

/// Classes of [`FilterScope::Class`] with this bit set are one job's own.
const CLASS_OF_ONE_JOB: u64 = 1 << 32;

/// The scope of [`filter`] on task `key`. A default campaign's verdicts
/// depend on its owner's affinities (the same for every campaign of the
/// owner) and on its own sink flags (then the class is the campaign's own).
/// A test campaign's untried tasks share theirs (the clusters not yet
/// tested); a task tied to a cluster has its own.
pub fn filter_scope(state: &State, key: TaskKey) -> FilterScope {
    let job = state.job(key.job);
    let own_class = FilterScope::Class(CLASS_OF_ONE_JOB | u64::from(key.job.0));
    if job.options.campaign == CampaignType::Test {
        return if job.families.cigri.cluster_of_task(key.index).is_some() { FilterScope::Task } else { own_class };
    }
    if !job.families.cigri.sinks.is_empty() {
        return own_class;
    }
    if state.policy.cigri.affinity.is_empty() {
        return FilterScope::Class(0);
    }
    FilterScope::Class(crate::core::family::cigri::hooks::affinity_index(state).owner_class(&job.owner))
}

/// Per engine index, whether [`filter`] refuses task `key` there (asked once
/// per run and class: see [`filter_scope`]).
pub fn refused_engines(state: &State, key: TaskKey) -> Vec<bool> {
    (0..state.engines().len()).map(|at| filter(state, key, EngineIdx(at as u32)).is_err()).collect()
}

/// Whether test campaign `j` is done: active, it ran a task on every cluster
/// its requirements allow among the logged-in engines (at least one), and
/// every such task has ended.
pub fn test_campaign_done(state: &State, j: JobIdx) -> bool {
    let job = state.job(j);
    if job.status != JobStatus::Active || job.options.campaign != CampaignType::Test || job.families.cigri.tested.is_empty() {
        return false;
    }
    let all_ended = job.families.cigri.tested.values().all(|&index| state.task_has_ended(TaskKey { job: j, index }));
    all_ended && allowed_clusters(state, j).iter().all(|cluster| job.families.cigri.tested.contains_key(*cluster))
}

/// Folds an accepted `EndTestCampaign`: the job ends, its untried tasks cancelled.
pub(crate) fn end_test_campaign(state: &mut State, j: JobIdx) {
    let status = if state.job(j).counts.failed > 0 { JobStatus::Failed } else { JobStatus::Done };
    state.end_job(j, status);
}

/// Orders the end of every test campaign that is done.
pub fn end_test_campaigns(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    let mut n_ordered = 0;
    for (j, job) in state.jobs_indexed() {
        if job.options.campaign != CampaignType::Test || in_flight.is_failing(j, None) || !test_campaign_done(state, j) {
            continue;
        }
        if n_ordered == END_TESTS_PER_RUN_MAX
            || !orders.push(Order::EndTestCampaign { job: job.id.clone(), clusters: job.families.cigri.tested.len() as u32 })
        {
            return;
        }
        n_ordered += 1;
    }
}

/// Whether the fold takes a finalize `Reschedule` of `key`: under `cigri`, a
/// default campaign's live task with no copy waiting and fewer than
/// `finalize_copies_max` copies alive.
pub fn finalize_wanted(state: &State, key: TaskKey) -> bool {
    let job = state.job(key.job);
    let copies_max = state.policy.cigri.finalize_copies_max;
    state.policy.algorithm == Algorithm::Cigri
        && copies_max > 0
        && job.is_active()
        && job.options.campaign == CampaignType::Default
        && state.task(key).is_live()
        && !job.copy_waits(key.index)
        && state.live_attempts_of(key).len() as u32 <= copies_max
}

/// Folds an accepted finalize: the task's first result will cancel the others, its copy waits first.
pub(crate) fn mark_finalized(state: &mut State, key: TaskKey) {
    state.add_racing_copy(key);
}

/// Finalize: campaigns with no waiting task left get copies of their running
/// tasks while free slots they may use remain (see the module's notes).
pub fn finalize(state: &State, in_flight: &InFlight, orders: &mut Orders) {
    if state.policy.cigri.finalize_copies_max == 0 {
        return;
    }
    let lost_in_run: Vec<EngineIdx> = orders
        .as_slice()
        .iter()
        .filter_map(|order| match order {
            Order::EngineLost { engine, .. } => state.engine_idx(engine),
            _ => None,
        })
        .collect();
    let mut n_ordered = 0usize;
    for (j, job) in state.jobs_indexed() {
        if job.status != JobStatus::Active
            || job.options.campaign != CampaignType::Default
            || job.counts.waiting > 0
            || !job.copies_waiting_is_empty()
            || job.awaits_parts()
            || job.counts.running + job.counts.dispatched == 0
            || in_flight.is_failing(j, None)
        {
            continue;
        }
        let category = state.category(job.category);
        let mut free: u32 = engines_indexed(state)
            .filter(|(e, engine)| {
                engine.takes_work() && category.is_eligible(*e) && !in_flight.is_lost(*e) && !lost_in_run.contains(e)
            })
            .map(|(e, engine)| engine.free_slots().saturating_sub(in_flight.booked_slots(e)) / job.slots_per_task.max(1))
            .sum();
        if free == 0 {
            continue;
        }
        let mut tasks: Vec<(u64, TaskKey, u32)> = Vec::new();
        for (key, live) in state.live_attempts_of_job_sorted(j) {
            match tasks.last_mut() {
                Some((oldest, last, n)) if *last == key => {
                    *oldest = (*oldest).min(live.dispatched_ms);
                    *n += 1;
                }
                _ => tasks.push((live.dispatched_ms, key, 1)),
            }
        }
        tasks.sort_unstable();
        for (dispatched_ms, key, _) in tasks {
            if free == 0 {
                break;
            }
            if !finalize_wanted(state, key) || in_flight.is_rescheduled(key) {
                continue;
            }
            let live = state.live_attempts_of(key);
            if live.iter().any(|attempt| in_flight.is_ending(key, attempt.attempt) || lost_in_run.contains(&attempt.engine)) {
                continue;
            }
            let task = state.task_ref(key);
            let elapsed_ms = crate::core::window::elapsed_ms(state.now_ms, dispatched_ms);
            if n_ordered == FINALIZE_PER_RUN_MAX
                || !orders.push(Order::Reschedule { task, reason: RescheduleReason::Finalize, elapsed_ms, limit_ms: 0 })
            {
                return;
            }
            n_ordered += 1;
            free -= 1;
        }
    }
}

pub mod cluster;
pub mod figures;
pub mod hooks;
pub mod predictor;
pub mod reasons;
pub mod sink;
pub mod state;
pub use cluster::cluster_of;
pub use state::TESTED_CLUSTERS_MAX;
pub mod summary;

#[cfg(test)]
mod tests;
