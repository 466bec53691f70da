//! cairn keeps a hybrid (keyword + vector) index of folders of markdown notes up to date and
//! answers queries with evidence. This crate is the embedded API and the CLI's wiring; the work
//! happens in `cairn-ingest`, `cairn-index`, `cairn-query` and `cairn-actors`.
//!
//! [`Cairn`] is the one handle: the owner of a database (its pipeline, model and indexes), a
//! client of the process that owns it, or, for a one-shot command when no process does, a
//! reader of its tables.

use anyhow::{Context, Result, bail};
use cairn_actors::core::event::{Event, EventKind};
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, read_scanned, scan};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub use cairn_actors::{Cairn, Config, OpenOptions, ReconcileReport, Role, SourceConfig, Status};

pub mod eval;
pub mod mcp;
pub mod search_args;
pub mod selftest;
pub mod serve;
pub mod swamp;

/// A source id: `^[a-z0-9][a-z0-9-]{0,31}$`.
pub fn validate_source_id(id: &str) -> Result<()> {
    cairn_actors::core::config::validate_source_id(id).map_err(anyhow::Error::msg)
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
        Ok(Self { id: id.into(), root: full_path(Path::new(dir))? })
    }

    /// A bare folder: id from its name.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let root = full_path(dir)?;
        Ok(Self { id: source_id_from_dir(&root)?, root })
    }

    pub fn config(&self) -> SourceConfig {
        SourceConfig {
            id: self.id.clone(),
            root: self.root.clone(),
            include: vec![],
            exclude: vec![],
            language: None,
        }
    }
}

/// A folder named on the command line as a full path: `~` is the home, a relative one is taken
/// from the working directory here (not the owner's, which may be another process's).
pub fn full_path(p: &Path) -> Result<PathBuf> {
    let cwd = std::env::current_dir().context("the working directory is unreadable")?;
    let p = cairn_actors::core::config::resolve(&cwd, p);
    Ok(std::path::absolute(&p).unwrap_or(p))
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
    cairn_actors::core::config::default_db_uri()
}

/// The configuration of any subcommand: `--config` if given (its sources, limits, model and
/// database), plus the command line's folders; the database is `--db` / `$CAIRN_DB`, else the
/// config's, else the default.
pub fn config(
    config: Option<&Path>,
    dirs: &[PathBuf],
    assignments: &[String],
    db: Option<String>,
) -> Result<Config> {
    let specs = source_specs(dirs, assignments)?;
    let mut c = match config {
        Some(path) => Config::load(path).map_err(anyhow::Error::msg)?,
        None => Config::new(default_db_uri(), Vec::new()),
    };
    for s in specs {
        c.sources.retain(|x| x.id != s.id);
        c.sources.push(s.config());
    }
    if let Some(db) = db {
        c.db = if db.contains("://") { db } else { full_path(Path::new(&db))?.display().to_string() };
    }
    c.validate().map_err(anyhow::Error::msg)?;
    Ok(c)
}

/// A file that could not be indexed (or a page indexed with a warning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Failure {
    pub source: String,
    pub path: String,
    pub kind: String,
    pub reason: String,
}

impl Failure {
    /// A failure of one file of `source`.
    pub fn of(source: &str, e: &cairn_ingest::Error) -> Self {
        Failure {
            source: source.into(),
            path: e.path().map(cairn_ingest::rel_string).unwrap_or_default(),
            kind: e.kind().into(),
            reason: e.to_string(),
        }
    }
}

/// What indexing did to pages and chunks; summed over sources.
#[derive(Debug, Clone, Default, Serialize)]
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
    /// Time inside the embedding model.
    pub embed_seconds: f64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
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

/// What a run did to one source.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SourceReport {
    pub source: String,
    #[serde(flatten)]
    pub counts: Counts,
    pub commits: usize,
    pub table_version: u64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What `cairn index` reports: totals over every source, then each source.
#[derive(Debug, Default, Serialize)]
pub struct IndexSummary {
    #[serde(flatten)]
    pub counts: Counts,
    pub seconds: f64,
    /// Sources that could not be indexed at all (a folder missing, empty or another one; damaged
    /// tables), with why.
    pub sources_failed: Vec<Failure>,
    /// Removals found and held for a yes (`cairn reconcile ID --allow-removals`), per source:
    /// what and how many.
    pub removals_held: Vec<String>,
    /// Folders below a source's root that could not be read (or a mount point showing nothing):
    /// their pages were kept as last seen. What and what to do, per folder.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub folders_unavailable: Vec<String>,
    /// Notes that are cloud placeholders (content not on this machine): not read, kept as last
    /// indexed.
    #[serde(skip_serializing_if = "is_zero")]
    pub placeholders: usize,
    pub sources: Vec<SourceReport>,
    /// The process that did the work: this one (`owner`) or the database's owner (`client`).
    pub role: Option<Role>,
    /// Peak resident memory of this process so far, in MiB (Linux; absent elsewhere).
    pub peak_rss_mib: Option<f64>,
}

