//! What each user and project holds and has used: the state the job-ordering
//! families read (Grid Engine's `user_sort` counts a user's running tasks; its
//! share tree weighs decayed usage).
//!
//! Kept by the fold at the two places a live attempt begins and ends
//! ([`State::dispatch`](super::State) and its release), whatever the algorithm,
//! so switching `algorithm` is only a policy event: the figures are already
//! there, and replay folds them the same way.
//!
//! Usage is slot-milliseconds of log time. An ended attempt's usage joins the
//! account's decayed total when it ends; a live attempt's is counted from the
//! slot-weighted sum of its start times, so the usage of everything running is
//! known at any instant in O(1) (`live_slots × now − live_since_sum`). Decay is
//! Grid Engine's: usage loses half its weight every `halftime`, applied lazily
//! (the total is stored with the log time it was last decayed to). Usage of a
//! live attempt is not decayed until it ends: an attempt that runs for days
//! counts fully until then, as in Grid Engine between usage reports.
//!
//! Not bounded by retirement: an account is kept per distinct owner and
//! project (the usage summary that outlives its jobs), small and
//! fixed in size.


use super::index::NameMap;

/// Dense index of an account (a user or a project) in its table.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct AccountIdx(pub u32);

#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Account {
    pub name: String,
    /// Live attempts (dispatched or running), redundant copies included.
    pub live_tasks: u32,
    /// Slots those attempts hold.
    pub live_slots: u64,
    /// Σ slots × dispatch time (ms) over the live attempts.
    pub live_since_sum: u128,
    /// Slot-ms of ended attempts, decayed to `decayed_at_ms`.
    pub decayed_usage: u128,
    pub decayed_at_ms: u64,
}

impl Account {
    /// Usage at `now_ms`: ended attempts decayed by `halftime_ms` (0: never
    /// decayed), plus what the live ones have used so far.
    pub fn usage_at(&self, now_ms: u64, halftime_ms: u64) -> u128 {
        let ended = decay(self.decayed_usage, now_ms.saturating_sub(self.decayed_at_ms), halftime_ms);
        let live = (u128::from(self.live_slots) * u128::from(now_ms)).saturating_sub(self.live_since_sum);
        ended + live
    }
}

/// One table of accounts (users, or projects), by name.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Accounts {
    accounts: Vec<Account>,
    #[serde(skip)]
    index: NameMap<String, AccountIdx>,
}

impl Accounts {
    /// The account of `name`, made on first sight.
    pub(crate) fn intern(&mut self, name: &str) -> AccountIdx {
        if let Some(&idx) = self.index.get(name) {
            return idx;
        }
        let idx = AccountIdx(self.accounts.len() as u32);
        self.accounts.push(Account { name: name.to_string(), ..Account::default() });
        self.index.insert(name.to_string(), idx);
        idx
    }

    pub fn get(&self, idx: AccountIdx) -> &Account {
        &self.accounts[idx.0 as usize]
    }

    pub fn find(&self, name: &str) -> Option<AccountIdx> {
        self.index.get(name).copied()
    }

