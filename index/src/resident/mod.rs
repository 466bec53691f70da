//! The resident engine: a source held in memory for reading, its pages, its chunks with their
//! vectors, BM25 inverted indexes over chunk text and over page names, and the exact-name map.
//! LanceDB stays the store of record: a resident index is loaded from a source's tables once,
//! then kept current by applying every batch the writer commits ([`Resident::apply`]) and every
//! set of vectors it attaches later ([`Resident::apply_vectors`]), each on a blocking thread. A
//! chunk without a vector yet is found by the keyword and name arms, not by the vector arm, and
//! counts as pending.
//!
//! Why: each LanceDB read costs tens of milliseconds here (its full-text search alone 67 ms over
//! three sources; BENCHMARKS.md), far above a 20 ms query budget, while the same work in memory
//! over FOLDOC (14k chunks) takes about a millisecond. Text is tokenised exactly as LanceDB's
//! full-text index does (its own tokenizer crate with LanceDB's defaults: simple split, tokens
//! over 40 bytes dropped, lowercase, English stemming, English stop words, ASCII folding), and
//! scored with the same BM25 (k1 1.2, b 0.75, idf ln(1 + (N − n + ½)/(n + ½))), a chunk's heading
//! path kept apart from its text (BM25F, [`Fields`]; run together, the scores are LanceDB's);
//! vectors are scored by exact cosine, as LanceDB does below its vector-index threshold.
//!
//! The parts, each in its own file:
//! - [`analyzer`]: the words every keyword match in the product reads;
//! - [`keyword`], `postings` and `vocabulary`: the BM25F index (these and the analyzer build
//!   without LanceDB, for the keyword-engine comparison in `scripts/bench/keyword`);
//! - `prepared`: a batch tokenised before any lock is taken;
//! - `slots`: the index itself, chunk and page slots, and `keys`, the maps of slots by id;
//! - `apply`: the one way in (a prepared batch, or vectors);
//! - [`compounds`]: a query's compound words read as the parts the source holds;
//! - `arms`: what a search reads (keyword, vector, title and name arms);
//! - [`learnt`]: names the vault teaches its pages (short forms its text defines, link texts);
//! - `chunk_file` and `files`: where chunk text and exact vectors go past a source's limit;
//! - [`snapshot`]: the index saved and read back whole;
//! - `shared`: [`Resident`], the index behind its lock, whose changes and reads run on blocking
//!   threads.

pub mod analyzer;
pub mod compounds;
pub mod keyword;
mod postings;
mod vocabulary;
mod wire;

#[cfg(feature = "storage")]
mod apply;
#[cfg(feature = "storage")]
mod arms;
#[cfg(feature = "storage")]
mod chunk_file;
#[cfg(feature = "storage")]
mod files;
#[cfg(feature = "storage")]
mod keys;
#[cfg(feature = "storage")]
pub mod learnt;
#[cfg(feature = "storage")]
mod prepared;
#[cfg(feature = "storage")]
mod shared;
#[cfg(feature = "storage")]
mod slots;
#[cfg(feature = "storage")]
pub mod snapshot;
#[cfg(all(test, feature = "storage"))]
mod tests;

pub use analyzer::{LANGUAGE_CODES, Lang, is_stop_word, is_stop_word_in, terms, terms_in};
pub use compounds::QueryTerms;
pub use keyword::Fields;
#[cfg(feature = "storage")]
pub use learnt::{LearntPage, Lesson, Teaching};
#[cfg(feature = "storage")]
pub use prepared::{Prepared, PreparedChunk, PreparedPage, file_name, names_text};
#[cfg(feature = "storage")]
pub use shared::Resident;
#[cfg(feature = "storage")]
pub use slots::ResidentIndex;
#[cfg(feature = "storage")]
pub use snapshot::Stamp;
