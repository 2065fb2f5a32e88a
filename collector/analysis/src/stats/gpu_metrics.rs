//! `gpu_metrics` (cuflight's: nsys shows GPU metrics only as timeline rows): what the device counters sampled
//! while recording (`record --gpu-metrics`) say of each kernel name, each kind of work and each device: SM,
//! Tensor Core and DRAM activity as a share of peak, and the side of the roofline that puts the work on. Samples
//! are joined to kernels by [`cuflight_trace::model::gpu_counters`]: a name's row averages the samples its
//! kernels filled; `measured_alone` counts its kernels that held enough whole samples to be measured by
//! themselves, and a name with none is an aggregate of shorter kernels (its sample count is the confidence).

use crate::table::Table;
use cuflight_format::view::GpuSample;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::gpu_counters::{bound, CounterJoin, CounterMeans, JoinedSample, Owner, MIN_WHOLE_SAMPLES};
use cuflight_trace::model::kernel_category::kernel_category;
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// One row: a device, a category of kernels or a kernel name.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct GpuMetricsRow {
    /// "device", "category" or "kernel".
    pub level: &'static str,
    /// The process that ran the work.
    pub pid: u32,
    /// The CUDA device ordinal the samples came from.
    pub device: u32,
    /// The device's name, the category, or the kernel's name.
    pub name: String,
    /// Kernel time of the name or category (ns); for a device, the time its samples cover.
    pub total_ns: u64,
    /// Samples averaged in the row; for a kernel name or a category, those its kernels filled (a sample shared
    /// with idle time counts for the share its work filled).
    pub samples: u64,
    /// For a kernel name: its samples that lay wholly inside one of its kernels (0 on other levels).
    pub whole_samples: u64,
    /// For a kernel name: how many of its kernels held at least five whole samples, so were measured by
    /// themselves; 0 means the row is an aggregate of shorter kernels (0 on other levels).
    pub measured_alone: u64,
    /// Mean share of the SMs' peak activity (sm__cycles_active), in percent (None where the samples lacked the
    /// counter).
    pub sm_active_pct: Option<f64>,
    /// Mean share of the Tensor Cores' peak activity, in percent (None where the samples lacked the counter).
    pub tensor_active_pct: Option<f64>,
    /// Mean DRAM throughput as a share of its peak, reads and writes together, in percent (None where the samples
    /// lacked both).
    pub dram_pct: Option<f64>,
    /// Mean DRAM read throughput as a share of the peak, in percent.
    pub dram_read_pct: Option<f64>,
    /// Mean DRAM write throughput as a share of the peak, in percent.
    pub dram_write_pct: Option<f64>,
    /// For a device: the share of time the graphics engine was busy, in percent.
    pub gpu_active_pct: Option<f64>,
    /// For a device: samples with no GPU work inside (0 on other levels).
    pub idle_samples: u64,
    /// For a device: samples that no one kernel name filled (several shared them), so no name owns them (0 on
    /// other levels).
    pub mixed_samples: u64,
    /// The side of the roofline the counters put the work on: memory, compute, compute (CUDA cores), latency,
    /// balanced or mixed; empty without samples.
    pub bound: &'static str,
}

#[derive(Default)]
struct NameAcc {
    owned: CounterMeans,
    whole: u64,
}

#[derive(Default)]
struct DeviceAcc {
    all: CounterMeans,
    idle: u64,
    mixed: u64,
    covered_ns: u64,
}

#[derive(Default)]
pub struct GpuMetricsAcc {
    join: Option<CounterJoin>,
    names: FxHashMap<(u32, u32, u32), NameAcc>,
    devices: BTreeMap<(u32, u32), DeviceAcc>,
    /// Whole samples of each kernel, by (process, device, start).
    instances: FxHashMap<(u32, u32, u64), (u32, u64)>,
    kernel_ns: FxHashMap<(u32, u32, u32), u64>,
    device_names: FxHashMap<(u32, u32), String>,
}

impl GpuMetricsAcc {
    pub fn feed(&mut self, key: u32, p: &Process, e: &RawEvent) {
        match e.kind() {
            Some(EventKind::Kernel) => *self.kernel_ns.entry((key, e.device, e.name)).or_default() += e.duration(),
            Some(EventKind::Device) => {
                self.device_names.insert((key, e.device), p.string(e.name).to_string());
            }
            _ => {}
        }
        let join = self.join.get_or_insert_with(CounterJoin::new);
        let mut settled = Vec::new();
        join.feed(key, p, e, &mut |s| settled.push(s));
        for s in settled {
            self.add(s);
        }
    }

    fn add(&mut self, s: JoinedSample) {
        let d = self.devices.entry((s.key, s.device)).or_default();
        d.all.add(&s.counters);
        d.covered_ns += s.end - s.start;
        match s.owner {
            Owner::Idle => d.idle += 1,
            Owner::Mixed => d.mixed += 1,
            Owner::Kernel { name, whole, kernel_start, share } => {
                let n = self.names.entry((s.key, s.device, name)).or_default();
                n.owned.add_share(&s.counters, share);
                if whole {
                    n.whole += 1;
                    self.instances.entry((s.key, s.device, kernel_start)).or_insert((name, 0)).1 += 1;
                }
            }
        }
    }

