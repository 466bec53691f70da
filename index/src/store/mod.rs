//! Per-source LanceDB storage: each source has its own tables (`<id>_pages`, `<id>_chunks`,
//! `<id>_manifest`), so a bulk source can neither fill another's candidate pool nor slow its
//! writes. Writes are batched and idempotent ([`write`]); reads are whole-source loads for the
//! resident index and point reads ([`read`]); Arrow conversion is in [`arrow`].
//!
//! Consistency: the connection uses `read_consistency_interval = 0`, so every read first checks
//! for a newer table version and sees every committed write. Within a source, a commit writes
//! the chunk rows, then the page rows; each chunk row carries its page's content hash, so a crash
//! between the two is found by the next [`SourceStore::load`] and the page is redone.

mod arrow;
mod fence;
mod health;
mod read;
mod records;
mod write;

pub use fence::{FENCE_KEY, fenced};
pub use health::{TABLE_SUFFIXES, TableHealth, TableProblem};
pub use read::{LoadedPage, VectorKey};
pub use records::{
    ChunkHit, Json, Loaded, PageNames, PageRecord, PageState, PageWrite, StoredChunk, WriteBatch,
};
pub use write::{FRAGMENT_ROWS, KEY_INDEXES, PruneStats};

use crate::error::{Error, Result};
use crate::schema;
use arrow_array::{Array, Int32Array, RecordBatch, RecordBatchIterator, StringArray};
use arrow_schema::SchemaRef;
use cairn_ingest::CHUNKER_VERSION;
use futures::TryStreamExt;
use lancedb::query::{ExecutableQuery, QueryBase};
use lancedb::{Connection, Table};
use std::sync::Arc;
use std::time::Duration;

/// How a source's tables were built; a mismatch with the running build means a rebuild.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Manifest {
    pub schema_version: i32,
    pub chunker_version: i32,
    pub model_id: String,
    pub dim: usize,
}

impl Manifest {
    /// The manifest of this build with this model.
    pub fn current(model_id: &str, dim: usize) -> Self {
        Self {
            schema_version: schema::SCHEMA_VERSION,
            chunker_version: CHUNKER_VERSION as i32,
            model_id: model_id.into(),
            dim,
        }
    }
}

/// Where a source's folder is, as the database records it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SourceInfo {
    pub id: String,
    /// The folder (absent for a source written before folders were recorded).
    pub root: Option<String>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
}

/// A database: a local folder or an object-store URI (`s3://…`, passed to LanceDB unchanged).
#[derive(Clone)]
pub struct Database {
    conn: Connection,
    uri: String,
    caches: Arc<lancedb::Session>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("uri", &self.uri).finish()
    }
}

/// Whether a database URI is a local folder.
pub fn is_local(uri: &str) -> bool {
    !uri.contains("://")
}

/// One spelling per database: an object-store URI without trailing or doubled slashes in its
/// path (`s3://bkt/db/` and `s3://bkt//db` are `s3://bkt/db`), so one database has one lock, one
/// lease and one local state folder however it is written. A local folder is left as given (the
/// operating system already knows `db` and `db/` as one folder).
pub fn normalize_uri(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else { return uri.to_string() };
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
    format!("{}://{}", scheme.to_ascii_lowercase(), parts.join("/"))
}

/// What every error of a source that will not open ends with: the command that finds the damage
/// and the one that repairs it.
pub const DOCTOR_HINT: &str = "`cairn doctor` says what is damaged and `cairn doctor --repair` repairs it";

/// What an error of a store that did not answer ends with instead: nothing is damaged by it.
pub const UNREACHABLE_HINT: &str =
    "the store did not answer (nothing in it is damaged by that); cairn tries again on its own";

/// Whether an error is a store that did not answer (a timeout, a refused or dropped connection,
/// a 5xx, 408 or 429 after object_store's retries) rather than one that answered with damage (a
/// missing file, a manifest that does not parse). Read from object_store's message, the one
/// thing LanceDB's errors keep of it: `Error performing GET … - HTTP error: …` or `… - Server
/// returned non-2xx status code: 503 …`.
pub fn unreachable(message: &str) -> bool {
    let Some((_, why)) = message.split_once("Error performing ") else { return false };
    let Some((_, why)) = why.split_once(" - ") else { return false };
    if why.starts_with("HTTP error") {
        return true;
    }
    let status = why
        .strip_prefix("Server returned non-2xx status code: ")
        .or_else(|| why.strip_prefix("Server returned error response: "))
        .and_then(|rest| rest.get(..3)?.parse::<u16>().ok());
    matches!(status, Some(408 | 429 | 500..=599))
}

