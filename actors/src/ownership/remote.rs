//! The object store under a database on `s3://…`, for what cairn keeps beside LanceDB's tables
//! in the database's own prefix (`_cairn/`): the writer lease ([`crate::ownership::lease`]) and the changes
//! the writer commits, which readers on other machines follow ([`crate::ownership::journal`]).

use object_store::ObjectStore;
use object_store::path::Path as StorePath;
use std::sync::Arc;

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
        let mut builder = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
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
        let store = Arc::new(object_store::memory::InMemory::new());
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
