//! One log message (first byte: subject and time) folded after a fixed history, then scheduled.
//! The body, and what it checks, is `fuzz/bodies.rs`, `envelope_then_fold`.
#![no_main]

#[path = "../bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::envelope_then_fold(data));