/// `why` a source does not open, ending (once) with what to do: wait for a store that did not
/// answer, or find and repair the damage.
pub fn with_hint(why: &str) -> String {
    let hint = if unreachable(why) { UNREACHABLE_HINT } else { DOCTOR_HINT };
    if why.contains(hint) { why.to_string() } else { format!("{why}; {hint}") }
}

/// Object-store options cairn sets unless the caller or the environment does: a store that is
/// down, missing or refusing us is an error within seconds, not a retry loop of minutes
/// (object_store's own default retries for up to 180 s).
const STORE_DEFAULTS: [(&str, &str); 4] = [
    ("client_max_retries", "2"),
    ("client_retry_timeout", "20"),
    ("connect_timeout", "5s"),
    ("timeout", "30s"),
];

/// Options for an object store (`[storage]` in cairn.toml): endpoint, region, `allow_http`,
/// credentials, timeouts, with LanceDB's key names. Never printed: its `Debug` shows the keys
/// only.
#[derive(Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct StorageOptions(pub std::collections::BTreeMap<String, String>);

impl std::fmt::Debug for StorageOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.0.keys()).finish()
    }
}

impl StorageOptions {
    /// These options with cairn's defaults under them (for keys neither they nor the
    /// environment's `OBJECT_STORE_*` set).
    fn with_defaults(&self) -> Vec<(String, String)> {
        let env_sets =
            |k: &str| std::env::var_os(format!("OBJECT_STORE_{}", k.to_ascii_uppercase())).is_some();
        let mut out: Vec<(String, String)> = self.0.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (k, v) in STORE_DEFAULTS {
            if !self.0.keys().any(|x| x.eq_ignore_ascii_case(k)) && !env_sets(k) {
                out.push((k.into(), v.into()));
            }
        }
        out
    }
}

/// LanceDB's caches, capped. Its defaults (6 GiB of index pages, 1 GiB of metadata) suit a
/// process whose queries LanceDB answers; cairn's are answered by the resident index, and
/// LanceDB is read by commits (the key indexes), loads and vector re-scores. Every upkeep
/// builds the key indexes anew under new names and every commit makes a manifest, which an
/// uncapped cache keeps: with these caps the owner indexing GCIDE held 1.85 GiB once every page
/// was searchable, against 2.05 uncapped (what it holds at the last vector, ~2.1 GiB either
/// way, is not these caches).
const INDEX_CACHE_BYTES: usize = 256 << 20;
const METADATA_CACHE_BYTES: usize = 128 << 20;

impl Database {
    /// Open with strong read consistency: every read sees every commit made before it, by
    /// this process or another. An object store is reached with the environment's settings
    /// (`AWS_ENDPOINT`, `AWS_REGION`, credentials…) and cairn's timeouts.
    pub async fn open(uri: &str) -> Result<Self> {
        Self::open_with(uri, &StorageOptions::default(), Some(Duration::ZERO)).await
    }

    /// Open with reads that check for newer commits at most every `interval` (`None`: never;
    /// the benchmarks use it to measure what strong consistency costs a read).
    pub async fn open_with_consistency(uri: &str, interval: Option<Duration>) -> Result<Self> {
        Self::open_with(uri, &StorageOptions::default(), interval).await
    }

    /// Open for a writer under a lease (on an object store): reads never look for versions
    /// another process made, so every commit is read at this process's own last version, and
    /// another writer's fence refuses it ([`SourceStore::fence`]).
    pub async fn open_pinned(uri: &str, options: &StorageOptions) -> Result<Self> {
        Self::open_with(uri, options, None).await
    }

    /// Open with object-store `options` (ignored for a local folder). The store is reached once
    /// here, so a bucket that is missing, unreachable or refuses the credentials is an error
    /// naming the URI now, not at the first write.
    pub async fn open_with(uri: &str, options: &StorageOptions, interval: Option<Duration>) -> Result<Self> {
        let err = |message: String| Error::Storage { source_id: "*".into(), uri: uri.into(), message };
        // A local folder is given to LanceDB as an absolute path: a relative one named `db…`
        // would be taken for a LanceDB Cloud URI.
        let uri = &normalize_uri(uri);
        let local = is_local(uri);
        let target = if local {
            std::fs::create_dir_all(uri)
                .map_err(|e| err(format!("cannot create the database folder: {e}")))?;
            std::fs::canonicalize(uri).map_err(|e| err(e.to_string()))?.display().to_string()
        } else {
            uri.to_string()
        };
        let caches = Arc::new(lancedb::Session::new(
            INDEX_CACHE_BYTES,
            METADATA_CACHE_BYTES,
            Arc::new(lancedb::ObjectStoreRegistry::default()),
        ));
        let mut builder = lancedb::connect(&target).session(caches.clone());
        if !local {
            builder = builder.storage_options(options.with_defaults());
        }
        if let Some(d) = interval {
            builder = builder.read_consistency_interval(d);
        }
        let unreachable = |e: lancedb::Error| {
            if local {
                return err(e.to_string());
            }
            err(format!(
                "cannot read the object store. Check that the bucket exists, that the endpoint answers and that it accepts the credentials (the AWS_* environment variables, or [storage] in cairn.toml). The store said: {e}"
            ))
        };
        let conn = builder.execute().await.map_err(unreachable)?;
        let db = Self { conn, uri: uri.into(), caches };
        if !local {
            db.conn.table_names().execute().await.map_err(unreachable)?;
        }
        Ok(db)
    }

