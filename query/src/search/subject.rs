//! Subject pages first. A page whose own name (its title, an alias, its file name) or a name
//! the vault taught it is a phrase of the query is the query's *subject*: "who is on the
//! platform team" names the page Platform Team. Such a page ranks above every page that merely
//! mentions its name and matches nothing of the query that it does not, however many, long or
//! spread over sources those pages are.
//!
//! The lift is an order, not a factor: a subject page is put just above the best page it so
//! dominates. Nothing is fitted, so nothing depends on how many or how long the mentioning
//! pages are. A page that matches a query word the subject page lacks is not dominated and keeps
//! its place. When the query names pages by nested names ("what is Concurrent CLU" names both
//! Concurrent CLU and CLU), the more specific subject comes first. A template page (a bulk stub)
//! is no subject: its body says nothing beyond its name, which the exact layer is for.

use super::gather::{Candidate, find_or_add};
use super::response::SearchResult;
use crate::layers::{TEMPLATE_PAGES, terms};
use crate::reader::SourceReader;
use cairn_index::PageRecord;
use cairn_ingest::{MAX_NAME_CHARS, normalize_name};
use std::collections::HashSet;

/// Query words looked at for names: a bound on the lookups (a phrase of the first this many
/// words), not a judgement; a request longer than this is a text more than a question.
const MAX_QUERY_WORDS: usize = 64;

/// Punctuation a phrase's edges shed before it is looked up as a name ("TCP?" names TCP).
const EDGE: &[char] = &['.', ',', ';', ':', '!', '?', '"', '\'', '(', ')', '[', ']', '“', '”', '‘', '’'];

/// A page a phrase of the query names.
#[derive(Debug, Clone)]
pub(super) struct Subject {
    pub(super) source: String,
    pub(super) page: PageRecord,
    /// The query's words that name it (as written, or with edge punctuation shed).
    pub(super) phrase: String,
}

/// A run of the query's words that could be a name, and that name normalised for lookup.
pub(super) struct Phrase {
    pub(super) text: String,
    pub(super) name: String,
}

/// The phrases of the query that could be names: every run of its words, as written and with
/// edge punctuation and a possessive shed, that holds a content word, is short enough to be a
/// name and is not the whole query (the exact layer's); longest first, each name once.
pub(super) fn phrases(query: &str) -> Vec<Phrase> {
    let words: Vec<&str> = query.split_whitespace().take(MAX_QUERY_WORDS).collect();
    // Whether each word has a term: a run has a content word when one of its words does (read
    // once per word, not once per run).
    let content: Vec<bool> = words.iter().map(|w| !terms(w).is_empty()).collect();
    let whole = normalize_name(query);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for len in (1..=words.len()).rev() {
        for (start, run) in words.windows(len).enumerate() {
            if !content[start..start + len].contains(&true) {
                continue;
            }
            let joined = run.join(" ");
            let trimmed = joined.trim_matches(EDGE);
            let bare = trimmed.strip_suffix("'s").or_else(|| trimmed.strip_suffix("’s")).unwrap_or(trimmed);
            // As written first: a name may end in what is punctuation elsewhere ("Inc.").
            for text in [joined.as_str(), bare] {
                if text.chars().count() > MAX_NAME_CHARS {
                    continue;
                }
                let name = normalize_name(text);
                if !name.is_empty() && name != whole && seen.insert(name.clone()) {
                    out.push(Phrase { text: text.to_string(), name });
                }
            }
        }
    }
    out
}

/// The pages phrases of the query name, in every source: by their own names, and (when
/// `learnt_names`) by a name the vault taught them. Each page once, with the longest phrase
/// that names it; template pages left out.
pub(super) async fn subject_pages<R: SourceReader>(
    readers: &[&R],
    query: &str,
    learnt_names: bool,
) -> Vec<Subject> {
    let phrases = phrases(query);
    let lookups = readers.iter().map(|r| {
        let phrases = &phrases;
        async move {
            let mut found: Vec<Subject> = Vec::new();
            for phrase in phrases {
                let mut pages = r.alias(&phrase.name).await.unwrap_or_default();
                if pages.is_empty() && learnt_names {
                    pages.extend(r.learnt(&phrase.name).await.ok().flatten().map(|l| l.page));
                }
                for page in pages {
                    // Longest phrases come first: a page keeps the first that names it.
                    if page.body_shared_by < TEMPLATE_PAGES && !found.iter().any(|s| s.page.slug == page.slug)
                    {
                        found.push(Subject { source: r.id().to_string(), page, phrase: phrase.text.clone() });
                    }
                }
            }
            found
        }
    });
    futures::future::join_all(lookups).await.into_iter().flatten().collect()
}

