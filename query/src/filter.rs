//! What a search may be restricted to: tags, folders or globs, page types, modification dates.
//! Applied inside each source's gather, before its cut (a filter never empties an answer that
//! exists: the source's slots go to pages that pass it).

use crate::error::{QueryError, Result};
use cairn_index::PageRecord;
use globset::{Glob, GlobSet, GlobSetBuilder};
use std::collections::HashSet;

/// A search's restrictions (empty: none). Each list is "any of"; the kinds combine with "and".
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Filter {
    /// Tags (frontmatter or inline), without `#`, compared without case; a tag matches its
    /// children (`project` matches `project/alpha`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Folders (`meetings/`, a prefix of the vault-relative path) or globs (`**/2024-*.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The frontmatter `type`, compared without case.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub types: Vec<String>,
    /// Modified on or after this day (`YYYY-MM-DD`, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Modified before this day (`YYYY-MM-DD`, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
}

/// A filter checked and ready to test pages with.
#[derive(Debug, Clone)]
pub struct PageFilter {
    tags: Vec<String>,
    prefixes: Vec<String>,
    globs: Option<GlobSet>,
    types: Vec<String>,
    after_ms: Option<i64>,
    before_ms: Option<i64>,
}

/// Milliseconds since the Unix epoch of a `YYYY-MM-DD` day's start (UTC).
pub fn day_start_ms(day: &str) -> Option<i64> {
    if day.len() != 10 {
        return None;
    }
    let date: jiff::civil::Date = day.parse().ok()?;
    Some(date.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp().as_millisecond())
}

impl Filter {
    pub fn is_empty(&self) -> bool {
        self == &Filter::default()
    }

    /// Check the dates and globs; `None` when there is nothing to filter.
    pub fn compile(&self) -> Result<Option<PageFilter>> {
        if self.is_empty() {
            return Ok(None);
        }
        let day = |d: &Option<String>| -> Result<Option<i64>> {
            d.as_deref()
                .map(|s| {
                    day_start_ms(s)
                        .ok_or_else(|| QueryError::BadFilter(format!("`{s}` is not a day: use YYYY-MM-DD")))
                })
                .transpose()
        };
        let is_glob = |p: &str| p.contains(['*', '?', '[', '{']);
        let mut globs = GlobSetBuilder::new();
        let mut any_glob = false;
        for p in self.paths.iter().filter(|p| is_glob(p)) {
            globs.add(Glob::new(p).map_err(|e| QueryError::BadFilter(format!("glob `{p}`: {e}")))?);
            any_glob = true;
        }
        Ok(Some(PageFilter {
            tags: self.tags.iter().map(|t| t.trim_start_matches('#').to_lowercase()).collect(),
            prefixes: self
                .paths
                .iter()
                .filter(|p| !is_glob(p))
                .map(|p| p.trim_start_matches("./").trim_end_matches('/').to_string())
                .collect(),
            globs: if any_glob {
                Some(globs.build().map_err(|e| QueryError::BadFilter(e.to_string()))?)
            } else {
                None
            },
            types: self.types.iter().map(|t| t.to_lowercase()).collect(),
            after_ms: day(&self.after)?,
            before_ms: day(&self.before)?,
        }))
    }
}

impl PageFilter {
    /// Whether a page passes.
    pub fn matches(&self, page: &PageRecord) -> bool {
        let tags_ok = self.tags.is_empty()
            || page.tags.iter().any(|t| {
                let t = t.to_lowercase();
                self.tags.iter().any(|want| t == *want || t.starts_with(&format!("{want}/")))
            });
        let path_ok = (self.prefixes.is_empty() && self.globs.is_none())
            || self.prefixes.iter().any(|p| page.path == *p || page.path.starts_with(&format!("{p}/")))
            || self.globs.as_ref().is_some_and(|g| g.is_match(&page.path));
        let type_ok = self.types.is_empty()
            || page.page_type.as_ref().is_some_and(|t| self.types.contains(&t.to_lowercase()));
        let after_ok = self.after_ms.is_none_or(|a| page.mtime_ms >= a);
        let before_ok = self.before_ms.is_none_or(|b| page.mtime_ms < b);
        tags_ok && path_ok && type_ok && after_ok && before_ok
    }
}

/// The slugs of a source's pages that pass (what its arms may return).
pub type Allowed = HashSet<String>;

#[cfg(test)]
mod tests {
    use super::*;

    fn page(path: &str, tags: &[&str], kind: Option<&str>, day: &str) -> PageRecord {
        let mut p = PageRecord::named(path.trim_end_matches(".md"), "T", &[], 1);
        p.path = path.into();
        p.tags = tags.iter().map(|t| t.to_string()).collect();
        p.page_type = kind.map(str::to_string);
        p.mtime_ms = day_start_ms(day).unwrap() + 3_600_000;
        p
    }

    #[test]
    fn days_are_utc_midnights() {
        assert_eq!(day_start_ms("1970-01-01"), Some(0));
        assert_eq!(day_start_ms("2024-05-01"), Some(1_714_521_600_000));
        assert_eq!(day_start_ms("2024-5-1"), None);
        assert_eq!(day_start_ms("2024-13-01"), None);
        assert_eq!(day_start_ms("2023-02-29"), None, "not a day of that year");
        assert_eq!(day_start_ms("2024-02-29"), Some(1_709_164_800_000));
    }

    #[test]
    fn each_kind_restricts_and_kinds_combine() {
        let standup =
            page("meetings/Standup 2024-05-01.md", &["Work/Standup"], Some("meeting"), "2024-05-01");
        let recipe = page("kitchen/bread.md", &["food"], None, "2023-01-10");
        let f = |f: Filter| f.compile().unwrap().unwrap();
        let tag = f(Filter { tags: vec!["#work".into()], ..Filter::default() });
        assert!(tag.matches(&standup) && !tag.matches(&recipe), "a nested tag matches its parent");
        let folder = f(Filter { paths: vec!["meetings/".into()], ..Filter::default() });
        assert!(folder.matches(&standup) && !folder.matches(&recipe));
        let glob = f(Filter { paths: vec!["**/*2024-*.md".into()], ..Filter::default() });
        assert!(glob.matches(&standup) && !glob.matches(&recipe));
        let kind = f(Filter { types: vec!["Meeting".into()], ..Filter::default() });
        assert!(kind.matches(&standup) && !kind.matches(&recipe));
        let dates = f(Filter {
            after: Some("2024-01-01".into()),
            before: Some("2024-05-02".into()),
            ..Filter::default()
        });
        assert!(dates.matches(&standup) && !dates.matches(&recipe));
        let both =
            f(Filter { tags: vec!["food".into()], paths: vec!["meetings".into()], ..Filter::default() });
        assert!(!both.matches(&standup) && !both.matches(&recipe), "kinds combine with and");
        assert!(Filter { after: Some("yesterday".into()), ..Filter::default() }.compile().is_err());
        assert!(Filter::default().compile().unwrap().is_none());
    }
}
