//! Process-wide agent state: the shared-memory segment of this process (created on first need), fork handling,
//! and the one-line "disabled" notice.
//!
//! After `fork` the child must never write into its parent's rings (the mapping is inherited) nor call CUPTI
//! (its state belongs to the parent): the atfork child handler bumps a generation counter, forgets the segment
//! and marks the process as a fork child; the child's first event creates a segment of its own.

use crate::interner::Interner;
use crate::rings::SharedRings;
use cuflight_format::channel;
use cuflight_format::segment::{self, state as seg_state, Layout, MappedSegment};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Once;

pub struct Agent {
    pub seg: MappedSegment,
    pub interner: Interner,
    /// The connection to the collector the segment was handed to: a byte written here wakes its drain.
    pub conn: std::os::fd::OwnedFd,
    /// Rings not owned by one thread: CUPTI's record delivery, and threads that found no ring of their own.
    pub shared: SharedRings,
}

static AGENT: AtomicPtr<Agent> = AtomicPtr::new(std::ptr::null_mut());
static GENERATION: AtomicU64 = AtomicU64::new(1);
/// Changes whenever string ids stop meaning what they meant: a fork child's own segment, and each attach window
/// after the first (its string region starts empty). Caches of ids are kept per epoch.
static STRINGS_EPOCH: AtomicU64 = AtomicU64::new(1);
/// Set when segment creation failed or no session exists: stop retrying on every event.
static NO_SEGMENT: AtomicBool = AtomicBool::new(false);
static CREATE: Mutex<()> = Mutex::new(());
static HOOKS: Once = Once::new();
static NOTICE: AtomicBool = AtomicBool::new(false);
static DISABLED_ONCE: AtomicBool = AtomicBool::new(false);

/// The agent's CUPTI state machine: uninitialised -> initialising -> enabled | disabled. Reached from
/// `InitializeInjection` only; the CUPTI and NVTX handlers ask [`enabled`].
const UNINITIALISED: u8 = 0;
const INITIALISING: u8 = 1;
const ENABLED: u8 = 2;
const DISABLED: u8 = 3;
/// Injected outside any recording session: no CUPTI, no segment, only the control socket.
const DORMANT: u8 = 4;
static INIT: AtomicU8 = AtomicU8::new(UNINITIALISED);
/// Set in a fork child whose parent had CUPTI running (copied at fork, before the child runs any code).
static INHERITED_CUPTI: AtomicBool = AtomicBool::new(false);
/// The agent was loaded into the running process by `cuflight attach --inject` (stated in the segment).
static INJECTED_LATE: AtomicBool = AtomicBool::new(false);

pub fn set_injected_late() {
    INJECTED_LATE.store(true, Ordering::Relaxed);
}

pub fn injected_late() -> bool {
    INJECTED_LATE.load(Ordering::Relaxed)
}

/// NVTX tables found late (`nvtx_late`): (hooked, foreign).
static NVTX_LATE: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];

/// `hooked` NVTX tables this agent filled late, `foreign` ones another tool held.
pub fn set_nvtx_late(hooked: u32, foreign: u32) {
    NVTX_LATE[0].store(hooked, Ordering::Relaxed);
    NVTX_LATE[1].store(foreign, Ordering::Relaxed);
    if let Some(seg) = existing_segment() {
        seg.header().injected_late.store(late_word(), Ordering::Relaxed);
    }
}

/// What the segment's `injected_late` says ([`cuflight_format::segment::LateInjection`]).
fn late_word() -> u32 {
    cuflight_format::segment::LateInjection {
        injected: INJECTED_LATE.load(Ordering::Relaxed),
        nvtx_tables_late: NVTX_LATE[0].load(Ordering::Relaxed),
        nvtx_tables_foreign: NVTX_LATE[1].load(Ordering::Relaxed),
    }
    .pack()
}

/// This process's segment is a flight recorder's (read in the atfork child handler, which must not allocate).
static FLIGHT_RECORDER: AtomicBool = AtomicBool::new(false);

/// Claims initialisation; false when it already happened (or is happening).
pub fn begin_init() -> bool {
    INIT.compare_exchange(UNINITIALISED, INITIALISING, Ordering::AcqRel, Ordering::Acquire).is_ok()
}

pub fn finish_init(enabled: bool) {
    INIT.store(if enabled { ENABLED } else { DISABLED }, Ordering::Release);
    if enabled {
        mark_armed();
    }
}

