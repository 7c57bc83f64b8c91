//! Parallel tasks over several engines (`span = "site"`, Grid Engine's parallel
//! environments with `allocation_rule $fill_up`).
//!
//! A task of `slots_per_task = N` with span `site` starts only when all N slots
//! are booked at once on engines sharing one value of the `site` property: one
//! `DispatchParallel` per engine in the same batch, each naming every part
//! (engine, its login epoch, its slots), the master first. The engines are
//! filled as `$fill_up` does (sge_pe(5)): in the dispatch ranking's order
//! (tier, score, queue sort, engine id), each engine gives all its free
//! slots before the next is used, within the site of the best-ranked engine
//! whose site has N free slots in at most [`PARALLEL_PARTS_MAX`] engines.
//! Engines without a `site` take no part. A task of span `engine` is
//! Grid Engine's `$pe_slots`: all its slots on one engine, as before.
//!
//! The master engine runs the command with `GRIDFOLD_NODEFILE` naming every
//! part; the others hold their slots (and run nothing) until the master
//! attempt ends, which frees every part. A companion engine lost, logged out
//! or logged in again breaks the attempt: [`requeue_broken`] requeues it
//! (reason `part-lost`), and the master's engine hears it as a stop. The
//! state side (companion bookings) is `state/parallel.rs`.
//!
//! What it does not do: redundant copies of parallel tasks (a site job's task
//! gets none), resource-first families (Techila passes site jobs over), and a
//! per-engine command on the companions.

use std::collections::{BTreeMap, BTreeSet};

use super::budget::Orders;
use super::in_flight::InFlight;
use crate::core::event::{Order, ParallelPart, RequeueReason, Span, Unschedulable, PARALLEL_PARTS_MAX};
use crate::core::ids::{Attempt, EngineId};
use crate::core::state::{Category, EngineIdx, EngineStatus, JobIdx, State, TaskKey};

/// Most `part-lost` requeues one run orders.
pub const PART_LOST_REQUEUES_PER_RUN_MAX: usize = 256;

/// Defined beside [`Span`], whose meaning it is.
pub use crate::core::event::slots_per_engine;

/// One free engine offered to [`fill_up`], in ranking order.
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    pub engine: EngineIdx,
    /// Its position among the run's candidates.
    pub at: u32,
    pub free: u32,
}

/// The sites of the logged-in engines, numbered for one run so that grouping
/// engines by site indexes a vector instead of comparing names in a map. The
/// numbers follow the names' order, so a tie broken by number is broken by
/// name. Built in one pass; engines of one site usually sit next to each
/// other, so most engines cost one comparison with the previous one's site.
pub struct SiteIndex {
    n_sites: u32,
    /// Per engine index: its site's number, or [`SiteIndex::NONE`].
    of_engine: Vec<u32>,
}

impl SiteIndex {
    const NONE: u32 = u32::MAX;

    pub fn new(state: &State) -> SiteIndex {
        let mut by_name: BTreeMap<&str, u32> = BTreeMap::new();
        let mut of_engine = Vec::with_capacity(state.engines().len());
        let mut previous: Option<(&str, u32)> = None;
        for engine in state.engines() {
            let site = engine.props.site.as_str();
            if engine.status != EngineStatus::LoggedIn || site.is_empty() {
                of_engine.push(Self::NONE);
                continue;
            }
            let number = match previous {
                Some((name, number)) if name == site => number,
                _ => {
                    let next = by_name.len() as u32;
                    *by_name.entry(site).or_insert(next)
                }
            };
            previous = Some((site, number));
            of_engine.push(number);
        }
        // Renumber in name order.
        let mut in_name_order = vec![0u32; by_name.len()];
        for (order, &first_seen) in by_name.values().enumerate() {
            in_name_order[first_seen as usize] = order as u32;
        }
        for number in of_engine.iter_mut().filter(|number| **number != Self::NONE) {
            *number = in_name_order[*number as usize];
        }
        SiteIndex { n_sites: by_name.len() as u32, of_engine }
    }

    /// The number of engine `e`'s site; `None` for an engine without a site
    /// or not logged in.
    pub fn of(&self, e: EngineIdx) -> Option<u32> {
        self.of_engine.get(e.0 as usize).copied().filter(|&number| number != Self::NONE)
    }

