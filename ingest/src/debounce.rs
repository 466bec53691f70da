//! The fs-event debounce/coalesce state machine. Pure: time is a logical millisecond count
//! passed in by the caller, so tests replay event files (`fixtures/events/debounce/`).
//!
//! Raw events for vault-relative paths go in; settled per-path changes come out once a path has
//! been quiet for the quiet period: an editor's write-temp-then-rename save is one `Changed`, a
//! create-then-delete is nothing, a rename is `Renamed { from, to }`, a flood is one change.
//!
//! Removals wait longer, and together: each removal (a delete, or a file renamed away whose
//! destination is not yet known) holds every pending removal until removals have been quiet for
//! [`Debouncer::REMOVAL_QUIET_MS`]. An `rm` of thirty notes therefore settles as one batch even
//! when the machine is loaded and the unlinks straggle, so the mass-removal guard judges it
//! whole, not one page at a time.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

/// A raw file-system event, as the watcher translates notify's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RawEvent {
    Create {
        path: PathBuf,
    },
    Modify {
        path: PathBuf,
    },
    Remove {
        path: PathBuf,
    },
    /// The first half of a rename; `cookie` pairs it with its `RenameTo` (inotify's tracker).
    RenameFrom {
        path: PathBuf,
        cookie: Option<u64>,
    },
    RenameTo {
        path: PathBuf,
        cookie: Option<u64>,
    },
    /// A rename reported in one event.
    Rename {
        from: PathBuf,
        to: PathBuf,
    },
    /// The watcher lost events (queue overflow): the folder must be rescanned.
    Rescan,
}

/// A settled change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settled {
    Rescan,
    Renamed { from: PathBuf, to: PathBuf },
    Removed(PathBuf),
    Changed(PathBuf),
}

#[derive(Debug, Clone)]
struct Entry {
    /// The path held a file before the first event of this window.
    existed_before: bool,
    exists: bool,
    /// The file now at this path came from that path (which held a file before the window).
    renamed_from: Option<PathBuf>,
    /// The file at this path was renamed away; the target carries what happens to it.
    moved_out: bool,
    /// Renamed away by a cookie event whose partner has not come: gone, unless it arrives.
    awaiting_pair: bool,
    deadline: u64,
}

impl Entry {
    /// A file that was there before this window is gone, and no rename carries it elsewhere.
    fn is_removal(&self) -> bool {
        let held_a_file = self.existed_before || self.renamed_from.is_some();
        !self.exists && held_a_file && (!self.moved_out || self.awaiting_pair)
    }
}

/// The debouncer. Feed events with [`Debouncer::push`], call [`Debouncer::tick`] at or after
/// [`Debouncer::next_deadline`].
#[derive(Debug, Clone)]
pub struct Debouncer {
    quiet_ms: u64,
    /// Pending removals settle no earlier than this (the last removal plus the removals' quiet
    /// period).
    removals_until: u64,
    entries: BTreeMap<PathBuf, Entry>,
    /// Unpaired `RenameFrom`s by cookie: the path and the original path of its file.
    pending_from: HashMap<u64, (PathBuf, Option<PathBuf>)>,
    /// The last pair joined by cookie, so a following one-event `Rename` of it is not applied twice.
    last_pair: Option<(PathBuf, PathBuf)>,
    rescan_at: Option<u64>,
}

impl Debouncer {
    /// Default quiet period.
    pub const DEFAULT_QUIET_MS: u64 = 150;
    /// How long removals must be quiet before they settle (at least the quiet period). Long
    /// enough for the unlinks of one command to arrive together on a loaded machine; a deleted
    /// page stays findable this long.
    pub const REMOVAL_QUIET_MS: u64 = 1_000;

    pub fn new(quiet_ms: u64) -> Self {
        Self {
            quiet_ms,
            removals_until: 0,
            entries: BTreeMap::new(),
            pending_from: HashMap::new(),
            last_pair: None,
            rescan_at: None,
        }
    }

    /// Paths with unsettled changes.
    pub fn pending(&self) -> usize {
        self.entries.len() + usize::from(self.rescan_at.is_some())
    }

    /// When the next change may settle.
    pub fn next_deadline(&self) -> Option<u64> {
        self.entries.values().map(|e| self.due(e)).chain(self.rescan_at).min()
    }

    /// How long removals wait: [`Debouncer::REMOVAL_QUIET_MS`], or the quiet period if longer.
    pub fn removal_quiet(&self) -> u64 {
        Self::REMOVAL_QUIET_MS.max(self.quiet_ms)
    }

    /// When an entry may settle: removals wait for the removals' quiet period.
    fn due(&self, e: &Entry) -> u64 {
        if e.is_removal() { e.deadline.max(self.removals_until) } else { e.deadline }
    }

    fn touch(&mut self, path: PathBuf, existed_if_new: bool, now: u64) -> &mut Entry {
        let deadline = now + self.quiet_ms;
        let e = self.entries.entry(path).or_insert(Entry {
            existed_before: existed_if_new,
            exists: existed_if_new,
            renamed_from: None,
            moved_out: false,
            awaiting_pair: false,
            deadline,
        });
        e.deadline = deadline;
        e
    }

