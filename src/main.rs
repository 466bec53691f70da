//! The `cairn` command line. Only wiring: each subcommand calls the library crates.

use anyhow::Result;

/// `println!` that ends the process quietly when stdout is a closed pipe (`cairn search … | head`).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                std::process::exit(0);
            }
        }
    }};
}
use cairn::{Cairn, Role};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "cairn", version, about = "A live hybrid index of folders of markdown notes")]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Command,
}

/// Where the index lives and how it is configured (every subcommand).
#[derive(Args, Debug, Clone)]
struct Common {
    /// Database URI: a folder, or an object-store URI (s3://…) passed to LanceDB (default: the
    /// config's, else the user's data directory).
    #[arg(long, env = "CAIRN_DB", global = true)]
    db: Option<String>,
    /// A cairn.toml: database, sources, model, limits, debounce.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
}

/// Which folders to index.
#[derive(Args, Debug, Clone, Default)]
struct SourcesArg {
    /// Folders to index; each is a source whose id is the folder's name.
    dirs: Vec<PathBuf>,
    /// A source with an explicit id: ID=DIR (repeatable).
    #[arg(long = "source", value_name = "ID=DIR")]
    sources: Vec<String>,
}

/// How a search runs (search, diagnose).
#[derive(Args, Debug, Clone)]
struct SearchArgs {
    /// Only these sources (repeatable).
    #[arg(long = "source", value_name = "ID")]
    sources: Vec<String>,
    /// fast (no embedding), balanced, thorough.
    #[arg(long, default_value = "balanced")]
    mode: String,
    #[arg(long, default_value_t = 10)]
    limit: usize,
    /// Only pages with this tag (a nested tag matches its children: `project` finds
    /// `project/alpha`); repeatable: any of them.
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// Only pages under this folder (`meetings/`) or matching this glob (`**/2024-*.md`);
    /// repeatable: any of them.
    #[arg(long = "path", value_name = "FOLDER|GLOB")]
    paths: Vec<String>,
    /// Only pages of this frontmatter `type`; repeatable: any of them.
    #[arg(long = "type", value_name = "TYPE")]
    types: Vec<String>,
    /// Only pages modified on or after this day (YYYY-MM-DD).
    #[arg(long, value_name = "YYYY-MM-DD")]
    after: Option<String>,
    /// Only pages modified before this day (YYYY-MM-DD).
    #[arg(long, value_name = "YYYY-MM-DD")]
    before: Option<String>,
}

impl SearchArgs {
    fn request(&self, query: String, explain: bool) -> Result<cairn_query::SearchRequest, Usage> {
        let mode: cairn_query::Mode =
            self.mode.parse().map_err(|e: cairn_query::QueryError| Usage(e.to_string()))?;
        Ok(cairn_query::SearchRequest {
            query,
            sources: self.sources.clone(),
            mode,
            limit: self.limit,
            explain,
            filter: cairn_query::Filter {
                tags: self.tags.clone(),
                paths: self.paths.clone(),
                types: self.types.clone(),
                after: self.after.clone(),
                before: self.before.clone(),
            },
            pooled_baseline: false,
        })
    }
}

/// A mistake in the command line: exit code 2.
#[derive(Debug)]
struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

