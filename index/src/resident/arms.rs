//! What a search reads from a resident index: the keyword, vector, title and name arms, and the
//! records and vectors answers are built from.

use super::analyzer::terms_in;
use super::compounds::{QueryTerms, closed_compounds, heads, split};
use super::keys::Key;
use super::keyword::{Fields, top_k};
use super::slots::{Page, ResidentIndex, id_of, text_hash_of};
use crate::store::{ChunkHit, PageRecord};
use crate::vectors::dot;
use std::borrow::Cow;
use std::collections::HashMap;

impl ResidentIndex {
    /// The query's terms as this source reads them: its analyzer's, and in a language that
    /// writes compounds as one word, the parts of each compound and the compounds each word
    /// ends, by this source's words (see [`super::compounds`]).
    pub fn query_terms(&self, query: &str) -> QueryTerms {
        let words = terms_in(self.lang, query);
        let mut parts: Vec<String> = Vec::new();
        let mut ends = Vec::new();
        if closed_compounds(self.lang) {
            let df = |s: &str| self.chunk_text.df(s);
            ends = heads(self.lang, &words, self.chunk_text.term_names(), &df);
            for w in query.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
                for p in split(self.lang, &w.to_lowercase(), &df) {
                    if !words.contains(&p) && !parts.contains(&p) {
                        parts.push(p);
                    }
                }
            }
        }
        QueryTerms { words, parts, heads: ends }
    }

    /// Keyword arm: chunks by BM25 over their heading path and text (scored as `fields` says),
    /// best first (of the pages `allow`ed), for the query's terms as this source reads them.
    pub fn keyword(
        &self,
        query: &str,
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
        fields: Fields,
    ) -> Vec<ChunkHit> {
        self.keyword_terms(&self.query_terms(query).all(), k, allow, fields)
    }

    /// Keyword arm for terms already read ([`ResidentIndex::query_terms`]).
    pub fn keyword_terms(
        &self,
        terms: &[String],
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
        fields: Fields,
    ) -> Vec<ChunkHit> {
        let scored = self
            .chunk_text
            .scores(terms, fields)
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
            .scores(&terms_in(self.lang, query), Fields::Together)
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

    /// Pages whose slug, normalised title or alias is within `max_edits` edits of `normalized`
    /// (see [`cairn_ingest::fuzzy`]), with what taking the query for it costs
    /// ([`cairn_ingest::fuzzy::cost`]: a typing slip less than another edit): only those at the
    /// least cost found (an exact name is no fuzzy match: ask [`Self::alias`] first), by slug, at
    /// most `k`. Every name is compared: the lane runs only for a short query that names no page
    /// outright.
    pub fn fuzzy(&self, normalized: &str, max_edits: usize, k: usize) -> Vec<(PageRecord, usize)> {
        let len = normalized.chars().count();
        let mut best = 2 * max_edits;
        let mut docs: Vec<u32> = Vec::new();
        for (name, named) in &self.by_name {
            let edits = best.div_ceil(2);
            // The byte length bounds the character length from above: a cheap first cut.
            if name.len() + edits < len {
                continue;
            }
            let Some(c) = cairn_ingest::fuzzy::cost(normalized, name, edits) else { continue };
            if c == 0 || c > best {
                continue;
            }
            if c < best {
                best = c;
                docs.clear();
            }
            docs.extend(named);
        }
        let mut slugs: Vec<&str> =
            docs.iter().filter_map(|d| self.page_slots.get(*d as usize)?.as_deref()).collect();
        slugs.sort_unstable();
        slugs.dedup();
        slugs.truncate(k);
        slugs.into_iter().filter_map(|s| self.pages.get(s)).map(|p| (self.record(p), best)).collect()
    }

    /// Every page's record, in no particular order.
    pub fn records(&self) -> impl Iterator<Item = &PageRecord> {
        self.pages.values().map(|p| &p.record)
    }

    /// A page's record as answers carry it (with how many pages share its body).
    pub(super) fn record(&self, p: &Page) -> PageRecord {
        PageRecord { body_shared_by: self.bodies.get(&p.body).copied().unwrap_or(1), ..p.record.clone() }
    }

    /// Several pages at once (missing slugs are skipped).
    pub fn pages(&self, slugs: &[&str]) -> Vec<PageRecord> {
        slugs.iter().filter_map(|s| self.pages.get(*s)).map(|p| self.record(p)).collect()
    }

    /// The slugs of the pages `keep` says yes to.
    pub fn slugs_where(&self, keep: impl Fn(&PageRecord) -> bool) -> std::collections::HashSet<String> {
        self.pages.iter().filter(|(_, p)| keep(&p.record)).map(|(s, _)| s.clone()).collect()
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
    /// vector (a job that lets go of the lock between reads sees a slot reused meanwhile): exact
    /// on either path (past the limit, from the chunk file; decoded from its int8 codes only when
    /// the file lacks it).
    pub fn chunk_vector(&self, slot: usize, chunk_id: &str) -> Option<Cow<'_, [f32]>> {
        let c = self.chunks.get(slot)?.as_ref()?;
        if !(c.embedded && self.vectors.dim() > 0 && c.chunk_id == Key::new(chunk_id)) {
            return None;
        }
        if self.vectors.exact() {
            return Some(self.vectors.get(slot));
        }
        Some(self.filed_vector(slot).map(Cow::Owned).unwrap_or_else(|| self.vectors.get(slot)))
    }

    /// Dot product of two unit vectors (their cosine).
    pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
        dot(a, b)
    }

    /// The vector of a text (by its hash), if a chunk with that text has one: from memory while
    /// the vectors held are exact, else from the chunk file (int8 codes are not the model's
    /// vector); `None` when neither holds it (see [`ResidentIndex::has_vector`] for the store).
    pub fn vector_of(&self, text_hash: &str) -> Option<Vec<f32>> {
        let slot = self.by_text_hash.get(&Key::new(text_hash), text_hash_of(&self.chunks))? as usize;
        if self.vectors.dim() == 0 {
            return None;
        }
        match self.vectors.exact() {
            true => Some(self.vectors.get(slot).into_owned()),
            false => self.filed_vector(slot),
        }
    }

    /// The vectors of chunks (by id) that have one, as this index holds them: exact while its
    /// vectors are, else decoded from their int8 codes (see [`Resident::chunk_vectors`] for the
    /// exact ones).
    ///
    /// [`Resident::chunk_vectors`]: super::Resident::chunk_vectors
    pub fn chunk_vectors(&self, ids: &[&str]) -> HashMap<String, Vec<f32>> {
        ids.iter()
            .filter_map(|id| {
                let slot = self.by_id.get(&Key::new(id), id_of(&self.chunks))? as usize;
                self.embedded(slot).then(|| (id.to_string(), self.vectors.get(slot).into_owned()))
            })
            .collect()
    }

    /// Whether a chunk with this text (by its hash) has a vector, which the store holds.
    pub fn has_vector(&self, text_hash: &str) -> bool {
        self.by_text_hash.get(&Key::new(text_hash), text_hash_of(&self.chunks)).is_some()
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
}
