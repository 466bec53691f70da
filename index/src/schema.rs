//! The Arrow schemas of a source's tables, in one place, with the versions they belong to.

use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::sync::Arc;

/// Bumped whenever a table's columns or their meaning change.
/// 2: chunk rows carry their page's content hash, vectors may be absent (attached later), and
/// the manifest row records where the source's folder is.
pub const SCHEMA_VERSION: i32 = 2;

/// `<source>_pages`: one row per page.
pub fn pages() -> SchemaRef {
    let list = || DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
    Arc::new(Schema::new(vec![
        Field::new("slug", DataType::Utf8, false),
        Field::new("path", DataType::Utf8, false),
        Field::new("title", DataType::Utf8, false),
        Field::new("title_norm", DataType::Utf8, false),
        Field::new("aliases", list(), false),
        Field::new("aliases_norm", list(), false),
        // Title and aliases as one text: the title/alias arm's full-text field.
        Field::new("names", DataType::Utf8, false),
        Field::new("tags", list(), false),
        Field::new("page_type", DataType::Utf8, true),
        Field::new("frontmatter", DataType::Utf8, false),
        Field::new("links", DataType::Utf8, false),
        Field::new("content_hash", DataType::Utf8, false),
        Field::new("mtime_ms", DataType::Int64, false),
        Field::new("bytes", DataType::Int64, false),
        Field::new("chunk_count", DataType::Int32, false),
        Field::new("problems", DataType::Utf8, false),
    ]))
}

/// `<source>_chunks`: one row per chunk, with its vector.
pub fn chunks(dim: usize) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("slug", DataType::Utf8, false),
        Field::new("ordinal", DataType::Int32, false),
        Field::new("heading_path", DataType::Utf8, false),
        Field::new("text", DataType::Utf8, false),
        // Heading path + text: what was embedded, and the keyword arm's full-text field.
        Field::new("search_text", DataType::Utf8, false),
        Field::new("line_start", DataType::Int32, false),
        Field::new("line_end", DataType::Int32, false),
        Field::new("tokens", DataType::Int32, false),
        Field::new("text_hash", DataType::Utf8, false),
        // The content hash of the page row this chunk was written with: a page whose chunks
        // carry another hash (a crash between the two writes of a commit) is redone.
        Field::new("page_hash", DataType::Utf8, false),
        // Absent until the model has embedded the chunk (pages are searchable by name and
        // keyword first; vectors are attached by later commits).
        Field::new("vector", vector_type(dim), true),
    ]))
}

/// The `vector` column's type.
pub fn vector_type(dim: usize) -> DataType {
    DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, true)), dim as i32)
}

/// What a vector update writes: the key and the vector.
pub fn chunk_vectors(dim: usize) -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("vector", vector_type(dim), true),
    ]))
}

/// `<source>_manifest`: one row saying how the source's tables were built, and where its folder
/// is (so a process given no folders serves the sources the database holds).
pub fn manifest() -> SchemaRef {
    Arc::new(Schema::new(vec![
        // Always "source": the key that replaces the row in one commit.
        Field::new("key", DataType::Utf8, false),
        Field::new("schema_version", DataType::Int32, false),
        Field::new("chunker_version", DataType::Int32, false),
        Field::new("model_id", DataType::Utf8, false),
        Field::new("dim", DataType::Int32, false),
        Field::new("root", DataType::Utf8, true),
        // JSON lists of globs.
        Field::new("include", DataType::Utf8, false),
        Field::new("exclude", DataType::Utf8, false),
    ]))
}
