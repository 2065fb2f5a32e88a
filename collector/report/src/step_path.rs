//! The critical path of a typical step on one rank, across its streams and launching threads: the chain of GPU
//! and host work that sets the step's time (HTA's critical-path analysis builds the same graph for one stream;
//! this follows every stream, the launches, the event waits between streams and the host's synchronisations).
//!
//! The typical step is the one of median window duration. The path is walked back from the work that ends last:
//! an op could start only once (a) the op before it in its stream ended, (b) its launch call was made, and (c) if
//! its stream waited on an event, the work on another stream it waited for ended; the constraint met last is the
//! one that held it, and the walk follows it. From a launch the walk goes to the host: back to the synchronising
//! call before it on that thread (and then to the GPU work that call waited for), or to the step's start. The links
//! add up to the step's time; shortening a link shortens the step by up to its length (until another chain of work
//! becomes the longest).

use super::spans::Span;
use cuflight_format::calls::CallClass;
use cuflight_trace::model::kernel_category::kernel_category;
use cuflight_trace::model::trace::Process;
use serde::Serialize;

#[path = "step_path_steps.rs"]
mod steps;
pub use steps::PathSteps;
use steps::ThreadNames;

/// Ops of the typical step kept for the walk (a step of more runs the walk on its first this many).
const MAX_OPS: usize = 1 << 18;
/// Groups of the steps by duration, the middle step of each walked too ([`PathSteps`]).
const STRATA: usize = 8;
/// Ops kept for each of those steps but the typical one.
const MAX_STRATUM_OPS: usize = MAX_OPS / STRATA;
/// Links listed (the totals cover all).
const SHOWN_LINKS: usize = 12;

/// The groups of [`StepPath::by_kind`] that are the host's time: the launching threads' own work, synchronising
/// and polling calls returning, and ops waiting for their launch calls. Every other group is the GPU's (its work
/// by category, its queues and waits).
const HOST_WORK: &str = "host work";
const SYNC: &str = "sync";
const HOST_POLLING: &str = "host polling";
const LAUNCH_LATENCY: &str = "launch latency";
pub const HOST_GROUPS: [&str; 4] = [HOST_WORK, SYNC, HOST_POLLING, LAUNCH_LATENCY];
/// The groups of ops launched and waiting a millisecond or more on nothing the trace holds: neither the host's time
/// nor the GPU's work of this trace ([`StepPath::gpu_share`] leaves them out).
const UNSEEN_WORK: &str = "waits on work not in the trace";
const UNEXPLAINED: &str = "unexplained waits";

#[derive(Clone, Copy, Debug)]
pub struct PathOp {
    pub start: u64,
    pub end: u64,
    pub stream: u64,
    pub name: u32,
    /// "memcpy", "memset", or None for a kernel (its category comes from its name).
    pub copy: Option<&'static str>,
    /// Launch call: (start, when it had issued the op, thread). An asynchronous call has issued it by its end; a
    /// call that blocks until the op is done (a synchronous copy) issued it as it began, and its end says nothing
    /// about when the op could start.
    pub launch: Option<(u64, u64, u32)>,
    pub after_wait: bool,
    /// Queued after a host function its thread put in a stream.
    pub after_host_fn: bool,
    /// Queued by a graph launch.
    pub graph: bool,
    /// Issued by a call that blocks until the op is done (a synchronous copy: on the legacy default stream it also
    /// waits for the work of every blocking stream).
    pub blocking: bool,
}

#[derive(Clone, Copy, Debug)]
pub struct PathCall {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    pub name: u32,
    /// A query (`cudaEventQuery`) rather than a synchronising call: a loop of them waits as a sync does.
    pub poll: bool,
}

/// What the sweep keeps of the typical step.
#[derive(Default)]
pub struct StepCapture {
    pub window: Span,
    pub name: String,
    pub ops: Vec<PathOp>,
    /// Synchronising and polling calls of the launching threads.
    pub syncs: Vec<PathCall>,
}

impl StepCapture {
    pub fn op(&mut self, op: PathOp) {
        if self.ops.len() < MAX_OPS {
            self.ops.push(op);
        }
    }

