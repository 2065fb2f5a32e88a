//! Simulated devices: one worker thread per stream runs its operations in order, so that kernels, copies and
//! memsets overlap across streams and take real time. The legacy default stream (handle 0) synchronises with the
//! device's blocking streams, as CUDA's legacy semantics require.

use crate::activity;
use crate::cupti_state::current_correlation;
use crate::now_ns;
use crate::records::SimRecord;
use crossbeam_channel::{unbounded, Sender};
use once_cell::sync::Lazy;
use parking_lot::{Condvar, Mutex};
use std::collections::HashMap;
use std::ffi::c_char;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// `cudaStreamNonBlocking` (a macro in driver_types.h, so not in the bindings).
pub(crate) const STREAM_NON_BLOCKING: u32 = 1;
pub(crate) use crate::MAX_DEVICES;

pub(crate) type KernelFn = unsafe extern "C" fn(*mut *mut libc::c_void);

#[derive(Clone)]
pub(crate) enum Work {
    Kernel {
        f: KernelFn,
        args: Vec<u64>,
        grid: [i32; 3],
        block: [i32; 3],
        shared: i32,
        name: *const c_char,
    },
    Memcpy {
        dst: usize,
        src: usize,
        bytes: usize,
        is_async: bool,
    },
    /// cudaMemcpy2D: `height` rows of `width` bytes, `dpitch`/`spitch` apart; one record of width x height bytes.
    Memcpy2D {
        dst: usize,
        dpitch: usize,
        src: usize,
        spitch: usize,
        width: usize,
        height: usize,
        is_async: bool,
    },
    Memset {
        dst: usize,
        value: u8,
        bytes: usize,
        is_async: bool,
    },
    Record(Arc<Event>),
    /// `cudaLaunchHostFunc`: a host function run in stream order by the stream's thread, with no activity record
    /// (not device work). cuda_runtime_api.h: "The function will be called after currently enqueued work and will
    /// block work added after it."
    HostFn(unsafe extern "C" fn(*mut libc::c_void), usize),
    /// Wait until `stream` has completed operation `seq`.
    Wait(Arc<Stream>, u64),
    Free(usize),
}

// SAFETY: raw pointers in Work are addresses of simulated device memory and static kernel names, valid across
// threads by the CUDA programming model (the app keeps them alive until the stream is synchronised).
unsafe impl Send for Work {}
// SAFETY: as above; graph nodes hold Work that is only read (cloned) once captured.
unsafe impl Sync for Work {}

struct Op {
    work: Work,
    correlation: u32,
    /// (graph id, node id) for work launched as a node of an instantiated graph.
    graph: Option<(u32, u64)>,
    /// The last node of its graph launch: the launch's graph-level record follows it.
    last_node: bool,
}

/// A stream capture in progress (cudaStreamBeginCapture): work is recorded as graph nodes instead of run.
pub(crate) struct Capture {
    pub(crate) nodes: Vec<Work>,
    /// A call that is illegal during capture (e.g. synchronising the stream) happened: the capture fails.
    pub(crate) invalidated: bool,
}

pub(crate) struct Stream {
    pub(crate) id: u32,
    pub(crate) device: u32,
    pub(crate) blocking: bool,
    tx: Mutex<Option<Sender<Op>>>,
    submitted: AtomicU64,
    done: Mutex<Progress>,
    cv: Condvar,
    pub(crate) capture: Mutex<Option<Capture>>,
}

/// Operations completed, and the lowest count a waiter waits for: the stream's thread wakes waiters only when one
/// of them is satisfied, as a GPU's completion does. Waking every waiter after every operation cost each op a
/// futex round trip and a context switch (7 us between back-to-back kernels on a 2-core machine, against about
/// 1 us on a GPU).
struct Progress {
    done: u64,
    wake_at: u64,
}

#[derive(Default)]
pub(crate) struct Event {
    pub(crate) id: u32,
    /// (stream, seq) of the record operation, once recorded.
    pub(crate) recorded: Mutex<Option<(Arc<Stream>, u64)>>,
    pub(crate) timestamp: AtomicU64,
}

