//! The trace file's writer thread: `record`'s drain loop hands it drained blocks and goes straight back to
//! emptying rings, while this thread encodes, compresses and writes them. A bounded queue keeps memory bounded
//! (a writer that falls behind slows the drain, and the agents' rings then count their drops). The first write
//! error is kept; everything after it is discarded and the drain loop stops recording.

use cuflight_format::file::{FileError, Footer, ProcessInfo, TraceWriter};
use cuflight_format::RawEvent;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

enum Job {
    Process(Box<ProcessInfo>),
    Strings {
        pid: u32,
        base: u64,
        bytes: Vec<u8>,
    },
    Events {
        pid: u32,
        events: Vec<RawEvent>,
    },
    /// Push buffered bytes into the file (into the kernel: a killed collector cannot lose them then).
    Flush,
}

impl Job {
    /// What the job holds in memory until it is written.
    fn bytes(&self) -> usize {
        match self {
            Job::Strings { bytes, .. } => bytes.len(),
            Job::Events { events, .. } => std::mem::size_of_val(events.as_slice()),
            Job::Process(_) | Job::Flush => 0,
        }
    }
}

/// Jobs the queue holds; what bounds its memory is [`QUEUED_BYTES`].
const QUEUE: usize = 4096;
/// Event and string bytes handed to the writer and not yet written, beyond which the drain loop waits for it.
/// Generous, so that a writer that is starved of CPU for a while (it runs at low priority, and a busy program
/// on a small machine takes the cores) delays the file rather than the drain: 4 M events.
const QUEUED_BYTES: usize = 256 << 20;

pub struct Sink {
    tx: Option<SyncSender<Job>>,
    /// Bytes of queued strings and events (the writer subtracts what it has written).
    queued: Arc<AtomicUsize>,
    thread: Option<JoinHandle<Result<(), FileError>>>,
    error: Arc<Mutex<Option<String>>>,
    /// Finished writer's footer goes through `finish`, which needs the writer back.
    footer_tx: SyncSender<Footer>,
    events: u64,
}

impl Sink {
    pub fn start<W: Write + Send + 'static>(writer: TraceWriter<W>) -> Sink {
        let (tx, rx) = sync_channel::<Job>(QUEUE);
        let (footer_tx, footer_rx) = sync_channel::<Footer>(1);
        let error = Arc::new(Mutex::new(None));
        let err = error.clone();
        let queued = Arc::new(AtomicUsize::new(0));
        let written = queued.clone();
        let thread = std::thread::Builder::new()
            .name("cuflight-writer".into())
            .spawn(move || {
                cuflight_format::channel::lower_this_thread_priority();
                run(writer, rx, footer_rx, err, written)
            })
            .expect("spawn the writer thread");
        Sink { tx: Some(tx), queued, thread: Some(thread), error, footer_tx, events: 0 }
    }

    fn send(&self, job: Job) {
        let Some(tx) = &self.tx else { return };
        let bytes = job.bytes();
        // Over budget: wait for the writer (it is alive while the channel is; a dead one discards, see `run`).
        while bytes > 0 && self.queued.load(Ordering::Acquire) > QUEUED_BYTES && self.error().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        let _ = tx.send(job);
    }

    pub fn process(&self, info: ProcessInfo) {
        self.send(Job::Process(Box::new(info)));
    }

    pub fn strings(&self, pid: u32, base: u64, bytes: Vec<u8>) {
        if !bytes.is_empty() {
            self.send(Job::Strings { pid, base, bytes });
        }
    }

    pub fn events(&mut self, pid: u32, events: Vec<RawEvent>) {
        if !events.is_empty() {
            self.events += events.len() as u64;
            self.send(Job::Events { pid, events });
        }
    }

    pub fn flush(&self) {
        self.send(Job::Flush);
    }

    /// The first write error, if one happened.
    pub fn error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Events handed over so far.
    pub fn events_written(&self) -> u64 {
        self.events
    }

    /// Writes everything queued, then the footer (when given; none after a write error), and stops the thread.
    pub fn finish(mut self, footer: Option<Footer>) -> Result<(), String> {
        if let Some(f) = footer {
            let _ = self.footer_tx.send(f);
        }
        self.tx = None; // the thread drains the queue, then sees the channel closed
        let result = self.thread.take().map(|t| t.join());
        match result {
            Some(Ok(Ok(()))) => self.error().map_or(Ok(()), Err),
            Some(Ok(Err(e))) => Err(e.to_string()),
            _ => Err("the writer thread failed".into()),
        }
    }
}

fn run<W: Write>(
    mut w: TraceWriter<W>,
    rx: Receiver<Job>,
    footer: Receiver<Footer>,
    error: Arc<Mutex<Option<String>>>,
    queued: Arc<AtomicUsize>,
) -> Result<(), FileError> {
    let mut failed = false;
    for job in rx {
        let bytes = job.bytes();
        let _done = Written(&queued, bytes);
        if failed {
            continue; // keep receiving so the drain loop never blocks on a dead writer
        }
        let r = match job {
            Job::Process(info) => w.write_process(&info),
            Job::Strings { pid, base, bytes } => w.write_strings(pid, base, &bytes),
            Job::Events { pid, events } => w.write_events(pid, &events),
            Job::Flush => w.flush(),
        };
        if let Err(e) = r {
            *error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
            failed = true;
        }
    }
    if failed {
        return Ok(());
    }
    if let Ok(f) = footer.try_recv() {
        let mut out = w.finish(f)?;
        out.flush()?;
    } else {
        w.flush()?;
    }
    Ok(())
}

/// Takes a job's bytes off the queue's count once the job is done with, however it ended.
struct Written<'a>(&'a AtomicUsize, usize);

impl Drop for Written<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, Ordering::AcqRel);
    }
}
