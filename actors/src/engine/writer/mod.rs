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
//! the source from its tables); the other sources' writers are untouched. A commit refused
//! because another writer holds the source (the lease was lost, or the tables fenced) is no
//! failure: the writer says `handed_over`, and commits and retries nothing more.

mod backlog;
mod commit;
mod janitor;
mod language;
mod plan;
mod start;
#[cfg(test)]
mod tests;
mod upkeep;
mod vectors;

pub(crate) use janitor::snapshot_path;

use crate::core::error::{Part, PipelineError, Refusal};
use crate::core::event::EventKind;
use crate::core::log::Emitter;
use crate::core::status::SourceState;
use crate::core::status::StatusBoard;
use crate::engine::embedding::{EmbedScheduler, Priority};
use crate::engine::query::QueryActor;
use crate::engine::workers::Parsed;
use actix::prelude::*;
use backlog::Backlog;
use cairn_index::{Database, Manifest, PageState, Resident, SourceInfo, SourceStore};
use plan::Planner;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use upkeep::Upkeep;

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

/// How often work held by a lapsed writer lease (vectors to commit, an open to fence) looks
/// again whether the lease was renewed (a renewal is tried every 2 s).
const LAPSED_RETRY: Duration = Duration::from_secs(1);

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
    pub publishing: Option<crate::replication::journal::Publishing>,
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

/// Failures in a row after which callers waiting for every vector are told, not kept waiting.
const TELL_AFTER: u32 = 3;

