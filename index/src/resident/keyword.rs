//! BM25 over chunk text and page names: the keyword index, which keeps a document's heading
//! (a chunk's page title and heading path) apart from its body, for BM25F.

use super::compounds::ALSO;
use super::postings::Postings;
use super::vocabulary::Vocabulary;
use super::wire::{In, Out, bad};
use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};

pub(super) const K1: f32 = 1.2;
pub(super) const B: f32 = 0.75;

/// How a document's heading and body are scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fields {
    /// BM25F (Robertson, Zaragoza and Taylor 2004): each field's count normalised by that
    /// field's own length against its own average, weighted (a heading's by the average body's
    /// length over the average heading's; see `Norm::head_weight`), the two summed, then
    /// saturated once. A title word in a chunk with a long body counts as much as one in a
    /// short chunk's, and a chunk deep in a page (a long heading path) gets less from each of
    /// its heading words.
    #[default]
    Apart,
    /// Plain BM25 over the two run together (the heading path, then the body), as LanceDB's
    /// full-text index scores the search text.
    Together,
}

/// Heading counts above this are kept as this (a heading path rarely says a word more than
/// twice): they share a posting's count with the body's, in its low bits.
const HEAD_COUNT_MAX: u32 = 3;
const HEAD_BITS: u32 = 2;

/// BM25 over documents identified by small integers (slots owned by the caller).
///
/// A removed document is only marked (its length set to 0) and skipped when scoring: its postings
/// go at the next [`Bm25::purge`], after which its slot may be reused. Keeping each document's
/// terms to take it out at once would cost a quarter more memory, and finding it in every one of
/// its terms' lists costs a scan of each list per removal.
#[derive(Debug, Default)]
pub struct Bm25 {
    pub(super) terms: Vocabulary,
    /// Per posting, the term's count in the body shifted past [`HEAD_BITS`], and its count in
    /// the heading below them.
    pub(super) postings: Vec<Postings>,
    /// Per document: its length in terms, heading and body (0 once removed).
    pub(super) doc_len: Vec<u32>,
    /// Per document: its heading's length in terms.
    pub(super) head_len: Vec<u32>,
    /// Documents removed since the last purge (their postings are still in the lists).
    pub(super) removed: Vec<u32>,
    pub(super) docs: usize,
    pub(super) total_len: u64,
    pub(super) total_head: u64,
}

impl Bm25 {
    /// Index a document of one field (a body); its slot must be new or freed by
    /// [`Bm25::purge`].
    pub fn insert(&mut self, doc: u32, terms: &[String]) {
        self.insert_fields(doc, &[], terms)
    }

    /// Index a document of a heading and a body; its slot must be new or freed by
    /// [`Bm25::purge`].
    pub fn insert_fields(&mut self, doc: u32, head: &[String], body: &[String]) {
        let d = doc as usize;
        if self.doc_len.len() <= d {
            self.doc_len.resize(d + 1, 0);
            self.head_len.resize(d + 1, 0);
        }
        let mut tf: HashMap<u32, (u32, u32)> = HashMap::new();
        for (t, in_head) in head.iter().map(|t| (t, true)).chain(body.iter().map(|t| (t, false))) {
            let id = self.terms.id(t);
            if id as usize == self.postings.len() {
                self.postings.push(Postings::default());
            }
            let (h, b) = tf.entry(id).or_default();
            *if in_head { h } else { b } += 1;
        }
        for (t, (h, b)) in tf {
            self.postings[t as usize].push(doc, b << HEAD_BITS | h.min(HEAD_COUNT_MAX));
        }
        // A document without terms has no postings to skip, so its length can stay 0.
        self.doc_len[d] = (head.len() + body.len()) as u32;
        self.head_len[d] = head.len() as u32;
        self.docs += 1;
        self.total_len += (head.len() + body.len()) as u64;
        self.total_head += head.len() as u64;
    }

    pub fn remove(&mut self, doc: u32) {
        let d = doc as usize;
        self.total_len -= self.doc_len[d] as u64;
        self.total_head -= self.head_len[d] as u64;
        self.doc_len[d] = 0;
        self.head_len[d] = 0;
        self.docs -= 1;
        self.removed.push(doc);
    }

    /// Whether enough documents were removed to make a purge worth its pass over every list:
    /// an eighth of those held (so lists hold at most that much dead weight), and at least 1,024.
    pub fn purge_due(&self) -> bool {
        self.removed.len() >= (self.docs / 8).max(1024)
    }

