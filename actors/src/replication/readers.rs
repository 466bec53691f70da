//! Who reads a database on an object store, and how far each has come: every reader puts
//! `_cairn/readers/<machine>-<pid>.json` (its host, pid and the commit each source's memory
//! reflects) when that moves, at most every [`PUT_EVERY`], and at least every [`HEARTBEAT`]; it
//! deletes it when it stops cleanly. Anyone lists them (`status`, the sources page); a reader not
//! heard from for [`GONE_AFTER`] is not listed (killed, or cut off), and the writer's upkeep
//! deletes what is older than [`FORGET_AFTER`].

use crate::replication::remote::Remote;
use futures::TryStreamExt;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The most often a reader puts what it holds (its commits can come every second).
pub const PUT_EVERY: Duration = Duration::from_secs(5);
/// A reader whose sources did not move says it is still there this often.
pub const HEARTBEAT: Duration = Duration::from_secs(60);
/// Not heard from for this long: not listed.
pub const GONE_AFTER: Duration = Duration::from_secs(3 * 60);
/// Not heard from for this long: deleted by the writer's upkeep.
pub const FORGET_AFTER: Duration = Duration::from_secs(86_400);
/// A list is answered again from memory for this long (the sources page asks on every event).
const LIST_KEPT: Duration = Duration::from_secs(5);
/// How long a status waits for the list.
const LIST_WITHIN: Duration = Duration::from_secs(2);

type Kept = Option<(String, Instant, Vec<ReaderSeen>)>;
static KEPT: Mutex<Kept> = Mutex::new(None);

/// `seen` as the list of `remote`'s readers for the next [`LIST_KEPT`].
fn keep(remote: &Remote, seen: Vec<ReaderSeen>) -> Vec<ReaderSeen> {
    *KEPT.lock().unwrap_or_else(|p| p.into_inner()) =
        Some((remote.uri.clone(), Instant::now(), seen.clone()));
    seen
}

/// One reader as it last said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReaderSeen {
    pub host: String,
    pub pid: u32,
    /// Its machine's name in the store (its host and state folder).
    pub machine: String,
    /// The commit (the source's table version) each source's memory reflects.
    pub as_of: BTreeMap<String, u64>,
    /// When it said so (its own clock).
    pub said_unix_ms: u64,
}

impl ReaderSeen {
    fn key(&self) -> String {
        format!("readers/{}-{}.json", self.machine, self.pid)
    }
}

impl std::fmt::Display for ReaderSeen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let as_of: Vec<String> = self.as_of.iter().map(|(s, v)| format!("{s}@{v}")).collect();
        write!(f, "pid {} on {}, as of {}", self.pid, self.host, as_of.join(" "))
    }
}

/// This process's own entry: what it last put, and when; and whether it stopped saying.
#[derive(Debug, Default)]
pub struct Publisher {
    /// What it last put, and when; held across a put, so that a stop waits for a put in flight
    /// before it deletes.
    last: tokio::sync::Mutex<Option<(BTreeMap<String, u64>, Instant)>>,
    /// Set first by a stop: no put starts after it (the follow loop can outlive the stop).
    stopped: std::sync::atomic::AtomicBool,
}

/// How long a stop waits for a put in flight before it deletes anyway.
const STOP_WAITS: Duration = Duration::from_secs(5);

impl Publisher {
    /// Put `me` when its sources moved (and [`PUT_EVERY`] passed) or the heartbeat is due; never
    /// once this reader stopped saying.
    pub async fn publish(&self, remote: &Remote, me: ReaderSeen) {
        let mut last = self.last.lock().await;
        let due = match &*last {
            None => true,
            Some((as_of, at)) => {
                (*as_of != me.as_of && at.elapsed() >= PUT_EVERY) || at.elapsed() >= HEARTBEAT
            }
        };
        if !due || self.stopped.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let body = serde_json::to_vec(&me).unwrap_or_default();
        match remote.store.put(&remote.path(&me.key()), PutPayload::from(body)).await {
            Ok(_) => *last = Some((me.as_of, Instant::now())),
            Err(e) => tracing::debug!("readers: {e}"),
        }
    }

    /// Take this reader off the list (a clean stop), for good: a put in flight ends first (for
    /// at most [`STOP_WAITS`]), and none starts after.
    pub async fn forget(&self, remote: &Remote, me: &ReaderSeen) {
        self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
        let put = match tokio::time::timeout(STOP_WAITS, self.last.lock()).await {
            Ok(mut last) => last.take().is_some(),
            Err(_) => true,
        };
        if put {
            let _ = remote.store.delete(&remote.path(&me.key())).await;
        }
    }
}

