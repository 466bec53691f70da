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

use crate::replication::lease::{Holder, Lease};
use crate::replication::remote::Remote;
use crate::replication::shipping::EVENTS_KEEP;
use object_store::path::Path as StorePath;
use object_store::{GetOptions, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Changes are kept this long (as the tables' versions are on a shared store): a reader behind
/// by more loads its sources again.
pub const RETAIN: std::time::Duration = std::time::Duration::from_secs(600);
/// How often the writer removes the changes past [`RETAIN`].
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);
/// Every this many pruning passes: forgotten sources' changes and old event shipments.
const HOURLY: u64 = 60;

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
    /// Each source as its writer sees it now (what readers cannot see from the commits alone).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub sides: BTreeMap<String, Side>,
}

/// A source on its writer's side: changes it has seen and not committed yet, or a folder it
/// cannot read. A reader says the same in its answers: a pending count of 0 only when the writer
/// has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Side {
    /// `scanning`: its folder not compared with the index yet since the writer opened it (it
    /// started, or took over): what changed meanwhile is not known, whatever `pending` says.
    Watched {
        pending: u64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        scanning: bool,
    },
    Unavailable {
        why: String,
    },
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
    pub lease: crate::replication::lease::Lease,
    pub journal: Journal,
}

/// The writer's side: changes handed over in commit order, written by one task.
#[derive(Debug, Clone)]
pub struct Journal {
    tx: tokio::sync::mpsc::Sender<Entry>,
}

#[derive(Debug)]
enum Entry {
    /// Answered once the change and the head naming it are written (`false`: another writer
    /// has taken over, and this one's head was not written).
    Change(String, Change, tokio::sync::oneshot::Sender<bool>),
    Forget(String),
    /// Every source as the writer sees it now (written with the next head).
    Sides(BTreeMap<String, Side>),
    /// A writer opened `source` at this chunks-table version: answered once the head says so.
    Opened(String, u64, tokio::sync::oneshot::Sender<bool>),
    /// The writer stops: the head says nobody writes.
    Close(tokio::sync::oneshot::Sender<()>),
    /// Changes of `source` in `epoch` up to this version are about to be removed: answered once
    /// a head naming the floor is written.
    Floor(String, u64, u64, tokio::sync::oneshot::Sender<()>),
}

/// The journal's writes of its head, each conditional on the ETag of the one before: a writer
/// that another has taken over from (it was stopped, or cut off from the store, past its lease)
/// can no longer put its old view of the database over the new writer's head (readers would
/// take it for the newest and answer without the new writer's commits, saying nothing is
/// pending). The tables are fenced the same way (`SourceStore::fence`).
struct HeadWrites {
    etag: Option<String>,
    /// Another writer wrote the head since this one did: this one writes it no more, and
    /// prunes nothing more (its floors are not the head's).
    superseded: Arc<AtomicBool>,
    /// Which of two writers the head is for: the one whose lease is valid.
    lease: Lease,
}

