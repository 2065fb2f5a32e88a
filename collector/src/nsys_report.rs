//! An Nsight Systems report (`.nsys-rep`, the older `.qdrep`) as a trace. Only nsys reads the report format, so
//! the report is read through its SQLite export, as `nsys stats` does: an export beside it (`run.sqlite`) newer
//! than the report is used as it is; otherwise, where `nsys` is on PATH (or `CUFLIGHT_NSYS` names it), cuflight
//! runs `nsys export --type=sqlite` into a private temporary directory, removed when the command is done (or, if
//! it is killed first, by the next cuflight that makes one). Without either, the importer refuses the report with
//! the export command to run.

use anyhow::{bail, Context, Result};
use cuflight_collector::capture::private_dir::PrivateDir;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The private directories of the exports made for this command, removed when it is done.
pub struct Exported {
    _dirs: Vec<PrivateDir>,
}

/// A report by its name, and not a format cuflight reads by content (a file named so that holds SQLite is read
/// as what it holds).
fn is_report(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    (name.ends_with(".nsys-rep") || name.ends_with(".qdrep"))
        && path.is_file()
        && cuflight_collector::import::detect(path).is_err()
}

/// `nsys`: CUFLIGHT_NSYS, else the first executable `nsys` on PATH.
fn find_nsys() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CUFLIGHT_NSYS").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("nsys"))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0))
}

/// An SQLite export beside `report` (same stem) at least as new as it, as `nsys stats` reuses one.
fn export_beside(report: &Path) -> Option<PathBuf> {
    let sqlite = report.with_extension("sqlite");
    let (r, s) = (std::fs::metadata(report).ok()?, std::fs::symlink_metadata(&sqlite).ok()?);
    let newer = s.is_file() && s.modified().ok()? >= r.modified().ok()?;
    let nsys = cuflight_collector::import::detect(&sqlite).ok() == Some(cuflight_collector::import::Format::NsysSqlite);
    (newer && nsys).then_some(sqlite)
}

/// Replaces each Nsight Systems report among `paths` by its SQLite export; the exports made here live until the
/// returned value is dropped.
pub fn take(paths: &mut [&mut PathBuf]) -> Result<Exported> {
    let mut exported = Exported { _dirs: Vec::new() };
    // A report named twice is exported once (the command then refuses the repeated input as for any trace).
    let mut done: Vec<((u64, u64), PathBuf)> = Vec::new();
    for path in paths.iter_mut().filter(|p| is_report(p)) {
        let report = path.to_path_buf();
        let id = std::fs::metadata(&report).map(|m| (m.dev(), m.ino())).unwrap_or_default();
        if let Some((_, sqlite)) = done.iter().find(|(d, _)| *d == id) {
            **path = sqlite.clone();
            continue;
        }
        if let Some(sqlite) = export_beside(&report) {
            eprintln!("cuflight: reading {} through {}, its SQLite export", report.display(), sqlite.display());
            cuflight_collector::output::read_through(&report);
            done.push((id, sqlite.clone()));
            **path = sqlite;
            continue;
        }
        // Without nsys the path stays: the importer says which command makes it readable.
        let Some(nsys) = find_nsys() else { continue };
        let private = PrivateDir::new("nsys")?;
        let dir = private.path().to_path_buf();
        exported._dirs.push(private);
        let sqlite = dir.join("report.sqlite");
        eprintln!(
            "cuflight: exporting {} to SQLite with {} (`nsys export --type sqlite` once keeps an export to reuse)",
            report.display(),
            nsys.display()
        );
        let out = std::process::Command::new(&nsys)
            .args(["export", "--type=sqlite", "--force-overwrite=true"])
            .arg(format!("--output={}", sqlite.display()))
            .arg(&report)
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("cannot run {}", nsys.display()))?;
        if !out.status.success() || !sqlite.is_file() {
            // What nsys said last, on its error stream before its progress output.
            let last_line = |b: &[u8]| {
                String::from_utf8_lossy(b).lines().map(str::trim).rfind(|l| !l.is_empty()).map(str::to_string)
            };
            let last = last_line(&out.stderr).or_else(|| last_line(&out.stdout)).unwrap_or_else(|| "no output".into());
            bail!("{} export of {} failed ({}): {last}", nsys.display(), report.display(), out.status);
        }
        crate::stand_in::register(&sqlite, report.display().to_string(), Some(report.clone()));
        done.push((id, sqlite.clone()));
        **path = sqlite;
    }
    Ok(exported)
}
