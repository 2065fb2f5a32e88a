//! `cuflight report` finds planted bottlenecks: each cudasim scenario (tests/c/scenario.c; cudasim is a test
//! double standing in for the GPU) plants one, which must come out as the top finding with a share of step time
//! within a few percent of what was planted; the clean scenario has no finding above 5%.

use cuflight_integration::*;
use serde_json::Value;
use std::process::Command;

/// Records `scenario MODE 24` and returns its report and trace.
fn scenario(mode: &str) -> (Value, std::path::PathBuf) {
    scenario_steps(mode, "24")
}

fn scenario_steps(mode: &str, steps: &str) -> (Value, std::path::PathBuf) {
    let (r, trace, _) = scenario_run(mode, steps, mode);
    (r, trace)
}

fn scenario_in(mode: &str, test: &str) -> (Value, std::path::PathBuf, f64) {
    scenario_run(mode, "24", test)
}

/// The host or kernel time the programs actually planted (each prints `planted_ns=N` at exit), summed.
fn planted_ns(stdout: &[u8]) -> f64 {
    let text = String::from_utf8_lossy(stdout);
    let values: Vec<f64> =
        text.lines().filter_map(|l| l.strip_prefix("planted_ns=")).map(|v| v.parse().unwrap()).collect();
    assert!(!values.is_empty(), "no planted_ns in {text}");
    values.iter().sum()
}

