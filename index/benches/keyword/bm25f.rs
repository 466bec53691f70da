//! tantivy under BM25F, the keyword arm's own scoring (heading and text apart, one
//! saturation): tantivy holds the postings of two fields and this bench's scorer reads them;
//! then it is edited as the writer edits the hand index.

use crate::plain::reader;
use crate::{Report, TOP, chunks, dir_mib, ms, percentile, queries, rss_mib};
use cairn_index::resident::keyword::top_k;
use cairn_index::resident::terms;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Instant;
use tantivy::directory::{Directory, RamDirectory};
use tantivy::index::SegmentId;
use tantivy::postings::{Postings, SegmentPostings};
use tantivy::schema::{FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions};
use tantivy::tokenizer::{TextAnalyzer, WhitespaceTokenizer};
use tantivy::{DocSet, Index, IndexReader, IndexWriter, TERMINATED, Term, doc};

/// A chunk's search text split as the resident index splits it: the heading path's terms, and
/// the text's.
pub(crate) fn fields(text: &str) -> (Vec<String>, Vec<String>) {
    let body = cairn_ingest::chunk::without_heading_path(text);
    let head = &text[..text.len() - body.len()];
    (terms(head), terms(body))
}

/// tantivy holding the same two fields' postings (the terms the hand index reads, frequencies,
/// no field norms: BM25F needs each field's exact length, stored as fast fields and held by
/// chunk), scored by the same BM25F: tantivy's own scorers saturate each field apart, so its
/// block-max pruning does not apply, and every posting of a query term is read.
fn schema_f() -> Schema {
    let mut b = Schema::builder();
    let indexing = TextFieldIndexing::default()
        .set_tokenizer("terms")
        .set_index_option(IndexRecordOption::WithFreqs)
        .set_fieldnorms(false);
    for field in ["head", "body"] {
        b.add_text_field(field, TextOptions::default().set_indexing_options(indexing.clone()));
    }
    b.add_u64_field("chunk", FAST | INDEXED);
    for field in ["head_len", "len"] {
        b.add_u64_field(field, FAST);
    }
    b.build()
}

/// Fill `index` with every chunk (one indexing thread, as the hand index has).
fn tantivy_f_fill(work: &Path, index: &Index) {
    index.tokenizers().register("terms", TextAnalyzer::from(WhitespaceTokenizer::default()));
    let mut writer: IndexWriter = index.writer_with_num_threads(1, 200_000_000).expect("a writer");
    let mut engine = TantivyF::empty(index);
    for (i, text) in chunks(work).enumerate() {
        let (h, b) = fields(&text);
        engine.add(&mut writer, i, &h, &b);
    }
    writer.commit().expect("a commit");
    writer.wait_merging_threads().expect("merges done");
}

pub(crate) fn tantivy_f_build(work: &Path) -> Report {
    let mut r = Report::default();
    let dir = work.join("tantivy-f");
    std::fs::create_dir_all(&dir).expect("the index directory");
    let (rss0, t) = (rss_mib(), Instant::now());
    tantivy_f_fill(work, &Index::create_in_dir(&dir, schema_f()).expect("an index"));
    r.figure("build ms", ms(t));
    r.figure("built RSS added MiB", rss_mib() - rss0);
    r.figure("on disk MiB", dir_mib(&dir));
    // A copy for the in-memory engine (the mmap engine's edits change this one).
    let copy = work.join("tantivy-f-files");
    std::fs::create_dir_all(&copy).expect("the copy's directory");
    // Not its lock files: those are the running writer's.
    let files = std::fs::read_dir(&dir).expect("the index").flatten();
    for file in files.filter(|f| !f.file_name().to_string_lossy().ends_with(".lock")) {
        std::fs::copy(file.path(), copy.join(file.file_name())).expect("a file copied");
    }
    r
}

/// tantivy holding the keyword arm's postings as the product would: documents found by chunk
/// number (the resident index's slot), each chunk's two lengths and their totals kept beside.
struct TantivyF {
    reader: IndexReader,
    head: Field,
    body: Field,
    chunk: Field,
    /// Per segment: its documents' chunk numbers.
    slots: HashMap<SegmentId, Vec<u32>>,
    /// By chunk: heading length, length (0 once removed).
    lens: Vec<(u32, u32)>,
    docs: usize,
    total_head: u64,
    total: u64,
}

impl TantivyF {
    fn empty(index: &Index) -> Self {
        let schema = index.schema();
        let field = |n: &str| schema.get_field(n).expect("a field");
        TantivyF {
            reader: reader(index),
            head: field("head"),
            body: field("body"),
            chunk: field("chunk"),
            slots: HashMap::new(),
            lens: Vec::new(),
            docs: 0,
            total_head: 0,
            total: 0,
        }
    }

