//! Index structures of the state, shaped for the fold's hot path.
//!
//! Each replaces a `BTreeSet`/`BTreeMap` that the fold updated on nearly every
//! entry, and keeps its meaning exactly: the same members, iterated in the same
//! order, serialised to the same bytes (so snapshots and the state digest do not
//! change). Only the cost of an update differs.
//!
//! - [`EngineSet`]: a set of engine indexes as a bitset; iterates in index order.
//! - [`SilenceOrder`]: engines ordered by (log time last heard, index), as a
//!   doubly linked list: log time never goes back, so hearing from an engine
//!   moves it to (or near) the tail in O(1).
//! - [`SortedDeque`]: an ordered set as a sorted ring buffer, for sets whose new
//!   members come at the end and leave from near the front (dispatches by age).
//! - [`LiveAttempts`]: live attempts by task, hash-indexed. Its own order is
//!   never used for a decision: whoever needs an order asks for one sorted by task.

use crate::core::ids::{EngineIdx, JobIdx, TaskKey};
use std::collections::BTreeMap;
use super::live::LiveAttempt;
use std::hash::{BuildHasherDefault, Hasher};

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};


// ---- EngineSet --------------------------------------------------------------------

/// A set of engines, one bit per engine index. Iterates in ascending index order,
/// as the `BTreeSet<EngineIdx>` it replaces did.
#[derive(Debug, Clone, Default)]
pub struct EngineSet {
    words: Vec<u64>,
    len: u32,
}

impl EngineSet {
    pub fn insert(&mut self, e: EngineIdx) -> bool {
        let (word, bit) = (e.0 as usize / 64, e.0 % 64);
        if self.words.len() <= word {
            self.words.resize(word + 1, 0);
        }
        let was = self.words[word] & (1 << bit) != 0;
        self.words[word] |= 1 << bit;
        self.len += u32::from(!was);
        !was
    }

    pub fn remove(&mut self, e: EngineIdx) -> bool {
        let (word, bit) = (e.0 as usize / 64, e.0 % 64);
        let Some(w) = self.words.get_mut(word) else { return false };
        let was = *w & (1 << bit) != 0;
        *w &= !(1 << bit);
        self.len -= u32::from(was);
        was
    }

    pub fn contains(&self, e: EngineIdx) -> bool {
        self.words.get(e.0 as usize / 64).is_some_and(|w| w & (1 << (e.0 % 64)) != 0)
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Members in ascending index order.
    pub fn iter(&self) -> impl Iterator<Item = EngineIdx> + '_ {
        self.words.iter().enumerate().flat_map(|(at, &word)| {
            let mut rest = word;
            std::iter::from_fn(move || {
                if rest == 0 {
                    return None;
                }
                let bit = rest.trailing_zeros();
                rest &= rest - 1;
                Some(EngineIdx(at as u32 * 64 + bit))
            })
        })
    }
}

/// Serialised as the ordered sequence of members, as a `BTreeSet<EngineIdx>` is.
impl Serialize for EngineSet {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let members: Vec<EngineIdx> = self.iter().collect();
        members.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for EngineSet {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let members = Vec::<EngineIdx>::deserialize(deserializer)?;
        let mut set = EngineSet::default();
        for e in members {
            if !set.insert(e) {
                return Err(serde::de::Error::custom("an engine set lists an engine twice"));
            }
        }
        Ok(set)
    }
}

// ---- SilenceOrder -----------------------------------------------------------------

const NONE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Link {
    prev: u32,
    next: u32,
    time_ms: u64,
    linked: bool,
}

const UNLINKED: Link = Link { prev: NONE, next: NONE, time_ms: 0, linked: false };

/// Engines ordered by (time, engine index): the `BTreeSet<(u64, EngineIdx)>` of
/// engines by the log time they were last heard from, as a doubly linked list
/// over engine indexes.
///
/// Log time never goes back, so an engine is always inserted at or after every
/// time already held: it is appended at the tail in O(1) (asserted), and removed
/// in O(1). Within one millisecond the list keeps engines in the order they were
/// heard from; readers get (time, index) order, each millisecond's group sorted
/// when the reader reaches it, so a reader that stops at the first engine not yet
/// timed out sorts nothing.
#[derive(Debug, Clone)]
pub struct SilenceOrder {
    links: Vec<Link>,
    head: u32,
    tail: u32,
    len: u32,
}

impl Default for SilenceOrder {
    fn default() -> Self {
        SilenceOrder { links: Vec::new(), head: NONE, tail: NONE, len: 0 }
    }
}

