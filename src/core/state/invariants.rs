//! [`State::check_invariants`]: every invariant of the module docs, asserted.

use crate::core::ids::EngineIdx;
use super::engine::EngineStatus;
use super::job::{JobStatus, TaskStatus};
use super::engines::tier_of;
use super::store::State;

impl State {
    /// Asserts every invariant in the module docs. Cheap enough for tests and the
    /// simulator to run after every entry; a failure is a bug in the core.
    pub fn check_invariants(&self) {
        let recounted = self.recount_holdings();
        assert_eq!(
            (self.holdings.grid, self.holdings.held_by_users()),
            (recounted.grid, recounted.held_by_users()),
            "the caps' counts are what the active jobs hold"
        );
        assert_eq!(self.site_jobs, self.recount_site_jobs(), "the site jobs' index holds the active jobs of span site");
        assert!(
            self.projector_keys.keys().eq(self.verifying_keys.keys()),
            "every registered projector key is held decompressed, and only those"
        );
        let mut used = vec![0u32; self.engines.len()];
        let mut live_per_engine = vec![0u32; self.engines.len()];
        let mut closed_per_engine = vec![0u32; self.engines.len()];
        let mut n_unstarted = 0;
        let mut user_live = vec![(0u32, 0u64, 0u128); self.users.len()];
        let mut project_live = vec![(0u32, 0u64, 0u128); self.projects.len()];
        for (key, live) in self.live_attempts() {
            let engine_epoch = self.engines[live.engine.0 as usize].epoch;
            assert!(live.epoch <= engine_epoch, "an attempt's epoch is its engine's, or an earlier one");
            closed_per_engine[live.engine.0 as usize] += u32::from(live.epoch < engine_epoch);
            if live.started_ms.is_none() {
                n_unstarted += 1;
                assert!(
                    self.dispatched_since.contains(&(live.dispatched_ms, key, live.attempt)),
                    "dispatch index of {key:?}"
                );
            }
            let job = self.job(key.job);
            used[live.engine.0 as usize] += self.attempt_slots(key, live.attempt);
            live_per_engine[live.engine.0 as usize] += 1;
            for (figures, account) in [(&mut user_live, job.user_account), (&mut project_live, job.project_account)] {
                let entry = &mut figures[account.0 as usize];
                entry.0 += 1;
                entry.1 += u64::from(job.slots_per_task);
                entry.2 += u128::from(job.slots_per_task) * u128::from(live.dispatched_ms);
            }
            let task = job.tasks[key.index as usize];
            let redundant_leftover = task.status == TaskStatus::Done || job.status != JobStatus::Active;
            assert!(
                task.is_live() || redundant_leftover,
                "live attempt of {key:?} has task status {:?}",
                task.status
            );
            assert!(live.attempt <= task.attempts, "live attempt number of {key:?}");
            assert!(self.live.contains_key(&key), "a task with copies has a first live attempt");
        }
        assert_eq!(self.users.live_figures(), user_live, "each user's live attempts are counted in its account");
        assert_eq!(self.projects.live_figures(), project_live, "each project's live attempts are counted in its account");
        for (key, live) in self.live.sorted() {
            let task = self.task(key);
            if task.is_live() {
                let all = self.live_attempts_of(key);
                let any_started = all.iter().any(|live| live.started_ms.is_some());
                let expected = if any_started { TaskStatus::Running } else { TaskStatus::Dispatched };
                assert_eq!(task.status, expected, "status of {key:?} follows its attempts");
                assert!(all.iter().all(|other| other.attempt >= live.attempt), "the first live attempt is the oldest");
            }
        }
        let companions = self.companion_slots();
        for (&e, &(slots, _)) in &companions {
            used[e.0 as usize] += slots;
        }
        for (e, engine) in self.engines.iter().enumerate() {
            let broken_part = companions.get(&EngineIdx(e as u32)).is_some_and(|&(_, broken)| broken);
            assert_eq!(engine.closed_epoch_live, closed_per_engine[e], "closed-epoch attempts of engine {}", engine.id);
            assert_eq!(
                engine.closed_epoch_live > 0,
                self.restarted_engines.contains(&EngineIdx(e as u32)),
                "restarted index of {}",
                engine.id
            );
            assert!(
                engine.used <= engine.slots || engine.closed_epoch_live > 0 || broken_part,
                "engine {} above its slots with no attempts of a closed epoch",
                engine.id
            );
            assert_eq!(engine.used, used[e], "used slots of engine {}", engine.id);
            assert_eq!(engine.live, live_per_engine[e], "live attempts of engine {}", engine.id);
            let logged_in = engine.status == EngineStatus::LoggedIn;
            assert_eq!(
                logged_in,
                self.engine_silence.contains(engine.last_seen_ms, EngineIdx(e as u32)),
                "silence order of {}",
                engine.id
            );
            assert_eq!(engine.takes_work(), self.free_engines.contains(EngineIdx(e as u32)), "free index of {}", engine.id);
        }
        for (j, job) in self.jobs.iter() {
            job.check_counts();
            let runnable = job.is_runnable();
            assert_eq!(runnable, self.runnable.contains(&job.rank(j)), "runnable index of {}", job.id);
        }
        assert_eq!(self.dispatched_since.len(), n_unstarted, "the dispatch index holds only unstarted attempts");
        assert_eq!(
            self.engine_silence.len(),
            self.engines.iter().filter(|engine| engine.status == EngineStatus::LoggedIn).count()
        );
        assert_eq!(self.runnable.len(), self.jobs().filter(|j| j.is_runnable()).count());
        assert_eq!(
            self.free_engines.len(),
            self.engines.iter().filter(|e| e.takes_work()).count()
        );
        for &(key, attempt) in &self.to_cancel {
            assert!(self.live_attempt_numbered(key, attempt).is_some(), "an attempt awaiting cancel is live");
            assert!(
                self.job(key.job).status != JobStatus::Active
                    || self.task(key).status == TaskStatus::Done
                    || self.task(key).is_cancel_requested(),
                "an attempt awaits a cancel only when its job ended, its task is done, or its task was cancelled"
            );
        }
        for (e, engine) in self.engines.iter().enumerate() {
            assert_eq!(engine.tier, tier_of(&self.tier_exprs, engine), "tier of {}", engine.id);
            for category in self.categories.iter().filter(|category| !category.is_vacant()) {
                let eligible = category.admits(engine).eligible;
                assert_eq!(category.is_eligible(EngineIdx(e as u32)), eligible, "eligibility of {}", engine.id);
            }
        }
        for &(j, e) in &self.pending_blacklists {
            let job = self.job(j);
            assert!(job.is_active() && job.options.engine_blacklisting && !job.blacklist.contains(&e));
        }
        self.check_retirement_invariants();
        self.check_suspension_invariants();
        self.check_parallel_invariants();
    }
}
