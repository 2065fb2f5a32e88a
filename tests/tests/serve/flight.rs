//! A program under `cuflight launch --flight-recorder` records all the time: serve follows it by snapshots a second
//! apart (as `cuflight dump PID` takes them), with no window and no CUPTI session of its own.

use super::*;

/// Counted once each: between two scrapes 6 s apart, the window-seconds counter keeps up with the clock and the
/// launches counted match the program's rate (a snapshot that counted again what the one before had would double
/// them, and snapshots spaced out by serve's 1.8 s windows on a dormant program would lose what the rings could
/// not hold); the process stays a flight recorder with its one CUPTI session, and the
/// recording's cost is said.
#[test]
fn a_flight_recorder_is_followed_by_snapshots_that_count_each_event_once() {
    let _serial = serial();
    let dir = scratch("serve-flight");
    let flags = ["--flight-recorder", "30s", "--dump-dir", dir.to_str().unwrap()];
    let stepper = launched_stepper(&dir, &flags, &["4"]);
    let pid = stepper.child.id();
    let dormant = stepper_with(&dir, &["1"]);
    let (mut serve, addr, mut err) = start_serve(&["--duty", "1800ms/2s"]);
    std::thread::sleep(Duration::from_millis(2500));
    let first = scrape(&addr, &dir, 0);
    let since = Instant::now();
    std::thread::sleep(Duration::from_millis(6000));
    let second = scrape(&addr, &dir, 1);
    let span = since.elapsed().as_secs_f64();
    let _ = Command::new("kill").arg(serve.id().to_string()).status();
    assert!(serve.wait().unwrap().success());
    let mut said = String::new();
    err.read_to_string(&mut said).unwrap();
    assert!(!said.contains("wrapped"), "snapshots a second apart, whatever the windows: {said}");
    let rate = stepper.end() * 4.0;
    dormant.end();
    for m in [&first, &second] {
        let states: Vec<_> = m["cuflight_agent_state"]["samples"].as_array().unwrap().iter().collect();
        assert!(states.iter().any(|s| s["labels"]["state"] == "flight recorder"), "{states:?}");
        assert_eq!(value(m, "cuflight_agent_cupti_sessions", pid), 1.0, "no window was opened");
    }
    let covered = value(&second, "cuflight_window_seconds", pid) - value(&first, "cuflight_window_seconds", pid);
    let launches = value(&second, "cuflight_kernel_launches", pid) - value(&first, "cuflight_kernel_launches", pid);
    assert!((covered / span - 1.0).abs() <= 0.3, "covered {covered:.2} s of {span:.2} s");
    assert!(
        (launches / (rate * span) - 1.0).abs() <= 0.3,
        "counted {launches} launches in {span:.2} s, the program ran {rate:.0}/s"
    );
    assert!(value(&second, "cuflight_agent_overhead_ratio", pid) > 0.0, "a flight recorder pays for its recording");
    assert!(value(&second, "cuflight_window_period_seconds", pid) == 0.0, "recorded all along");
}
