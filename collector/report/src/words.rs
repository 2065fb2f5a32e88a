//! How the report counts things and writes durations in words: a leaf that every part of the report may use (the warm-up's line as much
//! as the findings').

/// A count and its noun, singular for one: "1 call", "3 calls".
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// How often something happened: "once", "3 times".
pub fn times(n: u64) -> String {
    if n == 1 {
        "once".into()
    } else {
        format!("{n} times")
    }
}

/// A fraction (0 to 1) as a percentage in words: whole percents, but one decimal below 10% so that a small share
/// is not "0%" beside a table's "0.2%" (HTA's trace_compare pair: 0.2% GPU utilisation read "0% → 0%").
pub fn percent(fraction: f64) -> String {
    let p = fraction * 100.0;
    if p > 0.0 && p < 9.95 {
        format!("{p:.1}%")
    } else {
        format!("{p:.0}%")
    }
}

/// A duration as the report writes it ("12.34 ms"): the one rule for text, HTML and diff. Under 5 µs, which two
/// decimals of a millisecond would write as nothing ("0.00 ms idle", 50% of a test trace's 40 ns), in µs or ns.
pub fn ms(ns: u64) -> String {
    match ns {
        1..=999 => format!("{ns} ns"),
        1_000..=4_999 => format!("{:.1} µs", ns as f64 / 1e3),
        _ => format!("{:.2} ms", ns as f64 / 1e6),
    }
}

/// A short duration in microseconds ("5.5 µs"); under 0.1 µs in ns.
pub fn format_us(ns: u64) -> String {
    match ns {
        1..=99 => format!("{ns} ns"),
        _ => format!("{:.1} µs", ns as f64 / 1e3),
    }
}

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

    #[test]
    fn durations_too_short_for_milliseconds_keep_their_figure() {
        assert_eq!(ms(0), "0.00 ms");
        assert_eq!(ms(40), "40 ns");
        assert_eq!(ms(3_000), "3.0 µs");
        assert_eq!(ms(5_000), "0.01 ms");
        assert_eq!(ms(12_345_678), "12.35 ms");
        assert_eq!(percent(0.002), "0.2%");
        assert_eq!((format_us(10), format_us(5_500)), ("10 ns".to_string(), "5.5 µs".to_string()));
    }

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
