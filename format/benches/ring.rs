//! Ring push cost per record (also a flight recorder's full ring, which overwrites) and drain throughput (issue
//! target: push <= 20 ns, drain >= 20 M records/s/core).
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use cuflight_format::{event::EventKind, ring::HeapRing, RawEvent};

fn push(c: &mut Criterion) {
    let mut ring = HeapRing::new(1 << 16);
    let (mut producer, mut consumer) = ring.split();
    let ev = RawEvent::new(EventKind::Api, 1, 2, 3);
    let mut sink = Vec::with_capacity(1 << 16);
    let mut g = c.benchmark_group("ring");
    g.throughput(Throughput::Elements(1));
    g.bench_function("push", |b| {
        b.iter(|| {
            if !producer.push(std::hint::black_box(&ev)) {
                sink.clear();
                consumer.drain_into(&mut sink);
            }
        })
    });
    // A flight recorder's full ring: every push discards the oldest event.
    let mut full = HeapRing::new(1 << 16);
    full.view().set_overwrite(true);
    let (mut overwriting, _) = full.split();
    g.bench_function("push_overwrite", |b| b.iter(|| overwriting.push(std::hint::black_box(&ev))));
    const BATCH: u64 = 1 << 15;
    g.throughput(Throughput::Elements(BATCH));
    let producer = std::cell::RefCell::new(producer);
    g.bench_function("drain_32k", |b| {
        b.iter_batched_ref(
            || {
                let mut p = producer.borrow_mut();
                for _ in 0..BATCH {
                    p.push(&ev);
                }
                Vec::with_capacity(BATCH as usize)
            },
            |out| consumer.drain_into(out),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, push);
criterion_main!(benches);
