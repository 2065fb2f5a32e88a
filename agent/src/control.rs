//! The agent's control socket (`cuflight_format::control`): a thread blocked in `accept` that answers `cuflight
//! ps` (and later attach and dump requests). It is the only thing a dormant agent runs: no CUPTI subscription, no
//! segment, no timer. A fork child does not inherit it (the atfork handler closes the listener's descriptor in
//! the child, whose pid has no listener of its own).

use crate::{clock, cupti, devices, setup, state};

use cuflight_format::control::{self, ControlListener, Status};
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicU8, Ordering};
use std::sync::Once;

static STATE: AtomicU8 = AtomicU8::new(0);
static SINCE_NS: AtomicU64 = AtomicU64::new(0);
/// The listener's descriptor, for the fork child to close (-1 when none).
static LISTENER_FD: AtomicI32 = AtomicI32::new(-1);
static STARTED: Once = Once::new();

/// Enters `state` (a `control::STATE_*`) and, the first time, starts answering on the control socket. Failing to
/// bind (the name taken in this network namespace) costs only `ps` and `attach` for this process.
pub fn start(state: u8) {
    set_state(state);
    STARTED.call_once(|| {
        let listener = match ControlListener::bind() {
            Ok(l) => l,
            // Nothing is printed: a dormant agent never writes to the program's output.
            Err(_) => return,
        };
        LISTENER_FD.store(listener.as_raw_fd(), Ordering::Release);
        // SAFETY: registering a plain extern "C" handler with libc (it only closes a descriptor).
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
        let spawned = std::thread::Builder::new().name("cuflight-ctl".into()).spawn(move || serve(listener));
        if spawned.is_err() {
            LISTENER_FD.store(-1, Ordering::Release);
        }
    });
}

/// The current `control::STATE_*` (0 before the agent started).
pub fn state() -> u8 {
    STATE.load(Ordering::Acquire)
}

fn set_state(state: u8) {
    STATE.store(state, Ordering::Release);
    SINCE_NS.store(clock::realtime_ns(), Ordering::Release);
}

fn serve(listener: ControlListener) {
    if state::injected_late() && traces_nvtx() {
        // Here rather than in the constructor, which runs under the loader's lock in a thread the injector holds.
        let _ = std::panic::catch_unwind(|| {
            let found = crate::nvtx_late::hook_tables();
            state::set_nvtx_late(found.hooked, found.foreign)
        });
    }
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loop {
        // While an attached collector records, its connection is watched: a collector that dies (killed, out
        // of memory) ends the window here, so the program is not left recording into rings nobody drains.
        let watch = (STATE.load(Ordering::Acquire) == control::STATE_RECORDING && !state::session_from_env())
            .then(state::collector_conn)
            .flatten();
        // A flight recorder looks at its dump requests and hang watch five times a second.
        let flight = STATE.load(Ordering::Acquire) == control::STATE_FLIGHT_RECORDER;
        let (request, collector_gone) = listener.poll(watch, if flight { 200 } else { 1000 });
        if flight {
            crate::flight::service();
        }
        if collector_gone {
            let _ = detach();
            continue;
        }
        if !request {
            continue;
        }
        match listener.next() {
            Ok(req) if req.command == control::COMMAND_STATUS => {
                let _ = req.reply_status(&status());
            }
            Ok(req) if req.command == control::COMMAND_ATTACH => {
                let result = control::parse_attach_payload(&req.payload).and_then(|(session, trace)| {
                    if state::dormant() {
                        crate::trace_choice::set_attach_mask(trace);
                    }
                    attach(session)
                });
                let _ = req.reply_result(result);
            }
            Ok(req) if req.command == control::COMMAND_DUMP => {
                let result = if STATE.load(Ordering::Acquire) != control::STATE_FLIGHT_RECORDER {
                    Err("not a flight recorder (start the program with `cuflight launch --flight-recorder DUR`)".into())
                } else {
                    std::str::from_utf8(&req.payload)
                        .map_err(|_| "session name is not UTF-8".to_string())
                        .and_then(crate::flight::dump_to_session)
                };
                let _ = req.reply_result(result);
            }
            Ok(req) if req.command == control::COMMAND_DETACH => {
                let _ = req.reply_result(detach());
            }
            // A newer collector's command: say so, rather than leave it guessing.
            Ok(req) => {
                let command = req.command;
                let _ =
                    req.reply_result(Err(format!("this agent does not know command {command} (an older cuflight)")));
            }
            // Strangers and broken requests are dropped with their connection.
            Err(cuflight_format::channel::ChannelError::Stranger { .. }) => {}
            Err(cuflight_format::channel::ChannelError::Protocol(_)) => {}
            // accept itself failing (descriptors exhausted): back off rather than spin.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    }));
}

/// NVTX is asked for (`--trace`): only then are NVTX tables found late filled.
fn traces_nvtx() -> bool {
    crate::trace_choice::trace_mask() & cuflight_format::tracing::NVTX != 0
}

/// Wakes a dormant agent into `session` (a `cuflight attach` collector): segment, CUPTI, recording.
fn attach(session: &str) -> Result<(), String> {
    if session.is_empty() || session.contains('/') || session.len() > 100 {
        return Err("bad session name".into());
    }
    if !state::dormant() {
        return Err(match STATE.load(Ordering::Acquire) {
            control::STATE_RECORDING => "already recording (another collector attached, or `cuflight record`)".into(),
            control::STATE_FLIGHT_RECORDER => {
                "it is a flight recorder, recording already (`cuflight dump PID` takes its last seconds)".into()
            }
            _ => "the agent is off in this process".into(),
        });
    }
    state::wake_for(session)?;
    if state::injected_late() && traces_nvtx() {
        // Libraries may have started NVTX since the last look.
        let found = crate::nvtx_late::hook_tables();
        state::set_nvtx_late(found.hooked, found.foreign);
    }
    // An attach: the program's contexts exist, too late for hardware timestamps (`hes`).
    match setup::start(false) {
        Ok(()) => {
            state::finish_init(true);
            cupti::record_devices_now();
            crate::nvtx::repeat_names();
            set_state(control::STATE_RECORDING);
            Ok(())
        }
        Err(why) => {
            // Back to dormant, the collector told why (another CUPTI client, an unsupported CUPTI).
            state::back_to_dormant();
            Err(why)
        }
    }
}

/// Ends the window of an attached collector; the agent is dormant again.
fn detach() -> Result<(), String> {
    if STATE.load(Ordering::Acquire) != control::STATE_RECORDING || state::session_from_env() {
        return Err("not recording for an attached collector".into());
    }
    setup::stop();
    state::back_to_dormant();
    set_state(control::STATE_DORMANT);
    Ok(())
}

fn status() -> Status {
    Status {
        pid: std::process::id(),
        state: STATE.load(Ordering::Acquire),
        since_ns: SINCE_NS.load(Ordering::Acquire),
        cupti_version: cupti::version(),
        driver_version: devices::driver_version(),
        cupti_sessions: setup::sessions(),
    }
}

/// In a fork child (single-threaded, before fork returns): the listener belongs to the parent's thread, which
/// the child does not have; closing the child's copy keeps the name answering for the parent only.
extern "C" fn after_fork_in_child() {
    let fd = LISTENER_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: close(2) is async-signal-safe; the descriptor is this process's inherited copy.
        unsafe { libc::close(fd) };
    }
}
