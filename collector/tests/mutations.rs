//! A deterministic mutation run over the trace reader and both importers, on stable Rust, in every CI run:
//! seeds are mutated (bit flips, byte sets, truncations, duplicated and deleted ranges) and every result must
//! be a value or an error, never a panic. Coverage-guided fuzzing of the same entry points: `scripts/fuzz`.

use cuflight_collector::fuzzing;
use cuflight_collector::model::source::EventSource;
use cuflight_collector::report::{Options, Report};
use cuflight_format::file::{Footer, ProcessInfo, TraceWriter};
use cuflight_format::view::{CopyKind, MemOp, MemoryKind, PyFrameRecord};
use cuflight_format::{EventKind, RawEvent};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = d.len().max(1);
        match rng.below(6) {
            0 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            1 if !d.is_empty() => {
                let i = rng.below(d.len());
                d[i] = rng.next() as u8;
            }
            2 => d.truncate(rng.below(len)),
            3 if !d.is_empty() => {
                let (a, b) = (rng.below(d.len()), rng.below(d.len()));
                let (a, b) = (a.min(b), a.max(b).min(a + 64));
                let dup = d[a..b].to_vec();
                let at = rng.below(d.len());
                d.splice(at..at, dup);
            }
            4 if !d.is_empty() => {
                let a = rng.below(d.len());
                let b = (a + rng.below(32)).min(d.len());
                d.drain(a..b);
            }
            _ => {
                let at = rng.below(len).min(d.len());
                let junk: Vec<u8> = (0..rng.below(8)).map(|_| rng.next() as u8).collect();
                d.splice(at..at, junk);
            }
        }
    }
    d
}

fn run(name: &str, seed: &[u8], iterations: usize, f: fn(&[u8])) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.len() as u64);
    f(seed);
    for i in 0..iterations {
        let input = mutate(seed, &mut rng);
        if std::panic::catch_unwind(|| f(&input)).is_err() {
            let path = std::env::temp_dir().join(format!("cuflight-mutation-{name}-{i}.bin"));
            let _ = std::fs::write(&path, &input);
            panic!("{name}: mutation {i} panicked; input saved to {}", path.display());
        }
    }
}

fn native_seed() -> Vec<u8> {
    seed_with(ProcessInfo { pid: 7, cmdline: vec!["app".into()], ..Default::default() }, 0)
}

/// The seed trace with these process facts, and with a Python stack read in `stack_ns` at each synchronisation
/// when that is not 0.
fn seed_with(info: ProcessInfo, stack_ns: u64) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.write_process(&info).unwrap();
    let mut region = cuflight_format::strings::StringRegion::default();
    let mut intern = |s: &str| region.intern(s);
    let (k, step, launch, sync) =
        (intern("k"), intern("step"), intern("cudaLaunchKernel"), intern("cudaStreamSynchronize"));
    w.write_strings(7, 0, region.bytes()).unwrap();
    // Eight NVTX steps of launches, kernels, a copy, a sync and an allocation: enough for the report's plan and
    // window sweep to have steps, launches and idle time to work through.
    let mut events = Vec::new();
    let (mut t, mut corr) = (1_000u64, 1u32);
    for _ in 0..8 {
        events.push(RawEvent { name: step, ..RawEvent::new(EventKind::NvtxPush, 7, t, t) });
        for _ in 0..3 {
            events.push(RawEvent { name: launch, correlation: corr, ..RawEvent::new(EventKind::Api, 7, t, t + 5) });
            events.push(RawEvent {
                name: k,
                correlation: corr,
                stream: 1,
                ..RawEvent::new(EventKind::Kernel, 0, t + 8, t + 40)
            });
            (t, corr) = (t + 10, corr + 1);
        }
        events.push(RawEvent::copy(
            t + 45,
            t + 50,
            corr,
            CopyKind::DTOH,
            MemoryKind::DEVICE,
            MemoryKind::PAGEABLE,
            64,
            false,
        ));
        if stack_ns != 0 {
            let frame = PyFrameRecord { file: k, line: 3, read_ns: stack_ns, ..Default::default() };
            events.push(RawEvent { name: step, correlation: corr, ..RawEvent::py_frame(7, t, frame) });
        }
        events.push(RawEvent { name: sync, correlation: corr, ..RawEvent::new(EventKind::Api, 7, t, t + 60) });
        let mut alloc = RawEvent::new(EventKind::Alloc, 7, t + 61, t + 61);
        alloc.set_mem_op(EventKind::Alloc, MemOp { memory: None, address: 0x1000 + t, bytes: 256 });
        events.push(alloc);
        events.push(RawEvent { name: step, ..RawEvent::new(EventKind::NvtxPop, 7, t + 70, t + 70) });
        t += 100;
    }
    w.write_events(7, &events).unwrap();
    w.finish(Footer::default()).unwrap()
}

