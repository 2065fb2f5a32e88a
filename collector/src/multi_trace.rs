//! The commands' work over several traces at once: the Parquet export of a job, one clock for a job's hosts, and
//! one time-ordered source of a job's traces for the timeline exports and stats.

use crate::warn_cut_short;
use anyhow::Result;
use cuflight_collector::export::output;
use std::path::PathBuf;

/// `export --format parquet`: every trace's tables into one directory, committed only when complete.
pub fn export_parquet(traces: &[PathBuf], output: Option<PathBuf>, force: bool) -> Result<i32> {
    use cuflight_collector::export::{output_dir::OutputDir, parquet};
    let dest = match output {
        Some(o) => o,
        None => crate::stand_in::beside(&traces[0], "parquet")?,
    };
    let inputs: Vec<&std::path::Path> = traces.iter().map(PathBuf::as_path).collect();
    output::distinct_inputs(&inputs)?;
    let out = OutputDir::create(&dest, &inputs, force, parquet::MANIFEST)?;
    // Part files are named after their trace.
    let sources: Vec<(String, PathBuf)> = parquet::part_stems(traces).into_iter().zip(traces.iter().cloned()).collect();
    // Each trace's steps as the report finds them (and a cut-short trace named, once, as it is first read).
    let mut steps_of = |path: &std::path::Path, source: &mut cuflight_collector::model::source::EventSource| {
        warn_cut_short(path, source.cut_short.as_deref());
        let plans = cuflight_collector::report::plan::plan(source, None)?;
        Ok(plans
            .into_iter()
            .map(|(k, plan)| {
                let collectives = plan.comm.iter().map(|c| c.collective).collect();
                (k, parquet::ProcessSteps { windows: plan.steps.windows, names: plan.steps.names, collectives })
            })
            .collect())
    };
    // Written into a hidden directory renamed into place when complete: errors name the directory the user gave.
    let named = |e: String| anyhow::anyhow!(e.replace(&out.path().display().to_string(), &dest.display().to_string()));
    let written = parquet::export(&sources, out.path(), &mut steps_of).map_err(|e| named(e.to_string()))?;
    let manifest = serde_json::json!({
        "schema_version": parquet::SCHEMA_VERSION,
        "written_by": format!("cuflight {}", env!("CARGO_PKG_VERSION")),
        "tables": written.rows,
        "files": written.files,
        "hosts": written.placement.hosts,
        "sources": traces.iter().map(|t| crate::stand_in::name_of(t)).collect::<Vec<_>>(),
    });
    let path = out.path().join(parquet::MANIFEST);
    std::fs::write(&path, serde_json::to_vec_pretty(&manifest)?)
        .map_err(|e| named(format!("cannot write {}: {e}", path.display())))?;
    out.commit()?;
    print_placement(&written.placement, traces);
    let rows: Vec<String> = written.rows.iter().map(|(t, n)| format!("{t} {n}")).collect();
    eprintln!("cuflight: wrote {}: {} files; rows: {}", dest.display(), written.files, rows.join(", "));
    Ok(0)
}

/// How messages name the traces a command read: the one, or how many were merged.
pub fn shown(traces: &[PathBuf]) -> String {
    match traces {
        [one] => crate::stand_in::name_of(one),
        many => format!("{} traces", many.len()),
    }
}

/// Why `traces` are not one job's, when their times say so and it matters here: traces taken at different
/// times, or one process's windows on several hosts' clocks (the clocks are then not aligned on collectives);
/// then how each host's clock was aligned.
pub fn print_placement(placed: &cuflight_collector::model::job_clock::Placement, traces: &[PathBuf]) {
    use cuflight_collector::model::runs::Separate;
    let several_hosts = placed.hosts.len() > 1;
    if let Some(s) = placed.separate.as_ref().filter(|s| several_hosts || matches!(s.why, Separate::Apart { .. })) {
        let names: Vec<String> = traces.iter().map(|t| crate::stand_in::name_of(t)).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let clocks = if several_hosts {
            "; each host keeps its REALTIME clock (collectives of separate runs do not match)"
        } else {
            ""
        };
        let alone = if s.runs.iter().any(|r| r.files.len() > 1) {
            "; give one run's traces alone to put them on one clock as a job"
        } else {
            ""
        };
        eprintln!("cuflight: warning: {}{clocks}{alone}", s.describe(&names));
    }
    print_hosts(&placed.hosts);
}

