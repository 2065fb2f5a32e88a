//! Which collective a communication kernel ran: all-reduce, all-gather, all-to-all, point-to-point... The fix for
//! communication the GPU waits on depends on it (DDP's buckets and FSDP's prefetch act on all-reduces, all-gathers
//! and reduce-scatters; an all-to-all is sharded embeddings' or experts'; sends and receives are pipeline stages').
//!
//! The kernel's name does not always say. NCCL's kernels carry work of any collective: NCCL 2.1x ran collectives
//! without a specialised kernel of their own on `ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t` (on the shared A100
//! and two-rank H100 traces, most of that kernel's time sits under the host's `nccl:all_reduce`,
//! `nccl:_all_gather_base` and `nccl:_reduce_scatter_base` annotations, the rest under `nccl:all_to_all`), and
//! RCCL runs them on `ncclDevKernel_Generic`. What the program asked for is on the host: PyTorch's process groups
//! annotate each collective they launch (`nccl:all_reduce`, `nccl:send 0->1`, `c10d::alltoall_base_`), and NCCL's
//! own NVTX ranges are named after its API calls (`ncclAllReduce`; NVTX3_FUNC_WITH_PARAMS in its collectives.cc).
//! The range around a kernel's launch decides; the kernel's own name where nothing is around it.

use super::kernel_symbols::{function_part, kernel_base_name};
use rustc_hash::FxHashMap;

/// The collectives a fix tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Broadcast,
    Reduce,
    /// Sends and receives between two ranks (pipeline stages' transfers).
    PointToPoint,
}

impl Collective {
    pub const ALL: [Collective; 7] = [
        Collective::AllReduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::PointToPoint,
    ];

    /// Its name as PyTorch's annotations spell it.
    pub fn label(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "all_to_all",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::PointToPoint => "send/recv",
        }
    }

    /// Its place in [`Collective::ALL`] (an index for tallies).
    pub fn index(self) -> usize {
        self as usize
    }

    /// A data-parallel collective, the kind DDP and FSDP issue (gradients, parameters, their shards).
    pub fn is_data_parallel(self) -> bool {
        !matches!(self, Collective::AllToAll | Collective::PointToPoint)
    }
}

/// The collective a name spells, with its prefix and separators gone (`allreduce`, `alltoallbase`, `recvanysource`).
fn of_word(word: &str) -> Option<Collective> {
    let w: String = word.chars().filter(|c| c.is_ascii_alphanumeric()).map(|c| c.to_ascii_lowercase()).collect();
    let starts = |p: &str| w.starts_with(p);
    Some(if starts("allreduce") {
        Collective::AllReduce
    } else if starts("allgather") {
        Collective::AllGather
    } else if starts("reducescatter") {
        Collective::ReduceScatter
    } else if starts("alltoall") {
        Collective::AllToAll
    } else if starts("broadcast") {
        Collective::Broadcast
    } else if w == "reduce" || w == "reduceimpl" {
        Collective::Reduce
    } else if starts("send") || starts("recv") || starts("batchisendirecv") {
        Collective::PointToPoint
    } else {
        return None;
    })
}

/// The collective a host range announces: PyTorch's annotations (`nccl:all_reduce`, `nccl:_all_gather_base`,
/// `nccl:send 0->1`, `nccl:recv 0<-1`; the same `nccl:` on ROCm) and its c10d operators (`c10d::allreduce_`,
/// `c10d::alltoall_base_`, `c10d::recv_`), or NCCL's and RCCL's NVTX ranges (`ncclAllReduce`,
/// `ncclAllReduce_impl`, `ncclSend`). Others (`nccl:coalesced`, `ncclGroupEnd`, `c10d::barrier`) say nothing.
pub fn of_range(name: &str) -> Option<Collective> {
    let rest = if let Some(r) = name.strip_prefix("nccl:").or_else(|| name.strip_prefix("c10d::")) {
        r
    } else {
        // NCCL's API calls: `nccl` then a capital (not `nccl_...` or `ncclKernel...`, which are no calls).
        let r = name.strip_prefix("nccl").filter(|r| r.starts_with(|c: char| c.is_ascii_uppercase()))?;
        if r.contains("Kernel") {
            return None;
        }
        r
    };
    of_word(rest.split_whitespace().next().unwrap_or(""))
}

