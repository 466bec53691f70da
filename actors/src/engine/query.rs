//! `QueryActor`: owns every source's resident index (the source in memory: pages, chunks with
//! vectors, keyword and name indexes; LanceDB stays the store of record), kept current by the
//! writers after each commit. Answers `Search` with the full query engine (`cairn-query`), adds
//! each source's freshness (pending changes, lag), and records a `query_answered` event.
//!
//! Searches run as tasks on the runtime's worker threads (they embed the query and score in memory),
//! so the actor itself only routes; concurrent searches do not queue behind each other.

use crate::core::event::{EventKind, QUERY_STREAM, QueryAnswered, TopResult};
use crate::core::log::Emitter;
use crate::core::status::StatusBoard;
use crate::engine::host::{LiveSource, PageWithBody, QueryHost};
use actix::prelude::*;
use cairn_index::{Embedder, Resident, SourceStore};
use cairn_query::{Role, SearchRequest, SearchResponse, ServedBy};
use std::sync::Arc;

/// Mailbox bound: searches are routed at once (the work runs as tasks), so this only smooths
/// bursts; a caller beyond it waits.
const MAILBOX: usize = 64;

/// The query actor.
pub struct QueryActor {
    host: QueryHost,
    emit: Emitter,
    status: StatusBoard,
}

impl std::fmt::Debug for QueryActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryActor").field("sources", &self.host.source_ids()).finish()
    }
}

impl QueryActor {
    /// `embedder` answers query vectors (a separate model instance from the indexing one, so a
    /// query never waits behind a batch being embedded); `None` serves `fast` mode only.
    pub fn new(
        embedder: Option<Arc<dyn Embedder>>,
        emit: Emitter,
        status: StatusBoard,
        log_dir: Option<std::path::PathBuf>,
        parse: cairn_ingest::ParseOptions,
    ) -> Self {
        Self { host: QueryHost::new(embedder, log_dir).with_parse_options(parse), emit, status }
    }
}

impl Actor for QueryActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX);
    }
}

/// A source is open: serve it from its resident index (a writer that restarts sends this again
/// with the index it reloaded).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct AddSource {
    pub store: SourceStore,
    pub resident: Resident,
    /// The folder, for reading page bodies.
    pub root: Option<std::path::PathBuf>,
}

impl Handler<AddSource> for QueryActor {
    type Result = ();

    fn handle(&mut self, msg: AddSource, _: &mut Context<Self>) {
        self.host.add(LiveSource { store: msg.store, resident: msg.resident, root: msg.root });
    }
}

/// A source whose tables cannot be opened (`why`): answers say so (`source_damaged:ID`, or
/// `source_unreachable:ID` while its store does not answer), with
/// what it held when it last opened, until an [`AddSource`] of it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CannotOpen {
    pub id: String,
    pub why: String,
}

impl Handler<CannotOpen> for QueryActor {
    type Result = ();

    fn handle(&mut self, msg: CannotOpen, _: &mut Context<Self>) {
        self.host.cannot_open(msg.id, msg.why);
    }
}

/// Stop serving a source (it was removed from the database).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct RemoveSource(pub String);

impl Handler<RemoveSource> for QueryActor {
    type Result = bool;

    fn handle(&mut self, msg: RemoveSource, _: &mut Context<Self>) -> bool {
        self.host.remove(&msg.0)
    }
}

/// Answer a query.
#[derive(Debug, Message)]
#[rtype(result = "Result<SearchResponse, cairn_query::QueryError>")]
pub struct Search(pub SearchRequest);

impl Handler<Search> for QueryActor {
    type Result = ResponseFuture<Result<SearchResponse, cairn_query::QueryError>>;

    fn handle(&mut self, msg: Search, _: &mut Context<Self>) -> Self::Result {
        let req = msg.0;
        let (host, emit, status) = (self.host.clone(), self.emit.clone(), self.status.clone());
        Box::pin(async move {
            // The pending counts are read before the search: a commit that lands while it runs
            // only makes the answer newer than its counts say (read after, a count of 0 could
            // speak for a commit the search did not see).
            let unavailable = status.unavailable();
            let before = Before { status: status.all(), uncompared: status.uncompared() };
            let away: std::collections::BTreeSet<String> = unavailable.keys().cloned().collect();
            // On the runtime's worker threads: the query is embedded and scored in memory, and
            // concurrent searches do not queue behind each other.
            let task = tokio::spawn(async move { host.search(&req, &away).await });
            let mut resp = task.await.map_err(|e| cairn_query::QueryError::Internal(e.to_string()))??;
            add_freshness(&mut resp, &before, &unavailable);
            resp.served_by = Some(ServedBy::here(Role::Owner));
            emit.emit(QUERY_STREAM, vec![EventKind::QueryAnswered(Box::new(telemetry(&resp)))]).await;
            Ok(resp)
        })
    }
}

