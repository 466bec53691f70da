//! Per-source LanceDB storage: each source has its own tables (`<id>_pages`, `<id>_chunks`,
//! `<id>_manifest`), so a bulk source can neither fill another's candidate pool nor slow its
//! writes. Writes are batched and idempotent; reads are the primitives the query engine gathers
//! from, each over one source.
//!
//! Consistency: the connection uses `read_consistency_interval = 0`, so every read first checks
//! for a newer table version (one manifest look-up, well under a millisecond on local disk) and
//! sees every committed write, including those of another process (`cairn watch` writing while
//! `cairn search` reads).

use crate::error::{Error, Result};
use crate::schema;
use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, Int32Array, Int64Array, ListArray, RecordBatch,
    RecordBatchIterator, StringArray,
};
use arrow_schema::{Field, SchemaRef};
use cairn_ingest::chunk::PATH_SEPARATOR;
use cairn_ingest::{CHUNKER_VERSION, ParsedPage};
use futures::TryStreamExt;
use lancedb::index::Index;
use lancedb::index::scalar::{FtsIndexBuilder, FullTextSearchQuery};
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::{Connection, DistanceType, Table};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// How a source's tables were built; a mismatch with the running build means a rebuild.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Manifest {
    pub schema_version: i32,
    pub chunker_version: i32,
    pub model_id: String,
    pub dim: usize,
}

impl Manifest {
    /// The manifest of this build with this model.
    pub fn current(model_id: &str, dim: usize) -> Self {
        Self {
            schema_version: schema::SCHEMA_VERSION,
            chunker_version: CHUNKER_VERSION as i32,
            model_id: model_id.into(),
            dim,
        }
    }
}

/// A database: a local folder or an object-store URI (`s3://…`, passed to LanceDB unchanged).
#[derive(Clone)]
pub struct Database {
    conn: Connection,
    uri: String,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("uri", &self.uri).finish()
    }
}

fn is_local(uri: &str) -> bool {
    !uri.contains("://")
}

impl Database {
    /// Open with strong read consistency: every read sees every commit made before it, by
    /// this process or another.
    pub async fn open(uri: &str) -> Result<Self> {
        Self::open_with_consistency(uri, Some(Duration::ZERO)).await
    }

