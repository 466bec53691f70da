//! The pipeline of the process that owns a database, and its handle, [`Pipeline`].
//!
//! [`Pipeline::open`] starts an actix system on a thread of its own (actors on one arbiter thread;
//! LanceDB and searches on a small multi-threaded tokio runtime; parsing on a `SyncArbiter`
//! thread, the model on the embedding scheduler's) and returns a cloneable handle usable from any
//! async runtime. [`Pipeline::start`] starts the same actors in the caller's actix system instead
//! (tests replay under paused time that way). [`crate::Pipeline`] is the handle most callers want:
//! it is this pipeline when the process owns the database, a client of the owner otherwise.

use crate::core::config::{Config, SourceConfig};
use crate::core::error::{Error, Result, SourceFailures};
use crate::core::event::{Event, EventKind, SYSTEM_STREAM};
use crate::core::folders::FolderBook;
use crate::core::log::{Emitter, SyncLog};
use crate::core::poison::PoisonBook;
use crate::core::status::{SourceStatus, StatusBoard};
use crate::engine::host::{HostCell, QueryHost};
use crate::engine::query::{FreshnessOf, QueryActor, StopServing};
use crate::engine::watcher::{
    Flush, Inject, Reconcile, ReconcileReport, StopWatching, Watcher, WatcherOptions,
};
use crate::engine::workers::Parser;
use crate::engine::writer::{AwaitVectors, SourceWriter, WriterParts};
use actix::prelude::*;
use cairn_index::{Embedder, OrtEmbedder, fault};
use cairn_ingest::RawEvent;
use futures::stream::BoxStream;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};

mod start;

use start::start_source;

/// Events kept for subscribers that fall behind; a subscriber further behind skips ahead (and
/// is told so in the log), it never slows the pipeline.
const SUBSCRIBER_BUFFER: usize = 8192;

/// The embedders a system runs with: one for indexing (behind the embedding worker) and one for
/// queries (so a query never waits behind a batch).
#[derive(Clone)]
pub struct Embedders {
    pub index: Arc<dyn Embedder>,
    pub query: Arc<dyn Embedder>,
}

impl std::fmt::Debug for Embedders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedders").field("model", &self.index.model_id()).finish()
    }
}

impl Embedders {
    /// The real model, provisioned (or from `config.model.dir`), loaded twice; the indexing one's
    /// vectors kept by text where `[model] keep_vectors` (or `CAIRN_KEEP_VECTORS`) says.
    pub async fn load(config: &Config) -> Result<Self> {
        let model = config.model.clone();
        let threads =
            model.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let (index, query) = tokio::task::spawn_blocking(move || {
            let files = cairn_index::provision_with(model.dir.as_deref())?;
            let index = OrtEmbedder::from_files(&files, model.ort_options(threads))?;
            let query = OrtEmbedder::from_files(&files, model.ort_options(1))?;
            Ok::<_, cairn_index::Error>((index, query))
        })
        .await
        .map_err(|e| Error::Pipeline(format!("loading the model: {e}")))??;
        let index: Arc<dyn Embedder> = Arc::new(index);
        let index = match config.model.kept_vectors() {
            Some(dir) => Arc::new(cairn_index::embed::Kept::new(index, &dir)?),
            None => index,
        };
        Ok(Self { index, query: Arc::new(query) })
    }
}

/// One source's running stages.
#[derive(Debug, Clone)]
struct Running {
    config: SourceConfig,
    watcher: Addr<Watcher>,
    writer: Addr<SourceWriter>,
}

/// What every source shares, for starting more of them later.
#[derive(Clone)]
struct Shared {
    parts: WriterParts,
    parser: Addr<Parser>,
    book: Arc<PoisonBook>,
    folders: Arc<FolderBook>,
    wopts: WatcherOptions,
    arbiter: actix::ArbiterHandle,
}

