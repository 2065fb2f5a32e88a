//! Helpers for the end-to-end tests: build a C program from `tests/c/` against the real CUDA 13.5 headers
//! (installed by `scripts/fetch-cuda-headers`), run it under `cuflight record` on cudasim (the CPU test double),
//! and read `cuflight stats --format json`.
//!
//! The workspace must be built first (`cargo build`): the tests use the `cuflight` binary, `libcuflight.so` and
//! `target/<profile>/cudasim/` from the same profile as the test binary.
#![forbid(unsafe_code)]

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// `target/<profile>` of the running test binary (`target/<profile>/deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent().and_then(Path::parent).expect("target/<profile>/deps").to_path_buf()
}

fn require(path: &Path, hint: &str) -> PathBuf {
    assert!(path.exists(), "{} is missing: {hint}", path.display());
    path.to_path_buf()
}

pub fn cuflight_bin() -> PathBuf {
    require(&profile_dir().join("cuflight"), "run `cargo build` (scripts/test does) before the tests")
}

/// `setpriv` running a command as user `uid`, for the tests of what other users may do; None (the test says it
/// skipped) unless this test runs as root with setpriv and that user can reach this checkout's binaries and
/// cudasim: a checkout under a private directory (/root, mode 0700, in a fresh container) is out of its reach.
pub fn as_other_user(uid: u32) -> Option<Command> {
    let setpriv = Path::new("/usr/bin/setpriv");
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let command = || {
        let mut c = Command::new(setpriv);
        c.args([format!("--reuid={uid}"), format!("--regid={uid}"), "--clear-groups".into()]);
        c
    };
    if !root || !setpriv.exists() {
        skipped("needs root and setpriv to run processes as other users");
        return None;
    }
    let lib = cudasim_dir().join("libcudart.so");
    let reach = command()
        .args(["/bin/sh", "-c", "test -x \"$0\" && test -r \"$1\""])
        .args([cuflight_bin().as_os_str(), lib.as_os_str()])
        .status()
        .is_ok_and(|s| s.success());
    if !reach {
        skipped(&format!("uid {uid} cannot reach {} (a checkout under a private directory)", cuflight_bin().display()));
        return None;
    }
    Some(command())
}

pub fn cudasim_dir() -> PathBuf {
    require(&profile_dir().join("cudasim/libcudart.so"), "run `cargo build` (it builds cudasim)");
    profile_dir().join("cudasim")
}

pub fn cuda_include() -> PathBuf {
    require(&repo_root().join(".cache/cuda/13/include/cuda_runtime_api.h"), "run scripts/fetch-cuda-headers");
    repo_root().join(".cache/cuda/13/include")
}

