//! [`Cairn`]: the handle to a database, whichever process owns it.
//!
//! One process per machine holds a database's lock ([`crate::roles::lock`]) and serves the machine's
//! others on its socket ([`crate::roles::server`]): as the database's writer (the pipeline: watchers,
//! parser, model, writers, resident indexes), or, on an object store whose writer lease another
//! process holds, as a reader following that writer's commits ([`crate::roles::local`]). Every other
//! process that opens the database is a client of it ([`crate::roles::client`]): same calls, no model,
//! no index of its own. A client opened with `standby` takes the lock when that process exits
//! or is killed and serves from then on; calls in flight at that moment fail with a retryable
//! error.

use crate::api::ipc::{ErrorCode, RemoteError, Status};
use crate::api::{self, Answerer, ReaderApi, Verb};
use crate::core::config::{Config, SourceConfig};
use crate::core::event::Event;
use crate::core::paths::DbPaths;
use crate::engine::host::PageWithBody;
use crate::engine::system::Pipeline;
use crate::roles::client::Client;
use crate::roles::local::{LeaseWait, Local};
use crate::roles::lock::OwnerLock;
use crate::{Error, Result};
use cairn_query::{Role, SearchRequest, SearchResponse};
use futures::stream::BoxStream;
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

/// The role this process has now; a standby's takeover swaps `Client` for `Local`.
#[derive(Clone)]
enum State {
    /// This process holds the database's lock on this machine and serves it: as its writer, or
    /// as a reader of a writer elsewhere.
    Local(Arc<Local>),
    Client(Client),
    /// No process owns the database here: this one reads its tables, read-only.
    Reader(Arc<ReaderApi>),
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

fn remote(e: RemoteError) -> Error {
    Error::Remote(e)
}

/// The database is locked by a process that does not answer on its socket.
fn not_answering(config: &Config, paths: &DbPaths, e: RemoteError) -> Error {
    let holder = crate::roles::lock::read_info(&paths.lock())
        .map_or_else(|| "another process".to_string(), |o| format!("pid {} (cairn {})", o.pid, o.purpose));
    Error::Remote(RemoteError::new(
        ErrorCode::Unavailable,
        format!(
            "{} is locked by {holder}, which does not answer on {}: {}",
            config.db,
            crate::roles::lock::socket_to_reach(paths).display(),
            e.message
        ),
    ))
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
        let (roles, _) = tokio::sync::watch::channel(Role::Client);
        let state = loop {
            if let Some(lock) = OwnerLock::try_acquire(&paths)? {
                break State::Local(
                    Local::take(&config, &paths, &opts.purpose, opts.standby, lock, roles.clone()).await?,
                );
            }
            let client = Client::new(&crate::roles::lock::socket_to_reach(&paths), &opts.purpose);
            match client.greet().await {
                Ok(_) => {
                    if opts.register_sources {
                        for s in &config.sources {
                            client.ask(api::AddSource { source: s.clone() }).await.map_err(remote)?;
                        }
                    }
                    break State::Client(client);
                }
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!("the owner does not answer yet ({e}); waiting");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(not_answering(&config, &paths, e)),
            }
        };
        let role = role_of(&state);
        roles.send_replace(role);
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
        let deadline = Instant::now() + OWNER_STARTUP;
        let state = loop {
            // Looked up each time: an owner starting now publishes its socket in the lock.
            let client = Client::new(&crate::roles::lock::socket_to_reach(&paths), purpose);
            match client.greet().await {
                Ok(_) => break State::Client(client),
                // Nobody holds the lock: read the tables here, holding nothing (a reader never
                // becomes the owner, so it never leaves without draining one).
                Err(_) if OwnerLock::try_acquire(&paths)?.is_some() => {
                    break State::Reader(crate::roles::local::reader(&config, None, with_model, None).await?);
                }
                // Locked, not answering: an owner starting (its socket is bound soon) or
                // draining (it lets go of the lock soon).
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!("the owner does not answer ({e}); waiting");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(not_answering(&config, &paths, e)),
            }
        };
        let (roles, _) = tokio::sync::watch::channel(role_of(&state));
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
                cairn_index::fault::point("take.locked");
                let i = &me.inner;
                match Local::take(&i.config, &i.paths, &i.opts.purpose, i.opts.standby, lock, i.roles.clone())
                    .await
                {
                    Ok(local) => {
                        *me.inner.state.lock().unwrap_or_else(|p| p.into_inner()) = State::Local(local);
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

    /// What this process is to the database now: its writer (`Owner`), a client of the process
    /// that serves this machine, or a reader.
    pub fn role(&self) -> Role {
        role_of(&self.state())
    }

    /// Changes of role (a standby that took over says `Owner`).
    pub fn roles(&self) -> tokio::sync::watch::Receiver<Role> {
        self.inner.roles.subscribe()
    }

    /// The owner's pipeline, when this process is the owner.
    pub fn pipeline(&self) -> Option<Pipeline> {
        match self.state() {
            State::Local(l) => match l.answerer() {
                Answerer::Owner(o) => Some(o.pipeline().clone()),
                Answerer::Reader(_) => None,
            },
            _ => None,
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Any verb of [`crate::api`], answered by whichever role this process has now: the owner's
    /// pipeline, the owner over its socket, or (no owner) this process's read of the tables.
    pub async fn ask<V: Verb>(&self, verb: V) -> Result<V::Reply> {
        match self.state() {
            State::Local(l) => l.answerer().ask(verb).await,
            State::Client(c) => c.ask(verb).await.map_err(remote),
            State::Reader(r) => verb.by_reader(&r).await,
        }
    }

    /// As a reader of a database on an object store whose writer lease another process holds:
    /// wait for the lease as a standby would, bounded (see [`Local::wait_for_lease`]).
    pub async fn wait_for_lease(&self) -> LeaseWait {
        match self.state() {
            State::Local(l) if l.role() == Role::Reader => l.wait_for_lease().await,
            State::Local(_) => LeaseWait::Writing,
            _ => LeaseWait::NotFree(None),
        }
    }

    /// Any verb as it comes over the wire ([`api::Request`]), answered as JSON by whichever role
    /// this process has now (what [`Cairn::ask`] is for a verb known when compiling).
    pub async fn ask_json(&self, request: api::Request) -> Result<serde_json::Value> {
        match self.state() {
            State::Local(l) => api::dispatch(&l.answerer(), request).await,
            State::Client(c) => c.call(request).await.map_err(remote),
            State::Reader(r) => api::dispatch(&Answerer::Reader(r), request).await,
        }
    }

    /// Answer a query. Rules turned off (`request.ablation`, an evaluation's) hold only where this
    /// process reads the index: they are not sent to an owner (the wire carries none).
    pub async fn search(&self, request: SearchRequest) -> Result<SearchResponse> {
        if !request.ablation.is_none() && matches!(self.state(), State::Client(_)) {
            return Err(Error::Config(format!(
                "{} is served by another process (`cairn watch`?), which runs every rule: turning one off \
                 (`cairn eval --ablate`, `--pooled-baseline`) needs the index read here; stop that process, \
                 or measure a copy (`--vault`)",
                self.inner.config.db
            )));
        }
        self.ask(api::Search { request }).await
    }

    /// A draft note against the index before it is written: whether a page on its subject
    /// exists, probably exists, or is related (see [`cairn_query::check`]). Reads only.
    pub async fn check(&self, draft: &cairn_query::check::Draft) -> Result<cairn_query::check::CheckReport> {
        // Each search owns a handle (a clone is an `Arc`): a future borrowing `self` across the
        // stream of searches is not `Send` for every lifetime, which a tool server requires.
        let search = |request| {
            let me = self.clone();
            async move { me.search(request).await }
        };
        cairn_query::check::check(draft, search).await
    }

    /// One page with its body; `None` when the source has no such slug.
    pub async fn get(&self, source: &str, slug: &str) -> Result<Option<PageWithBody>> {
        self.ask(api::Get { source: source.into(), slug: slug.into() }).await
    }

    pub async fn diagnose(
        &self,
        request: SearchRequest,
        source: &str,
        slug: &str,
    ) -> Result<cairn_query::Diagnosis> {
        self.ask(api::Diagnose { request, source: source.into(), slug: slug.into() }).await
    }

    /// A page's links both ways (`None`: no such page).
    pub async fn links(&self, source: &str, slug: &str) -> Result<Option<cairn_query::links::Links>> {
        self.ask(api::Links { source: source.into(), slug: slug.into() }).await
    }

    /// Groups of pages that look like one subject (shared names, identical content, chunks at
    /// cosine ≥ `threshold`).
    pub async fn duplicates(&self, threshold: f32) -> Result<Vec<cairn_query::duplicates::DuplicateGroup>> {
        self.ask(api::Duplicates { threshold }).await
    }

    /// This process's role, the owner, its clients and every source's state.
    pub async fn status(&self) -> Result<Status> {
        let status = self.ask(api::Status {}).await?;
        // As this process sees it (an owner's answer says `owner` about itself).
        Ok(Status { pid: std::process::id(), role: self.role(), ..status })
    }

    pub async fn stats(&self, days: Option<u32>) -> Result<crate::ops::stats::Stats> {
        self.ask(api::Stats { days }).await
    }

    /// Everything on disk now searchable, by meaning too (see [`Pipeline::flush`]).
    pub async fn flush(&self) -> Result<()> {
        self.flush_marked(true, None).await
    }

    /// Everything on disk now searchable by name and keyword.
    pub async fn flush_pages(&self) -> Result<()> {
        self.flush_marked(false, None).await
    }

    /// A flush followed by a `flushed` event carrying `token` (in the event stream).
    pub async fn flush_marked(&self, vectors: bool, token: Option<u64>) -> Result<()> {
        self.ask(api::Flush { vectors, token }).await
    }

    /// Every event of the owner from now on (for a client, until the owner goes).
    pub async fn subscribe(&self) -> Result<BoxStream<'static, Arc<Event>>> {
        use futures::StreamExt;
        match self.state() {
            State::Local(l) => match l.answerer() {
                Answerer::Owner(o) => Ok(o.pipeline().subscribe()),
                Answerer::Reader(r) => Err(r.needs_owner("subscribe")),
            },
            State::Client(c) => Ok(c.subscribe().await.map_err(remote)?.map(Arc::new).boxed()),
            State::Reader(r) => Err(r.needs_owner("subscribe")),
        }
    }

    pub async fn add_source(&self, source: SourceConfig) -> Result<()> {
        self.ask(api::AddSource { source }).await
    }

    pub async fn remove_source(&self, id: &str, forget: bool) -> Result<()> {
        self.ask(api::RemoveSource { id: id.into(), forget }).await
    }

    /// Compare a source's folder with its index now; with `allow_removals`, apply the removals
    /// the guard holds (and those of an empty or other folder).
    pub async fn reconcile(&self, id: &str, allow_removals: bool) -> Result<crate::ReconcileReport> {
        self.ask(api::Reconcile { id: id.into(), allow_removals }).await
    }

    pub async fn reindex(&self, id: &str) -> Result<()> {
        self.ask(api::Reindex { id: id.into() }).await
    }

    /// As the owner: stop serving, drain the pipeline, release the database. As a client: stop
    /// standing by.
    pub async fn shutdown(&self) -> Result<()> {
        self.inner.closed.store(true, std::sync::atomic::Ordering::SeqCst);
        if let State::Local(l) = self.state() {
            // Releases the lock (and the lease) once drained.
            l.shutdown().await?;
        }
        Ok(())
    }
}

fn role_of(state: &State) -> Role {
    match state {
        State::Local(l) => l.role(),
        State::Client(_) => Role::Client,
        State::Reader(_) => Role::Reader,
    }
}
