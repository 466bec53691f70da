//! A store that fails on cue: an HTTP/1.1 proxy on loopback in front of SeaweedFS's S3 port,
//! which passes requests through until it is told to answer every request `500` or to hang
//! (accept, read, never answer). It reads each request's framing (its head, then a
//! `Content-Length` or chunked body), so it can switch between one request and the next, and it
//! can be armed to fail "mid-commit": once a given number of table writes (PUTs under a
//! `.lance/` folder) have gone through. Responses are copied through as they come.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    /// Every request is answered `500 Internal Server Error` and its connection closed.
    Fail,
    /// Every request is read and never answered; the connection is closed when this ends.
    Hang,
}

struct State {
    mode: Mode,
    /// `(writes left, then)`: the mode to take once this many more table writes went through.
    armed: Option<(usize, Mode)>,
    /// Requests answered other than by passing them on.
    refused: usize,
    /// Their first lines.
    refused_lines: Vec<String>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// The proxy; its threads end with the process (a connection a test left open does no harm).
pub struct Flaky {
    pub port: u16,
    shared: Arc<Shared>,
}

impl Flaky {
    /// A proxy to `127.0.0.1:upstream`, passing everything through.
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State { mode: Mode::Pass, armed: None, refused: 0, refused_lines: Vec::new() }),
            changed: Condvar::new(),
        });
        let s = shared.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let s = s.clone();
                std::thread::spawn(move || serve(client, upstream, &s));
            }
        });
        Self { port, shared }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn set(&self, mode: Mode) {
        let mut st = self.shared.state.lock().unwrap();
        (st.mode, st.armed) = (mode, None);
        self.shared.changed.notify_all();
    }

    /// Take `then` once `writes` more table writes have gone through.
    pub fn arm(&self, writes: usize, then: Mode) {
        self.shared.state.lock().unwrap().armed = Some((writes, then));
    }

    pub fn refused(&self) -> usize {
        self.shared.state.lock().unwrap().refused
    }

    /// Block until a request whose first line contains `what` has been refused (answered 500,
    /// or held by a hang).
    pub fn wait_refused(&self, what: &str) {
        let st = self.shared.state.lock().unwrap();
        drop(
            self.shared
                .changed
                .wait_while(st, |st| !st.refused_lines.iter().any(|l| l.contains(what)))
                .unwrap(),
        );
    }
}

/// One client connection: request by request, passed on or refused by the mode at its start.
/// A request passed on goes to the store over a connection of its own, marked `Connection:
/// close`, and its response is copied back until the store closes it: no response is parsed,
/// and no request is ever written to a connection the store is closing (a kept-alive one it
/// timed out). The client, told `close`, opens a new connection for its next request.
fn serve(client: TcpStream, upstream: u16, shared: &Shared) {
    // A response's body written behind its head must not wait for the client's delayed ACK.
    let _ = client.set_nodelay(true);
    let mut from_client = BufReader::new(client.try_clone().unwrap());
    while let Some(head) = read_head(&mut from_client) {
        match decide(&head, shared) {
            Mode::Pass => {
                let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else { break };
                let _ = up.set_nodelay(true);
                let sent = up.write_all(closing(&head).as_bytes()).is_ok()
                    && copy_body(&head, &mut from_client, Some(&mut up)).is_ok();
                if !sent || std::io::copy(&mut up, &mut &client).is_err() {
                    break;
                }
            }
            Mode::Fail => {
                let _ = copy_body(&head, &mut from_client, None);
                let _ = (&client).write_all(
                    b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
                break;
            }
            Mode::Hang => {
                let st = shared.state.lock().unwrap();
                drop(shared.changed.wait_while(st, |st| st.mode == Mode::Hang).unwrap());
                break;
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}

/// A request head with `Connection: close` in place of whatever it said of its connection.
fn closing(head: &str) -> String {
    let mut out: String = head
        .split_inclusive("\r\n")
        .filter(|l| {
            let name = l.split_once(':').map(|(k, _)| k.trim().to_ascii_lowercase());
            !matches!(name.as_deref(), Some("connection" | "keep-alive"))
        })
        .collect();
    out.truncate(out.len() - 2);
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// The mode this request meets (counting it against an armed switch), and a refusal counted.
fn decide(head: &str, shared: &Shared) -> Mode {
    let mut st = shared.state.lock().unwrap();
    let table_write = head.starts_with("PUT ") && head.lines().next().is_some_and(|l| l.contains(".lance/"));
    if st.mode == Mode::Pass
        && let Some((left, then)) = st.armed
    {
        if left == 0 {
            (st.mode, st.armed) = (then, None);
        } else if table_write {
            st.armed = Some((left - 1, then));
        }
    }
    if st.mode != Mode::Pass {
        st.refused += 1;
        st.refused_lines.push(head.lines().next().unwrap_or_default().to_string());
        shared.changed.notify_all();
    }
    st.mode
}

/// A request's head (through its blank line); `None` at the end of the connection.
fn read_head(r: &mut impl BufRead) -> Option<String> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        head.push_str(&line);
        if line == "\r\n" {
            return Some(head);
        }
    }
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// Copy (or, with no `to`, read and drop) the body the head announces.
fn copy_body(head: &str, from: &mut impl BufRead, mut to: Option<&mut TcpStream>) -> std::io::Result<()> {
    let mut pass = |bytes: &[u8]| match to.as_mut() {
        Some(t) => t.write_all(bytes),
        None => Ok(()),
    };
    if header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            let mut size = String::new();
            from.read_line(&mut size)?;
            pass(size.as_bytes())?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
            // The chunk and its CRLF (after the last, empty chunk: the blank line ending it).
            let mut chunk = vec![0u8; n + 2];
            from.read_exact(&mut chunk)?;
            pass(&chunk)?;
            if n == 0 {
                return Ok(());
            }
        }
    }
    let n: u64 = header(head, "content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let mut body = from.take(n);
    let mut buf = [0u8; 64 * 1024];
    loop {
        let k = body.read(&mut buf)?;
        if k == 0 {
            return Ok(());
        }
        pass(&buf[..k])?;
    }
}
