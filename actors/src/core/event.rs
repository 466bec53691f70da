//! Events: every step of the pipeline, as one serde-tagged value, written to the event log after
//! the step it describes has happened (an `page_indexed` only after its commit).
//!
//! Paths are vault-relative and time is logical (milliseconds since the pipeline started, on
//! tokio's clock, so a replay under paused time is reproducible); `system_started` records the
//! wall clock once per run for tools that need dates (`cairn stats`).

use serde::{Deserialize, Serialize};

pub(crate) fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A wall-clock time for people: `2026-12-03T13:45:46Z` (UTC).
pub fn utc(unix_ms: u64) -> String {
    jiff::Timestamp::from_millisecond(unix_ms as i64).map_or_else(
        |_| format!("{unix_ms} ms"),
        |t| t.round(jiff::Unit::Second).map_or_else(|_| t.to_string(), |t| t.to_string()),
    )
}

/// Wall-clock milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// The sequence that query telemetry is numbered in (not a source id: ids cannot start with `_`).
pub const QUERY_STREAM: &str = "_queries";
/// The sequence of events about the whole system.
pub const SYSTEM_STREAM: &str = "_system";

/// One logged event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Position in its stream (`source`), from 1, without gaps within one log.
    pub seq: u64,
    /// Logical time: milliseconds since the pipeline started.
    pub ts: u64,
    /// The source id, or [`QUERY_STREAM`] / [`SYSTEM_STREAM`].
    pub source: String,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EventKind {
    SystemStarted {
        unix_ms: u64,
        sources: Vec<String>,
    },
    /// A source's pipeline is up: `pages` are stored (`vectors_pending` of their chunks still
    /// without a vector), read into memory from a snapshot of its resident index or from its
    /// tables (`from_snapshot`), in `open_ms`; the catch-up scan follows.
    SourceStarted {
        pages: usize,
        #[serde(default)]
        vectors_pending: usize,
        #[serde(default)]
        from_snapshot: bool,
        #[serde(default)]
        open_ms: u64,
    },
    /// A catch-up or safety-net scan compared the folder with the index.
    Reconciled {
        reason: String,
        files: usize,
        changed: usize,
        removed: usize,
        /// Removals found and held (a `removals_held` says why).
        #[serde(default, skip_serializing_if = "is_zero")]
        held: usize,
    },
    /// The source's folder cannot be read: missing, empty while the index holds pages, another
    /// folder than the one indexed… Nothing is removed; the index answers as last seen, and
    /// `message` says what to do.
    SourceUnavailable {
        unavailable: cairn_ingest::Unavailable,
        message: String,
    },
    /// The folder can be read again (its catch-up came with it).
    SourceAvailable,
    /// A scan would remove most of the source's pages: the removals wait for a yes
    /// (`cairn reconcile ID --allow-removals`); the pages stay searchable.
    RemovalsHeld {
        held: cairn_ingest::HeldRemovals,
        message: String,
    },
    /// Folders below the root that a scan could not speak for (unreadable, or a mount point
    /// showing nothing): their pages are kept and answer as last seen. An empty list: every
    /// folder can be read again.
    FoldersUnavailable {
        folders: Vec<cairn_ingest::FolderUnavailable>,
        message: String,
    },
    FileChanged {
        path: String,
    },
    FileRemoved {
        path: String,
    },
    /// A rename, from path events or (`by_hash`) a removal and a creation of the same content.
    FileRenamed {
        from: String,
        to: String,
        by_hash: bool,
    },
    PageParsed {
        path: String,
        slug: String,
        chunks: usize,
    },
    /// Read and hashed: the content is what is stored, nothing to do.
    PageSkipped {
        path: String,
        slug: String,
    },
    /// The file could not be indexed; its last good version (if any) stays searchable.
    PageFailed {
        path: String,
        kind: String,
        reason: String,
    },
    /// Indexed with a problem (e.g. broken frontmatter: the body is indexed, the title is the
    /// file name).
    PageWarning {
        path: String,
        kind: String,
        reason: String,
    },
    /// Committed: searchable by name and keyword from table `version` on; `vectors_pending` of
    /// its chunks wait for the model (0: searchable by meaning too, else a `page_embedded`
    /// follows).
    PageIndexed {
        path: String,
        slug: String,
        chunks: usize,
        version: u64,
        #[serde(default)]
        vectors_pending: usize,
    },
    /// The last of a page's chunks got its vector: searchable by meaning from `version` on.
    PageEmbedded {
        slug: String,
        version: u64,
    },
    PageRemoved {
        slug: String,
        version: u64,
    },
    /// One commit of a source's writer: pages (names, text, the vectors already known), or
    /// vectors attached to chunks committed before (`pages` 0).
    Committed {
        pages: usize,
        removed: usize,
        chunks_embedded: usize,
        chunks_reused: usize,
        /// Chunks of the source still without a vector after this commit.
        #[serde(default)]
        chunks_pending: usize,
        /// Milliseconds spent in the embedding model (the floor a commit cannot go below).
        embed_ms: u64,
        /// The whole commit: vector look-up, embedding and writes.
        commit_ms: u64,
        version: u64,
    },
    /// The source's upkeep ran: versions older than the retention and stray files removed, and
    /// (`compacted`) its small fragments merged.
    Optimized {
        ms: u64,
        #[serde(default)]
        versions_removed: u64,
        #[serde(default)]
        bytes_removed: u64,
        /// Fragments compacted too (not only old versions removed).
        #[serde(default)]
        compacted: bool,
        /// The run went in steps, the writer's commits running between them: how many, and the
        /// longest (what an edit arriving meanwhile may have waited for): its work (`compact`,
        /// `finish`, `key_index`, `prune`, `chunk_file`, `snapshot`) and time.
        #[serde(default)]
        steps: u32,
        #[serde(default)]
        longest_step: String,
        #[serde(default)]
        longest_step_ms: u64,
    },
    /// A stage failed on infrastructure and will be retried after `retry_ms`.
    StageFailed {
        stage: String,
        reason: String,
        retry_ms: u64,
    },
    /// A commit waits: this process could not renew the writer lease in time (the store does
    /// not answer). What it holds (pages, vectors) is kept, and committed once the lease is
    /// renewed. Said once until the next commit lands.
    CommitHeld {
        reason: String,
    },
    /// Another writer holds the source now (it took the writer lease, or fenced the tables):
    /// this process commits nothing more to it, and what it had not committed is the new
    /// writer's catch-up. Not a failure, and nothing is retried.
    HandedOver {
        reason: String,
    },
    QueryAnswered(Box<QueryAnswered>),
    /// A flush asked for with this token is done: every event of the work it waited for came
    /// before this one (how `cairn index` knows which events are its run's).
    Flushed {
        token: u64,
    },
    SystemStopped {
        clean: bool,
    },
}

