//! What kind of work a kernel does, by its name: the categories an engineer tunes against (HTA's kernel
//! breakdown groups time the same way). One rule for stats, the report and the HTML.
//!
//! The names are the ones CUDA libraries give their kernels, demangled: PyTorch's ATen (`at::native::...`),
//! cuBLAS and cuBLASLt (`sm90_xmma_gemm_...`, `nvjet_...`, `ampere_sgemm_...`, `gemv2T_kernel`), CUTLASS
//! (`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>`), cuDNN (`cudnn_infer_volta_scudnn_...`,
//! `cudnn::bn_fw_...`, fused SDPA `cudnn_generated_fort_native_sdpa_...`), FlashAttention
//! (`flash_fwd_kernel`, `pytorch_flash::...`), Triton (`triton_poi_...`, `triton_red_...`, `triton_per_...`,
//! `triton_tem_...`), NCCL. The first rule that matches decides.

use super::kernel_symbols::function_part;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    Gemm,
    Attention,
    Convolution,
    Normalization,
    Softmax,
    Elementwise,
    Reduction,
    Optimizer,
    Communication,
    /// Device-side copy, cast and layout kernels (not the copy engines' memcpys).
    Copy,
    /// The copy engines' transfers (memcpy records, not kernels).
    Memcpy,
    Memset,
    Other,
}

impl Category {
    pub const ALL: [Category; 13] = [
        Category::Gemm,
        Category::Attention,
        Category::Convolution,
        Category::Normalization,
        Category::Softmax,
        Category::Elementwise,
        Category::Reduction,
        Category::Optimizer,
        Category::Communication,
        Category::Copy,
        Category::Memcpy,
        Category::Memset,
        Category::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Category::Gemm => "gemm",
            Category::Attention => "attention",
            Category::Convolution => "convolution",
            Category::Normalization => "normalization",
            Category::Softmax => "softmax",
            Category::Elementwise => "elementwise",
            Category::Reduction => "reduction",
            Category::Optimizer => "optimizer",
            Category::Communication => "communication",
            Category::Copy => "copy",
            Category::Memcpy => "memcpy",
            Category::Memset => "memset",
            Category::Other => "other",
        }
    }
}

/// An activation function by its usual names, in user code as in ATen (`gelu_kernel`, `fused_bias_silu`,
/// `swiglu_fwd`): elementwise work. Short names that are parts of other words (`elu`, `mish`) only as a whole word.
fn is_activation(lower: &str) -> bool {
    const PARTS: [&str; 10] =
        ["relu", "gelu", "silu", "swish", "tanh", "sigmoid", "softplus", "swiglu", "geglu", "hardtanh"];
    PARTS.iter().any(|p| lower.contains(p))
        || lower.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| matches!(w, "elu" | "selu" | "celu" | "mish"))
}

/// A collective that is not NCCL's, by the names its libraries give it: PyTorch's symmetric-memory all-reduce
/// (`multimem_all_reduce_kernel`, `one_shot_all_reduce_kernel`), vLLM's and SGLang's custom all-reduce
/// (`cross_device_reduce_1stage`), TensorRT-LLM's (`allreduce_fusion_kernel`), all-to-alls of expert parallelism.
/// Its category is communication; HTA's breakdown still counts only NCCL's ([`is_comm_kernel`]).
fn is_other_collective(lower: &str) -> bool {
    const PARTS: [&str; 9] = [
        "all_reduce",
        "allreduce",
        "all_gather",
        "allgather",
        "reduce_scatter",
        "reducescatter",
        "alltoall",
        "all_to_all",
        "cross_device_reduce",
    ];
    PARTS.iter().any(|p| lower.contains(p))
}