/// How each host's clock was aligned, when there are several: a line per host up to 8 (the largest shifts
/// first after the reference), then a summary of the rest, whose figures the output keeps.
fn print_hosts(hosts: &[cuflight_collector::model::align::HostShift]) {
    if hosts.len() > 1 {
        let mut shown: Vec<_> = hosts.iter().collect();
        shown.sort_by_key(|h| (!h.reference, std::cmp::Reverse(h.shift_ns.unsigned_abs()), h.matched == 0));
        let mut summary = None;
        if shown.len() > 8 {
            let rest = &shown[8..];
            let unmatched = rest.iter().filter(|h| h.matched == 0).count();
            let worst = rest.iter().map(|h| h.shift_ns.unsigned_abs()).max().unwrap_or(0);
            summary = Some(format!(
                "cuflight: clocks: {} more hosts shifted by at most {:.1} µs; {unmatched} of them share no collective \
                 with the reference (left on their REALTIME clocks)",
                rest.len(),
                worst as f64 / 1e3
            ));
            shown.truncate(8);
        }
        for h in shown {
            match (h.reference, h.matched) {
                (true, _) => eprintln!("cuflight: clocks: host {} is the reference", h.host),
                (false, 0) => eprintln!(
                    "cuflight: clocks: host {} shares no collective with the reference: left on its REALTIME clock",
                    h.host
                ),
                (false, n) => {
                    let drift = match (h.knots.first(), h.knots.last()) {
                        (Some(a), Some(b)) if h.knots.len() > 1 => format!(
                            ", followed through the run: {:.1} to {:.1} µs over {:.1} s",
                            a.1 as f64 / 1e3,
                            b.1 as f64 / 1e3,
                            (b.0 - a.0) as f64 / 1e9
                        ),
                        _ => String::new(),
                    };
                    eprintln!(
                        "cuflight: clocks: host {} shifted by {:.1} µs ({n} collective ends matched, residual {:.1} \
                         µs{drift})",
                        h.host,
                        h.shift_ns as f64 / 1e3,
                        h.residual_ns as f64 / 1e3
                    )
                }
            }
        }
        if let Some(line) = summary {
            eprintln!("{line}");
        }
    }
}

/// The traces of one job as one source on its clock, each opened once and read as it is needed: no merged
/// copy is written anywhere. `command` names the command in the source's footer.
pub fn job_source(traces: &[PathBuf], command: &str) -> Result<cuflight_collector::model::source::EventSource> {
    may_open_all(traces.len())?;
    let mut opened = |t: &std::path::Path, s: &cuflight_collector::model::source::EventSource| {
        warn_cut_short(t, s.cut_short.as_deref())
    };
    let command = vec!["cuflight".to_string(), command.to_string()];
    let (source, placed) = cuflight_collector::model::source::EventSource::open_job(traces, command, &mut opened)?;
    print_placement(&placed, traces);
    Ok(source)
}

/// Refuses up front (rather than at the 1,000th file) to read more traces at once than this process may open.
/// Soft limits on open files are often 1,024 under a far higher hard limit: raised here (only in commands that
/// read traces: `record` and `launch` hand their limits to the program, which must run as it would without
/// cuflight).
pub fn may_open_all(traces: usize) -> Result<()> {
    let may_open = rlimit::increase_nofile_limit(u64::MAX)
        .or_else(|_| rlimit::getrlimit(rlimit::Resource::NOFILE).map(|l| l.0))
        .unwrap_or(u64::MAX);
    if traces as u64 + 64 > may_open {
        anyhow::bail!(
            "{traces} traces are read at once and this process may open {may_open} files (ulimit -n): raise the \
             limit, or merge them first (`cuflight merge TRACES -o job.cuf` reads one at a time) and give it job.cuf"
        );
    }
    Ok(())
}
