//! Nsight Systems SQLite exports (`nsys export --type sqlite`): CUPTI kernel, memcpy, memset, runtime, driver and
//! synchronization tables, NVTX_EVENTS, CUDA_GPU_MEMORY_USAGE_EVENTS, StringIds, PROCESSES, ThreadNames and
//! TARGET_INFO_GPU.
//!
//! nsys facts used here: `globalTid`/`globalPid` pack the OS pid in bits 24..48 and the tid in bits 0..24;
//! names are ids into StringIds; memcpy source/destination kinds use nsys' ENUM_CUDA_MEM_KIND (pageable = 0),
//! one less than CUPTI's (pageable = 1); API names carry CUPTI's version suffix (`cudaMalloc_v3020`), which is
//! dropped so they read like cuflight's own. Columns missing in other schema versions read as NULL.

use super::builder::Processes;
use crate::model::spool::Spool;
use crate::model::trace::Trace;
use cuflight_format::event::{LaunchConfig, MemKind};
use cuflight_format::view::{ApiCall, CopyKind, DeviceInfo, MemOp, Memcpy, MemoryKind, Memset, SyncRecord};
use cuflight_format::{EventKind, RawEvent};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OpenFlags};
use std::collections::{HashMap, HashSet};
use std::path::Path;

fn pid_of(global: i64) -> u32 {
    ((global >> 24) & 0xff_ffff) as u32
}

fn tid_of(global: i64) -> u32 {
    (global & 0xff_ffff) as u32
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

/// One row of a query, its columns read as integers or text (NULL, and a column the schema lacks, read as 0 or
/// no text).
struct Row<'a, 'b>(&'a rusqlite::Row<'b>);

impl Row<'_, '_> {
    fn int(&self, i: usize) -> i64 {
        match self.0.get_ref(i) {
            Ok(ValueRef::Integer(v)) => v,
            Ok(ValueRef::Real(f)) => f as i64,
            _ => 0,
        }
    }

    /// A time or size: negative values (absent, or corrupt) read as 0.
    fn ns(&self, i: usize) -> u64 {
        self.int(i).max(0) as u64
    }

    fn text(&self, i: usize) -> Option<&str> {
        match self.0.get_ref(i) {
            Ok(ValueRef::Text(t)) => std::str::from_utf8(t).ok(),
            _ => None,
        }
    }
}

impl Db {
    fn columns(&self, table: &str) -> HashSet<String> {
        let Ok(mut st) = self.conn.prepare(&format!("PRAGMA table_info(\"{table}\")")) else { return HashSet::new() };
        st.query_map([], |r| r.get::<_, String>(1)).map(|rows| rows.flatten().collect()).unwrap_or_default()
    }

    /// Calls `f` on each row of `table` with the given columns (NULL where a column does not exist), in the order
    /// nsys wrote them (rowid), which is close to time order: the spool sorts each run, and asking SQLite to sort
    /// by `start` doubled the import's time on a 20 M-event export. Rows stream: none is kept.
    fn each(&self, table: &str, cols: &[&str], filter: &str, mut f: impl FnMut(&Row)) -> rusqlite::Result<()> {
        if !self.tables.contains(table) {
            return Ok(());
        }
        let have = self.columns(table);
        let list: Vec<String> =
            cols.iter().map(|c| if have.contains(*c) { format!("\"{c}\"") } else { "NULL".into() }).collect();
        let mut st = self.conn.prepare(&format!("SELECT {} FROM \"{table}\"{filter}", list.join(", ")))?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            f(&Row(r));
        }
        Ok(())
    }

    fn string(&self, id: i64) -> &str {
        self.strings.get(&id).map_or("", String::as_str)
    }
}

/// The columns every device-work table starts with here, read by [`gpu_event`]; the process is column 5.
const GPU_COLS: [&str; 6] = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"];

fn gpu_event(r: &Row, kind: EventKind) -> RawEvent {
    let mut ev = RawEvent::new(kind, 0, r.ns(0), r.ns(1));
    (ev.device, ev.stream, ev.correlation) = (r.int(2) as u32, r.int(3) as u32, r.int(4) as u32);
    ev
}

