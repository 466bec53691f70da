//! How well the index answers: `cairn eval` (judged queries, `--exists` or `--links`) and
//! `cairn selftest`.

use super::args::{Common, EvalArgs};
use super::{Usage, attach, config_only, mode, report, show};
use anyhow::Result;
use cairn::Cairn;
use cairn::eval::{EvalReport, Rule};
use cairn_query::SearchRequest;
use std::path::Path;
use std::process::ExitCode;

/// `--exists`: on a copy of `--vault` with pages held out, how often `exists` is wrong.
pub async fn exists(a: EvalArgs) -> Result<ExitCode> {
    on_a_copy(
        a,
        "exists",
        async |vault, work, every, mode| cairn::eval::exists_trust(vault, work, every, mode).await,
        |r| {
            let line = |m: &cairn::eval::ExistsMiss| {
                format!(
                    "{}: {:?} -> {:?} {:?} cosine {:?} (wanted {:?})",
                    m.kind, m.query, m.top, m.evidence, m.cosine, m.expected
                )
            };
            r.misses.iter().map(line).collect()
        },
        cairn::eval::check_exists_gates,
    )
    .await
}

/// `--links`: on a copy of `--vault` with labelled links held out, how often their display text
/// finds their target.
pub async fn links(a: EvalArgs) -> Result<ExitCode> {
    on_a_copy(
        a,
        "links",
        async |vault, work, every, mode| cairn::eval::link_names(vault, work, every, mode).await,
        |r| {
            r.misses
                .iter()
                .map(|(query, wanted, got)| format!("miss: {query:?} -> {got:?} (wanted {wanted})"))
                .collect()
        },
        cairn::eval::check_link_gates,
    )
    .await
}

/// `--drafts`: each draft `check`ed against the database (or `--vault` indexed first).
pub async fn drafts(common: &Common, a: EvalArgs) -> Result<ExitCode> {
    let file = a.drafts.as_deref().expect("--drafts");
    let drafts = cairn::eval::load_drafts(file)?;
    let (c, temp) = database(common, a.vault.as_deref(), "drafts").await?;
    let cairn = Cairn::attach(c, "eval", true).await?;
    let r = cairn::eval::check_drafts(&cairn, &drafts).await;
    if let Some(t) = &temp {
        let _ = std::fs::remove_dir_all(t);
    }
    let r = r?;
    report(&r, a.json)?;
    if !a.json {
        for m in r.misses.iter().take(20) {
            eprintln!("{:?}: {:?} -> {:?} (wanted {})", m.verdict, m.title, m.first, m.target);
        }
    }
    gate(a.gate.as_deref(), |text| cairn::eval::check_draft_gates(&r, text))
}

/// A measure made on a copy of `--vault` in a temporary folder (removed after): its report, its
/// first misses, its gate.
async fn on_a_copy<T>(
    a: EvalArgs,
    flag: &str,
    measure: impl AsyncFnOnce(&Path, &Path, u64, cairn_query::Mode) -> Result<T>,
    misses: impl Fn(&T) -> Vec<String>,
    check: impl Fn(&T, &str) -> Result<Vec<String>>,
) -> Result<ExitCode>
where
    T: serde::Serialize + std::fmt::Display,
{
    let mode = mode(&a.mode)?;
    let vault = a.vault.ok_or_else(|| Usage(format!("--{flag} needs --vault DIR")))?;
    let work = std::env::temp_dir().join(format!("cairn-{flag}-{}", std::process::id()));
    let r = measure(&vault, &work, a.every, mode).await;
    let _ = std::fs::remove_dir_all(&work);
    let r = r?;
    report(&r, a.json)?;
    if !a.json {
        misses(&r).iter().take(20).for_each(|m| eprintln!("{m}"));
    }
    gate(a.gate.as_deref(), |text| check(&r, text))
}

