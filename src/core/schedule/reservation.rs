//! Resource reservation and backfilling (Grid Engine's sched_conf(5)
//! `max_reservation` and `default_duration`, and `qsub -R y`).
//!
//! With the policy's `max_reservation > 0`, a waiting task of a job that asks
//! for it (`reserve = true`, JobOptions 18) and that no free engine can take
//! now *reserves* the slots it will need: in the dispatch run, jobs in priority
//! order, the first `max_reservation` such jobs each reserve for their first
//! task that cannot start. When the slots will free is read from the folded
//! state: each live attempt ends at its dispatch time (log time) plus its
//! job's `wall_time_limit_ms`, or the policy's `default_duration_ms` for a job
//! without one; a companion part of a parallel attempt frees with its master.
//! Slots booked by orders in flight, or earlier in the same run, are counted
//! as never freeing (they have no dispatch time yet): a reservation may come
//! later than it could, never earlier.
//!
//! - span `engine`: the engine of the task's candidates where its slots are
//!   free soonest (ties by engine id) is reserved from that time;
//! - span `site`: the site where its slots are free soonest (ties by site
//!   name), each of its engines giving what is free by then, in engine id order.
//!
//! Every later task of the run (lower priority) may use a reserved engine's
//! slots only if it *backfills*: its own end (now plus its wall-time limit, or
//! `default_duration_ms`) comes no later than the reservation's start; or if
//! the engine has slots to spare at that start beyond the reservation (its
//! *surplus*, which such tasks use up). Two reservations of one run share no
//! engine. Nothing is stored: the reservation is derived again in every run
//! from the state, so replay and `--verify` re-derive it, and no event is new.
//!
//! Cost: the live attempts' ends are gathered once per run, on the first
//! reservation (one pass over the live attempts); each reservation then walks
//! the engines eligible for the task's category (a bitset) and the releases
//! on them. A run without a reserving job that cannot start pays nothing.
//!
//! What it does not do: reservations under resource-first families (Techila
//! reserves nothing), per-task reservations within one job (the job reserves
//! once), and preemption to honour a reservation.

use std::cell::Cell;
use std::collections::BTreeSet;

use crate::core::event::Span;
use super::parallel::SiteIndex;
use crate::core::state::{EngineIdx, EngineStatus, Job, JobIdx, LiveAttempt, State, TaskKey};

/// One reservation of the run: the task, when its slots are expected free,
/// and the slots it holds on each engine from then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    pub key: TaskKey,
    pub start_ms: u64,
    /// (engine, slots), in engine index order.
    pub parts: Vec<(EngineIdx, u32)>,
}

/// When a task of this job would end if it started at `from_ms`: its
/// wall-time limit, or the policy's `default_duration_ms` (saturating).
pub fn end_from(state: &State, job: &Job, from_ms: u64) -> u64 {
    let limit = if job.wall_time_limit_ms > 0 { job.wall_time_limit_ms } else { state.policy.reservation.default_duration_ms };
    from_ms.saturating_add(limit)
}

/// The reservations of one run and the rule they impose on later tasks.
#[derive(Debug, Default)]
pub(crate) struct Reservations {
    made: Vec<Reservation>,
    jobs: BTreeSet<JobIdx>,
    /// Per engine index, if reserved: (reservation start, slots to spare at
    /// it). Dense, as every pick of the run asks it of its best engine.
    engines: Vec<Option<(u64, u32)>>,
    /// Per engine index, the releases of its live attempts (end, slots),
    /// sorted; gathered on the first reservation of the run.
    releases: Option<Releases>,
    /// Set when a check refused an engine because of a reservation.
    refused: Cell<bool>,
}

impl Reservations {
    pub(crate) fn is_empty(&self) -> bool {
        self.made.is_empty()
    }

    pub(crate) fn made(self) -> Vec<Reservation> {
        self.made
    }

    /// Whether this job may reserve now: the policy allows more, it asks, and has not.
    pub(crate) fn may_reserve(&self, state: &State, j: JobIdx) -> bool {
        let max = state.policy.reservation.max_reservation as usize;
        max > 0 && self.made.len() < max && state.job(j).options.reserve && !self.jobs.contains(&j)
    }

    /// Whether a task needing `slots` on engine `e`, ending at `end_ms`, may
    /// book there: it backfills (ends by the reservation's start) or the
    /// engine has that many slots to spare.
    pub(crate) fn allows(&self, e: EngineIdx, slots: u32, end_ms: u64) -> bool {
        let Some((start, surplus)) = self.reserved_at(e) else { return true };
        let ok = end_ms <= start || slots <= surplus;
        if !ok {
            self.refused.set(true);
        }
        ok
    }

    /// Whether a reservation of the run holds engine `e`.
    pub(crate) fn holds(&self, e: EngineIdx) -> bool {
        self.reserved_at(e).is_some()
    }

