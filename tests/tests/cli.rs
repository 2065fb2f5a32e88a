//! Bad input: one actionable line on stderr, a non-zero exit, never a panic.

use cuflight_integration::*;
use std::process::Command;

fn cuflight(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(cuflight_bin()).args(args).output().expect("cuflight runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn assert_one_line_error(code: Option<i32>, stderr: &str, needle: &str) {
    assert!(matches!(code, Some(c) if c != 0), "exit code {code:?}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains(needle), "expected '{needle}' in: {stderr}");
}

fn a_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let prog = build_c("smoke", dir);
    let r = record(dir, &[], &prog, &[], &[]);
    assert!(r.output.status.success(), "{}", r.stderr());
    r.trace
}

#[test]
fn truncated_and_corrupt_traces_are_named_not_panicked_on() {
    let dir = scratch("truncated");
    let trace = a_trace(&dir);
    let bytes = std::fs::read(&trace).unwrap();
    for (cut, needle) in [(bytes.len() - 3, "truncated trace"), (bytes.len() / 2, "trace"), (10, "truncated trace")] {
        let bad = dir.join(format!("cut{cut}.cuf"));
        std::fs::write(&bad, &bytes[..cut]).unwrap();
        let (code, err) = cuflight(&["stats", bad.to_str().unwrap()]);
        assert_one_line_error(code, &err, needle);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let garbage = dir.join("garbage.cuf");
    std::fs::write(&garbage, b"\x7fELF not a trace at all").unwrap();
    let (code, err) = cuflight(&["stats", garbage.to_str().unwrap()]);
    assert_one_line_error(code, &err, "unknown format");
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0xff;
    let bad = dir.join("flipped.cuf");
    std::fs::write(&bad, &flipped).unwrap();
    let (code, err) = cuflight(&["stats", bad.to_str().unwrap()]);
    assert_one_line_error(code, &err, "trace");
}

#[test]
fn bad_flags_missing_files_and_commands_fail_cleanly() {
    let (code, err) = cuflight(&["stats", "/nonexistent/run.cuf"]);
    assert_one_line_error(code, &err, "cannot open /nonexistent/run.cuf");
    let (code, err) = cuflight(&["stats", "x.cuf", "--format", "xml"]);
    assert_one_line_error(code, &err, "invalid value 'xml'");
    let (code, err) = cuflight(&["record"]);
    assert_one_line_error(code, &err, "required");
    let dir = scratch("nocommand");
    let out = dir.join("x.cuf");
    let (code, err) = cuflight(&["record", "-o", out.to_str().unwrap(), "--", "/nonexistent/program"]);
    assert_one_line_error(code, &err, "cannot run '/nonexistent/program'");
}

#[test]
fn record_returns_the_commands_exit_code_and_a_table() {
    let dir = scratch("exitcode");
    let trace = a_trace(&dir);
    let r = record(&scratch("exitcode-sh"), &[], std::path::Path::new("/bin/sh"), &["-c", "exit 7"], &[]);
    assert_eq!(r.output.status.code(), Some(7));
    let out = Command::new(cuflight_bin()).arg("stats").arg(&trace).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("CUDA kernels") && table.contains("scale"), "{table}");
}
