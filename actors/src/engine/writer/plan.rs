//! The commit planner: what the writer's next page commit holds.
//!
//! It keeps the stored state of every page, the parsed pages and removals waiting for a commit,
//! and the pages removed moments ago. It decides which pages changed (an unchanged file is only
//! remembered, never rewritten), that the last version of a page in the buffer wins, which
//! removals still apply, and which removal and new page with the same content are a move the
//! path events did not show. Pure: no actor, no store and no clock (time is passed in), so its
//! decisions are replayed from fixtures (`fixtures/events/planner/`). The writer only sequences
//! it with the store, the resident index and the model.

use super::Origin;
use crate::core::event::EventKind;
use crate::core::status::FileFailure;
use crate::engine::workers::Parsed;
use cairn_index::{PageState, WriteBatch};
use cairn_ingest::{ParsedPage, rel_string, slug_variant};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::time::Instant;

/// How long a removed page can still be matched, by content, with a new one as a move.
pub const RENAME_WINDOW: Duration = Duration::from_secs(5);

/// A parsed page waiting for a commit: its file's modification time, and where it came from.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub page: ParsedPage,
    pub mtime_ms: i64,
    pub origin: Origin,
}

/// What one ingest decided.
#[derive(Debug, Default)]
pub struct Ingested {
    /// Warnings, parses, skips and failures, in the order of the files.
    pub events: Vec<EventKind>,
    /// Files that need no commit: unchanged, failed, or removed where nothing was stored.
    pub done: usize,
    /// Files that could not be parsed, for the status.
    pub failures: Vec<FileFailure>,
}

/// One page commit: each page once (its last version), the slugs to remove, the events that
/// become true with it (renames by content), and the files it settles.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub pages: Vec<Waiting>,
    pub removals: Vec<String>,
    pub deferred: Vec<EventKind>,
    /// The files it settles (for the pending count).
    pub files: usize,
}

/// The planner's state (see the module's doc).
#[derive(Debug, Default)]
pub struct Planner {
    known: HashMap<String, PageState>,
    /// Path → the slugs stored for it: one, but for a page whose slug an older rule made, until
    /// the next scan removes it.
    slugs_at: HashMap<String, Vec<String>>,
    buffer: Vec<Waiting>,
    buffered_chunks: usize,
    removals: BTreeSet<String>,
    /// Events decided at ingest time that become true with the next commit (renames by hash).
    deferred: Vec<EventKind>,
    /// Files behind the buffer and the removals, for the pending count.
    files: usize,
    /// Content hash → path and time of pages removed by recent commits.
    recently_removed: HashMap<String, (String, Instant)>,
    /// The problems last reported per path, so a file re-read unchanged does not repeat them.
    reported: HashMap<String, Vec<String>>,
}

impl Planner {
    /// Start from what the tables hold: every page's state, and the slugs whose chunk rows have
    /// no page row (a crash between the two writes), which the first commit removes.
    pub fn load(&mut self, states: HashMap<String, PageState>, orphans: impl IntoIterator<Item = String>) {
        self.slugs_at.clear();
        for (slug, st) in &states {
            self.slugs_at.entry(st.path.clone()).or_default().push(slug.clone());
        }
        self.known = states;
        self.removals.extend(orphans);
    }

    /// The stored state of every page, by slug, as of the last commit.
    pub fn known(&self) -> &HashMap<String, PageState> {
        &self.known
    }

    pub fn buffered_chunks(&self) -> usize {
        self.buffered_chunks
    }

    pub fn buffered_pages(&self) -> usize {
        self.buffer.len()
    }

    pub fn pending_removals(&self) -> usize {
        self.removals.len()
    }

