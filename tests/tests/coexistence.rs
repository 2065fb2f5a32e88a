//! cuflight beside another CUPTI tool in the same process, on cudasim (the CPU test double for the driver,
//! runtime and CUPTI). From CUPTI 13.5 both subscribe in multi-subscriber mode and each sees everything; below it,
//! or when the other tool took CUPTI alone, `attach` is refused naming it. Also what a program states once (thread
//! names, NVTX domains and registered strings) reaching every later window and dump.

use cuflight_integration::*;
use std::process::Command;

#[test]
fn on_13_5_cuflight_and_another_tool_both_record_whoever_came_first() {
    let dir = scratch("coexist-multi");
    let mut server = Server::start(&dir, &[], &[]);
    let pid = server.pid();
    // The other tool (as torch.profiler would on 13.5) subscribes first, asking for multi-subscriber mode.
    assert_eq!(server.cmd("M"), "subscribed");
    let first = dir.join("after-tool.cuf");
    let window = spawn_attach(pid, &first, &["--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording");
    assert_eq!(server.cmd("k 6"), "done 6");
    let err = end_attach_window(window);
    assert!(err.contains("interrupted"), "{err}");
    let s = stats(&first);
    assert_eq!(count(&s, "kernels", "name", "tick"), 6, "cuflight saw every kernel");
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 6);
    // ... and so did the tool, whose subscription outlives cuflight's window.
    assert_eq!(server.cmd("m"), "tool 6 6");
    assert_eq!(server.cmd("k 2"), "done 2");
    assert_eq!(server.cmd("m"), "tool 8 8", "the tool records on after cuflight detached");
    assert_eq!(server.cmd("W"), "done");
    // cuflight first, the tool joins while it records.
    let second = dir.join("before-tool.cuf");
    let window = spawn_attach(pid, &second, &["--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording");
    assert_eq!(server.cmd("M"), "subscribed");
    assert_eq!(server.cmd("k 3"), "done 3");
    assert_eq!(server.cmd("m"), "tool 11 11");
    end_attach_window(window);
    assert_eq!(count(&stats(&second), "kernels", "name", "tick"), 3);
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
}

#[test]
fn a_tool_that_took_cupti_alone_or_an_older_cupti_refuses_the_second_one_by_name() {
    // 13.5, but the tool subscribed the legacy way (one subscriber only): attach names it and leaves.
    let dir = scratch("coexist-single");
    let mut server = Server::start(&dir, &[], &[]);
    assert_eq!(server.cmd("S"), "subscribed");
    let out = Command::new(cuflight_bin())
        .args(["attach", &server.pid().to_string(), "--duration", "5s", "-o"])
        .arg(dir.join("refused.cuf"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("another CUPTI client") && err.lines().count() == 1, "{err}");
    assert!(server.end().0.success());
    // 13.3: no multi-subscriber mode. While cuflight records, the tool is refused, naming cuflight.
    let dir = scratch("coexist-13.3");
    let mut server = Server::start(&dir, &[], &[("CUDASIM_CUPTI_VERSION", "13.3")]);
    let trace = dir.join("t.cuf");
    let window = spawn_attach(server.pid(), &trace, &["--duration", "60s"], &[]);
    wait_for_agent_state(server.pid(), "recording");
    assert_eq!(server.cmd("M"), "refused CUPTI for cuflight");
    assert_eq!(server.cmd("k 2"), "done 2");
    end_attach_window(window);
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 2);
    assert_eq!(server.cmd("M"), "subscribed", "free again once cuflight detached");
    assert!(server.end().0.success());
}

#[test]
fn names_given_before_a_window_or_a_dumps_span_are_in_it() {
    // Thread names come once, from nvtxNameOsThread: a later attach window and a flight-recorder dump whose
    // rings overwrote that event still name the thread.
    let dir = scratch("names-repeated");
    let mut server = Server::start(&dir, &[], &[]);
    assert_eq!(server.cmd("n main-loop"), "done");
    for n in 1..=2 {
        let trace = dir.join(format!("w{n}.cuf"));
        let window = spawn_attach(server.pid(), &trace, &["--duration", "60s"], &[]);
        wait_for_agent_state(server.pid(), "recording");
        assert_eq!(server.cmd("k 1"), "done 1");
        end_attach_window(window);
        let json = export_chrome(&trace, &dir.join(format!("w{n}.json"))).to_string();
        assert!(json.contains("main-loop"), "window {n} names the thread");
    }
    assert!(server.end().0.success());
    let mut server = Server::start(&dir, &["--flight-recorder", "60s"], &[("CUFLIGHT_RING_EVENTS", "256")]);
    assert_eq!(server.cmd("n main-loop"), "done");
    assert_eq!(server.cmd("k 1000"), "done 1000");
    let trace = dir.join("dump.cuf");
    let out = Command::new(cuflight_bin())
        .args(["dump", &server.pid().to_string(), "--force", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(export_chrome(&trace, &dir.join("dump.json")).to_string().contains("main-loop"));
    assert!(server.end().0.success());
}

#[test]
fn domains_and_strings_registered_while_dormant_name_every_later_window() {
    // NCCL makes its NVTX domain and registers its ranges' names when it initialises: in a server started with
    // `cuflight launch`, before any window. The handles NVTX hands the program then must still name them in
    // each window (they had been the null handle: ranges of the default domain with no name).
    let dir = scratch("handles-dormant");
    let mut server = Server::start(&dir, &[], &[]);
    assert_eq!(server.cmd("d 1"), "done", "domain and string made while dormant");
    for n in 1..=2 {
        let trace = dir.join(format!("w{n}.cuf"));
        let window = spawn_attach(server.pid(), &trace, &["--duration", "60s"], &[]);
        wait_for_agent_state(server.pid(), "recording");
        assert_eq!(server.cmd("d 3"), "done");
        end_attach_window(window);
        let s = stats(&trace);
        let ranges = rows(&s, "nvtx", "kind", "range");
        let named: Vec<_> = ranges.iter().map(|r| (r["domain"].as_str(), r["name"].as_str())).collect();
        assert_eq!(named, [(Some("NCCL"), Some("ncclAllReduce"))], "window {n}: {}", s["nvtx"]);
        assert_eq!(ranges[0]["count"], 3, "window {n}");
    }
    assert!(server.end().0.success());
}

#[test]
fn each_window_keeps_its_own_names_however_many_came_before() {
    // A server that names each request uniquely: 2,500 names of 1 KB a window. Strings of earlier windows had
    // stayed in the 4 MiB string region for the life of the process: the second window kept fewer than half of
    // its names, and every window after it none.
    let dir = scratch("names-per-window");
    let mut server = Server::start(&dir, &[], &[]);
    for n in 1..=3 {
        let trace = dir.join(format!("w{n}.cuf"));
        let window = spawn_attach(server.pid(), &trace, &["--duration", "60s"], &[]);
        wait_for_agent_state(server.pid(), "recording");
        assert_eq!(server.cmd("N 2500"), "done");
        let err = end_attach_window(window);
        assert!(!err.contains("names not kept"), "window {n}: {err}");
        let s = stats(&trace);
        let named = rows(&s, "nvtx", "kind", "range")
            .iter()
            .filter(|r| r["name"].as_str().is_some_and(|n| n.starts_with("request ")))
            .count();
        assert_eq!(named, 2500, "window {n}");
        assert!(s["processes"].to_string().contains("server"), "window {n} names its process: {}", s["processes"]);
    }
    assert!(server.end().0.success());
}

#[test]
fn threads_carry_their_os_names_unless_the_program_named_them_through_nvtx() {
    // The main thread is named through NVTX ("main-loop"), the side thread only by pthread_setname_np: each
    // window names both, the NVTX name first (the OS calls the main thread "server").
    let dir = scratch("os-thread-names");
    let mut server = Server::start(&dir, &[], &[]);
    assert_eq!(server.cmd("n main-loop"), "done");
    assert_eq!(server.cmd("b 5"), "done");
    for n in 1..=2 {
        let trace = dir.join(format!("w{n}.cuf"));
        let window = spawn_attach(server.pid(), &trace, &["--duration", "60s"], &[]);
        wait_for_agent_state(server.pid(), "recording");
        assert_eq!(server.cmd("k 1"), "done 1");
        std::thread::sleep(std::time::Duration::from_millis(50));
        end_attach_window(window);
        let json = export_chrome(&trace, &dir.join(format!("w{n}.json")));
        let names: Vec<&str> = json["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "thread_name")
            .filter_map(|e| e["args"]["name"].as_str())
            .collect();
        assert!(names.contains(&"main-loop") && names.contains(&"side-stepper"), "window {n}: {names:?}");
        assert!(!names.contains(&"server"), "window {n}: the NVTX name stands: {names:?}");
    }
    assert!(server.cmd("B").starts_with("done"));
    assert!(server.end().0.success());
}
