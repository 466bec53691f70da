//! kill -9 at random points during a full index through the pipeline (`cairn watch --once`),
//! restart, and compare with a clean index of the same folder: no lost, duplicate or orphan
//! rows. `CAIRN_CRASH_TRIALS` sets the number of trials (3 in the suite; BENCHMARKS.md records
//! a run of 20).

use crate::support::check_tables;
use cairn_index::Database;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A 2,000-page vault: titles, folders, frontmatter and bodies drawn from 120 paragraphs, so
/// the index is dominated by writes (what a crash can break), not by the model.
fn write_vault(root: &Path) {
    let words = [
        "river", "ledger", "orchid", "falcon", "granite", "harbor", "lantern", "meadow", "quartz", "saffron",
        "timber", "velvet",
    ];
    for i in 0..2000usize {
        let folder = ["notes", "projects", "people", "archive/2025"][i % 4];
        let (a, b) = (words[i % 12], words[(i / 12) % 12]);
        let body = format!(
            "Paragraph {} about the {a} and the {b}.\n\nSecond paragraph on {} matters.\n",
            i % 120,
            words[(i * 7) % 12]
        );
        let text = if i % 3 == 0 {
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

/// Everything that must be equal between two indexes of one folder.
async fn snapshot(db: &Path) -> (Vec<String>, Vec<(String, i32, String)>) {
    let database = Database::open(db.to_str().unwrap()).await.unwrap();
    let store = database.open_existing("vault").await.unwrap();
    let pages = check_tables(&store).await.unwrap_or_else(|e| panic!("{}: {e}", db.display()));
    let rows = pages
        .iter()
        .map(|p| {
            format!("{}|{}|{}|{:?}|{}|{}", p.slug, p.path, p.title, p.aliases, p.content_hash, p.chunk_count)
        })
        .collect();
    (rows, store.chunk_keys().await.unwrap())
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
    assert_eq!(want.0.len(), 2000);

    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    for trial in 0..trials {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let at = full.mul_f64((seed % 1000) as f64 / 1000.0);
        let db = tmp.path().join(format!("trial-{trial}"));
        let mut child = watch_once(&db, &vault).spawn().unwrap();
        let t0 = Instant::now();
        // Choosing the moment of the kill, not waiting for work: poll the clock.
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() >= at {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(watch_once(&db, &vault).status().unwrap().success(), "trial {trial}: restart failed");
        let got = snapshot(&db).await;
        assert!(
            got == want,
            "trial {trial} (killed at {at:?} of {full:?}): the index differs from a clean one"
        );
        eprintln!(
            "crash trial {}/{trials}: killed at {:.2} s of {:.2} s: equal to a clean index",
            trial + 1,
            at.as_secs_f64(),
            full.as_secs_f64()
        );
    }
}