/// Mark the subject pages in the union, adding (with their record and best chunk) those no arm
/// found: at most `bound` added, the longest names first.
pub(super) async fn inject_subjects<R: SourceReader>(
    readers: &[&R],
    qvec: Option<&[f32]>,
    union: &mut Vec<Candidate>,
    subjects: &[Subject],
    bound: usize,
) {
    let mut by_length: Vec<&Subject> = subjects.iter().collect();
    by_length.sort_by_cached_key(|s| std::cmp::Reverse(terms(&s.phrase).len()));
    let mut added = 0;
    for s in by_length {
        let known = union.iter().any(|c| c.source == s.source && c.slug == s.page.slug);
        if !known && added >= bound {
            continue;
        }
        added += usize::from(!known);
        let i = find_or_add(readers, qvec, union, &s.source, &s.page).await;
        union[i].subject = Some(s.phrase.clone());
    }
}

/// One result as the lift sees it: the terms of its subject name (when it is a subject page),
/// the terms of its names and best chunk, and the query's terms among them.
pub(super) struct Terms {
    pub(super) name: Option<Vec<String>>,
    pub(super) doc: Vec<String>,
}

/// Lift each subject page just above the best result it dominates ([`dominance`]), repeated
/// until nothing moves (at most once per result: a cycle of pages each dominating the next
/// cannot lift for ever). Each lifted page records the lift as its `subject` multiplier.
pub(super) fn lift_subjects(results: &mut [SearchResult], terms: &[Terms], query: &[String]) {
    let over = dominance(terms, query);
    let before: Vec<f32> = results.iter().map(|r| r.score).collect();
    for _ in 0..results.len() {
        let mut moved = false;
        for (a, over) in over.iter().enumerate() {
            let top = over.iter().map(|&b| results[b].score).reduce(f32::max);
            if let Some(top) = top.filter(|t| *t >= results[a].score) {
                results[a].score = top.next_up();
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    for (r, before) in results.iter_mut().zip(before) {
        if r.score > before {
            r.boosts.push("subject".to_string());
            if let Some(e) = r.explain.as_mut() {
                e.multipliers.push(("subject".to_string(), r.score / before.max(f32::MIN_POSITIVE)));
            }
        }
    }
}

/// For each result, the results it dominates. A subject page dominates a page that mentions
/// every term of its name and matches no query term it lacks, unless that page is a subject
/// whose name holds its own; and it dominates a subject page whose name is a strict part of its
/// own ("Concurrent CLU" over "CLU" when the query names both: the more specific subject). Two
/// pages that would dominate each other dominate neither.
fn dominance(terms: &[Terms], query: &[String]) -> Vec<Vec<usize>> {
    let matched: Vec<HashSet<&str>> = terms
        .iter()
        .map(|t| {
            let own = t.doc.iter().chain(t.name.iter().flatten());
            own.filter(|w| query.contains(w)).map(String::as_str).collect()
        })
        .collect();
    let docs: Vec<HashSet<&str>> = terms.iter().map(|t| t.doc.iter().map(String::as_str).collect()).collect();
    let holds = |outer: &[String], inner: &[String]| inner.iter().all(|w| outer.contains(w));
    let dominates = |a: usize, b: usize| {
        let Some(name) = terms[a].name.as_deref() else { return false };
        match terms[b].name.as_deref() {
            _ if a == b => false,
            Some(other) if holds(name, other) && !holds(other, name) => true,
            Some(other) if holds(other, name) => false,
            _ => name.iter().all(|w| docs[b].contains(w.as_str())) && matched[b].is_subset(&matched[a]),
        }
    };
    (0..terms.len())
        .map(|a| (0..terms.len()).filter(|&b| dominates(a, b) && !dominates(b, a)).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layers::{CreateSafety, Evidence};
    use crate::reader::memory::{MemoryReader, page};
    use crate::{SearchRequest, SearchResponse, search};
    use cairn_index::Embedder;
    use cairn_index::embed::testing::HashEmbedder;

    #[test]
    fn phrases_are_runs_of_the_query_with_a_content_word_but_not_all_of_it() {
        let texts = |q: &str| phrases(q).into_iter().map(|p| p.text).collect::<Vec<_>>();
        let p = texts("who is on the Platform Team?");
        assert!(p.contains(&"Platform Team".to_string()), "edge punctuation shed: {p:?}");
        assert!(p.contains(&"Platform Team?".to_string()), "and kept: {p:?}");
        let inc = texts("what is America On-Line, Inc.");
        assert!(
            inc.contains(&"America On-Line, Inc.".to_string())
                && inc.contains(&"America On-Line, Inc".to_string())
        );
        assert!(p.contains(&"Team".to_string()) && p.contains(&"the Platform".to_string()));
        assert!(
            !p.iter().any(|x| normalize_name(x) == "who is on the platform team?"),
            "the whole query is the exact layer's"
        );
        assert!(!p.contains(&"who is on".to_string()), "stop words alone name nothing");
        // Longest first: the query without its question mark is a phrase the exact layer (which
        // looks the query up as written) did not ask.
        assert_eq!(p[0], "who is on the Platform Team");
        assert_eq!(
            phrases("what is TCP's window")[..].iter().find(|p| p.text == "TCP").map(|p| p.name.as_str()),
            Some("tcp"),
            "a possessive is shed"
        );
        assert!(phrases("tcp").is_empty(), "a one-word query is all query");
    }

    /// A curated team page, short, and a bulk source of long tickets that mention the team over
    /// and over (one of them also an outage, which the team page does not speak of).
    fn vault() -> (MemoryReader, MemoryReader) {
        let curated = MemoryReader::new(
            "curated",
            vec![
                page(
                    "teams/platform",
                    "Platform Team",
                    &["platform eng"],
                    &["Members: Ana Ruiz (lead), Ken Ito."],
                ),
                page("teams/search", "Search", &[], &["Relevance and the query service."]),
            ],
        );
        let tickets = (0..40)
            .map(|i| {
                let outage = if i == 7 { " The outage lasted an hour." } else { "" };
                let body = format!(
                    "Ticket {i}: who is on call for the platform team? The platform team was paged; the platform \
                     team escalated to the platform team lead, and the platform team closed it.{outage}"
                );
                page(&format!("tickets/t{i}"), &format!("Ticket {i}"), &[], &[body.as_str(), body.as_str()])
            })
            .collect();
        (curated, MemoryReader::new("tickets", tickets))
    }

    async fn ask(query: &str, without_subjects: bool) -> SearchResponse {
        let (c, t) = vault();
        let e = HashEmbedder::default();
        let req = SearchRequest {
            ablation: crate::Ablation { without_subjects, ..Default::default() },
            explain: true,
            ..SearchRequest::new(query)
        };
        search(&[&t, &c], Some(&e as &dyn Embedder), &req).await.unwrap()
    }

    #[tokio::test]
    async fn the_page_the_query_names_outranks_many_long_pages_in_another_source_that_mention_it() {
        let q = "who is on the platform team";
        let without = ask(q, true).await;
        assert_ne!(
            without.results[0].slug, "teams/platform",
            "the set must need the rule: {:#?}",
            without.results
        );
        let with = ask(q, false).await;
        let top = &with.results[0];
        assert_eq!(
            (top.source.as_str(), top.slug.as_str()),
            ("curated", "teams/platform"),
            "{:#?}",
            with.results
        );
        assert_eq!(top.subject.as_deref(), Some("platform team"));
        assert!(top.evidence.contains(&Evidence::SubjectName) && top.boosts.contains(&"subject".to_string()));
        assert_eq!(
            top.create_safety,
            CreateSafety::Probable,
            "a name that is part of the query proves nothing"
        );
        // An alias names it as well; a page the query does not name is never a subject.
        let by_alias = ask("who is on call in platform eng", false).await;
        assert_eq!(by_alias.results[0].slug, "teams/platform", "{:#?}", by_alias.results);
        assert!(with.results.iter().filter(|r| r.slug != "teams/platform").all(|r| r.subject.is_none()));
    }

    /// A subject term set (`name`) and a page's terms.
    fn t(name: Option<&str>, doc: &str) -> Terms {
        Terms { name: name.map(terms), doc: terms(doc) }
    }

    #[test]
    fn the_more_specific_subject_dominates_and_two_pages_never_dominate_each_other() {
        let q = terms("what is concurrent clu");
        let set = [
            t(Some("clu"), "CLU a language"),
            t(Some("concurrent clu"), "Concurrent CLU an extension of CLU"),
            t(None, "CLU and concurrent CLU compared at length"),
            t(None, "CLU"),
        ];
        let over = dominance(&set, &q);
        assert_eq!(over[1], [0, 2], "the specific subject over the broad one and over a mention of its name");
        assert_eq!(
            over[0],
            [3],
            "the broad one over a page that matches nothing more than it does, not over one that does"
        );
        assert!(over[2].is_empty() && over[3].is_empty(), "only subject pages dominate");
        // Two subject pages, each mentioning the other's name with the same words matched.
        let q = terms("tcp vs udp");
        let both = [t(Some("tcp"), "TCP unlike UDP"), t(Some("udp"), "UDP unlike TCP")];
        assert_eq!(dominance(&both, &q), [Vec::<usize>::new(), Vec::new()]);
    }

    #[tokio::test]
    async fn a_page_matching_a_query_word_the_subject_lacks_keeps_its_place() {
        let with = ask("platform team outage", false).await;
        let rank = |slug: &str| with.results.iter().position(|r| r.slug == slug).unwrap();
        assert!(rank("tickets/t7") < rank("teams/platform"), "{:#?}", with.results);
        assert!(rank("teams/platform") < rank("tickets/t1"), "{:#?}", with.results);
    }
}
