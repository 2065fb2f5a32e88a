//! Kernels torch.compile's Inductor generated with Triton, told by their names: Inductor names each kernel
//! `triton_<kind>_fused_<ops>_<index>` (PyTorch 2.1 and later), where the kind is `poi` (pointwise), `red`
//! (reduction), `per` (persistent reduction), `tem` (template: a GEMM or convolution) or `for` (foreach). PyTorch
//! 2.0 named them `triton__<index>` with Triton's signature after (`triton__0d1d2d`). The one reading of those
//! names: the kernel categories, the Triton table and the report's "the program is compiled" all ask here.

/// Whether `name` is a kernel torch.compile generated (any Inductor naming, old or new).
pub fn is_inductor_kernel(name: &str) -> bool {
    name.starts_with("triton_")
}

/// The kind of kernel an Inductor name gives, and the rest of the name after it (the fused operations and the
/// index); None for other kernels and for Inductor names without a kind (PyTorch 2.0's `triton__0d1d2d`).
pub fn kind_of(name: &str) -> Option<(Kind, &str)> {
    let rest = name.strip_prefix("triton_")?;
    let (kind, rest) = rest.split_once('_').unwrap_or((rest, ""));
    let kind = match kind {
        "poi" => Kind::Pointwise,
        "red" => Kind::Reduction,
        "per" => Kind::PersistentReduction,
        "tem" => Kind::Template,
        "for" => Kind::Foreach,
        _ => return None,
    };
    Some((kind, rest))
}

/// What an Inductor kernel computes, as its name says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pointwise,
    Reduction,
    PersistentReduction,
    /// A GEMM or convolution from a template.
    Template,
    Foreach,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Pointwise => "pointwise",
            Kind::Reduction => "reduction",
            Kind::PersistentReduction => "persistent reduction",
            Kind::Template => "template",
            Kind::Foreach => "foreach",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inductor_names_old_and_new() {
        assert_eq!(kind_of("triton_poi_fused_add_mul_0"), Some((Kind::Pointwise, "fused_add_mul_0")));
        assert_eq!(kind_of("triton_tem_fused_mm_0").map(|k| k.0), Some(Kind::Template));
        assert_eq!(kind_of("triton_per_fused__softmax_1").map(|k| k.0), Some(Kind::PersistentReduction));
        assert_eq!(kind_of("triton__0d1d2d3d"), None);
        assert!(is_inductor_kernel("triton__0d1d2d3d") && is_inductor_kernel("triton_red_fused_sum_2"));
        assert!(!is_inductor_kernel("fused_moe_kernel") && kind_of("ampere_sgemm_128x64_nn").is_none());
    }
}
