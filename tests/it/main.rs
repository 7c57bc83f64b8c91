//! The integration tests, in one binary: each module is one area, and the
//! crate and [`support`] are compiled and linked once for all of them (thirty
//! binaries each linked the whole crate). Run one area with
//! `cargo test --release --test it <area>`, e.g. `--test it replay_histories`.
//!
//! Tests start their own services (nats-server on free loopback ports, Slurm,
//! headless Chromium) with temporary stores, and fail with a clear message when
//! they cannot; none is skipped.

mod support;
/// The fuzz targets' bodies, replayed over their corpora by [`fuzz_corpora`].
#[path = "../../fuzz/bodies.rs"]
mod fuzzing;

mod audit;
mod bench;
mod broker_security;
mod chaos;
mod cigri;
mod cluster;
mod delivery_bounds;
mod demo;
mod engine;
mod engine_epochs;
mod engine_processes;
mod fbsng;
mod fuzz_corpora;
mod grid;
mod gridserver;
mod lease;
mod log_conformance;
mod ops;
mod order_budget;
mod parallel_tasks;
mod projector;
mod replay_histories;
mod reservation;
mod resource_side;
mod results;
mod retirement;
mod sim;
mod slurm_gateway;
mod soft_requests;
mod suspend_thresholds;
mod techila;
mod web;
