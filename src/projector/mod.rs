//! The single writer. [`machine`] is its deterministic heart (no IO, no clock):
//! fold entries, decide when caught up, remember what it published until the log
//! gives it back. [`service`] is the async shell around it that `gridfold projector`
//! runs: consume the log, publish behind the fence, deliver, snapshot, tick, answer
//! queries, and stand by while another projector holds the lease.

pub mod delivery;
pub mod key;
pub mod machine;
pub mod query;
pub mod record;
pub mod results;
pub mod service;
