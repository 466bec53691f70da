//! The running system and its handle, [`Cairn`].
//!
//! [`Cairn::open`] starts an actix system on a thread of its own (actors on one arbiter thread;
//! LanceDB and searches on a small multi-threaded tokio runtime; parsing and inference on
//! `SyncArbiter` threads) and returns a cloneable handle usable from any async runtime.
//! [`Cairn::start`] starts the same actors in the caller's actix system instead (tests replay
//! under paused time that way).

use crate::config::Config;
use crate::event::{Event, EventKind, SYSTEM_STREAM};
use crate::log::{Emitter, EventLog, SyncLog};
use crate::query::{Get, PageWithBody, QueryActor, Search};
use crate::status::{SourceStatus, StatusBoard};
use crate::watcher::{Flush, Inject, StopWatching, Watcher, WatcherOptions};
use crate::workers::{EmbedWorker, Parser};
use crate::writer::{Ready, SourceWriter, WriterOptions, WriterParts};
use actix::prelude::*;
use cairn_index::{Database, Embedder, Manifest, OrtEmbedder, OrtOptions};
use cairn_ingest::{ParseOptions, RawEvent, ScanOptions};
use cairn_query::{SearchRequest, SearchResponse};
use futures::stream::BoxStream;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};

/// Events kept for subscribers that fall behind; a subscriber further behind skips ahead (and
/// is told so in the log), it never slows the pipeline.
const SUBSCRIBER_BUFFER: usize = 8192;

/// Why the system could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Index(#[from] cairn_index::Error),
    #[error(transparent)]
    Query(#[from] cairn_query::QueryError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("cairn has stopped")]
    Stopped,
    #[error("{0}")]
    Pipeline(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

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
    /// The real model, provisioned (or from `config.model.dir`), loaded twice.
    pub async fn load(config: &Config) -> Result<Self> {
        let dir = config.model.dir.clone();
        let threads = config
            .model
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let (index, query) = tokio::task::spawn_blocking(move || {
            let files = cairn_index::provision_with(dir.as_deref())?;
            let index = OrtEmbedder::from_files(
                &files,
                OrtOptions { intra_threads: threads, ..OrtOptions::default() },
            )?;
            let query =
                OrtEmbedder::from_files(&files, OrtOptions { intra_threads: 1, ..OrtOptions::default() })?;
            Ok::<_, cairn_index::Error>((index, query))
        })
        .await
        .map_err(|e| Error::Pipeline(format!("loading the model: {e}")))??;
        Ok(Self { index: Arc::new(index), query: Arc::new(query) })
    }
}

struct Inner {
    query: Addr<QueryActor>,
    watchers: BTreeMap<String, Addr<Watcher>>,
    emit: Emitter,
    events: broadcast::Sender<Arc<Event>>,
    status: StatusBoard,
    shutdown: Duration,
    stopped: std::sync::atomic::AtomicBool,
    /// Freshness for readers in other processes; stopped (its file removed) at shutdown.
    publisher: Mutex<Option<crate::published::Publisher>>,
}

/// Held by the handles given out by [`Cairn::open`]: the signal that stops the system's thread.
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

/// A running cairn: watches its sources, keeps their index current, answers queries.
///
/// ```no_run
/// use cairn_actors::{Cairn, Config, SourceConfig, SearchRequest};
///
/// # async fn demo() -> Result<(), cairn_actors::Error> {
/// let config = Config::new(
///     "/tmp/cairn-db",
///     vec![SourceConfig { id: "notes".into(), root: "/home/me/vault".into(), include: vec![], exclude: vec![] }],
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
pub struct Cairn {
    inner: Arc<Inner>,
    guard: Option<Arc<Guard>>,
}

impl std::fmt::Debug for Cairn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cairn").field("sources", &self.inner.watchers.keys().collect::<Vec<_>>()).finish()
    }
}

