//! The control socket of a running agent: how `cuflight ps` (and later `attach` and `dump`) finds and talks to
//! agents that no collector started.
//!
//! Each agent listens on the abstract name `\0cuflight/<uid>/agent/<pid>` (like the session channel: no file to
//! plant, nothing left behind when the process dies, and the name vanishes with it). Agents are found through
//! `/proc/net/unix`, which lists the abstract names of listening sockets in this network namespace. Anybody may
//! connect to an abstract name, so both ends check the other's credentials: an agent answers only its own user
//! or root, and a collector believes only an agent of its own user (root: any user's).
//!
//! Messages are fixed-size little-endian records behind a magic, read with timeouts on both ends: a silent or
//! hostile peer costs an agent's control thread at most a fraction of a second, never the program a stall.

use crate::channel::{abstract_address, euid, last, listen_at, peer, set_timeout, socket, ChannelError};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const REQUEST_MAGIC: u64 = u64::from_le_bytes(*b"CUFLCTQ1");
const REPLY_MAGIC: u64 = u64::from_le_bytes(*b"CUFLCTR1");
/// Longest either end waits for the other's message.
const TIMEOUT_MS: i64 = 500;

/// What a request asks.
pub const COMMAND_STATUS: u8 = 1;
/// Start recording into the session named in the payload (a `cuflight attach` collector listens on it).
pub const COMMAND_ATTACH: u8 = 2;
/// Stop recording: flush CUPTI, unsubscribe, hand the rest of the window over, and go back to dormant.
pub const COMMAND_DETACH: u8 = 3;
/// A flight recorder's snapshot: flush CUPTI and hand the segment to the session named in the payload, which
/// reads it without taking anything (the agent keeps recording).
pub const COMMAND_DUMP: u8 = 4;
/// Longest request payload (a session name).
const MAX_PAYLOAD: usize = 128;
/// Longest message in a result.
const MAX_MESSAGE: usize = 1024;
const RESULT_MAGIC: u64 = u64::from_le_bytes(*b"CUFLCTX1");

/// The agent is injected and holds no CUPTI subscription: it records nothing and costs nothing.
pub const STATE_DORMANT: u8 = 1;
/// The agent records into a collector's session (started by `cuflight record`).
pub const STATE_RECORDING: u8 = 2;
/// The agent records into rings that keep the last events (`cuflight launch --flight-recorder`), for `cuflight
/// dump` and for its own dumps on a crash or hang.
pub const STATE_FLIGHT_RECORDER: u8 = 3;

pub fn state_name(state: u8) -> &'static str {
    match state {
        STATE_DORMANT => "dormant",
        STATE_RECORDING => "recording",
        STATE_FLIGHT_RECORDER => "flight recorder",
        _ => "unknown",
    }
}

/// An agent's answer to [`COMMAND_STATUS`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The agent's pid as it sees itself (in its own pid namespace).
    pub pid: u32,
    pub state: u8,
    /// When the agent entered this state (CLOCK_REALTIME, ns).
    pub since_ns: u64,
    /// The CUPTI API version in use, 0 while none is loaded (a dormant agent loads none).
    pub cupti_version: u32,
    /// The CUDA driver's version (`cuDriverGetVersion`, e.g. 13000), 0 if unknown.
    pub driver_version: u32,
    /// CUPTI sessions the agent set up in this process (recording, and each attach window): each one that ended in
    /// `cuptiFinalize` left memory CUPTI never frees (about 74 KB on an H200, CUDA 13.0), so collectors that attach
    /// again and again space their windows by it. Sent in the reply's padding (24 bits, saturating), which older
    /// agents leave zero and older collectors ignore.
    pub cupti_sessions: u32,
}

/// The largest [`Status::cupti_sessions`] the reply carries.
pub const MAX_CUPTI_SESSIONS: u32 = (1 << 24) - 1;

/// What CUPTI keeps of each session it finalizes, for good: 74 KB of the program's heap in use a cycle on an H200
/// (CUDA 13.0, driver 580), whatever was enabled (tests/gpu/attach_cycles.cu, 2026-11-28).
pub const CUPTI_KEEPS_PER_SESSION: u64 = 74 << 10;

const STATUS_BYTES: usize = 32;

