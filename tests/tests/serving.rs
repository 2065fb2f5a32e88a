//! A model server's iterations in the report (tests/c/batching.c on cudasim, the CPU stand-in for the GPU): a
//! continuous-batching loop that prefills arriving requests eagerly and decodes by replaying CUDA graphs. Named
//! (NVTX "prefill"/"decode"/"mixed" iterations and "request" start/end ranges), the report counts each kind
//! exactly as the program did and what each request took; unnamed, it tells the iterations apart by what they
//! launch and says what it could not attribute.

use cuflight_integration::*;
use serde_json::Value;

/// What the program says it did: "batching: prefill P decode D mixed M requests R kernels K replays G".
fn counts(stdout: &str) -> std::collections::HashMap<String, u64> {
    let line = stdout.lines().find(|l| l.starts_with("batching:")).unwrap_or_else(|| panic!("{stdout}"));
    let words: Vec<&str> = line.split_whitespace().skip(1).collect();
    words.chunks(2).map(|c| (c[0].to_string(), c[1].parse().unwrap())).collect()
}

/// The program's report, what it says it did, and its trace.
fn served(test: &str, mode: &str) -> (Value, std::collections::HashMap<String, u64>, std::path::PathBuf) {
    // Steps are told apart as slow by their time: one recording at a time.
    let _one = serial();
    let dir = scratch(test);
    let prog = build_c("batching", &dir);
    let rec = record(&dir, &[], &prog, &[mode], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    (report_json(&rec.trace), counts(&String::from_utf8_lossy(&rec.output.stdout)), rec.trace)
}

/// Steps the report leaves out of its analyses: the warm-up, and later slow steps that ran kernels for the first
/// time.
fn left_out(warmup: &Value) -> u64 {
    let later = warmup.get("later").map_or(0, |l| l.as_array().unwrap().len() as u64);
    warmup["steps"].as_u64().unwrap() + later
}

/// Steps of one kind the report left out (warm-up, later slow first runs).
fn left_out_of(warmup: &Value, kind: &str) -> u64 {
    let of =
        |list: &str| warmup.get(list).map_or(0, |l| l.as_array().unwrap().iter().filter(|d| d["kind"] == kind).count());
    (of("detail") + of("later")) as u64
}

/// Each left-out step was compared with its own kind's steady median, never with the decodes that make most
/// steps; a kind the steady half never runs with none, since this server captures its graphs before it serves
/// (named or not, its prefills are other work than a decode, not slow decodes).
fn compared_with_its_kind(warmup: &Value) {
    let medians: Vec<(String, u64)> = warmup["steady_by_kind"]
        .as_array()
        .unwrap_or_else(|| panic!("steps have kinds: {warmup}"))
        .iter()
        .map(|k| (k["kind"].as_str().unwrap().to_string(), k["steady_step_ns"].as_u64().unwrap()))
        .collect();
    for d in warmup.get("detail").and_then(Value::as_array).into_iter().flatten() {
        let own = medians.iter().find(|m| d["kind"] == m.0.as_str()).map_or(0, |m| m.1);
        assert_eq!(d["compared_with_ns"].as_u64(), Some(own), "{d} in {warmup}");
    }
}

/// Iterations of one kind in the table (0 where it has no row).
fn count(it: &Value, name: &str) -> u64 {
    it["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == name).map_or(0, |k| k["count"].as_u64().unwrap())
}

fn kind<'a>(it: &'a Value, name: &str) -> &'a Value {
    it["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == name).unwrap_or_else(|| panic!("no {name}: {it}"))
}

#[test]
fn named_iterations_and_requests_are_counted_as_the_server_ran_them() {
    let (r, did, trace) = served("serving-named", "named");
    let p = &r["processes"][0];
    let it = &p["iterations"];
    assert_eq!(it["told_by"], "names", "{it}");
    // Every iteration of each kind, in its row or left out as warm-up (on a loaded machine the first iterations
    // run slowly enough); a prefill is slower than a decode by nature, so the warm-up rule compares each with
    // its own kind, and the only pure prefill, a kind the steady half never runs, with none.
    let w = &p["warmup"];
    for name in ["prefill", "decode", "mixed"] {
        assert_eq!(count(it, name) + left_out_of(w, name), did[name], "{name}: {it}, {w}");
    }
    compared_with_its_kind(w);
    // With the warm-up kept, each kind holds exactly what the program ran. A decode replays one graph of 6
    // kernels; a mixed iteration adds a prefill's 8 eager kernels.
    let all = report_json_with(&trace, &["--include-warmup"]);
    let all = &all["processes"][0]["iterations"];
    for name in ["prefill", "decode", "mixed"] {
        assert_eq!(count(all, name), did[name], "{name}: {all}");
    }
    let decode = kind(all, "decode");
    assert_eq!(decode["kernels"].as_u64(), Some(6 * did["decode"]), "{decode}");
    assert_eq!(decode["graph_replays"].as_u64(), Some(did["decode"]), "{decode}");
    let mixed = kind(all, "mixed");
    assert_eq!(mixed["kernels"].as_u64(), Some(14 * did["mixed"]), "{mixed}");
    assert_eq!(kind(all, "prefill")["graph_replays"], 0, "{all}");
    let total: u64 = all["kinds"].as_array().unwrap().iter().map(|k| k["kernels"].as_u64().unwrap()).sum();
    assert_eq!(total, did["kernels"], "{all}");
    for k in all["kinds"].as_array().unwrap() {
        let (busy, idle, time) = (k["gpu_busy_ns"].as_u64().unwrap(), k["idle_ns"].as_u64().unwrap(), &k["time_ns"]);
        assert_eq!(Some(busy + idle), time.as_u64(), "{k}");
        assert!(k["p50_ns"].as_u64().unwrap() <= k["p99_ns"].as_u64().unwrap(), "{k}");
    }
    // Prefill iterations run 8 kernels of 60 us, decodes 6 of 30: each kind's GPU time says so (their wall
    // times do too, but a loaded machine can stretch any of them).
    let busy_each = |k: &Value| k["gpu_busy_ns"].as_u64().unwrap() / k["count"].as_u64().unwrap();
    assert!(busy_each(mixed) > 3 * busy_each(decode), "{all}");
    // 12 requests, each admitted in one iteration and decoded in the next 10: in flight for 11 iterations.
    let q = &it["requests"];
    assert_eq!((q["ended"].as_u64(), q["open_at_end"].as_u64()), (Some(did["requests"]), Some(0)), "{q}");
    assert_eq!(q["iterations_p50"], 11, "{q}");
    assert_eq!(q["outside_iterations"], 0, "{q}");
    assert!(q["latency_p50_ns"].as_u64().unwrap() <= q["latency_p99_ns"].as_u64().unwrap(), "{q}");
    assert!(q["gpu_share_mean_ns"].as_u64().unwrap() > 0, "{q}");
    assert!(it["not_attributed"].as_array().unwrap().is_empty(), "{it}");
    // The fixes speak to a server: no advice about losses and training steps.
    for f in r["findings"].as_array().unwrap() {
        let fix = f["fix"].as_str().unwrap();
        assert!(!fix.contains("keep the loss") && !fix.contains("fused/foreach optimizers"), "{fix}");
    }
    if let Some(f) = r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "sync_stall") {
        assert!(f["fix"].as_str().unwrap().contains("async scheduling"), "{f}");
    }
}

