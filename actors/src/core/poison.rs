//! Pages remembered as failed by their file's content, across restarts, until the file changes.
//!
//! A page that crashes the parser (a panic), blows its time budget or is over a bound fails like
//! any bad page, but retrying it at every scan would cost that work again and again; it is
//! recorded here with the hash of the file's bytes and skipped until those bytes change. A page
//! that takes the whole process down (killed for memory, a stack overflow) leaves the parse
//! marker behind: the next start records it as a suspect, and a second death on the same bytes
//! poisons it. One unrelated kill while a good page is being parsed (an operator's kill -9, a
//! crash test) only makes it a suspect, which the next successful parse clears.
//!
//! On an object store the book is also the database's (`_cairn/poison.json`, see
//! [`crate::replication::shipping`]): the writer that takes over after a page killed the last one knows it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Deaths on the same bytes before a page is skipped.
const DEATHS_TO_POISON: u32 = 2;

/// A remembered page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// sha256 of the file's bytes when it failed.
    pub hash: String,
    pub kind: String,
    pub reason: String,
    /// Process deaths while parsing these bytes (a suspect below [`DEATHS_TO_POISON`]).
    #[serde(default)]
    pub deaths: u32,
}

impl Entry {
    fn skipped(&self) -> bool {
        self.kind != "suspect" || self.deaths >= DEATHS_TO_POISON
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    source: String,
    path: String,
    hash: String,
}

/// The book, shared by the parser threads of one owner process.
#[derive(Debug)]
pub struct PoisonBook {
    dir: Option<PathBuf>,
    entries: Mutex<BTreeMap<String, Entry>>,
    marker: Mutex<Option<std::fs::File>>,
    /// Changes made by this process (not those merged from the store), and how many of them the
    /// store has.
    changes: AtomicU64,
    shared: AtomicU64,
}

fn key(source: &str, path: &str) -> String {
    format!("{source}\u{0}{path}")
}

/// sha256 of a file's bytes, as the book keys them.
pub fn file_hash(bytes: &[u8]) -> String {
    cairn_ingest::hex_digest(&[bytes])
}

impl PoisonBook {
    /// A book kept in memory only.
    pub fn in_memory() -> Self {
        Self {
            dir: None,
            entries: Mutex::new(BTreeMap::new()),
            marker: Mutex::new(None),
            changes: AtomicU64::new(0),
            shared: AtomicU64::new(0),
        }
    }

    /// The book of a state folder; a parse marker left by a process that died makes its page a
    /// suspect (or poisons it, on the second death).
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let mut entries: BTreeMap<String, Entry> = std::fs::read(dir.join("poison.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let marker_path = dir.join("parsing");
        let mut died = 0;
        if let Some(m) =
            std::fs::read(&marker_path).ok().and_then(|b| serde_json::from_slice::<Marker>(&b).ok())
        {
            let e = entries.entry(key(&m.source, &m.path)).or_insert(Entry {
                hash: m.hash.clone(),
                kind: "suspect".into(),
                reason: String::new(),
                deaths: 0,
            });
            if e.hash != m.hash {
                *e = Entry { hash: m.hash.clone(), kind: "suspect".into(), reason: String::new(), deaths: 0 };
            }
            e.deaths += 1;
            if e.kind == "suspect" {
                e.reason = format!(
                    "cairn stopped {} time(s) while parsing this file (killed, or out of memory)",
                    e.deaths
                );
            }
            tracing::warn!("{}: {} (source `{}`)", m.path, e.reason, m.source);
            died = 1;
        }
        let marker =
            std::fs::OpenOptions::new().create(true).write(true).truncate(true).open(&marker_path)?;
        // What this machine knows may never have reached the store (a process killed before its
        // put): it is shared at the first put, after the store's book was merged in.
        let unshared = died.max(u64::from(!entries.is_empty()));
        let book = Self {
            dir: Some(dir.to_path_buf()),
            entries: Mutex::new(entries),
            marker: Mutex::new(Some(marker)),
            changes: AtomicU64::new(unshared),
            shared: AtomicU64::new(0),
        };
        book.write();
        Ok(book)
    }

    /// The entry that says to skip these bytes, if any.
    pub fn check(&self, source: &str, path: &str, hash: &str) -> Option<Entry> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.get(&key(source, path)).filter(|e| e.hash == hash && e.skipped()).cloned()
    }

