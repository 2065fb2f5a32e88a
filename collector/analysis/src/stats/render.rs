//! `cuflight stats` output: the tables by report, under `nsys stats`' report names where nsys has one
//! (`--report cuda_gpu_kern_sum,cuda_api_sum`), as a terminal table, CSV or JSON.

use super::columns::{stat_cells, DURATION_COLUMNS};
use super::*;
use crate::table::TimeUnit;

impl Stats {
    /// The `reports` asked for, in `style`. JSON holds the requested keys (with `processes` also `dropped`, with
    /// `nvtx` also `nvtx_categories`), or, for all reports, every key.
    pub fn render(&self, reports: &[Report], style: Style) -> String {
        self.render_in(reports, style, TimeUnit::Ns)
    }

    /// [`Stats::render`], the terminal's and CSV's time columns in `unit` (JSON keeps nanoseconds).
    pub fn render_in(&self, reports: &[Report], style: Style, unit: TimeUnit) -> String {
        if style == Style::Json && reports == Report::ALL {
            return self.to_json(); // everything, the schema's every key
        }
        if style == Style::Json {
            let all = serde_json::to_value(self).unwrap_or_default();
            let mut picked = serde_json::Map::new();
            for r in reports {
                let key = r.names().1;
                let value = match r {
                    Report::NvtxPushPop => serde_json::to_value(self.nvtx_of("PushPop")).unwrap_or_default(),
                    Report::NvtxStartEnd => serde_json::to_value(self.nvtx_of("StartEnd")).unwrap_or_default(),
                    _ => all[key].clone(),
                };
                picked.insert(key.into(), value);
                if *r == Report::Processes {
                    picked.insert("dropped".into(), all["dropped"].clone());
                }
                picked.insert("not_recorded".into(), all["not_recorded"].clone());
                if *r == Report::Nvtx {
                    picked.insert("nvtx_categories".into(), all["nvtx_categories"].clone());
                }
            }
            return serde_json::to_string_pretty(&picked).unwrap_or_default();
        }
        let mut out = String::new();
        for (i, r) in reports.iter().enumerate() {
            let mut t = self.table(*r, style == Style::Table);
            t.in_time_unit(unit);
            let kind = match r {
                Report::Memory => Some("memory"),
                Report::Nvtx | Report::NvtxPushPop | Report::NvtxStartEnd | Report::NvtxGpuProj | Report::NvtxKern => {
                    Some("nvtx")
                }
                Report::Memset => Some("memset"),
                Report::Sync => Some("sync"),
                Report::ApiErrors => Some("errors"),
                _ => None,
            };
            if let Some(n) = self.not_recorded.iter().find(|n| Some(n.kind.as_str()) == kind) {
                t.note(format!("not recorded: {}", n.why));
            }
            if self.rocm {
                t.retell(cuflight_trace::model::platform_terms::in_rocm_terms);
            }
            match style {
                Style::Csv => {
                    if i > 0 {
                        out.push('\n');
                    }
                    t.to_csv(&mut out);
                }
                _ => t.render(&mut out),
            }
        }
        if style == Style::Table && reports.contains(&Report::Processes) {
            out.push_str(&format!("\nDropped records: {}\n", self.dropped));
        }
        out
    }

    /// The NVTX rows of one style (nsys's nvtx_pushpop_sum, nvtx_startend_sum), their shares of that style's time.
    fn nvtx_of(&self, style: &str) -> Vec<NvtxRow> {
        let mut rows: Vec<NvtxRow> = self.nvtx.iter().filter(|r| r.style == style).cloned().collect();
        let all: u64 = rows.iter().map(|r| r.time.total_ns).sum();
        for r in &mut rows {
            r.percent = if all == 0 { 0.0 } else { 100.0 * r.time.total_ns as f64 / all as f64 };
        }
        rows
    }