impl Status {
    fn encode(&self) -> [u8; STATUS_BYTES] {
        let mut b = [0u8; STATUS_BYTES];
        b[0..8].copy_from_slice(&REPLY_MAGIC.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12] = self.state;
        b[13..16].copy_from_slice(&self.cupti_sessions.min(MAX_CUPTI_SESSIONS).to_le_bytes()[..3]);
        b[16..24].copy_from_slice(&self.since_ns.to_le_bytes());
        b[24..28].copy_from_slice(&self.cupti_version.to_le_bytes());
        b[28..32].copy_from_slice(&self.driver_version.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Status> {
        let b: &[u8; STATUS_BYTES] = b.try_into().ok()?;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if u64::from_le_bytes(b[0..8].try_into().ok()?) != REPLY_MAGIC {
            return None;
        }
        Some(Status {
            pid: u32_at(8),
            state: b[12],
            since_ns: u64::from_le_bytes(b[16..24].try_into().ok()?),
            cupti_version: u32_at(24),
            driver_version: u32_at(28),
            cupti_sessions: u32::from_le_bytes([b[13], b[14], b[15], 0]),
        })
    }
}

fn agent_name(uid: u32, pid: u32) -> String {
    format!("cuflight/{uid}/agent/{pid}")
}

/// Reads exactly `buf.len()` bytes (the socket's receive timeout bounds the wait).
fn read_exact(fd: &OwnedFd, buf: &mut [u8]) -> Result<(), ChannelError> {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: recv into the unfilled tail of `buf`.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf[got..].as_mut_ptr() as *mut libc::c_void, buf.len() - got, 0) };
        match n {
            0 => return Err(ChannelError::Protocol("closed before a whole message")),
            n if n < 0 => {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(last("recv"));
            }
            n => got += n as usize,
        }
    }
    Ok(())
}

fn write_all(fd: &OwnedFd, bytes: &[u8]) -> Result<(), ChannelError> {
    // SAFETY: send from a valid buffer; MSG_NOSIGNAL so a peer that left raises no SIGPIPE in the program.
    let n =
        unsafe { libc::send(fd.as_raw_fd(), bytes.as_ptr() as *const libc::c_void, bytes.len(), libc::MSG_NOSIGNAL) };
    if n != bytes.len() as isize {
        return Err(last("send"));
    }
    Ok(())
}

/// The agent's end: the listening socket of this process.
pub struct ControlListener {
    fd: OwnedFd,
}

/// One request from a permitted peer, answered through [`Request::reply_status`] or [`Request::reply_result`].
pub struct Request {
    conn: OwnedFd,
    pub command: u8,
    /// The requester's pid as the kernel reported it.
    pub peer_pid: u32,
    /// What follows the header (a session name for [`COMMAND_ATTACH`]), at most 128 bytes.
    pub payload: Vec<u8>,
}

impl ControlListener {
    /// Binds this process's name (close-on-exec, so a program this one execs binds its own).
    pub fn bind() -> Result<ControlListener, ChannelError> {
        let fd = listen_at(&agent_name(euid(), std::process::id()), 0, 16)?;
        Ok(ControlListener { fd })
    }

    pub fn as_raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Waits up to `timeout_ms` for a request, watching `watch` (the connection to an attached collector) as
    /// well: returns (a request is waiting, `watch` hung up).
    pub fn poll(&self, watch: Option<i32>, timeout_ms: i32) -> (bool, bool) {
        let mut fds = [
            libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: watch.unwrap_or(-1), events: libc::POLLRDHUP, revents: 0 },
        ];
        // SAFETY: poll over a valid array of pollfds (a negative fd is ignored by the kernel).
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n <= 0 {
            return (false, false);
        }
        let gone = libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR;
        (fds[0].revents & libc::POLLIN != 0, watch.is_some() && fds[1].revents & gone != 0)
    }

    /// Waits for the next connection and reads its request. Peers of another user (other than root) and
    /// malformed requests are errors the caller skips; the connection is closed with them.
    pub fn next(&self) -> Result<Request, ChannelError> {
        // SAFETY: accept4 on our listening socket; the result is owned below.
        let c = unsafe {
            libc::accept4(self.fd.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC)
        };
        if c < 0 {
            return Err(last("accept"));
        }
        // SAFETY: a fresh fd from accept4.
        let conn = unsafe { OwnedFd::from_raw_fd(c) };
        let (pid, uid) = peer(conn.as_raw_fd())?;
        if uid != euid() && uid != 0 {
            return Err(ChannelError::Stranger { uid, pid });
        }
        set_timeout(conn.as_raw_fd(), libc::SO_RCVTIMEO, TIMEOUT_MS);
        set_timeout(conn.as_raw_fd(), libc::SO_SNDTIMEO, TIMEOUT_MS);
        let mut req = [0u8; 16];
        read_exact(&conn, &mut req)?;
        if u64::from_le_bytes(req[..8].try_into().expect("8")) != REQUEST_MAGIC {
            return Err(ChannelError::Protocol("not a control request"));
        }
        let len = u16::from_le_bytes([req[10], req[11]]) as usize;
        if len > MAX_PAYLOAD {
            return Err(ChannelError::Protocol("request payload too long"));
        }
        let mut payload = vec![0u8; len];
        read_exact(&conn, &mut payload)?;
        Ok(Request { conn, command: req[8], peer_pid: pid, payload })
    }
}

