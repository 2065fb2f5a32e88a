//! NVTX injection: `InitializeInjectionNvtx2` fills the CORE and CORE2 function tables of every NVTX-using
//! library that calls it (each library embeds its own copy of NVTX and calls us separately). Ranges, marks,
//! domains, registered strings and thread names become events on the calling thread's ring.

use crate::{clock, nvtx_handles, sampler, state, thread_names, thread_rings};
use cuflight_format::view::Nvtx;
use cuflight_format::{EventKind, RawEvent};
use cupti_sys::cuda13 as c;
use std::ffi::{c_char, c_int, CStr};

type WChar = c::wchar_t;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static NEXT_RANGE: AtomicU64 = AtomicU64::new(1);

/// Offset just past `message` in nvtxEventAttributes_v2: attributes smaller than this are not read.
const ATTR_MIN_SIZE: u16 = std::mem::size_of::<c::nvtxEventAttributes_t>() as u16;

fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// [`guard`] for the per-event handlers (marks, ranges): while nothing records (a dormant agent, a process
/// whose session is gone) they return at once, one predictable branch, without reading the clock or the
/// string. Registration calls (domains, strings, categories) keep working, so handles stay valid for later.
#[inline(always)]
fn hot<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    if state::quiet() || !RECORDED.load(Ordering::Relaxed) {
        return fallback;
    }
    guard(fallback, f)
}

/// Whether the current window traces NVTX: a window attached with `--trace` that leaves it out finds the tool
/// installed at launch, and its handlers then return at once, as they do while dormant.
static RECORDED: AtomicBool = AtomicBool::new(true);

/// Set when a window is configured (`setup`).
pub fn set_recorded(on: bool) {
    RECORDED.store(on, Ordering::Relaxed);
}

fn cstr_id(s: *const c_char) -> u32 {
    if s.is_null() {
        return 0;
    }
    // SAFETY: NVTX messages are NUL-terminated strings valid for the call.
    unsafe { crate::name_cache::id(s) }
}

/// Interns a wide (wchar_t, UTF-32 on Linux) NVTX string, at most 4096 characters.
fn wstr_id(p: *const WChar) -> u32 {
    if p.is_null() {
        return 0;
    }
    state::intern(wstr(p).as_bytes())
}

fn cstr_bytes(s: *const c_char) -> Vec<u8> {
    if s.is_null() {
        return Vec::new();
    }
    // SAFETY: NVTX names are NUL-terminated strings valid for the call.
    unsafe { CStr::from_ptr(s) }.to_bytes().to_vec()
}

/// A wide NVTX string as UTF-8, at most 4096 characters.
fn wstr(p: *const WChar) -> String {
    let mut s = String::new();
    if p.is_null() {
        return s;
    }
    let mut p = p;
    // NVTX's W messages are NUL-terminated wchar_t strings valid for the call; we stop at the NUL.
    while s.len() < 4096 {
        // SAFETY: `p` is at or before the string's NUL, so it points into the string.
        let ch = unsafe { *p };
        if ch == 0 {
            break;
        }
        s.push(char::from_u32(ch as u32).unwrap_or('\u{FFFD}'));
        p = p.wrapping_add(1);
    }
    s
}

/// A thread or category name the program gives: recorded now, and kept to be given again in later windows and
/// dumps ([`thread_names::remember`]).
fn name_given(kind: EventKind, domain: c::nvtxDomainHandle_t, a: u64, name: Vec<u8>) {
    let id = state::intern(&name);
    let domain = domain as usize;
    thread_names::remember(kind, domain, a, name);
    event(kind, nvtx_handles::id(domain), id, no_extra(), a);
}

/// Records every thread and category name given so far again (a new window, a dump), after the OS names of the
/// threads alive ([`thread_names::live_threads`]).
pub fn repeat_names() {
    for ev in thread_names::live_threads() {
        thread_rings::push(ev);
    }
    for (kind, domain, a, name) in thread_names::given() {
        event(kind, nvtx_handles::id(domain), state::intern(&name), no_extra(), a);
    }
}

/// What an attributes struct says besides the message: its category, color and payload (type, bits).
#[derive(Clone, Copy, Default)]
struct Extra {
    category: u32,
    color: u32,
    payload: (u8, u64),
}

