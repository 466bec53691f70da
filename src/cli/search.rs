//! `cairn search`, `cairn check` and `cairn diagnose`.

use super::args::Common;
use super::{attach, report, target};
use anyhow::Result;
use cairn_query::{Mode, SearchRequest};

pub async fn search(common: &Common, req: SearchRequest, json: bool) -> Result<()> {
    let cairn = attach(common, "search", req.mode != Mode::Fast).await?;
    let resp = cairn.search(req).await?;
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
pub async fn check(common: &Common, draft: &cairn_query::check::Draft, json: bool) -> Result<()> {
    if draft.title.trim().is_empty() && draft.aliases.is_empty() && draft.body.trim().is_empty() {
        return Err(super::Usage("a draft needs --title, --alias or a body".into()).into());
    }
    let cairn = attach(common, "check", true).await?;
    report(&cairn.check(draft).await?, json)?;
    Ok(())
}
