//! The top level of a Chrome/Kineto trace document: `traceEvents` streamed element by element to the importer, the
//! few other members cuflight reads parsed as small values, everything else skipped unbuilt.
//!
//! Besides `deviceProperties` and `distributedInfo`, what torch.profiler writes about the run: its CUDA driver,
//! runtime and CUPTI versions (`cuda_driver_version`, 12090 = 12.9; `cuda_runtime_version`; `cupti_version`,
//! `cuptiGetVersion`'s number) or, on ROCm, its HIP runtime's (`hip_runtime_version`; `roctracer_version`), and, since
//! Kineto made timestamps relative to keep them exact in a double, `baseTimeNanoseconds`: the epoch ns each `ts`
//! counts from (libkineto's ChromeTraceBaseTime, the start of the current 7,889,238 s interval; HTA adds it to
//! `ts` the same way). Older traces write epoch microseconds in `ts` itself. Kineto writes these after the events,
//! so they are applied to the imported processes at the end.

use super::json_scan::{self, Scan, Window, WindowError};
use super::kineto_event::{parse_event, Event};
use crate::model::trace::Trace;
use serde_json::Value;

/// The top-level members cuflight reads besides the events.
#[derive(Default)]
pub struct TopLevel {
    pub trace_events: bool,
    pub device_properties: Option<Value>,
    pub distributed_info: Option<Value>,
    /// `baseTimeNanoseconds`: what relative `ts` values count from.
    pub base_time_ns: Option<u64>,
    pub cuda_driver_version: Option<u32>,
    pub cuda_runtime_version: Option<u32>,
    pub cupti_version: Option<u32>,
    /// A host name, where the trace's metadata gives one (`hostname`, `host_name`: added by the recording job).
    pub host: Option<String>,
    /// The HIP runtime's version (`hip_runtime_version`, HIP_VERSION's form: 60443483 = 6.4.43483) in a trace
    /// torch.profiler recorded on ROCm.
    pub hip_runtime_version: Option<u32>,
    /// `hip_runtime_version` or `roctracer_version` present ([`TopLevel::recorded_on_rocm`] says it whole).
    pub rocm: bool,
    /// Another tool's JSON, told by a member of its own, in words ([`TopLevel::not_a_trace`]).
    pub other_format: Option<&'static str>,
}

/// Top-level members that name another tool's JSON document, and what it is.
const OTHER_FORMATS: [(&[u8], &str); 2] = [
    (
        b"rocprofiler-sdk-tool",
        "a rocprofiler-sdk trace (rocprofv3 --output-format json), which cuflight does not read: profile the \
         program with torch.profiler (its Kineto JSON is read, ROCm's included)",
    ),
    (
        b"nodes",
        "a PyTorch execution trace (ExecutionTraceObserver: operators and their inputs, no GPU timing): read the \
         Kineto trace torch.profiler writes beside it",
    ),
];

/// Members read as values (the rest are skipped); each is small.
const READ: [&[u8]; 11] = [
    b"deviceProperties",
    b"hip_runtime_version",
    b"roctracer_version",
    b"distributedInfo",
    b"baseTimeNanoseconds",
    b"cuda_driver_version",
    b"cuda_runtime_version",
    b"cupti_version",
    b"hostname",
    b"host_name",
    b"hostName",
];

/// Epoch ns from 2001-09-09 on: a time at or past it is a wall-clock time (the rule the job clock uses too).
const EPOCH_LIKE_NS: u64 = 1_000_000_000_000_000_000;

