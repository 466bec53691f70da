//! cairn keeps a hybrid (keyword + vector) index of folders of markdown notes up to date and
//! answers queries with evidence. This crate is the embedded API and the CLI's wiring; the work
//! happens in `cairn-ingest`, `cairn-index`, `cairn-query` and `cairn-actors`.

use anyhow::{Context, Result, bail};
use cairn_index::{
    Database, Embedder, Manifest, OrtEmbedder, OrtOptions, SyncOptions, SyncReport, sync_source,
};
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, read_page, scan};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A source id: `^[a-z0-9][a-z0-9-]{0,31}$`.
pub fn validate_source_id(id: &str) -> Result<()> {
    cairn_actors::config::validate_source_id(id).map_err(anyhow::Error::msg)
}

/// The id of a source given as a bare folder: its name, slugified and cut to 32 characters.
pub fn source_id_from_dir(dir: &Path) -> Result<String> {
    let canon = dir.canonicalize().with_context(|| format!("source folder {}", dir.display()))?;
    let name = canon.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut id: String = cairn_ingest::slug::slugify_segment(&name)
        .chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' })
        .take(32)
        .collect();
    id = id.trim_matches('-').to_string();
    if id.is_empty() {
        id = "notes".into();
    }
    validate_source_id(&id)?;
    Ok(id)
}

/// A source named on the command line or in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    pub id: String,
    pub root: PathBuf,
}

impl SourceSpec {
    /// `id=dir` (from `--source`).
    pub fn parse_assignment(s: &str) -> Result<Self> {
        let Some((id, dir)) = s.split_once('=') else {
            bail!("`--source {s}`: expected ID=DIR, e.g. --source notes=~/vault");
        };
        validate_source_id(id)?;
        Ok(Self { id: id.into(), root: PathBuf::from(dir) })
    }

    /// A bare folder: id from its name.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        Ok(Self { id: source_id_from_dir(dir)?, root: dir.to_path_buf() })
    }
}

/// Positional folders and `--source id=dir`s, ids checked for duplicates.
pub fn source_specs(dirs: &[PathBuf], assignments: &[String]) -> Result<Vec<SourceSpec>> {
    let mut specs: Vec<SourceSpec> = dirs.iter().map(|d| SourceSpec::from_dir(d)).collect::<Result<_>>()?;
    for a in assignments {
        specs.push(SourceSpec::parse_assignment(a)?);
    }
    let mut seen = std::collections::HashSet::new();
    for s in &specs {
        if !seen.insert(&s.id) {
            bail!("two sources are named `{}`; give one another id with --source ID=DIR", s.id);
        }
    }
    Ok(specs)
}

/// The database URI: `--db`, else `$CAIRN_DB`, else the user's data directory + `cairn`.
pub fn default_db_uri() -> String {
    dirs::data_dir().unwrap_or_else(|| PathBuf::from(".")).join("cairn").display().to_string()
}

/// What `cairn index` reports: totals over every source, then each source.
#[derive(Debug, Default, Serialize)]
pub struct IndexSummary {
    #[serde(flatten)]
    pub counts: cairn_index::Counts,
    pub seconds: f64,
    /// Sources that could not be indexed at all (unreadable root, damaged tables), with why.
    pub sources_failed: Vec<Failure>,
    pub sources: Vec<SyncReport>,
    /// Peak resident memory of this process so far, in MiB (Linux; absent elsewhere).
    pub peak_rss_mib: Option<f64>,
}

/// Peak resident set size of this process (`VmHWM`), in MiB.
pub fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb: f64 =
        status.lines().find(|l| l.starts_with("VmHWM:"))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

impl IndexSummary {
    fn add(&mut self, r: SyncReport) {
        self.counts.add(&r.counts);
        self.sources.push(r);
    }

    /// Whether anything is in the index for the sources named.
    pub fn anything_indexed(&self) -> bool {
        self.counts.pages_indexed + self.counts.pages_unchanged > 0
    }
}

