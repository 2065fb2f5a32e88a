//! Entry points shared by the fuzz targets (`fuzz/`, cargo fuzz) and the stable mutation test that runs in CI
//! (`collector/tests/mutations.rs`): each takes arbitrary bytes and must return, never panic. A crate of its own so
//! that the fuzz targets build only what these reach.
#![forbid(unsafe_code)]

use std::io::Write;

/// The native trace reader over arbitrary bytes, block by block and through its index; returns how many blocks
/// decoded.
pub fn trace_reader(data: &[u8]) -> usize {
    let _ = cuflight_format::index::process_facts(&mut std::io::Cursor::new(data));
    let Ok(mut r) = cuflight_format::file::TraceReader::new(data) else { return 0 };
    let mut n = 0;
    while let Ok(Some(_)) = r.next_block() {
        n += 1;
    }
    n
}

/// The time-ordered event source over arbitrary bytes, with everything that streams over it: `stats`, both
/// exports (whole and cut) and the report (its plan and window sweep). They may refuse the bytes, never panic. (A target of its
/// own: each input is read several times over, which would slow the block reader's fuzzing tenfold.)
pub fn trace_source(data: &[u8]) {
    let Ok(Some(mut source)) = cuflight_trace::model::source::EventSource::from_bytes(data.to_vec(), "fuzz") else {
        return;
    };
    let _ = cuflight_analysis::stats::Stats::compute_source(&mut source).map(|s| s.to_table());
    let _ = cuflight_export::chrome::export(&mut source, std::io::sink());
    let _ = cuflight_export::perfetto::export(&mut source, std::io::sink());
    let mut traces = [("fuzz".to_string(), source)];
    let at = |i: usize| data.get(i).map_or(0, |&b| b as u64) * 1_000;
    let first = cuflight_trace::model::filter::Filter::Time { from_ns: at(0), to_ns: at(0) + at(1) + 1 };
    // The report whole, and of the steps a stretch chosen by the bytes holds (`report --filter-time`).
    for filter in [None, Some(first.clone())] {
        let opts = cuflight_report::Options { filter, ..Default::default() };
        if let Ok(r) = cuflight_report::Report::compute(&mut traces, &opts) {
            let _ = (r.to_text(), r.to_json(), r.to_html());
        }
    }
    // The cut `export --filter-*` draws: two stretches chosen by the bytes, after the timeline's start.
    let [(_, mut source)] = traces;
    if let Ok(w) = first.windows(&mut source) {
        let (_, end) = w.spans[0];
        let second = end.saturating_add(at(2) + 1);
        let mut spans = w.spans;
        spans.push((second, second.saturating_add(at(3))));
        source.cut_to(cuflight_trace::model::windows::Windows::new(spans));
        let _ = cuflight_export::chrome::export(&mut source, std::io::sink());
        let _ = cuflight_export::perfetto::export(&mut source, std::io::sink());
    }
}

/// The collector's side of shared memory over arbitrary bytes: a sealed memfd holding them is validated and
/// read as `record` reads an agent's segment (rings drained, strings parsed, process facts).
pub fn segment(data: &[u8]) -> usize {
    let Ok(fd) = cuflight_format::segment::sealed_memfd(data) else { return 0 };
    let Ok(seg) = cuflight_format::segment::MappedSegment::from_fd(fd) else { return 0 };
    cuflight_capture::record::read_segment_once(seg)
}

/// The Kineto importer over arbitrary bytes (gunzipped first when they look like gzip), then the report and its
/// three renderings on whatever imported.
pub fn kineto(data: &[u8]) -> bool {
    let imported = if data.starts_with(&[0x1f, 0x8b]) {
        cuflight_trace::import::kineto::import(std::io::BufReader::new(flate2::read::GzDecoder::new(data)))
    } else {
        cuflight_trace::import::kineto::import(data)
    };
    let Ok(trace) = imported else { return false };
    report(trace);
    true
}

/// `cuflight report` over an imported trace: it may refuse it (no GPU work), never panic.
fn report(trace: cuflight_trace::model::trace::Trace) {
    let mut traces = [("fuzz".to_string(), cuflight_trace::model::source::EventSource::from_trace(trace))];
    for step in [None, Some("ProfilerStep".to_string())] {
        let opts = cuflight_report::Options { step, include_warmup: false, filter: None };
        if let Ok(r) = cuflight_report::Report::compute(&mut traces, &opts) {
            let _ = (r.to_text(), r.to_json(), r.to_html());
        }
    }
}

/// The nsys importer over arbitrary bytes written to a temporary file (SQLite reads files).
pub fn nsys(data: &[u8]) -> bool {
    let path = std::env::temp_dir().join(format!("cuflight-fuzz-{}.sqlite", std::process::id()));
    let Ok(mut f) = std::fs::File::create(&path) else { return false };
    if f.write_all(data).is_err() {
        return false;
    }
    drop(f);
    let ok = cuflight_trace::import::nsys::import(&path).is_ok();
    let _ = std::fs::remove_file(&path);
    // Nothing beside it: the importer opens it immutable (no -shm/-wal files whatever its header says).
    ok
}
