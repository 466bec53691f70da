//! One index, many machines, measured (issue 28): real `cairn` processes on two "machines" (own
//! home, state and runtime folders) against SeaweedFS on loopback, each machine reaching it
//! through a proxy of its own that counts its S3 requests.
//!
//! - **Freshness**: a page edited on A (the writer: `cairn watch` with the Cranfield vault) until
//!   B (a reader: `cairn mcp`, no folder) answers with it, timed from A's `page_indexed` event;
//!   p50/p99 over `CAIRN_BENCH_EDITS` edits (default 200; goal p99 ≤ 1 s, issue 50). B is asked through
//!   its socket, as its clients ask it, every 20 ms until it answers.
//! - **Requests per minute** of the idle writer and the idle reader (nobody edits or asks) over
//!   `CAIRN_BENCH_IDLE_SECS` (default 60; goals, issue 50: idle writer ≤ 40/min, reader ≤ 20/min), with a breakdown by kind.
//! - **Memory**: the reader's RSS beside the writer's.
//! - **Takeover** after kill -9 of the writer, `CAIRN_BENCH_TAKEOVERS` times (default 3, the
//!   roles swapping each time): from the kill to the standby's "writes now" (goal ≤ 5 s, issue 50).
//!
//! `CAIRN_BENCH_SOURCES` (default 1) deals Cranfield's pages out over that many sources (the
//! idle requests at 3 and at 30 sources, issue 50).
//!
//! Works in `CAIRN_BENCH_DIR` (default `/tmp/cairn-bench-machines`). Run by
//! `scripts/bench/machines`; prints markdown tables.

mod common;
#[path = "../tests/it/weed.rs"]
#[allow(dead_code)] // the tests' SeaweedFS: each bench uses part of it
mod weed;

use cairn_actors::api::Search;
use cairn_actors::roles::client::Client;
use common::{Better, Figures, Proc, bin, copy_dir, pct, shared};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use weed::{BUCKET, Weed};

/// How long a bench waits for a line or an event before it fails.
const WAIT: Duration = Duration::from_secs(1800);

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// A loopback proxy to `upstream` that counts the HTTP requests going through it.
struct Counter {
    port: u16,
    requests: Arc<AtomicU64>,
    /// Requests by kind (method and what they reach: `_cairn/…` objects by name, tables as one).
    kinds: Arc<std::sync::Mutex<BTreeMap<String, u64>>>,
}

impl Counter {
    fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicU64::new(0));
        let kinds: Arc<std::sync::Mutex<BTreeMap<String, u64>>> = Arc::default();
        let (count, by_kind) = (requests.clone(), kinds.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else { continue };
                // Without it, a response's body written behind its head waits for the client's
                // delayed ACK (Nagle): ~40 ms a request, 11 s of a takeover's table reads.
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (count, by_kind) = (count.clone(), by_kind.clone());
                std::thread::spawn(move || forward_requests(client, server, &count, &by_kind));
                std::thread::spawn(move || {
                    let (mut s2, mut c2) = (s2, c2);
                    let _ = std::io::copy(&mut s2, &mut c2);
                    let _ = c2.shutdown(std::net::Shutdown::Write);
                });
            }
        });
        Self { port, requests, kinds }
    }

    fn count(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    fn kinds(&self) -> BTreeMap<String, u64> {
        self.kinds.lock().unwrap().clone()
    }
}

/// What a request reaches, from its request line: `GET _cairn/head.json`, `LIST _cairn/changes`,
/// `PUT table` (any table file).
fn kind_of(head: &[u8]) -> String {
    let line = String::from_utf8_lossy(head).lines().next().unwrap_or_default().to_string();
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let listed = query.split('&').find_map(|kv| kv.strip_prefix("prefix="));
    let (method, path) = match listed {
        Some(prefix) if method == "GET" => ("LIST", prefix.replace("%2F", "/")),
        _ => (method, path.to_string()),
    };
    let what = match path.split_once("_cairn/") {
        Some((_, rest)) => {
            let mut segs = rest.split('/');
            format!("_cairn/{}", segs.next().unwrap_or(""))
        }
        None if path.contains(".lance") => "table".to_string(),
        None => "other".to_string(),
    };
    format!("{method} {what}")
}

