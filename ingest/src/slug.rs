//! Paths → slugs, and the one normalisation used wherever names are compared.

use std::path::{Component, Path};
use unicode_normalization::{UnicodeNormalization, char::is_combining_mark};

/// Markdown file extensions cairn indexes (compared case-insensitively).
pub const MARKDOWN_EXTENSIONS: [&str; 2] = ["md", "markdown"];

/// Whether a path names a markdown file by its extension.
pub fn is_markdown(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| MARKDOWN_EXTENSIONS.iter().any(|m| e.eq_ignore_ascii_case(m)))
}

/// Slug of one path segment: NFD, combining marks dropped, NFC, lowercase; letters, digits, `.`,
/// `_` and `+` kept; every run of anything else (`-` included, so `a -- b` is `a-b`) becomes one
/// `-`; `-` trimmed at both ends. `+` is part of names (`C++`, `Ada++`, `A+`): dropped, `C++.md`
/// and `C.md` would be one page and one of them left out of the index. A segment with nothing
/// left (a name of punctuation alone: `-`, `(())`) is spelled by its characters' code points
/// (`u+2d`, `u+28-u+28-u+29-u+29`), so its file is a page too.
pub fn slugify_segment(segment: &str) -> String {
    let slug = fold_segment(segment);
    if !slug.is_empty() {
        return slug;
    }
    segment.chars().map(|c| format!("u+{:x}", c as u32)).collect::<Vec<_>>().join("-")
}

fn fold_segment(segment: &str) -> String {
    let folded: String = segment.nfd().filter(|c| !is_combining_mark(*c)).nfc().collect();
    let mut out = String::with_capacity(folded.len());
    let mut pending_dash = false;
    for c in folded.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() || matches!(c, '.' | '_' | '+') {
            if pending_dash && !out.is_empty() {
                out.push('-');
            }
            pending_dash = false;
            out.push(c);
        } else {
            pending_dash = true;
        }
    }
    out.trim_matches('-').to_string()
}

/// Slug of a vault-relative path: the markdown extension dropped, each segment slugified, joined
/// with `/`. `None` for a path with no segment at all (no file has one).
pub fn slugify_path(rel: &Path) -> Option<String> {
    let without_ext = if is_markdown(rel) { rel.with_extension("") } else { rel.to_path_buf() };
    let segments: Vec<String> = without_ext
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(slugify_segment(&s.to_string_lossy())),
            _ => None,
        })
        .collect();
    if segments.is_empty() { None } else { Some(segments.join("/")) }
}

/// A page's id in the shared eval format: its vault-relative path without the markdown
/// extension, in NFC (a name a file system stores decomposed is the same id).
pub fn page_id(rel: &str) -> String {
    let p = Path::new(rel);
    let without_ext = if is_markdown(p) { p.with_extension("") } else { p.to_path_buf() };
    without_ext.to_string_lossy().nfc().collect()
}

/// Slug of a page id written as text (a wikilink target or an eval query's page id): the same
/// rules as [`slugify_path`], with `/` as the separator.
pub fn slugify_id(id: &str) -> Option<String> {
    slugify_path(Path::new(id))
}

/// The mark between a slug and the number that sets apart the pages of files whose names make
/// that one slug (`c`, `c~2`): slugification never makes it, so no file's own slug has it.
pub const VARIANT_MARK: char = '~';

/// The `k`-th slug of files whose names make `base`: `base` itself for the first, `base~k` after.
pub fn slug_variant(base: &str, k: u32) -> String {
    if k <= 1 { base.to_string() } else { format!("{base}{VARIANT_MARK}{k}") }
}

/// Whether `slug` is one a file whose name makes `base` can have (`base`, or `base~k`, k ≥ 2).
pub fn is_slug_of(slug: &str, base: &str) -> bool {
    slug == base
        || slug
            .strip_prefix(base)
            .and_then(|r| r.strip_prefix(VARIANT_MARK))
            .and_then(|k| k.parse::<u32>().ok())
            .is_some_and(|k| k >= 2 && slug_variant(base, k) == slug)
}

