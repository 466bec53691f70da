//! `cairn watch`'s engine end to end: real notify events on a real folder, the real model, a
//! real LanceDB; and another process (`cairn search`) reading the same database meanwhile.

use crate::support::{all_matching, check_tables, next_matching, write};
use cairn_actors::core::event::EventKind;
use cairn_actors::{Cairn, Config, SearchRequest, SourceConfig};
use cairn_index::Database;
use cairn_query::CreateSafety;
use std::path::Path;
use std::process::Command;

/// `cairn search --json --mode fast` in a child process: its answer.
fn other_process_json(db: &Path, query: &str) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["search", "--json", "--mode", "fast", "--db", db.to_str().unwrap(), query])
        .output()
        .unwrap();
    assert!(out.status.success(), "cairn search failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The slugs `cairn search` in a child process returns.
fn other_process_search(db: &Path, query: &str) -> Vec<String> {
    let v = other_process_json(db, query);
    v["results"].as_array().unwrap().iter().map(|r| r["slug"].as_str().unwrap().to_string()).collect()
}

/// A database at `db` with one source, `id`, of `vault`.
fn one_source(db: &Path, id: &str, vault: &Path) -> Config {
    let source = SourceConfig {
        id: id.into(),
        root: vault.to_path_buf(),
        include: vec![],
        exclude: vec![],
        language: None,
    };
    Config::new(db.to_str().unwrap(), vec![source])
}

fn unwatched_note(v: &serde_json::Value) -> bool {
    v["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("no running `cairn watch`"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_reflects_new_edited_renamed_and_deleted_pages_for_every_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let (vault, db) = (tmp.path().join("vault"), tmp.path().join("db"));
    write(
        &vault,
        "venues/amphitheater.md",
        "---\ntitle: Indoor Greek Amphitheater\naliases: [Hall of Light]\n---\n\nFour hundred seats under glass.\n",
    );
    write(&vault, "owls.md", "# Owls\n\nBarn owls hunt by sound in complete darkness.\n");
    write(&vault, "tides.md", "# Tides\n\nSpring tides follow the new and the full moon.\n");
    let config = one_source(&db, "notes", &vault);
    let cairn = Cairn::open(config).await.unwrap();
    let mut events = cairn.subscribe().await.unwrap();
    cairn.flush().await.unwrap();

    let hall = cairn.search(SearchRequest::new("hall of light")).await.unwrap();
    assert_eq!(hall.results[0].slug, "venues/amphitheater");
    assert_eq!(hall.results[0].create_safety, CreateSafety::Exists);
    assert_eq!(hall.pending_changes, Some(0));
    // The other process asks this one, the owner: its answer carries the freshness (a count,
    // not "unknown") and says who served it.
    let owls = other_process_json(&db, "barn owls");
    assert_eq!(owls["results"][0]["slug"], "owls");
    assert!(owls["sources"][0]["pending"].is_u64() && owls["pending_changes"].is_u64(), "{owls}");
    assert!(!unwatched_note(&owls), "{owls}");
    assert_eq!(owls["served_by"]["role"], "owner");
    assert_eq!(owls["served_by"]["pid"], std::process::id());

    // A new page.
    write(&vault, "herons.md", "# Herons\n\nGrey herons stand motionless in the shallows.\n");
    next_matching(
        &mut events,
        |e| matches!(&e.kind, EventKind::PageIndexed { slug, .. } if slug == "herons"),
    )
    .await;
    assert_eq!(other_process_search(&db, "grey herons shallows")[0], "herons");

    // An edit.
    write(&vault, "owls.md", "# Owls\n\nSnowy owls migrate south in hard winters.\n");
    next_matching(&mut events, |e| matches!(&e.kind, EventKind::PageIndexed { slug, .. } if slug == "owls"))
        .await;
    assert_eq!(other_process_search(&db, "snowy owls migrate")[0], "owls");
    assert!(!other_process_search(&db, "darkness").contains(&"owls".to_string()));

    // A rename: the old slug goes, the new one comes, and it is told as a rename.
    std::fs::create_dir_all(vault.join("archive")).unwrap();
    std::fs::rename(vault.join("tides.md"), vault.join("archive/tides.md")).unwrap();
    // A path event pairs the move, or (the folder new and not yet watched) the removal is
    // committed first and the arrival is matched to it by content hash: either order.
    all_matching(
        &mut events,
        &[
            &|e| {
                matches!(&e.kind, EventKind::FileRenamed { from, to, .. }
                    if from == "tides.md" && to == "archive/tides.md")
            },
            &|e| matches!(&e.kind, EventKind::PageRemoved { slug, .. } if slug == "tides"),
            &|e| matches!(&e.kind, EventKind::PageIndexed { slug, .. } if slug == "archive/tides"),
        ],
    )
    .await;
    // Both halves meet in one commit, so the moved page keeps its vectors.
    let moved = next_matching(&mut events, |e| matches!(e.kind, EventKind::Committed { .. })).await;
    assert!(
        matches!(moved.kind, EventKind::Committed { chunks_embedded: 0, chunks_reused: 1.., .. }),
        "the move re-embedded: {moved:?}"
    );
    assert_eq!(other_process_search(&db, "spring tides moon"), ["archive/tides"]);

    // A delete.
    std::fs::remove_file(vault.join("herons.md")).unwrap();
    next_matching(
        &mut events,
        |e| matches!(&e.kind, EventKind::PageRemoved { slug, .. } if slug == "herons"),
    )
    .await;
    assert!(other_process_search(&db, "grey herons shallows").is_empty());

    // The old slug of the move is diagnosed as removed, the new one as indexed with every chunk
    // stored; a file that cannot be read as text as failed, with why.
    let gone = cairn.diagnose(SearchRequest::new("spring tides"), "notes", "tides").await.unwrap();
    let ingest = gone.ingest.as_ref().unwrap();
    assert_eq!((ingest.state.as_str(), ingest.file.as_deref()), ("removed", Some("tides.md")), "{gone:?}");
    assert!(gone.verdict.contains("removed"), "{}", gone.verdict);
    let moved = cairn.diagnose(SearchRequest::new("spring tides"), "notes", "archive/tides").await.unwrap();
    let ingest = moved.ingest.as_ref().unwrap();
    assert_eq!(ingest.state, "indexed");
    assert!(ingest.chunks.is_some_and(|c| c > 0) && ingest.embedded == ingest.chunks, "{ingest:?}");
    assert!(ingest.indexed_at_version.is_some() && ingest.table_version >= ingest.indexed_at_version);
    std::fs::write(vault.join("broken.md"), b"# Broken\n\xff\xfe not text\n").unwrap();
    next_matching(
        &mut events,
        |e| matches!(&e.kind, EventKind::PageFailed { path, .. } if path == "broken.md"),
    )
    .await;
    let broken = cairn.diagnose(SearchRequest::new("broken"), "notes", "broken").await.unwrap();
    assert_eq!(broken.ingest.as_ref().unwrap().state, "failed", "{broken:?}");
    assert!(broken.verdict.contains("could not be indexed"), "{}", broken.verdict);

    // A file touched without a change (its attribute event) is read once, skipped, and
    // remembered as it is now: the scans after that do not read it again.
    std::fs::File::options()
        .write(true)
        .open(vault.join("venues/amphitheater.md"))
        .unwrap()
        .set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60))
        .unwrap();
    next_matching(
        &mut events,
        |e| matches!(&e.kind, EventKind::PageSkipped { path, .. } if path == "venues/amphitheater.md"),
    )
    .await;
    cairn.flush().await.unwrap();
    cairn.flush().await.unwrap();
    let status = cairn.status().await.unwrap().sources;
    assert_eq!(status.len(), 1);
    assert_eq!(
        (status[0].pages, status[0].pending, status[0].state.as_str()),
        (3, 0, "watching"),
        "{status:?}"
    );
    let page = cairn.get("notes", "archive/tides").await.unwrap().unwrap();
    assert!(page.body.contains("Spring tides"));
    cairn.shutdown().await.unwrap();

    // No process owns the database now: the other process reads the tables itself, and its
    // answer says so instead of claiming zero pending.
    let after = other_process_json(&db, "barn owls");
    assert!(after["pending_changes"].is_null() && unwatched_note(&after), "{after}");
    assert_eq!(after["served_by"]["role"], "reader");
    // Every answer is journaled once: the owner's (its own and its clients'), and the reader's
    // beside them (with `seq` 0: it belongs to no pipeline's sequence).
    let log = cairn_actors::core::log::read_log(&db.join("events/events.jsonl")).unwrap();
    let answered: Vec<&cairn_actors::Event> = log
        .iter()
        .filter(|e| matches!(&e.kind, EventKind::QueryAnswered(a) if a.unix_ms.is_some()))
        .collect();
    assert_eq!(answered.len(), 8, "one query_answered per search");
    assert_eq!(answered.iter().filter(|e| e.seq == 0).count(), 1, "one answered with no owner");
    let touched = log
        .iter()
        .filter(
            |e| matches!(&e.kind, EventKind::PageSkipped { path, .. } if path == "venues/amphitheater.md"),
        )
        .count();
    assert_eq!(touched, 1, "the touched file is read once, not at every scan");
}

