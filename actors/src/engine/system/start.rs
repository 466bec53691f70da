//! The pipeline's start-up: the event log (and, on an object store, the events shipped to it),
//! the folder and poison books, the parsing pool, the embedding scheduler and the query actor,
//! then one writer and watcher per source given here, and the other stored sources served as
//! stored.

use super::{Embedders, Error, Inner, Pipeline, Result, Running, SUBSCRIBER_BUFFER, Shared};
use crate::core::config::{Config, SourceConfig};
use crate::core::event::{Event, EventKind, SYSTEM_STREAM};
use crate::core::folders::FolderBook;
use crate::core::log::{Emitter, EventLog};
use crate::core::poison::PoisonBook;
use crate::core::status::StatusBoard;
use crate::engine::embedding::EmbedScheduler;
use crate::engine::host::HostCell;
use crate::engine::query::{QueryActor, Serve};
use crate::engine::watcher::{Watcher, WatcherOptions};
use crate::engine::workers::Parser;
use crate::engine::writer::{Ready, SourceWriter, WriterOptions, WriterParts};
use crate::replication::journal::Publishing;
use crate::replication::shipping::Outbox;
use actix::prelude::*;
use cairn_index::{Database, Manifest, OrtOptions, SourceInfo, fault};
use cairn_ingest::ScanOptions;
use futures::StreamExt;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;

/// How many sources a pipeline opens at once.
const OPEN_AT_ONCE: usize = 4;

/// The event log's writer, and on an object store the outbox its events are shipped through.
struct Log {
    emit: Emitter,
    events: broadcast::Sender<Arc<Event>>,
    first: broadcast::Receiver<Arc<Event>>,
    outbox: Option<Outbox>,
}

impl Pipeline {
    /// Start the actors in the current actix system (the caller runs it). The sources are the
    /// configuration's, plus every source the database already holds (watched when its recorded
    /// folder is here, else served as stored).
    pub async fn start(config: Config, embedders: Embedders) -> Result<Self> {
        Self::start_publishing(config, embedders, None).await
    }

    pub(super) async fn start_publishing(
        config: Config,
        embedders: Embedders,
        publishing: Option<Publishing>,
    ) -> Result<Self> {
        config.validate().map_err(Error::Config)?;
        let status = StatusBoard::default();
        let log = open_log(&config, &status)?;
        let shipping = log.outbox.as_ref().map(Outbox::keep_shipping);
        let emit = log.emit.clone();
        let unix_ms = crate::core::event::unix_ms();
        // Under a lease, the writer's reads are pinned to its own commits, so another writer's
        // fence refuses them (`SourceStore::fence`).
        let db = match &publishing {
            Some(_) => cairn_index::Database::open_pinned(&config.db, &config.storage).await?,
            None => config.database().await?,
        };
        let stored = db.sources().await?;
        fault::point("pipeline.tables");
        let folders = Arc::new(FolderBook::open(&config.paths().state()).unwrap_or_else(|e| {
            let state = config.paths().state();
            tracing::warn!(
                "{}: {e}; the folders given here are remembered until restart only",
                state.display()
            );
            FolderBook::in_memory()
        }));
        let sources = watched_here(&config, &stored, &folders);
        let ids: Vec<String> = sources.iter().map(|s| s.id.clone()).collect();
        emit.emit(SYSTEM_STREAM, vec![EventKind::SystemStarted { unix_ms, sources: ids }]).await;
        let book = poison_book(&config, &status, log.outbox.as_ref()).await;
        let sharing = log.outbox.as_ref().map(|o| o.keep_sharing(&book));
        let opts = config.limits.parse_options();
        // Inference takes the cores (one model thread × all its ort threads); parsing is light next to it.
        let parser = {
            let book = book.clone();
            SyncArbiter::start(1, move || Parser::new(opts.clone(), book.clone()))
        };
        let scheduler = EmbedScheduler::start(embedders.index.clone(), OrtOptions::default().batch_size)?;
        let host = Arc::new(HostCell::new(
            crate::engine::host::QueryHost::new(Some(embedders.query.clone()), config.event_log_dir())
                .with_parse_options(config.limits.parse_options()),
        ));
        let query = QueryActor::new(host.clone()).start();
        let manifest = Manifest::current(embedders.index.model_id(), embedders.index.dim());
        let parts = WriterParts {
            db: db.clone(),
            manifest,
            embedder: scheduler,
            query: query.clone(),
            emit: emit.clone(),
            status: status.clone(),
            opts: {
                if let Some(p) = &publishing {
                    report_sides(p.journal.clone(), status.clone());
                }
                writer_options(&config, publishing)
            },
        };
        let wopts = watcher_options(&config);
        let shared = Shared { parts, parser, book, folders, wopts, arbiter: actix::Arbiter::current() };
        let cairn = Pipeline {
            inner: Arc::new(Inner {
                query: query.clone(),
                host,
                runtime: tokio::runtime::Handle::current(),
                sources: Mutex::new(BTreeMap::new()),
                shared,
                emit,
                events: log.events,
                first: Mutex::new(Some(log.first)),
                status,
                shutdown: Duration::from_secs(config.shutdown_secs),
                stopped: Default::default(),
                keep: Mutex::new(Vec::new()),
                outbox: log.outbox,
                shipping,
                sharing,
            }),
            guard: None,
        };
        // A few sources open at once: on an object store an open is mostly waiting on the store
        // (a writer taking over 30 sources took 3.1 s one after the other).
        let inner = &cairn.inner;
        let mut opening = futures::stream::iter(sources)
            .map(|s| start_source(&inner.shared, &inner.status, &inner.emit, s))
            .buffered(OPEN_AT_ONCE);
        while let Some(running) = opening.next().await {
            let (id, running) = running?;
            inner.sources.lock().unwrap_or_else(|p| p.into_inner()).insert(id, running);
        }
        drop(opening);
        cairn.serve_stored(&db, stored, &config).await?;
        Ok(cairn)
    }

