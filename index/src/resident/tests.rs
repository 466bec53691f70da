use super::keyword::*;
use super::postings::Postings;
use super::prepared::*;
use super::shared::*;
use super::slots::*;
use super::*;
use crate::store::*;
use std::collections::HashMap;

fn page(slug: &str, title: &str, aliases: &[&str], bodies: &[(&str, Vec<f32>)]) -> PreparedPage {
    let chunks = bodies
        .iter()
        .enumerate()
        .map(|(i, (text, v))| StoredChunk {
            hit: ChunkHit::numbered(slug, i, title, text),
            text_hash: format!("h:{text}"),
            vector: (!v.is_empty()).then(|| v.clone()),
        })
        .collect();
    PreparedPage::stored(PageRecord::named(slug, title, aliases, bodies.len()), chunks, Lang::English)
}

#[test]
fn a_body_hash_is_the_same_on_every_build_and_ignores_headings_case_and_spacing() {
    let a = page("a", "A", &[], &[("# Tides\nBoats  wait\tFor the tide", vec![])]);
    let b = page("b", "B", &[], &[("## Other heading\nboats wait for the TIDE", vec![])]);
    // SHA-256 of "boats wait for the tide ", its first 8 bytes little-endian: a value saved in
    // snapshots must not move with the compiler (std's DefaultHasher may).
    assert_eq!(body_hash(&a.chunks), 4_323_963_534_690_371_005);
    assert_eq!(body_hash(&a.chunks), body_hash(&b.chunks));
    let c = page("c", "C", &[], &[("boats wait for the tides", vec![])]);
    assert_ne!(body_hash(&a.chunks), body_hash(&c.chunks));
}

fn index(pages: Vec<PreparedPage>) -> ResidentIndex {
    let mut i = ResidentIndex::default();
    i.apply(Prepared::pages(pages));
    i
}

#[test]
fn a_snapshot_reads_back_the_index_it_was_taken_of_and_refuses_a_damaged_one() {
    let mut linked = page("hall", "Odeon", &["Hall of Light"], &[("stone seats", vec![1.0, 0.0])]);
    linked.record.links = Json::of(&serde_json::json!([{"target": "Dock", "label": null}]));
    linked.record.frontmatter = Json::of(&serde_json::json!({"tags": ["venue"]}));
    let mut i = ResidentIndex::with_exact_vectors_up_to(1);
    i.apply(Prepared::pages(vec![
        linked,
        page("dock", "Dock", &[], &[("boats", vec![0.0, 1.0]), ("ropes", vec![])]),
        page("gone", "Gone", &["Hall of Light"], &[("stone", vec![0.5, 0.5])]),
    ]));
    i.apply(Prepared { upserts: vec![], removals: vec!["gone".into()] });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.snapshot");
    let stamp = snapshot::Stamp {
        chunks_version: 3,
        chunks_written_us: 9,
        pages_version: 2,
        chunk_rows: 3,
        page_rows: 2,
        exact_up_to: 1,
        lang: Default::default(),
    };
    i.save(&path, &stamp).unwrap();
    let back = ResidentIndex::restore(&path, &stamp).unwrap().expect("the stamp matches");
    let other = snapshot::Stamp { pages_version: 3, ..stamp };
    assert!(ResidentIndex::restore(&path, &other).unwrap().is_none(), "another stamp is not this one");
    let german = snapshot::Stamp { lang: Lang::parse("de").unwrap(), ..stamp };
    assert!(ResidentIndex::restore(&path, &german).unwrap().is_none(), "words read in another language");
    for q in ["stone", "boats", "ropes", "odeon"] {
        assert_eq!(back.keyword(q, 5, None, Fields::Apart), i.keyword(q, 5, None, Fields::Apart), "{q}");
        assert_eq!(back.titles(q, 5, None), i.titles(q, 5, None), "{q}");
    }
    assert_eq!(back.vector(&[1.0, 0.2], None, 5, None), i.vector(&[1.0, 0.2], None, 5, None));
    assert_eq!(back.alias("hall of light"), i.alias("hall of light"));
    assert_eq!(back.alias("hall of light").len(), 1, "the removed page's name went with it");
    assert_eq!(back.pages(&["hall", "dock"]), i.pages(&["hall", "dock"]));
    assert_eq!(back.pages(&["hall"])[0].links.value()[0]["target"], "Dock");
    assert_eq!(back.unembedded(), i.unembedded());
    // Cut short, or with a count past the file's end: an error, never a panic or a huge
    // reservation.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
    assert!(ResidentIndex::restore(&path, &stamp).is_err());
    // Torn at any byte (a kill inside a save, had it not written through a temporary file): never
    // restored as an index.
    for cut in 0..bytes.len() {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        assert!(
            !matches!(ResidentIndex::restore(&path, &stamp), Ok(Some(_))),
            "torn at {cut} of {}",
            bytes.len()
        );
    }
    let mut huge = bytes.clone();
    // The place of the second part (after the name, the stamp and the chunk file's id,
    // length and dead bytes).
    huge[8 + 80..8 + 88].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&path, &huge).unwrap();
    assert!(ResidentIndex::restore(&path, &stamp).is_err());
}

