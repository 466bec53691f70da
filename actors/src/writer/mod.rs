//! `SourceWriter`: one per source, the only writer of that source's tables, and the keeper of its
//! resident index. It receives parsed pages and removals in order, skips pages whose content is
//! what is stored, buffers the rest and commits in two phases:
//!
//! 1. **Pages** (on size, deadline, or `Commit`): page rows and chunk rows with the vectors
//!    already known (reused by text hash from memory), the rest without. The pages are then
//!    searchable by name and keyword; `page_indexed` says so, with how many of its chunks wait.
//! 2. **Vectors**: the chunks without one go to the embedding scheduler (an edited page's ahead
//!    of bulk work), at most two requests out at a time, and each answer is attached by a commit
//!    of its own; `page_embedded` says when a page has all of its vectors.
//!
//! What a page commit holds is decided by the pure [`plan::Planner`] (changed or not, last
//! version wins, removals, moves by content), replayed from fixtures; this actor sequences it
//! with the store, the resident index and the model.
//!
//! A crash at any moment converges: the chunk rows carry their page's content hash, so rows a
//! crash left disagreeing are found at the next start and redone; chunks left without vectors
//! are embedded then (and only those).
//!
//! Supervision: started under `actix::Supervisor`. When LanceDB fails, the writer reports
//! `stage_failed`, keeps its buffer, stops, and is restarted with exponential backoff (reloading
//! the source from its tables); the other sources' writers are untouched.

mod backlog;
mod plan;
mod upkeep;

use crate::embedding::{EmbedScheduler, Priority};
use crate::event::EventKind;
use crate::log::Emitter;
use crate::query::{AddSource, QueryActor};
use crate::status::StatusBoard;
use crate::workers::Parsed;
use actix::prelude::*;
use backlog::Backlog;
use cairn_index::{
    Database, Manifest, PageState, PageWrite, Prepared, Resident, ResidentIndex, SourceInfo, SourceStore,
    WriteBatch,
};
use plan::Planner;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use upkeep::{Upkeep, Work};

/// Mailbox bound: a few parse groups may wait while a batch commits; beyond that the watcher's
/// `send` waits, and so (through its bounded channel) does the file-system watcher.
const MAILBOX: usize = 4;
/// Upkeep runs this long after it falls due (so a burst of commits finishes first).
const UPKEEP_DELAY: Duration = Duration::from_secs(2);
/// Table versions are kept this long after they are superseded: a reader that opened one can
/// finish with it; older ones are removed by the upkeep. While an owner writes, the tables'
/// other readers are its own (one query's reads, milliseconds): clients ask the owner. The room
/// a busy watch takes beyond a fresh index is about this window's worth of compactions (each
/// rewrites a part-filled fragment), so it is short: at 3 edits/s on FOLDOC, 60 s of them
/// took 2.2× a fresh index (BENCHMARKS.md, the soak).
pub const KEEP_VERSIONS: Duration = Duration::from_secs(10);
/// On an object store, readers on other machines read the tables too, following the journal
/// as much as `max_lag_s` behind and loading whole sources (minutes at a million chunks):
/// versions are kept this long there, and files no version references are never removed (they
/// may be another process's commit in flight).
pub const KEEP_VERSIONS_SHARED: Duration = Duration::from_secs(600);
/// The longest a scan's pages wait in the buffer for more to fill a commit (an edit's wait is
/// `commit_after`). Committing each parse group at the edit deadline made a first index of 47k
/// pages take twice as long.
const BULK_COMMIT_AFTER: Duration = Duration::from_secs(1);

/// Writer knobs.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Commit pages once this many chunks are buffered; also the size of a bulk embedding request.
    pub commit_chunks: usize,
    /// Commit at most this long after an edit was buffered (a scan's pages wait up to
    /// [`BULK_COMMIT_AFTER`] for more).
    pub commit_after: Duration,
    /// Chunks the source holds with exact vectors in memory (int8 codes past it).
    pub exact_vectors_up_to: usize,
    /// The folder of the sources' resident-index snapshots (`None`: none are kept; every open
    /// reads the tables).
    pub snapshots: Option<PathBuf>,
    /// On an object store: the writer lease commits are made under, and the journal readers on
    /// other machines follow (`None`: a local database, or a pipeline run without a lease).
    pub publishing: Option<crate::journal::Publishing>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            commit_chunks: 512,
            commit_after: Duration::from_millis(50),
            exact_vectors_up_to: cairn_index::vectors::EXACT_VECTORS_UP_TO,
            snapshots: None,
            publishing: None,
        }
    }
}

/// Where a change came from: a file event (someone is editing: its vectors go first) or a scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    Edit,
    #[default]
    Scan,
}

impl Origin {
    fn priority(self) -> Priority {
        match self {
            Origin::Edit => Priority::Edit,
            Origin::Scan => Priority::Bulk,
        }
    }
}

