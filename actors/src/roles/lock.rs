//! The owner lock: an OS file lock (`flock`) on the database's `cairn.lock`, held for the life of
//! the process that owns the database. The kernel releases it when that process exits or is
//! killed, so a waiting process can take over and a lock can never be left stale. The file's
//! contents say who holds it ([`OwnerInfo`]), for the messages of processes that find it taken.

use crate::api::ipc::OwnerInfo;
use crate::core::paths::DbPaths;
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

/// The held lock; dropping it releases the database.
#[derive(Debug)]
pub struct OwnerLock {
    file: File,
}

fn open(paths: &DbPaths) -> std::io::Result<File> {
    let dir = paths.dir();
    let said = |e: std::io::Error, what: &str| std::io::Error::new(e.kind(), format!("{what}: {e}"));
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!(
                "{} is a file; a database is a folder: give --db a folder (or a name not yet taken)",
                dir.display()
            ),
        ));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| said(e, &format!("cannot make the database folder {}", dir.display())))?;
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(paths.lock())
        .map_err(|e| said(e, &format!("cannot open the database lock {}", paths.lock().display())))
}

impl OwnerLock {
    /// Take the lock if no process holds it.
    pub fn try_acquire(paths: &DbPaths) -> std::io::Result<Option<Self>> {
        let file = open(paths)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Self { file })),
            Err(TryLockError::WouldBlock) => Ok(None),
            Err(TryLockError::Error(e)) => Err(e),
        }
    }

    /// Wait until the lock is free and take it (blocks the calling thread).
    pub fn acquire(paths: &DbPaths) -> std::io::Result<Self> {
        let file = open(paths)?;
        file.lock()?;
        Ok(Self { file })
    }

    /// Say who holds it.
    pub fn publish(&mut self, info: &OwnerInfo) -> std::io::Result<()> {
        let body = serde_json::to_vec(info).map_err(std::io::Error::other)?;
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&body)?;
        self.file.flush()
    }
}

/// Who holds (or last held) the lock of a database, as the file says.
pub fn read_info(lock: &Path) -> Option<OwnerInfo> {
    std::fs::read(lock).ok().and_then(|b| serde_json::from_slice(&b).ok())
}

/// The socket a client connects to: the one the owner published in the lock file, else the one
/// this process would bind.
pub fn socket_to_reach(paths: &DbPaths) -> std::path::PathBuf {
    read_info(&paths.lock())
        .map(|o| std::path::PathBuf::from(o.socket))
        .filter(|p| p.is_absolute())
        .unwrap_or_else(|| paths.socket())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_the_lock_goes_with_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DbPaths::of(dir.path().to_str().unwrap());
        let mut first = OwnerLock::try_acquire(&paths).unwrap().expect("free");
        let info = OwnerInfo {
            pid: 42,
            purpose: "watch".into(),
            started_unix_ms: 1,
            socket: "s".into(),
            version: "v".into(),
        };
        first.publish(&info).unwrap();
        assert!(OwnerLock::try_acquire(&paths).unwrap().is_none(), "taken");
        assert_eq!(read_info(&paths.lock()), Some(info));
        let waiter = std::thread::spawn({
            let paths = paths.clone();
            move || OwnerLock::acquire(&paths).map(|_| ())
        });
        drop(first);
        waiter.join().unwrap().unwrap();
    }
}
