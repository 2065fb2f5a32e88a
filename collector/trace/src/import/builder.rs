//! What the importers share: each process's events and strings as they are read, and, for a trace read as a
//! stream, runs of events set aside on disk ([`crate::model::spool`]) once enough wait, so an import holds at
//! most a run's worth of events whatever the trace's size.

use crate::model::spool::Spool;
use crate::model::trace::{Process, StringTable};
use cuflight_format::RawEvent;
use std::collections::BTreeMap;

/// Each process, by pid, with the table that interns its strings.
pub type Host = BTreeMap<u32, (Process, StringTable)>;

pub struct Processes {
    pub host: Host,
    /// Whether events may be set aside on disk; the spool is created when the first run is full.
    spooling: bool,
    spool: Option<Spool>,
    /// Events held in the processes' vectors since the last run was written.
    buffered: usize,
    run: usize,
    /// The first error while spooling (reported once the import ends).
    error: Option<String>,
}

impl Processes {
    pub fn new(spooling: bool) -> Processes {
        Processes {
            host: BTreeMap::new(),
            spooling,
            spool: None,
            buffered: 0,
            run: crate::model::spool::run_events(),
            error: None,
        }
    }

    pub fn process(&mut self, pid: u32) -> &mut (Process, StringTable) {
        self.host.entry(pid).or_insert_with(|| {
            let info = cuflight_format::file::ProcessInfo { pid, ..Default::default() };
            (Process { info, imported: true, ..Default::default() }, StringTable::default())
        })
    }

    /// Adds `ev` to process `pid` with its name (and its annotation domain) interned in the process's strings.
    pub fn push(&mut self, pid: u32, mut ev: RawEvent, name: &str, domain: Option<&str>) {
        let (p, t) = self.process(pid);
        ev.name = t.id(p, name);
        if let Some(d) = domain {
            ev.set_annotation_domain(t.id(p, d));
        }
        p.events.push(ev);
        self.held(1);
    }

    /// `n` more events were pushed to the processes' vectors directly: a run goes to disk once enough wait.
    pub fn held(&mut self, n: usize) {
        self.buffered += n;
        if self.spooling && self.buffered >= self.run {
            self.write_runs();
        }
    }

    /// Records a failure to set events aside (the first one is reported when the import ends).
    pub fn failed(&mut self, why: String) {
        self.error.get_or_insert(why);
    }

    fn write_runs(&mut self) {
        self.buffered = 0;
        if self.spool.is_none() && self.error.is_none() {
            match Spool::create() {
                Ok(s) => self.spool = Some(s),
                Err(e) => self.error = Some(spool_failed(&e)),
            }
        }
        let Some(spool) = self.spool.as_mut() else { return };
        for (&pid, (p, _)) in self.host.iter_mut().filter(|(_, (p, _))| !p.events.is_empty()) {
            if let Err(e) = spool.run(pid, &mut p.events) {
                self.error.get_or_insert_with(|| spool.explain(&e));
                p.events.clear();
            }
        }
    }

    /// The processes (their events sorted by start) and, once runs went to disk, the spool holding the events:
    /// the rest then follows it, and a trace that never filled a run stays in memory.
    pub fn finish(mut self) -> Result<(Host, Option<Spool>), String> {
        if self.spool.as_ref().is_some_and(|s| !s.chunks.is_empty()) {
            self.write_runs();
        }
        if let Some(why) = self.error.take() {
            return Err(why);
        }
        for (p, _) in self.host.values_mut() {
            p.events.sort_by_key(|e| e.start);
        }
        Ok((self.host, self.spool.filter(|s| !s.chunks.is_empty())))
    }
}

pub fn spool_failed(e: &std::io::Error) -> String {
    format!(
        "a trace this large is read with its events set aside in {}, which failed ({e}): free space there or point \
         TMPDIR at a larger disk",
        std::env::temp_dir().display()
    )
}
