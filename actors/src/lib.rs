//! `cairn-actors`: the actix system that keeps every source's tables in step with its folder,
//! journals every step as an event, and answers queries; [`Cairn`] is its handle.
//!
//! ```text
//! notify ─▶ Watcher ─▶ Parser (SyncArbiter) ─▶ SourceWriter ─▶ EmbedWorker (SyncArbiter) ─▶ LanceDB
//!            (debounce, scans)                  (batches, commits)                           │
//!  Cairn::search ─▶ QueryActor (resident indexes) ◀──── each committed batch ────────────────┘
//!                         every step ─▶ EventLog (JSON lines) ─▶ subscribers
//! ```
//!
//! It owns threads, queues, supervision, shutdown and replay. It does not own parsing
//! (`cairn-ingest`), storage or the model (`cairn-index`) or ranking (`cairn-query`).

pub mod config;
pub mod event;
pub mod history;
pub mod log;
pub mod published;
pub mod query;
pub mod replay;
pub mod status;
mod system;
pub mod watcher;
pub mod workers;
pub mod writer;

pub use cairn_query::{Mode, SearchRequest, SearchResponse};
pub use config::{Config, ModelConfig, SourceConfig};
pub use event::{Event, EventKind};
pub use query::PageWithBody;
pub use status::SourceStatus;
pub use system::{Cairn, Embedders, Error, Result};