/// Index (incrementally) every source into the database at `db_uri`. A source that fails is
/// reported and the others go on; `rebuild` drops each source's tables first.
pub async fn index_sources(db_uri: &str, specs: &[SourceSpec], rebuild: bool) -> Result<IndexSummary> {
    let started = std::time::Instant::now();
    let db = Database::open(db_uri).await?;
    let embedder: Arc<dyn Embedder> =
        Arc::new(tokio::task::spawn_blocking(|| OrtEmbedder::open(OrtOptions::default())).await??);
    let manifest = Manifest::current(embedder.model_id(), embedder.dim());
    let mut summary = IndexSummary::default();
    let show_progress = std::io::stderr().is_terminal();
    for spec in specs {
        let store = if rebuild {
            db.rebuild_source(&spec.id, &manifest).await
        } else {
            match db.open_source(&spec.id, &manifest).await {
                Err(cairn_index::Error::ManifestMismatch { .. }) => {
                    eprintln!("source `{}` was built by another model or version; rebuilding it", spec.id);
                    db.rebuild_source(&spec.id, &manifest).await
                }
                other => other,
            }
        };
        let result = match store {
            Ok(store) => {
                let id = spec.id.clone();
                sync_source(&store, &spec.root, embedder.clone(), &SyncOptions::default(), |p| {
                    if show_progress {
                        let rate = p.chunks_embedded as f64 / p.elapsed.as_secs_f64().max(1e-3);
                        let left = p.pages_total.saturating_sub(p.pages_done);
                        let eta = if p.pages_done > 0 {
                            p.elapsed.as_secs_f64() / p.pages_done as f64 * left as f64
                        } else {
                            0.0
                        };
                        eprint!(
                            "\r{id}: {}/{} pages, {rate:.1} chunks/s, ETA {eta:.0} s   ",
                            p.pages_done, p.pages_total
                        );
                    }
                })
                .await
            }
            Err(e) => Err(e),
        };
        if show_progress {
            eprintln!();
        }
        match result {
            Ok(report) => summary.add(report),
            Err(e) => summary.sources_failed.push(Failure {
                source: spec.id.clone(),
                path: spec.root.display().to_string(),
                kind: "source".into(),
                reason: e.to_string(),
            }),
        }
    }
    summary.seconds = started.elapsed().as_secs_f64();
    summary.peak_rss_mib = peak_rss_mib();
    Ok(summary)
}

/// The sources of a database opened for searching (read into memory, as a running `cairn watch`
/// holds them), with the model loaded once.
#[derive(Debug)]
pub struct Searcher {
    stores: Vec<cairn_index::SourceStore>,
    residents: Vec<cairn_index::Resident>,
    embedder: Option<OrtEmbedder>,
    /// Sources whose tables could not be opened, with why.
    broken: Vec<(String, String)>,
}

impl Searcher {
    /// Open every source in the database; `with_model` loads the embedder (not needed for
    /// `fast` mode).
    pub async fn open(db_uri: &str, with_model: bool) -> Result<Self> {
        let db = Database::open(db_uri).await?;
        let model = async {
            if with_model {
                Ok::<_, anyhow::Error>(Some(
                    tokio::task::spawn_blocking(|| OrtEmbedder::open(OrtOptions::default())).await??,
                ))
            } else {
                Ok(None)
            }
        };
        let load = async {
            let (mut stores, mut residents, mut broken) = (Vec::new(), Vec::new(), Vec::new());
            for id in db.source_ids().await? {
                let opened = match db.open_existing(&id).await {
                    Ok(s) => cairn_index::Resident::load(&s).await.map(|r| (s, r)),
                    Err(e) => Err(e),
                };
                match opened {
                    Ok((s, r)) => {
                        stores.push(s);
                        residents.push(r);
                    }
                    Err(e) => broken.push((id, e.to_string())),
                }
            }
            Ok::<_, anyhow::Error>((stores, residents, broken))
        };
        let (embedder, loaded) = futures::join!(model, load);
        let (stores, residents, broken) = loaded?;
        Ok(Self { stores, residents, embedder: embedder?, broken })
    }

    fn parts(&self) -> (Vec<&cairn_index::Resident>, Option<&dyn Embedder>) {
        (self.residents.iter().collect(), self.embedder.as_ref().map(|e| e as &dyn Embedder))
    }

    pub async fn search(&self, req: &cairn_query::SearchRequest) -> Result<cairn_query::SearchResponse> {
        let (refs, embedder) = self.parts();
        let mut resp = cairn_query::search(&refs, embedder, req).await?;
        for (id, why) in &self.broken {
            resp.degraded.push(format!("source_failed:{id}"));
            resp.notes.push(format!("{id}: {why}"));
        }
        Ok(resp)
    }

    /// Where one page stands at every layer for a query, with its ingest state (from the
    /// event log in `log_dir`, when there is one).
    pub async fn diagnose(
        &self,
        query: &str,
        source: &str,
        slug: &str,
        log_dir: Option<&Path>,
    ) -> Result<cairn_query::Diagnosis> {
        let (refs, embedder) = self.parts();
        let d = cairn_query::diagnose(&refs, embedder, query, source, slug).await?;
        let Some(store) = self.stores.iter().find(|s| s.id() == source) else { return Ok(d) };
        let ingest = cairn_actors::history::ingest_state(store, log_dir, slug, d.page.as_ref()).await;
        Ok(d.with_ingest(ingest))
    }
}

