//! Writes to one source: a commit of pages (chunk rows, then page rows), vectors attached to
//! chunks written before, and the upkeep a long-lived table needs (compaction, old versions and
//! stray files removed).

use super::arrow::{chunk_batch, page_batch, vector_batch};
use super::records::WriteBatch;
use super::{SourceStore, in_list};
use crate::error::Result;
use arrow_array::RecordBatchIterator;
use lancedb::index::Index;
use lancedb::index::IndexType;
use lancedb::index::scalar::{BTreeIndexBuilder, FtsIndexBuilder};
use lancedb::table::optimize::CompactionOptions;
use lancedb::table::{OptimizeAction, OptimizeOptions};
use std::time::Duration;

/// Rows a compaction fills a fragment to. A fragment with fewer rows is compacted again, so a
/// compaction rewrites the fragments written since the last one, at most one part-filled
/// fragment of this size (about 2 MiB of chunks with 384-d vectors) and the fragments with a
/// tenth of their rows deleted (LanceDB's default), never the whole table:
/// LanceDB's default (1M rows) makes every table below a million rows one "small" fragment that
/// each compaction rewrites in full.
pub const FRAGMENT_ROWS: usize = 1024;

/// The key columns of the chunks and of the pages tables that commits, re-scoring and vector
/// reuse look rows up by (`id IN (…)`, `text_hash IN (…)`, `slug IN (…)`, and the join keys of
/// `merge_insert`): each has a B-tree index, so a lookup reads the index, not the whole column.
pub const KEY_COLUMNS: (&[&str], &[&str]) = (&["id", "text_hash", "slug"], &["slug"]);

/// How many key indexes the two tables have: the steps of [`SourceStore::index_key`].
pub const KEY_INDEXES: usize = KEY_COLUMNS.0.len() + KEY_COLUMNS.1.len();

/// What a pruning removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PruneStats {
    pub old_versions: u64,
    pub bytes_removed: u64,
}

impl SourceStore {
    /// Apply a batch: chunks first, then pages. Each chunk row carries the content hash of the
    /// page row written after it, so a crash between the writes leaves rows that disagree, which
    /// [`SourceStore::load`] reports and the writer redoes. Returns the chunks table's version.
    ///
    /// Every write finds its rows through the B-tree indexes on the keys ([`KEY_COLUMNS`]): an
    /// upsert by key, then a delete by key of the rows it replaced. One `merge_insert` that also
    /// deletes the rows its source does not name would be a single commit, but LanceDB answers it
    /// with a full outer join, so a one-page edit read the whole table.
    pub async fn write(&self, batch: &WriteBatch) -> Result<u64> {
        if batch.is_empty() {
            return self.version().await;
        }
        self.write_chunks(batch).await?;
        if !batch.upserts.is_empty() {
            let page_rows = page_batch(&batch.upserts).map_err(|e| self.err(e))?;
            self.upsert(&self.pages, "slug", page_rows).await?;
        }
        if !batch.removals.is_empty() {
            let removed: Vec<&str> = batch.removals.iter().map(String::as_str).collect();
            self.pages.delete(&in_list("slug", &removed)).await.map_err(|e| self.err(e))?;
        }
        self.version().await
    }

    /// The chunk half of [`SourceStore::write`]: the new rows upserted by id (a chunk whose
    /// text did not change keeps its id, and its row is rewritten to carry the page's new
    /// content hash), then every other row of a touched page deleted. A crash between the two
    /// leaves a page with rows of both hashes, which [`SourceStore::load`] reports.
    async fn write_chunks(&self, batch: &WriteBatch) -> Result<()> {
        let chunk_rows = chunk_batch(self.dim, &batch.upserts).map_err(|e| self.err(e))?;
        let ids: Vec<&str> =
            batch.upserts.iter().flat_map(|w| w.page.chunks.iter().map(|c| c.id.as_str())).collect();
        if !ids.is_empty() {
            self.upsert(&self.chunks, "id", chunk_rows).await?;
        }
        let touched: Vec<&str> = batch
            .upserts
            .iter()
            .map(|w| w.page.slug.as_str())
            .chain(batch.removals.iter().map(String::as_str))
            .collect();
        let mut stale = in_list("slug", &touched);
        if !ids.is_empty() {
            stale = format!("{stale} AND NOT ({})", in_list("id", &ids));
        }
        self.chunks.delete(&stale).await.map_err(|e| self.err(e))?;
        Ok(())
    }