/// Opens the export without writing anything, beside it either: a read-only connection to a database whose header
/// says WAL would still create its `-shm` and `-wal` files in the user's directory, so the file is opened
/// `immutable` (no locks, no journal files) unless a `-wal` file already beside it holds pages SQLite must read.
fn open_read_only(path: &Path) -> Result<Connection, String> {
    use std::os::unix::ffi::OsStrExt;
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return Connection::open_with_flags(path, flags).map_err(|e| e.to_string());
    }
    // A URI names the file: every byte but the unreserved ones and '/' percent-encoded (RFC 3986).
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    Connection::open_with_flags(uri, flags | OpenFlags::SQLITE_OPEN_URI).map_err(|e| e.to_string())
}

/// Imports an Nsight Systems SQLite export, all in memory.
pub fn import(path: &Path) -> Result<Trace, String> {
    import_with(path, false).map(|(t, _)| t)
}

/// Imports an Nsight Systems SQLite export to be read as a stream: once it holds more than
/// [`crate::model::spool::run_events`] events, they are set aside on disk in sorted runs (the returned spool).
pub fn import_spooled(path: &Path) -> Result<(Trace, Option<Spool>), String> {
    import_with(path, true)
}

fn import_with(path: &Path, spooling: bool) -> Result<(Trace, Option<Spool>), String> {
    let conn = open_read_only(path)?;
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
    let mut strings = HashMap::new();
    db.each("StringIds", &["id", "value"], "", |r| {
        strings.insert(r.int(0), r.text(1).unwrap_or("").to_string());
    })
    .map_err(sql)?;
    db.strings = strings;
    let mut b = Processes::new(spooling);

    for (table, runtime) in [("CUPTI_ACTIVITY_KIND_RUNTIME", true), ("CUPTI_ACTIVITY_KIND_DRIVER", false)] {
        let cols = ["start", "end", "globalTid", "correlationId", "nameId", "returnValue"];
        db.each(table, &cols, "", |r| {
            let g = r.int(2);
            let call = ApiCall { runtime, cbid: 0, result: r.int(5) as u64, external: 0 };
            let mut ev = RawEvent::api_call(tid_of(g), r.ns(0), r.ns(1), call);
            ev.correlation = r.int(3) as u32;
            b.push(pid_of(g), ev, cuflight_format::calls::without_version(db.string(r.int(4))), None);
        })
        .map_err(sql)?;
    }
    device_work(&db, &mut b).map_err(sql)?;
    nvtx(&db, &mut b).map_err(sql)?;
    memory_usage(&db, &mut b).map_err(sql)?;

    let mut names: HashMap<u32, String> = HashMap::new();
    db.each("PROCESSES", &["pid", "name"], "", |r| {
        names.insert(r.int(0) as u32, r.text(1).unwrap_or("").to_string());
    })
    .map_err(sql)?;
    db.each("ThreadNames", &["nameId", "globalTid"], "", |r| {
        let g = r.int(1);
        if b.host.contains_key(&pid_of(g)) {
            let mut ev = RawEvent::new(EventKind::ThreadName, tid_of(g), 0, 0);
            ev.set_named_thread(tid_of(g) as u64);
            b.push(pid_of(g), ev, db.string(r.int(0)), None);
        }
    })
    .map_err(sql)?;
    let run = RunFacts::read(&db).map_err(sql)?;
    if let Some(&first) = b.host.keys().next() {
        let cols = ["id", "name", "totalMemory", "smCount", "computeMajor", "computeMinor"];
        db.each("TARGET_INFO_GPU", &cols, "", |r| {
            let mut ev = RawEvent::new(EventKind::Device, 0, 0, 0);
            ev.device = r.int(0) as u32;
            ev.set_device(DeviceInfo {
                memory_bytes: r.ns(2),
                compute_capability: (r.ns(4) as u32, r.ns(5) as u32),
                multiprocessors: r.ns(3),
                driver_version: run.driver_version,
            });
            b.push(first, ev, r.text(1).unwrap_or("GPU"), None);
        })
        .map_err(sql)?;
    }
    // nsys writes a table only for what it recorded: what an export lacks was not traced.
    let mut not_recorded: Vec<(String, String)> = Vec::new();
    let absent = |t: &str| !db.tables.contains(t);
    if absent("CUDA_GPU_MEMORY_USAGE_EVENTS") {
        not_recorded.push((
            "memory".into(),
            "the export has no CUDA_GPU_MEMORY_USAGE_EVENTS: nsys records allocations with --cuda-memory-usage=true"
                .into(),
        ));
    }
    if absent("NVTX_EVENTS") {
        not_recorded.push((
            "nvtx".into(),
            "the export has no NVTX_EVENTS: nsys traces NVTX with --trace=nvtx (none may have been emitted)".into(),
        ));
    }
    if absent("CUPTI_ACTIVITY_KIND_MEMSET") {
        not_recorded.push((
            "memset".into(),
            "the export has no CUPTI_ACTIVITY_KIND_MEMSET table (no memset was traced)".into(),
        ));
    }
    let (host, spool) = b.finish()?;
    let mut trace = Trace::default();
    for (pid, (mut p, _)) in host {
        p.info.start_realtime_ns = run.session_start_ns;
        // nsys's times count from the capture's start, which TARGET_INFO_SESSION_START_TIME puts on the epoch
        // ("UTC Epoch timestamp at start of the capture", its schema's comment): the base that places this trace
        // beside others (the job clock, the separate-runs rule), as torch.profiler's baseTimeNanoseconds does.
        p.epoch_base_ns = run.session_start_ns.min(1 << 61);
        p.info.host = run.host.clone();
        p.name = names.get(&pid).cloned().unwrap_or_default();
        p.info.cmdline = match &run.command {
            // The process nsys launched, with its arguments.
            Some(c) if c[0].rsplit('/').next() == Some(p.name.as_str()) => c.clone(),
            _ => vec![p.name.clone()],
        };
        p.info.finished = true;
        p.info.not_recorded = not_recorded.clone();
        trace.processes.insert(pid, p);
    }
    Ok((trace, spool))
}

