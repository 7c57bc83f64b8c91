//! The predictor's figures of a campaign, as the fold keeps them on its job:
//! histograms of durations and counts over a window (see `predictor.rs`).

use std::collections::BTreeMap;

use crate::core::window::WindowCounts;

/// Histogram buckets: 8 exact ones below 8 ms, then 4 per doubling up to `u64::MAX`.
pub const BUCKETS: usize = 252;
pub(super) const HOUR_MS: u128 = 3_600_000;

/// Durations counted in log-scale buckets: 0 to 7 ms exactly, then four
/// buckets per doubling (each at most 25 % wider than its lower edge). A
/// median read from it is the lower edge of the bucket holding the median
/// task: up to 20 % below the true median, never above it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DurationHistogram {
    /// Bucket number to tasks in it; at most [`BUCKETS`] entries.
    pub(super) buckets: BTreeMap<u8, u32>,
    /// Tasks counted.
    pub n: u64,
}

impl DurationHistogram {
    /// The bucket of a duration.
    pub fn bucket_of(ms: u64) -> u8 {
        if ms < 8 {
            return ms as u8;
        }
        let k = 63 - u64::from(ms.leading_zeros());
        let sub = (ms >> (k - 2)) & 3;
        (4 * (k - 1) + sub) as u8
    }

    /// The lower edge of bucket `bucket`.
    pub fn lower_edge_ms(bucket: u8) -> u64 {
        if bucket < 8 {
            return u64::from(bucket);
        }
        let (k, sub) = (u64::from(bucket) / 4 + 1, u64::from(bucket) % 4);
        (4 + sub) << (k - 2)
    }

    pub fn add(&mut self, ms: u64) {
        self.add_to_bucket(Self::bucket_of(ms));
    }

    /// Counts one more in `bucket`. A full bucket (`u32::MAX`) counts no more,
    /// and neither does `n`: `n` stays the sum of the buckets, so a histogram
    /// with a count always has a median, however many durations a client's
    /// completions bring.
    pub fn add_to_bucket(&mut self, bucket: u8) {
        let count = self.buckets.entry(bucket).or_insert(0);
        if *count < u32::MAX {
            *count += 1;
            self.n += 1;
        }
    }

    /// Counts one less in `bucket`; nothing when it holds none.
    pub fn remove_from_bucket(&mut self, bucket: u8) {
        let Some(count) = self.buckets.get_mut(&bucket) else { return };
        *count -= 1;
        if *count == 0 {
            self.buckets.remove(&bucket);
        }
        self.n -= 1;
    }

    /// The bucket holding the median; `None` when empty. At most [`BUCKETS`] steps.
    pub fn median_bucket(&self) -> Option<u8> {
        let half = self.n.div_ceil(2);
        let mut seen = 0u64;
        for (&bucket, &count) in &self.buckets {
            seen += u64::from(count);
            if seen >= half && seen > 0 {
                return Some(bucket);
            }
        }
        None
    }

    /// The median's bucket's lower edge; `None` when empty.
    pub fn median_ms(&self) -> Option<u64> {
        self.median_bucket().map(Self::lower_edge_ms)
    }
}

/// What the predictor folds for a campaign, or for one cluster of it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Figures {
    /// Successful tasks.
    pub done: u64,
    /// Their durations' sum, ms of log time.
    pub duration_ms_sum: u64,
    /// Their durations, for the median.
    pub durations: DurationHistogram,
    /// Their results over the window.
    pub window: WindowCounts,
}

impl Figures {
    /// Counts one success of `duration_ms` at `now_ms`.
    pub fn add(&mut self, now_ms: u64, duration_ms: u64, window_ms: u64) {
        self.done += 1;
        self.duration_ms_sum = self.duration_ms_sum.saturating_add(duration_ms);
        self.durations.add(duration_ms);
        self.window.add(now_ms, window_ms);
    }

    /// Mean duration (rounded down); `None` before the first success.
    pub fn mean_ms(&self) -> Option<u64> {
        self.duration_ms_sum.checked_div(self.done)
    }

    /// Tasks in the window and the log time it covers, no longer than `lived_ms`.
    fn rate(&self, now_ms: u64, lived_ms: u64) -> (u64, u64) {
        (self.window.count(now_ms), self.window.covered_ms(now_ms).min(lived_ms).max(1))
    }

    /// Throughput in thousandths of a task per hour of log time.
    pub fn per_hour_milli(&self, now_ms: u64, lived_ms: u64) -> u64 {
        let (n, covered_ms) = self.rate(now_ms, lived_ms);
        (u128::from(n) * HOUR_MS * 1_000 / u128::from(covered_ms)).min(u128::from(u64::MAX)) as u64
    }

    /// Log time at which `remaining` more tasks will have ended at the window's rate.
    pub fn eta_ms(&self, now_ms: u64, lived_ms: u64, remaining: u64) -> Option<u64> {
        let (n, covered_ms) = self.rate(now_ms, lived_ms);
        if n == 0 {
            return None;
        }
        let to_go = u128::from(remaining) * u128::from(covered_ms) / u128::from(n);
        Some(now_ms.saturating_add(to_go.min(u128::from(u64::MAX)) as u64))
    }
}
