//! A job file's text, read as `gridfold submit` reads it, and submitted when accepted.
//! The body, and what it checks, is `fuzz/bodies.rs`, `job_file`.
#![no_main]

#[path = "../bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::job_file(data));
