//! The kind of each step of a serving engine, one rule for the iterations table ([`super::iterations`]) and
//! the warm-up rule ([`super::warmup`]), which must compare a prefill with prefills, not with decodes.
//!
//! An engine that names its iterations (NVTX or annotation ranges, [`range_roles::iteration_kind`]) gives
//! them their kinds. Where it names none, what a step launches tells: model servers replay their decode
//! steps as CUDA graphs and run prefill eagerly, so a step replays a graph, launches kernels one by one, or
//! both. That split counts only where it tells steps apart (two kinds or more) and some step replays a graph;
//! a training loop that launches alike in every step has no kinds.

use cuflight_trace::model::range_roles::{self, IterationKind};
use serde::Serialize;

/// How the kinds were told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToldBy {
    /// The engine's own names for its iterations.
    Names,
    /// Whether a step replays a CUDA graph: the engine names nothing.
    Launches,
}

/// What one step launched: CUDA graph replays, and kernels launched one by one (not by a graph).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Launched {
    pub graph_replays: u64,
    pub eager_kernels: u64,
}

impl Launched {
    pub(crate) fn label(self) -> &'static str {
        match (self.graph_replays > 0, self.eager_kernels > 0) {
            (true, false) => "graph replay",
            (true, true) => "graph replay + eager",
            (false, true) => "eager",
            (false, false) => "no kernels",
        }
    }
}

/// The kind of each step (its name, and what it launched where that is known; None where it is not), by
/// name or else by launches; None where neither tells.
pub fn kinds<'a>(
    names: impl ExactSizeIterator<Item = &'a str>,
    launched: Option<&[Launched]>,
) -> Option<(ToldBy, Vec<&'static str>)> {
    let named: Vec<Option<IterationKind>> = names.map(range_roles::iteration_kind).collect();
    if named.iter().any(Option::is_some) {
        return Some((ToldBy::Names, named.iter().map(|k| k.map_or("other", IterationKind::label)).collect()));
    }
    let launched = launched?;
    let labels: Vec<&'static str> = launched.iter().map(|l| l.label()).collect();
    let distinct: std::collections::BTreeSet<&str> = labels.iter().copied().collect();
    (distinct.len() >= 2 && launched.iter().any(|l| l.graph_replays > 0)).then_some((ToldBy::Launches, labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launched(v: &[(u64, u64)]) -> Vec<Launched> {
        v.iter().map(|&(graph_replays, eager_kernels)| Launched { graph_replays, eager_kernels }).collect()
    }

    #[test]
    fn names_tell_first_then_launches_where_they_differ_and_a_graph_replays() {
        let names = ["prefill", "step", "decode"];
        let (by, k) = kinds(names.into_iter(), None).unwrap();
        assert_eq!((by, k), (ToldBy::Names, vec!["prefill", "other", "decode"]));
        let names = ["step"; 3];
        let l = launched(&[(0, 8), (1, 0), (1, 8)]);
        let (by, k) = kinds(names.into_iter(), Some(&l)).unwrap();
        assert_eq!((by, k), (ToldBy::Launches, vec!["eager", "graph replay", "graph replay + eager"]));
        assert!(kinds(names.into_iter(), None).is_none());
        // Alike in every step, or eager with steps that launch nothing: no kinds.
        assert!(kinds(names.into_iter(), Some(&launched(&[(1, 2); 3]))).is_none());
        assert!(kinds(names.into_iter(), Some(&launched(&[(0, 8), (0, 0), (0, 8)]))).is_none());
    }
}
