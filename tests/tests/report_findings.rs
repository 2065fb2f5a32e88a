//! `cuflight report`'s findings as a user reads them: fixes that fit the program and the GPU, failed calls named
//! with their suspect kernel, and GPU-side findings bounded by the steps' critical paths.

use cuflight_integration::*;
use std::process::Command;

/// A fix fits the program: a training loop's (an optimizer or a backward pass ran) speaks of losses and optimizers, an inference
/// run's does not (Qwen's generation under torch.profiler: "keep the loss on the GPU" meant nothing there).
#[test]
fn fixes_speak_of_training_only_where_an_optimizer_ran() {
    let fix_of = |r: &serde_json::Value, kind: &str| {
        r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == kind).map(|f| f["fix"].to_string())
    };
    if let Some(qwen) = shared_trace("kineto-h100-qwen-inference.json.gz") {
        let r = report_json(&qwen);
        let sync = fix_of(&r, "sync_stall").expect("Qwen's sync_stall");
        assert!(!sync.contains("loss") && sync.contains("once per batch"), "{sync}");
        let launch = fix_of(&r, "launch_bound").expect("Qwen's launch_bound");
        assert!(!launch.contains("optimizer") && launch.contains("CUDA graph"), "{launch}");
    }
    if let Some(v100) = shared_trace("kineto-v100-ddp-ns.json.gz") {
        let launch = fix_of(&report_json(&v100), "launch_bound").expect("the V100 run's launch_bound");
        assert!(launch.contains("fused/foreach optimizers"), "{launch}");
    }
    // An HPC code (CloverLeaf's nsys export): copies are fixed in CUDA's terms first, not with a DataLoader.
    if let Some(clover) = shared_trace("nsys-a100-cloverleaf.sqlite") {
        let pageable = fix_of(&report_json(&clover), "pageable_memcpy").expect("CloverLeaf's pageable copies");
        assert!(pageable.starts_with("\"Copy from pinned memory: allocate the host buffers"), "{pageable}");
        assert!(!pageable.contains("DataLoader"), "{pageable}");
    }
    // Which collective is exposed is what the host asked for: NCCL 2.1x ran these jobs' all-reduces, all-gathers
    // and all-to-alls alike on `ncclKernel_SendRecv_*`. The A100 rank's is mostly DDP's gradient all-reduce
    // (`nccl:all_reduce`); the two-rank job's second rank's mostly TorchRec's embedding all-to-all.
    let nccl_of = |r: &serde_json::Value| {
        r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "nccl_exposed").expect("nccl_exposed").clone()
    };
    if let Some(a100) = shared_trace("kineto-a100-nccl-r0.json.gz") {
        let f = nccl_of(&report_json(&a100));
        assert!(f["fix"].as_str().unwrap().contains("bucket_cap_mb"), "{f}");
        assert!(f["evidence"]["metrics"]["all_reduce_share"].as_f64().unwrap() > 0.7, "{f}");
        assert!(f["evidence"]["facts"].to_string().contains("all_reduce 99.61 ms of 100.22 ms"), "{f}");
    }
    if let Some(r1) = shared_trace("kineto-2rank-r1.json.gz") {
        let f = nccl_of(&report_json(&r1));
        assert!(f["fix"].as_str().unwrap().contains("all-to-all") && !f["fix"].to_string().contains("bucket_cap_mb"));
        assert!(f["evidence"]["metrics"]["all_to_all_share"].as_f64().unwrap() > 0.6, "{f}");
    }
}

#[test]
fn the_fp32_fix_names_what_the_gpu_has() {
    // A V100 (compute capability 7.0) has fp16 Tensor Cores only: bf16 autocast and the TF32 switch do nothing there.
    if let Some(v100) = shared_trace("kineto-v100-ddp-ns.json.gz") {
        let r = report_json(&v100);
        let f = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "fp32_gemm").expect("fp32_gemm").clone();
        let fix = f["fix"].as_str().unwrap();
        assert!(
            fix.contains("torch.float16") && !fix.contains("bfloat16") && !fix.contains("matmul_precision"),
            "{fix}"
        );
    }
    // cudasim's H100 (9.0): bf16 and TF32.
    let dir = scratch("report-fp32");
    let prog = build_c("train", &dir);
    let rec = record(&dir, &[], &prog, &["3"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let r = report_json(&rec.trace);
    let f = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "fp32_gemm").expect("fp32_gemm").clone();
    assert!(f["fix"].as_str().unwrap().contains("bfloat16"), "{f}");
}