impl Request {
    pub fn reply_status(self, status: &Status) -> Result<(), ChannelError> {
        write_all(&self.conn, &status.encode())
    }

    /// Answers an attach or detach: `Ok` or the reason it was refused (cut to 1 KiB).
    pub fn reply_result(self, result: Result<(), String>) -> Result<(), ChannelError> {
        let (code, message) = match &result {
            Ok(()) => (0u32, ""),
            Err(why) => (1, why.as_str()),
        };
        let mut end = message.len().min(MAX_MESSAGE);
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        let mut out = Vec::with_capacity(16 + end);
        out.extend_from_slice(&RESULT_MAGIC.to_le_bytes());
        out.extend_from_slice(&code.to_le_bytes());
        out.extend_from_slice(&(end as u32).to_le_bytes());
        out.extend_from_slice(&message.as_bytes()[..end]);
        write_all(&self.conn, &out)
    }
}

/// An agent as a collector sees it.
#[derive(Clone, Debug)]
pub struct Agent {
    /// The agent's pid in this process's pid namespace (from the kernel, not from the agent).
    pub pid: u32,
    pub uid: u32,
    pub status: Status,
}

/// The abstract names of the agents' listening sockets in this network namespace that this user may control:
/// its own, or everybody's for root.
pub fn list_names() -> io::Result<Vec<String>> {
    names_in(&std::fs::read_to_string("/proc/net/unix")?)
}

/// Marks a name as living in the network namespace of process PID (`NAME@netns/PID`): a container's.
const NETNS_MARK: &str = "@netns/";

/// The network namespace (as a process in it) an agent's name lives in; None: ours.
pub fn netns_of(name: &str) -> Option<u32> {
    name.rsplit_once(NETNS_MARK)?.1.parse().ok()
}

fn names_in(table: &str) -> io::Result<Vec<String>> {
    let me = euid();
    let mut names: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Num RefCount Protocol Flags Type St Inode Path: a listening socket has __SO_ACCEPTCON (0x10000).
            let f: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(f.get(3)?, 16).ok()?;
            let name = f.get(7)?.strip_prefix('@')?;
            let (uid, pid) = parse_agent_name(name)?;
            (flags & 0x10000 != 0 && (uid == me || me == 0) && pid > 0).then(|| name.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Agents' names in the other network namespaces (containers) this user may enter: root only, since reaching
/// them takes `setns`. One process stands for each namespace.
fn names_in_other_netns() -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    if euid() != 0 {
        return Vec::new();
    }
    let Ok(ours) = std::fs::metadata("/proc/self/ns/net").map(|m| m.ino()) else { return Vec::new() };
    let mut seen = std::collections::HashSet::from([ours]);
    let mut names = Vec::new();
    let pids = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    for pid in pids {
        let Ok(ns) = std::fs::metadata(format!("/proc/{pid}/ns/net")).map(|m| m.ino()) else { continue };
        if !seen.insert(ns) {
            continue;
        }
        if let Ok(table) = std::fs::read_to_string(format!("/proc/{pid}/net/unix")) {
            names.extend(names_in(&table).unwrap_or_default().into_iter().map(|n| format!("{n}{NETNS_MARK}{pid}")));
        }
    }
    names
}

/// The user an agent's name (as `list_names` gives it) belongs to.
pub fn uid_of(name: &str) -> Option<u32> {
    parse_agent_name(name.rsplit_once(NETNS_MARK).map_or(name, |(n, _)| n)).map(|(uid, _)| uid)
}

/// (uid, pid) from `cuflight/<uid>/agent/<pid>`.
fn parse_agent_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_prefix("cuflight/")?;
    let (uid, pid) = rest.split_once("/agent/")?;
    Some((uid.parse().ok()?, pid.parse().ok()?))
}

