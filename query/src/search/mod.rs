//! The query pipeline: per-source gather (every source gets its own K slots), fusion within
//! each source, a union ordered by scores comparable across sources, the title-phrase boost,
//! exact lookup and alias hop, and evidence.

mod feedback;
#[cfg(test)]
pub(crate) use feedback::FEEDBACK_PAGES;
mod gather;
mod request;
mod response;
mod score;
mod subject;
#[cfg(test)]
mod tests;

pub use request::*;
pub use response::*;

use crate::error::{QueryError, Result};
use crate::layers::{ExactKind, SCORING_VERSION};
use crate::reader::SourceReader;
use cairn_index::{Embedder, PageRecord};
use cairn_ingest::tokens;
use gather::{
    alias_collisions, gather_source, inject_exact, merge_sources, named_pages, pool_globally, read_terms,
};
use score::{order, relevance_floor, score_union, union_words};
use std::time::Instant;
use subject::{inject_subjects, subject_pages};

/// Longest query accepted, in bytes.
pub const MAX_QUERY_BYTES: usize = 4096;

/// Most results one call returns.
pub const MAX_LIMIT: usize = 100;

/// Bound on the chunk pool one arm may widen to.
const MAX_POOL: usize = 2000;

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

/// The candidates every source gathers in `balanced` before the merge, whatever the limit: the
/// most a call may ask for. The union's score orders a deeper pool better than the arms' rank
/// fusion cuts it (BENCHMARKS.md, "A window that does not depend on the limit"), and with one
/// window for every limit, the first ten answers of a call for a hundred are the ten a call for
/// ten gets.
pub const WINDOW: usize = MAX_LIMIT;

/// The widest window a request may ask for (`thorough`'s).
pub const MAX_WINDOW: usize = WINDOW * 3;

/// The slots every source gets in the gather before the merge (its rank window): the request's
/// own window if it sets one, else the mode's (`fast`, which embeds nothing and is asked for
/// speed, ten; `balanced` [`WINDOW`]; `thorough` three times that); never fewer than the limit.
pub(crate) fn source_slots(req: &SearchRequest, limit: usize) -> usize {
    let window = req.window.map_or_else(
        || match req.mode {
            Mode::Fast => 10,
            Mode::Balanced => WINDOW,
            Mode::Thorough => MAX_WINDOW,
        },
        |w| w.clamp(1, MAX_WINDOW),
    );
    window.max(limit)
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
    let k = source_slots(req, limit);
    let text = tokens(&req.query).join(" ");
    let mut degraded = Vec::new();
    let qvec = embed_query(req, embedder, &mut degraded, &mut notes);
    let filter = req.filter.compile()?;

    // Gather: every source's own K slots; the exact and subject lookups do not depend on the
    // arms and run alongside.
    let learnt_names = !req.ablation.without_learnt_names;
    // The query's terms as each source reads them, read once: the source's keyword arm and the
    // union's re-score score the same ones.
    let compounds = !req.ablation.without_compounds;
    let read: Vec<_> =
        readers.iter().map(|r| (r.id().to_string(), read_terms(*r, &text, compounds))).collect();
    let (gathered, (exact, learnt), subjects) = futures::join!(
        futures::future::join_all(readers.iter().zip(&read).map(|(r, (_, terms))| gather_source(
            *r,
            &text,
            terms,
            qvec.as_deref(),
            k,
            filter.as_ref(),
            req.fields(),
        ))),
        named_pages(&readers, &req.query, learnt_names, !req.ablation.without_fuzzy_names),
        async {
            if req.ablation.without_subjects {
                Vec::new()
            } else {
                subject_pages(&readers, &req.query, learnt_names).await
            }
        }
    );
    // A page named by the query but outside the filter is not injected.
    let passes = |p: &PageRecord| filter.as_ref().is_none_or(|f| f.matches(p));
    let exact: Vec<(String, PageRecord, ExactKind)> =
        exact.into_iter().filter(|(_, p, _)| passes(p)).collect();
    let subjects: Vec<_> = subjects.into_iter().filter(|s| passes(&s.page)).collect();
    let (mut union, statuses) = merge_sources(&readers, gathered, &mut degraded)?;
    if req.ablation.pooled_baseline {
        union = pool_globally(union, k);
    }
    let collisions = alias_collisions(&req.query, &exact);
    inject_exact(&readers, qvec.as_deref(), &mut union, &exact).await;
    inject_subjects(&readers, qvec.as_deref(), &mut union, &subjects, k).await;
    relevance_floor(&mut union);
    let words = union_words(req, &union, &read);
    let kept = feedback::feedback(req, &readers, qvec.as_deref(), &mut union, &words).await;
    let mut results = order(score_union(req, union, &words), &exact, &kept, limit);
    for r in &mut results {
        let taught = learnt.iter().find(|(s, l)| *s == r.source && l.page.slug == r.slug);
        r.learnt = taught.map(|(_, l)| LearntName::of(l));
    }
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
