//! `GET /metrics`' text: every followed process's [`ProcessMetrics`] in Prometheus' text exposition format
//! (version 0.0.4: HELP and TYPE lines, counters in seconds and bytes) or OpenMetrics 1.0.

use super::metrics::{ProcessMetrics, LOST_WINDOWS, OVERHEAD_SOURCES};
use std::collections::BTreeMap;
use std::fmt::Write;

/// The exposition of every followed process: Prometheus text format 0.0.4, or OpenMetrics 1.0 (`openmetrics`:
/// a counter family is named without its samples' `_total`, and the text ends with `# EOF`).
pub fn render(processes: &BTreeMap<u32, ProcessMetrics>, openmetrics: bool) -> String {
    let mut x = Exposition { out: String::new(), openmetrics };
    agent_families(&mut x, processes);
    step_family(&mut x, processes);
    work_families(&mut x, processes);
    counter_families(&mut x, processes);
    if openmetrics {
        x.out.push_str("# EOF\n");
    }
    x.out
}

/// The text being written, in Prometheus's format or OpenMetrics's.
struct Exposition {
    out: String,
    openmetrics: bool,
}

impl Exposition {
    /// One metric family: its HELP and TYPE lines, then its samples.
    fn family(&mut self, name: &str, kind: &str, help: &str, samples: &mut dyn FnMut(&mut String)) {
        let name = if self.openmetrics && kind == "counter" { name.trim_end_matches("_total") } else { name };
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        samples(&mut self.out);
    }
}

/// A process's labels, and `extra` ones (each starting with a comma).
fn labels(pid: &u32, m: &ProcessMetrics, extra: &str) -> String {
    let rank = m.rank.map_or(String::new(), |r| format!(",rank=\"{r}\""));
    format!("pid=\"{pid}\",host=\"{}\"{rank}{extra}", escape(&m.host))
}

/// What each process's agent is and does: its state, windows, sessions, cost.
fn agent_families(x: &mut Exposition, processes: &BTreeMap<u32, ProcessMetrics>) {
    x.family(
        "cuflight_agent_state",
        "gauge",
        "1 for the state the process's agent is in (dormant, recording, flight recorder).",
        &mut |o| {
            for (pid, m) in processes {
                let _ = writeln!(o, "cuflight_agent_state{{{}}} 1", labels(pid, m, &format!(",state=\"{}\"", m.state)));
            }
        },
    );
    x.family(
        "cuflight_windows_total",
        "counter",
        "Windows (a continuous recording's parts, a flight recorder's snapshots) by outcome: folded into these \
         counters, or lost: not_recorded (the agent could not be attached: another collector held it), unwritten \
         (the file could not be written: a full temporary directory), unreadable. Lost windows cover no time.",
        &mut |o| {
            for (pid, m) in processes {
                let lost = LOST_WINDOWS.map(|why| (why, m.windows_lost.get(why).copied().unwrap_or(0)));
                for (outcome, n) in [("folded", m.windows)].into_iter().chain(lost) {
                    let l = labels(pid, m, &format!(",outcome=\"{outcome}\""));
                    let _ = writeln!(o, "cuflight_windows_total{{{l}}} {n}");
                }
            }
        },
    );
    x.family(
        "cuflight_window_seconds_total",
        "counter",
        "Time covered by recorded windows (a flight recorder's: its snapshots, a second apart, cover all the time since the first): the other counters count only inside them.",
        &mut |o| {
            for (pid, m) in processes {
                let _ = writeln!(o, "cuflight_window_seconds_total{{{}}} {}", labels(pid, m, ""), secs(m.window_ns));
            }
        },
    );
    x.family(
        "cuflight_gpu_busy_seconds_total",
        "counter",
        "Device time with at least one kernel, copy or memset of the process running (union over streams).",
        &mut |o| {
            for (pid, m) in processes {
                for (d, ns) in &m.busy_ns {
                    let l = labels(pid, m, &format!(",device=\"{d}\""));
                    let _ = writeln!(o, "cuflight_gpu_busy_seconds_total{{{l}}} {}", secs(*ns));
                }
            }
        },
    );
    x.family(
        "cuflight_kernel_seconds_total",
        "counter",
        "Kernel time by category (gemm, attention, communication, ...; overlapping kernels each count).",
        &mut |o| {
            for (pid, m) in processes {
                for ((d, c), ns) in &m.kernel_ns {
                    let l = labels(pid, m, &format!(",device=\"{d}\",category=\"{c}\""));
                    let _ = writeln!(o, "cuflight_kernel_seconds_total{{{l}}} {}", secs(*ns));
                }
            }
        },
    );
    x.family(
        "cuflight_gpu_idle_seconds_total",
        "counter",
        "GPU idle time inside steps by cause, as cuflight report attributes it (data_loading, sync_stall, \
         launch_bound, cpu_bound, device_wait, ..., unexplained).",
        &mut |o| {
            for (pid, m) in processes {
                for (cause, ns) in &m.idle_ns {
                    let l = labels(pid, m, &format!(",cause=\"{}\"", escape(cause)));
                    let _ = writeln!(o, "cuflight_gpu_idle_seconds_total{{{l}}} {}", secs(*ns));
                }
            }
        },
    );
}

