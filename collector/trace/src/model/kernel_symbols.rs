//! Kernel symbols as CUPTI and torch.profiler give them: demangled, without their return type, and cut to the
//! function's own name (nsys's `:base`). What a kernel does, judged by its name, is [`super::kernel_category`]'s.

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

/// The operation an ATen elementwise kernel computes, from what its template arguments name (every one of them is
/// a `vectorized_elementwise_kernel`, `unrolled_elementwise_kernel` or `elementwise_kernel`): the function that
/// launched it (`tanh_kernel_cuda` -> `tanh`, `launch_clamp_scalar` -> `clamp_scalar`), else the innermost
/// operator functor (`BinaryFunctor<..., MulFunctor<float>>` -> `mul`, `CUDAFunctor_add<float>` -> `add`,
/// `FillFunctor<float>` -> `fill`). Other names: their base name ([`kernel_base_name`]).
pub fn elementwise_op(name: &str) -> String {
    let f = function_part(name);
    let base = kernel_base_name(name);
    let Some(args) = f.find('<').map(|at| &f[at..]) else { return base.to_string() };
    let words = || args.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).filter(|w| !w.is_empty());
    let launcher = words().find_map(|w| {
        w.strip_suffix("_kernel_cuda")
            .or_else(|| w.strip_suffix("_kernel_impl"))
            .or_else(|| w.strip_suffix("_kernel"))
            .or_else(|| w.strip_prefix("launch_"))
            // ATen's launch helpers (`gpu_kernel_impl<...>`), not operations.
            .filter(|op| !op.is_empty() && !op.ends_with("elementwise") && *op != "gpu")
    });
    if let Some(op) = launcher {
        return op.to_string();
    }
    const GENERIC: [&str; 4] = ["BinaryFunctor", "AUnaryFunctor", "BUnaryFunctor", "UnaryFunctor"];
    let functor = words().rfind(|w| w.contains("Functor") && !GENERIC.contains(w)).map(|w| {
        // `CUDAFunctor_add`, `CUDAFunctorOnSelf_add`: the operation after the underscore; `MulFunctor`: before.
        match w.rsplit_once("Functor") {
            Some((_, after))
                if after.starts_with("OnSelf_") || after.starts_with("OnOther_") || after.starts_with('_') =>
            {
                after.rsplit('_').next().unwrap_or(w).to_string()
            }
            Some((before, _)) => before.to_ascii_lowercase(),
            None => w.to_string(),
        }
    });
    functor.filter(|op| !op.is_empty()).unwrap_or_else(|| base.to_string())
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

    /// ATen's elementwise kernels as the shared real traces name them: the operation, not the launcher template.
    #[test]
    fn elementwise_kernels_are_named_by_their_operation() {
        for (name, op) in [
            ("void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2> >(int, at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, at::detail::Array<char*, 2>)", "mul"),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)", "add"),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<long>, at::detail::Array<char*, 2> >(int, at::native::CUDAFunctorOnSelf_add<long>, at::detail::Array<char*, 2>)", "add"),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int)", "neg"),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const>(int)", "clamp_scalar"),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, at::native::(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, float, float)::{lambda(float, float)#1}>, at::detail::Array<char*, 3> >(int)", "threshold"),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", "fill"),
            ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&)>(int)", "mul"),
            ("void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int)", "tanh"),
            ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&)::{lambda(int)#1}>(int)", "mul"),
            ("triton_poi_fused_add_mul_0", "triton_poi_fused_add_mul_0"),
        ] {
            assert_eq!(elementwise_op(name), op, "{name}");
        }
    }
}