const KINETO_SEED: &str = r#"{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "GPU", "totalGlobalMem": 1, "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
"distributedInfo": {"rank": 1, "world_size": 8}, "cuda_driver_version": 12090, "cupti_version": 22, "hostname": "node-7",
"traceEvents": [
{"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "trainer"}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 100.5, "dur": 5, "args": {"correlation": 7, "cbid": 211}},
{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 110.25, "dur": 2.5, "args": {"correlation": 7, "device": 0, "stream": 7, "grid": [4, 1, 1], "block": [128, 1, 1], "registers per thread": 32}},
{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 120, "dur": 3, "args": {"bytes": 4096, "correlation": 8}},
{"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": 130, "dur": 1, "args": {"bytes": 64}},
{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 10, "tid": 11, "ts": 90, "dur": 60},
{"ph": "X", "cat": "python_function", "name": "train.py(12): main", "pid": 10, "tid": 11, "ts": 80, "dur": 200, "args": {"Python id": 1}},
{"ph": "X", "cat": "python_function", "name": "torch/cuda/__init__.py(975): synchronize", "pid": 10, "tid": 11, "ts": 158, "dur": 34},
{"ph": "X", "cat": "python_function", "name": "<built-in method item of Tensor object at 0x7f00>", "pid": 10, "tid": 11, "ts": 99, "dur": 8},
{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 10, "tid": 11, "ts": 150, "dur": 80},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 10, "tid": 11, "ts": 160, "dur": 30, "args": {"correlation": 9}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11, "ts": 195, "dur": 4, "args": {"correlation": 10}},
{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce_RING_LL_Sum_float", "pid": 0, "tid": 7, "ts": 200, "dur": 20, "args": {"correlation": 10, "device": 0, "stream": 7}},
{"ph": "X", "cat": "kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": 8, "ts": 205, "dur": 10, "args": {"correlation": 11, "device": 0, "stream": 8}},
{"ph": "X", "cat": "cpu_op", "name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "pid": 10, "tid": 11, "ts": 151, "dur": 8},
{"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 11, "ts": 95, "args": {"Addr": 1, "Bytes": -4, "Device Type": 1}},
{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 10, "tid": 11, "ts": 100.5},
{"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 7, "pid": 0, "tid": 7, "ts": 110.25, "bp": "e"}
], "baseTimeNanoseconds": 1751410836000000000}"#;

#[test]
fn the_trace_reader_survives_mutations() {
    run("native", &native_seed(), 3000, |d| {
        fuzzing::trace_reader(d);
    });
}

#[test]
fn the_event_source_survives_mutations() {
    // The seed itself reaches the report's window sweep: eight steps, each with its row.
    let mut traces = [("seed".to_string(), EventSource::from_bytes(native_seed(), "seed").unwrap().unwrap())];
    let r = Report::compute(&mut traces, &Options::default()).unwrap();
    assert_eq!(r.processes[0].steps.len(), 8, "{}", r.to_json());
    run("source", &native_seed(), 1000, fuzzing::trace_source);
}

/// Counters another process or a crafted file set to their maximum add up without overflowing (a panic in a
/// debug build, a wrapped, wrong total in a release one): they saturate.
#[test]
fn counters_at_their_maximum_saturate() {
    let max = u64::MAX;
    let drops = cuflight_format::file::Drops {
        ring_full: max,
        no_ring: max,
        cupti_dropped: max,
        records_skipped: max,
        strings_full: max,
    };
    let info = ProcessInfo {
        pid: 7,
        drops,
        unseen_begin: max,
        program_held_ns: max,
        python_stacks: max,
        python_stack_ns: max,
        ..Default::default()
    };
    let seed = seed_with(info, max);
    fuzzing::trace_source(&seed);
    let mut traces = [("max".to_string(), EventSource::from_bytes(seed, "max").unwrap().unwrap())];
    let r = Report::compute(&mut traces, &Options::default()).unwrap();
    let p = &r.processes[0];
    assert_eq!(p.run.dropped_total, max);
    let stacks = p.python_stacks.expect("stacks read");
    assert_eq!((stacks.stacks, stacks.in_steps, stacks.in_steps_ns), (8, 8, max));
    assert!(r.to_text().contains("reading Python stacks cost"), "{}", r.to_text());
}

/// A real agent segment (one ring with events, strings, process facts) as a byte image.
fn segment_seed() -> Vec<u8> {
    use cuflight_format::segment::{Layout, MappedSegment};
    let seg = MappedSegment::create(Layout { ring_count: 2, ring_capacity: 8, strings_capacity: 64 }, 7, 1, 5).unwrap();
    let id = seg.append_string(b"gemm").unwrap();
    seg.header().cmdline.store(seg.append_string(b"app\0--x").unwrap(), std::sync::atomic::Ordering::Relaxed);
    let ring = seg.ring(seg.reserve_ring().unwrap()).unwrap();
    let mut p = ring.try_claim(7).unwrap();
    for i in 0..6 {
        p.push(&RawEvent { name: id, ..RawEvent::new(EventKind::Kernel, 7, i * 10, i * 10 + 5) });
    }
    seg.image()
}

#[test]
fn the_collectors_side_of_shared_memory_survives_mutations() {
    static SEED: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let seed = SEED.get_or_init(segment_seed);
    assert!(fuzzing::segment(seed) >= 6 + 3, "the seed itself is read");
    // Mutations of the header (where the sizes live), then of the whole image.
    run("segment-header", &seed[..256], 3000, |d| {
        let mut image = d.to_vec();
        image.extend_from_slice(&SEED.get().expect("set")[256..]);
        fuzzing::segment(&image);
    });
    run("segment", seed, 500, |d| {
        fuzzing::segment(d);
    });
}

#[test]
fn the_kineto_importer_survives_mutations() {
    run("kineto", KINETO_SEED.as_bytes(), 3000, |d| {
        fuzzing::kineto(d);
    });
}

#[test]
fn the_nsys_importer_survives_mutations() {
    // The shared traces: $CUFLIGHT_TRACES, else ../shared/traces, else .cache/traces (scripts/fetch-traces);
    // skipped where absent, except under CI=true.
    let dirs = match std::env::var_os("CUFLIGHT_TRACES").filter(|v| !v.is_empty()) {
        Some(d) => vec![std::path::PathBuf::from(d)],
        None => vec![
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces").into(),
            concat!(env!("CARGO_MANIFEST_DIR"), "/../.cache/traces").into(),
        ],
    };
    let seed = dirs.iter().find_map(|d| std::fs::read(d.join("nsys-a100-cloverleaf.sqlite")).ok());
    let Some(seed) = seed else {
        assert!(std::env::var("CI").map_or(true, |v| v != "true"), "shared nsys export missing under CI=true");
        let why = "shared trace nsys-a100-cloverleaf.sqlite not found (scripts/fetch-traces fetches it)";
        eprintln!("skipped: {why}");
        // The line tests/src/lib.rs's `skipped` writes, for scripts/test's summary (this crate cannot use it).
        if let Some(log) = std::env::var_os("CUFLIGHT_SKIP_LOG").filter(|v| !v.is_empty()) {
            let line = format!("mutations::the_nsys_importer_survives_mutations\t{why}\n");
            let file = std::fs::OpenOptions::new().create(true).append(true).open(log);
            let _ = file.and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
        }
        return;
    };
    run("nsys", &seed, 60, |d| {
        fuzzing::nsys(d);
    });
}