/// `kinds` now less `before`, as `kind n/min` sorted by count.
fn kinds_per_min(now: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>, idle: Duration) -> String {
    let mut v: Vec<(String, f64)> = now
        .iter()
        .map(|(k, n)| {
            (k.clone(), (n - before.get(k).copied().unwrap_or(0)) as f64 * 60.0 / idle.as_secs_f64())
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v.iter().map(|(k, n)| format!("{k} {n:.1}")).collect::<Vec<_>>().join(", ")
}

/// Client → server: each request's head counted and passed on, then its body (by
/// `Content-Length`; S3 clients send no chunked request bodies here).
fn forward_requests(
    client: TcpStream,
    mut server: TcpStream,
    count: &AtomicU64,
    kinds: &std::sync::Mutex<BTreeMap<String, u64>>,
) {
    let mut from = std::io::BufReader::new(client);
    loop {
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            match from.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => {
                    let _ = server.shutdown(std::net::Shutdown::Write);
                    return;
                }
                Ok(_) => {}
            }
            head.extend_from_slice(&line);
            if line == b"\r\n" {
                break;
            }
        }
        count.fetch_add(1, Ordering::SeqCst);
        *kinds.lock().unwrap().entry(kind_of(&head)).or_default() += 1;
        let length = String::from_utf8_lossy(&head)
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length").then(|| v.trim().parse::<u64>().ok())?
            })
            .unwrap_or(0);
        if server.write_all(&head).is_err() {
            return;
        }
        let mut body = (&mut from).take(length);
        if std::io::copy(&mut body, &mut server).is_err() {
            return;
        }
    }
}

struct Machine {
    home: PathBuf,
    proxy: Counter,
}

impl Machine {
    fn command(&self, weed: &Weed, db: &str, args: &[&str]) -> Command {
        let mut c = Command::new(bin());
        c.args(args).args(["--db", db]);
        weed.machine(&self.home, &mut c);
        c.env("AWS_ENDPOINT", format!("http://127.0.0.1:{}", self.proxy.port)).env("RUST_LOG", "info");
        c
    }

    fn spawn(&self, weed: &Weed, db: &str, args: &[&str], json: bool) -> Proc {
        Proc::spawn(self.command(weed, db, args), json)
    }

    /// The socket the machine's owner published in its lock file.
    fn socket(&self, db: &str) -> PathBuf {
        let paths = cairn_actors::core::paths::DbPaths::remote_under(&self.home.join("state"), db);
        let info =
            cairn_actors::roles::lock::read_info(&paths.lock()).expect("the owner published its socket");
        PathBuf::from(info.socket)
    }
}