/// The category of the kernel named `name`.
pub fn kernel_category(name: &str) -> Category {
    if is_comm_kernel(name) {
        return Category::Communication;
    }
    let f = function_part(name);
    let l = f.to_ascii_lowercase();
    let has = |keys: &[&str]| keys.iter().any(|k| l.contains(k));
    let word = |w: &str| l.split(|c: char| !c.is_ascii_alphanumeric()).any(|x| x == w);
    // torch.compile names its Triton kernels by what they are: pointwise, reduction, template (GEMM)...
    if super::inductor::is_inductor_kernel(&l) {
        use super::inductor::Kind;
        return match super::inductor::kind_of(&l).map(|k| k.0) {
            Some(Kind::Pointwise) => Category::Elementwise,
            Some(Kind::Reduction | Kind::PersistentReduction) => Category::Reduction,
            Some(Kind::Template) => Category::Gemm,
            Some(Kind::Foreach) | None => Category::Other,
        };
    }
    if is_other_collective(&l) {
        return Category::Communication;
    }
    // FBGEMM's kernels (`fbgemm_gpu::`, its embedding and conversion kernels) are no GEMMs for their library's name.
    let gemm_named = l.replace("fbgemm", "").contains("gemm");
    if has(&["flash_fwd", "flash_bwd", "fmha", "attention", "attn", "sdpa", "_mha_", "flash::"]) {
        Category::Attention
    } else if has(&["softmax"]) {
        Category::Softmax
    } else if has(&["layer_norm", "layernorm", "rms_norm", "rmsnorm", "batch_norm", "batchnorm", "group_norm"])
        || has(&["groupnorm", "instance_norm", "bn_fw", "bn_bw", "gammabeta", "rowwisemoments", "welford"])
    {
        Category::Normalization
    } else if has(&["conv", "scudnn", "winograd", "wgrad", "dgrad", "fprop", "cask_cudnn", "cudnn::cnn"]) {
        Category::Convolution
    } else if gemm_named
        || has(&["gemv", "nvjet", "matmul", "cublaslt", "splitkreduce", "cublas"])
        || l.starts_with("epilogue::")
        // Tensile's and hipBLASLt's GEMMs on AMD GPUs name the contraction (`Cijk_Ailk_Bljk_...`: C[i,j,k] from
        // A[i,l,k] and B[l,j,k]); TensorRT-LLM's batched GEMMs begin `bmm_` (`bmm_Bfloat16_MxE2m1MxE4m3_...`).
        || l.starts_with("cijk_")
        || word("bmm")
    {
        Category::Gemm
    } else if !l.contains("embedding")
        && has(&[
            "multi_tensor_apply",
            "adam",
            "adagrad",
            "_sgd",
            "sgd_",
            "lamb_",
            "lambfunctor",
            "optimizer",
            "_foreach_",
        ])
    {
        Category::Optimizer
    } else if has(&["copy_kernel", "catarraybatchedcopy", "nchwtonhwc", "nhwctonchw", "transpose", "permute"]) {
        Category::Copy
    } else if has(&["reduce_kernel", "reduce", "argmax", "argmin", "cub::device", "scan_kernel", "_sum_"]) {
        Category::Reduction
    } else if has(&["elementwise", "functor", "fill", "scal_kernel", "dropout"]) || is_activation(&l) {
        Category::Elementwise
    } else {
        Category::Other
    }
}

// Kernel classifiers beside the categories: the one place that judges a kernel's name, for every analysis and output.

/// Whether the kernel named `name` computes gradients: a backward pass runs, so the program trains (an
/// inference server or an HPC code runs none). ATen names its backward kernels so (`softmax_warp_backward`,
/// `GammaBetaBackwardCUDAKernel`, `max_pool_backward_nchw`), FlashAttention `flash_bwd_*`, cuDNN its weight and
/// data gradients `wgrad`/`dgrad` and batch norm's `bn_bw_*`. A loop with a hand-written optimizer (plain
/// elementwise updates, no optimizer kernel) is still told by its backward pass.
pub fn is_backward_kernel(name: &str) -> bool {
    let l = function_part(name).to_ascii_lowercase();
    ["backward", "_bwd", "bwd_", "wgrad", "dgrad", "bn_bw"].iter().any(|k| l.contains(k))
}

/// Whether a kernel of this name is computation, as HTA counts it (neither communication nor a copy, memset or
/// DMA), with one difference: communication is [`is_comm_kernel`]'s, so `void ncclKernel_...` (a name
/// torch.profiler may give) is communication only, where HTA's `^nccl.*Kernel` would count it as computation too.
pub fn is_compute_kernel(name: &str) -> bool {
    !(is_comm_kernel(name)
        || name.contains("Memcpy")
        || name.starts_with("Memset")
        || name.contains("Sync")
        || name.starts_with("dma"))
}