struct Inner {
    query: Addr<QueryActor>,
    /// The sources answered from (the query actor keeps them current).
    host: Arc<HostCell>,
    /// The pipeline's runtime: searches run on its worker threads.
    runtime: tokio::runtime::Handle,
    sources: Mutex<BTreeMap<String, Running>>,
    shared: Shared,
    emit: Emitter,
    events: broadcast::Sender<Arc<Event>>,
    /// Subscribed before the first event: the first `subscribe()` gets every event from the
    /// start (`cairn index` counts its run's events; a fast catch-up must not be missed).
    first: Mutex<Option<broadcast::Receiver<Arc<Event>>>>,
    status: StatusBoard,
    shutdown: Duration,
    stopped: std::sync::atomic::AtomicBool,
    /// Dropped once the pipeline has drained (the owner lock: released only when nothing is
    /// being written any more).
    keep: Mutex<Vec<Box<dyn std::any::Any + Send>>>,
    /// On an object store: the events shipped to the store, and the task that ships them (and
    /// the book of failed pages).
    outbox: Option<crate::replication::shipping::Outbox>,
    shipping: Option<tokio::task::JoinHandle<()>>,
    /// The task that shares the book of failed pages through the store.
    sharing: Option<tokio::task::JoinHandle<()>>,
}

/// Held by the handles given out by [`Pipeline::open`]: the signal that stops the system's thread.
struct Guard {
    stop: Mutex<Option<oneshot::Sender<oneshot::Sender<()>>>>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        // Dropping the last handle shuts down like `shutdown()`, without waiting for it.
        if let Some(tx) = self.stop.get_mut().ok().and_then(Option::take) {
            let (done, _) = oneshot::channel();
            let _ = tx.send(done);
        }
    }
}

/// A running cairn: watches its sources and keeps their index current. Queries are answered from
/// the sources it keeps ([`Pipeline::host`]) by the API's read verbs ([`crate::api::reads`]);
/// most callers want the [`crate::Cairn`] handle, which runs a pipeline when no other process
/// owns the database:
///
/// ```no_run
/// use cairn_actors::{Cairn, Config, SourceConfig, SearchRequest};
///
/// # async fn demo() -> Result<(), cairn_actors::Error> {
/// let config = Config::new(
///     "/tmp/cairn-db",
///     vec![SourceConfig { id: "notes".into(), root: "/home/me/vault".into(), include: vec![], exclude: vec![], language: None }],
/// );
/// let cairn = Cairn::open(config).await?;
/// cairn.flush().await?; // everything on disk now is searchable
/// let answer = cairn.search(SearchRequest::new("hall of light")).await?;
/// for r in &answer.results {
///     println!("{} {} {:?}", r.slug, r.score, r.create_safety);
/// }
/// cairn.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Pipeline {
    inner: Arc<Inner>,
    guard: Option<Arc<Guard>>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("sources", &self.source_ids()).finish()
    }
}

impl Pipeline {
    /// Load the model, start the system on its own thread, and return once every source's tables
    /// are open (the catch-up scan goes on in the background; [`Pipeline::flush`] waits for it).
    pub async fn open(config: Config) -> Result<Self> {
        Self::open_publishing(config, None).await
    }