impl SilenceOrder {
    /// Adds an engine heard from at `time_ms`, which must be at or after every time
    /// held (log time never goes back). The engine must not be present.
    pub fn insert(&mut self, time_ms: u64, e: EngineIdx) {
        let at = e.0 as usize;
        if self.links.len() <= at {
            self.links.resize(at + 1, UNLINKED);
        }
        assert!(!self.links[at].linked, "engine {} is already in the silence order", e.0);
        let before = self.tail;
        if before != NONE {
            assert!(self.links[before as usize].time_ms <= time_ms, "log time went back in the silence order");
            self.links[before as usize].next = e.0;
        } else {
            self.head = e.0;
        }
        self.links[at] = Link { prev: before, next: NONE, time_ms, linked: true };
        self.tail = e.0;
        self.len += 1;
    }

    /// Removes an engine held at `time_ms`; returns whether it was there (at that time).
    pub fn remove(&mut self, time_ms: u64, e: EngineIdx) -> bool {
        let at = e.0 as usize;
        let Some(&link) = self.links.get(at) else { return false };
        if !link.linked || link.time_ms != time_ms {
            return false;
        }
        match link.prev {
            NONE => self.head = link.next,
            p => self.links[p as usize].next = link.next,
        }
        match link.next {
            NONE => self.tail = link.prev,
            n => self.links[n as usize].prev = link.prev,
        }
        self.links[at] = UNLINKED;
        self.len -= 1;
        true
    }

    pub fn contains(&self, time_ms: u64, e: EngineIdx) -> bool {
        self.links.get(e.0 as usize).is_some_and(|link| link.linked && link.time_ms == time_ms)
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// (time, engine) in ascending order: the longest silent first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, EngineIdx)> + '_ {
        self.iter_while(|_| true)
    }

    /// (time, engine) in ascending order, for as long as `time_holds(time)`;
    /// `time_holds` must be true up to some time and false after it.
    pub fn iter_while<'a>(&'a self, time_holds: impl Fn(u64) -> bool + 'a) -> impl Iterator<Item = (u64, EngineIdx)> + 'a {
        let mut at = self.head;
        let mut group: Vec<EngineIdx> = Vec::new();
        let mut group_time = 0;
        let mut next_in_group = 0;
        std::iter::from_fn(move || {
            if next_in_group == group.len() {
                if at == NONE || !time_holds(self.links[at as usize].time_ms) {
                    return None;
                }
                group.clear();
                next_in_group = 0;
                group_time = self.links[at as usize].time_ms;
                while at != NONE && self.links[at as usize].time_ms == group_time {
                    group.push(EngineIdx(at));
                    at = self.links[at as usize].next;
                }
                group.sort_unstable();
            }
            next_in_group += 1;
            Some((group_time, group[next_in_group - 1]))
        })
    }
}

impl PartialEq for SilenceOrder {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

/// Serialised as the ordered sequence of (time, engine), as a `BTreeSet<(u64, EngineIdx)>` is.
impl Serialize for SilenceOrder {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let members: Vec<(u64, EngineIdx)> = self.iter().collect();
        members.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SilenceOrder {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let members = Vec::<(u64, EngineIdx)>::deserialize(deserializer)?;
        if members.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(serde::de::Error::custom("a silence order is not strictly ascending"));
        }
        let mut order = SilenceOrder::default();
        for (time_ms, e) in members {
            if order.links.get(e.0 as usize).is_some_and(|link| link.linked) {
                return Err(serde::de::Error::custom("a silence order lists an engine twice"));
            }
            order.insert(time_ms, e);
        }
        Ok(order)
    }
}

// ---- SortedDeque -----------------------------------------------------------------

/// An ordered set kept as a sorted `VecDeque`: the `BTreeSet` it replaces, for
/// members that arrive in (nearly) ascending order and leave (nearly) oldest
/// first, like attempts by dispatch time. Inserting at the end and removing near
/// the front move nothing; a member out of place costs a shift of the shorter
/// side, bounded by the set's size.
#[derive(Debug, Clone)]
pub struct SortedDeque<T> {
    items: std::collections::VecDeque<T>,
}

impl<T> Default for SortedDeque<T> {
    fn default() -> Self {
        SortedDeque { items: std::collections::VecDeque::new() }
    }
}

impl<T: Ord + Copy> SortedDeque<T> {
    /// Adds `item`; false if it was already there.
    pub fn insert(&mut self, item: T) -> bool {
        if self.items.back().is_none_or(|last| *last < item) {
            self.items.push_back(item);
            return true;
        }
        match self.items.binary_search(&item) {
            Ok(_) => false,
            Err(at) => {
                self.items.insert(at, item);
                true
            }
        }
    }

