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
pub mod config;
pub mod event;
pub mod host;
pub mod ops;
pub mod ownership;
pub mod pipeline;
pub mod status;

pub use cairn::{Cairn, OpenOptions, Status};
pub use cairn_query::Role;
pub use cairn_query::{Mode, SearchRequest, SearchResponse};
pub use config::{Config, Limits, ModelConfig, SourceConfig};
pub use event::{Event, EventKind};
pub use host::{PageWithBody, QueryHost};
pub use ownership::local::LeaseWait;
pub use pipeline::error::PipelineError;
pub use pipeline::system::{Embedders, Error, Pipeline, Result};
pub use pipeline::watcher::ReconcileReport;
pub use status::SourceStatus;
