//! A source held in memory for reading: its pages, its chunks with their vectors, BM25 inverted
//! indexes over chunk text and over page names, and the exact-name map. LanceDB stays the store
//! of record: a resident index is loaded from a source's tables once, then kept current by
//! applying every batch the writer commits ([`Resident::apply`]) and every set of vectors it
//! attaches later ([`Resident::apply_vectors`]). A chunk without a vector yet is found by the
//! keyword and name arms, not by the vector arm, and counts as pending.
//!
//! Why: each LanceDB read costs tens of milliseconds here (its full-text search alone 67 ms over
//! three sources; BENCHMARKS.md), far above a 20 ms query budget, while the same work in memory
//! over FOLDOC (14k chunks) takes about a millisecond. Text is tokenised exactly as LanceDB's
//! full-text index does (its own tokenizer crate with LanceDB's defaults: simple split, tokens
//! over 40 bytes dropped, lowercase, English stemming, English stop words, ASCII folding), and
//! scored with the same BM25 (k1 1.2, b 0.75, idf ln(1 + (N − n + ½)/(n + ½))); vectors are
//! scored by exact cosine, as LanceDB does below its vector-index threshold.

mod chunk_file;
mod keys;
mod postings;
pub mod snapshot;

pub use snapshot::Stamp;

use chunk_file::{ChunkFile, NOWHERE};
use keys::{Key, SlotsBy};
use postings::Postings;

use crate::store::{ChunkHit, Json, Loaded, PageRecord, PageState, StoredChunk, WriteBatch};
use crate::vectors::{Vectors, dot, unit};
use cairn_ingest::chunk::PATH_SEPARATOR;
use cairn_ingest::{ParsedPage, normalize_name};
use lance_tokenizer::{
    AsciiFoldingFilter, Language, LowerCaser, RemoveLongFilter, SimpleTokenizer, Stemmer, StopWordFilter,
    TextAnalyzer,
};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

const K1: f32 = 1.2;
const B: f32 = 0.75;

fn analyzer() -> TextAnalyzer {
    let mut b = TextAnalyzer::builder(SimpleTokenizer::default())
        .dynamic()
        .filter_dynamic(RemoveLongFilter::limit(40))
        .filter_dynamic(LowerCaser)
        .filter_dynamic(Stemmer::new(Language::English));
    if let Some(stop) = StopWordFilter::new(Language::English) {
        b = b.filter_dynamic(stop);
    }
    b.filter_dynamic(AsciiFoldingFilter).build()
}

thread_local! {
    static ANALYZER: std::cell::RefCell<TextAnalyzer> = std::cell::RefCell::new(analyzer());
    static STOP: std::cell::RefCell<TextAnalyzer> = std::cell::RefCell::new({
        let b = TextAnalyzer::builder(SimpleTokenizer::default()).dynamic().filter_dynamic(LowerCaser);
        match StopWordFilter::new(Language::English) {
            Some(stop) => b.filter_dynamic(stop).build(),
            None => b.build(),
        }
    });
}

/// Whether a word is one of the English stop words the keyword arm (LanceDB's tokenizer)
/// leaves out.
pub fn is_stop_word(word: &str) -> bool {
    STOP.with(|a| {
        let mut a = a.borrow_mut();
        let mut kept = false;
        a.token_stream(word).process(&mut |_| kept = true);
        !kept
    })
}

/// The hash of a page's body: its chunks' text without heading lines, words lower-cased and
/// joined by single spaces (two pages with this equal say the same thing beyond their names).
/// SHA-256, not std's hasher: it is saved in snapshots, so it must not change with the compiler.
fn body_hash(chunks: &[PreparedChunk]) -> u64 {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for c in chunks {
        for line in c.hit.text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            for w in line.split_whitespace() {
                h.update(w.to_lowercase().as_bytes());
                h.update(b" ");
            }
        }
    }
    let digest = h.finalize();
    u64::from_le_bytes(digest[..8].try_into().expect("a SHA-256 digest has 8 bytes and more"))
}

/// The terms of a text, as LanceDB's full-text index sees them.
pub fn terms(text: &str) -> Vec<String> {
    ANALYZER.with(|a| {
        let mut a = a.borrow_mut();
        let mut out = Vec::new();
        a.token_stream(text).process(&mut |t| out.push(t.text.clone()));
        out
    })
}

/// A page's file name without its folder and extension (`meetings/Standup 2024-05-01.md` →
/// `Standup 2024-05-01`): one of its names.
pub fn file_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.strip_suffix(".md").or_else(|| base.strip_suffix(".markdown")).unwrap_or(base);
    stem.to_string()
}

/// What the title arm searches: the title and every alias.
pub fn names_text(title: &str, aliases: &[String]) -> String {
    std::iter::once(title).chain(aliases.iter().map(String::as_str)).collect::<Vec<_>>().join("\n")
}

/// BM25 over documents identified by small integers (slots owned by the caller).
///
/// A removed document is only marked (its length set to 0) and skipped when scoring: its postings
/// go at the next [`Bm25::purge`], after which its slot may be reused. Keeping each document's
/// terms to take it out at once would cost a quarter more memory, and finding it in every one of
/// its terms' lists costs a scan of each list per removal.
#[derive(Debug, Default)]
struct Bm25 {
    term_ids: HashMap<Box<str>, u32>,
    postings: Vec<Postings>,
    /// Per document: its length in terms (0 once removed).
    doc_len: Vec<u32>,
    /// Documents removed since the last purge (their postings are still in the lists).
    removed: Vec<u32>,
    docs: usize,
    total_len: u64,
}

impl Bm25 {
    /// Index a document; its slot must be new or freed by [`Bm25::purge`].
    fn insert(&mut self, doc: u32, terms: &[String]) {
        let d = doc as usize;
        if self.doc_len.len() <= d {
            self.doc_len.resize(d + 1, 0);
        }
        let mut tf: HashMap<u32, u32> = HashMap::new();
        for t in terms {
            let id = match self.term_ids.get(t.as_str()) {
                Some(&id) => id,
                None => {
                    let id = self.postings.len() as u32;
                    self.term_ids.insert(t.as_str().into(), id);
                    self.postings.push(Postings::default());
                    id
                }
            };
            *tf.entry(id).or_default() += 1;
        }
        for (t, n) in tf {
            self.postings[t as usize].push(doc, n);
        }
        // A document without terms has no postings to skip, so its length can stay 0.
        self.doc_len[d] = terms.len() as u32;
        self.docs += 1;
        self.total_len += terms.len() as u64;
    }

    fn remove(&mut self, doc: u32) {
        let d = doc as usize;
        self.total_len -= self.doc_len[d] as u64;
        self.doc_len[d] = 0;
        self.docs -= 1;
        self.removed.push(doc);
    }

    /// Whether enough documents were removed to make a purge worth its pass over every list:
    /// an eighth of those held (so lists hold at most that much dead weight), and at least 1,024.
    fn purge_due(&self) -> bool {
        self.removed.len() >= (self.docs / 8).max(1024)
    }

    /// Drop the postings of removed documents, and the terms no document holds any more (the
    /// vocabulary shrinks as the notes do), returning the removed documents' slots (free to
    /// reuse now).
    fn purge(&mut self) -> Vec<u32> {
        if self.removed.is_empty() {
            return Vec::new();
        }
        let mut gone = vec![false; self.doc_len.len()];
        for &d in &self.removed {
            gone[d as usize] = true;
        }
        for list in &mut self.postings {
            if list.iter().any(|(d, _)| gone[d as usize]) {
                list.retain(|d| !gone[d as usize]);
            }
        }
        // Terms renumbered in their order: ids are this index's own (a query looks terms up
        // by name).
        if self.postings.iter().any(Postings::is_empty) {
            let mut renumbered = Vec::with_capacity(self.postings.len());
            let mut kept = 0u32;
            for l in &self.postings {
                renumbered.push((!l.is_empty()).then(|| {
                    kept += 1;
                    kept - 1
                }));
            }
            self.term_ids.retain(|_, id| match renumbered[*id as usize] {
                Some(new) => {
                    *id = new;
                    true
                }
                None => false,
            });
            self.term_ids.shrink_to_fit();
            self.postings.retain(|l| !l.is_empty());
            self.postings.shrink_to_fit();
        }
        std::mem::take(&mut self.removed)
    }

    /// Give back the room lists grew into (after a load, when they stop growing for a while).
    fn shrink(&mut self) {
        self.postings.iter_mut().for_each(Postings::shrink);
    }

    /// Bytes held (an estimate: lists and term names, not the hash table's own slack).
    fn bytes(&self) -> usize {
        let lists: usize = self.postings.iter().map(Postings::capacity).sum();
        let names: usize = self.term_ids.keys().map(|t| t.len() + 16 + 4 + 8).sum();
        lists
            + names
            + self.postings.capacity() * std::mem::size_of::<Postings>()
            + self.doc_len.capacity() * 4
    }

