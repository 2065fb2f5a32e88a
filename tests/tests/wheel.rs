//! Installing as PyTorch users do: `pip wheel .` builds the wheel with the in-tree backend
//! (python/build_backend), a fresh venv installs it offline, and its `cuflight` records a cudasim program with
//! the agent it installed; its Python module captures a window from inside a program.
//!
//! The wheel is built from cargo's `dev` profile (CUFLIGHT_CARGO_PROFILE) to reuse this build: the packing is the
//! same for every profile, and `release` (the default) would compile everything again.

use cuflight_integration::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("runs");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `cmd` with none of the variables that would point cuflight at this build instead of the installed files.
fn clean(mut cmd: Command) -> Command {
    for var in ["CUFLIGHT_AGENT", "CUFLIGHT_BIN", "CUDA_INJECTION64_PATH", "NVTX_INJECTION64_PATH", "PYTHONPATH"] {
        cmd.env_remove(var);
    }
    cmd.env("LD_LIBRARY_PATH", cudasim_dir());
    cmd
}

fn stats_with(bin: &Path, trace: &Path) -> Value {
    let out = run(clean(Command::new(bin)).args(["stats", "--format", "json"]).arg(trace));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn kernels(s: &Value) -> u64 {
    s["kernels"].as_array().unwrap().iter().map(|k| k["count"].as_u64().unwrap()).sum()
}

#[test]
fn the_wheel_installs_into_a_fresh_venv_and_records() {
    let dir = scratch("wheel");
    let wheels = dir.join("wheels");
    run(Command::new("python3")
        .args(["-m", "pip", "wheel", "--no-deps", "--no-index", "-q", "-w"])
        .arg(&wheels)
        .arg(repo_root())
        .env("CUFLIGHT_CARGO_PROFILE", "dev"));
    let wheel = std::fs::read_dir(&wheels).unwrap().next().unwrap().unwrap().path();
    let file = wheel.file_name().unwrap().to_string_lossy().into_owned();
    // Tagged by the glibc its two ELF files need, for this machine's architecture.
    let arch = std::env::consts::ARCH;
    assert!(
        file.starts_with("cuflight-")
            && file.contains("-py3-none-manylinux_2_")
            && file.ends_with(&format!("_{arch}.whl")),
        "{file}"
    );

    let venv = dir.join("venv");
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    run(Command::new(venv.join("bin/pip")).args(["install", "-q", "--no-index", "--no-deps"]).arg(&wheel));
    let bin = venv.join("bin/cuflight");
    assert!(venv.join("lib/libcuflight.so").is_file(), "the agent goes to <env>/lib, where `cuflight` looks");

    // `cuflight record` from the venv, with the agent the wheel installed (nothing points at this build).
    let train = build_c("train", &dir);
    let trace = dir.join("train.cuf");
    run(clean(Command::new(&bin)).arg("record").arg("-o").arg(&trace).arg(&train).arg("3"));
    assert_eq!(kernels(&stats_with(&bin, &trace)), 3 * 19, "3 steps of 19 kernels");
    // Without a driver, the installed doctor points at what a wheel can do, not at a checkout's scripts.
    let doctor =
        Command::new(&bin).args(["doctor", "--format", "json"]).env_remove("LD_LIBRARY_PATH").output().unwrap();
    let d: Value = serde_json::from_slice(&doctor.stdout).unwrap_or_else(|e| panic!("{e}: {doctor:?}"));
    let driver = d["checks"].as_array().unwrap().iter().find(|c| c["check"] == "driver").unwrap();
    if driver["found"].as_str().unwrap().starts_with("no NVIDIA driver") {
        let fix = driver["fix"].as_str().unwrap();
        assert!(fix.contains("read traces recorded elsewhere") && !fix.contains("scripts/"), "{fix}");
    }

    // The Python module: a window of steps 3..=6 out of 10, from inside the program.
    let window = dir.join("window.cuf");
    let out = run(clean(Command::new(venv.join("bin/python")))
        .arg(repo_root().join("tests/py/in_program.py"))
        .arg(&window)
        .args(["10", "3", "6"]));
    let seen: Value = serde_json::from_slice(out.stdout.trim_ascii()).unwrap();
    assert_eq!(seen, serde_json::json!({"before": "dormant", "during": "recording", "after": "dormant"}));
    // A block that ends normally says so (not "interrupted").
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("the program ended the window") && !said.contains("interrupted"), "{said}");
    let s = stats_with(&bin, &window);
    assert_eq!(kernels(&s), 4 * 3, "steps 3..=6, three kernels each");
    // (All four: the window's first step, slowed by the agent starting, may be reported as warm-up otherwise.)
    let report = run(clean(Command::new(&bin)).args(["report", "--format", "json", "--include-warmup"]).arg(&window));
    let r: Value = serde_json::from_slice(&report.stdout).unwrap();
    let steps: Vec<&str> =
        r["processes"][0]["steps"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(steps, ["ProfilerStep#3", "ProfilerStep#4", "ProfilerStep#5", "ProfilerStep#6"]);
    // The steps are process ranges (start/end): nvtx_gpu_proj_sum projects each onto its memset, 3 kernels and
    // copy.
    let proj = run(clean(Command::new(&bin))
        .args(["stats", "--report", "nvtx_gpu_proj_sum", "--format", "json"])
        .arg(&window));
    let proj: Value = serde_json::from_slice(&proj.stdout).unwrap();
    let rows = proj["nvtx_gpu_proj"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{proj}");
    assert!(rows.iter().all(|r| r["instances"] == 1 && r["total_gpu_ops"] == 5), "{proj}");
    // Started by `cuflight launch` (the driver loads the agent; `capture` initialises CUDA to wake it) the same;
    // under `cuflight record` the whole run is recorded, every step, and `capture` adds no file.
    let launched = dir.join("launched.cuf");
    let out = run(clean(Command::new(&bin))
        .arg("launch")
        .arg(venv.join("bin/python"))
        .arg(repo_root().join("tests/py/in_program.py"))
        .arg(&launched)
        .args(["10", "3", "6"]));
    assert_eq!(serde_json::from_slice::<Value>(out.stdout.trim_ascii()).unwrap()["during"], "recording");
    assert_eq!(kernels(&stats_with(&bin, &launched)), 4 * 3);
    let whole = dir.join("whole.cuf");
    let unused = dir.join("unused.cuf");
    let out = run(clean(Command::new(&bin))
        .arg("record")
        .arg("-o")
        .arg(&whole)
        .arg(venv.join("bin/python"))
        .arg(repo_root().join("tests/py/in_program.py"))
        .arg(&unused)
        .args(["10", "3", "6"]));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already recorded"));
    assert!(!unused.exists());
    assert_eq!(kernels(&stats_with(&bin, &whole)), 10 * 3);
    // An existing file is not replaced unless asked.
    let again = clean(Command::new(venv.join("bin/python")))
        .arg(repo_root().join("tests/py/in_program.py"))
        .arg(&window)
        .args(["10", "3", "6"])
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists; pass overwrite=True"));
}

/// The wheels `scripts/wheels` built (`$CUFLIGHT_WHEELS`, default `target/wheels/dist`: scripts/test builds them
/// when CUFLIGHT_WHEELS_BUILD=1, as CI does), by architecture; None, said, where none were built.
fn built_wheel(arch: &str) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os("CUFLIGHT_WHEELS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/wheels/dist"));
    let found =
        std::fs::read_dir(&dir).into_iter().flatten().flatten().map(|e| e.path()).find(|p| {
            p.file_name().is_some_and(|n| n.to_string_lossy().ends_with(&format!("manylinux_2_28_{arch}.whl")))
        });
    if found.is_none() {
        skipped(&format!("no {arch} wheel in {} (scripts/wheels builds them; CI does)", dir.display()));
    }
    found
}