/// The sources' status as read before a search.
#[derive(Debug)]
pub struct Before {
    pub status: Vec<crate::core::status::SourceStatus>,
    /// Sources whose folder this process has not compared with the index yet.
    pub uncompared: std::collections::BTreeSet<String>,
}

/// What an answer says of a source whose folder its writer has not compared with the index yet
/// (it started, or took over, lately): changes made while nothing watched are not known.
pub fn scanning(id: &str, whose: &str) -> Freshness {
    Freshness::Behind {
        degraded: format!("scanning:{id}"),
        note: format!(
            "{whose} has not finished comparing `{id}`'s folder with the index since it started: changes made \
             while nothing watched it are not known yet; wait before creating a page it may hold"
        ),
    }
}

/// Each source's pending changes and lag (from `before`, as read before the search), and the
/// warning an agent must not miss.
pub fn add_freshness(
    resp: &mut SearchResponse,
    before: &Before,
    unavailable: &std::collections::BTreeMap<String, String>,
) {
    apply_freshness(resp, |s| {
        let st = before.status.iter().find(|st| st.source == s);
        let as_of = st
            .as_ref()
            .filter(|st| st.committed_unix_ms > 0)
            .map(|st| cairn_query::AsOf { version: st.version, committed_unix_ms: st.committed_unix_ms });
        let freshness = match (unavailable.get(s), st) {
            (Some(why), _) => Freshness::Unavailable(why.clone()),
            (None, Some(_)) if before.uncompared.contains(s) => scanning(s, "this process"),
            (None, Some(st)) => Freshness::Watched { pending: st.pending, lag_ms: st.lag_ms },
            (None, None) => Freshness::Unwatched,
        };
        (freshness, as_of)
    });
}

/// How current a source's part of an answer is.
#[derive(Debug, Clone, PartialEq)]
pub enum Freshness {
    /// A watcher in this process keeps it current: changes not yet searchable, and the age of
    /// the oldest.
    Watched { pending: u64, lag_ms: u64 },
    /// Nothing here watches it: edits since it was last indexed are not searchable.
    Unwatched,
    /// Its folder cannot be read (what is wrong and what to do): answered as last indexed.
    Unavailable(String),
    /// A reader following a live writer on another machine, caught up with what it committed.
    Followed,
    /// A reader behind its writer by more than its bound, or cut off from the store: the
    /// `degraded` entry and the note that says so.
    Behind { degraded: String, note: String },
}

/// Each source's freshness from `lookup`, and the warnings: pending changes while no result
/// certainly exists, unwatched sources, unavailable ones (`source_unavailable:ID` in `degraded`).
/// An answer over a source that is not watched or not available has no pending count: whether a
/// page is missing from it cannot be told.
pub fn apply_freshness(
    resp: &mut SearchResponse,
    lookup: impl Fn(&str) -> (Freshness, Option<cairn_query::AsOf>),
) {
    let (mut pending_total, mut unwatched, mut away) = (0, Vec::new(), Vec::new());
    for s in &mut resp.sources {
        let (freshness, as_of) = lookup(&s.source);
        s.as_of = as_of;
        match freshness {
            Freshness::Watched { pending, lag_ms } => {
                s.pending = Some(pending);
                s.lag_ms = Some(lag_ms);
                pending_total += pending;
            }
            Freshness::Followed => s.pending = Some(0),
            Freshness::Unwatched => unwatched.push(s.source.clone()),
            Freshness::Unavailable(why) => away.push((s.source.clone(), why)),
            Freshness::Behind { degraded, note } => {
                if !resp.degraded.contains(&degraded) {
                    resp.degraded.push(degraded);
                    resp.notes.push(note);
                }
                away.push((s.source.clone(), String::new()));
            }
        }
    }
    let exists = resp.results.iter().any(|r| r.create_safety == cairn_query::CreateSafety::Exists);
    let not_proof = if exists { "" } else { ", so this answer is not proof that no such page exists" };
    if !unwatched.is_empty() {
        resp.notes.push(format!(
            "no running `cairn watch` keeps source(s) {} current: edits to their folders since they were last \
             indexed are not searchable{not_proof}",
            unwatched.join(", "),
        ));
    }
    for (id, why) in away.iter().filter(|(_, why)| !why.is_empty()) {
        resp.degraded.push(format!("source_unavailable:{id}"));
        resp.notes.push(format!("{why}; its pages are answered as last indexed{not_proof}"));
    }
    // A source that cannot be opened may hold the page: no count proves anything.
    let damaged = resp
        .degraded
        .iter()
        .any(|d| d.starts_with("source_damaged:") || d.starts_with("source_unreachable:"));
    resp.pending_changes = (unwatched.is_empty() && away.is_empty() && !damaged).then_some(pending_total);
    if pending_total > 0 && !exists {
        resp.notes.push(format!(
            "{pending_total} change(s) are not searchable yet: this answer is not proof that no such page exists; \
             wait (flush) before creating one"
        ));
    }
}

