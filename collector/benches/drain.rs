//! Collector-side costs per record: draining a ring into the trace writer (varint encoding + zstd), and the
//! bytes each record takes on disk. Targets: drain >= 20 M records/s per core, <= 24 bytes per record.
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use cuflight_format::file::TraceWriter;
use cuflight_format::ring::HeapRing;
use cuflight_format::{EventKind, RawEvent};

/// A launch-heavy mix: API call + kernel pairs on two streams, as a training step produces.
fn realistic(n: usize) -> Vec<RawEvent> {
    (0..n as u64)
        .map(|i| {
            let t = 1_000_000_000 + i * 2_300;
            if i % 2 == 0 {
                RawEvent {
                    sub: 1,
                    correlation: i as u32,
                    name: 40,
                    a: 211,
                    ..RawEvent::new(EventKind::Api, 4242, t, t + 1_800)
                }
            } else {
                RawEvent {
                    correlation: i as u32 - 1,
                    name: 100 + (i % 7) as u32 * 64,
                    stream: 7 + (i % 2) as u32,
                    a: 108 | 1 << 32,
                    b: 1 | 256 << 16 | 1 << 32 | 1 << 48,
                    c: 32,
                    ..RawEvent::new(EventKind::Kernel, 0, t + 5_000, t + 5_000 + 3_000 + (i % 13) * 100)
                }
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    const N: usize = 1 << 16;
    let events = realistic(N);
    let ring = HeapRing::new(N as u32);
    let mut g = c.benchmark_group("collector");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("drain_encode_compress_64k", |b| {
        let mut out = Vec::with_capacity(N);
        b.iter(|| {
            let mut p = ring.producer();
            for e in &events {
                p.push(e);
            }
            out.clear();
            ring.consumer().drain_into(&mut out);
            let mut w = TraceWriter::new(Vec::with_capacity(1 << 20)).unwrap();
            w.write_events(1, &out).unwrap();
            w.finish(Default::default()).unwrap().len()
        })
    });
    g.bench_function("encode_only_64k", |b| {
        let mut buf = Vec::with_capacity(N * 24);
        b.iter(|| {
            buf.clear();
            cuflight_format::file::encode_events(&events, &mut buf);
            buf.len()
        })
    });
    g.finish();
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.write_events(1, &events).unwrap();
    let bytes = w.finish(Default::default()).unwrap().len();
    println!("bytes per record on disk: {:.2} ({} records, {} bytes)", bytes as f64 / N as f64, N, bytes);
}

criterion_group!(benches, bench);
criterion_main!(benches);
