//! One database, one owner, with real processes: `cairn watch` owns it; `cairn mcp` (three of
//! them) and `cairn search` are its clients (no model, no index of their own); a kill -9 of the
//! owner hands the database to a standing-by client; two `cairn index` at once queue; the
//! owner's socket survives garbage, oversize frames, unknown verbs, clients that never read and
//! 200 connections at once.

use crate::support::{EventReader, cairn_bin, search_json, write};
use serde_json::{Value, json};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A `cairn mcp` child spoken to over stdio (newline-delimited JSON-RPC, as MCP's stdio
/// transport is).
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    replies: mpsc::Receiver<Value>,
    next: u64,
}

impl Mcp {
    fn start(db: &Path) -> Self {
        let mut child = Command::new(cairn_bin())
            .args(["mcp", "--db", db.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, replies) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && tx.send(v).is_err()
                {
                    return;
                }
            }
        });
        let mut mcp = Self { child, stdin, replies, next: 0 };
        let params = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}});
        mcp.request("initialize", params, Duration::from_secs(300)).expect("initialize");
        mcp.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, v: Value) {
        writeln!(self.stdin, "{v}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// One request; its result, or `Err` with the error or the timeout.
    fn request(&mut self, method: &str, params: Value, within: Duration) -> Result<Value, String> {
        self.next += 1;
        let id = self.next;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.replies.recv_timeout(left) {
                Ok(v) if v["id"] == id => {
                    return match v.get("result") {
                        Some(r) => Ok(r.clone()),
                        None => Err(v["error"].to_string()),
                    };
                }
                Ok(_) => {}
                Err(_) => return Err(format!("`{method}` got no answer within {within:?}")),
            }
        }
    }

    /// A tool's JSON answer (`Err`: the tool failed, or no answer in time).
    fn tool(&mut self, name: &str, args: Value, within: Duration) -> Result<Value, String> {
        let r = self.request("tools/call", json!({"name": name, "arguments": args}), within)?;
        let text = r["content"][0]["text"].as_str().unwrap_or_default();
        if r["isError"] == true {
            return Err(text.to_string());
        }
        serde_json::from_str(text).map_err(|e| format!("{e}: {text}"))
    }

    fn status(&mut self) -> Value {
        self.tool("status", json!({}), Duration::from_secs(60)).unwrap()
    }

    /// The whole answer (`detail: full`), to compare with the command line's `--json`.
    fn search(&mut self, query: &str) -> Value {
        self.tool("search", json!({"query": query, "detail": "full"}), Duration::from_secs(120)).unwrap()
    }

    fn rss_mib(&self) -> f64 {
        rss_mib(self.child.id())
    }

    /// stdin closed: the server ends; its stderr.
    fn finish(mut self) -> String {
        drop(self.stdin);
        let mut err = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(self.child.wait().unwrap().success(), "cairn mcp failed: {err}");
        err
    }
}

fn rss_mib(pid: u32) -> f64 {
    cairn_actors::core::status::Memory::of(pid).rss_mib.unwrap_or(0.0)
}

/// The results of an answer, without its timing.
fn results(v: &Value) -> Value {
    json!({"results": v["results"], "served_by": v["served_by"]})
}

fn vault(root: &Path) {
    write(
        root,
        "harbour.md",
        "---\ntitle: The Old Harbour\naliases: [Fishermen's Quay]\n---\n\nBoats wait for the tide.\n",
    );
    write(root, "lighthouse.md", "# Lighthouse Keeping\n\nThe keeper polishes the great lens before dusk.\n");
    write(root, "nets.md", "# Mending Nets\n\nTorn nets are mended with tarred twine.\n");
}

