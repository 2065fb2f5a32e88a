//! Any bytes as a time-ordered event source, with stats and the Chrome export over it: an error, never a panic,
//! an unbounded allocation or events out of order.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cuflight_fuzzing::trace_source(data);
});