/// A scratch directory unique to one test.
pub fn scratch(test: &str) -> PathBuf {
    let dir = profile_dir().join("test-scratch").join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Compiles `tests/c/<name>.c` into `dir` with gcc against the real headers, linked to cudasim's libcudart.
pub fn build_c(name: &str, dir: &Path) -> PathBuf {
    build_c_linked(name, dir, true)
}

/// The C compiler the tests build their programs with: `$CUFLIGHT_TEST_CC` (one path: the aarch64 run under qemu
/// sets `scripts/aarch64-cc`), else gcc.
pub fn c_compiler() -> Command {
    Command::new(std::env::var_os("CUFLIGHT_TEST_CC").filter(|v| !v.is_empty()).unwrap_or_else(|| "gcc".into()))
}

/// As [`build_c`]; `link_cudart: false` leaves the runtime out (the program loads it itself). Where no compiler
/// exists (the emulated arm64 machine of scripts/aarch64-vm), `$CUFLIGHT_TEST_C_BUILT` names a directory of the
/// programs compiled beforehand by the same command (`NAME`, or `NAME.nocudart` without the runtime).
pub fn build_c_linked(name: &str, dir: &Path, link_cudart: bool) -> PathBuf {
    let out = dir.join(name);
    if let Some(built) = std::env::var_os("CUFLIGHT_TEST_C_BUILT").filter(|v| !v.is_empty()) {
        let file = if link_cudart { name.to_string() } else { format!("{name}.nocudart") };
        let from = Path::new(&built).join(file);
        std::fs::copy(&from, &out).unwrap_or_else(|e| panic!("{} was not built beforehand: {e}", from.display()));
        return out;
    }
    let src = repo_root().join("tests/c").join(format!("{name}.c"));
    let status = c_compiler()
        .args(["-O1", "-g", "-rdynamic", "-pthread", "-Wall", "-Werror", "-Wno-unused-function"])
        .arg("-I")
        .arg(cuda_include())
        .arg(&src)
        .arg("-L")
        .arg(cudasim_dir())
        .args(if link_cudart { &["-lcudart", "-ldl", "-o"][..] } else { &["-ldl", "-o"][..] })
        .arg(&out)
        .status()
        .expect("gcc runs");
    assert!(status.success(), "gcc failed on {}", src.display());
    out
}

/// Result of one `cuflight record` run.
pub struct Recorded {
    pub output: Output,
    pub trace: PathBuf,
}

impl Recorded {
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// Runs `cuflight record --force -o dir/trace.cuf [flags] -- program args` with cudasim on the library path
/// (tests record into the same file again and again).
/// `record` flags for everything cuflight traces but the trivial runtime calls: CUPTI's synchronization records
/// included, which the default leaves out for their cost (`format/src/tracing.rs`).
pub const EVERYTHING: &[&str] = &["--trace", "cuda,nvtx,memory,sync,overhead,python"];

pub fn record(dir: &Path, flags: &[&str], program: &Path, args: &[&str], env: &[(&str, &str)]) -> Recorded {
    let trace = dir.join("trace.cuf");
    let mut cmd = Command::new(cuflight_bin());
    cmd.arg("record").arg("--force").arg("-o").arg(&trace).args(flags).arg("--").arg(program).args(args);
    cmd.env("LD_LIBRARY_PATH", cudasim_dir()).env_remove("CUDASIM_CUPTI_VERSION");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("cuflight runs");
    Recorded { output, trace }
}

/// `cuflight stats --format json` of a trace.
pub fn stats(trace: &Path) -> Value {
    let out =
        Command::new(cuflight_bin()).args(["stats", "--format", "json"]).arg(trace).output().expect("cuflight runs");
    assert!(out.status.success(), "stats failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("stats prints JSON")
}

/// `cuflight report --format json` of a trace.
pub fn report_json(trace: &Path) -> Value {
    report_json_with(trace, &[])
}

/// `cuflight report --format json` of a trace with more options (`--include-warmup`).
pub fn report_json_with(trace: &Path, options: &[&str]) -> Value {
    let out = Command::new(cuflight_bin())
        .args(["report", "--format", "json"])
        .args(options)
        .arg(trace)
        .output()
        .expect("cuflight runs");
    assert!(out.status.success(), "report failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("report prints JSON")
}

/// The row of `table` whose `key` field equals `value` (and, optionally, whose `key2` equals `value2`).
pub fn row<'a>(stats: &'a Value, table: &str, key: &str, value: &str) -> &'a Value {
    stats[table]
        .as_array()
        .unwrap_or_else(|| panic!("no table {table}"))
        .iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("no {table} row with {key}={value} in {}", stats[table]))
}

pub fn rows<'a>(stats: &'a Value, table: &str, key: &str, value: &str) -> Vec<&'a Value> {
    stats[table].as_array().map(|a| a.iter().filter(|r| r[key] == value).collect()).unwrap_or_default()
}

/// Count of `table` rows matching `key` = `value`, or 0.
pub fn count(stats: &Value, table: &str, key: &str, value: &str) -> u64 {
    rows(stats, table, key, value).iter().map(|r| r["count"].as_u64().unwrap_or(0)).sum()
}

/// Says that the calling test skipped a check, and why: on stderr (which `cargo test` shows only for a failing
/// test) and, where the test command collects them (`scripts/test` sets `CUFLIGHT_SKIP_LOG`), as a line
/// `binary::test<TAB>why` of that file, which its closing summary counts and names.
/// A real full disk: a tmpfs of `size` (e.g. "256k") mounted on `dir` (created), unmounted when dropped however
/// the test ends (a failed assertion once left one mounted, and every later run failed on it). None where this
/// user cannot mount one (not root).
pub struct SmallDisk(PathBuf);

impl SmallDisk {
    pub fn mount(dir: &Path, size: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).ok()?;
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then(|| SmallDisk(dir.to_path_buf()))
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).stderr(std::process::Stdio::null()).status();
    }
}

pub fn skipped(why: &str) {
    eprintln!("skipped: {why}");
    let Some(log) = std::env::var_os("CUFLIGHT_SKIP_LOG").filter(|v| !v.is_empty()) else { return };
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|s| s.rsplit_once('-').map_or(s.clone(), |(name, _hash)| name.to_string()))
        .unwrap_or_default();
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let line = format!("{binary}::{test}\t{}\n", why.replace(['\t', '\n'], " "));
    // One short write with O_APPEND: lines of tests running at once do not interleave.
    let file = std::fs::OpenOptions::new().create(true).append(true).open(log);
    let _ = file.and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
}

