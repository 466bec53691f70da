//! `cairn eval --exists`: how far `create_safety: exists` can be trusted, both ways.

use crate::Cairn;
use anyhow::{Context, Result};
use cairn_query::{Mode, SearchRequest};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// How far `create_safety: exists` can be trusted, measured both ways on a vault: pages held out
/// by a hash rule are not indexed, and their titles and aliases must not come back `exists` at
/// rank 1 (false `exists`); present pages' titles must bring their page back with `exists`,
/// with `exists` at rank 1 (recall; pages sharing a title are listed together, so the page may
/// be second or third of them).
#[derive(Debug, Default, Serialize)]
pub struct ExistsReport {
    pub pages: usize,
    pub held_out: usize,
    /// Held-out titles and aliases asked, and how many came back `exists` at rank 1.
    pub absent_queries: usize,
    pub false_exists: usize,
    /// Of those, the ones where a present page carries that very name (title, alias or file
    /// name): a name two pages share, not a false claim.
    pub false_exists_named_elsewhere: usize,
    pub false_exists_rate: f64,
    /// Present titles asked, and how many brought their page back with `exists`.
    pub present_queries: usize,
    pub exists_found: usize,
    pub exists_recall: f64,
    /// Every false `exists` and every recall miss, for inspection.
    pub misses: Vec<ExistsMiss>,
}

/// One line: the false `exists` rate over held-out pages, and the recall over present titles.
impl std::fmt::Display for ExistsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "pages {} (held out {}): false exists {}/{} = {:.4} ({} more named by a present page); exists recall {}/{} = {:.4}",
            self.pages,
            self.held_out,
            self.false_exists,
            self.absent_queries,
            self.false_exists_rate,
            self.false_exists_named_elsewhere,
            self.exists_found,
            self.present_queries,
            self.exists_recall
        )
    }
}

/// One query the measure counts against cairn.
#[derive(Debug, Serialize)]
pub struct ExistsMiss {
    pub query: String,
    /// `false_exists` or `recall`.
    pub kind: &'static str,
    pub expected: Option<String>,
    pub top: Option<String>,
    pub evidence: Vec<String>,
    pub cosine: Option<f32>,
}

/// Whether a vault page is held out: one in `every` by a hash of its path (stable across runs
/// and machines).
pub fn held_out(rel: &str, every: u64) -> bool {
    let h = cairn_ingest::hex_digest(&[rel.as_bytes()]);
    u64::from_str_radix(&h[..12], 16).unwrap_or(0).is_multiple_of(every.max(2))
}

/// The held-out split of a vault: the names asked of an index that lacks their pages, the
/// titles asked of one that holds them, and every present page's own names.
#[derive(Default)]
struct HeldOut {
    pages: usize,
    held_out: usize,
    /// (query, held-out slug)
    absent: Vec<(String, String)>,
    /// (title, slug)
    present: Vec<(String, String)>,
    /// Each present page's own names (title, aliases, file name, slug), folded as names are.
    names: HashMap<String, std::collections::HashSet<String>>,
}

impl HeldOut {
    /// Whether the present page `slug` carries the name `q` itself.
    fn carries(&self, slug: &str, q: &str) -> bool {
        self.names.get(slug).is_some_and(|n| n.contains(&cairn_ingest::normalize_name(q)))
    }
}

/// Copy the pages of `vault` not held out into `dest`, and collect the queries.
fn hold_out(vault: &Path, dest: &Path, every: u64) -> Result<HeldOut> {
    use cairn_ingest::{
        ParseOptions, PathFilter, ScanOptions, normalize_name, read_scanned, rel_string, scan,
    };
    let report = scan(vault, &PathFilter::new(&ScanOptions::default())?)?;
    let mut split = HeldOut { pages: report.files.len(), ..HeldOut::default() };
    for (i, f) in report.files.iter().enumerate() {
        let rel = rel_string(&f.rel);
        let Ok(page) = read_scanned("x", vault, &report, f, &ParseOptions::default()) else { continue };
        if held_out(&rel, every) {
            split.held_out += 1;
            split.absent.push((page.title.clone(), page.slug.clone()));
            split.absent.extend(page.aliases.iter().map(|a| (a.clone(), page.slug.clone())));
            continue;
        }
        let file = cairn_index::resident::file_name(&rel);
        let own = [&page.title, &file, &page.slug].into_iter().chain(&page.aliases);
        split.names.insert(page.slug.clone(), own.map(|n| normalize_name(n)).collect());
        let to = dest.join(&f.rel);
        std::fs::create_dir_all(to.parent().context("a file has a folder")?)?;
        std::fs::copy(vault.join(&f.rel), &to)?;
        if (i as u64).is_multiple_of(every) {
            split.present.push((page.title.clone(), page.slug.clone()));
        }
    }
    Ok(split)
}

