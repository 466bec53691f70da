//! The `cairn` command line. Only wiring: `args` holds the verbs and their flags, each verb
//! module calls the library crates, and each report prints itself (a `Display` beside its type).

/// `println!` that ends the process quietly when stdout is a closed pipe (`cairn search … | head`).
macro_rules! out {
    ($($arg:tt)*) => {
        crate::cli::show(&format_args!("{}\n", format_args!($($arg)*)))
    };
}

mod args;
mod eval;
mod index;
mod page;
mod search;
mod state;
mod tools;
mod watch;

use anyhow::Result;
pub use args::Cli;
use args::{Command, Common, SourcesArg};
use cairn::Cairn;
use std::process::ExitCode;

/// A mistake in the command line: exit code 2.
#[derive(Debug)]
pub struct Usage(String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// 2 for a mistake in the request (bad flag values, an empty query, limit 0, an unknown source
/// or mode), 1 for a failure the message explains.
pub fn exit_code(e: &anyhow::Error) -> u8 {
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

/// Run one verb.
pub async fn run(command: Command, common: Common) -> Result<ExitCode> {
    use Command as C;
    let ok = |()| ExitCode::SUCCESS;
    match command {
        C::Index { sources, json } => index::index(config(&common, &sources)?, json, false).await,
        C::Reindex { targets, sources, json } => index::reindex(&common, &targets, &sources, json).await,
        C::Watch { sources, json, once } => watch::watch(config(&common, &sources)?, json, once).await,
        C::Mcp { sources } => cairn::mcp::serve(config(&common, &sources)?).await.map(ok),
        C::Serve { sources, listen, token_file, allow_writes, allow_hosts, allow_origins } => {
            let options =
                cairn::serve::Options { listen, token_file, allow_writes, allow_hosts, allow_origins };
            cairn::serve::serve(config(&common, &sources)?, options).await.map(ok)
        }
        C::Replay { log, into, json } => tools::replay(&common, log, into, json).await.map(ok),
        C::Stats { log, days, json } => state::stats(&common, log, days, json).await.map(ok),
        C::Status { json } => state::status(&common, json).await.map(ok),
        C::Forget { id } => state::forget(&common, &id).await.map(ok),
        C::Doctor { repair, json } => state::doctor(&common, repair, json).await,
        C::Flush { pages } => state::flush(&common, pages).await.map(ok),
        C::Reconcile { id, allow_removals, json } => {
            state::reconcile(&common, &id, allow_removals, json).await
        }
        C::Search { query, search, json, explain, sizing } => {
            search::search(&common, searched(&search, query, explain)?, json, &sizing).await.map(ok)
        }
        C::Check { title, aliases, body, body_file, sources, json, sizing } => {
            let body = match (body, body_file) {
                (Some(b), _) => b,
                (None, Some(f)) if f.as_os_str() == "-" => std::io::read_to_string(std::io::stdin())?,
                (None, Some(f)) => std::fs::read_to_string(&f)
                    .map_err(|e| Usage(format!("--body-file {}: {e}", f.display())))?,
                (None, None) => String::new(),
            };
            let draft = cairn_query::check::Draft { title, aliases, body, sources };
            search::check(&common, &draft, json, &sizing).await.map(ok)
        }
        C::Diagnose { query, target: t, search, json } => {
            search::diagnose(&common, searched(&search, query, false)?, &t, json).await.map(ok)
        }
        C::SwampStubs { dir, n } => tools::swamp_stubs(&dir, n).map(ok),
        C::Eval(a) if a.exists => eval::exists(a).await,
        C::Eval(a) if a.links => eval::links(a).await,
        C::Eval(a) if a.drafts.is_some() => eval::drafts(&common, a).await,
        C::Eval(a) => eval::eval(&common, a).await,
        C::Get { target: t, json } => page::get(&common, &t, json).await.map(ok),
        C::Links { target: t, json } => page::links(&common, &t, json).await.map(ok),
        C::Duplicates { threshold, json } => page::duplicates(&common, threshold, json).await.map(ok),
        C::Selftest { source, per_family, mode, json } => {
            eval::selftest(&common, source, per_family, &mode, json).await.map(ok)
        }
        C::Scan { dirs, json } => tools::scan(&common, &dirs, json),
    }
}

/// Print a report: its JSON on one line, or its text.
fn report<T: serde::Serialize + std::fmt::Display>(report: &T, json: bool) -> Result<()> {
    if json {
        out!("{}", serde_json::to_string(report)?);
    } else {
        show(report);
    }
    Ok(())
}

/// Print a report's text (its lines end in a newline already); a closed stdout ends the
/// process quietly.
fn show(text: &impl std::fmt::Display) {
    use std::io::Write as _;
    if let Err(e) = write!(std::io::stdout().lock(), "{text}")
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

fn config(common: &Common, sources: &SourcesArg) -> Result<cairn::Config> {
    cairn::config(common.config.as_deref(), &sources.dirs, &sources.sources, common.db.clone())
        .map_err(|e| Usage(format!("{e:#}")).into())
}

/// The configuration without folders named on the command line (a verb that reads the index).
fn config_only(common: &Common) -> Result<cairn::Config> {
    config(common, &SourcesArg::default())
}

/// `SOURCE:SLUG`.
fn target(t: &str) -> Result<(String, String)> {
    t.split_once(':')
        .map(|(s, g)| (s.to_string(), g.to_string()))
        .ok_or_else(|| Usage(format!("`{t}`: expected SOURCE:SLUG, e.g. notes:projects/amphitheater")).into())
}

/// `fast`, `balanced` or `thorough`.
/// The request `args` make for `query` (a bad mode is bad usage).
fn searched(
    args: &cairn::search_args::SearchArgs,
    query: String,
    explain: bool,
) -> Result<cairn_query::SearchRequest, Usage> {
    let mut request = args.request(query).map_err(|e| Usage(e.to_string()))?;
    request.explain = explain;
    Ok(request)
}

fn mode(m: &str) -> Result<cairn_query::Mode, Usage> {
    m.parse().map_err(|e: cairn_query::QueryError| Usage(e.to_string()))
}

/// A source id as given on the command line.
fn source_id(id: &str) -> Result<(), Usage> {
    cairn::validate_source_id(id).map_err(|e| Usage(e.to_string()))
}

/// A handle for a one-shot command: a client of the owner, or a reader of the tables.
async fn attach(common: &Common, purpose: &str, with_model: bool) -> Result<Cairn> {
    Ok(Cairn::attach(config_only(common)?, purpose, with_model).await?)
}