    /// `grouped`: NVTX names that differ only by numbers share a row (the terminal's view).
    pub(super) fn table(&self, report: Report, grouped: bool) -> Table {
        match report {
            Report::Kernels => durations("CUDA kernels (GPU time) [cuda_gpu_kern_sum]", &self.kernels),
            Report::Api => durations("CUDA API calls (host time) [cuda_api_sum]", &self.api),
            Report::MemTime => durations("GPU memory operations by time [cuda_gpu_mem_time_sum]", &self.gpu_mem_time),
            Report::MemSize => self.mem_size_table(),
            Report::Memcpy => self.memcpy_table(),
            Report::Memset => {
                let mut t = Table::new("Memsets", &["Count", "Total (bytes)", "Total Time (ns)", "Memory"]);
                for r in &self.memset {
                    t.row(vec![r.count.to_string(), r.bytes.to_string(), r.total_ns.to_string(), r.kind.clone()]);
                }
                t
            }
            Report::Memory => self.memory_table(),
            Report::Nvtx => nvtx_table("NVTX ranges and marks [nvtx_sum]", self.nvtx.clone(), grouped),
            Report::NvtxPushPop => {
                nvtx_table("NVTX push/pop ranges [nvtx_pushpop_sum]", self.nvtx_of("PushPop"), grouped)
            }
            Report::NvtxStartEnd => {
                nvtx_table("NVTX start/end ranges [nvtx_startend_sum]", self.nvtx_of("StartEnd"), grouped)
            }
            Report::NvtxGpuProj => self.nvtx_gpu_proj_table(grouped),
            Report::NvtxKern => self.nvtx_kern_table(),
            Report::Categories => self.categories_table(),
            Report::Collectives => super::collectives::table(&self.collectives),
            Report::Sync => {
                let mut t = Table::new("Synchronization", &["Count", "Total Time (ns)", "Kind"]);
                for r in &self.sync {
                    t.row(vec![r.count.to_string(), r.total_ns.to_string(), r.kind.clone()]);
                }
                t
            }
            Report::KernExec => super::kern_exec::table(&self.kern_exec),
            // Streamed by the caller, never held here.
            Report::GpuTrace | Report::ApiTrace | Report::KernExecTrace | Report::NvtxPushPopTrace => {
                Table::new(report.names().0, &[])
            }
            Report::KernGrid => super::kern_gb::table(&self.kern_gb),
            Report::GpuSum => {
                super::combined::table("CUDA kernels and memory operations (GPU time) [cuda_gpu_sum]", &self.gpu_sum)
            }
            Report::ApiGpuSum => super::combined::table(
                "CUDA API calls, kernels and memory operations [cuda_api_gpu_sum]",
                &self.api_gpu_sum,
            ),
            Report::PythonSync => self.python_sync_table(),
            Report::Graphs => self.graphs_table(),
            Report::Triton => self.triton_table(),
            Report::GemmPerf => super::op_perf::gemm::table(&self.gemm_perf),
            Report::AttentionPerf => super::op_perf::attention::table(&self.attention_perf),
            Report::GpuMetrics => super::gpu_metrics::table(&self.gpu_metrics),
            Report::ApiErrors => self.api_errors_table(),
            Report::Processes => self.processes_table(),
            Report::Devices => self.devices_table(),
        }
    }

    fn mem_size_table(&self) -> Table {
        let mut t = Table::new(
            "GPU memory operations by size [cuda_gpu_mem_size_sum]",
            &[
                "Total (bytes)",
                "Count",
                "Avg (bytes)",
                "Med (bytes)",
                "Min (bytes)",
                "Max (bytes)",
                "StdDev (bytes)",
                "Operation",
            ],
        );
        for r in &self.gpu_mem_size {
            let mut cells = stat_cells(
                r.total_bytes,
                r.count,
                [r.avg_bytes, r.median_bytes, r.min_bytes, r.max_bytes, r.stddev_bytes],
            );
            cells.push(r.operation.clone());
            t.row(cells);
        }
        t
    }

