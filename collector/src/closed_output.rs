//! A reader that goes away (`cuflight stats T | head`, quitting `less`) ends the command quietly, as other Unix
//! tools end: Rust ignores SIGPIPE, so a write to the closed pipe fails with EPIPE instead of killing the
//! process, and `println!` turns that failure into a panic. The collector stays free of unsafe code (no
//! `signal(SIGPIPE, SIG_DFL)`): print failures are caught where they surface, in the panic hook and in the errors
//! `run` returns.

use std::io::ErrorKind;

/// The status of a process that SIGPIPE ended (128 + 13), what a shell reports for `yes | head`.
pub const BROKEN_PIPE_STATUS: i32 = 141;

/// Replaces the panic hook: a failed `print!`/`eprint!` ends the process with [`BROKEN_PIPE_STATUS`] and no
/// message when the pipe closed, or with one line and status 1 for any other output error (a full disk);
/// every other panic is reported as before.
pub fn install() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let text = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        let Some(why) = text.strip_prefix("failed printing to ") else {
            return default(info);
        };
        // The exit runs no destructor: the command's private directories are removed first.
        use cuflight_collector::capture::private_dir::remove_all_then;
        if why.contains("Broken pipe") || why.contains("os error 32") {
            remove_all_then(|| {}, BROKEN_PIPE_STATUS);
        }
        // Standard error may be the stream that failed: one attempt, never a second panic.
        let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("cuflight: cannot write {why}\n").as_bytes());
        remove_all_then(|| {}, 1);
    }));
}

/// Whether an error returned by a command is its output's reader having gone away.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
            || cause.to_string().contains("Broken pipe (os error 32)")
    })
}
