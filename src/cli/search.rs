//! `cairn search`, `cairn check` and `cairn diagnose`.

use super::args::{Common, Sizing};
use super::{Usage, attach, report, target};
use anyhow::Result;
use cairn_query::{Mode, SearchRequest};

pub async fn search(common: &Common, req: SearchRequest, json: bool, sizing: &Sizing) -> Result<()> {
    let detail = detail(sizing)?;
    let cairn = attach(common, "search", req.mode != Mode::Fast).await?;
    let resp = cairn.search(req).await?;
    if json {
        return sized(&resp, "results", detail, sizing.max_tokens);
    }
    report(&resp, json)?;
    if !json {
        for d in &resp.degraded {
            eprintln!("degraded: {d}");
        }
        for n in &resp.notes {
            eprintln!("note: {n}");
        }
    }
    Ok(())
}

/// Where the page `t` (SOURCE:SLUG) stands at each layer for the search as given.
pub async fn diagnose(common: &Common, req: SearchRequest, t: &str, json: bool) -> Result<()> {
    let (source, slug) = target(t)?;
    let cairn = attach(common, "diagnose", req.mode != Mode::Fast).await?;
    report(&cairn.diagnose(req, &source, &slug).await?, json)
}

/// A draft against the index (see [`cairn_query::check`]).
pub async fn check(
    common: &Common,
    draft: &cairn_query::check::Draft,
    json: bool,
    sizing: &Sizing,
) -> Result<()> {
    if draft.title.trim().is_empty() && draft.aliases.is_empty() && draft.body.trim().is_empty() {
        return Err(Usage("a draft needs --title, --alias or a body".into()).into());
    }
    let detail = detail(sizing)?;
    let cairn = attach(common, "check", true).await?;
    let r = cairn.check(draft).await?;
    if json {
        return sized(&r, "candidates", detail, sizing.max_tokens);
    }
    report(&r, json)
}

fn detail(sizing: &Sizing) -> Result<cairn_query::shape::Detail> {
    Ok(sizing.detail.parse().map_err(Usage)?)
}

/// The answer's JSON at `detail`, under `max_tokens`.
fn sized(
    v: &impl serde::Serialize,
    list_key: &str,
    detail: cairn_query::shape::Detail,
    max_tokens: Option<usize>,
) -> Result<()> {
    let shaped = cairn_query::shape::shape(serde_json::to_value(v)?, list_key, detail, max_tokens);
    out!("{}", serde_json::to_string(&shaped)?);
    Ok(())
}
