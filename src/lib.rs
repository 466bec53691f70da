//! cairn keeps a hybrid (keyword + vector) index of folders of markdown notes up to date and
//! answers queries with evidence. This crate is the embedded API and the CLI's wiring; the work
//! happens in `cairn-ingest`, `cairn-index`, `cairn-query` and `cairn-actors`.

use anyhow::{Result, bail};
use cairn_ingest::{ParseOptions, PathFilter, ScanOptions, read_page, rel_string, scan};
use serde::Serialize;
use std::path::Path;

/// A source id: `^[a-z0-9][a-z0-9-]{0,31}$`.
pub fn validate_source_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 32
        && id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !id.starts_with('-');
    if !ok {
        bail!("invalid source id `{id}`: use 1-32 characters of a-z, 0-9 and `-`, not starting with `-`");
    }
    Ok(())
}

/// The id of a source given as a bare folder: its name, slugified and cut to 32 characters.
pub fn source_id_from_dir(dir: &Path) -> Result<String> {
    let canon = dir.canonicalize().map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    let name = canon.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut id: String = cairn_ingest::slug::slugify_segment(&name)
        .chars()
        .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() { c } else { '-' })
        .take(32)
        .collect();
    id = id.trim_matches('-').to_string();
    if id.is_empty() {
        id = "notes".into();
    }
    validate_source_id(&id)?;
    Ok(id)
}

/// What `cairn scan` reports for one source.
#[derive(Debug, Serialize)]
pub struct ScanSummary {
    pub source: String,
    pub root: String,
    pub pages: Vec<PageSummary>,
    pub failures: Vec<Failure>,
}

/// One parsed page, as `cairn scan` shows it.
#[derive(Debug, Serialize)]
pub struct PageSummary {
    pub slug: String,
    pub path: String,
    pub title: String,
    pub aliases: Vec<String>,
    pub tags: Vec<String>,
    pub links: usize,
    pub chunks: usize,
    pub problems: Vec<String>,
}

/// A file that could not be included, and why.
#[derive(Debug, Serialize)]
pub struct Failure {
    pub source: String,
    pub path: String,
    pub kind: String,
    pub reason: String,
}

impl ScanSummary {
    pub fn print_table(&self) {
        println!(
            "source {} ({}): {} pages, {} failures",
            self.source,
            self.root,
            self.pages.len(),
            self.failures.len()
        );
        for p in &self.pages {
            let aliases =
                if p.aliases.is_empty() { String::new() } else { format!(" aliases={:?}", p.aliases) };
            println!("  {:<40} {:<40} chunks={} links={}{}", p.slug, p.title, p.chunks, p.links, aliases);
            for problem in &p.problems {
                println!("    warning: {problem}");
            }
        }
        for f in &self.failures {
            println!("  failed: {}", f.reason);
        }
    }
}

/// Scan and parse one source without storing anything.
pub fn scan_source(id: &str, root: &Path) -> Result<ScanSummary> {
    let report = scan(root, &PathFilter::new(&ScanOptions::default())?)?;
    let failure = |e: &cairn_ingest::Error| Failure {
        source: id.to_string(),
        path: e.path().map(rel_string).unwrap_or_default(),
        kind: e.kind().to_string(),
        reason: e.to_string(),
    };
    let mut failures: Vec<Failure> = report.problems.iter().map(failure).collect();
    let mut pages = Vec::new();
    for file in &report.files {
        match read_page(id, root, &file.rel, &ParseOptions::default()) {
            Ok(p) => pages.push(PageSummary {
                problems: p.problems.iter().map(ToString::to_string).collect(),
                slug: p.slug,
                path: p.path,
                title: p.title,
                aliases: p.aliases,
                tags: p.tags,
                links: p.links.len(),
                chunks: p.chunks.len(),
            }),
            Err(e) => failures.push(failure(&e)),
        }
    }
    Ok(ScanSummary { source: id.to_string(), root: root.display().to_string(), pages, failures })
}
