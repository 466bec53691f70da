//! One page and its neighbours: `cairn get`, `cairn links`, `cairn duplicates`.

use super::args::Common;
use super::{Usage, attach, report, show, target};
use anyhow::Result;

pub async fn get(common: &Common, t: &str, json: bool) -> Result<()> {
    let (source, slug) = target(t)?;
    let cairn = attach(common, "get", false).await?;
    let page = cairn.get(&source, &slug).await?.ok_or_else(|| {
        anyhow::anyhow!(
            "no page `{slug}` in source `{source}`; slugs are vault paths without .md, e.g. notes/my-page"
        )
    })?;
    if json {
        out!("{}", serde_json::to_string_pretty(&page)?);
    } else {
        show(&page);
    }
    Ok(())
}

pub async fn links(common: &Common, t: &str, json: bool) -> Result<()> {
    let (source, slug) = target(t)?;
    let cairn = attach(common, "links", false).await?;
    let links = cairn
        .links(&source, &slug)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no page `{slug}` in source `{source}`"))?;
    report(&links, json)
}

pub async fn duplicates(common: &Common, threshold: f32, json: bool) -> Result<()> {
    if !(0.0..=1.0).contains(&threshold) {
        return Err(Usage(format!("--threshold {threshold}: a cosine between 0 and 1")).into());
    }
    let groups = attach(common, "duplicates", false).await?.duplicates(threshold).await?;
    if json {
        out!("{}", serde_json::to_string(&groups)?);
    } else if groups.is_empty() {
        out!("no duplicate candidates");
    } else {
        groups.iter().for_each(show);
    }
    Ok(())
}
