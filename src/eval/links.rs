//! `cairn eval --links`: names learnt from link texts, measured on links the index never saw.
//!
//! One labelled wikilink (`[[Target|display text]]`) in `every` is taken out of a copy of the
//! vault: its display text stays, as plain text, and the link goes. The copy is indexed, and each
//! held-out display text is asked; its target page is what should come back. A display text
//! that is an alias of its target is taken out of the target's aliases in the copy (else the
//! exact layer finds it, and that says nothing of learnt names); one that is its title or file
//! name is not asked. Each (display text, target) pair is asked once, with the learnt-name layer
//! and without it: what the other links of the vault teach is what is measured.

use super::held_out;
use crate::Cairn;
use anyhow::{Context, Result};
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, normalize_name, rel_string, scan};
use cairn_query::{Evidence, Mode, SearchRequest};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

/// Hit@1 and MRR@10 of the held-out display texts, and how many rank-1 answers a learnt name
/// made.
#[derive(Debug, Default, Serialize)]
pub struct LinkScores {
    pub hit_at_1: f64,
    pub mrr_at_10: f64,
    pub learnt_at_1: usize,
}

#[derive(Debug, Default, Serialize)]
pub struct LinksReport {
    pub pages: usize,
    /// Labelled links to a page of the vault, and those held out of the copy.
    pub labelled_links: usize,
    pub held_out_links: usize,
    /// Distinct (display text, target) pairs asked, and the aliases taken from their targets.
    pub queries: usize,
    pub aliases_taken: usize,
    pub with_learnt_names: LinkScores,
    pub without_learnt_names: LinkScores,
    /// Held-out pairs whose target was not at rank 1 with learnt names: (query, wanted, got).
    #[serde(skip)]
    pub misses: Vec<(String, String, Option<String>)>,
}

impl std::fmt::Display for LinksReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "{} pages, {} labelled links, {} held out: {} display texts asked ({} taken from their target's aliases)",
            self.pages, self.labelled_links, self.held_out_links, self.queries, self.aliases_taken
        )?;
        for (name, s) in
            [("with learnt names", &self.with_learnt_names), ("without", &self.without_learnt_names)]
        {
            writeln!(
                f,
                "{name:>17}: Hit@1 {:.3}  MRR@10 {:.3}  (a learnt name at rank 1: {})",
                s.hit_at_1, s.mrr_at_10, s.learnt_at_1
            )?;
        }
        Ok(())
    }
}

/// A labelled wikilink in raw text: its byte range, target (no heading) and display text.
struct RawLink {
    range: std::ops::Range<usize>,
    target: String,
    label: String,
}

/// The labelled wikilinks of a text that name a page, not a heading or an embed.
fn labelled_links(text: &str) -> Vec<RawLink> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(open) = text[from..].find("[[").map(|i| i + from) {
        let Some(close) = text[open..].find("]]").map(|i| i + open) else { break };
        from = close + 2;
        let inner = &text[open + 2..close];
        let embed = open > 0 && text.as_bytes()[open - 1] == b'!';
        let Some((target, label)) = inner.split_once('|') else { continue };
        if embed || target.contains('#') || inner.contains('\n') || label.trim().is_empty() {
            continue;
        }
        out.push(RawLink {
            range: open..close + 2,
            target: target.trim().to_string(),
            label: label.trim().into(),
        });
    }
    out
}

/// A page of the vault: its file, its id, the names it cannot lose (title, file name, id) and
/// its aliases (all normalised).
struct VaultPage {
    rel: std::path::PathBuf,
    slug: String,
    fixed: HashSet<String>,
    aliases: HashSet<String>,
}

fn pages(vault: &Path) -> Result<Vec<VaultPage>> {
    let report = scan(vault, &PathFilter::new(&ScanOptions::default())?)?;
    Ok(report
        .files
        .iter()
        .filter_map(|f| {
            let page = cairn_ingest::read_scanned("x", vault, &report, f, &ParseOptions::default()).ok()?;
            let file = cairn_index::resident::file_name(&rel_string(&f.rel));
            let fixed = [&page.title, &file, &page.slug].into_iter().map(|x| normalize_name(x)).collect();
            let aliases = page.aliases.iter().map(|x| normalize_name(x)).collect();
            Some(VaultPage { rel: f.rel.clone(), slug: page.slug, fixed, aliases })
        })
        .collect())
}

/// A page's text with the aliases in `drop` (normalised) taken out of its frontmatter, which is
/// written back as JSON (a YAML document too).
fn without_aliases(text: &str, drop: &HashSet<String>) -> String {
    let split = cairn_ingest::frontmatter::split(text);
    let Some(Ok(mut map)) = split.yaml.map(cairn_ingest::frontmatter::parse_yaml) else { return text.into() };
    if let Some(serde_json::Value::Array(aliases)) = map.get_mut("aliases") {
        aliases.retain(|a| a.as_str().is_none_or(|a| !drop.contains(&normalize_name(a))));
    }
    format!("---\n{}\n---\n{}", serde_json::Value::Object(map), split.body)
}

