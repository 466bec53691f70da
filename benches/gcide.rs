//! Issue 30: the end-to-end scale benchmark on the GCIDE vault (`scripts/bench/gcide-vault`,
//! 135,728 pages), run by `scripts/bench/gcide` (and `scripts/bench/million`,
//! `scripts/bench/compaction`). Everything goes through real processes as a user runs them: one
//! `cairn watch` owner from an empty database, `cairn search` processes and one `cairn mcp`
//! client asking it, files edited in the vault, `cairn duplicates` and `cairn selftest`,
//! restarts. It prints one line per figure, each beside its goal where the issue sets one, and
//! writes its figures as JSON beside the stored baseline (`common::Figures`).
//!
//! Works in `CAIRN_BENCH_DIR` (`vault/`, the copy it edits, and `db/`); the free-text queries
//! come from `CAIRN_EVAL_DIR` (Cranfield's requests, FOLDOC's titles). Environment:
//! `CAIRN_BENCH_QUERIES` (per mode, default 1002: a third of each kind), `CAIRN_BENCH_EDITS`
//! (default 50), `CAIRN_BENCH_LAST_VECTOR=1` to wait for the last vector (half an hour to an hour
//! of model time on 2 cores), then make the edits at once (the first of them meet the upkeep's
//! first compaction after the backfill) and ask every query again in steady state; without it
//! the edits are made while the owner still embeds the first index. With a database in the
//! folder already (kept by `CAIRN_BENCH_KEEP`, or made by `scripts/bench/million`), the owner
//! reopens it and only the queries are asked; `CAIRN_BENCH_REOPEN=all` then makes the edits and
//! the restarts too (not `duplicates` and `selftest`). `CAIRN_BENCH_ONLY=edits`: only edits
//! through an owner on the kept database, and the upkeep runs they meet (`scripts/bench/compaction`).
//! `CAIRN_BENCH_GOALS=1m`: the goals at a million chunks.

mod common;

use common::{Better, Figures, Mcp, Proc, Rng, bin, cli_search, pct};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A `duplicates` or `selftest` run stopped (and said so) past this.
const LIMIT: Duration = Duration::from_secs(1800);

