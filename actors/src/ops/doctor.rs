//! `cairn doctor [--repair]`: verify every source of a database, local or on S3, and repair what
//! is damaged, least loss first.
//!
//! What it verifies, per source: each table opens at its latest version and every row of it
//! reads (so every data file its manifest names is there and whole); pages and chunks agree; the
//! snapshot (and the chunk file it names) reads back and matches the tables. Beside the sources:
//! the state files and the event log parse; on an object store, the lease and the journal's head.
//!
//! What `--repair` does, least loss first:
//! 1. a latest manifest that is torn (empty, or cut before Lance's closing magic) is set aside
//!    into `_cairn/damaged/`, so the table opens at the version before it;
//! 2. a table whose rows do not all read is restored to its newest version that does (Lance keeps
//!    versions until the upkeep prunes them); the pages committed since are redone from the folder
//!    by the next open, as after a crash between a commit's writes;
//! 3. a torn snapshot or chunk file is removed (the next open loads the tables and writes them
//!    again); a state file that does not parse is set aside; an event log's torn lines are moved
//!    out to `torn-lines.txt` beside it;
//! 4. a source with no version that reads is rebuilt from its folder (the caller does it, through
//!    `reindex`), and only when the folder is there and passes the guard.
//!
//! Repairs need the database to themselves: the caller holds its lock (and, on an object store,
//! finds the writer lease free), so no writer commits while a table is restored.

use crate::core::config::Config;
use crate::core::history::log_files;
use crate::replication::remote::Remote;
use cairn_index::store::{TABLE_SUFFIXES, TableHealth, TableProblem};
use cairn_index::{Database, ResidentIndex, SourceInfo, SourceStore};
use futures::TryStreamExt;
use object_store::path::Path as StorePath;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A repair loop's bound: manifests set aside, or versions restored, per table.
const MAX_STEPS: usize = 16;

/// What `cairn doctor` found (and, with `--repair`, did).
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub db: String,
    pub sources: Vec<SourceHealth>,
    pub findings: Vec<Finding>,
    /// Sources whose rows only their folder can give back (`reindex`), with the folder.
    pub rebuild: Vec<SourceInfo>,
    pub took_ms: u64,
}

impl Report {
    /// Nothing is damaged (notices aside), or everything damaged was repaired.
    pub fn healthy(&self) -> bool {
        self.findings.iter().all(|f| !f.damage || f.repaired.is_some())
    }
}

/// One source's tables as read.
#[derive(Debug, Default, Serialize)]
pub struct SourceHealth {
    pub source: String,
    pub tables: Vec<TableHealth>,
    pub pages: Option<usize>,
    pub chunks: Option<usize>,
    /// Chunks with text and no vector yet: queued for the embedder by the next open.
    pub vectors_pending: Option<usize>,
    /// `current`, `stale` (the next open loads the tables), `none` or `damaged`.
    pub snapshot: &'static str,
}

/// Something wrong, what `--repair` does about it, and (after it) what it did.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// What it is about: `source v: table v_chunks`, a file's path.
    pub subject: String,
    pub problem: String,
    /// Damage (exit 1 until repaired), or a notice that the next open takes care of.
    pub damage: bool,
    /// What `--repair` does; `None`: nothing to do, or nothing it can do (`problem` says what to).
    pub repair: Option<String>,
    pub repaired: Option<String>,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = if self.damage { "damaged" } else { "notice" };
        write!(f, "{kind}: {}: {}", self.subject, self.problem)?;
        match (&self.repaired, &self.repair) {
            (Some(done), _) => write!(f, "\n  repaired: {done}"),
            (None, Some(plan)) => write!(f, "\n  --repair: {plan}"),
            (None, None) => Ok(()),
        }
    }
}

/// The database's objects under its root: a local folder or an object-store prefix.
struct Objects {
    store: Arc<dyn ObjectStore>,
    root: Box<dyn Fn(&str) -> StorePath + Send + Sync>,
    /// The object store's, for its lease and journal (`None`: a local folder).
    remote: Option<Remote>,
}

