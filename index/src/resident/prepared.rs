//! A committed batch tokenised, before any lock is taken, and what a page is named by.

use super::analyzer::{Lang, terms_in};
use super::learnt::{Lesson, lessons};
use crate::store::{ChunkHit, Json, PageRecord, StoredChunk, WriteBatch};
use crate::vectors::unit;
use cairn_ingest::chunk::PATH_SEPARATOR;
use cairn_ingest::{ParsedPage, normalize_name};

/// The hash of a page's body: its chunks' text without heading lines, words lower-cased and
/// joined by single spaces (two pages with this equal say the same thing beyond their names).
/// SHA-256, not std's hasher: it is saved in snapshots, so it must not change with the compiler.
pub(super) fn body_hash(chunks: &[PreparedChunk]) -> u64 {
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

/// A chunk ready to go in: its hit (score 0), its tokenised search text, the hash of the text the
/// model embeds, and its unit vector once it has one.
#[derive(Debug, Clone)]
pub struct PreparedChunk {
    pub(super) hit: ChunkHit,
    /// The terms of its heading path (which starts with the page title), and of its text.
    pub(super) head_terms: Vec<String>,
    pub(super) terms: Vec<String>,
    pub(super) text_hash: String,
    pub(super) vector: Option<Box<[f32]>>,
}

/// A page ready to go in.
#[derive(Debug, Clone)]
pub struct PreparedPage {
    pub(super) record: PageRecord,
    pub(super) names: Vec<String>,
    pub(super) name_terms: Vec<String>,
    pub(super) lessons: Vec<Lesson>,
    pub(super) chunks: Vec<PreparedChunk>,
}

/// A committed batch, tokenised: the expensive half of applying it, done before any lock is taken.
#[derive(Debug, Clone, Default)]
pub struct Prepared {
    pub(super) upserts: Vec<PreparedPage>,
    pub(super) removals: Vec<String>,
}

impl PreparedPage {
    /// A stored page and its stored chunks, its words read in `lang`.
    pub fn stored(record: PageRecord, chunks: Vec<StoredChunk>, lang: Lang) -> Self {
        let mut names = vec![
            record.slug.clone(),
            normalize_name(&record.title),
            normalize_name(&file_name(&record.path)),
        ];
        names.extend(record.aliases.iter().map(|a| normalize_name(a)));
        let name_terms = terms_in(lang, &names_text(&record.title, &record.aliases));
        let lessons = lessons(&record, chunks.iter().map(|c| c.hit.text.as_str()), lang);
        let chunks = chunks
            .into_iter()
            .map(|c| PreparedChunk {
                head_terms: terms_in(lang, &c.hit.heading_path),
                terms: terms_in(lang, &c.hit.text),
                hit: c.hit,
                text_hash: c.text_hash,
                vector: c.vector.map(unit),
            })
            .collect();
        Self { record: PageRecord { score: 0.0, ..record }, names, name_terms, lessons, chunks }
    }

    fn parsed(page: &ParsedPage, vectors: &[Option<Vec<f32>>], mtime_ms: i64, lang: Lang) -> Self {
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
                StoredChunk { hit, text_hash: c.text_hash.clone(), vector: v.clone() }
            })
            .collect();
        Self::stored(record, chunks, lang)
    }
}

impl Prepared {
    /// Tokenise a batch the writer has committed, in its source's language.
    pub fn batch(batch: &WriteBatch, lang: Lang) -> Self {
        Self {
            upserts: batch
                .upserts
                .iter()
                .map(|w| PreparedPage::parsed(&w.page, &w.vectors, w.mtime_ms, lang))
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
