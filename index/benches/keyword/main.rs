//! The resident engine's hand keyword index against tantivy (issue 31, step 3), on the chunks of
//! the largest real vault we have (GCIDE, 135,728 pages; `scripts/bench/gcide-vault`). Each
//! engine runs in its own process, so that each one's memory is its own. Two comparisons:
//!
//! 1. **BM25 over each chunk's search text run together**, the scoring tantivy's own query path
//!    has (and prunes with block-max WAND). Both engines read words with the same analysis
//!    (simple split, tokens over 40 bytes dropped, lowercase, English stemming, English stop
//!    words, ASCII folding: the hand index through LanceDB's tokenizer crate, tantivy through its
//!    own filters), BM25 k1 1.2, b 0.75, frequencies without positions, a query's distinct terms
//!    OR-ed, top 10:
//!    - `hand`: built chunk by chunk, saved as the resident snapshot saves it, then opened in a
//!      fresh process from that file and queried;
//!    - `tantivy-mmap`: built in a directory (one indexing thread, as the hand index has), then
//!      opened in a fresh process from it (memory-mapped) and queried;
//!    - `tantivy-ram`: built in memory and queried in the same process.
//! 2. **BM25F, the keyword arm's own scoring** (`Fields::Apart`: a chunk's heading path and text
//!    apart, one saturation). tantivy saturates each field apart, so here it holds the postings
//!    of two fields (the terms the hand index reads, frequencies, no field norms) and a scorer
//!    of this bench's reads them and scores exactly as the hand index does, from each chunk's
//!    exact lengths kept beside; its block-max pruning does not apply. Each engine is then
//!    edited as the writer edits it: 200 batches, each taking 5 chunks out and putting their
//!    text back as new chunks, searchable after each batch (tantivy: a commit and a reload).
//!    - `hand`: as above, with headings apart;
//!    - `tantivy-f` (mmap): built in a directory, opened from it, edited there;
//!    - `tantivy-f-ram`: that directory's files read into memory (as a snapshot would bring
//!      them back), served and edited there.
//!
//! Reported per engine: build time, size on disk, open time, query latency p50/p95/p99 over two
//! kinds of query (a page's headword; three words from the middle of a chunk), the resident
//! memory added, how far each engine's top 10 agrees with the hand index's, and for BM25F the
//! edits' time to searchable.
//!
//! Run through `scripts/bench/keyword` (release, without LanceDB). Env: `CAIRN_GCIDE_VAULT`,
//! `CAIRN_BENCH_QUERIES` (per kind, default 1,000).
mod bm25f;
mod hand;
mod plain;

use cairn_index::memory::Memory;
use cairn_index::resident::keyword::Fields;
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, read_page, scan};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const TOP: usize = 10;

/// This process's resident memory, in MiB.
pub(crate) fn rss_mib() -> f64 {
    Memory::now().rss_mib.expect("VmRSS in /proc/self/status (Linux)")
}

pub(crate) fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The size of the files in `dir`, in MiB.
pub(crate) fn dir_mib(dir: &Path) -> f64 {
    let files = std::fs::read_dir(dir).expect("the index").flatten();
    files.filter_map(|e| e.metadata().ok()).map(|m| m.len() as f64).sum::<f64>() / (1 << 20) as f64
}

/// The chunks' search text, one JSON string per line, as the parent wrote them.
pub(crate) fn chunks(work: &Path) -> impl Iterator<Item = String> {
    let file = std::fs::File::open(work.join("chunks.jsonl")).expect("the chunk file");
    BufReader::new(file).lines().map(|l| serde_json::from_str(&l.expect("a line")).expect("a JSON string"))
}

pub(crate) fn queries(work: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(work.join("queries.json")).expect("the query file");
    serde_json::from_str(&text).expect("queries as [kind, text] pairs")
}

/// What a child reports: figures by name, and each query's top 10 (chunk numbers).
#[derive(serde::Serialize, serde::Deserialize, Default)]
pub(crate) struct Report {
    figures: Vec<(String, f64)>,
    latencies_us: Vec<(String, f64)>,
    tops: Vec<Vec<u64>>,
}

impl Report {
    fn figure(&mut self, name: &str, value: f64) {
        self.figures.push((name.into(), value));
    }

    /// Run every query through `search` (timed), keeping its top 10.
    fn run(&mut self, queries: &[(String, String)], search: impl FnMut(&str) -> Vec<u64>) {
        self.run_as(queries, "", search)
    }

