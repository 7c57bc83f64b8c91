//! gridfold: an event-sourced grid scheduler. See `DESIGN` in the README for the map.

pub mod core;
pub mod projector;
pub mod sim;
