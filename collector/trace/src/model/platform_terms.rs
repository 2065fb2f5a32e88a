//! What the words of a sentence written for CUDA are on another platform: the report's and `stats`' prose about
//! a trace recorded on ROCm ([`super::trace::Process::rocm`]). One rule for every output.

/// Phrases said otherwise on ROCm, replaced before single words ([`in_rocm_terms`]).
const ROCM_PHRASES: [(&str, &str); 10] = [
    ("nvidia-smi topo -m", "rocm-smi --showtopo"),
    ("nvidia-smi", "amd-smi"),
    ("TORCH_CUDA_ARCH_LIST, nvcc -gencode", "PYTORCH_ROCM_ARCH, hipcc --offload-arch"),
    ("cuBLAS, cuDNN", "rocBLAS, hipBLASLt, MIOpen"),
    ("Tensor Cores", "Matrix Cores"),
    ("Tensor Core", "Matrix Core"),
    ("CUDA cores", "vector units"),
    ("MIG slice", "compute partition"),
    ("NVTX", "ROCTX"),
    ("CUPTI", "roctracer"),
];

/// A sentence written in CUDA's terms as it reads for a process recorded on ROCm: HIP's runtime mirrors CUDA's
/// name for name (cudaStreamWaitEvent is hipStreamWaitEvent, cudaGraphLaunch hipGraphLaunch: HIP's API
/// reference), so a `cuda` call becomes a `hip` one and the word CUDA becomes HIP ("CUDA graphs", "outside
/// CUDA"); AMD's tools and units by their names. What PyTorch keeps on ROCm stays: `torch.cuda`, the "cuda"
/// device, environment variables such as PYTORCH_CUDA_ALLOC_CONF (read there too), NCCL's (RCCL reads
/// NCCL_DEBUG).
pub fn in_rocm_terms(text: &str) -> String {
    let mut s = text.to_string();
    for (cuda, rocm) in ROCM_PHRASES {
        if s.contains(cuda) {
            s = s.replace(cuda, rocm);
        }
    }
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    let mut prev: Option<char> = None;
    while let Some(at) = rest.find(['c', 'C']) {
        let (head, tail) = rest.split_at(at);
        out.push_str(head);
        let before = head.chars().next_back().or(prev);
        let starts_word = !before.is_some_and(word_char);
        let after = |n: usize| tail[n..].chars().next();
        let (taken, said) =
            if starts_word && tail.starts_with("cuda") && after(4).is_some_and(|c| c.is_ascii_uppercase()) {
                (4, "hip")
            } else if starts_word && tail.starts_with("CUDA") && !after(4).is_some_and(word_char) {
                (4, "HIP")
            } else {
                (1, &tail[..1])
            };
        out.push_str(said);
        prev = tail[..taken].chars().next_back();
        rest = &tail[taken..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HIP's names for CUDA's calls and words; PyTorch's own names, environment variables and kernel names that
    /// merely contain "cuda" stay.
    #[test]
    fn cuda_words_read_as_hips_on_rocm() {
        let said = in_rocm_terms(
            "replay as CUDA graphs (torch.cuda.graphs); wait with cudaStreamWaitEvent, not \
             torch.cuda.synchronize(); host outside CUDA; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; \
             at::native::CUDAFunctor_add; NVTX ranges; nvidia-smi topo -m; Tensor Cores idle",
        );
        assert_eq!(
            said,
            "replay as HIP graphs (torch.cuda.graphs); wait with hipStreamWaitEvent, not torch.cuda.synchronize(); \
             host outside HIP; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; at::native::CUDAFunctor_add; \
             ROCTX ranges; rocm-smi --showtopo; Matrix Cores idle"
        );
        assert_eq!(in_rocm_terms("CUDA: cudaLaunchKernel."), "HIP: hipLaunchKernel.");
        assert_eq!(in_rocm_terms("GPU idle, host in cudaMemcpyAsync"), "GPU idle, host in hipMemcpyAsync");
    }
}
