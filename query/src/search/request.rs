//! What a search is asked: its query, mode, limit, sources and filters.

use crate::error::{QueryError, Result};
use crate::filter::Filter;
use cairn_index::resident::Fields;

/// How much work a call does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Keyword, title and alias arms; no embedding.
    Fast,
    /// All arms.
    #[default]
    Balanced,
    /// All arms with larger per-source pools.
    Thorough,
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::layers::words(self, f)
    }
}

impl std::str::FromStr for Mode {
    type Err = QueryError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "fast" => Ok(Mode::Fast),
            "balanced" => Ok(Mode::Balanced),
            "thorough" => Ok(Mode::Thorough),
            other => Err(QueryError::BadMode(other.into())),
        }
    }
}

/// A search call.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SearchRequest {
    pub query: String,
    /// Sources to search (empty: all).
    #[serde(default)]
    pub sources: Vec<String>,
    #[serde(default)]
    pub mode: Mode,
    #[serde(default = "default_limit")]
    pub limit: usize,
    #[serde(default)]
    pub explain: bool,
    /// Restrictions: tags, folders, types, dates.
    #[serde(default, skip_serializing_if = "Filter::is_empty")]
    pub filter: Filter,
    /// Evaluation baseline only: one candidate pool of K pages for all sources together (each
    /// arm ranked by its raw scores across sources, fused, cut to K), as a single shared index
    /// would do: the failure per-source gather exists to prevent.
    #[serde(default)]
    pub pooled_baseline: bool,
    /// Evaluation baseline only: no names learnt from the vault (what `cairn eval --links`
    /// measures against).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_learnt_names: bool,
    /// Evaluation baseline only: no subject pages (pages a phrase of the query names are not
    /// lifted above the pages that mention them).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_subjects: bool,
    /// Evaluation baseline only: the keyword arm scores a chunk's heading path and text run
    /// together (plain BM25), not as two fields (BM25F).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_fields: bool,
    /// Evaluation baseline only: no feedback (candidates scored by the query's own vector).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_feedback: bool,
    /// Evaluation baseline only: no fuzzy name lane (a query a typo away from a page's name
    /// finds it only through the other arms).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub without_fuzzy_names: bool,
}

fn default_limit() -> usize {
    10
}

impl SearchRequest {
    pub fn new(query: impl Into<String>) -> Self {
        Self {
            query: query.into(),
            sources: vec![],
            mode: Mode::Balanced,
            limit: 10,
            explain: false,
            filter: Filter::default(),
            pooled_baseline: false,
            without_learnt_names: false,
            without_subjects: false,
            without_fields: false,
            without_feedback: false,
            without_fuzzy_names: false,
        }
    }

    /// How the keyword arm scores a chunk's heading path and text.
    pub fn fields(&self) -> Fields {
        if self.without_fields { Fields::Together } else { Fields::Apart }
    }
}
