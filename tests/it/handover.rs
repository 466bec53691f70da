//! kill -9 at 21 points of a handover (real processes; the test-only `CAIRN_TEST_FAULTS` points
//! in kill mode, armed by a file once the process is where the test means to break it):
//!
//! - 8 in the owner that goes: each step of its drain after SIGTERM (watchers stopped, queues
//!   flushed, log synced, writers retired, socket removed, lock released) and with a client's
//!   request in flight. The standby `cairn watch` already waiting owns within 5 s.
//! - 13 in the standby that takes over: lock taken, lock file written, socket bound, model
//!   loaded, tables opened, a source's resident index loaded, pipeline started, serving, the
//!   catch-up scan, its commit, the model's run, a chunk-file append and the snapshot save. The
//!   next `cairn watch` owns within 5 s of its start.
//!
//! After every death a one-shot `cairn search` answers, or says the retryable error, within 2 s;
//! every trial writes a page before its handover, and the new owner finds it. At the end the
//! database equals a clean index of the folder (tables row for row, vectors, the resident
//! index's answer through the chunk file and int8 codes: the source is past
//! `exact_vectors_up_to`).

use crate::crash::snapshot_of;
use crate::support::{cairn_bin, write};
use cairn_index::Database;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// The owner's points, reached in this order by a drain (the last with a request in flight).
const OWNER: [&str; 8] = [
    "drain.begin",
    "drain.watchers_stopped",
    "drain.flushed",
    "drain.logged",
    "drain.retired",
    "shutdown.server_stopped",
    "shutdown.released",
    "server.request",
];

/// The standby's points, reached in this order by a takeover and what follows it.
const STANDBY: [&str; 13] = [
    "take.locked",
    "take.published",
    "take.bound",
    "pipeline.model",
    "pipeline.tables",
    "source.loaded",
    "pipeline.started",
    "take.serving",
    "reconcile.scanned",
    "embed.run",
    "writer.commit",
    "chunk_file.append",
    "snapshot.save",
];

/// A `cairn watch` child: its stderr lines, read on a thread of their own, each with when it came.
pub struct Watch {
    child: Child,
    lines: Receiver<(Instant, String)>,
    seen: Vec<String>,
}

impl Watch {
    /// `cairn watch --config CONFIG`, a kill armed at `point` while the file `armed` exists.
    fn start(config: &Path, point: Option<(&str, &Path)>) -> Self {
        match point {
            Some((point, armed)) => Self::with(
                config,
                &[
                    ("CAIRN_TEST_FAULTS", point.as_ref()),
                    ("CAIRN_TEST_FAULTS_WHILE", armed.as_os_str()),
                    ("CAIRN_TEST_FAULTS_KILL", "1".as_ref()),
                ],
            ),
            None => Self::with(config, &[]),
        }
    }

    /// `cairn watch --config CONFIG` with `env` set.
    pub fn with(config: &Path, env: &[(&str, &std::ffi::OsStr)]) -> Self {
        let mut c = Command::new(cairn_bin());
        c.args(["watch", "--config", config.to_str().unwrap()]).stdout(Stdio::null()).stderr(Stdio::piped());
        c.envs(env.iter().copied());
        let mut child = c.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                if tx.send((Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        Self { child, lines, seen: Vec::new() }
    }

    /// When a line containing `text` came (waiting for it, up to `within`).
    pub fn wait_line(&mut self, text: &str, within: Duration) -> Instant {
        let deadline = Instant::now() + within;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((at, line)) => {
                    self.seen.push(line.clone());
                    if line.contains(text) {
                        return at;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "pid {}: `{text}` not said within {within:?}; said:\n{}",
                        self.child.id(),
                        self.seen.join("\n")
                    )
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "pid {}: ended before saying `{text}`; said:\n{}",
                        self.child.id(),
                        self.seen.join("\n")
                    )
                }
            }
        }
    }

    /// Wait for the process to die of the kill injected at `point`; when it did.
    fn wait_killed_at(&mut self, point: &str) -> Instant {
        self.wait_line(&format!("injected kill at {point}"), Duration::from_secs(120));
        let status = self.child.wait().unwrap();
        let gone = Instant::now();
        assert_eq!(status.signal(), Some(9), "{point}: {status}; said:\n{}", self.seen.join("\n"));
        gone
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap();
        assert!(ok.success());
    }

    /// SIGTERM, and a clean exit.
    pub fn stop(mut self) {
        self.signal("-TERM");
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{status}; said:\n{}", self.seen.join("\n"));
    }
}