    /// The chunk half of [`SourceStore::write`] only, as a crash between its writes leaves it
    /// (tests of crash recovery).
    #[cfg(any(test, feature = "testing"))]
    pub async fn crash_after_chunks(&self, batch: &WriteBatch) -> Result<()> {
        self.write_chunks(batch).await
    }

    /// Attach vectors to chunks written without them (by chunk id). A chunk replaced since (its
    /// page changed) is not matched, and its vector is dropped. Returns the chunks table's version.
    pub async fn attach_vectors(&self, vectors: &[(String, Vec<f32>)]) -> Result<u64> {
        if vectors.is_empty() {
            return self.version().await;
        }
        let rows = vector_batch(self.dim, vectors).map_err(|e| self.err(e))?;
        let mut m = self.chunks.merge_insert(&["id"]);
        m.when_matched_update_all(None);
        let schema = rows.schema();
        m.execute(Box::new(RecordBatchIterator::new(vec![Ok(rows)], schema)))
            .await
            .map_err(|e| self.err(e))?;
        self.version().await
    }

    /// LanceDB's full-text indexes over chunk text and page names, for the tests and benches
    /// that compare the resident index with LanceDB's own search. cairn's searches read the
    /// resident index, so the product never builds them (and [`SourceStore::optimize`] drops
    /// them). An index built before is kept as it is.
    pub async fn build_text_indexes(&self) -> Result<()> {
        for (table, column) in [(&self.chunks, "search_text"), (&self.pages, "names")] {
            let indices = table.list_indices().await.map_err(|e| self.err(e))?;
            if indices.iter().any(|i| i.columns.iter().any(|c| c == column))
                || table.count_rows(None).await.map_err(|e| self.err(e))? == 0
            {
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

    /// Compaction: fragments below [`FRAGMENT_ROWS`] merged, deleted rows dropped; then the
    /// key indexes brought up to date ([`SourceStore::index_keys`]). The caller makes sure no
    /// commit of its own runs meanwhile: a compaction that loses a commit race leaves its
    /// rewritten files behind.
    pub async fn optimize(&self) -> Result<()> {
        self.compact(None).await?;
        self.index_keys().await
    }

    /// One step of compaction ([`SourceStore::optimize`] without the key indexes), reading at
    /// most `rows` source rows of each table when given (LanceDB's per-run budget: the first
    /// tasks of its plan that fit). Returns whether it compacted anything: a caller stepping
    /// through a large compaction steps again until a step compacts nothing, and its commits
    /// can run between steps. Indexes that earlier versions built and nothing reads (full text,
    /// IVF-PQ) are dropped first, so a compaction does not remap them. Same caller's duty as
    /// [`SourceStore::optimize`].
    pub async fn compact(&self, rows: Option<usize>) -> Result<bool> {
        let mut compacted = false;
        for (table, keys) in [(&self.chunks, KEY_COLUMNS.0), (&self.pages, KEY_COLUMNS.1)] {
            for index in table.list_indices().await.map_err(|e| self.err(e))? {
                let is_key = matches!(index.columns.as_slice(),
                    [c] if index.index_type == IndexType::BTree && keys.contains(&c.as_str()));
                if !is_key {
                    table.drop_index(&index.name).await.map_err(|e| self.err(e))?;
                }
            }
            let options = CompactionOptions {
                target_rows_per_fragment: FRAGMENT_ROWS,
                max_source_rows: rows,
                ..Default::default()
            };
            let stats = table
                .optimize(OptimizeAction::Compact { options, remap_options: None })
                .await
                .map_err(|e| self.err(e))?;
            compacted |= stats.compaction.is_some_and(|c| c.fragments_removed > 0);
        }
        Ok(compacted)
    }

    /// The B-tree indexes on the keys rows are looked up by ([`KEY_COLUMNS`]) built, or brought
    /// up to date with the rows written since, without compacting. A commit's upserts and
    /// deletes read the rows no index covers in full, so while a long first index or a vector
    /// backfill keeps compaction off, this keeps a commit's cost from growing with the table
    /// (it grew with every row written since the last compaction: a first index of 135k pages
    /// slowed from 125 to 33 pages/s). Same caller's duty as [`SourceStore::optimize`].
    pub async fn index_keys(&self) -> Result<()> {
        for n in 0..KEY_INDEXES {
            self.index_key(n).await?;
        }
        Ok(())
    }

    /// The `n`-th of the [`KEY_INDEXES`] key indexes (the chunks' keys, then the pages', in
    /// [`KEY_COLUMNS`] order) built, or brought up to date: [`SourceStore::index_keys`] one
    /// index at a time, for a caller that lets its commits run between them (each rewrites its
    /// whole B-tree: up to 0.7 s at a million chunks).
    pub async fn index_key(&self, n: usize) -> Result<()> {
        let (table, key) = match KEY_COLUMNS.0.get(n) {
            Some(key) => (&self.chunks, *key),
            None => (&self.pages, KEY_COLUMNS.1[n - KEY_COLUMNS.0.len()]),
        };
        if table.count_rows(None).await.map_err(|e| self.err(e))? == 0 {
            return Ok(());
        }
        let name = table.list_indices().await.map_err(|e| self.err(e))?.into_iter().find_map(|i| {
            (i.index_type == IndexType::BTree && matches!(i.columns.as_slice(), [c] if c == key))
                .then_some(i.name)
        });
        match name {
            None => table
                .create_index(&[key], Index::BTree(BTreeIndexBuilder::default()))
                .execute()
                .await
                .map_err(|e| self.err(format!("building the index on {key}: {e}"))),
            Some(name) => {
                let mut options = OptimizeOptions::default();
                options.index_names = Some(vec![name]);
                table.optimize(OptimizeAction::Index(options)).await.map(drop).map_err(|e| self.err(e))
            }
        }
    }

    /// The indexes of the chunks and pages tables: (name, type, columns), for tests.
    pub async fn indexes(&self) -> Result<Vec<(String, String, Vec<String>)>> {
        let mut out = Vec::new();
        for (name, table) in [("chunks", &self.chunks), ("pages", &self.pages)] {
            for i in table.list_indices().await.map_err(|e| self.err(e))? {
                out.push((name.to_string(), i.index_type.to_string(), i.columns));
            }
        }
        Ok(out)
    }

    /// Remove the table versions older than `keep` (the current one always stays). A reader
    /// that opened a version within `keep` can still finish reading it. Files that belong to no
    /// version are a write in progress, or what a crash or an interrupted compaction left: with
    /// `strays` they are removed too, which is only safe when the caller knows no write of
    /// its own is in flight (the owner lock keeps every other process from writing).
    pub async fn prune(&self, keep: Duration, strays: bool) -> Result<PruneStats> {
        let older_than = lancedb::table::optimize::Duration::from_std(keep).map_err(|e| self.err(e))?;
        let mut stats = PruneStats::default();
        for table in [&self.chunks, &self.pages, &self.manifest] {
            let action = OptimizeAction::Prune {
                older_than: Some(older_than),
                delete_unverified: Some(strays),
                error_if_tagged_old_versions: None,
            };
            if let Some(p) = table.optimize(action).await.map_err(|e| self.err(e))?.prune {
                stats.old_versions += p.old_versions;
                stats.bytes_removed += p.bytes_removed;
            }
        }
        Ok(stats)
    }
}
