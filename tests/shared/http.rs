//! One HTTP/1.1 request on its own connection, written and read by hand (no client library: the
//! tests send what a client must not, e.g. a rebound `Host`). Shared by the serve tests, the
//! WebDriver client and the serve bench.
#![allow(dead_code)]

use std::io::{BufRead, Read, Write};

/// `method path` to `addr` with `headers` (which may replace `Host` and `Content-Length`) and
/// `body`: the status, the head (trimmed) and the body. The body is read to its Content-Length
/// (a server may keep the connection open), or to the end.
pub fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String, String) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-length")) {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    stream.write_all(req.as_bytes()).unwrap();
    let mut reader = std::io::BufReader::new(stream);
    let mut head = String::new();
    while !head.ends_with("\r\n\r\n") && reader.read_line(&mut head).unwrap() > 0 {}
    let length = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<usize>().ok()).flatten()
    });
    let mut bytes = Vec::new();
    match length {
        Some(n) => {
            bytes.resize(n, 0);
            reader.read_exact(&mut bytes).unwrap();
        }
        None => {
            reader.read_to_end(&mut bytes).unwrap();
        }
    }
    let head = head.trim_end().to_string();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head, String::from_utf8_lossy(&bytes).into_owned())
}