#[test]
fn the_wheels_need_glibc_2_28_and_only_libraries_every_manylinux_system_has() {
    for arch in ["x86_64", "aarch64"] {
        let Some(wheel) = built_wheel(arch) else { continue };
        let seen = python_json("wheel_check.py", &[wheel.as_os_str()]);
        assert_eq!(seen["tags"], serde_json::json!([format!("py3-none-manylinux_2_28_{arch}")]), "{seen}");
        let elf = seen["elf"].as_object().unwrap();
        assert_eq!(elf.len(), 2, "the binary and the agent: {seen}");
        for (file, f) in elf {
            assert_eq!(f["arch"], arch, "{file}: {f}");
            let (major, minor) = (f["glibc"][0].as_u64().unwrap(), f["glibc"][1].as_u64().unwrap());
            assert!((major, minor) <= (2, 28), "{file} needs glibc {major}.{minor}: {f}");
            // A symbol with no version is one the old glibc lacked when linked: `undefined symbol` there.
            assert_eq!(f["unversioned"], serde_json::json!([]), "{file}: {f}");
            assert_eq!(f["outside_policy"], serde_json::json!([]), "{file}: {f}");
        }
    }
}

#[test]
fn the_x86_64_wheel_installs_without_cargo_and_records_the_demo() {
    let Some(wheel) = built_wheel("x86_64") else { return };
    let dir = scratch("wheel-prebuilt");
    let venv = dir.join("venv");
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    // No Rust anywhere on PATH: the install must not build anything.
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", venv.join("bin").display());
    let no_cargo = Command::new("sh").args(["-c", "command -v cargo"]).env("PATH", &path).output().unwrap();
    assert!(!no_cargo.status.success(), "cargo is still on {path}");
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "-q", "--no-index", "--no-deps"])
        .arg(&wheel)
        .env("PATH", &path));
    let bin = venv.join("bin/cuflight");
    let train = build_c("train", &dir);
    let trace = dir.join("demo.cuf");
    run(clean(Command::new(&bin)).arg("record").arg("-o").arg(&trace).arg(&train).arg("3").env("PATH", &path));
    assert_eq!(kernels(&stats_with(&bin, &trace)), 3 * 19, "3 steps of 19 kernels");
}

