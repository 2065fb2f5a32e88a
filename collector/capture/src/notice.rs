//! What a capture or live command tells its user while it works (a window cut short, a write that failed, a refused
//! segment): one line each, to standard error, unless the command draws a full-screen interface on the terminal
//! (`top`), where a line written to standard error lands over its table (a full temporary directory once filled
//! top's screen with a pair of lines a second): such a command [`divert`]s them and shows them its own way.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, PoisonError};

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

    #[test]
    fn diverted_notices_reach_the_receiver_and_stop_when_it_goes() {
        let from = divert();
        notice(format_args!("cuflight: window {} cut short", 3));
        assert_eq!(from.try_recv().as_deref(), Ok("cuflight: window 3 cut short"));
        drop(from);
        // Back on standard error: nothing to receive, and no panic.
        notice("cuflight: said on standard error");
    }
}
