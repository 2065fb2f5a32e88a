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