    /// Removes `item`; false if it was not there.
    pub fn remove(&mut self, item: &T) -> bool {
        if self.items.front() == Some(item) {
            self.items.pop_front();
            return true;
        }
        match self.items.binary_search(item) {
            Ok(at) => {
                self.items.remove(at);
                true
            }
            Err(_) => false,
        }
    }

    pub fn contains(&self, item: &T) -> bool {
        self.items.binary_search(item).is_ok()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Members in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = &T> + '_ {
        self.items.iter()
    }
}

/// Serialised as the ordered sequence of members, as a `BTreeSet` is.
impl<T: Serialize> Serialize for SortedDeque<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.items.iter())
    }
}

impl<'de, T: Deserialize<'de> + Ord> Deserialize<'de> for SortedDeque<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let items = Vec::<T>::deserialize(deserializer)?;
        if items.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(serde::de::Error::custom("an ordered set is not strictly ascending"));
        }
        Ok(SortedDeque { items: items.into() })
    }
}

// ---- LiveAttempts ----------------------------------------------------------------

/// A hasher for the small integer keys of the state's lookup tables (task keys).
/// Fixed (no random seed) and owned here, like the PRNG, so that nothing about it
/// changes with a dependency; hash order is never iterated, only looked up.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyHasher(u64);

impl KeyHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(32) ^ word).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.mix(u64::from(byte));
        }
    }
    fn write_u32(&mut self, word: u32) {
        self.mix(u64::from(word));
    }
    fn write_u64(&mut self, word: u64) {
        self.mix(word);
    }
    /// SplitMix64's finaliser, so both the low bits (bucket) and the high bits
    /// (the table's tag) depend on every input bit.
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A hasher for the state's tables keyed by names (jobs, engines, categories):
/// the FxHash multiply-rotate over eight bytes at a time. Fixed and unseeded —
/// the tables are only looked up, never iterated in hash order (an `IndexMap`
/// iterates in insertion order whatever its hasher), and their keys come from
/// the log — so it need not resist flooding the way SipHash, the std default
/// and several times slower on short ids, does. The fold looks a name up on
/// nearly every entry.
#[derive(Debug, Clone, Copy, Default)]
pub struct NameHasher(u64);

impl NameHasher {
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(Self::SEED);
    }
}

impl Hasher for NameHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("eight bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // Byte by byte: a copy of under eight bytes would be a call to memcpy.
            let last = rest.iter().rev().fold(0u64, |word, &byte| (word << 8) | u64::from(byte));
            self.add(last);
        }
    }
    #[inline]
    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }
    #[inline]
    fn write_u32(&mut self, word: u32) {
        self.add(u64::from(word));
    }
    #[inline]
    fn write_u64(&mut self, word: u64) {
        self.add(word);
    }
    #[inline]
    fn write_usize(&mut self, word: usize) {
        self.add(word as u64);
    }
    /// Murmur3's finaliser: a multiply only carries low bits upwards, so ids that
    /// differ in their last bytes (`job-0001`, `job-0002`) differ only in the high
    /// bits of the running value; this spreads them over the low bits hashbrown
    /// takes its bucket from.
    #[inline]
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z ^= z >> 33;
        z = z.wrapping_mul(0xFF51_AFD7_ED55_8CCD);
        z ^= z >> 33;
        z
    }
}

/// An `IndexMap` looked up by name with [`NameHasher`].
pub type NameMap<K, V> = IndexMap<K, V, BuildHasherDefault<NameHasher>>;

/// The dispatched or running attempt of each task that has one: what was a
/// `BTreeMap<TaskKey, LiveAttempt>`, now a hash-indexed table, since the fold
/// looks an attempt up on every start, completion and failure and inserts one
/// on every dispatch. The table's own order depends on the history of removals:
/// it is not exposed. [`LiveAttempts::sorted`] and the `*_of_*` queries return
/// task order, and the table serialises as the ordered map it replaces.
#[derive(Debug, Clone, Default)]
pub struct LiveAttempts {
    map: IndexMap<TaskKey, LiveAttempt, BuildHasherDefault<KeyHasher>>,
}

