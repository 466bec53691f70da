//! One-shot reconciliation of a source's tables with its folder: the work of `cairn index`.
//! Scan, compare content hashes with what is stored, parse and chunk what changed, reuse stored
//! vectors for text already embedded (by text hash), embed the rest in batches, and commit in
//! groups of pages; pages gone from the folder are removed. Re-running on an unchanged folder
//! writes nothing and embeds nothing.

use crate::embed::Embedder;
use crate::error::{Error, Result};
use crate::store::{PageWrite, SourceStore, WriteBatch};
use cairn_ingest::{ParseOptions, ParsedPage, PathFilter, ScanOptions, read_page, rel_string, scan};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Knobs of a sync.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    pub parse: ParseOptions,
    pub scan: ScanOptions,
    /// Chunks per commit (and per embedding call): large enough that commits are few, small
    /// enough that progress is steady and a crash loses little.
    pub commit_chunks: usize,
}

impl Default for SyncOptions {
    fn default() -> Self {
        Self { parse: ParseOptions::default(), scan: ScanOptions::default(), commit_chunks: 512 }
    }
}

/// A file that could not be indexed (or a page indexed with a warning).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Failure {
    pub source: String,
    pub path: String,
    pub kind: String,
    pub reason: String,
}

/// What indexing did to pages and chunks; summed over sources by `cairn index`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Counts {
    pub pages_indexed: usize,
    pub pages_unchanged: usize,
    pub pages_removed: usize,
    pub pages_failed: usize,
    pub failures: Vec<Failure>,
    /// Pages indexed despite a problem (e.g. broken frontmatter: body indexed).
    pub warnings: Vec<Failure>,
    pub chunks_embedded: usize,
    pub chunks_reused: usize,
    /// Time inside the embedder.
    pub embed_seconds: f64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.pages_indexed += o.pages_indexed;
        self.pages_unchanged += o.pages_unchanged;
        self.pages_removed += o.pages_removed;
        self.pages_failed += o.pages_failed;
        self.failures.extend(o.failures.iter().cloned());
        self.warnings.extend(o.warnings.iter().cloned());
        self.chunks_embedded += o.chunks_embedded;
        self.chunks_reused += o.chunks_reused;
        self.embed_seconds += o.embed_seconds;
    }
}

/// What a sync of one source did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SyncReport {
    pub source: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub commits: usize,
    pub seconds: f64,
    pub table_version: u64,
}

/// Progress, reported after each commit.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub pages_done: usize,
    pub pages_total: usize,
    pub chunks_embedded: usize,
    pub elapsed: Duration,
}

impl Failure {
    /// A failure of one file of `source`.
    pub fn of(source: &str, e: &cairn_ingest::Error) -> Self {
        Failure {
            source: source.into(),
            path: e.path().map(rel_string).unwrap_or_default(),
            kind: e.kind().into(),
            reason: e.to_string(),
        }
    }
}

/// Bring `store` in line with the folder at `root`.
pub async fn sync_source(
    store: &SourceStore,
    root: &Path,
    embedder: Arc<dyn Embedder>,
    opts: &SyncOptions,
    mut progress: impl FnMut(Progress),
) -> Result<SyncReport> {
    let started = Instant::now();
    let source = store.id().to_string();
    let mut report = SyncReport { source: source.clone(), ..SyncReport::default() };

    let (root_buf, scan_opts) = (root.to_path_buf(), opts.scan.clone());
    let scanned = tokio::task::spawn_blocking(move || {
        let filter = PathFilter::new(&scan_opts)?;
        scan(&root_buf, &filter)
    })
    .await
    .map_err(|e| Error::Io(std::io::Error::other(e)))?
    .map_err(|e| Error::Storage {
        source_id: source.clone(),
        uri: root.display().to_string(),
        message: e.to_string(),
    })?;
    report.counts.failures.extend(scanned.problems.iter().map(|e| Failure::of(&source, e)));
    report.counts.pages_failed += scanned
        .problems
        .iter()
        .filter(|e| e.kind() != "symlink_outside_root" && e.kind() != "symlink_loop")
        .count();

    let stored = store.page_states().await?;
    let present: HashSet<&str> = scanned.files.iter().map(|f| f.slug.as_str()).collect();
    let removals: Vec<String> = stored.keys().filter(|s| !present.contains(s.as_str())).cloned().collect();
    report.counts.pages_removed = removals.len();

    let total = scanned.files.len();
    let mut pending: Vec<(ParsedPage, i64)> = Vec::new();
    let mut pending_chunks = 0usize;
    let mut done = 0usize;
    // A file whose path, modification time and size are those it was indexed with is not read
    // again (a stat cache, as git keeps); any difference means read, hash and compare.
    let (same_stat, to_read): (Vec<_>, Vec<_>) = scanned.files.iter().partition(|f| {
        stored.get(&f.slug).is_some_and(|s| {
            s.clean
                && s.mtime_ms == f.mtime_ms
                && f.mtime_ms != 0
                && s.bytes == f.size as i64
                && s.path == rel_string(&f.rel)
        })
    });
    report.counts.pages_unchanged += same_stat.len();
    done += same_stat.len();
    // Parse in blocking groups so a large vault never blocks the async threads for long.
    for group in to_read.chunks(256) {
        let (root_buf, parse, src) = (root.to_path_buf(), opts.parse.clone(), source.clone());
        let files: Vec<(PathBuf, i64)> = group.iter().map(|f| (f.rel.clone(), f.mtime_ms)).collect();
        let parsed = tokio::task::spawn_blocking(move || {
            files
                .into_iter()
                .map(|(rel, mtime)| (read_page(&src, &root_buf, &rel, &parse), mtime))
                .collect::<Vec<_>>()
        })
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        for (result, mtime) in parsed {
            done += 1;
            match result {
                // A page that cannot be read keeps its last good version in the index.
                Err(e) => {
                    report.counts.pages_failed += 1;
                    report.counts.failures.push(Failure::of(&source, &e));
                }
                Ok(page) => {
                    report.counts.warnings.extend(page.problems.iter().map(|e| Failure::of(&source, e)));
                    let unchanged = stored
                        .get(&page.slug)
                        .is_some_and(|s| s.content_hash == page.content_hash && s.path == page.path);
                    if unchanged {
                        report.counts.pages_unchanged += 1;
                        continue;
                    }
                    pending_chunks += page.chunks.len();
                    pending.push((page, mtime));
                }
            }
            if pending_chunks >= opts.commit_chunks {
                commit(store, &embedder, std::mem::take(&mut pending), Vec::new(), &mut report).await?;
                pending_chunks = 0;
                progress(Progress {
                    pages_done: done,
                    pages_total: total,
                    chunks_embedded: report.counts.chunks_embedded,
                    elapsed: started.elapsed(),
                });
            }
        }
    }
    if !pending.is_empty() || !removals.is_empty() {
        commit(store, &embedder, pending, removals, &mut report).await?;
    }
    progress(Progress {
        pages_done: done,
        pages_total: total,
        chunks_embedded: report.counts.chunks_embedded,
        elapsed: started.elapsed(),
    });
    if report.commits > 0 {
        store.optimize().await?;
    }
    report.table_version = store.version().await?;
    report.seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// What one commit did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Committed {
    pub pages: usize,
    pub removals: usize,
    pub chunks_embedded: usize,
    pub chunks_reused: usize,
    /// The chunks table version after the write.
    pub version: u64,
}

