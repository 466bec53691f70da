//! Per-source LanceDB storage against a real on-disk database (temp dir), with the real model.

use cairn_index::resident::Fields;
use cairn_index::{Database, Embedder, Manifest, OrtEmbedder, OrtOptions, PageWrite, SourceInfo, WriteBatch};
use cairn_ingest::{ParseOptions, parse_page};
use std::path::Path;
use std::sync::OnceLock;

fn embedder() -> &'static OrtEmbedder {
    static E: OnceLock<OrtEmbedder> = OnceLock::new();
    E.get_or_init(|| OrtEmbedder::open(OrtOptions::default()).expect("real model must load"))
}

fn manifest() -> Manifest {
    Manifest::current(embedder().model_id(), embedder().dim())
}

fn page_write(source: &str, path: &str, text: &str) -> PageWrite {
    let page = parse_page(source, Path::new(path), text.as_bytes(), &ParseOptions::default()).unwrap();
    let texts: Vec<String> = page.chunks.iter().map(|c| c.embed_text()).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = embedder().embed_documents(&refs).unwrap().vectors.into_iter().map(Some).collect();
    PageWrite { page, vectors, mtime_ms: 0 }
}

const AMPHI: &str = "---\ntitle: Indoor Greek Amphitheater for Debate\naliases: [Hall of Light]\n---\n\
    # Indoor Greek Amphitheater for Debate\n\nA round hall with tiered stone seats where citizens argue in public.\n\n\
    ## Acoustics\n\nThe ceiling treatment uses slatted oak panels to absorb echo.\n";
