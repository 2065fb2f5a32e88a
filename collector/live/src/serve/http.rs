//! The smallest HTTP/1.1 server `serve` needs: `GET /metrics` answered with the exposition, anything else 404,
//! one connection at a time (scrapers are few), each with a short deadline so a silent client cannot hold it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// `body(openmetrics)`: the exposition, in OpenMetrics when the scraper asks for it (its Accept header).
pub fn run(listener: TcpListener, body: impl Fn(bool) -> String) {
    for stream in listener.incoming().flatten() {
        let _ = answer(stream, &body);
    }
}

fn answer(mut s: TcpStream, body: &impl Fn(bool) -> String) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    // The request head, at most 8 KiB.
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(head.split(|&b| b == b'\n').next().unwrap_or_default()).into_owned();
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let head_text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let openmetrics = head_text.lines().any(|l| l.starts_with("accept:") && l.contains("application/openmetrics-text"));
    let (status, kind, text) = match (method, path) {
        ("GET", "/metrics") if openmetrics => {
            ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", body(true))
        }
        ("GET", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body(false)),
        ("GET", "/") => ("200 OK", "text/plain; charset=utf-8", "cuflight serve: metrics at /metrics\n".to_string()),
        _ => ("404 Not Found", "text/plain; charset=utf-8", "not found\n".to_string()),
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        text.len()
    )?;
    s.write_all(text.as_bytes())?;
    s.flush()
}
