//! The pipeline on in-memory sources with the deterministic test embedder.

use crate::layers::{CreateSafety, Evidence};
use crate::reader::memory::{MemoryReader, page};
use crate::search::FEEDBACK_PAGES;
use crate::{Mode, QueryError, SearchRequest, search};
use cairn_index::Embedder;
use cairn_index::embed::testing::HashEmbedder;

fn curated() -> MemoryReader {
    MemoryReader::new(
        "curated",
        vec![
            page(
                "people/maria",
                "Maria Chen",
                &[],
                &["Maria leads the data platform team and owns the warehouse roadmap."],
            ),
            page(
                "projects/amphi",
                "The Example Hall — Indoor Greek Amphitheater for Adversarial Debate",
                &["Hall of Light"],
                &["Indoor greek amphitheater for adversarial debate.", "Ceiling acoustics for the dome."],
            ),
        ],
    )
}

fn bulk(n: usize) -> MemoryReader {
    let pages = (0..n)
        .map(|i| {
            let slug = format!("models/data_platform_model_{i}");
            page(
                &slug,
                &format!("data_platform_model_{i}"),
                &[],
                &["data platform team model: no documented columns"],
            )
        })
        .collect();
    MemoryReader::new("bulk", pages)
}

async fn run(readers: &[&MemoryReader], req: SearchRequest) -> crate::Result<crate::SearchResponse> {
    let e = HashEmbedder::default();
    search(readers, Some(&e as &dyn Embedder), &req).await
}

#[tokio::test]
async fn a_bulk_source_cannot_take_the_curated_sources_slots() {
    let (c, b) = (curated(), bulk(5000));
    let resp = run(&[&b, &c], SearchRequest::new("who leads the data platform team")).await.unwrap();
    let curated = resp.sources.iter().find(|s| s.source == "curated").unwrap();
    assert!(curated.candidates >= 1, "{:?}", resp.sources);
    assert!(
        resp.results.iter().any(|r| r.source == "curated" && r.slug == "people/maria"),
        "{:#?}",
        resp.results
    );
    let bulk = resp.sources.iter().find(|s| s.source == "bulk").unwrap();
    assert_eq!(bulk.candidates, crate::search::WINDOW, "the bulk source gets its K slots and no more");
}

#[tokio::test]
async fn one_failing_source_degrades_all_failing_is_an_error() {
    let c = curated();
    let mut broken = bulk(3);
    broken.fail = true;
    let resp = run(&[&c, &broken], SearchRequest::new("greek amphitheater")).await.unwrap();
    assert_eq!(resp.degraded, ["source_failed:bulk"]);
    assert_eq!(resp.results[0].slug, "projects/amphi");
    let failed = resp.sources.iter().find(|s| s.source == "bulk").unwrap();
    assert_eq!(failed.status, crate::Health::Failed);

    let mut c2 = curated();
    c2.fail = true;
    let err = run(&[&c2, &broken], SearchRequest::new("greek amphitheater")).await.unwrap_err();
    assert!(matches!(err, QueryError::AllSourcesFailed(_)), "{err}");
}

#[tokio::test]
async fn an_alias_puts_its_page_first_with_exists() {
    let (c, b) = (curated(), bulk(50));
    let resp = run(&[&b, &c], SearchRequest::new("Hall of Light")).await.unwrap();
    let top = &resp.results[0];
    assert_eq!((top.source.as_str(), top.slug.as_str()), ("curated", "projects/amphi"));
    assert!(top.evidence.contains(&Evidence::AliasHit));
    assert_eq!(top.create_safety, CreateSafety::Exists);
}

