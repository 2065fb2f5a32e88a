//! What a host range's name or category says it is: a training step, data loading, CPU execution as
//! TensorBoard's profiler plugin counts it. One rule for every analysis and output.

/// Which names mark a step, and a serving engine's iteration kinds: one rule with the agent, which samples whole
/// steps (`record --sample`).
pub use cuflight_format::step_names::{iteration_kind, step_like, IterationKind};

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

/// Where a DataLoader loads its batches, as its annotation names its iterator: torch.profiler's
/// `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__` (`num_workers=0`: on the training thread itself)
/// or `..._MultiProcessingDataLoaderIter.__next__` (worker processes; torch/utils/data/dataloader.py names both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoaderWorkers {
    InProcess,
    Workers,
}

/// The [`LoaderWorkers`] a data-loading range's name says, if it says one.
pub fn loader_workers(name: &str) -> Option<LoaderWorkers> {
    if name.contains("_SingleProcessDataLoaderIter") {
        Some(LoaderWorkers::InProcess)
    } else if name.contains("_MultiProcessingDataLoaderIter") {
        Some(LoaderWorkers::Workers)
    } else {
        None
    }
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

/// Kineto's categories of framework operators (ATen's `aten::*`, autograd's), as against annotations and Python
/// frames: torch.profiler writes `cpu_op`, older releases `operator`.
pub fn is_operator_category(category: &str) -> bool {
    matches!(category, "cpu_op" | "operator")
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
    fn a_dataloaders_annotation_says_where_it_loads() {
        let single = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__";
        let multi = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__";
        assert_eq!(loader_workers(single), Some(LoaderWorkers::InProcess));
        assert_eq!(loader_workers(multi), Some(LoaderWorkers::Workers));
        assert!(is_loader_range(single) && is_loader_range(multi));
        assert_eq!(loader_workers("data_load"), None);
        assert_eq!(loader_workers("enumerate(DataPipe)#ShufflerIterDataPipe"), None);
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