#[test]
fn past_its_limit_a_source_reads_text_and_exact_vectors_from_its_chunk_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.snapshot");
    let mut i = ResidentIndex::with_exact_vectors_up_to(2);
    i.keep_chunks_beside(Some(&path));
    i.apply(Prepared::pages(vec![page("a", "A", &[], &[("tides", vec![0.6, 0.8]), ("moon", vec![])])]));
    assert!(i.holds_text() && i.stored(&["a#0"]).is_empty(), "below the limit memory holds it all");
    assert!(!chunk_file::path_beside(&path).exists(), "and no file is made");
    // Past the limit: what memory held goes to the file at once, later chunks as they come.
    let b = page("b", "B", &[], &[("spring", vec![1.0, 0.0]), ("neap", vec![0.0, 1.0])]);
    i.apply(Prepared::pages(vec![b]));
    assert!(!i.holds_text());
    i.apply_vectors(&[("a#1".into(), vec![0.0, 2.0])]);
    let stored = i.stored(&["a#0", "a#1", "b#1", "gone#0"]);
    assert_eq!(stored.len(), 3, "a chunk not held is left out");
    let exact = |id: &str| stored[id].1.clone().unwrap();
    assert_eq!(stored["a#0"].0, "tides");
    assert!(exact("a#0").iter().zip([0.6, 0.8]).all(|(x, y)| (x - y).abs() < 1e-6), "not the int8 code");
    assert_eq!((stored["a#1"].0.as_str(), exact("a#1")), ("moon", vec![0.0, 1.0]));
    assert_eq!((stored["b#1"].0.as_str(), exact("b#1")), ("neap", vec![0.0, 1.0]));
    // A text's vector, for a chunk that has the same text, is the exact one the file holds.
    let tides = i.vector_of("h:tides").expect("read from the file");
    assert!(tides.iter().zip([0.6, 0.8]).all(|(x, y)| (x - y).abs() < 1e-6), "not the int8 code");
    assert_eq!(i.vector_of("h:moon"), Some(vec![0.0, 1.0]));
    assert_eq!(i.vector_of("h:nowhere"), None);
    // And a chunk's, by its slot (what `duplicates` compares at its threshold).
    let slots: HashMap<String, usize> = i.embedded_chunks().map(|(_, c, s)| (c, s)).collect();
    let a0 = i.chunk_vector(slots["a#0"], "a#0").expect("a#0 has a vector");
    assert!(a0.iter().zip([0.6, 0.8]).all(|(x, y)| (x - y).abs() < 1e-6), "not the int8 code");
    assert!(i.chunk_vector(slots["a#0"], "b#0").is_none(), "another chunk's slot");
    i.apply(Prepared::pages(vec![page("b", "B", &[], &[("ebb", vec![0.0, 1.0])])]));
    assert_eq!(i.stored(&["b#0", "b#1"]).into_keys().collect::<Vec<_>>(), ["b#0"], "replaced");
    assert_eq!(i.stored(&["b#0"])["b#0"].0, "ebb");
    // The snapshot names the file: restored, the reads go on; without it, it is refused.
    let stamp = snapshot::Stamp {
        chunks_version: 1,
        chunks_written_us: 1,
        pages_version: 1,
        chunk_rows: 3,
        page_rows: 2,
        exact_up_to: 2,
        lang: Default::default(),
    };
    i.save(&path, &stamp).unwrap();
    let ids = ["a#0", "a#1", "b#0"];
    let back = ResidentIndex::restore(&path, &stamp).unwrap().expect("the stamp matches");
    assert_eq!(back.stored(&ids), i.stored(&ids));
    assert_eq!(back.stored(&ids).len(), 3);
    assert_eq!(back.vector_of("h:moon"), Some(vec![0.0, 1.0]));
    std::fs::remove_file(chunk_file::path_beside(&path)).unwrap();
    assert!(ResidentIndex::restore(&path, &stamp).is_err());
    ResidentIndex::forget_snapshot(&path);
    assert!(!path.exists());
}