impl TopLevel {
    fn set(&mut self, key: &[u8], value: Value) {
        let small = |v: &Value| v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|&n| n > 0);
        match key {
            b"deviceProperties" => self.device_properties = Some(value),
            b"distributedInfo" => self.distributed_info = Some(value),
            b"baseTimeNanoseconds" => self.base_time_ns = value.as_u64(),
            b"cuda_driver_version" => self.cuda_driver_version = small(&value),
            b"cuda_runtime_version" => self.cuda_runtime_version = small(&value),
            b"cupti_version" => self.cupti_version = small(&value),
            b"hip_runtime_version" => {
                self.hip_runtime_version = small(&value);
                self.rocm = true;
            }
            b"roctracer_version" => self.rocm = true,
            _ => {
                // A host name as it may appear in file names: bounded, printable, never empty.
                let name = value.as_str().map(str::trim).filter(|s| !s.is_empty() && s.len() <= 255);
                if let Some(name) = name.filter(|s| !s.chars().any(char::is_control)) {
                    self.host.get_or_insert_with(|| name.to_string());
                }
            }
        }
    }

    /// The trace was recorded on ROCm: it says so (`hip_runtime_version`, `roctracer_version`: torch.profiler
    /// writes them there, though not every release: HTA's MI250 test trace has neither), or its devices run
    /// 64-wide wavefronts (`warpSize` 64: AMD's CDNA GPUs; NVIDIA's warps are 32 wide). Its GPU ops may number
    /// devices differently from `deviceProperties` ([`super::kineto_devices::rocm_ordinals`]), and its words are
    /// HIP's, not CUDA's.
    pub fn recorded_on_rocm(&self) -> bool {
        let wavefront_64 = |d: &Value| d.get("warpSize").and_then(Value::as_u64) == Some(64);
        self.rocm || matches!(&self.device_properties, Some(Value::Array(ds)) if ds.iter().any(wavefront_64))
    }

    /// Why a document without `traceEvents` is no trace cuflight reads, in one line.
    pub fn not_a_trace(&self) -> String {
        match self.other_format {
            Some(what) => format!("JSON has no traceEvents: {what}"),
            None => "JSON has no traceEvents: not a Chrome/Kineto trace".into(),
        }
    }

    /// The CUDA driver version the devices carry (their events' `stream`, as the agent writes it); 0 unknown.
    pub fn driver_version(&self) -> u32 {
        self.cuda_driver_version.unwrap_or(0)
    }

    /// Puts what the document says of the run on every imported process: host, CUPTI version, world size, the
    /// epoch its times count from and, where the first timestamp reads as a wall-clock time, when the trace started
    /// (`first_ts` in ns as written).
    pub fn apply(&self, trace: &mut Trace, first_ts: Option<u64>) {
        let started = first_ts
            .and_then(|t| t.checked_add(self.base_time_ns.unwrap_or(0)))
            .filter(|&t| t >= EPOCH_LIKE_NS)
            .unwrap_or(0);
        let world = self.distributed_info.as_ref().and_then(|d| d.get("world_size")).and_then(Value::as_u64);
        for p in trace.processes.values_mut() {
            if p.info.host.is_empty() {
                p.info.host = self.host.clone().unwrap_or_default();
            }
            if p.info.cupti_version == 0 {
                p.info.cupti_version = self.cupti_version.unwrap_or(0);
            }
            if p.info.start_realtime_ns == 0 {
                p.info.start_realtime_ns = started;
            }
            if p.info.world_size == 0 {
                p.info.world_size = world.and_then(|w| u32::try_from(w).ok()).unwrap_or(0);
            }
            // Below 2^61 ns (year 2043 + 30): a base plus any time stays within what the job clock handles.
            p.epoch_base_ns = self.base_time_ns.filter(|&b| b < 1 << 61).unwrap_or(0);
            p.cuda_runtime_version = self.cuda_runtime_version.unwrap_or(0);
            p.hip_runtime_version = self.hip_runtime_version.unwrap_or(0);
            p.rocm = self.recorded_on_rocm();
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("{0}")]
    Window(#[from] WindowError),
    #[error("event {index}: {source}")]
    Event { index: u64, source: WindowError },
    #[error("{0}: {1}")]
    Member(String, serde_json::Error),
}

/// Walks the top-level object: each `traceEvents` element goes to `add` as it is parsed, the members in [`READ`]
/// are parsed as values, and the rest is skipped.
pub fn scan<R: std::io::Read>(w: &mut Window<R>, add: &mut impl FnMut(Event<'_>)) -> Result<TopLevel, DocumentError> {
    let mut top = TopLevel::default();
    let no_events = WindowError::Bad("JSON has no traceEvents: not a Chrome/Kineto trace");
    let opened = w.item(|b| {
        let at = json_scan::ws(b, 0)?;
        Ok((b[at] == b'{', at + 1))
    });
    match opened {
        Ok(true) => {}
        Ok(false) | Err(WindowError::Eof) => return Err(no_events.into()),
        Err(e) => return Err(e.into()),
    }
    if w.item(|b| json_scan::ws(b, 0).map(|at| (b[at] == b'}', at + (b[at] == b'}') as usize)))? {
        return Ok(top);
    }
    loop {
        let key = w.item(|b| {
            let (key, after) = json_scan::string(b, 0)?;
            let after = json_scan::expect(b, after, b':', "expected ':'")?;
            let at = json_scan::ws(b, after)?;
            Ok((key.key()?.into_owned(), at))
        })?;
        if key.as_slice() == b"traceEvents" {
            top.trace_events = true;
            events(w, add)?;
        } else if READ.contains(&key.as_slice()) {
            let value = w.item(|b| json_scan::skip_value(b, 0).map(|end| (b[..end].to_vec(), end)))?;
            let value: Value = serde_json::from_slice(&value)
                .map_err(|e| DocumentError::Member(String::from_utf8_lossy(&key).into_owned(), e))?;
            top.set(&key, value);
        } else {
            let other = OTHER_FORMATS.iter().find(|(member, _)| *member == key.as_slice());
            top.other_format = top.other_format.or(other.map(|(_, what)| *what));
            w.item(|b| json_scan::skip_value(b, 0).map(|end| ((), end)))?;
        }
        if w.item(|b| json_scan::next_or_close(b, 0, b'}').map(|(at, closed)| (closed, at)))? {
            break;
        }
    }
    if !w.at_end()? {
        return Err(WindowError::Bad("trailing characters after the JSON document").into());
    }
    Ok(top)
}

/// The `traceEvents` array, element by element.
fn events<R: std::io::Read>(w: &mut Window<R>, add: &mut impl FnMut(Event<'_>)) -> Result<(), DocumentError> {
    match w.item(|b| {
        let at = json_scan::ws(b, 0)?;
        Ok((b[at], at + 1))
    })? {
        b'[' => {}
        _ => return Err(WindowError::Bad("traceEvents is not an array").into()),
    }
    if w.item(|b| json_scan::ws(b, 0).map(|at| (b[at] == b']', at + (b[at] == b']') as usize)))? {
        return Ok(());
    }
    let mut index = 0u64;
    loop {
        w.item(|b| {
            let at = json_scan::ws(b, 0)?;
            if b[at] != b'{' {
                return Err(Scan::Bad("traceEvents holds something other than objects"));
            }
            let mut event = Event::default();
            let end = parse_event(b, at, &mut event)?;
            add(event);
            Ok(((), end))
        })
        .map_err(|source| DocumentError::Event { index, source })?;
        index += 1;
        if w.item(|b| json_scan::next_or_close(b, 0, b']').map(|(at, closed)| (closed, at)))? {
            return Ok(());
        }
    }
}
