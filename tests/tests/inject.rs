//! `cuflight attach --inject`: recording a process that was started without cuflight, on cudasim (the CPU test
//! double for the driver, runtime and CUPTI). The agent is loaded through ptrace and the process's own dlopen.

use cuflight_integration::*;
use std::process::{Command, Stdio};

fn ptrace_allowed() -> bool {
    // Seccomp or a missing capability forbid ptrace in some CI containers; the refusal itself is tested then.
    !std::fs::read_to_string("/proc/self/status").is_ok_and(|s| s.contains("Seccomp:\t2"))
}

/// `attach --inject PID --duration D --force -o OUT`, which must succeed.
fn inject_for(pid: u32, duration: &str, out: &std::path::Path) {
    let run = Command::new(cuflight_bin())
        .args(["attach", "--inject", &pid.to_string(), "--duration", duration, "--force", "-o"])
        .arg(out)
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
}

#[test]
fn a_server_started_plainly_is_injected_recorded_twice_and_ends_as_usual() {
    let dir = scratch("inject-plain");
    let mut server = Server::plain(&dir, &[]);
    let pid = server.pid();
    assert_eq!(server.cmd("k 4"), "done 4"); // before any agent: never recorded
    let first = dir.join("first.cuf");
    let window = spawn_attach(pid, &first, &["--inject", "--duration", "60s"], &[]);
    if !ptrace_allowed() {
        let out = window.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains("cannot ptrace") && err.lines().count() == 1, "{err}");
        return;
    }
    wait_for_agent_state(pid, "recording");
    assert_eq!(server.cmd("k 7"), "done 7");
    end_attach_window(window);
    wait_for_agent_state(pid, "dormant");
    let s = stats(&first);
    assert_eq!(s["processes"][0]["injected_late"], true, "the trace says the agent came late");
    assert_eq!(count(&s, "kernels", "name", "tick"), 7);
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 7);
    assert!(s["devices"][0]["name"].as_str().is_some_and(|n| n.contains("H100")), "{}", s["devices"]);
    // The agent stays, dormant: a second window needs no injection (and --inject finds it there).
    assert_eq!(server.cmd("k 2"), "done 2");
    let second = dir.join("second.cuf");
    let window = spawn_attach(pid, &second, &["--inject", "--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording");
    assert_eq!(server.cmd("k 3"), "done 3");
    end_attach_window(window);
    assert_eq!(count(&stats(&second), "kernels", "name", "tick"), 3);
    // The program carries on and ends with its own output and status.
    assert_eq!(server.cmd("k 1"), "done 1");
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
    assert!(!err.contains("cuflight"), "the injected agent says nothing on the program's output: {err}");
}

