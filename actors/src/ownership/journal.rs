//! The changes the writer commits, for the readers on other machines.
//!
//! After each commit of a source (pages, or vectors attached), the writer puts one object,
//! `_cairn/changes/<source>/<version>.json`: the chunks table's version after the commit (the
//! sequence LanceDB numbers that table's commits with), the pages it wrote, the slugs it removed
//! and the chunks it gave vectors to. Then it puts `_cairn/head.json`: the latest version and
//! commit time of every source, and who writes. A reader looks at the head with a conditional
//! GET (unchanged: no body), lists the changes after the version it holds, and applies each one:
//! pages read by key, slugs dropped, vectors read by chunk id. It never reloads a source for an
//! edit; a `reset` (the source's tables made anew) is the one change that means "load it again".
//!
//! Only the lease holder writes the journal, so its order is the commits' order.

use crate::ownership::lease::Holder;
use crate::ownership::remote::Remote;
use object_store::path::Path as StorePath;
use object_store::{GetOptions, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Changes are kept this long (as the tables' versions are on a shared store): a reader behind
/// by more loads its sources again.
pub const RETAIN: std::time::Duration = std::time::Duration::from_secs(600);
/// How often the writer removes the changes past [`RETAIN`].
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Changes handed to the journal's task and not yet written (each commit waits for its own: the
/// readers' view of the writer is part of committing on an object store; sources commit in
/// parallel, so a few can be queued).
const QUEUE: usize = 256;

/// One commit of one source.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// The chunks table's version after the commit.
    pub version: u64,
    /// The writer's clock when it committed.
    pub committed_unix_ms: u64,
    /// Pages written (read them again by slug).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upserted: Vec<String>,
    /// Slugs removed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// Chunks (by id) that got their vectors.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub vectors: Vec<String>,
    /// The source's tables were made anew: load the source again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reset: bool,
}

impl Change {
    /// Several consecutive changes of one source as one (the last of each page's changes wins):
    /// a reader that fell behind reads each page once, at the latest version, instead of once
    /// per commit. `None` when one of them is a `reset` (the source is loaded again anyway).
    pub fn merged(changes: &[Change]) -> Option<Change> {
        let mut last: BTreeMap<&str, bool> = BTreeMap::new(); // slug → upserted (else removed)
        let mut vectors = std::collections::BTreeSet::new();
        let mut out = Change::default();
        for c in changes {
            if c.reset {
                return None;
            }
            last.extend(c.upserted.iter().map(|s| (s.as_str(), true)));
            last.extend(c.removed.iter().map(|s| (s.as_str(), false)));
            vectors.extend(c.vectors.iter().cloned());
            out.version = out.version.max(c.version);
            out.committed_unix_ms = out.committed_unix_ms.max(c.committed_unix_ms);
        }
        for (slug, upserted) in last {
            if upserted { &mut out.upserted } else { &mut out.removed }.push(slug.to_string());
        }
        out.vectors = vectors.into_iter().collect();
        Some(out)
    }
}

/// Where a source stands: its latest committed version and when, in which incarnation of its
/// tables (`epoch`: when they were made anew, 0 for tables older than the journal). Table
/// versions start again in a new incarnation, so a reader of another epoch loads the source again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tip {
    pub version: u64,
    pub committed_unix_ms: u64,
    #[serde(default)]
    pub epoch: u64,
    /// Changes up to this version are no longer kept: a reader that holds an older one loads
    /// the source again.
    #[serde(default)]
    pub floor: u64,
}

/// The journal's head: every source's tip, and the writer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub writer: Option<Holder>,
    pub sources: BTreeMap<String, Tip>,
}

/// The version a change object's name says (`…/<version>.json`).
fn version_of(path: &StorePath) -> Option<u64> {
    path.filename()?.strip_suffix(".json")?.parse().ok()
}

fn changes_of(remote: &Remote, source: &str, epoch: u64) -> StorePath {
    remote.path(&format!("changes/{source}/{epoch:020}"))
}

fn change_path(remote: &Remote, source: &str, epoch: u64, version: u64) -> StorePath {
    remote.path(&format!("changes/{source}/{epoch:020}/{version:020}.json"))
}

/// What a writer publishes beside its commits on an object store: the lease it writes under (no
/// commit once it is not valid) and the journal readers follow.
#[derive(Debug, Clone)]
pub struct Publishing {
    pub lease: crate::ownership::lease::Lease,
    pub journal: Journal,
}

/// The writer's side: changes handed over in commit order, written by one task.
#[derive(Debug, Clone)]
pub struct Journal {
    tx: tokio::sync::mpsc::Sender<Entry>,
}