    /// Nothing waits for a commit.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty() && self.removals.is_empty()
    }

    /// Take in one batch of the watcher's: removed paths (`true`: maybe a folder) first, as they
    /// describe the folder before the files just read, then the parsed files; `renamed` are the
    /// renames the path events reported, so a rename by content is not told twice.
    pub fn ingest(
        &mut self,
        removed: Vec<(PathBuf, bool)>,
        parsed: Vec<Parsed>,
        renamed: &[(String, String)],
        origin: Origin,
        now: Instant,
    ) -> Ingested {
        let mut out = Ingested::default();
        for (rel, folder) in removed {
            let waits = self.remove_path(&rel, folder);
            self.count(waits, &mut out);
        }
        for p in parsed {
            match p {
                Parsed::Page { page, mtime_ms } => self.page(*page, mtime_ms, origin, &mut out),
                Parsed::Failed { rel, error } => {
                    self.failed(rel_string(&rel), &error, &mut out);
                    out.done += 1;
                }
                // Not read, not removed: the page stays as last indexed.
                Parsed::Placeholder { .. } => out.done += 1,
                // Only the page at that path: a folder standing there now holds new pages.
                Parsed::Gone { rel } | Parsed::Directory { rel } => {
                    self.reported.remove(&rel_string(&rel));
                    let waits = self.remove_path(&rel, false);
                    self.count(waits, &mut out);
                }
            }
        }
        self.detect_renames_by_hash(renamed, now);
        out
    }

    /// A file that cannot be indexed: reported (once while its problem stays the same) and
    /// counted for the status.
    fn failed(&mut self, path: String, error: &cairn_ingest::Error, out: &mut Ingested) {
        let f = FileFailure { path, kind: error.kind().into(), reason: error.to_string() };
        if self.reported.get(&f.path) != Some(&vec![f.reason.clone()]) {
            self.reported.insert(f.path.clone(), vec![f.reason.clone()]);
            out.events.push(EventKind::PageFailed {
                path: f.path.clone(),
                kind: f.kind.clone(),
                reason: f.reason.clone(),
            });
        }
        out.failures.push(f);
    }

    /// The other file that holds `slug`: waiting for a commit, or stored and not being removed.
    fn holder(&self, slug: &str, path: &str) -> Option<&str> {
        let waiting = self.buffer.iter().find(|w| w.page.slug == slug && w.page.path != path);
        let stored = || self.known.get(slug).filter(|st| st.path != path && !self.removals.contains(slug));
        waiting.map(|w| w.page.path.as_str()).or_else(|| stored().map(|st| st.path.as_str()))
    }

    /// Give `page` the first of the slugs its file name can have (its own, then `slug~2`, …)
    /// that no other file holds: files whose names make one slug are all indexed, the one that
    /// holds it keeps it, and a page under `slug~k` moves down when a lower one is free (its
    /// `slug_taken` problem has it read again at each scan). Another slug stored for the file (a
    /// variant it left, or a slug an older rule made) goes with this commit.
    fn assign_slug(&mut self, page: &mut ParsedPage) {
        let own = page.own_slug().to_string();
        let given = (1..)
            .map(|k| slug_variant(&own, k))
            .find(|s| self.holder(s, &page.path).is_none())
            .expect("a file's slugs run out before u32 does");
        if given != page.slug {
            let holder = self.holder(&own, &page.path).unwrap_or_default().to_string();
            page.take_slug(given, Path::new(&holder));
        }
        let stale: Vec<String> = self
            .slugs_at
            .get(&page.path)
            .into_iter()
            .flatten()
            .filter(|s| **s != page.slug)
            .cloned()
            .collect();
        self.removals.extend(stale);
    }

    /// A removal either waits for the commit or had nothing to remove.
    fn count(&mut self, waits: bool, out: &mut Ingested) {
        match waits {
            true => self.files += 1,
            false => out.done += 1,
        }
    }

    fn page(&mut self, mut page: ParsedPage, mtime_ms: i64, origin: Origin, out: &mut Ingested) {
        self.assign_slug(&mut page);
        let problems: Vec<String> = page.problems.iter().map(|e| e.to_string()).collect();
        if self.reported.get(&page.path) != Some(&problems) {
            out.events.extend(page.problems.iter().map(|e| EventKind::PageWarning {
                path: page.path.clone(),
                kind: e.kind().into(),
                reason: e.to_string(),
            }));
            self.reported.insert(page.path.clone(), problems);
        }
        let unchanged = self.known.get(&page.slug).is_some_and(|s| {
            s.content_hash == page.content_hash && s.path == page.path && !self.removals.contains(&page.slug)
        }) && !self.buffer.iter().any(|w| w.page.slug == page.slug);
        if unchanged {
            // Touched, not changed: remember the file as it is now, so the next scan's stat
            // check passes and does not read it again.
            if let Some(s) = self.known.get_mut(&page.slug) {
                s.mtime_ms = mtime_ms;
                s.bytes = page.bytes as i64;
            }
            out.events.push(EventKind::PageSkipped { path: page.path.clone(), slug: page.slug.clone() });
            out.done += 1;
            return;
        }
        out.events.push(EventKind::PageParsed {
            path: page.path.clone(),
            slug: page.slug.clone(),
            chunks: page.chunks.len(),
        });
        self.buffered_chunks += page.chunks.len();
        self.buffer.push(Waiting { page, mtime_ms, origin });
        self.files += 1;
    }

    /// Mark the page at `rel` (and, with `folder`, every page under it) for removal. False when
    /// nothing stored or buffered is there.
    fn remove_path(&mut self, rel: &Path, folder: bool) -> bool {
        let mut any = false;
        for s in self.stored_at(rel, folder) {
            any |= self.removals.insert(s);
        }
        // A page buffered for that path and not yet committed goes too.
        let (path, prefix) = path_and_prefix(rel, folder);
        let before = self.buffer.len();
        self.buffer.retain(|w| w.page.path != path && !w.page.path.starts_with(&prefix));
        self.buffered_chunks = self.buffer.iter().map(|w| w.page.chunks.len()).sum();
        any || before != self.buffer.len()
    }

    /// Slugs of the stored pages at `rel` (with `folder`, under it too).
    fn stored_at(&self, rel: &Path, folder: bool) -> Vec<String> {
        let (path, prefix) = path_and_prefix(rel, folder);
        let mut slugs: Vec<String> = self.slugs_at.get(&path).cloned().unwrap_or_default();
        if folder {
            slugs.extend(
                self.known.iter().filter(|(_, st)| st.path.starts_with(&prefix)).map(|(s, _)| s.clone()),
            );
        }
        slugs
    }

    /// How many stored pages these removed paths would take, and how many are stored.
    pub fn covers(&self, removed: &[(PathBuf, bool)]) -> (usize, usize) {
        let covered: HashSet<String> =
            removed.iter().flat_map(|(rel, folder)| self.stored_at(rel, *folder)).collect();
        (covered.len(), self.known.len())
    }

    /// A removal and a new page with the same content are a rename the path events did not show
    /// (a delete + create pair, or a move while cairn was not running).
    fn detect_renames_by_hash(&mut self, by_path: &[(String, String)], now: Instant) {
        // Removed pages: those waiting in this batch, and those committed moments ago (the two
        // halves of a move can settle in different ticks).
        let horizon = now.checked_sub(RENAME_WINDOW);
        self.recently_removed.retain(|_, (_, at)| horizon.is_none_or(|h| *at >= h));
        let mut gone: Vec<(String, String, String)> = self
            .removals
            .iter()
            .filter_map(|s| self.known.get(s).map(|st| (s.clone(), st.path.clone(), st.content_hash.clone())))
            .collect();
        gone.extend(
            self.recently_removed.iter().map(|(hash, (path, _))| (String::new(), path.clone(), hash.clone())),
        );
        for (slug, path, hash) in gone {
            let moved = self.buffer.iter().find(|w| {
                w.page.content_hash == hash
                    && w.page.slug != slug
                    && w.page.path != path
                    && !self.known.contains_key(&w.page.slug)
            });
            let Some(w) = moved else { continue };
            let already = by_path.iter().any(|(f, t)| *f == path && *t == w.page.path)
                || self
                    .deferred
                    .iter()
                    .any(|e| matches!(e, EventKind::FileRenamed { to, .. } if *to == w.page.path));
            if !already {
                self.deferred.push(EventKind::FileRenamed {
                    from: path,
                    to: w.page.path.clone(),
                    by_hash: true,
                });
            }
        }
    }

    /// The next commit, and the buffer emptied into it; `None` when nothing waits. The last
    /// version of a page wins, and a removal of a page written again is no removal.
    pub fn take(&mut self) -> Option<Plan> {
        if self.is_empty() {
            return None;
        }
        let mut pages: Vec<Waiting> = Vec::new();
        for w in std::mem::take(&mut self.buffer) {
            pages.retain(|q| q.page.slug != w.page.slug);
            pages.push(w);
        }
        let removals = std::mem::take(&mut self.removals)
            .into_iter()
            .filter(|s| !pages.iter().any(|w| w.page.slug == *s))
            .collect();
        self.buffered_chunks = 0;
        Some(Plan {
            pages,
            removals,
            deferred: std::mem::take(&mut self.deferred),
            files: std::mem::take(&mut self.files),
        })
    }

    /// A commit of `batch` landed at `now`: its pages are stored as written, its removals are
    /// gone (and remembered a while for a move's other half).
    pub fn committed(&mut self, batch: &WriteBatch, now: Instant) {
        for s in &batch.removals {
            if let Some(st) = self.known.remove(s) {
                self.unindex(s, &st.path);
                self.recently_removed.insert(st.content_hash, (st.path, now));
            }
        }
        for w in &batch.upserts {
            let p = &w.page;
            let state = PageState {
                path: p.path.clone(),
                content_hash: p.content_hash.clone(),
                mtime_ms: w.mtime_ms,
                bytes: p.bytes as i64,
                clean: p.problems.is_empty(),
            };
            if let Some(old) = self.known.insert(p.slug.clone(), state) {
                self.unindex(&p.slug, &old.path);
            }
            self.slugs_at.entry(p.path.clone()).or_default().push(p.slug.clone());
        }
    }

    /// `slug` is no longer stored for `path`.
    fn unindex(&mut self, slug: &str, path: &str) {
        if let Some(slugs) = self.slugs_at.get_mut(path) {
            slugs.retain(|s| s != slug);
            if slugs.is_empty() {
                self.slugs_at.remove(path);
            }
        }
    }

    /// A commit of `plan` failed: nothing is lost, it goes back in front of anything newer.
    pub fn restore(&mut self, plan: Plan) {
        let newer = std::mem::take(&mut self.buffer);
        self.buffer = plan.pages.into_iter().chain(newer).collect();
        self.buffered_chunks = self.buffer.iter().map(|w| w.page.chunks.len()).sum();
        self.removals.extend(plan.removals);
        self.deferred.splice(0..0, plan.deferred);
        self.files += plan.files;
    }
}

