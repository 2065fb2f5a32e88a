//! sync_stall: the GPU idle because the host waited for it (a synchronising call drained its queue, then the host
//! worked before queuing more) or because the host was still inside a copy's own call, staging it from pageable
//! memory. Both are the host blocked on the GPU's copies and results; the fix differs, and follows the larger part.

use super::findings::{idle_evidence, ms, rows_by_time, CallRow, Ctx, Finding, Fixes};
use super::findings::{FIX_SYNC, FIX_SYNC_GENERAL, FIX_SYNC_SERVING};
use super::gpu_findings::PAGEABLE_FIXES;
use super::idle::{CauseKind, IdleCauses};
use super::sources::SourceKind;
use super::sweep::Swept;
use super::words::counted;

const SYNC_FIXES: Fixes = Fixes { training: FIX_SYNC, serving: FIX_SYNC_SERVING, general: FIX_SYNC_GENERAL };

pub fn sync_stall(ctx: &Ctx, idle: &IdleCauses, swept: &Swept) -> Option<Finding> {
    let c = idle.get(CauseKind::SyncStall);
    if c.total_ns == 0 {
        return None;
    }
    let steps = ctx.steps_count();
    let mut ev = idle_evidence(ctx, c);
    let staged = &idle.staged;
    let staged_ns = staged.idle_ns.min(c.total_ns);
    let after_syncs = c.total_ns - staged_ns;
    let syncs = rows_by_time(swept.sync_calls.iter().map(|(n, &c)| (n, c)));
    let blocked: u64 = syncs.iter().map(|r| r.total_ns).sum();
    let count: u64 = syncs.iter().map(|r| r.count).sum();
    if count > 0 || after_syncs > 0 {
        // Threads waiting at once each count their wait: summed over several, the time says so.
        let threads = match swept.sync_threads {
            0 | 1 => String::new(),
            n => format!(", summed over {n} threads"),
        };
        let (calls, whom) = if count == 1 { ("call", "its thread") } else { ("calls", "their threads") };
        ev.facts.push(format!(
            "{count} synchronising {calls} {}{} blocked {whom} {} in all{threads}; the GPU then idled {} until the \
             host queued more work",
            ctx.in_steps("inside steps"),
            ctx.count_per_step(count, 1),
            ms(blocked),
            ctx.per_step(after_syncs)
        ));
    }
    if staged.copies > 0 {
        let names: Vec<&str> = staged.calls.keys().map(String::as_str).collect();
        let why = match (staged.pageable, staged.copies) {
            (0, _) => "the driver preparing them".to_string(),
            (p, n) if p == n => "the driver staging them through a bounce buffer, as they touch pageable memory".into(),
            (p, _) => format!(
                "the driver preparing them; {} pageable memory, which it stages through a bounce buffer",
                counted(p, "of them touches", "of them touch")
            ),
        };
        ev.facts.push(format!(
            "{} kept the GPU idle {} inside {} own calls ({}) before they began: {why}",
            counted(staged.copies, "copy", "copies"),
            ctx.per_step(staged_ns),
            if staged.copies == 1 { "its" } else { "their" },
            names.join(", ")
        ));
    }
    ev.metrics.insert("sync_calls_per_step", count as f64 / steps as f64);
    ev.metrics.insert("staged_copy_idle_ns_per_step", staged_ns as f64 / steps as f64);
    ev.api_calls = syncs;
    // The copies' calls beside the syncs: each with the idle time it staged (a sync's row is its time blocked).
    ev.api_calls.extend(staged.calls.iter().map(|(name, &(copies, ns))| CallRow {
        name: format!("{name} (staging)"),
        count: copies,
        total_ns: ns,
    }));
    ev.api_calls.sort_by_key(|r| std::cmp::Reverse(r.total_ns));
    // Staging pageable memory is most of it: pinned memory is the fix, not fewer syncs.
    let staging_most = staged.pageable_idle_ns.min(c.total_ns) * 2 > c.total_ns;
    let summary = if staging_most {
        format!("host blocks staging copies from pageable memory: {}", ctx.per_step_of(c.total_ns, "idle"))
    } else {
        format!("host synchronisation drains the GPU queue: {}", ctx.per_step_of(c.total_ns, "idle"))
    };
    let fix = ctx.fix(if staging_most { PAGEABLE_FIXES } else { SYNC_FIXES });
    let mut f = ctx.finding("sync_stall", c.total_ns, summary, ev, fix);
    f.sources = swept.sources.rows(SourceKind::Sync, ctx.p);
    Some(f)
}
