//! Feedback on the query's vector (Rocchio's relevance feedback, its answers taken as judged,
//! as pseudo-relevance feedback does): a query that describes what it wants, rather than naming
//! a page, is moved toward the vectors of its first answers' best chunks, and every candidate's
//! best chunk is scored again against the moved vector. Pages that say what the first answers
//! say in other words than the query's come up; the candidates stay those the arms gathered.
//! Its keyword twin (RM3) expands the query's words with its first answers' likeliest words, and
//! every candidate's BM25 over the union is scored again against them.

use super::gather::Candidate;
use super::request::SearchRequest;
use super::response::SearchResult;
use super::score::{UnionWords, order, score_union};
use crate::layers::union_bm25_weighted;
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

/// Whether a candidate is named by the query (exactly, or by a phrase of it). A query that
/// names a page is answered by the name; feeding back around that page would only bring the
/// pages nearest it up to its level.
fn named(union: &[Candidate]) -> bool {
    union.iter().any(|c| c.exact.is_some() || c.subject.is_some())
}

/// Feedback for a query that names no candidate, each kind as its rule says. Keyword feedback:
/// each candidate's BM25 over the union against the query expanded with its first answers'
/// words ([`rm3`]). Vector feedback: each candidate's best chunk's cosine with the query moved
/// toward the best chunks of the first [`FEEDBACK_PAGES`] answers ([`rocchio`]). The first
/// answers are the union scored once as it is; a source whose vectors cannot be read leaves
/// its candidates' cosines as they were.
pub(super) async fn feedback<R: SourceReader>(
    req: &SearchRequest,
    readers: &[&R],
    qvec: Option<&[f32]>,
    union: &mut [Candidate],
    words: &UnionWords,
) {
    let vector = qvec.filter(|_| !req.without_feedback);
    if named(union) || vector.is_none() && req.without_keyword_feedback {
        return;
    }
    let first = order(score_union(req, union.to_vec(), words), &[], union.len());
    if !req.without_keyword_feedback {
        keyword_feedback(req, union, words, &first);
    }
    let Some(q) = vector else { return };
    let vectors = best_chunk_vectors(readers, union).await;
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
    let Some(moved) = rocchio(q, &fed) else { return };
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
}

/// RM3's parameters are the published defaults (Anserini's, after Abdul-Jaleel et al. 2004:
/// 10 answers, 10 words, the query weighing half), not fitted here: on Cranfield and CISI they
/// won on both, where three answers (the vector feedback's count) lost Hit@1 on both (see
/// BENCHMARKS.md). The first answers whose words feed back.
const RM3_PAGES: usize = 10;

/// The words the relevance model of the first answers adds to the query, at most.
const FEEDBACK_TERMS: usize = 10;

/// The query's own share of the expanded query (RM3's original-query weight).
const QUERY_SHARE: f32 = 0.5;

/// RM3 (Abdul-Jaleel et al. 2004): the relevance model of the first answers (Lavrenko & Croft
/// 2001: each word's share of each answer's text, weighed by the answer's score), its
/// [`FEEDBACK_TERMS`] likeliest words mixed with the query's own words, [`QUERY_SHARE`] each.
/// `fed`: each answer's terms and score. Sorted by term.
pub(super) fn rm3(query: &[String], fed: &[(&[String], f32)]) -> Vec<(String, f32)> {
    let total: f32 = fed.iter().filter(|(d, _)| !d.is_empty()).map(|(_, w)| w.max(0.0)).sum();
    let mut model: HashMap<&str, f32> = HashMap::new();
    for (doc, w) in fed.iter().filter(|(d, _)| !d.is_empty()) {
        let share = if total > 0.0 { w.max(0.0) / total } else { 1.0 / fed.len() as f32 };
        for t in doc.iter() {
            *model.entry(t.as_str()).or_default() += share / doc.len() as f32;
        }
    }
    let mut top: Vec<(&str, f32)> = model.into_iter().collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    top.truncate(FEEDBACK_TERMS);
    let mass: f32 = top.iter().map(|(_, p)| p).sum();
    let mut out: HashMap<String, f32> = HashMap::new();
    for q in query {
        *out.entry(q.clone()).or_default() += QUERY_SHARE / query.len() as f32;
    }
    for (t, p) in top.into_iter().filter(|_| mass > 0.0) {
        *out.entry(t.to_string()).or_default() += (1.0 - QUERY_SHARE) * p / mass;
    }
    let mut out: Vec<(String, f32)> = out.into_iter().collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Each candidate's BM25 over the union against the query RM3 expanded with its first
/// [`RM3_PAGES`] answers' words (normalised as the query's own); a union read in more
/// than one language is left as it is.
fn keyword_feedback(
    req: &SearchRequest,
    union: &mut [Candidate],
    words: &UnionWords,
    first: &[SearchResult],
) {
    let Some(query) = words.one_query() else { return };
    let at = |r: &SearchResult| union.iter().position(|c| c.source == r.source && c.slug == r.slug);
    let fed: Vec<(&[String], f32)> = first
        .iter()
        .filter_map(|r| at(r).map(|i| (words.fields[i].1.as_slice(), r.score)))
        .take(RM3_PAGES)
        .collect();
    let expanded = rm3(query, &fed);
    let weighted: Vec<(&str, f32)> = expanded.iter().map(|(t, w)| (t.as_str(), *w)).collect();
    let scores = union_bm25_weighted(&weighted, &words.fields, req.fields());
    let max = scores.iter().copied().fold(0.0f32, f32::max);
    for (c, s) in union.iter_mut().zip(scores) {
        c.feedback_keyword = Some(if max > 0.0 { s / max } else { 0.0 });
    }
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

    #[test]
    fn rm3_gives_the_query_half_and_the_first_answers_likeliest_words_the_other_half() {
        let terms = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let query = terms("glacier melt");
        let (a, b) = (terms("glacier ice ice moraine"), terms("ice field"));
        let out = rm3(&query, &[(&a, 3.0), (&b, 1.0)]);
        let w = |t: &str| out.iter().find(|(x, _)| x == t).map_or(0.0, |(_, w)| *w);
        assert!((out.iter().map(|(_, w)| w).sum::<f32>() - 1.0).abs() < 1e-6, "{out:?}");
        // P(ice|R) = 3/4 * 2/4 + 1/4 * 1/2 = 0.5 of the model's mass, halved.
        assert!((w("ice") - 0.25).abs() < 1e-6, "{out:?}");
        assert!((w("melt") - 0.25).abs() < 1e-6, "the query's own word, in no answer: {out:?}");
        assert!(w("glacier") > w("melt") && w("glacier") > w("field"), "{out:?}");
        assert_eq!(w("cheese"), 0.0);
        // At most FEEDBACK_TERMS words come from the answers.
        let long = terms(&(0..30).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" "));
        let out = rm3(&query, &[(&long, 1.0)]);
        assert_eq!(out.len(), FEEDBACK_TERMS + query.len());
        // No answers: the query alone, half its weight (the other half has nothing to go to).
        assert_eq!(rm3(&query, &[]), vec![("glacier".to_string(), 0.25), ("melt".to_string(), 0.25)]);
    }
}