/// Connects to the agent listening on `name`, believing only an agent of this user (root: any), and sends a
/// request; returns the connection (for the reply, read within `reply_ms`) and the agent's (pid, uid).
fn request(name: &str, command: u8, payload: &[u8], reply_ms: i64) -> Result<(OwnedFd, u32, u32), ChannelError> {
    let fd = crate::channel::in_netns_of(netns_of(name), || socket(0))?;
    set_timeout(fd.as_raw_fd(), libc::SO_RCVTIMEO, reply_ms);
    set_timeout(fd.as_raw_fd(), libc::SO_SNDTIMEO, TIMEOUT_MS);
    let (addr, len) = abstract_address(name.rsplit_once(NETNS_MARK).map_or(name, |(n, _)| n));
    // SAFETY: connect with a valid address of `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(last("connect"));
    }
    let (pid, uid) = peer(fd.as_raw_fd())?;
    let me = euid();
    if uid != me && me != 0 {
        return Err(ChannelError::Stranger { uid, pid });
    }
    if payload.len() > MAX_PAYLOAD {
        return Err(ChannelError::Protocol("request payload too long"));
    }
    let mut req = vec![0u8; 16];
    req[..8].copy_from_slice(&REQUEST_MAGIC.to_le_bytes());
    req[8] = command;
    req[10..12].copy_from_slice(&(payload.len() as u16).to_le_bytes());
    req.extend_from_slice(payload);
    write_all(&fd, &req)?;
    Ok((fd, pid, uid))
}

/// An attach request's payload: the session's name and, when the collector chose what the window traces
/// (`attach --trace`), a NUL and that `tracing` mask in decimal. Without a choice the payload is the bare name,
/// which every agent reads; an agent older than the choice refuses a payload with one as a bad session name.
pub fn attach_payload(session: &str, trace: Option<u32>) -> Vec<u8> {
    let mut payload = session.as_bytes().to_vec();
    if let Some(mask) = trace {
        payload.push(0);
        payload.extend_from_slice(mask.to_string().as_bytes());
    }
    payload
}

/// The session name and trace choice of an attach payload (from a collector of the same user, still checked:
/// a mask must name cuda and nothing unknown).
pub fn parse_attach_payload(payload: &[u8]) -> Result<(&str, Option<u32>), String> {
    let text = std::str::from_utf8(payload).map_err(|_| "session name is not UTF-8".to_string())?;
    let Some((name, mask)) = text.split_once('\0') else { return Ok((text, None)) };
    let known = crate::tracing::NAMES.iter().fold(0, |all, (_, bit)| all | bit);
    match mask.parse::<u32>() {
        Ok(m) if m & crate::tracing::CUDA != 0 && m & !known == 0 => Ok((name, Some(m))),
        _ => Err(format!("bad trace choice {mask:?} (a newer cuflight?)")),
    }
}

/// Sends an attach or detach and waits up to `reply_ms` for the agent's answer: `Ok(Ok(()))` when it did it,
/// `Ok(Err(why))` when it refused.
pub fn command(name: &str, command: u8, payload: &[u8], reply_ms: i64) -> Result<Result<(), String>, ChannelError> {
    let (fd, _, _) = request(name, command, payload, reply_ms)?;
    let mut head = [0u8; 16];
    read_exact(&fd, &mut head)?;
    if u64::from_le_bytes(head[..8].try_into().expect("8")) != RESULT_MAGIC {
        return Err(ChannelError::Protocol("not a result"));
    }
    let code = u32::from_le_bytes(head[8..12].try_into().expect("4"));
    let len = u32::from_le_bytes(head[12..16].try_into().expect("4")) as usize;
    if len > MAX_MESSAGE {
        return Err(ChannelError::Protocol("result message too long"));
    }
    let mut message = vec![0u8; len];
    read_exact(&fd, &mut message)?;
    Ok(if code == 0 { Ok(()) } else { Err(String::from_utf8_lossy(&message).into_owned()) })
}

