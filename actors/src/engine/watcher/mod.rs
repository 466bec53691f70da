//! `Watcher`: one per source. Turns file-system events (from `notify`, or injected by a replay)
//! into settled per-path changes through the debounce state machine of `cairn-ingest`, hands
//! them to the parser and then, in order, to the source's writer.
//!
//! Also reconciles the folder with the index by a scan: at start (catch-up: what changed while
//! cairn was not running), when notify reports lost events, when a folder appears or moves (its
//! files have no events of their own), periodically as a safety net, and on `Flush`.
//!
//! Removals pass the guard of [`cairn_ingest::folder`] first. A folder that is missing, empty
//! while the index holds pages, or another folder than the one indexed makes the source
//! unavailable (nothing is removed; the index answers as last seen) until a glance at the folder
//! every [`RECHECK_EVERY`] sees it back; a removal of most of the source is held for a yes
//! (`cairn reconcile ID --allow-removals`). Live delete events pass the same guard: ordinary ones
//! apply at once, any other is looked at by a reconcile.
//!
//! Backpressure: notify's callback pushes into a bounded channel ([`NOTIFY_QUEUE`]); this actor
//! handles one batch of settled changes at a time (`ctx.wait`) and awaits the writer, whose
//! mailbox is bounded. A slow writer therefore stops this actor reading the channel, the channel
//! fills, the notify thread blocks, and the kernel's own queue overflows into a rescan: memory
//! never grows with the backlog.

use crate::core::error::PipelineError;
use crate::core::event::EventKind;
use crate::core::folders::FolderBook;
use crate::core::log::Emitter;
use crate::core::status::SourceState;
use crate::core::status::StatusBoard;
use crate::engine::embedding::EmbedScheduler;
use crate::engine::workers::Parser;
use crate::engine::writer::{Commit, Origin, SourceWriter};
use actix::prelude::*;
use cairn_ingest::folder::{Consent, FolderUnavailable, Glance, HeldRemovals, Unavailable};
use cairn_ingest::{Debouncer, PathFilter, RawEvent, ScanOptions, Settled, rel_string};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

mod changes;
mod messages;
mod reconcile;
mod translate;

use changes::{Changes, process};
pub use messages::{Close, Flush, Inject, Reconcile, StopWatching};
pub use reconcile::ReconcileReport;
use reconcile::reconcile;
use translate::translate;

/// Raw events buffered between notify's thread and this actor. A `git checkout` of thousands of
/// files makes about two events per file; this absorbs such a burst while the debouncer catches
/// up. Beyond it, notify's thread waits (and the kernel queue overflows into a rescan).
pub const NOTIFY_QUEUE: usize = 4096;
/// Mailbox bound: control messages (flush, stop, injected replay events) are few.
const MAILBOX: usize = 64;
/// How often an unavailable source's folder is glanced at (a few stats, no scan) to notice it is
/// back.
pub const RECHECK_EVERY: Duration = Duration::from_secs(2);
/// An unavailable folder that is there but unchanged to a glance is scanned again this often (a
/// copy into its subfolders does not change what a glance sees).
const REJUDGE_EVERY: Duration = Duration::from_secs(60);

/// Watcher knobs.
#[derive(Debug, Clone)]
pub struct WatcherOptions {
    pub quiet_ms: u64,
    /// Safety-net rescan period (`None`: only at start, on overflow and on flush).
    pub reconcile_every: Option<Duration>,
    /// Watch with notify (off for replays, which inject the events themselves).
    pub notify: bool,
    /// Mass removals apply without asking (`[limits] hold_mass_removals = false`).
    pub mass_removals: bool,
}

impl Default for WatcherOptions {
    fn default() -> Self {
        Self {
            quiet_ms: Debouncer::DEFAULT_QUIET_MS,
            reconcile_every: Some(Duration::from_secs(600)),
            notify: true,
            mass_removals: false,
        }
    }
}

/// What every step of a watcher needs; cloned into its futures.
#[derive(Debug, Clone)]
struct WatchParts {
    id: String,
    root: Arc<PathBuf>,
    scan: ScanOptions,
    parser: Addr<Parser>,
    writer: Addr<SourceWriter>,
    emit: Emitter,
    status: StatusBoard,
    /// Held while a scan's pages are committed (see [`crate::engine::embedding`]).
    embedder: EmbedScheduler,
    /// The folders given on this machine, with their identities.
    folders: Arc<FolderBook>,
    /// `[limits] hold_mass_removals = false`: mass removals apply without asking.
    mass_removals: bool,
    /// How long removals wait for more (the debouncer's): a scan's too.
    removal_quiet: Duration,
}

/// Why the source is unavailable, and how its folder looked when that was decided.
#[derive(Debug)]
struct Away {
    why: Unavailable,
    glance: Glance,
    judged: std::time::Instant,
}

