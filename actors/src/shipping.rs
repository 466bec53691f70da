//! On an object store, each machine's events go to the store too, so `cairn stats` on any
//! machine sums every machine's queries: lines wait in an [`Outbox`] and are put as one object
//! per shipment, `_cairn/events/<machine>/<unix ms>-<pid>.jsonl` (append-only by construction:
//! no object is ever rewritten, so machines never contend). The local log stays the full journal
//! of this machine; the store holds what was shipped, at most [`SHIP_EVERY`] behind.

use crate::remote::Remote;
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
    let host: String = crate::lease::host_name()
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
