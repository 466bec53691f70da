//! A reader that follows the writer: the sources of a database in memory, kept current with
//! what the writer commits (on any machine) through the journal ([`crate::replication::journal`]).
//!
//! It looks at the journal's head twice a second while it is asked ([`ACTIVE_EVERY`]) and
//! rarely when idle ([`IDLE_EVERY`]); a head that did not change costs one conditional GET with
//! no body. A question finding the last look older than [`ACTIVE_EVERY`] looks first, and a
//! reader that has not read the head for longer than [`UNSURE_AFTER`] gives no pending count:
//! no answer claims "nothing pending" on an old look. A change is applied to the resident index as a delta (pages read by key,
//! removals, vectors by chunk id), never by reloading the source. Every answer says the commit
//! each source reflects (`as_of`), and a reader that cannot reach the store, or is behind the
//! head it saw for longer than its bound (`max_lag_s`), says so in `degraded` and gives no
//! pending count (so no answer of it reads as "safe to create").
//!
//! A database on a local folder has no journal: its one owner serves every process on the
//! machine, and a reader of it (no owner runs) holds the tables as they were when it opened them.

use crate::core::config::Config;
use crate::core::folders::FolderBook;
use crate::core::status::SourceState;
use crate::engine::host::QueryHost;
use crate::engine::query::Freshness;
use crate::replication::journal::{Change, Feed, Tip};
use crate::replication::lease::{Holder, LeaseStore};
use cairn_index::{Database, Embedder, Prepared, VectorKey};
use cairn_query::AsOf;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the head is looked at while the reader is asked (a query in the last
/// [`ACTIVE_FOR`]); a question finding the last look older than this looks first.
pub const ACTIVE_EVERY: Duration = Duration::from_millis(500);
/// A reader whose last successful look at the head is older than this does not know what its
/// writer committed since, and says so (no pending count) until it looks again.
pub const UNSURE_AFTER: Duration = Duration::from_secs(2);
/// How often when nobody asks.
pub const IDLE_EVERY: Duration = Duration::from_secs(5);
/// How long after a query the reader stays active.
pub const ACTIVE_FOR: Duration = Duration::from_secs(30);
/// How often the writer lease is looked at, to tell a live writer from a gone one.
pub const LEASE_EVERY: Duration = Duration::from_secs(10);

/// What the reader knows of the writer and how far it has come.
#[derive(Debug, Default)]
struct Track {
    /// The commit each source's memory reflects.
    applied: BTreeMap<String, Tip>,
    /// Each source's tip in the last head seen.
    seen: BTreeMap<String, Tip>,
    /// Since when a source has been behind the head seen (cleared once caught up).
    behind_since: BTreeMap<String, Instant>,
    writer: Option<Holder>,
    /// Each source as its writer sees it, from the last head seen.
    sides: BTreeMap<String, crate::replication::journal::Side>,
    /// The writer lease was renewed (its ETag moved) within the lease's TTL, as last looked.
    writer_alive: bool,
    lease: Option<(String, Instant)>,
    lease_looked: Option<Instant>,
    /// The last successful look at the head, and the last failure.
    looked: Option<Instant>,
    error: Option<String>,
    asked: Option<Instant>,
}

/// A reader of a database, following its writer.
pub struct Follower {
    db: Database,
    remote: Option<crate::replication::remote::Remote>,
    config: Config,
    folders: FolderBook,
    feed: Option<tokio::sync::Mutex<Feed>>,
    lease: Option<LeaseStore>,
    host: crate::engine::host::HostCell,
    track: Mutex<Track>,
    /// One step at a time (a flush and the loop may both ask for one).
    stepping: tokio::sync::Mutex<()>,
    /// What this reader says of itself in the store (`_cairn/readers/`).
    publisher: crate::replication::readers::Publisher,
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower").field("db", &self.config.db).finish()
    }
}

