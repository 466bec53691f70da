//! The process that holds a database's lock on this machine, and serves the machine's other
//! cairn processes on its socket, as one of two roles:
//!
//! - the **writer**: it runs the pipeline (watchers, writers, the model, the resident indexes).
//!   On a local folder the lock is all it takes. On an object store it also holds the writer
//!   lease ([`crate::replication::lease`]): every commit is made under it and told to the journal
//!   ([`crate::replication::journal`]) that readers on other machines follow;
//! - a **reader** (an object store whose lease another process holds, or a process with no
//!   folder to write): it follows the writer's commits ([`crate::engine::follow`]) and answers from them.
//!   One that was given folders on this machine stands by: when the lease is given back, or its
//!   holder stops renewing it, it takes it and becomes the writer. A writer that loses its lease
//!   (taken over after it could not renew) stops committing at once and becomes a reader.

use crate::api::ipc::OwnerInfo;
use crate::api::owner::Clients;
use crate::api::{Answerer, OwnerApi, ReaderApi};
use crate::core::config::{Config, SourceConfig};
use crate::core::paths::DbPaths;
use crate::engine::follow::Follower;
use crate::engine::system::Pipeline;
use crate::replication::journal::{Journal, Publishing};
use crate::replication::lease::{Holder, Lease, LeaseStore, Taken, Watching};
use crate::replication::remote::Remote;
use crate::roles::lock::OwnerLock;
use crate::roles::server::{Served, Server};
use crate::{Error, Result};
use cairn_query::Role;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// What a one-shot writer's wait for the writer lease came to ([`Local::wait_for_lease`]).
#[derive(Debug)]
pub enum LeaseWait {
    /// It was free, or its holder stopped renewing: this process writes now.
    Writing,
    /// Its holder renews it: a live writer.
    Renewed(Holder),
    /// Still held when the wait ended (its holder, when the lease could be read).
    NotFree(Option<Holder>),
}

/// The lease and journal of a writer on an object store, with the task that renews the lease.
/// Renewing starts the moment the lease is taken, not once the pipeline is open: opening a large
/// source on S3 takes longer than the lease lives (~65 s at a million chunks), and a standby
/// would take an unrenewed lease meanwhile.
struct Writing {
    publishing: Publishing,
    renew: tokio::task::JoinHandle<()>,
    /// Told when the lease is lost.
    lost: tokio::sync::watch::Receiver<bool>,
}

impl Writing {
    /// Renew `publishing`'s lease from now on.
    fn renewing(publishing: Publishing) -> Self {
        let (lost_tx, lost) = tokio::sync::watch::channel(false);
        let renew = publishing.lease.keep(lost_tx);
        Self { publishing, renew, lost }
    }

    /// Stop renewing, close the journal and give the lease back (a pipeline that did not open).
    async fn give_back(self) {
        self.renew.abort();
        self.publishing.journal.close().await;
        self.publishing.lease.release().await;
    }
}

/// This machine's process for a database.
pub(crate) struct Local {
    config: Config,
    info: OwnerInfo,
    clients: Clients,
    served: Served,
    server: Server,
    /// Shared with the pipeline while it writes (it lets go once drained); this process's own
    /// hold goes at shutdown, so the lock is released once both have.
    lock: Mutex<Option<Arc<OwnerLock>>>,
    remote: Option<Remote>,
    /// Stand by for the writer lease (this process was given folders here, and may take over).
    standby: AtomicBool,
    standing_by: AtomicBool,
    /// Where folders given to it while it reads go (a `watch` of this machine asking it to write
    /// them): recorded as given here, and this process stands by to write them.
    told: Told,
    state_dir: std::path::PathBuf,
    lock_path: std::path::PathBuf,
    writing: Mutex<Option<Writing>>,
    roles: tokio::sync::watch::Sender<Role>,
    /// Set once shutdown began: a standby waiting for its next look wakes to it.
    closed: tokio::sync::watch::Sender<bool>,
    /// The standby's task, which shutdown waits for: a lease it took as the process stopped is
    /// given back, not left to its TTL.
    standby_task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Local").field("db", &self.config.db).field("pid", &self.info.pid).finish()
    }
}

