//! A reconcile: the folder scanned and compared with the index, and what the guard of
//! [`cairn_ingest::folder`] lets through applied (new and changed files parsed, removals and
//! moves), or the source declared unavailable, or its mass removals held for a yes. Pages under
//! a folder the scan could not read, or under a mount point that shows nothing, are kept and
//! reported ([`folder::shield`]).

use super::WatchParts;
use super::changes::{Changes, apply};
use crate::core::error::PipelineError;
use crate::core::event::EventKind;
use crate::core::folders::now_ms;
use crate::core::status::SourceState;
use crate::engine::workers::Scan;
use crate::engine::writer::States;
use cairn_index::PageState;
use cairn_ingest::folder::{
    self, Consent, FolderIdentity, FolderUnavailable, HeldRemovals, Reading, Unavailable, Verdict,
};
use cairn_ingest::{ScanReport, is_slug_of, rel_string, slug_base};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// What a comparison of a folder with its index did (the answer to `cairn reconcile`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ReconcileReport {
    pub source: String,
    /// Notes found in the folder.
    pub files: usize,
    /// Of them, new or changed since they were indexed.
    pub changed: usize,
    /// Pages removed because their file is gone.
    pub removed: usize,
    /// Removals found and held for a yes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldRemovals>,
    /// The folder could not be read as the source's: nothing was applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<Unavailable>,
    /// Folders below the root the scan could not speak for: their pages were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folders_unavailable: Vec<FolderUnavailable>,
    /// Notes that are cloud placeholders (content not on this machine): not read, kept.
    #[serde(default, skip_serializing_if = "crate::core::event::is_zero")]
    pub placeholders: usize,
}

/// Compare the folder with the index and apply what the guard lets through (see the module's
/// doc). Files whose path, size and modification time are those they were indexed with are not
/// read (a stat cache, as git's). `reported`: the scan problems already reported (each is
/// reported once), given back with this scan's.
pub(super) async fn reconcile(
    h: WatchParts,
    reason: &'static str,
    mut reported: HashSet<(String, String)>,
    consent: Consent,
) -> (Result<ReconcileReport, PipelineError>, HashSet<(String, String)>) {
    h.status.set_state(&h.id, SourceState::Scanning, None);
    let res = compare(&h, reason, &mut reported, consent).await;
    match &res {
        Ok(_) => {
            h.status.compared(&h.id);
            h.status.set_state(&h.id, SourceState::Watching, None)
        }
        Err(e) => h.status.set_state(&h.id, SourceState::Retrying, Some(e.to_string())),
    }
    (res, reported)
}

/// What one scan of the folder found, judged by the guard.
enum Look {
    /// The folder cannot be read as the source's: nothing applies.
    Unavailable(Unavailable),
    Judged(Judged),
}

struct Judged {
    identity: FolderIdentity,
    files: usize,
    to_parse: Vec<PathBuf>,
    /// The removals the guard lets through (moves included).
    removed: Vec<String>,
    /// Of them, pages lost (not moves).
    lost: usize,
    held: Option<HeldRemovals>,
    /// Folders whose pages were kept, unseen.
    shielded: Vec<FolderUnavailable>,
    placeholders: usize,
}

impl Look {
    /// The pages it would remove, and how many it would hold (`None`: it removes nothing).
    fn removals(&self) -> Option<(Vec<String>, usize)> {
        match self {
            Look::Judged(j) if !j.removed.is_empty() || j.held.is_some() => {
                Some((j.removed.clone(), j.held.as_ref().map_or(0, |held| held.removing)))
            }
            _ => None,
        }
    }
}

/// Scans a reconcile makes at most while its removals keep changing.
const SETTLE_SCANS: usize = 10;

