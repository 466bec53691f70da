//! The one error type of `cairn-ingest`. Every variant names the file (vault-relative), says what
//! is wrong and what to do, so a `PageFailed` event is useful to a person as it stands.

use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a file could not become a page (or a scan could not read something).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Error {
    #[error(
        "{path}: invalid YAML frontmatter at line {line}, column {column}: {message}; fix the \
         frontmatter block (between the `---` lines) — the body is indexed meanwhile"
    )]
    InvalidFrontmatter { path: PathBuf, line: usize, column: usize, message: String },

    #[error(
        "{path}: frontmatter starts with `---` but has no closing `---` line; add one, or remove \
         the opening line if the file has no frontmatter — the body is indexed meanwhile"
    )]
    UnclosedFrontmatter { path: PathBuf },

    #[error(
        "{path}: not valid UTF-8 (first bad byte at offset {offset}); re-save the file as UTF-8, \
         e.g. `iconv -f latin1 -t utf-8`"
    )]
    NotUtf8 { path: PathBuf, offset: usize },

    #[error(
        "{path}: looks like binary content, not markdown ({reason}); move it out of the notes \
         folder or give it another extension"
    )]
    Binary { path: PathBuf, reason: String },

    #[error(
        "{path}: {size} bytes is larger than the {cap}-byte cap for one page; split the note, or \
         raise `limits.max_page_bytes` in cairn.toml"
    )]
    TooLarge { path: PathBuf, size: u64, cap: u64 },

    /// The frontmatter block, or what its YAML aliases expand to, is over the cap (`bytes` is
    /// `None` when the expansion was stopped at the cap).
    #[error(
        "{path}: the frontmatter is {} over the {cap}-byte cap{}; shorten it, or raise \
         `limits.max_frontmatter_bytes` in cairn.toml",
        bytes.map_or_else(|| "more than that".to_string(), |b| format!("{b} bytes")),
        if *expanded { " once its YAML aliases (`*name`) are expanded" } else { "" }
    )]
    FrontmatterTooLarge { path: PathBuf, bytes: Option<u64>, expanded: bool, cap: u64 },

    #[error(
        "{path}: the frontmatter nests deeper than {cap} levels; flatten it, or raise \
         `limits.max_frontmatter_depth` in cairn.toml"
    )]
    FrontmatterTooDeep { path: PathBuf, cap: u64 },

    #[error(
        "{path}: parsing took longer than {limit_ms} ms and was stopped; split the note, or raise \
         `limits.parse_timeout_ms` in cairn.toml"
    )]
    ParseTimeout { path: PathBuf, limit_ms: u64 },

    /// Indexed with its first `cap` chunks only.
    #[error(
        "{path}: {chunks} chunks is more than the {cap} one page may have, so only the first {cap} \
         are indexed; split the note, or raise `limits.max_page_chunks` in cairn.toml"
    )]
    Truncated { path: PathBuf, chunks: u64, cap: u64 },

    /// Remembered from an earlier attempt (by the file's content): the page is not tried again
    /// until the file changes.
    #[error("{path}: skipped until the file changes: {reason}")]
    Poisoned { path: PathBuf, reason: String },

    /// Indexed, under a slug of its own: another file's name makes the same slug, and that file
    /// had it first (or names it more nearly).
    #[error(
        "{path}: its name makes the slug `{slug}`, which is {holder}'s, so its page is `{given}`; \
         rename one of the two files to give each a slug of its own"
    )]
    SlugTaken { path: PathBuf, slug: String, holder: PathBuf, given: String },

    #[error(
        "{path}: no name is left once the extension is dropped (`..md`), so the page has no slug; rename the file"
    )]
    NoSlug { path: PathBuf },

    #[error("{path}: symlink leads outside the source root ({target}); it is not followed")]
    SymlinkOutsideRoot { path: PathBuf, target: PathBuf },

    #[error("{path}: symlink loop back to {ancestor}; it is not followed")]
    SymlinkLoop { path: PathBuf, ancestor: PathBuf },

    /// `message` carries the advice for its kind ([`Error::io`]).
    #[error("{path}: cannot read: {message}")]
    Io { path: PathBuf, message: String },

    #[error("invalid glob `{glob}`: {message}; fix the include/exclude pattern in the source config")]
    Glob { glob: String, message: String },
}

impl Error {
    /// A failed read of `path`, with the advice its kind calls for.
    pub fn io(path: impl Into<PathBuf>, e: &std::io::Error) -> Self {
        let advice = match e.kind() {
            std::io::ErrorKind::NotFound => "; it is not there (moved or deleted?)",
            std::io::ErrorKind::PermissionDenied => "; check that this user may read it",
            _ => "",
        };
        Error::Io { path: path.into(), message: format!("{e}{advice}") }
    }

    /// The vault-relative path this error is about, if it is about a file.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            Error::InvalidFrontmatter { path, .. }
            | Error::UnclosedFrontmatter { path }
            | Error::NotUtf8 { path, .. }
            | Error::Binary { path, .. }
            | Error::TooLarge { path, .. }
            | Error::FrontmatterTooLarge { path, .. }
            | Error::FrontmatterTooDeep { path, .. }
            | Error::ParseTimeout { path, .. }
            | Error::Poisoned { path, .. }
            | Error::Truncated { path, .. }
            | Error::SlugTaken { path, .. }
            | Error::NoSlug { path }
            | Error::SymlinkOutsideRoot { path, .. }
            | Error::SymlinkLoop { path, .. }
            | Error::Io { path, .. } => Some(path),
            Error::Glob { .. } => None,
        }
    }

    /// A short machine-readable kind, stable across releases (used in events and JSON output).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::InvalidFrontmatter { .. } => "invalid_frontmatter",
            Error::UnclosedFrontmatter { .. } => "unclosed_frontmatter",
            Error::NotUtf8 { .. } => "not_utf8",
            Error::Binary { .. } => "binary",
            Error::TooLarge { .. } => "too_large",
            Error::FrontmatterTooLarge { .. } => "frontmatter_too_large",
            Error::FrontmatterTooDeep { .. } => "frontmatter_too_deep",
            Error::ParseTimeout { .. } => "parse_timeout",
            Error::Poisoned { .. } => "poisoned",
            Error::Truncated { .. } => "truncated",
            Error::SlugTaken { .. } => "slug_taken",
            Error::NoSlug { .. } => "no_slug",
            Error::SymlinkOutsideRoot { .. } => "symlink_outside_root",
            Error::SymlinkLoop { .. } => "symlink_loop",
            Error::Io { .. } => "io",
            Error::Glob { .. } => "glob",
        }
    }
}
