//! Reads of one source: the whole source at once (what a resident index is built from, with the
//! check that every page's rows agree), point reads of pages and chunks, and LanceDB's own
//! keyword/vector/name searches (the benchmarks' floor).

use super::arrow::{
    CHUNK_COLUMNS, PAGE_COLUMNS, chunk_hits, column, int32, page_records, stored_chunk_columns,
    stored_chunks, string, vectors,
};
use super::records::{ChunkHit, Loaded, PageNames, PageRecord, PageState, StoredChunk};
use super::{SourceStore, in_list, quote};
use crate::error::Result;
use arrow_array::{Float32Array, Int64Array, ListArray, RecordBatch};
use futures::TryStreamExt;
use lancedb::index::scalar::FullTextSearchQuery;
use lancedb::query::{ExecutableQuery, QueryBase, Select};
use lancedb::{DistanceType, Table};
use std::collections::HashMap;

/// What [`SourceStore::vectors_by`] looks chunks up by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorKey {
    /// The chunk's id.
    Id,
    /// The hash of the text the model embeds.
    TextHash,
}

impl VectorKey {
    fn column(self) -> &'static str {
        match self {
            VectorKey::Id => "id",
            VectorKey::TextHash => "text_hash",
        }
    }
}

/// `columns` plus a scoring column (`_score`, `_distance`), named so Lance does not have to add
/// it implicitly (which it warns is deprecated).
fn with_score(columns: &[&str], score: &'static str) -> Select {
    Select::columns(&columns.iter().copied().chain([score]).collect::<Vec<_>>())
}

/// A page with its rows in order, reported inconsistent when they disagree with it.
fn checked(loaded: &mut Loaded, page: PageRecord, mut chunks: Vec<(String, StoredChunk)>) -> LoadedPage {
    chunks.sort_by_key(|(_, c)| c.hit.ordinal);
    if !agrees(&page, &chunks) {
        mark_inconsistent(loaded, &page.slug);
    }
    (page, chunks.into_iter().map(|(_, c)| c).collect())
}

/// A page whose rows disagree with its page row: not clean, no content hash (so the next look at
/// its file writes it again), listed once.
fn mark_inconsistent(loaded: &mut Loaded, slug: &str) {
    if let Some(s) = loaded.states.get_mut(slug)
        && !loaded.inconsistent.iter().any(|i| i == slug)
    {
        s.clean = false;
        s.content_hash.clear();
        loaded.inconsistent.push(slug.to_string());
    }
}

/// Whether a page's chunk rows are the ones its page row was written with: ordinals 0…n-1, each
/// carrying the page's content hash.
fn agrees(page: &PageRecord, chunks: &[(String, StoredChunk)]) -> bool {
    chunks.len() == page.chunk_count as usize
        && chunks
            .iter()
            .enumerate()
            .all(|(i, (hash, c))| c.hit.ordinal == i as i32 && *hash == page.content_hash)
}

/// A page with its chunk rows in order, as a load hands it over.
pub type LoadedPage = (PageRecord, Vec<StoredChunk>);

impl SourceStore {
    /// Everything the source holds, in one pass over each table: pages with their chunks (text,
    /// vectors where present, by slug), the state of every page, and the rows a crash left
    /// disagreeing. Holds every row at once: see [`SourceStore::load_into`] for a large source.
    pub async fn load(&self) -> Result<Loaded> {
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let mut pages = Vec::new();
        let (loaded, ()) = futures::join!(self.load_into(1024, tx), async {
            while let Some(batch) = rx.recv().await {
                pages.extend(batch);
            }
        });
        let mut loaded = loaded?;
        pages.sort_by(|a: &LoadedPage, b| a.0.slug.cmp(&b.0.slug));
        loaded.pages = pages;
        Ok(loaded)
    }

