//! The smallest HTTP/1.1 server `serve` needs: `GET /metrics` answered with the exposition, anything else 404.
//!
//! One thread waits on every connection at once (mio: epoll), so a client that connects and says nothing holds
//! nothing but its socket: 131 such connections made the former one-connection-at-a-time server stop answering
//! for as long as they stayed. Each connection has a deadline (its request head within [`HEAD_TIMEOUT`], as Go's
//! `ReadHeaderTimeout` bounds node_exporter's, and its answer written within [`WRITE_TIMEOUT`]); at most
//! [`MAX_CONNECTIONS`] are open, each reading at most [`MAX_HEAD`] bytes, so memory stays bounded; when the limit or
//! the process's descriptors run out, the oldest connection is closed to let the newest in (a scraper sends its
//! request at once, and is answered before it would be the oldest).

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::time::{Duration, Instant};

/// How long a client may take to send its request head.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// How long writing the answer may take.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections open at once, at most (each holds at most [`MAX_HEAD`] bytes of request and one answer).
pub const MAX_CONNECTIONS: usize = 2048;
/// The longest request head read.
const MAX_HEAD: usize = 8192;

const LISTENER: Token = Token(usize::MAX);

/// One client: what it sent so far, then what is left to write, and when it must be done.
struct Conn {
    stream: TcpStream,
    head: Vec<u8>,
    out: Option<(Vec<u8>, usize)>,
    deadline: Instant,
    accepted: Instant,
}

/// Serves until the listener fails. `body(openmetrics)`: the exposition, in OpenMetrics when the scraper asks for
/// it (its Accept header).
pub fn run(listener: std::net::TcpListener, body: impl Fn(bool) -> String) {
    if let Err(e) = serve(listener, body) {
        cuflight_capture::notice!("cuflight serve: the metrics endpoint stopped: {e}");
    }
}

fn serve(listener: std::net::TcpListener, body: impl Fn(bool) -> String) -> std::io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut events = Events::with_capacity(1024);
    let mut conns: HashMap<Token, Conn> = HashMap::new();
    let mut next = 0usize;
    loop {
        let now = Instant::now();
        let wait = conns.values().map(|c| c.deadline.saturating_duration_since(now)).min();
        match poll.poll(&mut events, wait.map(|w| w + Duration::from_millis(1))) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            r => r?,
        }
        for event in events.iter() {
            if event.token() == LISTENER {
                accept_all(&listener, &poll, &mut conns, &mut next)?;
                continue;
            }
            let token = event.token();
            let done = match conns.get_mut(&token) {
                Some(c) => progress(c, &body, &poll, token),
                None => continue,
            };
            if done {
                if let Some(mut c) = conns.remove(&token) {
                    let _ = poll.registry().deregister(&mut c.stream);
                }
            }
        }
        // Clients past their deadline are closed.
        let now = Instant::now();
        let late: Vec<Token> = conns.iter().filter(|(_, c)| c.deadline <= now).map(|(&t, _)| t).collect();
        for t in late {
            if let Some(mut c) = conns.remove(&t) {
                let _ = poll.registry().deregister(&mut c.stream);
            }
        }
    }
}

/// Accepts every connection waiting, closing the oldest when at the limit or out of descriptors.
fn accept_all(
    listener: &TcpListener,
    poll: &Poll,
    conns: &mut HashMap<Token, Conn>,
    next: &mut usize,
) -> std::io::Result<()> {
    loop {
        if conns.len() >= MAX_CONNECTIONS && !close_oldest(poll, conns) {
            return Ok(());
        }
        match listener.accept() {
            Ok((mut stream, _)) => {
                let token = Token(*next);
                *next = (*next + 1) % (usize::MAX - 1);
                poll.registry().register(&mut stream, token, Interest::READABLE)?;
                let now = Instant::now();
                let c = Conn { stream, head: Vec::new(), out: None, deadline: now + HEAD_TIMEOUT, accepted: now };
                conns.insert(token, c);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted || e.kind() == ErrorKind::ConnectionAborted => {}
            // EMFILE, ENFILE: out of descriptors; make room, or wait for the deadlines to.
            Err(e) if e.raw_os_error() == Some(24) || e.raw_os_error() == Some(23) => {
                if !close_oldest(poll, conns) {
                    return Ok(());
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn close_oldest(poll: &Poll, conns: &mut HashMap<Token, Conn>) -> bool {
    let Some(oldest) = conns.iter().min_by_key(|(_, c)| c.accepted).map(|(&t, _)| t) else { return false };
    if let Some(mut c) = conns.remove(&oldest) {
        let _ = poll.registry().deregister(&mut c.stream);
    }
    true
}

/// Reads what the client sent and writes what is owed; true when the connection is done (answered, closed by the
/// client, or failed).
fn progress(c: &mut Conn, body: &impl Fn(bool) -> String, poll: &Poll, token: Token) -> bool {
    if c.out.is_none() {
        let mut buf = [0u8; 1024];
        let complete = loop {
            match c.stream.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => {
                    c.head.extend_from_slice(&buf[..n]);
                    if head_complete(&c.head) || c.head.len() >= MAX_HEAD {
                        break true;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        };
        if !complete {
            return false;
        }
        c.out = Some((answer(&c.head, body), 0));
        c.head = Vec::new();
        c.deadline = Instant::now() + WRITE_TIMEOUT;
        if poll.registry().reregister(&mut c.stream, token, Interest::WRITABLE).is_err() {
            return true;
        }
    }
    let Some((out, written)) = c.out.as_mut() else { return true };
    while *written < out.len() {
        match c.stream.write(&out[*written..]) {
            Ok(0) => return true,
            Ok(n) => *written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
    true
}

fn head_complete(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n")
}

/// The whole answer to a request head.
fn answer(head: &[u8], body: &impl Fn(bool) -> String) -> Vec<u8> {
    let line = String::from_utf8_lossy(head.split(|&b| b == b'\n').next().unwrap_or_default()).into_owned();
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let head_text = String::from_utf8_lossy(head).to_ascii_lowercase();
    let openmetrics = head_text.lines().any(|l| l.starts_with("accept:") && l.contains("application/openmetrics-text"));
    let (status, kind, text) = match (method, path) {
        ("GET", "/metrics") if openmetrics => {
            ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", body(true))
        }
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body(false)),
        ("GET", "/") => ("200 OK", "text/plain; charset=utf-8", "cuflight serve: metrics at /metrics\n".to_string()),
        _ => ("404 Not Found", "text/plain; charset=utf-8", "not found\n".to_string()),
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    )
    .into_bytes();
    out.extend_from_slice(text.as_bytes());
    out
}
