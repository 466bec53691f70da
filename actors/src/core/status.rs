//! What each source's pipeline is doing, for `status()`, freshness in search answers and `flush()`.
//! Shared by the stages of a source (a few counters behind one short-held lock, never held across
//! an await), read by the query actor.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// What a source's pipeline is doing (the word is the same in JSON and in text).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceState {
    /// Opening its tables.
    #[default]
    Starting,
    /// Comparing its folder with its tables.
    Scanning,
    /// Up to date with its folder, and following its changes.
    Watching,
    /// A stage failed; it is retried with backoff (`error` says what failed).
    Retrying,
    /// Its folder cannot be read now (`unavailable` says why); the index answers as last seen.
    Unavailable,
    /// The watch ended.
    Stopped,
    /// Held in the database, and not watched by this process.
    NotWatched,
    /// Its tables could not be opened (`error` says why).
    Failed,
    /// A reader's source, current with the writer's commits.
    Following,
    /// A reader's source, behind the writer's commits.
    Behind,
}

impl SourceState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Scanning => "scanning",
            Self::Watching => "watching",
            Self::Retrying => "retrying",
            Self::Unavailable => "unavailable",
            Self::Stopped => "stopped",
            Self::NotWatched => "not_watched",
            Self::Failed => "failed",
            Self::Following => "following",
            Self::Behind => "behind",
        }
    }
}

impl std::fmt::Display for SourceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One source's state, as `status()` reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SourceStatus {
    pub source: String,
    pub root: String,
    pub state: SourceState,
    /// Pages stored (searchable by name and keyword).
    pub pages: usize,
    /// Chunks stored, and how many of them still wait for a vector.
    #[serde(default)]
    pub chunks: usize,
    #[serde(default)]
    pub vectors_pending: usize,
    /// Chunks embedded per second lately, and the time to embed the rest at that rate.
    #[serde(default)]
    pub embed_rate: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_secs: Option<f64>,
    /// The chunks table's version after the last commit, and when it was made.
    #[serde(default)]
    pub version: u64,
    #[serde(default)]
    pub committed_unix_ms: u64,
    /// Changes seen and not yet searchable: file events waiting out the debounce, plus files
    /// handed to the parser/embedder/writer and not yet committed (or skipped, or failed).
    pub pending: u64,
    /// Age of the oldest pending change (0 when nothing is pending).
    pub lag_ms: u64,
    /// The last event of this source, and its logical time.
    pub last_event: Option<String>,
    pub last_event_ts: Option<u64>,
    /// Files that could not be indexed, with why (latest per path).
    pub failures: Vec<FileFailure>,
    /// The last infrastructure failure, while retrying; what is wrong and what to do, while
    /// unavailable.
    pub error: Option<String>,
    /// Why the folder cannot be read now: nothing is removed, the index answers as last seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<cairn_ingest::Unavailable>,
    /// Removals a scan found and holds until `cairn reconcile ID --allow-removals`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_removals: Option<cairn_ingest::HeldRemovals>,
    /// Folders below the root that cannot be read now: their pages are kept as last seen.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folders_unavailable: Vec<cairn_ingest::FolderUnavailable>,
    /// Notes that are cloud placeholders (their content not on this machine) at the last scan:
    /// not read, and kept as last indexed.
    #[serde(default, skip_serializing_if = "crate::core::event::is_zero")]
    pub placeholders: usize,
    /// The language its words are read in (an ISO 639-1 code, `cjk` or `other`), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