fn watch(db: &Path, root: &Path) -> (Child, EventReader) {
    let mut child = Command::new(cairn_bin())
        .args(["watch", "--json", "--db", db.to_str().unwrap(), "--source"])
        .arg(format!("sea={}", root.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let events = EventReader::new(child.stdout.take().unwrap());
    (child, events)
}

/// Every `committed` event in the database's log (only the owner writes it).
fn embedded_chunks(db: &Path) -> usize {
    cairn_actors::core::log::read_log(&db.join("events/events.jsonl"))
        .unwrap()
        .iter()
        .map(|e| match e.kind {
            cairn_actors::EventKind::Committed { chunks_embedded, .. } => chunks_embedded,
            _ => 0,
        })
        .sum()
}

#[test]
fn one_owner_serves_three_mcp_servers_and_the_cli_and_a_client_takes_over_when_it_dies() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db) = (tmp.path().join("sea"), tmp.path().join("db"));
    vault(&root);
    let (mut owner, mut events) = watch(&db, &root);
    events.wait_for("the first index", |e| e["event"] == "committed" && e["chunks_pending"] == 0);
    let mut clients: Vec<Mcp> = (0..3).map(|_| Mcp::start(&db)).collect();

    // Exactly one process holds the model and the indexes.
    for c in &mut clients {
        let s = c.status();
        assert_eq!(s["role"], "client", "{s}");
        assert_eq!(s["owner"]["pid"], owner.id(), "{s}");
        assert_eq!(s["owner"]["purpose"], "watch");
        assert_eq!(s["sources"][0]["source"], "sea");
    }
    let owner_rss = rss_mib(owner.id());
    for c in &clients {
        assert!(
            c.rss_mib() < owner_rss / 3.0,
            "a client holds {:.0} MiB against the owner's {owner_rss:.0}",
            c.rss_mib()
        );
    }

    // Every client answers as the owner does, and says the owner served it.
    let cli = search_json(&db, "where are nets mended", &[]);
    assert_eq!(cli["served_by"]["pid"], owner.id());
    assert_eq!(cli["served_by"]["role"], "owner");
    for c in &mut clients {
        assert_eq!(results(&c.search("where are nets mended")), results(&cli));
    }

    // Edits made while all of them run are embedded once, by the owner.
    let before = embedded_chunks(&db);
    for (i, text) in
        ["Gulls circle the quay at dawn.", "The ferry leaves at noon.", "Crab pots are stacked by the wall."]
            .iter()
            .enumerate()
    {
        write(&root, &format!("edit-{i}.md"), &format!("# Edit {i}\n\n{text}\n"));
        events.wait_for("the edit's vectors", |e| {
            e["event"] == "page_embedded" && e["slug"] == format!("edit-{i}")
                || e["event"] == "page_indexed"
                    && e["slug"] == format!("edit-{i}")
                    && e["vectors_pending"] == 0
        });
    }
    assert_eq!(embedded_chunks(&db) - before, 3, "each new chunk embedded once");
    for c in &mut clients {
        assert_eq!(c.search("ferry leaves at noon")["results"][0]["slug"], "edit-1");
    }

    // kill -9 of the owner: a standing-by client takes the database; an edit made in the gap is
    // searchable after its catch-up; every request answers or fails within its time.
    owner.kill().unwrap();
    owner.wait().unwrap();
    write(
        &root,
        "gap.md",
        "# Gap\n\nWritten while nobody owned the database: the cormorants dry their wings.\n",
    );
    for c in &mut clients {
        let t0 = Instant::now();
        let r = c.tool("search", json!({"query": "harbour"}), Duration::from_secs(130));
        assert!(t0.elapsed() < Duration::from_secs(125), "a request hung: {r:?}");
    }
    // A client takes over: ask them until one says so (each answer is a real request).
    let deadline = Instant::now() + Duration::from_secs(300);
    while !clients
        .iter_mut()
        .any(|c| c.tool("status", json!({}), Duration::from_secs(30)).is_ok_and(|s| s["role"] == "owner"))
    {
        assert!(Instant::now() < deadline, "no client took over");
        std::thread::sleep(Duration::from_millis(100));
    }
    // `cairn index` through the new owner: returns once it has caught up.
    let out =
        Command::new(cairn_bin()).args(["index", "--json", "--db", db.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let roles: Vec<Value> = clients.iter_mut().map(|c| c.status()).collect();
    let owners: Vec<&Value> = roles.iter().filter(|s| s["role"] == "owner").collect();
    assert_eq!(owners.len(), 1, "exactly one client took over: {roles:?}");
    let new_owner = owners[0]["pid"].clone();
    assert!(roles.iter().all(|s| s["owner"]["pid"] == new_owner), "{roles:?}");
    assert_eq!(owners[0]["owner"]["purpose"], "mcp");
    for c in &mut clients {
        assert_eq!(c.search("cormorants dry their wings")["results"][0]["slug"], "gap");
    }

    let logs: Vec<String> = clients.into_iter().map(Mcp::finish).collect();
    for log in &logs {
        assert!(!log.to_lowercase().contains("conflict"), "a commit conflict: {log}");
    }
    let mut owner_log = String::new();
    std::io::Read::read_to_string(&mut owner.stderr.take().unwrap(), &mut owner_log).unwrap();
    assert!(!owner_log.to_lowercase().contains("conflict"), "{owner_log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_watch_adds_its_sources_to_the_owner_and_says_who_owns() {
    let tmp = tempfile::tempdir().unwrap();
    let (sea, hills, db) = (tmp.path().join("sea"), tmp.path().join("hills"), tmp.path().join("db"));
    vault(&sea);
    write(&hills, "cairns.md", "# Cairns\n\nPiles of stones mark the path over the pass.\n");
    let config = cairn::Config::new(
        db.to_str().unwrap(),
        vec![cairn::SourceConfig {
            id: "sea".into(),
            root: sea.clone(),
            include: vec![],
            exclude: vec![],
            language: None,
        }],
    );
    let owner = cairn::Cairn::open(config).await.unwrap();
    let second = Command::new(cairn_bin())
        .args(["watch", "--once", "--db", db.to_str().unwrap(), "--source"])
        .arg(format!("hills={}", hills.display()))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{said}");
    assert!(
        said.contains(&format!("owned by pid {}", std::process::id())) && said.contains("hills="),
        "{said}"
    );
    let status = owner.status().await.unwrap();
    let ids: Vec<&str> = status.sources.iter().map(|s| s.source.as_str()).collect();
    assert_eq!(ids, ["hills", "sea"], "the owner watches both now");
    let found = owner.search(cairn_query::SearchRequest::new("stones mark the path")).await.unwrap();
    assert_eq!((found.results[0].source.as_str(), found.results[0].slug.as_str()), ("hills", "cairns"));
    owner.shutdown().await.unwrap();
}

#[test]
fn two_index_runs_at_once_queue_and_leave_the_tables_of_one_clean_run() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db, clean) = (tmp.path().join("sea"), tmp.path().join("db"), tmp.path().join("clean"));
    vault(&root);
    for i in 0..40 {
        write(&root, &format!("more/p{i}.md"), &format!("# Page {i}\n\nA page about the sea, number {i}.\n"));
    }
    let index = |db: &Path| {
        Command::new(cairn_bin())
            .args(["index", "--json", "--db", db.to_str().unwrap(), "--source"])
            .arg(format!("sea={}", root.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (index(&db), index(&db));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(
        a.status.success() && b.status.success(),
        "{}\n---\n{}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let summaries: Vec<Value> = [&a, &b].iter().map(|o| serde_json::from_slice(&o.stdout).unwrap()).collect();
    let indexed: Vec<u64> = summaries.iter().map(|s| s["pages_indexed"].as_u64().unwrap()).collect();
    // One after the other: the second found the work done.
    assert!(indexed.contains(&43) && indexed.contains(&0), "{indexed:?}");
    assert!(index(&clean).wait().unwrap().success());
    let rows = |db: &Path| {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let store = cairn_index::Database::open(db.to_str().unwrap())
                .await
                .unwrap()
                .open_existing("sea")
                .await
                .unwrap();
            let pages: Vec<(String, String)> =
                store.all_pages().await.unwrap().into_iter().map(|p| (p.slug, p.content_hash)).collect();
            (pages, store.chunk_keys().await.unwrap())
        })
    };
    assert_eq!(rows(&db), rows(&clean));
}

/// Raw frames on the owner's socket.
mod socket {
    use super::*;
    use cairn_actors::api::ipc::{Hello, MAX_REPLY, Reply, Request, read_frame, write_frame};
    use tokio::io::AsyncWriteExt;
    use tokio::net::UnixStream;

    async fn reply(s: &mut UnixStream) -> Option<Reply> {
        let frame =
            tokio::time::timeout(Duration::from_secs(30), read_frame(s, MAX_REPLY)).await.ok()?.ok()?;
        serde_json::from_slice(&frame).ok()
    }

    async fn hello(socket: &Path) -> UnixStream {
        let mut s = UnixStream::connect(socket).await.unwrap();
        write_frame(&mut s, &Request::Hello(Hello::new("test"))).await.unwrap();
        assert!(matches!(reply(&mut s).await, Some(Reply::Ok(_))));
        s
    }

    fn is_error(r: &Option<Reply>) -> bool {
        matches!(r, None | Some(Reply::Error(_)))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bad_input_on_the_socket_gets_an_error_or_a_close_and_the_owner_goes_on_serving() {
        let tmp = tempfile::tempdir().unwrap();
        let (root, db) = (tmp.path().join("sea"), tmp.path().join("db"));
        vault(&root);
        let config = cairn::Config::new(
            db.to_str().unwrap(),
            vec![cairn::SourceConfig {
                id: "sea".into(),
                root: root.clone(),
                include: vec![],
                exclude: vec![],
                language: None,
            }],
        );
        let owner = cairn::Cairn::open(config.clone()).await.unwrap();
        owner.flush().await.unwrap();
        let socket = config.paths().socket();
        let meta = std::fs::metadata(&socket).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o600);

        // Garbage bytes (an HTTP request): read as a huge length, refused unread.
        let mut s = UnixStream::connect(&socket).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        assert!(is_error(&reply(&mut s).await));
        // A 100 MB frame: refused from its length, before its body.
        let mut s = UnixStream::connect(&socket).await.unwrap();
        s.write_all(&(100u32 << 20).to_be_bytes()).await.unwrap();
        assert!(is_error(&reply(&mut s).await));
        // A request before `hello`, then an unknown verb after it: errors, the connection lives.
        let mut s = UnixStream::connect(&socket).await.unwrap();
        write_frame(&mut s, &Request::Status(cairn_actors::api::Status {})).await.unwrap();
        assert!(is_error(&reply(&mut s).await));
        let mut s = hello(&socket).await;
        write_frame(&mut s, &json!({"verb": "format_disk"})).await.unwrap();
        assert!(matches!(reply(&mut s).await, Some(Reply::Error(_))));
        write_frame(&mut s, &Request::Status(cairn_actors::api::Status {})).await.unwrap();
        assert!(
            matches!(reply(&mut s).await, Some(Reply::Ok(_))),
            "the connection goes on after a bad request"
        );
        // A hello from another build is refused, naming both versions.
        let mut s = UnixStream::connect(&socket).await.unwrap();
        let old = Hello { scoring_version: "1999-01-01".into(), ..Hello::new("old") };
        write_frame(&mut s, &Request::Hello(old)).await.unwrap();
        match reply(&mut s).await {
            Some(Reply::Error(e)) => assert!(
                e.message.contains("1999-01-01") && e.message.contains(cairn_query::layers::SCORING_VERSION),
                "{e:?}"
            ),
            other => panic!("{other:?}"),
        }
        // A client that asks for a 10 MB page and never reads, and one that connects and never
        // speaks; then 200 connections at once.
        write(&root, "big.md", &format!("# Big\n\n{}\n", "All the words of a long page. ".repeat(320_000)));
        owner.flush_pages().await.unwrap();
        let mut stalled = hello(&socket).await;
        let get = cairn_actors::api::Get { source: "sea".into(), slug: "big".into() };
        write_frame(&mut stalled, &Request::Get(get)).await.unwrap();
        let _silent = UnixStream::connect(&socket).await.unwrap();
        let crowd: Vec<_> = (0..200)
            .map(|_| {
                let socket = socket.clone();
                tokio::spawn(async move {
                    let mut s = UnixStream::connect(&socket).await.ok()?;
                    write_frame(&mut s, &Request::Hello(Hello::new("crowd"))).await.ok()?;
                    reply(&mut s).await
                })
            })
            .collect();
        let mut answered = 0;
        for c in crowd {
            if let Some(r) = c.await.unwrap() {
                answered += 1;
                if let Reply::Error(e) = r {
                    assert!(e.retryable, "a refusal of the crowd is retryable: {e:?}");
                }
            }
        }
        // Every connection ended (an answer, a refusal or a close: the loop above returned);
        // at least the owner's 64 slots were served, however loaded the machine (the rest may be
        // refused by the kernel's listen backlog, which is a close too).
        assert!(answered >= 64, "{answered} of 200 got an answer or a refusal");
        // The owner still answers, to a new client and to this process.
        let client = cairn_actors::roles::client::Client::new(&socket, "after");
        let resp = client
            .ask(cairn_actors::api::Search { request: cairn_query::SearchRequest::new("tarred twine") })
            .await
            .unwrap();
        assert_eq!(resp.results[0].slug, "nets");
        assert_eq!(
            owner.search(cairn_query::SearchRequest::new("polishes the lens")).await.unwrap().results[0].slug,
            "lighthouse"
        );
        drop(stalled);
        owner.shutdown().await.unwrap();
        assert!(!socket.exists(), "the socket goes with the owner");
    }
}
