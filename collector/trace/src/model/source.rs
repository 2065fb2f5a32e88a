//! A trace as one time-ordered stream of events, for analyses that accumulate as events go by (`stats`, and in
//! time the report and exports), so that their memory is bounded by what they keep, not by the trace.
//!
//! A cuflight trace file is read through its block index: blocks are opened in the order of the earliest time they
//! can hold and merged, so only blocks that overlap in time are in memory at once (a recording's blocks overlap by
//! about one CUPTI flush period). Device timestamps are moved onto the host clock with the one rule of
//! [`crate::model::trace::clock_map`] before merging. Imported traces (Kineto JSON, nsys SQLite) and version-1 files,
//! whose blocks carry no time range, are loaded whole and merged across processes the same way.
//!
//! The order is the in-memory loader's, so either path gives equal results: by start time, then process key, then
//! file order (blocks, and events within a block), which keeps a thread's events with equal times in ring order.

use crate::model::trace::{clock_map, Process, Trace, TraceError, MAX_STRING_BYTES};
use cuflight_format::file::{Block, FileError, Footer, TraceReader, TAG_EVENT_COLUMNS, TAG_PROCESS};
use cuflight_format::file::{TAG_EVENTS, TAG_STRINGS};
use cuflight_format::index::{read_index, IndexEntry};
use cuflight_format::{EventKind, RawEvent};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::io::{BufReader, Seek, SeekFrom};
use std::path::Path;

use crate::model::cut::Cut;
use crate::model::spool::Spool;
use crate::model::windows::Windows;

/// A trace's processes (facts and strings; `events` left empty) and a time-ordered pass over its events.
pub struct EventSource {
    /// Processes by file key, as in [`Trace::processes`].
    pub processes: BTreeMap<u32, Process>,
    pub footer: Footer,
    /// Why the file ended before its footer, if it did (known once the pass has run for rebuilt indexes).
    pub cut_short: Option<String>,
    pub fractional_us_timestamps: bool,
    /// After [`EventSource::for_each`]: the most blocks held in memory at once (what bounds its memory).
    pub peak_open_blocks: usize,
    events: Events,
    /// The stretches passes keep ([`EventSource::cut_to`]).
    cut: Option<Windows>,
}

enum Events {
    /// A loaded trace's events, per process key, each sorted by start.
    Loaded(BTreeMap<u32, Vec<RawEvent>>),
    /// An imported trace's events set aside on disk in sorted runs ([`crate::model::spool`]): each chunk is a
    /// block that needs no sorting.
    Spooled { shown: String, spool: Box<Spool>, blocks: Vec<PendingBlock> },
    /// Several traces of one job on its clock ([`EventSource::job`]).
    Job(Box<job::Job>),
    File {
        /// How errors name the input.
        shown: String,
        /// Boxed: the reader's buffers make it large, and a source has one.
        input: Box<BlockFile>,
        blocks: Vec<PendingBlock>,
    },
}

/// An events block not opened yet: the earliest host-clock time any of its events can have.
#[derive(Clone)]
struct PendingBlock {
    earliest: u64,
    seq: u32,
    offset: u64,
    pid: u32,
    /// How many events its header claims (a claim: only ever used to reserve memory).
    events: u32,
}

/// An opened block: its events on the host clock, sorted by start (stable: ring order within equal times).
struct OpenBlock {
    pid: u32,
    seq: u32,
    events: Vec<RawEvent>,
    next: usize,
}

impl OpenBlock {
    fn new(pid: u32, seq: u32, events: Vec<RawEvent>) -> OpenBlock {
        OpenBlock { pid, seq, events, next: 0 }
    }
}

/// Heap key of an open block's next event: the documented order, then the slot that holds it.
type HeadKey = Reverse<(u64, u32, u32, u32, usize)>;

impl EventSource {
    /// An imported trace whose events wait in `spool`.
    pub fn from_spool(trace: Trace, spool: Spool, shown: String) -> EventSource {
        let mut blocks: Vec<PendingBlock> = spool
            .chunks
            .iter()
            .enumerate()
            .map(|(i, c)| PendingBlock {
                earliest: c.first_start,
                seq: i as u32,
                offset: i as u64,
                pid: c.pid,
                events: c.events,
            })
            .collect();
        blocks.sort_by_key(|b| (b.earliest, b.seq));
        Self::with_events(trace, Events::Spooled { shown, spool: Box::new(spool), blocks })
    }