    /// What LanceDB's caches hold now (index pages and metadata, within their caps), in MiB:
    /// part of the process's memory that the resident index's estimate does not count. Both,
    /// then the metadata's part.
    pub async fn cache_mib(&self) -> (f64, f64) {
        let (index, metadata) =
            (self.caches.index_cache_stats().await, self.caches.metadata_cache_stats().await);
        let mib = |b: usize| b as f64 / 1048576.0;
        (mib(index.size_bytes + metadata.size_bytes), mib(metadata.size_bytes))
    }

    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// Ids of the sources that have tables here.
    pub async fn source_ids(&self) -> Result<Vec<String>> {
        let names = self.conn.table_names().execute().await.map_err(|e| self.err("*", e))?;
        let mut ids: Vec<String> =
            names.iter().filter_map(|n| n.strip_suffix("_manifest").map(str::to_string)).collect();
        ids.sort();
        Ok(ids)
    }

    /// Every source with its recorded folder (sources whose manifest cannot be read are listed
    /// with no folder).
    pub async fn sources(&self) -> Result<Vec<SourceInfo>> {
        let mut out = Vec::new();
        for id in self.source_ids().await? {
            let info = match self.open_tables(&id, 0).await {
                Ok(store) => store.read_manifest().await.ok().flatten().map(|(_, info)| info),
                Err(_) => None,
            };
            out.push(info.unwrap_or(SourceInfo { id, ..SourceInfo::default() }));
        }
        Ok(out)
    }

    fn err(&self, source_id: &str, e: impl std::fmt::Display) -> Error {
        Error::Storage { source_id: source_id.into(), uri: self.uri.clone(), message: e.to_string() }
    }

    /// Open a source's tables, creating them when the source is new. Tables built by another
    /// schema, chunker or model are refused with [`Error::ManifestMismatch`]: the caller
    /// rebuilds ([`Database::rebuild_source`]) instead of mixing vectors.
    pub async fn open_source(&self, id: &str, want: &Manifest) -> Result<SourceStore> {
        let names = self.conn.table_names().execute().await.map_err(|e| self.err(id, e))?;
        if !names.iter().any(|n| *n == format!("{id}_manifest")) {
            // New, or a creation that never finished: (re)create.
            return self
                .rebuild_source(id, want, &SourceInfo { id: id.into(), ..SourceInfo::default() })
                .await;
        }
        let store = self.open_tables(id, want.dim).await?;
        let found = store.read_manifest().await?;
        if found.as_ref().map(|(m, _)| m) != Some(want) {
            return Err(Error::ManifestMismatch {
                source_id: id.into(),
                found: found.map_or_else(|| "nothing".into(), |(m, _)| format!("{m:?}")),
                want: format!("{want:?}"),
            });
        }
        Ok(store)
    }

    /// Open a source as it is, whatever built it (for reading pages back, not for writing
    /// vectors). Unknown sources are an error that lists the known ones.
    pub async fn open_existing(&self, id: &str) -> Result<SourceStore> {
        let known = self.source_ids().await?;
        if !known.iter().any(|k| k == id) {
            return Err(self.err(
                id,
                format!(
                    "no such source here; known sources: {}",
                    if known.is_empty() { "none".to_string() } else { known.join(", ") }
                ),
            ));
        }
        let probe = self.open_tables(id, 0).await?;
        let dim = probe.read_manifest().await?.map_or(0, |(m, _)| m.dim);
        Ok(SourceStore { dim, ..probe })
    }