/// One line of counts, then why it is unavailable, what removals it holds, and what fails.
impl std::fmt::Display for SourceStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let eta = self.eta_secs.map_or(String::new(), |e| format!(", ETA {e:.0} s"));
        writeln!(
            f,
            "{}: {} ({}{}), {} pages, {} chunks, {} waiting for vectors ({:.1}/s{eta}), {} pending changes",
            self.source,
            self.state,
            self.root,
            self.language.as_ref().map_or(String::new(), |l| format!(", language {l}")),
            self.pages,
            self.chunks,
            self.vectors_pending,
            self.embed_rate,
            self.pending
        )?;
        if let Some(why) = self.error.as_ref().filter(|_| self.unavailable.is_some()) {
            writeln!(f, "  {why}")?;
        }
        if let Some(held) = &self.held_removals {
            writeln!(f, "  {}", held.describe(&self.source, &self.root))?;
        }
        for folder in &self.folders_unavailable {
            writeln!(f, "  {}", folder.describe(&self.source, &self.root))?;
        }
        if self.placeholders > 0 {
            writeln!(
                f,
                "  {} notes are cloud placeholders (not on this machine): kept as last indexed, read once whole",
                self.placeholders
            )?;
        }
        for failing in &self.failures {
            writeln!(f, "  failing {}: {}", failing.path, failing.reason)?;
        }
        Ok(())
    }
}

/// A file that could not be indexed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileFailure {
    pub path: String,
    pub kind: String,
    pub reason: String,
}

#[derive(Debug, Default)]
struct Entry {
    status: SourceStatus,
    debouncing: u64,
    in_flight: u64,
    pending_since: Option<Instant>,
    failures: BTreeMap<String, FileFailure>,
    /// Set while the folder cannot be read; it outranks whatever state the stages report.
    unavailable: Option<cairn_ingest::Unavailable>,
    /// Watched here, and its folder not compared with the index yet since it was opened (what
    /// changed while nothing watched it is not known, so no pending count can be given). Only
    /// a registered source waits: an entry made by another report (a page another machine
    /// found failing) is not watched here.
    uncompared: bool,
}

impl Entry {
    fn refresh(&mut self) {
        let pending = self.debouncing + self.in_flight;
        if pending == 0 {
            self.pending_since = None;
        } else if self.pending_since.is_none() {
            self.pending_since = Some(Instant::now());
        }
        self.status.pending = pending;
    }
}

/// The status of every source; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard {
    inner: Arc<Mutex<BTreeMap<String, Entry>>>,
}

impl StatusBoard {
    fn with<R>(&self, source: &str, f: impl FnOnce(&mut Entry) -> R) -> R {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let e = map.entry(source.to_string()).or_default();
        e.status.source = source.to_string();
        f(e)
    }

    pub fn register(&self, source: &str, root: &str) {
        self.with(source, |e| {
            e.status.root = root.into();
            e.status.state = SourceState::Starting;
            e.uncompared = true;
        });
    }

    /// The language `source`'s words are read in.
    pub fn set_language(&self, source: &str, lang: cairn_index::resident::Lang) {
        self.with(source, |e| e.status.language = Some(lang.code().to_string()));
    }

    /// A scan compared `source`'s folder with its index: its pending count now covers every
    /// change (the watcher's since).
    pub fn compared(&self, source: &str) {
        self.with(source, |e| e.uncompared = false);
    }