fn path_and_prefix(rel: &Path, folder: bool) -> (String, String) {
    let path = rel_string(rel);
    let prefix = if folder { format!("{path}/") } else { "\0".into() };
    (path, prefix)
}

/// Replays every `fixtures/events/planner/*.json`: pages stored at the start, then steps at
/// logical times (ingests, takes, commits, failed commits, coverage questions), each with what
/// the planner must decide.
#[cfg(test)]
mod replay {
    use super::*;
    use cairn_index::PageWrite;
    use cairn_ingest::{ParseOptions, parse_page};
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Case {
        description: String,
        #[serde(default)]
        stored: Vec<File>,
        steps: Vec<Step>,
    }

    #[derive(Deserialize)]
    struct File {
        path: String,
        text: String,
    }

    #[derive(Deserialize)]
    struct Step {
        #[serde(default)]
        at: u64,
        ingest: Option<Ingest>,
        /// The ingest's events, as `name path` (`file_renamed` as `from -> to`).
        events: Option<Vec<String>>,
        /// Expected plan; `null` when nothing waits.
        #[serde(default, deserialize_with = "some")]
        take: Option<Option<Taken>>,
        /// Commit the last plan taken (`true`), or fail it (`false`: it goes back).
        commit: Option<bool>,
        /// Removed paths (`[path, maybe a folder]`) and the (covered, stored) answer.
        covers: Option<(Removed, (usize, usize))>,
    }