/// One source's writer.
pub struct SourceWriter {
    id: String,
    root: PathBuf,
    info: SourceInfo,
    db: Database,
    manifest: Manifest,
    store: Option<SourceStore>,
    resident: Option<Resident>,
    /// What the next page commit holds, and the stored state of every page.
    plan: Planner,
    timer: Option<SpawnHandle>,
    /// When `timer` falls due.
    timer_due: Option<Instant>,
    /// The chunks waiting for vectors, and the vectors on their way to the tables.
    vectors: Backlog,
    /// When the upkeep is due, and what it does.
    upkeep_due: Upkeep,
    upkeep: Option<SpawnHandle>,
    idle_upkeep: Option<SpawnHandle>,
    failures: u32,
    /// Closed on purpose (its source was removed): a supervisor restart stops at once.
    closed: bool,
    /// The pipeline has drained: this writer commits nothing more, and runs no upkeep.
    retired: bool,
    embedder: EmbedScheduler,
    query: Addr<QueryActor>,
    emit: Emitter,
    status: StatusBoard,
    opts: WriterOptions,
}

impl std::fmt::Debug for SourceWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceWriter")
            .field("source", &self.id)
            .field("known", &self.plan.known().len())
            .field("buffered_pages", &self.plan.buffered_pages())
            .field("buffered_chunks", &self.plan.buffered_chunks())
            .field("removals", &self.plan.pending_removals())
            .field("vectors_waiting", &self.vectors.queued.len())
            .finish()
    }
}

/// Everything a writer needs; the parts are shared by every source.
#[derive(Debug, Clone)]
pub struct WriterParts {
    pub db: Database,
    pub manifest: Manifest,
    pub embedder: EmbedScheduler,
    pub query: Addr<QueryActor>,
    pub emit: Emitter,
    pub status: StatusBoard,
    pub opts: WriterOptions,
}

impl SourceWriter {
    pub fn new(info: SourceInfo, root: PathBuf, parts: WriterParts) -> Self {
        Self {
            id: info.id.clone(),
            root,
            info,
            db: parts.db,
            manifest: parts.manifest,
            store: None,
            resident: None,
            plan: Planner::default(),
            timer: None,
            timer_due: None,
            vectors: Backlog::default(),
            upkeep_due: Upkeep::default(),
            upkeep: None,
            idle_upkeep: None,
            failures: 0,
            closed: false,
            retired: false,
            embedder: parts.embedder,
            query: parts.query,
            emit: parts.emit,
            status: parts.status,
            opts: parts.opts,
        }
    }

    /// Report an infrastructure failure and stop; the supervisor restarts this actor.
    fn fail(&mut self, ctx: &mut Context<Self>, stage: &str, reason: String) {
        self.failures += 1;
        let retry = crate::retry::after(self.failures);
        tracing::error!(
            "source `{}`: {stage} failed: {reason}; retrying in {} ms",
            self.id,
            retry.as_millis()
        );
        self.status.set_state(&self.id, "retrying", Some(reason.clone()));
        let (emit, id) = (self.emit.clone(), self.id.clone());
        let ev = EventKind::StageFailed { stage: stage.into(), reason, retry_ms: retry.as_millis() as u64 };
        // Spawned on the arbiter, not on this context: stopping must not cancel the report.
        actix::spawn(async move { emit.emit(&id, vec![ev]).await });
        ctx.stop();
    }

    fn ingest(&mut self, msg: Ingest, ctx: &mut Context<Self>) -> Vec<EventKind> {
        let now = tokio::time::Instant::now();
        let out = self.plan.ingest(msg.removed, msg.parsed, &msg.renamed, msg.origin, now);
        for f in out.failures {
            self.status.failure(&self.id, f);
        }
        self.status.done_in_flight(&self.id, out.done);
        if self.plan.buffered_chunks() < self.opts.commit_chunks {
            self.commit_later(msg.origin, ctx);
        }
        out.events
    }

    /// Commit what is buffered at its deadline (through the mailbox, so the commit is ordered with
    /// every other message): `commit_after` once an edit waits, [`BULK_COMMIT_AFTER`] while only
    /// a scan's pages do (the scan sends its own `Commit` when it is through, so its commits fill
    /// to `commit_chunks` rather than to whatever one parse group held when the deadline fell).
    fn commit_later(&mut self, origin: Origin, ctx: &mut Context<Self>) {
        if self.plan.is_empty() {
            return;
        }
        let after = match origin {
            Origin::Edit => self.opts.commit_after,
            Origin::Scan => self.opts.commit_after.max(BULK_COMMIT_AFTER),
        };
        let due = Instant::now() + after;
        if self.timer.is_some() && self.timer_due.is_some_and(|d| d <= due) {
            return;
        }
        self.cancel_timer(ctx);
        self.timer_due = Some(due);
        self.timer = Some(ctx.run_later(after, |act, ctx| {
            act.timer = None;
            act.timer_due = None;
            ctx.notify(CommitDue);
        }));
    }

