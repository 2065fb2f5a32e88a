//! What a CUDA runtime or driver call does, by its name: the one classifier of CUDA calls. The agent uses it to
//! choose the callbacks it subscribes to, the calls whose Python stack it reads and the calls its flight recorder
//! watches for hangs (computed once per callback id at set-up); every analysis uses it to tell launches, copies,
//! allocations, waits, polls and queries apart (cached once per interned name).
//!
//! Names come in every dialect cuflight reads: CUPTI's callback names (`cudaMemcpy`, `cuMemcpyHtoD_v2`), the
//! binding names with their version suffix (`cudaLaunchKernel_v7000`, `cudaStreamSynchronize_ptsz_v7000`), nsys's
//! and Kineto's spellings. [`base_name`] strips the suffixes; [`CallEffects::of`] reads the name's words, so a call
//! added by a later CUDA release is classed by what it says it does (`cudaMemcpyBatchAsync` copies).
//!
//! ```
//! use cuflight_format::calls::{CallClass, CallEffects};
//! let sync = CallEffects::of("cudaStreamSynchronize_ptsz_v7000");
//! assert_eq!(sync.class(false), CallClass::Sync);
//! assert!(CallEffects::of("cudaHostAlloc").allocates());
//! assert!(CallEffects::of("cuCtxGetCurrent").only_queries());
//! ```

/// A call's name without the suffixes CUPTI's tables and nsys add: the version (`_v3020`, and a driver entry
/// point's own `_v2`: `cuMemAlloc_v2` is the same call as `cuMemAlloc`) and the per-thread default stream
/// (`_ptsz`, `_ptds`). `cudaMemcpy_ptds_v7000` -> `cudaMemcpy`, `cuStreamGetCaptureInfo_v2_ptsz` ->
/// `cuStreamGetCaptureInfo`. The one place these suffixes are stripped.
pub fn base_name(name: &str) -> &str {
    // Both orders occur: `cudaMemcpy_ptds_v7000` (CUPTI's runtime table), `cuStreamGetCaptureInfo_v2_ptsz` (its
    // driver table).
    let base = without_version(name);
    let base = base.strip_suffix("_ptsz").or_else(|| base.strip_suffix("_ptds")).unwrap_or(base);
    without_version(base)
}

/// A table's name for a call as the call names itself: without the version suffix CUPTI's callback-id tables and
/// nsys's exports add (`cudaMalloc_v3020` -> `cudaMalloc`, `cudaMemcpy_ptds_v7000` -> `cudaMemcpy_ptds`), the
/// per-thread default stream kept, as CUPTI's callbacks name the call.
pub fn without_version(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((b, v)) if !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()) => b,
        _ => name,
    }
}

/// What a call does, as bits ([`CallEffects::of`]). A call may do several things: `cudaMemcpyAsync` copies
/// asynchronously, `cudaFreeAsync` frees in stream order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CallEffects(u32);