const SOURDOUGH: &str =
    "# Sourdough\n\nFeed the starter, mix flour and water, proof overnight and bake in a hot oven.\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_read_and_search_one_source() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let batch = WriteBatch {
        upserts: vec![
            page_write("notes", "projects/amphi.md", AMPHI),
            page_write("notes", "sourdough.md", SOURDOUGH),
        ],
        removals: vec![],
    };
    let chunks: usize = batch.upserts.iter().map(|w| w.page.chunks.len()).sum();
    store.write(&batch).await.unwrap();
    assert_eq!(store.counts().await.unwrap(), (2, chunks));
    store.build_text_indexes().await.unwrap();

    let kw = store.keyword("ceiling oak", 5).await.unwrap();
    assert_eq!(kw[0].slug, "projects/amphi");
    assert!(kw[0].text.contains("slatted oak"));
    assert!(kw[0].line_start <= 9 && kw[0].line_end >= 9, "the oak line is line 9: {kw:?}");

    let q = embedder().embed_query("how do I bake bread").unwrap();
    let vec_hits = store.vector(&q, 5).await.unwrap();
    assert_eq!(vec_hits[0].slug, "sourdough");
    assert!(vec_hits[0].score > 0.3 && vec_hits[0].score <= 1.0, "cosine {}", vec_hits[0].score);

    let titles = store.titles("greek amphitheater", 5).await.unwrap();
    assert_eq!(titles[0].slug, "projects/amphi");
    let alias = store.alias("hall of light").await.unwrap();
    assert_eq!(alias.len(), 1);
    assert_eq!(alias[0].title, "Indoor Greek Amphitheater for Debate");
    assert_eq!(store.alias("sourdough").await.unwrap()[0].slug, "sourdough", "a title is an exact name too");
    assert!(store.alias("nothing like this").await.unwrap().is_empty());

    let page = store.page("projects/amphi").await.unwrap().unwrap();
    assert_eq!(page.aliases, ["Hall of Light"]);
    assert_eq!(page.chunk_count as usize, batch.upserts[0].page.chunks.len());
    assert!(store.page("missing").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_page_drops_its_old_chunks_and_removal_removes_everything() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let long =
        format!("{AMPHI}\n## History\n\n{}\n", "The hall was rebuilt after the fire of 1871. ".repeat(30));
    let first = page_write("notes", "a.md", &long);
    assert!(first.page.chunks.len() >= 2);
    store.write(&WriteBatch { upserts: vec![first.clone()], removals: vec![] }).await.unwrap();
    let edited = long.replace("slatted oak panels", "woven wool banners");
    let second = page_write("notes", "a.md", &edited);
    store.write(&WriteBatch { upserts: vec![second.clone()], removals: vec![] }).await.unwrap();
    assert_eq!(
        store.counts().await.unwrap(),
        (1, second.page.chunks.len()),
        "old chunks replaced, not added to"
    );
    let chunks = store.page_chunks("a").await.unwrap();
    assert!(chunks.iter().any(|c| c.text.contains("wool")));
    assert!(!chunks.iter().any(|c| c.text.contains("oak")));
    // Each chunk keeps the vector it was written with.
    let stored = store.chunk_contents().await.unwrap();
    assert_eq!(stored.len(), second.vectors.len());
    assert_eq!(stored[0].vector, second.vectors[0]);

    store.write(&WriteBatch { upserts: vec![], removals: vec!["a".into()] }).await.unwrap();
    assert_eq!(store.counts().await.unwrap(), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_are_separate_and_a_manifest_mismatch_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap();
    let db = Database::open(uri).await.unwrap();
    let a = db.open_source("alpha", &manifest()).await.unwrap();
    let b = db.open_source("beta", &manifest()).await.unwrap();
    a.write(&WriteBatch { upserts: vec![page_write("alpha", "same.md", AMPHI)], removals: vec![] })
        .await
        .unwrap();
    b.write(&WriteBatch { upserts: vec![page_write("beta", "same.md", SOURDOUGH)], removals: vec![] })
        .await
        .unwrap();
    assert_eq!(a.page("same").await.unwrap().unwrap().title, "Indoor Greek Amphitheater for Debate");
    assert_eq!(b.page("same").await.unwrap().unwrap().title, "Sourdough");
    assert_eq!(db.source_ids().await.unwrap(), ["alpha", "beta"]);

    let other_model = Manifest { model_id: "some-other-model".into(), ..manifest() };
    let err = db.open_source("alpha", &other_model).await.unwrap_err().to_string();
    assert!(err.contains("alpha") && err.contains("reindex"), "{err}");
    let rebuilt = db.rebuild_source("alpha", &other_model, &SourceInfo::default()).await.unwrap();
    assert_eq!(rebuilt.counts().await.unwrap(), (0, 0));
    assert!(db.open_source("alpha", &other_model).await.is_ok());
    assert_eq!(db.open_source("beta", &manifest()).await.unwrap().counts().await.unwrap(), (1, 1));
}

/// The fence: once a second writer has fenced a source, the first one's commits (read at the
/// version it last wrote, as a writer's pinned reads are) are refused, a late fence of its own
/// too, and the tables hold exactly what the second writer wrote on top of what was there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_fenced_by_another_commits_nothing_more() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap();
    let options = cairn_index::StorageOptions::default();
    let one = |path: &str, text: &str| WriteBatch {
        upserts: vec![page_write("notes", path, text)],
        removals: vec![],
    };

    let first =
        Database::open_pinned(uri, &options).await.unwrap().open_source("notes", &manifest()).await.unwrap();
    first.fence("first").await.unwrap();
    first.write(&one("amphi.md", AMPHI)).await.unwrap();

    let second =
        Database::open_pinned(uri, &options).await.unwrap().open_source("notes", &manifest()).await.unwrap();
    second.fence("second").await.unwrap();
    assert_eq!(second.counts().await.unwrap().0, 1, "the fence keeps the rows it found");

    for refused in [
        first.write(&one("stale.md", SOURDOUGH)).await.map(drop),
        first.write(&WriteBatch { upserts: vec![], removals: vec!["amphi".into()] }).await.map(drop),
        first.fence("first, late").await,
    ] {
        let err = refused.expect_err("a fenced writer's commit must be refused");
        assert!(matches!(err, cairn_index::Error::Fenced { .. }), "{err}");
        assert!(err.to_string().contains("taken this source over"), "{err}");
    }
    second.write(&one("sourdough.md", SOURDOUGH)).await.unwrap();

    let fresh = Database::open(uri).await.unwrap().open_source("notes", &manifest()).await.unwrap();
    assert_eq!(fresh.fenced_by().await.unwrap().as_deref(), Some("second"));
    let mut slugs: Vec<String> = fresh.load().await.unwrap().states.into_keys().collect();
    slugs.sort();
    assert_eq!(slugs, ["amphi", "sourdough"], "nothing of the fenced writer's later commits landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_source_names_itself_and_leaves_the_others_working() {
    let dir = tempfile::tempdir().unwrap();
    let uri = dir.path().to_str().unwrap();
    let db = Database::open(uri).await.unwrap();
    db.open_source("good", &manifest()).await.unwrap();
    db.open_source("broken", &manifest()).await.unwrap();
    // Damage: the chunks table's folder replaced by garbage.
    let chunks_dir = dir.path().join("broken_chunks.lance");
    std::fs::remove_dir_all(&chunks_dir).unwrap();
    std::fs::write(&chunks_dir, b"not a lance table").unwrap();
    let db = Database::open(uri).await.unwrap();
    let err = db.open_source("broken", &manifest()).await.unwrap_err().to_string();
    assert!(err.contains("broken"), "{err}");
    assert!(err.contains("cairn doctor --repair"), "{err}");
    assert!(db.open_source("good", &manifest()).await.is_ok());
}

/// The resident index a writer keeps by applying its commits answers exactly as one loaded from
/// the tables afterwards, and ranks as LanceDB's own full-text and vector search do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resident_index_kept_by_commits_matches_the_tables() {
    use cairn_index::{Prepared, Resident, ResidentIndex};
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let kept = Resident::new("notes", ResidentIndex::default());
    let tide = "# Tides\n\nThe moon pulls the oceans; spring tides follow the full and new moon.\n";
    let harbour =
        "---\naliases: [Old Port]\n---\n# Harbour\n\nBoats wait for the tide to turn before they leave.\n";
    let batches = [
        WriteBatch {
            upserts: vec![
                page_write("notes", "projects/amphi.md", AMPHI),
                page_write("notes", "sourdough.md", SOURDOUGH),
                page_write("notes", "tides.md", tide),
            ],
            removals: vec![],
        },
        WriteBatch {
            upserts: vec![
                page_write("notes", "projects/amphi.md", &AMPHI.replace("slatted oak panels", "woven wool")),
                page_write("notes", "harbour.md", harbour),
            ],
            removals: vec!["sourdough".into()],
        },
    ];
    for b in &batches {
        store.write(b).await.unwrap();
        kept.apply(Prepared::batch(b, kept.lang())).await.unwrap();
    }
    store.optimize().await.unwrap();
    store.build_text_indexes().await.unwrap();
    let (loaded, _) = Resident::load(&store, usize::MAX).await.unwrap();
    let counts = store.counts().await.unwrap();
    let queries = ["tide moon", "woven wool ceiling", "oak", "bread flour", "old port", "greek amphitheater"];
    let mut lance = Vec::new();
    for q in queries {
        let v = embedder().embed_query(q).unwrap();
        lance.push((store.keyword(q, 10).await.unwrap(), store.vector(&v, 10).await.unwrap(), v));
    }
    let (kept, loaded) = (kept.read(), loaded.read());
    assert_eq!((kept.page_count(), kept.chunk_count()), counts);
    assert_eq!((loaded.page_count(), loaded.chunk_count()), counts);
    let ids = |h: &[cairn_index::ChunkHit]| h.iter().map(|h| h.chunk_id.clone()).collect::<Vec<_>>();
    for (q, (lance_kw, lance_vec, v)) in queries.into_iter().zip(&lance) {
        assert_eq!(
            kept.keyword(q, 10, None, Fields::Apart),
            loaded.keyword(q, 10, None, Fields::Apart),
            "{q}"
        );
        assert_eq!(kept.titles(q, 10, None), loaded.titles(q, 10, None), "{q}");
        assert_eq!(
            ids(&kept.keyword(q, 10, None, Fields::Together)),
            ids(lance_kw),
            "{q}: the same chunks as LanceDB, in order (BM25 over the search text, run together)"
        );
        for (a, b) in kept.keyword(q, 10, None, Fields::Together).iter().zip(lance_kw) {
            assert!(
                (a.score - b.score).abs() < 1e-3 * b.score.max(1.0),
                "{q}: BM25 {} vs LanceDB {}",
                a.score,
                b.score
            );
        }
        assert_eq!(kept.vector(v, None, 10, None), loaded.vector(v, None, 10, None), "{q}");
        assert_eq!(ids(&kept.vector(v, None, 10, None)), ids(lance_vec), "{q}: the same chunks as LanceDB");
        assert!((kept.vector(v, None, 1, None)[0].score - lance_vec[0].score).abs() < 1e-4);
    }
    assert_eq!(kept.alias("old port"), loaded.alias("old port"));
    assert_eq!(kept.alias("old port")[0].slug, "harbour");
    assert!(kept.keyword("oak", 10, None, Fields::Apart).is_empty(), "the edited-out words are gone");
    assert!(kept.alias("sourdough").is_empty() && kept.pages(&["sourdough"]).is_empty());
}

