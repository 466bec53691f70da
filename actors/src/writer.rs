//! `SourceWriter`: one per source, the only writer of that source's tables. It receives parsed
//! pages and removals in order, skips pages whose content is what is stored, buffers the rest and
//! commits a batch (vectors reused by text hash, the rest embedded across pages in one request)
//! when the buffer reaches its size, when its deadline passes, or on `Commit` (flush, shutdown).
//! Events about pages are emitted after the commit that makes them true.
//!
//! Supervision: started under `actix::Supervisor`. When LanceDB or the model fails, the writer
//! reports `stage_failed`, keeps its buffer, stops, and is restarted with exponential backoff; the
//! other sources' writers are untouched.

use crate::event::EventKind;
use crate::log::Emitter;
use crate::query::{AddSource, Committed as QueryCommitted, QueryActor};
use crate::status::{FileFailure, StatusBoard};
use crate::workers::{Embed, EmbedWorker, Parsed};
use actix::prelude::*;
use cairn_index::{Database, Manifest, PageState, Prepared, SourceStore, commit_pages};
use cairn_ingest::{ParsedPage, rel_string, slugify_path};
use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::time::Duration;

/// Mailbox bound: a few parse groups may wait while a batch commits; beyond that the watcher's
/// `send` waits, and so (through its bounded channel) does the file-system watcher.
const MAILBOX: usize = 4;
/// Commits, or chunks written, between index refreshes (full-text indexes cover new rows only
/// after `optimize`; until then LanceDB searches the unindexed rows directly, which slows as
/// they grow).
const OPTIMIZE_EVERY: usize = 32;
const OPTIMIZE_CHUNKS: usize = 1000;
/// The refresh waits for this much quiet, and runs beside the writer, never in front of an
/// edit (it takes seconds on a large source).
const OPTIMIZE_IDLE: Duration = Duration::from_secs(2);
const BACKOFF_START: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long a removed page can still be matched, by content, with a new one as a move.
const RENAME_WINDOW: Duration = Duration::from_secs(5);

/// Writer knobs.
#[derive(Debug, Clone)]
pub struct WriterOptions {
    /// Commit once this many chunks are buffered (one embedding request, one write).
    pub commit_chunks: usize,
    /// Commit at most this long after the first change was buffered.
    pub commit_after: Duration,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self { commit_chunks: 512, commit_after: Duration::from_millis(50) }
    }
}

/// One source's writer.
pub struct SourceWriter {
    id: String,
    root: PathBuf,
    db: Database,
    manifest: Manifest,
    store: Option<SourceStore>,
    known: HashMap<String, PageState>,
    buffer: Vec<(ParsedPage, i64)>,
    buffered_chunks: usize,
    removals: BTreeSet<String>,
    /// Events decided at ingest time that become true with the next commit (renames by hash).
    deferred: Vec<EventKind>,
    /// Files behind the buffer and the removals, for the pending count.
    items: usize,
    /// Content hash → path and time of pages removed by recent commits (rename detection).
    recently_removed: HashMap<String, (String, tokio::time::Instant)>,
    /// The problems last reported per path, so a file re-read unchanged does not repeat them.
    reported: HashMap<String, Vec<String>>,
    timer: Option<SpawnHandle>,
    commits: usize,
    since_optimize: usize,
    chunks_since_optimize: usize,
    idle: Option<SpawnHandle>,
    failures: u32,
    embedder: Addr<EmbedWorker>,
    query: Addr<QueryActor>,
    emit: Emitter,
    status: StatusBoard,
    opts: WriterOptions,
}

impl std::fmt::Debug for SourceWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceWriter")
            .field("source", &self.id)
            .field("known", &self.known.len())
            .field("buffered_pages", &self.buffer.len())
            .field("buffered_chunks", &self.buffered_chunks)
            .field("removals", &self.removals.len())
            .finish()
    }
}