#[tokio::test]
async fn a_learnt_name_puts_its_page_first_but_only_as_probable() {
    use cairn_index::resident::{LearntPage, Teaching};
    let (mut c, b) = (curated(), bulk(50));
    let amphi = c.pages.iter().find(|(p, _)| p.slug == "projects/amphi").unwrap().0.clone();
    let taught = LearntPage { page: amphi, how: Teaching::LinkText, taught_by: vec!["people/maria".into()] };
    c.learnt.insert("the debate hall".into(), taught);
    let resp = run(&[&b, &c], SearchRequest::new("The Debate Hall")).await.unwrap();
    let top = &resp.results[0];
    assert_eq!((top.source.as_str(), top.slug.as_str()), ("curated", "projects/amphi"));
    assert_eq!((top.evidence[0], top.create_safety), (Evidence::LearntName, CreateSafety::Probable));
    let learnt = top.learnt.as_ref().expect("where it was learnt");
    assert_eq!(
        (learnt.how, learnt.taught_by.as_slice()),
        (Teaching::LinkText, ["people/maria".to_string()].as_slice())
    );
    assert!(resp.alias_collisions.is_empty(), "a learnt name is no page's own name");
    // A page's own name wins: the learnt names are not looked at.
    c.learnt.insert("maria chen".into(), c.learnt["the debate hall"].clone());
    let resp = run(&[&b, &c], SearchRequest::new("Maria Chen")).await.unwrap();
    assert_eq!(resp.results[0].slug, "people/maria");
    assert!(resp.results.iter().all(|r| r.learnt.is_none()));
}

#[tokio::test]
async fn an_exact_page_missed_by_every_arm_is_injected() {
    let c = MemoryReader::new("notes", vec![page("x", "Zyzzyva", &["qqq"], &["unrelated body words"])]);
    let resp = run(&[&c], SearchRequest { mode: Mode::Fast, ..SearchRequest::new("\"QQQ\"") }).await.unwrap();
    assert_eq!(resp.results.len(), 1);
    assert_eq!(resp.results[0].evidence[0], Evidence::AliasHit);
}

#[tokio::test]
async fn a_title_phrase_is_boosted() {
    let c = curated();
    let resp = run(&[&c], SearchRequest { explain: true, ..SearchRequest::new("greek amphitheater") })
        .await
        .unwrap();
    assert_eq!(resp.results[0].slug, "projects/amphi");
    assert_eq!(resp.results[0].boosts, ["title_phrase"]);
    assert!(resp.results[0].explain.as_ref().unwrap().why.contains("cosine"));
}

#[tokio::test]
async fn bad_input_is_a_clear_error_or_a_bounded_answer() {
    let c = curated();
    assert_eq!(run(&[&c], SearchRequest::new("  ")).await.unwrap_err(), QueryError::EmptyQuery);
    let huge = "word ".repeat(20_000);
    assert!(matches!(
        run(&[&c], SearchRequest::new(huge)).await.unwrap_err(),
        QueryError::QueryTooLong { .. }
    ));
    let zero = SearchRequest { limit: 0, ..SearchRequest::new("x") };
    assert_eq!(run(&[&c], zero).await.unwrap_err(), QueryError::BadLimit);
    let unknown = SearchRequest { sources: vec!["nope".into()], ..SearchRequest::new("x") };
    let err = run(&[&c], unknown).await.unwrap_err().to_string();
    assert!(err.contains("nope") && err.contains("curated"), "{err}");
    let big =
        run(&[&c], SearchRequest { limit: 10_000, ..SearchRequest::new("amphitheater") }).await.unwrap();
    assert!(big.results.len() <= 100 && !big.notes.is_empty());
    // No word in the query: nothing can match by name or keyword, so nothing is said to exist.
    for q in ["!!!", "🎉🎉", "???"] {
        let resp = run(&[&c], SearchRequest::new(q)).await.unwrap();
        for r in &resp.results {
            assert_ne!(r.create_safety, CreateSafety::Exists, "{q}: {r:?}");
            assert!(
                r.evidence.iter().all(|e| matches!(e, Evidence::WeakSemantic | Evidence::HighVectorMatch)),
                "{q}: {:?}",
                r.evidence
            );
        }
    }
}

#[tokio::test]
async fn no_embedder_is_a_degraded_answer_not_a_failure() {
    let c = curated();
    let resp = search(&[&c], None, &SearchRequest::new("greek amphitheater")).await.unwrap();
    assert_eq!(resp.degraded, ["embed_unavailable"]);
    assert_eq!(resp.results[0].slug, "projects/amphi");
}