    /// Engine `e`'s reservation: (start, slots to spare at it).
    fn reserved_at(&self, e: EngineIdx) -> Option<(u64, u32)> {
        self.engines.get(e.0 as usize).copied().flatten()
    }

    /// The slots a task ending at `end_ms` may take of `free` on engine `e`.
    pub(crate) fn usable(&self, e: EngineIdx, free: u32, end_ms: u64) -> u32 {
        match self.reserved_at(e) {
            Some((start, surplus)) if end_ms > start => free.min(surplus),
            _ => free,
        }
    }

    /// A task ending at `end_ms` booked `slots` on `e`: what it takes past a
    /// reservation's start comes off the surplus.
    pub(crate) fn booked(&mut self, e: EngineIdx, slots: u32, end_ms: u64) {
        if let Some(Some((start, surplus))) = self.engines.get_mut(e.0 as usize)
            && end_ms > *start
        {
            assert!(slots <= *surplus, "a booking past a reservation takes only its surplus");
            *surplus -= slots;
        }
    }

    /// Clears and returns whether a check refused an engine since the last call.
    pub(crate) fn take_refused(&self) -> bool {
        self.refused.replace(false)
    }

    /// Reserves for the task the slots it will need, if they ever free on the
    /// engines `eligible` says it may use; `used(e)` is the engine's slots in
    /// use now (this run's and in-flight bookings included). Returns whether
    /// it reserved; the job counts as having tried either way.
    pub(crate) fn reserve(
        &mut self,
        state: &State,
        sites: &SiteIndex,
        key: TaskKey,
        eligible: impl Iterator<Item = EngineIdx>,
        used: impl Fn(EngineIdx) -> u32,
    ) -> bool {
        self.jobs.insert(key.job);
        let releases = self.releases.get_or_insert_with(|| releases_by_engine(state));
        let job = state.job(key.job);
        let now = state.now_ms;
        // Per engine: its free slots now and its releases; engines reserved already are left out.
        let mut offers: Vec<Offer> = Vec::new();
        for e in eligible {
            let engine = state.engine(e);
            let held = self.engines.get(e.0 as usize).is_some_and(Option::is_some);
            if engine.status != EngineStatus::LoggedIn || engine.drained || held {
                continue;
            }
            let free = engine.slots.saturating_sub(used(e));
            let on = releases.of(e);
            offers.push((e, free, on));
        }
        let found = match job.options.span {
            Span::Engine => soonest_engine(now, job.slots_per_task, &offers),
            Span::Site => soonest_site(sites, now, job.slots_per_task, &offers),
        };
        let Some((start_ms, parts)) = found else { return false };
        for &(e, slots, free_at_start) in &parts {
            assert!(slots <= free_at_start, "a reservation takes what is free at its start");
            if self.engines.len() <= e.0 as usize {
                self.engines.resize(state.engines().len().max(e.0 as usize + 1), None);
            }
            let previous = self.engines[e.0 as usize].replace((start_ms, free_at_start - slots));
            assert!(previous.is_none(), "two reservations of a run share no engine");
        }
        self.made.push(Reservation { key, start_ms, parts: parts.into_iter().map(|(e, slots, _)| (e, slots)).collect() });
        true
    }
}

/// An engine a reservation may use: its index, free slots now, and releases (end, slots), sorted.
type Offer<'a> = (EngineIdx, u32, &'a [(u64, u32)]);
/// A reservation found: its start, and per engine (engine, slots taken, free at the start).
type Found = (u64, Vec<(EngineIdx, u32, u32)>);

/// The free slots of one engine at time `t`: free now plus what frees by then.
fn free_at(free_now: u32, releases: &[(u64, u32)], t: u64) -> u32 {
    releases.iter().take_while(|(end, _)| *end <= t).fold(free_now, |free, (_, slots)| free.saturating_add(*slots))
}

/// One engine with `needed` slots free soonest: (start, [(engine, needed, free at start)]).
fn soonest_engine(now: u64, needed: u32, offers: &[Offer]) -> Option<Found> {
    let mut best: Option<(u64, EngineIdx, u32)> = None;
    for &(e, free, releases) in offers {
        let mut at = (free >= needed).then_some((now, free));
        let mut sum = free;
        for &(end, slots) in releases {
            if at.is_some_and(|(t, _)| end > t) {
                break;
            }
            sum = sum.saturating_add(slots);
            if sum >= needed {
                at = Some((end.max(now), sum));
            }
        }
        let Some((t, free_then)) = at else { continue };
        let id = e;
        if best.is_none_or(|(bt, be, _)| (t, id) < (bt, be)) {
            best = Some((t, e, free_then));
        }
    }
    best.map(|(t, e, free_then)| (t, vec![(e, needed, free_then)]))
}

