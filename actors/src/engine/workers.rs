//! The parsing stage, a `SyncArbiter` pool so that reading, parsing and chunking never run on an
//! async thread: [`Parser`] (read, hash, parse, chunk; also the folder scans). The model runs in
//! [`crate::engine::embedding`].
//!
//! Bounds: `SyncArbiter` queues are unbounded inside actix, so callers keep the bound: each
//! source's watcher has one parse request (≤ [`PARSE_GROUP`] files) in flight.

use crate::core::poison::{PoisonBook, file_hash};
use actix::prelude::*;
use cairn_ingest::{
    Error, ParseOptions, ParsedPage, PathFilter, ScanOptions, ScanReport, parse_page, rel_string, scan,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Files per parse request: large enough to amortise a message, small enough that a page's
/// change reaches the writer while the next group parses.
pub const PARSE_GROUP: usize = 64;

/// Reads and parses files; pages remembered as failed (by their bytes) are not parsed again.
#[derive(Debug)]
pub struct Parser {
    opts: ParseOptions,
    book: Arc<PoisonBook>,
}

impl Parser {
    pub fn new(opts: ParseOptions, book: Arc<PoisonBook>) -> Self {
        Self { opts, book }
    }

    /// Read and parse one file, through the poison book.
    fn page(&self, source: &str, root: &Path, rel: &Path) -> Result<ParsedPage, Error> {
        let bytes = cairn_ingest::read_within(root, rel, self.opts.max_page_bytes)?;
        let (path, hash) = (rel_string(rel), file_hash(&bytes));
        if let Some(e) = self.book.check(source, &path, &hash) {
            return Err(Error::Poisoned { path: rel.into(), reason: e.reason });
        }
        self.book.begin(source, &path, &hash);
        // A panic in the parser is a bug; it fails this file loudly, not the stage.
        let result = cairn_index::fault::contained(|| parse_page(source, rel, &bytes, &self.opts));
        self.book.done(source, &path, matches!(result, Ok(Ok(_))));
        match result {
            Ok(Ok(page)) => Ok(page),
            Ok(Err(e)) => {
                // Only what is costly to find again: other bounds are refused in microseconds.
                if matches!(e, Error::ParseTimeout { .. }) {
                    self.book.add(source, &path, &hash, e.kind(), &e.to_string());
                }
                Err(e)
            }
            Err(what) => {
                tracing::error!("parser panicked on {}: {what}", root.join(rel).display());
                let reason = format!("the parser crashed on this file ({what}); please report it");
                self.book.add(source, &path, &hash, "crashed", &reason);
                Err(Error::Poisoned { path: rel.into(), reason })
            }
        }
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
    /// A cloud placeholder: its content is not on this machine, and reading it would fetch it.
    /// Its page stays as last indexed.
    Placeholder {
        rel: PathBuf,
    },
}

/// A file gone from `rel`: evicted when a cloud stub stands beside it now (iCloud renames the note
/// to its stub), so its page stays; else gone.
fn gone(root: &Path, rel: PathBuf) -> Parsed {
    if cairn_ingest::placeholder::is_evicted(root, &rel) {
        Parsed::Placeholder { rel }
    } else {
        Parsed::Gone { rel }
    }
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
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return gone(&msg.root, rel),
                    Err(_) => None,
                    Ok(m) => Some(m),
                };
                if meta.as_ref().is_some_and(|m| m.is_dir()) {
                    return Parsed::Directory { rel };
                }
                // Links followed: the file the note is.
                let target = std::fs::metadata(&abs).ok();
                if target.as_ref().is_some_and(cairn_ingest::placeholder::is_dataless) {
                    return Parsed::Placeholder { rel };
                }
                let mtime_ms =
                    target.and_then(|m| m.modified().ok()).map(cairn_ingest::scan::mtime_ms).unwrap_or(0);
                match self.page(&msg.source, &msg.root, &rel) {
                    Ok(page) => Parsed::Page { page: Box::new(page), mtime_ms },
                    Err(Error::Io { message, .. }) if !abs.exists() => {
                        tracing::debug!("{}: gone before it could be read ({message})", rel.display());
                        gone(&msg.root, rel)
                    }
                    Err(error) => Parsed::Failed { rel, error },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[actix::test]
    async fn a_note_gone_beside_its_cloud_stub_is_a_placeholder_and_one_gone_alone_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".evicted.md.icloud"), "bplist00").unwrap();
        let parser =
            SyncArbiter::start(1, || Parser::new(ParseOptions::default(), Arc::new(PoisonBook::in_memory())));
        let files = vec![PathBuf::from("evicted.md"), PathBuf::from("deleted.md")];
        let out = parser
            .send(Parse { source: "s".into(), root: Arc::new(dir.path().into()), files })
            .await
            .unwrap();
        assert!(matches!(&out[0], Parsed::Placeholder { rel } if rel == Path::new("evicted.md")), "{out:?}");
        assert!(matches!(&out[1], Parsed::Gone { rel } if rel == Path::new("deleted.md")), "{out:?}");
    }
}
