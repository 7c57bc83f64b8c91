//! Helpers shared by the integration tests (`crate::support` in each area of `tests/it`).
#![allow(dead_code)]

pub mod cluster3;
pub mod folded_log;
pub mod nats;
pub mod procs;
pub mod sealing;
pub mod secure_nats;
pub mod slurm;
