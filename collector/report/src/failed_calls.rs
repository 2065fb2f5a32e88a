//! What a run that failed ran into: its CUDA calls that returned an error ([`cuflight_analysis::stats::api_errors`]) and, for a
//! device fault, the launch that most likely faulted. CUDA reports a kernel's fault at a later call (the next
//! synchronisation or launch: driver_types.h, cudaErrorIllegalAddress, "The device encountered a load or store
//! instruction on an invalid memory address... any further CUDA work will return the same error"), so the call
//! that failed first is rarely where the bug is: the last kernel launched before it is the suspect.

use cuflight_analysis::stats::api_errors::ApiErrors;
use cuflight_analysis::stats::ApiErrorRow;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::cuda_errors::{error_name, ErrorClass};
use cuflight_trace::model::launches::{Call, LaunchJoin};
use cuflight_trace::model::memory::LiveMemory;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Kernels remembered with their launch until a fault asks which one its suspect launch ran: a kernel starts after
/// its launch and usually before the call that reports its fault, so the last few suffice.
const RECENT_KERNELS: usize = 256;

/// The first sticky error and its suspect.
struct Fault {
    at: u64,
    api: u32,
    code: u32,
    runtime: bool,
    launch: Option<Call>,
    kernel: Option<u32>,
}

/// One process's failed calls, fed its events in time order.
#[derive(Default)]
pub struct FailedCalls {
    errors: ApiErrors,
    /// Which call launched each kernel: the one join every output uses.
    join: LaunchJoin,
    launches_kernel: FxHashMap<u32, bool>,
    last_launch: Option<Call>,
    /// The last kernels, each with its launch: (launch, kernel name).
    recent: VecDeque<(Call, u32)>,
    fault: Option<Fault>,
    live: LiveMemory,
    /// The first failed allocation: when, and the device memory allocated then.
    out_of_memory: Option<(u64, u64)>,
}

impl FailedCalls {
    pub fn feed(&mut self, p: &Process, e: &RawEvent) {
        match e.kind() {
            Some(EventKind::Api) => {
                self.errors.feed(0, e);
                let call = e.as_api();
                let code = call.code();
                if self.fault.is_some() {
                    return;
                }
                let launch = self.join.api(p, e);
                if code == 0 {
                    // Only launches that succeeded can be the suspect (the program's call, not the driver call
                    // inside it); the name is classified once.
                    let launches = self.launches_kernel.entry(e.name);
                    if *launches
                        .or_insert_with(|| cuflight_format::calls::CallEffects::of(p.string(e.name)).launches_kernel())
                    {
                        self.last_launch = launch;
                    }
                    return;
                }
                match ErrorClass::of(p.string(e.name), code) {
                    Some(ErrorClass::Sticky) => {
                        let launch = self.last_launch;
                        let kernel = launch.and_then(|l| self.recent.iter().rev().find(|k| k.0 == l).map(|k| k.1));
                        let runtime = call.runtime;
                        self.fault = Some(Fault { at: e.start, api: e.name, code, runtime, launch, kernel });
                    }
                    Some(ErrorClass::OutOfMemory) if self.out_of_memory.is_none() => {
                        self.out_of_memory = Some((e.start, self.live.device()));
                    }
                    _ => {}
                }
            }
            Some(EventKind::Kernel) => {
                let Some(launch) = self.join.work(e).map(|j| j.call) else { return };
                match &mut self.fault {
                    Some(f) if f.kernel.is_none() && f.launch == Some(launch) => f.kernel = Some(e.name),
                    Some(_) => {}
                    None => {
                        if self.recent.len() == RECENT_KERNELS {
                            self.recent.pop_front();
                        }
                        self.recent.push_back((launch, e.name));
                    }
                }
            }
            Some(EventKind::Alloc | EventKind::Free) => _ = self.live.apply(0, e),
            _ => {}
        }
    }

    /// The failed calls' rows (times after `origin`) and what the report must say first: a device fault with its
    /// suspect, an allocation that found no memory.
    /// `device_memory`: the device's memory, where the trace says it.
    pub fn finish(&self, p: &Process, origin: u64, device_memory: Option<u64>) -> (Vec<ApiErrorRow>, Vec<String>) {
        let rows = self.errors.rows(std::iter::once((0, p)), origin);
        let at = |t: u64| format!("+{:.6} s", t.saturating_sub(origin) as f64 / 1e9);
        let mut said = Vec::new();
        if let Some(f) = &self.fault {
            let after: u64 = rows.iter().filter(|r| r.class == ErrorClass::Sticky).map(|r| r.count).sum();
            let suspect = match (f.launch, f.kernel) {
                (Some(l), Some(k)) => format!("kernel {} (launched at {})", p.string(k), at(l.start)),
                (Some(l), None) => format!(
                    "the {} at {} (correlation {}), whose kernel left no record",
                    p.string(l.name),
                    at(l.start),
                    l.correlation
                ),
                (None, _) => "no kernel launch before it in the trace".to_string(),
            };
            said.push(format!(
                "the run hit a device fault: {} ({}) from {} at {}, and every later CUDA call fails with it ({} \
                 failed). CUDA reports a fault at a later call: the last kernel launched before it is the suspect, \
                 {suspect}. To confirm, run under compute-sanitizer, or with CUDA_LAUNCH_BLOCKING=1 (the faulting \
                 launch then returns the error itself)",
                error_name(f.runtime, f.code),
                f.code,
                p.string(f.api),
                at(f.at),
                after
            ));
        }
        if let Some((t, live)) = self.out_of_memory {
            let n: u64 = rows.iter().filter(|r| r.class == ErrorClass::OutOfMemory).map(|r| r.count).sum();
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            let of = device_memory.map_or(String::new(), |d| format!(" of the device's {:.2} GiB", gib(d)));
            said.push(format!(
                "{n} allocation(s) found no device memory, the first at {} with {:.2} GiB{of} allocated through CUDA \
                 (PyTorch's caching allocator holds more than its tensors use: torch.cuda.memory_summary() tells them \
                 apart; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True cuts fragmentation)",
                at(t),
                gib(live)
            ));
        }
        (rows, said)
    }

    /// Whether the run hit a device fault (a sticky error).
    pub fn faulted(&self) -> bool {
        self.fault.is_some()
    }
}
