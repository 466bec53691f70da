//! What the query engine reads from one source. [`cairn_index::Resident`] (the source in memory,
//! loaded from its LanceDB tables and kept current by its writer) is what searches read;
//! [`memory::MemoryReader`] is the test double for unit tests of the layers.

use crate::filter::{Allowed, PageFilter};
use cairn_index::resident::{Fields, LearntPage, QueryTerms};
use cairn_index::{ChunkHit, PageRecord, Resident, Result};
use std::collections::HashMap;
use std::future::Future;

/// The per-source read primitives the gather step fans out to.
pub trait SourceReader: Sync {
    fn id(&self) -> &str;
    /// The language the source's words are read in (the query is read in it too).
    fn lang(&self) -> cairn_index::resident::Lang {
        cairn_index::resident::Lang::English
    }
    /// The query's terms as the source reads them (its keyword arm's; see
    /// [`cairn_index::resident::compounds`]).
    fn query_terms(&self, query: &str) -> QueryTerms {
        QueryTerms::plain(self.lang(), query)
    }
    /// Keyword arm: chunks by BM25 of the query's `terms` (as [`SourceReader::query_terms`]
    /// read them; a chunk's heading path and text scored as `fields` says), best first (of the
    /// pages `allow`ed, when given).
    fn keyword(
        &self,
        terms: &QueryTerms,
        k: usize,
        allow: Option<&Allowed>,
        fields: Fields,
    ) -> impl Future<Output = Result<Vec<ChunkHit>>> + Send;
    /// The vectors of chunks, by id (those that have one).
    fn chunk_vectors(&self, ids: &[&str]) -> impl Future<Output = Result<HashMap<String, Vec<f32>>>> + Send;
    /// Vector arm: chunks by cosine, best first (of the pages `allow`ed, when given).
    fn vector(
        &self,
        query: &[f32],
        k: usize,
        allow: Option<&Allowed>,
    ) -> impl Future<Output = Result<Vec<ChunkHit>>> + Send;
    /// The vector arm over some pages only (to max-pool candidates found by other arms).
    fn vector_within(
        &self,
        query: &[f32],
        slugs: &[&str],
        k: usize,
    ) -> impl Future<Output = Result<Vec<ChunkHit>>> + Send;
    /// Title arm: pages by full-text match on title and aliases (of the pages `allow`ed).
    fn titles(
        &self,
        query: &str,
        k: usize,
        allow: Option<&Allowed>,
    ) -> impl Future<Output = Result<Vec<PageRecord>>> + Send;
    /// The slugs of the pages that pass a filter.
    fn allowed(&self, filter: &PageFilter) -> impl Future<Output = Result<Allowed>> + Send;
    /// Pages whose slug, title or alias equals the normalised name.
    fn alias(&self, normalized: &str) -> impl Future<Output = Result<Vec<PageRecord>>> + Send;
    /// The page the vault taught a normalised name to, when it names one (see
    /// [`cairn_index::resident::learnt`]).
    fn learnt(&self, normalized: &str) -> impl Future<Output = Result<Option<LearntPage>>> + Send;
    /// Pages whose own name is the fewest edits (1..=`max_edits`) from the normalised name, by
    /// what taking the name for theirs costs ([`cairn_ingest::fuzzy::cost`]), with that cost: those
    /// at the least, at most `k`.
    fn fuzzy(
        &self,
        normalized: &str,
        max_edits: usize,
        k: usize,
    ) -> impl Future<Output = Result<Vec<(PageRecord, usize)>>> + Send;
    fn pages(&self, slugs: &[&str]) -> impl Future<Output = Result<Vec<PageRecord>>> + Send;
}

