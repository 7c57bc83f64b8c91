//! The coalescing window ([`super::ProjectorConfig::decide_window`]): when the
//! projector decides on what it folded.
//!
//! The window opens at the first entry folded since the last decision and ends
//! [`super::ProjectorConfig::decide_window`] later, or at once when
//! [`super::ProjectorConfig::decide_window_entries`] entries wait. Its end is
//! kept even once it has passed: the loop waits on [`DecideWindow::deadline`]
//! and a deadline in the past fires at once. (An end that stopped being
//! reported once passed was a stall: the loop could be busy folding across the
//! end, find no deadline on its next wait, and decide only at the next
//! housekeeping, up to a second later, with every freed slot idle meanwhile.)

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub(super) struct DecideWindow {
    window: Duration,
    entries_max: u64,
    /// When the first entry not yet decided on was folded.
    undecided_since: Option<Instant>,
    /// Entries folded since the last decision.
    entries: u64,
}

impl DecideWindow {
    pub(super) fn new(window: Duration, entries_max: u64) -> DecideWindow {
        DecideWindow { window, entries_max, undecided_since: None, entries: 0 }
    }

    /// `count` entries were folded at `now`.
    pub(super) fn folded(&mut self, count: u64, now: Instant) {
        if count > 0 {
            self.entries += count;
            self.undecided_since.get_or_insert(now);
        }
    }

    /// Entries folded since the last decision.
    pub(super) fn entries(&self) -> u64 {
        self.entries
    }

    /// When the window ends, passed or not; `None` when no entry waits.
    pub(super) fn deadline(&self) -> Option<Instant> {
        let since = self.undecided_since?;
        if self.entries >= self.entries_max {
            return Some(since);
        }
        Some(since + self.window)
    }

    /// No window is open, or it has ended by `now`.
    pub(super) fn is_due(&self, now: Instant) -> bool {
        self.deadline().is_none_or(|end| end <= now)
    }

    /// A decision was made on everything folded.
    pub(super) fn decided(&mut self) {
        self.undecided_since = None;
        self.entries = 0;
    }

    /// Nothing can be decided now (not the leader, on hold, the key not yet
    /// registered): the window closes without a decision, so its end does not
    /// fire again and again; the next entry folded opens a new one. The entries
    /// stay counted.
    pub(super) fn set_aside(&mut self) {
        self.undecided_since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(2);

    #[test]
    fn a_window_that_ended_while_the_loop_was_busy_still_has_its_end_to_fire_on() {
        let t0 = Instant::now();
        let mut window = DecideWindow::new(WINDOW, 64);
        assert_eq!(window.deadline(), None, "nothing waits: no deadline");
        assert!(window.is_due(t0), "nothing waits: a decision may run when asked");
        window.folded(1, t0);
        window.folded(1, t0 + Duration::from_micros(1_500));
        // Checked just before the end: not due yet.
        assert!(!window.is_due(t0 + Duration::from_micros(1_900)));
        // The loop comes back to wait after the end: the end is still there, in the past.
        let after = t0 + Duration::from_millis(3);
        assert_eq!(window.deadline(), Some(t0 + WINDOW));
        assert!(window.deadline().is_some_and(|end| end < after));
        assert!(window.is_due(after));
        window.decided();
        assert_eq!((window.deadline(), window.entries()), (None, 0));
    }

    #[test]
    fn enough_entries_end_the_window_at_once_and_a_window_set_aside_no_longer_fires() {
        let t0 = Instant::now();
        let mut window = DecideWindow::new(WINDOW, 3);
        window.folded(2, t0);
        assert!(!window.is_due(t0));
        window.folded(1, t0 + Duration::from_micros(10));
        assert_eq!(window.deadline(), Some(t0), "three entries: due since the first");
        assert!(window.is_due(t0 + Duration::from_micros(10)));
        window.set_aside();
        assert_eq!(window.deadline(), None, "set aside: nothing to fire on");
        assert_eq!(window.entries(), 3, "the entries stay counted");
        window.folded(0, t0 + WINDOW);
        assert_eq!(window.deadline(), None, "folding nothing opens no window");
        window.folded(1, t0 + WINDOW);
        assert_eq!(window.deadline(), Some(t0 + WINDOW), "four entries, past the three: due at once");
    }
}
