//! A page's ingest state for `cairn diagnose`: what its source's tables hold for it, and what the
//! event log says happened to its file.

use crate::core::event::{Event, EventKind};
use crate::core::log::{EventLog, read_log};
use cairn_index::{PageRecord, SourceStore};
use cairn_ingest::{slug_base, slugify_path};
use cairn_query::IngestState;
use std::path::{Path, PathBuf};

/// Events of the page kept in its history.
const HISTORY: usize = 8;

/// The log files of a log directory, oldest first.
pub fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut rotated: Vec<(usize, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let n = name.strip_prefix("events.")?.strip_suffix(".jsonl")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut files: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    let current = EventLog::current_file(dir);
    if current.exists() {
        files.push(current);
    }
    files
}

fn slug_of(path: &str) -> String {
    slugify_path(Path::new(path)).unwrap_or_default()
}

/// Whether `e` (of the page's source) is about the page `slug`. An event that names only a path
/// is about the pages whose files' names make `slug`'s base (`c` and `c~2` alike).
fn names_page(e: &Event, slug: &str) -> bool {
    let about = |path: &str| slug_of(path) == slug_base(slug);
    match &e.kind {
        EventKind::PageIndexed { slug: s, .. }
        | EventKind::PageEmbedded { slug: s, .. }
        | EventKind::PageRemoved { slug: s, .. }
        | EventKind::PageParsed { slug: s, .. }
        | EventKind::PageSkipped { slug: s, .. } => s == slug,
        EventKind::FileChanged { path }
        | EventKind::FileRemoved { path }
        | EventKind::PageFailed { path, .. }
        | EventKind::PageWarning { path, .. } => about(path),
        EventKind::FileRenamed { from, to, .. } => about(from) || about(to),
        _ => false,
    }
}

/// The ingest state of `slug` in `store`'s source (`page`: its stored record, if any), with the
/// history the event log in `log_dir` holds for it.
pub async fn ingest_state(
    store: &SourceStore,
    log_dir: Option<&Path>,
    slug: &str,
    page: Option<&PageRecord>,
) -> IngestState {
    // The whole log, maybe tens of MiB: read off the async threads.
    let (dir, source, page_slug) = (log_dir.map(Path::to_path_buf), store.id().to_string(), slug.to_string());
    let events: Vec<Event> = tokio::task::spawn_blocking(move || {
        let mut events = Vec::new();
        for f in dir.as_deref().map(log_files).unwrap_or_default() {
            // A log that cannot be read only costs the history.
            if let Ok(all) = read_log(&f) {
                events.extend(all.into_iter().filter(|e| e.source == source && names_page(e, &page_slug)));
            }
        }
        events
    })
    .await
    .unwrap_or_default();
    let stored = match page {
        Some(_) => store.page_chunk_counts(slug).await.ok(),
        None => None,
    };
    let mut s = IngestState {
        file: page.map(|p| p.path.clone()),
        chunks: page.map(|p| p.chunk_count.max(0) as usize),
        rows: stored.map(|(rows, _)| rows),
        embedded: stored.map(|(_, with_vector)| with_vector),
        table_version: store.version().await.ok(),
        ..IngestState::default()
    };
    // The latest of each kind of fact, in log order. A page's warning is logged before the
    // `page_indexed` of the same version.
    let (mut failure, mut warned, mut warning, mut removed) = (None, None, None, false);
    for e in &events {
        match &e.kind {
            EventKind::PageIndexed { path, version, .. } => {
                s.indexed_at_version = Some(*version);
                s.file.get_or_insert_with(|| path.clone());
                (failure, warning, removed) = (None, warned.take(), false);
            }
            EventKind::PageWarning { reason, .. } => warned = Some(reason.clone()),
            EventKind::PageFailed { path, reason, .. } => {
                failure = Some(reason.clone());
                s.file.get_or_insert_with(|| path.clone());
            }
            EventKind::PageRemoved { .. } => removed = true,
            EventKind::FileRemoved { path } => {
                removed = true;
                s.file.get_or_insert_with(|| path.clone());
            }
            EventKind::FileRenamed { from, .. } if slug_of(from) == slug => {
                removed = true;
                s.file.get_or_insert_with(|| from.clone());
            }
            _ => {}
        }
    }
    (s.state, s.problem) = match (page, failure, warning, removed) {
        (Some(_), Some(f), _, _) => (
            "indexed".into(),
            Some(format!("its latest version failed (the last good one stays searchable): {f}")),
        ),
        (Some(_), None, Some(w), _) => ("indexed_with_warning".into(), Some(w)),
        (Some(_), None, None, _) => ("indexed".into(), None),
        (None, Some(f), _, _) => ("failed".into(), Some(f)),
        (None, None, _, true) => ("removed".into(), None),
        (None, None, _, false) if events.is_empty() => ("never_seen".into(), None),
        // Seen changing and not committed: pending, or stopped before its commit.
        (None, None, _, false) => ("seen_not_indexed".into(), None),
    };
    let skip = events.len().saturating_sub(HISTORY);
    s.history = events[skip..].iter().map(|e| format!("#{} {e}", e.seq)).collect();
    s
}
