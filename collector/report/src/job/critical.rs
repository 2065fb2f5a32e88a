//! The critical path through one step's collectives, on the job's common clock. A collective can start only
//! once its last rank has joined, so the path runs through the last arrival's work before each collective, then
//! through the collective itself, and after the last one through the work of the rank whose step ends last. Its
//! segments add up to the step's span across ranks (first rank's start to last rank's end), so "rank 3's work
//! is 60% of the path" says where shortening the step must start. The step is a typical one: of the steps every
//! rank ran, the one of median span.

use super::collectives::Method;
use super::{JobPlan, RankInput};
use serde::Serialize;

/// At most this many segments are kept (a step of thousands of collectives says the same in its largest).
const MAX_SEGMENTS: usize = 512;

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Segment {
    /// "work": one rank's time before it joined a collective (or after the last one); "collective": the
    /// collective running once all had joined.
    pub kind: &'static str,
    /// The rank on the path (work), or the last to join (collective).
    pub who: String,
    /// "work before joining" a collective, "work after the last collective", or the collective's kernel name.
    pub what: String,
    /// On the job's clock (ns; the epoch when the traces carry REALTIME pairs).
    pub start_ns: i64,
    /// Its length.
    pub duration_ns: u64,
    /// Which rank (index into the job's ranks).
    #[serde(skip)]
    pub rank: usize,
    /// A work segment's GPU work on that rank, by name, most first (kernels, copies, memsets; the time each
    /// overlapped the segment): what the step waited on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_work: Vec<(String, u64)>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CriticalPath {
    /// The step the path is through.
    pub step: String,
    /// The step's span across ranks on the job's clock.
    pub start_ns: i64,
    /// The step's span across ranks: the first rank's start to the last rank's end.
    pub duration_ns: u64,
    /// Collectives on the path.
    pub collectives: usize,
    /// Work on the path per rank, most first: (who, ns).
    pub work_by_rank: Vec<(String, u64)>,
    /// Collective time on the path, once every rank had joined.
    pub collective_ns: u64,
    /// The path, in time order; its segments add up to the span.
    pub segments: Vec<Segment>,
    /// Segments left out beyond [`MAX_SEGMENTS`] (their time is in the totals).
    pub segments_left_out: usize,
}

pub fn critical_path(job: &JobPlan, inputs: &[RankInput]) -> Result<CriticalPath, String> {
    if job.instances.is_empty() {
        return Err("no collective was matched across ranks".into());
    }
    if job.method != Method::Arrival {
        return Err("the hosts' clocks could not be aligned on collectives, so arrivals cannot be compared".into());
    }
    // Steps every rank ran, by name: (name, span on the job clock, window index per rank).
    let first = &inputs[0].ctx.steps;
    let mut common: Vec<(String, (i64, i64), Vec<usize>)> = Vec::new();
    for (k0, name) in first.names.iter().enumerate() {
        let mut idx = Vec::with_capacity(inputs.len());
        let mut span = (i64::MAX, i64::MIN);
        for i in inputs {
            let steps = &i.ctx.steps;
            let Some(k) = steps.names.iter().position(|n| n == name).or((inputs.len() == 1).then_some(k0)) else {
                break;
            };
            let Some(&(s, e)) = steps.windows.get(k) else { break };
            span = (span.0.min(i.clock.at(s)), span.1.max(i.clock.at(e)));
            idx.push(k);
        }
        if idx.len() == inputs.len() && span.1 > span.0 {
            common.push((name.clone(), span, idx));
        }
    }
    if common.is_empty() {
        return Err("no step (by name) was run by every rank".into());
    }
    let mut order: Vec<usize> = (0..common.len()).collect();
    order.sort_by_key(|&c| (common[c].1 .1 - common[c].1 .0, c));
    let (step, (t0, t1), idx) = &common[order[(order.len() - 1) / 2]];
    let in_step = |inst: &&super::collectives::Instance| {
        inst.members.iter().any(|m| {
            let w = inputs[m.rank].ctx.steps.windows[idx[m.rank]];
            w.0 <= m.op.own_start && m.op.own_start < w.1
        })
    };
    let mut insts: Vec<&super::collectives::Instance> = job.instances.iter().filter(in_step).collect();
    insts.sort_by_key(|i| i.end());
    let who = |r: usize| inputs[r].process.who.clone();
    let mut segments: Vec<Segment> = Vec::new();
    let mut prev = *t0;
    for inst in &insts {
        let last = inst.members[inst.last];
        let name = &job.names[inst.name as usize];
        let arrival = last.op.start.clamp(*t0, *t1);
        if arrival > prev {
            segments.push(Segment {
                kind: "work",
                who: who(last.rank),
                what: format!("work before joining {}", short(name)),
                start_ns: prev,
                duration_ns: (arrival - prev) as u64,
                rank: last.rank,
                gpu_work: Vec::new(),
            });
        }
        let from = prev.max(arrival);
        let end = inst.end().min(*t1);
        if end > from {
            segments.push(Segment {
                kind: "collective",
                who: who(last.rank),
                what: short(name).to_string(),
                start_ns: from,
                duration_ns: (end - from) as u64,
                rank: last.rank,
                gpu_work: Vec::new(),
            });
        }
        prev = prev.max(end);
    }
    if *t1 > prev {
        // The rank whose step ends last finishes the step.
        let r = (0..inputs.len())
            .max_by_key(|&r| inputs[r].clock.at(inputs[r].ctx.steps.windows[idx[r]].1))
            .expect("ranks");
        segments.push(Segment {
            kind: "work",
            who: who(r),
            what: if insts.is_empty() { "the whole step".into() } else { "work after the last collective".into() },
            start_ns: prev,
            duration_ns: (*t1 - prev) as u64,
            rank: r,
            gpu_work: Vec::new(),
        });
    }
    let mut by_rank: Vec<(String, u64)> = Vec::new();
    let mut collective_ns = 0;
    for s in &segments {
        if s.kind == "collective" {
            collective_ns += s.duration_ns;
        } else if let Some(x) = by_rank.iter_mut().find(|x| x.0 == s.who) {
            x.1 += s.duration_ns;
        } else {
            by_rank.push((s.who.clone(), s.duration_ns));
        }
    }
    by_rank.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let left_out = segments.len().saturating_sub(MAX_SEGMENTS);
    if left_out > 0 {
        // Keep the longest, in time order.
        let mut by_len: Vec<usize> = (0..segments.len()).collect();
        by_len.sort_by_key(|&i| std::cmp::Reverse(segments[i].duration_ns));
        let mut keep = vec![false; segments.len()];
        by_len.iter().take(MAX_SEGMENTS).for_each(|&i| keep[i] = true);
        let mut k = keep.iter();
        segments.retain(|_| *k.next().expect("one flag per segment"));
    }
    Ok(CriticalPath {
        step: step.clone(),
        start_ns: *t0,
        duration_ns: (*t1 - *t0) as u64,
        collectives: insts.len(),
        work_by_rank: by_rank,
        collective_ns,
        segments,
        segments_left_out: left_out,
    })
}