/// When the current arming began (the agent's event clock), for the segment's `arm_began_ns`.
static ARM_BEGAN: AtomicU64 = AtomicU64::new(0);

/// Arming starts (`cuInit` under `cuflight record`, or an attach request): the segment's `armed_ns` is 0 until
/// every source delivers.
pub fn begin_arming() {
    ARM_BEGAN.store(crate::clock::monotonic_ns(), Ordering::Relaxed);
    if let Some(seg) = existing_segment() {
        seg.header().armed_ns.store(0, Ordering::Release);
    }
}

/// Every source delivers from now: CUPTI subscribed and configured, and the handlers enabled (a call that
/// enters from here is seen at enter and at exit). Windows count from this time.
fn mark_armed() {
    if let Some(seg) = existing_segment() {
        let h = seg.header();
        let now = crate::clock::monotonic_ns();
        let began = ARM_BEGAN.load(Ordering::Relaxed);
        h.arm_began_ns.store(if began == 0 { now } else { began }, Ordering::Relaxed);
        h.armed_ns.store(now, Ordering::Release);
    }
}

/// The session a collector attached this dormant agent to (`cuflight attach`), and whether there is one. The
/// flag is read first so that nothing but the control thread ever takes the lock: a fork child inherits a lock
/// held by the parent's control thread at the moment of fork as held forever.
static ATTACHED: Mutex<Option<String>> = Mutex::new(None);
static ATTACH_ACTIVE: AtomicBool = AtomicBool::new(false);

/// The session this process records into: `cuflight record` sets it in the environment, `cuflight attach`
/// through the control socket.
pub fn session() -> Option<String> {
    if ATTACH_ACTIVE.load(Ordering::Acquire) {
        if let Some(s) = ATTACHED.lock().clone() {
            return Some(s);
        }
    }
    std::env::var("CUFLIGHT_SESSION").ok().filter(|s| !s.is_empty() && !s.contains('/'))
}

/// This process records for `cuflight record` (its session came with the environment, not by attach).
pub fn session_from_env() -> bool {
    !ATTACH_ACTIVE.load(Ordering::Acquire) && std::env::var_os("CUFLIGHT_SESSION").is_some_and(|s| !s.is_empty())
}

/// The descriptor of the connection to the collector the segment was handed to, if there is one.
pub fn collector_conn() -> Option<i32> {
    existing_agent().map(|a| std::os::fd::AsRawFd::as_raw_fd(&a.conn))
}

/// The agent is dormant (injected without a session, or detached): nothing records.
pub fn dormant() -> bool {
    INIT.load(Ordering::Acquire) == DORMANT
}

/// Leaves dormancy for `session`: the segment is made (first attach) or handed to the new session's collector
/// (later ones, the same segment: its rings and strings carry on). CUPTI is not touched here.
pub fn wake_for(session: &str) -> Result<&'static Agent, String> {
    begin_arming();
    *ATTACHED.lock() = Some(session.to_string());
    ATTACH_ACTIVE.store(true, Ordering::Release);
    NO_SEGMENT.store(false, Ordering::Relaxed);
    let Some(agent) = existing_agent() else {
        return agent().ok_or_else(|| "cannot make the trace segment or reach the collector".to_string());
    };
    // What the previous window's collector left unread (it was killed mid-window) is not this window's: the
    // rings start empty, and every count starts at zero. No collector holds the segment now, so the agent may
    // act as its consumer.
    agent.seg.header().start_window_tallies();
    for i in 0..agent.seg.reserved_rings() {
        if let Some(mut consumer) = agent.seg.consumer(i) {
            consumer.skip_all();
        }
    }
    // Its strings too: a program that names its steps or requests uniquely ("step 81234") would otherwise fill
    // the region for good in a long-lived process and leave every later window's names unkept. What a program
    // names once (threads, NVTX domains, registered strings) is named again in each window.
    agent.interner.reset(&agent.seg);
    STRINGS_EPOCH.fetch_add(1, Ordering::AcqRel);
    intern_process_names(agent);
    let conn = channel::send(session, agent.seg.fd()).map_err(|e| format!("cannot reach the collector: {e}"))?;
    // The new connection takes the old one's descriptor number: a thread waking the collector at this moment
    // writes to one or the other, never to a number the program may have reused.
    // SAFETY: dup2 between two descriptors this agent owns; the new one is closed when `conn` drops.
    if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&conn), std::os::fd::AsRawFd::as_raw_fd(&agent.conn)) } < 0 {
        return Err(format!("dup2: {}", std::io::Error::last_os_error()));
    }
    let h = agent.seg.header();
    h.collector_drained_ns.store(crate::clock::monotonic_ns(), Ordering::Relaxed);
    h.state.store(seg_state::RECORDING, Ordering::Release);
    Ok(agent)
}

