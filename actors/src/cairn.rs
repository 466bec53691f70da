//! [`Cairn`]: the handle to a database, whichever process owns it.
//!
//! One process owns a database: the first to open it takes its lock ([`crate::owner`]), runs the
//! pipeline (watchers, parser, model, writers, resident indexes) and serves the others on its
//! socket ([`crate::server`]). Every other process that opens the database is a client of that
//! owner ([`crate::client`]): same calls, no model, no index of its own. A client opened with
//! `standby` takes the lock when the owner exits or is killed, runs its catch-up scan and serves
//! from then on; calls in flight at that moment fail with a retryable error.

use crate::client::Client;
use crate::config::{Config, SourceConfig};
use crate::event::Event;
use crate::host::{PageWithBody, QueryHost};
use crate::ipc::{ErrorCode, Hello, OwnerInfo, RemoteError, Request};
use crate::owner::OwnerLock;
use crate::paths::DbPaths;
use crate::server::{OwnerStatus, Server};
use crate::status::SourceStatus;
use crate::system::Pipeline;
use crate::{Error, Result};
use cairn_query::{Role, SearchRequest, SearchResponse};
use futures::stream::BoxStream;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a process that finds the lock taken waits for its holder to answer (the owner binds
/// its socket before loading the model, so clients queue while it starts).
const OWNER_STARTUP: Duration = Duration::from_secs(120);
/// How often a standby checks whether the lock is free.
const STANDBY_POLL: Duration = Duration::from_millis(200);

/// How a process opens a database.
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// What this process is (`watch`, `mcp`, `index`, `embedded`…): in the owner's status.
    pub purpose: String,
    /// As a client, take over when the owner goes.
    pub standby: bool,
    /// As a client, ask the owner to watch this configuration's sources too.
    pub register_sources: bool,
}

impl OpenOptions {
    pub fn new(purpose: &str) -> Self {
        Self { purpose: purpose.into(), standby: true, register_sources: true }
    }
}

/// What a process is and what its database holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// This process.
    pub pid: u32,
    pub role: Role,
    /// The owner (absent when this process reads the tables itself).
    pub owner: Option<OwnerInfo>,
    /// The memory of the process that holds the indexes (the owner, or this reader).
    #[serde(default)]
    pub memory: crate::status::Memory,
    /// The owner's clients.
    pub clients: Vec<Hello>,
    pub sources: Vec<SourceStatus>,
}

#[derive(Clone)]
struct Owned {
    pipeline: Pipeline,
    server: Arc<Server>,
    info: OwnerInfo,
}

#[derive(Clone)]
enum State {
    Owner(Owned),
    Client(Client),
    /// No process owns the database: this one reads its tables, read-only.
    Reader(Arc<QueryHost>),
}

struct Inner {
    config: Config,
    paths: DbPaths,
    opts: OpenOptions,
    state: Mutex<State>,
    closed: std::sync::atomic::AtomicBool,
    /// Told each time this process's role changes (a standby took over).
    roles: tokio::sync::watch::Sender<Role>,
}

/// A database, owned by this process or by another one.
#[derive(Clone)]
pub struct Cairn {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Cairn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cairn").field("db", &self.inner.config.db).field("role", &self.role()).finish()
    }
}

fn unix_ms() -> u64 {
    crate::event::unix_ms()
}

fn remote(e: RemoteError) -> Error {
    Error::Remote(e)
}

impl Cairn {
    /// Open the database of `config` as an embedded handle: its owner when no process owns it,
    /// else a client of the owner that asks it to watch `config`'s sources too and stands by to
    /// take over.
    pub async fn open(config: Config) -> Result<Self> {
        Self::open_with(config, OpenOptions::new("embedded")).await
    }

