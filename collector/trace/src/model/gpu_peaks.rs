//! The peak rates of NVIDIA's data-center GPUs, as their datasheets give them (dense math, no sparsity; boost
//! clocks), for placing what a kernel or operator achieved on the GPU's roofline. A GPU is known by the name CUDA
//! gives it (`cudaDeviceProp::name`, which traces carry: "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB",
//! "Tesla V100-SXM2-32GB"); others have no peaks here, and their rates are shown without a roofline.
//!
//! Sources: NVIDIA H100 Tensor Core GPU datasheet (SXM5 and PCIe columns; H100 NVL per GPU), NVIDIA H200 Tensor
//! Core GPU datasheet (SXM), NVIDIA A100 Tensor Core GPU datasheet (40 and 80 GB, SXM4 and PCIe), NVIDIA Tesla
//! V100 datasheet (SXM2 and PCIe). Measured on an H200 (2026-11-28, `scripts/gpu-validate` part `counters`): a
//! streaming copy reached 3.96 TB/s, 82% of the DRAM peak the counters imply (4.82 TB/s), and a bf16 8192³ cuBLAS
//! GEMM 870 TFLOP/s, 88% of the datasheet's 989.

/// A GPU's peaks: TFLOP/s by the kind of math, DRAM TB/s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peaks {
    pub name: &'static str,
    /// CUDA cores, fp32.
    pub fp32: f64,
    /// Tensor Cores: TF32, bf16/fp16, fp8 (None where the GPU has no such Tensor Core math).
    pub tf32: Option<f64>,
    pub bf16: f64,
    pub fp8: Option<f64>,
    pub dram_tbps: f64,
}

/// The kind of math a GEMM's kernel ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Math {
    Fp32,
    Tf32,
    Bf16,
    Fp8,
}

/// (what the name must contain, peaks), most specific first.
const GPUS: [(&[&str], Peaks); 11] = [
    (
        &["H200"],
        Peaks { name: "H200 SXM", fp32: 67.0, tf32: Some(494.7), bf16: 989.4, fp8: Some(1978.9), dram_tbps: 4.8 },
    ),
    (
        &["H100", "NVL"],
        Peaks { name: "H100 NVL", fp32: 60.0, tf32: Some(417.5), bf16: 835.0, fp8: Some(1670.5), dram_tbps: 3.9 },
    ),
    (
        &["H100", "PCIe"],
        Peaks { name: "H100 PCIe", fp32: 51.2, tf32: Some(378.0), bf16: 756.0, fp8: Some(1513.0), dram_tbps: 2.0 },
    ),
    (
        &["H100"],
        Peaks { name: "H100 SXM5", fp32: 67.0, tf32: Some(494.7), bf16: 989.4, fp8: Some(1978.9), dram_tbps: 3.35 },
    ),
    (
        &["A100", "PCIE", "80GB"],
        Peaks { name: "A100 PCIe 80GB", fp32: 19.5, tf32: Some(156.0), bf16: 312.0, fp8: None, dram_tbps: 1.935 },
    ),
    (
        &["A100", "80GB"],
        Peaks { name: "A100 SXM4 80GB", fp32: 19.5, tf32: Some(156.0), bf16: 312.0, fp8: None, dram_tbps: 2.039 },
    ),
    (
        &["A100", "PCIE"],
        Peaks { name: "A100 PCIe 40GB", fp32: 19.5, tf32: Some(156.0), bf16: 312.0, fp8: None, dram_tbps: 1.555 },
    ),
    (
        &["A100"],
        Peaks { name: "A100 SXM4 40GB", fp32: 19.5, tf32: Some(156.0), bf16: 312.0, fp8: None, dram_tbps: 1.555 },
    ),
    (&["V100", "PCIE"], Peaks { name: "V100 PCIe", fp32: 14.0, tf32: None, bf16: 112.0, fp8: None, dram_tbps: 0.9 }),
    (&["V100", "SXM"], Peaks { name: "V100 SXM2", fp32: 15.7, tf32: None, bf16: 125.0, fp8: None, dram_tbps: 0.9 }),
    (&["V100"], Peaks { name: "V100", fp32: 14.0, tf32: None, bf16: 112.0, fp8: None, dram_tbps: 0.9 }),
];

/// The peaks of the GPU CUDA calls `name` (case ignored), None for one not listed. V100 has fp16 Tensor Cores only:
/// its `bf16` is its fp16 peak.
pub fn of(name: &str) -> Option<Peaks> {
    let upper = name.to_ascii_uppercase();
    GPUS.iter().find(|(keys, _)| keys.iter().all(|k| upper.contains(&k.to_ascii_uppercase()))).map(|(_, p)| *p)
}

impl Peaks {
    /// TFLOP/s for this kind of math (None where the GPU has none of it).
    pub fn tflops(&self, math: Math) -> Option<f64> {
        match math {
            Math::Fp32 => Some(self.fp32),
            Math::Tf32 => self.tf32,
            Math::Bf16 => Some(self.bf16),
            Math::Fp8 => self.fp8,
        }
    }
}

/// The math a GEMM ran, from its operands' type (`c10::BFloat16`, `float`...) and its kernel's name: fp32
/// operands run on Tensor Cores as TF32 when the kernel says so (`tf32`, `s1688`/`s16816`: CUTLASS's and cuBLAS's
/// TF32 instructions; `xmma` without `ffma`), else on CUDA cores.
pub fn gemm_math(dtype: &str, kernel: &str) -> Option<Math> {
    let k = kernel.to_ascii_lowercase();
    match dtype {
        "c10::BFloat16" | "c10::Half" => Some(Math::Bf16),
        t if t.starts_with("c10::Float8") => Some(Math::Fp8),
        "float" => {
            let tensor = ["tf32", "s1688", "s16816", "tensorop"].iter().any(|m| k.contains(m))
                || (k.contains("xmma") && !k.contains("ffma"));
            Some(if tensor { Math::Tf32 } else { Math::Fp32 })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names the shared traces and the lent GPUs carry, each to its datasheet's column.
    #[test]
    fn gpus_are_known_by_the_names_cuda_gives_them() {
        for (name, want) in [
            ("NVIDIA H100 80GB HBM3", "H100 SXM5"),
            ("NVIDIA H100 PCIe", "H100 PCIe"),
            ("NVIDIA H100 NVL", "H100 NVL"),
            ("NVIDIA H200", "H200 SXM"),
            ("NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB"),
            ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
            ("Tesla V100-SXM2-32GB", "V100 SXM2"),
        ] {
            assert_eq!(of(name).map(|p| p.name), Some(want), "{name}");
        }
        assert_eq!(of("NVIDIA GeForce RTX 4090"), None);
        assert_eq!(of("NVIDIA A100-SXM4-80GB").unwrap().tflops(Math::Fp8), None);
    }

    #[test]
    fn fp32_gemms_are_tf32_where_their_kernel_says_so() {
        for (kernel, math) in [
            ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(Params)", Math::Tf32),
            ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize64x128x32", Math::Tf32),
            (
                "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4",
                Math::Fp32,
            ),
            ("ampere_sgemm_128x64_nn", Math::Fp32),
            ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(Params)", Math::Fp32),
        ] {
            assert_eq!(gemm_math("float", kernel), Some(math), "{kernel}");
        }
        assert_eq!(gemm_math("c10::BFloat16", "sm90_xmma_gemm_bf16bf16"), Some(Math::Bf16));
        assert_eq!(gemm_math("long int", "x"), None);
    }
}
