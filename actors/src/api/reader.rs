//! A reader's answers: this process does not write the database (no process owns it, or the
//! writer is another process, maybe on another machine), so it holds the tables in memory,
//! following the writer's commits where there is one to follow ([`crate::engine::follow`]), and answers
//! the `read` verbs from them. The `write` verbs need the writer.

use super::reads::Reads;
use super::{AddSource, Flush, Handle, Stats, Status};
use crate::api::ipc::OwnerInfo;
use crate::core::config::Config;
use crate::engine::follow::Follower;
use crate::{Error, Result};
use cairn_query::{Role, ServedBy};
use futures::future::BoxFuture;
use std::sync::Arc;

/// A process that reads a database another process writes (or none does).
#[derive(Debug)]
pub struct ReaderApi {
    follower: Arc<Follower>,
    config: Config,
    /// When this reader serves its machine's other processes: itself, as the lock file says.
    local: Option<OwnerInfo>,
    /// Where folders given to this machine's reader go (it stands by to write them).
    told: Option<tokio::sync::mpsc::UnboundedSender<crate::core::config::SourceConfig>>,
    /// On an object store: its answers' telemetry shipped to the store (by its own task for a
    /// long-lived reader, which ends once the reader is dropped; at once for a one-shot one).
    outbox: Option<(crate::replication::shipping::Outbox, Option<tokio::task::JoinHandle<()>>)>,
}

impl ReaderApi {
    pub fn new(follower: Arc<Follower>, config: Config, local: Option<OwnerInfo>) -> Self {
        let outbox = follower.remote().map(|r| {
            let outbox = crate::replication::shipping::Outbox::new(
                r.clone(),
                crate::replication::shipping::machine_name(&config.paths().state()),
            );
            let task = local.is_some().then(|| outbox.keep_shipping());
            (outbox, task)
        });
        Self { follower, config, local, told: None, outbox }
    }

    /// This process stops reading (it stops, or takes over as the writer): what waits is
    /// shipped, and it is taken off the store's list of readers.
    pub async fn leave(&self) {
        if let Some((o, _)) = &self.outbox {
            o.ship().await;
        }
        self.follower.stop_saying().await;
    }

    /// Folders given to this reader (`add_source`) are sent to `told`: the machine's process
    /// stands by to write them when the writer lease is free.
    pub fn taking_folders(
        self,
        told: tokio::sync::mpsc::UnboundedSender<crate::core::config::SourceConfig>,
    ) -> Self {
        Self { told: Some(told), ..self }
    }

    pub fn follower(&self) -> &Arc<Follower> {
        &self.follower
    }

    /// What a verb that needs the writer says here.
    pub fn needs_owner(&self, verb: &str) -> Error {
        match self.follower.writer() {
            Some(w) => Error::NotWriter(format!(
                "{} is written by {w} since {}; this process only reads it, so it cannot `{verb}`: run that where the writer is (or stop it, and this machine's `cairn watch` takes over)",
                self.config.db,
                crate::core::event::utc(w.since_unix_ms)
            )),
            None => Error::NotWriter(format!(
                "no cairn process writes {} now, so nothing can answer `{verb}`: start `cairn watch` (or `cairn index`) on it",
                self.config.db
            )),
        }
    }
}

impl Reads for ReaderApi {
    fn host(&self) -> Arc<crate::engine::host::QueryHost> {
        self.follower.host()
    }

    /// This process, as the reader that answered.
    fn served_by(&self) -> ServedBy {
        ServedBy { writer: self.follower.writer(), ..ServedBy::here(Role::Reader) }
    }

    fn asked(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.follower.asked())
    }

    fn freshness_before(
        &self,
    ) -> (std::collections::BTreeSet<String>, crate::engine::query::FreshnessOf<'_>) {
        self.follower.freshness_before()
    }

    fn note(&self, answer: &mut cairn_query::SearchResponse) {
        if self.follower.writer().is_none() && self.local.is_none() {
            answer.notes.push(format!(
                "no cairn process owns {}: answered read-only by this process (pid {}) from the tables",
                self.config.db,
                std::process::id()
            ));
        }
    }

    /// Journaled like the owner's answers (`cairn stats` counts them): in this machine's event
    /// log, and shipped to the store.
    fn answered(&self, answered: crate::core::event::QueryAnswered) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let kind = crate::EventKind::QueryAnswered(Box::new(answered));
            if let Some((outbox, task)) = &self.outbox {
                let event = crate::Event {
                    seq: 0,
                    ts: 0,
                    source: crate::core::event::QUERY_STREAM.into(),
                    kind: kind.clone(),
                };
                if let Ok(mut line) = serde_json::to_vec(&event) {
                    line.push(b'\n');
                    crate::core::log::LineSink::push(outbox, &line);
                }
                if task.is_none() {
                    outbox.ship().await;
                }
            }
            if let Some(dir) = self.config.event_log_dir()
                && let Err(e) =
                    crate::core::log::append_from_outside(&dir, crate::core::event::QUERY_STREAM, kind)
            {
                tracing::warn!("event log {}: {e}; this answer is not journaled", dir.display());
            }
        })
    }
}

impl Handle<Status> for ReaderApi {
    fn handle(&self, _: Status) -> BoxFuture<'_, Result<crate::Status>> {
        Box::pin(async move {
            Ok(crate::Status {
                pid: std::process::id(),
                role: Role::Reader,
                owner: self.local.clone(),
                writer: self.follower.writer(),
                memory: crate::core::status::Memory::now(),
                clients: Vec::new(),
                sources: self.follower.status(),
                readers: crate::replication::readers::listed(self.follower.remote()).await,
            })
        })
    }
}

impl Handle<Stats> for ReaderApi {
    fn handle(&self, v: Stats) -> BoxFuture<'_, Result<crate::ops::stats::Stats>> {
        Box::pin(async move {
            let log = self.config.event_log_dir();
            crate::ops::stats::collect(&self.config, log.as_deref(), v.days).await
        })
    }
}

impl Handle<Flush> for ReaderApi {
    /// A reader's flush: everything the writer has committed so far is here.
    fn handle(&self, _: Flush) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if !self.follower.follows() {
                return Err(self.needs_owner("flush"));
            }
            self.follower.step().await.map_err(|e| Error::Pipeline(format!("{}: {e}", self.config.db)))
        })
    }
}

impl Handle<AddSource> for ReaderApi {
    /// A folder given to this machine's reader: remembered as given here, and written once this
    /// process takes the writer lease (it stands by for it).
    fn handle(&self, v: AddSource) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            match &self.told {
                Some(told) => told.send(v.source).map_err(|_| Error::Stopped),
                None => Err(self.needs_owner("add_source")),
            }
        })
    }
}
