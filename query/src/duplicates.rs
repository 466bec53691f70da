//! Duplicate candidates: groups of pages that look like one subject, within a vault and across
//! sources, each with the evidence that groups them: a name they share (title, alias or file
//! name), identical content, or chunks whose vectors are nearly identical.
//!
//! Near-identical chunks are found without comparing every pair: each unit vector gets a 64-bit
//! signature of random hyperplanes (its sign on each; two vectors at angle θ disagree on a bit
//! with probability θ/π), cut into eight 8-bit bands; chunks that share a band are candidates,
//! and each candidate pair's exact cosine decides. At the default threshold (0.95, θ ≈ 18°) a
//! band agrees with probability ~0.43, so a pair is missed with probability below 2 %.

use cairn_index::PageRecord;
use cairn_ingest::normalize_name;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

/// Cosine at or above which two chunks count as near-identical (see BENCHMARKS.md for how the
/// default was chosen on data).
pub const NEAR_IDENTICAL: f32 = 0.95;

/// A page in a group.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct PageRef {
    pub source: String,
    pub slug: String,
    pub title: String,
}

/// Pages that look like one subject, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DuplicateGroup {
    /// `same_name`, `same_content` or `near_identical_chunks`.
    pub kind: String,
    pub pages: Vec<PageRef>,
    /// The shared name, the content hash, or the closest chunk pair with its cosine.
    pub evidence: String,
    /// The closest pair's cosine (near-identical chunks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f32>,
}

fn page_ref(source: &str, p: &PageRecord) -> PageRef {
    PageRef { source: source.into(), slug: p.slug.clone(), title: p.title.clone() }
}

/// Names claimed by more than one page, and content held by more than one page.
pub fn by_name_and_content(pages: &[(&str, &PageRecord)]) -> Vec<DuplicateGroup> {
    let mut names: BTreeMap<String, Vec<PageRef>> = BTreeMap::new();
    let mut contents: BTreeMap<&str, Vec<PageRef>> = BTreeMap::new();
    for (source, p) in pages {
        let mut own: Vec<String> = std::iter::once(normalize_name(&p.title))
            .chain(p.aliases.iter().map(|a| normalize_name(a)))
            .chain(std::iter::once(normalize_name(&cairn_index::resident::file_name(&p.path))))
            .filter(|n| !n.is_empty())
            .collect();
        own.sort();
        own.dedup();
        for n in own {
            names.entry(n).or_default().push(page_ref(source, p));
        }
        if !p.content_hash.is_empty() {
            contents.entry(p.content_hash.as_str()).or_default().push(page_ref(source, p));
        }
    }
    let mut out: Vec<DuplicateGroup> = Vec::new();
    for (hash, mut group) in contents.into_iter().filter(|(_, g)| g.len() > 1) {
        group.sort();
        out.push(DuplicateGroup {
            kind: "same_content".into(),
            pages: group,
            evidence: format!("content {}", &hash[..hash.len().min(16)]),
            cosine: None,
        });
    }
    for (name, mut group) in names.into_iter().filter(|(_, g)| g.len() > 1) {
        group.sort();
        // Pages already grouped by identical content share their names too: said once.
        if out.iter().any(|g| g.kind == "same_content" && g.pages == group) {
            continue;
        }
        out.push(DuplicateGroup {
            kind: "same_name".into(),
            pages: group,
            evidence: format!("name \"{name}\""),
            cosine: None,
        });
    }
    out
}

/// 64 random hyperplanes of `dim` dimensions (a fixed seed: the same groups every run).
fn hyperplanes(dim: usize) -> Vec<Vec<f32>> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    (0..64).map(|_| (0..dim).map(|_| next()).collect()).collect()
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A chunk for [`near_identical`]: its source, page and id.
pub type ChunkRef<'a> = (&'a str, &'a str, &'a str);

