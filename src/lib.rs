//! gridfold: an event-sourced grid scheduler. See ARCHITECTURE.md for the map.

pub mod bench;
pub mod cli;
pub mod core;
pub mod engine;
pub mod files;
pub mod human;
pub mod log;
pub mod projector;
pub mod replace_file;
pub mod sim;
pub mod web;
pub mod wire;