/// GEMM/convolution kernels that run in fp32 on CUDA cores, judged by the names cuBLAS, cuDNN and CUTLASS give
/// their kernels (`sgemm`, `f32f32`, `<float>` and no Tensor Core marker such as `tensorop`, `s1688`, `bf16`).
pub fn is_fp32_gemm(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    let matmul = ["gemm", "conv", "matmul"].iter().any(|k| l.contains(k));
    let tensor_cores = [
        "tensorop", "hmma", "wgmma", "gmma", "h884", "h1688", "h16816", "s1688", "s16816", "i8816", "imma", "bf16",
        "f16", "half", "tf32", "fp8", "e4m3", "e5m2", "int8",
    ];
    let fp32 = ["sgemm", "f32f32", "<float", "float>", "fp32", "_f32", "simt"];
    matmul && !tensor_cores.iter().any(|k| l.contains(k)) && fp32.iter().any(|k| l.contains(k))
}

/// A collective's kernel, NCCL's or another library's ([`Category::Communication`]): the report's communication and
/// the job's clock read these; HTA's breakdown NCCL's alone ([`is_comm_kernel`]).
pub fn is_collective_kernel(name: &str) -> bool {
    kernel_category(name) == Category::Communication
}

/// NCCL's kernels, by the names CUPTI reports once demangled (`ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`,
/// `ncclKernel_...`) or torch.profiler's (which may carry the return type: `void ncclKernel_...`).
pub fn is_comm_kernel(name: &str) -> bool {
    let name = function_part(name);
    name.starts_with("nccl") && name.contains("Kernel") || name.starts_with("ncclDev")
}

/// The operand alignment a cuBLAS or CUTLASS GEMM kernel was built for, in elements, as its name gives it
/// (`cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1`; cuBLAS's `..._aligna4_alignc4_...` per operand, the
/// least of them): how many consecutive elements each global load may fetch. A kernel of alignment 1 or 2 is the
/// library's fallback for a leading dimension (or base address) that is not a multiple of the full vector (8
/// 16-bit or 4 32-bit elements: 16 bytes).
pub fn gemm_alignment(name: &str) -> Option<u32> {
    let f = function_part(name);
    f.match_indices("_align")
        .filter_map(|(at, key)| {
            let rest = &f[at + key.len()..];
            let rest = rest.strip_prefix(['a', 'b', 'c']).unwrap_or(rest);
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok().filter(|&a: &u32| a > 0)
        })
        .min()
}

