//! Nsight Systems SQLite exports (`nsys export --type sqlite`): CUPTI kernel, memcpy, memset, runtime, driver and
//! synchronization tables, NVTX_EVENTS, StringIds, PROCESSES, ThreadNames and TARGET_INFO_GPU.
//!
//! nsys facts used here: `globalTid`/`globalPid` pack the OS pid in bits 24..48 and the tid in bits 0..24;
//! names are ids into StringIds; memcpy source/destination kinds use nsys' ENUM_CUDA_MEM_KIND (pageable = 0),
//! one less than CUPTI's (pageable = 1); API names carry CUPTI's version suffix (`cudaMalloc_v3020`), which is
//! dropped so they read like cuflight's own. Columns missing in other schema versions read as NULL.

use crate::model::trace::{Process, StringTable, Trace};
use cuflight_format::event::{LaunchConfig, API_DRIVER, API_RUNTIME};
use cuflight_format::file::ProcessInfo;
use cuflight_format::{EventKind, RawEvent};
use rusqlite::{Connection, OpenFlags};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

fn pid_of(global: i64) -> u32 {
    ((global >> 24) & 0xff_ffff) as u32
}

fn tid_of(global: i64) -> u32 {
    (global & 0xff_ffff) as u32
}

/// `cudaMalloc_v3020` → `cudaMalloc`.
fn strip_version(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((base, v)) if !v.is_empty() && v.chars().all(|c| c.is_ascii_digit()) => base,
        _ => name,
    }
}

/// nsys ENUM_CUDA_MEM_KIND → CUPTI memory kind.
fn mem_kind(nsys: i64) -> u64 {
    if (0..7).contains(&nsys) {
        nsys as u64 + 1
    } else {
        0
    }
}

struct Db {
    conn: Connection,
    tables: HashSet<String>,
    strings: HashMap<i64, String>,
}

impl Db {
    fn columns(&self, table: &str) -> HashSet<String> {
        let Ok(mut st) = self.conn.prepare(&format!("PRAGMA table_info(\"{table}\")")) else { return HashSet::new() };
        st.query_map([], |r| r.get::<_, String>(1)).map(|rows| rows.flatten().collect()).unwrap_or_default()
    }

    /// Rows of `table` with the given columns (NULL where a column does not exist), as i64/string values.
    fn rows(&self, table: &str, cols: &[&str]) -> rusqlite::Result<Vec<Vec<rusqlite::types::Value>>> {
        if !self.tables.contains(table) {
            return Ok(Vec::new());
        }
        let have = self.columns(table);
        let list: Vec<String> =
            cols.iter().map(|c| if have.contains(*c) { format!("\"{c}\"") } else { "NULL".into() }).collect();
        let mut st = self.conn.prepare(&format!("SELECT {} FROM \"{table}\"", list.join(", ")))?;
        let n = cols.len();
        let rows = st.query_map([], |r| (0..n).map(|i| r.get::<_, rusqlite::types::Value>(i)).collect())?;
        rows.collect()
    }

    fn string(&self, id: i64) -> &str {
        self.strings.get(&id).map_or("", String::as_str)
    }
}

fn int(v: &rusqlite::types::Value) -> i64 {
    match v {
        rusqlite::types::Value::Integer(i) => *i,
        rusqlite::types::Value::Real(f) => *f as i64,
        _ => 0,
    }
}

fn text(v: &rusqlite::types::Value) -> Option<&str> {
    match v {
        rusqlite::types::Value::Text(s) => Some(s),
        _ => None,
    }
}

#[derive(Default)]
struct Builder {
    procs: BTreeMap<u32, (Process, StringTable)>,
}

impl Builder {
    fn push(&mut self, pid: u32, mut ev: RawEvent, name: &str, domain: Option<&str>) {
        let (p, t) = self.procs.entry(pid).or_insert_with(|| {
            let p = Process { info: ProcessInfo { pid, finished: true, ..Default::default() }, ..Default::default() };
            (p, StringTable::default())
        });
        ev.name = t.id(p, name);
        if let Some(d) = domain {
            ev.c = t.id(p, d) as u64;
        }
        p.events.push(ev);
    }
}

