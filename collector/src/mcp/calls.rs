//! Tool calls run beside the reading of requests, so that while an analysis runs the server still answers
//! `ping`, reads `notifications/cancelled` and takes more calls (assistants call tools in parallel). A cancelled
//! call stops the command it runs and, as the specification asks, gets no reply. A call whose request asked for
//! progress (`_meta.progressToken`) is told to be running every few seconds until it ends: clients give up on a
//! request that says nothing for a minute or so unless progress comes (the TypeScript SDK's
//! `resetTimeoutOnProgress`), and a recording may run for ten.

use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Calls that run at once; more wait for a slot. Each analysis is a process of its own holding a trace in memory,
/// so a burst of calls must not become a burst of processes.
const RUNNING_AT_ONCE: usize = 4;
/// Calls accepted (running or waiting) before another is refused as busy: a bound on threads.
const ACCEPTED_AT_MOST: usize = 64;

/// What a call does, given the flag that says it was cancelled; its reply, if any.
pub type Work = Box<dyn FnOnce(&AtomicBool) -> Option<Value> + Send>;

/// JSON-RPC 2.0's code for an error inside the server.
const INTERNAL_ERROR: i64 = -32603;
/// How often a running call that asked for progress is said to be running.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// What a call's progress notifications carry: the request's token, and what runs ("record_command").
#[derive(Clone, Debug)]
pub struct Progress {
    pub token: Value,
    pub what: String,
}

impl Progress {
    /// The progress a `tools/call` request asks for: MCP's token is a string or an integer.
    pub fn asked(request: &Value) -> Option<Progress> {
        let token = request.pointer("/params/_meta/progressToken")?;
        let what = request.pointer("/params/name").and_then(Value::as_str).unwrap_or("the tool");
        (token.is_string() || token.is_i64() || token.is_u64())
            .then(|| Progress { token: token.clone(), what: what.chars().take(64).collect() })
    }

