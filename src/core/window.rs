//! Log time: how long since a moment, and counts over a sliding window.
//!
//! Every timer and rate in the core measures **log time** (the time stored
//! with each entry, `State::now_ms`, which never goes back), never a wall
//! clock. Two helpers, so the families do not each write their own:
//! - [`elapsed_ms`]: log time since a moment (Techila's expiry, CiGri's
//!   finalize and predictor);
//! - [`WindowCounts`]: events counted over a sliding window of log time in a
//!   fixed ring of [`SLOTS`] slots (CiGri's predictor): bounded whatever the
//!   rate, O(1) to add, O(`SLOTS`) to read.
//!
//! The window is resolved to one slot: a count read at time `now` covers the
//! slots from `now`'s slot back `SLOTS - 1` whole slots, so between
//! `(SLOTS - 1) / SLOTS` of the window and the whole window.
//! [`WindowCounts::covered_ms`] says exactly how much, for rates.

/// Slots in a [`WindowCounts`] ring.
pub const SLOTS: usize = 60;

/// Log time from `since_ms` to `now_ms`; 0 when `since_ms` is later.
pub fn elapsed_ms(now_ms: u64, since_ms: u64) -> u64 {
    now_ms.saturating_sub(since_ms)
}

/// Events counted per slot of log time over the last [`SLOTS`] slots.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WindowCounts {
    /// One slot's width in ms (the window over [`SLOTS`], at least 1); 0 before the first event.
    slot_ms: u64,
    /// Number of the newest slot (log time over `slot_ms`).
    head: u64,
    /// The counts, slot `n` at `n % SLOTS`; empty before the first event.
    counts: Vec<u32>,
}

impl WindowCounts {
    /// One slot's width for a window.
    pub fn slot_ms_of(window_ms: u64) -> u64 {
        (window_ms / SLOTS as u64).max(1)
    }

    /// Counts one event at `now_ms` in a window of `window_ms`. A different
    /// window than the ring's (the policy changed) starts the ring afresh.
    pub fn add(&mut self, now_ms: u64, window_ms: u64) {
        let slot_ms = Self::slot_ms_of(window_ms);
        let slot = now_ms / slot_ms;
        if self.slot_ms != slot_ms || self.counts.len() != SLOTS {
            *self = WindowCounts { slot_ms, head: slot, counts: vec![0; SLOTS] };
        }
        if slot > self.head {
            let gap = (slot - self.head).min(SLOTS as u64);
            for step in 1..=gap {
                self.counts[((self.head + step) % SLOTS as u64) as usize] = 0;
            }
            self.head = slot;
        }
        // Log time never goes back, so `slot < head` cannot happen; were it
        // to, the event counts in the newest slot.
        let at = (self.head % SLOTS as u64) as usize;
        self.counts[at] = self.counts[at].saturating_add(1);
        assert!(self.counts.len() == SLOTS, "a window ring keeps its slots");
    }

    /// Events in the window ending at `now_ms` (the slots of the last window).
    pub fn count(&self, now_ms: u64) -> u64 {
        if self.slot_ms == 0 {
            return 0;
        }
        let now_slot = now_ms / self.slot_ms;
        let oldest = (now_slot + 1).saturating_sub(SLOTS as u64);
        (0..SLOTS as u64)
            .filter_map(|back| self.head.checked_sub(back))
            .filter(|&slot| slot >= oldest && slot <= now_slot)
            .map(|slot| u64::from(self.counts[(slot % SLOTS as u64) as usize]))
            .sum()
    }

    /// The log time [`count`](Self::count) covers at `now_ms`: from the start
    /// of its oldest slot to `now_ms`, at least 1 ms; 0 before the first event.
    pub fn covered_ms(&self, now_ms: u64) -> u64 {
        if self.slot_ms == 0 {
            return 0;
        }
        let oldest = (now_ms / self.slot_ms + 1).saturating_sub(SLOTS as u64);
        elapsed_ms(now_ms, oldest * self.slot_ms).max(1)
    }
}

/// Milliseconds as seconds a person reads: `12s`, `12.5s`, `0.25s`.
pub fn secs(ms: u64) -> String {
    let (whole, frac) = (ms / 1000, ms % 1000);
    if frac == 0 {
        return format!("{whole}s");
    }
    let digits = format!("{frac:03}");
    format!("{whole}.{}s", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_counts_forget_events_older_than_the_window() {
        let mut window = WindowCounts::default();
        assert_eq!(window.count(5_000), 0);
        // A 60 s window: one slot per second.
        for t in [0, 500, 1_000, 30_000] {
            window.add(t, 60_000);
        }
        assert_eq!(window.count(30_000), 4);
        assert_eq!(window.covered_ms(30_000), 30_000);
        // At 60.5 s the slot of 0 and 0.5 s has left the window.
        assert_eq!(window.count(60_500), 2);
        assert_eq!(window.covered_ms(60_500), 59_500);
        // A jump far past the window clears the whole ring.
        window.add(1_000_000, 60_000);
        assert_eq!(window.count(1_000_000), 1);
        assert_eq!(window.count(2_000_000), 0);
    }

    #[test]
    fn window_counts_restart_when_the_window_changes() {
        let mut window = WindowCounts::default();
        window.add(1_000, 60_000);
        window.add(2_000, 120_000);
        assert_eq!(window.count(2_000), 1);
        assert_eq!(elapsed_ms(5, 9), 0);
        assert_eq!(elapsed_ms(9, 5), 4);
    }
}