impl Objects {
    fn of(config: &Config) -> Result<Self, String> {
        if let Some(remote) = Remote::of(&config.db, &config.storage)? {
            let (store, at) = (remote.store.clone(), remote.clone());
            return Ok(Self { store, root: Box::new(move |rel| at.root_path(rel)), remote: Some(remote) });
        }
        let dir = std::fs::canonicalize(&config.db).map_err(|e| format!("{}: {e}", config.db))?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)
            .map_err(|e| format!("{}: {e}", config.db))?;
        Ok(Self { store: Arc::new(store), root: Box::new(|rel| StorePath::from(rel)), remote: None })
    }

    /// The newest manifest of `table` when it is evidently torn: empty, or not ending in Lance's
    /// magic. A manifest that looks whole is never set aside, whatever the open said (a store
    /// that failed for a moment must not cost a version).
    async fn torn_manifest(&self, table: &str) -> Option<StorePath> {
        let dir = (self.root)(&format!("{table}.lance/_versions"));
        let metas: Vec<object_store::ObjectMeta> = self.store.list(Some(&dir)).try_collect().await.ok()?;
        let newest = metas
            .into_iter()
            .filter_map(|m| {
                let n: u64 = m.location.filename()?.strip_suffix(".manifest")?.parse().ok()?;
                // Lance's second naming scheme counts down from u64::MAX.
                Some((if n > u64::MAX / 2 { u64::MAX - n } else { n }, m))
            })
            .max_by_key(|(v, _)| *v)?
            .1;
        let size = newest.size;
        if size >= 4 {
            let tail = self.store.get_range(&newest.location, size - 4..size).await.ok()?;
            if tail.as_ref() == b"LANC" {
                return None;
            }
        }
        Some(newest.location)
    }

    /// Move `path` to the same place under `_cairn/damaged/`.
    async fn set_aside(&self, path: &StorePath) -> Result<StorePath, String> {
        let rel = path.as_ref().rsplit_once(".lance/").map_or(path.as_ref(), |(_, r)| r);
        let table = path.parts().find_map(|p| p.as_ref().strip_suffix(".lance").map(str::to_string));
        let to = (self.root)(&format!("_cairn/damaged/{}.lance/{rel}", table.unwrap_or_default()));
        self.store.copy(path, &to).await.map_err(|e| e.to_string())?;
        self.store.delete(path).await.map_err(|e| e.to_string())?;
        Ok(to)
    }
}

/// Verify every source of the database `config` names; with `repair`, repair as the module says.
pub async fn examine(config: &Config, repair: bool) -> Result<Report, String> {
    let started = std::time::Instant::now();
    let db = config.database().await.map_err(|e| e.to_string())?;
    let objects = Objects::of(config)?;
    let mut report = Report { db: config.db.clone(), ..Report::default() };
    let ids = db.source_ids().await.map_err(|e| e.to_string())?;
    let snapshots = config.paths().dir().join("snapshots");
    for id in &ids {
        let mut health = SourceHealth { source: id.clone(), snapshot: "none", ..Default::default() };
        let mut state = Mend::Whole;
        for suffix in TABLE_SUFFIXES {
            let table = format!("{id}_{suffix}");
            let (h, s) = examine_table(&db, &objects, &table, id, repair, &mut report.findings).await;
            state = state.max(s);
            health.tables.push(h);
        }
        if state == Mend::Whole {
            match db.open_existing(id).await {
                Ok(store) => {
                    examine_rows(&store, &mut health, &mut report.findings).await;
                    let path = crate::engine::writer::snapshot_path(&snapshots, id);
                    health.snapshot =
                        examine_snapshot(&store, &path, config, repair, &mut report.findings).await;
                }
                Err(e) => report.findings.push(damage(
                    &format!("source {id}"),
                    format!("it does not open: {e}"),
                    None,
                )),
            }
        } else if state == Mend::Hopeless {
            let info = db.sources().await.ok().and_then(|s| s.into_iter().find(|s| &s.id == id));
            rebuild_or_say(config, id, info, &mut report);
        }
        report.sources.push(health);
    }
    examine_files(config, repair, &mut report.findings);
    if let Some(remote) = &objects.remote {
        examine_remote(remote, &ids, &mut report.findings).await;
    }
    report.took_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// Where a table stands: whole, damaged in a way `--repair` mends in place, or past that.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Mend {
    Whole,
    InPlace,
    Hopeless,
}