/// The goals at 200k pages, or at a million chunks.
struct Goals {
    balanced_p99_ms: f64,
    settled_mib: f64,
    restart: &'static str,
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn event_is(e: &Value, name: &str) -> bool {
    e["event"] == name
}

/// A query, with the page it names (vault-relative) when it names one.
type Asked = (String, Option<String>);

struct Bench {
    vault: PathBuf,
    db: PathBuf,
    pages: Vec<PathBuf>,
    kinds: Vec<(&'static str, Vec<Asked>)>,
    goals: Goals,
    rng: Rng,
    figures: Figures,
}

/// A page's title and the words of its text, as cairn parses it.
fn page_words(vault: &Path, rel: &Path) -> Option<(String, Vec<String>)> {
    let bytes = std::fs::read(vault.join(rel)).ok()?;
    let page = cairn_ingest::parse_page("gcide", rel, &bytes, &cairn_ingest::ParseOptions::default()).ok()?;
    let text: Vec<String> = page.chunks.iter().map(|c| c.text.clone()).collect();
    let words = text
        .join(" ")
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    Some((page.title, words))
}

const STOP: &[&str] = &[
    "a", "an", "the", "of", "to", "in", "on", "for", "by", "with", "or", "and", "as", "at", "from", "is",
    "be", "that", "this", "which", "it", "its",
];

/// Two to four consecutive words of a page's definition, its headword's words left out.
fn phrase(rng: &mut Rng, vault: &Path, rel: &Path) -> Option<String> {
    let (title, body) = page_words(vault, rel)?;
    let head: Vec<String> = title.split(|c: char| !c.is_ascii_alphabetic()).map(str::to_lowercase).collect();
    let words: Vec<&String> = body.iter().filter(|w| !head.contains(&w.to_lowercase())).collect();
    let n = 2 + rng.below(3);
    for _ in 0..20 {
        if words.len() < n + 1 {
            return None;
        }
        let i = rng.below(words.len() - n + 1);
        let run = &words[i..i + n];
        if run.iter().filter(|w| !STOP.contains(&w.to_lowercase().as_str())).count() >= 2 {
            return Some(run.iter().map(|w| w.as_str()).collect::<Vec<_>>().join(" "));
        }
    }
    None
}

/// Free text from outside the vault: Cranfield's requests and as many of FOLDOC's titles.
fn outside(rng: &mut Rng, eval: &Path) -> Vec<String> {
    let cran = eval.join("cranfield/queries.jsonl");
    let foldoc = eval.join("foldoc/vault");
    assert!(
        cran.exists() && foldoc.is_dir(),
        "the free-text queries come from {}/cranfield and {}/foldoc, which are missing",
        eval.display(),
        eval.display()
    );
    let mut texts: Vec<String> = std::fs::read_to_string(&cran)
        .unwrap()
        .lines()
        .filter_map(|l| {
            serde_json::from_str::<Value>(l).ok()?["query"]
                .as_str()
                .map(|q| q.trim_end_matches([' ', '.']).to_string())
        })
        .collect();
    let titles: Vec<String> =
        md_files(&foldoc).iter().filter_map(|rel| page_words(&foldoc, rel).map(|(t, _)| t)).collect();
    let n = texts.len();
    texts.extend(rng.sample(&titles, n));
    texts
}

/// The vault's markdown files, vault-relative, sorted.
fn md_files(vault: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = walkdir::WalkDir::new(vault)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
        .map(|e| e.path().strip_prefix(vault).unwrap().to_path_buf())
        .collect();
    files.sort();
    files
}

fn rel_str(rel: &Path) -> String {
    rel.to_string_lossy().replace('\\', "/")
}

impl Bench {
    fn new(work: &Path, eval: &Path, queries: usize) -> Self {
        let vault = work.join("vault");
        let pages = md_files(&vault);
        assert!(!pages.is_empty(), "no pages in {}", vault.display());
        let mut rng = Rng::new(30);
        let per_kind = queries / 3;
        let heads: Vec<Asked> = rng
            .sample(&pages, per_kind)
            .iter()
            .filter_map(|rel| page_words(&vault, rel).map(|(t, _)| (t, Some(rel_str(rel)))))
            .collect();
        let mut phrases = Vec::new();
        for rel in rng.sample(&pages, per_kind * 3) {
            if let Some(t) = phrase(&mut rng, &vault, &rel) {
                phrases.push((t, Some(rel_str(&rel))));
            }
            if phrases.len() == per_kind {
                break;
            }
        }
        let all_free = outside(&mut rng, eval);
        let free: Vec<Asked> = rng.sample(&all_free, per_kind).into_iter().map(|t| (t, None)).collect();
        let goals = if std::env::var("CAIRN_BENCH_GOALS").is_ok_and(|v| v == "1m") {
            Goals { balanced_p99_ms: 100.0, settled_mib: 2048.0, restart: "open from the snapshot <= 5 s" }
        } else {
            Goals { balanced_p99_ms: 50.0, settled_mib: 1536.0, restart: "first answer <= 3 s" }
        };
        let bench =
            if std::env::var("CAIRN_BENCH_GOALS").is_ok_and(|v| v == "1m") { "million" } else { "gcide" };
        Self {
            db: work.join("db"),
            vault,
            pages,
            kinds: vec![("headword", heads), ("phrase", phrases), ("free text", free)],
            goals,
            rng,
            figures: Figures::new(bench),
        }
    }

    fn owner(&self) -> Proc {
        Proc::watch(&self.db, &[("gcide", &self.vault)])
    }

    /// The owner's resident memory: its own (heap) and mapped files' pages (the chunk file,
    /// LanceDB's files), which the kernel takes back under pressure, and LanceDB's caches.
    fn rss_parts(&self, owner: &Proc) -> String {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", owner.child.id())).unwrap_or_default();
        let field = |k: &str| {
            status
                .lines()
                .find(|l| l.starts_with(&format!("{k}:")))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
                .map_or(f64::NAN, |kib| kib / 1024.0)
        };
        let out = Command::new(bin()).args(["status", "--json", "--db", self.db.to_str().unwrap()]).output();
        let memory: Option<Value> = out
            .ok()
            .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
            .map(|v| v["memory"].clone());
        let cache = memory
            .and_then(|m| m["store_cache_mib"].as_f64())
            .map_or(String::new(), |c| format!(", LanceDB's caches {c:.0} MiB"));
        format!("anonymous {:.0} MiB, file pages {:.0} MiB{cache}", field("RssAnon"), field("RssFile"))
    }

