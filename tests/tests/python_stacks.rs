//! The Python source lines behind CUDA calls (issue 29): a Python program calling cudasim's runtime (the CPU test
//! double) through ctypes, which releases the GIL around each call as PyTorch does, synchronises, copies and
//! allocates at lines it prints itself; `stats --report python_sync_sum` must name exactly those lines, with
//! their functions and call counts, on every CPython from 3.9 to 3.15 found on this machine (the system's
//! python3 always; pyenv's others where installed; Debian's 3.14 and 3.15 where scripts/setup-tests fetched
//! them; the free-threaded 3.13t and 3.14t where it built them).

use cuflight_integration::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The interpreters to try: python3 from PATH, pyenv's newest of each minor version when present, and those
/// scripts/fetch-debian-python unpacked into .cache/python.
fn pythons() -> Vec<PathBuf> {
    let mut found = vec![PathBuf::from("python3")];
    // Debian's own, linked statically with libpython (its symbols exported for extension modules).
    if Path::new("/usr/bin/python3").exists() {
        found.push(PathBuf::from("/usr/bin/python3"));
    }
    let root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv")));
    if let Some(Ok(dir)) = root.map(|r| std::fs::read_dir(r.join("versions"))) {
        let mut versions: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
        versions.sort();
        for minor in 9..=13 {
            let prefix = format!("3.{minor}.");
            if let Some(v) =
                versions.iter().rev().find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
            {
                let bin = v.join(format!("bin/python3.{minor}"));
                if bin.exists() {
                    found.push(bin);
                }
            }
        }
    }
    if let Ok(dir) = std::fs::read_dir(repo_root().join(".cache/python")) {
        let mut versions: Vec<PathBuf> = dir.flatten().map(|e| e.path()).collect();
        versions.sort();
        for v in versions {
            let bin = v.join("bin").join(format!("python{}", v.file_name().unwrap().to_string_lossy()));
            if bin.exists() {
                found.push(bin);
            }
        }
    }
    found
}

/// The program's own account of where it called: what -> (file:line, function).
fn planted_lines(stdout: &str) -> BTreeMap<String, (String, String)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("LINE "))
        .map(|l| {
            let mut parts = l.split(' ');
            let (what, at, func) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
            (what.to_string(), (at.to_string(), func.to_string()))
        })
        .collect()
}