    /// The notification after `seconds` of running: its progress is the seconds, which increase with each, as
    /// the specification requires; there is no total to give.
    fn notification(&self, seconds: u64) -> Value {
        serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/progress",
            "params": {
                "progressToken": self.token,
                "progress": seconds,
                "message": format!("{} running for {seconds} s", self.what),
            }
        })
    }

    /// Says the call is running every [`PROGRESS_EVERY`] until `done` or `cancelled`: whichever, within 50 ms,
    /// so that no progress follows the reply.
    fn tell_until(&self, done: &AtomicBool, cancelled: &AtomicBool) {
        let started = Instant::now();
        let mut next = PROGRESS_EVERY;
        while !done.load(Ordering::Relaxed) && !cancelled.load(Ordering::Relaxed) {
            if started.elapsed() >= next {
                let _ = reply(&self.notification(next.as_secs()));
                next += PROGRESS_EVERY;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Writes one message on standard output, which the reader and the calls share: the lock held for the whole
/// message keeps two from interleaving.
pub fn reply(message: &Value) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    // serde_json's compact form has no raw newline: one message, one line.
    writeln!(out, "{message}")?;
    out.flush()
}

#[derive(Default)]
struct State {
    /// Accepted calls by key (a request id's JSON text), each with the flag that cancels it.
    calls: HashMap<String, Arc<AtomicBool>>,
    running: usize,
    /// Calls ended whose replies are being written.
    replying: usize,
}

/// The calls in progress.
#[derive(Clone, Default)]
pub struct Calls {
    shared: Arc<(Mutex<State>, Condvar)>,
}

impl Calls {
    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `work` on a thread of its own as the call `key`, and writes what it returns unless the call was
    /// cancelled; a panic in it is answered as an internal error to `id`. With `progress`, the call is said to be
    /// running while it runs. Err: the key is in use, too many calls are in progress, or no thread could be started.
    pub fn start<F>(&self, key: String, id: Value, progress: Option<Progress>, work: F) -> Result<(), &'static str>
    where
        F: FnOnce(&AtomicBool) -> Option<Value> + Send + 'static,
    {
        let cancelled = Arc::new(AtomicBool::new(false));
        {
            let mut state = self.state();
            if state.calls.contains_key(&key) {
                return Err("a request with this id is in progress already");
            }
            if state.calls.len() >= ACCEPTED_AT_MOST {
                return Err("too many tool calls in progress: wait for some to end");
            }
            state.calls.insert(key.clone(), cancelled.clone());
        }
        let calls = self.clone();
        let thread_key = key.clone();
        let flag = cancelled.clone();
        let spawned = std::thread::Builder::new().name("mcp-call".into()).spawn(move || {
            // Ends the call however `work` ends, a panic included, so that no one waits for it for ever.
            let _ended = Ended { calls: &calls, key: &thread_key, flag: &cancelled };
            if !calls.take_slot(&cancelled) {
                return;
            }
            let slot = Slot(&calls);
            let done = AtomicBool::new(false);
            let answer = std::thread::scope(|scope| {
                if let Some(p) = &progress {
                    scope.spawn(|| p.tell_until(&done, &cancelled));
                }
                let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&cancelled)));
                done.store(true, Ordering::Relaxed);
                answer
            })
            .unwrap_or_else(|_| Some(super::error(id, INTERNAL_ERROR, "the tool failed: a bug in cuflight")));
            // The work is done: its slot is free for a waiting call before the reply goes out.
            drop(slot);
            if let Some(answer) = answer.filter(|_| !cancelled.load(Ordering::Relaxed)) {
                // Ended before its reply is written: a client that reads it may send its next request at once,
                // with this id again, and it must not be told that one is in progress.
                calls.replying(&thread_key, &cancelled, 1);
                let _ = reply(&answer); // the client may be gone: nothing to tell it then
                calls.replying(&thread_key, &cancelled, -1);
            }
        });
        if spawned.is_err() {
            self.finish(&key, &flag);
            return Err("cannot start a thread for the call");
        }
        Ok(())
    }

    /// Cancels the call `key` if it is in progress (`notifications/cancelled` may come after its reply).
    pub fn cancel(&self, key: &str) {
        if let Some(flag) = self.state().calls.get(key) {
            flag.store(true, Ordering::Relaxed);
        }
        self.shared.1.notify_all(); // a call waiting for a slot sees it
    }

    /// Cancels every call and waits until all have ended, or `most` has passed: a call writing its reply to a
    /// client that stopped reading never ends, and must not keep the server from ending.
    pub fn cancel_all_and_wait(&self, most: Duration) {
        let deadline = Instant::now() + most;
        let mut state = self.state();
        for flag in state.calls.values() {
            flag.store(true, Ordering::Relaxed);
        }
        self.shared.1.notify_all();
        while !state.calls.is_empty() || state.replying > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else { return };
            state = self.shared.1.wait_timeout(state, left).unwrap_or_else(|poisoned| poisoned.into_inner()).0;
        }
    }

    /// Waits for a free slot; false if the call was cancelled meanwhile.
    fn take_slot(&self, cancelled: &AtomicBool) -> bool {
        let mut state = self.state();
        loop {
            if cancelled.load(Ordering::Relaxed) {
                return false;
            }
            if state.running < RUNNING_AT_ONCE {
                state.running += 1;
                return true;
            }
            state = self.shared.1.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    /// Ends the call `key` whose flag is `flag` (not a later call that took the same key once this one replied).
    fn finish(&self, key: &str, flag: &Arc<AtomicBool>) {
        let mut state = self.state();
        if state.calls.get(key).is_some_and(|f| Arc::ptr_eq(f, flag)) {
            state.calls.remove(key);
        }
        drop(state);
        self.shared.1.notify_all();
    }

    /// Ends the call and counts its reply as being written (`by` 1), or written (-1), for
    /// [`Calls::cancel_all_and_wait`].
    fn replying(&self, key: &str, flag: &Arc<AtomicBool>, by: isize) {
        if by > 0 {
            self.finish(key, flag);
        }
        let mut state = self.state();
        state.replying = state.replying.saturating_add_signed(by);
        drop(state);
        self.shared.1.notify_all();
    }
}

struct Slot<'a>(&'a Calls);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.state().running -= 1;
        self.0.shared.1.notify_all();
    }
}