    pub fn len(&self) -> usize {
        self.accounts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (AccountIdx, &Account)> {
        self.accounts.iter().enumerate().map(|(at, account)| (AccountIdx(at as u32), account))
    }

    pub(crate) fn attempt_began(&mut self, idx: AccountIdx, slots: u32, now_ms: u64) {
        let account = &mut self.accounts[idx.0 as usize];
        account.live_tasks += 1;
        account.live_slots += u64::from(slots);
        account.live_since_sum += u128::from(slots) * u128::from(now_ms);
    }

    pub(crate) fn attempt_ended(&mut self, idx: AccountIdx, slots: u32, dispatched_ms: u64, now_ms: u64, halftime_ms: u64) {
        let account = &mut self.accounts[idx.0 as usize];
        assert!(account.live_tasks > 0 && account.live_slots >= u64::from(slots), "an attempt ends once");
        account.live_tasks -= 1;
        account.live_slots -= u64::from(slots);
        account.live_since_sum -= u128::from(slots) * u128::from(dispatched_ms);
        let used = u128::from(slots) * u128::from(now_ms.saturating_sub(dispatched_ms));
        let elapsed = now_ms.saturating_sub(account.decayed_at_ms);
        account.decayed_usage = decay(account.decayed_usage, elapsed, halftime_ms) + used;
        account.decayed_at_ms = account.decayed_at_ms.max(now_ms);
    }

    /// Rebuilds the name index after a snapshot is loaded.
    pub(crate) fn rebuild_index(&mut self) {
        self.index = NameMap::default();
        for (at, account) in self.accounts.iter().enumerate() {
            self.index.insert(account.name.clone(), AccountIdx(at as u32));
        }
    }

    /// The live figures recounted from scratch must equal these (an invariant).
    pub(crate) fn live_figures(&self) -> Vec<(u32, u64, u128)> {
        self.accounts.iter().map(|a| (a.live_tasks, a.live_slots, a.live_since_sum)).collect()
    }
}

/// Fixed-point one, for [`decay_factor_q32`].
const Q32: u128 = 1 << 32;

/// `value × 2^(−elapsed / halftime)` in integer arithmetic, so every machine
/// decays alike. A halftime of 0 means no decay (Grid Engine's `halftime 0`).
pub fn decay(value: u128, elapsed_ms: u64, halftime_ms: u64) -> u128 {
    if halftime_ms == 0 || elapsed_ms == 0 || value == 0 {
        return value;
    }
    let halvings = elapsed_ms / halftime_ms;
    if halvings >= 128 {
        return 0;
    }
    let halved = value >> halvings;
    let fraction_q32 = (u128::from(elapsed_ms % halftime_ms) << 32) / u128::from(halftime_ms);
    let factor = decay_factor_q32(fraction_q32 as u64);
    // value < 2^128 >> halvings; split to keep the product in range.
    (halved >> 32) * factor + (((halved & (Q32 - 1)) * factor) >> 32)
}

/// `2^(−f)` for `f` in [0, 1) given in Q32, as Q32: a Taylor series of
/// `e^(−f·ln 2)` in integers (13 terms reach below one part in 2^32).
fn decay_factor_q32(fraction_q32: u64) -> u128 {
    /// ln 2 in Q32.
    const LN2_Q32: u128 = 2_977_044_472;
    let x = (u128::from(fraction_q32) * LN2_Q32) >> 32;
    let mut term: u128 = Q32;
    let mut sum: i128 = Q32 as i128;
    for k in 1..14u128 {
        term = term * x / Q32 / k;
        if k % 2 == 1 {
            sum -= term as i128;
        } else {
            sum += term as i128;
        }
    }
    sum.clamp(0, Q32 as i128) as u128
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_halves_every_halftime_and_is_kept_without_one() {
        assert_eq!(decay(1_000_000, 3_600_000, 3_600_000), 500_000);
        assert_eq!(decay(1_000_000, 7_200_000, 3_600_000), 250_000);
        assert_eq!(decay(1_000_000, 10, 0), 1_000_000);
        // Half a halftime: 1/sqrt(2) = 0.70710678...
        let half = decay(1_000_000_000, 1_800_000, 3_600_000);
        assert!((707_106_770..=707_106_790).contains(&half), "{half}");
        assert_eq!(decay(u128::MAX, 3_600_000 * 200, 3_600_000), 0);
    }

    #[test]
    fn usage_of_live_attempts_counts_from_their_dispatch() {
        let mut accounts = Accounts::default();
        let alice = accounts.intern("alice");
        accounts.attempt_began(alice, 2, 1_000);
        accounts.attempt_began(alice, 1, 3_000);
        // Two slots for 4 s, and one slot for 2 s.
        assert_eq!(accounts.get(alice).usage_at(5_000, 0), 10_000);
        accounts.attempt_ended(alice, 2, 1_000, 5_000, 0);
        assert_eq!(accounts.get(alice).usage_at(5_000, 0), 8_000 + 2_000);
        assert_eq!(accounts.get(alice).live_tasks, 1);
        assert_eq!(accounts.intern("alice"), alice);
    }
}
