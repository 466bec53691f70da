//! `cairn eval`: run judged queries through the same path as `cairn search` and report
//! Hit@1/3, MRR@10, Recall@10/100, nDCG@10 and forbidden-clean@3, overall and per family;
//! gate files set floors and every breach is named.

use crate::Cairn;
use anyhow::{Context, Result, bail};
use cairn_query::metrics::{Judged, QueryScore, Summary, by_family, score};
use cairn_query::{Mode, SearchRequest};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Load a query file: JSON Lines in the shared eval format (`query`, `relevant`, optional
/// `forbidden`, `grades`, `family`, `id`), or the gbrain bootstrap JSON array (`expect_slug`).
/// Page ids become slugs. Queries whose boolean flag named in `skip_flags` is true are left out.
pub fn load_queries(path: &Path, skip_flags: &[String]) -> Result<Vec<Judged>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let values: Vec<serde_json::Value> = if text.trim_start().starts_with('[') {
        serde_json::from_str(&text).with_context(|| format!("{}: not a JSON array", path.display()))?
    } else {
        text.lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).with_context(|| format!("{}:{}: not JSON", path.display(), i + 1))
            })
            .collect::<Result<_>>()?
    };
    let slug = |id: &str| cairn_ingest::slugify_id(id).unwrap_or_else(|| id.to_string());
    let strings = |v: &serde_json::Value, key: &str| -> Vec<String> {
        v.get(key)
            .and_then(|x| x.as_array())
            .map_or_else(Vec::new, |a| a.iter().filter_map(|s| s.as_str()).map(slug).collect())
    };
    let mut out = Vec::new();
    for (i, v) in values.iter().enumerate() {
        if skip_flags.iter().any(|f| v.get(f).and_then(|x| x.as_bool()) == Some(true)) {
            continue;
        }
        let Some(query) = v.get("query").and_then(|q| q.as_str()) else {
            bail!("{}: query {} has no `query`", path.display(), i + 1);
        };
        let mut relevant = strings(v, "relevant");
        if let Some(s) = v.get("expect_slug").and_then(|s| s.as_str()) {
            relevant.push(slug(s));
        }
        let grades: HashMap<String, f64> = v
            .get("grades")
            .and_then(|g| g.as_object())
            .map(|g| g.iter().filter_map(|(k, x)| Some((slug(k), x.as_f64()?))).collect())
            .unwrap_or_default();
        let family =
            ["family", "kind"].iter().find_map(|k| v.get(*k).and_then(|f| f.as_str())).unwrap_or("all");
        out.push(Judged {
            id: v.get("id").map_or_else(
                || (i + 1).to_string(),
                |x| x.as_str().map_or_else(|| x.to_string(), str::to_string),
            ),
            family: family.to_string(),
            query: query.to_string(),
            relevant,
            forbidden: strings(v, "forbidden"),
            grades,
        });
    }
    Ok(out)
}

/// A query that missed (no relevant page at rank 1, or a forbidden page in the top 3).
#[derive(Debug, Serialize)]
pub struct Miss {
    pub id: String,
    pub query: String,
    pub relevant: Vec<String>,
    pub top: Vec<String>,
}

/// The `--json` document.
#[derive(Debug, Serialize)]
pub struct EvalReport {
    pub queries: usize,
    pub overall: Summary,
    pub families: BTreeMap<String, Summary>,
    pub misses: Vec<Miss>,
}

/// One row of metrics per family and overall (the misses are the caller's to list).
impl std::fmt::Display for EvalReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let head = ["family", "n", "hit@1", "hit@3", "mrr10", "r@10", "r@100", "ndcg10", "fclean3"];
        let [a, b, c, d, e, g, h, i, j] = head;
        writeln!(f, "{a:<24} {b:>5} {c:>6} {d:>6} {e:>6} {g:>6} {h:>7} {i:>7} {j:>6}")?;
        let named = self.families.iter().map(|(n, s)| (n.as_str(), s));
        for (name, s) in named.chain([("overall", &self.overall)]) {
            let m = &s.metrics;
            writeln!(
                f,
                "{name:<24} {:>5} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>7.3} {:>7.3} {:>6.3}",
                s.n,
                m.hit_at_1,
                m.hit_at_3,
                m.mrr_at_10,
                m.recall_at_10,
                m.recall_at_100,
                m.ndcg_at_10,
                m.forbidden_clean_at_3
            )?;
        }
        Ok(())
    }
}

