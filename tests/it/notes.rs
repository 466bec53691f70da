//! What notes users expect, through the command line on a small Obsidian-style vault with the
//! real model: file names as names, inline tags and filters, links both ways, duplicate
//! candidates, the self-test, chunks cut at the model's window, names the vault teaches, subject
//! pages, and stale results.

use crate::support::{cairn_bin, search_json, write};
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn vault(root: &Path) {
    write(
        root,
        "meetings/Standup 2024-05-01.md",
        "# Agenda\n\nWe went over the harbour crane schedule. Ask the Key Dump (KD) owner. #work/meetings\n",
    );
    write(
        root,
        "projects/Alpha.md",
        "---\ntags: [project]\naliases: [Project A]\n---\n# Alpha\n\nAlpha builds on [[Beta]] and docks at \
         [[Old Port#Quay]] by [[places/harbour|the waterfront]]; see also [[Nowhere]] and [[Key dump]]. \
         #status/active\n",
    );
    write(root, "projects/Beta.md", "# Beta\n\nThe second project grinds lighthouse lenses.\n");
    write(root, "archive/Beta.md", "# Beta\n\nAn old note of the same name about lighthouse lenses.\n");
    write(
        root,
        "places/harbour.md",
        "---\naliases: [Old Port]\n---\n# Harbour\n\n## Quay\n\nThe quay where the island ferries dock at dawn.\n",
    );
    let timetable = "The island ferry leaves at seven and at noon through the summer.\n";
    write(root, "places/ferry.md", timetable);
    write(root, "copies/ferry copy.md", timetable);
    // Words the chunker counts as two tokens each and the model's WordPiece splits into many:
    // one chunk by the estimate, past the model's 256-token window in fact.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let words: Vec<String> = (0..110)
        .map(|_| {
            (0..10)
                .map(|_| {
                    x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                    b"qzxjkvwy0123456789"[(x >> 59) as usize % 18] as char
                })
                .collect()
        })
        .collect();
    write(root, "keys/Key dump.md", &format!("# Key dump\n\n{}\n", words.join(" ")));
}