/// A run that fails says so first: every call that returned an error, by API and code with CUDA's names (stats),
/// and in the report the device fault with the kernel launched last before it (CUDA reports a fault at a later
/// call), and the allocations that found no memory. Queries answering "not ready" are expected, not failures.
#[test]
fn failed_calls_are_named_and_a_device_fault_names_its_suspect_kernel() {
    let dir = scratch("report-failed-calls");
    let (s, _) = record_server_cmd(&dir, &[], "k 2\nQ\nO\nO\ne\n");
    let rows = s["api_errors"].as_array().unwrap();
    let row = |api: &str| rows.iter().find(|r| r["api"] == api).unwrap_or_else(|| panic!("{api}: {rows:?}"));
    let fault = row("cudaDeviceSynchronize");
    assert_eq!((fault["code"].as_u64(), fault["error"].as_str()), (Some(700), Some("cudaErrorIllegalAddress")));
    assert_eq!((fault["class"].as_str(), fault["count"].as_u64()), (Some("sticky"), Some(2)), "{fault}");
    let oom = row("cudaMalloc");
    assert_eq!(
        (oom["error"].as_str(), oom["class"].as_str(), oom["count"].as_u64()),
        (Some("cudaErrorMemoryAllocation"), Some("out_of_memory"), Some(2))
    );
    let query = row("cudaStreamQuery");
    assert_eq!((query["error"].as_str(), query["class"].as_str()), (Some("cudaErrorNotReady"), Some("expected")));
    assert_eq!(rows[0]["class"], "sticky", "failures first");
    assert!(
        fault["first_ns"].as_u64() > oom["first_ns"].as_u64() && oom["first_ns"].as_u64() > query["first_ns"].as_u64()
    );
    let r = report_json(&dir.join("trace.cuf"));
    let verdict = r["verdict"].as_str().unwrap();
    assert!(verdict.starts_with("The run failed: a device fault (cudaErrorIllegalAddress)"), "{verdict}");
    let p = &r["processes"][0];
    let warning = p["warnings"][0].as_str().unwrap();
    assert!(warning.contains("the suspect, kernel faulty (launched at"), "{warning}");
    let oom = p["warnings"][1].as_str().unwrap();
    assert!(oom.starts_with("2 allocation(s) found no device memory"), "{}", p["warnings"]);
    assert!(oom.contains("GiB of the device's 80.00 GiB allocated"), "cudasim's H100: {oom}");
    assert_eq!(p["cuda_errors"].as_array().unwrap().len(), 3);
    // The Kineto-JSON export keeps each failed call's code (`return`, `error`), and reads back the same table.
    let json = dir.join("failed.json");
    let exported = export_chrome(&dir.join("trace.cuf"), &json);
    assert!(exported["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["args"]["error"] == "cudaErrorIllegalAddress"));
    assert_eq!(stats(&json)["api_errors"], s["api_errors"]);
    // The Perfetto timeline marks where the fault was first reported (one instant; later failures are slices).
    let pftrace = dir.join("failed.pftrace");
    let (ok, err) = export_to(&dir.join("trace.cuf"), &pftrace, &[]);
    assert!(ok, "{err}");
    let decoded = python_json("check_perfetto.py", &[pftrace.as_os_str(), json.as_os_str()]);
    assert_eq!(decoded["instants"], 1, "{decoded}");
    // A run without failures says nothing of them; a torch.profiler trace holds no return codes, and says so.
    let clean = record(&dir, &[], &build_c("train", &dir), &["2"], &[]);
    let r = report_json(&clean.trace);
    assert!(r["processes"][0].get("cuda_errors").is_none() && !r["verdict"].as_str().unwrap().contains("failed"));
    if let Some(kineto) = shared_trace("kineto-2rank-r0.json.gz") {
        let kinds: Vec<String> = stats(&kineto)["not_recorded"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["kind"].as_str().unwrap().to_string())
            .collect();
        assert!(kinds.contains(&"errors".to_string()), "{kinds:?}");
    }
}

/// A long run's steps, read as its user would: the text shows how the run began and its slowest steps (not its
/// first ten, all near the median), with the spread beside the mean, and the JSON gives the spread (the attach
/// window: 1643 steps, the slowest step1000 at 3.27 ms, 2.8x the median).
#[test]
fn a_long_runs_step_table_shows_its_slowest_steps_and_their_spread() {
    let Some(window) = shared_trace("h100-attach-window.cuf") else { return };
    let r = report_json(&window);
    let spread = &r["processes"][0]["step_spread"];
    assert_eq!(spread["slowest"], "step1000", "{spread}");
    assert_eq!(spread["slowest_ns"], 3_268_473, "{spread}");
    let out = Command::new(cuflight_bin()).arg("report").arg(&window).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1643, mean 1.22 ms (median 1.16 ms, p90 1.70 ms, slowest 3.27 ms)"), "{text}");
    let marked: Vec<&str> = text.lines().filter(|l| l.ends_with(" (among the slowest)")).collect();
    assert_eq!(marked.len(), 9, "{text}");
    assert!(marked.iter().any(|l| l.contains(" step1000 ")), "{text}");
}

/// A GPU-side finding claims only the step time the GPU holds on the steps' critical paths: the attach
/// window's loop is launch-bound (host work 97% of its path), so its fp32 GEMMs' 403 ms of GPU time are capped and
/// listed low, under the verdict. A trace whose CUDA calls were sampled (the two-rank trace holds 1 in 216) has a
/// path that misses launches and waits: it says so and caps nothing.
#[test]
fn gpu_findings_are_capped_by_the_critical_path_where_it_is_whole() {
    if let Some(window) = shared_trace("h100-attach-window.cuf") {
        let r = report_json(&window);
        let p = &r["processes"][0];
        assert!(p["critical_path"].get("calls_sampled").is_none(), "{}", p["critical_path"]);
        let f = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "fp32_gemm").expect("fp32_gemm");
        let m = &f["evidence"]["metrics"];
        let gpu = m["gpu_time_ns"].as_f64().unwrap();
        assert!((gpu / 1e6 - 403.43).abs() < 0.01, "{m}");
        assert!(m["critical_path_gpu_share"].as_f64().unwrap() < 0.05, "{m}");
        assert!(f["share"].as_f64().unwrap() < 0.05 && f["severity"] == "low", "{f}");
        assert!(r["verdict"].as_str().unwrap().starts_with("launch_bound"), "{}", r["verdict"]);
    }
    if let Some(r0) = shared_trace("kineto-2rank-r0.json.gz") {
        let r = report_json(&r0);
        assert_eq!(r["processes"][0]["critical_path"]["calls_sampled"], true);
        let capped =
            r["findings"].as_array().unwrap().iter().any(|f| f["evidence"]["metrics"]["gpu_time_ns"].is_number());
        assert!(!capped, "{}", r["findings"]);
        let out = Command::new(cuflight_bin()).arg("report").arg(&r0).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("the trace sampled its CUDA calls"), "{text}");
    }
}