/// Imports an Nsight Systems SQLite export.
pub fn import(path: &Path) -> Result<Trace, String> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
        .map_err(|e| e.to_string())?;
    let tables: HashSet<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
        .and_then(|mut st| st.query_map([], |r| r.get::<_, String>(0))?.collect())
        .map_err(|e| format!("not a readable SQLite database: {e}"))?;
    let wanted = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"];
    if !wanted.iter().any(|t| tables.contains(*t)) || !tables.contains("StringIds") {
        return Err("no StringIds and no CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS tables: not an nsys export".into());
    }
    let mut db = Db { conn, tables, strings: HashMap::new() };
    let sql = |e: rusqlite::Error| e.to_string();
    db.strings = db
        .rows("StringIds", &["id", "value"])
        .map_err(sql)?
        .iter()
        .map(|r| (int(&r[0]), text(&r[1]).unwrap_or("").to_string()))
        .collect();
    let mut b = Builder::default();
    let ns = |v: &rusqlite::types::Value| int(v).max(0) as u64;

    for (table, sub) in [("CUPTI_ACTIVITY_KIND_RUNTIME", API_RUNTIME), ("CUPTI_ACTIVITY_KIND_DRIVER", API_DRIVER)] {
        for r in
            db.rows(table, &["start", "end", "globalTid", "correlationId", "nameId", "returnValue"]).map_err(sql)?
        {
            let g = int(&r[2]);
            let mut ev = RawEvent::new(EventKind::Api, tid_of(g), ns(&r[0]), ns(&r[1]));
            ev.sub = sub;
            ev.correlation = int(&r[3]) as u32;
            ev.b = int(&r[5]) as u64;
            b.push(pid_of(g), ev, strip_version(db.string(int(&r[4]))), None);
        }
    }
    let kcols = [
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "demangledName",
        "registersPerThread",
        "gridX",
        "gridY",
        "gridZ",
        "blockX",
        "blockY",
        "blockZ",
        "staticSharedMemory",
        "dynamicSharedMemory",
    ];
    for r in db.rows("CUPTI_ACTIVITY_KIND_KERNEL", &kcols).map_err(sql)? {
        let mut ev = RawEvent::new(EventKind::Kernel, 0, ns(&r[0]), ns(&r[1]));
        ev.device = int(&r[2]) as u32;
        ev.stream = int(&r[3]) as u32;
        ev.correlation = int(&r[4]) as u32;
        let d = |i: usize| int(&r[i]).max(0) as u32;
        let cfg = LaunchConfig {
            grid: [d(8), d(9), d(10)],
            block: [d(11), d(12), d(13)],
            registers: d(7) as u16,
            static_shared: d(14),
            dynamic_shared: d(15),
        };
        (ev.a, ev.b, ev.c) = cfg.pack();
        b.push(pid_of(int(&r[5])), ev, db.string(int(&r[6])), None);
    }
    let mcols = [
        "start",
        "end",
        "deviceId",
        "streamId",
        "correlationId",
        "globalPid",
        "bytes",
        "copyKind",
        "srcKind",
        "dstKind",
    ];
    for r in db.rows("CUPTI_ACTIVITY_KIND_MEMCPY", &mcols).map_err(sql)? {
        let mut ev = RawEvent::new(EventKind::Memcpy, 0, ns(&r[0]), ns(&r[1]));
        (ev.device, ev.stream, ev.correlation) = (int(&r[2]) as u32, int(&r[3]) as u32, int(&r[4]) as u32);
        ev.a = ns(&r[6]);
        ev.sub = int(&r[7]) as u8;
        ev.b = mem_kind(int(&r[8])) | mem_kind(int(&r[9])) << 8;
        b.push(pid_of(int(&r[5])), ev, "", None);
    }
    let scols = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "bytes", "memKind", "value"];
    for r in db.rows("CUPTI_ACTIVITY_KIND_MEMSET", &scols).map_err(sql)? {
        let mut ev = RawEvent::new(EventKind::Memset, 0, ns(&r[0]), ns(&r[1]));
        (ev.device, ev.stream, ev.correlation) = (int(&r[2]) as u32, int(&r[3]) as u32, int(&r[4]) as u32);
        ev.a = ns(&r[6]);
        ev.sub = mem_kind(int(&r[7])) as u8;
        ev.b = int(&r[8]) as u64;
        b.push(pid_of(int(&r[5])), ev, "", None);
    }
    let ycols = ["start", "end", "streamId", "correlationId", "globalPid", "syncType", "eventId"];
    for r in db.rows("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", &ycols).map_err(sql)? {
        let mut ev = RawEvent::new(EventKind::Sync, 0, ns(&r[0]), ns(&r[1]));
        (ev.stream, ev.correlation) = (int(&r[2]) as u32, int(&r[3]) as u32);
        ev.sub = int(&r[5]) as u8;
        ev.a = int(&r[6]) as u64;
        b.push(pid_of(int(&r[4])), ev, "", None);
    }
    nvtx(&db, &mut b).map_err(sql)?;

    let names: HashMap<u32, String> = db
        .rows("PROCESSES", &["pid", "name"])
        .map_err(sql)?
        .iter()
        .map(|r| (int(&r[0]) as u32, text(&r[1]).unwrap_or("").to_string()))
        .collect();
    for r in db.rows("ThreadNames", &["nameId", "globalTid"]).map_err(sql)? {
        let g = int(&r[1]);
        if b.procs.contains_key(&pid_of(g)) {
            let mut ev = RawEvent::new(EventKind::ThreadName, tid_of(g), 0, 0);
            ev.a = tid_of(g) as u64;
            b.push(pid_of(g), ev, db.string(int(&r[0])), None);
        }
    }
    if let Some(&first) = b.procs.keys().next() {
        for r in db
            .rows("TARGET_INFO_GPU", &["id", "name", "totalMemory", "smCount", "computeMajor", "computeMinor"])
            .map_err(sql)?
        {
            let mut ev = RawEvent::new(EventKind::Device, 0, 0, 0);
            ev.device = int(&r[0]) as u32;
            ev.a = ns(&r[2]);
            ev.c = ns(&r[3]);
            ev.b = ns(&r[4]) << 8 | ns(&r[5]);
            b.push(first, ev, text(&r[1]).unwrap_or("GPU"), None);
        }
    }
    let mut trace = Trace::default();
    for (pid, (mut p, _)) in b.procs {
        p.name = names.get(&pid).cloned().unwrap_or_default();
        p.info.cmdline = vec![p.name.clone()];
        p.events.sort_by_key(|e| e.start);
        trace.processes.insert(pid, p);
    }
    Ok(trace)
}