/// Recording stopped (detach): the CUPTI handlers are quiet from here, the segment is marked finished and the
/// collector's connection shut down (it sees the hang-up and ends the window); the descriptor stays ours.
pub fn back_to_dormant() {
    INIT.store(DORMANT, Ordering::Release);
    NO_SEGMENT.store(true, Ordering::Relaxed);
    ATTACH_ACTIVE.store(false, Ordering::Release);
    *ATTACHED.lock() = None;
    if let Some(agent) = existing_agent() {
        agent.seg.header().state.store(seg_state::FINISHED, Ordering::Release);
        // SAFETY: shutdown on our own connection; it stays open (its number is reused by the next attach).
        unsafe { libc::shutdown(std::os::fd::AsRawFd::as_raw_fd(&agent.conn), libc::SHUT_RDWR) };
    }
}

/// Ends initialisation as a dormant agent: nothing recorded, no segment made, no notice printed.
pub fn go_dormant() {
    NO_SEGMENT.store(true, Ordering::Relaxed);
    INIT.store(DORMANT, Ordering::Release);
    install_hooks();
}

/// CUPTI is set up and ours to use in this process.
#[inline]
pub fn enabled() -> bool {
    INIT.load(Ordering::Acquire) == ENABLED
}

/// This process is a fork child of a process whose CUPTI was running.
pub fn inherited_cupti() -> bool {
    INHERITED_CUPTI.load(Ordering::Relaxed)
}

pub fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// The epoch of string ids ([`STRINGS_EPOCH`]).
pub fn strings_epoch() -> u64 {
    STRINGS_EPOCH.load(Ordering::Acquire)
}

/// Prints one line about the agent turning itself off (once per process).
pub fn notice(msg: &str) {
    if !NOTICE.swap(true, Ordering::Relaxed) {
        eprintln!("cuflight: {msg}; profiling is off, the program continues");
    }
}

/// Nothing records in this process (dormant, or no session to hand a segment to): event handlers return at once.
#[inline(always)]
pub fn quiet() -> bool {
    NO_SEGMENT.load(Ordering::Relaxed)
}

/// The agent of this process, creating its segment on first use. None when not recording.
pub fn agent() -> Option<&'static Agent> {
    let p = AGENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: AGENT only ever holds a leaked Box<Agent>, never freed.
        return Some(unsafe { &*p });
    }
    if NO_SEGMENT.load(Ordering::Relaxed) {
        return None;
    }
    create()
}

pub fn segment() -> Option<&'static MappedSegment> {
    agent().map(|a| &a.seg)
}

/// The agent if this process already has its segment (never creates one).
pub fn existing_agent() -> Option<&'static Agent> {
    let p = AGENT.load(Ordering::Acquire);
    // SAFETY: AGENT only ever holds a leaked Box<Agent>, never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// The segment if this process already has one (never creates one).
fn existing_segment() -> Option<&'static MappedSegment> {
    let p = AGENT.load(Ordering::Acquire);
    // SAFETY: AGENT only ever holds a leaked Box<Agent>, never freed.
    (!p.is_null()).then(|| unsafe { &(*p).seg })
}

/// Interns `s` in this process's segment (0 when not recording).
pub fn intern(s: &[u8]) -> u32 {
    agent().map_or(0, |a| a.interner.intern(&a.seg, s))
}

/// `f` of the bytes of the string interned as `id` (None: no segment, or no such string).
pub fn with_interned<R>(id: u32, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    let a = agent()?;
    crate::interner::stored(&a.seg, id).map(f)
}

/// Whether the string interned as `id` equals the NUL-terminated string at `name`.
///
/// # Safety
/// `name` is a NUL-terminated string valid for the call.
pub unsafe fn interned_equals(id: u32, name: *const std::ffi::c_char) -> bool {
    // SAFETY: forwarded contract.
    agent().is_some_and(|a| unsafe { crate::interner::stored_equals_c(&a.seg, id, name) })
}

fn env_u32(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok()).unwrap_or(default)
}