/// The collective a communication kernel's name says it ran, where it says: NCCL's and RCCL's specialised kernels
/// (`ncclDevKernel_AllGather_RING_LL`, `ncclKernel_AllReduce_RING_LL_Sum_float`) and other libraries'
/// (`multimem_all_reduce_kernel`, `cross_device_reduce_1stage`). NCCL's `SendRecv` and RCCL's `Generic` kernels
/// carry any collective (see the module's comment): None.
pub fn of_kernel(name: &str) -> Option<Collective> {
    let base = kernel_base_name(name);
    if let Some(rest) = base.strip_prefix("ncclDevKernel_").or_else(|| base.strip_prefix("ncclKernel_")) {
        let first = rest.split('_').next().unwrap_or("");
        return if first == "SendRecv" { None } else { of_word(first) };
    }
    let lower = function_part(name).to_ascii_lowercase();
    if lower.contains("cross_device_reduce") {
        return Some(Collective::AllReduce);
    }
    // The first collective the name spells, in `all_reduce`, `allreduce` or `AllReduce` form.
    let squeezed: String = lower.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    ["allreduce", "allgather", "reducescatter", "alltoall"]
        .iter()
        .filter_map(|w| squeezed.find(w).map(|at| (at, *w)))
        .min()
        .and_then(|(_, w)| of_word(w))
}

/// A collective's message as nccl-tests sizes it (its PERFORMANCE.md): the larger of the input and output buffers
/// (an all-gather's output, a reduce-scatter's input, the one buffer of the others), and the ranks taking part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    pub bytes: u64,
    pub ranks: u32,
}

impl Collective {
    /// nccl-tests' bus bandwidth factor over `ranks` (its PERFORMANCE.md): what each link carries for the algorithm
    /// bandwidth (size over time) an optimal algorithm reaches, so that figures of any collective compare with the
    /// hardware's peak: all-reduce 2(n-1)/n; all-gather, reduce-scatter and all-to-all (n-1)/n; the others 1.
    pub fn bus_factor(self, ranks: u32) -> f64 {
        let n = f64::from(ranks.max(1));
        match self {
            Collective::AllReduce => 2.0 * (n - 1.0) / n,
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce | Collective::PointToPoint => 1.0,
        }
    }
}

/// Bytes per element of PyTorch's dtype as `record_param_comms` names it (c10's ScalarType names).
fn dtype_bytes(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "Byte" | "Char" | "Bool" | "QInt8" | "QUInt8" | "Float8_e4m3fn" | "Float8_e5m2" | "Float8_e4m3fnuz"
        | "Float8_e5m2fnuz" | "Float8_e8m0fnu" => 1,
        "Short" | "Half" | "BFloat16" | "UInt16" => 2,
        "Int" | "Float" | "UInt32" | "QInt32" | "ComplexHalf" => 4,
        "Long" | "Double" | "UInt64" | "ComplexFloat" => 8,
        "ComplexDouble" => 16,
        _ => return None,
    })
}

/// What PyTorch's `record_param_comms` range says of its collective (its arguments' JSON text, as an import keeps
/// it: `"Collective name":"allreduce","In msg nelems":2049000,"Out msg nelems":2049000,"dtype":"Float","Group
/// size":8`), with its message where the sizes, dtype and group are given. None for what is no collective (`wait`,
/// `barrier`) or a text without a name (PyTorch 1.x wrote none).
pub fn of_params(text: &str) -> Option<(Collective, Option<Message>)> {
    let v: serde_json::Value = serde_json::from_str(&format!("{{{text}}}")).ok()?;
    let collective = of_word(v["Collective name"].as_str()?)?;
    let nelems = v["In msg nelems"].as_u64()?.max(v["Out msg nelems"].as_u64().unwrap_or(0));
    let message = dtype_bytes(v["dtype"].as_str().unwrap_or("")).and_then(|size| {
        let ranks = u32::try_from(v["Group size"].as_u64()?).ok().filter(|&r| r > 0)?;
        Some(Message { bytes: nelems.checked_mul(size)?, ranks })
    });
    Some((collective, message))
}

/// The most annotated collective ranges kept (32 bytes each): a long job's collectives.
pub const MAX_SPANS: usize = 1 << 20;

