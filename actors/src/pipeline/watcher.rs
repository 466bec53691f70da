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

use crate::event::EventKind;
use crate::ops::log::Emitter;
use crate::pipeline::embedding::EmbedScheduler;
use crate::pipeline::folders::FolderBook;
use crate::pipeline::workers::{PARSE_GROUP, Parse, Parsed, Parser, Scan};
use crate::pipeline::writer::{Commit, Covers, Ingest, Origin, SourceWriter, States};
use crate::status::SourceState;
use crate::status::StatusBoard;
use actix::prelude::*;
use cairn_ingest::folder::{
    self, Consent, FolderIdentity, Glance, HeldRemovals, Reading, Unavailable, Verdict,
};
use cairn_ingest::{Debouncer, PathFilter, RawEvent, ScanOptions, Settled, rel_string};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

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
    /// Held while a scan's pages are committed (see [`crate::pipeline::embedding`]).
    embedder: EmbedScheduler,
    /// The folders given on this machine, with their identities.
    folders: Arc<FolderBook>,
    /// `[limits] hold_mass_removals = false`: mass removals apply without asking.
    mass_removals: bool,
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
            },
            filter,
            debouncer: Debouncer::new(opts.quiet_ms),
            opts,
            notify: None,
            queue: None,
            tick: None,
            reported: HashSet::new(),
            failures: 0,
            stopped: false,
            away: None,
            held: None,
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

    fn after(&mut self, res: Result<Option<ReconcileReport>, String>, ctx: &mut Context<Self>) {
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
                let retry = crate::pipeline::retry::after(self.failures);
                tracing::warn!("source `{}`: {e}; reconciling in {} ms", self.h.id, retry.as_millis());
                let (emit, id) = (self.h.emit.clone(), self.h.id.clone());
                self.h.status.set_state(&self.h.id, SourceState::Retrying, Some(e.clone()));
                let ev = EventKind::StageFailed {
                    stage: "watcher".into(),
                    reason: e,
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
    ) -> actix::fut::LocalBoxActorFuture<Self, Result<(u64, Option<ReconcileReport>), String>> {
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
                    .map_err(|e| format!("pipeline stopped: {e}"))
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

/// Changes of one tick.
#[derive(Debug, Default)]
struct Changes {
    to_parse: Vec<PathBuf>,
    /// With whether the path may be a folder.
    removed: Vec<(PathBuf, bool)>,
    renamed: Vec<(String, String)>,
    events: Vec<EventKind>,
    rescan: bool,
    /// File events (someone is editing) or a scan.
    origin: Origin,
}

/// Log the file events, parse in groups, hand everything to the writer in order; then rescan if
/// a folder appeared, events were lost, or removals were not ordinary (the rescan's reconcile
/// judges them with the whole folder in view).
async fn process(h: WatchParts, mut c: Changes) -> Result<Option<ReconcileReport>, String> {
    if !c.rescan && !c.removed.is_empty() && !removals_are_ordinary(&h, &c).await? {
        c.rescan = true;
    }
    let rescan = c.rescan;
    if rescan {
        // The rescan removes whatever left the folder, in one batch with whatever it finds: a file
        // moved into a folder created a moment before (whose arrival has no event, only the
        // rescan sees it) then leaves and arrives together and keeps its stored vectors. Removed
        // first on its own, its chunks would be gone before the arrival was matched to them.
        let renamed_from: HashSet<String> = c.renamed.iter().map(|(from, _)| from.clone()).collect();
        c.removed.retain(|(p, _)| renamed_from.contains(&rel_string(p)));
    }
    let found_dir = apply(&h, c).await?;
    if rescan || found_dir {
        return reconcile(h, "rescan", HashSet::new(), Consent::default()).await.0.map(Some);
    }
    Ok(None)
}

/// Whether a tick's removals may apply at once: the folder is still the one indexed, and they
/// take neither most of the source nor all of it (a folder emptied under a running watch).
async fn removals_are_ordinary(h: &WatchParts, c: &Changes) -> Result<bool, String> {
    let recorded = h.folders.get(&h.id).and_then(|r| r.identity);
    match FolderIdentity::read(&h.root) {
        Err(_) => return Ok(false),
        Ok(now) if recorded.is_some_and(|r| r.change_to(&now).is_some()) => return Ok(false),
        Ok(_) => {}
    }
    let renamed: HashSet<&str> = c.renamed.iter().map(|(from, _)| from.as_str()).collect();
    let lost: Vec<(PathBuf, bool)> =
        c.removed.iter().filter(|(p, _)| !renamed.contains(rel_string(p).as_str())).cloned().collect();
    if lost.is_empty() {
        return Ok(true);
    }
    let (covered, indexed) =
        h.writer.send(Covers(lost)).await.map_err(|e| format!("pipeline stopped: {e}"))?;
    Ok(covered == 0 || covered < indexed && (h.mass_removals || !folder::is_mass_removal(covered, indexed)))
}

/// Returns whether a directory stood where a file was expected.
async fn apply(h: &WatchParts, mut c: Changes) -> Result<bool, String> {
    h.emit.emit(&h.id, std::mem::take(&mut c.events)).await;
    h.status.add_in_flight(&h.id, c.to_parse.len() + c.removed.len());
    let mut found_dir = false;
    let mut removed = std::mem::take(&mut c.removed);
    let mut renamed = std::mem::take(&mut c.renamed);
    let stopped = |e: MailboxError| format!("pipeline stopped: {e}");
    let origin = c.origin;
    if c.to_parse.is_empty() {
        if !removed.is_empty() {
            h.writer.send(Ingest { parsed: Vec::new(), removed, renamed, origin }).await.map_err(stopped)?;
            commit(h).await?;
        }
        return Ok(false);
    }
    for group in c.to_parse.chunks(PARSE_GROUP) {
        let parsed = h
            .parser
            .send(Parse { source: h.id.clone(), root: h.root.clone(), files: group.to_vec() })
            .await
            .map_err(stopped)?;
        found_dir |= parsed.iter().any(|p| matches!(p, Parsed::Directory { .. }));
        let msg = Ingest {
            parsed,
            removed: std::mem::take(&mut removed),
            renamed: std::mem::take(&mut renamed),
            origin,
        };
        h.writer.send(msg).await.map_err(stopped)?;
    }
    commit(h).await?;
    Ok(found_dir)
}

/// The changes of a tick are all with the writer: commit them now rather than at its deadline.
/// A failed commit is the writer's to report and retry; only a stopped writer is an error here.
async fn commit(h: &WatchParts) -> Result<(), String> {
    h.writer.send(Commit).await.map(|_| ()).map_err(|e| format!("pipeline stopped: {e}"))
}

/// What a comparison of a folder with its index did (the answer to `cairn reconcile`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReconcileReport {
    pub source: String,
    /// Notes found in the folder.
    pub files: usize,
    /// Of them, new or changed since they were indexed.
    pub changed: usize,
    /// Pages removed because their file is gone.
    pub removed: usize,
    /// Removals found and held for a yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldRemovals>,
    /// The folder could not be read as the source's: nothing was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<Unavailable>,
}

/// Compare the folder with the index and apply what the guard lets through (see the module's
/// doc). Files whose path, size and modification time are those they were indexed with are not
/// read (a stat cache, as git's).
async fn reconcile(
    h: WatchParts,
    reason: &'static str,
    mut reported: HashSet<(String, String)>,
    consent: Consent,
) -> (Result<ReconcileReport, String>, HashSet<(String, String)>) {
    let res: Result<ReconcileReport, String> = async {
        h.status.set_state(&h.id, SourceState::Scanning, None);
        let mut report = ReconcileReport { source: h.id.clone(), ..ReconcileReport::default() };
        let unavailable = |mut report: ReconcileReport, why: Unavailable| {
            h.status.set_state(&h.id, SourceState::Watching, None);
            report.unavailable = Some(why);
            Ok(report)
        };
        let stopped = |e: MailboxError| format!("pipeline stopped: {e}");
        let identity = match FolderIdentity::read(&h.root) {
            Ok(i) => i,
            Err(Unavailable::Missing) if h.writer.send(States).await.map_err(stopped)?.is_empty() => {
                return unavailable(report, Unavailable::NeverFound);
            }
            Err(why) => return unavailable(report, why),
        };
        let scan = match h
            .parser
            .send(Scan { root: h.root.clone(), opts: h.scan.clone() })
            .await
            .map_err(stopped)?
        {
            Ok(scan) => scan,
            Err(e) => return unavailable(report, Unavailable::Unreadable { message: e.to_string() }),
        };
        let states = h.writer.send(States).await.map_err(stopped)?;
        cairn_index::fault::point("reconcile.scanned");
        let mut events = Vec::new();
        for p in &scan.problems {
            let key = (p.path().map(rel_string).unwrap_or_default(), p.kind().to_string());
            if reported.insert(key.clone()) {
                events.push(EventKind::PageFailed { path: key.0, kind: key.1, reason: p.to_string() });
            }
        }
        let present: HashSet<&str> = scan.files.iter().map(|f| f.slug.as_str()).collect();
        let gone: Vec<&str> = states
            .iter()
            .filter(|(s, _)| !present.contains(s.as_str()))
            .map(|(_, st)| st.path.as_str())
            .collect();
        // A page gone from one path and a new file of its size and time elsewhere: a move.
        let moved = {
            let stat = |p: &str| {
                states.values().find(|st| st.path == p).map_or((0, 0), |st| (st.bytes as u64, st.mtime_ms))
            };
            let arrived: Vec<(u64, i64)> = scan
                .files
                .iter()
                .filter(|f| !states.contains_key(&f.slug))
                .map(|f| (f.size, f.mtime_ms))
                .collect();
            folder::moved(&gone.iter().map(|p| stat(p)).collect::<Vec<_>>(), &arrived)
        };
        let recorded = h.folders.get(&h.id).and_then(|r| r.identity);
        let reading = Reading {
            indexed: states.len(),
            found: scan.files.len(),
            removing: moved.iter().filter(|m| !**m).count(),
            change: recorded.and_then(|r| r.change_to(&identity)),
        };
        let consent = Consent { mass_removals: consent.mass_removals || h.mass_removals, ..consent };
        let removed: Vec<&str> = match folder::judge(&reading, consent) {
            Verdict::Unavailable(why) => {
                h.emit.emit(&h.id, events).await;
                return unavailable(report, why);
            }
            Verdict::Hold { removing, indexed } => {
                let mut sample: Vec<String> =
                    gone.iter().zip(&moved).filter(|(_, m)| !**m).map(|(p, _)| p.to_string()).collect();
                sample.sort();
                sample.truncate(folder::HELD_SAMPLE);
                report.held = Some(HeldRemovals { removing, indexed, sample });
                // The moves still apply: they are renames, not losses.
                gone.iter().zip(&moved).filter(|(_, m)| **m).map(|(p, _)| *p).collect()
            }
            Verdict::Apply => gone,
        };
        h.folders.set_identity(&h.id, &identity);
        let removed: Vec<(PathBuf, bool)> = removed.into_iter().map(|p| (PathBuf::from(p), false)).collect();
        let to_parse: Vec<PathBuf> = scan
            .files
            .iter()
            .filter(|f| {
                !states.get(&f.slug).is_some_and(|s| {
                    s.clean
                        && f.mtime_ms != 0
                        && s.mtime_ms == f.mtime_ms
                        && s.bytes == f.size as i64
                        && s.path == rel_string(&f.rel)
                })
            })
            .map(|f| f.rel.clone())
            .collect();
        report.files = scan.files.len();
        report.changed = to_parse.len();
        report.removed = removed.len();
        events.push(EventKind::Reconciled {
            reason: reason.into(),
            files: report.files,
            changed: report.changed,
            removed: report.removed,
            held: report.held.as_ref().map_or(0, |h| h.removing),
        });
        h.emit.emit(&h.id, events).await;
        // Names and keywords first: the model waits until these pages are committed.
        let _hold = (!to_parse.is_empty()).then(|| h.embedder.hold_bulk());
        apply(&h, Changes { to_parse, removed, ..Changes::default() }).await?;
        h.status.set_state(&h.id, SourceState::Watching, None);
        Ok(report)
    }
    .await;
    if let Err(e) = &res {
        h.status.set_state(&h.id, SourceState::Retrying, Some(e.clone()));
    }
    (res, reported)
}

/// notify's event → raw events with vault-relative paths.
fn translate(res: notify::Result<notify::Event>, root: &Path) -> Vec<RawEvent> {
    use notify::EventKind as K;
    use notify::event::{AccessKind, MetadataKind, ModifyKind, RenameMode};
    let ev = match res {
        Ok(ev) => ev,
        Err(e) => {
            tracing::warn!("file watcher error ({e}); rescanning");
            return vec![RawEvent::Rescan];
        }
    };
    if ev.need_rescan() {
        return vec![RawEvent::Rescan];
    }
    let rel = |p: &PathBuf| -> Option<PathBuf> {
        let r = p.strip_prefix(root).ok()?;
        (!r.as_os_str().is_empty()).then(|| r.to_path_buf())
    };
    let paths: Vec<PathBuf> = ev.paths.iter().filter_map(rel).collect();
    let cookie = ev.attrs.tracker().map(|t| t as u64);
    match ev.kind {
        K::Access(AccessKind::Close(_)) | K::Access(_) => Vec::new(),
        K::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => Vec::new(),
        K::Create(_) => paths.into_iter().map(|path| RawEvent::Create { path }).collect(),
        K::Remove(_) => paths.into_iter().map(|path| RawEvent::Remove { path }).collect(),
        K::Modify(ModifyKind::Name(RenameMode::From)) => {
            paths.into_iter().map(|path| RawEvent::RenameFrom { path, cookie }).collect()
        }
        K::Modify(ModifyKind::Name(RenameMode::To)) => {
            paths.into_iter().map(|path| RawEvent::RenameTo { path, cookie }).collect()
        }
        K::Modify(ModifyKind::Name(RenameMode::Both)) => {
            match (ev.paths.first().map(rel), ev.paths.get(1).map(rel)) {
                (Some(Some(from)), Some(Some(to))) => vec![RawEvent::Rename { from, to }],
                // One side outside the root: a move in or out.
                (Some(None), Some(Some(to))) => vec![RawEvent::Create { path: to }],
                (Some(Some(from)), Some(None)) => vec![RawEvent::Remove { path: from }],
                _ => Vec::new(),
            }
        }
        _ => paths.into_iter().map(|path| RawEvent::Modify { path }).collect(),
    }
}

impl Actor for Watcher {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX);
        self.h.status.register(&self.h.id, &self.h.root.display().to_string());
        // A missing folder is the catch-up's to report (the source is unavailable until it is
        // back, and watched from then on).
        if self.opts.notify
            && self.h.root.is_dir()
            && let Err(e) = self.start_notify(ctx)
        {
            // Without live events the source is still kept current by the periodic and flush
            // scans; the watch is retried at each of them.
            tracing::error!("source `{}`: cannot watch {}: {e}", self.h.id, self.h.root.display());
        }
        self.reconcile(ctx, "catch-up");
        if let Some(every) = self.opts.reconcile_every {
            ctx.run_interval(every, |act, ctx| {
                if act.stopped {
                    return;
                }
                if act.opts.notify && act.notify.is_none() && act.away.is_none() {
                    let _ = act.start_notify(ctx);
                }
                act.reconcile(ctx, "periodic");
            });
        }
    }
}

