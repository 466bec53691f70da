//! The one error type of `cairn-index`.

use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model or runtime file could not be provisioned; `fix` is the command that fixes it.
    #[error("cannot provision {what}: {reason}\n  fix: {fix}")]
    Provision { what: String, reason: String, fix: String },

    #[error("{path}: sha256 is {actual}, expected {expected}; delete the file and run again to re-fetch it")]
    Checksum { path: PathBuf, expected: String, actual: String },

    #[error(
        "loading ONNX Runtime from {path}: {message}; set ORT_DYLIB_PATH to a libonnxruntime.so 1.2x, or unset it to use the provisioned one"
    )]
    Runtime { path: PathBuf, message: String },

    #[error("embedding model {model}: {message}")]
    Model { model: String, message: String },

    #[error("tokenizer {path}: {message}")]
    Tokenizer { path: PathBuf, message: String },

    #[error("{}", storage_message(source_id, uri, message))]
    Storage { source_id: String, uri: String, message: String },

    /// Another writer fenced the source's tables since this one read them: it took the lease
    /// over. This process must not commit to the source again.
    #[error(
        "{}: another writer has taken this source over (it fenced the tables); this process commits nothing more to it",
        storage_message(source_id, uri, message)
    )]
    Fenced { source_id: String, uri: String, message: String },

    #[error(
        "source `{source_id}` was built with {found}, this build needs {want}; its tables are \
         rebuilt rather than mixed (`cairn reindex --source {source_id}`)"
    )]
    ManifestMismatch { source_id: String, found: String, want: String },

    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// A storage error names the source (or the whole database, `*`) and the URI.
fn storage_message(source_id: &str, uri: &str, message: &str) -> String {
    match (source_id, uri) {
        ("*", "") => message.to_string(),
        ("*", uri) => format!("database {uri}: {message}"),
        (id, uri) => format!("source `{id}` ({uri}): {message}"),
    }
}
