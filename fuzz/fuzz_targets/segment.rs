//! Any bytes as an agent's shared-memory segment, read as `cuflight record` reads one: validated once, rings
//! drained, strings parsed, process facts built; never a panic, a fault or an unbounded allocation.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cuflight_fuzzing::segment(data);
});