    /// Every query of every kind in every mode from `cairn search` processes, with one
    /// `cairn mcp` client asking balanced queries meanwhile.
    fn ask_all(&mut self, owner: &Proc, state: &str, key: &str) {
        let stop = Arc::new(AtomicBool::new(false));
        let mcp_ms = Arc::new(Mutex::new(Vec::new()));
        let mixed: Vec<String> =
            self.kinds.iter().flat_map(|(_, a)| a.iter().map(|(t, _)| t.clone())).collect();
        let client = {
            let (stop, mcp_ms, db) = (stop.clone(), mcp_ms.clone(), self.db.clone());
            std::thread::spawn(move || {
                let mut mcp = Mcp::start(&db);
                let mut own = Rng::new(31);
                while !stop.load(Ordering::Relaxed) {
                    let (a, _) = mcp.search(&mixed[own.below(mixed.len())], "balanced");
                    mcp_ms.lock().unwrap().push(a["latency_ms"].as_f64().unwrap_or(f64::NAN));
                }
                mcp.close();
            })
        };
        for mode in ["fast", "balanced", "thorough"] {
            for (kind, asked) in &self.kinds {
                let (mut took, mut wall, mut hit1, mut hit10) = (Vec::new(), Vec::new(), 0, 0);
                for (text, page) in asked {
                    let (a, w) = cli_search(&self.db, text, mode);
                    took.push(a["latency_ms"].as_f64().unwrap());
                    wall.push(w);
                    if let Some(rel) = page {
                        let paths: Vec<&str> = a["results"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .filter_map(|r| r["path"].as_str())
                            .collect();
                        hit1 += usize::from(paths.first() == Some(&rel.as_str()));
                        hit10 += usize::from(paths.contains(&rel.as_str()));
                    }
                }
                let n = asked.len().max(1) as f64;
                let hits = if kind == &"free text" {
                    String::new()
                } else {
                    format!("Hit@1 {:.3}, Hit@10 {:.3}; ", hit1 as f64 / n, hit10 as f64 / n)
                };
                let goal = if mode == "balanced" {
                    format!(" (goal: balanced p99 <= {} ms)", self.goals.balanced_p99_ms)
                } else {
                    String::new()
                };
                println!(
                    "{mode}, {} {kind} queries {state}: {hits}answer p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms, max {:.1} ms; process wall p50 {:.0} ms{goal}",
                    asked.len(),
                    pct(&took, 0.5),
                    pct(&took, 0.95),
                    pct(&took, 0.99),
                    pct(&took, 1.0),
                    pct(&wall, 0.5)
                );
                let kind = kind.replace(' ', "_");
                self.figures.add(
                    &format!("{key}.{mode}.{kind}.p50_ms"),
                    pct(&took, 0.5),
                    "ms",
                    Better::Lower,
                );
                self.figures.add(
                    &format!("{key}.{mode}.{kind}.p99_ms"),
                    pct(&took, 0.99),
                    "ms",
                    Better::Lower,
                );
                if kind != "free_text" {
                    self.figures.add(
                        &format!("{key}.{mode}.{kind}.hit1"),
                        hit1 as f64 / n,
                        "",
                        Better::Higher,
                    );
                }
            }
        }
        stop.store(true, Ordering::Relaxed);
        client.join().unwrap();
        let ms = mcp_ms.lock().unwrap();
        println!(
            "one `cairn mcp` client meanwhile, balanced, {} queries: answer p50 {:.1} ms, p95 {:.1} ms, p99 {:.1} ms",
            ms.len(),
            pct(&ms, 0.5),
            pct(&ms, 0.95),
            pct(&ms, 0.99)
        );
        let (now, peak) = owner.rss_mib();
        println!("owner RSS after the queries {now:.0} MiB ({}), peak {peak:.0} MiB", self.rss_parts(owner));
    }

    /// `edits` pages appended to, each timed from the write to `page_indexed` and
    /// `page_embedded`; with the upkeep runs (`optimized`) the owner made meanwhile, which an
    /// edit may wait behind.
    fn edit_pages(&mut self, owner: &Proc, edits: usize, state: &str, key: &str) {
        let (mut indexed, mut embedded, mut upkeep) = (Vec::new(), Vec::new(), Vec::new());
        let within = Duration::from_secs(600);
        let from = Instant::now();
        for (i, rel) in self.rng.sample(&self.pages, edits).iter().enumerate() {
            let rel_s = rel_str(rel);
            let t0 = Instant::now();
            let mut text = std::fs::read_to_string(self.vault.join(rel)).unwrap();
            text.push_str(&format!(
                "\nBench edit {i}: zqx{i}marker appended to measure the time to searchable.\n"
            ));
            std::fs::write(self.vault.join(rel), text).unwrap();
            let mut slug: Option<String> = None;
            owner.until(&format!("{rel_s} indexed and embedded"), within, |at, e| {
                // Events printed before the write (the first index's) are passed over.
                if at < t0 {
                    if at >= from && event_is(e, "optimized") {
                        upkeep.push(e.clone());
                    }
                    return false;
                }
                if event_is(e, "optimized") {
                    upkeep.push(e.clone());
                }
                if event_is(e, "page_indexed") && e["path"] == rel_s.as_str() {
                    indexed.push(at.duration_since(t0).as_secs_f64() * 1000.0);
                    slug = e["slug"].as_str().map(str::to_string);
                    if e["vectors_pending"].as_u64().unwrap_or(0) == 0 {
                        embedded.push(*indexed.last().unwrap());
                        return true;
                    }
                }
                let done = event_is(e, "page_embedded") && slug.as_deref().is_some_and(|s| e["slug"] == s);
                if done {
                    embedded.push(at.duration_since(t0).as_secs_f64() * 1000.0);
                }
                done
            });
        }
        let runs: Vec<String> = upkeep
            .iter()
            .map(|e| {
                format!(
                    "{} ms{} in {} steps (longest {} {} ms)",
                    e["ms"],
                    if e["compacted"] == true { " (compacted)" } else { "" },
                    e["steps"],
                    e["longest_step"],
                    e["longest_step_ms"]
                )
            })
            .collect();
        println!(
            "{edits} edits {state}: edit -> searchable p50 {:.0} ms, p99 {:.0} ms (goal p99 <= 1 s); edit -> vectors p50 {:.0} ms, p99 {:.0} ms; upkeep runs meanwhile: {}",
            pct(&indexed, 0.5),
            pct(&indexed, 0.99),
            pct(&embedded, 0.5),
            pct(&embedded, 0.99),
            if runs.is_empty() { "none".to_string() } else { runs.join(", ") }
        );
        println!(
            "edit -> searchable, ms, in order: {}",
            indexed.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" ")
        );
        self.figures.add(&format!("{key}.edit.searchable_p50_ms"), pct(&indexed, 0.5), "ms", Better::Lower);
        self.figures.add(&format!("{key}.edit.searchable_p99_ms"), pct(&indexed, 0.99), "ms", Better::Lower);
        self.figures.add(&format!("{key}.edit.vectors_p99_ms"), pct(&embedded, 0.99), "ms", Better::Lower);
    }