    /// The rows, with each process key's facts from `process`.
    pub fn finish<'p>(mut self, process: impl Fn(u32) -> Option<&'p Process>) -> Vec<GpuMetricsRow> {
        if let Some(mut join) = self.join.take() {
            let mut settled = Vec::new();
            join.finish(&mut |s| settled.push(s));
            for s in settled {
                self.add(s);
            }
        }
        let mut alone: FxHashMap<(u32, u32, u32), u64> = FxHashMap::default();
        for (&(key, device, _), &(name, whole)) in &self.instances {
            if whole >= MIN_WHOLE_SAMPLES {
                *alone.entry((key, device, name)).or_default() += 1;
            }
        }
        let mut rows = Vec::new();
        for (&(key, device), d) in &self.devices {
            let Some(p) = process(key) else { continue };
            let name = self.device_names.get(&(key, device)).cloned().unwrap_or_else(|| format!("GPU {device}"));
            let mut r = row("device", p.info.pid, device, name, d.covered_ns, &d.all);
            (r.idle_samples, r.mixed_samples) = (d.idle, d.mixed);
            rows.push(r);
        }
        let mut categories: BTreeMap<(u32, u32, &'static str), (CounterMeans, u64)> = BTreeMap::new();
        let mut kernels = Vec::new();
        for (&(key, device, name), n) in &self.names {
            let Some(p) = process(key) else { continue };
            let text = p.string(name);
            let ns = self.kernel_ns.get(&(key, device, name)).copied().unwrap_or(0);
            let c = categories.entry((p.info.pid, device, kernel_category(text).as_str())).or_default();
            c.0.merge(&n.owned);
            c.1 += ns;
            let mut r = row("kernel", p.info.pid, device, text.to_string(), ns, &n.owned);
            r.whole_samples = n.whole;
            r.measured_alone = alone.get(&(key, device, name)).copied().unwrap_or(0);
            kernels.push(r);
        }
        let mut cats: Vec<GpuMetricsRow> = categories
            .into_iter()
            .map(|((pid, device, category), (means, ns))| {
                row("category", pid, device, category.to_string(), ns, &means)
            })
            .collect();
        cats.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
        kernels.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.name.cmp(&b.name)));
        rows.extend(cats);
        rows.extend(kernels);
        rows
    }
}

fn row(level: &'static str, pid: u32, device: u32, name: String, total_ns: u64, m: &CounterMeans) -> GpuMetricsRow {
    let c = m.means();
    let pct = |v: Option<f64>| v.map(|v| (v * 1000.0).round() / 10.0);
    GpuMetricsRow {
        level,
        pid,
        device,
        name,
        total_ns,
        samples: m.samples,
        whole_samples: 0,
        measured_alone: 0,
        sm_active_pct: pct(c.sm_active),
        tensor_active_pct: pct(c.tensor_active),
        dram_pct: pct(c.dram()),
        dram_read_pct: pct(c.dram_read),
        dram_write_pct: pct(c.dram_write),
        gpu_active_pct: pct(c.gpu_active),
        idle_samples: 0,
        mixed_samples: 0,
        bound: if m.samples == 0 { "" } else { bound(&c) },
    }
}

/// The counters of a row as a sample (for findings that judge them).
pub fn counters_of(r: &GpuMetricsRow) -> GpuSample {
    let f = |v: Option<f64>| v.map(|v| v / 100.0);
    GpuSample {
        sm_active: f(r.sm_active_pct),
        tensor_active: f(r.tensor_active_pct),
        dram_read: f(r.dram_read_pct),
        dram_write: f(r.dram_write_pct),
        gpu_active: f(r.gpu_active_pct),
        pcie_bytes: None,
    }
}

/// The terminal and CSV table.
pub fn table(rows: &[GpuMetricsRow]) -> Table {
    let mut t = Table::new(
        "GPU counters by device, kind of work and kernel [gpu_metrics]",
        &["Level", "Time (ns)", "Samples", "Measured Alone", "SM %", "Tensor %", "DRAM %", "Bound", "Device", "Name"],
    );
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    for r in rows {
        let alone = match r.level {
            "kernel" if r.measured_alone > 0 => r.measured_alone.to_string(),
            "kernel" => "aggregate".to_string(),
            _ => String::new(),
        };
        t.row(vec![
            r.level.to_string(),
            r.total_ns.to_string(),
            r.samples.to_string(),
            alone,
            pct(r.sm_active_pct),
            pct(r.tensor_active_pct),
            pct(r.dram_pct),
            r.bound.to_string(),
            r.device.to_string(),
            r.name.clone(),
        ]);
    }
    if rows.is_empty() {
        t.note("no device counters in this trace (record with --gpu-metrics on a GPU that allows them)".into());
    }
    t
}