/// A range announcing a collective: (start, end, the collective, its message where the range says).
type Span = (u64, u64, Collective, Option<Message>);

/// The host's collective ranges, per thread: what each communication kernel's launch was inside.
#[derive(Default, Debug)]
pub struct CollectiveSpans {
    by_thread: FxHashMap<u32, Vec<Span>>,
    kept: usize,
    /// Ranges past [`MAX_SPANS`], not kept (their kernels read by their own names).
    pub not_kept: u64,
    sorted: bool,
}

impl CollectiveSpans {
    /// A range of thread `tid` that announces a collective (and its message, where it says).
    pub fn add(&mut self, tid: u32, (start, end): (u64, u64), collective: Collective, message: Option<Message>) {
        if self.kept >= MAX_SPANS {
            self.not_kept += 1;
            return;
        }
        self.kept += 1;
        self.sorted = false;
        self.by_thread.entry(tid).or_default().push((start, end.max(start), collective, message));
    }

    /// Sorts each thread's ranges by start (ranges recorded as NVTX push/pop close in end order).
    pub fn finish(&mut self) {
        for spans in self.by_thread.values_mut() {
            spans.sort_unstable_by_key(|s| (s.0, std::cmp::Reverse(s.1)));
        }
        self.sorted = true;
    }

    /// The collective announced by the innermost range of thread `tid` around a launch call (start, end).
    pub fn around(&self, tid: u32, call: (u64, u64)) -> Option<Collective> {
        self.around_with_message(tid, call).map(|c| c.0)
    }

    /// [`CollectiveSpans::around`], with the message of the innermost range around the call that gives one for
    /// that collective (PyTorch's `record_param_comms` holds its `nccl:all_reduce` annotation, which gives none).
    pub fn around_with_message(&self, tid: u32, call: (u64, u64)) -> Option<(Collective, Option<Message>)> {
        debug_assert!(self.sorted || self.kept == 0, "CollectiveSpans::finish first");
        let spans = self.by_thread.get(&tid)?;
        let after = spans.partition_point(|s| s.0 <= call.0);
        // Nested ranges (`c10d::alltoall_base_` around `nccl:all_to_all`) start before the call; the innermost
        // began last. A few ranges back is enough: collectives do not nest deeper.
        let mut around = spans[..after].iter().rev().take(8).filter(|s| s.1 >= call.1);
        let innermost = around.next()?;
        let message = innermost.3.or_else(|| around.filter(|s| s.2 == innermost.2).find_map(|s| s.3));
        Some((innermost.2, message))
    }