#[derive(Subcommand, Debug)]
enum Command {
    /// Index folders into the database: one run of the pipeline `watch` runs (incremental;
    /// unchanged pages cost nothing). Through the database's owner when one runs.
    Index {
        #[command(flatten)]
        sources: SourcesArg,
        /// One JSON summary on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Index folders, then keep the index current as files change (Ctrl-C stops, after
    /// committing what is pending). When another process owns the database, its sources are
    /// added to that owner and this one stands by to take over.
    Watch {
        #[command(flatten)]
        sources: SourcesArg,
        /// Every event as one JSON line on stdout.
        #[arg(long)]
        json: bool,
        /// Catch up with the folders, commit, and exit (the pipeline's one-shot index).
        #[arg(long)]
        once: bool,
    },
    /// Serve the live index to agents over MCP (stdio). With no folders, the sources the
    /// database holds.
    Mcp {
        #[command(flatten)]
        sources: SourcesArg,
    },
    /// Replay a recorded scenario (fixtures/events/*.jsonl) into a folder and a database.
    Replay {
        log: PathBuf,
        /// Where to write the scenario's files (default: a new temporary folder).
        #[arg(long)]
        into: Option<PathBuf>,
        #[arg(long)]
        json: bool,
    },
    /// What the index holds and how its answers have scored over time (from the event log).
    Stats {
        /// The event log folder (default: the database's).
        #[arg(long)]
        log: Option<PathBuf>,
        /// Only the last N days of queries, with the drift against the N days before.
        #[arg(long)]
        days: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// Who owns the database, and every source's state: pages, chunks waiting for vectors,
    /// pending changes, failures.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Drop sources' tables and index them again from scratch: `cairn reindex ID`, a folder, or
    /// `--source ID`.
    Reindex {
        /// Source ids (or folders).
        targets: Vec<String>,
        /// A source id, or ID=DIR (repeatable).
        #[arg(long = "source", value_name = "ID")]
        sources: Vec<String>,
        #[arg(long)]
        json: bool,
    },
    /// Remove a source from the database: its tables and state (the notes are not touched).
    Forget { id: String },
    /// Wait until everything is searchable: through the writer, every change its watchers have
    /// seen (by meaning too, unless --pages); through a reader of a database another machine
    /// writes, everything that writer has committed.
    Flush {
        /// Only by name and keyword (do not wait for vectors).
        #[arg(long)]
        pages: bool,
    },
    /// Compare a source's folder with its index now and say what was applied, held or refused.
    /// A scan that would remove most of a source, or a folder that is empty or another one than
    /// was indexed, changes nothing until `--allow-removals` says yes.
    Reconcile {
        /// The source id.
        id: String,
        /// Apply the removals the scan finds, whatever they are (the pages whose files are gone
        /// leave the index).
        #[arg(long)]
        allow_removals: bool,
        #[arg(long)]
        json: bool,
    },
    /// Search the index: results with evidence and create_safety.
    Search {
        query: String,
        #[command(flatten)]
        search: SearchArgs,
        #[arg(long)]
        json: bool,
        /// Per result: each arm's rank and score, the fusion, boosts and why the evidence is what it is.
        #[arg(long)]
        explain: bool,
    },
    /// Run judged queries and report retrieval metrics; with --gate, fail below the floors.
    Eval {
        /// JSON Lines query file (or a bootstrap queries.json); not with --exists.
        #[arg(required_unless_present = "exists")]
        queries: Option<PathBuf>,
        #[arg(long = "source")]
        sources: Vec<String>,
        #[arg(long, default_value = "balanced")]
        mode: String,
        /// Index this folder into a temporary database first and evaluate on it.
        #[arg(long)]
        vault: Option<PathBuf>,
        /// Results per query (Recall@100 is measured over these; 100 at most).
        #[arg(long, default_value_t = 100)]
        k: usize,
        /// Leave out queries whose boolean flag is true (e.g. --skip-flag ambiguous).
        #[arg(long = "skip-flag")]
        skip_flags: Vec<String>,
        /// Evaluation baseline: all sources pooled into one candidate set (what per-source
        /// gather prevents), instead of per-source gather.
        #[arg(long)]
        pooled_baseline: bool,
        /// A TOML file of floors per family and metric.
        #[arg(long)]
        gate: Option<PathBuf>,
        #[arg(long)]
        json: bool,
        /// Answer every query a second time with each source's vectors held as int8 codes (re-scored
        /// from the stored vectors, as past `exact_vectors_up_to`), print both, and fail when a
        /// figure moves by more than 0.005.
        #[arg(long)]
        int8_too: bool,
        /// Instead of judged queries: measure `create_safety: exists` on --vault both ways (held-out
        /// pages' names must not come back `exists`; present titles must). QUERIES is ignored.
        #[arg(long)]
        exists: bool,
        /// With --exists: one page in N is held out, one present title in N is asked.
        #[arg(long, default_value_t = 20)]
        every: u64,
    },
    /// Walk the query layers for one page, for the search as you ran it: where it was found or lost.
    Diagnose {
        query: String,
        /// SOURCE:SLUG of the page that should have been found.
        #[arg(long)]
        target: String,
        #[command(flatten)]
        search: SearchArgs,
        #[arg(long)]
        json: bool,
    },
    /// Test data: write the source-swamp set's bulk source (near-empty stubs) into DIR.
    SwampStubs {
        dir: PathBuf,
        #[arg(long, default_value_t = 5000)]
        n: usize,
    },
    /// Print a stored page with its body: `cairn get SOURCE:SLUG`.
    Get {
        /// SOURCE:SLUG, e.g. notes:projects/amphitheater
        target: String,
        /// The record and body as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A page's links: where each of its links leads (unresolved ones listed as such), and the
    /// pages that link to it.
    Links {
        /// SOURCE:SLUG
        target: String,
        #[arg(long)]
        json: bool,
    },
    /// Groups of pages that look like one subject, across the vault and across sources: a name
    /// they share, identical content, or near-identical chunks. Read-only.
    Duplicates {
        /// Cosine at or above which two chunks count as near-identical.
        #[arg(long, default_value_t = cairn_query::duplicates::NEAR_IDENTICAL)]
        threshold: f32,
        #[arg(long)]
        json: bool,
    },
    /// How well the index finds your own pages: queries made from each page's title, aliases,
    /// file name and headings, Hit@1 per family, each miss with diagnose's verdict.
    Selftest {
        /// Only this source.
        #[arg(long)]
        source: Option<String>,
        /// At most this many queries per family (a fixed sample).
        #[arg(long, default_value_t = 200)]
        per_family: usize,
        /// `fast`, `balanced` or `thorough`.
        #[arg(long, default_value = "balanced")]
        mode: String,
        #[arg(long)]
        json: bool,
    },
    /// Scan and parse folders and print what cairn extracts from each page (nothing stored).
    Scan {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

/// mimalloc gives back what a source's load frees, which glibc's allocator mostly keeps: an
/// owner holding a 110k-chunk source is 38% smaller with it (BENCHMARKS.md, "Reads that scale").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            // LanceDB says so when a compaction loses a commit race to one of our own commits;
            // the writer defers it and tries again (not a problem the user can act on).
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,lance::dataset::optimize=error".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    // A bug outside one page's work ends the process, so its lock goes to a standby.
    cairn_index::fault::exit_on_panic();
    // Bad flags exit 2 (clap's own code for usage errors).
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli.command, cli.common)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code(&e))
        }
    }
}

/// 2 for a mistake in the request (bad flag values, an empty query, limit 0, an unknown source
/// or mode), 1 for a failure the message explains.
fn exit_code(e: &anyhow::Error) -> u8 {
    for cause in e.chain() {
        if cause.downcast_ref::<Usage>().is_some()
            || cause.downcast_ref::<cairn_actors::Error>().is_some_and(cairn_actors::Error::is_usage)
            || cause.downcast_ref::<cairn_query::QueryError>().is_some_and(cairn_query::QueryError::is_usage)
        {
            return 2;
        }
    }
    1
}