impl IndexSummary {
    /// Whether anything is in the index for the sources named.
    pub fn anything_indexed(&self) -> bool {
        self.counts.pages_indexed + self.counts.pages_unchanged > 0
    }
}

/// The events of one run, summed per source. Pages are counted once each, however many
/// commits touched them; `pages` gives each source's page count at the end (for the unchanged
/// ones).
pub fn summarize(events: &[Event], status: &[cairn_actors::SourceStatus]) -> IndexSummary {
    #[derive(Default)]
    struct Acc {
        indexed: BTreeSet<String>,
        removed: BTreeSet<String>,
        failed: BTreeMap<String, Failure>,
        warned: BTreeMap<(String, String), Failure>,
        report: SourceReport,
    }
    let mut by: BTreeMap<String, Acc> = BTreeMap::new();
    for e in events {
        let a = by.entry(e.source.clone()).or_default();
        let failure = |path: &str, kind: &str, reason: &str| Failure {
            source: e.source.clone(),
            path: path.into(),
            kind: kind.into(),
            reason: reason.into(),
        };
        match &e.kind {
            EventKind::PageIndexed { slug, path, version, .. } => {
                a.indexed.insert(slug.clone());
                a.removed.remove(slug);
                a.failed.remove(path);
                a.report.table_version = a.report.table_version.max(*version);
            }
            EventKind::PageRemoved { slug, version } => {
                a.removed.insert(slug.clone());
                a.report.table_version = a.report.table_version.max(*version);
            }
            EventKind::PageFailed { path, kind, reason } => {
                a.failed.insert(path.clone(), failure(path, kind, reason));
            }
            EventKind::PageWarning { path, kind, reason } => {
                a.warned.insert((path.clone(), kind.clone()), failure(path, kind, reason));
            }
            EventKind::Committed { chunks_embedded, chunks_reused, embed_ms, version, .. } => {
                a.report.counts.chunks_embedded += chunks_embedded;
                a.report.counts.chunks_reused += chunks_reused;
                a.report.counts.embed_seconds += *embed_ms as f64 / 1000.0;
                a.report.commits += 1;
                a.report.table_version = a.report.table_version.max(*version);
            }
            _ => {}
        }
    }
    let mut summary = IndexSummary::default();
    for s in status {
        let mut a = by.remove(&s.source).unwrap_or_default();
        let r = &mut a.report;
        r.source = s.source.clone();
        r.table_version = r.table_version.max(s.version);
        r.counts.pages_indexed = a.indexed.len();
        r.counts.pages_removed = a.removed.len();
        r.counts.pages_unchanged = s.pages.saturating_sub(r.counts.pages_indexed);
        // Links out of the root are reported, not counted as pages that failed.
        r.counts.pages_failed = a
            .failed
            .values()
            .filter(|f| f.kind != "symlink_outside_root" && f.kind != "symlink_loop")
            .count();
        r.counts.failures = a.failed.into_values().collect();
        r.counts.warnings = a.warned.into_values().collect();
        summary.counts.add(&r.counts);
        summary.sources.push(a.report);
    }
    summary
}