impl StreamHandler<RawEvent> for Watcher {
    fn handle(&mut self, raw: RawEvent, ctx: &mut Context<Self>) {
        self.push(raw, ctx);
    }

    /// The notify channel closed (the watch was dropped): keep the actor.
    fn finished(&mut self, _: &mut Context<Self>) {}
}

/// A raw event from a replay (the same path notify's events take).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Inject(pub RawEvent);

impl Handler<Inject> for Watcher {
    type Result = ();

    fn handle(&mut self, msg: Inject, ctx: &mut Context<Self>) {
        self.push(msg.0, ctx);
    }
}

/// Make everything seen so far searchable: settle the debouncer, optionally compare the folder
/// with the index (`rescan`), and commit. Answers with the table version.
#[derive(Debug, Message)]
#[rtype(result = "Result<u64, String>")]
pub struct Flush {
    pub rescan: bool,
}

impl Handler<Flush> for Watcher {
    type Result = AtomicResponse<Self, Result<u64, String>>;

    fn handle(&mut self, msg: Flush, ctx: &mut Context<Self>) -> Self::Result {
        let drained = self.drain(msg.rescan.then(Consent::default), ctx);
        let root = self.h.root.display().to_string();
        AtomicResponse::new(Box::pin(drained.map(move |done, act, _| match done? {
            // An unavailable folder is not up to date: the flush says why.
            (_, Some(ReconcileReport { unavailable: Some(why), .. })) => Err(why.describe(&act.h.id, &root)),
            (version, _) => Ok(version),
        })))
    }
}