impl Follower {
    /// Open every source of `config`'s database into memory, as of the journal's head.
    pub async fn open(config: &Config, embedder: Option<Arc<dyn Embedder>>) -> crate::Result<Self> {
        let db = config.database().await?;
        let remote = crate::replication::remote::Remote::of(&config.db, &config.storage)
            .map_err(crate::Error::Config)?;
        let mut feed = remote.clone().map(Feed::new);
        let mut track = Track::default();
        // The head before the tables: what is loaded is at least as new as the tips recorded.
        if let Some(feed) = feed.as_mut() {
            match feed.head().await {
                Ok(Some(head)) => {
                    track.applied = head.sources.clone();
                    track.seen = head.sources;
                    track.writer = head.writer;
                    track.looked = Some(Instant::now());
                }
                Ok(None) => track.looked = Some(Instant::now()),
                Err(e) => track.error = Some(e),
            }
        }
        let folders = FolderBook::read(&config.paths().state());
        let host = QueryHost::open_read_only(
            &db,
            &folders,
            embedder,
            config.event_log_dir(),
            config.exact_vectors_up_to,
        )
        .await?
        .with_parse_options(config.limits.parse_options());
        let me = Self {
            db,
            remote: remote.clone(),
            config: config.clone(),
            folders,
            feed: feed.map(tokio::sync::Mutex::new),
            lease: remote.as_ref().map(LeaseStore::of),
            host: crate::engine::host::HostCell::new(host),
            track: Mutex::new(track),
            stepping: tokio::sync::Mutex::new(()),
            publisher: Default::default(),
        };
        me.look_at_lease().await;
        Ok(me)
    }

    fn track(&self) -> std::sync::MutexGuard<'_, Track> {
        self.track.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The sources as they are now.
    pub fn host(&self) -> Arc<QueryHost> {
        self.host.now()
    }

    fn set_host(&self, host: QueryHost) {
        self.host.replace(host);
    }

    /// The writer, when one holds the database (as the head and the lease say).
    pub fn writer(&self) -> Option<Holder> {
        let t = self.track();
        t.writer.clone().filter(|_| t.writer_alive)
    }

    /// Someone asks: look often for a while, and now if the last look is older than
    /// [`ACTIVE_EVERY`] (unless it failed: the background looks go on, and a store that does not
    /// answer must not hold every question for its timeouts).
    pub async fn asked(&self) {
        let stale = |t: &Track| t.error.is_none() && t.looked.is_none_or(|l| l.elapsed() >= ACTIVE_EVERY);
        if !stale(&self.track_asked()) || self.feed.is_none() {
            return;
        }
        let _one = self.stepping.lock().await;
        // A look that ended while this one waited for it is as good.
        if stale(&self.track())
            && let Err(e) = self.step_locked().await
        {
            tracing::warn!("following {}: {e}", self.config.db);
        }
    }