#[tokio::test]
async fn a_chunk_file_mostly_dead_is_compacted_and_its_snapshot_names_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.snapshot");
    let mut i = ResidentIndex::with_exact_vectors_up_to(2);
    i.keep_chunks_beside(Some(&path));
    // 200 pages of 4 KiB text each: 0.8 MiB live, then edited twice (1.6 MiB dead).
    let pages = |round: usize| -> Vec<PreparedPage> {
        (0..200)
            .map(|p| {
                let text = format!("round {round} page {p} ").repeat(200);
                let v = vec![(p % 7) as f32 + 1.0, round as f32];
                page(&format!("p{p}"), "P", &[], &[(text.as_str(), v)])
            })
            .collect()
    };
    i.apply(Prepared::pages(pages(0)));
    let live = i.file.as_ref().unwrap().len();
    assert_eq!(i.file.as_ref().unwrap().dead(), 0);
    i.apply(Prepared::pages(pages(1)));
    assert!(!i.file.as_ref().unwrap().compaction_due(), "half dead is not yet most of it");
    i.apply(Prepared::pages(pages(2)));
    let file = i.file.as_ref().unwrap();
    assert!(file.compaction_due(), "dead {} of {}", file.dead(), file.len());
    let ids: Vec<String> = (0..200).map(|p| format!("p{p}#0")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let want = i.stored(&ids);
    assert_eq!(want.len(), 200);
    assert!(want["p5#0"].0.starts_with("round 2 page 5 "));

    let old_stamp = snapshot::Stamp {
        chunks_version: 2,
        chunks_written_us: 1,
        pages_version: 2,
        chunk_rows: 200,
        page_rows: 200,
        exact_up_to: 2,
        lang: Default::default(),
    };
    i.save(&path, &old_stamp).unwrap();
    let r = Resident::new("s", i);
    let (before, after) = r.compact_chunk_file().await.unwrap().expect("due");
    // A death before the next snapshot: the old one is refused (another file now), so the
    // next open loads the tables rather than read records where they no longer are.
    assert!(ResidentIndex::restore(&path, &old_stamp).is_err());
    assert!(after < before / 2 && after <= live + 64, "{before} → {after} bytes (live {live})");
    assert_eq!(std::fs::metadata(chunk_file::path_beside(&path)).unwrap().len(), after, "renamed in place");
    assert!(r.compact_chunk_file().await.unwrap().is_none(), "nothing dead left");
    assert_eq!(r.read().stored(&ids), want, "every chunk read back from the copy");
    // The snapshot names the copy, and its dead bytes go on counting from there.
    let stamp = snapshot::Stamp {
        chunks_version: 3,
        chunks_written_us: 1,
        pages_version: 3,
        chunk_rows: 200,
        page_rows: 200,
        exact_up_to: 2,
        lang: Default::default(),
    };
    r.read().save(&path, &stamp).unwrap();
    let mut back = ResidentIndex::restore(&path, &stamp).unwrap().expect("the stamp matches");
    assert_eq!(back.stored(&ids), want);
    back.apply(Prepared::pages(pages(3)));
    assert_eq!(back.file.as_ref().unwrap().dead(), after - 16, "every record of the copy replaced");
}