    pub fn len(&self) -> usize {
        self.n_sites as usize
    }

    pub fn is_empty(&self) -> bool {
        self.n_sites == 0
    }
}

/// A site's slots gathered so far: their sum and the (offer, slots) parts.
type SiteFill = (u32, Vec<(Offer, u32)>);

/// `$fill_up` within a site, fed the offers best first: each engine's free
/// slots add to its site's sum; the first site to reach `needed` gets the
/// task, its engines in ranking order each giving all its free slots (the last
/// what is still needed). Fed one offer at a time, so a caller walking a
/// ranked queue stops as soon as a site is full.
pub struct FillUp<'a> {
    needed: u32,
    sites: &'a SiteIndex,
    /// Per site number, what is gathered there.
    gathered: Vec<SiteFill>,
}

impl<'a> FillUp<'a> {
    pub fn new(needed: u32, sites: &'a SiteIndex) -> FillUp<'a> {
        FillUp { needed, sites, gathered: vec![(0, Vec::new()); sites.len()] }
    }

    /// Adds the next offer; returns the (offer, slots) parts, the master
    /// first, once a site has all the slots.
    pub fn offer(&mut self, offer: Offer) -> Option<Vec<(Offer, u32)>> {
        let site = self.sites.of(offer.engine)?;
        if offer.free == 0 {
            return None;
        }
        let (sum, parts) = &mut self.gathered[site as usize];
        if parts.len() == PARALLEL_PARTS_MAX {
            return None;
        }
        let take = offer.free.min(self.needed - *sum);
        *sum += take;
        parts.push((offer, take));
        if *sum == self.needed {
            return Some(std::mem::take(parts));
        }
        None
    }
}

/// [`FillUp`] over offers already ranked, best first.
pub fn fill_up(sites: &SiteIndex, needed: u32, offers: impl IntoIterator<Item = Offer>) -> Option<Vec<(Offer, u32)>> {
    let mut fill = FillUp::new(needed, sites);
    offers.into_iter().find_map(|offer| fill.offer(offer))
}

/// Free slots of the logged-in engines that may take a part of the task, by site (engine id
/// order within each), for `why`: engines without a `site` are left out.
pub fn free_by_site(state: &State, key: TaskKey) -> BTreeMap<String, Vec<(EngineId, u32)>> {
    let rules = super::filters::TaskRules::new(state, key);
    let job = state.job(key.job);
    let category = job.condition(key.index).and_then(|c| c.category).unwrap_or(job.category);
    let mut sites: BTreeMap<String, Vec<(EngineId, u32)>> = BTreeMap::new();
    for (n, engine) in state.engines().iter().enumerate() {
        let e = EngineIdx(n as u32);
        let logged_in = engine.status == crate::core::state::EngineStatus::LoggedIn;
        if !logged_in || engine.props.site.is_empty() || !state.category(category).is_eligible(e) || rules.check(e).is_err() {
            continue;
        }
        sites.entry(engine.props.site.clone()).or_default().push((engine.id.clone(), engine.free_slots()));
    }
    for engines in sites.values_mut() {
        engines.sort();
    }
    sites
}

/// The orders of one parallel attempt: one per part, each naming every part.
pub fn orders_for(state: &State, key: TaskKey, attempt: Attempt, parts: &[(EngineIdx, u32)]) -> Vec<Order> {
    let named: Vec<ParallelPart> = parts
        .iter()
        .map(|&(e, slots)| {
            let engine = state.engine(e);
            ParallelPart { engine: engine.id.clone(), epoch: engine.epoch, slots }
        })
        .collect();
    named
        .iter()
        .map(|part| Order::DispatchParallel {
            task: state.task_ref(key),
            attempt,
            engine: part.engine.clone(),
            epoch: part.epoch,
            parts: named.clone(),
        })
        .collect()
}

/// Requeues every parallel attempt a companion of which lost its engine: the
/// master's engine is told to stop, and every part is freed.
pub fn requeue_broken(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    for (key, attempt) in state.parallel().broken().take(PART_LOST_REQUEUES_PER_RUN_MAX) {
        let task = state.task_ref(key);
        if in_flight.is_ending(key, attempt) || orders.ends(&task, attempt) {
            continue;
        }
        let Some(live) = state.live_attempt_numbered(key, attempt) else { continue };
        if lost.contains(&live.engine) || in_flight.is_lost(live.engine) {
            continue;
        }
        let engine = state.engine(live.engine).id.clone();
        if !orders.push(Order::Requeue { task, attempt, engine, reason: RequeueReason::PartLost }) {
            return;
        }
    }
}

/// Why a parallel task waits: the slots it needs at once, and the free slots
/// of the engines that may take a part, by site.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ParallelWhy {
    pub slots: u32,
    pub sites: BTreeMap<String, Vec<(String, u32)>>,
}

