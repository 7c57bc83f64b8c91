//! Operators' suspensions and preemptions (Grid Engine's `qmod -sj`, `-usj`,
//! `-rj`): the requests that await their orders, and the attempts suspended.
//!
//! A request (`SuspendRequested`, `ResumeRequested`, `RescheduleRequested`) is
//! recorded against each live attempt it applies to; `schedule` answers it with
//! a `Suspend`, `Resume` or `Preempt` order, and the order takes effect when the
//! fold reads it back. An order no request awaits is refused (`not-requested`).
//!
//! Invariants (checked by [`State::check_suspension_invariants`]):
//! - every attempt requested or suspended is live: an attempt that ends, by
//!   whatever entry, leaves both tables (`State::release` forgets it);
//! - a resume is requested only of a suspended attempt, a suspend only of one
//!   that is not.
//!
//! A suspended attempt is still live: its slots stay booked, and the dispatch
//! timeout passes it by. A preempted attempt ends; its task goes back to the
//! front of its job's retry queue with its attempt number given back (see
//! `Job::requeue_preempted`), not counted as a failure.
//!
//! The tables go into the snapshot after the rest of the state, and only when
//! not empty ([`State::to_snapshot`]): a state that never used them snapshots,
//! and digests, exactly as before they existed (so the recorded histories keep
//! their state digests), as `wire` writes a message added later absent when
//! every field is zero.



use crate::core::event::Control;
use crate::core::ids::{Attempt, JobIdx, TaskKey};
use super::controls::Suspensions;
use super::store::State;

impl State {
    /// The requests awaiting their orders, by task and attempt.
    pub fn control_requests(&self) -> impl Iterator<Item = (TaskKey, Attempt, Control)> + '_ {
        self.suspension.requested.iter().map(|(&(key, attempt), &control)| (key, attempt, control))
    }

    /// The request awaiting its order for this attempt, if any.
    pub fn control_requested(&self, key: TaskKey, attempt: Attempt) -> Option<Control> {
        if self.suspension.requested.is_empty() {
            return None;
        }
        self.suspension.requested.get(&(key, attempt)).copied()
    }

    /// The log time the attempt was suspended, if it is.
    pub fn suspended_since(&self, key: TaskKey, attempt: Attempt) -> Option<u64> {
        if self.suspension.suspended.is_empty() {
            return None;
        }
        self.suspension.suspended.get(&(key, attempt)).copied()
    }

    /// How many live attempts are suspended.
    pub fn n_suspended(&self) -> usize {
        self.suspension.suspended.len()
    }

    /// How many live attempts of one job are suspended.
    pub fn n_suspended_of_job(&self, j: JobIdx) -> u32 {
        if self.suspension.suspended.is_empty() {
            return 0;
        }
        let (first, last) = (TaskKey { job: j, index: 0 }, TaskKey { job: j, index: u32::MAX });
        self.suspension.suspended.range((first, 0)..=(last, Attempt::MAX)).count() as u32
    }

    /// How many attempts were preempted over the whole history.
    pub fn n_preempted(&self) -> u64 {
        self.suspension.preempted
    }

    /// Records an operator's request for a live attempt (the fold has checked it applies).
    pub(crate) fn request_control(&mut self, key: TaskKey, attempt: Attempt, control: Control) {
        assert!(self.live_attempt_numbered(key, attempt).is_some(), "controls are requested of live attempts");
        self.suspension.requested.insert((key, attempt), control);
    }

    /// A Suspend order took effect.
    pub(crate) fn suspend_attempt(&mut self, key: TaskKey, attempt: Attempt) {
        self.suspension.requested.remove(&(key, attempt));
        self.suspension.suspended.insert((key, attempt), self.now_ms);
    }

    /// A Resume order took effect.
    pub(crate) fn resume_attempt(&mut self, key: TaskKey, attempt: Attempt) {
        self.suspension.requested.remove(&(key, attempt));
        self.suspension.suspended.remove(&(key, attempt));
        self.suspension.by_threshold.remove(&(key, attempt));
    }

    /// A Preempt order took effect: the attempt ends, not as a failure, and when
    /// it was the task's last live attempt of an active job the task waits at
    /// the front of its job's retry queue with the attempt's number given back.
    /// Like [`State::requeue`] otherwise.
    pub(crate) fn preempt(&mut self, key: TaskKey, attempt: Attempt) {
        let was_runnable = self.jobs[key.job.0 as usize].is_runnable();
        let (_, others_live) = self.release(key, attempt);
        self.suspension.preempted += 1;
        let job = &mut self.jobs[key.job.0 as usize];
        if !job.tasks[key.index as usize].is_live() || others_live {
            self.refresh_live_status(key);
        } else if job.is_active() {
            job.drop_copy(key.index);
            job.requeue_preempted(key.index, attempt);
        } else {
            job.mark_cancelled(key.index);
        }
        self.refresh_runnable(key.job, was_runnable);
    }

    /// The attempt ended: it leaves the requests and the suspended.
    pub(super) fn forget_controls(&mut self, key: TaskKey, attempt: Attempt) {
        if !self.suspension.requested.is_empty() {
            self.suspension.requested.remove(&(key, attempt));
        }
        if !self.suspension.suspended.is_empty() {
            self.suspension.suspended.remove(&(key, attempt));
        }
        if !self.suspension.by_threshold.is_empty() {
            self.suspension.by_threshold.remove(&(key, attempt));
        }
    }

    /// The bytes [`State::to_snapshot`] appends after the rest of the state:
    /// none while nothing was ever suspended, requested or preempted.
    pub(super) fn suspension_trailer(&self) -> Vec<u8> {
        if self.suspension.is_empty() {
            return Vec::new();
        }
        postcard::to_stdvec(&self.suspension).expect("the suspensions always serialise")
    }

    /// Reads what [`State::suspension_trailer`] wrote (empty: nothing).
    pub(super) fn read_suspension_trailer(&mut self, trailer: &[u8]) -> Result<(), postcard::Error> {
        self.suspension = if trailer.is_empty() { Suspensions::default() } else { postcard::from_bytes(trailer)? };
        Ok(())
    }

    pub(super) fn check_suspension_invariants(&self) {
        for (&(key, attempt), control) in &self.suspension.requested {
            assert!(self.live_attempt_numbered(key, attempt).is_some(), "a {control:?} is requested of a live attempt");
            let suspended = self.suspension.suspended.contains_key(&(key, attempt));
            match control {
                Control::Suspend => assert!(!suspended, "a suspend is requested of an attempt not suspended"),
                Control::Resume => assert!(suspended, "a resume is requested of a suspended attempt"),
                Control::Preempt => {}
            }
        }
        for &(key, attempt) in self.suspension.suspended.keys() {
            assert!(self.live_attempt_numbered(key, attempt).is_some(), "a suspended attempt is live");
        }
        self.check_threshold_invariants();
    }
}