    /// Open with reads that check for newer commits at most every `interval` (`None`: never;
    /// the benchmarks use it to measure what strong consistency costs a read).
    pub async fn open_with_consistency(uri: &str, interval: Option<Duration>) -> Result<Self> {
        let err = |message: String| Error::Storage { source_id: "*".into(), uri: uri.into(), message };
        if is_local(uri) {
            std::fs::create_dir_all(uri)
                .map_err(|e| err(format!("cannot create the database folder: {e}")))?;
        }
        let mut builder = lancedb::connect(uri);
        if let Some(d) = interval {
            builder = builder.read_consistency_interval(d);
        }
        let conn = builder.execute().await.map_err(|e| err(e.to_string()))?;
        Ok(Self { conn, uri: uri.into() })
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Ids of the sources that have tables here.
    pub async fn source_ids(&self) -> Result<Vec<String>> {
        let names = self.conn.table_names().execute().await.map_err(|e| self.err("*", e))?;
        let mut ids: Vec<String> =
            names.iter().filter_map(|n| n.strip_suffix("_manifest").map(str::to_string)).collect();
        ids.sort();
        Ok(ids)
    }

    fn err(&self, source_id: &str, e: impl std::fmt::Display) -> Error {
        Error::Storage { source_id: source_id.into(), uri: self.uri.clone(), message: e.to_string() }
    }

    /// Open a source's tables, creating them when the source is new. Tables built by another
    /// schema, chunker or model are refused with [`Error::ManifestMismatch`]: the caller
    /// rebuilds ([`Database::rebuild_source`]) instead of mixing vectors.
    pub async fn open_source(&self, id: &str, want: &Manifest) -> Result<SourceStore> {
        let names = self.conn.table_names().execute().await.map_err(|e| self.err(id, e))?;
        let has = |suffix: &str| names.iter().any(|n| *n == format!("{id}_{suffix}"));
        if !has("manifest") {
            // New, or a creation that never finished: (re)create.
            return self.rebuild_source(id, want).await;
        }
        let store = self.open_tables(id, want.dim).await?;
        let found = store.read_manifest().await?;
        if found.as_ref() != Some(want) {
            return Err(Error::ManifestMismatch {
                source_id: id.into(),
                found: found.map_or_else(|| "nothing".into(), |m| format!("{m:?}")),
                want: format!("{want:?}"),
            });
        }
        Ok(store)
    }

    /// Open a source as it is, whatever built it (for reading pages back, not for writing
    /// vectors). Unknown sources are an error that lists the known ones.
    pub async fn open_existing(&self, id: &str) -> Result<SourceStore> {
        let known = self.source_ids().await?;
        if !known.iter().any(|k| k == id) {
            return Err(self.err(
                id,
                format!(
                    "no such source here; known sources: {}",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ),
            ));
        }
        let probe = self.open_tables(id, 0).await?;
        let dim = probe.read_manifest().await?.map_or(0, |m| m.dim);
        Ok(SourceStore { dim, ..probe })
    }

    /// Drop and recreate a source's tables (empty). The manifest is written last, so a crash
    /// in between leaves a source that is rebuilt again on the next open.
    pub async fn rebuild_source(&self, id: &str, manifest: &Manifest) -> Result<SourceStore> {
        for suffix in ["manifest", "chunks", "pages"] {
            let name = format!("{id}_{suffix}");
            if let Err(e) = self.conn.drop_table(&name, &[]).await
                && !matches!(e, lancedb::Error::TableNotFound { .. })
            {
                return Err(self.err(id, format!("dropping {name}: {e}")));
            }
        }
        let create = |name: String, schema: SchemaRef| {
            let conn = self.conn.clone();
            async move { conn.create_empty_table(name, schema).execute().await }
        };
        create(format!("{id}_pages"), schema::pages()).await.map_err(|e| self.err(id, e))?;
        create(format!("{id}_chunks"), schema::chunks(manifest.dim)).await.map_err(|e| self.err(id, e))?;
        let m = create(format!("{id}_manifest"), schema::manifest()).await.map_err(|e| self.err(id, e))?;
        let row = RecordBatch::try_new(
            schema::manifest(),
            vec![
                Arc::new(Int32Array::from(vec![manifest.schema_version])),
                Arc::new(Int32Array::from(vec![manifest.chunker_version])),
                Arc::new(StringArray::from(vec![manifest.model_id.as_str()])),
                Arc::new(Int32Array::from(vec![manifest.dim as i32])),
            ],
        )
        .map_err(|e| self.err(id, e))?;
        m.add(row).execute().await.map_err(|e| self.err(id, e))?;
        self.open_tables(id, manifest.dim).await
    }

    async fn open_tables(&self, id: &str, dim: usize) -> Result<SourceStore> {
        let open = |suffix: &str| {
            let (conn, name) = (self.conn.clone(), format!("{id}_{suffix}"));
            async move { conn.open_table(name).execute().await }
        };
        let path_hint =
            if is_local(&self.uri) { format!("{}/{id}_*.lance", self.uri) } else { self.uri.clone() };
        let wrap = |e: lancedb::Error| Error::Storage {
            source_id: id.into(),
            uri: path_hint.clone(),
            message: format!("{e}; if the folder is damaged, run `cairn reindex --source {id}`"),
        };
        Ok(SourceStore {
            id: id.into(),
            uri: self.uri.clone(),
            dim,
            pages: open("pages").await.map_err(wrap)?,
            chunks: open("chunks").await.map_err(wrap)?,
            manifest: open("manifest").await.map_err(wrap)?,
        })
    }
}

/// The stored state of a page, enough to decide whether a file changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageState {
    pub path: String,
    pub content_hash: String,
    /// The file's modification time and size when it was indexed.
    pub mtime_ms: i64,
    pub bytes: i64,
    /// The page was indexed without problems (a page with problems is re-read on every sync
    /// so they are reported again until fixed).
    pub clean: bool,
}

/// The names a page can be looked up by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageNames {
    pub slug: String,
    pub title_norm: String,
    pub aliases_norm: Vec<String>,
}

