//! `cairn-ingest`: everything about turning a folder of markdown notes into pages and chunks,
//! as pure, synchronous functions.
//!
//! It owns: paths → slugs ([`slugify_path`]), the one name normalisation ([`normalize_name`]),
//! frontmatter → title/aliases/tags/type, markdown → heading-aware chunks with line ranges,
//! wikilinks, content hashes, scanning a source root, knowing a source's folder again and the
//! guard that keeps a vanished folder from emptying the index, and the fs-event debounce state machine
//! (time injected). It does not own threads, async runtimes, storage or models: no actix,
//! tokio, LanceDB or ort here. Bad files are values ([`Error`]), never panics.

mod budget;
pub mod chunk;
pub mod debounce;
pub mod definitions;
mod error;
pub mod folder;
pub mod frontmatter;
pub mod fuzzy;
mod hash;
pub mod markdown;
pub mod page;
pub mod placeholder;
pub mod scan;
pub mod section;
pub mod slug;

pub use budget::{Budget, OverBudget};
pub use chunk::{
    CHUNKER_VERSION, Chunk, ChunkOptions, MAX_NAME_CHARS, estimate_tokens, without_heading_path,
};
pub use debounce::{Debouncer, RawEvent, Settled};
pub use error::{Error, Result};
pub use folder::{
    Consent, FolderIdentity, FolderUnavailable, Glance, HeldRemovals, Reading, RecentRemovals, Unavailable,
    Verdict, judge,
};
pub use hash::hex_digest;
pub use markdown::Link;
pub use page::{
    ParseOptions, ParsedPage, TitleSource, content_hash_of, parse_page, read_page, read_within, rel_string,
};
pub use scan::{PathFilter, ScanOptions, ScanReport, ScannedFile, read_scanned, scan, within_root};
pub use slug::{
    VARIANT_MARK, is_markdown, is_slug_of, normalize_name, page_id, slug_base, slug_changes, slug_variant,
    slugify_id, slugify_path, tokens,
};
