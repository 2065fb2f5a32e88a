//! The devices of a Kineto trace: from its `deviceProperties`, or, where a trace has none (older torch.profiler
//! versions, some exporters), recovered from the figures libkineto wrote on every kernel. "blocks per SM" is the
//! grid over the SM count, so it gives the count back exactly; the architecture is the one whose occupancy
//! calculator ([`crate::model::occupancy`]) reproduces every sampled "est. achieved occupancy %", none older than a
//! kernel's name says it was built for. A few samples fit several: the SM count of a known GPU decides, else none
//! is claimed (HTA's one-kernel backward-thread trace read "compute capability 9.0, 108 SMs" beside its
//! `cutlass_80_*` kernel: an A100's).

use crate::model::occupancy::kineto_figures;
use cuflight_format::event::LaunchConfig;
use serde_json::Value;
use std::collections::BTreeMap;

/// Distinct launches kept per device for the recovery.
const FIGURES_SAMPLE: usize = 1024;

/// A device's kernels' (launch, blocks per SM, occupancy %), one per distinct launch configuration: the launches
/// that tell architectures apart (large shared memory, many registers) are rare among kernels, not among
/// configurations.
#[derive(Default)]
pub struct Figures {
    seen: rustc_hash::FxHashSet<(u64, u64, u64)>,
    kernels: Vec<(LaunchConfig, f64, i64)>,
    /// The newest architecture a sampled kernel's name says it was built for (`major * 10 + minor`).
    built_for: Option<u32>,
}

impl Figures {
    /// A kernel named `name` launched so.
    pub fn add(&mut self, name: &str, cfg: &LaunchConfig, blocks_per_sm: f64, occupancy_pct: i64) {
        if self.kernels.len() < FIGURES_SAMPLE && blocks_per_sm > 0.0 && self.seen.insert(cfg.pack()) {
            self.kernels.push((*cfg, blocks_per_sm, occupancy_pct));
            let arch = crate::model::kernel_category::gemm_arch(name);
            self.built_for = self.built_for.max(arch);
        }
    }
}

/// The data-centre GPUs' SM counts, from NVIDIA's architecture whitepapers and product briefs (the SMs enabled on
/// each part), where one architecture has that count: V100 80, T4 40, A100 108, A30 56, A10 72, A40 84, L4 58,
/// L40/L40S 142, H100 SXM and H200 132, H100 PCIe 114, B200 148 (TraceLens's B200 trace's `deviceProperties`).
fn known_sm_count(sms: u64) -> Option<(u32, u32)> {
    Some(match sms {
        80 => (7, 0),
        40 => (7, 5),
        108 | 56 => (8, 0),
        72 | 84 => (8, 6),
        58 | 142 => (8, 9),
        132 | 114 => (9, 0),
        148 => (10, 0),
        _ => return None,
    })
}

pub struct DeviceFacts {
    pub id: u32,
    pub name: String,
    pub memory: u64,
    pub capability: (u32, u32),
    pub sms: u64,
}

pub fn from_properties(props: &[Value]) -> Vec<DeviceFacts> {
    props
        .iter()
        .map(|d| {
            let n = |k| d.get(k).and_then(Value::as_u64).unwrap_or(0);
            // ROCm's traces (HTA's MI250 sample) give an AMD GPU's ISA version as computeMajor/Minor (gfx90a: 9,
            // 0), which would read as a Hopper's compute capability. Their wavefront is 64 wide where every NVIDIA
            // GPU's warp is 32: such a device's capability is unknown, not 9.0.
            let amd = n("warpSize") == 64;
            DeviceFacts {
                id: n("id") as u32,
                // Named "" in some ROCm traces (TraceLens's vLLM MI300X captures).
                name: match d.get("name").and_then(Value::as_str).map(str::trim) {
                    Some(name) if !name.is_empty() => name.to_string(),
                    _ if amd => "AMD GPU".to_string(),
                    _ => "GPU".to_string(),
                },
                memory: n("totalGlobalMem"),
                capability: if amd { (0, 0) } else { (n("computeMajor") as u32, n("computeMinor") as u32) },
                sms: n("numSms"),
            }
        })
        .collect()
}

/// On ROCm, the devices torch.profiler's GPU ops name, as HIP ordinals (`deviceProperties`' ids, and those of the
/// caching allocator's `[memory]` events), where the two differ: op device → ordinal. Kineto took an op's device
/// from roctracer's record (`device_id`: the HSA agent's node id, which numbers the CPU agents, one per NUMA node,
/// before the GPUs), and since rocprofiler-sdk from the agent's `logical_node_type_id` (its index among all the
/// node's GPUs, which HIP_VISIBLE_DEVICES does not renumber). TraceLens's MI300X traces list HIP device 0 and run
/// their kernels on "device" 2 (a two-socket host) or 9 (the eighth GPU of one). Where the allocator's events name
/// as many devices as the ops, they are the same GPUs in the same order (both enumerations follow the GPUs'
/// order); else, where one device is listed and the ops name one other, it is that one. None where the ids agree
/// or nothing tells (the ids are then kept as written).
pub fn rocm_ordinals(
    ops: &std::collections::BTreeSet<u32>,
    allocated: &std::collections::BTreeSet<u32>,
    listed: &[u32],
) -> Option<BTreeMap<u32, u32>> {
    if ops.is_empty() || ops == allocated {
        return None;
    }
    if allocated.len() == ops.len() {
        return Some(ops.iter().copied().zip(allocated.iter().copied()).collect());
    }
    match (listed, ops.iter().next()) {
        (&[only], Some(&op)) if allocated.is_empty() && ops.len() == 1 && op != only => {
            Some(BTreeMap::from([(op, only)]))
        }
        _ => None,
    }
}