#[test]
fn unnamed_iterations_are_told_apart_by_their_launches_and_the_gaps_are_said() {
    let (r, did, trace) = served("serving-plain", "plain");
    let p = &r["processes"][0];
    // No step ranges and no period in the launches: the iterations are cut where the host waits for its tokens.
    assert_eq!(p["step_source"], "pattern", "{}", p["warnings"]);
    let it = &p["iterations"];
    assert_eq!(it["told_by"], "launches", "{it}");
    // This engine graphs its decode and prefills eagerly: graph replays alone are its decodes, both its mixed
    // iterations. Every iteration is counted once, in its kind or in the warm-up the steps begin with (the
    // pre-serving warm-up at least; on a loaded machine the first iterations run slowly enough to be more of it).
    // The first prefill, twice a decode, is not compared with the decodes that make most steps: it is the only
    // eager iteration, launched after the decode graphs were captured, so other work than theirs.
    let w = &p["warmup"];
    let ran = [("graph replay", did["decode"]), ("graph replay + eager", did["mixed"] + 1), ("eager", 1)];
    for (name, ran) in ran {
        assert_eq!(count(it, name) + left_out_of(w, name), ran, "{name}: {it}, {w}");
    }
    compared_with_its_kind(w);
    assert_eq!(kind(it, "graph replay")["kernels"].as_u64(), Some(6 * count(it, "graph replay")), "{it}");
    assert!(it.get("requests").is_none(), "{it}");
    // With the warm-up kept, each kind holds exactly what the program ran: the pre-serving warm-up (a prefill
    // and a replay of each bucket) is a mixed iteration by its launches, the first prefill the only eager one.
    let all = report_json_with(&trace, &["--include-warmup"]);
    let all = &all["processes"][0]["iterations"];
    assert_eq!(count(all, "graph replay"), did["decode"], "{all}");
    assert_eq!(count(all, "graph replay + eager"), did["mixed"] + 1, "{all}");
    assert_eq!(count(all, "eager"), 1, "{all}");
    let said = it["not_attributed"].to_string();
    assert!(said.contains("names no iterations") && said.contains("requests are not annotated"), "{said}");
}