    /// Every document holding a query term, with its score (unordered).
    fn scores(&self, query: &[String]) -> Vec<(u32, f32)> {
        if self.docs == 0 {
            return Vec::new();
        }
        let n = self.docs as f32;
        let avg = (self.total_len as f32 / n).max(f32::MIN_POSITIVE);
        // Each distinct term once, in text order, so the sums do not depend on insertion order.
        let mut query: Vec<&String> = query.iter().collect();
        query.sort();
        query.dedup();
        let lists = query
            .into_iter()
            .filter_map(|t| self.term_ids.get(t.as_str()))
            .map(|&t| &self.postings[t as usize]);
        // Sums in a dense array: a hash map entry per posting was most of a query's time over a
        // million chunks, where common terms hold a fifth of them.
        let mut acc: Vec<f32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        for list in lists {
            let df = list.iter().filter(|(d, _)| self.doc_len[*d as usize] != 0).count() as f32;
            if df == 0.0 {
                continue;
            }
            if acc.is_empty() {
                acc = vec![0.0; self.doc_len.len()];
            }
            let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for (doc, tf) in list.iter() {
                let len = self.doc_len[doc as usize];
                if len == 0 {
                    continue;
                }
                let (tf, len) = (tf as f32, len as f32);
                let s = idf * (K1 + 1.0) * tf / (tf + K1 * (1.0 - B + B * len / avg));
                let a = &mut acc[doc as usize];
                if *a == 0.0 {
                    touched.push(doc);
                }
                *a += s;
            }
        }
        touched.into_iter().map(|d| (d, acc[d as usize])).collect()
    }
}

/// The best `k` of `scored`, best first; ties by `key` (ascending) so answers are stable.
fn top_k<T, K: Ord>(mut scored: Vec<(f32, T)>, k: usize, key: impl Fn(&T) -> K) -> Vec<(f32, T)> {
    let order = |a: &(f32, T), b: &(f32, T)| b.0.total_cmp(&a.0).then_with(|| key(&a.1).cmp(&key(&b.1)));
    if k == 0 {
        return Vec::new();
    }
    if scored.len() > k {
        scored.select_nth_unstable_by(k - 1, order);
        scored.truncate(k);
    }
    scored.sort_by(order);
    scored
}

/// A chunk ready to go in: its hit (score 0), its tokenised search text, the hash of the text the
/// model embeds, and its unit vector once it has one.
#[derive(Debug, Clone)]
pub struct PreparedChunk {
    hit: ChunkHit,
    terms: Vec<String>,
    text_hash: String,
    vector: Option<Box<[f32]>>,
}

/// A page ready to go in.
#[derive(Debug, Clone)]
pub struct PreparedPage {
    record: PageRecord,
    names: Vec<String>,
    name_terms: Vec<String>,
    chunks: Vec<PreparedChunk>,
}

/// A committed batch, tokenised: the expensive half of applying it, done before any lock is taken.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    upserts: Vec<PreparedPage>,
    removals: Vec<String>,
}

impl PreparedPage {
    /// A stored page and its stored chunks.
    pub fn stored(record: PageRecord, chunks: Vec<StoredChunk>) -> Self {
        let mut names = vec![
            record.slug.clone(),
            normalize_name(&record.title),
            normalize_name(&file_name(&record.path)),
        ];
        names.extend(record.aliases.iter().map(|a| normalize_name(a)));
        let name_terms = terms(&names_text(&record.title, &record.aliases));
        let chunks = chunks
            .into_iter()
            .map(|c| PreparedChunk {
                terms: terms(&c.search_text),
                hit: c.hit,
                text_hash: c.text_hash,
                vector: c.vector.map(unit),
            })
            .collect();
        Self { record: PageRecord { score: 0.0, ..record }, names, name_terms, chunks }
    }

    fn parsed(page: &ParsedPage, vectors: &[Option<Vec<f32>>], mtime_ms: i64) -> Self {
        let record = PageRecord {
            slug: page.slug.clone(),
            path: page.path.clone(),
            title: page.title.clone(),
            aliases: page.aliases.clone(),
            tags: page.tags.clone(),
            page_type: page.page_type.clone(),
            frontmatter: Json::of(&page.frontmatter),
            links: Json::of(&page.links),
            content_hash: page.content_hash.clone(),
            mtime_ms,
            bytes: page.bytes as i64,
            chunk_count: page.chunks.len() as i32,
            problems: Json::of(&page.problems),
            score: 0.0,
            body_shared_by: 0,
        };
        let chunks = page
            .chunks
            .iter()
            .zip(vectors)
            .map(|(c, v)| {
                let hit = ChunkHit {
                    slug: page.slug.clone(),
                    chunk_id: c.id.clone(),
                    ordinal: c.ordinal as i32,
                    heading_path: c.heading_path.join(PATH_SEPARATOR),
                    text: c.text.clone(),
                    line_start: c.line_start as i32,
                    line_end: c.line_end as i32,
                    score: 0.0,
                };
                StoredChunk {
                    hit,
                    search_text: c.embed_text(),
                    text_hash: c.text_hash.clone(),
                    vector: v.clone(),
                }
            })
            .collect();
        Self::stored(record, chunks)
    }
}

impl Prepared {
    /// Tokenise a batch the writer has committed.
    pub fn batch(batch: &WriteBatch) -> Self {
        Self {
            upserts: batch
                .upserts
                .iter()
                .map(|w| PreparedPage::parsed(&w.page, &w.vectors, w.mtime_ms))
                .collect(),
            removals: batch.removals.clone(),
        }
    }

    /// Pages as they were read from storage.
    pub fn pages(upserts: Vec<PreparedPage>) -> Self {
        Self { upserts, removals: Vec::new() }
    }

    /// Pages read from storage, and slugs gone from it (what a reader applies of a writer's
    /// commit).
    pub fn delta(upserts: Vec<PreparedPage>, removals: Vec<String>) -> Self {
        Self { upserts, removals }
    }
}

/// A chunk slot's contents: its hit without page or score (the page is its page slot's), and
/// its text only while the text is needed in memory (see [`ResidentIndex::holds_text`]).
#[derive(Debug)]
struct Slot {
    chunk_id: Key,
    page: u32,
    ordinal: i32,
    heading_path: Box<str>,
    text: Option<Box<str>>,
    line_start: i32,
    line_end: i32,
    text_hash: Key,
    embedded: bool,
    /// Where its text and exact vector are in the chunk file ([`NOWHERE`] when they are not).
    at: u64,
}

#[derive(Debug)]
struct Page {
    record: PageRecord,
    doc: u32,
    chunks: Vec<u32>,
    names: Vec<String>,
    body: u64,
}

/// One source in memory.
#[derive(Debug, Default)]
pub struct ResidentIndex {
    pages: HashMap<String, Page>,
    /// Page slot → slug (the title arm's documents).
    page_slots: Vec<Option<String>>,
    free_pages: Vec<u32>,
    chunks: Vec<Option<Slot>>,
    free_chunks: Vec<u32>,
    /// Chunk id → slot (vectors arrive by chunk id).
    by_id: SlotsBy,
    /// Text hash → a slot with that text and a vector (a text is never embedded twice).
    by_text_hash: SlotsBy,
    /// Live chunks without a vector yet.
    unembedded: usize,
    /// Every chunk slot's unit vector (exact, or int8 codes past the source's limit).
    vectors: Vectors,
    chunk_text: Bm25,
    page_names: Bm25,
    /// Normalised name → the page slots of the pages it names (a set of slugs per name took a
    /// B-tree node each, ~140 MiB at a million chunks).
    by_name: HashMap<Box<str>, Vec<u32>>,
    /// Body hash → pages with that body.
    bodies: HashMap<u64, u32>,
    /// Where the chunk file goes, once there is something to put in it (past the limit), and
    /// the file (see [`chunk_file`]). Without one, what memory lacks is read from the tables.
    chunk_home: ChunkHome,
    file: Option<ChunkFile>,
}

/// Where a resident index makes its chunk file when it needs one.
#[derive(Debug, Default)]
enum ChunkHome {
    /// Nowhere: what memory lacks is read from the tables.
    #[default]
    Nowhere,
    /// Beside the source's snapshot, which names it.
    Beside(std::path::PathBuf),
    /// A temporary file with no name (a process that keeps no snapshot).
    Unnamed,
}

/// A held chunk slot's id, for [`SlotsBy`].
fn id_of<'a>(chunks: &'a [Option<Slot>]) -> impl Fn(u32) -> &'a Key {
    move |s| &chunks[s as usize].as_ref().expect("a held chunk slot").chunk_id
}

/// A held chunk slot's text hash, for [`SlotsBy`].
fn text_hash_of<'a>(chunks: &'a [Option<Slot>]) -> impl Fn(u32) -> &'a Key {
    move |s| &chunks[s as usize].as_ref().expect("a held chunk slot").text_hash
}

fn slot<T>(slots: &mut Vec<Option<T>>, free: &mut Vec<u32>, value: T) -> u32 {
    match free.pop() {
        Some(i) => {
            slots[i as usize] = Some(value);
            i
        }
        None => {
            slots.push(Some(value));
            (slots.len() - 1) as u32
        }
    }
}

impl ResidentIndex {
    /// An empty index whose vectors stay exact f32 while it holds at most `exact_up_to` of them,
    /// and are coded to int8 past that (the default index keeps them exact).
    pub fn with_exact_vectors_up_to(exact_up_to: usize) -> Self {
        Self { vectors: Vectors::new(exact_up_to), ..Self::default() }
    }

    pub fn apply(&mut self, batch: Prepared) {
        for s in &batch.removals {
            self.remove(s);
        }
        for p in batch.upserts {
            self.insert(p);
        }
        self.settle();
    }

