//! Tabulates the runtime API callback ids with their function names from the committed CUDA 13 bindings
//! (`src/cuda13.rs`, `CUPTI_RUNTIME_TRACE_CBID_<name>_v<version> = <id>`), so that the agent can choose callbacks
//! by what a call does (its name) without asking CUPTI for every id's name. Written to `$OUT_DIR/runtime_cbids.rs`.

use std::fmt::Write;

fn main() {
    println!("cargo:rerun-if-changed=src/cuda13.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let src = std::fs::read_to_string("src/cuda13.rs").expect("sys/src/cuda13.rs is committed");
    let mut table =
        String::from("/// (callback id, runtime function name) for every runtime API callback of CUDA 13.5.\n");
    table.push_str("pub const RUNTIME: &[(u32, &str)] = &[\n");
    for line in src.lines() {
        let Some(rest) = line.trim().strip_prefix("pub const CUPTI_RUNTIME_TRACE_CBID_") else { continue };
        let Some((name, value)) = rest.split_once(':') else { continue };
        let Some(id) = value.rsplit('=').next().and_then(|v| v.trim().trim_end_matches(';').parse::<u32>().ok()) else {
            continue;
        };
        // `cudaMemcpy_v3020` -> `cudaMemcpy`, `cudaMemcpy_ptds_v7000` -> `cudaMemcpy_ptds`; INVALID, SIZE and
        // FORCE_INT are not calls.
        let function = match name.rsplit_once("_v") {
            Some((f, v)) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => f,
            _ => continue,
        };
        let _ = writeln!(table, "    ({id}, {function:?}),");
    }
    table.push_str("];\n");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("runtime_cbids.rs"), table).expect("OUT_DIR is writable");
}
