//! `python_sync_sum`: the calls that wait for the GPU, copy or allocate, by the Python source line that made
//! them (the innermost frame of the program's own code; see [`cuflight_trace::model::pystacks`]).

use super::dist::Dist;
use cuflight_format::calls::{CallEffects, PythonStacks};
use cuflight_trace::model::pystacks::{blamed_frame, PyFrame, StackJoin};
use cuflight_trace::model::trace::Process;
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// One source line's synchronising calls.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema, PartialEq)]
pub struct PythonSyncRow {
    /// The Python source file of the innermost frame.
    pub file: String,
    /// Its line.
    pub line: u32,
    /// Its function.
    pub function: String,
    #[serde(flatten)]
    pub time: super::Durations,
    /// The calls made there, most frequent first ("cudaMemcpy x40, cudaDeviceSynchronize x2").
    pub calls: String,
    /// Share of the table's total time, in percent.
    pub percent: f64,
}

#[derive(Default)]
struct LineAcc {
    time: Dist,
    calls: BTreeMap<u32, u64>,
}

#[derive(Default)]
pub struct PythonAcc {
    joins: FxHashMap<u32, StackJoin>,
    lines: FxHashMap<(u32, PyFrame), LineAcc>,
    /// Whether an API name (per process and id) has its every call's stack read.
    every: FxHashMap<(u32, u32), bool>,
}

impl PythonAcc {
    pub fn feed(&mut self, key: u32, p: &Process, e: &cuflight_format::RawEvent) {
        let (lines, every) = (&mut self.lines, &mut self.every);
        let join = self.joins.entry(key).or_default();
        join.feed(e, |call, frames| add(lines, every, key, p, call, frames));
    }

    pub fn finish(self, processes: &BTreeMap<u32, Process>) -> Vec<PythonSyncRow> {
        // (file, line, function) -> time and calls by name, across processes.
        type Merged = HashMap<(String, u32, String), (Dist, BTreeMap<String, u64>)>;
        let mut merged: Merged = HashMap::new();
        for ((key, f), acc) in self.lines {
            let Some(p) = processes.get(&key) else { continue };
            let row = merged.entry((p.string(f.file).to_string(), f.line, p.string(f.func).to_string())).or_default();
            row.0.merge(&acc.time);
            for (name, n) in acc.calls {
                *row.1.entry(p.string(name).to_string()).or_default() += n;
            }
        }
        let total: u64 = merged.values().map(|(d, _)| d.total).sum();
        let mut rows: Vec<PythonSyncRow> = merged
            .into_iter()
            .map(|((file, line, function), (d, calls))| {
                let mut calls: Vec<(String, u64)> = calls.into_iter().collect();
                calls.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                PythonSyncRow {
                    file,
                    line,
                    function,
                    time: super::Durations::of(&d),
                    calls: calls.iter().map(|(n, c)| format!("{n} x{c}")).collect::<Vec<_>>().join(", "),
                    percent: if total == 0 { 0.0 } else { d.total as f64 * 100.0 / total as f64 },
                }
            })
            .collect();
        rows.sort_by(|a, b| {
            b.time.total_ns.cmp(&a.time.total_ns).then_with(|| (&a.file, a.line).cmp(&(&b.file, b.line)))
        });
        rows
    }
}

fn add(
    lines: &mut FxHashMap<(u32, PyFrame), LineAcc>,
    every: &mut FxHashMap<(u32, u32), bool>,
    key: u32,
    p: &Process,
    call: &cuflight_format::RawEvent,
    frames: &[PyFrame],
) {
    let waits = *every
        .entry((key, call.name))
        .or_insert_with(|| CallEffects::of(p.string(call.name)).python_stacks() == PythonStacks::Every);
    let Some(f) = waits.then(|| blamed_frame(p, frames)).flatten() else { return };
    let acc = lines.entry((key, *f)).or_default();
    acc.time.add(call.duration());
    *acc.calls.entry(call.name).or_default() += 1;
}
