//! Per-source gather: every source gets its own slots in each arm before anything is merged;
//! a source's arms fused into page candidates, then pooled across sources, with exact names
//! looked up and put in.

use super::MAX_POOL;
use super::response::{AliasCollision, ArmRank, Health, SourceHealth};
use crate::error::{QueryError, Result};
use crate::filter::PageFilter;
use crate::layers::{ExactKind, max_pool, rrf};
use crate::reader::SourceReader;
use cairn_index::resident::Lang;
use cairn_index::resident::{Fields, LearntPage, QueryTerms};
use cairn_index::{ChunkHit, PageRecord};
use cairn_ingest::{MAX_NAME_CHARS, normalize_name, slugify_id};
use std::collections::HashMap;

/// A page in the union, with everything the later layers look at.
#[derive(Debug, Clone)]
pub(super) struct Candidate {
    pub(super) source: String,
    /// Its source's language (its words, and the query's against them, are read in it).
    pub(super) lang: Lang,
    pub(super) record: Option<PageRecord>,
    pub(super) slug: String,
    pub(super) keyword: Option<(ArmRank, ChunkHit)>,
    pub(super) vector: Option<(ArmRank, ChunkHit)>,
    pub(super) title: Option<ArmRank>,
    pub(super) fused: f32,
    pub(super) exact: Option<ExactKind>,
    /// The query's phrase that names the page (see [`super::subject`]).
    pub(super) subject: Option<String>,
    /// The best chunk's cosine with the query moved by feedback (see [`super::feedback`]).
    pub(super) feedback: Option<f32>,
}

pub(super) struct Gathered {
    pub(super) candidates: Vec<Candidate>,
    pub(super) underfilled: bool,
}

/// An arm's pages, widening the chunk pool (bounded) while pooling leaves fewer than `k`.
pub(super) async fn pooled_arm<F, Fut>(
    k: usize,
    pool: usize,
    mut fetch: F,
) -> cairn_index::Result<(Vec<ChunkHit>, bool)>
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

pub(super) fn arm_ranks(pages: &[ChunkHit]) -> HashMap<&str, (ArmRank, &ChunkHit)> {
    pages
        .iter()
        .enumerate()
        .map(|(i, h)| (h.slug.as_str(), (ArmRank { rank: i + 1, score: h.score }, h)))
        .collect()
}

/// The query's terms as `r` reads them, with its compound readings (parts, and compounds a word
/// ends) only when `compounds` (the rule is on).
pub(super) fn read_terms<R: SourceReader>(r: &R, query: &str, compounds: bool) -> QueryTerms {
    let terms = r.query_terms(query);
    if compounds { terms } else { terms.words_only() }
}

/// One source's candidates: each arm max-pooled to pages before any cut, fused by RRF, the
/// top `k` kept, each with its exact best-chunk cosine and its page record. The keyword arm
/// reads `terms`, the query's terms as the source reads them ([`read_terms`]).
pub(super) async fn gather_source<R: SourceReader>(
    r: &R,
    text: &str,
    terms: &QueryTerms,
    qvec: Option<&[f32]>,
    k: usize,
    filter: Option<&PageFilter>,
    fields: Fields,
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
            pooled_arm(k, pool, |n| r.keyword(terms, n, allow, fields)).await
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
            lang: r.lang(),
            record: None,
            slug: slug.to_string(),
            keyword: kw_ranks.get(slug).map(|(a, h)| (*a, (*h).clone())),
            vector: vec_ranks.get(slug).map(|(a, h)| (*a, (*h).clone())),
            title: title_ranks.get(slug).copied(),
            fused: *f,
            exact: None,
            subject: None,
            feedback: None,
        })
        .collect();
    complete(r, qvec, &mut candidates).await?;
    Ok(Gathered { candidates, underfilled: kw_under || vec_under })
}