impl HeadWrites {
    /// Write `head`: `Ok(false)` when this writer has been taken over from (nothing written).
    async fn write(&mut self, remote: &Remote, head: &Head) -> Result<bool, String> {
        use object_store::{PutMode, PutOptions, UpdateVersion};
        // A write that finds the head changed is tried again at once (a few times): the change
        // was this writer's own lost answer, or the writer it took over from.
        for _ in 0..3 {
            if self.superseded.load(Ordering::SeqCst) {
                return Ok(false);
            }
            let mode = match &self.etag {
                Some(e) => PutMode::Update(UpdateVersion { e_tag: Some(e.clone()), version: None }),
                None => PutMode::Create,
            };
            let body = PutPayload::from(serde_json::to_vec(head).unwrap_or_default());
            let opts = PutOptions { mode, ..PutOptions::default() };
            match remote.store.put_opts(&remote.path("head.json"), body, opts).await {
                Ok(r) => {
                    self.etag = r.e_tag;
                    return Ok(true);
                }
                Err(object_store::Error::Precondition { .. } | object_store::Error::AlreadyExists { .. }) => {
                    // This writer's own last write landed though its answer was lost (the head
                    // names it), or another writer wrote: the one taken over from, woken after
                    // this one took the lease (this one's lease is valid: its head goes over it),
                    // or the one that took over from this one (this one's lease is not valid: it
                    // writes the head no more).
                    let (stored, etag) = read_tagged_head(remote).await?.unwrap_or_default();
                    if stored.writer.as_ref() == Some(self.lease.holder()) || self.lease.valid() {
                        self.etag = etag;
                        continue;
                    }
                    self.superseded.store(true, Ordering::SeqCst);
                    tracing::error!(
                        "{}: another writer ({}) has written the journal's head since this one did; this one announces nothing more",
                        remote.uri,
                        stored.writer.map_or_else(|| "a clean stop".to_string(), |w| w.to_string())
                    );
                    return Ok(false);
                }
                Err(object_store::Error::NotFound { .. }) => {
                    // Removed (a repair): made anew.
                    self.etag = None;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("the head kept changing under this writer's writes".into())
    }
}

impl Journal {
    /// Start the journal of `remote`, written by `lease`'s holder. The head it continues is read
    /// first, so sources this process does not watch keep their tips.
    pub async fn start(remote: Remote, lease: Lease) -> Self {
        let superseded = Arc::new(AtomicBool::new(false));
        let taken_over = superseded.clone();
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Entry>(QUEUE);
        let prune_remote = remote.clone();
        tokio::spawn(async move {
            // The head this writer continues. Until it is read, nothing is written: a head
            // written from nothing would drop every source this process does not watch.
            let (mut head, etag) = continued_head(&remote).await;
            head.writer = Some(lease.holder().clone());
            let mut heads = HeadWrites { etag, superseded, lease };
            // Head writes failed in a row: the head is written again after a backoff, with or
            // without anything new (a commit's change may be stored while the head that names
            // it is not; an idle writer would leave its readers without it until its next commit).
            let mut failed: u32 = 0;
            loop {
                let first = match failed {
                    0 => match rx.recv().await {
                        Some(e) => Some(e),
                        None => return,
                    },
                    n => match tokio::time::timeout(crate::core::retry::after(n), rx.recv()).await {
                        Ok(Some(e)) => Some(e),
                        Ok(None) => return,
                        Err(_) => None,
                    },
                };
                // Everything queued goes out before one new head.
                let mut batch: Vec<Entry> = first.into_iter().collect();
                while let Ok(e) = rx.try_recv() {
                    batch.push(e);
                }
                let mut closed = None;
                let mut written = Vec::new();
                let mut floors = Vec::new();
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
                                // Readers cannot follow this gap: a new epoch makes them load it
                                // again, at this commit (never the old epoch's version or floor).
                                tracing::warn!("{path}: {e}; readers of `{source}` load it again");
                                head.sources.insert(source, unfollowable(&change, epoch));
                                continue;
                            }
                            let (version, committed_unix_ms) = (change.version, change.committed_unix_ms);
                            let floor = if epoch == tip.epoch { tip.floor } else { 0 };
                            head.sources.insert(source, Tip { version, committed_unix_ms, epoch, floor });
                        }
                        Entry::Forget(source) => {
                            head.sources.remove(&source);
                        }
                        Entry::Sides(sides) => head.sides = sides,
                        Entry::Opened(source, version, done) => {
                            written.push(done);
                            // Tables past the journal: a writer stopped between a commit and
                            // its change. Readers cannot know what it wrote: they load the source
                            // again, at this version.
                            if let Some(tip) = head.sources.get(&source).filter(|t| t.version < version) {
                                tracing::warn!(
                                    "source `{source}`: its tables are at version {version}, the journal at {}; readers load it again",
                                    tip.version
                                );
                                let change = Change {
                                    version,
                                    committed_unix_ms: crate::core::event::unix_ms(),
                                    ..Change::default()
                                };
                                let tip = unfollowable(&change, tip.epoch);
                                head.sources.insert(source, tip);
                            }
                        }
                        Entry::Close(done) => {
                            head.writer = None;
                            head.sides.clear();
                            closed = Some(done);
                        }
                        Entry::Floor(source, epoch, floor, done) => {
                            if let Some(tip) = head.sources.get_mut(&source).filter(|t| t.epoch == epoch) {
                                tip.floor = tip.floor.max(floor);
                            }
                            floors.push(done);
                        }
                    }
                }
                let mut stands = true;
                match heads.write(&remote, &head).await {
                    // Only a floor readers can see lets its changes go.
                    Ok(written) => {
                        stands = written;
                        failed = 0;
                        if written {
                            floors.into_iter().for_each(|done| {
                                let _ = done.send(());
                            })
                        }
                    }
                    Err(e) => {
                        failed += 1;
                        tracing::warn!(
                            "{}: {e}; readers see these commits once the head is written (again in {} ms)",
                            remote.uri,
                            crate::core::retry::after(failed).as_millis()
                        )
                    }
                }
                // A failed write is tried again (the commit stands); a superseded one never is.
                for done in written {
                    let _ = done.send(stands);
                }
                if let Some(done) = closed {
                    let _ = done.send(());
                    return;
                }
            }
        });
        let pruner = tx.downgrade();
        tokio::spawn(async move {
            // Floors readers could see a pass ago: their changes go now. A reader that read the
            // head before a floor was written, and lists the changes after it, finds them all
            // still there; one that reads the head after sees the floor and loads the source again.
            let mut shown: Floors = Floors::new();
            for pass in 1u64.. {
                tokio::time::sleep(PRUNE_EVERY).await;
                let Some(tx) = pruner.upgrade() else { return };
                if taken_over.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(Some(head)) = read_head(&prune_remote).await else { continue };
                // One listing of every source's changes a pass (a listing per source made an idle
                // writer of 30 sources ask 60 times a minute).
                let Some(listed) = list_changes(&prune_remote).await else { continue };
                delete_below(&prune_remote, &head, &shown, &listed).await;
                // Hourly: what only grows otherwise (one listing each, not one a minute).
                if pass % HOURLY == 0 {
                    delete_forgotten(&prune_remote, &head, &listed).await;
                    match crate::replication::shipping::prune_shipped(&prune_remote, EVENTS_KEEP).await {
                        Ok(n) if n > 0 => tracing::info!(
                            "{}: {n} event shipment(s) past {} days removed",
                            prune_remote.uri,
                            EVENTS_KEEP.as_secs() / 86_400
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!("pruning shipped events: {e}"),
                    }
                    if let Err(e) = crate::replication::readers::prune(
                        &prune_remote,
                        crate::replication::readers::FORGET_AFTER,
                    )
                    .await
                    {
                        tracing::warn!("pruning readers not heard from: {e}");
                    }
                }
                shown = head.sources.iter().map(|(s, t)| ((s.clone(), t.epoch), t.floor)).collect();
                for (source, epoch, floor) in floors_to_publish(&head, &listed) {
                    let (done, written) = tokio::sync::oneshot::channel();
                    let sent = tx.send(Entry::Floor(source.clone(), epoch, floor, done)).await.is_ok();
                    if sent && written.await.is_ok() {
                        shown.insert((source, epoch), floor);
                    }
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
    /// the head naming it written, or its head's write failed and is tried again). `false` when
    /// another writer has taken over since: the commit may not stand (the new writer's fence
    /// restores the tables it opened), and must not be reported as made.
    #[must_use]
    pub async fn record(&self, source: &str, change: Change) -> bool {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.tx.send(Entry::Change(source.into(), change, done)).await.is_ok() {
            return written.await.unwrap_or(false);
        }
        false
    }

    /// This writer opened `source`, whose chunks table is at `version`: a version the journal
    /// never named (a writer stopped between a commit and its change, or its change's write
    /// failed and the head too) makes readers load the source again. Returns once the head says
    /// so.
    pub async fn opened(&self, source: &str, version: u64) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.tx.send(Entry::Opened(source.into(), version, done)).await.is_ok() {
            let _ = written.await;
        }
    }

    /// Whether the journal has stopped (closed, or its writer gone).
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// Every source as the writer sees it now; written with the next head (not waited for).
    pub fn sides(&self, sides: BTreeMap<String, Side>) {
        let _ = self.tx.try_send(Entry::Sides(sides));
    }

    /// `source` is gone from the database.
    pub async fn forget(&self, source: &str) {
        let _ = self.tx.send(Entry::Forget(source.into())).await;
    }
}

/// The tip of a source whose change could not be written: a new epoch (readers load the source
/// again) at the commit's own version, with every version up to it past the floor.
fn unfollowable(change: &Change, epoch: u64) -> Tip {
    Tip {
        version: change.version,
        committed_unix_ms: change.committed_unix_ms,
        epoch: epoch + 1,
        floor: change.version,
    }
}

/// The head to continue, with its ETag: read until the store answers (a missing head is an
/// empty one, with none).
async fn continued_head(remote: &Remote) -> (Head, Option<String>) {
    let mut failures = 0;
    loop {
        match read_tagged_head(remote).await {
            Ok(head) => return head.unwrap_or_default(),
            Err(e) => {
                failures += 1;
                let retry = crate::core::retry::after(failures);
                tracing::warn!("{}: {e}; its head is read again in {} ms", remote.uri, retry.as_millis());
                tokio::time::sleep(retry).await;
            }
        }
    }
}

/// The change objects of sources the head no longer names (forgotten): nobody follows them.
async fn delete_forgotten(remote: &Remote, head: &Head, listed: &Listed) {
    for (source, objects) in listed {
        if head.sources.contains_key(source) {
            continue;
        }
        for o in objects {
            let _ = remote.store.delete(&o.location).await;
        }
    }
}

/// Change objects by source.
type Listed = BTreeMap<String, Vec<object_store::ObjectMeta>>;

/// Every source's change objects, from one listing of `_cairn/changes/`; `None` when the store
/// did not answer (the pass is skipped).
async fn list_changes(remote: &Remote) -> Option<Listed> {
    use futures::TryStreamExt;
    let prefix = remote.path("changes");
    let objects = match remote.store.list(Some(&prefix)).try_collect::<Vec<_>>().await {
        Ok(objects) => objects,
        Err(e) => {
            tracing::warn!("{prefix}: {e}; old changes are removed at the next pass");
            return None;
        }
    };
    let depth = prefix.parts().count();
    let mut listed = Listed::new();
    for o in objects {
        let Some(source) = o.location.parts().nth(depth).map(|p| p.as_ref().to_string()) else { continue };
        listed.entry(source).or_default().push(o);
    }
    Some(listed)
}

/// A source's change objects in `listed`, each with whether it is of the source's current epoch
/// (those of older epochs can all go).
fn of_source<'a>(
    listed: &'a Listed,
    source: &str,
    tip: &Tip,
) -> impl Iterator<Item = (bool, &'a object_store::ObjectMeta)> {
    let current = format!("{:020}", tip.epoch);
    listed
        .get(source)
        .into_iter()
        .flatten()
        .map(move |m| (m.location.parts().any(|p| p.as_ref() == current), m))
}

/// For each source's current epoch, the newest version among its changes past [`RETAIN`]: the
/// floor to publish before they go.
fn floors_to_publish(head: &Head, listed: &Listed) -> Vec<(String, u64, u64)> {
    let horizon = horizon_unix_ms();
    let mut floors = Vec::new();
    for (source, tip) in &head.sources {
        let floor = of_source(listed, source, tip)
            .filter(|(current, m)| *current && m.last_modified.timestamp_millis() < horizon)
            .filter_map(|(_, m)| version_of(&m.location))
            .max()
            .unwrap_or(0);
        if floor > tip.floor {
            floors.push((source.clone(), tip.epoch, floor));
        }
    }
    floors
}

/// Floors by source and epoch.
type Floors = BTreeMap<(String, u64), u64>;

/// Remove the changes at or below the floors `shown` (in a head a pass ago), and every change of
/// an older epoch of a source (its readers load it again whatever they hold).
async fn delete_below(remote: &Remote, head: &Head, shown: &Floors, listed: &Listed) {
    for (source, tip) in &head.sources {
        let floor = shown.get(&(source.clone(), tip.epoch)).copied().unwrap_or(0);
        for (current, meta) in of_source(listed, source, tip) {
            let below = version_of(&meta.location).is_some_and(|v| v <= floor);
            if current && !below {
                continue;
            }
            if let Err(e) = remote.store.delete(&meta.location).await {
                tracing::warn!("{}: {e}", meta.location);
            }
        }
    }
}

/// [`RETAIN`] ago, in Unix milliseconds.
fn horizon_unix_ms() -> i64 {
    crate::core::event::unix_ms() as i64 - RETAIN.as_millis() as i64
}

/// The head as stored (`Ok(None)`: there is none yet); an error when the store did not answer
/// or the head cannot be parsed, never taken for an empty head.
async fn read_head(remote: &Remote) -> Result<Option<Head>, String> {
    Ok(read_tagged_head(remote).await?.map(|(head, _)| head))
}

/// [`read_head`], with the head's ETag (what the next write of it is conditional on).
async fn read_tagged_head(remote: &Remote) -> Result<Option<(Head, Option<String>)>, String> {
    let path = remote.path("head.json");
    let got = match remote.store.get(&path).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let etag = got.meta.e_tag.clone();
    let bytes = got.bytes().await.map_err(|e| e.to_string())?;
    let head = serde_json::from_slice(&bytes).map_err(|e| format!("{path}: {e}"))?;
    Ok(Some((head, etag)))
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

    #[test]
    fn a_change_that_could_not_be_written_starts_an_epoch_at_its_own_version() {
        // A reset (new tables, versions from 1) whose change object failed: nothing of the old
        // epoch's version 900 or floor 800 is carried into the new one.
        let reset = Change { reset: true, ..change(2, &["a"], &[], &[]) };
        let tip = unfollowable(&reset, 5_000);
        assert_eq!(tip, Tip { version: 2, committed_unix_ms: 1002, epoch: 5_001, floor: 2 });
    }

    #[tokio::test]
    async fn the_changes_of_a_forgotten_source_go_and_a_followed_ones_stay() {
        let remote = Remote::in_memory();
        for source in ["kept", "gone"] {
            let path = change_path(&remote, source, 0, 3);
            remote.store.put(&path, PutPayload::from(b"{}".to_vec())).await.unwrap();
        }
        let head = Head { sources: [("kept".to_string(), Tip::default())].into(), ..Head::default() };
        delete_forgotten(&remote, &head, &list_changes(&remote).await.unwrap()).await;
        assert!(remote.store.head(&change_path(&remote, "kept", 0, 3)).await.is_ok());
        assert!(remote.store.head(&change_path(&remote, "gone", 0, 3)).await.is_err());
    }

    #[tokio::test]
    async fn one_listing_prunes_each_source_below_its_own_floor_and_its_old_epochs() {
        let remote = Remote::in_memory();
        // `a` and `ab`: a prefix of one id is not the other's folder.
        let made = [("a", 1, 4), ("a", 1, 5), ("a", 1, 6), ("a", 0, 9), ("ab", 1, 2), ("ab", 1, 7)];
        for (source, epoch, version) in made {
            let path = change_path(&remote, source, epoch, version);
            remote.store.put(&path, PutPayload::from(b"{}".to_vec())).await.unwrap();
        }
        let tip = Tip { epoch: 1, ..Tip::default() };
        let head = Head { sources: [("a".into(), tip), ("ab".into(), tip)].into(), ..Head::default() };
        let listed = list_changes(&remote).await.unwrap();
        assert_eq!(listed.keys().collect::<Vec<_>>(), ["a", "ab"]);
        assert_eq!((listed["a"].len(), listed["ab"].len()), (4, 2));
        // Written just now: none is past the horizon, so no floor is due.
        assert!(floors_to_publish(&head, &listed).is_empty());
        let shown: Floors = [(("a".to_string(), 1), 5), (("ab".to_string(), 1), 1)].into();
        delete_below(&remote, &head, &shown, &listed).await;
        let left: Vec<(&str, u64, u64)> = {
            let mut left = Vec::new();
            for (source, epoch, version) in made {
                if remote.store.head(&change_path(&remote, source, epoch, version)).await.is_ok() {
                    left.push((source, epoch, version));
                }
            }
            left
        };
        assert_eq!(left, [("a", 1, 6), ("ab", 1, 2), ("ab", 1, 7)]);
    }

    /// A store in memory whose writes of the journal's head fail while `failing` is set.
    #[derive(Debug)]
    struct HeadsFail {
        inner: object_store::memory::InMemory,
        failing: std::sync::atomic::AtomicBool,
    }

    impl std::fmt::Display for HeadsFail {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "HeadsFail")
        }
    }

    #[async_trait::async_trait]
    impl object_store::ObjectStore for HeadsFail {
        async fn put_opts(
            &self,
            location: &StorePath,
            payload: PutPayload,
            opts: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            let failing = self.failing.load(std::sync::atomic::Ordering::SeqCst);
            if failing && location.filename() == Some("head.json") {
                let source = "the store is cut off".into();
                return Err(object_store::Error::Generic { store: "HeadsFail", source });
            }
            self.inner.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &StorePath,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }
        async fn get_opts(
            &self,
            location: &StorePath,
            options: GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<StorePath>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<StorePath>> {
            self.inner.delete_stream(locations)
        }
        fn list(
            &self,
            prefix: Option<&StorePath>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
            self.inner.list(prefix)
        }
        async fn list_with_delimiter(
            &self,
            prefix: Option<&StorePath>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }
        async fn copy_opts(
            &self,
            from: &StorePath,
            to: &StorePath,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// A lease of `remote`'s for a holder whose lock is `lock`, taken over from whoever holds it.
    async fn lease(remote: &Remote, lock: &str) -> Lease {
        use crate::replication::lease::{LeaseStore, Taken, Watching};
        let store = LeaseStore::of(remote);
        let me = crate::replication::lease::me("test", std::path::Path::new(lock));
        let etag = store.look().await.map(|(etag, _)| etag);
        let mut watching = etag.map_or_else(Watching::default, |e| Watching::stood_still(&e));
        match store.try_take(&me, &mut watching).await.unwrap() {
            Taken::Mine(lease) => lease,
            Taken::Theirs(h) => panic!("held by {h}"),
        }
    }

    #[tokio::test]
    async fn a_writer_taken_over_from_cannot_put_its_old_head_over_the_new_writers() {
        let remote = Remote::in_memory();
        let old = lease(&remote, "lock-1").await;
        let first = Journal::start(remote.clone(), old.clone()).await;
        assert!(first.record("s", change(3, &["a"], &[], &[])).await);
        // The next writer takes the lease over (the first stopped past it) and continues the head.
        let new = lease(&remote, "lock-2").await;
        let next = Journal::start(remote.clone(), new.clone()).await;
        // The first wakes before the next one has written: its commit in flight is told to the
        // journal, and its head lands (conditional on the head it wrote last, still there).
        assert!(first.record("s", change(4, &["b"], &[], &[])).await);
        assert_eq!(read_head(&remote).await.unwrap().unwrap().sources["s"].version, 4);
        // The next one's write finds it and, holding the lease, writes its own over it.
        assert!(next.record("s", change(5, &["a"], &[], &[])).await);
        let head = read_head(&remote).await.unwrap().unwrap();
        assert_eq!((head.sources["s"].version, head.writer.as_ref()), (5, Some(new.holder())));
        // The first learns it lost the lease; what it writes after is refused, its clean stop too.
        assert!(!old.renew().await.unwrap(), "taken over");
        // Its commit is refused as made: the writer does not report it (the new one's fence
        // may have undone it).
        assert!(!first.record("s", change(6, &["b"], &[], &[])).await, "taken over: not made");
        first.close().await;
        let head = read_head(&remote).await.unwrap().unwrap();
        assert_eq!((head.sources["s"].version, head.writer.as_ref()), (5, Some(new.holder())));
        assert!(next.record("s", change(7, &["a"], &[], &[])).await);
        assert_eq!(read_head(&remote).await.unwrap().unwrap().sources["s"].version, 7);
    }

    #[tokio::test]
    async fn a_head_that_could_not_be_written_is_written_again_without_another_commit() {
        let store = std::sync::Arc::new(HeadsFail { inner: Default::default(), failing: Default::default() });
        let remote = Remote::with_store(store.clone());
        let journal = Journal::start(remote.clone(), lease(&remote, "lock").await).await;
        assert!(journal.record("s", change(3, &["a"], &[], &[])).await);
        let version =
            async || read_head(&remote).await.unwrap().and_then(|h| h.sources.get("s").map(|t| t.version));
        assert_eq!(version().await, Some(3));
        // The store refuses the head: the change of version 4 is recorded, the head is not.
        store.failing.store(true, std::sync::atomic::Ordering::SeqCst);
        assert!(
            journal.record("s", change(4, &["a"], &[], &[])).await,
            "the head is written again: it stands"
        );
        assert_eq!(version().await, Some(3));
        // Back: the head is written again with nothing more committed (before, only a next
        // commit wrote it, and an idle writer's readers never saw version 4).
        store.failing.store(false, std::sync::atomic::Ordering::SeqCst);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while version().await != Some(4) {
            assert!(std::time::Instant::now() < deadline, "the head never named version 4");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
