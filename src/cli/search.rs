//! `cairn search` and `cairn diagnose`.

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
