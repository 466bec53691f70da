//! Feedback on the query's vector (Rocchio's relevance feedback, its answers taken as judged,
//! as pseudo-relevance feedback does): a query that describes what it wants, rather than naming
//! a page, is moved toward the vectors of its first answers' best chunks, and every candidate's
//! best chunk is scored again against the moved vector. Pages that say what the first answers
//! say in other words than the query's come up; the candidates stay those the arms gathered.
//!
//! The first answers fed back keep their places, in their first order: feedback takes them as
//! judged, so it has nothing to say about their order, and scored against a vector made of
//! themselves each would be lifted by its own share of it (a page one of three fed back meets
//! itself in a third of the moved vector). Left to reorder them, feedback put a wrong second
//! answer above a right first one on the manual pages (one right page per query; nDCG@10 −0.011
//! English, −0.007 German) and on CISI; kept in place, those losses go and Cranfield keeps most
//! of its gain (BENCHMARKS.md, "Feedback keeps its first answers in place").

use super::gather::Candidate;
use super::request::SearchRequest;
use super::score::{UnionWords, order, score_union};
use crate::reader::SourceReader;
use cairn_index::cosine;
use cairn_index::vectors::unit;
use std::collections::HashMap;

/// The first answers whose best chunks feed back. Few, as the first answers are the likeliest
/// to be right: on Cranfield, 3 to 5 give the same figures and 10 loses most of the gain (see
/// BENCHMARKS.md).
pub(crate) const FEEDBACK_PAGES: usize = 3;

/// The query's vector moved toward its feedback: the query plus the mean of the feedback
/// vectors (each of unit length), made unit length. The query and what its first answers say
/// weigh alike (Rocchio's α = β); `None` without feedback.
pub(super) fn rocchio(query: &[f32], feedback: &[Vec<f32>]) -> Option<Vec<f32>> {
    if feedback.is_empty() {
        return None;
    }
    let mut moved = unit(query.to_vec()).into_vec();
    let share = 1.0 / feedback.len() as f32;
    for v in feedback {
        for (m, x) in moved.iter_mut().zip(unit(v.clone()).iter()) {
            *m += share * x;
        }
    }
    Some(unit(moved).into_vec())
}

/// Whether the query gets feedback: it has a vector, the rule is on, and no candidate is named by
/// it (exactly, or by a phrase of it). A query that names a page is answered by the name;
/// feeding back around that page would only bring the pages nearest it up to its level.
fn applies(req: &SearchRequest, qvec: Option<&[f32]>, union: &[Candidate]) -> bool {
    qvec.is_some()
        && !req.ablation.without_feedback
        && !union.iter().any(|c| c.exact.is_some() || c.subject.is_some())
}

/// Give each candidate its best chunk's cosine with the query moved toward the best chunks of
/// the first [`FEEDBACK_PAGES`] answers (the union scored once as it is): those answers, as
/// (source, slug) in their order, which keep their places ahead of the rest (none without
/// feedback). A source whose vectors cannot be read leaves its candidates as they were.
pub(super) async fn feedback<R: SourceReader>(
    req: &SearchRequest,
    readers: &[&R],
    qvec: Option<&[f32]>,
    union: &mut [Candidate],
    words: &UnionWords,
) -> Vec<(String, String)> {
    let Some(q) = qvec.filter(|_| applies(req, qvec, union)) else { return Vec::new() };
    let vectors = best_chunk_vectors(readers, union).await;
    let first = order(score_union(req, union.to_vec(), words), &[], &[], union.len());
    let best_chunk = |source: &str, slug: &str| {
        let c = union.iter().find(|c| c.source == source && c.slug == slug)?;
        c.vector.as_ref().map(|(_, h)| (c.source.as_str(), h.chunk_id.as_str()))
    };
    let fed: Vec<Vec<f32>> = first
        .iter()
        .filter_map(|r| best_chunk(&r.source, &r.slug))
        .filter_map(|key| vectors.get(&key).cloned())
        .take(FEEDBACK_PAGES)
        .collect();
    let Some(moved) = rocchio(q, &fed) else { return Vec::new() };
    let kept = first.iter().take(FEEDBACK_PAGES).map(|r| (r.source.clone(), r.slug.clone())).collect();
    let scores: Vec<Option<f32>> = union
        .iter()
        .map(|c| {
            let (_, h) = c.vector.as_ref()?;
            let v = vectors.get(&(c.source.as_str(), h.chunk_id.as_str()))?;
            Some(cosine(&moved, &unit(v.clone())))
        })
        .collect();
    drop(vectors);
    for (c, s) in union.iter_mut().zip(scores) {
        c.feedback = s;
    }
    kept
}

/// Every candidate's best chunk's vector, by (source, chunk id): one read per source.
async fn best_chunk_vectors<'a, R: SourceReader>(
    readers: &[&R],
    union: &'a [Candidate],
) -> HashMap<(&'a str, &'a str), Vec<f32>> {
    let reads = readers.iter().map(|r| async move {
        let ids: Vec<&str> = union
            .iter()
            .filter(|c| c.source == r.id())
            .filter_map(|c| c.vector.as_ref().map(|(_, h)| h.chunk_id.as_str()))
            .collect();
        (r.id().to_string(), r.chunk_vectors(&ids).await.unwrap_or_default())
    });
    let read: Vec<(String, HashMap<String, Vec<f32>>)> = futures::future::join_all(reads).await;
    let mut out = HashMap::new();
    for c in union {
        let Some((_, h)) = c.vector.as_ref() else { continue };
        let from = read.iter().find(|(s, _)| *s == c.source).and_then(|(_, vs)| vs.get(&h.chunk_id));
        if let Some(v) = from {
            out.insert((c.source.as_str(), h.chunk_id.as_str()), v.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(v: &[f32]) -> f32 {
        v.iter().map(|x| x * x).sum::<f32>().sqrt()
    }

    #[test]
    fn rocchio_weighs_the_query_and_the_mean_of_its_feedback_alike() {
        assert_eq!(rocchio(&[1.0, 0.0], &[]), None);
        // Lengths do not count: only directions.
        let moved = rocchio(&[2.0, 0.0, 0.0], &[vec![0.0, 3.0, 0.0], vec![0.0, 0.0, 0.5]]).unwrap();
        let expected = [1.0, 0.5, 0.5];
        let n = norm(&expected);
        for (m, e) in moved.iter().zip(expected) {
            assert!((m - e / n).abs() < 1e-6, "{moved:?}");
        }
        assert!((norm(&moved) - 1.0).abs() < 1e-6);
        // Feedback that agrees with the query leaves it where it was.
        assert_eq!(rocchio(&[0.0, 1.0], &[vec![0.0, 4.0]]).unwrap(), [0.0, 1.0]);
    }
}
