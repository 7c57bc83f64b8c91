//! Suspensions by Grid Engine's suspend thresholds (queue_conf(5)
//! `suspend_thresholds`, `suspend_interval`, `nsuspend`): which live attempts
//! the threshold rule suspended (and why), and each engine's current interval.
//! The rule itself is `schedule::thresholds`; the fold re-checks it for every
//! `Suspend` or `Resume` no operator requested ([`State::threshold_justifies`]).
//!
//! Invariants (checked with the suspensions'): every attempt suspended by a
//! threshold is live and suspended; an operator's suspension is never recorded
//! here, so the rule never resumes it; an operator's resume of an attempt a
//! threshold suspended takes it out of here too (the rule may suspend it again
//! in a later interval).

use crate::core::event::Control;
use crate::core::ids::{Attempt, EngineIdx, TaskKey};
pub use super::controls::{milli_text, ThresholdCause, ThresholdWindow};
use super::engine::EngineStatus;
use super::store::State;

impl State {
    /// The first threshold of the policy (in its order) the engine's last
    /// heartbeat is above; `None` when none is, or it reported no such value.
    pub fn threshold_exceeded(&self, e: EngineIdx) -> Option<ThresholdCause> {
        let engine = self.engine(e);
        self.policy.suspend_thresholds.thresholds.iter().find_map(|(name, threshold)| {
            let value = crate::core::load::value(&engine.load, name)?;
            (value > *threshold).then(|| ThresholdCause { name: name.clone(), value_milli: value, threshold_milli: *threshold })
        })
    }

    /// How many more threshold orders may take effect on the engine now: a
    /// new interval allows `nsuspend`, the current one what it has left.
    pub fn threshold_allowance(&self, e: EngineIdx) -> u32 {
        let rule = &self.policy.suspend_thresholds;
        match self.suspension.threshold_windows.get(&e) {
            Some(window) if self.now_ms < window.start_ms.saturating_add(rule.interval_ms) => {
                rule.nsuspend.saturating_sub(window.n_actions)
            }
            _ => rule.nsuspend,
        }
    }

    /// The running attempts on the engine the rule may suspend, lowest
    /// priority first (the job examined last, then the highest task index):
    /// started, of an active job, not suspended, no operator's request pending.
    pub fn threshold_suspend_candidates(&self, e: EngineIdx) -> Vec<(TaskKey, Attempt)> {
        let mut candidates: Vec<(TaskKey, Attempt)> = self
            .attempts_on_engine(e)
            .into_iter()
            .filter(|&(key, attempt)| {
                self.job(key.job).is_active()
                    && self.live_attempt_numbered(key, attempt).is_some_and(|live| live.started_ms.is_some())
                    && self.suspended_since(key, attempt).is_none()
                    && self.control_requested(key, attempt).is_none()
            })
            .collect();
        candidates.sort_by_key(|&(key, attempt)| std::cmp::Reverse((self.job(key.job).rank(key.job), key.index, attempt)));
        candidates
    }

    /// The attempts on the engine a threshold suspended, highest priority first.
    pub fn threshold_resume_candidates(&self, e: EngineIdx) -> Vec<(TaskKey, Attempt)> {
        let mut candidates: Vec<(TaskKey, Attempt)> = self
            .suspension
            .by_threshold
            .keys()
            .copied()
            .filter(|&(key, attempt)| {
                self.live_attempt_numbered(key, attempt).is_some_and(|live| live.engine == e)
                    && self.control_requested(key, attempt).is_none()
            })
            .collect();
        candidates.sort_by_key(|&(key, attempt)| (self.job(key.job).rank(key.job), key.index, attempt));
        candidates
    }

    /// The attempts on engine `e` the threshold rule holds suspended, and why,
    /// in (job, task, attempt) order: for `gridfold stat`.
    pub fn threshold_suspended_on(&self, e: EngineIdx) -> Vec<(TaskKey, Attempt, &ThresholdCause)> {
        self.suspension
            .by_threshold
            .iter()
            .filter(|&(&(key, attempt), _)| self.live_attempt_numbered(key, attempt).is_some_and(|live| live.engine == e))
            .map(|(&(key, attempt), cause)| (key, attempt, cause))
            .collect()
    }

    /// Why the attempt is suspended by a threshold, if it is.
    pub fn suspended_by_threshold(&self, key: TaskKey, attempt: Attempt) -> Option<&ThresholdCause> {
        self.suspension.by_threshold.get(&(key, attempt))
    }

    /// Whether the threshold rule, re-checked on the folded state, justifies a
    /// `Suspend` (`Control::Suspend`) or `Resume` of this attempt on engine `e`
    /// now: the engine is logged in and its interval allows one more; a
    /// suspend needs a threshold exceeded and the attempt to be the lowest
    /// priority candidate, a resume none exceeded and the attempt to be the
    /// highest priority one the rule suspended. Returns the cause to record.
    pub(crate) fn threshold_justifies(&self, key: TaskKey, attempt: Attempt, e: EngineIdx, action: Control) -> Option<ThresholdCause> {
        if self.policy.suspend_thresholds.thresholds.is_empty()
            || self.engine(e).status != EngineStatus::LoggedIn
            || self.threshold_allowance(e) == 0
        {
            return None;
        }
        match action {
            Control::Suspend => {
                let cause = self.threshold_exceeded(e)?;
                (self.threshold_suspend_candidates(e).first() == Some(&(key, attempt))).then_some(cause)
            }
            Control::Resume => {
                if self.threshold_exceeded(e).is_some() {
                    return None;
                }
                let cause = self.suspended_by_threshold(key, attempt)?.clone();
                (self.threshold_resume_candidates(e).first() == Some(&(key, attempt))).then_some(cause)
            }
            Control::Preempt => None,
        }
    }

    /// A threshold's Suspend or Resume took effect: counted in the engine's interval.
    pub(crate) fn threshold_acted(&mut self, key: TaskKey, attempt: Attempt, e: EngineIdx, action: Control, cause: ThresholdCause) {
        let interval_ms = self.policy.suspend_thresholds.interval_ms;
        let now = self.now_ms;
        let window = self.suspension.threshold_windows.entry(e).or_insert(ThresholdWindow { start_ms: now, n_actions: 0 });
        if now >= window.start_ms.saturating_add(interval_ms) {
            *window = ThresholdWindow { start_ms: now, n_actions: 0 };
        }
        window.n_actions += 1;
        match action {
            Control::Suspend => {
                self.suspend_attempt(key, attempt);
                self.suspension.by_threshold.insert((key, attempt), cause);
            }
            _ => self.resume_attempt(key, attempt),
        }
    }

    pub(super) fn check_threshold_invariants(&self) {
        for &(key, attempt) in self.suspension.by_threshold.keys() {
            assert!(self.suspended_since(key, attempt).is_some(), "an attempt suspended by a threshold is suspended");
        }
    }
}
