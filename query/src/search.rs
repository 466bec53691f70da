//! The query pipeline: per-source gather (every source gets its own K slots), fusion within
//! each source, a union ordered by scores comparable across sources, the title-phrase boost,
//! exact lookup and alias hop, and evidence.

use crate::error::{QueryError, Result};
use crate::filter::{Filter, PageFilter};
use crate::layers::{
    self, CreateSafety, Evidence, ExactKind, HIGH_VECTOR_FLOOR, KEYWORD_WEIGHT, RELEVANCE_FLOOR,
    SCORING_VERSION, Signals, TEMPLATE_FACTOR, TEMPLATE_PAGES, TITLE_PHRASE_BOOST, evidence, max_pool, rrf,
    title_phrase_match, union_bm25,
};
use crate::reader::SourceReader;
use cairn_index::{ChunkHit, Embedder, PageRecord};
use cairn_ingest::{MAX_NAME_CHARS, normalize_name, slugify_id, tokens};
use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

/// Longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;
/// Most results one call returns.
pub const MAX_LIMIT: usize = 100;
/// Bound on the chunk pool one arm may widen to.
const MAX_POOL: usize = 2000;

/// How much work a call does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Keyword, title and alias arms; no embedding.
    Fast,
    /// All arms.
    #[default]
    Balanced,
    /// All arms with larger per-source pools.
    Thorough,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::layers::words(self, f)
    }
}

impl std::str::FromStr for Mode {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "fast" => Ok(Mode::Fast),
            "balanced" => Ok(Mode::Balanced),
            "thorough" => Ok(Mode::Thorough),
            other => Err(QueryError::BadMode(other.into())),
        }
    }
}

/// A search call.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SearchRequest {
    pub query: String,
    /// Sources to search (empty: all).
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default = "default_limit")]
    pub limit: usize,
    #[serde(default)]
    pub explain: bool,
    /// Restrictions: tags, folders, types, dates.
    #[serde(default, skip_serializing_if = "Filter::is_empty")]
    pub filter: Filter,
    /// Evaluation baseline only: one candidate pool of K pages for all sources together (each
    /// arm ranked by its raw scores across sources, fused, cut to K), as a single shared index
    /// would do: the failure per-source gather exists to prevent.
    #[serde(default)]
    pub pooled_baseline: bool,
}

fn default_limit() -> usize {
    10
}

impl SearchRequest {
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            sources: vec![],
            mode: Mode::Balanced,
            limit: 10,
            explain: false,
            filter: Filter::default(),
            pooled_baseline: false,
        }
    }
}

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
    pub multipliers: Vec<(String, f32)>,
    pub why: String,
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
}

