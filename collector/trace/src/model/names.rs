//! Human names for CUPTI enumerations and kernel symbols that appear in events.

use cuflight_format::view::{CopyKind, MemoryKind};

/// The readable form of a mangled (Itanium C++ ABI, `_Z...`) kernel name, as CUPTI reports them; None for names
/// that are not mangled (C kernels, `extern "C"` cuBLAS kernels such as `sm90_xmma_gemm_...`, Kineto's names,
/// which torch.profiler already demangled) or that do not demangle.
pub fn demangle(name: &str) -> Option<String> {
    if !name.starts_with("_Z") {
        return None;
    }
    let sym = cpp_demangle::Symbol::new(name.as_bytes()).ok()?;
    let opts = cpp_demangle::DemangleOptions::default();
    sym.demangle(&opts).ok().filter(|s| !s.is_empty())
}

/// The function a kernel name names, without a leading return type (`void at::native::k<4>(int)` ->
/// `at::native::k<4>(int)`), so that classifiers match names with and without one.
pub fn function_part(name: &str) -> &str {
    name.strip_prefix("void ").unwrap_or(name)
}

/// A kernel's base name, as nsys's reports give it with `:base` (its `shortName`): the function's own name, without
/// return type, namespaces, template arguments or parameters (`void at::native::(anonymous
/// namespace)::CatArrayBatchedCopy<float, 4>(...)` -> `CatArrayBatchedCopy`); a name that is not a C++ signature
/// (`sm90_xmma_gemm_...`, `triton_poi_fused_0`) is its own base.
pub fn kernel_base_name(name: &str) -> &str {
    let s = function_part(name.trim());
    // The qualified name ends at the parameter list: the first top-level `(` that is not a scope (`(anonymous
    // namespace)::`). Brackets nest: template arguments may hold lambdas `[lambda(int) (instance 1)]`.
    let bytes = s.as_bytes();
    let (mut depth, mut end, mut i) = (0i32, s.len(), 0);
    while i < bytes.len() {
        match bytes[i] {
            b'<' | b'[' => depth += 1,
            b'>' | b']' => depth -= 1,
            b'(' if depth == 0 => {
                let close = matching_paren(bytes, i);
                if s[close..].starts_with(")::") {
                    i = close + 3;
                    continue;
                }
                end = i;
                break;
            }
            b'(' => depth += 1,
            b')' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    let qualified = &s[..end];
    // The last top-level `::` scope, then its template arguments off.
    let (mut depth, mut start) = (0i32, 0);
    let q = qualified.as_bytes();
    for i in 0..q.len() {
        match q[i] {
            b'<' | b'[' | b'(' => depth += 1,
            b'>' | b']' | b')' => depth -= 1,
            b':' if depth == 0 && i > 0 && q[i - 1] == b':' => start = i + 1,
            _ => {}
        }
    }
    let last = &qualified[start..];
    let base = last.find('<').map_or(last, |t| &last[..t]).trim();
    if base.is_empty() {
        name
    } else {
        base
    }
}

/// The index of the `)` that closes the `(` at `open` (the end of the text when unbalanced).
fn matching_paren(bytes: &[u8], open: usize) -> usize {
    let mut depth = 0;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        match b {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    bytes.len()
}

/// CUPTI memcpy kind → short name.
pub fn memcpy_kind(k: CopyKind) -> &'static str {
    match k.0 {
        1 => "HtoD",
        2 => "DtoH",
        3 => "HtoA",
        4 => "AtoH",
        5 => "AtoA",
        6 => "AtoD",
        7 => "DtoA",
        8 => "DtoD",
        9 => "HtoH",
        10 => "PtoP",
        _ => "unknown",
    }
}

/// CUPTI memory kind → short name.
pub fn memory_kind(k: MemoryKind) -> &'static str {
    match k.0 {
        1 => "pageable",
        2 => "pinned",
        3 => "device",
        4 => "array",
        5 => "managed",
        6 => "device_static",
        7 => "managed_static",
        _ => "unknown",
    }
}

/// CUPTI memory kind → the label `nsys stats` prints (its ENUM_CUDA_MEM_KIND).
pub fn memory_kind_label(k: MemoryKind) -> &'static str {
    match k.0 {
        1 => "Pageable",
        2 => "Pinned",
        3 => "Device",
        4 => "Array",
        5 => "Managed",
        6 => "Device Static",
        7 => "Managed Static",
        _ => "Unknown",
    }
}

/// Name (ours, or Kineto's `cuda_sync_kind`) → CUPTI synchronization type.
pub fn sync_kind_from_name(name: &str) -> u8 {
    (1..=4).find(|&k| sync_kind(k) == name).unwrap_or(match name {
        "Event Sync" => 1,
        "Stream Wait Event" => 2,
        "Stream Sync" => 3,
        "Context Sync" | "Device Sync" => 4,
        _ => 0,
    })
}

/// CUPTI synchronization type → name.
pub fn sync_kind(k: u8) -> &'static str {
    match k {
        1 => "cudaEventSynchronize",
        2 => "cudaStreamWaitEvent",
        3 => "cudaStreamSynchronize",
        4 => "cudaDeviceSynchronize",
        _ => "unknown",
    }
}

