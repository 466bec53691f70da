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

/// What `cairn eval` turns off to measure a rule or a baseline on the same index (all off: the
/// product's search).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ablation {
    /// One candidate pool of K pages for all sources together (each arm ranked by its raw
    /// scores across sources, fused, cut to K), as a single shared index would do: the failure
    /// per-source gather exists to prevent.
    pub pooled_baseline: bool,
    /// No names learnt from the vault (what `cairn eval --links` measures against).
    pub without_learnt_names: bool,
    /// No subject pages (pages a phrase of the query names are not lifted above the pages that
    /// mention them).
    pub without_subjects: bool,
    /// The keyword arm scores a chunk's heading path and text run together (plain BM25), not
    /// as two fields (BM25F).
    pub without_fields: bool,
    /// No feedback (candidates scored by the query's own vector).
    pub without_feedback: bool,
    /// No fuzzy name lane (a query a typo away from a page's name finds it only through the
    /// other arms).
    pub without_fuzzy_names: bool,
    /// No compound readings (a query's compound word is read whole only, even where its source
    /// never holds it, and a word is not met by the source's compounds that end in it).
    pub without_compounds: bool,
}

impl Ablation {
    /// Whether every rule runs (the product's search).
    pub fn is_none(&self) -> bool {
        *self == Self::default()
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
    /// How many candidates each source gathers before the union is scored (its rank window;
    /// never fewer than the limit, at most [`super::MAX_WINDOW`]). Unset: the mode's (100 in
    /// `balanced`, [`super::WINDOW`]), which does not depend on the limit, so that the first ten
    /// answers are the same whether ten or a hundred are asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<usize>,
    /// Restrictions: tags, folders, types, dates.
    #[serde(default, skip_serializing_if = "Filter::is_empty")]
    pub filter: Filter,
    /// Rules an evaluation turns off. Never on the wire: an answer over a socket or HTTP runs
    /// every rule, and an evaluation that turns one off runs in the process that reads the
    /// index.
    #[serde(skip)]
    pub ablation: Ablation,
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
            window: None,
            filter: Filter::default(),
            ablation: Ablation::default(),
        }
    }

    /// How the keyword arm scores a chunk's heading path and text.
    pub fn fields(&self) -> Fields {
        if self.ablation.without_fields { Fields::Together } else { Fields::Apart }
    }
}