    /// [`Report::run`], the query kinds named with `suffix`.
    fn run_as(
        &mut self,
        queries: &[(String, String)],
        suffix: &str,
        mut search: impl FnMut(&str) -> Vec<u64>,
    ) {
        // One untimed pass first: the first touch of a list is a page fault, not the engine.
        queries.iter().for_each(|(_, q)| drop(search(q)));
        for (kind, q) in queries {
            let t = Instant::now();
            let top = search(q);
            self.latencies_us.push((format!("{kind}{suffix}"), t.elapsed().as_secs_f64() * 1e6));
            self.tops.push(top);
        }
    }
}
/// Run this binary again as one engine's step, and read its report.
fn child(step: &str, work: &Path) -> Report {
    let out = Command::new(std::env::current_exe().expect("this binary"))
        .args(["--step", step])
        .arg(work)
        .output()
        .expect("the child runs");
    assert!(out.status.success(), "{step} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("a report")
}

/// The chunks' search text (as the resident index reads it) into `chunks.jsonl`, and the
/// queries into `queries.json`: per kind, `per_kind` of them spread evenly over the pages.
fn prepare(vault: &Path, work: &Path, per_kind: usize) -> (usize, usize) {
    let report = scan(vault, &PathFilter::new(&ScanOptions::default()).unwrap())
        .unwrap_or_else(|e| panic!("the benchmark vault {} is missing: {e}", vault.display()));
    let mut out = BufWriter::new(std::fs::File::create(work.join("chunks.jsonl")).unwrap());
    let (mut titles, mut phrases, mut count) = (Vec::new(), Vec::new(), 0usize);
    for f in &report.files {
        let Ok(p) = read_page("gcide", vault, &f.rel, &ParseOptions::default()) else { continue };
        titles.push(p.title.clone());
        for c in &p.chunks {
            writeln!(out, "{}", serde_json::to_string(&c.embed_text()).unwrap()).unwrap();
            count += 1;
        }
        let words: Vec<&str> = p.chunks.iter().flat_map(|c| c.text.split_whitespace()).collect();
        if words.len() >= 6 {
            phrases.push(words[words.len() / 2 - 1..words.len() / 2 + 2].join(" "));
        }
    }
    out.flush().unwrap();
    let spread = |all: &[String], kind: &str| -> Vec<(String, String)> {
        let step = (all.len() / per_kind).max(1);
        all.iter().step_by(step).take(per_kind).map(|q| (kind.to_string(), q.clone())).collect()
    };
    let mut queries = spread(&titles, "headword");
    queries.extend(spread(&phrases, "three words"));
    std::fs::write(work.join("queries.json"), serde_json::to_string(&queries).unwrap()).unwrap();
    (report.files.len(), count)
}

pub(crate) fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Mean share of the hand index's top 10 that `other` also returns.
fn agreement(hand: &[Vec<u64>], other: &[Vec<u64>]) -> f64 {
    let shares = hand.iter().zip(other).filter(|(h, _)| !h.is_empty()).map(|(h, o)| {
        let o: HashSet<&u64> = o.iter().collect();
        h.iter().filter(|d| o.contains(d)).count() as f64 / h.len() as f64
    });
    let (sum, n) = shares.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    sum / n.max(1) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, step, work] = &args[..]
        && flag == "--step"
    {
        let work = PathBuf::from(work);
        let report = match step.as_str() {
            "hand-build" => hand::hand_build(&work, Fields::Together),
            "hand-open" => hand::hand_open(&work, Fields::Together),
            "tantivy-ram" => plain::tantivy_ram(&work),
            "tantivy-mmap-build" => plain::tantivy_mmap_build(&work),
            "tantivy-mmap-open" => plain::tantivy_mmap_open(&work),
            "hand-f-build" => hand::hand_build(&work, Fields::Apart),
            "hand-f-open" => hand::hand_open(&work, Fields::Apart),
            "tantivy-f-build" => bm25f::tantivy_f_build(&work),
            "tantivy-f-open" => bm25f::tantivy_f_open(&work),
            "tantivy-f-ram" => bm25f::tantivy_f_ram(&work),
            other => panic!("no step {other}"),
        };
        return println!("{}", serde_json::to_string(&report).unwrap());
    }
    let vault = std::env::var_os("CAIRN_GCIDE_VAULT")
        .map(PathBuf::from)
        .unwrap_or_else(|| dirs::cache_dir().expect("a cache directory").join("cairn/gcide/vault"));
    let per_kind: usize =
        std::env::var("CAIRN_BENCH_QUERIES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let work = tempfile::tempdir().expect("a work directory");
    let (pages, chunks) = prepare(&vault, work.path(), per_kind);
    println!(
        "{pages} pages, {chunks} chunks of {}; {per_kind} queries of each kind, top {TOP}",
        vault.display()
    );
    println!("\nBM25, heading and text run together (tantivy's own scoring):");
    print_table(&run_engines(
        work.path(),
        &[
            ("hand (resident)", &["hand-build", "hand-open"]),
            ("tantivy, mmap directory", &["tantivy-mmap-build", "tantivy-mmap-open"]),
            ("tantivy, RAM directory", &["tantivy-ram"]),
        ],
    ));
    println!("\nBM25F, heading apart, one saturation (the keyword arm's scoring):");
    print_table(&run_engines(
        work.path(),
        &[
            ("hand (resident)", &["hand-f-build", "hand-f-open"]),
            ("tantivy postings, mmap directory", &["tantivy-f-build", "tantivy-f-open"]),
            ("tantivy postings, RAM directory", &["tantivy-f-ram"]),
        ],
    ));
}

/// Each engine's steps, each in a child process, their reports joined.
fn run_engines<'a>(work: &Path, engines: &[(&'a str, &[&str])]) -> Vec<(&'a str, Report)> {
    let mut reports = Vec::new();
    for &(name, steps) in engines {
        let mut all = Report::default();
        for step in steps {
            let r = child(step, work);
            all.figures.extend(r.figures);
            all.latencies_us.extend(r.latencies_us);
            all.tops.extend(r.tops);
        }
        reports.push((name, all));
    }
    reports
}