/// Run every query (at most `k` results each; Recall@100 needs `k` = 100) and score the
/// rankings. Queries run a few at a time: each spends most of its time waiting on LanceDB.
pub async fn run(
    searcher: &Cairn,
    queries: &[Judged],
    sources: &[String],
    mode: Mode,
    k: usize,
    pooled_baseline: bool,
) -> Result<EvalReport> {
    use futures::StreamExt;
    let rankings: Vec<Result<Vec<String>>> = futures::stream::iter(queries)
        .map(|q| async move {
            let req = SearchRequest {
                query: q.query.clone(),
                sources: sources.to_vec(),
                mode,
                limit: k,
                explain: false,
                filter: Default::default(),
                pooled_baseline,
            };
            match searcher.search(req).await {
                Ok(resp) => Ok(resp.results.into_iter().map(|r| r.slug).collect()),
                Err(e) => Err(anyhow::Error::from(e)),
            }
        })
        .buffered(4)
        .collect()
        .await;
    let mut scores: Vec<QueryScore> = Vec::with_capacity(queries.len());
    let mut misses = Vec::new();
    for (q, ranking) in queries.iter().zip(rankings) {
        let ranking = ranking?;
        let s = score(q, &ranking);
        let missed = s.relevance.is_some_and(|m| m.hit_at_1 < 1.0) || s.forbidden_clean == Some(false);
        if missed {
            misses.push(Miss {
                id: q.id.clone(),
                query: q.query.clone(),
                relevant: q.relevant.clone(),
                top: ranking.iter().take(5).cloned().collect(),
            });
        }
        scores.push(s);
    }
    let (overall, families) = by_family(queries, &scores);
    Ok(EvalReport { queries: queries.len(), overall, families, misses })
}

/// Floors from a gate file, e.g.
/// ```toml
/// [overall]
/// ndcg_at_10 = 0.35
/// [families."title-substring"]
/// hit_at_1 = 1.0
/// ```
/// Returns one line per breach (a family missing from the report is a breach too).
pub fn check_gates(report: &EvalReport, gates: &str) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Gates {
        #[serde(default)]
        overall: BTreeMap<String, f64>,
        #[serde(default)]
        families: BTreeMap<String, BTreeMap<String, f64>>,
    }
    let gates: Gates = toml::from_str(gates).context("gate file")?;
    let mut breaches = Vec::new();
    let mut check = |scope: &str, summary: Option<&Summary>, floors: &BTreeMap<String, f64>| -> Result<()> {
        for (metric, floor) in floors {
            let Some(s) = summary else {
                breaches.push(format!("{scope}: no queries in the report"));
                return Ok(());
            };
            let value =
                s.metrics.get(metric).with_context(|| format!("gate file: unknown metric `{metric}`"))?;
            if value + 1e-12 < *floor {
                breaches.push(format!("{scope} {metric} = {value:.4} is below the floor {floor}"));
            }
        }
        Ok(())
    };
    check("overall", Some(&report.overall), &gates.overall)?;
    for (family, floors) in &gates.families {
        check(&format!("family {family}"), report.families.get(family), floors)?;
    }
    Ok(breaches)
}

/// The figures of `b` that differ from `a`'s by more than `tolerance` (overall and per family),
/// one line each: what `eval --int8-too` fails on.
pub fn moved(a: &EvalReport, b: &EvalReport, tolerance: f64) -> Vec<String> {
    const METRICS: [&str; 7] = [
        "hit_at_1",
        "hit_at_3",
        "mrr_at_10",
        "recall_at_10",
        "recall_at_100",
        "ndcg_at_10",
        "forbidden_clean_at_3",
    ];
    let scopes = std::iter::once(("overall".to_string(), &a.overall, Some(&b.overall)))
        .chain(a.families.iter().map(|(f, s)| (format!("family {f}"), s, b.families.get(f))));
    let mut out = Vec::new();
    for (scope, x, y) in scopes {
        for m in METRICS {
            let (vx, vy) = (x.metrics.get(m), y.and_then(|y| y.metrics.get(m)));
            match (vx, vy) {
                (Some(vx), Some(vy)) if (vx - vy).abs() <= tolerance => {}
                _ => out.push(format!("{scope} {m}: {vx:.4?} exact, {vy:.4?} int8")),
            }
        }
    }
    out
}

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