impl LiveAttempts {
    pub fn get(&self, key: &TaskKey) -> Option<&LiveAttempt> {
        self.map.get(key)
    }
    pub fn get_mut(&mut self, key: &TaskKey) -> Option<&mut LiveAttempt> {
        self.map.get_mut(key)
    }
    pub fn contains_key(&self, key: &TaskKey) -> bool {
        self.map.contains_key(key)
    }
    pub fn insert(&mut self, key: TaskKey, live: LiveAttempt) -> Option<LiveAttempt> {
        self.map.insert(key, live)
    }
    pub fn remove(&mut self, key: &TaskKey) -> Option<LiveAttempt> {
        self.map.swap_remove(key)
    }

    /// Every live attempt, in task order.
    pub fn sorted(&self) -> Vec<(TaskKey, &LiveAttempt)> {
        let mut all: Vec<(TaskKey, &LiveAttempt)> = self.map.iter().map(|(key, live)| (*key, live)).collect();
        all.sort_unstable_by_key(|(key, _)| *key);
        all
    }

    /// Adds `figure` of every live attempt to its job's entry of `per_job`
    /// (dense by job index, grown as needed). A sum does not depend on the
    /// table's order, so that order stays unexposed.
    pub fn add_per_job(&self, per_job: &mut Vec<u64>, figure: impl Fn(&LiveAttempt) -> u64) {
        for (key, live) in &self.map {
            let j = key.job.0 as usize;
            if per_job.len() <= j {
                per_job.resize(j + 1, 0);
            }
            per_job[j] = per_job[j].saturating_add(figure(live));
        }
    }

    /// Calls `visit` with every live attempt, in the table's order, which is
    /// not exposed: only for what does not depend on it (sums, counts, lists
    /// the caller sorts).
    pub fn visit_unordered(&self, mut visit: impl FnMut(TaskKey, &LiveAttempt)) {
        for (key, live) in &self.map {
            visit(*key, live);
        }
    }

    /// The tasks of one job with a live attempt, in task order.
    pub fn tasks_of_job(&self, job: JobIdx) -> Vec<TaskKey> {
        let mut keys: Vec<TaskKey> = self.map.keys().filter(|key| key.job == job).copied().collect();
        keys.sort_unstable();
        keys
    }

    /// The tasks with a live attempt on one engine, in task order.
    pub fn tasks_on_engine(&self, engine: EngineIdx) -> Vec<TaskKey> {
        let mut keys: Vec<TaskKey> =
            self.map.iter().filter(|(_, live)| live.engine == engine).map(|(key, _)| *key).collect();
        keys.sort_unstable();
        keys
    }
}

/// Serialised as the ordered map it replaces (`BTreeMap<TaskKey, LiveAttempt>`).
impl Serialize for LiveAttempts {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.sorted())
    }
}

impl<'de> Deserialize<'de> for LiveAttempts {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let ordered = BTreeMap::<TaskKey, LiveAttempt>::deserialize(deserializer)?;
        let mut live = LiveAttempts::default();
        live.map.reserve(ordered.len());
        for (key, attempt) in ordered {
            live.map.insert(key, attempt);
        }
        Ok(live)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::core::rng::SplitMix64;

    /// Random operations on each structure and on the `BTreeSet` it replaces
    /// agree on members, order and serialised bytes.
    #[test]
    fn each_index_behaves_as_the_btree_it_replaces() {
        let mut rng = SplitMix64::new(9);
        let mut set = EngineSet::default();
        let mut set_model = BTreeSet::new();
        let mut order = SilenceOrder::default();
        let mut order_model = BTreeSet::new();
        let mut last_seen = vec![None; 300];
        let mut now = 0u64;
        for _ in 0..20_000 {
            let e = EngineIdx(rng.below(300) as u32);
            now += rng.below(3); // many ties
            if rng.below(2) == 0 {
                assert_eq!(set.insert(e), set_model.insert(e));
            } else {
                assert_eq!(set.remove(e), set_model.remove(&e));
            }
            assert_eq!(set.contains(e), set_model.contains(&e));
            match (last_seen[e.0 as usize], rng.below(4)) {
                (Some(t), 0) => {
                    assert!(order.remove(t, e) && order_model.remove(&(t, e)));
                    last_seen[e.0 as usize] = None;
                }
                (Some(t), _) => {
                    assert!(order.remove(t, e) && order_model.remove(&(t, e)));
                    order.insert(now, e);
                    order_model.insert((now, e));
                    last_seen[e.0 as usize] = Some(now);
                }
                (None, _) => {
                    order.insert(now, e);
                    order_model.insert((now, e));
                    last_seen[e.0 as usize] = Some(now);
                }
            }
            assert_eq!(order.len(), order_model.len());
            assert_eq!(set.len(), set_model.len());
        }
        assert!(set.iter().eq(set_model.iter().copied()));
        assert_eq!(postcard::to_stdvec(&set).unwrap(), postcard::to_stdvec(&set_model).unwrap());
        let set_back: EngineSet = postcard::from_bytes(&postcard::to_stdvec(&set).unwrap()).unwrap();
        assert!(set_back.iter().eq(set.iter()));
        assert!(order.iter().eq(order_model.iter().copied()));
        for cutoff in [0, now / 3, now / 2, now, now + 1] {
            assert!(order.iter_while(|t| t < cutoff).eq(order_model.iter().copied().take_while(|(t, _)| *t < cutoff)));
        }
        assert_eq!(postcard::to_stdvec(&order).unwrap(), postcard::to_stdvec(&order_model).unwrap());
        let order_back: SilenceOrder = postcard::from_bytes(&postcard::to_stdvec(&order).unwrap()).unwrap();
        assert_eq!(order_back, order);
    }

