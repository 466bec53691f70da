//! `QueryActor`: owns every source's resident index (the source in memory: pages, chunks with
//! vectors, keyword and name indexes; LanceDB stays the store of record), kept current by the
//! writers after each commit. Answers `Search` with the full query engine (`cairn-query`), adds
//! each source's freshness (pending changes, lag), and records a `query_answered` event.
//!
//! Searches run as tasks on the runtime's worker threads (they embed the query and score in memory),
//! so the actor itself only routes; concurrent searches do not queue behind each other.

use crate::event::{EventKind, QUERY_STREAM, QueryAnswered, TopResult};
use crate::log::Emitter;
use crate::status::StatusBoard;
use actix::prelude::*;
use cairn_index::{Embedder, PageRecord, Prepared, Resident, SourceStore};
use cairn_query::{SearchRequest, SearchResponse};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Mailbox bound: searches are routed at once (the work runs as tasks), so this only smooths
/// bursts; a caller beyond it waits.
const MAILBOX: usize = 64;

/// A source as the query engine reads it: in memory (its resident index, kept current by its
/// writer), with the store for reads outside the query path (`get`, `diagnose`'s ingest state).
#[derive(Debug, Clone)]
pub struct LiveSource {
    store: SourceStore,
    resident: Resident,
    root: Option<std::path::PathBuf>,
}

/// The query actor.
pub struct QueryActor {
    sources: BTreeMap<String, LiveSource>,
    embedder: Option<Arc<dyn Embedder>>,
    emit: Emitter,
    status: StatusBoard,
    /// The event log, for the ingest history `diagnose` reports.
    log_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for QueryActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryActor").field("sources", &self.sources.keys().collect::<Vec<_>>()).finish()
    }
}

impl QueryActor {
    /// `embedder` answers query vectors (a separate model instance from the indexing workers, so
    /// a query never waits behind a batch being embedded); `None` serves `fast` mode only.
    pub fn new(
        embedder: Option<Arc<dyn Embedder>>,
        emit: Emitter,
        status: StatusBoard,
        log_dir: Option<std::path::PathBuf>,
    ) -> Self {
        Self { sources: BTreeMap::new(), embedder, emit, status, log_dir }
    }
}

impl Actor for QueryActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX);
    }
}

/// A source's tables are open: load them into memory and serve them (a writer that restarts sends
/// this again, so whatever it committed before it failed is read back from the tables).
#[derive(Debug, Message)]
#[rtype(result = "Result<(), String>")]
pub struct AddSource {
    pub store: SourceStore,
    /// The folder, for reading page bodies.
    pub root: Option<std::path::PathBuf>,
}

impl Handler<AddSource> for QueryActor {
    type Result = AtomicResponse<Self, Result<(), String>>;

    fn handle(&mut self, msg: AddSource, _: &mut Context<Self>) -> Self::Result {
        let (store, root) = (msg.store, msg.root);
        let fut = async move {
            let resident = Resident::load(&store).await.map_err(|e| e.to_string())?;
            Ok::<_, String>((store, resident))
        };
        AtomicResponse::new(Box::pin(actix::fut::wrap_future::<_, Self>(fut).map(|res, act, _| {
            let (store, resident) = res?;
            let id = store.id().to_string();
            act.sources.insert(id, LiveSource { store, resident, root });
            Ok(())
        })))
    }
}

/// A writer committed this batch (tokenised by the writer, so applying it is quick).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Committed {
    pub source: String,
    pub batch: Prepared,
}

impl Handler<Committed> for QueryActor {
    type Result = ();

    fn handle(&mut self, msg: Committed, _: &mut Context<Self>) {
        if let Some(src) = self.sources.get(&msg.source) {
            src.resident.apply(msg.batch);
        }
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
        let sources: Vec<LiveSource> = self.sources.values().cloned().collect();
        let (embedder, emit, status) = (self.embedder.clone(), self.emit.clone(), self.status.clone());
        Box::pin(async move {
            let task = tokio::spawn(async move {
                let refs: Vec<&Resident> = sources.iter().map(|s| &s.resident).collect();
                cairn_query::search(&refs, embedder.as_deref(), &req).await
            });
            let mut resp = task.await.map_err(|e| cairn_query::QueryError::Internal(e.to_string()))??;
            add_freshness(&mut resp, &status);
            emit.emit(QUERY_STREAM, vec![EventKind::QueryAnswered(Box::new(telemetry(&resp)))]).await;
            Ok(resp)
        })
    }
}

/// Each source's pending changes and lag, and the warning an agent must not miss.
pub fn add_freshness(resp: &mut SearchResponse, status: &StatusBoard) {
    apply_freshness(resp, |s| status.get(s).map(|st| (st.pending, st.lag_ms)));
}

