//! The crate's errors: what a handle's call answers when it fails ([`Error`]), what a source's
//! pipeline actors answer when they could not do what was asked ([`PipelineError`]), and the
//! codes every error maps to on the wire ([`ErrorCode`], [`RemoteError`]).

use cairn_ingest::folder::Unavailable;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Why a source's writer or watcher could not do what was asked: the typed reply of `Commit`,
/// `AwaitVectors`, `Flush` and `Reconcile`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PipelineError {
    /// The source's tables are not open (its start failed, or has not finished).
    #[error("store not open")]
    NotOpen,
    /// The source's tables do not open (damaged, or a store that does not answer).
    #[error("source `{id}`: its tables cannot be opened ({})", cairn_index::store::with_hint(why))]
    CannotOpen { id: String, why: String },
    /// The writer commits nothing more (or, for [`Refusal::LeaseLapsed`], not until the lease
    /// is renewed).
    #[error("source `{id}`: {why}, so it {}", why.outlook())]
    Refused { id: String, why: Refusal },
    /// The tables or the resident index failed.
    #[error(transparent)]
    Store(Arc<cairn_index::Error>),
    /// A blocking task of a commit panicked or was cancelled.
    #[error("{what}: {message}")]
    Task { what: &'static str, message: String },
    /// An actor the pipeline needs has stopped.
    #[error("{0} stopped")]
    Stopped(Part),
    /// The source's folder cannot be read as the source's; nothing was removed.
    #[error("{}", why.describe(id, root))]
    Unavailable { id: String, root: String, why: Unavailable },
}

/// Why a writer refuses to commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the pipeline has stopped")]
    Retired,
    #[error("this process no longer holds the writer lease")]
    LeaseLost,
    /// Not renewed in time (the store does not answer): commits wait for the next renewal.
    #[error("this process could not renew the writer lease in time (the store does not answer)")]
    LeaseLapsed,
}

impl Refusal {
    fn outlook(&self) -> &'static str {
        match self {
            Refusal::LeaseLapsed => "commits again once the store answers and the lease is renewed",
            Refusal::Retired | Refusal::LeaseLost => "commits nothing more",
        }
    }
}

/// The parts of a pipeline whose stop a call reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Part {
    #[error("pipeline")]
    Pipeline,
    #[error("the writer")]
    Writer,
    #[error("the query actor")]
    Query,
}

impl PipelineError {
    /// Another writer holds the source now (it took the lease, or fenced the tables since this
    /// process read them): this process commits nothing more to it, and trying again cannot help.
    pub fn handed_over(&self) -> bool {
        match self {
            PipelineError::Refused { why: Refusal::LeaseLost, .. } => true,
            PipelineError::Store(e) => matches!(**e, cairn_index::Error::Fenced { .. }),
            _ => false,
        }
    }

    /// Whether the message names its source already.
    fn names_source(&self) -> bool {
        matches!(
            self,
            PipelineError::Refused { .. }
                | PipelineError::Unavailable { .. }
                | PipelineError::CannotOpen { .. }
        )
    }
}

/// The sources whose pipelines failed a call, each with its error.
#[derive(Debug, Clone)]
pub struct SourceFailures(pub Vec<(String, PipelineError)>);

/// `ID: error` for each (the error alone when it names its source), separated by `; `.
impl std::fmt::Display for SourceFailures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (id, e)) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            if e.names_source() { write!(f, "{sep}{e}")? } else { write!(f, "{sep}{id}: {e}")? }
        }
        Ok(())
    }
}

impl From<cairn_index::Error> for PipelineError {
    fn from(e: cairn_index::Error) -> Self {
        PipelineError::Store(Arc::new(e))
    }
}

impl From<actix::MailboxError> for PipelineError {
    /// A message that could not be delivered: the actor behind the mailbox has stopped.
    fn from(_: actix::MailboxError) -> Self {
        PipelineError::Stopped(Part::Pipeline)
    }
}

/// Why the system could not start or answer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Index(#[from] cairn_index::Error),
    #[error(transparent)]
    Query(#[from] cairn_query::QueryError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("cairn has stopped")]
    Stopped,
    /// A verb only the writer answers, asked of a process that only reads the database (exit
    /// code 1: nothing is wrong with the request; it must go where the writer is).
    #[error("{0}")]
    NotWriter(String),
    #[error("{0}")]
    Pipeline(String),
    /// Sources' pipelines could not do what was asked.
    #[error("{0}")]
    Sources(SourceFailures),
    /// The owner of the database answered with an error, or could not be reached.
    #[error(transparent)]
    Remote(#[from] RemoteError),
}

impl Error {
    /// A mistake in the request (exit code 2 on the command line), not a failure.
    pub fn is_usage(&self) -> bool {
        match self {
            Error::Query(q) => q.is_usage(),
            Error::Config(_) => true,
            Error::Remote(r) => {
                matches!(r.code, ErrorCode::Usage | ErrorCode::VersionMismatch)
            }
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// Not a request this owner understands (bad frame, unknown verb, bad arguments).
    BadRequest,
    /// A request that is well formed but wrong (empty query, unknown source, limit 0).
    Usage,
    /// Protocol or scoring versions differ.
    VersionMismatch,
    /// Too many connections; try again.
    Busy,
    /// The owner is starting or stopping; try again (another process may own it by then).
    Unavailable,
    /// The request took longer than its limit.
    Timeout,
    /// A verb only the writer answers, asked of a process that only reads the database: nothing
    /// is wrong with the request; it must go where the writer is.
    NotWriter,
    /// The owner failed to do it.
    Failed,
}

/// A failed request, as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct RemoteError {
    pub code: ErrorCode,
    pub message: String,
    /// Retrying later can succeed.
    pub retryable: bool,
}

impl RemoteError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        let retryable = matches!(code, ErrorCode::Busy | ErrorCode::Unavailable | ErrorCode::Timeout);
        Self { code, message: message.into(), retryable }
    }
}
