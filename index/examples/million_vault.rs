//! A vault of a million chunks of GCIDE text, and its database, for issue 30's 1M figures through
//! a running owner (`scripts/bench/million`).
//!
//! `million_vault GCIDE_VAULT GCIDE_DB OUT [CHUNKS]` writes `OUT/vault` and `OUT/db`:
//! - **Pages.** Every page of the GCIDE vault (its headword the title, its definition first, as
//!   `scripts/bench/gcide-vault` wrote it), followed by sections that each join the definitions
//!   of two other entries drawn at random (seeded) under a heading naming both; each page gets
//!   as many as brings the vault to CHUNKS chunks (default 1,000,000) as cairn chunks it. Every
//!   chunk's text is real dictionary text.
//! - **Vectors.** A million chunks cannot be embedded on this machine (the 150k of GCIDE take an
//!   hour): a chunk of the page's own definition gets the real vector the GCIDE database of a
//!   finished run holds for that text (`CAIRN_BENCH_KEEP` of `scripts/bench/gcide`); a chunk of
//!   an appended section gets the normalised sum of the real vectors of the two entries it joins
//!   (the model pools token vectors by their mean, so a text made of two is near the mean of
//!   their vectors). A sample is checked against the real model.
//! - **The database** is written through cairn's own commit path, source `gcide`, each page as
//!   the owner's reader would parse it (the scan's slugs, the file's size and time), so an owner
//!   started on `OUT/vault` finds every page up to date and reads none again.

use arrow_array::{Array, FixedSizeListArray, Float32Array, RecordBatch, StringArray};
use cairn_index::{Database, Embedder, Manifest, OrtEmbedder, OrtOptions, PageWrite, SourceInfo, WriteBatch};
use cairn_ingest::{ParseOptions, ParsedPage, PathFilter, ScanOptions, parse_page, scan};
use futures::TryStreamExt;
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

const SOURCE: &str = "gcide";
/// Pages per commit while the database is written.
const PAGES_PER_COMMIT: usize = 1000;

/// A deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        ((self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) % n as u64) as usize
    }
}

/// One GCIDE page: its file, title, definition (the body under its `# title` line) and the real
/// vector of its first chunk.
struct Entry {
    rel: PathBuf,
    text: String,
    title: String,
    definition: String,
    vector: Option<Vec<f32>>,
}

fn definition(page: &ParsedPage, text: &str) -> String {
    let body = text.strip_prefix("---\n").and_then(|t| t.split_once("\n---\n")).map_or(text, |(_, b)| b);
    let heading = format!("# {}", page.title);
    let body = body.trim_start().strip_prefix(heading.as_str()).unwrap_or(body);
    body.trim().to_string()
}

fn normalised(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
    v
}

fn sum(vectors: &[&[f32]]) -> Vec<f32> {
    let mut out = vec![0.0; vectors[0].len()];
    for v in vectors {
        out.iter_mut().zip(v.iter()).for_each(|(o, x)| *o += x);
    }
    normalised(out)
}

/// text hash → vector, for every chunk of the finished GCIDE database.
async fn real_vectors(db: &str) -> HashMap<String, Vec<f32>> {
    let conn = lancedb::connect(db).execute().await.expect("the GCIDE database opens");
    let table = conn.open_table(format!("{SOURCE}_chunks")).execute().await.expect("its chunks table");
    let query = table.query().select(Select::columns(&["text_hash", "vector"]));
    let batches: Vec<RecordBatch> =
        query.execute().await.expect("a scan").try_collect().await.expect("the rows");
    let mut out = HashMap::new();
    for b in batches {
        let hashes = b.column_by_name("text_hash").expect("text_hash");
        let hashes = hashes.as_any().downcast_ref::<StringArray>().expect("string hashes");
        let list = b.column_by_name("vector").expect("vector");
        let list = list.as_any().downcast_ref::<FixedSizeListArray>().expect("fixed-size vectors");
        for i in 0..b.num_rows() {
            if list.is_null(i) {
                continue;
            }
            let v = list.value(i);
            let v = v.as_any().downcast_ref::<Float32Array>().expect("f32 vectors");
            out.insert(hashes.value(i).to_string(), v.values().to_vec());
        }
    }
    out
}