    fn memcpy_table(&self) -> Table {
        let mut t = Table::new(
            "Memory copies by host memory",
            &["Count", "Total (bytes)", "Total Time (ns)", "GB/s", "Async", "Host memory", "Kind"],
        );
        for r in &self.memcpy {
            t.row(vec![
                r.count.to_string(),
                r.bytes.to_string(),
                r.total_ns.to_string(),
                format!("{:.2}", r.gbps),
                r.async_count.to_string(),
                r.host_memory.clone(),
                r.kind.clone(),
            ]);
        }
        t
    }

    fn memory_table(&self) -> Table {
        let mut t = Table::new(
            "Memory",
            &["Allocs", "Frees", "Allocated (bytes)", "Peak (bytes)", "Live at end (bytes)", "Memory"],
        );
        // A kind of memory nothing was allocated or freed of is left out (an attach window after the model loaded
        // has none): rows of zeros read as a measurement.
        let kinds = [("device", &self.memory.device), ("pinned host", &self.memory.pinned_host)];
        for (name, m) in kinds.into_iter().filter(|(_, m)| m.malloc_count > 0 || m.free_count > 0) {
            t.row(vec![
                m.malloc_count.to_string(),
                m.free_count.to_string(),
                m.alloc_bytes.to_string(),
                m.peak_bytes.to_string(),
                m.live_bytes_at_end.to_string(),
                name.to_string(),
            ]);
        }
        t
    }

    fn nvtx_gpu_proj_table(&self, grouped: bool) -> Table {
        let mut t = Table::new(
            "NVTX ranges projected onto the GPU [nvtx_gpu_proj_sum]",
            &[
                "Total Proj Time (ns)",
                "Total Range Time (ns)",
                "Range Instances",
                "Proj Avg (ns)",
                "Proj Med (ns)",
                "Proj Min (ns)",
                "Proj Max (ns)",
                "Proj StdDev (ns)",
                "Total GPU Ops",
                "Avg GPU Ops",
                "Avg Range Lvl",
                "Avg Num Child",
                "Domain",
                "Range",
            ],
        );
        let rows: Vec<&NvtxProjRow> = self.nvtx_gpu_proj.iter().collect();
        let shown = if grouped {
            super::grouping::group(&rows, |r| r.name.as_str(), |r| r.domain.clone())
        } else {
            rows.iter().map(|&r| super::grouping::Shown::One(r)).collect()
        };
        for s in shown {
            let r = match s {
                super::grouping::Shown::One(r) => r,
                super::grouping::Shown::Group { pattern, rows } => {
                    let sum = |f: fn(&NvtxProjRow) -> u64| rows.iter().map(|r| f(r)).sum::<u64>();
                    let (proj, instances, ops) =
                        (sum(|r| r.total_proj_ns), sum(|r| r.instances), sum(|r| r.total_gpu_ops));
                    let n = instances.max(1) as f64;
                    let mean =
                        |f: fn(&NvtxProjRow) -> f64| rows.iter().map(|r| f(r) * r.instances as f64).sum::<f64>() / n;
                    t.row(vec![
                        proj.to_string(),
                        sum(|r| r.total_range_ns).to_string(),
                        instances.to_string(),
                        (proj / instances.max(1)).to_string(),
                        "-".into(),
                        rows.iter().map(|r| r.min_ns).min().unwrap_or(0).to_string(),
                        rows.iter().map(|r| r.max_ns).max().unwrap_or(0).to_string(),
                        "-".into(),
                        ops.to_string(),
                        format!("{:.1}", ops as f64 / n),
                        format!("{:.1}", mean(|r| r.avg_range_level)),
                        format!("{:.1}", mean(|r| r.avg_children)),
                        rows[0].domain.clone(),
                        format!("{pattern} ({} names; all with --format csv)", rows.len()),
                    ]);
                    continue;
                }
            };
            t.row(vec![
                r.total_proj_ns.to_string(),
                r.total_range_ns.to_string(),
                r.instances.to_string(),
                r.avg_ns.to_string(),
                r.median_ns.to_string(),
                r.min_ns.to_string(),
                r.max_ns.to_string(),
                r.stddev_ns.to_string(),
                r.total_gpu_ops.to_string(),
                format!("{:.1}", r.avg_gpu_ops),
                format!("{:.1}", r.avg_range_level),
                format!("{:.1}", r.avg_children),
                r.domain.clone(),
                r.name.clone(),
            ]);
        }
        t
    }

