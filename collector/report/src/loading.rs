//! data_loading: the GPU idle at step starts while the launching thread was inside a DataLoader annotation, or
//! outside CUDA for [`STEP_START_INPUT_NS`] or more. What the program is decides the words and the fix: a training loop whose DataLoader's annotations say
//! where it loads (on the launching thread, or in worker processes that do not keep up), a model server preparing
//! its next iteration's batch, or a program that says neither.

use super::findings::{Ctx, Finding};
use super::idle::{CauseKind, IdleCauses, STEP_START_INPUT_NS};
use cuflight_trace::model::range_roles::LoaderWorkers;

/// A training loop whose DataLoader's annotations do not say where it loads.
pub const FIX_DATA: &str = "Feed the GPU faster: DataLoader(num_workers=N (one per spare core), pin_memory=True, \
     persistent_workers=True, prefetch_factor=2 or more); cache or pre-decode the dataset; move augmentation to the GPU.";
/// The DataLoader loads on the thread that launches the GPU's work (`num_workers=0`).
pub const FIX_DATA_IN_PROCESS: &str = "Load batches in worker processes while the GPU computes: \
     DataLoader(num_workers=N (one per spare core; 0, as here, loads each batch on the thread that launches the \
     GPU's work), pin_memory=True, persistent_workers=True, prefetch_factor=2 or more); cache or pre-decode the \
     dataset; move augmentation to the GPU.";
/// The DataLoader has worker processes and the GPU still waits for them.
pub const FIX_DATA_WORKERS: &str = "The DataLoader's workers do not keep up: see where their time goes (py-spy dump \
     or top on the worker processes: reading from storage, decoding, augmentation); add workers where cores are \
     spare, raise prefetch_factor to ride out slow batches, keep the workers between epochs \
     (persistent_workers=True) and let them pin batches (pin_memory=True); cache or pre-decode the dataset (decode \
     images on the GPU: torchvision.io.decode_jpeg(device=\"cuda\") or DALI); move augmentation to the GPU.";
/// A model server ([`super::plan::Plan::serving`]): the host builds the next iteration's batch.
pub const FIX_DATA_SERVING: &str = "The GPU idles at each iteration's start while the engine builds the batch on \
     the CPU (scheduling, input tensors, their copy to the GPU): prepare iteration N+1 while N runs (vLLM's async \
     scheduling, SGLang's overlap scheduler), keep input buffers preallocated and pinned and copy them with \
     non_blocking=True, and move tokenisation and request handling off the engine's thread.";
/// A program that neither trains nor serves, without DataLoader annotations (inference, an HPC code).
pub const FIX_DATA_GENERAL: &str = "Prepare each step's input before the GPU needs it: read and decode the next \
     batch on another thread or process while this one computes (in PyTorch a DataLoader with num_workers and \
     pin_memory=True; in CUDA code double buffers in pinned memory, copied with cudaMemcpyAsync on a second \
     stream); cache or pre-decode the input.";