/// Answer one query over the sources stored in the database.
///
/// As `cairn search` does it from its own process: each source's pending changes and lag come
/// from the status a running `cairn watch` publishes (a source nothing watches is said so), and
/// the answer is journaled as a `query_answered` event in the database's event log.
pub async fn search_db(
    db_uri: &str,
    req: &cairn_query::SearchRequest,
) -> Result<cairn_query::SearchResponse> {
    let searcher = Searcher::open(db_uri, req.mode != cairn_query::Mode::Fast).await?;
    let mut resp = searcher.search(req).await?;
    let Some(log_dir) = cairn_actors::Config::new(db_uri, vec![]).event_log_dir() else {
        return Ok(resp);
    };
    let published = cairn_actors::published::read(&log_dir);
    cairn_actors::query::apply_freshness(&mut resp, |s| cairn_actors::published::freshness(&published, s));
    let kind = cairn_actors::EventKind::QueryAnswered(Box::new(cairn_actors::query::telemetry(&resp)));
    if let Err(e) = cairn_actors::log::append_from_outside(&log_dir, cairn_actors::event::QUERY_STREAM, kind)
    {
        tracing::warn!("event log {}: {e}; this answer is not journaled", log_dir.display());
    }
    Ok(resp)
}

pub mod eval;
pub mod swamp;

/// A stored page, as `cairn get` prints it.
pub async fn get_page(db_uri: &str, source: &str, slug: &str) -> Result<cairn_index::PageRecord> {
    let db = Database::open(db_uri).await?;
    let store = db.open_existing(source).await?;
    store.page(slug).await?.with_context(|| {
        format!(
            "no page `{slug}` in source `{source}`; slugs are vault paths without .md, e.g. notes/my-page"
        )
    })
}

/// What `cairn scan` reports for one source.
#[derive(Debug, Serialize)]
pub struct ScanSummary {
    pub source: String,
    pub root: String,
    pub pages: Vec<PageSummary>,
    pub failures: Vec<Failure>,
}

/// One parsed page, as `cairn scan` shows it.
#[derive(Debug, Serialize)]
pub struct PageSummary {
    pub slug: String,
    pub path: String,
    pub title: String,
    pub aliases: Vec<String>,
    pub tags: Vec<String>,
    pub links: usize,
    pub chunks: usize,
    pub problems: Vec<String>,
}

pub use cairn_index::Failure;

impl ScanSummary {
    pub fn print_table(&self) {
        println!(
            "source {} ({}): {} pages, {} failures",
            self.source,
            self.root,
            self.pages.len(),
            self.failures.len()
        );
        for p in &self.pages {
            let aliases =
                if p.aliases.is_empty() { String::new() } else { format!(" aliases={:?}", p.aliases) };
            println!("  {:<40} {:<40} chunks={} links={}{}", p.slug, p.title, p.chunks, p.links, aliases);
            for problem in &p.problems {
                println!("    warning: {problem}");
            }
        }
        for f in &self.failures {
            println!("  failed: {}", f.reason);
        }
    }
}

/// Scan and parse one source without storing anything.
pub fn scan_source(id: &str, root: &Path) -> Result<ScanSummary> {
    let report = scan(root, &PathFilter::new(&ScanOptions::default())?)?;
    let mut failures: Vec<Failure> = report.problems.iter().map(|e| Failure::of(id, e)).collect();
    let mut pages = Vec::new();
    for file in &report.files {
        match read_page(id, root, &file.rel, &ParseOptions::default()) {
            Ok(p) => pages.push(PageSummary {
                problems: p.problems.iter().map(ToString::to_string).collect(),
                slug: p.slug,
                path: p.path,
                title: p.title,
                aliases: p.aliases,
                tags: p.tags,
                links: p.links.len(),
                chunks: p.chunks.len(),
            }),
            Err(e) => failures.push(Failure::of(id, &e)),
        }
    }
    Ok(ScanSummary { source: id.to_string(), root: root.display().to_string(), pages, failures })
}

pub use cairn_actors::{Cairn, Config, SourceConfig};

/// The configuration of `cairn watch` / `cairn mcp`: `--config` if given (its sources, plus
/// any given on the command line), else the command line's folders; the database is `--db` /
/// `$CAIRN_DB`, else the config's, else the default.
pub fn live_config(
    config: Option<&Path>,
    dirs: &[PathBuf],
    assignments: &[String],
    db: Option<String>,
) -> Result<Config> {
    let specs = source_specs(dirs, assignments)?;
    let extra =
        specs.into_iter().map(|s| SourceConfig { id: s.id, root: s.root, include: vec![], exclude: vec![] });
    let mut c = match config {
        Some(path) => Config::load(path).map_err(anyhow::Error::msg)?,
        None => Config::new(default_db_uri(), Vec::new()),
    };
    c.sources.extend(extra);
    if let Some(db) = db {
        c.db = db;
    }
    c.validate().map_err(anyhow::Error::msg)?;
    Ok(c)
}

pub mod mcp;
pub mod stats;

/// Ctrl-C or SIGTERM.
pub async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