/// The `query_answered` event of an answer.
pub fn telemetry(resp: &SearchResponse) -> QueryAnswered {
    QueryAnswered {
        query: resp.query.clone(),
        mode: resp.mode.to_string(),
        results: resp.results.len(),
        top: resp.results.first().map(|r| TopResult {
            source: r.source.clone(),
            slug: r.slug.clone(),
            base_score: r.base_score,
            score: r.score,
            evidence: r.evidence.iter().map(ToString::to_string).collect(),
            create_safety: r.create_safety.to_string(),
        }),
        candidates: resp.sources.iter().map(|s| (s.source.clone(), s.candidates)).collect(),
        degraded: resp.degraded.clone(),
        alias_collisions: resp.alias_collisions.len(),
        scoring_version: resp.scoring_version.to_string(),
        latency_ms: resp.latency_ms,
        pending_changes: resp.pending_changes,
        unix_ms: Some(crate::core::event::unix_ms()),
    }
}

/// Read one page.
#[derive(Debug, Message)]
#[rtype(result = "crate::Result<Option<PageWithBody>>")]
pub struct Get {
    pub source: String,
    pub slug: String,
}

impl Handler<Get> for QueryActor {
    type Result = ResponseFuture<crate::Result<Option<PageWithBody>>>;

    fn handle(&mut self, msg: Get, _: &mut Context<Self>) -> Self::Result {
        let host = self.host.clone();
        Box::pin(async move { host.get(&msg.source, &msg.slug).await })
    }
}

/// Where one page stands at every layer for a request (`cairn diagnose`).
#[derive(Debug, Message)]
#[rtype(result = "Result<cairn_query::Diagnosis, cairn_query::QueryError>")]
pub struct Diagnose {
    pub request: SearchRequest,
    pub source: String,
    pub slug: String,
}

impl Handler<Diagnose> for QueryActor {
    type Result = ResponseFuture<Result<cairn_query::Diagnosis, cairn_query::QueryError>>;

    fn handle(&mut self, msg: Diagnose, _: &mut Context<Self>) -> Self::Result {
        let host = self.host.clone();
        Box::pin(async move {
            let task = tokio::spawn(async move { host.diagnose(&msg.request, &msg.source, &msg.slug).await });
            task.await.map_err(|e| cairn_query::QueryError::Internal(e.to_string()))?
        })
    }
}

/// A page's links both ways.
#[derive(Debug, Message)]
#[rtype(result = "crate::Result<Option<cairn_query::links::Links>>")]
pub struct Links {
    pub source: String,
    pub slug: String,
}

impl Handler<Links> for QueryActor {
    type Result = crate::Result<Option<cairn_query::links::Links>>;

    fn handle(&mut self, msg: Links, _: &mut Context<Self>) -> Self::Result {
        self.host.links(&msg.source, &msg.slug)
    }
}

/// The sources as they are now, for a long job that runs in its caller's task (off the actor,
/// and dropped with its caller: see [`crate::engine::host::duplicates_job`]).
#[derive(Debug, Message)]
#[rtype(result = "std::sync::Arc<QueryHost>")]
pub struct HostNow;

impl Handler<HostNow> for QueryActor {
    type Result = MessageResult<HostNow>;

    fn handle(&mut self, _: HostNow, _: &mut Context<Self>) -> Self::Result {
        MessageResult(std::sync::Arc::new(self.host.clone()))
    }
}