    fn cancel_timer(&mut self, ctx: &mut Context<Self>) {
        self.timer_due = None;
        if let Some(t) = self.timer.take() {
            ctx.cancel_future(t);
        }
    }

    fn commit_now(&mut self, ctx: &mut Context<Self>) {
        self.cancel_timer(ctx);
        if let Some(f) = self.commit_future() {
            ctx.wait(f.map(|_, _, _| ()));
        }
    }

    /// Why this writer may not commit now: on an object store, it no longer holds the writer
    /// lease (or has not renewed it in time).
    fn refused(&self) -> Option<String> {
        if self.retired {
            return Some(format!(
                "source `{}`: the pipeline has stopped, so it commits nothing more",
                self.id
            ));
        }
        let p = self.opts.publishing.as_ref()?;
        (!p.lease.valid()).then(|| {
            format!(
                "source `{}`: this process no longer holds the writer lease, so it commits nothing more",
                self.id
            )
        })
    }

    /// The vector of a text, if one is known (committed, or embedded moments ago).
    fn known_vector(&self, hash: &str) -> Option<Vec<f32>> {
        self.vectors
            .fresh
            .get(hash)
            .cloned()
            .or_else(|| self.resident.as_ref().and_then(|r| r.read().vector_of(hash)))
    }

    /// The page commit of everything buffered, or `None` when there is nothing to write.
    fn commit_future(&mut self) -> Option<actix::fut::LocalBoxActorFuture<Self, Result<u64, String>>> {
        if self.plan.is_empty() {
            return None;
        }
        let (Some(store), Some(resident)) = (self.store.clone(), self.resident.clone()) else {
            return Some(Box::pin(actix::fut::ready(Err("store not open".to_string()))));
        };
        if let Some(refused) = self.refused() {
            return Some(Box::pin(actix::fut::ready(Err(refused))));
        }
        cairn_index::fault::point("writer.commit");
        let journal = self.opts.publishing.as_ref().map(|p| p.journal.clone());
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
        let (emit, id) = (self.emit.clone(), self.id.clone());
        let origins: Vec<Origin> = plan.pages.iter().map(|w| w.origin).collect();
        let deferred = plan.deferred.clone();
        let fut = async move {
            let started = Instant::now();
            let mut batch = batch;
            let reused = reused + stored_vectors(&resident, &id, &mut batch.upserts).await;
            let version = store.write(&batch).await.map_err(|e| e.to_string())?;
            if let Some(journal) = &journal {
                let change = crate::journal::Change {
                    version,
                    committed_unix_ms: crate::event::unix_ms(),
                    upserted: batch.upserts.iter().map(|w| w.page.slug.clone()).collect(),
                    removed: batch.removals.clone(),
                    ..Default::default()
                };
                journal.record(&id, change).await;
            }
            // Into the resident index before anyone hears of it, so a `page_indexed` subscriber
            // finds the page.
            let batch = tokio::task::spawn_blocking(move || {
                let prepared = Prepared::batch(&batch);
                (batch, prepared)
            })
            .await
            .map_err(|e| format!("preparing the committed batch for reading: {e}"))?;
            let (batch, prepared) = batch;
            let pending_total = resident.apply(prepared).await.map_err(|e| e.to_string())?;
            let mut events = deferred;
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
            emit.emit(&id, events).await;
            Ok::<_, String>((version, batch))
        };
        let fut = actix::fut::wrap_future::<_, Self>(fut).map(move |res, act, ctx| match res {
            Ok((version, batch)) => {
                act.failures = 0;
                act.plan.committed(&batch, tokio::time::Instant::now());
                for s in &batch.removals {
                    act.vectors.left.remove(s);
                }
                let mut chunks = 0;
                for (w, origin) in batch.upserts.into_iter().zip(origins) {
                    let p = w.page;
                    chunks += p.chunks.len();
                    act.status.cleared(&act.id, &p.path);
                    let waiting: Vec<&cairn_ingest::Chunk> = p
                        .chunks
                        .iter()
                        .zip(&w.vectors)
                        .filter(|(_, v)| v.is_none())
                        .map(|(c, _)| c)
                        .collect();
                    if waiting.is_empty() {
                        act.vectors.left.remove(&p.slug);
                    } else {
                        act.vectors.left.insert(p.slug.clone(), waiting.len());
                    }
                    for c in waiting {
                        act.vectors.queue(c.id.clone(), origin.priority());
                    }
                }
                act.status.set_pages(&act.id, act.plan.known().len());
                act.status.set_version(&act.id, version);
                act.publish_vectors();
                act.status.done_in_flight(&act.id, plan.items);
                act.status.set_state(&act.id, "watching", None);
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

    /// Send chunks waiting for vectors to the model: edits first, at most [`backlog::MAX_EMBEDS_OUT`]
    /// requests out. Texts with a known vector skip the model.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let Some(resident) = self.resident.clone() else { return };
        while let Some((ids, priority)) = self.vectors.next_request(self.opts.commit_chunks) {
            // Each distinct text once; texts already known skip the model.
            let (mut texts, mut hashes): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
            let mut by_text: HashMap<String, (usize, Vec<String>)> = HashMap::new();
            {
                let index = resident.read();
                for id in ids {
                    let Some((_, hash, text)) = index.waiting(&id) else { continue };
                    if let Some(v) = self.vectors.fresh.get(&hash).cloned().or_else(|| index.vector_of(&hash))
                    {
                        self.vectors.ready.push((id, v));
                        continue;
                    }
                    match by_text.get_mut(&hash) {
                        Some((_, ids)) => ids.push(id),
                        None => {
                            by_text.insert(hash.clone(), (texts.len(), vec![id]));
                            texts.push(text);
                            hashes.push(hash);
                        }
                    }
                }
            }
            if texts.is_empty() {
                continue;
            }
            self.vectors.sent(priority);
            let (scheduler, id, resident) = (self.embedder.clone(), self.id.clone(), resident.clone());
            let fut =
                async move { embed_or_reuse(&scheduler, &resident, &id, priority, texts, hashes).await };
            ctx.spawn(actix::fut::wrap_future::<_, Self>(fut).map(move |res, act, ctx| {
                act.vectors.answered(priority);
                // An error means the scheduler stopped (shutting down): the chunks stay without
                // vectors in the tables and are embedded at the next start.
                if let Ok(reply) = res {
                    act.received(reply, by_text, ctx);
                }
                act.pump(ctx);
            }));
        }
        if !self.vectors.ready.is_empty() && self.vectors.out == 0 {
            self.commit_vectors(ctx);
        }
        self.settle_waiters();
    }

    /// The model's answer: each text's vector goes to every chunk waiting for that text.
    fn received(
        &mut self,
        reply: crate::embedding::EmbedReply,
        by_text: HashMap<String, (usize, Vec<String>)>,
        ctx: &mut Context<Self>,
    ) {
        self.vectors.model += reply.model;
        self.warn_truncated(&reply.truncated, &by_text);
        for (hash, (i, ids)) in by_text {
            match &reply.vectors[i] {
                Some(v) => {
                    self.vectors.embedded += usize::from(!reply.reused.contains(&i));
                    self.vectors.remember(hash, v.clone());
                    self.vectors.ready.extend(ids.into_iter().map(|id| (id, v.clone())));
                }
                None => {
                    let why = reply.failed.iter().find(|(j, _)| *j == i).map_or("", |(_, w)| w.as_str());
                    tracing::warn!(
                        "source `{}`: a chunk could not be embedded ({why}); it is found by its words only",
                        self.id
                    );
                }
            }
        }
        self.commit_vectors(ctx);
    }

    /// Chunks longer than the model's token window were embedded from their first tokens only:
    /// each page holding one gets a `page_warning` (its words are all still found by keyword).
    /// The chunker's budget is an estimate; text dense in rare tokens (long identifiers, URLs,
    /// base64) can exceed it.
    fn warn_truncated(&mut self, truncated: &[usize], by_text: &HashMap<String, (usize, Vec<String>)>) {
        if truncated.is_empty() {
            return;
        }
        let Some(resident) = self.resident.as_ref() else { return };
        let mut per_page: std::collections::BTreeMap<String, usize> = Default::default();
        {
            let index = resident.read();
            for (i, ids) in by_text.values() {
                if !truncated.contains(i) {
                    continue;
                }
                for id in ids {
                    if let Some((slug, _, _)) = index.waiting(id) {
                        *per_page.entry(slug).or_default() += 1;
                    }
                }
            }
            let slugs: Vec<&str> = per_page.keys().map(String::as_str).collect();
            let paths: HashMap<String, String> =
                index.pages(&slugs).into_iter().map(|p| (p.slug, p.path)).collect();
            per_page = per_page
                .into_iter()
                .map(|(slug, n)| (paths.get(&slug).cloned().unwrap_or(slug), n))
                .collect();
        }
        self.vectors.warnings.extend(per_page.into_iter().map(|(path, n)| EventKind::PageWarning {
            path,
            kind: "chunk_truncated".into(),
            reason: format!(
                "{n} chunk(s) longer than the model's {} token window are embedded from their first tokens; \
                 split long paragraphs or code blocks for their meaning to be found",
                cairn_index::embed::MODEL_WINDOW
            ),
        }));
    }

    /// Commit the vectors that are ready (ordered with every other write of this source).
    fn commit_vectors(&mut self, ctx: &mut Context<Self>) {
        if self.vectors.ready.is_empty() {
            return;
        }
        let (Some(store), Some(resident)) = (self.store.clone(), self.resident.clone()) else { return };
        let ready = std::mem::take(&mut self.vectors.ready);
        let (embedded, model) =
            (std::mem::take(&mut self.vectors.embedded), std::mem::take(&mut self.vectors.model));
        let warnings = std::mem::take(&mut self.vectors.warnings);
        let (emit, id) = (self.emit.clone(), self.id.clone());
        // Pages whose last waiting chunk this is.
        let mut per_page: HashMap<String, usize> = HashMap::new();
        {
            let index = resident.read();
            for (chunk, _) in &ready {
                if let Some((slug, _, _)) = index.waiting(chunk) {
                    *per_page.entry(slug).or_default() += 1;
                }
            }
        }
        let mut complete: Vec<String> = Vec::new();
        for (slug, n) in &per_page {
            if let Some(left) = self.vectors.left.get_mut(slug) {
                *left = left.saturating_sub(*n);
                if *left == 0 {
                    self.vectors.left.remove(slug);
                    complete.push(slug.clone());
                }
            }
        }
        complete.sort();
        let n = ready.len();
        if let Some(refused) = self.refused() {
            self.fail(ctx, "writer", refused);
            return;
        }
        let journal = self.opts.publishing.as_ref().map(|p| p.journal.clone());
        self.vectors.committing += 1;
        let fut = async move {
            let started = Instant::now();
            let version = store.attach_vectors(&ready).await.map_err(|e| e.to_string())?;
            if let Some(journal) = &journal {
                let change = crate::journal::Change {
                    version,
                    committed_unix_ms: crate::event::unix_ms(),
                    vectors: ready.iter().map(|(chunk, _)| chunk.clone()).collect(),
                    ..Default::default()
                };
                journal.record(&id, change).await;
            }
            let pending = resident.apply_vectors(ready).await.map_err(|e| e.to_string())?;
            let mut events = warnings;
            events.extend(complete.into_iter().map(|slug| EventKind::PageEmbedded { slug, version }));
            events.push(EventKind::Committed {
                pages: 0,
                removed: 0,
                chunks_embedded: embedded,
                chunks_reused: n - embedded.min(n),
                chunks_pending: pending,
                embed_ms: model.as_millis() as u64,
                commit_ms: (started.elapsed() + model).as_millis() as u64,
                version,
            });
            emit.emit(&id, events).await;
            Ok::<_, String>((pending, version))
        };
        ctx.wait(actix::fut::wrap_future::<_, Self>(fut).map(move |res, act, ctx| match res {
            Ok((pending, version)) => {
                act.vectors.committing -= 1;
                act.status.set_version(&act.id, version);
                act.vectors.recent.push_back((Instant::now(), n));
                act.publish_vectors();
                debug_assert!(pending == act.resident.as_ref().map_or(0, |r| r.read().unembedded_count()));
                act.note_commit(0, n, ctx);
                act.settle_waiters();
            }
            // The chunks keep no vector in the tables; the restart reloads and embeds them again.
            Err(e) => {
                act.vectors.committing -= 1;
                act.fail(ctx, "writer", e)
            }
        }));
    }

    /// Chunks stored, chunks waiting for vectors and the recent rate, into the status.
    fn publish_vectors(&mut self) {
        let (chunks, pending) =
            self.resident.as_ref().map_or((0, 0), |r| (r.read().chunk_count(), r.read().unembedded_count()));
        let rate = self.vectors.rate(Instant::now());
        self.status.set_vectors(&self.id, chunks, pending, rate);
    }

    /// Where this source's resident-index snapshot is kept, if snapshots are.
    fn snapshot(&self) -> Option<PathBuf> {
        self.opts.snapshots.as_ref().map(|dir| snapshot_path(dir, &self.id))
    }

    /// Answer `flush` callers once nothing waits for a vector.
    fn settle_waiters(&mut self) {
        if self.vectors.idle() && self.plan.is_empty() {
            for w in self.vectors.waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// Count a commit towards upkeep, and schedule it when it falls due (once: a steady stream
    /// of commits must not postpone it for ever). Every commit also moves the idle upkeep: once
    /// the writer has been idle past the keep window, one more run compacts what the last
    /// commits left and removes every version but the current one, so a watch at rest takes
    /// the room of a fresh index.
    fn note_commit(&mut self, chunks: usize, rewritten: usize, ctx: &mut Context<Self>) {
        let due = self.upkeep_due.committed(chunks, rewritten);
        if let Some(idle) = self.idle_upkeep.take() {
            ctx.cancel_future(idle);
        }
        self.idle_upkeep = Some(ctx.run_later(KEEP_VERSIONS + UPKEEP_DELAY, |act, ctx| {
            act.idle_upkeep = None;
            act.run_upkeep(true, ctx);
        }));
        if self.upkeep.is_some() || !due {
            return;
        }
        self.upkeep = Some(ctx.run_later(UPKEEP_DELAY, |act, ctx| {
            act.upkeep = None;
            act.run_upkeep(false, ctx);
        }));
    }

    /// Compaction, then old versions and stray files removed, in the writer's own sequence (as
    /// its commits are): no commit of this writer runs meanwhile, so a compaction never loses a
    /// commit race (LanceDB would refuse it and its rewritten files would stay behind, unused),
    /// and files no version references are strays of a crash or of an older build, safe to
    /// remove. An edit arriving meanwhile waits for one compaction of the small fragments.
    /// The run once the writer is `idle` also saves the resident index's snapshot, when the
    /// source keeps one and it no longer matches the tables.
    fn run_upkeep(&mut self, idle: bool, ctx: &mut Context<Self>) {
        if self.retired {
            return;
        }
        let (Some(store), id, emit) = (self.store.clone(), self.id.clone(), self.emit.clone()) else {
            return;
        };
        // While vectors are being written, every vector commit rewrites rows of the chunks
        // table: a compaction now would redo work the next commits undo, so it waits for the
        // commit after the backfill; the key indexes follow the table meanwhile (see
        // [`Upkeep::run`]). (Queued or in flight: a chunk the model refused stays without a
        // vector for good and must not hold compaction off for ever.)
        let vectors_busy = self.vectors.out > 0
            || self.vectors.committing > 0
            || !self.vectors.edits.is_empty()
            || !self.vectors.bulk.is_empty();
        let work = self.upkeep_due.run(vectors_busy);
        let resident = self.resident.clone().filter(|_| idle);
        let snapshot = self.snapshot().zip(resident.clone());
        let exact_up_to = self.opts.exact_vectors_up_to;
        let shared = self.opts.publishing.is_some();
        let fut = async move {
            let t0 = Instant::now();
            match work {
                Work::Compact => store.optimize().await?,
                Work::IndexKeys => store.index_keys().await?,
                Work::PruneOnly => {}
            }
            let pruned = match shared {
                false => store.prune(KEEP_VERSIONS, true).await?,
                true => store.prune(KEEP_VERSIONS_SHARED, false).await?,
            };
            // The chunk file copied without its dead records (the snapshot must then name the
            // copy, though the tables did not move).
            let compacted = match &resident {
                Some(r) => r.compact_chunk_file().await?,
                None => None,
            };
            if let Some((before, after)) = compacted {
                tracing::info!("source `{id}`: chunk file compacted from {before} to {after} bytes");
            }
            if let Some((path, resident)) = snapshot.filter(|(_, r)| !r.holds_text()) {
                let stamp = store.stamp(exact_up_to).await?;
                if compacted.is_some() || ResidentIndex::stamp_of(&path) != Some(stamp) {
                    resident.save(&path, stamp).await;
                }
            }
            let ev = EventKind::Optimized {
                ms: t0.elapsed().as_millis() as u64,
                versions_removed: pruned.old_versions,
                bytes_removed: pruned.bytes_removed,
                compacted: work == Work::Compact,
            };
            emit.emit(&id, vec![ev]).await;
            Ok::<_, cairn_index::Error>(())
        };
        ctx.wait(actix::fut::wrap_future::<_, Self>(fut).map(|res, act, _| {
            if let Err(e) = res {
                tracing::warn!(
                    "source `{}`: upkeep failed (searches stay correct; the tables grow): {e}",
                    act.id
                )
            }
        }));
    }
}

/// The file of source `id`'s resident-index snapshot in the folder `dir`.
pub(crate) fn snapshot_path(dir: &std::path::Path, id: &str) -> PathBuf {
    let name: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '~' }).collect();
    dir.join(format!("{name}.snapshot"))
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

/// Vectors for `texts` (with their `hashes`): those the store already holds for another chunk
/// of the same text, read from it (a source whose resident vectors are int8 codes cannot give
/// them from memory), the model's for the rest; one reply in request order. A failed read only
/// costs the model's time.
async fn embed_or_reuse(
    scheduler: &EmbedScheduler,
    resident: &Resident,
    source: &str,
    priority: Priority,
    texts: Vec<String>,
    hashes: Vec<String>,
) -> Result<crate::embedding::EmbedReply, crate::embedding::Stopped> {
    let held: Vec<&str> = {
        let index = resident.read();
        hashes.iter().map(String::as_str).filter(|h| index.has_vector(h)).collect()
    };
    let known = if held.is_empty() {
        HashMap::new()
    } else {
        resident.known_vectors(&held).await.unwrap_or_else(|e| {
            tracing::warn!("source `{source}`: stored vectors could not be read ({e}); embedding again");
            HashMap::new()
        })
    };
    if known.is_empty() {
        return scheduler.embed(source, priority, texts).await;
    }
    let (rest, rest_texts): (Vec<usize>, Vec<String>) =
        texts.into_iter().enumerate().filter(|(i, _)| !known.contains_key(&hashes[*i])).unzip();
    let reply = scheduler.embed(source, priority, rest_texts).await?;
    let mut vectors: Vec<Option<Vec<f32>>> = hashes.iter().map(|h| known.get(h).cloned()).collect();
    for (j, v) in reply.vectors.into_iter().enumerate() {
        vectors[rest[j]] = v;
    }
    Ok(crate::embedding::EmbedReply {
        reused: (0..hashes.len()).filter(|i| known.contains_key(&hashes[*i])).collect(),
        vectors,
        failed: reply.failed.into_iter().map(|(j, why)| (rest[j], why)).collect(),
        truncated: reply.truncated.into_iter().map(|j| rest[j]).collect(),
        model: reply.model,
    })
}

impl Actor for SourceWriter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX);
        if self.closed {
            ctx.stop();
            return;
        }
        // Requests out before a restart were cancelled with the old context.
        self.vectors.out = 0;
        self.vectors.edits_out = 0;
        let delay = if self.failures > 0 { crate::retry::after(self.failures) } else { Duration::ZERO };
        let (db, manifest, info) = (self.db.clone(), self.manifest.clone(), self.info.clone());
        let exact_vectors_up_to = self.opts.exact_vectors_up_to;
        let snapshot = self.snapshot();
        let (query, root, emit) = (self.query.clone(), self.root.clone(), self.emit.clone());
        let journal = self.opts.publishing.as_ref().map(|p| p.journal.clone());
        let open = async move {
            tokio::time::sleep(delay).await;
            let id = info.id.clone();
            // Tables made here (new, or rebuilt) start an incarnation readers load whole.
            let mut fresh = !db.source_ids().await.map_err(|e| e.to_string())?.contains(&id);
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
            }
            .map_err(|e| e.to_string())?;
            if let Some(journal) = journal.as_ref().filter(|_| fresh) {
                let version = store.version().await.map_err(|e| e.to_string())?;
                let committed_unix_ms = crate::event::unix_ms();
                journal
                    .record(
                        &id,
                        crate::journal::Change {
                            version,
                            committed_unix_ms,
                            reset: true,
                            ..Default::default()
                        },
                    )
                    .await;
            }
            store.register(&info).await.map_err(|e| e.to_string())?;
            let started = Instant::now();
            let (resident, loaded, from_snapshot) = match &snapshot {
                Some(path) => Resident::open(&store, exact_vectors_up_to, path).await,
                None => Resident::load(&store, exact_vectors_up_to).await.map(|(r, l)| (r, l, false)),
            }
            .map_err(|e| e.to_string())?;
            let open_ms = started.elapsed().as_millis() as u64;
            query
                .send(AddSource { store: store.clone(), resident: resident.clone(), root: Some(root) })
                .await
                .map_err(|e| format!("query actor stopped: {e}"))?;
            let pending = resident.read().unembedded_count();
            let version = store.version().await.map_err(|e| e.to_string())?;
            emit.emit(
                &id,
                vec![EventKind::SourceStarted {
                    pages: loaded.states.len(),
                    vectors_pending: pending,
                    from_snapshot,
                    open_ms,
                }],
            )
            .await;
            if !loaded.inconsistent.is_empty() || !loaded.orphans.is_empty() {
                tracing::warn!(
                    "source `{id}`: {} page(s) whose rows a crash left disagreeing and {} orphan(s) are redone",
                    loaded.inconsistent.len(),
                    loaded.orphans.len()
                );
            }
            Ok::<_, String>((store, resident, loaded, version))
        };
        ctx.wait(actix::fut::wrap_future::<_, Self>(open).map(|res, act, ctx| match res {
            Ok((store, resident, loaded, version)) => {
                act.store = Some(store);
                act.status.set_version(&act.id, version);
                act.plan.load(loaded.states, loaded.orphans);
                // Chunks committed without vectors (a backfill a stop interrupted) resume, behind
                // anything edited since.
                act.vectors =
                    Backlog { waiters: std::mem::take(&mut act.vectors.waiters), ..Backlog::default() };
                {
                    let index = resident.read();
                    for (chunk, _, _) in index.unembedded() {
                        if let Some((slug, _, _)) = index.waiting(&chunk) {
                            *act.vectors.left.entry(slug).or_default() += 1;
                        }
                        act.vectors.queue(chunk, Priority::Bulk);
                    }
                    act.status.set_vectors(&act.id, index.chunk_count(), index.unembedded_count(), 0.0);
                }
                act.upkeep_due = Upkeep::new(resident.read().chunk_count());
                act.resident = Some(resident);
                act.status.set_pages(&act.id, act.plan.known().len());
                if act.failures > 0 {
                    // Retry what failed before anything newer.
                    act.commit_now(ctx);
                } else {
                    act.commit_later(Origin::Edit, ctx);
                }
                act.pump(ctx);
            }
            Err(e) => act.fail(ctx, "storage", e),
        }));
    }
}

