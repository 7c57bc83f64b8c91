//! A history file's text, parsed and folded entry by entry.
//! The body, and what it checks, is `gridfold::fuzzing::history_file`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gridfold::fuzzing::history_file(data));