/// One source's writer.
pub struct SourceWriter {
    id: String,
    root: PathBuf,
    info: SourceInfo,
    /// The language configured for it (else recorded, else told from its folder).
    language: Option<cairn_index::resident::Lang>,
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
    /// The last failure, while failures go on (cleared by a commit).
    failing: Option<PipelineError>,
    /// Why the tables did not open, while they do not (commits are refused with it, and a
    /// reopen is due).
    cannot_open: Option<String>,
    /// Closed on purpose (its source was removed): a supervisor restart stops at once.
    closed: bool,
    /// The pipeline has drained: this writer commits nothing more, and runs no upkeep.
    retired: bool,
    /// A commit was refused for a lapsed lease, and none has landed since (`commit_held` said so).
    held: bool,
    /// Another writer holds the source (it took the lease, or fenced the tables): this one's
    /// refused commits are not failures, and nothing is retried.
    handed_over: bool,
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
            .field("vectors_waiting", &self.vectors.waiting())
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
            language: None,
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
            failing: None,
            cannot_open: None,
            closed: false,
            retired: false,
            held: false,
            handed_over: false,
            embedder: parts.embedder,
            query: parts.query,
            emit: parts.emit,
            status: parts.status,
            opts: parts.opts,
        }
    }

    /// Its words read in `language` (configured), not the one recorded or told from its folder.
    pub fn with_language(self, language: Option<cairn_index::resident::Lang>) -> Self {
        Self { language, ..self }
    }

    /// Count a failure in a row and report it (the log, the status, a `stage_failed` event);
    /// the wait before the next try.
    fn report_failure(&mut self, stage: &str, what: &str, reason: &str) -> Duration {
        self.failures += 1;
        let retry = crate::core::retry::after(self.failures);
        tracing::error!("source `{}`: {what}: {reason}; retrying in {} ms", self.id, retry.as_millis());
        self.status.set_state(&self.id, SourceState::Retrying, Some(reason.to_string()));
        let ev = EventKind::StageFailed {
            stage: stage.into(),
            reason: reason.into(),
            retry_ms: retry.as_millis() as u64,
        };
        self.tell(ev);
        retry
    }

    /// Emit one event of the source, spawned on the arbiter, not on this context: a stop must not
    /// cancel it.
    fn tell(&self, event: EventKind) {
        let (emit, id) = (self.emit.clone(), self.id.clone());
        actix::spawn(async move { emit.emit(&id, vec![event]).await });
    }

    /// Report an infrastructure failure and stop; the supervisor restarts this actor. A commit
    /// refused because another writer holds the source is no failure: see [`Self::hand_over`].
    fn fail(&mut self, ctx: &mut Context<Self>, stage: &str, error: PipelineError) {
        if error.handed_over() {
            return self.hand_over(&error);
        }
        self.report_failure(stage, &format!("{stage} failed"), &error.to_string());
        if self.failures >= TELL_AFTER {
            self.vectors.tell_waiters(Err(error.clone()));
        }
        self.failing = Some(error);
        ctx.stop();
    }

    /// Another writer holds the source: commit nothing more, and retry nothing (a restart would
    /// only be refused again). Its lease is lost for good (a fence is proof: the other writer
    /// took the lease before it fenced), so the process stops writing and reads; callers
    /// waiting for vectors are told. Said once (`handed_over`); the source's state is `stopped`.
    pub(super) fn hand_over(&mut self, error: &PipelineError) {
        if let Some(p) = &self.opts.publishing {
            p.lease.lose();
        }
        self.vectors.tell_waiters(Err(error.clone()));
        if std::mem::replace(&mut self.handed_over, true) {
            return;
        }
        let reason = error.to_string();
        tracing::warn!("{reason}");
        self.status.set_state(&self.id, SourceState::Stopped, Some(reason.clone()));
        self.tell(EventKind::HandedOver { reason });
    }

    /// A commit landed: failures and a held commit are over.
    fn landed(&mut self) {
        (self.failures, self.failing, self.held) = (0, None, false);
    }

    /// A commit refused for a lapsed lease (`why`) waits for its renewal; said once until the
    /// next commit lands.
    fn hold(&mut self, why: &PipelineError) {
        if std::mem::replace(&mut self.held, true) {
            return;
        }
        self.tell(EventKind::CommitHeld { reason: why.to_string() });
    }

    /// Open the tables; until they open, commits are refused with why (a flush does not wait
    /// for a source that cannot open), answers say the source is damaged, and the open is tried
    /// again with backoff: a store that was down for a while comes back on its own.
    fn open_tables(&mut self, delay: Duration, ctx: &mut Context<Self>) {
        ctx.wait(actix::fut::wrap_future::<_, Self>(self.open(delay)).map(|res, act, ctx| match res {
            Ok(opened) => {
                act.cannot_open = None;
                act.opened(opened, ctx)
            }
            Err(e) => act.open_failed(ctx, e),
        }));
    }

    fn open_failed(&mut self, ctx: &mut Context<Self>, error: PipelineError) {
        if error.handed_over() {
            return self.hand_over(&error);
        }
        let reason = error.to_string();
        let retry = self.report_failure("open", "its tables cannot be opened", &reason);
        (self.store, self.resident) = (None, None);
        self.cannot_open = Some(reason.clone());
        self.query.do_send(crate::engine::query::CannotOpen { id: self.id.clone(), why: reason });
        ctx.run_later(retry, |act, ctx| {
            if !act.closed && !act.retired {
                act.open_tables(Duration::ZERO, ctx)
            }
        });
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

    /// Why this writer may not commit now: on an object store, it no longer holds the writer
    /// lease (or has not renewed it in time).
    fn refused(&self) -> Option<PipelineError> {
        let why = if self.retired {
            Refusal::Retired
        } else if let Some(lease) = self.opts.publishing.as_ref().map(|p| &p.lease).filter(|l| !l.valid()) {
            if lease.lost() { Refusal::LeaseLost } else { Refusal::LeaseLapsed }
        } else {
            return None;
        };
        Some(PipelineError::Refused { id: self.id.clone(), why })
    }

    /// The vector of a text, if one is known (committed, or embedded moments ago).
    fn known_vector(&self, hash: &str) -> Option<Vec<f32>> {
        self.vectors.fresh(hash).or_else(|| self.resident.as_ref().and_then(|r| r.read().vector_of(hash)))
    }
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
        self.vectors.restarted();
        // A restart (after a failed commit) waits its backoff, holding what was sent meanwhile.
        let delay = if self.failures > 0 { crate::core::retry::after(self.failures) } else { Duration::ZERO };
        self.open_tables(delay, ctx);
    }
}