    /// A loaded trace as a source (its events move into the source).
    pub fn from_trace(mut trace: Trace) -> EventSource {
        let events = trace
            .processes
            .iter_mut()
            .map(|(&k, p)| {
                let mut events = std::mem::take(&mut p.events);
                // Loaded native traces are sorted already (a stable sort of a sorted vector is one pass).
                events.sort_by_key(|e| e.start);
                (k, events)
            })
            .collect();
        Self::with_events(trace, Events::Loaded(events))
    }

    /// A trace's processes and facts with its events in `events`.
    fn with_events(trace: Trace, events: Events) -> EventSource {
        EventSource {
            processes: trace.processes,
            footer: trace.footer,
            cut_short: trace.cut_short,
            fractional_us_timestamps: trace.fractional_us_timestamps,
            peak_open_blocks: 0,
            events,
            cut: None,
        }
    }

    /// `None` when the file cannot stream (version 1: blocks without time ranges).
    pub(crate) fn open_native(path: &Path) -> Result<Option<EventSource>, TraceError> {
        let shown = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| TraceError::Open { path: shown.clone(), source })?;
        Self::open_input(Box::new(file), shown)
    }

    /// A cuflight trace held in memory (fuzzing, tests); `None` for version 1.
    pub fn from_bytes(bytes: Vec<u8>, name: &str) -> Result<Option<EventSource>, TraceError> {
        Self::open_input(Box::new(std::io::Cursor::new(bytes)), name.to_string())
    }

    fn open_input(input: Box<dyn ReadSeek>, shown: String) -> Result<Option<EventSource>, TraceError> {
        let fmt = |source| TraceError::Format { path: shown.clone(), source };
        let mut input = BufReader::with_capacity(1 << 18, input);
        TraceReader::new(&mut input).map_err(fmt)?;
        let (index, _) = read_index(&mut input).map_err(fmt)?;
        if index.iter().any(|e| e.tag == TAG_EVENTS) {
            return Ok(None);
        }
        let (footer, cut_short) = match footer_of(&mut input, &index).map_err(fmt)? {
            Ok(footer) => (footer, None),
            Err(why) => (Footer::default(), Some(why)),
        };
        let mut input = BlockFile { reader: TraceReader::resume(input), pos: None };
        let mut processes: BTreeMap<u32, Process> = BTreeMap::new();
        let mut with_facts = std::collections::HashSet::new();
        let mut string_bytes = 0u64;
        for e in index.iter().filter(|e| e.tag == TAG_PROCESS || e.tag == TAG_STRINGS) {
            match input.read(e.offset).map_err(fmt)? {
                Some(Block::Process(info)) => {
                    with_facts.insert(info.file_key());
                    let p = processes.entry(info.file_key()).or_default();
                    p.rank = info.rank;
                    p.info = info;
                }
                Some(Block::Strings { pid, base, bytes }) => {
                    string_bytes += bytes.len() as u64;
                    if string_bytes > MAX_STRING_BYTES {
                        let why = format!("more than {} MiB of strings", MAX_STRING_BYTES >> 20);
                        return Err(fmt(FileError::Corrupt(why)));
                    }
                    let p = processes.entry(pid).or_default();
                    for (id, s) in cuflight_format::segment::parse_strings(base, &bytes).filter(|(_, s)| !s.is_empty())
                    {
                        crate::model::trace::insert_string(&mut p.strings, &mut p.mangled, id, s);
                    }
                }
                _ => {}
            }
        }
        let event_blocks: Vec<&IndexEntry> = index.iter().filter(|e| e.tag == TAG_EVENT_COLUMNS).collect();
        for e in &event_blocks {
            processes.entry(e.pid).or_default();
        }
        for (&key, p) in processes.iter_mut() {
            if p.info.pid == 0 {
                p.info.pid = key;
            }
            // Version 2 facts hold every clock pair the agent took (it takes none it does not put there). Without
            // facts (cut short before they were written) the pairs are its ClockSync events, found by a first pass
            // over that process's blocks alone.
            p.clock = if with_facts.contains(&key) {
                clock_map(&p.info, &[])
            } else {
                let mut pairs = Vec::new();
                for e in event_blocks.iter().filter(|e| e.pid == key) {
                    if let Some(Block::Events { events, .. }) = input.read(e.offset).map_err(fmt)? {
                        pairs.extend(events.iter().filter(|e| e.kind() == Some(EventKind::ClockSync)));
                        input.reader.recycle(events);
                    }
                }
                clock_map(&p.info, &pairs)
            };
        }
        let mut blocks: Vec<PendingBlock> = Vec::with_capacity(event_blocks.len());
        for (seq, e) in event_blocks.iter().enumerate() {
            // A block's header holds the earliest start as recorded. With the device on the host clock (the
            // identity map) that is the earliest on the host clock too. Otherwise device times are on CUPTI's
            // clock and the header's minimum says nothing of their image (a block's host events may be later
            // than its device records, which arrive a flush period late): the block is read once here and its
            // earliest taken after alignment. Only traces recorded on CUPTI's own clock pay for this pass.
            let map = &processes[&e.pid].clock;
            let earliest = if map.is_identity() {
                e.first
            } else {
                match input.read(e.offset).map_err(fmt)? {
                    Some(Block::Events { mut events, .. }) => {
                        crate::model::trace::align_device_events(map, &mut events);
                        let first = events.iter().map(|e| e.start).min().unwrap_or(e.first);
                        input.reader.recycle(events);
                        first
                    }
                    _ => 0,
                }
            };
            blocks.push(PendingBlock { earliest, seq: seq as u32, offset: e.offset, pid: e.pid, events: e.events });
        }
        blocks.sort_by_key(|b| (b.earliest, b.seq));
        Ok(Some(EventSource {
            processes,
            footer,
            cut_short,
            fractional_us_timestamps: false,
            peak_open_blocks: 0,
            events: Events::File { shown, input: Box::new(input), blocks },
            cut: None,
        }))
    }

    /// From now on, passes give what a timeline draws in `windows` ([`crate::model::cut`]) instead of every event.
    pub fn cut_to(&mut self, windows: Windows) {
        self.cut = Some(windows);
    }

    /// Calls `f` with each event, in time order, with the key and facts of the process it belongs to. Each call
    /// is a whole pass (analyses that need a plan first, such as the report's step windows, make two or three):
    /// a file is read again block by block, a loaded trace's events are lent and put back.
    pub fn for_each(&mut self, mut f: impl FnMut(u32, &Process, &RawEvent)) -> Result<(), TraceError> {
        let Some(windows) = self.cut.clone() else { return self.pass(|_, key, p, e| f(key, p, e)) };
        let mut cut = Cut::new(windows);
        let default = Process::default();
        self.pass(|all, key, p, e| cut.feed(key, p, e, &mut |key, e| f(key, process_of(all, key, &default), e)))?;
        cut.finish(&mut |key, e| f(key, process_of(&self.processes, key, &default), e));
        Ok(())
    }

    /// Every event, in time order, with the processes, the key and facts of the process it belongs to.
    fn pass(&mut self, mut f: impl FnMut(&BTreeMap<u32, Process>, u32, &Process, &RawEvent)) -> Result<(), TraceError> {
        match std::mem::replace(&mut self.events, Events::Loaded(BTreeMap::new())) {
            Events::Loaded(mut per_process) => {
                // Processes without events keep their (empty) place; the others are lent to the merge.
                let mut back: BTreeMap<u32, Vec<RawEvent>> = BTreeMap::new();
                per_process.retain(|&pid, events| events.is_empty().then(|| back.insert(pid, Vec::new())).is_none());
                let blocks = per_process
                    .into_iter()
                    .map(|(pid, events)| OpenBlock { pid, seq: 0, events, next: 0 })
                    .collect::<Vec<_>>();
                let peak = merge(&self.processes, blocks, Vec::new(), |_, _| Ok(None), Some(&mut back), &mut f);
                self.events = Events::Loaded(back);
                self.peak_open_blocks = peak?;
            }
            Events::Job(mut job) => {
                let peak = job.pass(&mut self.processes, &mut f);
                self.events = Events::Job(job);
                self.peak_open_blocks = peak?;
            }
            mut events => {
                let mut scratch = OpenScratch::default();
                let pending = events.pending().to_vec();
                let processes = &self.processes;
                let open = |b: &PendingBlock, spare| events.open_block(processes, b, spare, &mut scratch);
                let peak = merge(processes, Vec::new(), pending, open, None, &mut f);
                self.events = events;
                self.peak_open_blocks = peak?;
                for (key, p) in self.processes.iter_mut() {
                    p.refused = scratch.refused.get(key).copied().unwrap_or(0);
                }
            }
        }
        Ok(())
    }
}