/// The control socket name of the agent in process `pid` (as this process sees pids), if it answers. A process
/// in another network namespace (a container) is looked for in that namespace's socket table, and its name
/// marked so that connections to it are made there.
pub fn find(pid: u32) -> io::Result<Option<String>> {
    if crate::channel::same_netns(pid) {
        return Ok(list_names()?.into_iter().find(|name| query(name).is_ok_and(|a| a.pid == pid)));
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/unix"))?;
    Ok(names_in(&table)?
        .into_iter()
        .map(|name| format!("{name}{NETNS_MARK}{pid}"))
        .find(|name| query(name).is_ok_and(|a| a.pid == pid)))
}

/// Asks the agent listening on `name` for its status, believing only an agent of this user (root: any).
pub fn query(name: &str) -> Result<Agent, ChannelError> {
    let (fd, pid, uid) = request(name, COMMAND_STATUS, &[], TIMEOUT_MS)?;
    let mut reply = [0u8; STATUS_BYTES];
    read_exact(&fd, &mut reply)?;
    let status = Status::decode(&reply).ok_or(ChannelError::Protocol("not a status reply"))?;
    Ok(Agent { pid, uid, status })
}

/// Every agent this user may control, with its status; agents that do not answer in time are skipped. They are
/// asked in parallel, so a few silent ones cost one timeout, not one each.
pub fn agents() -> io::Result<Vec<Agent>> {
    let mut names = list_names()?;
    names.extend(names_in_other_netns());
    names.sort();
    names.dedup();
    let mut found: Vec<Agent> = std::thread::scope(|s| {
        let asked: Vec<_> = names
            .chunks(names.len().div_ceil(16).max(1))
            .map(|chunk| s.spawn(move || chunk.iter().filter_map(|name| query(name).ok()).collect::<Vec<_>>()))
            .collect();
        asked.into_iter().flat_map(|h| h.join().unwrap_or_default()).collect()
    });
    found.sort_by_key(|a| a.pid);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_and_garbage_is_refused() {
        let s = Status {
            pid: 42,
            state: STATE_DORMANT,
            since_ns: 1 << 60,
            cupti_version: 130500,
            driver_version: 13000,
            cupti_sessions: 7,
        };
        assert_eq!(Status::decode(&s.encode()), Some(s));
        assert_eq!(Status::decode(&[0u8; STATUS_BYTES]), None);
        assert_eq!(Status::decode(&s.encode()[..31]), None);
        // An older agent's reply (zero padding) reads as no sessions; a count past 24 bits saturates.
        let mut old = s.encode();
        old[13..16].fill(0);
        assert_eq!(Status::decode(&old).map(|s| s.cupti_sessions), Some(0));
        let many = Status { cupti_sessions: u32::MAX, ..s };
        assert_eq!(Status::decode(&many.encode()).map(|s| s.cupti_sessions), Some(MAX_CUPTI_SESSIONS));
        assert_eq!(parse_agent_name("cuflight/1000/agent/77"), Some((1000, 77)));
        assert_eq!(parse_agent_name("cuflight/1000/session-x"), None);
        assert_eq!(netns_of("cuflight/0/agent/7@netns/1234"), Some(1234));
        assert_eq!(netns_of("cuflight/0/agent/7"), None);
    }

    #[test]
    fn attach_payloads_round_trip_and_bad_choices_are_refused() {
        assert_eq!(parse_attach_payload(&attach_payload("session-1", None)), Ok(("session-1", None)));
        let mask = crate::tracing::CUDA | crate::tracing::NVTX;
        assert_eq!(parse_attach_payload(&attach_payload("session-1", Some(mask))), Ok(("session-1", Some(mask))));
        for bad in [&b"s\x00nvtx"[..], b"s\x004", b"s\x001024", b"s\x00", b"\xff"] {
            assert!(parse_attach_payload(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_listening_agent_is_listed_and_answers() {
        let l = ControlListener::bind().unwrap();
        assert!(ControlListener::bind().is_err(), "one listener per process");
        let me = std::process::id();
        let server = std::thread::spawn(move || {
            let req = l.next().unwrap();
            assert_eq!((req.command, req.peer_pid), (COMMAND_STATUS, me));
            let status = Status { pid: me, state: STATE_DORMANT, since_ns: 5, ..Default::default() };
            req.reply_status(&status).unwrap();
            l
        });
        let name = agent_name(euid(), me);
        assert!(list_names().unwrap().contains(&name));
        let a = query(&name).unwrap();
        assert_eq!((a.pid, a.status.state, a.status.since_ns), (me, STATE_DORMANT, 5));
        let l = server.join().unwrap();
        // A peer that connects and says nothing is dropped after the timeout, and the listener goes on.
        let silent = socket(0).unwrap();
        let (addr, len) = abstract_address(&name);
        // SAFETY: connect with a valid address.
        assert_eq!(unsafe { libc::connect(silent.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) }, 0);
        let t = std::time::Instant::now();
        assert!(l.next().is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
    }
}