/// One table, repaired in steps while `repair` says so: its health as last read, and where it
/// stands.
async fn examine_table(
    db: &Database,
    objects: &Objects,
    table: &str,
    id: &str,
    repair: bool,
    findings: &mut Vec<Finding>,
) -> (TableHealth, Mend) {
    let subject = format!("source {id}: table {table}");
    let mut h = db.examine_table(table).await;
    for _ in 0..MAX_STEPS {
        let (problem, plan) = match &h.problem {
            None => return (h, Mend::Whole),
            Some(TableProblem::Unopenable(why)) => match objects.torn_manifest(table).await {
                Some(path) => (
                    format!("its latest manifest ({path}) is torn: {why}"),
                    "set the torn manifest aside (into _cairn/damaged/) and open the version before it",
                ),
                None => {
                    findings.push(damage(&subject, format!("does not open: {why}"), None));
                    return (h, Mend::Hopeless);
                }
            },
            Some(TableProblem::Unreadable(why)) => (
                format!("its rows do not all read (a data file is missing or torn): {why}"),
                "restore the newest version whose rows all read; pages committed since are redone from the folder",
            ),
        };
        let mut finding = damage(&subject, problem, Some(plan.into()));
        if !repair {
            findings.push(finding);
            return (h, Mend::InPlace);
        }
        let done = match &h.problem {
            Some(TableProblem::Unopenable(_)) => match objects.torn_manifest(table).await {
                Some(path) => objects.set_aside(&path).await.map(|to| format!("set {path} aside as {to}")),
                None => Err("the manifest is no longer there".into()),
            },
            _ => match db.restore_readable(table).await {
                Ok(Some(v)) => Ok(format!("restored version {v} as the latest")),
                Ok(None) => Err("no version of it reads whole".into()),
                Err(e) => Err(e.to_string()),
            },
        };
        match done {
            Ok(what) => finding.repaired = Some(what),
            Err(why) => {
                finding.problem = format!("{}; cannot repair it in place: {why}", finding.problem);
                finding.repair = None;
                findings.push(finding);
                return (h, Mend::Hopeless);
            }
        }
        findings.push(finding);
        h = db.examine_table(table).await;
    }
    let state = if h.is_whole() { Mend::Whole } else { Mend::Hopeless };
    (h, state)
}

fn damage(subject: &str, problem: String, repair: Option<String>) -> Finding {
    Finding { subject: subject.into(), problem, damage: true, repair, repaired: None }
}

fn notice(subject: &str, problem: String) -> Finding {
    Finding { subject: subject.into(), problem, damage: false, repair: None, repaired: None }
}

/// A source whose tables cannot be made whole in place: rebuilt from its folder when it is here
/// and can be read as the source's, else said what to do.
fn rebuild_or_say(config: &Config, id: &str, info: Option<SourceInfo>, report: &mut Report) {
    let subject = format!("source {id}");
    let book = crate::core::folders::FolderBook::read(&config.paths().state());
    let record = book.get(id);
    let root = record.as_ref().map(|r| r.root.clone()).or_else(|| {
        info.as_ref()
            .and_then(|i| i.root.clone())
            .filter(|_| cairn_index::store::is_local(&config.db))
            .map(PathBuf::from)
    });
    let Some(root) = root else {
        let problem = format!(
            "its tables cannot be repaired in place, and its folder was not given on this machine: run `cairn reindex --source {id}=DIR` with its folder"
        );
        report.findings.push(damage(&subject, problem, None));
        return;
    };
    let why =
        cairn_ingest::Glance::of(&root).unavailable(record.as_ref().and_then(|r| r.identity.as_ref()), 1);
    if let Some(why) = why {
        let problem = format!(
            "its tables cannot be repaired in place, and its folder cannot be read as the source's: {}; if that folder does hold the source's notes, `cairn reindex {id}` rebuilds it from there",
            why.describe(id, &root.display().to_string())
        );
        report.findings.push(damage(&subject, problem, None));
        return;
    }
    let plan = format!("rebuild its rows from its folder {} (as `cairn reindex {id}`)", root.display());
    report.findings.push(damage(&subject, "its tables cannot be repaired in place".into(), Some(plan)));
    let info = info.unwrap_or(SourceInfo { id: id.into(), ..Default::default() });
    report.rebuild.push(SourceInfo { root: Some(root.display().to_string()), ..info });
}

/// Pages against chunks, from one read of both tables.
async fn examine_rows(store: &SourceStore, health: &mut SourceHealth, findings: &mut Vec<Finding>) {
    let subject = format!("source {}", store.id());
    let loaded = match store.load().await {
        Ok(l) => l,
        Err(e) => {
            findings.push(damage(&subject, format!("its rows do not load: {e}"), None));
            return;
        }
    };
    let chunks = loaded.pages.iter().flat_map(|(_, c)| c);
    health.pages = Some(loaded.pages.len());
    health.chunks = Some(chunks.clone().count());
    health.vectors_pending = Some(chunks.filter(|c| c.vector.is_none()).count());
    if !loaded.inconsistent.is_empty() || !loaded.orphans.is_empty() {
        let problem = format!(
            "{} page(s) whose chunk rows disagree with their page row and {} orphan chunk row(s) (a crash between a commit's writes); the next open redoes them from the folder",
            loaded.inconsistent.len(),
            loaded.orphans.len()
        );
        findings.push(notice(&subject, problem));
    }
}