    fn nvtx_kern_table(&self) -> Table {
        let mut t = Table::new(
            "Kernels launched inside NVTX ranges [nvtx_kern_sum]",
            &[
                "Range",
                "Total Time (ns)",
                "Instances",
                "Avg (ns)",
                "Med (ns)",
                "Min (ns)",
                "Max (ns)",
                "StdDev (ns)",
                "Domain",
                "Kernel",
            ],
        );
        for r in &self.nvtx_kern {
            let mut cells = vec![r.range.clone()];
            cells.extend(r.time.cells());
            cells.extend([r.domain.clone(), r.kernel.clone()]);
            t.row(cells);
        }
        t
    }

    fn categories_table(&self) -> Table {
        let mut t = Table::new(
            "GPU time by kind of work (kernels by name: gemm, attention, ...; copies; memsets)",
            &["Time (%)", "Total Time (ns)", "Count", "Category"],
        );
        for r in &self.categories {
            t.row(vec![format!("{:.1}", r.percent), r.total_ns.to_string(), r.count.to_string(), r.category.into()]);
        }
        t
    }

    fn python_sync_table(&self) -> Table {
        let mut t = Table::new(
            "Synchronising calls by Python source line [python_sync_sum]",
            &["Time (%)", "Total Time (ns)", "Num Calls", "Avg (ns)", "Max (ns)", "Location", "Function", "Calls"],
        );
        for r in &self.python_sync {
            t.row(vec![
                format!("{:.1}", r.percent),
                r.time.total_ns.to_string(),
                r.time.count.to_string(),
                r.time.avg_ns.to_string(),
                r.time.max_ns.to_string(),
                format!("{}:{}", r.file, r.line),
                r.function.clone(),
                r.calls.clone(),
            ]);
        }
        t
    }

    fn triton_table(&self) -> Table {
        let mut t = Table::new(
            "Triton kernels (torch.compile) by what they fuse",
            &["Time (%)", "Total Time (ns)", "Count", "Kernels", "Kind", "Fused"],
        );
        for r in &self.triton {
            let fused = if r.fused.is_empty() { "-".to_string() } else { r.fused.clone() };
            let cells = [r.total_ns.to_string(), r.count.to_string(), r.kernels.to_string(), r.kind.to_string()];
            t.row([vec![format!("{:.1}", r.percent)], cells.to_vec(), vec![fused]].concat());
        }
        t
    }

    fn graphs_table(&self) -> Table {
        let mut t = Table::new(
            "CUDA graphs",
            &["PID", "Launches", "Mean Replay (ns)", "Kernels", "Nodes", "Kernel Time (ns)", "Graph"],
        );
        for g in &self.graphs {
            // Traced at graph level, a launch's nodes are not known.
            let known = |v: u64| if g.graph_level { "-".to_string() } else { v.to_string() };
            t.row(vec![
                g.pid.to_string(),
                g.launches.to_string(),
                (g.replay_ns / g.launches.max(1)).to_string(),
                known(g.kernels),
                known(g.nodes),
                known(g.kernel_ns),
                g.graph_id.to_string(),
            ]);
        }
        t
    }

    fn api_errors_table(&self) -> Table {
        let mut t = Table::new(
            "CUDA calls that returned an error [cuda_api_errors]",
            &["PID", "Count", "First (ns)", "Last (ns)", "Class", "Code", "Error", "API"],
        );
        for r in &self.api_errors {
            t.row(vec![
                r.pid.to_string(),
                r.count.to_string(),
                r.first_ns.to_string(),
                r.last_ns.to_string(),
                r.class.as_str().to_string(),
                r.code.to_string(),
                r.error.clone(),
                r.api.clone(),
            ]);
        }
        t
    }