/// Groups of pages joined by chunks (of different pages) at cosine ≥ `threshold`. `vector(i)`
/// is chunk `i`'s unit vector, asked for when needed (once for its signature, then per candidate
/// pair): a source holding int8 codes decodes one at a time rather than every one at once.
pub fn near_identical<'v>(
    chunks: &[ChunkRef<'_>],
    vector: &dyn Fn(usize) -> Cow<'v, [f32]>,
    titles: &HashMap<(String, String), String>,
    threshold: f32,
) -> Vec<DuplicateGroup> {
    if chunks.is_empty() {
        return Vec::new();
    }
    let planes = hyperplanes(vector(0).len());
    let signatures: Vec<u64> = (0..chunks.len())
        .map(|c| {
            let v = vector(c);
            planes.iter().enumerate().fold(0u64, |s, (i, p)| if dot(&v, p) >= 0.0 { s | 1 << i } else { s })
        })
        .collect();
    // Best pair per pair of pages.
    let mut best: HashMap<(usize, usize), (f32, usize, usize)> = HashMap::new();
    let page_of = |i: usize| (chunks[i].0, chunks[i].1);
    let mut page_ids: HashMap<(&str, &str), usize> = HashMap::new();
    for c in chunks {
        let n = page_ids.len();
        page_ids.entry((c.0, c.1)).or_insert(n);
    }
    for band in 0..8 {
        let mut buckets: HashMap<u8, Vec<usize>> = HashMap::new();
        for (i, s) in signatures.iter().enumerate() {
            buckets.entry((s >> (band * 8)) as u8).or_default().push(i);
        }
        for members in buckets.values() {
            for (x, &i) in members.iter().enumerate() {
                for &j in &members[x + 1..] {
                    let (pi, pj) = (page_ids[&page_of(i)], page_ids[&page_of(j)]);
                    if pi == pj {
                        continue;
                    }
                    let key = (pi.min(pj), pi.max(pj));
                    if best.get(&key).is_some_and(|(c, _, _)| *c >= 1.0) {
                        continue;
                    }
                    let c = dot(&vector(i), &vector(j));
                    if c >= threshold && best.get(&key).is_none_or(|(b, _, _)| c > *b) {
                        best.insert(key, (c, i, j));
                    }
                }
            }
        }
    }
    // Pages joined by any such pair form one group (union-find).
    let mut parent: Vec<usize> = (0..page_ids.len()).collect();
    fn find(parent: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while parent[r] != r {
            r = parent[r];
        }
        let mut y = x;
        while parent[y] != r {
            let next = parent[y];
            parent[y] = r;
            y = next;
        }
        r
    }
    for &(a, b) in best.keys() {
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        parent[ra.max(rb)] = ra.min(rb);
    }
    let mut by_root: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let pages_by_id: HashMap<usize, (&str, &str)> = page_ids.iter().map(|(k, v)| (*v, *k)).collect();
    for &(a, b) in best.keys() {
        for p in [a, b] {
            let r = find(&mut parent, p);
            let g = by_root.entry(r).or_default();
            if !g.contains(&p) {
                g.push(p);
            }
        }
    }
    let mut out: Vec<DuplicateGroup> = by_root
        .into_values()
        .map(|members| {
            let (cos, i, j) = best
                .iter()
                .filter(|((a, _), _)| members.contains(a))
                .map(|(_, v)| *v)
                .fold((0.0, 0, 0), |m, v| if v.0 > m.0 { v } else { m });
            let mut pages: Vec<PageRef> = members
                .iter()
                .map(|p| {
                    let (source, slug) = pages_by_id[p];
                    let title =
                        titles.get(&(source.to_string(), slug.to_string())).cloned().unwrap_or_default();
                    PageRef { source: source.into(), slug: slug.into(), title }
                })
                .collect();
            pages.sort();
            DuplicateGroup {
                kind: "near_identical_chunks".into(),
                pages,
                evidence: format!(
                    "chunks {}:{} and {}:{} at cosine {cos:.3}",
                    chunks[i].0, chunks[i].2, chunks[j].0, chunks[j].2
                ),
                cosine: Some(cos),
            }
        })
        .collect();
    out.sort_by(|a, b| {
        b.cosine.unwrap_or(0.0).total_cmp(&a.cosine.unwrap_or(0.0)).then(a.pages.cmp(&b.pages))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn shared_names_and_identical_content_group_pages_across_sources() {
        let mut a = PageRecord::named("cairns", "Cairns", &["stone piles"], 1);
        a.content_hash = "h1".into();
        let mut b = PageRecord::named("notes/cairn-building", "Cairn building", &["Stone Piles"], 1);
        b.content_hash = "h2".into();
        let mut c = PageRecord::named("copy", "Copy", &[], 1);
        c.content_hash = "h1".into();
        let groups = by_name_and_content(&[("hills", &a), ("notes", &b), ("notes", &c)]);
        let kinds: Vec<(&str, usize)> = groups.iter().map(|g| (g.kind.as_str(), g.pages.len())).collect();
        assert_eq!(kinds, [("same_content", 2), ("same_name", 2)]);
        assert!(groups[1].evidence.contains("stone piles"));
    }

    #[test]
    fn near_identical_chunks_join_their_pages_and_others_do_not() {
        let v = |x: &[f32]| unit(x);
        let (a, b, c, d) = (
            v(&[1.0, 0.2, 0.0, 0.1]),
            v(&[1.0, 0.21, 0.0, 0.1]),
            v(&[0.0, 1.0, 0.3, 0.0]),
            v(&[0.0, 0.0, 0.2, 1.0]),
        );
        let chunks: Vec<ChunkRef<'_>> =
            vec![("s", "p1", "p1#0"), ("s", "p2", "p2#0"), ("t", "p3", "p3#0"), ("s", "p1", "p1#1")];
        let vectors = [a, b, c, d];
        let groups = near_identical(&chunks, &|i| Cow::Borrowed(&vectors[i]), &HashMap::new(), 0.95);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].pages.iter().map(|p| p.slug.as_str()).collect::<Vec<_>>(), ["p1", "p2"]);
        assert!(groups[0].cosine.unwrap() > 0.99);
    }
}