/// The database `name` of `vault`, past its exact-vector limit (int8 codes, a chunk file and a
/// snapshot), with live edits held a minute: a trial's page is committed by the drain or by the
/// next owner's catch-up, never before its handover.
pub fn config(tmp: &Path, name: &str, vault: &Path) -> (PathBuf, PathBuf) {
    let path = tmp.join(format!("{name}.toml"));
    let db = tmp.join(name);
    let text = format!(
        "db = {:?}\nexact_vectors_up_to = 4\ndebounce_ms = 60000\n\n[[sources]]\nid = \"vault\"\nroot = {:?}\n",
        db.display().to_string(),
        vault.display().to_string()
    );
    std::fs::write(&path, text).unwrap();
    (path, db)
}

fn page(vault: &Path, trial: usize, point: &str) {
    let words = ["amber", "basalt", "cedar", "dune", "ember", "fjord", "glacier"];
    let text = format!(
        "# Trial {trial}\n\nA note about the {} {} written before the handover at {point}.\n",
        words[trial % 7],
        words[(trial / 7) % 7]
    );
    write(vault, &format!("trial-{trial}.md"), &text);
}

/// A one-shot search while the database changes hands, which must end in an answer or in the
/// retryable error it says; and the same search of `baseline` (a copy of the vault no process
/// owns, which the search reads itself) just before, for what a search costs on this machine now.
struct Asked {
    started: Instant,
    ended: Instant,
    /// The baseline search's time: a loaded machine starts a process and opens tables slowly.
    cost: Duration,
    stderr: String,
}

fn ask(db: &Path, baseline: &Path, what: &str) -> Asked {
    let search = |db: &Path| {
        let started = Instant::now();
        let out = Command::new(cairn_bin())
            .args(["search", "--json", "--db", db.to_str().unwrap(), "note about the", "--mode", "fast"])
            .output()
            .unwrap();
        (out, started, Instant::now())
    };
    let (out, s, e) = search(baseline);
    assert!(out.status.success(), "the baseline search: {}", String::from_utf8_lossy(&out.stderr));
    let (out, started, ended) = search(db);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        out.status.success() || stderr.contains("try again"),
        "{what}: neither an answer nor a retryable error: {stderr}"
    );
    Asked { started, ended, cost: e - s, stderr }
}

impl Asked {
    /// The client was told within 2 s (beyond what a search costs now) of when someone could
    /// tell it: its start, or when the next owner took over while it waited (a client waits for
    /// an owner that holds the lock and has not bound its socket yet; how soon a standby takes
    /// over is bounded on its own).
    fn told_within_two_seconds(&self, what: &str, took_over: Option<Instant>) {
        let from = took_over.filter(|t| *t > self.started && *t < self.ended).unwrap_or(self.started);
        let waited = self.ended - from;
        assert!(
            waited < Duration::from_secs(2) + self.cost,
            "{what}: the client waited {waited:?} ({:?} in all; the same search of a database no process owns: {:?}): {}",
            self.ended - self.started,
            self.cost,
            self.stderr
        );
    }
}