impl Supervised for SourceWriter {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::info!("source `{}`: restarting the writer", self.id);
    }
}

/// Parsed files and removed paths of one source, in the order they happened.
#[derive(Debug, Default, Message)]
#[rtype(result = "()")]
pub struct Ingest {
    pub parsed: Vec<Parsed>,
    /// Removed paths; `true` when the path may be a folder (every page under it goes too).
    pub removed: Vec<(PathBuf, bool)>,
    /// Renames the path events reported (`from`, `to`), so a rename by hash is not told twice.
    pub renamed: Vec<(String, String)>,
    pub origin: Origin,
}

impl Handler<Ingest> for SourceWriter {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Ingest, ctx: &mut Context<Self>) -> Self::Result {
        let events = self.ingest(msg, ctx);
        let (emit, id) = (self.emit.clone(), self.id.clone());
        let logged = actix::fut::wrap_future::<_, Self>(async move { emit.emit(&id, events).await });
        if self.plan.buffered_chunks() < self.opts.commit_chunks {
            return AtomicResponse::new(Box::pin(logged));
        }
        self.cancel_timer(ctx);
        let commit = self.commit_future();
        AtomicResponse::new(Box::pin(logged.then(
            move |_, _, _| -> actix::fut::LocalBoxActorFuture<Self, ()> {
                match commit {
                    Some(f) => Box::pin(f.map(|_, _, _| ())),
                    None => Box::pin(actix::fut::ready(())),
                }
            },
        )))
    }
}