    #[test]
    fn a_sorted_deque_behaves_as_the_btree_set_it_replaces() {
        let mut rng = SplitMix64::new(13);
        let mut deque = SortedDeque::default();
        let mut model = BTreeSet::new();
        let mut now = 0u64;
        for _ in 0..20_000 {
            now += rng.below(3);
            let item = (now.saturating_sub(rng.below(4) * rng.below(2)), rng.below(50) as u32);
            if rng.below(2) == 0 {
                assert_eq!(deque.insert(item), model.insert(item));
            } else {
                // Mostly the oldest, sometimes any.
                let victim = if rng.below(3) == 0 { item } else { model.first().copied().unwrap_or(item) };
                assert_eq!(deque.remove(&victim), model.remove(&victim));
            }
            assert_eq!(deque.contains(&item), model.contains(&item));
            assert_eq!(deque.len(), model.len());
        }
        assert!(deque.iter().eq(model.iter()));
        let bytes = postcard::to_stdvec(&deque).unwrap();
        assert_eq!(bytes, postcard::to_stdvec(&model).unwrap());
        let back: SortedDeque<(u64, u32)> = postcard::from_bytes(&bytes).unwrap();
        assert!(back.iter().eq(deque.iter()));
    }

    /// Ids that differ only in their last characters land in different buckets
    /// (the low bits) and carry different tags (the top seven bits).
    #[test]
    fn similar_names_spread_over_buckets_and_tags() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<NameHasher>::default();
        let hashes: Vec<u64> = (0..4096).map(|n| build.hash_one(format!("job-{n:04}"))).collect();
        let buckets: BTreeSet<u64> = hashes.iter().map(|h| h & 4095).collect();
        let tags: BTreeSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(buckets.len() > 2_400, "{} of 4096 buckets used", buckets.len());
        assert_eq!(tags.len(), 128);
    }

    #[test]
    fn live_attempts_answer_in_task_order_and_serialise_as_a_btree_map() {
        let mut rng = SplitMix64::new(5);
        let mut live = LiveAttempts::default();
        let mut model = BTreeMap::new();
        for n in 0..20_000u64 {
            let key = TaskKey { job: JobIdx(rng.below(20) as u32), index: rng.below(300) as u32 };
            if rng.below(3) == 0 {
                assert_eq!(live.remove(&key), model.remove(&key));
            } else {
                let attempt = LiveAttempt {
                    attempt: n as u32,
                    engine: EngineIdx(rng.below(40) as u32),
                    epoch: 0,
                    dispatched_ms: n,
                    started_ms: rng.below(2).checked_sub(1).map(|_| n),
                };
                assert_eq!(live.insert(key, attempt), model.insert(key, attempt));
            }
            assert_eq!(live.get(&key), model.get(&key));
        }
        assert_eq!(live.sorted().len(), model.len());
        assert!(live.sorted().into_iter().eq(model.iter().map(|(key, live)| (*key, live))));
        let job = JobIdx(7);
        assert!(live.tasks_of_job(job).into_iter().eq(model.keys().filter(|key| key.job == job).copied()));
        let engine = EngineIdx(3);
        assert!(live
            .tasks_on_engine(engine)
            .into_iter()
            .eq(model.iter().filter(|(_, live)| live.engine == engine).map(|(key, _)| *key)));
        let bytes = postcard::to_stdvec(&live).unwrap();
        assert_eq!(bytes, postcard::to_stdvec(&model).unwrap());
        let back: LiveAttempts = postcard::from_bytes(&bytes).unwrap();
        assert!(back.sorted().into_iter().eq(live.sorted()));
    }
}
