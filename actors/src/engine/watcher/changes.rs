//! One tick's settled changes applied: file events logged, files parsed in groups and handed
//! to the writer in order with the removals, then committed; a rescan when removals are not
//! ordinary, events were lost or a folder appeared.

use super::WatchParts;
use super::reconcile::{ReconcileReport, reconcile};
use crate::core::error::PipelineError;
use crate::core::event::EventKind;
use crate::core::folders::now_ms;
use crate::engine::workers::{PARSE_GROUP, Parse, Parsed};
use crate::engine::writer::{Commit, Covers, Ingest, Origin};
use cairn_ingest::folder::{self, Consent, FolderIdentity};
use cairn_ingest::rel_string;
use std::collections::HashSet;
use std::path::PathBuf;

/// Changes of one tick.
#[derive(Debug, Default)]
pub(super) struct Changes {
    pub to_parse: Vec<PathBuf>,
    /// With whether the path may be a folder.
    pub removed: Vec<(PathBuf, bool)>,
    pub renamed: Vec<(String, String)>,
    pub events: Vec<EventKind>,
    pub rescan: bool,
    /// File events (someone is editing) or a scan.
    pub origin: Origin,
}

/// Log the file events, parse in groups, hand everything to the writer in order; then rescan if
/// a folder appeared, events were lost, or removals were not ordinary (the rescan's reconcile
/// judges them with the whole folder in view).
pub(super) async fn process(h: WatchParts, mut c: Changes) -> Result<Option<ReconcileReport>, PipelineError> {
    cairn_index::fault::point_async("watch.settled").await;
    // A note changed and then removed, whose removal has not settled yet, is gone now: read, it
    // would be removed as "gone before it could be read", past the guard. It is a removal, and
    // meets the guard with the others.
    let Changes { to_parse, removed, .. } = &mut c;
    to_parse.retain(|p| {
        let gone =
            matches!(h.root.join(p).symlink_metadata(), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        if gone && !removed.iter().any(|(r, _)| r == p) {
            removed.push((p.clone(), false));
        }
        !gone
    });
    // A note evicted by iCloud leaves a stub beside it: not a removal (its page stays).
    c.removed.retain(|(p, _)| !cairn_ingest::placeholder::is_evicted(&h.root, p));
    let mut lost = 0;
    if !c.rescan && !c.removed.is_empty() {
        match ordinary_losses(&h, &c).await? {
            Some(n) => lost = n,
            None => c.rescan = true,
        }
    }
    let rescan = c.rescan;
    if rescan {
        // The rescan removes whatever left the folder, in one batch with whatever it finds: a file
        // moved into a folder created a moment before (whose arrival has no event, only the
        // rescan sees it) then leaves and arrives together and keeps its stored vectors. Removed
        // first on its own, its chunks would be gone before the arrival was matched to them.
        let renamed_from: HashSet<String> = c.renamed.iter().map(|(from, _)| from.clone()).collect();
        c.removed.retain(|(p, _)| renamed_from.contains(&rel_string(p)));
    }
    let found_dir = apply(&h, c).await?;
    if !rescan {
        h.folders.record_removals(&h.id, now_ms(), lost, false);
    }
    if rescan || found_dir {
        return reconcile(h, "rescan", HashSet::new(), Consent::default()).await.0.map(Some);
    }
    Ok(None)
}

/// Whether a tick's removals may apply at once, and how many pages they remove: the folder is
/// still the one indexed, none of them lies in a mount point (an unmount is judged by a scan),
/// and with those of the guard's window they take neither most of the source nor all of it (a
/// folder emptied under a running watch, or drained a few at a time). `None`: not ordinary.
async fn ordinary_losses(h: &WatchParts, c: &Changes) -> Result<Option<usize>, PipelineError> {
    let recorded = h.folders.get(&h.id).and_then(|r| r.identity);
    match FolderIdentity::read(&h.root) {
        Err(_) => return Ok(None),
        Ok(now) if recorded.as_ref().is_some_and(|r| r.change_to(&now).is_some()) => return Ok(None),
        Ok(_) => {}
    }
    let renamed: HashSet<&str> = c.renamed.iter().map(|(from, _)| from.as_str()).collect();
    let lost: Vec<(PathBuf, bool)> =
        c.removed.iter().filter(|(p, _)| !renamed.contains(rel_string(p).as_str())).cloned().collect();
    if lost.is_empty() {
        return Ok(Some(0));
    }
    let mounts = recorded.map(|r| r.mounts).unwrap_or_default();
    let in_mount = |p: &PathBuf| mounts.iter().any(|m| folder::lies_in(&rel_string(p), m));
    if lost.iter().any(|(p, _)| in_mount(p)) {
        return Ok(None);
    }
    let (covered, indexed) = h.writer.send(Covers(lost)).await?;
    let recent = h.folders.recent_removals(&h.id, now_ms());
    let mass = folder::is_mass_removal(covered + recent, indexed + recent);
    let ordinary = covered == 0 || covered < indexed && (h.mass_removals || !mass);
    Ok(ordinary.then_some(covered))
}

/// Returns whether a directory stood where a file was expected.
pub(super) async fn apply(h: &WatchParts, mut c: Changes) -> Result<bool, PipelineError> {
    h.emit.emit(&h.id, std::mem::take(&mut c.events)).await;
    h.status.add_in_flight(&h.id, c.to_parse.len() + c.removed.len());
    let mut found_dir = false;
    let mut removed = std::mem::take(&mut c.removed);
    let mut renamed = std::mem::take(&mut c.renamed);
    let origin = c.origin;
    if c.to_parse.is_empty() {
        if !removed.is_empty() {
            h.writer.send(Ingest { parsed: Vec::new(), removed, renamed, origin }).await?;
            commit(h).await?;
        }
        return Ok(false);
    }
    for group in c.to_parse.chunks(PARSE_GROUP) {
        let parsed = h
            .parser
            .send(Parse { source: h.id.clone(), root: h.root.clone(), files: group.to_vec() })
            .await?;
        found_dir |= parsed.iter().any(|p| matches!(p, Parsed::Directory { .. }));
        let msg = Ingest {
            parsed,
            removed: std::mem::take(&mut removed),
            renamed: std::mem::take(&mut renamed),
            origin,
        };
        h.writer.send(msg).await?;
    }
    commit(h).await?;
    Ok(found_dir)
}

/// The changes of a tick are all with the writer: commit them now rather than at its deadline.
/// A failed commit is the writer's to report and retry; only a stopped writer is an error here.
async fn commit(h: &WatchParts) -> Result<(), PipelineError> {
    // The commit's own result is the writer's (it reports and retries a failure).
    let _ = h.writer.send(Commit).await?;
    Ok(())
}
