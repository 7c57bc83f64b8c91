//! A job file's text, read as `gridfold submit` reads it, and submitted when accepted.
//! The body, and what it checks, is `gridfold::fuzzing::job_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gridfold::fuzzing::job_file(data));
