//! A source's folder as cairn knows it, and the guard that stands between what a scan of it finds
//! and the index.
//!
//! An empty folder is what an unmounted drive, a share that is down, a cloud folder before its
//! first sync or a checkout of another branch look like. Read naively, each says "every note was
//! deleted", and the index would drop every page (and, on an object store, for every machine).
//! So a folder is known by its identity on this machine ([`FolderIdentity`]: the root's device and
//! inode, and the markers a vault keeps at its root), and [`judge`] decides what a scan may do:
//!
//! - a folder that is missing, empty while the index holds pages, or another folder than the one
//!   indexed (and a scan of it would remove pages) makes its source **unavailable**: nothing is
//!   removed, the index answers as last seen and says so;
//! - a removal of more than half of a source's pages (and at least [`MASS_REMOVAL_MIN`]) is
//!   **held** until someone says yes, counting the removals applied in the last
//!   [`REMOVAL_WINDOW_MS`] ([`RecentRemovals`]): a sync client that evicts a folder in small
//!   batches meets the same guard as an `rm` of all of it;
//! - a machine's first scan of a source that holds pages (indexed elsewhere, or from another
//!   folder) must find most of them, or its removals are held, even with a standing yes;
//! - pages under a folder the scan could not read, or under a mount point that shows no notes
//!   (a share unmounted, an empty file system mounted over it), are **unavailable**, not gone
//!   ([`shield`]);
//! - anything else applies at once.
//!
//! cairn writes nothing into the folder to know it again: a notes folder may be read-only, synced
//! to other devices or under git, where a file of ours would show up in every status. A folder
//! whose identity changed but which still holds every indexed page (a drive remounted under
//! another device number, a restore) is the same notes: its new identity is recorded.

use serde::{Deserialize, Serialize};
use std::path::Path;

/// Entries a vault keeps at its root that say "this is the folder": Obsidian's settings, a git
/// checkout, Syncthing's folder marker. Those present when the folder was recorded must stay.
pub const MARKERS: [&str; 3] = [".obsidian", ".git", ".stfolder"];

/// Removals below this count are never held, whatever share of a small source they are.
pub const MASS_REMOVAL_MIN: usize = 20;

/// Whether removing `removing` of `indexed` pages is a mass removal: more than half of them, and
/// at least [`MASS_REMOVAL_MIN`].
pub fn is_mass_removal(removing: usize, indexed: usize) -> bool {
    removing >= MASS_REMOVAL_MIN && removing * 2 > indexed
}

/// What identifies a source's folder on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FolderIdentity {
    pub dev: u64,
    pub ino: u64,
    /// The [`MARKERS`] present at the root.
    #[serde(default)]
    pub markers: Vec<String>,
    /// Folders below the root that were mount points when a scan last applied (vault-relative):
    /// one that shows no notes later was unmounted, and its pages are not gone. Not part of
    /// what makes the folder the same one ([`FolderIdentity::change_to`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<String>,
}

impl FolderIdentity {
    /// The identity of `root` now, or why there is no folder to speak of.
    pub fn read(root: &Path) -> Result<Self, Unavailable> {
        let meta = match std::fs::metadata(root) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Unavailable::Missing),
            Err(e) => return Err(Unavailable::Unreadable { message: e.to_string() }),
        };
        if !meta.is_dir() {
            return Err(Unavailable::NotAFolder);
        }
        let (dev, ino) = dev_ino(&meta);
        let markers = MARKERS
            .iter()
            .filter(|m| root.join(m).symlink_metadata().is_ok())
            .map(|m| m.to_string())
            .collect();
        Ok(Self { dev, ino, markers, mounts: Vec::new() })
    }

    /// How the folder found `now` differs from this recorded one, in words (`None`: the same).
    pub fn change_to(&self, now: &FolderIdentity) -> Option<String> {
        let mut changes = Vec::new();
        if self.dev != now.dev {
            changes.push(format!("on device {} where it was on {}", now.dev, self.dev));
        }
        if self.ino != now.ino {
            changes.push(format!("inode {} where it was {}", now.ino, self.ino));
        }
        for m in self.markers.iter().filter(|m| !now.markers.contains(m)) {
            changes.push(format!("its `{m}` is gone"));
        }
        (!changes.is_empty()).then(|| changes.join(", "))
    }
}

