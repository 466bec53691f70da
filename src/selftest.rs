//! `cairn selftest`: how well the index finds the user's own pages by the names people use for
//! them. Queries are generated from the vault itself (each page's title, aliases, file name and
//! section headings), asked as a user would, and scored Hit@1 per family; every miss carries
//! `diagnose`'s verdict, so a miss says where the page was lost.

use crate::Cairn;
use anyhow::Result;
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, normalize_name, read_scanned, scan};
use cairn_query::{CreateSafety, Mode, SearchRequest};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::Path;

/// The query families, in report order.
pub const FAMILIES: [&str; 4] = ["title", "alias", "file_name", "heading"];

#[derive(Debug, Clone, Serialize)]
pub struct SelftestOptions {
    /// Only this source (default: every source of the database).
    pub source: Option<String>,
    /// At most this many queries per family, a fixed sample (the same on every run).
    pub per_family: usize,
    pub mode: Mode,
}

#[derive(Debug, Default, Serialize)]
pub struct FamilyReport {
    pub family: String,
    /// Queries asked (ambiguous and unindexed pages excluded).
    pub queries: usize,
    /// The page came back at rank 1.
    pub hits: usize,
    pub hit_at_1: f64,
    /// Of the hits, how many said `create_safety: exists` (names only; not for headings).
    pub exists: usize,
    /// Names several pages share (reported by `cairn duplicates`), not asked.
    pub ambiguous: usize,
    /// Pages in the folder the index does not hold (excluded, failed or not yet indexed).
    pub not_indexed: usize,
    pub misses: Vec<SelftestMiss>,
}

#[derive(Debug, Serialize)]
pub struct SelftestMiss {
    pub query: String,
    pub expected: String,
    /// What came first instead (`source:slug`), if anything did.
    pub top: Option<String>,
    pub rank: Option<usize>,
    pub verdict: String,
}

#[derive(Debug, Default, Serialize)]
pub struct SelftestReport {
    pub sources: Vec<String>,
    pub pages: usize,
    pub mode: Mode,
    /// The most queries asked per family.
    pub per_family: usize,
    pub families: Vec<FamilyReport>,
}

/// The families' Hit@1 as a table, then each miss with diagnose's verdict.
impl std::fmt::Display for SelftestReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (sources, pages, mode, per_family) =
            (self.sources.join(", "), self.pages, self.mode, self.per_family);
        writeln!(
            f,
            "selftest of {sources} ({pages} pages, mode {mode}, at most {per_family} queries per family)"
        )?;
        let head = ("family", "queries", "hit@1", "exists", "ambiguous", "not indexed");
        writeln!(f, "{:<10} {:>7} {:>6} {:>7} {:>9} {:>11}", head.0, head.1, head.2, head.3, head.4, head.5)?;
        for r in &self.families {
            let (fam, n, hit, ex, amb, ni) =
                (&r.family, r.queries, r.hit_at_1, r.exists, r.ambiguous, r.not_indexed);
            writeln!(f, "{fam:<10} {n:>7} {hit:>6.3} {ex:>7} {amb:>9} {ni:>11}")?;
        }
        for r in &self.families {
            for m in &r.misses {
                let top = m.top.as_deref().unwrap_or("nothing");
                writeln!(
                    f,
                    "miss {} {:?}: expected {}, rank 1 {top} ({})",
                    r.family, m.query, m.expected, m.verdict
                )?;
            }
        }
        Ok(())
    }
}

/// One generated query: its family, its text and the page it names.
struct Probe {
    family: &'static str,
    query: String,
    page: (String, String),
}

/// Generate the probes from every source's folder (as the index reads it), run them, diagnose
/// the misses.
pub async fn selftest(cairn: &Cairn, opts: &SelftestOptions) -> Result<SelftestReport> {
    let parse = cairn.config().limits.parse_options();
    let registry = cairn.config().database().await?.sources().await?;
    let mut report =
        SelftestReport { mode: opts.mode, per_family: opts.per_family, ..SelftestReport::default() };
    let mut probes = Vec::new();
    for info in &registry {
        if opts.source.as_ref().is_some_and(|s| *s != info.id) {
            continue;
        }
        let Some(root) = info.root.as_deref() else { continue };
        let scan_opts = ScanOptions { include: info.include.clone(), exclude: info.exclude.clone() };
        let (pages, found) = probes_of(&info.id, Path::new(root), &scan_opts, &parse)?;
        report.sources.push(info.id.clone());
        report.pages += pages;
        probes.extend(found);
    }
    if let Some(s) = opts.source.as_ref().filter(|s| !report.sources.contains(s)) {
        anyhow::bail!("no source `{s}` in {}; `cairn status` lists the sources", cairn.config().db);
    }
    // A name several pages carry (any family) names none of them; a heading counts only when
    // no page is named by it and one page has it.
    let mut owners: HashMap<String, HashSet<(String, String)>> = HashMap::new();
    for p in &probes {
        owners.entry(normalize_name(&p.query)).or_default().insert(p.page.clone());
    }
    let mut by_family: BTreeMap<usize, Vec<Probe>> = BTreeMap::new();
    let mut ambiguous = [0usize; FAMILIES.len()];
    let mut seen = HashSet::new();
    for p in probes {
        let f = FAMILIES.iter().position(|f| *f == p.family).expect("a family");
        if !seen.insert((f, normalize_name(&p.query), p.page.clone())) {
            continue;
        }
        if owners[&normalize_name(&p.query)].len() > 1 {
            ambiguous[f] += 1;
            continue;
        }
        by_family.entry(f).or_default().push(p);
    }
    for (f, family) in FAMILIES.iter().enumerate() {
        let mut probes = by_family.remove(&f).unwrap_or_default();
        probes.sort_by_key(|p| sample_key(&p.query, &p.page.1));
        probes.truncate(opts.per_family);
        let mut r =
            FamilyReport { family: family.to_string(), ambiguous: ambiguous[f], ..FamilyReport::default() };
        for p in probes {
            run_probe(cairn, opts.mode, &p, &mut r).await?;
        }
        r.hit_at_1 = if r.queries == 0 { 0.0 } else { r.hits as f64 / r.queries as f64 };
        report.families.push(r);
    }
    Ok(report)
}