fn cairn_json(db: &Path, args: &[&str]) -> Value {
    let out =
        Command::new(cairn_bin()).args(args).args(["--json", "--db", db.to_str().unwrap()]).output().unwrap();
    assert!(out.status.success(), "cairn {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn slugs(answer: &Value) -> Vec<String> {
    answer["results"].as_array().unwrap().iter().map(|r| r["slug"].as_str().unwrap().to_string()).collect()
}

fn words(v: &Value) -> Vec<&str> {
    v.as_array().unwrap().iter().map(|e| e.as_str().unwrap()).collect()
}

#[test]
fn names_tags_filters_links_duplicates_selftest_and_stale_results() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db) = (tmp.path().join("notes"), tmp.path().join("db"));
    vault(&root);
    let source = format!("notes={}", root.display());
    let summary = cairn_json(&db, &["index", "--source", &source]);
    assert_eq!(summary["pages_indexed"], 8, "{summary}");
    let cut: Vec<&str> = summary["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["kind"] == "chunk_truncated")
        .map(|w| w["path"].as_str().unwrap())
        .collect();
    assert_eq!(cut, ["keys/Key dump.md"], "{summary}");

    // The file name is an exact name, though the page's title is its first heading.
    let standup = search_json(&db, "Standup 2024-05-01", &[]);
    let top = &standup["results"][0];
    assert_eq!(top["slug"], "meetings/standup-2024-05-01", "{standup}");
    assert_eq!(top["title"], "Agenda");
    assert!(words(&top["evidence"]).contains(&"file_name_match"), "{top}");
    assert_eq!(top["create_safety"], "exists");

    // Names the vault teaches its pages, a short form its text defines and a link's display
    // text, put the page first; as probable: only a page's own names make `exists`.
    for (query, slug, how) in
        [("KD", "keys/key-dump", "acronym"), ("the waterfront", "places/harbour", "link_text")]
    {
        let answer = search_json(&db, query, &[]);
        let top = &answer["results"][0];
        assert_eq!(top["slug"], slug, "{answer}");
        assert!(words(&top["evidence"]).contains(&"learnt_name"), "{top}");
        assert_eq!(top["create_safety"], "probable", "{top}");
        assert_eq!(top["learnt"]["how"], how, "{top}");
    }
    // A page a phrase of the query names is its subject: said, and probable, never exists.
    let subject = search_json(&db, "which ferries dock at the Old Port?", &[]);
    let top = &subject["results"][0];
    assert_eq!((&top["slug"], &top["subject"]), (&"places/harbour".into(), &"Old Port".into()), "{subject}");
    assert!(words(&top["evidence"]).contains(&"subject_name"), "{top}");
    assert_eq!(top["create_safety"], "probable", "{top}");
    let taught = search_json(&db, "KD", &[]);
    assert_eq!(
        taught["results"][0]["learnt"]["taught_by"],
        serde_json::json!(["meetings/standup-2024-05-01"])
    );

    // Inline tags are tags; a nested tag is found by its parent; filters cut inside the gather.
    let by_tag = search_json(&db, "crane schedule", &["--tag", "work"]);
    assert_eq!(slugs(&by_tag), ["meetings/standup-2024-05-01"], "{by_tag}");
    let projects = search_json(&db, "Beta", &["--tag", "project"]);
    assert_eq!(slugs(&projects), ["projects/alpha"], "the pages named Beta are not tagged: {projects}");
    let archived = search_json(&db, "lighthouse lenses", &["--path", "archive/"]);
    assert_eq!(slugs(&archived), ["archive/beta"], "{archived}");
    let none = search_json(&db, "lighthouse lenses", &["--tag", "no-such-tag"]);
    assert_eq!(slugs(&none), Vec::<String>::new());

    // Links resolved as Obsidian does: a path from the page's folder, a file name elsewhere, an alias with its heading, and
    // a page not written yet; backlinks the other way.
    let links = cairn_json(&db, &["links", "notes:projects/alpha"]);
    let outgoing: Vec<(String, Value, Value)> = links["outgoing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l["target"].as_str().unwrap().to_string(), l["resolved"].clone(), l["by"].clone()))
        .collect();
    assert!(outgoing.contains(&("Beta".into(), "projects/beta".into(), "path".into())), "{links}");
    assert!(outgoing.contains(&("Key dump".into(), "keys/key-dump".into(), "file_name".into())), "{links}");
    assert!(outgoing.contains(&("Old Port".into(), "places/harbour".into(), "alias".into())), "{links}");
    assert!(outgoing.contains(&("Nowhere".into(), Value::Null, Value::Null)), "{links}");
    assert_eq!(links["unresolved"], 1);
    let back = cairn_json(&db, &["links", "notes:places/harbour"]);
    let from: Vec<&str> =
        back["backlinks"].as_array().unwrap().iter().map(|b| b["slug"].as_str().unwrap()).collect();
    assert_eq!(from, ["projects/alpha"], "{back}");

    // Duplicate candidates: a shared name, and identical content.
    let groups = cairn_json(&db, &["duplicates"]);
    let group = |kind: &str, slug: &str| {
        groups.as_array().unwrap().iter().any(|g| {
            g["kind"] == kind
                && g["pages"].as_array().unwrap().iter().filter(|p| p["slug"] == slug).count() == 1
        })
    };
    assert!(group("same_name", "archive/beta") && group("same_name", "projects/beta"), "{groups}");
    assert!(group("same_content", "copies/ferry-copy") && group("same_content", "places/ferry"), "{groups}");
    assert!(!groups.to_string().contains("meetings/standup"), "a page alone is in no group: {groups}");

    // The self-test asks each page by its own names.
    let selftest = cairn_json(&db, &["selftest"]);
    let families = selftest["families"].as_array().unwrap();
    let file_names = families.iter().find(|f| f["family"] == "file_name").unwrap();
    assert_eq!(file_names["queries"], 1, "the one file name that is not its title: {selftest}");
    assert_eq!(file_names["hit_at_1"], 1.0, "{selftest}");
    let titles = families.iter().find(|f| f["family"] == "title").unwrap();
    assert!(titles["ambiguous"].as_u64().unwrap() >= 1, "`Beta` names two pages: {selftest}");

    // Stale: a result whose file changed or vanished since it was indexed says so, and a stale
    // rank 1 is never `exists`.
    write(&root, "projects/Beta.md", "# Beta\n\nRewritten: the project now casts bells.\n");
    std::fs::remove_file(root.join("archive/Beta.md")).unwrap();
    let stale = search_json(&db, "Beta", &[]);
    let state = |slug: &str| {
        stale["results"].as_array().unwrap().iter().find(|r| r["slug"] == slug).map(|r| r["stale"].clone())
    };
    assert_eq!(state("projects/beta"), Some("modified".into()), "{stale}");
    assert_eq!(state("archive/beta"), Some("deleted".into()), "{stale}");
    assert_eq!(state("projects/alpha"), Some(Value::Null), "{stale}");
    assert_ne!(stale["results"][0]["create_safety"], "exists", "{stale}");
}