/// Where a reader says which folders it was given (see [`Local::take_given`]).
type Told = tokio::sync::mpsc::UnboundedSender<SourceConfig>;

/// Whether this process has folders to write on this machine: given now, or before (the folder
/// book).
fn writes_here(config: &Config, paths: &DbPaths) -> bool {
    !config.sources.is_empty() || !crate::core::folders::FolderBook::read(&paths.state()).is_empty()
}

/// The writer lease, asked for when the database is on an object store and this process has
/// folders to write: `Ok` when this process holds it now, `Err` with who does; `None` when
/// there is no lease to ask for.
async fn ask_lease(
    config: &Config,
    paths: &DbPaths,
    purpose: &str,
    remote: Option<&Remote>,
) -> Result<Option<std::result::Result<Lease, Holder>>> {
    let Some(r) = remote.filter(|_| writes_here(config, paths)) else { return Ok(None) };
    let me = crate::replication::lease::me(purpose, &paths.lock());
    match LeaseStore::of(r)
        .try_take(&me, &mut Watching::default())
        .await
        .map_err(|e| Error::Pipeline(e.to_string()))?
    {
        Taken::Mine(lease) => Ok(Some(Ok(lease))),
        Taken::Theirs(holder) => Ok(Some(Err(holder))),
    }
}

/// What answers for this process in its first role: a reader, or the owner's pipeline (opened
/// publishing to the journal when it holds the lease), with what it publishes through.
async fn first_answerer(
    config: &Config,
    info: &OwnerInfo,
    clients: &Clients,
    first: Role,
    remote: Option<&Remote>,
    lease: Option<std::result::Result<Lease, Holder>>,
    told: &Told,
) -> Result<(Answerer, Option<Writing>)> {
    if first != Role::Owner {
        let r = reader(config, Some(info.clone()), true, remote.is_some().then(|| told.clone())).await?;
        return Ok((Answerer::Reader(r), None));
    }
    let writing = match (remote, lease) {
        (Some(r), Some(Ok(lease))) => {
            let journal = Journal::start(r.clone(), lease.clone()).await;
            Some(Writing::renewing(Publishing { lease, journal }))
        }
        _ => None,
    };
    let publishing = writing.as_ref().map(|w| w.publishing.clone());
    let pipeline = match Pipeline::open_publishing(config.clone(), publishing).await {
        Ok(p) => p,
        Err(e) => {
            // Given back at once: a standby need not wait out the TTL.
            if let Some(w) = writing {
                w.give_back().await;
            }
            return Err(e);
        }
    };
    let api = OwnerApi::new(pipeline, config.clone(), info.clone(), clients.clone());
    Ok((Answerer::Owner(Arc::new(api)), writing))
}

