//! Output files that never destroy data: an output that is one of the command's inputs is refused, an existing
//! file is replaced only when the user said `--force`, a symbolic link to a regular file is never written
//! through, and a replacement is written to a temporary file beside the old one and renamed over it only when
//! complete, so a failed or killed command leaves the old file as it was. Devices and pipes (`/dev/null`,
//! `/dev/stdout`, a FIFO) are written directly: there is nothing there to destroy.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{0} is also an input of this command; choose another output")]
    IsInput(String),
    #[error("{0} exists; pass --force to replace it")]
    Exists(String),
    #[error("{0} is a symbolic link; refusing to write through it (name the file itself)")]
    Symlink(String),
    #[error("cannot create {0}: {1}")]
    Create(String, std::io::Error),
    #[error("cannot write {0}: {1}")]
    Write(String, std::io::Error),
    #[error("{0} and {1} are the same file; name each trace once")]
    SameInput(String, String),
    #[error("{0} is a directory; name a file in it")]
    IsDirectory(String),
    #[error("this command does not write to standard output (`-o -`); name a file")]
    NoStdout,
}

/// Where the bytes go until [`Output::commit`].
enum Target {
    /// A new file at its final name (nothing was there): a killed command leaves what it wrote so far, which
    /// is what a recording should leave (readable up to its last complete block).
    New,
    /// A temporary file renamed over the existing one at commit.
    Temp(PathBuf),
    /// A device or pipe, written in place.
    Special,
}

/// An output being written. Dropped without [`Output::commit`], it removes what it created.
pub struct Output {
    path: PathBuf,
    target: Target,
    file: Option<File>,
}

/// Files a command reads through a stand-in (an Nsight Systems report read as its SQLite export): inputs too, so
/// that an output naming one is refused.
static READ_THROUGH: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// `original` is read through a stand-in file: an output must not replace it.
pub fn read_through(original: &Path) {
    READ_THROUGH.lock().unwrap_or_else(|e| e.into_inner()).push(original.to_path_buf());
}