struct Ended<'a> {
    calls: &'a Calls,
    key: &'a str,
    flag: &'a Arc<AtomicBool>,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.calls.finish(self.key, self.flag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_four_run_at_once_and_a_cancelled_one_waiting_never_runs() {
        let calls = Calls::default();
        let (running, most) = (Arc::new(Mutex::new(0usize)), Arc::new(Mutex::new(0usize)));
        let ran = Arc::new(Mutex::new(Vec::new()));
        for i in 0..8 {
            let (running, most, ran) = (running.clone(), most.clone(), ran.clone());
            calls
                .start(i.to_string(), Value::Null, None, move |cancelled| {
                    let now = {
                        let mut r = running.lock().unwrap();
                        *r += 1;
                        *r
                    };
                    let mut m = most.lock().unwrap();
                    *m = (*m).max(now);
                    drop(m);
                    let t = Instant::now();
                    while !cancelled.load(Ordering::Relaxed) && t.elapsed() < Duration::from_secs(10) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    *running.lock().unwrap() -= 1;
                    ran.lock().unwrap().push(i);
                    None
                })
                .unwrap();
        }
        assert_eq!(
            calls.start("3".into(), Value::Null, None, |_| None),
            Err("a request with this id is in progress already")
        );
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        calls.cancel_all_and_wait(Duration::from_secs(30));
        assert!(t.elapsed() < Duration::from_secs(5), "cancelling ends the calls at once");
        assert!(*most.lock().unwrap() <= RUNNING_AT_ONCE);
        assert_eq!(ran.lock().unwrap().len(), RUNNING_AT_ONCE, "those waiting for a slot never ran");
        assert!(calls.state().calls.is_empty() && calls.state().running == 0);
        // A call that does not end (its reply stuck on a full pipe) holds the wait no longer than allowed.
        calls
            .start("stuck".into(), Value::Null, None, |_| {
                std::thread::sleep(Duration::from_secs(3));
                None
            })
            .unwrap();
        let t = Instant::now();
        calls.cancel_all_and_wait(Duration::from_millis(200));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    }

    #[test]
    fn a_call_ended_does_not_end_a_later_one_with_its_id() {
        let calls = Calls::default();
        let waiting = |calls: &Calls| {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let work = move |_: &AtomicBool| {
                let _ = rx.recv_timeout(Duration::from_secs(10));
                None
            };
            calls.start("1".into(), Value::Null, None, work).map(|()| tx)
        };
        let first_go = waiting(&calls).unwrap();
        let first = calls.state().calls["1"].clone();
        // As when the first call's reply is about to be written: the id is free, and a new request takes it.
        calls.replying("1", &first, 1);
        let second_go = waiting(&calls).expect("the id is free once its reply is being written");
        // The first call's thread then ends: the second call stays in progress until it ends itself.
        calls.replying("1", &first, -1);
        first_go.send(()).unwrap();
        calls.finish("1", &first);
        assert!(calls.state().calls.contains_key("1"), "the later call is still in progress");
        assert_eq!(waiting(&calls).err(), Some("a request with this id is in progress already"));
        second_go.send(()).unwrap();
        calls.cancel_all_and_wait(Duration::from_secs(10));
        assert!(calls.state().calls.is_empty() && calls.state().replying == 0);
    }

    #[test]
    fn progress_is_told_only_where_asked_with_a_token_mcp_allows_and_increases() {
        let request =
            |token: Value| serde_json::json!({"params": {"name": "report", "_meta": {"progressToken": token}}});
        for token in [Value::from("t"), Value::from(7), Value::from(u64::MAX)] {
            assert!(Progress::asked(&request(token.clone())).is_some_and(|p| p.token == token && p.what == "report"));
        }
        for token in [Value::Null, Value::from(1.5), serde_json::json!({"a": 1}), serde_json::json!([1])] {
            assert!(Progress::asked(&request(token.clone())).is_none(), "{token}");
        }
        assert!(Progress::asked(&serde_json::json!({"params": {"name": "report"}})).is_none());
        let p = Progress { token: "t".into(), what: "record_command".into() };
        let n = p.notification(10);
        assert_eq!(n["method"], "notifications/progress");
        assert_eq!((&n["params"]["progressToken"], n["params"]["progress"].as_u64()), (&Value::from("t"), Some(10)));
        assert!(n.get("id").is_none(), "a notification");
        // Told until the call is done, and no later.
        let (done, cancelled) = (AtomicBool::new(true), AtomicBool::new(false));
        let t = Instant::now();
        p.tell_until(&done, &cancelled);
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_call_that_panics_still_ends_and_frees_its_slot() {
        let calls = Calls::default();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let work = move |_: &AtomicBool| -> Option<Value> {
            flag.store(true, Ordering::Relaxed);
            panic!("a tool's bug")
        };
        calls.start("p".into(), Value::Null, None, work).unwrap();
        let t = Instant::now();
        while !calls.state().calls.is_empty() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(ran.load(Ordering::Relaxed) && calls.state().calls.is_empty());
        assert_eq!(calls.state().running, 0);
    }
}