/// Vectors for every chunk of `pages` (stored ones reused by text hash, the rest embedded by
/// `embed`, each distinct text once), then one write. Shared by `cairn index` and the pipeline's
/// writer, which embed on different threads. Returns the batch written, so a resident index can
/// apply it.
pub async fn commit_pages<F, Fut>(
    store: &SourceStore,
    pages: Vec<(ParsedPage, i64)>,
    removals: Vec<String>,
    embed: F,
) -> Result<(Committed, WriteBatch)>
where
    F: FnOnce(Vec<String>) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<Vec<f32>>>>,
{
    let hashes: Vec<&str> =
        pages.iter().flat_map(|(p, _)| p.chunks.iter().map(|c| c.text_hash.as_str())).collect();
    let mut known = store.vectors_by_text_hash(&hashes).await?;
    let mut missing: Vec<(String, String)> = Vec::new();
    let mut seen = HashSet::new();
    for (page, _) in &pages {
        for c in &page.chunks {
            if !known.contains_key(&c.text_hash) && seen.insert(c.text_hash.clone()) {
                missing.push((c.text_hash.clone(), c.embed_text()));
            }
        }
    }
    let mut done = Committed {
        pages: pages.len(),
        removals: removals.len(),
        chunks_reused: hashes.len() - missing.len(),
        chunks_embedded: missing.len(),
        version: 0,
    };
    if !missing.is_empty() {
        let texts: Vec<String> = missing.iter().map(|(_, t)| t.clone()).collect();
        let vectors = embed(texts).await?;
        for ((hash, _), v) in missing.into_iter().zip(vectors) {
            known.insert(hash, v);
        }
    }
    let upserts = pages
        .into_iter()
        .map(|(page, mtime_ms)| {
            let vectors = page.chunks.iter().map(|c| known[&c.text_hash].clone()).collect();
            PageWrite { page, vectors, mtime_ms }
        })
        .collect();
    let batch = WriteBatch { upserts, removals };
    done.version = store.write(&batch).await?;
    Ok((done, batch))
}

/// [`commit_pages`] with the embedder on a blocking thread, counted into `report`.
async fn commit(
    store: &SourceStore,
    embedder: &Arc<dyn Embedder>,
    pages: Vec<(ParsedPage, i64)>,
    removals: Vec<String>,
    report: &mut SyncReport,
) -> Result<()> {
    let e = embedder.clone();
    let spent = std::sync::Mutex::new(0.0);
    let (done, _) = commit_pages(store, pages, removals, |texts| async {
        let t0 = Instant::now();
        let vectors = tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            e.embed_documents(&refs).map(|x| x.vectors)
        })
        .await
        .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        *spent.lock().unwrap() = t0.elapsed().as_secs_f64();
        vectors
    })
    .await?;
    report.counts.embed_seconds += *spent.lock().unwrap();
    report.counts.chunks_reused += done.chunks_reused;
    report.counts.chunks_embedded += done.chunks_embedded;
    report.counts.pages_indexed += done.pages;
    report.commits += 1;
    Ok(())
}