impl Supervised for SourceWriter {
    fn restarting(&mut self, _: &mut Context<Self>) {
        tracing::info!("source `{}`: restarting the writer", self.id);
        // The handles of the old context's timers mean nothing in the new one, whose handles
        // count from the start again: cancelling a stale one cancelled whatever the new context
        // had spawned under that number (the embedding of a retried commit, whose pages then
        // never got their vectors).
        (self.timer, self.timer_due, self.upkeep, self.idle_upkeep) = (None, None, None, None);
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
#[rtype(result = "Result<u64, PipelineError>")]
pub struct Commit;

impl Handler<Commit> for SourceWriter {
    type Result = AtomicResponse<Self, Result<u64, PipelineError>>;

    fn handle(&mut self, _: Commit, ctx: &mut Context<Self>) -> Self::Result {
        self.cancel_timer(ctx);
        match self.commit_future() {
            Some(f) => AtomicResponse::new(f),
            None => {
                let store = self.store.clone();
                AtomicResponse::new(Box::pin(actix::fut::wrap_future(async move {
                    match store {
                        Some(s) => Ok(s.version().await?),
                        None => Err(PipelineError::NotOpen),
                    }
                })))
            }
        }
    }
}

/// Resolves once every chunk committed so far has its vector committed too.
#[derive(Debug, Message)]
#[rtype(result = "Result<(), PipelineError>")]
pub struct AwaitVectors;

impl Handler<AwaitVectors> for SourceWriter {
    type Result = ResponseFuture<Result<(), PipelineError>>;

    fn handle(&mut self, _: AwaitVectors, ctx: &mut Context<Self>) -> Self::Result {
        // Tables that do not open make no vectors searchable: said now, not waited on.
        if let Some(why) = &self.cannot_open {
            let e = PipelineError::CannotOpen { id: self.id.clone(), why: why.clone() };
            return Box::pin(async move { Err(e) });
        }
        // A write that keeps failing (a full disk, a store refusing us) is said, not waited on:
        // the writer goes on trying, a one-shot `index` ends with why.
        if let Some(e) = self.failing.clone().filter(|_| self.failures >= TELL_AFTER) {
            return Box::pin(async move { Err(e) });
        }
        let (tx, rx) = oneshot::channel();
        self.vectors.wait(tx);
        self.pump(ctx);
        Box::pin(async move { rx.await.map_err(|_| PipelineError::Stopped(Part::Writer))? })
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
/// The resident index's snapshot is saved first when the tables moved since it was (the idle
/// upkeep saves it only after a quiet spell): the next start opens from it instead of reading
/// every table again (50 s for a million chunks).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Retire;

impl Handler<Retire> for SourceWriter {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Retire, _: &mut Context<Self>) -> Self::Result {
        self.retired = true;
        let (id, exact_up_to) = (self.id.clone(), self.opts.exact_vectors_up_to);
        let parts = match (self.store.clone(), self.resident.clone(), self.snapshot()) {
            (Some(store), Some(resident), Some(path)) => Some((store, resident, path)),
            _ => None,
        };
        AtomicResponse::new(Box::pin(
            async move {
                let Some((store, resident, path)) = parts else { return };
                if let Err(e) = janitor::save_snapshot(&store, &resident, &path, exact_up_to, false).await {
                    tracing::warn!("source `{id}`: the snapshot was not saved at shutdown (the next start reads the tables): {e}");
                }
            }
            .into_actor(self),
        ))
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
        self.vectors.tell_waiters(Ok(()));
        ctx.stop();
    }
}