    fn open(index: &Index) -> Self {
        let mut t = Self::empty(index);
        for s in t.reader.searcher().segment_readers() {
            let col = |n: &str| s.fast_fields().u64(n).expect("a fast field");
            let (c, h, l) = (col("chunk"), col("head_len"), col("len"));
            for d in (0..s.max_doc()).filter(|d| s.alive_bitset().is_none_or(|a| a.is_alive(*d))) {
                let (c, h, l) =
                    (c.first(d).unwrap_or(0) as usize, h.first(d).unwrap_or(0), l.first(d).unwrap_or(0));
                t.set(c, h as u32, l as u32);
            }
        }
        t.refresh();
        t
    }

    fn set(&mut self, chunk: usize, head: u32, len: u32) {
        if self.lens.len() <= chunk {
            self.lens.resize(chunk + 1, (0, 0));
        }
        self.lens[chunk] = (head, len);
        self.docs += 1;
        self.total_head += u64::from(head);
        self.total += u64::from(len);
    }

    /// Reload the reader after a commit, reading the chunk numbers of segments it has not seen.
    fn refresh(&mut self) {
        self.reader.reload().expect("a reload");
        let searcher = self.reader.searcher();
        let live: HashSet<SegmentId> = searcher.segment_readers().iter().map(|s| s.segment_id()).collect();
        self.slots.retain(|id, _| live.contains(id));
        for s in searcher.segment_readers() {
            self.slots.entry(s.segment_id()).or_insert_with(|| {
                let c = s.fast_fields().u64("chunk").expect("the chunk numbers");
                (0..s.max_doc()).map(|d| c.first(d).unwrap_or(0) as u32).collect()
            });
        }
    }

    fn add(&mut self, writer: &mut IndexWriter, chunk: usize, head: &[String], body: &[String]) {
        let (h, l) = (head.len() as u64, (head.len() + body.len()) as u64);
        let schema = self.reader.searcher().schema().clone();
        let f = |n: &str| schema.get_field(n).expect("a field");
        writer
            .add_document(
                doc!(self.head => head.join(" "), self.body => body.join(" "), self.chunk => chunk as u64,
                f("head_len") => h, f("len") => l),
            )
            .expect("a document added");
        self.set(chunk, h as u32, l as u32);
    }

    fn remove(&mut self, writer: &mut IndexWriter, chunk: usize) {
        writer.delete_term(Term::from_field_u64(self.chunk, chunk as u64));
        let (h, l) = std::mem::take(&mut self.lens[chunk]);
        self.docs -= 1;
        self.total_head -= u64::from(h);
        self.total -= u64::from(l);
    }

    fn search(&self, q: &str) -> Vec<u64> {
        let mut words = terms(q);
        words.sort();
        words.dedup();
        let searcher = self.reader.searcher();
        let n = self.docs as f32;
        let norm = BmfNorm::new(n, self.total_head as f32, self.total as f32);
        let mut acc = vec![0f32; self.lens.len()];
        let mut touched = Vec::new();
        for w in &words {
            // Per segment, the term's (chunk, heading count, body count), live documents only.
            let lists: Vec<Vec<(u32, u32, u32)>> = searcher
                .segment_readers()
                .iter()
                .map(|s| {
                    let read = |f: Field| {
                        s.inverted_index(f)
                            .expect("an inverted index")
                            .read_postings(&Term::from_field_text(f, w), IndexRecordOption::WithFreqs)
                            .expect("postings")
                    };
                    let slots = &self.slots[&s.segment_id()];
                    let mut list = merged(read(self.head), read(self.body));
                    list.retain(|(d, _, _)| s.alive_bitset().is_none_or(|a| a.is_alive(*d)));
                    list.iter_mut().for_each(|p| p.0 = slots[p.0 as usize]);
                    list
                })
                .collect();
            let df = lists.iter().map(Vec::len).sum::<usize>() as f32;
            if df == 0.0 {
                continue;
            }
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for &(chunk, h, b) in lists.iter().flatten() {
                let (hl, l) = self.lens[chunk as usize];
                let tf = norm.tf(h.min(3) as f32, b as f32, hl, l);
                let a = &mut acc[chunk as usize];
                if *a == 0.0 {
                    touched.push(chunk);
                }
                *a += idf * (1.2 + 1.0) * tf / (tf + 1.2);
            }
        }
        let scored = touched.into_iter().map(|d| (acc[d as usize], d)).collect();
        top_k(scored, TOP, |d| *d).into_iter().map(|(_, d)| u64::from(d)).collect()
    }
}

/// Edits as the writer applies them: `EDIT_BATCHES` batches, each taking `EDIT_CHUNKS` chunks out
/// and putting their text back as new chunks, each batch made searchable before the next;
/// `apply` does one batch (chunks out, chunks in with their text) and reports nothing.
pub(crate) const EDIT_BATCHES: usize = 200;
pub(crate) const EDIT_CHUNKS: usize = 5;

