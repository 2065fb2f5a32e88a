//! What a window's end leaves in the program, on cudasim (the CPU test double for the driver, runtime and CUPTI):
//! CUPTI finalized or only unsubscribed (agent/src/teardown.rs), and the next window whole after either.

use cuflight_integration::*;
use std::process::Command;

/// `tests/c/server.c cmd` under `cuflight launch`, on cudasim modelling CUPTI 13.0 (one subscriber at a time, which
/// a detach finalizes where it may; 13.5's multi-subscriber mode only unsubscribes).
fn server(dir: &std::path::Path) -> Server {
    Server::start(dir, &[], &[("CUDASIM_CUPTI_VERSION", "13.0")])
}

/// cudasim's count of `cuptiFinalize` teardowns in the server.
fn finalized(server: &mut Server) -> i64 {
    server.cmd("f").strip_prefix("finalized ").and_then(|n| n.parse().ok()).expect("finalized N")
}

/// Ends a window started by [`attach_in_background`] and waits for the agent to be dormant again.
fn end_window(server: &Server, attach: std::process::Child) {
    assert!(Command::new("kill").args(["-TERM", &attach.id().to_string()]).status().unwrap().success());
    let out = attach.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    wait_for_agent_state(server.pid(), "dormant");
}

/// A call in flight when a window ends never delivers its exit to the agent (CUPTI is finalized, or unsubscribed):
/// the thread's call depth from that window must not make its driver calls in the next window look like the
/// runtime's own (they were dropped as nested).
#[test]
fn a_call_in_flight_at_a_detach_leaves_the_next_window_whole() {
    let dir = scratch("detach-inflight");
    let mut server = server(&dir);
    let pid = server.pid();
    let attach = attach_in_background(pid, &dir.join("first.cuf"), &["--duration", "300ms"]);
    // The main thread waits 1 s in cudaDeviceSynchronize: the window ends meanwhile.
    assert_eq!(server.cmd("h 1"), "done");
    assert!(attach.wait_with_output().unwrap().status.success());
    wait_for_agent_state(pid, "dormant");
    let second = dir.join("second.cuf");
    let attach = attach_in_background(pid, &second, &["--duration", "60s"]);
    assert_eq!(server.cmd("D"), "done");
    end_window(&server, attach);
    let s = stats(&second);
    assert_eq!(count(&s, "api", "name", "cuLaunchKernel"), 1, "{}", s["api"]);
    assert!(server.end().0.success());
}

/// A program that replays CUDA graphs keeps CUPTI loaded after a detach (only unsubscribed): finalizing one on an
/// H200 killed a graph-replaying server (agent/src/teardown.rs). A program without graphs is finalized, and
/// `CUFLIGHT_FINALIZE=always` finalizes a graph program too. Every window after either records whole.
#[test]
fn a_program_that_replays_cuda_graphs_is_unsubscribed_not_finalized() {
    let dir = scratch("detach-graphs");
    let mut server = server(&dir);
    let pid = server.pid();
    // Without graphs: finalized once.
    let attach = attach_in_background(pid, &dir.join("plain.cuf"), &["--duration", "60s"]);
    assert_eq!(server.cmd("k 3"), "done 3");
    end_window(&server, attach);
    assert_eq!(finalized(&mut server), 1, "a window without graphs finalizes");
    // Graphs captured and replayed in a window: unsubscribed, CUPTI free for another tool, nothing finalized.
    for n in 1..=2 {
        let trace = dir.join(format!("graphs-{n}.cuf"));
        let attach = attach_in_background(pid, &trace, &["--duration", "60s"]);
        assert_eq!(server.cmd("R 5"), "done 5");
        end_window(&server, attach);
        assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 10, "window {n}: 5 replays of 2 kernels");
        assert_eq!(finalized(&mut server), 1, "window {n} with graph replays left CUPTI loaded");
        assert_eq!(server.cmd("s"), "subscribed", "window {n}: CUPTI is free after the detach");
    }
    // Ordinary kernels later in the same process: it has used graphs, so still not finalized.
    let trace = dir.join("after.cuf");
    let attach = attach_in_background(pid, &trace, &["--duration", "60s"]);
    assert_eq!(server.cmd("k 2"), "done 2");
    end_window(&server, attach);
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 2);
    assert_eq!(finalized(&mut server), 1);
    assert!(server.end().0.success());

    // CUFLIGHT_FINALIZE=always (the agent reads it from the program's environment).
    let mut server = Server::start(&dir, &[], &[("CUDASIM_CUPTI_VERSION", "13.0"), ("CUFLIGHT_FINALIZE", "always")]);
    let attach = attach_in_background(server.pid(), &dir.join("always.cuf"), &["--duration", "60s"]);
    assert_eq!(server.cmd("R 3"), "done 3");
    end_window(&server, attach);
    assert_eq!(finalized(&mut server), 1, "CUFLIGHT_FINALIZE=always finalizes a graph program");
    assert!(server.end().0.success());
}
