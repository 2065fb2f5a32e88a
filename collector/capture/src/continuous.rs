//! Continuous recording of a running program's dormant agent, for `cuflight serve --duty continuous`: attached
//! once and drained without pause into back-to-back files of one interval each, each handed over (to be folded
//! into counters and removed) as soon as it is complete. Windows attached one after another would re-arm CUPTI
//! each time (an attach to a PyTorch loop on an H100 was armed 20 ms after the request, 2026-11-27, and each
//! window ends with a flush and a detach); here only the first arming is lost.

use super::attach::{request_attach, request_detach, AttachError};
use super::session::Session;
use super::window::{Range, Window};
use cuflight_format::{control, segment};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// One completed file: where it is and the span of the program it covers (ns on CLOCK_MONOTONIC).
pub struct Part<'a> {
    pub path: &'a Path,
    pub from_ns: u64,
    pub to_ns: u64,
    /// Why the file does not hold the whole span (a write error, said already): what it holds would read low.
    pub incomplete: Option<String>,
}

/// Records process `pid` until it exits, `stop` is set or `done` returns false, rotating to a fresh file
/// (`dir/PID-N.cuf`) every `interval`; `done` gets each completed file. Returns how many files were completed.
pub fn attach_continuous(
    pid: u32,
    dir: &Path,
    interval: Duration,
    stop: &AtomicBool,
    mut done: impl FnMut(Part) -> bool,
) -> Result<u32, AttachError> {
    let name = control::find(pid).map_err(AttachError::List)?.ok_or(AttachError::NoAgent(pid))?;
    let path_of = |n: u32| -> PathBuf { dir.join(format!("{pid}-{n}.cuf")) };
    let mut n = 0;
    let mut session = Session::open_near(&path_of(n), true, control::netns_of(&name), control::uid_of(&name))?;
    session.set_window(Window::new(Range::Armed { ns: None, delay_ns: 0 }));
    request_attach(&name, &session.name, pid, None)?;
    let command = vec![format!("attach {pid} (continuous)")];
    // The first file covers the program from its arming on; each later one from the previous cut.
    let mut from_ns = None;
    let mut cut_at = Instant::now() + interval;
    let exited = loop {
        session.step(false);
        if from_ns.is_none() && session.armed_ns().is_some() {
            // On the collector's clock (the agent's may carry a test offset): at most one wait after arming.
            from_ns = Some(segment::monotonic_ns());
        }
        if session.all_ended() && session.processes() > 0 {
            break true;
        }
        if stop.load(Ordering::Relaxed) {
            break false;
        }
        if Instant::now() >= cut_at {
            cut_at += interval;
            let to_ns = segment::monotonic_ns();
            let incomplete = match session.rotate(&path_of(n + 1), &command) {
                Ok(incomplete) => incomplete,
                Err(e) => {
                    let _ = request_detach(&name);
                    return Err(e.into());
                }
            };
            let finished = path_of(n);
            n += 1;
            let keep_going = match from_ns {
                Some(f) => done(Part { path: &finished, from_ns: f, to_ns, incomplete }),
                None => true, // not armed yet: nothing in it
            };
            let _ = std::fs::remove_file(&finished);
            from_ns = from_ns.map(|_| to_ns);
            if !keep_going {
                break false;
            }
        }
        session.wait(cut_at.saturating_duration_since(Instant::now()).as_millis().clamp(1, 50) as i32);
    };
    if !exited {
        // Left dormant again; a failure to reach it is the process leaving as we go.
        let _ = request_detach(&name);
    }
    let to_ns = segment::monotonic_ns();
    let incomplete = session.finish(command, None).stopped;
    let last = path_of(n);
    if let Some(f) = from_ns {
        done(Part { path: &last, from_ns: f, to_ns, incomplete });
        n += 1;
    }
    let _ = std::fs::remove_file(&last);
    Ok(n)
}
