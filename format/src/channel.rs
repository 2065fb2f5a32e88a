//! The private channel from agents to their collector: each agent hands its segment (a sealed memfd) to the
//! collector of its session over a Unix socket, with `SCM_RIGHTS`.
//!
//! The socket lives in the abstract namespace (`\0cuflight/<uid>/<session>`): no file to plant, replace or
//! symlink, no directory whose mode matters, nothing left behind by a crash. Anybody may try to connect to an
//! abstract name, so both ends check the other's credentials (`SO_PEERCRED`): the collector accepts segments
//! only from processes of one user (its own; root's, attached to another user's process, that process's), and an
//! agent hands its memory only to a listener of its own user or root (a stranger who guessed the session name and
//! bound it first gets nothing). The kernel keeps a descriptor in
//! flight alive, so a process that dies right after sending (or before the collector accepts) loses nothing.
//! An agent with no listener to reach (no `cuflight record`, or one that has exited) records nothing.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const MAGIC: u64 = u64::from_le_bytes(*b"CUFLCHN1");
/// Longest an agent waits to connect (a listener with a full backlog) or a collector waits for a connected
/// peer's message.
const CONNECT_TIMEOUT_MS: i64 = 2000;
const RECEIVE_TIMEOUT_MS: i64 = 200;

/// Why a segment was not handed over.
#[derive(Debug)]
pub enum ChannelError {
    Io(&'static str, io::Error),
    /// The other end belongs to another user.
    Stranger {
        uid: u32,
        pid: u32,
    },
    /// A peer that sent something else than one segment.
    Protocol(&'static str),
}

impl std::fmt::Display for ChannelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChannelError::Io(what, e) => write!(f, "{what}: {e}"),
            ChannelError::Stranger { uid, pid } => write!(f, "refused a peer of another user (uid {uid}, pid {pid})"),
            ChannelError::Protocol(why) => write!(f, "peer broke the protocol: {why}"),
        }
    }
}

impl std::error::Error for ChannelError {}

pub(crate) fn last(what: &'static str) -> ChannelError {
    ChannelError::Io(what, io::Error::last_os_error())
}

pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The calling thread's kernel id. Through the system call rather than glibc's `gettid()`, which glibc gained only
/// in 2.30: the wheels promise glibc 2.28, where a library calling `gettid()` fails with `undefined symbol` (and
/// the agent would take the program down with it).
pub fn thread_id() -> u32 {
    // SAFETY: SYS_gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The abstract socket address of a session (`sun_path` starts with NUL), and its length.
fn address(session: &str) -> (libc::sockaddr_un, libc::socklen_t) {
    abstract_address(&session_name(euid(), session))
}

/// A session's name for the agents of user `uid` (the agents' own uid is in the name they connect to).
fn session_name(uid: u32, session: &str) -> String {
    format!("cuflight/{uid}/{session}")
}

/// The abstract socket address `\0name` (cut to what `sun_path` holds), and its length.
pub(crate) fn abstract_address(name: &str) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let n = name.len().min(addr.sun_path.len() - 1);
    for (dst, &b) in addr.sun_path[1..=n].iter_mut().zip(name.as_bytes()) {
        *dst = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + n;
    (addr, len as libc::socklen_t)
}

/// Runs `make` (which creates a socket) inside the network namespace of process `pid` when it is not ours:
/// abstract socket names live per network namespace, so an agent in a container (`docker run` without
/// `--network host`) is reached, and reaches its collector, only through sockets made in its namespace. A socket
/// keeps the namespace it was made in; `setns` changes only the calling thread, here a short-lived one. Needs
/// CAP_SYS_ADMIN over that namespace (root on the host).
pub(crate) fn in_netns_of(
    pid: Option<u32>,
    make: impl FnOnce() -> Result<OwnedFd, ChannelError> + Send,
) -> Result<OwnedFd, ChannelError> {
    let Some(pid) = pid.filter(|&p| !same_netns(p)) else { return make() };
    std::thread::scope(|s| {
        s.spawn(move || {
            let ns = std::fs::File::open(format!("/proc/{pid}/ns/net")).map_err(|e| ChannelError::Io("netns", e))?;
            // SAFETY: setns on this (scoped, short-lived) thread with a namespace descriptor we opened.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(ChannelError::Io(
                    "entering the network namespace of a process in a container (needs root)",
                    io::Error::last_os_error(),
                ));
            }
            make()
        })
        .join()
        .unwrap_or(Err(ChannelError::Protocol("network namespace helper failed")))
    })
}

