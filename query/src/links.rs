//! Links between pages, resolved as Obsidian resolves them: a link names a page by its path (from
//! the linking page's folder, then from the vault's root), else by its file name (the nearest
//! such page: the same folder, then the shortest path), else by an alias. `#heading` and
//! `^block` parts are kept. Within one source: a vault links to its own pages.

use cairn_index::PageRecord;
use cairn_ingest::normalize_name;
use std::collections::HashMap;

/// A link of a page, and where it leads.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LinkView {
    /// The page named, as written (no `#heading`, `|label` or `.md`).
    pub target: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heading: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default)]
    pub embed: bool,
    /// The page it leads to (absent: unresolved, e.g. a page not written yet, or a file that is
    /// not a note).
    pub resolved: Option<String>,
    /// How it was resolved: `path`, `file_name` or `alias`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// A page that links to another.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Backlink {
    pub slug: String,
    pub title: String,
    pub path: String,
    /// How it names the page, as written.
    pub target: String,
}

/// A page's links both ways.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Links {
    pub source: String,
    pub slug: String,
    pub title: String,
    pub outgoing: Vec<LinkView>,
    pub unresolved: usize,
    pub backlinks: Vec<Backlink>,
}

/// Where each link leads, then the pages that link here.
impl std::fmt::Display for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} ({}:{})", self.title, self.source, self.slug)?;
        writeln!(f, "links out ({}, {} unresolved):", self.outgoing.len(), self.unresolved)?;
        for l in &self.outgoing {
            let part = l.heading.as_ref().map_or(String::new(), |h| format!("#{h}"));
            match (&l.resolved, &l.by) {
                (Some(to), Some(by)) => writeln!(f, "  [[{}{part}]] -> {to} (by {by})", l.target)?,
                _ => writeln!(f, "  [[{}{part}]] -> unresolved", l.target)?,
            }
        }
        writeln!(f, "linked from ({}):", self.backlinks.len())?;
        for b in &self.backlinks {
            writeln!(f, "  {} ({}) as [[{}]]", b.slug, b.title, b.target)?;
        }
        Ok(())
    }
}

/// One source's pages, indexed for resolving links.
#[derive(Debug)]
pub struct Resolver<'a> {
    /// Lower-cased path without `.md` → (the path without `.md`, slug) of each page there: two
    /// when files' names differ only in case (`Notes.md`, `notes.md`).
    by_path: HashMap<String, Vec<(&'a str, &'a str)>>,
    /// Normalised file name → (slug, path).
    by_file_name: HashMap<String, Vec<(&'a str, &'a str)>>,
    by_alias: HashMap<String, Vec<&'a str>>,
}

/// The path without a leading `./` or `/` and without `.md`, as written.
fn bare(path: &str) -> &str {
    let p = path.trim_start_matches("./").trim_start_matches('/');
    p.strip_suffix(".md").or_else(|| p.strip_suffix(".markdown")).unwrap_or(p)
}

fn stem(path: &str) -> String {
    bare(path).to_lowercase()
}

fn folder(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(f, _)| f)
}

/// `base/rel` with `.` and `..` resolved (`None` when `..` leaves the vault).
fn join(base: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = if base.is_empty() { Vec::new() } else { base.split('/').collect() };
    for seg in rel.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}

impl<'a> Resolver<'a> {
    pub fn new(pages: impl IntoIterator<Item = &'a PageRecord>) -> Self {
        let mut r = Self { by_path: HashMap::new(), by_file_name: HashMap::new(), by_alias: HashMap::new() };
        for p in pages {
            r.by_path.entry(stem(&p.path)).or_default().push((bare(&p.path), p.slug.as_str()));
            let name = normalize_name(&cairn_index::resident::file_name(&p.path));
            r.by_file_name.entry(name).or_default().push((p.slug.as_str(), p.path.as_str()));
            for a in &p.aliases {
                r.by_alias.entry(normalize_name(a)).or_default().push(p.slug.as_str());
            }
        }
        for v in r.by_path.values_mut() {
            v.sort();
        }
        for v in r.by_file_name.values_mut() {
            v.sort_by_key(|(slug, path)| (path.len(), *slug));
        }
        for v in r.by_alias.values_mut() {
            v.sort();
        }
        r
    }

    /// The page `target` leads to from the page at `from_path`, and how.
    pub fn resolve(&self, from_path: &str, target: &str) -> Option<(&'a str, &'static str)> {
        let target = target.trim();
        if target.is_empty() {
            return None;
        }
        // A file that is not a note (`diagram.png`) is no page.
        let last = target.rsplit('/').next().unwrap_or(target);
        if let Some((_, ext)) = last.rsplit_once('.')
            && !ext.is_empty()
            && ext.len() <= 5
            && ext.chars().all(|c| c.is_ascii_alphanumeric())
            && !matches!(ext.to_ascii_lowercase().as_str(), "md" | "markdown")
        {
            return None;
        }
        let here = folder(from_path);
        for path in [join(here, target), join("", target)].into_iter().flatten() {
            // The file of that name as written, else one whose name differs only in case.
            if let Some(found) = self.by_path.get(&stem(&path)) {
                let exact = found.iter().find(|(p, _)| *p == bare(&path));
                if let Some((_, slug)) = exact.or(found.first()) {
                    return Some((slug, "path"));
                }
            }
        }
        let name = normalize_name(last.strip_suffix(".md").unwrap_or(last));
        if let Some(found) = self.by_file_name.get(&name) {
            let near = found.iter().find(|(_, p)| folder(p) == here).or_else(|| found.first());
            if let Some((slug, _)) = near {
                return Some((slug, "file_name"));
            }
        }
        self.by_alias.get(&normalize_name(target)).and_then(|v| v.first()).map(|s| (*s, "alias"))
    }
}