fn record_py(dir: &Path, python: &Path, args: &[&str], flags: &[&str]) -> (Recorded, Value) {
    let script = repo_root().join("tests/py/py_stacks.py");
    let mut all = vec![script.to_str().unwrap()];
    all.extend_from_slice(args);
    let rec = record(dir, flags, python, &all, &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let s = stats(&rec.trace);
    (rec, s)
}

#[test]
fn sync_copy_and_alloc_lines_are_named_on_every_python() {
    let dir = scratch("pystacks-lines");
    for python in pythons() {
        // Two threads started by `threading`, five steps each.
        let (rec, s) = record_py(&dir, &python, &["5", "2"], &[]);
        let planted = planted_lines(&String::from_utf8_lossy(&rec.output.stdout));
        assert_eq!(planted.len(), 4, "{}", String::from_utf8_lossy(&rec.output.stdout));
        let rows = s["python_sync"].as_array().unwrap();
        let by_line = |what: &str| {
            let (at, func) = &planted[what];
            rows.iter()
                .find(|r| format!("{}:{}", r["file"].as_str().unwrap(), r["line"]) == *at)
                .filter(|r| r["function"] == func.as_str())
                .unwrap_or_else(|| panic!("{}: no row for {what} at {at} in {func}: {rows:?}", python.display()))
        };
        assert_eq!(by_line("copy")["calls"], "cudaMemcpy x10", "{}", python.display());
        assert_eq!(by_line("sync")["calls"], "cudaDeviceSynchronize x10", "{}", python.display());
        assert_eq!(by_line("alloc")["calls"], "cudaMalloc x2", "{}", python.display());
        // cudaFree at its own line: four rows, nothing blamed on ctypes' or threading's own files.
        assert_eq!(rows.len(), 4, "{}: {rows:?}", python.display());
        eprintln!("checked on {}", python.display());
    }
}

#[test]
fn a_stripped_interpreter_still_names_the_lines() {
    // Debian's python3 links libpython statically; stripped of its symbol table it keeps the dynamic one that
    // extension modules (and the reader) look CPython's functions up in.
    let Ok(real) = std::fs::canonicalize("/usr/bin/python3") else { return };
    let dir = scratch("pystacks-stripped");
    let stripped = dir.join("python3-stripped");
    std::fs::copy(&real, &stripped).unwrap();
    let ok = std::process::Command::new("strip").arg("--strip-all").arg(&stripped).status();
    assert!(ok.is_ok_and(|s| s.success()), "strip (binutils) runs");
    let script = repo_root().join("tests/py/py_stacks.py");
    // Its standard library is found from the prefix the copy no longer sits under.
    let rec = record(&dir, &[], &stripped, &[script.to_str().unwrap(), "3"], &[("PYTHONHOME", "/usr")]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let s = stats(&rec.trace);
    let planted = planted_lines(&String::from_utf8_lossy(&rec.output.stdout));
    let rows = s["python_sync"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    let (at, func) = &planted["sync"];
    assert!(
        rows.iter()
            .any(|r| format!("{}:{}", r["file"].as_str().unwrap(), r["line"]) == *at && r["function"] == func.as_str()),
        "{rows:?}"
    );
}

#[test]
fn python_stacks_can_be_turned_off() {
    let dir = scratch("pystacks-off");
    let (rec, s) = record_py(&dir, Path::new("python3"), &["3"], &["--python-stacks=off"]);
    assert_eq!(s["python_sync"].as_array().unwrap().len(), 0, "{}", s["python_sync"]);
    assert_eq!(s["processes"][0]["traced"], "cuda,nvtx,memory,overhead");
    assert_eq!(s["processes"][0]["python_stacks"], 0);
    assert!(!rec.stderr().contains("Python stacks"), "{}", rec.stderr());
    let (rec, s) = record_py(&dir, Path::new("python3"), &["3"], &["--trace", "cuda,python"]);
    assert_eq!(s["python_sync"].as_array().unwrap().len(), 4, "{}", s["python_sync"]);
    // What the stacks cost is measured where it is paid and shown: at least one read per synchronising call of
    // the table (its calls counted), each taking some time, and a plausible one (a read takes microseconds; the
    // bound is loose because a loaded machine stretched 9 reads to 10.8 ms, and what a read costs is a
    // benchmark's question: it only catches a unit gone wrong).
    let p = &s["processes"][0];
    let calls: u64 = s["python_sync"].as_array().unwrap().iter().map(|r| r["count"].as_u64().unwrap()).sum();
    let (stacks, ns) = (p["python_stacks"].as_u64().unwrap(), p["python_stack_ns"].as_u64().unwrap());
    assert!(stacks >= calls && calls > 0, "{stacks} stacks for {calls} calls");
    assert!(ns > stacks * 100 && ns < stacks * 100_000_000, "{ns} ns for {stacks} stacks");
    assert!(rec.stderr().contains(&format!("read {stacks} Python stacks in ")), "{}", rec.stderr());
    // An interpreter the reader does not know (3.8, where pyenv has one) runs as before, without stacks, and
    // record and stats say why (a user would otherwise wonder where the source lines went).
    let root = std::env::var_os("HOME").map(|h| Path::new(&h).join(".pyenv/versions"));
    let old = root.and_then(|r| std::fs::read_dir(r).ok()).into_iter().flatten().flatten().find_map(|e| {
        let bin = e.path().join("bin/python3.8");
        bin.exists().then_some(bin)
    });
    if let Some(old) = old {
        let (rec, s) = record_py(&dir, &old, &["3"], &[]);
        assert_eq!(planted_lines(&String::from_utf8_lossy(&rec.output.stdout)).len(), 4);
        assert_eq!(s["python_sync"].as_array().unwrap().len(), 0, "{}", s["python_sync"]);
        let why = "CPython 3.8 is not a release the stack reader knows (3.9 to 3.15)";
        assert_eq!(s["processes"][0]["python_unread"], why, "{}", s["processes"][0]);
        let line = rec.stderr().lines().find(|l| l.contains("no Python stacks in process ")).map(str::to_string);
        assert!(
            line.is_some_and(|l| l.ends_with(&format!("{why}; the report cannot name source lines"))),
            "{}",
            rec.stderr()
        );
        // The report says it beside the process too.
        let report = report_json(&rec.trace);
        let warnings = report["processes"][0]["warnings"].to_string();
        assert!(warnings.contains(&format!("no Python stacks: {why}")), "{warnings}");
    } else {
        skipped("the unknown-release check: no pyenv CPython 3.8 here");
    }
    // A known one says nothing of the kind.
    assert!(s["processes"][0].get("python_unread").is_none(), "{}", s["processes"][0]);
}

#[test]
fn frames_torn_down_under_the_reader_never_crash_it() {
    let dir = scratch("pystacks-stress");
    for python in pythons() {
        // 10,000 stacks read while two threads build and drop deep stacks of freshly compiled code.
        let (rec, s) = record_py(&dir, &python, &["stress", "10000"], &[]);
        assert!(String::from_utf8_lossy(&rec.output.stdout).contains("stress done"));
        let rows = s["python_sync"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{}: {rows:?}", python.display());
        assert_eq!(rows[0]["function"], "stress");
        assert_eq!(rows[0]["count"], 10000, "{}", python.display());
    }
}

#[test]
fn findings_name_the_lines_behind_their_calls() {
    let dir = scratch("pystacks-report");
    let script = repo_root().join("tests/py/py_stacks.py");
    // Every launch's stack read, so the launch line is certain to be seen.
    let rec = record(
        &dir,
        &[],
        Path::new("python3"),
        &[script.to_str().unwrap(), "30"],
        &[("CUFLIGHT_PY_LAUNCH_EVERY", "1")],
    );
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let planted = planted_lines(&String::from_utf8_lossy(&rec.output.stdout));
    let r = report_json(&rec.trace);
    let at = |s: &Value| format!("{}:{}", s["file"].as_str().unwrap(), s["line"]);
    let mut named = 0;
    for f in r["findings"].as_array().unwrap() {
        let sources: Vec<String> = f["sources"].as_array().map(|a| a.iter().map(at).collect()).unwrap_or_default();
        let allowed: Vec<&str> = match f["kind"].as_str().unwrap() {
            "sync_stall" => vec!["copy", "sync"],
            "launch_bound" => vec!["launch"],
            "allocator_churn" => vec!["alloc"],
            _ => vec![],
        };
        for s in &sources {
            assert!(
                allowed.iter().any(|w| planted[*w].0 == *s),
                "{}: {s} is not a planted line: {planted:?}",
                f["kind"]
            );
        }
        named += sources.len();
        if f["kind"] == "sync_stall" {
            // The copy (a synchronous cudaMemcpy) blocks longest: it comes first.
            assert_eq!(sources.first(), Some(&planted["copy"].0), "{}", f["sources"]);
            assert_eq!(f["sources"][0]["function"], "read_loss");
        }
    }
    assert!(named > 0, "no finding names a line: {}", r["findings"]);
    // What the stacks read in steps cost them: every launch's stack was read, each timed by the agent.
    let cost = &r["processes"][0]["python_stacks"];
    let (stacks, in_steps, ns) =
        (cost["stacks"].as_u64().unwrap(), cost["in_steps"].as_u64().unwrap(), cost["in_steps_ns"].as_u64().unwrap());
    assert!(in_steps > 30 && in_steps <= stacks, "{cost}");
    assert!(ns >= in_steps * 100 && cost["share_of_steps"].as_f64().unwrap() > 0.0, "{cost}");
    // The terminal report prints the line's code from the script.
    let text = std::process::Command::new(cuflight_bin()).arg("report").arg(&rec.trace).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("in read_loss: here(\"copy\"); assert rt.cudaMemcpy(host, dev, 64, 2) == 0"), "{text}");
    // And what the stacks cost the steps: a line, or a warning above 0.5% (cudasim's steps are microseconds long).
    assert!(text.contains("  Python stacks: ") || text.contains("reading Python stacks cost"), "{text}");
    // The HTML report too (escaped).
    let html = std::process::Command::new(cuflight_bin())
        .args(["report", "--format", "html"])
        .arg(&rec.trace)
        .output()
        .unwrap();
    let html = String::from_utf8_lossy(&html.stdout);
    let at = format!("at <code>{}</code> in read_loss", planted["copy"].0);
    assert!(html.contains(&at), "{at} not in the HTML report");
}

#[test]
fn timelines_show_the_stacks() {
    let dir = scratch("pystacks-export");
    let script = repo_root().join("tests/py/py_stacks.py");
    let rec = record(&dir, &[], Path::new("python3"), &[script.to_str().unwrap(), "4"], &[]);
    assert!(rec.output.status.success(), "{}", rec.stderr());
    let planted = planted_lines(&String::from_utf8_lossy(&rec.output.stdout));
    let top = |what: &str| {
        let (at, func) = &planted[what];
        format!("{at} in {func}")
    };
    // Perfetto: the stack (innermost first) is an annotation of the call's slice, decoded with the official schema.
    let pf = dir.join("t.pftrace");
    let (ok, err) = cuflight(&["export".as_ref(), rec.trace.as_os_str(), "-f".as_ref(), "-o".as_ref(), pf.as_os_str()]);
    assert!(ok, "{err}");
    let decoded = python_json("check_perfetto.py", &[pf.as_os_str()]);
    let tops: Vec<&str> =
        decoded["python_stack_tops"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for what in ["copy", "sync", "alloc"] {
        assert!(tops.contains(&top(what).as_str()), "{what}: {} not in {tops:?}", top(what));
    }
    // 4 copies, 4 synchronisations, cudaMalloc and cudaFree (the first of the 160 launches, one in 1024, too).
    assert_eq!(decoded["python_stacks"], 11, "{decoded}");
    // Kineto JSON: python_function events as torch.profiler writes them, nested by Python parent id, the call's
    // own line innermost.
    let json = export_chrome(&rec.trace, &dir.join("t.json"));
    let py: Vec<&Value> =
        json["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "python_function").collect();
    // Read back, the export's python_function events are the calls' stacks again: the same lines and calls.
    let rows = |s: Value| {
        let mut r: Vec<String> = s["python_sync"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| format!("{} {} {} {}", r["file"], r["line"], r["function"], r["calls"]))
            .collect();
        r.sort();
        r
    };
    assert_eq!(rows(stats(&dir.join("t.json"))), rows(stats(&rec.trace)));
    let (at, func) = &planted["copy"];
    let (file, line) = at.rsplit_once(':').unwrap();
    let copy = py.iter().find(|e| e["name"] == format!("{file}({line}): {func}")).expect("the copy's frame");
    let parent = copy["args"]["Python parent id"].as_u64().expect("a parent");
    let step = py.iter().find(|e| e["args"]["Python id"] == parent).unwrap();
    assert!(
        step["name"].as_str().unwrap().ends_with("): Trainer.step")
            || step["name"].as_str().unwrap().ends_with("): step"),
        "{step}"
    );
}

#[test]
fn a_spawned_worker_has_its_own_stacks() {
    // multiprocessing's spawn starts a fresh interpreter (as torch.multiprocessing.spawn starts ranks): the agent
    // is injected there too and reads that process's frames.
    let dir = scratch("pystacks-spawn");
    let (rec, s) = record_py(&dir, Path::new("python3"), &["spawn", "3"], &[]);
    let planted = planted_lines(&String::from_utf8_lossy(&rec.output.stdout));
    let processes = s["processes"].as_array().unwrap();
    // The parent loads the runtime but never calls it: the child is the process that recorded.
    assert!(processes.iter().any(|p| p["command"].as_str().unwrap().contains("spawn_main")), "{}", s["processes"]);
    let rows = s["python_sync"].as_array().unwrap();
    let copy = rows
        .iter()
        .find(|r| format!("{}:{}", r["file"].as_str().unwrap(), r["line"]) == planted["copy"].0)
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(copy["calls"], "cudaMemcpy x3");
}

#[test]
fn a_subinterpreter_has_its_own_lines() {
    // 3.14's concurrent.interpreters (PEP 734): code running in a subinterpreter has a thread state and frames
    // of that interpreter; its calls are blamed on its own lines, and the main interpreter's on its.
    let dir = scratch("pystacks-subinterp");
    let mut checked = 0;
    for python in pythons() {
        let rec = record(
            &dir,
            &[],
            &python,
            &[repo_root().join("tests/py/py_stacks.py").to_str().unwrap(), "subinterp", "3"],
            &[],
        );
        if rec.output.status.code() == Some(3) {
            continue; // no concurrent.interpreters before 3.14
        }
        assert!(rec.output.status.success(), "{}: {}", python.display(), rec.stderr());
        let planted = planted_lines(&String::from_utf8_lossy(&rec.output.stdout));
        let rows = stats(&rec.trace)["python_sync"].as_array().unwrap().clone();
        for (what, func) in [("subsync", "in_sub"), ("sync", "subinterp")] {
            let at = &planted[what].0;
            let row = rows.iter().find(|r| format!("{}:{}", r["file"].as_str().unwrap(), r["line"]) == *at);
            let row = row.unwrap_or_else(|| panic!("{}: no row for {at}: {rows:?}", python.display()));
            assert_eq!(
                (row["function"].as_str(), row["calls"].as_str()),
                (Some(func), Some("cudaDeviceSynchronize x3"))
            );
        }
        checked += 1;
    }
    eprintln!("subinterpreters checked on {checked} interpreters");
}

#[test]
fn a_thread_running_no_python_gets_the_main_threads_line() {
    // PyTorch's autograd device threads launch the backward pass with no Python frames of their own while the
    // main thread waits in loss.backward(): their calls are blamed on the main thread's line. Here a POSIX thread
    // launches and synchronises while the Python thread waits in the ctypes call, on every CPython found.
    let dir = scratch("pystacks-native");
    let lib = dir.join("libnative_thread.so");
    let st = c_compiler()
        .args(["-shared", "-fPIC", "-I"])
        .arg(cuda_include())
        .arg(repo_root().join("tests/c/native_thread.c"))
        .arg("-L")
        .arg(cudasim_dir())
        .args(["-lcudart", "-lpthread", "-o"])
        .arg(&lib)
        .status()
        .unwrap();
    assert!(st.success());
    for python in pythons() {
        let (rec, s) = record_py(&dir, &python, &["native", lib.to_str().unwrap(), "20"], &[]);
        let planted = planted_lines(&String::from_utf8_lossy(&rec.output.stdout));
        let (at, func) = &planted["native"];
        let rows = s["python_sync"].as_array().unwrap();
        let row = rows
            .iter()
            .find(|r| format!("{}:{}", r["file"].as_str().unwrap(), r["line"]) == *at)
            .unwrap_or_else(|| panic!("{}: no row for {at}: {rows:?}", python.display()));
        assert_eq!(row["function"].as_str(), Some(func.as_str()), "{}", python.display());
        assert_eq!(row["calls"], "cudaDeviceSynchronize x1", "{}", python.display());
        // The timeline says whose frames they are: drawn on the calling thread, which ran no Python.
        let json = export_chrome(&rec.trace, &dir.join("t.json"));
        let events = json["traceEvents"].as_array().unwrap();
        let frame = events
            .iter()
            .find(|e| e["cat"] == "python_function" && e["name"].as_str().unwrap().ends_with(&format!("): {func}")))
            .unwrap_or_else(|| panic!("{}: no python_function for {func}", python.display()));
        assert_eq!(frame["args"]["Python thread"], "main (this thread runs no Python)", "{frame}");
    }
}

/// The stacks of a chrome export's calls, innermost first, as `line:function` of the frames in `file` only: one
/// list per stack (the leaves of the `Python parent id` tree).
fn exported_chains(json: &Value, file: &str) -> Vec<Vec<String>> {
    let py: Vec<&Value> =
        json["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "python_function").collect();
    let by_id: BTreeMap<u64, &Value> = py.iter().map(|e| (e["args"]["Python id"].as_u64().unwrap(), *e)).collect();
    let parents: std::collections::BTreeSet<u64> =
        py.iter().filter_map(|e| e["args"]["Python parent id"].as_u64()).collect();
    let prefix = format!("{file}(");
    let mut chains = Vec::new();
    for (&id, _) in by_id.iter().filter(|(id, _)| !parents.contains(id)) {
        let (mut chain, mut at) = (Vec::new(), Some(id));
        while let Some(e) = at.and_then(|id| by_id.get(&id)) {
            let name = e["name"].as_str().unwrap();
            if let Some((line, func)) = name.strip_prefix(&prefix).and_then(|r| r.split_once("): ")) {
                chain.push(format!("{line}:{func}"));
            }
            at = e["args"]["Python parent id"].as_u64();
        }
        chains.push(chain);
    }
    chains
}

#[test]
fn generators_coroutines_and_nested_functions_keep_their_callers() {
    // From 3.11 a generator's or coroutine's frame lives in its object, outside the thread's data stack, and
    // links back to the frame that resumed it (asyncio's loop for a coroutine); the walk must follow it there
    // and back. Each call's whole chain in the script must be the one the program saw, on every CPython found.
    let dir = scratch("pystacks-shapes");
    let script = repo_root().join("tests/py/py_stacks.py");
    let file = script.to_str().unwrap();
    for python in pythons() {
        let (rec, _) = record_py(&dir, &python, &["shapes", "3"], &[]);
        let stdout = String::from_utf8_lossy(&rec.output.stdout);
        let expected: BTreeMap<&str, Vec<String>> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("STACK "))
            .map(|l| {
                let mut parts = l.split(' ');
                (parts.next().unwrap(), parts.map(String::from).collect())
            })
            .collect();
        assert_eq!(expected.len(), 3, "{stdout}");
        let chains = exported_chains(&export_chrome(&rec.trace, &dir.join("t.json")), file);
        for (what, chain) in &expected {
            let n = chains.iter().filter(|c| *c == chain).count();
            assert_eq!(n, 3, "{}: {what} {chain:?} seen {n} times in {chains:?}", python.display());
        }
        eprintln!("checked on {}", python.display());
    }
}

#[test]
fn copies_from_pageable_memory_name_their_line() {
    // `batch.to(device)` without pin_memory: the pageable_memcpy finding names the line of the copy (known to be
    // pageable only from the copy's own record, which comes after the call and its stack).
    let dir = scratch("pystacks-pageable");
    let (rec, _) = record_py(&dir, Path::new("python3"), &["pageable", "12"], &[]);
    let planted = planted_lines(&String::from_utf8_lossy(&rec.output.stdout));
    let (at, func) = &planted["pageable"];
    let r = report_json(&rec.trace);
    let findings = r["processes"][0]["findings"].as_array().unwrap();
    let f = findings.iter().find(|f| f["kind"] == "pageable_memcpy").unwrap_or_else(|| panic!("{findings:?}"));
    let top = &f["sources"][0];
    assert_eq!(format!("{}:{}", top["file"].as_str().unwrap(), top["line"]), *at, "{}", f["sources"]);
    assert_eq!(top["function"].as_str(), Some(func.as_str()));
    // The copies in steady steps, one a step, and no other line: not the launches', not the synchronisation's.
    // Of the 12 steps, how many count as warm-up depends on the machine's load (a clean-clone CI rehearsal right
    // after the wheel builds left 5), so the count is bounded by the steps analysed, not by a fixed number.
    let analysed = r["processes"][0]["steps"].as_array().map_or(0, |s| s.len() as u64);
    let count = top["count"].as_u64().unwrap();
    assert!(count >= 3 && count <= analysed.max(3) + 1 && count <= 12, "{top}: {analysed} steps analysed");
    assert_eq!(f["sources"].as_array().unwrap().len(), 1, "{}", f["sources"]);
}

#[test]
fn a_torch_profiler_trace_with_stacks_names_the_programs_lines() {
    // torch.profiler(with_stack=True) on an H100 (Qwen inference): its python_function events become the calls'
    // stacks at import. Every file is relative to an import root there (torch strips sys.path entries), so the
    // standard library and the known packages (torch, transformers) are told apart by their top-level module, and
    // the findings name the program's own package.
    let Some(qwen) = shared_trace("kineto-h100-qwen-inference.json.gz") else { return };
    let r = report_json(&qwen);
    let findings = r["processes"].as_array().unwrap().iter().flat_map(|p| p["findings"].as_array().unwrap().clone());
    let top = |kind: &str| -> (String, u64, String) {
        let f = findings.clone().find(|f| f["kind"] == kind).unwrap_or_else(|| panic!("no {kind}"));
        let s = &f["sources"][0];
        (s["file"].as_str().unwrap().into(), s["line"].as_u64().unwrap(), s["function"].as_str().unwrap().into())
    };
    let adapter = "moca/library/model_hub/huggingface/model/adapters/text_base_model.py";
    assert_eq!(top("launch_bound"), (adapter.into(), 28, "run_on_input".into()));
    assert_eq!(top("sync_stall"), ("moca/library/profiling/profile.py".into(), 34, "run_torch_profiler".into()));
    // The Kineto export writes the trace's own python_function events once, not the joined stacks again.
    let dir = scratch("pystacks-kineto");
    let json = export_chrome(&qwen, &dir.join("q.json"));
    let py = json["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "python_function").count();
    assert_eq!(py, 4262);
}
