//! The writer lease of a database on an object store: one writer per database, across machines.
//!
//! The lease is one object in the database's own prefix, `_cairn/lease.json`, saying who holds
//! it. It is taken and renewed with the store's conditional writes only (S3's `If-None-Match: *`
//! and `If-Match: <etag>`, through `object_store`'s `PutMode::Create` and `PutMode::Update`):
//!
//! - **take** a lease that is not there: create-if-absent (one of any number of racers wins);
//! - **renew** it every [`RENEW_EVERY`]: replace-if-ETag with the ETag of the last renewal; a
//!   `412` means another process took it, and this one has lost it;
//! - **take over** a lease whose holder stopped renewing: a standby that has seen the same ETag
//!   for [`TTL`] of *its own* clock replaces it, conditional on that ETag (of several standbys,
//!   one wins). Comparing ETags over a local interval needs no agreement between the machines'
//!   clocks;
//! - **release** it on a clean stop: replaced with a `released` mark, so a standby takes it at
//!   its next look instead of waiting out the TTL. A holder that named the lock file this
//!   process holds now, on this very machine, boot and pid namespace, and whose pid no longer
//!   runs, is taken at once too ([`machine::certainly_gone`]): a host name alone proves nothing
//!   (clones and containers share one).
//!
//! The holder stops writing once it has not renewed for [`TTL`] minus [`MARGIN`] of its own
//! clock ([`Lease::valid`]), before any standby may take over. It goes on renewing: a renewal
//! that lands (conditional on its last ETag, so only when no standby took over meanwhile) lets
//! it write again, which is what a store that stopped answering for a while needs. A renewal
//! counts from when its request was *sent* (a slow answer must not lengthen the lease), and the
//! clock is the boot clock, which keeps counting while a laptop sleeps ([`machine::boot_clock`]).

use crate::replication::machine::{self, boot_clock};
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A holder that has not renewed for this long (as a standby's clock sees the ETag stand still)
/// has lost the lease. Three renewals: one slow or lost renewal does not cost the lease. (It
/// was 10 s before the tables were fenced; a takeover that comes too early now costs the old
/// writer a restart, never a commit on top of the new one's, so it can be short.)
pub const TTL: Duration = Duration::from_secs(6);
/// How often the holder renews.
pub const RENEW_EVERY: Duration = Duration::from_secs(2);
/// The holder stops writing this long before its lease could be taken over.
pub const MARGIN: Duration = Duration::from_secs(2);
/// How often a standby looks at the lease while its holder renews it.
pub const LOOK_EVERY: Duration = Duration::from_secs(2);
/// How often once a renewal is late (the ETag stood still past [`RENEW_EVERY`] and a half): the
/// takeover follows the TTL by this much at most, not by [`LOOK_EVERY`], at no cost while the
/// holder is alive.
pub const LATE_LOOK_EVERY: Duration = Duration::from_millis(250);

/// Who holds a lease: the writer of the database.
pub use cairn_query::Writer as Holder;

/// This process, as a holder: `lock` is the lock file it holds on this machine.
pub fn me(purpose: &str, lock: &std::path::Path) -> Holder {
    Holder {
        host: host_name(),
        pid: std::process::id(),
        purpose: purpose.into(),
        since_unix_ms: crate::core::event::unix_ms(),
        lock: lock.display().to_string(),
        machine: machine::machine().to_string(),
    }
}

fn unknown() -> Holder {
    Holder {
        host: "unknown".into(),
        pid: 0,
        purpose: "unknown".into(),
        since_unix_ms: 0,
        lock: String::new(),
        machine: String::new(),
    }
}

/// The machine's name (`/etc/hostname`, else `HOSTNAME`, else `unknown`).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// The lease object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Body {
    holder: Holder,
    /// Given back on a clean stop: free to take at once.
    #[serde(default)]
    released: bool,
    /// Counted up at every renewal: an object store's ETag is a hash of the content, so the
    /// content must change for a standby to see the lease renewed.
    #[serde(default)]
    renewal: u64,
}

/// Why a lease could not be used.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("{uri}: its writer lease ({path}): {message}")]
    Store { uri: String, path: String, message: String },
}

type Result<T> = std::result::Result<T, LeaseError>;

/// Where a database's lease is, and the store it is in.
#[derive(Clone)]
pub struct LeaseStore {
    store: Arc<dyn ObjectStore>,
    uri: String,
    path: StorePath,
}

impl std::fmt::Debug for LeaseStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseStore").field("path", &self.path.as_ref()).finish()
    }
}