impl std::fmt::Display for ParallelWhy {
    /// `parallel task waiting for 4 slots at once: 2 free on site lyon (a1: 2, a2: 0)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "parallel task waiting for {} slots at once:", self.slots)?;
        if self.sites.is_empty() {
            return f.write_str(" no engine with a `site` may take a part");
        }
        for (n, (site, engines)) in self.sites.iter().enumerate() {
            let free: u32 = engines.iter().map(|(_, free)| free).sum();
            let listed: Vec<String> = engines.iter().map(|(engine, free)| format!("{engine}: {free}")).collect();
            let sep = if n == 0 { " " } else { "; " };
            write!(f, "{sep}{free} free on site {site} ({})", listed.join(", "))?;
        }
        Ok(())
    }
}

/// The parallel rule's answer for a waiting task of span `site`.
pub fn why(state: &State, key: TaskKey) -> Option<ParallelWhy> {
    let job = state.job(key.job);
    if job.options.span != Span::Site {
        return None;
    }
    let sites = free_by_site(state, key)
        .into_iter()
        .map(|(site, engines)| (site, engines.into_iter().map(|(engine, free)| (engine.to_string(), free)).collect()))
        .collect();
    Some(ParallelWhy { slots: job.slots_per_task, sites })
}

/// A live parallel task's parts (engine, slots), the master first; empty for other tasks.
pub fn parts_of_task(state: &State, key: TaskKey) -> Vec<(String, u32)> {
    let Some(live) = state.live_attempt(key) else { return Vec::new() };
    state
        .parallel()
        .parts_of(key, live.attempt)
        .map(|parts| parts.iter().map(|part| (state.engine(part.engine).id.to_string(), part.slots)).collect())
        .unwrap_or_default()
}

/// The most slots a `span = "site"` task of job `j` could ever hold at once:
/// [`category_site_slots_max`] of its category.
pub fn site_slots_max(state: &State, j: JobIdx) -> u32 {
    category_site_slots_max(state, &SiteIndex::new(state), state.category(state.job(j).category))
}

/// The most slots a `span = "site"` task of the category could ever hold at
/// once: for each site, the slots of its logged-in engines the category fits
/// (requirements met, a slot or more; a root library they lack they can
/// sync), the [`PARALLEL_PARTS_MAX`] largest of them summed; the best site's.
/// Without a root library the fit is the category's eligibility bitset, read
/// rather than evaluated: the unschedulable check asks this of every site
/// category each run.
pub fn category_site_slots_max(state: &State, sites: &SiteIndex, category: &Category) -> u32 {
    let mut by_site: Vec<Vec<u32>> = vec![Vec::new(); sites.len()];
    for (n, engine) in state.engines().iter().enumerate() {
        let e = EngineIdx(n as u32);
        let Some(site) = sites.of(e) else { continue };
        let fits = match category.library {
            None => category.is_eligible(e),
            Some(_) => category.fits(engine),
        };
        if fits {
            by_site[site as usize].push(engine.slots);
        }
    }
    by_site
        .into_iter()
        .map(|mut slots| {
            slots.sort_unstable_by(|a, b| b.cmp(a));
            slots.iter().take(PARALLEL_PARTS_MAX).fold(0u32, |sum, &n| sum.saturating_add(n))
        })
        .max()
        .unwrap_or(0)
}

/// Why a `span = "site"` job could never start with the engines logged in:
/// no site has its slots ([`site_slots_max`]); `None` for other jobs.
pub fn site_unschedulable(state: &State, j: JobIdx) -> Option<Unschedulable> {
    let job = state.job(j);
    (job.options.span == Span::Site && site_slots_max(state, j) < job.slots_per_task)
        .then_some(Unschedulable::NoSiteHasEnoughSlots)
}