/// Device work: kernels, copies, memsets, synchronisations (the same first six columns in every table, then its
/// own).
fn device_work(db: &Db, b: &mut Processes) -> rusqlite::Result<()> {
    let gpu_cols = |rest: &[&'static str]| [&GPU_COLS[..], rest].concat();
    let kcols = gpu_cols(&[
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
        // Newer exports keep the symbol too (`stats` names kernels by it with `:mangled`).
        "mangledName",
    ]);
    db.each("CUPTI_ACTIVITY_KIND_KERNEL", &kcols, "", |r| {
        let mut ev = gpu_event(r, EventKind::Kernel);
        let d = |i: usize| r.int(i).max(0) as u32;
        let cfg = LaunchConfig {
            grid: [d(8), d(9), d(10)],
            block: [d(11), d(12), d(13)],
            registers: d(7) as u16,
            static_shared: d(14),
            dynamic_shared: d(15),
        };
        ev.set_launch_config(&cfg);
        let (pid, name, mangled) = (pid_of(r.int(5)), db.string(r.int(6)), db.string(r.int(16)));
        if !mangled.is_empty() && mangled != name {
            let (p, t) = b.process(pid);
            let id = t.id(p, name);
            p.mangled.entry(id).or_insert_with(|| mangled.to_string());
        }
        b.push(pid, ev, name, None);
    })?;
    let mcols = gpu_cols(&["bytes", "copyKind", "srcKind", "dstKind"]);
    db.each("CUPTI_ACTIVITY_KIND_MEMCPY", &mcols, "", |r| {
        let mut ev = gpu_event(r, EventKind::Memcpy);
        let (src, dst) = (MemoryKind(mem_kind(r.int(8)) as u8), MemoryKind(mem_kind(r.int(9)) as u8));
        // The export's copies say nothing of the call's asynchrony.
        ev.set_copy(Memcpy { kind: CopyKind(r.int(7) as u8), src, dst, bytes: r.ns(6), is_async: false });
        b.push(pid_of(r.int(5)), ev, "", None);
    })?;
    let scols = gpu_cols(&["bytes", "memKind", "value"]);
    db.each("CUPTI_ACTIVITY_KIND_MEMSET", &scols, "", |r| {
        let mut ev = gpu_event(r, EventKind::Memset);
        ev.set_memset(Memset {
            memory: MemoryKind(mem_kind(r.int(7)) as u8),
            bytes: r.ns(6),
            value: r.int(8) as u64,
            is_async: false,
        });
        b.push(pid_of(r.int(5)), ev, "", None);
    })?;
    let ycols = ["start", "end", "streamId", "correlationId", "globalPid", "syncType", "eventId"];
    db.each("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", &ycols, "", |r| {
        let mut ev = RawEvent::new(EventKind::Sync, 0, r.ns(0), r.ns(1));
        (ev.stream, ev.correlation) = (r.int(2) as u32, r.int(3) as u32);
        ev.set_sync(SyncRecord { kind: r.int(5) as u8, event: r.int(6) as u64 });
        b.push(pid_of(r.int(4)), ev, "", None);
    })?;
    Ok(())
}

/// The device memory events of `--cuda-memory-usage=true`.
fn memory_usage(db: &Db, b: &mut Processes) -> rusqlite::Result<()> {
    // --cuda-memory-usage=true: memoryOperationType is ENUM_CUDA_DEV_MEM_EVENT_OPER (0 allocation, 1
    // deallocation), memKind ENUM_CUDA_MEM_KIND (0 pageable, 1 pinned, 2 device, 3 array, 4 managed, 5 device
    // static, 6 managed static, 7 unknown; both enums as the export's own ENUM_* tables list them). Pageable and
    // unknown memory is not the GPU's.
    let ucols =
        ["start", "globalPid", "deviceId", "address", "bytes", "memKind", "memoryOperationType", "correlationId"];
    db.each("CUDA_GPU_MEMORY_USAGE_EVENTS", &ucols, "", |r| {
        let memory = match r.int(5) {
            1 => MemKind::PinnedHost,
            2 | 3 | 5 => MemKind::Device,
            4 | 6 => MemKind::Managed,
            _ => return,
        };
        let kind = match r.int(6) {
            0 => EventKind::Alloc,
            1 => EventKind::Free,
            _ => return,
        };
        let mut ev = RawEvent::new(kind, 0, r.ns(0), r.ns(0));
        ev.set_mem_op(kind, MemOp { memory: Some(memory), address: r.int(3) as u64, bytes: r.ns(4) });
        (ev.device, ev.correlation) = (r.int(2) as u32, r.int(7) as u32);
        b.push(pid_of(r.int(1)), ev, "", None);
    })?;
    Ok(())
}

/// What the export says of the run besides its events.
#[derive(Default)]
struct RunFacts {
    /// When the capture began (UTC epoch ns); the export's times count from there.
    session_start_ns: u64,
    host: String,
    /// `cuDriverGetVersion` (12000 = 12.0), 0 unknown.
    driver_version: u32,
    /// The command nsys launched and its arguments (`PROCESS_0:COMMAND`, `PROCESS_0:ARGUMENT_N`).
    command: Option<Vec<String>>,
}

impl RunFacts {
    fn read(db: &Db) -> rusqlite::Result<RunFacts> {
        let mut run = RunFacts::default();
        db.each("TARGET_INFO_SESSION_START_TIME", &["utcEpochNs"], "", |r| run.session_start_ns = r.ns(0))?;
        let only = " WHERE \"name\" IN ('Hostname', 'CudaDriverVersion')";
        db.each("TARGET_INFO_SYSTEM_ENV", &["name", "value"], only, |r| match (r.text(0), r.text(1)) {
            (Some("Hostname"), Some(h)) if h.len() <= 255 && !h.chars().any(char::is_control) => run.host = h.into(),
            (Some("CudaDriverVersion"), Some(v)) => run.driver_version = v.trim().parse().unwrap_or(0),
            _ => {}
        })?;
        let (mut command, mut args) = (None, std::collections::BTreeMap::new());
        db.each("META_DATA_CAPTURE", &["name", "value"], " WHERE \"name\" LIKE 'PROCESS_0:%'", |r| {
            let (Some(name), Some(value)) = (r.text(0), r.text(1)) else { return };
            if name == "PROCESS_0:COMMAND" {
                command = Some(value.to_string());
            } else if let Some(n) = name.strip_prefix("PROCESS_0:ARGUMENT_").and_then(|n| n.parse::<u32>().ok()) {
                // At most a command line's worth: the export is another program's file.
                if args.len() < 4096 {
                    args.insert(n, value.to_string());
                }
            }
        })?;
        run.command = command.filter(|c| !c.is_empty()).map(|c| std::iter::once(c).chain(args.into_values()).collect());
        Ok(run)
    }
}

/// NVTX_EVENTS: push/pop and start/end ranges become Range events, marks NvtxMark, in their domains. Event type
/// ids come from the file's own ENUM_NSYS_EVENT_TYPE when present.
fn nvtx(db: &Db, b: &mut Processes) -> rusqlite::Result<()> {
    let mut ids: HashMap<String, i64> =
        [("NvtxMark", 34), ("NvtxPushPopRange", 59), ("NvtxStartEndRange", 60), ("NvtxDomainCreate", 75)]
            .into_iter()
            .map(|(n, i)| (n.to_string(), i))
            .collect();
    db.each("ENUM_NSYS_EVENT_TYPE", &["id", "name"], "", |r| {
        if let Some(name) = r.text(1) {
            ids.insert(name.to_string(), r.int(0));
        }
    })?;
    let cols = ["start", "end", "eventType", "text", "textId", "globalTid", "domainId"];
    let text = |r: &Row| r.text(3).map_or_else(|| db.string(r.int(4)).to_string(), str::to_string);
    // Domains are named by their creation events, which precede their ranges but are needed before any of them.
    let domain_create = ids["NvtxDomainCreate"];
    let mut domains: HashMap<i64, String> = HashMap::new();
    let only_domains = format!(" WHERE \"eventType\" = {domain_create}");
    db.each("NVTX_EVENTS", &cols, &only_domains, |r| {
        domains.insert(r.int(6), text(r));
    })?;
    let (range, start_end, mark) = (ids["NvtxPushPopRange"], ids["NvtxStartEndRange"], ids["NvtxMark"]);
    db.each("NVTX_EVENTS", &cols, "", |r| {
        let ty = r.int(2);
        let kind = if ty == range || ty == start_end {
            EventKind::Range
        } else if ty == mark {
            EventKind::NvtxMark
        } else {
            return;
        };
        let g = r.int(5);
        let start = r.ns(0);
        let end = if kind == EventKind::Range { r.ns(1) } else { start };
        let domain = domains.get(&r.int(6)).map_or("default", String::as_str);
        b.push(pid_of(g), RawEvent::new(kind, tid_of(g), start, end.max(start)), &text(r), Some(domain));
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn global_ids_and_names_decode() {
        let g = 310028055214088i64;
        assert_eq!((pid_of(g), tid_of(g)), (1701896, 1701896));
        assert_eq!((mem_kind(0), mem_kind(2), mem_kind(7)), (1, 3, 0));
    }

    #[test]
    fn an_export_in_wal_mode_is_read_without_writing_beside_it() {
        let dir = std::env::temp_dir().join(format!("cuflight-nsys-wal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // A name a URI must encode.
        let path = dir.join("run #1 ?100%.sqlite");
        {
            let c = Connection::open(&path).unwrap();
            c.pragma_update(None, "journal_mode", "wal").unwrap();
            c.execute_batch(
                "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT); INSERT INTO StringIds VALUES (1, 'k');
                 CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, text TEXT);",
            )
            .unwrap();
        }
        let listed = || {
            let mut names: Vec<String> =
                std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
            names.sort();
            names
        };
        assert_eq!(listed(), ["run #1 ?100%.sqlite"], "closing checkpoints the WAL away");
        let mut header = [0u8; 20];
        std::io::Read::read_exact(&mut std::fs::File::open(&path).unwrap(), &mut header).unwrap();
        assert_eq!(header[18], 2, "the header still says WAL");
        let conn = open_read_only(&path).unwrap();
        let n: i64 = conn.query_row("SELECT COUNT(*) FROM StringIds", [], |r| r.get(0)).unwrap();
        assert_eq!(n, 1);
        drop(conn);
        assert_eq!(listed(), ["run #1 ?100%.sqlite"], "no -shm or -wal left beside the user's file");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