impl SourceReader for Resident {
    fn id(&self) -> &str {
        Resident::id(self)
    }
    fn lang(&self) -> cairn_index::resident::Lang {
        Resident::lang(self)
    }
    fn query_terms(&self, query: &str) -> QueryTerms {
        self.read().query_terms(query)
    }
    async fn keyword(
        &self,
        terms: &QueryTerms,
        k: usize,
        allow: Option<&Allowed>,
        fields: Fields,
    ) -> Result<Vec<ChunkHit>> {
        Resident::keyword_terms(self, &terms.all(), k, allow, fields).await
    }
    async fn chunk_vectors(&self, ids: &[&str]) -> Result<HashMap<String, Vec<f32>>> {
        Resident::chunk_vectors(self, ids).await
    }
    async fn vector(&self, query: &[f32], k: usize, allow: Option<&Allowed>) -> Result<Vec<ChunkHit>> {
        Resident::vector(self, query, None, k, allow).await
    }
    async fn vector_within(&self, query: &[f32], slugs: &[&str], k: usize) -> Result<Vec<ChunkHit>> {
        Resident::vector(self, query, Some(slugs), k, None).await
    }
    async fn titles(&self, query: &str, k: usize, allow: Option<&Allowed>) -> Result<Vec<PageRecord>> {
        Ok(self.read().titles(query, k, allow))
    }
    async fn allowed(&self, filter: &PageFilter) -> Result<Allowed> {
        Ok(self.read().slugs_where(|p| filter.matches(p)))
    }
    async fn alias(&self, normalized: &str) -> Result<Vec<PageRecord>> {
        Ok(self.read().alias(normalized))
    }
    async fn learnt(&self, normalized: &str) -> Result<Option<LearntPage>> {
        Ok(self.read().learnt(normalized))
    }
    async fn fuzzy(&self, normalized: &str, max_edits: usize, k: usize) -> Result<Vec<(PageRecord, usize)>> {
        Ok(self.read().fuzzy(normalized, max_edits, k))
    }
    async fn pages(&self, slugs: &[&str]) -> Result<Vec<PageRecord>> {
        Ok(self.read().pages(slugs))
    }
}

#[cfg(test)]
pub mod memory {
    //! An in-memory source for unit tests: token-overlap "BM25", exact cosine over vectors from
    //! the deterministic test embedder, exact names. Can be told to fail.

    use super::*;
    use cairn_index::embed::testing::HashEmbedder;
    use cairn_index::{Embedder, Error, cosine};
    use cairn_ingest::normalize_name;

    /// A page and its chunks, each with its vector.
    pub type MemoryPage = (PageRecord, Vec<(ChunkHit, Vec<f32>)>);

    #[derive(Debug)]
    pub struct MemoryReader {
        pub id: String,
        pub pages: Vec<MemoryPage>,
        pub fail: bool,
        /// Learnt names, by normalised name.
        pub learnt: HashMap<String, LearntPage>,
    }