/// What opening blocks needs between them in one pass: the sort's scratch, and the events refused per process.
#[derive(Default)]
struct OpenScratch {
    sort: SortScratch,
    refused: BTreeMap<u32, u64>,
}

impl OpenScratch {
    /// Events of process `key` refused in the pass.
    fn refused_of(&self, key: u32) -> u64 {
        self.refused.get(&key).copied().unwrap_or(0)
    }
}

impl Events {
    /// The blocks a pass opens, by earliest time (none for a loaded trace, whose events are at hand).
    fn pending(&self) -> &[PendingBlock] {
        match self {
            Events::Spooled { blocks, .. } | Events::File { blocks, .. } => blocks,
            Events::Loaded(_) | Events::Job(_) => &[],
        }
    }

    /// Block `b` read, its events on the host clock and sorted by start (`spare`: a vector to decode into).
    fn open_block(
        &mut self,
        processes: &BTreeMap<u32, Process>,
        b: &PendingBlock,
        spare: Option<Vec<RawEvent>>,
        scratch: &mut OpenScratch,
    ) -> Result<Option<OpenBlock>, TraceError> {
        match self {
            Events::Spooled { shown, spool, .. } => {
                let mut events = spare.unwrap_or_default();
                let chunk = spool.chunks[b.offset as usize];
                spool.read(&chunk, &mut events).map_err(|e| TraceError::Import {
                    path: shown.clone(),
                    what: format!("reading back the events set aside in {}: {e}", std::env::temp_dir().display()),
                })?;
                Ok(Some(OpenBlock { pid: b.pid, seq: b.seq, events, next: 0 }))
            }
            Events::File { shown, input, .. } => {
                let fmt = |source| TraceError::Format { path: shown.clone(), source };
                if let Some(v) = spare {
                    input.reader.recycle(v);
                }
                let Some(Block::Events { mut events, .. }) = input.read(b.offset).map_err(fmt)? else {
                    return Ok(None);
                };
                // Written by an agent that knew no better (or by a hostile hand): never shown, counted.
                let before = events.len();
                events.retain(|e| !crate::model::trace::impossible_time(e));
                if events.len() < before {
                    *scratch.refused.entry(b.pid).or_default() += (before - events.len()) as u64;
                }
                let default = Process::default();
                crate::model::trace::align_device_events(&process_of(processes, b.pid, &default).clock, &mut events);
                scratch.sort.stable_by_start(&mut events);
                // A writer never puts an event before the start its header declares: this block's header
                // (and the index built from it) cannot be trusted, and events would come out of order.
                if events.first().is_some_and(|e| e.start < b.earliest) {
                    let why = format!(
                        "the block at byte {} holds events earlier than its header declares (`cuflight recover` rewrites the headers)",
                        b.offset
                    );
                    return Err(fmt(FileError::Corrupt(why)));
                }
                Ok(Some(OpenBlock { pid: b.pid, seq: b.seq, events, next: 0 }))
            }
            Events::Loaded(_) | Events::Job(_) => Ok(None),
        }
    }
}