    fn remove(&mut self, slug: &str) {
        let Some(page) = self.pages.remove(slug) else { return };
        for c in page.chunks {
            // The slot is freed by the next purge of the text index (see `Bm25`); its vector is
            // emptied now, so a scan of the codes passes it by.
            self.chunk_text.remove(c);
            self.put_vector(c, &[]);
            let Some((embedded, at)) = self.chunks[c as usize].as_ref().map(|s| (s.embedded, s.at)) else {
                continue;
            };
            if let Some(file) = self.file.as_mut().filter(|_| at != NOWHERE) {
                file.forget(at);
            }
            // Out of the maps while the slot still answers for its keys.
            self.by_id.remove(c, id_of(&self.chunks));
            self.by_text_hash.remove(c, text_hash_of(&self.chunks));
            self.chunks[c as usize] = None;
            self.unembedded -= usize::from(!embedded);
        }
        self.page_names.remove(page.doc);
        self.page_slots[page.doc as usize] = None;
        if let Some(n) = self.bodies.get_mut(&page.body) {
            *n -= 1;
            if *n == 0 {
                self.bodies.remove(&page.body);
            }
        }
        for n in page.names {
            if let Some(docs) = self.by_name.get_mut(n.as_str()) {
                docs.retain(|d| *d != page.doc);
                if docs.is_empty() {
                    self.by_name.remove(n.as_str());
                }
            }
        }
    }

    fn insert(&mut self, p: PreparedPage) {
        let slug = p.record.slug.clone();
        self.remove(&slug);
        let body = body_hash(&p.chunks);
        *self.bodies.entry(body).or_default() += 1;
        let doc = slot(&mut self.page_slots, &mut self.free_pages, slug.clone());
        self.page_names.insert(doc, &p.name_terms);
        let mut chunks = Vec::with_capacity(p.chunks.len());
        for c in p.chunks {
            let embedded = c.vector.is_some();
            let h = c.hit;
            let held = Slot {
                chunk_id: Key::new(&h.chunk_id),
                page: doc,
                ordinal: h.ordinal,
                heading_path: h.heading_path.into(),
                text: None,
                line_start: h.line_start,
                line_end: h.line_end,
                text_hash: Key::new(&c.text_hash),
                embedded,
                at: NOWHERE,
            };
            let id = slot(&mut self.chunks, &mut self.free_chunks, held);
            match (&c.vector, self.holds_text()) {
                (Some(v), false) => self.keep_stored(id, v, &h.text),
                _ => {
                    self.chunks[id as usize].as_mut().expect("the slot just filled").text =
                        Some(h.text.into())
                }
            }
            match &c.vector {
                Some(v) => {
                    self.put_vector(id, v);
                    self.by_text_hash.insert(id, text_hash_of(&self.chunks));
                }
                None => {
                    self.put_vector(id, &[]);
                    self.unembedded += 1;
                }
            }
            self.by_id.insert(id, id_of(&self.chunks));
            self.chunk_text.insert(id, &c.terms);
            chunks.push(id);
        }
        let mut names: Vec<String> = p.names.into_iter().filter(|n| !n.is_empty()).collect();
        names.sort();
        names.dedup();
        for n in &names {
            self.by_name.entry(n.as_str().into()).or_default().push(doc);
        }
        self.pages.insert(slug, Page { record: p.record, doc, chunks, names, body });
    }

    /// Vectors for chunks (by id) written without one; ids not held (replaced since) are skipped.
    pub fn apply_vectors(&mut self, vectors: &[(String, Vec<f32>)]) {
        for (id, v) in vectors {
            let Some(slot) = self.by_id.get(&Key::new(id), id_of(&self.chunks)) else { continue };
            let holds_text = self.holds_text();
            let Some(s) = self.chunks[slot as usize].as_mut() else { continue };
            if !s.embedded {
                s.embedded = true;
                self.unembedded -= 1;
            }
            let text = if holds_text { None } else { s.text.take() };
            let v = unit(v.clone());
            if let Some(text) = text {
                self.keep_stored(slot, &v, &text);
            }
            self.put_vector(slot, &v);
            self.by_text_hash.insert(slot, text_hash_of(&self.chunks));
        }
        self.settle();
    }

    /// The vector of a text (by its hash), if a chunk with that text has one and the vectors
    /// held are exact (int8 codes are not the model's vector: see [`ResidentIndex::has_vector`]).
    pub fn vector_of(&self, text_hash: &str) -> Option<Vec<f32>> {
        let slot = self.by_text_hash.get(&Key::new(text_hash), text_hash_of(&self.chunks))? as usize;
        (self.vectors.exact() && self.vectors.dim() > 0).then(|| self.vectors.get(slot).into_owned())
    }

    /// Whether a chunk with this text (by its hash) has a vector, which the store holds.
    pub fn has_vector(&self, text_hash: &str) -> bool {
        self.by_text_hash.get(&Key::new(text_hash), text_hash_of(&self.chunks)).is_some()
    }

    /// Whether the vectors held are exact (else int8 codes, whose candidates are re-scored from
    /// the stored vectors).
    pub fn exact_vectors(&self) -> bool {
        self.vectors.exact()
    }

    /// Bytes of vectors held.
    pub fn vector_bytes(&self) -> usize {
        self.vectors.bytes()
    }

    /// Whether chunk text is held in memory for every chunk. Only while vectors are exact: past
    /// its limit a source keeps the text of chunks still waiting for a vector (the model needs
    /// it) and reads the rest from the store for the chunks an answer returns (see
    /// [`Resident::keyword`]), as it reads their vectors to re-score int8 candidates. The text
    /// was the largest part of a big source's memory (about 1 KiB a chunk).
    fn holds_text(&self) -> bool {
        self.vectors.exact()
    }

    /// Code the vectors to int8 once the source holds more than its limit (and drop the text of
    /// chunks that have a vector), and free the slots of removed chunks and pages once enough
    /// of them wait.
    fn settle(&mut self) {
        let held = self.chunk_count() - self.unembedded;
        if self.vectors.codes_at(held) {
            // The last moment the exact vectors and the text are both here: into the chunk file.
            let embedded: Vec<u32> =
                (0..self.chunks.len() as u32).filter(|i| self.embedded(*i as usize)).collect();
            for i in embedded {
                let s = self.chunks[i as usize].as_mut().expect("an embedded slot");
                let text = s.text.take().unwrap_or_default();
                let v = self.vectors.get(i as usize).into_owned();
                self.keep_stored(i, &v, &text);
            }
        }
        self.vectors.settle(held);
        if let Some(file) = self.file.as_mut()
            && let Err(e) = file.flush()
        {
            self.lose_file(e);
        }
        if self.chunk_text.purge_due() {
            self.free_chunks.extend(self.chunk_text.purge());
        }
        if self.page_names.purge_due() {
            self.free_pages.extend(self.page_names.purge());
        }
    }

    /// Give back the room a load's growth left in the keyword index's lists.
    fn shrink(&mut self) {
        self.chunk_text.shrink();
        self.page_names.shrink();
    }

    /// Estimated bytes held, by part: (part, bytes), for the scale benchmark.
    pub fn bytes(&self) -> Vec<(&'static str, usize)> {
        let chunks: usize = self.chunks.capacity() * std::mem::size_of::<Option<Slot>>()
            + self
                .chunks
                .iter()
                .flatten()
                .map(|s| s.chunk_id.heap() + s.heading_path.len() + s.text_hash.heap())
                .sum::<usize>();
        let text: usize = self.chunks.iter().flatten().filter_map(|s| s.text.as_ref()).map(|t| t.len()).sum();
        let pages: usize = self
            .pages
            .iter()
            .map(|(slug, p)| {
                let r = &p.record;
                slug.len() * 2
                    + r.path.len()
                    + r.title.len()
                    + r.content_hash.len()
                    + r.aliases.iter().chain(&r.tags).chain(&p.names).map(|a| a.len() + 24).sum::<usize>()
                    + r.frontmatter.text().len()
                    + r.links.text().len()
                    + r.problems.text().len()
                    + p.chunks.capacity() * 4
                    + std::mem::size_of::<Page>()
                    + std::mem::size_of::<PageRecord>()
            })
            .sum();
        vec![
            ("chunk slots", chunks),
            ("chunk text", text),
            ("chunk ids and text hashes (maps)", self.by_id.bytes() + self.by_text_hash.bytes()),
            ("vectors", self.vectors.bytes()),
            ("keyword index", self.chunk_text.bytes()),
            ("pages", pages),
            ("page names index", self.page_names.bytes()),
        ]
    }

    /// Chunks without a vector yet: (chunk id, text hash, text the model embeds), by page.
    pub fn unembedded(&self) -> Vec<(String, String, String)> {
        let mut out: Vec<(String, String, String)> = self
            .chunks
            .iter()
            .flatten()
            .filter(|s| !s.embedded)
            .map(|s| (s.chunk_id.to_string(), s.text_hash.to_string(), self.embed_text(s)))
            .collect();
        out.sort();
        out
    }

    /// A chunk still waiting for its vector, by id: its page, text hash and the text the model
    /// embeds (`None` when the chunk is gone or already has one).
    pub fn waiting(&self, chunk_id: &str) -> Option<(String, String, String)> {
        let s = self.chunks[self.by_id.get(&Key::new(chunk_id), id_of(&self.chunks))? as usize].as_ref()?;
        (!s.embedded).then(|| (self.slug(s).to_string(), s.text_hash.to_string(), self.embed_text(s)))
    }

