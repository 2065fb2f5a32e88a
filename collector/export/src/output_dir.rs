//! An output directory (the Parquet tables) written as [`cuflight_trace::output`] writes files: never destroying data.
//! The tables are written into a temporary directory beside the destination and renamed into place only when
//! complete. An existing destination must be empty, or a previous cuflight export (it holds the manifest) that
//! `--force` replaces; any other directory is refused, whatever the flags, as is a symbolic link, and a
//! destination that holds one of the command's inputs.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum OutputDirError {
    #[error("{0} is a symbolic link; refusing to write through it (name the directory itself)")]
    Symlink(String),
    #[error("{0} exists and is not a directory")]
    NotADirectory(String),
    #[error("{0} holds files that are not a cuflight Parquet export; choose a new or empty directory")]
    Foreign(String),
    #[error("{0} holds a cuflight Parquet export; pass --force to replace it")]
    Exists(String),
    #[error("{0} holds {1}, an input of this command; choose another output")]
    HoldsInput(String, String),
    #[error("cannot write {0}: {1}")]
    Io(String, std::io::Error),
}

/// A directory being written; dropped without [`OutputDir::commit`], it removes what it wrote.
pub struct OutputDir {
    dest: PathBuf,
    temp: PathBuf,
    committed: bool,
}

impl OutputDir {
    /// `marker`: the file a previous export of ours holds at its root.
    pub fn create(dest: &Path, inputs: &[&Path], force: bool, marker: &str) -> Result<OutputDir, OutputDirError> {
        let name = || dest.display().to_string();
        if let Ok(link) = std::fs::symlink_metadata(dest) {
            if link.file_type().is_symlink() {
                return Err(OutputDirError::Symlink(name()));
            }
            if !link.is_dir() {
                return Err(OutputDirError::NotADirectory(name()));
            }
            let empty = std::fs::read_dir(dest).map_err(|e| OutputDirError::Io(name(), e))?.next().is_none();
            if !empty {
                if !dest.join(marker).is_file() {
                    return Err(OutputDirError::Foreign(name()));
                }
                if !force {
                    return Err(OutputDirError::Exists(name()));
                }
            }
            let root = std::fs::canonicalize(dest).map_err(|e| OutputDirError::Io(name(), e))?;
            let through = cuflight_trace::output::read_through_inputs();
            for input in inputs.iter().copied().chain(through.iter().map(PathBuf::as_path)) {
                if std::fs::canonicalize(input).is_ok_and(|i| i.starts_with(&root)) {
                    return Err(OutputDirError::HoldsInput(name(), input.display().to_string()));
                }
            }
        }
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file_name = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "out".into());
        let temp = parent.join(format!(".{file_name}.cuflight-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&temp);
        std::fs::create_dir(&temp).map_err(|e| OutputDirError::Io(temp.display().to_string(), e))?;
        Ok(OutputDir { dest: dest.to_path_buf(), temp, committed: false })
    }

    /// Where to write until [`Self::commit`].
    pub fn path(&self) -> &Path {
        &self.temp
    }

    /// Puts the complete directory in place (replacing an empty one, or a previous export: see the module docs).
    pub fn commit(mut self) -> Result<(), OutputDirError> {
        let io = |p: &Path, e| OutputDirError::Io(p.display().to_string(), e);
        if std::fs::rename(&self.temp, &self.dest).is_err() {
            // A non-empty destination (a previous export, checked at create): moved aside, then removed.
            let old = self.temp.with_extension("old");
            std::fs::rename(&self.dest, &old).map_err(|e| io(&self.dest, e))?;
            if let Err(e) = std::fs::rename(&self.temp, &self.dest) {
                let _ = std::fs::rename(&old, &self.dest);
                return Err(io(&self.dest, e));
            }
            let _ = std::fs::remove_dir_all(&old);
        }
        self.committed = true;
        Ok(())
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_new_empty_or_our_own_directories_are_written() {
        let base = std::env::temp_dir().join(format!("cuflight-outdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(base.join("foreign")).unwrap();
        std::fs::write(base.join("foreign/notes.txt"), "mine").unwrap();
        let err = OutputDir::create(&base.join("foreign"), &[], true, "m.json").err().unwrap();
        assert!(matches!(err, OutputDirError::Foreign(_)), "{err}");
        // New: written, then ours; again without --force: refused; with it: replaced.
        let dest = base.join("tables");
        let out = OutputDir::create(&dest, &[], false, "m.json").unwrap();
        std::fs::write(out.path().join("m.json"), "1").unwrap();
        out.commit().unwrap();
        assert!(matches!(OutputDir::create(&dest, &[], false, "m.json"), Err(OutputDirError::Exists(_))));
        let input = dest.join("m.json");
        let held = OutputDir::create(&dest, &[&input], true, "m.json").err().unwrap();
        assert!(matches!(held, OutputDirError::HoldsInput(..)), "{held}");
        let out = OutputDir::create(&dest, &[], true, "m.json").unwrap();
        std::fs::write(out.path().join("m.json"), "2").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read_to_string(dest.join("m.json")).unwrap(), "2");
        // Dropped before commit: nothing left behind, the old export intact.
        let out = OutputDir::create(&dest, &[], true, "m.json").unwrap();
        let temp = out.path().to_path_buf();
        drop(out);
        assert!(!temp.exists());
        assert_eq!(std::fs::read_to_string(dest.join("m.json")).unwrap(), "2");
        std::os::unix::fs::symlink(&dest, base.join("link")).unwrap();
        assert!(matches!(OutputDir::create(&base.join("link"), &[], true, "m.json"), Err(OutputDirError::Symlink(_))));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
