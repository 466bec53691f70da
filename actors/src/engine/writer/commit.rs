//! The writer's commits: what a page commit writes (the plan, with every vector already known),
//! and the write itself: tables, journal, resident index, then the events, in that order.

use super::{Origin, SourceWriter};
use crate::core::error::{PipelineError, Refusal};
use crate::core::event::EventKind;
use crate::core::log::Emitter;
use crate::core::status::SourceState;
use crate::replication::journal::{Change, Journal};
use actix::prelude::*;
use cairn_index::{PageWrite, Prepared, Resident, SourceStore, WriteBatch};
use std::collections::HashMap;
use std::time::Instant;

/// What a commit's write needs, cloned out of the actor so the write runs beside it.
pub(super) struct Sink {
    pub store: SourceStore,
    pub resident: Resident,
    pub journal: Option<Journal>,
    pub emit: Emitter,
    pub id: String,
}

impl Sink {
    /// Tell readers on other machines what version `change` made (on an object store): refused
    /// when another writer has taken over since (the commit may be undone by its fence, so it is
    /// not reported as made; the new writer indexes the folder as it finds it).
    pub async fn record(&self, change: Change) -> Result<(), PipelineError> {
        match &self.journal {
            Some(journal) if !journal.record(&self.id, change).await => {
                Err(PipelineError::Refused { id: self.id.clone(), why: Refusal::LeaseLost })
            }
            _ => Ok(()),
        }
    }
}

pub(super) type CommitFuture = actix::fut::LocalBoxActorFuture<SourceWriter, Result<u64, PipelineError>>;

impl SourceWriter {
    /// Where commits go: `Err` when the tables are not open or this writer may not commit.
    pub(super) fn sink(&self) -> Result<Sink, PipelineError> {
        let (Some(store), Some(resident)) = (self.store.clone(), self.resident.clone()) else {
            return Err(match &self.cannot_open {
                Some(why) => PipelineError::CannotOpen { id: self.id.clone(), why: why.clone() },
                None => PipelineError::NotOpen,
            });
        };
        if let Some(refused) = self.refused() {
            return Err(refused);
        }
        let journal = self.opts.publishing.as_ref().map(|p| p.journal.clone());
        Ok(Sink { store, resident, journal, emit: self.emit.clone(), id: self.id.clone() })
    }

    /// The page commit of everything buffered, or `None` when there is nothing to write.
    pub(super) fn commit_future(&mut self) -> Option<CommitFuture> {
        if self.plan.is_empty() {
            return None;
        }
        let sink = match self.sink() {
            Ok(sink) => sink,
            // A lapsed lease keeps what is buffered, and tries again until it is renewed (or lost).
            Err(e @ PipelineError::Refused { why: Refusal::LeaseLapsed, .. }) => {
                self.hold(&e);
                return Some(Box::pin(actix::fut::ready(Err(e)).map(|res, act: &mut Self, ctx| {
                    act.commit_later(Origin::Edit, ctx);
                    res
                })));
            }
            Err(e) => {
                if e.handed_over() {
                    self.hand_over(&e);
                }
                return Some(Box::pin(actix::fut::ready(Err(e))));
            }
        };
        cairn_index::fault::point("writer.commit");
        let plan = self.plan.take()?;
        let mut reused = 0usize;
        let upserts: Vec<PageWrite> = plan
            .pages
            .iter()
            .map(|w| {
                let vectors: Vec<Option<Vec<f32>>> =
                    w.page.chunks.iter().map(|c| self.known_vector(&c.text_hash)).collect();
                reused += vectors.iter().filter(|v| v.is_some()).count();
                PageWrite { page: w.page.clone(), vectors, mtime_ms: w.mtime_ms }
            })
            .collect();
        let batch = WriteBatch { upserts, removals: plan.removals.clone() };
        let origins: Vec<Origin> = plan.pages.iter().map(|w| w.origin).collect();
        let write = write_pages(sink, batch, reused, plan.deferred.clone());
        let fut = actix::fut::wrap_future::<_, Self>(write).map(move |res, act, ctx| match res {
            Ok((version, batch)) => {
                let chunks = act.pages_committed(version, batch, origins);
                act.status.done_in_flight(&act.id, plan.files);
                act.status.set_state(&act.id, SourceState::Watching, None);
                act.note_commit(chunks, 0, ctx);
                act.pump(ctx);
                Ok(version)
            }
            Err(e) => {
                // Nothing is lost: the plan goes back in front of anything newer.
                act.plan.restore(plan);
                act.fail(ctx, "writer", e.clone());
                Err(e)
            }
        });
        Some(Box::pin(fut))
    }