    /// The page a chunk slot belongs to.
    fn slug(&self, s: &Slot) -> &str {
        self.page_slots[s.page as usize].as_deref().unwrap_or("")
    }

    /// A chunk's hit (its text empty when the store holds it alone).
    fn slot_hit(&self, s: &Slot, score: f32) -> ChunkHit {
        ChunkHit {
            slug: self.slug(s).to_string(),
            chunk_id: s.chunk_id.to_string(),
            ordinal: s.ordinal,
            heading_path: s.heading_path.to_string(),
            text: s.text.as_deref().unwrap_or("").to_string(),
            line_start: s.line_start,
            line_end: s.line_end,
            score,
        }
    }

    /// The text the model embeds for a chunk waiting for its vector (which holds its text).
    fn embed_text(&self, s: &Slot) -> String {
        self.slot_hit(s, 0.0).embed_text()
    }

    /// How many live chunks have no vector yet.
    pub fn unembedded_count(&self) -> usize {
        self.unembedded
    }

    /// `v` (already unit length, or empty for "no vector yet") into a slot.
    fn put_vector(&mut self, slot: u32, v: &[f32]) {
        self.vectors.put(slot as usize, v, self.chunks.len());
    }

    /// Keep the chunk file beside the snapshot at `snapshot`, or in a temporary file with no
    /// name when `None` (made when first needed).
    pub fn keep_chunks_beside(&mut self, snapshot: Option<&std::path::Path>) {
        self.chunk_home = match snapshot {
            Some(s) => ChunkHome::Beside(chunk_file::path_beside(s)),
            None => ChunkHome::Unnamed,
        };
    }

    /// Put a chunk's exact vector and text, which memory is about to lose, in the chunk file
    /// (when the index keeps one).
    fn keep_stored(&mut self, slot: u32, v: &[f32], text: &str) {
        if self.file.is_none() {
            let path = match std::mem::take(&mut self.chunk_home) {
                ChunkHome::Nowhere => return,
                ChunkHome::Beside(path) => Some(path),
                ChunkHome::Unnamed => None,
            };
            match ChunkFile::create(path.as_deref()) {
                Ok(f) => self.file = Some(f),
                Err(e) => {
                    return tracing::warn!(
                        "the chunk file cannot be made ({e}); chunks are read from the tables"
                    );
                }
            }
        }
        let (Some(file), Some(s)) = (self.file.as_mut(), self.chunks[slot as usize].as_mut()) else { return };
        if s.at != NOWHERE {
            file.forget(s.at);
        }
        match file.append(&s.chunk_id.to_string(), v, text) {
            Ok(at) => s.at = at,
            Err(e) => self.lose_file(e),
        }
    }

    /// Move to `copy`, a compaction's copy of the chunk file: `moved` says
    /// each listed slot's record, where it was and where its copy is (`None`: no whole record
    /// was there). A slot whose record changed since it was listed points to its old file's
    /// record still, which is copied now. The new file's length; `None` when this index has no
    /// chunk file any more, or lost it here (a write failed: what it held is read from the
    /// tables).
    fn move_to(&mut self, mut copy: ChunkFile, moved: Vec<(u32, u64, Option<u64>)>) -> Option<u64> {
        let old = self.file.take()?;
        let (from, _, from_len) = match old.source() {
            Ok(s) => s,
            Err(e) => {
                self.lose_file(e);
                return None;
            }
        };
        let mut moved = moved.into_iter().peekable();
        let mut renumber = || -> std::io::Result<()> {
            for (i, s) in self.chunks.iter_mut().enumerate() {
                while moved.next_if(|(slot, ..)| (*slot as usize) < i).is_some() {}
                let Some(s) = s.as_mut().filter(|s| s.at != NOWHERE) else { continue };
                s.at = match moved.next_if(|(slot, ..)| *slot as usize == i) {
                    Some((_, at, to)) if at == s.at => to.unwrap_or(NOWHERE),
                    // Appended after the list was made: its record is copied now.
                    _ => copy.copy_record(&from, s.at, from_len)?.unwrap_or(NOWHERE),
                };
            }
            copy.take_place_of()
        };
        match renumber() {
            Ok(()) => {
                let len = copy.len();
                self.file = Some(copy);
                Some(len)
            }
            Err(e) => {
                self.lose_file(e);
                None
            }
        }
    }

    /// A chunk file that cannot be written is dropped: what it held is read from the tables.
    fn lose_file(&mut self, e: std::io::Error) {
        tracing::warn!(
            "the chunk file cannot be written ({e}); chunk text and vectors are read from the tables"
        );
        self.file = None;
    }

    /// The text and exact vector of chunks (by id) that the chunk file holds; the others are
    /// left out (for the caller to read from the tables).
    pub fn stored(&self, ids: &[&str]) -> HashMap<String, (String, Option<Vec<f32>>)> {
        let Some(file) = &self.file else { return HashMap::new() };
        ids.iter()
            .filter_map(|id| {
                let s = self.chunks[self.by_id.get(&Key::new(id), id_of(&self.chunks))? as usize].as_ref()?;
                let (text, v) = (s.at != NOWHERE).then(|| file.read(s.at, id))??;
                Some((id.to_string(), (text, Some(v))))
            })
            .collect()
    }

    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    pub fn chunk_count(&self) -> usize {
        self.chunks.len() - self.free_chunks.len() - self.chunk_text.removed.len()
    }

    fn hit(&self, slot: u32, score: f32) -> ChunkHit {
        self.slot_hit(self.chunks[slot as usize].as_ref().expect("a live chunk slot"), score)
    }

    /// A chunk's id, to order ties by (a removed slot's sorts first).
    fn chunk_id(&self, slot: u32) -> Option<&Key> {
        self.chunks[slot as usize].as_ref().map(|c| &c.chunk_id)
    }

    fn embedded(&self, slot: usize) -> bool {
        self.chunks.get(slot).and_then(Option::as_ref).is_some_and(|s| s.embedded)
    }

    /// Whether chunk `slot` belongs to a page `allow`ed (every page when `None`).
    fn allowed(&self, slot: usize, allow: Option<&std::collections::HashSet<String>>) -> bool {
        allow.is_none_or(|a| self.chunks[slot].as_ref().is_some_and(|c| a.contains(self.slug(c))))
    }

    /// The slugs of the pages `keep` says yes to.
    pub fn slugs_where(&self, keep: impl Fn(&PageRecord) -> bool) -> std::collections::HashSet<String> {
        self.pages.iter().filter(|(_, p)| keep(&p.record)).map(|(s, _)| s.clone()).collect()
    }

    /// Keyword arm: chunks by BM25 over their search text, best first (of the pages `allow`ed).
    pub fn keyword(
        &self,
        query: &str,
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
    ) -> Vec<ChunkHit> {
        let scored = self
            .chunk_text
            .scores(&terms(query))
            .into_iter()
            .filter(|(d, _)| self.allowed(*d as usize, allow))
            .map(|(d, s)| (s, d))
            .collect();
        top_k(scored, k, |d| self.chunk_id(*d)).into_iter().map(|(s, d)| self.hit(d, s)).collect()
    }

    /// Vector arm: chunks by cosine (an int8 estimate of it once the vectors are coded, which
    /// [`Resident::vector`] re-scores), best first; `within` restricts it to some pages, and so
    /// does `allow`.
    pub fn vector(
        &self,
        query: &[f32],
        within: Option<&[&str]>,
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
    ) -> Vec<ChunkHit> {
        let probe = self.vectors.probe(query);
        let scored: Vec<(f32, u32)> = match within {
            None => self.vectors.top(&probe, k, |i| self.embedded(i), |i| self.allowed(i, allow)),
            Some(slugs) => slugs
                .iter()
                .filter_map(|s| self.pages.get(*s))
                .flat_map(|p| p.chunks.iter())
                .filter(|&&i| self.embedded(i as usize))
                .map(|&i| (self.vectors.score(&probe, i as usize), i))
                .collect(),
        };
        top_k(scored, k, |d| self.chunk_id(*d)).into_iter().map(|(s, d)| self.hit(d, s)).collect()
    }

    /// Title arm: pages by BM25 over title and aliases, best first (of the pages `allow`ed).
    pub fn titles(
        &self,
        query: &str,
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
    ) -> Vec<PageRecord> {
        let scored: Vec<(f32, &str)> = self
            .page_names
            .scores(&terms(query))
            .into_iter()
            .filter_map(|(d, s)| self.page_slots[d as usize].as_deref().map(|slug| (s, slug)))
            .filter(|(_, slug)| allow.is_none_or(|a| a.contains(*slug)))
            .collect();
        top_k(scored, k, |s| *s)
            .into_iter()
            .map(|(score, slug)| PageRecord { score, ..self.record(&self.pages[slug]) })
            .collect()
    }

    /// Pages whose slug, normalised title or one normalised alias equals `normalized`, by slug.
    pub fn alias(&self, normalized: &str) -> Vec<PageRecord> {
        let mut slugs: Vec<&str> = self
            .by_name
            .get(normalized)
            .into_iter()
            .flatten()
            .filter_map(|d| self.page_slots.get(*d as usize)?.as_deref())
            .collect();
        slugs.sort_unstable();
        slugs.into_iter().filter_map(|s| self.pages.get(s)).map(|p| self.record(p)).collect()
    }