#[test]
fn a_purge_drops_the_terms_no_document_holds_any_more() {
    let t = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    let mut b = Bm25::default();
    b.insert(0, &t("tide moon"));
    b.insert(1, &t("comet"));
    b.insert(2, &t("sun tide"));
    b.remove(1);
    b.remove(2);
    assert_eq!(b.purge(), vec![1, 2]);
    let mut terms: Vec<&str> = (0..b.terms.len() as u32).map(|id| b.terms.name(id)).collect();
    terms.sort();
    assert_eq!(terms, ["moon", "tide"]);
    assert_eq!(b.postings.len(), 2);
    let mut fresh = Bm25::default();
    fresh.insert(0, &t("tide moon"));
    assert_eq!(b.scores(&t("moon tide"), Fields::Apart), fresh.scores(&t("moon tide"), Fields::Apart));
    b.insert(1, &t("comet sun"));
    assert_eq!(
        b.scores(&t("comet"), Fields::Apart).len(),
        1,
        "a term comes back with a document that holds it"
    );
    assert_eq!(b.scores(&t("tide"), Fields::Apart).len(), 1);
}

#[test]
fn terms_are_lancedb_s_stemmed_lowercase_words_without_stop_words() {
    assert_eq!(terms("The Running Dogs of Café"), vec!["run", "dog", "cafe"]);
}