#[cfg(unix)]
fn dev_ino(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn dev_ino(_: &std::fs::Metadata) -> (u64, u64) {
    (0, 0)
}

/// The device a file or folder is on (0 where the platform does not say).
pub(crate) fn device_of(meta: &std::fs::Metadata) -> u64 {
    dev_ino(meta).0
}

/// Why a source cannot be read from its folder now. Its index is kept and answers as last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Unavailable {
    /// No folder at the root.
    Missing,
    /// No folder at the root, and nothing was ever indexed from it: most likely a mistyped path.
    NeverFound,
    /// Something other than a folder stands at the root.
    NotAFolder,
    /// The folder cannot be read.
    Unreadable { message: String },
    /// The folder holds no notes while the index holds `pages`.
    Empty { pages: usize },
    /// The folder is not the one indexed (`change` says how), and a scan of it would remove
    /// `removing` pages.
    OtherFolder { change: String, removing: usize },
    /// This machine was not given the folder: the source is served as stored, never scanned here.
    NotHere,
}

impl Unavailable {
    /// The name used in answers and events (`missing`, `empty`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Unavailable::Missing => "missing",
            Unavailable::NeverFound => "never_found",
            Unavailable::NotAFolder => "not_a_folder",
            Unavailable::Unreadable { .. } => "unreadable",
            Unavailable::Empty { .. } => "empty",
            Unavailable::OtherFolder { .. } => "other_folder",
            Unavailable::NotHere => "not_here",
        }
    }

    /// What is wrong with source `id`'s folder `root`, and what to do about it.
    pub fn describe(&self, id: &str, root: &str) -> String {
        let kept = "nothing is removed from the index, which answers as last seen";
        let allow = format!("cairn reconcile {id} --allow-removals");
        match self {
            Unavailable::Missing => format!(
                "source `{id}`: its folder {root} is not there (a drive not mounted, a share that is down, a folder \
                 moved or deleted); {kept}. When it is back cairn resumes by itself; if the notes moved, watch them \
                 as `--source {id}=NEW_DIR`; to drop the source, `cairn forget {id}`"
            ),
            Unavailable::NeverFound => format!(
                "source `{id}`: there is no folder {root}, and nothing has been indexed from it. Check the path \
                 (`--source {id}=DIR`), or create the folder: cairn starts on it by itself once it is there"
            ),
            Unavailable::NotAFolder => format!(
                "source `{id}`: {root} is not a folder; {kept}. Put the notes folder back there, or watch it as \
                 `--source {id}=DIR`"
            ),
            Unavailable::Unreadable { message } => format!(
                "source `{id}`: its folder {root} cannot be read ({message}); {kept}. Check that this user may read \
                 it; cairn tries again by itself"
            ),
            Unavailable::Empty { pages } => format!(
                "source `{id}`: its folder {root} holds no notes while the index holds {pages} pages (a drive not \
                 mounted, a sync that has not run yet, a checkout of another branch?); {kept}. When the notes are \
                 back cairn resumes by itself; if they were deleted on purpose, run `{allow}`"
            ),
            Unavailable::OtherFolder { change, removing } => format!(
                "source `{id}`: {root} is not the folder that was indexed ({change}), and a scan of it would remove \
                 {removing} pages; {kept}. Put the indexed folder back; if this folder is the source now, run \
                 `{allow}`"
            ),
            Unavailable::NotHere => format!(
                "source `{id}`: this machine was not given its folder, so its pages are served as last indexed and \
                 nothing here scans or changes them; to index it from this machine, watch it as `--source {id}=DIR`"
            ),
        }
    }
}

