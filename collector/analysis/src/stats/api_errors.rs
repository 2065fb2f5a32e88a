//! Calls that returned an error, by process, API and code: `stats --report cuda_api_errors`, and what the report
//! says of a run that failed. Return codes are the agent's (every call's) or an Nsight Systems export's.

use super::ApiErrorRow;
use cuflight_format::{EventKind, RawEvent};
use cuflight_trace::model::cuda_errors::{error_name, ErrorClass};
use cuflight_trace::model::trace::Process;
use std::collections::BTreeMap;

/// Which calls: process key, API name (string id), a runtime call (else a driver call), return code.
type Calls = (u32, u32, bool, u32);

/// Failed calls by [`Calls`]: count, first and last start.
#[derive(Default)]
pub struct ApiErrors {
    counts: BTreeMap<Calls, (u64, u64, u64)>,
}

impl ApiErrors {
    /// Counts `e`, of process `key`, if it is a call that failed.
    pub fn feed(&mut self, key: u32, e: &RawEvent) {
        let call = e.as_api();
        if !call.failed() || e.kind() != Some(EventKind::Api) {
            return;
        }
        let r = self.counts.entry((key, e.name, call.runtime, call.code())).or_insert((0, e.start, e.start));
        (r.0, r.2) = (r.0 + 1, e.start);
    }

    /// The rows of `processes` (key and facts), times after `origin`: failures first (sticky, out of memory,
    /// other), then expected answers; the most frequent first within a class.
    pub fn rows<'p>(&self, processes: impl Iterator<Item = (u32, &'p Process)>, origin: u64) -> Vec<ApiErrorRow> {
        let mut rows = Vec::new();
        for (key, p) in processes {
            for (&(_, name, runtime, code), &(count, first, last)) in
                self.counts.range((key, 0, false, 0)..=(key, u32::MAX, true, u32::MAX))
            {
                let api = p.string(name);
                let Some(class) = ErrorClass::of(api, code) else { continue };
                rows.push(ApiErrorRow {
                    pid: p.info.pid,
                    api: api.to_string(),
                    code,
                    error: error_name(runtime, code),
                    class,
                    count,
                    first_ns: first.saturating_sub(origin),
                    last_ns: last.saturating_sub(origin),
                });
            }
        }
        rows.sort_by(|a, b| {
            (a.class, std::cmp::Reverse(a.count), a.first_ns).cmp(&(b.class, std::cmp::Reverse(b.count), b.first_ns))
        });
        rows
    }
}
