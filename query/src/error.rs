//! The one error type of `cairn-query`.

/// Result alias for this crate.
pub type Result<T, E = QueryError> = std::result::Result<T, E>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("empty query: give some words to search for")]
    EmptyQuery,
    #[error("query is {bytes} bytes; at most {max} are accepted: search for the key phrase instead")]
    QueryTooLong { bytes: usize, max: usize },
    #[error("limit must be at least 1")]
    BadLimit,
    #[error("unknown mode `{0}`: use fast, balanced or thorough")]
    BadMode(String),
    #[error("bad filter: {0}")]
    BadFilter(String),
    #[error("unknown source `{id}`; known sources: {known}")]
    UnknownSource { id: String, known: String },
    #[error("no sources to search: index a folder first (`cairn index DIR`)")]
    NoSources,
    #[error("`{page}` has no section `{anchor}`; its sections: {known}")]
    NoSection { page: String, anchor: String, known: String },
    #[error("every source failed, so there is no answer (not an empty one): {0}")]
    AllSourcesFailed(String),
    #[error("the search stopped unexpectedly: {0}")]
    Internal(String),
}

impl QueryError {
    /// A mistake in the request (exit code 2 on the command line), not a failure of the index.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            QueryError::EmptyQuery
                | QueryError::QueryTooLong { .. }
                | QueryError::BadLimit
                | QueryError::BadMode(_)
                | QueryError::BadFilter(_)
                | QueryError::NoSection { .. }
                | QueryError::UnknownSource { .. }
                | QueryError::NoSources
        )
    }
}