/// A file written beside another whose name makes its slug, while cairn watches: it is indexed
/// under a slug of its own, with a warning, and the page that had the slug keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_beside_another_of_its_slug_gets_a_page_of_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let (vault, db) = (tmp.path().join("vault"), tmp.path().join("db"));
    write(&vault, "owls.md", "# Owls\n\nBarn owls hunt by sound in complete darkness.\n");
    let config = one_source(&db, "notes", &vault);
    let cairn = Cairn::open(config).await.unwrap();
    let mut events = cairn.subscribe().await.unwrap();
    cairn.flush().await.unwrap();

    write(&vault, "Owls!.md", "# Owls!\n\nA quiz show on night birds, aired on Tuesdays.\n");
    let warned = next_matching(
        &mut events,
        |e| matches!(&e.kind, EventKind::PageWarning { path, .. } if path == "Owls!.md"),
    )
    .await;
    assert!(
        matches!(&warned.kind, EventKind::PageWarning { kind, .. } if kind == "slug_taken"),
        "{warned:?}"
    );
    next_matching(&mut events, |e| {
        matches!(&e.kind, EventKind::PageIndexed { path, slug, .. } if path == "Owls!.md" && slug == "owls~2")
    })
    .await;
    cairn.flush().await.unwrap();
    let quiz = cairn.search(SearchRequest::new("quiz show night birds")).await.unwrap();
    assert_eq!(quiz.results[0].slug, "owls~2");
    let owls = cairn.get("notes", "owls").await.unwrap().unwrap();
    assert_eq!(owls.page.path, "owls.md", "the page that had the slug keeps it");
    cairn.shutdown().await.unwrap();
}

