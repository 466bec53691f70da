//! kill -9 at random points, restart, and compare with a clean index of the same folder (pages,
//! chunk text, vectors): during a full index through the pipeline (`cairn watch --once`), and
//! during a running `cairn watch` with edits, renames, deletions and reverts in flight.
//! `CAIRN_CRASH_TRIALS` sets the number of trials of each (3 in the suite; BENCHMARKS.md records
//! runs of 20).

use crate::support::{EventReader, check_tables, copy_dir};
use cairn_index::Database;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A 2,000-page vault: titles, folders, frontmatter and bodies drawn from 120 paragraphs, so
/// the index is dominated by writes (what a crash can break), not by the model.
fn write_vault(root: &Path) {
    write_pages(root, 2000);
}

fn write_pages(root: &Path, n: usize) {
    let words = [
        "river", "ledger", "orchid", "falcon", "granite", "harbor", "lantern", "meadow", "quartz", "saffron",
        "timber", "velvet",
    ];
    for i in 0..n {
        let folder = ["notes", "projects", "people", "archive/2025"][i % 4];
        let (a, b) = (words[i % 12], words[(i / 12) % 12]);
        let body = format!(
            "Paragraph {} about the {a} and the {b}.\n\nSecond paragraph on {} matters.\n",
            i % 120,
            words[(i * 7) % 12]
        );
        let text = if i.is_multiple_of(3) {
            format!("---\ntitle: Page {i}\naliases: [p{i}]\n---\n\n{body}")
        } else if i % 3 == 1 {
            format!("# Page {i}\n\n{body}")
        } else {
            body
        };
        let p = root.join(folder).join(format!("page-{i}.md"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

fn watch_once(db: &Path, vault: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.args(["watch", "--once", "--db", db.to_str().unwrap(), "--source"])
        .arg(format!("vault={}", vault.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Everything that must be equal between two indexes of one folder: pages, and chunks with
/// their text and vectors.
#[derive(Debug)]
pub struct Snapshot {
    pub pages: Vec<String>,
    chunks: Vec<(String, i32, String, Option<Vec<f32>>)>,
}

impl Snapshot {
    /// Equal, vectors within float noise (the model may see a text in batches of other
    /// lengths), or what differs.
    pub fn differs(&self, want: &Snapshot) -> Option<String> {
        if self.pages != want.pages {
            let extra: Vec<_> = self.pages.iter().filter(|p| !want.pages.contains(p)).collect();
            let missing: Vec<_> = want.pages.iter().filter(|p| !self.pages.contains(p)).collect();
            return Some(format!("pages differ: extra {extra:?}, missing {missing:?}"));
        }
        if self.chunks.len() != want.chunks.len() {
            return Some(format!("{} chunks, want {}", self.chunks.len(), want.chunks.len()));
        }
        for (a, b) in self.chunks.iter().zip(&want.chunks) {
            if (&a.0, a.1, &a.2) != (&b.0, b.1, &b.2) {
                return Some(format!("chunk {}#{} differs from {}#{}", a.0, a.1, b.0, b.1));
            }
            match (&a.3, &b.3) {
                (Some(x), Some(y)) if x.iter().zip(y).all(|(p, q)| (p - q).abs() < 1e-3) => {}
                _ => return Some(format!("chunk {}#{}: vector missing or different", a.0, a.1)),
            }
        }
        None
    }
}

async fn snapshot(db: &Path) -> Snapshot {
    snapshot_of(&Database::open(db.to_str().unwrap()).await.unwrap(), "vault").await
}

/// The snapshot of `source`'s tables in `database` (checked for orphans and missing chunks).
pub async fn snapshot_of(database: &Database, source: &str) -> Snapshot {
    let store = database.open_existing(source).await.unwrap();
    let pages = check_tables(&store).await.unwrap_or_else(|e| panic!("{}: {e}", database.uri()));
    let pages = pages
        .iter()
        .map(|p| {
            format!("{}|{}|{}|{:?}|{}|{}", p.slug, p.path, p.title, p.aliases, p.content_hash, p.chunk_count)
        })
        .collect();
    let chunks = store
        .chunk_contents()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.hit.slug, c.hit.ordinal, c.hit.text, c.vector))
        .collect();
    Snapshot { pages, chunks }
}

/// A small xorshift generator: trials are reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_at_any_point_of_a_full_index_converges_on_restart() {
    let trials: u64 = std::env::var("CAIRN_CRASH_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let tmp = tempfile::tempdir().unwrap();
    let vault = tmp.path().join("vault");
    write_vault(&vault);

    let reference = tmp.path().join("reference");
    let started = Instant::now();
    assert!(watch_once(&reference, &vault).status().unwrap().success());
    let full = started.elapsed();
    let want = snapshot(&reference).await;
    assert_eq!(want.pages.len(), 2000);

    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for trial in 0..trials {
        let at = full.mul_f64(rng.below(1000) as f64 / 1000.0);
        let db = tmp.path().join(format!("trial-{trial}"));
        let mut child = watch_once(&db, &vault).spawn().unwrap();
        let t0 = Instant::now();
        // Choosing the moment of the kill, not waiting for work: poll the clock.
        let mut killed = false;
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() >= at {
                child.kill().unwrap(); // SIGKILL
                killed = !child.wait().unwrap().success();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let what = if killed {
            format!("killed at {:.2} s of {:.2} s", at.as_secs_f64(), full.as_secs_f64())
        } else {
            format!("finished before its kill at {:.2} s (not a crash)", at.as_secs_f64())
        };
        assert!(watch_once(&db, &vault).status().unwrap().success(), "trial {trial}: restart failed");
        let got = snapshot(&db).await;
        if let Some(diff) = got.differs(&want) {
            panic!("trial {trial} ({what}): the index differs from a clean one: {diff}");
        }
        eprintln!("crash trial {}/{trials}: {what}: equal to a clean index", trial + 1);
    }
}

/// `cairn watch [--once]` over `cairn.toml` at `config`, with `faults` armed in kill mode; its
/// exit status (`None`: killed).
/// A watch that is not `--once` runs until a fault ends it (the test waits for that exit).
fn watch_config(config: &Path, once: bool, faults: Option<&str>) -> (Option<i32>, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.args(["watch", "--config", config.to_str().unwrap()]).stdout(Stdio::null()).stderr(Stdio::piped());
    if once {
        c.arg("--once");
    }
    if let Some(f) = faults {
        c.env("CAIRN_TEST_FAULTS", f).env("CAIRN_TEST_FAULTS_KILL", "1");
    }
    let child = c.spawn().unwrap();
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(out) => {
            let out = out.unwrap();
            (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
        }
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{}: no exit within 300 s (faults {faults:?})", config.display());
        }
    }
}

/// kill -9 inside a snapshot save (the temporary file torn after its N-th chunk slot) or inside a
/// chunk-file append (its N-th record torn), at the first, a middle and the last place of each,
/// the buffered bytes put on disk first as a kill leaves them: a restart brings the database to a
/// clean index's state, the tables row for row, and the answers of its resident index (int8
/// vectors and the chunk file: the source is past `exact_vectors_up_to`). A tear at every other
/// byte is the index crate's unit tests' (`resident::tests`, `chunk_file::tests`): a restart only
/// meets the file a kill left, and they read every length of it.
#[test]
fn a_kill_inside_a_snapshot_save_or_a_chunk_file_append_converges_on_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let vault = tmp.path().join("vault");
    write_pages(&vault, 60);
    let config = |name: &str| {
        let path = tmp.path().join(format!("{name}.toml"));
        let db = tmp.path().join(name);
        let text = format!(
            "db = {:?}\nexact_vectors_up_to = 20\n\n[[sources]]\nid = \"vault\"\nroot = {:?}\n",
            db.display().to_string(),
            vault.display().to_string()
        );
        std::fs::write(&path, text).unwrap();
        (path, db)
    };
    let (reference, reference_db) = config("reference");
    assert_eq!(watch_config(&reference, true, None).0, Some(0));
    let want = tokio_test::block_on(snapshot(&reference_db));
    // One query by meaning and keyword: its vectors are the int8 codes and the chunk file's.
    let answer = |db: &Path| -> Vec<String> {
        let a = crate::support::search_json(
            db,
            "paragraph about the falcon and granite",
            &["--mode", "balanced"],
        );
        a["results"].as_array().unwrap().iter().map(|r| r["slug"].as_str().unwrap().to_string()).collect()
    };
    let want_answer = answer(&reference_db);
    // The snapshot is saved by a watch at rest (a run that is not `--once`); chunk records are
    // appended as vectors are committed.
    // The snapshot's slots are 60 (one per page); records as many (the N-th torn of each).
    let trials: [(&str, bool, &[u64]); 2] =
        [("snapshot.save", false, &[1, 31, 58]), ("chunk_file.append", true, &[1, 21, 50])];
    for (point, once, passes) in trials {
        for &pass in passes {
            let (path, db) = config(&format!("{}-{pass}", point.replace('.', "-")));
            let (code, stderr) = watch_config(&path, once, Some(&format!("{point}@{pass}")));
            assert_eq!(code, None, "{point}@{pass}: the kill did not come: {stderr}");
            assert!(stderr.contains(&format!("injected kill at {point}")), "{stderr}");
            let (code, stderr) = watch_config(&path, true, None);
            assert_eq!(code, Some(0), "{point}@{pass}: the restart failed: {stderr}");
            let got = tokio_test::block_on(snapshot(&db));
            if let Some(diff) = got.differs(&want) {
                panic!("{point}@{pass}: the tables differ from a clean index: {diff}");
            }
            assert_eq!(answer(&db), want_answer, "{point}@{pass}: the answer differs from a clean index's");
            eprintln!("{point}@{pass}: killed inside it; the restart equals a clean index");
        }
    }
}

/// A change to the folder while the watcher runs.
#[derive(Debug, Clone)]
enum Op {
    Edit { path: String, text: String },
    Revert { path: String, text: String },
    Rename { from: String, to: String },
    Delete { path: String },
    Create { path: String, text: String },
}

impl Op {
    fn apply(&self, root: &Path) {
        match self {
            Op::Edit { path, text } | Op::Revert { path, text } | Op::Create { path, text } => {
                crate::support::write(root, path, text)
            }
            Op::Rename { from, to } => {
                std::fs::create_dir_all(root.join(to).parent().unwrap()).unwrap();
                std::fs::rename(root.join(from), root.join(to)).unwrap();
            }
            Op::Delete { path } => std::fs::remove_file(root.join(path)).unwrap(),
        }
    }
}

fn small_page(i: usize) -> String {
    let words = ["tide", "ledger", "orchid", "falcon", "granite", "harbour", "lantern", "meadow"];
    let body = format!(
        "A page about the {} and the {}, number {i}.\n\nIts second paragraph speaks of {} weather.\n",
        words[i % 8],
        words[(i / 8) % 8],
        words[(i * 3) % 8]
    );
    if i.is_multiple_of(2) {
        format!("---\ntitle: Note {i}\naliases: [n{i}]\n---\n\n{body}")
    } else {
        format!("# Note {i}\n\n{body}")
    }
}

/// Sixty changes of every kind, each valid in the folder the ones before it leave: edits, edits
/// put back exactly as they were (reverts), renames (some into new folders), deletions and new
/// pages, each with the pause before it.
fn script(rng: &mut Rng, pages: usize) -> Vec<(Duration, Op)> {
    let mut paths: Vec<Option<String>> = (0..pages).map(|i| Some(format!("notes/n{i}.md"))).collect();
    let mut edited: Vec<usize> = Vec::new();
    let mut ops = Vec::new();
    let mut created = 0;
    while ops.len() < 60 {
        let i = rng.below(pages as u64) as usize;
        let Some(path) = paths[i].clone() else { continue };
        let op = match rng.below(10) {
            0..=3 => {
                edited.push(i);
                Op::Edit {
                    path,
                    text: format!("{}\nEdited, change {} of the script.\n", small_page(i), ops.len()),
                }
            }
            4..=5 => match edited.pop() {
                Some(j) if paths[j].is_some() => {
                    Op::Revert { path: paths[j].clone().unwrap(), text: small_page(j) }
                }
                _ => continue,
            },
            6..=7 => {
                let to = format!("moved/{}/n{i}.md", rng.below(3));
                if paths.iter().flatten().any(|p| *p == to) {
                    continue;
                }
                paths[i] = Some(to.clone());
                Op::Rename { from: path, to }
            }
            8 => {
                paths[i] = None;
                Op::Delete { path }
            }
            _ => {
                created += 1;
                Op::Create { path: format!("new/c{created}.md"), text: small_page(1000 + created) }
            }
        };
        ops.push((Duration::from_millis(20 + rng.below(80)), op));
    }
    ops
}

fn watch_live(db: &Path, vault: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_cairn"));
    c.args(["watch", "--json", "--db", db.to_str().unwrap(), "--source"])
        .arg(format!("vault={}", vault.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_live_edits_renames_deletes_and_reverts_converges_on_restart() {
    let trials: u64 = std::env::var("CAIRN_CRASH_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let tmp = tempfile::tempdir().unwrap();
    let pages = 120;
    let base = tmp.path().join("base");
    for i in 0..pages {
        crate::support::write(&base, &format!("notes/n{i}.md"), &small_page(i));
    }
    let base_db = tmp.path().join("base-db");
    assert!(watch_once(&base_db, &base).status().unwrap().success());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);

    for trial in 0..trials {
        let ops = script(&mut rng, pages);
        let total: Duration = ops.iter().map(|(d, _)| *d).sum();
        // The folder the script leaves, indexed from scratch: what every run must converge to.
        let (want_vault, want_db) =
            (tmp.path().join(format!("want-{trial}")), tmp.path().join(format!("want-db-{trial}")));
        copy_dir(&base, &want_vault);
        ops.iter().for_each(|(_, op)| op.apply(&want_vault));
        // The same source folder path for both, so the two indexes are comparable row for row.
        let (vault, db) = (tmp.path().join(format!("vault-{trial}")), tmp.path().join(format!("db-{trial}")));
        copy_dir(&want_vault, &vault);
        assert!(watch_once(&want_db, &vault).status().unwrap().success());
        let want = snapshot(&want_db).await;
        std::fs::remove_dir_all(&vault).unwrap();

        // The live run: the base folder indexed, a watcher on it, the script played into it, a
        // kill at a random moment of the script, the rest of the script, a restart.
        copy_dir(&base, &vault);
        copy_dir(&base_db, &db);
        let mut child = watch_live(&db, &vault).spawn().unwrap();
        let mut events = EventReader::new(child.stdout.take().unwrap());
        events.wait_for("the catch-up scan", |e| e["event"] == "reconciled");
        let at = total.mul_f64(rng.below(1000) as f64 / 1000.0);
        let player = {
            let (ops, vault) = (ops.clone(), vault.clone());
            std::thread::spawn(move || {
                for (pause, op) in ops {
                    std::thread::sleep(pause);
                    op.apply(&vault);
                }
            })
        };
        let t0 = Instant::now();
        // Choosing the moment of the kill, not waiting for work: poll the clock.
        while t0.elapsed() < at {
            std::thread::sleep(Duration::from_millis(2));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        player.join().unwrap();
        assert!(watch_once(&db, &vault).status().unwrap().success(), "trial {trial}: restart failed");
        let got = snapshot(&db).await;
        if let Some(diff) = got.differs(&want) {
            panic!(
                "live trial {trial} (killed {:.2} s into a {:.2} s script): {diff}",
                at.as_secs_f64(),
                total.as_secs_f64()
            );
        }
        eprintln!(
            "live crash trial {}/{trials}: killed {:.2} s into {:.2} s of changes: equal to a clean index",
            trial + 1,
            at.as_secs_f64(),
            total.as_secs_f64()
        );
        for d in [want_vault, want_db, vault, db] {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