/// (message id, the rest) of an attributes struct.
fn attr(a: *const c::nvtxEventAttributes_t) -> (u32, Extra) {
    if a.is_null() {
        return (0, Extra::default());
    }
    // SAFETY: NVTX passes a valid attributes struct; we only read it if its declared size covers the fields.
    let a = unsafe { &*a };
    if a.size < ATTR_MIN_SIZE {
        return (0, Extra::default());
    }
    // Payload types 1..=6 (nvToolsExt.h: NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 .. _FLOAT); the union's 8 bytes hold it.
    let payload = match a.payloadType {
        // SAFETY: every member of the 8-byte payload union is plain data; ullValue reads all its bits.
        t @ 1..=6 => (t as u8, unsafe { a.payload.ullValue }),
        _ => (0, 0),
    };
    let extra = Extra { category: a.category, color: a.color, payload };
    // The union member read matches messageType, as NVTX requires of callers.
    let id = match a.messageType as u32 {
        // SAFETY: as said: a NUL-terminated string valid for the call.
        c::NVTX_MESSAGE_TYPE_ASCII => unsafe { cstr_id(a.message.ascii) },
        // SAFETY: as said.
        c::NVTX_MESSAGE_TYPE_REGISTERED => nvtx_handles::id(unsafe { a.message.registered } as usize),
        // SAFETY: as said: a NUL-terminated wide string valid for the call.
        c::NVTX_MESSAGE_TYPE_UNICODE => unsafe { wstr_id(a.message.unicode) },
        _ => 0,
    };
    (id, extra)
}

fn no_extra() -> Extra {
    Extra::default()
}

/// A start's or end's range id (`id`; 0 for the other kinds).
fn event(kind: EventKind, domain: u32, name: u32, extra: Extra, id: u64) {
    // Between the steps `record --sample` records, marks are not kept.
    if kind == EventKind::NvtxMark && !sampler::keeps_everything() {
        return;
    }
    thread_rings::push(nvtx_event_with_id(kind, domain, name, extra, id));
}

/// The kind of step the string interned as `name` marks ([`crate::slow_steps::kind_index`]), None where it marks
/// none (`record --sample` and the slow-step watch ask where a step may begin).
fn step_kind(name: u32) -> Option<u8> {
    state::with_interned(name, |bytes| {
        let name = std::str::from_utf8(bytes).ok().filter(|n| cuflight_format::step_names::step_like(n))?;
        Some(crate::slow_steps::kind_index(name))
    })
    .flatten()
}

fn nvtx_event(kind: EventKind, domain: u32, name: u32, extra: Extra) -> RawEvent {
    nvtx_event_with_id(kind, domain, name, extra, 0)
}

fn nvtx_event_with_id(kind: EventKind, domain: u32, name: u32, extra: Extra, id: u64) -> RawEvent {
    let now = clock::monotonic_ns();
    let mut ev = RawEvent::new(kind, 0, now, now);
    ev.name = name;
    ev.set_nvtx(
        kind,
        Nvtx {
            domain: domain as u64,
            id,
            global: false,
            category: extra.category,
            color: extra.color,
            payload_type: extra.payload.0,
            payload_bits: extra.payload.1,
        },
    );
    ev
}

/// Push and pop touch the thread state once: the depth NVTX returns (per domain, as NVTX keeps one stack per
/// domain) and the ring.
fn push_range(domain: u32, name: u32, extra: Extra) -> c_int {
    let ev = nvtx_event(EventKind::NvtxPush, domain, name, extra);
    thread_rings::with_thread(|t| {
        let depth = t.nvtx_depth_of(domain);
        let before = depth.get();
        // Sampling: a step may begin here (and its recording with it, before its push is written).
        if !sampler::tracking_steps() || sampler::pushed(t, domain, before, ev.start, || step_kind(name)) {
            t.push(ev);
        }
        depth.set(before + 1);
        before
    })
    .unwrap_or_else(|| {
        if sampler::keeps_everything() {
            thread_rings::push(ev);
        }
        0
    })
}