    /// The owner's memory once the idle upkeep after `after` has run (the settled goal).
    fn settled(&mut self, owner: &Proc, after: &str) {
        self.idle_upkeep(owner);
        let (now, peak) = owner.rss_mib();
        println!(
            "owner RSS settled after {after} and the idle upkeep {now:.0} MiB (goal <= {}; {}), peak {peak:.0} MiB",
            self.goals.settled_mib,
            self.rss_parts(owner)
        );
        self.figures.add("settled.rss_mib", now, "MiB", Better::Lower);
    }

    /// Wait for the upkeep the owner runs once its writer has been idle (12 s after the last
    /// commit: compaction, pruning, the snapshot), so a memory reading after it is settled.
    fn idle_upkeep(&self, owner: &Proc) {
        let mut last = Instant::now();
        owner.until("the idle upkeep", Duration::from_secs(900), |at, e| {
            if event_is(e, "committed") {
                last = at;
            }
            event_is(e, "optimized") && at.duration_since(last) >= Duration::from_secs(11)
        });
    }

    /// Run `cairn ARGS` to the end while searches go on; its wall time and the searches'
    /// latencies.
    fn while_running(&mut self, args: &[&str], key: &str) {
        let probe: Vec<String> =
            self.kinds.iter().take(2).flat_map(|(_, a)| a.iter().take(50).map(|(t, _)| t.clone())).collect();
        let done = Arc::new(AtomicBool::new(false));
        let asker = {
            let (done, db) = (done.clone(), self.db.clone());
            std::thread::spawn(move || {
                let mut took = Vec::new();
                let mut i = 0;
                while !done.load(Ordering::Relaxed) {
                    let (a, _) = cli_search(&db, &probe[i % probe.len()], ["fast", "balanced"][i % 2]);
                    took.push(a["latency_ms"].as_f64().unwrap());
                    i += 1;
                }
                took
            })
        };
        let t = Instant::now();
        let mut child = Command::new(bin())
            .args(args)
            .args(["--db", self.db.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let ok = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break if status.success() { "ok".to_string() } else { format!("exit {status}") };
            }
            if t.elapsed() > LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                break format!("stopped: not done after {} s", LIMIT.as_secs());
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        let wall = t.elapsed().as_secs_f64();
        done.store(true, Ordering::Relaxed);
        let took = asker.join().unwrap();
        let slow = took.iter().filter(|t| **t > 200.0).count();
        println!(
            "`cairn {}` on the whole vault: {wall:.1} s ({ok}); {} searches meanwhile: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms, {slow} over 200 ms (goal 0)",
            args.join(" "),
            took.len(),
            pct(&took, 0.5),
            pct(&took, 0.99),
            pct(&took, 1.0)
        );
        self.figures.add(&format!("{key}.wall_s"), wall, "s", Better::Lower);
        self.figures.add(&format!("{key}.searches_over_200ms"), slow as f64, "searches", Better::Lower);
    }

    /// Stop the owner, run `stopped` (the owner saves its snapshot as it stops), start it
    /// again: the time to its first answer.
    fn restart(&mut self, owner: Proc, why: &str, key: &str, stopped: impl FnOnce()) -> Proc {
        owner.stop();
        stopped();
        let owner = self.owner();
        owner.until("system_started", Duration::from_secs(300), |_, e| event_is(e, "system_started"));
        let (a, _) = cli_search(&self.db, &self.kinds[0].1[0].0, "fast");
        let first = owner.started.elapsed().as_secs_f64();
        let (_, started) = owner.event("source_started", owner.started, Duration::from_secs(300), |e| {
            event_is(e, "source_started") && e["source"] == "gcide"
        });
        let (now, peak) = owner.rss_mib();
        println!(
            "restart {why}: first answer {first:.2} s after the owner's start ({} results); source open {} ms, from snapshot: {} (goal: {}); owner RSS {now:.0} MiB ({}), peak {peak:.0} MiB",
            a["results"].as_array().map_or(0, Vec::len),
            started["open_ms"],
            started["from_snapshot"],
            self.goals.restart,
            self.rss_parts(&owner)
        );
        self.figures.add(&format!("{key}.first_answer_s"), first, "s", Better::Lower);
        self.figures.add(
            &format!("{key}.open_ms"),
            started["open_ms"].as_f64().unwrap_or(f64::NAN),
            "ms",
            Better::Lower,
        );
        owner
    }
}

fn main() {
    let work = PathBuf::from(
        std::env::var("CAIRN_BENCH_DIR").expect("CAIRN_BENCH_DIR: the folder with vault/ (and db/)"),
    );
    let eval = std::env::var_os("CAIRN_EVAL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/eval"));
    let edits = env_num("CAIRN_BENCH_EDITS", 50);
    if std::env::var("CAIRN_BENCH_ONLY").is_ok_and(|v| v == "edits") {
        return edits_only(&work, edits);
    }
    let reopen = work.join("db").exists();
    let reopen_all = reopen && std::env::var("CAIRN_BENCH_REOPEN").is_ok_and(|v| v == "all");
    let last_vector = std::env::var("CAIRN_BENCH_LAST_VECTOR").is_ok_and(|v| v == "1");
    let mut b = Bench::new(&work, &eval, env_num("CAIRN_BENCH_QUERIES", 1002));

