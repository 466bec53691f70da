//! The query host: the sources a process answers from (each in memory: its resident index, with
//! its tables for reads outside the query path) and the query model. The owner's `QueryActor`
//! wraps one, kept current by the writers; a process with no owner opens one read-only from the
//! tables. Both answer with the same code.

use crate::core::status::SourceState;
use cairn_index::{Database, Embedder, PageRecord, Resident, SourceStore};
use cairn_query::{QueryError, SearchRequest, SearchResponse};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A source as the query engine reads it: in memory (its resident index), with the store for
/// reads outside the query path (`get`, `diagnose`'s ingest state) and its folder.
#[derive(Debug, Clone)]
pub struct LiveSource {
    pub store: SourceStore,
    pub resident: Resident,
    pub root: Option<PathBuf>,
}

/// A stored page with its body (the file's text, or the stored chunks when it cannot be read).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PageWithBody {
    #[serde(flatten)]
    pub page: PageRecord,
    pub source: String,
    pub body: String,
    /// The process that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<cairn_query::ServedBy>,
}

/// The title and where the page is, its names and tags, a blank line, then the body.
impl std::fmt::Display for PageWithBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = &self.page;
        writeln!(f, "{} ({}:{}, {})", p.title, self.source, p.slug, p.path)?;
        if !p.aliases.is_empty() {
            writeln!(f, "aliases: {}", p.aliases.join(", "))?;
        }
        if !p.tags.is_empty() {
            writeln!(f, "tags: {}", p.tags.join(", "))?;
        }
        writeln!(f)?;
        writeln!(f, "{}", self.body)
    }
}

/// The sources of one process and its query model.
#[derive(Debug, Clone, Default)]
pub struct QueryHost {
    sources: BTreeMap<String, LiveSource>,
    embedder: Option<Arc<dyn Embedder>>,
    /// The event log, for the ingest history `diagnose` reports.
    log_dir: Option<PathBuf>,
    /// Sources whose tables could not be opened, with why (reported as degraded in answers;
    /// one of them may still be held as it last opened).
    broken: Vec<(String, String)>,
    /// A process that only reads: sources whose folder it cannot read now, with why and what to
    /// do (an owner's watchers keep this on its status board instead).
    unavailable: BTreeMap<String, (cairn_ingest::Unavailable, String)>,
    /// The bounds pages were parsed with (to re-hash a file whose stat changed).
    parse: cairn_ingest::ParseOptions,
}

impl QueryHost {
    /// `embedder` answers query vectors; `None` serves `fast` mode only.
    pub fn new(embedder: Option<Arc<dyn Embedder>>, log_dir: Option<PathBuf>) -> Self {
        Self { embedder, log_dir, ..Self::default() }
    }

    /// Every source of a database, read from its tables into memory (a process with no owner).
    pub async fn open_read_only(
        db: &Database,
        folders: &crate::core::folders::FolderBook,
        embedder: Option<Arc<dyn Embedder>>,
        log_dir: Option<PathBuf>,
        exact_vectors_up_to: usize,
    ) -> cairn_index::Result<Self> {
        let mut host = Self::new(embedder, log_dir);
        for info in db.sources().await? {
            host.open_source(db, info, folders, exact_vectors_up_to).await;
        }
        Ok(host)
    }

