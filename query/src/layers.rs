//! The retrieval layers as plain functions over plain data: max-pool, reciprocal-rank fusion,
//! BM25 over the union, the title-phrase boost, and evidence. Tested without a runtime.

use cairn_index::ChunkHit;
use cairn_index::resident::keyword::Bm25;
pub use cairn_index::resident::terms;
use cairn_index::resident::{Fields, Lang};
use cairn_ingest::tokens;
use std::collections::HashMap;

/// Reciprocal-rank fusion constant (Cormack et al.; the usual starting point).
pub const RRF_K: f32 = 60.0;
/// Multiplier for a query that is the title or a contiguous phrase of it.
pub const TITLE_PHRASE_BOOST: f32 = 1.25;
/// Weight of the union-wide BM25 (normalised to 0..1) next to the raw cosine in the base score.
pub const KEYWORD_WEIGHT: f32 = 0.3;
/// Raw cosine (all-MiniLM-L6-v2) at or above which a page's best chunk counts as a
/// `high_vector_match`: a page close in meaning exists. It makes a result `probable`, never
/// `exists`: measured on held-out pages (`cairn eval --exists`, BENCHMARKS.md), related but
/// different pages reach 0.65–0.89 against a missing page's own title, so no floor both keeps
/// false `exists` at zero and leaves the vector arm any say; a page's names are what prove it.
pub const HIGH_VECTOR_FLOOR: f32 = 0.65;
/// A result found by the vector arm alone (no keyword, title or exact match) is junk below this
/// raw cosine and is dropped: unrelated pages of this model score under 0.2.
pub const RELEVANCE_FLOOR: f32 = 0.2;
/// Multiplier for a template page: one whose body (its text without headings) other pages of
/// its source repeat word for word ([`TEMPLATE_PAGES`] or more with it), such as a bulk export's
/// stubs or empty daily notes. It says nothing beyond its name, and its name is what the exact
/// layer is for; as an answer to a question it is weak evidence, and a bulk source of such pages
/// named after the query's words must not outrank the page that answers. A short note with a
/// body of its own is never one, however short.
pub const TEMPLATE_FACTOR: f32 = 0.5;
/// Pages sharing one body before it counts as a template: a copy is two; three is a pattern.
pub const TEMPLATE_PAGES: u32 = 3;

/// Bumped whenever scoring changes, so telemetry of different versions is never compared.
/// 2026-12-01.1: `exists` from names only, exact names of any length, template pages instead of
/// thin ones, the keyword arm's stop words. 2026-12-04.1: the union re-scoring reads words with
/// the keyword arm's analyzer (Snowball stems) instead of a suffix stripper of its own.
/// 2026-12-04.2: names the vault teaches (short forms its text defines, link texts) name pages.
/// 2026-12-05.1: subject pages (a phrase of the query names them) rank above the pages that
/// merely mention them.
/// 2026-12-06.1: keyword scores keep names and headings apart from text (BM25F), in each source
/// and over the union.
/// 2026-12-07.1: a query that names no page is moved toward its first answers' vectors (feedback).
/// 2026-12-07.2: feedback keeps the first answers it was fed in their places; the title-phrase
/// boost counts content words in the source's language.
/// 2026-12-07.3: every source gathers a window of 100 candidates in `balanced`, whatever the
/// limit.
/// 2026-12-07.4: in a language that writes compounds as one word, a query's compound its source
/// never holds is read as the parts it holds too.
/// 2026-12-07.5: BM25 counts a word the query repeats once for each time it says it.
/// 2026-12-07.6: in those languages a query word is met by the source's compounds that end in it,
/// counted as that word.
pub const SCORING_VERSION: &str = "2026-12-07.6";

