//! gridfold: an event-sourced grid scheduler. See ARCHITECTURE.md for the map.

pub mod broker_config;
pub mod cli;
pub mod core;
pub mod engine;
pub mod files;
pub mod fuzzing;
pub mod human;
pub mod library_store;
pub mod output_store;
pub mod log;
pub mod projector;
pub mod replace_file;
pub mod sim;
pub mod web;
pub mod wire;