/// The demo's program (tests/c/train.c) for `arch` with glibc 2.28 (scripts/zig-cc), linked against `cudasim`.
fn demo_for_glibc_2_28(arch: &str, cudasim: &Path, out: &Path) -> std::path::PathBuf {
    run(Command::new(repo_root().join("scripts/zig-cc"))
        .args([arch, "-O1", "-rdynamic", "-I"])
        .arg(cuda_include())
        .arg(repo_root().join("tests/c/train.c"))
        .arg("-L")
        .arg(cudasim)
        .args(["-lcudart", "-ldl", "-o"])
        .arg(out));
    out.to_path_buf()
}

/// The x86_64 wheel where the only C library is Debian 11's glibc 2.31 (Ubuntu 20.04's; RHEL 8's 2.28 no registry
/// here ships): installed without cargo, its collector, its agent and the wheels' cudasim record the demo, compiled
/// against glibc 2.28, and report it, in a root of that libc and libgcc_s alone (scripts/old-glibc-run). A binary
/// that needed a newer glibc would not start there.
#[test]
fn the_x86_64_wheel_records_the_demo_where_the_c_library_is_glibc_2_31() {
    let Some(wheel) = built_wheel("x86_64") else { return };
    let built = repo_root().join("target/wheels/x86_64-unknown-linux-gnu/release");
    if !built.join("cudasim/libcudart.so").exists() || !repo_root().join(".cache/wheel-tools/bin/python").is_file() {
        skipped("no x86_64 cudasim or zig in target/wheels (scripts/wheels builds them; CI does)");
        return;
    }
    let dir = scratch("wheel-glibc-2.31");
    let venv = dir.join("venv");
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    run(Command::new(venv.join("bin/pip")).args(["install", "-q", "--no-index", "--no-deps"]).arg(&wheel));
    let train = demo_for_glibc_2_28("x86_64", &built.join("cudasim"), &dir.join("train"));
    let old_glibc = |args: &[&std::ffi::OsStr]| -> Option<std::process::Output> {
        let mut cmd = Command::new(repo_root().join("scripts/old-glibc-run"));
        cmd.arg(&dir).arg(&built).arg("--").args(args).env("LD_LIBRARY_PATH", built.join("cudasim"));
        let out = cmd.output().expect("scripts/old-glibc-run runs");
        if out.status.code() == Some(77) {
            skipped(String::from_utf8_lossy(&out.stderr).trim());
            return None;
        }
        Some(out)
    };
    let Some(libc) = old_glibc(&["/lib/x86_64-linux-gnu/libc.so.6".as_ref()]) else { return };
    let version = String::from_utf8_lossy(&libc.stdout);
    assert!(version.contains("release version 2.31."), "{version}");
    // The control: the same program built by this machine's compiler needs its newer glibc, and does not start.
    let native = dir.join("native");
    std::fs::create_dir_all(&native).unwrap();
    let native = build_c("train", &native);
    let refused = old_glibc(&[native.as_os_str(), "1".as_ref()]).unwrap();
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && why.contains("GLIBC_2.3"), "{why}");
    let bin = venv.join("bin/cuflight");
    let trace = dir.join("demo.cuf");
    let args = ["record".as_ref(), "-o".as_ref(), trace.as_os_str(), "--".as_ref(), train.as_os_str(), "3".as_ref()];
    let rec = old_glibc(&[&[bin.as_os_str()][..], &args[..]].concat()).unwrap();
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    assert!(String::from_utf8_lossy(&rec.stderr).contains("nothing lost"), "{}", String::from_utf8_lossy(&rec.stderr));
    let stats =
        old_glibc(&[bin.as_os_str(), "stats".as_ref(), "--format".as_ref(), "json".as_ref(), trace.as_os_str()]);
    let stats = stats.unwrap();
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    let s: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(kernels(&s), 3 * 19, "3 steps of 19 kernels, recorded on glibc 2.31");
    let report = old_glibc(&[bin.as_os_str(), "report".as_ref(), trace.as_os_str()]).unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success() && text.contains("fp32_gemm"), "{text}");
}