/// Each page's best chunk, pages in order of their best chunk (hits must be sorted best first,
/// as the store returns them). A page is its best chunk, never whichever chunk came first.
pub fn max_pool(hits: &[ChunkHit]) -> Vec<ChunkHit> {
    let mut best: HashMap<&str, usize> = HashMap::new();
    let mut order: Vec<usize> = Vec::new();
    for (i, h) in hits.iter().enumerate() {
        match best.get(h.slug.as_str()) {
            Some(&j) if hits[j].score >= h.score => {}
            Some(&j) => {
                let pos = order.iter().position(|&o| o == j).expect("pooled");
                order[pos] = i;
                best.insert(&h.slug, i);
            }
            None => {
                best.insert(&h.slug, i);
                order.push(i);
            }
        }
    }
    let mut pooled: Vec<ChunkHit> = order.into_iter().map(|i| hits[i].clone()).collect();
    pooled.sort_by(|a, b| b.score.total_cmp(&a.score));
    pooled
}

/// Fuse rankings (each a list of ids, best first) by reciprocal rank: Σ 1 / (k + rank).
pub fn rrf<'a>(rankings: &[Vec<&'a str>]) -> HashMap<&'a str, f32> {
    let mut fused: HashMap<&str, f32> = HashMap::new();
    for ranking in rankings {
        for (i, id) in ranking.iter().enumerate() {
            *fused.entry(id).or_default() += 1.0 / (RRF_K + i as f32 + 1.0);
        }
    }
    fused
}

/// BM25 of the query against each document (its names' terms, then its body's), with term
/// statistics taken over these documents: the candidates of every source together, so scores
/// are comparable across sources (each source's own BM25 uses its own statistics and is not).
/// The query and the documents come as the keyword arm's terms ([`terms`]: one analyzer, so both
/// agree on which words match), and are scored by the keyword index's own BM25, the fields as
/// `fields` says.
pub fn union_bm25(q: &[String], docs: &[(Vec<String>, Vec<String>)], fields: Fields) -> Vec<f32> {
    let mut index = Bm25::default();
    for (i, (names, body)) in docs.iter().enumerate() {
        index.insert_fields(i as u32, names, body);
    }
    let mut scores = vec![0.0; docs.len()];
    for (d, s) in index.scores(q, fields) {
        scores[d as usize] = s;
    }
    scores
}

/// Whether the query is the title, or a contiguous run of the title's tokens holding at least
/// two content words (not stop words of the page's language `lang`). Bags of words do not count.
pub fn title_phrase_match(query: &str, title: &str, lang: Lang) -> bool {
    let (q, t) = (tokens(query), tokens(title));
    if q.is_empty() || t.is_empty() {
        return false;
    }
    if q == t {
        return true;
    }
    let content = q.iter().filter(|w| !cairn_index::resident::is_stop_word_in(lang, w)).count();
    content >= 2 && t.windows(q.len()).any(|w| w == q.as_slice())
}

/// Why a result matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Evidence {
    AliasHit,
    ExactTitleMatch,
    /// The query is the page's file name (without folder and extension).
    FileNameMatch,
    /// The query is a name the vault taught the page (a short form defined in its text, a link's
    /// display text): the result's `learnt` says where.
    LearntName,
    /// The query is a typo away (one or two edits) from the page's title, alias or file name,
    /// and names no page outright.
    FuzzyName,
    /// A phrase of the query is the page's name (its title, an alias, its file name or a name
    /// the vault taught it): the page is the query's subject; the result's `subject` says which.
    SubjectName,
    HighVectorMatch,
    KeywordExact,
    WeakSemantic,
}

/// Whether a page on the query's subject certainly exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CreateSafety {
    Exists,
    Probable,
    Unknown,
}

/// The word a value has in the JSON output (`alias_hit`, `exists`, `balanced`): the same word
/// in the text output.
pub(crate) fn words(v: &impl serde::Serialize, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => f.write_str(&s),
        _ => Err(std::fmt::Error),
    }
}

impl std::fmt::Display for Evidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        words(self, f)
    }
}

impl std::fmt::Display for CreateSafety {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        words(self, f)
    }
}

/// How an exact lookup matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExactKind {
    Title,
    Slug,
    FileName,
    Alias,
    /// A name the vault taught the page: weaker than its own names.
    Learnt,
    /// One or two edits from one of the page's own names (a typo): weaker still, never proof.
    Fuzzy,
}