/// The GCIDE pages, with the real vector of each one's first chunk where the database has it.
fn entries(vault: &Path, vectors: &HashMap<String, Vec<f32>>) -> Vec<Entry> {
    let report =
        scan(vault, &PathFilter::new(&ScanOptions::default()).unwrap()).expect("the GCIDE vault scans");
    let mut out = Vec::new();
    for f in report.files {
        let text = std::fs::read_to_string(vault.join(&f.rel)).expect("a GCIDE page reads");
        let Ok(page) = parse_page(SOURCE, &f.rel, text.as_bytes(), &ParseOptions::default()) else {
            continue;
        };
        let vector = page.chunks.first().and_then(|c| vectors.get(&c.text_hash)).cloned();
        let (title, definition) = (page.title.clone(), definition(&page, &text));
        out.push(Entry { rel: f.rel, text, title, definition, vector });
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

/// Page `i`'s file: its own text, then `sections` appended pairs; with the first line of each
/// appended section and the pair it joins.
fn compose(
    entries: &[Entry],
    donors: &[usize],
    i: usize,
    sections: usize,
    rng: &mut Rng,
) -> (String, Vec<(u32, [usize; 2])>) {
    let mut text = entries[i].text.trim_end().to_string();
    text.push('\n');
    let mut starts = Vec::new();
    for _ in 0..sections {
        let pair = [donors[rng.below(donors.len())], donors[rng.below(donors.len())]];
        let [a, b] = pair.map(|k| &entries[k]);
        text.push('\n');
        starts.push((text.lines().count() as u32 + 1, pair));
        text.push_str(&format!("## {}; {}\n\n{}\n\n{}\n", a.title, b.title, a.definition, b.definition));
    }
    (text, starts)
}

/// The vectors of a composed page's chunks: a chunk of the page's own text has its real vector
/// (by its text, else the page's first), a chunk of an appended section the pair's.
fn page_vectors(
    page: &ParsedPage,
    own: &Entry,
    starts: &[(u32, [usize; 2])],
    entries: &[Entry],
    real: &HashMap<String, Vec<f32>>,
) -> Vec<Option<Vec<f32>>> {
    let pair = |line: u32| starts.iter().rev().find(|(s, _)| *s <= line).map(|(_, p)| *p);
    let vectors: Vec<Option<Vec<f32>>> = page
        .chunks
        .iter()
        .map(|c| match pair(c.line_start) {
            Some([a, b]) => {
                Some(sum(&[entries[a].vector.as_deref().unwrap(), entries[b].vector.as_deref().unwrap()]))
            }
            None => real.get(&c.text_hash).cloned().or_else(|| own.vector.clone()),
        })
        .collect();
    // A page whose own definition the database has no vector for (edited by a run): the mean
    // of its other chunks'.
    let known: Vec<&[f32]> = vectors.iter().flatten().map(Vec::as_slice).collect();
    let fallback = (!known.is_empty()).then(|| sum(&known));
    vectors.into_iter().map(|v| v.or_else(|| fallback.clone())).collect()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (gcide, kept, out) = match args.as_slice() {
        [_, v, d, o] | [_, v, d, o, _] => (PathBuf::from(v), d.clone(), PathBuf::from(o)),
        _ => panic!("usage: million_vault GCIDE_VAULT GCIDE_DB OUT [CHUNKS]"),
    };
    let target: usize = args.get(4).map_or(1_000_000, |n| n.parse().expect("CHUNKS: a number"));
    let started = Instant::now();
    let model = OrtEmbedder::open(OrtOptions::default()).expect("the real model loads");
    let real = real_vectors(&kept).await;
    let entries = entries(&gcide, &real);
    eprintln!(
        "{} GCIDE pages, {} real vectors ({:.0} s)",
        entries.len(),
        real.len(),
        started.elapsed().as_secs_f64()
    );
    check_vectors(&model, &entries);
    let donors: Vec<usize> = (0..entries.len())
        .filter(|&k| entries[k].vector.is_some() && !entries[k].definition.is_empty())
        .collect();

    // The files, each sized towards the target as the pages before it came out.
    let vault = out.join("vault");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut layout = Vec::with_capacity(entries.len());
    let mut chunks = 0usize;
    for i in 0..entries.len() {
        let own = parse_page(SOURCE, &entries[i].rel, entries[i].text.as_bytes(), &ParseOptions::default())
            .map_or(1, |p| p.chunks.len());
        let want = (target.saturating_sub(chunks)) as f64 / (entries.len() - i) as f64;
        let sections = (want - own as f64).round().max(0.0) as usize;
        let (text, starts) = compose(&entries, &donors, i, sections, &mut rng);
        let path = vault.join(&entries[i].rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        chunks += parse_page(SOURCE, &entries[i].rel, text.as_bytes(), &ParseOptions::default())
            .map_or(0, |p| p.chunks.len());
        layout.push(starts);
    }
    eprintln!("vault: {} pages, {chunks} chunks ({:.0} s)", entries.len(), started.elapsed().as_secs_f64());

    // The database, as the owner's reader would make it: the scan's slugs, sizes and times.
    let db = out.join("db");
    std::fs::create_dir_all(&db).unwrap();
    let database = Database::open(db.to_str().unwrap()).await.expect("the new database opens");
    let store =
        database.open_source(SOURCE, &Manifest::current(model.model_id(), model.dim())).await.unwrap();
    let root = vault.canonicalize().unwrap().display().to_string();
    store
        .register(&SourceInfo { id: SOURCE.into(), root: Some(root), include: vec![], exclude: vec![] })
        .await
        .unwrap();
    let report = scan(&vault, &PathFilter::new(&ScanOptions::default()).unwrap()).unwrap();
    let index: HashMap<&Path, usize> =
        entries.iter().enumerate().map(|(i, e)| (e.rel.as_path(), i)).collect();
    let holders: HashMap<&str, &Path> =
        report.files.iter().map(|f| (f.slug.as_str(), f.rel.as_path())).collect();
    let (mut written, mut batch) = (0usize, Vec::new());
    for (n, f) in report.files.iter().enumerate() {
        let i = index[f.rel.as_path()];
        let bytes = std::fs::read(vault.join(&f.rel)).unwrap();
        let mut page =
            parse_page(SOURCE, &f.rel, &bytes, &ParseOptions::default()).expect("a composed page parses");
        if page.slug != f.slug {
            let holder = holders.get(page.slug.as_str()).copied().unwrap_or(Path::new(""));
            page.take_slug(f.slug.clone(), holder);
        }
        let vectors = page_vectors(&page, &entries[i], &layout[i], &entries, &real);
        written += page.chunks.len();
        batch.push(PageWrite { page, vectors, mtime_ms: f.mtime_ms });
        if batch.len() == PAGES_PER_COMMIT {
            store.write(&WriteBatch { upserts: std::mem::take(&mut batch), removals: vec![] }).await.unwrap();
            if (n + 1) % (20 * PAGES_PER_COMMIT) == 0 {
                eprintln!("  {written} chunks written ({:.0} s)", started.elapsed().as_secs_f64());
            }
        }
    }
    store.write(&WriteBatch { upserts: batch, removals: vec![] }).await.unwrap();
    store.optimize().await.unwrap();
    store.prune(std::time::Duration::ZERO, true).await.unwrap();
    eprintln!(
        "database: {written} chunks of {} pages ({:.0} s)",
        report.files.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The stored vectors are the real model's: a sample of first chunks embedded again agrees.
fn check_vectors(model: &OrtEmbedder, entries: &[Entry]) {
    let sample: Vec<&Entry> = entries.iter().filter(|e| e.vector.is_some()).step_by(9973).take(8).collect();
    for e in sample {
        let page = parse_page(SOURCE, &e.rel, e.text.as_bytes(), &ParseOptions::default()).unwrap();
        let fresh = model.embed_documents(&[page.chunks[0].embed_text().as_str()]).unwrap().vectors.remove(0);
        let cos = cairn_index::cosine(&fresh, e.vector.as_deref().unwrap());
        assert!(
            cos > 0.99,
            "{}: the database's vector is not this model's (cosine {cos:.3})",
            e.rel.display()
        );
    }
}