/// Copy `vault` into `dest` with one labelled link in `every` taken out, and a held-out display
/// text that is an alias of its target taken out of the target's aliases too (else the page
/// keeps it as a name of its own, and nothing is learnt). The (display text, target slug) pairs
/// to ask, and the report's counts.
fn copy_without_links(
    vault: &Path,
    dest: &Path,
    every: u64,
) -> Result<(BTreeSet<(String, String)>, LinksReport)> {
    let pages = pages(vault)?;
    let mut by_file: HashMap<String, usize> = HashMap::new();
    for (i, p) in pages.iter().enumerate() {
        by_file.entry(normalize_name(&cairn_index::resident::file_name(&rel_string(&p.rel)))).or_insert(i);
    }
    let mut r = LinksReport { pages: pages.len(), ..LinksReport::default() };
    let mut asked = BTreeSet::new();
    let mut texts: Vec<String> = Vec::with_capacity(pages.len());
    let mut strip: HashMap<usize, HashSet<String>> = HashMap::new();
    for p in &pages {
        let rel = rel_string(&p.rel);
        let mut text = std::fs::read_to_string(vault.join(&p.rel)).unwrap_or_default();
        let mut cut: Vec<RawLink> = Vec::new();
        for (k, l) in labelled_links(&text).into_iter().enumerate() {
            let last = l.target.rsplit('/').next().unwrap_or(&l.target);
            let Some(&t) = by_file.get(&normalize_name(last.trim_end_matches(".md"))) else { continue };
            r.labelled_links += 1;
            if !held_out(&format!("{rel}#{k}"), every) {
                continue;
            }
            r.held_out_links += 1;
            let label = normalize_name(&l.label);
            if !pages[t].fixed.contains(&label) {
                if pages[t].aliases.contains(&label) {
                    strip.entry(t).or_default().insert(label);
                }
                asked.insert((l.label.clone(), pages[t].slug.clone()));
            }
            cut.push(l);
        }
        for l in cut.iter().rev() {
            text.replace_range(l.range.clone(), &l.label);
        }
        texts.push(text);
    }
    for (i, (p, text)) in pages.iter().zip(texts).enumerate() {
        let text = match strip.get(&i) {
            Some(drop) => without_aliases(&text, drop),
            None => text,
        };
        let to = dest.join(&p.rel);
        std::fs::create_dir_all(to.parent().context("a file has a folder")?)?;
        std::fs::write(&to, text)?;
    }
    r.queries = asked.len();
    r.aliases_taken = strip.values().map(HashSet::len).sum();
    Ok((asked, r))
}

/// Measure learnt link names on `vault` (see the module's doc), in `work`.
pub async fn link_names(vault: &Path, work: &Path, every: u64, mode: Mode) -> Result<LinksReport> {
    let copy = work.join("vault");
    let (asked, mut r) = copy_without_links(vault, &copy, every)?;
    let mut config = crate::Config::new(work.join("db").display().to_string(), Vec::new());
    config.sources.push(crate::SourceSpec { id: "vault".into(), root: copy }.config());
    crate::index(config.clone(), false, false).await?;
    config.sources.clear();
    let cairn = Cairn::attach(config, "eval", mode != Mode::Fast).await?;
    for without in [false, true] {
        let mut s = LinkScores::default();
        for (q, slug) in &asked {
            let req = SearchRequest {
                mode,
                limit: 10,
                ablation: cairn_query::Ablation { without_learnt_names: without, ..Default::default() },
                ..SearchRequest::new(q)
            };
            let resp = cairn.search(req).await?;
            let rank = resp.results.iter().position(|x| x.slug == *slug);
            s.hit_at_1 += f64::from(rank == Some(0));
            s.mrr_at_10 += rank.map_or(0.0, |p| 1.0 / (p + 1) as f64);
            let top = resp.results.first();
            s.learnt_at_1 += usize::from(top.is_some_and(|t| t.evidence.contains(&Evidence::LearntName)));
            if !without && rank != Some(0) {
                r.misses.push((q.clone(), slug.clone(), top.map(|t| t.slug.clone())));
            }
        }
        let n = asked.len().max(1) as f64;
        (s.hit_at_1, s.mrr_at_10) = (s.hit_at_1 / n, s.mrr_at_10 / n);
        if without { r.without_learnt_names = s } else { r.with_learnt_names = s }
    }
    Ok(r)
}

/// Floors of `cairn eval --links --gate`: `min_hit_at_1` and `min_mrr_at_10` with learnt names,
/// and `min_gain_mrr_at_10` over the same queries without them.
pub fn check_link_gates(r: &LinksReport, gates: &str) -> Result<Vec<String>> {
    #[derive(serde::Deserialize)]
    struct Gates {
        min_hit_at_1: f64,
        min_mrr_at_10: f64,
        min_gain_mrr_at_10: f64,
    }
    let g: Gates = toml::from_str(gates).context("gate file")?;
    let (with, without) = (&r.with_learnt_names, &r.without_learnt_names);
    let mut breaches = Vec::new();
    if with.hit_at_1 + 1e-12 < g.min_hit_at_1 {
        breaches.push(format!("Hit@1 {:.4} is below {}", with.hit_at_1, g.min_hit_at_1));
    }
    if with.mrr_at_10 + 1e-12 < g.min_mrr_at_10 {
        breaches.push(format!("MRR@10 {:.4} is below {}", with.mrr_at_10, g.min_mrr_at_10));
    }
    let gain = with.mrr_at_10 - without.mrr_at_10;
    if gain + 1e-12 < g.min_gain_mrr_at_10 {
        breaches.push(format!("learnt names gain {gain:.4} MRR@10, below {}", g.min_gain_mrr_at_10));
    }
    if r.queries == 0 {
        breaches.push("no labelled link was held out: nothing was measured".into());
    }
    Ok(breaches)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labelled_links_to_pages_are_found_with_their_place() {
        let text =
            "See [[Random-access memory|RAM]], [[Plain]], ![[img|x]], [[Page#Part|part]] and [[ x | y ]].";
        let links = labelled_links(text);
        let got: Vec<(&str, &str, &str)> =
            links.iter().map(|l| (l.target.as_str(), l.label.as_str(), &text[l.range.clone()])).collect();
        assert_eq!(
            got,
            [("Random-access memory", "RAM", "[[Random-access memory|RAM]]"), ("x", "y", "[[ x | y ]]")]
        );
    }
}
