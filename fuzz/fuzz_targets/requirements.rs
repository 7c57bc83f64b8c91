//! A requirements expression: parsed, printed, parsed again.
//! The body, and what it checks, is `gridfold::fuzzing::requirements`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gridfold::fuzzing::requirements(data));
