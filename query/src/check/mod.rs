//! `check`: before an agent writes a note, the draft it holds (a title, maybe aliases, a body in
//! its own words) against the index: does a page on that subject exist already?
//!
//! Each part of the draft is asked as a search does: the title and each alias as names, the body
//! chunked as a page is chunked, each chunk asked whole (so every source's gather, max-pool and
//! arms run on it). What each part found is combined per page, and the page gets a verdict:
//!
//! - `exists`: one of the draft's names is the page's own name (title, alias, file name): the
//!   same rule as `create_safety: exists`, never from a score;
//! - `probable`: strong evidence the page is the draft's subject: a name of the draft is a name
//!   the vault taught the page, a typo of one of its names, or a phrase of it is the page's name;
//!   or the draft's body and the page's best chunk agree in meaning (cosine at or above
//!   [`HIGH_VECTOR_FLOOR`]) *and* in words (the page is among its source's first
//!   [`BODY_KEYWORD_RANK`] by keywords for that chunk);
//! - `related`: a page the body finds by meaning or by words alone: one the draft should link to.
//!
//! The draft's verdict is its best page's; `none` when no page is even related, said with the
//! freshness caveats the searches carried. `check` reads only: it never merges or writes.

use crate::Mode;
use crate::layers::{CreateSafety, Evidence, HIGH_VECTOR_FLOOR};
use crate::search::{SearchRequest, SearchResponse};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A body chunk's page counts as agreeing in words when it is among its source's first this
/// many pages by keywords: the rank `keyword_exact` asks for (which a chunk-long query, whose
/// words no page holds all of, cannot meet).
pub const BODY_KEYWORD_RANK: usize = 3;
/// Body chunks asked at most (a draft longer than this many chunks is asked by its first ones).
pub const MAX_BODY_CHUNKS: usize = 8;
/// Candidates a check lists at most.
pub const MAX_CANDIDATES: usize = 10;
/// The candidates each source gathers for one part (its rank window): the pages near the top of
/// the arms for that part, as the verdict's ranks are read; not the deeper window a search uses
/// (through it, 25 of 225 drafts whose page exists fell from `probable` to `related`:
/// BENCHMARKS.md, "A window that does not depend on the limit").
pub const PART_WINDOW: usize = 10;

/// A note an agent is about to write.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Draft {
    pub title: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub body: String,
    /// Only these sources (default: every source).
    #[serde(default)]
    pub sources: Vec<String>,
}

/// What a check found: for the draft, and for each page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Exists,
    Probable,
    Related,
    None,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::layers::words(self, f)
    }
}

/// Which part of the draft found a page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "part", rename_all = "snake_case")]
pub enum Part {
    Title,
    Alias {
        alias: String,
    },
    /// Body chunk `chunk` (0-based), starting at `line` of the body.
    Body {
        chunk: usize,
        line: u32,
    },
}

/// How one part of the draft found a page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartEvidence {
    #[serde(flatten)]
    pub part: Part,
    pub evidence: Vec<Evidence>,
    pub create_safety: CreateSafety,
    /// The page's best chunk's cosine with this part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f32>,
    /// The page's rank by keywords in its source, for this part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keyword_rank: Option<usize>,
    /// Its rank in this part's answer (1 = first).
    pub rank: usize,
    /// The part is a run of the page's title (at least two content words, or all of it).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub title_phrase: bool,
}

/// A page the draft may be about, or should link to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    pub source: String,
    pub slug: String,
    pub title: String,
    pub path: String,
    pub verdict: Verdict,
    /// What to do about it.
    pub advice: String,
    pub parts: Vec<PartEvidence>,
}

/// The answer to `check`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub verdict: Verdict,
    pub candidates: Vec<Candidate>,
    /// Body chunks asked (0: no body).
    pub body_chunks: usize,
    /// From the searches: every `degraded` entry once.
    pub degraded: Vec<String>,
    /// Changes not searchable yet, over the searches (absent when a search could not say).
    pub pending_changes: Option<u64>,
    pub vectors_pending: Option<usize>,
    pub notes: Vec<String>,
}

/// The searches a draft is asked as: each part and its request.
pub fn requests(draft: &Draft) -> Vec<(Part, SearchRequest)> {
    let ask = |q: &str, explain: bool| SearchRequest {
        sources: draft.sources.clone(),
        mode: Mode::Balanced,
        limit: MAX_CANDIDATES,
        window: Some(PART_WINDOW),
        explain,
        ..SearchRequest::new(q.to_string())
    };
    let mut out = Vec::new();
    if !draft.title.trim().is_empty() {
        out.push((Part::Title, ask(draft.title.trim(), false)));
    }
    for a in draft.aliases.iter().map(|a| a.trim()).filter(|a| !a.is_empty()) {
        out.push((Part::Alias { alias: a.to_string() }, ask(a, false)));
    }
    for (i, (line, text)) in body_chunks(&draft.title, &draft.body).into_iter().enumerate() {
        out.push((Part::Body { chunk: i, line }, ask(&text, true)));
    }
    out
}