#[derive(Debug)]
enum Entry {
    /// Answered once the change and the head naming it are written.
    Change(String, Change, tokio::sync::oneshot::Sender<()>),
    Forget(String),
    /// The writer stops: the head says nobody writes.
    Close(tokio::sync::oneshot::Sender<()>),
    /// Changes of `source` in `epoch` up to this version were removed.
    Floor(String, u64, u64),
}

impl Journal {
    /// Start the journal of `remote`, written by `writer` (the lease holder). The head it
    /// continues is read first, so sources this process does not watch keep their tips.
    pub async fn start(remote: Remote, writer: Holder) -> Self {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Entry>(QUEUE);
        let prune_remote = remote.clone();
        let mut head = read_head(&remote).await.unwrap_or_default();
        head.writer = Some(writer);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                // Everything queued goes out before one new head.
                let mut batch = vec![first];
                while let Ok(e) = rx.try_recv() {
                    batch.push(e);
                }
                let mut closed = None;
                let mut written = Vec::new();
                for e in batch {
                    match e {
                        Entry::Change(source, change, done) => {
                            written.push(done);
                            let tip = head.sources.get(&source).copied().unwrap_or_default();
                            // A source made anew starts an epoch of its own (its versions start over).
                            let epoch = if change.reset { change.committed_unix_ms } else { tip.epoch };
                            let path = change_path(&remote, &source, epoch, change.version);
                            let body = serde_json::to_vec(&change).unwrap_or_default();
                            if let Err(e) = remote.store.put(&path, PutPayload::from(body)).await {
                                // Readers cannot follow this gap: a new epoch makes them load it again.
                                tracing::warn!("{path}: {e}; readers of `{source}` load it again");
                                head.sources.insert(source, Tip { epoch: epoch + 1, ..tip });
                                continue;
                            }
                            let (version, committed_unix_ms) = (change.version, change.committed_unix_ms);
                            let floor = if epoch == tip.epoch { tip.floor } else { 0 };
                            head.sources.insert(source, Tip { version, committed_unix_ms, epoch, floor });
                        }
                        Entry::Forget(source) => {
                            head.sources.remove(&source);
                        }
                        Entry::Close(done) => {
                            head.writer = None;
                            closed = Some(done);
                        }
                        Entry::Floor(source, epoch, floor) => {
                            if let Some(tip) = head.sources.get_mut(&source).filter(|t| t.epoch == epoch) {
                                tip.floor = tip.floor.max(floor);
                            }
                        }
                    }
                }
                let body = serde_json::to_vec(&head).unwrap_or_default();
                if let Err(e) = remote.store.put(&remote.path("head.json"), PutPayload::from(body)).await {
                    tracing::warn!("{}: {e}; readers see these commits at the next head written", remote.uri);
                }
                for done in written {
                    let _ = done.send(());
                }
                if let Some(done) = closed {
                    let _ = done.send(());
                    return;
                }
            }
        });
        let pruner = tx.downgrade();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(PRUNE_EVERY).await;
                let Some(tx) = pruner.upgrade() else { return };
                for (source, epoch, floor) in prune(&prune_remote).await {
                    let _ = tx.send(Entry::Floor(source, epoch, floor)).await;
                }
            }
        });
        Self { tx }
    }

    /// The writer stops: what is queued is written, and the head says nobody writes now.
    pub async fn close(&self) {
        let (done, wait) = tokio::sync::oneshot::channel();
        if self.tx.send(Entry::Close(done)).await.is_ok() {
            let _ = wait.await;
        }
    }

    /// A commit of `source`, in commit order; returns once readers can see it (the change and
    /// the head naming it written, or given up on).
    pub async fn record(&self, source: &str, change: Change) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.tx.send(Entry::Change(source.into(), change, done)).await.is_ok() {
            let _ = written.await;
        }
    }

    /// `source` is gone from the database.
    pub async fn forget(&self, source: &str) {
        let _ = self.tx.send(Entry::Forget(source.into())).await;
    }
}

