//! The object store under a database on `s3://…`, for what cairn keeps beside LanceDB's tables
//! in the database's own prefix (`_cairn/`): the writer lease ([`crate::replication::lease`]) and the changes
//! the writer commits, which readers on other machines follow ([`crate::replication::journal`]).

use object_store::ObjectStore;
use object_store::path::Path as StorePath;
use std::sync::Arc;

/// How long the lease, the journal and the event shipments wait on the store: what cairn sets
/// for LanceDB too (`index/src/store`), so a store that is down is an error in seconds, where
/// `object_store`'s own defaults retry for 3 minutes (a lease renewal stuck that long outlives
/// the lease). `[storage]`'s `connect_timeout`/`timeout` (LanceDB's names) still win, and
/// `client_max_retries`/`client_retry_timeout` are read here as LanceDB reads them.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
const MAX_RETRIES: usize = 2;
const RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The retries `options` ask for, else cairn's.
fn retries(options: &cairn_index::StorageOptions) -> object_store::RetryConfig {
    let get = |k: &str| options.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(k)).map(|(_, v)| v.trim());
    object_store::RetryConfig {
        max_retries: get("client_max_retries").and_then(|v| v.parse().ok()).unwrap_or(MAX_RETRIES),
        retry_timeout: get("client_retry_timeout")
            .and_then(|v| v.trim_end_matches('s').parse().ok())
            .map_or(RETRY_TIMEOUT, std::time::Duration::from_secs),
        ..object_store::RetryConfig::default()
    }
}

/// A database's prefix in its store.
#[derive(Clone)]
pub struct Remote {
    pub store: Arc<dyn ObjectStore>,
    /// The database's URI, normalised (for messages).
    pub uri: String,
    prefix: String,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("uri", &self.uri).finish()
    }
}

impl Remote {
    /// The store of the database at `uri`, reached with the environment's settings and `options`
    /// (LanceDB's option names; those `object_store` does not know are LanceDB's own and left
    /// out). `None` for a local database.
    pub fn of(uri: &str, options: &cairn_index::StorageOptions) -> Result<Option<Self>, String> {
        let uri = cairn_index::store::normalize_uri(uri);
        let Some((scheme, rest)) = uri.split_once("://") else { return Ok(None) };
        if scheme != "s3" {
            return Err(format!(
                "{uri}: `{scheme}://` databases have no writer lease in this build (s3:// has); serve them from one machine"
            ));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_retry(retries(options));
        // Set on the client options the environment gave (`AWS_ALLOW_HTTP`…), under `options`.
        for (k, v) in [("connect_timeout", CONNECT_TIMEOUT), ("timeout", REQUEST_TIMEOUT)] {
            if let Ok(key) = k.parse::<object_store::aws::AmazonS3ConfigKey>() {
                builder = builder.with_config(key, format!("{}s", v.as_secs()));
            }
        }
        for (k, v) in &options.0 {
            if let Ok(key) = k.to_ascii_lowercase().parse::<object_store::aws::AmazonS3ConfigKey>() {
                builder = builder.with_config(key, v);
            }
        }
        let store = builder.build().map_err(|e| format!("{uri}: {e}"))?;
        Ok(Some(Self { store: Arc::new(store), uri: uri.clone(), prefix: prefix.to_string() }))
    }

    /// A store in memory, for tests of what goes through it.
    #[cfg(test)]
    pub fn in_memory() -> Self {
        Self::with_store(Arc::new(object_store::memory::InMemory::new()))
    }

    /// `store` as a database's, for tests (a store that fails on cue).
    #[cfg(test)]
    pub fn with_store(store: Arc<dyn ObjectStore>) -> Self {
        Self { store, uri: "memory://db".into(), prefix: "db".into() }
    }

    /// The path of `rel` under the database's prefix (its tables are `<name>.lance/…` there).
    pub fn root_path(&self, rel: &str) -> StorePath {
        if self.prefix.is_empty() {
            StorePath::from(rel)
        } else {
            StorePath::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// The path of `rel` under the database's `_cairn/` folder.
    pub fn path(&self, rel: &str) -> StorePath {
        if self.prefix.is_empty() {
            StorePath::from(format!("_cairn/{rel}"))
        } else {
            StorePath::from(format!("{}/_cairn/{rel}", self.prefix))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::ObjectStoreExt;

    #[tokio::test]
    async fn a_store_that_keeps_failing_is_asked_three_times_not_eleven() {
        // A store that answers every request 503: object_store's own defaults retry it 10 times,
        // backing off to 15 s between tries, for up to 3 minutes.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = asked.clone();
        std::thread::spawn(move || {
            use std::io::{BufRead, Write};
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                // One request per connection: its head, then the answer, then the connection closes.
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    line.clear();
                }
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = conn.write_all(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        let options = cairn_index::StorageOptions(
            [
                ("endpoint", format!("http://127.0.0.1:{port}")),
                ("allow_http", "true".into()),
                ("region", "us-east-1".into()),
                ("access_key_id", "k".into()),
                ("secret_access_key", "s".into()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        );
        let remote = Remote::of("s3://bkt/db", &options).unwrap().unwrap();
        assert!(remote.store.get(&remote.path("head.json")).await.is_err());
        assert_eq!(
            asked.load(std::sync::atomic::Ordering::SeqCst),
            1 + MAX_RETRIES,
            "one try and its retries"
        );
        let asked = cairn_index::StorageOptions(
            [
                ("client_max_retries".to_string(), "5".to_string()),
                ("client_retry_timeout".into(), "7".into()),
            ]
            .into_iter()
            .collect(),
        );
        let r = retries(&asked);
        assert_eq!((r.max_retries, r.retry_timeout), (5, std::time::Duration::from_secs(7)));
    }
}
