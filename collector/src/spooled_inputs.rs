//! Traces that cannot be read where they are, read once into an unlinked temporary file in the temporary
//! directory (on disk, not in memory; gone when cuflight exits, however it exits), which is then read through
//! `/proc/self/fd` like any file: readers seek and make several passes.
//! - `-`: standard input (`ssh gpu-host cat run.cuf | cuflight report -`);
//! - a pipe named as a trace (`cuflight report <(zcat run.cuf.gz)`, a FIFO);
//! - a compressed trace, gzip or zstd (`run.cuf.gz`, `run.sqlite.zst`, `trace.json.zst`), but Kineto JSON in gzip,
//!   which its importer reads as it decompresses.
//!
//! A flight recorder's dump image (`cuflight-PID-TIME-N.seg`) is read as the trace `cuflight dump IMAGE` makes of
//! it, written into a private directory of this process's own, removed when done.

use anyhow::{bail, Context, Result};
use cuflight_collector::capture::private_dir::PrivateDir;
use std::fs::File;
use std::io::{IsTerminal, Read, Seek};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::PathBuf;

/// What a trace read once (standard input, a pipe, a compressed file) lives in until the command is done.
pub struct Spooled {
    _file: File,
    /// The private directory of a named copy (an SQLite export), removed when done.
    _dir: Option<PrivateDir>,
}

/// Replaces a `-` among `paths` by standard input's copy, each pipe named by path (a FIFO, or `<(zcat
/// run.cuf.gz)`'s `/dev/fd/N`) and each compressed trace by its own: they must outlive the reading.
pub fn take(paths: &mut [&mut PathBuf]) -> Result<Vec<Spooled>> {
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
            kept.push(spool(&mut stdin.lock(), path, "standard input".into(), "copy", None)?);
            continue;
        }
        let Ok(meta) = std::fs::metadata(&**path) else { continue };
        let shown = path.display().to_string();
        if meta.file_type().is_fifo() {
            // Opening waits for a writer, as any reader of a FIFO does.
            let mut pipe = File::open(&**path).with_context(|| format!("cannot open {shown}"))?;
            kept.push(spool(&mut pipe, path, shown, "copy", None)?);
        } else if meta.is_file() {
            if is_dump_image(path) {
                kept.push(dump_image(path, shown)?);
            } else if let Some(inner) = decompressor(path)? {
                let left = MAX_EXPANSION.saturating_mul(meta.len().max(64 << 10));
                let mut decoding = Decompressing { inner, left, cut: None };
                let original = Some(path.to_path_buf());
                kept.push(spool(&mut decoding, path, shown.clone(), "decompress", original)?);
                if let Some(why) = decoding.cut {
                    eprintln!("cuflight: warning: {shown}: the compressed file ends early ({why}); read what it holds");
                }
            }
        }
    }
    Ok(kept)
}

/// Whether `path` begins as a flight recorder's dump image does (the segment's magic).
pub fn is_dump_image(path: &std::path::Path) -> bool {
    let mut head = [0u8; 8];
    File::open(path).and_then(|f| f.read_exact_at(&mut head, 0)).is_ok()
        && u64::from_le_bytes(head) == cuflight_format::segment::SEGMENT_MAGIC
}

/// The trace of the dump image at `path` (validated as another process's output, and only one of this user's), in a
/// private directory; `path` then names it, and messages the image.
fn dump_image(path: &mut PathBuf, shown: String) -> Result<Spooled> {
    use cuflight_collector::capture::dump;
    let private = PrivateDir::new("image")?;
    let trace = private.path().join("dump.cuf");
    let d = dump::dump(&dump::Target::Image(path.clone()), &trace, None, true)?;
    let file = File::open(&trace)?;
    eprintln!(
        "cuflight: {shown}: a flight recorder's dump ({}), read as the trace `cuflight dump` makes of it",
        d.reason
    );
    crate::stand_in::register(&trace, shown, Some(path.clone()));
    *path = trace;
    Ok(Spooled { _file: file, _dir: Some(private) })
}

/// How many times its own size a compressed trace may grow to (counting at least 64 KiB of it): gzip and zstd make
/// a trace 1 to 20 times smaller; far more is a file made to fill the temporary directory.
const MAX_EXPANSION: u64 = 1000;