/// Everything a writer needs; the parts are shared by every source.
#[derive(Debug, Clone)]
pub struct WriterParts {
    pub db: Database,
    pub manifest: Manifest,
    pub embedder: Addr<EmbedWorker>,
    pub query: Addr<QueryActor>,
    pub emit: Emitter,
    pub status: StatusBoard,
    pub opts: WriterOptions,
}

impl SourceWriter {
    pub fn new(id: &str, root: PathBuf, parts: WriterParts) -> Self {
        Self {
            id: id.into(),
            root,
            db: parts.db,
            manifest: parts.manifest,
            store: None,
            known: HashMap::new(),
            buffer: Vec::new(),
            buffered_chunks: 0,
            removals: BTreeSet::new(),
            deferred: Vec::new(),
            items: 0,
            reported: HashMap::new(),
            recently_removed: HashMap::new(),
            timer: None,
            commits: 0,
            since_optimize: 0,
            chunks_since_optimize: 0,
            idle: None,
            failures: 0,
            embedder: parts.embedder,
            query: parts.query,
            emit: parts.emit,
            status: parts.status,
            opts: parts.opts,
        }
    }

    fn backoff(&self) -> Duration {
        let f = 2u32.saturating_pow(self.failures.saturating_sub(1).min(16));
        (BACKOFF_START * f).min(BACKOFF_MAX)
    }

    /// Report an infrastructure failure and stop; the supervisor restarts this actor.
    fn fail(&mut self, ctx: &mut Context<Self>, stage: &str, reason: String) {
        self.failures += 1;
        let retry = self.backoff();
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
        let mut events = Vec::new();
        let mut done = 0usize;
        // Removals first: they describe the folder before the files just read.
        for (rel, folder) in msg.removed {
            if self.remove_path(&rel, folder) {
                self.items += 1;
            } else {
                done += 1;
            }
        }
        for p in msg.parsed {
            match p {
                Parsed::Page { page, mtime_ms } => {
                    let page = *page;
                    let problems: Vec<String> = page.problems.iter().map(|e| e.to_string()).collect();
                    if self.reported.get(&page.path) != Some(&problems) {
                        events.extend(page.problems.iter().map(|e| EventKind::PageWarning {
                            path: page.path.clone(),
                            kind: e.kind().into(),
                            reason: e.to_string(),
                        }));
                        self.reported.insert(page.path.clone(), problems);
                    }
                    let unchanged = self.known.get(&page.slug).is_some_and(|s| {
                        s.content_hash == page.content_hash
                            && s.path == page.path
                            && !self.removals.contains(&page.slug)
                    }) && !self.buffer.iter().any(|(b, _)| b.slug == page.slug);
                    if unchanged {
                        // Touched, not changed: remember the file as it is now, so the next scan's
                        // stat check passes and does not read it again.
                        if let Some(s) = self.known.get_mut(&page.slug) {
                            s.mtime_ms = mtime_ms;
                            s.bytes = page.bytes as i64;
                        }
                        events.push(EventKind::PageSkipped {
                            path: page.path.clone(),
                            slug: page.slug.clone(),
                        });
                        done += 1;
                        continue;
                    }
                    events.push(EventKind::PageParsed {
                        path: page.path.clone(),
                        slug: page.slug.clone(),
                        chunks: page.chunks.len(),
                    });
                    self.buffered_chunks += page.chunks.len();
                    self.buffer.push((page, mtime_ms));
                    self.items += 1;
                }
                Parsed::Failed { rel, error } => {
                    let f = FileFailure {
                        path: rel_string(&rel),
                        kind: error.kind().into(),
                        reason: error.to_string(),
                    };
                    self.status.failure(&self.id, f.clone());
                    if self.reported.get(&f.path) != Some(&vec![f.reason.clone()]) {
                        self.reported.insert(f.path.clone(), vec![f.reason.clone()]);
                        events.push(EventKind::PageFailed { path: f.path, kind: f.kind, reason: f.reason });
                    }
                    done += 1;
                }
                // Only the page at that path: a folder standing there now holds new pages.
                Parsed::Gone { rel } | Parsed::Directory { rel } => {
                    self.reported.remove(&rel_string(&rel));
                    if self.remove_path(&rel, false) {
                        self.items += 1;
                    } else {
                        done += 1;
                    }
                }
            }
        }
        self.status.done_in_flight(&self.id, done);
        self.detect_renames_by_hash(&msg.renamed);
        if self.buffered_chunks >= self.opts.commit_chunks {
            // Committed by the `Ingest` handler, before the next message.
        } else if (!self.buffer.is_empty() || !self.removals.is_empty()) && self.timer.is_none() {
            // Through the mailbox, so the commit is ordered with every other message.
            self.timer = Some(ctx.run_later(self.opts.commit_after, |act, ctx| {
                act.timer = None;
                ctx.notify(CommitDue);
            }));
        }
        events
    }

