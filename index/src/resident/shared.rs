//! [`Resident`]: a resident index behind its lock, loaded from its tables or a snapshot, changed
//! and read on blocking threads.

use super::chunk_file::{ChunkFile, NOWHERE};
use super::keyword::{Fields, top_k};
use super::prepared::{Prepared, PreparedPage};
use super::slots::ResidentIndex;
use super::snapshot::Stamp;
use crate::store::{ChunkHit, Loaded, PageState};
use crate::vectors::{dot, unit};
use std::collections::HashMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};

/// Int8 candidates read per result wanted, to be re-scored exactly: the exact top 10 of 2,000
/// random 384-d vectors are always among the int8 top 40 (`vectors` tests), and a
/// source's real vectors are further apart than random ones at the top.
const RESCORE: usize = 4;

/// A [`ResidentIndex`] shared between the writer that keeps it current and the readers, with the
/// store it was loaded from (which re-scores int8 candidates).
#[derive(Debug, Clone)]
pub struct Resident {
    id: Arc<str>,
    index: Arc<RwLock<ResidentIndex>>,
    store: Option<crate::SourceStore>,
}

/// Pages tokenised and applied together while a source is loaded.
const LOAD_BATCH: usize = 1024;

impl Resident {
    /// A resident index with no store behind it: its vectors must stay exact.
    pub fn new(id: &str, index: ResidentIndex) -> Self {
        Self { id: id.into(), index: Arc::new(RwLock::new(index)), store: None }
    }

    /// Load a source's tables into memory, its vectors exact up to `exact_vectors_up_to` chunks
    /// and int8 codes past that (their chunk text and exact vectors then in a temporary chunk
    /// file); the rest of what the load found (page states, rows that disagree) is returned
    /// beside it, for the writer.
    pub async fn load(
        store: &crate::SourceStore,
        exact_vectors_up_to: usize,
    ) -> crate::Result<(Self, Loaded)> {
        Self::load_beside(store, exact_vectors_up_to, None).await
    }

    /// [`Resident::load`], keeping the chunk file beside the snapshot at `snapshot` when given
    /// (else in a temporary file).
    /// The pages are applied on a blocking thread as the store's read hands them over (see
    /// [`crate::SourceStore::load_into`]), a batch at a time, each page's rows dropped once
    /// applied.
    async fn load_beside(
        store: &crate::SourceStore,
        exact_vectors_up_to: usize,
        snapshot: Option<&std::path::Path>,
    ) -> crate::Result<(Self, Loaded)> {
        // Past its limit a source is coded from its first vector, so its f32 vectors are never
        // all held at once; its chunk slots and codes have their room from the start (moved as
        // they grow, the last moves held two copies of nearly all of them).
        let chunks = store.counts().await?.1;
        let held = chunks.saturating_sub(store.unembedded().await?);
        let snapshot = snapshot.map(std::path::Path::to_path_buf);
        let lang = store.language().await?;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<crate::store::LoadedPage>>(2);
        let apply = tokio::task::spawn_blocking(move || {
            let mut index = ResidentIndex::with_exact_vectors_up_to(exact_vectors_up_to).in_language(lang);
            index.keep_chunks_beside(snapshot.as_deref());
            index.vectors.expect(held, chunks);
            if held > exact_vectors_up_to {
                index.chunks.reserve_exact(crate::vectors::room(chunks));
            }
            while let Some(batch) = rx.blocking_recv() {
                index.apply(Prepared::pages(
                    batch.into_iter().map(|(r, c)| PreparedPage::stored(r, c, lang)).collect(),
                ));
            }
            index.shrink();
            index
        });
        let loaded = store.load_into(LOAD_BATCH, tx).await;
        let index = apply.await.map_err(|e| crate::Error::Io(std::io::Error::other(e)))?;
        Ok((Self { store: Some(store.clone()), ..Self::new(store.id(), index) }, loaded?))
    }