/// Process `key` of `all`, or `default` (a process without facts) when there is none.
fn process_of<'a>(all: &'a BTreeMap<u32, Process>, key: u32, default: &'a Process) -> &'a Process {
    all.get(&key).unwrap_or(default)
}

/// Loads a whole trace into memory (for analyses that still need every event at hand), through the stream: each
/// process's events arrive in their final order, so none is sorted afterwards (a stable sort of a large process
/// needs half its size again), and each vector is reserved once from the index. Same result as [`Trace::load`],
/// which version 1 files, whose blocks carry no time range, still go through.
pub fn load_trace(path: &Path) -> Result<Trace, TraceError> {
    let Some(mut source) = EventSource::open_native(path)? else { return Trace::load(path) };
    let mut events: BTreeMap<u32, Vec<RawEvent>> = BTreeMap::new();
    if let Events::File { blocks, .. } = &source.events {
        let mut claims: BTreeMap<u32, usize> = BTreeMap::new();
        for b in blocks {
            let n = claims.entry(b.pid).or_default();
            *n = n.saturating_add(b.events as usize);
        }
        for (pid, n) in claims {
            // A claim of the file: memory that cannot be had is refused here, and what is never filled is
            // never touched.
            let _ = events.entry(pid).or_default().try_reserve_exact(n);
        }
    }
    source.for_each(|key, _, e| events.entry(key).or_default().push(*e))?;
    for (key, v) in events {
        source.processes.entry(key).or_default().events = v;
    }
    Ok(Trace {
        processes: source.processes,
        footer: source.footer,
        fractional_us_timestamps: false,
        cut_short: source.cut_short,
    })
}

