//! Writes a large synthetic cuflight trace for the scale benchmarks (benches/interop): a training-like mix of
//! CUDA API calls and the kernels and copies they launch on 4 streams, NVTX steps, allocations and clock pairs.
//! Usage: gen_trace EVENTS OUT.cuf

use cuflight_format::event::{LaunchConfig, API_RUNTIME, FLAG_ASYNC};
use cuflight_format::file::{Footer, ProcessInfo, TraceWriter};
use cuflight_format::{EventKind, RawEvent};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(n), Some(out)) = (args.get(1).and_then(|v| v.parse::<u64>().ok()), args.get(2)) else {
        eprintln!("usage: gen_trace EVENTS OUT.cuf");
        std::process::exit(2);
    };
    let file = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    let mut w = TraceWriter::new(file)?;
    let pid = 4242;
    let mut region = cuflight_format::strings::StringRegion::default();
    let mut intern = |s: &str| region.intern(s);
    let launch = intern("cudaLaunchKernel");
    let memcpy = intern("cudaMemcpyAsync");
    let step = intern("step");
    let kernels: Vec<u32> =
        (0..48).map(|i| intern(&format!("void gemm_kernel<{i}, 128, 64>(float const*, float*, int)"))).collect();
    w.write_strings(pid, 0, region.bytes())?;

    let mut batch = Vec::with_capacity(1 << 16);
    let (mut t, mut corr, mut written) = (1_000_000_000u64, 0u32, 0u64);
    let mut jitter = 0x9e37_79b9_u64;
    let (tid, cfg) =
        (pid, LaunchConfig { grid: [108, 1, 1], block: [256, 1, 1], registers: 64, ..Default::default() }.pack());
    // Whole steps (about 130 events each) until `n`: a small `n` makes a small trace (the fuzzer's seed).
    while written + (batch.len() as u64) < n {
        batch.push(RawEvent { name: step, ..RawEvent::new(EventKind::NvtxPush, tid, t, t) });
        for op in 0..64u64 {
            jitter = jitter.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let j = jitter >> 54;
            corr += 1;
            let stream = 7 + (op % 4) as u32;
            if op % 16 == 15 {
                batch.push(RawEvent {
                    sub: API_RUNTIME,
                    correlation: corr,
                    name: memcpy,
                    a: 41,
                    ..RawEvent::new(EventKind::Api, tid, t, t + 3_000 + j)
                });
                let mut c = RawEvent {
                    sub: 1,
                    correlation: corr,
                    stream,
                    a: 1 << 20,
                    b: 2 | 3 << 8,
                    flags: FLAG_ASYNC,
                    ..RawEvent::new(EventKind::Memcpy, 0, t + 4_000, t + 60_000 + j)
                };
                c.device = 0;
                batch.push(c);
            } else {
                batch.push(RawEvent {
                    sub: API_RUNTIME,
                    correlation: corr,
                    name: launch,
                    a: 211,
                    ..RawEvent::new(EventKind::Api, tid, t, t + 2_500 + j)
                });
                let k = kernels[(op as usize * 7 + corr as usize) % kernels.len()];
                batch.push(RawEvent {
                    correlation: corr,
                    stream,
                    name: k,
                    a: cfg.0,
                    b: cfg.1,
                    c: cfg.2,
                    ..RawEvent::new(EventKind::Kernel, 0, t + 5_000, t + 5_000 + 20_000 + j * 10)
                });
            }
            t += 3_000 + j;
        }
        batch.push(RawEvent::new(EventKind::NvtxPop, tid, t, t));
        t += 50_000;
        if batch.len() >= 1 << 16 {
            written += batch.len() as u64;
            w.write_events(pid, &batch)?;
            batch.clear();
        }
    }
    w.write_events(pid, &batch)?;
    let info = ProcessInfo {
        pid,
        cmdline: vec!["python".into(), "train.py".into()],
        cupti_version: 130500,
        finished: true,
        ..Default::default()
    };
    w.write_process(&info)?;
    let total = w.events_written();
    w.finish(Footer { command: info.cmdline.clone(), exit_code: Some(0), ..Default::default() })?;
    eprintln!("gen_trace: {total} events in {out}");
    Ok(())
}