/// Where the third-party traces recorded on real GPUs live: `$CUFLIGHT_TRACES`, else `../shared/traces` beside
/// the repository (read in place, never copied), else `.cache/traces` (where `scripts/fetch-traces` puts the
/// public ones, fetched by repository, commit and checksum).
pub fn shared_traces_dir() -> Option<PathBuf> {
    let from_env = std::env::var_os("CUFLIGHT_TRACES").filter(|v| !v.is_empty()).map(PathBuf::from);
    if from_env.is_some() {
        return from_env.filter(|d| d.is_dir());
    }
    [repo_root().join("../shared/traces"), repo_root().join(".cache/traces")].into_iter().find(|d| d.is_dir())
}

/// The shared trace `name`, or None (with one line saying so) where no trace directory exists. Under `CI=true`
/// a missing trace fails the test: CI must never pass by skipping.
pub fn shared_trace(name: &str) -> Option<PathBuf> {
    let path = shared_traces_dir().map(|d| d.join(name)).filter(|p| p.is_file());
    if path.is_none() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true");
        assert!(!ci, "shared trace {name} is missing (CI=true): set CUFLIGHT_TRACES or provide ../shared/traces");
        skipped(&format!(
            "shared trace {name} not found (scripts/fetch-traces fetches the public ones; or set CUFLIGHT_TRACES)"
        ));
    }
    path
}

/// The Kineto and nsys traces under `../shared/traces/`.
pub const SHARED_TRACES: &[&str] = &[
    "kineto-2rank-r0.json.gz",
    "kineto-2rank-r1.json.gz",
    "kineto-a100-nccl-r0.json.gz",
    "kineto-h100-qwen-inference.json.gz",
    "kineto-v100-ddp-ns.json.gz",
    "nsys-a100-cloverleaf.sqlite",
];

/// Runs `python3 tests/py/<script> args...` and parses its JSON output.
pub fn python_json(script: &str, args: &[&std::ffi::OsStr]) -> Value {
    let out = Command::new("python3")
        .arg(repo_root().join("tests/py").join(script))
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(out.status.success(), "{script} failed: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{script} printed {stdout}: {e}"))
}

