//! `cairn eval`: run judged queries through the same path as `cairn search` and report
//! Hit@1/3, MRR@10, Recall@10/100, nDCG@10 and forbidden-clean@3, overall and per family;
//! gate files set floors and every breach is named.

use crate::Cairn;
use anyhow::{Context, Result, bail};
use cairn_query::SearchRequest;
use cairn_query::metrics::{Judged, QueryScore, Summary, by_family, score};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

mod drafts;
mod exists;
mod links;
mod subjects;
mod typos;

pub use drafts::*;
pub use exists::*;
pub use links::*;
pub use subjects::*;
pub use typos::*;

/// Load a query file: JSON Lines in the shared eval format (`query`, `relevant`, optional
/// `forbidden`, `grades`, `family`, `id`), or the gbrain bootstrap JSON array (`expect_slug`).
/// Page ids stay as written ([`resolve_page_ids`] makes them slugs of an index). Queries whose
/// boolean flag named in `skip_flags` is true are left out.
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
    let strings = |v: &serde_json::Value, key: &str| -> Vec<String> {
        v.get(key)
            .and_then(|x| x.as_array())
            .map_or_else(Vec::new, |a| a.iter().filter_map(|s| s.as_str()).map(str::to_string).collect())
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
            relevant.push(s.to_string());
        }
        let grades: HashMap<String, f64> = v
            .get("grades")
            .and_then(|g| g.as_object())
            .map(|g| g.iter().filter_map(|(k, x)| Some((k.clone(), x.as_f64()?))).collect())
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

/// The queries with their page ids (a page's path in its vault without `.md`, or a slug) made
/// the slugs of `searcher`'s pages: an id is the page whose file has that path, whichever of the
/// slugs its name makes it has (`C` is `C.md`'s page `c`, `(c)` is `(c).md`'s `c~2`); an id that
/// is no file's path is taken as a slug (ids written as slugs, or spelled otherwise).
pub async fn resolve_page_ids(searcher: &Cairn, queries: &[Judged]) -> Result<Vec<Judged>> {
    let sources: Vec<String> = searcher.status().await?.sources.into_iter().map(|s| s.source).collect();
    let mut slugs: HashMap<String, String> = HashMap::new();
    for q in queries {
        for id in q.relevant.iter().chain(&q.forbidden).chain(q.grades.keys()) {
            if !slugs.contains_key(id) {
                slugs.insert(id.clone(), page_slug(searcher, &sources, id).await?);
            }
        }
    }
    let slug = |id: &String| slugs[id].clone();
    Ok(queries
        .iter()
        .map(|q| Judged {
            relevant: q.relevant.iter().map(slug).collect(),
            forbidden: q.forbidden.iter().map(slug).collect(),
            grades: q.grades.iter().map(|(id, g)| (slug(id), *g)).collect(),
            ..q.clone()
        })
        .collect())
}

/// The slug of the page whose file is at page id `id` in one of `sources`, else `id` as a slug.
async fn page_slug(searcher: &Cairn, sources: &[String], id: &str) -> Result<String> {
    let Some(base) = cairn_ingest::slugify_id(id) else { return Ok(id.to_string()) };
    Ok(find_page(searcher, sources, id).await?.unwrap_or(base))
}

/// The slug of the page whose path is `id` (`notes/x.md`, or without `.md`), in any of
/// `sources`; `None` when the index holds no such page.
pub async fn find_page(searcher: &Cairn, sources: &[String], id: &str) -> Result<Option<String>> {
    let Some(base) = cairn_ingest::slugify_id(id) else { return Ok(None) };
    let wanted = cairn_ingest::page_id(id);
    for source in sources {
        for k in 1.. {
            let slug = cairn_ingest::slug_variant(&base, k);
            match searcher.get(source, &slug).await? {
                Some(p) if cairn_ingest::page_id(&p.page.path) == wanted => return Ok(Some(slug)),
                None if k > 1 => break,
                _ => {}
            }
        }
    }
    Ok(None)
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
    /// Queries whose first result said `create_safety: exists` (a query set of names no page
    /// has, such as `--typos`, must have none).
    pub top_exists: usize,
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
        if self.top_exists > 0 {
            writeln!(f, "first results saying `exists`: {} of {}", self.top_exists, self.queries)?;
        }
        Ok(())
    }
}

