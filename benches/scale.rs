//! Scale benchmark (issue 16): one synthetic source of N chunks (default 100,000 and 1,000,000;
//! `CAIRN_BENCH_SCALE_CHUNKS=100000,…`), written through cairn's own commit path into a local
//! LanceDB database, compacted as the owner's upkeep would; then, in a fresh process (so the
//! figures are an opening process's own): open time (tables read into the resident index), RSS,
//! query p50/p99 per mode, and one-page edit commit time.
//!
//! The source, exactly:
//! - **Text.** Chunks of the shared FOLDOC and Cranfield vaults, parsed by cairn, at least 200
//!   bytes each, [`SAMPLE`] of them taken evenly across both. Synthetic page `i` has
//!   [`SECTIONS`] sections; section `j` is sample `s = (i·SECTIONS + j)·7919 mod SAMPLE` with
//!   its sentences rotated by `i` and `(note i.j)` appended, under a heading of its first words.
//!   Every chunk's text is therefore distinct, and its words are the corpora's.
//! - **Vectors.** The real model embeds each sample chunk once. A synthetic chunk's vector is
//!   its sample's vector plus Gaussian noise of norm [`NOISE`] (seeded per chunk), renormalised:
//!   cosine ≈ 0.94 to its sample, so copies of one sample cluster as paraphrases do.
//! - **Queries.** The first eight words of 64 samples (spread evenly).
//!
//! Works in `CAIRN_BENCH_DIR` (default `/tmp/cairn-bench`); a local database of one size is
//! reused by the next run unless `CAIRN_BENCH_SCALE_FRESH=1`. With `CAIRN_BENCH_SCALE_S3=1` the
//! same sizes are then written to and measured on SeaweedFS (started here on loopback, as the S3
//! tests do; "stored" is its data folder), afresh each run. Run by `scripts/bench/scale`.

mod common;
#[path = "../tests/it/weed.rs"]
#[allow(dead_code)] // the tests' SeaweedFS: each bench uses part of it
mod weed;
use cairn_actors::core::status::Memory;
use cairn_index::{
    Database, Embedder, Manifest, OrtEmbedder, OrtOptions, PageWrite, Resident, SourceInfo, StorageOptions,
    WriteBatch,
};
use cairn_ingest::{ParseOptions, parse_page};
use cairn_query::{Mode, SearchRequest};
use common::{Better, Figures, du_mib, pct, shared};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weed::{BUCKET, Weed};

/// Distinct real texts (and model vectors) the source is made from.
const SAMPLE: usize = 2048;
/// Sections (chunks) per synthetic page.
const SECTIONS: usize = 8;
/// Norm of the noise added to a sample's unit vector.
const NOISE: f32 = 0.35;
/// Pages per commit while the source is written.
const PAGES_PER_COMMIT: usize = 2000;
const SOURCE: &str = "synthetic";
const QUERIES: usize = 64;

fn embedder() -> OrtEmbedder {
    OrtEmbedder::open(OrtOptions::default()).expect("the real model must load")
}

/// Every chunk text of at least 200 bytes in the two vaults, then `SAMPLE` of them evenly.
fn sample_texts() -> Vec<String> {
    let mut all = Vec::new();
    for vault in ["foldoc/vault", "cranfield/vault"] {
        let root = shared(vault);
        let mut files: Vec<PathBuf> = walkdir::WalkDir::new(&root)
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| e.path().extension().is_some_and(|x| x == "md"))
            .map(|e| e.into_path())
            .collect();
        files.sort();
        for f in files {
            let bytes = std::fs::read(&f).unwrap();
            let rel = f.strip_prefix(&root).unwrap();
            if let Ok(page) = parse_page("s", rel, &bytes, &ParseOptions::default()) {
                all.extend(page.chunks.into_iter().map(|c| c.text).filter(|t| t.len() >= 200));
            }
        }
    }
    assert!(all.len() >= SAMPLE, "the vaults hold {} long chunks, fewer than {SAMPLE}", all.len());
    let step = all.len() / SAMPLE;
    all.into_iter().step_by(step).take(SAMPLE).collect()
}