/// The links a page record holds (its `links` JSON).
fn raw_links(page: &PageRecord) -> Vec<cairn_ingest::Link> {
    serde_json::from_str(page.links.text()).unwrap_or_default()
}

/// `slug`'s links both ways among `pages` (one source's), or `None` when there is no such page.
pub fn links_of(source: &str, pages: &[&PageRecord], slug: &str) -> Option<Links> {
    let page = pages.iter().find(|p| p.slug == slug)?;
    let resolver = Resolver::new(pages.iter().copied());
    let outgoing: Vec<LinkView> = raw_links(page)
        .into_iter()
        .map(|l| {
            let resolved = resolver.resolve(&page.path, &l.target);
            LinkView {
                resolved: resolved.map(|(s, _)| s.to_string()),
                by: resolved.map(|(_, how)| how.to_string()),
                target: l.target,
                heading: l.heading,
                label: l.label,
                embed: l.embed,
            }
        })
        .collect();
    let mut backlinks: Vec<Backlink> = Vec::new();
    for other in pages {
        for l in raw_links(other) {
            if resolver.resolve(&other.path, &l.target).is_some_and(|(s, _)| s == slug)
                && !backlinks.iter().any(|b| b.slug == other.slug)
            {
                backlinks.push(Backlink {
                    slug: other.slug.clone(),
                    title: other.title.clone(),
                    path: other.path.clone(),
                    target: l.target,
                });
            }
        }
    }
    backlinks.sort_by(|a, b| a.slug.cmp(&b.slug));
    Some(Links {
        source: source.into(),
        slug: page.slug.clone(),
        title: page.title.clone(),
        unresolved: outgoing.iter().filter(|l| l.resolved.is_none()).count(),
        outgoing,
        backlinks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(path: &str, aliases: &[&str], links: &[&str]) -> PageRecord {
        let slug = cairn_ingest::slugify_path(std::path::Path::new(path)).unwrap();
        let mut p = PageRecord::named(&slug, &cairn_index::resident::file_name(path), aliases, 1);
        p.path = path.into();
        let links: Vec<cairn_ingest::Link> = links
            .iter()
            .map(|t| {
                let (t, h) = t.split_once('#').map_or((*t, None), |(t, h)| (t, Some(h.to_string())));
                cairn_ingest::Link { target: t.into(), label: None, heading: h, embed: false }
            })
            .collect();
        p.links = cairn_index::Json::of(&links);
        p
    }

    #[test]
    fn links_resolve_by_path_then_file_name_then_alias_and_backlinks_follow() {
        let pages = [
            page(
                "index.md",
                &[],
                &["projects/Alpha", "Beta", "Old Port", "Nowhere", "diagram.png", "Beta#^b1"],
            ),
            page("projects/Alpha.md", &[], &["../index", "Beta"]),
            page("projects/Beta.md", &[], &[]),
            page("archive/deep/Beta.md", &[], &[]),
            page("places/harbour.md", &["Old Port"], &["index"]),
        ];
        let refs: Vec<&PageRecord> = pages.iter().collect();
        let l = links_of("v", &refs, "index").unwrap();
        let got: Vec<(&str, Option<&str>, Option<&str>)> =
            l.outgoing.iter().map(|o| (o.target.as_str(), o.resolved.as_deref(), o.by.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("projects/Alpha", Some("projects/alpha"), Some("path")),
                ("Beta", Some("projects/beta"), Some("file_name")),
                ("Old Port", Some("places/harbour"), Some("alias")),
                ("Nowhere", None, None),
                ("diagram.png", None, None),
                ("Beta", Some("projects/beta"), Some("file_name")),
            ],
            "the shortest path wins between two Beta.md"
        );
        assert_eq!(l.outgoing[5].heading.as_deref(), Some("^b1"), "block references are kept");
        assert_eq!(l.unresolved, 2);
        let alpha = links_of("v", &refs, "projects/alpha").unwrap();
        assert_eq!(
            alpha.outgoing[0].resolved.as_deref(),
            Some("index"),
            "a relative path from the page's folder"
        );
        assert_eq!(
            alpha.outgoing[1].resolved.as_deref(),
            Some("projects/beta"),
            "the file name in the same folder first"
        );
        let index = links_of("v", &refs, "index").unwrap();
        let back: Vec<&str> = index.backlinks.iter().map(|b| b.slug.as_str()).collect();
        assert_eq!(back, ["places/harbour", "projects/alpha"]);
        assert!(links_of("v", &refs, "missing").is_none());
    }

    #[test]
    fn a_link_reaches_the_file_of_its_name_as_written_before_one_of_another_case() {
        let mut lower = page("notes.md", &[], &[]);
        lower.slug = "notes~2".into();
        let pages = [page("index.md", &[], &["Notes", "notes", "NOTES"]), page("Notes.md", &[], &[]), lower];
        let refs: Vec<&PageRecord> = pages.iter().collect();
        let l = links_of("v", &refs, "index").unwrap();
        let got: Vec<Option<&str>> = l.outgoing.iter().map(|o| o.resolved.as_deref()).collect();
        assert_eq!(got, [Some("notes"), Some("notes~2"), Some("notes")], "NOTES: the first by path");
    }
}
