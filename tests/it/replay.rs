//! Recorded file-system scenarios (`fixtures/events/*.jsonl`) replayed through the real actors,
//! the real model and a real LanceDB in a temporary folder, under paused tokio time. The final
//! tables and the emitted events are compared with `<scenario>.golden.json` (rewrite them with
//! `UPDATE_GOLDEN=1` and review the diff).

use crate::support::{actix_paused, check_tables, fixture_dir, normalized_events};
use cairn_actors::core::event::EventKind;
use cairn_actors::core::log::read_log;
use cairn_actors::ops::replay::{self, Scenario};
use cairn_actors::{Embedders, Pipeline};
use cairn_index::Database;
use serde_json::{Value, json};
use std::path::Path;

async fn replay_one(file: &Path, embedders: &Embedders) -> Result<(), String> {
    let scenario = Scenario::load(file).map_err(|e| e.to_string())?;
    let tmp = tempfile::tempdir().unwrap();
    let (dir, db) = (tmp.path().join("vault"), tmp.path().join("db"));
    let config = replay::config(db.to_str().unwrap(), &dir);
    let cairn: Pipeline =
        replay::run(&scenario, &dir, config, embedders.clone()).await.map_err(|e| e.to_string())?;
    // Everything the events said is in; a scan of the folder must now find nothing to do.
    cairn.flush().await.map_err(|e| e.to_string())?;
    cairn.shutdown().await.map_err(|e| e.to_string())?;

    let events = read_log(&db.join("events/events.jsonl")).map_err(|e| e.to_string())?;
    if let Some(e) = events.iter().find(|e| matches!(e.kind, EventKind::StageFailed { .. })) {
        return Err(format!("a stage failed: {e:?}"));
    }
    let flush_at = events
        .iter()
        .rposition(|e| matches!(&e.kind, EventKind::Reconciled { reason, .. } if reason == "flush"))
        .ok_or("no flush scan in the log")?;
    let late: Vec<_> = events[flush_at..]
        .iter()
        .filter(|e| matches!(e.kind, EventKind::PageIndexed { .. } | EventKind::PageRemoved { .. }))
        .collect();
    let dump = || events.iter().map(|e| serde_json::to_string(e).unwrap()).collect::<Vec<_>>().join("\n");
    if !late.is_empty() {
        return Err(format!(
            "the events alone did not converge; the final scan still changed {late:?}\n{}",
            dump()
        ));
    }
    // Scenarios of moves: every page embedded once at start, the moves re-use every vector.
    let want_embedded = match scenario.name.as_str() {
        "rename-storm" => Some(21),
        "move-into-new-folder" => Some(2),
        _ => None,
    };
    if let Some(want) = want_embedded {
        let embedded: usize =
            events
                .iter()
                .map(|e| {
                    if let EventKind::Committed { chunks_embedded, .. } = e.kind {
                        chunks_embedded
                    } else {
                        0
                    }
                })
                .sum();
        if embedded != want {
            return Err(format!(
                "moves embedded text again: {embedded} chunks embedded, want {want}\n{}",
                dump()
            ));
        }
    }

    let database = Database::open(db.to_str().unwrap()).await.map_err(|e| e.to_string())?;
    let store = database.open_existing(replay::SOURCE).await.map_err(|e| e.to_string())?;
    let pages = check_tables(&store).await.map_err(|e| format!("{e}\nevents:\n{}", dump()))?;
    let actual = json!({
        "scenario": scenario.name,
        "pages": pages.iter().map(|p| {
            let problems: Vec<String> = p.problems.value().as_array().into_iter().flatten()
                .filter_map(|x| x.get("kind").and_then(Value::as_str).map(str::to_string)).collect();
            format!(
                "{} | {} | {} | aliases {:?} | {} chunks | problems {:?} | content {}",
                p.slug, p.path, p.title, p.aliases, p.chunk_count, problems, &p.content_hash[..12]
            )
        }).collect::<Vec<_>>(),
        "events": normalized_events(&events),
    });
    let golden_path = file.with_extension("golden.json");
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden_path, serde_json::to_string_pretty(&actual).unwrap() + "\n").unwrap();
        return Ok(());
    }
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(&golden_path).map_err(|e| format!("{}: {e}", golden_path.display()))?,
    )
    .map_err(|e| e.to_string())?;
    if golden != actual {
        return Err(format!(
            "differs from {}:\n--- golden\n{}\n--- actual\n{}",
            golden_path.display(),
            serde_json::to_string_pretty(&golden).unwrap(),
            serde_json::to_string_pretty(&actual).unwrap()
        ));
    }
    Ok(())
}

#[test]
fn recorded_scenarios_replay_to_their_goldens() {
    actix_paused().block_on(async {
        let embedders = Embedders::load(&replay::config("unused", Path::new("."))).await.unwrap();
        let mut files: Vec<_> = std::fs::read_dir(fixture_dir("events"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        files.sort();
        assert!(files.len() >= 6, "the scenarios are missing");
        let mut failures = Vec::new();
        for f in &files {
            if let Err(e) = replay_one(f, &embedders).await {
                failures.push(format!("{}: {e}", f.display()));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    });
}
