//! Helpers shared by the integration tests.

use cairn_actors::core::event::{Event, EventKind};
use cairn_index::{PageRecord, SourceStore};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Write a file, creating its folders.
pub fn write(root: &std::path::Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Three notes (a venue with an alias, owls, tides) in `root`/vault, indexed with the real model
/// into `root`/db as source `notes`; the vault and the database.
pub async fn three_notes(root: &std::path::Path) -> (PathBuf, PathBuf) {
    let (vault, db) = (root.join("vault"), root.join("db"));
    write(
        &vault,
        "venues/amphitheater.md",
        "---\ntitle: Indoor Greek Amphitheater\naliases: [Hall of Light]\n---\n\nFour hundred seats under a glass roof.\n",
    );
    write(&vault, "owls.md", "# Owls\n\nBarn owls hunt by sound in complete darkness.\n");
    write(&vault, "tides.md", "# Tides\n\nSpring tides follow the new and the full moon.\n");
    let spec = cairn::SourceSpec { id: "notes".into(), root: vault.clone() };
    cairn::index(cairn::Config::new(db.to_str().unwrap(), vec![spec.config()]), false, false).await.unwrap();
    (vault, db)
}

pub fn fixture_dir(rel: &str) -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("run by cargo")).join("fixtures").join(rel)
}

/// An actix system on a current-thread runtime with paused time: timers fire as soon as the
/// runtime is idle, so nothing in a test sleeps.
pub fn actix_paused() -> actix::SystemRunner {
    actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap()
    })
}

/// The tables hold no orphan and no missing chunk: every chunk belongs to a stored page and
/// every page has exactly its `chunk_count` chunks, ordinals 0…n-1. Returns the pages.
pub async fn check_tables(store: &SourceStore) -> Result<Vec<PageRecord>, String> {
    let pages = store.all_pages().await.map_err(|e| e.to_string())?;
    let chunks = store.chunk_keys().await.map_err(|e| e.to_string())?;
    let mut by_page: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (slug, ord, _) in &chunks {
        by_page.entry(slug).or_default().push(*ord);
    }
    let slugs: BTreeSet<&str> = pages.iter().map(|p| p.slug.as_str()).collect();
    if let Some(orphan) = by_page.keys().find(|s| !slugs.contains(*s)) {
        return Err(format!("chunks of `{orphan}`, which has no page row"));
    }
    for p in &pages {
        let want: Vec<i32> = (0..p.chunk_count).collect();
        let have = by_page.get(p.slug.as_str()).cloned().unwrap_or_default();
        if have != want {
            return Err(format!("page `{}` has chunk ordinals {have:?}, want {want:?}", p.slug));
        }
    }
    Ok(pages)
}

/// The events that say what happened to which file, as sorted unique lines (the order of events
/// of different files and the batching of commits depend on timing; these do not).
pub fn normalized_events(events: &[Event]) -> Vec<String> {
    let set: BTreeSet<String> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::FileChanged { path } => Some(format!("file_changed {path}")),
            EventKind::FileRemoved { path } => Some(format!("file_removed {path}")),
            EventKind::FileRenamed { from, to, by_hash } => {
                Some(format!("file_renamed {from} -> {to}{}", if *by_hash { " (by hash)" } else { "" }))
            }
            EventKind::PageFailed { path, kind, .. } => Some(format!("page_failed {path} ({kind})")),
            EventKind::PageWarning { path, kind, .. } => Some(format!("page_warning {path} ({kind})")),
            EventKind::PageIndexed { slug, .. } => Some(format!("page_indexed {slug}")),
            EventKind::PageRemoved { slug, .. } => Some(format!("page_removed {slug}")),
            _ => None,
        })
        .collect();
    set.into_iter().collect()
}

/// Events matching each of `preds`, in whatever order they come (the halves of a move can
/// settle in one tick or in two, and the log tells them in that order). Same deadline as
/// [`next_matching`].
pub async fn all_matching(
    events: &mut futures::stream::BoxStream<'static, std::sync::Arc<Event>>,
    preds: &[&dyn Fn(&Event) -> bool],
) {
    let mut seen = vec![false; preds.len()];
    while seen.iter().any(|s| !s) {
        let e = next_matching(events, |e| preds.iter().zip(&seen).any(|(p, s)| !s && p(e))).await;
        for (p, s) in preds.iter().zip(seen.iter_mut()) {
            *s |= p(&e);
        }
    }
}

