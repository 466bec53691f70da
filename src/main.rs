//! The `cairn` command line. Only wiring: each subcommand calls the library crates.

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(name = "cairn", version, about = "A live hybrid index of folders of markdown notes")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the index lives.
#[derive(Args, Debug)]
struct DbArg {
    /// Database URI: a folder, or an object-store URI (s3://…) passed to LanceDB unchanged.
    #[arg(long, env = "CAIRN_DB", default_value_t = cairn::default_db_uri())]
    db: String,
}

/// Which folders to index.
#[derive(Args, Debug)]
struct SourcesArg {
    /// Folders to index; each is a source whose id is the folder's name.
    dirs: Vec<PathBuf>,
    /// A source with an explicit id: ID=DIR (repeatable).
    #[arg(long = "source", value_name = "ID=DIR")]
    sources: Vec<String>,
}

/// What a running pipeline (`watch`, `mcp`) is configured by.
#[derive(Args, Debug)]
struct LiveArgs {
    #[command(flatten)]
    sources: SourcesArg,
    /// Database URI (default: the config's, else the user's data directory).
    #[arg(long, env = "CAIRN_DB")]
    db: Option<String>,
    /// A cairn.toml with sources, db, model and debounce settings.
    #[arg(long)]
    config: Option<PathBuf>,
}