    /// Every page's record, in no particular order.
    pub fn records(&self) -> impl Iterator<Item = &PageRecord> {
        self.pages.values().map(|p| &p.record)
    }

    /// A page's record as answers carry it (with how many pages share its body).
    fn record(&self, p: &Page) -> PageRecord {
        PageRecord { body_shared_by: self.bodies.get(&p.body).copied().unwrap_or(1), ..p.record.clone() }
    }

    /// Every chunk that has a vector: its page, its id, its slot (for [`ResidentIndex::slot_vector`]).
    pub fn embedded_chunks(&self) -> impl Iterator<Item = (&str, String, usize)> {
        self.chunks.iter().enumerate().filter_map(move |(i, c)| {
            let c = c.as_ref().filter(|c| c.embedded && self.vectors.dim() > 0)?;
            Some((self.slug(c), c.chunk_id.to_string(), i))
        })
    }

    /// The unit vector of a chunk slot: borrowed while vectors are exact, decoded from its int8
    /// codes past the source's limit.
    pub fn slot_vector(&self, slot: usize) -> Cow<'_, [f32]> {
        self.vectors.get(slot)
    }

    /// The unit vector of chunk `chunk_id` at `slot`, if the slot still holds that chunk with a
    /// vector (a job that lets go of the lock between reads sees a slot reused meanwhile).
    pub fn chunk_vector(&self, slot: usize, chunk_id: &str) -> Option<Cow<'_, [f32]>> {
        let c = self.chunks.get(slot)?.as_ref()?;
        (c.embedded && self.vectors.dim() > 0 && c.chunk_id == Key::new(chunk_id))
            .then(|| self.vectors.get(slot))
    }

    /// Dot product of two unit vectors (their cosine).
    pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
        dot(a, b)
    }

    /// Several pages at once (missing slugs are skipped).
    pub fn pages(&self, slugs: &[&str]) -> Vec<PageRecord> {
        slugs.iter().filter_map(|s| self.pages.get(*s)).map(|p| self.record(p)).collect()
    }
}

/// Int8 candidates read per result wanted, to be re-scored exactly: the exact top 10 of 2,000
/// random 384-d vectors are always among the int8 top 40 (`vectors` tests), and a
/// source's real vectors are further apart than random ones at the top.
const RESCORE: usize = 4;

/// A [`ResidentIndex`] shared between the writer that keeps it current and the readers, with the
/// store it was loaded from (which re-scores int8 candidates).
#[derive(Debug, Clone)]
pub struct Resident {
    id: Arc<str>,
    index: Arc<RwLock<ResidentIndex>>,
    store: Option<crate::SourceStore>,
}

/// Pages tokenised and applied together while a source is loaded.
const LOAD_BATCH: usize = 1024;

impl Resident {
    /// A resident index with no store behind it: its vectors must stay exact.
    pub fn new(id: &str, index: ResidentIndex) -> Self {
        Self { id: id.into(), index: Arc::new(RwLock::new(index)), store: None }
    }

    /// Load a source's tables into memory, its vectors exact up to `exact_vectors_up_to` chunks
    /// and int8 codes past that (their chunk text and exact vectors then in a temporary chunk
    /// file); the rest of what the load found (page states, rows that disagree) is returned
    /// beside it, for the writer.
    pub async fn load(
        store: &crate::SourceStore,
        exact_vectors_up_to: usize,
    ) -> crate::Result<(Self, Loaded)> {
        Self::load_beside(store, exact_vectors_up_to, None).await
    }

    /// [`Resident::load`], keeping the chunk file beside the snapshot at `snapshot` when given
    /// (else in a temporary file).
    /// The pages are applied on a blocking thread as the store's read hands them over (see
    /// [`crate::SourceStore::load_into`]), a batch at a time, each page's rows dropped once
    /// applied.
    async fn load_beside(
        store: &crate::SourceStore,
        exact_vectors_up_to: usize,
        snapshot: Option<&std::path::Path>,
    ) -> crate::Result<(Self, Loaded)> {
        // Past its limit a source is coded from its first vector, so its f32 vectors are never
        // all held at once; its chunk slots and codes have their room from the start (moved as
        // they grow, the last moves held two copies of nearly all of them).
        let chunks = store.counts().await?.1;
        let held = chunks.saturating_sub(store.unembedded().await?);
        let snapshot = snapshot.map(std::path::Path::to_path_buf);
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<crate::store::LoadedPage>>(2);
        let apply = tokio::task::spawn_blocking(move || {
            let mut index = ResidentIndex::with_exact_vectors_up_to(exact_vectors_up_to);
            index.keep_chunks_beside(snapshot.as_deref());
            index.vectors.expect(held, chunks);
            if held > exact_vectors_up_to {
                index.chunks.reserve_exact(crate::vectors::room(chunks));
            }
            while let Some(batch) = rx.blocking_recv() {
                index.apply(Prepared::pages(
                    batch.into_iter().map(|(r, c)| PreparedPage::stored(r, c)).collect(),
                ));
            }
            index.shrink();
            index
        });
        let loaded = store.load_into(LOAD_BATCH, tx).await;
        let index = apply.await.map_err(|e| crate::Error::Io(std::io::Error::other(e)))?;
        Ok((Self { store: Some(store.clone()), ..Self::new(store.id(), index) }, loaded?))
    }

    /// [`Resident::load`], from the snapshot at `snapshot` when it stands for the tables as they
    /// are (see [`snapshot`]), else from the tables, saving a snapshot once the source is past
    /// its limit (where a full load takes minutes at a million chunks; below it, seconds) and
    /// the tables agree with themselves (else the writer has pages to redo, which a snapshot
    /// would hide). Returns whether the snapshot was used.
    pub async fn open(
        store: &crate::SourceStore,
        exact_vectors_up_to: usize,
        snapshot: &std::path::Path,
    ) -> crate::Result<(Self, Loaded, bool)> {
        // The stamp costs a few reads of table metadata (round trips on an object store): read
        // only where a snapshot is there to be checked, or is about to be saved.
        let stamp = match snapshot.exists() {
            true => Some(store.stamp(exact_vectors_up_to).await?),
            false => None,
        };
        let path = snapshot.to_path_buf();
        let restored = match stamp {
            Some(stamp) => tokio::task::spawn_blocking(move || ResidentIndex::restore(&path, &stamp))
                .await
                .map_err(|e| crate::Error::Io(std::io::Error::other(e)))?,
            None => Ok(None),
        };
        match restored {
            Ok(Some(index)) => {
                let states = index.records().map(|r| (r.slug.clone(), PageState::of(r))).collect();
                let resident = Self { store: Some(store.clone()), ..Self::new(store.id(), index) };
                return Ok((resident, Loaded { states, ..Loaded::default() }, true));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                "source `{}`: the snapshot {} cannot be read ({e}); loading the tables instead",
                store.id(),
                snapshot.display()
            ),
        }
        let (resident, loaded) = Self::load_beside(store, exact_vectors_up_to, Some(snapshot)).await?;
        if loaded.inconsistent.is_empty() && loaded.orphans.is_empty() && !resident.read().holds_text() {
            // Read after the load when there was no snapshot: nothing writes the tables while
            // their writer is still opening them.
            let stamp = match stamp {
                Some(stamp) => stamp,
                None => store.stamp(exact_vectors_up_to).await?,
            };
            resident.save(snapshot, stamp).await;
        }
        Ok((resident, loaded, false))
    }

    /// Save the index as a snapshot stamped `stamp`, which must have been read from the tables
    /// before now: every change to the index follows a change to the tables, so what is saved is
    /// at least as new as the stamp, and a stamp the tables still match means nothing changed.
    /// A failure is logged (the next open reads the tables).
    pub async fn save(&self, path: &std::path::Path, stamp: Stamp) {
        let path = path.to_path_buf();
        let saved = self.with_index(move |index| index.save(&path, &stamp)).await;
        if let Err(e) = saved.and_then(|r| r.map_err(crate::Error::Io)) {
            tracing::warn!("source `{}`: saving its snapshot failed: {e}", self.id);
        }
    }

    /// Whether the index holds every chunk's text (else it is past its limit; see
    /// [`ResidentIndex::holds_text`]).
    pub fn holds_text(&self) -> bool {
        self.read().holds_text()
    }