    fn devices_table(&self) -> Table {
        let mut t = Table::new("Devices", &["PID", "Device", "Memory (GiB)", "CC", "SMs", "Name"]);
        for d in &self.devices {
            t.row(vec![
                d.pid.to_string(),
                d.device.to_string(),
                // 0: the trace did not say (a Kineto trace whose device was recovered from its kernels).
                match d.memory_bytes {
                    0 => "?".into(),
                    m => format!("{:.1}", m as f64 / (1u64 << 30) as f64),
                },
                match d.compute_capability.as_str() {
                    "0.0" => "?".into(),
                    cc => cc.to_string(),
                },
                d.multiprocessors.to_string(),
                d.name.clone(),
            ]);
        }
        t
    }

    fn processes_table(&self) -> Table {
        let mut t = Table::new(
            "Processes",
            &["PID", "PPID", "Rank", "Host", "CUPTI", "Events", "Dropped", "Finished", "Command"],
        );
        for p in &self.processes {
            let mut command = if p.status.is_empty() {
                p.command.clone()
            } else {
                format!("{} [agent off: {}]", p.command, p.status)
            };
            if p.rings_refused > 0 {
                command.push_str(&format!(" [{} threads got no ring: no shared memory]", p.rings_refused));
            }
            if let Some(names) = p.drops.names_not_kept() {
                command.push_str(&format!(" [{names}]"));
            }
            for u in &p.records_unused {
                command
                    .push_str(&format!(" [{} records: {} skipped, {} unfinished]", u.class, u.skipped, u.incomplete));
            }
            if p.injected_late {
                command.push_str(&late_note(p.nvtx_tables_late, p.nvtx_tables_foreign));
            }
            if p.unseen_begin > 0 {
                command.push_str(&format!(" [{} calls in flight when recording was armed: left out]", p.unseen_begin));
            }
            if p.sample_one_in > 0 {
                let what = match (p.sampled_steps, p.sampled_slices) {
                    (steps, 0) => format!("{steps} steps"),
                    (0, slices) => format!("{slices} time slices"),
                    (steps, slices) => format!("{steps} steps and {slices} time slices before the first step"),
                };
                command.push_str(&format!(
                    " [sampled: {what} recorded whole, one in {}; the tables hold their work only, `cuflight report` extrapolates]",
                    p.sample_one_in
                ));
            }
            if !p.traced.is_empty() && p.traced != cuflight_format::tracing::describe(cuflight_format::tracing::DEFAULT)
            {
                command.push_str(&format!(" [traced: {}]", p.traced));
            }
            if p.program_held_ns + p.delivery_held_ns > 0 {
                command.push_str(&format!(
                    " [held for room in full rings: program {:.1} ms, agent's own threads {:.1} ms]",
                    p.program_held_ns as f64 / 1e6,
                    p.delivery_held_ns as f64 / 1e6
                ));
            }
            if p.python_stacks > 0 {
                command.push_str(&format!(
                    " [Python stacks: {} read in {:.1} ms, {:.1} us each]",
                    p.python_stacks,
                    p.python_stack_ns as f64 / 1e6,
                    p.python_stack_ns as f64 / p.python_stacks as f64 / 1e3
                ));
            }
            if let Some(why) = &p.python_unread {
                command.push_str(&format!(" [no Python stacks: {why}]"));
            }
            if p.refused > 0 {
                command.push_str(&format!(" [{} events refused: no known start or an end before it]", p.refused));
            }
            let rank = match (p.rank, p.local_rank, p.world_size) {
                (None, _, _) => "-".to_string(),
                (Some(r), l, w) => {
                    let local = l.map_or(String::new(), |l| format!(" (local {l})"));
                    let world = if w > 0 { format!(" of {w}") } else { String::new() };
                    format!("{r}{local}{world}")
                }
            };
            t.row(vec![
                p.pid.to_string(),
                p.ppid.to_string(),
                rank,
                if p.host.is_empty() { "-".to_string() } else { p.host.clone() },
                p.cupti_version.to_string(),
                p.events.to_string(),
                p.drops.total().saturating_add(p.refused).to_string(),
                match (p.finished, p.launches_without_kernel) {
                    (true, _) => "yes".to_string(),
                    (false, 0) => "no (killed?)".to_string(),
                    (false, n) => format!("no (killed?): {n} launches lost their kernel"),
                },
                command,
            ]);
        }
        t
    }
}

