//! The command line's contract: exit code 2 for bad usage, 1 for failures the message explains,
//! and advice that works when followed (`cairn reindex ID` with a bare id, `--config` on every
//! subcommand, the `[limits]` keys the errors name).

use crate::support::{cairn_bin, write};
use std::path::Path;
use std::process::{Command, Output};

fn cairn(args: &[&str]) -> Output {
    Command::new(cairn_bin()).args(args).output().unwrap()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

#[test]
fn bad_usage_exits_2_and_failures_exit_1_and_advice_works() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db) = (tmp.path().join("notes"), tmp.path().join("db"));
    write(&root, "tides.md", "# Tides\n\nSpring tides follow the full and the new moon.\n");
    let db_s = db.to_str().unwrap();
    let index = cairn(&["index", "--db", db_s, root.to_str().unwrap()]);
    assert_eq!(code(&index), 0, "{}", String::from_utf8_lossy(&index.stderr));

    for (args, what) in [
        (vec!["search", "--db", db_s, "--mode", "sideways", "tides"], "unknown mode"),
        (vec!["search", "--db", db_s, "--limit", "0", "tides"], "limit 0"),
        (vec!["search", "--db", db_s, "   "], "empty query"),
        (vec!["search", "--db", db_s, "--source", "nope", "tides"], "unknown source"),
        (vec!["search", "--db", db_s, "--no-such-flag", "tides"], "bad flag"),
        (vec!["get", "--db", db_s, "no-colon"], "bad target"),
        (vec!["diagnose", "--db", db_s, "tides", "--target", "notes"], "bad target"),
        (vec!["reindex", "--db", db_s, "nope"], "unknown source id"),
    ] {
        let o = cairn(&args);
        assert_eq!(
            code(&o),
            2,
            "{what}: {:?} exited {:?}: {}",
            args,
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!o.stderr.is_empty(), "{what}: says why");
    }
    // A failure the message explains: a page that is not there.
    let missing = cairn(&["get", "--db", db_s, "notes:nowhere"]);
    assert_eq!(code(&missing), 1);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("no page `nowhere`"));

    // `cairn reindex ID` (the advice of a damaged or mismatched source) works with a bare id.
    let again = cairn(&["reindex", "--db", db_s, "notes", "--json"]);
    assert_eq!(code(&again), 0, "{}", String::from_utf8_lossy(&again.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(summary["pages_indexed"], 1, "rebuilt from scratch: {summary}");
    let get = cairn(&["get", "--db", db_s, "notes:tides"]);
    assert!(String::from_utf8_lossy(&get.stdout).contains("Spring tides follow"), "get prints the body");
}

#[test]
fn a_limit_named_in_an_error_is_a_key_the_config_takes() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db, toml) = (tmp.path().join("notes"), tmp.path().join("db"), tmp.path().join("cairn.toml"));
    write(&root, "big.md", &format!("# Big\n\n{}\n", "word ".repeat(3000)));
    let run = |toml_text: &str| {
        std::fs::write(&toml, toml_text).unwrap();
        let o = cairn(&[
            "index",
            "--json",
            "--config",
            toml.to_str().unwrap(),
            "--db",
            db.to_str().unwrap(),
            root.to_str().unwrap(),
        ]);
        assert_eq!(
            code(&o),
            if toml_text.contains("max_page_bytes = 100\n") { 1 } else { 0 },
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let refused = run("[limits]\nmax_page_bytes = 100\n");
    let reason = refused["failures"][0]["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("limits.max_page_bytes"), "{reason}");
    // The key the message names raises the limit.
    let taken = run("[limits]\nmax_page_bytes = 1000000\n");
    assert_eq!(taken["pages_indexed"], 1, "{taken}");
    let bad = cairn(&[
        "index",
        "--config",
        Path::new("/nonexistent/cairn.toml").to_str().unwrap(),
        root.to_str().unwrap(),
    ]);
    assert_eq!(code(&bad), 2, "a config that cannot be read is bad usage");
}

#[test]
fn a_result_names_its_section_and_get_reads_that_section_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let (root, db) = (tmp.path().join("notes"), tmp.path().join("db"));
    let page = "# Tides\n\nThe sea rises and falls twice a day.\n\n## Springs\n\nSpring tides follow the full and \
                the new moon, with the widest range.\n\n## Neaps\n\nNeap tides come at the quarter moons, when \
                the sun and the moon pull across each other.\n\n### Slack water\n\nBetween the ebb and the \
                flood, the water stands still for a while.\n";
    write(&root, "tides.md", page);
    let db_s = db.to_str().unwrap();
    assert_eq!(code(&cairn(&["index", "--db", db_s, root.to_str().unwrap()])), 0);
    let out = cairn(&["search", "--db", db_s, "--json", "quarter moons pull across"]);
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let section = answer["results"][0]["chunk"]["section"].as_str().unwrap().to_string();
    assert_eq!(section, "notes:tides#neaps", "{answer}");

    let got = cairn(&["get", "--db", db_s, &section]);
    let text = String::from_utf8_lossy(&got.stdout);
    assert_eq!(code(&got), 0, "{}", String::from_utf8_lossy(&got.stderr));
    assert!(
        text.contains("## Neaps") && text.contains("Slack water"),
        "the section and its subsections: {text}"
    );
    assert!(!text.contains("Spring tides") && !text.contains("twice a day"), "nothing else: {text}");
    let slack = cairn(&["get", "--db", db_s, "notes:tides#neaps/slack-water"]);
    assert!(String::from_utf8_lossy(&slack.stdout).contains("stands still"));
    assert!(!String::from_utf8_lossy(&slack.stdout).contains("quarter moons"));

    // An anchor the page does not have is bad usage, naming the ones it has.
    let wrong = cairn(&["get", "--db", db_s, "notes:tides#equinox"]);
    assert_eq!(code(&wrong), 2);
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(said.contains("springs, neaps, neaps/slack-water"), "{said}");
}