/// Mark each result whose file changed (`look` says how); a stale result is never `exists`: a
/// deleted page is `unknown`, a modified one (or one whose folder cannot be read) `probable`.
pub fn mark_stale(resp: &mut SearchResponse, look: impl Fn(&SearchResult) -> Option<Stale>) {
    let mut any = false;
    for r in &mut resp.results {
        r.stale = look(r);
        let cap = match r.stale {
            Some(Stale::Deleted) => CreateSafety::Unknown,
            Some(Stale::Modified | Stale::SourceUnavailable) => CreateSafety::Probable,
            None => continue,
        };
        // An unavailable source's own note says why (see the freshness of the answer).
        any |= r.stale != Some(Stale::SourceUnavailable);
        if r.create_safety < cap {
            r.create_safety = cap;
        }
    }
    if any {
        resp.notes.push(
            "some results' files changed or vanished since they were indexed (`stale`); they are not evidence that the page exists as indexed".into(),
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

/// A page in the union, with everything the later layers look at.
#[derive(Debug, Clone)]
struct Candidate {
    source: String,
    record: Option<PageRecord>,
    slug: String,
    keyword: Option<(ArmRank, ChunkHit)>,
    vector: Option<(ArmRank, ChunkHit)>,
    title: Option<ArmRank>,
    fused: f32,
    exact: Option<ExactKind>,
}

struct Gathered {
    candidates: Vec<Candidate>,
    underfilled: bool,
}

/// An arm's pages, widening the chunk pool (bounded) while pooling leaves fewer than `k`.
async fn pooled_arm<F, Fut>(k: usize, pool: usize, mut fetch: F) -> cairn_index::Result<(Vec<ChunkHit>, bool)>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = cairn_index::Result<Vec<ChunkHit>>>,
{
    let mut size = pool;
    loop {
        let hits = fetch(size).await?;
        let full = hits.len() >= size;
        let pages = max_pool(&hits);
        if pages.len() >= k || !full {
            return Ok((pages, false));
        }
        if size >= MAX_POOL {
            return Ok((pages, true));
        }
        size = (size * 4).min(MAX_POOL);
    }
}

fn arm_ranks(pages: &[ChunkHit]) -> HashMap<&str, (ArmRank, &ChunkHit)> {
    pages
        .iter()
        .enumerate()
        .map(|(i, h)| (h.slug.as_str(), (ArmRank { rank: i + 1, score: h.score }, h)))
        .collect()
}

/// One source's candidates: each arm max-pooled to pages before any cut, fused by RRF, the
/// top `k` kept, each with its exact best-chunk cosine and its page record.
async fn gather_source<R: SourceReader>(
    r: &R,
    text: &str,
    qvec: Option<&[f32]>,
    k: usize,
    filter: Option<&PageFilter>,
) -> cairn_index::Result<Gathered> {
    let pool = k * 4;
    // A filter restricts every arm before its cut: the source's slots go to pages that pass.
    let allowed = match filter {
        Some(f) => Some(r.allowed(f).await?),
        None => None,
    };
    let allow = allowed.as_ref();
    let kw = async {
        if text.is_empty() {
            Ok((Vec::new(), false))
        } else {
            pooled_arm(k, pool, |n| r.keyword(text, n, allow)).await
        }
    };
    let vec = async {
        match qvec {
            Some(v) => pooled_arm(k, pool, |n| r.vector(v, n, allow)).await,
            None => Ok((Vec::new(), false)),
        }
    };
    let titles = async { if text.is_empty() { Ok(Vec::new()) } else { r.titles(text, k, allow).await } };
    let (kw, vec, titles) = futures::join!(kw, vec, titles);
    let ((kw, kw_under), (vec, vec_under), titles) = (kw?, vec?, titles?);

    let rankings = vec![
        kw.iter().map(|h| h.slug.as_str()).collect::<Vec<_>>(),
        vec.iter().map(|h| h.slug.as_str()).collect(),
        titles.iter().map(|p| p.slug.as_str()).collect(),
    ];
    let fused = rrf(&rankings);
    let mut slugs: Vec<(&str, f32)> = fused.iter().map(|(s, f)| (*s, *f)).collect();
    slugs.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    slugs.truncate(k);

    let (kw_ranks, vec_ranks) = (arm_ranks(&kw), arm_ranks(&vec));
    let title_ranks: HashMap<&str, ArmRank> = titles
        .iter()
        .enumerate()
        .map(|(i, p)| (p.slug.as_str(), ArmRank { rank: i + 1, score: p.score }))
        .collect();
    let mut candidates: Vec<Candidate> = slugs
        .iter()
        .map(|(slug, f)| Candidate {
            source: r.id().to_string(),
            record: None,
            slug: slug.to_string(),
            keyword: kw_ranks.get(slug).map(|(a, h)| (*a, (*h).clone())),
            vector: vec_ranks.get(slug).map(|(a, h)| (*a, (*h).clone())),
            title: title_ranks.get(slug).copied(),
            fused: *f,
            exact: None,
        })
        .collect();
    complete(r, qvec, &mut candidates).await?;
    Ok(Gathered { candidates, underfilled: kw_under || vec_under })
}

/// Give every candidate its page record and, when the query was embedded, its best chunk by
/// cosine (candidates found only by keyword or title get it from a restricted vector search).
async fn complete<R: SourceReader>(
    r: &R,
    qvec: Option<&[f32]>,
    candidates: &mut [Candidate],
) -> cairn_index::Result<()> {
    let slugs: Vec<&str> = candidates.iter().map(|c| c.slug.as_str()).collect();
    let missing: Vec<&str> =
        candidates.iter().filter(|c| c.vector.is_none()).map(|c| c.slug.as_str()).collect();
    // Independent reads: one round trip, not two.
    let within = async {
        match qvec {
            Some(v) if !missing.is_empty() => {
                r.vector_within(v, &missing, MAX_POOL).await.map(|h| max_pool(&h))
            }
            _ => Ok(Vec::new()),
        }
    };
    let (records, within) = futures::join!(r.pages(&slugs), within);
    let (records, within) = (records?, within?);
    let mut records: HashMap<String, PageRecord> = records.into_iter().map(|p| (p.slug.clone(), p)).collect();
    for c in candidates.iter_mut() {
        c.record = records.remove(&c.slug);
        if c.vector.is_none()
            && let Some(h) = within.iter().find(|h| h.slug == c.slug)
        {
            // Not ranked by the arm itself (rank 0 marks "scored, not retrieved").
            c.vector = Some((ArmRank { rank: 0, score: h.score }, h.clone()));
        }
    }
    Ok(())
}

/// The baseline: rank each arm across all sources by its raw score, fuse, keep K in all.
fn pool_globally(union: Vec<Candidate>, k: usize) -> Vec<Candidate> {
    let key = |c: &Candidate| format!("{}\u{0}{}", c.source, c.slug);
    let ranking = |score: &dyn Fn(&Candidate) -> Option<f32>| {
        let mut v: Vec<(String, f32)> = union.iter().filter_map(|c| Some((key(c), score(c)?))).collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v.into_iter().map(|(k, _)| k).collect::<Vec<_>>()
    };
    let kw = ranking(&|c| c.keyword.as_ref().map(|(a, _)| a.score));
    let vec = ranking(&|c| c.vector.as_ref().filter(|(a, _)| a.rank > 0).map(|(a, _)| a.score));
    let title = ranking(&|c| c.title.map(|a| a.score));
    let rankings: Vec<Vec<&str>> =
        [&kw, &vec, &title].iter().map(|r| r.iter().map(String::as_str).collect()).collect();
    let fused = rrf(&rankings);
    let mut scored: Vec<(f32, Candidate)> =
        union.iter().map(|c| (fused.get(key(c).as_str()).copied().unwrap_or(0.0), c.clone())).collect();
    scored
        .sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.source.cmp(&b.1.source)).then(a.1.slug.cmp(&b.1.slug)));
    scored.into_iter().take(k).map(|(_, c)| c).collect()
}

/// Exact lookup and alias hop: pages whose slug, title or alias equals the normalised query.
async fn exact_pages<R: SourceReader>(readers: &[&R], query: &str) -> Vec<(String, PageRecord, ExactKind)> {
    // Names are clipped to MAX_NAME_CHARS when indexed; a longer query names nothing.
    if query.trim().chars().count() > MAX_NAME_CHARS + 1 {
        return Vec::new();
    }
    let norm = normalize_name(query);
    // The query as a page id ("Data Platform" → `data-platform`), only when slugifying changes
    // nothing but case and separators: "C++" and "C#" must not name the page `c`.
    let slug_safe = norm.chars().all(|c| c.is_alphanumeric() || c.is_whitespace() || "-_/.".contains(c));
    let slug = slugify_id(query).filter(|_| slug_safe);
    let mut names = vec![norm.clone()];
    if let Some(s) = slug.as_ref().filter(|s| **s != norm) {
        names.push(s.clone());
    }
    let lookups = readers.iter().map(|r| {
        let names = names.clone();
        async move {
            let mut found = Vec::new();
            for n in &names {
                if let Ok(pages) = r.alias(n).await {
                    found.extend(pages.into_iter().map(|p| (r.id().to_string(), p)));
                }
            }
            found
        }
    });
    let mut out: Vec<(String, PageRecord, ExactKind)> = Vec::new();
    for (source, page) in futures::future::join_all(lookups).await.into_iter().flatten() {
        if out.iter().any(|(s, p, _)| *s == source && p.slug == page.slug) {
            continue;
        }
        let kind = if normalize_name(&page.title) == norm {
            ExactKind::Title
        } else if Some(&page.slug) == slug.as_ref() || page.slug == norm {
            ExactKind::Slug
        } else if normalize_name(&cairn_index::resident::file_name(&page.path)) == norm {
            ExactKind::FileName
        } else {
            ExactKind::Alias
        };
        out.push((source, page, kind));
    }
    // A name written exactly as the query (case included) comes before one equal only after
    // folding: "AE" is the alias of Application Executive before it is the title `ae`.
    let as_written = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let query_written = as_written(query);
    let case_exact =
        |p: &PageRecord| std::iter::once(&p.title).chain(&p.aliases).any(|n| as_written(n) == query_written);
    out.sort_by(|a, b| {
        (!case_exact(&a.1))
            .cmp(&!case_exact(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.0.cmp(&b.0))
            .then(a.1.slug.cmp(&b.1.slug))
    });
    out
}

fn validate(req: &SearchRequest) -> Result<()> {
    if req.query.trim().is_empty() {
        return Err(QueryError::EmptyQuery);
    }
    if req.query.len() > MAX_QUERY_BYTES {
        return Err(QueryError::QueryTooLong { bytes: req.query.len(), max: MAX_QUERY_BYTES });
    }
    if req.limit == 0 {
        return Err(QueryError::BadLimit);
    }
    Ok(())
}

/// Answer a request over the given sources: the named stages below, in order (gather with the
/// exact lookup beside it, inject exact names, relevance floor, union scoring with its
/// multipliers and evidence, order).
pub async fn search<R: SourceReader>(
    all: &[&R],
    embedder: Option<&dyn Embedder>,
    req: &SearchRequest,
) -> Result<SearchResponse> {
    let started = Instant::now();
    validate(req)?;
    let mut notes = Vec::new();
    let readers = select_readers(all, &req.sources)?;
    let limit = if req.limit > MAX_LIMIT {
        notes.push(format!("limit {} lowered to {MAX_LIMIT}", req.limit));
        MAX_LIMIT
    } else {
        req.limit
    };
    let k = match req.mode {
        Mode::Thorough => limit.max(10) * 3,
        _ => limit.max(10),
    };
    let text = tokens(&req.query).join(" ");
    let mut degraded = Vec::new();
    let qvec = embed_query(req, embedder, &mut degraded, &mut notes);
    let filter = req.filter.compile()?;

    // Gather: every source's own K slots; the exact lookup does not depend on the arms and runs
    // alongside.
    let (gathered, exact) = futures::join!(
        futures::future::join_all(readers.iter().map(|r| gather_source(
            *r,
            &text,
            qvec.as_deref(),
            k,
            filter.as_ref()
        ))),
        exact_pages(&readers, &req.query)
    );
    // A page named by the query but outside the filter is not injected.
    let exact: Vec<(String, PageRecord, ExactKind)> =
        exact.into_iter().filter(|(_, p, _)| filter.as_ref().is_none_or(|f| f.matches(p))).collect();
    let (mut union, statuses) = merge_sources(&readers, gathered, &mut degraded)?;
    if req.pooled_baseline {
        union = pool_globally(union, k);
    }
    let collisions = alias_collisions(&req.query, &exact);
    inject_exact(&readers, qvec.as_deref(), &mut union, &exact).await;
    relevance_floor(&mut union);
    let results = order(score_union(req, union), &exact, limit);
    Ok(SearchResponse {
        query: req.query.clone(),
        mode: req.mode,
        results,
        sources: statuses,
        degraded,
        alias_collisions: collisions,
        scoring_version: SCORING_VERSION.to_string(),
        latency_ms: started.elapsed().as_secs_f64() * 1000.0,
        pending_changes: None,
        vectors_pending: None,
        served_by: None,
        notes,
    })
}

/// The sources a request names (all when it names none); a name no source has is an error.
fn select_readers<'a, R: SourceReader>(all: &[&'a R], names: &[String]) -> Result<Vec<&'a R>> {
    if let Some(missing) = names.iter().find(|s| !all.iter().any(|r| r.id() == s.as_str())) {
        let known: Vec<&str> = all.iter().map(|r| r.id()).collect();
        return Err(QueryError::UnknownSource { id: missing.clone(), known: known.join(", ") });
    }
    let readers: Vec<&R> =
        all.iter().filter(|r| names.is_empty() || names.iter().any(|s| s == r.id())).copied().collect();
    if readers.is_empty() {
        return Err(QueryError::NoSources);
    }
    Ok(readers)
}

