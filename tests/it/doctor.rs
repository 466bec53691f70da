//! `cairn doctor [--repair]` against damage a disk or a hard stop leaves (real processes, real
//! LanceDB on disk): a zero-byte or truncated latest manifest, a deleted or truncated data file,
//! a torn snapshot, a torn chunk file, a torn event-log line and a torn state file. Each ends
//! with `doctor` naming the damage (exit 1), `--repair` mending it (exit 0), and the index
//! answering as a clean index of the same folder does, with every page there. The manifest and
//! data-file faults are made on S3 too (SeaweedFS, damaged through the store). Beside it: a
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
    /// On S3: the server, and this database's local state folder.
    s3: Option<(crate::weed::Weed, PathBuf)>,
}

impl Db {
    fn new(tmp: &Path, name: &str, root: &Path) -> Self {
        let dir = tmp.join(name);
        Self::at(tmp, name, &dir.display().to_string(), root, None)
    }

    /// The database `s3://vaults/NAME` on its own SeaweedFS server.
    fn on_s3(tmp: &Path, name: &str, root: &Path) -> Self {
        let weed = crate::weed::Weed::start(&tmp.join(format!("weed-{name}")));
        let uri = format!("s3://{}/{name}", crate::weed::BUCKET);
        Self::at(tmp, name, &uri, root, Some((weed, tmp.join(format!("state-{name}")))))
    }

    fn at(tmp: &Path, name: &str, db: &str, root: &Path, s3: Option<(crate::weed::Weed, PathBuf)>) -> Self {
        let config = tmp.join(format!("{name}.toml"));
        let body = format!(
            "db = {db:?}\nexact_vectors_up_to = 3\n\n[[sources]]\nid = \"vault\"\nroot = {:?}\n",
            root.display().to_string()
        );
        std::fs::write(&config, body).unwrap();
        Self { config, dir: tmp.join(name), s3 }
    }

    fn cairn(&self, args: &[&str]) -> Output {
        let mut c = Command::new(cairn_bin());
        c.arg("--config").arg(&self.config).args(args);
        if let Some((weed, state)) = &self.s3 {
            weed.env(&mut c, state, crate::weed::SECRET);
        }
        c.output().unwrap()
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
    let db = Db::new(tmp.path(), "db", &root);
    found_and_repaired(&db, &root, damage, expect, seen);
}

/// [`damaged_then_repaired`] with the database on S3 (SeaweedFS), damaged through the store.
fn on_s3_damaged_then_repaired(damage: impl Fn(&Db, &S3), expect: &str, seen: Seen) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("vault");
    vault(&root);
    let db = Db::on_s3(tmp.path(), "db", &root);
    let s3 = S3::of(db.s3.as_ref().unwrap().0.endpoint());
    found_and_repaired(&db, &root, |db| damage(db, &s3), expect, seen);
}

fn found_and_repaired(db: &Db, root: &Path, damage: impl Fn(&Db), expect: &str, seen: Seen) {
    let clean = Db::new(db.dir.parent().unwrap(), "clean", root);
    for d in [db, &clean] {
        assert!(d.index().status.success());
    }
    let (code, healthy) = db.doctor(false);
    assert_eq!(code, 0, "a fresh index is healthy: {}", problems(&healthy));
    assert_eq!(healthy["sources"][0]["pages"], 6, "{healthy}");
    damage(db);

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

/// An S3 database's objects, read and written past cairn (as a torn upload or a lost object
/// leaves them).
struct S3 {
    store: object_store::aws::AmazonS3,
    runtime: tokio::runtime::Runtime,
}

impl S3 {
    fn of(endpoint: String) -> Self {
        let store = object_store::aws::AmazonS3Builder::new()
            .with_endpoint(endpoint)
            .with_bucket_name(crate::weed::BUCKET)
            .with_access_key_id(crate::weed::KEY)
            .with_secret_access_key(crate::weed::SECRET)
            .with_region("us-east-1")
            .with_allow_http(true)
            .build()
            .unwrap();
        Self { store, runtime: tokio::runtime::Runtime::new().unwrap() }
    }

    /// The objects under `prefix`, with when each was written.
    fn list(&self, prefix: &str) -> Vec<object_store::ObjectMeta> {
        let prefix = object_store::path::Path::from(prefix);
        let listing = object_store::ObjectStore::list(&self.store, Some(&prefix));
        self.runtime.block_on(futures::TryStreamExt::try_collect(listing)).unwrap()
    }

    /// The table's newest manifest (Lance's second naming scheme counts down).
    fn latest_manifest(&self, table: &str) -> object_store::path::Path {
        let listed = self.list(&format!("db/vault_{table}.lance/_versions"));
        let version = |m: &object_store::ObjectMeta| {
            m.location.filename()?.strip_suffix(".manifest")?.parse::<u64>().ok()
        };
        listed.iter().filter(|m| version(m).is_some()).min_by_key(|m| version(m)).unwrap().location.clone()
    }

    /// The data files written last: every one of the newest second (the store keeps whole
    /// seconds, and a commit may leave a file of that second no version names any more).
    fn newest_data_files(&self, table: &str) -> Vec<object_store::path::Path> {
        let listed = self.list(&format!("db/vault_{table}.lance/data"));
        let newest = listed.iter().map(|m| m.last_modified).max().unwrap();
        listed.into_iter().filter(|m| m.last_modified == newest).map(|m| m.location).collect()
    }

    /// Keep the first `keep(len)` bytes of an object.
    fn truncate(&self, at: &object_store::path::Path, keep: impl Fn(usize) -> usize) {
        use object_store::ObjectStoreExt;
        self.runtime.block_on(async {
            let bytes = self.store.get(at).await.unwrap().bytes().await.unwrap();
            self.store.put(at, bytes.slice(..keep(bytes.len())).into()).await.unwrap();
        });
    }

    fn delete(&self, at: &object_store::path::Path) {
        use object_store::ObjectStoreExt;
        self.runtime.block_on(self.store.delete(at)).unwrap();
    }
}

#[test]
fn on_s3_a_zero_byte_latest_manifest_is_set_aside() {
    let empty = |_: &Db, s3: &S3| s3.truncate(&s3.latest_manifest("chunks"), |_| 0);
    on_s3_damaged_then_repaired(empty, "manifest", Seen::OnOpen);
}

#[test]
fn on_s3_a_truncated_latest_manifest_is_set_aside() {
    let cut = |_: &Db, s3: &S3| s3.truncate(&s3.latest_manifest("pages"), |n| n / 2);
    on_s3_damaged_then_repaired(cut, "manifest", Seen::OnOpen);
}

#[test]
fn on_s3_a_lost_data_file_is_answered_by_the_newest_version_that_reads() {
    let lose = |_: &Db, s3: &S3| s3.newest_data_files("chunks").iter().for_each(|f| s3.delete(f));
    on_s3_damaged_then_repaired(lose, "rows do not all read", Seen::OnLoad);
}

#[test]
fn on_s3_a_truncated_data_file_is_answered_by_the_newest_version_that_reads() {
    let cut = |_: &Db, s3: &S3| s3.newest_data_files("chunks").iter().for_each(|f| s3.truncate(f, |n| n / 2));
    on_s3_damaged_then_repaired(cut, "rows do not all read", Seen::OnLoad);
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
