//! `cairn doctor [--repair]` against damage a disk or a hard stop leaves (real processes, real
//! LanceDB on disk): a zero-byte or truncated latest manifest, a deleted or truncated data file,
//! a torn snapshot, a torn chunk file, a torn event-log line and a torn state file. Each ends
//! with `doctor` naming the damage (exit 1), `--repair` mending it (exit 0), and the index
//! answering as a clean index of the same folder does, with every page there. Beside it: a
//! source whose tables do not open is answered as `source_damaged:ID` (read-only and through a
//! running owner), `index` fails on it at once instead of retrying for ever, and `--repair`
//! refuses while an owner runs.

use crate::support::{EventReader, cairn_bin, write};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub(crate) const QUERIES: [&str; 4] = ["tide quay boats", "keeper lens", "tarred twine", "bread oven"];

pub(crate) fn vault(root: &Path) {
    for (name, text) in [
        ("harbour", "# The Old Harbour\n\nBoats wait for the tide by the quay.\n"),
        ("lighthouse", "# Lighthouse Keeping\n\nThe keeper polishes the great lens before dusk.\n"),
        ("nets", "# Mending Nets\n\nTorn nets are mended with tarred twine.\n"),
        ("bakery", "# The Bakery\n\nBread is baked in a wood oven at dawn.\n"),
        ("chapel", "# The Chapel\n\nA bell rings over the cliff on Sundays.\n"),
        ("market", "# Market Day\n\nFish and apples are sold in the square.\n"),
    ] {
        write(root, &format!("{name}.md"), text);
    }
}

/// A database for the vault at `root`, set up by a cairn.toml (past `exact_vectors_up_to`, so its
/// snapshot has a chunk file).
struct Db {
    config: PathBuf,
    dir: PathBuf,
}

impl Db {
    fn new(tmp: &Path, name: &str, root: &Path) -> Self {
        let dir = tmp.join(name);
        let config = tmp.join(format!("{name}.toml"));
        let body = format!(
            "db = {:?}\nexact_vectors_up_to = 3\n\n[[sources]]\nid = \"vault\"\nroot = {:?}\n",
            dir.display().to_string(),
            root.display().to_string()
        );
        std::fs::write(&config, body).unwrap();
        Self { config, dir }
    }

    fn cairn(&self, args: &[&str]) -> Output {
        Command::new(cairn_bin()).arg("--config").arg(&self.config).args(args).output().unwrap()
    }

    fn index(&self) -> Output {
        self.cairn(&["index", "--json"])
    }