#[tokio::test]
async fn vector_only_junk_below_the_floor_is_dropped() {
    let c = curated();
    let resp = run(&[&c], SearchRequest::new("zzzz qqqq")).await.unwrap();
    assert!(resp.results.is_empty(), "{:#?}", resp.results);
}

#[tokio::test]
async fn diagnose_says_where_a_page_is_found_or_lost() {
    let (c, b) = (curated(), bulk(30));
    let e = HashEmbedder::default();
    let req = SearchRequest::new("greek amphitheater");
    let found = crate::diagnose(&[&b, &c], Some(&e as &dyn Embedder), &req, "curated", "projects/amphi")
        .await
        .unwrap();
    assert_eq!(found.verdict, "found at rank 1");
    assert_eq!(found.keyword_rank, Some(1));
    let missing =
        crate::diagnose(&[&b, &c], Some(&e as &dyn Embedder), &req, "curated", "nope").await.unwrap();
    assert!(missing.verdict.contains("not in the index"), "{}", missing.verdict);
    let err =
        crate::diagnose(&[&b, &c], Some(&e as &dyn Embedder), &SearchRequest::new("x"), "elsewhere", "a")
            .await
            .unwrap_err();
    assert!(err.to_string().contains("elsewhere"));
    // The user's own request: limited to the other source, the page cannot be in the answer.
    let other = SearchRequest { sources: vec!["bulk".into()], ..req.clone() };
    let lost = crate::diagnose(&[&b, &c], Some(&e as &dyn Embedder), &other, "curated", "projects/amphi")
        .await
        .unwrap();
    assert_eq!(lost.final_rank, None, "{lost:?}");
}

#[tokio::test]
async fn a_name_written_as_the_query_wins_over_a_folded_one() {
    let c = MemoryReader::new(
        "dict",
        vec![
            page("ae", "ae", &[], &["The country code for the United Arab Emirates."]),
            page("application-executive", "Application Executive", &["AE"], &["An embeddable language."]),
        ],
    );
    let resp = run(&[&c], SearchRequest::new("AE")).await.unwrap();
    assert_eq!(resp.results[0].slug, "application-executive");
    assert_eq!(resp.results[1].slug, "ae", "the folded title match still comes next");
    let resp = run(&[&c], SearchRequest::new("ae")).await.unwrap();
    assert_eq!(resp.results[0].slug, "ae");
}

#[tokio::test]
async fn a_filter_restricts_each_source_before_its_cut_so_a_match_outside_the_top_slots_is_found() {
    // One source: more pages than its window that match the query better than the one tagged
    // page.
    let mut pages: Vec<crate::reader::memory::MemoryPage> = (0..crate::search::WINDOW + 50)
        .map(|i| {
            page(
                &format!("log/entry-{i}"),
                &format!("Data platform entry {i}"),
                &[],
                &["data platform team data platform"],
            )
        })
        .collect();
    let mut tagged = page("notes/roadmap", "Roadmap", &[], &["the data platform next year"]);
    tagged.0.tags = vec!["Planning/2025".into()];
    pages.push(tagged);
    let r = MemoryReader::new("notes", pages);
    let unfiltered = run(&[&r], SearchRequest::new("data platform team")).await.unwrap();
    assert!(!unfiltered.results.iter().any(|x| x.slug == "notes/roadmap"), "outside the top slots");
    let mut req = SearchRequest::new("data platform team");
    req.filter.tags = vec!["planning".into()];
    let filtered = run(&[&r], req).await.unwrap();
    assert_eq!(filtered.results.iter().map(|x| x.slug.as_str()).collect::<Vec<_>>(), ["notes/roadmap"]);
    let mut bad = SearchRequest::new("data");
    bad.filter.after = Some("last week".into());
    assert!(matches!(run(&[&r], bad).await, Err(QueryError::BadFilter(_))));
}

