//! Index structures of the state, shaped for the fold's hot path.
//!
//! Each replaces a `BTreeSet`/`BTreeMap` that the fold updated on nearly every
//! entry, and keeps its meaning exactly: the same members, iterated in the same
//! order, serialised to the same bytes (so snapshots and the state digest do not
//! change). Only the cost of an update differs.
//!
//! - [`SilenceOrder`]: engines ordered by (log time last heard, index), as a
//!   doubly linked list: log time never goes back, so hearing from an engine
//!   moves it to (or near) the tail in O(1).

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::EngineIdx;

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
/// An engine is inserted at the current log time, which is at or after every
/// time already held, so insertion walks back from the tail only over the engines
/// heard from in the same millisecond with a larger index (usually none). Removal
/// is O(1). Iteration is in (time, index) order.
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
    fn key(&self, e: u32) -> (u64, u32) {
        (self.links[e as usize].time_ms, e)
    }

    /// Adds an engine heard from at `time_ms`. The engine must not be present.
    pub fn insert(&mut self, time_ms: u64, e: EngineIdx) {
        let at = e.0 as usize;
        if self.links.len() <= at {
            self.links.resize(at + 1, UNLINKED);
        }
        assert!(!self.links[at].linked, "engine {} is already in the silence order", e.0);
        // The engine goes after `before`: the last member whose key is smaller.
        let mut before = self.tail;
        while before != NONE && self.key(before) > (time_ms, e.0) {
            before = self.links[before as usize].prev;
        }
        let after = if before == NONE { self.head } else { self.links[before as usize].next };
        self.links[at] = Link { prev: before, next: after, time_ms, linked: true };
        match before {
            NONE => self.head = e.0,
            b => self.links[b as usize].next = e.0,
        }
        match after {
            NONE => self.tail = e.0,
            a => self.links[a as usize].prev = e.0,
        }
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

    /// (time, engine) in ascending order: the longest silent first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, EngineIdx)> + '_ {
        let mut at = self.head;
        std::iter::from_fn(move || {
            if at == NONE {
                return None;
            }
            let link = self.links[at as usize];
            let item = (link.time_ms, EngineIdx(at));
            at = link.next;
            Some(item)
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
        let mut order = SilenceOrder::default();
        let mut order_model = BTreeSet::new();
        let mut last_seen = vec![None; 300];
        let mut now = 0u64;
        for _ in 0..20_000 {
            let e = EngineIdx(rng.below(300) as u32);
            now += rng.below(3); // many ties
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
                    // Also at times before now, so that insertion walks back.
                    let t = now.saturating_sub(rng.below(2));
                    order.insert(t, e);
                    order_model.insert((t, e));
                    last_seen[e.0 as usize] = Some(t);
                }
            }
            assert_eq!(order.len(), order_model.len());
        }
        assert!(order.iter().eq(order_model.iter().copied()));
        assert_eq!(postcard::to_stdvec(&order).unwrap(), postcard::to_stdvec(&order_model).unwrap());
        let order_back: SilenceOrder = postcard::from_bytes(&postcard::to_stdvec(&order).unwrap()).unwrap();
        assert_eq!(order_back, order);
    }
}