fn pop_range(domain: u32) -> c_int {
    let ev = nvtx_event(EventKind::NvtxPop, domain, 0, no_extra());
    thread_rings::with_thread(|t| {
        let depth = t.nvtx_depth_of(domain);
        let d = depth.get();
        let (keep, ends_step) = match sampler::tracking_steps() {
            true if d > 0 => sampler::popping(t, domain, d - 1),
            true => (sampler::keeps_everything(), None),
            false => (true, None),
        };
        if keep {
            t.push(ev);
        }
        if let Some(step) = ends_step {
            sampler::step_ended(step);
        }
        if d == 0 {
            return -1;
        }
        depth.set(d - 1);
        d - 1
    })
    .unwrap_or_else(|| {
        if sampler::keeps_everything() {
            thread_rings::push(ev);
        }
        -1
    })
}

/// A fresh id for an NVTX start/end range (shared with [`crate::api`]'s step ranges, so ids never collide).
pub fn next_range_id() -> u64 {
    NEXT_RANGE.fetch_add(1, Ordering::Relaxed)
}

fn start_range(domain: u32, name: u32, extra: Extra) -> u64 {
    let id = next_range_id();
    if !sampler::tracking_steps() || sampler::started(id, || step_kind(name)) {
        event(EventKind::NvtxStart, domain, name, extra, id);
    }
    id
}

fn end_range(domain: u32, id: u64) {
    let (keep, ends_step) = if sampler::tracking_steps() { sampler::ending(id) } else { (true, None) };
    if keep {
        event(EventKind::NvtxEnd, domain, 0, no_extra(), id);
    }
    if let Some(step) = ends_step {
        sampler::step_ended(step);
    }
}

fn domain_id(d: c::nvtxDomainHandle_t) -> u32 {
    nvtx_handles::id(d as usize)
}