/// A deterministic generator (xorshift64*) and standard normal draws (Box–Muller).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f32 {
        let (u, v) = (self.next().max(1e-12), self.next());
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

fn perturbed(v: &[f32], seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let sigma = NOISE / (v.len() as f32).sqrt();
    let mut out: Vec<f32> = v.iter().map(|x| x + sigma * rng.normal()).collect();
    let norm = out.iter().map(|x| x * x).sum::<f32>().sqrt();
    out.iter_mut().for_each(|x| *x /= norm);
    out
}

fn words(text: &str, n: usize) -> String {
    text.split_whitespace().take(n).collect::<Vec<_>>().join(" ")
}

/// Sample `s` as section `j` of page `i`: its sentences rotated by `i`, tagged with `i.j`.
fn section(text: &str, i: usize, j: usize) -> String {
    let sentences: Vec<&str> = text.split_inclusive(". ").collect();
    let k = i % sentences.len();
    let body: String = sentences[k..].iter().chain(&sentences[..k]).copied().collect();
    format!("{} (note {i}.{j})", body.trim())
}

fn sample_of(i: usize, j: usize) -> usize {
    ((i * SECTIONS + j) * 7919) % SAMPLE
}

/// Synthetic page `i` (its `edit`-th version: 0 is the original), parsed, with its vectors.
fn page(i: usize, edit: usize, texts: &[String], vectors: &[Vec<f32>]) -> PageWrite {
    let title = format!("Note {i}: {}", words(&texts[sample_of(i, 0)], 4));
    let mut md = format!("# {title}\n\n");
    let mut parents = Vec::new();
    for j in 0..SECTIONS {
        let s = sample_of(i, j);
        let body = if edit > 0 && j == 0 {
            format!("{} (edit {edit})", section(&texts[s], i, j))
        } else {
            section(&texts[s], i, j)
        };
        md.push_str(&format!("## {}\n\n{body}\n\n", words(&texts[s], 3)));
        parents.push(s);
    }
    let path = format!("n{:03}/note-{i}.md", i % 1000);
    let page = parse_page(SOURCE, Path::new(&path), md.as_bytes(), &ParseOptions::default()).unwrap();
    let vectors = (0..page.chunks.len())
        .map(|k| Some(perturbed(&vectors[parents[k % SECTIONS]], (i * SECTIONS + k + edit * 7) as u64)))
        .collect();
    PageWrite { page, vectors, mtime_ms: 0 }
}

struct Sample {
    texts: Vec<String>,
    vectors: Vec<Vec<f32>>,
}

fn sample(e: &OrtEmbedder) -> Sample {
    let texts = sample_texts();
    let mut vectors = Vec::with_capacity(texts.len());
    for batch in texts.chunks(64) {
        let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
        vectors.extend(e.embed_documents(&refs).unwrap().vectors);
    }
    Sample { texts, vectors }
}

/// Write a source of at least `chunks` chunks into `db` (a fresh folder or bucket path), then
/// compact it.
async fn build(
    db: &str,
    options: &StorageOptions,
    chunks: usize,
    s: &Sample,
    e: &OrtEmbedder,
) -> (f64, usize) {
    let started = Instant::now();
    let database = Database::open_with(db, options, Some(Duration::ZERO)).await.unwrap();
    let store = database.open_source(SOURCE, &Manifest::current(e.model_id(), e.dim())).await.unwrap();
    store
        .register(&SourceInfo { id: SOURCE.into(), root: None, include: vec![], exclude: vec![] })
        .await
        .unwrap();
    let pages = chunks.div_ceil(SECTIONS);
    let mut written = 0;
    for from in (0..pages).step_by(PAGES_PER_COMMIT) {
        let upserts: Vec<PageWrite> =
            (from..(from + PAGES_PER_COMMIT).min(pages)).map(|i| page(i, 0, &s.texts, &s.vectors)).collect();
        written += upserts.iter().map(|w| w.page.chunks.len()).sum::<usize>();
        store.write(&WriteBatch { upserts, removals: vec![] }).await.unwrap();
        eprintln!("  {written} chunks written ({:.0} s)", started.elapsed().as_secs_f64());
    }
    store.optimize().await.unwrap();
    store.prune(Duration::ZERO, true).await.unwrap();
    (started.elapsed().as_secs_f64(), written)
}