/// What a look at the lease found.
#[derive(Debug)]
pub enum Taken {
    /// This process holds it now.
    Mine(Lease),
    /// Another process holds it (as far as this look can tell).
    Theirs(Holder),
}

/// A standby's memory of the lease: the ETag it saw, and since when (its own boot clock).
#[derive(Debug, Default)]
pub struct Watching {
    seen: Option<(String, Duration)>,
}

impl Watching {
    /// The ETag of the last look (`None` before the first).
    pub fn etag(&self) -> Option<&str> {
        self.seen.as_ref().map(|(e, _)| e.as_str())
    }

    /// When to look again: soon once the holder's renewal is late.
    pub fn next_look(&self) -> Duration {
        match &self.seen {
            Some((_, since)) if boot_clock().saturating_sub(*since) > RENEW_EVERY + RENEW_EVERY / 2 => {
                LATE_LOOK_EVERY
            }
            _ => LOOK_EVERY,
        }
    }

    /// A standby that has seen the lease at `etag` stand still for the whole TTL (several such
    /// standbys race for one lease in the tests).
    pub fn stood_still(etag: &str) -> Self {
        Self { seen: Some((etag.to_string(), boot_clock().saturating_sub(TTL))) }
    }
}

impl LeaseStore {
    /// The lease of a database on an object store.
    pub fn of(remote: &crate::replication::remote::Remote) -> Self {
        Self { store: remote.store.clone(), uri: remote.uri.clone(), path: remote.path("lease.json") }
    }

    fn err(&self, e: impl std::fmt::Display) -> LeaseError {
        LeaseError::Store { uri: self.uri.clone(), path: self.path.to_string(), message: e.to_string() }
    }

    /// Take the lease for `me` if it is free: not there, released, or (by `watching`) unchanged
    /// for [`TTL`].
    pub async fn try_take(&self, me: &Holder, watching: &mut Watching) -> Result<Taken> {
        let body = serde_json::to_vec(&Body { holder: me.clone(), released: false, renewal: 0 })
            .map_err(|e| self.err(e))?;
        let current = match self.store.get(&self.path).await {
            Ok(got) => {
                let etag = got.meta.e_tag.clone().unwrap_or_default();
                let bytes = got.bytes().await.map_err(|e| self.err(e))?;
                Some((etag, serde_json::from_slice::<Body>(&bytes).ok()))
            }
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(self.err(e)),
        };
        let Some((etag, held)) = current else {
            return self.put(body, PutMode::Create, me).await;
        };
        let free = match &held {
            Some(b) if b.released => true,
            // Its holder held the very lock this process holds now, on this machine, boot and
            // pid namespace, and its pid is gone (a crash, a kill -9): its TTL need not be
            // waited out.
            Some(b) if predecessor(&b.holder, me) => true,
            // Unreadable: as good as free once it stands still for the TTL.
            _ => match &watching.seen {
                Some((seen, since)) if *seen == etag => boot_clock().saturating_sub(*since) >= TTL,
                _ => {
                    watching.seen = Some((etag.clone(), boot_clock()));
                    false
                }
            },
        };
        if free {
            let mode = PutMode::Update(UpdateVersion { e_tag: Some(etag), version: None });
            return self.put(body, mode, me).await;
        }
        Ok(Taken::Theirs(held.map_or_else(unknown, |b| b.holder)))
    }

