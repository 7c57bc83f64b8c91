//! Engines' verbs: logging in and out, liveness, free slots, eligibility per
//! category, libraries, and the policy's engine tiers.

use crate::core::event::{EngineProps, LibraryInfo, LibraryRef, Policy};
use crate::core::expr::Expr;
use crate::core::ids::{CategoryIdx, EngineId, EngineIdx};
use super::category::Admission;
use super::engine::{Engine, EngineStatus};
use super::store::State;

impl State {
    // ---- engines -------------------------------------------------------------

    /// Logs an engine in (or back in), computing its eligibility for every category.
    /// A login opens epoch `epoch` (its log sequence). The attempts an earlier
    /// epoch still holds stay booked, now of a closed epoch, until a Requeue
    /// (`EngineRestarted`) puts each back on the log: the fold does not requeue
    /// them silently.
    pub(crate) fn log_in_engine(&mut self, id: &EngineId, slots: u32, props: EngineProps, epoch: u64) -> EngineIdx {
        let idx = match self.engine_idx(id) {
            Some(idx) => {
                self.set_engine_logged_out(idx);
                let engine = &mut self.engines[idx.0 as usize];
                assert!(epoch > engine.epoch, "epochs rise: they are log sequences");
                engine.closed_epoch_live = engine.live;
                if engine.live > 0 {
                    self.restarted_engines.insert(idx);
                }
                engine.slots = slots;
                engine.libraries = props.libraries.iter().cloned().collect();
                engine.syncing = None;
                engine.seq_no = crate::core::load::seq_no(&props.custom);
                engine.props = props;
                idx
            }
            None => {
                let idx = EngineIdx(self.engines.len() as u32);
                self.engines.push(Engine::new(id.clone(), slots, props));
                self.engine_index.insert(id.clone(), idx);
                idx
            }
        };
        let now = self.now_ms;
        let engine = &mut self.engines[idx.0 as usize];
        engine.epoch = epoch;
        engine.status = EngineStatus::LoggedIn;
        engine.last_seen_ms = now;
        engine.logins += 1;
        engine.tier = tier_of(&self.tier_exprs, engine);
        self.engine_silence.insert(now, idx);
        for c in 0..self.categories.len() {
            if !self.categories[c].is_vacant() {
                self.refresh_eligibility(CategoryIdx(c as u32), idx);
            }
        }
        self.refresh_free(idx);
        idx
    }

    /// Marks an engine logged out (or lost): it leaves the free and silence indexes
    /// and the categories' logged-in counts. Its live attempts are handled by the caller.
    pub(crate) fn set_engine_logged_out(&mut self, idx: EngineIdx) {
        let engine = &self.engines[idx.0 as usize];
        if engine.status != EngineStatus::LoggedIn {
            return;
        }
        let removed = self.engine_silence.remove(engine.last_seen_ms, idx);
        assert!(removed, "a logged-in engine is in the silence order at its last-seen time");
        for category in self.categories.iter_mut().filter(|category| !category.is_vacant()) {
            if category.is_eligible(idx) {
                category.eligible_logged_in -= 1;
            }
            let admission = category.admits(engine);
            category.matching_logged_in -= u32::from(admission.matches);
            category.fitting_logged_in -= u32::from(admission.fits);
        }
        self.engines[idx.0 as usize].status = EngineStatus::LoggedOut;
        self.free_engines.remove(idx);
        self.break_companions_on(idx);
    }

    pub(crate) fn mark_engine_lost(&mut self, idx: EngineIdx) {
        self.set_engine_logged_out(idx);
        self.engines[idx.0 as usize].status = EngineStatus::Lost;
        self.totals.engines_lost += 1;
    }

    /// Records that an engine was heard from at the current log time.
    pub(crate) fn touch_engine(&mut self, idx: EngineIdx) {
        let now = self.now_ms;
        let engine = &mut self.engines[idx.0 as usize];
        if engine.status == EngineStatus::LoggedIn && engine.last_seen_ms != now {
            let removed = self.engine_silence.remove(engine.last_seen_ms, idx);
            assert!(removed, "a logged-in engine is in the silence order at its last-seen time");
            engine.last_seen_ms = now;
            self.engine_silence.insert(now, idx);
        }
    }

    pub(crate) fn engine_mut(&mut self, idx: EngineIdx) -> &mut Engine {
        &mut self.engines[idx.0 as usize]
    }