/// `cuflight export TRACE --format chrome --force -o OUT`, parsed.
pub fn export_chrome(trace: &Path, out: &Path) -> Value {
    let (ok, err) = cuflight(&[
        "export".as_ref(),
        trace.as_os_str(),
        "--format".as_ref(),
        "chrome".as_ref(),
        "--force".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(ok, "{err}");
    serde_json::from_slice(&std::fs::read(out).expect("export written")).expect("export is JSON")
}

/// `cuflight export TRACE -o OUT EXTRA...`; returns (success, stderr).
pub fn export_to(trace: &Path, out: &Path, extra: &[&str]) -> (bool, String) {
    let mut args = vec![std::ffi::OsStr::new("export"), trace.as_os_str(), "-o".as_ref(), out.as_os_str()];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    cuflight(&args)
}

/// Runs `cuflight` with `args`; returns (success, stderr).
pub fn cuflight(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = Command::new(cuflight_bin()).args(args).output().expect("cuflight runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// `cuflight record --force -o DIR/trace.cuf [flags] -- server cmd` (tests/c/server.c built into `dir`) fed
/// `input` on stdin; returns the trace's stats and record's stderr.
pub fn record_server_cmd(dir: &Path, flags: &[&str], input: &str) -> (Value, String) {
    let (stats, err, _) = record_server_cmd_output(dir, flags, input);
    (stats, err)
}

/// [`record_server_cmd`], with what the server printed (its answers) as well.
pub fn record_server_cmd_output(dir: &Path, flags: &[&str], input: &str) -> (Value, String, String) {
    use std::io::Write;
    let prog = build_c("server", dir);
    let trace = dir.join("trace.cuf");
    let mut child = Command::new(cuflight_bin())
        .args(["record", "--force", "-o"])
        .arg(&trace)
        .args(flags)
        .arg("--")
        .arg(&prog)
        .arg("cmd")
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .env_remove("CUDASIM_CUPTI_VERSION")
        .env_remove("CUFLIGHT_TRACE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cuflight runs");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("server reads its input");
    let out = child.wait_with_output().expect("record ends");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (stats(&trace), err, String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `cuflight launch [ARGS] -- server cmd` (tests/c/server.c), obeying lines on stdin.
pub struct Server {
    pub child: std::process::Child,
    pub out: std::io::BufReader<std::process::ChildStdout>,
    pub stdin: Option<std::process::ChildStdin>,
}

impl Server {
    pub fn start(dir: &Path, launch: &[&str], env: &[(&str, &str)]) -> Server {
        let prog = build_c("server", dir);
        let mut cmd = std::process::Command::new(cuflight_bin());
        cmd.arg("launch").args(launch).arg("--").arg(&prog).arg("cmd");
        Server::spawn(cmd, env)
    }

    /// `server cmd` started plainly: no cuflight, no cuflight variable in its environment.
    pub fn plain(dir: &Path, env: &[(&str, &str)]) -> Server {
        let prog = build_c("server", dir);
        let mut cmd = std::process::Command::new(prog);
        cmd.arg("cmd");
        for var in ["CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "CUFLIGHT_SESSION", "LD_PRELOAD"] {
            cmd.env_remove(var);
        }
        Server::spawn(cmd, env)
    }

    /// Runs `cmd` (a server) with cudasim and waits for "server: ready".
    pub fn spawn(mut cmd: std::process::Command, env: &[(&str, &str)]) -> Server {
        let mut child = cmd
            .env("LD_LIBRARY_PATH", cudasim_dir())
            .env_remove("CUDASIM_CUPTI_VERSION")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("cuflight runs");
        let stdin = child.stdin.take();
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert_eq!(line.trim(), "server: ready");
        Server { child, out, stdin }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        std::io::Write::write_all(stdin, format!("{line}\n").as_bytes()).unwrap();
        std::io::Write::flush(stdin).unwrap();
    }

    /// Sends `line` and returns the program's one-line answer. The program closing its output instead (it ended or
    /// crashed) fails the test with how it ended and its stderr: an empty answer alone says nothing of why.
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(line);
        let mut reply = String::new();
        if std::io::BufRead::read_line(&mut self.out, &mut reply).unwrap() == 0 {
            drop(self.stdin.take());
            let status = self.child.wait().unwrap();
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut err);
            panic!("the program closed its output instead of answering {line:?}: {status}; its stderr:\n{err}");
        }
        reply.trim().to_string()
    }

    /// Closes stdin and returns how the program ended, with its stderr.
    pub fn end(mut self) -> (std::process::ExitStatus, String) {
        drop(self.stdin.take());
        let status = self.child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(self.child.stderr.as_mut().unwrap(), &mut err).unwrap();
        (status, err)
    }
}

/// `cuflight attach PID --force -o TRACE ARGS...` in the background, its stderr piped.
pub fn spawn_attach(pid: u32, trace: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    std::process::Command::new(cuflight_bin())
        .args(["attach", &pid.to_string(), "--force", "-o"])
        .arg(trace)
        .args(args)
        .envs(env.iter().copied())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cuflight runs")
}

/// [`spawn_attach`], returned once the agent records.
pub fn attach_in_background(pid: u32, trace: &Path, args: &[&str]) -> std::process::Child {
    let child = spawn_attach(pid, trace, args, &[]);
    wait_for_agent_state(pid, "recording");
    child
}

/// Waits (20 s at most) until `cuflight ps` lists process `pid` in `state` (dormant, recording, ...).
pub fn wait_for_agent_state(pid: u32, state: &str) {
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(20) {
        let out = std::process::Command::new(cuflight_bin()).args(["ps", "--format", "json"]).output().unwrap();
        let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        if rows.as_array().is_some_and(|r| r.iter().any(|r| r["pid"] == pid && r["state"] == state)) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("process {pid} never became {state}");
}

/// Ends an attach window as Ctrl-C would; the trace is written and attach succeeds. Returns its stderr.
pub fn end_attach_window(child: std::process::Child) -> String {
    assert!(std::process::Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    err
}

/// `cuflight launch -- program args` (a dormant agent) on cudasim, stdin and stdout piped, stderr dropped.
pub fn launch_dormant(program: &Path, args: &[&str]) -> std::process::Child {
    launch_dormant_with(&[], program, args)
}

/// As [`launch_dormant`], with `launch` flags (`--gpu-metrics`, ...).
pub fn launch_dormant_with(flags: &[&str], program: &Path, args: &[&str]) -> std::process::Child {
    Command::new(cuflight_bin())
        .arg("launch")
        .args(flags)
        .arg("--")
        .arg(program)
        .args(args)
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .env_remove("CUDASIM_CUPTI_VERSION")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("cuflight launch runs")
}

static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held for the whole of a test that measures time on this machine's cores (a scenario's planted shares, ranks'
/// clock skew): the tests of one test binary that take it run one at a time, not competing for the CPU. A test
/// that failed while holding it does not block the others.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}