    // From an empty database, or reopened.
    let mut owner = b.owner();
    let hour = Duration::from_secs(3600);
    if reopen {
        let up = owner.said("cairn: up to date", hour, None).expect("the reopened owner up to date");
        let (_, started) = owner.event("source_started", owner.started, Duration::from_secs(60), |e| {
            event_is(e, "source_started") && e["source"] == "gcide"
        });
        let (now, peak) = owner.rss_mib();
        println!(
            "reopened a database: up to date {:.1} s after the owner's start; source open {} ms, from snapshot: {} (goal for a first open from the tables: peak <= 2560 MiB); owner RSS {now:.0} MiB ({}), peak {peak:.0} MiB",
            up.duration_since(owner.started).as_secs_f64(),
            started["open_ms"],
            started["from_snapshot"],
            b.rss_parts(&owner)
        );
        b.figures.add("reopen.open_ms", started["open_ms"].as_f64().unwrap_or(f64::NAN), "ms", Better::Lower);
        b.figures.add("reopen.peak_rss_mib", peak, "MiB", Better::Lower);
        b.ask_all(&owner, "in steady state, reopened", "reopened");
        if !reopen_all {
            owner.stop();
            return b.figures.finish();
        }
    } else {
        let at = owner
            .said("every page is searchable by name", hour, None)
            .expect("every page searchable by name");
        let by_name = at.duration_since(owner.started).as_secs_f64();
        let (now, peak) = owner.rss_mib();
        println!(
            "pages {}: every page searchable by name and keyword after {by_name:.1} s (goal <= 60 s: {:.2} x the bound); owner RSS then {now:.0} MiB, peak {peak:.0} MiB",
            b.pages.len(),
            by_name / 60.0
        );
        b.figures.add("first.searchable_by_name_s", by_name, "s", Better::Lower);
        b.figures.add("first.peak_rss_mib", peak, "MiB", Better::Lower);
        b.ask_all(&owner, "while the owner embeds the first index", "embedding");
    }

