//! On an object store, each machine's events go to the store too, so `cairn stats` on any
//! machine sums every machine's queries: lines wait in an [`Outbox`] and are put as one object
//! per shipment, `_cairn/events/<machine>/<unix ms>-<pid>.jsonl` (append-only by construction:
//! no object is ever rewritten, so machines never contend). The local log stays the full journal
//! of this machine; the store holds what was shipped, at most [`SHIP_EVERY`] behind.

use crate::replication::remote::Remote;
use object_store::{ObjectStoreExt, PutPayload};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often waiting lines are shipped (and once more when the process stops cleanly).
pub const SHIP_EVERY: Duration = Duration::from_secs(30);

/// Lines waiting to be shipped; cheap to clone.
#[derive(Debug, Clone)]
pub struct Outbox {
    remote: Remote,
    machine: String,
    lines: Arc<Mutex<Vec<u8>>>,
}

/// This machine's name in the store: its host and its local state folder (two "machines" on one
/// host in the tests; two users of one host).
pub fn machine_name(state_dir: &std::path::Path) -> String {
    let host: String = crate::replication::lease::host_name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .collect();
    let digest = cairn_ingest::hex_digest(&[state_dir.display().to_string().as_bytes()]);
    format!("{host}-{}", &digest[..8])
}

impl crate::core::log::LineSink for Outbox {
    /// One event line (newline included) to ship.
    fn push(&self, line: &[u8]) {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(line);
    }
}

impl Outbox {
    pub fn new(remote: Remote, machine: String) -> Self {
        Self { remote, machine, lines: Arc::default() }
    }

    /// Ship what waits now (nothing when nothing waits).
    pub async fn ship(&self) {
        let body = std::mem::take(&mut *self.lines.lock().unwrap_or_else(|p| p.into_inner()));
        if body.is_empty() {
            return;
        }
        let name = format!(
            "events/{}/{:015}-{}.jsonl",
            self.machine,
            crate::core::event::unix_ms(),
            std::process::id()
        );
        let path = self.remote.path(&name);
        if let Err(e) = self.remote.store.put(&path, PutPayload::from(body)).await {
            tracing::warn!(
                "{path}: {e}; this machine's events since the last shipment stay in its local log only"
            );
        }
    }

    /// Ship every [`SHIP_EVERY`] until the last other handle goes.
    pub fn keep_shipping(&self) -> tokio::task::JoinHandle<()> {
        let me = Arc::downgrade(&self.lines);
        let (remote, machine) = (self.remote.clone(), self.machine.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(SHIP_EVERY).await;
                let Some(lines) = me.upgrade() else { return };
                Outbox { remote: remote.clone(), machine: machine.clone(), lines }.ship().await;
            }
        })
    }
}

/// The database's book of pages that failed (`_cairn/poison.json`): put by the writer when its
/// own book changed, merged by a process when it becomes the writer (before it parses a page),
/// so a page that killed one machine's writer is known to the writer that takes over. One
/// object, rewritten whole: only the lease holder parses pages, so only it changes the book.
impl Outbox {
    /// Merge the store's book into `book` (a store that cannot be read is reported and left).
    pub async fn pull_book(&self, book: &crate::core::poison::PoisonBook) {
        let path = self.remote.path("poison.json");
        match self.remote.store.get(&path).await {
            Ok(got) => match got.bytes().await {
                Ok(b) => {
                    let taken = book.merge(&b);
                    if taken > 0 {
                        tracing::info!(
                            "{path}: {taken} page(s) another machine's writer remembered as failed"
                        );
                    }
                }
                Err(e) => tracing::warn!("{path}: {e}"),
            },
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => tracing::warn!("{path}: {e}; pages failed on other machines may be tried again"),
        }
    }

    /// Put `book` in the store if this process changed it since the last put.
    pub async fn push_book(&self, book: &crate::core::poison::PoisonBook) {
        let Some((body, changes)) = book.unshared() else { return };
        let path = self.remote.path("poison.json");
        match self.remote.store.put(&path, PutPayload::from(body)).await {
            Ok(_) => book.shared_up_to(changes),
            Err(e) => tracing::warn!("{path}: {e}; the pages failed here are shared at the next try"),
        }
    }

    /// Put `book`'s changes every [`SHIP_EVERY`] until aborted or the book is gone (holding
    /// neither it nor this outbox's lines).
    pub fn keep_sharing(&self, book: &Arc<crate::core::poison::PoisonBook>) -> tokio::task::JoinHandle<()> {
        let me = Outbox::new(self.remote.clone(), self.machine.clone());
        let book = Arc::downgrade(book);
        tokio::spawn(async move {
            loop {
                let Some(b) = book.upgrade() else { return };
                me.push_book(&b).await;
                drop(b);
                tokio::time::sleep(SHIP_EVERY).await;
            }
        })
    }
}

/// How long shipped events are kept: `cairn stats` reads a month of every machine's queries, and
/// `_cairn/events/` stays bounded (a machine ships at most every 30 s, only what it logged).
pub const EVENTS_KEEP: std::time::Duration = std::time::Duration::from_secs(30 * 86_400);

