//! `cairn-index`: the embedding model and the storage of every source.
//!
//! It owns the [`Embedder`] trait and its ONNX Runtime implementation (tokenizer, batching,
//! pooling), provisioning of the model and runtime files from the package registries, and
//! per-source LanceDB tables (feature `storage`, on by default). It does not own threads or actors (`cairn-actors`) or
//! ranking (`cairn-query`).

pub mod embed;
mod error;
pub mod fault;
pub mod memory;
pub mod provision;
#[cfg(feature = "keyword")]
pub mod resident;
#[cfg(feature = "storage")]
pub mod schema;
#[cfg(feature = "storage")]
pub mod store;
#[cfg(feature = "storage")]
pub mod vectors;

pub use embed::{Embedded, Embedder, OrtEmbedder, OrtOptions, QueryCache, RunTimes, cosine};
pub use error::{Error, Result};
pub use provision::{ModelFiles, provision, provision_with};
#[cfg(feature = "storage")]
pub use resident::{Prepared, Resident, ResidentIndex};
#[cfg(feature = "storage")]
pub use store::{
    ChunkHit, Database, FRAGMENT_ROWS, Json, KEY_INDEXES, Loaded, Manifest, PageNames, PageRecord, PageState,
    PageWrite, PruneStats, SourceInfo, SourceStore, StorageOptions, StoredChunk, VectorKey, WriteBatch,
};
