//! Grid-library-aware scheduling, the lifecycle half: engines that could run a
//! waiting job but lack its root library are ordered to sync it. (The filter half
//! is in the categories: an engine is eligible for a category rooted on a library
//! only once it reports the library synced.)
//!
//! As in GridServer, an engine is not held back while it syncs: it keeps taking
//! tasks of any job whose library it has. An engine is asked only when it is
//! "idle enough" — it has a free slot now (so a busy engine is not distracted) —
//! and syncs one library at a time: a second order waits until it reports the
//! first synced or failed. A job can start as soon as one engine holds its library.
//! An engine whose sync failed is not asked for that library again until
//! [`SYNC_RETRY_AFTER_MS`] of log time have passed, so a broken library or store
//! does not turn into a loop of orders.

use std::collections::BTreeSet;

use super::budget::Orders;
use super::in_flight::InFlight;
use crate::core::event::{LibraryRef, Order};
use crate::core::state::{EngineIdx, State};

/// Most sync orders in one run.
pub const SYNCS_PER_RUN_MAX: usize = 1_024;
/// How long an engine whose sync of a library failed is left alone for that library.
pub const SYNC_RETRY_AFTER_MS: u64 = 60_000;

pub fn sync_missing_libraries(state: &State, in_flight: &InFlight, lost: &BTreeSet<EngineIdx>, orders: &mut Orders) {
    // The published libraries that some runnable job waits for, in category order.
    let mut wanted: Vec<(&LibraryRef, usize)> = Vec::new();
    for (c, category) in state.categories().iter().enumerate() {
        let Some(library) = &category.library else { continue };
        if state.library(library).is_none() {
            continue;
        }
        let waiting = category.jobs.iter().any(|&j| state.job(j).is_runnable());
        if waiting {
            wanted.push((library, c));
        }
    }
    if wanted.is_empty() {
        return;
    }
    let mut n_ordered = 0;
    for e in state.free_engines() {
        if n_ordered == SYNCS_PER_RUN_MAX {
            break;
        }
        let engine = state.engine(e);
        if engine.syncing.is_some() || in_flight.is_syncing(e) || lost.contains(&e) || in_flight.is_lost(e) {
            continue;
        }
        if engine.free_slots() <= in_flight.booked_slots(e) {
            continue;
        }
        let needed = wanted.iter().find(|&&(library, c)| {
            let category = &state.categories()[c];
            let failed_lately = engine.last_sync_failure.as_ref().is_some_and(|(failed, at_ms)| {
                failed == library && state.now_ms < at_ms.saturating_add(SYNC_RETRY_AFTER_MS)
            });
            !engine.holds(library)
                && !failed_lately
                && category.expr.as_ref().expect("built").eval(&engine.props, engine.slots)
                && engine.slots >= category.slots_per_task
        });
        if let Some(&(library, _)) = needed {
            if !orders.push(Order::SyncLibrary { engine: engine.id.clone(), library: library.clone() }) {
                return;
            }
            n_ordered += 1;
        }
    }
}