    /// One source of a database, read from its tables into memory (replacing the one held). Its
    /// folder is the one given on this machine (`folders`; a local database's stored root
    /// counts as given here), glanced at to tell whether it can be read now. A source whose
    /// tables cannot be opened is held as failed, with why.
    pub async fn open_source(
        &mut self,
        db: &Database,
        info: cairn_index::SourceInfo,
        folders: &crate::core::folders::FolderBook,
        exact_vectors_up_to: usize,
    ) {
        use cairn_ingest::{Glance, Unavailable};
        let opened = match db.open_existing(&info.id).await {
            Ok(store) => {
                Resident::load(&store, exact_vectors_up_to).await.map(|(resident, _)| (store, resident))
            }
            Err(e) => Err(e),
        };
        let (store, resident) = match opened {
            Ok(o) => o,
            Err(e) => {
                self.remove(&info.id);
                self.broken.push((info.id, e.to_string()));
                return;
            }
        };
        let record = folders.get(&info.id);
        let root = match (&record, info.root) {
            (Some(r), _) => Some(r.root.clone()),
            (None, Some(root)) if cairn_index::store::is_local(db.uri()) => Some(PathBuf::from(root)),
            _ => None,
        };
        let why = match &root {
            Some(r) => Glance::of(r)
                .unavailable(record.and_then(|r| r.identity).as_ref(), resident.read().page_count()),
            None => Some(Unavailable::NotHere),
        };
        self.unavailable.remove(&info.id);
        if let Some(why) = why {
            let shown = root.as_ref().map(|r| r.display().to_string()).unwrap_or_default();
            let message = why.describe(&info.id, &shown);
            self.unavailable.insert(info.id.clone(), (why, message));
        }
        // An unavailable folder is not read for bodies or staleness: it is not the notes.
        let root = root.filter(|_| !self.unavailable.contains_key(&info.id));
        self.add(LiveSource { store, resident, root });
    }

    /// The source's resident index and tables, when held.
    pub fn live(&self, id: &str) -> Option<&LiveSource> {
        self.sources.get(id)
    }

    /// Why a source's folder cannot be read here, when it cannot.
    pub fn unavailable(&self, id: &str) -> Option<&(cairn_ingest::Unavailable, String)> {
        self.unavailable.get(id)
    }

    /// Parse with these bounds when checking whether a result's file changed.
    pub fn with_parse_options(mut self, parse: cairn_ingest::ParseOptions) -> Self {
        self.parse = parse;
        self
    }

    /// The tables of source `id` cannot be opened now: answers say so until it is added again.
    pub fn cannot_open(&mut self, id: String, why: String) {
        self.broken.retain(|(b, _)| *b != id);
        self.broken.push((id, why));
    }

    pub fn add(&mut self, source: LiveSource) {
        self.broken.retain(|(id, _)| id != source.store.id());
        self.sources.insert(source.store.id().to_string(), source);
    }

    pub fn remove(&mut self, id: &str) -> bool {
        self.unavailable.remove(id);
        self.broken.retain(|(b, _)| b != id);
        self.sources.remove(id).is_some()
    }

    pub fn source_ids(&self) -> Vec<String> {
        self.sources.keys().cloned().collect()
    }

    /// A source by id; unknown, a usage error that lists the known ones.
    fn source(&self, id: &str) -> crate::Result<&LiveSource> {
        self.sources.get(id).ok_or_else(|| {
            cairn_query::QueryError::UnknownSource { id: id.into(), known: self.source_ids().join(", ") }
                .into()
        })
    }

    pub fn embedder(&self) -> Option<&Arc<dyn Embedder>> {
        self.embedder.as_ref()
    }

    /// Every source held, as a status (a process that only reads: nothing watches them).
    pub fn status(&self) -> Vec<crate::core::status::SourceStatus> {
        self.sources
            .values()
            .map(|s| {
                let index = s.resident.read();
                let away = self.unavailable.get(s.store.id());
                crate::core::status::SourceStatus {
                    source: s.store.id().to_string(),
                    root: s.root.as_ref().map(|r| r.display().to_string()).unwrap_or_default(),
                    state: if away.is_some() { SourceState::Unavailable } else { SourceState::NotWatched },
                    pages: index.page_count(),
                    chunks: index.chunk_count(),
                    vectors_pending: index.unembedded_count(),
                    language: Some(index.lang().code().to_string()),
                    error: away.map(|(_, m)| m.clone()),
                    unavailable: away.map(|(u, _)| u.clone()),
                    ..Default::default()
                }
            })
            .chain(self.broken.iter().filter(|(id, _)| !self.sources.contains_key(id)).map(|(id, why)| {
                crate::core::status::SourceStatus {
                    source: id.clone(),
                    state: SourceState::Failed,
                    error: Some(why.clone()),
                    ..Default::default()
                }
            }))
            .collect()
    }

