//! A new vault answers by name and keyword while its vectors fill in: right after the page
//! commits, exact names are `exists` at rank 1 and keywords find their pages while chunks still
//! wait for the model; a subject that is not there is `unknown`; once the vectors are in, the
//! answers are those of an index built from scratch. A SIGTERM during the backfill stops the
//! watch cleanly, and a kill -9 during it: either way the restart resumes it without embedding
//! any chunk twice.

use crate::support::{EventReader, cairn_bin, copy_dir, write};
use cairn_actors::{Cairn, Config, SearchRequest, SourceConfig};
use cairn_query::CreateSafety;
use std::path::Path;
use std::process::{Command, Stdio};

/// Two hundred pages of a few chunks each: enough for the backfill to take a while.
fn vault(root: &Path) {
    let places = ["harbour", "lighthouse", "quay", "dune", "estuary", "cliff", "marsh", "reef"];
    for i in 0..200usize {
        let place = places[i % 8];
        let text = format!(
            "---\ntitle: Survey {i} of the {place}\naliases: [survey-{i}]\n---\n\n\
             # Survey {i} of the {place}\n\nThe {place} was surveyed on day {i}; the notes describe its {} and {}.\n\n\
             ## Findings\n\nFinding {i}: the {place} shows {} erosion along its {} side, measured at {} points.\n",
            ["birds", "stones", "boats", "reeds"][i % 4],
            ["tides", "winds", "currents", "sands"][(i / 4) % 4],
            ["slight", "steady", "marked", "severe"][(i / 16) % 4],
            ["north", "east", "south", "west"][(i / 64) % 4],
            i * 7 % 97
        );
        write(root, &format!("surveys/s{i}.md"), &text);
    }
    write(
        root,
        "lighthouse.md",
        "# Lighthouse Keeping\n\nThe keeper trims the wick and polishes the great lens at dusk.\n",
    );
}

fn config(db: &Path, root: &Path) -> Config {
    Config::new(
        db.to_str().unwrap(),
        vec![SourceConfig {
            id: "coast".into(),
            root: root.into(),
            include: vec![],
            exclude: vec![],
            language: None,
        }],
    )
}

fn top(resp: &cairn_query::SearchResponse) -> (String, CreateSafety) {
    let r = &resp.results[0];
    (r.slug.clone(), r.create_safety)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_keywords_answer_while_vectors_fill_in_then_answers_equal_a_full_index() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db) = (tmp.path().join("coast"), tmp.path().join("db"));
    vault(&root);
    let cairn = Cairn::open(config(&db, &root)).await.unwrap();
    cairn.flush_pages().await.unwrap();

    // Pages are in; most vectors are not.
    let exact = cairn.search(SearchRequest::new("Survey 133 of the cliff")).await.unwrap();
    assert!(exact.vectors_pending.unwrap() > 0, "the backfill is still running: {:?}", exact.vectors_pending);
    assert_eq!(top(&exact), ("surveys/s133".into(), CreateSafety::Exists));
    assert!(exact.notes.iter().any(|n| n.contains("not embedded yet")), "{:?}", exact.notes);
    assert_eq!(
        top(&cairn.search(SearchRequest::new("survey-42")).await.unwrap()),
        ("surveys/s42".into(), CreateSafety::Exists)
    );
    let keyword = cairn.search(SearchRequest::new("trims the wick")).await.unwrap();
    assert_eq!(keyword.results[0].slug, "lighthouse");
    let absent = cairn.search(SearchRequest::new("volcanic ash clouds over the airport")).await.unwrap();
    assert!(absent.results.iter().all(|r| r.create_safety == CreateSafety::Unknown), "{absent:#?}");
    assert!(
        absent.notes.iter().any(|n| n.contains("not proof that no such page exists")),
        "{:?}",
        absent.notes
    );
    let status = cairn.status().await.unwrap();
    assert!(status.sources[0].vectors_pending > 0 && status.sources[0].pages == 201, "{status:?}");

    // Vectors in: the answers are those of an index built in one go (read from its tables).
    cairn.flush().await.unwrap();
    let queries = [
        "where does the marsh erode",
        "Survey 133 of the cliff",
        "trims the wick",
        "severe erosion on the west side",
    ];
    let mut live = Vec::new();
    for q in queries {
        let r = cairn.search(SearchRequest::new(q)).await.unwrap();
        assert_eq!(r.vectors_pending, Some(0));
        live.push(r);
    }
    cairn.shutdown().await.unwrap();
    let clean = tmp.path().join("clean");
    cairn::index(config(&clean, &root), false, false).await.unwrap();
    let reader = Cairn::attach(config(&clean, &root), "test", true).await.unwrap();
    for (q, l) in queries.iter().zip(&live) {
        let c = reader.search(SearchRequest::new(*q)).await.unwrap();
        let slugs =
            |r: &cairn_query::SearchResponse| r.results.iter().map(|r| r.slug.clone()).collect::<Vec<_>>();
        assert_eq!(slugs(l), slugs(&c), "{q}");
        for (a, b) in l.results.iter().zip(&c.results) {
            assert!(
                (a.score - b.score).abs() < 1e-3 && a.create_safety == b.create_safety,
                "{q}: {a:?} vs {b:?}"
            );
        }
    }
}