/// K-way merge of open blocks, opening pending ones (sorted by earliest time) as soon as they could hold the
/// next event. Returns the most blocks open at once.
fn merge(
    processes: &BTreeMap<u32, Process>,
    open: Vec<OpenBlock>,
    pending: Vec<PendingBlock>,
    mut open_block: impl FnMut(&PendingBlock, Option<Vec<RawEvent>>) -> Result<Option<OpenBlock>, TraceError>,
    mut keep: Option<&mut BTreeMap<u32, Vec<RawEvent>>>,
    f: &mut impl FnMut(&BTreeMap<u32, Process>, u32, &Process, &RawEvent),
) -> Result<usize, TraceError> {
    let mut m = Merger { slots: Vec::new(), free: Vec::new(), heap: BinaryHeap::new(), spare: None };
    for b in open {
        m.place(b);
    }
    let default = Process::default();
    let mut pending = pending.into_iter().peekable();
    loop {
        if let Some(next) = pending.peek() {
            // `>=`: a block that may start at the very time of the next event may also come before it.
            if m.heap.peek().is_none_or(|Reverse(h)| h.0 >= next.earliest) {
                let next = pending.next().expect("peeked");
                if let Some(b) = open_block(&next, m.spare.take())? {
                    m.place(b);
                }
                continue;
            }
        }
        let Some(Reverse((_, pid, seq, pos, slot))) = m.heap.pop() else { break };
        let process = processes.get(&pid).unwrap_or(&default);
        let block = m.slots[slot].as_mut().expect("a slot in the heap holds its block");
        // A run of this block's events that come before every other block's next one (and before any block not
        // yet open may start) goes out without a trip through the heap: blocks overlap only at their edges.
        let mut pos = pos as usize;
        let exhausted = loop {
            f(processes, pid, process, &block.events[pos]);
            pos += 1;
            let Some(e) = block.events.get(pos) else { break true };
            let key = (e.start, pid, seq, pos as u32);
            let first = m.heap.peek().is_none_or(|Reverse(h)| key < (h.0, h.1, h.2, h.3))
                && pending.peek().is_none_or(|next| e.start < next.earliest);
            if !first {
                m.heap.push(Reverse((e.start, pid, seq, pos as u32, slot)));
                break false;
            }
        };
        block.next = pos;
        if exhausted {
            let done = m.slots[slot].take().map(|b| b.events);
            match keep.as_deref_mut() {
                // A loaded process's events, lent for the pass, go back.
                Some(kept) => kept.extend(done.map(|v| (pid, v))),
                // Its vector is decoded into again: no allocation per block.
                None => m.spare = done,
            }
            m.free.push(slot);
        }
    }
    Ok(m.slots.len())
}

struct Merger {
    slots: Vec<Option<OpenBlock>>,
    free: Vec<usize>,
    heap: BinaryHeap<HeadKey>,
    spare: Option<Vec<RawEvent>>,
}