    /// Answer a query over every source held; the folders of the sources in `away` cannot be
    /// read now (their results are marked stale as such, without looking at their files).
    pub async fn search(
        &self,
        req: &SearchRequest,
        away: &std::collections::BTreeSet<String>,
    ) -> Result<SearchResponse, QueryError> {
        let refs: Vec<&Resident> = self.sources.values().map(|s| &s.resident).collect();
        let wanted = |id: &String| req.sources.is_empty() || req.sources.contains(id);
        let broken: Vec<&(String, String)> = self.broken.iter().filter(|(id, _)| wanted(id)).collect();
        // A source that cannot be opened is not searched, but neither is it unknown: the answer
        // says it is damaged.
        let held = |id: &String| self.sources.contains_key(id);
        let searched: Vec<String> =
            req.sources.iter().filter(|s| held(s) || !broken.iter().any(|(b, _)| b == *s)).cloned().collect();
        let nothing_held =
            if req.sources.is_empty() { self.sources.is_empty() } else { !searched.iter().any(held) };
        let mut resp = if nothing_held && !broken.is_empty() {
            cairn_query::SearchResponse::empty(req)
        } else {
            let req = SearchRequest { sources: searched, ..req.clone() };
            cairn_query::search(&refs, self.embedder.as_deref(), &req).await?
        };
        for (id, why) in broken {
            if req.sources.is_empty() || req.sources.contains(id) {
                resp.degraded.push(damaged_tag(id, why));
                resp.notes.push(damaged_note(id, why, self.sources.contains_key(id)));
            }
        }
        let pending: Vec<(String, usize)> = self
            .sources
            .values()
            .map(|s| (s.store.id().to_string(), s.resident.read().unembedded_count()))
            .collect();
        cairn_query::note_vectors_pending(&mut resp, |id| {
            pending.iter().find(|(s, _)| s == id).map(|(_, n)| *n)
        });
        self.mark_stale(&mut resp, away).await;
        Ok(resp)
    }