    /// About to parse these bytes: if the process dies before [`PoisonBook::done`], the next
    /// start knows which page it was.
    pub fn begin(&self, source: &str, path: &str, hash: &str) {
        let mut m = self.marker.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = m.as_mut() {
            let line =
                serde_json::to_vec(&Marker { source: source.into(), path: path.into(), hash: hash.into() })
                    .unwrap_or_default();
            // Not fsynced: it must survive the process, not the machine.
            let _ = f.set_len(0).and_then(|_| f.seek(SeekFrom::Start(0))).and_then(|_| f.write_all(&line));
        }
    }

    /// The parse ended (either way): clears the marker, and a suspect that parsed is forgiven.
    pub fn done(&self, source: &str, path: &str, parsed: bool) {
        if let Some(f) = self.marker.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            let _ = f.set_len(0);
        }
        if parsed {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            if entries.remove(&key(source, path)).is_some() {
                drop(entries);
                self.save();
            }
        }
    }

    /// Remember these bytes as failed.
    pub fn add(&self, source: &str, path: &str, hash: &str, kind: &str, reason: &str) {
        let e = Entry { hash: hash.into(), kind: kind.into(), reason: reason.into(), deaths: 0 };
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).insert(key(source, path), e);
        self.save();
    }

    /// Forget every page of a source (the source was removed).
    pub fn forget_source(&self, source: &str) {
        let prefix = key(source, "");
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| !k.starts_with(&prefix));
        self.save();
    }

    /// Every entry that skips a page, as (source, path, entry).
    pub fn skipped(&self) -> Vec<(String, String, Entry)> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .filter(|(_, e)| e.skipped())
            .filter_map(|(k, e)| {
                k.split_once('\u{0}').map(|(s, p)| (s.to_string(), p.to_string(), e.clone()))
            })
            .collect()
    }

    /// The book as the store keeps it, and the count of this process's changes it holds (for
    /// [`PoisonBook::shared_up_to`]); `None` when it holds every one already.
    pub fn unshared(&self) -> Option<(Vec<u8>, u64)> {
        let changes = self.changes.load(Ordering::SeqCst);
        if changes == self.shared.load(Ordering::SeqCst) {
            return None;
        }
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        serde_json::to_vec(&*entries).ok().map(|b| (b, changes))
    }

    /// The store holds this process's changes up to `changes`.
    pub fn shared_up_to(&self, changes: u64) {
        self.shared.fetch_max(changes, Ordering::SeqCst);
    }

    /// Take what another machine's writer remembered (the store's book, as
    /// [`PoisonBook::unshared`] wrote it): pages this book does not know, and for the same bytes
    /// the worse verdict (a failure over a suspicion, the most deaths). Nothing is forgotten
    /// here: a page forgiven elsewhere is forgiven here when it parses. Returns how many entries
    /// it changed.
    pub fn merge(&self, stored: &[u8]) -> usize {
        let Ok(theirs) = serde_json::from_slice::<BTreeMap<String, Entry>>(stored) else {
            tracing::warn!("the store's book of failed pages is not readable; it is rewritten");
            self.changes.fetch_add(1, Ordering::SeqCst);
            return 0;
        };
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut taken = 0;
        for (k, e) in theirs {
            match entries.get_mut(&k) {
                None => {
                    entries.insert(k, e);
                    taken += 1;
                }
                Some(mine) if mine.hash == e.hash => {
                    if mine.kind == "suspect" && e.kind != "suspect" {
                        *mine = Entry { deaths: mine.deaths.max(e.deaths), ..e };
                        taken += 1;
                    } else if e.deaths > mine.deaths {
                        mine.deaths = e.deaths;
                        taken += 1;
                    }
                }
                Some(_) => {}
            }
        }
        drop(entries);
        if taken > 0 {
            self.write();
        }
        taken
    }

    /// A change made here: on disk now, and in the store at the next share.
    fn save(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.write();
    }

    fn write(&self) {
        let Some(dir) = &self.dir else { return };
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let tmp = dir.join("poison.json.tmp");
        let ok = serde_json::to_vec_pretty(&*entries)
            .map_err(std::io::Error::other)
            .and_then(|b| std::fs::write(&tmp, b))
            .and_then(|_| std::fs::rename(&tmp, dir.join("poison.json")));
        if let Err(e) = ok {
            tracing::warn!("{}: cannot save the pages remembered as failed: {e}", dir.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_page_is_skipped_until_its_bytes_change_and_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let book = PoisonBook::open(dir.path()).unwrap();
        book.add("notes", "bomb.md", "h1", "crashed", "the parser crashed");
        assert!(book.check("notes", "bomb.md", "h1").is_some());
        assert!(book.check("notes", "bomb.md", "h2").is_none(), "changed bytes are tried again");
        drop(book);
        let again = PoisonBook::open(dir.path()).unwrap();
        assert_eq!(again.check("notes", "bomb.md", "h1").unwrap().kind, "crashed");
        again.done("notes", "bomb.md", true);
        assert!(again.check("notes", "bomb.md", "h1").is_none(), "a page that parses is forgiven");
    }

    #[test]
    fn a_page_is_poisoned_after_the_second_death_on_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let book = PoisonBook::open(dir.path()).unwrap();
        book.begin("notes", "killer.md", "k");
        drop(book); // the process died mid-parse
        let second = PoisonBook::open(dir.path()).unwrap();
        assert!(second.check("notes", "killer.md", "k").is_none(), "one death only makes a suspect");
        second.begin("notes", "killer.md", "k");
        drop(second);
        let third = PoisonBook::open(dir.path()).unwrap();
        let e = third.check("notes", "killer.md", "k").expect("poisoned");
        assert!(e.reason.contains("2 time(s)"), "{e:?}");
        // A clean parse in between clears the suspect.
        third.begin("notes", "fine.md", "f");
        drop(third);
        let fourth = PoisonBook::open(dir.path()).unwrap();
        fourth.begin("notes", "fine.md", "f");
        fourth.done("notes", "fine.md", true);
        drop(fourth);
        let fifth = PoisonBook::open(dir.path()).unwrap();
        assert!(fifth.check("notes", "fine.md", "f").is_none());
    }

    #[test]
    fn a_book_from_another_machine_adds_its_pages_and_its_worse_verdicts_and_forgets_nothing() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        // Machine A's writer died once on `killer.md` and found `bomb.md` failing.
        let book_a = PoisonBook::open(a.path()).unwrap();
        book_a.begin("notes", "killer.md", "k");
        drop(book_a);
        let book_a = PoisonBook::open(a.path()).unwrap();
        book_a.add("notes", "bomb.md", "h1", "crashed", "the parser crashed");
        let (stored, changes) = book_a.unshared().expect("A changed its book");
        book_a.shared_up_to(changes);
        assert!(book_a.unshared().is_none(), "nothing new to share");

        // Machine B knows `bomb.md` as a suspect and `old.md` A never saw.
        let book_b = PoisonBook::open(b.path()).unwrap();
        book_b.begin("notes", "bomb.md", "h1");
        drop(book_b);
        let book_b = PoisonBook::open(b.path()).unwrap();
        book_b.add("notes", "old.md", "o", "too_large", "over the bound");
        book_b.shared_up_to(book_b.unshared().unwrap().1);
        assert_eq!(book_b.merge(&stored), 2, "killer.md taken, bomb.md's verdict raised");
        assert!(book_b.unshared().is_none(), "what was merged is not this machine's to share");
        assert_eq!(book_b.check("notes", "bomb.md", "h1").unwrap().kind, "crashed");
        assert!(book_b.check("notes", "old.md", "o").is_some(), "nothing forgotten");
        assert!(book_b.check("notes", "killer.md", "k").is_none(), "one death: a suspect still");
        // B's writer dies on `killer.md` too: the second death on those bytes poisons it.
        book_b.begin("notes", "killer.md", "k");
        drop(book_b);
        let book_b = PoisonBook::open(b.path()).unwrap();
        assert!(book_b.check("notes", "killer.md", "k").is_some(), "poisoned across machines");
        assert_eq!(book_b.merge(&stored), 0, "merging again changes nothing");
        book_b.shared_up_to(book_b.unshared().expect("its own death is B's to share").1);
        assert_eq!(book_b.merge(b"not json"), 0);
        assert!(book_b.unshared().is_some(), "an unreadable book in the store is rewritten");
    }
}