/// The next event matching `pred`. Waits for the event itself; the deadline only turns a hang
/// into a failure with a message.
pub async fn next_matching(
    events: &mut futures::stream::BoxStream<'static, std::sync::Arc<Event>>,
    pred: impl Fn(&Event) -> bool,
) -> std::sync::Arc<Event> {
    use futures::StreamExt;
    let found = tokio::time::timeout(std::time::Duration::from_secs(120), async {
        while let Some(e) = events.next().await {
            if pred(&e) {
                return Some(e);
            }
        }
        None
    })
    .await;
    match found {
        Ok(Some(e)) => e,
        Ok(None) => panic!("the event stream ended before the awaited event"),
        Err(_) => panic!("the awaited event did not come within 120 s"),
    }
}

/// The `cairn` binary under test.
pub fn cairn_bin() -> PathBuf {
    // `CAIRN_BIN`: a copy of the binary, so a long run goes on while the tree is rebuilt.
    std::env::var_os("CAIRN_BIN").map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_cairn")), PathBuf::from)
}

/// `cairn search --json` in a child process (extra arguments after the query), its answer.
pub fn search_json(db: &std::path::Path, query: &str, extra: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(cairn_bin())
        .args(["search", "--json", "--db", db.to_str().unwrap(), query])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "cairn search {query:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The JSON events a child `cairn watch --json` prints, read on a thread of their own.
#[derive(Debug)]
pub struct EventReader {
    rx: std::sync::mpsc::Receiver<String>,
}

/// The lines `from` gives, sent on as they come by a thread of their own.
fn lines_of(from: impl std::io::Read + Send + 'static) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(from).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

impl EventReader {
    pub fn new(stdout: impl std::io::Read + Send + 'static) -> Self {
        Self { rx: lines_of(stdout) }
    }

    /// Events until one makes `done` true (it sees every event, in order). Waits for the
    /// events themselves; the deadline only turns a hang into a failure with a message.
    pub fn wait_for(
        &mut self,
        what: &str,
        mut done: impl FnMut(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left).map(|l| serde_json::from_str::<serde_json::Value>(&l)) {
                Ok(Ok(e)) if done(&e) => return e,
                Ok(_) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("{what}: not seen within 600 s"),
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("{what}: the process ended first")
                }
            }
        }
    }
}

/// Copy a folder tree.
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for e in walkdir::WalkDir::new(from) {
        let e = e.unwrap();
        let target = to.join(e.path().strip_prefix(from).unwrap());
        if e.file_type().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The lines a child process writes (its log on stderr), read on a thread of their own.
pub struct LineReader {
    rx: std::sync::mpsc::Receiver<String>,
    pub seen: Vec<String>,
}

impl LineReader {
    pub fn new(from: impl std::io::Read + Send + 'static) -> Self {
        Self { rx: lines_of(from), seen: Vec::new() }
    }

    /// Everything said so far, and whatever else comes within a second (for a failure's message).
    pub fn said(&mut self) -> String {
        while let Ok(line) = self.rx.recv_timeout(std::time::Duration::from_secs(1)) {
            self.seen.push(line);
        }
        self.seen.join("\n")
    }

    /// Lines until one contains `text` (the deadline only turns a hang into a failure).
    pub fn wait_for(&mut self, text: &str) -> String {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(text) {
                        return line;
                    }
                }
                Err(e) => panic!("`{text}` not said ({e}); said:\n{}", self.seen.join("\n")),
            }
        }
    }
}

/// `cmd` in a private mount namespace where `setup` (a shell line, run as root) ran first.
pub(crate) fn hidden(setup: &str, cmd: &Command) -> Command {
    let mut c = Command::new("unshare");
    c.args(["-m", "sh", "-c", &format!("{setup} && exec \"$0\" \"$@\"")])
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c
}

/// Lines of a child's stderr, read on a thread of their own; `wait_for` a line containing a text.
pub struct Log {
    rx: std::sync::mpsc::Receiver<String>,
    all: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Log {
    pub fn of(stderr: impl std::io::Read + Send + 'static) -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        let all = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = all.clone();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
                keep.lock().unwrap().push(line.clone());
                let _ = tx.send(line);
            }
        });
        Self { rx, all }
    }

    pub fn wait_for(&self, text: &str) -> Instant {
        self.first_of(&[text]);
        Instant::now()
    }

    pub fn text(&self) -> String {
        self.all.lock().unwrap().join("\n")
    }

    /// The first line that holds one of `texts`.
    pub fn first_of(&self, texts: &[&str]) -> String {
        loop {
            match self.rx.recv_timeout(Duration::from_secs(600)) {
                Ok(l) if texts.iter().any(|t| l.contains(t)) => return l,
                Ok(_) => {}
                Err(e) => panic!("none of {texts:?} came in the log ({e}):\n{}", self.text()),
            }
        }
    }

    /// Whether `text` comes in the log within `d` (a test that something does not happen).
    pub fn said_within(&self, text: &str, d: Duration) -> bool {
        let until = Instant::now() + d;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match self.rx.recv_timeout(left) {
                Ok(l) if l.contains(text) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    }
}