#[test]
fn a_stop_or_a_kill_during_the_backfill_resumes_it_and_embeds_no_chunk_twice() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db) = (tmp.path().join("coast"), tmp.path().join("db"));
    vault(&root);
    // One embedding request (and one vector commit) per 32 chunks: the first vector commit
    // leaves chunks waiting however the pages' commits fall (with the default 512, the 201
    // one-chunk pages committed at once are one request, and its commit leaves none).
    let toml = tmp.path().join("cairn.toml");
    std::fs::write(&toml, format!("db = {:?}\ncommit_chunks = 32\n", db.display().to_string())).unwrap();
    // Until the first vectors are committed with more waiting: the backfill is under way.
    let start_and_wait = || {
        let mut child = Command::new(cairn_bin())
            .args(["watch", "--json", "--config", toml.to_str().unwrap(), "--source"])
            .arg(format!("coast={}", root.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut events = EventReader::new(child.stdout.take().unwrap());
        events.wait_for("the first vector commit", |e| {
            let vectors =
                e["event"] == "committed" && e["pages"] == 0 && e["chunks_embedded"].as_u64() > Some(0);
            assert!(!(vectors && e["chunks_pending"] == 0), "the backfill ended in one commit: {e}");
            vectors
        });
        child
    };
    // SIGTERM in the middle of the catch-up is a clean stop, not a death by the signal.
    let child = start_and_wait();
    Command::new("kill").arg(child.id().to_string()).status().unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && said.contains("stopping"), "{}: {said}", out.status);
    // A kill -9 later in the backfill.
    let mut child = start_and_wait();
    child.kill().unwrap();
    child.wait().unwrap();
    let out = Command::new(cairn_bin())
        .args(["watch", "--once", "--db", db.to_str().unwrap(), "--source"])
        .arg(format!("coast={}", root.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    let log = cairn_actors::core::log::read_log(&db.join("events/events.jsonl")).unwrap();
    let resumed = log.iter().any(|e| matches!(e.kind, cairn_actors::EventKind::SourceStarted { vectors_pending, .. } if vectors_pending > 0));
    assert!(resumed, "the restart found chunks waiting and went on with them");
    let embedded: usize = log
        .iter()
        .map(|e| match e.kind {
            cairn_actors::EventKind::Committed { chunks_embedded, .. } => chunks_embedded,
            _ => 0,
        })
        .sum();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let chunks = |db: &Path| {
        rt.block_on(async {
            let store = cairn_index::Database::open(db.to_str().unwrap())
                .await
                .unwrap()
                .open_existing("coast")
                .await
                .unwrap();
            store.chunk_contents().await.unwrap()
        })
    };
    let got = chunks(&db);
    let distinct: std::collections::BTreeSet<&str> = got.iter().map(|c| c.text_hash.as_str()).collect();
    assert!(got.iter().all(|c| c.vector.is_some()), "every chunk has its vector");
    assert!(
        embedded <= distinct.len(),
        "{embedded} embeddings committed for {} distinct texts",
        distinct.len()
    );
    // The same tables as an index of the same folder in one run.
    let clean = tmp.path().join("clean");
    let clean_root = tmp.path().join("clean-root");
    copy_dir(&root, &clean_root);
    let out = Command::new(cairn_bin())
        .args(["index", "--db", clean.to_str().unwrap(), "--source"])
        .arg(format!("coast={}", clean_root.display()))
        .output()
        .unwrap();
    assert!(out.status.success());
    let want = chunks(&clean);
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(&want) {
        assert_eq!((&a.hit.slug, a.hit.ordinal, &a.hit.text), (&b.hit.slug, b.hit.ordinal, &b.hit.text));
        let (x, y) = (a.vector.as_ref().unwrap(), b.vector.as_ref().unwrap());
        assert!(x.iter().zip(y).all(|(p, q)| (p - q).abs() < 1e-3), "{}#{}", a.hit.slug, a.hit.ordinal);
    }
}