#[cold]
fn create() -> Option<&'static Agent> {
    let _guard = CREATE.lock();
    let p = AGENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: as in `agent`.
        return Some(unsafe { &*p });
    }
    if NO_SEGMENT.load(Ordering::Relaxed) {
        return None;
    }
    let session = session();
    let flight_ns = if session.is_none() { crate::flight_config::CONFIG.span_ns } else { 0 };
    if session.is_none() && flight_ns == 0 {
        // Outside a session the agent is dormant (NVTX may ask before the driver initialises the agent).
        NO_SEGMENT.store(true, Ordering::Relaxed);
        return None;
    }
    let pid = std::process::id();
    let default = Layout::default();
    let layout = Layout {
        ring_count: env_u32("CUFLIGHT_RINGS", default.ring_count).clamp(1, segment::MAX_RINGS),
        ring_capacity: env_u32("CUFLIGHT_RING_EVENTS", default.ring_capacity)
            .clamp(64, segment::MAX_RING_CAPACITY)
            .next_power_of_two(),
        strings_capacity: default.strings_capacity,
    };
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() } as u32;
    let seg = match MappedSegment::create(layout, pid, ppid, crate::clock::realtime_ns()) {
        Ok(s) => s,
        Err(e) => {
            NO_SEGMENT.store(true, Ordering::Relaxed);
            notice(&format!("cannot create the trace segment: {e}"));
            return None;
        }
    };
    let conn = match session {
        // Hand the segment to the session's collector. None there (it exited, or this process outlived it): the
        // segment is dropped and nothing is recorded.
        Some(session) => match channel::send(&session, seg.fd()) {
            Ok(c) => {
                // The collector has the segment now and drains it within milliseconds: count it as draining from
                // here, so a thread that fills its ring before the first drain waits for it like any later one (a
                // collector that never drains is given up on after a second, as always).
                seg.header().collector_drained_ns.store(crate::clock::monotonic_ns(), Ordering::Relaxed);
                c
            }
            Err(e) => {
                NO_SEGMENT.store(true, Ordering::Relaxed);
                notice(&format!("cannot reach the cuflight collector of session {session} ({e})"));
                return None;
            }
        },
        // A flight recorder: nobody drains; its rings overwrite their oldest events (set before any ring is
        // reserved) and wake-ups go nowhere.
        None => {
            seg.header().flight_recorder_ns.store(flight_ns, Ordering::Relaxed);
            FLIGHT_RECORDER.store(true, Ordering::Relaxed);
            match std::fs::OpenOptions::new().write(true).open("/dev/null") {
                Ok(f) => f.into(),
                Err(e) => {
                    NO_SEGMENT.store(true, Ordering::Relaxed);
                    notice(&format!("cannot open /dev/null ({e})"));
                    return None;
                }
            }
        }
    };
    let agent: &'static Agent =
        Box::leak(Box::new(Agent { seg, interner: Interner::new(), conn, shared: SharedRings::default() }));
    record_process_facts(agent);
    agent.seg.header().state.store(seg_state::RECORDING, Ordering::Release);
    AGENT.store(agent as *const Agent as *mut Agent, Ordering::Release);
    install_hooks();
    Some(agent)
}

fn install_hooks() {
    HOOKS.call_once(|| {
        // SAFETY: registering a plain extern "C" handler with libc.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        // SAFETY: as above.
        unsafe { libc::atexit(at_exit) };
    });
}

fn record_process_facts(agent: &Agent) {
    intern_process_names(agent);
    let h = agent.seg.header();
    // The rank, local rank and world size as launchers set them (torchrun/torch.distributed, Open MPI,
    // MPICH/PMI, Slurm): lets the collector line up the ranks of one job and name each "rank R (local L)".
    let env = |names: &[&str]| names.iter().find_map(|k| std::env::var(k).ok()?.trim().parse::<u32>().ok());
    let rank = env(&["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"]);
    h.rank_plus_one.store(rank.map_or(0, |r| r.saturating_add(1)), Ordering::Relaxed);
    let local = env(&["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"]);
    h.local_rank_plus_one.store(local.map_or(0, |r| r.saturating_add(1)), Ordering::Relaxed);
    let world = env(&["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"]);
    h.world_size.store(world.unwrap_or(0), Ordering::Relaxed);
    h.injected_late.store(late_word(), Ordering::Relaxed);
    if !FORKED.load(Ordering::Relaxed) && same_program_as_parent() {
        FORKED.store(true, Ordering::Relaxed);
    }
}

