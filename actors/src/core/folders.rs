//! The folders this machine was given, per database: for each source, the folder a user named
//! here (`--source`, a positional folder, the config), its identity when it was last read
//! whole ([`FolderIdentity`]), and the removals applied to it lately ([`RecentRemovals`], kept
//! here so that a source drained a few pages per run meets the guard across restarts too).
//!
//! A source's root as the database records it is a fact about the machine that wrote it, not a
//! command: on a second machine (a shared S3 database) the same path may be absent, empty, or
//! another folder. So only a source recorded here is scanned by a process here; every other
//! source is served as stored. The book lives in the database's local state folder (for an
//! object store, the per-machine folder named after its URI), written only by the owner.

use cairn_ingest::{FolderIdentity, RecentRemovals};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const FILE: &str = "folders.json";

/// One source's folder on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FolderRecord {
    pub root: PathBuf,
    /// The folder's identity when a scan of it last applied (`None`: not read whole yet).
    #[serde(default)]
    pub identity: Option<FolderIdentity>,
    /// Removals applied lately (wall-clock ms).
    #[serde(default, skip_serializing_if = "RecentRemovals::is_empty")]
    pub recent: RecentRemovals,
}

/// Wall-clock milliseconds, the time [`RecentRemovals`] are kept in (they outlive a process).
pub fn now_ms() -> i64 {
    cairn_ingest::scan::mtime_ms(std::time::SystemTime::now())
}

/// The book of one database on this machine.
#[derive(Debug)]
pub struct FolderBook {
    file: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, FolderRecord>>,
}

impl FolderBook {
    /// A book kept in memory only.
    pub fn in_memory() -> Self {
        Self { file: None, entries: Mutex::new(BTreeMap::new()) }
    }

    /// The book of a state folder (created when missing). A book that cannot be parsed is
    /// started afresh: its folders are told again by whoever runs `watch` with them.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self::read(dir))
    }

    /// The book as it is on disk, for a process that only reads (it never writes it).
    pub fn read(dir: &Path) -> Self {
        let file = dir.join(FILE);
        let entries = match std::fs::read(&file) {
            Ok(b) => serde_json::from_slice(&b).unwrap_or_else(|e| {
                tracing::warn!(
                    "{}: {e}; the folders given on this machine are recorded again",
                    file.display()
                );
                BTreeMap::new()
            }),
            Err(_) => BTreeMap::new(),
        };
        Self { file: Some(file), entries: Mutex::new(entries) }
    }

    /// No folder was given on this machine.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    pub fn get(&self, id: &str) -> Option<FolderRecord> {
        self.lock().get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, FolderRecord>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Source `id`'s folder is `root` on this machine (made absolute). Another root than
    /// recorded forgets the recorded identity (it was another folder's).
    pub fn told(&self, id: &str, root: &Path) {
        let root = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        self.update(|m| match m.get_mut(id) {
            Some(r) if r.root == root => false,
            _ => {
                m.insert(id.into(), FolderRecord { root, identity: None, recent: RecentRemovals::default() });
                true
            }
        });
    }

    /// A scan of source `id`'s folder applied: this is its identity now.
    pub fn set_identity(&self, id: &str, identity: &FolderIdentity) {
        self.update(|m| match m.get_mut(id) {
            Some(r) if r.identity.as_ref() != Some(identity) => {
                r.identity = Some(identity.clone());
                true
            }
            _ => false,
        });
    }

    /// Pages removed from source `id` within the guard's window before `now`.
    pub fn recent_removals(&self, id: &str, now: i64) -> usize {
        self.lock().get(id).map_or(0, |r| r.recent.within(now))
    }

    /// `n` pages of source `id` were removed at `now`; `yes`: someone said yes to them, and what
    /// was removed before no longer counts toward the guard.
    pub fn record_removals(&self, id: &str, now: i64, n: usize, yes: bool) {
        self.update(|m| match m.get_mut(id) {
            Some(r) if n > 0 || yes || !r.recent.is_empty() => {
                let before = r.recent.clone();
                if yes {
                    r.recent.clear();
                } else {
                    r.recent.record(now, n);
                }
                r.recent != before
            }
            _ => false,
        });
    }

    /// The source is gone from the database.
    pub fn forget(&self, id: &str) {
        self.update(|m| m.remove(id).is_some());
    }

    /// Change the book; written out (whole, by a rename) when `f` says it changed.
    fn update(&self, f: impl FnOnce(&mut BTreeMap<String, FolderRecord>) -> bool) {
        let mut m = self.lock();
        if !f(&mut m) {
            return;
        }
        let Some(file) = &self.file else { return };
        let written = serde_json::to_vec_pretty(&*m).map_err(std::io::Error::other).and_then(|body| {
            let tmp = file.with_extension("json.tmp");
            std::fs::write(&tmp, body)?;
            std::fs::rename(&tmp, file)
        });
        if let Err(e) = written {
            tracing::warn!(
                "{}: {e}; the folders given here are remembered until restart only",
                file.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_told_here_are_remembered_with_their_identity_across_opens() {
        let dir = tempfile::tempdir().unwrap();
        let book = FolderBook::open(dir.path()).unwrap();
        assert_eq!(book.get("nt"), None);
        book.told("nt", Path::new("/v"));
        let id = FolderIdentity { dev: 1, ino: 2, markers: vec![".obsidian".into()], mounts: vec![] };
        book.set_identity("nt", &id);
        book.record_removals("nt", 1_000, 7, false);
        let again = FolderBook::read(dir.path());
        let mut recent = RecentRemovals::default();
        recent.record(1_000, 7);
        assert_eq!(
            again.get("nt"),
            Some(FolderRecord { root: "/v".into(), identity: Some(id.clone()), recent })
        );
        assert_eq!(again.recent_removals("nt", 2_000), 7);
        again.record_removals("nt", 3_000, 0, true);
        assert_eq!(FolderBook::read(dir.path()).recent_removals("nt", 3_000), 0);
        // The same folder told again keeps its identity; another one starts without.
        again.told("nt", Path::new("/v"));
        assert_eq!(again.get("nt").unwrap().identity, Some(id));
        again.told("nt", Path::new("/w"));
        assert_eq!(FolderBook::read(dir.path()).get("nt").unwrap().identity, None);
        again.forget("nt");
        assert_eq!(FolderBook::read(dir.path()).get("nt"), None);
    }

    #[test]
    fn a_damaged_book_starts_afresh() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE), "{not json").unwrap();
        let book = FolderBook::open(dir.path()).unwrap();
        assert_eq!(book.get("nt"), None);
        book.told("nt", Path::new("/v"));
        assert!(FolderBook::read(dir.path()).get("nt").is_some());
    }
}
