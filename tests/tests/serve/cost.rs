//! What following a program costs it, as serve's own metrics tell a platform team.

use super::*;

/// One source of `cuflight_agent_overhead_seconds_total` for `pid`.
fn overhead(m: &Value, pid: u32, source: &str) -> f64 {
    let pid = pid.to_string();
    m["cuflight_agent_overhead_seconds"]["samples"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["labels"]["pid"].as_str() == Some(pid.as_str()) && s["labels"]["source"] == source)
        .map(|s| s["value"].as_f64().unwrap())
        .sum()
}

/// A stepper of 20 kernels a step (`args` after the count) under four 300 ms windows: its metrics and pid.
fn windows_of(name: &str, args: &[&str]) -> (Value, u32) {
    let _serial = serial();
    let dir = scratch(name);
    let stepper = stepper_with(&dir, &[&["20"], args].concat());
    let pid = stepper.child.id();
    let (mut serve, addr, _err) = start_serve(&["--duty", "300ms/500ms", "--rounds", "4", &pid.to_string()]);
    std::thread::sleep(Duration::from_millis(1700));
    let m = scrape(&addr, &dir, 1);
    assert!(serve.wait().unwrap().success());
    stepper.end();
    (m, pid)
}

/// A program replaying a CUDA graph of 20 kernels a step under serve's windows: CUPTI tracing each node lengthens
/// every graph launch call (cudasim models an H200's 1.1 us a node), which no record measures. The overhead
/// counter's `graph_node_tracing` source estimates it at 1.1 us for each node the windows traced, and the overhead
/// ratio holds it: about 22 us in each ~1 ms step.
#[test]
fn tracing_graph_nodes_counts_in_what_the_recording_costs() {
    let (m, pid) = windows_of("serve-graph-cost", &["graph"]);
    // Every kernel the windows saw ran as a node of the step's graph, traced on its own.
    let nodes = value(&m, "cuflight_kernel_launches", pid);
    assert!(nodes >= 20.0 * 100.0, "{nodes} kernels in the windows folded");
    let traced = overhead(&m, pid, "graph_node_tracing");
    assert!((traced - nodes * 1.1e-6).abs() <= 1e-6 * traced.max(1e-3), "{traced} s for {nodes} nodes");
    assert_eq!(overhead(&m, pid, "python_stacks"), 0.0, "{}", m["cuflight_agent_overhead_seconds"]);
    // No kernel was launched one by one in the windows.
    assert_eq!(overhead(&m, pid, "launch_tracing"), 0.0, "{}", m["cuflight_agent_overhead_seconds"]);
    let ratio = value(&m, "cuflight_agent_overhead_ratio", pid);
    assert!((0.005..0.5).contains(&ratio), "{ratio}: 22 us of tracing in each ~1 ms step");
}

/// The same program launching its 20 kernels one by one: CUPTI lengthens each launch (cudasim models an H200's
/// 0.8 us for CUPTI being initialised and 0.7 us for kernel records), which no record measures either. The
/// `launch_tracing` source estimates it at 1.0 us a launch (the H200's sampled runs), and the ratio holds it.
#[test]
fn tracing_eager_launches_counts_in_what_the_recording_costs() {
    let (m, pid) = windows_of("serve-launch-cost", &[]);
    let launches = value(&m, "cuflight_kernel_launches", pid);
    assert!(launches >= 20.0 * 100.0, "{launches} kernels in the windows folded");
    let traced = overhead(&m, pid, "launch_tracing");
    assert!((traced - launches * 1e-6).abs() <= 1e-6 * traced.max(1e-3), "{traced} s for {launches} launches");
    assert_eq!(overhead(&m, pid, "graph_node_tracing"), 0.0, "{}", m["cuflight_agent_overhead_seconds"]);
    let ratio = value(&m, "cuflight_agent_overhead_ratio", pid);
    assert!((0.005..0.5).contains(&ratio), "{ratio}: 20 us of tracing in each ~1 ms step");
}
