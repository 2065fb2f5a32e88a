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
fn traces_cut_short_read_with_one_warning_and_recover_completes_them() {
    let dir = scratch("truncated");
    let trace = a_trace(&dir);
    let bytes = std::fs::read(&trace).unwrap();
    std::fs::write(dir.join("cut10.cuf"), &bytes[..10]).unwrap();
    let (code, err) = cuflight(&["stats", dir.join("cut10.cuf").to_str().unwrap()]);
    assert_one_line_error(code, &err, "truncated trace");
    // Cut inside the index trailer that follows the footer: every block is whole, nothing to warn about.
    std::fs::write(dir.join("cut-trailer.cuf"), &bytes[..bytes.len() - 3]).unwrap();
    assert_eq!(cuflight(&["stats", dir.join("cut-trailer.cuf").to_str().unwrap()]), (Some(0), String::new()));
    for cut in [bytes.len() - 19, bytes.len() / 2, 40] {
        let bad = dir.join(format!("cut{cut}.cuf"));
        std::fs::write(&bad, &bytes[..cut]).unwrap();
        let (code, err) = cuflight(&["stats", bad.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
        assert!(err.contains("cut short") && err.contains("cuflight recover"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        let fixed = dir.join(format!("cut{cut}.recovered.cuf"));
        let _ = std::fs::remove_file(&fixed);
        let (code, err) = cuflight(&["recover", bad.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
        assert!(err.contains("dropped"), "{err}");
        let (code, err) = cuflight(&["stats", fixed.to_str().unwrap()]);
        assert_eq!((code, err.as_str()), (Some(0), ""), "a recovered trace reads without a warning");
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
    // An empty step name would make every range a step.
    let (code, err) = cuflight(&["report", "x.cuf", "--step", ""]);
    assert_one_line_error(code, &err, "a range name is needed");
    let (code, err) = cuflight(&["record"]);
    assert_one_line_error(code, &err, "required");
    let dir = scratch("nocommand");
    let out = dir.join("x.cuf");
    let (code, err) = cuflight(&["record", "-o", out.to_str().unwrap(), "--", "/nonexistent/program"]);
    assert_one_line_error(code, &err, "cannot run '/nonexistent/program'");
}

/// Many sampling windows are many CUPTI sessions, each leaving memory in the program (74 KB on an H200): said once,
/// before the windows, with the total; a few windows say nothing.
#[test]
fn many_sampling_windows_say_what_cupti_keeps_of_them() {
    let dir = scratch("many-windows");
    let out = dir.join("w.cuf");
    let (_, err) = cuflight(&["attach", "4194304", "--every", "1s", "--count", "1000", "-o", out.to_str().unwrap()]);
    assert!(err.contains("1000 windows are 1000 CUPTI sessions") && err.contains("about 72 MB"), "{err}");
    let (_, err) = cuflight(&["attach", "4194304", "--every", "1s", "--count", "10", "-o", out.to_str().unwrap()]);
    assert!(!err.contains("CUPTI sessions"), "{err}");
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

#[test]
fn no_command_destroys_its_input_or_an_existing_file() {
    let dir = scratch("outputs");
    let trace = a_trace(&dir);
    let t = trace.to_str().unwrap();
    // Chrome export of a JSON trace: the default name would be the input.
    let json = dir.join("k.json");
    let (code, err) = cuflight(&["export", t, "--format", "chrome", "--force", "-o", json.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let original = std::fs::read(&json).unwrap();
    let (code, err) = cuflight(&["export", json.to_str().unwrap(), "--format", "chrome"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("k.cuflight.json"), "{err}");
    assert_eq!(std::fs::read(&json).unwrap(), original, "input untouched");
    // An output that is an input, by name or through a link, even with --force.
    for args in
        [vec!["report", t, "-o", t, "--force"], vec!["export", t, "-o", t, "--force"], vec!["recover", t, "-o", t]]
    {
        let (code, err) = cuflight(&args);
        assert_one_line_error(code, &err, "is also an input");
    }
    let link = dir.join("link.cuf");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&trace, &link).unwrap();
    let (code, err) = cuflight(&["report", t, "-o", link.to_str().unwrap(), "--force"]);
    assert_one_line_error(code, &err, "is also an input");
    // Existing files need --force; a failed run with --force leaves them intact.
    let keep = dir.join("keep.cuf");
    std::fs::copy(&trace, &keep).unwrap();
    let before = std::fs::read(&keep).unwrap();
    let (code, err) = cuflight(&["record", "-o", keep.to_str().unwrap(), "--", "/bin/true"]);
    assert_one_line_error(code, &err, "pass --force");
    let (code, err) = cuflight(&["record", "--force", "-o", keep.to_str().unwrap(), "--", "/nonexistent/program"]);
    assert_one_line_error(code, &err, "cannot run");
    assert_eq!(std::fs::read(&keep).unwrap(), before, "a failed record leaves the old trace");
    // The program to record, or a file its command names, is never the output, even with --force.
    let program = dir.join("program");
    std::fs::copy("/bin/true", &program).unwrap();
    let p = program.to_str().unwrap();
    for (args, says) in [
        (vec!["record", "-f", "-o", p, "--", p], "is the program to record"),
        (vec!["record", "-f", "-o", t, "--", "/bin/true", t], "is named in the command to record"),
        (vec!["record", "-f", "--every", "2s", "--count", "2", "-o", p, "--", p], "is the program to record"),
    ] {
        let (code, err) = cuflight(&args);
        assert_one_line_error(code, &err, says);
    }
    assert_eq!(std::fs::read(&program).unwrap(), std::fs::read("/bin/true").unwrap(), "the program untouched");
    let fresh = dir.join("fresh.cuf");
    let _ = std::fs::remove_file(&fresh);
    let (code, _) = cuflight(&["record", "-o", fresh.to_str().unwrap(), "--", "/nonexistent/program"]);
    assert_ne!(code, Some(0));
    assert!(!fresh.exists(), "a failed record leaves no empty trace behind");
    // A symlink to another file is not written through.
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, b"precious").unwrap();
    let out_link = dir.join("out-link.txt");
    let _ = std::fs::remove_file(&out_link);
    std::os::unix::fs::symlink(&victim, &out_link).unwrap();
    let (code, err) = cuflight(&["report", t, "--force", "-o", out_link.to_str().unwrap()]);
    assert_one_line_error(code, &err, "symbolic link");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    // Nothing temporary left behind by any of this.
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("cuflight-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// `cuflight stats T | head`, quitting `less`, a full disk: a closed standard output ends the command as other
/// Unix tools end (141 as if SIGPIPE ended it, or 0), with no message and no panic; another output error is
/// one line and status 1.
#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    use std::process::Stdio;
    let dir = scratch("closed-stdout");
    let trace = a_trace(&dir);
    for args in [vec!["stats"], vec!["stats", "--format", "json"], vec!["report"], vec!["ps"]] {
        let mut child = Command::new(cuflight_bin())
            .args(&args)
            .args((args[0] != "ps").then_some(&trace))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take()); // the reader is gone before the first line
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(out.status.code(), Some(0 | 141)), "{args:?}: {:?} {err}", out.status);
        assert!(err.is_empty(), "{args:?}: {err}");
    }
    if std::path::Path::new("/dev/full").exists() {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = Command::new(cuflight_bin()).arg("stats").arg(&trace).stdout(full).output().unwrap();
        let (code, err) = (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned());
        assert_one_line_error(code, &err, "No space left");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

/// `cuflight ARGS` with `input` piped into its standard input: (exit code, stdout, stderr).
fn cuflight_fed(args: &[&str], input: &[u8]) -> (Option<i32>, String, String) {
    use std::io::Write;
    let mut child = Command::new(cuflight_bin())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cuflight runs");
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&input); // a command that refuses early closes the pipe
    });
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code(), text(&out.stdout), text(&out.stderr))
}

#[test]
fn a_trace_piped_into_standard_input_reads_as_the_file_does() {
    let dir = scratch("stdin");
    let trace = a_trace(&dir);
    let bytes = std::fs::read(&trace).unwrap();
    let path = trace.to_str().unwrap();
    for args in [&["stats"][..], &["report", "--format", "json"], &["export", "--format", "chrome", "-o", "-"]] {
        let file = Command::new(cuflight_bin()).args(args).arg(path).output().unwrap();
        let (code, piped, err) = cuflight_fed(&[args, &["-"]].concat(), &bytes);
        assert_eq!(code, Some(0), "{args:?}: {err}");
        if args[0] == "report" {
            // The report names its input; its diagnosis is the same.
            let file: serde_json::Value = serde_json::from_slice(&file.stdout).unwrap();
            let piped: serde_json::Value = serde_json::from_str(&piped).unwrap();
            for key in ["verdict", "findings"] {
                assert_eq!(file[key], piped[key], "{key}");
            }
            assert_eq!(file["processes"][0]["steps"], piped["processes"][0]["steps"]);
        } else {
            assert_eq!(String::from_utf8_lossy(&file.stdout), piped, "{args:?}");
        }
    }
    // An nsys SQLite export, which SQLite opens by name.
    if let Some(sqlite) = shared_trace("nsys-a100-cloverleaf.sqlite") {
        let file = Command::new(cuflight_bin()).arg("stats").arg(&sqlite).output().unwrap();
        let (code, piped, err) = cuflight_fed(&["stats", "-"], &std::fs::read(&sqlite).unwrap());
        assert_eq!((code, piped.as_str()), (Some(0), &*String::from_utf8_lossy(&file.stdout)), "{err}");
    }
    // The report names it as such.
    let (_, text, _) = cuflight_fed(&["report", "-"], &bytes);
    assert!(text.contains(") from standard input") && !text.contains("/proc/"), "{text}");
    // Cut short: read with the usual warning, naming it.
    let (code, _, err) = cuflight_fed(&["stats", "-"], &bytes[..bytes.len() / 2]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("standard input: ") && err.contains("cut short"), "{err}");
    // Bad input is named as standard input; an output beside it must be named; it can be read once.
    let (code, _, err) = cuflight_fed(&["stats", "-"], b"not a trace");
    assert_one_line_error(code, &err, "standard input: unknown format");
    let (code, _, err) = cuflight_fed(&["export", "-"], &bytes);
    assert_one_line_error(code, &err, "name the output with -o");
    let (code, _, err) = cuflight_fed(&["diff", "-", "-"], &bytes);
    assert_one_line_error(code, &err, "named twice");
}

#[test]
fn a_recording_streamed_through_a_pipe_reads_back_whole() {
    // `record -o FIFO` writes into the pipe as it goes (nothing to replace there); its summary counts the bytes
    // that went through, and `stats -` reads them from standard input.
    let dir = scratch("fifo");
    let fifo = dir.join("trace.cuf");
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let prog = build_c("smoke", &dir);
    let r = record(&dir, &[], &prog, &[], &[]);
    let bytes = reader.join().unwrap();
    assert!(r.output.status.success(), "{}", r.stderr());
    assert!(r.stderr().contains(&format!(", {} bytes,", bytes.len())), "{} bytes read: {}", bytes.len(), r.stderr());
    let (code, piped, err) = cuflight_fed(&["stats", "--format", "json", "-"], &bytes);
    assert_eq!(code, Some(0), "{err}");
    let s: serde_json::Value = serde_json::from_str(&piped).unwrap();
    assert_eq!(count(&s, "kernels", "name", "scale"), 1, "{s}");
    assert_eq!(err, "", "a whole trace, no warning");
}

/// A FIFO made with `mkfifo` in `dir`, fed `bytes` by a thread once a reader opens it.
fn fed_fifo(dir: &std::path::Path, name: &str, bytes: Vec<u8>) -> (std::path::PathBuf, std::thread::JoinHandle<()>) {
    let fifo = dir.join(name);
    let _ = std::fs::remove_file(&fifo);
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let path = fifo.clone();
    (fifo, std::thread::spawn(move || std::fs::write(path, bytes).unwrap()))
}

/// A pipe named as a trace (`cuflight diff <(zcat a.cuf.gz) <(zcat b.cuf.gz)`, a FIFO) cannot seek: each is read
/// once, as standard input is, and reads as its file does, named by its path. It used to fail as "bad magic".
#[test]
fn traces_named_as_pipes_read_as_their_files_do() {
    let dir = scratch("named-pipes");
    let trace = a_trace(&dir);
    let bytes = std::fs::read(&trace).unwrap();
    let file = Command::new(cuflight_bin()).args(["stats", "--format", "json"]).arg(&trace).output().unwrap();
    let (fifo, feeder) = fed_fifo(&dir, "one.cuf", bytes.clone());
    let piped = Command::new(cuflight_bin()).args(["stats", "--format", "json"]).arg(&fifo).output().unwrap();
    feeder.join().unwrap();
    assert!(piped.status.success(), "{}", String::from_utf8_lossy(&piped.stderr));
    assert_eq!(String::from_utf8_lossy(&piped.stdout), String::from_utf8_lossy(&file.stdout));
    // Two at once, each named as given.
    let (a, fa) = fed_fifo(&dir, "a.cuf", bytes.clone());
    let (b, fb) = fed_fifo(&dir, "b.cuf", bytes);
    let out = Command::new(cuflight_bin()).arg("diff").args([&a, &b]).output().unwrap();
    fa.join().unwrap();
    fb.join().unwrap();
    let (text, err) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{err}");
    let named = |p: &std::path::Path| text.contains(p.to_str().unwrap());
    assert!(named(&a) && named(&b) && !text.contains("/proc/"), "{text}");
}

/// Compressed traces (gzip, zstd) read as what they hold, named as given: a cuflight trace, an nsys SQLite export,
/// Kineto JSON (gzip'd Kineto JSON streams through its importer as before). One cut short reads what it holds, with
/// a warning; one that would grow past a thousand times its size is refused before it fills the temporary
/// directory; a directory holding them lists them; outputs go beside them, named for what they hold.
#[test]
fn compressed_traces_read_as_what_they_hold() {
    use std::io::Write;
    let dir = scratch("compressed");
    let trace = a_trace(&dir);
    let bytes = std::fs::read(&trace).unwrap();
    let gzip = |b: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    };
    let stats = |p: &std::path::Path| {
        let out = Command::new(cuflight_bin()).args(["stats", "--format", "json"]).arg(p).output().unwrap();
        assert!(out.status.success(), "{}: {}", p.display(), String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let plain = stats(&trace);
    let (gz, zst) = (dir.join("run.cuf.gz"), dir.join("run.cuf.zst"));
    std::fs::write(&gz, gzip(&bytes)).unwrap();
    std::fs::write(&zst, zstd::encode_all(&bytes[..], 3).unwrap()).unwrap();
    assert_eq!(stats(&gz), plain);
    assert_eq!(stats(&zst), plain);
    if let Some(sqlite) = shared_trace("nsys-a100-cloverleaf.sqlite") {
        let packed = dir.join("cloverleaf.sqlite.zst");
        std::fs::write(&packed, zstd::encode_all(std::fs::File::open(&sqlite).unwrap(), 3).unwrap()).unwrap();
        assert_eq!(stats(&packed), stats(&sqlite));
    }
    // The report names it as given.
    let out = Command::new(cuflight_bin()).arg("report").arg(&gz).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("from {}", gz.display())) && !text.contains("/proc/"), "{text}");
    // Cut short: what it holds, with a warning that says so.
    let cut = dir.join("cut.cuf.gz");
    let whole = gzip(&bytes);
    std::fs::write(&cut, &whole[..whole.len() * 3 / 4]).unwrap();
    let out = Command::new(cuflight_bin()).arg("stats").arg(&cut).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains(&format!("{}: the compressed file ends early", cut.display())),
        "{err}"
    );
    // 256 MiB of a trace's magic and zeros in a few KB: refused at 64 MB, one line.
    let bomb = dir.join("bomb.cuf.zst");
    {
        let mut e = zstd::Encoder::new(std::fs::File::create(&bomb).unwrap(), 1).unwrap();
        e.write_all(&bytes[..16]).unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..256 {
            e.write_all(&zeros).unwrap();
        }
        e.finish().unwrap();
    }
    let (code, err) = cuflight(&["stats", bomb.to_str().unwrap()]);
    assert_one_line_error(code, &err, "decompresses to more than 1000 times its size");
    // A directory of them is read as one; the default output goes beside, named for what it holds.
    let listed = dir.join("listed");
    std::fs::create_dir_all(&listed).unwrap();
    std::fs::copy(&zst, listed.join("run.cuf.zst")).unwrap();
    // A log archive beside it is no trace: left out, not read and refused.
    std::fs::write(listed.join("train_log.gz"), gzip(b"epoch 1 loss 0.5\n")).unwrap();
    let (code, err) = cuflight(&["report", listed.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("1 trace; left out 1 other entry"), "{err}");
    let (code, err) = cuflight(&["export", zst.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(dir.join("run.perfetto-trace").is_file(), "{err}");
}

/// A full disk under every command that writes a file of a trace: one line that names the output (not the
/// input) with the system's reason, status 1, nothing left on the disk, and a file replaced with --force intact.
#[test]
fn every_output_on_a_full_disk_is_one_line_naming_it_and_leaves_nothing() {
    let dir = scratch("full-disk-outputs");
    let trace = a_trace(&dir);
    let other = dir.join("other.cuf");
    std::fs::copy(&trace, &other).unwrap();
    let mnt = dir.join("mnt");
    let Some(_disk) = SmallDisk::mount(&mnt, "64k") else {
        skipped("cannot mount a small tmpfs here (not root)");
        return;
    };
    std::fs::write(mnt.join("keep.json"), b"precious").unwrap();
    // Filled to the last byte: every output's first write fails.
    let mut filler = std::fs::File::create(mnt.join("filler")).unwrap();
    while std::io::Write::write_all(&mut filler, &[7u8; 4096]).is_ok() {}
    let _ = std::io::Write::write_all(&mut filler, &[7u8; 1]);
    let (t, o) = (trace.to_str().unwrap(), other.to_str().unwrap());
    let at = |name: &str| mnt.join(name).to_str().unwrap().to_string();
    let cases: Vec<(Vec<String>, String)> = [
        (vec!["export", t, "-o"], "t.perfetto-trace"),
        (vec!["export", t, "--format", "chrome", "-o"], "t.json"),
        (vec!["export", t, "--format", "chrome", "-o"], "t.json.gz"),
        (vec!["export", t, "--format", "parquet", "-o"], "pq"),
        (vec!["report", t, "--format", "html", "-o"], "r.html"),
        (vec!["report", t, "--format", "json", "--force", "-o"], "keep.json"),
        (vec!["stats", t, "--format", "csv", "-o"], "s.csv"),
        (vec!["merge", t, o, "-o"], "m.cuf"),
        (vec!["recover", t, "-o"], "rec.cuf"),
        (vec!["diff", t, o, "--format", "json", "-o"], "d.json"),
    ]
    .into_iter()
    .map(|(args, out)| (args.into_iter().map(String::from).chain([at(out)]).collect(), at(out)))
    .collect();
    for (args, out) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, err) = cuflight(&args);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(&format!("cannot write {out}")) && err.contains("No space left"), "{args:?}: {err}");
    }
    let mut left: Vec<String> =
        std::fs::read_dir(&mnt).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    left.sort();
    assert_eq!(left, ["filler", "keep.json"], "nothing half-written is left");
    assert_eq!(std::fs::read(mnt.join("keep.json")).unwrap(), b"precious");
}