/// Removals held until someone says yes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldRemovals {
    /// Pages a scan would remove.
    pub removing: usize,
    /// Pages the index holds.
    pub indexed: usize,
    /// A few of the paths, sorted.
    pub sample: Vec<String>,
    /// Pages already removed within [`REMOVAL_WINDOW_MS`], which these would add to.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recent: usize,
    /// This machine's first scan of a source that holds pages found fewer than half of them.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub first_scan: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Paths of held removals reported by name.
pub const HELD_SAMPLE: usize = 10;

impl HeldRemovals {
    pub fn describe(&self, id: &str, root: &str) -> String {
        let why = if self.first_scan {
            " (this machine's first scan of it: a folder still syncing, or another one?)".to_string()
        } else if self.recent > 0 {
            format!(", after {} removed in the last {} minutes", self.recent, REMOVAL_WINDOW_MS / 60_000)
        } else {
            String::new()
        };
        format!(
            "source `{id}`: a scan of {root} would remove {} of its {} pages ({}{}){why}; the removals are held, \
             the pages stay searchable. If they are meant, run `cairn reconcile {id} --allow-removals`",
            self.removing,
            self.indexed,
            self.sample.join(", "),
            if self.removing > self.sample.len() { ", …" } else { "" }
        )
    }
}

/// The window over which removals add up toward a mass removal.
pub const REMOVAL_WINDOW_MS: i64 = 10 * 60 * 1000;

/// Removals applied to a source lately (time in ms since the Unix epoch, injected), so that a
/// source drained in small batches meets the guard a single mass removal meets.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentRemovals {
    /// (when, how many), oldest first.
    #[serde(default)]
    applied: Vec<(i64, usize)>,
}

impl RecentRemovals {
    /// Pages removed within the window before `now`.
    pub fn within(&self, now: i64) -> usize {
        self.applied.iter().filter(|(at, _)| now - at < REMOVAL_WINDOW_MS).map(|(_, n)| n).sum()
    }

    /// `n` pages were removed at `now` (entries past the window are dropped).
    pub fn record(&mut self, now: i64, n: usize) {
        self.applied.retain(|(at, _)| now - at < REMOVAL_WINDOW_MS);
        if n > 0 {
            self.applied.push((now, n));
        }
    }

    /// Someone said yes: what was removed before no longer counts.
    pub fn clear(&mut self) {
        self.applied.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.applied.is_empty()
    }
}

/// Pages under a folder below the root that a scan cannot speak for: kept as they were indexed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FolderUnavailable {
    /// Vault-relative (`.` for the root itself).
    pub folder: String,
    /// Indexed pages under it that the scan did not find.
    pub pages: usize,
    pub reason: Hidden,
}

/// Why a scan cannot speak for a folder's pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hidden {
    /// The folder (or file) could not be read.
    Unreadable,
    /// A mount point, now or when last scanned, that shows no notes.
    EmptyMount,
}

impl FolderUnavailable {
    pub fn describe(&self, id: &str, root: &str) -> String {
        let (what, drop) = match self.reason {
            Hidden::Unreadable => (
                "cannot be read (permissions, or a network share that fails?)",
                format!(
                    "to drop them, exclude the folder from the source (`exclude = [\"{}/**\"]`)",
                    self.folder
                ),
            ),
            Hidden::EmptyMount => (
                "is a mount point that shows no notes (a share or drive not mounted there?)",
                format!("if they were deleted on purpose, run `cairn reconcile {id} --allow-removals`"),
            ),
        };
        format!(
            "source `{id}`: {root}/{} {what}; its {} pages are kept and answer as last seen. When it can be read \
             again cairn resumes by itself; {drop}",
            self.folder, self.pages
        )
    }
}

