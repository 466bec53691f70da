//! A reader's answers: no process owns the database, so this one reads its tables into memory,
//! read-only, and answers the `read` verbs from them. The `write` verbs need an owner.

use super::{Diagnose, Duplicates, Get, Handle, Links, Search, Stats, Status};
use crate::config::Config;
use crate::host::QueryHost;
use crate::{Error, Result};
use cairn_query::{Role, ServedBy};
use futures::future::BoxFuture;
use std::sync::Arc;

/// A process that reads a database no process owns.
#[derive(Debug)]
pub struct ReaderApi {
    host: Arc<QueryHost>,
    config: Config,
}

impl ReaderApi {
    pub fn new(host: QueryHost, config: Config) -> Self {
        Self { host: Arc::new(host), config }
    }

    /// What a verb that needs the owner says when there is none.
    pub fn needs_owner(&self, verb: &str) -> Error {
        Error::Config(format!(
            "no cairn process owns {} now, so nothing can answer `{verb}`: start `cairn watch` (or `cairn index`) on it",
            self.config.db
        ))
    }
}

/// This process, as the reader that answered.
fn served_by() -> ServedBy {
    ServedBy { pid: std::process::id(), role: Role::Reader }
}

impl Handle<Search> for ReaderApi {
    fn handle(&self, v: Search) -> BoxFuture<'_, Result<cairn_query::SearchResponse>> {
        Box::pin(async move {
            let h = &self.host;
            let mut resp = h.search(&v.request, &h.unavailable_ids()).await?;
            resp.served_by = Some(served_by());
            crate::query::apply_freshness(&mut resp, |id| h.freshness(id));
            resp.notes.push(format!(
                "no cairn process owns {}: answered read-only by this process (pid {}) from the tables",
                self.config.db,
                std::process::id()
            ));
            // Journaled like the owner's answers (`cairn stats` counts it).
            if let Some(dir) = self.config.event_log_dir() {
                let kind = crate::EventKind::QueryAnswered(Box::new(crate::query::telemetry(&resp)));
                if let Err(e) = crate::log::append_from_outside(&dir, crate::event::QUERY_STREAM, kind) {
                    tracing::warn!("event log {}: {e}; this answer is not journaled", dir.display());
                }
            }
            Ok(resp)
        })
    }
}

impl Handle<Get> for ReaderApi {
    fn handle(&self, v: Get) -> BoxFuture<'_, Result<Option<crate::PageWithBody>>> {
        Box::pin(async move {
            let page = self.host.get(&v.source, &v.slug).await.map_err(Error::Pipeline)?;
            Ok(page.map(|p| crate::PageWithBody { served_by: Some(served_by()), ..p }))
        })
    }
}

impl Handle<Diagnose> for ReaderApi {
    fn handle(&self, v: Diagnose) -> BoxFuture<'_, Result<cairn_query::Diagnosis>> {
        Box::pin(async move {
            let d = self.host.diagnose(&v.request, &v.source, &v.slug).await?;
            Ok(cairn_query::Diagnosis { served_by: Some(served_by()), ..d })
        })
    }
}

impl Handle<Links> for ReaderApi {
    fn handle(&self, v: Links) -> BoxFuture<'_, Result<Option<cairn_query::links::Links>>> {
        Box::pin(async move { self.host.links(&v.source, &v.slug).map_err(Error::Config) })
    }
}

impl Handle<Duplicates> for ReaderApi {
    fn handle(&self, v: Duplicates) -> BoxFuture<'_, Result<Vec<cairn_query::duplicates::DuplicateGroup>>> {
        let host = self.host.clone();
        Box::pin(async move {
            Ok(tokio::task::spawn_blocking(move || host.duplicates(v.threshold)).await.unwrap_or_default())
        })
    }
}

impl Handle<Status> for ReaderApi {
    fn handle(&self, _: Status) -> BoxFuture<'_, Result<crate::Status>> {
        Box::pin(async move {
            Ok(crate::Status {
                pid: std::process::id(),
                role: Role::Reader,
                owner: None,
                memory: crate::status::Memory::now(),
                clients: Vec::new(),
                sources: self.host.status(),
            })
        })
    }
}

impl Handle<Stats> for ReaderApi {
    fn handle(&self, v: Stats) -> BoxFuture<'_, Result<crate::stats::Stats>> {
        Box::pin(async move {
            let log = self.config.event_log_dir();
            crate::stats::collect(&self.config, log.as_deref(), v.days).await
        })
    }
}