impl Merger {
    fn place(&mut self, b: OpenBlock) {
        let Some(first) = b.events.first() else { return };
        let key = (first.start, b.pid, b.seq, 0);
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some(b);
        self.heap.push(Reverse((key.0, key.1, key.2, key.3, slot)));
    }
}

/// A stable sort by start that allocates nothing once warm: (start, position) keys sorted unstably, then the
/// events gathered into a second vector that is kept for the next block (a block holds one ring after another,
/// each in its own order, so equal times must keep their positions).
#[derive(Default)]
struct SortScratch {
    keys: Vec<(u64, u32)>,
    sorted: Vec<RawEvent>,
}

impl SortScratch {
    fn stable_by_start(&mut self, events: &mut Vec<RawEvent>) {
        // Most blocks are nearly in order (work recorded just after the call that launched it): moving the few
        // late events back costs a fraction of a sort. A block far from order stops early and is sorted.
        let budget = events.len() / 2 + 64;
        if insertion_sort_within(events, budget) {
            return;
        }
        self.keys.clear();
        self.keys.extend(events.iter().enumerate().map(|(i, e)| (e.start, i as u32)));
        self.keys.sort_unstable();
        self.sorted.clear();
        self.sorted.extend(self.keys.iter().map(|&(_, i)| events[i as usize]));
        std::mem::swap(events, &mut self.sorted);
    }
}

/// Sorts `v` by start, stably, by insertion while it takes at most `budget` moves; false (with `v` a permutation
/// of itself that kept the order of equal starts) when it would take more.
fn insertion_sort_within(v: &mut [RawEvent], mut budget: usize) -> bool {
    for i in 1..v.len() {
        if v[i].start >= v[i - 1].start {
            continue;
        }
        let x = v[i];
        let mut j = i;
        while j > 0 && v[j - 1].start > x.start {
            if budget == 0 {
                v[j] = x;
                return false;
            }
            v[j] = v[j - 1];
            j -= 1;
            budget -= 1;
        }
        v[j] = x;
    }
    true
}

/// What a source reads: a file, or bytes in memory.
pub trait ReadSeek: std::io::Read + Seek {}
impl<T: std::io::Read + Seek> ReadSeek for T {}

/// Reads blocks by offset, mostly in file order, with one reader whose working memory is reused: a block that
/// starts within what is already buffered is reached without a seek (a seek empties the buffer).
struct BlockFile {
    reader: TraceReader<BufReader<Box<dyn ReadSeek>>>,
    /// Where the last block read ended (`None` after an error or before the first read).
    pos: Option<u64>,
}

impl BlockFile {
    fn read(&mut self, offset: u64) -> Result<Option<Block>, FileError> {
        let input = self.reader.input_mut();
        match self.pos {
            Some(p) if offset >= p && offset - p <= input.buffer().len() as u64 => {
                input.seek_relative((offset - p) as i64)?
            }
            _ => {
                input.seek(SeekFrom::Start(offset))?;
            }
        }
        self.reader.at_block();
        let block = self.reader.next_block();
        self.pos = matches!(block, Ok(Some(_))).then(|| offset + self.reader.complete_bytes());
        block
    }
}

/// The footer after the last indexed block, or why the file ends without one.
fn footer_of<R: std::io::Read + Seek>(
    input: &mut R,
    index: &[IndexEntry],
) -> Result<Result<Footer, String>, FileError> {
    // After the last indexed block, or the file header when no block precedes the footer.
    input.seek(SeekFrom::Start(index.last().map_or(16, |last| last.offset)))?;
    let mut reader = TraceReader::resume(&mut *input);
    while let Some(block) = reader.next_block_where(|t| t == cuflight_format::file::TAG_FOOTER)? {
        if let Some(Block::Footer(f)) = block {
            return Ok(Ok(f));
        }
    }
    Ok(Err(reader.cut_short().unwrap_or("no footer").to_string()))
}

/// Several traces of one job as one source (kept apart: a file of its own).
#[path = "job_source.rs"]
mod job;
pub use job::{merged_info, JobKeys};

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