/// An offline batch that names nothing (8 requests prefilled one an iteration, then decoded together by graph
/// replays for 60 tokens): the prefills, a kind the steady half never runs, launched after the decode graphs were captured,
/// are the batch's iterations, not warm-up, however much slower than a decode (before, all of them were left
/// out). Only the pre-serving warm-up is, for the prefill kernels it ran first. A prefill's critical path is shown
/// beside the typical (decode) step's.
#[test]
fn an_unnamed_offline_batchs_prefills_are_iterations_not_warmup() {
    let (r, did, _) = served("serving-offline", "offline");
    assert_eq!((did["prefill"], did["decode"], did["mixed"]), (8, 60, 0), "{did:?}");
    let p = &r["processes"][0];
    let w = &p["warmup"];
    assert_eq!(left_out_of(w, "eager"), 0, "{w}");
    let it = &p["iterations"];
    assert_eq!(it["told_by"], "launches", "{it}");
    assert_eq!(count(it, "eager"), did["prefill"], "{it}, {w}");
    assert_eq!(count(it, "graph replay") + left_out_of(w, "graph replay"), did["decode"], "{it}, {w}");
    assert_eq!(left_out_of(w, "graph replay + eager"), 1, "the pre-serving warm-up: {w}");
    compared_with_its_kind(w);
    // The typical step is a decode; what holds the prefills (the slowest eighth) is shown beside its path.
    let slow = &p["slow_step_path"];
    let row = p["steps"].as_array().unwrap().iter().find(|s| s["name"] == slow["step"]).expect("the slow step's row");
    assert!(row["graph_replays"] == 0 && row["eager_kernels"].as_u64().unwrap() > 0, "a prefill: {row}, {slow}");
}

/// A window into a server that is already serving (`--skip-steps 10 --steps 20`: iterations are steps): the 20
/// iterations in it are counted, requests still open at its end are counted apart, and the ranges begun before
/// it are said to have no known latency.
#[test]
fn a_window_into_a_serving_loop_says_which_requests_it_saw_whole() {
    let _one = serial();
    let dir = scratch("serving-window");
    let prog = build_c("batching", &dir);
    let rec = record(&dir, &["--skip-steps", "10", "--steps", "20"], &prog, &["named"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let r = report_json(&rec.trace);
    let it = &r["processes"][0]["iterations"];
    let counted: u64 = it["kinds"].as_array().unwrap().iter().map(|k| k["count"].as_u64().unwrap()).sum();
    // Each in its kind, or left out: as warm-up, or (on a loaded machine) as a slow step that ran a kernel the
    // window had not run before (the window's first mixed iteration is its first prefill).
    let w = &r["processes"][0]["warmup"];
    assert_eq!(counted + left_out(w), 20, "{it}, {w}");
    let q = &it["requests"];
    assert!(q["open_at_end"].as_u64().unwrap() > 0, "{q}");
    let said = it["not_attributed"].to_string();
    assert!(said.contains("began before it"), "{said}");
}

/// A server that captures a batch size's CUDA graph the first time a batch needs it (`batching lazy`, as
/// torch.compile's CUDA graph trees do; it names nothing): each step that captured one mid-run, slow by the eager
/// run and the recording, is named with that and left out with the warm-up, not counted as a steady iteration.
/// Bucket 1's capture falls in the warm-up, and so may bucket 4's where a loaded machine slows the first steps:
/// the warm-up then names it. Bucket 8's (about step 17) comes after.
#[test]
fn graphs_captured_lazily_mid_run_are_named_and_left_out() {
    let (r, did, trace) = served("serving-lazy", "lazy");
    assert_eq!((did["prefill"], did["decode"], did["mixed"]), (1, 87, 19), "{did:?}");
    let p = &r["processes"][0];
    let w = &p["warmup"];
    let capturing = |list: &str| -> Vec<Value> {
        let steps = w.get(list).and_then(Value::as_array).cloned().unwrap_or_default();
        steps.into_iter().filter(|f| f["graphs_instantiated"].as_u64() == Some(1)).collect()
    };
    let (in_warmup, later) = (capturing("detail"), capturing("later"));
    assert!(in_warmup.len() + later.len() >= 3 && !later.is_empty(), "one capture a bucket: {w}");
    for f in &later {
        assert!(
            f["cost_ns"].as_u64().unwrap() >= 1_000_000,
            "10 ms of host work recording it, over a mixed step's time even on a loaded machine: {f}"
        );
        assert_eq!(f["recompiled"], false, "no Triton kernel: {f}");
    }
    for f in in_warmup.iter().chain(&later) {
        let name = f["name"].as_str().unwrap();
        assert!(p["steps"].as_array().unwrap().iter().all(|s| s["name"] != name), "{name} left out");
    }
    let text = std::process::Command::new(cuflight_bin()).arg("report").arg(&trace).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("1 CUDA graph captured and instantiated: a batch size or input shape first met then"),
        "{text}"
    );
    let warm = match in_warmup.len() {
        0 => None,
        1 => Some("1 CUDA graph captured and instantiated;".to_string()),
        n => Some(format!("{n} CUDA graphs captured and instantiated;")),
    };
    assert!(
        warm.as_ref().is_none_or(|w| text.contains(w.as_str())),
        "the warm-up names its captures ({warm:?}): {text}"
    );
}