    /// Sources the database holds whose folder was not given on this machine: served as
    /// stored, never scanned here (and said so in every answer that searches them).
    async fn serve_stored(&self, db: &Database, stored: Vec<SourceInfo>, config: &Config) -> Result<()> {
        for info in stored {
            if self.source_ids().contains(&info.id) {
                continue;
            }
            let store = match db.open_existing(&info.id).await {
                Ok(store) => store,
                Err(e) => {
                    tracing::warn!("source `{}` cannot be opened: {e}", info.id);
                    continue;
                }
            };
            let (resident, _) = cairn_index::Resident::load(&store, config.exact_vectors_up_to).await?;
            let status = &self.inner.status;
            status.register(&info.id, info.root.as_deref().unwrap_or_default());
            status.set_pages(&info.id, resident.read().page_count());
            status.set_unavailable(&info.id, Some(cairn_ingest::Unavailable::NotHere));
            let add = Serve { store, resident, root: None };
            self.inner.query.send(add).await.map_err(|_| Error::Stopped)?;
            tracing::info!(
                "source `{}`: its folder was not given on this machine; served as stored",
                info.id
            );
        }
        Ok(())
    }
}

/// The event log, on one `SyncArbiter` thread: into the database's log folder (without a file
/// when it cannot be opened: events still reach subscribers), and shipped to the object store
/// when the database is on one.
fn open_log(config: &Config, status: &StatusBoard) -> Result<Log> {
    let (events, first) = broadcast::channel(SUBSCRIBER_BUFFER);
    let log_dir = config.event_log_dir();
    if let Some(d) = &log_dir {
        std::fs::create_dir_all(d).map_err(|e| Error::Config(format!("event log {}: {e}", d.display())))?;
    }
    let (tx, st, max) = (events.clone(), status.clone(), config.log_max_mib * 1024 * 1024);
    let outbox = crate::replication::remote::Remote::of(&config.db, &config.storage)
        .map_err(Error::Config)?
        .map(|r| Outbox::new(r, crate::replication::shipping::machine_name(&config.paths().state())));
    let to_ship = outbox.clone();
    let log = SyncArbiter::start(1, move || {
        EventLog::open(log_dir.as_deref(), max, tx.clone(), st.clone())
            .unwrap_or_else(|e| {
                tracing::error!("event log: {e}; events are not journaled");
                EventLog::open(None, max, tx.clone(), st.clone()).expect("no file")
            })
            .shipping(to_ship.clone().map(|o| Box::new(o) as Box<dyn crate::core::log::LineSink>))
    });
    Ok(Log { emit: Emitter::new(log, tokio::time::Instant::now()), events, first, outbox })
}

/// The pages remembered as failed (with what another machine's writer found, on an object
/// store), each reported in the status as failing.
async fn poison_book(config: &Config, status: &StatusBoard, outbox: Option<&Outbox>) -> Arc<PoisonBook> {
    let book = Arc::new(PoisonBook::open(&config.paths().state()).unwrap_or_else(|e| {
        let state = config.paths().state();
        tracing::warn!("{}: {e}; pages that fail are remembered until restart only", state.display());
        PoisonBook::in_memory()
    }));
    // Before any page is parsed: what another machine's writer found (see `shipping`).
    if let Some(o) = outbox {
        o.pull_book(&book).await;
    }
    for (source, path, e) in book.skipped() {
        status.failure(
            &source,
            crate::core::status::FileFailure { path, kind: "poisoned".into(), reason: e.reason },
        );
    }
    book
}