/// The answer of a fresh process, by meaning and keyword (the resident index's int8 codes and
/// chunk file once past the limit).
fn answer(db: &Path) -> Vec<String> {
    let a = crate::support::search_json(db, "a note about the cedar written before", &["--mode", "balanced"]);
    a["results"].as_array().unwrap().iter().map(|r| r["slug"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_kill_at_any_of_twenty_one_points_of_a_handover_leaves_a_database_the_next_process_owns() {
    let tmp = tempfile::tempdir().unwrap();
    let vault = tmp.path().join("vault");
    for (i, name) in ["harbour", "lighthouse", "nets", "tide", "quay", "gulls"].iter().enumerate() {
        write(
            &vault,
            &format!("{name}.md"),
            &format!("# {name}\n\nPage {i} of the sea: the {name} at dusk.\n"),
        );
    }
    let (cfg, db) = config(tmp.path(), "db", &vault);
    let baseline = tmp.path().join("baseline");
    let indexed = Command::new(cairn_bin())
        .args(["index", "--db", baseline.to_str().unwrap(), "--source"])
        .arg(format!("vault={}", vault.display()))
        .output()
        .unwrap();
    assert!(indexed.status.success(), "{}", String::from_utf8_lossy(&indexed.stderr));
    let armed = tmp.path().join("armed");
    let mut owner = Watch::start(&cfg, None);
    owner.wait_line("cairn: up to date", Duration::from_secs(300));
    let mut trial = 0;
    let mut took = Vec::new();

    for point in OWNER {
        trial += 1;
        // The owner of this trial is armed at `point`; the one before hands over to it.
        let mut standby = Watch::start(&cfg, Some((point, &armed)));
        standby.wait_line("standing by", Duration::from_secs(60));
        owner.stop();
        let mut armed_owner = standby;
        armed_owner.wait_line("cairn: up to date", Duration::from_secs(300));
        // The standby that should take over from it.
        let mut next = Watch::start(&cfg, None);
        next.wait_line("standing by", Duration::from_secs(60));
        page(&vault, trial, point);
        std::fs::write(&armed, "").unwrap();
        if point == "server.request" {
            // Killed with the client's request in flight: the client is told, within 2 s.
            ask(&db, &baseline, point).told_within_two_seconds(point, None);
        } else {
            armed_owner.signal("-TERM");
        }
        let gone = armed_owner.wait_killed_at(point);
        std::fs::remove_file(&armed).unwrap();
        let asked = ask(&db, &baseline, point);
        let owns = next.wait_line("this process writes", Duration::from_secs(60));
        asked.told_within_two_seconds(point, Some(owns));
        let t = owns.saturating_duration_since(gone);
        assert!(t < Duration::from_secs(5), "{point}: the standby owned {t:?} after the owner died");
        next.wait_line("cairn: up to date", Duration::from_secs(300));
        eprintln!("kill at {point}: the standby owned {t:?} later");
        took.push(t);
        owner = next;
    }

    for point in STANDBY {
        trial += 1;
        let mut standby = Watch::start(&cfg, Some((point, &armed)));
        standby.wait_line("standing by", Duration::from_secs(60));
        page(&vault, trial, point);
        std::fs::write(&armed, "").unwrap();
        // The owner dies outright, with the new page unseen or uncommitted.
        owner.signal("-KILL");
        owner.child.wait().unwrap();
        let gone = standby.wait_killed_at(point);
        std::fs::remove_file(&armed).unwrap();
        ask(&db, &baseline, point).told_within_two_seconds(point, None);
        let t0 = Instant::now();
        let mut next = Watch::start(&cfg, None);
        let owns = next.wait_line("cairn: watching", Duration::from_secs(60));
        let t = owns.saturating_duration_since(t0);
        assert!(t < Duration::from_secs(5), "{point}: the next watch owned {t:?} after its start");
        next.wait_line("cairn: up to date", Duration::from_secs(300));
        eprintln!(
            "kill at {point}: the next watch owned {t:?} after its start ({:?} after the death)",
            owns - gone
        );
        took.push(t);
        owner = next;
    }
    owner.stop();
    took.sort();
    eprintln!(
        "21 handover kills: owned within p50 {:?}, max {:?}",
        took[took.len() / 2],
        took.last().unwrap()
    );

    // Equal to a clean index of the same folder.
    let (reference, reference_db) = config(tmp.path(), "reference", &vault);
    let status = Command::new(cairn_bin())
        .args(["watch", "--once", "--config", reference.to_str().unwrap()])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    tokio_test::block_on(async {
        let want = snapshot_of(&Database::open(reference_db.to_str().unwrap()).await.unwrap(), "vault").await;
        let got = snapshot_of(&Database::open(db.to_str().unwrap()).await.unwrap(), "vault").await;
        assert_eq!(want.pages.len(), 6 + trial, "every trial's page indexed");
        if let Some(diff) = got.differs(&want) {
            panic!("after 21 handover kills the tables differ from a clean index: {diff}");
        }
    });
    assert_eq!(answer(&db), answer(&reference_db), "the resident index answers as a clean one");
}