/// Pages are written first and their vectors attached by a later commit; a source loaded in
/// between knows which chunks wait, and a vector for a chunk replaced since is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vectors_attached_after_the_pages_and_a_load_in_between_knows_what_waits() {
    use cairn_index::Resident;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let full = page_write("notes", "tides.md", "# Tides\n\nSpring tides follow the full and new moon.\n");
    let bare = PageWrite { vectors: vec![None; full.vectors.len()], ..full.clone() };
    store.write(&WriteBatch { upserts: vec![bare], removals: vec![] }).await.unwrap();
    assert_eq!(store.unembedded().await.unwrap(), full.vectors.len());
    let (resident, loaded) = Resident::load(&store, usize::MAX).await.unwrap();
    assert!(loaded.inconsistent.is_empty() && loaded.orphans.is_empty());
    let waiting = resident.read().unembedded();
    assert_eq!(waiting.len(), full.vectors.len());
    assert_eq!(
        resident.read().keyword("spring tides", 5, None, Fields::Apart)[0].slug,
        "tides",
        "found by its words meanwhile"
    );
    let attach: Vec<(String, Vec<f32>)> = full
        .page
        .chunks
        .iter()
        .zip(&full.vectors)
        .map(|(c, v)| (c.id.clone(), v.clone().unwrap()))
        .chain([("a-chunk-replaced-since".to_string(), vec![0.5; 384])])
        .collect();
    store.attach_vectors(&attach).await.unwrap();
    assert_eq!(store.unembedded().await.unwrap(), 0);
    assert_eq!(
        store.chunk_contents().await.unwrap().len(),
        full.vectors.len(),
        "no row made for the stale id"
    );
    let (resident, _) = Resident::load(&store, usize::MAX).await.unwrap();
    assert_eq!(resident.read().unembedded_count(), 0);
}