/// One comparison; the source is left watching (or, unavailable, answering as last seen).
/// A scan that finds pages gone looks again once removals have been quiet for the debouncer's
/// removal period, until two looks agree: a scan that runs while an `rm` of many notes is under
/// way must not apply the first few as an ordinary removal (live deletes settle together for
/// the same reason).
async fn compare(
    h: &WatchParts,
    reason: &'static str,
    reported: &mut HashSet<(String, String)>,
    consent: Consent,
) -> Result<ReconcileReport, PipelineError> {
    let mut report = ReconcileReport { source: h.id.clone(), ..ReconcileReport::default() };
    let mut events = Vec::new();
    let mut look = scan_and_judge(h, reported, consent, &mut events).await?;
    for _ in 1..SETTLE_SCANS {
        let Some(seen) = look.removals() else { break };
        tokio::time::sleep(h.removal_quiet).await;
        look = scan_and_judge(h, reported, consent, &mut events).await?;
        if look.removals() == Some(seen) {
            break;
        }
    }
    let j = match look {
        Look::Unavailable(why) => {
            h.emit.emit(&h.id, events).await;
            report.unavailable = Some(why);
            return Ok(report);
        }
        Look::Judged(j) => j,
    };
    // A first scan that found too little is not the folder read whole: the next scan is a first
    // one too, until most pages are there or someone says yes.
    if !j.held.as_ref().is_some_and(|held| held.first_scan) {
        h.folders.set_identity(&h.id, &j.identity);
    }
    let removed: Vec<(PathBuf, bool)> = j.removed.into_iter().map(|p| (PathBuf::from(p), false)).collect();
    report.files = j.files;
    report.changed = j.to_parse.len();
    report.removed = removed.len();
    report.held = j.held;
    report.folders_unavailable = j.shielded;
    report.placeholders = j.placeholders;
    events.push(EventKind::Reconciled {
        reason: reason.into(),
        files: report.files,
        changed: report.changed,
        removed: report.removed,
        held: report.held.as_ref().map_or(0, |h| h.removing),
    });
    h.emit.emit(&h.id, events).await;
    // Names and keywords first: the model waits until these pages are committed.
    let _hold = (!j.to_parse.is_empty()).then(|| h.embedder.hold_bulk());
    apply(h, Changes { to_parse: j.to_parse, removed, ..Changes::default() }).await?;
    h.folders.record_removals(&h.id, now_ms(), j.lost, consent.removals);
    Ok(report)
}

/// Scan the folder and judge what it shows against the index (nothing applied); the scan's
/// new problems are added to `events`.
async fn scan_and_judge(
    h: &WatchParts,
    reported: &mut HashSet<(String, String)>,
    consent: Consent,
    events: &mut Vec<EventKind>,
) -> Result<Look, PipelineError> {
    let identity = match FolderIdentity::read(&h.root) {
        Ok(i) => i,
        Err(Unavailable::Missing) if h.writer.send(States).await?.is_empty() => {
            return Ok(Look::Unavailable(Unavailable::NeverFound));
        }
        Err(why) => return Ok(Look::Unavailable(why)),
    };
    let scan = match h.parser.send(Scan { root: h.root.clone(), opts: h.scan.clone() }).await? {
        Ok(scan) => scan,
        Err(e) => return Ok(Look::Unavailable(Unavailable::Unreadable { message: e.to_string() })),
    };
    let states = h.writer.send(States).await?;
    cairn_index::fault::point("reconcile.scanned");
    events.extend(problems(&scan, reported));
    let present: HashSet<String> = scan.files.iter().map(|f| rel_string(&f.rel)).collect();
    // A placeholder's note is there, only not on this machine: not gone, not read.
    let away: HashSet<String> = scan.placeholders.iter().map(|p| rel_string(p)).collect();
    // A note renamed to its cloud stub while the scan read the folder can be in neither list (the
    // listing passed the stub's name before it was made, the note was gone when it was read):
    // looked at again now, it is not gone.
    let gone: Vec<&str> = states
        .values()
        .filter(|st| !present.contains(&st.path) && !away.contains(&st.path))
        .map(|st| st.path.as_str())
        .filter(|p| !cairn_ingest::placeholder::is_evicted(&h.root, std::path::Path::new(p)))
        .collect();
    let recorded = h.folders.get(&h.id).and_then(|r| r.identity);
    let (gone, shielded, identity) = shield(&scan, &present, gone, recorded.as_ref(), identity, consent);
    let moved = moved(&states, &scan, &gone);
    let lost = moved.iter().filter(|m| !**m).count();
    let reading = Reading {
        indexed: states.len(),
        found: scan.files.len() + scan.placeholders.len(),
        removing: lost,
        change: recorded.as_ref().and_then(|r| r.change_to(&identity)),
        recent: h.folders.recent_removals(&h.id, now_ms()),
        first_scan: recorded.is_none() && !states.is_empty(),
    };
    let consent = Consent { mass_removals: consent.mass_removals || h.mass_removals, ..consent };
    let (mut removed, held, lost): (Vec<String>, _, _) = match folder::judge(&reading, consent) {
        Verdict::Unavailable(why) => return Ok(Look::Unavailable(why)),
        Verdict::Hold { removing, indexed, recent, first_scan } => {
            let mut sample: Vec<String> =
                gone.iter().zip(&moved).filter(|(_, m)| !**m).map(|(p, _)| p.to_string()).collect();
            sample.sort();
            sample.truncate(folder::HELD_SAMPLE);
            // The moves still apply: they are renames, not losses.
            let moves: Vec<String> =
                gone.iter().zip(&moved).filter(|(_, m)| **m).map(|(p, _)| p.to_string()).collect();
            (moves, Some(HeldRemovals { removing, indexed, sample, recent, first_scan }), 0)
        }
        Verdict::Apply => (gone.iter().map(|p| p.to_string()).collect(), None, lost),
    };
    removed.sort();
    let to_parse = changed(&scan, &states);
    let placeholders = scan.placeholders.len();
    let files = scan.files.len() + placeholders;
    Ok(Look::Judged(Judged { identity, files, to_parse, removed, lost, held, shielded, placeholders }))
}

