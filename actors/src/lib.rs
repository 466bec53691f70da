//! `cairn-actors`: the actix system that keeps every source's tables in step with its folder,
//! journals every step as an event, and answers queries; [`Cairn`] is its handle.
//!
//! ```text
//! notify ─▶ Watcher ─▶ Parser (SyncArbiter) ─▶ SourceWriter ─▶ LanceDB: pages, then vectors
//!            (debounce, scans)  (poison book)     │  ▲ (two phases; keeps the resident index)
//!                                                 ▼  │
//!                                    EmbedScheduler (one model thread; edits first, sources in turn)
//!  Cairn::search ─▶ QueryActor (QueryHost: resident indexes, kept current by the writers)
//!                         every step ─▶ EventLog (JSON lines) ─▶ subscribers
//! ```
//!
//! One process owns a database ([`Cairn`] as owner: the lock, the pipeline, the socket); every
//! other process on it is a client of that owner ([`Cairn`] as client).
//!
//! It owns threads, queues, supervision, shutdown, ownership and replay. It does not own parsing
//! (`cairn-ingest`), storage or the model (`cairn-index`) or ranking (`cairn-query`).

pub mod api;
mod cairn;
pub mod core;
pub mod engine;
pub mod ops;
pub mod replication;
pub mod roles;

pub use crate::core::config::{Config, Limits, ModelConfig, SourceConfig};
pub use crate::core::error::{Error, PipelineError, Result};
pub use crate::core::event::{Event, EventKind};
pub use crate::core::status::SourceStatus;
pub use api::ipc::Status;
pub use cairn::{Cairn, OpenOptions};
pub use cairn_query::Role;
pub use cairn_query::{Mode, SearchRequest, SearchResponse};
pub use engine::host::{PageWithBody, QueryHost};
pub use engine::system::{Embedders, Pipeline};
pub use engine::watcher::ReconcileReport;
pub use roles::local::LeaseWait;