    /// Drop a source's tables (`cairn forget`, and the first step of a rebuild).
    pub async fn drop_source(&self, id: &str) -> Result<()> {
        for suffix in ["manifest", "chunks", "pages"] {
            let name = format!("{id}_{suffix}");
            if let Err(e) = self.conn.drop_table(&name, &[]).await
                && !matches!(e, lancedb::Error::TableNotFound { .. })
            {
                return Err(self.err(id, format!("dropping {name}: {e}")));
            }
        }
        Ok(())
    }

    /// Drop and recreate a source's tables (empty). The manifest is written last, so a crash
    /// in between leaves a source that is rebuilt again on the next open.
    pub async fn rebuild_source(
        &self,
        id: &str,
        manifest: &Manifest,
        info: &SourceInfo,
    ) -> Result<SourceStore> {
        self.drop_source(id).await?;
        let create = |name: String, schema: SchemaRef| {
            let conn = self.conn.clone();
            async move { conn.create_empty_table(name, schema).execute().await }
        };
        create(format!("{id}_pages"), schema::pages()).await.map_err(|e| self.err(id, e))?;
        create(format!("{id}_chunks"), schema::chunks(manifest.dim)).await.map_err(|e| self.err(id, e))?;
        let m = create(format!("{id}_manifest"), schema::manifest()).await.map_err(|e| self.err(id, e))?;
        m.add(manifest_row(manifest, info).map_err(|e| self.err(id, e))?)
            .execute()
            .await
            .map_err(|e| self.err(id, e))?;
        self.open_tables(id, manifest.dim).await
    }

    async fn open_tables(&self, id: &str, dim: usize) -> Result<SourceStore> {
        // LanceDB panics on some torn manifests: that is this source's damage, not the process's.
        let open = |suffix: &str| {
            let (conn, name) = (self.conn.clone(), format!("{id}_{suffix}"));
            async move {
                crate::fault::contained_async(conn.open_table(name).execute()).await.unwrap_or_else(|panic| {
                    Err(lancedb::Error::Runtime {
                        message: format!("reading its manifest panicked: {panic}"),
                    })
                })
            }
        };
        let path_hint =
            if is_local(&self.uri) { format!("{}/{id}_*.lance", self.uri) } else { self.uri.clone() };
        let wrap = |e: lancedb::Error| Error::Storage {
            source_id: id.into(),
            uri: path_hint.clone(),
            message: with_hint(&e.to_string()),
        };
        Ok(SourceStore {
            id: id.into(),
            uri: self.uri.clone(),
            caches: self.caches.clone(),
            dim,
            pages: open("pages").await.map_err(wrap)?,
            chunks: open("chunks").await.map_err(wrap)?,
            manifest: open("manifest").await.map_err(wrap)?,
        })
    }
}

fn manifest_row(
    m: &Manifest,
    info: &SourceInfo,
) -> std::result::Result<RecordBatch, arrow_schema::ArrowError> {
    let json = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_else(|_| "[]".into());
    RecordBatch::try_new(
        schema::manifest(),
        vec![
            Arc::new(StringArray::from(vec!["source"])),
            Arc::new(Int32Array::from(vec![m.schema_version])),
            Arc::new(Int32Array::from(vec![m.chunker_version])),
            Arc::new(StringArray::from(vec![m.model_id.as_str()])),
            Arc::new(Int32Array::from(vec![m.dim as i32])),
            Arc::new(StringArray::from(vec![info.root.clone()])),
            Arc::new(StringArray::from(vec![json(&info.include)])),
            Arc::new(StringArray::from(vec![json(&info.exclude)])),
        ],
    )
}

/// One source's tables.
#[derive(Clone)]
pub struct SourceStore {
    id: String,
    uri: String,
    /// The database's caches (shared by its sources).
    caches: Arc<lancedb::Session>,
    dim: usize,
    pages: Table,
    chunks: Table,
    manifest: Table,
}

impl std::fmt::Debug for SourceStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SourceStore").field("id", &self.id).field("uri", &self.uri).finish()
    }
}

/// A SQL string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn in_list(column: &str, values: &[&str]) -> String {
    format!("{column} IN ({})", values.iter().map(|v| quote(v)).collect::<Vec<_>>().join(", "))
}