/// The facts evidence is derived from (raw signals, never a blended score).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Signals {
    pub exact: Option<ExactKind>,
    pub cosine: Option<f32>,
    /// Rank of the page in its source's keyword arm (1 = best).
    pub keyword_rank: Option<usize>,
    /// Every content word of the query appears in the page's title or best keyword chunk.
    pub all_terms_present: bool,
    /// A phrase of the query (not all of it) is the page's name.
    pub subject: bool,
}

/// Evidence and create-safety from the signals.
pub fn evidence(s: &Signals) -> (Vec<Evidence>, CreateSafety) {
    let mut ev = Vec::new();
    match s.exact {
        Some(ExactKind::Alias) => ev.push(Evidence::AliasHit),
        Some(ExactKind::Title | ExactKind::Slug) => ev.push(Evidence::ExactTitleMatch),
        Some(ExactKind::FileName) => ev.push(Evidence::FileNameMatch),
        Some(ExactKind::Learnt) => ev.push(Evidence::LearntName),
        Some(ExactKind::Fuzzy) => ev.push(Evidence::FuzzyName),
        None => {}
    }
    if s.subject {
        ev.push(Evidence::SubjectName);
    }
    if s.cosine.is_some_and(|c| c >= HIGH_VECTOR_FLOOR) {
        ev.push(Evidence::HighVectorMatch);
    }
    if s.keyword_rank.is_some_and(|r| r <= 3) && s.all_terms_present {
        ev.push(Evidence::KeywordExact);
    }
    // Only a page's own names, equal to the whole query, prove it exists; a learnt name, a name
    // that is only part of the query, meaning and keywords make it probable.
    let named = ev
        .iter()
        .any(|e| matches!(e, Evidence::AliasHit | Evidence::ExactTitleMatch | Evidence::FileNameMatch));
    let safety = if named {
        CreateSafety::Exists
    } else if ev.iter().any(|e| {
        matches!(
            e,
            Evidence::LearntName
                | Evidence::FuzzyName
                | Evidence::SubjectName
                | Evidence::KeywordExact
                | Evidence::HighVectorMatch
        )
    }) {
        CreateSafety::Probable
    } else {
        ev.push(Evidence::WeakSemantic);
        CreateSafety::Unknown
    };
    (ev, safety)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(slug: &str, ordinal: i32, score: f32) -> ChunkHit {
        ChunkHit {
            slug: slug.into(),
            chunk_id: format!("{slug}#{ordinal}"),
            ordinal,
            heading_path: String::new(),
            text: String::new(),
            line_start: 1,
            line_end: 1,
            score,
        }
    }

    #[test]
    fn a_page_is_ranked_by_its_best_chunk() {
        // The amphitheater's title chunk (0.9) beats its body chunks; another page has one 0.7.
        let hits =
            vec![hit("amphi", 0, 0.9), hit("other", 0, 0.7), hit("amphi", 3, 0.2), hit("amphi", 1, 0.1)];
        let pooled = max_pool(&hits);
        assert_eq!(pooled.len(), 2);
        assert_eq!((pooled[0].slug.as_str(), pooled[0].ordinal, pooled[0].score), ("amphi", 0, 0.9));
        // Even if the hits arrive unsorted, the best chunk represents the page.
        let pooled = max_pool(&[hit("a", 1, 0.1), hit("b", 0, 0.5), hit("a", 0, 0.8)]);
        assert_eq!((pooled[0].slug.as_str(), pooled[0].score), ("a", 0.8));
    }

    #[test]
    fn rrf_rewards_agreement_between_arms() {
        let fused = rrf(&[vec!["a", "b", "c"], vec!["b", "a"], vec!["b"]]);
        assert!(fused["b"] > fused["a"] && fused["a"] > fused["c"]);
        assert!((fused["c"] - 1.0 / 63.0).abs() < 1e-6);
    }

    /// [`union_bm25`] of texts, through the analyzer.
    fn bm25(query: &str, docs: &[String]) -> Vec<f32> {
        let docs: Vec<_> = docs.iter().map(|d| (Vec::new(), terms(d))).collect();
        union_bm25(&terms(query), &docs, Fields::Apart)
    }

    #[test]
    fn union_bm25_prefers_rare_matching_terms_and_ignores_stopwords() {
        let docs = vec![
            "data platform events no documented columns".to_string(),
            "Maria leads the data platform team".to_string(),
            "sourdough bread".to_string(),
        ];
        let s = bm25("who leads the data platform team", &docs);
        assert!(s[1] > s[0] && s[0] > s[2], "{s:?}");
        assert_eq!(s[2], 0.0);
        assert_eq!(bm25("the of", &docs), vec![0.0; 3]);
    }

    #[test]
    fn union_bm25_reads_a_page_s_names_apart_from_its_text() {
        let docs = vec![
            (terms("Harbour"), terms("ferries leave at dawn from the north quay past the lighthouse")),
            (terms("Lighthouse"), terms("the lighthouse stands above the harbour and guides ferries")),
        ];
        let q = terms("harbour");
        // Run together, the shorter text wins: both say the word once.
        let together = union_bm25(&q, &docs, Fields::Together);
        assert!(together[1] > together[0], "{together:?}");
        // Apart, the page named by the word wins: a name, whole, weighs what a text does.
        let apart = union_bm25(&q, &docs, Fields::Apart);
        assert!(apart[0] > apart[1], "{apart:?}");
    }

    #[test]
    fn forms_of_a_word_meet_as_the_keyword_arm_stems_them() {
        assert_eq!(terms("debating"), terms("debate"));
        assert_eq!(terms("forums"), terms("forum"));
        assert_eq!(terms("libraries"), terms("library"));
        assert!(terms("the of").is_empty(), "stop words are no terms");
        let s = bm25("debating in public forums", &["a forum for public debate".into(), "bread".into()]);
        assert!(s[0] > 0.0 && s[1] == 0.0);
    }

    #[test]
    fn title_phrase_needs_a_contiguous_run_of_two_content_words() {
        let title = "The Example Hall — Indoor Greek Amphitheater for Adversarial Debate";
        assert!(title_phrase_match("greek amphitheater", title, Lang::English));
        assert!(title_phrase_match("Indoor Greek Amphitheater", title, Lang::English));
        assert!(
            !title_phrase_match("amphitheater greek", title, Lang::English),
            "order matters: no bag of words"
        );
        assert!(
            !title_phrase_match("amphitheater", title, Lang::English),
            "one content word is not a phrase"
        );
        assert!(!title_phrase_match("for the", title, Lang::English));
        assert!(title_phrase_match("sourdough", "Sourdough", Lang::English), "the whole title always counts");
        // Content words are read in the page's language: "die" is an article in German.
        let german = Lang::parse("de").unwrap();
        let titel = "Über die Katze des Nachbarn";
        assert!(!title_phrase_match("die Katze", titel, german), "one content word in German");
        assert!(title_phrase_match("die Katze", titel, Lang::English), "two in English");
        assert!(title_phrase_match("Katze des Nachbarn", titel, german));
    }

    #[test]
    fn evidence_is_grounded_in_raw_signals() {
        let (ev, safety) = evidence(&Signals { exact: Some(ExactKind::Alias), ..Signals::default() });
        assert_eq!((ev, safety), (vec![Evidence::AliasHit], CreateSafety::Exists));
        let (ev, safety) = evidence(&Signals { cosine: Some(0.8), ..Signals::default() });
        assert_eq!(
            (ev, safety),
            (vec![Evidence::HighVectorMatch], CreateSafety::Probable),
            "close in meaning is not proof"
        );
        let kw = Signals {
            cosine: Some(0.3),
            keyword_rank: Some(1),
            all_terms_present: true,
            exact: None,
            subject: false,
        };
        assert_eq!(evidence(&kw), (vec![Evidence::KeywordExact], CreateSafety::Probable));
        let weak = Signals {
            cosine: Some(0.4),
            keyword_rank: Some(1),
            all_terms_present: false,
            exact: None,
            subject: false,
        };
        assert_eq!(evidence(&weak), (vec![Evidence::WeakSemantic], CreateSafety::Unknown));
    }
}
