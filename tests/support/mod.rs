//! Helpers shared by integration tests: `mod support;` at the top of a test file.
#![allow(dead_code)]

pub mod nats;
pub mod process;
pub mod procs;
pub mod secure_nats;
