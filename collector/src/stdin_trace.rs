//! `-` as a trace: standard input (`ssh gpu-host cat run.cuf | cuflight report -`), and a pipe named as a trace
//! (`cuflight report <(zcat run.cuf.gz)`, a FIFO). Readers seek and make several passes, so the bytes are first
//! copied into an unlinked temporary file in the temporary directory (on disk, not in memory; gone when cuflight
//! exits, however it exits), which is then read through `/proc/self/fd` like any file.
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{IsTerminal, Read, Seek};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::PathBuf;

/// What a trace read from standard input lives in until the command is done.
pub struct StdinTrace {
    _file: File,
    /// The private directory of a named copy (an SQLite export), removed when done.
    dir: Option<PathBuf>,
}

impl Drop for StdinTrace {
    fn drop(&mut self) {
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Replaces a `-` among `paths` by standard input's copy, and each pipe named by path (a FIFO, or `<(zcat
/// run.cuf.gz)`'s `/dev/fd/N`) by its own: they must outlive the reading.
pub fn take(paths: &mut [&mut PathBuf]) -> Result<Vec<StdinTrace>> {
    if paths.iter().filter(|p| p.as_os_str() == "-").count() > 1 {
        bail!("`-` (standard input) is named twice; it can be read once");
    }
    let mut kept = Vec::new();
    for path in paths.iter_mut() {
        if path.as_os_str() == "-" {
            let stdin = std::io::stdin();
            if stdin.is_terminal() {
                bail!("`-` reads a trace from standard input, which is a terminal: pipe one in, or name a file");
            }
            kept.push(spool(&mut stdin.lock(), path, "standard input".into())?);
        } else if std::fs::metadata(&**path).is_ok_and(|m| m.file_type().is_fifo()) {
            // Readers seek and a pipe cannot: read it once, as standard input is. Opening waits for a writer,
            // as any reader of a FIFO does.
            let shown = path.display().to_string();
            let mut pipe = File::open(&**path).with_context(|| format!("cannot open {shown}"))?;
            kept.push(spool(&mut pipe, path, shown)?);
        }
    }
    Ok(kept)
}

/// Copies `from` (named `shown` in messages) into a temporary file and points `path` at the copy.
fn spool(from: &mut dyn Read, path: &mut PathBuf, shown: String) -> Result<StdinTrace> {
    let dir = std::env::temp_dir();
    let in_tmp = || format!("a temporary file in {}", dir.display());
    // Unlinked as soon as it is made: nothing is left behind, however cuflight ends.
    let spool = cuflight_collector::model::spool::Spool::create();
    let mut file = spool.with_context(|| format!("cannot make {} for {shown}", in_tmp()))?.into_file();
    std::io::copy(from, &mut file).with_context(|| format!("cannot copy {shown} to {}", in_tmp()))?;
    let mut head = [0u8; 16];
    let sqlite = file.read_exact_at(&mut head, 0).is_ok() && &head == b"SQLite format 3\0";
    let (stand_in, named) = if sqlite {
        // SQLite opens a database by its resolved name, which an unnamed file has not: a named copy, in a
        // directory of this process's own.
        let private = cuflight_collector::capture::private_dir::create("stdin")?;
        let copy = private.join("standard-input.sqlite");
        let copied = (|| -> std::io::Result<()> {
            let mut to = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&copy)?;
            file.seek(std::io::SeekFrom::Start(0))?;
            std::io::copy(&mut file, &mut to)?;
            Ok(())
        })();
        if let Err(e) = copied {
            let _ = std::fs::remove_dir_all(&private);
            return Err(e).with_context(|| format!("cannot copy {shown} to {}", copy.display()));
        }
        (copy, Some(private))
    } else {
        (PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())), None)
    };
    crate::stand_in::register(&stand_in, shown, None);
    *path = stand_in;
    Ok(StdinTrace { _file: file, dir: named })
}