/// The aarch64 build scripts/wheels made (`target/wheels/aarch64-unknown-linux-gnu/release`: cuflight, the agent,
/// cudasim and the capture tests), or None, said, where it is missing.
fn aarch64_build() -> Option<std::path::PathBuf> {
    let out = repo_root().join("target/wheels/aarch64-unknown-linux-gnu/release");
    let built = ["cuflight", "libcuflight.so", "cudasim/libcudart.so", "tests/capture"];
    if built.iter().any(|f| !out.join(f).exists()) || !repo_root().join(".cache/wheel-tools/bin/python").is_file() {
        skipped("no aarch64 build in target/wheels (scripts/wheels builds it; CI does)");
        return None;
    }
    Some(out)
}

/// `scripts/aarch64-run program args`: aarch64 programs, and every aarch64 program they start, run by qemu-user
/// through a binfmt_misc handler private to a user namespace; None, said, where this machine cannot (exit 77).
fn aarch64_run(program: &Path, args: &[&std::ffi::OsStr], env: &[(&str, &Path)]) -> Option<std::process::Output> {
    let mut cmd = Command::new(repo_root().join("scripts/aarch64-run"));
    cmd.arg(program).args(args).env_remove("CUFLIGHT_SKIP_LOG");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("scripts/aarch64-run runs");
    if out.status.code() == Some(77) {
        skipped(String::from_utf8_lossy(&out.stderr).trim());
        return None;
    }
    Some(out)
}

#[test]
fn the_aarch64_build_records_the_demo_under_qemu() {
    // The demo's program compiled for aarch64 by the wheels' zig, recorded by the aarch64 collector and agent on
    // cudasim for aarch64, every process of it emulated.
    let Some(out) = aarch64_build() else { return };
    let dir = scratch("wheel-aarch64");
    let train = demo_for_glibc_2_28("aarch64", &out.join("cudasim"), &dir.join("train-aarch64"));
    let env = [("LD_LIBRARY_PATH", out.join("cudasim")), ("CUFLIGHT_AGENT", out.join("libcuflight.so"))];
    let env: Vec<(&str, &Path)> = env.iter().map(|(k, v)| (*k, v.as_path())).collect();
    let cuflight = out.join("cuflight");
    let trace = dir.join("demo.cuf");
    let args = ["record".as_ref(), "-o".as_ref(), trace.as_os_str(), "--".as_ref(), train.as_os_str(), "3".as_ref()];
    let Some(rec) = aarch64_run(&cuflight, &args, &env) else { return };
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    let stats =
        aarch64_run(&cuflight, &["stats".as_ref(), "--format".as_ref(), "json".as_ref(), trace.as_os_str()], &env)
            .unwrap();
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    let s: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(kernels(&s), 3 * 19, "3 steps of 19 kernels, recorded on aarch64");
    let report = aarch64_run(&cuflight, &["report".as_ref(), trace.as_os_str()], &env).unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success() && text.contains("fp32_gemm"), "{text}");
    // The doctor's probe is an aarch64 child of its own, recorded on cudasim as a program is.
    let doctor = aarch64_run(&cuflight, &["doctor".as_ref(), "--format".as_ref(), "json".as_ref()], &env).unwrap();
    let d: Value = serde_json::from_slice(&doctor.stdout).unwrap_or_else(|e| panic!("{e}: {doctor:?}"));
    let check = |name: &str| d["checks"].as_array().unwrap().iter().find(|c| c["check"] == name).unwrap().clone();
    assert!(check("agent")["found"].as_str().unwrap().contains("(aarch64)"), "{d}");
    assert_eq!(check("recording")["result"], "ok", "{d}");
    assert!(check("driver")["found"].as_str().unwrap().contains("cudasim"), "{d}");
    assert!(doctor.status.success(), "{d}");
}