    /// A conditional write of the lease for `me`; losing the race is `Theirs`.
    async fn put(&self, body: Vec<u8>, mode: PutMode, me: &Holder) -> Result<Taken> {
        let opts = PutOptions { mode, ..PutOptions::default() };
        let sent = boot_clock();
        match self.store.put_opts(&self.path, PutPayload::from(body), opts).await {
            Ok(r) => Ok(Taken::Mine(Lease {
                store: self.clone(),
                holder: me.clone(),
                held: Arc::new(Mutex::new(Held { etag: r.e_tag, renewed: sent, renewals: 0, lost: false })),
            })),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {
                Ok(Taken::Theirs(self.holder().await.unwrap_or_else(unknown)))
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// The lease's ETag and whether it is held (not released); `None` when there is none, or
    /// the store did not answer.
    pub async fn look(&self) -> Option<(String, bool)> {
        let got = self.store.get(&self.path).await.ok()?;
        let etag = got.meta.e_tag.clone().unwrap_or_default();
        let body: Option<Body> = got.bytes().await.ok().and_then(|b| serde_json::from_slice(&b).ok());
        Some((etag, body.is_some_and(|b| !b.released)))
    }

    /// Who holds the lease now, as its object says (`None`: nobody, or released).
    pub async fn holder(&self) -> Option<Holder> {
        let got = self.store.get(&self.path).await.ok()?;
        let body: Body = serde_json::from_slice(&got.bytes().await.ok()?).ok()?;
        (!body.released).then_some(body.holder)
    }
}

/// Whether `holder` is a dead predecessor of `me`: the same lock file, on this machine, boot and
/// pid namespace, with its pid gone.
fn predecessor(holder: &Holder, me: &Holder) -> bool {
    !holder.lock.is_empty()
        && holder.lock == me.lock
        && holder.host == me.host
        && machine::certainly_gone(&holder.machine, holder.pid)
}

#[derive(Debug)]
struct Held {
    etag: Option<String>,
    /// When the last successful renewal was sent (boot clock).
    renewed: Duration,
    renewals: u64,
    lost: bool,
}

/// A held lease. Renew it every [`RENEW_EVERY`]; write only while [`Lease::valid`].
#[derive(Debug, Clone)]
pub struct Lease {
    store: LeaseStore,
    holder: Holder,
    held: Arc<Mutex<Held>>,
}

impl Lease {
    pub fn holder(&self) -> &Holder {
        &self.holder
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Taken by another process (or given back): this one never writes under it again. A lease
    /// that is only not [`valid`](Self::valid) (not renewed in time, the store not answering)
    /// is valid again after the next renewal that finds it untaken.
    pub fn lost(&self) -> bool {
        self.lock().lost
    }

    /// Lost, as learnt from elsewhere than a renewal: the source's tables were fenced by another
    /// writer, which can only have taken the lease first. The next renewal then says so (and
    /// stops this process writing) without asking the store.
    pub fn lose(&self) {
        self.lock().lost = true;
    }

    /// Renewed recently enough that no standby can have taken it: writing is safe.
    pub fn valid(&self) -> bool {
        let h = self.lock();
        !h.lost && boot_clock().saturating_sub(h.renewed) < TTL - MARGIN
    }

    /// Renew: `Ok(false)` when another process has taken it (this one has lost it for good).
    pub async fn renew(&self) -> Result<bool> {
        let (etag, renewal) = {
            let h = self.lock();
            if h.lost {
                return Ok(false);
            }
            (h.etag.clone(), h.renewals + 1)
        };
        let body = serde_json::to_vec(&Body { holder: self.holder.clone(), released: false, renewal })
            .map_err(|e| self.store.err(e))?;
        let opts = PutOptions {
            mode: PutMode::Update(UpdateVersion { e_tag: etag, version: None }),
            ..PutOptions::default()
        };
        let sent = boot_clock();
        match self.store.store.put_opts(&self.store.path, PutPayload::from(body), opts).await {
            Ok(r) => {
                let mut h = self.lock();
                h.etag = r.e_tag;
                h.renewed = sent;
                h.renewals = renewal;
                Ok(true)
            }
            Err(object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. }) => {
                self.lock().lost = true;
                Ok(false)
            }
            Err(e) => Err(self.store.err(e)),
        }
    }

    /// As if not renewed for the whole TTL (a store that did not answer, a process that was
    /// stopped), for tests of what a lapsed lease refuses.
    #[cfg(test)]
    pub(crate) fn lapse(&self) {
        self.lock().renewed = boot_clock().saturating_sub(TTL);
    }

    /// Give it back (a clean stop): a standby takes it at its next look.
    pub async fn release(&self) {
        let etag = {
            let mut h = self.lock();
            if h.lost {
                return;
            }
            h.lost = true;
            h.etag.clone()
        };
        let Ok(body) =
            serde_json::to_vec(&Body { holder: self.holder.clone(), released: true, renewal: u64::MAX })
        else {
            return;
        };
        let opts = PutOptions {
            mode: PutMode::Update(UpdateVersion { e_tag: etag, version: None }),
            ..PutOptions::default()
        };
        if let Err(e) = self.store.store.put_opts(&self.store.path, PutPayload::from(body), opts).await {
            tracing::warn!("{}: {e}; a standby takes over when its TTL runs out", self.store.path);
        }
    }

    /// Renew every [`RENEW_EVERY`] until lost; `lost` is told when it is (taken by another
    /// process). A store that does not answer for longer than the lease only pauses writing
    /// ([`valid`](Self::valid) is false meanwhile): renewals go on, conditional on the ETag this
    /// process last wrote, so the first one that lands proves no standby took the lease in
    /// between (taking it changes the ETag), and writing resumes; a `412` says one did.
    pub fn keep(&self, lost: tokio::sync::watch::Sender<bool>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut lapsed = false;
            loop {
                tokio::time::sleep(RENEW_EVERY).await;
                match me.renew().await {
                    Ok(true) if std::mem::take(&mut lapsed) => {
                        tracing::warn!("the writer lease {} is renewed again: writing resumes", me.store.path)
                    }
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::error!("the writer lease {} was taken by another process", me.store.path);
                        let _ = lost.send(true);
                        return;
                    }
                    Err(e) if !me.valid() => {
                        if !std::mem::replace(&mut lapsed, true) {
                            tracing::error!(
                                "{e}; not renewed in time, so this process pauses writing until the store \
                                 answers (a standby that takes the lease over meanwhile keeps it)"
                            );
                        }
                    }
                    Err(e) => tracing::warn!("{e}; renewing again in {} ms", RENEW_EVERY.as_millis()),
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: u32, machine: &str) -> Holder {
        Holder {
            host: "box".into(),
            pid,
            purpose: "watch".into(),
            since_unix_ms: 0,
            lock: "/state/cairn.lock".into(),
            machine: machine.into(),
        }
    }

    fn on_another_machine(pid: u32, name: &str) -> Holder {
        holder(pid, &format!("{name}/boot/pid:[1]"))
    }

    async fn take(store: &LeaseStore, who: &Holder, watching: &mut Watching) -> Option<Lease> {
        match store.try_take(who, watching).await.unwrap() {
            Taken::Mine(lease) => Some(lease),
            Taken::Theirs(_) => None,
        }
    }

    #[tokio::test]
    async fn a_lease_changes_hands_only_through_its_etag_or_its_release() {
        let store = LeaseStore::of(&crate::replication::remote::Remote::in_memory());
        let (a, b) = (on_another_machine(1, "a"), on_another_machine(2, "b"));
        let lease = take(&store, &a, &mut Watching::default()).await.expect("free: taken");
        assert!(lease.valid() && !lease.lost());
        // Held and renewed: a standby that has just seen it may not take it.
        let mut watching = Watching::default();
        assert!(take(&store, &b, &mut watching).await.is_none());
        assert!(lease.renew().await.unwrap());
        assert_eq!(store.holder().await.map(|h| h.pid), Some(1));
        // One that saw its current ETag stand still for the TTL takes it over, conditionally.
        let (etag, held) = store.look().await.unwrap();
        assert!(held);
        let taken = take(&store, &b, &mut Watching::stood_still(&etag)).await.expect("taken over");
        // The first holder's next renewal finds its ETag gone: lost for good.
        assert!(!lease.renew().await.unwrap());
        assert!(lease.lost() && !lease.valid());
        assert_eq!(store.holder().await.map(|h| h.pid), Some(2));
        // A released lease is taken at the next look, with no TTL waited out.
        taken.release().await;
        assert!(taken.lost());
        assert_eq!(store.holder().await, None);
        assert!(take(&store, &a, &mut Watching::default()).await.is_some());
    }

    #[tokio::test]
    async fn a_lapsed_lease_writes_again_after_a_renewal_unless_it_was_taken_over_meanwhile() {
        let store = LeaseStore::of(&crate::replication::remote::Remote::in_memory());
        let (a, b) = (on_another_machine(1, "a"), on_another_machine(2, "b"));
        let lease = take(&store, &a, &mut Watching::default()).await.unwrap();
        lease.lapse();
        assert!(!lease.valid() && !lease.lost(), "lapsed, not lost: writing pauses");
        assert!(lease.renew().await.unwrap(), "nobody took it: the renewal lands");
        assert!(lease.valid(), "writing resumes");
        // Lapsed again, and a standby took it over meanwhile.
        lease.lapse();
        let (etag, _) = store.look().await.unwrap();
        assert!(take(&store, &b, &mut Watching::stood_still(&etag)).await.is_some());
        assert!(!lease.renew().await.unwrap(), "its ETag moved: the lease is lost");
        assert!(lease.lost() && !lease.valid());
    }

    #[test]
    fn only_a_dead_process_of_this_machine_boot_and_namespace_is_a_predecessor() {
        let here = machine::machine();
        let me = holder(std::process::id(), here);
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        assert!(predecessor(&holder(dead, here), &me));
        // The same host name and lock path, but alive: another process that sees its own state
        // folder at this path (a private mount namespace), or a clone: never taken at once.
        assert!(!predecessor(&holder(1, here), &me));
        // Another machine (or boot, or pid namespace) with that host name and path.
        assert!(!predecessor(&holder(dead, "clone/boot/pid:[9]"), &me));
        // A holder written before machines were recorded.
        assert!(!predecessor(&holder(dead, ""), &me));
        // Another lock file.
        assert!(!predecessor(&Holder { lock: "/elsewhere/cairn.lock".into(), ..holder(dead, here) }, &me));
    }
}