    /// After a page commit: the plan's stored state, and each chunk still without a vector
    /// queued for the model (at its page's priority); how many chunks were written.
    fn pages_committed(&mut self, version: u64, batch: WriteBatch, origins: Vec<Origin>) -> usize {
        self.landed();
        self.plan.committed(&batch, tokio::time::Instant::now());
        for s in &batch.removals {
            self.vectors.forget_page(s);
        }
        let mut chunks = 0;
        for (w, origin) in batch.upserts.into_iter().zip(origins) {
            let p = w.page;
            chunks += p.chunks.len();
            self.status.cleared(&self.id, &p.path);
            let waiting: Vec<&cairn_ingest::Chunk> =
                p.chunks.iter().zip(&w.vectors).filter(|(_, v)| v.is_none()).map(|(c, _)| c).collect();
            self.vectors.page_waits(&p.slug, waiting.len());
            for c in waiting {
                self.vectors.queue(c.id.clone(), origin.priority());
            }
        }
        self.status.set_pages(&self.id, self.plan.known().len());
        self.status.set_version(&self.id, version);
        self.publish_vectors();
        chunks
    }
}

/// Write a page commit: the rows, the journal entry, the resident index (before anyone hears
/// of it, so a `page_indexed` subscriber finds the page), then its events.
async fn write_pages(
    sink: Sink,
    mut batch: WriteBatch,
    reused: usize,
    mut events: Vec<EventKind>,
) -> Result<(u64, WriteBatch), PipelineError> {
    let started = Instant::now();
    let reused = reused + stored_vectors(&sink.resident, &sink.id, &mut batch.upserts).await;
    let version = sink.store.write(&batch).await?;
    let upserted = batch.upserts.iter().map(|w| w.page.slug.clone()).collect();
    let change = Change {
        version,
        committed_unix_ms: crate::core::event::unix_ms(),
        upserted,
        removed: batch.removals.clone(),
        ..Default::default()
    };
    // Between the tables and the journal: where a kill leaves a commit readers were not told of.
    cairn_index::fault::point("writer.committed");
    sink.record(change).await?;
    let lang = sink.resident.lang();
    let (batch, prepared) = tokio::task::spawn_blocking(move || {
        let prepared = Prepared::batch(&batch, lang);
        (batch, prepared)
    })
    .await
    .map_err(|e| PipelineError::Task {
        what: "preparing the committed batch for reading",
        message: e.to_string(),
    })?;
    let pending_total = sink.resident.apply(prepared).await?;
    events.extend(batch.upserts.iter().map(|w| EventKind::PageIndexed {
        path: w.page.path.clone(),
        slug: w.page.slug.clone(),
        chunks: w.page.chunks.len(),
        version,
        vectors_pending: w.vectors.iter().filter(|v| v.is_none()).count(),
    }));
    events.extend(batch.removals.iter().map(|s| EventKind::PageRemoved { slug: s.clone(), version }));
    events.push(EventKind::Committed {
        pages: batch.upserts.len(),
        removed: batch.removals.len(),
        chunks_embedded: 0,
        chunks_reused: reused,
        chunks_pending: pending_total,
        embed_ms: 0,
        commit_ms: started.elapsed().as_millis() as u64,
        version,
    });
    sink.emit.emit(&sink.id, events).await;
    Ok((version, batch))
}

/// Chunks of `upserts` without a vector whose text another chunk already has one for, given the
/// stored vector (a source whose resident vectors are int8 codes cannot give it from memory, and
/// a row written without it would lose it); how many were given. A failed read only costs the
/// model's time later.
async fn stored_vectors(resident: &Resident, source: &str, upserts: &mut [PageWrite]) -> usize {
    let held: Vec<String> = {
        let index = resident.read();
        if index.exact_vectors() {
            return 0;
        }
        let missing = upserts.iter().flat_map(|w| w.page.chunks.iter().zip(&w.vectors));
        missing
            .filter(|(c, v)| v.is_none() && index.has_vector(&c.text_hash))
            .map(|(c, _)| c.text_hash.clone())
            .collect()
    };
    if held.is_empty() {
        return 0;
    }
    let refs: Vec<&str> = held.iter().map(String::as_str).collect();
    let known = resident.known_vectors(&refs).await.unwrap_or_else(|e| {
        tracing::warn!("source `{source}`: stored vectors could not be read ({e}); embedding again");
        HashMap::new()
    });
    let mut given = 0;
    for w in upserts {
        for (c, v) in w.page.chunks.iter().zip(&mut w.vectors) {
            if v.is_none()
                && let Some(k) = known.get(&c.text_hash)
            {
                *v = Some(k.clone());
                given += 1;
            }
        }
    }
    given
}
