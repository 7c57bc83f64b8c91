//! One log message (first byte: subject and time) folded after a fixed history, then scheduled.
//! The body, and what it checks, is `gridfold::fuzzing::envelope_then_fold`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gridfold::fuzzing::envelope_then_fold(data));