/// A crash between the two writes of a commit leaves chunk rows of the new content under the
/// old page row; the next load finds the page (and chunk rows of a page never written) and says
/// so, so that the writer redoes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_a_crash_left_disagreeing_are_found_on_load() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let v1 = page_write("notes", "a.md", "# A\n\nThe first version of the page.\n");
    store.write(&WriteBatch { upserts: vec![v1.clone()], removals: vec![] }).await.unwrap();
    let v2 = page_write("notes", "a.md", "# A\n\nThe edited version of the page.\n");
    let fresh = page_write("notes", "b.md", "# B\n\nA page that never got its row.\n");
    store.crash_after_chunks(&WriteBatch { upserts: vec![v2, fresh], removals: vec![] }).await.unwrap();
    // An edit that keeps a chunk's text keeps its id: that row must agree with the new page too.
    let stays = "A paragraph that stays as it is, long enough to be a chunk of its own: ".repeat(3);
    let page = |last: &str| format!("# C\n\n{stays}\n\n## Two\n\n{}\n", last.repeat(3));
    let before = page_write("notes", "c.md", &page("The second section, which the edit below will change. "));
    let after = page_write("notes", "c.md", &page("The second section, as the edit has changed it now. "));
    assert_eq!(before.page.chunks.len(), 2);
    assert_eq!(before.page.chunks[0].id, after.page.chunks[0].id, "the first chunk keeps its id");
    for w in [before, after] {
        store.write(&WriteBatch { upserts: vec![w], removals: vec![] }).await.unwrap();
    }
    let loaded = store.load().await.unwrap();
    assert_eq!(loaded.inconsistent, ["a"]);
    assert_eq!(loaded.orphans, ["b"]);
    let a = &loaded.states["a"];
    assert!(!a.clean && a.content_hash.is_empty(), "the page is redone even if its file goes back to v1");
}