fn scenario_run(mode: &str, steps: &str, test: &str) -> (Value, std::path::PathBuf, f64) {
    let dir = scratch(&format!("diagnosis-{test}"));
    let prog = build_c("scenario", &dir);
    let rec = record(&dir, &[], &prog, &[mode, steps], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let planted = planted_ns(&rec.output.stdout);
    (report_json(&rec.trace), rec.trace, planted)
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Mean step duration (ns) and the idle share of step time (neither kernels, copies nor memsets running).
fn step_facts(r: &Value) -> (f64, f64) {
    let t = &r["processes"][0]["step_total"];
    let d = f64_of(&t["duration_ns"]);
    let busy = f64_of(&t["kernel_ns"]) + f64_of(&t["memcpy_ns"]) + f64_of(&t["memset_ns"]);
    let n = r["processes"][0]["steps"].as_array().unwrap().len() as f64;
    (d / n, 1.0 - busy / d)
}

fn top(r: &Value) -> &Value {
    &r["findings"][0]
}

fn assert_near(what: &str, got: f64, want: f64, tol: f64, r: &Value) {
    assert!((got - want).abs() <= tol, "{what}: {got:.3} vs planted {want:.3} (±{tol})\n{}", r["findings"]);
}

/// Runs a check of planted timing again, once, when it fails: a run in which this 2-core machine descheduled
/// cudasim's simulated GPU for milliseconds (a 1 MiB copy taking 13 ms, seen twice in one session's full runs)
/// moves a share by a few points. A second failure fails the test; the first one's message is printed above it.
fn once_more_on_a_hiccup(check: impl Fn()) {
    if let Err(first) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(&check)) {
        let why = first.downcast_ref::<String>().map(String::as_str).or(first.downcast_ref::<&str>().copied());
        eprintln!("first run failed, running once more: {}", why.unwrap_or("(no message)"));
        check();
    }
}

#[test]
fn clean_loop_has_no_finding_above_five_percent() {
    // Scenarios measure time: each holds `serial()` for its whole run, so they do not compete for the CPU.
    let _serial = serial();
    once_more_on_a_hiccup(|| {
        // More steps than the other scenarios: a single scheduling hiccup of this shared machine (a few ms) must not
        // weigh 5% of the run.
        let (r, _) = scenario_steps("clean", "30");
        for f in r["findings"].as_array().unwrap() {
            assert!(f64_of(&f["share"]) <= 0.05, "clean scenario: {f}");
        }
        assert!(r["verdict"].as_str().unwrap().starts_with("No "), "{}", r["verdict"]);
        let p = &r["processes"][0];
        assert_eq!(p["step_source"], "profiler_step");
        // A first step that a hiccup of this shared machine slowed is warm-up, reported apart.
        let steps = p["steps"].as_array().unwrap().len() as u64;
        assert_eq!(steps + p["warmup"]["steps"].as_u64().unwrap(), 30, "{}", p["warmup"]);
        // Hot kernels stay in the process's section with launch configuration and an occupancy estimate (H100).
        let k = &p["top_kernels"][0];
        assert_eq!(k["name"], "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_nn");
        assert_eq!((k["count"].as_u64(), k["block"][0].as_u64()), (Some(4 * steps), Some(256)));
        assert!(k["occupancy"].as_f64().is_some());
    });
}

#[test]
fn data_loading_stall_is_found() {
    let _serial = serial();
    once_more_on_a_hiccup(|| {
        let (r, _, planted) = scenario_in("dataload", "dataload");
        let f = top(&r);
        assert_eq!(f["kind"], "data_loading", "{}", r["findings"]);
        let (step, idle) = step_facts(&r);
        assert_near("share vs idle in steps", f64_of(&f["share"]), idle, 0.05, &r);
        // 12 ms of host preparation per step (as measured by the program) against the step's GPU work.
        let p = &r["processes"][0];
        let steps = p["steps"].as_array().unwrap().len() as f64 + p["warmup"]["steps"].as_f64().unwrap();
        let gpu = (1.0 - idle) * step;
        assert_near("share vs planted", f64_of(&f["share"]), (planted / steps - gpu) / step, 0.05, &r);
        assert!(f["fix"].as_str().unwrap().contains("num_workers"));
        // The typical step's critical path: the host's 12 ms, then the GEMMs it launched (4 x 1 ms).
        let path = &p["critical_path"];
        assert_eq!(path["path_ns"], path["step_ns"], "{path}");
        let share = |what: &str| {
            path["by_kind"].as_array().unwrap().iter().find(|g| g["what"] == what).map_or(0.0, |g| f64_of(&g["share"]))
        };
        assert!(share("host work") > 0.5 && share("gemm kernels") > 0.2, "{path}");
    });
}

#[test]
fn item_sync_every_step_is_found() {
    let _serial = serial();
    once_more_on_a_hiccup(|| {
        let (r, _, planted) = scenario_in("item", "item");
        let f = top(&r);
        assert_eq!(f["kind"], "sync_stall", "{}", r["findings"]);
        // The 3 ms of host work per step that the sync leaves exposed, as the program measured it.
        let total = f64_of(&r["processes"][0]["step_total"]["duration_ns"]);
        assert_near("share", f64_of(&f["share"]), planted / total, 0.04, &r);
        assert_eq!(f["evidence"]["api_calls"][0]["name"], "cudaMemcpy");
        let steps = r["processes"][0]["steps"].as_array().unwrap().len();
        assert_eq!(f["evidence"]["api_calls"][0]["count"], steps, "one per steady step");
        // The typical step's critical path: the 3 ms of host work, then the GEMMs the copy waited behind (its call
        // blocked the host meanwhile, which is not host work).
        let path = &r["processes"][0]["critical_path"];
        let share = |what: &str| {
            path["by_kind"].as_array().unwrap().iter().find(|g| g["what"] == what).map_or(0.0, |g| f64_of(&g["share"]))
        };
        assert!(share("gemm kernels") > 0.4 && share("host work") < 0.5, "{path}");
    });
}

#[test]
fn pageable_copies_are_found() {
    let _serial = serial();
    once_more_on_a_hiccup(|| {
        let (r, _) = scenario("pageable");
        let f = top(&r);
        assert_eq!(f["kind"], "pageable_memcpy", "{}", r["findings"]);
        let (step, _) = step_facts(&r);
        let t = &r["processes"][0]["step_total"];
        let copy_share = f64_of(&t["memcpy_ns"]) / f64_of(&t["duration_ns"]);
        assert_near("share vs copy time", f64_of(&f["share"]), copy_share, 0.03, &r);
        // 32 MiB per step at the simulated 8 GB/s for pageable memory: at least that long.
        assert!(f64_of(&f["share"]) >= (32.0 * 1048576.0 / 8.0) / step - 0.03, "{f}");
    });
}

#[test]
fn thousand_tiny_kernels_are_launch_bound_and_steps_come_from_the_pattern() {
    let _serial = serial();
    // 72 steps of about 12 ms: a CI machine that deschedules the launching thread for 20 ms once (seen: it
    // lands in cpu_bound, as a host that runs something else between launches does) weighs 2% of the run, not 7%.
    let (r, _) = scenario_steps("tiny", "72");
    let f = top(&r);
    assert_eq!(f["kind"], "launch_bound", "{}", r["findings"]);
    assert_eq!(r["processes"][0]["step_source"], "pattern");
    let steps = r["processes"][0]["steps"].as_array().unwrap().len();
    let warmup = r["processes"][0]["warmup"]["steps"].as_u64().unwrap() as usize;
    assert!((71..=72).contains(&(steps + warmup)), "{steps} pattern steps after {warmup} of warm-up");
    // 2 µs kernels launched back to back: nearly all idle time is launch overhead. What a loaded machine adds
    // lands elsewhere, as it should: the launching thread descheduled after the per-step sync (sync_stall) or
    // between launches (cpu_bound), and the simulated GPU thread descheduled with work queued (device_wait). On
    // the 2-core CI machine this scenario keeps both cores busy, so those can reach a third of the idle time.
    let causes = &r["processes"][0]["idle_causes"];
    let idle_ns = f64_of(&causes["idle_in_steps_ns"]);
    let launch_ns = f64_of(&causes["launch_bound_ns"]);
    // The simulated GPU's own lateness is no launch's: once (a local run, 2026-11-29, nothing else running here)
    // the host left cudasim's stream thread waiting for a core with work queued for 622 of 974 ms idle.
    let device_late_ns = f64_of(&causes["device_wait_ns"]);
    assert!(launch_ns >= 0.6 * (idle_ns - device_late_ns), "launch-bound {launch_ns} of {idle_ns} idle: {causes}");
    let misplaced = f64_of(&causes["data_loading_ns"]) + f64_of(&causes["allocator_churn_ns"]);
    assert!(misplaced <= 0.03 * idle_ns, "no data loading or allocator planted: {causes}");
    let total = f64_of(&r["processes"][0]["step_total"]["duration_ns"]);
    assert_near("share vs launch-bound idle", f64_of(&f["share"]), launch_ns / total, 0.01, &r);
    assert!(f64_of(&f["evidence"]["metrics"]["kernels_per_step"]) > 990.0);
    // A thousand launches a step: what CUPTI's tracing may have added to them is said, about 1 ms a step.
    let facts = f["evidence"]["facts"].to_string();
    assert!(facts.contains("CUPTI's tracing lengthens each launch call by about 1.0 µs"), "{facts}");
    assert!(facts.contains("launches a step, up to 1.0") || facts.contains("launches a step, up to 0.99"), "{facts}");
}

#[test]
fn fp32_gemms_are_found() {
    let _serial = serial();
    let (r, trace) = scenario("fp32");
    let f = top(&r);
    assert_eq!(f["kind"], "fp32_gemm", "{}", r["findings"]);
    let (step, _) = step_facts(&r);
    // 4 x 2 ms of sgemm per step; the cost assumes Tensor Cores would run them 4x faster. The kernels' time
    // comes from `stats` (an independent path), as sleeping kernels overshoot on a loaded machine.
    let sgemm_ns = f64_of(&row(&stats(&trace), "kernels", "name", "ampere_sgemm_128x64_nn")["total_ns"]);
    let steps = r["processes"][0]["steps"].as_array().unwrap().len() as f64;
    assert_near("share vs sgemm time", f64_of(&f["share"]), 0.75 * sgemm_ns / (step * steps), 0.02, &r);
    assert!(f64_of(&f["share"]) >= 0.75 * 8e6 / step - 0.05, "at least the planted 4 x 2 ms per step: {f}");
    assert_eq!(f["evidence"]["kernels"][0]["name"], "ampere_sgemm_128x64_nn");
}

#[test]
fn a_leak_is_found_with_its_growth_per_step() {
    let _serial = serial();
    let (r, _) = scenario("leak");
    let f = top(&r);
    assert_eq!(f["kind"], "memory_growth", "{}", r["findings"]);
    assert_eq!(f64_of(&f["evidence"]["metrics"]["growth_per_step_bytes"]), 16.0 * 1048576.0);
    assert!(f64_of(&f["evidence"]["metrics"]["steps_to_out_of_memory"]) > 1000.0);
}

/// Three warm-up steps (host set-up, autotuning kernels, allocator growth) are reported apart, and the verdict is
/// the steady loop's (clean); `--include-warmup` brings them back, and their host time then leads.
#[test]
fn warmup_steps_are_reported_apart() {
    let _serial = serial();
    let (r, trace) = scenario("warmup");
    let p = &r["processes"][0];
    let w = &p["warmup"];
    // Three planted; a loaded machine may slow the next one enough to look like warm-up too.
    let warm = w["steps"].as_u64().unwrap();
    assert!((3..=4).contains(&warm), "{w}");
    assert!(w["compiled"].is_null(), "no Inductor kernel ran: no compile is named: {w}");
    assert_eq!(w["included"], false);
    let detail = w["detail"].as_array().unwrap();
    assert_eq!(detail[0]["name"], "ProfilerStep#0");
    assert_eq!(detail[0]["kernels_only_here"], 1, "{w}");
    assert_eq!(w["kernels_only_in_warmup"][0], "cutlass_autotune_candidate_kernel");
    assert!(detail.iter().take(3).all(|d| d["alloc_calls"] == 1), "{w}");
    let ns = f64_of(&w["ns"]);
    assert!(ns >= 30e6 + 8e6 + 10e6, "{w}");
    assert_eq!(p["steps"].as_array().unwrap().len() as u64, 24 - warm);
    assert_eq!(p["steps"][0]["name"], format!("ProfilerStep#{warm}"));
    assert!(r["verdict"].as_str().unwrap().starts_with("No "), "{}", r["verdict"]);
    let all = report_json_with(&trace, &["--include-warmup"]);
    let p = &all["processes"][0];
    assert_eq!((p["warmup"]["steps"].as_u64(), p["warmup"]["included"].as_bool()), (Some(warm), Some(true)));
    assert_eq!(p["steps"].as_array().unwrap().len(), 24);
    assert!(f64_of(&top(&all)["share"]) > 0.05, "{}", all["findings"]);
    let text = Command::new(cuflight_bin()).arg("report").arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("Warm-up: 3 steps") || text.contains("Warm-up: 4 steps"), "{text}");
}