/// A kernel's first launch that loads its module (cudasim's `CUDASIM_MODULE_LOAD_US`, CUDA's lazy loading) is CUDA
/// setting itself up, recorded through the agent: with the warm-up step analysed, the report names the first
/// launches as a one-off start-up cost; by default that step is the warm-up, left out, and nothing is blamed.
#[test]
fn first_launches_that_load_their_modules_are_cuda_set_up() {
    let dir = scratch("report-cuda-setup");
    let prog = build_c("train", &dir);
    let rec = record(&dir, &[], &prog, &["4"], &[("CUDASIM_MODULE_LOAD_US", "4000")]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let all = report_json_with(&rec.trace, &["--include-warmup"]);
    let f = all["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "cuda_setup").expect("cuda_setup").clone();
    assert!(f["summary"].as_str().unwrap().contains("one-off start-up cost"), "{f}");
    // The seven kernels of train.c load their modules, 4 ms each; the idle time is what the GPU did not spend on
    // work queued before (cudasim's device thread lags the host on a loaded machine: as few as 4 stretches and
    // 14 ms were seen with every core busy). The first launch of all has nothing before it: 4 ms at least.
    let first = &f["evidence"]["api_calls"][0];
    assert_eq!(first["name"], "cudaLaunchKernel (a kernel's first launch)", "{f}");
    assert!(first["count"].as_u64().unwrap() >= 1, "{f}");
    let setup = all["processes"][0]["idle_causes"]["cuda_setup_ns"].as_f64().unwrap();
    assert!(setup >= 4e6, "{}", all["processes"][0]["idle_causes"]);
    let steady = report_json(&rec.trace);
    assert!(steady["processes"][0]["warmup"]["steps"].as_u64().unwrap() >= 1, "{}", steady["processes"][0]["warmup"]);
    assert!(steady["findings"].as_array().unwrap().iter().all(|f| f["kind"] != "cuda_setup"), "{}", steady["findings"]);
    // Left out as warm-up, the set-up is still said: the warm-up's line names it as what made the step slow. It is
    // the host's time in the calls, whatever the GPU did meanwhile: all seven, 4 ms each.
    let warmup = &steady["processes"][0]["warmup"];
    assert!(warmup["detail"][0]["cuda_setup_ns"].as_f64().unwrap() >= 28e6, "{warmup}");
    let out = Command::new(cuflight_bin()).arg("report").arg(&rec.trace).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("CUDA set itself up for ")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("7 kernels' first launches, their modules loaded"), "{line}");
}

/// A trace torch.profiler recorded on ROCm is told in HIP's terms (report and stats alike): its header names HIP's
/// runtime, its findings HIP's calls, graphs and tools, and nothing of CUPTI's cost (measured on NVIDIA's GPUs) is
/// said of it. The same loop recorded on CUDA keeps CUDA's, and that cost. Every line the report writes is checked.
#[test]
fn a_rocm_trace_is_told_in_hips_terms() {
    let dir = scratch("report-rocm-terms");
    let loop_trace = |api: &str, top: &str| {
        let mut events = Vec::new();
        for step in 0..4u64 {
            let s = 10_000 + step * 1_000;
            events.push(format!(
                r#"{{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{step}","pid":10,"tid":11,"ts":{s},"dur":1000}}"#
            ));
            for k in 0..30u64 {
                let (t, id) = (s + 5 + k * 25, step * 100 + k + 1);
                events.push(format!(
                    r#"{{"ph":"X","cat":"cuda_runtime","name":"{api}LaunchKernel","pid":10,"tid":11,"ts":{t},"dur":10,"args":{{"correlation":{id}}}}}"#
                ));
                events.push(format!(
                    r#"{{"ph":"X","cat":"kernel","name":"elementwise_kernel","pid":0,"tid":7,"ts":{},"dur":4,"args":{{"correlation":{id},"device":0,"stream":7}}}}"#,
                    t + 12
                ));
            }
        }
        format!(r#"{{"traceEvents":[{}]{top}}}"#, events.join(",\n"))
    };
    let rocm = r#","deviceProperties":[{"id":0,"name":"AMD Instinct MI300X","totalGlobalMem":206141652992,"computeMajor":9,"computeMinor":4,"numSms":304,"warpSize":64}],"roctracer_version":4.1,"hip_runtime_version":60443483"#;
    let cuda = r#","deviceProperties":[{"id":0,"name":"NVIDIA H100","totalGlobalMem":85520809984,"computeMajor":9,"computeMinor":0,"numSms":132,"warpSize":32}],"cupti_version":24"#;
    let report = |name: &str, json: String| {
        let path = dir.join(name);
        std::fs::write(&path, json).unwrap();
        let text = Command::new(cuflight_bin()).arg("report").arg(&path).output().unwrap();
        assert!(text.status.success(), "{}", String::from_utf8_lossy(&text.stderr));
        (String::from_utf8_lossy(&text.stdout).into_owned(), report_json(&path))
    };
    let (text, json) = report("rocm.json", loop_trace("hip", rocm));
    assert!(text.contains("ROCm: HIP runtime 6.4.43483") && json["processes"][0]["run"]["rocm"] == true, "{text}");
    let launch =
        json["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "launch_bound").expect("launch_bound");
    let fix = launch["fix"].as_str().unwrap();
    assert!(
        fix.contains("in HIP code") && fix.contains("replayed as a HIP graph (stream capture; torch.cuda"),
        "{fix}"
    );
    assert!(launch["evidence"]["api_calls"][0]["name"] == "hipLaunchKernel", "{launch}");
    // Every sentence, findings to tables: CUDA's names only where PyTorch keeps them on ROCm (torch.cuda).
    for line in text.lines() {
        let said = line.replace("torch.cuda", "");
        assert!(!said.contains("CUDA") && !said.contains("CUPTI") && !said.contains("cuda"), "{line}\n{text}");
    }
    // stats, the same rule: its titles speak of HIP, its report names stay nsys's.
    let stats = Command::new(cuflight_bin()).arg("stats").arg(dir.join("rocm.json")).output().unwrap();
    let stats = String::from_utf8_lossy(&stats.stdout);
    assert!(stats.contains("HIP API calls (host time) [cuda_api_sum]") && !stats.contains("CUDA"), "{stats}");
    let (text, json) = report("cuda.json", loop_trace("cuda", cuda));
    assert!(text.contains("CUDA: driver") && json["processes"][0]["run"].get("rocm").is_none(), "{text}");
    let launch =
        json["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "launch_bound").expect("launch_bound");
    assert!(launch["fix"].as_str().unwrap().contains("replayed as a CUDA graph"), "{launch}");
    // What CUPTI's tracing may add to its launches is said on CUDA alone (the loop above had it left out).
    assert!(launch["evidence"]["facts"].to_string().contains("CUPTI's tracing lengthens each launch"), "{launch}");
}
