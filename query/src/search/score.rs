//! The union scored: a relevance floor, keyword and cosine on one scale, the multipliers
//! (title phrase, template bodies), the final order, and the one-line why.

use super::gather::Candidate;
use super::request::SearchRequest;
use super::response::{Explain, ResultChunk, SearchResult};
use super::subject::{Terms, lift_subjects};
use crate::layers::{
    Evidence, ExactKind, HIGH_VECTOR_FLOOR, KEYWORD_WEIGHT, RELEVANCE_FLOOR, Signals, TEMPLATE_FACTOR,
    TEMPLATE_PAGES, TITLE_PHRASE_BOOST, evidence, title_phrase_match, union_bm25,
};
use cairn_index::PageRecord;
use cairn_index::resident::{Lang, QueryTerms, terms_in};
use std::collections::BTreeMap;

/// The relevance floor: a page only the vector arm found, and found weakly, is junk.
pub(super) fn relevance_floor(union: &mut Vec<Candidate>) {
    union.retain(|c| {
        c.exact.is_some()
            || c.title.is_some()
            || c.keyword.is_some()
            || c.vector.as_ref().is_some_and(|(_, h)| h.score >= RELEVANCE_FLOOR)
    });
}

/// What union scoring reads from the candidates' words, read once however often the union is
/// scored: the query's terms as each source reads them (in its language, with the parts of its
/// compounds), each candidate's BM25 over the union (normalised to 0..1), and each candidate's
/// names and best chunk (and subject name) as terms, in its source's language.
pub(super) struct UnionWords {
    queries: Vec<QueryTerms>,
    /// Each candidate's entry in `queries`.
    of: Vec<usize>,
    keyword: Vec<f32>,
    terms: Vec<Terms>,
}

impl UnionWords {
    /// The query's terms as candidate `i`'s source reads them.
    fn query(&self, i: usize) -> &QueryTerms {
        &self.queries[self.of[i]]
    }
}

/// The union's words: BM25 re-scored over the union with the union's own term statistics, for
/// scores comparable across sources. A candidate is scored against the query's terms as its own
/// source reads them (`read`, by source: a German page's words meet the query as German reads
/// it); a source not in `read` reads them in its language.
pub(super) fn union_words(
    req: &SearchRequest,
    union: &[Candidate],
    read: &[(String, QueryTerms)],
) -> UnionWords {
    let mut queries: Vec<QueryTerms> = Vec::new();
    let of: Vec<usize> = union
        .iter()
        .map(|c| {
            let terms = read
                .iter()
                .find(|(s, _)| *s == c.source)
                .map_or_else(|| QueryTerms::plain(c.lang, &req.query), |(_, t)| t.clone());
            match queries.iter().position(|q| *q == terms) {
                Some(i) => i,
                None => {
                    queries.push(terms);
                    queries.len() - 1
                }
            }
        })
        .collect();
    let fields: Vec<(Vec<String>, Vec<String>)> = union
        .iter()
        .map(|c| {
            let names = c
                .record
                .as_ref()
                .map_or_else(Vec::new, |p| terms_in(c.lang, &format!("{} {}", p.title, p.aliases.join(" "))));
            let chunk = c.keyword.as_ref().or(c.vector.as_ref()).map_or("", |(_, h)| h.text.as_str());
            (names, terms_in(c.lang, chunk))
        })
        .collect();
    let mut bm25 = vec![0.0f32; union.len()];
    for (q, query) in queries.iter().enumerate() {
        let scores = union_bm25(&query.all(), &fields, req.fields());
        for (i, s) in scores.into_iter().enumerate().filter(|(i, _)| of[*i] == q) {
            bm25[i] = s;
        }
    }
    let max_bm25 = bm25.iter().copied().fold(0.0f32, f32::max);
    let keyword = bm25.into_iter().map(|b| if max_bm25 > 0.0 { b / max_bm25 } else { 0.0 }).collect();
    // Candidates carry a subject only when the rule is on (see `subject_pages`).
    let terms = union
        .iter()
        .zip(fields)
        .map(|(c, (names, body))| Terms {
            name: c.subject.as_deref().map(|s| terms_in(c.lang, s)),
            doc: [names, body].concat(),
        })
        .collect();
    UnionWords { queries, of, keyword, terms }
}

/// Union scoring: the raw cosine of each candidate's best chunk (with the query as feedback moved
/// it, when it was) plus its BM25 over the union (`words`, of these same candidates in this
/// order); then each page's multipliers and evidence, and the subject lift.
pub(super) fn score_union(
    req: &SearchRequest,
    union: Vec<Candidate>,
    words: &UnionWords,
) -> Vec<SearchResult> {
    let mut results: Vec<SearchResult> = union
        .into_iter()
        .zip(&words.keyword)
        .zip(&words.terms)
        .enumerate()
        .map(|(i, ((c, keyword), t))| {
            let query = words.query(i);
            let all_terms_present = !query.words.is_empty() && query.words.iter().all(|q| t.doc.contains(q));
            scored_result(req, c, *keyword, all_terms_present)
        })
        .collect();
    // The query's terms in every language of the union (its one language's, usually).
    let query: Vec<String> = words.queries.iter().flat_map(|q| q.words.iter().cloned()).collect();
    lift_subjects(&mut results, &words.terms, &query);
    results
}