/// Measure `exists` on `vault`: copy the pages not held out into `work`, index them into a
/// database there, and ask. `every`: one page in `every` is held out, one present title in
/// `every` is asked.
pub async fn exists_trust(vault: &Path, work: &Path, every: u64, mode: Mode) -> Result<ExistsReport> {
    use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, normalize_name, read_page, rel_string, scan};
    use std::collections::{HashMap, HashSet};
    let report = scan(vault, &PathFilter::new(&ScanOptions::default())?)?;
    let present_dir = work.join("vault");
    let mut absent: Vec<(String, String)> = Vec::new(); // (query, held-out slug)
    let mut present: Vec<(String, String)> = Vec::new(); // (title, slug)
    let mut r = ExistsReport { pages: report.files.len(), ..ExistsReport::default() };
    // Each present page's own names (title, aliases, file name, slug), folded as names are.
    let mut names: HashMap<String, HashSet<String>> = HashMap::new();
    for (i, f) in report.files.iter().enumerate() {
        let rel = rel_string(&f.rel);
        let Ok(page) = read_page("x", vault, &f.rel, &ParseOptions::default()) else { continue };
        if held_out(&rel, every) {
            r.held_out += 1;
            absent.push((page.title.clone(), page.slug.clone()));
            absent.extend(page.aliases.iter().map(|a| (a.clone(), page.slug.clone())));
            continue;
        }
        let file = cairn_index::resident::file_name(&rel);
        let own = [&page.title, &file, &page.slug].into_iter().chain(&page.aliases);
        names.insert(page.slug.clone(), own.map(|n| normalize_name(n)).collect());
        let dest = present_dir.join(&f.rel);
        std::fs::create_dir_all(dest.parent().context("a file has a folder")?)?;
        std::fs::copy(vault.join(&f.rel), &dest)?;
        if (i as u64).is_multiple_of(every) {
            present.push((page.title.clone(), page.slug.clone()));
        }
    }
    let mut config = crate::Config::new(work.join("db").display().to_string(), Vec::new());
    config.sources.push(crate::SourceSpec { id: "vault".into(), root: present_dir }.config());
    crate::index(config.clone(), false, false).await?;
    config.sources.clear();
    let cairn = Cairn::attach(config, "eval", mode != Mode::Fast).await?;
    let ask = |q: String| {
        let cairn = cairn.clone();
        async move {
            let mut req = SearchRequest::new(q);
            req.mode = mode;
            req.limit = 3;
            cairn.search(req).await
        }
    };
    for (q, _) in &absent {
        if !q.chars().any(char::is_alphanumeric) {
            continue;
        }
        r.absent_queries += 1;
        let resp = ask(q.clone()).await?;
        let Some(top) = resp.results.first() else { continue };
        if top.create_safety != cairn_query::CreateSafety::Exists {
            continue;
        }
        // A present page that really carries the name (held-out and present pages may share a
        // title) is a true `exists`; one that matched only after a lossy folding is not.
        if names.get(&top.slug).is_some_and(|n| n.contains(&normalize_name(q))) {
            r.false_exists_named_elsewhere += 1;
            continue;
        }
        r.false_exists += 1;
        r.misses.push(ExistsMiss {
            query: q.clone(),
            kind: "false_exists",
            expected: None,
            top: Some(top.slug.clone()),
            evidence: top.evidence.iter().map(ToString::to_string).collect(),
            cosine: top.cosine,
        });
    }
    for (q, slug) in &present {
        if !q.chars().any(char::is_alphanumeric) {
            continue;
        }
        r.present_queries += 1;
        let resp = ask(q.clone()).await?;
        let top = resp.results.first();
        let exists = |t: &cairn_query::SearchResult| t.create_safety == cairn_query::CreateSafety::Exists;
        // The page itself among the `exists` results; or, for a title more pages share than the
        // answer holds, every result is an `exists` page carrying that very title.
        let carries = |t: &cairn_query::SearchResult| {
            exists(t) && names.get(&t.slug).is_some_and(|n| n.contains(&normalize_name(q)))
        };
        let crowded = resp.results.len() == 3 && resp.results.iter().all(carries);
        if top.is_some_and(exists) && (resp.results.iter().any(|t| exists(t) && t.slug == *slug) || crowded) {
            r.exists_found += 1;
        } else {
            r.misses.push(ExistsMiss {
                query: q.clone(),
                kind: "recall",
                expected: Some(slug.clone()),
                top: top.map(|t| t.slug.clone()),
                evidence: top
                    .map(|t| t.evidence.iter().map(ToString::to_string).collect())
                    .unwrap_or_default(),
                cosine: top.and_then(|t| t.cosine),
            });
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
