//! What a long-lived agent goes through and must come out of unchanged: a hundred attach cycles (no descriptor,
//! thread or memory of ours left), other users (who neither see nor control it), and a fork of the attached
//! program.

use super::*;

/// Open descriptors, threads and resident memory (KiB) of a process.
fn footprint(pid: u32) -> (usize, usize, u64) {
    let count = |dir: String| std::fs::read_dir(dir).map_or(0, |d| d.count());
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.trim().split(' ').next()?.parse().ok());
    (count(format!("/proc/{pid}/fd")), count(format!("/proc/{pid}/task")), rss.unwrap_or(0))
}

#[test]
fn a_hundred_attach_cycles_leave_no_descriptor_thread_or_memory_behind() {
    let dir = scratch("agents-cycles");
    // CUDA 13.0, as on the H100 the cycles were measured on: one subscriber at a time, which the agent finalizes
    // (13.5's multi-subscriber mode shares CUPTI with other tools, so there it only unsubscribes).
    let mut server = Server::start_with_cupti(&dir, Some("13.0"));
    let pid = server.child.id();
    let trace = dir.join("cycle.cuf");
    let cycle = |n: usize| {
        for _ in 0..n {
            let out = Command::new(cuflight_bin())
                .args(["attach", &pid.to_string(), "--duration", "5ms", "--force", "-o"])
                .arg(&trace)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
    };
    cycle(5); // the first attach loads CUPTI and makes the segment: measured after it
    let (fds, threads, rss) = footprint(pid);
    let finalized = |server: &mut Server| -> i64 {
        server.cmd("f").strip_prefix("finalized ").and_then(|n| n.parse().ok()).expect("finalized N")
    };
    let before = finalized(&mut server);
    cycle(100);
    let (fds2, threads2, rss2) = footprint(pid);
    assert_eq!((fds2, threads2), (fds, threads), "descriptors and threads after 100 cycles");
    // What CUPTI keeps of each finalized session (cudasim models the H200's 74 KB, CUDASIM_CUPTI_FINALIZE_KEEPS_KB)
    // and nothing of the agent's: the growth is CUPTI's, within a MiB.
    let cuptis = 100 * 74;
    assert!(rss2 + 1024 > rss + cuptis && rss2 < rss + cuptis + 1024, "resident memory {rss} -> {rss2} KiB");
    // The agent counts its CUPTI sessions, for collectors that attach again and again (`cuflight serve`).
    let row = server_row(&ps(), pid).expect("listed");
    assert_eq!(row["cupti_sessions"], 105, "{row}");
    let table = Command::new(cuflight_bin()).arg("ps").output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    let line = table.lines().find(|l| l.split_whitespace().next() == Some(&pid.to_string())).unwrap_or_default();
    assert_eq!(line.split_whitespace().nth(5), Some("105"), "SESSIONS column: {table}");
    // Each detach finalized CUPTI (an idle program: from the agent's own trivial call), so the program pays
    // nothing for having been profiled.
    assert_eq!(finalized(&mut server) - before, 100, "cuptiFinalize once per detach");
    assert_eq!(server.cmd("s"), "subscribed", "CUPTI is free after the last detach");
    // CUPTI, initialised again by the next attach, records a window exactly.
    let after = dir.join("after.cuf");
    let attach = attach_in_background(pid, &after, &["--duration", "60s"]);
    assert_eq!(server.cmd("k 3"), "done 3");
    assert!(Command::new("kill").args(["-TERM", &attach.id().to_string()]).status().unwrap().success());
    assert!(attach.wait_with_output().unwrap().status.success());
    assert_eq!(count(&stats(&after), "kernels", "name", "tick"), 3);
    assert_eq!(server.cmd("k 2"), "done 2");
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
}

#[test]
fn strangers_neither_see_nor_control_an_agent() {
    let Some(_) = as_other_user(65534) else { return };
    let dir = scratch("agents-strangers");
    let open = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    };
    open(&dir);
    let as_user = |uid: &str| as_other_user(uid.parse().unwrap()).expect("reachable for one user, so for all");
    let prog = build_c("server", &dir);
    // The agent's process belongs to uid 65534.
    let mut owner = as_user("65534");
    let mut child = owner
        .arg(cuflight_bin())
        .args(["launch", "--"])
        .arg(&prog)
        .arg("0")
        .env("LD_LIBRARY_PATH", cudasim_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "server: ready");
    let pid = child.id();
    // Root sees it; uid 65533 neither sees nor attaches to it.
    assert!(server_row(&ps(), pid).is_some());
    let listed = as_user("65533").arg(cuflight_bin()).args(["ps", "--format", "json"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "[]");
    let attached = as_user("65533")
        .arg(cuflight_bin())
        .args(["attach", &pid.to_string(), "--duration", "100ms", "-o"])
        .arg(dir.join("stranger.cuf"))
        .output()
        .unwrap();
    assert_eq!(attached.status.code(), Some(1));
    assert!(!dir.join("stranger.cuf").exists());
    // Its own user may.
    let mine = as_user("65534")
        .arg(cuflight_bin())
        .args(["attach", &pid.to_string(), "--duration", "200ms", "-o"])
        .arg(dir.join("owner.cuf"))
        .output()
        .unwrap();
    assert!(mine.status.success(), "{}", String::from_utf8_lossy(&mine.stderr));
    assert!(count(&stats(&dir.join("owner.cuf")), "kernels", "name", "tick") > 0);
    // So may root (whose `cuflight serve` follows every user's agents): the session's listener is named for the
    // agent's user and accepts only that user's segments.
    let root = Command::new(cuflight_bin())
        .args(["attach", &pid.to_string(), "--duration", "200ms", "--force", "-o"])
        .arg(dir.join("root.cuf"))
        .output()
        .unwrap();
    assert!(root.status.success(), "{}", String::from_utf8_lossy(&root.stderr));
    assert!(count(&stats(&dir.join("root.cuf")), "kernels", "name", "tick") > 0);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}

#[test]
fn a_fork_child_of_an_attached_process_stays_quiet_and_unharmed() {
    let dir = scratch("agents-attach-fork");
    let mut server = Server::start(&dir);
    let pid = server.child.id();
    let trace = dir.join("fork.cuf");
    let attach = attach_in_background(pid, &trace, &["--duration", "60s"]);
    // The child has no control thread, so nobody could detach it: it records nothing and never blocks.
    assert_eq!(server.cmd("F"), "done");
    assert_eq!(server.cmd("r parent 2"), "done");
    assert!(Command::new("kill").args(["-INT", &attach.id().to_string()]).status().unwrap().success());
    ended_by_itself(attach, "interrupted");
    let s = stats(&trace);
    assert_eq!(count(&s, "nvtx", "name", "child"), 0, "{}", s["nvtx"]);
    assert_eq!(count(&s, "nvtx", "name", "parent"), 1, "{}", s["nvtx"]);
    assert_eq!(s["processes"].as_array().unwrap().len(), 1);
    // A child of a dormant process, too.
    wait_for_agent_state(pid, "dormant");
    assert_eq!(server.cmd("F"), "done");
    drop(server.stdin);
    assert!(server.child.wait().unwrap().success());
}
