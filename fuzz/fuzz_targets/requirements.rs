//! A requirements expression: parsed, printed, parsed again.
//! The body, and what it checks, is `fuzz/bodies.rs`, `requirements`.
#![no_main]

#[path = "../bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::requirements(data));