/// The query's vector, unless the mode needs none; without a model (or when it fails) the
/// answer goes on without the vector arm and says so.
fn embed_query(
    req: &SearchRequest,
    embedder: Option<&dyn Embedder>,
    degraded: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Option<Vec<f32>> {
    match (req.mode, embedder) {
        (Mode::Fast, _) => None,
        (_, None) => {
            degraded.push("embed_unavailable".to_string());
            None
        }
        (_, Some(e)) => match cairn_index::fault::contained(|| e.embed_query(&req.query))
            .map_err(|p| format!("the model crashed: {p}"))
            .and_then(|r| r.map_err(|err| err.to_string()))
        {
            Ok(v) => Some(v),
            Err(err) => {
                degraded.push("embed_unavailable".to_string());
                notes.push(format!("query not embedded: {err}"));
                None
            }
        },
    }
}

/// Every source's candidates in one union, and how each source took part. A source that failed
/// is reported and the others answer; when all failed, the call fails.
fn merge_sources<R: SourceReader>(
    readers: &[&R],
    gathered: Vec<cairn_index::Result<Gathered>>,
    degraded: &mut Vec<String>,
) -> Result<(Vec<Candidate>, Vec<SourceHealth>)> {
    let mut statuses = Vec::new();
    let mut union: Vec<Candidate> = Vec::new();
    let mut errors = Vec::new();
    for (r, g) in readers.iter().zip(gathered) {
        let mut status = SourceHealth {
            source: r.id().into(),
            status: Health::Ok,
            error: None,
            candidates: 0,
            pool_underfilled: false,
            pending: None,
            lag_ms: None,
            vectors_pending: None,
            as_of: None,
        };
        match g {
            Ok(g) => {
                status.candidates = g.candidates.len();
                status.pool_underfilled = g.underfilled;
                union.extend(g.candidates);
            }
            Err(e) => {
                degraded.push(format!("source_failed:{}", r.id()));
                errors.push(e.to_string());
                status.status = Health::Failed;
                status.error = Some(e.to_string());
            }
        }
        statuses.push(status);
    }
    if errors.len() == readers.len() {
        return Err(QueryError::AllSourcesFailed(errors.join("; ")));
    }
    Ok((union, statuses))
}

/// Several pages answering to the query's name (by title, file name or alias; a page id alone
/// is no name) collide.
fn alias_collisions(query: &str, exact: &[(String, PageRecord, ExactKind)]) -> Vec<AliasCollision> {
    let named: Vec<String> = exact
        .iter()
        .filter(|(_, _, k)| *k != ExactKind::Slug)
        .map(|(s, p, _)| format!("{s}:{}", p.slug))
        .collect();
    if named.len() > 1 {
        vec![AliasCollision { name: normalize_name(query), pages: named }]
    } else {
        Vec::new()
    }
}

/// Inject exact names (exact lookup and alias hop): the first three pages the query names are
/// marked where an arm found them, and added (with their record and best chunk) where none did.
async fn inject_exact<R: SourceReader>(
    readers: &[&R],
    qvec: Option<&[f32]>,
    union: &mut Vec<Candidate>,
    exact: &[(String, PageRecord, ExactKind)],
) {
    for (source, page, kind) in exact.iter().take(3) {
        match union.iter_mut().find(|c| c.source == *source && c.slug == page.slug) {
            Some(c) => c.exact = Some(*kind),
            None => {
                let mut c = Candidate {
                    source: source.clone(),
                    record: Some(page.clone()),
                    slug: page.slug.clone(),
                    keyword: None,
                    vector: None,
                    title: None,
                    fused: 0.0,
                    exact: Some(*kind),
                };
                if let Some(r) = readers.iter().find(|r| r.id() == source) {
                    let _ = complete(*r, qvec, std::slice::from_mut(&mut c)).await;
                }
                union.push(c);
            }
        }
    }
}

/// The relevance floor: a page only the vector arm found, and found weakly, is junk.
fn relevance_floor(union: &mut Vec<Candidate>) {
    union.retain(|c| {
        c.exact.is_some()
            || c.title.is_some()
            || c.keyword.is_some()
            || c.vector.as_ref().is_some_and(|(_, h)| h.score >= RELEVANCE_FLOOR)
    });
}

/// Union scoring: scores comparable across sources, the raw cosine of the best chunk plus BM25
/// re-scored over the union with the union's own term statistics (normalised to 0..1); then
/// each page's multipliers and evidence.
fn score_union(req: &SearchRequest, union: Vec<Candidate>) -> Vec<SearchResult> {
    // Each candidate's names and best chunk, as terms (read once, for BM25 and the all-terms check).
    let doc_terms: Vec<Vec<String>> = union
        .iter()
        .map(|c| {
            let (title, aliases) = c
                .record
                .as_ref()
                .map_or((String::new(), String::new()), |p| (p.title.clone(), p.aliases.join(" ")));
            let chunk = c.keyword.as_ref().or(c.vector.as_ref()).map_or("", |(_, h)| h.text.as_str());
            layers::terms(&format!("{title} {aliases} {chunk}"))
        })
        .collect();
    let query_terms = layers::terms(&req.query);
    let bm25 = union_bm25(&query_terms, &doc_terms);
    let max_bm25 = bm25.iter().copied().fold(0.0f32, f32::max);
    union
        .into_iter()
        .zip(bm25)
        .zip(doc_terms)
        .map(|((c, bm), doc_terms)| {
            let union_keyword = if max_bm25 > 0.0 { bm / max_bm25 } else { 0.0 };
            let all_terms_present =
                !query_terms.is_empty() && query_terms.iter().all(|t| doc_terms.contains(t));
            scored_result(req, c, union_keyword, all_terms_present)
        })
        .collect()
}

/// Multipliers on a page's base score: the title-phrase boost, and the template factor for a
/// body that many pages share.
fn multipliers(query: &str, record: Option<&PageRecord>) -> Vec<(String, f32)> {
    let mut out = Vec::new();
    if record.is_some_and(|p| title_phrase_match(query, &p.title)) {
        out.push(("title_phrase".to_string(), TITLE_PHRASE_BOOST));
    }
    if record.is_some_and(|p| p.body_shared_by >= TEMPLATE_PAGES) {
        out.push(("template".to_string(), TEMPLATE_FACTOR));
    }
    out
}

/// One candidate as a result: its base score, multipliers, evidence and best chunk.
fn scored_result(
    req: &SearchRequest,
    c: Candidate,
    union_keyword: f32,
    all_terms_present: bool,
) -> SearchResult {
    let cosine = c.vector.as_ref().map(|(_, h)| h.score);
    let base = cosine.unwrap_or(0.0) + KEYWORD_WEIGHT * union_keyword;
    let title = c.record.as_ref().map_or(String::new(), |p| p.title.clone());
    let multipliers = multipliers(&req.query, c.record.as_ref());
    let score = multipliers.iter().fold(base, |s, (_, m)| s * m);
    let signals = Signals {
        exact: c.exact,
        cosine,
        keyword_rank: c.keyword.as_ref().map(|(a, _)| a.rank),
        all_terms_present,
    };
    let (evidence, create_safety) = evidence(&signals);
    let best = c.vector.as_ref().or(c.keyword.as_ref()).map(|(_, h)| ResultChunk {
        text: h.text.clone(),
        heading_path: h.heading_path.clone(),
        line_start: h.line_start,
        line_end: h.line_end,
    });
    let explain = req.explain.then(|| Explain {
        keyword: c.keyword.as_ref().map(|(a, _)| *a),
        vector: c.vector.as_ref().map(|(a, _)| *a),
        title: c.title,
        fused_in_source: c.fused,
        union_keyword,
        multipliers: multipliers.clone(),
        why: why(&signals, &evidence),
    });
    SearchResult {
        source: c.source,
        slug: c.slug,
        path: c.record.as_ref().map_or(String::new(), |p| p.path.clone()),
        title,
        score,
        base_score: base,
        cosine,
        evidence,
        create_safety,
        chunk: best,
        boosts: multipliers.into_iter().map(|(n, _)| n).collect(),
        stale: None,
        explain,
    }
}

/// Order: exact matches first (in the exact layer's order), then by score; `limit` kept.
fn order(
    mut results: Vec<SearchResult>,
    exact: &[(String, PageRecord, ExactKind)],
    limit: usize,
) -> Vec<SearchResult> {
    let exact_rank = |r: &SearchResult| {
        exact.iter().take(3).position(|(s, p, _)| *s == r.source && p.slug == r.slug).unwrap_or(usize::MAX)
    };
    results.sort_by(|a, b| {
        exact_rank(a)
            .cmp(&exact_rank(b))
            .then(b.score.total_cmp(&a.score))
            .then(a.source.cmp(&b.source))
            .then(a.slug.cmp(&b.slug))
    });
    results.truncate(limit);
    results
}

fn why(s: &Signals, ev: &[Evidence]) -> String {
    let mut parts: BTreeMap<&str, String> = BTreeMap::new();
    if let Some(k) = s.exact {
        parts.insert("exact", format!("the query equals the page's {k:?}").to_lowercase());
    }
    if let Some(c) = s.cosine {
        let cmp = if c >= HIGH_VECTOR_FLOOR { ">=" } else { "<" };
        parts.insert("vector", format!("best-chunk cosine {c:.3} {cmp} floor {HIGH_VECTOR_FLOOR}"));
    }
    if let Some(r) = s.keyword_rank {
        let all = if s.all_terms_present { "with" } else { "without" };
        parts.insert("keyword", format!("keyword rank {r} in its source, {all} every query word"));
    }
    format!(
        "{}: {}",
        ev.iter().map(|e| format!("{e:?}")).collect::<Vec<_>>().join("+"),
        parts.into_values().collect::<Vec<_>>().join("; ")
    )
}

#[cfg(test)]
mod stages {
    //! Each stage of [`search`] on its own.

    use super::*;
    use crate::reader::memory::{MemoryReader, page};

    fn record(slug: &str, title: &str) -> PageRecord {
        PageRecord::named(slug, title, &[], 1)
    }

    /// A candidate of source `s` with the arms that found it (keyword and vector scores).
    fn cand(slug: &str, keyword: Option<f32>, vector: Option<f32>) -> Candidate {
        let hit = |score: f32| {
            (ArmRank { rank: 1, score }, ChunkHit { score, ..ChunkHit::numbered(slug, 0, slug, "text") })
        };
        Candidate {
            source: "s".into(),
            record: Some(record(slug, slug)),
            slug: slug.into(),
            keyword: keyword.map(hit),
            vector: vector.map(hit),
            title: None,
            fused: 0.0,
            exact: None,
        }
    }

    fn slugs<T>(items: &[T], slug: impl Fn(&T) -> &str) -> Vec<String> {
        items.iter().map(|i| slug(i).to_string()).collect()
    }

    #[test]
    fn select_readers_takes_the_named_sources_and_refuses_an_unknown_one() {
        let (a, b) = (MemoryReader::new("a", vec![]), MemoryReader::new("b", vec![]));
        let all = [&a, &b];
        assert_eq!(select_readers(&all, &[]).unwrap().len(), 2);
        let only_b = select_readers(&all, &["b".to_string()]).unwrap();
        assert_eq!(only_b.iter().map(|r| r.id()).collect::<Vec<_>>(), ["b"]);
        match select_readers(&all, &["b".to_string(), "c".to_string()]) {
            Err(QueryError::UnknownSource { id, known }) => {
                assert_eq!((id.as_str(), known.as_str()), ("c", "a, b"))
            }
            other => panic!("{other:?}"),
        }
        let none: [&MemoryReader; 0] = [];
        assert!(matches!(select_readers(&none, &[]), Err(QueryError::NoSources)));
    }

    #[test]
    fn merge_sources_reports_a_failed_source_and_fails_only_when_all_did() {
        let (a, b) = (MemoryReader::new("a", vec![]), MemoryReader::new("b", vec![]));
        let failed = || {
            Err(cairn_index::Error::Storage {
                source_id: "b".into(),
                uri: "m".into(),
                message: "down".into(),
            })
        };
        let mut degraded = Vec::new();
        let ok = Ok(Gathered { candidates: vec![cand("x", Some(1.0), None)], underfilled: true });
        let (union, statuses) = merge_sources(&[&a, &b], vec![ok, failed()], &mut degraded).unwrap();
        assert_eq!(slugs(&union, |c| &c.slug), ["x"]);
        assert_eq!(
            (statuses[0].status, statuses[0].candidates, statuses[0].pool_underfilled),
            (Health::Ok, 1, true)
        );
        assert_eq!(statuses[1].status, Health::Failed);
        assert!(statuses[1].error.as_deref().is_some_and(|e| e.contains("down")));
        assert_eq!(degraded, ["source_failed:b"]);
        let all_failed = merge_sources(&[&a, &b], vec![failed(), failed()], &mut Vec::new());
        assert!(matches!(all_failed, Err(QueryError::AllSourcesFailed(_))));
    }

    #[test]
    fn alias_collisions_count_names_not_page_ids() {
        let named = |slug: &str, kind| ("s".to_string(), record(slug, slug), kind);
        assert!(
            alias_collisions("ae", &[named("ae", ExactKind::Slug), named("exec", ExactKind::Alias)])
                .is_empty()
        );
        let two =
            alias_collisions("AE", &[named("ae-page", ExactKind::Title), named("exec", ExactKind::Alias)]);
        assert_eq!(two.len(), 1);
        assert_eq!(
            (two[0].name.as_str(), two[0].pages.clone()),
            ("ae", vec!["s:ae-page".into(), "s:exec".into()])
        );
    }

    #[test]
    fn inject_exact_marks_a_found_page_and_adds_a_missing_one_with_its_record() {
        let reader = MemoryReader::new(
            "s",
            vec![
                page("owls", "Owls", &["Strigiformes"], &["Owls hunt at night."]),
                page("x", "X", &[], &["x"]),
            ],
        );
        let exact = vec![
            ("s".to_string(), record("x", "X"), ExactKind::Title),
            ("s".to_string(), reader.pages[0].0.clone(), ExactKind::Alias),
        ];
        let mut union = vec![cand("x", Some(1.0), None)];
        futures::executor::block_on(inject_exact(&[&reader], None, &mut union, &exact));
        assert_eq!(slugs(&union, |c| &c.slug), ["x", "owls"]);
        assert_eq!((union[0].exact, union[1].exact), (Some(ExactKind::Title), Some(ExactKind::Alias)));
        assert!(union[0].keyword.is_some(), "a found page keeps its arms");
        assert_eq!(union[1].record.as_ref().map(|p| p.title.as_str()), Some("Owls"));
        // Only the first three names are injected.
        let many: Vec<_> =
            (0..5).map(|i| ("s".to_string(), record(&format!("p{i}"), "P"), ExactKind::Alias)).collect();
        let mut union = Vec::new();
        futures::executor::block_on(inject_exact(&[&reader], None, &mut union, &many));
        assert_eq!(slugs(&union, |c| &c.slug), ["p0", "p1", "p2"]);
    }

    #[test]
    fn relevance_floor_drops_only_pages_found_weakly_by_meaning_alone() {
        let mut exact = cand("exact", None, Some(0.05));
        exact.exact = Some(ExactKind::Title);
        let mut titled = cand("titled", None, None);
        titled.title = Some(ArmRank { rank: 1, score: 1.0 });
        let mut union = vec![
            cand("weak", None, Some(RELEVANCE_FLOOR - 0.01)),
            cand("strong", None, Some(RELEVANCE_FLOOR)),
            cand("keyword", Some(0.1), Some(0.01)),
            exact,
            titled,
        ];
        relevance_floor(&mut union);
        assert_eq!(slugs(&union, |c| &c.slug), ["strong", "keyword", "exact", "titled"]);
    }

    #[test]
    fn multipliers_boost_a_title_phrase_and_damp_a_shared_template_body() {
        let hall = record("hall", "The Example Hall for Adversarial Debate");
        assert_eq!(
            multipliers("adversarial debate", Some(&hall)),
            [("title_phrase".to_string(), TITLE_PHRASE_BOOST)]
        );
        assert!(multipliers("debate adversarial", Some(&hall)).is_empty(), "a bag of words is no phrase");
        let template = PageRecord { body_shared_by: TEMPLATE_PAGES, ..record("stub", "Stub") };
        assert_eq!(multipliers("owls", Some(&template)), [("template".to_string(), TEMPLATE_FACTOR)]);
        assert!(multipliers("hall", None).is_empty());
    }

    #[test]
    fn score_union_adds_cosine_to_union_keyword_normalised_to_the_best_page() {
        let mut req = SearchRequest::new("tide moon");
        req.explain = true;
        let mut tide = cand("tide", Some(3.0), Some(0.5));
        tide.keyword.as_mut().unwrap().1.text = "the tide follows the moon".into();
        let mut moon = cand("moon", Some(1.0), None);
        moon.keyword.as_mut().unwrap().1.text = "the moon".into();
        let other = cand("other", None, Some(0.4));
        let results = score_union(&req, vec![tide, moon, other]);
        let uk = |i: usize| results[i].explain.as_ref().unwrap().union_keyword;
        assert_eq!(uk(0), 1.0, "the best keyword page of the union scores 1");
        assert!(uk(1) > 0.0 && uk(1) < 1.0);
        assert_eq!(uk(2), 0.0);
        assert!((results[0].base_score - (0.5 + KEYWORD_WEIGHT)).abs() < 1e-6);
        assert_eq!(results[1].cosine, None);
        assert!((results[2].base_score - 0.4).abs() < 1e-6);
        assert!(results.iter().all(|r| r.score == r.base_score), "no multiplier applies");
    }

    #[test]
    fn order_puts_exact_names_first_then_scores_and_keeps_the_limit() {
        let result = |slug: &str, score: f32| {
            let mut r = score_union(&SearchRequest::new("q"), vec![cand(slug, None, None)]).remove(0);
            r.score = score;
            r
        };
        let exact = vec![("s".to_string(), record("named", "Named"), ExactKind::Alias)];
        let results =
            vec![result("low", 0.1), result("named", 0.05), result("high", 0.9), result("mid", 0.5)];
        let ordered = order(results, &exact, 3);
        assert_eq!(slugs(&ordered, |r| &r.slug), ["named", "high", "mid"]);
    }
}
