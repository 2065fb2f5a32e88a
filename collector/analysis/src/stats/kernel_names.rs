//! How kernel tables name kernels, as nsys's kernel reports take it after a colon (`cuda_gpu_kern_sum:base`):
//! the demangled signature (the default), the base name (the function's own name, so that the template
//! instances of `elementwise_kernel` share a row), or the mangled symbol where the trace kept it (CUPTI's names:
//! a recording; imports hold demangled names only, which stay).

use cuflight_trace::model::kernel_symbols::kernel_base_name;
use cuflight_trace::model::trace::Process;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum KernelNames {
    #[default]
    Full,
    Base,
    Mangled,
}

impl KernelNames {
    /// The argument after a report's colon.
    pub fn parse(arg: &str) -> Result<KernelNames, String> {
        match arg {
            "base" => Ok(KernelNames::Base),
            "mangled" => Ok(KernelNames::Mangled),
            other => Err(format!("kernel reports take ':base' or ':mangled', not ':{other}'")),
        }
    }

    /// The suffix `--report` writes for this form ("" for the default).
    pub fn suffix(self) -> &'static str {
        match self {
            KernelNames::Full => "",
            KernelNames::Base => ":base",
            KernelNames::Mangled => ":mangled",
        }
    }

    /// The name of kernel name `id` of process `p` in this form.
    pub fn of(self, p: &Process, id: u32) -> &str {
        match self {
            KernelNames::Full => p.string(id),
            KernelNames::Base => kernel_base_name(p.string(id)),
            KernelNames::Mangled => p.mangled.get(&id).map_or_else(|| p.string(id), String::as_str),
        }
    }
}