/// Whether vault-relative `path` is `folder` or lies in it (`.` holds everything).
pub fn lies_in(path: &str, folder: &str) -> bool {
    folder == "." || path.strip_prefix(folder).is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Which of the pages `gone` (vault-relative paths a scan did not find) a scan cannot speak for,
/// and the folders that hide them. `unreadable`: paths the scan could not read; `mounts`: mount
/// points, now or when last scanned; `found`: the notes the scan found. A page is kept when it
/// lies in an unreadable path, or in a mount point under which the scan found no note.
pub fn shield(
    gone: &[&str],
    found: &[&str],
    unreadable: &[String],
    mounts: &[String],
) -> (Vec<bool>, Vec<FolderUnavailable>) {
    let empty_mounts: Vec<&String> = mounts.iter().filter(|m| !found.iter().any(|f| lies_in(f, m))).collect();
    let mut folders: Vec<FolderUnavailable> = Vec::new();
    let kept = gone
        .iter()
        .map(|p| {
            let hidden_by =
                unreadable.iter().find(|u| lies_in(p, u)).map(|u| (u, Hidden::Unreadable)).or_else(|| {
                    empty_mounts.iter().find(|m| lies_in(p, m)).map(|m| (*m, Hidden::EmptyMount))
                });
            let Some((folder, reason)) = hidden_by else { return false };
            match folders.iter_mut().find(|f| &f.folder == folder) {
                Some(f) => f.pages += 1,
                None => folders.push(FolderUnavailable { folder: folder.clone(), pages: 1, reason }),
            }
            true
        })
        .collect();
    folders.sort_by(|a, b| a.folder.cmp(&b.folder));
    (kept, folders)
}

/// What a comparison of the folder with the index found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// Pages the index holds.
    pub indexed: usize,
    /// Notes the scan found.
    pub found: usize,
    /// Indexed pages the scan did not find (moves already taken out: they are not losses).
    pub removing: usize,
    /// How the folder differs from the one recorded (`None`: the same, or none recorded).
    pub change: Option<String>,
    /// Pages removed within [`REMOVAL_WINDOW_MS`] before this scan.
    pub recent: usize,
    /// No identity of the folder is recorded on this machine (its first scan here).
    pub first_scan: bool,
}

/// What the user agreed to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Consent {
    /// An explicit yes for this reconcile (`cairn reconcile ID --allow-removals`): removals apply
    /// whatever they are, from whatever folder is there.
    pub removals: bool,
    /// A standing yes to mass removals (`[limits] hold_mass_removals = false`, for unattended
    /// setups). An empty or other folder still needs the explicit yes.
    pub mass_removals: bool,
}

/// What a scan may do to the index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Apply everything it found.
    Apply,
    /// Apply what changed and arrived; hold the removals.
    Hold { removing: usize, indexed: usize, recent: usize, first_scan: bool },
    /// Apply nothing: the source is unavailable.
    Unavailable(Unavailable),
}

/// The guard: what a scan that found `r` may do, given `consent`.
pub fn judge(r: &Reading, consent: Consent) -> Verdict {
    if consent.removals {
        return Verdict::Apply;
    }
    if r.found == 0 && r.indexed > 0 {
        return Verdict::Unavailable(Unavailable::Empty { pages: r.indexed });
    }
    if let Some(change) = &r.change
        && r.removing > 0
    {
        return Verdict::Unavailable(Unavailable::OtherFolder {
            change: change.clone(),
            removing: r.removing,
        });
    }
    let hold =
        |recent, first_scan| Verdict::Hold { removing: r.removing, indexed: r.indexed, recent, first_scan };
    // A first scan has nothing to tell a folder still syncing from the source's own: it must
    // find most of the pages, whatever the standing yes says.
    if r.first_scan && r.removing > 0 && r.removing * 2 > r.indexed {
        return hold(0, true);
    }
    // Measured against the source as it was before the window's removals.
    if r.removing > 0
        && is_mass_removal(r.removing + r.recent, r.indexed + r.recent)
        && !consent.mass_removals
    {
        return hold(r.recent, false);
    }
    Verdict::Apply
}

/// Which of the `removed` files (size, modification time in ms) reappear among the `arrived`
/// ones: a move keeps both, so such a pair is a rename, not a loss. Each arrival matches at most
/// one removal; an unknown time (0) matches nothing.
pub fn moved(removed: &[(u64, i64)], arrived: &[(u64, i64)]) -> Vec<bool> {
    let mut pool: std::collections::HashMap<(u64, i64), usize> = std::collections::HashMap::new();
    for a in arrived.iter().filter(|a| a.1 != 0) {
        *pool.entry(*a).or_default() += 1;
    }
    removed
        .iter()
        .map(|r| match pool.get_mut(r) {
            Some(n) if *n > 0 && r.1 != 0 => {
                *n -= 1;
                true
            }
            _ => false,
        })
        .collect()
}

