//! notify's events as the debouncer's raw events.

use cairn_ingest::RawEvent;
use std::path::{Path, PathBuf};

/// notify's event → raw events with vault-relative paths.
pub(super) fn translate(res: notify::Result<notify::Event>, root: &Path) -> Vec<RawEvent> {
    use notify::EventKind as K;
    use notify::event::{AccessKind, MetadataKind, ModifyKind, RenameMode};
    let ev = match res {
        Ok(ev) => ev,
        Err(e) => {
            tracing::warn!("file watcher error ({e}); rescanning");
            return vec![RawEvent::Rescan];
        }
    };
    if ev.need_rescan() {
        return vec![RawEvent::Rescan];
    }
    let rel = |p: &PathBuf| -> Option<PathBuf> {
        let r = p.strip_prefix(root).ok()?;
        (!r.as_os_str().is_empty()).then(|| r.to_path_buf())
    };
    let paths: Vec<PathBuf> = ev.paths.iter().filter_map(rel).collect();
    let cookie = ev.attrs.tracker().map(|t| t as u64);
    match ev.kind {
        K::Access(AccessKind::Close(_)) | K::Access(_) => Vec::new(),
        K::Modify(ModifyKind::Metadata(MetadataKind::AccessTime)) => Vec::new(),
        K::Create(_) => paths.into_iter().map(|path| RawEvent::Create { path }).collect(),
        K::Remove(_) => paths.into_iter().map(|path| RawEvent::Remove { path }).collect(),
        K::Modify(ModifyKind::Name(RenameMode::From)) => {
            paths.into_iter().map(|path| RawEvent::RenameFrom { path, cookie }).collect()
        }
        K::Modify(ModifyKind::Name(RenameMode::To)) => {
            paths.into_iter().map(|path| RawEvent::RenameTo { path, cookie }).collect()
        }
        K::Modify(ModifyKind::Name(RenameMode::Both)) => {
            match (ev.paths.first().map(rel), ev.paths.get(1).map(rel)) {
                (Some(Some(from)), Some(Some(to))) => vec![RawEvent::Rename { from, to }],
                // One side outside the root: a move in or out.
                (Some(None), Some(Some(to))) => vec![RawEvent::Create { path: to }],
                (Some(Some(from)), Some(None)) => vec![RawEvent::Remove { path: from }],
                _ => Vec::new(),
            }
        }
        _ => paths.into_iter().map(|path| RawEvent::Modify { path }).collect(),
    }
}
