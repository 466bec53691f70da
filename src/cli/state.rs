//! What the database holds and who serves it: `status`, `stats`, `flush`, `reconcile`, `forget`.

use super::args::Common;
use super::{attach, config_only, report, source_id};
use anyhow::Result;
use cairn::Cairn;
use std::path::PathBuf;
use std::process::ExitCode;

pub async fn status(common: &Common, json: bool) -> Result<()> {
    report(&attach(common, "status", false).await?.status().await?, json)
}

/// From the owner's (or the tables') event log, or from the log folder given.
pub async fn stats(common: &Common, log: Option<PathBuf>, days: Option<u32>, json: bool) -> Result<()> {
    let stats = match log {
        Some(log) => cairn_actors::ops::stats::collect(&config_only(common)?, Some(&log), days).await?,
        None => attach(common, "stats", false).await?.stats(days).await?,
    };
    report(&stats, json)
}

pub async fn flush(common: &Common, pages: bool) -> Result<()> {
    let cairn = attach(common, "flush", false).await?;
    if pages {
        cairn.flush_pages().await?
    } else {
        cairn.flush().await?
    }
    Ok(())
}

/// Open the database for one change to a source (not as a standby, registering no folders).
async fn open(config: cairn::Config, purpose: &str) -> Result<Cairn> {
    let opts = cairn::OpenOptions { purpose: purpose.into(), standby: false, register_sources: false };
    Ok(Cairn::open_with(config, opts).await?)
}

pub async fn forget(common: &Common, id: &str) -> Result<()> {
    source_id(id)?;
    let config = config_only(common)?;
    let db = config.db.clone();
    let cairn = open(config, "forget").await?;
    let r = cairn.remove_source(id, true).await;
    cairn.shutdown().await?;
    r?;
    eprintln!("cairn: forgot source `{id}` (its tables and state in {db}; the notes are untouched)");
    Ok(())
}

/// Exit 1 when the source's folder is unavailable (nothing was applied).
pub async fn reconcile(common: &Common, id: &str, allow_removals: bool, json: bool) -> Result<ExitCode> {
    source_id(id)?;
    let cairn = open(cairn::Config { watch: false, ..config_only(common)? }, "reconcile").await?;
    let r = cairn.reconcile(id, allow_removals).await;
    let root = cairn.status().await.ok().and_then(|s| s.sources.into_iter().find(|s| s.source == id));
    cairn.shutdown().await?;
    let r = r?;
    let root = root.map(|s| s.root).unwrap_or_default();
    if json {
        out!("{}", serde_json::to_string(&r)?);
    } else if let Some(why) = &r.unavailable {
        eprintln!("cairn: {}", why.describe(&r.source, &root));
    } else {
        out!("{}: {} files, {} new or changed, {} removed", r.source, r.files, r.changed, r.removed);
        if let Some(held) = &r.held {
            eprintln!("cairn: {}", held.describe(&r.source, &root));
        }
        for folder in &r.folders_unavailable {
            eprintln!("cairn: {}", folder.describe(&r.source, &root));
        }
    }
    Ok(if r.unavailable.is_some() { ExitCode::from(1) } else { ExitCode::SUCCESS })
}