    /// [`Resident::load`], from the snapshot at `snapshot` when it stands for the tables as they
    /// are (see [`snapshot`]), else from the tables, saving a snapshot when the tables agree
    /// with themselves (else the writer has pages to redo, which a snapshot would hide). Every
    /// source keeps one: below its limit too, where the snapshot carries the chunks' text and
    /// exact vectors (GCIDE's 150,000 chunks: 5.9 s from the tables, 0.6 s from the snapshot).
    /// Returns whether the snapshot was used.
    pub async fn open(
        store: &crate::SourceStore,
        exact_vectors_up_to: usize,
        snapshot: &std::path::Path,
    ) -> crate::Result<(Self, Loaded, bool)> {
        // The stamp costs a few reads of table metadata (round trips on an object store): read
        // only where a snapshot is there to be checked, or is about to be saved.
        let stamp = match snapshot.exists() {
            true => Some(store.stamp(exact_vectors_up_to).await?),
            false => None,
        };
        let path = snapshot.to_path_buf();
        let restored = match stamp {
            Some(stamp) => tokio::task::spawn_blocking(move || ResidentIndex::restore(&path, &stamp))
                .await
                .map_err(|e| crate::Error::Io(std::io::Error::other(e)))?,
            None => Ok(None),
        };
        match restored {
            Ok(Some(index)) => {
                let states = index.records().map(|r| (r.slug.clone(), PageState::of(r))).collect();
                let resident = Self { store: Some(store.clone()), ..Self::new(store.id(), index) };
                return Ok((resident, Loaded { states, ..Loaded::default() }, true));
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(
                "source `{}`: the snapshot {} cannot be read ({e}); loading the tables instead",
                store.id(),
                snapshot.display()
            ),
        }
        let (resident, loaded) = Self::load_beside(store, exact_vectors_up_to, Some(snapshot)).await?;
        if loaded.inconsistent.is_empty() && loaded.orphans.is_empty() {
            // Read after the load when there was no snapshot: nothing writes the tables while
            // their writer is still opening them.
            let stamp = match stamp {
                Some(stamp) => stamp,
                None => store.stamp(exact_vectors_up_to).await?,
            };
            resident.save(snapshot, stamp).await;
        }
        Ok((resident, loaded, false))
    }

    /// Save the index as a snapshot stamped `stamp`, which must have been read from the tables
    /// before now: every change to the index follows a change to the tables, so what is saved is
    /// at least as new as the stamp, and a stamp the tables still match means nothing changed.
    /// A failure is logged (the next open reads the tables).
    pub async fn save(&self, path: &std::path::Path, stamp: Stamp) {
        let path = path.to_path_buf();
        let saved = self.with_index(move |index| index.save(&path, &stamp)).await;
        if let Err(e) = saved.and_then(|r| r.map_err(crate::Error::Io)) {
            tracing::warn!("source `{}`: saving its snapshot failed: {e}", self.id);
        }
    }

    /// `f` over the index on a blocking thread: the arms' scoring is CPU work (a million int8
    /// codes take ~50 ms) that must not hold one of the runtime's workers, and the caller joins
    /// the two arms, which then run at once.
    async fn with_index<T: Send + 'static>(
        &self,
        f: impl FnOnce(&ResidentIndex) -> T + Send + 'static,
    ) -> crate::Result<T> {
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || f(&index.read().unwrap_or_else(|p| p.into_inner())))
            .await
            .map_err(|e| crate::Error::Io(std::io::Error::other(e)))
    }

    /// The exact vectors of chunks (by id) that have one: from memory while the vectors are
    /// exact, else from the stored vectors (as the vector arm re-scores). A chunk whose row is
    /// gone (replaced since) is left out.
    pub async fn chunk_vectors(&self, ids: &[&str]) -> crate::Result<HashMap<String, Vec<f32>>> {
        let owned: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
        let stored_behind = self.store.is_some();
        let (exact, held) = self
            .with_index(move |index| {
                let ids: Vec<&str> = owned.iter().map(String::as_str).collect();
                match stored_behind && !index.exact_vectors() {
                    false => (Some(index.chunk_vectors(&ids)), HashMap::new()),
                    true => (None, index.stored(&ids)),
                }
            })
            .await?;
        if let Some(exact) = exact {
            return Ok(exact);
        }
        let stored = self.stored(held, ids.iter().copied()).await?;
        Ok(stored.into_iter().filter_map(|(id, (_, v))| Some((id, v?))).collect())
    }

    /// Vector arm with exact cosines: [`ResidentIndex::vector`] on exact vectors; on int8 codes,
    /// its best `k` × [`RESCORE`] candidates (every chunk of the pages `within`) re-scored from
    /// their exact vectors. Those the chunk file holds are read without their text, and only the
    /// best `k` of them get their text (a re-score keeps a quarter of what it reads); the others
    /// are read from the store. A candidate whose row is gone (replaced since) drops out.
    pub async fn vector(
        &self,
        query: &[f32],
        within: Option<&[&str]>,
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
    ) -> crate::Result<Vec<ChunkHit>> {
        let (q, within_owned, allow) = (
            query.to_vec(),
            within.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
            allow.cloned(),
        );
        let stored_behind = self.store.is_some();
        let (best, missing) = self
            .with_index(move |index| {
                let within: Option<Vec<&str>> =
                    within_owned.as_ref().map(|w| w.iter().map(String::as_str).collect());
                let rescore = stored_behind && !index.exact_vectors();
                let pool = match (rescore, within.is_some()) {
                    (false, _) => k,
                    (true, true) => usize::MAX,
                    (true, false) => k.saturating_mul(RESCORE),
                };
                let candidates = index.vector(&q, within.as_deref(), pool, allow.as_ref());
                if !rescore {
                    return (candidates, Vec::new());
                }
                // One read lock for the vectors and the texts: the chunk file cannot be replaced
                // between them.
                let ids: Vec<&str> = candidates.iter().map(|h| h.chunk_id.as_str()).collect();
                let mut filed = index.filed_vectors(&ids, q.len());
                let (held, missing): (Vec<ChunkHit>, Vec<ChunkHit>) =
                    candidates.into_iter().partition(|h| filed.contains_key(&h.chunk_id));
                let q = unit(q);
                let scored: Vec<(f32, ChunkHit)> = held
                    .into_iter()
                    .filter_map(|h| Some((dot(&q, &unit(filed.remove(&h.chunk_id)?)), h)))
                    .collect();
                let best = top_k(scored, k, |h| h.chunk_id.clone());
                let mut texts =
                    index.filed_texts(&best.iter().map(|(_, h)| h.chunk_id.as_str()).collect::<Vec<_>>());
                let best = best
                    .into_iter()
                    .filter_map(|(score, h)| Some(ChunkHit { score, text: texts.remove(&h.chunk_id)?, ..h }))
                    .collect();
                (best, missing)
            })
            .await?;
        if missing.is_empty() {
            return Ok(best);
        }
        let mut stored = self.stored(HashMap::new(), missing.iter().map(|h| h.chunk_id.as_str())).await?;
        let q = unit(query.to_vec());
        let scored: Vec<(f32, ChunkHit)> = best
            .into_iter()
            .map(|h| (h.score, h))
            .chain(missing.into_iter().filter_map(|h| {
                let (text, v) = stored.remove(&h.chunk_id)?;
                Some((dot(&q, &unit(v?)), ChunkHit { text, ..h }))
            }))
            .collect();
        Ok(top_k(scored, k, |h| h.chunk_id.clone())
            .into_iter()
            .map(|(score, h)| ChunkHit { score, ..h })
            .collect())
    }

    /// Keyword arm: [`Resident::keyword_terms`] for the query's terms as this source reads them
    /// ([`ResidentIndex::query_terms`]).
    pub async fn keyword(
        &self,
        query: &str,
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
        fields: Fields,
    ) -> crate::Result<Vec<ChunkHit>> {
        let terms = self.read().query_terms(query).all();
        self.keyword_terms(&terms, k, allow, fields).await
    }

    /// Keyword arm: [`ResidentIndex::keyword_terms`] for the query's `terms`, with the text of
    /// hits whose text only the store holds read from it. A hit whose row is gone (replaced
    /// since) drops out.
    pub async fn keyword_terms(
        &self,
        terms: &[String],
        k: usize,
        allow: Option<&std::collections::HashSet<String>>,
        fields: Fields,
    ) -> crate::Result<Vec<ChunkHit>> {
        let (terms, allow) = (terms.to_vec(), allow.cloned());
        let (hits, holds_text, held) = self
            .with_index(move |index| {
                let hits = index.keyword_terms(&terms, k, allow.as_ref(), fields);
                let ids: Vec<&str> =
                    hits.iter().filter(|h| h.text.is_empty()).map(|h| h.chunk_id.as_str()).collect();
                // Their text only: the keyword arm has no use for their vectors.
                let held: HashMap<String, (String, Option<Vec<f32>>)> =
                    index.filed_texts(&ids).into_iter().map(|(id, text)| (id, (text, None))).collect();
                (hits, index.holds_text(), held)
            })
            .await?;
        if holds_text || self.store.is_none() {
            return Ok(hits);
        }
        let mut stored =
            self.stored(held, hits.iter().filter(|h| h.text.is_empty()).map(|h| h.chunk_id.as_str())).await?;
        Ok(hits
            .into_iter()
            .filter_map(|h| match h.text.is_empty() {
                true => stored.remove(&h.chunk_id).map(|(text, _)| ChunkHit { text, ..h }),
                false => Some(h),
            })
            .collect())
    }

    /// The text and vector of the chunks `ids`: those `held` (read from the chunk file), and
    /// the rest read from the store. A chunk in neither is left out.
    async fn stored<'a>(
        &self,
        mut held: HashMap<String, (String, Option<Vec<f32>>)>,
        ids: impl Iterator<Item = &'a str>,
    ) -> crate::Result<HashMap<String, (String, Option<Vec<f32>>)>> {
        let missing: Vec<&str> = ids.filter(|id| !held.contains_key(*id)).collect();
        if let Some(store) = self.store.as_ref().filter(|_| !missing.is_empty()) {
            held.extend(store.texts_and_vectors(&missing).await?);
        }
        Ok(held)
    }

    /// The vectors of texts (by hash) that chunks of this source already have: from memory while
    /// its vectors are exact, else from the chunk file, else from the store.
    pub async fn known_vectors(&self, hashes: &[&str]) -> crate::Result<HashMap<String, Vec<f32>>> {
        let (mut known, held): (HashMap<String, Vec<f32>>, Vec<&str>) = {
            let index = self.read();
            let known: HashMap<String, Vec<f32>> =
                hashes.iter().filter_map(|h| Some((h.to_string(), index.vector_of(h)?))).collect();
            let held =
                hashes.iter().copied().filter(|h| !known.contains_key(*h) && index.has_vector(h)).collect();
            (known, held)
        };
        if let (Some(store), false) = (&self.store, held.is_empty()) {
            known.extend(store.vectors_by(crate::VectorKey::TextHash, &held).await?);
        }
        Ok(known)
    }

    /// The language its words are read in (prepare what it applies in it).
    pub fn lang(&self) -> super::analyzer::Lang {
        self.read().lang()
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Apply a committed batch (tokenise it first with [`Prepared::batch`], outside the lock);
    /// the chunks still waiting for a vector after it.
    pub async fn apply(&self, batch: Prepared) -> crate::Result<usize> {
        self.with_index_mut(move |index| index.apply(batch)).await
    }

    /// Apply vectors attached to chunks (by id); the chunks still waiting for one after them.
    pub async fn apply_vectors(&self, vectors: Vec<(String, Vec<f32>)>) -> crate::Result<usize> {
        self.with_index_mut(move |index| index.apply_vectors(&vectors)).await
    }

    /// `f` over the index under its write lock, on a blocking thread: taking the lock waits for
    /// the searches reading now, and a change may write the chunk file, so neither may hold an
    /// actor's thread (which answers searches meanwhile) or one of the runtime's workers.
    async fn with_index_mut(
        &self,
        f: impl FnOnce(&mut ResidentIndex) + Send + 'static,
    ) -> crate::Result<usize> {
        let index = self.index.clone();
        tokio::task::spawn_blocking(move || {
            crate::fault::point("resident.apply");
            let mut index = index.write().unwrap_or_else(|p| p.into_inner());
            f(&mut index);
            index.unembedded_count()
        })
        .await
        .map_err(|e| crate::Error::Io(std::io::Error::other(e)))
    }

    /// Compact the chunk file once most of it is dead (see [`chunk_file`]): the live records are
    /// listed under a read lock, copied to a new file with no lock held (the old file is only
    /// appended to, so what it holds below the listed length stays as it is), and the index
    /// moves to the copy under the write lock, for as long as it takes to renumber the slots.
    /// The caller (the writer's upkeep, which runs no commit meanwhile) then saves a snapshot
    /// that names the new file. The file's lengths before and after, when it ran.
    pub async fn compact_chunk_file(&self) -> crate::Result<Option<(u64, u64)>> {
        let listed = {
            let index = self.read();
            let Some(file) = index.file.as_ref().filter(|f| f.compaction_due()) else { return Ok(None) };
            let live: Vec<(u32, u64)> = index
                .chunks
                .iter()
                .enumerate()
                .filter_map(|(i, s)| s.as_ref().filter(|s| s.at != NOWHERE).map(|s| (i as u32, s.at)))
                .collect();
            (file.source()?, live)
        };
        let ((from, path, len), live) = listed;
        let (copy, moved) = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
            let mut copy = ChunkFile::create_beside(path.as_deref())?;
            let mut moved = Vec::with_capacity(live.len());
            for (slot, at) in live {
                moved.push((slot, at, copy.copy_record(&from, at, len)?));
            }
            // On disk here, not under the write lock (where only the renaming is left).
            copy.flush()?;
            copy.sync()?;
            Ok((copy, moved))
        })
        .await
        .map_err(|e| crate::Error::Io(std::io::Error::other(e)))??;
        let mut index = self.index.write().unwrap_or_else(|p| p.into_inner());
        Ok(index.move_to(copy, moved).map(|after| (len, after)))
    }

    /// Read access (held for one synchronous read, never across an await).
    pub fn read(&self) -> RwLockReadGuard<'_, ResidentIndex> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }
}
