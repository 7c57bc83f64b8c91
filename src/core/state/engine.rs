//! An engine as the state knows it.



use crate::core::ids::EngineId;
use crate::core::event::{EngineLoad, EngineProps, LibraryRef};
use std::collections::BTreeSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum EngineStatus {
    LoggedIn,
    LoggedOut,
    /// Declared lost by the projector after `engine_timeout` of silence; it must log in again.
    Lost,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Engine {
    pub id: EngineId,
    pub slots: u32,
    pub used: u32,
    pub props: EngineProps,
    pub status: EngineStatus,
    pub load: EngineLoad,
    pub last_seen_ms: u64,
    /// Live attempts booked here.
    pub live: u32,
    /// The login epoch now open (the log sequence of its latest login).
    pub epoch: u64,
    /// Live attempts booked here in an earlier epoch: nothing runs them any more,
    /// and each awaits a Requeue (`EngineRestarted`). While there are any, the
    /// engine may hold more slots than its new login has.
    pub closed_epoch_live: u32,
    pub logins: u32,
    pub completed: u64,
    pub failed: u64,
    /// Position of the first engine tier it matches (0 = highest); the number of
    /// tiers when it matches none. Recomputed at login and on every policy.
    pub tier: u32,
    /// Grid libraries it holds: reported at login and at each finished sync.
    pub libraries: BTreeSet<LibraryRef>,
    /// The library it was ordered to sync and has not reported on yet.
    pub syncing: Option<LibraryRef>,
    /// Its last failed sync and the log time of the report: not asked again for a while.
    pub last_sync_failure: Option<(LibraryRef, u64)>,
    /// Drained by an operator (`gridfold engine drain`): no new work; its live
    /// attempts finish. Kept across its logins until resumed.
    pub drained: bool,
    /// Its queue sequence number (`seq_no` property), read once at login
    /// rather than parsed at every comparison of the queue sort; derived from
    /// `props`, so not stored ([`super::State::from_snapshot`] reads it again).
    #[serde(skip)]
    pub seq_no: u64,
}

impl Engine {
    /// Logged in, not drained, with a free slot: what `free_engines` holds, and
    /// so what dispatch (any family) and library syncs may offer work to.
    pub fn takes_work(&self) -> bool {
        self.status == EngineStatus::LoggedIn && self.used < self.slots && !self.drained
    }

    pub(super) fn new(id: EngineId, slots: u32, props: EngineProps) -> Self {
        Engine {
            tier: 0,
            seq_no: crate::core::load::seq_no(&props.custom),
            libraries: props.libraries.iter().cloned().collect(),
            syncing: None,
            last_sync_failure: None,
            drained: false,
            id,
            slots,
            used: 0,
            props,
            status: EngineStatus::LoggedOut,
            load: EngineLoad::default(),
            last_seen_ms: 0,
            live: 0,
            epoch: 0,
            closed_epoch_live: 0,
            logins: 0,
            completed: 0,
            failed: 0,
        }
    }

    /// Slots free for new attempts: none while attempts of a closed epoch hold
    /// more than a new login brought.
    pub fn free_slots(&self) -> u32 {
        self.slots.saturating_sub(self.used)
    }

    pub fn holds(&self, library: &LibraryRef) -> bool {
        self.libraries.contains(library)
    }
}