impl Local {
    /// This process takes the database on this machine (`lock` is its lock): says so in the lock
    /// file, binds the socket (clients queue on it while the model loads), and becomes the writer
    /// or a reader.
    pub async fn take(
        config: &Config,
        paths: &DbPaths,
        purpose: &str,
        standby: bool,
        mut lock: OwnerLock,
        roles: tokio::sync::watch::Sender<Role>,
    ) -> Result<Arc<Self>> {
        let socket = paths.socket();
        let info = OwnerInfo {
            pid: std::process::id(),
            purpose: purpose.into(),
            started_unix_ms: crate::core::event::unix_ms(),
            socket: socket.display().to_string(),
            version: env!("CARGO_PKG_VERSION").into(),
        };
        lock.publish(&info)?;
        cairn_index::fault::point("take.published");
        let remote = Remote::of(&config.db, &config.storage).map_err(Error::Config)?;
        if remote.is_some() {
            // A bucket that is missing, unreachable or refuses the credentials is said here, in
            // the words of the database's own check, before the lease is asked for.
            config.database().await?;
        }
        let listener = crate::roles::server::bind(&socket)?;
        cairn_index::fault::point("take.bound");
        let clients = Clients::default();
        let (told, given) = tokio::sync::mpsc::unbounded_channel();
        // The role is taken before serving (clients queue on the bound socket meanwhile).
        let lease = ask_lease(config, paths, purpose, remote.as_ref()).await?;
        let first = match &lease {
            None if remote.is_some() => Role::Reader,
            Some(Err(_)) => Role::Reader,
            _ => Role::Owner,
        };
        let (answerer, writing) =
            first_answerer(config, &info, &clients, first, remote.as_ref(), lease, &told).await?;
        let served: Served = Arc::new(std::sync::RwLock::new(answerer.clone()));
        let server = Server::start(listener, socket, served.clone(), info.clone(), clients.clone());
        cairn_index::fault::point("take.serving");
        let local = Arc::new(Self {
            config: config.clone(),
            info,
            clients,
            served,
            server,
            lock: Mutex::new(Some(Arc::new(lock))),
            standby: AtomicBool::new(remote.is_some() && standby && writes_here(config, paths)),
            standing_by: AtomicBool::new(false),
            told,
            state_dir: paths.state(),
            lock_path: paths.lock(),
            remote,
            writing: Mutex::new(None),
            roles,
            closed: tokio::sync::watch::Sender::new(false),
            standby_task: Mutex::new(None),
        });
        if let Answerer::Owner(o) = &answerer {
            o.pipeline().keep_until_stopped(Box::new(local.lock_held()));
        }
        match writing {
            Some(p) => local.keep_writing(p),
            None if first == Role::Reader => local.stand_by(),
            None => {}
        }
        local.take_given(given);
        let _ = local.roles.send(first);
        Ok(local)
    }

