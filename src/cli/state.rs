//! What the database holds and who serves it: `status`, `stats`, `flush`, `reconcile`, `forget`,
//! `doctor`.

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

/// `cairn doctor`: what is damaged, and with `--repair` what was done. Exit 1 while something
/// stays damaged.
pub async fn doctor(common: &Common, repair: bool, json: bool) -> Result<ExitCode> {
    use cairn_actors::ops::doctor;
    let config = config_only(common)?;
    let mut report = {
        let _alone = if repair { Some(alone(&config).await?) } else { None };
        doctor::examine(&config, repair).await.map_err(anyhow::Error::msg)?
    };
    if repair && !report.rebuild.is_empty() {
        // With the lock given back: the rebuild is an ordinary reindex, which takes it.
        let sources = report.rebuild.iter().map(|i| cairn::SourceConfig {
            id: i.id.clone(),
            root: i.root.clone().unwrap_or_default().into(),
            include: i.include.clone(),
            exclude: i.exclude.clone(),
            language: None,
        });
        let c = cairn::Config { sources: sources.collect(), ..config.clone() };
        let done = cairn::index(c, true, false).await;
        for f in report.findings.iter_mut().filter(|f| f.damage && f.repaired.is_none() && f.repair.is_some())
        {
            f.repaired = match &done {
                Ok(s) => Some(format!("rebuilt from its folder: {} pages indexed", s.counts.pages_indexed)),
                Err(e) => {
                    f.problem = format!("{}; the rebuild failed: {e}", f.problem);
                    None
                }
            };
        }
    }
    if json {
        out!("{}", serde_json::to_string(&report)?);
    } else {
        for s in &report.sources {
            let n = |v: Option<usize>| v.map_or("?".to_string(), |v| v.to_string());
            out!(
                "{}: {} pages, {} chunks, {} waiting for vectors; snapshot {}",
                s.source,
                n(s.pages),
                n(s.chunks),
                n(s.vectors_pending),
                s.snapshot
            );
        }
        for f in &report.findings {
            out!("{f}");
        }
        let verdict = match (report.healthy(), repair) {
            (true, _) if report.findings.iter().all(|f| !f.damage) => "healthy",
            (true, _) => "repaired",
            (false, false) => "damaged: `cairn doctor --repair` does what each line says",
            (false, true) => "damaged: what is left needs the step its line says",
        };
        out!("{verdict} ({} ms, db: {})", report.took_ms, report.db);
    }
    Ok(if report.healthy() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The database to this process alone, for repairs: its lock here, and on an object store no
/// other writer holding the lease.
async fn alone(config: &cairn::Config) -> Result<cairn_actors::roles::lock::OwnerLock> {
    use cairn_actors::replication::{lease::LeaseStore, remote::Remote};
    use cairn_actors::roles::lock as owner;
    let paths = config.paths();
    let Some(lock) = owner::OwnerLock::try_acquire(&paths)? else {
        let who = owner::read_info(&paths.lock())
            .map(|o| format!("pid {} (`cairn {}`)", o.pid, o.purpose))
            .unwrap_or_else(|| "another process".into());
        return Err(super::Usage(format!(
            "{who} owns {}: stop it, then run `cairn doctor --repair` again (a repair must not race its commits)",
            config.db
        ))
        .into());
    };
    if let Some(remote) = Remote::of(&config.db, &config.storage).map_err(anyhow::Error::msg)?
        && let Some(h) = LeaseStore::of(&remote).holder().await
    {
        return Err(super::Usage(format!(
            "{} pid {} holds the writer lease of {}: stop it, then run `cairn doctor --repair` again",
            h.host, h.pid, config.db
        ))
        .into());
    }
    Ok(lock)
}
