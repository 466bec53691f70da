//! `cairn-query`: the retrieval layers, as small functions tested on hand-built candidates
//! ([`layers`]), and the pipeline that runs them over sources ([`search()`]): per-source gather,
//! fusion, max-pool, title-phrase boost, exact lookup and alias hop, evidence. It owns ranking;
//! it does not own storage (`cairn-index`) or threads (`cairn-actors`).

pub mod check;
pub mod diagnose;
pub mod duplicates;
mod error;
mod filter;
pub mod layers;
pub mod links;
pub mod metrics;
pub mod reader;
pub mod search;
pub mod shape;

pub use diagnose::{Diagnosis, IngestState, diagnose};
pub use error::{QueryError, Result};
pub use filter::{Allowed, Filter, PageFilter, day_start_ms};
pub use layers::{CreateSafety, Evidence, ExactKind};
pub use reader::SourceReader;
pub use search::{
    Ablation, AsOf, Health, Mode, Role, SearchRequest, SearchResponse, SearchResult, ServedBy, SourceHealth,
    Stale, Writer, mark_stale, note_vectors_pending, search,
};

#[cfg(test)]
mod tests;