/// Process `pid` shares this process's network namespace (or its namespace cannot be read).
pub fn same_netns(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = |p: String| std::fs::metadata(p).map(|m| (m.dev(), m.ino()));
    match (ino("/proc/self/ns/net".into()), ino(format!("/proc/{pid}/ns/net"))) {
        (Ok(a), Ok(b)) => a == b,
        _ => true,
    }
}

pub(crate) fn socket(flags: i32) -> Result<OwnedFd, ChannelError> {
    // SAFETY: socket(2) with constant arguments; the fd is owned by the result.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC | flags, 0) };
    if fd < 0 {
        return Err(last("socket"));
    }
    // SAFETY: a fresh fd nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn set_timeout(fd: RawFd, opt: i32, ms: i64) {
    let tv = libc::timeval { tv_sec: (ms / 1000) as _, tv_usec: ((ms % 1000) * 1000) as _ };
    // SAFETY: setsockopt with a valid timeval of the size given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            &tv as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
}

/// (pid, uid) of the process at the other end of a connected socket.
pub(crate) fn peer(fd: RawFd) -> Result<(u32, u32), ChannelError> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut _ as *mut libc::c_void, &mut len)
    };
    if r != 0 {
        return Err(last("SO_PEERCRED"));
    }
    Ok((cred.pid as u32, cred.uid))
}

/// A listening socket on the abstract name `name` (socket `flags` such as SOCK_NONBLOCK; close-on-exec always);
/// fails if the name is taken.
pub(crate) fn listen_at(name: &str, flags: i32, backlog: i32) -> Result<OwnedFd, ChannelError> {
    let fd = socket(flags)?;
    let (addr, len) = abstract_address(name);
    // SAFETY: bind on our socket with a valid address of `len` bytes.
    if unsafe { libc::bind(fd.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(last("bind"));
    }
    // SAFETY: listen on our bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), backlog) } != 0 {
        return Err(last("listen"));
    }
    Ok(fd)
}

/// The collector's end: listens for the agents of one session.
pub struct Listener {
    fd: OwnedFd,
    /// The only user whose agents it accepts: the collector's own, or for root, the attached process's.
    peer_uid: u32,
}

/// A segment handed over by an agent.
#[derive(Debug)]
pub struct Received {
    pub fd: OwnedFd,
    /// The connection: readable when the agent asks for a drain, hung up when every copy of its end is closed.
    pub conn: OwnedFd,
    /// The sender's pid as the kernel saw it (in the collector's pid namespace).
    pub pid: u32,
}

impl Listener {
    /// Binds the session's address; fails if it is taken (then choose another session name).
    pub fn bind(session: &str) -> Result<Listener, ChannelError> {
        Listener::bind_near(session, None)
    }

    /// The same, in the network namespace of process `pid` (None: ours), where that process's agent can reach it.
    pub fn bind_near(session: &str, pid: Option<u32>) -> Result<Listener, ChannelError> {
        Listener::bind_for(session, pid, euid())
    }

    /// The same, for the agents of user `uid`: root's collector attaching to another user's process (only
    /// root may ask for another uid; the agent then accepts root's listener, as it accepts root's requests).
    pub fn bind_for(session: &str, pid: Option<u32>, uid: u32) -> Result<Listener, ChannelError> {
        let me = euid();
        if uid != me && me != 0 {
            return Err(ChannelError::Stranger { uid, pid: pid.unwrap_or(0) });
        }
        let name = session_name(uid, session);
        let fd = in_netns_of(pid, || listen_at(&name, libc::SOCK_NONBLOCK, 4096))?;
        Ok(Listener { fd, peer_uid: uid })
    }

