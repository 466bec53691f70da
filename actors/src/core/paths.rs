//! Where a database's own files live besides its tables: the owner lock, the socket, the event
//! log and the state (pages remembered as failed). A local database keeps them in its folder; a
//! database on an object store (`s3://…`) keeps them in a local folder named after its URI,
//! under the user's state directory, so the lock, the log, `stats` and `diagnose` work for it
//! too (they describe this machine's processes, not the bucket).

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The longest Unix socket path the kernel accepts is 107 bytes; past this one goes elsewhere.
const MAX_SOCKET_PATH: usize = 100;

/// The local files of one database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbPaths {
    dir: PathBuf,
}

fn digest(s: &str) -> String {
    Sha256::digest(s.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect()
}

impl DbPaths {
    pub fn of(db_uri: &str) -> Self {
        if !db_uri.contains("://") {
            return Self { dir: PathBuf::from(db_uri) };
        }
        let base = dirs::state_dir().or_else(dirs::data_local_dir).unwrap_or_else(std::env::temp_dir);
        Self::remote_under(&base, db_uri)
    }

    /// The local files of remote database `db_uri` for a user whose state directory is `base`.
    pub fn remote_under(base: &Path, db_uri: &str) -> Self {
        let db_uri = &cairn_index::store::normalize_uri(db_uri);
        let readable: String = db_uri
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' })
            .take(60)
            .collect();
        Self { dir: base.join("cairn").join("remote").join(format!("{readable}-{}", digest(db_uri))) }
    }

    /// The folder holding everything below.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn events(&self) -> PathBuf {
        self.dir.join("events")
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// The owner lock: held (an OS file lock) for the life of the process that owns the database.
    pub fn lock(&self) -> PathBuf {
        self.dir.join("cairn.lock")
    }

    /// Where the owner binds its socket, in a folder only its user can enter: under
    /// `$XDG_RUNTIME_DIR` where there is one (private to the user by definition, and on a file
    /// system that holds sockets), else beside the database, else — a database folder too deep
    /// for a socket path — under the temporary directory. Clients reach the socket the owner
    /// published in the lock ([`crate::roles::lock::socket_to_reach`]), so a client with another
    /// environment still finds it.
    pub fn socket(&self) -> PathBuf {
        self.socket_in(std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|d| d.is_absolute()))
    }

    /// [`DbPaths::socket`] with `runtime` as the runtime directory.
    pub fn socket_in(&self, runtime: Option<PathBuf>) -> PathBuf {
        let key = || {
            let dir = std::fs::canonicalize(&self.dir).unwrap_or_else(|_| self.dir.clone());
            format!("cairn-{}", digest(&dir.display().to_string()))
        };
        if let Some(runtime) = runtime {
            return runtime.join("cairn").join(key()).join("cairn.sock");
        }
        let near = self.dir.join("run").join("cairn.sock");
        if near.as_os_str().len() <= MAX_SOCKET_PATH {
            return near;
        }
        std::env::temp_dir().join(key()).join("cairn.sock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_databases_keep_their_files_and_remote_ones_get_a_folder_of_their_own() {
        let local = DbPaths::of("/data/db");
        assert_eq!(local.lock(), Path::new("/data/db/cairn.lock"));
        assert_eq!(local.socket_in(None), Path::new("/data/db/run/cairn.sock"));
        let run = local.socket_in(Some("/run/user/7".into()));
        assert!(
            run.to_string_lossy().starts_with("/run/user/7/cairn/cairn-") && run.ends_with("cairn.sock"),
            "{}",
            run.display()
        );
        let a = DbPaths::of("s3://bucket/a");
        let b = DbPaths::of("s3://bucket/b");
        assert_ne!(a.dir(), b.dir());
        assert!(a.dir().to_string_lossy().contains("s3___bucket_a"), "{}", a.dir().display());
        // One database however it is spelled: one lock, one socket, one state folder.
        assert_eq!(DbPaths::of("s3://bucket/a/"), a);
        assert_eq!(DbPaths::of("S3://bucket//a"), a);
        let deep = DbPaths::of(&format!("/tmp/{}", "d".repeat(150)));
        assert!(deep.socket_in(None).as_os_str().len() <= MAX_SOCKET_PATH + 40);
        assert!(deep.socket_in(None).starts_with(std::env::temp_dir()));
    }
}