/// The body as a page's body is chunked (under the draft's title), each chunk's text clipped to
/// what a query may hold; with the body line each starts at.
pub fn body_chunks(title: &str, body: &str) -> Vec<(u32, String)> {
    if body.trim().is_empty() {
        return Vec::new();
    }
    let text = format!("# {}\n\n{body}", if title.trim().is_empty() { "Draft" } else { title.trim() });
    let opts = cairn_ingest::ParseOptions::default();
    let Ok(page) =
        cairn_ingest::parse_page("check", std::path::Path::new("draft.md"), text.as_bytes(), &opts)
    else {
        return vec![(1, clip(body))];
    };
    page.chunks
        .iter()
        .filter(|c| !c.text.trim().is_empty())
        .take(MAX_BODY_CHUNKS)
        .map(|c| (c.line_start.saturating_sub(2).max(1), clip(&c.text)))
        .collect()
}

/// At most [`crate::search::MAX_QUERY_BYTES`], cut at a character boundary.
fn clip(text: &str) -> String {
    let max = crate::search::MAX_QUERY_BYTES;
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

/// Ask every part through `search` (the caller's: an index in memory, the owner over its socket),
/// a few at a time, and judge.
pub async fn check<F, Fut, E>(draft: &Draft, search: F) -> std::result::Result<CheckReport, E>
where
    F: Fn(SearchRequest) -> Fut,
    Fut: std::future::Future<Output = std::result::Result<SearchResponse, E>>,
    E: From<crate::QueryError>,
{
    use futures::StreamExt;
    let asked = requests(draft);
    if asked.is_empty() {
        return Err(crate::QueryError::EmptyQuery.into());
    }
    // The futures made up front from owned requests: a stream mapping borrowed ones is not
    // `Send` for every lifetime, which a tool server's futures must be.
    let pending: Vec<Fut> = asked.iter().map(|(_, r)| search(r.clone())).collect();
    let answers: Vec<std::result::Result<SearchResponse, E>> =
        futures::stream::iter(pending).buffered(4).collect().await;
    let mut parts = Vec::with_capacity(asked.len());
    for ((part, _), answer) in asked.into_iter().zip(answers) {
        parts.push((part, answer?));
    }
    Ok(judge(&parts))
}

/// The per-page verdicts from what each part's search answered (pure).
pub fn judge(parts: &[(Part, SearchResponse)]) -> CheckReport {
    let mut pages: BTreeMap<(String, String), Candidate> = BTreeMap::new();
    for (part, resp) in parts {
        for (i, r) in resp.results.iter().enumerate() {
            let c = pages.entry((r.source.clone(), r.slug.clone())).or_insert_with(|| Candidate {
                source: r.source.clone(),
                slug: r.slug.clone(),
                title: r.title.clone(),
                path: r.path.clone(),
                verdict: Verdict::None,
                advice: String::new(),
                parts: Vec::new(),
            });
            c.parts.push(PartEvidence {
                part: part.clone(),
                evidence: r.evidence.clone(),
                create_safety: r.create_safety,
                cosine: r.cosine,
                keyword_rank: r.explain.as_ref().and_then(|e| e.keyword.as_ref()).map(|k| k.rank),
                rank: i + 1,
                title_phrase: r.boosts.iter().any(|b| b == "title_phrase"),
            });
        }
    }
    let has_body = parts.iter().any(|(p, _)| matches!(p, Part::Body { .. }));
    let mut candidates: Vec<Candidate> = pages
        .into_values()
        .map(|mut c| {
            c.verdict = page_verdict(&c.parts, has_body);
            c.advice = advice(&c);
            c
        })
        .filter(|c| c.verdict != Verdict::None)
        .collect();
    // Best verdict first; within one, the page found best by any part. (Fusing every part's
    // ranks instead, as RRF fuses a search's arms, put the target first less often on drafts
    // written from GCIDE: 33 of 225 against 43.)
    let best_rank = |c: &Candidate| c.parts.iter().map(|p| p.rank).min().unwrap_or(usize::MAX);
    let best_cos = |c: &Candidate| c.parts.iter().filter_map(|p| p.cosine).fold(f32::MIN, f32::max);
    candidates.sort_by(|a, b| {
        a.verdict
            .cmp(&b.verdict)
            .then(best_rank(a).cmp(&best_rank(b)))
            .then(best_cos(b).total_cmp(&best_cos(a)))
            .then(a.source.cmp(&b.source))
            .then(a.slug.cmp(&b.slug))
    });
    candidates.truncate(MAX_CANDIDATES);
    let verdict = candidates.first().map_or(Verdict::None, |c| c.verdict);
    let mut report = CheckReport {
        verdict,
        candidates,
        body_chunks: parts.iter().filter(|(p, _)| matches!(p, Part::Body { .. })).count(),
        degraded: Vec::new(),
        pending_changes: Some(0),
        vectors_pending: None,
        notes: Vec::new(),
    };
    caveats(&mut report, parts);
    report
}

/// A page's verdict: its parts' best, except that a name of the draft that only contains the
/// page's name (a phrase of the title, a subject named in it) is not enough when the draft has a
/// body and the body does not find the page at all: "a machine for measuring time" names
/// `machine`, and its body is about clocks.
fn page_verdict(parts: &[PartEvidence], has_body: bool) -> Verdict {
    let best = parts.iter().map(part_verdict).min().unwrap_or(Verdict::None);
    let body_found = parts.iter().any(|p| matches!(p.part, Part::Body { .. }));
    let by_a_name = |p: &PartEvidence| {
        part_verdict(p) == Verdict::Probable && matches!(p.part, Part::Title | Part::Alias { .. })
    };
    let vouched = parts.iter().any(|p| by_a_name(p) && vouched_name(p));
    if best == Verdict::Probable && has_body && !body_found && !vouched && parts.iter().any(by_a_name) {
        // Only the names found it, by a phrase: a page to link to.
        return Verdict::Related;
    }
    best
}

/// A name the vault taught the page, or a typo of one of its names: the draft's name stands
/// for the page's whole name, not a word of it.
fn vouched_name(p: &PartEvidence) -> bool {
    p.evidence.iter().any(|e| matches!(e, Evidence::LearntName | Evidence::FuzzyName))
}

/// One part's verdict on its page (see the module's doc).
fn part_verdict(p: &PartEvidence) -> Verdict {
    let named = matches!(p.part, Part::Title | Part::Alias { .. });
    // A stale page (its file changed or went) is never `exists` in a search: nor here.
    if named && p.create_safety == CreateSafety::Exists {
        return Verdict::Exists;
    }
    let taught = p
        .evidence
        .iter()
        .any(|e| matches!(e, Evidence::LearntName | Evidence::FuzzyName | Evidence::SubjectName));
    if named && (taught || p.title_phrase) {
        return Verdict::Probable;
    }
    let meaning = p.cosine.is_some_and(|x| x >= HIGH_VECTOR_FLOOR);
    let words = p.keyword_rank.is_some_and(|r| r <= BODY_KEYWORD_RANK)
        || p.evidence.contains(&Evidence::KeywordExact);
    match (&p.part, meaning, words) {
        (Part::Body { .. }, true, true) => Verdict::Probable,
        (_, true, _) | (_, _, true) => Verdict::Related,
        _ => Verdict::None,
    }
}

fn advice(c: &Candidate) -> String {
    let id = format!("{}:{}", c.source, c.slug);
    match c.verdict {
        Verdict::Exists => {
            format!("`{id}` already exists under this name: edit it instead of writing a new page")
        }
        Verdict::Probable => format!(
            "`{id}` is probably this draft's subject: read it, then edit it, or add the draft's title to its \
             aliases if it is the same subject under another name"
        ),
        Verdict::Related => format!("`{id}` is related: link to it from the new page"),
        Verdict::None => String::new(),
    }
}

/// The freshness caveats of every search, once each, and what `none` cannot prove.
fn caveats(report: &mut CheckReport, parts: &[(Part, SearchResponse)]) {
    for (_, resp) in parts {
        for d in &resp.degraded {
            if !report.degraded.contains(d) {
                report.degraded.push(d.clone());
            }
        }
        for n in &resp.notes {
            if !report.notes.contains(n) {
                report.notes.push(n.clone());
            }
        }
        report.pending_changes = match (report.pending_changes, resp.pending_changes) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        report.vectors_pending = match (report.vectors_pending, resp.vectors_pending) {
            (a, None) => a,
            (a, Some(b)) => Some(a.unwrap_or(0).max(b)),
        };
    }
    if report.verdict != Verdict::Exists {
        let unsure = report.pending_changes != Some(0)
            || report.vectors_pending.is_some_and(|v| v > 0)
            || !report.degraded.is_empty();
        if unsure {
            report.notes.push(
                "this check is not proof that no such page exists: changes are pending, vectors are missing, or a \
                 source is unavailable or behind; check again before creating the page"
                    .into(),
            );
        }
    }
}

/// One line per candidate, for the command line.
impl std::fmt::Display for CheckReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "verdict: {}", self.verdict)?;
        for c in &self.candidates {
            let parts: Vec<String> = c
                .parts
                .iter()
                .map(|p| {
                    let what = match &p.part {
                        Part::Title => "title".to_string(),
                        Part::Alias { alias } => format!("alias {alias:?}"),
                        Part::Body { chunk, .. } => format!("body chunk {chunk}"),
                    };
                    let ev: Vec<String> = p.evidence.iter().map(ToString::to_string).collect();
                    format!("{what}: #{} {}", p.rank, ev.join("+"))
                })
                .collect();
            writeln!(
                f,
                "{:<9} {}:{}  {}  [{}]",
                c.verdict.to_string(),
                c.source,
                c.slug,
                c.title,
                parts.join("; ")
            )?;
            writeln!(f, "          {}", c.advice)?;
        }
        for n in &self.notes {
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