/// The slug a file's name makes, of one of its slugs (`c` of `c~2`; a slug without a variant
/// number is its own base).
pub fn slug_base(slug: &str) -> &str {
    match slug.rsplit_once(VARIANT_MARK) {
        Some((base, _)) if is_slug_of(slug, base) => base,
        _ => slug,
    }
}

/// How many characters of a path (its extension aside) its slug does not keep as they are:
/// folded case and accents, dropped or replaced punctuation. Of files whose names make one slug,
/// the one with the fewest is the one the slug most nearly names (`C.md` for `c`, not `(c).md`).
pub fn slug_changes(rel: &Path) -> usize {
    let without_ext = if is_markdown(rel) { rel.with_extension("") } else { rel.to_path_buf() };
    let name = without_ext.to_string_lossy().nfc().collect::<String>();
    let trimmed = |seg: &str| seg.trim_matches('-').chars().count();
    let edge_dashes: usize = name.split('/').map(|seg| seg.chars().count() - trimmed(seg)).sum();
    let changed = name
        .chars()
        .filter(|c| {
            let kept = matches!(c, '.' | '_' | '+' | '-' | '/')
                || c.is_alphanumeric() && c.to_lowercase().eq([*c]) && c.nfd().count() == 1;
            !kept
        })
        .count();
    changed + edge_dashes
}

/// The one normalisation for comparing aliases, titles, slugs and queries: NFKC, lowercase,
/// whitespace collapsed and trimmed, one layer of wrapping quotes or brackets (`"…"`, `'…'`,
/// `“…”`, `[[…]]`, `(…)`) stripped.
pub fn normalize_name(s: &str) -> String {
    let lowered: String = s.nfkc().flat_map(char::to_lowercase).collect();
    let collapsed = lowered.split_whitespace().collect::<Vec<_>>().join(" ");
    const WRAPPERS: [(&str, &str); 6] =
        [("[[", "]]"), ("\"", "\""), ("'", "'"), ("“", "”"), ("‘", "’"), ("(", ")")];
    for (open, close) in WRAPPERS {
        if let Some(inner) = collapsed.strip_prefix(open).and_then(|r| r.strip_suffix(close))
            && !inner.is_empty()
        {
            return inner.trim().to_string();
        }
    }
    collapsed
}