impl LiveArgs {
    /// The configuration, or the exit code of bad usage (the message is printed).
    fn config(self) -> Result<cairn::Config, ExitCode> {
        let s = self.sources;
        cairn::live_config(self.config.as_deref(), &s.dirs, &s.sources, self.db).map_err(|e| {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        })
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Index folders into the database (incrementally: unchanged pages cost nothing).
    Index {
        #[command(flatten)]
        sources: SourcesArg,
        #[command(flatten)]
        db: DbArg,
        /// One JSON summary on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Index folders, then keep the index current as files change (Ctrl-C stops, after
    /// committing what is pending).
    Watch {
        #[command(flatten)]
        live: LiveArgs,
        /// Every event as one JSON line on stdout.
        #[arg(long)]
        json: bool,
        /// Catch up with the folders, commit, and exit (the pipeline's one-shot index).
        #[arg(long)]
        once: bool,
    },
    /// Serve the live index to agents over MCP (stdio): tools search, get, diagnose, status.
    Mcp {
        #[command(flatten)]
        live: LiveArgs,
    },
    /// Replay a recorded scenario (fixtures/events/*.jsonl) into a folder and a database.
    Replay {
        log: PathBuf,
        /// Where to write the scenario's files (default: a new temporary folder).
        #[arg(long)]
        into: Option<PathBuf>,
        /// Database to build (default: `db` next to the folder).
        #[arg(long)]
        db: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// What the index holds and how its answers have scored over time (from the event log).
    Stats {
        #[command(flatten)]
        db: DbArg,
        /// The event log folder (default: `events/` in the database folder).
        #[arg(long)]
        log: Option<PathBuf>,
        /// Only the last N days of queries, with the drift against the N days before.
        #[arg(long)]
        days: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// Drop the sources' tables and index them again from scratch.
    Reindex {
        #[command(flatten)]
        sources: SourcesArg,
        #[command(flatten)]
        db: DbArg,
        #[arg(long)]
        json: bool,
    },
    /// Search the index: results with evidence and create_safety.
    Search {
        query: String,
        /// Only these sources (repeatable).
        #[arg(long = "source")]
        sources: Vec<String>,
        /// fast (no embedding), balanced, thorough.
        #[arg(long, default_value = "balanced")]
        mode: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[arg(long)]
        json: bool,
        /// Per result: each arm's rank and score, the fusion, boosts and why the evidence is what it is.
        #[arg(long)]
        explain: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Run judged queries and report retrieval metrics; with --gate, fail below the floors.
    Eval {
        /// JSON Lines query file (or a bootstrap queries.json).
        queries: PathBuf,
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
        #[command(flatten)]
        db: DbArg,
    },
    /// Walk the query layers for one page: where it was found or lost.
    Diagnose {
        query: String,
        /// SOURCE:SLUG of the page that should have been found.
        #[arg(long)]
        target: String,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        db: DbArg,
    },
    /// Test data: write the source-swamp set's bulk source (near-empty stubs) into DIR.
    SwampStubs {
        dir: PathBuf,
        #[arg(long, default_value_t = 5000)]
        n: usize,
    },
    /// Print a stored page: `cairn get SOURCE:SLUG`.
    Get {
        /// SOURCE:SLUG, e.g. notes:projects/amphitheater
        target: String,
        #[command(flatten)]
        db: DbArg,
    },
    /// Scan and parse folders and print what cairn extracts from each page (nothing stored).
    Scan {
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Index { sources, db, json } => index(sources, db, json, false).await,
        Command::Reindex { sources, db, json } => index(sources, db, json, true).await,
        Command::Watch { live, json, once } => match live.config() {
            Ok(config) => watch(config, json, once).await,
            Err(code) => Ok(code),
        },
        Command::Mcp { live } => match live.config() {
            Ok(config) => cairn::mcp::serve(config).await.map(|()| ExitCode::SUCCESS),
            Err(code) => Ok(code),
        },
        Command::Replay { log, into, db, json } => {
            let base = std::env::temp_dir().join(format!("cairn-replay-{}", std::process::id()));
            let dir = into.unwrap_or_else(|| base.join("vault"));
            let db = db.unwrap_or_else(|| base.join("db").display().to_string());
            let r = tokio::task::spawn_blocking(move || cairn_actors::replay::replay_file(&log, &dir, &db))
                .await??;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                for s in &r.status {
                    println!("{}: {} pages, {} failures", s.source, s.pages, s.failures.len());
                }
                println!(
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
        Command::Stats { db, log, days, json } => {
            let log = log.or_else(|| (!db.db.contains("://")).then(|| PathBuf::from(&db.db).join("events")));
            let stats = cairn::stats::collect(&db.db, log.as_deref(), days).await?;
            if json {
                println!("{}", serde_json::to_string(&stats)?);
            } else {
                print_stats(&stats);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Search { query, sources, mode, limit, json, explain, db } => {
            let mode: cairn_query::Mode = match mode.parse() {
                Ok(m) => m,
                Err(e) => {
                    eprintln!("error: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            let req =
                cairn_query::SearchRequest { query, sources, mode, limit, explain, pooled_baseline: false };
            let resp = cairn::search_db(&db.db, &req).await?;
            if json {
                println!("{}", serde_json::to_string(&resp)?);
            } else {
                print_results(&resp);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Diagnose { query, target, json, db } => {
            let Some((source, slug)) = target.split_once(':') else {
                eprintln!("error: `--target {target}`: expected SOURCE:SLUG");
                return Ok(ExitCode::from(2));
            };
            let searcher = cairn::Searcher::open(&db.db, true).await?;
            let log_dir = cairn_actors::Config::new(&db.db, vec![]).event_log_dir();
            let d = searcher.diagnose(&query, source, slug, log_dir.as_deref()).await?;
            if json {
                println!("{}", serde_json::to_string(&d)?);
            } else {
                let show = |r: Option<usize>| r.map_or("-".to_string(), |r| r.to_string());
                match &d.page {
                    Some(p) => {
                        println!("page {source}:{slug}: {} ({}), {} chunks", p.title, p.path, p.chunk_count)
                    }
                    None => println!("page {source}:{slug}: not in the index"),
                }
                println!("keyword arm rank: {}", show(d.keyword_rank));
                println!(
                    "vector arm rank:  {} (best-chunk cosine {})",
                    show(d.vector_rank),
                    d.best_cosine.map_or("-".into(), |c| format!("{c:.3}"))
                );
                println!("title arm rank:   {}", show(d.title_rank));
                println!("exact name:       {}", d.exact_name);
                println!("fused in source:  {} of {} slots", show(d.fused_rank), d.source_slots);
                println!("final rank:       {}", show(d.final_rank));
                if let Some(i) = &d.ingest {
                    let n = |v: Option<usize>| v.map_or("-".to_string(), |v| v.to_string());
                    println!(
                        "ingest:           {} ({}), {} chunks, {} stored with vectors, table version {}{}",
                        i.state,
                        i.file.as_deref().unwrap_or("no file"),
                        n(i.chunks),
                        n(i.embedded),
                        i.table_version.map_or("-".into(), |v| v.to_string()),
                        i.indexed_at_version.map_or(String::new(), |v| format!(", indexed at version {v}"))
                    );
                    if let Some(p) = &i.problem {
                        println!("problem:          {p}");
                    }
                    for h in &i.history {
                        println!("  {h}");
                    }
                }
                println!("verdict: {}", d.verdict);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::SwampStubs { dir, n } => {
            cairn::swamp::write_stubs(&dir, n)?;
            eprintln!("wrote {n} stubs under {}", dir.join("models").display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Eval { queries, sources, mode, vault, k, skip_flags, pooled_baseline, gate, json, db } => {
            let mode: cairn_query::Mode = mode.parse()?;
            let judged = cairn::eval::load_queries(&queries, &skip_flags)?;
            let temp = vault
                .as_ref()
                .map(|_| std::env::temp_dir().join(format!("cairn-eval-{}", std::process::id())));
            let db_uri = match (&vault, &temp) {
                (Some(dir), Some(t)) => {
                    let uri = t.display().to_string();
                    let summary =
                        cairn::index_sources(&uri, &[cairn::SourceSpec::from_dir(dir)?], false).await?;
                    eprintln!(
                        "indexed {} pages ({} failed) into {uri}",
                        summary.counts.pages_indexed, summary.counts.pages_failed
                    );
                    uri
                }
                _ => db.db.clone(),
            };
            let searcher = cairn::Searcher::open(&db_uri, mode != cairn_query::Mode::Fast).await?;
            let report = cairn::eval::run(&searcher, &judged, &sources, mode, k, pooled_baseline).await?;
            if let Some(t) = temp {
                let _ = std::fs::remove_dir_all(t);
            }
            if json {
                println!("{}", serde_json::to_string(&report)?);
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
            Ok(ExitCode::SUCCESS)
        }
        Command::Get { target, db } => {
            let Some((source, slug)) = target.split_once(':') else {
                eprintln!("error: `{target}`: expected SOURCE:SLUG, e.g. notes:projects/amphitheater");
                return Ok(ExitCode::from(2));
            };
            let page = cairn::get_page(&db.db, source, slug).await?;
            println!("{}", serde_json::to_string_pretty(&page)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Scan { dirs, json } => {
            let mut summaries = Vec::new();
            for dir in &dirs {
                let spec = cairn::SourceSpec::from_dir(dir)?;
                summaries.push(cairn::scan_source(&spec.id, &spec.root)?);
            }
            if json {
                println!("{}", serde_json::to_string(&summaries)?);
            } else {
                summaries.iter().for_each(cairn::ScanSummary::print_table);
            }
            let any = summaries.iter().any(|s| !s.pages.is_empty());
            Ok(if any { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

async fn index(sources: SourcesArg, db: DbArg, json: bool, rebuild: bool) -> Result<ExitCode> {
    let specs = cairn::source_specs(&sources.dirs, &sources.sources)?;
    if specs.is_empty() {
        eprintln!("error: name at least one folder to index, or --source ID=DIR");
        return Ok(ExitCode::from(2));
    }
    let summary = cairn::index_sources(&db.db, &specs, rebuild).await?;
    if json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        for f in summary.sources_failed.iter().chain(&summary.counts.failures) {
            eprintln!("failed: {}", f.reason);
        }
        for w in &summary.counts.warnings {
            eprintln!("warning: {}", w.reason);
        }
        println!(
            "{} pages indexed, {} unchanged, {} removed, {} failed; {} chunks embedded, {} reused; {:.1} s (db: {})",
            summary.counts.pages_indexed,
            summary.counts.pages_unchanged,
            summary.counts.pages_removed,
            summary.counts.pages_failed,
            summary.counts.chunks_embedded,
            summary.counts.chunks_reused,
            summary.seconds,
            db.db
        );
    }
    let nothing_failed = summary.counts.failures.is_empty() && summary.sources_failed.is_empty();
    Ok(if summary.anything_indexed() || nothing_failed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_results(resp: &cairn_query::SearchResponse) {
    for (i, r) in resp.results.iter().enumerate() {
        let ev: Vec<String> = r.evidence.iter().map(|e| format!("{e:?}")).collect();
        println!(
            "{:>2}. {}:{}  {}  score={:.3} cosine={} [{}] create_safety={:?}",
            i + 1,
            r.source,
            r.slug,
            r.title,
            r.score,
            r.cosine.map_or("-".into(), |c| format!("{c:.3}")),
            ev.join(","),
            r.create_safety
        );
        if let Some(c) = &r.chunk {
            let line = c.text.lines().next().unwrap_or_default();
            println!(
                "      {} (lines {}-{}): {}",
                c.heading_path,
                c.line_start,
                c.line_end,
                line.chars().take(100).collect::<String>()
            );
        }
        if let Some(x) = &r.explain {
            println!("      {}", x.why);
        }
    }
    if resp.results.is_empty() {
        println!("no results");
    }
    for d in &resp.degraded {
        eprintln!("degraded: {d}");
    }
    for n in &resp.notes {
        eprintln!("note: {n}");
    }
}

fn print_eval(r: &cairn::eval::EvalReport) {
    println!(
        "{:<24} {:>5} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>6}",
        "family", "n", "hit@1", "hit@3", "mrr10", "r@10", "r@100", "ndcg10", "fclean3"
    );
    let row = |name: &str, s: &cairn_query::metrics::Summary| {
        let m = &s.metrics;
        println!(
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
    let cairn = cairn::Cairn::open(config).await?;
    let mut events = cairn.subscribe();
    eprintln!("cairn: watching {} (db: {db})", ids.join(", "));
    let printer = tokio::spawn(async move {
        use cairn_actors::EventKind as K;
        while let Some(e) = events.next().await {
            if json {
                if let Ok(line) = serde_json::to_string(&*e) {
                    println!("{line}");
                }
                continue;
            }
            match &e.kind {
                K::Reconciled { changed: 0, removed: 0, .. } => {}
                K::Reconciled { .. }
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
    let caught_up = cairn.flush().await;
    let summary = |c: &cairn::Cairn| {
        c.status().iter().map(|s| format!("{}: {} pages", s.source, s.pages)).collect::<Vec<_>>().join(", ")
    };
    match &caught_up {
        Ok(()) => eprintln!("cairn: up to date ({})", summary(&cairn)),
        Err(e) => eprintln!("cairn: catching up failed: {e}"),
    }
    if !once {
        eprintln!("cairn: watching for changes; Ctrl-C to stop");
        cairn::stop_signal().await;
        eprintln!("cairn: stopping (committing what is pending)");
    }
    cairn.shutdown().await?;
    printer.abort();
    let failed = cairn.status().iter().any(|s| s.state == "retrying");
    Ok(if caught_up.is_ok() && !failed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

fn print_stats(s: &cairn::stats::Stats) {
    for src in &s.sources {
        println!(
            "{}: {} pages, {} chunks, {} failing files",
            src.source,
            src.pages,
            src.chunks,
            src.failing.len()
        );
        for f in &src.failing {
            println!("  failing {}: {}", f.path, f.reason);
        }
        for c in &src.alias_collisions {
            println!("  name `{}` is claimed by {}", c.name, c.slugs.join(", "));
        }
    }
    let q = &s.queries;
    println!(
        "queries answered: {} ({} empty, {} degraded); latency p50 {:.1} ms, p99 {:.1} ms",
        q.answered, q.empty, q.degraded, q.p50_latency_ms, q.p99_latency_ms
    );
    for (k, v) in &q.by_create_safety {
        println!("  rank 1 create_safety {k}: {v}");
    }
    for (k, v) in &q.top_score_buckets {
        println!("  rank 1 base score {k}: {v}");
    }
    for (k, v) in &q.empty_by_cause {
        println!("  empty ({k}): {v}");
    }
    let group = |what: &str, k: &str, m: &cairn::stats::GroupStats| {
        let buckets: Vec<String> = m.top_score_buckets.iter().map(|(b, n)| format!("{b}: {n}")).collect();
        println!(
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
            (Some(p), Some(c)) => println!(
                "drift: mean rank-1 base score {:.3} over the last {} day(s), {:.3} the {} before ({c:+.3})",
                d.mean_top_base_score, d.days, p, d.days
            ),
            _ => println!(
                "drift: {:.3} over the last {} day(s); no queries before",
                d.mean_top_base_score, d.days
            ),
        }
    }
    if !q.days.is_empty() {
        println!(
            "{:<12} {:>7} {:>10} {:>10} {:>8} {:>8}",
            "day", "queries", "mean top", "median", "exists", "p50 ms"
        );
        for d in &q.days {
            println!(
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
