//! `cairn mcp`: the live index as tools for agents, over the Model Context Protocol on stdio
//! (the official Rust SDK, `rmcp`). The first process on a database owns it and runs the same
//! pipeline as `cairn watch`; an `mcp` started while another process owns it is a client of that
//! owner (no model, no index of its own) and stands by to take over. Logs go to stderr; stdout
//! carries only protocol.

use crate::search_args::SearchArgs;
use cairn_actors::Cairn;
use cairn_query::shape::Detail;
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};
use serde::Deserialize;

const INSTRUCTIONS: &str = "cairn indexes folders of markdown notes. Before writing a new page, \
`check` its draft (title, aliases, body), or `search` for its subject by name: a result with create_safety = \"exists\" was found by one of its \
own names (title, file name, alias), so the page is there (update it instead of writing a new one); \
\"probable\" is a page close in meaning or words: read it first; \"unknown\" is only weak \
similarity. An answer while a source has pending changes (pending_changes > 0), or without a \
pending_changes count, is not proof that a page is absent: wait and search again before creating \
one. `source_unavailable:ID` in `degraded` means that source's folder cannot be read now (an \
unmounted drive, an empty folder…): its pages are answered as last indexed (`stale`), and the \
notes say what to do; do not create pages for its subjects until it is back.";

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SearchToolArgs {
    /// What to look for: a page's title, one of its names, or a question about its subject.
    pub query: String,
    #[serde(flatten)]
    pub search: SearchArgs,
    /// `ids` (source, slug, title, create_safety, evidence), `snippets` (default: plus the best
    /// chunk, cut) or `full`.
    pub detail: Option<String>,
    /// Keep the answer under about this many tokens (results left out from the end, said so).
    pub max_tokens: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct CheckArgs {
    /// The title the new note would have.
    #[serde(default)]
    pub title: String,
    /// Other names it would have (frontmatter aliases).
    #[serde(default)]
    pub aliases: Vec<String>,
    /// The note's body as you would write it.
    #[serde(default)]
    pub body: String,
    /// Only these source ids (default: every source).
    #[serde(default)]
    pub sources: Vec<String>,
    /// `ids`, `snippets` (default) or `full` (each candidate's evidence per part of the draft).
    pub detail: Option<String>,
    /// Keep the answer under about this many tokens.
    pub max_tokens: Option<usize>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DuplicatesArgs {
    /// Cosine at or above which two chunks count as near-identical (default 0.95).
    pub threshold: Option<f32>,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct GetArgs {
    /// The source id (as in search results).
    pub source: String,
    /// The page's slug (as in search results), e.g. `venues/amphitheater`; or one section of it,
    /// `SLUG#ANCHOR`, as a result's `chunk.section` names it (after `SOURCE:`).
    pub slug: String,
}

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct DiagnoseArgs {
    /// The query that should have found the page.
    pub query: String,
    /// The page that should have been found: `SOURCE:SLUG`.
    pub target: String,
    /// The search as it was run.
    #[serde(flatten)]
    pub search: SearchArgs,
}

/// The MCP server over a running cairn.
#[derive(Clone)]
pub struct CairnTools {
    cairn: Cairn,
    #[allow(dead_code)] // read by the `tool_handler` macro
    tool_router: ToolRouter<Self>,
}

impl std::fmt::Debug for CairnTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CairnTools").field("cairn", &self.cairn).finish()
    }
}

/// A tool's failure: a result with `isError` whose text says what is wrong (the MCP spec's tool
/// execution error, which the agent reads), not a protocol error.
fn bad(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn json(v: &impl serde::Serialize) -> Result<String, String> {
    serde_json::to_string(v).map_err(|e| e.to_string())
}

/// An answer with its list (`list_key`) at `detail` (default `snippets`: an agent's context is
/// small) and under `max_tokens`.
fn sized(
    v: &impl serde::Serialize,
    list_key: &str,
    detail: Option<&str>,
    max_tokens: Option<usize>,
) -> Result<String, String> {
    let detail: Detail = detail.unwrap_or("snippets").parse().map_err(bad)?;
    let value = serde_json::to_value(v).map_err(bad)?;
    json(&cairn_query::shape::shape(value, list_key, detail, max_tokens))
}

#[tool_router]
impl CairnTools {
    pub fn new(cairn: Cairn) -> Self {
        Self { cairn, tool_router: Self::tool_router() }
    }

    #[tool(description = "Search the notes by a page's name or a question about its subject. Returns \
results (source, slug, title, evidence, create_safety, best chunk as a snippet), freshness and notes. \
create_safety = \"exists\" means the page is there: update it instead of writing a new one. An answer \
with pending_changes > 0 or vectors_pending > 0 is not proof of absence. Use `get` to read a page.")]
    async fn search(&self, Parameters(a): Parameters<SearchToolArgs>) -> Result<String, String> {
        let req = a.search.request(a.query).map_err(bad)?;
        let resp = self.cairn.search(req).await.map_err(bad)?;
        sized(&resp, "results", a.detail.as_deref(), a.max_tokens)
    }

    #[tool(description = "Use before writing a new note: give its draft (title, aliases, body) and get a \
verdict: exists (one of its names is a page's own name: edit that page), probable (a page is very likely its \
subject: read it, edit it or add your title as its alias), related (pages to link to) or none, with the \
evidence per part of the draft. Never writes.")]
    async fn check(&self, Parameters(a): Parameters<CheckArgs>) -> Result<String, String> {
        let draft = cairn_query::check::Draft {
            title: a.title,
            aliases: a.aliases,
            body: a.body,
            sources: a.sources,
        };
        sized(&self.cairn.check(&draft).await.map_err(bad)?, "candidates", a.detail.as_deref(), a.max_tokens)
    }

    #[tool(description = "Read one page (title, aliases, tags, path, frontmatter, links, body), or \
only the section a result's chunk.section names (slug `SLUG#ANCHOR`): read a section rather than a whole page.")]
    async fn get(&self, Parameters(a): Parameters<GetArgs>) -> Result<String, String> {
        match self.cairn.get(&a.source, &a.slug).await.map_err(bad)? {
            Some(p) => json(&p),
            None => Err(bad(format!(
                "no page `{}` in source `{}`; use a slug from a search result",
                a.slug, a.source
            ))),
        }
    }

    #[tool(description = "Explain why a page was or was not found for a query: its rank in each arm \
(keyword, vector, title), the exact-name match, the fusion and the final rank, with a verdict.")]
    async fn diagnose(&self, Parameters(a): Parameters<DiagnoseArgs>) -> Result<String, String> {
        let Some((source, slug)) = a.target.split_once(':') else {
            return Err(bad(format!("target `{}`: expected SOURCE:SLUG", a.target)));
        };
        let req = a.search.request(a.query).map_err(bad)?;
        let d = self.cairn.diagnose(req, source, slug).await.map_err(bad)?;
        json(&d)
    }

    #[tool(
        description = "A page's links: where each of its wikilinks and markdown links leads (resolved by \
path, then file name, then alias, as Obsidian does; unresolved ones say so), and the pages that link to it."
    )]
    async fn links(&self, Parameters(a): Parameters<GetArgs>) -> Result<String, String> {
        match self.cairn.links(&a.source, &a.slug).await.map_err(bad)? {
            Some(l) => json(&l),
            None => {
                Err(format!("no page `{}` in source `{}`; use a slug from a search result", a.slug, a.source))
            }
        }
    }

    #[tool(
        description = "Groups of pages that look like one subject, within a vault and across sources, each \
with its evidence: a name they share, identical content, or near-identical chunks. Read-only: decide yourself \
whether to merge them."
    )]
    async fn duplicates(&self, Parameters(a): Parameters<DuplicatesArgs>) -> Result<String, String> {
        let threshold = a.threshold.unwrap_or(cairn_query::duplicates::NEAR_IDENTICAL);
        json(&self.cairn.duplicates(threshold).await.map_err(bad)?)
    }

    #[tool(description = "This process's role (owner or client of the database's owner), the owner, \
and every source: pages, chunks still waiting for vectors, pending changes, lag, last event, files \
that could not be indexed and why.")]
    async fn status(&self) -> Result<String, String> {
        json(&self.cairn.status().await.map_err(bad)?)
    }
}

#[tool_handler]
impl ServerHandler for CairnTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions(INSTRUCTIONS)
    }
}

/// Serve MCP on stdin/stdout until the client closes stdin; then drain the pipeline like Ctrl-C
/// (as the owner), or just stop (as a client).
pub async fn serve(config: cairn_actors::Config) -> anyhow::Result<()> {
    let cairn = Cairn::open_with(config, cairn_actors::OpenOptions::new("mcp")).await?;
    tracing::info!("cairn mcp: {:?} of {}", cairn.role(), cairn.config().db);
    let server = CairnTools::new(cairn.clone()).serve(rmcp::transport::stdio()).await?;
    let why = tokio::select! {
        r = server.waiting() => { r?; "stdin closed" }
        _ = crate::stop_signal() => "signal",
    };
    cairn.shutdown().await?;
    eprintln!("cairn mcp: {why}; stopped cleanly");
    Ok(())
}