/// Commit the pages received so far; answers with the table version.
#[derive(Debug, Message)]
#[rtype(result = "Result<u64, String>")]
pub struct Commit;

impl Handler<Commit> for SourceWriter {
    type Result = AtomicResponse<Self, Result<u64, String>>;

    fn handle(&mut self, _: Commit, ctx: &mut Context<Self>) -> Self::Result {
        self.cancel_timer(ctx);
        match self.commit_future() {
            Some(f) => AtomicResponse::new(f),
            None => {
                let store = self.store.clone();
                AtomicResponse::new(Box::pin(actix::fut::wrap_future(async move {
                    match store {
                        Some(s) => s.version().await.map_err(|e| e.to_string()),
                        None => Err("store not open".into()),
                    }
                })))
            }
        }
    }
}

/// Resolves once every chunk committed so far has its vector committed too.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), String>")]
pub struct AwaitVectors;

impl Handler<AwaitVectors> for SourceWriter {
    type Result = ResponseFuture<Result<(), String>>;

    fn handle(&mut self, _: AwaitVectors, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = oneshot::channel();
        self.vectors.waiters.push(tx);
        self.pump(ctx);
        Box::pin(async move { rx.await.map_err(|_| "the writer stopped".to_string()) })
    }
}

/// A path as stored, and the prefix of the paths under it when it may be a folder (else one no
/// path has).
/// The stored state of every page (for the watcher's catch-up comparison).
#[derive(Debug, Message)]
#[rtype(result = "HashMap<String, PageState>")]
pub struct States;