/// A source loaded with int8-coded vectors answers the vector arm as the exact one does: the
/// same chunks, in the same order, with the same (stored, exact) cosines; and the vector of a
/// text it holds comes from the store, since the codes are not the model's vector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn int8_vectors_re_scored_from_the_store_answer_as_exact_ones() {
    use cairn_index::Resident;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let pages = [
        ("amphi.md", AMPHI),
        ("sourdough.md", SOURDOUGH),
        (
            "tides.md",
            "# Tides\n\nSpring tides follow the full and new moon.\n\n## Neap\n\nNeap tides come at the quarter moons.\n",
        ),
        ("kiln.md", "# Kiln\n\nA kiln fires clay at high heat until it turns to stoneware.\n"),
        ("rye.md", "# Rye bread\n\nRye flour holds less gluten, so the loaf is dense and keeps for days.\n"),
    ];
    let upserts: Vec<PageWrite> = pages.iter().map(|(p, t)| page_write("notes", p, t)).collect();
    store.write(&WriteBatch { upserts: upserts.clone(), removals: vec![] }).await.unwrap();
    let (exact, _) = Resident::load(&store, usize::MAX).await.unwrap();
    let (coded, _) = Resident::load(&store, 0).await.unwrap();
    assert!(exact.read().exact_vectors());
    assert!(!coded.read().exact_vectors(), "past its limit a source holds int8 codes");
    assert!(coded.read().vector_bytes() * 3 < exact.read().vector_bytes());
    for query in ["how do I bake bread", "moon and the sea", "fired pottery", "public debate"] {
        let q = embedder().embed_query(query).unwrap();
        for within in [None, Some(&["sourdough", "rye", "tides"][..])] {
            let e = exact.vector(&q, within, 3, None).await.unwrap();
            let c = coded.vector(&q, within, 3, None).await.unwrap();
            assert_eq!(e.len(), 3);
            let ids = |h: &[cairn_index::ChunkHit]| h.iter().map(|h| h.chunk_id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(&e), ids(&c), "{query}");
            for (a, b) in e.iter().zip(&c) {
                assert!((a.score - b.score).abs() < 1e-5, "{query}: {} vs {}", a.score, b.score);
                assert_eq!(a.text, b.text, "the text a coded source does not hold is read from the store");
            }
        }
        let (e, c) = (
            exact.keyword(query, 3, None, Fields::Apart).await.unwrap(),
            coded.keyword(query, 3, None, Fields::Apart).await.unwrap(),
        );
        assert_eq!(e, c, "{query}: the keyword arm, text included");
    }
    let chunk = &upserts[1].page.chunks[0];
    let hash = chunk.text_hash.clone();
    let known = coded.known_vectors(&[hash.as_str(), "no-such-text"]).await.unwrap();
    let stored = upserts[1].vectors[0].clone().unwrap();
    assert_eq!(known.len(), 1);
    // The model's vector as the exact path holds it (unit length, as stored up to rounding), read
    // from the chunk file: not the int8 code's decoding (off by ~1e-3 a component).
    let close =
        |a: &[f32], b: &[f32]| a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6);
    assert!(close(&known[&hash], &stored), "the model's vector, as stored");
    let held = exact.known_vectors(&[hash.as_str()]).await.unwrap();
    assert!(close(&held[&hash], &known[&hash]), "what the exact path gives");
}

/// Which upkeep [`later_rows_are_found_by_key`] runs between its lookups.
enum Upkeep {
    Optimize,
    IndexKeys,
}

/// A page written after `first` (and after the indexes were built) is found by chunk id and by
/// slug with `first`, before and after `upkeep` runs.
async fn later_rows_are_found_by_key(store: &cairn_index::SourceStore, first: &PageWrite, upkeep: Upkeep) {
    use cairn_index::VectorKey;
    let later = page_write("notes", "projects/amphi.md", AMPHI);
    store.write(&WriteBatch { upserts: vec![later.clone()], removals: vec![] }).await.unwrap();
    let ids: Vec<&str> = [first, &later].iter().map(|w| w.page.chunks[0].id.as_str()).collect();
    for round in 0..2 {
        let found = store.vectors_by(VectorKey::Id, &ids).await.unwrap();
        assert_eq!(found.len(), 2, "round {round}");
        assert_eq!(found[ids[1]], later.vectors[0].clone().unwrap());
        assert_eq!(store.pages(&["sourdough", "projects/amphi"]).await.unwrap().len(), 2);
        match upkeep {
            Upkeep::Optimize => store.optimize().await.unwrap(),
            Upkeep::IndexKeys => store.index_keys().await.unwrap(),
        }
    }
}

