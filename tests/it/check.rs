//! `cairn check` from the command line, on an index made with the real model: each verdict, a
//! body read from standard input, and bad usage.

use crate::support::{cairn_bin, three_notes};
use serde_json::Value;
use std::io::Write;
use std::process::{Command, Stdio};

fn check(db: &std::path::Path, args: &[&str], stdin: Option<&str>) -> (Option<i32>, Value, String) {
    let mut cmd = Command::new(cairn_bin());
    cmd.args(["check", "--json", "--db", db.to_str().unwrap()]).args(args);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or_default().as_bytes()).unwrap();
    drop(input);
    let out = child.wait_with_output().unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), json, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draft_is_checked_from_the_command_line_for_each_verdict() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, db) = three_notes(tmp.path()).await;

    let (code, named, err) = check(&db, &["--title", "Venue notes", "--alias", "hall of light"], None);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(named["verdict"], "exists", "{named}");
    let top = &named["candidates"][0];
    assert_eq!(top["slug"], "venues/amphitheater", "{named}");
    let parts: Vec<&str> =
        top["parts"].as_array().unwrap().iter().filter_map(|p| p["part"].as_str()).collect();
    assert!(parts.contains(&"alias"), "the alias is what named it: {named}");

    // A new title, and a body from standard input that says what an existing page says.
    let body = "Barn owls hunt by sound, finding their prey in complete darkness.";
    let (code, meant, err) =
        check(&db, &["--title", "Nocturnal raptor hearing", "--body-file", "-"], Some(body));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        (meant["verdict"].as_str(), meant["candidates"][0]["slug"].as_str()),
        (Some("probable"), Some("owls"))
    );
    assert_eq!(meant["body_chunks"], 1, "{meant}");

    let soils = ["--title", "Volcanic soils", "--body", "Andosols form on volcanic ash and hold water well."];
    let (_, new, _) = check(&db, &soils, None);
    assert!(matches!(new["verdict"].as_str(), Some("none" | "related")), "{new}");

    let (code, _, err) = check(&db, &[], None);
    assert_eq!(code, Some(2), "a draft with nothing in it is bad usage: {err}");
    assert!(err.contains("--title"), "{err}");
}
