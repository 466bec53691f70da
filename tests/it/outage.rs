//! A store that fails mid-commit (SeaweedFS behind [`Flaky`]): a watching owner whose store
//! starts answering 500, or stops answering, between two table writes of a commit. The owner
//! goes on answering from what it holds, says the source is retrying and why, and once the store
//! is back commits what waited, with no page lost; `doctor` then finds the tables whole (or
//! `--repair` makes them so), and the index answers as a clean index of the same folder.

use crate::doctor::{QUERIES, problems, vault};
use crate::flaky::{Flaky, Mode};
use crate::support::{EventReader, LineReader, cairn_bin, write};
use crate::weed::{BUCKET, SECRET, Weed};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};

/// `cairn.toml` for `db` over the vault at `root`, with request timeouts short enough that a
/// hung store is an error within seconds, and long enough for a loaded machine's healthy store;
/// the store client does not try again itself (what is tested is cairn's own retry).
fn toml(tmp: &Path, db: &str, root: &Path) -> std::path::PathBuf {
    let path = tmp.join(format!("{}.toml", db.replace(['/', ':'], "_")));
    let text = format!(
        "db = {db:?}\nexact_vectors_up_to = 3\n\n[storage]\ntimeout = \"6s\"\nconnect_timeout = \"3s\"\n\
         client_max_retries = \"0\"\n\n[[sources]]\nid = \"vault\"\nroot = {:?}\n",
        root.display().to_string()
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn answers(run: &dyn Fn(&[&str]) -> Value) -> Vec<Vec<String>> {
    QUERIES
        .iter()
        .map(|q| {
            let a = run(&["search", "--json", q]);
            assert!(a["degraded"].as_array().unwrap().is_empty(), "{q}: degraded: {a}");
            a["results"].as_array().unwrap().iter().map(|r| r["slug"].as_str().unwrap().to_string()).collect()
        })
        .collect()
}

/// Events until each of `slugs` has every vector committed (events, not `flush`: a loaded
/// machine's store can lapse the lease for a moment, and a flush then says so rather than wait).
fn embedded(events: &mut EventReader, slugs: &[&str]) {
    let mut left: Vec<&str> = slugs.to_vec();
    events.wait_for("every vector of the pages", |e| {
        let done = e["event"] == "page_embedded" || e["event"] == "page_indexed" && e["vectors_pending"] == 0;
        if done {
            left.retain(|s| e["slug"] != *s);
        }
        left.is_empty()
    });
}

fn outage_mid_commit(mode: Mode) {
    let tmp = tempfile::tempdir().unwrap();
    let weed = Weed::start(&tmp.path().join("weed"));
    let flaky = Flaky::start(weed.ports[6]);
    let root = tmp.path().join("vault");
    vault(&root);
    let state = tmp.path().join("state");
    let config = toml(tmp.path(), &format!("s3://{BUCKET}/outage"), &root);
    let cairn = |args: &[&str]| {
        let mut c = Command::new(cairn_bin());
        c.arg("--config").arg(&config).args(args);
        weed.env(&mut c, &state, SECRET);
        c.env("AWS_ENDPOINT", flaky.endpoint());
        c
    };
    let run = |args: &[&str]| {
        let out = cairn(args).output().unwrap();
        assert!(out.status.success(), "cairn {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let json = |args: &[&str]| -> Value { serde_json::from_slice(&run(args)).unwrap() };

    let mut watch =
        cairn(&["watch", "--json"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut events = EventReader::new(watch.stdout.take().unwrap());
    let mut log = LineReader::new(watch.stderr.take().unwrap());
    let started = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        events.wait_for("the first scan", |e| e["event"] == "reconciled")
    }));
    if let Err(e) = started {
        eprintln!("the watch said:\n{}", log.said());
        std::panic::resume_unwind(e);
    }
    embedded(&mut events, &["harbour", "lighthouse", "nets", "bakery", "chapel", "market"]);

    // The store fails once the next commit's first table write has gone through, and stays down
    // past the writer lease.
    flaky.arm(1, mode);
    write(&root, "quarry.md", "# The Quarry\n\nSlate is split by hand with iron wedges.\n");
    write(&root, "nets.md", "# Mending Nets\n\nTorn nets are mended with hemp cord.\n");
    let failed = events.wait_for("the failed commit", |e| e["event"] == "stage_failed");
    assert!(flaky.refused() > 0, "{failed}");
    log.wait_for("pauses writing until the store answers");
    log.wait_for("its tables cannot be opened");

    // Still answered, from what the owner holds; the status says the source retries, and why.
    let a = json(&["search", "--json", "keeper lens"]);
    assert_eq!(a["results"][0]["slug"], "lighthouse", "{a}");
    assert_eq!(a["served_by"]["role"], "owner", "{a}");
    assert_eq!(a["degraded"], serde_json::json!(["source_unreachable:vault"]), "not damaged: {a}");
    assert!(a["notes"].to_string().contains("cairn tries again on its own"), "{a}");
    assert!(a.get("pending_changes").is_none(), "no count proves anything meanwhile: {a}");
    let status = json(&["status", "--json"]);
    let source = &status["sources"][0];
    assert_eq!(source["state"], "retrying", "{status}");
    assert_eq!(source["pending"], 2, "the edits wait: {status}");
    assert!(cairn_index::store::unreachable(source["error"].as_str().unwrap()), "{status}");

    // The store is back: what waited is committed, with its vectors.
    flaky.set(Mode::Pass);
    let back =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| embedded(&mut events, &["quarry", "nets"])));
    if let Err(e) = back {
        eprintln!("the watch said:\n{}", log.said());
        std::panic::resume_unwind(e);
    }
    let a = json(&["search", "--json", "slate wedges"]);
    assert_eq!(a["results"][0]["slug"], "quarry", "{a}");
    let a = json(&["search", "--json", "hemp cord"]);
    assert_eq!(a["results"][0]["slug"], "nets", "{a}");
    Command::new("kill").arg(watch.id().to_string()).status().unwrap();
    assert!(watch.wait().unwrap().success(), "a clean stop");

    let doctor = cairn(&["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&doctor.stdout).unwrap();
    assert_eq!(doctor.status.code(), Some(0), "{}", problems(&report));
    assert_eq!(
        (report["sources"][0]["pages"].as_u64(), report["sources"][0]["vectors_pending"].as_u64()),
        (Some(7), Some(0)),
        "{report}"
    );
    let clean = toml(tmp.path(), &tmp.path().join("clean").display().to_string(), &root);
    let out = Command::new(cairn_bin()).arg("--config").arg(&clean).arg("index").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let clean_run = |args: &[&str]| -> Value {
        let out = Command::new(cairn_bin()).arg("--config").arg(&clean).args(args).output().unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(answers(&json), answers(&clean_run), "answered as a clean index of the folder");
}

#[test]
fn a_store_that_answers_500_mid_commit_is_retried_and_loses_nothing() {
    outage_mid_commit(Mode::Fail);
}

#[test]
fn a_store_that_hangs_mid_commit_is_retried_and_loses_nothing() {
    outage_mid_commit(Mode::Hang);
}