/// A cheap look at a folder, to notice that it may have come back (or changed) without scanning
/// it: its identity, its modification time and whether it shows any entry that is not hidden.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glance {
    pub identity: Result<FolderIdentity, Unavailable>,
    pub mtime_ms: i64,
    pub has_entries: bool,
}

impl Glance {
    pub fn of(root: &Path) -> Self {
        let identity = FolderIdentity::read(root);
        let mtime_ms = std::fs::metadata(root).and_then(|m| m.modified()).map_or(0, crate::scan::mtime_ms);
        let has_entries = identity.is_ok()
            && std::fs::read_dir(root).is_ok_and(|mut d| {
                d.any(|e| e.is_ok_and(|e| !crate::scan::is_ignored_name(&e.file_name().to_string_lossy())))
            });
        Self { identity, mtime_ms, has_entries }
    }

    /// What a reader that does not scan can tell: the folder is missing, not a folder, unreadable,
    /// another folder than `recorded`, or shows nothing at all.
    pub fn unavailable(&self, recorded: Option<&FolderIdentity>, pages: usize) -> Option<Unavailable> {
        let now = match &self.identity {
            Ok(i) => i,
            Err(why) => return Some(why.clone()),
        };
        if let Some(change) = recorded.and_then(|r| r.change_to(now)) {
            return Some(Unavailable::OtherFolder { change, removing: 0 });
        }
        (!self.has_entries && pages > 0).then_some(Unavailable::Empty { pages })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(indexed: usize, found: usize, removing: usize, change: Option<&str>) -> Reading {
        Reading { indexed, found, removing, change: change.map(str::to_string), ..Reading::default() }
    }

    fn held(removing: usize, indexed: usize) -> Verdict {
        Verdict::Hold { removing, indexed, recent: 0, first_scan: false }
    }

    #[test]
    fn an_empty_folder_while_the_index_holds_pages_is_unavailable_not_emptied() {
        let v = judge(&reading(3, 0, 3, None), Consent::default());
        assert_eq!(v, Verdict::Unavailable(Unavailable::Empty { pages: 3 }));
        // A standing yes to mass removals does not empty a source.
        let v = judge(&reading(3, 0, 3, None), Consent { mass_removals: true, ..Consent::default() });
        assert_eq!(v, Verdict::Unavailable(Unavailable::Empty { pages: 3 }));
        // A new source with an empty folder is fine.
        assert_eq!(judge(&reading(0, 0, 0, None), Consent::default()), Verdict::Apply);
    }

    #[test]
    fn another_folder_is_unavailable_only_when_it_would_remove_pages() {
        let v = judge(&reading(10, 9, 1, Some("inode 2 where it was 1")), Consent::default());
        assert!(matches!(v, Verdict::Unavailable(Unavailable::OtherFolder { removing: 1, .. })), "{v:?}");
        // Remounted under another device number with every page there: the same notes.
        assert_eq!(
            judge(&reading(10, 12, 0, Some("on device 7 where it was 5")), Consent::default()),
            Verdict::Apply
        );
    }

    #[test]
    fn more_than_half_and_at_least_twenty_is_held() {
        assert_eq!(judge(&reading(40, 16, 24, None), Consent::default()), held(24, 40));
        // Half exactly, or under the floor, or a tenth: applied at once.
        assert_eq!(judge(&reading(40, 20, 20, None), Consent::default()), Verdict::Apply);
        assert_eq!(judge(&reading(30, 11, 19, None), Consent::default()), Verdict::Apply);
        assert_eq!(judge(&reading(40, 36, 4, None), Consent::default()), Verdict::Apply);
        // A standing yes to mass removals applies them.
        let standing = Consent { mass_removals: true, ..Consent::default() };
        assert_eq!(judge(&reading(40, 16, 24, None), standing), Verdict::Apply);
    }

    #[test]
    fn small_batches_add_up_within_the_window() {
        // A sync client evicting 15 at a time from 60 pages: the third batch makes 45 of 60.
        let mut recent = RecentRemovals::default();
        let mut indexed = 60;
        let mut verdicts = Vec::new();
        for (i, now) in [0, 60_000, 120_000].into_iter().enumerate() {
            let r = Reading { recent: recent.within(now), ..reading(indexed, indexed - 15, 15, None) };
            let v = judge(&r, Consent::default());
            if v == Verdict::Apply {
                recent.record(now, 15);
                indexed -= 15;
            }
            verdicts.push((i, v));
        }
        assert_eq!(verdicts[0].1, Verdict::Apply);
        assert_eq!(verdicts[1].1, Verdict::Apply, "30 of 60 is half, not more");
        assert_eq!(verdicts[2].1, Verdict::Hold { removing: 15, indexed: 30, recent: 30, first_scan: false });
        // Past the window the old removals no longer count.
        let later = 120_000 + REMOVAL_WINDOW_MS;
        assert_eq!(recent.within(later), 0);
        let r = Reading { recent: recent.within(later), ..reading(30, 15, 15, None) };
        assert_eq!(judge(&r, Consent::default()), Verdict::Apply);
        // A standing yes, as for one mass removal.
        let r = Reading { recent: 30, ..reading(30, 15, 15, None) };
        assert_eq!(judge(&r, Consent { mass_removals: true, ..Consent::default() }), Verdict::Apply);
        recent.clear();
        assert!(recent.is_empty());
    }

    #[test]
    fn a_first_scan_must_find_most_of_the_pages_even_with_a_standing_yes() {
        let first = |indexed, found, removing| Reading {
            first_scan: true,
            ..reading(indexed, found, removing, None)
        };
        let standing = Consent { mass_removals: true, ..Consent::default() };
        // One stray note where 40 pages were indexed elsewhere: held, whatever the standing yes.
        let want = Verdict::Hold { removing: 40, indexed: 40, recent: 0, first_scan: true };
        assert_eq!(judge(&first(40, 1, 40), standing), want);
        // Below the mass floor too: a first scan has no floor.
        assert!(matches!(judge(&first(6, 2, 4), Consent::default()), Verdict::Hold { first_scan: true, .. }));
        // Most found: the rest applies.
        assert_eq!(judge(&first(40, 30, 10), Consent::default()), Verdict::Apply);
        // The explicit yes.
        assert_eq!(
            judge(&first(40, 1, 40), Consent { removals: true, ..Consent::default() }),
            Verdict::Apply
        );
    }

    #[test]
    fn pages_under_an_unreadable_folder_or_an_empty_mount_are_kept() {
        let gone = ["sub/a.md", "sub/deep/b.md", "nfs/c.md", "other/d.md", "subway.md", "disk/e.md"];
        let found = ["top.md", "disk/f.md"];
        let unreadable = ["sub".to_string()];
        let mounts = ["nfs".to_string(), "disk".to_string()];
        let (kept, folders) = shield(&gone, &found, &unreadable, &mounts);
        // `disk` shows a note: it is mounted, and its missing page is an ordinary removal.
        assert_eq!(kept, [true, true, true, false, false, false]);
        let got: Vec<(&str, usize, Hidden)> =
            folders.iter().map(|f| (f.folder.as_str(), f.pages, f.reason)).collect();
        assert_eq!(got, [("nfs", 1, Hidden::EmptyMount), ("sub", 2, Hidden::Unreadable)]);
        assert!(folders[0].describe("nt", "/v").contains("/v/nfs is a mount point"));
        // The root unreadable hides everything; a file that could not be read hides itself.
        let (kept, _) = shield(&gone, &[], &[".".to_string()], &[]);
        assert!(kept.iter().all(|k| *k));
        let (kept, _) = shield(&["a.md", "b.md"], &[], &["a.md".to_string()], &[]);
        assert_eq!(kept, [true, false]);
    }

    #[test]
    fn an_explicit_yes_applies_whatever_was_found() {
        let yes = Consent { removals: true, ..Consent::default() };
        assert_eq!(judge(&reading(3, 0, 3, None), yes), Verdict::Apply);
        assert_eq!(judge(&reading(40, 1, 39, Some("inode 2 where it was 1")), yes), Verdict::Apply);
    }

    #[test]
    fn moves_keep_size_and_time_and_each_arrival_matches_once() {
        let removed = [(10, 100), (10, 100), (20, 200), (30, 0)];
        let arrived = [(10, 100), (20, 200), (30, 0), (40, 400)];
        assert_eq!(moved(&removed, &arrived), [true, false, true, false]);
    }

    #[test]
    fn identity_names_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vault");
        assert_eq!(FolderIdentity::read(&root), Err(Unavailable::Missing));
        std::fs::write(&root, "x").unwrap();
        assert_eq!(FolderIdentity::read(&root), Err(Unavailable::NotAFolder));
        std::fs::remove_file(&root).unwrap();
        std::fs::create_dir_all(root.join(".obsidian")).unwrap();
        let first = FolderIdentity::read(&root).unwrap();
        assert_eq!(first.markers, [".obsidian"]);
        assert_eq!(first.change_to(&FolderIdentity::read(&root).unwrap()), None);

        // Deleted and made again: the vault's marker is gone (the inode may or may not be reused).
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::create_dir(&root).unwrap();
        let again = FolderIdentity::read(&root).unwrap();
        let change = first.change_to(&again).expect("another folder");
        assert!(change.contains("`.obsidian` is gone"), "{change}");
    }

