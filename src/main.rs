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
            let d = searcher.diagnose(&query, source, slug).await?;
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
