//! Occupancy as CUDA's occupancy calculator computes it (`cudaOccMaxActiveBlocksPerMultiprocessor` in the
//! toolkit's `cuda_occupancy.h`, CUDA 12 and 13): resident blocks per SM, limited by warps, the per-SM block cap,
//! registers (allocated per warp in units of 256, spread over the SM's sub-partitions) and shared memory
//! (allocated in 128- or 256-byte units, plus 1 KiB the system reserves per block from compute capability 8.0).
//! Per-architecture facts are that header's; the per-SM thread and shared-memory sizes are the CUDA C
//! Programming Guide's "Compute Capabilities" table (what `cudaDeviceProp` reports). The default carveout is
//! assumed (the whole shared memory), as Kineto assumes it.
//!
//! Two readings: [`estimate`], the theoretical occupancy the report shows; [`kineto_figures`], the three numbers
//! Kineto writes on every kernel ("blocks per SM", "warps per SM", "est. achieved occupancy %"), computed as
//! libkineto computes them so an export reads in TensorBoard as the original does.

use cuflight_format::event::LaunchConfig;

struct Arch {
    max_threads: u32,
    max_blocks: u32,
    /// Shared memory per SM in bytes (the default carveout: all of it).
    shared: u32,
    sub_partitions: u32,
    shared_granularity: u32,
    reserved_per_block: u32,
    max_regs_per_thread: u32,
}

const REGS_PER_SM: u32 = 65536;
const REGS_PER_BLOCK: u32 = 65536;
const REG_GRANULARITY: u32 = 256;
const MAX_THREADS_PER_BLOCK: u32 = 1024;
/// `cudaDeviceProp::sharedMemPerBlock` on every architecture since 2.0; more needs the opt-in attribute.
const SHARED_PER_BLOCK_DEFAULT: u32 = 48 * 1024;

fn arch((major, minor): (u32, u32)) -> Option<Arch> {
    // cudaOccMaxBlocksPerMultiprocessor, and the Programming Guide's threads and shared memory per SM.
    let (max_threads, max_blocks, shared_kib) = match (major, minor) {
        (5, _) => (2048, 32, 64),
        (6, _) => (2048, 32, 64),
        (7, 5) => (1024, 16, 64),
        (7, _) => (2048, 32, 96),
        (8, 0) => (2048, 32, 164),
        (8, 7) => (1536, 16, 164),
        (8, 9) => (1536, 24, 100),
        (8, _) => (1536, 16, 100),
        (9, _) => (2048, 32, 228),
        (10, 1) => (2048, 24, 228),
        (10, _) => (2048, 32, 228),
        (12, _) => (1536, 24, 100),
        _ => return None,
    };
    Some(Arch {
        max_threads,
        max_blocks,
        shared: shared_kib * 1024,
        // cudaOccSubPartitionsPerMultiprocessor: 2 on GP100 (6.0), 4 elsewhere.
        sub_partitions: if (major, minor) == (6, 0) { 2 } else { 4 },
        // cudaOccSMemAllocationGranularity.
        shared_granularity: if major >= 8 { 128 } else { 256 },
        // cudaDeviceProp::reservedSharedMemPerBlock, added to every block from 8.0 on.
        reserved_per_block: if major >= 8 { 1024 } else { 0 },
        // cudaOccRegAllocationMaxPerThread.
        max_regs_per_thread: if major >= 7 { 256 } else { 255 },
    })
}

/// Resident blocks per SM. `default_block_limit` applies the per-block shared-memory limit of a function that
/// did not opt in to more (what Kineto asks: its calculator call never opts in, so a kernel with more than 48 KiB
/// reads 0 there); a launch that ran had opted in, so the report leaves it off.
fn active_blocks(a: &Arch, cfg: &LaunchConfig, default_block_limit: bool) -> u32 {
    let threads = cfg.block.iter().map(|&d| d.max(1)).fold(1u32, |t, d| t.saturating_mul(d));
    if threads > MAX_THREADS_PER_BLOCK {
        return 0;
    }
    let warps = threads.div_ceil(32);
    // cudaOccMaxBlocksPerSMWarpsLimit and cudaOccMaxBlocksPerMultiprocessor.
    let mut blocks = (a.max_threads / 32 / warps).min(a.max_blocks);
    // cudaOccMaxBlocksPerSMRegsLimit: a warp's registers are allocated in units of 256; warps are placed on
    // sub-partitions, each with its share of the register file.
    let per_warp = (cfg.registers as u32 * 32).div_ceil(REG_GRANULARITY) * REG_GRANULARITY;
    if per_warp > 0 {
        let assumed = per_warp * warps.div_ceil(a.sub_partitions) * a.sub_partitions;
        if cfg.registers as u32 > a.max_regs_per_thread || assumed > REGS_PER_BLOCK || per_warp * warps > REGS_PER_BLOCK
        {
            return 0;
        }
        let warps_per_partition = REGS_PER_SM / a.sub_partitions / per_warp;
        blocks = blocks.min(warps_per_partition * a.sub_partitions / warps);
    }
    // cudaOccMaxBlocksPerSMSmemLimit.
    let used = cfg.static_shared as u64 + cfg.dynamic_shared as u64 + a.reserved_per_block as u64;
    let allocated = used.div_ceil(a.shared_granularity as u64) * a.shared_granularity as u64;
    if default_block_limit && allocated > (SHARED_PER_BLOCK_DEFAULT + a.reserved_per_block) as u64 {
        return 0;
    }
    if let Some(fit) = (a.shared as u64).checked_div(allocated) {
        blocks = blocks.min(fit.min(u32::MAX as u64) as u32);
    }
    blocks
}