    fn track_asked(&self) -> std::sync::MutexGuard<'_, Track> {
        let mut t = self.track();
        t.asked = Some(Instant::now());
        t
    }

    /// The database's store, when it is on one.
    pub fn remote(&self) -> Option<&crate::replication::remote::Remote> {
        self.remote.as_ref()
    }

    /// Whether this reader follows a writer's journal (a database on an object store).
    pub fn follows(&self) -> bool {
        self.feed.is_some()
    }

    /// How current source `id` is, and the commit it reflects.
    pub fn freshness(&self, id: &str) -> (Freshness, Option<AsOf>) {
        let max_lag = Duration::from_secs(self.config.max_lag_s);
        let host = self.host();
        let t = self.track();
        let as_of = t
            .applied
            .get(id)
            .map(|tip| AsOf { version: tip.version, committed_unix_ms: tip.committed_unix_ms });
        if self.feed.is_some() {
            let cut_off = t.error.is_some() && t.looked.is_none_or(|l| l.elapsed() >= max_lag);
            if cut_off {
                let why = t.error.clone().unwrap_or_default();
                return (
                    Freshness::Behind {
                        degraded: "store_unreachable".into(),
                        note: format!(
                            "{}: the store has not answered for over {} s ({why}); `{id}` is answered as of the last commit seen",
                            self.config.db, self.config.max_lag_s
                        ),
                    },
                    as_of,
                );
            }
            if t.looked.is_none_or(|l| l.elapsed() >= UNSURE_AFTER) {
                // Not read lately (a look failed, or is slow): what was committed since is unknown.
                let ago = t
                    .looked
                    .map_or_else(|| "never".to_string(), |l| format!("{} ms ago", l.elapsed().as_millis()));
                return (
                    Freshness::Behind {
                        degraded: format!("catching_up:{id}"),
                        note: format!(
                            "its writer's head was last read {ago}: `{id}` may have commits not applied here; wait before creating a page it may hold"
                        ),
                    },
                    as_of,
                );
            }
            if let Some(since) = t.behind_since.get(id) {
                // Known to be behind: no pending count, within the bound or past it.
                let (degraded, note) = if since.elapsed() >= max_lag {
                    (
                        format!("behind:{id}"),
                        format!(
                            "`{id}` is behind its writer's commits by {} s (over the bound of {} s)",
                            since.elapsed().as_secs(),
                            self.config.max_lag_s
                        ),
                    )
                } else {
                    (
                        format!("catching_up:{id}"),
                        format!(
                            "`{id}` has writer commits not applied here yet (seen {} ms ago); wait before \
                             creating a page it may hold",
                            since.elapsed().as_millis()
                        ),
                    )
                };
                return (Freshness::Behind { degraded, note }, as_of);
            }
            // A live writer keeps it current from its machine: what it has seen and not committed,
            // or a folder it cannot read, is said here as it says it there.
            if t.writer_alive {
                use crate::replication::journal::Side;
                let freshness = match t.sides.get(id) {
                    Some(Side::Unavailable { why }) => {
                        Freshness::Unavailable(format!("on the writer's machine: {why}"))
                    }
                    Some(Side::Watched { scanning: true, .. }) => {
                        crate::engine::query::scanning(id, "its writer on another machine")
                    }
                    Some(Side::Watched { pending, .. }) if *pending > 0 => {
                        Freshness::Watched { pending: *pending, lag_ms: 0 }
                    }
                    _ => Freshness::Followed,
                };
                return (freshness, as_of);
            }
        }
        match host.unavailable(id) {
            Some((_, message)) => (Freshness::Unavailable(message.clone()), as_of),
            None => (Freshness::Unwatched, as_of),
        }
    }

    /// Each source's freshness as it is now, for an answer about to be searched: taken before
    /// the answer reads the sources, so a commit applied while it runs only makes it newer than
    /// it says (read after, a pending count of 0 could speak for a commit the search did not see);
    /// and the sources whose folder cannot be read here.
    pub fn freshness_before(&self) -> (BTreeSet<String>, crate::engine::query::FreshnessOf<'_>) {
        let mut ids: BTreeSet<String> = self.host().source_ids().into_iter().collect();
        {
            let t = self.track();
            ids.extend(t.applied.keys().chain(t.seen.keys()).cloned());
        }
        let taken: BTreeMap<String, (Freshness, Option<AsOf>)> =
            ids.into_iter().map(|id| (id.clone(), self.freshness(&id))).collect();
        // A source loaded since (new here) is served at least as new as its tip says.
        let lookup = move |id: &str| taken.get(id).cloned().unwrap_or_else(|| self.freshness(id));
        (self.unavailable_ids(), Box::new(lookup))
    }

    /// Every source held, as a status: `following` a live writer (with the commit it reflects),
    /// `behind` it, `unavailable`, or `not_watched`.
    pub fn status(&self) -> Vec<crate::core::status::SourceStatus> {
        self.host()
            .status()
            .into_iter()
            .map(|mut st| {
                let (freshness, as_of) = self.freshness(&st.source);
                if let Some(a) = as_of {
                    st.version = a.version;
                    st.committed_unix_ms = a.committed_unix_ms;
                }
                match freshness {
                    Freshness::Followed => {
                        st.state = SourceState::Following;
                        st.unavailable = None;
                        st.error = None;
                    }
                    Freshness::Watched { pending, .. } => {
                        st.state = SourceState::Following;
                        (st.pending, st.unavailable, st.error) = (pending, None, None);
                    }
                    Freshness::Behind { note, .. } => {
                        st.state = SourceState::Behind;
                        st.error = Some(note);
                    }
                    Freshness::Unavailable(why) if why.starts_with("on the writer's machine") => {
                        st.state = SourceState::Unavailable;
                        st.error = Some(why);
                    }
                    _ => {}
                }
                st
            })
            .collect()
    }

    /// The sources whose results cannot be checked against a folder here.
    fn unavailable_ids(&self) -> BTreeSet<String> {
        let host = self.host();
        host.source_ids().into_iter().filter(|id| host.unavailable(id).is_some()).collect()
    }

    /// Keep following until the last other handle on it goes.
    pub fn follow(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let every = match me.upgrade() {
                    Some(f) => {
                        let active = f.track().asked.is_some_and(|a| a.elapsed() < ACTIVE_FOR);
                        if active { ACTIVE_EVERY } else { IDLE_EVERY }
                    }
                    None => return,
                };
                tokio::time::sleep(every).await;
                let Some(f) = me.upgrade() else { return };
                if let Err(e) = f.step().await {
                    tracing::warn!("following {}: {e}", f.config.db);
                }
                f.say_where().await;
            }
        })
    }

    /// This reader as the store lists it: its host, pid, and the commit each source reflects.
    fn seen(&self) -> crate::replication::readers::ReaderSeen {
        let as_of = self.track().applied.iter().map(|(s, t)| (s.clone(), t.version)).collect();
        crate::replication::readers::ReaderSeen {
            host: crate::replication::lease::host_name(),
            pid: std::process::id(),
            machine: crate::replication::shipping::machine_name(&self.config.paths().state()),
            as_of,
            said_unix_ms: crate::core::event::unix_ms(),
        }
    }

    /// Say in the store how far this reader has come (when that moved, or as a heartbeat).
    pub async fn say_where(&self) {
        if let Some(remote) = &self.remote {
            self.publisher.publish(remote, self.seen()).await;
        }
    }

    /// Take this reader off the store's list (a clean stop).
    pub async fn stop_saying(&self) {
        if let Some(remote) = &self.remote {
            self.publisher.forget(remote, &self.seen()).await;
        }
    }

    /// One look at the head, and whatever it says to apply.
    pub async fn step(&self) -> Result<(), String> {
        let _one = self.stepping.lock().await;
        self.step_locked().await
    }

    /// [`Follower::step`] with its lock held.
    async fn step_locked(&self) -> Result<(), String> {
        let Some(feed) = &self.feed else { return Ok(()) };
        self.look_at_lease().await;
        let head = feed.lock().await.head().await;
        let head = match head {
            Ok(h) => {
                let mut t = self.track();
                t.looked = Some(Instant::now());
                t.error = None;
                h
            }
            Err(e) => {
                self.track().error = Some(e.clone());
                return Err(e);
            }
        };
        if let Some(head) = head {
            let mut t = self.track();
            t.seen = head.sources;
            t.writer = head.writer;
            t.sides = head.sides;
        }
        let (seen, applied) = {
            let mut t = self.track();
            let now = Instant::now();
            let behind: Vec<String> = t
                .seen
                .iter()
                .filter(|(id, tip)| t.applied.get(*id).is_none_or(|a| a.version < tip.version))
                .map(|(id, _)| id.clone())
                .collect();
            t.behind_since.retain(|id, _| behind.contains(id));
            for id in behind {
                t.behind_since.entry(id).or_insert(now);
            }
            (t.seen.clone(), t.applied.clone())
        };
        let mut host = (*self.host()).clone();
        let mut changed_host = false;
        for (id, tip) in &seen {
            // Another incarnation of its tables, or changes no longer kept: load it again.
            let held = applied.get(id).copied().filter(|a| a.epoch == tip.epoch && a.version >= tip.floor);
            if held.is_some_and(|a| a.version >= tip.version) {
                continue;
            }
            let reached = match (held, host.live(id).is_some()) {
                (Some(from), true) => self.catch_up(&mut host, id, from, &mut changed_host, feed).await?,
                _ => {
                    self.reload(&mut host, id).await;
                    changed_host = true;
                    *tip
                }
            };
            // Answers read the sources before they say how current they are: a source's new
            // tables are served before its tip counts as applied, never after.
            if changed_host {
                self.set_host(host.clone());
                changed_host = false;
            }
            let mut t = self.track();
            t.applied.insert(id.clone(), reached);
            if reached.version >= t.seen.get(id).map_or(0, |s| s.version) {
                t.behind_since.remove(id);
            }
        }
        // Sources the writer's head no longer names were forgotten.
        if self.track().writer.is_some() {
            for id in host.source_ids() {
                if !seen.contains_key(&id) && applied.contains_key(&id) {
                    host.remove(&id);
                    self.track().applied.remove(&id);
                    changed_host = true;
                }
            }
        }
        if changed_host {
            self.set_host(host);
        }
        Ok(())
    }

    /// Apply a source's changes after `from`; the commit reached.
    async fn catch_up(
        &self,
        host: &mut QueryHost,
        id: &str,
        from: Tip,
        changed_host: &mut bool,
        feed: &tokio::sync::Mutex<Feed>,
    ) -> Result<Tip, String> {
        let changes = feed.lock().await.after(id, from.epoch, from.version).await?;
        let Some(changes) = changes else {
            self.reload(host, id).await;
            *changed_host = true;
            return Ok(self.track().seen.get(id).copied().unwrap_or(from));
        };
        let changes: Vec<Change> = changes.into_iter().filter(|c| c.version > from.version).collect();
        let Some(last) = changes.last() else { return Ok(from) };
        let reached = Tip { version: last.version, committed_unix_ms: last.committed_unix_ms, ..from };
        let applied = match (Change::merged(&changes), host.live(id)) {
            (Some(merged), Some(live)) if !outgrown(&merged, live) => {
                apply(live, &merged).await.map_err(|e| format!("`{id}`: {e}"))?
            }
            // Made anew, or most of it changed (the writer's first index of it): load it whole.
            _ => Applied::Whole,
        };
        if let Applied::Unread(slugs) = &applied {
            // The change names pages its tables did not give whole: counting it applied would
            // answer "as of" a commit whose pages this reader does not hold. What the tables hold
            // now is at least as new as the change.
            tracing::warn!(
                "following `{id}`: version {} names pages not read whole ({}); reading the source again",
                reached.version,
                slugs.join(", ")
            );
        }
        if applied != Applied::Delta {
            self.reload(host, id).await;
            *changed_host = true;
        }
        Ok(reached)
    }

    /// Load a source whole (new to this reader, or made anew by the writer).
    async fn reload(&self, host: &mut QueryHost, id: &str) {
        let info = match self.db.open_existing(id).await {
            Ok(store) => {
                store.info().await.unwrap_or(cairn_index::SourceInfo { id: id.into(), ..Default::default() })
            }
            Err(_) => cairn_index::SourceInfo { id: id.into(), ..Default::default() },
        };
        host.open_source(&self.db, info, &self.folders, self.config.exact_vectors_up_to).await;
    }

    /// Whether the writer lease is being renewed (its ETag moved within the TTL), looked at every
    /// [`LEASE_EVERY`].
    async fn look_at_lease(&self) {
        let Some(lease) = &self.lease else { return };
        if self.track().lease_looked.is_some_and(|l| l.elapsed() < LEASE_EVERY) {
            return;
        }
        let seen = lease.look().await;
        let mut t = self.track();
        t.lease_looked = Some(Instant::now());
        t.writer_alive = match seen {
            Some((etag, held)) => {
                let moved = match &t.lease {
                    Some((last, since)) if *last == etag => since.elapsed() < crate::replication::lease::TTL,
                    _ => {
                        t.lease = Some((etag, Instant::now()));
                        true
                    }
                };
                held && moved
            }
            None => false,
        };
    }
}