/// How long the steps inside the windows took, per process and kind: a histogram.
fn step_family(x: &mut Exposition, processes: &BTreeMap<u32, ProcessMetrics>) {
    x.family(
        "cuflight_step_seconds",
        "histogram",
        "Steps that ran whole inside the recorded windows, as cuflight report finds them (ProfilerStep or NVTX \
         ranges, else the launch pattern), by kind: step; a server's prefill, decode, mixed where it names them, or \
         graph replay, eager, graph replay + eager. Recorded steps: what recording costs them is in their time.",
        &mut |o| {
            for (pid, m) in processes {
                for (kind, h) in &m.steps {
                    let l = labels(pid, m, &format!(",kind=\"{kind}\""));
                    for (le, n) in h.cumulative() {
                        let _ = writeln!(o, "cuflight_step_seconds_bucket{{{l},le=\"{le}\"}} {n}");
                    }
                    let _ = writeln!(o, "cuflight_step_seconds_bucket{{{l},le=\"+Inf\"}} {}", h.count);
                    let _ = writeln!(o, "cuflight_step_seconds_sum{{{l}}} {}", secs(h.sum_ns));
                    let _ = writeln!(o, "cuflight_step_seconds_count{{{l}}} {}", h.count);
                }
            }
        },
    );
}

/// The device counters' gauges (processes recorded with `--gpu-metrics`), per device.
fn counter_families(x: &mut Exposition, processes: &BTreeMap<u32, ProcessMetrics>) {
    type Pick = fn(&cuflight_format::view::GpuSample) -> Option<f64>;
    let gauges: [(&str, &str, Pick); 3] = [
        (
            "cuflight_gpu_sm_active_ratio",
            "Share of the device's SMs active over the last window (device counters, --gpu-metrics).",
            |c| c.sm_active,
        ),
        (
            "cuflight_gpu_tensor_active_ratio",
            "Share of peak the Tensor Core pipes were active over the last window (device counters).",
            |c| c.tensor_active,
        ),
        (
            "cuflight_gpu_dram_throughput_ratio",
            "DRAM read and write throughput as a share of peak over the last window (device counters).",
            |c| c.dram(),
        ),
    ];
    for (name, help, pick) in gauges {
        x.family(name, "gauge", help, &mut |o| {
            for (pid, m) in processes {
                for (d, c) in &m.gpu_counters {
                    if let Some(v) = pick(c) {
                        let _ = writeln!(o, "{name}{{{}}} {v:.4}", labels(pid, m, &format!(",device=\"{d}\"")));
                    }
                }
            }
        });
    }
}

