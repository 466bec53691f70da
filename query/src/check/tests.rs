//! `check` on an in-memory source with the deterministic test embedder.

use super::*;
use crate::reader::memory::{MemoryReader, page};
use cairn_index::Embedder;
use cairn_index::embed::testing::HashEmbedder;

const ORCHESTRATION: &str = "Kubernetes schedules containers onto a cluster of machines, restarts the ones \
that fail, and rolls out new versions of a service without downtime.";

fn notes() -> MemoryReader {
    MemoryReader::new(
        "notes",
        vec![
            page("kubernetes", "Kubernetes", &["k8s"], &[ORCHESTRATION]),
            page(
                "sourdough",
                "Sourdough bread",
                &[],
                &["A starter of flour and water ferments for days before baking."],
            ),
            page("tide-tables", "Tide tables", &[], &["High and low water times for the harbour, by month."]),
        ],
    )
}

async fn ask(readers: &[&MemoryReader], draft: &Draft) -> crate::Result<CheckReport> {
    let e = HashEmbedder::default();
    let e = &e;
    check(draft, |req| async move { crate::search(readers, Some(e as &dyn Embedder), &req).await }).await
}

async fn run(reader: &MemoryReader, draft: Draft) -> CheckReport {
    ask(&[reader], &draft).await.unwrap()
}

fn draft(title: &str, aliases: &[&str], body: &str) -> Draft {
    Draft {
        title: title.into(),
        aliases: aliases.iter().map(|a| a.to_string()).collect(),
        body: body.into(),
        sources: Vec::new(),
    }
}

#[tokio::test]
async fn a_draft_whose_title_is_a_pages_name_exists_and_says_to_edit_it() {
    let notes = notes();
    let r = run(&notes, draft("kubernetes", &[], "Some notes on clusters.")).await;
    assert_eq!(r.verdict, Verdict::Exists, "{r}");
    let top = &r.candidates[0];
    assert_eq!((top.slug.as_str(), top.verdict), ("kubernetes", Verdict::Exists));
    assert!(top.advice.contains("edit it instead"), "{}", top.advice);
    assert!(
        top.parts.iter().any(|p| p.part == Part::Title && p.evidence.contains(&Evidence::ExactTitleMatch))
    );
    // An alias of the draft that is a page's alias counts the same.
    let r = run(&notes, draft("Container scheduler", &["K8s"], "")).await;
    assert_eq!((r.verdict, r.candidates[0].slug.as_str()), (Verdict::Exists, "kubernetes"), "{r}");
    let alias = r.candidates[0].parts.iter().find(|p| matches!(p.part, Part::Alias { .. })).unwrap();
    assert!(alias.evidence.contains(&Evidence::AliasHit));
}

#[tokio::test]
async fn a_new_title_whose_body_describes_a_page_is_probable_never_exists() {
    let notes = notes();
    // The agent's own words for what the page holds, under a title of its own.
    let body = "Kubernetes restarts containers that fail, schedules containers onto a cluster of machines \
                and rolls out new versions of a service.";
    let r = run(&notes, draft("Container orchestration notes", &[], body)).await;
    assert_eq!(r.verdict, Verdict::Probable, "{r}");
    let top = &r.candidates[0];
    assert_eq!(top.slug, "kubernetes", "{r}");
    assert!(top.advice.contains("add the draft's title to its aliases"), "{}", top.advice);
    let body_part = top.parts.iter().find(|p| matches!(p.part, Part::Body { .. })).unwrap();
    assert!(
        body_part.cosine.unwrap() >= HIGH_VECTOR_FLOOR && body_part.keyword_rank == Some(1),
        "{body_part:?}"
    );
    assert!(r.candidates.iter().all(|c| c.verdict != Verdict::Exists), "never exists from meaning: {r}");
    assert_eq!(r.body_chunks, 1);
}

#[tokio::test]
async fn a_typo_of_a_name_is_probable_and_an_unrelated_draft_finds_nothing_certain() {
    let notes = notes();
    let r = run(&notes, draft("Kubernets", &[], "")).await;
    assert_eq!((r.verdict, r.candidates[0].slug.as_str()), (Verdict::Probable, "kubernetes"), "{r}");
    // Nothing on the subject: no page is exists or probable.
    let r =
        run(&notes, draft("Gregorian chant", &[], "Plainsong of the western church, sung in unison.")).await;
    assert!(matches!(r.verdict, Verdict::None | Verdict::Related), "{r}");
    assert!(r.candidates.iter().all(|c| c.verdict == Verdict::Related), "{r}");
}

#[tokio::test]
async fn an_empty_draft_is_an_error_and_a_failed_source_is_a_caveat() {
    let notes = notes();
    assert!(matches!(ask(&[&notes], &Draft::default()).await, Err(crate::QueryError::EmptyQuery)));

    let mut broken = MemoryReader::new("broken", vec![page("x", "Gregorian chant", &[], &["Plainsong."])]);
    broken.fail = true;
    let r = ask(&[&notes, &broken], &draft("Gregorian chant", &[], "")).await.unwrap();
    assert_ne!(r.verdict, Verdict::Exists, "{r}");
    assert!(r.degraded.iter().any(|d| d.contains("broken")), "{r:?}");
    assert!(r.notes.iter().any(|n| n.contains("not proof")), "{r:?}");
}

#[test]
fn a_long_body_is_chunked_as_a_page_and_clipped_to_a_query() {
    let section = |i: usize| format!("## Part {i}\n\n{}\n\n", "word ".repeat(300));
    let body: String = (0..12).map(section).collect();
    let chunks = body_chunks("Draft", &body);
    assert!(chunks.len() > 1 && chunks.len() <= MAX_BODY_CHUNKS, "{}", chunks.len());
    assert!(chunks.iter().all(|(_, t)| t.len() <= crate::search::MAX_QUERY_BYTES));
    let lines: Vec<u32> = chunks.iter().map(|c| c.0).collect();
    assert!(lines.windows(2).all(|w| w[0] <= w[1]), "lines in order: {lines:?}");
    assert!(body_chunks("Draft", "  \n").is_empty());
}

#[test]
fn a_title_that_only_contains_a_pages_name_is_not_probable_when_the_body_never_finds_the_page() {
    let title = |evidence: Evidence| PartEvidence {
        part: Part::Title,
        evidence: vec![evidence],
        create_safety: CreateSafety::Probable,
        cosine: Some(0.3),
        keyword_rank: None,
        rank: 1,
        title_phrase: false,
    };
    let body = PartEvidence {
        part: Part::Body { chunk: 0, line: 1 },
        evidence: vec![Evidence::WeakSemantic],
        cosine: Some(0.4),
        ..title(Evidence::WeakSemantic)
    };
    // "A machine for measuring time" names `machine`: alone, the title is the evidence there is.
    let named = title(Evidence::SubjectName);
    assert_eq!(page_verdict(std::slice::from_ref(&named), false), Verdict::Probable);
    // With a body that never finds the page, the draft is about something else: a page to link to.
    assert_eq!(page_verdict(std::slice::from_ref(&named), true), Verdict::Related);
    // A body that finds it too leaves it probable.
    assert_eq!(page_verdict(&[named, body], true), Verdict::Probable);
    // A typo of a name, or a name the vault taught, stands for the whole name: a body does not
    // undo it.
    for vouched in [Evidence::FuzzyName, Evidence::LearntName] {
        assert_eq!(page_verdict(&[title(vouched)], true), Verdict::Probable);
    }
}
