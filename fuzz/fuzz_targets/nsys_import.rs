//! Any bytes as an nsys SQLite export: a trace or an error, never a panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cuflight_fuzzing::nsys(data);
});