impl CallEffects {
    /// Launches a kernel: `cudaLaunchKernel`, `cuLaunchKernelEx`, `cudaLaunchCooperativeKernel`, `cuLaunchGrid`.
    pub const LAUNCHES_KERNEL: u32 = 1;
    /// Launches a whole CUDA graph: `cudaGraphLaunch`, `cuGraphLaunch`.
    pub const LAUNCHES_GRAPH: u32 = 1 << 1;
    /// Copies memory (`cudaMemcpy*`, `cuMemcpy*`): device work, and a wait when not asynchronous.
    pub const COPIES: u32 = 1 << 2;
    /// Sets memory on the device (`cudaMemset*`, `cuMemsetD*`).
    pub const SETS_MEMORY: u32 = 1 << 3;
    /// Allocates device, pinned host or managed memory: `cudaMalloc*`, `cudaHostAlloc`, `cuMemAlloc*`,
    /// `cuMemHostAlloc`.
    pub const ALLOCATES: u32 = 1 << 4;
    /// Frees memory: `cudaFree*`, `cuMemFree*`. A synchronous free waits for the device.
    pub const FREES: u32 = 1 << 5;
    /// Waits until the device, a stream or an event is done: `cudaDeviceSynchronize`, `cuStreamSynchronize`...
    pub const SYNCHRONIZES: u32 = 1 << 6;
    /// Makes a stream wait for an event on the device (the host does not wait): `cudaStreamWaitEvent`.
    pub const STREAM_WAIT: u32 = 1 << 7;
    /// Asks whether work is done without waiting: `cudaEventQuery`, `cudaStreamQuery`, `cuEventQuery`.
    pub const POLLS: u32 = 1 << 8;
    /// Only reads state (the current device or context, the last error, attributes, versions, capture status,
    /// free memory): it neither queues work nor waits. PyTorch makes hundreds a step.
    pub const QUERIES: u32 = 1 << 9;
    /// Queues a host function in a stream (`cudaLaunchHostFunc`, `cudaStreamAddCallback`): it runs on the CPU
    /// and leaves no device record.
    pub const HOST_FUNCTION: u32 = 1 << 10;
    /// Named `...Async`: returns before its work is done (stream-ordered allocation, asynchronous copies).
    pub const ASYNC: u32 = 1 << 11;
    /// The calls PyTorch makes around every operation that change only the host's view (`cudaSetDevice`, event
    /// creation and destruction): not queries, but left out of a default recording as Kineto leaves them out.
    pub const BOOKKEEPING: u32 = 1 << 12;
    /// Allocates or frees pinned (page-locked) host memory: `cudaMallocHost`, `cudaHostAlloc`, `cudaFreeHost`,
    /// `cuMemAllocHost`, `cuMemHostAlloc`, `cuMemFreeHost`. Milliseconds a call: the driver locks the pages.
    pub const PINNED_HOST: u32 = 1 << 13;
    /// Starts capturing a stream's work into a CUDA graph (`cudaStreamBeginCapture`, `...ToGraph`): until the
    /// capture ends, the stream's launches describe nodes and run nothing.
    pub const BEGINS_CAPTURE: u32 = 1 << 14;
    /// Ends a stream capture and returns its graph (`cudaStreamEndCapture`).
    pub const ENDS_CAPTURE: u32 = 1 << 15;
    /// Makes or updates an executable graph (`cudaGraphInstantiate*`, `cudaGraphExecUpdate`, `cuGraphUpload`):
    /// host work, milliseconds for a large graph, paid once when graphs are reused.
    pub const INSTANTIATES_GRAPH: u32 = 1 << 16;
    /// Sets CUDA up: creates or destroys a context or stream, loads a module or library, sets a limit or a
    /// function's attributes (`cudaStreamCreateWithFlags`, `cuModuleLoadData`, `cudaFuncSetAttribute`). Host work
    /// inside the driver, once or rarely, milliseconds where it initialises CUDA; never a launch's overhead.
    pub const SETS_UP: u32 = 1 << 17;

    /// The effects of the call named `name` (any dialect, see the module's header).
    pub fn of(name: &str) -> CallEffects {
        let base = base_name(name);
        let has = |k: &str| base.contains(k);
        let mut f = 0;
        let mut set = |cond: bool, flag: u32| {
            if cond {
                f |= flag;
            }
        };
        let host_function = has("LaunchHostFunc") || has("StreamAddCallback");
        let launches_graph = has("GraphLaunch");
        // Building or editing a graph (`cudaGraphAddMemcpyNode`, `cuGraphAddMemAllocNode`,
        // `cudaGraphExecMemsetNodeSetParams`) describes work; it neither copies, sets, allocates nor frees.
        let does = |k: &str| has(k) && (launches_graph || !has("Graph"));
        set(has("Launch") && !host_function && !launches_graph, Self::LAUNCHES_KERNEL);
        set(launches_graph, Self::LAUNCHES_GRAPH);
        set(does("Memcpy") || does("memcpy"), Self::COPIES);
        set(does("Memset") || does("memset"), Self::SETS_MEMORY);
        set(does("Malloc") || does("MemAlloc") || does("HostAlloc"), Self::ALLOCATES);
        set(does("Free"), Self::FREES);
        set(has("Synchronize"), Self::SYNCHRONIZES);
        set(has("StreamWaitEvent"), Self::STREAM_WAIT);
        set(has("EventQuery") || has("StreamQuery"), Self::POLLS);
        set(reads_state_only(base), Self::QUERIES);
        set(host_function, Self::HOST_FUNCTION);
        set(has("Async"), Self::ASYNC);
        set(does("MallocHost") || does("HostAlloc") || does("MemAllocHost") || does("FreeHost"), Self::PINNED_HOST);
        set(has("StreamBeginCapture"), Self::BEGINS_CAPTURE);
        set(has("StreamEndCapture"), Self::ENDS_CAPTURE);
        set(has("GraphInstantiate") || has("GraphExecUpdate") || has("GraphUpload"), Self::INSTANTIATES_GRAPH);
        set(sets_up(base), Self::SETS_UP);
        set(
            matches!(base, "cudaSetDevice" | "cudaEventCreate" | "cudaEventCreateWithFlags" | "cudaEventDestroy"),
            Self::BOOKKEEPING,
        );
        CallEffects(f)
    }