pub(crate) fn edits(r: &mut Report, work: &Path, mut apply: impl FnMut(&[usize], &[(usize, String)])) {
    let texts: Vec<String> = chunks(work).collect();
    let mut next = texts.len();
    let mut times = Vec::new();
    for batch in 0..EDIT_BATCHES {
        // Spread over the vault, each chunk at most once.
        let out: Vec<usize> =
            (0..EDIT_CHUNKS).map(|i| (batch * EDIT_CHUNKS + i) * 7919 % texts.len()).collect();
        // Their text back as new chunks, numbered on from the last.
        let put: Vec<(usize, String)> = out.iter().zip(next..).map(|(&c, n)| (n, texts[c].clone())).collect();
        next += put.len();
        let t = Instant::now();
        apply(&out, &put);
        times.push(ms(t));
    }
    r.figure("edit batch p50 ms", percentile(times.clone(), 0.5));
    r.figure("edit batch p99 ms", percentile(times, 0.99));
}

pub(crate) fn tantivy_f_open(work: &Path) -> Report {
    let (rss0, t) = (rss_mib(), Instant::now());
    let index = Index::open_in_dir(work.join("tantivy-f")).expect("the index");
    index.tokenizers().register("terms", TextAnalyzer::from(WhitespaceTokenizer::default()));
    tantivy_f_serve(work, &index, rss0, t)
}

/// The files of the index built in `tantivy-f` read into memory, as a snapshot would bring it
/// back to be held, then served from there.
pub(crate) fn tantivy_f_ram(work: &Path) -> Report {
    let (rss0, t) = (rss_mib(), Instant::now());
    let ram = RamDirectory::create();
    for file in std::fs::read_dir(work.join("tantivy-f-files")).expect("the index's files").flatten() {
        let bytes = std::fs::read(file.path()).expect("a file");
        ram.atomic_write(Path::new(&file.file_name()), &bytes).expect("a file in memory");
    }
    let index = Index::open(ram).expect("the index");
    index.tokenizers().register("terms", TextAnalyzer::from(WhitespaceTokenizer::default()));
    tantivy_f_serve(work, &index, rss0, t)
}

/// Open the engine over `index` (the time from `t`), answer the queries, then the edits, then
/// the queries again; memory from `rss0`.
fn tantivy_f_serve(work: &Path, index: &Index, rss0: f64, t: Instant) -> Report {
    let mut r = Report::default();
    let queries = queries(work);
    let mut engine = TantivyF::open(index);
    r.figure("open ms", ms(t));
    r.run(&queries, |q| engine.search(q));
    r.figure("RSS added MiB", rss_mib() - rss0);
    let mut writer: IndexWriter = index.writer_with_num_threads(1, 15_000_000).expect("a writer");
    r.figure("RSS with a writer MiB", rss_mib() - rss0);
    edits(&mut r, work, |out, put| {
        out.iter().for_each(|&c| engine.remove(&mut writer, c));
        for (c, text) in put {
            let (h, b) = fields(text);
            engine.add(&mut writer, *c, &h, &b);
        }
        writer.commit().expect("a commit");
        engine.refresh();
    });
    r.run_as(&queries, " after edits", |q| engine.search(q));
    r
}

/// Two postings lists of one segment merged by document: (document, count in the first, count
/// in the second).
fn merged(a: Option<SegmentPostings>, b: Option<SegmentPostings>) -> Vec<(u32, u32, u32)> {
    let mut out = Vec::new();
    let (mut a, mut b) = (a.unwrap_or_else(SegmentPostings::empty), b.unwrap_or_else(SegmentPostings::empty));
    loop {
        let (da, db) = (a.doc(), b.doc());
        if da == TERMINATED && db == TERMINATED {
            return out;
        }
        if da == db {
            out.push((da, a.term_freq(), b.term_freq()));
            a.advance();
            b.advance();
        } else if da < db {
            out.push((da, a.term_freq(), 0));
            a.advance();
        } else {
            out.push((db, 0, b.term_freq()));
            b.advance();
        }
    }
}

/// The keyword arm's BM25F normalisation (`Fields::Apart`), from the index's totals.
struct BmfNorm {
    avg_head: f32,
    avg_body: f32,
    head_weight: f32,
}

impl BmfNorm {
    fn new(n: f32, total_head: f32, total: f32) -> Self {
        let avg = |t: f32| (t / n).max(f32::MIN_POSITIVE);
        let (avg_head, avg_body) = (avg(total_head), avg(total - total_head));
        Self { avg_head, avg_body, head_weight: (avg_body / avg_head).max(1.0) }
    }

    fn tf(&self, in_head: f32, in_body: f32, head: u32, len: u32) -> f32 {
        let norm = |len: u32, avg: f32| 1.0 - 0.75 + 0.75 * len as f32 / avg;
        let head_part =
            if in_head > 0.0 { self.head_weight * in_head / norm(head, self.avg_head) } else { 0.0 };
        let body_part = if in_body > 0.0 { in_body / norm(len - head, self.avg_body) } else { 0.0 };
        head_part + body_part
    }
}
