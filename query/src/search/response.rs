//! What a search answers: results with their evidence and explanation, the sources' health,
//! who served it and as of when, and its text form.

use super::request::Mode;
use crate::layers::{CreateSafety, Evidence};

/// One arm's view of a page.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ArmRank {
    /// 1-based rank among this source's pages in this arm.
    pub rank: usize,
    pub score: f32,
}

/// The best chunk of a result.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResultChunk {
    pub text: String,
    pub heading_path: String,
    pub line_start: i32,
    pub line_end: i32,
    /// The section this chunk is in, as `get` reads it alone: `SOURCE:SLUG#ANCHOR` (the page's
    /// id when the chunk comes before any heading).
    #[serde(default)]
    pub section: String,
}

/// `--explain`: how the score came about.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Explain {
    pub keyword: Option<ArmRank>,
    pub vector: Option<ArmRank>,
    pub title: Option<ArmRank>,
    /// Reciprocal-rank fusion of the arms inside the source (decides the source's K slots).
    pub fused_in_source: f32,
    /// BM25 over the union of every source's candidates, normalised to 0..1.
    pub union_keyword: f32,
    /// The best chunk's cosine with the query moved by feedback, which the score uses in place
    /// of the cosine (absent when the query got no feedback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub feedback_cosine: Option<f32>,
    pub multipliers: Vec<(String, f32)>,
    pub why: String,
}

/// A name the vault taught a page, and where it was learnt.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LearntName {
    pub how: cairn_index::resident::Teaching,
    /// The pages that taught it, by slug (the first [`LearntName::SHOWN`]), and how many did.
    pub taught_by: Vec<String>,
    pub teachers: usize,
}

impl LearntName {
    pub const SHOWN: usize = 5;

    pub fn of(l: &cairn_index::resident::LearntPage) -> Self {
        Self {
            how: l.how,
            taught_by: l.taught_by.iter().take(Self::SHOWN).cloned().collect(),
            teachers: l.taught_by.len(),
        }
    }
}

/// `learnt as a short form from a, b and 3 more pages`.
impl std::fmt::Display for LearntName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match self.how {
            cairn_index::resident::Teaching::Acronym => "a short form its text defines",
            cairn_index::resident::Teaching::LinkText => "the display text of links to it",
        };
        write!(f, "the query is {how}, learnt from {}", self.taught_by.join(", "))?;
        match self.teachers.saturating_sub(self.taught_by.len()) {
            0 => Ok(()),
            more => write!(f, " and {more} more pages"),
        }
    }
}

/// One page in an answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SearchResult {
    pub source: String,
    pub slug: String,
    pub title: String,
    pub path: String,
    /// The ordering score (base score × boosts; exact matches on top).
    pub score: f32,
    /// cosine + 0.3 × union keyword score, before boosts: comparable across sources.
    pub base_score: f32,
    /// Raw cosine of the page's best chunk (absent when the query was not embedded).
    pub cosine: Option<f32>,
    pub evidence: Vec<Evidence>,
    pub create_safety: CreateSafety,
    pub chunk: Option<ResultChunk>,
    pub boosts: Vec<String>,
    /// How the vault taught the page the query, when the query is a name it learnt (evidence
    /// `learnt_name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learnt: Option<LearntName>,
    /// The query's phrase that names the page, when the page is the query's subject (evidence
    /// `subject_name`): it ranks above pages that merely mention that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The page's file changed or vanished since it was indexed (looked at when answering).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<Stale>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub explain: Option<Explain>,
}

/// Whether a source answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Ok,
    Failed,
}

/// How one source took part.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceHealth {
    pub source: String,
    pub status: Health,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Pages this source put into the union.
    pub candidates: usize,
    /// Pooling left fewer pages than the source's slots although the arm's bound was reached.
    pub pool_underfilled: bool,
    /// Changes seen by the watcher and not yet searchable (absent when no watcher runs in this
    /// process, e.g. a one-shot `cairn search`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<u64>,
    /// Age of the oldest of those changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_ms: Option<u64>,
    /// Chunks of this source not embedded yet (found by name and keyword, not by meaning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vectors_pending: Option<usize>,
    /// The commit this source's part of the answer reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub as_of: Option<AsOf>,
}

/// How a result's file differs from what was indexed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stale {
    /// The file holds other content now.
    Modified,
    /// The file is gone.
    Deleted,
    /// The source's folder cannot be read now (unmounted, empty, another folder…): the page is
    /// as it was last indexed, and cannot be checked.
    SourceUnavailable,
    /// The file is a cloud placeholder (its content is not on this machine; reading it would
    /// download it): the page is as last indexed, and cannot be checked.
    Placeholder,
}

/// Mark each result whose file changed (`look` says how); a stale result is never `exists`: a
/// deleted page is `unknown`, a modified one (or one whose folder cannot be read) `probable`.
pub fn mark_stale(resp: &mut SearchResponse, look: impl Fn(&SearchResult) -> Option<Stale>) {
    let (mut any, mut placeholders) = (false, false);
    for r in &mut resp.results {
        r.stale = look(r);
        let cap = match r.stale {
            Some(Stale::Deleted) => CreateSafety::Unknown,
            Some(Stale::Modified | Stale::SourceUnavailable | Stale::Placeholder) => CreateSafety::Probable,
            None => continue,
        };
        // An unavailable source's own note says why (see the freshness of the answer), and a
        // placeholder's below.
        any |= matches!(r.stale, Some(Stale::Modified | Stale::Deleted));
        placeholders |= r.stale == Some(Stale::Placeholder);
        if r.create_safety < cap {
            r.create_safety = cap;
        }
    }
    if any {
        resp.notes.push(
            "some results' files changed or vanished since they were indexed (`stale`); they are not evidence that the page exists as indexed".into(),
        );
    }
    if placeholders {
        resp.notes.push(
            "some results' files are cloud placeholders (`stale: placeholder`): their content is not on this machine, so they are answered as last indexed and not read (that would download them)".into(),
        );
    }
}