    /// Whether every bit of `flag` is set.
    #[inline]
    pub fn has(self, flag: u32) -> bool {
        self.0 & flag == flag
    }
    /// The bits.
    #[inline]
    pub fn bits(self) -> u32 {
        self.0
    }
    /// Queues device work that leaves device records (kernels, graphs, copies, memsets): where flows from launches
    /// to their work start. A host function leaves none.
    #[inline]
    pub fn queues_work(self) -> bool {
        self.0 & (Self::LAUNCHES_KERNEL | Self::LAUNCHES_GRAPH | Self::COPIES | Self::SETS_MEMORY) != 0
    }
    #[inline]
    pub fn launches_kernel(self) -> bool {
        self.has(Self::LAUNCHES_KERNEL)
    }
    /// Allocates (not frees) memory, synchronously or in stream order.
    #[inline]
    pub fn allocates(self) -> bool {
        self.has(Self::ALLOCATES)
    }
    /// Allocates or frees memory.
    #[inline]
    pub fn manages_memory(self) -> bool {
        self.0 & (Self::ALLOCATES | Self::FREES) != 0
    }
    #[inline]
    pub fn only_queries(self) -> bool {
        self.has(Self::QUERIES)
    }
    /// Sets CUDA up ([`Self::SETS_UP`]): time in it is not a launch's overhead (a stream created in 474 ms as CUDA
    /// initialised, on HTA's critical_path traces); the report gives a millisecond or more of it to CUDA's set-up.
    #[inline]
    pub fn only_sets_up(self) -> bool {
        self.has(Self::SETS_UP)
    }
    /// Has nothing of its own to take time over: it queues no device work, neither waits, copies, allocates, frees
    /// nor polls, and builds no graph (event creation and recording, setting the device, attribute queries). It
    /// returns in microseconds unless CUDA does its own set-up inside it: the first runtime call initialises CUDA,
    /// and without lazy loading the first call after a library registers its kernels loads every one of them
    /// (cuDNN's first convolution, on the V100 ResNet-50 samples of Kineto's TensorBoard plugin: 720 ms inside a
    /// `cudaEventCreateWithFlags`).
    #[inline]
    pub fn returns_at_once(self) -> bool {
        const ACTS: u32 = CallEffects::LAUNCHES_KERNEL
            | CallEffects::LAUNCHES_GRAPH
            | CallEffects::COPIES
            | CallEffects::SETS_MEMORY
            | CallEffects::ALLOCATES
            | CallEffects::FREES
            | CallEffects::SYNCHRONIZES
            | CallEffects::POLLS
            | CallEffects::BEGINS_CAPTURE
            | CallEffects::ENDS_CAPTURE
            | CallEffects::INSTANTIATES_GRAPH;
        self.0 & ACTS == 0
    }
    /// Blocks the calling thread until the GPU reaches a point: an explicit synchronisation, or a copy that is not
    /// asynchronous (`cudaMemcpy`, `cuMemcpyHtoD_v2`). Asynchronous copies into pageable memory block too, but
    /// only their device record tells (see [`CallEffects::class`]).
    #[inline]
    pub fn waits_for_gpu(self) -> bool {
        self.has(Self::SYNCHRONIZES) || self.has(Self::COPIES) && !self.has(Self::ASYNC)
    }

    /// What the call is to the thread that makes it and to the GPU's queue. `copy_to_pageable`: the call's copy
    /// (known from its device record) goes from the device into pageable host memory, which the driver stages,
    /// so the call blocks however it is named.
    pub fn class(self, copy_to_pageable: bool) -> CallClass {
        let is_async = self.has(Self::ASYNC);
        if self.waits_for_gpu() || self.has(Self::COPIES) && copy_to_pageable {
            CallClass::Sync
        } else if self.manages_memory() && !is_async {
            CallClass::Alloc
        } else if self.has(Self::POLLS) {
            CallClass::Poll
        } else {
            CallClass::Launch
        }
    }

