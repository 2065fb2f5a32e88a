//! The metrics endpoint as a hostile or careless client meets it: it listens on this machine unless told, and
//! clients that send half a request and wait neither keep a scrape waiting nor grow serve's memory.

use super::*;

#[test]
fn serve_stays_on_this_machine_unless_told() {
    let out = Command::new(cuflight_bin()).args(["serve", "--listen", "0.0.0.0:0", "--rounds", "1"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--allow-remote"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A scrape while `idle` connections have each sent half a request (`GET /metrics HTTP/1.1` and no blank line) and
/// wait: its answer's status line and how long it took.
fn scrape_beside_idle_clients(addr: &str, idle: usize) -> (String, Duration, Vec<std::net::TcpStream>) {
    let to: std::net::SocketAddr = addr.parse().unwrap();
    let held: Vec<std::net::TcpStream> = (0..idle)
        .map(|i| {
            // A server that stopped accepting leaves the connection in its backlog, and connect waits.
            let mut s = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(2))
                .unwrap_or_else(|e| panic!("idle client {i} could not connect: {e}"));
            s.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
            s
        })
        .collect();
    let began = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    (reply.lines().next().unwrap_or("").to_string(), began.elapsed(), held)
}

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Issue 52 item 3: 1,000 clients that send half a request and then nothing do not keep a scrape waiting (the
/// one-connection-at-a-time endpoint stopped answering at 131 of them), serve's memory stays bounded, and the
/// same holds with --allow-remote.
#[test]
fn idle_half_requests_do_not_hold_the_metrics_endpoint() {
    let _serial = serial();
    for args in [&[][..], &["--allow-remote"][..]] {
        let listen = if args.is_empty() { "127.0.0.1:0" } else { "0.0.0.0:0" };
        let (mut serve, listening, _err) = start_serve_on(listen, args);
        let addr = format!("127.0.0.1:{}", listening.rsplit(':').next().unwrap());
        let before = rss_kib(serve.id());
        let (status, took, held) = scrape_beside_idle_clients(&addr, 1000);
        assert!(status.starts_with("HTTP/1.1 200"), "{args:?}: {status:?} after {took:?}");
        assert!(took < Duration::from_secs(1), "{args:?}: answered after {took:?}");
        let grown = rss_kib(serve.id()).saturating_sub(before);
        assert!(grown < 64 * 1024, "{args:?}: serve grew {grown} KiB holding 1000 idle clients");
        drop(held);
        let _ = serve.kill();
        let _ = serve.wait();
    }
}
