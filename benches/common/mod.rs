//! What the benches share: the shared eval data, the binary under test, a vault copied to work
//! on, sizes on disk, percentiles, and each bench's figures written as JSON and compared with
//! the stored baseline ([`Figures`]). Each bench uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A path under the shared eval data (`../shared/eval`); the bench fails when it is missing.
pub fn shared(rel: &str) -> PathBuf {
    let p = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo"))
        .join("..")
        .join("shared/eval")
        .join(rel);
    assert!(p.exists(), "bench: {} is missing (the shared eval data is required)", p.display());
    p
}

/// The `cairn` binary measured: this build's, or `CAIRN_BENCH_BIN` (another build, e.g. an
/// older one measured as a baseline).
pub fn bin() -> PathBuf {
    std::env::var_os("CAIRN_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cairn")))
}

/// A `cairn` child process: its JSON events (stdout, when asked for) and its stderr lines, each
/// timestamped as it arrives. How every bench starts an owner and waits for what it says.
pub struct Proc {
    pub child: Child,
    pub started: Instant,
    events: Option<mpsc::Receiver<(Instant, serde_json::Value)>>,
    said: mpsc::Receiver<(Instant, String)>,
}

/// Lines of `from`, each timestamped, sent on until the receiver goes.
fn lines<T: Send + 'static>(
    from: impl std::io::Read + Send + 'static,
    parse: impl Fn(String) -> Option<T> + Send + 'static,
) -> mpsc::Receiver<(Instant, T)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
            if let Some(v) = parse(line)
                && tx.send((Instant::now(), v)).is_err()
            {
                return;
            }
        }
    });
    rx
}