/// A change that touches more pages than the source held before it is read faster whole.
fn outgrown(change: &Change, live: &crate::engine::host::LiveSource) -> bool {
    change.upserted.len() > 64 && change.upserted.len() > live.resident.read().page_count()
}

/// How a change was taken in.
#[derive(Debug, PartialEq, Eq)]
enum Applied {
    /// As a delta.
    Delta,
    /// Not at all: the source is to be read whole.
    Whole,
    /// Not at all: these pages it upserted were missing from the tables, or had none of the
    /// chunk rows their page row counts.
    Unread(Vec<String>),
}

/// One change, applied to a source's memory: its pages read again by key, its removals, the
/// vectors it attached read by chunk id. Nothing is applied when a page it upserted is not read
/// whole.
async fn apply(live: &crate::engine::host::LiveSource, change: &Change) -> cairn_index::Result<Applied> {
    if !change.upserted.is_empty() || !change.removed.is_empty() {
        let slugs: Vec<&str> = change.upserted.iter().map(String::as_str).collect();
        let pages = live.store.load_pages(&slugs).await?;
        let unread =
            unread(&slugs, pages.iter().map(|(p, rows)| (p.slug.as_str(), p.chunk_count, rows.len())));
        if !unread.is_empty() {
            return Ok(Applied::Unread(unread));
        }
        let removed = change.removed.clone();
        let lang = live.resident.lang();
        let prepared = tokio::task::spawn_blocking(move || {
            Prepared::delta(
                pages
                    .into_iter()
                    .map(|(r, c)| cairn_index::resident::PreparedPage::stored(r, c, lang))
                    .collect(),
                removed,
            )
        })
        .await
        .map_err(|e| cairn_index::Error::Io(std::io::Error::other(e)))?;
        live.resident.apply(prepared).await?;
    }
    if !change.vectors.is_empty() {
        let ids: Vec<&str> = change.vectors.iter().map(String::as_str).collect();
        let vectors: Vec<(String, Vec<f32>)> =
            live.store.vectors_by(VectorKey::Id, &ids).await?.into_iter().collect();
        live.resident.apply_vectors(vectors).await?;
    }
    Ok(Applied::Delta)
}

/// The pages of `slugs` not read whole: missing, or with no chunk row where their page row counts
/// some. `read` is each page read, as its slug, the chunk count its page row says, and the chunk
/// rows read. (Rows of a commit newer than the change, read half-written, are not this: the change
/// that follows reads them again.)
fn unread<'a>(slugs: &[&str], read: impl IntoIterator<Item = (&'a str, i32, usize)>) -> Vec<String> {
    let whole: BTreeMap<&str, bool> =
        read.into_iter().map(|(slug, count, rows)| (slug, count == 0 || rows > 0)).collect();
    slugs.iter().filter(|s| whole.get(*s) != Some(&true)).map(|s| s.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_counts_as_read_only_when_every_page_it_upserted_came_with_its_rows() {
        assert!(unread(&["whole", "empty"], [("whole", 1, 1), ("empty", 0, 0)]).is_empty());
        assert_eq!(
            unread(&["whole", "rowless", "missing"], [("whole", 1, 1), ("rowless", 2, 0)]),
            ["rowless", "missing"]
        );
    }
}
