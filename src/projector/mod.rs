//! The single writer. [`machine`] is its deterministic heart (no IO, no clock):
//! fold entries, decide when caught up, remember what it published until the log
//! gives it back. The service around it (consume, publish, deliver, snapshot) drives it.

pub mod delivery;
pub mod machine;
pub mod query;
pub mod record;