/// When a shipment was put, from its name (`<ms>-<pid>.jsonl`).
fn shipped_at(path: &object_store::path::Path) -> Option<u64> {
    path.filename()?.split_once('-')?.0.parse().ok()
}

async fn shipments(remote: &Remote) -> Result<Vec<object_store::path::Path>, String> {
    use futures::TryStreamExt;
    let prefix = remote.path("events");
    remote
        .store
        .list(Some(&prefix))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .map_err(|e| format!("{prefix}: {e}"))
}

/// Remove every machine's shipments older than `keep` (by the writer, with its journal's
/// pruning); how many went.
pub async fn prune_shipped(remote: &Remote, keep: std::time::Duration) -> Result<usize, String> {
    let before = crate::core::event::unix_ms().saturating_sub(keep.as_millis() as u64);
    let mut removed = 0;
    for path in shipments(remote).await?.into_iter().filter(|p| shipped_at(p).is_some_and(|t| t < before)) {
        remote.store.delete(&path).await.map_err(|e| format!("{path}: {e}"))?;
        removed += 1;
    }
    Ok(removed)
}

/// Every shipped event of every machine, oldest shipments first (`cairn stats`); with `span`,
/// only the shipments within `span` before the newest one (and a day's margin: a shipment holds
/// what was logged before its name's time), so that a window of days does not download a month.
pub async fn shipped(
    remote: &Remote,
    span: Option<std::time::Duration>,
) -> Result<Vec<crate::core::event::Event>, String> {
    let mut listed = shipments(remote).await?;
    if let Some(span) = span {
        let newest = listed.iter().filter_map(shipped_at).max().unwrap_or(0);
        let from = newest.saturating_sub((span.as_millis() as u64).saturating_add(86_400_000));
        listed.retain(|p| shipped_at(p).is_none_or(|t| t >= from));
    }
    listed.sort_by_key(|p| p.filename().map(str::to_string));
    let mut events = Vec::new();
    for path in listed {
        let got = remote.store.get(&path).await.map_err(|e| format!("{path}: {e}"))?;
        let bytes = got.bytes().await.map_err(|e| format!("{path}: {e}"))?;
        // A line that does not parse (a shipment cut short) is skipped, not fatal.
        events.extend(
            String::from_utf8_lossy(&bytes)
                .lines()
                .filter_map(|l| serde_json::from_str::<crate::core::event::Event>(l).ok()),
        );
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::poison::PoisonBook;

    #[tokio::test]
    async fn a_page_failed_on_one_machine_is_skipped_by_the_writer_that_takes_over() {
        let remote = Remote::in_memory();
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (ship_a, ship_b) =
            (Outbox::new(remote.clone(), "a".into()), Outbox::new(remote.clone(), "b".into()));
        let book_a = PoisonBook::open(a.path()).unwrap();
        let book_b = PoisonBook::open(b.path()).unwrap();
        ship_a.pull_book(&book_a).await; // nothing stored yet
        book_a.add("notes", "bomb.md", "h1", "crashed", "the parser crashed");
        ship_a.push_book(&book_a).await;
        // B, a reader so far, changed nothing: it never overwrites A's book.
        ship_b.push_book(&book_b).await;
        ship_b.pull_book(&book_b).await;
        assert_eq!(book_b.check("notes", "bomb.md", "h1").unwrap().kind, "crashed");
        // A page forgiven on A (it parsed after an edit) leaves the store's book.
        book_a.done("notes", "bomb.md", true);
        ship_a.push_book(&book_a).await;
        let c = tempfile::tempdir().unwrap();
        let book_c = PoisonBook::open(c.path()).unwrap();
        Outbox::new(remote, "c".into()).pull_book(&book_c).await;
        assert!(book_c.check("notes", "bomb.md", "h1").is_none());
    }

    #[tokio::test]
    async fn shipments_past_a_month_go_and_a_window_of_days_reads_only_its_own() {
        use object_store::ObjectStoreExt;
        let remote = Remote::in_memory();
        let day = 86_400_000u64;
        let now = crate::core::event::unix_ms();
        let put = |machine: &str, ms: u64, query: &str| {
            let (remote, path) = (remote.clone(), remote.path(&format!("events/{machine}/{ms:015}-1.jsonl")));
            let kind =
                crate::core::event::EventKind::SystemStarted { unix_ms: ms, sources: vec![query.into()] };
            let line =
                serde_json::to_vec(&crate::core::event::Event { seq: 1, ts: 0, source: "s".into(), kind })
                    .unwrap();
            async move { remote.store.put(&path, line.into()).await.unwrap() }
        };
        put("a", now - 40 * day, "old").await;
        put("b", now - 10 * day, "ten").await;
        put("a", now - day / 2, "new").await;
        let all = shipped(&remote, None).await.unwrap();
        assert_eq!(all.len(), 3);
        // A 2-day window: the newest shipment's day and the day's margin, not the 10-day-old one.
        let window = shipped(&remote, Some(std::time::Duration::from_secs(2 * 86_400))).await.unwrap();
        assert_eq!(window.len(), 1, "{window:?}");
        assert_eq!(prune_shipped(&remote, EVENTS_KEEP).await.unwrap(), 1);
        assert_eq!(shipped(&remote, None).await.unwrap().len(), 2, "only the 40-day-old one went");
    }
}
