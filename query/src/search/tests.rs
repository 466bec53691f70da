//! Each stage of [`search`] on its own.

use super::gather::{Candidate, Gathered, alias_collisions, inject_exact, merge_sources};
use super::score::{multipliers, order, relevance_floor, score_union, union_words};
use super::*;
use crate::layers::{KEYWORD_WEIGHT, RELEVANCE_FLOOR, TEMPLATE_FACTOR, TEMPLATE_PAGES, TITLE_PHRASE_BOOST};
use crate::reader::memory::{MemoryReader, page};
use cairn_index::ChunkHit;
use cairn_index::resident::Lang;

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
        lang: Default::default(),
        record: Some(record(slug, slug)),
        slug: slug.into(),
        keyword: keyword.map(hit),
        vector: vector.map(hit),
        title: None,
        fused: 0.0,
        exact: None,
        subject: None,
        feedback: None,
    }
}

/// The union scored as `search` scores it, its words read from it.
fn scored(req: &SearchRequest, union: Vec<Candidate>) -> Vec<SearchResult> {
    let words = union_words(req, &union, &[]);
    score_union(req, union, &words)
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
        Err(cairn_index::Error::Storage { source_id: "b".into(), uri: "m".into(), message: "down".into() })
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
        alias_collisions("ae", &[named("ae", ExactKind::Slug), named("exec", ExactKind::Alias)]).is_empty()
    );
    let two = alias_collisions("AE", &[named("ae-page", ExactKind::Title), named("exec", ExactKind::Alias)]);
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
        vec![page("owls", "Owls", &["Strigiformes"], &["Owls hunt at night."]), page("x", "X", &[], &["x"])],
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
        multipliers("adversarial debate", Some(&hall), Lang::English),
        [("title_phrase".to_string(), TITLE_PHRASE_BOOST)]
    );
    assert!(
        multipliers("debate adversarial", Some(&hall), Lang::English).is_empty(),
        "a bag of words is no phrase"
    );
    let template = PageRecord { body_shared_by: TEMPLATE_PAGES, ..record("stub", "Stub") };
    assert_eq!(
        multipliers("owls", Some(&template), Lang::English),
        [("template".to_string(), TEMPLATE_FACTOR)]
    );
    assert!(multipliers("hall", None, Lang::English).is_empty());
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
    let mut fed = cand("fed", None, Some(0.3));
    fed.feedback = Some(0.45);
    let results = scored(&req, vec![tide, moon, other, fed]);
    let uk = |i: usize| results[i].explain.as_ref().unwrap().union_keyword;
    assert_eq!(uk(0), 1.0, "the best keyword page of the union scores 1");
    assert!(uk(1) > 0.0 && uk(1) < 1.0);
    assert_eq!(uk(2), 0.0);
    assert!((results[0].base_score - (0.5 + KEYWORD_WEIGHT)).abs() < 1e-6);
    assert_eq!(results[1].cosine, None);
    assert!((results[2].base_score - 0.4).abs() < 1e-6);
    // A candidate feedback scored: the score reads the moved cosine, the evidence its own.
    assert!((results[3].base_score - 0.45).abs() < 1e-6);
    assert_eq!(results[3].cosine, Some(0.3));
    assert_eq!(results[3].explain.as_ref().unwrap().feedback_cosine, Some(0.45));
    assert!(results.iter().all(|r| r.score == r.base_score), "no multiplier applies");
}

#[test]
fn order_puts_exact_names_first_then_scores_and_keeps_the_limit() {
    let result = |slug: &str, score: f32| {
        let mut r = scored(&SearchRequest::new("q"), vec![cand(slug, None, None)]).remove(0);
        r.score = score;
        r
    };
    let exact = vec![("s".to_string(), record("named", "Named"), ExactKind::Alias)];
    let results = vec![result("low", 0.1), result("named", 0.05), result("high", 0.9), result("mid", 0.5)];
    let ordered = order(results, &exact, &[], 3);
    assert_eq!(slugs(&ordered, |r| &r.slug), ["named", "high", "mid"]);
}
