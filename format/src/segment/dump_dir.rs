//! The disk a flight recorder's automatic dumps may take (`cuflight launch --flight-recorder --dump-dir DIR`).
//!
//! Dumps are written by themselves, on a crash, a hang, a sticky error, SIGUSR2 or a slow step, by every process
//! launched that way, for as long as a cluster runs: nobody watches the directory, and a dump that fills the disk
//! makes the program's own next checkpoint fail, which is worse than the dump is worth. So a dump is written only
//! where, with it, the dumps in the directory stay within `--dump-max-use` and the file system keeps
//! `--dump-keep-free` available. The defaults are systemd-coredump's for core dumps, which platform teams know
//! (coredump.conf(5): MaxUse= a tenth and KeepFree= 15% of the file system's size, at most 4G each). Old dumps are
//! the user's to keep or remove (only a partial dump a killed process left is swept, by `launch`).
//!
//! Async-signal-safe (a crash's dump runs in a signal handler, `launch` checks once before the program starts):
//! raw system calls into fixed buffers, no allocation, no lock; the directory's entries are another user's input
//! too (counted only as regular files named as dumps, never followed through a link).

use std::ffi::CStr;

/// A dump's name, `cuflight-PID-TIME-N.seg`, and the hidden name it is written under until whole
/// (`.cuflight-PID-TIME-N.seg.partial`), linked into place then.
pub const DUMP_PREFIX: &str = "cuflight-";
pub const DUMP_SUFFIX: &str = ".seg";
pub const PARTIAL_PREFIX: &str = ".cuflight-";
pub const PARTIAL_SUFFIX: &str = ".seg.partial";

/// The defaults' share of the file system's size, in percent, and their cap (systemd-coredump's).
pub const DEFAULT_MAX_USE_PERCENT: u64 = 10;
pub const DEFAULT_KEEP_FREE_PERCENT: u64 = 15;
pub const DEFAULT_CAP_BYTES: u64 = 4 << 30;
/// Entries looked at in the directory at most: a crash's dump must not wait on a directory of millions of files
/// (past this, the dumps counted are those seen).
const MAX_ENTRIES: u32 = 100_000;

/// `--dump-max-use` and `--dump-keep-free`, in bytes; None: the default, from the file system's size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub max_use: Option<u64>,
    pub keep_free: Option<u64>,
}

/// What the dump directory holds now, and its file system's size and the bytes available in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Room {
    /// Dump images there (`cuflight-*.seg`, regular files), and the disk they take.
    pub dumps: u32,
    pub used: u64,
    pub fs_size: u64,
    /// To an unprivileged user, as `df` shows it.
    pub available: u64,
}

/// Why a dump of `image` bytes is not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The dumps there (`used`) and this one would take more than `limit`.
    MaxUse { used: u64, image: u64, limit: u64, default: bool },
    /// Writing it would leave less than `keep` of the `available` bytes.
    KeepFree { available: u64, image: u64, keep: u64, default: bool },
}

impl Limits {
    /// The dumps' budget on a file system of `fs_size` bytes.
    pub fn max_use(&self, fs_size: u64) -> u64 {
        self.max_use.unwrap_or_else(|| default_share(fs_size, DEFAULT_MAX_USE_PERCENT))
    }

    /// What the file system keeps available.
    pub fn keep_free(&self, fs_size: u64) -> u64 {
        self.keep_free.unwrap_or_else(|| default_share(fs_size, DEFAULT_KEEP_FREE_PERCENT))
    }

    /// Why a dump of `image` bytes may not be written into `room`, if it may not: the disk first.
    pub fn refusal(&self, room: &Room, image: u64) -> Option<Refusal> {
        let keep = self.keep_free(room.fs_size);
        if room.available < image.saturating_add(keep) {
            return Some(Refusal::KeepFree {
                available: room.available,
                image,
                keep,
                default: self.keep_free.is_none(),
            });
        }
        let limit = self.max_use(room.fs_size);
        (room.used.saturating_add(image) > limit).then_some(Refusal::MaxUse {
            used: room.used,
            image,
            limit,
            default: self.max_use.is_none(),
        })
    }
}

impl Limits {
    /// Why no automatic dump would be written into `dir` even now (`launch` says so before the program starts;
    /// allocates, unlike the rest of this module).
    pub fn refused_now(&self, dir: &std::path::Path) -> Option<Refusal> {
        use std::os::unix::ffi::OsStrExt;
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
        self.refusal(&measure(&path)?, 0)
    }
}

fn default_share(fs_size: u64, percent: u64) -> u64 {
    (fs_size / 100).saturating_mul(percent).min(DEFAULT_CAP_BYTES)
}

/// A size as the lines below show it: whole MiB rounded up, or GiB from 10 GiB.
struct Size(u64);

