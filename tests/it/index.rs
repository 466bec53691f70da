//! `cairn index` against a real on-disk LanceDB (temp dir) with the real model.

use crate::support::write;
use cairn::{Config, IndexSummary, SourceSpec};
use cairn_index::{Database, Embedder, Manifest, OrtEmbedder, OrtOptions, SourceInfo};
use std::path::Path;

const LONG_PAGE: &str = "# Amphitheater\n\nAn indoor amphitheater in the Greek style, built for structured public debate.\n\n\
## Acoustics\n\nSlatted oak panels on the ceiling absorb the echo of two hundred voices during a debate session.\n\n\
## Seating\n\nTiered stone benches in a semicircle give every seat a clear line of sight to the speaker's floor.\n";

fn spec(id: &str, root: &Path) -> SourceSpec {
    SourceSpec { id: id.into(), root: root.to_path_buf() }
}

async fn index(db: &Path, specs: &[SourceSpec]) -> IndexSummary {
    index_with(db, specs, usize::MAX).await
}

async fn index_with(db: &Path, specs: &[SourceSpec], exact_vectors_up_to: usize) -> IndexSummary {
    let config = Config {
        exact_vectors_up_to,
        ..Config::new(db.to_str().unwrap(), specs.iter().map(SourceSpec::config).collect())
    };
    cairn::index(config, false, false).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindexing_is_incremental_edit_rename_and_delete() {
    incremental_edit_rename_and_delete(usize::MAX).await;
}

/// The same with the source's resident vectors int8 codes: a text already embedded is still never
/// embedded again (its vector is read from the store).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindexing_is_incremental_with_int8_vectors() {
    incremental_edit_rename_and_delete(0).await;
}