/// A decoder of `path` where it is a trace compressed with gzip or zstd, but Kineto JSON in gzip (its importer
/// decompresses as it reads). None for anything else, which the readers then name.
fn decompressor(path: &std::path::Path) -> Result<Option<Box<dyn Read>>> {
    use cuflight_collector::import::Format;
    Ok(match compressed(path)? {
        Some((Compression::Gzip, Format::KinetoJson)) | None => None,
        Some((how, _)) => how.decoder(File::open(path).with_context(|| format!("cannot open {}", path.display()))?),
    })
}

/// Whether `path` is a trace compressed with gzip or zstd, of a format cuflight reads.
pub fn is_compressed_trace(path: &std::path::Path) -> bool {
    matches!(compressed(path), Ok(Some(_)))
}

#[derive(Clone, Copy)]
enum Compression {
    Gzip,
    Zstd,
}

impl Compression {
    fn decoder(self, file: File) -> Option<Box<dyn Read>> {
        match self {
            Compression::Gzip => Some(Box::new(flate2::read::MultiGzDecoder::new(std::io::BufReader::new(file)))),
            Compression::Zstd => Some(Box::new(zstd::stream::read::Decoder::new(file).ok()?)),
        }
    }
}

/// How `path` is compressed and the format of what it holds (read from its first 64 decompressed bytes); None
/// where it is not compressed or holds no trace cuflight reads (a log archive beside the traces).
fn compressed(path: &std::path::Path) -> Result<Option<(Compression, cuflight_collector::import::Format)>> {
    use cuflight_collector::import::{sniff, Format};
    let file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut head = [0u8; 4];
    if file.read_exact_at(&mut head, 0).is_err() {
        return Ok(None);
    }
    let how = match head {
        [0x1f, 0x8b, ..] => Compression::Gzip,
        [0x28, 0xb5, 0x2f, 0xfd] => Compression::Zstd,
        _ => return Ok(None),
    };
    let Some(decoder) = how.decoder(file) else { return Ok(None) };
    let mut inner = Vec::with_capacity(64);
    let _ = decoder.take(64).read_to_end(&mut inner);
    Ok(match sniff(&inner) {
        None | Some(Format::KinetoJsonGzip) => None,
        Some(format) => Some((how, format)),
    })
}

/// A decoder's output, at most `left` bytes; a stream that breaks off ends there, and `cut` says why.
struct Decompressing {
    inner: Box<dyn Read>,
    left: u64,
    cut: Option<String>,
}

impl Read for Decompressing {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = match self.inner.read(buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => return Err(e),
            Err(e) => {
                self.cut = Some(e.to_string());
                0
            }
        };
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            std::io::Error::other(format!("it decompresses to more than {MAX_EXPANSION} times its size"))
        })?;
        Ok(n)
    }
}

/// Copies `from` (named `shown` in messages; the file `original`, if any) into a temporary file and points `path`
/// at the copy.
fn spool(
    from: &mut dyn Read,
    path: &mut PathBuf,
    shown: String,
    verb: &str,
    original: Option<PathBuf>,
) -> Result<Spooled> {
    let dir = std::env::temp_dir();
    let in_tmp = || format!("a temporary file in {} (TMPDIR chooses where)", dir.display());
    // Unlinked as soon as it is made: nothing is left behind, however cuflight ends.
    let spool = cuflight_collector::model::spool::Spool::create();
    let mut file = spool.with_context(|| format!("cannot make {} for {shown}", in_tmp()))?.into_file();
    std::io::copy(from, &mut file).with_context(|| format!("cannot {verb} {shown} into {}", in_tmp()))?;
    let mut head = [0u8; 16];
    let sqlite = file.read_exact_at(&mut head, 0).is_ok() && &head == b"SQLite format 3\0";
    let (stand_in, named) = if sqlite {
        // SQLite opens a database by its resolved name, which an unnamed file has not: a named copy, in a
        // directory of this process's own.
        let private = PrivateDir::new("stdin")?;
        let copy = private.path().join("standard-input.sqlite");
        let copied = (|| -> std::io::Result<()> {
            let mut to = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&copy)?;
            file.seek(std::io::SeekFrom::Start(0))?;
            std::io::copy(&mut file, &mut to)?;
            Ok(())
        })();
        if let Err(e) = copied {
            return Err(e).with_context(|| format!("cannot copy {shown} to {}", copy.display()));
        }
        (copy, Some(private))
    } else {
        (PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())), None)
    };
    crate::stand_in::register(&stand_in, shown, original);
    *path = stand_in;
    Ok(Spooled { _file: file, _dir: named })
}
