//! `-` as a trace: standard input (`ssh gpu-host cat run.cuf | cuflight report -`). Readers seek and make several
//! passes, so the bytes are first copied into an unlinked temporary file in the temporary directory (on disk, not
//! in memory; gone when cuflight exits, however it exits), which is then read through `/proc/self/fd` like any
//! file.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::IsTerminal;
use std::io::Seek;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
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

/// Replaces a `-` among `paths` by standard input's copy, which must outlive the reading.
pub fn take(paths: &mut [&mut PathBuf]) -> Result<Option<StdinTrace>> {
    let mut dashes = paths.iter_mut().filter(|p| p.as_os_str() == "-");
    let Some(first) = dashes.next() else { return Ok(None) };
    if dashes.next().is_some() {
        bail!("`-` (standard input) is named twice; it can be read once");
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        bail!("`-` reads a trace from standard input, which is a terminal: pipe one in, or name a file");
    }
    let dir = std::env::temp_dir();
    let in_tmp = || format!("a temporary file in {}", dir.display());
    // Unlinked as soon as it is made: nothing is left behind, however cuflight ends.
    let spool = cuflight_collector::model::spool::Spool::create();
    let mut file = spool.with_context(|| format!("cannot make {} for standard input", in_tmp()))?.into_file();
    std::io::copy(&mut stdin.lock(), &mut file)
        .with_context(|| format!("cannot copy standard input to {}", in_tmp()))?;
    let mut head = [0u8; 16];
    let sqlite = file.read_exact_at(&mut head, 0).is_ok() && &head == b"SQLite format 3\0";
    let (path, named) = if sqlite {
        // SQLite opens a database by its resolved name, which an unnamed file has not: a named copy, in a
        // directory of this process's own.
        let private = cuflight_collector::capture::private_dir::create("stdin")?;
        let path = private.join("standard-input.sqlite");
        let copied = (|| -> std::io::Result<()> {
            let mut to = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
            file.seek(std::io::SeekFrom::Start(0))?;
            std::io::copy(&mut file, &mut to)?;
            Ok(())
        })();
        if let Err(e) = copied {
            let _ = std::fs::remove_dir_all(&private);
            return Err(e).with_context(|| format!("cannot copy standard input to {}", path.display()));
        }
        (path, Some(private))
    } else {
        (PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())), None)
    };
    crate::stand_in::register(&path, "standard input".into(), None);
    **first = path;
    Ok(Some(StdinTrace { _file: file, dir: named }))
}
