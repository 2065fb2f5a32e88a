//! How long a followed program's steps take, as serve's histogram tells a platform team.

use super::*;

/// The `_bucket` series of `cuflight_step_seconds` for `pid` and `kind`, by bound, and the histogram's count and
/// sum.
fn histogram(m: &Value, pid: u32, kind: &str) -> (Vec<(String, f64)>, f64, f64) {
    let pid = pid.to_string();
    let samples: Vec<&Value> = m["cuflight_step_seconds"]["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("no step histogram: {m}"))
        .iter()
        .filter(|s| s["labels"]["pid"].as_str() == Some(pid.as_str()) && s["labels"]["kind"] == kind)
        .collect();
    let named = |suffix: &str| -> f64 {
        let name = format!("cuflight_step_seconds{suffix}");
        samples.iter().filter(|s| s["name"] == name.as_str()).map(|s| s["value"].as_f64().unwrap()).sum()
    };
    let buckets = samples
        .iter()
        .filter(|s| s["name"] == "cuflight_step_seconds_bucket")
        .map(|s| (s["labels"]["le"].as_str().unwrap().to_string(), s["value"].as_f64().unwrap()))
        .collect();
    (buckets, named("_count"), named("_sum"))
}

/// A stepper's NVTX steps (4 launches and a synchronisation each, about 0.1-0.3 ms on cudasim, the CPU test
/// double) are counted in the windows, cumulative by bound, in both exposition formats; the same program replaying
/// its step as a CUDA graph reads as "graph replay" iterations.
#[test]
fn steps_in_windows_make_a_histogram_per_kind() {
    let _serial = serial();
    let dir = scratch("serve-steps");
    let (eager, graphed) = (stepper(&dir, 4), stepper_with(&dir, &["4", "graph"]));
    let args = ["--duty", "300ms/500ms", "--rounds", "4"];
    let pids = [eager.child.id().to_string(), graphed.child.id().to_string()];
    let (mut serve, addr, _err) = start_serve(&[&args[..], &[pids[0].as_str(), pids[1].as_str()]].concat());
    std::thread::sleep(Duration::from_millis(1700));
    let m = scrape(&addr, &dir, 1);
    let open = scrape_as(&addr, &dir, 2, true);
    assert!(serve.wait().unwrap().success());
    let ran = eager.child.id();
    for (pid, kind) in [(ran, "step"), (graphed.child.id(), "graph replay")] {
        let (buckets, count, sum) = histogram(&m, pid, kind);
        assert!(count >= 100.0, "{count} {kind} steps of pid {pid}: {}", m["cuflight_step_seconds"]);
        let mean = sum / count;
        assert!((2e-5..0.02).contains(&mean), "{kind}: {mean} s a step");
        // Cumulative, ending at the count.
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        assert_eq!(buckets.last().unwrap(), &("+Inf".to_string(), count), "{buckets:?}");
        let (_, open_count, _) = histogram(&open, pid, kind);
        assert!(open_count >= count, "OpenMetrics: {open_count} against {count}");
    }
    assert_eq!(open["cuflight_step_seconds"]["type"], "histogram");
    eager.end();
    graphed.end();
}
