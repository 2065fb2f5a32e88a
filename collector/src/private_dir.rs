//! Directories of this process's own in the temporary directory, for what a command must put in a file for a
//! moment (a child's output, a named copy of standard input, an nsys export), and their removal.

use std::path::{Path, PathBuf};

/// A directory of this process's own in the temporary directory (mode 0700: what goes in is the user's data),
/// named `cuflight-{kind}-{pid}-{ns}`. Those of earlier cuflight processes of this user that are gone (killed
/// before they could remove theirs) are removed first.
pub fn create(kind: &str) -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let tmp = std::env::temp_dir();
    let prefix = format!("cuflight-{kind}-");
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(&prefix).and_then(|r| r.split('-').next()?.parse::<u32>().ok()) else {
            continue;
        };
        // Ours (this user's, a directory and no link) and its process gone.
        let ours = entry.path().symlink_metadata().is_ok_and(|m| m.is_dir() && Some(m.uid()) == uid);
        if ours && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = tmp.join(format!("{prefix}{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir).with_context(|| format!("cannot make {}", dir.display()))?;
    Ok(dir)
}

/// A [`create`]d directory, removed with what it holds when dropped.
pub struct PrivateDir(PathBuf);

impl PrivateDir {
    pub fn new(kind: &str) -> anyhow::Result<PrivateDir> {
        create(kind).map(PrivateDir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