impl std::fmt::Display for Size {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 >= 10 << 30 {
            write!(f, "{} GiB", (self.0 + (1 << 29)) >> 30)
        } else {
            write!(f, "{} MiB", self.0.div_ceil(1 << 20))
        }
    }
}

/// Written into a fixed buffer by the agent (`core::fmt` neither allocates nor locks) and by `launch`.
impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let by_default = |default: bool, what: &'static str| if default { what } else { "" };
        match *self {
            Refusal::MaxUse { used, image, limit, default } => {
                match (used, image) {
                    (0, _) => write!(f, "this dump would take {}", Size(image))?,
                    (_, 0) => write!(f, "the dumps there take {}", Size(used))?,
                    _ => write!(f, "the dumps there take {} and this one would add {}", Size(used), Size(image))?,
                }
                write!(
                    f,
                    ", over the {} --dump-max-use allows{} (remove old dumps, or raise it)",
                    Size(limit),
                    by_default(default, ", by default a tenth of the file system and 4 GiB at most")
                )
            }
            Refusal::KeepFree { available, image, keep, default } => {
                write!(f, "its file system has {} available", Size(available))?;
                if image > 0 {
                    write!(f, ", and writing this dump ({}) would leave less than", Size(image))?;
                } else {
                    write!(f, ", less than")?;
                }
                write!(
                    f,
                    " the {} --dump-keep-free keeps for the program{} (free space there, or lower it)",
                    Size(keep),
                    by_default(default, ", by default 15% of the file system and 4 GiB at most")
                )
            }
        }
    }
}

/// Whether a directory entry's name is a dump image's (`cuflight-PID-TIME-N.seg`).
pub fn is_dump_name(name: &[u8]) -> bool {
    name.starts_with(DUMP_PREFIX.as_bytes()) && name.ends_with(DUMP_SUFFIX.as_bytes())
}

/// The pid in a partial dump's name, where `name` is one.
pub fn partial_dump_pid(name: &str) -> Option<u32> {
    let middle = name.strip_prefix(PARTIAL_PREFIX)?.strip_suffix(PARTIAL_SUFFIX)?;
    middle.split('-').next()?.parse().ok()
}

/// Measures `dir`: None where it cannot be opened as a directory or its file system cannot be read (the dump's own
/// `open` then says what is wrong).
pub fn measure(dir: &CStr) -> Option<Room> {
    // SAFETY: a NUL-terminated path; a directory only, never through a link at its last component.
    let fd =
        unsafe { libc::open(dir.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    let room = measure_open(fd);
    // SAFETY: our descriptor.
    unsafe { libc::close(fd) };
    room
}

fn measure_open(fd: libc::c_int) -> Option<Room> {
    // fstatfs, not fstatvfs: the system call itself (glibc's statvfs may read /proc/mounts for the mount flags,
    // allocating). Blocks count in fragments where the file system states their size (as statvfs converts them).
    // SAFETY: statfs is plain data; zeroed is valid and fstatfs fills it.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: an open descriptor and our struct.
    if unsafe { libc::fstatfs(fd, &mut fs) } != 0 {
        return None;
    }
    let unit = if fs.f_frsize > 0 { fs.f_frsize as u64 } else { fs.f_bsize as u64 };
    let mut room = Room {
        fs_size: (fs.f_blocks as u64).saturating_mul(unit),
        available: (fs.f_bavail as u64).saturating_mul(unit),
        ..Room::default()
    };
    // getdents64 fills this with linux_dirent64 records: d_ino u64, d_off i64, d_reclen u16, d_type u8, then the
    // NUL-terminated name; u64-aligned so that nothing below reads unaligned.
    let mut buf = [0u64; 512];
    let mut seen = 0u32;
    while seen < MAX_ENTRIES {
        // SAFETY: our descriptor and buffer, its length in bytes.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), std::mem::size_of_val(&buf)) };
        if n <= 0 {
            break;
        }
        // SAFETY: the kernel wrote `n` bytes of the buffer (n > 0 and at most its length).
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr() as *const u8, (n as usize).min(4096)) };
        let mut at = 0usize;
        while let Some(record) = bytes.get(at..) {
            let (Some(len), Some(name)) = (record.get(16..18), record.get(19..)) else { break };
            let len = u16::from_ne_bytes([len[0], len[1]]) as usize;
            if len < 20 || len > record.len() {
                break;
            }
            seen += 1;
            let name = &name[..len - 19];
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            if is_dump_name(&name[..end]) && end < name.len() {
                add_if_image(fd, &name[..=end], &mut room);
            }
            at += len;
        }
    }
    Some(room)
}