    pub async fn open_with(config: Config, opts: OpenOptions) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let paths = config.paths();
        let deadline = Instant::now() + OWNER_STARTUP;
        let state = loop {
            if let Some(lock) = OwnerLock::try_acquire(&paths)? {
                break State::Owner(become_owner(&config, &paths, &opts.purpose, lock).await?);
            }
            let client = Client::new(&paths.socket(), &opts.purpose);
            match client.greet().await {
                Ok(_) => {
                    if opts.register_sources {
                        for s in &config.sources {
                            let _: () = client
                                .call(Request::AddSource { source: s.clone() })
                                .await
                                .map_err(remote)?;
                        }
                    }
                    break State::Client(client);
                }
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!("the owner does not answer yet ({e}); waiting");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => {
                    let holder = crate::owner::read_info(&paths.lock()).map_or_else(
                        || "another process".to_string(),
                        |o| format!("pid {} (cairn {})", o.pid, o.purpose),
                    );
                    return Err(Error::Remote(RemoteError::new(
                        ErrorCode::Unavailable,
                        format!(
                            "{} is locked by {holder}, which does not answer on {}: {}",
                            config.db,
                            paths.socket().display(),
                            e.message
                        ),
                    )));
                }
            }
        };
        let role = if matches!(state, State::Owner(_)) { Role::Owner } else { Role::Client };
        let (roles, _) = tokio::sync::watch::channel(role);
        let cairn = Cairn {
            inner: Arc::new(Inner {
                config,
                paths,
                opts,
                state: Mutex::new(state),
                closed: Default::default(),
                roles,
            }),
        };
        if role == Role::Client && cairn.inner.opts.standby {
            cairn.stand_by();
        }
        Ok(cairn)
    }

    /// Attach to a database for reading: a client of its owner when one runs (or is starting),
    /// else a reader of its tables in this process (nothing is locked or written; the query
    /// model is loaded only `with_model`).
    pub async fn attach(config: Config, purpose: &str, with_model: bool) -> Result<Self> {
        let paths = config.paths();
        let client = Client::new(&paths.socket(), purpose);
        let state = match client.greet().await {
            Ok(_) => State::Client(client),
            Err(_) if OwnerLock::try_acquire(&paths)?.is_none() => {
                // Locked, not answering yet: an owner is starting.
                let opts = OpenOptions { purpose: purpose.into(), standby: false, register_sources: false };
                return Self::open_with(config, opts).await;
            }
            Err(_) => {
                let db = config.database().await?;
                let embedder: Option<Arc<dyn cairn_index::Embedder>> = if with_model {
                    let dir = config.model.dir.clone();
                    let e = tokio::task::spawn_blocking(move || {
                        let files = cairn_index::provision_with(dir.as_deref())?;
                        let opts = cairn_index::OrtOptions {
                            intra_threads: 1,
                            ..cairn_index::OrtOptions::default()
                        };
                        cairn_index::OrtEmbedder::from_files(&files, opts)
                    })
                    .await
                    .map_err(|e| Error::Pipeline(format!("loading the model: {e}")))??;
                    Some(Arc::new(e))
                } else {
                    None
                };
                let folders = crate::folders::FolderBook::read(&paths.state());
                let host = QueryHost::open_read_only(
                    &db,
                    &folders,
                    embedder,
                    config.event_log_dir(),
                    config.exact_vectors_up_to,
                )
                .await?;
                State::Reader(Arc::new(host.with_parse_options(config.limits.parse_options())))
            }
        };
        let role = match state {
            State::Owner(_) => Role::Owner,
            State::Client(_) => Role::Client,
            State::Reader(_) => Role::Reader,
        };
        let (roles, _) = tokio::sync::watch::channel(role);
        let opts = OpenOptions { purpose: purpose.into(), standby: false, register_sources: false };
        Ok(Cairn {
            inner: Arc::new(Inner {
                config,
                paths,
                opts,
                state: Mutex::new(state),
                closed: Default::default(),
                roles,
            }),
        })
    }

    /// Take over when the owner goes (polling the lock, so a closed handle stops waiting).
    fn stand_by(&self) {
        let me = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(STANDBY_POLL).await;
                if me.inner.closed.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let lock = match OwnerLock::try_acquire(&me.inner.paths) {
                    Ok(Some(l)) => l,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::warn!("standby: cannot look at the lock: {e}");
                        continue;
                    }
                };
                tracing::info!("the owner of {} is gone; taking over", me.inner.config.db);
                match become_owner(&me.inner.config, &me.inner.paths, &me.inner.opts.purpose, lock).await {
                    Ok(owned) => {
                        *me.inner.state.lock().unwrap_or_else(|p| p.into_inner()) = State::Owner(owned);
                        let _ = me.inner.roles.send(Role::Owner);
                    }
                    Err(e) => tracing::error!("taking over {} failed: {e}", me.inner.config.db),
                }
                return;
            }
        });
    }

    fn state(&self) -> State {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What this process is to the database now.
    pub fn role(&self) -> Role {
        match self.state() {
            State::Owner(_) => Role::Owner,
            State::Client(_) => Role::Client,
            State::Reader(_) => Role::Reader,
        }
    }

    /// What a call that needs the owner says when there is none.
    fn needs_owner(&self, what: &str) -> Error {
        Error::Config(format!(
            "no cairn process owns {} now, so nothing can {what}: start `cairn watch` (or `cairn index`) on it",
            self.inner.config.db
        ))
    }

    /// Changes of role (a standby that took over says `Owner`).
    pub fn roles(&self) -> tokio::sync::watch::Receiver<Role> {
        self.inner.roles.subscribe()
    }

    /// The owner's pipeline, when this process is the owner.
    pub fn pipeline(&self) -> Option<Pipeline> {
        match self.state() {
            State::Owner(o) => Some(o.pipeline),
            _ => None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub async fn search(&self, req: SearchRequest) -> Result<SearchResponse> {
        match self.state() {
            State::Owner(o) => o.pipeline.search(req).await,
            State::Client(c) => c.call(Request::Search { request: req }).await.map_err(remote),
            State::Reader(h) => {
                let mut resp = h.search(&req, &h.unavailable_ids()).await?;
                resp.served_by = Some(cairn_query::ServedBy { pid: std::process::id(), role: Role::Reader });
                crate::query::apply_freshness(&mut resp, |id| h.freshness(id));
                resp.notes.push(format!(
                    "no cairn process owns {}: answered read-only by this process (pid {}) from the tables",
                    self.inner.config.db,
                    std::process::id()
                ));
                // Journaled like the owner's answers (`cairn stats` counts it).
                if let Some(dir) = self.inner.config.event_log_dir() {
                    let kind = crate::EventKind::QueryAnswered(Box::new(crate::query::telemetry(&resp)));
                    if let Err(e) = crate::log::append_from_outside(&dir, crate::event::QUERY_STREAM, kind) {
                        tracing::warn!("event log {}: {e}; this answer is not journaled", dir.display());
                    }
                }
                Ok(resp)
            }
        }
    }

    pub async fn get(&self, source: &str, slug: &str) -> Result<Option<PageWithBody>> {
        let mut page = self.get_unmarked(source, slug).await?;
        if let Some(p) = page.as_mut() {
            p.served_by.get_or_insert(self.served_here());
        }
        Ok(page)
    }

    /// Who answers when this process does (the owner, or a reader).
    fn served_here(&self) -> cairn_query::ServedBy {
        cairn_query::ServedBy { pid: std::process::id(), role: self.role() }
    }

    async fn get_unmarked(&self, source: &str, slug: &str) -> Result<Option<PageWithBody>> {
        match self.state() {
            State::Owner(o) => o.pipeline.get(source, slug).await,
            State::Client(c) => {
                c.call(Request::Get { source: source.into(), slug: slug.into() }).await.map_err(remote)
            }
            State::Reader(h) => h.get(source, slug).await.map_err(Error::Pipeline),
        }
    }

    pub async fn diagnose(
        &self,
        request: SearchRequest,
        source: &str,
        slug: &str,
    ) -> Result<cairn_query::Diagnosis> {
        match self.state() {
            State::Owner(o) => o.pipeline.diagnose(request, source, slug).await,
            State::Client(c) => c
                .call(Request::Diagnose { request, source: source.into(), slug: slug.into() })
                .await
                .map_err(remote),
            State::Reader(h) => Ok(h.diagnose(&request, source, slug).await?),
        }
    }

    /// A page's links both ways (`None`: no such page).
    pub async fn links(&self, source: &str, slug: &str) -> Result<Option<cairn_query::links::Links>> {
        match self.state() {
            State::Owner(o) => o.pipeline.links(source, slug).await,
            State::Client(c) => {
                c.call(Request::Links { source: source.into(), slug: slug.into() }).await.map_err(remote)
            }
            State::Reader(h) => h.links(source, slug).map_err(Error::Config),
        }
    }

    /// Groups of pages that look like one subject (shared names, identical content, chunks at
    /// cosine ≥ `threshold`).
    pub async fn duplicates(&self, threshold: f32) -> Result<Vec<cairn_query::duplicates::DuplicateGroup>> {
        match self.state() {
            State::Owner(o) => o.pipeline.duplicates(threshold).await,
            State::Client(c) => c.call(Request::Duplicates { threshold }).await.map_err(remote),
            State::Reader(h) => {
                Ok(tokio::task::spawn_blocking(move || h.duplicates(threshold)).await.unwrap_or_default())
            }
        }
    }

    /// This process's role, the owner, its clients and every source's state.
    pub async fn status(&self) -> Result<Status> {
        let pid = std::process::id();
        let memory = crate::status::Memory::now;
        match self.state() {
            State::Owner(o) => Ok(Status {
                pid,
                role: Role::Owner,
                owner: Some(o.info.clone()),
                memory: memory(),
                clients: o.server.clients(),
                sources: o.pipeline.status(),
            }),
            State::Client(c) => {
                let s: OwnerStatus = c.call(Request::Status).await.map_err(remote)?;
                Ok(Status {
                    pid,
                    role: Role::Client,
                    owner: Some(s.owner),
                    memory: s.memory,
                    clients: s.clients,
                    sources: s.sources,
                })
            }
            State::Reader(h) => Ok(Status {
                pid,
                role: Role::Reader,
                owner: None,
                memory: memory(),
                clients: Vec::new(),
                sources: h.status(),
            }),
        }
    }

    pub async fn stats(&self, days: Option<u32>) -> Result<crate::stats::Stats> {
        match self.state() {
            State::Client(c) => c.call(Request::Stats { days }).await.map_err(remote),
            _ => {
                let c = &self.inner.config;
                crate::stats::collect(c, c.event_log_dir().as_deref(), days).await
            }
        }
    }

    /// Everything on disk now searchable, by meaning too (see [`Pipeline::flush`]).
    pub async fn flush(&self) -> Result<()> {
        self.flush_with(true).await
    }

    /// Everything on disk now searchable by name and keyword.
    pub async fn flush_pages(&self) -> Result<()> {
        self.flush_with(false).await
    }

    async fn flush_with(&self, vectors: bool) -> Result<()> {
        self.flush_marked(vectors, None).await
    }

    /// A flush followed by a `flushed` event carrying `token` (in the event stream).
    pub async fn flush_marked(&self, vectors: bool, token: Option<u64>) -> Result<()> {
        match self.state() {
            State::Owner(o) => o.pipeline.flush_marked(true, vectors, token).await,
            State::Client(c) => c.call(Request::Flush { vectors, token }).await.map_err(remote),
            State::Reader(_) => Err(self.needs_owner("bring it up to date")),
        }
    }

    /// Every event of the owner from now on (for a client, until the owner goes).
    pub async fn subscribe(&self) -> Result<BoxStream<'static, Arc<Event>>> {
        use futures::StreamExt;
        match self.state() {
            State::Owner(o) => Ok(o.pipeline.subscribe()),
            State::Client(c) => Ok(c.subscribe().await.map_err(remote)?.map(Arc::new).boxed()),
            State::Reader(_) => Err(self.needs_owner("emit events")),
        }
    }

    pub async fn add_source(&self, source: SourceConfig) -> Result<()> {
        match self.state() {
            State::Owner(o) => o.pipeline.add_source(source).await,
            State::Client(c) => c.call(Request::AddSource { source }).await.map_err(remote),
            State::Reader(_) => Err(self.needs_owner("watch a source")),
        }
    }

    pub async fn remove_source(&self, id: &str, forget: bool) -> Result<()> {
        match self.state() {
            State::Owner(o) => o.pipeline.remove_source(id, forget).await,
            State::Client(c) => c.call(Request::RemoveSource { id: id.into(), forget }).await.map_err(remote),
            State::Reader(_) => Err(self.needs_owner("remove a source")),
        }
    }

    /// Compare a source's folder with its index now; with `allow_removals`, apply the removals
    /// the guard holds (and those of an empty or other folder).
    pub async fn reconcile(&self, id: &str, allow_removals: bool) -> Result<crate::ReconcileReport> {
        match self.state() {
            State::Owner(o) => o.pipeline.reconcile(id, allow_removals).await,
            State::Client(c) => {
                c.call(Request::Reconcile { id: id.into(), allow_removals }).await.map_err(remote)
            }
            State::Reader(_) => Err(self.needs_owner("reconcile a source")),
        }
    }

    pub async fn reindex(&self, id: &str) -> Result<()> {
        match self.state() {
            State::Owner(o) => o.pipeline.reindex(id).await,
            State::Client(c) => c.call(Request::Reindex { id: id.into() }).await.map_err(remote),
            State::Reader(_) => Err(self.needs_owner("reindex a source")),
        }
    }

    /// As the owner: stop serving, drain the pipeline, release the database. As a client: stop
    /// standing by.
    pub async fn shutdown(&self) -> Result<()> {
        self.inner.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        if let State::Owner(o) = self.state() {
            o.server.stop();
            // Releases the lock once drained.
            o.pipeline.shutdown().await?;
        }
        Ok(())
    }
}

/// This process takes the database: says so in the lock file, binds the socket (clients queue
/// on it while the model loads), starts the pipeline and serves.
async fn become_owner(config: &Config, paths: &DbPaths, purpose: &str, mut lock: OwnerLock) -> Result<Owned> {
    let socket = paths.socket();
    let info = OwnerInfo {
        pid: std::process::id(),
        purpose: purpose.into(),
        started_unix_ms: unix_ms(),
        socket: socket.display().to_string(),
        version: env!("CARGO_PKG_VERSION").into(),
    };
    lock.publish(&info)?;
    let listener = crate::server::bind(&socket)?;
    let pipeline = Pipeline::open(config.clone()).await?;
    pipeline.keep_until_stopped(Box::new(lock));
    let server = Server::start(listener, socket, pipeline.clone(), config.clone(), info.clone());
    Ok(Owned { pipeline, server: Arc::new(server), info })
}