unsafe extern "C" fn mark_ex(a: *const c::nvtxEventAttributes_t) {
    hot((), || {
        let (id, extra) = attr(a);
        event(EventKind::NvtxMark, 0, id, extra, 0)
    })
}
unsafe extern "C" fn mark_a(m: *const c_char) {
    hot((), || event(EventKind::NvtxMark, 0, cstr_id(m), no_extra(), 0))
}
unsafe extern "C" fn range_start_ex(a: *const c::nvtxEventAttributes_t) -> u64 {
    hot(0, || {
        let (id, extra) = attr(a);
        start_range(0, id, extra)
    })
}
unsafe extern "C" fn range_start_a(m: *const c_char) -> u64 {
    hot(0, || start_range(0, cstr_id(m), no_extra()))
}
unsafe extern "C" fn range_end(id: u64) {
    hot((), || end_range(0, id))
}
unsafe extern "C" fn range_push_ex(a: *const c::nvtxEventAttributes_t) -> c_int {
    hot(-1, || {
        let (id, extra) = attr(a);
        push_range(0, id, extra)
    })
}
unsafe extern "C" fn range_push_a(m: *const c_char) -> c_int {
    hot(-1, || push_range(0, cstr_id(m), no_extra()))
}
unsafe extern "C" fn range_pop() -> c_int {
    hot(-1, || pop_range(0))
}
unsafe extern "C" fn name_os_thread_a(tid: u32, name: *const c_char) {
    guard((), || name_given(EventKind::ThreadName, std::ptr::null_mut(), tid as u64, cstr_bytes(name)))
}
unsafe extern "C" fn domain_mark_ex(d: c::nvtxDomainHandle_t, a: *const c::nvtxEventAttributes_t) {
    hot((), || {
        let (id, extra) = attr(a);
        event(EventKind::NvtxMark, domain_id(d), id, extra, 0)
    })
}
unsafe extern "C" fn domain_range_start_ex(d: c::nvtxDomainHandle_t, a: *const c::nvtxEventAttributes_t) -> u64 {
    hot(0, || {
        let (id, extra) = attr(a);
        start_range(domain_id(d), id, extra)
    })
}
unsafe extern "C" fn domain_range_end(d: c::nvtxDomainHandle_t, id: u64) {
    hot((), || end_range(domain_id(d), id))
}
unsafe extern "C" fn domain_range_push_ex(d: c::nvtxDomainHandle_t, a: *const c::nvtxEventAttributes_t) -> c_int {
    hot(-1, || {
        let (id, extra) = attr(a);
        push_range(domain_id(d), id, extra)
    })
}
unsafe extern "C" fn domain_range_pop(d: c::nvtxDomainHandle_t) -> c_int {
    hot(-1, || pop_range(domain_id(d)))
}
unsafe extern "C" fn mark_w(m: *const WChar) {
    hot((), || event(EventKind::NvtxMark, 0, wstr_id(m), no_extra(), 0))
}
unsafe extern "C" fn range_start_w(m: *const WChar) -> u64 {
    hot(0, || start_range(0, wstr_id(m), no_extra()))
}
unsafe extern "C" fn range_push_w(m: *const WChar) -> c_int {
    hot(-1, || push_range(0, wstr_id(m), no_extra()))
}
unsafe extern "C" fn name_os_thread_w(tid: u32, name: *const WChar) {
    guard((), || name_given(EventKind::ThreadName, std::ptr::null_mut(), tid as u64, wstr(name).into_bytes()))
}
unsafe extern "C" fn name_category_a(category: u32, name: *const c_char) {
    guard((), || name_given(EventKind::NvtxCategory, std::ptr::null_mut(), category as u64, cstr_bytes(name)))
}
unsafe extern "C" fn name_category_w(category: u32, name: *const WChar) {
    guard((), || name_given(EventKind::NvtxCategory, std::ptr::null_mut(), category as u64, wstr(name).into_bytes()))
}
unsafe extern "C" fn domain_name_category_a(d: c::nvtxDomainHandle_t, category: u32, name: *const c_char) {
    guard((), || name_given(EventKind::NvtxCategory, d, category as u64, cstr_bytes(name)))
}
unsafe extern "C" fn domain_name_category_w(d: c::nvtxDomainHandle_t, category: u32, name: *const WChar) {
    guard((), || name_given(EventKind::NvtxCategory, d, category as u64, wstr(name).into_bytes()))
}
unsafe extern "C" fn domain_register_string_w(_d: c::nvtxDomainHandle_t, s: *const WChar) -> c::nvtxStringHandle_t {
    guard(std::ptr::null_mut(), || nvtx_handles::register(wstr(s).as_bytes()) as c::nvtxStringHandle_t)
}
unsafe extern "C" fn domain_create_w(name: *const WChar) -> c::nvtxDomainHandle_t {
    guard(std::ptr::null_mut(), || nvtx_handles::register(wstr(name).as_bytes()) as c::nvtxDomainHandle_t)
}
/// Registered strings and domains are handed out as handles of [`nvtx_handles`], valid in every later window
/// also when made while nothing recorded (a dormant agent).
unsafe extern "C" fn domain_register_string_a(_d: c::nvtxDomainHandle_t, s: *const c_char) -> c::nvtxStringHandle_t {
    guard(std::ptr::null_mut(), || nvtx_handles::register(&cstr_bytes(s)) as c::nvtxStringHandle_t)
}
unsafe extern "C" fn domain_create_a(name: *const c_char) -> c::nvtxDomainHandle_t {
    guard(std::ptr::null_mut(), || nvtx_handles::register(&cstr_bytes(name)) as c::nvtxDomainHandle_t)
}
unsafe extern "C" fn domain_destroy(_d: c::nvtxDomainHandle_t) {}
unsafe extern "C" fn initialize(_reserved: *const std::ffi::c_void) {}

type Entry = (u32, c::NvtxFunctionPointer);

macro_rules! entry {
    ($cbid:expr, $f:expr) => {
        // SAFETY: NVTX calls each slot with the signature of its cbid (nvtxTypes.h), which `$f` has; the table
        // stores them type-erased as `void (*)(void)`.
        ($cbid, Some(unsafe { std::mem::transmute::<*const (), unsafe extern "C" fn()>($f as *const ()) }))
    };
}