#[test]
fn the_aarch64_capture_tests_pass_under_qemu() {
    // tests/tests/capture.rs built for aarch64 by scripts/wheels: its C programs compiled for aarch64 by the same
    // zig (CUFLIGHT_TEST_CC), recorded through CUDA_INJECTION64_PATH and LD_PRELOAD, forks, execs, shells, SIGKILL.
    let Some(out) = aarch64_build() else { return };
    let cc = repo_root().join("scripts/aarch64-cc");
    let Some(run) = aarch64_run(&out.join("tests/capture"), &[], &[("CUFLIGHT_TEST_CC", &cc)]) else { return };
    let text = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{text}");
    let result = text.lines().find(|l| l.starts_with("test result:")).unwrap_or_default();
    let passed: u32 = result.split_once("ok. ").and_then(|(_, r)| r.split(' ').next()?.parse().ok()).unwrap_or(0);
    assert!(passed >= 16 && result.contains(" 0 failed"), "{result}\n{text}");
}

#[test]
fn the_aarch64_injection_tests_pass_in_an_emulated_arm64_machine() {
    // `attach --inject` on aarch64: ptrace of a running process, the interrupted thread's general and FP/SIMD
    // registers (d0 and d31 around a read), its own dlopen, other mount and network namespaces, SIGKILL at each
    // step. qemu-user cannot emulate one aarch64 process tracing another, so tests/tests/inject.rs built for
    // aarch64 runs in a whole emulated machine (scripts/aarch64-vm: a Debian arm64 kernel, SVE and pointer
    // authentication on), its C programs compiled beforehand by the wheels' zig.
    let Some(out) = aarch64_build() else { return };
    let inject = out.join("tests/inject");
    if !inject.exists() {
        skipped("no aarch64 injection tests in target/wheels (scripts/wheels builds them; CI does)");
        return;
    }
    let built = scratch("wheel-aarch64-vm");
    run(Command::new(repo_root().join("scripts/aarch64-cc"))
        .args(["-O1", "-g", "-rdynamic", "-pthread", "-Wall", "-Werror", "-Wno-unused-function", "-I"])
        .arg(cuda_include())
        .arg(repo_root().join("tests/c/server.c"))
        .arg("-L")
        .arg(out.join("cudasim"))
        .args(["-lcudart", "-ldl", "-o"])
        .arg(built.join("server")));
    let mut vm = Command::new(repo_root().join("scripts/aarch64-vm"));
    for file in ["cuflight", "libcuflight.so", "libcudasim.so", "cudasim", "tests/inject"] {
        vm.arg("--copy").arg(out.join(file));
    }
    vm.arg("--copy").arg(&built).arg("--env").arg(format!("CUFLIGHT_TEST_C_BUILT={}", built.display()));
    // One test at a time: each starts servers and windows, and the machine's two cores are emulated.
    let ran = vm.arg("--").arg(&inject).arg("--test-threads=1").output().expect("scripts/aarch64-vm runs");
    let text = format!("{}{}", String::from_utf8_lossy(&ran.stdout), String::from_utf8_lossy(&ran.stderr));
    if ran.status.code() == Some(77) {
        skipped(String::from_utf8_lossy(&ran.stderr).trim());
        return;
    }
    assert!(ran.status.success(), "{text}");
    let result = text.lines().find(|l| l.starts_with("test result:")).unwrap_or_default();
    let passed: u32 = result.split_once("ok. ").and_then(|(_, r)| r.split(' ').next()?.parse().ok()).unwrap_or(0);
    assert!(passed >= 11 && result.contains(" 0 failed"), "{result}\n{text}");
    // Only what the machine lacks on purpose is skipped: another user (no setpriv) and Python.
    let skips: Vec<&str> = text.lines().filter(|l| l.starts_with("skipped: ")).collect();
    assert!(skips.len() <= 2 && skips.iter().all(|s| s.contains("setpriv") || s.contains("python3")), "{skips:?}");
}