static NEXT_STREAM_ID: AtomicU32 = AtomicU32::new(7);
pub(crate) static NEXT_EVENT_ID: AtomicU32 = AtomicU32::new(1);
static STREAMS: Lazy<Mutex<HashMap<usize, Arc<Stream>>>> = Lazy::new(|| Mutex::new(HashMap::new()));
static LEGACY: Lazy<Vec<Arc<Stream>>> =
    Lazy::new(|| (0..MAX_DEVICES).map(|d| Stream::spawn(d, true, Some(d + 1))).collect());

impl Stream {
    /// A stream with its worker thread. Legacy default streams get CUPTI stream ids 1..; others count from 7.
    fn spawn(device: u32, blocking: bool, id: Option<u32>) -> Arc<Stream> {
        let (tx, rx) = unbounded::<Op>();
        let id = id.unwrap_or_else(|| NEXT_STREAM_ID.fetch_add(1, Ordering::Relaxed));
        let s = Arc::new(Stream {
            id,
            device,
            blocking,
            tx: Mutex::new(Some(tx)),
            submitted: AtomicU64::new(0),
            done: Mutex::new(Progress { done: 0, wake_at: u64::MAX }),
            cv: Condvar::new(),
            capture: Mutex::new(None),
        });
        let me = s.clone();
        let spawned = std::thread::Builder::new().name(format!("cudasim-stream-{id}")).spawn(move || {
            // A kernel that declares its end (cudasim_kernel_ends_at) sleeps until then: Linux's default timer
            // slack (50 us) made every such kernel end 50-90 us late and left gaps no GPU has between queued
            // kernels (a graph replay's nodes run back to back, about a microsecond apart on an H100).
            // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
            unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
            let mut previous_end = 0;
            let mut previous_node: Option<(u32, u64)> = None;
            // The first node's start of the graph launch running (for its graph-level record).
            let mut launch_start = 0;
            for op in rx {
                crate::timing::op_gap(previous_end);
                let (graph, last, correlation) = (op.graph, op.last_node, op.correlation);
                let ran = me.execute(op, previous_node);
                if let (Some((graph_id, _)), Some((_, start, end))) = (graph, ran) {
                    if previous_node.is_none_or(|(c, _)| c != correlation) {
                        launch_start = start;
                    }
                    if last {
                        activity::emit(SimRecord::GraphTrace {
                            start: launch_start,
                            end,
                            device: me.device,
                            stream: me.id,
                            correlation,
                            graph_id,
                        });
                    }
                }
                previous_node = ran.map(|(c, _, end)| (c, end));
                previous_end = now_ns();
                let mut p = me.done.lock();
                p.done += 1;
                if p.done >= p.wake_at {
                    // Every waiter wakes; those still short of their count register again.
                    p.wake_at = u64::MAX;
                    me.cv.notify_all();
                }
            }
        });
        if spawned.is_err() {
            // No thread: drop the sender so enqueues fail instead of hanging.
            *s.tx.lock() = None;
        }
        s
    }

    /// Paces a finished copy like the link it used and emits its record. Between two devices the copy is a
    /// peer-to-peer one (CUPTI_ACTIVITY_MEMCPY_KIND_PTOP).
    /// A copy that began at `now` on this thread's clock, `late` after its recorded start (a graph node's:
    /// [`Self::execute`]); returns its recorded end.
    fn copied(
        &self,
        (now, late): (u64, u64),
        op: (u32, Option<(u32, u64)>),
        (dst, src, bytes): (usize, usize, usize),
        is_async: bool,
    ) -> u64 {
        let (correlation, graph) = op;
        let (sk, dk) = (crate::memory::cupti_kind_of(src), crate::memory::cupti_kind_of(dst));
        crate::memory::pace_like_pcie(now, bytes, sk, dk);
        let peer = matches!(
            (crate::memory::lookup(src), crate::memory::lookup(dst)),
            (Some((crate::memory::Space::Device, a)), Some((crate::memory::Space::Device, b))) if a != b
        );
        let copy_kind =
            if peer { crate::c::CUPTI_ACTIVITY_MEMCPY_KIND_PTOP as u8 } else { crate::memory::copy_kind(sk, dk) };
        let (start, end) = (now - late, now_ns() - late);
        crate::pm_counters::copy_ran(self.device, start, end, copy_kind as u32, bytes as f64);
        activity::emit(SimRecord::Memcpy {
            start,
            end,
            device: self.device,
            stream: self.id,
            correlation,
            bytes: bytes as u64,
            copy_kind,
            src_kind: sk,
            dst_kind: dk,
            is_async,
            graph: graph.unwrap_or((0, 0)),
        });
        end
    }