/// Compare the folder with the index now (`cairn reconcile`); with `allow_removals`, removals the
/// guard would hold, and those of an empty or other folder, apply.
#[derive(Debug, Message)]
#[rtype(result = "Result<ReconcileReport, String>")]
pub struct Reconcile {
    pub allow_removals: bool,
}

impl Handler<Reconcile> for Watcher {
    type Result = AtomicResponse<Self, Result<ReconcileReport, String>>;

    fn handle(&mut self, msg: Reconcile, ctx: &mut Context<Self>) -> Self::Result {
        let consent = Consent { removals: msg.allow_removals, ..Consent::default() };
        let drained = self.drain(Some(consent), ctx);
        AtomicResponse::new(Box::pin(drained.map(|done, _, _| done.map(|(_, r)| r.unwrap_or_default()))))
    }
}

/// Stop watching (shutdown): no more file events are taken; pending ones are processed.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct StopWatching;

impl Handler<StopWatching> for Watcher {
    type Result = ();

    fn handle(&mut self, _: StopWatching, _: &mut Context<Self>) {
        self.notify = None;
        self.stopped = true;
        self.h.status.set_state(&self.h.id, SourceState::Stopped, None);
    }
}

/// Stop this actor now (its source is being removed).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Close;

impl Handler<Close> for Watcher {
    type Result = ();

    fn handle(&mut self, _: Close, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}