    /// The original path of the file now at `path` (`None` if it was created in this window).
    fn origin(&self, path: &PathBuf) -> Option<PathBuf> {
        match self.entries.get(path) {
            None => Some(path.clone()),
            Some(e) if e.moved_out && !e.exists => None,
            Some(e) => e.renamed_from.clone().or_else(|| e.existed_before.then(|| path.clone())),
        }
    }

    pub fn push(&mut self, event: RawEvent, now: u64) {
        if !matches!(event, RawEvent::Rename { .. }) {
            self.last_pair = None;
        }
        match event {
            RawEvent::Create { path } => {
                let e = self.touch(path, false, now);
                e.exists = true;
            }
            RawEvent::Modify { path } => {
                let e = self.touch(path, true, now);
                e.exists = true;
            }
            RawEvent::Remove { path } => {
                let e = self.touch(path, true, now);
                e.exists = false;
                self.removals_until = now + self.removal_quiet();
            }
            RawEvent::RenameFrom { path, cookie } => {
                let origin = self.origin(&path);
                let e = self.touch(path.clone(), true, now);
                e.exists = false;
                e.renamed_from = None;
                if let Some(cookie) = cookie {
                    e.moved_out = true;
                    e.awaiting_pair = true;
                    self.pending_from.insert(cookie, (path, origin));
                }
                self.removals_until = now + self.removal_quiet();
            }
            RawEvent::RenameTo { path, cookie } => {
                match cookie.and_then(|c| self.pending_from.remove(&c)) {
                    Some((from, origin)) => {
                        self.last_pair = Some((from.clone(), path.clone()));
                        self.arrive(path, origin, now);
                        // The source's deadline moves with the pair, so both settle together.
                        if let Some(src) = self.entries.get_mut(&from) {
                            src.deadline = now + self.quiet_ms;
                            src.awaiting_pair = false;
                        }
                    }
                    None => {
                        let e = self.touch(path, false, now);
                        e.exists = true;
                    }
                }
            }
            RawEvent::Rename { from, to } => {
                if self.last_pair.take() == Some((from.clone(), to.clone())) {
                    return;
                }
                let origin = self.origin(&from);
                let src = self.touch(from, true, now);
                src.exists = false;
                src.renamed_from = None;
                src.moved_out = true;
                src.awaiting_pair = false;
                self.arrive(to, origin, now);
            }
            RawEvent::Rescan => {
                self.rescan_at = Some(now + self.quiet_ms);
            }
        }
    }

    fn arrive(&mut self, path: PathBuf, origin: Option<PathBuf>, now: u64) {
        let e = self.touch(path, false, now);
        e.exists = true;
        e.moved_out = false;
        e.renamed_from = origin;
    }

    /// Changes settled by `now`, in a stable order: rescan, renames, removals, changes.
    pub fn tick(&mut self, now: u64) -> Vec<Settled> {
        let mut out = Vec::new();
        if self.rescan_at.is_some_and(|t| t <= now) {
            // A rescan reconciles everything: pending per-path state is subsumed by it.
            self.rescan_at = None;
            self.entries.clear();
            self.pending_from.clear();
            return vec![Settled::Rescan];
        }
        let mut ready: Vec<PathBuf> =
            self.entries.iter().filter(|(_, e)| self.due(e) <= now).map(|(p, _)| p.clone()).collect();
        // A rename settles only with its source path (which may have been re-created).
        let blocked: Vec<PathBuf> = ready
            .iter()
            .filter_map(|p| {
                let from = self.entries[p].renamed_from.as_ref()?;
                let waiting = self.entries.get(from).is_some_and(|src| self.due(src) > now);
                waiting.then(|| p.clone())
            })
            .collect();
        ready.retain(|p| !blocked.contains(p));
        ready.retain(|p| {
            let is_source_of_blocked =
                blocked.iter().any(|b| self.entries[b].renamed_from.as_ref() == Some(p));
            !is_source_of_blocked
        });
        for path in ready {
            let e = self.entries.remove(&path).expect("ready entries exist");
            if e.moved_out && !e.exists {
                let unpaired = self.pending_from.iter().find(|(_, (p, _))| *p == path).map(|(c, _)| *c);
                if let Some((_, origin)) = unpaired.and_then(|c| self.pending_from.remove(&c)) {
                    // Moved out of the watched tree: gone.
                    out.extend(origin.map(Settled::Removed));
                }
                continue;
            }
            match (e.exists, e.renamed_from) {
                (true, Some(from)) if from != path => out.push(Settled::Renamed { from, to: path }),
                (true, _) => out.push(Settled::Changed(path)),
                (false, Some(from)) => out.push(Settled::Removed(from)),
                (false, None) if e.existed_before => out.push(Settled::Removed(path)),
                (false, None) => {}
            }
        }
        out.sort();
        out.dedup();
        out
    }
}