    /// Mark the page at `rel` (and, with `folder`, every page under it) for removal. False when
    /// nothing stored is there.
    fn remove_path(&mut self, rel: &std::path::Path, folder: bool) -> bool {
        let path = rel_string(rel);
        // With `folder` off, a prefix no path can have.
        let prefix = if folder { format!("{path}/") } else { "\0".into() };
        let mut any = false;
        let slug = slugify_path(rel).unwrap_or_default();
        let under: Vec<String> = self
            .known
            .iter()
            .filter(|(s, st)| **s == slug && st.path == path || st.path.starts_with(&prefix))
            .map(|(s, _)| s.clone())
            .collect();
        for s in under {
            any |= self.removals.insert(s);
        }
        // A page buffered for that path and not yet committed goes too.
        let before = self.buffer.len();
        self.buffer.retain(|(p, _)| p.path != path && !p.path.starts_with(&prefix));
        any || before != self.buffer.len()
    }

    /// A removal and a new page with the same content are a rename the path events did not show
    /// (a delete + create pair, or a move while cairn was not running).
    fn detect_renames_by_hash(&mut self, by_path: &[(String, String)]) {
        // Removed pages: those waiting in this batch, and those committed moments ago (the two
        // halves of a move can settle in different ticks).
        let horizon = tokio::time::Instant::now().checked_sub(RENAME_WINDOW);
        self.recently_removed.retain(|_, (_, at)| horizon.is_none_or(|h| *at >= h));
        let mut gone: Vec<(String, String, String)> = self
            .removals
            .iter()
            .filter_map(|s| self.known.get(s).map(|st| (s.clone(), st.path.clone(), st.content_hash.clone())))
            .collect();
        gone.extend(
            self.recently_removed.iter().map(|(hash, (path, _))| (String::new(), path.clone(), hash.clone())),
        );
        for (slug, path, hash) in gone {
            let moved = self.buffer.iter().find(|(p, _)| {
                p.content_hash == hash
                    && p.slug != slug
                    && p.path != path
                    && !self.known.contains_key(&p.slug)
            });
            if let Some((p, _)) = moved {
                let already = by_path.iter().any(|(f, t)| *f == path && *t == p.path)
                    || self
                        .deferred
                        .iter()
                        .any(|e| matches!(e, EventKind::FileRenamed { to, .. } if *to == p.path));
                if !already {
                    self.deferred.push(EventKind::FileRenamed {
                        from: path,
                        to: p.path.clone(),
                        by_hash: true,
                    });
                }
            }
        }
    }

