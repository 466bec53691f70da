//! The writer's fence: a process that no longer holds a source's writer lease cannot change its
//! tables, whatever its clock or the store's latency says.
//!
//! A lease alone is a timer: a writer checks it when a commit starts, and a commit that was
//! paused after the check (a laptop lid, a stopped process, a request stuck in the network) can
//! land after another process took the lease over. LanceDB would even replay it on top of the
//! new writer's commits: a conflicting `merge_insert` or `delete` is retried on the newest
//! version. The fence makes the tables themselves refuse it, the way SlateDB's writer epoch and
//! Delta Lake's and Iceberg's conditional commits do.
//!
//! - **The writer's reads are pinned.** A writer's connection does not look for newer versions
//!   ([`crate::Database::open_pinned`]): each of its commits is read at the version its own last
//!   commit made, never at one another process made since.
//! - **A new writer fences before it writes.** [`SourceStore::fence`] commits, on each of the
//!   source's tables, a `Restore` of the version it opened (the same rows; read at that pinned
//!   version, so a commit that slipped in meanwhile is undone), then a schema-metadata update
//!   naming the holder ([`FENCE_KEY`]).
//! - **Lance's conflict rules do the rest.** A manifest is written put-if-absent (S3's
//!   `If-None-Match`), so a commit read at an older version must be checked against every
//!   version since, and Lance never rebases a data commit (append, update, delete, compaction,
//!   index) over a `Restore`: it is refused as an incompatible transaction. A late fence of an
//!   older writer is refused too: a `Restore` does not rebase over a schema-metadata update.
//!   Either refusal is [`crate::Error::Fenced`], and a fenced writer commits nothing more.

use super::SourceStore;
use crate::error::Result;
use lance::dataset::CommitBuilder;
use lance::dataset::transaction::{Operation, Transaction};
use lancedb::Table;
use std::sync::Arc;

/// The schema-metadata key a fence sets on each table: who fenced it (the writer since).
pub const FENCE_KEY: &str = "cairn.fence";

/// The schema-metadata key of the chunks table that names the source's language.
pub const LANGUAGE_KEY: &str = "cairn.language";

/// Whether a failed commit was refused because another writer fenced the table since this
/// writer read it (Lance's "incompatible transaction"; the typed error does not survive
/// LanceDB's and cairn's wrapping, its message does).
pub fn fenced(message: &str) -> bool {
    message.contains("Incompatible transaction")
}

impl SourceStore {
    /// Fence the source's tables for `holder` (see the module): from now on, a commit read at
    /// any version before this call, by any process, is refused. Run by a writer after it took
    /// the lease and opened the tables, before its first commit.
    pub async fn fence(&self, holder: &str) -> Result<()> {
        for table in [&self.manifest, &self.chunks, &self.pages] {
            self.fence_table(table, holder).await?;
        }
        Ok(())
    }

    async fn fence_table(&self, table: &Table, holder: &str) -> Result<()> {
        let wrapper = table.dataset().ok_or_else(|| self.err("not a LanceDB table on storage"))?;
        let read = wrapper.get().await.map_err(|e| self.err(e))?;
        let version = read.version().version;
        let restore = Transaction::new(version, Operation::Restore { version }, None);
        let mut fenced =
            CommitBuilder::new(Arc::clone(&read)).execute(restore).await.map_err(|e| self.err(e))?;
        fenced.update_schema_metadata([(FENCE_KEY, holder)]).await.map_err(|e| self.err(e))?;
        wrapper.update(fenced);
        Ok(())
    }

    /// The language the source's words are read in, as its writer recorded it on the chunks
    /// table ([`LANGUAGE_KEY`]); English for a source that records none.
    pub async fn language(&self) -> Result<crate::resident::Lang> {
        Ok(self.recorded_language().await?.unwrap_or_default())
    }

    /// The language recorded for the source, if one is.
    pub async fn recorded_language(&self) -> Result<Option<crate::resident::Lang>> {
        let wrapper = self.chunks.dataset().ok_or_else(|| self.err("not a LanceDB table on storage"))?;
        let dataset = wrapper.get().await.map_err(|e| self.err(e))?;
        Ok(dataset.schema().metadata.get(LANGUAGE_KEY).and_then(|code| crate::resident::Lang::parse(code)))
    }

    /// Record the source's language (one commit of the chunks table's schema metadata, which
    /// moves its version, so that snapshots and readers read its words again; none when it is
    /// recorded so already). By its writer, after the fence.
    pub async fn set_language(&self, lang: crate::resident::Lang) -> Result<bool> {
        if self.recorded_language().await? == Some(lang) {
            return Ok(false);
        }
        let wrapper = self.chunks.dataset().ok_or_else(|| self.err("not a LanceDB table on storage"))?;
        let mut dataset = (*wrapper.get().await.map_err(|e| self.err(e))?).clone();
        dataset.update_schema_metadata([(LANGUAGE_KEY, lang.code())]).await.map_err(|e| self.err(e))?;
        wrapper.update(dataset);
        Ok(true)
    }

    /// Who last fenced the source's chunks table (`None`: nobody, a table written without a lease).
    pub async fn fenced_by(&self) -> Result<Option<String>> {
        let wrapper = self.chunks.dataset().ok_or_else(|| self.err("not a LanceDB table on storage"))?;
        let dataset = wrapper.get().await.map_err(|e| self.err(e))?;
        Ok(dataset.schema().metadata.get(FENCE_KEY).cloned())
    }
}