#[test]
fn bm25_matches_the_formula_and_prefers_the_rarer_term() {
    let i = index(vec![
        page("a", "A", &[], &[("tides tides moon", vec![1.0, 0.0])]),
        page("b", "B", &[], &[("moon", vec![0.0, 1.0])]),
        page("c", "C", &[], &[("sun", vec![0.0, 1.0])]),
    ]);
    let hits = i.keyword("tides", 10, None, Fields::Together);
    assert_eq!(hits.iter().map(|h| h.slug.as_str()).collect::<Vec<_>>(), ["a"]);
    // Search text "A\n\ntides tides moon": "a" is a stop word, so 3 terms; average (3+2+2)/3.
    let (n, df, tf, len, avg) = (3.0f32, 1.0f32, 2.0f32, 3.0f32, 7.0f32 / 3.0);
    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
    let want = idf * (K1 + 1.0) * tf / (tf + K1 * (1.0 - B + B * len / avg));
    assert!((hits[0].score - want).abs() < 1e-5, "{} against {want}", hits[0].score);
    let both = i.keyword("tides moon", 10, None, Fields::Apart);
    assert_eq!(both.iter().map(|h| h.slug.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    // A word the query says twice counts twice (query-term frequency, k3 unbounded).
    let twice = i.keyword("tides tides", 10, None, Fields::Together);
    assert!((twice[0].score - 2.0 * want).abs() < 1e-5, "{} against {}", twice[0].score, 2.0 * want);
}

#[test]
fn bm25f_reads_a_title_word_against_titles_not_against_the_body_it_heads() {
    let long_body = ["waves break on the shingle every morning while gulls circle the pier"; 4].join(" ");
    let i = index(vec![
        page("long", "Tides", &[], &[(long_body.as_str(), vec![])]),
        page("short", "Tides", &[], &[("gulls", vec![])]),
        page("other", "Almanac", &[], &[("moon phases and tides", vec![])]),
    ]);
    let score = |fields, slug: &str| {
        let hits = i.keyword("tides", 10, None, fields);
        hits.iter().find(|h| h.slug == slug).map(|h| h.score).unwrap()
    };
    // Run together, the long chunk's title word is diluted by its body.
    assert!(score(Fields::Together, "long") < 0.5 * score(Fields::Together, "short"));
    // Apart, the two titles are the same length, so their word counts the same.
    assert!((score(Fields::Apart, "long") - score(Fields::Apart, "short")).abs() < 1e-6);
    // The formula: a heading of one term where every heading has one, and no body count, so the
    // normalised frequency is the heading weight (the average body's length over the average
    // heading's, 1) times 1 / (1 − b + b·1/1) = 1, saturated once.
    let (long, almanac) = (terms(&long_body).len() as f32, terms("moon phases and tides").len() as f32);
    let avg_body = (long + 1.0 + almanac) / 3.0;
    let (n, df) = (3.0f32, 3.0f32);
    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
    let want = idf * (K1 + 1.0) * avg_body / (avg_body + K1);
    assert!((score(Fields::Apart, "short") - want).abs() < 1e-5);
    // A body word counts against the bodies' average length, with weight 1.
    let tf = 1.0 / (1.0 - B + B * almanac / avg_body);
    let want = idf * (K1 + 1.0) * tf / (tf + K1);
    assert!(
        (score(Fields::Apart, "other") - want).abs() < 1e-5,
        "{} against {want}",
        score(Fields::Apart, "other")
    );
}

#[test]
fn vectors_score_by_cosine_and_within_restricts_to_pages() {
    let i = index(vec![
        page("a", "A", &[], &[("x", vec![3.0, 4.0]), ("y", vec![0.0, 2.0])]),
        page("b", "B", &[], &[("z", vec![1.0, 0.0])]),
    ]);
    let hits = i.vector(&[1.0, 0.0], None, 10, None);
    assert_eq!(hits.iter().map(|h| h.chunk_id.as_str()).collect::<Vec<_>>(), ["b#0", "a#0", "a#1"]);
    assert!((hits[1].score - 0.6).abs() < 1e-6);
    let within = i.vector(&[1.0, 0.0], Some(&["a"]), 1, None);
    assert_eq!(within.iter().map(|h| h.chunk_id.as_str()).collect::<Vec<_>>(), ["a#0"]);
}

#[test]
fn upserts_replace_and_removals_forget_everything_about_a_page() {
    let mut i = index(vec![
        page("hall", "Indoor Greek Amphitheater", &["Hall of Light"], &[("stone seats", vec![1.0, 0.0])]),
        page("dock", "Dock", &[], &[("boats", vec![0.0, 1.0])]),
    ]);
    assert_eq!(i.alias("hall of light").len(), 1);
    assert_eq!(i.titles("greek amphitheater", 5, None)[0].slug, "hall");
    i.apply(Prepared {
        upserts: vec![page("hall", "Odeon", &[], &[("marble", vec![1.0, 0.0])])],
        removals: vec![],
    });
    assert!(i.alias("hall of light").is_empty());
    assert!(i.titles("greek", 5, None).is_empty());
    assert!(i.keyword("stone", 5, None, Fields::Apart).is_empty());
    assert_eq!(i.keyword("marble", 5, None, Fields::Apart)[0].slug, "hall");
    assert_eq!(i.chunk_count(), 2);
    i.apply(Prepared { upserts: vec![], removals: vec!["hall".into(), "missing".into()] });
    assert_eq!((i.page_count(), i.chunk_count()), (1, 1));
    assert!(i.keyword("marble", 5, None, Fields::Apart).is_empty());
    assert!(i.pages(&["hall"]).is_empty());
    assert_eq!(i.vector(&[1.0, 0.0], None, 5, None).len(), 1);
    // Freed slots are reused and stay consistent.
    i.apply(Prepared::pages(vec![page("new", "New", &[], &[("marble", vec![-1.0, 0.0])])]));
    assert_eq!(i.keyword("marble", 5, None, Fields::Apart)[0].slug, "new");
    assert_eq!(i.chunk_count(), 2);
    let v = i.vector(&[-1.0, 0.0], None, 5, None);
    assert_eq!((v[0].slug.as_str(), v[0].score), ("new", 1.0), "the reused slot holds the new vector");
}

#[test]
fn removed_documents_score_nothing_and_their_slots_come_back_at_a_purge() {
    let t = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    let mut b = Bm25::default();
    b.insert(0, &t("tide moon"));
    b.insert(1, &t("tide"));
    b.insert(2, &t("sun"));
    let before = b.scores(&t("tide"), Fields::Apart);
    b.remove(1);
    // Scored as if document 1 had never been: df 1 of 2 documents, average length 1.5.
    let mut fresh = Bm25::default();
    fresh.insert(0, &t("tide moon"));
    fresh.insert(2, &t("sun"));
    assert_eq!(b.scores(&t("tide"), Fields::Apart), fresh.scores(&t("tide"), Fields::Apart));
    assert_ne!(b.scores(&t("tide"), Fields::Apart), before);
    assert!(!b.purge_due(), "one removal of three does not pay for a pass over every list");
    assert_eq!(b.purge(), vec![1]);
    assert_eq!(b.postings.iter().map(Postings::len).sum::<usize>(), 3, "its posting went");
    b.insert(1, &t("moon"));
    let moon: HashMap<u32, f32> = b.scores(&t("moon"), Fields::Apart).into_iter().collect();
    assert_eq!(moon.len(), 2, "the slot holds the new document alone");
}

#[test]
fn past_its_limit_a_source_keeps_only_the_text_of_chunks_waiting_for_a_vector() {
    let mut i = ResidentIndex::with_exact_vectors_up_to(1);
    i.apply(Prepared::pages(vec![page(
        "a",
        "A",
        &[],
        &[("tides", vec![1.0, 0.0]), ("moon", vec![0.0, 1.0])],
    )]));
    assert!(!i.holds_text());
    let hit = &i.keyword("tides", 5, None, Fields::Apart)[0];
    assert_eq!((hit.slug.as_str(), hit.text.as_str()), ("a", ""), "the store holds the text");
    i.apply(Prepared::pages(vec![page("b", "B", &[], &[("spring", vec![])])]));
    assert_eq!(
        i.keyword("spring", 5, None, Fields::Apart)[0].text,
        "spring",
        "kept until its vector arrives"
    );
    assert_eq!(i.unembedded()[0].2, "B\n\nspring");
    i.apply_vectors(&[("b#0".into(), vec![1.0, 1.0])]);
    assert_eq!(i.keyword("spring", 5, None, Fields::Apart)[0].text, "");
    // Below the limit every chunk keeps its text.
    let small = index(vec![page("a", "A", &[], &[("tides", vec![1.0, 0.0])])]);
    assert_eq!(small.keyword("tides", 5, None, Fields::Apart)[0].text, "tides");
}

#[test]
fn stop_words_are_the_keyword_arm_s_and_template_bodies_are_counted() {
    assert!(is_stop_word("the") && is_stop_word("Which") && !is_stop_word("tides") && !is_stop_word("milk"));
    let stub =
        |slug: &str| page(slug, slug, &[], &[(&format!("# {slug}\n\nno documented columns"), vec![1.0])]);
    let mut i =
        index(vec![stub("a"), stub("b"), stub("c"), page("milk", "Milk", &[], &[("buy milk", vec![1.0])])]);
    assert_eq!(i.pages(&["a"])[0].body_shared_by, 3);
    assert_eq!(i.pages(&["milk"])[0].body_shared_by, 1, "a short note of its own is not a template");
    i.apply(Prepared { upserts: vec![], removals: vec!["b".into()] });
    assert_eq!(i.pages(&["a"])[0].body_shared_by, 2);
}

#[test]
fn a_page_is_named_by_its_file_too() {
    let mut p = page("meetings/standup-2024-05-01", "Agenda", &[], &[("who does what", vec![1.0])]);
    p.record.path = "meetings/Standup 2024-05-01.md".into();
    let i = index(vec![PreparedPage::stored(p.record.clone(), vec![], Lang::English)]);
    assert_eq!(i.alias("standup 2024-05-01")[0].slug, "meetings/standup-2024-05-01");
    assert_eq!(file_name("a/b/Note.markdown"), "Note");
}

#[test]
fn chunks_without_vectors_are_found_by_words_and_join_the_vector_arm_when_theirs_arrive() {
    let mut i = index(vec![
        page("a", "A", &[], &[("tides", vec![1.0, 0.0])]),
        page("b", "B", &[], &[("moon", vec![]), ("sun", vec![])]),
    ]);
    assert_eq!(i.unembedded_count(), 2);
    assert_eq!(i.keyword("moon", 5, None, Fields::Apart)[0].slug, "b");
    let only_a: Vec<String> = i.vector(&[0.0, 1.0], None, 5, None).into_iter().map(|h| h.slug).collect();
    assert_eq!(only_a, ["a"], "a chunk without a vector is not in the vector arm");
    let pending = i.unembedded();
    assert_eq!(pending.iter().map(|(id, _, _)| id.as_str()).collect::<Vec<_>>(), ["b#0", "b#1"]);
    assert_eq!(pending[0].2, "B\n\nmoon", "the text the model embeds");
    i.apply_vectors(&[("b#0".into(), vec![0.0, 3.0]), ("gone#7".into(), vec![1.0, 1.0])]);
    assert_eq!(i.unembedded_count(), 1);
    let v = i.vector(&[0.0, 1.0], None, 5, None);
    assert_eq!((v[0].chunk_id.as_str(), v[0].score), ("b#0", 1.0));
    assert_eq!(i.vector_of("h:moon"), Some(vec![0.0, 1.0]), "reusable by text hash, normalised");
    i.apply(Prepared { upserts: vec![], removals: vec!["b".into()] });
    assert_eq!(i.unembedded_count(), 0);
    assert_eq!(i.vector_of("h:moon"), None);
}

#[test]
fn a_german_query_s_compound_finds_the_page_that_holds_its_parts() {
    let de = Lang::parse("de").unwrap();
    let german = |slug: &str, body: &str| {
        let c = StoredChunk {
            hit: ChunkHit::numbered(slug, 0, slug, body),
            text_hash: format!("h:{body}"),
            vector: None,
        };
        PreparedPage::stored(PageRecord::named(slug, slug, &[], 1), vec![c], de)
    };
    let mut i = ResidentIndex::default().in_language(de);
    i.apply(Prepared::pages(vec![
        german("iconv", "Wandelt die Kodierung der Zeichen eines Textes um."),
        german("locale", "Zeigt die Zeichen der Locale an."),
        german("mount", "Hängt ein Dateisystem ein."),
    ]));
    let terms = i.query_terms("Zeichenkodierung umwandeln");
    assert_eq!(terms.words, terms_in(de, "Zeichenkodierung umwandeln"));
    assert_eq!(
        terms.parts,
        terms_in(de, "Zeichen Kodierung"),
        "the compound read as the parts the source holds"
    );
    let hits = i.keyword("Zeichenkodierung", 3, None, Fields::Apart);
    assert_eq!(hits.first().map(|h| h.slug.as_str()), Some("iconv"), "{hits:?}");
    // Without the parts, no page holds the compound.
    assert!(i.chunk_text.scores(&terms.words, Fields::Apart).is_empty());
    // English writes compounds apart: nothing is split.
    let english = index(vec![page("a", "A", &[], &[("character encoding", vec![])])]);
    assert!(english.query_terms("characterencoding").parts.is_empty());
}

#[test]
fn a_word_and_its_compounds_joined_score_as_one_term_of_their_summed_counts() {
    let i = index(vec![
        page("a", "A", &[], &[("moon moon tides", vec![])]),
        page("b", "B", &[], &[("moonlight tides", vec![])]),
        page("c", "C", &[], &[("sun", vec![])]),
    ]);
    let joined = i.chunk_text.scores(&["moon|moonlight".to_string()], Fields::Together);
    let mut slugs: Vec<u32> = joined.iter().map(|(d, _)| *d).collect();
    slugs.sort();
    assert_eq!(slugs.len(), 2, "both pages hold the joined term: {joined:?}");
    // One term of df 2: the same idf for both, where "moonlight" alone (df 1) weighs more.
    let alone = i.chunk_text.scores(&["moonlight".to_string()], Fields::Together);
    let b_joined = joined.iter().find(|(d, _)| alone.iter().any(|(e, _)| e == d)).unwrap().1;
    assert!(b_joined < alone[0].1, "{b_joined} against {}", alone[0].1);
    // And the page that says it twice scores above the page that says it once.
    let a_joined = joined.iter().find(|(d, _)| alone.iter().all(|(e, _)| e != d)).unwrap().1;
    assert!(a_joined > b_joined);
}
