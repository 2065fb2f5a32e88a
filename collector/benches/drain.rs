//! Collector-side costs per record: draining a ring into the trace writer (encoding + zstd), and the bytes
//! each record takes on disk. Targets: drain + encode + compress >= 20 M records/s per core, <= 24 bytes per
//! record. Run: `cargo bench -p cuflight --bench drain`.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use cuflight_format::codec::EventEncoder;
use cuflight_format::event::LaunchConfig;
use cuflight_format::file::TraceWriter;
use cuflight_format::ring::HeapRing;
use cuflight_format::view::{ApiCall, CopyKind, MemoryKind};
use cuflight_format::{EventKind, RawEvent};
use std::time::{Duration, Instant};

/// A launch-heavy mix as a training step produces: runtime API calls and their kernels on two streams, with
/// jittered gaps and durations, 40 kernel names of skewed popularity, a handful of launch shapes, an NVTX
/// range and a memcpy now and then. The jitter matters: perfectly periodic input compresses to nothing and
/// would flatter every number below.
fn realistic(n: usize) -> Vec<RawEvent> {
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rand = move |below: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % below
    };
    let mut out = Vec::with_capacity(n);
    let (mut t, mut corr) = (1_000_000_000u64, 1u32);
    while out.len() < n {
        t += 800 + rand(3_000);
        corr += 1 + rand(2) as u32;
        let name = 100 + (rand(40) * rand(40) / 40) as u32 * 96;
        let shape = rand(6);
        match rand(50) {
            0 => out.push(RawEvent { name: 9_000, ..RawEvent::new(EventKind::NvtxPush, 4242, t, t) }),
            1 => {
                let (start, end) = (t + 4_000, t + 4_000 + 300_000 + rand(9_000));
                let (pinned, device) = (MemoryKind::PINNED, MemoryKind::DEVICE);
                let copy = RawEvent::copy(start, end, corr, CopyKind::HTOD, pinned, device, 4 << 20, false);
                out.push(RawEvent { stream: 7, ..copy })
            }
            _ => {}
        }
        let api_end = t + 1_500 + rand(1_500);
        let launch = ApiCall { runtime: true, cbid: 211, result: 0, external: 0 };
        out.push(RawEvent { correlation: corr, name: 40, ..RawEvent::api_call(4242, t, api_end, launch) });
        let k_start = t + 5_000 + rand(20_000);
        let mut kernel = RawEvent {
            correlation: corr,
            name,
            stream: 7 + rand(2) as u32,
            ..RawEvent::new(EventKind::Kernel, 0, k_start, k_start + 2_000 + rand(40_000))
        };
        kernel.set_launch_config(&LaunchConfig {
            grid: [108 << shape as u32, 1, 1],
            block: [64 << (shape as u32 % 3), 1, 1],
            registers: 32 + shape as u16 * 8,
            static_shared: shape as u32 * 4096,
            dynamic_shared: 0,
        });
        out.push(kernel);
        t = api_end;
    }
    out.truncate(n);
    out
}

fn bench(c: &mut Criterion) {
    const N: usize = 1 << 16;
    let events = realistic(N);
    let mut ring = HeapRing::new(N as u32);
    let (mut p, mut consumer) = ring.split();
    let mut g = c.benchmark_group("collector");
    g.throughput(Throughput::Elements(N as u64));
    // What the collector spends per record: the ring is filled outside the timed part (filling it is the
    // agent's cost, see benches/agent-overhead), and one writer lives across iterations as in `record`.
    g.bench_function("drain_encode_compress_64k", |b| {
        let mut out = Vec::with_capacity(N);
        let mut w = TraceWriter::new(std::io::sink()).unwrap();
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                for e in &events {
                    p.push(e);
                }
                let t = Instant::now();
                out.clear();
                consumer.drain_into(&mut out);
                w.write_events(1, &out).unwrap();
                spent += t.elapsed();
            }
            spent
        })
    });
    // The same block through the version 1 encoding (rows) and the version 2 one (columns by kind), each
    // followed by the writer's zstd settings: read the two side by side, from one run.
    let mut z = zstd::bulk::Compressor::new(1).unwrap();
    z.include_checksum(true).unwrap();
    let mut dst = Vec::new();
    let mut raw = Vec::with_capacity(N * 32);
    let mut enc = EventEncoder::default();
    for (name, columns) in [("encode_compress_v1_rows_64k", false), ("encode_compress_v2_columns_64k", true)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                raw.clear();
                if columns {
                    enc.encode(&events, &mut raw);
                } else {
                    cuflight_format::codec::encode_rows(&events, &mut raw);
                }
                dst.clear();
                dst.reserve(zstd::zstd_safe::compress_bound(raw.len()));
                z.compress_to_buffer(&raw[..], &mut dst).unwrap()
            })
        });
    }
    g.bench_function("encode_v2_only_64k", |b| {
        b.iter(|| {
            raw.clear();
            enc.encode(&events, &mut raw);
            raw.len()
        })
    });
    g.finish();
    for (what, columns) in [("v1 rows", false), ("v2 columns", true)] {
        raw.clear();
        if columns {
            enc.encode(&events, &mut raw);
        } else {
            cuflight_format::codec::encode_rows(&events, &mut raw);
        }
        let packed = z.compress(&raw).unwrap();
        println!(
            "{what}: {:.2} bytes per record encoded, {:.2} after zstd",
            raw.len() as f64 / N as f64,
            packed.len() as f64 / N as f64
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