/// Which process answered, and as what.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServedBy {
    pub pid: u32,
    pub role: Role,
    /// The process that writes the database (on an object store, the holder of its writer lease,
    /// on whichever machine), when it is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<Writer>,
}

impl ServedBy {
    /// This process, as `role`.
    pub fn here(role: Role) -> Self {
        Self { pid: std::process::id(), role, writer: None }
    }
}

/// Who writes a database: the process holding its lock or lease.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Writer {
    pub host: String,
    pub pid: u32,
    /// What the process is (`watch`, `mcp`…).
    pub purpose: String,
    /// Since when it writes (its own clock).
    pub since_unix_ms: u64,
    /// The lock file it holds on its machine (a process that holds that lock now knows this
    /// writer is gone).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub lock: String,
    /// Its machine, boot and pid namespace (opaque): with the lock and a pid no longer running
    /// there, what proves a holder gone before its TTL.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub machine: String,
}

impl std::fmt::Display for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} (cairn {}) on {}", self.pid, self.purpose, self.host)
    }
}

/// The commit an answer's part reflects: a source's table version and its commit time (the
/// writer's clock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AsOf {
    pub version: u64,
    pub committed_unix_ms: u64,
}

/// What a process is to its database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Holds the database's lock: runs the pipeline, the model and the indexes.
    Owner,
    /// Asks the owner over its socket.
    Client,
    /// No owner runs: read the tables itself, read-only.
    Reader,
}

/// Several pages claim one name.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AliasCollision {
    pub name: String,
    pub pages: Vec<String>,
}

/// An answer.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SearchResponse {
    pub query: String,
    pub mode: Mode,
    pub results: Vec<SearchResult>,
    pub sources: Vec<SourceHealth>,
    /// Stages that did not run: `embed_unavailable`, `source_failed:<id>`.
    pub degraded: Vec<String>,
    pub alias_collisions: Vec<AliasCollision>,
    pub scoring_version: String,
    pub latency_ms: f64,
    /// Changes not yet searchable, over the searched sources (absent when unknown). While it is
    /// above 0, an answer without an `exists` result is not proof that no page exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_changes: Option<u64>,
    /// Chunks not embedded yet over the searched sources: while above 0, a page can be missed
    /// by meaning (it is still found by its name and words).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vectors_pending: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<ServedBy>,
    pub notes: Vec<String>,
}

impl SearchResponse {
    /// An answer with nothing searched (every source it names could not be opened): the caller
    /// says why in `degraded` and `notes`.
    pub fn empty(req: &crate::SearchRequest) -> Self {
        Self {
            query: req.query.clone(),
            mode: req.mode,
            results: Vec::new(),
            sources: Vec::new(),
            degraded: Vec::new(),
            alias_collisions: Vec::new(),
            scoring_version: crate::layers::SCORING_VERSION.to_string(),
            latency_ms: 0.0,
            pending_changes: None,
            vectors_pending: None,
            served_by: None,
            notes: Vec::new(),
        }
    }
}

/// The results as text, one line each with its best chunk (what `cairn search` prints; the
/// degraded stages and notes are the caller's to say, on stderr).
impl std::fmt::Display for SearchResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, r) in self.results.iter().enumerate() {
            let ev: Vec<String> = r.evidence.iter().map(ToString::to_string).collect();
            writeln!(
                f,
                "{:>2}. {}:{}  {}  score={:.3} cosine={} [{}] create_safety={}",
                i + 1,
                r.source,
                r.slug,
                r.title,
                r.score,
                r.cosine.map_or("-".into(), |c| format!("{c:.3}")),
                ev.join(","),
                r.create_safety
            )?;
            if let Some(c) = &r.chunk {
                let line = c.text.lines().next().unwrap_or_default();
                let line: String = line.chars().take(100).collect();
                writeln!(f, "      {} (lines {}-{}): {line}", c.heading_path, c.line_start, c.line_end)?;
            }
            if let Some(l) = &r.learnt {
                writeln!(f, "      {l}")?;
            }
            if let Some(x) = &r.explain {
                writeln!(f, "      {}", x.why)?;
            }
        }
        if self.results.is_empty() {
            writeln!(f, "no results")?;
        }
        Ok(())
    }
}

/// Each searched source's chunks without a vector (`lookup`), and the note an agent must not
/// miss while there are any and no result certainly exists.
pub fn note_vectors_pending(resp: &mut SearchResponse, lookup: impl Fn(&str) -> Option<usize>) {
    let mut total = 0;
    let mut waiting = Vec::new();
    for s in &mut resp.sources {
        if let Some(n) = lookup(&s.source) {
            s.vectors_pending = Some(n);
            total += n;
            if n > 0 {
                waiting.push(format!("{} ({n})", s.source));
            }
        }
    }
    resp.vectors_pending = Some(total);
    if total > 0 {
        let exists = resp.results.iter().any(|r| r.create_safety == CreateSafety::Exists);
        resp.notes.push(format!(
            "chunks not embedded yet in {}: pages are found by name and keyword, not yet by meaning{}",
            waiting.join(", "),
            if exists { "" } else { "; this answer is not proof that no such page exists" }
        ));
    }
}