#[test]
fn injecting_into_what_cannot_take_it_is_refused_in_one_line() {
    let dir = scratch("inject-refused");
    let missing = Command::new(cuflight_bin())
        .args(["attach", "--inject", "4194999", "--duration", "1s", "-o"])
        .arg(dir.join("none.cuf"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success() && err.contains("does not exist") && err.lines().count() == 1, "{err}");
    assert!(!dir.join("none.cuf").exists());
}

#[test]
fn another_users_process_is_refused_and_keeps_running() {
    let Some(_) = as_other_user(65534) else { return };
    let dir = scratch("inject-stranger");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let as_user = |uid: &str| as_other_user(uid.parse().unwrap()).expect("reachable for one user, so for all");
    let prog = build_c("server", &dir);
    let mut owner = as_user("65534");
    owner.arg(&prog).arg("cmd");
    let mut server = Server::spawn(owner, &[]);
    let out = as_user("65533")
        .arg(cuflight_bin())
        .args(["attach", "--inject", &server.pid().to_string(), "--duration", "1s", "-o", "/tmp/never-written.cuf"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("belongs to user 65534") && err.lines().count() == 1, "{err}");
    assert_eq!(server.cmd("k 2"), "done 2", "untouched");
    assert!(server.end().0.success());
}

#[test]
fn nvtx_ranges_are_recorded_from_tables_found_late_whether_nvtx_started_before_or_not() {
    // The server's NVTX (header-only v3, hidden in the executable) either already ran without an injection
    // (its slots emptied: COMPLETE) or has not run yet (FRESH, on its lazy-init functions). Either way the
    // agent finds the table by its shape and fills it; a range pushed after the window opens is recorded.
    if !ptrace_allowed() {
        return;
    }
    let dir = scratch("inject-nvtx");
    for nvtx_before in [true, false] {
        let mut server = Server::plain(&dir, &[]);
        if nvtx_before {
            assert_eq!(server.cmd("t 2 1"), "done");
        }
        let trace = dir.join("nvtx.cuf");
        let window = spawn_attach(server.pid(), &trace, &["--inject", "--duration", "60s"], &[]);
        wait_for_agent_state(server.pid(), "recording");
        assert_eq!(server.cmd("t 3 2"), "done");
        assert_eq!(server.cmd("n late-worker"), "done");
        end_attach_window(window);
        let s = stats(&trace);
        let p = &s["processes"][0];
        assert_eq!((p["injected_late"].as_bool(), p["nvtx_tables_late"].as_u64()), (Some(true), Some(1)), "{p}");
        assert_eq!(count(&s, "nvtx", "name", "step"), 3, "NVTX used before the injection: {nvtx_before}");
        assert_eq!(count(&s, "kernels", "name", "tick"), 6);
        // NVTX keeps working for the program after the window, with the agent dormant.
        assert_eq!(server.cmd("t 2 1"), "done");
        let (status, err) = server.end();
        assert!(status.success(), "{err}");
    }
}

#[test]
fn killing_cuflight_at_any_moment_of_an_injection_leaves_the_server_working() {
    if !ptrace_allowed() {
        return;
    }
    let dir = scratch("inject-killed");
    // A fresh server for each moment: cuflight is SIGKILLed 0, 1, 3, ... ms into `attach --inject` (finding
    // dlopen, seizing the thread, running the call, restoring it, waiting for the agent, recording).
    for delay_ms in [0u64, 1, 3, 6, 10, 20, 40, 80] {
        let mut server = Server::plain(&dir, &[]);
        assert_eq!(server.cmd("k 1"), "done 1");
        let mut attach = Command::new(cuflight_bin())
            .args(["attach", "--inject", &server.pid().to_string(), "--duration", "60s", "--force", "-o"])
            .arg(dir.join("killed.cuf"))
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        attach.kill().unwrap();
        attach.wait().unwrap();
        // The server answers, keeps launching, and ends as usual.
        for _ in 0..3 {
            assert_eq!(server.cmd("k 5"), "done 5", "killed after {delay_ms} ms");
        }
        let (status, err) = server.end();
        assert!(status.success(), "killed after {delay_ms} ms: {status:?} {err}");
    }
}

#[test]
fn killing_the_injection_helper_at_each_step_leaves_the_server_working() {
    // SIGKILL cannot be blocked: the helper that holds the thread dies at the step it is at. Before the call the
    // kernel lets the thread go untouched; from "registers set" on, the thread runs the stub, which calls dlopen
    // and puts itself back with no one watching.
    if !ptrace_allowed() {
        return;
    }
    let dir = scratch("inject-helper-killed");
    for step in ["stopped", "written", "registers set", "returned"] {
        let mut server = Server::plain(&dir, &[]);
        assert_eq!(server.cmd("k 1"), "done 1");
        let mut attach = Command::new(cuflight_bin())
            .args(["attach", "--inject", &server.pid().to_string(), "--duration", "60s", "--force", "-o"])
            .arg(dir.join("killed.cuf"))
            .env("CUFLIGHT_INJECT_PAUSE_MS", "400")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::io::BufReader::new(attach.stderr.take().unwrap());
        let mut seen = Vec::new();
        for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            seen.push(line.clone());
            let Some(rest) = line.strip_prefix("cuflight-inject: helper ") else { continue };
            let (helper, at) = rest.split_once(" at ").unwrap();
            if at == step {
                // SAFETY: kill(2) of the helper's pid, read from its own line.
                assert_eq!(unsafe { libc::kill(helper.parse().unwrap(), libc::SIGKILL) }, 0);
                break;
            }
        }
        assert!(seen.iter().any(|l| l.ends_with(&format!(" at {step}"))), "{step} never reached: {seen:?}");
        let _ = attach.kill();
        attach.wait().unwrap();
        for _ in 0..3 {
            assert_eq!(server.cmd("k 5"), "done 5", "helper killed at {step}");
        }
        let (status, err) = server.end();
        assert!(status.success(), "helper killed at {step}: {status:?} {err}");
    }
}

#[test]
fn ps_all_lists_cuda_processes_without_an_agent() {
    // CUDA processes are found by the names of the files they map (libcuda.so.*, libcudart.so.*): cudasim's names
    // are symlinks to libcudasim.so, so this server loads it through hard links carrying the real names.
    let dir = scratch("inject-ps-all");
    let libs = dir.join("libs");
    let _ = std::fs::remove_dir_all(&libs);
    std::fs::create_dir_all(&libs).unwrap();
    let sim = cudasim_dir().join("libcuda.so.1").canonicalize().unwrap();
    for name in ["libcuda.so", "libcuda.so.1", "libcudart.so", "libcudart.so.13", "libcupti.so", "libcupti.so.13"] {
        std::fs::hard_link(&sim, libs.join(name)).unwrap();
    }
    let mut server = Server::plain(&dir, &[("LD_LIBRARY_PATH", libs.to_str().unwrap())]);
    let pid = server.pid().to_string();
    let ps = |all: bool| {
        let mut c = Command::new(cuflight_bin());
        c.arg("ps");
        if all {
            c.arg("--all");
        }
        String::from_utf8_lossy(&c.output().unwrap().stdout).into_owned()
    };
    assert!(!ps(false).lines().any(|l| l.contains(&pid)), "no agent, not listed by default");
    let all = ps(true);
    assert!(all.lines().any(|l| l.contains(&pid) && l.contains("no agent") && l.contains("server cmd")), "{all}");
    assert_eq!(server.cmd("k 1"), "done 1");
    assert!(server.end().0.success());
}

#[test]
fn a_process_in_another_mount_namespace_gets_a_copy_of_the_agent() {
    // As in a container sharing the host's network (Apptainer, enroot): the agent's path is hidden from the
    // process by a mount of its own, so the agent goes in through a copy in its /tmp, removed once loaded.
    let dir = scratch("inject-mountns");
    let outside = std::env::temp_dir().join(format!("cuflight-mountns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&outside).unwrap();
    let prog = build_c("server", &dir);
    std::fs::copy(&prog, outside.join("server")).unwrap();
    // One copy of the simulator under its real names (symlinks: one library, one state, as cudasim's own dir).
    std::fs::copy(cudasim_dir().join("libcudart.so").canonicalize().unwrap(), outside.join("libcudasim.so")).unwrap();
    for name in ["libcuda.so.1", "libcudart.so", "libcupti.so.13", "libcupti.so"] {
        std::os::unix::fs::symlink("libcudasim.so", outside.join(name)).unwrap();
    }
    let hidden = cuflight_bin().parent().unwrap().to_path_buf();
    let script = format!("mount -t tmpfs none {} && exec {}/server cmd", hidden.display(), outside.display());
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c", &script]);
    if !Command::new("unshare").args(["-m", "true"]).status().is_ok_and(|s| s.success()) {
        skipped("unshare -m is not permitted here");
        return;
    }
    let mut server = Server::spawn(cmd, &[("LD_LIBRARY_PATH", outside.to_str().unwrap())]);
    let pid = server.pid();
    let trace = dir.join("ns.cuf");
    let window = spawn_attach(pid, &trace, &["--inject", "--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording");
    assert_eq!(server.cmd("k 4"), "done 4");
    end_attach_window(window);
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 4);
    let left: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("cuflight-agent-"))
        .collect();
    assert!(left.is_empty(), "the copy is removed once loaded: {left:?}");
    assert!(server.end().0.success());
    let _ = std::fs::remove_dir_all(&outside);
}

#[test]
fn a_process_in_another_network_namespace_is_injected_listed_and_recorded() {
    // As in `docker run` without --network host: abstract socket names are per network namespace, so the
    // agent's control socket and the collector's session listener must both be reached inside the process's.
    let dir = scratch("inject-netns");
    if !Command::new("unshare").args(["-n", "true"]).status().is_ok_and(|s| s.success()) {
        skipped("unshare -n is not permitted here");
        return;
    }
    let prog = build_c("server", &dir);
    let mut cmd = Command::new("unshare");
    cmd.arg("-n").arg(&prog).arg("cmd");
    let mut server = Server::spawn(cmd, &[]);
    let pid = server.pid();
    assert_eq!(server.cmd("k 1"), "done 1");
    let trace = dir.join("netns.cuf");
    let window = spawn_attach(pid, &trace, &["--inject", "--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording"); // `ps` lists it too
    assert_eq!(server.cmd("k 4"), "done 4");
    end_attach_window(window);
    assert_eq!(count(&stats(&trace), "kernels", "name", "tick"), 4);
    // A second window finds the agent there, dormant.
    let second = dir.join("netns2.cuf");
    let window = spawn_attach(pid, &second, &["--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording");
    assert_eq!(server.cmd("k 2"), "done 2");
    end_attach_window(window);
    assert_eq!(count(&stats(&second), "kernels", "name", "tick"), 2);
    assert!(server.end().0.success());
}

#[test]
fn a_program_whose_main_thread_never_rests_is_injected_through_a_quiet_thread() {
    if !ptrace_allowed() {
        return;
    }
    let dir = scratch("inject-busy");
    let prog = build_c("server", &dir);
    let mut cmd = Command::new(&prog);
    cmd.args(["busy", "4"]);
    let server = Server::spawn(cmd, &[]);
    let pid = server.pid();
    let trace = dir.join("busy.cuf");
    let out = Command::new(cuflight_bin())
        .args(["attach", "--inject", &pid.to_string(), "--duration", "500ms", "--force", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let kernels = count(&stats(&trace), "kernels", "name", "tick");
    assert!(kernels > 100, "the main thread's launches are recorded: {kernels}");
    let mut server = server;
    drop(server.stdin.take());
    let status = server.child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut server.out, &mut rest).unwrap();
    assert!(status.success() && rest.contains("kernels"), "{status:?} {rest}");
}

#[test]
fn a_python_process_using_cuda_is_injected_and_recorded() {
    if !ptrace_allowed() || Command::new("python3").arg("--version").output().is_err() {
        skipped("needs python3 and ptrace");
        return;
    }
    let dir = scratch("inject-python");
    let mut cmd = Command::new("python3");
    cmd.arg(repo_root().join("tests/py/cuda_server.py"));
    let mut server = Server::spawn(cmd, &[]);
    let pid = server.pid();
    let trace = dir.join("python.cuf");
    let window = spawn_attach(pid, &trace, &["--inject", "--duration", "60s"], &[]);
    wait_for_agent_state(pid, "recording");
    assert_eq!(server.cmd("k 5"), "done 5");
    end_attach_window(window);
    let s = stats(&trace);
    let kernels: u64 = s["kernels"].as_array().unwrap().iter().map(|k| k["count"].as_u64().unwrap()).sum();
    assert_eq!(kernels, 5, "{}", s["kernels"]);
    assert_eq!(count(&s, "api", "name", "cudaLaunchKernel"), 5);
    // An agent injected into a running interpreter reads its stacks as one loaded at start does: the window's
    // synchronisation is blamed on the server's own line.
    let script = std::fs::read_to_string(repo_root().join("tests/py/cuda_server.py")).unwrap();
    let line = 1 + script.lines().position(|l| l.contains("rt.cudaDeviceSynchronize() == 0")).unwrap();
    let rows = s["python_sync"].as_array().unwrap();
    let row = rows.iter().find(|r| r["file"].as_str().unwrap().ends_with("tests/py/cuda_server.py"));
    let row = row.unwrap_or_else(|| panic!("no Python line: {rows:?}"));
    assert_eq!((row["line"].as_u64(), row["calls"].as_str()), (Some(line as u64), Some("cudaDeviceSynchronize x1")));
    assert_eq!(server.cmd("k 2"), "done 2");
    let (status, err) = server.end();
    assert!(status.success(), "{err}");
}

#[test]
fn the_interrupted_thread_gets_its_vector_registers_back() {
    if !ptrace_allowed() {
        return;
    }
    // The server's main thread waits in a raw read with values in xmm0 and xmm15; dlopen runs on that very
    // thread (the only quiet one) and uses vector registers freely.
    let dir = scratch("inject-fpregs");
    let mut server = Server::plain(&dir, &[]);
    server.send("v");
    std::thread::sleep(std::time::Duration::from_millis(100));
    inject_for(server.pid(), "100ms", &dir.join("fp.cuf"));
    assert_eq!(server.cmd("go"), "xmm ok");
    assert!(server.end().0.success());
}

#[test]
fn the_interrupted_thread_keeps_its_signal_mask_and_alternate_stack() {
    if !ptrace_allowed() {
        return;
    }
    // The thread that runs dlopen is the main one, waiting for the next command; what the stub puts back must
    // include what no register holds (on aarch64, rt_sigreturn sets both from its frame).
    let dir = scratch("inject-sigstate");
    let mut server = Server::plain(&dir, &[]);
    assert_eq!(server.cmd("G"), "done");
    let before = server.cmd("g");
    assert!(before.ends_with("flags 0 usr2 1"), "{before}");
    inject_for(server.pid(), "100ms", &dir.join("sig.cuf"));
    assert_eq!(server.cmd("g"), before);
    assert!(server.end().0.success());
}
