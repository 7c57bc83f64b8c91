//! Helpers shared by integration tests: `mod support;` at the top of a test file.
#![allow(dead_code)]

pub mod cluster3;
pub mod folded_log;
pub mod nats;
pub mod procs;
pub mod sealing;
pub mod secure_nats;
pub mod slurm;
