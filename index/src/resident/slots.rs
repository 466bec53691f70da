//! The resident index itself: chunk and page slots, the maps and keyword indexes over them, and
//! the small reads every other part uses.

use super::chunk_file::ChunkFile;
use super::keys::{Key, SlotsBy};
use super::keyword::Bm25;
use super::learnt::{Lesson, Taught};
use crate::store::{ChunkHit, PageRecord};
use crate::vectors::Vectors;
use std::collections::HashMap;

/// A chunk slot's contents: its hit without page or score (the page is its page slot's), and
/// its text only while the text is needed in memory (see [`ResidentIndex::holds_text`]).
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) chunk_id: Key,
    pub(super) page: u32,
    pub(super) ordinal: i32,
    pub(super) heading_path: Box<str>,
    pub(super) text: Option<Box<str>>,
    pub(super) line_start: i32,
    pub(super) line_end: i32,
    pub(super) text_hash: Key,
    pub(super) embedded: bool,
    /// Where its text and exact vector are in the chunk file ([`NOWHERE`] when they are not).
    pub(super) at: u64,
}

#[derive(Debug)]
pub(super) struct Page {
    pub(super) record: PageRecord,
    pub(super) doc: u32,
    pub(super) chunks: Vec<u32>,
    pub(super) names: Vec<String>,
    /// The names it teaches other pages (or itself): see [`super::learnt`].
    pub(super) lessons: Vec<Lesson>,
    pub(super) body: u64,
}

/// One source in memory.
#[derive(Debug, Default)]
pub struct ResidentIndex {
    pub(super) pages: HashMap<String, Page>,
    /// Page slot → slug (the title arm's documents).
    pub(super) page_slots: Vec<Option<String>>,
    pub(super) free_pages: Vec<u32>,
    pub(super) chunks: Vec<Option<Slot>>,
    pub(super) free_chunks: Vec<u32>,
    /// Chunk id → slot (vectors arrive by chunk id).
    pub(super) by_id: SlotsBy,
    /// Text hash → a slot with that text and a vector (a text is never embedded twice).
    pub(super) by_text_hash: SlotsBy,
    /// Live chunks without a vector yet.
    pub(super) unembedded: usize,
    /// Every chunk slot's unit vector (exact, or int8 codes past the source's limit).
    pub(super) vectors: Vectors,
    pub(super) chunk_text: Bm25,
    pub(super) page_names: Bm25,
    /// Normalised name → the page slots of the pages it names (a set of slugs per name took a
    /// B-tree node each, ~140 MiB at a million chunks).
    pub(super) by_name: HashMap<Box<str>, Vec<u32>>,
    /// Learnt name → what taught it (see [`super::learnt`]).
    pub(super) learnt: HashMap<Box<str>, Vec<Taught>>,
    /// Body hash → pages with that body.
    pub(super) bodies: HashMap<u64, u32>,
    /// Where the chunk file goes, once there is something to put in it (past the limit), and
    /// the file (see [`chunk_file`]). Without one, what memory lacks is read from the tables.
    pub(super) chunk_home: ChunkHome,
    pub(super) file: Option<ChunkFile>,
    /// The language its words are read in (the source's: see [`super::analyzer`]).
    pub(super) lang: super::analyzer::Lang,
}

/// Where a resident index makes its chunk file when it needs one.
#[derive(Debug, Default)]
pub(super) enum ChunkHome {
    /// Nowhere: what memory lacks is read from the tables.
    #[default]
    Nowhere,
    /// Beside the source's snapshot, which names it.
    Beside(std::path::PathBuf),
    /// A temporary file with no name (a process that keeps no snapshot).
    Unnamed,
}

/// A held chunk slot's id, for [`SlotsBy`].
pub(super) fn id_of<'a>(chunks: &'a [Option<Slot>]) -> impl Fn(u32) -> &'a Key {
    move |s| &chunks[s as usize].as_ref().expect("a held chunk slot").chunk_id
}

/// A held chunk slot's text hash, for [`SlotsBy`].
pub(super) fn text_hash_of<'a>(chunks: &'a [Option<Slot>]) -> impl Fn(u32) -> &'a Key {
    move |s| &chunks[s as usize].as_ref().expect("a held chunk slot").text_hash
}

pub(super) fn slot<T>(slots: &mut Vec<Option<T>>, free: &mut Vec<u32>, value: T) -> u32 {
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
    /// The language its words are read in.
    pub fn lang(&self) -> super::analyzer::Lang {
        self.lang
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
    pub(super) fn holds_text(&self) -> bool {
        self.vectors.exact()
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
            ("learnt names", self.learnt_bytes()),
        ]
    }

    /// The page a chunk slot belongs to.
    pub(super) fn slug(&self, s: &Slot) -> &str {
        self.page_slots[s.page as usize].as_deref().unwrap_or("")
    }

    /// A chunk's hit (its text empty when the store holds it alone).
    pub(super) fn slot_hit(&self, s: &Slot, score: f32) -> ChunkHit {
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
    pub(super) fn embed_text(&self, s: &Slot) -> String {
        self.slot_hit(s, 0.0).embed_text()
    }

    /// How many live chunks have no vector yet.
    pub fn unembedded_count(&self) -> usize {
        self.unembedded
    }

    /// `v` (already unit length, or empty for "no vector yet") into a slot.
    pub(super) fn put_vector(&mut self, slot: u32, v: &[f32]) {
        self.vectors.put(slot as usize, v, self.chunks.len());
    }

    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    pub fn chunk_count(&self) -> usize {
        self.chunks.len() - self.free_chunks.len() - self.chunk_text.removed.len()
    }

    pub(super) fn hit(&self, slot: u32, score: f32) -> ChunkHit {
        self.slot_hit(self.chunks[slot as usize].as_ref().expect("a live chunk slot"), score)
    }

    /// A chunk's id, to order ties by (a removed slot's sorts first).
    pub(super) fn chunk_id(&self, slot: u32) -> Option<&Key> {
        self.chunks[slot as usize].as_ref().map(|c| &c.chunk_id)
    }

    pub(super) fn embedded(&self, slot: usize) -> bool {
        self.chunks.get(slot).and_then(Option::as_ref).is_some_and(|s| s.embedded)
    }

    /// Whether chunk `slot` belongs to a page `allow`ed (every page when `None`).
    pub(super) fn allowed(&self, slot: usize, allow: Option<&std::collections::HashSet<String>>) -> bool {
        allow.is_none_or(|a| self.chunks[slot].as_ref().is_some_and(|c| a.contains(self.slug(c))))
    }
}