    /// Runs one op. `previous_node`: (correlation, recorded end) of the kernel, copy or memset just run, when it was
    /// a graph node; returns (correlation, recorded start, recorded end) of this op when it is one.
    fn execute(&self, op: Op, previous_node: Option<(u32, u64)>) -> Option<(u32, u64, u64)> {
        let now = now_ns();
        // A graph launch queues all its nodes at once, and a GPU runs each right after the one before: queued ops
        // start 1.7 us apart at the median on a real H100 (kineto-h100-qwen-inference, 999 pairs; `CUDASIM_OP_GAP_NS`
        // in timing.rs). The node's record starts then, not when this thread got to it (waking from the previous
        // kernel's sleep took it tens of microseconds, milliseconds on a loaded machine).
        let start = match (op.graph, previous_node) {
            (Some(_), Some((correlation, end))) if correlation == op.correlation => {
                end.saturating_add(crate::timing::op_gap_ns()).min(now)
            }
            _ => now,
        };
        // How far this thread runs behind the node's start: the kernel's body (the copy, the memset) runs now and its
        // end moves back as far, so that the graph's next node starts the GPU's gap after it.
        let late = now - start;
        match op.work {
            Work::Kernel { f, mut args, grid, block, shared, name } => {
                let mut ptrs: Vec<*mut libc::c_void> =
                    args.iter_mut().map(|a| a as *mut u64 as *mut libc::c_void).collect();
                let record = SimRecord::Kernel {
                    start,
                    end: 0,
                    device: self.device,
                    stream: self.id,
                    correlation: op.correlation,
                    grid,
                    block,
                    dynamic_shared: shared,
                    name,
                    graph: op.graph.unwrap_or((0, 0)),
                };
                let token = activity::kernel_started(record);
                let counted = crate::pm_counters::work_started(self.device, start);
                crate::pm_counters::take_declared();
                KERNEL_ENDS_AT.with(|e| e.set(0));
                // SAFETY: the app launched `f` as a kernel taking `void **args`; each entry points at an 8-byte
                // copy of the argument taken at launch, alive for the call.
                unsafe { f(ptrs.as_mut_ptr()) };
                let end = match KERNEL_ENDS_AT.with(|e| e.get()) {
                    0 => now_ns() - late,
                    at => {
                        // It ends its declared time after its start, and the thread sleeps until then, not until
                        // that long after it got to it: a thread behind its graph catches up instead of falling
                        // further behind at every node (each sleep wakes late).
                        let end = at.max(now) - late;
                        if let Some(wait) = end.checked_sub(now_ns()).filter(|&w| w > 0) {
                            std::thread::sleep(std::time::Duration::from_nanos(wait));
                        }
                        end
                    }
                };
                if counted.is_some() {
                    let span =
                        crate::pm_counters::kernel_span(start, end, grid, block, crate::pm_counters::take_declared());
                    crate::pm_counters::work_finished(self.device, counted, span);
                }
                activity::kernel_finished(token, record.map_times(|t| if t == 0 { end } else { t }));
                return op.graph.map(|_| (op.correlation, start, end));
            }
            Work::Memcpy { dst, src, bytes, is_async } => {
                // SAFETY: the app passed valid ranges of `bytes` bytes (host memory stands in for device memory).
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
                let end = self.copied((now, late), (op.correlation, op.graph), (dst, src, bytes), is_async);
                return op.graph.map(|_| (op.correlation, start, end));
            }
            Work::Memcpy2D { dst, dpitch, src, spitch, width, height, is_async } => {
                for row in 0..height {
                    // SAFETY: the app passed 2D ranges of `height` rows of `width` bytes at the given pitches.
                    unsafe {
                        std::ptr::copy((src + row * spitch) as *const u8, (dst + row * dpitch) as *mut u8, width)
                    };
                }
                let end = self.copied((now, late), (op.correlation, op.graph), (dst, src, width * height), is_async);
                return op.graph.map(|_| (op.correlation, start, end));
            }

            Work::Memset { dst, value, bytes, is_async } => {
                // SAFETY: the app passed a valid range of `bytes` bytes.
                unsafe { std::ptr::write_bytes(dst as *mut u8, value, bytes) };
                let end = now_ns() - late;
                activity::emit(SimRecord::Memset {
                    start,
                    end,
                    device: self.device,
                    stream: self.id,
                    correlation: op.correlation,
                    bytes: bytes as u64,
                    value: value as u32,
                    memory_kind: crate::memory::cupti_kind_of(dst) as u16,
                    is_async,
                    graph: op.graph.unwrap_or((0, 0)),
                });
                return op.graph.map(|_| (op.correlation, start, end));
            }
            Work::Record(ev) => ev.timestamp.store(now, Ordering::Release),
            // SAFETY: the app passed a host function and its argument, valid until the function has run.
            Work::HostFn(f, data) => unsafe { f(data as *mut libc::c_void) },
            Work::Wait(other, seq) => other.wait_for(seq),
            Work::Free(p) => {
                crate::memory::free(p as *mut u8, &[crate::memory::Space::Device]);
            }
        }
        None
    }