/// Open a database to index it: its owner when free, else a client of a long-running owner; a
/// one-shot owner (another `cairn index`) is waited for, since it exits when its run is done.
async fn open_for_index(config: Config, purpose: &str) -> Result<Cairn> {
    let one_shot = |p: &str| p == "index" || p == "reindex";
    let mut told = false;
    // The owner waited for can exit between our connecting and our asking (its run is done):
    // that call fails, and the next round takes the database or finds the new owner.
    let mut races = 0;
    let pause = std::time::Duration::from_millis(200);
    loop {
        // Sources are added to a running owner after subscribing (see `index`).
        let opts = OpenOptions { purpose: purpose.into(), standby: false, register_sources: false };
        let cairn = match Cairn::open_with(config.clone(), opts).await {
            Ok(c) => c,
            // Only once another run was seen: an error of our own (a bad folder, a bad config)
            // is reported at once, not after the retries.
            Err(_) if told && races < 50 => {
                races += 1;
                tokio::time::sleep(pause).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        // This process holds the database here: as its writer, or (an object store written from
        // another process) as its reader, which `index` refuses below.
        if cairn.role() != Role::Client {
            return Ok(cairn);
        }
        let status = match cairn.status().await {
            Ok(s) => s,
            Err(_) if races < 50 => {
                races += 1;
                let _ = cairn.shutdown().await;
                tokio::time::sleep(pause).await;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        match status.owner {
            Some(owner) if one_shot(&owner.purpose) => {
                if !told {
                    eprintln!(
                        "cairn: waiting for pid {} (cairn {}) to finish with {}",
                        owner.pid, owner.purpose, config.db
                    );
                    told = true;
                }
                cairn.shutdown().await?;
                tokio::time::sleep(pause).await;
            }
            _ => return Ok(cairn),
        }
    }
}

/// Index the configuration's sources (with `reindex`, from scratch): one run of the pipeline
/// `cairn watch` runs (catch-up scan, renames by content, include/exclude, the event log), in this
/// process when it can take the database, else through the process that owns it. Returns once
/// every page is searchable by meaning too; the report is summed from the run's events.
pub async fn index(config: Config, reindex: bool, progress: bool) -> Result<IndexSummary> {
    let started = std::time::Instant::now();
    let ids: Vec<String> = config.sources.iter().map(|s| s.id.clone()).collect();
    let sources = config.sources.clone();
    // A one-shot run: the catch-up scan and the flush's, no file watches.
    let config = Config { watch: false, ..config };
    let cairn = open_for_index(config, if reindex { "reindex" } else { "index" }).await?;
    refuse_unless_writer(&cairn).await?;
    let events = cairn.subscribe().await?;
    if cairn.role() == Role::Client {
        for s in sources {
            cairn.add_source(s).await?;
        }
    }
    let token = (std::process::id() as u64) << 32 | started.elapsed().subsec_nanos() as u64;
    let collector = tokio::spawn(collect_run(events, token, progress));
    let mut sources_failed = Vec::new();
    if reindex {
        for id in &ids {
            if let Err(e) = cairn.reindex(id).await {
                sources_failed.push(Failure {
                    source: id.clone(),
                    path: String::new(),
                    kind: "source".into(),
                    reason: e.to_string(),
                });
            }
        }
    }
    let flushed = cairn.flush_marked(true, Some(token)).await;
    let (run, flush_failed) = match flushed {
        // A source that failed (its folder is missing…) is reported below; the others are done.
        Ok(()) => (collector.await.unwrap_or_default(), Vec::new()),
        Err(cairn_actors::Error::Sources(f)) => (collector.await.unwrap_or_default(), f.0),
        Err(e) => {
            collector.abort();
            cairn.shutdown().await?;
            return Err(e.into());
        }
    };
    if progress {
        eprintln!();
    }
    let status = cairn.status().await?;
    let role = cairn.role();
    cairn.shutdown().await?;
    let named: Vec<cairn_actors::SourceStatus> =
        status.sources.iter().filter(|s| ids.is_empty() || ids.contains(&s.source)).cloned().collect();
    let mut summary = summarize(&run, &named);
    sources_failed.extend(held_back(&named, &mut summary));
    // A source whose writer keeps failing (tables that do not open, a full disk) may not say so
    // in its state (its watcher's is newer): the flush's own failure does.
    for (id, e) in flush_failed {
        if !sources_failed.iter().any(|f| f.source == id) {
            let kind = match &e {
                cairn_actors::PipelineError::CannotOpen { why, .. }
                    if cairn_index::store::unreachable(why) =>
                {
                    "source_unreachable"
                }
                cairn_actors::PipelineError::CannotOpen { .. } => "source_damaged",
                _ => "source",
            };
            let reason = e.to_string();
            sources_failed.push(Failure { source: id, path: String::new(), kind: kind.into(), reason });
        }
    }
    summary.sources_failed = sources_failed;
    summary.role = Some(role);
    summary.seconds = started.elapsed().as_secs_f64();
    summary.peak_rss_mib = cairn_actors::core::status::Memory::now().peak_rss_mib;
    Ok(summary)
}

/// Refuse (closing `cairn`) unless this process writes the database: on an object store the
/// writer may be another process than this machine's owner (the holder of the writer lease,
/// maybe on another machine), and there is one writer at a time. A lease whose holder stopped
/// renewing it (a writer killed moments ago) is waited out first, as a standby would.
pub async fn refuse_unless_writer(cairn: &Cairn) -> Result<()> {
    let status = cairn.status().await?;
    let writes_here = match (&status.writer, &status.owner) {
        (Some(w), Some(o)) => w.pid == o.pid && w.host == cairn_actors::replication::lease::host_name(),
        (Some(_), None) => false,
        (None, _) => cairn.role() == Role::Owner,
    };
    if writes_here {
        return Ok(());
    }
    let holder = if cairn.role() == Role::Reader {
        eprintln!(
            "cairn: the writer lease of {} is held; looking whether its holder still renews it",
            cairn.config().db
        );
        match cairn.wait_for_lease().await {
            cairn_actors::LeaseWait::Writing => return Ok(()),
            cairn_actors::LeaseWait::Renewed(h) => Some(format!("{h}, which renews its lease")),
            cairn_actors::LeaseWait::NotFree(h) => h.map(|h| format!("{h}, whose lease is still held")),
        }
    } else {
        None
    };
    cairn.shutdown().await?;
    let writer = holder
        .or_else(|| status.writer.map(|w| w.to_string()))
        .unwrap_or_else(|| "a process whose writer lease could not be read".into());
    let here = status.owner.filter(|o| o.pid != std::process::id()).map_or_else(String::new, |o| {
        format!(" (this machine's pid {}, cairn {}, only reads it)", o.pid, o.purpose)
    });
    Err(anyhow::anyhow!(
        "the database is written by {writer}{here}; one writer at a time: index from the writer's machine (its `cairn watch` takes these folders as `--source`), or stop it"
    ))
}

/// The run's events until the flush marked `token`, with its progress on stderr when asked.
async fn collect_run(
    mut events: futures::stream::BoxStream<'static, std::sync::Arc<Event>>,
    token: u64,
    progress: bool,
) -> Vec<Event> {
    use futures::StreamExt;
    let mut run = Vec::new();
    while let Some(e) = events.next().await {
        if matches!(e.kind, EventKind::Flushed { token: t } if t == token) {
            break;
        }
        if progress && let EventKind::Committed { chunks_pending, .. } = &e.kind {
            let pages =
                run.iter().filter(|e: &&Event| matches!(e.kind, EventKind::PageIndexed { .. })).count();
            eprint!("\r{}: {pages} pages searchable, {chunks_pending} chunks to embed   ", e.source);
        }
        run.push((*e).clone());
    }
    run
}

/// The sources held back at the end of a run: those failing (retrying, or their folder
/// unavailable), returned, and the removals held (put in `summary`).
fn held_back(named: &[cairn_actors::SourceStatus], summary: &mut IndexSummary) -> Vec<Failure> {
    let mut failed = Vec::new();
    for s in named {
        if let Some(error) = s.error.as_ref().filter(|_| {
            s.state == cairn_actors::core::status::SourceState::Retrying || s.unavailable.is_some()
        }) {
            failed.push(Failure {
                source: s.source.clone(),
                path: s.root.clone(),
                kind: if s.unavailable.is_some() { "source_unavailable" } else { "source" }.into(),
                reason: error.clone(),
            });
        }
        if let Some(held) = &s.held_removals {
            summary.removals_held.push(held.describe(&s.source, &s.root));
        }
        for folder in &s.folders_unavailable {
            summary.folders_unavailable.push(folder.describe(&s.source, &s.root));
        }
        summary.placeholders += s.placeholders;
    }
    failed
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

/// One line for the source, one per page (with its warnings), one per failure.
impl std::fmt::Display for ScanSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (pages, failures) = (self.pages.len(), self.failures.len());
        writeln!(f, "source {} ({}): {pages} pages, {failures} failures", self.source, self.root)?;
        for p in &self.pages {
            let aliases =
                if p.aliases.is_empty() { String::new() } else { format!(" aliases={:?}", p.aliases) };
            writeln!(f, "  {:<40} {:<40} chunks={} links={}{aliases}", p.slug, p.title, p.chunks, p.links)?;
            for problem in &p.problems {
                writeln!(f, "    warning: {problem}")?;
            }
        }
        for failed in &self.failures {
            writeln!(f, "  failed: {}", failed.reason)?;
        }
        Ok(())
    }
}

/// Scan and parse one source without storing anything (with the limits of `opts`).
pub fn scan_source(id: &str, root: &Path, opts: &ParseOptions) -> Result<ScanSummary> {
    let report = scan(root, &PathFilter::new(&ScanOptions::default())?)?;
    let mut failures: Vec<Failure> = report.problems.iter().map(|e| Failure::of(id, e)).collect();
    let mut pages = Vec::new();
    for file in &report.files {
        match read_scanned(id, root, &report, file, opts) {
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

/// Ctrl-C or SIGTERM. The handlers are installed when this is called (not when the future is
/// first polled), so a signal that arrives while the process is busy with something else (a
/// long catch-up) is still seen: call it before that work starts.
pub fn stop_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (term, int) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}