    pub fn call(&mut self, class: CallClass, mut c: PathCall) {
        c.poll = class == CallClass::Poll;
        if matches!(class, CallClass::Sync | CallClass::Poll)
            && c.end > self.window.0
            && c.start < self.window.1
            && self.syncs.len() < MAX_OPS
        {
            self.syncs.push(c);
        }
    }
}

/// One group of steps by duration: the path of its middle step, and the group's steps.
#[derive(Debug, Clone)]
pub struct Stratum {
    /// None where that step holds no GPU work (its path holds no GPU time).
    pub path: Option<StepPath>,
    /// The step ran more ops than were kept for it: its path is not the step's, and bounds nothing.
    pub partial: bool,
    pub steps_ns: u64,
    pub steps: usize,
}

/// The paths walked: the typical step's, and one per group of steps by duration.
#[derive(Debug, Clone, Default)]
pub struct Walked {
    pub typical: Option<StepPath>,
    pub strata: Vec<Stratum>,
}

/// A slow step's path is shown beside the typical one's from this many times the typical step's length: what the
/// warm-up calls a slow step.
const SLOW: f64 = super::warmup::SLOW;

/// JSON `slow_step_path` of a process: what holds its slow steps, where they are much longer than its typical one
/// (a server's prefills beside its decodes, a loop's evaluation or checkpoint steps) and the typical step's path
/// cannot say.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SlowStepPath {
    /// The steps of its group: the slowest eighth of the steps by duration (the slowest step alone in a run of
    /// fewer than 8), of which the path is of the middle one.
    pub group_steps: usize,
    /// The analysed steps.
    pub of_steps: usize,
    #[serde(flatten)]
    pub path: StepPath,
}

/// A slow step's path is shown where a part of it differs from the typical step's by this share of the step or
/// more: the GPU's part, or its largest group's (a slow step held as a typical one is, only longer, says nothing new).
const DIFFERS: f64 = 0.2;

impl StepPath {
    /// The GPU's part of the path (every group but the host's and the waits on what the trace does not hold), as
    /// a share of the step.
    pub fn gpu_share(&self) -> f64 {
        self.gpu_share_with(false)
    }

    /// [`StepPath::gpu_share`], with the waits on what the trace does not hold where `unseen` (what a finding about
    /// those waits can shorten).
    pub fn gpu_share_with(&self, unseen: bool) -> f64 {
        let gpu_side = |what: &str| {
            let waits = what == UNSEEN_WORK || what == UNEXPLAINED;
            !HOST_GROUPS.contains(&what) && (unseen || !waits)
        };
        let gpu: u64 = self.by_kind.iter().filter(|g| gpu_side(&g.what)).map(|g| g.ns).sum();
        gpu as f64 / self.step_ns.max(1) as f64
    }

    /// The share of the step in group `what` (0 where the path has none).
    fn share_of(&self, what: &str) -> f64 {
        self.by_kind.iter().find(|g| g.what == what).map_or(0.0, |g| g.ns as f64 / self.step_ns.max(1) as f64)
    }

    /// Whether this path is held otherwise than `other`: its GPU part, or its largest group, by [`DIFFERS`].
    fn differs_from(&self, other: &StepPath) -> bool {
        let top = self.by_kind.first().map_or(0.0, |g| self.share_of(&g.what) - other.share_of(&g.what));
        (self.gpu_share() - other.gpu_share()).abs() >= DIFFERS || top >= DIFFERS
    }
}