    /// Drop the postings of removed documents, and the terms no document holds any more (the
    /// vocabulary shrinks as the notes do), returning the removed documents' slots (free to
    /// reuse now).
    pub fn purge(&mut self) -> Vec<u32> {
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
            let postings = &self.postings;
            self.terms.retain(|id| !postings[id as usize].is_empty());
            self.postings.retain(|l| !l.is_empty());
            self.postings.shrink_to_fit();
        }
        std::mem::take(&mut self.removed)
    }

    /// Give back the room lists and terms grew into (after a load, when they stop growing for a
    /// while).
    pub fn shrink(&mut self) {
        self.postings.iter_mut().for_each(Postings::shrink);
        self.postings.shrink_to_fit();
        self.terms.shrink();
    }

    /// Bytes held (an estimate: lists, terms, and the allocator's own rounding left out).
    pub fn bytes(&self) -> usize {
        let lists: usize = self.postings.iter().map(Postings::capacity).sum();
        lists
            + self.terms.bytes()
            + self.postings.capacity() * std::mem::size_of::<Postings>()
            + (self.doc_len.capacity() + self.head_len.capacity()) * 4
    }

    /// Every term's name.
    pub fn term_names(&self) -> impl Iterator<Item = &str> {
        (0..self.terms.len() as u32).map(|id| self.terms.name(id))
    }

    /// How many documents hold `term` (those removed since the last purge too).
    pub fn df(&self, term: &str) -> usize {
        self.terms.get(term).map_or(0, |t| self.postings[t as usize].len())
    }

    /// Every document holding a query term, with its score (unordered), its fields scored as
    /// `fields` says. A term the query says twice counts twice: BM25's query-term frequency with
    /// `k3` unbounded, as Lucene (and so Anserini) sums a query's repeated clauses. A long query
    /// (a draft, a request of 26 words) repeats what it is about. A term written `a|b|c`
    /// ([`super::compounds::ALSO`]) is one term whose occurrences are those of `a`, `b` and `c`.
    pub fn scores(&self, query: &[String], fields: Fields) -> Vec<(u32, f32)> {
        if self.docs == 0 {
            return Vec::new();
        }
        let n = self.docs as f32;
        let norm = Norm::new(self, fields);
        // Each distinct term once, with its count, in text order, so the sums do not depend on
        // insertion order.
        let mut query: Vec<&String> = query.iter().collect();
        query.sort();
        let mut counted: Vec<(&String, f32)> = Vec::with_capacity(query.len());
        for t in query {
            match counted.last_mut() {
                Some((last, n)) if *last == t => *n += 1.0,
                _ => counted.push((t, 1.0)),
            }
        }
        let joined: Vec<(Postings, f32)> = counted
            .iter()
            .filter(|(t, _)| t.contains(ALSO))
            .map(|(t, qtf)| (self.joined(t.split(ALSO)), *qtf))
            .collect();
        let lists = counted
            .into_iter()
            .filter(|(t, _)| !t.contains(ALSO))
            .filter_map(|(t, qtf)| self.terms.get(t).map(|t| (&self.postings[t as usize], qtf)))
            .chain(joined.iter().map(|(p, qtf)| (p, *qtf)));
        // Sums in a dense array: a hash map entry per posting was most of a query's time over a
        // million chunks, where common terms hold a fifth of them.
        let mut acc: Vec<f32> = Vec::new();
        let mut touched: Vec<u32> = Vec::new();
        for (list, qtf) in lists {
            let df = list.iter().filter(|(d, _)| self.doc_len[*d as usize] != 0).count() as f32;
            if df == 0.0 {
                continue;
            }
            if acc.is_empty() {
                acc = vec![0.0; self.doc_len.len()];
            }
            let idf = qtf * ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
            for (doc, count) in list.iter() {
                let len = self.doc_len[doc as usize];
                if len == 0 {
                    continue;
                }
                let tf = norm.tf(count, len, self.head_len[doc as usize]);
                let s = idf * (K1 + 1.0) * tf / (tf + K1);
                let a = &mut acc[doc as usize];
                if *a == 0.0 {
                    touched.push(doc);
                }
                *a += s;
            }
        }
        touched.into_iter().map(|d| (d, acc[d as usize])).collect()
    }

    /// One list of the documents holding any of `terms`, each with their counts summed (a
    /// heading's kept at most [`HEAD_COUNT_MAX`]).
    fn joined<'a>(&self, terms: impl Iterator<Item = &'a str>) -> Postings {
        let mut by_doc: std::collections::BTreeMap<u32, (u32, u32)> = std::collections::BTreeMap::new();
        for id in terms.filter_map(|t| self.terms.get(t)) {
            for (doc, count) in self.postings[id as usize].iter() {
                let e = by_doc.entry(doc).or_default();
                e.0 += count & ((1 << HEAD_BITS) - 1);
                e.1 += count >> HEAD_BITS;
            }
        }
        let mut list = Postings::default();
        for (doc, (head, body)) in by_doc {
            list.push(doc, (body << HEAD_BITS) | head.min(HEAD_COUNT_MAX));
        }
        list
    }

    /// Write the index to `w` as a snapshot holds it; the bytes written.
    pub fn write_to(&self, w: impl Write) -> io::Result<u64> {
        let mut o = Out(w, 0);
        self.save(&mut o)?;
        o.0.flush()?;
        Ok(o.1)
    }

    /// Read back an index [`Bm25::write_to`] wrote, `len` bytes of `r`: refused (never a panic
    /// later) when it is damaged.
    pub fn read_from(r: impl Read, len: u64) -> io::Result<Self> {
        Self::load(&mut In(BufReader::with_capacity(1 << 20, r), len))
    }

    pub(super) fn save<W: Write>(&self, o: &mut Out<W>) -> io::Result<()> {
        o.len(self.terms.len())?;
        for id in 0..self.terms.len() as u32 {
            o.str(self.terms.name(id))?;
        }
        for p in &self.postings {
            let (bytes, last, len) = p.raw();
            o.u32(last)?;
            o.u32(len)?;
            o.len(bytes.len())?;
            o.bytes(bytes)?;
        }
        o.u32s(&self.doc_len)?;
        o.u32s(&self.head_len)?;
        o.u32s(&self.removed)?;
        o.len(self.docs)?;
        o.u64(self.total_len)?;
        o.u64(self.total_head)
    }

    pub(super) fn load<R: Read>(i: &mut In<R>) -> io::Result<Self> {
        let n = i.count()?;
        let mut terms = Vocabulary::with_capacity(n);
        for id in 0..n {
            if terms.id(&i.string()?) as usize != id {
                return Err(bad("a term named twice"));
            }
        }
        let mut packed = Vec::with_capacity(n);
        for _ in 0..n {
            let (last, len) = (i.u32()?, i.u32()?);
            let bytes = i.len(1 << 40)?;
            packed.push((i.raw(bytes)?, last, len));
        }
        let (doc_len, head_len, removed) = (i.u32s()?, i.u32s()?, i.u32s()?);
        let (docs, total_len, total_head) = (i.len(1 << 34)?, i.u64()?, i.u64()?);
        // Checked whole: a posting of a document that is not there would be a panic later.
        let postings = packed
            .into_iter()
            .map(|(bytes, last, len)| Postings::from_raw(bytes, last, len, doc_len.len()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("postings that are cut short or name a document that is not there"))?;
        if removed.iter().any(|d| *d as usize >= doc_len.len()) {
            return Err(bad("a removed document that is not there"));
        }
        if head_len.len() != doc_len.len() || head_len.iter().zip(&doc_len).any(|(h, d)| h > d) {
            return Err(bad("heading lengths that do not fit the documents"));
        }
        Ok(Self { terms, postings, doc_len, head_len, removed, docs, total_len, total_head })
    }
}

