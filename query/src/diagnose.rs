//! `cairn diagnose`: walk the query layers for one page and say where it was found or lost.

use crate::layers::{RELEVANCE_FLOOR, max_pool, rrf};
use crate::reader::SourceReader;
use crate::search::{Mode, SearchRequest, search};
use crate::{QueryError, Result};
use cairn_index::{ChunkHit, Embedder, PageRecord};
use cairn_ingest::{normalize_name, tokens};

/// How deep each arm is searched when looking for one page.
const DEEP: usize = 1000;

/// Where one page stands at every layer for one query.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Diagnosis {
    pub query: String,
    pub source: String,
    pub slug: String,
    /// The stored page (absent: not in the index).
    pub page: Option<PageRecord>,
    /// 1-based rank among the source's pages in each arm (absent: not within the first 1,000
    /// chunks of that arm).
    pub keyword_rank: Option<usize>,
    pub vector_rank: Option<usize>,
    pub best_cosine: Option<f32>,
    pub title_rank: Option<usize>,
    /// The query equals the page's title, slug or an alias.
    pub exact_name: bool,
    /// Rank after fusing the arms inside the source, and the number of slots the source has.
    pub fused_rank: Option<usize>,
    pub source_slots: usize,
    /// Rank in the final answer to the request as given (its mode, sources and limit), if there.
    pub final_rank: Option<usize>,
    /// The request the final rank is for.
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub limit: usize,
    pub verdict: String,
    /// How the page got into the index, or why it did not (from the tables and the event log;
    /// filled by the caller that has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingest: Option<IngestState>,
    /// The process that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<crate::ServedBy>,
}

/// Where the page stands at each layer, then how it got into the index, then the verdict.
impl std::fmt::Display for Diagnosis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = |r: Option<usize>| r.map_or("-".to_string(), |r| r.to_string());
        let (source, slug) = (&self.source, &self.slug);
        match &self.page {
            Some(p) => {
                writeln!(f, "page {source}:{slug}: {} ({}), {} chunks", p.title, p.path, p.chunk_count)?
            }
            None => writeln!(f, "page {source}:{slug}: not in the index")?,
        }
        writeln!(f, "keyword arm rank: {}", n(self.keyword_rank))?;
        let cosine = self.best_cosine.map_or("-".into(), |c| format!("{c:.3}"));
        writeln!(f, "vector arm rank:  {} (best-chunk cosine {cosine})", n(self.vector_rank))?;
        writeln!(f, "title arm rank:   {}", n(self.title_rank))?;
        writeln!(f, "exact name:       {}", self.exact_name)?;
        writeln!(f, "fused in source:  {} of {} slots", n(self.fused_rank), self.source_slots)?;
        writeln!(f, "final rank:       {} (mode {}, limit {})", n(self.final_rank), self.mode, self.limit)?;
        if let Some(i) = &self.ingest {
            writeln!(
                f,
                "ingest:           {} ({}), {} chunks, {} rows stored, {} with vectors, table version {}{}",
                i.state,
                i.file.as_deref().unwrap_or("no file"),
                n(i.chunks),
                n(i.rows),
                n(i.embedded),
                i.table_version.map_or("-".into(), |v| v.to_string()),
                i.indexed_at_version.map_or(String::new(), |v| format!(", indexed at version {v}"))
            )?;
            if let Some(p) = &i.problem {
                writeln!(f, "problem:          {p}")?;
            }
            for h in &i.history {
                writeln!(f, "  {h}")?;
            }
        }
        writeln!(f, "verdict: {}", self.verdict)
    }
}

/// One page's ingest state.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IngestState {
    /// The page's file (as stored, else the last the event log names for the slug).
    pub file: Option<String>,
    /// `indexed`, `indexed_with_warning`, `failed`, `removed`, `never_seen`, or `seen_not_indexed`
    /// (changes seen, no commit yet: pending, or stopped before its commit).
    pub state: String,
    /// The latest failure or warning, with its reason.
    pub problem: Option<String>,
    /// Chunks the page record counts, chunk rows stored, and of those the ones with a vector.
    pub chunks: Option<usize>,
    #[serde(default)]
    pub rows: Option<usize>,
    pub embedded: Option<usize>,
    /// The source table's version now, and the one the page was last indexed at (per the log).
    pub table_version: Option<u64>,
    pub indexed_at_version: Option<u64>,
    /// The page's latest events in the log, oldest first.
    pub history: Vec<String>,
}

impl Diagnosis {
    /// Attach the ingest state; for a page not in the index, the verdict says why.
    pub fn with_ingest(mut self, ingest: IngestState) -> Self {
        if self.page.is_none() {
            self.verdict = match (ingest.state.as_str(), &ingest.problem) {
                ("failed", Some(p)) => format!("lost before search: the file could not be indexed: {p}"),
                ("removed", _) => format!(
                    "lost before search: the page was removed ({})",
                    ingest.file.as_deref().unwrap_or("its file is gone")
                ),
                ("never_seen", _) => {
                    "lost before search: no file with this slug was ever indexed or reported \
                                      (slugs are vault paths without .md, lowercased; check the spelling)"
                        .to_string()
                }
                _ => self.verdict,
            };
        } else if ingest.rows.is_some_and(|r| Some(r) != ingest.chunks) {
            self.verdict.push_str(&format!(
                "; note: {} chunk rows stored for {} chunks counted (an interrupted write? a restart reconciles it)",
                ingest.rows.unwrap_or(0),
                ingest.chunks.unwrap_or(0)
            ));
        } else if let (Some(rows), Some(embedded)) = (ingest.rows, ingest.embedded)
            && embedded < rows
        {
            self.verdict.push_str(&format!(
                "; note: {} of its {rows} chunks wait for the model: found by name and keyword, not yet by meaning",
                rows - embedded
            ));
        }
        self.ingest = Some(ingest);
        self
    }

