//! `cairn eval --drafts FILE`: drafts an agent might hold before writing a note, each about a page
//! the vault has (its `target`), written from other material (`scripts/bench/gcide-drafts` makes
//! them from GCIDE). Each is `check`ed as an agent would: how often the target comes first, how
//! often the draft is said `probable` or `exists`, and how long a check takes from the caller
//! (through the owner when one runs). Asked of a copy of the vault without the targets, the same
//! drafts measure what `check` claims of pages that are not there.
//!
//! A draft's title is chosen so that it names no page of the vault, so an `exists` verdict is
//! always false here: the gate holds it at zero.

use crate::Cairn;
use anyhow::{Context, Result};
use cairn_query::check::{Draft, Verdict};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

/// One line of a drafts file.
#[derive(Debug, Clone, Deserialize)]
pub struct JudgedDraft {
    pub title: String,
    #[serde(default)]
    pub aliases: Vec<String>,
    pub body: String,
    /// The page the draft is about: its file, relative to the vault.
    pub target: String,
}

/// What the drafts found.
#[derive(Debug, Default, Serialize)]
pub struct DraftsReport {
    pub drafts: usize,
    /// Drafts whose target is in the index (0 on a copy without them).
    pub targets_present: usize,
    /// Of those, the target as the first candidate, and among the candidates at all.
    pub target_first: usize,
    pub target_listed: usize,
    pub recall_at_1: f64,
    /// Each verdict's count.
    pub exists: usize,
    pub probable: usize,
    pub related: usize,
    pub none: usize,
    /// `probable` or `exists`, over the drafts.
    pub probable_or_exists_rate: f64,
    /// A check's wall time from the caller, ms.
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub misses: Vec<DraftMiss>,
}

#[derive(Debug, Serialize)]
pub struct DraftMiss {
    pub title: String,
    pub target: String,
    pub verdict: Verdict,
    pub first: Option<String>,
}

impl std::fmt::Display for DraftsReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "drafts {} (targets present {}): target first {}/{} = {:.3}, listed {}; verdicts exists {} probable {} \
             related {} none {} (probable or exists {:.3}); check p50 {:.1} ms p95 {:.1} ms",
            self.drafts,
            self.targets_present,
            self.target_first,
            self.targets_present,
            self.recall_at_1,
            self.target_listed,
            self.exists,
            self.probable,
            self.related,
            self.none,
            self.probable_or_exists_rate,
            self.p50_ms,
            self.p95_ms
        )
    }
}

pub fn load_drafts(file: &Path) -> Result<Vec<JudgedDraft>> {
    let text = std::fs::read_to_string(file).with_context(|| file.display().to_string())?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).with_context(|| format!("{}:{}", file.display(), i + 1)))
        .collect()
}

/// Check every draft against the index `cairn` answers from.
pub async fn check_drafts(cairn: &Cairn, drafts: &[JudgedDraft]) -> Result<DraftsReport> {
    let mut r = DraftsReport { drafts: drafts.len(), ..DraftsReport::default() };
    let mut took = Vec::with_capacity(drafts.len());
    let sources: Vec<String> = cairn.status().await?.sources.into_iter().map(|s| s.source).collect();
    for d in drafts {
        let present = super::find_page(cairn, &sources, &d.target).await?.is_some();
        let draft = Draft {
            title: d.title.clone(),
            aliases: d.aliases.clone(),
            body: d.body.clone(),
            ..Draft::default()
        };
        let started = Instant::now();
        let report = cairn.check(&draft).await?;
        took.push(started.elapsed().as_secs_f64() * 1000.0);
        let first = report.candidates.first().map(|c| c.path.clone());
        match report.verdict {
            Verdict::Exists => r.exists += 1,
            Verdict::Probable => r.probable += 1,
            Verdict::Related => r.related += 1,
            Verdict::None => r.none += 1,
        }
        if present {
            r.targets_present += 1;
            r.target_listed += usize::from(report.candidates.iter().any(|c| c.path == d.target));
        }
        let hit = present && first.as_deref() == Some(d.target.as_str());
        r.target_first += usize::from(hit);
        if report.verdict == Verdict::Exists || (present && !hit) {
            r.misses.push(DraftMiss {
                title: d.title.clone(),
                target: d.target.clone(),
                verdict: report.verdict,
                first,
            });
        }
    }
    r.recall_at_1 = r.target_first as f64 / r.targets_present.max(1) as f64;
    r.probable_or_exists_rate = (r.probable + r.exists) as f64 / r.drafts.max(1) as f64;
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took.get(((took.len() as f64 * q) as usize).min(took.len().saturating_sub(1))).copied();
    (r.p50_ms, r.p95_ms) = (at(0.5).unwrap_or(0.0), at(0.95).unwrap_or(0.0));
    Ok(r)
}

/// Floors of `cairn eval --drafts --gate`: `exists` verdicts at most (0: every one is false),
/// and, when the targets are present, the target first at least this often.
pub fn check_draft_gates(r: &DraftsReport, gates: &str) -> Result<Vec<String>> {
    #[derive(Deserialize)]
    struct Gates {
        max_exists: usize,
        #[serde(default)]
        min_recall_at_1: f64,
    }
    let g: Gates = toml::from_str(gates).context("gate file")?;
    let mut breaches = Vec::new();
    if r.exists > g.max_exists {
        breaches.push(format!("{} drafts said exists (at most {})", r.exists, g.max_exists));
    }
    if r.targets_present > 0 && r.recall_at_1 + 1e-12 < g.min_recall_at_1 {
        breaches.push(format!("target first {:.4} is below {}", r.recall_at_1, g.min_recall_at_1));
    }
    Ok(breaches)
}