impl SourceStore {
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The vectors' width.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Give back LanceDB's metadata cache (every source's: the database shares it). An owner that
    /// goes idle has no use for the manifests and file footers its commits and upkeep read, many
    /// of them of versions its upkeep has since removed; the next read loads what it needs again.
    /// (LanceDB's index cache can only be capped, not cleared.)
    pub async fn release_metadata_cache(&self) {
        self.caches.file_metadata_cache().clear().await;
    }

    /// An error of this source's tables: [`Error::Fenced`] when a commit was refused because
    /// another writer fenced them ([`SourceStore::fence`]), else a storage error.
    fn err(&self, e: impl std::fmt::Display) -> Error {
        let (source_id, uri, message) = (self.id.clone(), self.uri.clone(), e.to_string());
        if fenced(&message) {
            return Error::Fenced { source_id, uri, message };
        }
        Error::Storage { source_id, uri, message }
    }

    async fn collect(
        &self,
        stream: lancedb::Result<lancedb::arrow::SendableRecordBatchStream>,
    ) -> Result<Vec<RecordBatch>> {
        stream.map_err(|e| self.err(e))?.try_collect::<Vec<_>>().await.map_err(|e| self.err(e))
    }

    async fn read_manifest(&self) -> Result<Option<(Manifest, SourceInfo)>> {
        use self::arrow::{int32, string};
        let batches = self.collect(self.manifest.query().limit(1).execute().await).await?;
        let Some(b) = batches.iter().find(|b| b.num_rows() > 0) else { return Ok(None) };
        let globs = |name: &str| -> Result<Vec<String>> {
            Ok(string(b, name).ok().and_then(|c| serde_json::from_str(c.value(0)).ok()).unwrap_or_default())
        };
        let root = string(b, "root").ok().filter(|c| !c.is_null(0)).map(|c| c.value(0).to_string());
        Ok(Some((
            Manifest {
                schema_version: int32(b, "schema_version")?.value(0),
                chunker_version: int32(b, "chunker_version")?.value(0),
                model_id: string(b, "model_id")?.value(0).to_string(),
                dim: int32(b, "dim")?.value(0) as usize,
            },
            SourceInfo { id: self.id.clone(), root, include: globs("include")?, exclude: globs("exclude")? },
        )))
    }

    /// Where the database records this source's folder.
    pub async fn info(&self) -> Result<SourceInfo> {
        Ok(self
            .read_manifest()
            .await?
            .map(|(_, i)| i)
            .unwrap_or(SourceInfo { id: self.id.clone(), ..Default::default() }))
    }

    /// Record where this source's folder is (one commit that replaces the manifest row; a
    /// no-op when it is already recorded so).
    pub async fn register(&self, info: &SourceInfo) -> Result<()> {
        let Some((manifest, current)) = self.read_manifest().await? else {
            return Err(self.err("the source has no manifest row"));
        };
        let info = SourceInfo { id: self.id.clone(), ..info.clone() };
        if current == info {
            return Ok(());
        }
        let row = manifest_row(&manifest, &info).map_err(|e| self.err(e))?;
        self.upsert(&self.manifest, "key", row).await
    }

    /// One commit that writes `rows` into `table` by `key`: rows whose key is there replace
    /// theirs, the others are added (with an index on `key`, LanceDB finds them through it).
    async fn upsert(&self, table: &Table, key: &str, rows: RecordBatch) -> Result<()> {
        let mut m = table.merge_insert(&[key]);
        m.when_matched_update_all(None).when_not_matched_insert_all();
        let schema = rows.schema();
        m.execute(Box::new(RecordBatchIterator::new(vec![Ok(rows)], schema)))
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages as object_store 0.13 writes them (through LanceDB's wrapping).
    fn request(failure: &str) -> String {
        format!(
            "lance error: LanceError(IO): Generic S3 error: Error performing GET http://127.0.0.1:9/b/t.lance/\
             _versions/1.manifest in 234ms, after 2 retries, max_retries: 2, retry_timeout: 20s  - {failure}, \
             lance-io/src/object_store.rs:182:69"
        )
    }

    #[test]
    fn a_store_that_does_not_answer_is_told_from_one_that_answers_with_damage() {
        for gone in [
            "HTTP error: error sending request",
            "HTTP error: operation timed out",
            "Server returned non-2xx status code: 500 Internal Server Error: ",
            "Server returned non-2xx status code: 503 Service Unavailable: slow down",
            "Server returned non-2xx status code: 429 Too Many Requests: ",
        ] {
            let e = request(gone);
            assert!(unreachable(&e), "{gone}");
            assert!(with_hint(&e).ends_with(UNREACHABLE_HINT));
        }
        for damaged in [
            "Server returned non-2xx status code: 404 Not Found: ",
            "Server returned non-2xx status code: 403 Forbidden: ",
        ] {
            let e = request(damaged);
            assert!(!unreachable(&e), "{damaged}");
            assert!(with_hint(&e).ends_with(DOCTOR_HINT));
        }
        let torn = "lance error: Invalid manifest: the file ends before its footer";
        assert!(!unreachable(torn));
        assert_eq!(with_hint(&with_hint(torn)), with_hint(torn), "the hint is said once");
    }
}