/// Architectures tried, most common in traces first.
const CANDIDATES: [(u32, u32); 12] =
    [(9, 0), (8, 0), (10, 0), (8, 6), (8, 9), (12, 0), (7, 0), (7, 5), (8, 7), (10, 1), (6, 0), (6, 1)];

/// Devices recovered from kernels' (launch, blocks per SM, occupancy %) samples.
pub fn recovered(samples: &BTreeMap<u32, Figures>) -> Vec<DeviceFacts> {
    let mut out = Vec::new();
    for (&id, Figures { kernels, built_for, .. }) in samples {
        let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
        for (cfg, bps, _) in kernels {
            let grid = cfg.grid.iter().map(|&g| g as f64).product::<f64>();
            let sms = (grid / bps).round();
            if (1.0..=4096.0).contains(&sms) {
                *counts.entry(sms as u64).or_default() += 1;
            }
        }
        let Some((&sms, _)) = counts.iter().max_by_key(|(_, &n)| n) else { continue };
        let fits = |cc: (u32, u32)| {
            let new_enough = built_for.is_none_or(|a| cc.0 * 10 + cc.1 >= a);
            new_enough
                && kernels.iter().all(|(cfg, _, pct)| {
                    kineto_figures(cc, sms, cfg).and_then(|f| f.occupancy_pct) == Some(*pct as i32)
                })
        };
        let fitting: Vec<(u32, u32)> = CANDIDATES.into_iter().filter(|&cc| fits(cc)).collect();
        let capability = match fitting.as_slice() {
            [only] => Some(*only),
            several => known_sm_count(sms).filter(|cc| several.contains(cc)),
        };
        let name = match capability {
            Some(_) => "unnamed GPU (its SMs and compute capability recovered from its kernels)".to_string(),
            None => "unnamed GPU (its SMs recovered from its kernels)".to_string(),
        };
        out.push(DeviceFacts { id, name, memory: 0, capability: capability.unwrap_or((0, 0)), sms });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{from_properties, recovered, Figures};
    use cuflight_format::event::LaunchConfig;

    /// One kernel that several architectures' calculators agree on: the SM count of a known GPU decides, and a name
    /// built for a newer one rules the older out; else no capability is claimed.
    #[test]
    fn a_capability_is_claimed_only_where_the_kernels_tell_it() {
        // HTA's backward-thread trace: one CUTLASS GEMM, 64 blocks on 108 SMs, 0% (fewer blocks than SMs).
        let cfg = LaunchConfig {
            grid: [32, 1, 2],
            block: [128, 1, 1],
            registers: 240,
            static_shared: 98304,
            dynamic_shared: 0,
        };
        let of = |name: &str, sms: f64| {
            let mut f = Figures::default();
            f.add(name, &cfg, 64.0 / sms, 0);
            let d = recovered(&std::collections::BTreeMap::from([(0, f)]));
            (d[0].sms, d[0].capability)
        };
        let cutlass = "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>";
        assert_eq!(of(cutlass, 108.0), (108, (8, 0)), "an A100's count");
        assert_eq!(of(cutlass, 132.0), (132, (9, 0)), "an H100's, running sm80 kernels");
        assert_eq!(of(cutlass, 100.0), (100, (0, 0)), "no known GPU has 100 SMs: not told");
        // Built for 9.0: not an A100's, whatever its count says; newer ones fit too, so none is claimed.
        assert_eq!(of("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 108.0), (108, (0, 0)));
    }

    /// An NVIDIA GPU's compute capability is kept; an AMD GPU's ISA version (64-wide wavefronts) is not taken for
    /// one.
    #[test]
    fn only_an_nvidia_gpu_has_a_compute_capability() {
        let props: Vec<serde_json::Value> = serde_json::from_str(
            r#"[{"id":0,"name":"NVIDIA H100","computeMajor":9,"computeMinor":0,"warpSize":32,"numSms":132},
                {"id":1,"name":"AMD Radeon Graphics","computeMajor":9,"computeMinor":0,"warpSize":64,"numSms":104},
                {"id":2,"name":"an older trace's GPU","computeMajor":8,"computeMinor":0,"numSms":108}]"#,
        )
        .unwrap();
        let caps: Vec<(u32, u32)> = from_properties(&props).iter().map(|d| d.capability).collect();
        assert_eq!(caps, [(9, 0), (0, 0), (8, 0)]);
    }
}