    fn cancel_timer(&mut self, ctx: &mut Context<Self>) {
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

    /// The commit of everything buffered, or `None` when there is nothing to write.
    fn commit_future(&mut self) -> Option<actix::fut::LocalBoxActorFuture<Self, Result<u64, String>>> {
        if self.buffer.is_empty() && self.removals.is_empty() {
            return None;
        }
        let Some(store) = self.store.clone() else {
            return Some(Box::pin(actix::fut::ready(Err("store not open".to_string()))));
        };
        // The last version of a page in the buffer wins.
        let mut pages: Vec<(ParsedPage, i64)> = Vec::new();
        for (p, m) in std::mem::take(&mut self.buffer) {
            pages.retain(|(q, _)| q.slug != p.slug);
            pages.push((p, m));
        }
        let removals: Vec<String> = std::mem::take(&mut self.removals)
            .into_iter()
            .filter(|s| !pages.iter().any(|(p, _)| p.slug == *s))
            .collect();
        let deferred = std::mem::take(&mut self.deferred);
        let items = std::mem::take(&mut self.items);
        self.buffered_chunks = 0;
        let (embedder, emit, query, id) =
            (self.embedder.clone(), self.emit.clone(), self.query.clone(), self.id.clone());
        let retry = (pages.clone(), removals.clone(), deferred.clone(), items);
        let fut = async move {
            let started = std::time::Instant::now();
            let embed_ms = std::sync::atomic::AtomicU64::new(0);
            let (done, batch) = commit_pages(&store, pages.clone(), removals.clone(), |texts| async {
                let t0 = std::time::Instant::now();
                let vectors = embedder
                    .send(Embed { texts })
                    .await
                    .map_err(|e| std::io::Error::other(format!("the embedder stopped: {e}")))?
                    .map_err(std::io::Error::other)?;
                embed_ms.store(t0.elapsed().as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
                Ok(vectors)
            })
            .await
            .map_err(|e| e.to_string())?;
            let mut events = deferred;
            events.extend(pages.iter().map(|(p, _)| EventKind::PageIndexed {
                path: p.path.clone(),
                slug: p.slug.clone(),
                chunks: p.chunks.len(),
                version: done.version,
            }));
            events.extend(
                removals.iter().map(|s| EventKind::PageRemoved { slug: s.clone(), version: done.version }),
            );
            events.push(EventKind::Committed {
                pages: done.pages,
                removed: done.removals,
                chunks_embedded: done.chunks_embedded,
                chunks_reused: done.chunks_reused,
                embed_ms: embed_ms.load(std::sync::atomic::Ordering::Relaxed),
                commit_ms: started.elapsed().as_millis() as u64,
                version: done.version,
            });
            // The query actor's resident index first, so a `page_indexed` subscriber finds the page.
            let batch = tokio::task::spawn_blocking(move || Prepared::batch(&batch))
                .await
                .map_err(|e| format!("preparing the committed batch for reading: {e}"))?;
            let _ = query.send(QueryCommitted { source: id.clone(), batch }).await;
            emit.emit(&id, events).await;
            Ok::<_, String>((done.version, pages, removals))
        };
        let fut = actix::fut::wrap_future::<_, Self>(fut).map(move |res, act, ctx| match res {
            Ok((version, pages, removals)) => {
                act.commits += 1;
                act.since_optimize += 1;
                act.chunks_since_optimize += pages.iter().map(|(p, _)| p.chunks.len()).sum::<usize>();
                if act.since_optimize >= OPTIMIZE_EVERY || act.chunks_since_optimize >= OPTIMIZE_CHUNKS {
                    if let Some(h) = act.idle.take() {
                        ctx.cancel_future(h);
                    }
                    act.idle = Some(ctx.run_later(OPTIMIZE_IDLE, |act, _| {
                        act.idle = None;
                        act.since_optimize = 0;
                        act.chunks_since_optimize = 0;
                        let (store, id, emit) = (act.store.clone(), act.id.clone(), act.emit.clone());
                        if let Some(store) = store {
                            // Beside the writer: LanceDB's optimistic concurrency orders the commits.
                            actix::spawn(async move {
                                let t0 = std::time::Instant::now();
                                match store.optimize().await {
                                    Ok(()) => {
                                        let ms = t0.elapsed().as_millis() as u64;
                                        emit.emit(&id, vec![EventKind::Optimized { ms }]).await;
                                    }
                                    Err(e) => tracing::warn!(
                                        "source `{id}`: index refresh failed (searches stay correct, slower): {e}"
                                    ),
                                }
                            });
                        }
                    }));
                }
                act.failures = 0;
                let now = tokio::time::Instant::now();
                for s in &removals {
                    if let Some(st) = act.known.remove(s) {
                        act.recently_removed.insert(st.content_hash, (st.path, now));
                    }
                }
                for (p, mtime_ms) in pages {
                    act.status.cleared(&act.id, &p.path);
                    act.known.insert(
                        p.slug.clone(),
                        PageState {
                            path: p.path.clone(),
                            content_hash: p.content_hash.clone(),
                            mtime_ms,
                            bytes: p.bytes as i64,
                            clean: p.problems.is_empty(),
                        },
                    );
                }
                act.status.set_pages(&act.id, act.known.len());
                act.status.done_in_flight(&act.id, items);
                act.status.set_state(&act.id, "watching", None);
                Ok(version)
            }
            Err(e) => {
                // Nothing is lost: the batch goes back in front of anything newer.
                let (pages, removals, deferred, items) = retry;
                let newer = std::mem::take(&mut act.buffer);
                act.buffered_chunks = pages.iter().chain(newer.iter()).map(|(p, _)| p.chunks.len()).sum();
                act.buffer = pages.into_iter().chain(newer).collect();
                act.removals.extend(removals);
                act.deferred.splice(0..0, deferred);
                act.items += items;
                act.fail(ctx, "writer", e.clone());
                Err(e)
            }
        });
        Some(Box::pin(fut))
    }
}

impl Actor for SourceWriter {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX);
        let delay = if self.failures > 0 { self.backoff() } else { Duration::ZERO };
        let (db, manifest, id) = (self.db.clone(), self.manifest.clone(), self.id.clone());
        let (query, root, emit) = (self.query.clone(), self.root.clone(), self.emit.clone());
        let open = async move {
            tokio::time::sleep(delay).await;
            let store = match db.open_source(&id, &manifest).await {
                Err(cairn_index::Error::ManifestMismatch { .. }) => {
                    tracing::warn!("source `{id}` was built by another model or version; rebuilding it");
                    db.rebuild_source(&id, &manifest).await
                }
                other => other,
            }
            .map_err(|e| e.to_string())?;
            let states = store.page_states().await.map_err(|e| e.to_string())?;
            query
                .send(AddSource { store: store.clone(), root: Some(root) })
                .await
                .map_err(|e| format!("query actor stopped: {e}"))??;
            emit.emit(&id, vec![EventKind::SourceStarted { pages: states.len() }]).await;
            Ok::<_, String>((store, states))
        };
        ctx.wait(actix::fut::wrap_future::<_, Self>(open).map(|res, act, ctx| match res {
            Ok((store, states)) => {
                act.store = Some(store);
                act.known = states;
                act.status.set_pages(&act.id, act.known.len());
                if act.failures > 0 {
                    // Retry what failed before anything newer.
                    act.commit_now(ctx);
                }
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
}

impl Handler<Ingest> for SourceWriter {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, msg: Ingest, ctx: &mut Context<Self>) -> Self::Result {
        let events = self.ingest(msg, ctx);
        let (emit, id) = (self.emit.clone(), self.id.clone());
        let logged = actix::fut::wrap_future::<_, Self>(async move { emit.emit(&id, events).await });
        if self.buffered_chunks < self.opts.commit_chunks {
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

/// Commit everything received so far; answers with the table version.
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

/// The stored state of every page (for the watcher's catch-up comparison).
#[derive(Debug, Message)]
#[rtype(result = "HashMap<String, PageState>")]
pub struct States;

impl Handler<States> for SourceWriter {
    type Result = MessageResult<States>;

    fn handle(&mut self, _: States, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.known.clone())
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