    /// Removed paths, each with whether it may be a folder.
    type Removed = Vec<(String, bool)>;

    fn some<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<Taken>>, D::Error> {
        Option::<Taken>::deserialize(d).map(Some)
    }

    #[derive(Deserialize, Default)]
    #[serde(default)]
    struct Ingest {
        removed: Removed,
        pages: Vec<File>,
        gone: Vec<String>,
        renamed: Vec<(String, String)>,
        edit: bool,
    }

    #[derive(Deserialize, Debug, PartialEq)]
    struct Taken {
        /// `[path, text]` of each page written, in order.
        pages: Vec<(String, String)>,
        /// Their slugs, when the case says them.
        #[serde(default)]
        slugs: Vec<String>,
        #[serde(default)]
        removals: Vec<String>,
        #[serde(default)]
        events: Vec<String>,
        files: usize,
    }

    fn parse(f: &File) -> ParsedPage {
        parse_page("notes", Path::new(&f.path), f.text.as_bytes(), &ParseOptions::default()).unwrap()
    }

    fn render(e: &EventKind) -> String {
        let v = serde_json::to_value(e).unwrap();
        match e {
            EventKind::FileRenamed { from, to, .. } => format!("{} {from} -> {to}", e.name()),
            _ => format!("{} {}", e.name(), v["path"].as_str().unwrap_or("")),
        }
    }