impl Cairn {
    /// Load the model, start the system on its own thread, and return once every source's tables
    /// are open (the catch-up scan goes on in the background; [`Cairn::flush`] waits for it).
    pub async fn open(config: Config) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let embedders = Embedders::load(&config).await?;
        let (ready_tx, ready_rx) = oneshot::channel::<Result<Cairn>>();
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
                let cairn = match Cairn::start(config, embedders).await {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let me = cairn.clone();
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

    /// Start the actors in the current actix system (the caller runs it).
    pub async fn start(config: Config, embedders: Embedders) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let status = StatusBoard::default();
        let (events, _) = broadcast::channel(SUBSCRIBER_BUFFER);
        let log_dir = config.event_log_dir();
        if let Some(d) = &log_dir {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::Config(format!("event log {}: {e}", d.display())))?;
        }
        let publisher = log_dir.as_ref().and_then(|d| {
            crate::published::Publisher::start(d.clone(), status.clone())
                .inspect_err(|e| tracing::warn!("status file: {e}; other processes see no freshness"))
                .ok()
        });
        let (tx, st, max) = (events.clone(), status.clone(), config.log_max_mib * 1024 * 1024);
        let log = SyncArbiter::start(1, move || {
            EventLog::open(log_dir.as_deref(), max, tx.clone(), st.clone()).unwrap_or_else(|e| {
                tracing::error!("event log: {e}; events are not journaled");
                EventLog::open(None, max, tx.clone(), st.clone()).expect("no file")
            })
        });
        let emit = Emitter::new(log, tokio::time::Instant::now());
        let unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let ids: Vec<String> = config.sources.iter().map(|s| s.id.clone()).collect();
        emit.emit(SYSTEM_STREAM, vec![EventKind::SystemStarted { unix_ms, sources: ids }]).await;

        let db = Database::open(&config.db).await?;
        let manifest = Manifest::current(embedders.index.model_id(), embedders.index.dim());
        // Inference takes the cores (one worker × all ort threads); parsing is light next to it.
        let parser = SyncArbiter::start(1, || Parser::new(ParseOptions::default()));
        let index_embedder = embedders.index.clone();
        let embedder = SyncArbiter::start(1, move || EmbedWorker::new(index_embedder.clone()));
        let query = QueryActor::new(
            Some(embedders.query.clone()),
            emit.clone(),
            status.clone(),
            config.event_log_dir(),
        )
        .start();

