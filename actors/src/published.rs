//! Freshness for readers in other processes: a running system writes its sources' status
//! (pending changes, lag) to `status-<pid>.json` in its event-log directory, and a one-shot
//! `cairn search` on the same database reads it, so its answer can say what is not searchable yet
//! — or that nothing watches a source at all.
//!
//! A plain OS thread writes the file (at most every [`PERIOD`], at least every [`HEARTBEAT`]), not
//! a tokio timer: under paused time (replays) a periodic tokio timer would drive the clock.

use crate::status::{SourceStatus, StatusBoard};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How often a change of status reaches the file.
const PERIOD: Duration = Duration::from_millis(100);
/// The file is rewritten at least this often while the system runs.
const HEARTBEAT: Duration = Duration::from_secs(2);
/// A file older than this belongs to a process that is gone (killed before it could remove it).
const STALE: Duration = Duration::from_secs(10);

/// What one running system publishes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Published {
    pub pid: u32,
    /// Wall-clock time of the write.
    pub unix_ms: u64,
    pub sources: Vec<SourceStatus>,
}

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn file_of(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("status-{pid}.json"))
}

/// The publishing thread; stopping it (or dropping this) removes the file.
#[derive(Debug)]
pub struct Publisher {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Publisher {
    pub fn start(dir: PathBuf, status: StatusBoard) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new().name("cairn-status".into()).spawn(move || {
            let pid = std::process::id();
            let path = file_of(&dir, pid);
            let (mut last, mut written) = (None::<Vec<SourceStatus>>, std::time::Instant::now());
            while !flag.load(Ordering::SeqCst) {
                let now = status.all();
                if last.as_ref() != Some(&now) || written.elapsed() >= HEARTBEAT {
                    let p = Published { pid, unix_ms: unix_ms(), sources: now.clone() };
                    if let Err(e) = write_atomic(&path, &p) {
                        tracing::debug!("status file {}: {e}", path.display());
                    }
                    (last, written) = (Some(now), std::time::Instant::now());
                }
                std::thread::sleep(PERIOD);
            }
            let _ = std::fs::remove_file(&path);
        })?;
        Ok(Self { stop, thread: Some(thread) })
    }

    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop();
    }
}

fn write_atomic(path: &Path, p: &Published) -> std::io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(p).map_err(std::io::Error::other)?)?;
    std::fs::rename(&tmp, path)
}

/// The status published by every live system on the database whose event log is in `dir`;
/// files of processes that are gone are ignored (and removed).
pub fn read(dir: &Path) -> Vec<Published> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let now = unix_ms();
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !(name.starts_with("status-") && name.ends_with(".json")) {
            continue;
        }
        let Some(p) = std::fs::read(e.path()).ok().and_then(|b| serde_json::from_slice::<Published>(&b).ok())
        else {
            continue;
        };
        if now.saturating_sub(p.unix_ms) > STALE.as_millis() as u64 {
            let _ = std::fs::remove_file(e.path());
            continue;
        }
        out.push(p);
    }
    out.sort_by_key(|p| p.pid);
    out
}

/// A source's freshness as another process sees it: pending changes and lag, aged by the time
/// since the status was written. `None`: no running system watches the source.
pub fn freshness(published: &[Published], source: &str) -> Option<(u64, u64)> {
    let now = unix_ms();
    published.iter().find_map(|p| {
        let s = p.sources.iter().find(|s| s.source == source && s.state != "stopped")?;
        let lag = if s.pending > 0 { s.lag_ms + now.saturating_sub(p.unix_ms) } else { 0 };
        Some((s.pending, lag))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_system_is_seen_and_a_gone_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let board = StatusBoard::default();
        board.register("notes", "/vault");
        board.add_in_flight("notes", 3);
        let mut publisher = Publisher::start(dir.path().to_path_buf(), board.clone()).unwrap();
        let file = file_of(dir.path(), std::process::id());
        // The first write happens before the thread's first sleep; wait for the file itself.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !file.exists() {
            assert!(std::time::Instant::now() < deadline, "no status file within 10 s");
            std::thread::yield_now();
        }
        let seen = read(dir.path());
        assert_eq!(seen.len(), 1);
        assert_eq!(freshness(&seen, "notes").map(|f| f.0), Some(3));
        assert_eq!(freshness(&seen, "other"), None);
        publisher.stop();
        assert!(!file.exists(), "stopping removes the file");
        assert!(read(dir.path()).is_empty());

        // A file left by a killed process is stale after a while, and ignored.
        let old = Published { pid: 1, unix_ms: unix_ms() - 60_000, sources: board.all() };
        write_atomic(&file_of(dir.path(), 1), &old).unwrap();
        assert!(read(dir.path()).is_empty());
        assert!(!file_of(dir.path(), 1).exists());
    }
}