    /// Sources whose folder has not been compared with the index yet since they opened (and
    /// that are not unavailable, which says more).
    pub fn uncompared(&self) -> BTreeSet<String> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .filter(|(_, e)| e.uncompared && e.unavailable.is_none())
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Forget a source (it is no longer watched).
    pub fn remove(&self, source: &str) {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).remove(source);
    }

    pub fn set_state(&self, source: &str, state: SourceState, error: Option<String>) {
        self.with(source, |e| {
            e.status.state = state;
            e.status.error = error;
        });
    }

    /// Raw events waiting in the debouncer.
    pub fn set_debouncing(&self, source: &str, n: usize) {
        self.with(source, |e| {
            e.debouncing = n as u64;
            e.refresh();
        });
    }

    /// Files handed to the pipeline.
    pub fn add_in_flight(&self, source: &str, n: usize) {
        self.with(source, |e| {
            e.in_flight += n as u64;
            e.refresh();
        });
    }

    /// Files done with (committed, skipped or failed).
    pub fn done_in_flight(&self, source: &str, n: usize) {
        self.with(source, |e| {
            e.in_flight = e.in_flight.saturating_sub(n as u64);
            e.refresh();
        });
    }

    pub fn set_pages(&self, source: &str, pages: usize) {
        self.with(source, |e| e.status.pages = pages);
    }

    /// A commit of `source` made `version` (now, on this machine's clock).
    pub fn set_version(&self, source: &str, version: u64) {
        self.with(source, |e| {
            e.status.version = version;
            e.status.committed_unix_ms = crate::core::event::unix_ms();
        });
    }

    /// Chunks stored and waiting for vectors, and the recent embedding rate (chunks/s).
    pub fn set_vectors(&self, source: &str, chunks: usize, pending: usize, rate: f64) {
        self.with(source, |e| {
            e.status.chunks = chunks;
            e.status.vectors_pending = pending;
            e.status.embed_rate = rate;
            e.status.eta_secs = (pending > 0 && rate > 0.0).then(|| pending as f64 / rate);
        });
    }

    /// The last event of a registered source (system and query streams are not sources).
    pub fn event(&self, source: &str, name: &str, ts: u64) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = map.get_mut(source) {
            e.status.last_event = Some(name.into());
            e.status.last_event_ts = Some(ts);
        }
    }

    pub fn failure(&self, source: &str, f: FileFailure) {
        self.with(source, |e| {
            e.failures.insert(f.path.clone(), f);
        });
    }

    /// The file indexed fine now: forget its old failure.
    pub fn cleared(&self, source: &str, path: &str) {
        self.with(source, |e| {
            e.failures.remove(path);
        });
    }

    /// The folder cannot be read (`Some`), or can again (`None`).
    pub fn set_unavailable(&self, source: &str, why: Option<cairn_ingest::Unavailable>) {
        self.with(source, |e| e.unavailable = why);
    }

    /// Removals held (`Some`), or none any more.
    pub fn set_held(&self, source: &str, held: Option<cairn_ingest::HeldRemovals>) {
        self.with(source, |e| e.status.held_removals = held);
    }

    /// The folders below the root whose pages were kept unseen (none: every folder reads).
    pub fn set_folders_unavailable(&self, source: &str, folders: Vec<cairn_ingest::FolderUnavailable>) {
        self.with(source, |e| e.status.folders_unavailable = folders);
    }

    /// Notes found as cloud placeholders at the last scan.
    pub fn set_placeholders(&self, source: &str, n: usize) {
        self.with(source, |e| e.status.placeholders = n);
    }

    /// Why each unavailable source is, with what to do about it.
    pub fn unavailable(&self) -> BTreeMap<String, String> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .filter_map(|(id, e)| {
                e.unavailable.as_ref().map(|u| (id.clone(), u.describe(id, &e.status.root)))
            })
            .collect()
    }

    pub fn get(&self, source: &str) -> Option<SourceStatus> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(source).map(snapshot)
    }

    pub fn all(&self) -> Vec<SourceStatus> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.values().map(snapshot).collect()
    }
}

fn snapshot(e: &Entry) -> SourceStatus {
    let mut s = e.status.clone();
    s.lag_ms = e.pending_since.map_or(0, |t| t.elapsed().as_millis() as u64);
    s.failures = e.failures.values().cloned().collect();
    if let Some(why) = &e.unavailable {
        s.state = SourceState::Unavailable;
        s.error = Some(why.describe(&s.source, &s.root));
        s.unavailable = Some(why.clone());
    }
    s
}

/// This process's memory (read where the benchmarks without the actors read it too).
pub use cairn_index::memory::Memory;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_watched_source_gives_no_count_until_its_folder_is_compared_and_another_report_never_waits() {
        let board = StatusBoard::default();
        board.register("notes", "/vault");
        // A page another machine found failing, in a source not watched here.
        let failure = FileFailure { path: "a.md".into(), kind: "poisoned".into(), reason: "bad".into() };
        board.failure("elsewhere", failure);
        assert_eq!(board.uncompared(), BTreeSet::from(["notes".to_string()]));
        board.compared("notes");
        assert!(board.uncompared().is_empty());
        // Opened again (a restart of its writer): it waits for a comparison again.
        board.register("notes", "/vault");
        assert_eq!(board.uncompared(), BTreeSet::from(["notes".to_string()]));
    }
}
