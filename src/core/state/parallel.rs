//! Parallel tasks spread over several engines (`span = "site"`): the attempt and
//! its companion bookings.
//!
//! A parallel task's attempt is an ordinary live attempt on its *master* engine
//! (the first part: it runs the command, reports start and end, and is what
//! the [`super::attempts::AttemptLog`], dispatch timeout, suspension and every
//! other attempt rule see), holding the master part's slots there; the other
//! parts are *companion bookings*: slots held on other engines for as long as
//! the master attempt lives, recorded here and nowhere else. So the rest of the
//! state is undisturbed: an engine's `live` counts only master attempts, and
//! its `used` slots are its live attempts' slots plus its companions'.
//!
//! Lifecycle, all in the fold:
//! - the master's `DispatchParallel` books every part at once ([`State::dispatch_parallel`]);
//!   the companions' orders of the same batch only confirm their part;
//! - the master attempt's end, however it comes (completed, failed, requeued,
//!   cancelled, preempted, its engine lost), frees every part ([`State::release`]);
//! - a companion's engine lost, logged out or logged in again *breaks* the
//!   attempt: its slots stay held until `schedule` requeues the master attempt
//!   (`Requeue`, reason `part-lost`), which the master's engine hears as a stop.
//!
//! Invariants (checked with the state's): every booking belongs to a live
//! attempt of a job whose span is `site`; its parts name distinct engines and
//! their slots add up to the job's `slots_per_task`; a broken attempt has a
//! booking.


use crate::core::event::{ParallelPart, Span, PARALLEL_PARTS_MAX};
use crate::core::ids::{Attempt, EngineId, EngineIdx, TaskKey};
use crate::core::reject::{OrderProblem, PartsProblem};
use super::checks::{check_engine_state, check_engine_takes};
use super::job::TaskStatus;
use std::collections::{BTreeMap, BTreeSet};
use super::bookings::{BookedPart, CompanionEnd, ParallelBookings};
use super::store::State;

impl State {
    pub fn parallel(&self) -> &ParallelBookings {
        &self.parallel
    }

    /// The slots an attempt holds on its own (master) engine.
    pub(crate) fn attempt_slots(&self, key: TaskKey, attempt: Attempt) -> u32 {
        match self.parallel.parts.get(&(key, attempt)) {
            Some(parts) => parts[0].slots,
            None => self.jobs[key.job.0 as usize].slots_per_task,
        }
    }

    /// Books a parallel attempt: the master part as a live attempt on its
    /// engine, the others as companions. The fold has checked every part.
    pub(crate) fn dispatch_parallel(&mut self, key: TaskKey, attempt: Attempt, parts: Vec<BookedPart>) {
        assert!(!parts.is_empty(), "a parallel attempt has a master part");
        let total: u32 = parts.iter().map(|part| part.slots).sum();
        assert_eq!(total, self.jobs[key.job.0 as usize].slots_per_task, "parts add up to the task's slots");
        let master = parts[0].engine;
        for part in &parts[1..] {
            let engine = &mut self.engines[part.engine.0 as usize];
            engine.used += part.slots;
            assert!(engine.used <= engine.slots, "engine {} booked above its slots", engine.id);
            self.refresh_free(part.engine);
        }
        let previous = self.parallel.parts.insert((key, attempt), parts);
        assert!(previous.is_none(), "an attempt number is used once");
        self.dispatch(key, attempt, master);
    }

    /// Frees the companions of an attempt that ended (called by `release`);
    /// if its job names a companion command, notes the end for the fold to
    /// report ([`CompanionEnd`]).
    pub(super) fn release_companions(&mut self, key: TaskKey, attempt: Attempt) {
        if self.parallel.is_empty() {
            return;
        }
        let Some(parts) = self.parallel.parts.remove(&(key, attempt)) else { return };
        self.parallel.broken.remove(&(key, attempt));
        for part in &parts[1..] {
            self.engines[part.engine.0 as usize].used -= part.slots;
            self.refresh_free(part.engine);
        }
        if !self.job(key.job).options.companion_argv.is_empty() {
            let companions = parts[1..].iter().map(|part| part.engine).collect();
            self.companion_ends.push(CompanionEnd { key, attempt, companions });
        }
    }

    /// The companion ends noted while folding one entry, handed to the fold's
    /// caller ([`crate::core::fold::Folded::companion_ends`]).
    pub(crate) fn take_companion_ends(&mut self) -> Vec<CompanionEnd> {
        std::mem::take(&mut self.companion_ends)
    }

    /// A companion's engine is gone (lost, logged out, logged in again): the
    /// attempts it held a part of are broken, each awaiting its Requeue.
    pub(crate) fn break_companions_on(&mut self, e: EngineIdx) {
        if self.parallel.parts.is_empty() {
            return;
        }
        let epoch = self.engines[e.0 as usize].epoch;
        let broken: Vec<(TaskKey, Attempt)> = self
            .parallel
            .parts
            .iter()
            .filter(|(_, parts)| parts[1..].iter().any(|part| part.engine == e && part.epoch <= epoch))
            .map(|(&at, _)| at)
            .collect();
        self.parallel.broken.extend(broken);
    }