    /// Folders given to this process while it is not the writer (a reader's `add source`): kept
    /// in the folder book, and this process stands by for the lease to write them.
    fn take_given(self: &Arc<Self>, mut given: tokio::sync::mpsc::UnboundedReceiver<SourceConfig>) {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(source) = given.recv().await {
                let Some(local) = me.upgrade() else { return };
                match crate::core::folders::FolderBook::open(&local.state_dir) {
                    Ok(book) => book.told(&source.id, &source.root),
                    Err(e) => tracing::warn!("{}: {e}", local.state_dir.display()),
                }
                tracing::info!(
                    "{}: given `{}` ({}); this process writes it once it holds the writer lease",
                    local.config.db,
                    source.id,
                    source.root.display()
                );
                local.standby.store(true, Ordering::SeqCst);
                local.stand_by();
            }
        });
    }

    /// Another hold on the lock (for a pipeline: released once it has drained).
    fn lock_held(&self) -> Option<Arc<OwnerLock>> {
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What answers now.
    pub fn answerer(&self) -> Answerer {
        self.served.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Writer (`Owner`) or reader.
    pub fn role(&self) -> Role {
        match self.answerer() {
            Answerer::Owner(_) => Role::Owner,
            Answerer::Reader(_) => Role::Reader,
        }
    }

    fn swap(&self, answerer: Answerer) {
        let role = match &answerer {
            Answerer::Owner(_) => Role::Owner,
            Answerer::Reader(_) => Role::Reader,
        };
        *self.served.write().unwrap_or_else(|p| p.into_inner()) = answerer;
        let _ = self.roles.send(role);
    }

    /// Whether shutdown has begun.
    fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Renew the lease while writing; when it is lost, stop committing and read again.
    fn keep_writing(self: &Arc<Self>, writing: Writing) {
        let mut lost = writing.lost.clone();
        *self.writing.lock().unwrap_or_else(|p| p.into_inner()) = Some(writing);
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            if lost.wait_for(|l| *l).await.is_err() {
                return;
            }
            let Some(me) = me.upgrade() else { return };
            if me.is_closed() {
                return;
            }
            tracing::error!(
                "{}: this process lost the writer lease; it stops writing and reads",
                me.config.db
            );
            if let Answerer::Owner(o) = me.answerer() {
                // Its commits are refused from now on (the lease is not valid); what is pending is
                // the next writer's catch-up.
                let _ = o.pipeline().shutdown().await;
            }
            me.writing.lock().unwrap_or_else(|p| p.into_inner()).take();
            // A lease lost to a store that does not answer: the reader opens once it does (and
            // then stands by to write again), however long that takes.
            let mut failures = 0;
            loop {
                match reader(&me.config, Some(me.info.clone()), true, Some(me.told.clone())).await {
                    Ok(r) => {
                        me.swap(Answerer::Reader(r));
                        me.stand_by();
                        return;
                    }
                    Err(e) => {
                        failures += 1;
                        let wait = crate::core::retry::after(failures);
                        tracing::error!(
                            "{}: cannot read it after losing the lease: {e}; trying again in {} ms",
                            me.config.db,
                            wait.as_millis()
                        );
                        tokio::time::sleep(wait).await;
                        if me.is_closed() {
                            return;
                        }
                    }
                }
            }
        });
    }

    /// A reader given folders here: take the lease when it is free, and write.
    fn stand_by(self: &Arc<Self>) {
        let Some(remote) = self.remote.clone() else { return };
        if !self.standby.load(Ordering::SeqCst) || self.standing_by.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = Arc::downgrade(self);
        let purpose = self.info.purpose.clone();
        let lock = self.lock_path.clone();
        let mut closing = self.closed.subscribe();
        let task = tokio::spawn(async move {
            let store = LeaseStore::of(&remote);
            let mut watching = Watching::default();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(watching.next_look()) => {}
                    _ = closing.wait_for(|c| *c) => return,
                }
                let Some(local) = me.upgrade() else { return };
                if local.is_closed() {
                    return;
                }
                let holder = crate::replication::lease::me(&purpose, &lock);
                // A stop does not wait on a store that hangs (a look gives up only after the
                // request timeout, 30 s). A take abandoned mid-PUT may leave the lease held: it
                // was never renewed, so the next writer waits out its TTL, as after a kill.
                let took = tokio::select! {
                    took = store.try_take(&holder, &mut watching) => took,
                    _ = closing.wait_for(|c| *c) => return,
                };
                let lease = match took {
                    Ok(Taken::Mine(lease)) => lease,
                    Ok(Taken::Theirs(_)) => continue,
                    Err(e) => {
                        tracing::warn!("standby: {e}");
                        continue;
                    }
                };
                cairn_index::fault::point_async("standby.taken").await;
                if local.is_closed() {
                    // Taken as this process stops (its shutdown waits for this task): given back
                    // at once, so the next writer need not wait out the TTL.
                    lease.release().await;
                    return;
                }
                if local.take_over(&remote, lease).await {
                    return;
                }
            }
        });
        // A standby before this one has ended: it took over (and the lease was lost since).
        *self.standby_task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// For a one-shot writer (`cairn index`) that found the writer lease held: look at it as a
    /// standby does, for at most the TTL and two looks. A holder that stopped renewing (a crash,
    /// a kill) is waited out and this process writes; one seen renewing is named at once.
    pub async fn wait_for_lease(self: &Arc<Self>) -> LeaseWait {
        use crate::replication::lease::{LOOK_EVERY, TTL};
        let Some(remote) = self.remote.clone() else { return LeaseWait::NotFree(None) };
        let store = LeaseStore::of(&remote);
        let mut watching = Watching::default();
        let mut first: Option<String> = None;
        let mut last = None;
        let deadline = std::time::Instant::now() + TTL + 2 * LOOK_EVERY;
        loop {
            let holder = crate::replication::lease::me(&self.info.purpose, &self.lock_path);
            match store.try_take(&holder, &mut watching).await {
                Ok(Taken::Mine(lease)) => {
                    return match self.take_over(&remote, lease).await {
                        true => LeaseWait::Writing,
                        false => LeaseWait::NotFree(last),
                    };
                }
                Ok(Taken::Theirs(h)) => {
                    let etag = watching.etag().map(str::to_string);
                    if first.is_some() && first != etag {
                        return LeaseWait::Renewed(h);
                    }
                    first = first.or(etag);
                    last = Some(h);
                }
                Err(e) => tracing::warn!("waiting for the writer lease: {e}"),
            }
            if std::time::Instant::now() >= deadline {
                return LeaseWait::NotFree(last);
            }
            tokio::time::sleep(watching.next_look()).await;
        }
    }

    /// Open the pipeline under `lease`, just taken by the standby, and answer as the writer:
    /// false when it did not open (the lease is given back, and the standby looks again).
    async fn take_over(self: &Arc<Self>, remote: &Remote, lease: Lease) -> bool {
        tracing::info!("{}: the writer lease is free; this process takes it", self.config.db);
        let began = std::time::Instant::now();
        let journal = Journal::start(remote.clone(), lease.clone()).await;
        let writing = Writing::renewing(Publishing { lease, journal });
        match Pipeline::open_publishing(self.config.clone(), Some(writing.publishing.clone())).await {
            Ok(pipeline) => {
                pipeline.keep_until_stopped(Box::new(self.lock_held()));
                let api =
                    OwnerApi::new(pipeline, self.config.clone(), self.info.clone(), self.clients.clone());
                self.keep_writing(writing);
                let was = self.answerer();
                self.swap(Answerer::Owner(Arc::new(api)));
                if let Answerer::Reader(r) = was {
                    r.leave().await;
                }
                tracing::info!(
                    "{}: this process writes now (its pipeline opened in {} ms)",
                    self.config.db,
                    began.elapsed().as_millis()
                );
                self.standing_by.store(false, Ordering::SeqCst);
                true
            }
            Err(e) => {
                tracing::error!("{}: taking over as the writer failed: {e}", self.config.db);
                writing.give_back().await;
                false
            }
        }
    }

    /// Stop serving; as the writer, drain the pipeline (committing what is pending), then give
    /// the lease back and say so in the journal's head. The lock goes once drained.
    pub async fn shutdown(&self) -> Result<()> {
        self.closed.send_replace(true);
        self.server.stop();
        cairn_index::fault::point("shutdown.server_stopped");
        // A standby in the midst of taking the lease finishes first: what it took is then either
        // given back by it or this process's to drain and give back below.
        let standby = self.standby_task.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(task) = standby {
            let _ = task.await;
        }
        match self.answerer() {
            Answerer::Owner(o) => o.pipeline().shutdown().await?,
            Answerer::Reader(r) => r.leave().await,
        }
        let writing = self.writing.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(w) = writing {
            w.give_back().await;
        }
        self.lock.lock().unwrap_or_else(|p| p.into_inner()).take();
        cairn_index::fault::point("shutdown.released");
        Ok(())
    }
}