    /// The next segment waiting, without blocking: None when nobody is waiting; Some(Err) for a refused peer
    /// (another user, a broken message), which the caller reports and goes on.
    pub fn accept(&self) -> Option<Result<Received, ChannelError>> {
        // SAFETY: accept4 on our listening socket; the result is owned below.
        let c = unsafe {
            libc::accept4(self.fd.as_raw_fd(), std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC)
        };
        if c < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => None,
                _ => Some(Err(ChannelError::Io("accept", e))),
            };
        }
        // SAFETY: a fresh fd from accept4.
        let conn = unsafe { OwnedFd::from_raw_fd(c) };
        Some(receive(conn, self.peer_uid))
    }

    /// Sleeps until `timeout_ms` passes, an agent connects, or one of `conns` asks for a drain or hangs up;
    /// consumes the wake-up bytes. Returns whether any of `conns` hung up.
    pub fn wait(&self, conns: &[RawFd], timeout_ms: i32) -> bool {
        let mut fds: Vec<libc::pollfd> = std::iter::once(self.fd.as_raw_fd())
            .chain(conns.iter().copied())
            .map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 })
            .collect();
        // SAFETY: poll over a valid array of pollfds.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n <= 0 {
            return false;
        }
        let mut hung_up = false;
        for p in &fds[1..] {
            if p.revents & libc::POLLIN != 0 {
                let mut buf = [0u8; 256];
                // SAFETY: recv into a local buffer of the size given.
                let r =
                    unsafe { libc::recv(p.fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), libc::MSG_DONTWAIT) };
                hung_up |= r == 0;
            }
            hung_up |= p.revents & (libc::POLLHUP | libc::POLLERR) != 0;
        }
        hung_up
    }
}

