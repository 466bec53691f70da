//! The owner's answers: from its pipeline (watchers, writers, the resident indexes), its event
//! log and its socket's clients.

use super::reads::Reads;
use super::{AddSource, Flush, Handle, Reconcile, Reindex, RemoveSource, Stats, Status};
use crate::api::ipc::{Hello, OwnerInfo};
use crate::core::config::Config;
use crate::engine::system::Pipeline;
use crate::{ReconcileReport, Result};
use cairn_query::{Role, ServedBy};
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The clients connected to the owner's socket, by connection.
pub type Clients = Arc<Mutex<BTreeMap<u64, Hello>>>;

/// The process that writes a database, as the API sees it.
#[derive(Debug)]
pub struct OwnerApi {
    pipeline: Pipeline,
    config: Config,
    info: OwnerInfo,
    clients: Clients,
    writer: cairn_query::Writer,
    /// The database's object store (none when it is local).
    remote: Option<crate::replication::remote::Remote>,
}

impl OwnerApi {
    /// The writer `info` describes (`clients`: its socket's connections), with its pipeline.
    pub fn new(pipeline: Pipeline, config: Config, info: OwnerInfo, clients: Clients) -> Self {
        let writer = cairn_query::Writer {
            host: crate::replication::lease::host_name(),
            pid: info.pid,
            purpose: info.purpose.clone(),
            since_unix_ms: info.started_unix_ms,
            lock: String::new(),
            machine: crate::replication::machine::machine().to_string(),
        };
        let remote = crate::replication::remote::Remote::of(&config.db, &config.storage).ok().flatten();
        Self { pipeline, config, info, clients, writer, remote }
    }

    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    pub fn info(&self) -> &OwnerInfo {
        &self.info
    }

    /// Where the socket's connections say who they are.
    pub fn clients(&self) -> &Clients {
        &self.clients
    }
}

impl Reads for OwnerApi {
    fn host(&self) -> std::sync::Arc<crate::engine::host::QueryHost> {
        self.pipeline.host()
    }

    /// This process, as the writer that answered.
    fn served_by(&self) -> ServedBy {
        ServedBy { writer: Some(self.writer.clone()), ..ServedBy::here(Role::Owner) }
    }

    fn runtime(&self) -> tokio::runtime::Handle {
        self.pipeline.runtime().clone()
    }

    fn freshness_before(
        &self,
    ) -> (std::collections::BTreeSet<String>, crate::engine::query::FreshnessOf<'_>) {
        self.pipeline.freshness_before()
    }

    fn answered(&self, answered: crate::core::event::QueryAnswered) -> BoxFuture<'_, ()> {
        Box::pin(self.pipeline.answered(answered))
    }
}

impl Handle<Status> for OwnerApi {
    fn handle(&self, _: Status) -> BoxFuture<'_, Result<crate::Status>> {
        let clients = self.clients.lock().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        Box::pin(async move {
            Ok(crate::Status {
                pid: std::process::id(),
                role: Role::Owner,
                owner: Some(self.info.clone()),
                writer: Some(self.writer.clone()),
                memory: self.pipeline.memory().await,
                clients,
                sources: self.pipeline.status(),
                readers: crate::replication::readers::listed(self.remote.as_ref()).await,
            })
        })
    }
}

impl Handle<Stats> for OwnerApi {
    fn handle(&self, v: Stats) -> BoxFuture<'_, Result<crate::ops::stats::Stats>> {
        Box::pin(async move {
            let log = self.config.event_log_dir();
            crate::ops::stats::collect(&self.config, log.as_deref(), v.days).await
        })
    }
}

impl Handle<Flush> for OwnerApi {
    fn handle(&self, v: Flush) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.pipeline.flush_marked(true, v.vectors, v.token))
    }
}

impl Handle<AddSource> for OwnerApi {
    fn handle(&self, v: AddSource) -> BoxFuture<'_, Result<()>> {
        Box::pin(self.pipeline.add_source(v.source))
    }
}

impl Handle<RemoveSource> for OwnerApi {
    fn handle(&self, v: RemoveSource) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.pipeline.remove_source(&v.id, v.forget).await })
    }
}

impl Handle<Reindex> for OwnerApi {
    fn handle(&self, v: Reindex) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move { self.pipeline.reindex(&v.id).await })
    }
}

impl Handle<Reconcile> for OwnerApi {
    fn handle(&self, v: Reconcile) -> BoxFuture<'_, Result<ReconcileReport>> {
        Box::pin(async move { self.pipeline.reconcile(&v.id, v.allow_removals).await })
    }
}
