//! The resident engine's hand keyword index against tantivy (issue 31, step 3), on the chunks of
//! the largest real vault we have (GCIDE, 135,728 pages; `scripts/bench/gcide-vault`).
//!
//! Both engines read words with the same analysis (simple split, tokens over 40 bytes dropped,
//! lowercase, English stemming, English stop words, ASCII folding: the hand index through
//! LanceDB's tokenizer crate, tantivy through its own filters) and score with BM25 (k1 1.2,
//! b 0.75), term frequencies without positions; a query is its distinct terms, any of them
//! matching, top 10. Each engine runs in its own process, so that each one's memory is its own:
//! - `hand`: built chunk by chunk, saved as the resident snapshot saves it, then opened in a
//!   fresh process from that file and queried;
//! - `tantivy-mmap`: built in a directory (one indexing thread, as the hand index has), then
//!   opened in a fresh process from it (memory-mapped) and queried;
//! - `tantivy-ram`: built in memory and queried in the same process.
//!
//! Reported per engine: build time, size on disk, open time, query latency p50/p95/p99 over two
//! kinds of query (a page's headword; three words from the middle of a chunk), the resident
//! memory added, and how far each engine's top 10 agrees with the hand index's.
//!
//! Run through `scripts/bench/keyword` (release, without LanceDB). Env: `CAIRN_GCIDE_VAULT`,
//! `CAIRN_BENCH_QUERIES` (per kind, default 1,000).

use cairn_index::memory::Memory;
use cairn_index::resident::keyword::{Bm25, Fields, top_k};
use cairn_index::resident::terms;
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, read_page, scan};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{FAST, Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
    TextAnalyzer,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Term, doc};

const TOP: usize = 10;

/// This process's resident memory, in MiB.
fn rss_mib() -> f64 {
    Memory::now().rss_mib.expect("VmRSS in /proc/self/status (Linux)")
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The chunks' search text, one JSON string per line, as the parent wrote them.
fn chunks(work: &Path) -> impl Iterator<Item = String> {
    let file = std::fs::File::open(work.join("chunks.jsonl")).expect("the chunk file");
    BufReader::new(file).lines().map(|l| serde_json::from_str(&l.expect("a line")).expect("a JSON string"))
}

fn queries(work: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(work.join("queries.json")).expect("the query file");
    serde_json::from_str(&text).expect("queries as [kind, text] pairs")
}

/// What a child reports: figures by name, and each query's top 10 (chunk numbers).
#[derive(serde::Serialize, serde::Deserialize, Default)]
struct Report {
    figures: Vec<(String, f64)>,
    latencies_us: Vec<(String, f64)>,
    tops: Vec<Vec<u64>>,
}

impl Report {
    fn figure(&mut self, name: &str, value: f64) {
        self.figures.push((name.into(), value));
    }

    /// Run every query through `search` (timed), keeping its top 10.
    fn run(&mut self, queries: &[(String, String)], mut search: impl FnMut(&str) -> Vec<u64>) {
        // One untimed pass first: the first touch of a list is a page fault, not the engine.
        queries.iter().for_each(|(_, q)| drop(search(q)));
        for (kind, q) in queries {
            let t = Instant::now();
            let top = search(q);
            self.latencies_us.push((kind.clone(), t.elapsed().as_secs_f64() * 1e6));
            self.tops.push(top);
        }
    }
}

fn hand_build(work: &Path) -> Report {
    let mut r = Report::default();
    let (rss0, t) = (rss_mib(), Instant::now());
    let mut bm25 = Bm25::default();
    for (i, text) in chunks(work).enumerate() {
        bm25.insert(i as u32, &terms(&text));
    }
    bm25.shrink();
    r.figure("build ms", ms(t));
    r.figure("built RSS added MiB", rss_mib() - rss0);
    let file = std::fs::File::create(work.join("hand.bin")).expect("the snapshot file");
    let bytes = bm25.write_to(BufWriter::new(file)).expect("the snapshot written");
    r.figure("on disk MiB", bytes as f64 / (1 << 20) as f64);
    r
}

fn hand_open(work: &Path) -> Report {
    let mut r = Report::default();
    let queries = queries(work);
    let (rss0, t) = (rss_mib(), Instant::now());
    let path = work.join("hand.bin");
    let len = std::fs::metadata(&path).expect("the snapshot").len();
    let bm25 = Bm25::read_from(std::fs::File::open(&path).expect("the snapshot"), len).expect("read back");
    r.figure("open ms", ms(t));
    r.run(&queries, |q| {
        let scored = bm25.scores(&terms(q), Fields::Together).into_iter().map(|(d, s)| (s, d)).collect();
        top_k(scored, TOP, |d| *d).into_iter().map(|(_, d)| u64::from(d)).collect()
    });
    r.figure("RSS added MiB", rss_mib() - rss0);
    r
}

/// The hand index's analysis, in tantivy's filters.
fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(SimpleTokenizer::default())
        .filter(RemoveLongFilter::limit(40))
        .filter(LowerCaser)
        .filter(Stemmer::new(Language::English))
        .filter(StopWordFilter::new(Language::English).expect("English stop words"))
        .filter(AsciiFoldingFilter)
        .build()
}