    /// The verdict: the first layer that lost the page, or its rank.
    fn judged(mut self) -> Self {
        self.verdict = if self.page.is_none() {
            "lost before search: the page is not in the index (never indexed, failed to parse, or removed; `cairn index` lists failures)".to_string()
        } else if let Some(r) = self.final_rank {
            format!("found at rank {r}")
        } else if self.keyword_rank.is_none()
            && self.vector_rank.is_none()
            && self.title_rank.is_none()
            && !self.exact_name
        {
            "lost in retrieval: no arm returned the page (no shared words, and its best chunk is not among the 1,000 nearest)".to_string()
        } else if self.fused_rank.is_some_and(|r| r > self.source_slots) {
            format!(
                "lost at the per-source cut: fused rank {} in its source, beyond its {} slots",
                self.fused_rank.unwrap_or(0),
                self.source_slots
            )
        } else if self.keyword_rank.is_none()
            && self.title_rank.is_none()
            && self.best_cosine.is_some_and(|c| c < RELEVANCE_FLOOR)
        {
            format!(
                "dropped by the relevance floor: only the vector arm found it, with cosine below {RELEVANCE_FLOOR}"
            )
        } else {
            "lost in the union: other pages scored higher across sources".to_string()
        };
        self
    }
}

fn rank_of(pages: &[ChunkHit], slug: &str) -> Option<usize> {
    pages.iter().position(|h| h.slug == slug).map(|p| p + 1)
}

/// Diagnose `slug` of `source` for the request `req` (its query, mode, sources and limit: the
/// final rank is the page's rank in the answer to exactly that request).
pub async fn diagnose<R: SourceReader>(
    readers: &[&R],
    embedder: Option<&dyn Embedder>,
    req: &SearchRequest,
    source: &str,
    slug: &str,
) -> Result<Diagnosis> {
    let query = req.query.as_str();
    let Some(reader) = readers.iter().find(|r| r.id() == source) else {
        let known: Vec<&str> = readers.iter().map(|r| r.id()).collect();
        return Err(QueryError::UnknownSource { id: source.into(), known: known.join(", ") });
    };
    let failed = |e: cairn_index::Error| QueryError::AllSourcesFailed(e.to_string());
    let page = reader.pages(&[slug]).await.map_err(failed)?.into_iter().next();
    let text = tokens(query).join(" ");
    let qvec = if req.mode == Mode::Fast { None } else { embedder.and_then(|e| e.embed_query(query).ok()) };
    let allowed = match req.filter.compile()? {
        Some(f) => Some(reader.allowed(&f).await.map_err(failed)?),
        None => None,
    };
    let allow = allowed.as_ref();
    let kw = if text.is_empty() {
        Vec::new()
    } else {
        max_pool(
            &reader.keyword(&reader.query_terms(&text), DEEP, allow, req.fields()).await.map_err(failed)?,
        )
    };
    let vec = match &qvec {
        Some(v) => max_pool(&reader.vector(v, DEEP, allow).await.map_err(failed)?),
        None => Vec::new(),
    };
    let titles =
        if text.is_empty() { Vec::new() } else { reader.titles(&text, 100, allow).await.map_err(failed)? };
    let norm = normalize_name(query);
    let exact_name = reader.alias(&norm).await.map_err(failed)?.iter().any(|p| p.slug == slug);
    let within = match (&qvec, rank_of(&vec, slug)) {
        (Some(v), None) => max_pool(&reader.vector_within(v, &[slug], 100).await.map_err(failed)?),
        _ => Vec::new(),
    };
    let best_cosine = vec.iter().chain(&within).find(|h| h.slug == slug).map(|h| h.score);
    let fused = rrf(&[
        kw.iter().map(|h| h.slug.as_str()).collect(),
        vec.iter().map(|h| h.slug.as_str()).collect(),
        titles.iter().map(|p| p.slug.as_str()).collect(),
    ]);
    let mut order: Vec<(&str, f32)> = fused.iter().map(|(s, f)| (*s, *f)).collect();
    order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    let fused_rank = order.iter().position(|(s, _)| *s == slug).map(|p| p + 1);
    let limit = req.limit.clamp(1, crate::search::MAX_LIMIT);
    let source_slots = crate::search::source_slots(req, limit);
    let answer = search(readers, embedder, req).await?;
    let final_rank = answer.results.iter().position(|r| r.source == source && r.slug == slug).map(|p| p + 1);
    let keyword_rank = rank_of(&kw, slug);
    let vector_rank = rank_of(&vec, slug);
    let title_rank = titles.iter().position(|p| p.slug == slug).map(|p| p + 1);
    Ok(Diagnosis {
        query: query.into(),
        source: source.into(),
        slug: slug.into(),
        page,
        keyword_rank,
        vector_rank,
        best_cosine,
        title_rank,
        exact_name,
        fused_rank,
        source_slots,
        final_rank,
        mode: req.mode,
        limit,
        verdict: String::new(),
        ingest: None,
        served_by: None,
    }
    .judged())
}
