//! The configuration of a running cairn: `cairn.toml`, or built in code.
//!
//! ```toml
//! db = "~/.local/share/cairn"          # a folder, or s3://… / gs://… / az://…
//! debounce_ms = 150
//! reconcile_secs = 600                  # safety-net rescan period; 0 = off
//!
//! [model]
//! dir = "/models/minilm"                # model.onnx + tokenizer.json; default: provisioned
//!
//! [limits]                              # what one page may cost (named in its error when over)
//! max_page_bytes = 10000000
//!
//! [[sources]]
//! id = "notes"
//! root = "~/vault"
//! exclude = ["private/**"]
//! ```

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A source: an id (`^[a-z0-9][a-z0-9-]{0,31}$`), a folder and optional globs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub id: String,
    pub root: PathBuf,
    /// Only files matching one of these count (vault-relative globs); empty: all markdown.
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The language its words are read in (an ISO 639-1 code: `de`, `fr`, `zh`…; see
    /// `cairn_index::resident::LANGUAGE_CODES`). Unset: the one recorded with its tables, else
    /// told from its folder's text when it is first indexed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

impl SourceConfig {
    /// The language configured for it (checked by [`Config::validate`]).
    pub fn lang(&self) -> Option<cairn_index::resident::Lang> {
        self.language.as_deref().and_then(cairn_index::resident::Lang::parse)
    }
}

/// Where the embedding model comes from, and how it reads text. Any setting that changes the
/// vectors (another model file, pooling, prefixes, max tokens, output, heading context) changes
/// the model id the tables record, so a source built otherwise is rebuilt, never mixed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// A folder with a sentence-embedding model's `model.onnx` and `tokenizer.json` (default:
    /// the provisioned all-MiniLM-L6-v2, or `CAIRN_MODEL_DIR`).
    pub dir: Option<PathBuf>,
    /// ONNX Runtime threads for indexing (default: the number of cores; the pipeline runs one
    /// embedding worker so workers × threads ≤ cores).
    pub threads: Option<usize>,
    /// `mean` (default) or `cls`: how the model's token vectors become one.
    pub pooling: Option<cairn_index::embed::Pooling>,
    /// Text put before each query and before each chunk (e.g. E5's `"query: "`, `"passage: "`).
    pub query_prefix: Option<String>,
    pub document_prefix: Option<String>,
    /// The width the model outputs: checked when it loads (default: whatever it outputs).
    pub dim: Option<usize>,
    /// Tokens of a text the model reads (default 256).
    pub max_tokens: Option<usize>,
    /// The model output holding the vectors (default: `last_hidden_state`, `token_embeddings`
    /// or `sentence_embedding`, else the first output of token vectors, then of text vectors).
    pub output: Option<String>,
    /// Whether each chunk is embedded after its heading path (the page title, then its
    /// headings; default true) or alone.
    pub heading_context: Option<bool>,
    /// A folder where each chunk text's vector is kept once embedded (per model and settings),
    /// so that a later index of the same texts (an index made anew, a copy, an evaluation run
    /// again) reads it instead of running the model; default none, or `CAIRN_KEEP_VECTORS`.
    pub keep_vectors: Option<PathBuf>,
}

impl ModelConfig {
    /// Where indexing keeps its vectors by text: `keep_vectors`, else `CAIRN_KEEP_VECTORS`.
    pub fn kept_vectors(&self) -> Option<PathBuf> {
        self.keep_vectors.clone().or_else(|| std::env::var_os("CAIRN_KEEP_VECTORS").map(PathBuf::from))
    }

    /// The embedder's options for these settings, with `threads` ONNX Runtime threads.
    pub fn ort_options(&self, threads: usize) -> cairn_index::OrtOptions {
        let d = cairn_index::OrtOptions::default();
        cairn_index::OrtOptions {
            intra_threads: threads,
            pooling: self.pooling.unwrap_or(d.pooling),
            query_prefix: self.query_prefix.clone().unwrap_or_default(),
            document_prefix: self.document_prefix.clone().unwrap_or_default(),
            dim: self.dim,
            max_tokens: self.max_tokens.unwrap_or(d.max_tokens),
            heading_context: self.heading_context.unwrap_or(d.heading_context),
            output: self.output.clone(),
            ..d
        }
    }
}

/// What one page may cost; a page over a bound fails with a reason naming the key that raises it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Bytes of one file.
    pub max_page_bytes: u64,
    /// Bytes of a frontmatter block, also once its YAML aliases are expanded.
    pub max_frontmatter_bytes: u64,
    /// Nesting of a frontmatter block.
    pub max_frontmatter_depth: u64,
    /// Wall time to parse and chunk one page (0: none).
    pub parse_timeout_ms: u64,
    /// Chunks of one page that are indexed (the first ones).
    pub max_page_chunks: usize,
    /// A scan that would remove more than half of a source's pages (and at least 20, counting
    /// the removals of the last 10 minutes) waits for `cairn reconcile ID --allow-removals`.
    /// `false` applies such removals at once (unattended setups); a folder that is missing, empty
    /// or another one, and a machine's first scan of a source that finds fewer than half of its
    /// pages, still never empty it.
    pub hold_mass_removals: bool,
}