fn main() {
    let work = PathBuf::from(
        std::env::var("CAIRN_BENCH_DIR").unwrap_or_else(|_| "/tmp/cairn-bench-machines".into()),
    );
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let vault = work.join("vault");
    let sources = env_num("CAIRN_BENCH_SOURCES", 1).max(1) as usize;
    let folder_of =
        |n: usize| if sources == 1 { vault.clone() } else { vault.join(format!("s{}", (n - 1) % sources)) };
    copy_dir(&shared("cranfield/vault"), &vault);
    if sources > 1 {
        // Cranfield's pages dealt out over the sources, n.md to s{(n-1) mod sources}.
        for n in 1..=1400 {
            std::fs::create_dir_all(folder_of(n)).unwrap();
            std::fs::rename(vault.join(format!("{n}.md")), folder_of(n).join(format!("{n}.md"))).unwrap();
        }
    }
    let given: Vec<String> = if sources == 1 {
        vec!["--source".into(), format!("cran={}", vault.display())]
    } else {
        (0..sources)
            .flat_map(|j| ["--source".into(), format!("s{j}={}", vault.join(format!("s{j}")).display())])
            .collect()
    };
    let watch = |json: bool| -> Vec<&str> {
        let mut args = vec!["watch"];
        if json {
            args.push("--json");
        }
        args.extend(given.iter().map(String::as_str));
        args
    };
    let weed = Weed::start(&work.join("weed"));
    let s3 = weed.ports[6];
    let db = format!("s3://{BUCKET}/bench");
    let machine = |name: &str| Machine { home: work.join(name), proxy: Counter::start(s3) };
    let (a, b) = (machine("a"), machine("b"));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();

    // A indexes and watches; B serves as a reader.
    let t = Instant::now();
    let writer = a.spawn(&weed, &db, &watch(true), true);
    writer.said("cairn: up to date", WAIT, None).expect("cairn: up to date");
    println!("A indexed {} ({sources} source(s)) in {:.1} s\n", vault.display(), t.elapsed().as_secs_f64());
    let reader = b.spawn(&weed, &db, &["mcp"], false);
    reader.said("cairn mcp: Reader", WAIT, None).expect("cairn mcp: Reader");
    let client = Client::new(&b.socket(&db), "bench");
    let ask = |query: &str| -> Value {
        let request = cairn_actors::SearchRequest {
            mode: cairn_actors::Mode::Fast,
            ..cairn_actors::SearchRequest::new(query)
        };
        let resp = runtime.block_on(client.ask(Search { request })).unwrap();
        serde_json::to_value(resp).unwrap()
    };

    // Freshness.
    let edits = env_num("CAIRN_BENCH_EDITS", 200) as usize;
    let mut lags = Vec::new();
    for i in 0..edits {
        let n = 1 + (i * 37) % 1400;
        let page = folder_of(n).join(format!("{n}.md"));
        let token = format!("fresh{i}q");
        let written = Instant::now();
        let mut f = std::fs::OpenOptions::new().append(true).open(&page).unwrap();
        writeln!(f, "\nEdited on A: {token}.").unwrap();
        drop(f);
        let slug = page.file_stem().unwrap().to_string_lossy().to_string();
        let (committed, _) = writer
            .event("the edit's commit", written, WAIT, |e| e["event"] == "page_indexed" && e["slug"] == slug);
        loop {
            let answer = ask(&token);
            if answer["results"].as_array().is_some_and(|r| r.iter().any(|r| r["slug"] == slug)) {
                let lag = committed.elapsed().as_secs_f64();
                if lag > 3.0 {
                    eprintln!("edit {i} ({slug}): answered on B {lag:.1} s after A committed it");
                }
                lags.push(lag);
                break;
            }
            assert!(committed.elapsed() < Duration::from_secs(120), "B never answered edit {i}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    for (at, line) in reader.said_lines() {
        if line.contains("WARN") || line.contains("ERROR") {
            eprintln!("B at +{:.1} s: {line}", at.duration_since(t).as_secs_f64());
        }
    }
    println!("## Commit on A → answered on B\n");
    println!("| edits | p50 s | p99 s (goal ≤ 1) | max s |\n|---|---|---|---|");
    println!(
        "| {edits} | {:.3} | {:.3} | {:.3} |\n",
        pct(&lags, 0.5),
        pct(&lags, 0.99),
        lags.iter().copied().fold(0.0, f64::max)
    );

    let mut f = Figures::new("machines");
    f.add("freshness.answered_p50_s", pct(&lags, 0.5), "s", Better::Lower);
    f.add("freshness.answered_p99_s", pct(&lags, 0.99), "s", Better::Lower);

    // Idle requests and memory.
    std::thread::sleep(cairn_actors::engine::follow::ACTIVE_FOR);
    let idle = Duration::from_secs(env_num("CAIRN_BENCH_IDLE_SECS", 60));
    let (a0, b0) = (a.proxy.count(), b.proxy.count());
    let (ak, bk) = (a.proxy.kinds(), b.proxy.kinds());
    std::thread::sleep(idle);
    let per_min = |n: u64| n as f64 * 60.0 / idle.as_secs_f64();
    f.add("idle.writer_requests_per_min", per_min(a.proxy.count() - a0), "/min", Better::Lower);
    f.add("idle.reader_requests_per_min", per_min(b.proxy.count() - b0), "/min", Better::Lower);
    f.add("idle.writer_rss_mib", writer.rss_mib().0, "MiB", Better::Lower);
    f.add("idle.reader_rss_mib", reader.rss_mib().0, "MiB", Better::Lower);
    println!("## Idle S3 requests, and memory\n");
    println!("| process | requests/min | RSS MiB | by kind, per min |\n|---|---|---|---|");
    println!(
        "| A: writer (`cairn watch`) | {:.1} (goal ≤ 40) | {:.0} | {} |",
        per_min(a.proxy.count() - a0),
        writer.rss_mib().0,
        kinds_per_min(&a.proxy.kinds(), &ak, idle)
    );
    println!(
        "| B: reader (`cairn mcp`) | {:.1} (goal ≤ 20) | {:.0} | {} |\n",
        per_min(b.proxy.count() - b0),
        reader.rss_mib().0,
        kinds_per_min(&b.proxy.kinds(), &bk, idle)
    );

    // Takeovers: B is given the vault (a watch of its own, which hands its folder to B's mcp)
    // and stands by; then the writer's machine dies whole (kill -9 of its processes), the other
    // takes over, and the dead one comes back as a standby `watch`.
    let given = b.spawn(&weed, &db, &watch(false), false);
    given.said("standing by", WAIT, None).expect("standing by");
    let mut procs: [Vec<Proc>; 2] = [vec![writer], vec![reader, given]];
    let machines = [&a, &b];
    let mut times = Vec::new();
    let mut dead = 0;
    for _ in 0..env_num("CAIRN_BENCH_TAKEOVERS", 3) {
        let at = Instant::now();
        for p in &mut procs[dead] {
            p.child.kill().unwrap();
            p.child.wait().unwrap();
        }
        let alive = 1 - dead;
        let took = procs[alive][0]
            .said("this process writes now", WAIT, Some(at))
            .expect("this process writes now")
            .duration_since(at);
        times.push(took.as_secs_f64());
        let back = machines[dead].spawn(&weed, &db, &watch(false), false);
        back.said("stands by to take over", WAIT, None).expect("stands by to take over");
        procs[dead] = vec![back];
        dead = alive;
    }
    println!("## Takeover after kill -9 of the writer's machine\n");
    println!("| trials | p50 s | max s (goal ≤ 5) |\n|---|---|---|");
    println!(
        "| {} | {:.1} | {:.1} |\n",
        times.len(),
        pct(&times, 0.5),
        times.iter().copied().fold(0.0, f64::max)
    );
    f.add("takeover.p50_s", pct(&times, 0.5), "s", Better::Lower);
    f.add("takeover.max_s", times.iter().copied().fold(0.0, f64::max), "s", Better::Lower);
    f.finish();
    for p in procs.iter_mut().flatten() {
        let _ = p.child.kill();
        let _ = p.child.wait();
    }
}
