//! A search's arguments as people and agents give them, declared once: `cairn search` and
//! `cairn diagnose` read them as flags (clap), `cairn mcp`'s `search` and `diagnose` tools as
//! JSON (serde; their schema is these doc comments), and `cairn serve`'s search page from its
//! form. [`SearchArgs::request`] makes the request, through the one mode parser.

use cairn_query::{Filter, QueryError, SearchRequest};
use rmcp::schemars;

/// How a search runs: where, how hard, how many, and what it may be restricted to.
#[derive(Debug, Clone, Default, clap::Args, serde::Deserialize, schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct SearchArgs {
    /// Only these source ids (default: every source).
    #[arg(long = "source", value_name = "ID")]
    #[serde(default)]
    pub sources: Vec<String>,
    /// `fast` (keyword, title, alias; no embedding), `balanced` (default) or `thorough`.
    #[arg(long)]
    pub mode: Option<String>,
    /// Results to return (default 10, at most 100).
    #[arg(long)]
    pub limit: Option<usize>,
    /// Candidates each source gathers before they are ordered (its rank window; default the
    /// mode's: 100 in `balanced`, 300 in `thorough`, 10 in `fast`; at most 300, never fewer than
    /// the limit). Narrower is faster; the default's first answers are the same at every limit.
    #[arg(long)]
    pub window: Option<usize>,
    /// Only pages with one of these tags, without `#` (a nested tag matches its children:
    /// `project` finds `project/alpha`).
    #[arg(long = "tag", value_name = "TAG")]
    #[serde(default)]
    pub tags: Vec<String>,
    /// Only pages under one of these folders (`meetings/`) or matching one of these globs
    /// (`**/2024-*.md`).
    #[arg(long = "path", value_name = "FOLDER|GLOB")]
    #[serde(default)]
    pub paths: Vec<String>,
    /// Only pages of one of these frontmatter types.
    #[arg(long = "type", value_name = "TYPE")]
    #[serde(default)]
    pub types: Vec<String>,
    /// Only pages modified on or after this day (YYYY-MM-DD).
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub after: Option<String>,
    /// Only pages modified before this day (YYYY-MM-DD).
    #[arg(long, value_name = "YYYY-MM-DD")]
    pub before: Option<String>,
}

impl SearchArgs {
    /// The request for `query` (a mode that is not one is a usage error, named).
    pub fn request(&self, query: impl Into<String>) -> Result<SearchRequest, QueryError> {
        let mut req = SearchRequest::new(query);
        req.sources = self.sources.clone();
        req.mode = self.mode.as_deref().unwrap_or("balanced").parse()?;
        req.limit = self.limit.unwrap_or(10);
        req.window = self.window;
        req.filter = Filter {
            tags: self.tags.clone(),
            paths: self.paths.clone(),
            types: self.types.clone(),
            after: self.after.clone(),
            before: self.before.clone(),
        };
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        query: String,
        #[command(flatten)]
        search: SearchArgs,
    }

    #[test]
    fn flags_and_json_give_the_same_request() {
        let cli = Cli::parse_from([
            "x",
            "owls",
            "--mode",
            "fast",
            "--tag",
            "birds",
            "--path",
            "zoo/",
            "--after",
            "2024-01-02",
            "--window",
            "40",
        ]);
        let json: SearchArgs = serde_json::from_str(
            r#"{"mode": "fast", "tags": ["birds"], "paths": ["zoo/"], "after": "2024-01-02", "window": 40}"#,
        )
        .unwrap();
        let (a, b) = (cli.search.request(cli.query).unwrap(), json.request("owls").unwrap());
        assert_eq!(serde_json::to_value(&a).unwrap(), serde_json::to_value(&b).unwrap());
        assert_eq!(
            (a.mode, a.limit, a.window, a.filter.tags.as_slice()),
            (cairn_query::Mode::Fast, 10, Some(40), &["birds".to_string()][..])
        );
        let bad = SearchArgs { mode: Some("quick".into()), ..SearchArgs::default() }.request("owls");
        assert!(bad.unwrap_err().to_string().contains("quick"));
    }
}
