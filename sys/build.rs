//! Tabulates the runtime and driver API callback ids with their binding names from the committed CUDA 13 bindings
//! (`src/cuda13.rs`, `CUPTI_RUNTIME_TRACE_CBID_<name> = <id>`, `CUPTI_DRIVER_TRACE_CBID_<name> = <id>`), so that
//! the agent can choose callbacks by what a call does (`cuflight_format::calls`, which also strips the names'
//! version suffixes) without asking CUPTI for every id's name. Written to `$OUT_DIR/cbids.rs`.

use std::fmt::Write;

fn main() {
    println!("cargo:rerun-if-changed=src/cuda13.rs");
    println!("cargo:rerun-if-changed=build.rs");
    let src = std::fs::read_to_string("src/cuda13.rs").expect("sys/src/cuda13.rs is committed");
    let mut out = String::new();
    for (table, prefix, domain) in [
        ("RUNTIME", "pub const CUPTI_RUNTIME_TRACE_CBID_", "runtime"),
        ("DRIVER", "pub const CUPTI_DRIVER_TRACE_CBID_", "driver"),
    ] {
        let _ = writeln!(out, "/// (callback id, binding name) for every {domain} API callback of CUDA 13.5.");
        let _ = writeln!(out, "pub const {table}: &[(u32, &str)] = &[");
        for line in src.lines() {
            let Some(rest) = line.trim().strip_prefix(prefix) else { continue };
            let Some((name, value)) = rest.split_once(':') else { continue };
            let Some(id) = value.rsplit('=').next().and_then(|v| v.trim().trim_end_matches(';').parse::<u32>().ok())
            else {
                continue;
            };
            // INVALID, SIZE and FORCE_INT are not calls.
            if matches!(name, "INVALID" | "SIZE" | "FORCE_INT") {
                continue;
            }
            let _ = writeln!(out, "    ({id}, {name:?}),");
        }
        out.push_str("];\n");
    }
    let dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(dir.join("cbids.rs"), out).expect("OUT_DIR is writable");
}