/// Each source's pending changes and lag from `lookup` (`None`: nothing watches that source),
/// and the warnings: pending changes while no result certainly exists, and unwatched sources.
pub fn apply_freshness(resp: &mut SearchResponse, lookup: impl Fn(&str) -> Option<(u64, u64)>) {
    let (mut pending_total, mut unwatched) = (0, Vec::new());
    for s in &mut resp.sources {
        match lookup(&s.source) {
            Some((pending, lag)) => {
                s.pending = Some(pending);
                s.lag_ms = Some(lag);
                pending_total += pending;
            }
            None => unwatched.push(s.source.as_str()),
        }
    }
    let exists = resp.results.iter().any(|r| r.create_safety == cairn_query::CreateSafety::Exists);
    if !unwatched.is_empty() {
        resp.notes.push(format!(
            "no running `cairn watch` keeps source(s) {} current: edits to their folders since they were last \
             indexed are not searchable{}",
            unwatched.join(", "),
            if exists { "" } else { ", so this answer is not proof that no such page exists" }
        ));
    }
    resp.pending_changes = unwatched.is_empty().then_some(pending_total);
    if pending_total > 0 && !exists {
        resp.notes.push(format!(
            "{pending_total} change(s) are not searchable yet: this answer is not proof that no such page exists; \
             wait (flush) before creating one"
        ));
    }
}

/// The `query_answered` event of an answer.
pub fn telemetry(resp: &SearchResponse) -> QueryAnswered {
    let name = |v: &dyn erased::Named| v.name();
    QueryAnswered {
        query: resp.query.clone(),
        mode: format!("{:?}", resp.mode).to_lowercase(),
        results: resp.results.len(),
        top: resp.results.first().map(|r| TopResult {
            source: r.source.clone(),
            slug: r.slug.clone(),
            base_score: r.base_score,
            score: r.score,
            evidence: r.evidence.iter().map(|e| name(e)).collect(),
            create_safety: name(&r.create_safety),
        }),
        candidates: resp.sources.iter().map(|s| (s.source.clone(), s.candidates)).collect(),
        degraded: resp.degraded.clone(),
        alias_collisions: resp.alias_collisions.len(),
        scoring_version: resp.scoring_version.to_string(),
        latency_ms: resp.latency_ms,
        pending_changes: resp.pending_changes,
        unix_ms: Some(crate::published::unix_ms()),
    }
}

mod erased {
    /// The serde name of a unit enum value (`alias_hit`, `exists`, …).
    pub trait Named {
        fn name(&self) -> String;
    }
    impl<T: serde::Serialize> Named for T {
        fn name(&self) -> String {
            serde_json::to_value(self).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
        }
    }
}

/// A stored page with its body (the chunks' text in order).
#[derive(Debug, Clone, serde::Serialize)]
pub struct PageWithBody {
    #[serde(flatten)]
    pub page: PageRecord,
    pub source: String,
    pub body: String,
}

/// Read one page.
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<PageWithBody>, String>")]
pub struct Get {
    pub source: String,
    pub slug: String,
}

impl Handler<Get> for QueryActor {
    type Result = ResponseFuture<Result<Option<PageWithBody>, String>>;

    fn handle(&mut self, msg: Get, _: &mut Context<Self>) -> Self::Result {
        let src = self.sources.get(&msg.source).cloned();
        let known: Vec<String> = self.sources.keys().cloned().collect();
        Box::pin(async move {
            let Some(src) = src else {
                return Err(format!("unknown source `{}`; sources: {}", msg.source, known.join(", ")));
            };
            let Some(page) = src.store.page(&msg.slug).await.map_err(|e| e.to_string())? else {
                return Ok(None);
            };
            // The file is the truth; the stored chunks (which overlap) only when it is unreadable.
            let file = match &src.root {
                Some(r) => tokio::fs::read_to_string(r.join(&page.path)).await.ok(),
                None => None,
            };
            let body = match file {
                Some(text) => cairn_ingest::frontmatter::split(&text).body.to_string(),
                None => {
                    let chunks = src.store.page_chunks(&msg.slug).await.map_err(|e| e.to_string())?;
                    chunks.into_iter().map(|c| c.text).collect::<Vec<_>>().join("\n\n")
                }
            };
            Ok(Some(PageWithBody { page, source: msg.source, body }))
        })
    }
}

/// Where one page stands at every layer for a query (`cairn diagnose`).
#[derive(Debug, Message)]
#[rtype(result = "Result<cairn_query::Diagnosis, cairn_query::QueryError>")]
pub struct Diagnose {
    pub query: String,
    pub source: String,
    pub slug: String,
}

impl Handler<Diagnose> for QueryActor {
    type Result = ResponseFuture<Result<cairn_query::Diagnosis, cairn_query::QueryError>>;

    fn handle(&mut self, msg: Diagnose, _: &mut Context<Self>) -> Self::Result {
        let sources: Vec<LiveSource> = self.sources.values().cloned().collect();
        let (embedder, log_dir) = (self.embedder.clone(), self.log_dir.clone());
        Box::pin(async move {
            let task = tokio::spawn(async move {
                let refs: Vec<&Resident> = sources.iter().map(|s| &s.resident).collect();
                let d = cairn_query::diagnose(&refs, embedder.as_deref(), &msg.query, &msg.source, &msg.slug)
                    .await?;
                let Some(src) = sources.iter().find(|s| s.store.id() == msg.source) else { return Ok(d) };
                let ingest =
                    crate::history::ingest_state(&src.store, log_dir.as_deref(), &msg.slug, d.page.as_ref())
                        .await;
                Ok(d.with_ingest(ingest))
            });
            task.await.map_err(|e| cairn_query::QueryError::Internal(e.to_string()))?
        })
    }
}
