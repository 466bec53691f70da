//! The CPU stages, each a `SyncArbiter` pool so that reading, parsing, chunking and inference
//! never run on an async thread: [`Parser`] (read, hash, parse, chunk; also the folder scans)
//! and [`EmbedWorker`] (the model).
//!
//! Bounds: `SyncArbiter` queues are unbounded inside actix, so callers keep the bound: each
//! source's watcher has one parse request (≤ [`PARSE_GROUP`] files) in flight, and each source's
//! writer one embedding request (≤ its commit size).

use actix::prelude::*;
use cairn_index::Embedder;
use cairn_ingest::{ParseOptions, ParsedPage, PathFilter, ScanOptions, ScanReport, read_page, scan};
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;

/// Files per parse request: large enough to amortise a message, small enough that a page's
/// change reaches the writer while the next group parses.
pub const PARSE_GROUP: usize = 64;

/// Reads and parses files.
#[derive(Debug)]
pub struct Parser {
    opts: ParseOptions,
}

impl Parser {
    pub fn new(opts: ParseOptions) -> Self {
        Self { opts }
    }
}

impl Actor for Parser {
    type Context = SyncContext<Self>;
}

/// Parse files of one source.
#[derive(Debug, Message)]
#[rtype(result = "Vec<Parsed>")]
pub struct Parse {
    pub source: String,
    pub root: Arc<PathBuf>,
    pub files: Vec<PathBuf>,
}

/// What became of one file.
#[derive(Debug)]
pub enum Parsed {
    Page {
        page: Box<ParsedPage>,
        mtime_ms: i64,
    },
    /// Not there any more (deleted between the event and the read), or no longer a file.
    Gone {
        rel: PathBuf,
    },
    /// A directory now stands at the path: its contents need a scan.
    Directory {
        rel: PathBuf,
    },
    Failed {
        rel: PathBuf,
        error: cairn_ingest::Error,
    },
}

impl Handler<Parse> for Parser {
    type Result = MessageResult<Parse>;

    fn handle(&mut self, msg: Parse, _: &mut Self::Context) -> Self::Result {
        let out = msg
            .files
            .into_iter()
            .map(|rel| {
                let abs = msg.root.join(&rel);
                let meta = match std::fs::symlink_metadata(&abs) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Parsed::Gone { rel },
                    Err(_) => None,
                    Ok(m) => Some(m),
                };
                if meta.as_ref().is_some_and(|m| m.is_dir()) {
                    return Parsed::Directory { rel };
                }
                let mtime_ms = std::fs::metadata(&abs)
                    .and_then(|m| m.modified())
                    .map(cairn_ingest::scan::mtime_ms)
                    .unwrap_or(0);
                // A panic in the parser is a bug; it fails this file loudly, not the stage.
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    read_page(&msg.source, &msg.root, &rel, &self.opts)
                }));
                match result {
                    Ok(Ok(page)) => Parsed::Page { page: Box::new(page), mtime_ms },
                    Ok(Err(cairn_ingest::Error::Io { message, .. })) if !abs.exists() => {
                        tracing::debug!("{}: gone before it could be read ({message})", rel.display());
                        Parsed::Gone { rel }
                    }
                    Ok(Err(error)) => Parsed::Failed { rel, error },
                    Err(panic) => {
                        let what = panic_message(&panic);
                        tracing::error!("parser panicked on {}: {what}", abs.display());
                        let error = cairn_ingest::Error::Io {
                            path: rel.clone(),
                            message: format!("the parser crashed on this file ({what}); please report it"),
                        };
                        Parsed::Failed { rel, error }
                    }
                }
            })
            .collect();
        MessageResult(out)
    }
}

/// Scan a source's folder.
#[derive(Debug, Message)]
#[rtype(result = "Result<ScanReport, cairn_ingest::Error>")]
pub struct Scan {
    pub root: Arc<PathBuf>,
    pub opts: ScanOptions,
}

impl Handler<Scan> for Parser {
    type Result = Result<ScanReport, cairn_ingest::Error>;

    fn handle(&mut self, msg: Scan, _: &mut Self::Context) -> Self::Result {
        let filter = PathFilter::new(&msg.opts)?;
        scan(&msg.root, &filter)
    }
}

/// Runs the embedding model.
pub struct EmbedWorker {
    embedder: Arc<dyn Embedder>,
}

impl std::fmt::Debug for EmbedWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbedWorker").field("model", &self.embedder.model_id()).finish()
    }
}

impl EmbedWorker {
    pub fn new(embedder: Arc<dyn Embedder>) -> Self {
        Self { embedder }
    }
}

impl Actor for EmbedWorker {
    type Context = SyncContext<Self>;
}

/// Vectors for these texts, in order.
#[derive(Message)]
#[rtype(result = "Result<Vec<Vec<f32>>, String>")]
pub struct Embed {
    pub texts: Vec<String>,
}

impl std::fmt::Debug for Embed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embed").field("texts", &self.texts.len()).finish()
    }
}

impl Handler<Embed> for EmbedWorker {
    type Result = Result<Vec<Vec<f32>>, String>;

    fn handle(&mut self, msg: Embed, _: &mut Self::Context) -> Self::Result {
        let refs: Vec<&str> = msg.texts.iter().map(String::as_str).collect();
        match std::panic::catch_unwind(AssertUnwindSafe(|| self.embedder.embed_documents(&refs))) {
            Ok(Ok(e)) => Ok(e.vectors),
            Ok(Err(e)) => Err(e.to_string()),
            Err(panic) => Err(format!("the embedder crashed: {}", panic_message(&panic))),
        }
    }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}