fn schema() -> (Schema, Field, Field) {
    let mut b = Schema::builder();
    let indexing =
        TextFieldIndexing::default().set_tokenizer("cairn").set_index_option(IndexRecordOption::WithFreqs);
    let text = b.add_text_field("text", TextOptions::default().set_indexing_options(indexing));
    let chunk = b.add_u64_field("chunk", FAST);
    (b.build(), text, chunk)
}

fn tantivy_build(work: &Path, index: Index, text: Field, chunk: Field) -> (Report, Index) {
    let mut r = Report::default();
    let (rss0, t) = (rss_mib(), Instant::now());
    index.tokenizers().register("cairn", analyzer());
    let mut writer: IndexWriter = index.writer_with_num_threads(1, 200_000_000).expect("a writer");
    for (i, body) in chunks(work).enumerate() {
        writer.add_document(doc!(text => body, chunk => i as u64)).expect("a document added");
    }
    writer.commit().expect("a commit");
    writer.wait_merging_threads().expect("merges done");
    r.figure("build ms", ms(t));
    r.figure("built RSS added MiB", rss_mib() - rss0);
    (r, index)
}

fn tantivy_query(index: &Index, reader: &IndexReader, r: &mut Report, queries: &[(String, String)]) {
    let text = index.schema().get_field("text").expect("the text field");
    let searcher = reader.searcher();
    let numbers: Vec<_> = searcher
        .segment_readers()
        .iter()
        .map(|s| s.fast_fields().u64("chunk").expect("the chunk numbers"))
        .collect();
    let mut analyzer = index.tokenizer_for_field(text).expect("the field's analyzer");
    r.run(queries, |q| {
        let mut words = Vec::new();
        analyzer.token_stream(q).process(&mut |t| words.push(t.text.clone()));
        words.sort();
        words.dedup();
        let query = BooleanQuery::new(
            words
                .iter()
                .map(|w| {
                    let term = TermQuery::new(Term::from_field_text(text, w), IndexRecordOption::WithFreqs);
                    (Occur::Should, Box::new(term) as Box<dyn Query>)
                })
                .collect(),
        );
        let top = searcher.search(&query, &TopDocs::with_limit(TOP)).expect("a search");
        top.into_iter()
            .map(|(_, at)| numbers[at.segment_ord as usize].first(at.doc_id).unwrap_or(u64::MAX))
            .collect()
    });
}

fn reader(index: &Index) -> IndexReader {
    index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into().expect("a reader")
}

fn tantivy_ram(work: &Path) -> Report {
    let queries = queries(work);
    let start = rss_mib();
    let (schema, text, chunk) = schema();
    let (mut r, index) = tantivy_build(work, Index::create_in_ram(schema), text, chunk);
    tantivy_query(&index, &reader(&index), &mut r, &queries);
    r.figure("RSS added MiB", rss_mib() - start);
    r
}

fn tantivy_mmap_build(work: &Path) -> Report {
    let (schema, text, chunk) = schema();
    let dir = work.join("tantivy");
    std::fs::create_dir_all(&dir).expect("the index directory");
    let (mut r, _) = tantivy_build(work, Index::create_in_dir(&dir, schema).expect("an index"), text, chunk);
    let bytes: u64 = std::fs::read_dir(&dir)
        .expect("the index")
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    r.figure("on disk MiB", bytes as f64 / (1 << 20) as f64);
    r
}

fn tantivy_mmap_open(work: &Path) -> Report {
    let mut r = Report::default();
    let queries = queries(work);
    let (rss0, t) = (rss_mib(), Instant::now());
    let index = Index::open_in_dir(work.join("tantivy")).expect("the index");
    index.tokenizers().register("cairn", analyzer());
    let reader = reader(&index);
    r.figure("open ms", ms(t));
    tantivy_query(&index, &reader, &mut r, &queries);
    r.figure("RSS added MiB", rss_mib() - rss0);
    r
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

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
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
            "hand-build" => hand_build(&work),
            "hand-open" => hand_open(&work),
            "tantivy-ram" => tantivy_ram(&work),
            "tantivy-mmap-build" => tantivy_mmap_build(&work),
            "tantivy-mmap-open" => tantivy_mmap_open(&work),
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
    let engines = [
        ("hand (resident)", ["hand-build", "hand-open"].as_slice()),
        ("tantivy, mmap directory", &["tantivy-mmap-build", "tantivy-mmap-open"]),
        ("tantivy, RAM directory", &["tantivy-ram"]),
    ];
    let mut reports = Vec::new();
    for (name, steps) in engines {
        let mut all = Report::default();
        for step in steps {
            let r = child(step, work.path());
            all.figures.extend(r.figures);
            all.latencies_us.extend(r.latencies_us);
            all.tops.extend(r.tops);
        }
        reports.push((name, all));
    }
    print_table(&reports);
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
        let build = r.figures.iter().find(|(f, _)| f == "build ms").map_or(0.0, |(_, v)| v / 1e3);
        println!(
            "| {name} | {build:.1} | {} | {} | {} | {:.3} |",
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
}