/// Telemetry of one answered query: enough to see the rank-1 score drift over days.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryAnswered {
    pub query: String,
    pub mode: String,
    pub results: usize,
    /// The rank-1 result, if any.
    pub top: Option<TopResult>,
    /// Candidates each source put into the union.
    pub candidates: std::collections::BTreeMap<String, usize>,
    pub degraded: Vec<String>,
    pub alias_collisions: usize,
    pub scoring_version: String,
    pub latency_ms: f64,
    /// Changes not yet searchable when it was answered (absent: unknown, no watcher ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_changes: Option<u64>,
    /// Wall-clock time of the answer (events from a one-shot `cairn search` have no pipeline
    /// clock to be placed on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unix_ms: Option<u64>,
}

/// The rank-1 result of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopResult {
    pub source: String,
    pub slug: String,
    /// The comparable base score before boosts (best-chunk cosine + keyword share).
    pub base_score: f32,
    pub score: f32,
    pub evidence: Vec<String>,
    pub create_safety: String,
}

impl EventKind {
    /// The event's name as written in the log (`page_indexed`, …).
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::SystemStarted { .. } => "system_started",
            EventKind::SourceStarted { .. } => "source_started",
            EventKind::Reconciled { .. } => "reconciled",
            EventKind::SourceUnavailable { .. } => "source_unavailable",
            EventKind::SourceAvailable => "source_available",
            EventKind::RemovalsHeld { .. } => "removals_held",
            EventKind::FoldersUnavailable { .. } => "folders_unavailable",
            EventKind::FileChanged { .. } => "file_changed",
            EventKind::FileRemoved { .. } => "file_removed",
            EventKind::FileRenamed { .. } => "file_renamed",
            EventKind::PageParsed { .. } => "page_parsed",
            EventKind::PageSkipped { .. } => "page_skipped",
            EventKind::PageFailed { .. } => "page_failed",
            EventKind::PageWarning { .. } => "page_warning",
            EventKind::PageIndexed { .. } => "page_indexed",
            EventKind::PageEmbedded { .. } => "page_embedded",
            EventKind::PageRemoved { .. } => "page_removed",
            EventKind::Committed { .. } => "committed",
            EventKind::Optimized { .. } => "optimized",
            EventKind::StageFailed { .. } => "stage_failed",
            EventKind::CommitHeld { .. } => "commit_held",
            EventKind::HandedOver { .. } => "handed_over",
            EventKind::QueryAnswered(_) => "query_answered",
            EventKind::Flushed { .. } => "flushed",
            EventKind::SystemStopped { .. } => "system_stopped",
        }
    }
}