        let parts = WriterParts {
            db,
            manifest,
            embedder,
            query: query.clone(),
            emit: emit.clone(),
            status: status.clone(),
            opts: WriterOptions { commit_chunks: config.commit_chunks, commit_after: config.commit_after() },
        };
        let wopts = WatcherOptions {
            quiet_ms: config.debounce_ms,
            reconcile_every: (config.reconcile_secs > 0).then(|| Duration::from_secs(config.reconcile_secs)),
            notify: config.watch,
        };
        let mut watchers = BTreeMap::new();
        for s in &config.sources {
            status.register(&s.id, &s.root.display().to_string());
            let (id, root, p) = (s.id.clone(), s.root.clone(), parts.clone());
            let writer = Supervisor::start(move |_| SourceWriter::new(&id, root, p));
            // Answered once the writer's start-up (opening the tables) has run.
            let _ = writer.send(Ready).await;
            let scan = ScanOptions { include: s.include.clone(), exclude: s.exclude.clone() };
            let w = Watcher::new(
                &s.id,
                s.root.clone(),
                scan,
                wopts.clone(),
                parser.clone(),
                writer,
                emit.clone(),
                status.clone(),
            )
            .map_err(|e| Error::Config(format!("source `{}`: {e}", s.id)))?;
            watchers.insert(s.id.clone(), w.start());
        }
        Ok(Cairn {
            inner: Arc::new(Inner {
                query,
                watchers,
                emit,
                events,
                status,
                shutdown: Duration::from_secs(config.shutdown_secs),
                stopped: Default::default(),
                publisher: Mutex::new(publisher),
            }),
            guard: None,
        })
    }

    /// Answer a query over the live index (with each source's pending changes).
    pub async fn search(&self, req: SearchRequest) -> Result<SearchResponse> {
        Ok(self.inner.query.send(Search(req)).await.map_err(|_| Error::Stopped)??)
    }

    /// Where one page stands at every layer of the query engine for `query`.
    pub async fn diagnose(&self, query: &str, source: &str, slug: &str) -> Result<cairn_query::Diagnosis> {
        let msg = crate::query::Diagnose { query: query.into(), source: source.into(), slug: slug.into() };
        Ok(self.inner.query.send(msg).await.map_err(|_| Error::Stopped)??)
    }

    /// One page with its body; `None` when the source has no such slug.
    pub async fn get(&self, source: &str, slug: &str) -> Result<Option<PageWithBody>> {
        self.inner
            .query
            .send(Get { source: source.into(), slug: slug.into() })
            .await
            .map_err(|_| Error::Stopped)?
            .map_err(Error::Pipeline)
    }

    /// Every source: pages, pending changes, lag, last event, failures.
    pub fn status(&self) -> Vec<SourceStatus> {
        self.inner.status.all()
    }

    /// Every event from now on (a subscriber that falls more than a few thousand events behind
    /// skips ahead; the log file has them all).
    pub fn subscribe(&self) -> BoxStream<'static, Arc<Event>> {
        let rx = self.inner.events.subscribe();
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

    /// Resolves when everything seen so far is searchable: pending file events are settled, the
    /// folders are compared with the index (catching anything the watcher has not been told yet),
    /// and every writer has committed.
    pub async fn flush(&self) -> Result<()> {
        self.flush_with(true).await
    }

    /// [`Cairn::flush`] without the folder comparison: only the events seen so far.
    pub async fn settle(&self) -> Result<()> {
        self.flush_with(false).await
    }

    async fn flush_with(&self, rescan: bool) -> Result<()> {
        let all = self.inner.watchers.values().map(|w| w.send(Flush { rescan }));
        let mut failed = Vec::new();
        for (id, r) in self.inner.watchers.keys().zip(futures::future::join_all(all).await) {
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => failed.push(format!("{id}: {e}")),
                Err(_) => return Err(Error::Stopped),
            }
        }
        let _ = self.inner.emit.log().send(SyncLog).await;
        if failed.is_empty() { Ok(()) } else { Err(Error::Pipeline(failed.join("; "))) }
    }

    /// Feed a raw file event to a source's watcher as if notify had reported it (replays).
    pub async fn inject(&self, source: &str, event: RawEvent) -> Result<()> {
        let w = self
            .inner
            .watchers
            .get(source)
            .ok_or_else(|| Error::Config(format!("unknown source `{source}`")))?;
        w.send(Inject(event)).await.map_err(|_| Error::Stopped)
    }

    /// Stop watching, drain every queue (settle, parse, embed, commit), close the log. Bounded by
    /// the configured shutdown deadline.
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
        for w in self.inner.watchers.values() {
            let _ = w.send(StopWatching).await;
        }
        let clean = matches!(wall_timeout(self.inner.shutdown, self.flush_with(false)).await, Some(Ok(())));
        if !clean {
            tracing::warn!(
                "shutdown: not everything was committed within {} s; the next start catches up",
                self.inner.shutdown.as_secs()
            );
        }
        self.inner.emit.emit(SYSTEM_STREAM, vec![EventKind::SystemStopped { clean }]).await;
        if let Some(mut p) = self.inner.publisher.lock().ok().and_then(|mut p| p.take()) {
            // Joins its thread (one period at most) and removes the file.
            let _ = tokio::task::spawn_blocking(move || p.stop()).await;
        }
        let _ = self.inner.emit.log().send(SyncLog).await;
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
