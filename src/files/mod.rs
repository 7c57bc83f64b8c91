//! The files people write for gridfold, read into core types: job files
//! (`gridfold submit`), policy files (`gridfold policy apply`) and scenario files
//! (`gridfold sim`, and the simulator's tests).
//!
//! Both the command line and the simulator read through here, and each format
//! is read once, so a key means the same thing wherever it is written: a
//! scenario's `[policy]` is read by the policy file's reader and each of its
//! `[[jobs]]` by the job file's (the same keys, units and checks), and only
//! the scenario's own keys (arrival times, run times, engines, faults) are its.
//!
//! # Invariants
//! - Every error names the file and the line, and says what is wrong; an error in
//!   a requirements expression points at the byte inside the string.
//! - What a reader returns holds together as the fold requires (ids well formed,
//!   dependencies on earlier tasks only, lists bounded), so a file never submits
//!   something that waits forever or is rejected whole.
//! - The arrows point down: `cli` and `sim` use this module; it uses `core` and
//!   `wire` (engine-tier syntax) and nothing else of the crate.
//!
//! # What it deliberately does not do
//! - Publish, connect or run anything: a reader turns text into a value, and
//!   the caller decides what to do with it.
//! - Read history files: those are written by gridfold, in the wire's format
//!   (`wire::history`).
//! - Use `anyhow` or exit codes: errors are typed (`JobFileError`,
//!   `ScenarioError`), and the command line maps them to exit code 2.

pub mod jobfile;
pub mod policyfile;
pub mod scenario;