    #[test]
    fn a_glance_tells_a_reader_what_it_can_without_scanning() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vault");
        assert_eq!(Glance::of(&root).unavailable(None, 3), Some(Unavailable::Missing));
        std::fs::create_dir_all(root.join(".trash")).unwrap();
        // Only hidden entries: empty while the index holds pages, fine for a new source.
        assert_eq!(Glance::of(&root).unavailable(None, 3), Some(Unavailable::Empty { pages: 3 }));
        assert_eq!(Glance::of(&root).unavailable(None, 0), None);
        std::fs::write(root.join("a.md"), "# A").unwrap();
        let g = Glance::of(&root);
        assert_eq!(g.unavailable(None, 3), None);
        let recorded = FolderIdentity { ino: 1, ..g.identity.clone().unwrap() };
        // Mount points below the root are not what makes the folder the same one.
        let mounted = FolderIdentity { mounts: vec!["nfs".into()], ..g.identity.clone().unwrap() };
        assert_eq!(g.unavailable(Some(&mounted), 3), None);
        assert!(matches!(g.unavailable(Some(&recorded), 3), Some(Unavailable::OtherFolder { .. })));
    }

    #[test]
    fn every_reason_says_what_to_do() {
        for why in [
            Unavailable::Missing,
            Unavailable::NotAFolder,
            Unavailable::Unreadable { message: "permission denied".into() },
            Unavailable::Empty { pages: 3 },
            Unavailable::OtherFolder { change: "inode 2 where it was 1".into(), removing: 3 },
            Unavailable::NotHere,
        ] {
            let text = why.describe("nt", "/mnt/vault");
            assert!(text.contains("source `nt`") && text.contains("nothing"), "{text}");
            assert!(text.contains("cairn") || text.contains("--source nt="), "no remedy: {text}");
        }
        let held = HeldRemovals {
            removing: 24,
            indexed: 40,
            sample: vec!["a.md".into()],
            recent: 0,
            first_scan: false,
        };
        assert!(held.describe("nt", "/v").contains("cairn reconcile nt --allow-removals"));
        let recent = HeldRemovals { recent: 12, ..held.clone() };
        assert!(recent.describe("nt", "/v").contains("after 12 removed in the last 10 minutes"));
        let first = HeldRemovals { first_scan: true, ..held };
        assert!(first.describe("nt", "/v").contains("first scan"));
    }
}