    /// Queues `work`; returns its sequence number (1-based), or None if the stream is gone. While the stream is
    /// capturing, kernels, copies and memsets become graph nodes instead (sequence 0: nothing to wait for).
    pub(crate) fn enqueue(self: &Arc<Self>, work: Work) -> Option<u64> {
        if let Some(capture) = self.capture.lock().as_mut() {
            if matches!(
                work,
                Work::Kernel { .. }
                    | Work::Memcpy { .. }
                    | Work::Memcpy2D { .. }
                    | Work::Memset { .. }
                    | Work::HostFn(..)
            ) {
                capture.nodes.push(work);
            }
            return Some(0);
        }
        self.order_against_legacy();
        self.push(work, None, false)
    }

    /// Queues one node of a graph launch.
    pub(crate) fn enqueue_node(self: &Arc<Self>, work: Work, graph: (u32, u64), last_node: bool) -> Option<u64> {
        self.order_against_legacy();
        self.push(work, Some(graph), last_node)
    }

    fn push(&self, work: Work, graph: Option<(u32, u64)>, last_node: bool) -> Option<u64> {
        let tx = self.tx.lock();
        let seq = self.submitted.fetch_add(1, Ordering::AcqRel) + 1;
        tx.as_ref()?.send(Op { work, correlation: current_correlation(), graph, last_node }).ok()?;
        Some(seq)
    }

    /// True while capturing; marks the capture failed (a call illegal during capture).
    pub(crate) fn invalidate_capture(&self) -> bool {
        match self.capture.lock().as_mut() {
            Some(c) => {
                c.invalidated = true;
                true
            }
            None => false,
        }
    }

    /// Legacy default-stream semantics: work on the legacy stream waits for all blocking streams of its device,
    /// and work on a blocking stream waits for the legacy stream's earlier work.
    fn order_against_legacy(self: &Arc<Self>) {
        let legacy = &LEGACY[self.device as usize];
        if Arc::ptr_eq(self, legacy) {
            let others: Vec<Arc<Stream>> =
                STREAMS.lock().values().filter(|s| s.blocking && s.device == self.device).cloned().collect();
            for s in others {
                let seq = s.submitted.load(Ordering::Acquire);
                if s.done.lock().done < seq {
                    self.push(Work::Wait(s, seq), None, false);
                }
            }
        } else if self.blocking {
            let seq = legacy.submitted.load(Ordering::Acquire);
            if legacy.done.lock().done < seq {
                self.push(Work::Wait(legacy.clone(), seq), None, false);
            }
        }
    }

    /// Blocks until operation `seq` has completed.
    pub(crate) fn wait_for(&self, seq: u64) {
        let mut p = self.done.lock();
        while p.done < seq {
            p.wake_at = p.wake_at.min(seq);
            self.cv.wait(&mut p);
        }
    }

    /// Blocks until everything queued so far has completed.
    pub(crate) fn synchronize(&self) {
        self.wait_for(self.submitted.load(Ordering::Acquire));
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.done.lock().done >= self.submitted.load(Ordering::Acquire)
    }

    fn close(&self) {
        *self.tx.lock() = None;
    }
}

