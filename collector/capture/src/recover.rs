//! `cuflight recover`: a trace whose recording was cut short (its collector killed, its disk full) rewritten as
//! a complete file: every complete block, then a footer. Every reader already accepts such a trace with a
//! warning; a recovered copy reads without one and can be handed to tools that expect a footer.

use cuflight_format::file::{Block, FileError, Footer, TraceReader, TraceWriter};
use cuflight_trace::model::trace::TraceError;
use std::io::Write;
use std::path::Path;

/// What a recovery kept and dropped.
#[derive(Debug, Default)]
pub struct Recovered {
    pub blocks: u64,
    pub events: u64,
    /// Bytes after the last complete block (a block the collector was writing when it stopped).
    pub dropped_bytes: u64,
    /// Why the input had no footer; None when it was complete already (then it is copied as it is).
    pub cut_short: Option<&'static str>,
}

/// Events in the complete blocks of the trace at `path` (one a recording made and has not closed): what it kept
/// after a write error. Counted from the block headers (the index rebuilt), so a huge file is not decompressed.
pub fn events_kept(path: &Path) -> u64 {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path);
    let Ok(mut file) = opened else { return 0 };
    let Ok((index, _)) = cuflight_format::index::read_index(&mut file) else { return 0 };
    let events = index.iter().filter(|e| e.tag == cuflight_format::file::TAG_EVENT_COLUMNS);
    events.fold(0u64, |n, e| n.saturating_add(e.events as u64))
}

/// Copies every complete block of the cuflight trace at `path` into `out` and ends it with a footer.
pub fn recover<W: Write>(path: &Path, out: W) -> Result<Recovered, TraceError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|source| TraceError::Open { path: shown.clone(), source })?;
    let len = file.metadata().map_or(0, |m| m.len());
    let fmt = |source| TraceError::Format { path: shown.clone(), source };
    let mut reader = TraceReader::new(std::io::BufReader::with_capacity(1 << 20, file)).map_err(fmt)?;
    // Writing fails for the output's sake (a full disk), not the input's.
    let wr = |e| match e {
        FileError::Io(io) => TraceError::Output(io),
        source => TraceError::Format { path: shown.clone(), source },
    };
    let mut writer = TraceWriter::new(out).map_err(wr)?;
    let mut r = Recovered::default();
    let mut footer = Footer::default();
    let mut first_command: Option<(u64, Vec<String>)> = None;
    while let Some(block) = reader.next_block().map_err(fmt)? {
        r.blocks += 1;
        match block {
            Block::Process(info) => {
                // The program `record` ran started first.
                if first_command.as_ref().is_none_or(|(t, _)| info.start_realtime_ns < *t) {
                    first_command = Some((info.start_realtime_ns, info.cmdline.clone()));
                }
                writer.write_process(&info).map_err(wr)?;
            }
            Block::Strings { pid, base, bytes } => writer.write_strings(pid, base, &bytes).map_err(wr)?,
            Block::Events { pid, events } => {
                r.events += events.len() as u64;
                writer.write_events(pid, &events).map_err(wr)?;
            }
            Block::Footer(f) => footer = f,
        }
    }
    r.cut_short = reader.cut_short();
    if r.cut_short.is_some() {
        r.dropped_bytes = len.saturating_sub(reader.complete_bytes());
        footer = Footer { command: first_command.map(|(_, c)| c).unwrap_or_default(), exit_code: None, events: 0 };
    }
    writer.finish(footer).map_err(wr)?;
    Ok(r)
}
