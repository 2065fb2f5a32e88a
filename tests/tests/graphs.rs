//! CUDA graphs in the report (tests/c/graph_loop.c on cudasim, the CPU stand-in for the GPU): a loop that
//! replays one graph a step is not launch-bound (a replay is one launch of 20 kernels); a loop that captures its
//! graph again every step is named for it, with the time the GPU idles through each capture.

use cuflight_integration::*;
use serde_json::Value;

fn finding<'a>(r: &'a Value, kind: &str) -> Option<&'a Value> {
    r["findings"].as_array().unwrap().iter().find(|f| f["kind"] == kind)
}

/// The trace [`graph_loop`] recorded in `dir`.
fn rec_trace(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join("trace.cuf")
}

fn graph_loop(dir: &std::path::Path, mode: &str) -> (Value, Value) {
    let prog = build_c("graph_loop", dir);
    let rec = record(dir, &[], &prog, &[mode], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    (report_json(&rec.trace), stats(&rec.trace))
}

/// The Kineto JSON export puts each replayed op's graph and node on it: kernels, copies and memsets alike.
#[test]
fn the_export_names_the_graph_node_of_every_replayed_op() {
    let dir = scratch("graphs-export");
    let prog = build_c("graph_loop", &dir);
    let rec = record(&dir, &[], &prog, &["once"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    // record says what tracing the 12 x 23 nodes one by one cost the launch calls (1.1 us each), and the way out.
    let said = rec.stderr();
    assert!(
        said.contains(
            "CUPTI traced 276 CUDA graph nodes one by one, lengthening the graph launch calls by about 0.30 ms"
        ) && said.contains("adding `graphs` to --trace records one record per launch"),
        "{said}"
    );
    let v = export_chrome(&rec.trace, &dir.join("once.json"));
    let events = v["traceEvents"].as_array().unwrap();
    for (cat, want) in [("kernel", 240), ("gpu_memcpy", 24), ("gpu_memset", 12)] {
        let ops: Vec<&Value> = events.iter().filter(|e| e["cat"] == cat).collect();
        assert_eq!(ops.len(), want, "{cat}");
        assert!(ops.iter().all(|e| e["args"]["graph id"].is_u64() && e["args"]["graph node id"].is_u64()), "{cat}");
    }
    let nodes: std::collections::HashSet<u64> =
        events.iter().filter_map(|e| e["args"]["graph node id"].as_u64()).collect();
    assert_eq!(nodes.len(), 23);
}

#[test]
fn a_loop_that_captures_its_graph_every_step_is_named_for_it() {
    // Warm-up and slow steps are told by time: one recording at a time.
    let _one = serial();
    let dir = scratch("graphs-recapture");
    let (r, s) = graph_loop(&dir, "recapture");
    let f = finding(&r, "graph_capture").unwrap_or_else(|| panic!("no graph_capture: {}", r["findings"]));
    assert_eq!(r["findings"][0]["kind"], "graph_capture", "{}", r["findings"]);
    assert!(f["summary"].as_str().unwrap().contains("step after step"), "{f}");
    assert!(f["fix"].as_str().unwrap().contains("Capture once per input shape"), "{f}");
    // 20 launches 100 us apart a capture, the GPU idle throughout: 2 ms or more of each steady step.
    let steps = r["processes"][0]["steps"].as_array().unwrap().len() as f64;
    let per_step = f["time_lost_ns"].as_f64().unwrap() / steps;
    assert!(per_step >= 2.0e6, "{per_step} ns a step: {f}");
    assert!(f["evidence"]["metrics"]["steps_with_graph_setup"].as_f64().unwrap() >= steps - 1.0, "{f}");
    let idle = &r["processes"][0]["idle_causes"];
    assert!(idle["graph_setup_ns"].as_f64().unwrap() >= 2.0e6 * steps, "{idle}");
    // The captured launches ran nothing: no launch overhead is blamed for them.
    assert!(finding(&r, "launch_bound").is_none_or(|l| l["share"].as_f64().unwrap() < 0.05), "{}", r["findings"]);
    // Each step's graph is a new one: 12 graphs of 23 nodes (a memset, 2 copies, 20 kernels), each replayed once.
    let graphs = s["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 12, "{graphs:?}");
    assert!(graphs.iter().all(|g| g["launches"] == 1 && g["kernels"] == 20 && g["nodes"] == 23), "{graphs:?}");
}

#[test]
fn a_loop_that_replays_one_graph_is_not_launch_bound_and_its_capture_is_no_step_cost() {
    let dir = scratch("graphs-once");
    let (r, s) = graph_loop(&dir, "once");
    // The capture happened before the first step: nothing of it is in the steps.
    assert!(finding(&r, "graph_capture").is_none(), "{}", r["findings"]);
    // One replay a step queues 20 kernels at once: no kernel waits on a launch of its own. The gaps between the
    // nodes are the graph's (graph_wait), never launch overhead (they were, before an H200's reduce-overhead loop
    // showed launch_bound blamed on its replays). What launch time is left is the host inside cudaGraphLaunch,
    // which CUPTI's node-level tracing lengthens (cudasim models the H200's 1.1 us a kernel node), said so.
    if let Some(l) = finding(&r, "launch_bound") {
        let facts = l["evidence"]["facts"].to_string();
        assert!(l["share"].as_f64().unwrap() < 0.10, "{l}");
        assert!(facts.contains("no kernel was launched one by one") && facts.contains("node-level tracing"), "{l}");
        assert!(l["fix"].as_str().unwrap().starts_with("Every kernel already replays as CUDA graphs"), "{l}");
    }
    // The idle time inside those calls that CUPTI's tracing of each node adds is set apart as the profiler's: some
    // (cudasim's launch call waits 1.1 us a kernel node before it queues the graph), at most 1.1 us for each of
    // the 23 nodes of each of the 12 replays.
    let traced = r["processes"][0]["idle_causes"]["graph_tracing_ns"].as_u64().unwrap();
    assert!(traced > 0 && traced <= 12 * 23 * 1_100, "{}", r["processes"][0]["idle_causes"]);
    assert!(finding(&r, "cpu_bound").is_none(), "{}", r["findings"]);
    let waits = finding(&r, "graph_wait").map(|f| f["evidence"].to_string()).unwrap_or_default();
    assert!(waits.contains("the GPU's own gaps between a CUDA graph's nodes"), "{}", r["findings"]);
    // One graph, replayed 12 times: every kernel, copy and memset of each replay joined to its launch.
    let graphs = s["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 1, "{graphs:?}");
    assert_eq!((graphs[0]["launches"].as_u64(), graphs[0]["kernels"].as_u64()), (Some(12), Some(240)));
    assert_eq!(graphs[0]["nodes"], 23, "{graphs:?}");
    assert_eq!(count(&s, "api", "name", "cudaGraphLaunch"), 12);
    // The timeline draws each replay as one slice above its nodes.
    let pftrace = dir.join("once.pftrace");
    let (ok, err) = export_to(&rec_trace(&dir), &pftrace, &[]);
    assert!(ok, "{err}");
    let decoded = python_json("check_perfetto.py", &[pftrace.as_os_str()]);
    assert_eq!(decoded["graph_replays"], 12, "{decoded}");
    let copies: u64 = s["memcpy"].as_array().unwrap().iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(copies, 24, "{}", s["memcpy"]);
    // The same loop launched eagerly, 100 us of host work between launches, is the launch-bound one.
    let dir = scratch("graphs-eager");
    let (eager, _) = graph_loop(&dir, "eager");
    let host_bound: f64 = ["launch_bound", "cpu_bound"]
        .iter()
        .filter_map(|k| finding(&eager, k))
        .map(|f| f["share"].as_f64().unwrap())
        .sum();
    assert!(host_bound >= 0.10, "{}", eager["findings"]);
    // No optimizer or backward kernel ran: not a training loop, so no fix speaks of losses, optimizers or a training process.
    for f in eager["findings"].as_array().unwrap() {
        let fix = f["fix"].as_str().unwrap();
        assert!(!fix.contains("loss") && !fix.contains("optimizer") && !fix.contains("training"), "{f}");
    }
}

/// A loop run eagerly for three steps, then captured as a graph and replayed (torch.compile's reduce-overhead
/// warms up so, then records): its steps are told apart by their launches, and the eager ones, begun before the
/// capture, are the loop's warm-up, compared with the replays; the capturing step is warm-up for its time.
#[test]
fn eager_steps_before_the_loop_is_captured_are_its_warmup() {
    // Warm-up and slow steps are told by time: one recording at a time.
    let _one = serial();
    let dir = scratch("graphs-late");
    let (r, _) = graph_loop(&dir, "late");
    let w = &r["processes"][0]["warmup"];
    let kinds = w["steady_by_kind"].as_array().unwrap_or_else(|| panic!("steps have kinds: {w}"));
    assert_eq!(kinds.len(), 1, "{w}");
    assert_eq!(kinds[0]["kind"], "graph replay", "{w}");
    let detail = w["detail"].as_array().unwrap_or_else(|| panic!("warm-up: {w}"));
    assert!(detail.len() >= 4, "{w}");
    for d in &detail[..3] {
        assert_eq!((&d["kind"], &d["compared_with_ns"]), (&Value::from("eager"), &kinds[0]["steady_step_ns"]), "{w}");
    }
    assert_eq!(detail[3]["kind"], "graph replay", "{w}");
}

/// A graph captured before the recording began (`--skip-steps 3`: the window opens after the capture), replayed
/// across the window's start, updated at step 6 (`cudaGraphExecUpdate`: the same graph and nodes, a new copy
/// source) and replayed beside eager work on another stream: every replay inside the window is joined to its
/// launch with all its nodes, the update is no capture loop, and nothing is blamed on launches.
#[test]
fn a_graph_captured_before_the_window_and_updated_in_it_is_seen_whole() {
    let dir = scratch("graphs-update");
    let prog = build_c("graph_loop", &dir);
    let rec = record(&dir, &["--skip-steps", "3", "--steps", "9"], &prog, &["update"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let (r, s) = (report_json(&rec.trace), stats(&rec.trace));
    let graphs = s["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 1, "one graph, updated in place: {graphs:?}");
    // Steps 3..12 recorded: 9 replays of 23 nodes (20 kernels), the last 6 after the update.
    assert_eq!((graphs[0]["launches"].as_u64(), graphs[0]["kernels"].as_u64()), (Some(9), Some(180)), "{graphs:?}");
    assert_eq!(graphs[0]["nodes"], 23, "{graphs:?}");
    assert_eq!(count(&s, "api", "name", "cudaGraphLaunch"), 9);
    assert_eq!(count(&s, "api", "name", "cudaGraphExecUpdate"), 1);
    assert_eq!(count(&s, "kernels", "name", "side"), 9, "the eager kernels beside");
    // The update's capture is a one-off: no loop that captures step after step, no launch overhead blamed.
    assert!(finding(&r, "graph_capture").is_none_or(|f| !f["summary"].as_str().unwrap().contains("step after step")));
    assert!(finding(&r, "launch_bound").is_none_or(|l| l["share"].as_f64().unwrap() < 0.10), "{}", r["findings"]);
}

/// `--trace ...,graphs` traces CUDA graphs at graph level (CUPTI_ACTIVITY_KIND_GRAPH_TRACE): one record per
/// replay, from its first node's start to its last node's end, joined to its launch; no node has a record (so no
/// `layer` kernel), eager work beside the graph is traced as ever, and the report says what it cannot see.
#[test]
fn graphs_traced_at_graph_level_are_one_record_per_replay() {
    let dir = scratch("graphs-graph-level");
    let prog = build_c("graph_loop", &dir);
    let rec = record(&dir, &["--trace", "cuda,nvtx,graphs"], &prog, &["update"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    assert!(!rec.stderr().contains("graph nodes one by one"), "{}", rec.stderr());
    let (r, s) = (report_json(&rec.trace), stats(&rec.trace));
    let graphs = s["graphs"].as_array().unwrap();
    assert_eq!(graphs.len(), 1, "{graphs:?}");
    let g = &graphs[0];
    assert_eq!((g["launches"].as_u64(), g["graph_level"].as_bool()), (Some(12), Some(true)), "{g}");
    assert_eq!((g["kernels"].as_u64(), g["nodes"].as_u64()), (Some(0), Some(0)), "{g}");
    // A replay runs 20 kernels of 50 us back to back: a millisecond at least from first node to last.
    assert!(g["replay_ns"].as_u64().unwrap() >= 12 * 1_000_000, "{g}");
    assert_eq!(count(&s, "kernels", "name", "CUDA graph (graph-level trace)"), 12);
    assert_eq!(count(&s, "kernels", "name", "layer"), 0, "graph nodes have no records at graph level");
    assert_eq!(count(&s, "kernels", "name", "side"), 12, "eager kernels are traced as ever");
    assert_eq!(count(&s, "api", "name", "cudaGraphLaunch"), 12);
    assert!(r["verdict"].as_str().unwrap().contains("traced at graph level"), "{}", r["verdict"]);
    assert!(finding(&r, "launch_bound").is_none_or(|l| l["share"].as_f64().unwrap() < 0.10), "{}", r["findings"]);
    // No node was traced on its own: nothing of the launch calls is put down to CUPTI's node-level tracing.
    assert_eq!(r["processes"][0]["idle_causes"]["graph_tracing_ns"], 0, "{}", r["processes"][0]["idle_causes"]);
    // In the Kineto export each replay is one kernel with its graph id and no node id.
    let v = export_chrome(&rec.trace, &dir.join("graph-level.json"));
    let replays: Vec<&Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "kernel" && e["name"] == "CUDA graph (graph-level trace)")
        .collect();
    assert_eq!(replays.len(), 12);
    assert!(replays.iter().all(|e| e["args"]["graph id"].is_u64() && e["args"].get("graph node id").is_none()));
}