/// A rule `cairn eval --ablate` turns off, to measure what it does on the same index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Rule {
    /// Subject pages first: pages a phrase of the query names, above pages that mention them.
    Subjects,
    /// Names the vault teaches: short forms its text defines, link display texts.
    LearntNames,
    /// Fields: a chunk's heading path and text scored apart by the keyword arm (BM25F).
    Fields,
    /// Feedback: a query that names no page moved toward its first answers' vectors.
    Feedback,
    /// Fuzzy names: a short query a typo away from a page's own name finds that page.
    FuzzyNames,
    /// Compounds: a query's compound word the source never holds read as the parts it holds, and
    /// a query word met by the source's compounds that end in it.
    Compounds,
}

/// The rule as `--ablate` names it.
impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use clap::ValueEnum as _;
        f.write_str(self.to_possible_value().expect("no rule is skipped").get_name())
    }
}

impl Rule {
    /// `request` with this rule off.
    pub fn off(self, request: &SearchRequest) -> SearchRequest {
        let mut r = request.clone();
        match self {
            Rule::Subjects => r.ablation.without_subjects = true,
            Rule::LearntNames => r.ablation.without_learnt_names = true,
            Rule::Fields => r.ablation.without_fields = true,
            Rule::Feedback => r.ablation.without_feedback = true,
            Rule::FuzzyNames => r.ablation.without_fuzzy_names = true,
            Rule::Compounds => r.ablation.without_compounds = true,
        }
        r
    }
}

/// Run every query (each as `template` with its query put in; `template.limit` results each,
/// so Recall@100 needs 100) and score the rankings. Queries run a few at a time: each spends
/// most of its time waiting on the store.
pub async fn run(searcher: &Cairn, queries: &[Judged], template: &SearchRequest) -> Result<EvalReport> {
    use futures::StreamExt;
    let rankings: Vec<Result<(Vec<String>, bool)>> = futures::stream::iter(queries)
        .map(|q| async move {
            let req = SearchRequest { query: q.query.clone(), ..template.clone() };
            match searcher.search(req).await {
                Ok(resp) => {
                    let exists = resp
                        .results
                        .first()
                        .is_some_and(|r| r.create_safety == cairn_query::CreateSafety::Exists);
                    Ok((resp.results.into_iter().map(|r| r.slug).collect::<Vec<String>>(), exists))
                }
                Err(e) => Err(anyhow::Error::from(e)),
            }
        })
        .buffered(4)
        .collect()
        .await;
    let mut scores: Vec<QueryScore> = Vec::with_capacity(queries.len());
    let mut misses = Vec::new();
    let mut top_exists = 0;
    for (q, ranking) in queries.iter().zip(rankings) {
        let (ranking, exists) = ranking?;
        top_exists += usize::from(exists);
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
    Ok(EvalReport { queries: queries.len(), top_exists, overall, families, misses })
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
        /// At most this many queries may get an `exists` first result.
        #[serde(default)]
        max_top_exists: Option<usize>,
    }
    let gates: Gates = toml::from_str(gates).context("gate file")?;
    let mut breaches = Vec::new();
    if let Some(max) = gates.max_top_exists.filter(|m| report.top_exists > *m) {
        breaches.push(format!("{} queries got an `exists` first result, more than {max}", report.top_exists));
    }
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

/// The rules' floors of a gate file: what each rule, turned off with `--ablate`, must be worth.
/// ```toml
/// [rules.feedback]
/// ndcg_at_10 = 0.0   # with the rule at least as good as without it
/// ```
/// A rule named in the gate but not ablated in the run is a breach (it was not measured).
pub fn check_rule_gates(
    with: &EvalReport,
    without: &[(Rule, EvalReport)],
    gates: &str,
) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Gates {
        #[serde(default)]
        rules: BTreeMap<String, BTreeMap<String, f64>>,
    }
    let gates: Gates = toml::from_str(gates).context("gate file")?;
    let mut breaches = Vec::new();
    for (rule, floors) in &gates.rules {
        let Some((_, off)) = without.iter().find(|(r, _)| r.to_string() == *rule) else {
            breaches.push(format!("rule {rule}: not ablated in this run (add --ablate {rule})"));
            continue;
        };
        for (metric, floor) in floors {
            let (Some(a), Some(b)) = (with.overall.metrics.get(metric), off.overall.metrics.get(metric))
            else {
                bail!("gate file: unknown metric `{metric}`");
            };
            if a - b + 1e-12 < *floor {
                breaches.push(format!("rule {rule} gains {:+.4} {metric}, below {floor}", a - b));
            }
        }
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
