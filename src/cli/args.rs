//! The command line's words: the verbs and their flags.

use cairn::search_args::SearchArgs;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(name = "cairn", version, about = "A live hybrid index of folders of markdown notes")]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the index lives and how it is configured (every subcommand).
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Database URI: a folder, or an object-store URI (s3://…) passed to LanceDB (default: the
    /// config's, else the user's data directory).
    #[arg(long, env = "CAIRN_DB", global = true)]
    pub db: Option<String>,
    /// A cairn.toml: database, sources, model, limits, debounce.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
}

/// Which folders to index.
#[derive(Args, Debug, Clone, Default)]
pub struct SourcesArg {
    /// Folders to index; each is a source whose id is the folder's name.
    pub dirs: Vec<PathBuf>,
    /// A source with an explicit id: ID=DIR (repeatable).
    #[arg(long = "source", value_name = "ID=DIR")]
    pub sources: Vec<String>,
}

/// How much an answer printed with `--json` carries.
#[derive(Args, Debug, Clone)]
pub struct Sizing {
    /// With --json: `ids`, `snippets` (each result's best chunk cut) or `full` (default).
    #[arg(long, default_value = "full")]
    pub detail: String,
    /// With --json: keep the answer under about this many tokens (results left out from the
    /// end, `truncated: true` and `left_out` saying how many).
    #[arg(long)]
    pub max_tokens: Option<usize>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
    /// Serve the live index over HTTP: MCP (streamable HTTP) at /mcp, the verbs as JSON at
    /// /api/VERB, and a web page at / (search, pages, sources, telemetry). Loopback only unless
    /// --listen says otherwise, and then only with --token-file. With no folders, the sources the
    /// database holds.
    Serve {
        #[command(flatten)]
        sources: SourcesArg,
        /// Address to listen on (port 0: any free port, printed at start).
        #[arg(long, default_value = "127.0.0.1:7767")]
        listen: std::net::SocketAddr,
        /// A file holding the bearer token every request must carry (required off loopback).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Also answer the verbs that change the database (add_source, reindex, reconcile…).
        #[arg(long)]
        allow_writes: bool,
        /// Another name this server is reached by, for the `Host` check (repeatable).
        #[arg(long = "allow-host", value_name = "HOST")]
        allow_hosts: Vec<String>,
        /// Another web origin allowed to call it from a browser, e.g. https://app.example.org
        /// (repeatable).
        #[arg(long = "allow-origin", value_name = "ORIGIN")]
        allow_origins: Vec<String>,
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
    /// Verify every source (tables open and read whole, pages and chunks agree, snapshots, state
    /// files, event log; on S3 the lease and head) and say what is damaged and what `--repair`
    /// would do. Exit 1 while something is damaged
    Doctor {
        /// Repair, least loss first: set a torn manifest aside, restore the newest version that
        /// reads, remove a torn snapshot, rebuild a source from its folder only when nothing
        /// else can. Needs the database to itself (stop `cairn watch` first)
        #[arg(long)]
        repair: bool,
        #[arg(long)]
        json: bool,
    },
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
        #[command(flatten)]
        sizing: Sizing,
        /// Per result: each arm's rank and score, the fusion, boosts and why the evidence is what it is.
        #[arg(long)]
        explain: bool,
    },
    /// Before writing a note: check a draft (its title, aliases, body) against the index. Says
    /// `exists`, `probable`, `related` or `none`, with the pages behind it and what to do.
    Check {
        /// The title the draft would have.
        #[arg(long, default_value = "")]
        title: String,
        /// Another name of the draft (repeatable).
        #[arg(long = "alias")]
        aliases: Vec<String>,
        /// The draft's body as text.
        #[arg(long, conflicts_with = "body_file")]
        body: Option<String>,
        /// The draft's body from a file (`-`: standard input).
        #[arg(long)]
        body_file: Option<PathBuf>,
        /// Only these sources (repeatable; default: every source).
        #[arg(long = "source")]
        sources: Vec<String>,
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        sizing: Sizing,
    },
    /// Run judged queries and report retrieval metrics; with --gate, fail below the floors.
    Eval(EvalArgs),
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
    /// Print a stored page with its body: `cairn get SOURCE:SLUG`, or one section of it:
    /// `cairn get SOURCE:SLUG#ANCHOR`, as a result's `chunk.section` names it.
    Get {
        /// SOURCE:SLUG or SOURCE:SLUG#ANCHOR, e.g. notes:projects/amphitheater#history
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

// No doc comment: the variant's above is the subcommand's help.
#[derive(Args, Debug)]
pub struct EvalArgs {
    /// JSON Lines query file (or a bootstrap queries.json); not with --exists, --links,
    /// --subjects, --typos or --drafts.
    #[arg(required_unless_present_any = ["exists", "links", "subjects", "typos", "drafts"])]
    pub queries: Option<PathBuf>,
    #[arg(long = "source")]
    pub sources: Vec<String>,
    #[arg(long, default_value = "balanced")]
    pub mode: String,
    /// Index this folder into a temporary database first and evaluate on it.
    #[arg(long)]
    pub vault: Option<PathBuf>,
    /// Results per query (Recall@100 is measured over these; 100 at most).
    #[arg(long, default_value_t = 100)]
    pub k: usize,
    /// Leave out queries whose boolean flag is true (e.g. --skip-flag ambiguous).
    #[arg(long = "skip-flag")]
    pub skip_flags: Vec<String>,
    /// Evaluation baseline: all sources pooled into one candidate set (what per-source
    /// gather prevents), instead of per-source gather.
    #[arg(long)]
    pub pooled_baseline: bool,
    /// A TOML file of floors per family and metric.
    #[arg(long)]
    pub gate: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    /// Answer every query with each source's vectors exact (f32, whatever its size), then a
    /// second time held as int8 codes (re-scored from the stored vectors, as past
    /// `exact_vectors_up_to`); print both, gate the exact figures, and fail when a figure moves
    /// by more than 0.005.
    #[arg(long)]
    pub int8_too: bool,
    /// Instead of judged queries: measure `create_safety: exists` on --vault both ways (held-out
    /// pages' names must not come back `exists`; present titles must). QUERIES is ignored.
    #[arg(long)]
    pub exists: bool,
    /// Instead of judged queries: measure names learnt from link texts on --vault, on links held
    /// out of an indexed copy (each held-out display text is asked; its target should come back).
    #[arg(long, conflicts_with = "exists")]
    pub links: bool,
    /// Instead of a query file: questions about one page in N of this vault ("what is TITLE",
    /// "how does TITLE work"), the page being the answer; asked of --vault, or of the database
    /// (which must hold this vault as a source).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["exists", "links", "queries"])]
    pub subjects: Option<PathBuf>,
    /// Instead of a query file: one title in N of this vault with one typo (a letter dropped,
    /// doubled, swapped or struck on a neighbouring key), the page being the answer; asked of
    /// --vault, or of the database (which must hold this vault as a source).
    #[arg(long, value_name = "DIR", conflicts_with_all = ["exists", "links", "queries", "subjects"])]
    pub typos: Option<PathBuf>,
    /// Instead of a query file: drafts of notes (JSON Lines: title, body, target = the file of
    /// the page each is about; `scripts/bench/gcide-drafts` makes them), each `check`ed against
    /// --vault or the database: how often the target comes first, each verdict's count (an
    /// `exists` is always false: no draft's title names a page), and a check's time.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["exists", "links", "queries", "subjects", "typos"])]
    pub drafts: Option<PathBuf>,
    /// Answer the queries again with this rule off, on the same index, and print what it
    /// changes (repeatable).
    #[arg(long, value_enum)]
    pub ablate: Vec<cairn::eval::Rule>,
    /// With --exists: one page in N is held out, one present title in N is asked. With --links:
    /// one labelled link in N is held out. With --subjects or --typos: one page in N is asked
    /// about.
    #[arg(long, default_value_t = 20)]
    pub every: u64,
}