    fn batch(plan: &Plan) -> WriteBatch {
        let upserts = plan
            .pages
            .iter()
            .map(|w| PageWrite {
                page: w.page.clone(),
                vectors: vec![None; w.page.chunks.len()],
                mtime_ms: w.mtime_ms,
            })
            .collect();
        WriteBatch { upserts, removals: plan.removals.clone() }
    }

    #[test]
    fn planner_cases_replay_to_their_expected_plans() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/events/planner");
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        assert!(files.len() >= 6, "planner cases missing in {}", dir.display());
        let start = Instant::now();
        for file in files {
            let case: Case = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            let at = |step: &Step| format!("{} ({}) at {}", file.display(), case.description, step.at);
            let mut planner = Planner::default();
            let stored = case.stored.iter().map(|f| {
                let p = parse(f);
                let state = PageState {
                    path: p.path,
                    content_hash: p.content_hash,
                    mtime_ms: 1,
                    bytes: 1,
                    clean: true,
                };
                (p.slug, state)
            });
            planner.load(stored.collect(), []);
            let mut last: Option<Plan> = None;
            for step in &case.steps {
                let now = start + Duration::from_millis(step.at);
                if let Some(i) = &step.ingest {
                    let removed = i.removed.iter().map(|(p, f)| (PathBuf::from(p), *f)).collect();
                    let parsed = i
                        .pages
                        .iter()
                        .map(|f| Parsed::Page { page: Box::new(parse(f)), mtime_ms: 2 })
                        .chain(i.gone.iter().map(|p| Parsed::Gone { rel: PathBuf::from(p) }))
                        .collect();
                    let origin = if i.edit { Origin::Edit } else { Origin::Scan };
                    let out = planner.ingest(removed, parsed, &i.renamed, origin, now);
                    if let Some(want) = &step.events {
                        assert_eq!(&out.events.iter().map(render).collect::<Vec<_>>(), want, "{}", at(step));
                    }
                }
                if let Some(want) = &step.take {
                    last = planner.take();
                    let slugs = want.as_ref().is_some_and(|t| !t.slugs.is_empty());
                    let got = last.as_ref().map(|p| Taken {
                        pages: p
                            .pages
                            .iter()
                            .map(|w| {
                                let text = case
                                    .steps
                                    .iter()
                                    .flat_map(|s| s.ingest.iter().flat_map(|i| &i.pages))
                                    .find(|f| {
                                        f.path == w.page.path && parse(f).content_hash == w.page.content_hash
                                    })
                                    .map_or(String::new(), |f| f.text.clone());
                                (w.page.path.clone(), text)
                            })
                            .collect(),
                        slugs: p.pages.iter().filter(|_| slugs).map(|w| w.page.slug.clone()).collect(),
                        removals: p.removals.clone(),
                        events: p.deferred.iter().map(render).collect(),
                        files: p.files,
                    });
                    assert_eq!(&got, want, "{}", at(step));
                }
                match step.commit {
                    Some(true) => planner.committed(&batch(last.as_ref().expect("a plan taken")), now),
                    Some(false) => planner.restore(last.take().expect("a plan taken")),
                    None => {}
                }
                if let Some((removed, want)) = &step.covers {
                    let removed: Vec<(PathBuf, bool)> =
                        removed.iter().map(|(p, f)| (PathBuf::from(p), *f)).collect();
                    assert_eq!(planner.covers(&removed), *want, "{}", at(step));
                }
            }
        }
    }
}
