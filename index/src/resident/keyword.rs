//! BM25 over chunk text and page names: the keyword index.

use super::postings::Postings;
use super::wire::{In, Out, bad};
use std::collections::HashMap;
use std::io::{self, BufReader, Read, Write};

pub(super) const K1: f32 = 1.2;
pub(super) const B: f32 = 0.75;

/// BM25 over documents identified by small integers (slots owned by the caller).
///
/// A removed document is only marked (its length set to 0) and skipped when scoring: its postings
/// go at the next [`Bm25::purge`], after which its slot may be reused. Keeping each document's
/// terms to take it out at once would cost a quarter more memory, and finding it in every one of
/// its terms' lists costs a scan of each list per removal.
#[derive(Debug, Default)]
pub struct Bm25 {
    pub(super) term_ids: HashMap<Box<str>, u32>,
    pub(super) postings: Vec<Postings>,
    /// Per document: its length in terms (0 once removed).
    pub(super) doc_len: Vec<u32>,
    /// Documents removed since the last purge (their postings are still in the lists).
    pub(super) removed: Vec<u32>,
    pub(super) docs: usize,
    pub(super) total_len: u64,
}

impl Bm25 {
    /// Index a document; its slot must be new or freed by [`Bm25::purge`].
    pub fn insert(&mut self, doc: u32, terms: &[String]) {
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

    pub fn remove(&mut self, doc: u32) {
        let d = doc as usize;
        self.total_len -= self.doc_len[d] as u64;
        self.doc_len[d] = 0;
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
    pub fn shrink(&mut self) {
        self.postings.iter_mut().for_each(Postings::shrink);
    }

    /// Bytes held (an estimate: lists and term names, not the hash table's own slack).
    pub fn bytes(&self) -> usize {
        let lists: usize = self.postings.iter().map(Postings::capacity).sum();
        let names: usize = self.term_ids.keys().map(|t| t.len() + 16 + 4 + 8).sum();
        lists
            + names
            + self.postings.capacity() * std::mem::size_of::<Postings>()
            + self.doc_len.capacity() * 4
    }

    /// Every document holding a query term, with its score (unordered).
    pub fn scores(&self, query: &[String]) -> Vec<(u32, f32)> {
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
        let mut terms: Vec<(&str, u32)> = self.term_ids.iter().map(|(t, id)| (&**t, *id)).collect();
        terms.sort_by_key(|(_, id)| *id);
        o.len(terms.len())?;
        for (t, _) in terms {
            o.str(t)?;
        }
        for p in &self.postings {
            let (bytes, last, len) = p.raw();
            o.u32(last)?;
            o.u32(len)?;
            o.len(bytes.len())?;
            o.bytes(bytes)?;
        }
        o.u32s(&self.doc_len)?;
        o.u32s(&self.removed)?;
        o.len(self.docs)?;
        o.u64(self.total_len)
    }

    pub(super) fn load<R: Read>(i: &mut In<R>) -> io::Result<Self> {
        let n = i.count()?;
        let mut term_ids = HashMap::with_capacity(n);
        for id in 0..n {
            term_ids.insert(i.string()?.into_boxed_str(), id as u32);
        }
        let mut packed = Vec::with_capacity(n);
        for _ in 0..n {
            let (last, len) = (i.u32()?, i.u32()?);
            let bytes = i.len(1 << 40)?;
            packed.push((i.raw(bytes)?, last, len));
        }
        let (doc_len, removed) = (i.u32s()?, i.u32s()?);
        let (docs, total_len) = (i.len(1 << 34)?, i.u64()?);
        // Checked whole: a posting of a document that is not there would be a panic later.
        let postings = packed
            .into_iter()
            .map(|(bytes, last, len)| Postings::from_raw(bytes, last, len, doc_len.len()))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("postings that are cut short or name a document that is not there"))?;
        if removed.iter().any(|d| *d as usize >= doc_len.len()) {
            return Err(bad("a removed document that is not there"));
        }
        Ok(Self { term_ids, postings, doc_len, removed, docs, total_len })
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
