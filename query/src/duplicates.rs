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
use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// `kind: source:slug, … (evidence)`, one line.
impl std::fmt::Display for DuplicateGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pages: Vec<String> = self.pages.iter().map(|p| format!("{}:{}", p.source, p.slug)).collect();
        writeln!(f, "{}: {} ({})", self.kind, pages.join(", "), self.evidence)
    }
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

/// A band's bucket up to this size compares all its pairs; a larger one (a template repeated
/// across thousands of pages puts them all in one) compares each chunk with its
/// [`NEIGHBOURS`] nearest in signature order. Pages are joined by a chain of close pairs, so
/// a group needs no more; the cost stays linear in the bucket, never quadratic.
const ALL_PAIRS_UP_TO: usize = 32;
const NEIGHBOURS: usize = 8;

/// A pair of chunks and their cosine: `(cosine, i, j)`.
type Pair = (f32, usize, usize);

/// Groups of pages joined by chunks (of different pages) at cosine ≥ `threshold`. `vector(i)`
/// is chunk `i`'s unit vector, asked for when needed (once for its signature, then per
/// candidate pair), or `None` when the chunk is gone since the list was taken: a caller may
/// read each vector under a lock of its own instead of holding one for the whole job, and a
/// source holding int8 codes decodes one at a time. `stop()` is asked now and then; when it
/// says so the job ends early with no groups (its client went away).
pub fn near_identical<'v>(
    chunks: &[ChunkRef<'_>],
    vector: &dyn Fn(usize) -> Option<Cow<'v, [f32]>>,
    titles: &HashMap<(String, String), String>,
    threshold: f32,
    stop: &dyn Fn() -> bool,
) -> Vec<DuplicateGroup> {
    let Some(signatures) = signatures(chunks.len(), vector, stop) else { return Vec::new() };
    let mut page_ids: HashMap<(&str, &str), usize> = HashMap::new();
    let page: Vec<usize> = chunks
        .iter()
        .map(|c| {
            let n = page_ids.len();
            *page_ids.entry((c.0, c.1)).or_insert(n)
        })
        .collect();
    let Some(best) = best_pairs(&signatures, &page, vector, threshold, stop) else { return Vec::new() };
    let pages_by_id: HashMap<usize, (&str, &str)> = page_ids.iter().map(|(k, v)| (*v, *k)).collect();
    let mut out: Vec<DuplicateGroup> = groups(&best, page_ids.len())
        .into_values()
        .map(|(members, (cos, i, j))| {
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

/// Each chunk's 64-bit signature (the sides of 64 fixed hyperplanes its vector is on), `None`
/// for a chunk gone; `None` for all when there are no vectors, or `stop()` said so.
fn signatures<'v>(
    n: usize,
    vector: &dyn Fn(usize) -> Option<Cow<'v, [f32]>>,
    stop: &dyn Fn() -> bool,
) -> Option<Vec<Option<u64>>> {
    let dim = (0..n).find_map(|i| vector(i).map(|v| v.len()))?;
    let planes = hyperplanes(dim);
    let mut signatures: Vec<Option<u64>> = Vec::with_capacity(n);
    for c in 0..n {
        if c % 4096 == 0 && stop() {
            return None;
        }
        signatures.push(vector(c).map(|v| {
            planes.iter().enumerate().fold(0u64, |s, (i, p)| if dot(&v, p) >= 0.0 { s | 1 << i } else { s })
        }));
    }
    Some(signatures)
}

/// The closest pair of chunks at cosine ≥ `threshold` for each pair of pages (by page number)
/// that has one, among the chunks that share a byte of their signatures (eight bands); `None`
/// when `stop()` said so.
fn best_pairs<'v>(
    signatures: &[Option<u64>],
    page: &[usize],
    vector: &dyn Fn(usize) -> Option<Cow<'v, [f32]>>,
    threshold: f32,
    stop: &dyn Fn() -> bool,
) -> Option<HashMap<(usize, usize), Pair>> {
    let mut best: HashMap<(usize, usize), Pair> = HashMap::new();
    let mut consider = |i: usize, j: usize| {
        let (pi, pj) = (page[i], page[j]);
        if pi == pj {
            return;
        }
        let key = (pi.min(pj), pi.max(pj));
        if best.get(&key).is_some_and(|(c, _, _)| *c >= 1.0) {
            return;
        }
        let (Some(a), Some(b)) = (vector(i), vector(j)) else { return };
        let c = dot(&a, &b);
        if c >= threshold && best.get(&key).is_none_or(|(b, _, _)| c > *b) {
            best.insert(key, (c, i, j));
        }
    };
    for band in 0..8 {
        let mut buckets: HashMap<u8, Vec<usize>> = HashMap::new();
        for (i, s) in signatures.iter().enumerate() {
            if let Some(s) = s {
                buckets.entry((s >> (band * 8)) as u8).or_default().push(i);
            }
        }
        for members in buckets.values_mut() {
            if stop() {
                return None;
            }
            let window = if members.len() <= ALL_PAIRS_UP_TO {
                members.len()
            } else {
                members.sort_by_key(|&i| (signatures[i], page[i]));
                NEIGHBOURS
            };
            for x in 0..members.len() {
                for &j in members.iter().skip(x + 1).take(window) {
                    consider(members[x], j);
                }
            }
        }
    }
    Some(best)
}

/// Pages joined by any pair form one group (union-find over `pages` page numbers): each group's
/// pages and its closest pair, by the group's smallest page number.
fn groups(best: &HashMap<(usize, usize), Pair>, pages: usize) -> BTreeMap<usize, (BTreeSet<usize>, Pair)> {
    let mut parent: Vec<usize> = (0..pages).collect();
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
    let mut by_root: BTreeMap<usize, (BTreeSet<usize>, Pair)> = BTreeMap::new();
    for (&(a, b), &pair) in best {
        let g = by_root.entry(find(&mut parent, a)).or_insert_with(|| (BTreeSet::new(), pair));
        g.0.extend([a, b]);
        if pair.0 > g.1.0 {
            g.1 = pair;
        }
    }
    by_root
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
        let groups =
            near_identical(&chunks, &|i| Some(Cow::Borrowed(&vectors[i])), &HashMap::new(), 0.95, &|| false);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].pages.iter().map(|p| p.slug.as_str()).collect::<Vec<_>>(), ["p1", "p2"]);
        assert!(groups[0].cosine.unwrap() > 0.99);
    }

    #[test]
    fn a_template_repeated_on_thousands_of_pages_is_one_group_found_in_linear_time() {
        // 20,000 pages whose first chunk is one template (all in one bucket of every band), and
        // a second chunk of their own; and two chunks gone since the list was taken.
        let n = 20_000;
        let template = unit(&[1.0, 0.5, 0.25, 0.125]);
        let own: Vec<Vec<f32>> =
            (0..n).map(|k| unit(&[0.0, (k % 7) as f32 - 3.0, 1.0, (k % 11) as f32])).collect();
        let slugs: Vec<String> = (0..n).map(|k| format!("p{k}")).collect();
        let ids: Vec<[String; 2]> = slugs.iter().map(|s| [format!("{s}#0"), format!("{s}#1")]).collect();
        let chunks: Vec<ChunkRef<'_>> = (0..n)
            .flat_map(|k| {
                [("s", slugs[k].as_str(), ids[k][0].as_str()), ("s", slugs[k].as_str(), ids[k][1].as_str())]
            })
            .collect();
        let asked = std::cell::Cell::new(0usize);
        let vector = |i: usize| -> Option<Cow<'_, [f32]>> {
            asked.set(asked.get() + 1);
            match (i / 2, i % 2) {
                (7 | 9, _) => None,
                (_, 0) => Some(Cow::Borrowed(&template)),
                (k, _) => Some(Cow::Borrowed(&own[k])),
            }
        };
        let started = std::time::Instant::now();
        let groups = near_identical(&chunks, &vector, &HashMap::new(), 0.95, &|| false);
        let template_group = groups.iter().find(|g| g.pages.iter().any(|p| p.slug == "p0")).unwrap();
        assert_eq!(template_group.pages.len(), n - 2, "every page but the two whose chunks went");
        assert!(!template_group.pages.iter().any(|p| p.slug == "p7" || p.slug == "p9"));
        // All pairs would be 8 bands × 2·10⁸; a window asks each vector a bounded number of times.
        assert!(asked.get() < 2 * n * 8 * 2 * (NEIGHBOURS + 1), "asked {} vectors", asked.get());
        eprintln!("20,000 template pages grouped in {:?}", started.elapsed());
        assert!(near_identical(&chunks, &vector, &HashMap::new(), 0.95, &|| true).is_empty());
    }
}