/// The snapshot (and its chunk file) against the tables: `current`, `stale`, `none` or `damaged`.
async fn examine_snapshot(
    store: &SourceStore,
    path: &Path,
    config: &Config,
    repair: bool,
    findings: &mut Vec<Finding>,
) -> &'static str {
    if !path.exists() {
        return "none";
    }
    let id = store.id();
    let stamp = store.stamp(config.exact_vectors_up_to).await.ok();
    let torn = match (ResidentIndex::stamp_of(path), stamp) {
        (None, _) => "its header does not read".to_string(),
        (Some(s), Some(t)) if s == t => match ResidentIndex::restore(path, &t) {
            Ok(_) => return "current",
            Err(e) => format!("it does not read back whole: {e}"),
        },
        _ => return "stale",
    };
    let mut f = damage(
        &path.display().to_string(),
        format!("the snapshot of source {id} is torn ({torn})"),
        Some("remove it and its chunk file; the next open loads the tables and writes them again".into()),
    );
    if repair {
        ResidentIndex::forget_snapshot(path);
        f.repaired = Some("removed".into());
    }
    findings.push(f);
    "damaged"
}

/// The state files and the event log.
fn examine_files(config: &Config, repair: bool, findings: &mut Vec<Finding>) {
    let state = config.paths().state();
    for (name, after) in [
        (
            "folders.json",
            "the folders given on this machine are recorded again by the next `watch` or `index`",
        ),
        ("poison.json", "pages that failed are tried again"),
    ] {
        let path = state.join(name);
        let Ok(bytes) = std::fs::read(&path) else { continue };
        if let Err(e) = serde_json::from_slice::<serde_json::Value>(&bytes) {
            let mut f = damage(
                &path.display().to_string(),
                format!("does not parse: {e}"),
                Some(format!("set it aside as {name}.damaged; {after}")),
            );
            if repair {
                f.repaired = std::fs::rename(&path, state.join(format!("{name}.damaged")))
                    .map(|()| format!("set aside as {name}.damaged"))
                    .ok();
            }
            findings.push(f);
        }
    }
    let Some(dir) = config.event_log_dir() else { return };
    for path in log_files(&dir) {
        examine_log(&path, repair, findings);
    }
}

/// One event-log file: lines that are not events (torn by a crash mid-write) are moved out.
fn examine_log(path: &Path, repair: bool, findings: &mut Vec<Finding>) {
    let Ok(bytes) = std::fs::read(path) else { return };
    let text = String::from_utf8_lossy(&bytes);
    let is_event =
        |l: &str| l.trim().is_empty() || serde_json::from_str::<crate::core::event::Event>(l).is_ok();
    let torn: Vec<&str> = text.lines().filter(|l| !is_event(l)).collect();
    if torn.is_empty() {
        return;
    }
    let aside = path.with_file_name("torn-lines.txt");
    let mut f = damage(
        &path.display().to_string(),
        format!(
            "{} line(s) are not events (torn by a crash mid-write); they are skipped when read",
            torn.len()
        ),
        Some(format!("move them out to {}", aside.display())),
    );
    if repair {
        let kept: String = text.lines().filter(|l| is_event(l)).map(|l| format!("{l}\n")).collect();
        let moved: String = torn.iter().map(|l| format!("{l}\n")).collect();
        let done = append(&aside, &moved).and_then(|()| {
            let tmp = path.with_extension("jsonl.tmp");
            std::fs::write(&tmp, kept).and_then(|()| std::fs::rename(&tmp, path))
        });
        f.repaired = done.map(|()| format!("moved {} line(s) to {}", torn.len(), aside.display())).ok();
    }
    findings.push(f);
}

fn append(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new().create(true).append(true).open(path)?.write_all(text.as_bytes())
}

/// On an object store: the lease and the journal's head parse, and the head names no source
/// the database does not hold.
async fn examine_remote(remote: &Remote, ids: &[String], findings: &mut Vec<Finding>) {
    for name in ["lease.json", "head.json"] {
        let path = remote.path(name);
        let Ok(got) = remote.store.get(&path).await else { continue };
        let Ok(bytes) = got.bytes().await else { continue };
        let subject = path.to_string();
        if name == "lease.json" {
            if let Err(e) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                let problem = format!("does not parse ({e}): it is held by nobody, the next writer takes it");
                findings.push(notice(&subject, problem));
            }
            continue;
        }
        match serde_json::from_slice::<crate::replication::journal::Head>(&bytes) {
            Err(e) => findings.push(notice(
                &subject,
                format!(
                    "does not parse ({e}): readers load every source whole until the writer writes it again"
                ),
            )),
            Ok(head) => {
                for source in head.sources.keys().filter(|s| !ids.contains(s)) {
                    let problem = format!("names source {source}, which has no tables: readers drop it");
                    findings.push(notice(&subject, problem));
                }
            }
        }
    }
}