impl Walked {
    /// The path of the middle step of the slowest group, where it is whole, takes at least [`SLOW`] times the
    /// typical step and is held otherwise.
    pub fn slow(&self) -> Option<SlowStepPath> {
        let typical = self.typical.as_ref()?;
        let last = self.strata.last().filter(|s| !s.partial)?;
        let long = |p: &&StepPath| p.step_ns as f64 >= SLOW * typical.step_ns as f64;
        let path = last.path.as_ref().filter(long).filter(|p| p.differs_from(typical))?;
        let of_steps = self.strata.iter().map(|s| s.steps).sum();
        Some(SlowStepPath { group_steps: last.steps, of_steps, path: path.clone() })
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Link {
    /// gpu (an op running), launch_wait (an op waiting for its launch call), unseen_wait (an op launched and
    /// waiting a millisecond or more on nothing the trace holds), stream_order (waiting past the end of
    /// the op before it in its stream: the GPU's queue), stream_wait (waiting for another stream's work through an
    /// event), host_function (waiting for a host function in its stream), graph_wait (inside a CUDA graph), host
    /// (the launching thread's own work), sync_return (a synchronising call returning), poll_wait (the host polling an
    /// event past the end of the GPU work before it).
    pub kind: &'static str,
    /// The op, the call or the wait, in words.
    pub what: String,
    /// Its start on the trace's clock.
    pub start_ns: u64,
    /// Its length.
    pub duration_ns: u64,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Share {
    /// What the time was: a kernel category, host work or a kind of wait.
    pub what: String,
    /// Its time on the path.
    pub ns: u64,
    /// Its share of the path's time, 0 to 1.
    pub share: f64,
}

/// JSON `critical_path` of a process.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct StepPath {
    /// The step the path is through (in `critical_path`, the analysed step of median duration).
    pub step: String,
    /// The step's duration.
    pub step_ns: u64,
    /// The links' total (the step's time from the path's first link to the step's end).
    pub path_ns: u64,
    /// Path time by what it is, most first: GPU work by category, host work, waits.
    pub by_kind: Vec<Share>,
    /// The longest links (shortening one saves up to its length).
    pub longest: Vec<Link>,
    /// Links on the whole path (`longest` lists some of them).
    pub links: usize,
    /// The trace sampled its CUDA calls (1 in 50 or fewer of its correlation ids are in it): launches and waits
    /// missing from it may hold the step where the path shows host work. GPU-side findings are not capped by it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub calls_sampled: bool,
}

/// "thread 24922", with its name where the trace gives one: "thread 24922 (pt_autograd_0)" (Kineto's names say
/// the id already: "thread 24922 (python3)" stands as it is).
fn thread_label(p: &Process, threads: &ThreadNames, tid: u32) -> String {
    let plain = format!("thread {tid}");
    match threads.get(&tid).map(|&n| p.string(n)).filter(|n| !n.is_empty()) {
        Some(name) if name.starts_with(&plain) => name.to_string(),
        Some(name) => format!("{plain} ({name})"),
        None => plain,
    }
}

fn op_what(p: &Process, op: &PathOp) -> String {
    let name = match (p.string(op.name), op.copy) {
        ("", Some(copy)) => format!("a {copy}"),
        (n, _) => super::short_names::short_name(n),
    };
    format!("{name} on {}", super::window::stream_label(op.stream))
}

fn op_kind(p: &Process, op: &PathOp) -> String {
    match op.copy {
        Some(c) => c.to_string(),
        None => format!("{} kernels", kernel_category(p.string(op.name)).as_str()),
    }
}

/// Walks the path back from the end of the captured step.
pub fn walk(p: &Process, cap: &StepCapture, threads: &ThreadNames) -> Option<StepPath> {
    let (s, e) = cap.window;
    let mut ops = cap.ops.clone();
    ops.sort_by_key(|o| (o.start, o.end));
    if ops.is_empty() || e <= s {
        return None;
    }
    // The op before each one in its stream.
    let mut prev_in_stream = vec![None; ops.len()];
    let mut last: rustc_hash::FxHashMap<u64, usize> = Default::default();
    for (i, o) in ops.iter().enumerate() {
        prev_in_stream[i] = last.insert(o.stream, i);
    }
    let mut by_end: Vec<usize> = (0..ops.len()).collect();
    by_end.sort_by_key(|&i| ops[i].end);
    // The op (any stream but `stream`, or any when None) that ended last at or before `t`.
    let ended_before = |t: u64, not_stream: Option<u64>| -> Option<usize> {
        let n = by_end.partition_point(|&i| ops[i].end <= t);
        by_end[..n].iter().rev().copied().find(|&i| not_stream.is_none_or(|st| ops[i].stream != st))
    };
    let mut links: Vec<(Link, String)> = Vec::new();
    let mut push = |kind: &'static str, what: String, group: String, a: u64, b: u64| {
        let (a, b) = (a.max(s), b.min(e));
        if b > a {
            links.push((Link { kind, what, start_ns: a, duration_ns: b - a }, group));
        }
    };
    let mut cur = *by_end.last()?;
    push("host", "the host finishing the step after the GPU's last work".into(), HOST_WORK.into(), ops[cur].end, e);
    let mut guard = 0;
    loop {
        guard += 1;
        if guard > 4 * ops.len() + 16 {
            break;
        }
        let op = ops[cur];
        push("gpu", op_what(p, &op), op_kind(p, &op), op.start, op.end);
        if op.start <= s {
            break;
        }
        // The constraints on its start, and when each was met.
        let same = prev_in_stream[cur].filter(|&i| ops[i].end <= op.start);
        let launch = op.launch.map(|(a, b, tid)| (a, b.min(op.start), tid));
        let cross = if op.after_wait {
            ended_before(op.start, Some(op.stream))
        } else if op.blocking {
            // Issued as the call began and started later: it waited behind work the call's stream waits for, and
            // the work on another stream that ended last before it started, after the call began, is what held it.
            let issued = launch.map_or(0, |l| l.1);
            ended_before(op.start, Some(op.stream)).filter(|&i| ops[i].end > issued)
        } else {
            None
        };
        let t_same = same.map(|i| ops[i].end);
        let t_cross = cross.map(|i| ops[i].end);
        let t_launch = launch.map(|l| l.1);
        let latest = [t_same, t_cross, t_launch].into_iter().flatten().max();
        match latest {
            Some(t) if t_same == Some(t) => {
                let i = same.expect("t_same is set");
                // Past its predecessor's end the op waited on what its queue holds besides GPU work.
                let (kind, group) = if op.after_wait {
                    ("stream_wait", "waits between streams")
                } else if op.after_host_fn {
                    ("host_function", "host functions in streams")
                } else if op.graph {
                    ("graph_wait", "CUDA graph waits")
                } else {
                    ("stream_order", "GPU queue")
                };
                push(kind, format!("the queue before {}", op_what(p, &op)), group.into(), t, op.start);
                cur = i;
            }
            Some(t) if t_cross == Some(t) && !op.after_wait => {
                let i = cross.expect("t_cross is set");
                push("stream_order", format!("the queue before {}", op_what(p, &op)), "GPU queue".into(), t, op.start);
                cur = i;
            }
            Some(t) if t_cross == Some(t) => {
                let i = cross.expect("t_cross is set");
                let what = format!("{} waiting on {}", super::window::stream_label(op.stream), op_what(p, &ops[i]));
                push("stream_wait", what, "waits between streams".into(), t, op.start);
                cur = i;
            }
            Some(t) => {
                let (call_start, _, tid) = launch.expect("t_launch is set");
                // Launched and waiting a millisecond or more with nothing before it in the trace: no launch takes
                // that long; it waited on what the trace does not hold, as the idle causes say (TraceLens's SGLang
                // prefill: 493 ms read "launch latency 50%" beside "GPU work not in the trace").
                if op.start - t >= super::idle::UNSEEN_WORK_NS {
                    let (what, group) = match p.imported {
                        true => ("on GPU work not in the trace", UNSEEN_WORK),
                        false => ("with nothing running", UNEXPLAINED),
                    };
                    push("unseen_wait", format!("{} waiting {what}", op_what(p, &op)), group.into(), t, op.start);
                } else {
                    let what = format!("{} waiting for its launch", op_what(p, &op));
                    push("launch_wait", what, LAUNCH_LATENCY.into(), t, op.start);
                }
                // The host: back to the thread's last synchronising call before the launch.
                let sync = cap.syncs.iter().filter(|c| c.tid == tid && c.end <= call_start).max_by_key(|c| c.end);
                let from = sync.map_or(s, |c| c.end.max(s));
                push(
                    "host",
                    format!("{}: CPU work and launches", thread_label(p, threads, tid)),
                    HOST_WORK.into(),
                    from,
                    t,
                );
                match sync.and_then(|c| ended_before(c.end, None).map(|i| (c, i))) {
                    Some((c, i)) if c.end > s && ops[i].end > s => {
                        let name = p.string(c.name);
                        let (kind, what, group) = if c.poll {
                            ("poll_wait", format!("the host polling with {name} until done"), HOST_POLLING)
                        } else {
                            ("sync_return", format!("{name} returning"), SYNC)
                        };
                        push(kind, what, group.into(), ops[i].end, c.end);
                        cur = i;
                    }
                    _ => break,
                }
            }
            None => {
                push("host", "before the step's first GPU work".into(), HOST_WORK.into(), s, op.start);
                break;
            }
        }
    }
    let path_ns: u64 = links.iter().map(|l| l.0.duration_ns).sum();
    let mut groups: Vec<Share> = Vec::new();
    for (l, g) in &links {
        match groups.iter_mut().find(|x| &x.what == g) {
            Some(x) => x.ns += l.duration_ns,
            None => groups.push(Share { what: g.clone(), ns: l.duration_ns, share: 0.0 }),
        }
    }
    for g in &mut groups {
        g.share = g.ns as f64 / path_ns.max(1) as f64;
    }
    groups.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.what.cmp(&b.what)));
    let count = links.len();
    let mut longest: Vec<Link> = links.into_iter().map(|l| l.0).collect();
    longest.sort_by(|a, b| b.duration_ns.cmp(&a.duration_ns).then(a.start_ns.cmp(&b.start_ns)));
    longest.truncate(SHOWN_LINKS);
    let step = cap.name.clone();
    Some(StepPath { step, step_ns: e - s, path_ns, by_kind: groups, longest, links: count, calls_sampled: false })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process() -> Process {
        let mut p = Process::default();
        p.strings.insert(1, "ampere_bf16_s16816gemm_bf16_64x64_nn".into());
        p.strings.insert(2, "cudaStreamSynchronize".into());
        p
    }

    fn op(start: u64, end: u64, stream: u64, launch: Option<(u64, u64, u32)>, after_wait: bool) -> PathOp {
        PathOp {
            start,
            end,
            stream,
            name: 1,
            copy: None,
            launch,
            after_wait,
            after_host_fn: false,
            graph: false,
            blocking: false,
        }
    }

    #[test]
    fn the_path_follows_the_stream_the_wait_and_the_host() {
        // Host works 0-40 and launches A (stream 1) at 40; B (stream 2) launched at 41 waits for A; C follows B.
        let cap = StepCapture {
            window: (0, 100),
            name: "step".into(),
            ops: vec![
                op(45, 70, 1, Some((40, 42, 9)), false),
                op(70, 90, 2, Some((41, 43, 9)), true),
                op(90, 100, 2, Some((44, 46, 9)), false),
            ],
            syncs: vec![],
        };
        let path = walk(&process(), &cap, &ThreadNames::default()).unwrap();
        assert_eq!(path.path_ns, 100, "{path:?}");
        let ns = |what: &str| path.by_kind.iter().find(|g| g.what == what).map_or(0, |g| g.ns);
        assert_eq!(ns("gemm kernels"), 25 + 20 + 10);
        assert_eq!(ns("host work"), 42);
        assert_eq!(ns("launch latency"), 3);
        // The host's link names its thread, with the name the trace gives it where it gives one.
        let host = |path: &StepPath| path.longest.iter().find(|l| l.kind == "host").map(|l| l.what.clone());
        assert_eq!(host(&path).as_deref(), Some("thread 9: CPU work and launches"));
        let mut p = process();
        p.strings.insert(3, "pt_autograd_0".into());
        let named = walk(&p, &cap, &ThreadNames::from_iter([(9, 3)])).unwrap();
        assert_eq!(host(&named).as_deref(), Some("thread 9 (pt_autograd_0): CPU work and launches"));
        p.strings.insert(3, "thread 9 (python3)".into());
        let kineto = walk(&p, &cap, &ThreadNames::from_iter([(9, 3)])).unwrap();
        assert_eq!(host(&kineto).as_deref(), Some("thread 9 (python3): CPU work and launches"), "Kineto's names");
    }

    /// An op launched and waiting 2 ms with nothing before it waited on what the trace does not hold (TraceLens's
    /// SGLang traces: 463 and 493 ms read "launch latency"): said so, in an import as in a capture, and neither the
    /// host's part of the path nor the GPU's.
    #[test]
    fn a_long_wait_after_the_launch_is_no_launch_latency() {
        let ms = 1_000_000;
        let cap = StepCapture {
            window: (0, 5 * ms),
            name: "step".into(),
            ops: vec![op(3 * ms, 5 * ms, 1, Some((0, 1_000, 9)), false)],
            syncs: vec![],
        };
        for (imported, group) in [(true, "waits on work not in the trace"), (false, "unexplained waits")] {
            let mut p = process();
            p.imported = imported;
            let path = walk(&p, &cap, &ThreadNames::default()).unwrap();
            let ns = |what: &str| path.by_kind.iter().find(|g| g.what == what).map_or(0, |g| g.ns);
            assert_eq!((ns(group), ns("launch latency")), (3 * ms - 1_000, 0), "{path:?}");
            assert!(path.longest.iter().any(|l| l.kind == "unseen_wait"), "{path:?}");
            assert!((path.gpu_share() - 0.4).abs() < 1e-9, "the GEMM alone: {}", path.gpu_share());
        }
    }

    #[test]
    fn a_sync_takes_the_path_back_to_the_work_it_waited_for() {
        // A runs 0-50; the host syncs 10-52, then launches B at 60.
        let cap = StepCapture {
            window: (0, 100),
            name: "step".into(),
            ops: vec![op(0, 50, 1, Some((0, 1, 9)), false), op(62, 100, 1, Some((60, 61, 9)), false)],
            syncs: vec![PathCall { start: 10, end: 52, tid: 9, name: 2, poll: false }],
        };
        let path = walk(&process(), &cap, &ThreadNames::default()).unwrap();
        assert_eq!(path.path_ns, 100, "{path:?}");
        let kinds: Vec<&str> = path.longest.iter().map(|l| l.kind).collect();
        assert!(kinds.contains(&"sync_return") && kinds.contains(&"host"), "{kinds:?}");
    }

    #[test]
    fn a_synchronous_copy_waits_for_the_work_before_it_not_for_its_own_call() {
        // A GEMM on stream 1 runs 0-50; the host then calls a synchronous copy (legacy default stream 0) at 2, which
        // issues the copy at once and blocks until it is done (52-60): the copy waited for the GEMM.
        let mut copy = op(52, 60, 0, Some((2, 2, 9)), false);
        (copy.copy, copy.blocking) = (Some("memcpy"), true);
        let cap = StepCapture {
            window: (0, 60),
            name: "step".into(),
            ops: vec![op(0, 50, 1, Some((0, 1, 9)), false), copy],
            syncs: vec![PathCall { start: 2, end: 60, tid: 9, name: 2, poll: false }],
        };
        let path = walk(&process(), &cap, &ThreadNames::default()).unwrap();
        assert_eq!(path.path_ns, 60, "{path:?}");
        let ns = |what: &str| path.by_kind.iter().find(|g| g.what == what).map_or(0, |g| g.ns);
        assert_eq!((ns("gemm kernels"), ns("memcpy"), ns("GPU queue")), (50, 8, 2), "{path:?}");
        assert_eq!(ns("host work"), 0, "{path:?}");
    }

    #[test]
    fn a_step_of_more_ops_than_kept_is_partial_and_the_others_whole() {
        // Nine steps, longer each: eight groups, the last of steps 7 and 8 walked through step 8; step 4 typical.
        let windows: Vec<Span> = (0..9).map(|i| (i * 1000, i * 1000 + 100 + i)).collect();
        let mut paths = PathSteps::new(&windows, &vec![String::new(); 9]);
        for k in 0..9 {
            let n = if k == 8 || k == 4 { MAX_STRATUM_OPS + 1 } else { 1 };
            if paths.keeps(k as usize) {
                for _ in 0..n {
                    paths.op(k as usize, op(k * 1000 + 10, k * 1000 + 90, 1, Some((k * 1000, k * 1000 + 1, 9)), false));
                }
            }
        }
        let walked = paths.walk(&process());
        let partial: Vec<bool> = walked.strata.iter().map(|s| s.partial).collect();
        assert_eq!(partial, [false, false, false, false, false, false, false, true], "{walked:?}");
        assert!(walked.typical.is_some() && walked.strata.iter().take(7).all(|s| s.path.is_some()));
    }
}