    /// [`SourceStore::load`], its pages sent to `tx` about `batch` at a time as their rows
    /// arrive, rather than returned (the returned [`Loaded`] has no pages): a page goes once as
    /// many chunk rows as its page row counts have been read (rows come in the order they were
    /// written, so pages complete as the read goes), and the rest at the end. The source's rows
    /// are never all held at once: a load that held them took 8.5 GiB at a million chunks.
    ///
    /// A page whose rows disagree with its page row is sent all the same and reported
    /// `inconsistent` (and its state not clean): rows read after its page went (more rows than it
    /// counts) make it so too. Rows of slugs without a page row are `orphans`, never sent.
    pub async fn load_into(
        &self,
        batch: usize,
        tx: tokio::sync::mpsc::Sender<Vec<LoadedPage>>,
    ) -> Result<Loaded> {
        let mut loaded = Loaded { states: self.page_states().await?, ..Loaded::default() };
        let mut pages: HashMap<String, PageRecord> =
            self.all_pages().await?.into_iter().map(|p| (p.slug.clone(), p)).collect();
        let mut rows: HashMap<String, Vec<(String, StoredChunk)>> = HashMap::new();
        let mut sent: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut ready: Vec<LoadedPage> = Vec::new();
        let columns = stored_chunk_columns();
        let q = self.chunks.query().select(Select::columns(&columns));
        let mut stream = q.execute().await.map_err(|e| self.err(e))?;
        while let Some(b) = stream.try_next().await.map_err(|e| self.err(e))? {
            for (page_hash, chunk) in stored_chunks(&b)? {
                let slug = chunk.hit.slug.clone();
                if sent.contains(&slug) {
                    mark_inconsistent(&mut loaded, &slug);
                    continue;
                }
                let list = rows.entry(slug.clone()).or_default();
                list.push((page_hash, chunk));
                if pages.get(&slug).is_some_and(|p| list.len() >= p.chunk_count as usize) {
                    let (page, chunks) =
                        (pages.remove(&slug).expect("just seen"), rows.remove(&slug).expect("just added"));
                    ready.push(checked(&mut loaded, page, chunks));
                    sent.insert(slug);
                }
            }
            if ready.len() >= batch && tx.send(std::mem::take(&mut ready)).await.is_err() {
                return Ok(loaded); // nobody is taking the pages any more
            }
        }
        // Pages with fewer rows than they count (or none), in slug order.
        let mut short: Vec<PageRecord> = pages.into_values().collect();
        short.sort_by(|a, b| a.slug.cmp(&b.slug));
        for page in short {
            let chunks = rows.remove(&page.slug).unwrap_or_default();
            ready.push(checked(&mut loaded, page, chunks));
            if ready.len() >= batch && tx.send(std::mem::take(&mut ready)).await.is_err() {
                return Ok(loaded);
            }
        }
        if !ready.is_empty() {
            let _ = tx.send(ready).await;
        }
        loaded.orphans = rows.into_keys().collect();
        loaded.orphans.sort();
        loaded.inconsistent.sort();
        Ok(loaded)
    }

    /// Every stored page's path and content hash, by slug.
    async fn page_states(&self) -> Result<HashMap<String, PageState>> {
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
        let q = self.pages.query().select(Select::columns(&["slug", "path", "title_norm", "aliases_norm"]));
        let mut out = Vec::new();
        for b in self.collect(q.execute().await).await? {
            let (slug, path, title) = (string(&b, "slug")?, string(&b, "path")?, string(&b, "title_norm")?);
            let aliases = column::<ListArray>(&b, "aliases_norm")?;
            for i in 0..b.num_rows() {
                out.push(PageNames {
                    slug: slug.value(i).into(),
                    title_norm: title.value(i).into(),
                    aliases_norm: super::arrow::strings(aliases, i)?,
                    file_name_norm: cairn_ingest::normalize_name(&crate::resident::file_name(path.value(i))),
                });
            }
        }
        Ok(out)
    }

    /// Every chunk's page, ordinal and text hash, sorted: with [`SourceStore::all_pages`] enough to
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

    /// The chunks table's version (it moves with every write).
    pub async fn version(&self) -> Result<u64> {
        self.chunks.version().await.map_err(|e| self.err(e))
    }