    /// `f` over the index on a blocking thread: the arms' scoring is CPU work (a million int8
    /// codes take ~50 ms) that must not hold one of the runtime's workers, and the caller joins
    /// the two arms, which then run at once.
    async fn with_index<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ResidentIndex) -> T + Send + 'static,
    ) -> crate::Result<T> {
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || f(&index.read().unwrap_or_else(|p| p.into_inner())))
            .await
            .map_err(|e| crate::Error::Io(std::io::Error::other(e)))
    }

    /// Vector arm with exact cosines: [`ResidentIndex::vector`] on exact vectors; on int8 codes,
    /// its best `k` × [`RESCORE`] candidates (every chunk of the pages `within`) re-scored from
    /// the stored vectors. A candidate whose row is gone (replaced since) drops out.
    pub async fn vector(
        &self,
        query: &[f32],
        within: Option<&[&str]>,
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
    ) -> crate::Result<Vec<ChunkHit>> {
        let (q, within_owned, allow) = (
            query.to_vec(),
            within.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            allow.cloned(),
        );
        let stored_behind = self.store.is_some();
        let (rescore, candidates, held) = self
            .with_index(move |index| {
                let within: Option<Vec<&str>> =
                    within_owned.as_ref().map(|w| w.iter().map(String::as_str).collect());
                let rescore = stored_behind && !index.exact_vectors();
                let pool = match (rescore, within.is_some()) {
                    (false, _) => k,
                    (true, true) => usize::MAX,
                    (true, false) => k.saturating_mul(RESCORE),
                };
                let candidates = index.vector(&q, within.as_deref(), pool, allow.as_ref());
                let held = match rescore {
                    true => index.stored(&candidates.iter().map(|h| h.chunk_id.as_str()).collect::<Vec<_>>()),
                    false => HashMap::new(),
                };
                (rescore, candidates, held)
            })
            .await?;
        if !rescore {
            return Ok(candidates);
        }
        let mut stored = self.stored(held, candidates.iter().map(|h| h.chunk_id.as_str())).await?;
        let q = unit(query.to_vec());
        let scored: Vec<(f32, ChunkHit)> = candidates
            .into_iter()
            .filter_map(|h| {
                let (_, v) = stored.get(&h.chunk_id)?;
                Some((dot(&q, &unit(v.clone()?)), h))
            })
            .collect();
        Ok(top_k(scored, k, |h| h.chunk_id.clone())
            .into_iter()
            .filter_map(|(score, h)| {
                let (text, _) = stored.remove(&h.chunk_id)?;
                Some(ChunkHit { score, text, ..h })
            })
            .collect())
    }

    /// Keyword arm: [`ResidentIndex::keyword`], with the text of hits whose text only the store
    /// holds read from it. A hit whose row is gone (replaced since) drops out.
    pub async fn keyword(
        &self,
        query: &str,
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
    ) -> crate::Result<Vec<ChunkHit>> {
        let (query, allow) = (query.to_string(), allow.cloned());
        let (hits, holds_text, held) = self
            .with_index(move |index| {
                let hits = index.keyword(&query, k, allow.as_ref());
                let ids: Vec<&str> =
                    hits.iter().filter(|h| h.text.is_empty()).map(|h| h.chunk_id.as_str()).collect();
                let held = index.stored(&ids);
                (hits, index.holds_text(), held)
            })
            .await?;
        if holds_text || self.store.is_none() {
            return Ok(hits);
        }
        let mut stored =
            self.stored(held, hits.iter().filter(|h| h.text.is_empty()).map(|h| h.chunk_id.as_str())).await?;
        Ok(hits
            .into_iter()
            .filter_map(|h| match h.text.is_empty() {
                true => stored.remove(&h.chunk_id).map(|(text, _)| ChunkHit { text, ..h }),
                false => Some(h),
            })
            .collect())
    }

    /// The text and vector of the chunks `ids`: those `held` (read from the chunk file), and
    /// the rest read from the store. A chunk in neither is left out.
    async fn stored<'a>(
        &self,
        mut held: HashMap<String, (String, Option<Vec<f32>>)>,
        ids: impl Iterator<Item = &'a str>,
    ) -> crate::Result<HashMap<String, (String, Option<Vec<f32>>)>> {
        let missing: Vec<&str> = ids.filter(|id| !held.contains_key(*id)).collect();
        if let Some(store) = self.store.as_ref().filter(|_| !missing.is_empty()) {
            held.extend(store.texts_and_vectors(&missing).await?);
        }
        Ok(held)
    }

    /// The vectors of texts (by hash) that chunks of this source already have: from memory while
    /// its vectors are exact, else from the store.
    pub async fn known_vectors(&self, hashes: &[&str]) -> crate::Result<HashMap<String, Vec<f32>>> {
        let held: Vec<&str> = {
            let index = self.read();
            if index.exact_vectors() {
                return Ok(hashes
                    .iter()
                    .filter_map(|h| Some((h.to_string(), index.vector_of(h)?)))
                    .collect());
            }
            hashes.iter().copied().filter(|h| index.has_vector(h)).collect()
        };
        match &self.store {
            Some(store) => store.vectors_by(crate::VectorKey::TextHash, &held).await,
            None => Ok(HashMap::new()),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Apply a committed batch (tokenise it first with [`Prepared::batch`], outside the lock);
    /// the chunks still waiting for a vector after it.
    pub async fn apply(&self, batch: Prepared) -> crate::Result<usize> {
        self.with_index_mut(move |index| index.apply(batch)).await
    }

    /// Apply vectors attached to chunks (by id); the chunks still waiting for one after them.
    pub async fn apply_vectors(&self, vectors: Vec<(String, Vec<f32>)>) -> crate::Result<usize> {
        self.with_index_mut(move |index| index.apply_vectors(&vectors)).await
    }

    /// `f` over the index under its write lock, on a blocking thread: taking the lock waits for
    /// the searches reading now, and a change may write the chunk file, so neither may hold an
    /// actor's thread (which answers searches meanwhile) or one of the runtime's workers.
    async fn with_index_mut(
        &self,
        f: impl FnOnce(&mut ResidentIndex) + Send + 'static,
    ) -> crate::Result<usize> {
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || {
            crate::fault::point("resident.apply");
            let mut index = index.write().unwrap_or_else(|p| p.into_inner());
            f(&mut index);
            index.unembedded_count()
        })
        .await
        .map_err(|e| crate::Error::Io(std::io::Error::other(e)))
    }

    /// Compact the chunk file once most of it is dead (see [`chunk_file`]): the live records are
    /// listed under a read lock, copied to a new file with no lock held (the old file is only
    /// appended to, so what it holds below the listed length stays as it is), and the index
    /// moves to the copy under the write lock, for as long as it takes to renumber the slots.
    /// The caller (the writer's upkeep, which runs no commit meanwhile) then saves a snapshot
    /// that names the new file. The file's lengths before and after, when it ran.
    pub async fn compact_chunk_file(&self) -> crate::Result<Option<(u64, u64)>> {
        let listed = {
            let index = self.read();
            let Some(file) = index.file.as_ref().filter(|f| f.compaction_due()) else { return Ok(None) };
            let live: Vec<(u32, u64)> = index
                .chunks
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_ref().filter(|s| s.at != NOWHERE).map(|s| (i as u32, s.at)))
                .collect();
            (file.source()?, live)
        };
        let ((from, path, len), live) = listed;
        let (copy, moved) = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
            let mut copy = ChunkFile::create_beside(path.as_deref())?;
            let mut moved = Vec::with_capacity(live.len());
            for (slot, at) in live {
                moved.push((slot, at, copy.copy_record(&from, at, len)?));
            }
            // On disk here, not under the write lock (where only the renaming is left).
            copy.flush()?;
            copy.sync()?;
            Ok((copy, moved))
        })
        .await
        .map_err(|e| crate::Error::Io(std::io::Error::other(e)))??;
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        Ok(index.move_to(copy, moved).map(|after| (len, after)))
    }

    /// Read access (held for one synchronous read, never across an await).
    pub fn read(&self) -> RwLockReadGuard<'_, ResidentIndex> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(slug: &str, title: &str, aliases: &[&str], bodies: &[(&str, Vec<f32>)]) -> PreparedPage {
        let chunks = bodies
            .iter()
            .enumerate()
            .map(|(i, (text, v))| StoredChunk {
                hit: ChunkHit::numbered(slug, i, title, text),
                search_text: format!("{title}\n\n{text}"),
                text_hash: format!("h:{text}"),
                vector: (!v.is_empty()).then(|| v.clone()),
            })
            .collect();
        PreparedPage::stored(PageRecord::named(slug, title, aliases, bodies.len()), chunks)
    }

    #[test]
    fn a_body_hash_is_the_same_on_every_build_and_ignores_headings_case_and_spacing() {
        let a = page("a", "A", &[], &[("# Tides\nBoats  wait\tFor the tide", vec![])]);
        let b = page("b", "B", &[], &[("## Other heading\nboats wait for the TIDE", vec![])]);
        // SHA-256 of "boats wait for the tide ", its first 8 bytes little-endian: a value saved in
        // snapshots must not move with the compiler (std's DefaultHasher may).
        assert_eq!(body_hash(&a.chunks), 4_323_963_534_690_371_005);
        assert_eq!(body_hash(&a.chunks), body_hash(&b.chunks));
        let c = page("c", "C", &[], &[("boats wait for the tides", vec![])]);
        assert_ne!(body_hash(&a.chunks), body_hash(&c.chunks));
    }

    fn index(pages: Vec<PreparedPage>) -> ResidentIndex {
        let mut i = ResidentIndex::default();
        i.apply(Prepared::pages(pages));
        i
    }

    #[test]
    fn a_snapshot_reads_back_the_index_it_was_taken_of_and_refuses_a_damaged_one() {
        let mut linked = page("hall", "Odeon", &["Hall of Light"], &[("stone seats", vec![1.0, 0.0])]);
        linked.record.links = Json::of(&serde_json::json!([{"target": "Dock", "label": null}]));
        linked.record.frontmatter = Json::of(&serde_json::json!({"tags": ["venue"]}));
        let mut i = ResidentIndex::with_exact_vectors_up_to(1);
        i.apply(Prepared::pages(vec![
            linked,
            page("dock", "Dock", &[], &[("boats", vec![0.0, 1.0]), ("ropes", vec![])]),
            page("gone", "Gone", &["Hall of Light"], &[("stone", vec![0.5, 0.5])]),
        ]));
        i.apply(Prepared { upserts: vec![], removals: vec!["gone".into()] });
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.snapshot");
        let stamp = snapshot::Stamp {
            chunks_version: 3,
            chunks_written_us: 9,
            pages_version: 2,
            chunk_rows: 3,
            page_rows: 2,
            exact_up_to: 1,
        };
        i.save(&path, &stamp).unwrap();
        let back = ResidentIndex::restore(&path, &stamp).unwrap().expect("the stamp matches");
        let other = snapshot::Stamp { pages_version: 3, ..stamp };
        assert!(ResidentIndex::restore(&path, &other).unwrap().is_none(), "another stamp is not this one");
        for q in ["stone", "boats", "ropes", "odeon"] {
            assert_eq!(back.keyword(q, 5, None), i.keyword(q, 5, None), "{q}");
            assert_eq!(back.titles(q, 5, None), i.titles(q, 5, None), "{q}");
        }
        assert_eq!(back.vector(&[1.0, 0.2], None, 5, None), i.vector(&[1.0, 0.2], None, 5, None));
        assert_eq!(back.alias("hall of light"), i.alias("hall of light"));
        assert_eq!(back.alias("hall of light").len(), 1, "the removed page's name went with it");
        assert_eq!(back.pages(&["hall", "dock"]), i.pages(&["hall", "dock"]));
        assert_eq!(back.pages(&["hall"])[0].links.value()[0]["target"], "Dock");
        assert_eq!(back.unembedded(), i.unembedded());
        // Cut short, or with a count past the file's end: an error, never a panic or a huge
        // reservation.
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        assert!(ResidentIndex::restore(&path, &stamp).is_err());
        let mut huge = bytes.clone();
        // The place of the second part (after the name, the stamp and the chunk file's id,
        // length and dead bytes).
        huge[8 + 72..8 + 80].copy_from_slice(&u64::MAX.to_le_bytes());
        std::fs::write(&path, &huge).unwrap();
        assert!(ResidentIndex::restore(&path, &stamp).is_err());
    }

    #[test]
    fn past_its_limit_a_source_reads_text_and_exact_vectors_from_its_chunk_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.snapshot");
        let mut i = ResidentIndex::with_exact_vectors_up_to(2);
        i.keep_chunks_beside(Some(&path));
        i.apply(Prepared::pages(vec![page("a", "A", &[], &[("tides", vec![0.6, 0.8]), ("moon", vec![])])]));
        assert!(i.holds_text() && i.stored(&["a#0"]).is_empty(), "below the limit memory holds it all");
        assert!(!chunk_file::path_beside(&path).exists(), "and no file is made");
        // Past the limit: what memory held goes to the file at once, later chunks as they come.
        let b = page("b", "B", &[], &[("spring", vec![1.0, 0.0]), ("neap", vec![0.0, 1.0])]);
        i.apply(Prepared::pages(vec![b]));
        assert!(!i.holds_text());
        i.apply_vectors(&[("a#1".into(), vec![0.0, 2.0])]);
        let stored = i.stored(&["a#0", "a#1", "b#1", "gone#0"]);
        assert_eq!(stored.len(), 3, "a chunk not held is left out");
        let exact = |id: &str| stored[id].1.clone().unwrap();
        assert_eq!(stored["a#0"].0, "tides");
        assert!(exact("a#0").iter().zip([0.6, 0.8]).all(|(x, y)| (x - y).abs() < 1e-6), "not the int8 code");
        assert_eq!((stored["a#1"].0.as_str(), exact("a#1")), ("moon", vec![0.0, 1.0]));
        assert_eq!((stored["b#1"].0.as_str(), exact("b#1")), ("neap", vec![0.0, 1.0]));
        i.apply(Prepared::pages(vec![page("b", "B", &[], &[("ebb", vec![0.0, 1.0])])]));
        assert_eq!(i.stored(&["b#0", "b#1"]).into_keys().collect::<Vec<_>>(), ["b#0"], "replaced");
        assert_eq!(i.stored(&["b#0"])["b#0"].0, "ebb");
        // The snapshot names the file: restored, the reads go on; without it, it is refused.
        let stamp = snapshot::Stamp {
            chunks_version: 1,
            chunks_written_us: 1,
            pages_version: 1,
            chunk_rows: 3,
            page_rows: 2,
            exact_up_to: 2,
        };
        i.save(&path, &stamp).unwrap();
        let ids = ["a#0", "a#1", "b#0"];
        let back = ResidentIndex::restore(&path, &stamp).unwrap().expect("the stamp matches");
        assert_eq!(back.stored(&ids), i.stored(&ids));
        assert_eq!(back.stored(&ids).len(), 3);
        std::fs::remove_file(chunk_file::path_beside(&path)).unwrap();
        assert!(ResidentIndex::restore(&path, &stamp).is_err());
        ResidentIndex::forget_snapshot(&path);
        assert!(!path.exists());
    }

    #[tokio::test]
    async fn a_chunk_file_mostly_dead_is_compacted_and_its_snapshot_names_the_copy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.snapshot");
        let mut i = ResidentIndex::with_exact_vectors_up_to(2);
        i.keep_chunks_beside(Some(&path));
        // 200 pages of 4 KiB text each: 0.8 MiB live, then edited twice (1.6 MiB dead).
        let pages = |round: usize| -> Vec<PreparedPage> {
            (0..200)
                .map(|p| {
                    let text = format!("round {round} page {p} ").repeat(200);
                    let v = vec![(p % 7) as f32 + 1.0, round as f32];
                    page(&format!("p{p}"), "P", &[], &[(text.as_str(), v)])
                })
                .collect()
        };
        i.apply(Prepared::pages(pages(0)));
        let live = i.file.as_ref().unwrap().len();
        assert_eq!(i.file.as_ref().unwrap().dead(), 0);
        i.apply(Prepared::pages(pages(1)));
        assert!(!i.file.as_ref().unwrap().compaction_due(), "half dead is not yet most of it");
        i.apply(Prepared::pages(pages(2)));
        let file = i.file.as_ref().unwrap();
        assert!(file.compaction_due(), "dead {} of {}", file.dead(), file.len());
        let ids: Vec<String> = (0..200).map(|p| format!("p{p}#0")).collect();
        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
        let want = i.stored(&ids);
        assert_eq!(want.len(), 200);
        assert!(want["p5#0"].0.starts_with("round 2 page 5 "));

        let old_stamp = snapshot::Stamp {
            chunks_version: 2,
            chunks_written_us: 1,
            pages_version: 2,
            chunk_rows: 200,
            page_rows: 200,
            exact_up_to: 2,
        };
        i.save(&path, &old_stamp).unwrap();
        let r = Resident::new("s", i);
        let (before, after) = r.compact_chunk_file().await.unwrap().expect("due");
        // A death before the next snapshot: the old one is refused (another file now), so the
        // next open loads the tables rather than read records where they no longer are.
        assert!(ResidentIndex::restore(&path, &old_stamp).is_err());
        assert!(after < before / 2 && after <= live + 64, "{before} → {after} bytes (live {live})");
        assert_eq!(
            std::fs::metadata(chunk_file::path_beside(&path)).unwrap().len(),
            after,
            "renamed in place"
        );
        assert!(r.compact_chunk_file().await.unwrap().is_none(), "nothing dead left");
        assert_eq!(r.read().stored(&ids), want, "every chunk read back from the copy");
        // The snapshot names the copy, and its dead bytes go on counting from there.
        let stamp = snapshot::Stamp {
            chunks_version: 3,
            chunks_written_us: 1,
            pages_version: 3,
            chunk_rows: 200,
            page_rows: 200,
            exact_up_to: 2,
        };
        r.read().save(&path, &stamp).unwrap();
        let mut back = ResidentIndex::restore(&path, &stamp).unwrap().expect("the stamp matches");
        assert_eq!(back.stored(&ids), want);
        back.apply(Prepared::pages(pages(3)));
        assert_eq!(back.file.as_ref().unwrap().dead(), after - 16, "every record of the copy replaced");
    }

    #[test]
    fn a_purge_drops_the_terms_no_document_holds_any_more() {
        let t = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let mut b = Bm25::default();
        b.insert(0, &t("tide moon"));
        b.insert(1, &t("comet"));
        b.insert(2, &t("sun tide"));
        b.remove(1);
        b.remove(2);
        assert_eq!(b.purge(), vec![1, 2]);
        let mut terms: Vec<&str> = b.term_ids.keys().map(|k| &**k).collect();
        terms.sort();
        assert_eq!(terms, ["moon", "tide"]);
        assert_eq!(b.postings.len(), 2);
        let mut fresh = Bm25::default();
        fresh.insert(0, &t("tide moon"));
        assert_eq!(b.scores(&t("moon tide")), fresh.scores(&t("moon tide")));
        b.insert(1, &t("comet sun"));
        assert_eq!(b.scores(&t("comet")).len(), 1, "a term comes back with a document that holds it");
        assert_eq!(b.scores(&t("tide")).len(), 1);
    }

    #[test]
    fn terms_are_lancedb_s_stemmed_lowercase_words_without_stop_words() {
        assert_eq!(terms("The Running Dogs of Café"), vec!["run", "dog", "cafe"]);
    }

    #[test]
    fn bm25_matches_the_formula_and_prefers_the_rarer_term() {
        let i = index(vec![
            page("a", "A", &[], &[("tides tides moon", vec![1.0, 0.0])]),
            page("b", "B", &[], &[("moon", vec![0.0, 1.0])]),
            page("c", "C", &[], &[("sun", vec![0.0, 1.0])]),
        ]);
        let hits = i.keyword("tides", 10, None);
        assert_eq!(hits.iter().map(|h| h.slug.as_str()).collect::<Vec<_>>(), ["a"]);
        // Search text "A\n\ntides tides moon": "a" is a stop word, so 3 terms; average (3+2+2)/3.
        let (n, df, tf, len, avg) = (3.0f32, 1.0f32, 2.0f32, 3.0f32, 7.0f32 / 3.0);
        let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
        let want = idf * (K1 + 1.0) * tf / (tf + K1 * (1.0 - B + B * len / avg));
        assert!((hits[0].score - want).abs() < 1e-5, "{} against {want}", hits[0].score);
        let both = i.keyword("tides moon", 10, None);
        assert_eq!(both.iter().map(|h| h.slug.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }

    #[test]
    fn vectors_score_by_cosine_and_within_restricts_to_pages() {
        let i = index(vec![
            page("a", "A", &[], &[("x", vec![3.0, 4.0]), ("y", vec![0.0, 2.0])]),
            page("b", "B", &[], &[("z", vec![1.0, 0.0])]),
        ]);
        let hits = i.vector(&[1.0, 0.0], None, 10, None);
        assert_eq!(hits.iter().map(|h| h.chunk_id.as_str()).collect::<Vec<_>>(), ["b#0", "a#0", "a#1"]);
        assert!((hits[1].score - 0.6).abs() < 1e-6);
        let within = i.vector(&[1.0, 0.0], Some(&["a"]), 1, None);
        assert_eq!(within.iter().map(|h| h.chunk_id.as_str()).collect::<Vec<_>>(), ["a#0"]);
    }

    #[test]
    fn upserts_replace_and_removals_forget_everything_about_a_page() {
        let mut i = index(vec![
            page("hall", "Indoor Greek Amphitheater", &["Hall of Light"], &[("stone seats", vec![1.0, 0.0])]),
            page("dock", "Dock", &[], &[("boats", vec![0.0, 1.0])]),
        ]);
        assert_eq!(i.alias("hall of light").len(), 1);
        assert_eq!(i.titles("greek amphitheater", 5, None)[0].slug, "hall");
        i.apply(Prepared {
            upserts: vec![page("hall", "Odeon", &[], &[("marble", vec![1.0, 0.0])])],
            removals: vec![],
        });
        assert!(i.alias("hall of light").is_empty());
        assert!(i.titles("greek", 5, None).is_empty());
        assert!(i.keyword("stone", 5, None).is_empty());
        assert_eq!(i.keyword("marble", 5, None)[0].slug, "hall");
        assert_eq!(i.chunk_count(), 2);
        i.apply(Prepared { upserts: vec![], removals: vec!["hall".into(), "missing".into()] });
        assert_eq!((i.page_count(), i.chunk_count()), (1, 1));
        assert!(i.keyword("marble", 5, None).is_empty());
        assert!(i.pages(&["hall"]).is_empty());
        assert_eq!(i.vector(&[1.0, 0.0], None, 5, None).len(), 1);
        // Freed slots are reused and stay consistent.
        i.apply(Prepared::pages(vec![page("new", "New", &[], &[("marble", vec![-1.0, 0.0])])]));
        assert_eq!(i.keyword("marble", 5, None)[0].slug, "new");
        assert_eq!(i.chunk_count(), 2);
        let v = i.vector(&[-1.0, 0.0], None, 5, None);
        assert_eq!((v[0].slug.as_str(), v[0].score), ("new", 1.0), "the reused slot holds the new vector");
    }

    #[test]
    fn removed_documents_score_nothing_and_their_slots_come_back_at_a_purge() {
        let t = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        let mut b = Bm25::default();
        b.insert(0, &t("tide moon"));
        b.insert(1, &t("tide"));
        b.insert(2, &t("sun"));
        let before = b.scores(&t("tide"));
        b.remove(1);
        // Scored as if document 1 had never been: df 1 of 2 documents, average length 1.5.
        let mut fresh = Bm25::default();
        fresh.insert(0, &t("tide moon"));
        fresh.insert(2, &t("sun"));
        assert_eq!(b.scores(&t("tide")), fresh.scores(&t("tide")));
        assert_ne!(b.scores(&t("tide")), before);
        assert!(!b.purge_due(), "one removal of three does not pay for a pass over every list");
        assert_eq!(b.purge(), vec![1]);
        assert_eq!(b.postings.iter().map(Postings::len).sum::<usize>(), 3, "its posting went");
        b.insert(1, &t("moon"));
        let moon: HashMap<u32, f32> = b.scores(&t("moon")).into_iter().collect();
        assert_eq!(moon.len(), 2, "the slot holds the new document alone");
    }

    #[test]
    fn past_its_limit_a_source_keeps_only_the_text_of_chunks_waiting_for_a_vector() {
        let mut i = ResidentIndex::with_exact_vectors_up_to(1);
        i.apply(Prepared::pages(vec![page(
            "a",
            "A",
            &[],
            &[("tides", vec![1.0, 0.0]), ("moon", vec![0.0, 1.0])],
        )]));
        assert!(!i.holds_text());
        let hit = &i.keyword("tides", 5, None)[0];
        assert_eq!((hit.slug.as_str(), hit.text.as_str()), ("a", ""), "the store holds the text");
        i.apply(Prepared::pages(vec![page("b", "B", &[], &[("spring", vec![])])]));
        assert_eq!(i.keyword("spring", 5, None)[0].text, "spring", "kept until its vector arrives");
        assert_eq!(i.unembedded()[0].2, "B\n\nspring");
        i.apply_vectors(&[("b#0".into(), vec![1.0, 1.0])]);
        assert_eq!(i.keyword("spring", 5, None)[0].text, "");
        // Below the limit every chunk keeps its text.
        let small = index(vec![page("a", "A", &[], &[("tides", vec![1.0, 0.0])])]);
        assert_eq!(small.keyword("tides", 5, None)[0].text, "tides");
    }

    #[test]
    fn stop_words_are_the_keyword_arm_s_and_template_bodies_are_counted() {
        assert!(
            is_stop_word("the") && is_stop_word("Which") && !is_stop_word("tides") && !is_stop_word("milk")
        );
        let stub =
            |slug: &str| page(slug, slug, &[], &[(&format!("# {slug}\n\nno documented columns"), vec![1.0])]);
        let mut i = index(vec![
            stub("a"),
            stub("b"),
            stub("c"),
            page("milk", "Milk", &[], &[("buy milk", vec![1.0])]),
        ]);
        assert_eq!(i.pages(&["a"])[0].body_shared_by, 3);
        assert_eq!(i.pages(&["milk"])[0].body_shared_by, 1, "a short note of its own is not a template");
        i.apply(Prepared { upserts: vec![], removals: vec!["b".into()] });
        assert_eq!(i.pages(&["a"])[0].body_shared_by, 2);
    }

    #[test]
    fn a_page_is_named_by_its_file_too() {
        let mut p = page("meetings/standup-2024-05-01", "Agenda", &[], &[("who does what", vec![1.0])]);
        p.record.path = "meetings/Standup 2024-05-01.md".into();
        let i = index(vec![PreparedPage::stored(p.record.clone(), vec![])]);
        assert_eq!(i.alias("standup 2024-05-01")[0].slug, "meetings/standup-2024-05-01");
        assert_eq!(file_name("a/b/Note.markdown"), "Note");
    }

    #[test]
    fn chunks_without_vectors_are_found_by_words_and_join_the_vector_arm_when_theirs_arrive() {
        let mut i = index(vec![
            page("a", "A", &[], &[("tides", vec![1.0, 0.0])]),
            page("b", "B", &[], &[("moon", vec![]), ("sun", vec![])]),
        ]);
        assert_eq!(i.unembedded_count(), 2);
        assert_eq!(i.keyword("moon", 5, None)[0].slug, "b");
        let only_a: Vec<String> = i.vector(&[0.0, 1.0], None, 5, None).into_iter().map(|h| h.slug).collect();
        assert_eq!(only_a, ["a"], "a chunk without a vector is not in the vector arm");
        let pending = i.unembedded();
        assert_eq!(pending.iter().map(|(id, _, _)| id.as_str()).collect::<Vec<_>>(), ["b#0", "b#1"]);
        assert_eq!(pending[0].2, "B\n\nmoon", "the text the model embeds");
        i.apply_vectors(&[("b#0".into(), vec![0.0, 3.0]), ("gone#7".into(), vec![1.0, 1.0])]);
        assert_eq!(i.unembedded_count(), 1);
        let v = i.vector(&[0.0, 1.0], None, 5, None);
        assert_eq!((v[0].chunk_id.as_str(), v[0].score), ("b#0", 1.0));
        assert_eq!(i.vector_of("h:moon"), Some(vec![0.0, 1.0]), "reusable by text hash, normalised");
        i.apply(Prepared { upserts: vec![], removals: vec!["b".into()] });
        assert_eq!(i.unembedded_count(), 0);
        assert_eq!(i.vector_of("h:moon"), None);
    }
}
