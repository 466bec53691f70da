//! `cairn index` and `cairn reindex`: one run of the pipeline `watch` runs.

use super::args::Common;
use super::{Usage, config_only, source_id};
use anyhow::Result;
use cairn::Role;
use std::path::Path;
use std::process::ExitCode;

pub async fn index(config: cairn::Config, json: bool, reindex: bool) -> Result<ExitCode> {
    let db = config.db.clone();
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let summary = cairn::index(config, reindex, progress).await?;
    if json {
        out!("{}", serde_json::to_string(&summary)?);
    } else {
        for f in summary.sources_failed.iter().chain(&summary.counts.failures) {
            eprintln!("failed: {}", f.reason);
        }
        for w in &summary.counts.warnings {
            eprintln!("warning: {}", w.reason);
        }
        for held in &summary.removals_held {
            eprintln!("held: {held}");
        }
        for folder in &summary.folders_unavailable {
            eprintln!("kept: {folder}");
        }
        let by = match summary.role {
            Some(Role::Client) => " by the database's owner",
            _ => "",
        };
        let c = &summary.counts;
        out!(
            "{} pages indexed, {} unchanged, {} removed, {} failed; {} chunks embedded, {} reused; {:.1} s{by} (db: {db})",
            c.pages_indexed,
            c.pages_unchanged,
            c.pages_removed,
            c.pages_failed,
            c.chunks_embedded,
            c.chunks_reused,
            summary.seconds,
        );
    }
    let nothing_failed = summary.counts.failures.is_empty() && summary.sources_failed.is_empty();
    Ok(if summary.anything_indexed() || nothing_failed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Drop the sources' tables and index them again: each target is ID=DIR, a folder, or a bare
/// id (the folder the database records for it).
pub async fn reindex(
    common: &Common,
    targets: &[String],
    sources: &[String],
    json: bool,
) -> Result<ExitCode> {
    let mut c = config_only(common)?;
    for t in targets.iter().chain(sources) {
        let source = if let Some((id, dir)) = t.split_once('=') {
            cairn::SourceSpec::parse_assignment(&format!("{id}={dir}"))?.config()
        } else if Path::new(t).is_dir() {
            cairn::SourceSpec::from_dir(Path::new(t))?.config()
        } else {
            recorded(&c, t).await?
        };
        c.sources.push(source);
    }
    if c.sources.is_empty() {
        return Err(Usage("name the sources to reindex: cairn reindex ID (or a folder)".into()).into());
    }
    index(c, json, true).await
}

/// The source `id` as the database records it.
async fn recorded(c: &cairn::Config, id: &str) -> Result<cairn::SourceConfig> {
    source_id(id)?;
    let db = c.database().await?;
    let info = db.sources().await?.into_iter().find(|s| s.id == id).ok_or_else(|| {
        Usage(format!("no source `{id}` in {}; give its folder: cairn reindex --source {id}=DIR", c.db))
    })?;
    let root = info.root.ok_or_else(|| {
        Usage(format!("the database records no folder for `{id}`; give it: cairn reindex --source {id}=DIR"))
    })?;
    Ok(cairn::SourceConfig {
        id: info.id,
        root: root.into(),
        include: info.include,
        exclude: info.exclude,
        language: None,
    })
}