/// FNV-1a: a hash that stays the same across runs and builds (for ids derived from names).
pub fn stable_hash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

// Kernel and range classifiers: the one place that judges a name, for every analysis and output.

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

pub fn step_like(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    ["profilerstep", "step", "iteration", "train_step", "training_step", "iter "].iter().any(|k| l.starts_with(k))
}

/// NCCL's kernels, by the names CUPTI reports once demangled (`ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`,
/// `ncclKernel_...`) or torch.profiler's (which may carry the return type: `void ncclKernel_...`).
pub fn is_comm_kernel(name: &str) -> bool {
    let name = function_part(name);
    name.starts_with("nccl") && name.contains("Kernel") || name.starts_with("ncclDev")
}

/// Annotations that mark data loading (torch's `enumerate(DataLoader)#...__next__`, common NVTX names).
pub fn is_loader_range(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    ["dataloader", "data_load", "data load", "load_batch", "next_batch", "fetch_batch"].iter().any(|k| l.contains(k))
}

/// Whether an imported host range of this category is CPU execution in the step breakdown, as TensorBoard's
/// profiler plugin counts it (ProfileRole.CpuOp): operators (`cpu_op`, `operator`) and `python` events. Its
/// parser drops user annotations other than ProfilerStep and NCCL/Gloo ones (torch-tb-profiler 0.4.3,
/// trace.py's create_trace_event), and ignores Kineto's whole-trace span ("Trace"), Python stack frames
/// (`python_function`) and module events. Other names are NVTX domains (cuflight's own exports), which count:
/// NVTX ranges are what native captures have instead of operators.
pub fn cpu_exec_category(category: &str) -> bool {
    !matches!(
        category,
        "Trace" | "trace" | "python_function" | "Module" | "pl_profile" | "pl_module" | "memory" | "user_annotation"
    )
}

/// Kineto's host categories that TensorBoard reads as operators or annotations.
pub fn is_kineto_host_category(category: &str) -> bool {
    matches!(category, "cpu_op" | "operator" | "user_annotation" | "python")
}

/// TensorBoard's DataLoader role: `enumerate(DataLoader)#...__next__` and `enumerate(DataPipe)#...`.
pub fn is_tensorboard_loader(name: &str) -> bool {
    name.starts_with("enumerate(DataLoader)#") && name.ends_with(".__next__")
        || name.starts_with("enumerate(DataPipe)#")
}

/// A copy kind as `nsys stats` names the operation ("[CUDA memcpy Host-to-Device]").
pub fn memcpy_operation(kind: CopyKind) -> &'static str {
    match memcpy_kind(kind) {
        "HtoD" => "[CUDA memcpy Host-to-Device]",
        "DtoH" => "[CUDA memcpy Device-to-Host]",
        "DtoD" => "[CUDA memcpy Device-to-Device]",
        "HtoH" => "[CUDA memcpy Host-to-Host]",
        "PtoP" => "[CUDA memcpy Peer-to-Peer]",
        "HtoA" => "[CUDA memcpy Host-to-Array]",
        "AtoH" => "[CUDA memcpy Array-to-Host]",
        "AtoA" => "[CUDA memcpy Array-to-Array]",
        "AtoD" => "[CUDA memcpy Array-to-Device]",
        "DtoA" => "[CUDA memcpy Device-to-Array]",
        _ => "[CUDA memcpy Unknown]",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names as CUPTI demangles them, nsys's shortName beside each (the shared Nsight Systems export gives
    /// `par_ranged2d_kernel` for the first), and names that are no signature.
    #[test]
    fn kernel_base_names_are_the_functions_own() {
        for (name, base) in [
            (
                "void clover::par_ranged2d_kernel<build_field(global_variables &)::[lambda(int, int) (instance 1)]>(clover::Range2d, T1)",
                "par_ranged2d_kernel",
            ),
            (
                "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 4, 64, 64>(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 64, 64>, int)",
                "CatArrayBatchedCopy",
            ),
            (
                "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})",
                "elementwise_kernel",
            ),
            ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 128, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)", "flash_fwd_kernel"),
            ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"),
            ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
            ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
            ("saxpy(int, float, float const*, float*)", "saxpy"),
            ("", ""),
            ("(", "("),
        ] {
            assert_eq!(kernel_base_name(name), base, "{name}");
        }
    }

    #[test]
    fn real_kernel_names_demangle() {
        // Symbols as nvcc registers them for NCCL, PyTorch and CUTLASS kernels and a plain CUDA C++ kernel.
        for (mangled, readable) in [
            ("_Z6vecAddPfS_S_i", "vecAdd(float*, float*, float*, int)"),
            (
                "_Z39ncclDevKernel_AllReduce_Sum_f32_RING_LL24ncclDevKernelArgsStorageILm4096EE",
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<(unsigned long)4096>)",
            ),
            (
                "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_",
                "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)",
            ),
        ] {
            assert_eq!(demangle(mangled).as_deref(), Some(readable), "{mangled}");
        }
        assert_eq!(demangle("sm90_xmma_gemm_f16f16_f32_tn_n"), None);
        assert_eq!(demangle("_Znot-a-symbol"), None);
        assert_eq!(function_part("void at::native::k<4>(int)"), "at::native::k<4>(int)");
    }
}
