//! On an object store, each machine's events go to the store too, so `cairn stats` on any
//! machine sums every machine's queries: lines wait in an [`Outbox`] and are put as one object
//! per shipment, `_cairn/events/<machine>/<unix ms>-<pid>.jsonl` (append-only by construction:
//! no object is ever rewritten, so machines never contend). The local log stays the full journal
//! of this machine; the store holds what was shipped, at most [`SHIP_EVERY`] behind.

use crate::ownership::remote::Remote;
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
    let host: String = crate::ownership::lease::host_name()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .collect();
    let digest = cairn_ingest::hex_digest(&[state_dir.display().to_string().as_bytes()]);
    format!("{host}-{}", &digest[..8])
}

impl Outbox {
    pub fn new(remote: Remote, machine: String) -> Self {
        Self { remote, machine, lines: Arc::default() }
    }

    /// One event line (newline included) to ship.
    pub fn push(&self, line: &[u8]) {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(line);
    }

    /// Ship what waits now (nothing when nothing waits).
    pub async fn ship(&self) {
        let body = std::mem::take(&mut *self.lines.lock().unwrap_or_else(|p| p.into_inner()));
        if body.is_empty() {
            return;
        }
        let name =
            format!("events/{}/{:015}-{}.jsonl", self.machine, crate::event::unix_ms(), std::process::id());
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
    pub async fn pull_book(&self, book: &crate::pipeline::poison::PoisonBook) {
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
    pub async fn push_book(&self, book: &crate::pipeline::poison::PoisonBook) {
        let Some((body, changes)) = book.unshared() else { return };
        let path = self.remote.path("poison.json");
        match self.remote.store.put(&path, PutPayload::from(body)).await {
            Ok(_) => book.shared_up_to(changes),
            Err(e) => tracing::warn!("{path}: {e}; the pages failed here are shared at the next try"),
        }
    }

    /// Put `book`'s changes every [`SHIP_EVERY`] until aborted or the book is gone (holding
    /// neither it nor this outbox's lines).
    pub fn keep_sharing(
        &self,
        book: &Arc<crate::pipeline::poison::PoisonBook>,
    ) -> tokio::task::JoinHandle<()> {
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

/// Every shipped event of every machine, oldest shipments first (`cairn stats`).
pub async fn shipped(remote: &Remote) -> Result<Vec<crate::event::Event>, String> {
    use futures::TryStreamExt;
    let prefix = remote.path("events");
    let mut listed: Vec<object_store::path::Path> = remote
        .store
        .list(Some(&prefix))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .map_err(|e| format!("{prefix}: {e}"))?;
    listed.sort_by_key(|p| p.filename().map(str::to_string));
    let mut events = Vec::new();
    for path in listed {
        let got = remote.store.get(&path).await.map_err(|e| format!("{path}: {e}"))?;
        let bytes = got.bytes().await.map_err(|e| format!("{path}: {e}"))?;
        // A line that does not parse (a shipment cut short) is skipped, not fatal.
        events.extend(
            String::from_utf8_lossy(&bytes)
                .lines()
                .filter_map(|l| serde_json::from_str::<crate::event::Event>(l).ok()),
        );
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::poison::PoisonBook;

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
}