    /// What a snapshot of the resident index must match to stand for the tables (see
    /// [`crate::resident::snapshot`]).
    pub async fn stamp(&self, exact_up_to: usize) -> Result<crate::resident::Stamp> {
        let err = |e| self.err(e);
        // The current version's time too: a table dropped and made again restarts its numbers.
        let versions = self.chunks.list_versions().await.map_err(err)?;
        let latest = versions.iter().max_by_key(|v| v.version);
        Ok(crate::resident::Stamp {
            chunks_written_us: latest.map_or(0, |v| v.timestamp.timestamp_micros()) as u64,
            chunks_version: self.chunks.version().await.map_err(err)?,
            pages_version: self.pages.version().await.map_err(err)?,
            chunk_rows: self.chunks.count_rows(None).await.map_err(err)? as u64,
            page_rows: self.pages.count_rows(None).await.map_err(err)? as u64,
            exact_up_to: exact_up_to as u64,
            lang: self.language().await?,
        })
    }

    /// Pages and chunks stored.
    pub async fn counts(&self) -> Result<(usize, usize)> {
        let pages = self.pages.count_rows(None).await.map_err(|e| self.err(e))?;
        let chunks = self.chunks.count_rows(None).await.map_err(|e| self.err(e))?;
        Ok((pages, chunks))
    }

    /// A page's chunk rows, and how many of them have a vector.
    pub async fn page_chunk_counts(&self, slug: &str) -> Result<(usize, usize)> {
        let of = format!("slug = {}", quote(slug));
        let rows = self.chunks.count_rows(Some(of.clone())).await.map_err(|e| self.err(e))?;
        let with = self
            .chunks
            .count_rows(Some(format!("{of} AND vector IS NOT NULL")))
            .await
            .map_err(|e| self.err(e))?;
        Ok((rows, with))
    }

    /// Chunks still without a vector.
    pub async fn unembedded(&self) -> Result<usize> {
        self.chunks.count_rows(Some("vector IS NULL".into())).await.map_err(|e| self.err(e))
    }

    /// The stored vectors of some chunks, by `key` (`id` or `text_hash`): key → vector, for the
    /// rows that have one. What re-scores int8 candidates and reuses a text's vector once a
    /// source's resident vectors are coded (see [`crate::vectors`]).
    pub async fn vectors_by(&self, key: VectorKey, values: &[&str]) -> Result<HashMap<String, Vec<f32>>> {
        let mut out = HashMap::new();
        if values.is_empty() {
            return Ok(out);
        }
        let column = key.column();
        let q = self
            .chunks
            .query()
            .only_if(format!("{} AND vector IS NOT NULL", in_list(column, values)))
            .select(Select::columns(&[column, "vector"]));
        for b in self.collect(q.execute().await).await? {
            let keys = string(&b, column)?;
            for (i, v) in vectors(&b)?.into_iter().enumerate() {
                if let Some(v) = v {
                    out.insert(keys.value(i).to_string(), v);
                }
            }
        }
        Ok(out)
    }

    /// The stored text and vector (when it has one) of some chunks, by id: what a source past
    /// its limit reads for the chunks an answer returns, since it holds neither in memory.
    pub async fn texts_and_vectors(
        &self,
        ids: &[&str],
    ) -> Result<HashMap<String, (String, Option<Vec<f32>>)>> {
        let mut out = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let q = self
            .chunks
            .query()
            .only_if(in_list("id", ids))
            .select(Select::columns(&["id", "text", "vector"]));
        for b in self.collect(q.execute().await).await? {
            let (id, text) = (string(&b, "id")?, string(&b, "text")?);
            for (i, v) in vectors(&b)?.into_iter().enumerate() {
                out.insert(id.value(i).to_string(), (text.value(i).to_string(), v));
            }
        }
        Ok(out)
    }

    /// Several pages at once (missing slugs are skipped).
    pub async fn pages(&self, slugs: &[&str]) -> Result<Vec<PageRecord>> {
        if slugs.is_empty() {
            return Ok(Vec::new());
        }
        let q = self.pages.query().only_if(in_list("slug", slugs)).select(Select::columns(&PAGE_COLUMNS));
        page_records(&self.collect(q.execute().await).await?)
    }