impl Default for Limits {
    fn default() -> Self {
        let p = cairn_ingest::ParseOptions::default();
        Self {
            max_page_bytes: p.max_page_bytes,
            max_frontmatter_bytes: p.frontmatter.max_bytes,
            max_frontmatter_depth: p.frontmatter.max_depth,
            parse_timeout_ms: p.parse_timeout_ms,
            max_page_chunks: p.max_page_chunks,
            hold_mass_removals: true,
        }
    }
}

impl Limits {
    /// The parser's options with these bounds.
    pub fn parse_options(&self) -> cairn_ingest::ParseOptions {
        cairn_ingest::ParseOptions {
            max_page_bytes: self.max_page_bytes,
            frontmatter: cairn_ingest::frontmatter::YamlLimits {
                max_bytes: self.max_frontmatter_bytes,
                max_depth: self.max_frontmatter_depth,
            },
            parse_timeout_ms: self.parse_timeout_ms,
            max_page_chunks: self.max_page_chunks,
            ..cairn_ingest::ParseOptions::default()
        }
    }
}

/// Everything `Cairn::open` needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The database (default: the user's data directory).
    #[serde(default = "defaults::db")]
    pub db: String,
    #[serde(default)]
    pub sources: Vec<SourceConfig>,
    #[serde(default)]
    pub model: ModelConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default = "defaults::debounce_ms")]
    pub debounce_ms: u64,
    /// Safety-net rescan period in seconds (0: only at start, on overflow and on flush).
    #[serde(default = "defaults::reconcile_secs")]
    pub reconcile_secs: u64,
    /// Chunks per commit (one embedding request and one write).
    #[serde(default = "defaults::commit_chunks")]
    pub commit_chunks: usize,
    /// Longest wait before buffered changes are committed.
    #[serde(default = "defaults::commit_after_ms")]
    pub commit_after_ms: u64,
    /// Chunks a source holds with its vectors exact (f32) in memory; past it, they are int8
    /// codes (a quarter of the memory) and a search re-scores its best candidates from the stored
    /// vectors (one read per search).
    #[serde(default = "defaults::exact_vectors_up_to")]
    pub exact_vectors_up_to: usize,
    /// Event log folder (default: `events/` in a local database folder; none for object stores).
    pub event_log: Option<PathBuf>,
    /// The log rotates past this size.
    #[serde(default = "defaults::log_max_mib")]
    pub log_max_mib: u64,
    /// Bound on draining at shutdown.
    #[serde(default = "defaults::shutdown_secs")]
    pub shutdown_secs: u64,
    /// A reader of a database on an object store that is behind its writer by more than this
    /// (or cannot reach the store for as long) says so in every answer.
    #[serde(default = "defaults::max_lag_s")]
    pub max_lag_s: u64,
    /// Watch folders with notify (replays turn it off and inject events themselves).
    #[serde(default = "defaults::yes")]
    pub watch: bool,
    /// Object-store options for an `s3://` database (`[storage]`: `aws_endpoint`, `aws_region`,
    /// `allow_http`, credentials…; the `AWS_*` environment variables work too). Never written
    /// out: a configuration that is serialized leaves them behind.
    #[serde(default, skip_serializing)]
    pub storage: cairn_index::StorageOptions,
}

mod defaults {
    pub fn db() -> String {
        super::default_db_uri()
    }
    pub fn debounce_ms() -> u64 {
        cairn_ingest::Debouncer::DEFAULT_QUIET_MS
    }
    pub fn reconcile_secs() -> u64 {
        600
    }
    pub fn commit_chunks() -> usize {
        512
    }
    pub fn commit_after_ms() -> u64 {
        50
    }
    pub fn exact_vectors_up_to() -> usize {
        cairn_index::vectors::EXACT_VECTORS_UP_TO
    }
    pub fn log_max_mib() -> u64 {
        64
    }
    pub fn shutdown_secs() -> u64 {
        30
    }
    pub fn max_lag_s() -> u64 {
        10
    }
    pub fn yes() -> bool {
        true
    }
}