#[tokio::test]
async fn template_pages_count_half_and_a_short_note_of_its_own_does_not() {
    let mut pages: Vec<_> = (0..4)
        .map(|i| page(&format!("daily/{i}"), &format!("oat milk day {i}"), &[], &["oat milk"]))
        .collect();
    pages.push(page("milk", "Milk", &[], &["buy oat milk"]));
    let c = MemoryReader::new("notes", pages);
    let resp = run(&[&c], SearchRequest { explain: true, ..SearchRequest::new("oat milk") }).await.unwrap();
    let boosts = |slug: &str| resp.results.iter().find(|r| r.slug == slug).map(|r| r.boosts.clone());
    assert_eq!(boosts("milk"), Some(vec![]), "a three-word note of its own is not a template");
    assert!(boosts("daily/0").unwrap().contains(&"template".to_string()), "{:#?}", resp.results);
    assert_eq!(resp.results[0].slug, "milk", "{:#?}", resp.results);
}

#[tokio::test]
async fn a_close_meaning_is_probable_and_only_a_name_is_exists() {
    let c = curated();
    let resp = run(&[&c], SearchRequest::new("Maria Chen")).await.unwrap();
    assert_eq!(resp.results[0].create_safety, CreateSafety::Exists);
    let resp = run(&[&c], SearchRequest::new("who leads the data platform team")).await.unwrap();
    let maria = resp.results.iter().find(|r| r.slug == "people/maria").unwrap();
    assert_ne!(maria.create_safety, CreateSafety::Exists, "{maria:#?}");
}

#[tokio::test]
async fn a_query_names_a_page_by_its_slug_only_when_slugifying_loses_nothing() {
    let c = MemoryReader::new(
        "notes",
        vec![page("c", "C", &[], &["a systems language"]), page("data-platform", "DP", &[], &["warehouse"])],
    );
    for q in ["C++", "C#"] {
        let resp = run(&[&c], SearchRequest::new(q)).await.unwrap();
        assert!(
            resp.results.iter().all(|r| r.create_safety != CreateSafety::Exists),
            "{q}: {:#?}",
            resp.results
        );
    }
    let resp = run(&[&c], SearchRequest::new("Data Platform")).await.unwrap();
    assert_eq!(
        (resp.results[0].slug.as_str(), resp.results[0].create_safety),
        ("data-platform", CreateSafety::Exists)
    );
}

/// Pages on glaciers, and a short page that shares only the query's one common word.
fn glaciers() -> MemoryReader {
    MemoryReader::new(
        "notes",
        vec![
            page("a", "Retreat", &[], &["glacier melt on the ice field moraine"]),
            page("b", "Survey", &[], &["glacier melt ice field moraine summer"]),
            page("e", "Ice report", &[], &["glacier melt on the ice field"]),
            page("c", "Field notes", &[], &["ice field moraine summer melt crevasse ablation"]),
            page("d", "Fondue", &[], &["cheese melt"]),
        ],
    )
}

async fn order_of(notes: &MemoryReader, query: &str, without_feedback: bool) -> Vec<(String, Option<f32>)> {
    let req = SearchRequest {
        ablation: crate::Ablation { without_feedback, ..Default::default() },
        explain: true,
        ..SearchRequest::new(query)
    };
    let resp = run(&[notes], req).await.unwrap();
    resp.results.into_iter().map(|r| (r.slug, r.explain.and_then(|e| e.feedback_cosine))).collect()
}

#[tokio::test]
async fn feedback_lifts_a_page_that_says_what_the_first_answers_say_in_other_words() {
    let notes = glaciers();
    let slugs = |o: Vec<(String, Option<f32>)>| o.into_iter().map(|(s, _)| s).collect::<Vec<_>>();
    // By the query alone, the short page holding its word "melt" comes before the glacier page
    // that holds only that word too; moved toward the first answers, the query prefers the
    // page that talks about what they talk about.
    assert_eq!(slugs(order_of(&notes, "glacier melt", true).await), ["e", "a", "b", "d", "c"]);
    assert_eq!(slugs(order_of(&notes, "glacier melt", false).await), ["e", "a", "b", "c", "d"]);
}

