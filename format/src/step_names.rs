//! Which range names mark a step: one rule for the agent (which samples whole steps under `record --sample`)
//! and the collector (which finds steps in every trace). Nothing here allocates: the agent asks from inside the
//! program's `nvtxRangePush`.

/// Names that mark a step: torch.profiler's `ProfilerStep#N`, the NVTX names programs give theirs, and a serving
/// engine's iterations ([`iteration_kind`]).
pub fn step_like(name: &str) -> bool {
    ["profilerstep", "step", "iteration", "train_step", "training_step", "iter "]
        .iter()
        .any(|k| starts_with_ignore_case(name, k))
        || iteration_kind(name).is_some()
}

/// What one iteration of a serving engine did: prefill new requests' prompts, decode a token for running ones,
/// or both in one batch (continuous batching).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "file", derive(serde::Serialize), serde(rename_all = "snake_case"))]
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

fn starts_with_ignore_case(name: &str, prefix: &str) -> bool {
    name.len() >= prefix.len() && name.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
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
    let word = |w: &str| {
        starts_with_ignore_case(name, w) && {
            let rest = &name.as_bytes()[w.len()..];
            rest.is_empty() || matches!(rest[0], b' ' | b'[' | b'(' | b':' | b'#')
        }
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
            ("dé", None),
        ];
        for (name, kind) in cases {
            assert_eq!(iteration_kind(name), kind, "{name}");
        }
        assert!(step_like("decode") && step_like("execute_context_0(0)_generation_64(64)"));
        assert!(step_like("ProfilerStep#12") && step_like("TRAIN_STEP") && step_like("Iter 3"));
        assert!(!step_like("prefill_request") && !step_like("forward") && !step_like("st"));
    }
}