/// The files registered with [`read_through`].
pub fn read_through_inputs() -> Vec<PathBuf> {
    READ_THROUGH.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// Refuses a command's inputs when one file is named twice (by another name, a link, `./`): a job's traces read
/// twice would count one rank twice (merged, it would be two ranks). Missing inputs are left to their reader.
pub fn distinct_inputs(inputs: &[&Path]) -> Result<(), OutputError> {
    let mut seen: rustc_hash::FxHashMap<(u64, u64), &Path> = rustc_hash::FxHashMap::default();
    for &input in inputs {
        let Ok(m) = std::fs::metadata(input) else { continue };
        if let Some(first) = seen.insert((m.dev(), m.ino()), input) {
            return Err(OutputError::SameInput(first.display().to_string(), input.display().to_string()));
        }
    }
    Ok(())
}

/// Checks `path` as an output of a command reading `inputs` (see the module docs); Ok(Some(meta)) when it
/// exists and may be replaced, Ok(None) when it does not exist.
fn check(path: &Path, inputs: &[&Path], force: bool) -> Result<Option<std::fs::Metadata>, OutputError> {
    let name = || path.display().to_string();
    // Commands that can write to standard output take `-` before they get here; elsewhere it would be a file
    // named "-" (and `record`'s program writes its own output to standard output).
    if path.as_os_str() == "-" {
        return Err(OutputError::NoStdout);
    }
    let Ok(link) = std::fs::symlink_metadata(path) else { return Ok(None) };
    let meta = std::fs::metadata(path).ok();
    if let Some(meta) = &meta {
        let through = read_through_inputs();
        for input in inputs.iter().copied().chain(through.iter().map(PathBuf::as_path)) {
            if std::fs::metadata(input).is_ok_and(|m| same_file(&m, meta)) {
                return Err(OutputError::IsInput(name()));
            }
        }
    }
    let special = meta.as_ref().is_some_and(|m| {
        let t = m.file_type();
        t.is_char_device() || t.is_fifo() || t.is_socket() || t.is_block_device()
    });
    if special {
        return Ok(meta);
    }
    if link.file_type().is_symlink() {
        return Err(OutputError::Symlink(name()));
    }
    if link.is_dir() {
        return Err(OutputError::IsDirectory(name()));
    }
    if !force {
        return Err(OutputError::Exists(name()));
    }
    Ok(meta)
}

impl Output {
    /// Opens `path` for writing (see the module docs). `inputs` are the files the command reads.
    pub fn create(path: &Path, inputs: &[&Path], force: bool) -> Result<Output, OutputError> {
        let create_err = |e| OutputError::Create(path.display().to_string(), e);
        let existing = check(path, inputs, force)?;
        let special = existing.as_ref().is_some_and(|m| !m.file_type().is_file());
        if special {
            let file = OpenOptions::new().write(true).open(path).map_err(create_err)?;
            return Ok(Output { path: path.to_path_buf(), target: Target::Special, file: Some(file) });
        }
        let exclusive = |p: &Path| {
            OpenOptions::new().write(true).create_new(true).custom_flags(libc::O_NOFOLLOW).mode(0o644).open(p)
        };
        if existing.is_none() {
            // create_new: a file that appeared since the check is not ours to truncate.
            let file = exclusive(path).map_err(|e| match e.kind() {
                std::io::ErrorKind::AlreadyExists => OutputError::Exists(path.display().to_string()),
                _ => create_err(e),
            })?;
            return Ok(Output { path: path.to_path_buf(), target: Target::New, file: Some(file) });
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let base = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let temp = dir.join(format!(".{base}.{}.cuflight-tmp", std::process::id()));
        let file = exclusive(&temp).map_err(create_err)?;
        Ok(Output { path: path.to_path_buf(), target: Target::Temp(temp), file: Some(file) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file to write into.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("file present until commit")
    }

    /// A second handle on the same open file (for writers that take ownership).
    pub fn try_clone(&self) -> Result<File, OutputError> {
        let f = self.file.as_ref().expect("file present until commit");
        f.try_clone().map_err(|e| OutputError::Write(self.path.display().to_string(), e))
    }

    /// Flushes and puts the file in place.
    pub fn commit(mut self) -> Result<(), OutputError> {
        let werr = |p: &Path, e| OutputError::Write(p.display().to_string(), e);
        if let Some(mut f) = self.file.take() {
            f.flush().map_err(|e| werr(&self.path, e))?;
            if !matches!(self.target, Target::Special) {
                f.sync_data().map_err(|e| werr(&self.path, e))?;
            }
        }
        if let Target::Temp(temp) = std::mem::replace(&mut self.target, Target::Special) {
            if let Err(e) = std::fs::rename(&temp, &self.path) {
                let _ = std::fs::remove_file(&temp);
                return Err(werr(&self.path, e));
            }
        }
        Ok(())
    }

    /// Whether committing replaces an existing file (written beside it until then), which a failure abandons.
    pub fn replaces(&self) -> bool {
        matches!(self.target, Target::Temp(_))
    }

    /// After a failure part-way: a new file keeps what was written (a trace is readable up to its last complete
    /// block); a replacement is abandoned, so the old file stays as it was.
    pub fn keep_partial(mut self) -> Result<(), OutputError> {
        match self.target {
            Target::New | Target::Special => {
                self.target = Target::Special; // nothing to remove on drop
                Ok(())
            }
            Target::Temp(_) => Ok(()), // dropped: the temporary file goes, the old file stays
        }
    }

    /// Writes `bytes` as the whole output and commits.
    pub fn write_all_and_commit(mut self, bytes: &[u8]) -> Result<(), OutputError> {
        let path = self.path.display().to_string();
        self.file().write_all(bytes).map_err(|e| OutputError::Write(path, e))?;
        self.commit()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        self.file = None;
        match &self.target {
            Target::New => {
                let _ = std::fs::remove_file(&self.path);
            }
            Target::Temp(t) => {
                let _ = std::fs::remove_file(t);
            }
            Target::Special => {}
        }
    }
}

/// The default output of a command reading `input`: `input` with extension `ext`, or, where that would be the
/// input itself (exporting `k.json` to JSON), `<stem>.cuflight.<ext>`.
pub fn default_beside(input: &Path, ext: &str) -> PathBuf {
    // run.cuf.gz and trace.json.zst are named for what they hold: run.EXT, trace.EXT.
    let compressed = input.extension().is_some_and(|e| e == "gz" || e == "zst");
    let plain = if compressed { input.with_extension("").with_extension(ext) } else { input.with_extension(ext) };
    if plain == input
        || std::fs::metadata(&plain).ok().zip(std::fs::metadata(input).ok()).is_some_and(|(a, b)| same_file(&a, &b))
    {
        return input.with_extension(format!("cuflight.{ext}"));
    }
    plain
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test's directory in the temporary directory, removed when the test ends (passed or not).
    struct Scratch(PathBuf);

    impl std::ops::Deref for Scratch {
        type Target = Path;
        fn deref(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("cuflight-output-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }

    #[test]
    fn an_input_is_never_an_output() {
        let d = dir("input");
        let f = d.join("k.json");
        std::fs::write(&f, b"keep").unwrap();
        assert!(matches!(Output::create(&f, &[&f], true), Err(OutputError::IsInput(_))));
        std::os::unix::fs::symlink(&f, d.join("alias")).unwrap();
        assert!(matches!(Output::create(&d.join("alias"), &[&f], true), Err(OutputError::IsInput(_))));
        std::fs::hard_link(&f, d.join("hard")).unwrap();
        assert!(matches!(Output::create(&d.join("hard"), &[&f], true), Err(OutputError::IsInput(_))));
        assert_eq!(std::fs::read(&f).unwrap(), b"keep");
        assert_eq!(default_beside(&f, "json"), d.join("k.cuflight.json"));
        assert_eq!(default_beside(&d.join("t.cuf"), "json"), d.join("t.json"));
        // A compressed trace's output is named for what it holds.
        assert_eq!(default_beside(&d.join("t.cuf.gz"), "parquet"), d.join("t.parquet"));
        assert_eq!(default_beside(&d.join("k.json.zst"), "perfetto-trace"), d.join("k.perfetto-trace"));
    }

    #[test]
    fn existing_files_need_force_and_survive_a_failed_write() {
        let d = dir("force");
        let f = d.join("out.txt");
        std::fs::write(&f, b"old").unwrap();
        assert!(matches!(Output::create(&f, &[], false), Err(OutputError::Exists(_))));
        let mut o = Output::create(&f, &[], true).unwrap();
        o.file().write_all(b"half").unwrap();
        drop(o); // failed before commit
        assert_eq!(std::fs::read(&f).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&*d).unwrap().count(), 1, "no temporary file left behind");
        Output::create(&f, &[], true).unwrap().write_all_and_commit(b"new").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"new");
    }

    #[test]
    fn symlinks_are_not_written_through_but_devices_are_written() {
        let d = dir("link");
        let victim = d.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("out")).unwrap();
        assert!(matches!(Output::create(&d.join("out"), &[], true), Err(OutputError::Symlink(_))));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        Output::create(Path::new("/dev/null"), &[], false).unwrap().write_all_and_commit(b"x").unwrap();
        // A directory is named as such even with --force; "-" is not a file named "-".
        assert!(matches!(Output::create(&d, &[], true), Err(OutputError::IsDirectory(_))));
        assert!(matches!(Output::create(Path::new("-"), &[], true), Err(OutputError::NoStdout)));
        let fresh = d.join("fresh");
        let o = Output::create(&fresh, &[], false).unwrap();
        drop(o);
        assert!(!fresh.exists(), "an uncommitted new file is removed");
    }
}