impl std::fmt::Display for Event {
    /// One line for humans (`cairn watch` without `--json`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = &self.source;
        match &self.kind {
            EventKind::PageIndexed { path, chunks, .. } => write!(f, "{s}: indexed {path} ({chunks} chunks)"),
            EventKind::PageRemoved { slug, .. } => write!(f, "{s}: removed {slug}"),
            EventKind::PageFailed { path, reason, .. } => write!(f, "{s}: FAILED {path}: {reason}"),
            EventKind::PageWarning { path, reason, .. } => write!(f, "{s}: warning {path}: {reason}"),
            EventKind::FileRenamed { from, to, .. } => write!(f, "{s}: renamed {from} -> {to}"),
            EventKind::Reconciled { reason, files, changed, removed, held: 0 } => {
                write!(f, "{s}: {reason} scan: {files} files, {changed} to index, {removed} to remove")
            }
            EventKind::Reconciled { reason, files, changed, removed, held } => write!(
                f,
                "{s}: {reason} scan: {files} files, {changed} to index, {removed} to remove, {held} removals held"
            ),
            EventKind::SourceUnavailable { message, .. }
            | EventKind::RemovalsHeld { message, .. }
            | EventKind::FoldersUnavailable { message, .. } => {
                write!(f, "{message}")
            }
            EventKind::SourceAvailable => write!(f, "{s}: its folder is back; caught up"),
            EventKind::StageFailed { stage, reason, retry_ms } => {
                write!(f, "{s}: {stage} failed ({reason}); retrying in {retry_ms} ms")
            }
            EventKind::CommitHeld { reason } => write!(f, "{s}: commits wait ({reason})"),
            EventKind::HandedOver { reason } => write!(f, "{s}: handed over to another writer ({reason})"),
            EventKind::Committed {
                pages: 0, removed: 0, chunks_embedded, chunks_pending, version, ..
            } => write!(f, "{s}: {chunks_embedded} chunks embedded, {chunks_pending} to go (v{version})"),
            EventKind::Committed { pages, removed, chunks_pending, version, .. } => write!(
                f,
                "{s}: committed {pages} pages, {removed} removals; {chunks_pending} chunks wait for the model (v{version})"
            ),
            other => write!(f, "{s}: {}", other.name()),
        }
    }
}
