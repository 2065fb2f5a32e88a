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

#[test]
fn the_aarch64_build_records_the_demo_under_qemu() {
    // The aarch64 binaries scripts/wheels built (with cudasim for aarch64), run by qemu-user with Debian's aarch64
    // C library; the program is the demo's, compiled for aarch64 by the same zig.
    let out = repo_root().join("target/wheels/aarch64-unknown-linux-gnu/release");
    let sysroot = Path::new("/usr/aarch64-linux-gnu");
    let zig = repo_root().join(".cache/wheel-tools/bin/python");
    let qemu = Command::new("qemu-aarch64").arg("--version").output().is_ok_and(|o| o.status.success());
    if !out.join("cuflight").is_file() || !out.join("cudasim/libcudart.so").exists() || !zig.is_file() {
        skipped("no aarch64 build in target/wheels (scripts/wheels builds it; CI does)");
        return;
    }
    if !qemu || !sysroot.join("lib/ld-linux-aarch64.so.1").exists() {
        skipped("needs qemu-aarch64 and Debian's aarch64 C library (apt install qemu-user libc6-arm64-cross)");
        return;
    }
    let dir = scratch("wheel-aarch64");
    let train = dir.join("train-aarch64");
    run(Command::new(&zig)
        // cudasim leaves std's weak gettid undefined, which zig's linker refuses in a library an executable links
        // unless told (the dynamic linker resolves it, as it does for any weak symbol).
        .args(["-m", "ziglang", "cc", "-target", "aarch64-linux-gnu.2.28", "-O1", "-rdynamic"])
        .args(["-Wl,--allow-shlib-undefined", "-I"])
        .arg(cuda_include())
        .arg(repo_root().join("tests/c/train.c"))
        .arg("-L")
        .arg(out.join("cudasim"))
        .args(["-lcudart", "-ldl", "-o"])
        .arg(&train));
    let qemu_run = |args: &[&std::ffi::OsStr]| -> std::process::Output {
        let mut cmd = Command::new("qemu-aarch64");
        cmd.arg("-L").arg(sysroot).args(args);
        cmd.env("LD_LIBRARY_PATH", out.join("cudasim")).env("CUFLIGHT_AGENT", out.join("libcuflight.so"));
        cmd.output().expect("qemu-aarch64 runs")
    };
    // The collector under qemu runs the program under qemu too (an aarch64 child needs its own emulator).
    let trace = dir.join("demo.cuf");
    let rec = qemu_run(&[
        out.join("cuflight").as_os_str(),
        "record".as_ref(),
        "-o".as_ref(),
        trace.as_os_str(),
        "--".as_ref(),
        "qemu-aarch64".as_ref(),
        "-L".as_ref(),
        sysroot.as_os_str(),
        train.as_os_str(),
        "3".as_ref(),
    ]);
    assert!(rec.status.success(), "{}", String::from_utf8_lossy(&rec.stderr));
    let stats = qemu_run(&[
        out.join("cuflight").as_os_str(),
        "stats".as_ref(),
        "--format".as_ref(),
        "json".as_ref(),
        trace.as_os_str(),
    ]);
    assert!(stats.status.success(), "{}", String::from_utf8_lossy(&stats.stderr));
    let s: Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(kernels(&s), 3 * 19, "3 steps of 19 kernels, recorded on aarch64");
    let report = qemu_run(&[out.join("cuflight").as_os_str(), "report".as_ref(), trace.as_os_str()]);
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success() && text.contains("fp32_gemm"), "{text}");
    let doctor = qemu_run(&[out.join("cuflight").as_os_str(), "doctor".as_ref()]);
    let text = String::from_utf8_lossy(&doctor.stdout);
    assert!(text.contains("agent") && text.contains("(aarch64)"), "{text}");
}
