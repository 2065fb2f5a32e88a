//! What a capture or live command tells its user while it works (a window cut short, a write that failed, a refused
//! segment): one line each, to standard error, unless the command draws a full-screen interface on the terminal
//! (`top`), where a line written to standard error lands over its table (a full temporary directory once filled
//! top's screen with a pair of lines a second): such a command [`divert`]s them and shows them its own way.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

static DIVERTED: Mutex<Option<Sender<String>>> = Mutex::new(None);

/// Tells the user `line`. A standard error that cannot be written (a terminal gone) loses it: `eprintln!` would
/// panic there instead.
pub fn notice(line: impl std::fmt::Display) {
    let line = line.to_string();
    let diverted = DIVERTED.lock().unwrap_or_else(PoisonError::into_inner);
    match diverted.as_ref() {
        Some(to) if to.send(line.clone()).is_ok() => {}
        _ => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }
}

/// Lines of the same kind said less than [`EVERY`] ago, by kind: when they were said and how many were held back
/// since. Bounded: kinds are few (the callers' own), and past [`KINDS`] every line is said.
static SAID: Mutex<Vec<(String, Instant, u64)>> = Mutex::new(Vec::new());
const EVERY: Duration = Duration::from_secs(60);
const KINDS: usize = 64;

/// [`notice`], for what may repeat without end (every window `serve` records into a full directory fails alike):
/// `line` is said unless a line of the same kind was said less than a minute ago; those held back are counted in
/// the next one said. Lines of a kind differ only in their numbers (files written one after another are named by
/// number, sizes and counts vary).
pub fn at_most_a_minute(line: impl std::fmt::Display) {
    let line = line.to_string();
    let kind: String = line.chars().filter(|c| !c.is_ascii_digit()).collect();
    let mut said = SAID.lock().unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    let held = match said.iter_mut().find(|(k, _, _)| *k == kind) {
        Some((_, at, held)) if now.duration_since(*at) < EVERY => {
            *held += 1;
            return;
        }
        Some((_, at, held)) => {
            let was = (*held, now.duration_since(*at));
            (*at, *held) = (now, 0);
            Some(was)
        }
        None => {
            if said.len() < KINDS {
                said.push((kind, now, 0));
            }
            None
        }
    };
    drop(said);
    match held {
        Some((n, since)) if n > 0 => {
            notice(format_args!("{line} ({n} more like it in the {} s before)", since.as_secs()))
        }
        _ => notice(line),
    }
}

/// [`notice`] with `format!`'s arguments.
#[macro_export]
macro_rules! notice {
    ($($arg:tt)*) => {
        $crate::notice::notice(format_args!($($arg)*))
    };
}

/// Sends every later notice to the returned receiver instead of standard error, until it is dropped (or
/// [`divert`] is called again).
pub fn divert() -> Receiver<String> {
    let (to, from) = channel();
    *DIVERTED.lock().unwrap_or_else(PoisonError::into_inner) = Some(to);
    from
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The diversion is the process's: one test at a time holds it.
    static DIVERSION: Mutex<()> = Mutex::new(());

    #[test]
    fn diverted_notices_reach_the_receiver_and_stop_when_it_goes() {
        let _one = DIVERSION.lock().unwrap_or_else(PoisonError::into_inner);
        let from = divert();
        notice(format_args!("cuflight: window {} cut short", 3));
        assert_eq!(from.try_recv().as_deref(), Ok("cuflight: window 3 cut short"));
        drop(from);
        // Back on standard error: nothing to receive, and no panic.
        notice("cuflight: said on standard error");
    }

    #[test]
    fn a_repeated_kind_is_said_once_a_minute_with_the_count_held_back() {
        let _one = DIVERSION.lock().unwrap_or_else(PoisonError::into_inner);
        let from = divert();
        // Marked, as other tests of this binary may say something meanwhile: by letters, since a kind is what a
        // line says but its digits.
        let mark: String = std::process::id().to_string().bytes().map(|d| char::from(d - b'0' + b'a')).collect();
        for n in 0..5 {
            at_most_a_minute(format_args!("{mark}: window {n} not written"));
        }
        at_most_a_minute(format_args!("{mark}: another"));
        // A minute later (moved back rather than waited for).
        let kind = format!("{mark}: window  not written");
        for (k, at, _) in SAID.lock().unwrap().iter_mut() {
            if *k == kind {
                *at = at.checked_sub(EVERY).unwrap_or(*at);
            }
        }
        at_most_a_minute(format_args!("{mark}: window 9 not written"));
        at_most_a_minute(format_args!("{mark}: window 10 not written"));
        let got: Vec<String> = from.try_iter().filter(|l| l.starts_with(&format!("{mark}: "))).collect();
        assert_eq!(got.len(), 3, "{got:?}");
        assert_eq!(got[0], format!("{mark}: window 0 not written"));
        assert_eq!(got[1], format!("{mark}: another"));
        assert_eq!(got[2], format!("{mark}: window 9 not written (4 more like it in the 60 s before)"));
    }
}
