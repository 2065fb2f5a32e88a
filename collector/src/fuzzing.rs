//! Entry points shared by the fuzz targets (`fuzz/`, cargo fuzz) and the stable mutation test that runs in CI
//! (`collector/tests/mutations.rs`): each takes arbitrary bytes and must return, never panic.

use std::io::Write;

/// The native trace reader over arbitrary bytes; returns how many blocks decoded.
pub fn trace_reader(data: &[u8]) -> usize {
    let Ok(mut r) = cuflight_format::file::TraceReader::new(data) else { return 0 };
    let mut n = 0;
    while let Ok(Some(_)) = r.next_block() {
        n += 1;
    }
    n
}

/// The Kineto importer over arbitrary bytes (gunzipped first when they look like gzip).
pub fn kineto(data: &[u8]) -> bool {
    if data.starts_with(&[0x1f, 0x8b]) {
        let gz = std::io::BufReader::new(flate2::read::GzDecoder::new(data));
        return crate::import::kineto::import(gz).is_ok();
    }
    crate::import::kineto::import(data).is_ok()
}

/// The nsys importer over arbitrary bytes written to a temporary file (SQLite reads files).
pub fn nsys(data: &[u8]) -> bool {
    let path = std::env::temp_dir().join(format!("cuflight-fuzz-{}.sqlite", std::process::id()));
    let Ok(mut f) = std::fs::File::create(&path) else { return false };
    if f.write_all(data).is_err() {
        return false;
    }
    drop(f);
    let ok = crate::import::nsys::import(&path).is_ok();
    let _ = std::fs::remove_file(&path);
    ok
}
