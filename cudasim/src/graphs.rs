//! CUDA Graphs as the simulator models them (cuda_runtime_api.h, "Graph Management" and "Stream Management"):
//! `cudaStreamBeginCapture` turns the stream's kernels, copies and memsets into graph nodes instead of running
//! them; `cudaStreamEndCapture` returns the graph; `cudaGraphInstantiate` makes an executable graph; each
//! `cudaGraphLaunch` / `cuGraphLaunch` queues its nodes on a stream. Kernel records of graph nodes carry the
//! graph's id and a node id (`graphId`, `graphNodeId` of CUpti_ActivityKernel*) and the correlation id of the
//! launch call, as CUPTI reports them. Synchronising a capturing stream is illegal: it returns
//! `cudaErrorStreamCaptureUnsupported` and the capture fails at its end with `cudaErrorStreamCaptureInvalidated`.
//! Nodes run in capture order (the simulator keeps no dependency edges besides stream order).
//! `cudaGraphExecUpdate` sets an executable graph's node parameters from a topologically identical graph (as many
//! nodes, each of the same type, paired in order; a kernel node may change its function, as drivers since 11.2
//! allow) and fails with `cudaErrorGraphExecUpdateFailure` otherwise, its `resultInfo` saying why
//! (cuda_runtime_api.h, "cudaGraphExecUpdate"). The executable graph keeps its graph and node ids: the update
//! changes its nodes' parameters in place, so later replays' records name the same nodes.