    /// Slots companions hold on each engine, and whether a broken attempt holds
    /// any there (an engine that logged in again with fewer slots may be above
    /// them until the Requeue).
    pub(super) fn companion_slots(&self) -> BTreeMap<EngineIdx, (u32, bool)> {
        let mut held: BTreeMap<EngineIdx, (u32, bool)> = BTreeMap::new();
        for (&at, parts) in &self.parallel.parts {
            let broken = self.parallel.broken.contains(&at);
            for part in &parts[1..] {
                let entry = held.entry(part.engine).or_default();
                entry.0 += part.slots;
                entry.1 |= broken;
            }
        }
        held
    }

    pub(super) fn check_parallel_invariants(&self) {
        for (&(key, attempt), parts) in &self.parallel.parts {
            assert!(self.live_attempt_numbered(key, attempt).is_some(), "a parallel booking belongs to a live attempt");
            let job = self.job(key.job);
            assert_eq!(job.options.span, crate::core::event::Span::Site, "only a site-spanning job books parts");
            assert_eq!(parts.iter().map(|part| part.slots).sum::<u32>(), job.slots_per_task, "parts add up");
            let engines: BTreeSet<EngineIdx> = parts.iter().map(|part| part.engine).collect();
            assert_eq!(engines.len(), parts.len(), "a parallel attempt's parts name distinct engines");
            let live = self.live_attempt_numbered(key, attempt).expect("checked");
            assert_eq!(live.engine, parts[0].engine, "the master part is the live attempt's engine");
        }
        for at in &self.parallel.broken {
            assert!(self.parallel.parts.contains_key(at), "a broken parallel attempt is booked");
        }
    }
}

/// Whether a `DispatchParallel` read back applies, and if it is the master's,
/// books every part. A companion's order applies when its attempt was booked
/// with exactly these parts and is not broken; it changes nothing.
pub(crate) fn fold_dispatch(
    state: &mut State,
    key: TaskKey,
    attempt: Attempt,
    engine: &EngineId,
    epoch: u64,
    parts: &[ParallelPart],
) -> Result<(), OrderProblem> {
    let bad = |problem| OrderProblem::BadParts { problem };
    let job = state.job(key.job);
    if job.options.span != Span::Site {
        return Err(bad(PartsProblem::SpanMismatch));
    }
    if parts.is_empty() || parts.len() > PARALLEL_PARTS_MAX {
        return Err(bad(PartsProblem::PartCount));
    }
    let mine = parts.iter().position(|part| part.engine == *engine && part.epoch == epoch);
    match mine {
        None => Err(bad(PartsProblem::NotAPart)),
        Some(0) => book_master(state, key, attempt, parts),
        Some(_) => {
            let booked = state.parallel().parts_of(key, attempt).ok_or(bad(PartsProblem::NotBooked))?;
            let same = booked.len() == parts.len()
                && booked.iter().zip(parts).all(|(b, p)| {
                    state.engine(b.engine).id == p.engine && b.epoch == p.epoch && b.slots == p.slots
                });
            if !same || state.parallel().broken().any(|at| at == (key, attempt)) {
                return Err(bad(PartsProblem::NotBooked));
            }
            Ok(())
        }
    }
}

fn book_master(state: &mut State, key: TaskKey, attempt: Attempt, parts: &[ParallelPart]) -> Result<(), OrderProblem> {
    let bad = |problem| OrderProblem::BadParts { problem };
    let current = state.task(key);
    let job = state.job(key.job);
    if current.status != TaskStatus::Waiting || !job.is_active() {
        return Err(OrderProblem::TaskNotWaiting);
    }
    if attempt != current.attempts + 1 {
        return Err(OrderProblem::WrongAttemptNumber { expected: current.attempts + 1 });
    }
    let total = parts.iter().try_fold(0u32, |sum, part| sum.checked_add(part.slots));
    if total != Some(job.slots_per_task) {
        return Err(bad(PartsProblem::SlotsDoNotAddUp));
    }
    let mut booked: Vec<BookedPart> = Vec::with_capacity(parts.len());
    for part in parts {
        if part.slots == 0 {
            return Err(bad(PartsProblem::ZeroSlots));
        }
        let e = state.engine_idx(&part.engine).ok_or(OrderProblem::UnknownEngine)?;
        if booked.iter().any(|b| b.engine == e) {
            return Err(bad(PartsProblem::DuplicateEngine));
        }
        check_engine_state(state, e, part.epoch)?;
        check_engine_takes(state, key, e, part.slots)?;
        let site = &state.engine(e).props.site;
        if site.is_empty() || booked.first().is_some_and(|master| state.engine(master.engine).props.site != *site) {
            return Err(bad(PartsProblem::DifferentSites));
        }
        booked.push(BookedPart { engine: e, epoch: part.epoch, slots: part.slots });
    }
    state.dispatch_parallel(key, attempt, booked);
    Ok(())
}
