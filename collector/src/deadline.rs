//! Waiting for a child process of cuflight's own (the doctor's probe, a Python interpreter, the MCP server's
//! commands) without ever waiting longer than the caller allows: a hung driver or a stuck program must not hang
//! the command that started it.

use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
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
    wait_with_deadline_or_cancel(child, limit, grace, &AtomicBool::new(false))
}

/// [`wait_with_deadline`], where `cancelled` set ends the wait as the limit would, at once (the MCP server's
/// tool calls, which the client may cancel).
pub fn wait_with_deadline_or_cancel(
    child: &mut Child,
    limit: Duration,
    grace: Option<Duration>,
    cancelled: &AtomicBool,
) -> std::io::Result<Ended> {
    let start = Instant::now();
    let mut asked_to_stop: Option<Instant> = None;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(if asked_to_stop.is_some() { Ended::Stopped(status) } else { Ended::Exited(status) });
        }
        let over = start.elapsed() > limit || cancelled.load(Ordering::Relaxed);
        match (grace, asked_to_stop) {
            (Some(_), None) if over => {
                let _ = cuflight_format::channel::signal_process(child.id(), libc::SIGTERM);
                asked_to_stop = Some(Instant::now());
            }
            (Some(grace), Some(asked)) if asked.elapsed() > grace => break,
            (None, _) if over => break,
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

    #[test]
    fn a_cancelled_wait_ends_at_once_as_its_limit_would() {
        let cancelled = AtomicBool::new(true);
        let t = Instant::now();
        let mut stuck = Command::new("sleep").arg("30").spawn().unwrap();
        let ended = wait_with_deadline_or_cancel(&mut stuck, Duration::from_secs(60), None, &cancelled);
        assert!(matches!(ended.unwrap(), Ended::Killed));
        let mut polite = Command::new("sleep").arg("30").spawn().unwrap();
        let ended = wait_with_deadline_or_cancel(
            &mut polite,
            Duration::from_secs(60),
            Some(Duration::from_secs(10)),
            &cancelled,
        );
        assert!(matches!(ended.unwrap(), Ended::Stopped(_)));
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
