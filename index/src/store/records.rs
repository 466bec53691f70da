//! The values a source's tables hold and hand out: what is written (pages with their vectors),
//! what is read (pages, chunk hits), and what a whole-source load returns.

use cairn_ingest::ParsedPage;
use std::collections::HashMap;

/// The stored state of a page, enough to decide whether a file changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageState {
    pub path: String,
    pub content_hash: String,
    /// The file's modification time and size when it was indexed.
    pub mtime_ms: i64,
    pub bytes: i64,
    /// Indexed without problems and with rows that agree (a page with problems is re-read on
    /// every scan so they are reported again until fixed; one whose rows disagree is redone).
    pub clean: bool,
}

impl PageState {
    /// The state of a page whose rows agree (as a load of consistent tables finds it).
    pub fn of(r: &PageRecord) -> Self {
        Self {
            path: r.path.clone(),
            content_hash: r.content_hash.clone(),
            mtime_ms: r.mtime_ms,
            bytes: r.bytes,
            clean: r.problems.text() == "[]",
        }
    }
}

/// The names a page can be looked up by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageNames {
    pub slug: String,
    pub title_norm: String,
    pub aliases_norm: Vec<String>,
    /// The file name (without folder and extension), normalised.
    pub file_name_norm: String,
}

/// A page to write, with one vector per chunk (in chunk order) where one is known: chunks
/// without one are written without, and get theirs in a later commit.
#[derive(Debug, Clone)]
pub struct PageWrite {
    pub page: ParsedPage,
    pub vectors: Vec<Option<Vec<f32>>>,
    pub mtime_ms: i64,
}

/// One commit's worth of changes to a source.
#[derive(Debug, Clone, Default)]
pub struct WriteBatch {
    pub upserts: Vec<PageWrite>,
    /// Slugs of pages to remove.
    pub removals: Vec<String>,
}

impl WriteBatch {
    pub fn is_empty(&self) -> bool {
        self.upserts.is_empty() && self.removals.is_empty()
    }
}

/// A chunk found by the keyword or vector arm.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChunkHit {
    pub slug: String,
    pub chunk_id: String,
    pub ordinal: i32,
    pub heading_path: String,
    pub text: String,
    pub line_start: i32,
    pub line_end: i32,
    /// BM25 score (keyword arm) or cosine similarity (vector arm).
    pub score: f32,
}

impl ChunkHit {
    /// The text given to the model: the heading path, then the chunk (as
    /// [`cairn_ingest::Chunk::embed_text`]).
    pub fn embed_text(&self) -> String {
        format!("{}\n\n{}", self.heading_path, self.text)
    }
}

/// A stored page.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PageRecord {
    pub slug: String,
    pub path: String,
    pub title: String,
    pub aliases: Vec<String>,
    pub tags: Vec<String>,
    pub page_type: Option<String>,
    pub frontmatter: Json,
    pub links: Json,
    pub content_hash: String,
    pub mtime_ms: i64,
    /// The file's size when it was indexed.
    #[serde(default)]
    pub bytes: i64,
    pub chunk_count: i32,
    pub problems: Json,
    /// Full-text score on title + aliases (title arm only; 0 otherwise).
    #[serde(default)]
    pub score: f32,
    /// How many pages of its source (itself included) have this page's body word for word
    /// (its text without headings): above one, the body is a template (the page says nothing
    /// beyond its name). Filled when read from a resident index; 0 when unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub body_shared_by: u32,
}

/// A JSON value held as its compact text, parsed when asked for. Held as a tree of
/// `serde_json::Value`s (an ordered map per object), a page's links took about 20 KiB a page, ten
/// times their text: at a million chunks, 2.8 GiB of a source's 4.4.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Json(Box<str>);

impl Json {
    /// The JSON of a value (`null` if it cannot be written as JSON).
    pub fn of<T: serde::Serialize + ?Sized>(v: &T) -> Self {
        Self(serde_json::to_string(v).unwrap_or_else(|_| "null".into()).into())
    }

    /// Text as the tables hold it: kept if it is JSON, else `null`.
    pub fn parse(text: &str) -> Self {
        match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => Self(text.into()),
            Err(_) => Self::default(),
        }
    }

    /// Text this program wrote as JSON (a snapshot of the resident index), kept unchecked: a
    /// damaged text reads back as `null` from [`Json::value`].
    pub(crate) fn trusted(text: String) -> Self {
        Self(text.into_boxed_str())
    }

    pub fn text(&self) -> &str {
        &self.0
    }

    pub fn value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

impl Default for Json {
    fn default() -> Self {
        Self("null".into())
    }
}

impl From<serde_json::Value> for Json {
    fn from(v: serde_json::Value) -> Self {
        Self::of(&v)
    }
}

impl serde::Serialize for Json {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.value().serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        serde_json::Value::deserialize(d).map(Self::from)
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A chunk as stored: its hit (score 0; heading path and text, which make the text it is
/// searched and embedded by: [`ChunkHit::embed_text`]), the hash of that text, and its vector
/// once it has one.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredChunk {
    pub hit: ChunkHit,
    pub text_hash: String,
    pub vector: Option<Vec<f32>>,
}

/// Everything a source holds, read in one pass, and what that pass found wrong.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Every page row with its chunk rows in order.
    pub pages: Vec<(PageRecord, Vec<StoredChunk>)>,
    /// Every page's state; a page whose rows disagree is not `clean` and has no content hash,
    /// so the next look at its file writes it again.
    pub states: HashMap<String, PageState>,
    /// Pages whose chunk rows do not match their page row (a crash between the two writes of a
    /// commit), by slug.
    pub inconsistent: Vec<String>,
    /// Slugs with chunk rows and no page row (a crash after the chunks of a new page were
    /// written): to be removed.
    pub orphans: Vec<String>,
}

/// Records built by hand, for unit tests of the read and ranking layers.
#[cfg(any(test, feature = "testing"))]
impl PageRecord {
    /// A page at `<slug>.md` with these names and `chunk_count` chunks; everything else empty.
    pub fn named(slug: &str, title: &str, aliases: &[&str], chunk_count: usize) -> Self {
        Self {
            slug: slug.into(),
            path: format!("{slug}.md"),
            title: title.into(),
            aliases: aliases.iter().map(|a| a.to_string()).collect(),
            tags: vec![],
            page_type: None,
            frontmatter: Json::default(),
            links: Json::default(),
            content_hash: String::new(),
            mtime_ms: 0,
            bytes: 0,
            chunk_count: chunk_count as i32,
            problems: Json::default(),
            score: 0.0,
            body_shared_by: 0,
        }
    }
}

#[cfg(any(test, feature = "testing"))]
impl ChunkHit {
    /// Chunk `ordinal` of a page (id `<slug>#<ordinal>`, on line `ordinal + 1`), score 0.
    pub fn numbered(slug: &str, ordinal: usize, heading_path: &str, text: &str) -> Self {
        Self {
            slug: slug.into(),
            chunk_id: format!("{slug}#{ordinal}"),
            ordinal: ordinal as i32,
            heading_path: heading_path.into(),
            text: text.into(),
            line_start: ordinal as i32 + 1,
            line_end: ordinal as i32 + 1,
            score: 0.0,
        }
    }
}