/// Remove the changes past [`RETAIN`] (and every change of an older epoch of a source); for each
/// source's current epoch, the last version removed.
async fn prune(remote: &Remote) -> Vec<(String, u64, u64)> {
    use futures::TryStreamExt;
    let Some(head) = read_head(remote).await else { return Vec::new() };
    let horizon = horizon_unix_ms();
    let mut floors = Vec::new();
    for (source, tip) in &head.sources {
        let prefix = remote.path(&format!("changes/{source}"));
        let listed: Vec<object_store::ObjectMeta> = match remote.store.list(Some(&prefix)).try_collect().await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("{prefix}: {e}; its old changes are removed at the next pass");
                continue;
            }
        };
        let current = format!("{:020}", tip.epoch);
        let mut floor = 0;
        for meta in listed {
            let in_epoch = meta.location.parts().any(|p| p.as_ref() == current);
            let old = meta.last_modified.timestamp_millis() < horizon;
            if !old && in_epoch {
                continue;
            }
            if in_epoch {
                floor = floor.max(version_of(&meta.location).unwrap_or(0));
            }
            if let Err(e) = remote.store.delete(&meta.location).await {
                tracing::warn!("{}: {e}", meta.location);
            }
        }
        if floor > 0 {
            floors.push((source.clone(), tip.epoch, floor));
        }
    }
    floors
}

/// [`RETAIN`] ago, in Unix milliseconds.
fn horizon_unix_ms() -> i64 {
    crate::event::unix_ms() as i64 - RETAIN.as_millis() as i64
}

async fn read_head(remote: &Remote) -> Option<Head> {
    let got = remote.store.get(&remote.path("head.json")).await.ok()?;
    serde_json::from_slice(&got.bytes().await.ok()?).ok()
}

/// A reader's side: the head when it changed, and the changes after a version.
#[derive(Debug)]
pub struct Feed {
    remote: Remote,
    etag: Option<String>,
}

impl Feed {
    pub fn new(remote: Remote) -> Self {
        Self { remote, etag: None }
    }

    /// The head, when it changed since the last look (`Ok(None)`: unchanged, or none yet).
    pub async fn head(&mut self) -> Result<Option<Head>, String> {
        let opts = GetOptions { if_none_match: self.etag.clone(), ..GetOptions::default() };
        match self.remote.store.get_opts(&self.remote.path("head.json"), opts).await {
            Ok(got) => {
                let etag = got.meta.e_tag.clone();
                let bytes = got.bytes().await.map_err(|e| e.to_string())?;
                let head = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", self.remote.uri))?;
                self.etag = etag;
                Ok(Some(head))
            }
            Err(object_store::Error::NotModified { .. } | object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The changes of `source` in epoch `epoch` after `version`, in order; `None` when they
    /// cannot be followed (the reader loads the source again).
    pub async fn after(&self, source: &str, epoch: u64, version: u64) -> Result<Option<Vec<Change>>, String> {
        use futures::{StreamExt, TryStreamExt};
        let prefix = changes_of(&self.remote, source, epoch);
        let offset = change_path(&self.remote, source, epoch, version);
        let mut listed: Vec<StorePath> = self
            .remote
            .store
            .list_with_offset(Some(&prefix), &offset)
            .map_ok(|m| m.location)
            .try_collect()
            .await
            .map_err(|e| e.to_string())?;
        // Only the ones after `version` are read (a store that ignores the listing's offset
        // lists them all; the name says the version).
        listed.retain(|p| version_of(p).is_some_and(|v| v > version));
        listed.sort();
        // Several at once: a reader that fell behind by hundreds of commits is not held up by
        // one round trip each.
        let store = &self.remote.store;
        let out: Vec<Change> = futures::stream::iter(listed)
            .map(|path| async move {
                let got = store.get(&path).await.map_err(|e| e.to_string())?;
                let bytes = got.bytes().await.map_err(|e| e.to_string())?;
                serde_json::from_slice::<Change>(&bytes).map_err(|e| format!("{path}: {e}"))
            })
            .buffered(8)
            .try_collect()
            .await?;
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(version: u64, upserted: &[&str], removed: &[&str], vectors: &[&str]) -> Change {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        Change {
            version,
            committed_unix_ms: 1000 + version,
            upserted: v(upserted),
            removed: v(removed),
            vectors: v(vectors),
            reset: false,
        }
    }

    #[test]
    fn changes_merge_to_each_pages_last_state() {
        let merged = Change::merged(&[
            change(3, &["a", "b"], &[], &[]),
            change(4, &[], &["a", "c"], &["b#0"]),
            change(5, &["c", "d"], &[], &["b#0", "d#0"]),
            change(6, &[], &["d"], &[]),
        ])
        .unwrap();
        assert_eq!(merged.version, 6);
        assert_eq!(merged.committed_unix_ms, 1006);
        assert_eq!(merged.upserted, ["b", "c"]);
        assert_eq!(merged.removed, ["a", "d"]);
        assert_eq!(merged.vectors, ["b#0", "d#0"]);
        let reset = Change { reset: true, ..change(7, &[], &[], &[]) };
        assert_eq!(Change::merged(&[change(6, &["a"], &[], &[]), reset]), None);
    }
}