/// NVTX_EVENTS: push/pop and start/end ranges become Range events, marks NvtxMark, in their domains. Event type
/// ids come from the file's own ENUM_NSYS_EVENT_TYPE when present.
fn nvtx(db: &Db, b: &mut Builder) -> rusqlite::Result<()> {
    let mut ids: HashMap<String, i64> =
        [("NvtxMark", 34), ("NvtxPushPopRange", 59), ("NvtxStartEndRange", 60), ("NvtxDomainCreate", 75)]
            .into_iter()
            .map(|(n, i)| (n.to_string(), i))
            .collect();
    for r in db.rows("ENUM_NSYS_EVENT_TYPE", &["id", "name"])? {
        if let Some(name) = text(&r[1]) {
            ids.insert(name.to_string(), int(&r[0]));
        }
    }
    let rows = db.rows("NVTX_EVENTS", &["start", "end", "eventType", "text", "textId", "globalTid", "domainId"])?;
    let domain_create = ids["NvtxDomainCreate"];
    let domains: HashMap<i64, String> = rows
        .iter()
        .filter(|r| int(&r[2]) == domain_create)
        .map(|r| (int(&r[6]), text(&r[3]).map_or_else(|| db.string(int(&r[4])).to_string(), str::to_string)))
        .collect();
    for r in &rows {
        let ty = int(&r[2]);
        let kind = if ty == ids["NvtxPushPopRange"] || ty == ids["NvtxStartEndRange"] {
            EventKind::Range
        } else if ty == ids["NvtxMark"] {
            EventKind::NvtxMark
        } else {
            continue;
        };
        let g = int(&r[5]);
        let start = int(&r[0]).max(0) as u64;
        let end = if kind == EventKind::Range { int(&r[1]).max(0) as u64 } else { start };
        let name = text(&r[3]).map_or_else(|| db.string(int(&r[4])).to_string(), str::to_string);
        let domain = domains.get(&int(&r[6])).map_or("default", String::as_str);
        b.push(pid_of(g), RawEvent::new(kind, tid_of(g), start, end.max(start)), &name, Some(domain));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_and_names_decode() {
        let g = 310028055214088i64;
        assert_eq!((pid_of(g), tid_of(g)), (1701896, 1701896));
        assert_eq!(strip_version("cudaMalloc_v3020"), "cudaMalloc");
        assert_eq!(strip_version("cuModuleGetLoadingMode"), "cuModuleGetLoadingMode");
        assert_eq!(strip_version("my_vector"), "my_vector");
        assert_eq!((mem_kind(0), mem_kind(2), mem_kind(7)), (1, 3, 0));
    }
}