/// A duration table with `nsys stats`' columns.
/// nvtx_sum's table (or a style's part of it): by time, as nsys orders it; on the terminal, names that differ only
/// by numbers (ProfilerStep#N) share a row.
fn nvtx_table(title: &str, nvtx: Vec<NvtxRow>, grouped: bool) -> Table {
    let mut t = Table::new(
        title,
        &[
            "Time (%)",
            "Total Time (ns)",
            "Instances",
            "Avg (ns)",
            "Med (ns)",
            "Min (ns)",
            "Max (ns)",
            "StdDev (ns)",
            "Style",
            "Domain",
            "Name",
        ],
    );
    // By time, as nsys orders it.
    let mut rows: Vec<&NvtxRow> = nvtx.iter().collect();
    rows.sort_by(|a, b| {
        b.time.total_ns.cmp(&a.time.total_ns).then_with(|| super::grouping::natural_cmp(&a.name, &b.name))
    });
    let key = |r: &NvtxRow| format!("{}\0{}", r.style, r.domain);
    let shown = if grouped {
        super::grouping::group(&rows, |r| r.name.as_str(), key)
    } else {
        rows.iter().map(|&r| super::grouping::Shown::One(r)).collect()
    };
    for s in shown {
        t.row(match s {
            super::grouping::Shown::One(r) => {
                let mut cells = vec![format!("{:.1}", r.percent)];
                cells.extend(r.time.cells());
                cells.extend([r.style.to_string(), r.domain.clone(), r.name.clone()]);
                cells
            }
            super::grouping::Shown::Group { pattern, rows } => {
                let total: u64 = rows.iter().map(|r| r.time.total_ns).sum();
                let count: u64 = rows.iter().map(|r| r.time.count).sum();
                let min = rows.iter().map(|r| r.time.min_ns).min().unwrap_or(0);
                let max = rows.iter().map(|r| r.time.max_ns).max().unwrap_or(0);
                // The group's median and spread would need every instance: left out, not made up.
                let percent: f64 = rows.iter().map(|r| r.percent).sum();
                let mut cells = vec![format!("{percent:.1}"), total.to_string(), count.to_string()];
                cells.extend([(total / count.max(1)).to_string(), "-".into(), min.to_string()]);
                cells.extend([max.to_string(), "-".into(), rows[0].style.to_string(), rows[0].domain.clone()]);
                cells.push(format!("{pattern} ({} names; all with --format csv)", rows.len()));
                cells
            }
        });
    }
    t
}

fn durations(title: &str, rows: &[DurationRow]) -> Table {
    let mut t = Table::new(title, &[&DURATION_COLUMNS[..], &["Name"]].concat());
    for r in rows {
        let mut cells = vec![format!("{:.1}", r.percent)];
        cells.extend(r.time.cells());
        cells.push(r.name.clone());
        t.row(cells);
    }
    t
}

/// What an agent injected into a running process could do for NVTX, for the processes table.
fn late_note(found: u32, foreign: u32) -> String {
    let held = match foreign {
        0 => String::new(),
        1 => ", 1 held by another tool".into(),
        n => format!(", {n} held by other tools"),
    };
    match found {
        0 => format!(" [agent injected into the running process: no NVTX ranges{held}]"),
        1 => {
            format!(" [agent injected into the running process: NVTX ranges from the 1 library found using NVTX{held}]")
        }
        n => format!(
            " [agent injected into the running process: NVTX ranges from the {n} libraries found using NVTX{held}]"
        ),
    }
}
