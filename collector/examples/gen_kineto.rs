//! Writes a large synthetic torch.profiler (Kineto) JSON trace for the scale benchmarks: the schema of the shared
//! A100 trace (`ProfilerStep#N` annotations, `cpu_op`s, `cudaLaunchKernel`/`cudaMemcpyAsync` with correlation ids,
//! `kernel`/`gpu_memcpy` on stream tids, `ac2g` flows, `[memory]` instants with signed sizes and no address,
//! `deviceProperties`, `distributedInfo`), written event by event so its size is not bounded by memory.
//! Usage: gen_kineto EVENTS OUT.json [RANK]   (EVENTS counts trace events, flows included)

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(n), Some(out)) = (args.get(1).and_then(|v| v.parse::<u64>().ok()), args.get(2)) else {
        eprintln!("usage: gen_kineto EVENTS OUT.json [RANK]");
        std::process::exit(2);
    };
    let rank: u32 = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut w = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(out)?);
    writeln!(
        w,
        r#"{{"schemaVersion": 1, "deviceProperties": [{{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 84929216512, "computeMajor": 9, "computeMinor": 0, "numSms": 132}}],"#
    )?;
    writeln!(w, r#""distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": 8}},"#)?;
    writeln!(w, r#""traceEvents": ["#)?;
    let (pid, tid) = (4242u64, 4242u64);
    writeln!(
        w,
        r#"{{"name": "process_name", "ph": "M", "ts": 0, "pid": {pid}, "tid": 0, "args": {{"name": "python train.py"}}}},"#
    )?;
    writeln!(w, r#"{{"name": "process_name", "ph": "M", "ts": 0, "pid": 0, "tid": 0, "args": {{"name": "GPU 0"}}}}"#)?;
    let kernels: Vec<String> = (0..48)
        .map(|i| format!("void at::native::vectorized_elementwise_kernel<{i}, at::native::AddFunctor<float>>(int)"))
        .collect();
    // Timestamps in microseconds with fractions, as Kineto writes them; `t` and `gpu` in nanoseconds.
    let us = |ns: u64| format!("{}.{:03}", ns / 1000, ns % 1000);
    let (mut t, mut gpu, mut corr, mut written, mut step) = (1_700_000_000_000_000_000u64, 0u64, 0u64, 2u64, 0u64);
    let mut jitter = 0x9e37_79b9_u64;
    while written < n {
        step += 1;
        let step_start = t;
        let mut body = Vec::new();
        for op in 0..64u64 {
            jitter = jitter.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let j = jitter >> 54; // 0..1023 ns
            corr += 1;
            let copy = op % 16 == 15;
            let name = if copy { "cudaMemcpyAsync" } else { "cudaLaunchKernel" };
            let (op_dur, call_dur) = (9_000 + j, 4_000 + j / 2);
            body.push(format!(r#"{{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": {pid}, "tid": {tid}, "ts": {}, "dur": {}, "args": {{"External id": {corr}}}}}"#, us(t), us(op_dur)));
            let call = t + 3_000;
            body.push(format!(r#"{{"ph": "X", "cat": "cuda_runtime", "name": "{name}", "pid": {pid}, "tid": {tid}, "ts": {}, "dur": {}, "args": {{"External id": {corr}, "cbid": 211, "correlation": {corr}}}}}"#, us(call), us(call_dur)));
            let start = gpu.max(call + 6_000);
            let dur = if copy { 40_000 + j * 8 } else { 12_000 + j * 20 };
            let stream = if copy { 25 } else { 7 };
            body.push(if copy {
                format!(r#"{{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": {stream}, "ts": {}, "dur": {}, "args": {{"External id": {corr}, "device": 0, "context": 1, "stream": {stream}, "correlation": {corr}, "bytes": 1048576, "memory bandwidth (GB/s)": 25.0}}}}"#, us(start), us(dur))
            } else {
                format!(r#"{{"ph": "X", "cat": "kernel", "name": "{}", "pid": 0, "tid": {stream}, "ts": {}, "dur": {}, "args": {{"External id": {corr}, "queued": 0, "device": 0, "context": 1, "stream": {stream}, "correlation": {corr}, "registers per thread": 32, "shared memory": 0, "blocks per SM": 8.0, "warps per SM": 64.0, "grid": [1056, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 100}}}}"#, kernels[(op % 48) as usize], us(start), us(dur))
            });
            body.push(format!(
                r#"{{"ph": "s", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {}, "cat": "ac2g", "name": "ac2g"}}"#,
                us(call)
            ));
            body.push(format!(r#"{{"ph": "f", "id": {corr}, "pid": 0, "tid": {stream}, "ts": {}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}"#, us(start)));
            gpu = start + dur;
            // The caching allocator: an activation allocated during the op and freed by the end of the step.
            if op % 8 == 0 {
                body.push(format!(r#"{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {pid}, "tid": {tid}, "ts": {}, "args": {{"Total Reserved": 4294967296, "Total Allocated": 1073741824, "Bytes": 67108864, "Device Id": 0, "Device Type": 1}}}}"#, us(t + 1_000)));
            }
            t += op_dur + 1_000;
        }
        // Step end: sync, then the frees.
        let sync = t;
        t = t.max(gpu) + 20_000;
        body.push(format!(r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": {pid}, "tid": {tid}, "ts": {}, "dur": {}, "args": {{"cbid": 131, "correlation": {}}}}}"#, us(sync), us(t - sync), corr + 1));
        corr += 1;
        for i in 0..8 {
            body.push(format!(r#"{{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": {pid}, "tid": {tid}, "ts": {}, "args": {{"Total Reserved": 4294967296, "Total Allocated": 1073741824, "Bytes": -67108864, "Device Id": 0, "Device Type": 1}}}}"#, us(t + i)));
        }
        t += 50_000;
        write!(
            w,
            ",\n{}",
            format_args!(
                r#"{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {pid}, "tid": {tid}, "ts": {}, "dur": {}, "args": {{"External id": {step}}}}}"#,
                us(step_start),
                us(t - step_start)
            )
        )?;
        for e in &body {
            write!(w, ",\n{e}")?;
        }
        written += 1 + body.len() as u64;
    }
    writeln!(w, "\n]}}")?;
    w.flush()?;
    eprintln!("gen_kineto: {written} trace events in {out}");
    Ok(())
}