/// A page to write, with one vector per chunk (in chunk order).
#[derive(Debug, Clone)]
pub struct PageWrite {
    pub page: ParsedPage,
    pub vectors: Vec<Vec<f32>>,
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
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
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

/// A stored page.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PageRecord {
    pub slug: String,
    pub path: String,
    pub title: String,
    pub aliases: Vec<String>,
    pub tags: Vec<String>,
    pub page_type: Option<String>,
    pub frontmatter: serde_json::Value,
    pub links: serde_json::Value,
    pub content_hash: String,
    pub mtime_ms: i64,
    pub chunk_count: i32,
    pub problems: serde_json::Value,
    /// Full-text score on title + aliases (title arm only; 0 otherwise).
    pub score: f32,
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
            frontmatter: serde_json::Value::Null,
            links: serde_json::Value::Null,
            content_hash: String::new(),
            mtime_ms: 0,
            chunk_count: chunk_count as i32,
            problems: serde_json::Value::Null,
            score: 0.0,
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

/// One source's tables.
#[derive(Clone)]
pub struct SourceStore {
    id: String,
    uri: String,
    dim: usize,
    pages: Table,
    chunks: Table,
    manifest: Table,
}

impl std::fmt::Debug for SourceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceStore").field("id", &self.id).field("uri", &self.uri).finish()
    }
}

const PAGE_COLUMNS: [&str; 12] = [
    "slug",
    "path",
    "title",
    "aliases",
    "tags",
    "page_type",
    "frontmatter",
    "links",
    "content_hash",
    "mtime_ms",
    "chunk_count",
    "problems",
];
const CHUNK_COLUMNS: [&str; 7] = ["slug", "id", "ordinal", "heading_path", "text", "line_start", "line_end"];

/// `columns` plus a scoring column (`_score`, `_distance`), named so Lance does not have to add
/// it implicitly (which it warns is deprecated).
fn with_score(columns: &[&str], score: &'static str) -> Select {
    Select::columns(&columns.iter().copied().chain([score]).collect::<Vec<_>>())
}

/// Chunks in a source before its vectors get an approximate (IVF-PQ) index.
pub const VECTOR_INDEX_MIN_ROWS: usize = 100_000;

/// A SQL string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn in_list(column: &str, values: &[&str]) -> String {
    format!("{column} IN ({})", values.iter().map(|v| quote(v)).collect::<Vec<_>>().join(", "))
}

impl SourceStore {
    pub fn id(&self) -> &str {
        &self.id
    }

    fn err(&self, e: impl std::fmt::Display) -> Error {
        Error::Storage { source_id: self.id.clone(), uri: self.uri.clone(), message: e.to_string() }
    }

    async fn collect(
        &self,
        stream: lancedb::Result<lancedb::arrow::SendableRecordBatchStream>,
    ) -> Result<Vec<RecordBatch>> {
        stream.map_err(|e| self.err(e))?.try_collect::<Vec<_>>().await.map_err(|e| self.err(e))
    }