fn print_table(reports: &[(&str, Report)]) {
    let figure = |r: &Report, n: &str| {
        r.figures.iter().find(|(f, _)| f == n).map_or("–".to_string(), |(_, v)| format!("{v:.1}"))
    };
    let hand = &reports[0].1.tops;
    println!();
    println!("| engine | build s | on disk MiB | open ms | RSS added MiB | top-10 agreement with hand |");
    println!("|---|---|---|---|---|---|");
    for (name, r) in reports {
        let build = r
            .figures
            .iter()
            .find(|(f, _)| f == "build ms")
            .map_or("–".into(), |(_, v)| format!("{:.1}", v / 1e3));
        println!(
            "| {name} | {build} | {} | {} | {} | {:.3} |",
            figure(r, "on disk MiB"),
            figure(r, "open ms"),
            figure(r, "RSS added MiB"),
            agreement(hand, &r.tops)
        );
    }
    println!();
    println!("| engine | query kind | p50 µs | p95 µs | p99 µs | p50 against hand |");
    println!("|---|---|---|---|---|---|");
    let p50 = |r: &Report, kind: &str| {
        percentile(r.latencies_us.iter().filter(|(k, _)| k == kind).map(|(_, v)| *v).collect(), 0.5)
    };
    for kind in ["headword", "three words"] {
        for (name, r) in reports {
            let of: Vec<f64> = r.latencies_us.iter().filter(|(k, _)| k == kind).map(|(_, v)| *v).collect();
            println!(
                "| {name} | {kind} | {:.0} | {:.0} | {:.0} | {:.2}× |",
                percentile(of.clone(), 0.5),
                percentile(of.clone(), 0.95),
                percentile(of, 0.99),
                p50(r, kind) / p50(&reports[0].1, kind)
            );
        }
    }
    if reports.iter().all(|(_, r)| r.figures.iter().all(|(f, _)| !f.starts_with("edit"))) {
        return;
    }
    println!();
    println!(
        "| engine | RSS with a writer MiB | {} edits of {} chunks, searchable after: p50 ms | p99 ms |",
        bm25f::EDIT_BATCHES,
        bm25f::EDIT_CHUNKS
    );
    println!("|---|---|---|---|");
    for (name, r) in reports {
        println!(
            "| {name} | {} | {} | {} |",
            figure(r, "RSS with a writer MiB"),
            figure(r, "edit batch p50 ms"),
            figure(r, "edit batch p99 ms")
        );
    }
}