    /// Whether a default recording (`--trace cuda`, no `queries`) subscribes to this call: every call but those
    /// that only read state and the bookkeeping PyTorch makes around every operation (Kineto leaves both out).
    pub fn recorded_by_default(self) -> bool {
        !self.only_queries() && !self.has(Self::BOOKKEEPING)
    }

    /// Whether the agent subscribes to this driver call when a program makes it directly (runtime calls come
    /// through the runtime domain and their nested driver calls are skipped): launches, copies, memsets,
    /// allocations, frees, synchronisations, stream waits, and stream capture and graph instantiation.
    pub fn recorded_from_driver(self) -> bool {
        self.queues_work()
            || self.manages_memory()
            || self.0 & (Self::SYNCHRONIZES | Self::STREAM_WAIT | Self::BEGINS_CAPTURE | Self::ENDS_CAPTURE) != 0
            || self.has(Self::INSTANTIATES_GRAPH)
    }

    /// Which calls carry the Python stack of their thread (with `python` traced).
    pub fn python_stacks(self) -> PythonStacks {
        if self.has(Self::SYNCHRONIZES) || self.has(Self::COPIES) || self.manages_memory() {
            PythonStacks::Every
        } else if self.0 & (Self::LAUNCHES_KERNEL | Self::LAUNCHES_GRAPH) != 0 {
            PythonStacks::Sampled
        } else {
            PythonStacks::None
        }
    }
}

/// A call that only reads state, by its base name: a `Get`, `Peek` or `Is...` verb (the current device or context,
/// the last error, attributes, versions, capture status, free memory), and the capture-mode exchange PyTorch makes
/// around every operation.
/// Calls that set CUDA up ([`CallEffects::SETS_UP`]), by what they make, load or configure (runtime and driver
/// names alike: `cudaStreamCreate`, `cuStreamCreate`, `cuModuleLoadDataEx`, `cuLibraryLoadFromFile`).
fn sets_up(base: &str) -> bool {
    const VERBS: [&str; 14] = [
        "StreamCreate",
        "StreamDestroy",
        "CtxCreate",
        "CtxDestroy",
        "PrimaryCtxRetain",
        "PrimaryCtxRelease",
        "PrimaryCtxReset",
        "DeviceReset",
        "ModuleLoad",
        "ModuleUnload",
        "LibraryLoad",
        "LibraryUnload",
        "SetLimit",
        "FuncSetAttribute",
    ];
    VERBS.iter().any(|v| base.contains(v))
}

fn reads_state_only(base: &str) -> bool {
    let verb = base
        .strip_prefix("__cuda")
        .or_else(|| base.strip_prefix("cuda"))
        .or_else(|| base.strip_prefix("cu"))
        .unwrap_or(base);
    verb.contains("Get")
        || verb.starts_with("Peek")
        || verb.contains("IsCapturing")
        || verb.contains("ExchangeStreamCaptureMode")
}

/// What a call is to the thread that makes it and to the GPU's queue ([`CallEffects::class`]), ordered from the
/// least blocking to the most.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum CallClass {
    /// Issues work and returns (launches, async copies, event records...), or returns at once.
    Launch,
    /// Asks whether work is done (`cudaEventQuery`, `cudaStreamQuery`): a loop of them is the host polling.
    Poll,
    /// A synchronous allocation or free, `cudaHostAlloc` among them (`cudaFree` also synchronises the device).
    Alloc,
    /// Blocks the host until the GPU catches up: stream/device/event synchronisation, synchronous copies and
    /// device-to-host copies into pageable memory.
    Sync,
}

/// Which calls carry the Python stack of their thread ([`CallEffects::python_stacks`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PythonStacks {
    /// Never: the call neither waits, copies, allocates nor launches.
    None,
    /// Every call: it waits for the GPU, copies or allocates (what findings blame on a host line).
    Every,
    /// Every Nth launch per thread (`CUFLIGHT_PY_LAUNCH_EVERY`).
    Sampled,
}

#[cfg(test)]
#[path = "calls_tests.rs"]
mod tests;