impl Proc {
    /// Spawn `command` (stdin piped, stderr read); with `json`, its stdout is read as one event
    /// per line (`watch --json`), else it is dropped.
    pub fn spawn(mut command: Command, json: bool) -> Self {
        let started = Instant::now();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(if json { Stdio::piped() } else { Stdio::null() })
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("bench: cannot start {command:?}: {e}"));
        let said = lines(child.stderr.take().unwrap(), Some);
        let events = child.stdout.take().map(|out| lines(out, |l| serde_json::from_str(&l).ok()));
        Self { child, started, events, said }
    }

    /// `cairn watch --json --db DB --source ID=DIR ...` of this build.
    pub fn watch(db: &Path, sources: &[(&str, &Path)]) -> Self {
        let mut c = Command::new(bin());
        c.args(["watch", "--json", "--db", db.to_str().unwrap()]);
        for (id, root) in sources {
            c.arg("--source").arg(format!("{id}={}", root.display()));
        }
        Self::spawn(c, true)
    }

    /// Events until `done` says so (it sees each one, with its arrival time); panics past
    /// `within`, naming `what`.
    pub fn until(
        &self,
        what: &str,
        within: Duration,
        mut done: impl FnMut(Instant, &serde_json::Value) -> bool,
    ) {
        let events = self.events.as_ref().expect("a process started with json");
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, e) =
                events.recv_timeout(left).unwrap_or_else(|_| panic!("bench: no {what} within {within:?}"));
            if done(at, &e) {
                return;
            }
        }
    }

    /// The first event arriving at or after `since` that `done` accepts, with its time.
    pub fn event(
        &self,
        what: &str,
        since: Instant,
        within: Duration,
        done: impl Fn(&serde_json::Value) -> bool,
    ) -> (Instant, serde_json::Value) {
        let mut found = None;
        self.until(what, within, |at, e| {
            let hit = at >= since && done(e);
            if hit {
                found = Some((at, e.clone()));
            }
            hit
        });
        found.expect("until returned on a hit")
    }

    /// When the process said a line containing `text` (waiting for it); `None` if it does not
    /// within `within` (an older build that never says it). With `echo`, each line on the way is
    /// printed with its time after `echo`'s instant.
    pub fn said(&self, text: &str, within: Duration, echo: Option<Instant>) -> Option<Instant> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (at, line) = self.said.recv_timeout(left).ok()?;
            if let Some(from) = echo {
                eprintln!("{:>7.3} s  {line}", at.saturating_duration_since(from).as_secs_f64());
            }
            if line.contains(text) {
                return Some(at);
            }
        }
    }

    /// The events printed so far and not yet waited for.
    pub fn drain_events(&self) -> Vec<(Instant, serde_json::Value)> {
        self.events.as_ref().map_or_else(Vec::new, |e| e.try_iter().collect())
    }

    /// The lines said so far and not yet waited for.
    pub fn said_lines(&self) -> Vec<(Instant, String)> {
        self.said.try_iter().collect()
    }

    /// The process's resident memory now and at its peak, in MiB.
    pub fn rss_mib(&self) -> (f64, f64) {
        let m = cairn_actors::core::status::Memory::of(self.child.id());
        (m.rss_mib.unwrap_or(f64::NAN), m.peak_rss_mib.unwrap_or(f64::NAN))
    }

    /// Ask the process to stop (SIGTERM: it commits what is pending) and wait for it.
    pub fn stop(mut self) {
        let _ = Command::new("kill").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

/// Copy a folder's files (the shared data is never written).
pub fn copy_dir(from: &Path, to: &Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let dest = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else if e.file_type().is_file() {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// The files under `path`, in MiB.
pub fn du_mib(path: &Path) -> f64 {
    walkdir::WalkDir::new(path)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().map_or(0, |m| m.len()))
        .sum::<u64>() as f64
        / (1024.0 * 1024.0)
}

/// The `p` quantile of `v` (nearest rank; NaN when `v` is empty).
pub fn pct(v: &[f64], p: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Lower,
    Higher,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Figure {
    pub value: f64,
    pub unit: String,
    pub better: Better,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Run {
    bench: String,
    binary: String,
    unix_ms: u64,
    figures: BTreeMap<String, Figure>,
}

/// A figure that moved the wrong way by more than this share of its baseline is called worse.
const WORSE_BY: f64 = 0.10;

/// One bench's figures. [`Figures::finish`] writes them as JSON to
/// `bench-results/<bench>.json` (or `$CAIRN_BENCH_OUT/<bench>.json`) and prints each one's ratio
/// to the stored baseline, `benches/baselines/<bench>.json` (`<bench>.debug.json` for the test
/// build's profile); `CAIRN_BENCH_SAVE_BASELINE=1`
/// stores this run as the baseline instead (commit it with the change that moved it).
pub struct Figures {
    run: Run,
}

impl Figures {
    pub fn new(bench: &str) -> Self {
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        Self {
            run: Run {
                bench: bench.into(),
                binary: bin().display().to_string(),
                unix_ms,
                figures: BTreeMap::new(),
            },
        }
    }

    /// Record `name` (a figure's stable key, e.g. `owner.http_p50_ms`).
    pub fn add(&mut self, name: &str, value: f64, unit: &str, better: Better) {
        self.run.figures.insert(name.into(), Figure { value, unit: unit.into(), better });
    }

    /// The stored baseline of `bench` for this build's profile: a run of the test build
    /// (`CAIRN_BENCH_PROFILE=debug`) is compared with a run of the test build, never with a
    /// release run's figures.
    fn baseline_path(bench: &str) -> PathBuf {
        let profile = if cfg!(debug_assertions) { ".debug" } else { "" };
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("benches/baselines")
            .join(format!("{bench}{profile}.json"))
    }

    /// Write the run, and print it against the baseline.
    pub fn finish(self) {
        let out = std::env::var_os("CAIRN_BENCH_OUT")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("bench-results"));
        std::fs::create_dir_all(&out).unwrap();
        let json = serde_json::to_string_pretty(&self.run).unwrap() + "\n";
        let file = out.join(format!("{}.json", self.run.bench));
        std::fs::write(&file, &json).unwrap();
        let baseline_file = Self::baseline_path(&self.run.bench);
        if std::env::var_os("CAIRN_BENCH_SAVE_BASELINE").is_some() {
            std::fs::create_dir_all(baseline_file.parent().unwrap()).unwrap();
            std::fs::write(&baseline_file, &json).unwrap();
            println!("\nfigures written to {} and stored as the baseline", file.display());
            return;
        }
        println!("\nfigures written to {}", file.display());
        let baseline: Option<Run> =
            std::fs::read(&baseline_file).ok().and_then(|b| serde_json::from_slice(&b).ok());
        let Some(baseline) = baseline else {
            println!(
                "no baseline at {} (CAIRN_BENCH_SAVE_BASELINE=1 stores this run)",
                baseline_file.display()
            );
            return;
        };
        println!("\n| figure | this run | baseline | ratio | |\n|---|---|---|---|---|");
        for (name, f) in &self.run.figures {
            let Some(b) = baseline.figures.get(name) else {
                println!("| {name} | {:.2} {} | (none) | | |", f.value, f.unit);
                continue;
            };
            let ratio = if b.value == 0.0 { "—".to_string() } else { format!("{:.2}", f.value / b.value) };
            println!(
                "| {name} | {:.2} {} | {:.2} | {ratio} | {} |",
                f.value,
                f.unit,
                b.value,
                verdict(f.value, b.value, f.better)
            );
        }
    }
}

/// Whether `value` is worse than `baseline` by more than [`WORSE_BY`].
/// A baseline of 0 (nothing embedded again, no request) is worse when the run is above it.
fn verdict(value: f64, baseline: f64, better: Better) -> &'static str {
    if baseline == 0.0 {
        return if better == Better::Lower && value > 0.0 { "worse" } else { "" };
    }
    let ratio = value / baseline;
    match better {
        Better::Lower if ratio > 1.0 + WORSE_BY => "worse",
        Better::Higher if ratio < 1.0 - WORSE_BY => "worse",
        _ => "",
    }
}

/// A seeded xorshift: the same picks on every run, with no dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n` (> 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// `k` distinct items of `all` (all of them, shuffled, when there are fewer).
    pub fn sample<T: Clone>(&mut self, all: &[T], k: usize) -> Vec<T> {
        let mut idx: Vec<usize> = (0..all.len()).collect();
        let k = k.min(idx.len());
        for i in 0..k {
            let j = i + self.below(idx.len() - i);
            idx.swap(i, j);
        }
        idx[..k].iter().map(|&i| all[i].clone()).collect()
    }
}

/// `cairn search --json --mode MODE --db DB -- QUERY` of this build (a client of the owner, or
/// a reader when none runs), which must succeed: its answer, and the process's wall time in ms.
pub fn cli_search(db: &Path, query: &str, mode: &str) -> (serde_json::Value, f64) {
    let t = Instant::now();
    let out = Command::new(bin())
        .args(["search", "--json", "--mode", mode, "--db", db.to_str().unwrap(), "--", query])
        .output()
        .unwrap();
    let wall = t.elapsed().as_secs_f64() * 1000.0;
    assert!(out.status.success(), "cairn search {query:?}: {}", String::from_utf8_lossy(&out.stderr));
    (serde_json::from_slice(&out.stdout).unwrap(), wall)
}

/// A `cairn mcp` client over its stdin and stdout (JSON-RPC, a message per line).
pub struct Mcp {
    child: Child,
    out: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    id: u64,
}

impl Mcp {
    /// Started on `db` and initialised.
    pub fn start(db: &Path) -> Self {
        let mut child = Command::new(bin())
            .args(["mcp", "--db", db.to_str().unwrap()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let mut mcp = Self { child, out, id: 0 };
        let info = serde_json::json!({"name": "bench", "version": "0"});
        mcp.call(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info}),
        );
        mcp.send(&serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, msg: &serde_json::Value) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// One call's result (an error answer fails the bench).
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        self.id += 1;
        self.send(&serde_json::json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}));
        loop {
            let line = self.out.next().expect("cairn mcp answers").unwrap();
            let Ok(reply) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            if reply["id"] == self.id {
                assert!(reply.get("error").is_none(), "mcp {method}: {}", reply["error"]);
                return reply["result"].clone();
            }
        }
    }

    /// A search tool call: the answer, and the call's wall time in ms.
    pub fn search(&mut self, query: &str, mode: &str) -> (serde_json::Value, f64) {
        let t = Instant::now();
        let r = self.call(
            "tools/call",
            serde_json::json!({"name": "search", "arguments": {"query": query, "mode": mode}}),
        );
        let wall = t.elapsed().as_secs_f64() * 1000.0;
        assert!(r["isError"] != true, "mcp search {query:?}: {r}");
        let text = r["content"][0]["text"].as_str().unwrap_or("{}");
        (serde_json::from_str(text).unwrap_or(serde_json::Value::Null), wall)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Close its stdin (it exits) and wait for it.
    pub fn close(mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}