use crate::context::current_device;
use crate::device::{self, Capture, Work};
use crate::runtime::put;
use crate::{c, CudaError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

struct Graph {
    id: u32,
    /// (node id, work)
    nodes: Vec<(u64, Work)>,
}

static NEXT_GRAPH: AtomicU32 = AtomicU32::new(1);
static NEXT_NODE: AtomicU64 = AtomicU64::new(1);
/// Graphs and executable graphs by handle (the address of their Arc).
static GRAPHS: Mutex<Option<HashMap<usize, Arc<Graph>>>> = Mutex::new(None);
static EXECS: Mutex<Option<HashMap<usize, Arc<Graph>>>> = Mutex::new(None);

fn insert(table: &Mutex<Option<HashMap<usize, Arc<Graph>>>>, g: Arc<Graph>) -> usize {
    let handle = Arc::as_ptr(&g) as usize;
    table.lock().get_or_insert_with(HashMap::new).insert(handle, g);
    handle
}

fn get(table: &Mutex<Option<HashMap<usize, Arc<Graph>>>>, handle: usize) -> Option<Arc<Graph>> {
    table.lock().as_ref()?.get(&handle).cloned()
}

/// Puts `g` in `table` under an existing handle (an updated executable graph keeps its handle).
fn replace(table: &Mutex<Option<HashMap<usize, Arc<Graph>>>>, handle: usize, g: Arc<Graph>) {
    table.lock().get_or_insert_with(HashMap::new).insert(handle, g);
}

/// Whether two nodes' work is of one node type (kernel, copy or memset), which an update may not change.
fn same_type(a: &Work, b: &Work) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

fn remove(table: &Mutex<Option<HashMap<usize, Arc<Graph>>>>, handle: usize) -> bool {
    table.lock().as_mut().and_then(|t| t.remove(&handle)).is_some()
}

/// Queues an executable graph's nodes on `stream`.
fn launch(exec: usize, stream: usize) -> CudaError {
    let Some(g) = get(&EXECS, exec) else { return c::cudaErrorInvalidResourceHandle };
    let Some(s) = device::stream(stream, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    if s.capture.lock().is_some() {
        return c::cudaErrorStreamCaptureUnsupported; // (child-graph capture is not modelled)
    }
    crate::timing::graph_launch(g.nodes.iter().filter(|(_, w)| matches!(w, device::Work::Kernel { .. })).count());
    for (i, (node, work)) in g.nodes.iter().enumerate() {
        if s.enqueue_node(work.clone(), (g.id, *node), i + 1 == g.nodes.len()).is_none() {
            return c::cudaErrorUnknown;
        }
    }
    c::cudaSuccess
}

runtime_fn!(cudaStreamBeginCapture(stream: c::cudaStream_t, mode: c::cudaStreamCaptureMode) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamBeginCapture_v10000, cudaStreamBeginCapture_v10000_params {
    let _ = mode;
    // The legacy default stream cannot be captured (cudaErrorStreamCaptureUnsupported).
    if (stream as usize) <= 2 {
        return c::cudaErrorStreamCaptureUnsupported;
    }
    let Some(s) = device::stream(stream as usize, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    let mut capture = s.capture.lock();
    if capture.is_some() {
        return c::cudaErrorIllegalState;
    }
    *capture = Some(Capture { nodes: Vec::new(), invalidated: false });
    c::cudaSuccess
});

runtime_fn!(cudaStreamEndCapture(stream: c::cudaStream_t, pGraph: *mut c::cudaGraph_t) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamEndCapture_v10000, cudaStreamEndCapture_v10000_params {
    let Some(s) = device::stream(stream as usize, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    let Some(capture) = s.capture.lock().take() else { return c::cudaErrorIllegalState };
    if capture.invalidated {
        return c::cudaErrorStreamCaptureInvalidated;
    }
    let nodes = capture.nodes.into_iter().map(|w| (NEXT_NODE.fetch_add(1, Ordering::Relaxed), w)).collect();
    let g = Arc::new(Graph { id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed), nodes });
    if put(pGraph, insert(&GRAPHS, g) as c::cudaGraph_t) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});

runtime_fn!(cudaStreamIsCapturing(stream: c::cudaStream_t, pCaptureStatus: *mut c::cudaStreamCaptureStatus) => CUPTI_RUNTIME_TRACE_CBID_cudaStreamIsCapturing_v10000, cudaStreamIsCapturing_v10000_params {
    let Some(s) = device::stream(stream as usize, current_device()) else { return c::cudaErrorInvalidResourceHandle };
    let status = match s.capture.lock().as_ref() {
        None => c::cudaStreamCaptureStatusNone,
        Some(c) if c.invalidated => c::cudaStreamCaptureStatusInvalidated,
        Some(_) => c::cudaStreamCaptureStatusActive,
    };
    if put(pCaptureStatus, status) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});

runtime_fn!(cudaGraphInstantiate(pGraphExec: *mut c::cudaGraphExec_t, graph: c::cudaGraph_t, flags: std::ffi::c_ulonglong) => CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000, cudaGraphInstantiate_v12000_params {
    let _ = flags;
    let Some(g) = get(&GRAPHS, graph as usize) else { return c::cudaErrorInvalidValue };
    // An executable graph is a snapshot: later changes to the graph do not reach it.
    let exec = Arc::new(Graph { id: g.id, nodes: g.nodes.clone() });
    if put(pGraphExec, insert(&EXECS, exec) as c::cudaGraphExec_t) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});

runtime_fn!(cudaGraphExecUpdate(hGraphExec: c::cudaGraphExec_t, hGraph: c::cudaGraph_t, resultInfo: *mut c::cudaGraphExecUpdateResultInfo) => CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecUpdate_v10020, cudaGraphExecUpdate_v10020_params {
    let (Some(exec), Some(g)) = (get(&EXECS, hGraphExec as usize), get(&GRAPHS, hGraph as usize)) else {
        return c::cudaErrorInvalidValue;
    };
    if resultInfo.is_null() {
        return c::cudaErrorInvalidValue;
    }
    let result = if exec.nodes.len() != g.nodes.len() {
        c::cudaGraphExecUpdateErrorTopologyChanged
    } else if exec.nodes.iter().zip(&g.nodes).any(|((_, a), (_, b))| !same_type(a, b)) {
        c::cudaGraphExecUpdateErrorNodeTypeChanged
    } else {
        c::cudaGraphExecUpdateSuccess
    };
    let info = c::cudaGraphExecUpdateResultInfo { result, errorNode: std::ptr::null_mut(), errorFromNode: std::ptr::null_mut() };
    if !put(resultInfo, info) {
        return c::cudaErrorInvalidValue;
    }
    if result != c::cudaGraphExecUpdateSuccess {
        return c::cudaErrorGraphExecUpdateFailure;
    }
    let nodes = exec.nodes.iter().zip(&g.nodes).map(|((id, _), (_, work))| (*id, work.clone())).collect();
    replace(&EXECS, hGraphExec as usize, Arc::new(Graph { id: exec.id, nodes }));
    c::cudaSuccess
});

runtime_fn!(cudaGraphLaunch(graphExec: c::cudaGraphExec_t, stream: c::cudaStream_t) => CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, cudaGraphLaunch_v10000_params {
    // The real runtime launches through the driver; CUPTI reports the nested cuGraphLaunch.
    cu_graph_launch(graphExec as usize, stream as usize)
});

runtime_fn!(cudaGraphExecDestroy(graphExec: c::cudaGraphExec_t) => CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecDestroy_v10000, cudaGraphExecDestroy_v10000_params {
    if remove(&EXECS, graphExec as usize) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});

runtime_fn!(cudaGraphDestroy(graph: c::cudaGraph_t) => CUPTI_RUNTIME_TRACE_CBID_cudaGraphDestroy_v10000, cudaGraphDestroy_v10000_params {
    if remove(&GRAPHS, graph as usize) { c::cudaSuccess } else { c::cudaErrorInvalidValue }
});

/// `cuGraphLaunch` with its driver callbacks.
fn cu_graph_launch(exec: usize, stream: usize) -> CudaError {
    let params = c::cuGraphLaunch_params { hGraph: exec as c::CUgraphExec, hStream: stream as c::CUstream };
    crate::cupti::api_call(
        c::CUPTI_CB_DOMAIN_DRIVER_API,
        c::CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
        c"cuGraphLaunch",
        &params,
        std::ptr::null(),
        || launch(exec, stream),
    )
}

/// # Safety
/// Called from C like `cuGraphLaunch`.
#[no_mangle]
pub unsafe extern "C" fn cuGraphLaunch(h_graph: c::CUgraphExec, h_stream: c::CUstream) -> c::CUresult {
    crate::guard(c::CUDA_ERROR_UNKNOWN, || {
        if crate::driver::ensure_init().is_err() {
            return c::CUDA_ERROR_NOT_INITIALIZED;
        }
        match cu_graph_launch(h_graph as usize, h_stream as usize) {
            c::cudaSuccess => c::CUDA_SUCCESS,
            c::cudaErrorInvalidResourceHandle => c::CUDA_ERROR_INVALID_HANDLE,
            _ => c::CUDA_ERROR_INVALID_VALUE,
        }
    })
}