/// The upkeep keeps a B-tree index on every key rows are looked up by, brought up to date
/// with later commits, and drops the indexes nothing reads (full text); lookups by key answer
/// the same before and after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upkeep_indexes_the_lookup_keys_and_drops_unread_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let first = page_write("notes", "sourdough.md", SOURDOUGH);
    store.write(&WriteBatch { upserts: vec![first.clone()], removals: vec![] }).await.unwrap();
    store.build_text_indexes().await.unwrap();
    store.optimize().await.unwrap();
    let mut kinds: Vec<(String, String, Vec<String>)> = store.indexes().await.unwrap();
    kinds.sort();
    let btree = |t: &str, c: &str| (t.to_string(), "BTREE".to_string(), vec![c.to_string()]);
    let want = vec![
        btree("chunks", "id"),
        btree("chunks", "slug"),
        btree("chunks", "text_hash"),
        btree("pages", "slug"),
    ];
    assert_eq!(kinds, want, "the full-text indexes are dropped, the keys indexed");
    // Rows written after the index was built are found by key, before and after the next upkeep.
    later_rows_are_found_by_key(&store, &first, Upkeep::Optimize).await;
    let mut again = store.indexes().await.unwrap();
    again.sort();
    assert_eq!(again, want);
}

/// While a vector backfill keeps compaction off, the upkeep still indexes the keys: on a table
/// never compacted, `index_keys` builds the B-tree indexes, brings them up to date with later
/// commits, and leaves every other index alone; lookups by key answer the same throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_are_indexed_without_a_compaction() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    store.index_keys().await.unwrap();
    assert!(store.indexes().await.unwrap().is_empty(), "nothing to index in empty tables");
    let first = page_write("notes", "sourdough.md", SOURDOUGH);
    store.write(&WriteBatch { upserts: vec![first.clone()], removals: vec![] }).await.unwrap();
    store.build_text_indexes().await.unwrap();
    store.index_keys().await.unwrap();
    let kinds = |k: Vec<(String, String, Vec<String>)>| {
        let mut k: Vec<String> =
            k.into_iter().map(|(t, kind, c)| format!("{t}.{}:{kind}", c.join(","))).collect();
        k.sort();
        k
    };
    let want = [
        "chunks.id:BTREE",
        "chunks.search_text:FTS",
        "chunks.slug:BTREE",
        "chunks.text_hash:BTREE",
        "pages.names:FTS",
        "pages.slug:BTREE",
    ];
    assert_eq!(kinds(store.indexes().await.unwrap()), want, "keys indexed, the full-text indexes kept");
    later_rows_are_found_by_key(&store, &first, Upkeep::IndexKeys).await;
    assert_eq!(kinds(store.indexes().await.unwrap()), want);
}