    pub(crate) fn refresh_free(&mut self, idx: EngineIdx) {
        let engine = &self.engines[idx.0 as usize];
        if engine.takes_work() {
            self.free_engines.insert(idx);
        } else {
            self.free_engines.remove(idx);
        }
    }

    /// Recomputes one (category, engine) cell and keeps the logged-in counts and
    /// the unschedulable flags of the category's jobs in step with it.
    /// Only for an engine not yet counted in the category (just logged in, or a new category).
    pub(super) fn refresh_eligibility(&mut self, c: CategoryIdx, e: EngineIdx) {
        let engine = &self.engines[e.0 as usize];
        let category = &mut self.categories[c.0 as usize];
        let Admission { matches, fits, eligible } = category.admits(engine);
        category.set_eligible(e, eligible);
        if engine.status == EngineStatus::LoggedIn {
            category.matching_logged_in += u32::from(matches);
            category.fitting_logged_in += u32::from(fits);
            category.eligible_logged_in += u32::from(eligible);
        }
        if fits && engine.status == EngineStatus::LoggedIn {
            // An engine that fits logged in: no job of the category is unschedulable.
            for &job in &category.jobs {
                self.jobs[job.0 as usize].unschedulable = None;
            }
        }
    }

    // ---- libraries and tiers -------------------------------------------------

    /// A library is published: jobs flagged unschedulable for the want of it can now sync it.
    pub(crate) fn publish_library(&mut self, info: LibraryInfo) {
        for category in &self.categories {
            if category.library.as_ref() == Some(&info.library) {
                for &j in &category.jobs {
                    self.jobs[j.0 as usize].unschedulable = None;
                }
            }
        }
        self.libraries.insert(info.library.clone(), info);
    }

    /// The engine now holds the library: categories rooted on it may use it.
    pub(crate) fn library_synced(&mut self, e: EngineIdx, library: &LibraryRef) {
        let engine = &mut self.engines[e.0 as usize];
        if engine.syncing.as_ref() == Some(library) {
            engine.syncing = None;
        }
        if !engine.libraries.insert(library.clone()) {
            return;
        }
        let logged_in = engine.status == EngineStatus::LoggedIn;
        for c in 0..self.categories.len() {
            let category = &self.categories[c];
            if category.is_vacant() || category.library.as_ref() != Some(library) || category.is_eligible(e) {
                continue;
            }
            if category.admits(&self.engines[e.0 as usize]).eligible {
                let category = &mut self.categories[c];
                category.set_eligible(e, true);
                if logged_in {
                    category.eligible_logged_in += 1;
                }
            }
        }
    }

    pub(crate) fn sync_ordered(&mut self, e: EngineIdx, library: &LibraryRef) {
        self.engines[e.0 as usize].syncing = Some(library.clone());
    }

    pub(crate) fn sync_failed(&mut self, e: EngineIdx, library: &LibraryRef) {
        let now = self.now_ms;
        let engine = &mut self.engines[e.0 as usize];
        if engine.syncing.as_ref() == Some(library) {
            engine.syncing = None;
        }
        engine.last_sync_failure = Some((library.clone(), now));
    }

    /// A new policy: its tiers are compiled and every engine's tier recomputed.
    pub(crate) fn set_policy(&mut self, policy: Policy, tier_exprs: Vec<Expr>) {
        self.policy = policy;
        self.tier_exprs = tier_exprs;
        for engine in &mut self.engines {
            engine.tier = tier_of(&self.tier_exprs, engine);
        }
    }
}

/// Compiles the policy's engine tiers, each `property=value`, into `property == value`.
pub fn compile_tiers(tiers: &[String]) -> Result<Vec<Expr>, crate::core::expr::ExprError> {
    tiers.iter().map(|tier| crate::core::expr::parse(&tier_expression(tier))).collect()
}

/// A tier as a requirements expression: a value that is a whole number compares
/// as a number (`cores=8`), any other as a string (`type=blade`).
pub fn tier_expression(tier: &str) -> String {
    let (property, value) = tier.split_once('=').unwrap_or((tier, ""));
    let (property, value) = (property.trim(), value.trim());
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        format!("{property} == {value}")
    } else {
        format!("{property} == \"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
    }
}

/// The first tier the engine matches (0 = highest), or the number of tiers.
pub(super) fn tier_of(tiers: &[Expr], engine: &Engine) -> u32 {
    tiers.iter().position(|tier| tier.eval(&engine.props, engine.slots)).unwrap_or(tiers.len()) as u32
}