/// Multipliers on a page's base score: the title-phrase boost (the query a phrase of the title,
/// read in the page's language `lang`), and the template factor for a body that many pages share.
pub(super) fn multipliers(query: &str, record: Option<&PageRecord>, lang: Lang) -> Vec<(String, f32)> {
    let mut out = Vec::new();
    if record.is_some_and(|p| title_phrase_match(query, &p.title, lang)) {
        out.push(("title_phrase".to_string(), TITLE_PHRASE_BOOST));
    }
    if record.is_some_and(|p| p.body_shared_by >= TEMPLATE_PAGES) {
        out.push(("template".to_string(), TEMPLATE_FACTOR));
    }
    out
}

/// One candidate as a result: its base score, multipliers, evidence and best chunk.
pub(super) fn scored_result(
    req: &SearchRequest,
    c: Candidate,
    union_keyword: f32,
    all_terms_present: bool,
) -> SearchResult {
    let cosine = c.vector.as_ref().map(|(_, h)| h.score);
    // The score reads the cosine with the query as feedback moved it; the evidence, the query's
    // own.
    let base = c.feedback.or(cosine).unwrap_or(0.0) + KEYWORD_WEIGHT * union_keyword;
    let title = c.record.as_ref().map_or(String::new(), |p| p.title.clone());
    let multipliers = multipliers(&req.query, c.record.as_ref(), c.lang);
    let score = multipliers.iter().fold(base, |s, (_, m)| s * m);
    let signals = Signals {
        exact: c.exact,
        cosine,
        keyword_rank: c.keyword.as_ref().map(|(a, _)| a.rank),
        all_terms_present,
        subject: c.subject.is_some(),
    };
    let (evidence, create_safety) = evidence(&signals);
    let best = c.vector.as_ref().or(c.keyword.as_ref()).map(|(_, h)| ResultChunk {
        text: h.text.clone(),
        heading_path: h.heading_path.clone(),
        line_start: h.line_start,
        line_end: h.line_end,
        section: section_id(&c.source, &c.slug, &h.heading_path),
    });
    let explain = req.explain.then(|| Explain {
        keyword: c.keyword.as_ref().map(|(a, _)| *a),
        vector: c.vector.as_ref().map(|(a, _)| *a),
        title: c.title,
        fused_in_source: c.fused,
        union_keyword,
        feedback_cosine: c.feedback,
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
        learnt: None,
        subject: c.subject,
        stale: None,
        explain,
    }
}

/// Order: exact matches first (in the exact layer's order), then the answers feedback `kept` in
/// their places (source, slug: see [`super::feedback`]), then by score; `limit` kept.
pub(super) fn order(
    mut results: Vec<SearchResult>,
    exact: &[(String, PageRecord, ExactKind)],
    kept: &[(String, String)],
    limit: usize,
) -> Vec<SearchResult> {
    // Named pages first, in their order. A typo's pages (fuzzy) are a guess from spelling: they
    // share first place, by score, with the pages that hold every word of the query near the
    // top of their source (`keyword_exact`): words found as typed outweigh a guess.
    let slots = super::gather::named_slots(exact);
    let fuzzy = exact.first().is_some_and(|(_, _, k)| *k == ExactKind::Fuzzy);
    let exact_rank = |r: &SearchResult| {
        let at = exact.iter().take(slots).position(|(s, p, _)| *s == r.source && p.slug == r.slug);
        match at {
            Some(_) if fuzzy => 0,
            Some(i) => i,
            None if fuzzy && r.evidence.contains(&Evidence::KeywordExact) => 0,
            None => usize::MAX,
        }
    };
    let kept_rank = |r: &SearchResult| kept.iter().position(|(s, g)| *s == r.source && *g == r.slug);
    results.sort_by(|a, b| {
        exact_rank(a)
            .cmp(&exact_rank(b))
            .then(kept_rank(a).unwrap_or(usize::MAX).cmp(&kept_rank(b).unwrap_or(usize::MAX)))
            .then(b.score.total_cmp(&a.score))
            .then(a.source.cmp(&b.source))
            .then(a.slug.cmp(&b.slug))
    });
    results.truncate(limit);
    results
}

pub(super) fn why(s: &Signals, ev: &[Evidence]) -> String {
    let mut parts: BTreeMap<&str, String> = BTreeMap::new();
    if let Some(k) = s.exact {
        let what = match k {
            ExactKind::Learnt => "the query is a name the vault taught the page".to_string(),
            ExactKind::Fuzzy => "the query is a typo away from one of the page's names".to_string(),
            k => format!("the query equals the page's {k:?}").to_lowercase(),
        };
        parts.insert("exact", what);
    }
    if s.subject {
        parts.insert("subject", "a phrase of the query is the page's name".to_string());
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

/// `SOURCE:SLUG#ANCHOR` of the section a chunk with this heading path is in (see
/// [`cairn_ingest::section`]); `SOURCE:SLUG` before the first heading.
pub fn section_id(source: &str, slug: &str, heading_path: &str) -> String {
    match cairn_ingest::section::anchor_of_stored(heading_path) {
        a if a.is_empty() => format!("{source}:{slug}"),
        a => format!("{source}:{slug}#{a}"),
    }
}