#[tokio::test]
async fn feedback_keeps_the_first_answers_it_was_fed_in_their_places() {
    let notes = glaciers();
    let slugs = |o: Vec<(String, Option<f32>)>| o.into_iter().map(|(s, _)| s).collect::<Vec<_>>();
    // By the query alone: b, e, a. Scored against the moved vector, which each of them meets in
    // a third of, they would come e, a, b: feedback takes them as judged, so it keeps their order.
    let first = slugs(order_of(&notes, "glacier field", true).await);
    let fed = slugs(order_of(&notes, "glacier field", false).await);
    assert_eq!(first[..FEEDBACK_PAGES], ["b", "e", "a"]);
    assert_eq!(fed[..FEEDBACK_PAGES], first[..FEEDBACK_PAGES]);
}

#[tokio::test]
async fn a_query_that_names_a_page_gets_no_feedback() {
    let notes = glaciers();
    let named = order_of(&notes, "Field notes", false).await;
    assert_eq!(named[0].0, "c");
    assert!(named.iter().all(|(_, f)| f.is_none()), "{named:?}");
    assert_eq!(named, order_of(&notes, "Field notes", true).await);
    // A query that names nothing gets it.
    assert!(order_of(&notes, "glacier melt", false).await.iter().all(|(_, f)| f.is_some()));
}

#[tokio::test]
async fn a_typo_of_a_name_finds_the_page_as_probable_never_as_existing() {
    let notes = MemoryReader::new(
        "notes",
        vec![
            page("kubernetes", "Kubernetes", &["k8s"], &["Container orchestration."]),
            page("stack-overflow", "Stack overflow", &[], &["When a call stack runs out of room."]),
            page("compiler", "Compiler", &[], &["Turns source code into machine code."]),
        ],
    );
    for (typo, want) in
        [("Kubernets", "kubernetes"), ("kubrenetes", "kubernetes"), ("stack ovwrflow", "stack-overflow")]
    {
        let resp = run(&[&notes], SearchRequest::new(typo)).await.unwrap();
        let top = &resp.results[0];
        assert_eq!(top.slug, want, "{typo}: {:#?}", resp.results);
        assert!(top.evidence.contains(&Evidence::FuzzyName), "{typo}: {:?}", top.evidence);
        assert_eq!(top.create_safety, CreateSafety::Probable, "{typo}");
        assert!(resp.results.iter().all(|r| r.create_safety != CreateSafety::Exists), "{typo}");
    }
    // Off, the typo is no name.
    let off = SearchRequest {
        ablation: crate::Ablation { without_fuzzy_names: true, ..Default::default() },
        ..SearchRequest::new("Kubernets")
    };
    let resp = run(&[&notes], off).await.unwrap();
    assert!(resp.results.iter().all(|r| !r.evidence.contains(&Evidence::FuzzyName)), "{:#?}", resp.results);
    // Two characters are never a typo; three may be one edit from a name; five words never.
    let resp = run(&[&notes], SearchRequest::new("k9")).await.unwrap();
    assert!(resp.results.iter().all(|r| !r.evidence.contains(&Evidence::FuzzyName)));
    let resp = run(&[&notes], SearchRequest::new("k9s")).await.unwrap();
    assert_eq!(
        (resp.results[0].slug.as_str(), resp.results[0].create_safety),
        ("kubernetes", CreateSafety::Probable)
    );
    let resp = run(&[&notes], SearchRequest::new("when a call stack overflows")).await.unwrap();
    assert!(resp.results.iter().all(|r| !r.evidence.contains(&Evidence::FuzzyName)));
}

#[tokio::test]
async fn an_exact_name_of_another_page_beats_a_fuzzy_one() {
    // "Parser" is its own page, and one edit from "Parsec": the exact name wins, no fuzzy lane.
    let notes = MemoryReader::new(
        "notes",
        vec![
            page("parser", "Parser", &[], &["Reads text into a tree."]),
            page("parsec", "Parsec", &[], &["A unit of distance, 3.26 light-years."]),
        ],
    );
    let resp = run(&[&notes], SearchRequest::new("parser")).await.unwrap();
    assert_eq!(resp.results[0].slug, "parser");
    assert_eq!(resp.results[0].create_safety, CreateSafety::Exists);
    assert!(resp.results.iter().all(|r| !r.evidence.contains(&Evidence::FuzzyName)), "{:#?}", resp.results);
    // And between two sources: the exact name in one beats a typo-near name in the other.
    let other = MemoryReader::new("other", vec![page("parsers", "Parsers", &[], &["Plural."])]);
    let resp = run(&[&other, &notes], SearchRequest::new("parsec")).await.unwrap();
    assert_eq!((resp.results[0].source.as_str(), resp.results[0].slug.as_str()), ("notes", "parsec"));
}