fn config(common: &Common, sources: &SourcesArg) -> Result<cairn::Config> {
    cairn::config(common.config.as_deref(), &sources.dirs, &sources.sources, common.db.clone())
        .map_err(|e| Usage(format!("{e:#}")).into())
}

/// `SOURCE:SLUG`.
fn target(t: &str) -> Result<(String, String)> {
    t.split_once(':')
        .map(|(s, g)| (s.to_string(), g.to_string()))
        .ok_or_else(|| Usage(format!("`{t}`: expected SOURCE:SLUG, e.g. notes:projects/amphitheater")).into())
}

/// A handle for a one-shot command: a client of the owner, or a reader of the tables.
async fn attach(common: &Common, purpose: &str, with_model: bool) -> Result<Cairn> {
    Ok(Cairn::attach(config(common, &SourcesArg::default())?, purpose, with_model).await?)
}

async fn run(command: Command, common: Common) -> Result<ExitCode> {
    match command {
        Command::Index { sources, json } => index(config(&common, &sources)?, json, false).await,
        Command::Reindex { targets, sources, json } => {
            let mut c = config(&common, &SourcesArg::default())?;
            for t in targets.iter().chain(&sources) {
                if let Some((id, dir)) = t.split_once('=') {
                    c.sources.push(cairn::SourceSpec::parse_assignment(&format!("{id}={dir}"))?.config());
                } else if std::path::Path::new(t).is_dir() {
                    c.sources.push(cairn::SourceSpec::from_dir(std::path::Path::new(t))?.config());
                } else {
                    cairn::validate_source_id(t).map_err(|e| Usage(e.to_string()))?;
                    // A bare id: the folder the database records for it.
                    let db = c.database().await?;
                    let info = db.sources().await?.into_iter().find(|s| s.id == *t).ok_or_else(|| {
                        Usage(format!(
                            "no source `{t}` in {}; give its folder: cairn reindex --source {t}=DIR",
                            c.db
                        ))
                    })?;
                    let root = info.root.ok_or_else(|| Usage(format!("the database records no folder for `{t}`; give it: cairn reindex --source {t}=DIR")))?;
                    c.sources.push(cairn::SourceConfig {
                        id: info.id,
                        root: root.into(),
                        include: info.include,
                        exclude: info.exclude,
                    });
                }
            }
            if c.sources.is_empty() {
                return Err(
                    Usage("name the sources to reindex: cairn reindex ID (or a folder)".into()).into()
                );
            }
            index(c, json, true).await
        }
        Command::Watch { sources, json, once } => watch(config(&common, &sources)?, json, once).await,
        Command::Mcp { sources } => {
            cairn::mcp::serve(config(&common, &sources)?).await.map(|()| ExitCode::SUCCESS)
        }
        Command::Replay { log, into, json } => {
            let base = std::env::temp_dir().join(format!("cairn-replay-{}", std::process::id()));
            let dir = into.unwrap_or_else(|| base.join("vault"));
            let db = common.db.clone().unwrap_or_else(|| base.join("db").display().to_string());
            let r = tokio::task::spawn_blocking(move || cairn_actors::replay::replay_file(&log, &dir, &db))
                .await??;
            if json {
                out!("{}", serde_json::to_string(&r)?);
            } else {
                for s in &r.status {
                    out!("{}: {} pages, {} failures", s.source, s.pages, s.failures.len());
                }
                out!(
                    "replayed {} ({} steps) into {} (db: {}; events: {}/events/events.jsonl)",
                    r.scenario,
                    r.steps,
                    r.folder.display(),
                    r.db,
                    r.db
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stats { log, days, json } => {
            let stats = match log {
                Some(log) => {
                    let c = config(&common, &SourcesArg::default())?;
                    cairn_actors::stats::collect(&c, Some(&log), days).await?
                }
                None => attach(&common, "stats", false).await?.stats(days).await?,
            };
            if json {
                out!("{}", serde_json::to_string(&stats)?);
            } else {
                print_stats(&stats);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { json } => {
            let status = attach(&common, "status", false).await?.status().await?;
            if json {
                out!("{}", serde_json::to_string(&status)?);
            } else {
                print_status(&status);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Forget { id } => {
            cairn::validate_source_id(&id).map_err(|e| Usage(e.to_string()))?;
            let c = config(&common, &SourcesArg::default())?;
            let db = c.db.clone();
            let opts =
                cairn::OpenOptions { purpose: "forget".into(), standby: false, register_sources: false };
            let cairn = Cairn::open_with(c, opts).await?;
            let r = cairn.remove_source(&id, true).await;
            cairn.shutdown().await?;
            r?;
            eprintln!("cairn: forgot source `{id}` (its tables and state in {db}; the notes are untouched)");
            Ok(ExitCode::SUCCESS)
        }
        Command::Flush { pages } => {
            let cairn = attach(&common, "flush", false).await?;
            if pages {
                cairn.flush_pages().await?
            } else {
                cairn.flush().await?
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Reconcile { id, allow_removals, json } => {
            cairn::validate_source_id(&id).map_err(|e| Usage(e.to_string()))?;
            let c = config(&common, &SourcesArg::default())?;
            let opts =
                cairn::OpenOptions { purpose: "reconcile".into(), standby: false, register_sources: false };
            let cairn = Cairn::open_with(cairn::Config { watch: false, ..c }, opts).await?;
            let r = cairn.reconcile(&id, allow_removals).await;
            let root = cairn.status().await.ok().and_then(|s| s.sources.into_iter().find(|s| s.source == id));
            cairn.shutdown().await?;
            let r = r?;
            if json {
                out!("{}", serde_json::to_string(&r)?);
            } else {
                print_reconcile(&r, &root.map(|s| s.root).unwrap_or_default());
            }
            Ok(if r.unavailable.is_some() { ExitCode::from(1) } else { ExitCode::SUCCESS })
        }
        Command::Search { query, search, json, explain } => {
            let req = search.request(query, explain)?;
            let cairn = attach(&common, "search", req.mode != cairn_query::Mode::Fast).await?;
            let resp = cairn.search(req).await?;
            if json {
                out!("{}", serde_json::to_string(&resp)?);
            } else {
                print_results(&resp);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Diagnose { query, target: t, search, json } => {
            let (source, slug) = target(&t)?;
            let req = search.request(query, false)?;
            let cairn = attach(&common, "diagnose", req.mode != cairn_query::Mode::Fast).await?;
            let d = cairn.diagnose(req, &source, &slug).await?;
            if json {
                out!("{}", serde_json::to_string(&d)?);
            } else {
                print_diagnosis(&d, &source, &slug);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::SwampStubs { dir, n } => {
            cairn::swamp::write_stubs(&dir, n)?;
            eprintln!("wrote {n} stubs under {}", dir.join("models").display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval { mode, vault, gate, json, exists: true, every, .. } => {
            let mode: cairn_query::Mode =
                mode.parse().map_err(|e: cairn_query::QueryError| Usage(e.to_string()))?;
            let vault = vault.ok_or_else(|| Usage("--exists needs --vault DIR".into()))?;
            let work = std::env::temp_dir().join(format!("cairn-exists-{}", std::process::id()));
            let report = cairn::eval::exists_trust(&vault, &work, every, mode).await;
            let _ = std::fs::remove_dir_all(&work);
            let report = report?;
            if json {
                out!("{}", serde_json::to_string(&report)?);
            } else {
                out!(
                    "pages {} (held out {}): false exists {}/{} = {:.4} ({} more named by a present page); exists recall {}/{} = {:.4}",
                    report.pages,
                    report.held_out,
                    report.false_exists,
                    report.absent_queries,
                    report.false_exists_rate,
                    report.false_exists_named_elsewhere,
                    report.exists_found,
                    report.present_queries,
                    report.exists_recall
                );
                for m in report.misses.iter().take(20) {
                    eprintln!(
                        "{}: {:?} -> {:?} {:?} cosine {:?} (wanted {:?})",
                        m.kind, m.query, m.top, m.evidence, m.cosine, m.expected
                    );
                }
            }
            if let Some(g) = gate {
                let text =
                    std::fs::read_to_string(&g).map_err(|e| anyhow::anyhow!("{}: {e}", g.display()))?;
                let breaches = cairn::eval::check_exists_gates(&report, &text)?;
                for b in &breaches {
                    eprintln!("gate breached: {b}");
                }
                if !breaches.is_empty() {
                    return Ok(ExitCode::from(1));
                }
                eprintln!("gates passed ({})", g.display());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval {
            queries,
            sources,
            mode,
            vault,
            k,
            skip_flags,
            pooled_baseline,
            gate,
            json,
            int8_too,
            ..
        } => {
            let mode: cairn_query::Mode =
                mode.parse().map_err(|e: cairn_query::QueryError| Usage(e.to_string()))?;
            let queries = queries.ok_or_else(|| Usage("name a query file".into()))?;
            let judged = cairn::eval::load_queries(&queries, &skip_flags)?;
            let temp = vault
                .as_ref()
                .map(|_| std::env::temp_dir().join(format!("cairn-eval-{}", std::process::id())));
            let mut c = config(&common, &SourcesArg::default())?;
            if let (Some(dir), Some(t)) = (&vault, &temp) {
                c.db = t.display().to_string();
                c.sources = vec![cairn::SourceSpec::from_dir(dir)?.config()];
                c.watch = false;
                let summary = cairn::index(c.clone(), false, false).await?;
                eprintln!(
                    "indexed {} pages ({} failed) into {}",
                    summary.counts.pages_indexed, summary.counts.pages_failed, c.db
                );
                c.sources.clear();
            }
            let with_model = mode != cairn_query::Mode::Fast;
            let cairn = Cairn::attach(c.clone(), "eval", with_model).await?;
            let report = cairn::eval::run(&cairn, &judged, &sources, mode, k, pooled_baseline).await?;
            drop(cairn);
            let mut moved = Vec::new();
            if int8_too {
                let coded = cairn::Config { exact_vectors_up_to: 0, ..c };
                let coded = Cairn::attach(coded, "eval", with_model).await?;
                let int8 = cairn::eval::run(&coded, &judged, &sources, mode, k, pooled_baseline).await?;
                eprintln!("-- the same queries, int8-coded vectors re-scored from the stored ones:");
                print_eval(&int8);
                moved = cairn::eval::moved(&report, &int8, 0.005);
                eprintln!("-- exact vectors:");
            }
            if let Some(t) = temp {
                let _ = std::fs::remove_dir_all(t);
            }
            if json {
                out!("{}", serde_json::to_string(&report)?);
            } else {
                print_eval(&report);
            }
            if let Some(g) = gate {
                let text =
                    std::fs::read_to_string(&g).map_err(|e| anyhow::anyhow!("{}: {e}", g.display()))?;
                let breaches = cairn::eval::check_gates(&report, &text)?;
                for b in &breaches {
                    eprintln!("gate breached: {b}");
                }
                if !breaches.is_empty() {
                    return Ok(ExitCode::from(1));
                }
                eprintln!("gates passed ({})", g.display());
            }
            for m in &moved {
                eprintln!("int8 path differs by more than 0.005: {m}");
            }
            if !moved.is_empty() {
                return Ok(ExitCode::from(1));
            }
            if int8_too {
                eprintln!("int8 path: every figure within 0.005 of the exact one");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Get { target: t, json } => {
            let (source, slug) = target(&t)?;
            let cairn = attach(&common, "get", false).await?;
            let page = cairn.get(&source, &slug).await?.ok_or_else(|| {
                anyhow::anyhow!("no page `{slug}` in source `{source}`; slugs are vault paths without .md, e.g. notes/my-page")
            })?;
            if json {
                out!("{}", serde_json::to_string_pretty(&page)?);
            } else {
                let p = &page.page;
                out!("{} ({}:{}, {})", p.title, page.source, p.slug, p.path);
                if !p.aliases.is_empty() {
                    out!("aliases: {}", p.aliases.join(", "));
                }
                if !p.tags.is_empty() {
                    out!("tags: {}", p.tags.join(", "));
                }
                out!();
                out!("{}", page.body);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Links { target: t, json } => {
            let (source, slug) = target(&t)?;
            let cairn = attach(&common, "links", false).await?;
            let links = cairn
                .links(&source, &slug)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no page `{slug}` in source `{source}`"))?;
            if json {
                out!("{}", serde_json::to_string(&links)?);
            } else {
                out!("{} ({}:{})", links.title, links.source, links.slug);
                out!("links out ({}, {} unresolved):", links.outgoing.len(), links.unresolved);
                for l in &links.outgoing {
                    let part = l.heading.as_ref().map_or(String::new(), |h| format!("#{h}"));
                    match (&l.resolved, &l.by) {
                        (Some(to), Some(by)) => out!("  [[{}{part}]] -> {to} (by {by})", l.target),
                        _ => out!("  [[{}{part}]] -> unresolved", l.target),
                    }
                }
                out!("linked from ({}):", links.backlinks.len());
                for b in &links.backlinks {
                    out!("  {} ({}) as [[{}]]", b.slug, b.title, b.target);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Duplicates { threshold, json } => {
            if !(0.0..=1.0).contains(&threshold) {
                return Err(Usage(format!("--threshold {threshold}: a cosine between 0 and 1")).into());
            }
            let groups = attach(&common, "duplicates", false).await?.duplicates(threshold).await?;
            if json {
                out!("{}", serde_json::to_string(&groups)?);
            } else {
                for g in &groups {
                    let pages: Vec<String> =
                        g.pages.iter().map(|p| format!("{}:{}", p.source, p.slug)).collect();
                    out!("{}: {} ({})", g.kind, pages.join(", "), g.evidence);
                }
                if groups.is_empty() {
                    out!("no duplicate candidates");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Selftest { source, per_family, mode, json } => {
            let mode: cairn_query::Mode =
                mode.parse().map_err(|e: cairn_query::QueryError| Usage(e.to_string()))?;
            let cairn = attach(&common, "selftest", mode != cairn_query::Mode::Fast).await?;
            let opts = cairn::selftest::SelftestOptions { source, per_family, mode };
            let report = cairn::selftest::selftest(&cairn, &opts).await?;
            if json {
                out!("{}", serde_json::to_string(&report)?);
                return Ok(ExitCode::SUCCESS);
            }
            out!(
                "selftest of {} ({} pages, mode {}, at most {per_family} queries per family)",
                report.sources.join(", "),
                report.pages,
                name(&report.mode)
            );
            out!(
                "{:<10} {:>7} {:>6} {:>7} {:>9} {:>11}",
                "family",
                "queries",
                "hit@1",
                "exists",
                "ambiguous",
                "not indexed"
            );
            for f in &report.families {
                out!(
                    "{:<10} {:>7} {:>6.3} {:>7} {:>9} {:>11}",
                    f.family,
                    f.queries,
                    f.hit_at_1,
                    f.exists,
                    f.ambiguous,
                    f.not_indexed
                );
            }
            for f in &report.families {
                for m in &f.misses {
                    out!(
                        "miss {} {:?}: expected {}, rank 1 {} ({})",
                        f.family,
                        m.query,
                        m.expected,
                        m.top.as_deref().unwrap_or("nothing"),
                        m.verdict
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Scan { dirs, json } => {
            let opts = config(&common, &SourcesArg::default())?.limits.parse_options();
            let mut summaries = Vec::new();
            for dir in &dirs {
                let spec = cairn::SourceSpec::from_dir(dir)?;
                summaries.push(cairn::scan_source(&spec.id, &spec.root, &opts)?);
            }
            if json {
                out!("{}", serde_json::to_string(&summaries)?);
            } else {
                summaries.iter().for_each(cairn::ScanSummary::print_table);
            }
            let any = summaries.iter().any(|s| !s.pages.is_empty());
            Ok(if any { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

async fn index(config: cairn::Config, json: bool, reindex: bool) -> Result<ExitCode> {
    let db = config.db.clone();
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let summary = cairn::index(config, reindex, progress).await?;
    if json {
        out!("{}", serde_json::to_string(&summary)?);
    } else {
        for f in summary.sources_failed.iter().chain(&summary.counts.failures) {
            eprintln!("failed: {}", f.reason);
        }
        for w in &summary.counts.warnings {
            eprintln!("warning: {}", w.reason);
        }
        for held in &summary.removals_held {
            eprintln!("held: {held}");
        }
        let by = match summary.role {
            Some(Role::Client) => " by the database's owner",
            _ => "",
        };
        out!(
            "{} pages indexed, {} unchanged, {} removed, {} failed; {} chunks embedded, {} reused; {:.1} s{by} (db: {db})",
            summary.counts.pages_indexed,
            summary.counts.pages_unchanged,
            summary.counts.pages_removed,
            summary.counts.pages_failed,
            summary.counts.chunks_embedded,
            summary.counts.chunks_reused,
            summary.seconds,
        );
    }
    let nothing_failed = summary.counts.failures.is_empty() && summary.sources_failed.is_empty();
    Ok(if summary.anything_indexed() || nothing_failed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The serde name of a unit enum value (`exists`, `alias_hit`): the words of the JSON output.
fn name(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default()
}

fn print_results(resp: &cairn_query::SearchResponse) {
    for (i, r) in resp.results.iter().enumerate() {
        let ev: Vec<String> = r.evidence.iter().map(name).collect();
        out!(
            "{:>2}. {}:{}  {}  score={:.3} cosine={} [{}] create_safety={}",
            i + 1,
            r.source,
            r.slug,
            r.title,
            r.score,
            r.cosine.map_or("-".into(), |c| format!("{c:.3}")),
            ev.join(","),
            name(&r.create_safety)
        );
        if let Some(c) = &r.chunk {
            let line = c.text.lines().next().unwrap_or_default();
            out!(
                "      {} (lines {}-{}): {}",
                c.heading_path,
                c.line_start,
                c.line_end,
                line.chars().take(100).collect::<String>()
            );
        }
        if let Some(x) = &r.explain {
            out!("      {}", x.why);
        }
    }
    if resp.results.is_empty() {
        out!("no results");
    }
    for d in &resp.degraded {
        eprintln!("degraded: {d}");
    }
    for n in &resp.notes {
        eprintln!("note: {n}");
    }
}

fn print_diagnosis(d: &cairn_query::Diagnosis, source: &str, slug: &str) {
    let show = |r: Option<usize>| r.map_or("-".to_string(), |r| r.to_string());
    match &d.page {
        Some(p) => out!("page {source}:{slug}: {} ({}), {} chunks", p.title, p.path, p.chunk_count),
        None => out!("page {source}:{slug}: not in the index"),
    }
    out!("keyword arm rank: {}", show(d.keyword_rank));
    out!(
        "vector arm rank:  {} (best-chunk cosine {})",
        show(d.vector_rank),
        d.best_cosine.map_or("-".into(), |c| format!("{c:.3}"))
    );
    out!("title arm rank:   {}", show(d.title_rank));
    out!("exact name:       {}", d.exact_name);
    out!("fused in source:  {} of {} slots", show(d.fused_rank), d.source_slots);
    out!("final rank:       {} (mode {}, limit {})", show(d.final_rank), name(&d.mode), d.limit);
    if let Some(i) = &d.ingest {
        let n = |v: Option<usize>| v.map_or("-".to_string(), |v| v.to_string());
        out!(
            "ingest:           {} ({}), {} chunks, {} rows stored, {} with vectors, table version {}{}",
            i.state,
            i.file.as_deref().unwrap_or("no file"),
            n(i.chunks),
            n(i.rows),
            n(i.embedded),
            i.table_version.map_or("-".into(), |v| v.to_string()),
            i.indexed_at_version.map_or(String::new(), |v| format!(", indexed at version {v}"))
        );
        if let Some(p) = &i.problem {
            out!("problem:          {p}");
        }
        for h in &i.history {
            out!("  {h}");
        }
    }
    out!("verdict: {}", d.verdict);
}

fn print_status(s: &cairn::Status) {
    if let Some(w) = &s.writer {
        out!("writer: {w} since {}", cairn_actors::event::utc(w.since_unix_ms));
    }
    match (&s.role, &s.owner) {
        (Role::Reader, _) => {
            out!("no cairn process owns this database (this one, pid {}, read its tables)", s.pid)
        }
        (_, Some(o)) => out!(
            "owner: pid {} (cairn {}){}; {} client(s)",
            o.pid,
            o.purpose,
            if s.role == Role::Owner { ", this process" } else { "" },
            s.clients.len()
        ),
        (_, None) => {}
    }
    for c in &s.clients {
        out!("  client: pid {} (cairn {})", c.pid, c.purpose);
    }
    for src in &s.sources {
        let eta = src.eta_secs.map_or(String::new(), |e| format!(", ETA {e:.0} s"));
        out!(
            "{}: {} ({}), {} pages, {} chunks, {} waiting for vectors ({:.1}/s{eta}), {} pending changes",
            src.source,
            src.state,
            src.root,
            src.pages,
            src.chunks,
            src.vectors_pending,
            src.embed_rate,
            src.pending
        );
        if let Some(why) = src.error.as_ref().filter(|_| src.unavailable.is_some()) {
            out!("  {why}");
        }
        if let Some(held) = &src.held_removals {
            out!("  {}", held.describe(&src.source, &src.root));
        }
        for f in &src.failures {
            out!("  failing {}: {}", f.path, f.reason);
        }
    }
}

fn print_reconcile(r: &cairn::ReconcileReport, root: &str) {
    if let Some(why) = &r.unavailable {
        eprintln!("cairn: {}", why.describe(&r.source, root));
        return;
    }
    out!("{}: {} files, {} new or changed, {} removed", r.source, r.files, r.changed, r.removed);
    if let Some(held) = &r.held {
        eprintln!("cairn: {}", held.describe(&r.source, root));
    }
}

fn print_eval(r: &cairn::eval::EvalReport) {
    out!(
        "{:<24} {:>5} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>6}",
        "family",
        "n",
        "hit@1",
        "hit@3",
        "mrr10",
        "r@10",
        "r@100",
        "ndcg10",
        "fclean3"
    );
    let row = |name: &str, s: &cairn_query::metrics::Summary| {
        let m = &s.metrics;
        out!(
            "{name:<24} {:>5} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>7.3} {:>7.3} {:>6.3}",
            s.n,
            m.hit_at_1,
            m.hit_at_3,
            m.mrr_at_10,
            m.recall_at_10,
            m.recall_at_100,
            m.ndcg_at_10,
            m.forbidden_clean_at_3
        );
    };
    for (f, s) in &r.families {
        row(f, s);
    }
    row("overall", &r.overall);
    for m in r.misses.iter().take(20) {
        eprintln!("miss {}: {:?} wants {:?}, got {:?}", m.id, m.query, m.relevant, m.top);
    }
    if r.misses.len() > 20 {
        eprintln!("… {} misses in all (--json lists every one)", r.misses.len());
    }
}

async fn watch(config: cairn::Config, json: bool, once: bool) -> Result<ExitCode> {
    use futures::StreamExt;
    let ids: Vec<String> = config.sources.iter().map(|s| format!("{}={}", s.id, s.root.display())).collect();
    let db = config.db.clone();
    let opts = cairn::OpenOptions { purpose: "watch".into(), standby: !once, register_sources: true };
    // Listening from the start: Ctrl-C or SIGTERM during the catch-up (which can be long on a
    // large vault) stops the watch as cleanly as later, instead of killing it mid-way.
    let stop = cairn::stop_signal();
    tokio::pin!(stop);
    let cairn = Cairn::open_with(config, opts).await?;
    if cairn.role() == Role::Client {
        let status = cairn.status().await?;
        let owner = status
            .owner
            .as_ref()
            .map_or("another process".to_string(), |o| format!("pid {} (cairn {})", o.pid, o.purpose));
        let watched: Vec<String> =
            status.sources.iter().map(|s| format!("{}={}", s.source, s.root)).collect();
        let writes = match (&status.writer, &status.owner) {
            (Some(w), Some(o)) => w.pid == o.pid && w.host == cairn_actors::lease::host_name(),
            _ => false,
        };
        if writes {
            eprintln!("cairn: {db} is owned by {owner}, which now watches {}", watched.join(", "));
        } else {
            // An object store written from another process: this machine's process reads it.
            let writer = status.writer.as_ref().map_or("no process now".to_string(), |w| w.to_string());
            eprintln!(
                "cairn: {db} is written by {writer}; this machine's {owner} reads it and writes these folders once it holds the writer lease"
            );
            if once {
                return Err(anyhow::anyhow!(
                    "{db} is written by {writer}; `watch --once` cannot index it from here"
                ));
            }
        }
        if once {
            cairn.flush().await?;
            eprintln!("cairn: up to date (through the owner)");
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("cairn: standing by to take over if it stops; Ctrl-C to quit");
    }
    if cairn.role() == Role::Reader {
        // An object store written from another process (maybe another machine).
        let writer = cairn.status().await?.writer.map_or("another process".to_string(), |w| w.to_string());
        if once {
            return Err(anyhow::anyhow!(
                "{db} is written by {writer}; this machine reads it, so `watch --once` cannot index it from here"
            ));
        }
        eprintln!(
            "cairn: {db} is written by {writer}; this process follows its commits and stands by to take over as the writer; Ctrl-C to quit"
        );
    }
    if cairn.role() != Role::Owner {
        let mut roles = cairn.roles();
        tokio::select! {
            _ = &mut stop => {
                cairn.shutdown().await?;
                return Ok(ExitCode::SUCCESS);
            }
            _ = roles.wait_for(|r| *r == Role::Owner) => {
                eprintln!("cairn: the writer stopped; this process writes {db} now");
            }
        }
    }
    let mut events = cairn.subscribe().await?;
    let watched = ids.join(", ");
    eprintln!(
        "cairn: watching {} (db: {db})",
        if watched.is_empty() { "the sources the database holds".into() } else { watched }
    );
    let printer = tokio::spawn(async move {
        use cairn_actors::EventKind as K;
        // Per source: chunks embedded since this process started, and when the first were.
        let mut embedding: std::collections::HashMap<String, (usize, std::time::Instant)> =
            Default::default();
        while let Some(e) = events.next().await {
            if json {
                if let Ok(line) = serde_json::to_string(&*e) {
                    out!("{line}");
                }
                continue;
            }
            match &e.kind {
                K::Reconciled { changed: 0, removed: 0, held: 0, .. } => {}
                K::Committed { pages: 0, removed: 0, chunks_embedded, chunks_pending, .. } => {
                    let (done, since) =
                        embedding.entry(e.source.clone()).or_insert((0, std::time::Instant::now()));
                    *done += chunks_embedded;
                    let rate = *done as f64 / since.elapsed().as_secs_f64().max(1.0);
                    let eta = if *chunks_pending > 0 && rate > 0.0 {
                        format!(", ETA {:.0} s", *chunks_pending as f64 / rate)
                    } else {
                        String::new()
                    };
                    eprintln!(
                        "{}: vectors: {done} chunks embedded, {chunks_pending} to go ({rate:.1} chunks/s{eta})",
                        e.source
                    );
                }
                K::Reconciled { .. }
                | K::SourceUnavailable { .. }
                | K::SourceAvailable
                | K::RemovalsHeld { .. }
                | K::Committed { .. }
                | K::PageFailed { .. }
                | K::PageWarning { .. }
                | K::FileRenamed { .. }
                | K::PageRemoved { .. }
                | K::StageFailed { .. } => eprintln!("{e}"),
                _ => {}
            }
        }
    });
    let summary = |s: &cairn::Status| {
        s.sources
            .iter()
            .map(|s| {
                format!("{}: {} pages, {} chunks waiting for vectors", s.source, s.pages, s.vectors_pending)
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    // `None`: stopped by a signal before the catch-up ended (what is pending is committed at
    // the shutdown below; the chunks still waiting for vectors are embedded at the next start).
    let caught_up = async {
        match cairn.flush_pages().await {
            Ok(()) => eprintln!(
                "cairn: every page is searchable by name and keyword ({})",
                summary(&cairn.status().await?)
            ),
            Err(e) => eprintln!("cairn: catching up failed: {e}"),
        }
        let caught_up = cairn.flush().await;
        match &caught_up {
            Ok(()) => eprintln!("cairn: up to date ({})", summary(&cairn.status().await?)),
            Err(e) => eprintln!("cairn: catching up failed: {e}"),
        }
        Ok::<_, anyhow::Error>(caught_up.is_ok())
    };
    let caught_up = tokio::select! {
        r = caught_up => Some(r?),
        _ = &mut stop => None,
    };
    match caught_up {
        Some(_) if once => {}
        Some(_) => {
            eprintln!("cairn: watching for changes; Ctrl-C to stop");
            (&mut stop).await;
            eprintln!("cairn: stopping (committing what is pending)");
        }
        None => eprintln!("cairn: stopping (committing what is pending)"),
    }
    let failed = cairn
        .status()
        .await
        .map(|s| {
            s.sources.iter().any(|s| {
                s.state == "retrying"
                    || s.unavailable.as_ref().is_some_and(|u| *u != cairn_ingest::Unavailable::NotHere)
            })
        })
        .unwrap_or(false);
    cairn.shutdown().await?;
    printer.abort();
    // A stop before the catch-up ended is how a watch ends; for `--once` it left work undone.
    let done = caught_up.unwrap_or(!once);
    Ok(if done && !failed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_stats(s: &cairn_actors::stats::Stats) {
    for src in &s.sources {
        out!(
            "{}: {} pages, {} chunks, {} failing files",
            src.source,
            src.pages,
            src.chunks,
            src.failing.len()
        );
        for f in &src.failing {
            out!("  failing {}: {}", f.path, f.reason);
        }
        for c in &src.alias_collisions {
            out!("  name `{}` is claimed by {}", c.name, c.slugs.join(", "));
        }
    }
    let q = &s.queries;
    out!(
        "queries answered: {} ({} empty, {} degraded); latency p50 {:.1} ms, p99 {:.1} ms",
        q.answered,
        q.empty,
        q.degraded,
        q.p50_latency_ms,
        q.p99_latency_ms
    );
    for (k, v) in &q.by_create_safety {
        out!("  rank 1 create_safety {k}: {v}");
    }
    for (k, v) in &q.top_score_buckets {
        out!("  rank 1 base score {k}: {v}");
    }
    for (k, v) in &q.empty_by_cause {
        out!("  empty ({k}): {v}");
    }
    let group = |what: &str, k: &str, m: &cairn_actors::stats::GroupStats| {
        let buckets: Vec<String> = m.top_score_buckets.iter().map(|(b, n)| format!("{b}: {n}")).collect();
        out!(
            "  {what} {k}: {} queries, mean rank-1 base score {:.3} ({})",
            m.queries,
            m.mean_top_base_score,
            buckets.join(", ")
        );
    };
    for (k, m) in &q.by_mode {
        group("mode", k, m);
    }
    for (k, m) in &q.by_source {
        group("rank 1 from source", k, m);
    }
    if let Some(d) = &q.drift {
        match (d.previous_mean_top_base_score, d.change) {
            (Some(p), Some(c)) => out!(
                "drift: mean rank-1 base score {:.3} over the last {} day(s), {:.3} the {} before ({c:+.3})",
                d.mean_top_base_score,
                d.days,
                p,
                d.days
            ),
            _ => {
                out!("drift: {:.3} over the last {} day(s); no queries before", d.mean_top_base_score, d.days)
            }
        }
    }
    if !q.days.is_empty() {
        out!(
            "{:<12} {:>7} {:>10} {:>10} {:>8} {:>8}",
            "day",
            "queries",
            "mean top",
            "median",
            "exists",
            "p50 ms"
        );
        for d in &q.days {
            out!(
                "{:<12} {:>7} {:>10.3} {:>10.3} {:>8.2} {:>8.1}",
                d.day,
                d.queries,
                d.mean_top_base_score,
                d.median_top_base_score,
                d.exists_at_rank_1,
                d.p50_latency_ms
            );
        }
    }
}