    pub fn is_empty(&self) -> bool {
        self.kept == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_annotations_name_their_collective() {
        // PyTorch's ProcessGroupNCCL profiling titles and c10d operators, as the shared traces hold them.
        assert_eq!(of_range("nccl:all_reduce"), Some(Collective::AllReduce));
        assert_eq!(of_range("nccl:_all_gather_base"), Some(Collective::AllGather));
        assert_eq!(of_range("nccl:_reduce_scatter_base"), Some(Collective::ReduceScatter));
        assert_eq!(of_range("nccl:all_to_all"), Some(Collective::AllToAll));
        assert_eq!(of_range("nccl:send 0->1"), Some(Collective::PointToPoint));
        assert_eq!(of_range("nccl:recv 1<-0"), Some(Collective::PointToPoint));
        assert_eq!(of_range("nccl:broadcast"), Some(Collective::Broadcast));
        assert_eq!(of_range("nccl:reduce"), Some(Collective::Reduce));
        assert_eq!(of_range("c10d::allreduce_"), Some(Collective::AllReduce));
        assert_eq!(of_range("c10d::alltoall_base_"), Some(Collective::AllToAll));
        assert_eq!(of_range("c10d::recv_any_source_"), Some(Collective::PointToPoint));
        // NCCL's and RCCL's NVTX ranges, named after the API call.
        assert_eq!(of_range("ncclAllReduce"), Some(Collective::AllReduce));
        assert_eq!(of_range("ncclAllReduce_impl"), Some(Collective::AllReduce));
        assert_eq!(of_range("ncclReduceScatter"), Some(Collective::ReduceScatter));
        assert_eq!(of_range("ncclSend"), Some(Collective::PointToPoint));
        for silent in ["nccl:coalesced", "ncclGroupEnd", "ncclCommInitRank", "c10d::barrier", "record_param_comms"] {
            assert_eq!(of_range(silent), None, "{silent}");
        }
        assert_eq!(of_range("ncclKernel_AllReduce_RING_LL_Sum_float"), None, "a kernel's name, not a call");
        assert_eq!(of_range("all_reduce_step"), None, "no library's annotation");
    }

    #[test]
    fn kernels_say_their_collective_only_where_they_are_specialised() {
        assert_eq!(of_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"), Some(Collective::AllReduce));
        assert_eq!(
            of_kernel("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            Some(Collective::AllGather)
        );
        assert_eq!(
            of_kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            Some(Collective::ReduceScatter)
        );
        assert_eq!(
            of_kernel("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            Some(Collective::Broadcast)
        );
        // Kernels that carry any collective.
        assert_eq!(
            of_kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"),
            None
        );
        assert_eq!(of_kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)"), None);
        // Other libraries' collectives.
        assert_eq!(
            of_kernel("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*)"),
            Some(Collective::AllReduce)
        );
        assert_eq!(of_kernel("void vllm::cross_device_reduce_1stage<half, 8>(...)"), Some(Collective::AllReduce));
        assert_eq!(of_kernel("allreduce_fusion_kernel_oneshot_lamport"), Some(Collective::AllReduce));
        assert_eq!(of_kernel("deep_ep::internode::all_to_all_dispatch"), Some(Collective::AllToAll));
    }

    /// PyTorch 2.x's `record_param_comms` arguments (TraceLens's B200 and MI300X traces, the shared V100 run).
    #[test]
    fn a_collectives_record_gives_its_message_as_nccl_tests_sizes_it() {
        let gather = r#""Collective name":"_allgather_base","In msg nelems":25136,"Out msg nelems":201088,"dtype":"BFloat16","Group size":8"#;
        assert_eq!(of_params(gather), Some((Collective::AllGather, Some(Message { bytes: 201088 * 2, ranks: 8 }))));
        let reduce = r#""Collective name":"allreduce","In msg nelems":2049000,"Out msg nelems":2049000,"dtype":"Float","Group size":1"#;
        assert_eq!(of_params(reduce), Some((Collective::AllReduce, Some(Message { bytes: 2049000 * 4, ranks: 1 }))));
        assert_eq!(of_params(r#""Collective name":"wait","In msg nelems":0,"dtype":"Byte","Group size":1"#), None);
        let no_group = r#""Collective name":"all_to_all","In msg nelems":10,"Out msg nelems":10,"dtype":"Float""#;
        assert_eq!(of_params(no_group), Some((Collective::AllToAll, None)));
        assert_eq!(of_params(r#""Input Dims":[[3]]"#), None);
        assert!((Collective::AllReduce.bus_factor(8) - 1.75).abs() < 1e-12);
        assert!((Collective::AllGather.bus_factor(8) - 0.875).abs() < 1e-12);
        assert_eq!(Collective::PointToPoint.bus_factor(2), 1.0);
    }

    #[test]
    fn a_launch_reads_the_innermost_range_around_it() {
        let mut s = CollectiveSpans::default();
        // Closed in end order, as NVTX pairs arrive: inner first.
        let m = Some(Message { bytes: 1 << 20, ranks: 8 });
        s.add(7, (120, 180), Collective::AllToAll, None);
        s.add(7, (100, 200), Collective::AllToAll, m);
        s.add(7, (300, 400), Collective::AllReduce, None);
        s.add(8, (100, 500), Collective::PointToPoint, None);
        s.finish();
        assert_eq!(s.around(7, (130, 140)), Some(Collective::AllToAll));
        assert_eq!(s.around_with_message(7, (130, 140)), Some((Collective::AllToAll, m)), "the outer range's message");
        assert_eq!(s.around(7, (310, 320)), Some(Collective::AllReduce));
        assert_eq!(s.around(7, (250, 260)), None, "between ranges");
        assert_eq!(s.around(7, (390, 410)), None, "the call ends after the range");
        assert_eq!(s.around(8, (310, 320)), Some(Collective::PointToPoint), "each thread its own");
        assert_eq!(s.around(9, (310, 320)), None);
    }
}