/// The entries under `_cairn/readers/` with when each was last written (the store's clock).
async fn entries(remote: &Remote) -> Result<Vec<(object_store::path::Path, u64)>, String> {
    let prefix = remote.path("readers");
    let objects: Vec<_> =
        remote.store.list(Some(&prefix)).try_collect().await.map_err(|e| format!("{prefix}: {e}"))?;
    Ok(objects.into_iter().map(|o| (o.location, o.last_modified.timestamp_millis().max(0) as u64)).collect())
}

/// The readers heard from within [`GONE_AFTER`], by host and pid. Kept for [`LIST_KEPT`]. When
/// an entry was written is the store's stamp, not the reader's: only this machine's clock is
/// compared with the store's, and a skew of a minute is small against three.
pub async fn list(remote: &Remote) -> Result<Vec<ReaderSeen>, String> {
    if let Some((uri, at, kept)) = &*KEPT.lock().unwrap_or_else(|p| p.into_inner())
        && *uri == remote.uri
        && at.elapsed() < LIST_KEPT
    {
        return Ok(kept.clone());
    }
    let now = crate::core::event::unix_ms();
    let mut seen = Vec::new();
    for (path, written) in entries(remote).await? {
        if now.saturating_sub(written) > GONE_AFTER.as_millis() as u64 {
            continue;
        }
        let Ok(got) = remote.store.get(&path).await else { continue };
        let Ok(bytes) = got.bytes().await else { continue };
        if let Ok(r) = serde_json::from_slice::<ReaderSeen>(&bytes) {
            seen.push(r);
        }
    }
    seen.sort_by(|a, b| (&a.host, a.pid).cmp(&(&b.host, b.pid)));
    Ok(keep(remote, seen))
}

/// [`list`] where there is a store and it answers within [`LIST_WITHIN`]: none for a local
/// database, or a store that cannot be listed now. A status never waits on a store that hangs
/// (it is how a person finds out that it does), and asked again within [`LIST_KEPT`] it does not
/// wait again.
pub async fn listed(remote: Option<&Remote>) -> Vec<ReaderSeen> {
    let Some(r) = remote else { return Vec::new() };
    match tokio::time::timeout(LIST_WITHIN, list(r)).await {
        Ok(Ok(seen)) => seen,
        Ok(Err(e)) => {
            tracing::debug!("readers: {e}");
            keep(r, Vec::new())
        }
        Err(_) => {
            tracing::debug!("readers: {} did not list them within {LIST_WITHIN:?}", r.uri);
            keep(r, Vec::new())
        }
    }
}

/// Delete the entries of readers not heard from for `keep` (the writer's upkeep).
pub async fn prune(remote: &Remote, keep: Duration) -> Result<usize, String> {
    let before = crate::core::event::unix_ms().saturating_sub(keep.as_millis() as u64);
    let mut removed = 0;
    for (path, _) in entries(remote).await?.into_iter().filter(|(_, t)| *t < before) {
        remote.store.delete(&path).await.map_err(|e| format!("{path}: {e}"))?;
        removed += 1;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(pid: u32, version: u64) -> ReaderSeen {
        ReaderSeen {
            host: "h".into(),
            pid,
            machine: "h-1".into(),
            as_of: BTreeMap::from([("nt".to_string(), version)]),
            said_unix_ms: 0,
        }
    }

    #[tokio::test]
    async fn a_reader_is_listed_as_it_last_said_and_not_once_it_stops() {
        let remote = Remote::in_memory();
        let (a, b) = (Publisher::default(), Publisher::default());
        a.publish(&remote, reader(1, 3)).await;
        b.publish(&remote, reader(2, 4)).await;
        // Moved within PUT_EVERY: not put again yet.
        a.publish(&remote, reader(1, 5)).await;
        assert_eq!(entries(&remote).await.unwrap().len(), 2);
        let got = list(&remote).await.unwrap();
        assert_eq!(got, vec![reader(1, 3), reader(2, 4)]);
        a.forget(&remote, &reader(1, 3)).await;
        assert_eq!(entries(&remote).await.unwrap().len(), 1, "a clean stop deletes its entry");
        // The follow loop can say where it is after the stop: it is not listed again.
        a.publish(&remote, reader(1, 6)).await;
        assert_eq!(entries(&remote).await.unwrap().len(), 1, "no put after a stop");
        assert_eq!(prune(&remote, Duration::from_secs(60)).await.unwrap(), 0, "a live reader stays");
    }
}