/// The pages `gone` that the scan can speak for, the folders hiding the others, and the
/// identity to record: the scan's mount points, plus those recorded before that hide pages now
/// (an unmounted share stays known as one until its notes are back). An explicit yes removes
/// what an empty mount point hides, never what could not be read.
fn shield<'a>(
    scan: &ScanReport,
    present: &HashSet<String>,
    gone: Vec<&'a str>,
    recorded: Option<&FolderIdentity>,
    mut identity: FolderIdentity,
    consent: Consent,
) -> (Vec<&'a str>, Vec<FolderUnavailable>, FolderIdentity) {
    let unreadable: Vec<String> = scan.unreadable.iter().map(|p| rel_string(p)).collect();
    let mut mounts: Vec<String> = scan.mounts.iter().map(|p| rel_string(p)).collect();
    let now_mounted = mounts.len();
    if !consent.removals {
        mounts.extend(
            recorded
                .iter()
                .flat_map(|r| &r.mounts)
                .filter(|m| !scan.mounts.iter().any(|s| rel_string(s) == **m))
                .cloned(),
        );
    }
    let found: Vec<&str> = present.iter().map(String::as_str).collect();
    let (kept, shielded) =
        folder::shield(&gone, &found, &unreadable, if consent.removals { &[] } else { &mounts });
    let hiding = |m: &String| shielded.iter().any(|f| &f.folder == m);
    identity.mounts = mounts[..now_mounted].to_vec();
    identity.mounts.extend(mounts[now_mounted..].iter().filter(|m| hiding(m)).cloned());
    identity.mounts.sort();
    let gone = gone.into_iter().zip(kept).filter(|(_, k)| !k).map(|(p, _)| p).collect();
    (gone, shielded, identity)
}

/// A `page_failed` for each problem of the scan not reported before.
fn problems(scan: &ScanReport, reported: &mut HashSet<(String, String)>) -> Vec<EventKind> {
    let mut events = Vec::new();
    for p in &scan.problems {
        let key = (p.path().map(rel_string).unwrap_or_default(), p.kind().to_string());
        if reported.insert(key.clone()) {
            events.push(EventKind::PageFailed { path: key.0, kind: key.1, reason: p.to_string() });
        }
    }
    events
}

/// For each page `gone` from its path, whether a new file of its size and time arrived
/// elsewhere: a move.
fn moved(states: &HashMap<String, PageState>, scan: &ScanReport, gone: &[&str]) -> Vec<bool> {
    let stored = by_path(states);
    let stat = |p: &str| {
        stored.get(p).and_then(|s| s.first()).map_or((0, 0), |(_, st)| (st.bytes as u64, st.mtime_ms))
    };
    let arrived: Vec<(u64, i64)> = scan
        .files
        .iter()
        .filter(|f| !stored.contains_key(rel_string(&f.rel).as_str()))
        .map(|f| (f.size, f.mtime_ms))
        .collect();
    folder::moved(&gone.iter().map(|p| stat(p)).collect::<Vec<_>>(), &arrived)
}

/// The stored pages by path: one each, but for a page whose slug an older rule made.
fn by_path(states: &HashMap<String, PageState>) -> HashMap<&str, Vec<(&str, &PageState)>> {
    let mut out: HashMap<&str, Vec<(&str, &PageState)>> = HashMap::new();
    for (slug, st) in states {
        out.entry(st.path.as_str()).or_default().push((slug.as_str(), st));
    }
    out
}

/// The files to read: all but those whose path, size and time are what they were indexed with,
/// under one slug their name can have (a page under a slug an older rule made is read again, and
/// the writer gives it its slug now).
fn changed(scan: &ScanReport, states: &HashMap<String, PageState>) -> Vec<PathBuf> {
    let stored = by_path(states);
    let unchanged = |f: &cairn_ingest::ScannedFile| {
        let path = rel_string(&f.rel);
        match stored.get(path.as_str()).map(Vec::as_slice) {
            Some([(slug, s)]) => {
                is_slug_of(slug, slug_base(&f.slug))
                    && s.clean
                    && f.mtime_ms != 0
                    && s.mtime_ms == f.mtime_ms
                    && s.bytes == f.size as i64
            }
            _ => false,
        }
    };
    scan.files.iter().filter(|f| !unchanged(f)).map(|f| f.rel.clone()).collect()
}