/// Lowercased alphanumeric tokens of a text after NFKC (used by title-phrase matching and the
/// token estimate): splits on anything that is not a letter or digit.
pub fn tokens(s: &str) -> Vec<String> {
    let folded: String = s.nfkc().flat_map(char::to_lowercase).collect();
    folded.split(|c: char| !c.is_alphanumeric()).filter(|t| !t.is_empty()).map(str::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_from_the_issue() {
        assert_eq!(
            slugify_path(Path::new("Apple Notes/2017-05-03 ohmygreen.md")).as_deref(),
            Some("apple-notes/2017-05-03-ohmygreen")
        );
        assert_eq!(slugify_path(Path::new("notes/v1.0.0.md")).as_deref(), Some("notes/v1.0.0"));
        assert_eq!(slugify_path(Path::new("Café Ünïcode.md")).as_deref(), Some("cafe-unicode"));
    }

    #[test]
    fn slug_edge_cases() {
        assert_eq!(slugify_path(Path::new("A  B -- C.markdown")).as_deref(), Some("a-b-c"));
        assert_eq!(slugify_path(Path::new("!!!Batch.md")).as_deref(), Some("batch"));
        assert_eq!(slugify_path(Path::new("(()).md")).as_deref(), Some("u+28-u+28-u+29-u+29"));
        assert_eq!(slugify_path(Path::new("x/(())/y.md")).as_deref(), Some("x/u+28-u+28-u+29-u+29/y"));
        assert_eq!(slugify_path(Path::new("-.md")).as_deref(), Some("u+2d"));
        assert_eq!(slugify_path(Path::new("~_.md")).as_deref(), Some("_"), "a kept character is kept");
        assert_eq!(slugify_path(Path::new("Straße/Ωmega.MD")).as_deref(), Some("straße/ωmega"));
        assert_eq!(slugify_id("exclamation mark").as_deref(), Some("exclamation-mark"));
        assert_eq!(slugify_path(Path::new("notes/file.txt")).as_deref(), Some("notes/file.txt"));
        assert_eq!(page_id("a/(c).md"), "a/(c)");
        assert_eq!(page_id("Cafe\u{301}.markdown"), "Caf\u{e9}");
    }

    #[test]
    fn a_plus_is_part_of_a_name() {
        let slug = |p: &str| slugify_path(Path::new(p));
        assert_eq!(slug("C++.md").as_deref(), Some("c++"));
        assert_ne!(slug("C++.md"), slug("C.md"));
        assert_ne!(slug("ASL+.md"), slug("ASL.md"));
        assert_eq!(slug("Notepad++ tips.md").as_deref(), Some("notepad++-tips"));
        assert_eq!(slugify_id("C++").as_deref(), Some("c++"), "a link to C++ reaches its page");
    }

    #[test]
    fn variants_are_slugs_of_their_base_only() {
        assert_eq!(slug_variant("c", 1), "c");
        assert_eq!(slug_variant("c", 2), "c~2");
        assert!(is_slug_of("c", "c") && is_slug_of("c~2", "c") && is_slug_of("c~13", "c"));
        for other in ["c~1", "c~0", "c~02", "c~", "c~x", "c++", "cc~2", "c~2~2"] {
            assert!(!is_slug_of(other, "c"), "{other}");
        }
        assert!(is_slug_of("a/b~3", "a/b"));
        assert_eq!(
            (slug_base("c~2"), slug_base("c"), slug_base("c~1"), slug_base("a~b/c")),
            ("c", "c", "c~1", "a~b/c")
        );
        for name in ["C", "(c)", "C++", "Ab~2 x"] {
            let slug = slugify_id(name).unwrap();
            assert!(!slug.contains(VARIANT_MARK), "{name}: no file's own slug holds the mark");
        }
    }

    #[test]
    fn slug_changes_count_what_slugification_does_to_a_name() {
        let changes = |p: &str| slug_changes(Path::new(p));
        assert_eq!(changes("fixed-point.md"), 0);
        assert_eq!(changes("C.md"), 1);
        assert_eq!(changes("(c).md"), 2);
        assert_eq!(changes("Pascal.md"), 1);
        assert_eq!(changes("Pascal-.md"), 2, "a dash at the end is dropped");
        assert_eq!(changes("log.md"), 0);
        assert_eq!(changes("{log}.md"), 2);
        assert_eq!(changes("Café/x.md"), 2);
        assert!(changes("language-sensitive editor.md") < changes("Language Sensitive Editor.md"));
    }

    #[test]
    fn normalisation_folds_forms_case_space_and_one_wrapper() {
        assert_eq!(normalize_name("  Hall   of\tLight "), "hall of light");
        assert_eq!(normalize_name("\"Hall of Light\""), "hall of light");
        assert_eq!(normalize_name("[[Hall of Light]]"), "hall of light");
        assert_eq!(normalize_name("((x))"), "(x)");
        assert_eq!(normalize_name("ﬁle №1"), "file no1");
        assert_eq!(normalize_name("'a'"), "a");
        assert_eq!(normalize_name("\"\""), "\"\"");
    }

    #[test]
    fn tokens_split_on_non_alphanumerics() {
        assert_eq!(tokens("Indoor Greek-Amphitheater (v2)"), ["indoor", "greek", "amphitheater", "v2"]);
        assert!(tokens("!!! 🎉").is_empty());
    }

    #[test]
    fn markdown_extension_check() {
        assert!(is_markdown(Path::new("a/b.MD")));
        assert!(is_markdown(Path::new("a.markdown")));
        assert!(!is_markdown(Path::new("a.md.tmp")));
    }
}