/// A kernel name without its parameter list.
pub fn short(name: &str) -> &str {
    name.split('(').next().unwrap_or(name).trim_start_matches("void ")
}

/// GPU work per name in each work segment, the most at most.
const WORK_SHOWN: usize = 3;

/// Fills each work segment's `gpu_work`: one more pass over the files that hold the path's ranks (only those
/// ranks' kernels, copies and memsets that overlap a segment are counted). `owners[r]`: rank r's (file, process
/// key); `clocks[r]`: its way onto the job's clock.
pub fn fill_gpu_work(
    c: &mut CriticalPath,
    traces: &mut [(String, cuflight_trace::model::source::EventSource)],
    owners: &[(usize, u32)],
    clocks: &[cuflight_trace::model::align::ToJob],
) -> Result<(), cuflight_trace::model::trace::TraceError> {
    use rustc_hash::FxHashMap;
    // Per (file, process): its segments as (index, start, end) on the job clock.
    type Spans = Vec<(usize, i64, i64)>;
    let mut wanted: FxHashMap<(usize, u32), Spans> = FxHashMap::default();
    for (i, s) in c.segments.iter().enumerate().filter(|(_, s)| s.kind == "work") {
        let Some(&owner) = owners.get(s.rank) else { continue };
        wanted.entry(owner).or_default().push((i, s.start_ns, s.start_ns.saturating_add(s.duration_ns as i64)));
    }
    let mut files: Vec<usize> = wanted.keys().map(|k| k.0).collect();
    files.sort_unstable();
    files.dedup();
    let rank_of: FxHashMap<(usize, u32), usize> = owners.iter().enumerate().map(|(r, &o)| (o, r)).collect();
    let mut found: Vec<FxHashMap<String, u64>> = vec![FxHashMap::default(); c.segments.len()];
    for fi in files {
        let Some((_, source)) = traces.get_mut(fi) else { continue };
        source.for_each(|k, p, e| {
            let Some(segs) = wanted.get(&(fi, k)) else { return };
            if !e.is_gpu_work() {
                return;
            }
            let clock = &clocks[rank_of[&(fi, k)]];
            let (a, b) = (clock.at(e.start), clock.at(e.end.max(e.start)));
            for &(i, s, t) in segs {
                let overlap = b.min(t).saturating_sub(a.max(s));
                if overlap > 0 {
                    let name = match e.kind() {
                        Some(cuflight_format::EventKind::Memcpy) => "memcpy".to_string(),
                        Some(cuflight_format::EventKind::Memset) => "memset".to_string(),
                        _ => short(p.string(e.name)).to_string(),
                    };
                    *found[i].entry(name).or_default() += overlap as u64;
                }
            }
        })?;
    }
    for (seg, names) in c.segments.iter_mut().zip(found) {
        let mut v: Vec<(String, u64)> = names.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(WORK_SHOWN);
        seg.gpu_work = v;
    }
    Ok(())
}