async fn incremental_edit_rename_and_delete(exact_vectors_up_to: usize) {
    let vault = tempfile::tempdir().unwrap();
    let db = tempfile::tempdir().unwrap();
    write(vault.path(), "amphitheater.md", LONG_PAGE);
    write(vault.path(), "bread.md", "# Sourdough\n\nFeed the starter, proof overnight, bake hot.\n");
    let specs = [spec("notes", vault.path())];

    let first = index_with(db.path(), &specs, exact_vectors_up_to).await;
    assert_eq!((first.counts.pages_indexed, first.counts.pages_failed), (2, 0));
    assert!(first.counts.chunks_embedded >= 2);
    let version = first.sources[0].table_version;

    // Unchanged: nothing written, nothing embedded.
    let again = index_with(db.path(), &specs, exact_vectors_up_to).await;
    assert_eq!(
        (again.counts.pages_indexed, again.counts.pages_unchanged, again.counts.chunks_embedded),
        (0, 2, 0)
    );
    assert_eq!(again.sources[0].table_version, version, "an unchanged vault writes nothing");

    // Edit one section: only its chunk is embedded again.
    write(
        vault.path(),
        "amphitheater.md",
        &LONG_PAGE.replace("Tiered stone benches", "Tiered wooden benches"),
    );
    let edited = index_with(db.path(), &specs, exact_vectors_up_to).await;
    assert_eq!(edited.counts.pages_indexed, 1);
    assert_eq!(edited.counts.chunks_embedded, 1, "only the edited section's chunk is new");
    assert!(edited.counts.chunks_reused >= 1);

    // Rename: the page moves, nothing is embedded (its title comes from its heading).
    std::fs::rename(vault.path().join("bread.md"), vault.path().join("baking.md")).unwrap();
    let renamed = index_with(db.path(), &specs, exact_vectors_up_to).await;
    assert_eq!(
        (renamed.counts.pages_indexed, renamed.counts.pages_removed, renamed.counts.chunks_embedded),
        (1, 1, 0)
    );
    let store =
        Database::open(db.path().to_str().unwrap()).await.unwrap().open_existing("notes").await.unwrap();
    assert!(store.page("bread").await.unwrap().is_none());
    assert_eq!(store.page("baking").await.unwrap().unwrap().title, "Sourdough");

    // Delete.
    std::fs::remove_file(vault.path().join("baking.md")).unwrap();
    let deleted = index_with(db.path(), &specs, exact_vectors_up_to).await;
    assert_eq!(deleted.counts.pages_removed, 1);
    assert_eq!(store.counts().await.unwrap().0, 1);
    store.build_text_indexes().await.unwrap();
    assert!(store.keyword("sourdough starter", 5).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sources_with_one_slug_and_reads_that_find_the_page() {
    let (a, b, db) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(a.path(), "index.md", LONG_PAGE);
    write(
        b.path(),
        "index.md",
        "# Tax checklist\n\nQuarterly tax filing: gather receipts, file the VAT return.\n",
    );
    let summary = index(db.path(), &[spec("alpha", a.path()), spec("beta", b.path())]).await;
    assert_eq!(summary.counts.pages_indexed, 2);
    let database = Database::open(db.path().to_str().unwrap()).await.unwrap();
    let (sa, sb) =
        (database.open_existing("alpha").await.unwrap(), database.open_existing("beta").await.unwrap());
    assert_eq!(sa.page("index").await.unwrap().unwrap().title, "Amphitheater");
    assert_eq!(sb.page("index").await.unwrap().unwrap().title, "Tax checklist");

    // BM25 and vector reads return the expected page for a known query (LanceDB's own
    // search, over full-text indexes built here: cairn's searches read the resident index).
    sa.build_text_indexes().await.unwrap();
    sb.build_text_indexes().await.unwrap();
    assert_eq!(sa.keyword("oak ceiling echo", 3).await.unwrap()[0].heading_path, "Amphitheater › Acoustics");
    let e = OrtEmbedder::open(OrtOptions::default()).unwrap();
    let q = e.embed_query("where can citizens argue in public").unwrap();
    let best = sa.vector(&q, 3).await.unwrap();
    assert_eq!(best[0].slug, "index");
    assert!(sb.keyword("oak ceiling echo", 3).await.unwrap().is_empty(), "sources never mix");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_built_by_another_model_is_rebuilt_not_mixed() {
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(vault.path(), "a.md", LONG_PAGE);
    let uri = db.path().to_str().unwrap();
    // Tables built by "another model" (a different id, same width) holding a stale page.
    let database = Database::open(uri).await.unwrap();
    let other = Manifest { model_id: "old-model".into(), ..Manifest::current("x", 384) };
    let stale = database.rebuild_source("notes", &other, &SourceInfo::default()).await.unwrap();
    let page =
        cairn_ingest::parse_page("notes", Path::new("stale.md"), b"# Stale\n\nold", &Default::default())
            .unwrap();
    let vectors = vec![Some(vec![0.0; 384]); page.chunks.len()];
    stale
        .write(&cairn_index::WriteBatch {
            upserts: vec![cairn_index::PageWrite { page, vectors, mtime_ms: 0 }],
            removals: vec![],
        })
        .await
        .unwrap();

    let summary = index(db.path(), &[spec("notes", vault.path())]).await;
    assert_eq!(summary.counts.pages_indexed, 1);
    let store = Database::open(uri).await.unwrap().open_existing("notes").await.unwrap();
    assert!(store.page("stale").await.unwrap().is_none(), "the old model's rows are gone");
    let e = OrtEmbedder::open(OrtOptions::default()).unwrap();
    Database::open(uri)
        .await
        .unwrap()
        .open_source("notes", &Manifest::current(e.model_id(), e.dim()))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_folder_fails_that_source_only() {
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(vault.path(), "a.md", LONG_PAGE);
    let summary =
        index(db.path(), &[spec("gone", Path::new("/nonexistent/cairn-vault")), spec("notes", vault.path())])
            .await;
    assert_eq!(summary.counts.pages_indexed, 1);
    assert_eq!(summary.sources_failed.len(), 1);
    assert!(
        summary.sources_failed[0].reason.contains("/nonexistent/cairn-vault"),
        "{:?}",
        summary.sources_failed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_with_a_problem_is_reported_on_every_run_until_fixed() {
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(vault.path(), "broken.md", "---\ntitle: [oops\n---\n# Broken\n\nThe body is still indexed.\n");
    let specs = [spec("notes", vault.path())];
    let first = index(db.path(), &specs).await;
    assert_eq!((first.counts.pages_indexed, first.counts.warnings.len()), (1, 1));
    let again = index(db.path(), &specs).await;
    assert_eq!((again.counts.pages_unchanged, again.counts.warnings.len()), (1, 1), "still reported");
    assert_eq!(again.counts.chunks_embedded, 0);
    write(vault.path(), "broken.md", "---\ntitle: Fixed\n---\n# Broken\n\nThe body is still indexed.\n");
    let fixed = index(db.path(), &specs).await;
    assert_eq!((fixed.counts.pages_indexed, fixed.counts.warnings.len()), (1, 0));
}

/// Files whose names make one slug are all indexed, through the real store: the name the slug
/// most nearly is has it, the other `slug~2` with a warning; a run with nothing changed writes
/// nothing; when the slug's file goes, the other page moves down to it on the next run, its
/// vectors reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_of_one_slug_are_all_indexed_and_converge_when_one_goes() {
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(
        vault.path(),
        "(c).md",
        "# (c)

An ASCII rendition of the encircled copyright sign.
",
    );
    write(
        vault.path(),
        "C.md",
        "# C

A programming language designed by Dennis Ritchie at Bell Labs.
",
    );
    let specs = [spec("notes", vault.path())];
    let first = index(db.path(), &specs).await;
    assert_eq!((first.counts.pages_indexed, first.counts.pages_failed), (2, 0));
    assert_eq!(first.counts.warnings.len(), 1, "{:?}", first.counts.warnings);
    let store =
        Database::open(db.path().to_str().unwrap()).await.unwrap().open_existing("notes").await.unwrap();
    assert_eq!(store.page("c").await.unwrap().unwrap().path, "C.md");
    assert_eq!(store.page("c~2").await.unwrap().unwrap().path, "(c).md");

    let again = index(db.path(), &specs).await;
    assert_eq!(
        (again.counts.pages_indexed, again.counts.pages_removed, again.counts.chunks_embedded),
        (0, 0, 0)
    );
    assert_eq!(again.counts.warnings.len(), 1, "still said while both files are there");

    // An eval's page ids are paths: each reaches its own file's page, whatever slug it has.
    let config = Config::new(db.path().to_str().unwrap(), specs.iter().map(SourceSpec::config).collect());
    let reader = cairn::Cairn::attach(config, "test", false).await.unwrap();
    let judged = |id: &str| cairn_query::metrics::Judged { relevant: vec![id.into()], ..Default::default() };
    let resolved =
        cairn::eval::resolve_page_ids(&reader, &[judged("C"), judged("(c)"), judged("c")]).await.unwrap();
    let slugs: Vec<&str> = resolved.iter().map(|j| j.relevant[0].as_str()).collect();
    assert_eq!(slugs, ["c", "c~2", "c"], "`c`, no file's path, is read as a slug");
    reader.shutdown().await.unwrap();

    std::fs::remove_file(vault.path().join("C.md")).unwrap();
    let moved = index(db.path(), &specs).await;
    assert_eq!(
        (moved.counts.pages_indexed, moved.counts.chunks_embedded),
        (1, 0),
        "moved, not embedded again"
    );
    assert_eq!(moved.counts.warnings.len(), 0);
    assert_eq!(store.page("c").await.unwrap().unwrap().path, "(c).md");
    assert!(store.page("c~2").await.unwrap().is_none());
    assert_eq!(store.counts().await.unwrap().0, 1);
}

/// Past its limit a source opens from the snapshot of its resident index that its last open
/// saved, while the tables have not moved since, and answers exactly as after a load of the
/// tables (text read from the store included). A clean shutdown after an edit saves the
/// snapshot again, so the next open reads it and finds the edit; a snapshot the tables moved
/// past (a kill before that save) is not used: the open reads the tables, and finds the edit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_past_its_limit_opens_from_its_snapshot_while_its_tables_stay() {
    opens_from_its_snapshot_while_its_tables_stay(0).await;
}

/// Below its limit as well (the snapshot then carries the chunks' text and exact vectors, and no
/// chunk file is made): a restart of an unchanged source does not read its tables.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_below_its_limit_opens_from_its_snapshot_while_its_tables_stay() {
    opens_from_its_snapshot_while_its_tables_stay(cairn_index::vectors::EXACT_VECTORS_UP_TO).await;
}

async fn opens_from_its_snapshot_while_its_tables_stay(exact_vectors_up_to: usize) {
    use cairn_actors::{Cairn, EventKind, SearchRequest};
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(vault.path(), "amphitheater.md", LONG_PAGE);
    write(vault.path(), "bread.md", "# Sourdough\n\nFeed the starter, proof overnight, bake hot.\n");
    let config = Config {
        exact_vectors_up_to,
        ..Config::new(db.path().to_str().unwrap(), vec![spec("notes", vault.path()).config()])
    };
    let run = |query: &'static str| {
        let config = config.clone();
        async move {
            let cairn = Cairn::open(config).await.unwrap();
            cairn.flush().await.unwrap();
            let answer = cairn.search(SearchRequest::new(query)).await.unwrap();
            cairn.shutdown().await.unwrap();
            answer.results.into_iter().map(|r| (r.slug, r.score, r.chunk.map(|c| c.text))).collect::<Vec<_>>()
        }
    };
    run("stone benches").await; // indexes the vault (its first load found empty tables)
    let snapshot = db.path().join("snapshots/notes.snapshot");
    assert!(snapshot.exists(), "the shutdown saved the snapshot of what it indexed");
    std::fs::remove_file(&snapshot).unwrap();
    let from_tables = run("stone benches").await; // loads the tables, saves a snapshot
    let from_snapshot = run("stone benches").await;
    assert_eq!(from_snapshot, from_tables);
    assert!(
        from_tables[0].2.as_deref().is_some_and(|t| t.contains("Tiered stone benches")),
        "{from_tables:?}"
    );
    let chunks = db.path().join("snapshots/notes.chunks");
    if exact_vectors_up_to == 0 {
        // The text an answer returns comes from the chunk file beside the snapshot (not the
        // tables): changed there, the next answer carries the change.
        let bytes = std::fs::read(&chunks).unwrap();
        let at = bytes
            .windows(20)
            .position(|w| w == b"Tiered stone benches")
            .expect("the text is in the chunk file");
        let mut changed = bytes.clone();
        changed[at..at + 20].copy_from_slice(b"TIERED STONE BENCHES");
        std::fs::write(&chunks, &changed).unwrap();
        let from_file = run("stone benches").await;
        assert!(
            from_file[0].2.as_deref().is_some_and(|t| t.contains("TIERED STONE BENCHES")),
            "{from_file:?}"
        );
    } else {
        assert!(db.path().join("snapshots/notes.snapshot").exists() && !chunks.exists());
        assert_eq!(run("stone benches").await, from_tables);
    }
    let stale = std::fs::read(&snapshot).unwrap();
    write(vault.path(), "bread.md", "# Sourdough\n\nRye and spelt, proofed for two days.\n");
    run("spelt").await;
    let edited = run("spelt").await;
    assert_eq!(edited[0].0, "bread");
    // The snapshot from before the edit, as a kill before the shutdown's save leaves it.
    std::fs::write(&snapshot, stale).unwrap();
    assert_eq!(run("spelt").await, edited);
    let log = cairn_actors::core::log::read_log(&db.path().join("events/events.jsonl")).unwrap();
    let opened: Vec<bool> = log
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::SourceStarted { from_snapshot, .. } => Some(from_snapshot),
            _ => None,
        })
        .collect();
    // The edit's run opened from the snapshot (nothing had moved), and so did the run after it
    // (its shutdown saved the snapshot again); the stale snapshot was refused.
    assert_eq!(opened, [false, false, true, true, true, true, false]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_model_configuration_rebuilds_the_source_instead_of_mixing_vectors() {
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(vault.path(), "a.md", LONG_PAGE);
    let specs = [spec("notes", vault.path())];
    assert_eq!(index(db.path(), &specs).await.counts.pages_indexed, 1);
    let model = cairn_actors::ModelConfig {
        pooling: Some(cairn_index::embed::Pooling::Cls),
        query_prefix: Some("query: ".into()),
        document_prefix: Some("passage: ".into()),
        ..Default::default()
    };
    let uri = db.path().to_str().unwrap();
    let config =
        Config { model: model.clone(), ..Config::new(uri, specs.iter().map(SourceSpec::config).collect()) };
    let again = cairn::index(config, false, false).await.unwrap();
    assert_eq!(again.counts.pages_indexed, 1, "the page is embedded again under the new settings");
    let database = Database::open(uri).await.unwrap();
    let other = OrtEmbedder::open(model.ort_options(1)).unwrap();
    database.open_source("notes", &Manifest::current(other.model_id(), other.dim())).await.unwrap();
    let default = OrtEmbedder::open(OrtOptions::default()).unwrap();
    let old = database.open_source("notes", &Manifest::current(default.model_id(), default.dim())).await;
    assert!(old.is_err(), "no vector of the default settings is left in the source");
}

/// A model brought through `[model]`'s folder, not the provisioned one: another width, another
/// tokenizer, and a language the provisioned model does not read. The toy model
/// (`fixtures/models/toy-bilingual`, made by the script beside it) gives an English word and its
/// German translation one vector, so a German question finds an English page by meaning alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_brought_through_its_folder_indexes_and_answers_in_the_languages_it_reads() {
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(vault.path(), "garden.md", "# Garden\n\nThe garden has flowers and trees.\n");
    write(vault.path(), "kitchen.md", "# Kitchen\n\nThe kitchen has an oven and bread.\n");
    write(vault.path(), "car.md", "# Car\n\nThe car has an engine and a road to drive.\n");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/models/toy-bilingual");
    let model = cairn_actors::ModelConfig { dir: Some(dir.clone()), ..Default::default() };
    let specs = [spec("notes", vault.path())];
    let uri = db.path().to_str().unwrap();
    let config =
        Config { model: model.clone(), ..Config::new(uri, specs.iter().map(SourceSpec::config).collect()) };
    let first = cairn::index(config.clone(), false, false).await.unwrap();
    assert_eq!((first.counts.pages_indexed, first.counts.chunks_embedded), (3, 3));

    // The tables record this model: its id and its width (32), not the provisioned one's.
    let toy =
        OrtEmbedder::from_files(&cairn_index::provision_with(Some(&dir)).unwrap(), model.ort_options(1))
            .unwrap();
    assert_eq!(toy.dim(), 32);
    let database = Database::open(uri).await.unwrap();
    database.open_source("notes", &Manifest::current(toy.model_id(), 32)).await.unwrap();

    // No word of the question is in any page: only the model's reading of it finds the garden.
    let reader = cairn::Cairn::attach(config, "test", true).await.unwrap();
    let answer = reader.search(cairn_query::SearchRequest::new("Blumen und Bäume im Garten")).await.unwrap();
    let top = &answer.results[0];
    assert_eq!(top.slug, "garden", "{:?}", answer.results.iter().map(|r| &r.slug).collect::<Vec<_>>());
    assert!(
        !top.evidence.iter().any(|e| matches!(e, cairn_query::Evidence::KeywordExact)),
        "{:?}",
        top.evidence
    );
    let german = reader.search(cairn_query::SearchRequest::new("Ofen und Brot")).await.unwrap();
    assert_eq!(german.results[0].slug, "kitchen");
    reader.shutdown().await.unwrap();
}

/// Feedback reads its first answers' vectors exact on either path: from memory while it holds
/// them, and from the stored vectors once it holds only their int8 codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_vectors_are_exact_whether_memory_holds_the_vectors_or_their_codes() {
    use cairn_index::Resident;
    use cairn_index::resident::Fields;
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write(vault.path(), "amphitheater.md", LONG_PAGE);
    write(vault.path(), "bread.md", "# Sourdough\n\nFeed the starter, proof overnight, bake hot.\n");
    index(db.path(), &[spec("notes", vault.path())]).await;
    let database = Database::open(db.path().to_str().unwrap()).await.unwrap();
    let store = database.open_existing("notes").await.unwrap();
    let (exact, _) = Resident::load(&store, usize::MAX).await.unwrap();
    let (coded, _) = Resident::load(&store, 0).await.unwrap();
    let hits = exact.keyword("amphitheater benches sourdough", 10, None, Fields::Apart).await.unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.chunk_id.as_str()).collect();
    assert!(ids.len() >= 3, "{ids:?}");
    let unit = |v: &Vec<f32>| cairn_index::vectors::unit(v.clone());
    let (from_memory, from_store) =
        (exact.chunk_vectors(&ids).await.unwrap(), coded.chunk_vectors(&ids).await.unwrap());
    assert_eq!(from_memory.len(), ids.len());
    for id in &ids {
        let (m, s) = (unit(&from_memory[*id]), unit(&from_store[*id]));
        assert!(m.iter().zip(s.iter()).all(|(a, b)| (a - b).abs() < 1e-6), "{id}");
    }
    assert!(coded.chunk_vectors(&["no-such-chunk"]).await.unwrap().is_empty());
}

