//! Theoretical occupancy, as CUDA's occupancy calculator computes it: resident warps per SM, limited by the
//! block size, registers and shared memory, over the SM's maximum. Per-architecture limits come from the CUDA C
//! Programming Guide's "Compute Capabilities" table.

use cuflight_format::event::LaunchConfig;

struct Limits {
    max_threads: u32,
    max_blocks: u32,
    registers: u32,
    shared: u32,
}

fn limits((major, minor): (u32, u32)) -> Option<Limits> {
    let (max_threads, max_blocks, shared_kib) = match (major, minor) {
        (7, 0) | (7, 2) => (2048, 32, 96),
        (7, 5) => (1024, 16, 64),
        (8, 0) => (2048, 32, 164),
        (8, 6) => (1536, 16, 100),
        (8, 7) => (1536, 16, 164),
        (8, 9) => (1536, 24, 100),
        (9, 0) => (2048, 32, 228),
        (10, _) => (2048, 32, 228),
        (12, _) => (1536, 32, 100),
        (6, _) => (2048, 32, 64),
        _ => return None,
    };
    Some(Limits { max_threads, max_blocks, registers: 65536, shared: shared_kib * 1024 })
}

/// Occupancy in 0..=1, or None when the architecture or block size is unknown.
pub fn estimate(capability: (u32, u32), cfg: &LaunchConfig) -> Option<f64> {
    let lim = limits(capability)?;
    let threads = cfg.block.iter().map(|&d| d.max(1)).product::<u32>();
    if cfg.block[0] == 0 || threads > 1024 {
        return None;
    }
    let warps = threads.div_ceil(32);
    let max_warps = lim.max_threads / 32;
    let mut blocks = lim.max_blocks.min(max_warps / warps);
    if cfg.registers > 0 {
        // Registers are allocated per warp in units of 256.
        let per_warp = (cfg.registers as u32 * 32).div_ceil(256) * 256;
        blocks = blocks.min((lim.registers / per_warp) / warps);
    }
    let shared = cfg.static_shared + cfg.dynamic_shared;
    if shared > 0 {
        // 1 KiB per block is reserved by the system from compute capability 8.0 on.
        let reserved = if capability.0 >= 8 { 1024 } else { 0 };
        blocks = blocks.min(lim.shared / (shared + reserved));
    }
    Some((blocks * warps) as f64 / max_warps as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(block: u32, registers: u16, shared: u32) -> LaunchConfig {
        LaunchConfig { grid: [1, 1, 1], block: [block, 1, 1], registers, static_shared: shared, dynamic_shared: 0 }
    }

    #[test]
    fn limits_follow_the_occupancy_calculator() {
        // 256 threads, 32 registers on H100: 8 blocks x 8 warps = 64 warps = full occupancy.
        assert_eq!(estimate((9, 0), &cfg(256, 32, 0)), Some(1.0));
        // 128 registers per thread: 16 KiB registers per warp... 65536 / 4096 = 16 warps → 2 blocks of 8 warps.
        assert_eq!(estimate((9, 0), &cfg(256, 128, 0)), Some(0.25));
        // 100 KiB of shared memory per block on A100 (164 KiB): one block of 8 warps out of 64.
        assert_eq!(estimate((8, 0), &cfg(256, 0, 100 * 1024)), Some(0.125));
        assert_eq!(estimate((3, 5), &cfg(256, 0, 0)), None);
    }
}