/// The site with `needed` slots free soonest over its engines (ties by site
/// name), and each engine's part then (engine index order).
fn soonest_site(sites: &SiteIndex, now: u64, needed: u32, offers: &[Offer]) -> Option<Found> {
    let mut members_of: Vec<Vec<usize>> = vec![Vec::new(); sites.len()];
    for (n, &(e, ..)) in offers.iter().enumerate() {
        if let Some(site) = sites.of(e) {
            members_of[site as usize].push(n);
        }
    }
    // Sites in number order, which is name order: the first of equal starts wins.
    let mut best: Option<(u64, usize)> = None;
    for (site, members) in members_of.iter().enumerate() {
        let mut sum: u32 = members.iter().map(|&n| offers[n].1).fold(0, u32::saturating_add);
        let mut t = (sum >= needed).then_some(now);
        if t.is_none() {
            let mut events: Vec<(u64, u32)> = members.iter().flat_map(|&n| offers[n].2.iter().copied()).collect();
            events.sort_unstable();
            for (end, slots) in events {
                sum = sum.saturating_add(slots);
                if sum >= needed {
                    t = Some(end.max(now));
                    break;
                }
            }
        }
        if let Some(t) = t
            && best.is_none_or(|(bt, _)| t < bt)
        {
            best = Some((t, site));
        }
    }
    let (start, site) = best?;
    let mut members: Vec<usize> = std::mem::take(&mut members_of[site]);
    members.sort_unstable_by_key(|&n| offers[n].0);
    let mut parts = Vec::new();
    let mut left = needed;
    for n in members {
        let (e, free, releases) = offers[n];
        let then = free_at(free, releases, start);
        let take = then.min(left);
        if take > 0 {
            parts.push((e, take, then));
            left -= take;
        }
        if left == 0 {
            break;
        }
    }
    assert_eq!(left, 0, "the site has the slots at the start found");
    Some((start, parts))
}

/// Per engine index, the releases of its live attempts and companion parts:
/// (end, slots), sorted by end, as one flat list cut per engine (two passes
/// over the live attempts, in the table's order: the per-engine sort makes
/// it irrelevant), rather than a vector per engine grown one push at a time.
#[derive(Debug)]
pub(crate) struct Releases {
    /// Per engine index, where its releases start in `all`; one more entry
    /// than engines, the last the end of `all`.
    starts: Vec<u32>,
    all: Vec<(u64, u32)>,
}

impl Releases {
    pub(crate) fn of(&self, e: EngineIdx) -> &[(u64, u32)] {
        let n = e.0 as usize;
        match (self.starts.get(n), self.starts.get(n + 1)) {
            (Some(&from), Some(&to)) => &self.all[from as usize..to as usize],
            _ => &[],
        }
    }
}

fn releases_by_engine(state: &State) -> Releases {
    let n_engines = state.engines().len();
    // Pass 1: how many releases each engine has (a companion part is one on its engine).
    let mut counts = vec![0u32; n_engines + 1];
    state.live.visit_unordered(|_, live| counts[live.engine.0 as usize] += 1);
    for live in state.copies.values() {
        counts[live.engine.0 as usize] += 1;
    }
    let companion_parts = || {
        state
            .parallel()
            .all()
            .filter_map(|(key, attempt, parts)| Some((state.live_attempt_numbered(key, attempt)?, key, &parts[1..])))
    };
    for (_, _, parts) in companion_parts() {
        for part in parts {
            counts[part.engine.0 as usize] += 1;
        }
    }
    let mut starts = Vec::with_capacity(n_engines + 1);
    let mut total = 0u32;
    for count in &counts {
        starts.push(total);
        total += count;
    }
    // Pass 2: each release at its engine's next free place.
    let mut next = starts.clone();
    let mut all = vec![(0u64, 0u32); total as usize];
    let mut place = |e: EngineIdx, release: (u64, u32)| {
        let at = &mut next[e.0 as usize];
        all[*at as usize] = release;
        *at += 1;
    };
    let release = |key: TaskKey, live: &LiveAttempt| {
        (end_from(state, state.job(key.job), live.dispatched_ms), state.attempt_slots(key, live.attempt))
    };
    state.live.visit_unordered(|key, live| place(live.engine, release(key, live)));
    for (&(key, _), live) in &state.copies {
        place(live.engine, release(key, live));
    }
    for (live, key, parts) in companion_parts() {
        let end = end_from(state, state.job(key.job), live.dispatched_ms);
        for part in parts {
            place(part.engine, (end, part.slots));
        }
    }
    for n in 0..n_engines {
        all[starts[n] as usize..starts[n + 1] as usize].sort_unstable();
    }
    Releases { starts, all }
}

/// The engines a category's bitset marks eligible, in index order.
pub(crate) fn eligible_engines(bits: &[u64]) -> impl Iterator<Item = EngineIdx> + '_ {
    bits.iter().enumerate().flat_map(|(w, &word)| {
        let mut word = word;
        std::iter::from_fn(move || {
            if word == 0 {
                return None;
            }
            let bit = word.trailing_zeros();
            word &= word - 1;
            Some(EngineIdx(w as u32 * 64 + bit))
        })
    })
}