    /// A page record with a title, aliases and one chunk per body text.
    pub fn page(
        slug: &str,
        title: &str,
        aliases: &[&str],
        bodies: &[&str],
    ) -> (PageRecord, Vec<(ChunkHit, Vec<f32>)>) {
        let e = HashEmbedder::default();
        let record = PageRecord::named(slug, title, aliases, bodies.len());
        let chunks = bodies
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (ChunkHit::numbered(slug, i, title, b), e.embed_query(&format!("{title}\n\n{b}")).unwrap())
            })
            .collect();
        (record, chunks)
    }

    impl MemoryReader {
        /// Each page's `body_shared_by` is counted here, as the resident index counts it.
        pub fn new(id: &str, mut pages: Vec<MemoryPage>) -> Self {
            let body =
                |cs: &[(ChunkHit, Vec<f32>)]| cs.iter().map(|(c, _)| c.text.clone()).collect::<Vec<_>>();
            let mut shared: HashMap<Vec<String>, u32> = HashMap::new();
            for (_, cs) in &pages {
                *shared.entry(body(cs)).or_default() += 1;
            }
            for (p, cs) in &mut pages {
                p.body_shared_by = shared[&body(cs)];
            }
            Self { id: id.into(), pages, fail: false, learnt: HashMap::new() }
        }
        fn check(&self) -> Result<()> {
            if self.fail {
                return Err(Error::Storage {
                    source_id: self.id.clone(),
                    uri: "memory".into(),
                    message: "unreachable".into(),
                });
            }
            Ok(())
        }
        fn ranked(&self, mut hits: Vec<ChunkHit>, k: usize) -> Vec<ChunkHit> {
            hits.retain(|h| h.score > 0.0);
            hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.chunk_id.cmp(&b.chunk_id)));
            hits.truncate(k);
            hits
        }
    }

    /// How many of the query's terms the text holds, read as the keyword arm reads it.
    fn overlap(query: &[String], text: &str) -> f32 {
        let t = cairn_index::resident::terms(text);
        query.iter().filter(|q| t.contains(q)).count() as f32
    }

    impl SourceReader for MemoryReader {
        fn id(&self) -> &str {
            &self.id
        }
        async fn keyword(
            &self,
            terms: &QueryTerms,
            k: usize,
            allow: Option<&Allowed>,
            _: Fields,
        ) -> Result<Vec<ChunkHit>> {
            let query = &terms.all();
            self.check()?;
            let hits = self
                .pages
                .iter()
                .filter(|(p, _)| allow.is_none_or(|a| a.contains(&p.slug)))
                .flat_map(|(p, cs)| {
                    cs.iter().map(move |(c, _)| ChunkHit {
                        score: overlap(query, &format!("{} {}", p.title, c.text)),
                        ..c.clone()
                    })
                })
                .collect();
            Ok(self.ranked(hits, k))
        }
        async fn chunk_vectors(&self, ids: &[&str]) -> Result<HashMap<String, Vec<f32>>> {
            self.check()?;
            Ok(self
                .pages
                .iter()
                .flat_map(|(_, cs)| cs.iter())
                .filter(|(c, _)| ids.contains(&c.chunk_id.as_str()))
                .map(|(c, v)| (c.chunk_id.clone(), v.clone()))
                .collect())
        }
        async fn vector(&self, query: &[f32], k: usize, allow: Option<&Allowed>) -> Result<Vec<ChunkHit>> {
            let slugs: Vec<&str> = self
                .pages
                .iter()
                .map(|(p, _)| p.slug.as_str())
                .filter(|s| allow.is_none_or(|a| a.contains(*s)))
                .collect();
            self.vector_within(query, &slugs, k).await
        }
        async fn vector_within(&self, query: &[f32], slugs: &[&str], k: usize) -> Result<Vec<ChunkHit>> {
            self.check()?;
            let hits = self
                .pages
                .iter()
                .filter(|(p, _)| slugs.contains(&p.slug.as_str()))
                .flat_map(|(_, cs)| cs.iter().map(|(c, v)| ChunkHit { score: cosine(query, v), ..c.clone() }))
                .collect();
            Ok(self.ranked(hits, k))
        }
        async fn allowed(&self, filter: &PageFilter) -> Result<Allowed> {
            self.check()?;
            Ok(self.pages.iter().filter(|(p, _)| filter.matches(p)).map(|(p, _)| p.slug.clone()).collect())
        }
        async fn titles(&self, query: &str, k: usize, allow: Option<&Allowed>) -> Result<Vec<PageRecord>> {
            self.check()?;
            let mut out: Vec<PageRecord> = self
                .pages
                .iter()
                .filter(|(p, _)| allow.is_none_or(|a| a.contains(&p.slug)))
                .map(|(p, _)| PageRecord {
                    score: overlap(
                        &cairn_index::resident::terms(query),
                        &format!("{} {}", p.title, p.aliases.join(" ")),
                    ),
                    ..p.clone()
                })
                .filter(|p| p.score > 0.0)
                .collect();
            out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.slug.cmp(&b.slug)));
            out.truncate(k);
            Ok(out)
        }
        async fn alias(&self, normalized: &str) -> Result<Vec<PageRecord>> {
            self.check()?;
            Ok(self
                .pages
                .iter()
                .filter(|(p, _)| {
                    p.slug == normalized
                        || normalize_name(&p.title) == normalized
                        || p.aliases.iter().any(|a| normalize_name(a) == normalized)
                })
                .map(|(p, _)| p.clone())
                .collect())
        }
        async fn learnt(&self, normalized: &str) -> Result<Option<LearntPage>> {
            self.check()?;
            Ok(self.learnt.get(normalized).cloned())
        }
        async fn fuzzy(
            &self,
            normalized: &str,
            max_edits: usize,
            k: usize,
        ) -> Result<Vec<(PageRecord, usize)>> {
            self.check()?;
            let names = |p: &PageRecord| {
                let mut n = vec![p.slug.clone(), normalize_name(&p.title)];
                n.extend(p.aliases.iter().map(|a| normalize_name(a)));
                n
            };
            let found: Vec<(PageRecord, usize)> = self
                .pages
                .iter()
                .filter_map(|(p, _)| {
                    let cost = names(p)
                        .iter()
                        .filter_map(|n| cairn_ingest::fuzzy::cost(normalized, n, max_edits))
                        .filter(|c| *c > 0)
                        .min()?;
                    Some((p.clone(), cost))
                })
                .collect();
            let least = found.iter().map(|(_, c)| *c).min();
            let mut out: Vec<_> = found.into_iter().filter(|(_, c)| Some(*c) == least).collect();
            out.sort_by(|a, b| a.0.slug.cmp(&b.0.slug));
            out.truncate(k);
            Ok(out)
        }
        async fn pages(&self, slugs: &[&str]) -> Result<Vec<PageRecord>> {
            self.check()?;
            Ok(self
                .pages
                .iter()
                .filter(|(p, _)| slugs.contains(&p.slug.as_str()))
                .map(|(p, _)| p.clone())
                .collect())
        }
    }
}
