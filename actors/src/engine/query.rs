//! `QueryActor`: holds every source the owner answers from (each in memory: its resident index,
//! with pages, chunks with vectors, keyword and name indexes; LanceDB stays the store of record),
//! kept current by the writers after each commit, and publishes them to the [`HostCell`] the
//! read verbs answer from ([`crate::api`]'s `Reads`: one read path for the owner and a reader).
//! Here too: what an answer says of each source's freshness, and its `query_answered` event.

use crate::core::event::{QueryAnswered, TopResult};
use crate::core::status::StatusBoard;
use crate::engine::host::{HostCell, LiveSource};
use actix::prelude::*;
use cairn_index::{Resident, SourceStore};
use cairn_query::{AsOf, SearchResponse};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The query actor.
pub struct QueryActor {
    host: Arc<HostCell>,
}

impl std::fmt::Debug for QueryActor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueryActor").field("sources", &self.host.now().source_ids()).finish()
    }
}

impl QueryActor {
    /// Keeps `host` current.
    pub fn new(host: Arc<HostCell>) -> Self {
        Self { host }
    }
}

impl Actor for QueryActor {
    type Context = Context<Self>;
}

/// A source is open: serve it from its resident index (a writer that restarts sends this again
/// with the index it reloaded).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Serve {
    pub store: SourceStore,
    pub resident: Resident,
    /// The folder, for reading page bodies.
    pub root: Option<std::path::PathBuf>,
}

impl Handler<Serve> for QueryActor {
    type Result = ();

    fn handle(&mut self, msg: Serve, _: &mut Context<Self>) {
        self.host.update(|h| h.add(LiveSource { store: msg.store, resident: msg.resident, root: msg.root }));
    }
}

/// A source whose tables cannot be opened (`why`): answers say so (`source_damaged:ID`, or
/// `source_unreachable:ID` while its store does not answer), with
/// what it held when it last opened, until a [`Serve`] of it.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct CannotOpen {
    pub id: String,
    pub why: String,
}

impl Handler<CannotOpen> for QueryActor {
    type Result = ();

    fn handle(&mut self, msg: CannotOpen, _: &mut Context<Self>) {
        self.host.update(|h| h.cannot_open(msg.id, msg.why));
    }
}

/// Stop serving a source (it was removed from the database); whether it was served.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct StopServing(pub String);

impl Handler<StopServing> for QueryActor {
    type Result = bool;

    fn handle(&mut self, msg: StopServing, _: &mut Context<Self>) -> bool {
        self.host.update(|h| h.remove(&msg.0))
    }
}

/// A source's freshness in an answer, and the commit it reflects.
pub type FreshnessOf<'a> = Box<dyn Fn(&str) -> (Freshness, Option<AsOf>) + Send + Sync + 'a>;

/// Each source's freshness as this process's status board says now, for an answer about to be
/// searched, and the sources whose folder cannot be read now. Read before the search: a commit
/// that lands while it runs only makes the answer newer than its counts say (read after, a count
/// of 0 could speak for a commit the search did not see).
pub fn watched_before(status: &StatusBoard) -> (BTreeSet<String>, FreshnessOf<'static>) {
    let unavailable = status.unavailable();
    let (all, uncompared) = (status.all(), status.uncompared());
    let away = unavailable.keys().cloned().collect();
    let lookup = move |s: &str| {
        let st = all.iter().find(|st| st.source == s);
        let as_of = st
            .filter(|st| st.committed_unix_ms > 0)
            .map(|st| AsOf { version: st.version, committed_unix_ms: st.committed_unix_ms });
        let freshness = match (unavailable.get(s), st) {
            (Some(why), _) => Freshness::Unavailable(why.clone()),
            (None, Some(_)) if uncompared.contains(s) => scanning(s, "this process"),
            (None, Some(st)) => Freshness::Watched { pending: st.pending, lag_ms: st.lag_ms },
            (None, None) => Freshness::Unwatched,
        };
        (freshness, as_of)
    };
    (away, Box::new(lookup))
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