    // Edits, and the last vector.
    if reopen_all {
        b.edit_pages(&owner, edits, "in steady state, reopened", "reopened");
        b.settled(&owner, "the queries, the edits");
    } else if last_vector {
        let up = owner.said("cairn: up to date", 4 * hour, None).expect("the last vector");
        let model_ms: f64 = owner
            .drain_events()
            .iter()
            .filter(|(_, e)| event_is(e, "committed"))
            .map(|(_, e)| e["embed_ms"].as_f64().unwrap_or(0.0))
            .sum();
        let took = up.duration_since(owner.started).as_secs_f64();
        let over_model = took / (model_ms / 1000.0).max(1e-9);
        let (now, peak) = owner.rss_mib();
        println!(
            "last vector after {took:.0} s; the model's own time {:.0} s ({:.2} x it, goal <= 1.05); owner RSS at the last vector {now:.0} MiB ({}; the model gives its batches' memory back 2 s later), peak {peak:.0} MiB",
            model_ms / 1000.0,
            over_model,
            b.rss_parts(&owner)
        );
        b.figures.add("first.last_vector_over_model", over_model, "×", Better::Lower);
        // At once, as a user goes on editing when the index is done: the first edits meet the
        // upkeep's first compaction after the backfill.
        b.edit_pages(&owner, edits, "in steady state, from the last vector on", "steady");
        b.ask_all(&owner, "in steady state", "steady");
        b.settled(&owner, "the edits, the queries");
    } else {
        b.edit_pages(&owner, edits, "while the owner embeds the first index", "embedding");
    }

    if !reopen_all {
        b.while_running(&["duplicates", "--json"], "duplicates");
        b.while_running(&["selftest", "--json"], "selftest");
    }

    // Restarts: with the snapshot the owner saves as it stops, then without it (as after an
    // upgrade: opened from the tables).
    owner = b.restart(owner, "of the owner", "restart", || {});
    let snapshots = b.db.join("snapshots");
    let mut removed = 0;
    owner = b.restart(
        owner,
        "with the snapshot removed, as after an upgrade: opened from the tables",
        "restart_tables",
        || {
            for s in std::fs::read_dir(&snapshots).into_iter().flatten().flatten() {
                if s.path().extension().is_some_and(|x| x == "snapshot")
                    && std::fs::remove_file(s.path()).is_ok()
                {
                    removed += 1;
                }
            }
        },
    );
    println!("(snapshot files removed: {removed})");
    owner.stop();
    b.figures.finish();
}

/// `CAIRN_BENCH_ONLY=edits`: edits through an owner on the database kept in `work`, one at a
/// time, each timed from the write to searchable, with the upkeep runs they met (the first
/// compaction after a backfill: `scripts/bench/compaction`).
fn edits_only(work: &Path, edits: usize) {
    let vault = work.join("vault");
    let mut b = Bench {
        db: work.join("db"),
        pages: md_files(&vault),
        vault,
        kinds: Vec::new(),
        goals: Goals { balanced_p99_ms: 50.0, settled_mib: 1536.0, restart: "" },
        rng: Rng::new(7),
        figures: Figures::new("compaction-edits"),
    };
    let owner = b.owner();
    let up = owner.said("up to date", Duration::from_secs(3600), None).expect("the owner up to date");
    println!("owner up to date after {:.1} s", up.duration_since(owner.started).as_secs_f64());
    b.edit_pages(&owner, edits, "through the first compaction after a backfill", "compaction");
    owner.until("a compaction", Duration::from_secs(300), |_, e| {
        event_is(e, "optimized") && e["compacted"] == true
    });
    owner.stop();
    b.figures.finish();
}