impl Config {
    /// A configuration with defaults for `db` and these sources.
    pub fn new(db: impl Into<String>, sources: Vec<SourceConfig>) -> Self {
        Self {
            db: db.into(),
            sources,
            model: ModelConfig::default(),
            limits: Limits::default(),
            debounce_ms: defaults::debounce_ms(),
            reconcile_secs: defaults::reconcile_secs(),
            commit_chunks: defaults::commit_chunks(),
            commit_after_ms: defaults::commit_after_ms(),
            exact_vectors_up_to: defaults::exact_vectors_up_to(),
            event_log: None,
            log_max_mib: defaults::log_max_mib(),
            shutdown_secs: defaults::shutdown_secs(),
            max_lag_s: defaults::max_lag_s(),
            watch: true,
            storage: cairn_index::StorageOptions::default(),
        }
    }

    /// Open the database with this configuration's object-store options.
    pub async fn database(&self) -> cairn_index::Result<cairn_index::Database> {
        cairn_index::Database::open_with(&self.db, &self.storage, Some(Duration::ZERO)).await
    }

    /// Read `cairn.toml`; relative roots are taken from the file's folder, `~` is the home.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut c: Config = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for s in &mut c.sources {
            s.root = resolve(base, &s.root);
        }
        if !c.db.contains("://") {
            c.db = resolve(base, Path::new(&c.db)).display().to_string();
        }
        c.event_log = c.event_log.map(|p| resolve(base, &p));
        c.model.dir = c.model.dir.map(|p| resolve(base, &p));
        c.model.keep_vectors = c.model.keep_vectors.map(|p| resolve(base, &p));
        c.validate()?;
        Ok(c)
    }

    /// Ids valid and unique. (No sources is valid: a database serves the sources it holds.)
    pub fn validate(&self) -> Result<(), String> {
        let mut seen = std::collections::HashSet::new();
        for s in &self.sources {
            validate_source_id(&s.id)?;
            if let Some(code) =
                s.language.as_deref().filter(|c| cairn_index::resident::Lang::parse(c).is_none())
            {
                return Err(format!(
                    "source `{}`: language `{code}` is not one cairn reads; use one of {} (or leave it out: \
                     cairn tells the language from the folder's text)",
                    s.id,
                    cairn_index::resident::LANGUAGE_CODES
                ));
            }
            if !seen.insert(&s.id) {
                return Err(format!("source id `{}` is given twice", s.id));
            }
        }
        if self.limits.max_page_bytes == 0
            || self.limits.max_page_chunks == 0
            || self.limits.max_frontmatter_bytes == 0
        {
            return Err(
                "limits: max_page_bytes, max_page_chunks and max_frontmatter_bytes must be above 0".into()
            );
        }
        Ok(())
    }

    /// The local files of the database (lock, socket, event log, state).
    pub fn paths(&self) -> crate::core::paths::DbPaths {
        crate::core::paths::DbPaths::of(&self.db)
    }

    /// Where events are logged: `event_log`, else the database's `events/` folder (for a remote
    /// database, a local folder named after it).
    pub fn event_log_dir(&self) -> Option<PathBuf> {
        Some(self.event_log.clone().unwrap_or_else(|| self.paths().events()))
    }

    pub fn commit_after(&self) -> Duration {
        Duration::from_millis(self.commit_after_ms)
    }
}

/// The default database: the user's data directory + `cairn`.
pub fn default_db_uri() -> String {
    dirs::data_dir().unwrap_or_else(|| PathBuf::from(".")).join("cairn").display().to_string()
}

/// A source id: `^[a-z0-9][a-z0-9-]{0,31}$`.
pub fn validate_source_id(id: &str) -> Result<(), String> {
    let ok = !id.is_empty()
        && id.len() <= 32
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !id.starts_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "invalid source id `{id}`: use 1-32 characters of a-z, 0-9 and `-`, not starting with `-`"
        ))
    }
}

/// `p` as a full path: `~` is the home, a relative path is taken from `base`.
pub fn resolve(base: &Path, p: &Path) -> PathBuf {
    if let Ok(rest) = p.strip_prefix("~")
        && let Some(home) = std::env::var_os("HOME")
    {
        return PathBuf::from(home).join(rest);
    }
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[storage]` reaches the configuration; its values are never shown by `Debug` nor written
    /// out when the configuration is serialized.
    #[test]
    fn storage_options_are_read_and_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cairn.toml");
        std::fs::write(
            &path,
            "db = \"s3://bucket/notes\"\n[storage]\naws_endpoint = \"http://127.0.0.1:8333\"\naws_secret_access_key = \"hunter2\"\n",
        )
        .unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(c.db, "s3://bucket/notes");
        assert_eq!(c.storage.0["aws_endpoint"], "http://127.0.0.1:8333");
        assert_eq!(c.storage.0["aws_secret_access_key"], "hunter2");
        let shown = format!("{c:?}");
        assert!(shown.contains("aws_secret_access_key") && !shown.contains("hunter2"), "{shown}");
        assert!(!serde_json::to_string(&c).unwrap().contains("hunter2"));
    }
}