/// How often the writer looks whether what readers should know of its sources changed.
const SIDES_EVERY: Duration = Duration::from_millis(200);

/// Tell readers on other machines, through the journal's head, what this writer knows of each
/// source and they cannot see from its commits: changes seen and not committed yet, and folders
/// it cannot read. Sent when it changes (an idle writer writes nothing), until the journal closes.
fn report_sides(journal: crate::replication::journal::Journal, status: StatusBoard) {
    use crate::replication::journal::Side;
    tokio::spawn(async move {
        let mut last = None;
        while !journal.is_closed() {
            tokio::time::sleep(SIDES_EVERY).await;
            let unavailable = status.unavailable();
            let uncompared = status.uncompared();
            let sides: BTreeMap<String, Side> = status
                .all()
                .into_iter()
                .map(|st| {
                    let side = match unavailable.get(&st.source) {
                        Some(why) => Side::Unavailable { why: why.clone() },
                        None => {
                            Side::Watched { pending: st.pending, scanning: uncompared.contains(&st.source) }
                        }
                    };
                    (st.source, side)
                })
                .collect();
            if last.as_ref() != Some(&sides) {
                journal.sides(sides.clone());
                last = Some(sides);
            }
        }
    });
}

fn writer_options(config: &Config, publishing: Option<Publishing>) -> WriterOptions {
    WriterOptions {
        commit_chunks: config.commit_chunks,
        commit_after: config.commit_after(),
        exact_vectors_up_to: config.exact_vectors_up_to,
        snapshots: Some(config.paths().dir().join("snapshots")),
        publishing,
    }
}

fn watcher_options(config: &Config) -> WatcherOptions {
    WatcherOptions {
        quiet_ms: config.debounce_ms,
        reconcile_every: (config.reconcile_secs > 0).then(|| Duration::from_secs(config.reconcile_secs)),
        notify: config.watch,
        mass_removals: !config.limits.hold_mass_removals,
    }
}

/// Start one source's writer and watcher (on the system's arbiter).
pub(super) async fn start_source(
    shared: &Shared,
    status: &StatusBoard,
    emit: &Emitter,
    s: SourceConfig,
) -> Result<(String, Running)> {
    status.register(&s.id, &s.root.display().to_string());
    // Given here: from now on this machine scans it (and knows it again at the next start).
    shared.folders.told(&s.id, &s.root);
    let info = SourceInfo {
        id: s.id.clone(),
        root: Some(s.root.canonicalize().unwrap_or_else(|_| s.root.clone()).display().to_string()),
        include: s.include.clone(),
        exclude: s.exclude.clone(),
    };
    let (root, p, language) = (s.root.clone(), shared.parts.clone(), s.lang());
    let writer = Supervisor::start(move |_| SourceWriter::new(info, root, p).with_language(language));
    // Answered once the writer's start-up (opening the tables) has run.
    let _ = writer.send(Ready).await;
    fault::point("source.loaded");
    let scan = ScanOptions { include: s.include.clone(), exclude: s.exclude.clone() };
    let w = Watcher::new(
        &s.id,
        s.root.clone(),
        scan,
        shared.wopts.clone(),
        shared.parser.clone(),
        writer.clone(),
        emit.clone(),
        status.clone(),
        shared.parts.embedder.clone(),
        shared.folders.clone(),
    )
    .map_err(|e| Error::Config(format!("source `{}`: {e}", s.id)))?;
    Ok((s.id.clone(), Running { config: s, watcher: w.start(), writer }))
}

/// The sources this process scans: the configuration's (given now), and those the database holds
/// that were given on this machine before (the folder book). A stored root is not a command: a
/// source recorded by another machine is served as stored. A local database's folder is on this
/// machine, so its stored roots are adopted into the book the first time (databases made before
/// the book existed).
fn watched_here(config: &Config, stored: &[SourceInfo], folders: &FolderBook) -> Vec<SourceConfig> {
    let mut sources = config.sources.clone();
    for info in stored {
        if sources.iter().any(|s| s.id == info.id) {
            continue;
        }
        let root = match (folders.get(&info.id), &info.root) {
            (Some(record), _) => record.root,
            (None, Some(root)) if cairn_index::store::is_local(&config.db) => {
                folders.told(&info.id, Path::new(root));
                root.into()
            }
            _ => continue,
        };
        // Watched even when the folder is not there now: the source is unavailable until it is.
        sources.push(SourceConfig {
            id: info.id.clone(),
            root,
            include: info.include.clone(),
            exclude: info.exclude.clone(),
            language: None,
        });
    }
    sources
}
