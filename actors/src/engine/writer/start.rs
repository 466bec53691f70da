//! The writer's start-up (and restart): open or rebuild the source's tables, load its resident
//! index (from a snapshot when one matches), and resume what a stop interrupted.

use super::upkeep::Upkeep;
use super::{LAPSED_RETRY, Origin, SourceWriter};
use crate::core::error::{Part, PipelineError, Refusal};
use crate::core::event::EventKind;
use crate::engine::embedding::Priority;
use crate::engine::query::Serve;
use crate::replication::journal::Change;
use actix::prelude::*;
use cairn_index::{Loaded, Resident, SourceStore};
use std::future::Future;
use std::time::{Duration, Instant};

/// A source opened: its tables, its resident index, the pages stored, the table version.
pub(super) type Opened = (SourceStore, Resident, Loaded, u64);

impl SourceWriter {
    /// Open the source (after `delay`: the backoff, on a restart), for [`SourceWriter::opened`].
    pub(super) fn open(
        &self,
        delay: Duration,
    ) -> impl Future<Output = Result<Opened, PipelineError>> + 'static {
        let (db, manifest, info) = (self.db.clone(), self.manifest.clone(), self.info.clone());
        let (configured, status) = (self.language, self.status.clone());
        let exact_vectors_up_to = self.opts.exact_vectors_up_to;
        let snapshot = self.snapshot();
        let (query, root, emit) = (self.query.clone(), self.root.clone(), self.emit.clone());
        let journal = self.opts.publishing.as_ref().map(|p| p.journal.clone());
        let lease = self.opts.publishing.as_ref().map(|p| p.lease.clone());
        async move {
            tokio::time::sleep(delay).await;
            let began = Instant::now();
            let id = info.id.clone();
            // Tables made here (new, or rebuilt) start an incarnation readers load whole.
            let mut fresh = !db.source_ids().await?.contains(&id);
            let store = match db.open_source(&id, &manifest).await {
                Err(cairn_index::Error::ManifestMismatch { .. }) => {
                    tracing::warn!("source `{id}` was built by another model or version; rebuilding it");
                    if let Some(path) = &snapshot {
                        let _ = std::fs::remove_file(path);
                    }
                    fresh = true;
                    db.rebuild_source(&id, &manifest, &info).await
                }
                other => other,
            }?;
            if let Some(lease) = &lease {
                // Only a valid lease fences: a lapsed one (the store does not answer) waits for
                // its renewal, and a lost one ends the open.
                while !lease.valid() {
                    if lease.lost() {
                        return Err(PipelineError::Refused { id, why: Refusal::LeaseLost });
                    }
                    tokio::time::sleep(LAPSED_RETRY).await;
                }
                let h = lease.holder();
                store.fence(&format!("{} pid {} since {}", h.host, h.pid, h.since_unix_ms)).await?;
            }
            // The source's language, recorded before the journal is told the tables' version:
            // a new language moves it, and readers then load the source again, reading its words
            // in it. A folder whose text tells nothing yet (empty, missing) is read as English,
            // and asked again at the next start.
            let lang = match (configured, store.recorded_language().await?) {
                (Some(lang), _) | (None, Some(lang)) => Some(lang),
                (None, None) => super::language::told_from(root.clone()).await,
            };
            if let Some(lang) = lang
                && store.set_language(lang).await?
            {
                tracing::info!("source `{id}`: its words are read in language `{lang}`");
            }
            status.set_language(&id, lang.unwrap_or_default());
            if let Some(journal) = journal.as_ref().filter(|_| !fresh) {
                journal.opened(&id, store.version().await?).await;
            }
            if let Some(journal) = journal.as_ref().filter(|_| fresh) {
                let version = store.version().await?;
                let change = Change {
                    version,
                    committed_unix_ms: crate::core::event::unix_ms(),
                    reset: true,
                    ..Default::default()
                };
                if !journal.record(&id, change).await {
                    return Err(PipelineError::Refused { id, why: Refusal::LeaseLost });
                }
            }
            store.register(&info).await?;
            let started = Instant::now();
            let (resident, loaded, from_snapshot) = match &snapshot {
                Some(path) => Resident::open(&store, exact_vectors_up_to, path).await,
                None => Resident::load(&store, exact_vectors_up_to).await.map(|(r, l)| (r, l, false)),
            }?;
            let open_ms = started.elapsed().as_millis() as u64;
            tracing::info!(
                "source `{id}`: opened in {} ms (its resident index loaded in {open_ms} ms)",
                began.elapsed().as_millis()
            );
            query
                .send(Serve { store: store.clone(), resident: resident.clone(), root: Some(root) })
                .await
                .map_err(|_| PipelineError::Stopped(Part::Query))?;
            let (pages, vectors_pending) = (loaded.states.len(), resident.read().unembedded_count());
            let version = store.version().await?;
            emit.emit(&id, vec![EventKind::SourceStarted { pages, vectors_pending, from_snapshot, open_ms }])
                .await;
            if !loaded.inconsistent.is_empty() || !loaded.orphans.is_empty() {
                tracing::warn!(
                    "source `{id}`: {} page(s) whose rows a crash left disagreeing and {} orphan(s) are redone",
                    loaded.inconsistent.len(),
                    loaded.orphans.len()
                );
            }
            Ok((store, resident, loaded, version))
        }
    }

    /// The source is open: the plan knows what is stored, chunks committed without vectors (a
    /// backfill a stop interrupted) resume behind anything edited since, and what failed
    /// before is committed again first.
    pub(super) fn opened(&mut self, (store, resident, loaded, version): Opened, ctx: &mut Context<Self>) {
        self.store = Some(store);
        self.status.set_version(&self.id, version);
        self.plan.load(loaded.states, loaded.orphans);
        self.vectors.reopened();
        {
            let index = resident.read();
            for (chunk, _, _) in index.unembedded() {
                if let Some((slug, _, _)) = index.waiting(&chunk) {
                    self.vectors.chunk_waits(slug);
                }
                self.vectors.queue(chunk, Priority::Bulk);
            }
            self.status.set_vectors(&self.id, index.chunk_count(), index.unembedded_count(), 0.0);
        }
        self.upkeep_due = Upkeep::new(resident.read().chunk_count());
        self.resident = Some(resident);
        self.status.set_pages(&self.id, self.plan.known().len());
        if self.failures > 0 {
            // Retry what failed before anything newer (first in the mailbox).
            ctx.notify(super::CommitDue);
        } else {
            self.commit_later(Origin::Edit, ctx);
        }
        self.pump(ctx);
    }
}