    async fn read_manifest(&self) -> Result<Option<Manifest>> {
        let batches = self.collect(self.manifest.query().limit(1).execute().await).await?;
        let Some(b) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(None) };
        Ok(Some(Manifest {
            schema_version: int32(b, "schema_version")?.value(0),
            chunker_version: int32(b, "chunker_version")?.value(0),
            model_id: string(b, "model_id")?.value(0).to_string(),
            dim: int32(b, "dim")?.value(0) as usize,
        }))
    }

    /// Every stored page's path and content hash, by slug.
    pub async fn page_states(&self) -> Result<HashMap<String, PageState>> {
        let columns = ["slug", "path", "content_hash", "mtime_ms", "bytes", "problems"];
        let q = self.pages.query().select(Select::columns(&columns));
        let mut out = HashMap::new();
        for b in self.collect(q.execute().await).await? {
            let (slug, path, hash) = (string(&b, "slug")?, string(&b, "path")?, string(&b, "content_hash")?);
            let (mtime, bytes) = (column::<Int64Array>(&b, "mtime_ms")?, column::<Int64Array>(&b, "bytes")?);
            let problems = string(&b, "problems")?;
            for i in 0..b.num_rows() {
                out.insert(
                    slug.value(i).to_string(),
                    PageState {
                        path: path.value(i).to_string(),
                        content_hash: hash.value(i).to_string(),
                        mtime_ms: mtime.value(i),
                        bytes: bytes.value(i),
                        clean: problems.value(i) == "[]",
                    },
                );
            }
        }
        Ok(out)
    }

    /// Every page's names: slug, normalised title and normalised aliases (`cairn stats` counts
    /// the names several pages claim).
    pub async fn names(&self) -> Result<Vec<PageNames>> {
        let q = self.pages.query().select(Select::columns(&["slug", "title_norm", "aliases_norm"]));
        let mut out = Vec::new();
        for b in self.collect(q.execute().await).await? {
            let (slug, title) = (string(&b, "slug")?, string(&b, "title_norm")?);
            let aliases = column::<ListArray>(&b, "aliases_norm")?;
            for i in 0..b.num_rows() {
                let v = aliases.value(i);
                let a = v.as_any().downcast_ref::<StringArray>().ok_or_else(|| self.err("aliases_norm"))?;
                out.push(PageNames {
                    slug: slug.value(i).into(),
                    title_norm: title.value(i).into(),
                    aliases_norm: (0..a.len()).map(|j| a.value(j).to_string()).collect(),
                });
            }
        }
        Ok(out)
    }

    /// Every chunk's page, ordinal and text hash, sorted: with [`SourceStore::pages`] enough to
    /// compare two indexes of the same folder row for row (tests of crash recovery and replay).
    pub async fn chunk_keys(&self) -> Result<Vec<(String, i32, String)>> {
        let q = self.chunks.query().select(Select::columns(&["slug", "ordinal", "text_hash"]));
        let mut out = Vec::new();
        for b in self.collect(q.execute().await).await? {
            let (slug, hash, ord) = (string(&b, "slug")?, string(&b, "text_hash")?, int32(&b, "ordinal")?);
            for i in 0..b.num_rows() {
                out.push((slug.value(i).to_string(), ord.value(i), hash.value(i).to_string()));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Every stored page, sorted by slug.
    pub async fn all_pages(&self) -> Result<Vec<PageRecord>> {
        let q = self.pages.query().select(Select::columns(&PAGE_COLUMNS));
        let mut pages = page_records(&self.collect(q.execute().await).await?)?;
        pages.sort_by(|a, b| a.slug.cmp(&b.slug));
        Ok(pages)
    }

    /// The `vector` column of a batch, one vector per row.
    fn vectors(&self, b: &RecordBatch) -> Result<Vec<Vec<f32>>> {
        let vectors = column::<FixedSizeListArray>(b, "vector")?;
        let values = vectors
            .values()
            .as_any()
            .downcast_ref::<Float32Array>()
            .ok_or_else(|| self.err("vector values are not f32"))?;
        let dim = vectors.value_length() as usize;
        Ok((0..b.num_rows())
            .map(|i| {
                let start = vectors.value_offset(i) as usize;
                values.values()[start..start + dim].to_vec()
            })
            .collect())
    }

    /// Every page with its chunks (hit, search text, vector) in order: what a
    /// [`crate::resident::Resident`] is loaded from. Chunks of a page with no page row (a crash
    /// between the two writes, redone at the next reconcile) are left out.
    #[allow(clippy::type_complexity)]
    pub async fn resident_pages(&self) -> Result<Vec<(PageRecord, Vec<(ChunkHit, String, Vec<f32>)>)>> {
        let mut by_slug: HashMap<String, Vec<(ChunkHit, String, Vec<f32>)>> = HashMap::new();
        let columns: Vec<&str> = CHUNK_COLUMNS.iter().copied().chain(["search_text", "vector"]).collect();
        let q = self.chunks.query().select(Select::columns(&columns));
        for b in self.collect(q.execute().await).await? {
            // Equal scores and a stable sort: the hits stay in row order, aligned with the columns.
            let hits = chunk_hits(std::slice::from_ref(&b), |b| Ok(vec![0.0; b.num_rows()]))?;
            let text = string(&b, "search_text")?;
            for (i, (hit, v)) in hits.into_iter().zip(self.vectors(&b)?).enumerate() {
                by_slug.entry(hit.slug.clone()).or_default().push((hit, text.value(i).to_string(), v));
            }
        }
        let mut out = Vec::new();
        for page in self.all_pages().await? {
            let mut chunks = by_slug.remove(&page.slug).unwrap_or_default();
            chunks.sort_by_key(|(h, _, _)| h.ordinal);
            out.push((page, chunks));
        }
        Ok(out)
    }

    /// Stored vectors by the hash of the text they embed (any page of this source): unchanged
    /// text, a moved page or a renamed file is never embedded twice.
    pub async fn vectors_by_text_hash(&self, hashes: &[&str]) -> Result<HashMap<String, Vec<f32>>> {
        let mut out = HashMap::new();
        for group in hashes.chunks(512) {
            let q = self
                .chunks
                .query()
                .only_if(in_list("text_hash", group))
                .select(Select::columns(&["text_hash", "vector"]));
            for b in self.collect(q.execute().await).await? {
                let hash = string(&b, "text_hash")?;
                for (i, v) in self.vectors(&b)?.into_iter().enumerate() {
                    out.insert(hash.value(i).to_string(), v);
                }
            }
        }
        Ok(out)
    }

    /// Apply a batch: chunks first (in one `merge_insert` that also deletes the old chunks of
    /// every page it touches), then pages. A page row is written only after its chunks, so a
    /// crash between the two leaves the old content hash and the page is redone on restart.
    pub async fn write(&self, batch: &WriteBatch) -> Result<u64> {
        if batch.is_empty() {
            return self.version().await;
        }
        let touched: Vec<&str> = batch
            .upserts
            .iter()
            .map(|w| w.page.slug.as_str())
            .chain(batch.removals.iter().map(String::as_str))
            .collect();
        let chunk_rows = self.chunk_batch(&batch.upserts)?;
        let scope = in_list("slug", &touched);
        if chunk_rows.num_rows() > 0 {
            let mut m = self.chunks.merge_insert(&["id"]);
            m.when_not_matched_insert_all().when_not_matched_by_source_delete(Some(scope));
            let schema = chunk_rows.schema();
            m.execute(Box::new(RecordBatchIterator::new(vec![Ok(chunk_rows)], schema)))
                .await
                .map_err(|e| self.err(e))?;
        } else {
            self.chunks.delete(&scope).await.map_err(|e| self.err(e))?;
        }
        if batch.upserts.is_empty() {
            self.pages.delete(&in_list("slug", &touched)).await.map_err(|e| self.err(e))?;
        } else {
            let page_rows = self.page_batch(&batch.upserts)?;
            let mut m = self.pages.merge_insert(&["slug"]);
            m.when_matched_update_all(None).when_not_matched_insert_all();
            if !batch.removals.is_empty() {
                let removed: Vec<&str> = batch.removals.iter().map(String::as_str).collect();
                m.when_not_matched_by_source_delete(Some(in_list("slug", &removed)));
            }
            let schema = page_rows.schema();
            m.execute(Box::new(RecordBatchIterator::new(vec![Ok(page_rows)], schema)))
                .await
                .map_err(|e| self.err(e))?;
        }
        self.ensure_text_indexes().await?;
        self.version().await
    }

    fn chunk_batch(&self, upserts: &[PageWrite]) -> Result<RecordBatch> {
        let rows: Vec<(&ParsedPage, &cairn_ingest::Chunk, &Vec<f32>)> = upserts
            .iter()
            .flat_map(|w| w.page.chunks.iter().zip(&w.vectors).map(move |(c, v)| (&w.page, c, v)))
            .collect();
        for w in upserts {
            if w.vectors.len() != w.page.chunks.len() {
                return Err(self.err(format!(
                    "{}: {} vectors for {} chunks",
                    w.page.path,
                    w.vectors.len(),
                    w.page.chunks.len()
                )));
            }
        }
        let mut flat = Vec::with_capacity(rows.len() * self.dim);
        for (p, _, v) in &rows {
            if v.len() != self.dim {
                return Err(self.err(format!(
                    "{}: a vector of {} dimensions, the table has {}",
                    p.path,
                    v.len(),
                    self.dim
                )));
            }
            flat.extend_from_slice(v);
        }
        let paths: Vec<String> = rows.iter().map(|(_, c, _)| c.heading_path.join(PATH_SEPARATOR)).collect();
        let search: Vec<String> = rows.iter().map(|(_, c, _)| c.embed_text()).collect();
        let item = Arc::new(Field::new("item", arrow_schema::DataType::Float32, true));
        let vectors =
            FixedSizeListArray::try_new(item, self.dim as i32, Arc::new(Float32Array::from(flat)), None)
                .map_err(|e| self.err(e))?;
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, c, _)| c.id.as_str()))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|(p, _, _)| p.slug.as_str()))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, c, _)| c.ordinal as i32))),
            Arc::new(StringArray::from_iter_values(paths.iter())),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, c, _)| c.text.as_str()))),
            Arc::new(StringArray::from_iter_values(search.iter())),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, c, _)| c.line_start as i32))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, c, _)| c.line_end as i32))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|(_, c, _)| c.tokens as i32))),
            Arc::new(StringArray::from_iter_values(rows.iter().map(|(_, c, _)| c.text_hash.as_str()))),
            Arc::new(vectors),
        ];
        RecordBatch::try_new(schema::chunks(self.dim), columns).map_err(|e| self.err(e))
    }

    fn page_batch(&self, upserts: &[PageWrite]) -> Result<RecordBatch> {
        let pages: Vec<&ParsedPage> = upserts.iter().map(|w| &w.page).collect();
        let list = |f: &dyn Fn(&ParsedPage) -> &[String]| {
            let mut b = ListBuilder::new(StringBuilder::new());
            for p in &pages {
                for s in f(p) {
                    b.values().append_value(s);
                }
                b.append(true);
            }
            b.finish()
        };
        let json = |v: &dyn erased::Json| v.to_json();
        let names: Vec<String> =
            pages.iter().map(|p| crate::resident::names_text(&p.title, &p.aliases)).collect();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from_iter_values(pages.iter().map(|p| p.slug.as_str()))),
            Arc::new(StringArray::from_iter_values(pages.iter().map(|p| p.path.as_str()))),
            Arc::new(StringArray::from_iter_values(pages.iter().map(|p| p.title.as_str()))),
            Arc::new(StringArray::from_iter_values(
                pages.iter().map(|p| cairn_ingest::normalize_name(&p.title)),
            )),
            Arc::new(list(&|p| &p.aliases)),
            Arc::new(list(&|p| &p.aliases_normalized)),
            Arc::new(StringArray::from_iter_values(names.iter())),
            Arc::new(list(&|p| &p.tags)),
            Arc::new(StringArray::from(pages.iter().map(|p| p.page_type.clone()).collect::<Vec<_>>())),
            Arc::new(StringArray::from_iter_values(pages.iter().map(|p| json(&p.frontmatter)))),
            Arc::new(StringArray::from_iter_values(pages.iter().map(|p| json(&p.links)))),
            Arc::new(StringArray::from_iter_values(pages.iter().map(|p| p.content_hash.as_str()))),
            Arc::new(Int64Array::from_iter_values(upserts.iter().map(|w| w.mtime_ms))),
            Arc::new(Int64Array::from_iter_values(pages.iter().map(|p| p.bytes as i64))),
            Arc::new(Int32Array::from_iter_values(pages.iter().map(|p| p.chunks.len() as i32))),
            Arc::new(StringArray::from_iter_values(pages.iter().map(|p| json(&p.problems)))),
        ];
        RecordBatch::try_new(schema::pages(), columns).map_err(|e| self.err(e))
    }

    /// Full-text indexes exist once a table has rows (LanceDB cannot index an empty table).
    /// Rows written after the index was built are still searched (unindexed data is scanned)
    /// until [`SourceStore::optimize`] folds them in.
    async fn ensure_text_indexes(&self) -> Result<()> {
        for (table, column) in [(&self.chunks, "search_text"), (&self.pages, "names")] {
            let indices = table.list_indices().await.map_err(|e| self.err(e))?;
            if indices.iter().any(|i| i.columns.iter().any(|c| c == column)) {
                continue;
            }
            if table.count_rows(None).await.map_err(|e| self.err(e))? == 0 {
                continue;
            }
            table
                .create_index(&[column], Index::FTS(FtsIndexBuilder::default()))
                .execute()
                .await
                .map_err(|e| self.err(format!("building the full-text index on {column}: {e}")))?;
        }
        Ok(())
    }

    /// Compaction and index refresh: on a cadence, never per write. A vector index (IVF-PQ) is
    /// built once the chunks table reaches [`VECTOR_INDEX_MIN_ROWS`]; below that exact search
    /// is fast (16 ms over 11k rows here) and loses nothing.
    pub async fn optimize(&self) -> Result<()> {
        self.ensure_text_indexes().await?;
        if self.chunks.count_rows(None).await.map_err(|e| self.err(e))? >= VECTOR_INDEX_MIN_ROWS {
            let indices = self.chunks.list_indices().await.map_err(|e| self.err(e))?;
            if !indices.iter().any(|i| i.columns.iter().any(|c| c == "vector")) {
                self.chunks
                    .create_index(&["vector"], Index::Auto)
                    .execute()
                    .await
                    .map_err(|e| self.err(format!("building the vector index: {e}")))?;
            }
        }
        for table in [&self.chunks, &self.pages] {
            table.optimize(lancedb::table::OptimizeAction::All).await.map_err(|e| self.err(e))?;
        }
        Ok(())
    }

    /// The chunks table's version (it moves with every write).
    pub async fn version(&self) -> Result<u64> {
        self.chunks.version().await.map_err(|e| self.err(e))
    }

    pub async fn counts(&self) -> Result<(usize, usize)> {
        let pages = self.pages.count_rows(None).await.map_err(|e| self.err(e))?;
        let chunks = self.chunks.count_rows(None).await.map_err(|e| self.err(e))?;
        Ok((pages, chunks))
    }

    /// Keyword arm: BM25 over chunk text (with its heading path), best first.
    pub async fn keyword(&self, query: &str, k: usize) -> Result<Vec<ChunkHit>> {
        let batches = self.full_text(&self.chunks, query, &CHUNK_COLUMNS, k).await?;
        chunk_hits(&batches, |b| Ok(column::<Float32Array>(b, "_score")?.values().to_vec()))
    }

    /// Vector arm: exact cosine over chunk vectors, best first (`score` = cosine similarity).
    pub async fn vector(&self, query: &[f32], k: usize) -> Result<Vec<ChunkHit>> {
        self.nearest(query, None, k).await
    }

    /// The vector arm restricted to some pages: their chunks best first, so the first hit of
    /// each page is its best chunk (exact max-pool for candidates another arm found).
    pub async fn vector_within(&self, query: &[f32], slugs: &[&str], k: usize) -> Result<Vec<ChunkHit>> {
        if slugs.is_empty() {
            return Ok(Vec::new());
        }
        self.nearest(query, Some(in_list("slug", slugs)), k).await
    }

    async fn nearest(&self, query: &[f32], filter: Option<String>, k: usize) -> Result<Vec<ChunkHit>> {
        let mut q = self
            .chunks
            .query()
            .nearest_to(query)
            .map_err(|e| self.err(e))?
            .distance_type(DistanceType::Cosine)
            .select(with_score(&CHUNK_COLUMNS, "_distance"))
            .limit(k);
        if let Some(f) = filter {
            q = q.only_if(f);
        }
        let batches = self.collect(q.execute().await).await?;
        chunk_hits(&batches, |b| {
            Ok(column::<Float32Array>(b, "_distance")?.values().iter().map(|d| 1.0 - d).collect())
        })
    }

    /// Several pages at once (missing slugs are skipped).
    pub async fn pages(&self, slugs: &[&str]) -> Result<Vec<PageRecord>> {
        if slugs.is_empty() {
            return Ok(Vec::new());
        }
        let q = self.pages.query().only_if(in_list("slug", slugs)).select(Select::columns(&PAGE_COLUMNS));
        page_records(&self.collect(q.execute().await).await?)
    }

    /// Title arm: full-text search over titles and aliases.
    pub async fn titles(&self, query: &str, k: usize) -> Result<Vec<PageRecord>> {
        page_records(&self.full_text(&self.pages, query, &PAGE_COLUMNS, k).await?)
    }

    /// BM25 over a table's full-text index, best first.
    async fn full_text(
        &self,
        table: &Table,
        query: &str,
        columns: &[&str],
        k: usize,
    ) -> Result<Vec<RecordBatch>> {
        if query.trim().is_empty() {
            return Ok(Vec::new());
        }
        let q = table
            .query()
            .full_text_search(FullTextSearchQuery::new(query.to_string()))
            .select(with_score(columns, "_score"))
            .limit(k);
        self.unless_empty(table, self.collect(q.execute().await).await).await
    }

    /// A full-text search fails on a table that has no index yet, which is the case exactly when
    /// it has no rows (indexes are built on the first write): that is an empty answer, not an
    /// error. The row count is only looked at when the search failed.
    async fn unless_empty(
        &self,
        table: &Table,
        result: Result<Vec<RecordBatch>>,
    ) -> Result<Vec<RecordBatch>> {
        match result {
            Ok(b) => Ok(b),
            Err(e) => match table.count_rows(None).await {
                Ok(0) => Ok(Vec::new()),
                _ => Err(e),
            },
        }
    }

    /// Pages whose slug, normalised title or one normalised alias equals `normalized`.
    pub async fn alias(&self, normalized: &str) -> Result<Vec<PageRecord>> {
        let v = quote(normalized);
        let filter = format!("slug = {v} OR title_norm = {v} OR array_has(aliases_norm, {v})");
        let q = self.pages.query().only_if(filter).select(Select::columns(&PAGE_COLUMNS));
        let mut pages = page_records(&self.collect(q.execute().await).await?)?;
        pages.sort_by(|a, b| a.slug.cmp(&b.slug));
        Ok(pages)
    }

    pub async fn page(&self, slug: &str) -> Result<Option<PageRecord>> {
        let q = self
            .pages
            .query()
            .only_if(format!("slug = {}", quote(slug)))
            .select(Select::columns(&PAGE_COLUMNS));
        Ok(page_records(&self.collect(q.execute().await).await?)?.into_iter().next())
    }

    /// A page's chunks in order (text and lines, no vectors).
    pub async fn page_chunks(&self, slug: &str) -> Result<Vec<ChunkHit>> {
        let q = self
            .chunks
            .query()
            .only_if(format!("slug = {}", quote(slug)))
            .select(Select::columns(&CHUNK_COLUMNS));
        let mut hits = chunk_hits(&self.collect(q.execute().await).await?, |b| Ok(vec![0.0; b.num_rows()]))?;
        hits.sort_by_key(|h| h.ordinal);
        Ok(hits)
    }
}