/// What the GPU work was: kernels, copies, waits, errors, drops.
fn work_families(x: &mut Exposition, processes: &BTreeMap<u32, ProcessMetrics>) {
    x.family("cuflight_kernel_launches_total", "counter", "Kernels that ran.", &mut |o| {
        for (pid, m) in processes {
            for (d, n) in &m.launches {
                let _ = writeln!(
                    o,
                    "cuflight_kernel_launches_total{{{}}} {n}",
                    labels(pid, m, &format!(",device=\"{d}\""))
                );
            }
        }
    });
    x.family(
        "cuflight_memcpy_bytes_total",
        "counter",
        "Bytes copied by kind (HtoD, DtoH, DtoD, ...) and host memory (pageable, pinned, device).",
        &mut |o| {
            for (pid, m) in processes {
                for ((kind, host), b) in &m.memcpy_bytes {
                    let l = labels(pid, m, &format!(",kind=\"{kind}\",host_memory=\"{host}\""));
                    let _ = writeln!(o, "cuflight_memcpy_bytes_total{{{l}}} {b}");
                }
            }
        },
    );
    x.family(
        "cuflight_sync_wait_seconds_total",
        "counter",
        "Host time inside calls that wait for the GPU (cudaStreamSynchronize, cudaDeviceSynchronize, a blocking cudaMemcpy, ...).",
        &mut |o| {
            for (pid, m) in processes {
                let _ =
                    writeln!(o, "cuflight_sync_wait_seconds_total{{{}}} {}", labels(pid, m, ""), secs(m.sync_wait_ns));
            }
        },
    );
    x.family(
        "cuflight_device_memory_bytes",
        "gauge",
        "Device memory the process allocated during the windows and still holds at the end of the last.",
        &mut |o| {
            for (pid, m) in processes {
                if let Some(b) = m.device_memory {
                    let _ = writeln!(o, "cuflight_device_memory_bytes{{{}}} {b}", labels(pid, m, ""));
                }
            }
        },
    );
    x.family(
        "cuflight_cuda_call_errors_total",
        "counter",
        "CUDA calls that returned an error, by class (sticky: a device fault, after which every call fails; \
         out_of_memory; error; expected: answers such as not ready from a query) and CUDA's name for the code.",
        &mut |o| {
            for (pid, m) in processes {
                for ((class, error), n) in &m.call_errors {
                    let l = labels(pid, m, &format!(",class=\"{class}\",error=\"{}\"", escape(error)));
                    let _ = writeln!(o, "cuflight_cuda_call_errors_total{{{l}}} {n}");
                }
            }
        },
    );
    x.family(
        "cuflight_agent_cupti_sessions_total",
        "counter",
        "CUPTI sessions the process's agent set up (recording, each window): CUPTI keeps about 74 KB of the \
         process's memory after each (H200, CUDA 13.0), so serve doubles a process's period every --window-budget.",
        &mut |o| {
            for (pid, m) in processes {
                let _ =
                    writeln!(o, "cuflight_agent_cupti_sessions_total{{{}}} {}", labels(pid, m, ""), m.cupti_sessions);
            }
        },
    );
    x.family(
        "cuflight_window_period_seconds",
        "gauge",
        "Time between the process's windows now: --duty's period, doubled every --window-budget CUPTI sessions.",
        &mut |o| {
            for (pid, m) in processes.iter().filter(|(_, m)| m.window_period_ns > 0) {
                let _ = writeln!(
                    o,
                    "cuflight_window_period_seconds{{{}}} {}",
                    labels(pid, m, ""),
                    secs(m.window_period_ns)
                );
            }
        },
    );
    x.family(
        "cuflight_events_dropped_total",
        "counter",
        "Records lost (full rings, CUPTI drops, refused buffers and impossible times), each once.",
        &mut |o| {
            for (pid, m) in processes {
                let _ = writeln!(o, "cuflight_events_dropped_total{{{}}} {}", labels(pid, m, ""), m.dropped);
            }
        },
    );
    x.family(
        "cuflight_agent_overhead_seconds_total",
        "counter",
        "What the recording cost the program's threads: CUPTI's overhead records (source cupti), its threads waiting \
         for ring room (ring_wait), Python stacks read (python_stacks), and, estimated from an H200's figures, CUPTI \
         tracing each kernel launched one by one (launch_tracing, 1.0 us a launch) and each node of CUDA graph \
         launches (graph_node_tracing, 1.1 us a node).",
        &mut |o| {
            for (pid, m) in processes {
                for source in OVERHEAD_SOURCES {
                    let ns = m.overhead_ns.get(source).copied().unwrap_or(0);
                    let l = labels(pid, m, &format!(",source=\"{source}\""));
                    let _ = writeln!(o, "cuflight_agent_overhead_seconds_total{{{l}}} {}", secs(ns));
                }
            }
        },
    );
    x.family(
        "cuflight_agent_overhead_ratio",
        "gauge",
        "What the recording cost the program's threads over the last window, as a share of its time (the sources \
         above, summed over threads: above 1 where several threads each paid more than a window's time).",
        &mut |o| {
            for (pid, m) in processes {
                let _ = writeln!(o, "cuflight_agent_overhead_ratio{{{}}} {:.6}", labels(pid, m, ""), m.overhead_ratio);
            }
        },
    );
    x.family(
        "cuflight_calls_in_flight_at_arming_total",
        "counter",
        "CUDA calls in flight when a window was armed: left out (their start is unknown), not lost.",
        &mut |o| {
            for (pid, m) in processes {
                let v = m.in_flight_at_arming;
                let _ = writeln!(o, "cuflight_calls_in_flight_at_arming_total{{{}}} {v}", labels(pid, m, ""));
            }
        },
    );
}

fn secs(ns: u64) -> String {
    format!("{:.9}", ns as f64 / 1e9)
}

/// A label value as the exposition format quotes it.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