/// A source past its limit saves its resident index when a load reads the tables, and the next
/// open reads that snapshot back instead, answering exactly as the tables do (chunks waiting for
/// a vector included). A commit since, or a damaged file, means the tables are read again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_stands_for_the_tables_only_while_they_are_as_it_was_taken() {
    use cairn_index::{Resident, ResidentIndex};
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().join("db").to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let waiting =
        page_write("notes", "kiln.md", "# Kiln\n\nA kiln fires clay at high heat until it is stoneware.\n");
    let upserts = vec![
        page_write("notes", "amphi.md", AMPHI),
        page_write("notes", "sourdough.md", SOURDOUGH),
        PageWrite { vectors: vec![None; waiting.vectors.len()], ..waiting },
    ];
    store.write(&WriteBatch { upserts, removals: vec![] }).await.unwrap();
    let path = dir.path().join("snapshots").join("notes.snapshot");
    let (first, loaded, restored) = Resident::open(&store, 0, &path).await.unwrap();
    assert!(!restored && path.exists(), "a load of the tables past the limit saves a snapshot");
    let (second, again, restored) = Resident::open(&store, 0, &path).await.unwrap();
    assert!(restored, "the tables have not moved: the snapshot stands for them");
    assert_eq!(again.states, loaded.states, "the writer's page states, from the snapshot's records");
    let q = embedder().embed_query("a hall for public debate").unwrap();
    let answers = |r: &Resident| {
        let r = r.clone();
        let q = q.clone();
        async move {
            let plain = {
                let i = r.read();
                (
                    i.titles("greek amphitheater", 5, None),
                    i.alias("hall of light"),
                    i.unembedded(),
                    (i.page_count(), i.chunk_count(), i.unembedded_count(), i.exact_vectors()),
                )
            };
            let kw = r.keyword("stone seats clay", 5, None, Fields::Apart).await.unwrap();
            let vec = r.vector(&q, None, 3, None).await.unwrap();
            (plain, kw, vec)
        }
    };
    assert_eq!(answers(&first).await, answers(&second).await);
    assert_eq!(answers(&second).await.0.2.len(), 1, "the waiting chunk, with the text the model needs");
    // A commit moves the tables: the snapshot no longer stands for them.
    let edit = page_write("notes", "sourdough.md", "# Sourdough\n\nRye and spelt, proofed for two days.\n");
    store.write(&WriteBatch { upserts: vec![edit], removals: vec![] }).await.unwrap();
    let (third, _, restored) = Resident::open(&store, 0, &path).await.unwrap();
    assert!(!restored);
    assert_eq!(third.keyword("spelt", 5, None, Fields::Apart).await.unwrap()[0].slug, "sourdough");
    assert_eq!(ResidentIndex::stamp_of(&path), Some(store.stamp(0).await.unwrap()), "saved afresh");
    // A damaged file is read past, not trusted.
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let (fourth, _, restored) = Resident::open(&store, 0, &path).await.unwrap();
    assert!(!restored);
    assert_eq!(fourth.keyword("spelt", 5, None, Fields::Apart).await.unwrap()[0].slug, "sourdough");
    // Below the limit too (the snapshot then carries the chunks' text and exact vectors), and it
    // answers as the tables do.
    let small = dir.path().join("small.snapshot");
    let (from_tables, _, restored) = Resident::open(&store, usize::MAX, &small).await.unwrap();
    assert!(!restored && small.exists());
    let (from_snapshot, _, restored) = Resident::open(&store, usize::MAX, &small).await.unwrap();
    assert!(restored && from_snapshot.read().exact_vectors());
    assert_eq!(answers(&from_snapshot).await, answers(&from_tables).await);
}

/// A compaction in steps of a bounded number of rows (the writer's upkeep lets its commits run
/// between them): each step compacts part of what a full compaction would, the steps end, and
/// every row is still there. 40 commits of 80 one-chunk pages leave 40 small fragments a
/// table, 3,200 rows: three tasks of LanceDB's plan (bins of ≥ 1,024 rows), one a step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_in_bounded_steps_compacts_part_at_a_time_and_ends() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    for commit in 0..40 {
        let upserts = (0..80)
            .map(|i| {
                let path = format!("p{commit}-{i}.md");
                let page =
                    parse_page("notes", Path::new(&path), SOURDOUGH.as_bytes(), &ParseOptions::default())
                        .unwrap();
                PageWrite { vectors: vec![None; page.chunks.len()], page, mtime_ms: 0 }
            })
            .collect();
        store.write(&WriteBatch { upserts, removals: vec![] }).await.unwrap();
    }
    let before = store.counts().await.unwrap();
    assert_eq!(before, (3200, 3200));
    let mut steps = 0;
    while store.compact(Some(1200)).await.unwrap() {
        steps += 1;
        assert!(steps <= 40, "the steps end");
    }
    assert!(steps >= 2, "a step compacts at most 1,200 rows a table: {steps} step(s)");
    assert!(!store.compact(None).await.unwrap(), "the steps left nothing for a full compaction");
    assert_eq!(store.counts().await.unwrap(), before);
    assert_eq!(store.pages(&["p0-0", "p39-79"]).await.unwrap().len(), 2);
}

/// An idle owner gives LanceDB's metadata cache back: what commits and upkeep read is gone from
/// it, and the source reads and writes on as before (loading again what it needs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metadata_cache_is_given_back_and_filled_again_on_use() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path().to_str().unwrap()).await.unwrap();
    let store = db.open_source("notes", &manifest()).await.unwrap();
    let first = page_write("notes", "sourdough.md", SOURDOUGH);
    store.write(&WriteBatch { upserts: vec![first.clone()], removals: vec![] }).await.unwrap();
    store.optimize().await.unwrap();
    let (_, metadata) = db.cache_mib().await;
    assert!(metadata > 0.0, "commits and upkeep fill the metadata cache");
    store.release_metadata_cache().await;
    assert_eq!(db.cache_mib().await.1, 0.0, "given back whole");
    later_rows_are_found_by_key(&store, &first, Upkeep::Optimize).await;
    assert!(db.cache_mib().await.1 > 0.0, "filled again by use");
}