/// The figures of an opening process (this one, started fresh): printed as one JSON line.
async fn measure(db: &str) {
    let (e, texts) = (embedder(), sample_texts());
    let base = Memory::now().rss_mib.unwrap_or(0.0);
    let started = Instant::now();
    let database = Database::open(db).await.unwrap();
    let store = database.open_existing(SOURCE).await.unwrap();
    let exact_up_to = std::env::var("CAIRN_BENCH_SCALE_EXACT_UP_TO").unwrap().parse().unwrap();
    let snapshot = PathBuf::from(std::env::var("CAIRN_BENCH_SCALE_SNAPSHOT").unwrap());
    // A full load also saves a snapshot before it returns (counted here).
    let (resident, _, restored) = Resident::open(&store, exact_up_to, &snapshot).await.unwrap();
    let open_s = started.elapsed().as_secs_f64();
    let (chunks, exact) = (resident.read().chunk_count(), resident.read().exact_vectors());
    let rss_open = Memory::now().rss_mib.unwrap_or(0.0) - base;
    let queries: Vec<String> = texts.iter().step_by(SAMPLE / QUERIES).map(|t| words(t, 8)).collect();
    let mut modes = serde_json::Map::new();
    for (name, mode) in [("fast", Mode::Fast), ("balanced", Mode::Balanced), ("thorough", Mode::Thorough)] {
        let mut ms = Vec::new();
        for (n, q) in queries.iter().enumerate() {
            let mut req = SearchRequest::new(q.clone());
            req.mode = mode;
            let t = Instant::now();
            let answer = cairn_query::search(&[&resident], Some(&e as &dyn Embedder), &req).await.unwrap();
            if n > 0 {
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            assert!(!answer.results.is_empty(), "`{q}` found nothing");
        }
        modes.insert(name.into(), serde_json::json!({ "p50": pct(&ms, 0.5), "p99": pct(&ms, 0.99) }));
    }
    // One page edited (one section changed), committed as the writer does: the tables, then
    // the resident index.
    let sample = Sample { vectors: texts.iter().map(|_| vec![0.0; e.dim()]).collect(), texts };
    let (mut commit_ms, mut tables_ms) = (Vec::new(), Vec::new());
    for edit in 1..=7 {
        let w = page(edit * 997 % (chunks / SECTIONS), edit, &sample.texts, &sample.vectors);
        let batch = WriteBatch { upserts: vec![w], removals: vec![] };
        let t = Instant::now();
        store.write(&batch).await.unwrap();
        tables_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        resident.apply(cairn_index::Prepared::batch(&batch, resident.lang())).await.unwrap();
        commit_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    // As the writer's idle upkeep does: a snapshot of the index as the edits left it.
    let t = Instant::now();
    resident.save(&snapshot, store.stamp(exact_up_to).await.unwrap()).await;
    let save_s = t.elapsed().as_secs_f64();
    let out = serde_json::json!({
        "chunks": chunks,
        "exact_vectors": exact,
        "vector_mib": resident.read().vector_bytes() as f64 / 1048576.0,
        "parts_mib": resident
            .read()
            .bytes()
            .into_iter()
            .map(|(part, b)| (part.to_string(), serde_json::json!((b as f64 / 1048576.0).round())))
            .collect::<serde_json::Map<_, _>>(),
        "open_s": open_s,
        "rss_open_mib": rss_open,
        "rss_total_mib": Memory::now().rss_mib.unwrap_or(0.0),
        "hwm_mib": Memory::now().peak_rss_mib.unwrap_or(0.0),
        "modes": modes,
        "commit_ms": commit_ms.iter().map(|m| m.round()).collect::<Vec<_>>(),
        "tables_ms": tables_ms.iter().map(|m| m.round()).collect::<Vec<_>>(),
        "commit_p50_ms": pct(&commit_ms, 0.5),
        "commit_max_ms": pct(&commit_ms, 1.0),
        "tables_p50_ms": pct(&tables_ms, 0.5),
        "restored": restored,
        "save_s": save_s,
    });
    println!("{out}");
}

/// The binary's allocator (`src/main.rs`), so the figures are an owner's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    if let Ok(db) = std::env::var("CAIRN_BENCH_SCALE_MEASURE") {
        rt.block_on(measure(&db));
        return;
    }
    let dir = PathBuf::from(std::env::var("CAIRN_BENCH_DIR").unwrap_or_else(|_| "/tmp/cairn-bench".into()));
    let sizes: Vec<usize> = std::env::var("CAIRN_BENCH_SCALE_CHUNKS")
        .unwrap_or_else(|_| "100000,1000000".into())
        .split(',')
        .map(|n| n.trim().parse().expect("CAIRN_BENCH_SCALE_CHUNKS: chunk counts"))
        .collect();
    let fresh = std::env::var("CAIRN_BENCH_SCALE_FRESH").is_ok_and(|v| v == "1");
    // `CAIRN_BENCH_SCALE_S3=1`: the same sizes again on SeaweedFS, each written afresh.
    let s3 = std::env::var("CAIRN_BENCH_SCALE_S3").is_ok_and(|v| v == "1");
    println!(
        "| chunks | where | vectors held | write s | stored | opened from | open s (goal ≤ 5) | RSS of the source | process RSS / peak (goal ≤ 2048 MiB) | fast p50/p99 ms | balanced p50/p99 ms (goal p99 ≤ 100) | thorough p50/p99 ms | one-page commit p50/max ms (goal ≤ 1000) | of which the tables, p50 ms |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut figures = Figures::new("scale");
    let mut built: Option<(OrtEmbedder, Sample)> = None;
    let mut made = |rt: &tokio::runtime::Runtime, db: &str, options: &StorageOptions, n: usize| {
        let (e, s) = built.get_or_insert_with(|| {
            let e = embedder();
            let s = sample(&e);
            (e, s)
        });
        rt.block_on(build(db, options, n, s, e)).0
    };
    for n in &sizes {
        let db = dir.join(format!("scale-{n}"));
        let marker = db.join("complete");
        let write_s = if fresh || !marker.exists() {
            let _ = std::fs::remove_dir_all(&db);
            std::fs::create_dir_all(&db).unwrap();
            let secs = made(&rt, db.to_str().unwrap(), &StorageOptions::default(), *n);
            std::fs::write(&marker, format!("{secs}")).unwrap();
            secs
        } else {
            std::fs::read_to_string(&marker).unwrap().parse().unwrap()
        };
        report(&mut figures, *n, "local", db.to_str().unwrap(), write_s, du_mib(&db), &[]);
    }
    if !s3 {
        figures.finish();
        return;
    }
    for n in &sizes {
        let weed_dir = dir.join(format!("weed-{n}"));
        let _ = std::fs::remove_dir_all(&weed_dir);
        let weed = Weed::start(&weed_dir);
        let db = format!("s3://{BUCKET}/scale-{n}");
        let write_s = made(&rt, &db, &weed.options(), *n);
        let env: Vec<(String, String)> = weed
            .options()
            .0
            .into_iter()
            .map(|(k, v)| (if k.starts_with("aws_") { k } else { format!("aws_{k}") }.to_uppercase(), v))
            .collect();
        report(&mut figures, *n, "SeaweedFS", &db, write_s, du_mib(&weed_dir.join("data")), &env);
    }
    figures.finish();
}

/// Measure `db` in a fresh process (its environment plus `env`), once per vector path that
/// applies at this size, print the rows and add their figures (`<chunks>.<where>.<vectors>`,
/// `.reopened` for an open from the snapshot).
fn report(
    figures: &mut Figures,
    n: usize,
    place: &str,
    db: &str,
    write_s: f64,
    stored_mib: f64,
    env: &[(String, String)],
) {
    // Both vector paths (limits past and below the size) while the exact one fits easily (f32
    // vectors of 200k chunks are 293 MiB); the default (int8 past `EXACT_VECTORS_UP_TO`) alone
    // above that.
    let default = cairn_index::vectors::EXACT_VECTORS_UP_TO;
    let limits = if n <= 200_000 { vec![usize::MAX, 0] } else { vec![default] };
    // Past the limit, twice: a first open reads the tables (and saves a snapshot), a second
    // reads the snapshot the first left after its edits.
    let runs =
        limits.into_iter().flat_map(|l| if l < n { vec![(l, true), (l, false)] } else { vec![(l, true)] });
    let snapshots = tempfile::tempdir().unwrap();
    for (limit, first) in runs {
        let snapshot = snapshots.path().join(format!("{limit}.snapshot"));
        if first {
            let _ = std::fs::remove_file(&snapshot);
        }
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .env("CAIRN_BENCH_SCALE_MEASURE", db)
            .env("CAIRN_BENCH_SCALE_EXACT_UP_TO", limit.to_string())
            .env("CAIRN_BENCH_SCALE_SNAPSHOT", &snapshot)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap();
        assert!(out.status.success(), "measuring {n} ({place}): {}", String::from_utf8_lossy(&out.stderr));
        let m: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mode = |k: &str| {
            format!(
                "{:.0} / {:.0}",
                m["modes"][k]["p50"].as_f64().unwrap(),
                m["modes"][k]["p99"].as_f64().unwrap()
            )
        };
        let opened = match m["restored"].as_bool().unwrap() {
            true => "snapshot".to_string(),
            false => format!("tables (a save: {:.1} s)", m["save_s"].as_f64().unwrap()),
        };
        println!(
            "| {} | {place} | {} ({:.0} MiB) | {write_s:.0} | {stored_mib:.0} MiB | {opened} | {:.2} | {:.0} MiB | {:.0} / {:.0} MiB | {} | {} | {} | {:.0} / {:.0} | {:.0} |",
            m["chunks"],
            if m["exact_vectors"].as_bool().unwrap() { "f32" } else { "int8" },
            m["vector_mib"].as_f64().unwrap(),
            m["open_s"].as_f64().unwrap(),
            m["rss_open_mib"].as_f64().unwrap(),
            m["rss_total_mib"].as_f64().unwrap(),
            m["hwm_mib"].as_f64().unwrap(),
            mode("fast"),
            mode("balanced"),
            mode("thorough"),
            m["commit_p50_ms"].as_f64().unwrap(),
            m["commit_max_ms"].as_f64().unwrap(),
            m["tables_p50_ms"].as_f64().unwrap(),
        );
        let key = format!(
            "{n}.{}.{}{}",
            if place == "local" { "local" } else { "s3" },
            if m["exact_vectors"].as_bool().unwrap() { "f32" } else { "int8" },
            if m["restored"].as_bool().unwrap() { ".reopened" } else { "" }
        );
        let figure = |k: &str| m[k].as_f64().unwrap();
        figures.add(&format!("{key}.open_s"), figure("open_s"), "s", Better::Lower);
        figures.add(&format!("{key}.rss_total_mib"), figure("rss_total_mib"), "MiB", Better::Lower);
        figures.add(&format!("{key}.peak_rss_mib"), figure("hwm_mib"), "MiB", Better::Lower);
        for mode in ["fast", "balanced", "thorough"] {
            for q in ["p50", "p99"] {
                let ms = m["modes"][mode][q].as_f64().unwrap();
                figures.add(&format!("{key}.{mode}_{q}_ms"), ms, "ms", Better::Lower);
            }
        }
        figures.add(&format!("{key}.commit_p50_ms"), figure("commit_p50_ms"), "ms", Better::Lower);
        // Where the source's memory goes (estimated by the index itself), below the table.
        let held = if limit >= n { "exact vectors".to_string() } else { format!("int8 past {limit} chunks") };
        eprintln!("  {n} ({place}, {held}): MiB by part {}", m["parts_mib"]);
        eprintln!(
            "  {n} ({place}, {held}): commits {} ms, of which the tables {} ms",
            m["commit_ms"], m["tables_ms"]
        );
    }
}
