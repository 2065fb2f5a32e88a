//! Waiting for a child process of cuflight's own (the doctor's probe, a Python interpreter, the MCP server's
//! commands) without ever waiting longer than the caller allows: a hung driver or a stuck program must not hang
//! the command that started it.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How a child waited for with [`wait_with_deadline`] ended.
#[derive(Debug)]
pub enum Ended {
    /// On its own, within the limit.
    Exited(ExitStatus),
    /// Asked to stop (SIGTERM) at the limit, then ended within the grace period.
    Stopped(ExitStatus),
    /// Killed (SIGKILL) and reaped: it did not end in time.
    Killed,
}

/// Waits for `child` at most `limit`; then, given a `grace`, sends SIGTERM (so that it can end cleanly: a
/// `cuflight record` keeps its trace) and waits that much longer; then kills and reaps it.
pub fn wait_with_deadline(child: &mut Child, limit: Duration, grace: Option<Duration>) -> std::io::Result<Ended> {
    let start = Instant::now();
    let mut asked_to_stop = false;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(if asked_to_stop { Ended::Stopped(status) } else { Ended::Exited(status) });
        }
        let waited = start.elapsed();
        match grace {
            Some(_) if !asked_to_stop && waited > limit => {
                let _ = cuflight_format::channel::signal_process(child.id(), libc::SIGTERM);
                asked_to_stop = true;
            }
            Some(grace) if waited > limit + grace => break,
            None if waited > limit => break,
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(Ended::Killed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_child_that_ends_in_time_is_exited_and_one_that_does_not_is_killed() {
        let mut quick = Command::new("true").spawn().unwrap();
        assert!(
            matches!(wait_with_deadline(&mut quick, Duration::from_secs(10), None).unwrap(), Ended::Exited(s) if s.success())
        );
        let mut stuck = Command::new("sleep").arg("30").spawn().unwrap();
        let t = Instant::now();
        assert!(matches!(wait_with_deadline(&mut stuck, Duration::from_millis(100), None).unwrap(), Ended::Killed));
        assert!(t.elapsed() < Duration::from_secs(10));
    }

    #[test]
    fn a_child_asked_to_stop_that_ends_is_stopped_and_one_ignoring_it_is_killed() {
        let mut polite = Command::new("sleep").arg("30").spawn().unwrap();
        let ended = wait_with_deadline(&mut polite, Duration::from_millis(100), Some(Duration::from_secs(10)));
        assert!(matches!(ended.unwrap(), Ended::Stopped(_)));
        let mut deaf = Command::new("sh").args(["-c", "trap '' TERM; while :; do sleep 0.1; done"]).spawn().unwrap();
        let ended = wait_with_deadline(&mut deaf, Duration::from_millis(100), Some(Duration::from_millis(300)));
        assert!(matches!(ended.unwrap(), Ended::Killed));
    }
}