/// Judged queries over the database, or over `--vault` indexed into a temporary one first.
pub async fn eval(common: &Common, a: EvalArgs) -> Result<ExitCode> {
    let mode = mode(&a.mode)?;
    let judged = match (&a.queries, &a.subjects, &a.typos) {
        (_, Some(vault), _) => cairn::eval::subject_queries(vault, a.every)?,
        (_, _, Some(vault)) => cairn::eval::typo_queries(vault, a.every)?,
        (Some(queries), _, _) => cairn::eval::load_queries(queries, &a.skip_flags)?,
        _ => return Err(Usage("name a query file".into()).into()),
    };
    let (c, temp) = database(common, a.vault.as_deref(), "eval").await?;
    let with_model = mode != cairn_query::Mode::Fast;
    let template = SearchRequest {
        sources: a.sources.clone(),
        mode,
        limit: a.k,
        ablation: cairn_query::Ablation { pooled_baseline: a.pooled_baseline, ..Default::default() },
        ..SearchRequest::new("")
    };
    // A query file names pages by path; the subject and typo questions by the slugs of a scan.
    let by_path = a.subjects.is_none() && a.typos.is_none();
    let run = async |c: cairn::Config, rules: &[Rule]| -> Result<Vec<EvalReport>> {
        let cairn = Cairn::attach(c, "eval", with_model).await?;
        let judged =
            if by_path { cairn::eval::resolve_page_ids(&cairn, &judged).await? } else { judged.clone() };
        let mut reports = vec![cairn::eval::run(&cairn, &judged, &template).await?];
        for rule in rules {
            reports.push(cairn::eval::run(&cairn, &judged, &rule.off(&template)).await?);
        }
        Ok(reports)
    };
    // Compared with the int8 path, the first run holds every source's vectors exact (a source
    // past the default limit would otherwise be int8 in both).
    let first =
        if a.int8_too { cairn::Config { exact_vectors_up_to: usize::MAX, ..c.clone() } } else { c.clone() };
    let mut reports = run(first, &a.ablate).await?.into_iter();
    let exact = reports.next().expect("the first run");
    let ablated: Vec<(Rule, EvalReport)> = a.ablate.iter().copied().zip(reports).collect();
    show_ablations(&exact, &ablated, a.json);
    let int8 =
        if a.int8_too { run(cairn::Config { exact_vectors_up_to: 0, ..c }, &[]).await?.pop() } else { None };
    if let Some(t) = temp {
        let _ = std::fs::remove_dir_all(t);
    }
    let moved = match &int8 {
        Some(int8) => {
            eprintln!("-- the same queries, int8-coded vectors re-scored from the stored ones:");
            show(int8);
            misses(int8);
            eprintln!("-- exact vectors:");
            cairn::eval::moved(&exact, int8, 0.005)
        }
        None => Vec::new(),
    };
    report(&exact, a.json)?;
    if !a.json {
        misses(&exact);
    }
    let floors = |text: &str| -> Result<Vec<String>> {
        let mut breaches = cairn::eval::check_gates(&exact, text)?;
        breaches.extend(cairn::eval::check_rule_gates(&exact, &ablated, text)?);
        Ok(breaches)
    };
    if gate(a.gate.as_deref(), floors)? != ExitCode::SUCCESS {
        return Ok(ExitCode::from(1));
    }
    for m in &moved {
        eprintln!("int8 path differs by more than 0.005: {m}");
    }
    if !moved.is_empty() {
        return Ok(ExitCode::from(1));
    }
    if a.int8_too {
        eprintln!("int8 path: every figure within 0.005 of the exact one");
    }
    Ok(ExitCode::SUCCESS)
}

/// Each rule's run without it, and what the rule changes against `exact`.
fn show_ablations(exact: &EvalReport, ablated: &[(Rule, EvalReport)], json: bool) {
    for (rule, without) in ablated {
        eprintln!("-- the same queries without {rule}:");
        if json {
            eprint!("{without}")
        } else {
            show(without)
        }
        eprintln!("-- with it, what it changes: {}", changes(exact, without));
    }
}

/// Index `vault` into a new database at `db`; the configuration to read it with.
/// The configured database, or `vault` indexed into a temporary one (its folder returned, for
/// the caller to remove when done).
async fn database(
    common: &Common,
    vault: Option<&Path>,
    what: &str,
) -> Result<(cairn::Config, Option<std::path::PathBuf>)> {
    let Some(dir) = vault else { return Ok((config_only(common)?, None)) };
    let temp = std::env::temp_dir().join(format!("cairn-{what}-{}", std::process::id()));
    Ok((index_into(config_only(common)?, dir, &temp).await?, Some(temp)))
}

async fn index_into(mut c: cairn::Config, vault: &Path, db: &Path) -> Result<cairn::Config> {
    c.db = db.display().to_string();
    c.sources = vec![cairn::SourceSpec::from_dir(vault)?.config()];
    c.watch = false;
    let summary = cairn::index(c.clone(), false, false).await?;
    let (indexed, failed) = (summary.counts.pages_indexed, summary.counts.pages_failed);
    eprintln!("indexed {indexed} pages ({failed} failed) into {}", c.db);
    c.sources.clear();
    Ok(c)
}

/// The overall figures a rule moves: with it against without it.
fn changes(with: &EvalReport, without: &EvalReport) -> String {
    let (a, b) = (&with.overall.metrics, &without.overall.metrics);
    let line = |name: &str, x: f64, y: f64| format!("{name} {x:.3} against {y:.3} ({:+.3})", x - y);
    [
        line("hit@1", a.hit_at_1, b.hit_at_1),
        line("mrr@10", a.mrr_at_10, b.mrr_at_10),
        line("ndcg@10", a.ndcg_at_10, b.ndcg_at_10),
    ]
    .join(", ")
}

/// The first 20 misses, on stderr.
fn misses(r: &EvalReport) {
    for m in r.misses.iter().take(20) {
        eprintln!("miss {}: {:?} wants {:?}, got {:?}", m.id, m.query, m.relevant, m.top);
    }
    if r.misses.len() > 20 {
        eprintln!("… {} misses in all (--json lists every one)", r.misses.len());
    }
}

/// Check the floors of the gate file, if one is given: exit 1 when one is breached.
fn gate(file: Option<&Path>, check: impl FnOnce(&str) -> Result<Vec<String>>) -> Result<ExitCode> {
    let Some(g) = file else { return Ok(ExitCode::SUCCESS) };
    let text = std::fs::read_to_string(g).map_err(|e| anyhow::anyhow!("{}: {e}", g.display()))?;
    let breaches = check(&text)?;
    for b in &breaches {
        eprintln!("gate breached: {b}");
    }
    if !breaches.is_empty() {
        return Ok(ExitCode::from(1));
    }
    eprintln!("gates passed ({})", g.display());
    Ok(ExitCode::SUCCESS)
}

pub async fn selftest(
    common: &Common,
    source: Option<String>,
    per_family: usize,
    m: &str,
    json: bool,
) -> Result<()> {
    let mode = mode(m)?;
    let cairn = attach(common, "selftest", mode != cairn_query::Mode::Fast).await?;
    let opts = cairn::selftest::SelftestOptions { source, per_family, mode };
    report(&cairn::selftest::selftest(&cairn, &opts).await?, json)
}