/// Counts `name` (NUL-terminated) in `room` where it is a regular file: by the blocks it takes, not its length (an
/// image has holes, and a sparse file another user made takes nothing).
fn add_if_image(dir: libc::c_int, name: &[u8], room: &mut Room) {
    // SAFETY: stat is plain data; zeroed is valid and fstatat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our directory descriptor, a NUL-terminated name inside our buffer, never following a link.
    let ok = unsafe { libc::fstatat(dir, name.as_ptr() as *const libc::c_char, &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if ok == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG {
        room.dumps = room.dumps.saturating_add(1);
        room.used = room.used.saturating_add((st.st_blocks as u64).saturating_mul(512));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn the_defaults_are_shares_of_the_file_system_capped() {
        let l = Limits::default();
        assert_eq!((l.max_use(10 << 30), l.keep_free(10 << 30)), ((10 << 30) / 100 * 10, (10 << 30) / 100 * 15));
        assert_eq!((l.max_use(1 << 50), l.keep_free(1 << 50)), (4 << 30, 4 << 30), "a cluster's file system");
        let set = Limits { max_use: Some(7), keep_free: Some(0) };
        assert_eq!((set.max_use(1 << 50), set.keep_free(1 << 50)), (7, 0));
    }

    #[test]
    fn a_dump_is_refused_for_the_disk_first_then_for_the_budget() {
        let l = Limits { max_use: Some(1000), keep_free: Some(500) };
        let room = Room { dumps: 2, used: 600, fs_size: 1 << 20, available: 1000 };
        assert_eq!(l.refusal(&room, 400), None, "600 + 400 within 1000; 600 left available");
        let keep = Limits { max_use: Some(10_000), ..l };
        let refused = Some(Refusal::KeepFree { available: 1000, image: 501, keep: 500, default: false });
        assert_eq!(keep.refusal(&room, 501), refused, "499 would be left");
        assert_eq!(l.refusal(&room, 501), refused, "the disk is said first");
        let roomy = Room { available: 1 << 30, ..room };
        assert_eq!(
            l.refusal(&roomy, 401),
            Some(Refusal::MaxUse { used: 600, image: 401, limit: 1000, default: false })
        );
        // Nothing kept free: still no dump larger than what is available.
        let none = Limits { max_use: None, keep_free: Some(0) };
        assert!(none.refusal(&Room { available: 10, ..room }, 11).is_some());
        let said = l.refusal(&roomy, 5 << 20).unwrap().to_string();
        assert!(
            said.contains("take 1 MiB and this one would add 5 MiB, over the 1 MiB --dump-max-use allows"),
            "{said}"
        );
        let default = Limits::default().refusal(&Room { available: 100 << 20, fs_size: 2 << 30, ..room }, 0).unwrap();
        assert!(default.to_string().contains("by default 15% of the file system"), "{default}");
    }

    #[test]
    fn names_of_dumps_and_of_dumps_being_written() {
        assert!(is_dump_name(b"cuflight-12-1796141393-0.seg") && !is_dump_name(b".cuflight-12-1-0.seg.partial"));
        assert_eq!(partial_dump_pid(".cuflight-12-1796141393-0.seg.partial"), Some(12));
        assert_eq!(partial_dump_pid("cuflight-12-1796141393-0.seg"), None);
        assert_eq!(partial_dump_pid(".cuflight-x-1-0.seg.partial"), None);
    }

    #[test]
    fn only_regular_files_named_as_dumps_count_by_the_disk_they_take() {
        let dir = std::env::temp_dir().join(format!("cuflight-dump-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("cuflight-1-2-0.seg"), vec![1u8; 1 << 20]).unwrap();
        let sparse = std::fs::File::create(dir.join("cuflight-1-2-1.seg")).unwrap();
        sparse.set_len(100 << 20).unwrap();
        std::fs::write(dir.join("notes.seg"), vec![1u8; 1 << 20]).unwrap();
        std::fs::write(dir.join("cuflight-1-2-0.seg.txt"), vec![1u8; 1 << 20]).unwrap();
        std::os::unix::fs::symlink(dir.join("notes.seg"), dir.join("cuflight-9-9-9.seg")).unwrap();
        std::fs::create_dir(dir.join("cuflight-dir.seg")).unwrap();
        for i in 0..300 {
            std::fs::write(dir.join(format!("other-{i}")), b"x").unwrap(); // more entries than one read returns
        }
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        let room = measure(&path).unwrap();
        assert_eq!(room.dumps, 2, "{room:?}");
        assert!((1 << 20..(1 << 20) + (64 << 10)).contains(&room.used), "the sparse one takes nothing: {room:?}");
        assert!(room.fs_size > 0 && room.available <= room.fs_size);
        let link = dir.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert_eq!(
            measure(&std::ffi::CString::new(link.as_os_str().as_bytes()).unwrap()),
            None,
            "never through a link"
        );
        assert_eq!(measure(c"/nonexistent/cuflight"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