async fn run_probe(cairn: &Cairn, mode: Mode, p: &Probe, r: &mut FamilyReport) -> Result<()> {
    let mut req = SearchRequest::new(p.query.clone());
    req.mode = mode;
    let resp = cairn.search(req.clone()).await?;
    let (source, slug) = &p.page;
    let top = resp.results.first();
    if top.is_some_and(|t| t.source == *source && t.slug == *slug) {
        r.queries += 1;
        r.hits += 1;
        if top.is_some_and(|t| t.create_safety == CreateSafety::Exists) {
            r.exists += 1;
        }
        return Ok(());
    }
    let d = cairn.diagnose(req, source, slug).await?;
    if d.page.is_none() {
        r.not_indexed += 1;
        return Ok(());
    }
    r.queries += 1;
    r.misses.push(SelftestMiss {
        query: p.query.clone(),
        expected: format!("{source}:{slug}"),
        top: top.map(|t| format!("{}:{}", t.source, t.slug)),
        rank: d.final_rank,
        verdict: d.verdict,
    });
    Ok(())
}

/// A fixed pseudo-random order, so a sample is the same on every run and machine (FNV-1a).
fn sample_key(query: &str, slug: &str) -> u64 {
    struct Fnv(u64);
    impl Hasher for Fnv {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    (query, slug).hash(&mut h);
    h.finish()
}

/// The probes of one folder: every page's title, aliases, file name (when it differs from the
/// title) and section headings (when they differ from the page's names). Returns the number of
/// pages read too.
fn probes_of(
    id: &str,
    root: &Path,
    scan_opts: &ScanOptions,
    parse: &ParseOptions,
) -> Result<(usize, Vec<Probe>)> {
    let report = scan(root, &PathFilter::new(scan_opts)?)?;
    let mut out = Vec::new();
    let mut pages = 0;
    for f in &report.files {
        let Ok(page) = read_scanned(id, root, &report, f, parse) else { continue };
        pages += 1;
        let key = (id.to_string(), page.slug.clone());
        let probe = |family, query: &str| Probe { family, query: query.to_string(), page: key.clone() };
        let mut names: HashSet<String> = HashSet::new();
        let mut push = |family, query: &str, out: &mut Vec<Probe>| {
            if query.chars().any(char::is_alphanumeric) && names.insert(normalize_name(query)) {
                out.push(probe(family, query));
            }
        };
        push("title", &page.title, &mut out);
        for a in &page.aliases {
            push("alias", a, &mut out);
        }
        push("file_name", &cairn_index::resident::file_name(&page.path), &mut out);
        for h in &page.headings {
            push("heading", h, &mut out);
        }
    }
    Ok((pages, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_cover_every_family_once_per_name() {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let p = dir.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write(
            "meetings/Standup 2024-05-01.md",
            "---\naliases: [daily standup]\n---\n# Agenda\n\nitems\n\n## Blockers\n\nnone\n",
        );
        write("Ada.md", "# Ada\n\nA language.\n");
        let (pages, probes) =
            probes_of("v", dir.path(), &ScanOptions::default(), &ParseOptions::default()).unwrap();
        assert_eq!(pages, 2);
        let mut got: Vec<(&str, &str, &str)> =
            probes.iter().map(|p| (p.family, p.query.as_str(), p.page.1.as_str())).collect();
        got.sort();
        assert_eq!(
            got,
            [
                ("alias", "daily standup", "meetings/standup-2024-05-01"),
                ("file_name", "Standup 2024-05-01", "meetings/standup-2024-05-01"),
                ("heading", "Blockers", "meetings/standup-2024-05-01"),
                ("title", "Ada", "ada"),
                ("title", "Agenda", "meetings/standup-2024-05-01"),
            ],
            "Ada's file name and heading repeat its title and are asked once"
        );
    }
}
