//! The one way into a resident index: a prepared batch (removals, then upserts) or vectors
//! attached later, each followed by the settling that codes vectors and frees slots.

use super::chunk_file::NOWHERE;
use super::keys::Key;
use super::prepared::{Prepared, PreparedPage, body_hash};
use super::slots::{Page, ResidentIndex, Slot, id_of, slot, text_hash_of};
use crate::vectors::{Vectors, unit};

impl ResidentIndex {
    /// An empty index whose vectors stay exact f32 while it holds at most `exact_up_to` of them,
    /// and are coded to int8 past that (the default index keeps them exact).
    pub fn with_exact_vectors_up_to(exact_up_to: usize) -> Self {
        Self { vectors: Vectors::new(exact_up_to), ..Self::default() }
    }

    /// Its words read in `lang` (pages applied since are prepared in it: [`Prepared::batch`]).
    pub fn in_language(self, lang: super::analyzer::Lang) -> Self {
        Self { lang, ..self }
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

    pub(super) fn remove(&mut self, slug: &str) {
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
        self.unlearn(page.doc, &page.lessons);
        for n in page.names {
            if let Some(docs) = self.by_name.get_mut(n.as_str()) {
                docs.retain(|d| *d != page.doc);
                if docs.is_empty() {
                    self.by_name.remove(n.as_str());
                }
            }
        }
    }

    pub(super) fn insert(&mut self, p: PreparedPage) {
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
            self.chunk_text.insert_fields(id, &c.head_terms, &c.terms);
            chunks.push(id);
        }
        let mut names: Vec<String> = p.names.into_iter().filter(|n| !n.is_empty()).collect();
        names.sort();
        names.dedup();
        for n in &names {
            self.by_name.entry(n.as_str().into()).or_default().push(doc);
        }
        self.learn(doc, &p.lessons);
        self.pages.insert(slug, Page { record: p.record, doc, chunks, names, lessons: p.lessons, body });
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

    /// Code the vectors to int8 once the source holds more than its limit (and drop the text of
    /// chunks that have a vector), and free the slots of removed chunks and pages once enough
    /// of them wait.
    pub(super) fn settle(&mut self) {
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
    pub(super) fn shrink(&mut self) {
        self.chunk_text.shrink();
        self.page_names.shrink();
    }
}