/// JSON text of anything serialisable (pages hold values, links and errors).
mod erased {
    pub trait Json {
        fn to_json(&self) -> String;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_json(&self) -> String {
            serde_json::to_string(self).unwrap_or_else(|_| "null".into())
        }
    }
}

fn column<'a, T: 'static>(b: &'a RecordBatch, name: &str) -> Result<&'a T> {
    b.column_by_name(name).and_then(|c| c.as_any().downcast_ref::<T>()).ok_or_else(|| Error::Storage {
        source_id: "*".into(),
        uri: String::new(),
        message: format!(
            "column `{name}` missing or of an unexpected type (the batch has {:?})",
            b.schema()
                .fields()
                .iter()
                .map(|f| format!("{}: {}", f.name(), f.data_type()))
                .collect::<Vec<_>>()
        ),
    })
}

fn string<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a StringArray> {
    column::<StringArray>(b, name)
}

fn int32<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a Int32Array> {
    column::<Int32Array>(b, name)
}

fn chunk_hits(
    batches: &[RecordBatch],
    scores: impl Fn(&RecordBatch) -> Result<Vec<f32>>,
) -> Result<Vec<ChunkHit>> {
    let mut out = Vec::new();
    for b in batches {
        let score = scores(b)?;
        let (slug, id, path, text) =
            (string(b, "slug")?, string(b, "id")?, string(b, "heading_path")?, string(b, "text")?);
        let (ord, ls, le) = (int32(b, "ordinal")?, int32(b, "line_start")?, int32(b, "line_end")?);
        for (i, &score) in score.iter().enumerate().take(b.num_rows()) {
            out.push(ChunkHit {
                slug: slug.value(i).into(),
                chunk_id: id.value(i).into(),
                ordinal: ord.value(i),
                heading_path: path.value(i).into(),
                text: text.value(i).into(),
                line_start: ls.value(i),
                line_end: le.value(i),
                score,
            });
        }
    }
    out.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(out)
}

fn page_records(batches: &[RecordBatch]) -> Result<Vec<PageRecord>> {
    let mut out = Vec::new();
    for b in batches {
        let s = |n| string(b, n);
        let (slug, path, title, ptype, fm, links, hash, problems) = (
            s("slug")?,
            s("path")?,
            s("title")?,
            s("page_type")?,
            s("frontmatter")?,
            s("links")?,
            s("content_hash")?,
            s("problems")?,
        );
        let (aliases, tags) = (column::<ListArray>(b, "aliases")?, column::<ListArray>(b, "tags")?);
        let mtime = column::<Int64Array>(b, "mtime_ms")?;
        let count = int32(b, "chunk_count")?;
        let score = b.column_by_name("_score").and_then(|c| c.as_any().downcast_ref::<Float32Array>());
        let strings = |l: &ListArray, i: usize| -> Vec<String> {
            let v = l.value(i);
            let a = v.as_any().downcast_ref::<StringArray>().expect("lists of strings");
            (0..a.len()).map(|j| a.value(j).to_string()).collect()
        };
        let parse = |t: &str| serde_json::from_str(t).unwrap_or(serde_json::Value::Null);
        for i in 0..b.num_rows() {
            out.push(PageRecord {
                slug: slug.value(i).into(),
                path: path.value(i).into(),
                title: title.value(i).into(),
                aliases: strings(aliases, i),
                tags: strings(tags, i),
                page_type: (!ptype.is_null(i)).then(|| ptype.value(i).to_string()),
                frontmatter: parse(fm.value(i)),
                links: parse(links.value(i)),
                content_hash: hash.value(i).into(),
                mtime_ms: mtime.value(i),
                chunk_count: count.value(i),
                problems: parse(problems.value(i)),
                score: score.map_or(0.0, |s| s.value(i)),
            });
        }
    }
    Ok(out)
}
