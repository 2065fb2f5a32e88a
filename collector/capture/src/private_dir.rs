//! Directories of a cuflight process's own in the temporary directory, for what it must put in a file for a moment
//! (a recorded window, a child's output, a named copy of standard input, an nsys export), and their removal: one
//! rule for every command, so that a killed `serve`, `top`, `mcp` or `report` leaves nothing that the next one
//! does not clear.

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

/// The directory could not be made (the temporary directory missing, full or not writable).
#[derive(Debug, thiserror::Error)]
#[error("cannot make {}: {err} (point TMPDIR at a writable directory)", dir.display())]
pub struct PrivateDirError {
    pub dir: PathBuf,
    #[source]
    pub err: std::io::Error,
}

/// Makes a directory of this process's own in the temporary directory (mode 0700: what goes in is the user's
/// data), named `cuflight-{kind}-{pid}-{ns}`. Those of earlier cuflight processes that are gone (killed before they
/// could remove theirs) are removed first.
fn create(kind: &str) -> Result<PathBuf, PrivateDirError> {
    let tmp = std::env::temp_dir();
    let prefix = format!("cuflight-{kind}-");
    sweep_stale(&tmp, &prefix);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let dir = tmp.join(format!("{prefix}{}-{nanos}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|err| PrivateDirError { dir: dir.clone(), err })?;
    Ok(dir)
}

/// Removes the directories named `{prefix}{pid}[-...]` whose process no longer runs: a SIGKILL runs no destructor.
/// Only real directories owned by this user: a symlink or another user's entry is never followed or touched (a
/// name is not proof of ownership in a shared /tmp). This process's own are live and stay.
fn sweep_stale(tmp: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(tmp) else { return };
    let uid = cuflight_format::channel::euid();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) =
            name.to_str().and_then(|n| n.strip_prefix(prefix)).and_then(|r| r.split('-').next()?.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = std::fs::symlink_metadata(entry.path()).is_ok_and(|m| m.is_dir() && m.uid() == uid);
        if ours && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            // remove_dir_all does not follow symlinks inside the directory.
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A directory of this process's own in the temporary directory, removed with what it holds when dropped, or
/// by [`remove_all_then`] when the process ends without unwinding.
#[derive(Debug)]
pub struct PrivateDir(PathBuf);

/// The [`PrivateDir`]s of this process not dropped yet. Its lock is held while one is removed.
static LIVE: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

impl PrivateDir {
    pub fn new(kind: &str) -> Result<PrivateDir, PrivateDirError> {
        let dir = create(kind)?;
        live().push(dir.clone());
        Ok(PrivateDir(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let mut live = live();
        remove(&self.0);
        live.retain(|d| *d != self.0);
    }
}

/// Removes every [`PrivateDir`] of this process, then runs `end` (`std::process::exit`, a signal's default action:
/// what runs no destructor) and, should `end` return, exits with `status`. The lock is held from the removal to the
/// end, so a thread dropping one meanwhile neither races this removal nor is cut short by the exit halfway: both
/// happened when `top`'s terminal went, its interface and its signal thread each removing the directory as the
/// other exited, and the directory stayed (CI, stop 75).
pub fn remove_all_then(end: impl FnOnce(), status: i32) -> ! {
    // Bounded: should the exit come from a thread that holds the lock (a panic mid-removal), it still exits.
    let live = live_within(Duration::from_secs(5));
    for dir in live.iter().flat_map(|l| l.iter()) {
        remove(dir);
    }
    end();
    std::process::exit(status)
}

/// The lock on [`LIVE`], or None after `wait`.
fn live_within(wait: Duration) -> Option<MutexGuard<'static, Vec<PathBuf>>> {
    let started = std::time::Instant::now();
    loop {
        match LIVE.try_lock() {
            Ok(guard) => return Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => return Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) if started.elapsed() < wait => std::thread::sleep(Duration::from_millis(1)),
            Err(TryLockError::WouldBlock) => return None,
        }
    }
}

fn live() -> MutexGuard<'static, Vec<PathBuf>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn remove(dir: &Path) {
    // A file made while the directory was being emptied (a window that has not ended yet) fails the last step
    // with "directory not empty": tried again, as the writer is ending.
    for _ in 0..3 {
        match std::fs::remove_dir_all(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => std::thread::sleep(Duration::from_millis(20)),
            _ => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_processs_directory_is_swept_and_a_live_ones_and_links_are_not() {
        // A kind of its own, so that no other test's directories are in play.
        let kind = format!("sweeptest{}", std::process::id());
        let tmp = std::env::temp_dir();
        // pid 0 runs nothing in /proc; pid 1 always runs.
        let dead = tmp.join(format!("cuflight-{kind}-0-1"));
        let old_style = tmp.join(format!("cuflight-{kind}-0"));
        let alive = tmp.join(format!("cuflight-{kind}-1-1"));
        let target = tmp.join(format!("cuflight-{kind}-target"));
        let link = tmp.join(format!("cuflight-{kind}-0-2"));
        for d in [&dead, &old_style, &alive, &target] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(target.join("keep"), b"x").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let made = PrivateDir::new(&kind).unwrap();
        assert!(made.path().is_dir());
        let mode = std::fs::metadata(made.path()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert!(!dead.exists() && !old_style.exists(), "a gone process's directories are removed");
        assert!(alive.is_dir(), "a running process's directory stays");
        assert!(
            link.symlink_metadata().is_ok() && target.join("keep").exists(),
            "a link is neither followed nor removed"
        );
        let path = made.path().to_path_buf();
        drop(made);
        assert!(!path.exists(), "dropped, it is removed");
        for p in [&alive, &target] {
            let _ = std::fs::remove_dir_all(p);
        }
        let _ = std::fs::remove_file(&link);
    }

    #[test]
    fn an_exit_removes_the_live_directories_first() {
        // The exit is the test binary's own, run again as a child for this test alone.
        if let Ok(kind) = std::env::var("CUFLIGHT_PRIVATE_DIR_EXIT") {
            let (kept, dropped) = (PrivateDir::new(&kind).unwrap(), PrivateDir::new(&kind).unwrap());
            std::fs::write(kept.path().join("window.cuf"), b"x").unwrap();
            println!("{}\n{}", kept.path().display(), dropped.path().display());
            // One dropped by another thread at the moment of the exit (it may then wait on the lock until the end).
            std::thread::spawn(move || drop(dropped));
            remove_all_then(|| {}, 7);
        }
        let kind = format!("exittest{}", std::process::id());
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "private_dir::tests::an_exit_removes_the_live_directories_first", "--nocapture"])
            .env("CUFLIGHT_PRIVATE_DIR_EXIT", &kind)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(7), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let made: Vec<&str> = stdout.lines().filter(|l| l.contains(&kind)).collect();
        assert_eq!(made.len(), 2, "{stdout}");
        for dir in made {
            assert!(!Path::new(dir).exists(), "{dir} left behind");
        }
    }
}