impl Handler<States> for SourceWriter {
    type Result = MessageResult<States>;

    fn handle(&mut self, _: States, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.plan.known().clone())
    }
}

/// How many stored pages these removed paths (`true`: maybe a folder) would take, and how many
/// pages are stored: the watcher's check that live removals are ordinary.
#[derive(Debug, Message)]
#[rtype(result = "(usize, usize)")]
pub struct Covers(pub Vec<(PathBuf, bool)>);

impl Handler<Covers> for SourceWriter {
    type Result = MessageResult<Covers>;

    fn handle(&mut self, msg: Covers, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.plan.covers(&msg.0))
    }
}

/// Whether the writer's tables are open (answered once its start-up has run).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Ready;

impl Handler<Ready> for SourceWriter {
    type Result = bool;

    fn handle(&mut self, _: Ready, _: &mut Context<Self>) -> bool {
        self.store.is_some()
    }
}

/// The commit deadline passed.
#[derive(Debug, Message)]
#[rtype(result = "()")]
struct CommitDue;

impl Handler<CommitDue> for SourceWriter {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: CommitDue, ctx: &mut Context<Self>) -> Self::Result {
        self.cancel_timer(ctx);
        match self.commit_future() {
            Some(f) => AtomicResponse::new(Box::pin(f.map(|_, _, _| ()))),
            None => AtomicResponse::new(Box::pin(actix::fut::ready(()))),
        }
    }
}

/// Commit nothing more and run no upkeep (the pipeline drained and lets go of the database).
/// Handled after a commit in flight (commits hold the actor), so its reply means none runs.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Retire;

impl Handler<Retire> for SourceWriter {
    type Result = ();

    fn handle(&mut self, _: Retire, _: &mut Context<Self>) {
        self.retired = true;
    }
}

/// Stop this actor now (its source is being removed).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Close;

impl Handler<Close> for SourceWriter {
    type Result = ();

    fn handle(&mut self, _: Close, ctx: &mut Context<Self>) {
        self.closed = true;
        for w in self.vectors.waiters.drain(..) {
            let _ = w.send(());
        }
        ctx.stop();
    }
}