/// One source's watcher.
pub struct Watcher {
    h: WatchParts,
    filter: Arc<PathFilter>,
    debouncer: Debouncer,
    opts: WatcherOptions,
    notify: Option<notify::RecommendedWatcher>,
    /// notify's channel, shared with the stream that feeds this actor, so `Flush` can take what
    /// is already queued (the lock is held only while polling, never across an await).
    queue: Option<Arc<std::sync::Mutex<tokio::sync::mpsc::Receiver<RawEvent>>>>,
    tick: Option<(u64, SpawnHandle)>,
    /// Scan problems already reported (a periodic scan does not repeat them).
    reported: HashSet<(String, String)>,
    failures: u32,
    stopped: bool,
    away: Option<Away>,
    held: Option<HeldRemovals>,
    /// Folders below the root whose pages the last scan kept unseen.
    shielded: Vec<FolderUnavailable>,
    recheck: Option<SpawnHandle>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("source", &self.h.id)
            .field("pending", &self.debouncer.pending())
            .finish()
    }
}

impl Watcher {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: &str,
        root: PathBuf,
        scan: ScanOptions,
        opts: WatcherOptions,
        parser: Addr<Parser>,
        writer: Addr<SourceWriter>,
        emit: Emitter,
        status: StatusBoard,
        embedder: EmbedScheduler,
        folders: Arc<FolderBook>,
    ) -> Result<Self, cairn_ingest::Error> {
        let filter = Arc::new(PathFilter::new(&scan)?);
        let debouncer = Debouncer::new(opts.quiet_ms);
        Ok(Self {
            h: WatchParts {
                id: id.into(),
                root: Arc::new(root),
                scan,
                parser,
                writer,
                emit,
                status,
                embedder,
                folders,
                mass_removals: opts.mass_removals,
                removal_quiet: Duration::from_millis(debouncer.removal_quiet()),
            },
            filter,
            debouncer,
            opts,
            notify: None,
            queue: None,
            tick: None,
            reported: HashSet::new(),
            failures: 0,
            stopped: false,
            away: None,
            held: None,
            shielded: Vec::new(),
            recheck: None,
        })
    }

    fn start_notify(&mut self, ctx: &mut Context<Self>) -> Result<(), String> {
        use notify::Watcher as _;
        let (tx, rx) = tokio::sync::mpsc::channel::<RawEvent>(NOTIFY_QUEUE);
        let root = self.h.root.canonicalize().map_err(|e| format!("{}: {e}", self.h.root.display()))?;
        let prefix = root.clone();
        // Links are not followed: a folder linked from outside the root is not the source's
        // (the scan refuses it too), and one inside it is watched at its own path already.
        let config = notify::Config::default().with_follow_symlinks(false);
        let handler = move |res: notify::Result<notify::Event>| {
            for raw in translate(res, &prefix) {
                if tx.blocking_send(raw).is_err() {
                    return;
                }
            }
        };
        let mut w = notify::RecommendedWatcher::new(handler, config).map_err(|e| e.to_string())?;
        w.watch(&root, notify::RecursiveMode::Recursive).map_err(|e| e.to_string())?;
        self.notify = Some(w);
        let rx = Arc::new(std::sync::Mutex::new(rx));
        self.queue = Some(rx.clone());
        ctx.add_stream(futures::stream::poll_fn(move |cx| {
            rx.lock().unwrap_or_else(|p| p.into_inner()).poll_recv(cx)
        }));
        Ok(())
    }

    fn push(&mut self, raw: RawEvent, ctx: &mut Context<Self>) {
        let now = self.h.emit.now();
        self.debouncer.push(raw, now);
        self.h.status.set_debouncing(&self.h.id, self.debouncer.pending());
        self.schedule_tick(ctx);
    }

    fn schedule_tick(&mut self, ctx: &mut Context<Self>) {
        let Some(deadline) = self.debouncer.next_deadline() else { return };
        if let Some((at, handle)) = self.tick {
            if at <= deadline {
                return;
            }
            ctx.cancel_future(handle);
        }
        let delay = Duration::from_millis(deadline.saturating_sub(self.h.emit.now()));
        let handle = ctx.run_later(delay, |act, ctx| {
            act.tick = None;
            act.on_tick(ctx);
        });
        self.tick = Some((deadline, handle));
    }

    /// Settle what is due and process it.
    fn on_tick(&mut self, ctx: &mut Context<Self>) {
        if let Some(changes) = self.settle(false, ctx) {
            ctx.wait(
                actix::fut::wrap_future::<_, Self>(process(self.h.clone(), changes))
                    .map(|res, act, ctx| act.after(res, ctx)),
            );
        }
    }

    /// What the debouncer lets go now (`all`: everything it holds).
    fn settle(&mut self, all: bool, ctx: &mut Context<Self>) -> Option<Changes> {
        let now = if all { u64::MAX } else { self.h.emit.now() };
        let settled = self.debouncer.tick(now);
        self.h.status.set_debouncing(&self.h.id, self.debouncer.pending());
        if !all {
            self.schedule_tick(ctx);
        }
        (!settled.is_empty()).then(|| self.classify(settled))
    }

    fn after(&mut self, res: Result<Option<ReconcileReport>, PipelineError>, ctx: &mut Context<Self>) {
        match res {
            Ok(report) => {
                self.failures = 0;
                if let Some(r) = &report {
                    self.note(r, ctx);
                }
                // A source whose folder was missing at start is watched once it is there.
                if self.opts.notify && self.notify.is_none() && self.away.is_none() && !self.stopped {
                    let _ = self.start_notify(ctx);
                }
            }
            Err(e) => {
                // The pipeline behind us failed (its own supervisor restarts it); go on, and
                // reconcile later so nothing seen here is lost.
                self.failures += 1;
                let retry = crate::core::retry::after(self.failures);
                tracing::warn!("source `{}`: {e}; reconciling in {} ms", self.h.id, retry.as_millis());
                let (emit, id) = (self.h.emit.clone(), self.h.id.clone());
                let reason = e.to_string();
                self.h.status.set_state(&self.h.id, SourceState::Retrying, Some(reason.clone()));
                let ev = EventKind::StageFailed {
                    stage: "watcher".into(),
                    reason,
                    retry_ms: retry.as_millis() as u64,
                };
                actix::spawn(async move { emit.emit(&id, vec![ev]).await });
                ctx.run_later(retry, |act, ctx| {
                    if !act.stopped {
                        act.reconcile(ctx, "retry");
                    }
                });
            }
        }
    }

    /// What a reconcile found about the folder: the source is unavailable, has removals held, or
    /// is fine again. Each change is told once (an event, the status, the log).
    fn note(&mut self, r: &ReconcileReport, ctx: &mut Context<Self>) {
        let root = self.h.root.display().to_string();
        let mut events = Vec::new();
        match &r.unavailable {
            Some(why) => {
                if self.away.as_ref().map(|a| &a.why) != Some(why) {
                    let message = why.describe(&self.h.id, &root);
                    tracing::warn!("{message}");
                    events.push(EventKind::SourceUnavailable { unavailable: why.clone(), message });
                    self.h.status.set_unavailable(&self.h.id, Some(why.clone()));
                }
                let glance = Glance::of(&self.h.root);
                self.away = Some(Away { why: why.clone(), glance, judged: std::time::Instant::now() });
                self.watch_for_return(ctx);
            }
            None if self.away.take().is_some() => {
                tracing::info!("source `{}`: its folder {root} is back", self.h.id);
                self.h.status.set_unavailable(&self.h.id, None);
                events.push(EventKind::SourceAvailable);
                if let Some(h) = self.recheck.take() {
                    ctx.cancel_future(h);
                }
                // The folder may be another inode than the one notify was watching.
                self.notify = None;
                self.queue = None;
                if self.opts.notify && !self.stopped {
                    let _ = self.start_notify(ctx);
                }
            }
            None => {}
        }
        if r.unavailable.is_none() && r.held != self.held {
            if let Some(held) = &r.held {
                let message = held.describe(&self.h.id, &root);
                tracing::warn!("{message}");
                events.push(EventKind::RemovalsHeld { held: held.clone(), message });
            }
            self.held = r.held.clone();
            self.h.status.set_held(&self.h.id, r.held.clone());
        }
        if r.unavailable.is_none() {
            self.h.status.set_placeholders(&self.h.id, r.placeholders);
        }
        if r.unavailable.is_none() && r.folders_unavailable != self.shielded {
            let folders = r.folders_unavailable.clone();
            let message = if folders.is_empty() {
                format!("source `{}`: every folder of {root} can be read again", self.h.id)
            } else {
                folders.iter().map(|f| f.describe(&self.h.id, &root)).collect::<Vec<_>>().join("\n")
            };
            if folders.is_empty() {
                tracing::info!("{message}")
            } else {
                tracing::warn!("{message}")
            }
            events.push(EventKind::FoldersUnavailable { folders: folders.clone(), message });
            self.h.status.set_folders_unavailable(&self.h.id, folders.clone());
            self.shielded = folders;
        }
        if !events.is_empty() {
            let (emit, id) = (self.h.emit.clone(), self.h.id.clone());
            actix::spawn(async move { emit.emit(&id, events).await });
        }
    }

    /// While unavailable: glance at the folder every [`RECHECK_EVERY`], and reconcile when it
    /// looks different (or every [`REJUDGE_EVERY`]).
    fn watch_for_return(&mut self, ctx: &mut Context<Self>) {
        if self.recheck.is_some() {
            return;
        }
        self.recheck = Some(ctx.run_interval(RECHECK_EVERY, |act, ctx| {
            let Some(away) = &act.away else { return };
            if act.stopped {
                return;
            }
            if Glance::of(&act.h.root) != away.glance || away.judged.elapsed() >= REJUDGE_EVERY {
                act.reconcile(ctx, "recheck");
            }
        }));
    }

    fn reconcile(&mut self, ctx: &mut Context<Self>, reason: &'static str) {
        let reported = std::mem::take(&mut self.reported);
        let fut = reconcile(self.h.clone(), reason, reported, Consent::default());
        ctx.wait(actix::fut::wrap_future::<_, Self>(fut).map(|(res, reported), act, ctx| {
            act.reported = reported;
            act.after(res.map(Some), ctx)
        }));
    }

    /// Settle everything seen so far, compare the folder with the index when `rescan` says with
    /// what consent, and commit: the table version, and what the comparison found.
    fn drain(
        &mut self,
        rescan: Option<Consent>,
        ctx: &mut Context<Self>,
    ) -> actix::fut::LocalBoxActorFuture<Self, Result<(u64, Option<ReconcileReport>), PipelineError>> {
        if let Some((_, handle)) = self.tick.take() {
            ctx.cancel_future(handle);
        }
        // Events notify has already queued count as seen.
        let queued: Vec<RawEvent> = match &self.queue {
            Some(q) => {
                let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
                std::iter::from_fn(|| q.try_recv().ok()).collect()
            }
            None => Vec::new(),
        };
        let now = self.h.emit.now();
        for raw in queued {
            self.debouncer.push(raw, now);
        }
        // One future, so the steps run in this order (actix runs the latest `ctx.wait` first).
        let changes = self.settle(true, ctx);
        let reported = std::mem::take(&mut self.reported);
        let h = self.h.clone();
        let fut = async move {
            let mut res = match changes {
                Some(c) => process(h.clone(), c).await,
                None => Ok(None),
            };
            let reported = match rescan {
                Some(consent) if res.is_ok() => {
                    let (r, reported) = reconcile(h.clone(), "flush", reported, consent).await;
                    res = r.map(Some);
                    reported
                }
                _ => reported,
            };
            let done = match res {
                Ok(report) => h
                    .writer
                    .send(Commit)
                    .await
                    .map_err(PipelineError::from)
                    .and_then(|r| r)
                    .map(|version| (version, report)),
                Err(e) => Err(e),
            };
            (done, reported)
        };
        Box::pin(actix::fut::wrap_future::<_, Self>(fut).map(|(done, reported), act, ctx| {
            act.reported.extend(reported);
            if let Ok((_, Some(report))) = &done {
                act.note(report, ctx);
            }
            done
        }))
    }

    /// Settled changes → what to parse and remove, and the file events to log.
    fn classify(&self, settled: Vec<Settled>) -> Changes {
        let root = &self.h.root;
        let relevant = |p: &Path| self.filter.allows_file(p);
        let mut c = Changes { origin: Origin::Edit, ..Changes::default() };
        for s in settled {
            match s {
                Settled::Rescan => c.rescan = true,
                Settled::Renamed { from, to } => {
                    if root.join(&to).is_dir() {
                        // A folder moved: its files have no events of their own.
                        c.removed.push((from, true));
                        c.rescan = true;
                        continue;
                    }
                    let (f, t) = (rel_string(&from), rel_string(&to));
                    match (relevant(&from), relevant(&to)) {
                        (true, true) => {
                            c.events.push(EventKind::FileRenamed {
                                from: f.clone(),
                                to: t.clone(),
                                by_hash: false,
                            });
                            c.renamed.push((f, t));
                        }
                        (false, true) => c.events.push(EventKind::FileChanged { path: t }),
                        (true, false) => c.events.push(EventKind::FileRemoved { path: f }),
                        (false, false) => {}
                    }
                    if relevant(&to) {
                        c.to_parse.push(to);
                    }
                    if relevant(&from) {
                        c.removed.push((from, false));
                    }
                }
                Settled::Removed(p) => {
                    if relevant(&p) {
                        c.events.push(EventKind::FileRemoved { path: rel_string(&p) });
                        c.removed.push((p, false));
                    } else if !cairn_ingest::is_markdown(&p) && self.filter.allows_dir(&p) {
                        // Possibly a folder: the writer removes the pages under it, if any.
                        c.removed.push((p, true));
                    }
                }
                Settled::Changed(p) => {
                    if root.join(&p).is_dir() {
                        if self.filter.allows_dir(&p) {
                            c.rescan = true;
                        }
                    } else if relevant(&p) {
                        c.events.push(EventKind::FileChanged { path: rel_string(&p) });
                        c.to_parse.push(p);
                    }
                }
            }
        }
        c
    }
}
