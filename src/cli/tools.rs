//! Verbs for looking at folders and test data: `cairn scan`, `cairn replay`, `cairn swamp-stubs`.

use super::args::Common;
use super::{config_only, show};
use anyhow::Result;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What cairn extracts from each page of the folders (nothing stored); exit 1 when no page
/// parsed.
pub fn scan(common: &Common, dirs: &[PathBuf], json: bool) -> Result<ExitCode> {
    let opts = config_only(common)?.limits.parse_options();
    let mut summaries = Vec::new();
    for dir in dirs {
        let spec = cairn::SourceSpec::from_dir(dir)?;
        summaries.push(cairn::scan_source(&spec.id, &spec.root, &opts)?);
    }
    if json {
        out!("{}", serde_json::to_string(&summaries)?);
    } else {
        summaries.iter().for_each(show);
    }
    let any = summaries.iter().any(|s| !s.pages.is_empty());
    Ok(if any { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// Replay a recorded scenario into a folder and a database (new temporary ones by default).
pub async fn replay(common: &Common, log: PathBuf, into: Option<PathBuf>, json: bool) -> Result<()> {
    let base = std::env::temp_dir().join(format!("cairn-replay-{}", std::process::id()));
    let dir = into.unwrap_or_else(|| base.join("vault"));
    let db = common.db.clone().unwrap_or_else(|| base.join("db").display().to_string());
    let r = tokio::task::spawn_blocking(move || cairn_actors::ops::replay::replay_file(&log, &dir, &db))
        .await??;
    if json {
        out!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    for s in &r.status {
        out!("{}: {} pages, {} failures", s.source, s.pages, s.failures.len());
    }
    let (folder, db) = (r.folder.display(), &r.db);
    out!(
        "replayed {} ({} steps) into {folder} (db: {db}; events: {db}/events/events.jsonl)",
        r.scenario,
        r.steps
    );
    Ok(())
}

pub fn swamp_stubs(dir: &Path, n: usize) -> Result<()> {
    cairn::swamp::write_stubs(dir, n)?;
    eprintln!("wrote {n} stubs under {}", dir.join("models").display());
    Ok(())
}