fn receive(conn: OwnedFd, peer_uid: u32) -> Result<Received, ChannelError> {
    let (pid, uid) = peer(conn.as_raw_fd())?;
    if uid != peer_uid {
        return Err(ChannelError::Stranger { uid, pid });
    }
    // A peer that connects and sends nothing must not stall the collector.
    set_timeout(conn.as_raw_fd(), libc::SO_RCVTIMEO, RECEIVE_TIMEOUT_MS);
    let mut payload = [0u8; 16];
    let mut iov = libc::iovec { iov_base: payload.as_mut_ptr() as *mut libc::c_void, iov_len: payload.len() };
    // Room for a few descriptors: extra ones a hostile peer sends are closed, not leaked.
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; zeroed is valid and every pointer is set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    // SAFETY: recvmsg into the buffers described by `msg`, all alive for the call.
    let n = unsafe { libc::recvmsg(conn.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(last("recvmsg"));
    }
    let mut fds = Vec::new();
    // Walking the control messages the kernel wrote into `cbuf`, with the libc macros.
    // SAFETY: `msg` describes `cbuf`, alive here; CMSG_FIRSTHDR only reads `msg`.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: a non-null header the macros returned lies inside `cbuf`.
        let header = unsafe { cmsg.read_unaligned() };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            // SAFETY: the data of that header, inside `cbuf`.
            let data = unsafe { libc::CMSG_DATA(cmsg) } as *const RawFd;
            // SAFETY: a size computation.
            let empty = unsafe { libc::CMSG_LEN(0) } as usize;
            let count = (header.cmsg_len as usize).saturating_sub(empty) / std::mem::size_of::<RawFd>();
            for i in 0..count {
                // SAFETY: the `count` descriptors the kernel wrote after the header, in `cbuf`.
                let raw = unsafe { data.wrapping_add(i).read_unaligned() };
                // SAFETY: SCM_RIGHTS gave this process a new descriptor nobody else owns.
                fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
            }
        }
        // SAFETY: the next header after one inside `cbuf`, or null.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    if n as usize != payload.len() || u64::from_le_bytes(payload[..8].try_into().expect("8")) != MAGIC {
        return Err(ChannelError::Protocol("not a segment message"));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 || fds.len() != 1 {
        return Err(ChannelError::Protocol("expected exactly one descriptor"));
    }
    // The connection stays open for wake-ups, which the collector reads without blocking.
    // SAFETY: fcntl on a valid fd.
    let flags = unsafe { libc::fcntl(conn.as_raw_fd(), libc::F_GETFL) };
    // SAFETY: as above.
    unsafe { libc::fcntl(conn.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
    Ok(Received { fd: fds.pop().expect("one"), conn, pid })
}

/// The agent's end: hands `segment` to the collector of `session`, after checking that the listener belongs
/// to this user or to root (whose `cuflight serve` follows every user's agents, and who may read any process's
/// memory anyway). Returns the connection, kept open to [`wake`] the collector.
pub fn send(session: &str, segment: RawFd) -> Result<OwnedFd, ChannelError> {
    let fd = socket(0)?;
    set_timeout(fd.as_raw_fd(), libc::SO_SNDTIMEO, CONNECT_TIMEOUT_MS);
    let (addr, len) = address(session);
    // SAFETY: connect with a valid address of `len` bytes.
    if unsafe { libc::connect(fd.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) } != 0 {
        return Err(last("connect"));
    }
    let (pid, uid) = peer(fd.as_raw_fd())?;
    if uid != euid() && uid != 0 {
        return Err(ChannelError::Stranger { uid, pid });
    }
    let mut payload = [0u8; 16];
    payload[..8].copy_from_slice(&MAGIC.to_le_bytes());
    // SAFETY: getpid has no preconditions.
    payload[8..12].copy_from_slice(&(unsafe { libc::getpid() } as u32).to_le_bytes());
    let mut iov = libc::iovec { iov_base: payload.as_mut_ptr() as *mut libc::c_void, iov_len: payload.len() };
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain data; zeroed is valid and every pointer is set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.as_mut_ptr() as *mut libc::c_void;
    // SAFETY: a pure size computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as _;
    // SAFETY: `msg` describes `cbuf`, which has room for one header and one descriptor.
    let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    let header = libc::cmsghdr {
        cmsg_level: libc::SOL_SOCKET,
        cmsg_type: libc::SCM_RIGHTS,
        // SAFETY: a pure size computation.
        cmsg_len: unsafe { libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) } as _,
    };
    // SAFETY: the first header lies inside `cbuf` (sized by CMSG_SPACE above).
    unsafe { cmsg.write_unaligned(header) };
    // SAFETY: the header's data lies inside `cbuf`.
    let data = unsafe { libc::CMSG_DATA(cmsg) } as *mut RawFd;
    // SAFETY: room for one descriptor there (CMSG_SPACE of one).
    unsafe { data.write_unaligned(segment) };
    // SAFETY: sendmsg of the buffers described by `msg`, alive for the call; MSG_NOSIGNAL so a listener that
    // went away cannot raise SIGPIPE in the program.
    let n = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n != payload.len() as isize {
        return Err(last("sendmsg"));
    }
    Ok(fd)
}

/// Asks the collector at the other end of `conn` to drain now (a ring passed its watermark). Never blocks and
/// never raises SIGPIPE: a full socket buffer already holds a wake-up, and a gone collector needs none.
pub fn wake(conn: RawFd) {
    // SAFETY: send of one byte from a valid buffer; errors are ignored by design.
    unsafe { libc::send(conn, b"w".as_ptr() as *const libc::c_void, 1, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
}

/// Sends signal `sig` to process `pid` (what `cuflight record` forwards to its program).
pub fn signal_process(pid: u32, sig: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) has no memory preconditions; pid is positive (a single process).
    if pid <= 0 || unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Lowers the calling thread's scheduling priority (nice 10): the collector's background work (compression)
/// must not take CPU from the program it records.
pub fn lower_this_thread_priority() {
    // SAFETY: setpriority has no memory preconditions; a per-thread nice value is Linux behaviour.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, thread_id() as libc::id_t, 10) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_segment_reaches_the_listener_of_its_session() {
        let session = format!("test-{}-a", std::process::id());
        let l = Listener::bind(&session).unwrap();
        assert!(l.accept().is_none());
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let conn = send(&session, file.as_raw_fd()).unwrap();
        let r = l.accept().unwrap().unwrap();
        assert_eq!(r.pid, std::process::id());
        wake(conn.as_raw_fd());
        let t = std::time::Instant::now();
        assert!(!l.wait(&[r.conn.as_raw_fd()], 5000), "a wake-up, not a hang-up");
        assert!(t.elapsed() < std::time::Duration::from_secs(1), "woken at once");
        drop(conn);
        assert!(l.wait(&[r.conn.as_raw_fd()], 5000), "the agent's end closed");
        assert!(Listener::bind(&session).is_err(), "a taken name is refused");
        assert!(send(&format!("test-{}-nobody", std::process::id()), file.as_raw_fd()).is_err());
    }

    #[test]
    fn a_peer_that_sends_nothing_or_garbage_is_refused_without_stalling() {
        let session = format!("test-{}-b", std::process::id());
        let l = Listener::bind(&session).unwrap();
        let s = socket(0).unwrap();
        let (addr, len) = address(&session);
        // SAFETY: connect with a valid address.
        assert_eq!(unsafe { libc::connect(s.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) }, 0);
        let t = std::time::Instant::now();
        assert!(l.accept().unwrap().is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(2));
        let s = socket(0).unwrap();
        // SAFETY: as above.
        unsafe { libc::connect(s.as_raw_fd(), &addr as *const _ as *const libc::sockaddr, len) };
        // SAFETY: a plain write of garbage from a static buffer of 16 bytes.
        unsafe { libc::write(s.as_raw_fd(), b"0123456789abcdef".as_ptr() as *const libc::c_void, 16) };
        assert!(matches!(l.accept().unwrap(), Err(ChannelError::Protocol(_))));
    }
}