/// Theoretical occupancy in 0..=1, or None when the architecture is unknown or the block size is not a launch's.
pub fn estimate(capability: (u32, u32), cfg: &LaunchConfig) -> Option<f64> {
    let a = arch(capability)?;
    let threads = cfg.block.iter().map(|&d| d.max(1)).product::<u32>();
    if cfg.block[0] == 0 || threads > MAX_THREADS_PER_BLOCK {
        return None;
    }
    let blocks = active_blocks(&a, cfg, false);
    Some((blocks * threads.div_ceil(32)) as f64 / (a.max_threads / 32) as f64)
}

/// What Kineto writes on a kernel: blocks per SM and warps per SM (single-precision, as libkineto computes and
/// prints them) and "est. achieved occupancy %" (an integer, rounded half up).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KinetoFigures {
    pub blocks_per_sm: f32,
    pub warps_per_sm: f32,
    /// None where the architecture is unknown (libkineto would write -99 there: its -1 "failed" times 100).
    pub occupancy_pct: Option<i32>,
}

/// libkineto's figures for a kernel on a device with `sms` multiprocessors: blocks per SM is the grid over the
/// SMs; warps per SM counts threads over 32 (not whole warps); the occupancy is the blocks the calculator lets in
/// (at most blocks per SM) times the block's threads over the SM's threads. None without an SM count.
pub fn kineto_figures(capability: (u32, u32), sms: u64, cfg: &LaunchConfig) -> Option<KinetoFigures> {
    if sms == 0 {
        return None;
    }
    let grid = cfg.grid[0].wrapping_mul(cfg.grid[1]).wrapping_mul(cfg.grid[2]);
    let threads = cfg.block[0].wrapping_mul(cfg.block[1]).wrapping_mul(cfg.block[2]);
    let blocks_per_sm = grid as f32 / sms as f32;
    let warps_per_sm = blocks_per_sm * threads as f32 / 32.0;
    let occupancy_pct = arch(capability).map(|a| {
        let resident = (active_blocks(&a, cfg, true) as f32).min(blocks_per_sm);
        let occupancy = resident * threads as f32 / a.max_threads as f32;
        (0.5 + occupancy as f64 * 100.0) as i32
    });
    Some(KinetoFigures { blocks_per_sm, warps_per_sm, occupancy_pct })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(grid: u32, block: u32, registers: u16, shared: u32) -> LaunchConfig {
        LaunchConfig { grid: [grid, 1, 1], block: [block, 1, 1], registers, static_shared: shared, dynamic_shared: 0 }
    }

    #[test]
    fn limits_follow_the_occupancy_calculator() {
        // 256 threads, 32 registers on H100: 8 blocks x 8 warps = 64 warps = full occupancy.
        assert_eq!(estimate((9, 0), &cfg(1, 256, 32, 0)), Some(1.0));
        // 128 registers per thread: 4096 per warp, 4 warps per sub-partition, 16 warps → 2 blocks of 8 warps.
        assert_eq!(estimate((9, 0), &cfg(1, 256, 128, 0)), Some(0.25));
        // 100 KiB of shared memory per block on A100 (164 KiB): one block of 8 warps out of 64.
        assert_eq!(estimate((8, 0), &cfg(1, 256, 0, 100 * 1024)), Some(0.125));
        // Sub-partitions: 200 registers (6400 per warp) fit 2 warps in each quarter of the register file, 8 per
        // SM, where the whole file would hold 10.
        assert_eq!(estimate((8, 0), &cfg(1, 32, 200, 0)), Some(8.0 / 64.0));
        assert_eq!(estimate((3, 5), &cfg(1, 256, 0, 0)), None);
    }

    #[test]
    fn kineto_figures_match_what_libkineto_wrote_on_a_v100_and_an_a100() {
        // Kernels as torch.profiler recorded them (../shared/traces: kineto-2rank-r0 on an 80-SM V100-class
        // device, "blocks per SM" 22.222221 for a 2400-block grid on 108 SMs, an A100).
        let f = kineto_figures((8, 0), 108, &cfg(2400, 256, 27, 0)).unwrap();
        assert_eq!((f.blocks_per_sm.to_string(), f.warps_per_sm.to_string()), ("22.222221".into(), "177.77777".into()));
        assert_eq!(f.occupancy_pct, Some(100));
        let f = kineto_figures((8, 0), 108, &cfg(3, 128, 16, 0)).unwrap();
        assert_eq!((f.blocks_per_sm.to_string(), f.occupancy_pct), ("0.027777778".into(), Some(0)));
        // More than 48 KiB without the opt-in: libkineto's calculator call says 0; the report's estimate does not.
        assert_eq!(kineto_figures((9, 0), 132, &cfg(1000, 128, 32, 64 * 1024)).unwrap().occupancy_pct, Some(0));
        assert!(estimate((9, 0), &cfg(1000, 128, 32, 64 * 1024)).unwrap() > 0.0);
        assert_eq!(kineto_figures((9, 0), 0, &cfg(1, 1, 0, 0)), None);
        assert_eq!(kineto_figures((2, 0), 16, &cfg(1, 1, 0, 0)).unwrap().occupancy_pct, None);
    }
}
