//! NVTX through the real nvtx3 headers in a CPU-only process (no CUDA call): ranges, nesting, threads, domains,
//! registered strings and marks.

use cuflight_integration::*;
use serde_json::Value;

fn nvtx_row<'a>(s: &'a Value, domain: &str, name: &str, kind: &str) -> &'a Value {
    s["nvtx"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["domain"] == domain && r["name"] == name && r["kind"] == kind)
        .unwrap_or_else(|| panic!("no NVTX {kind} {domain}/{name} in {}", s["nvtx"]))
}

#[test]
fn ranges_marks_and_domains_across_threads() {
    let dir = scratch("nvtx");
    let prog = build_c("nvtx", &dir);
    let r = record(&dir, &[], &prog, &[], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    let outer = nvtx_row(&s, "default", "outer", "range");
    let inner = nvtx_row(&s, "default", "inner", "range");
    assert_eq!((outer["count"].as_u64(), inner["count"].as_u64()), (Some(1), Some(3)));
    // Nesting: the outer range contains the three inner ones (each sleeps 300 us).
    assert!(inner["min_ns"].as_u64().unwrap() >= 300_000);
    assert!(outer["total_ns"].as_u64().unwrap() >= inner["total_ns"].as_u64().unwrap());
    assert_eq!(nvtx_row(&s, "default", "worker", "range")["count"], 4);
    let handoff = nvtx_row(&s, "default", "handoff", "range");
    assert_eq!(handoff["count"], 1);
    assert!(handoff["total_ns"].as_u64().unwrap() >= 500_000, "started on one thread, ended on another");
    assert_eq!(nvtx_row(&s, "default", "checkpoint", "mark")["count"], 2);
    assert_eq!(nvtx_row(&s, "io", "read", "range")["count"], 5);
    assert_eq!(nvtx_row(&s, "io", "eof", "mark")["count"], 1);
    assert_eq!(nvtx_row(&s, "default", "wide", "range")["count"], 1);
    assert_eq!(nvtx_row(&s, "default", "wide-mark", "mark")["count"], 1);
    assert_eq!(nvtx_row(&s, "io", "wide-read", "range")["count"], 1);
    assert_eq!(s["nvtx"].as_array().unwrap().len(), 12);
    // Payloads travel into the Kineto JSON export.
    let v = export_chrome(&r.trace, &dir.join("nvtx.json"));
    let payload = |name: &str| {
        let e = v["traceEvents"].as_array().unwrap().iter().find(|e| e["name"] == name).expect(name);
        e["args"]["payload"].clone()
    };
    assert_eq!(payload("batch"), 42);
    assert_eq!(payload("loss"), 2.5);
    let categories: Vec<(String, u64, String)> = s["nvtx_categories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (c["domain"].as_str().unwrap().into(), c["category"].as_u64().unwrap(), c["name"].as_str().unwrap().into())
        })
        .collect();
    assert_eq!(categories, [("default".into(), 7, "data".into()), ("io".into(), 3, "disk".into())]);
    assert_eq!(s["kernels"].as_array().unwrap().len(), 0);
    assert_eq!(s["processes"][0]["cupti_version"], 0, "a CPU-only process never loads CUPTI");
    assert_eq!(s["dropped"], 0);
}

#[test]
fn every_library_embedding_nvtx_is_injected_not_only_the_first() {
    let dir = scratch("nvtx_two");
    let lib = dir.join("libnvtx_lib.so");
    let inc = cuda_include();
    let gcc = |args: &[&std::ffi::OsStr]| {
        let st = c_compiler().args(args).status().unwrap();
        assert!(st.success(), "gcc {args:?}");
    };
    let src = repo_root().join("tests/c");
    gcc(&[
        "-shared".as_ref(),
        "-fPIC".as_ref(),
        "-I".as_ref(),
        inc.as_os_str(),
        src.join("nvtx_lib.c").as_os_str(),
        "-ldl".as_ref(),
        "-o".as_ref(),
        lib.as_os_str(),
    ]);
    let prog = dir.join("nvtx_two");
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    gcc(&[
        "-I".as_ref(),
        inc.as_os_str(),
        src.join("nvtx_two.c").as_os_str(),
        "-L".as_ref(),
        dir.as_os_str(),
        "-lnvtx_lib".as_ref(),
        rpath.as_ref(),
        "-ldl".as_ref(),
        "-o".as_ref(),
        prog.as_os_str(),
    ]);
    let r = record(&dir, &[], &prog, &[], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    let s = stats(&r.trace);
    assert_eq!(nvtx_row(&s, "default", "from-main", "range")["count"], 3);
    assert_eq!(nvtx_row(&s, "default", "from-lib", "range")["count"], 3);
    assert_eq!(nvtx_row(&s, "default", "lib-mark", "mark")["count"], 3);
}