    fn doctor(&self, repair: bool) -> (i32, Value) {
        let out = self.cairn(if repair { &["doctor", "--json", "--repair"] } else { &["doctor", "--json"] });
        let report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("doctor: {e}: {}", String::from_utf8_lossy(&out.stderr)));
        (out.status.code().unwrap(), report)
    }

    fn search(&self, query: &str) -> Value {
        let out = self.cairn(&["search", "--json", query]);
        assert!(out.status.success(), "search {query:?}: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Each query's results, as `slug` in rank order.
    fn answers(&self) -> Vec<Vec<String>> {
        QUERIES
            .iter()
            .map(|q| {
                let a = self.search(q);
                assert!(a["degraded"].as_array().unwrap().is_empty(), "{q}: degraded: {a}");
                a["results"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["slug"].as_str().unwrap().to_string())
                    .collect()
            })
            .collect()
    }

    fn table(&self, suffix: &str) -> PathBuf {
        self.dir.join(format!("vault_{suffix}.lance"))
    }
}

/// The newest manifest of a table (Lance's second naming scheme counts down from u64::MAX).
fn latest_manifest(table: &Path) -> PathBuf {
    std::fs::read_dir(table.join("_versions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "manifest"))
        .min_by_key(|p| p.file_stem().unwrap().to_str().unwrap().parse::<u64>().unwrap())
        .unwrap()
}

/// The data file written last.
fn newest_data_file(table: &Path) -> PathBuf {
    std::fs::read_dir(table.join("data"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap()
}

fn truncate(path: &Path, keep: impl Fn(u64) -> u64) {
    let len = std::fs::metadata(path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(keep(len)).unwrap();
}

pub(crate) fn problems(report: &Value) -> String {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| format!("{}: {}\n", f["subject"], f["problem"]))
        .collect()
}

/// What a damage does to the processes that open the source.
#[derive(Clone, Copy, PartialEq)]
enum Seen {
    /// Nothing: the tables open and read (a cache or a log is torn).
    Never,
    /// A reader's full load fails; the owner opens from its snapshot, which names no data file.
    OnLoad,
    /// The tables do not open.
    OnOpen,
}

/// Index the vault into a damaged database and a clean one; damage the first with `damage`;
/// `doctor` must find it (its findings naming `expect`) and `--repair` mend it, after which the
/// index answers as the clean one.
fn damaged_then_repaired(damage: impl Fn(&Db), expect: &str, seen: Seen) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("vault");
    vault(&root);
    let (db, clean) = (Db::new(tmp.path(), "db", &root), Db::new(tmp.path(), "clean", &root));
    for d in [&db, &clean] {
        assert!(d.index().status.success());
    }
    let (code, healthy) = db.doctor(false);
    assert_eq!(code, 0, "a fresh index is healthy: {}", problems(&healthy));
    assert_eq!(healthy["sources"][0]["pages"], 6, "{healthy}");
    damage(&db);

    let (code, found) = db.doctor(false);
    assert_eq!(code, 1, "the damage is found: {found}");
    assert!(problems(&found).contains(expect), "the findings name {expect:?}: {}", problems(&found));
    if seen != Seen::Never {
        // Read-only: answered, and said to be damaged with the command that repairs it.
        let a = db.search("keeper lens");
        assert_eq!(a["degraded"], serde_json::json!(["source_damaged:vault"]), "{a}");
        assert!(a["notes"].to_string().contains("cairn doctor --repair"), "{a}");
        assert!(a.get("pending_changes").is_none(), "no count while a source cannot be read: {a}");
    }
    if seen == Seen::OnOpen {
        // An index run fails at once, naming the repair, rather than retrying for ever.
        let out = db.index();
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(summary["sources_failed"].to_string().contains("cairn doctor"), "{summary}");
    }

    let (code, repaired) = db.doctor(true);
    assert_eq!(code, 0, "repaired: {repaired}");
    assert!(repaired["findings"].as_array().unwrap().iter().any(|f| f["repaired"].is_string()), "{repaired}");
    let (code, after) = db.doctor(false);
    assert_eq!(code, 0, "healthy after the repair: {}", problems(&after));
    // What the repair took back (vectors, pages committed since the version restored) comes back
    // from the folder.
    let out = db.index();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(db.doctor(false).1["sources"][0]["pages"], 6);
    assert_eq!(db.doctor(false).1["sources"][0]["vectors_pending"], 0);
    assert_eq!(db.answers(), clean.answers(), "answered as a clean index of the folder");
}

#[test]
fn a_zero_byte_latest_manifest_is_set_aside() {
    damaged_then_repaired(
        |db| truncate(&latest_manifest(&db.table("chunks")), |_| 0),
        "manifest",
        Seen::OnOpen,
    );
}

#[test]
fn a_truncated_latest_manifest_is_set_aside() {
    damaged_then_repaired(
        |db| truncate(&latest_manifest(&db.table("pages")), |n| n / 2),
        "manifest",
        Seen::OnOpen,
    );
}

#[test]
fn a_deleted_data_file_is_answered_by_the_newest_version_that_reads() {
    let remove = |db: &Db| std::fs::remove_file(newest_data_file(&db.table("chunks"))).unwrap();
    damaged_then_repaired(remove, "rows do not all read", Seen::OnLoad);
}

#[test]
fn a_truncated_data_file_is_answered_by_the_newest_version_that_reads() {
    let cut = |db: &Db| truncate(&newest_data_file(&db.table("chunks")), |n| n / 2);
    damaged_then_repaired(cut, "rows do not all read", Seen::OnLoad);
}

#[test]
fn a_torn_snapshot_is_removed_and_written_again() {
    let snapshot = |db: &Db| db.dir.join("snapshots/vault.snapshot");
    damaged_then_repaired(|db| truncate(&snapshot(db), |n| n / 2), "snapshot", Seen::Never);
}

#[test]
fn a_torn_chunk_file_is_removed_and_written_again() {
    let chunks = |db: &Db| db.dir.join("snapshots/vault.chunks");
    damaged_then_repaired(|db| truncate(&chunks(db), |n| n / 2), "snapshot", Seen::Never);
}

#[test]
fn a_torn_event_line_and_a_torn_state_file_are_moved_aside() {
    damaged_then_repaired(
        |db| {
            let log = db.dir.join("events/events.jsonl");
            let mut text = std::fs::read(&log).unwrap();
            text.extend_from_slice(b"{\"seq\":99,\"ts\":1,\"sour");
            std::fs::write(&log, text).unwrap();
            truncate(&db.dir.join("state/folders.json"), |n| n / 2);
        },
        "not events",
        Seen::Never,
    );
}

#[test]
fn an_owner_answers_a_source_it_cannot_open_as_damaged_and_repairs_wait_for_it_to_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("vault");
    vault(&root);
    let db = Db::new(tmp.path(), "db", &root);
    assert!(db.index().status.success());
    truncate(&latest_manifest(&db.table("chunks")), |_| 0);

    let mut owner = Command::new(cairn_bin())
        .arg("--config")
        .arg(&db.config)
        .args(["watch", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut events = EventReader::new(owner.stdout.take().unwrap());
    events.wait_for("the failed open", |e| e["event"] == "stage_failed" && e["stage"] == "open");
    let a = db.search("keeper lens");
    assert_eq!(a["served_by"]["role"], "owner", "{a}");
    assert_eq!(a["degraded"], serde_json::json!(["source_damaged:vault"]), "{a}");
    assert!(a["notes"].to_string().contains("cairn doctor"), "{a}");

    let refused = db.cairn(&["doctor", "--repair"]);
    assert_eq!(refused.status.code(), Some(2), "a repair waits for the owner to stop");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("stop it"));
    assert_eq!(db.doctor(false).0, 1, "looking needs no lock");
    assert!(owner.try_wait().unwrap().is_none(), "the owner still serves");
    Command::new("kill").arg(owner.id().to_string()).status().unwrap();
    owner.wait().unwrap();

    assert_eq!(db.doctor(true).0, 0);
    assert!(db.index().status.success());
    let a = db.search("keeper lens");
    assert!(a["degraded"].as_array().unwrap().is_empty(), "{a}");
    assert_eq!(a["results"][0]["slug"], "lighthouse", "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_s3_a_zero_byte_latest_manifest_is_set_aside_and_the_source_answers_again() {
    use crate::weed::{BUCKET, KEY, SECRET, Weed};
    use object_store::{ObjectStore, ObjectStoreExt, path::Path as StorePath};
    let tmp = tempfile::tempdir().unwrap();
    let weed = Weed::start(&tmp.path().join("weed"));
    let (root, state) = (tmp.path().join("vault"), tmp.path().join("state"));
    vault(&root);
    let db = format!("s3://{BUCKET}/doctor");
    let cairn = |args: &[&str]| {
        let mut c = Command::new(cairn_bin());
        c.args(args).args(["--db", &db]);
        weed.env(&mut c, &state, SECRET);
        c.output().unwrap()
    };
    let source = format!("vault={}", root.display());
    assert!(cairn(&["index", "--source", &source]).status.success());
    assert_eq!(cairn(&["doctor"]).status.code(), Some(0));

    // The newest manifest of the chunks table, emptied in the store.
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(weed.endpoint())
        .with_bucket_name(BUCKET)
        .with_access_key_id(KEY)
        .with_secret_access_key(SECRET)
        .with_region("us-east-1")
        .with_allow_http(true)
        .build()
        .unwrap();
    let versions = StorePath::from("doctor/vault_chunks.lance/_versions");
    let listed: Vec<_> = futures::TryStreamExt::try_collect(store.list(Some(&versions))).await.unwrap();
    let newest = listed
        .iter()
        .filter_map(|m| Some((m.location.filename()?.strip_suffix(".manifest")?.parse::<u64>().ok()?, m)))
        .min_by_key(|(n, _)| *n)
        .unwrap()
        .1
        .location
        .clone();
    store.put(&newest, Vec::<u8>::new().into()).await.unwrap();

    let found = cairn(&["doctor", "--json"]);
    assert_eq!(found.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&found.stdout).unwrap();
    assert!(problems(&report).contains("manifest"), "{}", problems(&report));
    let a: Value = serde_json::from_slice(&cairn(&["search", "--json", "keeper lens"]).stdout).unwrap();
    assert_eq!(a["degraded"], serde_json::json!(["source_damaged:vault"]), "{a}");

    let repaired = cairn(&["doctor", "--repair"]);
    assert_eq!(repaired.status.code(), Some(0), "{}", String::from_utf8_lossy(&repaired.stdout));
    assert!(
        store
            .head(&StorePath::from(format!(
                "doctor/_cairn/damaged/vault_chunks.lance/_versions/{}",
                newest.filename().unwrap()
            )))
            .await
            .is_ok(),
        "kept aside"
    );
    assert!(cairn(&["index", "--source", &source]).status.success());
    let a: Value = serde_json::from_slice(&cairn(&["search", "--json", "keeper lens"]).stdout).unwrap();
    assert!(a["degraded"].as_array().unwrap().is_empty(), "{a}");
    assert_eq!(a["results"][0]["slug"], "lighthouse", "{a}");
}

/// A disk that fills mid-commit: `index` ends saying so, rather than retrying for ever; nothing committed is lost and `doctor` finds the tables whole; with room again, the
/// next `index` converges to the folder. The database is a small tmpfs in a private mount
/// namespace (`unshare -m`), so the test needs no loop device and leaves no mount behind.
#[test]
fn a_disk_that_fills_mid_commit_fails_the_run_with_why_and_the_next_run_converges() {
    let tmp = tempfile::tempdir().unwrap();
    let (vault, db, out) = (tmp.path().join("vault"), tmp.path().join("db"), tmp.path().join("out"));
    for d in [&db, &out] {
        std::fs::create_dir_all(d).unwrap();
    }
    // Notes of varied words: their rows and vectors outgrow the room given.
    let words = ["tide", "quay", "lens", "twine", "oven", "bell", "cliff", "apple", "heron", "basalt"];
    for i in 0..60 {
        let body: Vec<String> =
            (0..120).map(|j| format!("{}{}", words[(i * 7 + j) % 10], (i * j) % 97)).collect();
        write(&vault, &format!("note-{i}.md"), &format!("# Note {i}\n\nmarker{i}x {}\n", body.join(" ")));
    }
    let script = format!(
        r#"set -u
mount -t tmpfs -o size=256k none {db}
timeout 300 {cairn} index --db {db} --json {vault} > {out}/first.json 2> {out}/first.err; echo $? > {out}/first.rc
{cairn} doctor --db {db} --json > {out}/doctor.json; echo $? > {out}/doctor.rc
mount -o remount,size=64m {db}
timeout 300 {cairn} index --db {db} --json {vault} > {out}/second.json 2> {out}/second.err; echo $? > {out}/second.rc
{cairn} doctor --db {db} --repair > /dev/null
{cairn} doctor --db {db} --json > {out}/healed.json; echo $? > {out}/healed.rc
{cairn} search --db {db} --json marker7x > {out}/search.json
"#,
        db = db.display(),
        vault = vault.display(),
        out = out.display(),
        cairn = cairn_bin().display(),
    );
    let status = Command::new("unshare").args(["-m", "sh", "-c", &script]).status().unwrap();
    assert!(status.success());
    let read = |f: &str| std::fs::read_to_string(out.join(f)).unwrap();
    let json = |f: &str| -> Value {
        serde_json::from_str(&read(f)).unwrap_or_else(|e| panic!("{f}: {e}: {}", read(f)))
    };
    // It ends (exit 1 when nothing could be indexed, as ever), and says why.
    assert!(
        ["0", "1"].contains(&read("first.rc").trim()),
        "the full disk ends the run: {}",
        read("first.err")
    );
    let first = json("first.json");
    assert!(first["sources_failed"].to_string().contains("No space left on device"), "it says why: {first}");
    // The tables are whole; the event log, on the same full disk, may hold a torn line.
    let found = problems(&json("doctor.json"));
    assert!(!found.contains("source "), "no source is damaged: {found}");
    assert_eq!(read("second.rc").trim(), "0", "{}", read("second.err"));
    let healed = json("healed.json");
    assert_eq!(read("healed.rc").trim(), "0", "{}", problems(&healed));
    assert_eq!(
        (healed["sources"][0]["pages"].as_u64(), healed["sources"][0]["vectors_pending"].as_u64()),
        (Some(60), Some(0)),
        "{healed}"
    );
    assert_eq!(json("search.json")["results"][0]["slug"], "note-7");
}