#[test]
fn a_slow_rank_is_found_as_the_straggler() {
    let _serial = serial();
    let dir = scratch("diagnosis-rank");
    let prog = build_c("scenario", &dir);
    let barrier = dir.join("barrier");
    let p = prog.display();
    let b = barrier.display();
    // RANK, LOCAL_RANK and WORLD_SIZE as torchrun sets them: the agent records them, so the report names ranks
    // as the job does; CUDASIM_HOST names the host the agent records.
    let env = |r: u32| format!("RANK={r} LOCAL_RANK={r} WORLD_SIZE=2 CUDASIM_HOST=node{r}");
    let script = format!("{} {p} rank 24 0 2 {b} & {} {p} rank 24 1 2 {b}; wait", env(0), env(1));
    let rec = record(&dir, &[], std::path::Path::new("/bin/sh"), &["-c", &script], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let r = report_json(&rec.trace);
    let f = top(&r);
    assert_eq!(f["kind"], "straggler", "{}", r["findings"]);
    let procs = r["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2);
    let slow = procs.iter().find(|p| p["command"].as_str().unwrap().contains("rank 24 1")).unwrap();
    let fast = procs.iter().find(|p| p["command"].as_str().unwrap().contains("rank 24 0")).unwrap();
    assert_eq!(f["pid"], slow["pid"]);
    assert_eq!((slow["rank"].as_u64(), fast["rank"].as_u64(), f["rank"].as_u64()), (Some(1), Some(0), Some(1)));
    assert_eq!(slow["who"].as_str().unwrap(), format!("rank 1 (local 1) pid {}", slow["pid"]));
    assert_eq!(slow["run"]["host"], "node1");
    let s = stats(&rec.trace);
    let rows = s["processes"].as_array().unwrap();
    assert!(rows
        .iter()
        .any(|p| p["rank"] == 1 && p["local_rank"] == 1 && p["world_size"] == 2 && p["host"] == "node1"));
    // Rank 1's extra 3 ms kernel per step (as it measured it) is what rank 0 waits for in each collective. Two
    // ranks with two threads each share this machine's cores, so rank 1 is sometimes descheduled too: that
    // only adds waiting (the share has a floor), and the median wait per collective stays at the plant.
    let planted = planted_ns(&rec.output.stdout);
    let share = f64_of(&f["share"]);
    assert!(share >= planted / f64_of(&fast["step_total"]["duration_ns"]) - 0.05, "share {share}: {f}");
    assert_near(
        "median wait (ms)",
        f64_of(&f["evidence"]["metrics"]["median_wait_ns"]) / 1e6,
        planted / 24.0 / 1e6,
        0.6,
        &r,
    );
}

#[test]
fn html_report_renders_in_headless_chromium() {
    let _serial = serial();
    let (_, trace, _) = scenario_in("item", "html");
    let dir = trace.parent().unwrap();
    let html = dir.join("report.html");
    let out = Command::new(cuflight_bin())
        .args(["report", "--format", "html", "-o"])
        .arg(&html)
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(!page.contains("http://") && !page.contains("https://") && !page.contains("<script"), "self-contained");
    assert!(page.contains("<svg") && page.contains("sync_stall"));
    // What a shared report needs: the run (GPU, CUDA versions, drops), axes with units on every chart, step
    // labels and boundaries, idle time by cause, evidence with times on the Perfetto timeline, full kernel names.
    for needed in [
        "<td>GPU</td><td>0: NVIDIA H100",
        "<td>CUDA</td><td>driver ",
        "<td>Recording</td><td>nothing lost</td>",
        "time per step (ms)",
        ">step</text>",
        "kernel busy (%)",
        "time from the start of the timeline (ms)",
        "class=step>",
        "Idle time inside steps by cause",
        "Idle time per stream",
        "worst steps: ",
        "example: ",
        " at +0.",
    ] {
        assert!(page.contains(needed), "the HTML report lacks {needed:?}");
    }
    let report: serde_json::Value = serde_json::from_slice(
        &Command::new(cuflight_bin()).args(["report", "--format", "json"]).arg(&trace).output().unwrap().stdout,
    )
    .unwrap();
    for k in report["processes"][0]["top_kernels"].as_array().unwrap() {
        let name = k["name"].as_str().unwrap().replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        assert!(page.contains(&format!("<td class=name>{name}</td>")), "kernel name not shown in full: {name}");
    }
    let browser = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()));
    let browser = browser.expect("chromium is installed by scripts/setup");
    let png = dir.join("report.png");
    let shot = Command::new(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1000,1400"])
        // Its profile in the test's directory, not ~/.cache/chromium-headless; nothing fetched from the network;
        // GLib's settings cache (~/.cache/dconf) and anything else it keeps under the user's home in there too.
        .arg(format!("--user-data-dir={}", dir.join("chromium-profile").display()))
        .env("HOME", dir.join("chromium-home"))
        .env("XDG_CACHE_HOME", dir.join("chromium-home/.cache"))
        .env("XDG_CONFIG_HOME", dir.join("chromium-home/.config"))
        .args(["--disable-background-networking", "--disable-component-update", "--no-first-run", "--disable-sync"])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(shot.status.success() && png.exists(), "chromium: {}", String::from_utf8_lossy(&shot.stderr));
    let stats = python_json("png_colors.py", &[png.as_os_str()]);
    assert_eq!((stats["width"].as_u64(), stats["height"].as_u64()), (Some(1000), Some(1400)));
    // Text, severity colours, the step bars and the utilisation plot: far more than a blank page's few colours.
    assert!(stats["colors"].as_u64().unwrap() > 50, "{stats}");
    assert!(f64_of(&stats["non_white"]) > 0.05, "{stats}");
}

/// `cuflight diff` of a run with a planted bottleneck against the run without it names the finding resolved and
/// the step time saved; a capture against its own Kineto export (another format, the same run) shows no change.
#[test]
fn diff_names_the_bottleneck_a_change_resolved() {
    let _serial = serial();
    let (_, before) = scenario_steps("item", "16");
    let (_, after) = scenario_steps("clean", "16");
    let out = Command::new(cuflight_bin()).args(["diff", "--format", "json"]).args([&before, &after]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = d["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert!(f64_of(&r["step_ns"]) > 0.0 && f64_of(&r["gpu_util"]) > 0.0 && f64_of(&r["kernels"]) >= 6.0, "{r}");
    }
    // The 3 ms of exposed host work per step are gone.
    let saved = f64_of(&runs[0]["step_ns"]) - f64_of(&runs[1]["step_ns"]);
    assert!(saved > 2e6, "{}", d["runs"]);
    let sync = d["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "sync_stall").expect("sync_stall row");
    // The clean loop still syncs once a step, and the GPU idles the launch latency after each: about 1% of its
    // steps, so found or not from run to run (reduced or resolved), and at a sixth of the share before at most.
    let (was, now) = (f64_of(&sync["share"][0]), sync["share"][1].as_f64().unwrap_or(0.0));
    assert!(was > 0.15 && now < was / 6.0, "{}", d["findings"]);
    let change = sync["change"][0].as_str().unwrap();
    assert!(change == "reduced" || change == "resolved", "{}", d["findings"]);
    let summary = d["summary"][0].as_str().unwrap();
    assert!(summary.contains(&format!("{change}: sync_stall")), "{}", d["summary"]);
    assert!(d["categories"].as_array().unwrap().iter().any(|c| c["category"] == "gemm"));
    // The same kernels ran in both: none gained or lost.
    for k in d["kernels"].as_array().unwrap() {
        assert!(k["change"][0] != "gained" && k["change"][0] != "lost", "{k}");
    }
    // The same run in two formats: the native capture and its Kineto JSON export.
    let json = before.with_extension("json");
    let exported = Command::new(cuflight_bin()).arg("export").arg(&before).arg("-o").arg(&json).arg("--force").output();
    assert!(exported.unwrap().status.success());
    let out = Command::new(cuflight_bin()).args(["diff", "--format", "json"]).args([&before, &json]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let d: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (a, b) = (f64_of(&d["runs"][0]["step_ns"]), f64_of(&d["runs"][1]["step_ns"]));
    assert!((a - b).abs() <= a * 0.02, "{}", d["runs"]);
    for k in d["kernels"].as_array().unwrap() {
        assert_eq!(k["change"][0], "same", "{k}");
    }
    for f in d["findings"].as_array().unwrap() {
        assert!(f["change"][0] == "persists" || f["change"][0] == "absent", "{f}");
    }
    let text = Command::new(cuflight_bin()).arg("diff").args([&before, &after]).output().unwrap();
    assert!(String::from_utf8_lossy(&text.stdout).contains(change), "{}", String::from_utf8_lossy(&text.stdout));
    let html = before.with_extension("html");
    let out = Command::new(cuflight_bin())
        .args(["diff", "--format", "html", "--force", "-o"])
        .arg(&html)
        .args([&before, &after])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<h1>cuflight diff</h1>") && page.contains("class=resolved>resolved"), "{page}");
    // Its output may not replace an input.
    let out = Command::new(cuflight_bin()).args(["diff", "-o"]).arg(&before).args([&before, &after]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(before.exists());
}

/// Idle time with work queued on a stream that waits for another stream's event is a cross-stream wait, behind a
/// host function in its stream a host function wait, and idle time while the host polls an event is host
/// polling: each the top finding at the planted share, and nothing of either left unexplained.
#[test]
fn cross_stream_waits_and_polling_loops_are_named() {
    let _serial = serial();
    for (mode, kind, cause) in [
        ("crossstream", "cross_stream_wait", "cross_stream_wait_ns"),
        ("hostfn", "host_function_wait", "host_function_wait_ns"),
        ("poll", "host_polling", "host_polling_ns"),
    ] {
        // A run in which this 2-core machine descheduled cudasim's GPU threads for milliseconds (seen once in a
        // clean-clone rehearsal: the planted wait's kernel "waiting for its launch" 3 ms) is run again, once; a
        // second failure fails the test with both reasons.
        if let Err(first) = planted_wait_is_named(mode, kind, cause) {
            if let Err(second) = planted_wait_is_named(mode, kind, cause) {
                panic!("{mode}, twice:\n{first}\n{second}");
            }
            eprintln!("{mode}: passed on the second run; the first: {first}");
        }
    }
}

fn planted_wait_is_named(mode: &str, kind: &str, cause: &str) -> Result<(), String> {
    let check = |ok: bool, what: String| if ok { Ok(()) } else { Err(what) };
    let (r, _, planted) = scenario_in(mode, mode);
    let f = top(&r);
    check(f["kind"] == kind, format!("{mode}: top finding {} not {kind}: {}", f["kind"], r["findings"]))?;
    let p = &r["processes"][0];
    // The planted 3 ms per step, over the steady steps only (warm-up, if any, is left out).
    let steps = p["steps"].as_array().unwrap().len() as f64;
    let total = f64_of(&p["step_total"]["duration_ns"]);
    let planted_in_steps = planted / (steps + p["warmup"]["steps"].as_f64().unwrap()) * steps;
    let (got, want) = (f64_of(&f["share"]), planted_in_steps / total);
    check((got - want).abs() <= 0.05, format!("{mode}: share {got:.3} vs planted {want:.3} (±0.05)"))?;
    let causes = &p["idle_causes"];
    check(f64_of(&causes[cause]) >= 0.8 * planted_in_steps, format!("{mode}: {causes} vs {planted_in_steps}"))?;
    // What stays unexplained is cudasim's GPU threads descheduled with work queued (a loaded 2-core CI
    // machine: up to about 8% seen), never the planted wait.
    let idle = f64_of(&p["idle_in_steps_ns"]);
    check(f64_of(&p["idle_unexplained_ns"]) <= 0.15 * idle, format!("{mode}: unexplained, {causes}"))?;
    // On the typical step's critical path, the wait is a link of its own beside the GEMMs.
    let path = &p["critical_path"];
    let on_path = |what: &str| {
        let g = path["by_kind"].as_array().unwrap().iter().find(|g| g["what"] == what);
        g.map_or(0.0, |g| f64_of(&g["share"]))
    };
    let link = match mode {
        "crossstream" => "waits between streams",
        "hostfn" => "host functions in streams",
        _ => "host polling",
    };
    check(on_path(link) > 0.15 && on_path("gemm kernels") > 0.4, format!("{mode}: {path}"))
}

/// `cudaHostAlloc` is an allocation everywhere (the one classifier of CUDA calls, `cuflight_format::calls`): the
/// report once filed it as a launch, so a pinned staging buffer allocated in every step was no allocator churn.
/// Now the report's churn names it, stats count its pinned memory, and the timeline marks each allocation.
#[test]
fn a_pinned_allocation_inside_a_step_is_an_allocation_in_report_stats_and_timeline() {
    let _serial = serial();
    let (r, trace) = scenario_steps("hostalloc", "12");
    let churn = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "allocator_churn");
    let churn = churn.unwrap_or_else(|| panic!("no allocator_churn: {}", r["findings"]));
    let calls = churn["evidence"]["api_calls"].as_array().unwrap();
    let count = |name: &str| calls.iter().find(|c| c["name"] == name).and_then(|c| c["count"].as_u64());
    assert!(churn["summary"].as_str().unwrap().starts_with("cudaHostAlloc/cudaFreeHost inside steps"), "{churn}");
    assert!(churn["fix"].as_str().unwrap().contains("pinned staging buffers once"), "{churn}");
    // Every steady-state step (the first is warm-up or the window's first) allocates once and frees once.
    let steady = r["processes"][0]["steps"].as_array().unwrap().len() as u64 - 1;
    assert!(count("cudaHostAlloc").is_some_and(|n| n >= steady), "{churn}");
    assert_eq!(count("cudaHostAlloc"), count("cudaFreeHost"), "{churn}");
    // What it counts, it costs and shows: steady-state steps only (the first step's idle is not blamed on churn).
    let first = r["processes"][0]["steps"][0]["name"].clone();
    let worst = churn["evidence"]["steps"].as_array().unwrap();
    assert!(!worst.is_empty() && worst.iter().all(|s| s["name"] != first), "{first}: {churn}");
    let steady_idle: u64 = worst.iter().map(|s| s["lost_ns"].as_u64().unwrap()).sum();
    assert!(churn["time_lost_ns"].as_u64().unwrap() >= steady_idle, "{churn}");

    let out = Command::new(cuflight_bin()).args(["stats", "--format", "json"]).arg(&trace).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats: Value = serde_json::from_slice(&out.stdout).unwrap();
    let pinned = &stats["memory"]["pinned_host"];
    // The batch buffer (cudaMallocHost) and the 12 staging buffers.
    assert_eq!(pinned["malloc_count"].as_u64(), Some(13), "{pinned}");

    let dir = trace.parent().unwrap();
    let json = dir.join("timeline.json");
    let out = Command::new(cuflight_bin()).arg("export").arg(&trace).arg("-o").arg(&json).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let timeline: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let events = timeline["traceEvents"].as_array().unwrap();
    let pinned_allocs = events
        .iter()
        .filter(|e| e["name"] == "[memory]" && e["args"]["pinned"] == true)
        .filter(|e| e["args"]["Bytes"].as_i64().is_some_and(|b| b == 4 << 20))
        .count();
    assert_eq!(pinned_allocs, 12, "one [memory] event a staging allocation");
}