/// The GPU architecture a GEMM kernel was compiled for, as `major * 10 + minor`, from the prefix cuBLAS, cuBLASLt
/// and CUTLASS give their kernels: `volta_` (7.0), `turing_` (7.5), `ampere_` (8.0), `sm75_`/`sm80_`/`sm90_`/
/// `sm100_`, `nvjet_sm90_`, `cutlass_75_`/`cutlass_80_` (CUTLASS's instance names carry the architecture they
/// target). None where the name says nothing of it (cuBLASLt's `nvjet_tst_...`, Triton, ATen).
pub fn gemm_arch(name: &str) -> Option<u32> {
    let l = function_part(name).to_ascii_lowercase();
    let named = [("volta_", 70), ("turing_", 75), ("ampere_", 80), ("hopper_", 90), ("blackwell_", 100)];
    if let Some(&(_, arch)) = named.iter().find(|(prefix, _)| l.starts_with(prefix)) {
        return Some(arch);
    }
    // `sm90_xmma_...`, `nvjet_sm90_...`, `cutlass::Kernel<cutlass_80_tensorop_...>`, `cutlass_75_...`.
    let number_after = |key: &str| -> Option<u32> {
        let at = l.find(key)? + key.len();
        let digits: String = l[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok().filter(|&a| (50..=200).contains(&a))
    };
    if l.starts_with("sm") || l.starts_with("nvjet_sm") {
        return number_after("sm");
    }
    number_after("cutlass_")
}

/// A log-softmax (the loss's, not attention's): ATen's `cunn_SoftMaxForward<..., LogSoftMaxForwardEpilogue>` and
/// `softmax_warp_forward`/`softmax_warp_backward` whose fifth template argument (`is_log_softmax`) is true.
pub fn is_log_softmax(name: &str) -> bool {
    let f = function_part(name);
    if f.to_ascii_lowercase().contains("logsoftmax") {
        return true;
    }
    let base = super::kernel_symbols::kernel_base_name(name);
    if base != "softmax_warp_forward" && base != "softmax_warp_backward" {
        return false;
    }
    // `softmax_warp_forward<float, float, float, 10, true, false>(...)`: the template arguments, top level.
    let Some(open) = f.find('<') else { return false };
    let mut depth = 0;
    let mut args = vec![String::new()];
    for ch in f[open + 1..].chars() {
        match ch {
            '<' | '(' => depth += 1,
            '>' | ')' if depth == 0 => break,
            '>' | ')' => depth -= 1,
            ',' if depth == 0 => {
                args.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(last) = args.last_mut() {
            last.push(ch);
        }
    }
    args.get(4).is_some_and(|a| a.trim() == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names from real traces (the shared A100, H100 and V100 Kineto traces, cuflight's own H100 captures and
    /// NVIDIA's libraries' documentation of their kernel names), each with the category it must get.
    #[test]
    fn real_kernel_names_fall_in_their_categories() {
        let cases: &[(&str, Category)] = &[
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", Category::Gemm),
            ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", Category::Gemm),
            ("ampere_sgemm_128x64_nn", Category::Gemm),
            ("volta_sgemm_64x32_sliced1x4_tn", Category::Gemm),
            ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4>(cutlass_80_tensorop_s1688gemm_128x128_16x4_nn_align4::Params)", Category::Gemm),
            ("void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 2, 2, false, false, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>, float, float)", Category::Gemm),
            ("void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, false, false, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, float const*, float*, void*, long, float*, int*)", Category::Gemm),
            ("void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t, int, float const*, long, float*, long, float const*)", Category::Gemm),
            ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", Category::Attention),
            ("void fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::half_t, cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)", Category::Attention),
            ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", Category::Attention),
            ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, bool const*, int, bool)", Category::Softmax),
            ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)", Category::Normalization),
            ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<float, float>(long, long, float const*, float const*, float const*, float const*, float*, float*)", Category::Normalization),
            ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1, true>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)", Category::Normalization),
            ("cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", Category::Convolution),
            ("void cudnn::winograd_nonfused::winogradForwardData4x4<float, float>(cudnn::winograd_nonfused::WinogradDataParams<float, float>)", Category::Convolution),
            ("void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)", Category::Convolution),
            ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, bool*, float*, double, double, double, double, double, bool, double, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, bool*, float*, double, double, double, double, double, bool, double, float*, float*)", Category::Optimizer),
            ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", Category::Communication),
            ("void ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", Category::Communication),
            ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", Category::Communication),
            ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 3, 64, 64>(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)", Category::Copy),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul>)", Category::Copy),
            ("void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)0>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)", Category::Copy),
            ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)", Category::Reduction),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", Category::Elementwise),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", Category::Elementwise),
            ("triton_poi_fused_add_mul_0", Category::Elementwise),
            ("triton_red_fused_native_layer_norm_0", Category::Reduction),
            ("triton_per_fused__softmax_1", Category::Reduction),
            ("triton_tem_fused_mm_0", Category::Gemm),
            ("triton__0d1d2d3d", Category::Other),
            // Activations, in ATen and in user code.
            ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)", Category::Elementwise),
            ("gelu_kernel", Category::Elementwise),
            ("fused_bias_silu_fwd", Category::Elementwise),
            ("swiglu_forward_kernel<__nv_bfloat16>", Category::Elementwise),
            ("my_relu(float*, int)", Category::Elementwise),
            ("tanh_approx", Category::Elementwise),
            ("apply_elu(float const*, float*)", Category::Elementwise),
            ("cudnn_infer_volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", Category::Convolution),
            ("model_update_kernel", Category::Other),
            // AMD's and other libraries' names (TraceLens's MI300X and B200 traces, HTA's).
            ("Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x256x32_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_DTLA0_DTLB0_DTVA0_DTVB0_EPS0_FDSI0_GRPM1_GRVWA4_GRVWB4_GSUAMBSK_GLS0_ISA942_", Category::Gemm),
            ("bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut_schedP2x1x2x3_biasM_bN_tma_tmaOpt_clmp_swiGlu_dynBatch_sm100f", Category::Gemm),
            ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned long, unsigned int**, unsigned long, unsigned long)", Category::Communication),
            ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)", Category::Communication),
            ("triton_poi_fused_all_gather_into_tensor_0", Category::Elementwise),
            ("void at::native::vectorized_elementwise_kernel<4, fbgemm_gpu::_float_to_bfloat16_gpu_kernel(float const*, int, int, unsigned short*)::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)", Category::Elementwise),
            ("void (anonymous namespace)::groupnorm_kernel_dispatch_down<__hip_bfloat16, 1024u>(unsigned int, unsigned int, long, float, bool, __hip_bfloat16 const*)", Category::Normalization),
            ("void at::native::(anonymous namespace)::cuComputeGradGammaBeta<float, float, true>(float const*, float const*, int, int)", Category::Normalization),
            ("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<float const, unsigned int>)", Category::Elementwise),
            ("void split_embedding_codegen_forward_unweighted_kernel<float, float, float, false, long, 1ul, 16ul>(at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)", Category::Other),
        ];
        for (name, want) in cases {
            assert_eq!(kernel_category(name), *want, "{name}");
        }
    }

    /// Names from the shared real traces (A100, H100, V100) and from cuBLAS/CUTLASS builds of each generation.
    #[test]
    fn gemm_alignment_and_architecture_come_from_the_name() {
        for (name, align, arch) in [
            ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1>(cutlass_80_tensorop_s1688gemm_256x64_16x4_tn_align1::Params)", Some(1), Some(80)),
            ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align4>(Params)", Some(4), Some(80)),
            ("cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_32x1_nn_align1", Some(1), Some(75)),
            ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(Params)", Some(1), Some(80)),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas", None, Some(90)),
            ("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NTN", None, Some(90)),
            ("sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize64x128x32", None, Some(80)),
            ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas", Some(4), Some(80)),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_aligna2_alignc8_kernel", Some(2), Some(90)),
            ("ampere_sgemm_128x64_nn", None, Some(80)),
            ("volta_sgemm_64x64_nt", None, Some(70)),
            ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_nn", None, Some(75)),
            ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN", None, None),
            ("triton_tem_fused_mm_0", None, None),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)", None, None),
        ] {
            assert_eq!((gemm_alignment(name), gemm_arch(name)), (align, arch), "{name}");
        }
    }

    #[test]
    fn log_softmax_is_told_from_attentions_softmax() {
        for (name, log) in [
            ("void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, bool const*, int, bool)", true),
            ("void (anonymous namespace)::softmax_warp_backward<float, float, float, 1, false, false>(float*, float const*, float const*, int, int, int, bool const*)", false),
            ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)", true),
            ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, c10::BFloat16, at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(c10::BFloat16*, c10::BFloat16 const*, int)", false),
        ] {
            assert_eq!(is_log_softmax(name), log, "{name}");
        }
    }

    /// Backward kernels from the shared training traces (V100, A100, H100), and none of the inference or HPC
    /// traces' kernels (the H100 Qwen decode, CloverLeaf): a backward pass is what tells training apart.
    #[test]
    fn backward_kernels_are_told_by_their_names() {
        for (name, backward) in [
            ("void wgrad_alg0_engine<float, 128, 5, 5, 3, 3, 3, false, 512>(int, int, int, float const*, int, float*, float const*, kernel_grad_params, unsigned long long, int, float, int, int, int, int)", true),
            ("void cudnn::detail::dgrad_engine<float, 512, 6, 5, 3, 3, 3, false>(int, int, int, float const*, int, float const*, int, float*, kernel_grad_params, unsigned long long, int, unsigned long long, int, float, int, int, int)", true),
            ("void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 512, true, 1>(float, float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*, float)", true),
            ("void at::native::(anonymous namespace)::max_pool_backward_nchw<float, float>(float const*, long const*, int, long, long, long, int, int, int, int, int, int, int, int, int, int, float*)", true),
            ("void (anonymous namespace)::softmax_warp_backward<float, float, float, 1, false, false>(float*, float const*, float const*, int, int, int, bool const*)", true),
            ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, false, false, false, true, true, false>(Flash_bwd_params)", true),
            ("void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", false),
            ("void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 4, 64, 64>(at::native::(anonymous namespace)::OpaqueType<2u>*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<at::native::(anonymous namespace)::OpaqueType<2u>, unsigned int, 64, 64>, at::native::(anonymous namespace)::TensorSizeStride<unsigned int, 4u>, int, unsigned int)", false),
            ("void clover::par_ranged2d_kernel<PdV_kernel(bool, int, int, int, int, double, clover::Buffer2D<double>, clover::Buffer2D<double>, clover::Buffer2D<double>)>(int, int, int, int, PdV_kernel)", false),
            ("triton_poi_fused_add_mul_0", false),
        ] {
            assert_eq!(is_backward_kernel(name), backward, "{name}");
        }
    }
}