#[test]
fn an_evaluations_switches_never_reach_the_wire() {
    let off = crate::Ablation { without_feedback: true, pooled_baseline: true, ..Default::default() };
    let req = SearchRequest { ablation: off, ..SearchRequest::new("hall") };
    let json = serde_json::to_value(&req).unwrap();
    assert!(json.get("ablation").is_none() && json.get("without_feedback").is_none(), "{json}");
    // A caller that names one is answered with every rule on.
    let sent = serde_json::json!({"query": "hall", "without_feedback": true, "pooled_baseline": true});
    let got: SearchRequest = serde_json::from_value(sent).unwrap();
    assert!(got.ablation.is_none());
}

/// Notes whose words overlap in many ways (each holds six of fourteen words, some repeated), so
/// that the arms' fusion and the union's score order them differently.
fn overlapping(n: usize) -> MemoryReader {
    const WORDS: [&str; 14] = [
        "river", "glacier", "ice", "melt", "valley", "stone", "moraine", "snow", "flow", "climate", "sea",
        "level", "rock", "water",
    ];
    let pages = (0..n)
        .map(|i| {
            let body: Vec<&str> = (0..6)
                .flat_map(|j| {
                    std::iter::repeat_n(WORDS[(i * 7 + j * 3 + i / 5) % WORDS.len()], 1 + (i + j) % 3)
                })
                .collect();
            page(&format!("notes/n{i}"), &format!("Note {i}"), &[], &[&format!("{}.", body.join(" "))])
        })
        .collect();
    MemoryReader::new("notes", pages)
}

#[tokio::test]
async fn the_first_answers_do_not_depend_on_how_many_are_asked_for() {
    let notes = overlapping(60);
    let slugs = |r: crate::SearchResponse| r.results.into_iter().map(|r| r.slug).take(10).collect::<Vec<_>>();
    let mut narrow_differs = false;
    for q in
        ["glacier melt water", "stone valley", "sea level climate", "snow flow river rock", "ice moraine"]
    {
        let ask = |limit, window| SearchRequest { limit, window, ..SearchRequest::new(q) };
        let ten = slugs(run(&[&notes], ask(10, None)).await.unwrap());
        let hundred = slugs(run(&[&notes], ask(100, None)).await.unwrap());
        assert_eq!(ten.len(), 10, "{q}");
        assert_eq!(ten, hundred, "{q}: the first ten of a hundred are the ten");
        // A window as narrow as the limit (what every source gathered before) is what made them
        // differ: the corpus exercises the window.
        narrow_differs |= slugs(run(&[&notes], ask(10, Some(10))).await.unwrap()) != hundred;
    }
    assert!(narrow_differs, "no query's first ten depended on the window: the test shows nothing");
}

#[test]
fn a_requests_window_is_bounded_and_never_under_its_limit() {
    use crate::search::{MAX_WINDOW, WINDOW, source_slots};
    let req = |mode, window| SearchRequest { mode, window, ..SearchRequest::new("x") };
    assert_eq!(source_slots(&req(Mode::Balanced, None), 10), WINDOW);
    assert_eq!(source_slots(&req(Mode::Thorough, None), 10), MAX_WINDOW);
    assert_eq!(source_slots(&req(Mode::Fast, None), 10), 10);
    assert_eq!(source_slots(&req(Mode::Balanced, Some(5)), 20), 20, "never under the limit");
    assert_eq!(source_slots(&req(Mode::Balanced, Some(1_000_000)), 10), MAX_WINDOW);
    assert_eq!(source_slots(&req(Mode::Balanced, Some(0)), 1), 1);
}
