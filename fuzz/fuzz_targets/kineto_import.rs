//! Any bytes given to the Kineto JSON importer (plain or gzip): a trace or an error, never a panic.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    cuflight_fuzzing::kineto(data);
});
