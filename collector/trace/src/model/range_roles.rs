//! What a host range's name or category says it is: a training step, data loading, CPU execution as
//! TensorBoard's profiler plugin counts it. One rule for every analysis and output.

/// Names that mark a step: torch.profiler's `ProfilerStep#N`, the NVTX names programs give theirs, and a serving
/// engine's iterations ([`iteration_kind`]).
pub fn step_like(name: &str) -> bool {
    let l = name.to_ascii_lowercase();
    ["profilerstep", "step", "iteration", "train_step", "training_step", "iter "].iter().any(|k| l.starts_with(k))
        || iteration_kind(name).is_some()
}

/// What one iteration of a serving engine did: prefill new requests' prompts, decode a token for running ones,
/// or both in one batch (continuous batching).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IterationKind {
    Prefill,
    Decode,
    Mixed,
}

impl IterationKind {
    pub fn label(self) -> &'static str {
        match self {
            IterationKind::Prefill => "prefill",
            IterationKind::Decode => "decode",
            IterationKind::Mixed => "mixed",
        }
    }
}

/// The kind of a serving engine's iteration from the range it annotates it with, where its name says:
/// - plain `prefill`, `decode`, `mixed` (any case; what tests/gpu/batching_server.py writes, and the words a
///   hand-annotated engine uses), or followed by ` `, `[`, `(`, `:` or `#` and more;
/// - SGLang's `step[EXTEND ...]`, `step[DECODE ...]`, `step[MIXED ...]` (EXTEND is its prefill) and ATOM's
///   `prefill[bs=...]`, `decode[bs=...]`;
/// - vLLM's `execute_context_N(T)_generation_M(G)` and `execute_T_context_N(...)_generation_M(...)`: N requests
///   in prefill and M decoding, so M = 0 is a prefill, N = 0 a decode and both a mixed batch.
///
/// The engine's formats are as TraceLens documents them (AMD-AGI/TraceLens, TraceUtils/annotation_utils.py,
/// read for the facts). A name that merely contains a word (`prefill_request`, `decode_tokens`) is not an
/// iteration: nested ranges of that kind are parts of one.
pub fn iteration_kind(name: &str) -> Option<IterationKind> {
    let lower = name.to_ascii_lowercase();
    let word = |w: &str| {
        lower.strip_prefix(w).is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '[', '(', ':', '#']))
    };
    for (w, kind) in
        [("prefill", IterationKind::Prefill), ("decode", IterationKind::Decode), ("mixed", IterationKind::Mixed)]
    {
        if word(w) {
            return Some(kind);
        }
    }
    if let Some(rest) = name.strip_prefix("step[") {
        let mode = rest.split([' ', ']']).next().unwrap_or("");
        return match mode {
            "EXTEND" | "PREFILL" => Some(IterationKind::Prefill),
            "DECODE" => Some(IterationKind::Decode),
            "MIXED" => Some(IterationKind::Mixed),
            _ => None,
        };
    }
    let rest = name.strip_prefix("execute_")?;
    let count = |key: &str| -> Option<u64> {
        let at = rest.find(key)? + key.len();
        let digits: &str = &rest[at..];
        let end = digits.find(|c: char| !c.is_ascii_digit()).unwrap_or(digits.len());
        digits[..end].parse().ok()
    };
    match (count("context_")?, count("generation_")?) {
        (0, 0) => None,
        (_, 0) => Some(IterationKind::Prefill),
        (0, _) => Some(IterationKind::Decode),
        _ => Some(IterationKind::Mixed),
    }
}

/// Ranges that annotate one request a server handles, from its admission to its last token: `request` (any
/// case), alone or followed by a separator and an id (`request 17`, `request#17`, `request:abc`, `request-17`,
/// `request_17`). Such ranges overlap one another and the iterations, so they are NVTX start/end ranges.
pub fn is_request_range(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower.strip_prefix("request").is_some_and(|rest| {
        rest.is_empty() || rest.starts_with([' ', '#', ':', '-', '_', '[', '(']) && !rest.starts_with("_queue")
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_engines_name_their_iterations() {
        use IterationKind::*;
        let cases = [
            ("prefill", Some(Prefill)),
            ("Decode", Some(Decode)),
            ("mixed", Some(Mixed)),
            ("decode[bs=117/128 tok=117 d=117]", Some(Decode)),
            ("prefill[bs=2 tok=14721 ctx=[7803, 6918]]", Some(Prefill)),
            ("step[EXTEND bs=2 toks=14721]", Some(Prefill)),
            ("step[DECODE bs=64]", Some(Decode)),
            ("step[MIXED bs=2 c=1 g=1]", Some(Mixed)),
            ("execute_context_2(14721)_generation_0(0)", Some(Prefill)),
            ("execute_context_0(0)_generation_64(64)", Some(Decode)),
            ("execute_context_2(6144)_generation_3(3)", Some(Mixed)),
            ("execute_32_context_0(sq0sk0sqsq0sqsk0)_generation_32(sq32sk8sqsq32sqsk256)", Some(Decode)),
            ("prefill_request", None),
            ("decoder_layer", None),
            ("decode_tokens", None),
            ("step", None),
            ("execute_model", None),
        ];
        for (name, kind) in cases {
            assert_eq!(iteration_kind(name), kind, "{name}");
        }
        assert!(step_like("decode") && step_like("execute_context_0(0)_generation_64(64)"));
        assert!(!step_like("prefill_request"));
    }

    #[test]
    fn request_ranges_are_told_by_their_name() {
        for yes in ["request", "Request 17", "request#3", "request:abc", "request-17", "request_17"] {
            assert!(is_request_range(yes), "{yes}");
        }
        for no in ["requests", "request_queue", "requested", "prefill_request", "http"] {
            assert!(!is_request_range(no), "{no}");
        }
    }
}