/// A miss of the `exists` measure, told by the answer's top result.
fn exists_miss(
    query: &str,
    kind: &'static str,
    expected: Option<String>,
    top: Option<&cairn_query::SearchResult>,
) -> ExistsMiss {
    ExistsMiss {
        query: query.to_string(),
        kind,
        expected,
        top: top.map(|t| t.slug.clone()),
        evidence: top.map(|t| t.evidence.iter().map(ToString::to_string).collect()).unwrap_or_default(),
        cosine: top.and_then(|t| t.cosine),
    }
}

/// Measure `exists` on `vault`: copy the pages not held out into `work`, index them into a
/// database there, and ask. `every`: one page in `every` is held out, one present title in
/// `every` is asked.
pub async fn exists_trust(vault: &Path, work: &Path, every: u64, mode: Mode) -> Result<ExistsReport> {
    let present_dir = work.join("vault");
    let split = hold_out(vault, &present_dir, every)?;
    let mut r = ExistsReport { pages: split.pages, held_out: split.held_out, ..ExistsReport::default() };
    let mut config = crate::Config::new(work.join("db").display().to_string(), Vec::new());
    config.sources.push(crate::SourceSpec { id: "vault".into(), root: present_dir }.config());
    crate::index(config.clone(), false, false).await?;
    config.sources.clear();
    let cairn = Cairn::attach(config, "eval", mode != Mode::Fast).await?;
    let ask = |q: &str| {
        let mut req = SearchRequest::new(q.to_string());
        req.mode = mode;
        req.limit = 3;
        cairn.search(req)
    };
    let askable = |q: &str| q.chars().any(char::is_alphanumeric);
    let exists = |t: &cairn_query::SearchResult| t.create_safety == cairn_query::CreateSafety::Exists;
    for (q, _) in split.absent.iter().filter(|(q, _)| askable(q)) {
        r.absent_queries += 1;
        let resp = ask(q).await?;
        let Some(top) = resp.results.first().filter(|t| exists(t)) else { continue };
        // A present page that really carries the name (held-out and present pages may share a
        // title) is a true `exists`; one that matched only after a lossy folding is not.
        if split.carries(&top.slug, q) {
            r.false_exists_named_elsewhere += 1;
        } else {
            r.false_exists += 1;
            r.misses.push(exists_miss(q, "false_exists", None, Some(top)));
        }
    }
    for (q, slug) in split.present.iter().filter(|(q, _)| askable(q)) {
        r.present_queries += 1;
        let resp = ask(q).await?;
        let top = resp.results.first();
        // The page itself among the `exists` results; or, for a title more pages share than the
        // answer holds, every result is an `exists` page carrying that very title.
        let crowded =
            resp.results.len() == 3 && resp.results.iter().all(|t| exists(t) && split.carries(&t.slug, q));
        if top.is_some_and(exists) && (resp.results.iter().any(|t| exists(t) && t.slug == *slug) || crowded) {
            r.exists_found += 1;
        } else {
            r.misses.push(exists_miss(q, "recall", Some(slug.clone()), top));
        }
    }
    r.false_exists_rate = r.false_exists as f64 / r.absent_queries.max(1) as f64;
    r.exists_recall = r.exists_found as f64 / r.present_queries.max(1) as f64;
    Ok(r)
}

/// Floors of `cairn eval --exists --gate`: `false_exists_rate` at most, `exists_recall` at least.
pub fn check_exists_gates(r: &ExistsReport, gates: &str) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Gates {
        max_false_exists_rate: f64,
        min_exists_recall: f64,
    }
    let g: Gates = toml::from_str(gates).context("gate file")?;
    let mut breaches = Vec::new();
    if r.false_exists_rate > g.max_false_exists_rate + 1e-12 {
        breaches.push(format!(
            "false exists rate {:.4} is above {}",
            r.false_exists_rate, g.max_false_exists_rate
        ));
    }
    if r.exists_recall + 1e-12 < g.min_exists_recall {
        breaches.push(format!("exists recall {:.4} is below {}", r.exists_recall, g.min_exists_recall));
    }
    Ok(breaches)
}