    /// Look at each result's file: gone, or holding other content than was indexed (a stat that
    /// differs is confirmed by hashing the content, so a file only touched is not stale).
    async fn mark_stale(&self, resp: &mut SearchResponse, away: &std::collections::BTreeSet<String>) {
        let files: Vec<Option<(PathBuf, PageRecord)>> = resp
            .results
            .iter()
            .map(|r| {
                if away.contains(&r.source) {
                    return None;
                }
                let src = self.sources.get(&r.source)?;
                let root = src.root.as_ref()?;
                let page = src.resident.read().pages(&[r.slug.as_str()]).into_iter().next()?;
                Some((root.join(&page.path), page))
            })
            .collect();
        let parse = self.parse.clone();
        let looked = tokio::task::spawn_blocking(move || {
            files
                .into_iter()
                .map(|f| f.and_then(|(path, page)| staleness(&path, &page, &parse)))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        let by_key: Vec<(String, String, Option<cairn_query::Stale>)> =
            resp.results.iter().zip(looked).map(|(r, s)| (r.source.clone(), r.slug.clone(), s)).collect();
        cairn_query::mark_stale(resp, |r| {
            if away.contains(&r.source) {
                return Some(cairn_query::Stale::SourceUnavailable);
            }
            by_key.iter().find(|(s, g, _)| *s == r.source && *g == r.slug).and_then(|(_, _, st)| *st)
        });
    }

    /// Where one page stands at every layer for a query, with its ingest state.
    pub async fn diagnose(
        &self,
        req: &SearchRequest,
        source: &str,
        slug: &str,
    ) -> Result<cairn_query::Diagnosis, QueryError> {
        let refs: Vec<&Resident> = self.sources.values().map(|s| &s.resident).collect();
        let d = cairn_query::diagnose(&refs, self.embedder.as_deref(), req, source, slug).await?;
        let Some(src) = self.sources.get(source) else { return Ok(d) };
        let ingest =
            crate::core::history::ingest_state(&src.store, self.log_dir.as_deref(), slug, d.page.as_ref())
                .await;
        Ok(d.with_ingest(ingest))
    }

    /// A page's links both ways (`None`: no such page).
    pub fn links(&self, source: &str, slug: &str) -> crate::Result<Option<cairn_query::links::Links>> {
        let src = self.source(source)?;
        let index = src.resident.read();
        let pages: Vec<&PageRecord> = index.records().collect();
        Ok(cairn_query::links::links_of(source, &pages, slug))
    }

    /// Groups of pages that look like one subject, across every source: shared names, identical
    /// content, chunks at cosine ≥ `threshold`.
    pub fn duplicates(
        &self,
        threshold: f32,
        stop: &dyn Fn() -> bool,
    ) -> Vec<cairn_query::duplicates::DuplicateGroup> {
        use cairn_query::duplicates::{by_name_and_content, near_identical};
        // What the job reads is copied under a short read of each source; each vector is read
        // later under a read of its own, so a commit (and the searches queued behind it) never
        // waits on the whole job.
        let mut pages: Vec<(&str, PageRecord)> = Vec::new();
        let mut held: Vec<(usize, String, String, usize)> = Vec::new(); // source, slug, chunk, slot
        let sources: Vec<&LiveSource> = self.sources.values().collect();
        for (g, src) in sources.iter().enumerate() {
            let index = src.resident.read();
            pages.extend(index.records().map(|p| (src.store.id(), p.clone())));
            held.extend(
                index.embedded_chunks().map(|(slug, chunk, slot)| (g, slug.to_string(), chunk, slot)),
            );
        }
        let titles: std::collections::HashMap<(String, String), String> =
            pages.iter().map(|(s, p)| ((s.to_string(), p.slug.clone()), p.title.clone())).collect();
        let by_ref: Vec<(&str, &PageRecord)> = pages.iter().map(|(s, p)| (*s, p)).collect();
        let mut groups = by_name_and_content(&by_ref);
        let chunks: Vec<(&str, &str, &str)> =
            held.iter().map(|(g, slug, c, _)| (sources[*g].store.id(), slug.as_str(), c.as_str())).collect();
        // A vector is read when it is asked for, never all of them at once: int8-coded sources
        // read the exact one from their chunk file (a grouping by threshold must not move with
        // the codes' rounding, ~0.002 of cosine).
        let vector = |i: usize| {
            let (g, _, chunk, slot) = &held[i];
            sources[*g]
                .resident
                .read()
                .chunk_vector(*slot, chunk)
                .map(|v| std::borrow::Cow::Owned(v.into_owned()))
        };
        groups.extend(near_identical(&chunks, &vector, &titles, threshold, stop));
        groups
    }

    /// One page with its body; `None` when the source has no such slug. `SLUG#ANCHOR` reads one
    /// section of it (with its subsections), as a result's `chunk.section` names it.
    pub async fn get(&self, source: &str, slug: &str) -> crate::Result<Option<PageWithBody>> {
        let (slug, anchor) = slug.split_once('#').unwrap_or((slug, ""));
        let src = self.source(source)?;
        let Some(page) = src.resident.read().pages(&[slug]).into_iter().next() else { return Ok(None) };
        let body = page_body(src, &page).await?;
        let body = match cairn_ingest::section::section_text(&body, &page.title, anchor) {
            Some(section) => section.to_string(),
            None => {
                let known = cairn_ingest::section::anchors(&body, &page.title).join(", ");
                let page = format!("{source}:{slug}");
                let anchor = anchor.to_string();
                return Err(cairn_query::QueryError::NoSection { page, anchor, known }.into());
            }
        };
        Ok(Some(PageWithBody { page, source: source.to_string(), body, served_by: None }))
    }
}

/// The file is the truth; the stored chunks (which overlap) only when it is unreadable.
async fn page_body(src: &LiveSource, page: &PageRecord) -> cairn_index::Result<String> {
    let file = match &src.root {
        Some(r) => match cairn_ingest::within_root(r, Path::new(&page.path)) {
            Ok(abs) => tokio::fs::read_to_string(abs).await.ok(),
            Err(_) => None,
        },
        None => None,
    };
    Ok(match file {
        Some(text) => cairn_ingest::frontmatter::split(&text).body.to_string(),
        None => {
            let chunks = src.store.page_chunks(&page.slug).await?;
            chunks.into_iter().map(|c| c.text).collect::<Vec<_>>().join("\n\n")
        }
    })
}

/// Whether the file at `path` still holds `page` as indexed.
fn staleness(
    path: &std::path::Path,
    page: &PageRecord,
    parse: &cairn_ingest::ParseOptions,
) -> Option<cairn_query::Stale> {
    use cairn_ingest::placeholder::{is_dataless, stub_for};
    use cairn_query::Stale;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        // An evicted iCloud note is its stub beside it, not a deletion.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let evicted = stub_for(path).is_some_and(|s| s.exists());
            return Some(if evicted { Stale::Placeholder } else { Stale::Deleted });
        }
        Err(_) => return None,
    };
    // Never read: that would download it.
    if is_dataless(&meta) {
        return Some(Stale::Placeholder);
    }
    let mtime = meta.modified().map(cairn_ingest::scan::mtime_ms).unwrap_or(0);
    if mtime == page.mtime_ms && meta.len() as i64 == page.bytes {
        return None;
    }
    if meta.len() > parse.max_page_bytes {
        return Some(Stale::Modified);
    }
    let bytes = std::fs::read(path).ok()?;
    match cairn_ingest::content_hash_of(&bytes, parse) {
        Some(h) if h == page.content_hash => None,
        _ => Some(Stale::Modified),
    }
}

