//! A history file's text, parsed and folded entry by entry.
//! The body, and what it checks, is `fuzz/bodies.rs`, `history_file`.
#![no_main]

#[path = "../bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::history_file(data));