/// A posting's count made a BM25 term frequency: the length normalisation of the fields, with
/// the index's average lengths read once per query.
struct Norm {
    fields: Fields,
    avg: f32,
    avg_head: f32,
    avg_body: f32,
    /// What one heading occurrence is worth in body occurrences: the average body's length over
    /// the average heading's. A heading (the page title, the section names) says in a few words
    /// what its body says in many, so each field, whole, weighs what the other does, whole: a
    /// weight read from the index's own lengths, not a factor set by hand. Saturation bounds
    /// it: a term found only in a heading scores at most (k1 + 1) times one found once in a body
    /// of average length. Never under 1: a heading word is worth at least a body word.
    head_weight: f32,
}

impl Norm {
    fn new(index: &Bm25, fields: Fields) -> Self {
        let n = index.docs as f32;
        let avg = |total: u64| (total as f32 / n).max(f32::MIN_POSITIVE);
        let (avg_head, avg_body) = (avg(index.total_head), avg(index.total_len - index.total_head));
        Self {
            fields,
            avg: avg(index.total_len),
            avg_head,
            avg_body,
            head_weight: (avg_body / avg_head).max(1.0),
        }
    }

    /// The normalised frequency of a term counted `count` (packed) in a document of `len`
    /// terms, `head` of them its heading's.
    fn tf(&self, count: u32, len: u32, head: u32) -> f32 {
        let (in_head, in_body) = ((count & ((1 << HEAD_BITS) - 1)) as f32, (count >> HEAD_BITS) as f32);
        let norm = |len: u32, avg: f32| 1.0 - B + B * len as f32 / avg;
        match self.fields {
            Fields::Together => (in_head + in_body) / norm(len, self.avg),
            Fields::Apart => {
                let head_part =
                    if in_head > 0.0 { self.head_weight * in_head / norm(head, self.avg_head) } else { 0.0 };
                let body_part = if in_body > 0.0 { in_body / norm(len - head, self.avg_body) } else { 0.0 };
                head_part + body_part
            }
        }
    }
}

/// The best `k` of `scored`, best first; ties by `key` (ascending) so answers are stable.
pub fn top_k<T, K: Ord>(mut scored: Vec<(f32, T)>, k: usize, key: impl Fn(&T) -> K) -> Vec<(f32, T)> {
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