/// Give every candidate its page record and, when the query was embedded, its best chunk by
/// cosine (candidates found only by keyword or title get it from a restricted vector search).
pub(super) async fn complete<R: SourceReader>(
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
pub(super) fn pool_globally(union: Vec<Candidate>, k: usize) -> Vec<Candidate> {
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

/// Every source's candidates in one union, and how each source took part. A source that failed
/// is reported and the others answer; when all failed, the call fails.
pub(super) fn merge_sources<R: SourceReader>(
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

/// The pages the vault taught the query as a name (see [`SourceReader::learnt`]), the most
/// taught first, with where each was learnt.
pub(super) async fn learnt_pages<R: SourceReader>(readers: &[&R], query: &str) -> Vec<(String, LearntPage)> {
    if query.trim().chars().count() > MAX_NAME_CHARS + 1 {
        return Vec::new();
    }
    let norm = normalize_name(query);
    let lookups = readers.iter().map(|r| {
        let norm = &norm;
        async move { r.learnt(norm).await.ok().flatten().map(|p| (r.id().to_string(), p)) }
    });
    let mut out: Vec<(String, LearntPage)> =
        futures::future::join_all(lookups).await.into_iter().flatten().collect();
    out.sort_by(|a, b| b.1.taught_by.len().cmp(&a.1.taught_by.len()).then(a.0.cmp(&b.0)));
    out
}

/// The pages the query names: by their own names ([`exact_pages`]); when none is, by a name the
/// vault taught them ([`learnt_pages`]), marked [`ExactKind::Learnt`]; when none is either, by a
/// name a typo away ([`fuzzy_pages`], when `fuzzy`), marked [`ExactKind::Fuzzy`]. So an exact
/// name of any page always comes before a fuzzy one.
pub(super) async fn named_pages<R: SourceReader>(
    readers: &[&R],
    query: &str,
    learnt_names: bool,
    fuzzy: bool,
) -> (Vec<(String, PageRecord, ExactKind)>, Vec<(String, LearntPage)>) {
    let exact = exact_pages(readers, query).await;
    if !exact.is_empty() {
        return (exact, Vec::new());
    }
    let learnt = if learnt_names { learnt_pages(readers, query).await } else { Vec::new() };
    if !learnt.is_empty() || !fuzzy {
        return (
            learnt.iter().map(|(s, l)| (s.clone(), l.page.clone(), ExactKind::Learnt)).collect(),
            learnt,
        );
    }
    let typo = fuzzy_pages(readers, query).await;
    (typo.into_iter().map(|(s, p)| (s, p, ExactKind::Fuzzy)).collect(), Vec::new())
}

/// Words a query may have and still be taken for a name with a typo in it (names are short;
/// a sentence a few edits from a title is a coincidence, not a typo).
const FUZZY_MAX_WORDS: usize = 4;

/// The pages whose own name is the fewest edits from the query (within
/// [`cairn_ingest::fuzzy::max_edits`] of its length, a typing slip counting less than another
/// edit), over every source: the least cost any source has wins, and ties are kept (by source,
/// then slug).
pub(super) async fn fuzzy_pages<R: SourceReader>(readers: &[&R], query: &str) -> Vec<(String, PageRecord)> {
    let norm = normalize_name(query);
    let chars = norm.chars().count();
    let max = cairn_ingest::fuzzy::max_edits(chars);
    if max == 0 || chars > MAX_NAME_CHARS || norm.split_whitespace().count() > FUZZY_MAX_WORDS {
        return Vec::new();
    }
    let lookups = readers.iter().map(|r| {
        let norm = &norm;
        async move {
            let found = r.fuzzy(norm, max, FUZZY_CANDIDATES).await.unwrap_or_default();
            found.into_iter().map(|(p, d)| (d, r.id().to_string(), p)).collect::<Vec<_>>()
        }
    });
    let mut all: Vec<(usize, String, PageRecord)> =
        futures::future::join_all(lookups).await.into_iter().flatten().collect();
    let least = all.iter().map(|(d, _, _)| *d).min();
    all.retain(|(d, _, _)| Some(*d) == least);
    all.sort_by(|a, b| a.1.cmp(&b.1).then(a.2.slug.cmp(&b.2.slug)));
    all.truncate(FUZZY_CANDIDATES);
    all.into_iter().map(|(_, s, p)| (s, p)).collect()
}

/// Pages a typo lane puts forward at most: the ties of the least distance, ordered among
/// themselves by their score (see [`super::score::order`]).
pub(super) const FUZZY_CANDIDATES: usize = 5;

/// Several pages answering to the query's name (by title, file name or alias; a page id alone
/// is no name) collide.
pub(super) fn alias_collisions(
    query: &str,
    exact: &[(String, PageRecord, ExactKind)],
) -> Vec<AliasCollision> {
    let named: Vec<String> = exact
        .iter()
        .filter(|(_, _, k)| !matches!(k, ExactKind::Slug | ExactKind::Learnt | ExactKind::Fuzzy))
        .map(|(s, p, _)| format!("{s}:{}", p.slug))
        .collect();
    if named.len() > 1 {
        vec![AliasCollision { name: normalize_name(query), pages: named }]
    } else {
        Vec::new()
    }
}

/// How many of the named pages are put first: three exact or learnt ones (in their order), or
/// every fuzzy one (ordered by score among themselves).
pub(super) fn named_slots(named: &[(String, PageRecord, ExactKind)]) -> usize {
    if named.iter().all(|(_, _, k)| *k == ExactKind::Fuzzy) { FUZZY_CANDIDATES } else { 3 }
}

/// Inject exact names (exact lookup and alias hop): the first three pages the query names are
/// marked where an arm found them, and added (with their record and best chunk) where none did.
pub(super) async fn inject_exact<R: SourceReader>(
    readers: &[&R],
    qvec: Option<&[f32]>,
    union: &mut Vec<Candidate>,
    exact: &[(String, PageRecord, ExactKind)],
) {
    for (source, page, kind) in exact.iter().take(named_slots(exact)) {
        let i = find_or_add(readers, qvec, union, source, page).await;
        union[i].exact = Some(*kind);
    }
}

/// The index of a page in the union; a page no arm found is added with its record and best
/// chunk.
pub(super) async fn find_or_add<R: SourceReader>(
    readers: &[&R],
    qvec: Option<&[f32]>,
    union: &mut Vec<Candidate>,
    source: &str,
    page: &PageRecord,
) -> usize {
    if let Some(i) = union.iter().position(|c| c.source == source && c.slug == page.slug) {
        return i;
    }
    let reader = readers.iter().find(|r| r.id() == source);
    let mut c = Candidate {
        source: source.to_string(),
        lang: reader.map_or_else(Lang::default, |r| r.lang()),
        record: Some(page.clone()),
        slug: page.slug.clone(),
        keyword: None,
        vector: None,
        title: None,
        fused: 0.0,
        exact: None,
        subject: None,
        feedback: None,
    };
    if let Some(r) = reader {
        let _ = complete(*r, qvec, std::slice::from_mut(&mut c)).await;
    }
    union.push(c);
    union.len() - 1
}