/// The sources a process answers from, shared by what keeps them current (the owner's
/// `QueryActor`, a reader's follower) and what answers from them (the read verbs,
/// [`crate::api`]'s `Reads`). An answer reads the sources as they are when it starts; a change
/// makes a new set (the sources are handles, cheap to copy) and swaps it in.
#[derive(Debug, Default)]
pub struct HostCell(std::sync::RwLock<Arc<QueryHost>>);

impl HostCell {
    pub fn new(host: QueryHost) -> Self {
        Self(std::sync::RwLock::new(Arc::new(host)))
    }

    /// The sources as they are now.
    pub fn now(&self) -> Arc<QueryHost> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Swap in `host`.
    pub fn replace(&self, host: QueryHost) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(host);
    }

    /// Change the sources with `f` (one change at a time; answers under way keep the set they
    /// started with).
    pub fn update<T>(&self, f: impl FnOnce(&mut QueryHost) -> T) -> T {
        let mut held = self.0.write().unwrap_or_else(|p| p.into_inner());
        let mut host = QueryHost::clone(&held);
        let out = f(&mut host);
        *held = Arc::new(host);
        out
    }
}

/// [`QueryHost::duplicates`] off the async threads, stopped when its caller stops waiting (a
/// client that went away, a request past its time limit).
pub async fn duplicates_job(
    host: Arc<QueryHost>,
    threshold: f32,
) -> crate::Result<Vec<cairn_query::duplicates::DuplicateGroup>> {
    if !(0.0..=1.0).contains(&threshold) {
        return Err(crate::Error::Config(format!(
            "duplicates: threshold {threshold} is not a cosine from 0 to 1"
        )));
    }
    struct StopOnDrop(Arc<std::sync::atomic::AtomicBool>);
    impl Drop for StopOnDrop {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    let stopped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let _stop = StopOnDrop(stopped.clone());
    tokio::task::spawn_blocking(move || {
        let stop = || {
            cairn_index::fault::point("duplicates.check");
            stopped.load(std::sync::atomic::Ordering::SeqCst)
        };
        let groups = host.duplicates(threshold, &stop);
        if stopped.load(std::sync::atomic::Ordering::SeqCst) {
            tracing::info!("duplicates: stopped early, its caller went");
        }
        groups
    })
    .await
    .map_err(|e| crate::Error::Pipeline(format!("duplicates failed: {e}")))
}

/// The `degraded` entry of a source whose tables cannot be opened: `source_unreachable:ID` while
/// its store does not answer, else `source_damaged:ID`.
pub fn damaged_tag(id: &str, why: &str) -> String {
    let kind = if cairn_index::store::unreachable(why) { "source_unreachable" } else { "source_damaged" };
    format!("{kind}:{id}")
}

/// What an answer says of a source whose tables cannot be opened: why, what it answered from, and
/// what to do (wait for the store, or find and repair the damage).
pub fn damaged_note(id: &str, why: &str, held: bool) -> String {
    let from =
        if held { "its pages are answered as it last opened" } else { "its pages are not in this answer" };
    let why = cairn_index::store::with_hint(why);
    format!("source {id} cannot be opened: {why}; {from}")
}