/// A reader of `config`'s database: every source in memory, following its writer where there is
/// one to follow; `local` when it serves the machine; the query model `with_model` (else only
/// `fast` searches are answered); folders given to it go to `told`.
pub(crate) async fn reader(
    config: &Config,
    local: Option<OwnerInfo>,
    with_model: bool,
    told: Option<Told>,
) -> Result<Arc<ReaderApi>> {
    // A reader whose model cannot load still answers by name and keyword, and each answer says
    // `embed_unavailable`; only the writer needs the model to do its work.
    let embedder = if with_model {
        query_model(config)
            .await
            .map_err(|e| {
                tracing::warn!("the query model cannot load ({e}); answering without the vector arm")
            })
            .ok()
    } else {
        None
    };
    let follower = Arc::new(Follower::open(config, embedder).await?);
    if follower.follows() {
        // Kept by its own task until this reader is dropped.
        follower.follow();
    }
    let api = ReaderApi::new(follower, config.clone(), local);
    Ok(Arc::new(match told {
        Some(told) => api.taking_folders(told),
        None => api,
    }))
}

/// The query model alone (one ONNX Runtime thread): what a reader needs to answer by meaning.
pub(crate) async fn query_model(config: &Config) -> Result<Arc<dyn cairn_index::Embedder>> {
    let model = config.model.clone();
    let e = tokio::task::spawn_blocking(move || {
        let files = cairn_index::provision_with(model.dir.as_deref())?;
        cairn_index::OrtEmbedder::from_files(&files, model.ort_options(1))
    })
    .await
    .map_err(|e| Error::Pipeline(format!("loading the model: {e}")))??;
    Ok(Arc::new(e))
}