/// The data_loading finding, where the GPU idled at step starts.
pub fn data_loading(ctx: &Ctx, idle: &IdleCauses) -> Option<Finding> {
    let c = idle.get(CauseKind::DataLoading);
    if c.total_ns == 0 {
        return None;
    }
    let mut ev = super::findings::idle_evidence(ctx, c);
    let plan = ctx.plan;
    ev.facts.push(format!(
        "the GPU idled {} at step starts while the launching thread was {}outside CUDA for {} or more at a stretch",
        ctx.per_step(c.total_ns),
        if plan.loader_annotated { "inside DataLoader annotations, or " } else { "" },
        super::words::ms(STEP_START_INPUT_NS),
    ));
    // What the DataLoader's annotations say of where it loads, and the fix for that.
    let (fix, said) = match plan.loader_workers {
        _ if plan.serving => (FIX_DATA_SERVING, None),
        Some(LoaderWorkers::InProcess) => (
            FIX_DATA_IN_PROCESS,
            Some(
                "the DataLoader loads each batch on the thread that launches the GPU's work (its annotations name \
                 _SingleProcessDataLoaderIter: num_workers=0), so the GPU waits for every batch",
            ),
        ),
        Some(LoaderWorkers::Workers) => (
            FIX_DATA_WORKERS,
            Some(
                "the DataLoader already loads in worker processes (its annotations name \
                 _MultiProcessingDataLoaderIter), and the GPU still waits for their batches",
            ),
        ),
        None if plan.training => (FIX_DATA, None),
        None => (FIX_DATA_GENERAL, None),
    };
    ev.facts.extend(said.map(str::to_string));
    let what = match plan.serving {
        true => "GPU waits at iteration starts while the engine prepares the batch",
        false => "GPU waits for input data",
    };
    ev.metrics.insert("idle_per_step_ns", (c.total_ns / ctx.steps_count() as u64) as f64);
    let summary = format!("{what}: {}", ctx.per_step(c.total_ns));
    Some(ctx.finding("data_loading", c.total_ns, summary, ev, fix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{api, kernel, report_of_all_steps, FOREACH_ADD};
    use crate::Report;
    use cuflight_format::{EventKind, RawEvent};

    /// Five steps of 10 ms named `step`, each with a range named `loader` over its first 2 ms (none where empty)
    /// and a GEMM launched after it, then an optimizer kernel where `training`: the GPU idles at every step's start
    /// while the host loads.
    fn loading_steps(step: &str, loader: &str, training: bool) -> Report {
        let strings = [(1, "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"), (2, FOREACH_ADD)];
        let mut strings = strings.to_vec();
        strings.extend([(5, loader), (8, step), (9, "cudaLaunchKernel")]);
        let mut events = Vec::new();
        const MS: u64 = 1_000_000;
        for s in 0..5u64 {
            let (t, corr) = (MS + s * 10 * MS, 1 + s as u32 * 2);
            events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 10 * MS) });
            if !loader.is_empty() {
                events.push(RawEvent { name: 5, ..RawEvent::new(EventKind::Range, 1, t + 1_000, t + 2 * MS) });
            }
            events.push(api(9, t + 2 * MS + 1_000, 2_000, corr));
            events.push(kernel(1, t + 2 * MS + 10_000, 5 * MS, corr));
            if training {
                events.push(api(9, t + 2 * MS + 4_000, 2_000, corr + 1));
                events.push(kernel(2, t + 7 * MS + 100_000, MS / 2, corr + 1));
            }
        }
        report_of_all_steps(&strings, events)
    }

    fn found(r: &Report) -> &Finding {
        r.findings.iter().find(|f| f.kind == "data_loading").expect("data_loading")
    }

    /// The fix follows what the program is and where its DataLoader loads, as its annotations name it.
    #[test]
    fn the_fix_for_waiting_on_input_fits_the_program_and_its_loader() {
        let single = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__";
        let multi = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__";
        let r = loading_steps("ProfilerStep#0", single, true);
        let f = found(&r);
        assert_eq!(f.fix, FIX_DATA_IN_PROCESS);
        assert!(f.summary.starts_with("GPU waits for input data: "), "{}", f.summary);
        assert!(f.evidence.facts.iter().any(|l| l.contains("num_workers=0")), "{:?}", f.evidence.facts);
        let r = loading_steps("ProfilerStep#0", multi, true);
        let f = found(&r);
        assert_eq!(f.fix, FIX_DATA_WORKERS);
        assert!(f.evidence.facts.iter().any(|l| l.contains("worker processes")), "{:?}", f.evidence.facts);
        // Not named: the usual DataLoader advice to a training loop, in general terms to other programs.
        assert_eq!(found(&loading_steps("ProfilerStep#0", "", true)).fix, FIX_DATA);
        assert_eq!(found(&loading_steps("ProfilerStep#0", "data_load", true)).fix, FIX_DATA);
        assert_eq!(found(&loading_steps("ProfilerStep#0", "", false)).fix, FIX_DATA_GENERAL);
        // Without a DataLoader annotation, a step's start of 0.5 ms outside CUDA is the loop's own host work.
        let short = |r: Report| r.findings.iter().all(|f| f.kind != "data_loading");
        let strings = [(1, "gemm"), (8, "ProfilerStep#0"), (9, "cudaLaunchKernel")];
        let mut events = Vec::new();
        for s in 0..5u64 {
            let t = 1_000_000 + s * 1_000_000;
            events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 1_000_000) });
            events.push(api(9, t + 500_000, 2_000, s as u32 + 1));
            events.push(kernel(1, t + 510_000, 400_000, s as u32 + 1));
        }
        assert!(short(report_of_all_steps(&strings, events)));
        // A model server's iterations: the engine builds the batch, whatever else the trace holds.
        let r = loading_steps("decode", single, false);
        let f = found(&r);
        assert_eq!(f.fix, FIX_DATA_SERVING);
        assert!(f.summary.starts_with("GPU waits at iteration starts"), "{}", f.summary);
    }

    /// Five steps of 10 ms whose first launch, 2 ms in, is issued by a framework operator (`cpu_op`, as
    /// torch.profiler writes them) that began `op_from` into the step; an annotation around it all is no operator.
    fn steps_with_an_operator(op_from: u64) -> Report {
        let strings = [(1, "gemm"), (3, "aten::ones"), (4, "cpu_op"), (6, "user_annotation"), (7, "## forward ##")];
        let mut strings = strings.to_vec();
        strings.extend([(8, "ProfilerStep#0"), (9, "cudaLaunchKernel")]);
        const MS: u64 = 1_000_000;
        let mut events = Vec::new();
        for s in 0..5u64 {
            let (t, corr) = (MS + s * 10 * MS, 1 + s as u32);
            events.push(RawEvent { name: 8, ..RawEvent::new(EventKind::Range, 1, t, t + 10 * MS) });
            let range = |name: u32, category: u64, from: u64| RawEvent {
                name,
                c: category,
                ..RawEvent::new(EventKind::Range, 1, from, t + 2 * MS + 5_000)
            };
            events.push(range(7, 6, t + 1_000));
            events.push(range(3, 4, t + op_from));
            events.push(api(9, t + 2 * MS + 1_000, 2_000, corr));
            events.push(kernel(1, t + 2 * MS + 10_000, 5 * MS, corr));
        }
        report_of_all_steps(&strings, events)
    }

    /// The host's time in the operator that launches a step's first work is that operator's (HTA's event_sync
    /// trace: 2.2 ms in aten::ones, inside aten::empty, before aten::fill_'s launch, had read as "GPU waits for
    /// input data" at 88% of the step); only what comes before it, a millisecond or more, is the input's.
    #[test]
    fn the_operator_that_launches_a_steps_first_work_is_host_work_not_input() {
        let r = steps_with_an_operator(500_000);
        assert!(r.findings.iter().all(|f| f.kind != "data_loading"), "{:?}", r.findings);
        let cpu = r.findings.iter().find(|f| f.kind == "cpu_bound").expect("cpu_bound");
        let ones = cpu.evidence.api_calls.iter().find(|c| c.name == "aten::ones").expect("aten::ones");
        assert_eq!((ones.count, ones.total_ns), (5, 5 * 1_501_000), "{cpu:?}");
        // Begun 1.5 ms into the step: the 1.5 ms before it is the input's.
        let r = steps_with_an_operator(1_500_000);
        assert_eq!(found(&r).time_lost_ns, 5 * 1_500_000, "{:?}", r.findings);
    }
}