/// Notes in German, written for cairn: a page that names cats only in the singular, one about
/// the weather, one about houses.
const GERMAN: [(&str, &str); 3] = [
    (
        "haustiere.md",
        "# Haustiere\n\nDie Katze schläft am liebsten auf dem warmen Sofa, während der Hund im Garten \
         nach einem Knochen sucht. Am Abend bekommt jedes Tier sein eigenes Futter.\n",
    ),
    (
        "wetter.md",
        "# Wetter\n\nMorgen wird es im Norden regnen, und die Temperaturen fallen in der Nacht unter null. \
         Im Süden bleibt es trocken und sonnig.\n",
    ),
    (
        "wohnen.md",
        "# Wohnen\n\nDas alte Haus am Marktplatz hat dicke Mauern und kleine Fenster, die im Winter die \
         Wärme halten.\n",
    ),
];

/// Issue 53's languages: a source whose language is not configured is told from its folder's
/// text, recorded with its tables and shown in its status; its words, and the query's, are then
/// stemmed as German (a plural finds the page that has only the singular). Configured, the
/// language wins: the same vault read as English does not match the two forms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_german_vault_is_read_in_german_told_from_its_text_and_a_configured_language_wins() {
    use cairn_actors::{Cairn, Mode, SearchRequest};
    let (vault, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (name, body) in GERMAN {
        write(vault.path(), name, body);
    }
    let ask = async |language: Option<&str>, q: &str| {
        let mut source = spec("notizen", vault.path()).config();
        source.language = language.map(str::to_string);
        let cairn = Cairn::open(Config::new(db.path().to_str().unwrap(), vec![source])).await.unwrap();
        cairn.flush().await.unwrap();
        let status = cairn.status().await.unwrap();
        let req = SearchRequest { mode: Mode::Fast, ..SearchRequest::new(q) };
        let slugs: Vec<String> =
            cairn.search(req).await.unwrap().results.into_iter().map(|r| r.slug).collect();
        cairn.shutdown().await.unwrap();
        (status.sources[0].language.clone(), slugs)
    };
    let (told, found) = ask(None, "Katzen").await;
    assert_eq!(told.as_deref(), Some("de"), "told from the notes' text");
    assert_eq!(
        found.first().map(String::as_str),
        Some("haustiere"),
        "the plural finds the singular: {found:?}"
    );
    let (_, found) = ask(None, "Häuser").await;
    assert_eq!(found.first().map(String::as_str), Some("wohnen"), "{found:?}");
    // Recorded with the tables: a restart reads the same language without telling it again.
    let db_handle = Database::open(db.path().to_str().unwrap()).await.unwrap();
    let store = db_handle.open_existing("notizen").await.unwrap();
    assert_eq!(store.recorded_language().await.unwrap(), cairn_index::resident::Lang::parse("de"));

    let (configured, found) = ask(Some("en"), "Katzen").await;
    assert_eq!(configured.as_deref(), Some("en"));
    assert!(!found.contains(&"haustiere".to_string()), "English does not stem German plurals: {found:?}");
}