async fn sources(cairn: &Cairn) -> Vec<cairn_actors::SourceStatus> {
    cairn.status().await.unwrap().sources
}

/// Peak resident memory of this process (Linux), MiB.
fn peak_rss_mib() -> f64 {
    cairn_actors::core::status::Memory::now().peak_rss_mib.unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_changes_at_once_overflow_into_a_rescan_that_reflects_them_all() {
    let tmp = tempfile::tempdir().unwrap();
    let (vault, db) = (tmp.path().join("vault"), tmp.path().join("db"));
    write(&vault, "index.md", "# Index\n\nThe notes of the release.\n");
    let config = one_source(&db, "bulk", &vault);
    let cairn = Cairn::open(config).await.unwrap();
    cairn.flush().await.unwrap();
    // Commits counted as they come, by a task of its own (the writes below block this one).
    let mut events = cairn.subscribe().await.unwrap();
    let (commits, mut committed) = tokio::sync::watch::channel(0u64);
    tokio::spawn(async move {
        use futures::StreamExt;
        while let Some(e) = events.next().await {
            if matches!(e.kind, EventKind::Committed { .. }) {
                commits.send_modify(|n| *n += 1);
            }
        }
    });

    // 10,000 files (the same text: this measures the pipeline, not the model) in 50 new folders,
    // more events than inotify's default queue holds: the overflow must turn into a rescan.
    let started = std::time::Instant::now();
    for i in 0..10_000 {
        write(
            &vault,
            &format!("bulk/{:02}/note-{i}.md", i % 50),
            "Release note, checked out with the branch.\n",
        );
    }
    let written = started.elapsed();
    // No flush (which scans the folder itself): the watcher must notice the overflow and rescan,
    // and every page must reach the tables through it.
    while sources(&cairn).await[0].pages < 10_001 {
        let commit = tokio::time::timeout(std::time::Duration::from_secs(120), committed.changed()).await;
        assert!(commit.is_ok_and(|c| c.is_ok()), "no commit within 120 s: {:?}", sources(&cairn).await);
    }
    let reflected = started.elapsed();
    let database = Database::open(db.to_str().unwrap()).await.unwrap();
    let stored = check_tables(&database.open_existing("bulk").await.unwrap()).await.unwrap();
    assert_eq!(stored.len(), 10_001);
    eprintln!(
        "10,000 changes written in {:.2} s, all searchable {:.1} s after the first; peak RSS {:.0} MiB",
        written.as_secs_f64(),
        reflected.as_secs_f64(),
        peak_rss_mib()
    );
    cairn.shutdown().await.unwrap();
    let log = cairn_actors::core::log::read_log(&db.join("events/events.jsonl")).unwrap();
    assert!(
        log.iter().any(|e| matches!(&e.kind, EventKind::Reconciled { reason, .. } if reason == "rescan")),
        "the overflow never turned into a rescan"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_whose_folder_is_missing_is_unavailable_while_the_others_go_on() {
    let tmp = tempfile::tempdir().unwrap();
    let (good, missing, db) = (tmp.path().join("good"), tmp.path().join("later"), tmp.path().join("db"));
    write(&good, "owls.md", "# Owls\n\nBarn owls hunt by sound.\n");
    let config = Config::new(
        db.to_str().unwrap(),
        vec![
            SourceConfig {
                id: "good".into(),
                root: good.clone(),
                include: vec![],
                exclude: vec![],
                language: None,
            },
            SourceConfig {
                id: "later".into(),
                root: missing.clone(),
                include: vec![],
                exclude: vec![],
                language: None,
            },
        ],
    );
    let cairn = Cairn::open(config).await.unwrap();
    let mut events = cairn.subscribe().await.unwrap();
    // The missing folder fails its source's flush; the other source is searchable regardless.
    assert!(cairn.flush().await.is_err());
    let owls = cairn.search(SearchRequest::new("barn owls")).await.unwrap();
    assert_eq!((owls.results[0].source.as_str(), owls.results[0].slug.as_str()), ("good", "owls"));
    let later = sources(&cairn).await.into_iter().find(|s| s.source == "later").unwrap();
    assert_eq!(later.state.as_str(), "unavailable", "{later:?}");
    assert!(later.error.as_deref().unwrap_or_default().contains("later"), "{later:?}");

    // The folder appears: the next glance at it picks it up.
    write(&missing, "herons.md", "# Herons\n\nGrey herons wait in the shallows.\n");
    next_matching(&mut events, |e| {
        e.source == "later" && matches!(&e.kind, EventKind::PageIndexed { slug, .. } if slug == "herons")
    })
    .await;
    cairn.flush().await.unwrap();
    cairn.shutdown().await.unwrap();
}

/// A long watch stays small: edits keep coming while the upkeep compacts, and no compaction
/// leaves its rewritten files behind (one that lost a commit race to an edit used to leave a
/// rewrite of the whole table on disk, unused by any version, every few seconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edits_during_upkeep_leave_no_stray_files() {
    use futures::{FutureExt, StreamExt};
    let tmp = tempfile::tempdir().unwrap();
    let (vault, db) = (tmp.path().join("vault"), tmp.path().join("db"));
    let body = |i: usize, n: usize| {
        let lines: String =
            (0..n).map(|k| format!("- Edit {k} of note {i}: the tide turned at {k} past.\n")).collect();
        format!("# Note {i}\n\nNote {i} keeps a log of the harbour.\n\n## Log\n\n{lines}")
    };
    for i in 0..20 {
        write(&vault, &format!("note-{i}.md"), &body(i, 0));
    }
    let config = one_source(&db, "log", &vault);
    let cairn = Cairn::open(config).await.unwrap();
    let mut events = cairn.subscribe().await.unwrap();
    cairn.flush().await.unwrap();
    // Edits one after the other, each waited for with its vectors (two commits each), until two
    // upkeeps have compacted with edits coming in behind them.
    let (mut compactions, mut edits) = (0, 0);
    while compactions < 2 {
        assert!(edits < 500, "no compaction after {edits} edits");
        edits += 1;
        write(&vault, &format!("note-{}.md", edits % 20), &body(edits % 20, edits / 20 + 1));
        cairn.flush().await.unwrap();
        while let Some(Some(e)) = events.next().now_or_never() {
            compactions += usize::from(matches!(e.kind, EventKind::Optimized { compacted: true, .. }));
        }
    }
    cairn.shutdown().await.unwrap();
    eprintln!("{compactions} compactions in {edits} edits");

    // On a copy (the test's own database stays as the watch left it): files that no version
    // references are what a lost race leaves; with every version kept, a cleanup that may remove
    // unreferenced files removes nothing.
    let copy = tmp.path().join("copy");
    crate::support::copy_dir(&db, &copy);
    let store = Database::open(copy.to_str().unwrap()).await.unwrap().open_existing("log").await.unwrap();
    let strays = store.prune(std::time::Duration::from_secs(86_400), true).await.unwrap();
    assert_eq!(strays.bytes_removed, 0, "files no version uses, after {edits} edits: {strays:?}");
    let pages = check_tables(&store).await.unwrap();
    assert_eq!(pages.len(), 20);
}

/// A scan's pages are committed in batches of `commit_chunks`, not one commit for each group the
/// parser hands over: 300 one-chunk pages with `commit_chunks = 100` are three commits, the
/// first two at least full (the last holds what is left when the scan is through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_commits_full_batches_not_one_per_parse_group() {
    let tmp = tempfile::tempdir().unwrap();
    let (vault, db) = (tmp.path().join("vault"), tmp.path().join("db"));
    for i in 0..300 {
        write(&vault, &format!("n/{i:03}.md"), &format!("# Note {i}\n\nMarker{i} stands alone.\n"));
    }
    let mut config = one_source(&db, "n", &vault);
    config.commit_chunks = 100;
    cairn::index(config, false, false).await.unwrap();
    let pages: Vec<usize> = cairn_actors::core::log::read_log(&db.join("events/events.jsonl"))
        .unwrap()
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::Committed { pages, .. } if pages > 0 => Some(pages),
            _ => None,
        })
        .collect();
    assert_eq!(pages.iter().sum::<usize>(), 300, "{pages:?}");
    assert!(pages.len() == 3 && pages[..2].iter().all(|&n| n >= 100), "commits of {pages:?} pages");
}