/// The stream behind a `cudaStream_t` handle on `device` (0 = legacy default stream).
pub(crate) fn stream(handle: usize, device: u32) -> Option<Arc<Stream>> {
    crate::hw_trace::context_made();
    // cudaStreamLegacy is (cudaStream_t)1 and cudaStreamPerThread is 2; both map to the default stream here.
    if handle <= 2 {
        return LEGACY.get(device as usize).cloned();
    }
    STREAMS.lock().get(&handle).cloned()
}

pub(crate) fn create_stream(device: u32, flags: u32) -> usize {
    crate::hw_trace::context_made();
    let s = Stream::spawn(device, flags & STREAM_NON_BLOCKING == 0, None);
    let handle = Arc::as_ptr(&s) as usize;
    STREAMS.lock().insert(handle, s);
    handle
}

/// Destroys a stream after its queued work completes (as cudaStreamDestroy does).
pub(crate) fn destroy_stream(handle: usize) -> bool {
    let Some(s) = STREAMS.lock().remove(&handle) else {
        return false;
    };
    s.close();
    true
}

/// Every stream of `device`, legacy first.
pub(crate) fn device_streams(device: u32) -> Vec<Arc<Stream>> {
    let mut all = vec![LEGACY[device as usize].clone()];
    all.extend(STREAMS.lock().values().filter(|s| s.device == device).cloned());
    all
}

/// Records a synchronization activity for a host wait of `start..now`.
pub(crate) fn sync_record(kind: u32, stream: u32, event: u32, start: u64) {
    activity::emit(SimRecord::Sync { start, end: now_ns(), kind, stream, correlation: current_correlation(), event });
}

/// A device-side fault: once a kernel faulted, CUDA calls fail with its error. driver_types.h on
/// cudaErrorIllegalAddress (700) and the other launch faults (cudaErrorLaunchFailure 719, cudaErrorIllegalInstruction
/// 715, ...): "This leaves the process in an inconsistent state and any further CUDA work will return the same
/// error. To continue using CUDA, the process must be terminated and relaunched." The driver's CUresult values are
/// the same numbers (cuda.h: CUDA_ERROR_ILLEGAL_ADDRESS = 700).
static STICKY: AtomicU32 = AtomicU32::new(0);

/// Test double only (no such entry point exists in CUDA): a simulated kernel calls this to model a device-side
/// fault with `code` (e.g. 700, an illegal address), since a CPU kernel cannot fault the way a GPU kernel does.
#[no_mangle]
pub extern "C" fn cudasim_kernel_fault(code: u32) {
    let _ = STICKY.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
}

thread_local! {
    /// The end a running kernel declared through [`cudasim_kernel_ends_at`] (0: none); stream workers only.
    static KERNEL_ENDS_AT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Test double only (no such entry point exists in CUDA): a simulated kernel calls this to say when it finishes
/// on the simulated GPU, on the machine's CLOCK_MONOTONIC (`cudasim_machine_monotonic_ns`, the same as the
/// host's unless `CUDASIM_CLOCK_DRIFT_PPM` makes this host's clock run fast), in ns. A GPU stamps a kernel's end itself, whatever the host's scheduler
/// does; a CPU kernel's end is stamped when its stream's thread runs again, which a loaded host can delay by
/// milliseconds. The record ends at `ns` (not before its start), and a kernel that returns earlier holds its
/// stream until then, so the stream's next operation still starts after it.
#[no_mangle]
pub extern "C" fn cudasim_kernel_ends_at(ns: u64) {
    KERNEL_ENDS_AT.with(|e| e.set(crate::machine::host_monotonic(ns)));
}

/// The sticky error a call returns once a kernel faulted; version queries, which need no context, still work.
pub(crate) fn sticky_error(domain: crate::c::CUpti_CallbackDomain, cbid: u32) -> Option<u32> {
    use crate::c;
    let code = STICKY.load(Ordering::Acquire);
    let exempt = match domain {
        c::CUPTI_CB_DOMAIN_RUNTIME_API => matches!(
            cbid,
            c::CUPTI_RUNTIME_TRACE_CBID_cudaDriverGetVersion_v3020
                | c::CUPTI_RUNTIME_TRACE_CBID_cudaRuntimeGetVersion_v3020
        ),
        _ => cbid == c::CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion,
    };
    (code != 0 && !exempt).then_some(code)
}