/// The command line, executable and host, as strings of the segment's current region.
fn intern_process_names(agent: &Agent) {
    let h = agent.seg.header();
    let intern = |s: &[u8]| agent.interner.intern(&agent.seg, s);
    let cmdline = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    h.cmdline.store(intern(cmdline.strip_suffix(b"\0").unwrap_or(&cmdline)), Ordering::Relaxed);
    let exe = std::fs::read_link("/proc/self/exe").map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    h.exe.store(intern(exe.as_bytes()), Ordering::Relaxed);
    let mut host = [0u8; 256];
    // SAFETY: gethostname writes at most host.len() bytes into the buffer.
    let host = if unsafe { libc::gethostname(host.as_mut_ptr() as *mut libc::c_char, host.len()) } == 0 {
        host.split(|b| *b == 0).next().unwrap_or_default().to_vec()
    } else {
        Vec::new()
    };
    h.host.store(intern(&host), Ordering::Relaxed);
}

/// Whether this process runs the same program with the same command line as its parent: a child forked
/// before the agent was live in the parent (Python's fork and forkserver workers, started before the parent
/// touched CUDA, then starting CUDA themselves), which the fork handler could not mark. Such workers leave
/// through `_exit` too. A false match only makes the agent flush more often.
fn same_program_as_parent() -> bool {
    // SAFETY: getppid has no preconditions.
    let ppid = unsafe { libc::getppid() };
    if ppid <= 1 {
        return false;
    }
    let exe = |p: &str| std::fs::read_link(format!("/proc/{p}/exe")).ok();
    let cmdline = |p: &str| std::fs::read(format!("/proc/{p}/cmdline")).ok();
    let parent = ppid.to_string();
    let same_exe = matches!((exe("self"), exe(&parent)), (Some(a), Some(b)) if a == b);
    same_exe && matches!((cmdline("self"), cmdline(&parent)), (Some(a), Some(b)) if a == b)
}

/// Marks the segment DISABLED with `why` and prints the notice (once).
pub fn disable(why: &str) {
    if DISABLED_ONCE.swap(true, Ordering::Relaxed) {
        return;
    }
    if let Some(seg) = segment() {
        seg.set_disabled(why);
    }
    notice(why);
}

/// This process was forked from one the agent was live in, or runs its parent's program and command line (a
/// worker: they often leave through `_exit`).
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}
static FORKED: AtomicBool = AtomicBool::new(false);

extern "C" fn after_fork_in_child() {
    // Runs in the child, single-threaded, before fork returns: only atomics, no allocation.
    FORKED.store(true, Ordering::Relaxed);
    // The child has a segment of its own, which gets its own notice.
    NOTICE.store(false, Ordering::Relaxed);
    DISABLED_ONCE.store(false, Ordering::Relaxed);
    // A running CUPTI stays the parent's; a child of a CUPTI-less parent may initialise its own (DataLoader and
    // multiprocessing workers that start CUDA themselves).
    // The child of a dormant or attached process is quiet: it has no control thread of its own, so nobody could
    // attach to it or detach it (a child of an attached parent would otherwise record on for good).
    // A flight recorder's child likewise: its segment would be one nobody can dump.
    let quiet = ATTACH_ACTIVE.swap(false, Ordering::AcqRel)
        || INIT.load(Ordering::Acquire) == DORMANT
        || FLIGHT_RECORDER.load(Ordering::Relaxed);
    if INIT.load(Ordering::Acquire) != UNINITIALISED {
        INHERITED_CUPTI.store(INIT.load(Ordering::Acquire) == ENABLED, Ordering::Relaxed);
        INIT.store(DISABLED, Ordering::Release);
    }
    NO_SEGMENT.store(quiet, Ordering::Relaxed);
    AGENT.store(std::ptr::null_mut(), Ordering::Release);
    GENERATION.fetch_add(1, Ordering::AcqRel);
    STRINGS_EPOCH.fetch_add(1, Ordering::AcqRel);
}

extern "C" fn at_exit() {
    // CUPTI's forced flush (`cupti::at_exit`, registered later) has run by now: handlers run in reverse order.
    let _ = std::panic::catch_unwind(|| {
        // A fork child that recorded nothing has no segment; do not create one just to close it.
        if let Some(seg) = existing_segment() {
            let h = seg.header();
            if h.state.load(Ordering::Acquire) == seg_state::RECORDING {
                h.state.store(seg_state::FINISHED, Ordering::Release);
            }
        }
    });
}