    /// Several pages with their chunk rows in order, vectors included (a reader applying what a
    /// writer committed). A page whose rows disagree with it (a commit half done, or one that a
    /// later commit is replacing) is read as it stands; the writer's next commit of it follows.
    pub async fn load_pages(&self, slugs: &[&str]) -> Result<Vec<LoadedPage>> {
        if slugs.is_empty() {
            return Ok(Vec::new());
        }
        let columns = stored_chunk_columns();
        let q = self.chunks.query().only_if(in_list("slug", slugs)).select(Select::columns(&columns));
        let mut rows: HashMap<String, Vec<StoredChunk>> = HashMap::new();
        for b in self.collect(q.execute().await).await? {
            for (_, chunk) in stored_chunks(&b)? {
                rows.entry(chunk.hit.slug.clone()).or_default().push(chunk);
            }
        }
        Ok(self
            .pages(slugs)
            .await?
            .into_iter()
            .map(|page| {
                let mut chunks = rows.remove(&page.slug).unwrap_or_default();
                chunks.sort_by_key(|c| c.hit.ordinal);
                (page, chunks)
            })
            .collect())
    }

    pub async fn page(&self, slug: &str) -> Result<Option<PageRecord>> {
        Ok(self.pages(&[slug]).await?.into_iter().next())
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

    /// Every chunk with its vector, sorted by page and ordinal (tests compare two indexes of one
    /// folder with it, vectors included).
    pub async fn chunk_contents(&self) -> Result<Vec<StoredChunk>> {
        let columns = stored_chunk_columns();
        let q = self.chunks.query().select(Select::columns(&columns));
        let mut out: Vec<StoredChunk> = Vec::new();
        for b in self.collect(q.execute().await).await? {
            out.extend(stored_chunks(&b)?.into_iter().map(|(_, c)| c));
        }
        out.sort_by(|a, b| (&a.hit.slug, a.hit.ordinal).cmp(&(&b.hit.slug, b.hit.ordinal)));
        Ok(out)
    }

    /// LanceDB's keyword search: BM25 over chunk text (with its heading path), best first. This
    /// and the other LanceDB searches here are what tests and benches compare the resident index
    /// with (cairn's searches read the resident index); the full-text ones need
    /// [`SourceStore::build_text_indexes`] first.
    pub async fn keyword(&self, query: &str, k: usize) -> Result<Vec<ChunkHit>> {
        let batches = self.full_text(&self.chunks, query, &CHUNK_COLUMNS, k).await?;
        chunk_hits(&batches, |b| Ok(column::<Float32Array>(b, "_score")?.values().to_vec()))
    }

    /// LanceDB's vector search: cosine over chunk vectors, best first (`score` = cosine).
    pub async fn vector(&self, query: &[f32], k: usize) -> Result<Vec<ChunkHit>> {
        let q = self
            .chunks
            .query()
            .nearest_to(query)
            .map_err(|e| self.err(e))?
            .distance_type(DistanceType::Cosine)
            .select(with_score(&CHUNK_COLUMNS, "_distance"))
            .limit(k);
        let batches = self.collect(q.execute().await).await?;
        chunk_hits(&batches, |b| {
            Ok(column::<Float32Array>(b, "_distance")?.values().iter().map(|d| 1.0 - d).collect())
        })
    }

    /// LanceDB's name search: full text over titles and aliases.
    pub async fn titles(&self, query: &str, k: usize) -> Result<Vec<PageRecord>> {
        page_records(&self.full_text(&self.pages, query, &PAGE_COLUMNS, k).await?)
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
        match self.collect(q.execute().await).await {
            Ok(b) => Ok(b),
            // A table without rows has no index yet (indexes are built on the first write):
            // that is an empty answer, not an error.
            Err(e) => match table.count_rows(None).await {
                Ok(0) => Ok(Vec::new()),
                _ => Err(e),
            },
        }
    }
}