    /// [`Pipeline::open`] for the writer of a database on an object store: every commit is made
    /// under `publishing`'s lease and told to its journal.
    pub async fn open_publishing(
        config: Config,
        publishing: Option<crate::replication::journal::Publishing>,
    ) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let embedders = Embedders::load(&config).await?;
        fault::point_async("pipeline.model").await;
        let (ready_tx, ready_rx) = oneshot::channel::<Result<Pipeline>>();
        let (stop_tx, stop_rx) = oneshot::channel::<oneshot::Sender<()>>();
        std::thread::Builder::new().name("cairn-actors".into()).spawn(move || {
            let workers = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 4);
            let runtime = move || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(workers)
                    .thread_name("cairn-io")
                    .enable_all()
                    .build()
                    .expect("a tokio runtime")
            };
            let system = System::with_tokio_rt(runtime);
            system.block_on(async move {
                let cairn = match Pipeline::start_publishing(config, embedders, publishing).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let me = cairn.clone();
                fault::point("pipeline.started");
                let _ = ready_tx.send(Ok(cairn));
                // Wait for `shutdown()` or for the last outside handle to go.
                let done = stop_rx.await.ok();
                me.drain().await;
                if let Some(done) = done {
                    let _ = done.send(());
                }
            });
        })?;
        let mut cairn = ready_rx.await.map_err(|_| Error::Stopped)??;
        cairn.guard = Some(Arc::new(Guard { stop: Mutex::new(Some(stop_tx)) }));
        Ok(cairn)
    }

    /// Ids of the sources this system watches.
    pub fn source_ids(&self) -> Vec<String> {
        self.inner.sources.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    fn running(&self) -> Vec<(String, Running)> {
        self.inner
            .sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Watch another source from now on (its tables are created or opened, and its catch-up
    /// scan starts). A source already watched from the same folder is left as it is.
    pub async fn add_source(&self, source: SourceConfig) -> Result<()> {
        crate::core::config::validate_source_id(&source.id).map_err(Error::Config)?;
        if !source.root.is_absolute() {
            // Taken from this process's working directory it would name another folder than the
            // one its sender meant, and be saved so in the manifest.
            return Err(Error::Config(format!(
                "source `{}`: the folder {} is relative; give its full path",
                source.id,
                source.root.display()
            )));
        }
        if let Some(existing) =
            self.inner.status.get(&source.id).filter(|_| self.source_ids().contains(&source.id))
        {
            if Path::new(&existing.root) == source.root {
                return Ok(());
            }
            return Err(Error::Config(format!(
                "source `{}` is already watched from {}; give the new folder another id",
                source.id, existing.root
            )));
        }
        let (tx, rx) = oneshot::channel();
        let (shared, status, emit) =
            (self.inner.shared.clone(), self.inner.status.clone(), self.inner.emit.clone());
        let arbiter = shared.arbiter.clone();
        // Actors start on the system's own arbiter, whatever runtime the caller is on.
        arbiter.spawn(async move {
            let _ = tx.send(start_source(&shared, &status, &emit, source).await);
        });
        let (id, running) = rx.await.map_err(|_| Error::Stopped)??;
        self.inner.sources.lock().unwrap_or_else(|p| p.into_inner()).insert(id, running);
        Ok(())
    }

    /// Stop watching a source and stop serving it; `forget` also drops its tables and the pages
    /// remembered as failed in it (`cairn forget`).
    pub async fn remove_source(&self, id: &str, forget: bool) -> Result<()> {
        let running = self.inner.sources.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        let served = self.inner.query.send(StopServing(id.to_string())).await.map_err(|_| Error::Stopped)?;
        if running.is_none() && !served && !forget {
            return Err(Error::Config(format!(
                "unknown source `{id}`; sources: {}",
                self.source_ids().join(", ")
            )));
        }
        if let Some(r) = running {
            let _ = r.watcher.send(StopWatching).await;
            if !forget {
                // What was seen before the stop is kept.
                let _ = r.writer.send(crate::engine::writer::Commit).await;
            }
            let _ = r.watcher.send(crate::engine::watcher::Close).await;
            // Sent, not awaited: the supervisor ends once no address of the writer is left.
            r.writer.do_send(crate::engine::writer::Close);
        }
        self.inner.status.remove(id);
        if forget {
            self.inner.shared.parts.db.drop_source(id).await?;
            if let Some(dir) = &self.inner.shared.parts.opts.snapshots {
                cairn_index::ResidentIndex::forget_snapshot(&crate::engine::writer::snapshot_path(dir, id));
            }
            self.inner.shared.book.forget_source(id);
            self.inner.shared.folders.forget(id);
            if let Some(p) = &self.inner.shared.parts.opts.publishing {
                p.journal.forget(id).await;
            }
        }
        Ok(())
    }

    /// Compare a source's folder with its index now; with `allow_removals`, apply the removals
    /// the guard holds, and those of an empty or other folder (`cairn reconcile`).
    pub async fn reconcile(&self, id: &str, allow_removals: bool) -> Result<ReconcileReport> {
        let watcher = self.running().into_iter().find(|(s, _)| s == id).map(|(_, r)| r.watcher);
        let Some(watcher) = watcher else {
            let why = match self.inner.status.get(id) {
                Some(st) => st.error.unwrap_or_else(|| format!("`{id}` is not watched here")),
                None => format!("unknown source `{id}`; sources: {}", self.source_ids().join(", ")),
            };
            return Err(Error::Config(why));
        };
        watcher
            .send(Reconcile { allow_removals })
            .await
            .map_err(|_| Error::Stopped)?
            .map_err(|e| Error::Sources(SourceFailures(vec![(id.to_string(), e)])))
    }

    /// Drop a source's tables and index its folder again from scratch.
    pub async fn reindex(&self, id: &str) -> Result<()> {
        let config =
            self.running().into_iter().find(|(s, _)| s == id).map(|(_, r)| r.config).ok_or_else(|| {
                Error::Config(format!(
                    "`{id}` is not a source watched here (its folder is needed to index it again)"
                ))
            })?;
        self.remove_source(id, true).await?;
        self.add_source(config).await
    }

    /// The sources this process answers from, as they are now.
    pub fn host(&self) -> Arc<QueryHost> {
        self.inner.host.now()
    }

    /// Where searches run: the pipeline's runtime (its worker threads embed and score, whatever
    /// runtime the caller is on).
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.inner.runtime
    }

    /// Each source's freshness now, for an answer about to be searched, and the sources whose
    /// folder cannot be read (see [`crate::engine::query::watched_before`]).
    pub fn freshness_before(&self) -> (std::collections::BTreeSet<String>, FreshnessOf<'static>) {
        crate::engine::query::watched_before(&self.inner.status)
    }

    /// Journal an answer (its `query_answered` event).
    pub async fn answered(&self, answered: crate::core::event::QueryAnswered) {
        let kind = EventKind::QueryAnswered(Box::new(answered));
        self.inner.emit.emit(crate::core::event::QUERY_STREAM, vec![kind]).await;
    }

    /// Every source: pages, pending changes, lag, vectors to go, failures.
    pub fn status(&self) -> Vec<SourceStatus> {
        self.inner.status.all()
    }

    /// This process's memory, with what LanceDB's caches hold of it.
    pub async fn memory(&self) -> crate::core::status::Memory {
        let (all, metadata) = self.inner.shared.parts.db.cache_mib().await;
        crate::core::status::Memory {
            store_cache_mib: Some(all),
            store_metadata_cache_mib: Some(metadata),
            ..crate::core::status::Memory::now()
        }
    }

    /// Every event from now on; the first subscriber gets every event since the start. (A
    /// subscriber that falls more than a few thousand events behind skips ahead; the log file
    /// has them all.)
    pub fn subscribe(&self) -> BoxStream<'static, Arc<Event>> {
        let first = self.inner.first.lock().unwrap_or_else(|p| p.into_inner()).take();
        let rx = first.unwrap_or_else(|| self.inner.events.subscribe());
        Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            loop {
                match rx.recv().await {
                    Ok(e) => return Some((e, rx)),
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        tracing::warn!("event subscriber fell {n} events behind; skipped them");
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        }))
    }

    /// Resolves when everything seen so far is searchable, by meaning too: pending file events
    /// are settled, the folders are compared with the index (catching anything the watcher has
    /// not been told yet), every writer has committed, and every chunk has its vector.
    pub async fn flush(&self) -> Result<()> {
        self.flush_with(true, true).await
    }

    /// [`Pipeline::flush`] without the folder comparison: only the events seen so far.
    pub async fn settle(&self) -> Result<()> {
        self.flush_with(false, true).await
    }

    /// Everything seen so far searchable by name and keyword (vectors may still be coming).
    pub async fn flush_pages(&self) -> Result<()> {
        self.flush_with(true, false).await
    }

    /// A flush (see [`Pipeline::flush`]) followed by a `flushed` event carrying `token`.
    pub async fn flush_marked(&self, rescan: bool, vectors: bool, token: Option<u64>) -> Result<()> {
        let r = self.flush_with(rescan, vectors).await;
        if let Some(token) = token {
            self.inner.emit.emit(SYSTEM_STREAM, vec![EventKind::Flushed { token }]).await;
        }
        r
    }

    async fn flush_with(&self, rescan: bool, vectors: bool) -> Result<()> {
        let running = self.running();
        let all = running.iter().map(|(_, r)| r.watcher.send(Flush { rescan }));
        let mut failed = Vec::new();
        for ((id, _), r) in running.iter().zip(futures::future::join_all(all).await) {
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => failed.push((id.clone(), e)),
                Err(_) => return Err(Error::Stopped),
            }
        }
        if vectors {
            let all = running.iter().map(|(_, r)| r.writer.send(AwaitVectors));
            for ((id, _), r) in running.iter().zip(futures::future::join_all(all).await) {
                match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => failed.push((id.clone(), e)),
                    Err(_) => return Err(Error::Stopped),
                }
            }
        }
        let _ = self.inner.emit.log().send(SyncLog).await;
        if failed.is_empty() { Ok(()) } else { Err(Error::Sources(SourceFailures(failed))) }
    }

    /// Feed a raw file event to a source's watcher as if notify had reported it (replays).
    pub async fn inject(&self, source: &str, event: RawEvent) -> Result<()> {
        let w = self
            .running()
            .into_iter()
            .find(|(id, _)| id == source)
            .map(|(_, r)| r.watcher)
            .ok_or_else(|| Error::Config(format!("unknown source `{source}`")))?;
        w.send(Inject(event)).await.map_err(|_| Error::Stopped)
    }

    /// Stop watching, drain the queues (settle, parse, commit pages and the vectors already
    /// computed), close the log. Bounded by the configured shutdown deadline; chunks still
    /// waiting for the model are embedded at the next start.
    pub async fn shutdown(&self) -> Result<()> {
        let owned = self.guard.as_ref().and_then(|g| g.stop.lock().unwrap_or_else(|p| p.into_inner()).take());
        match owned {
            Some(tx) => {
                let (done_tx, done_rx) = oneshot::channel();
                if tx.send(done_tx).is_ok() {
                    let _ = done_rx.await;
                }
            }
            None => self.drain().await,
        }
        Ok(())
    }

    async fn drain(&self) {
        if self.inner.stopped.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        fault::point("drain.begin");
        for (_, r) in self.running() {
            let _ = r.watcher.send(StopWatching).await;
        }
        fault::point("drain.watchers_stopped");
        let flushed = wall_timeout(self.inner.shutdown, self.flush_with(false, false)).await;
        let clean = matches!(flushed, Some(Ok(())));
        match flushed {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!("shutdown: not everything was committed ({e}); the next start catches up")
            }
            None => tracing::warn!(
                "shutdown: not everything was committed within {} s; the next start catches up",
                self.inner.shutdown.as_secs()
            ),
        }
        fault::point("drain.flushed");
        self.inner.emit.emit(SYSTEM_STREAM, vec![EventKind::SystemStopped { clean }]).await;
        let _ = self.inner.emit.log().send(SyncLog).await;
        fault::point("drain.logged");
        if let Some(o) = &self.inner.outbox {
            o.ship().await;
            o.push_book(&self.inner.shared.book).await;
        }
        for task in [&self.inner.shipping, &self.inner.sharing].into_iter().flatten() {
            task.abort();
        }
        // The lock goes only once no writer can commit any more (see `Retire`).
        let writers: Vec<_> =
            self.running().into_iter().map(|(_, r)| r.writer.send(crate::engine::writer::Retire)).collect();
        let closed = wall_timeout(self.inner.shutdown, futures::future::join_all(writers)).await.is_some();
        fault::point("drain.retired");
        if closed {
            self.inner.keep.lock().unwrap_or_else(|p| p.into_inner()).clear();
        } else {
            tracing::error!(
                "shutdown: a commit is still running after {} s; the database stays locked until this process exits",
                self.inner.shutdown.as_secs()
            );
        }
    }

    /// Keep `value` until the pipeline has drained (after `shutdown`, or after the last handle
    /// went and the queues were drained).
    pub fn keep_until_stopped(&self, value: Box<dyn std::any::Any + Send>) {
        self.inner.keep.lock().unwrap_or_else(|p| p.into_inner()).push(value);
    }
}

/// `fut`, or `None` once `limit` of wall-clock time has passed. Not tokio's timer: under paused
/// time (replays) that one fires whenever the runtime waits on another thread.
async fn wall_timeout<F: std::future::Future>(limit: Duration, fut: F) -> Option<F::Output> {
    let (tx, rx) = oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        let _ = tx.send(());
    });
    futures::pin_mut!(fut);
    match futures::future::select(fut, rx).await {
        futures::future::Either::Left((out, _)) => Some(out),
        futures::future::Either::Right(_) => None,
    }
}