fn core_entries() -> [Entry; 15] {
    [
        entry!(c::NVTX_CBID_CORE_MarkW, mark_w),
        entry!(c::NVTX_CBID_CORE_RangeStartW, range_start_w),
        entry!(c::NVTX_CBID_CORE_RangePushW, range_push_w),
        entry!(c::NVTX_CBID_CORE_NameOsThreadW, name_os_thread_w),
        entry!(c::NVTX_CBID_CORE_NameCategoryA, name_category_a),
        entry!(c::NVTX_CBID_CORE_NameCategoryW, name_category_w),
        entry!(c::NVTX_CBID_CORE_MarkEx, mark_ex),
        entry!(c::NVTX_CBID_CORE_MarkA, mark_a),
        entry!(c::NVTX_CBID_CORE_RangeStartEx, range_start_ex),
        entry!(c::NVTX_CBID_CORE_RangeStartA, range_start_a),
        entry!(c::NVTX_CBID_CORE_RangeEnd, range_end),
        entry!(c::NVTX_CBID_CORE_RangePushEx, range_push_ex),
        entry!(c::NVTX_CBID_CORE_RangePushA, range_push_a),
        entry!(c::NVTX_CBID_CORE_RangePop, range_pop),
        entry!(c::NVTX_CBID_CORE_NameOsThreadA, name_os_thread_a),
    ]
}

fn core2_entries() -> [Entry; 13] {
    [
        entry!(c::NVTX_CBID_CORE2_DomainNameCategoryA, domain_name_category_a),
        entry!(c::NVTX_CBID_CORE2_DomainNameCategoryW, domain_name_category_w),
        entry!(c::NVTX_CBID_CORE2_DomainRegisterStringW, domain_register_string_w),
        entry!(c::NVTX_CBID_CORE2_DomainCreateW, domain_create_w),
        entry!(c::NVTX_CBID_CORE2_DomainMarkEx, domain_mark_ex),
        entry!(c::NVTX_CBID_CORE2_DomainRangeStartEx, domain_range_start_ex),
        entry!(c::NVTX_CBID_CORE2_DomainRangeEnd, domain_range_end),
        entry!(c::NVTX_CBID_CORE2_DomainRangePushEx, domain_range_push_ex),
        entry!(c::NVTX_CBID_CORE2_DomainRangePop, domain_range_pop),
        entry!(c::NVTX_CBID_CORE2_DomainRegisterStringA, domain_register_string_a),
        entry!(c::NVTX_CBID_CORE2_DomainCreateA, domain_create_a),
        entry!(c::NVTX_CBID_CORE2_DomainDestroy, domain_destroy),
        entry!(c::NVTX_CBID_CORE2_Initialize, initialize),
    ]
}

/// Fills the calling NVTX library's tables. Returns 1 on success, as `InitializeInjectionNvtx2` must.
pub fn install(get_export_table: c::NvtxGetExportTableFunc_t) -> c_int {
    let Some(get) = get_export_table else {
        return 0;
    };
    // SAFETY: NVTX's export-table getter; NVTX_ETID_CALLBACKS yields an NvtxExportTableCallbacks.
    let table = unsafe { get(c::NVTX_ETID_CALLBACKS) } as *const c::NvtxExportTableCallbacks;
    if table.is_null() {
        return 0;
    }
    // SAFETY: non-null table from NVTX, valid for the process lifetime.
    install_callbacks(unsafe { &*table })
}

/// Whether `f` is one of the functions the agent puts in NVTX's tables.
pub fn ours(f: usize) -> bool {
    core_entries().iter().chain(core2_entries().iter()).any(|(_, g)| g.map(|g| g as usize) == Some(f))
}

/// Fills the tables a library's NVTX callbacks hand out (also used for tables found late, see `nvtx_late`).
pub fn install_callbacks(table: &c::NvtxExportTableCallbacks) -> c_int {
    let Some(get_module) = table.GetModuleFunctionTable else {
        return 0;
    };
    let (core, core2) = (core_entries(), core2_entries());
    for (module, entries) in [(c::NVTX_CB_MODULE_CORE, &core[..]), (c::NVTX_CB_MODULE_CORE2, &core2[..])] {
        let mut slots: c::NvtxFunctionTable = std::ptr::null_mut();
        let mut size: u32 = 0;
        // SAFETY: NVTX fills the out-parameters with its table of slot pointers and their count.
        if unsafe { get_module(module, &mut slots, &mut size) } == 0 || slots.is_null() {
            continue;
        }
        for &(cbid, f) in entries {
            if cbid == 0 || cbid > size {
                continue;
            }
            // SAFETY: `slots` has `size + 1` entries (index 0 unused).
            let slot = unsafe { *slots.wrapping_add(cbid as usize) };
            if !slot.is_null() {
                // SAFETY: each non-null entry points at the library's function-pointer variable for that cbid.
                unsafe { *slot = f };
            }
        }
    }
    1
}
