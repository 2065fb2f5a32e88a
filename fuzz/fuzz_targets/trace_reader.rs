//! Any bytes given to the trace reader: blocks or an error, never a panic or an unbounded allocation.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cuflight_fuzzing::trace_reader(data);
});
